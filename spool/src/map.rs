//! Memory maps of segment and index files: the only module with `unsafe`.
//!
//! Invariants every caller keeps (they are what make the `unsafe` below
//! sound and SIGBUS-free):
//!
//! - A file is mapped at most to its length at mapping time, and a mapped
//!   file is never shrunk while the process runs. Files are preallocated
//!   (`set_len`) to their full capacity before they are mapped; recovery
//!   truncates a torn tail only before anything maps the file.
//! - Bytes that a reader can see (below a published position or entry
//!   count) are never written again. The single writer only writes beyond
//!   what it has published, and publishes with release ordering after the
//!   write has completed.
//! - Deleting a segment unlinks its files but keeps the mappings alive until
//!   the last reader drops them, so a slice handed out never dangles.
//! - Nothing reads or writes a hole through a map: tmpfs allocates a page
//!   for any fault on a hole, even a read, and raises SIGBUS when it is
//!   full. Index blocks are allocated before entries are stored; reads stay
//!   below published ends or before a file's first hole
//!   ([`allocated_prefix`]), and go through `pread` beyond it.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt as _;
use std::sync::Arc;

use bytes::Bytes;
use memmap2::{Advice, MmapOptions, MmapRaw};

const PAGE: usize = 4096;

/// A read-only map of a whole segment log file.
#[derive(Debug)]
pub(crate) struct LogMap {
    raw: MmapRaw,
}

impl LogMap {
    /// Maps the first `len` bytes of `file`, which must be at least that long.
    pub(crate) fn new(file: &File, len: usize) -> io::Result<LogMap> {
        debug_assert!(file.metadata().map(|m| m.len() >= len as u64).unwrap_or(true));
        let raw = MmapOptions::new().len(len.max(1)).map_raw_read_only(file)?;
        no_read_around(&raw);
        Ok(LogMap { raw })
    }

    /// Length of the mapping.
    pub(crate) fn len(&self) -> usize {
        self.raw.len()
    }

    /// The bytes `start..end` of the file.
    ///
    /// The caller must only ask for bytes that are published (written and no
    /// longer changing); see the module invariants.
    pub(crate) fn slice(&self, start: usize, end: usize) -> &[u8] {
        assert!(
            start <= end && end <= self.raw.len(),
            "slice {start}..{end} outside the map"
        );
        // SAFETY: the range lies inside the mapping (checked above), the file
        // is never shrunk below the mapping's length while mapped, and the
        // bytes are published, so nothing writes them while the returned
        // borrow (tied to `self`) lives.
        unsafe { std::slice::from_raw_parts(self.raw.as_ptr().add(start), end - start) }
    }

    /// A zero-copy `Bytes` of `start..end`, keeping the map alive.
    pub(crate) fn bytes(self: &Arc<Self>, start: usize, end: usize) -> Bytes {
        // Check the range now rather than when the Bytes is first read.
        let _ = self.slice(start, end);
        Bytes::from_owner(MapSlice {
            map: Arc::clone(self),
            start,
            end,
        })
    }

    /// Brings `start..end` of `file` (the mapped file) into memory so that
    /// reading it later does not fault. Runs on an I/O thread, never on an
    /// async runtime's worker. The range is read ahead first (the map
    /// itself reads no more than the page that faults, see
    /// [`no_read_around`]).
    pub(crate) fn prefault(&self, file: &File, start: usize, end: usize) {
        if start >= end {
            return;
        }
        read_ahead(file, start, end);
        let populated = self
            .raw
            .advise_range(
                Advice::PopulateRead,
                start - start % PAGE,
                end - (start - start % PAGE),
            )
            .is_ok();
        if !populated {
            let bytes = self.slice(start, end);
            let mut sum = 0u8;
            for i in (0..bytes.len()).step_by(PAGE) {
                sum = sum.wrapping_add(bytes[i]);
            }
            std::hint::black_box(sum);
        }
    }
}

/// The owner behind a zero-copy `Bytes` over a mapped segment.
struct MapSlice {
    map: Arc<LogMap>,
    start: usize,
    end: usize,
}

impl AsRef<[u8]> for MapSlice {
    fn as_ref(&self) -> &[u8] {
        self.map.slice(self.start, self.end)
    }
}

/// A read-write map of a preallocated index file with fixed-size entries.
///
/// One writer appends entries past the published count; readers read entries
/// below it. Entries are copied in and out, never borrowed, so no reference
/// to bytes that another thread writes ever exists.
#[derive(Debug)]
pub(crate) struct IndexMap {
    raw: MmapRaw,
}

impl IndexMap {
    /// Maps all of `file` (opened read-write), whose length must be non-zero.
    pub(crate) fn new(file: &File) -> io::Result<IndexMap> {
        let raw = MmapRaw::map_raw(file)?;
        no_read_around(&raw);
        Ok(IndexMap { raw })
    }

    /// Capacity in bytes.
    pub(crate) fn len(&self) -> usize {
        self.raw.len()
    }

    /// Copies `out.len()` bytes at `at` out of the map. The caller reads
    /// only bytes on allocated blocks (entries written, or found before the
    /// file's first hole), so the copy cannot fault for lack of space.
    pub(crate) fn read_into(&self, at: usize, out: &mut [u8]) {
        assert!(at + out.len() <= self.raw.len(), "index read past its map");
        // SAFETY: the range is inside the mapping (checked above) and the
        // file is never shrunk while mapped. Readers only read entries the
        // writer has published, so the copy does not race with a write.
        unsafe { std::ptr::copy_nonoverlapping(self.raw.as_ptr().add(at), out.as_mut_ptr(), out.len()) };
    }

    /// Copies `data` into the map at `at`. Only the partition's single writer
    /// calls this, and only past the published entries.
    pub(crate) fn write(&self, at: usize, data: &[u8]) {
        assert!(at + data.len() <= self.raw.len(), "index write past its map");
        // SAFETY: inside the mapping (checked above); the writer holds the
        // partition's writer lock and writes only unpublished entries, which
        // no reader reads, so there is no concurrent access to these bytes.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.raw.as_mut_ptr().add(at), data.len()) };
    }

    /// Flushes the written entries to disk.
    pub(crate) fn flush(&self) -> io::Result<()> {
        self.raw.flush()
    }
}

/// How many bytes from the start of `file` (at most `len`) come before its
/// first hole. Reading those through a map cannot fault for lack of space;
/// reading a hole can: tmpfs allocates a page to serve a fault on a hole,
/// even a read fault, and raises SIGBUS when it is full. (`pread` of a hole
/// returns zeros without allocating.) 0 if the file system cannot say.
pub(crate) fn allocated_prefix(file: &File, len: usize) -> usize {
    use rustix::fs::{seek, SeekFrom};
    match seek(file, SeekFrom::Hole(0)) {
        Ok(end) => usize::try_from(end).unwrap_or(usize::MAX).min(len),
        Err(_) => 0,
    }
}

/// Allocates disk blocks for `len` bytes of `file` at `offset`, keeping the
/// bytes already there, so that storing through a map of that range cannot
/// fault for lack of space. Falls back to rewriting the range where the file
/// system has no `fallocate`.
pub(crate) fn allocate(file: &File, offset: usize, len: usize) -> io::Result<()> {
    use rustix::fs::{fallocate, FallocateFlags};
    match fallocate(file, FallocateFlags::empty(), offset as u64, len as u64) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::OPNOTSUPP) => {
            let mut buf = vec![0u8; len];
            file.read_exact_at(&mut buf, offset as u64)?;
            file.write_all_at(&buf, offset as u64)
        }
        Err(e) => Err(e.into()),
    }
}

/// The position of the first non-zero byte of `file` in `from..end`. Reads
/// with `pread`, and only the file's data regions: the holes of a sparse,
/// preallocated file read as zeros without being looked at.
pub(crate) fn first_nonzero(file: &File, from: usize, end: usize) -> std::io::Result<Option<usize>> {
    use rustix::fs::{seek, SeekFrom};
    const CHUNK: usize = 1 << 20;
    let mut buf = Vec::new();
    let mut at = from;
    while at < end {
        let (start, stop) = match seek(file, SeekFrom::Data(at as u64)) {
            Ok(start) => {
                let start = start as usize;
                let stop = seek(file, SeekFrom::Hole(start as u64)).map_or(end, |e| e as usize);
                (start, stop.min(end))
            }
            // No data after `at`: the rest is a hole.
            Err(rustix::io::Errno::NXIO) => return Ok(None),
            // No SEEK_DATA here: read everything.
            Err(_) => (at, end),
        };
        let mut chunk_at = start;
        while chunk_at < stop {
            let len = CHUNK.min(stop - chunk_at);
            buf.resize(len, 0);
            file.read_exact_at(&mut buf, chunk_at as u64)?;
            if let Some(off) = buf.iter().position(|&b| b != 0) {
                return Ok(Some(chunk_at + off));
            }
            chunk_at += len;
        }
        at = stop.max(start + 1);
    }
    Ok(None)
}

/// Asks the kernel not to read around a page that faults in `map`. By
/// default a fault reads the pages around it too (up to a large folio of
/// megabytes), and in a sparse, preallocated segment or index those are
/// holes: each first append or scan of a partition zero-filled megabytes of
/// page cache, most of the time it took to open or write thousands of
/// partitions. Reads that want more than a page say so with [`read_ahead`].
fn no_read_around(map: &MmapRaw) {
    // Only advice: without it, maps work the same, more slowly.
    let _ = map.advise(Advice::Random);
}

/// Starts reading `start..end` of `file` into the page cache (the whole
/// range and no more), for a scan or a fetch that is about to touch it. In
/// steps of 128 KiB: the kernel reads no more than its read-ahead window
/// for one request, whatever length it is given.
pub(crate) fn read_ahead(file: &File, start: usize, end: usize) {
    const STEP: usize = 128 << 10;
    let mut at = start;
    while at < end {
        let step = STEP.min(end - at);
        if let Some(len) = std::num::NonZeroU64::new(step as u64) {
            // Only advice: without it the pages fault in one at a time.
            let _ = rustix::fs::fadvise(file, at as u64, Some(len), rustix::fs::Advice::WillNeed);
        }
        at += step;
    }
}
