//! A real full disk: a 1 MiB tmpfs. Appends that do not fit fail with a
//! typed, retriable error, leave the log as it was, and succeed once space
//! is freed; nothing of a failed append appears after a reopen.
//!
//! Mounting needs root (CI runs as root). Without it the test fails and
//! says so rather than skipping.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use common::{batch_of, read_all, small, stamped};
use strait_spool::{Durability, LogConfig, Partition, SpoolError};

/// A mounted tmpfs, unmounted (then its mount point removed) on drop.
///
/// One at a time: run side by side, the space a test frees (by removing
/// its filler) was now and then not yet free for its next write (about one
/// run in ten), apparently while another test's `mount` child process
/// briefly held the filler open; holding the lock keeps each test's disk
/// to itself.
struct Tmpfs(tempfile::TempDir, #[allow(dead_code)] MutexGuard<'static, ()>);

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("running mount");
        assert!(
            status.success(),
            "mounting a {size} tmpfs failed: this test needs root to create a small real file system"
        );
        Tmpfs(dir, guard)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.0.path()).status();
    }
}

#[test]
fn a_full_disk_fails_appends_cleanly_and_they_work_again_after_space_is_freed() {
    let fs = Tmpfs::mount("1m");
    let filler = fs.path().join("filler");
    std::fs::write(&filler, vec![1u8; 256 << 10]).unwrap();
    let dir = fs.path().join("topic-0");
    // Segments larger than the file system: preallocation is sparse, so the
    // disk fills while writing batches.
    let config = small(4 << 20, Durability::EveryBatch);
    let p = Partition::open(&dir, config.clone()).unwrap();
    let mut acked = Vec::new();
    let full = loop {
        let b = batch_of(acked.len() as u64, 40, 0);
        match p.append(&b) {
            Ok(info) => acked.push((info.base_offset, stamped(&b, info.base_offset))),
            Err(e) => break e,
        }
        assert!(acked.len() < 10_000, "the disk never filled");
    };
    assert!(matches!(full, SpoolError::DiskFull { .. }), "{full}");
    assert!(full.is_retriable());
    assert!(full.to_string().contains("no space left"), "{full}");
    assert!(acked.len() > 10);
    // The log is exactly what was acknowledged, and still readable.
    assert!(read_all(&p) == acked, "the log holds what was acknowledged");
    let hw = p.high_watermark();
    assert!(p.failure().is_none(), "a full disk does not fail the partition");

    // Free space; the same append now succeeds at the next offset.
    std::fs::remove_file(&filler).unwrap();
    let b = batch_of(7777, 40, 0);
    let info = p.append(&b).unwrap();
    assert_eq!(info.base_offset, hw);
    acked.push((hw, stamped(&b, hw)));

    // A crash now (no close) loses nothing acknowledged and resurrects
    // nothing that failed.
    drop(p);
    let p = Partition::open(&dir, config).unwrap();
    assert!(read_all(&p) == acked, "the log holds what was acknowledged");
}

/// Fills the file system completely with `name` (written until ENOSPC).
fn fill(fs: &Tmpfs, name: &str) -> std::path::PathBuf {
    use std::io::Write as _;
    let path = fs.path().join(name);
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0xAAu8; 64 << 10];
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
            Err(e) => panic!("filling the disk: {e}"),
        }
    }
    path
}

/// A batch of exactly `size` bytes (one record), tagged `tag`.
fn batch_sized(tag: u8, size: usize) -> Vec<u8> {
    for len in (size.saturating_sub(100)..size).rev() {
        let value = vec![tag; len];
        let b = strait_batch::build::batch(1_000, &[&value]);
        if b.len() == size {
            return b;
        }
    }
    panic!("no batch of {size} bytes");
}

#[test]
fn an_append_that_fails_on_a_page_boundary_does_not_fail_the_partition() {
    let fs = Tmpfs::mount("1m");
    let dir = fs.path().join("topic-0");
    let config = small(4 << 20, Durability::EveryBatch);
    let p = Partition::open(&dir, config.clone()).unwrap();
    // The log ends exactly on a page boundary, so the next write cannot put
    // a single byte on disk, and zeroing its header would need a new block
    // too.
    let first = batch_sized(1, 4096);
    assert_eq!(p.append(&first).unwrap().base_offset, 0);
    let filler = fill(&fs, "filler");
    let second = batch_sized(2, 300);
    let full = p.append(&second).unwrap_err();
    assert!(matches!(full, SpoolError::DiskFull { .. }), "{full}");
    assert!(full.is_retriable());
    assert_eq!(p.failure(), None, "a full disk does not fail the partition");
    let again = p.append(&second).unwrap_err();
    assert!(matches!(again, SpoolError::DiskFull { .. }), "{again}");
    assert_eq!(read_all(&p), vec![(0, stamped(&first, 0))]);

    // Space returns: the same append succeeds at the next offset, no reopen.
    std::fs::remove_file(&filler).unwrap();
    assert_eq!(p.append(&second).unwrap().base_offset, 1);
    let expected = vec![(0, stamped(&first, 0)), (1, stamped(&second, 1))];
    assert_eq!(read_all(&p), expected);
    drop(p);
    let p = Partition::open(&dir, config).unwrap();
    assert_eq!(read_all(&p), expected);
}

#[test]
fn a_call_cut_short_by_a_full_disk_leaves_no_batch_behind_a_crash() {
    let fs = Tmpfs::mount("1m");
    let dir = fs.path().join("topic-0");
    let config = small(4 << 20, Durability::EveryBatch);
    let p = Partition::open(&dir, config.clone()).unwrap();
    let first = batch_sized(1, 1000);
    p.append(&first).unwrap();
    let _filler = fill(&fs, "filler");
    // Two batches in one call: the first fits in the page the log already
    // has, the second runs into a page the disk cannot give.
    let mut call = batch_sized(2, 1000);
    call.extend_from_slice(&batch_sized(3, 4000));
    let full = p.append(&call).unwrap_err();
    assert!(matches!(full, SpoolError::DiskFull { .. }), "{full}");
    assert_eq!(p.failure(), None);
    // A crash now, and a restart on the still full disk: only the first
    // batch is there.
    drop(p);
    let p = Partition::open(&dir, config).unwrap();
    assert_eq!(read_all(&p), vec![(0, stamped(&first, 0))]);
    assert_eq!(p.high_watermark(), 1);
}

#[test]
fn a_partition_killed_on_a_full_disk_opens_serves_reads_and_appends_once_space_returns() {
    let fs = Tmpfs::mount("1m");
    let dir = fs.path().join("topic-0");
    // Segments of 8 KiB: two pages, so one segment is sealed and the active
    // one ends on a page boundary (the scan after its last batch reaches a
    // hole). Large sparse indexes: most of each index file is a hole.
    let config = LogConfig {
        index_bytes: 1 << 20,
        ..small(8192, Durability::EveryBatch)
    };
    let p = Partition::open(&dir, config.clone()).unwrap();
    let mut acked = Vec::new();
    for tag in 0..4u8 {
        let b = batch_sized(tag, 4096);
        let info = p.append(&b).unwrap();
        acked.push((info.base_offset, stamped(&b, info.base_offset)));
    }
    assert_eq!(p.segment_count(), 2);
    // A crash (no close): the recovery point on disk is behind the log.
    drop(p);
    // The sealed segment's offset index lost its blocks (a hole from byte
    // 0): reading it through a map would have to allocate.
    let index = dir.join("00000000000000000000.index");
    let len = std::fs::metadata(&index).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&index)
        .unwrap()
        .set_len(0)
        .unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&index)
        .unwrap()
        .set_len(len)
        .unwrap();
    let filler = fill(&fs, "filler");

    // Opens although its recovery point cannot be written, and nothing
    // faults reading the holes after the data.
    let p = Partition::open(&dir, config.clone()).unwrap();
    assert!(read_all(&p) == acked, "the log holds what was acknowledged");
    assert_eq!(p.high_watermark(), 4);
    let r = p.read(2, 1).unwrap();
    assert!(r.records[..] == acked[2].1[..], "offset 2 reads back as written");
    let b = batch_sized(9, 300);
    let full = p.append(&b).unwrap_err();
    assert!(matches!(full, SpoolError::DiskFull { .. }), "{full}");
    assert_eq!(p.failure(), None);

    // The verifier reads the same partition on the full disk without a
    // fault, and finds it sound.
    let report = strait_spool::verify::verify_partition(&dir).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!((report.batches, report.next_offset), (4, 4));
    let mut dumped = Vec::new();
    strait_spool::verify::dump_partition(&dir, 0, |b| {
        dumped.push((b.header.base_offset as u64, b.bytes.to_vec()))
    })
    .unwrap();
    assert!(dumped == acked, "dump shows every batch as written");

    // Space returns: appends work again without a reopen.
    std::fs::remove_file(&filler).unwrap();
    let info = p.append(&b).unwrap();
    assert_eq!(info.base_offset, 4);
    acked.push((4, stamped(&b, 4)));
    assert!(read_all(&p) == acked, "the log holds what was acknowledged");
    p.close().unwrap();
    let p = Partition::open(&dir, config).unwrap();
    assert!(read_all(&p) == acked, "the log holds what was acknowledged");
}

#[test]
fn an_index_entry_without_space_for_its_block_is_skipped_not_a_fault() {
    let fs = Tmpfs::mount("1m");
    let dir = fs.path().join("topic-0");
    let config = LogConfig {
        index_bytes: 1 << 20,
        ..small(1 << 20, Durability::EveryBatch)
    };
    let p = Partition::open(&dir, config.clone()).unwrap();
    // Exactly one free page: the first append's log write takes it, and the
    // indexes of the fresh segment get no block for their entries.
    let filler = fill(&fs, "filler");
    let len = std::fs::metadata(&filler).unwrap().len();
    assert_eq!(len % 4096, 0);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&filler)
        .unwrap()
        .set_len(len - 4096)
        .unwrap();
    let mut acked = Vec::new();
    let b = batch_sized(1, 500);
    let info = p.append(&b).unwrap();
    acked.push((info.base_offset, stamped(&b, info.base_offset)));
    let full = p.append(&batch_sized(2, 4000)).unwrap_err();
    assert!(matches!(full, SpoolError::DiskFull { .. }), "{full}");
    // Lookups work without the entries (they scan the segment).
    assert!(read_all(&p) == acked, "the log holds what was acknowledged");
    assert_eq!(p.offset_for_timestamp(0), Some((0, 1_000)));
    let report = strait_spool::verify::verify_partition(&dir).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(report.index_entries, 0);

    // Space returns: later entries are written, and a reopen finds them.
    std::fs::remove_file(&filler).unwrap();
    for tag in 2..6u8 {
        let b = batch_sized(tag, 700);
        let info = p.append(&b).unwrap();
        acked.push((info.base_offset, stamped(&b, info.base_offset)));
    }
    p.close().unwrap();
    let report = strait_spool::verify::verify_partition(&dir).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(report.index_entries > 0);
    let p = Partition::open(&dir, config).unwrap();
    assert!(read_all(&p) == acked, "the log holds what was acknowledged");
    assert_eq!(p.offset_for_timestamp(1_000), Some((0, 1_000)));
}
