//! Committed offsets of the groups Strait coordinates, kept where the data
//! lives: OffsetCommit and OffsetFetch split by topic. Local topics' offsets
//! go to the local coordinator (in the spool); an upstream topic's go to
//! its cluster under the same group id, as a standalone commit (generation
//! -1, no member: the upstream group has no members, Strait runs the
//! group), so upstream lag tools see them under the upstream's topic name.
//!
//! A commit is checked against the group's generation and member here
//! before anything is written upstream, in the connection's local order
//! (after a JoinGroup or SyncGroup sent before it on the same connection).

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::future::join_all;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use strait_config::Destination;
use strait_upstream::{Backoff, Cluster, UpstreamError};
use tokio::time::Instant;

use super::session::Session;
use super::{coordinator_code, group_id, name, Head, Pending, Place, Router};
use crate::broker::Reply;

/// How long an upstream commit or offset fetch is sent again (with the
/// upstream client's backoff) while its coordinator moves or loads, as a
/// Kafka broker that just started or took over a partition of its
/// offsets topic answers for a few seconds.
const PATIENCE: Duration = Duration::from_secs(8);

/// One topic's committed offsets as the router passes them around: per
/// partition (index, offset, leader epoch, metadata, error code).
type Offsets = Vec<(i32, i64, i32, Option<StrBytes>, i16)>;

/// Topics and partitions asked for; `None` for every topic with a commit.
type Asked = Option<Vec<(String, Vec<i32>)>>;

/// One group's answer: its error code and its topics.
type GroupAnswer = (i16, Vec<(String, Offsets)>);

impl Router {
    pub(super) fn offset_commit<'a>(
        &'a self,
        session: &mut Session,
        head: Head,
        req: OffsetCommitRequest,
    ) -> Pending<'a> {
        let local = self.local(session, &head);
        let version = head.version;
        let order: Vec<(String, Vec<i32>)> = req
            .topics
            .iter()
            .map(|t| {
                (
                    t.name.to_string(),
                    t.partitions.iter().map(|p| p.partition_index).collect(),
                )
            })
            .collect();
        let mut codes: BTreeMap<(String, i32), i16> = BTreeMap::new();
        let mut local_topics = Vec::new();
        let mut upstream: BTreeMap<String, Vec<(String, String, OffsetCommitRequestPartition)>> =
            BTreeMap::new();
        let mut template = req;
        for topic in std::mem::take(&mut template.topics) {
            let client = topic.name.to_string();
            match self.place(&client) {
                Place::Local => local_topics.push(topic),
                Place::Nowhere => {
                    for p in topic.partitions {
                        codes.insert(
                            (client.clone(), p.partition_index),
                            ResponseError::UnknownTopicOrPartition.code(),
                        );
                    }
                }
                Place::Upstream(cluster, upstream_name) => {
                    for p in topic.partitions {
                        upstream.entry(cluster.clone()).or_default().push((
                            client.clone(),
                            upstream_name.clone(),
                            p,
                        ));
                    }
                }
            }
        }
        Box::pin(async move {
            let group = template.group_id.to_string();
            let mut throttle_time_ms = 0;
            if !upstream.is_empty() {
                // In the connection's order: after its JoinGroup or
                // SyncGroup.
                local.wait().await;
                if let Some(error) = self.broker.groups().check_commit(&template, version) {
                    for (client, _, p) in upstream.values().flatten() {
                        codes.insert((client.clone(), p.partition_index), error.code());
                    }
                    upstream.clear();
                }
            }
            let local_part = async {
                if local_topics.is_empty() {
                    return None;
                }
                let mut sub = template.clone();
                sub.topics = local_topics;
                local.ask(sub).await
            };
            let upstream_parts = join_all(
                upstream
                    .into_iter()
                    .map(|(c, items)| commit_upstream(self.cluster(&c), &group, items)),
            );
            let (local_answer, upstream_parts) = futures_util::future::join(local_part, upstream_parts).await;
            if let Some(answer) = local_answer {
                throttle_time_ms = answer.throttle_time_ms;
                for t in answer.topics {
                    for p in t.partitions {
                        codes.insert((t.name.to_string(), p.partition_index), p.error_code);
                    }
                }
            }
            codes.extend(upstream_parts.into_iter().flatten());
            let mut response = OffsetCommitResponse::default();
            if version >= 3 {
                response.throttle_time_ms = throttle_time_ms;
            }
            response.topics = order
                .into_iter()
                .map(|(topic, partitions)| {
                    let partitions = partitions
                        .into_iter()
                        .map(|p| {
                            let code = codes
                                .get(&(topic.clone(), p))
                                .copied()
                                .unwrap_or(ResponseError::UnknownServerError.code());
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p)
                                .with_error_code(code)
                        })
                        .collect();
                    OffsetCommitResponseTopic::default()
                        .with_name(name(&topic))
                        .with_partitions(partitions)
                })
                .collect();
            Reply::Respond(Box::new(ResponseKind::OffsetCommit(response)))
        })
    }

    pub(super) fn offset_fetch<'a>(
        &'a self,
        session: &mut Session,
        head: Head,
        req: OffsetFetchRequest,
    ) -> Pending<'a> {
        let local = self.local(session, &head);
        let version = head.version;
        let asked = asked_groups(&req, version);
        let require_stable = req.require_stable;
        Box::pin(async move {
            // The local coordinator answers for every group at once, in
            // the client's version; then each group's upstream topics.
            let local_asked: Vec<(String, Asked)> = asked
                .iter()
                .map(|(group, topics)| {
                    let topics = topics.as_ref().map(|topics| {
                        topics
                            .iter()
                            .filter(|(t, _)| self.place(t) == Place::Local)
                            .cloned()
                            .collect()
                    });
                    (group.clone(), topics)
                })
                .collect();
            let local_req = offset_fetch_request(version, local_asked, require_stable);
            let local_answer = local.ask(local_req).await.unwrap_or_default();
            let throttle_time_ms = local_answer.throttle_time_ms;
            let local_groups = group_answers(local_answer, version);
            let answers = join_all(asked.iter().zip(local_groups).map(|((group, topics), local)| {
                self.group_offsets(group, topics.as_ref(), local, require_stable)
            }))
            .await;
            let mut response = OffsetFetchResponse::default();
            if version >= 3 {
                response.throttle_time_ms = throttle_time_ms;
            }
            if version >= 8 {
                response.groups = asked
                    .iter()
                    .zip(answers)
                    .map(|((group, _), (code, topics))| {
                        OffsetFetchResponseGroup::default()
                            .with_group_id(group_id(group))
                            .with_error_code(code)
                            .with_topics(
                                topics
                                    .into_iter()
                                    .map(|(t, offsets)| {
                                        OffsetFetchResponseTopics::default()
                                            .with_name(name(&t))
                                            .with_partitions(
                                                offsets
                                                    .into_iter()
                                                    .map(|(p, offset, epoch, metadata, error)| {
                                                        OffsetFetchResponsePartitions::default()
                                                            .with_partition_index(p)
                                                            .with_committed_offset(offset)
                                                            .with_committed_leader_epoch(epoch)
                                                            .with_metadata(metadata)
                                                            .with_error_code(error)
                                                    })
                                                    .collect(),
                                            )
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
            } else {
                let (code, topics) = answers.into_iter().next().unwrap_or_default();
                if version >= 2 {
                    response.error_code = code;
                }
                response.topics = topics
                    .into_iter()
                    .map(|(t, offsets)| {
                        OffsetFetchResponseTopic::default()
                            .with_name(name(&t))
                            .with_partitions(
                                offsets
                                    .into_iter()
                                    .map(|(p, offset, epoch, metadata, error)| {
                                        OffsetFetchResponsePartition::default()
                                            .with_partition_index(p)
                                            .with_committed_offset(offset)
                                            .with_committed_leader_epoch(if version >= 5 {
                                                epoch
                                            } else {
                                                -1
                                            })
                                            .with_metadata(metadata)
                                            .with_error_code(error)
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
            }
            Reply::Respond(Box::new(ResponseKind::OffsetFetch(response)))
        })
    }

    /// One group's committed offsets: the local coordinator's `local`
    /// answer for its local topics, and its upstream topics' from their
    /// clusters, in the order asked (`topics` None: every topic with a
    /// commit, wherever it lives, under the clients' names).
    async fn group_offsets(
        &self,
        group: &str,
        topics: Option<&Vec<(String, Vec<i32>)>>,
        local: GroupAnswer,
        require_stable: bool,
    ) -> GroupAnswer {
        let (local_code, local_topics) = local;
        let Some(topics) = topics else {
            // Every topic: the local ones the routes keep local, and every
            // cluster's that a route shows.
            let mut out: Vec<(String, Offsets)> = local_topics
                .into_iter()
                .filter(|(t, _)| self.routes.client_name(&Destination::Local, t).is_some())
                .collect();
            let mut code = local_code;
            let fetched = join_all(
                self.upstreams
                    .values()
                    .map(|cluster| fetch_upstream(cluster, group, None, require_stable)),
            )
            .await;
            for (cluster, answer) in self.upstreams.keys().zip(fetched) {
                match answer {
                    Ok(topics) => {
                        let destination = Destination::Cluster(cluster.clone());
                        for (t, offsets) in topics {
                            if let Some(client) = self.routes.client_name(&destination, &t) {
                                out.push((client, offsets));
                            }
                        }
                    }
                    Err(e) => {
                        tracing::debug!(cluster, group, error = %e, "committed offsets unavailable");
                        code = coordinator_code(&e);
                    }
                }
            }
            return (code, out);
        };
        let mut by_cluster: BTreeMap<String, Vec<(String, String, Vec<i32>)>> = BTreeMap::new();
        for (t, partitions) in topics {
            if let Place::Upstream(c, upstream_name) = self.place(t) {
                by_cluster
                    .entry(c)
                    .or_default()
                    .push((t.clone(), upstream_name, partitions.clone()));
            }
        }
        let fetched = join_all(by_cluster.iter().map(|(c, wanted)| async move {
            let asked = wanted.iter().map(|(_, u, ps)| (u.clone(), ps.clone())).collect();
            let answer = fetch_upstream(self.cluster(c), group, Some(asked), require_stable).await;
            (wanted, answer)
        }))
        .await;
        let mut found: BTreeMap<String, Offsets> = local_topics.into_iter().collect();
        let mut code = local_code;
        for (wanted, answer) in fetched {
            // A coordinator that moved or is loading is the group's error,
            // as Kafka answers it: clients ask again (a partition's error
            // would be final for them).
            if let Err(e) = &answer {
                let c = coordinator_code(e);
                if code == 0 && coordinator_moved(c) {
                    code = c;
                }
            }
            for (client, upstream_name, partitions) in wanted {
                let offsets = match &answer {
                    Ok(topics) => {
                        let theirs = topics.iter().find(|(t, _)| t == upstream_name).map(|(_, o)| o);
                        partitions
                            .iter()
                            .map(|p| {
                                theirs
                                    .and_then(|o| o.iter().find(|o| o.0 == *p).cloned())
                                    .unwrap_or((*p, -1, -1, Some(StrBytes::default()), 0))
                            })
                            .collect()
                    }
                    Err(e) => partitions
                        .iter()
                        .map(|p| (*p, -1, -1, None, coordinator_code(e)))
                        .collect(),
                };
                found.insert(client.clone(), offsets);
            }
        }
        let out = topics
            .iter()
            .map(|(t, partitions)| {
                let offsets = found.remove(t).unwrap_or_else(|| {
                    partitions
                        .iter()
                        .map(|p| (*p, -1, -1, None, ResponseError::UnknownTopicOrPartition.code()))
                        .collect()
                });
                (t.clone(), offsets)
            })
            .collect();
        (code, out)
    }
}

/// The groups and topics an OffsetFetch asks for (`None`: every topic the
/// group committed); before v8 one group.
fn asked_groups(req: &OffsetFetchRequest, version: i16) -> Vec<(String, Asked)> {
    if version >= 8 {
        req.groups
            .iter()
            .map(|g| {
                let asked = g.topics.as_ref().map(|ts| {
                    ts.iter()
                        .map(|t| (t.name.to_string(), t.partition_indexes.clone()))
                        .collect()
                });
                (g.group_id.to_string(), asked)
            })
            .collect()
    } else {
        let asked = req.topics.as_ref().map(|ts| {
            ts.iter()
                .map(|t| (t.name.to_string(), t.partition_indexes.clone()))
                .collect()
        });
        vec![(req.group_id.to_string(), asked)]
    }
}

/// An OffsetFetch of `groups` at `version` (before v8, of the first group).
fn offset_fetch_request(
    version: i16,
    groups: Vec<(String, Asked)>,
    require_stable: bool,
) -> OffsetFetchRequest {
    let mut request = OffsetFetchRequest::default();
    if version >= 7 {
        request.require_stable = require_stable;
    }
    if version >= 8 {
        request.topics = Some(Vec::new());
        request.groups = groups
            .into_iter()
            .map(|(group, asked)| {
                OffsetFetchRequestGroup::default()
                    .with_group_id(group_id(&group))
                    .with_topics(asked.map(|topics| {
                        topics
                            .into_iter()
                            .map(|(t, ps)| {
                                OffsetFetchRequestTopics::default()
                                    .with_name(name(&t))
                                    .with_partition_indexes(ps)
                            })
                            .collect()
                    }))
            })
            .collect();
    } else if let Some((group, asked)) = groups.into_iter().next() {
        request.group_id = group_id(&group);
        request.topics = asked.map(|topics| {
            topics
                .into_iter()
                .map(|(t, ps)| {
                    OffsetFetchRequestTopic::default()
                        .with_name(name(&t))
                        .with_partition_indexes(ps)
                })
                .collect()
        });
    }
    request
}

/// An OffsetFetch answer, one [`GroupAnswer`] per group asked.
fn group_answers(answer: OffsetFetchResponse, version: i16) -> Vec<GroupAnswer> {
    if version >= 8 {
        answer
            .groups
            .into_iter()
            .map(|g| {
                let topics = g
                    .topics
                    .into_iter()
                    .map(|t| {
                        let offsets = t
                            .partitions
                            .into_iter()
                            .map(|p| {
                                (
                                    p.partition_index,
                                    p.committed_offset,
                                    p.committed_leader_epoch,
                                    p.metadata,
                                    p.error_code,
                                )
                            })
                            .collect();
                        (t.name.to_string(), offsets)
                    })
                    .collect();
                (g.error_code, topics)
            })
            .collect()
    } else {
        let topics = answer
            .topics
            .into_iter()
            .map(|t| {
                let offsets = t
                    .partitions
                    .into_iter()
                    .map(|p| {
                        (
                            p.partition_index,
                            p.committed_offset,
                            p.committed_leader_epoch,
                            p.metadata,
                            p.error_code,
                        )
                    })
                    .collect();
                (t.name.to_string(), offsets)
            })
            .collect();
        vec![(answer.error_code, topics)]
    }
}

/// Whether an answer says the group's coordinator is elsewhere or not
/// ready: worth asking again after finding it anew.
fn coordinator_moved(code: i16) -> bool {
    [
        ResponseError::NotCoordinator,
        ResponseError::CoordinatorNotAvailable,
        ResponseError::CoordinatorLoadInProgress,
    ]
    .iter()
    .any(|e| e.code() == code)
}

/// A standalone commit of `items` (client name, upstream name, partition)
/// on `cluster` under `group`; each partition's error code by the client's
/// name.
async fn commit_upstream(
    cluster: &Cluster,
    group: &str,
    items: Vec<(String, String, OffsetCommitRequestPartition)>,
) -> Vec<((String, i32), i16)> {
    let deadline = Instant::now() + PATIENCE;
    let mut backoff = Backoff::default();
    let last = loop {
        let last = async {
            let connection = cluster.coordinator(group).await?;
            let version = connection.version(ApiKey::OffsetCommit)?;
            let mut topics: Vec<OffsetCommitRequestTopic> = Vec::new();
            for (_, upstream_name, p) in &items {
                let partition = OffsetCommitRequestPartition::default()
                    .with_partition_index(p.partition_index)
                    .with_committed_offset(p.committed_offset)
                    .with_committed_leader_epoch(if version >= 6 {
                        p.committed_leader_epoch
                    } else {
                        -1
                    })
                    .with_committed_metadata(p.committed_metadata.clone());
                match topics.iter_mut().find(|t| t.name.as_str() == upstream_name) {
                    Some(t) => t.partitions.push(partition),
                    None => topics.push(
                        OffsetCommitRequestTopic::default()
                            .with_name(name(upstream_name))
                            .with_partitions(vec![partition]),
                    ),
                }
            }
            let request = OffsetCommitRequest::default()
                .with_group_id(group_id(group))
                .with_generation_id_or_member_epoch(-1)
                .with_member_id(StrBytes::default())
                .with_topics(topics);
            connection.request_at(&request, version).await
        }
        .await;
        match &last {
            Ok(r)
                if r.topics
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .any(|p| coordinator_moved(p.error_code)) => {}
            Err(e) if e.is_retriable() => {}
            _ => break last,
        }
        cluster.forget_coordinator(group);
        let delay = backoff.next_delay();
        if Instant::now() + delay > deadline {
            break last;
        }
        tokio::time::sleep(delay).await;
    };
    items
        .into_iter()
        .map(|(client, upstream_name, p)| {
            let code = match &last {
                Ok(response) => response
                    .topics
                    .iter()
                    .find(|t| t.name.as_str() == upstream_name)
                    .and_then(|t| {
                        t.partitions
                            .iter()
                            .find(|q| q.partition_index == p.partition_index)
                    })
                    .map_or(ResponseError::UnknownServerError.code(), |q| q.error_code),
                Err(e) => {
                    tracing::debug!(cluster = cluster.name(), group, error = %e, "upstream commit failed");
                    coordinator_code(e)
                }
            };
            ((client, p.partition_index), code)
        })
        .collect()
}

/// `group`'s committed offsets on `cluster`, by upstream topic name
/// (`topics` None: every topic the group has committed).
async fn fetch_upstream(
    cluster: &Cluster,
    group: &str,
    topics: Option<Vec<(String, Vec<i32>)>>,
    require_stable: bool,
) -> Result<Vec<(String, Offsets)>, UpstreamError> {
    let deadline = Instant::now() + PATIENCE;
    let mut backoff = Backoff::default();
    loop {
        let answer = fetch_upstream_once(cluster, group, topics.clone(), require_stable).await;
        let retry = match &answer {
            Ok((code, _)) => coordinator_moved(*code),
            Err(e) => e.is_retriable(),
        };
        let delay = backoff.next_delay();
        if !retry || Instant::now() + delay > deadline {
            return answer.and_then(|(code, topics)| {
                strait_upstream::error::check(
                    cluster.name(),
                    || format!("OffsetFetch for group {group}"),
                    code,
                )?;
                Ok(topics)
            });
        }
        cluster.forget_coordinator(group);
        tokio::time::sleep(delay).await;
    }
}

async fn fetch_upstream_once(
    cluster: &Cluster,
    group: &str,
    topics: Option<Vec<(String, Vec<i32>)>>,
    require_stable: bool,
) -> Result<GroupAnswer, UpstreamError> {
    let connection = cluster.coordinator(group).await?;
    let version = connection.version(ApiKey::OffsetFetch)?;
    let request = offset_fetch_request(version, vec![(group.to_owned(), topics)], require_stable);
    let response = connection.request_at(&request, version).await?;
    Ok(group_answers(response, version)
        .into_iter()
        .next()
        .unwrap_or_default())
}
