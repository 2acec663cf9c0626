//! The mirror's Prometheus metrics.
//!
//! Per-partition values are read from each partition's state when
//! Prometheus scrapes ([`PartitionCollector`]), so a partition's series go
//! away with its topic. Histograms and error counters are kept as they
//! happen ([`MirrorMetrics`]). With `partition_labels: false` the
//! per-partition series are summed per topic (lag in seconds and commit
//! age take the partitions' maximum), for very large mirrors.
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `strait_mirror_lag_records` | gauge | mirror, topic, partition | source high watermark minus the next offset to mirror, never negative |
//! | `strait_mirror_lag_seconds` | gauge | mirror, topic, partition | age of the oldest source record not yet on the target; 0 when caught up |
//! | `strait_mirror_source_high_watermark` | gauge | mirror, topic, partition | the source partition's high watermark as last fetched |
//! | `strait_mirror_position` | gauge | mirror, topic, partition | next source offset to mirror (everything before it is on the target) |
//! | `strait_mirror_commit_age_seconds` | gauge | mirror, topic, partition | seconds since the position was last committed to the source |
//! | `strait_mirror_records_total` | counter | mirror, topic, partition | records written to the target |
//! | `strait_mirror_bytes_total` | counter | mirror, topic, partition | record batch bytes written to the target |
//! | `strait_mirror_fetched_bytes_total` | counter | mirror, topic, partition | record bytes fetched from the source, those fetched twice included (overlapping fetches ahead, `staggered_polls`): what crossed the link |
//! | `strait_mirror_batches_total` | counter | mirror, topic, partition, how | batches written: `passed_through` (the source's bytes) or `reencoded` |
//! | `strait_mirror_lost_records_total` | counter | mirror, topic, partition | source records deleted by retention before they were mirrored |
//! | `strait_mirror_looped_records_total` | counter | mirror, topic, partition | source records left out because the target is their origin (`prevent_loops`): copies coming back |
//! | `strait_mirror_partition_status` | gauge | mirror, topic, partition, status | 1 for the partition's status: `starting`, `running`, `retrying`, `stopped` |
//! | `strait_mirror_errors_total` | counter | mirror, kind | errors by kind: `source`, `target`, `source_data`, `producer_state`, `diverged`, `lost_records`, `offset_map`, `group_active` |
//! | `strait_mirror_produce_latency_seconds` | histogram | mirror | from sending a produce to the target until its acknowledgement |
//! | `strait_mirror_replication_latency_seconds` | histogram | mirror | target acknowledgement time minus the timestamp of each batch's first record |
//! | `strait_mirror_group_offset_commits_total` | counter | mirror | partitions of groups whose translated offset `sync_group_offsets` committed on the target |
//! | `strait_mirror_group_sync_seconds` | histogram | mirror | one round of `sync_group_offsets`: every followed group read, translated and committed |
//! | `strait_mirror_partitions_owned` | gauge | mirror | partitions this process owns in the mirror's group |
//! | `strait_mirror_rebalances_total` | counter | mirror | rebalances of the mirror's group this process went through |
//! | `strait_mirror_rebalance_pause_seconds` | histogram | mirror | from this process stopping its partitions for a rebalance until every partition of its new assignment streams again |

use std::sync::{Arc, Mutex};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

use crate::state::{PartitionState, Partitions, Status};

/// Latency buckets, seconds: 1 ms to 60 s, dense around the round trips
/// between datacenters (tens to hundreds of milliseconds).
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0,
    30.0, 60.0,
];

/// Histograms and counters recorded as things happen, for every mirror of
/// the process.
#[derive(Debug, Clone)]
pub struct MirrorMetrics {
    /// `strait_mirror_produce_latency_seconds{mirror}`.
    pub produce_latency: HistogramVec,
    /// `strait_mirror_replication_latency_seconds{mirror}`.
    pub replication_latency: HistogramVec,
    /// `strait_mirror_errors_total{mirror, kind}`.
    pub errors: IntCounterVec,
    /// `strait_mirror_group_offset_commits_total{mirror}`.
    pub group_commits: IntCounterVec,
    /// `strait_mirror_group_sync_seconds{mirror}`.
    pub group_sync: HistogramVec,
    /// `strait_mirror_partitions_owned{mirror}`.
    pub owned: IntGaugeVec,
    /// `strait_mirror_rebalances_total{mirror}`.
    pub rebalances: IntCounterVec,
    /// `strait_mirror_rebalance_pause_seconds{mirror}`.
    pub rebalance_pause: HistogramVec,
}

impl MirrorMetrics {
    /// Creates the metrics and registers them.
    pub fn register(registry: &Registry) -> prometheus::Result<MirrorMetrics> {
        let produce_latency = HistogramVec::new(
            HistogramOpts::new(
                "strait_mirror_produce_latency_seconds",
                "Time from sending a produce to the target until its acknowledgement.",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["mirror"],
        )?;
        let replication_latency = HistogramVec::new(
            HistogramOpts::new(
                "strait_mirror_replication_latency_seconds",
                "Target acknowledgement time minus the timestamp of each mirrored batch's first record.",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["mirror"],
        )?;
        let errors = IntCounterVec::new(
            Opts::new(
                "strait_mirror_errors_total",
                "Mirror errors by kind (each retry counts).",
            ),
            &["mirror", "kind"],
        )?;
        let group_commits = IntCounterVec::new(
            Opts::new(
                "strait_mirror_group_offset_commits_total",
                "Partitions of consumer groups whose translated offset was committed on the target.",
            ),
            &["mirror"],
        )?;
        let group_sync = HistogramVec::new(
            HistogramOpts::new(
                "strait_mirror_group_sync_seconds",
                "One round of group offset sync: every followed group read, translated and committed.",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["mirror"],
        )?;
        registry.register(Box::new(produce_latency.clone()))?;
        registry.register(Box::new(replication_latency.clone()))?;
        registry.register(Box::new(errors.clone()))?;
        registry.register(Box::new(group_commits.clone()))?;
        let owned = IntGaugeVec::new(
            Opts::new(
                "strait_mirror_partitions_owned",
                "Partitions this process owns in the mirror's group.",
            ),
            &["mirror"],
        )?;
        let rebalances = IntCounterVec::new(
            Opts::new(
                "strait_mirror_rebalances_total",
                "Rebalances of the mirror's group this process went through.",
            ),
            &["mirror"],
        )?;
        let rebalance_pause = HistogramVec::new(
            HistogramOpts::new(
                "strait_mirror_rebalance_pause_seconds",
                "From stopping this process's partitions for a rebalance until every partition of its new assignment streams again.",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["mirror"],
        )?;
        registry.register(Box::new(group_sync.clone()))?;
        registry.register(Box::new(owned.clone()))?;
        registry.register(Box::new(rebalances.clone()))?;
        registry.register(Box::new(rebalance_pause.clone()))?;
        Ok(MirrorMetrics {
            produce_latency,
            replication_latency,
            errors,
            group_commits,
            group_sync,
            owned,
            rebalances,
            rebalance_pause,
        })
    }

    /// Makes mirror `name`'s error counters exist at 0 (a counter that
    /// appears only with its first error has no rate before it).
    pub fn start_mirror(&self, name: &str) {
        for kind in crate::MirrorError::KINDS {
            self.errors.with_label_values(&[name, kind]);
        }
        self.group_commits.with_label_values(&[name]);
        self.owned.with_label_values(&[name]);
        self.rebalances.with_label_values(&[name]);
    }

    /// Metrics that are not registered anywhere (tests).
    pub fn unregistered() -> MirrorMetrics {
        MirrorMetrics::register(&Registry::new()).expect("fresh registry")
    }
}

/// Reads every mirror's partitions at scrape time.
#[derive(Debug)]
pub struct PartitionCollector {
    mirrors: Mutex<Vec<(String, Partitions)>>,
    partition_labels: bool,
    descs: Vec<Desc>,
}

struct Families {
    lag_records: GaugeVec,
    lag_seconds: GaugeVec,
    high_watermark: GaugeVec,
    position: GaugeVec,
    commit_age: GaugeVec,
    records: IntCounterVec,
    bytes: IntCounterVec,
    fetched_bytes: IntCounterVec,
    batches: IntCounterVec,
    lost: IntCounterVec,
    looped: IntCounterVec,
    status: GaugeVec,
}

impl Families {
    fn new(partition_labels: bool) -> Families {
        let labels: &[&str] = if partition_labels {
            &["mirror", "topic", "partition"]
        } else {
            &["mirror", "topic"]
        };
        let with = |extra: &'static str| {
            let mut l = labels.to_vec();
            l.push(extra);
            l
        };
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            GaugeVec::new(Opts::new(name, help), labels).expect("valid metric")
        };
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
        };
        Families {
            lag_records: gauge(
                "strait_mirror_lag_records",
                "Source high watermark minus the next offset to mirror (never negative).",
                labels,
            ),
            lag_seconds: gauge(
                "strait_mirror_lag_seconds",
                "Age of the oldest source record not yet on the target; 0 when caught up.",
                labels,
            ),
            high_watermark: gauge(
                "strait_mirror_source_high_watermark",
                "The source partition's high watermark as last fetched.",
                labels,
            ),
            position: gauge(
                "strait_mirror_position",
                "Next source offset to mirror: every record before it is on the target.",
                labels,
            ),
            commit_age: gauge(
                "strait_mirror_commit_age_seconds",
                "Seconds since the mirror last committed this position to the source.",
                labels,
            ),
            records: counter(
                "strait_mirror_records_total",
                "Records written to the target.",
                labels,
            ),
            bytes: counter(
                "strait_mirror_bytes_total",
                "Record batch bytes written to the target.",
                labels,
            ),
            fetched_bytes: counter(
                "strait_mirror_fetched_bytes_total",
                "Record bytes fetched from the source, those fetched twice included: what crossed the link.",
                labels,
            ),
            batches: counter(
                "strait_mirror_batches_total",
                "Batches written to the target, passed through as the source's bytes or re-encoded.",
                &with("how"),
            ),
            lost: counter(
                "strait_mirror_lost_records_total",
                "Source records deleted by retention before they were mirrored.",
                labels,
            ),
            looped: counter(
                "strait_mirror_looped_records_total",
                "Source records left out because the target is their origin (prevent_loops).",
                labels,
            ),
            status: gauge(
                "strait_mirror_partition_status",
                "1 for the partition's current status (starting, running, retrying, stopped).",
                &with("status"),
            ),
        }
    }

    fn collectors(&self) -> [&dyn Collector; 12] {
        [
            &self.lag_records,
            &self.lag_seconds,
            &self.high_watermark,
            &self.position,
            &self.commit_age,
            &self.records,
            &self.bytes,
            &self.fetched_bytes,
            &self.batches,
            &self.lost,
            &self.looped,
            &self.status,
        ]
    }
}

impl PartitionCollector {
    /// A collector; add mirrors with [`PartitionCollector::add`].
    pub fn new(partition_labels: bool) -> PartitionCollector {
        let descs = Families::new(partition_labels)
            .collectors()
            .iter()
            .flat_map(|c| c.desc().into_iter().cloned())
            .collect();
        PartitionCollector {
            mirrors: Mutex::new(Vec::new()),
            partition_labels,
            descs,
        }
    }

    /// Reports `partitions` under mirror `name`.
    pub fn add(&self, name: &str, partitions: Partitions) {
        self.mirrors
            .lock()
            .expect("collector mirrors")
            .push((name.to_owned(), partitions));
    }

    fn fill(&self, f: &Families, mirror: &str, state: &Arc<PartitionState>) {
        let partition = state.partition.to_string();
        let labels: Vec<&str> = if self.partition_labels {
            vec![mirror, &state.source_topic, &partition]
        } else {
            vec![mirror, &state.source_topic]
        };
        let with = |extra: &'static str| {
            let mut l = labels.clone();
            l.push(extra);
            l
        };
        let sum = |g: &GaugeVec, v: f64| g.with_label_values(&labels).add(v);
        let max = |g: &GaugeVec, v: f64| {
            let g = g.with_label_values(&labels);
            g.set(g.get().max(v));
        };
        sum(&f.lag_records, state.lag_records() as f64);
        if let Some(lag) = state.lag_seconds() {
            max(&f.lag_seconds, lag);
        }
        let high_watermark = state.high_watermark();
        if high_watermark >= 0 {
            sum(&f.high_watermark, high_watermark as f64);
        }
        if let Some((position, _)) = state.acked() {
            sum(&f.position, position as f64);
        }
        if let Some(age) = state.commit_age() {
            max(&f.commit_age, age);
        }
        let c = &state.counters;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        f.records.with_label_values(&labels).inc_by(load(&c.records));
        f.bytes.with_label_values(&labels).inc_by(load(&c.bytes));
        f.fetched_bytes
            .with_label_values(&labels)
            .inc_by(load(&c.fetched_bytes));
        f.batches
            .with_label_values(&with("passed_through"))
            .inc_by(load(&c.batches_passed));
        f.batches
            .with_label_values(&with("reencoded"))
            .inc_by(load(&c.batches_reencoded));
        f.lost.with_label_values(&labels).inc_by(load(&c.lost_records));
        f.looped
            .with_label_values(&labels)
            .inc_by(load(&c.looped_records));
        let status = match state.status() {
            Status::Starting => "starting",
            Status::Running => "running",
            Status::Retrying(_) => "retrying",
            Status::Stopped(_) => "stopped",
        };
        if self.partition_labels {
            f.status.with_label_values(&with(status)).set(1.0);
        } else {
            // Per topic: how many partitions are in each status.
            f.status.with_label_values(&with(status)).add(1.0);
        }
    }
}

impl Collector for PartitionCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let families = Families::new(self.partition_labels);
        for (mirror, partitions) in self.mirrors.lock().expect("collector mirrors").iter() {
            for state in partitions.all() {
                self.fill(&families, mirror, &state);
            }
        }
        families.collectors().iter().flat_map(|c| c.collect()).collect()
    }
}
