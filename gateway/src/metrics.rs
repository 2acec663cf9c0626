//! The gateway's Prometheus metrics (the catalogue is in
//! `dashboards/README.md`).
//!
//! Counters and histograms of clients and requests are process-wide and
//! recorded as things happen ([`register`] adds them to a registry once).
//! The local topics, the disk and the groups are read from the broker when
//! scraped ([`BrokerCollector`]), so a topic's or a group's series go away
//! with it.

use std::sync::{Arc, LazyLock, Weak};
use std::time::Duration;

use kafka_protocol::messages::{ApiKey, ResponseKind};
use kafka_protocol::ResponseError;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};
use strait_upstream::metrics::{api_name, LATENCY_BUCKETS};

use crate::broker::{Broker, Reply};

/// Why a client connection closed: the `cause` label of
/// `strait_connections_closed_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseCause {
    /// The client closed it (or reset it).
    Client,
    /// Idle for `server.idle_timeout`.
    Idle,
    /// A request did not arrive whole within `server.request_timeout`.
    Timeout,
    /// A malformed, oversized or unknown request.
    Protocol,
    /// A socket error.
    Io,
    /// The client read none of a response for `idle_timeout`.
    SlowClient,
    /// Strait shut down.
    Shutdown,
}

impl CloseCause {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            CloseCause::Client => "client",
            CloseCause::Idle => "idle",
            CloseCause::Timeout => "timeout",
            CloseCause::Protocol => "protocol",
            CloseCause::Io => "io",
            CloseCause::SlowClient => "slow_client",
            CloseCause::Shutdown => "shutdown",
        }
    }
}

struct Families {
    active: IntGauge,
    accepted: IntCounter,
    closed: IntCounterVec,
    requests: IntCounterVec,
    errors: IntCounterVec,
    duration: HistogramVec,
    local_duration: HistogramVec,
    client_bytes: IntCounterVec,
    received: IntCounter,
    sent: IntCounter,
    build: IntGaugeVec,
}

static FAMILIES: LazyLock<Families> = LazyLock::new(|| {
    let counter = |name: &str, help: &str, labels: &[&str]| {
        IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
    };
    let histogram = |name: &str, help: &str| {
        HistogramVec::new(
            HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec()),
            &["api"],
        )
        .expect("valid metric")
    };
    let build = IntGaugeVec::new(
        Opts::new("strait_build_info", "Always 1; the version of Strait running."),
        &["version"],
    )
    .expect("valid metric");
    build.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
    let client_bytes = counter(
        "strait_client_bytes_total",
        "Bytes of client request frames received and response frames sent.",
        &["direction"],
    );
    Families {
        active: IntGauge::new("strait_connections_active", "Client connections open now.").expect("valid metric"),
        accepted: IntCounter::new("strait_connections_accepted_total", "Client connections accepted.")
            .expect("valid metric"),
        closed: counter(
            "strait_connections_closed_total",
            "Client connections closed, by cause: client, idle, timeout, protocol, io, slow_client, shutdown.",
            &["cause"],
        ),
        requests: counter(
            "strait_requests_total",
            "Requests answered, by API and outcome: ok, or error when the answer carries an error code.",
            &["api", "outcome"],
        ),
        errors: counter(
            "strait_request_errors_total",
            "Error codes in answers, one per partition, topic or group carrying one, by Kafka error name.",
            &["api", "error"],
        ),
        duration: histogram(
            "strait_request_duration_seconds",
            "From a request read whole until its answer is ready to write, upstream time included.",
        ),
        local_duration: histogram(
            "strait_local_request_duration_seconds",
            "The local broker's part of a request (local topics, Strait's group coordinator).",
        ),
        received: client_bytes.with_label_values(&["received"]),
        sent: client_bytes.with_label_values(&["sent"]),
        client_bytes,
        build,
    }
});

/// Adds the gateway's metrics (and the spool's fsync histogram and the
/// upstream clusters' metrics) to `registry`.
pub fn register(registry: &Registry) -> prometheus::Result<()> {
    let f = &*FAMILIES;
    registry.register(Box::new(f.active.clone()))?;
    registry.register(Box::new(f.accepted.clone()))?;
    registry.register(Box::new(f.closed.clone()))?;
    registry.register(Box::new(f.requests.clone()))?;
    registry.register(Box::new(f.errors.clone()))?;
    registry.register(Box::new(f.duration.clone()))?;
    registry.register(Box::new(f.local_duration.clone()))?;
    registry.register(Box::new(f.client_bytes.clone()))?;
    registry.register(Box::new(f.build.clone()))?;
    strait_spool::metrics::register(registry)?;
    strait_upstream::metrics::register(registry)
}

/// A client connection opened; [`connection_closed`] when it ends.
pub(crate) fn connection_opened() {
    FAMILIES.accepted.inc();
    FAMILIES.active.inc();
}

pub(crate) fn connection_closed(cause: CloseCause) {
    FAMILIES.active.dec();
    FAMILIES.closed.with_label_values(&[cause.as_str()]).inc();
}

/// A request frame of `bytes` read from a client.
pub(crate) fn bytes_received(bytes: usize) {
    FAMILIES.received.inc_by(bytes as u64);
}

/// A response frame of `bytes` written to a client.
pub(crate) fn bytes_sent(bytes: usize) {
    FAMILIES.sent.inc_by(bytes as u64);
}

/// A request's answer is ready after `took`.
pub(crate) fn answered(api: ApiKey, took: Duration, reply: &Reply) {
    let f = &*FAMILIES;
    let name = api_name(api);
    f.duration.with_label_values(&[name]).observe(took.as_secs_f64());
    let mut failed = false;
    if let Reply::Respond(body) = reply {
        error_codes(body, &mut |code| {
            if code != 0 {
                failed = true;
                f.errors.with_label_values(&[name, &error_name(code)]).inc();
            }
        });
    }
    let outcome = if failed { "error" } else { "ok" };
    f.requests.with_label_values(&[name, outcome]).inc();
}

/// The local broker answered its part of a request after `took`.
pub(crate) fn local_answered(api: ApiKey, took: Duration) {
    FAMILIES
        .local_duration
        .with_label_values(&[api_name(api)])
        .observe(took.as_secs_f64());
}

/// A Kafka error code as a label: `NOT_LEADER_OR_FOLLOWER` in snake case.
fn error_name(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        Some(error) => {
            let camel = format!("{error:?}");
            let mut snake = String::with_capacity(camel.len() + 8);
            for (i, c) in camel.chars().enumerate() {
                if c.is_ascii_uppercase() {
                    if i > 0 {
                        snake.push('_');
                    }
                    snake.push(c.to_ascii_lowercase());
                } else {
                    snake.push(c);
                }
            }
            snake
        }
        None => format!("code_{code}"),
    }
}

/// Calls `f` with every error code of an answer: the top-level one and
/// those of its topics, partitions and groups.
fn error_codes(body: &ResponseKind, f: &mut impl FnMut(i16)) {
    match body {
        ResponseKind::Produce(r) => r
            .responses
            .iter()
            .flat_map(|t| &t.partition_responses)
            .for_each(|p| f(p.error_code)),
        ResponseKind::Fetch(r) => {
            f(r.error_code);
            r.responses
                .iter()
                .flat_map(|t| &t.partitions)
                .for_each(|p| f(p.error_code));
        }
        ResponseKind::ListOffsets(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| f(p.error_code)),
        ResponseKind::Metadata(r) => {
            for t in &r.topics {
                f(t.error_code);
                t.partitions.iter().for_each(|p| f(p.error_code));
            }
        }
        ResponseKind::OffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| f(p.error_code)),
        ResponseKind::OffsetFetch(r) => {
            f(r.error_code);
            r.topics
                .iter()
                .flat_map(|t| &t.partitions)
                .for_each(|p| f(p.error_code));
            for g in &r.groups {
                f(g.error_code);
                g.topics
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .for_each(|p| f(p.error_code));
            }
        }
        ResponseKind::FindCoordinator(r) => {
            f(r.error_code);
            r.coordinators.iter().for_each(|c| f(c.error_code));
        }
        ResponseKind::JoinGroup(r) => f(r.error_code),
        ResponseKind::SyncGroup(r) => f(r.error_code),
        ResponseKind::Heartbeat(r) => f(r.error_code),
        ResponseKind::LeaveGroup(r) => {
            f(r.error_code);
            r.members.iter().for_each(|m| f(m.error_code));
        }
        ResponseKind::DescribeGroups(r) => r.groups.iter().for_each(|g| f(g.error_code)),
        ResponseKind::ListGroups(r) => f(r.error_code),
        ResponseKind::DeleteGroups(r) => r.results.iter().for_each(|g| f(g.error_code)),
        ResponseKind::InitProducerId(r) => f(r.error_code),
        ResponseKind::ApiVersions(r) => f(r.error_code),
        ResponseKind::CreateTopics(r) => r.topics.iter().for_each(|t| f(t.error_code)),
        ResponseKind::DeleteTopics(r) => r.responses.iter().for_each(|t| f(t.error_code)),
        ResponseKind::CreatePartitions(r) => r.results.iter().for_each(|t| f(t.error_code)),
        ResponseKind::DeleteRecords(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| f(p.error_code)),
        ResponseKind::OffsetForLeaderEpoch(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| f(p.error_code)),
        ResponseKind::DescribeConfigs(r) => r.results.iter().for_each(|c| f(c.error_code)),
        ResponseKind::DescribeCluster(r) => f(r.error_code),
        ResponseKind::EndTxn(r) => f(r.error_code),
        ResponseKind::AddOffsetsToTxn(r) => f(r.error_code),
        _ => {}
    }
}

/// Reads the local topics, the data directory's file system and the
/// consumer groups when scraped. Holds the broker weakly: a scrape never
/// keeps a stopping Strait from closing its partitions.
#[derive(Debug)]
pub struct BrokerCollector {
    broker: Weak<Broker>,
    topic_labels: bool,
    descs: Vec<Desc>,
}

struct BrokerFamilies {
    size: GaugeVec,
    segments: GaugeVec,
    partitions: GaugeVec,
    disk_free: GaugeVec,
    disk_size: GaugeVec,
    members: GaugeVec,
    rebalances: IntCounterVec,
}

impl BrokerFamilies {
    fn new(topic_labels: bool) -> BrokerFamilies {
        let topic: &[&str] = if topic_labels { &["topic"] } else { &[] };
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            GaugeVec::new(Opts::new(name, help), labels).expect("valid metric")
        };
        BrokerFamilies {
            size: gauge(
                "strait_spool_size_bytes",
                "Bytes of the local topic's segments on disk.",
                topic,
            ),
            segments: gauge(
                "strait_spool_segments",
                "Segment files of the local topic.",
                topic,
            ),
            partitions: gauge("strait_spool_partitions", "Partitions of the local topic.", topic),
            disk_free: gauge(
                "strait_spool_disk_free_bytes",
                "Bytes free for unprivileged users on the file system of data_dir.",
                &[],
            ),
            disk_size: gauge(
                "strait_spool_disk_size_bytes",
                "Size of the file system of data_dir.",
                &[],
            ),
            members: gauge(
                "strait_group_members",
                "Members of each consumer group Strait coordinates.",
                &["group"],
            ),
            rebalances: IntCounterVec::new(
                Opts::new(
                    "strait_group_rebalances_total",
                    "Rebalances completed (generations begun) by Strait's group coordinator.",
                ),
                &[],
            )
            .expect("valid metric"),
        }
    }

    fn collectors(&self) -> [&dyn Collector; 7] {
        [
            &self.size,
            &self.segments,
            &self.partitions,
            &self.disk_free,
            &self.disk_size,
            &self.members,
            &self.rebalances,
        ]
    }
}

impl BrokerCollector {
    /// A collector over `broker`'s topics and groups; with `topic_labels`
    /// false the per-topic series are summed into one.
    pub fn new(broker: &Arc<Broker>, topic_labels: bool) -> BrokerCollector {
        let descs = BrokerFamilies::new(topic_labels)
            .collectors()
            .iter()
            .flat_map(|c| c.desc().into_iter().cloned())
            .collect();
        BrokerCollector {
            broker: Arc::downgrade(broker),
            topic_labels,
            descs,
        }
    }
}

impl Collector for BrokerCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let Some(broker) = self.broker.upgrade() else {
            return Vec::new();
        };
        let f = BrokerFamilies::new(self.topic_labels);
        for topic in broker.topics().all() {
            let labels: Vec<&str> = if self.topic_labels {
                vec![topic.name.as_str()]
            } else {
                Vec::new()
            };
            let (mut bytes, mut segments) = (0u64, 0usize);
            for p in &topic.partitions {
                bytes += p.log.size_bytes();
                segments += p.log.segment_count();
            }
            f.size.with_label_values(&labels).add(bytes as f64);
            f.segments.with_label_values(&labels).add(segments as f64);
            f.partitions
                .with_label_values(&labels)
                .add(topic.partitions.len() as f64);
        }
        if let Ok(fs) = rustix::fs::statvfs(broker.topics().dir()) {
            let block = fs.f_frsize.max(1) as f64;
            f.disk_free
                .with_label_values::<&str>(&[])
                .set(fs.f_bavail as f64 * block);
            f.disk_size
                .with_label_values::<&str>(&[])
                .set(fs.f_blocks as f64 * block);
        }
        let groups = broker.groups().stats();
        for (group, members) in &groups.members {
            f.members.with_label_values(&[group]).set(*members as f64);
        }
        f.rebalances
            .with_label_values::<&str>(&[])
            .inc_by(groups.rebalances);
        drop(broker);
        f.collectors().iter().flat_map(|c| c.collect()).collect()
    }
}
