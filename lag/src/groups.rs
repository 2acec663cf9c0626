//! What one poll of a cluster found: each watched group's state, members
//! and, per partition it committed, its lag in records.

use std::sync::Arc;

/// Which groups a poll reads, as plain values (compiled from the `lag:`
/// section by the caller).
#[derive(Clone)]
pub struct Watch {
    /// Whether a group is watched.
    pub groups: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    /// Whether a group reads committed records only: its lag runs to the
    /// last stable offset.
    pub read_committed: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    /// Most groups read per cluster, in name order.
    pub max_groups: usize,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("max_groups", &self.max_groups)
            .finish_non_exhaustive()
    }
}

/// One poll of one cluster.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// The watched groups, in name order.
    pub groups: Vec<GroupLag>,
    /// Watched groups left out for `max_groups`.
    pub skipped: usize,
}

/// One group.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupLag {
    /// Its id.
    pub group: String,
    /// Its state as the coordinator names it (`Stable`, `Empty`,
    /// `PreparingRebalance`, ...; `Unknown` if it would not say).
    pub state: String,
    /// Members now.
    pub members: usize,
    /// Each partition it committed an offset for, by topic and partition.
    pub partitions: Vec<PartitionLag>,
    /// Why its offsets could not be read this time, if they could not.
    pub error: Option<String>,
}

impl GroupLag {
    /// The largest lag in records of its partitions (0 without any).
    pub fn max_lag_records(&self) -> i64 {
        self.partitions
            .iter()
            .filter_map(|p| p.lag_records())
            .max()
            .unwrap_or(0)
    }
}

/// One partition a group committed.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionLag {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The committed offset: the next record the group reads.
    pub committed: i64,
    /// Where the partition ends for the group (its high watermark, or last
    /// stable offset for a group that reads committed records), if the
    /// cluster still has it.
    pub end: Option<i64>,
    /// When the oldest record the group has not read was written
    /// (milliseconds since the epoch), where it is behind and the record
    /// could be read.
    pub oldest_unread_ms: Option<i64>,
}

/// What a partition's lag is, when it is not a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// `end - committed` records behind (0: caught up).
    Behind(i64),
    /// The cluster no longer has the partition (its topic was deleted, or
    /// shrank); the group's offset stays until it expires.
    Gone,
    /// The offset is beyond the partition's end: the topic was recreated
    /// or truncated after the group committed. The group's consumers will
    /// reset (`auto.offset.reset`) when they next fetch.
    BeyondEnd,
}

impl PartitionLag {
    /// A committed offset whose end is not read yet.
    pub fn committed(topic: String, partition: i32, committed: i64) -> PartitionLag {
        PartitionLag {
            topic,
            partition,
            committed,
            end: None,
            oldest_unread_ms: None,
        }
    }

    /// Where the group stands on this partition.
    pub fn standing(&self) -> Standing {
        match self.end {
            None => Standing::Gone,
            Some(end) if self.committed > end => Standing::BeyondEnd,
            Some(end) => Standing::Behind(end - self.committed),
        }
    }

    /// Lag in seconds at `now_ms`: how long ago the oldest record the group
    /// has not read was written (0 when it is not behind; never negative,
    /// whatever the producers' clocks). None when behind and that record
    /// could not be read.
    pub fn lag_seconds(&self, now_ms: i64) -> Option<f64> {
        match self.lag_records()? {
            0 => Some(0.0),
            _ => self.oldest_unread_ms.map(|t| (now_ms - t).max(0) as f64 / 1000.0),
        }
    }

    /// Lag in records, when it is a number (never negative).
    pub fn lag_records(&self) -> Option<i64> {
        match self.standing() {
            Standing::Behind(n) => Some(n),
            _ => None,
        }
    }
}

/// Most bytes of records decompressed to find one record's timestamp.
const TIMESTAMP_READ_LIMIT: usize = 32 << 20;

/// When the first record at or after `offset` of `records` (whole batches
/// as a Fetch or a log read gives them, the last maybe cut short) was
/// written, milliseconds since the epoch: None if no whole batch holds
/// one.
pub fn first_timestamp(records: &[u8], offset: i64) -> Option<i64> {
    strait_batch::Batches::new(records)
        .map_while(Result::ok)
        .find_map(|(at, _)| {
            strait_batch::timestamp_at(&records[at..], offset, TIMESTAMP_READ_LIMIT)
                .ok()
                .flatten()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_never_negative_and_says_why_it_is_missing() {
        let mut p = PartitionLag::committed("orders".into(), 0, 40);
        assert_eq!(p.standing(), Standing::Gone, "end not known: no such partition");
        p.end = Some(100);
        assert_eq!((p.standing(), p.lag_records()), (Standing::Behind(60), Some(60)));
        p.end = Some(40);
        assert_eq!(p.lag_records(), Some(0));
        p.end = Some(10);
        assert_eq!((p.standing(), p.lag_records()), (Standing::BeyondEnd, None));
        assert_eq!(p.lag_seconds(5_000), None);
        // Seconds: since the oldest unread record was written; 0 caught up.
        p.end = Some(100);
        assert_eq!(p.lag_seconds(5_000), None, "its record not read yet");
        p.oldest_unread_ms = Some(2_000);
        assert_eq!(p.lag_seconds(5_000), Some(3.0));
        assert_eq!(p.lag_seconds(1_000), Some(0.0), "a producer's clock ahead");
        p.end = Some(40);
        assert_eq!(p.lag_seconds(5_000), Some(0.0));
        let group = GroupLag {
            group: "g".into(),
            state: "Stable".into(),
            members: 1,
            partitions: vec![
                PartitionLag {
                    end: Some(50),
                    ..PartitionLag::committed("a".into(), 0, 20)
                },
                PartitionLag {
                    end: Some(5),
                    ..PartitionLag::committed("a".into(), 1, 20)
                },
                PartitionLag {
                    end: Some(90),
                    ..PartitionLag::committed("b".into(), 0, 80)
                },
            ],
            error: None,
        };
        assert_eq!(group.max_lag_records(), 30);
    }
}
