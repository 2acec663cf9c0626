//! A real full disk: a 1 MiB tmpfs. Appends that do not fit fail with a
//! typed, retriable error, leave the log as it was, and succeed once space
//! is freed; nothing of a failed append appears after a reopen.
//!
//! Mounting needs root (CI runs as root). Without it the test fails and
//! says so rather than skipping.

mod common;

use std::path::Path;
use std::process::Command;

use common::{batch_of, read_all, small, stamped};
use strait_spool::{Durability, Partition, SpoolError};

/// A mounted tmpfs, unmounted (then its mount point removed) on drop.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
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
        Tmpfs(dir)
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
    assert_eq!(read_all(&p), acked);
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
    assert_eq!(read_all(&p), acked);
}
