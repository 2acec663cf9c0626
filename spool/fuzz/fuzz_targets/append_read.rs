//! Append calls built from the fuzz input (arbitrary bytes, or batches with
//! valid CRCs but arbitrary header fields, possibly damaged afterwards) to a
//! small-segment partition, with clean and unclean reopens in between.
//!
//! Never a panic; an append is accepted exactly when every batch validates
//! and fits; a rejected append changes nothing; reading the whole log returns
//! exactly the accepted bytes with their base offsets stamped, before and
//! after reopening.
#![no_main]

use std::path::Path;
use std::time::Duration;

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use strait_batch::{self as batch, build, Batches};
use strait_spool::{Durability, LogConfig, Partition, SpoolError};

#[derive(Debug, Arbitrary)]
struct Input {
    /// Segment size in KiB above 4.
    segment_kib: u8,
    /// Small indexes roll segments by index room.
    small_index: bool,
    index_interval: u16,
    calls: Vec<Call>,
}

#[derive(Debug, Arbitrary)]
enum Call {
    /// Arbitrary bytes.
    Raw(Vec<u8>),
    /// Batches built with valid CRCs, then optionally one byte XORed.
    Built {
        batches: Vec<Spec>,
        damage: Option<(u16, u8)>,
    },
    /// Close and open again.
    Reopen,
    /// Drop without closing and open again (nothing is lost: the page cache
    /// still holds every write).
    Crash,
}

#[derive(Debug, Arbitrary)]
struct Spec {
    values: Vec<u8>,
    timestamp: i64,
    attributes: i16,
    producer_id: i64,
    base_sequence: i32,
    /// Header fields overwritten after building, with the CRC redone.
    last_offset_delta: Option<i32>,
    record_count: Option<i32>,
    max_timestamp: Option<i64>,
    /// Base offset and leader epoch as the producer sent them (the spool
    /// overwrites both).
    base_offset: i64,
    epoch: i32,
}

impl Spec {
    fn build(&self) -> Vec<u8> {
        // Value lengths from the bytes, at most 8 records.
        let values: Vec<Vec<u8>> = self.values.iter().take(8).map(|&n| vec![n; n as usize]).collect();
        let mut refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        if refs.is_empty() {
            refs.push(b"");
        }
        let spec = build::BatchSpec {
            // The builder adds the record count to it (max_timestamp below
            // reaches the extremes).
            base_timestamp: self.timestamp.min(i64::MAX - 16),
            producer_id: self.producer_id,
            producer_epoch: 0,
            base_sequence: self.base_sequence,
            attributes: self.attributes,
            max_timestamp: None,
        };
        let mut b = build::batch_with(spec, &refs);
        if let Some(d) = self.last_offset_delta {
            b[23..27].copy_from_slice(&d.to_be_bytes());
        }
        if let Some(t) = self.max_timestamp {
            b[35..43].copy_from_slice(&t.to_be_bytes());
        }
        if let Some(n) = self.record_count {
            b[57..61].copy_from_slice(&n.to_be_bytes());
        }
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        batch::stamp(&mut b, self.base_offset, self.epoch);
        b
    }
}

struct Log {
    /// Accepted batches as stored: (base offset, bytes).
    batches: Vec<(u64, Vec<u8>)>,
    next: u64,
}

fuzz_target!(|input: Input| {
    let root = if Path::new("/dev/shm").is_dir() {
        Path::new("/dev/shm")
    } else {
        Path::new("/tmp")
    };
    let dir = tempfile::tempdir_in(root).unwrap();
    let segment_bytes = 4096 + (input.segment_kib as u64 % 16) * 1024;
    let config = LogConfig {
        segment_bytes,
        segment_age: Duration::from_secs(3600),
        index_interval_bytes: input.index_interval as u64 + 1,
        index_bytes: if input.small_index { 64 } else { 4096 },
        max_batch_bytes: segment_bytes,
        retention_bytes: None,
        retention_age: None,
        durability: Durability::Os,
    };
    let mut p = Partition::open(dir.path(), config.clone()).unwrap();
    let mut log = Log {
        batches: Vec::new(),
        next: 0,
    };
    for call in input.calls.iter().take(24) {
        match call {
            Call::Raw(data) => append(&p, &config, &mut log, data),
            Call::Built { batches, damage } => {
                let mut data: Vec<u8> = batches.iter().take(8).flat_map(Spec::build).collect();
                if let Some((at, mask)) = damage {
                    if !data.is_empty() {
                        let at = *at as usize % data.len();
                        data[at] ^= mask;
                    }
                }
                append(&p, &config, &mut log, &data);
            }
            Call::Reopen => {
                p.close().unwrap();
                p = reopen(dir.path(), &config, &log);
            }
            Call::Crash => {
                drop(p);
                p = reopen(dir.path(), &config, &log);
            }
        }
    }
    check(&p, &log);
    p.close().unwrap();
    let p = reopen(dir.path(), &config, &log);
    p.close().unwrap();
});

fn reopen(dir: &Path, config: &LogConfig, log: &Log) -> Partition {
    let (p, report) = Partition::open_with_report(dir, config.clone()).unwrap();
    assert_eq!(
        (&report.truncated, report.segments_dropped),
        (&None, 0),
        "reopen cut data"
    );
    check(&p, log);
    p
}

/// Whether the spool must take `data`, judged by the batch iterator.
fn acceptable(config: &LogConfig, data: &[u8]) -> bool {
    !data.is_empty()
        && data.len() as u64 <= config.segment_bytes
        && Batches::new(data).all(|item| item.is_ok_and(|(_, h)| h.size() as u64 <= config.max_batch_bytes))
        // Relative offsets are 32-bit: one call may span at most u32::MAX.
        && Batches::new(data)
            .map(|item| item.map_or(0, |(_, h)| h.offset_count()))
            .sum::<u64>()
            <= u32::MAX as u64
}

fn append(p: &Partition, config: &LogConfig, log: &mut Log, data: &[u8]) {
    let before = p.high_watermark();
    assert_eq!(before, log.next);
    match p.append(data) {
        Ok(info) => {
            assert!(acceptable(config, data), "accepted a call the iterator refuses");
            assert_eq!(info.base_offset, log.next);
            assert_eq!(info.bytes, data.len());
            let mut offset = log.next;
            for item in Batches::new(data) {
                let (pos, h) = item.unwrap();
                let mut stored = data[pos..pos + h.size()].to_vec();
                batch::stamp(&mut stored, offset as i64, 0);
                log.batches.push((offset, stored));
                offset += h.offset_count();
            }
            assert_eq!(info.last_offset, offset - 1);
            log.next = offset;
            assert_eq!(p.high_watermark(), offset);
        }
        Err(e) => {
            assert!(
                matches!(
                    e,
                    SpoolError::InvalidBatch { .. }
                        | SpoolError::BatchTooLarge { .. }
                        | SpoolError::OffsetSpan { .. }
                        | SpoolError::EmptyAppend
                ),
                "unexpected append error: {e}"
            );
            assert!(!acceptable(config, data), "refused a valid call: {e}");
            assert_eq!(
                p.high_watermark(),
                before,
                "a refused call moved the high watermark"
            );
        }
    }
}

/// Reads the whole log and compares it with what was accepted.
fn check(p: &Partition, log: &Log) {
    assert_eq!(p.high_watermark(), log.next);
    assert_eq!(p.log_start_offset(), 0);
    let mut got: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut offset = 0;
    while offset < log.next {
        let r = p.read(offset, 1 << 16).unwrap();
        assert!(
            !r.records.is_empty(),
            "empty read at {offset} below the high watermark {}",
            log.next
        );
        for item in Batches::new(&r.records) {
            let (pos, h) = item.expect("a stored batch does not validate");
            got.push((h.base_offset as u64, r.records[pos..pos + h.size()].to_vec()));
            let next = h.last_offset() as u64 + 1;
            assert!(next > offset, "reads do not advance");
            offset = next;
        }
    }
    assert_eq!(got.len(), log.batches.len(), "number of stored batches");
    for (g, w) in got.iter().zip(&log.batches) {
        assert!(g == w, "stored batch at {} differs", w.0);
    }
}
