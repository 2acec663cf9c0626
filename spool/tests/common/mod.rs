//! Helpers shared by the spool's integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use strait_batch::{self as batch, build};
use strait_spool::{Durability, LogConfig, Partition};

/// A small-segment configuration so tests roll often.
pub fn small(segment_bytes: u64, durability: Durability) -> LogConfig {
    LogConfig {
        segment_bytes,
        segment_age: Duration::from_secs(3600),
        index_interval_bytes: 256,
        index_bytes: 4096,
        max_batch_bytes: segment_bytes,
        retention_bytes: None,
        retention_age: None,
        durability,
    }
}

/// A batch of `n` records whose values name the batch and record, with
/// timestamps starting at `ts`.
pub fn batch_of(tag: u64, n: usize, ts: i64) -> Vec<u8> {
    let values: Vec<Vec<u8>> = (0..n)
        .map(|i| format!("batch-{tag}-record-{i}").into_bytes())
        .collect();
    let refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
    build::batch(ts, &refs)
}

/// `original` as the spool stores it at `offset`.
pub fn stamped(original: &[u8], offset: u64) -> Vec<u8> {
    let mut out = original.to_vec();
    batch::stamp(&mut out, offset as i64, 0);
    out
}

/// Reads every batch of the partition from the log start, in order,
/// returning (base offset, bytes).
pub fn read_all(p: &Partition) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut offset = p.log_start_offset();
    loop {
        let r = p.read(offset, 1 << 20).expect("read");
        if r.records.is_empty() {
            break;
        }
        for item in batch::Batches::new(&r.records) {
            let (pos, h) = item.expect("stored batches are valid");
            out.push((h.base_offset as u64, r.records[pos..pos + h.size()].to_vec()));
            offset = h.last_offset() as u64 + 1;
        }
    }
    assert_eq!(
        offset,
        p.high_watermark(),
        "read_all stopped before the high watermark"
    );
    out
}

/// Segment log files of a partition, sorted.
pub fn segment_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    files
}
