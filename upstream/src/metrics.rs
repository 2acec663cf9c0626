//! Prometheus metrics of the upstream clusters, for every [`Cluster`] of
//! the process (the router's and the mirrors'), labelled by cluster name.
//!
//! They are process-wide, like the sockets they count: [`register`] adds
//! them to a registry once. Requests on connections opened outside a
//! [`Cluster`] (`Connection::connect`) are not counted.
//!
//! | name | type | labels |
//! |---|---|---|
//! | `strait_upstream_up` | gauge | cluster |
//! | `strait_upstream_connections` | gauge | cluster |
//! | `strait_upstream_requests_total` | counter | cluster, api, outcome |
//! | `strait_upstream_request_duration_seconds` | histogram | cluster, api |
//! | `strait_upstream_bytes_total` | counter | cluster, direction |
//! | `strait_upstream_metadata_refreshes_total` | counter | cluster, outcome |
//! | `strait_upstream_metadata_age_seconds` | gauge | cluster |
//!
//! [`Cluster`]: crate::Cluster

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};
use tokio::time::Instant;

/// Latency buckets, seconds: 0.5 ms to 30 s, dense around the round trips
/// between datacenters.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0,
    10.0, 30.0,
];

struct Families {
    up: IntGaugeVec,
    connections: IntGaugeVec,
    requests: IntCounterVec,
    duration: HistogramVec,
    bytes: IntCounterVec,
    refreshes: IntCounterVec,
    /// When each cluster's metadata last loaded (for the age gauge, which
    /// is computed at scrape time).
    loaded: Mutex<BTreeMap<String, Instant>>,
    age_desc: Desc,
}

static FAMILIES: LazyLock<Families> = LazyLock::new(|| {
    let gauge = |name: &str, help: &str, labels: &[&str]| {
        IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric")
    };
    let counter = |name: &str, help: &str, labels: &[&str]| {
        IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
    };
    Families {
        up: gauge(
            "strait_upstream_up",
            "1 when the cluster's metadata last loaded, 0 when the last attempt failed.",
            &["cluster"],
        ),
        connections: gauge(
            "strait_upstream_connections",
            "Connections open to the cluster's brokers.",
            &["cluster"],
        ),
        requests: counter(
            "strait_upstream_requests_total",
            "Requests sent to the cluster: ok (answered) or error (connection failed, timed out, malformed answer).",
            &["cluster", "api", "outcome"],
        ),
        duration: HistogramVec::new(
            HistogramOpts::new(
                "strait_upstream_request_duration_seconds",
                "From handing a request to its connection until its answer arrived.",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["cluster", "api"],
        )
        .expect("valid metric"),
        bytes: counter(
            "strait_upstream_bytes_total",
            "Request bytes sent to and answer bytes received from the cluster.",
            &["cluster", "direction"],
        ),
        refreshes: counter(
            "strait_upstream_metadata_refreshes_total",
            "Metadata loads from the cluster, ok or error.",
            &["cluster", "outcome"],
        ),
        loaded: Mutex::new(BTreeMap::new()),
        age_desc: Desc::new(
            "strait_upstream_metadata_age_seconds".to_owned(),
            "Seconds since the cluster's metadata last loaded.".to_owned(),
            vec!["cluster".to_owned()],
            Default::default(),
        )
        .expect("valid metric"),
    }
});

/// Adds the upstream metrics to `registry` (once per registry).
pub fn register(registry: &Registry) -> prometheus::Result<()> {
    let f = &*FAMILIES;
    registry.register(Box::new(f.up.clone()))?;
    registry.register(Box::new(f.connections.clone()))?;
    registry.register(Box::new(f.requests.clone()))?;
    registry.register(Box::new(f.duration.clone()))?;
    registry.register(Box::new(f.bytes.clone()))?;
    registry.register(Box::new(f.refreshes.clone()))?;
    registry.register(Box::new(MetadataAge))
}

/// `strait_upstream_metadata_age_seconds`, computed when scraped.
struct MetadataAge;

impl Collector for MetadataAge {
    fn desc(&self) -> Vec<&Desc> {
        vec![&FAMILIES.age_desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let f = &*FAMILIES;
        let gauge = GaugeVec::new(
            Opts::new(f.age_desc.fq_name.clone(), f.age_desc.help.clone()),
            &["cluster"],
        )
        .expect("valid metric");
        for (cluster, at) in f.loaded.lock().expect("loaded lock").iter() {
            gauge
                .with_label_values(&[cluster])
                .set(at.elapsed().as_secs_f64());
        }
        gauge.collect()
    }
}

/// One cluster's handles on the metrics.
#[derive(Debug, Clone)]
pub(crate) struct ClusterMetrics {
    cluster: Arc<str>,
    sent: IntCounter,
    received: IntCounter,
    connections: IntGauge,
}

impl ClusterMetrics {
    pub(crate) fn new(cluster: &str) -> Arc<ClusterMetrics> {
        let f = &*FAMILIES;
        Arc::new(ClusterMetrics {
            cluster: cluster.into(),
            sent: f.bytes.with_label_values(&[cluster, "sent"]),
            received: f.bytes.with_label_values(&[cluster, "received"]),
            connections: f.connections.with_label_values(&[cluster]),
        })
    }

    pub(crate) fn sent(&self, bytes: usize) {
        self.sent.inc_by(bytes as u64);
    }

    /// A request's outcome: its answer's size and how long it took, or
    /// `None` when it was not answered.
    pub(crate) fn answered(&self, api: ApiKey, took: Duration, answer_bytes: Option<usize>) {
        let f = &*FAMILIES;
        let api_name = api_name(api);
        let outcome = match answer_bytes {
            Some(bytes) => {
                self.received.inc_by(bytes as u64);
                f.duration
                    .with_label_values(&[&self.cluster, api_name])
                    .observe(took.as_secs_f64());
                "ok"
            }
            None => "error",
        };
        f.requests
            .with_label_values(&[&self.cluster, api_name, outcome])
            .inc();
    }

    pub(crate) fn opened(&self) {
        self.connections.inc();
    }

    pub(crate) fn closed(&self) {
        self.connections.dec();
    }

    /// A metadata load's outcome.
    pub(crate) fn metadata_loaded(&self, ok: bool) {
        let f = &*FAMILIES;
        let outcome = if ok { "ok" } else { "error" };
        f.refreshes.with_label_values(&[&self.cluster, outcome]).inc();
        f.up.with_label_values(&[&self.cluster]).set(i64::from(ok));
        if ok {
            f.loaded
                .lock()
                .expect("loaded lock")
                .insert(self.cluster.to_string(), Instant::now());
        }
    }
}

/// The API's name as Kafka's documentation spells it (`Produce`,
/// `OffsetCommit`): the `api` label of every Strait metric.
pub fn api_name(api: ApiKey) -> &'static str {
    // kafka-protocol's Debug of ApiKey is the variant name, which is
    // Kafka's name; a table keeps it allocation-free.
    macro_rules! names {
        ($($v:ident),* $(,)?) => {
            match api {
                $(ApiKey::$v => stringify!($v),)*
                _ => "Other",
            }
        };
    }
    names!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        OffsetCommit,
        OffsetFetch,
        FindCoordinator,
        JoinGroup,
        Heartbeat,
        LeaveGroup,
        SyncGroup,
        DescribeGroups,
        ListGroups,
        SaslHandshake,
        ApiVersions,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        InitProducerId,
        OffsetForLeaderEpoch,
        AddPartitionsToTxn,
        AddOffsetsToTxn,
        EndTxn,
        TxnOffsetCommit,
        DescribeAcls,
        DescribeConfigs,
        AlterConfigs,
        DescribeLogDirs,
        SaslAuthenticate,
        CreatePartitions,
        DeleteGroups,
        IncrementalAlterConfigs,
        OffsetDelete,
        DescribeCluster,
        DescribeProducers,
        DescribeTransactions,
        ListTransactions,
        ConsumerGroupHeartbeat,
        ConsumerGroupDescribe,
    )
}
