//! Read-only inspection of partitions on disk: `strait spool verify` and
//! `strait spool dump`.
//!
//! Nothing here writes: a partition that a crashed process left behind can
//! be examined before recovery changes it.

use std::fs::File;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use crate::error::{Result, SpoolError};
use crate::index::{Entry, OffsetEntry, TimeEntry};
use crate::log::read_recovery_point;
use crate::map::{first_nonzero, LogMap};
use crate::segment::{index_path, parse_log_name, LogBytes};
use strait_batch::BatchHeader;

/// Something wrong on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file.
    pub path: PathBuf,
    /// Byte position in the file.
    pub position: u64,
    /// What is wrong.
    pub what: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at byte {}: {}",
            self.path.display(),
            self.position,
            self.what
        )
    }
}

/// What verifying one partition found.
#[derive(Debug, Clone, Default)]
pub struct PartitionReport {
    /// The partition directory.
    pub dir: PathBuf,
    /// Segment files.
    pub segments: usize,
    /// Valid batches.
    pub batches: u64,
    /// Records in the valid batches.
    pub records: u64,
    /// Bytes of valid batches.
    pub bytes: u64,
    /// First offset stored.
    pub log_start_offset: u64,
    /// Offset after the last valid batch.
    pub next_offset: u64,
    /// Index entries checked.
    pub index_entries: u64,
    /// Everything wrong, in file order.
    pub problems: Vec<Problem>,
}

/// A batch found by [`dump_partition`].
#[derive(Debug, Clone)]
pub struct BatchInfo<'a> {
    /// The segment log file.
    pub segment: PathBuf,
    /// Byte position in it.
    pub position: u64,
    /// The header.
    pub header: BatchHeader,
    /// The whole batch (validated).
    pub bytes: &'a [u8],
}

/// Verifies `dir`: a partition directory (it holds `*.log` files), or a data
/// directory whose subdirectories (at any depth) are partitions.
pub fn verify_tree(dir: &Path) -> Result<Vec<PartitionReport>> {
    let mut reports = Vec::new();
    for partition in partition_dirs(dir)? {
        reports.push(verify_partition(&partition)?);
    }
    Ok(reports)
}

/// Partition directories at or below `dir`, sorted.
pub fn partition_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut subdirs = Vec::new();
    let mut is_partition = false;
    let entries = std::fs::read_dir(dir).map_err(|e| SpoolError::io("list directory", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| SpoolError::io("list directory", dir, e))?;
        let path = entry.path();
        if path.is_dir() {
            subdirs.push(path);
        } else if entry.file_name().to_str().and_then(parse_log_name).is_some() {
            is_partition = true;
        }
    }
    if is_partition {
        found.push(dir.to_path_buf());
    }
    subdirs.sort();
    for sub in subdirs {
        found.extend(partition_dirs(&sub)?);
    }
    Ok(found)
}

/// Checks every batch CRC, offset continuity, the zero tail after the data,
/// and every index entry of one partition.
pub fn verify_partition(dir: &Path) -> Result<PartitionReport> {
    let mut report = PartitionReport {
        dir: dir.to_path_buf(),
        ..PartitionReport::default()
    };
    let bases = segment_bases(dir)?;
    report.segments = bases.len();
    report.log_start_offset = bases.first().copied().unwrap_or(0);
    let mut expected = report.log_start_offset;
    for &base in &bases {
        let log_path = dir.join(crate::segment::log_name(base));
        if base != expected {
            report.problems.push(Problem {
                path: log_path.clone(),
                position: 0,
                what: format!("segment starts at offset {base}, the previous one ends at {expected}"),
            });
        }
        let (map, file) = map_log(&log_path)?;
        let data = LogBytes::new(&map, &file);
        let read_err = |e| SpoolError::io("read segment", &log_path, e);
        let mut batches: Vec<(u64, BatchHeader, i64)> = Vec::new();
        let mut pos = 0usize;
        let mut next = base;
        let mut max_ts = i64::MIN;
        while let Some(found) = data.batch_at(pos, true).map_err(read_err)? {
            match found {
                Ok(h) if h.base_offset == next as i64 => {
                    max_ts = max_ts.max(h.max_timestamp);
                    batches.push((pos as u64, h, max_ts));
                    report.batches += 1;
                    report.records += h.record_count as u64;
                    report.bytes += h.size() as u64;
                    next = h.last_offset() as u64 + 1;
                    pos += h.size();
                }
                Ok(h) => {
                    report.problems.push(Problem {
                        path: log_path.clone(),
                        position: pos as u64,
                        what: format!("batch has base offset {}, expected {next}", h.base_offset),
                    });
                    break;
                }
                Err(e) => {
                    report.problems.push(Problem {
                        path: log_path.clone(),
                        position: pos as u64,
                        what: format!("invalid batch: {e}"),
                    });
                    break;
                }
            }
        }
        if report.problems.iter().all(|p| p.path != log_path) {
            if let Some(at) = first_nonzero(&file, pos, data.len()).map_err(read_err)? {
                report.problems.push(Problem {
                    path: log_path.clone(),
                    position: at as u64,
                    what: "non-zero bytes after the last batch (a torn write?)".into(),
                });
            }
        }
        expected = next;
        verify_offset_index(&index_path(&log_path, "index"), base, &batches, &mut report)?;
        verify_time_index(&index_path(&log_path, "timeindex"), base, &batches, &mut report)?;
    }
    report.next_offset = expected;
    if let Some(point) = read_recovery_point(dir)? {
        if point > report.next_offset {
            report.problems.push(Problem {
                path: dir.join(crate::log::RECOVERY_POINT_FILE),
                position: 0,
                what: format!(
                    "recovery point {point} is past the end of the log ({}): synced data is missing",
                    report.next_offset
                ),
            });
        }
    }
    Ok(report)
}

fn verify_offset_index(
    path: &Path,
    base: u64,
    batches: &[(u64, BatchHeader, i64)],
    report: &mut PartitionReport,
) -> Result<()> {
    check_index::<OffsetEntry>(path, batches, report, |entry| {
        let offset = base + entry.relative_offset as u64;
        match batches.binary_search_by_key(&(entry.position as u64), |b| b.0) {
            Ok(i) if batches[i].1.base_offset as u64 == offset => None,
            Ok(i) => Some(format!(
                "entry for offset {offset} points at batch with base offset {}",
                batches[i].1.base_offset
            )),
            Err(_) => Some(format!(
                "entry for offset {offset} points at byte {}, which is not a batch start",
                entry.position
            )),
        }
    })
}

fn verify_time_index(
    path: &Path,
    base: u64,
    batches: &[(u64, BatchHeader, i64)],
    report: &mut PartitionReport,
) -> Result<()> {
    check_index::<TimeEntry>(path, batches, report, |entry| {
        let offset = base + entry.relative_offset as u64;
        match batches.binary_search_by_key(&offset, |b| b.1.base_offset as u64) {
            Ok(i) if batches[i].2 == entry.timestamp => None,
            Ok(i) => Some(format!(
                "entry says max timestamp {} at offset {offset}, the log says {}",
                entry.timestamp, batches[i].2
            )),
            Err(_) => Some(format!(
                "entry names offset {offset}, which is not a batch's base offset"
            )),
        }
    })
}

/// Walks an index's entries: the strictly increasing prefix must check out,
/// and everything after it must be zero.
fn check_index<E: Entry>(
    path: &Path,
    batches: &[(u64, BatchHeader, i64)],
    report: &mut PartitionReport,
    check: impl Fn(&E) -> Option<String>,
) -> Result<()> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !batches.is_empty() {
                report.problems.push(Problem {
                    path: path.to_path_buf(),
                    position: 0,
                    what: "index file is missing".into(),
                });
            }
            return Ok(());
        }
        Err(e) => return Err(SpoolError::io("open index", path, e)),
    };
    let len = file
        .metadata()
        .map_err(|e| SpoolError::io("stat index", path, e))?
        .len() as usize;
    if len < E::SIZE {
        return Ok(());
    }
    // Read with pread, not a map: the file is sparse, and reading a hole
    // through a map faults (SIGBUS) on a full tmpfs.
    let read_err = |e| SpoolError::io("read index", path, e);
    // Entries are written only on allocated blocks: a hole ends them (an
    // entry a full disk had no block for was skipped, not written).
    let capacity = len / E::SIZE;
    let written = crate::map::allocated_prefix(&file, len) / E::SIZE;
    let mut chunk = Vec::new();
    let mut chunk_start = 0;
    let mut last = i64::MIN;
    let mut i = 0;
    while i < written {
        let at = i * E::SIZE;
        if at >= chunk_start + chunk.len() {
            chunk_start = at;
            chunk = vec![0u8; (64 * E::SIZE * 1024).min(len - at) / E::SIZE * E::SIZE];
            file.read_exact_at(&mut chunk, at as u64).map_err(read_err)?;
        }
        let entry = E::decode(&chunk[at - chunk_start..at - chunk_start + E::SIZE]);
        if i > 0 && entry.key() <= last {
            break;
        }
        // An empty segment's index is all zeros: no entries.
        if batches.is_empty() {
            break;
        }
        last = entry.key();
        report.index_entries += 1;
        if let Some(what) = check(&entry) {
            report.problems.push(Problem {
                path: path.to_path_buf(),
                position: at as u64,
                what,
            });
        }
        i += 1;
    }
    let tail_start = (i * E::SIZE).min(len);
    if let Some(at) = first_nonzero(&file, tail_start, capacity * E::SIZE).map_err(read_err)? {
        report.problems.push(Problem {
            path: path.to_path_buf(),
            position: (at - at % E::SIZE) as u64,
            what: "stray entry after the index's last entry".into(),
        });
    }
    Ok(())
}

/// Calls `visit` for every valid batch of the partition whose last offset is
/// at least `from`, in offset order. Stops quietly at the first invalid
/// batch of a segment (run [`verify_partition`] to see why).
pub fn dump_partition(dir: &Path, from: u64, mut visit: impl FnMut(&BatchInfo<'_>)) -> Result<()> {
    for base in segment_bases(dir)? {
        let log_path = dir.join(crate::segment::log_name(base));
        let (map, file) = map_log(&log_path)?;
        let data = LogBytes::new(&map, &file);
        let read_err = |e| SpoolError::io("read segment", &log_path, e);
        let mut position = 0;
        while let Some(Ok(header)) = data.batch_at(position, true).map_err(read_err)? {
            if header.last_offset() >= from as i64 {
                let bytes = data.get(position, header.size()).map_err(read_err)?;
                visit(&BatchInfo {
                    segment: log_path.clone(),
                    position: position as u64,
                    header,
                    bytes: &bytes,
                });
            }
            position += header.size();
        }
    }
    Ok(())
}

fn segment_bases(dir: &Path) -> Result<Vec<u64>> {
    let mut bases = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| SpoolError::io("list partition directory", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| SpoolError::io("list partition directory", dir, e))?;
        if let Some(base) = entry.file_name().to_str().and_then(parse_log_name) {
            bases.push(base);
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

fn map_log(path: &Path) -> Result<(std::sync::Arc<LogMap>, File)> {
    let file = File::open(path).map_err(|e| SpoolError::io("open segment", path, e))?;
    let len = file
        .metadata()
        .map_err(|e| SpoolError::io("stat segment", path, e))?
        .len();
    if len == 0 {
        return Err(SpoolError::Corrupt {
            path: path.to_path_buf(),
            position: 0,
            reason: "empty segment file".into(),
        });
    }
    let map = LogMap::new(&file, len as usize).map_err(|e| SpoolError::io("map segment", path, e))?;
    Ok((std::sync::Arc::new(map), file))
}
