//! What the mirror knows about each partition while it runs: the exact
//! acknowledged position (source offset and the target offset it maps
//! to), the committed one, the source's high watermark, the timestamps of
//! records fetched but not yet on the target, counters and status. The
//! partition's tasks write it; the commit loop, the metrics and the status
//! page read it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::batch::SourceRange;
use crate::offset_map::{Entry, Point, Recorder};
use crate::positions::ToCommit;

/// How a partition is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Reading its committed position and the target's tail.
    Starting,
    /// Mirroring.
    Running,
    /// Retrying after an error (the message).
    Retrying(String),
    /// Stopped for good (the message): going on could lose or duplicate.
    Stopped(String),
}

/// Counters of one partition (monotonic).
#[derive(Debug, Default)]
pub struct Counters {
    /// Records acknowledged by the target.
    pub records: AtomicU64,
    /// Bytes of record batches acknowledged by the target.
    pub bytes: AtomicU64,
    /// Bytes of records fetched from the source, those fetched twice
    /// included (what crossed the link).
    pub fetched_bytes: AtomicU64,
    /// Batches sent as the source's bytes.
    pub batches_passed: AtomicU64,
    /// Batches re-encoded.
    pub batches_reencoded: AtomicU64,
    /// Source records deleted by retention before they were mirrored.
    pub lost_records: AtomicU64,
    /// Source records left out because the target is their origin
    /// (loop prevention).
    pub looped_records: AtomicU64,
    /// Errors seen (each retry counts).
    pub errors: AtomicU64,
}

/// One mirrored partition.
#[derive(Debug)]
pub struct PartitionState {
    /// The source topic.
    pub source_topic: Arc<str>,
    /// The target topic.
    pub target_topic: Arc<str>,
    /// The partition (the same on both sides).
    pub partition: i32,
    /// Counters.
    pub counters: Counters,
    progress: Mutex<Progress>,
}

#[derive(Debug)]
struct Progress {
    acked: Option<(i64, i64)>,
    committed: Option<(i64, Instant)>,
    high_watermark: i64,
    /// (source offset of the batch's last record, its first record's
    /// timestamp) of each batch fetched and not yet acknowledged, in order.
    unacked: VecDeque<(i64, i64)>,
    /// The offset map's entry to come.
    map: Recorder,
    status: Status,
}

impl Progress {
    fn ack(&mut self, source: i64, target: i64) {
        self.acked = Some((source, target));
        self.map.skipped_to(source);
        while self.unacked.front().is_some_and(|(last, _)| *last < source) {
            self.unacked.pop_front();
        }
    }
}

impl PartitionState {
    /// A partition that has not started.
    pub fn new(source_topic: Arc<str>, target_topic: Arc<str>, partition: i32) -> PartitionState {
        PartitionState {
            source_topic,
            target_topic,
            partition,
            counters: Counters::default(),
            progress: Mutex::new(Progress {
                acked: None,
                committed: None,
                high_watermark: -1,
                unacked: VecDeque::new(),
                map: Recorder::default(),
                status: Status::Starting,
            }),
        }
    }

    fn progress(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.progress.lock().expect("partition progress")
    }

    /// The exact point known to be on the target: (next source offset,
    /// next target offset).
    pub fn acked(&self) -> Option<(i64, i64)> {
        self.progress().acked
    }

    /// Records that everything before source offset `source` is on the
    /// target, which continues at `target`. Drops the timestamps of the
    /// batches now acknowledged.
    pub fn set_acked(&self, source: i64, target: i64) {
        self.progress().ack(source, target);
    }

    /// The partition starts (over) at `point`: the offset map's next entry
    /// replaces what it said from there on.
    pub fn start_at(&self, point: Point) {
        let mut p = self.progress();
        p.map.start(point);
        p.ack(point.0, point.1);
    }

    /// The target acknowledged a batch at target offset `target` holding
    /// the source records of `source` (or holds it already, found on
    /// resuming).
    pub fn acked_batch(&self, source: &SourceRange, target: i64) {
        let mut p = self.progress();
        p.map.batch(source, target);
        p.ack(source.last_offset + 1, target + i64::from(source.record_count));
    }

    /// Notes a fetched batch (its last source offset and first timestamp)
    /// not yet on the target. A batch fetched again after a retry is
    /// noted once.
    pub fn fetched(&self, last_offset: i64, timestamp: i64) {
        let mut p = self.progress();
        if p.acked.is_some_and(|(next, _)| last_offset < next) {
            return;
        }
        if p.unacked.back().is_none_or(|(last, _)| *last < last_offset) {
            p.unacked.push_back((last_offset, timestamp));
        }
    }

    /// Takes a high watermark from a fetch answer (ignored when the broker
    /// gave none).
    pub fn set_high_watermark(&self, high_watermark: i64) {
        if high_watermark >= 0 {
            self.progress().high_watermark = high_watermark;
        }
    }

    /// Takes a high watermark read apart from the partition's fetches
    /// (ListOffsets): it only raises the one known, so that a broker that
    /// under-reports there (Tansu 0.6.0 does) never hides what the fetches
    /// found.
    pub fn raise_high_watermark(&self, high_watermark: i64) {
        let mut p = self.progress();
        p.high_watermark = p.high_watermark.max(high_watermark);
    }

    /// The source's high watermark last seen, -1 before any.
    pub fn high_watermark(&self) -> i64 {
        self.progress().high_watermark
    }

    /// Source records not yet on the target: the high watermark minus the
    /// next offset to mirror, never negative (a source may under-report
    /// its watermark; Tansu 0.6.0 does).
    pub fn lag_records(&self) -> i64 {
        let p = self.progress();
        match p.acked {
            Some((next, _)) if p.high_watermark >= 0 => (p.high_watermark - next).max(0),
            _ => 0,
        }
    }

    /// Age in seconds of the oldest record not yet on the target: 0 when
    /// caught up; from the oldest fetched-but-unacknowledged batch's
    /// timestamp otherwise. `None` while behind with nothing fetched yet
    /// (the answer is on its way).
    pub fn lag_seconds(&self) -> Option<f64> {
        let p = self.progress();
        let (next, _) = p.acked?;
        if p.high_watermark >= 0 && next >= p.high_watermark {
            return Some(0.0);
        }
        let (_, timestamp) = p.unacked.front()?;
        Some(((now_ms() - timestamp).max(0) as f64) / 1000.0)
    }

    /// The position to commit, if it moved since the last commit, with
    /// the offset map's entry to write first if one is due (see
    /// [`Recorder::entry`]; `refresh`: how old an entry may get) and its
    /// token for [`PartitionState::map_written`]. The position is the
    /// entry's end.
    pub fn to_commit(&self, refresh: std::time::Duration) -> Option<(ToCommit, Option<(Entry, u64)>)> {
        let p = self.progress();
        let (offset, target_offset) = p.acked?;
        let entry = p.map.entry(refresh);
        if entry.is_none() && p.committed.is_some_and(|(c, _)| c == offset) {
            return None;
        }
        let commit = ToCommit {
            topic: self.source_topic.to_string(),
            partition: self.partition,
            offset,
            target_offset,
        };
        debug_assert!(entry
            .as_ref()
            .is_none_or(|(e, _)| e.end == (offset, target_offset)));
        Some((commit, entry))
    }

    /// The offset map's entry taken with `token` was acknowledged.
    pub fn map_written(&self, entry: &Entry, token: u64) {
        self.progress().map.wrote(entry, token);
    }

    /// Records a successful commit of source offset `offset`.
    pub fn committed(&self, offset: i64) {
        self.progress().committed = Some((offset, Instant::now()));
    }

    /// Seconds since the last successful commit, if there was one.
    pub fn commit_age(&self) -> Option<f64> {
        self.progress()
            .committed
            .map(|(_, at)| at.elapsed().as_secs_f64())
    }

    /// The status.
    pub fn status(&self) -> Status {
        self.progress().status.clone()
    }

    /// Sets the status.
    pub fn set_status(&self, status: Status) {
        self.progress().status = status;
    }

    /// Counts `n` on a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A running mirror's view of the partitions this process owns, and of
/// its place in the mirror's group (for metrics and status).
#[derive(Debug, Clone, Default)]
pub struct Partitions {
    inner: Arc<std::sync::Mutex<ByPartition>>,
    member: Arc<std::sync::Mutex<Option<Membership>>>,
}

/// This process in the mirror's group on the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// Its member id.
    pub member_id: String,
    /// The generation it joined.
    pub generation: i32,
    /// Whether it leads the group (assigns the partitions).
    pub leader: bool,
    /// The group's members (known to the leader only; 0 else).
    pub members: usize,
}

/// Partition states by (source topic, partition).
type ByPartition = BTreeMap<(String, i32), Arc<PartitionState>>;

impl Partitions {
    /// Every partition's state, ordered by topic and partition.
    pub fn all(&self) -> Vec<Arc<PartitionState>> {
        self.inner.lock().expect("partitions").values().cloned().collect()
    }

    pub(crate) fn insert(&self, state: Arc<PartitionState>) {
        self.inner
            .lock()
            .expect("partitions")
            .insert((state.source_topic.to_string(), state.partition), state);
    }

    pub(crate) fn get(&self, topic: &str, partition: i32) -> Option<Arc<PartitionState>> {
        self.inner
            .lock()
            .expect("partitions")
            .get(&(topic.to_owned(), partition))
            .cloned()
    }

    /// Keeps the partitions `keep` says yes to.
    pub(crate) fn retain(&self, keep: impl Fn(&str, i32) -> bool) {
        self.inner
            .lock()
            .expect("partitions")
            .retain(|(t, p), _| keep(t, *p));
    }

    /// This process in the mirror's group (none before it joined).
    pub fn member(&self) -> Option<Membership> {
        self.member.lock().expect("member").clone()
    }

    pub(crate) fn set_member(&self, member: Option<Membership>) {
        *self.member.lock().expect("member") = member;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn lag_follows_the_acknowledged_point() {
        let state = PartitionState::new("orders".into(), "nj.orders".into(), 3);
        assert_eq!(state.lag_records(), 0);
        assert_eq!(state.lag_seconds(), None);
        state.set_acked(10, 0);
        state.set_high_watermark(25);
        assert_eq!(state.lag_records(), 15);
        // Behind, nothing fetched yet: unknown, not 0.
        assert_eq!(state.lag_seconds(), None);
        let old = now_ms() - 5_000;
        state.fetched(14, old);
        state.fetched(24, now_ms());
        let lag = state.lag_seconds().unwrap();
        assert!((4.9..6.0).contains(&lag), "{lag}");
        state.set_acked(15, 5);
        assert!(state.lag_seconds().unwrap() < 1.0);
        state.set_acked(25, 15);
        assert_eq!(state.lag_seconds(), Some(0.0));
        assert_eq!(state.lag_records(), 0);
        // A watermark below the acknowledged point (Tansu) is no negative lag.
        state.set_high_watermark(20);
        assert_eq!(state.lag_records(), 0);
        state.set_high_watermark(-1);
        assert_eq!(state.high_watermark(), 20);

        let (commit, _) = state.to_commit(Duration::from_secs(60)).unwrap();
        assert_eq!((commit.offset, commit.target_offset), (25, 15));
        state.committed(25);
        assert!(state.to_commit(Duration::from_secs(60)).is_none());
        assert!(state.commit_age().unwrap() < 1.0);
    }
}
