//! The source-to-target offset map: which target offset each mirrored
//! source record went to, kept in a topic on the target (the mirror's
//! `offset_map_topic`) so that any process can translate a consumer
//! group's committed source offsets exactly (`strait mirror
//! translate-offsets`, group offset sync).
//!
//! The mirror writes a source partition's records to its target partition
//! in order, each once, so the map of one partition is a list of
//! [`Segment`]s: runs of consecutive source offsets that went to
//! consecutive target offsets. A new segment starts only where the source
//! has offsets the target does not get (transaction markers, aborted
//! transactions, compaction gaps, records before the mirror's start) or
//! where the mirror starts over. A topic without transactions or gaps maps
//! as one segment, whatever its size.
//!
//! **Entries.** Each record of the map topic is one partition's [`Entry`]
//! (key `topic:partition`): "from source offset `from` on, the map is
//! `segments`, up to `end`". A reader applies them in order ([`PartitionMap`]):
//! each replaces what the map said from its `from` on. The mirror writes an
//! entry, and has it acknowledged, before it commits a position that needs
//! it ([`Recorder::entry`]): when the records since the last entry are not
//! one consecutive run, when a partition starts or starts over, and
//! periodically, so the map topic's retention never leaves a partition
//! without one. Between entries the map extends by itself: a committed
//! position (source offset S, target offset T) that is as far from the last
//! entry's end on both sides adds one consecutive run
//! ([`PartitionMap::extend_to`]).
//!
//! **Crashes.** Entries cover only what the target acknowledged, so the map
//! never runs ahead of the target. An entry written just before a crash may
//! reach past the committed position; the restarted mirror starts its
//! partition over at the committed position ([`Recorder::start`]), and its
//! first entry replaces what followed with what the target holds (the same
//! mapping, found again by comparing the target's tail with the source).
//!
//! This module is data only: the mirror's commit loop writes entries, and
//! [`crate::translate`] reads them.

use std::collections::BTreeMap;
use std::time::Instant;

use strait_batch::{read_varint, write_varint};

use crate::batch::SourceRange;

/// The entry format's version, its first byte.
pub const VERSION: u8 = 1;

/// A (source offset, target offset) pair.
pub type Point = (i64, i64);

/// `count` consecutive source offsets from `source` that went to
/// consecutive target offsets from `target`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// First source offset.
    pub source: i64,
    /// Its target offset.
    pub target: i64,
    /// Records (at least one).
    pub count: i64,
}

impl Segment {
    fn source_end(&self) -> i64 {
        self.source + self.count
    }

    fn target_end(&self) -> i64 {
        self.target + self.count
    }
}

/// Appends `segment`, merged into the last one when it continues it.
fn push(segments: &mut Vec<Segment>, segment: Segment) {
    if segment.count <= 0 {
        return;
    }
    match segments.last_mut() {
        Some(last) if last.source_end() == segment.source && last.target_end() == segment.target => {
            last.count += segment.count
        }
        _ => segments.push(segment),
    }
}

/// Drops what lies at or after source offset `at`.
fn truncate(segments: &mut Vec<Segment>, at: i64) {
    segments.retain(|s| s.source < at);
    if let Some(last) = segments.last_mut() {
        last.count = last.count.min(at - last.source);
    }
}

/// One record of the map topic: from `from` on, `segments`, up to `end`
/// (the next source offset to mirror and the target offset it will get).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Where it starts: what the map held from here on is replaced.
    pub from: Point,
    /// The segments, in order, within `from..end` on both sides.
    pub segments: Vec<Segment>,
    /// Where the mirror was when it was written.
    pub end: Point,
}

impl Entry {
    /// The entry's bytes: the version, then zigzag varints: `from`, `end`
    /// less `from`, the segment count, and each segment's source and
    /// target offsets less the previous segment's end (`from` for the
    /// first) and its record count.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![VERSION];
        write_varint(&mut out, self.from.0);
        write_varint(&mut out, self.from.1);
        write_varint(&mut out, self.end.0 - self.from.0);
        write_varint(&mut out, self.end.1 - self.from.1);
        write_varint(&mut out, self.segments.len() as i64);
        let mut previous = self.from;
        for s in &self.segments {
            write_varint(&mut out, s.source - previous.0);
            write_varint(&mut out, s.target - previous.1);
            write_varint(&mut out, s.count);
            previous = (s.source_end(), s.target_end());
        }
        out
    }

    /// Reads an entry; says what is wrong with bytes that are not one.
    pub fn decode(mut bytes: &[u8]) -> Result<Entry, String> {
        let buf = &mut bytes;
        let Some((&version, rest)) = buf.split_first() else {
            return Err("empty".to_owned());
        };
        if version != VERSION {
            return Err(format!(
                "version {version} (this Strait reads version {VERSION}; written by a newer one?)"
            ));
        }
        *buf = rest;
        let mut next = |what: &str| read_varint(buf).ok_or_else(|| format!("truncated at {what}"));
        let from = (next("from")?, next("from")?);
        let end = (
            from.0.checked_add(next("end")?).ok_or("end overflows")?,
            from.1.checked_add(next("end")?).ok_or("end overflows")?,
        );
        if from.0 < 0 || from.1 < 0 || end.0 < from.0 || end.1 < from.1 {
            return Err(format!("bad bounds: from {from:?}, end {end:?}"));
        }
        let count = next("segment count")?;
        // Each segment takes at least three bytes: no allocation beyond
        // what the bytes can hold.
        if count < 0 || count as u64 > (bytes.len() / 3 + 1) as u64 {
            return Err(format!("bad segment count {count}"));
        }
        let mut segments = Vec::with_capacity(count as usize);
        let mut previous = from;
        for i in 0..count {
            let mut next = |what: &str| {
                read_varint(&mut bytes).ok_or_else(|| format!("truncated at segment {i} {what}"))
            };
            let (ds, dt, n) = (next("source")?, next("target")?, next("count")?);
            if ds < 0 || dt < 0 || n <= 0 {
                return Err(format!("segment {i} goes backwards or is empty"));
            }
            let source = previous.0.checked_add(ds).ok_or("offset overflows")?;
            let target = previous.1.checked_add(dt).ok_or("offset overflows")?;
            let segment = Segment {
                source,
                target,
                count: n,
            };
            let (source_end, target_end) = (
                source.checked_add(n).ok_or("offset overflows")?,
                target.checked_add(n).ok_or("offset overflows")?,
            );
            if source_end > end.0 || target_end > end.1 {
                return Err(format!("segment {i} reaches past the end {end:?}"));
            }
            segments.push(segment);
            previous = (source_end, target_end);
        }
        if !bytes.is_empty() {
            return Err(format!("{} bytes after the last segment", bytes.len()));
        }
        Ok(Entry { from, segments, end })
    }
}

/// The map topic's key of a partition's entries.
pub fn key(topic: &str, partition: i32) -> String {
    format!("{topic}:{partition}")
}

/// The (topic, partition) of a map topic key.
pub fn parse_key(key: &[u8]) -> Option<(String, i32)> {
    let key = std::str::from_utf8(key).ok()?;
    let (topic, partition) = key.rsplit_once(':')?;
    Some((topic.to_owned(), partition.parse().ok()?))
}

/// What the mirror has acknowledged of one partition since its last entry
/// was written: what the next entry says.
#[derive(Debug, Default)]
pub struct Recorder {
    /// Where the next entry starts: the last entry's end, or where the
    /// partition started (over); `None` before it starts.
    from: Option<Point>,
    segments: Vec<Segment>,
    end: Point,
    /// The next entry is due even if the map extends to `end` by itself.
    due: bool,
    /// Counts starts: an entry taken before one does not settle it.
    starts: u64,
    written_at: Option<Instant>,
    /// Where the run of consecutive offsets that ends at `end` began (both
    /// sides moved as far since): a refreshed entry restates it whole.
    run: Point,
}

impl Recorder {
    /// The partition (re)starts at `point`: the next entry replaces what
    /// the map says from there on, and is due before the next commit.
    pub fn start(&mut self, point: Point) {
        self.from = Some(point);
        self.segments.clear();
        self.end = point;
        self.run = point;
        self.due = true;
        self.starts += 1;
    }

    /// A target batch at offset `target` holding the source records of
    /// `source` was acknowledged.
    pub fn batch(&mut self, source: &SourceRange, target: i64) {
        let mut at = target;
        for (first, count) in source.runs() {
            if (first, at) != self.end {
                self.run = (first, at);
            }
            self.end = (self.end.0.max(first + count), self.end.1.max(at + count));
            push(
                &mut self.segments,
                Segment {
                    source: first,
                    target: at,
                    count,
                },
            );
            at += count;
        }
        self.end = (self.end.0.max(source.last_offset + 1), self.end.1.max(at));
    }

    /// The source moved on to `offset` without records for the target.
    pub fn skipped_to(&mut self, offset: i64) {
        if offset > self.end.0 {
            self.end.0 = offset;
            self.run = self.end;
        }
    }

    /// Where the mirror is: the next source offset and its target offset.
    pub fn end(&self) -> Point {
        self.end
    }

    /// The entry to write (and have acknowledged) before committing the
    /// current end, with a token for [`Recorder::wrote`]; `None` when the
    /// map extends to it by itself (one consecutive run since the last
    /// entry: source and target moved as far) and no entry is due, or
    /// before the partition starts. `refresh`: an entry older than that is
    /// written again (what is still true of it), so the map topic's
    /// retention always keeps one.
    pub fn entry(&self, refresh: std::time::Duration) -> Option<(Entry, u64)> {
        let from = self.from?;
        let stale = self.written_at.is_none_or(|at| at.elapsed() >= refresh);
        let extends = match self.segments.as_slice() {
            [] => self.end == from,
            [only] => {
                *only
                    == Segment {
                        source: from.0,
                        target: from.1,
                        count: self.end.0 - from.0,
                    }
                    && self.end.1 == only.target_end()
            }
            _ => false,
        };
        if !self.due && extends && !stale {
            return None;
        }
        if stale && self.run.0 < from.0 {
            // The run goes back past the last entry: restated from its
            // beginning, so that the map topic's retention, which drops
            // the entry that began it, loses none of it.
            let count = self.end.0 - self.run.0;
            return Some((
                Entry {
                    from: self.run,
                    segments: (count > 0)
                        .then_some(Segment {
                            source: self.run.0,
                            target: self.run.1,
                            count,
                        })
                        .into_iter()
                        .collect(),
                    end: self.end,
                },
                self.starts,
            ));
        }
        Some((
            Entry {
                from,
                segments: self.segments.clone(),
                end: self.end,
            },
            self.starts,
        ))
    }

    /// `entry` (taken with token `token`) was acknowledged: the next one
    /// starts at its end. Ignored if the partition started over meanwhile.
    pub fn wrote(&mut self, entry: &Entry, token: u64) {
        if token != self.starts {
            return;
        }
        let at = entry.end;
        // What came after it stays for the next entry; a segment spanning
        // its end is split there.
        self.segments.retain(|s| s.source_end() > at.0);
        if let Some(first) = self.segments.first_mut() {
            if first.source < at.0 {
                let cut = at.0 - first.source;
                *first = Segment {
                    source: at.0,
                    target: first.target + cut,
                    count: first.count - cut,
                };
            }
        }
        // A segment running on from the entry's end keeps the map
        // extending by itself: the next entry starts where it does.
        self.from = Some(at);
        self.due = false;
        self.written_at = Some(Instant::now());
    }
}

/// How one committed source offset translates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Translation {
    /// The target offset of the first mirrored record at or after it (the
    /// next record the group has not read), or where the mirror writes
    /// next when none has been mirrored yet.
    Exact(i64),
    /// Below what the map covers (records the mirror never copied: before
    /// its start, or older than the map topic's retention): the first
    /// target offset the map knows.
    BeforeMap(i64),
    /// Not mirrored yet: the mirror has copied up to this source offset.
    Ahead(i64),
    /// No map of this partition.
    Unknown,
}

impl Translation {
    /// The target offset to commit, if there is one.
    pub fn target(&self) -> Option<i64> {
        match self {
            Translation::Exact(t) | Translation::BeforeMap(t) => Some(*t),
            Translation::Ahead(_) | Translation::Unknown => None,
        }
    }
}

/// One partition's map, as read from the map topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionMap {
    segments: Vec<Segment>,
    /// The earliest point the map knows.
    start: Option<Point>,
    /// The mirror's position as the map knows it.
    end: Option<Point>,
}

impl PartitionMap {
    /// Applies the next entry of the partition's (in map topic order).
    pub fn apply(&mut self, entry: &Entry) {
        truncate(&mut self.segments, entry.from.0);
        for s in &entry.segments {
            push(&mut self.segments, *s);
        }
        self.start = Some(match self.start {
            Some(start) if start.0 <= entry.from.0 => start,
            _ => entry.from,
        });
        self.end = Some(entry.end);
    }

    /// Takes the mirror's committed position: when it is past the map's
    /// end by as much on both sides (the records between are one
    /// consecutive run, for which the mirror writes no entry), the map
    /// extends to it. `false` when it is past the end by different amounts
    /// (an entry is missing; the map keeps its end).
    pub fn extend_to(&mut self, position: Point) -> bool {
        let Some(end) = self.end else { return false };
        if position.0 <= end.0 {
            // An entry written before a crash reaches past the commit.
            return true;
        }
        if position.0 - end.0 != position.1 - end.1 {
            return false;
        }
        push(
            &mut self.segments,
            Segment {
                source: end.0,
                target: end.1,
                count: position.0 - end.0,
            },
        );
        self.end = Some(position);
        true
    }

    /// The mirror's position as the map knows it.
    pub fn end(&self) -> Option<Point> {
        self.end
    }

    /// Translates committed source offset `offset` (the next record the
    /// group would read).
    pub fn translate(&self, offset: i64) -> Translation {
        let (Some(start), Some(end)) = (self.start, self.end) else {
            return Translation::Unknown;
        };
        if offset > end.0 {
            return Translation::Ahead(end.0);
        }
        // The first segment that ends after the offset.
        let i = self.segments.partition_point(|s| s.source_end() <= offset);
        let next = self.segments.get(i);
        if offset < start.0 {
            return Translation::BeforeMap(next.map_or(end.1, |s| s.target));
        }
        Translation::Exact(match next {
            Some(s) if s.source <= offset => s.target + (offset - s.source),
            Some(s) => s.target,
            None => end.1,
        })
    }

    /// Translates committed target offset `offset` back to the source:
    /// the source offset of the mirrored record at or after it (the next
    /// record a group at `offset` on the target has not read), or the
    /// mirror's source position when none is mirrored yet.
    pub fn translate_back(&self, offset: i64) -> Translation {
        let (Some(start), Some(end)) = (self.start, self.end) else {
            return Translation::Unknown;
        };
        if offset > end.1 {
            return Translation::Ahead(end.1);
        }
        let i = self.segments.partition_point(|s| s.target_end() <= offset);
        let next = self.segments.get(i);
        if offset < start.1 {
            return Translation::BeforeMap(next.map_or(end.0, |s| s.source));
        }
        Translation::Exact(match next {
            Some(s) if s.target <= offset => s.source + (offset - s.target),
            Some(s) => s.source,
            None => end.0,
        })
    }

    /// The segments (for tests and the map's cost).
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }
}

/// A whole map topic: each partition's map, by (source topic, partition).
#[derive(Debug, Clone, Default)]
pub struct Map {
    /// The partitions' maps.
    pub partitions: BTreeMap<(String, i32), PartitionMap>,
    /// Entries read.
    pub entries: u64,
    /// Bytes of their keys and values.
    pub bytes: u64,
}

impl Map {
    /// Applies one record of the map topic; says what is wrong with a
    /// record that is not an entry.
    pub fn apply(&mut self, key: Option<&[u8]>, value: Option<&[u8]>) -> Result<(), String> {
        let key = key.ok_or("a record without a key")?;
        let (topic, partition) = parse_key(key).ok_or("a key that is not topic:partition")?;
        let value = value.ok_or("a record without a value")?;
        let entry = Entry::decode(value)?;
        self.entries += 1;
        self.bytes += (key.len() + value.len()) as u64;
        self.partitions
            .entry((topic, partition))
            .or_default()
            .apply(&entry);
        Ok(())
    }
}

/// One record batch holding `entries` (keyed by source topic and
/// partition), uncompressed, to produce to the map topic.
pub fn batch_of(entries: &[(String, i32, Entry)], timestamp: i64) -> Vec<u8> {
    let mut section = Vec::new();
    for (i, (topic, partition, entry)) in entries.iter().enumerate() {
        section.extend(strait_batch::build::record(
            0,
            i as i64,
            Some(key(topic, *partition).as_bytes()),
            Some(&entry.encode()),
            &[],
        ));
    }
    strait_batch::build::with_section(
        strait_batch::build::BatchSpec {
            base_timestamp: timestamp,
            max_timestamp: Some(timestamp),
            ..Default::default()
        },
        entries.len() as i32,
        &section,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn range(offsets: &[i64]) -> SourceRange {
        SourceRange::of_offsets(offsets.iter().copied())
    }

    /// A mirror's life: batches at consecutive target offsets, skips,
    /// entries written at commits; the reader translates every offset as
    /// the records say.
    #[test]
    fn every_offset_translates_to_the_next_mirrored_record() {
        let mut rec = Recorder::default();
        let mut map = PartitionMap::default();
        let write = |rec: &mut Recorder, map: &mut PartitionMap| {
            if let Some((entry, token)) = rec.entry(std::time::Duration::from_secs(3600)) {
                let entry = Entry::decode(&entry.encode()).unwrap();
                map.apply(&entry);
                rec.wrote(&entry, token);
            }
            assert!(map.extend_to(rec.end()));
        };
        rec.start((10, 100));
        write(&mut rec, &mut map);
        rec.batch(&range(&[10, 11, 12]), 100);
        write(&mut rec, &mut map);
        assert_eq!(map.segments().len(), 1, "no entry for a consecutive run");
        rec.batch(&range(&[13, 14]), 103);
        // A transaction marker at 15, then a batch with a compaction gap.
        rec.skipped_to(16);
        rec.batch(&range(&[16, 18, 19]), 105);
        write(&mut rec, &mut map);
        rec.batch(&range(&[20]), 108);
        rec.skipped_to(25);
        write(&mut rec, &mut map);
        let expect = [
            (0, Translation::BeforeMap(100)),
            (9, Translation::BeforeMap(100)),
            (10, Translation::Exact(100)),
            (12, Translation::Exact(102)),
            (14, Translation::Exact(104)),
            (15, Translation::Exact(105)),
            (16, Translation::Exact(105)),
            (17, Translation::Exact(106)),
            (18, Translation::Exact(106)),
            (19, Translation::Exact(107)),
            (20, Translation::Exact(108)),
            (21, Translation::Exact(109)),
            (25, Translation::Exact(109)),
            (26, Translation::Ahead(25)),
        ];
        for (offset, translation) in expect {
            assert_eq!(map.translate(offset), translation, "offset {offset}");
        }
        // Back: the target offset of a record goes to its source offset;
        // the end to the mirror's position.
        for (target, source) in [
            (100, 10),
            (102, 12),
            (104, 14),
            (105, 16),
            (106, 18),
            (108, 20),
            (109, 25),
        ] {
            assert_eq!(
                map.translate_back(target),
                Translation::Exact(source),
                "target {target}"
            );
        }
        assert_eq!(map.translate_back(99), Translation::BeforeMap(10));
        assert_eq!(map.translate_back(110), Translation::Ahead(109));
        // The map extends past its end by a commit only when the run is
        // consecutive.
        let mut ahead = map.clone();
        assert!(!ahead.extend_to((30, 110)));
        assert_eq!(ahead.translate(27), Translation::Ahead(25));
        assert!(ahead.extend_to((30, 114)));
        assert_eq!(ahead.translate(27), Translation::Exact(111));
    }

    #[test]
    fn a_refreshed_entry_restates_the_whole_run_it_is_in() {
        let mut rec = Recorder::default();
        let hour = std::time::Duration::from_secs(3600);
        rec.start((0, 0));
        rec.skipped_to(5);
        rec.batch(&range(&[5, 6, 7]), 0);
        let (entry, token) = rec.entry(hour).unwrap();
        rec.wrote(&entry, token);
        rec.batch(&range(&[8, 9]), 3);
        assert!(rec.entry(hour).is_none(), "the run extends by itself");
        // Refreshed: from the run's beginning (5), not from the last entry's
        // end (8); alone (the older entries expired) it still maps the run.
        let (entry, _) = rec.entry(std::time::Duration::ZERO).unwrap();
        assert_eq!(
            entry,
            Entry {
                from: (5, 0),
                segments: vec![Segment {
                    source: 5,
                    target: 0,
                    count: 5
                }],
                end: (10, 5),
            }
        );
        let mut map = PartitionMap::default();
        map.apply(&entry);
        assert_eq!(map.translate(6), Translation::Exact(1));
        assert_eq!(map.translate(4), Translation::BeforeMap(0));
    }

    #[test]
    fn a_restart_replaces_what_the_map_said_after_it() {
        let mut map = PartitionMap::default();
        map.apply(&Entry {
            from: (0, 0),
            segments: vec![Segment {
                source: 0,
                target: 0,
                count: 10,
            }],
            end: (12, 10),
        });
        // Started over at a commit (5, 5), the target holding 5..9 again
        // (the same mapping) and then new records.
        map.apply(&Entry {
            from: (5, 5),
            segments: vec![
                Segment {
                    source: 5,
                    target: 5,
                    count: 5,
                },
                Segment {
                    source: 12,
                    target: 10,
                    count: 2,
                },
            ],
            end: (14, 12),
        });
        assert_eq!(map.translate(3), Translation::Exact(3));
        assert_eq!(map.translate(9), Translation::Exact(9));
        assert_eq!(map.translate(10), Translation::Exact(10));
        assert_eq!(map.translate(13), Translation::Exact(11));
        assert_eq!(map.translate(14), Translation::Exact(12));
        assert_eq!(map.segments().len(), 2);
    }

    #[test]
    fn entries_that_are_not_entries_are_errors() {
        assert!(Entry::decode(&[]).is_err());
        assert!(Entry::decode(&[2]).unwrap_err().contains("version 2"));
        let good = Entry {
            from: (3, 4),
            segments: vec![Segment {
                source: 3,
                target: 4,
                count: 2,
            }],
            end: (9, 6),
        }
        .encode();
        assert!(Entry::decode(&good).is_ok());
        for cut in 1..good.len() {
            assert!(Entry::decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = good.clone();
        long.push(0);
        assert!(Entry::decode(&long).is_err());
        assert_eq!(parse_key(b"orders.eu:12"), Some(("orders.eu".to_owned(), 12)));
        assert_eq!(parse_key(b"orders"), None);
    }

    proptest! {
        /// Random source partitions (records kept or not, batches of any
        /// size), entries written at random commits: every offset up to the
        /// mirror's position translates to the target offset of the first
        /// kept record at or after it.
        #[test]
        fn translation_matches_a_record_by_record_map(
            kept in proptest::collection::vec(any::<bool>(), 1..200),
            cuts in proptest::collection::vec(1usize..12, 1..60),
            commits in proptest::collection::vec(any::<bool>(), 60),
        ) {
            let mut rec = Recorder::default();
            let mut map = PartitionMap::default();
            rec.start((0, 0));
            let (mut s, mut t) = (0i64, 0i64);
            let mut truth: Vec<Option<i64>> = Vec::new();
            let mut cuts = cuts.iter().cycle();
            let mut commit = commits.iter().cycle();
            while (s as usize) < kept.len() {
                let n = (*cuts.next().unwrap()).min(kept.len() - s as usize);
                let offsets: Vec<i64> = (s..s + n as i64).filter(|&o| kept[o as usize]).collect();
                for o in s..s + n as i64 {
                    truth.push(kept[o as usize].then_some(t + offsets.iter().position(|&x| x == o).map_or(0, |p| p as i64)));
                }
                if offsets.is_empty() {
                    rec.skipped_to(s + n as i64);
                } else {
                    rec.batch(&SourceRange::of_offsets(offsets.iter().copied()), t);
                    t += offsets.len() as i64;
                    rec.skipped_to(s + n as i64);
                }
                s += n as i64;
                if *commit.next().unwrap() {
                    if let Some((entry, token)) = rec.entry(std::time::Duration::from_secs(3600)) {
                        map.apply(&Entry::decode(&entry.encode()).unwrap());
                        rec.wrote(&entry, token);
                    }
                    prop_assert!(map.extend_to(rec.end()));
                }
            }
            if let Some((entry, token)) = rec.entry(std::time::Duration::from_secs(3600)) {
                map.apply(&entry);
                rec.wrote(&entry, token);
            }
            prop_assert!(map.extend_to(rec.end()));
            for c in 0..=s {
                let expect = truth[c as usize..].iter().flatten().next().copied().unwrap_or(t);
                prop_assert_eq!(map.translate(c), Translation::Exact(expect), "offset {}", c);
            }
            prop_assert_eq!(map.translate(s + 1), Translation::Ahead(s));
        }
    }
}
