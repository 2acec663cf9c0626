//! The `server:` section (the client-facing listener and its limits) and the
//! `broker:` section (how Strait behaves as a Kafka broker for local topics:
//! topic auto-creation, consumer group timeouts).

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use std::path::PathBuf;

use crate::error::Invalid;
use crate::security::{ServerSasl, ServerTls};
use crate::units::{ByteSize, HumanDuration};

/// Default listen address: `127.0.0.1:9092`, Kafka's port on loopback.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9092";

/// The `server:` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address and port to accept Kafka clients on. Default
    /// `127.0.0.1:9092`; use `0.0.0.0:9092` to accept from other hosts.
    pub listen: String,
    /// `host:port` that clients are told to connect to (in Metadata and
    /// FindCoordinator answers). Default: the listen address; set it when
    /// clients reach Strait through another name (a load balancer, a
    /// container port mapping, or a listen address of `0.0.0.0`).
    pub advertised: Option<String>,
    /// Most client connections open at once (Kafka's `max.connections`):
    /// at the limit Strait stops accepting and logs it once, and further
    /// connections wait in the kernel's accept queue until one closes.
    /// Default `10000`.
    #[serde(deserialize_with = "crate::units::deserialize_count")]
    pub max_connections: u32,
    /// Largest request frame accepted (Kafka's `socket.request.max.bytes`).
    /// A larger frame closes that connection. Default `100MiB`; at least
    /// `64KiB`, at most `1GiB`.
    pub max_frame_bytes: ByteSize,
    /// Close connections that sent nothing for this long (Kafka's
    /// `connections.max.idle.ms`). Default `10m`.
    pub idle_timeout: HumanDuration,
    /// Once the first byte of a request has arrived, the whole request must
    /// arrive within this time, or the connection is closed (a stalled or
    /// trickling client holds no buffer for longer). Default `30s`, Kafka's
    /// `request.timeout.ms` default on the client side.
    pub request_timeout: HumanDuration,
    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish
    /// before connections are closed. Default `10s`.
    pub shutdown_grace: HumanDuration,
    /// TLS on the `listen` address. Default: none (plaintext).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<ServerTls>,
    /// SASL login on the `listen` address. Default: none (every client is
    /// `User:ANONYMOUS`, or its certificate's name with mTLS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl: Option<ServerSasl>,
    /// More listeners beside `listen`, each with its own address, advertised
    /// address, TLS and SASL (Kafka's `listeners`): for example plaintext on
    /// loopback for local tools and TLS with SCRAM for everyone else.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<ListenerConfig>,
    /// The file of users who log in with SASL: their SCRAM credentials,
    /// salted and hashed as Kafka stores them (`strait users` writes it).
    /// Read again when it changes. Required when a listener has `sasl:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub users_file: Option<PathBuf>,
    /// How long a failed login waits before its answer and the closing of
    /// its connection (Kafka's `connection.failed.authentication.delay.ms`),
    /// which slows password guessing. Default `100ms`, Kafka's default;
    /// at most `request_timeout`.
    pub failed_authentication_delay: HumanDuration,
}

/// One of `server.listeners`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// The listener's name, in logs and metrics (`secure`). `main` is the
    /// name of `server.listen`.
    pub name: String,
    /// Address and port to accept clients on (`0.0.0.0:9093`).
    pub listen: String,
    /// `host:port` clients of this listener are told to connect to.
    /// Default: the listen address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advertised: Option<String>,
    /// TLS, as `server.tls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ServerTls>,
    /// SASL, as `server.sasl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl: Option<ServerSasl>,
}

impl ListenerConfig {
    /// The listen address, parsed (valid after [`ServerConfig::validate`]).
    pub fn listen_addr(&self) -> Result<SocketAddr, String> {
        let example = if self.name == MAIN_LISTENER { 9092 } else { 9093 };
        parse_listen(&self.listen, example)
    }

    /// The advertised `(host, port)`: `advertised` if set, else the listen
    /// address.
    pub fn advertised_host_port(&self) -> Result<(String, u16), String> {
        match &self.advertised {
            Some(advertised) => parse_host_port(advertised, ADVERTISED_ADVICE),
            None => {
                let addr = self.listen_addr()?;
                Ok((addr.ip().to_string(), addr.port()))
            }
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: DEFAULT_LISTEN.to_owned(),
            advertised: None,
            max_connections: 10_000,
            max_frame_bytes: ByteSize::mib(100),
            idle_timeout: HumanDuration::minutes(10),
            request_timeout: HumanDuration::secs(30),
            shutdown_grace: HumanDuration::secs(10),
            tls: None,
            sasl: None,
            listeners: Vec::new(),
            users_file: None,
            failed_authentication_delay: HumanDuration::millis(100),
        }
    }
}

/// The name of the listener on `server.listen`.
pub const MAIN_LISTENER: &str = "main";

impl ServerConfig {
    /// The listen address, parsed (valid after [`ServerConfig::validate`]).
    pub fn listen_addr(&self) -> Result<SocketAddr, String> {
        parse_listen(&self.listen, 9092)
    }

    /// The advertised `(host, port)`: `advertised` if set, else the listen
    /// address.
    pub fn advertised_host_port(&self) -> Result<(String, u16), String> {
        self.main_listener().advertised_host_port()
    }

    /// `server.listen` with its advertised address, TLS and SASL, as a
    /// listener named [`MAIN_LISTENER`].
    pub fn main_listener(&self) -> ListenerConfig {
        ListenerConfig {
            name: MAIN_LISTENER.to_owned(),
            listen: self.listen.clone(),
            advertised: self.advertised.clone(),
            tls: self.tls.clone(),
            sasl: self.sasl.clone(),
        }
    }

    /// Every listener: the main one first, then `listeners` in order.
    pub fn all_listeners(&self) -> Vec<ListenerConfig> {
        let mut all = vec![self.main_listener()];
        all.extend(self.listeners.iter().cloned());
        all
    }

    pub(crate) fn validate(&self, prefix: &str) -> Result<(), Invalid> {
        let mut names = std::collections::BTreeSet::new();
        let mut addresses = std::collections::BTreeMap::new();
        for (i, listener) in self.all_listeners().iter().enumerate() {
            let at = if i == 0 {
                prefix.to_owned()
            } else {
                format!("{prefix}.listeners[{}]", i - 1)
            };
            let name_ok = !listener.name.is_empty()
                && listener
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
            if !name_ok {
                return Err(Invalid::new(
                    format!("{at}.name"),
                    format!(
                        "`{}` is not a name: use letters, digits, `_` and `-`",
                        listener.name
                    ),
                ));
            }
            if !names.insert(listener.name.clone()) {
                return Err(Invalid::new(
                    format!("{at}.name"),
                    format!(
                        "`{}` names two listeners (`main` is server.listen's)",
                        listener.name
                    ),
                ));
            }
            let addr = listener
                .listen_addr()
                .map_err(|m| Invalid::new(format!("{at}.listen"), m))?;
            if addr.port() != 0 {
                if let Some(other) = addresses.insert(addr, listener.name.clone()) {
                    return Err(Invalid::new(
                        format!("{at}.listen"),
                        format!("{addr} is also listener `{other}`'s address"),
                    ));
                }
            }
            if let Some(advertised) = &listener.advertised {
                parse_host_port(advertised, ADVERTISED_ADVICE)
                    .map_err(|m| Invalid::new(format!("{at}.advertised"), m))?;
            }
            if let Some(tls) = &listener.tls {
                tls.validate(&format!("{at}.tls"))?;
            }
            if let Some(sasl) = &listener.sasl {
                sasl.validate(&format!("{at}.sasl"))?;
                if self.users_file.is_none() {
                    return Err(Invalid::new(
                        format!("{prefix}.users_file"),
                        format!(
                            "required by {at}.sasl: the file of users who may log in \
                             (create it with `strait users add`)"
                        ),
                    ));
                }
            }
        }
        if self.users_file.as_ref().is_some_and(|f| f.as_os_str().is_empty()) {
            return Err(Invalid::new(format!("{prefix}.users_file"), "must not be empty"));
        }
        if self.max_connections == 0 {
            return Err(Invalid::new(
                format!("{prefix}.max_connections"),
                "must be at least 1",
            ));
        }
        let frame = self.max_frame_bytes.bytes();
        if !(ByteSize::kib(64).bytes()..=ByteSize::gib(1).bytes()).contains(&frame) {
            return Err(Invalid::new(
                format!("{prefix}.max_frame_bytes"),
                format!("{} is outside 64KiB..1GiB", self.max_frame_bytes),
            ));
        }
        if self.idle_timeout.is_zero() {
            return Err(Invalid::new(format!("{prefix}.idle_timeout"), "must be positive"));
        }
        if self.request_timeout.is_zero() {
            return Err(Invalid::new(
                format!("{prefix}.request_timeout"),
                "must be positive",
            ));
        }
        if self.failed_authentication_delay > self.request_timeout {
            return Err(Invalid::new(
                format!("{prefix}.failed_authentication_delay"),
                "must not exceed request_timeout",
            ));
        }
        Ok(())
    }
}

/// Parses a listen address: an IP address and a port, as a socket is bound
/// to (host names are not resolved). The message suggests addresses with
/// `example_port`.
pub(crate) fn parse_listen(value: &str, example_port: u16) -> Result<SocketAddr, String> {
    value.parse().map_err(|_| {
        format!(
            "`{value}` is not an IP address and port (host names are not resolved): write one \
             such as 127.0.0.1:{example_port}, or 0.0.0.0:{example_port} to accept from other hosts"
        )
    })
}

/// What to write instead of a bad `server.advertised`.
const ADVERTISED_ADVICE: &str =
    "write the name or address and port clients should connect to, such as kafka.example.com:9092";

/// Parses `host:port`: a host name, an IPv4 address or a bracketed IPv6
/// address (`[::1]:9092`, returned without brackets), and a port from 1 to
/// 65535. A host name has only ASCII letters, digits, `.`, `_` and `-`, so
/// that a list written as one value (`a:9092,b:9092`) is refused rather
/// than taken for a host named `a:9092,b`. `advice` ends the message: what
/// to write instead.
pub(crate) fn parse_host_port(value: &str, advice: &str) -> Result<(String, u16), String> {
    let bad = || format!("`{value}` is not host:port: {advice}");
    let (host, port) = value.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(ipv6) if ipv6.parse::<std::net::Ipv6Addr>().is_ok() => ipv6,
        Some(_) => return Err(bad()),
        None if host.contains(':') => {
            return Err(format!(
                "`{value}` is not host:port: write an IPv6 address in brackets, such as [::1]:9092"
            ))
        }
        None if host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) =>
        {
            host
        }
        None => return Err(bad()),
    };
    if host.is_empty() || port == 0 {
        return Err(bad());
    }
    Ok((host.to_owned(), port))
}

/// The `broker:` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BrokerConfig {
    /// Create a local topic the first time a client produces to it or asks
    /// for its metadata (Kafka's `auto.create.topics.enable`). Default
    /// `true`.
    pub auto_create_topics: bool,
    /// Partitions of an auto-created topic, and of a CreateTopics request
    /// that leaves the count to the broker (Kafka's `num.partitions`).
    /// Default `1`; at most `10000`.
    #[serde(deserialize_with = "crate::units::deserialize_count")]
    pub default_partitions: u32,
    /// Shortest session timeout a consumer group member may ask for.
    /// Default `6s` (Kafka's `group.min.session.timeout.ms`).
    pub group_min_session_timeout: HumanDuration,
    /// Longest session timeout a member may ask for. Default `30m`.
    pub group_max_session_timeout: HumanDuration,
    /// How long a new, empty group waits for more members before its first
    /// rebalance completes (Kafka's `group.initial.rebalance.delay.ms`).
    /// Default `3s`, Kafka's default.
    pub group_initial_rebalance_delay: HumanDuration,
    /// The committed offsets of a consumer group with no members are
    /// deleted once its newest commit is this old (Kafka's
    /// `offsets.retention.minutes`). Default `7d`; `null` keeps them
    /// forever.
    pub offsets_retention: Option<HumanDuration>,
    /// Most record bytes in one Fetch response, whatever the request asks
    /// for (Kafka's `fetch.max.bytes`). The first batch of the first
    /// partition with data is still sent whole when it is larger (KIP-74).
    /// Default `55MiB`, Kafka's default; `1KiB..1GiB`.
    pub fetch_max_bytes: ByteSize,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            auto_create_topics: true,
            default_partitions: 1,
            group_min_session_timeout: HumanDuration::secs(6),
            group_max_session_timeout: HumanDuration::minutes(30),
            group_initial_rebalance_delay: HumanDuration::secs(3),
            offsets_retention: Some(HumanDuration::days(7)),
            fetch_max_bytes: ByteSize::mib(55),
        }
    }
}

impl BrokerConfig {
    pub(crate) fn validate(&self, prefix: &str) -> Result<(), Invalid> {
        if !(1..=10_000).contains(&self.default_partitions) {
            return Err(Invalid::new(
                format!("{prefix}.default_partitions"),
                format!("{} is outside 1..10000", self.default_partitions),
            ));
        }
        if !(ByteSize::kib(1)..=ByteSize::gib(1)).contains(&self.fetch_max_bytes) {
            return Err(Invalid::new(
                format!("{prefix}.fetch_max_bytes"),
                format!("{} is outside 1KiB..1GiB", self.fetch_max_bytes),
            ));
        }
        if self.group_min_session_timeout.is_zero() {
            return Err(Invalid::new(
                format!("{prefix}.group_min_session_timeout"),
                "must be positive",
            ));
        }
        if self.offsets_retention.is_some_and(|r| r.is_zero()) {
            return Err(Invalid::new(
                format!("{prefix}.offsets_retention"),
                "must be positive (or null to keep offsets forever)",
            ));
        }
        if self.group_max_session_timeout < self.group_min_session_timeout {
            return Err(Invalid::new(
                format!("{prefix}.group_max_session_timeout"),
                format!(
                    "{} is below group_min_session_timeout {}",
                    self.group_max_session_timeout, self.group_min_session_timeout
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_advertise_the_listen_address() {
        let server = ServerConfig::default();
        server.validate("server").unwrap();
        assert_eq!(
            server.advertised_host_port().unwrap(),
            ("127.0.0.1".to_owned(), 9092)
        );
        BrokerConfig::default().validate("broker").unwrap();
    }

    #[test]
    fn bad_values_name_their_key() {
        let check = |server: ServerConfig, key: &str, words: &str| {
            let err = server.validate("server").unwrap_err();
            assert_eq!(err.path, key);
            assert!(err.message.contains(words), "{}", err.message);
        };
        check(
            ServerConfig {
                listen: "localhost".into(),
                ..ServerConfig::default()
            },
            "server.listen",
            "is not an IP address and port (host names are not resolved)",
        );
        check(
            ServerConfig {
                advertised: Some("kafka:0".into()),
                ..ServerConfig::default()
            },
            "server.advertised",
            "host:port",
        );
        check(
            ServerConfig {
                max_frame_bytes: ByteSize::kib(1),
                ..ServerConfig::default()
            },
            "server.max_frame_bytes",
            "64KiB",
        );
        let broker = BrokerConfig {
            default_partitions: 0,
            ..BrokerConfig::default()
        };
        assert_eq!(
            broker.validate("broker").unwrap_err().path,
            "broker.default_partitions"
        );
        let broker = BrokerConfig {
            offsets_retention: Some(HumanDuration::secs(0)),
            ..BrokerConfig::default()
        };
        assert_eq!(
            broker.validate("broker").unwrap_err().path,
            "broker.offsets_retention"
        );
        let broker = BrokerConfig {
            fetch_max_bytes: ByteSize::b(512),
            ..BrokerConfig::default()
        };
        assert_eq!(
            broker.validate("broker").unwrap_err().path,
            "broker.fetch_max_bytes"
        );
        let forever = BrokerConfig {
            offsets_retention: None,
            ..BrokerConfig::default()
        };
        forever.validate("broker").unwrap();
        let check = ServerConfig {
            request_timeout: HumanDuration::secs(0),
            ..ServerConfig::default()
        };
        assert_eq!(
            check.validate("server").unwrap_err().path,
            "server.request_timeout"
        );
    }

    #[test]
    fn advertised_names_and_ipv6() {
        let parse = |value| parse_host_port(value, ADVERTISED_ADVICE);
        assert_eq!(
            parse("kafka.example.com:9093").unwrap(),
            ("kafka.example.com".into(), 9093)
        );
        assert_eq!(parse("10.0.0.7:9092").unwrap(), ("10.0.0.7".into(), 9092));
        assert_eq!(parse("[::1]:9092").unwrap(), ("::1".into(), 9092));
        assert_eq!(
            parse("nohost").unwrap_err(),
            "`nohost` is not host:port: write the name or address and port clients should \
             connect to, such as kafka.example.com:9092"
        );
        for bad in [
            "kafka:0",
            "kafka:port",
            ":9092",
            "[kafka]:9092",
            "a b:9092",
            "a:9092,b:9092",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse("::1:9092")
            .unwrap_err()
            .contains("IPv6 address in brackets"));
    }
}
