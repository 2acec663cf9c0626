//! A cluster's metadata as the upstream client keeps it: brokers by node id,
//! and every topic's partitions with their leaders.

use std::collections::BTreeMap;

use kafka_protocol::messages::MetadataResponse;
use kafka_protocol::ResponseError;
use tokio::time::Instant;

use crate::error::{Result, UpstreamError};

/// One snapshot of a cluster's metadata. Replaced whole on every refresh,
/// so a reader never sees half of one answer and half of another.
#[derive(Debug, Clone)]
pub struct Metadata {
    /// The cluster id the brokers report.
    pub cluster_id: Option<String>,
    /// The controller's node id, if the brokers name one.
    pub controller: Option<i32>,
    /// `host:port` of every broker, by node id.
    pub brokers: BTreeMap<i32, String>,
    /// Every topic the cluster listed, by name.
    pub topics: BTreeMap<String, TopicMetadata>,
    /// When this answer arrived.
    pub fetched_at: Instant,
}

/// One topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    /// The topic's id on the cluster (Metadata v10+); 0 where the cluster
    /// gives none.
    pub id: u128,
    /// The topic-level error the cluster reported, if any.
    pub error: Option<ResponseError>,
    /// Kafka's internal topics (`__consumer_offsets`, ...).
    pub internal: bool,
    /// Partitions, sorted by id.
    pub partitions: Vec<PartitionMetadata>,
}

/// One partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionMetadata {
    /// The partition id.
    pub partition: i32,
    /// Node id of its leader; -1 while it has none.
    pub leader: i32,
    /// The leader's epoch (-1 when the broker does not say).
    pub leader_epoch: i32,
    /// The partition-level error, if any.
    pub error: Option<ResponseError>,
}

impl Metadata {
    /// Builds a snapshot from a Metadata answer.
    pub fn from_response(response: &MetadataResponse) -> Metadata {
        let brokers = response
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port)))
            .collect();
        let topics = response
            .topics
            .iter()
            .filter_map(|t| {
                let name = t.name.as_ref()?.0.to_string();
                let mut partitions: Vec<PartitionMetadata> = t
                    .partitions
                    .iter()
                    .map(|p| PartitionMetadata {
                        partition: p.partition_index,
                        leader: p.leader_id.0,
                        leader_epoch: p.leader_epoch,
                        error: ResponseError::try_from_code(p.error_code),
                    })
                    .collect();
                partitions.sort_by_key(|p| p.partition);
                let topic = TopicMetadata {
                    id: t.topic_id.as_u128(),
                    error: ResponseError::try_from_code(t.error_code),
                    internal: t.is_internal,
                    partitions,
                };
                Some((name, topic))
            })
            .collect();
        Metadata {
            cluster_id: response.cluster_id.as_ref().map(|c| c.to_string()),
            controller: Some(response.controller_id.0).filter(|id| *id >= 0),
            brokers,
            topics,
            fetched_at: Instant::now(),
        }
    }

    /// The leader of a partition, or the retriable error saying why there
    /// is none now.
    pub fn leader(&self, cluster: &str, topic: &str, partition: i32) -> Result<i32> {
        let error = |code| UpstreamError::Kafka {
            cluster: cluster.to_owned(),
            what: format!("Metadata for {topic}-{partition}"),
            code,
        };
        let Some(found) = self.topics.get(topic) else {
            return Err(error(ResponseError::UnknownTopicOrPartition));
        };
        if let Some(code) = found.error {
            return Err(error(code));
        }
        let Some(p) = found.partitions.iter().find(|p| p.partition == partition) else {
            return Err(error(ResponseError::UnknownTopicOrPartition));
        };
        if p.leader < 0 {
            return Err(error(p.error.unwrap_or(ResponseError::LeaderNotAvailable)));
        }
        Ok(p.leader)
    }

    /// How many partitions a topic has, if the cluster listed it without
    /// error.
    pub fn partition_count(&self, topic: &str) -> Option<usize> {
        self.topics
            .get(topic)
            .filter(|t| t.error.is_none())
            .map(|t| t.partitions.len())
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::{BrokerId, TopicName};
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    #[test]
    fn leaders_and_their_absence() {
        let partition = |index, leader| {
            MetadataResponsePartition::default()
                .with_partition_index(index)
                .with_leader_id(BrokerId(leader))
        };
        let response = MetadataResponse::default()
            .with_controller_id(BrokerId(2))
            .with_brokers(vec![MetadataResponseBroker::default()
                .with_node_id(BrokerId(2))
                .with_host(StrBytes::from_static_str("b2"))
                .with_port(9093)])
            .with_topics(vec![MetadataResponseTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("orders"))))
                .with_partitions(vec![partition(1, -1), partition(0, 2)])]);
        let metadata = Metadata::from_response(&response);
        assert_eq!(metadata.brokers.get(&2).map(String::as_str), Some("b2:9093"));
        assert_eq!(metadata.controller, Some(2));
        assert_eq!(metadata.partition_count("orders"), Some(2));
        assert_eq!(metadata.leader("nj", "orders", 0), Ok(2));
        let code = |r: Result<i32>| r.unwrap_err().code();
        assert_eq!(
            code(metadata.leader("nj", "orders", 1)),
            Some(ResponseError::LeaderNotAvailable)
        );
        assert_eq!(
            code(metadata.leader("nj", "orders", 2)),
            Some(ResponseError::UnknownTopicOrPartition)
        );
        assert_eq!(
            code(metadata.leader("nj", "payments", 0)),
            Some(ResponseError::UnknownTopicOrPartition)
        );
    }
}
