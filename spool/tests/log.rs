//! Appends, reads, rolls, retention, durability and reopening of a partition.

mod common;

use std::time::Duration;

use common::{batch_of, read_all, segment_files, small, stamped};
use strait_batch::BatchError;
use strait_spool::{Durability, LogConfig, Partition, SpoolError};

#[test]
fn append_assigns_offsets_and_reads_return_the_stored_batches() {
    let dir = tempfile::tempdir().unwrap();
    let p = Partition::open(dir.path(), LogConfig::default()).unwrap();
    assert_eq!((p.log_start_offset(), p.high_watermark()), (0, 0));

    let a = batch_of(1, 3, 1_000);
    let b = batch_of(2, 1, 2_000);
    let c = batch_of(3, 5, 3_000);
    let info_a = p.append(&a).unwrap();
    assert_eq!(
        (info_a.base_offset, info_a.last_offset, info_a.batches),
        (0, 2, 1)
    );
    // Two batches in one call get consecutive offsets.
    let mut bc = b.clone();
    bc.extend_from_slice(&c);
    let info_bc = p.append(&bc).unwrap();
    assert_eq!(
        (info_bc.base_offset, info_bc.last_offset, info_bc.batches),
        (3, 8, 2)
    );
    assert!(info_bc.log_append_time_ms > 1_600_000_000_000);
    assert_eq!(p.high_watermark(), 9);

    // From offset 0: everything, byte for byte, with offsets stamped.
    let all = p.read(0, 1 << 20).unwrap();
    let mut expected = stamped(&a, 0);
    expected.extend(stamped(&b, 3));
    expected.extend(stamped(&c, 4));
    assert_eq!(&all.records[..], &expected[..]);
    assert_eq!(all.high_watermark, 9);
    let range = all.file_range.unwrap();
    assert_eq!((range.position, range.len), (0, expected.len() as u64));

    // An offset inside a batch returns that whole batch first.
    let mid = p.read(6, 1 << 20).unwrap();
    assert_eq!(&mid.records[..], &stamped(&c, 4)[..]);
    // max_bytes stops at whole batches but always returns one.
    let one = p.read(0, 1).unwrap();
    assert_eq!(&one.records[..], &stamped(&a, 0)[..]);
    let two = p.read(0, a.len() + b.len()).unwrap();
    assert_eq!(two.records.len(), a.len() + b.len());
    // At the high watermark: empty; past it or before the start: an error.
    assert!(p.read(9, 100).unwrap().records.is_empty());
    assert!(matches!(
        p.read(10, 100),
        Err(SpoolError::OffsetOutOfRange {
            offset: 10,
            log_start: 0,
            high_watermark: 9
        })
    ));
}

#[test]
fn a_bad_batch_anywhere_rejects_the_whole_call() {
    let dir = tempfile::tempdir().unwrap();
    let p = Partition::open(dir.path(), LogConfig::default()).unwrap();
    p.append(&batch_of(0, 1, 0)).unwrap();
    let good = batch_of(1, 2, 0);
    let mut bad = batch_of(2, 2, 0);
    let last = bad.len() - 1;
    bad[last] ^= 0x55;
    let mut call = good.clone();
    call.extend_from_slice(&bad);
    match p.append(&call) {
        Err(SpoolError::InvalidBatch {
            position,
            error: BatchError::Crc { .. },
        }) => assert_eq!(position, good.len()),
        other => panic!("expected a CRC error, got {other:?}"),
    }
    // A truncated tail is refused too.
    let err = p.append(&good[..good.len() - 3]).unwrap_err();
    assert!(
        matches!(err, SpoolError::InvalidBatch { position: 0, .. }),
        "{err}"
    );
    assert!(matches!(p.append(&[]), Err(SpoolError::EmptyAppend)));
    assert_eq!(p.high_watermark(), 1);
    assert_eq!(read_all(&p).len(), 1);
    // The partition still works.
    assert_eq!(p.append(&good).unwrap().base_offset, 1);
}

#[test]
fn batches_over_the_limit_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        max_batch_bytes: 200,
        ..LogConfig::default()
    };
    let p = Partition::open(dir.path(), config).unwrap();
    let big = batch_of(0, 20, 0);
    assert!(big.len() > 200);
    match p.append(&big) {
        Err(SpoolError::BatchTooLarge { size, max: 200 }) => assert_eq!(size, big.len()),
        other => panic!("{other:?}"),
    }
    assert_eq!(p.high_watermark(), 0);
}

#[test]
fn segments_roll_by_size_and_reads_cross_them_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let config = small(8192, Durability::Os);
    let p = Partition::open(dir.path(), config.clone()).unwrap();
    let mut originals = Vec::new();
    for i in 0..200 {
        let b = batch_of(i, 1 + (i as usize % 4), i as i64);
        p.append(&b).unwrap();
        originals.push(b);
    }
    assert!(p.segment_count() >= 3, "only {} segments", p.segment_count());
    let check = |p: &Partition| {
        let stored = read_all(p);
        assert_eq!(stored.len(), originals.len());
        let mut offset = 0;
        for ((base, bytes), original) in stored.iter().zip(&originals) {
            assert_eq!(*base, offset);
            assert_eq!(bytes, &stamped(original, offset));
            offset += offsets_in(original);
        }
    };
    check(&p);
    let segments = p.segment_count();
    p.close().unwrap();
    let (p, report) = Partition::open_with_report(dir.path(), config).unwrap();
    assert_eq!(
        report.segments_scanned, 1,
        "a clean reopen scans only the active segment"
    );
    assert_eq!(report.truncated, None);
    assert_eq!(p.segment_count(), segments);
    check(&p);
    // Appends continue at the right offset.
    assert_eq!(
        p.append(&batch_of(999, 1, 0)).unwrap().base_offset,
        p.high_watermark() - 1
    );
}

fn offsets_in(batch: &[u8]) -> u64 {
    strait_batch::validate(batch).unwrap().offset_count()
}

#[test]
fn segments_roll_by_age() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_age: Duration::ZERO,
        ..small(1 << 20, Durability::Os)
    };
    let p = Partition::open(dir.path(), config).unwrap();
    for i in 0..4 {
        p.append(&batch_of(i, 1, 0)).unwrap();
    }
    // The first append goes into the empty segment; each later one rolls.
    assert_eq!(p.segment_count(), 4);
    assert_eq!(read_all(&p).len(), 4);
}

#[test]
fn retention_by_bytes_deletes_oldest_segments_but_keeps_readers_slices() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        retention_bytes: Some(20_000),
        ..small(8192, Durability::Os)
    };
    let p = Partition::open(dir.path(), config).unwrap();
    for i in 0..300 {
        p.append(&batch_of(i, 2, 0)).unwrap();
    }
    let held = p.read(0, 1 << 20).unwrap();
    let held_copy = held.records.to_vec();
    let before = segment_files(dir.path()).len();
    let deleted = p.apply_retention(0).unwrap();
    assert!(deleted > 0);
    assert_eq!(segment_files(dir.path()).len(), before - deleted);
    assert!(
        p.size_bytes() >= 20_000 && p.size_bytes() < 20_000 + 8192,
        "size {}",
        p.size_bytes()
    );
    assert!(p.log_start_offset() > 0);
    assert!(matches!(p.read(0, 10), Err(SpoolError::OffsetOutOfRange { .. })));
    // The slice taken before deletion still reads the same bytes.
    assert_eq!(&held.records[..], &held_copy[..]);
    // Everything from the new start reads back, and survives a reopen.
    let start = p.log_start_offset();
    let stored = read_all(&p);
    assert_eq!(stored[0].0, start);
    p.close().unwrap();
    let p = Partition::open(dir.path(), small(8192, Durability::Os)).unwrap();
    assert_eq!(p.log_start_offset(), start);
    assert_eq!(read_all(&p), stored);
}

#[test]
fn retention_by_time_uses_the_newest_timestamp_of_each_segment() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        retention_age: Some(Duration::from_millis(1_000)),
        ..small(4096, Durability::Os)
    };
    let p = Partition::open(dir.path(), config).unwrap();
    // Old records, then new ones.
    for i in 0..60 {
        p.append(&batch_of(i, 1, 1_000 + i as i64)).unwrap();
    }
    let old_end = p.high_watermark();
    for i in 0..60 {
        p.append(&batch_of(i, 1, 100_000 + i as i64)).unwrap();
    }
    let deleted = p.apply_retention(50_000).unwrap();
    assert!(deleted > 0);
    // Only segments made wholly of old records went.
    assert!(p.log_start_offset() <= old_end);
    let stored = read_all(&p);
    assert!(
        stored.iter().any(|(o, _)| *o == old_end),
        "new records must all remain"
    );
    assert_eq!(p.apply_retention(50_000).unwrap(), 0);
}

#[test]
fn offsets_are_found_by_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let p = Partition::open(dir.path(), small(4096, Durability::Os)).unwrap();
    // Batch i holds records with timestamps 10*i and 10*i + 1.
    for i in 0..100 {
        p.append(&batch_of(i, 2, 10 * i as i64)).unwrap();
    }
    assert!(p.segment_count() > 2);
    for (ts, expected) in [
        (-5, Some((0, 1))),
        (0, Some((0, 1))),
        (1, Some((0, 1))),
        (2, Some((2, 11))),
        (500, Some((100, 501))),
        (991, Some((198, 991))),
        (992, None),
    ] {
        assert_eq!(p.offset_for_timestamp(ts), expected, "timestamp {ts}");
    }
}

#[test]
fn every_batch_is_durable_on_return_and_reopen_scans_little() {
    let dir = tempfile::tempdir().unwrap();
    let p = Partition::open(dir.path(), small(1 << 20, Durability::EveryBatch)).unwrap();
    for i in 0..10 {
        let info = p.append(&batch_of(i, 1, 0)).unwrap();
        assert_eq!(p.recovery_point(), info.last_offset + 1);
        assert_eq!(p.high_watermark(), info.last_offset + 1);
    }
}

#[test]
fn interval_policy_syncs_by_bytes_inline_and_by_time_in_flush() {
    let dir = tempfile::tempdir().unwrap();
    let config = small(
        1 << 20,
        Durability::Interval {
            every: Duration::from_millis(1),
            bytes: Some(1000),
        },
    );
    let p = Partition::open(dir.path(), config).unwrap();
    let b = batch_of(0, 1, 0);
    assert!(b.len() < 1000);
    p.append(&b).unwrap();
    assert_eq!(
        p.recovery_point(),
        0,
        "below the byte threshold nothing is synced"
    );
    assert_eq!(
        p.high_watermark(),
        1,
        "readers see unsynced data under `interval`"
    );
    while p.recovery_point() == 0 {
        // Enough bytes force a sync inside append.
        p.append(&b).unwrap();
    }
    assert_eq!(p.recovery_point(), p.high_watermark());
    p.append(&b).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    assert!(p.flush_due());
    p.flush().unwrap();
    assert_eq!(p.recovery_point(), p.high_watermark());
}

/// Many partitions synced together (one `syncfs`): each one's recovery
/// point moves to its own end, sealed segments (rolled under `os`) included,
/// and partitions with nothing to sync or already closed are answered for.
#[test]
fn partitions_flushed_together_each_reach_their_end() {
    let dir = tempfile::tempdir().unwrap();
    let interval = small(
        4096,
        Durability::Interval {
            every: Duration::from_millis(1),
            bytes: None,
        },
    );
    let mut partitions = Vec::new();
    for i in 0..20u64 {
        let config = if i % 2 == 0 {
            interval.clone()
        } else {
            small(4096, Durability::Os)
        };
        let p = Partition::open(&dir.path().join(format!("p-{i}")), config).unwrap();
        // Enough batches to roll a 4 KiB segment now and then.
        for j in 0..(i * 3) {
            p.append(&batch_of(i * 1000 + j, 4, 0)).unwrap();
        }
        partitions.push(p);
    }
    partitions[19].close().unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let results = Partition::flush_together(&partitions);
    assert_eq!(results.len(), 20);
    for (i, (p, result)) in partitions.iter().zip(results).enumerate() {
        if i == 19 {
            assert!(matches!(result, Err(SpoolError::Closed)), "{result:?}");
            continue;
        }
        result.unwrap();
        assert_eq!(p.recovery_point(), i as u64 * 12, "partition {i}");
        assert_eq!(p.recovery_point(), p.high_watermark(), "partition {i}");
        p.checkpoint().unwrap();
        // (An empty partition has never needed to write one.)
        assert_eq!(
            strait_spool::log::read_recovery_point(p.dir())
                .unwrap()
                .unwrap_or(0),
            i as u64 * 12
        );
    }
}

#[test]
fn os_policy_syncs_only_on_close_and_the_recovery_point_follows() {
    let dir = tempfile::tempdir().unwrap();
    let config = small(1 << 20, Durability::Os);
    let p = Partition::open(dir.path(), config.clone()).unwrap();
    for i in 0..5 {
        p.append(&batch_of(i, 1, 0)).unwrap();
    }
    assert_eq!(p.recovery_point(), 0);
    p.close().unwrap();
    assert_eq!(p.recovery_point(), 5);
    assert!(matches!(p.append(&batch_of(9, 1, 0)), Err(SpoolError::Closed)));
    assert_eq!(
        strait_spool::log::read_recovery_point(dir.path()).unwrap(),
        Some(5)
    );
    let p = Partition::open(dir.path(), config).unwrap();
    assert_eq!(p.high_watermark(), 5);
}

#[test]
fn configuration_limits_are_checked_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let err = Partition::open(
        dir.path(),
        LogConfig {
            segment_bytes: 5 << 30,
            ..LogConfig::default()
        },
    )
    .unwrap_err();
    assert!(matches!(err, SpoolError::InvalidConfig(_)), "{err}");
}
