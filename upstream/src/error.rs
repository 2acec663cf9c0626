//! What can go wrong talking to an upstream cluster, and whether trying
//! again can help ([`UpstreamError::is_retriable`]).
//!
//! Every error is on the upstream side except [`UpstreamError::Encode`]
//! (a request Strait built that the chosen version cannot carry: a bug on
//! our side) and [`UpstreamError::Settings`] (a cluster's TLS or SASL
//! settings that cannot be used). Messages name the cluster and broker, so a log line says
//! which datacenter misbehaved. Errors are `Clone`: when a connection
//! breaks, every request in flight on it fails with the same error.

use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use kafka_protocol::ResponseError;

/// An error from the upstream client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    /// No TCP connection (or no ApiVersions answer) within the connect
    /// timeout, or the connection was refused.
    #[error("cannot connect to {broker}: {reason}")]
    Connect {
        /// `cluster broker at host:port`.
        broker: String,
        /// What failed.
        reason: String,
    },
    /// The connection opened but TLS or SASL failed: an untrusted or
    /// expired certificate, a listener that speaks something else,
    /// credentials the broker refused. Retried only after the broker's
    /// backoff, as a refused connection is, so a fixed certificate or a
    /// rotated secret is picked up without hammering the cluster.
    #[error("cannot authenticate with {broker}: {reason}")]
    Security {
        /// `cluster broker at host:port`.
        broker: String,
        /// What failed, and what usually causes it.
        reason: String,
    },
    /// A cluster's TLS or SASL settings cannot be used (a certificate file
    /// that does not parse, say). Found at start-up.
    #[error("clusters.{cluster}.{reason}")]
    Settings {
        /// The cluster's name.
        cluster: String,
        /// What is wrong, after the key path below the cluster
        /// (`tls.ca_file /etc/ca.pem: No such file or directory`).
        reason: String,
    },
    /// The connection broke; every request that was in flight on it fails
    /// with this error. The request may or may not have been carried out.
    #[error("connection to {broker} lost: {reason}")]
    Disconnected {
        /// `cluster broker at host:port`.
        broker: String,
        /// What happened.
        reason: String,
    },
    /// No answer within the request timeout. The connection is closed (its
    /// state is unknown), failing whatever else was in flight on it.
    #[error("{api:?} to {broker} timed out after {after:?}")]
    TimedOut {
        /// `cluster broker at host:port`.
        broker: String,
        /// The request.
        api: ApiKey,
        /// The timeout.
        after: Duration,
    },
    /// The broker does not speak any version of an API that Strait can use.
    #[error("{broker} does not support {api:?} in a version Strait speaks ({detail})")]
    Unsupported {
        /// `cluster broker at host:port`.
        broker: String,
        /// The API.
        api: ApiKey,
        /// The ranges on both sides.
        detail: String,
    },
    /// The broker sent bytes that do not decode as the expected answer.
    #[error("{broker} sent a malformed {api:?} answer: {detail}")]
    Malformed {
        /// `cluster broker at host:port`.
        broker: String,
        /// The API.
        api: ApiKey,
        /// What the decoder said.
        detail: String,
    },
    /// A request Strait built does not encode at the negotiated version (a
    /// bug in Strait, not in the upstream).
    #[error("cannot encode {api:?} v{version}: {detail}")]
    Encode {
        /// The API.
        api: ApiKey,
        /// The version.
        version: i16,
        /// What the encoder said.
        detail: String,
    },
    /// The upstream answered with a Kafka error code.
    #[error("{cluster} answered {what} with {code:?}")]
    Kafka {
        /// The cluster's name.
        cluster: String,
        /// What was asked (`Metadata`, `Produce orders-3`).
        what: String,
        /// The error.
        code: ResponseError,
    },
    /// No broker of the cluster could be reached to load metadata.
    #[error("no broker of cluster {cluster} reachable: {reason}")]
    NoBroker {
        /// The cluster's name.
        cluster: String,
        /// The last broker's error.
        reason: String,
    },
    /// Retries ran out of time.
    #[error("{what} gave up after {after:?}: {last}")]
    Deadline {
        /// What was being tried.
        what: String,
        /// How long it was tried.
        after: Duration,
        /// The last error.
        last: Box<UpstreamError>,
    },
}

impl UpstreamError {
    /// Whether the same request may succeed later (after a metadata refresh,
    /// a reconnect or a backoff). Kafka error codes follow Kafka's own
    /// retriable flag.
    pub fn is_retriable(&self) -> bool {
        match self {
            UpstreamError::Connect { .. }
            | UpstreamError::Security { .. }
            | UpstreamError::Disconnected { .. }
            | UpstreamError::TimedOut { .. }
            | UpstreamError::NoBroker { .. } => true,
            UpstreamError::Kafka { code, .. } => code.is_retriable(),
            UpstreamError::Unsupported { .. }
            | UpstreamError::Malformed { .. }
            | UpstreamError::Encode { .. }
            | UpstreamError::Settings { .. }
            | UpstreamError::Deadline { .. } => false,
        }
    }

    /// Whether the cluster's metadata should be re-read before a retry:
    /// leadership moved, a topic or partition is not (yet) known, or a
    /// broker went away.
    pub fn wants_metadata_refresh(&self) -> bool {
        match self {
            UpstreamError::Connect { .. }
            | UpstreamError::Security { .. }
            | UpstreamError::Disconnected { .. }
            | UpstreamError::TimedOut { .. } => true,
            UpstreamError::Kafka { code, .. } => matches!(
                code,
                ResponseError::NotLeaderOrFollower
                    | ResponseError::UnknownTopicOrPartition
                    | ResponseError::LeaderNotAvailable
                    | ResponseError::FencedLeaderEpoch
                    | ResponseError::UnknownLeaderEpoch
                    | ResponseError::NotCoordinator
                    | ResponseError::CoordinatorNotAvailable
                    | ResponseError::BrokerNotAvailable
                    | ResponseError::ReplicaNotAvailable
                    | ResponseError::KafkaStorageError
                    | ResponseError::NotController
            ),
            _ => false,
        }
    }

    /// The Kafka error code this error carries, if it is one.
    pub fn code(&self) -> Option<ResponseError> {
        match self {
            UpstreamError::Kafka { code, .. } => Some(*code),
            UpstreamError::Deadline { last, .. } => last.code(),
            _ => None,
        }
    }
}

/// Turns a response's error code into a result.
pub fn check(cluster: &str, what: impl FnOnce() -> String, code: i16) -> Result<(), UpstreamError> {
    match ResponseError::try_from_code(code) {
        None => Ok(()),
        Some(code) => Err(UpstreamError::Kafka {
            cluster: cluster.to_owned(),
            what: what(),
            code,
        }),
    }
}

/// Shorthand for this crate's results.
pub type Result<T, E = UpstreamError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retriable_and_refresh_follow_the_cause() {
        let kafka = |code| UpstreamError::Kafka {
            cluster: "nj".into(),
            what: "Produce orders-1".into(),
            code,
        };
        assert!(kafka(ResponseError::NotLeaderOrFollower).is_retriable());
        assert!(kafka(ResponseError::NotLeaderOrFollower).wants_metadata_refresh());
        assert!(!kafka(ResponseError::TopicAuthorizationFailed).is_retriable());
        assert!(!kafka(ResponseError::MessageTooLarge).wants_metadata_refresh());
        let lost = UpstreamError::Disconnected {
            broker: "nj broker 1 at a:9092".into(),
            reason: "reset".into(),
        };
        assert!(lost.is_retriable() && lost.wants_metadata_refresh());
        let deadline = UpstreamError::Deadline {
            what: "Produce".into(),
            after: Duration::from_secs(1),
            last: Box::new(kafka(ResponseError::NotLeaderOrFollower)),
        };
        assert!(!deadline.is_retriable());
        assert_eq!(deadline.code(), Some(ResponseError::NotLeaderOrFollower));
        assert_eq!(
            kafka(ResponseError::NotLeaderOrFollower).to_string(),
            "nj answered Produce orders-1 with NotLeaderOrFollower"
        );
        assert!(check("nj", || unreachable!(), 0).is_ok());
        assert_eq!(
            check("nj", || "Metadata".into(), 3).unwrap_err().code(),
            Some(ResponseError::UnknownTopicOrPartition)
        );
    }
}
