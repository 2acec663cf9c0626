//! The mirror's committed positions: consumer group offsets on the source
//! cluster, under the mirror's group, so ordinary lag tools see them.
//!
//! Each commit carries the generation and member id of the process that
//! owns the partition in the mirror's group ([`crate::membership`]), and
//! its metadata string carries the target offset that the committed source offset maps
//! to (`strait-mirror:v1:target=1234`). On start the mirror reads the
//! target from there to find exactly what is already mirrored. A source
//! that drops commit metadata (Tansu 0.6.0 does) leaves only the source
//! offset; the mirror then matches the target's last batch by content
//! instead (see `resume`).

use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{ApiKey, GroupId, OffsetCommitRequest, OffsetFetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use strait_upstream::{Cluster, UpstreamError};

use crate::membership::Generation;

const METADATA_PREFIX: &str = "strait-mirror:v1:target=";

/// A committed position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Committed {
    /// The next source offset to mirror.
    pub offset: i64,
    /// The target offset that source offset maps to, when the source kept
    /// the commit's metadata.
    pub target_offset: Option<i64>,
}

/// One position to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToCommit {
    /// Source topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The next source offset to mirror.
    pub offset: i64,
    /// The target offset it maps to.
    pub target_offset: i64,
}

/// Reads the group's committed positions for `partitions` of `topic`
/// (partitions without one are left out).
pub async fn load(
    source: &Cluster,
    group: &str,
    topic: &str,
    partitions: &[i32],
) -> Result<Vec<(i32, Committed)>, UpstreamError> {
    let topics = vec![OffsetFetchRequestTopic::default()
        .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
        .with_partition_indexes(partitions.to_vec())];
    Ok(fetch(source, group, Some(topics))
        .await?
        .into_iter()
        .filter(|o| o.topic == topic)
        .map(|o| {
            (
                o.partition,
                Committed {
                    offset: o.offset,
                    target_offset: target_offset(o.metadata.as_deref()),
                },
            )
        })
        .collect())
}

/// The target offset a mirror's commit metadata names.
pub fn target_offset(metadata: Option<&str>) -> Option<i64> {
    metadata?.strip_prefix(METADATA_PREFIX)?.parse().ok()
}

/// One committed offset of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffset {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The committed offset (the next record the group would read).
    pub offset: i64,
    /// The commit's metadata string.
    pub metadata: Option<String>,
}

/// Every committed offset of `group` on `cluster` (every topic).
pub async fn load_all(cluster: &Cluster, group: &str) -> Result<Vec<GroupOffset>, UpstreamError> {
    fetch(cluster, group, None).await
}

/// OffsetFetch of `group` at its coordinator: `topics`, or every topic.
async fn fetch(
    cluster: &Cluster,
    group: &str,
    topics: Option<Vec<OffsetFetchRequestTopic>>,
) -> Result<Vec<GroupOffset>, UpstreamError> {
    let coordinator = cluster.coordinator(group).await?;
    // v8 moves the group into an array; one group needs none of that.
    let version = coordinator.version(ApiKey::OffsetFetch)?.min(7);
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
        .with_topics(topics)
        .with_require_stable(version >= 7);
    let response = coordinator_call(cluster, group, coordinator.request_at(&request, version).await)?;
    check(cluster, group, "OffsetFetch", response.error_code)?;
    let mut found = Vec::new();
    for t in &response.topics {
        for p in &t.partitions {
            check(cluster, group, "OffsetFetch", p.error_code)?;
            if p.committed_offset < 0 {
                continue;
            }
            found.push(GroupOffset {
                topic: t.name.to_string(),
                partition: p.partition_index,
                offset: p.committed_offset,
                metadata: p.metadata.as_ref().map(|m| m.to_string()),
            });
        }
    }
    Ok(found)
}

/// Commits `positions` under `group` as a member of `generation`.
pub async fn commit(
    source: &Cluster,
    group: &str,
    generation: Option<&Generation>,
    positions: &[ToCommit],
) -> Result<(), UpstreamError> {
    let offsets: Vec<(&str, i32, i64, String)> = positions
        .iter()
        .map(|p| {
            (
                p.topic.as_str(),
                p.partition,
                p.offset,
                format!("{METADATA_PREFIX}{}", p.target_offset),
            )
        })
        .collect();
    commit_as(source, group, generation, &offsets).await
}

/// Commits (topic, partition, offset, metadata) under `group` on
/// `cluster`: standalone commits (generation -1, no member), which Kafka
/// refuses while the group has members.
pub async fn commit_offsets(
    cluster: &Cluster,
    group: &str,
    offsets: &[(&str, i32, i64, String)],
) -> Result<(), UpstreamError> {
    commit_as(cluster, group, None, offsets).await
}

/// Commits as a member of `generation`, or standalone.
async fn commit_as(
    cluster: &Cluster,
    group: &str,
    generation: Option<&Generation>,
    offsets: &[(&str, i32, i64, String)],
) -> Result<(), UpstreamError> {
    if offsets.is_empty() {
        return Ok(());
    }
    let mut topics: Vec<OffsetCommitRequestTopic> = Vec::new();
    for &(topic, partition, offset, ref metadata) in offsets {
        let partition = OffsetCommitRequestPartition::default()
            .with_partition_index(partition)
            .with_committed_offset(offset)
            .with_committed_metadata(Some(StrBytes::from_string(metadata.clone())));
        match topics.iter_mut().find(|t| *t.name == *topic) {
            Some(t) => t.partitions.push(partition),
            None => topics.push(
                OffsetCommitRequestTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partitions(vec![partition]),
            ),
        }
    }
    let source = cluster;
    let coordinator = source.coordinator(group).await?;
    let mut request = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(topics);
    if let Some(generation) = generation {
        request = request
            .with_generation_id_or_member_epoch(generation.id)
            .with_member_id(StrBytes::from_string(generation.member.clone()));
    }
    let response = coordinator_call(source, group, coordinator.request(&request).await)?;
    for t in &response.topics {
        for p in &t.partitions {
            check(source, group, "OffsetCommit", p.error_code)?;
        }
    }
    Ok(())
}

/// Passes a coordinator answer through, forgetting the coordinator when
/// the connection to it failed.
fn coordinator_call<T>(
    source: &Cluster,
    group: &str,
    result: Result<T, UpstreamError>,
) -> Result<T, UpstreamError> {
    if result.as_ref().is_err_and(UpstreamError::wants_metadata_refresh) {
        source.forget_coordinator(group);
    }
    result
}

fn check(source: &Cluster, group: &str, api: &str, code: i16) -> Result<(), UpstreamError> {
    let Some(error) = ResponseError::try_from_code(code) else {
        return Ok(());
    };
    if matches!(
        error,
        ResponseError::NotCoordinator | ResponseError::CoordinatorNotAvailable
    ) {
        source.forget_coordinator(group);
    }
    Err(UpstreamError::Kafka {
        cluster: source.name().to_owned(),
        what: format!("{api} for group {group}"),
        code: error,
    })
}
