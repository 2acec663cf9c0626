//! One segment of a partition log: a preallocated log file of batches plus
//! its offset and time indexes, all named after the segment's base offset
//! (`00000000000000000000.log`, `.index`, `.timeindex`, as Kafka names them).

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::error::{Result, SpoolError};
use crate::index::{Index, OffsetEntry, TimeEntry};
use crate::map::LogMap;
use strait_batch::{self as batch, BatchError, BatchHeader, LOG_OVERHEAD};

/// Files one segment keeps open for as long as its partition is open: the
/// log, the offset index and the time index. (Each is also memory-mapped;
/// maps do not count against the open-files limit.) A partition has at
/// least one segment, and holds this many descriptors for each.
pub const FILES_PER_SEGMENT: u64 = 3;

/// File name of a segment's log.
pub(crate) fn log_name(base_offset: u64) -> String {
    format!("{base_offset:020}.log")
}

/// Parses a `NNNN.log` file name.
pub(crate) fn parse_log_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".log")?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// How a scan of a log file ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanStop {
    /// The data ended where the preallocated zeros (or the file) begin.
    Clean,
    /// Bytes at this position are not a valid continuation of the log.
    Invalid {
        /// Byte position in the log file.
        position: u64,
        /// What is wrong.
        reason: String,
    },
}

/// Result of walking a log file.
#[derive(Debug, Clone)]
pub(crate) struct Scan {
    /// Position just past the last valid batch.
    pub(crate) end: u64,
    /// Offset after the last valid batch.
    pub(crate) next_offset: u64,
    /// Largest timestamp among the valid batches.
    pub(crate) max_timestamp: i64,
    pub(crate) stop: ScanStop,
}

/// Where the writer stands in filling the indexes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct IndexCursor {
    /// Log bytes appended since the last offset index entry.
    pub(crate) bytes_since_entry: u64,
}

/// A segment.
#[derive(Debug)]
pub(crate) struct Segment {
    pub(crate) base_offset: u64,
    pub(crate) log_path: PathBuf,
    pub(crate) file: Arc<File>,
    pub(crate) map: Arc<LogMap>,
    pub(crate) offsets: Index<OffsetEntry>,
    pub(crate) times: Index<TimeEntry>,
    /// Bytes of batches written (published by the writer).
    size: AtomicU64,
    /// Offset after the last batch written.
    next_offset: AtomicU64,
    /// Largest batch timestamp, `i64::MIN` while empty.
    max_timestamp: AtomicI64,
    /// When this process created or opened the segment (drives age rolls).
    pub(crate) opened_at: Instant,
}

impl Segment {
    /// Creates an empty segment whose log is preallocated to `capacity`.
    pub(crate) fn create(dir: &Path, base_offset: u64, capacity: u64, index_bytes: u64) -> Result<Segment> {
        let log_path = dir.join(log_name(base_offset));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&log_path)
            .map_err(|e| SpoolError::io("create segment", &log_path, e))?;
        file.set_len(capacity)
            .map_err(|e| SpoolError::io("preallocate segment", &log_path, e))?;
        let offsets = index_path(&log_path, "index");
        let times = index_path(&log_path, "timeindex");
        let offsets =
            Index::create(&offsets, index_bytes).map_err(|e| SpoolError::io("create index", &offsets, e))?;
        let times =
            Index::create(&times, index_bytes).map_err(|e| SpoolError::io("create index", &times, e))?;
        Self::assemble(base_offset, log_path, file, offsets, times)
    }

    /// Opens an existing segment. If `min_capacity` is given and the file is
    /// shorter, it is extended first (only for the active segment, before
    /// anything maps it). With `fresh_indexes`, or where an index is missing,
    /// the indexes start empty, sized `index_bytes`, ready for
    /// [`Segment::recover`] to rebuild them.
    pub(crate) fn open(
        dir: &Path,
        base_offset: u64,
        min_capacity: Option<u64>,
        index_bytes: u64,
        fresh_indexes: bool,
    ) -> Result<Segment> {
        let log_path = dir.join(log_name(base_offset));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&log_path)
            .map_err(|e| SpoolError::io("open segment", &log_path, e))?;
        let len = file
            .metadata()
            .map_err(|e| SpoolError::io("stat segment", &log_path, e))?
            .len();
        if let Some(capacity) = min_capacity {
            if len < capacity {
                file.set_len(capacity)
                    .map_err(|e| SpoolError::io("preallocate segment", &log_path, e))?;
            }
        } else if len == 0 {
            // A zero-length file cannot be mapped; give it one page of zeros.
            file.set_len(4096)
                .map_err(|e| SpoolError::io("extend segment", &log_path, e))?;
        }
        let offsets_path = index_path(&log_path, "index");
        let offsets = if fresh_indexes || !offsets_path.exists() {
            Index::create(&offsets_path, index_bytes)
        } else {
            Index::open(&offsets_path)
        }
        .map_err(|e| SpoolError::io("open index", &offsets_path, e))?;
        let times_path = index_path(&log_path, "timeindex");
        let times = if fresh_indexes || !times_path.exists() {
            Index::create(&times_path, index_bytes)
        } else {
            Index::open(&times_path)
        }
        .map_err(|e| SpoolError::io("open index", &times_path, e))?;
        Self::assemble(base_offset, log_path, file, offsets, times)
    }

    fn assemble(
        base_offset: u64,
        log_path: PathBuf,
        file: File,
        offsets: Index<OffsetEntry>,
        times: Index<TimeEntry>,
    ) -> Result<Segment> {
        let len = file
            .metadata()
            .map_err(|e| SpoolError::io("stat segment", &log_path, e))?
            .len();
        let map =
            LogMap::new(&file, len as usize).map_err(|e| SpoolError::io("map segment", &log_path, e))?;
        Ok(Segment {
            base_offset,
            log_path,
            file: Arc::new(file),
            map: Arc::new(map),
            offsets,
            times,
            size: AtomicU64::new(0),
            next_offset: AtomicU64::new(base_offset),
            max_timestamp: AtomicI64::new(i64::MIN),
            opened_at: Instant::now(),
        })
    }

    /// Cuts the log back to `end` bytes, zero-fills it up to `capacity`,
    /// syncs it and maps it again, keeping the indexes and the end. Only
    /// called while opening a partition, before anything can hold a slice of
    /// the map (so shrinking the file cannot fault a reader).
    pub(crate) fn truncate_tail(self, end: u64, capacity: u64) -> Result<Segment> {
        let Segment {
            base_offset,
            log_path,
            file,
            map,
            offsets,
            times,
            size,
            next_offset,
            max_timestamp,
            opened_at,
        } = self;
        assert_eq!(
            Arc::strong_count(&map),
            1,
            "a segment is truncated only before readers exist"
        );
        drop(map);
        let capacity = capacity.max(end);
        let fail = |op, e| SpoolError::io(op, &log_path, e);
        file.set_len(end).map_err(|e| fail("truncate segment", e))?;
        file.set_len(capacity).map_err(|e| fail("extend segment", e))?;
        file.sync_all().map_err(|e| fail("sync segment", e))?;
        let map = LogMap::new(&file, capacity as usize).map_err(|e| fail("map segment", e))?;
        Ok(Segment {
            base_offset,
            log_path,
            file,
            map: Arc::new(map),
            offsets,
            times,
            size,
            next_offset,
            max_timestamp,
            opened_at,
        })
    }

    /// Bytes the log file can hold.
    pub(crate) fn capacity(&self) -> u64 {
        self.map.len() as u64
    }

    /// Bytes of batches written.
    pub(crate) fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    /// Offset after the last batch.
    pub(crate) fn next_offset(&self) -> u64 {
        self.next_offset.load(Ordering::Acquire)
    }

    /// Largest timestamp in the segment (`i64::MIN` if empty).
    pub(crate) fn max_timestamp(&self) -> i64 {
        self.max_timestamp.load(Ordering::Acquire)
    }

    /// Takes a batch's timestamp into the segment's maximum.
    pub(crate) fn raise_max_timestamp(&self, timestamp: i64) {
        self.max_timestamp.fetch_max(timestamp, Ordering::AcqRel);
    }

    /// Records that batches up to `size` / `next_offset` are written.
    pub(crate) fn set_end(&self, size: u64, next_offset: u64, max_timestamp: i64) {
        self.raise_max_timestamp(max_timestamp);
        self.next_offset.store(next_offset, Ordering::Release);
        self.size.store(size, Ordering::Release);
    }

    /// Adds index entries for a batch written at `position` (writer only).
    /// The segment's max timestamp must already include the batch.
    pub(crate) fn index_batch(
        &self,
        cursor: &mut IndexCursor,
        interval: u64,
        position: u64,
        header: &BatchHeader,
    ) {
        let relative = (header.base_offset as u64 - self.base_offset) as u32;
        if position == 0 || cursor.bytes_since_entry >= interval {
            self.offsets.push(OffsetEntry {
                relative_offset: relative,
                position: position as u32,
            });
            cursor.bytes_since_entry = 0;
            self.push_time_entry(relative);
        }
        cursor.bytes_since_entry += header.size() as u64;
    }

    /// Adds a time index entry for the current max timestamp if it grew.
    pub(crate) fn push_time_entry(&self, relative_offset: u32) {
        let max = self.max_timestamp();
        if max == i64::MIN {
            return;
        }
        if self.times.last().is_none_or(|last| last.timestamp < max) {
            self.times.push(TimeEntry {
                timestamp: max,
                relative_offset,
            });
        }
    }

    /// Whether the indexes can take `entries` more entries each.
    pub(crate) fn index_room(&self, entries: usize) -> bool {
        self.offsets.len() + entries <= self.offsets.capacity()
            && self.times.len() + entries <= self.times.capacity()
    }

    /// Walks the log from `position`, where a batch with base offset
    /// `expected_offset` must start, until the data ends or stops making
    /// sense. With `check_crc`, each batch's checksum is verified. Each good
    /// batch is passed to `on_batch`.
    /// Reads the file through [`LogBytes`], so that running into the
    /// unwritten, sparse part of the file cannot fault.
    pub(crate) fn scan(
        &self,
        position: u64,
        expected_offset: u64,
        check_crc: bool,
        mut on_batch: impl FnMut(u64, &BatchHeader),
    ) -> std::io::Result<Scan> {
        let data = LogBytes::new(&self.map, &self.file);
        let mut pos = position as usize;
        let mut next = expected_offset;
        let mut max_timestamp = i64::MIN;
        let stop = loop {
            let header = match data.batch_at(pos, check_crc)? {
                None => break ScanStop::Clean,
                Some(Ok(h)) => h,
                Some(Err(e)) => {
                    break ScanStop::Invalid {
                        position: pos as u64,
                        reason: e.to_string(),
                    }
                }
            };
            if header.base_offset < 0 || header.base_offset as u64 != next {
                break ScanStop::Invalid {
                    position: pos as u64,
                    reason: format!("batch has base offset {}, expected {next}", header.base_offset),
                };
            }
            if header.last_offset() as u64 - self.base_offset > u32::MAX as u64 {
                break ScanStop::Invalid {
                    position: pos as u64,
                    reason: "offset too far from the segment's base offset".into(),
                };
            }
            on_batch(pos as u64, &header);
            max_timestamp = max_timestamp.max(header.max_timestamp);
            next = header.last_offset() as u64 + 1;
            pos += header.size();
        };
        Ok(Scan {
            end: pos as u64,
            next_offset: next,
            max_timestamp,
            stop,
        })
    }

    /// Rebuilds both indexes (which must start empty) from the log and sets
    /// the segment's end. Returns how the scan ended; the caller truncates on
    /// `Invalid`.
    pub(crate) fn recover(&self, interval: u64) -> Result<Scan> {
        debug_assert!(self.offsets.len() == 0 && self.times.len() == 0);
        let mut cursor = IndexCursor::default();
        let mut last_relative = 0;
        let scan = self
            .scan(0, self.base_offset, true, |pos, header| {
                self.raise_max_timestamp(header.max_timestamp);
                last_relative = (header.base_offset as u64 - self.base_offset) as u32;
                if self.index_room(1) {
                    self.index_batch(&mut cursor, interval, pos, header);
                }
            })
            .map_err(|e| SpoolError::io("read segment", &self.log_path, e))?;
        self.push_time_entry(last_relative);
        self.set_end(scan.end, scan.next_offset, scan.max_timestamp);
        Ok(scan)
    }

    /// Loads a sealed segment that lies below the recovery point: trusts the
    /// indexes and walks headers from the last offset index entry to find
    /// the end. Returns `None` if the indexes or log do not add up (the
    /// caller then runs full recovery).
    pub(crate) fn load_sealed(&self) -> Option<Scan> {
        let (position, offset) = match self.offsets.last() {
            Some(e) => (e.position as u64, self.base_offset + e.relative_offset as u64),
            None => (0, self.base_offset),
        };
        if position >= self.capacity() {
            return None;
        }
        let scan = self.scan(position, offset, false, |_, _| {}).ok()?;
        if scan.stop != ScanStop::Clean || scan.end == 0 {
            return None;
        }
        let max_ts = self
            .times
            .last()
            .map_or(scan.max_timestamp, |t| t.timestamp.max(scan.max_timestamp));
        self.set_end(scan.end, scan.next_offset, max_ts);
        Some(scan)
    }

    /// Position of the first batch whose last offset is at least `offset`,
    /// searching below `end`. `None` if every batch there ends before it.
    pub(crate) fn find_offset(&self, offset: u64, end: u64) -> Option<(u64, BatchHeader)> {
        let relative = offset.saturating_sub(self.base_offset).min(u32::MAX as u64) as i64;
        let mut pos = match self.offsets.floor(relative) {
            // Trust an entry only if it lands on the batch it names; a
            // damaged index costs a longer scan, never a wrong answer.
            Some(e)
                if (e.position as u64) < end
                    && self.header_at(e.position as u64).is_some_and(|h| {
                        h.base_offset as u64 == self.base_offset + e.relative_offset as u64
                    }) =>
            {
                e.position as u64
            }
            _ => 0,
        };
        while pos < end {
            let header = self.header_at(pos)?;
            if header.last_offset() as u64 >= offset {
                return Some((pos, header));
            }
            pos += header.size() as u64;
        }
        None
    }

    /// Position and header of the first batch whose max timestamp is at
    /// least `timestamp`, below `end`.
    pub(crate) fn find_timestamp(&self, timestamp: i64, end: u64) -> Option<(u64, BatchHeader)> {
        // Every batch up to an entry with a smaller max timestamp is too old.
        let start_offset = self
            .times
            .floor(timestamp.saturating_sub(1))
            .map_or(self.base_offset, |e| self.base_offset + e.relative_offset as u64);
        let (mut pos, _) = self.find_offset(start_offset, end)?;
        while pos < end {
            let header = self.header_at(pos)?;
            if header.max_timestamp >= timestamp {
                return Some((pos, header));
            }
            pos += header.size() as u64;
        }
        None
    }

    /// Parses the header of the batch at `pos` (written data only).
    pub(crate) fn header_at(&self, pos: u64) -> Option<BatchHeader> {
        let pos = pos as usize;
        let end = (pos + batch::HEADER_LEN).min(self.map.len());
        BatchHeader::parse(self.map.slice(pos, end)).ok()
    }

    /// Writes everything of this segment to disk: the log and its indexes.
    /// For a segment being sealed: a sealed segment's indexes are trusted on
    /// open (and checked against the log).
    pub(crate) fn sync(&self) -> std::io::Result<()> {
        crate::metrics::timed(|| self.file.sync_data())?;
        self.offsets.flush()?;
        self.times.flush()
    }

    /// Writes the log's data to disk, not the indexes: enough for the
    /// active segment, whose indexes are rebuilt from the log on open.
    pub(crate) fn sync_log(&self) -> std::io::Result<()> {
        crate::metrics::timed(|| self.file.sync_data())
    }

    /// Paths of all files of the segment.
    pub(crate) fn paths(&self) -> [PathBuf; 3] {
        [
            self.log_path.clone(),
            self.offsets.path().to_path_buf(),
            self.times.path().to_path_buf(),
        ]
    }
}

/// A log file as a scan sees it, the unwritten part past its data included.
///
/// A segment file is preallocated sparse, so what follows its last batch is
/// usually a hole. Reading a hole through a map makes tmpfs allocate a page,
/// which raises SIGBUS when the file system is full; `pread` of a hole just
/// returns zeros. So the file's allocated prefix is read through the map,
/// and anything after it with `pread`.
#[derive(Debug)]
pub(crate) struct LogBytes<'a> {
    map: &'a LogMap,
    file: &'a File,
    /// Bytes before the file's first hole: safe to read through the map.
    mapped: usize,
    /// Where the read-ahead asked for so far ends.
    ahead: std::cell::Cell<usize>,
}

/// How far [`LogBytes`] reads ahead of what it is asked for, and how close
/// it lets a reader come before it reads ahead again. Its readers (recovery,
/// verify, dump) go through the data in order, and the map does not read
/// around a fault (see `map::no_read_around`).
const READ_AHEAD: usize = 8 << 20;
const READ_AHEAD_LOW: usize = 4 << 20;

impl<'a> LogBytes<'a> {
    pub(crate) fn new(map: &'a LogMap, file: &'a File) -> LogBytes<'a> {
        let mapped = crate::map::allocated_prefix(file, map.len());
        LogBytes {
            map,
            file,
            mapped,
            ahead: std::cell::Cell::new(0),
        }
    }

    /// Length of the file (as mapped).
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The bytes `start..start + len`, fewer at the end of the file.
    pub(crate) fn get(&self, start: usize, len: usize) -> std::io::Result<Cow<'a, [u8]>> {
        use std::os::unix::fs::FileExt as _;
        let start = start.min(self.len());
        let end = start.saturating_add(len).min(self.len());
        if end <= self.mapped {
            if end + READ_AHEAD_LOW > self.ahead.get() {
                let until = (end + READ_AHEAD).min(self.mapped);
                crate::map::read_ahead(self.file, self.ahead.get().max(start), until);
                self.ahead.set(until);
            }
            return Ok(Cow::Borrowed(self.map.slice(start, end)));
        }
        let mut buf = vec![0u8; end - start];
        self.file.read_exact_at(&mut buf, start as u64)?;
        Ok(Cow::Owned(buf))
    }

    /// CRC-32C of the bytes `start..end`, read a chunk at a time.
    fn crc(&self, start: usize, end: usize) -> std::io::Result<u32> {
        const CHUNK: usize = 1 << 20;
        let mut crc = 0;
        let mut at = start;
        while at < end {
            let len = if at < self.mapped {
                self.mapped.min(end) - at
            } else {
                CHUNK.min(end - at)
            };
            crc = crc32c::crc32c_append(crc, &self.get(at, len)?);
            at += len;
        }
        Ok(crc)
    }

    /// The batch at `pos`: `None` where the data ends (fewer bytes than a
    /// length prefix, or a zero one), otherwise its header or why the bytes
    /// there are not a valid batch (the same errors as
    /// [`batch::validate`]). With `check_crc`, the checksum is verified.
    pub(crate) fn batch_at(
        &self,
        pos: usize,
        check_crc: bool,
    ) -> std::io::Result<Option<std::result::Result<BatchHeader, BatchError>>> {
        let available = self.len().saturating_sub(pos);
        if available < LOG_OVERHEAD {
            return Ok(None);
        }
        let head = self.get(pos, batch::HEADER_LEN)?;
        if head[..LOG_OVERHEAD].iter().all(|&b| b == 0) {
            return Ok(None);
        }
        let header = match BatchHeader::parse(&head) {
            Ok(h) => h,
            Err(e) => return Ok(Some(Err(e))),
        };
        let size = header.size();
        if size > available {
            return Ok(Some(Err(BatchError::Truncated {
                needed: size,
                available,
            })));
        }
        if check_crc {
            let computed = self.crc(pos + batch::CRC_START, pos + size)?;
            if computed != header.crc {
                return Ok(Some(Err(BatchError::Crc {
                    stored: header.crc,
                    computed,
                })));
            }
        }
        Ok(Some(Ok(header)))
    }
}

/// Path of an index file next to a segment log.
pub(crate) fn index_path(log_path: &Path, ext: &str) -> PathBuf {
    log_path.with_extension(ext)
}
