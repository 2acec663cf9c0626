//! A cluster's metadata as the upstream client keeps it: brokers by node id,
//! and every topic's partitions with their leaders.

use std::collections::{BTreeMap, HashMap};

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
    /// The names of the topics with an id (Metadata v10+), by id.
    ids: HashMap<u128, String>,
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
        let topics: BTreeMap<String, TopicMetadata> = response
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
        let ids = topics
            .iter()
            .filter(|(_, t)| t.id != 0)
            .map(|(name, t)| (t.id, name.clone()))
            .collect();
        Metadata {
            ids,
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

    /// Keeps `older`'s partition where it names a newer leader epoch than
    /// this snapshot (of the same topic: the same id), as Kafka's clients
    /// do (KIP-320). Brokers learn of leader changes at different times,
    /// so a refresh answered by one that has not heard yet would send
    /// requests back to a deposed leader; one that still thinks itself
    /// leader would refuse an idempotent batch that the new leader's log
    /// is ahead of as out of order, which clients take for fatal.
    /// Returns how many partitions were kept.
    pub fn keep_newer_leaders(&mut self, older: &Metadata) -> usize {
        let mut kept = 0;
        for (name, topic) in &mut self.topics {
            let Some(before) = older.topics.get(name).filter(|t| t.id == topic.id) else {
                continue;
            };
            for p in &mut topic.partitions {
                let newer = before.partitions.iter().find(|b| {
                    b.partition == p.partition && b.leader_epoch > p.leader_epoch && p.leader_epoch >= 0
                });
                if let Some(newer) = newer {
                    *p = *newer;
                    kept += 1;
                }
            }
        }
        kept
    }

    /// The name of the topic whose id is `id`, if the cluster listed it.
    pub fn topic_named_by_id(&self, id: u128) -> Option<&str> {
        self.ids.get(&id).map(String::as_str)
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
    fn a_stale_answer_does_not_move_a_leader_back() {
        let response = |id: u128, leader, epoch| {
            MetadataResponse::default().with_topics(vec![MetadataResponseTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("orders"))))
                .with_topic_id(uuid::Uuid::from_u128(id))
                .with_partitions(vec![
                    MetadataResponsePartition::default()
                        .with_partition_index(0)
                        .with_leader_id(BrokerId(leader))
                        .with_leader_epoch(epoch),
                    MetadataResponsePartition::default()
                        .with_partition_index(1)
                        .with_leader_id(BrokerId(3))
                        .with_leader_epoch(1),
                ])])
        };
        let newer = Metadata::from_response(&response(7, 3, 5));
        // A broker that has not heard of epoch 5 yet.
        let mut stale = Metadata::from_response(&response(7, 2, 4));
        assert_eq!(newer.topic_named_by_id(7), Some("orders"));
        assert_eq!(newer.topic_named_by_id(8), None);
        assert_eq!(stale.keep_newer_leaders(&newer), 1);
        assert_eq!(stale.leader("nj", "orders", 0), Ok(3));
        assert_eq!(stale.topics["orders"].partitions[0].leader_epoch, 5);
        // A later epoch wins; so does a topic made again (another id).
        let mut later = Metadata::from_response(&response(7, 4, 6));
        assert_eq!(later.keep_newer_leaders(&newer), 0);
        assert_eq!(later.leader("nj", "orders", 0), Ok(4));
        let mut remade = Metadata::from_response(&response(8, 2, 0));
        assert_eq!(remade.keep_newer_leaders(&newer), 0);
        assert_eq!(remade.leader("nj", "orders", 0), Ok(2));
    }

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
