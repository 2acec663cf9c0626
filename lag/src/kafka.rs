//! One Kafka cluster's consumer groups, read over the protocol: ListGroups
//! from every broker (each lists the groups it coordinates),
//! DescribeGroups and OffsetFetch at those coordinators, ListOffsets at
//! each partition's leader, every request of a kind to one broker in one
//! request where the protocol allows it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use futures_util::future::join_all;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, DescribeGroupsRequest, FetchRequest, GroupId, ListGroupsRequest,
    ListOffsetsRequest, OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use strait_upstream::error::check;
use strait_upstream::{Cluster, Connection, UpstreamError};

use crate::groups::first_timestamp;
use crate::{GroupLag, PartitionLag, Snapshot, Source, Watch};

/// A place in a partition: (topic, partition, offset).
type At = (String, i32, i64);

/// Polls one cluster, keeping what it learnt of record timestamps: when
/// the oldest record a group has not read was written is read once per
/// committed offset, and kept while the offset stands.
#[derive(Debug)]
pub struct Poller {
    cluster: Cluster,
    watch: Watch,
    /// (topic, partition, committed offset) to the timestamp of the first
    /// record at or after it, milliseconds since the epoch.
    timestamps: HashMap<At, i64>,
}

impl Poller {
    /// A poller of `cluster` for the groups `watch` names.
    pub fn new(cluster: Cluster, watch: Watch) -> Poller {
        Poller {
            cluster,
            watch,
            timestamps: HashMap::new(),
        }
    }

    /// Reads every watched group once: its state, members, committed
    /// offsets, each partition's end and, where it is behind, when the
    /// oldest record it has not read was written.
    pub async fn poll(&mut self) -> Result<Snapshot, UpstreamError> {
        let (cluster, watch) = (&self.cluster, &self.watch);
        let metadata = cluster.metadata().await?;
        // Groups by coordinator, in name order, at most `max_groups`.
        let listed = join_all(metadata.brokers.keys().map(|&node| list_groups(cluster, node))).await;
        let mut groups: BTreeMap<String, i32> = BTreeMap::new();
        for found in listed {
            for (node, group) in found? {
                if (watch.groups)(&group) {
                    groups.insert(group, node);
                }
            }
        }
        let skipped = groups.len().saturating_sub(watch.max_groups);
        let groups: Vec<(String, i32)> = groups.into_iter().take(watch.max_groups).collect();
        let mut by_node: BTreeMap<i32, Vec<String>> = BTreeMap::new();
        for (group, node) in &groups {
            by_node.entry(*node).or_default().push(group.clone());
        }
        let described = join_all(
            by_node
                .iter()
                .map(|(&node, groups)| describe(cluster, node, groups)),
        )
        .await;
        let mut states: HashMap<String, (String, usize)> = HashMap::new();
        for found in described {
            states.extend(found?);
        }
        let committed = join_all(groups.iter().map(|(group, node)| offsets(cluster, *node, group))).await;
        // Every partition some group committed, for its end.
        let mut wanted: BTreeSet<(String, i32)> = BTreeSet::new();
        let mut result = Vec::new();
        for ((group, _), found) in groups.iter().zip(committed) {
            let (state, members) = states.remove(group).unwrap_or_else(|| ("Unknown".to_owned(), 0));
            let mut lag = GroupLag {
                group: group.clone(),
                state,
                members,
                partitions: Vec::new(),
                error: None,
            };
            match found {
                Ok(offsets) => {
                    for (topic, partition, offset) in offsets {
                        wanted.insert((topic.clone(), partition));
                        lag.partitions
                            .push(PartitionLag::committed(topic, partition, offset));
                    }
                }
                Err(e) => lag.error = Some(e.to_string()),
            }
            result.push(lag);
        }
        let any_committed = result.iter().any(|g| (watch.read_committed)(&g.group));
        let ends = partition_ends(cluster, &metadata, &wanted, any_committed).await?;
        let mut behind: BTreeSet<At> = BTreeSet::new();
        for group in &mut result {
            let committed_only = (watch.read_committed)(&group.group);
            for p in &mut group.partitions {
                let end = ends
                    .get(&(p.topic.clone(), p.partition))
                    .map(|&(high_watermark, stable)| if committed_only { stable } else { high_watermark });
                p.end = end;
                if p.lag_records().is_some_and(|n| n > 0) {
                    behind.insert((p.topic.clone(), p.partition, p.committed));
                }
            }
        }
        self.timestamps.retain(|key, _| behind.contains(key));
        let missing: Vec<At> = behind
            .into_iter()
            .filter(|key| !self.timestamps.contains_key(key))
            .collect();
        let found = unread_timestamps(&self.cluster, &metadata, missing).await;
        self.timestamps.extend(found);
        for group in &mut result {
            for p in &mut group.partitions {
                p.oldest_unread_ms = self
                    .timestamps
                    .get(&(p.topic.clone(), p.partition, p.committed))
                    .copied();
            }
        }
        Ok(Snapshot {
            groups: result,
            skipped,
        })
    }
}

impl Source for Poller {
    async fn poll(&mut self) -> Result<Snapshot, String> {
        Poller::poll(self).await.map_err(|e| e.to_string())
    }
}

/// The groups broker `node` coordinates.
pub async fn list_groups(cluster: &Cluster, node: i32) -> Result<Vec<(i32, String)>, UpstreamError> {
    let connection = cluster.broker(node).await?;
    let response = connection.request(&ListGroupsRequest::default()).await?;
    check(
        cluster.name(),
        || format!("ListGroups at broker {node}"),
        response.error_code,
    )?;
    Ok(response
        .groups
        .iter()
        .map(|g| (node, g.group_id.to_string()))
        .collect())
}

/// Each of `groups`' state and member count, from their coordinator
/// (classic groups with DescribeGroups, consumer-protocol ones with
/// ConsumerGroupDescribe).
pub async fn describe(
    cluster: &Cluster,
    node: i32,
    groups: &[String],
) -> Result<Vec<(String, (String, usize))>, UpstreamError> {
    let connection = cluster.broker(node).await?;
    let request = DescribeGroupsRequest::default().with_groups(
        groups
            .iter()
            .map(|g| GroupId(StrBytes::from_string(g.clone())))
            .collect(),
    );
    let response = connection.request(&request).await?;
    let mut found: Vec<(String, (String, usize))> = Vec::new();
    let mut others = Vec::new();
    for g in &response.groups {
        match (g.error_code, g.group_state.as_str()) {
            (0, state) if state != "Dead" => {
                found.push((g.group_id.to_string(), (state.to_owned(), g.members.len())))
            }
            _ => others.push(g.group_id.clone()),
        }
    }
    // Kafka 4 describes a group of the consumer protocol (KIP-848) only
    // with ConsumerGroupDescribe: DescribeGroups says it is not found (v6
    // on) or Dead (before), as for a group that does not exist.
    if !others.is_empty() && connection.version(ApiKey::ConsumerGroupDescribe).is_ok() {
        let request = ConsumerGroupDescribeRequest::default().with_group_ids(others);
        let response = connection.request(&request).await?;
        found.extend(response.groups.iter().filter(|g| g.error_code == 0).map(|g| {
            (
                g.group_id.to_string(),
                (g.group_state.to_string(), g.members.len()),
            )
        }));
    }
    Ok(found)
}

/// A group's committed offsets, every topic: (topic, partition, offset).
pub async fn offsets(cluster: &Cluster, node: i32, group: &str) -> Result<Vec<At>, UpstreamError> {
    let connection = cluster.broker(node).await?;
    // v8 moves the group into an array; one group needs none of that.
    let version = connection.version(ApiKey::OffsetFetch)?.min(7);
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
        .with_topics(None);
    let response = connection.request_at(&request, version).await?;
    check(
        cluster.name(),
        || format!("OffsetFetch of group {group}"),
        response.error_code,
    )?;
    Ok(response
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .filter(|p| p.error_code == 0 && p.committed_offset >= 0)
                .map(|p| (t.name.to_string(), p.partition_index, p.committed_offset))
        })
        .collect())
}

/// Each partition's (high watermark, last stable offset), asked of its
/// leader (one ListOffsets per leader); the last stable offset only if
/// `stable` (else the high watermark again). Partitions the cluster no
/// longer has are left out; a leader that does not answer fails the call.
pub async fn partition_ends(
    cluster: &Cluster,
    metadata: &strait_upstream::Metadata,
    partitions: &BTreeSet<(String, i32)>,
    stable: bool,
) -> Result<HashMap<(String, i32), (i64, i64)>, UpstreamError> {
    let mut by_leader: BTreeMap<i32, Vec<(String, i32)>> = BTreeMap::new();
    for (topic, partition) in partitions {
        if let Ok(leader) = metadata.leader(cluster.name(), topic, *partition) {
            by_leader
                .entry(leader)
                .or_default()
                .push((topic.clone(), *partition));
        }
    }
    let asked = join_all(by_leader.iter().map(|(&node, partitions)| async move {
        let connection = cluster.broker(node).await?;
        let high = list_latest(&connection, partitions, 0).await?;
        let low = if stable {
            list_latest(&connection, partitions, 1).await?
        } else {
            high.clone()
        };
        Ok::<_, UpstreamError>(
            high.into_iter()
                .map(|(key, hw)| {
                    let lso = low.get(&key).copied().unwrap_or(hw);
                    (key, (hw, lso))
                })
                .collect::<Vec<_>>(),
        )
    }))
    .await;
    let mut ends = HashMap::new();
    for found in asked {
        ends.extend(found?);
    }
    Ok(ends)
}

/// ListOffsets latest of `partitions` at one leader, read uncommitted (0:
/// the high watermark) or committed (1: the last stable offset).
/// Partitions that answer an error are left out.
async fn list_latest(
    connection: &Connection,
    partitions: &[(String, i32)],
    isolation_level: i8,
) -> Result<HashMap<(String, i32), i64>, UpstreamError> {
    let topics = by_topic(partitions.iter().map(|(topic, partition)| {
        let p = ListOffsetsPartition::default()
            .with_partition_index(*partition)
            .with_timestamp(-1);
        (topic, p)
    }))
    .into_iter()
    .map(|(topic, partitions)| {
        ListOffsetsTopic::default()
            .with_name(topic)
            .with_partitions(partitions)
    })
    .collect();
    let request = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_isolation_level(isolation_level)
        .with_topics(topics);
    let response = connection.request(&request).await?;
    Ok(response
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .filter(|p| ResponseError::try_from_code(p.error_code).is_none())
                .map(|p| ((t.name.to_string(), p.partition_index), p.offset))
        })
        .collect())
}

/// Bytes a timestamp lookup asks per partition, then again for the
/// partitions whose first batch was larger (Kafka sends an oversized first
/// batch whole only in the first partition of an answer).
const LOOKUP_BYTES: [i32; 3] = [64 << 10, 1 << 20, 16 << 20];
/// Most bytes of one lookup answer.
const LOOKUP_MAX_BYTES: i32 = 32 << 20;

/// When the first record at or after each offset of `wanted` (topic,
/// partition, offset) was written, read with Fetches to the partitions'
/// leaders that do not wait (at most one offset per partition per
/// request). Offsets whose records cannot be read (deleted, a leader
/// away) are left out, to be tried at the next poll.
async fn unread_timestamps(
    cluster: &Cluster,
    metadata: &strait_upstream::Metadata,
    wanted: Vec<At>,
) -> HashMap<At, i64> {
    let mut found = HashMap::new();
    let mut left = wanted;
    for ask in LOOKUP_BYTES {
        if left.is_empty() {
            break;
        }
        // Requests per leader, each partition once, within the answer's limit.
        let per_request = (LOOKUP_MAX_BYTES / ask).max(1) as usize;
        let mut requests: Vec<(i32, Vec<At>)> = Vec::new();
        for key in left.drain(..) {
            let Ok(leader) = metadata.leader(cluster.name(), &key.0, key.1) else {
                continue;
            };
            let slot = requests.iter_mut().find(|(node, items)| {
                *node == leader
                    && items.len() < per_request
                    && !items.iter().any(|(t, p, _)| (t, p) == (&key.0, &key.1))
            });
            match slot {
                Some((_, items)) => items.push(key),
                None => requests.push((leader, vec![key])),
            }
        }
        let answers = join_all(requests.into_iter().map(|(node, items)| async move {
            let answer = lookup(cluster, node, &items, ask).await;
            (items, answer)
        }))
        .await;
        for (items, answer) in answers {
            let Ok(answer) = answer else {
                continue;
            };
            for key in items {
                match answer.get(&(key.0.clone(), key.1)) {
                    Some(Some(timestamp)) => {
                        found.insert(key, *timestamp);
                    }
                    // Records there, but no whole batch: ask for more.
                    Some(None) => left.push(key),
                    None => {}
                }
            }
        }
    }
    found
}

/// One Fetch of `items` at broker `node`, `ask` bytes each: per partition
/// answered without error, the timestamp of the first record at or after
/// its offset, or None if the answer held records but no whole batch with
/// such a record.
async fn lookup(
    cluster: &Cluster,
    node: i32,
    items: &[At],
    ask: i32,
) -> Result<HashMap<(String, i32), Option<i64>>, UpstreamError> {
    let topics = by_topic(items.iter().map(|(topic, partition, offset)| {
        let p = FetchPartition::default()
            .with_partition(*partition)
            .with_fetch_offset(*offset)
            .with_partition_max_bytes(ask);
        (topic, p)
    }))
    .into_iter()
    .map(|(topic, partitions)| {
        FetchTopic::default()
            .with_topic(topic)
            .with_partitions(partitions)
    })
    .collect();
    let request = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(LOOKUP_MAX_BYTES)
        .with_isolation_level(0)
        .with_topics(topics);
    let connection = cluster.broker(node).await?;
    let response = connection.request(&request).await?;
    let offsets: HashMap<(&str, i32), i64> = items.iter().map(|(t, p, o)| ((t.as_str(), *p), *o)).collect();
    let mut answers = HashMap::new();
    for t in &response.responses {
        for p in &t.partitions {
            let key = (t.topic.as_str(), p.partition_index);
            let Some(&offset) = offsets.get(&key) else {
                continue;
            };
            if p.error_code != 0 {
                continue;
            }
            let records = p.records.as_deref().unwrap_or_default();
            if records.is_empty() {
                // Nothing at or after the offset: nothing to time.
                continue;
            }
            answers.insert(
                (t.topic.to_string(), p.partition_index),
                first_timestamp(records, offset),
            );
        }
    }
    Ok(answers)
}

/// Per-partition parts of a request gathered under their topics, in the
/// order the topics first come.
fn by_topic<'a, P>(parts: impl Iterator<Item = (&'a String, P)>) -> Vec<(TopicName, Vec<P>)> {
    let mut topics: Vec<(&String, Vec<P>)> = Vec::new();
    for (topic, part) in parts {
        match topics.iter_mut().find(|(t, _)| *t == topic) {
            Some((_, parts)) => parts.push(part),
            None => topics.push((topic, vec![part])),
        }
    }
    topics
        .into_iter()
        .map(|(topic, parts)| (TopicName(StrBytes::from_string(topic.clone())), parts))
        .collect()
}
