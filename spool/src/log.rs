//! A partition log: an ordered list of segments, one appender, many readers.
//!
//! Concurrency: appends, rolls, syncs and retention serialise on the writer
//! lock. Readers never take it: they clone the current [`View`] (a few
//! pointers behind a briefly held read lock) and read the mapped segments
//! below the view's visible end, which the writer never changes again.
//! Background syncs (the `interval` policy) run `fdatasync` without the
//! writer lock, so appends continue while the disk catches up.

use std::fs::{self, File};
use std::io::Write as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::config::{Durability, LogConfig};
use crate::error::{Result, SpoolError};
use crate::segment::{self, IndexCursor, ScanStop, Segment};
use strait_batch::{self as batch, BatchHeader};

/// Name of the file holding the persisted recovery point.
pub const RECOVERY_POINT_FILE: &str = "recovery-point";
const RECOVERY_POINT_MAGIC: &[u8; 4] = b"SRP1";

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset given to the first record.
    pub base_offset: u64,
    /// Offset of the last record.
    pub last_offset: u64,
    /// Wall-clock time of the append, in ms since the epoch.
    pub log_append_time_ms: i64,
    /// Number of batches appended.
    pub batches: usize,
    /// Bytes appended.
    pub bytes: usize,
}

/// A byte range of a segment file, for `sendfile`.
#[derive(Debug, Clone)]
pub struct FileRange {
    /// The open segment file (stays valid even if retention unlinks it).
    pub file: Arc<File>,
    /// Start of the range.
    pub position: u64,
    /// Length of the range.
    pub len: u64,
}

/// Batches read from a partition.
#[derive(Debug, Clone)]
pub struct ReadResult {
    /// Whole record batches, zero-copy over the mapped segment. Empty when
    /// the offset asked for is the high watermark.
    pub records: Bytes,
    /// The same bytes as a file range, for `sendfile`.
    pub file_range: Option<FileRange>,
    /// Offset the next appended record will get, as visible to readers.
    pub high_watermark: u64,
    /// First offset still stored.
    pub log_start_offset: u64,
}

/// The state readers see: replaced whole by the writer.
#[derive(Debug)]
struct View {
    segments: Arc<Vec<Arc<Segment>>>,
    log_start: u64,
    /// Offset after the last batch readers may see.
    high_watermark: u64,
    /// Byte position in the last segment matching `high_watermark`.
    visible_end: u64,
}

/// The appender's state, behind the writer lock.
#[derive(Debug)]
struct Writer {
    segments: Arc<Vec<Arc<Segment>>>,
    position: u64,
    next_offset: u64,
    cursor: IndexCursor,
    last_relative: u32,
    /// Offset below which everything is known to be on disk.
    recovery_point: u64,
    unsynced_bytes: u64,
    last_sync: Instant,
    /// Sealed segments not yet synced (the `os` policy rolls without a
    /// sync); a flush or close syncs them before moving the recovery point.
    unsynced_sealed: Vec<Arc<Segment>>,
    buf: Vec<u8>,
    closed: bool,
}

impl Writer {
    fn active(&self) -> &Arc<Segment> {
        self.segments.last().expect("a log always has an active segment")
    }
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    config: LogConfig,
    writer: Mutex<Writer>,
    view: RwLock<Arc<View>>,
    failed: OnceLock<String>,
    /// Serialises writes of the recovery-point file; holds the value last
    /// persisted.
    checkpoint: Mutex<u64>,
}

/// What a flush syncs: segments, and the offset and bytes they cover.
#[derive(Debug)]
struct PendingFlush {
    segments: Vec<Arc<Segment>>,
    upto: u64,
    bytes: u64,
}

/// One partition's log. Cheap to clone; all clones share the log.
#[derive(Debug, Clone)]
pub struct Partition {
    inner: Arc<Inner>,
}

/// How opening a partition went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments scanned batch by batch (those at or after the recovery point).
    pub segments_scanned: usize,
    /// Where a torn or corrupt tail was cut off, and why.
    pub truncated: Option<(PathBuf, u64, String)>,
    /// Segments deleted because they followed a corrupt one.
    pub segments_dropped: usize,
}

impl Partition {
    /// Opens (or creates) the partition log in `dir`, running crash
    /// recovery: every segment at or after the persisted recovery point is
    /// validated batch by batch, a torn or corrupt tail is cut off, and the
    /// indexes of the scanned segments are rebuilt.
    pub fn open(dir: &Path, config: LogConfig) -> Result<Partition> {
        Self::open_with_report(dir, config).map(|(p, _)| p)
    }

    /// [`Partition::open`], also saying what recovery did.
    pub fn open_with_report(dir: &Path, config: LogConfig) -> Result<(Partition, RecoveryReport)> {
        config.validate()?;
        fs::create_dir_all(dir).map_err(|e| SpoolError::io("create partition directory", dir, e))?;
        let mut report = RecoveryReport::default();
        let bases = list_segments(dir)?;
        let persisted = read_recovery_point(dir)?;
        let mut recovery_point = persisted.unwrap_or(0);
        let interval = config.index_interval_bytes;

        let mut segments: Vec<Arc<Segment>> = Vec::new();
        let mut expected: Option<u64> = None;
        let mut cut_at: Option<usize> = None;
        for (i, &base) in bases.iter().enumerate() {
            let log_path = dir.join(segment::log_name(base));
            if let Some(expected) = expected.filter(|&e| e != base) {
                let reason = format!("segment starts at offset {base}, the previous one ends at {expected}");
                report.truncated = Some((log_path, 0, reason));
                cut_at = Some(i);
                break;
            }
            let last = i + 1 == bases.len();
            // The active segment gets its full capacity before it is mapped.
            let capacity = last.then_some(config.segment_bytes);
            let sealed = bases.get(i + 1).is_some_and(|&next| next <= recovery_point);
            let mut seg = Segment::open(dir, base, capacity, config.index_bytes, !sealed)?;
            let loaded = if sealed {
                seg.load_sealed()
                    .filter(|scan| Some(&scan.next_offset) == bases.get(i + 1))
            } else {
                None
            };
            let scan = match loaded.clone() {
                Some(scan) => scan,
                None => {
                    if sealed {
                        // The indexes or the log do not add up: rebuild.
                        drop(seg);
                        seg = Segment::open(dir, base, capacity, config.index_bytes, true)?;
                    }
                    report.segments_scanned += 1;
                    seg.recover(interval)?
                }
            };
            expected = Some(scan.next_offset);
            let invalid = match scan.stop {
                ScanStop::Invalid { position, ref reason } => {
                    report.truncated = Some((log_path.clone(), position, reason.clone()));
                    true
                }
                ScanStop::Clean => false,
            };
            if loaded.is_none() && (invalid || has_stale_tail(&seg, scan.end)) {
                // Zero everything past the valid data, whether the scan hit
                // garbage or zeros: a torn write can leave stale bytes after
                // a zeroed header, which a later, shorter append would
                // otherwise bring back to life. Unmap first; nothing reads
                // the partition yet, and the rebuilt indexes cover exactly
                // the valid batches.
                let capacity = seg
                    .capacity()
                    .max(if invalid || last { config.segment_bytes } else { 0 });
                seg = seg.truncate_tail(scan.end, capacity)?;
            }
            segments.push(Arc::new(seg));
            if invalid {
                cut_at = Some(i + 1);
                break;
            }
        }
        if let Some(cut) = cut_at {
            for &base in &bases[cut..] {
                remove_segment_files(&dir.join(segment::log_name(base)))?;
                report.segments_dropped += 1;
            }
        }
        if segments.is_empty() {
            let seg = Segment::create(dir, recovery_point, config.segment_bytes, config.index_bytes)?;
            sync_dir(dir)?;
            segments.push(Arc::new(seg));
        }
        let active = segments.last().expect("at least one segment");
        // What recovery read is what the disk holds now; make sure it stays
        // so before trusting it as the recovery point. Nothing to do when
        // it all lies below the persisted recovery point (a cleanly closed
        // or a new partition): that was synced before it was persisted.
        if active.next_offset() > persisted.unwrap_or(0) {
            active
                .sync_log()
                .map_err(|e| SpoolError::io("sync segment", &active.log_path, e))?;
        }
        let position = active.size();
        let next_offset = active.next_offset();
        let cursor = cursor_after(active);
        let last_relative = last_batch_relative(active);
        recovery_point = next_offset;
        let log_start = segments[0].base_offset;
        let segments = Arc::new(segments);
        let view = View {
            segments: Arc::clone(&segments),
            log_start,
            high_watermark: next_offset,
            visible_end: position,
        };
        let writer = Writer {
            segments,
            position,
            next_offset,
            cursor,
            last_relative,
            recovery_point,
            unsynced_bytes: 0,
            last_sync: Instant::now(),
            unsynced_sealed: Vec::new(),
            buf: Vec::new(),
            closed: false,
        };
        let partition = Partition {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                config,
                writer: Mutex::new(writer),
                view: RwLock::new(Arc::new(view)),
                failed: OnceLock::new(),
                checkpoint: Mutex::new(persisted.unwrap_or(0)),
            }),
        };
        // Opening must not need free space: a process killed on a full disk
        // comes back, serves reads and refuses appends until space returns.
        partition.checkpoint_unless_full()?;
        if let Some((path, position, reason)) = &report.truncated {
            tracing::warn!(
                file = %path.display(),
                position,
                reason,
                segments_dropped = report.segments_dropped,
                "recovery cut the log at the first invalid batch"
            );
        }
        Ok((partition, report))
    }

    /// Whether `other` is a handle to the same open log.
    pub fn same_as(&self, other: &Partition) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The partition's directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The partition's settings.
    pub fn config(&self) -> &LogConfig {
        &self.inner.config
    }

    /// Appends the record batches in `data` (one or more, concatenated).
    ///
    /// Every batch is validated (length, magic, CRC-32C, size limit) before
    /// anything is written: one bad batch rejects the whole call. Offsets
    /// are assigned by rewriting each batch's base offset. Under
    /// `every_batch` the data is on disk when this returns. Blocks on disk
    /// I/O: call it from an I/O thread (see [`crate::IoPool`]).
    pub fn append(&self, data: &[u8]) -> Result<AppendInfo> {
        self.append_group(&[data]).pop().expect("one result per call")
    }

    /// Appends several independent calls with at most one sync for all of
    /// them (group commit). Each call is atomic on its own and gets its own
    /// result, in order.
    pub fn append_group(&self, calls: &[&[u8]]) -> Vec<Result<AppendInfo>> {
        let checked: Vec<Result<Vec<BatchHeader>>> =
            calls.iter().map(|data| self.validate_call(data)).collect();
        let mut results = Vec::with_capacity(calls.len());
        let mut w = self.lock_writer();
        for (data, headers) in calls.iter().zip(checked) {
            let result = match (self.check_usable(&w), headers) {
                (Err(e), _) | (Ok(()), Err(e)) => Err(e),
                (Ok(()), Ok(headers)) => self.write_call(&mut w, data, &headers),
            };
            results.push(result);
        }
        let written: u64 = results.iter().flatten().map(|info| info.bytes as u64).sum();
        if written > 0 {
            w.unsynced_bytes += written;
            let must_sync = match self.inner.config.durability {
                Durability::EveryBatch => true,
                Durability::Interval { bytes, .. } => bytes.is_some_and(|b| w.unsynced_bytes >= b),
                Durability::Os => false,
            };
            if must_sync {
                if let Err(e) = self.sync_locked(&mut w) {
                    let reason = e.to_string();
                    for r in results.iter_mut() {
                        if r.is_ok() {
                            *r = Err(self.failed_error(&reason));
                        }
                    }
                }
            }
            self.publish(&w);
        }
        results
    }

    fn validate_call(&self, data: &[u8]) -> Result<Vec<BatchHeader>> {
        if data.is_empty() {
            return Err(SpoolError::EmptyAppend);
        }
        let mut headers = Vec::new();
        for item in batch::Batches::new(data) {
            let (_, header) = item.map_err(|(position, source)| SpoolError::InvalidBatch {
                position,
                error: source,
            })?;
            if header.size() as u64 > self.inner.config.max_batch_bytes {
                return Err(SpoolError::BatchTooLarge {
                    size: header.size(),
                    max: self.inner.config.max_batch_bytes,
                });
            }
            headers.push(header);
        }
        let span: u64 = headers.iter().map(BatchHeader::offset_count).sum();
        if span > u32::MAX as u64 {
            return Err(SpoolError::OffsetSpan { span });
        }
        Ok(headers)
    }

    fn check_usable(&self, w: &Writer) -> Result<()> {
        if let Some(reason) = self.inner.failed.get() {
            return Err(self.failed_error(reason));
        }
        if w.closed {
            return Err(SpoolError::Closed);
        }
        Ok(())
    }

    fn failed_error(&self, reason: &str) -> SpoolError {
        SpoolError::Failed {
            path: self.inner.dir.clone(),
            reason: reason.to_string(),
        }
    }

    /// Marks the partition failed (first reason wins) and returns the error.
    fn fail(&self, reason: String) -> SpoolError {
        let _ = self.inner.failed.set(reason);
        self.failed_error(self.inner.failed.get().map(String::as_str).unwrap_or_default())
    }

    fn write_call(&self, w: &mut Writer, data: &[u8], headers: &[BatchHeader]) -> Result<AppendInfo> {
        let config = &self.inner.config;
        let total = data.len() as u64;
        let offsets: u64 = headers.iter().map(BatchHeader::offset_count).sum();
        if total > config.segment_bytes {
            return Err(SpoolError::BatchTooLarge {
                size: data.len(),
                max: config.segment_bytes,
            });
        }
        let needs_roll = {
            let active = w.active();
            w.position > 0
                && (w.position + total > active.capacity()
                    || !active.index_room(headers.len())
                    || active.opened_at.elapsed() >= config.segment_age
                    || w.next_offset + offsets - 1 - active.base_offset > u32::MAX as u64)
        };
        if needs_roll {
            self.roll(w)?;
        }
        let active = Arc::clone(w.active());
        if w.position + total > active.capacity() {
            // Only an active segment written by an earlier, smaller
            // configuration can get here; it was extended on open.
            return Err(SpoolError::BatchTooLarge {
                size: data.len(),
                max: active.capacity() - w.position,
            });
        }

        w.buf.clear();
        w.buf.extend_from_slice(data);
        let mut offset = w.next_offset;
        let mut at = 0;
        for header in headers {
            batch::stamp(&mut w.buf[at..], offset as i64, 0);
            offset += header.offset_count();
            at += header.size();
        }
        let (written, result) = write_at_counting(&active.file, &w.buf, w.position);
        if let Err(e) = result {
            // Make sure no complete batch of this call survives a crash:
            // recovery stops at the zeroed header.
            if let Err(undo) = undo_write(&active.file, w.position, written) {
                return Err(self.fail(format!("write failed ({e}) and could not be undone ({undo})")));
            }
            return Err(SpoolError::io("append to", &active.log_path, e));
        }

        let now_ms = now_ms();
        let mut position = w.position;
        let mut offset = w.next_offset;
        let mut max_ts = i64::MIN;
        for header in headers {
            let mut stamped = *header;
            stamped.base_offset = offset as i64;
            max_ts = max_ts.max(header.max_timestamp);
            active.raise_max_timestamp(header.max_timestamp);
            active.index_batch(&mut w.cursor, config.index_interval_bytes, position, &stamped);
            w.last_relative = (offset - active.base_offset) as u32;
            position += header.size() as u64;
            offset += header.offset_count();
        }
        active.set_end(position, offset, max_ts);
        let info = AppendInfo {
            base_offset: w.next_offset,
            last_offset: offset - 1,
            log_append_time_ms: now_ms,
            batches: headers.len(),
            bytes: data.len(),
        };
        w.position = position;
        w.next_offset = offset;
        Ok(info)
    }

    /// Seals the active segment and starts a new one at the next offset.
    fn roll(&self, w: &mut Writer) -> Result<()> {
        let old = Arc::clone(w.active());
        old.push_time_entry(w.last_relative);
        let durable = self.inner.config.durability != Durability::Os;
        if durable {
            if let Err(e) = old.sync() {
                return Err(self.fail(format!("fsync of {} failed: {e}", old.log_path.display())));
            }
            w.recovery_point = w.next_offset;
            w.unsynced_bytes = 0;
            w.last_sync = Instant::now();
        } else {
            w.unsynced_sealed.push(Arc::clone(&old));
        }
        let new = Segment::create(
            &self.inner.dir,
            w.next_offset,
            self.inner.config.segment_bytes,
            self.inner.config.index_bytes,
        )?;
        if durable {
            sync_dir(&self.inner.dir).map_err(|e| self.fail(e.to_string()))?;
        }
        let mut segments = Vec::clone(&w.segments);
        segments.push(Arc::new(new));
        w.segments = Arc::new(segments);
        w.position = 0;
        w.cursor = IndexCursor::default();
        w.last_relative = 0;
        self.publish(w);
        if durable {
            // The roll is done; an older persisted point is still a lower
            // bound, so a full disk here need not fail the append.
            let point = w.recovery_point;
            self.persist_unless_full(point)?;
        }
        Ok(())
    }

    /// Syncs the active segment while holding the writer lock.
    fn sync_locked(&self, w: &mut Writer) -> Result<()> {
        if w.recovery_point >= w.next_offset {
            return Ok(());
        }
        if let Err(e) = w.active().sync_log() {
            return Err(self.fail(format!("fsync of {} failed: {e}", w.active().log_path.display())));
        }
        w.recovery_point = w.next_offset;
        w.unsynced_bytes = 0;
        w.last_sync = Instant::now();
        Ok(())
    }

    /// Makes everything appended so far durable. Appends continue while the
    /// sync runs; it does not hold the writer lock across `fdatasync`.
    pub fn flush(&self) -> Result<()> {
        let Some(pending) = self.begin_flush()? else {
            return Ok(());
        };
        if let Err((segment, e)) = sync_segments(&pending.segments) {
            return Err(self.fail(format!("fsync of {} failed: {e}", segment.log_path.display())));
        }
        self.finish_flush(&pending);
        Ok(())
    }

    /// What a flush has to sync, or `None` when everything is synced.
    fn begin_flush(&self) -> Result<Option<PendingFlush>> {
        let mut w = self.lock_writer();
        self.check_usable(&w)?;
        if w.recovery_point >= w.next_offset {
            return Ok(None);
        }
        let mut segments = std::mem::take(&mut w.unsynced_sealed);
        segments.push(Arc::clone(w.active()));
        Ok(Some(PendingFlush {
            segments,
            upto: w.next_offset,
            bytes: w.unsynced_bytes,
        }))
    }

    /// Moves the recovery point once `pending` is on disk.
    fn finish_flush(&self, pending: &PendingFlush) {
        let mut w = self.lock_writer();
        if w.recovery_point < pending.upto {
            w.recovery_point = pending.upto;
            w.unsynced_bytes = w.unsynced_bytes.saturating_sub(pending.bytes);
            w.last_sync = Instant::now();
            if self.inner.config.durability == Durability::EveryBatch {
                self.publish(&w);
            }
        }
    }

    /// Whether the `interval` policy wants a sync now.
    pub fn flush_due(&self) -> bool {
        let Durability::Interval { every, .. } = self.inner.config.durability else {
            return false;
        };
        let w = self.lock_writer();
        w.recovery_point < w.next_offset && w.last_sync.elapsed() >= every
    }

    /// [`Partition::flush`] for many partitions at once, with one `syncfs`
    /// per file system instead of an `fdatasync` per file: with thousands of
    /// partitions, that is one journal commit rather than thousands, each of
    /// which holds up every append behind it. Where `syncfs` fails, each
    /// partition is synced on its own, so that an error lands on the
    /// partition it belongs to. One result per partition, in order.
    pub fn flush_together(partitions: &[Partition]) -> Vec<Result<()>> {
        use std::os::unix::fs::MetadataExt as _;
        let mut results: Vec<Result<()>> = Vec::with_capacity(partitions.len());
        let mut pending = Vec::new();
        for (i, p) in partitions.iter().enumerate() {
            match p.begin_flush() {
                Ok(Some(flush)) => {
                    pending.push((i, flush));
                    results.push(Ok(()));
                }
                Ok(None) => results.push(Ok(())),
                Err(e) => results.push(Err(e)),
            }
        }
        let mut devices: Vec<(u64, Arc<File>)> = Vec::new();
        for (_, flush) in &pending {
            let file = &flush
                .segments
                .last()
                .expect("a flush has its active segment")
                .file;
            if let Ok(meta) = file.metadata() {
                if !devices.iter().any(|(dev, _)| *dev == meta.dev()) {
                    devices.push((meta.dev(), Arc::clone(file)));
                }
            }
        }
        let synced = !devices.is_empty()
            && devices
                .iter()
                .all(|(_, file)| crate::metrics::timed(|| rustix::fs::syncfs(file.as_ref())).is_ok());
        for (i, flush) in pending {
            let p = &partitions[i];
            if !synced {
                if let Err((segment, e)) = sync_segments(&flush.segments) {
                    results[i] = Err(p.fail(format!("fsync of {} failed: {e}", segment.log_path.display())));
                    continue;
                }
            }
            p.finish_flush(&flush);
        }
        results
    }

    /// Writes the in-memory recovery point to disk, if it moved. Only ever
    /// persists a point that has been synced.
    pub fn checkpoint(&self) -> Result<()> {
        let point = self.lock_writer().recovery_point;
        self.persist_recovery_point(point)
    }

    /// [`Partition::checkpoint`], but a full disk only logs a warning: the
    /// recovery point on disk then stays the older one, which is still a
    /// lower bound (recovery scans a little more).
    fn checkpoint_unless_full(&self) -> Result<()> {
        let point = self.lock_writer().recovery_point;
        self.persist_unless_full(point)
    }

    fn persist_unless_full(&self, point: u64) -> Result<()> {
        match self.persist_recovery_point(point) {
            Err(e @ SpoolError::DiskFull { .. }) => {
                tracing::warn!(partition = %self.inner.dir.display(), error = %e,
                    "the recovery point stays at its older value until space is freed");
                Ok(())
            }
            other => other,
        }
    }

    fn persist_recovery_point(&self, point: u64) -> Result<()> {
        let mut persisted = self.inner.checkpoint.lock().unwrap_or_else(|e| e.into_inner());
        if *persisted == point {
            return Ok(());
        }
        write_recovery_point(&self.inner.dir, point)?;
        *persisted = point;
        Ok(())
    }

    /// Syncs everything, persists the recovery point and refuses further
    /// appends. Reads keep working.
    pub fn close(&self) -> Result<()> {
        let point = {
            let mut w = self.lock_writer();
            if w.closed {
                return Ok(());
            }
            // Nothing to sync when everything is below the recovery point
            // (sealed segments are synced whole before they count as such).
            let unsynced = w.recovery_point < w.next_offset || !w.unsynced_sealed.is_empty();
            if self.inner.failed.get().is_none() && unsynced {
                let active = Arc::clone(w.active());
                active.push_time_entry(w.last_relative);
                let mut segments = std::mem::take(&mut w.unsynced_sealed);
                segments.push(active);
                if let Err((segment, e)) = sync_segments(&segments) {
                    return Err(self.fail(format!("fsync of {} failed: {e}", segment.log_path.display())));
                }
                w.recovery_point = w.next_offset;
                self.publish(&w);
            }
            w.closed = true;
            w.recovery_point
        };
        if self.inner.failed.get().is_none() {
            self.persist_recovery_point(point)?;
        }
        Ok(())
    }

    fn publish(&self, w: &Writer) {
        let (high_watermark, visible_end) =
            if self.inner.config.durability == Durability::EveryBatch && w.recovery_point < w.next_offset {
                // Readers see only durable batches: keep what they saw.
                let current = self.view();
                (current.high_watermark, current.visible_end)
            } else {
                (w.next_offset, w.position)
            };
        let view = View {
            segments: Arc::clone(&w.segments),
            log_start: w.segments[0].base_offset,
            high_watermark,
            visible_end,
        };
        *self.inner.view.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(view);
    }

    fn view(&self) -> Arc<View> {
        Arc::clone(&self.inner.view.read().unwrap_or_else(|e| e.into_inner()))
    }

    fn lock_writer(&self) -> MutexGuard<'_, Writer> {
        // A panic while holding the lock leaves the writer's state as it was
        // before the failed call's publish: still consistent for recovery.
        self.inner.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Offset the next record gets, as readers see it.
    pub fn high_watermark(&self) -> u64 {
        self.view().high_watermark
    }

    /// First offset still stored.
    pub fn log_start_offset(&self) -> u64 {
        self.view().log_start
    }

    /// Offset below which all data is known to be on disk.
    pub fn recovery_point(&self) -> u64 {
        self.lock_writer().recovery_point
    }

    /// Bytes of batches stored.
    pub fn size_bytes(&self) -> u64 {
        let view = self.view();
        let n = view.segments.len();
        view.segments[..n - 1].iter().map(|s| s.size()).sum::<u64>() + view.visible_end
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.view().segments.len()
    }

    /// Whether an fsync or unrecoverable write error failed the partition.
    pub fn failure(&self) -> Option<String> {
        self.inner.failed.get().cloned()
    }

    /// Reads whole batches starting with the one holding `offset`, up to
    /// `max_bytes` (but always at least one batch, so a batch larger than
    /// `max_bytes` still makes progress, as Kafka's KIP-74 asks). Reads from
    /// one segment per call. Never waits for the writer; touching the
    /// returned bytes may fault pages in (see [`Partition::read_prefaulted`]).
    pub fn read(&self, offset: u64, max_bytes: usize) -> Result<ReadResult> {
        self.locate(offset, max_bytes).map(|(result, _)| result)
    }

    /// Like [`Partition::read`], then brings the pages into memory so that
    /// the caller does not fault on them. For I/O threads.
    pub fn read_prefaulted(&self, offset: u64, max_bytes: usize) -> Result<ReadResult> {
        let (result, segment) = self.locate(offset, max_bytes)?;
        if let (Some(seg), Some(range)) = (segment, &result.file_range) {
            seg.map.prefault(
                &seg.file,
                range.position as usize,
                (range.position + range.len) as usize,
            );
        }
        Ok(result)
    }

    fn locate(&self, offset: u64, max_bytes: usize) -> Result<(ReadResult, Option<Arc<Segment>>)> {
        let view = self.view();
        let empty = ReadResult {
            records: Bytes::new(),
            file_range: None,
            high_watermark: view.high_watermark,
            log_start_offset: view.log_start,
        };
        if offset < view.log_start || offset > view.high_watermark {
            return Err(SpoolError::OffsetOutOfRange {
                offset,
                log_start: view.log_start,
                high_watermark: view.high_watermark,
            });
        }
        if offset == view.high_watermark {
            return Ok((empty, None));
        }
        let segments = &view.segments;
        let first = segments
            .partition_point(|s| s.base_offset <= offset)
            .saturating_sub(1);
        for (i, seg) in segments.iter().enumerate().skip(first) {
            let end = if i + 1 == segments.len() {
                view.visible_end
            } else {
                seg.size()
            };
            let Some((start, _)) = seg.find_offset(offset, end) else {
                continue;
            };
            let mut stop = start;
            while stop < end {
                let Some(header) = seg.header_at(stop) else { break };
                let next = stop + header.size() as u64;
                if next > end || (stop > start && (next - start) as usize > max_bytes) {
                    break;
                }
                stop = next;
            }
            let result = ReadResult {
                records: seg.map.bytes(start as usize, stop as usize),
                file_range: Some(FileRange {
                    file: Arc::clone(&seg.file),
                    position: start,
                    len: stop - start,
                }),
                ..empty
            };
            return Ok((result, Some(Arc::clone(seg))));
        }
        Ok((empty, None))
    }

    /// The first batch whose largest timestamp is at least `timestamp`:
    /// its base offset and that timestamp. `None` if no batch is that new.
    /// (Granularity is the batch: records are not decompressed.)
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Option<(u64, i64)> {
        let view = self.view();
        let n = view.segments.len();
        for (i, seg) in view.segments.iter().enumerate() {
            if seg.max_timestamp() < timestamp {
                continue;
            }
            let end = if i + 1 == n { view.visible_end } else { seg.size() };
            if let Some((_, header)) = seg.find_timestamp(timestamp, end) {
                return Some((header.base_offset as u64, header.max_timestamp));
            }
        }
        None
    }

    /// Deletes whole segments that retention no longer keeps: oldest first,
    /// while older than `retention_age` (by their newest timestamp) or while
    /// the partition stays at least `retention_bytes` without them. The
    /// active segment is never deleted. Readers holding slices of a deleted
    /// segment keep them. Returns how many segments went.
    pub fn apply_retention(&self, now_ms: i64) -> Result<usize> {
        let config = &self.inner.config;
        let doomed: Vec<Arc<Segment>> = {
            let mut w = self.lock_writer();
            let n = w.segments.len();
            let mut total: u64 = w.segments[..n - 1].iter().map(|s| s.size()).sum::<u64>() + w.position;
            let mut count = 0;
            for seg in &w.segments[..n - 1] {
                let too_old = config
                    .retention_age
                    .is_some_and(|age| seg.max_timestamp() < now_ms.saturating_sub(age.as_millis() as i64));
                let too_big = config
                    .retention_bytes
                    .is_some_and(|limit| total - seg.size() >= limit);
                if !(too_old || too_big) {
                    break;
                }
                total -= seg.size();
                count += 1;
            }
            if count == 0 {
                return Ok(0);
            }
            let doomed = w.segments[..count].to_vec();
            w.segments = Arc::new(w.segments[count..].to_vec());
            self.publish(&w);
            doomed
        };
        for seg in &doomed {
            for path in seg.paths() {
                match fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(SpoolError::io("delete segment file", path, e)),
                }
            }
        }
        Ok(doomed.len())
    }
}

/// Base offsets of the segment logs in `dir`, sorted. Removes leftovers of
/// interrupted operations (temporary files, indexes without a log).
fn list_segments(dir: &Path) -> Result<Vec<u64>> {
    let mut bases = Vec::new();
    let mut indexes = Vec::new();
    let entries = fs::read_dir(dir).map_err(|e| SpoolError::io("list partition directory", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| SpoolError::io("list partition directory", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(base) = segment::parse_log_name(name) {
            bases.push(base);
        } else if name.ends_with(".index") || name.ends_with(".timeindex") {
            indexes.push(entry.path());
        } else if name.ends_with(".tmp") {
            let _ = fs::remove_file(entry.path());
        }
    }
    for index in indexes {
        if !index.with_extension("log").exists() {
            let _ = fs::remove_file(index);
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

fn remove_segment_files(log_path: &Path) -> Result<()> {
    for path in [
        log_path.to_path_buf(),
        segment::index_path(log_path, "index"),
        segment::index_path(log_path, "timeindex"),
    ] {
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(SpoolError::io("delete segment file", path, e)),
        }
    }
    Ok(())
}

/// Writes all of `buf` at `position`, like `write_all_at`, but also says how
/// many bytes reached the file when it fails.
fn write_at_counting(file: &File, buf: &[u8], position: u64) -> (usize, std::io::Result<()>) {
    let mut written = 0;
    while written < buf.len() {
        match file.write_at(&buf[written..], position + written as u64) {
            Ok(0) => return (written, Err(std::io::ErrorKind::WriteZero.into())),
            Ok(n) => written += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return (written, Err(e)),
        }
    }
    (written, Ok(()))
}

/// Undoes an append whose write failed after `written` bytes at `position`:
/// zeroes what it wrote, and at least the first batch header there, so that
/// recovery stops at it, no batch of the failed call survives a crash, and
/// nothing but zeros follows the log.
///
/// On a full disk, zeroing header bytes that the failed write never reached
/// can itself fail (the file system has no block for them, so they were not
/// written). Then it is enough to zero what the call did write: those bytes
/// have their blocks already. Only if that fails too is the append not
/// undone.
fn undo_write(file: &File, position: u64, written: usize) -> std::io::Result<()> {
    let zeros = vec![0u8; written.max(batch::LOG_OVERHEAD)];
    match file.write_all_at(&zeros, position) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => file.write_all_at(&zeros[..written], position),
        Err(e) => Err(e),
    }
}

/// Reads the persisted recovery point, if there is a valid one.
pub fn read_recovery_point(dir: &Path) -> Result<Option<u64>> {
    let path = dir.join(RECOVERY_POINT_FILE);
    let raw = match fs::read(&path) {
        Ok(raw) => raw,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SpoolError::io("read recovery point", path, e)),
    };
    if raw.len() != 16 || &raw[..4] != RECOVERY_POINT_MAGIC {
        return Ok(None);
    }
    let value: [u8; 8] = raw[4..12].try_into().expect("8 bytes");
    let crc = u32::from_be_bytes(raw[12..16].try_into().expect("4 bytes"));
    if crc32c::crc32c(&value) != crc {
        return Ok(None);
    }
    Ok(Some(u64::from_be_bytes(value)))
}

/// Whether anything but zeros follows `end` in `seg`'s log file (its holes
/// are not read). Usually nothing does: after a clean shutdown, or a crash
/// between appends, there is nothing to cut, sync and map again, which
/// with thousands of partitions was most of the time to start.
fn has_stale_tail(seg: &Segment, end: u64) -> bool {
    crate::map::first_nonzero(&seg.file, end as usize, seg.capacity() as usize)
        .map_or(true, |at| at.is_some())
}

/// Syncs sealed segments whole and the last (active) one's log; on failure,
/// the segment that failed and why.
fn sync_segments(segments: &[Arc<Segment>]) -> std::result::Result<(), (&Arc<Segment>, std::io::Error)> {
    let Some((active, sealed)) = segments.split_last() else {
        return Ok(());
    };
    for segment in sealed {
        segment.sync().map_err(|e| (segment, e))?;
    }
    active.sync_log().map_err(|e| (active, e))
}

/// Replaces the recovery-point file (writes a temporary file and renames it
/// over the old one) without syncing either: the value is a lower bound
/// that only ever names synced data, so after a crash the old value, the
/// new one, or no valid file at all (recovery then scans every segment) are
/// all correct. Skipping the syncs saves three per checkpoint, which with
/// thousands of partitions added up to seconds.
fn write_recovery_point(dir: &Path, point: u64) -> Result<()> {
    let tmp = dir.join(format!("{RECOVERY_POINT_FILE}.tmp"));
    let path = dir.join(RECOVERY_POINT_FILE);
    let value = point.to_be_bytes();
    let mut raw = Vec::with_capacity(16);
    raw.extend_from_slice(RECOVERY_POINT_MAGIC);
    raw.extend_from_slice(&value);
    raw.extend_from_slice(&crc32c::crc32c(&value).to_be_bytes());
    let write = || -> std::io::Result<()> {
        let mut file = File::create(&tmp)?;
        file.write_all(&raw)?;
        fs::rename(&tmp, &path)
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        SpoolError::io("write recovery point", &path, e)
    })
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| SpoolError::io("sync directory", dir, e))
}

/// Index cursor state after the segment's existing batches.
fn cursor_after(seg: &Segment) -> IndexCursor {
    let last_entry = seg.offsets.last().map_or(0, |e| e.position as u64);
    IndexCursor {
        bytes_since_entry: seg.size().saturating_sub(last_entry),
    }
}

/// Relative offset of the segment's last batch (0 if empty).
fn last_batch_relative(seg: &Segment) -> u32 {
    let Some(entry) = seg.offsets.last() else { return 0 };
    let mut pos = entry.position as u64;
    let mut relative = entry.relative_offset;
    while pos < seg.size() {
        let Some(header) = seg.header_at(pos) else { break };
        relative = (header.base_offset as u64 - seg.base_offset) as u32;
        pos += header.size() as u64;
    }
    relative
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Default tick of background work (used by [`crate::Spool`]).
pub(crate) const TICK: Duration = Duration::from_millis(50);
