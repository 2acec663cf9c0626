//! The spool's error type.
//!
//! Every error says which side is at fault ([`Side`]) and whether trying the
//! same call again can help ([`SpoolError::is_retriable`]); the gateway maps
//! these to Kafka error codes in one place.

use std::io;
use std::path::PathBuf;

use strait_batch::BatchError;

/// Who caused an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The caller sent something the spool refuses (bad batch, bad offset).
    Client,
    /// The disk or file system failed, or the partition is unusable.
    Storage,
}

/// An error from the spool.
///
/// Messages are complete on their own: a variant that wraps an OS or batch
/// error writes it into its message and does not also expose it as a
/// [`source`](std::error::Error::source), so an error chain printed in full
/// (`{:#}` of `anyhow`) names each cause once.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// A batch in an append call is malformed; nothing of the call was
    /// appended.
    #[error("invalid record batch at byte {position} of the append: {error}")]
    InvalidBatch {
        /// Byte position of the bad batch within the call's data.
        position: usize,
        /// What is wrong with it.
        error: BatchError,
    },
    /// A batch is larger than the partition accepts.
    #[error("record batch of {size} bytes exceeds max_batch_bytes {max}")]
    BatchTooLarge {
        /// The batch's size.
        size: usize,
        /// The configured limit.
        max: u64,
    },
    /// The batches of one append call span more offsets than one segment
    /// can address (2^32 - 1, relative offsets being 32-bit).
    #[error(
        "append spans {span} offsets, more than the {} one segment can address",
        u32::MAX
    )]
    OffsetSpan {
        /// Offsets the call's batches occupy.
        span: u64,
    },
    /// An append call carried no batch.
    #[error("append carried no record batch")]
    EmptyAppend,
    /// A read asked for an offset the partition does not hold.
    #[error("offset {offset} is out of range [{log_start}, {high_watermark}]")]
    OffsetOutOfRange {
        /// The offset asked for.
        offset: u64,
        /// First offset still stored.
        log_start: u64,
        /// Offset the next record will get.
        high_watermark: u64,
    },
    /// The configuration cannot work (for example a segment larger than the
    /// 4 GiB its 32-bit index positions can address).
    #[error("invalid spool configuration: {0}")]
    InvalidConfig(String),
    /// The file system has no room left. The log is unchanged; the append
    /// can be retried once space is freed.
    #[error("no space left on device writing {path}")]
    DiskFull {
        /// The file being written.
        path: PathBuf,
    },
    /// An I/O operation failed. The log is unchanged.
    #[error("{op} {path}: {error}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        error: io::Error,
    },
    /// The partition hit an error it cannot safely continue from (an fsync
    /// failed, or a failed write could not be undone). Appends are refused
    /// until the partition is reopened, which runs crash recovery.
    #[error("partition {path} is failed and must be reopened: {reason}")]
    Failed {
        /// The partition directory.
        path: PathBuf,
        /// The first fatal error.
        reason: String,
    },
    /// On-disk data is not what the spool wrote (found by open or verify).
    #[error("corrupt {path} at byte {position}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Byte position in the file.
        position: u64,
        /// What is wrong.
        reason: String,
    },
    /// The spool or partition was closed.
    #[error("the spool is closed")]
    Closed,
}

impl SpoolError {
    /// Which side is at fault.
    pub fn side(&self) -> Side {
        match self {
            SpoolError::InvalidBatch { .. }
            | SpoolError::BatchTooLarge { .. }
            | SpoolError::OffsetSpan { .. }
            | SpoolError::EmptyAppend
            | SpoolError::OffsetOutOfRange { .. }
            | SpoolError::InvalidConfig(_) => Side::Client,
            SpoolError::DiskFull { .. }
            | SpoolError::Io { .. }
            | SpoolError::Failed { .. }
            | SpoolError::Corrupt { .. }
            | SpoolError::Closed => Side::Storage,
        }
    }

    /// Whether the same call may succeed if tried again later.
    pub fn is_retriable(&self) -> bool {
        matches!(self, SpoolError::DiskFull { .. } | SpoolError::Io { .. })
    }

    /// Wraps an I/O error, recognising a full disk.
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, error: io::Error) -> Self {
        let path = path.into();
        if error.raw_os_error() == Some(libc::ENOSPC) {
            SpoolError::DiskFull { path }
        } else {
            SpoolError::Io { op, path, error }
        }
    }
}

/// The spool's result type.
pub type Result<T, E = SpoolError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_and_retries() {
        let full = SpoolError::io("write", "/x", io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(matches!(full, SpoolError::DiskFull { .. }));
        assert!(full.is_retriable());
        assert_eq!(full.side(), Side::Storage);
        let bad = SpoolError::InvalidBatch {
            position: 0,
            error: BatchError::Magic(1),
        };
        assert_eq!(bad.side(), Side::Client);
        assert!(!bad.is_retriable());
        let failed = SpoolError::Failed {
            path: "/p".into(),
            reason: "fsync".into(),
        };
        assert!(!failed.is_retriable());
        assert!(failed.to_string().contains("must be reopened"));
    }
}
