//! Sparse, memory-mapped indexes of a segment.
//!
//! - The offset index maps a batch's base offset (relative to the segment's
//!   base offset) to its byte position in the segment's log file. 8-byte
//!   entries: relative offset `u32`, position `u32`.
//! - The time index maps the largest timestamp seen so far in the segment to
//!   the relative offset of the batch that raised it. 12-byte entries:
//!   timestamp `i64`, relative offset `u32`.
//!
//! An entry is added every `index_interval_bytes` of log, so both indexes are
//! sparse: a lookup gives a starting point and the log is scanned from there.
//! Index files are sized to `index_bytes` (sparse) and never shrunk. Disk
//! blocks are allocated (`fallocate`) a chunk ahead of the entries written,
//! because storing through a map into a hole that the file system cannot
//! fill raises SIGBUS; when allocation fails the entry is simply not added,
//! which leaves a valid, sparser index. For the same reason nothing reads a
//! hole of an index through its map: an index written earlier is read only
//! up to its first hole. Keys are strictly increasing, so the
//! number of entries in a file written by an earlier process is the length
//! of its strictly increasing prefix.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::map::IndexMap;

/// A fixed-size index entry with a strictly increasing key.
pub(crate) trait Entry: Copy + std::fmt::Debug {
    /// Bytes per entry.
    const SIZE: usize;
    /// The sort key.
    fn key(&self) -> i64;
    fn encode(&self) -> Vec<u8>;
    /// Decodes an entry from its `SIZE` bytes.
    fn decode(raw: &[u8]) -> Self;
}

/// Offset index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetEntry {
    /// Base offset of the batch, minus the segment's base offset.
    pub relative_offset: u32,
    /// Byte position of the batch in the log file.
    pub position: u32,
}

impl Entry for OffsetEntry {
    const SIZE: usize = 8;
    fn key(&self) -> i64 {
        self.relative_offset as i64
    }
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8);
        out.extend_from_slice(&self.relative_offset.to_be_bytes());
        out.extend_from_slice(&self.position.to_be_bytes());
        out
    }
    fn decode(raw: &[u8]) -> Self {
        OffsetEntry {
            relative_offset: u32::from_be_bytes(raw[0..4].try_into().expect("4 bytes")),
            position: u32::from_be_bytes(raw[4..8].try_into().expect("4 bytes")),
        }
    }
}

/// Time index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeEntry {
    /// Largest timestamp in the segment up to and including this batch.
    pub timestamp: i64,
    /// Base offset of that batch, minus the segment's base offset.
    pub relative_offset: u32,
}

impl Entry for TimeEntry {
    const SIZE: usize = 12;
    fn key(&self) -> i64 {
        self.timestamp
    }
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(12);
        out.extend_from_slice(&self.timestamp.to_be_bytes());
        out.extend_from_slice(&self.relative_offset.to_be_bytes());
        out
    }
    fn decode(raw: &[u8]) -> Self {
        TimeEntry {
            timestamp: i64::from_be_bytes(raw[0..8].try_into().expect("8 bytes")),
            relative_offset: u32::from_be_bytes(raw[8..12].try_into().expect("4 bytes")),
        }
    }
}

/// Bytes of the largest entry.
const MAX_ENTRY: usize = 12;

/// One index file.
#[derive(Debug)]
pub(crate) struct Index<E: Entry> {
    path: PathBuf,
    file: File,
    map: IndexMap,
    entries: AtomicUsize,
    /// Bytes from the start of the file known to be allocated on disk.
    allocated: AtomicUsize,
    _entry: std::marker::PhantomData<E>,
}

impl<E: Entry> Index<E> {
    /// Creates an empty index of `capacity` bytes at `path`, replacing
    /// whatever was there.
    pub(crate) fn create(path: &Path, capacity: u64) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        file.set_len(capacity.max(E::SIZE as u64))?;
        Self::with_file(path, file, 0)
    }

    /// Opens an index written earlier; its entries are the strictly
    /// increasing prefix of the file, up to its first hole (an entry was
    /// written only where a block was allocated for it, and reading a hole
    /// through the map could fault on a full tmpfs).
    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        if file.metadata()?.len() < E::SIZE as u64 {
            file.set_len(E::SIZE as u64)?;
        }
        let index = Self::with_file(path, file, 0)?;
        let written = crate::map::allocated_prefix(&index.file, index.map.len()) / E::SIZE;
        let capacity = index.capacity().min(written);
        let mut count = 0;
        let mut last = i64::MIN;
        while count < capacity {
            let entry = index.read(count);
            if count > 0 && entry.key() <= last {
                break;
            }
            last = entry.key();
            count += 1;
        }
        index.entries.store(count, Ordering::Release);
        index.allocated.store(count * E::SIZE, Ordering::Release);
        Ok(index)
    }

    fn with_file(path: &Path, file: File, entries: usize) -> io::Result<Self> {
        let map = IndexMap::new(&file)?;
        Ok(Index {
            path: path.to_path_buf(),
            file,
            map,
            entries: AtomicUsize::new(entries),
            allocated: AtomicUsize::new(0),
            _entry: std::marker::PhantomData,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Number of published entries.
    pub(crate) fn len(&self) -> usize {
        self.entries.load(Ordering::Acquire)
    }

    /// Maximum number of entries.
    pub(crate) fn capacity(&self) -> usize {
        self.map.len() / E::SIZE
    }

    /// Entry `i`, which must be below [`Index::len`].
    pub(crate) fn get(&self, i: usize) -> E {
        assert!(i < self.len(), "index entry {i} is not published");
        self.read(i)
    }

    /// Entry `i`, read through the map: only for entries on allocated blocks.
    fn read(&self, i: usize) -> E {
        let mut raw = [0u8; MAX_ENTRY];
        self.map.read_into(i * E::SIZE, &mut raw[..E::SIZE]);
        E::decode(&raw[..E::SIZE])
    }

    pub(crate) fn last(&self) -> Option<E> {
        self.len().checked_sub(1).map(|i| self.get(i))
    }

    /// Appends an entry. Only the partition's writer calls this. Returns
    /// false (and writes nothing) when the index is full, the key does not
    /// follow the last one, or no disk block can be allocated for the entry.
    pub(crate) fn push(&self, entry: E) -> bool {
        let n = self.entries.load(Ordering::Acquire);
        // Keys must strictly increase, or the entry count of a reopened
        // file would be misread: refuse an out-of-order entry.
        if n >= self.capacity() || (n > 0 && self.get(n - 1).key() >= entry.key()) {
            return false;
        }
        if !self.allocate((n + 1) * E::SIZE) {
            return false;
        }
        self.map.write(n * E::SIZE, &entry.encode());
        self.entries.store(n + 1, Ordering::Release);
        true
    }

    /// Makes sure the first `upto` bytes of the file have disk blocks.
    ///
    /// Blocks are allocated ahead in chunks that double with what is
    /// allocated already, from one page to 64 KiB: thousands of nearly
    /// empty partitions then take a page per index, not 64 KiB.
    fn allocate(&self, upto: usize) -> bool {
        const FIRST: usize = 4096;
        const MOST: usize = 64 * 1024;
        let done = self.allocated.load(Ordering::Acquire);
        if upto <= done {
            return true;
        }
        let chunk = done.clamp(FIRST, MOST);
        let end = upto.div_ceil(chunk).saturating_mul(chunk).min(self.map.len());
        if crate::map::allocate(&self.file, done, end - done).is_err() {
            return false;
        }
        self.allocated.store(end, Ordering::Release);
        true
    }

    /// The last entry whose key is at most `key`.
    pub(crate) fn floor(&self, key: i64) -> Option<E> {
        let n = self.len();
        // Binary search for the number of entries with key <= target.
        let (mut lo, mut hi) = (0usize, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.get(mid).key() <= key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo.checked_sub(1).map(|i| self.get(i))
    }

    /// Writes the entries to disk.
    pub(crate) fn flush(&self) -> io::Result<()> {
        self.map.flush()?;
        self.file.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_floor_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.index");
        let index = Index::<OffsetEntry>::create(&path, 80).unwrap();
        assert_eq!(index.capacity(), 10);
        assert_eq!(index.floor(5), None);
        for i in 0..10u32 {
            assert!(index.push(OffsetEntry {
                relative_offset: i * 10,
                position: i * 100,
            }));
        }
        assert!(!index.push(OffsetEntry {
            relative_offset: 1000,
            position: 1000
        }));
        assert_eq!(index.floor(0).unwrap().position, 0);
        assert_eq!(index.floor(9).unwrap().position, 0);
        assert_eq!(index.floor(10).unwrap().position, 100);
        assert_eq!(index.floor(95).unwrap().position, 900);
        index.flush().unwrap();
        drop(index);
        let reopened = Index::<OffsetEntry>::open(&path).unwrap();
        assert_eq!(reopened.len(), 10);
        assert_eq!(reopened.last().unwrap().relative_offset, 90);
    }

    #[test]
    fn reopen_counts_the_increasing_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.timeindex");
        let index = Index::<TimeEntry>::create(&path, 120).unwrap();
        index.push(TimeEntry {
            timestamp: 5,
            relative_offset: 0,
        });
        index.push(TimeEntry {
            timestamp: 9,
            relative_offset: 3,
        });
        drop(index);
        let reopened = Index::<TimeEntry>::open(&path).unwrap();
        assert_eq!(reopened.len(), 2);
        assert_eq!(reopened.floor(8).unwrap().relative_offset, 0);
        assert_eq!(reopened.floor(100).unwrap().relative_offset, 3);
    }
}
