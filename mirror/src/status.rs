//! Each mirror partition's status over a sliding window, the way Burrow
//! evaluates a consumer: every [`SAMPLE_INTERVAL`] a [`Tracker`] samples
//! every partition and keeps the last [`WINDOW`] samples, and
//! [`evaluate`] judges the window (the rules are in `dashboards/README.md`
//! and on [`evaluate`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, Opts};

use crate::state::Partitions;
use crate::state::{now_ms, PartitionState, Status};

/// How often partitions are sampled.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);

/// Samples kept per partition: one minute at [`SAMPLE_INTERVAL`].
pub const WINDOW: usize = 12;

/// Fewer samples than this say nothing about a trend: `OK`.
const MIN_SAMPLES: usize = 3;

/// A partition's evaluated status, best to worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Keeping up.
    Ok,
    /// Moving, but the lag grew at every sample across the window.
    Warn,
    /// Not moving while behind.
    Stall,
    /// Stopped, or no longer committing while behind.
    Stop,
    /// Retrying after errors, or its position went backwards.
    Err,
}

impl Level {
    /// Every level, for the `status` label.
    pub const ALL: [Level; 5] = [Level::Ok, Level::Warn, Level::Stall, Level::Stop, Level::Err];

    /// `OK`, `WARN`, `STALL`, `STOP`, `ERR`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "OK",
            Level::Warn => "WARN",
            Level::Stall => "STALL",
            Level::Stop => "STOP",
            Level::Err => "ERR",
        }
    }
}

/// One sample of a partition.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Wall-clock time, milliseconds since the epoch.
    pub t_ms: i64,
    /// Next source offset to mirror, once known.
    pub position: Option<i64>,
    /// The source's high watermark as last fetched (-1 before).
    pub high_watermark: i64,
    /// Lag in records.
    pub lag_records: i64,
    /// Lag in seconds, once known.
    pub lag_seconds: Option<f64>,
    /// Seconds since the last commit, if any.
    pub commit_age: Option<f64>,
    /// Errors seen so far (monotonic).
    pub errors: u64,
    /// The partition's own state.
    pub state: Status,
}

impl Sample {
    /// Samples `state` now.
    pub fn of(state: &PartitionState) -> Sample {
        Sample {
            t_ms: now_ms(),
            position: state.acked().map(|(position, _)| position),
            high_watermark: state.high_watermark(),
            lag_records: state.lag_records(),
            lag_seconds: state.lag_seconds(),
            commit_age: state.commit_age(),
            errors: state.counters.errors.load(Ordering::Relaxed),
            state: state.status(),
        }
    }
}

/// A status and the rule that gave it, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The status.
    pub level: Level,
    /// Why, for people.
    pub reason: String,
}

fn verdict(level: Level, reason: impl Into<String>) -> Verdict {
    Verdict {
        level,
        reason: reason.into(),
    }
}

/// Judges a window of samples (oldest first) of a partition that commits
/// every `commit_interval`. First match wins:
///
/// 1. `ERR`: retrying after an error now, errors within the window, or
///    the position went backwards.
/// 2. `STOP`: stopped; or behind with the last commit older than the
///    window and than three commit intervals.
/// 3. `OK`: fewer than 3 samples, or the lag was zero in some sample.
/// 4. `STALL`: the position did not move across the window.
/// 5. `WARN`: the lag grew from every sample to the next.
/// 6. `OK`.
pub fn evaluate(window: &[Sample], commit_interval: Duration) -> Verdict {
    let Some(last) = window.last() else {
        return verdict(Level::Ok, "not sampled yet");
    };
    let first = &window[0];
    if let Status::Retrying(why) = &last.state {
        return verdict(Level::Err, format!("retrying: {why}"));
    }
    if last.errors > first.errors {
        return verdict(
            Level::Err,
            format!("{} errors within the window", last.errors - first.errors),
        );
    }
    let positions: Vec<i64> = window.iter().filter_map(|s| s.position).collect();
    if positions.windows(2).any(|w| w[1] < w[0]) {
        return verdict(Level::Err, "the position went backwards");
    }
    if let Status::Stopped(why) = &last.state {
        return verdict(Level::Stop, format!("stopped: {why}"));
    }
    let span = Duration::from_millis((last.t_ms - first.t_ms).max(0) as u64);
    let stale_after = span.max(commit_interval * 3);
    if last.lag_records > 0 && window.len() >= MIN_SAMPLES {
        if let Some(age) = last.commit_age.filter(|age| *age > stale_after.as_secs_f64()) {
            return verdict(Level::Stop, format!("no commit for {age:.0} s while behind"));
        }
    }
    if window.len() < MIN_SAMPLES {
        return verdict(Level::Ok, "too few samples to judge a trend");
    }
    if window.iter().any(|s| s.lag_records == 0) {
        return verdict(Level::Ok, "lag was zero within the window");
    }
    if positions.len() == window.len() && positions.first() == positions.last() {
        return verdict(
            Level::Stall,
            format!(
                "position {} did not move in {:.0} s while {} records behind",
                positions[0],
                span.as_secs_f64(),
                last.lag_records
            ),
        );
    }
    if window.windows(2).all(|w| w[1].lag_records > w[0].lag_records) {
        return verdict(
            Level::Warn,
            format!(
                "lag grew at every sample, {} to {} records",
                first.lag_records, last.lag_records
            ),
        );
    }
    verdict(Level::Ok, "moving, lag not growing")
}

/// Records per second the position moved across the window (0 with fewer
/// than two positions).
pub fn rate(window: &[Sample]) -> f64 {
    let known: Vec<(i64, i64)> = window
        .iter()
        .filter_map(|s| s.position.map(|p| (s.t_ms, p)))
        .collect();
    match (known.first(), known.last()) {
        (Some(&(t0, p0)), Some(&(t1, p1))) if t1 > t0 => (p1 - p0).max(0) as f64 * 1000.0 / (t1 - t0) as f64,
        _ => 0.0,
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
    /// Partitions by topic and partition.
    pub partitions: Vec<PartitionView>,
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
                window.push_back(Sample::of(&state));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: i64, position: i64, lag: i64) -> Sample {
        Sample {
            t_ms: t * 5_000,
            position: Some(position),
            high_watermark: position + lag,
            lag_records: lag,
            lag_seconds: Some(if lag == 0 { 0.0 } else { 1.0 }),
            commit_age: Some(1.0),
            errors: 0,
            state: Status::Running,
        }
    }

    fn level(window: &[Sample]) -> Level {
        evaluate(window, Duration::from_secs(5)).level
    }

    #[test]
    fn each_rule_gives_its_status() {
        let caught_up: Vec<Sample> = (0..12).map(|t| sample(t, 100 + t * 10, 0)).collect();
        assert_eq!(level(&caught_up), Level::Ok);

        let keeping_pace: Vec<Sample> = (0..12).map(|t| sample(t, 100 + t * 10, 5 + t % 2)).collect();
        assert_eq!(level(&keeping_pace), Level::Ok);

        let falling_behind: Vec<Sample> = (0..12).map(|t| sample(t, 100 + t * 10, 5 + t * 3)).collect();
        let verdict = evaluate(&falling_behind, Duration::from_secs(5));
        assert_eq!(verdict.level, Level::Warn);
        assert_eq!(verdict.reason, "lag grew at every sample, 5 to 38 records");

        let stalled: Vec<Sample> = (0..12).map(|t| sample(t, 100, 5 + t)).collect();
        assert_eq!(level(&stalled), Level::Stall);

        let mut not_committing = keeping_pace.clone();
        not_committing.last_mut().unwrap().commit_age = Some(120.0);
        assert_eq!(level(&not_committing), Level::Stop);

        let mut stopped = caught_up.clone();
        stopped.last_mut().unwrap().state = Status::Stopped("records lost".into());
        assert_eq!(level(&stopped), Level::Stop);

        let mut retrying = caught_up.clone();
        retrying.last_mut().unwrap().state = Status::Retrying("target down".into());
        let verdict = evaluate(&retrying, Duration::from_secs(5));
        assert_eq!(
            (verdict.level, verdict.reason.as_str()),
            (Level::Err, "retrying: target down")
        );

        let mut errors = caught_up.clone();
        errors.last_mut().unwrap().errors = 2;
        assert_eq!(level(&errors), Level::Err);

        let mut rewound = caught_up.clone();
        rewound[5].position = Some(0);
        assert_eq!(level(&rewound), Level::Err);
    }

    #[test]
    fn a_short_window_is_ok_and_a_stall_needs_lag() {
        let short: Vec<Sample> = (0..2).map(|t| sample(t, 100, 50)).collect();
        assert_eq!(level(&short), Level::Ok);
        assert_eq!(level(&[]), Level::Ok);
        let idle: Vec<Sample> = (0..12).map(|t| sample(t, 100, 0)).collect();
        assert_eq!(level(&idle), Level::Ok);
    }

    #[test]
    fn rate_is_the_positions_slope() {
        let window: Vec<Sample> = (0..12).map(|t| sample(t, 100 + t * 50, 0)).collect();
        assert_eq!(rate(&window), 10.0);
        assert_eq!(rate(&window[..1]), 0.0);
    }
}
