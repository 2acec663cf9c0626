//! [`FILES_PER_SEGMENT`] is what a partition really keeps open: counted in
//! `/proc/self/fd` (alone in its test binary, so no other test opens files
//! meanwhile).

use strait_batch::build;
use strait_spool::{Durability, LogConfig, Partition, FILES_PER_SEGMENT};

fn open_files() -> u64 {
    std::fs::read_dir("/proc/self/fd")
        .expect("listing /proc/self/fd")
        .count() as u64
}

#[test]
fn a_partition_holds_files_per_segment_open_for_each_segment() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 4096,
        max_batch_bytes: 4096,
        index_bytes: 4096,
        durability: Durability::Os,
        ..LogConfig::default()
    };
    let before = open_files();
    let p = Partition::open(&dir.path().join("t-0"), config.clone()).unwrap();
    assert_eq!(p.segment_count(), 1);
    assert_eq!(open_files() - before, FILES_PER_SEGMENT);

    // Rolling adds a segment, and its files, each time.
    let value = [7u8; 1500];
    while p.segment_count() < 4 {
        p.append(&build::batch(1_000, &[&value[..]])).unwrap();
    }
    assert_eq!(open_files() - before, 4 * FILES_PER_SEGMENT);
    p.close().unwrap();
    drop(p);
    assert_eq!(open_files(), before, "closing releases every file");

    // Reopened (recovery included), the count is the same.
    let p = Partition::open(&dir.path().join("t-0"), config).unwrap();
    assert_eq!(p.segment_count(), 4);
    assert_eq!(open_files() - before, 4 * FILES_PER_SEGMENT);
}
