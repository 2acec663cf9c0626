//! Each mirror partition's status over a sliding window: every
//! [`SAMPLE_INTERVAL`] a [`Tracker`] samples every partition and keeps the
//! last [`WINDOW`] samples, and [`evaluate`] judges the window, as it
//! judges consumer groups ([`strait_lag::status`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, Opts};

pub use strait_lag::status::{evaluate, rate, Health, Level, Sample, Verdict, SAMPLE_INTERVAL, WINDOW};

use crate::state::Partitions;
use crate::state::{now_ms, PartitionState, Status};

/// Samples `state` now.
pub fn sample(state: &PartitionState) -> Sample {
    Sample {
        t_ms: now_ms(),
        position: state.acked().map(|(position, _)| position),
        high_watermark: state.high_watermark(),
        lag_records: state.lag_records(),
        lag_seconds: state.lag_seconds(),
        commit_age: state.commit_age(),
        errors: state.counters.errors.load(Ordering::Relaxed),
        health: match state.status() {
            Status::Starting | Status::Running => Health::Running,
            Status::Retrying(why) => Health::Retrying(why),
            Status::Stopped(why) => Health::Stopped(why),
        },
    }
}

/// One tracked mirror.
#[derive(Debug)]
struct Tracked {
    name: String,
    source: String,
    target: String,
    commit_interval: Duration,
    partitions: Partitions,
    windows: HashMap<(Arc<str>, i32), VecDeque<Sample>>,
}

/// A partition as the status page and `/api/v1/mirrors` show it.
#[derive(Debug, Clone)]
pub struct PartitionView {
    /// Its state.
    pub state: Arc<PartitionState>,
    /// The window, oldest first.
    pub window: Vec<Sample>,
    /// The window's verdict.
    pub verdict: Verdict,
    /// Records per second over the window.
    pub rate: f64,
}

/// A mirror as the status page shows it.
#[derive(Debug, Clone)]
pub struct MirrorView {
    /// The mirror's name.
    pub name: String,
    /// Source cluster.
    pub source: String,
    /// Target cluster.
    pub target: String,
    /// Its worst partition's status (`OK` without partitions).
    pub level: Level,
    /// Partitions by topic and partition: those this process owns.
    pub partitions: Vec<PartitionView>,
    /// This process in the mirror's group (none before it joined).
    pub member: Option<crate::state::Membership>,
}

/// Samples every mirror's partitions and judges their windows.
#[derive(Debug, Default)]
pub struct Tracker {
    mirrors: Mutex<Vec<Tracked>>,
}

impl Tracker {
    /// Tracks mirror `name` (from `source` to `target`, committing every
    /// `commit_interval`) over `partitions`.
    pub fn add(
        &self,
        name: &str,
        source: &str,
        target: &str,
        commit_interval: Duration,
        partitions: Partitions,
    ) {
        self.mirrors.lock().expect("tracker").push(Tracked {
            name: name.to_owned(),
            source: source.to_owned(),
            target: target.to_owned(),
            commit_interval,
            partitions,
            windows: HashMap::new(),
        });
    }

    /// Takes one sample of every partition; forgets partitions that went
    /// away.
    pub fn sample(&self) {
        for m in self.mirrors.lock().expect("tracker").iter_mut() {
            let states = m.partitions.all();
            let live: Vec<(Arc<str>, i32)> = states
                .iter()
                .map(|s| (s.source_topic.clone(), s.partition))
                .collect();
            m.windows.retain(|key, _| live.contains(key));
            for state in states {
                let window = m
                    .windows
                    .entry((state.source_topic.clone(), state.partition))
                    .or_default();
                if window.len() == WINDOW {
                    window.pop_front();
                }
                window.push_back(sample(&state));
            }
        }
    }

    /// Samples every [`SAMPLE_INTERVAL`] until `shutdown` turns true.
    pub async fn run(self: Arc<Tracker>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => self.sample(),
                _ = crate::shut_down(&mut shutdown) => return,
            }
        }
    }

    /// Every mirror with its partitions' windows and verdicts.
    pub fn view(&self) -> Vec<MirrorView> {
        let mirrors = self.mirrors.lock().expect("tracker");
        mirrors
            .iter()
            .map(|m| {
                let partitions: Vec<PartitionView> = m
                    .partitions
                    .all()
                    .into_iter()
                    .map(|state| {
                        let window: Vec<Sample> = m
                            .windows
                            .get(&(state.source_topic.clone(), state.partition))
                            .map(|w| w.iter().cloned().collect())
                            .unwrap_or_default();
                        PartitionView {
                            verdict: evaluate(&window, m.commit_interval),
                            rate: rate(&window),
                            window,
                            state,
                        }
                    })
                    .collect();
                MirrorView {
                    member: m.partitions.member(),
                    name: m.name.clone(),
                    source: m.source.clone(),
                    target: m.target.clone(),
                    level: partitions
                        .iter()
                        .map(|p| p.verdict.level)
                        .max()
                        .unwrap_or(Level::Ok),
                    partitions,
                }
            })
            .collect()
    }
}

/// `strait_mirror_status{mirror, topic, partition, status}`: 1 for each
/// partition's evaluated status (per topic without partition labels: how
/// many partitions have each status), read from the tracker when scraped.
#[derive(Debug)]
pub struct StatusCollector {
    tracker: Arc<Tracker>,
    partition_labels: bool,
    desc: Desc,
}

const STATUS_HELP: &str =
    "1 for the partition's evaluated status over the last minute: OK, WARN, STALL, STOP, ERR.";

impl StatusCollector {
    /// A collector over `tracker`.
    pub fn new(tracker: Arc<Tracker>, partition_labels: bool) -> StatusCollector {
        let desc = Self::family(partition_labels)
            .desc()
            .into_iter()
            .next()
            .cloned()
            .expect("one family");
        StatusCollector {
            tracker,
            partition_labels,
            desc,
        }
    }

    fn family(partition_labels: bool) -> GaugeVec {
        let labels: &[&str] = if partition_labels {
            &["mirror", "topic", "partition", "status"]
        } else {
            &["mirror", "topic", "status"]
        };
        GaugeVec::new(Opts::new("strait_mirror_status", STATUS_HELP), labels).expect("valid metric")
    }
}

impl Collector for StatusCollector {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let family = Self::family(self.partition_labels);
        for m in self.tracker.view() {
            // Per topic without partition labels: a count per status.
            let mut per_topic: BTreeMap<(String, Level), f64> = BTreeMap::new();
            for p in &m.partitions {
                let topic = p.state.source_topic.to_string();
                if self.partition_labels {
                    let partition = p.state.partition.to_string();
                    for level in Level::ALL {
                        let value = f64::from(u8::from(level == p.verdict.level));
                        family
                            .with_label_values(&[&m.name, &topic, &partition, level.as_str()])
                            .set(value);
                    }
                } else {
                    for level in Level::ALL {
                        *per_topic.entry((topic.clone(), level)).or_default() +=
                            f64::from(u8::from(level == p.verdict.level));
                    }
                }
            }
            for ((topic, level), count) in per_topic {
                family
                    .with_label_values(&[&m.name, &topic, level.as_str()])
                    .set(count);
            }
        }
        family.collect()
    }
}
