//! A topic partition read and written as a log by Strait itself (its own
//! topics on a cluster: the mirror's offset map, the gateway's shared
//! producer map): create the topic, append a batch and learn its offset,
//! find a partition's ends, read from an offset.

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, FetchRequest, ListOffsetsRequest, ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::{Cluster, UpstreamError};

/// Whether [`create_topic`] made the topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// It is new.
    Created,
    /// It was there already (made by another process, or an operator).
    Existed,
}

/// Creates `topic` on `cluster` with `partitions` partitions, the
/// cluster's default replication and `configs` (set in CreateTopics
/// itself, so the topic never exists without them).
pub async fn create_topic(
    cluster: &Cluster,
    topic: &str,
    partitions: usize,
    configs: &[(String, String)],
) -> Result<Created, UpstreamError> {
    let connection = cluster.any_broker().await?;
    let version = connection.version(ApiKey::CreateTopics)?;
    // -1 (the broker's default replication) needs CreateTopics v4 (KIP-464).
    let replication = if version >= 4 { -1 } else { 1 };
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_num_partitions(partitions as i32)
            .with_replication_factor(replication)
            .with_configs(
                configs
                    .iter()
                    .map(|(name, value)| {
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string(name.clone()))
                            .with_value(Some(StrBytes::from_string(value.clone())))
                    })
                    .collect(),
            )]);
    let response = connection.request_at(&request, version).await?;
    cluster.invalidate();
    let code = response.topics.first().map_or(0, |t| t.error_code);
    match ResponseError::try_from_code(code) {
        None => Ok(Created::Created),
        Some(ResponseError::TopicAlreadyExists) => Ok(Created::Existed),
        Some(code) => Err(UpstreamError::Kafka {
            cluster: cluster.name().to_owned(),
            what: format!("CreateTopics {topic} ({partitions} partitions, configs {configs:?})"),
            code,
        }),
    }
}

/// Appends `batch` (one record batch) to `partition` of `topic`, written
/// to every in-sync replica (acks=all), and returns its base offset.
pub async fn append(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    batch: Bytes,
) -> Result<i64, UpstreamError> {
    let (_, connection) = cluster.leader(topic, partition).await?;
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(batch))])]);
    let response = connection.request(&request).await?;
    let what = || format!("Produce {topic}-{partition}");
    let Some(p) = response
        .responses
        .iter()
        .flat_map(|t| &t.partition_responses)
        .find(|p| p.index == partition)
    else {
        return Err(UpstreamError::Kafka {
            cluster: cluster.name().to_owned(),
            what: what(),
            code: ResponseError::UnknownTopicOrPartition,
        });
    };
    if ResponseError::try_from_code(p.error_code).is_some_and(|e| e.is_retriable()) {
        cluster.invalidate();
    }
    crate::error::check(cluster.name(), what, p.error_code)?;
    Ok(p.base_offset)
}

/// ListOffsets of one partition: `timestamp` -2 for the earliest, -1 for
/// the latest (the high watermark).
pub async fn list_offset(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    timestamp: i64,
) -> Result<i64, UpstreamError> {
    let (_, connection) = cluster.leader(topic, partition).await?;
    let request = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_isolation_level(0)
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_timestamp(timestamp)])]);
    let response = connection.request(&request).await?;
    let found = response
        .topics
        .iter()
        .flat_map(|t| &t.partitions)
        .find(|p| p.partition_index == partition);
    let what = || format!("ListOffsets {topic}-{partition}");
    let Some(p) = found else {
        return Err(UpstreamError::Kafka {
            cluster: cluster.name().to_owned(),
            what: what(),
            code: ResponseError::UnknownTopicOrPartition,
        });
    };
    crate::error::check(cluster.name(), what, p.error_code)?;
    Ok(p.offset.max(0))
}

/// What [`read`] got: the record batches and the partition's offsets.
#[derive(Debug, Default)]
pub struct Read {
    /// The record batches, as the broker sent them (the last may be cut
    /// short).
    pub records: Bytes,
    /// The partition's high watermark.
    pub high_watermark: i64,
    /// Its last stable offset.
    pub last_stable_offset: i64,
    /// Its log start offset.
    pub log_start_offset: i64,
}

/// Reads `partition` of `topic` from `offset`: up to `max_bytes`, waiting
/// up to `max_wait` for data (reads ask for at least 0 bytes, so Kafka
/// answers at once; Tansu waits, and answers a wait of 0 without any
/// partition, so do not pass 0).
pub async fn read(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    offset: i64,
    max_wait: std::time::Duration,
    max_bytes: i32,
) -> Result<Read, UpstreamError> {
    let (_, connection) = cluster.leader(topic, partition).await?;
    let request = FetchRequest::default()
        .with_max_wait_ms(max_wait.as_millis().min(i32::MAX as u128) as i32)
        .with_min_bytes(0)
        .with_max_bytes(max_bytes)
        .with_isolation_level(0)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(max_bytes)])]);
    let response = connection.request(&request).await?;
    let what = || format!("Fetch {topic}-{partition} at {offset}");
    crate::error::check(cluster.name(), what, response.error_code)?;
    let Some(p) = response
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .find(|p| p.partition_index == partition)
    else {
        return Ok(Read::default());
    };
    crate::error::check(cluster.name(), what, p.error_code)?;
    Ok(Read {
        records: p.records.clone().unwrap_or_else(Bytes::new),
        high_watermark: p.high_watermark,
        last_stable_offset: p.last_stable_offset,
        log_start_offset: p.log_start_offset,
    })
}
