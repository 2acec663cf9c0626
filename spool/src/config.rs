//! Per-partition settings of the log, in plain values.
//!
//! The `strait-config` crate parses the user's YAML; the binary turns the
//! resolved values into a [`LogConfig`]. The spool depends on nothing above
//! it.

use std::time::Duration;

use crate::error::{Result, SpoolError};

/// When appended bytes are forced to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fdatasync before an append returns. Readers see a batch only once it
    /// is durable.
    EveryBatch,
    /// fdatasync in the background at least every `every`, and inline once
    /// `bytes` unsynced bytes have piled up (if set).
    Interval {
        /// Longest time data stays unsynced.
        every: Duration,
        /// Most bytes that stay unsynced.
        bytes: Option<u64>,
    },
    /// Never sync while running; the OS writes back when it likes. A clean
    /// shutdown still syncs.
    Os,
}

/// Settings of one partition's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Roll to a new segment when the active one would grow past this.
    /// At most 4 GiB (index positions are 32-bit).
    pub segment_bytes: u64,
    /// Roll when the active segment was opened longer ago than this.
    pub segment_age: Duration,
    /// Bytes of log between two sparse index entries.
    pub index_interval_bytes: u64,
    /// Size of each index file; a full index rolls the segment.
    pub index_bytes: u64,
    /// Largest record batch accepted.
    pub max_batch_bytes: u64,
    /// Delete the oldest segments while the partition is larger than this.
    pub retention_bytes: Option<u64>,
    /// Delete segments whose newest timestamp is older than this.
    pub retention_age: Option<Duration>,
    /// When data reaches the disk.
    pub durability: Durability,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_age: Duration::from_secs(7 * 24 * 3600),
            index_interval_bytes: 4096,
            index_bytes: 10 << 20,
            max_batch_bytes: 1 << 20,
            retention_bytes: None,
            retention_age: Some(Duration::from_secs(7 * 24 * 3600)),
            durability: Durability::Interval {
                every: Duration::from_secs(1),
                bytes: None,
            },
        }
    }
}

impl LogConfig {
    /// Checks the limits the on-disk format imposes.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(SpoolError::InvalidConfig(msg));
        if self.segment_bytes > u32::MAX as u64 {
            return bad(format!(
                "segment_bytes {} exceeds 4 GiB, the most a 32-bit index position addresses",
                self.segment_bytes
            ));
        }
        if self.segment_bytes < 4096 {
            return bad(format!("segment_bytes {} is below 4 KiB", self.segment_bytes));
        }
        if self.max_batch_bytes == 0 || self.max_batch_bytes > self.segment_bytes {
            return bad(format!(
                "max_batch_bytes {} must be between 1 and segment_bytes {}",
                self.max_batch_bytes, self.segment_bytes
            ));
        }
        if self.index_bytes < 64 {
            return bad(format!("index_bytes {} is below 64", self.index_bytes));
        }
        if self.index_interval_bytes == 0 {
            return bad("index_interval_bytes must be positive".into());
        }
        if let Durability::Interval { every, bytes } = self.durability {
            if every.is_zero() {
                return bad("flush interval must be positive".into());
            }
            if bytes == Some(0) {
                return bad("flush bytes must be positive".into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_limits_are_named() {
        LogConfig::default().validate().unwrap();
        let big = LogConfig {
            segment_bytes: 8 << 30,
            ..LogConfig::default()
        };
        assert!(big.validate().unwrap_err().to_string().contains("4 GiB"));
        let batch = LogConfig {
            segment_bytes: 1 << 20,
            max_batch_bytes: 2 << 20,
            ..LogConfig::default()
        };
        assert!(batch
            .validate()
            .unwrap_err()
            .to_string()
            .contains("max_batch_bytes"));
    }
}
