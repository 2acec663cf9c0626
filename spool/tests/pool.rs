//! The I/O pool: appends and reads as futures, group commit, concurrent
//! readers during appends, housekeeping and shutdown.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{batch_of, read_all, segment_files, small, stamped};
use strait_batch::{self as batch, Batches};
use strait_spool::pool::{block_on, PoolOptions};
use strait_spool::{Durability, IoPool, Partition};

#[test]
fn concurrent_appends_through_the_pool_get_contiguous_offsets_with_group_commit() {
    let root = tempfile::tempdir().unwrap();
    let pool = Arc::new(IoPool::new(PoolOptions::default()));
    let partitions: Vec<Partition> = (0..3)
        .map(|i| {
            Partition::open(
                &root.path().join(format!("t-{i}")),
                small(64 << 10, Durability::EveryBatch),
            )
            .unwrap()
        })
        .collect();
    let threads: Vec<_> = (0..6u64)
        .map(|t| {
            let pool = Arc::clone(&pool);
            let partitions = partitions.clone();
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                for i in 0..100u64 {
                    let p = &partitions[((t + i) % 3) as usize];
                    let b = batch_of(t * 1000 + i, 1 + (i % 3) as usize, i as i64);
                    let info = block_on(pool.append(p, Bytes::from(b.clone()))).unwrap();
                    // Durable when acknowledged under every_batch.
                    assert!(p.recovery_point() > info.last_offset);
                    acked.push(((t + i) % 3, info.base_offset, b));
                }
                acked
            })
        })
        .collect();
    let mut acked: Vec<_> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    acked.sort_by_key(|(p, o, _)| (*p, *o));
    for (i, p) in partitions.iter().enumerate() {
        let mine: Vec<(u64, Vec<u8>)> = acked
            .iter()
            .filter(|(pi, ..)| *pi == i as u64)
            .map(|(_, o, b)| (*o, stamped(b, *o)))
            .collect();
        assert_eq!(
            read_all(p),
            mine,
            "partition {i}: every acknowledged batch, once, at its offset"
        );
        // Reads through the pool agree.
        let r = block_on(pool.read(p, 0, 1 << 20)).unwrap();
        assert_eq!(&r.records[..], &p.read(0, 1 << 20).unwrap().records[..]);
    }
}

#[test]
fn readers_see_only_whole_valid_batches_while_appends_and_rolls_run() {
    let dir = tempfile::tempdir().unwrap();
    let p = Partition::open(dir.path(), small(16 << 10, Durability::Os)).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let p = p.clone();
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let mut offset = 0u64;
                let mut batches = 0u64;
                while !done.load(Ordering::Acquire) || offset < p.high_watermark() {
                    let r = p.read(offset, 4096).unwrap();
                    for item in Batches::new(&r.records) {
                        let (_, h) = item.expect("a reader saw a torn batch");
                        assert_eq!(h.base_offset as u64, offset, "offsets are contiguous");
                        offset = h.last_offset() as u64 + 1;
                        batches += 1;
                    }
                }
                batches
            })
        })
        .collect();
    for i in 0..2000 {
        p.append(&batch_of(i, 1 + (i % 4) as usize, 0)).unwrap();
    }
    done.store(true, Ordering::Release);
    for r in readers {
        assert_eq!(r.join().unwrap(), 2000);
    }
    assert!(p.segment_count() > 10);
}

#[test]
fn housekeeping_syncs_interval_partitions_and_shutdown_closes_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = small(
        1 << 20,
        Durability::Interval {
            every: Duration::from_millis(20),
            bytes: None,
        },
    );
    let pool = IoPool::new(PoolOptions {
        checkpoint_interval: Duration::from_millis(50),
        ..PoolOptions::default()
    });
    let p = Partition::open(dir.path(), config.clone()).unwrap();
    pool.register(&p);
    for i in 0..10 {
        block_on(pool.append(&p, Bytes::from(batch_of(i, 1, 0)))).unwrap();
    }
    // The housekeeper syncs and checkpoints on its own; wait for it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while strait_spool::log::read_recovery_point(dir.path()).unwrap() != Some(10) {
        assert!(
            Instant::now() < deadline,
            "the housekeeper never persisted the recovery point"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(p.recovery_point(), 10);
    block_on(pool.append(&p, Bytes::from(batch_of(10, 1, 0)))).unwrap();
    pool.shutdown().unwrap();
    // Shutdown closed the partition: synced, checkpointed, no more appends.
    assert_eq!(
        strait_spool::log::read_recovery_point(dir.path()).unwrap(),
        Some(11)
    );
    assert!(p.append(&batch_of(11, 1, 0)).is_err());
}

#[test]
fn invalid_batches_are_refused_through_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let p = Partition::open(dir.path(), small(1 << 20, Durability::Os)).unwrap();
    let pool = IoPool::new(PoolOptions::default());
    let bad = {
        let mut b = batch_of(0, 1, 0);
        b[16] = 1;
        b
    };
    let err = block_on(pool.append(&p, Bytes::from(bad))).unwrap_err();
    assert!(matches!(
        err,
        strait_spool::SpoolError::InvalidBatch {
            error: batch::BatchError::Magic(1),
            ..
        }
    ));
    drop(pool);
    assert_eq!(p.high_watermark(), 0);
}

/// Retention runs on the pool's `retention_interval`: with a short one the
/// log start offset moves and old segment files go; with a long one nothing
/// is deleted in the meantime.
#[test]
fn housekeeping_applies_retention_at_the_configured_interval() {
    let fill = |dir: &std::path::Path, pool: &IoPool| {
        let config = strait_spool::LogConfig {
            retention_bytes: Some(8 << 10),
            ..small(4 << 10, Durability::Os)
        };
        let p = Partition::open(dir, config).unwrap();
        pool.register(&p);
        let mut tag = 0;
        while p.segment_count() < 6 {
            block_on(pool.append(&p, Bytes::from(batch_of(tag, 20, 0)))).unwrap();
            tag += 1;
        }
        assert_eq!(p.log_start_offset(), 0);
        p
    };

    // Every 100ms: retention keeps about 8 KiB, deleting the oldest files.
    let dir = tempfile::tempdir().unwrap();
    let pool = IoPool::new(PoolOptions {
        retention_interval: Duration::from_millis(100),
        ..PoolOptions::default()
    });
    let p = fill(dir.path(), &pool);
    let (segments, high_watermark) = (p.segment_count(), p.high_watermark());
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.log_start_offset() == 0 {
        assert!(Instant::now() < deadline, "retention never ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(p.segment_count() < segments, "{} segments", p.segment_count());
    assert!(p.size_bytes() < 16 << 10, "{} bytes kept", p.size_bytes());
    assert_eq!(segment_files(dir.path()).len(), p.segment_count());
    let first = segment_files(dir.path())[0].clone();
    assert_eq!(
        first.file_name().unwrap().to_str().unwrap(),
        format!("{:020}.log", p.log_start_offset())
    );
    assert_eq!(read_all(&p)[0].0, p.log_start_offset());
    assert_eq!(p.high_watermark(), high_watermark, "only old data goes");
    pool.shutdown().unwrap();

    // Every hour: a second later the same partition is still whole.
    let dir = tempfile::tempdir().unwrap();
    let pool = IoPool::new(PoolOptions {
        retention_interval: Duration::from_secs(3600),
        ..PoolOptions::default()
    });
    let p = fill(dir.path(), &pool);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(p.log_start_offset(), 0);
    assert_eq!(segment_files(dir.path()).len(), p.segment_count());
    pool.shutdown().unwrap();
}
