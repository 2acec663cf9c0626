//! Every watched cluster's last poll, each group partition's window of
//! samples ([`status::WINDOW`] polls), the verdicts on them, and the
//! Prometheus series read from them when scraped ([`LagCollector`]), so
//! that a deleted group's or topic's series go away with it.
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `strait_group_lag_records` | gauge | cluster, group, topic, partition | the partition's end (high watermark; last stable offset for `read_committed` groups) minus the group's committed offset, never negative |
//! | `strait_group_lag_seconds` | gauge | cluster, group, topic, partition | how long ago the oldest record the group has not read was written (its own timestamp, read once per committed offset); 0 when caught up |
//! | `strait_group_max_lag_records` | gauge | cluster, group | the group's largest partition lag |
//! | `strait_group_max_lag_seconds` | gauge | cluster, group | the group's largest partition lag in seconds |
//! | `strait_group_members` | gauge | cluster, group | the group's members (0 for a group with committed offsets and no members) |
//! | `strait_group_state` | gauge | cluster, group, state | 1 for the group's state as its coordinator names it |
//! | `strait_group_status` | gauge | cluster, group, status | 1 for the group's evaluated status (its worst partition's): OK, WARN, STALL, STOP, ERR |
//! | `strait_lag_groups_skipped` | gauge | cluster | watched groups left out for `lag.max_groups` |
//! | `strait_lag_poll_errors_total` | counter | cluster | polls of the cluster that failed |

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, IntCounterVec, Opts};

use crate::groups::{Snapshot, Standing};
use crate::status::{evaluate, Health, Level, Sample, Verdict, WINDOW};

/// One cluster's polls.
#[derive(Debug, Default)]
struct Tracked {
    snapshot: Snapshot,
    /// The last poll's error, if it failed (the snapshot is the last good
    /// one).
    error: Option<String>,
    polls_failed: u64,
    /// Good polls so far: the one that last saw a window.
    polls: u64,
    windows: HashMap<(String, String, i32), Window>,
    /// Per group and partition of `snapshot`, in its order: its window's
    /// verdict and the last sample's lag in seconds, judged when the
    /// poll came (a window changes only then).
    judged: Vec<Vec<(Verdict, Option<f64>)>>,
}

/// One group partition's last samples.
#[derive(Debug, Default)]
struct Window {
    samples: VecDeque<Sample>,
    /// The good poll that last saw the partition.
    seen: u64,
}

/// A group partition as `/api/v1/groups` shows it.
#[derive(Debug, Clone)]
pub struct PartitionView {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The committed offset.
    pub committed: i64,
    /// Where the partition ends for the group, if the cluster has it.
    pub end: Option<i64>,
    /// Where the group stands.
    pub standing: Standing,
    /// Lag in seconds at the last poll, where known.
    pub lag_seconds: Option<f64>,
    /// The window's verdict.
    pub verdict: Verdict,
}

/// A group as `/api/v1/groups` and the status page show it.
#[derive(Debug, Clone)]
pub struct GroupView {
    /// The cluster that holds it.
    pub cluster: String,
    /// Its id.
    pub group: String,
    /// Its state, as its coordinator names it.
    pub state: String,
    /// Members now.
    pub members: usize,
    /// Its largest partition lag in records.
    pub max_lag_records: i64,
    /// Its largest partition lag in seconds (0 without any known).
    pub max_lag_seconds: f64,
    /// Its worst partition's verdict (`OK` without partitions).
    pub verdict: Verdict,
    /// Its partitions, by topic and partition.
    pub partitions: Vec<PartitionView>,
}

/// Every watched cluster's groups.
#[derive(Debug)]
pub struct Tracker {
    clusters: Mutex<BTreeMap<String, Tracked>>,
    interval: Duration,
}

impl Tracker {
    /// A tracker of polls every `interval`.
    pub fn new(interval: Duration) -> Tracker {
        Tracker {
            clusters: Mutex::new(BTreeMap::new()),
            interval,
        }
    }

    /// Takes one poll of `cluster` made at `t_ms` (milliseconds since the
    /// epoch): a snapshot, or why there is none. A failed poll keeps the
    /// last snapshot and counts against every group's window as an error.
    pub fn record(&self, cluster: &str, t_ms: i64, polled: Result<Snapshot, String>) {
        let mut clusters = self.clusters.lock().expect("lag tracker");
        let tracked = clusters.entry(cluster.to_owned()).or_default();
        match polled {
            Err(error) => {
                tracked.error = Some(error);
                tracked.polls_failed += 1;
                return;
            }
            Ok(snapshot) => {
                tracked.error = None;
                tracked.snapshot = snapshot;
            }
        }
        tracked.polls += 1;
        let poll = tracked.polls;
        let mut judged = Vec::with_capacity(tracked.snapshot.groups.len());
        for group in &tracked.snapshot.groups {
            let mut partitions = Vec::with_capacity(group.partitions.len());
            for p in &group.partitions {
                let lag_records = p.lag_records().unwrap_or(0);
                let health = match p.standing() {
                    Standing::BeyondEnd => Health::Retrying(format!(
                        "committed offset {} is beyond the partition's end {} (topic recreated or truncated?)",
                        p.committed,
                        p.end.unwrap_or(-1)
                    )),
                    _ if group.members == 0 && lag_records > 0 => {
                        Health::Stopped(format!("no members while {lag_records} records behind"))
                    }
                    _ => Health::Running,
                };
                let lag_seconds = p.lag_seconds(t_ms);
                let sample = Sample {
                    t_ms,
                    position: Some(p.committed),
                    high_watermark: p.end.unwrap_or(-1),
                    lag_records,
                    lag_seconds,
                    commit_age: None,
                    errors: tracked.polls_failed + u64::from(group.error.is_some()),
                    health,
                };
                let key = (group.group.clone(), p.topic.clone(), p.partition);
                let window = tracked.windows.entry(key).or_default();
                if window.samples.len() == WINDOW {
                    window.samples.pop_front();
                }
                window.samples.push_back(sample);
                window.seen = poll;
                partitions.push((
                    evaluate(window.samples.make_contiguous(), self.interval),
                    lag_seconds,
                ));
            }
            judged.push(partitions);
        }
        tracked.judged = judged;
        tracked.windows.retain(|_, window| window.seen == poll);
    }

    /// `f` of `cluster`'s last good snapshot, if it has one.
    pub fn with_snapshot<R>(&self, cluster: &str, f: impl FnOnce(&Snapshot) -> R) -> Option<R> {
        let clusters = self.clusters.lock().expect("lag tracker");
        clusters.get(cluster).map(|tracked| f(&tracked.snapshot))
    }

    /// Every group of every cluster, with its verdict.
    pub fn view(&self) -> Vec<GroupView> {
        self.view_where(|_, _| true)
    }

    /// The groups `keep` takes (by cluster and group), with their verdicts.
    pub fn view_where(&self, keep: impl Fn(&str, &str) -> bool) -> Vec<GroupView> {
        let clusters = self.clusters.lock().expect("lag tracker");
        let mut views = Vec::new();
        for (cluster, tracked) in clusters.iter() {
            for (group, judged) in tracked.snapshot.groups.iter().zip(&tracked.judged) {
                if !keep(cluster, &group.group) {
                    continue;
                }
                let partitions: Vec<PartitionView> = group
                    .partitions
                    .iter()
                    .zip(judged)
                    .map(|(p, (verdict, lag_seconds))| PartitionView {
                        topic: p.topic.clone(),
                        partition: p.partition,
                        committed: p.committed,
                        end: p.end,
                        standing: p.standing(),
                        lag_seconds: *lag_seconds,
                        verdict: verdict.clone(),
                    })
                    .collect();
                let verdict = match &group.error {
                    Some(error) => Verdict {
                        level: Level::Err,
                        reason: format!("offsets not read: {error}"),
                    },
                    None => partitions
                        .iter()
                        .map(|p| &p.verdict)
                        .max_by_key(|v| v.level)
                        .cloned()
                        .unwrap_or(Verdict {
                            level: Level::Ok,
                            reason: "no committed offsets".to_owned(),
                        }),
                };
                views.push(GroupView {
                    cluster: cluster.clone(),
                    group: group.group.clone(),
                    state: group.state.clone(),
                    members: group.members,
                    max_lag_records: group.max_lag_records(),
                    max_lag_seconds: partitions
                        .iter()
                        .filter_map(|p| p.lag_seconds)
                        .fold(0.0, f64::max),
                    verdict,
                    partitions,
                });
            }
        }
        views
    }

    /// Per cluster: the last poll's error, polls failed, groups skipped.
    pub fn clusters(&self) -> Vec<(String, Option<String>, u64, usize)> {
        let clusters = self.clusters.lock().expect("lag tracker");
        clusters
            .iter()
            .map(|(name, t)| (name.clone(), t.error.clone(), t.polls_failed, t.snapshot.skipped))
            .collect()
    }
}

/// The `strait_group_*` and `strait_lag_*` series, read from a
/// [`Tracker`] when scraped. Without partition labels, a topic's lag is
/// the sum of its partitions'.
#[derive(Debug)]
pub struct LagCollector {
    tracker: std::sync::Arc<Tracker>,
    partition_labels: bool,
    descs: Vec<Desc>,
}

impl LagCollector {
    /// A collector over `tracker`.
    pub fn new(tracker: std::sync::Arc<Tracker>, partition_labels: bool) -> LagCollector {
        let (families, counter) = Self::families(partition_labels);
        let descs = families
            .iter()
            .flat_map(|f| f.desc())
            .chain(counter.desc())
            .cloned()
            .collect();
        LagCollector {
            tracker,
            partition_labels,
            descs,
        }
    }

    /// lag_records, lag_seconds, max_lag_records, max_lag_seconds,
    /// members, state, status, skipped; and the poll error counter.
    fn families(partition_labels: bool) -> ([GaugeVec; 8], IntCounterVec) {
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            GaugeVec::new(Opts::new(name, help), labels).expect("valid metric")
        };
        let lag_labels: &[&str] = if partition_labels {
            &["cluster", "group", "topic", "partition"]
        } else {
            &["cluster", "group", "topic"]
        };
        (
            [
                gauge(
                    "strait_group_lag_records",
                    "The partition's end minus the group's committed offset, never negative.",
                    lag_labels,
                ),
                gauge(
                    "strait_group_lag_seconds",
                    "How long ago the oldest record the group has not read was written; 0 when caught up.",
                    lag_labels,
                ),
                gauge(
                    "strait_group_max_lag_records",
                    "The group's largest partition lag in records.",
                    &["cluster", "group"],
                ),
                gauge(
                    "strait_group_max_lag_seconds",
                    "The group's largest partition lag in seconds.",
                    &["cluster", "group"],
                ),
                gauge(
                    "strait_group_members",
                    "The group's members (0 for a group with committed offsets and no members).",
                    &["cluster", "group"],
                ),
                gauge(
                    "strait_group_state",
                    "1 for the group's state as its coordinator names it.",
                    &["cluster", "group", "state"],
                ),
                gauge(
                    "strait_group_status",
                    "1 for the group's evaluated status over the last window: OK, WARN, STALL, STOP, ERR.",
                    &["cluster", "group", "status"],
                ),
                gauge(
                    "strait_lag_groups_skipped",
                    "Watched groups left out for lag.max_groups.",
                    &["cluster"],
                ),
            ],
            IntCounterVec::new(
                Opts::new(
                    "strait_lag_poll_errors_total",
                    "Polls of the cluster's groups that failed.",
                ),
                &["cluster"],
            )
            .expect("valid metric"),
        )
    }
}

impl Collector for LagCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let ([lag, seconds, max_lag, max_seconds, members, state, status, skipped], errors) =
            Self::families(self.partition_labels);
        for g in self.tracker.view() {
            let (cluster, group) = (g.cluster.as_str(), g.group.as_str());
            // Per topic: records summed, seconds the maximum.
            let mut per_topic: BTreeMap<&str, (f64, Option<f64>)> = BTreeMap::new();
            for p in &g.partitions {
                let Standing::Behind(records) = p.standing else {
                    continue;
                };
                if self.partition_labels {
                    let partition = p.partition.to_string();
                    let labels = [cluster, group, p.topic.as_str(), partition.as_str()];
                    lag.with_label_values(&labels).set(records as f64);
                    if let Some(s) = p.lag_seconds {
                        seconds.with_label_values(&labels).set(s);
                    }
                } else {
                    let topic = per_topic.entry(&p.topic).or_default();
                    topic.0 += records as f64;
                    topic.1 = p.lag_seconds.map(|s| topic.1.map_or(s, |t| t.max(s))).or(topic.1);
                }
            }
            for (topic, (records, secs)) in per_topic {
                lag.with_label_values(&[cluster, group, topic]).set(records);
                if let Some(s) = secs {
                    seconds.with_label_values(&[cluster, group, topic]).set(s);
                }
            }
            max_lag
                .with_label_values(&[cluster, group])
                .set(g.max_lag_records as f64);
            max_seconds
                .with_label_values(&[cluster, group])
                .set(g.max_lag_seconds);
            members.with_label_values(&[cluster, group]).set(g.members as f64);
            state.with_label_values(&[cluster, group, &g.state]).set(1.0);
            for level in Level::ALL {
                status
                    .with_label_values(&[cluster, group, level.as_str()])
                    .set(f64::from(u8::from(level == g.verdict.level)));
            }
        }
        for (cluster, _, failed, left_out) in self.tracker.clusters() {
            skipped.with_label_values(&[&cluster]).set(left_out as f64);
            errors.with_label_values(&[&cluster]).inc_by(failed);
        }
        [
            lag,
            seconds,
            max_lag,
            max_seconds,
            members,
            state,
            status,
            skipped,
        ]
        .iter()
        .flat_map(|f| f.collect())
        .chain(errors.collect())
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::{GroupLag, PartitionLag};

    fn group(name: &str, members: usize, partitions: &[(i32, i64, i64)]) -> GroupLag {
        GroupLag {
            group: name.to_owned(),
            state: "Stable".to_owned(),
            members,
            partitions: partitions
                .iter()
                .map(|&(partition, committed, end)| PartitionLag {
                    end: Some(end),
                    oldest_unread_ms: Some(1_000),
                    ..PartitionLag::committed("t".to_owned(), partition, committed)
                })
                .collect(),
            error: None,
        }
    }

    #[test]
    fn each_poll_judges_every_partition_and_forgets_the_ones_gone() {
        let tracker = Tracker::new(Duration::from_secs(5));
        let poll = |t_ms: i64, groups: Vec<GroupLag>| {
            tracker.record("k", t_ms, Ok(Snapshot { groups, skipped: 0 }));
        };
        // A group without members, behind on partition 0: STOP; partition
        // 1 caught up. A moving group with members: OK.
        for (i, t) in [10_000, 15_000, 20_000].into_iter().enumerate() {
            let moving = 10 * i as i64;
            poll(
                t,
                vec![
                    group("idle", 0, &[(0, 5, 50), (1, 7, 7)]),
                    group("live", 1, &[(0, moving, moving + 3)]),
                ],
            );
        }
        let view = tracker.view();
        let idle = &view[0];
        assert_eq!((idle.group.as_str(), idle.verdict.level), ("idle", Level::Stop));
        assert_eq!(idle.max_lag_records, 45);
        assert_eq!(
            idle.partitions[0].lag_seconds,
            Some(19.0),
            "since the oldest unread record"
        );
        assert_eq!(idle.partitions[1].verdict.level, Level::Ok);
        assert_eq!(idle.partitions[1].lag_seconds, Some(0.0));
        assert_eq!(
            (view[1].group.as_str(), view[1].verdict.level),
            ("live", Level::Ok)
        );
        // Only the group asked for.
        let one = tracker.view_where(|c, g| c == "k" && g == "live");
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].partitions[0].committed, 20);
        // A failed poll keeps the last snapshot and its verdicts.
        tracker.record("k", 25_000, Err("down".to_owned()));
        assert_eq!(tracker.view()[0].verdict.level, Level::Stop);
        // Partition 1 and group `live` gone: their windows go with them,
        // and a partition coming back starts a fresh window.
        poll(30_000, vec![group("idle", 0, &[(0, 5, 50)])]);
        poll(35_000, vec![group("idle", 0, &[(0, 5, 50), (1, 7, 9)])]);
        let clusters = tracker.clusters.lock().unwrap();
        let windows = &clusters["k"].windows;
        assert_eq!(windows.len(), 2);
        assert_eq!(windows[&("idle".to_owned(), "t".to_owned(), 1)].samples.len(), 1);
        assert_eq!(windows[&("idle".to_owned(), "t".to_owned(), 0)].samples.len(), 5);
    }
}
