//! Target topics: created before their first record with the source's
//! partition count and the topic configs that matter, partitions added when
//! the source grows, and the target's `max.message.bytes` read for
//! splitting; and a source partition's size on disk.
//!
//! Copied configs are the source topic's own overrides (DescribeConfigs
//! source DYNAMIC_TOPIC_CONFIG), not broker defaults, so the target's
//! brokers keep their own defaults for everything else. Left out: settings
//! that belong to the target cluster's operation
//! ([`NOT_COPIED`]). A topic created with defaults first and configured
//! later could lose data (MirrorMaker's KAFKA-12254, a compacted topic
//! that started as `delete`), so the configs go into CreateTopics itself.

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, DescribeConfigsRequest, DescribeLogDirsRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use strait_upstream::log::Created;
use strait_upstream::{Cluster, UpstreamError};

/// Topic configs never copied to the target: replication and placement
/// belong to the target cluster, and `message.timestamp.type` would make a
/// LogAppendTime target overwrite the timestamps the mirror keeps.
pub const NOT_COPIED: &[&str] = &[
    "min.insync.replicas",
    "unclean.leader.election.enable",
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
    "message.timestamp.type",
    "message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "confluent.placement.constraints",
];

/// Kafka's DescribeConfigs resource type of a topic.
const TOPIC_RESOURCE: i8 = 2;
/// DescribeConfigs config source of a topic-level override.
const DYNAMIC_TOPIC_CONFIG: i8 = 1;
/// `max.message.bytes` when the target does not say (Kafka's default).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1_048_588;

/// Configs of `topic` on `cluster`: every (name, value), and whether each
/// is a topic-level override.
pub async fn describe(
    cluster: &Cluster,
    topic: &str,
) -> Result<Vec<(String, Option<String>, bool)>, UpstreamError> {
    let connection = cluster.any_broker().await?;
    let request = DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
        .with_resource_type(TOPIC_RESOURCE)
        .with_resource_name(StrBytes::from_string(topic.to_owned()))
        .with_configuration_keys(None)]);
    let response = connection.request(&request).await?;
    let Some(result) = response.results.first() else {
        return Err(UpstreamError::Malformed {
            broker: connection.broker().to_owned(),
            api: ApiKey::DescribeConfigs,
            detail: format!("no result for topic {topic}"),
        });
    };
    strait_upstream::error::check(
        cluster.name(),
        || format!("DescribeConfigs {topic}"),
        result.error_code,
    )?;
    Ok(result
        .configs
        .iter()
        .map(|c| {
            (
                c.name.to_string(),
                c.value.as_ref().map(|v| v.to_string()),
                c.config_source == DYNAMIC_TOPIC_CONFIG,
            )
        })
        .collect())
}

/// The source topic's overrides worth copying.
pub async fn configs_to_copy(source: &Cluster, topic: &str) -> Result<Vec<(String, String)>, UpstreamError> {
    Ok(describe(source, topic)
        .await?
        .into_iter()
        .filter(|(name, _, overridden)| *overridden && !NOT_COPIED.contains(&name.as_str()))
        .filter_map(|(name, value, _)| Some((name, value?)))
        .collect())
}

/// What [`ensure`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ensured {
    /// The topic was created.
    Created,
    /// It existed with enough partitions.
    Existed,
    /// It existed; partitions were added up to the count asked for.
    Grown {
        /// Its count before.
        from: usize,
    },
}

/// Makes sure `topic` exists on `target` with at least `partitions`
/// partitions; a new topic gets `configs`. An existing topic keeps its
/// configs (they are the target operator's).
pub async fn ensure(
    target: &Cluster,
    topic: &str,
    partitions: usize,
    configs: &[(String, String)],
) -> Result<Ensured, UpstreamError> {
    let metadata = target.refresh().await?;
    let existing = metadata.partition_count(topic);
    match existing {
        Some(have) if have >= partitions => Ok(Ensured::Existed),
        Some(have) => {
            add_partitions(target, topic, partitions).await?;
            Ok(Ensured::Grown { from: have })
        }
        None => create(target, topic, partitions, configs).await,
    }
}

async fn create(
    target: &Cluster,
    topic: &str,
    partitions: usize,
    configs: &[(String, String)],
) -> Result<Ensured, UpstreamError> {
    // Existed: created meanwhile (another mirror process, or an operator).
    Ok(
        match strait_upstream::log::create_topic(target, topic, partitions, configs).await? {
            Created::Created => Ensured::Created,
            Created::Existed => Ensured::Existed,
        },
    )
}

async fn add_partitions(target: &Cluster, topic: &str, partitions: usize) -> Result<(), UpstreamError> {
    let connection = target.any_broker().await?;
    let request = CreatePartitionsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatePartitionsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_count(partitions as i32)
            .with_assignments(None)]);
    let response = connection.request(&request).await?;
    target.invalidate();
    let code = response.results.first().map_or(0, |r| r.error_code);
    match ResponseError::try_from_code(code) {
        // INVALID_PARTITIONS: someone else already grew it.
        None | Some(ResponseError::InvalidPartitions) => Ok(()),
        Some(code) => Err(UpstreamError::Kafka {
            cluster: target.name().to_owned(),
            what: format!("CreatePartitions {topic} to {partitions}"),
            code,
        }),
    }
}

/// The largest batch the target accepts for `topic` (its effective
/// `max.message.bytes`), or Kafka's default when the target does not say.
pub async fn max_message_bytes(target: &Cluster, topic: &str) -> Result<usize, UpstreamError> {
    let configs = describe(target, topic).await?;
    Ok(configs
        .iter()
        .find(|(name, ..)| name == "max.message.bytes")
        .and_then(|(_, value, _)| value.as_deref()?.parse::<usize>().ok())
        .filter(|v| *v > 0)
        .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES))
}

/// The size in bytes of `topic`'s `partition` on its leader's disk
/// (DescribeLogDirs at the leader; a copy being moved to another log
/// directory left out), or None when the leader holds none.
pub async fn log_size(cluster: &Cluster, topic: &str, partition: i32) -> Result<Option<i64>, UpstreamError> {
    let (_, connection) = cluster.leader(topic, partition).await?;
    let request = DescribeLogDirsRequest::default()
        .with_topics(Some(vec![DescribableLogDirTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partitions(vec![partition])]));
    let response = connection.request(&request).await?;
    let what = || format!("DescribeLogDirs {topic}-{partition}");
    strait_upstream::error::check(cluster.name(), what, response.error_code)?;
    Ok(response
        .results
        .iter()
        .filter(|dir| dir.error_code == 0)
        .flat_map(|dir| &dir.topics)
        .filter(|t| t.name.0.as_str() == topic)
        .flat_map(|t| &t.partitions)
        .find(|p| p.partition_index == partition && !p.is_future_key)
        .map(|p| p.partition_size))
}
