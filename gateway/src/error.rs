//! The gateway's errors, and the one place where internal errors become
//! Kafka error codes ([`kafka_code`]).
//!
//! As in the other crates, a message is complete on its own: an error that
//! wraps another writes it into its message and does not also expose it as
//! a `source`, so a chain printed in full names each cause once.

use kafka_protocol::ResponseError;
use strait_spool::SpoolError;

/// A connection-level problem with the bytes a client sent. Each closes that
/// one connection; the message says why, for the log line naming the client.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The frame's length prefix is negative.
    #[error("frame length {0} is negative")]
    NegativeSize(i32),
    /// The frame is larger than `server.max_frame_bytes`.
    #[error("frame of {size} bytes exceeds max_frame_bytes {max}")]
    TooLarge {
        /// Declared size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The connection ended inside a frame.
    #[error("connection closed in the middle of a frame")]
    Truncated,
    /// The socket failed.
    #[error("socket error: {0}")]
    Io(std::io::Error),
}

/// A request the gateway cannot decode.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than a request header.
    #[error("request of {0} bytes is shorter than a request header")]
    TooShort(usize),
    /// An API key Kafka does not define.
    #[error("unknown API key {api_key}")]
    UnknownApiKey {
        /// The key.
        api_key: i16,
        /// For the log line.
        correlation_id: i32,
    },
    /// A version this codec cannot parse at all.
    #[error("{api:?} version {version} is outside the versions Kafka defines")]
    UnknownVersion {
        /// The API.
        api: kafka_protocol::messages::ApiKey,
        /// The version asked for.
        version: i16,
        /// For the log line.
        correlation_id: i32,
    },
    /// The bytes do not parse as that request.
    #[error("malformed {api:?} v{version} request: {reason}")]
    Malformed {
        /// The API.
        api: kafka_protocol::messages::ApiKey,
        /// The version.
        version: i16,
        /// What the decoder said.
        reason: String,
    },
}

/// Errors of the topic registry.
#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    /// The topic exists already.
    #[error("topic {0} already exists")]
    Exists(String),
    /// No such topic.
    #[error("topic {0} does not exist")]
    Unknown(String),
    /// The name breaks Kafka's rules.
    #[error("invalid topic name {name:?}: {why}")]
    InvalidName {
        /// The name.
        name: String,
        /// Which rule.
        why: &'static str,
    },
    /// A partition count that cannot be.
    #[error("invalid partition count: {0}")]
    InvalidPartitions(String),
    /// Replication other than 1 on a one-node cluster.
    #[error("replication factor {0} is impossible: Strait is a one-node cluster for local topics")]
    InvalidReplication(i16),
    /// A topic config that is unknown or has a bad value.
    #[error("invalid config {key}: {why}")]
    InvalidConfig {
        /// The config key.
        key: String,
        /// What is wrong.
        why: String,
    },
    /// The spool failed.
    #[error(transparent)]
    Storage(#[from] SpoolError),
    /// Writing topic metadata failed.
    #[error("writing {path}: {error}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
}

/// Any internal error the gateway turns into a Kafka error code.
#[derive(Debug)]
pub enum Failure<'a> {
    /// From the spool.
    Spool(&'a SpoolError),
    /// From the topic registry.
    Topic(&'a TopicError),
    /// Writing the consumer-offsets log (OffsetCommit, DeleteGroups).
    OffsetLog(&'a SpoolError),
    /// Forwarding to an upstream cluster.
    Upstream(&'a strait_upstream::UpstreamError),
    /// Forwarding a delegated group's request to its upstream coordinator,
    /// or committed offsets to the cluster their topic lives on.
    Coordinator(&'a strait_upstream::UpstreamError),
    /// Forwarding a partition's part of a request (Produce, Fetch,
    /// ListOffsets, ...) to its upstream leader.
    Partition(&'a strait_upstream::UpstreamError),
    /// Obtaining a cluster's producer id for a client's idempotent batch.
    ProducerId(&'a strait_upstream::UpstreamError),
    /// `acls:` do not let the client's principal act on a resource of this
    /// kind ([`crate::auth::authorize`]).
    Denied(strait_config::ResourceType),
}

/// The Kafka error code for an internal error: the only place where the
/// gateway decides which code a client sees, so that retriable storage
/// trouble is retriable for the client too.
pub fn kafka_code(failure: Failure<'_>) -> ResponseError {
    match failure {
        Failure::Denied(kind) => {
            use strait_config::ResourceType as R;
            match kind {
                R::Topic => ResponseError::TopicAuthorizationFailed,
                R::Group => ResponseError::GroupAuthorizationFailed,
                R::Cluster => ResponseError::ClusterAuthorizationFailed,
                R::TransactionalId => ResponseError::TransactionalIdAuthorizationFailed,
            }
        }
        Failure::Spool(e) => match e {
            SpoolError::InvalidBatch { .. } | SpoolError::EmptyAppend => ResponseError::CorruptMessage,
            SpoolError::BatchTooLarge { .. } => ResponseError::MessageTooLarge,
            SpoolError::OffsetSpan { .. } => ResponseError::RecordListTooLarge,
            SpoolError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
            SpoolError::InvalidConfig(_) => ResponseError::InvalidConfig,
            SpoolError::DiskFull { .. }
            | SpoolError::Io { .. }
            | SpoolError::Failed { .. }
            | SpoolError::Corrupt { .. } => ResponseError::KafkaStorageError,
            // Shutting down: the client retries, reconnects and finds the
            // broker again.
            SpoolError::Closed => ResponseError::NotLeaderOrFollower,
        },
        Failure::Topic(e) => match e {
            TopicError::Exists(_) => ResponseError::TopicAlreadyExists,
            TopicError::Unknown(_) => ResponseError::UnknownTopicOrPartition,
            TopicError::InvalidName { .. } => ResponseError::InvalidTopicException,
            TopicError::InvalidPartitions(_) => ResponseError::InvalidPartitions,
            TopicError::InvalidReplication(_) => ResponseError::InvalidReplicationFactor,
            TopicError::InvalidConfig { .. } => ResponseError::InvalidConfig,
            TopicError::Storage(e) => kafka_code(Failure::Spool(e)),
            TopicError::Io { .. } => ResponseError::KafkaStorageError,
        },
        // As Kafka's group coordinator answers when it cannot write its
        // offsets topic. Retriable: a full disk heals once space is freed.
        Failure::OffsetLog(e) => match e {
            SpoolError::BatchTooLarge { .. } | SpoolError::OffsetSpan { .. } => {
                ResponseError::InvalidCommitOffsetSize
            }
            _ => ResponseError::CoordinatorNotAvailable,
        },
        // The upstream's own answer passes through; trouble reaching it is
        // retriable for the client as it is for Strait.
        Failure::Upstream(e) => {
            use strait_upstream::UpstreamError as U;
            match e {
                U::Kafka { code, .. } => *code,
                U::Deadline { last, .. } => kafka_code(Failure::Upstream(last)),
                U::Connect { .. } | U::Security { .. } | U::Disconnected { .. } | U::NoBroker { .. } => {
                    ResponseError::NetworkException
                }
                U::TimedOut { .. } => ResponseError::RequestTimedOut,
                U::Unsupported { .. } => ResponseError::UnsupportedVersion,
                U::Malformed { .. } | U::Encode { .. } | U::Settings { .. } => {
                    ResponseError::UnknownServerError
                }
            }
        }
        // Clients see Strait as every partition's leader: a leader Strait
        // cannot reach is one the client should look up again and retry
        // (every client refreshes its metadata on NOT_LEADER_OR_FOLLOWER,
        // and librdkafka fails a produce on NETWORK_EXCEPTION for good).
        // So is a leader whose broker the cluster's metadata no longer
        // lists (it was just killed): Kafka's BROKER_NOT_AVAILABLE is not
        // retriable, and the Java producer drops the batch on it.
        Failure::Partition(e) => match e.code() {
            Some(ResponseError::BrokerNotAvailable) => ResponseError::NotLeaderOrFollower,
            Some(code) => code,
            None if e.is_retriable() => ResponseError::NotLeaderOrFollower,
            None => kafka_code(Failure::Upstream(e)),
        },
        // The client asked nothing of the upstream's producer ids: trouble
        // that may pass (a coordinator loading, as on a Kafka that just
        // started; a broker unreachable) is a leader to retry, which every
        // client does with the batch's sequence unchanged (some, Sarama
        // among them, fail a Produce on COORDINATOR_LOAD_IN_PROGRESS).
        Failure::ProducerId(e) => {
            let last = match e {
                strait_upstream::UpstreamError::Deadline { last, .. } => last,
                e => e,
            };
            if last.is_retriable() {
                ResponseError::NotLeaderOrFollower
            } else {
                kafka_code(Failure::Upstream(e))
            }
        }
        // Trouble reaching a group's coordinator sends the client looking
        // for it again (to Strait), and Strait to the upstream's.
        Failure::Coordinator(e) => match e.code() {
            Some(code) => code,
            None if e.is_retriable() => ResponseError::CoordinatorNotAvailable,
            None => kafka_code(Failure::Upstream(e)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strait_batch::BatchError;

    #[test]
    fn codes_keep_retriability() {
        let bad = SpoolError::InvalidBatch {
            position: 0,
            error: BatchError::Magic(1),
        };
        let full = SpoolError::DiskFull { path: "/x".into() };
        let range = SpoolError::OffsetOutOfRange {
            offset: 9,
            log_start: 0,
            high_watermark: 3,
        };
        let exists = TopicError::Exists("t".into());
        let wrapped = TopicError::Storage(SpoolError::Closed);
        let check = |f: Failure<'_>, code: ResponseError, retriable: bool| {
            let got = kafka_code(f);
            assert_eq!(got, code);
            assert_eq!(got.is_retriable(), retriable, "{code:?}");
        };
        check(Failure::Spool(&bad), ResponseError::CorruptMessage, true);
        check(Failure::Spool(&full), ResponseError::KafkaStorageError, true);
        check(Failure::Spool(&range), ResponseError::OffsetOutOfRange, false);
        check(Failure::Topic(&exists), ResponseError::TopicAlreadyExists, false);
        check(Failure::Topic(&wrapped), ResponseError::NotLeaderOrFollower, true);
        check(
            Failure::OffsetLog(&full),
            ResponseError::CoordinatorNotAvailable,
            true,
        );
        let big = SpoolError::BatchTooLarge { size: 9, max: 1 };
        check(
            Failure::OffsetLog(&big),
            ResponseError::InvalidCommitOffsetSize,
            false,
        );
        let loading = strait_upstream::UpstreamError::Deadline {
            what: "InitProducerId".into(),
            after: std::time::Duration::from_secs(10),
            last: Box::new(strait_upstream::UpstreamError::Kafka {
                cluster: "dc1".into(),
                what: "InitProducerId".into(),
                code: ResponseError::CoordinatorLoadInProgress,
            }),
        };
        check(
            Failure::ProducerId(&loading),
            ResponseError::NotLeaderOrFollower,
            true,
        );
        let refused = strait_upstream::UpstreamError::Kafka {
            cluster: "dc1".into(),
            what: "InitProducerId".into(),
            code: ResponseError::ClusterAuthorizationFailed,
        };
        check(
            Failure::ProducerId(&refused),
            ResponseError::ClusterAuthorizationFailed,
            false,
        );
        let gone = strait_upstream::UpstreamError::Kafka {
            cluster: "dc1".into(),
            what: "Metadata for broker 2".into(),
            code: ResponseError::BrokerNotAvailable,
        };
        check(
            Failure::Partition(&gone),
            ResponseError::NotLeaderOrFollower,
            true,
        );
    }
}
