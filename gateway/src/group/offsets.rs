//! Committed offsets: the in-memory table and its durable log.
//!
//! The log is a spool [`Partition`] of ordinary v2 record batches (built with
//! [`strait_batch::build::batch`]). Every record is one entry, its
//! value in this crate's own encoding (big-endian, length-prefixed strings):
//!
//! ```text
//! u8 format (1) | u8 kind | fields
//! kind 1, commit:       str group | str topic | i32 partition | i64 offset
//!                       | i32 leader_epoch | i64 commit_timestamp_ms | nullable-str metadata
//! kind 2, delete group: str group          (drops every offset of the group)
//! kind 3, delete topic: str topic          (drops the topic's offsets in every group)
//! str = u32 length + UTF-8 bytes; nullable-str = i32 length (-1 = null) + bytes
//! ```
//!
//! One OffsetCommit request is one batch (one append, so all or nothing).
//! Replaying the log in order rebuilds the table. Compaction rewrites only
//! the live commits into a fresh directory and swaps it in with renames
//! (see [`compact_dir`] and [`recover_dirs`]).
//!
//! Ordering: appends are submitted under the coordinator's lock and a
//! sequence number is taken at the same time, so log order is sequence
//! order. Results are applied to the table only once the append is
//! durable; a completion applies its entries only where no later sequence
//! has already written (or deleted) the same key, so the table always equals
//! a replay of the durable log.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use strait_batch::{self as batch, Batches};
use strait_spool::{Durability, LogConfig, Partition};

use super::GroupError;

const FORMAT: u8 = 1;
const KIND_COMMIT: u8 = 1;
const KIND_DELETE_GROUP: u8 = 2;
const KIND_DELETE_TOPIC: u8 = 3;

/// Most bytes of entries packed into one batch when a log is rewritten.
const REWRITE_BATCH_BYTES: usize = 1 << 20;

/// One committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Committed {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    pub commit_timestamp: i64,
    /// Sequence of the append that wrote it (0 for replayed entries).
    pub seq: u64,
}

/// One entry of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    Commit {
        group: String,
        topic: String,
        partition: i32,
        offset: i64,
        leader_epoch: i32,
        commit_timestamp: i64,
        metadata: Option<String>,
    },
    DeleteGroup {
        group: String,
    },
    DeleteTopic {
        topic: String,
    },
}

impl Entry {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.push(FORMAT);
        match self {
            Entry::Commit {
                group,
                topic,
                partition,
                offset,
                leader_epoch,
                commit_timestamp,
                metadata,
            } => {
                out.push(KIND_COMMIT);
                put_str(&mut out, group);
                put_str(&mut out, topic);
                out.extend_from_slice(&partition.to_be_bytes());
                out.extend_from_slice(&offset.to_be_bytes());
                out.extend_from_slice(&leader_epoch.to_be_bytes());
                out.extend_from_slice(&commit_timestamp.to_be_bytes());
                match metadata {
                    None => out.extend_from_slice(&(-1i32).to_be_bytes()),
                    Some(m) => {
                        out.extend_from_slice(&(m.len() as i32).to_be_bytes());
                        out.extend_from_slice(m.as_bytes());
                    }
                }
            }
            Entry::DeleteGroup { group } => {
                out.push(KIND_DELETE_GROUP);
                put_str(&mut out, group);
            }
            Entry::DeleteTopic { topic } => {
                out.push(KIND_DELETE_TOPIC);
                put_str(&mut out, topic);
            }
        }
        out
    }

    pub fn decode(buf: &[u8]) -> Result<Entry, String> {
        let mut r = Reader { buf, pos: 0 };
        let format = r.u8()?;
        if format != FORMAT {
            return Err(format!("unknown entry format {format}"));
        }
        let entry = match r.u8()? {
            KIND_COMMIT => Entry::Commit {
                group: r.str()?,
                topic: r.str()?,
                partition: r.i32()?,
                offset: r.i64()?,
                leader_epoch: r.i32()?,
                commit_timestamp: r.i64()?,
                metadata: r.nullable_str()?,
            },
            KIND_DELETE_GROUP => Entry::DeleteGroup { group: r.str()? },
            KIND_DELETE_TOPIC => Entry::DeleteTopic { topic: r.str()? },
            kind => return Err(format!("unknown entry kind {kind}")),
        };
        if r.pos != buf.len() {
            return Err(format!("{} trailing bytes after an entry", buf.len() - r.pos));
        }
        Ok(entry)
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| format!("entry truncated at byte {}", self.pos))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn i32(&mut self) -> Result<i32, String> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn i64(&mut self) -> Result<i64, String> {
        Ok(i64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn string(&mut self, len: usize) -> Result<String, String> {
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| "string is not UTF-8".to_string())
    }
    fn str(&mut self) -> Result<String, String> {
        let len = u32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes"));
        self.string(len as usize)
    }
    fn nullable_str(&mut self) -> Result<Option<String>, String> {
        let len = self.i32()?;
        if len < 0 {
            return Ok(None);
        }
        self.string(len as usize).map(Some)
    }
}

/// The values of the records of one uncompressed v2 batch, in order.
pub(crate) fn record_values(batch: &[u8]) -> Result<Vec<&[u8]>, String> {
    batch::records(batch)
        .map_err(|e| e.to_string())?
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.value.ok_or_else(|| format!("record {i} has a null value")))
        .collect()
}

/// Encodes entries as one record batch.
pub(crate) fn encode_batch(entries: &[Entry], timestamp: i64) -> Bytes {
    let values: Vec<Vec<u8>> = entries.iter().map(Entry::encode).collect();
    let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    Bytes::from(batch::build::batch(timestamp, &refs))
}

/// The committed offsets of every group.
#[derive(Debug, Default)]
pub(crate) struct OffsetStore {
    groups: HashMap<String, BTreeMap<(String, i32), Committed>>,
    /// Group deletions applied while older appends were still in flight:
    /// those appends must not bring the group's offsets back.
    group_tombstones: HashMap<String, u64>,
    /// Same for deleted topics.
    topic_tombstones: HashMap<String, u64>,
    inflight: BTreeSet<u64>,
    next_seq: u64,
    /// Entries (records) in the log.
    pub log_entries: u64,
    /// Live committed offsets.
    pub live: u64,
}

impl OffsetStore {
    pub fn new() -> Self {
        OffsetStore {
            next_seq: 1,
            ..OffsetStore::default()
        }
    }

    /// Applies an entry read back from the log.
    pub fn replay(&mut self, entry: Entry) {
        self.log_entries += 1;
        self.apply(0, entry);
    }

    /// Takes a sequence number for an append about to be submitted.
    pub fn begin(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.inflight.insert(seq);
        seq
    }

    /// Marks an append as finished (after its entries were applied, if it
    /// succeeded).
    pub fn finish(&mut self, seq: u64) {
        self.inflight.remove(&seq);
        if self.inflight.is_empty() {
            self.group_tombstones.clear();
            self.topic_tombstones.clear();
        }
    }

    /// Applies a durable entry written with sequence `seq`.
    pub fn apply(&mut self, seq: u64, entry: Entry) {
        match entry {
            Entry::Commit {
                group,
                topic,
                partition,
                offset,
                leader_epoch,
                commit_timestamp,
                metadata,
            } => {
                let deleted_later = self.group_tombstones.get(&group).is_some_and(|&s| s > seq)
                    || self.topic_tombstones.get(&topic).is_some_and(|&s| s > seq);
                if deleted_later {
                    return;
                }
                let offsets = self.groups.entry(group).or_default();
                let key = (topic, partition);
                if offsets.get(&key).is_some_and(|c| c.seq > seq) {
                    return;
                }
                let committed = Committed {
                    offset,
                    leader_epoch,
                    metadata,
                    commit_timestamp,
                    seq,
                };
                if offsets.insert(key, committed).is_none() {
                    self.live += 1;
                }
            }
            Entry::DeleteGroup { group } => {
                if let Some(offsets) = self.groups.get_mut(&group) {
                    let before = offsets.len();
                    offsets.retain(|_, c| c.seq > seq);
                    self.live -= (before - offsets.len()) as u64;
                    if offsets.is_empty() {
                        self.groups.remove(&group);
                    }
                }
                if !self.inflight.is_empty() {
                    self.group_tombstones.insert(group, seq);
                }
            }
            Entry::DeleteTopic { topic } => {
                let mut removed = 0;
                self.groups.retain(|_, offsets| {
                    let before = offsets.len();
                    offsets.retain(|(t, _), c| t != &topic || c.seq > seq);
                    removed += before - offsets.len();
                    !offsets.is_empty()
                });
                self.live -= removed as u64;
                if !self.inflight.is_empty() {
                    self.topic_tombstones.insert(topic, seq);
                }
            }
        }
    }

    pub fn has_inflight(&self) -> bool {
        !self.inflight.is_empty()
    }

    pub fn has_group(&self, group: &str) -> bool {
        self.groups.contains_key(group)
    }

    pub fn has_topic(&self, topic: &str) -> bool {
        self.groups.values().any(|o| {
            o.range((topic.to_string(), i32::MIN)..=(topic.to_string(), i32::MAX))
                .next()
                .is_some()
        })
    }

    pub fn group(&self, group: &str) -> Option<&BTreeMap<(String, i32), Committed>> {
        self.groups.get(group)
    }

    pub fn group_ids(&self) -> impl Iterator<Item = &String> {
        self.groups.keys()
    }

    pub fn get(&self, group: &str, topic: &str, partition: i32) -> Option<&Committed> {
        self.groups.get(group)?.get(&(topic.to_string(), partition))
    }

    /// Every live offset, as commit entries.
    pub fn live_entries(&self) -> Vec<Entry> {
        let mut out = Vec::with_capacity(self.live as usize);
        for (group, offsets) in &self.groups {
            for ((topic, partition), c) in offsets {
                out.push(Entry::Commit {
                    group: group.clone(),
                    topic: topic.clone(),
                    partition: *partition,
                    offset: c.offset,
                    leader_epoch: c.leader_epoch,
                    commit_timestamp: c.commit_timestamp,
                    metadata: c.metadata.clone(),
                });
            }
        }
        out
    }

    /// Whether the log holds enough dead entries to be worth rewriting.
    pub fn needs_compaction(&self, min_dead: u64) -> bool {
        let dead = self.log_entries.saturating_sub(self.live);
        dead >= min_dead.max(1) && dead >= self.live
    }
}

/// The spool settings of the offsets log.
pub(crate) fn log_config(segment_bytes: u64, durability: Durability) -> LogConfig {
    LogConfig {
        segment_bytes,
        max_batch_bytes: segment_bytes,
        retention_bytes: None,
        retention_age: None,
        durability,
        ..LogConfig::default()
    }
}

/// Reads every entry of the log, in order.
pub(crate) fn read_log(log: &Partition, mut visit: impl FnMut(Entry)) -> Result<(), GroupError> {
    let mut offset = log.log_start_offset();
    let end = log.high_watermark();
    while offset < end {
        let read = log.read(offset, 8 << 20)?;
        if read.records.is_empty() {
            break;
        }
        for item in Batches::new(&read.records) {
            let (pos, header) = item.map_err(|(pos, e)| corrupt(log, offset, format!("byte {pos}: {e}")))?;
            let batch = &read.records[pos..pos + header.size()];
            let values = record_values(batch).map_err(|e| corrupt(log, header.base_offset as u64, e))?;
            for value in values {
                let entry = Entry::decode(value).map_err(|e| corrupt(log, header.base_offset as u64, e))?;
                visit(entry);
            }
            offset = header.last_offset() as u64 + 1;
        }
    }
    Ok(())
}

fn corrupt(log: &Partition, offset: u64, reason: String) -> GroupError {
    GroupError::Corrupt {
        dir: log.dir().to_path_buf(),
        offset,
        reason,
    }
}

fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(format!(".{suffix}"));
    dir.with_file_name(name)
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> GroupError + 'a {
    move |source| GroupError::Io {
        op,
        path: path.to_path_buf(),
        error: source,
    }
}

fn sync_parent(dir: &Path) -> Result<(), GroupError> {
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    fs::File::open(parent)
        .and_then(|f| f.sync_all())
        .map_err(io_err("sync directory", parent))
}

/// Finishes or undoes a compaction that a crash interrupted. A compaction
/// writes `DIR.compacting` completely (synced) before it renames `DIR` to
/// `DIR.old` and `DIR.compacting` to `DIR`, then deletes `DIR.old`.
pub(crate) fn recover_dirs(dir: &Path) -> Result<(), GroupError> {
    let tmp = sibling(dir, "compacting");
    let old = sibling(dir, "old");
    if !dir.exists() {
        if tmp.exists() && old.exists() {
            // Crashed between the two renames: the new log is complete.
            fs::rename(&tmp, dir).map_err(io_err("rename", &tmp))?;
            sync_parent(dir)?;
        } else if old.exists() {
            fs::rename(&old, dir).map_err(io_err("rename", &old))?;
            sync_parent(dir)?;
        }
    }
    if tmp.exists() {
        fs::remove_dir_all(&tmp).map_err(io_err("remove", &tmp))?;
    }
    if old.exists() {
        fs::remove_dir_all(&old).map_err(io_err("remove", &old))?;
    }
    Ok(())
}

/// Rewrites the log in `dir` to hold exactly `entries`: writes them to a
/// fresh sibling directory, syncs it, closes `current` and swaps the
/// directories. Returns the reopened log. Blocks on disk I/O.
pub(crate) fn compact_dir(
    dir: &Path,
    config: LogConfig,
    entries: &[Entry],
    current: &Partition,
) -> Result<Partition, GroupError> {
    let tmp = sibling(dir, "compacting");
    let old = sibling(dir, "old");
    if tmp.exists() {
        fs::remove_dir_all(&tmp).map_err(io_err("remove", &tmp))?;
    }
    {
        let fresh = Partition::open(
            &tmp,
            LogConfig {
                durability: Durability::Os,
                ..config.clone()
            },
        )?;
        let now = now_ms();
        let mut chunk: Vec<Vec<u8>> = Vec::new();
        let mut chunk_bytes = 0;
        let flush = |chunk: &mut Vec<Vec<u8>>| -> Result<(), GroupError> {
            if !chunk.is_empty() {
                let refs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
                fresh.append(&batch::build::batch(now, &refs))?;
                chunk.clear();
            }
            Ok(())
        };
        for entry in entries {
            let value = entry.encode();
            chunk_bytes += value.len() + 16;
            chunk.push(value);
            if chunk_bytes >= REWRITE_BATCH_BYTES {
                flush(&mut chunk)?;
                chunk_bytes = 0;
            }
        }
        flush(&mut chunk)?;
        fresh.close()?; // syncs every segment
    }
    fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(io_err("sync directory", &tmp))?;
    // Everything in the current log is durable already (every_batch).
    if let Err(e) = current.close() {
        tracing::warn!(error = %e, "closing the offsets log before compaction failed");
    }
    fs::rename(dir, &old).map_err(io_err("rename", dir))?;
    fs::rename(&tmp, dir).map_err(io_err("rename", &tmp))?;
    sync_parent(dir)?;
    fs::remove_dir_all(&old).map_err(io_err("remove", &old))?;
    Ok(Partition::open(dir, config)?)
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod unit {
    use super::*;

    fn commit(group: &str, topic: &str, partition: i32, offset: i64) -> Entry {
        Entry::Commit {
            group: group.into(),
            topic: topic.into(),
            partition,
            offset,
            leader_epoch: 3,
            commit_timestamp: 1_700_000_000_000,
            metadata: Some("meta".into()),
        }
    }

    #[test]
    fn entries_round_trip_through_a_batch() {
        let entries = vec![
            commit("g", "t", 0, 42),
            Entry::Commit {
                group: "g2".into(),
                topic: "ü-topic".into(),
                partition: -1,
                offset: -1,
                leader_epoch: -1,
                commit_timestamp: 0,
                metadata: None,
            },
            Entry::DeleteGroup { group: "g".into() },
            Entry::DeleteTopic { topic: "t".into() },
        ];
        let batch = encode_batch(&entries, 1000);
        batch::validate(&batch).unwrap();
        let values = record_values(&batch).unwrap();
        let decoded: Vec<Entry> = values.into_iter().map(|v| Entry::decode(v).unwrap()).collect();
        assert_eq!(decoded, entries);
    }

    #[test]
    fn decode_rejects_garbage() {
        assert!(Entry::decode(&[]).is_err());
        assert!(Entry::decode(&[9, 1]).is_err());
        let mut v = commit("g", "t", 0, 1).encode();
        v.pop();
        assert!(Entry::decode(&v).is_err());
        v.extend_from_slice(&[0, 0]);
        assert!(Entry::decode(&v).is_err());
    }

    #[test]
    fn late_completion_does_not_override_newer_state() {
        let mut store = OffsetStore::new();
        let old = store.begin();
        let delete = store.begin();
        let newer = store.begin();
        store.apply(newer, commit("g", "t", 1, 9));
        store.finish(newer);
        store.apply(delete, Entry::DeleteGroup { group: "g".into() });
        store.finish(delete);
        // The older commit completes last: the deletion after it wins for
        // partition 0, and the newer commit to partition 1 survives.
        store.apply(old, commit("g", "t", 0, 5));
        store.apply(old, commit("g", "t", 1, 5));
        store.finish(old);
        assert_eq!(store.get("g", "t", 0), None);
        assert_eq!(store.get("g", "t", 1).map(|c| c.offset), Some(9));
        assert_eq!(store.live, 1);
    }
}
