//! The gateway's Prometheus metrics (the catalogue is in
//! `dashboards/README.md`).
//!
//! Counters and histograms of clients and requests are process-wide and
//! recorded as things happen ([`register`] adds them to a registry once).
//! The local topics, the disk and the groups are read from the broker when
//! scraped (`broker::BrokerCollector`), so a topic's or a group's series go
//! away with it.

use std::sync::LazyLock;
use std::time::Duration;

use kafka_protocol::messages::{ApiKey, ResponseKind};
use kafka_protocol::ResponseError;
use prometheus::{
    HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};
use strait_upstream::metrics::{api_name, LATENCY_BUCKETS};

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
    /// A failed login, a request before logging in, or a login that
    /// expired (KIP-368).
    Authentication,
    /// The TLS handshake failed or did not finish within
    /// `request_timeout`.
    Tls,
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
            CloseCause::Authentication => "authentication",
            CloseCause::Tls => "tls",
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
    principal_requests: IntCounterVec,
    logins: IntCounterVec,
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
            "Client connections closed, by cause: client, idle, timeout, protocol, io, slow_client, shutdown, authentication, tls.",
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
        principal_requests: counter(
            "strait_principal_requests_total",
            "Requests read, by listener and the principal that sent them (User:ANONYMOUS without a login); \
             principals beyond the first 1000 are counted as `other`.",
            &["listener", "principal"],
        ),
        logins: counter(
            "strait_logins_total",
            "SASL logins and re-authentications, by listener, mechanism and outcome (ok, failed).",
            &["listener", "mechanism", "outcome"],
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
    registry.register(Box::new(f.principal_requests.clone()))?;
    registry.register(Box::new(f.logins.clone()))?;
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

/// Most distinct principals with a label of their own in
/// `strait_principal_requests_total` (users come from a file and client
/// certificates from an authority: both bounded, but not by Strait).
const MAX_PRINCIPAL_LABELS: usize = 1000;

/// The label of `principal`: itself while fewer than
/// [`MAX_PRINCIPAL_LABELS`] have been seen, `other` after.
pub(crate) fn principal_label(principal: &str) -> String {
    static SEEN: LazyLock<std::sync::Mutex<std::collections::HashSet<String>>> =
        LazyLock::new(Default::default);
    let mut seen = SEEN.lock().expect("principal labels");
    if seen.contains(principal) || seen.len() < MAX_PRINCIPAL_LABELS && seen.insert(principal.to_owned()) {
        principal.to_owned()
    } else {
        "other".to_owned()
    }
}

/// A request read on `listener` from `principal` (a label from
/// [`principal_label`]).
pub(crate) fn principal_request(listener: &str, principal: &str) {
    FAMILIES
        .principal_requests
        .with_label_values(&[listener, principal])
        .inc();
}

/// A SASL login ended.
pub(crate) fn login(listener: &str, mechanism: &str, ok: bool) {
    FAMILIES
        .logins
        .with_label_values(&[listener, mechanism, if ok { "ok" } else { "failed" }])
        .inc();
}

/// A request frame of `bytes` read from a client.
pub(crate) fn bytes_received(bytes: usize) {
    FAMILIES.received.inc_by(bytes as u64);
}

/// A response frame of `bytes` written to a client.
pub(crate) fn bytes_sent(bytes: usize) {
    FAMILIES.sent.inc_by(bytes as u64);
}

/// A request's answer (`None`: none is sent) is ready after `took`.
pub(crate) fn answered(api: ApiKey, took: Duration, response: Option<&ResponseKind>) {
    let f = &*FAMILIES;
    let name = api_name(api);
    f.duration.with_label_values(&[name]).observe(took.as_secs_f64());
    let mut failed = false;
    if let Some(body) = response {
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
