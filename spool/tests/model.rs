//! Model-based property test of a partition: random sequences of appends,
//! reads, timestamp lookups, flushes, retention, clean reopens and crashes
//! (with a damaged tail) against a plain in-memory list of stored batches.
//!
//! The model knows nothing of segments; where an answer depends on segment
//! boundaries (reads stop at the end of a segment, retention drops whole
//! segments, a crash damages the last segment) the boundaries are taken from
//! the segment file names on disk, and the model checks that they fall on
//! batch boundaries.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{read_all, segment_files, small, stamped};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::Config;
use strait_batch::{self as batch, build};
use strait_spool::{Durability, LogConfig, Partition, SpoolError};

// ---------------------------------------------------------------------------
// Operations and their strategies.

/// Segment and index geometry plus durability of a partition configuration.
#[derive(Debug, Clone)]
struct Shape {
    segment_bytes: u64,
    index_interval_bytes: u64,
    index_bytes: u64,
    durability: Durability,
}

impl Shape {
    fn config(&self, retention_bytes: Option<u64>) -> LogConfig {
        LogConfig {
            index_interval_bytes: self.index_interval_bytes,
            index_bytes: self.index_bytes,
            retention_bytes,
            ..small(self.segment_bytes, self.durability)
        }
    }
}

/// One batch to build: value lengths (one per record), base timestamp, a
/// byte to fill the values with, and a gap of unused offsets at its end (as
/// compaction leaves: lastOffsetDelta above recordCount - 1).
#[derive(Debug, Clone)]
struct Spec {
    values: Vec<usize>,
    timestamp: i64,
    fill: u8,
    gap: i32,
}

impl Spec {
    fn build(&self) -> Vec<u8> {
        let values: Vec<Vec<u8>> = self
            .values
            .iter()
            .enumerate()
            .map(|(i, &len)| vec![self.fill.wrapping_add(i as u8); len])
            .collect();
        let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        let built = build::batch(self.timestamp, &refs);
        if self.gap == 0 {
            built
        } else {
            with_last_offset_delta(built, self.values.len() as i32 - 1 + self.gap)
        }
    }
}

/// How an append call is made invalid.
#[derive(Debug, Clone)]
enum Corrupt {
    /// XOR a byte at or after the magic (magic, CRC or CRC-covered bytes) of
    /// one batch.
    Flip { which: Index, at: Index, mask: u8 },
    /// Cut the last batch short (at least one byte of it stays).
    Cut(Index),
}

/// Damage done to the last segment file after a crash, always at or after
/// the end of the last synced batch.
#[derive(Debug, Clone)]
enum Damage {
    /// Truncate the file somewhere in `[synced end, file length]`.
    Truncate(Index),
    /// Overwrite bytes starting in `[synced end, data end]`.
    Overwrite { at: Index, bytes: Vec<u8> },
    /// Zero `[p, data end)` for some p in `[synced end, data end]`: the tail
    /// never reached the disk.
    ZeroTail(Index),
    /// Write garbage `gap` bytes after the data end.
    Garbage { gap: usize, bytes: Vec<u8> },
}

#[derive(Debug, Clone)]
enum Op {
    Append {
        batches: Vec<Spec>,
        corrupt: Option<Corrupt>,
    },
    Read {
        at: Index,
        max_bytes: usize,
    },
    /// Read below the log start (if there is room) or past the high watermark.
    ReadOutside {
        below: bool,
        by: u64,
    },
    FindTimestamp(i64),
    Flush,
    /// Retention by bytes; with `Some(_)` first close and reopen with a
    /// limit picked relative to the log's size, else use the limit the
    /// partition was opened with.
    Retention {
        reopen_with: Option<Index>,
    },
    /// Close and reopen, possibly with a different geometry / durability.
    Reopen(Option<Shape>),
    /// Drop without close, damage the tail of the last segment, reopen.
    Crash(Damage),
}

fn durability() -> impl Strategy<Value = Durability> {
    prop_oneof![
        2 => Just(Durability::Os),
        2 => (500u64..6000).prop_map(|b| Durability::Interval {
            every: Duration::from_secs(3600),
            bytes: Some(b),
        }),
        1 => Just(Durability::EveryBatch),
    ]
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        prop_oneof![3 => 4096u64..8192, 1 => 8192u64..16384],
        prop_oneof![Just(1u64), Just(128), Just(256), Just(4096)],
        prop_oneof![1 => Just(64u64), 1 => Just(240), 3 => Just(4096)],
        durability(),
    )
        .prop_map(
            |(segment_bytes, index_interval_bytes, index_bytes, durability)| Shape {
                segment_bytes,
                index_interval_bytes,
                index_bytes,
                durability,
            },
        )
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::collection::vec(0usize..300, 1..=5),
        prop_oneof![4 => 0i64..5000, 1 => -3i64..3],
        any::<u8>(),
        prop_oneof![6 => Just(0i32), 1 => 1i32..4],
    )
        .prop_map(|(values, timestamp, fill, gap)| Spec {
            values,
            timestamp,
            fill,
            gap,
        })
}

fn corrupt() -> impl Strategy<Value = Corrupt> {
    prop_oneof![
        3 => (any::<Index>(), any::<Index>(), 1u8..=255).prop_map(|(which, at, mask)| Corrupt::Flip { which, at, mask }),
        1 => any::<Index>().prop_map(Corrupt::Cut),
    ]
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        any::<Index>().prop_map(Damage::Truncate),
        (any::<Index>(), prop::collection::vec(any::<u8>(), 1..64))
            .prop_map(|(at, bytes)| Damage::Overwrite { at, bytes }),
        any::<Index>().prop_map(Damage::ZeroTail),
        (0usize..64, prop::collection::vec(any::<u8>(), 1..200))
            .prop_map(|(gap, bytes)| Damage::Garbage { gap, bytes }),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (prop::collection::vec(spec(), 1..=4), prop::option::weighted(0.15, corrupt()))
            .prop_map(|(batches, corrupt)| Op::Append { batches, corrupt }),
        4 => (any::<Index>(), prop_oneof![0usize..400, 400usize..20_000])
            .prop_map(|(at, max_bytes)| Op::Read { at, max_bytes }),
        1 => (any::<bool>(), 1u64..50).prop_map(|(below, by)| Op::ReadOutside { below, by }),
        1 => (-5i64..5200).prop_map(Op::FindTimestamp),
        1 => Just(Op::Flush),
        1 => prop::option::of(any::<Index>()).prop_map(|reopen_with| Op::Retention { reopen_with }),
        1 => prop::option::weighted(0.3, shape()).prop_map(Op::Reopen),
        3 => damage().prop_map(Op::Crash),
    ]
}

// ---------------------------------------------------------------------------
// The model.

/// A batch as the spool must store it.
#[derive(Debug, Clone)]
struct Stored {
    base: u64,
    count: u64,
    max_timestamp: i64,
    bytes: Vec<u8>,
}

impl Stored {
    fn end(&self) -> u64 {
        self.base + self.count
    }
}

#[derive(Debug, Default)]
struct Model {
    batches: Vec<Stored>,
    log_start: u64,
}

impl Model {
    fn next(&self) -> u64 {
        self.batches.last().map_or(self.log_start, Stored::end)
    }

    /// Index of the batch holding `offset`.
    fn holding(&self, offset: u64) -> usize {
        let i = self.batches.partition_point(|b| b.end() <= offset);
        assert!(self.batches[i].base <= offset, "model gap at {offset}");
        i
    }
}

/// A partition under test together with its model.
struct Harness {
    dir: tempfile::TempDir,
    shape: Shape,
    retention_bytes: Option<u64>,
    p: Option<Partition>,
    model: Model,
}

fn base_of(path: &Path) -> u64 {
    path.file_stem().unwrap().to_str().unwrap().parse().unwrap()
}

impl Harness {
    fn new(shape: Shape, retention_bytes: Option<u64>) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let p = Partition::open(dir.path(), shape.config(retention_bytes)).unwrap();
        Harness {
            dir,
            shape,
            retention_bytes,
            p: Some(p),
            model: Model::default(),
        }
    }

    fn p(&self) -> &Partition {
        self.p.as_ref().expect("partition is open")
    }

    fn config(&self) -> LogConfig {
        self.shape.config(self.retention_bytes)
    }

    /// Base offsets of the segments on disk, checked against the model:
    /// the first is the log start, each falls on a batch boundary, and
    /// every segment but the last holds at least one batch.
    fn segments(&self) -> Vec<u64> {
        let bases: Vec<u64> = segment_files(self.dir.path())
            .iter()
            .map(|p| base_of(p))
            .collect();
        assert!(!bases.is_empty(), "no segment file");
        assert_eq!(
            bases[0], self.model.log_start,
            "first segment is not the log start"
        );
        for (i, &base) in bases.iter().enumerate() {
            let last = i + 1 == bases.len();
            let starts_batch = self.model.batches.iter().any(|b| b.base == base);
            assert!(
                starts_batch || (last && base == self.model.next()),
                "segment base {base} is not a batch boundary (segments {bases:?})"
            );
            if !last {
                assert!(bases[i + 1] > base, "segments out of order: {bases:?}");
            }
        }
        bases
    }

    /// The partition agrees with the model in everything readers can see.
    fn check(&self) {
        let p = self.p();
        assert_eq!(p.log_start_offset(), self.model.log_start, "log start");
        assert_eq!(p.high_watermark(), self.model.next(), "high watermark");
        let rp = p.recovery_point();
        assert!(rp <= self.model.next(), "recovery point {rp} past the end");
        if self.shape.durability == Durability::EveryBatch {
            assert_eq!(rp, self.model.next(), "every_batch left data unsynced");
        }
        let stored = read_all(p);
        assert_eq!(stored.len(), self.model.batches.len(), "number of batches");
        for (got, want) in stored.iter().zip(&self.model.batches) {
            assert_eq!(got.0, want.base, "base offset");
            assert!(got.1 == want.bytes, "bytes of the batch at {} differ", want.base);
        }
        let expected_size: u64 = self.model.batches.iter().map(|b| b.bytes.len() as u64).sum();
        assert_eq!(p.size_bytes(), expected_size, "size_bytes");
        let bases = self.segments();
        assert_eq!(p.segment_count(), bases.len(), "segment count vs files");
    }

    fn reopen(&mut self) {
        self.p().close().unwrap();
        // Reads keep working on a closed partition; appends do not.
        assert!(matches!(
            self.p().append(&build::batch(0, &[b"late"])),
            Err(SpoolError::Closed)
        ));
        assert_eq!(
            self.p().recovery_point(),
            self.model.next(),
            "close did not sync everything"
        );
        self.p = Some(Partition::open(self.dir.path(), self.config()).unwrap());
        self.check();
    }

    fn run(&mut self, op: &Op) {
        match op {
            Op::Append { batches, corrupt } => self.append(batches, corrupt.as_ref()),
            Op::Read { at, max_bytes } => self.read(at, *max_bytes),
            Op::ReadOutside { below, by } => {
                let offset = if *below {
                    match self.model.log_start.checked_sub(*by) {
                        Some(o) => o,
                        None => return,
                    }
                } else {
                    self.model.next() + by
                };
                match self.p().read(offset, 1 << 20) {
                    Err(SpoolError::OffsetOutOfRange {
                        offset: o,
                        log_start,
                        high_watermark,
                    }) => {
                        assert_eq!(
                            (o, log_start, high_watermark),
                            (offset, self.model.log_start, self.model.next())
                        );
                    }
                    other => panic!("read at {offset} outside the log: {other:?}"),
                }
            }
            Op::FindTimestamp(ts) => {
                let want = self
                    .model
                    .batches
                    .iter()
                    .find(|b| b.max_timestamp >= *ts)
                    .map(|b| (b.base, b.max_timestamp));
                assert_eq!(
                    self.p().offset_for_timestamp(*ts),
                    want,
                    "offset_for_timestamp({ts})"
                );
            }
            Op::Flush => {
                self.p().flush().unwrap();
                assert_eq!(
                    self.p().recovery_point(),
                    self.model.next(),
                    "flush left data unsynced"
                );
            }
            Op::Retention { reopen_with } => self.retention(reopen_with.as_ref()),
            Op::Reopen(shape) => {
                if let Some(shape) = shape {
                    self.shape = shape.clone();
                }
                self.reopen();
            }
            Op::Crash(damage) => self.crash(damage),
        }
    }

    fn append(&mut self, specs: &[Spec], corrupt: Option<&Corrupt>) {
        let originals: Vec<Vec<u8>> = specs.iter().map(Spec::build).collect();
        let mut starts = Vec::new();
        let mut call = Vec::new();
        for b in &originals {
            starts.push(call.len());
            call.extend_from_slice(b);
        }
        let hw = self.model.next();
        let bad_at = corrupt.map(|c| match c {
            Corrupt::Flip { which, at, mask } => {
                let j = which.index(originals.len());
                let len = originals[j].len();
                call[starts[j] + 16 + at.index(len - 16)] ^= mask;
                starts[j]
            }
            Corrupt::Cut(cut) => {
                let j = originals.len() - 1;
                let len = originals[j].len();
                call.truncate(call.len() - 1 - cut.index(len - 1));
                starts[j]
            }
        });
        let result = self.p().append(&call);
        if let Some(position) = bad_at {
            match result {
                Err(SpoolError::InvalidBatch { position: p, .. }) => {
                    assert_eq!(p, position, "reported position")
                }
                other => panic!("a corrupt call was not rejected as such: {other:?}"),
            }
            assert_eq!(
                self.p().high_watermark(),
                hw,
                "a rejected call moved the high watermark"
            );
            return;
        }
        if call.len() as u64 > self.shape.segment_bytes {
            assert!(
                matches!(result, Err(SpoolError::BatchTooLarge { .. })),
                "call of {} bytes over a {}-byte segment: {result:?}",
                call.len(),
                self.shape.segment_bytes
            );
            assert_eq!(self.p().high_watermark(), hw);
            return;
        }
        let info = result.unwrap();
        let mut offset = hw;
        for b in &originals {
            let h = batch::validate(b).unwrap();
            self.model.batches.push(Stored {
                base: offset,
                count: h.offset_count(),
                max_timestamp: h.max_timestamp,
                bytes: stamped(b, offset),
            });
            offset += h.offset_count();
        }
        assert_eq!(
            (info.base_offset, info.last_offset, info.batches, info.bytes),
            (hw, offset - 1, originals.len(), call.len()),
            "append info"
        );
        assert_eq!(self.p().high_watermark(), offset, "high watermark after append");
    }

    /// A read returns the batch holding the offset and then following
    /// batches of the same segment while they fit in `max_bytes`.
    fn read(&self, at: &Index, max_bytes: usize) {
        let (start, hw) = (self.model.log_start, self.model.next());
        let offset = start + at.index((hw - start + 1) as usize) as u64;
        let r = self.p().read(offset, max_bytes).unwrap();
        assert_eq!(
            (r.log_start_offset, r.high_watermark),
            (start, hw),
            "read result bounds"
        );
        if offset == hw {
            assert!(r.records.is_empty(), "read at the high watermark returned data");
            return;
        }
        let bases = self.segments();
        let first = self.model.holding(offset);
        let seg_end = bases
            .iter()
            .copied()
            .find(|&b| b > self.model.batches[first].base)
            .unwrap_or(u64::MAX);
        let mut want: Vec<u8> = self.model.batches[first].bytes.clone();
        for b in &self.model.batches[first + 1..] {
            if b.base >= seg_end || want.len() + b.bytes.len() > max_bytes {
                break;
            }
            want.extend_from_slice(&b.bytes);
        }
        assert!(
            r.records[..] == want[..],
            "read({offset}, {max_bytes}) returned {} bytes, expected {}",
            r.records.len(),
            want.len()
        );
        let range = r.file_range.expect("a read with data has a file range");
        assert_eq!(range.len, want.len() as u64, "file range length");
        let mut from_file = vec![0; want.len()];
        std::os::unix::fs::FileExt::read_exact_at(&*range.file, &mut from_file, range.position).unwrap();
        assert!(from_file == want, "file range does not hold the returned bytes");
    }

    fn retention(&mut self, reopen_with: Option<&Index>) {
        if let Some(limit) = reopen_with {
            // Somewhere between nothing and a little more than the log holds.
            let size: u64 = self.model.batches.iter().map(|b| b.bytes.len() as u64).sum();
            let limit = limit.index(size as usize + 2000) as u64;
            self.retention_bytes = Some(limit);
            self.reopen();
        }
        let before = self.model.log_start;
        let bases = self.segments();
        let size_of = |i: usize| -> u64 {
            let hi = bases.get(i + 1).copied().unwrap_or(u64::MAX);
            self.model
                .batches
                .iter()
                .filter(|b| b.base >= bases[i] && b.base < hi)
                .map(|b| b.bytes.len() as u64)
                .sum()
        };
        let mut total: u64 = (0..bases.len()).map(size_of).sum();
        let mut expected = 0;
        for i in 0..bases.len() - 1 {
            let size = size_of(i);
            if self.retention_bytes.is_none_or(|limit| total - size < limit) {
                break;
            }
            total -= size;
            expected += 1;
        }
        let deleted = self.p().apply_retention(0).unwrap();
        assert_eq!(
            deleted, expected,
            "segments deleted (bases {bases:?}, limit {:?})",
            self.retention_bytes
        );
        let new_start = bases[expected];
        assert!(new_start >= before);
        self.model.batches.retain(|b| b.base >= new_start);
        self.model.log_start = new_start;
        assert_eq!(self.segments(), bases[expected..].to_vec(), "segment files left");
        self.check();
        if new_start > 0 {
            assert!(matches!(
                self.p().read(new_start - 1, 100),
                Err(SpoolError::OffsetOutOfRange { .. })
            ));
        }
    }

    fn crash(&mut self, damage: &Damage) {
        let rp = self.p().recovery_point();
        let files = segment_files(self.dir.path());
        let last: PathBuf = files.last().unwrap().clone();
        let last_base = base_of(&last);
        let in_last: Vec<&Stored> = self
            .model
            .batches
            .iter()
            .filter(|b| b.base >= last_base)
            .collect();
        let mut positions = Vec::new();
        let mut data_end = 0usize;
        let mut synced_end = 0usize;
        for b in &in_last {
            positions.push(data_end);
            data_end += b.bytes.len();
            if b.end() <= rp {
                synced_end = data_end;
            }
        }

        // Crash: no close, no sync.
        drop(self.p.take());

        let before = std::fs::read(&last).unwrap();
        assert!(before.len() >= data_end, "segment file shorter than its data");
        let concat: Vec<u8> = in_last.iter().flat_map(|b| b.bytes.iter().copied()).collect();
        assert!(
            before[..data_end] == concat[..],
            "segment file does not hold the appended batches"
        );

        let mut after = before.clone();
        match damage {
            Damage::Truncate(at) => after.truncate(synced_end + at.index(before.len() - synced_end + 1)),
            Damage::Overwrite { at, bytes } => {
                let pos = synced_end + at.index(data_end - synced_end + 1);
                for (i, &byte) in bytes.iter().enumerate() {
                    if let Some(slot) = after.get_mut(pos + i) {
                        *slot = byte;
                    }
                }
                // The leader epoch lies outside the CRC (as in Kafka): a
                // change there cannot be detected, so leave it alone.
                for &q in &positions {
                    after[q + 12..q + 16].copy_from_slice(&before[q + 12..q + 16]);
                }
            }
            Damage::ZeroTail(at) => {
                let pos = synced_end + at.index(data_end - synced_end + 1);
                after[pos..data_end].fill(0);
            }
            Damage::Garbage { gap, bytes } => {
                let pos = data_end + gap;
                for (i, &byte) in bytes.iter().enumerate() {
                    if let Some(slot) = after.get_mut(pos + i) {
                        *slot = byte;
                    }
                }
            }
        }
        std::fs::write(&last, &after).unwrap();

        // Bytes past the end of a truncated file read as zeros once it is
        // extended again.
        let len = before.len().max(after.len());
        let first_changed = (0..len)
            .find(|&i| before.get(i).copied().unwrap_or(0) != after.get(i).copied().unwrap_or(0))
            .unwrap_or(usize::MAX);
        assert!(first_changed >= synced_end, "damage below the synced end");
        let survivors = positions
            .iter()
            .zip(&in_last)
            .take_while(|(&pos, b)| pos + b.bytes.len() <= first_changed)
            .count();
        let keep = self.model.batches.len() - in_last.len() + survivors;

        let (p, report) = Partition::open_with_report(self.dir.path(), self.config()).unwrap();
        self.p = Some(p);
        assert_eq!(
            report.segments_dropped, 0,
            "only the last segment was damaged: {report:?}"
        );
        self.model.batches.truncate(keep);
        self.check();
        assert!(
            self.p().high_watermark() >= rp,
            "recovery lost synced data: high watermark {} below recovery point {rp}",
            self.p().high_watermark()
        );
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(Config {
        cases: cases(),
        // Regression files would land outside this test's file; a failure
        // prints the minimal case instead.
        failure_persistence: None,
        ..Config::default()
    })]

    /// Until bug 1 below is fixed this fails now and then (a stale tail
    /// left by a `Garbage` crash later costs data); everything else holds.
    #[test]
    fn partition_behaves_like_the_model(
        shape in shape(),
        retention_bytes in prop::option::of(0u64..30_000),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let mut h = Harness::new(shape, retention_bytes);
        for op in &ops {
            h.run(op);
            h.check();
        }
        h.reopen();
    }
}

// ---------------------------------------------------------------------------
// Minimal reproductions of spool bugs (these fail until they are fixed).
//
// 1. Recovery stops "clean" where it meets 12 zero bytes (the preallocated
//    tail) but leaves whatever follows in the file. After a torn write — a
//    later page of an append reached the disk, the page with a batch header
//    did not — stale bytes remain past the recovered end and are taken for
//    log data later. The model test found this (the `Garbage` damage with a
//    gap, roughly once in a few thousand cases); the two tests below show it
//    deterministically.
// 2. The 32-bit relative offset limit is checked once per append call, not
//    per batch (found reading `write_call`).

/// One-record batch of 69 bytes.
fn tiny(value: &[u8; 1]) -> Vec<u8> {
    build::batch(0, &[value])
}

fn segment0(dir: &Path) -> PathBuf {
    dir.join(format!("{:020}.log", 0))
}

/// Regression: a stale byte past the recovered end used to stay in the
/// file, end up right behind the data of a segment that then rolled, and
/// make the next clean reopen cut the log there, deleting closed data.
/// Recovery now zeroes everything past the valid data.
#[test]
fn stale_bytes_past_a_clean_recovery_stop_never_cut_later_segments() {
    let dir = tempfile::tempdir().unwrap();
    let config = small(4096, Durability::Os);
    let p = Partition::open(dir.path(), config.clone()).unwrap();
    let one = tiny(b"a");
    assert_eq!(one.len(), 69);
    p.append(&one).unwrap();
    p.append(&one).unwrap();
    drop(p); // crash

    // Torn write: a byte 5 past the end of a third batch reached the disk.
    let path = segment0(dir.path());
    let mut file = std::fs::read(&path).unwrap();
    file[3 * 69 + 5] = 1;
    std::fs::write(&path, &file).unwrap();
    let (p, report) = Partition::open_with_report(dir.path(), config.clone()).unwrap();
    assert_eq!((p.high_watermark(), &report.truncated), (2, &None)); // stops at zeros

    p.append(&one).unwrap(); // now the stale byte lies 5 bytes past the data end
    let big = build::batch(0, &[&[7u8; 3900][..]]);
    p.append(&big).unwrap(); // rolls: segment 3 holds offset 3
    assert_eq!((p.high_watermark(), p.segment_count()), (4, 2));
    p.close().unwrap();

    let (p, report) = Partition::open_with_report(dir.path(), config).unwrap();
    assert_eq!(
        p.high_watermark(),
        4,
        "a clean reopen lost closed data: {report:?}"
    );
}

/// Regression: batches behind a zeroed header used to stay in the file, so
/// once an append of the same size filled the hole they were valid
/// continuations again and a reopen brought back an offset recovery had cut.
#[test]
fn stale_batches_past_a_clean_recovery_stop_never_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let config = small(4096, Durability::Os);
    let p = Partition::open(dir.path(), config.clone()).unwrap();
    for value in [b"a", b"b", b"c"] {
        p.append(&tiny(value)).unwrap();
    }
    drop(p); // crash

    // Torn write: the page holding the second batch's header never made it.
    let path = segment0(dir.path());
    let mut file = std::fs::read(&path).unwrap();
    file[69..69 + 12].fill(0);
    std::fs::write(&path, &file).unwrap();
    let p = Partition::open(dir.path(), config.clone()).unwrap();
    assert_eq!(p.high_watermark(), 1);

    p.append(&tiny(b"x")).unwrap();
    assert_eq!(p.high_watermark(), 2);
    p.close().unwrap();

    let p = Partition::open(dir.path(), config).unwrap();
    let stored: Vec<Vec<u8>> = read_all(&p).into_iter().map(|(_, bytes)| bytes).collect();
    assert_eq!(
        (p.high_watermark(), stored.len()),
        (2, 2),
        "offset 2 (the stale batch c) came back after a clean reopen"
    );
    assert!(stored[1] == stamped(&tiny(b"x"), 1));
}

/// `batch` with its lastOffsetDelta set to `delta` and the CRC redone: a
/// batch with gaps in its offsets, as compaction leaves them.
fn with_last_offset_delta(mut batch: Vec<u8>, delta: i32) -> Vec<u8> {
    batch[23..27].copy_from_slice(&delta.to_be_bytes());
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    batch::validate(&batch).unwrap();
    batch
}

/// Relative offsets are 32-bit: one call may not span more offsets than a
/// segment addresses (it is refused whole), while batches spanning 2^31
/// offsets each in separate calls roll to new segments and survive reopen.
#[test]
fn offsets_beyond_a_segments_32_bit_range_roll_or_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = small(4096, Durability::EveryBatch);
    let p = Partition::open(dir.path(), config.clone()).unwrap();
    let wide = with_last_offset_delta(tiny(b"w"), i32::MAX);
    let call: Vec<u8> = wide.iter().chain(&wide).chain(&wide).copied().collect();
    match p.append(&call) {
        Err(SpoolError::OffsetSpan { span }) => assert_eq!(span, 3 << 31),
        other => panic!("expected OffsetSpan, got {other:?}"),
    }
    assert_eq!(p.high_watermark(), 0);
    for i in 0..3u64 {
        let info = p.append(&wide).unwrap();
        assert_eq!(
            (info.base_offset, info.last_offset),
            (i << 31, ((i + 1) << 31) - 1)
        );
    }
    assert!(p.segment_count() >= 2, "the third batch must start a new segment");
    let stored = read_all(&p);
    p.close().unwrap();
    let (p, report) = Partition::open_with_report(dir.path(), config).unwrap();
    assert_eq!(report.truncated, None);
    assert_eq!(p.high_watermark(), 3 << 31);
    assert_eq!(read_all(&p), stored);
}
