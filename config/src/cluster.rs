//! The `clusters:` section: the upstream Kafka clusters Strait talks to, by
//! name. Mirrors name them as their `source` and `target`.

use serde::{Deserialize, Serialize};

use crate::error::Invalid;
use crate::names::check_name;
use crate::security::{ClientSasl, ClientTls};
use crate::server::parse_host_port;
use crate::units::{ByteSize, HumanDuration};

/// The cluster name no entry of `clusters:` may take: it stands for
/// Strait's own spool topics.
pub const RESERVED_CLUSTER: &str = "local";

/// Default `client_id`: `strait`.
pub const DEFAULT_CLIENT_ID: &str = "strait";
/// Default `connect_timeout`: 10 seconds.
pub const DEFAULT_CONNECT_TIMEOUT: HumanDuration = HumanDuration::secs(10);
/// Default `request_timeout`: 30 seconds.
pub const DEFAULT_REQUEST_TIMEOUT: HumanDuration = HumanDuration::secs(30);
/// Default `metadata_refresh`: 5 minutes (Kafka's `metadata.max.age.ms`).
pub const DEFAULT_METADATA_REFRESH: HumanDuration = HumanDuration::minutes(5);
/// Default `max_bytes_in_flight` of a cluster's connections: 64MiB.
pub const DEFAULT_MAX_BYTES_IN_FLIGHT: ByteSize = ByteSize::mib(64);
/// Smallest accepted `max_bytes_in_flight`, for clusters and mirrors: 1MiB.
pub const MIN_MAX_BYTES_IN_FLIGHT: ByteSize = ByteSize::mib(1);

/// One entry of `clusters:`: an upstream Kafka cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// Brokers to ask for the cluster's metadata first, each `host:port`
    /// (a host name, an IPv4 address, or an IPv6 address in brackets).
    /// Required: at least one. The rest of the cluster is found from their
    /// metadata, as Kafka's `bootstrap.servers`.
    pub bootstrap: Vec<String>,
    /// The `client.id` sent with every request, which the cluster's logs
    /// and quotas see. Default `strait`; must not be empty or hold control
    /// characters.
    pub client_id: String,
    /// Longest wait for a connection to a broker to open. Default `10s`;
    /// must be positive.
    pub connect_timeout: HumanDuration,
    /// Longest wait for the answer to a request. Default `30s`, Kafka's
    /// `request.timeout.ms` default; must be positive.
    pub request_timeout: HumanDuration,
    /// The cluster's metadata (brokers, topics, partition leaders) is read
    /// again at least this often (Kafka's `metadata.max.age.ms`). Default
    /// `5m`; must be positive.
    pub metadata_refresh: HumanDuration,
    /// Most request bytes in flight on one broker connection. Default
    /// `64MiB`; at least `1MiB`.
    pub max_bytes_in_flight: ByteSize,
    /// Connect with TLS (`tls: {}` for the system's roots and no client
    /// certificate). Default: plaintext.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<ClientTls>,
    /// Authenticate with SASL. Default: no authentication.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl: Option<ClientSasl>,
}

impl Default for ClusterConfig {
    /// The defaults, with no `bootstrap` brokers (which a cluster must
    /// list).
    fn default() -> Self {
        ClusterConfig {
            bootstrap: Vec::new(),
            client_id: DEFAULT_CLIENT_ID.to_owned(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            metadata_refresh: DEFAULT_METADATA_REFRESH,
            max_bytes_in_flight: DEFAULT_MAX_BYTES_IN_FLIGHT,
            tls: None,
            sasl: None,
        }
    }
}

/// What to write instead of a bad `bootstrap` entry.
const BOOTSTRAP_ADVICE: &str = "write a broker's name or address and port, such as kafka-1.example.com:9092";

impl ClusterConfig {
    /// Checks the cluster `name` and its settings. `prefix` is the key path
    /// of this cluster (`clusters.nj`).
    pub(crate) fn validate(&self, name: &str, prefix: &str) -> Result<(), Invalid> {
        if name == RESERVED_CLUSTER {
            return Err(Invalid::new(
                prefix,
                format!(
                    "the cluster name `{RESERVED_CLUSTER}` is reserved for Strait's own spool \
                     topics; name the cluster after where it runs, such as `nj`"
                ),
            ));
        }
        check_name(name)
            .map_err(|why| Invalid::new(prefix, format!("invalid cluster name `{name}`: {why}")))?;
        if self.bootstrap.is_empty() {
            return Err(Invalid::new(
                format!("{prefix}.bootstrap"),
                "required: list at least one broker, such as [\"kafka-1.example.com:9092\"]",
            ));
        }
        for (i, broker) in self.bootstrap.iter().enumerate() {
            parse_host_port(broker, BOOTSTRAP_ADVICE)
                .map_err(|m| Invalid::new(format!("{prefix}.bootstrap[{i}]"), m))?;
        }
        if self.client_id.is_empty() {
            return Err(Invalid::new(format!("{prefix}.client_id"), "must not be empty"));
        }
        if self.client_id.chars().any(char::is_control) {
            return Err(Invalid::new(
                format!("{prefix}.client_id"),
                "must not contain control characters",
            ));
        }
        for (key, value) in [
            ("connect_timeout", self.connect_timeout),
            ("request_timeout", self.request_timeout),
            ("metadata_refresh", self.metadata_refresh),
        ] {
            if value.is_zero() {
                return Err(Invalid::new(format!("{prefix}.{key}"), "must be positive"));
            }
        }
        check_bytes_in_flight(self.max_bytes_in_flight, &format!("{prefix}.max_bytes_in_flight"))?;
        if let Some(tls) = &self.tls {
            tls.validate(&format!("{prefix}.tls"))?;
        }
        if let Some(sasl) = &self.sasl {
            sasl.validate(&format!("{prefix}.sasl"))?;
        }
        Ok(())
    }
}

/// Checks a `max_bytes_in_flight` (of a cluster or a mirror) at `path`.
pub(crate) fn check_bytes_in_flight(value: ByteSize, path: &str) -> Result<(), Invalid> {
    if value < MIN_MAX_BYTES_IN_FLIGHT {
        return Err(Invalid::new(
            path,
            format!("{value} is too small; at least {MIN_MAX_BYTES_IN_FLIGHT}"),
        ));
    }
    Ok(())
}
