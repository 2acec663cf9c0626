//! Groups that `groups:` delegates to an upstream cluster: that cluster's
//! own coordinator runs them, and Strait only passes the group protocol on.
//!
//! JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ConsumerGroupHeartbeat
//! (KIP-848) and OffsetCommit of such a group go to the group's
//! coordinator on the client connection's own connection to it (a
//! coordinator holds a JoinGroup for the whole rebalance and answers a
//! connection's requests in order), at the client's version or the
//! upstream's highest, whichever is lower. Topic names are rewritten where
//! routes rename them: in the consumer protocol's subscriptions and
//! assignments and in commits, to the cluster's names on the way up and
//! back to the clients' on the way down; topic ids in KIP-848 heartbeats
//! and descriptions, between the cluster's and the masked ones clients see
//! in Metadata. DescribeGroups, ConsumerGroupDescribe, DeleteGroups and
//! ListGroups are split between the local coordinator and the clusters.
//!
//! Strait keeps no state for these groups, so several Strait instances in
//! front of one cluster serve the same group: its members may connect to
//! any of them.

use std::any::Any;
use std::time::Duration;

use futures_util::future::join_all;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Request, StrBytes};
use kafka_protocol::ResponseError;
use strait_config::Destination;
use strait_upstream::{Cluster, Throttled, UpstreamError};

use super::consumer_protocol::{rename_assignment, rename_subscription};
use super::session::Session;
use super::topic_ids::client_topic_id;
use super::{coordinator_code, group_id, name, Head, Pending, Place, Router};
use crate::broker::Reply;

/// How long a SyncGroup may wait at the coordinator for the leader's
/// assignment when the JoinGroup's rebalance timeout is not known (Java's
/// default `max.poll.interval.ms`).
const SYNC_WAIT: Duration = Duration::from_secs(300);

/// Where a delegated group's request goes, and how long its coordinator
/// may hold it.
struct Coordinator<'a> {
    cluster: &'a str,
    group: String,
    wait: Duration,
}

impl<'a> Coordinator<'a> {
    /// A request its coordinator answers at once (no rebalance to wait for).
    fn prompt(cluster: &'a str, group: String) -> Self {
        Coordinator {
            cluster,
            group,
            wait: Duration::ZERO,
        }
    }
}

impl Router {
    /// The cluster whose coordinator runs `group`, when `groups:`
    /// delegates it.
    pub(super) fn coordinated_by(&self, group: &str) -> Option<&str> {
        self.groups.resolve(group).cluster()
    }

    /// A client topic's name on `cluster`, where a route renames it.
    fn upstream_name(&self, cluster: &str, client: &str) -> Option<String> {
        match self.place(client) {
            Place::Upstream(c, upstream) if c == cluster && upstream != client => Some(upstream),
            _ => None,
        }
    }

    /// An upstream topic's name for clients, where a route renames it.
    fn client_name(&self, cluster: &str, upstream: &str) -> Option<String> {
        self.routes
            .client_name(&Destination::Cluster(cluster.to_owned()), upstream)
            .filter(|client| client != upstream)
    }

    /// Sends `request` to `group`'s coordinator on `cluster` now (on the
    /// session's connection to it, so it follows the client's earlier
    /// group requests) and returns the answer to come, made into the
    /// client's response by `respond`. A coordinator that moved is
    /// forgotten, so the next request finds it again.
    async fn forward<'a, R>(
        &'a self,
        session: &mut Session,
        head: &Head,
        to: Coordinator<'a>,
        request: R,
        code: fn(&R::Response) -> i16,
        respond: impl FnOnce(Result<R::Response, UpstreamError>) -> ResponseKind + Send + 'a,
    ) -> Pending<'a>
    where
        R: Request + Any + Send,
        R::Response: Throttled + Send,
    {
        let Coordinator { cluster, group, wait } = to;
        let upstream = self.cluster(cluster);
        let sent = async {
            let connection = session.group_lane(upstream, &group).await?;
            let api = ApiKey::try_from(R::KEY).expect("kafka-protocol requests have known keys");
            let version = connection.version(api)?.min(head.version);
            connection.send_at(&request, version).await
        }
        .await;
        Box::pin(async move {
            let answer = match sent {
                Ok(answer) => answer.answer_after(wait).await,
                Err(e) => Err(e),
            };
            let moved = match &answer {
                Ok(response) => [
                    ResponseError::NotCoordinator.code(),
                    ResponseError::CoordinatorNotAvailable.code(),
                ]
                .contains(&code(response)),
                Err(e) => {
                    tracing::debug!(cluster, group, error = %e, "delegated group request failed");
                    true
                }
            };
            if moved {
                upstream.forget_coordinator(&group);
            }
            Reply::Respond(Box::new(respond(answer)))
        })
    }

    /// Asks `group`'s coordinator on `cluster` about that group alone, on
    /// the cluster's shared connection to it, at `version` or the highest
    /// below it the coordinator speaks (`build` makes the request for the
    /// version). The group's entry in the answer, taken by `entry`, or the
    /// error code to answer with; a coordinator that failed is forgotten.
    async fn ask_coordinator<R, T>(
        &self,
        cluster: &str,
        group: &str,
        version: i16,
        build: impl FnOnce(i16) -> R,
        entry: impl FnOnce(R::Response) -> Option<T>,
    ) -> Result<T, i16>
    where
        R: Request + Any,
        R::Response: Throttled,
    {
        let upstream = self.cluster(cluster);
        let answer = async {
            let connection = upstream.coordinator(group).await?;
            let api = ApiKey::try_from(R::KEY).expect("kafka-protocol requests have known keys");
            let version = connection.version(api)?.min(version);
            connection.request_at(&build(version), version).await
        }
        .await;
        match answer {
            Ok(response) => entry(response).ok_or(ResponseError::UnknownServerError.code()),
            Err(e) => {
                upstream.forget_coordinator(group);
                Err(coordinator_code(&e))
            }
        }
    }

    pub(super) async fn delegate_join<'a>(
        &'a self,
        session: &mut Session,
        head: Head,
        cluster: &'a str,
        mut req: JoinGroupRequest,
    ) -> Pending<'a> {
        let consumer = req.protocol_type.as_str() == "consumer";
        if consumer {
            let up = |t: &str| self.upstream_name(cluster, t);
            for protocol in &mut req.protocols {
                protocol.metadata = rename_subscription(&protocol.metadata, &up);
            }
        }
        let wait = Duration::from_millis(req.rebalance_timeout_ms.max(req.session_timeout_ms).max(0) as u64);
        session.remember_rebalance(req.group_id.as_str(), wait, consumer);
        let group = req.group_id.to_string();
        let member_id = req.member_id.clone();
        self.forward(
            session,
            &head,
            Coordinator { cluster, group, wait },
            req,
            |r: &JoinGroupResponse| r.error_code,
            move |answer| {
                ResponseKind::JoinGroup(match answer {
                    Ok(mut response) => {
                        if consumer {
                            let down = |t: &str| self.client_name(cluster, t);
                            for member in &mut response.members {
                                member.metadata = rename_subscription(&member.metadata, &down);
                            }
                        }
                        response
                    }
                    Err(e) => JoinGroupResponse::default()
                        .with_error_code(coordinator_code(&e))
                        .with_generation_id(-1)
                        .with_member_id(member_id),
                })
            },
        )
        .await
    }

    pub(super) async fn delegate_sync<'a>(
        &'a self,
        session: &mut Session,
        head: Head,
        cluster: &'a str,
        mut req: SyncGroupRequest,
    ) -> Pending<'a> {
        let (wait, joined_as_consumer) = session
            .rebalance(req.group_id.as_str())
            .unwrap_or((SYNC_WAIT, true));
        let consumer = match req.protocol_type.as_deref() {
            Some(t) => t == "consumer",
            None => joined_as_consumer,
        };
        if consumer {
            let up = |t: &str| self.upstream_name(cluster, t);
            for assignment in &mut req.assignments {
                assignment.assignment = rename_assignment(&assignment.assignment, &up);
            }
        }
        let group = req.group_id.to_string();
        self.forward(
            session,
            &head,
            Coordinator { cluster, group, wait },
            req,
            |r: &SyncGroupResponse| r.error_code,
            move |answer| {
                ResponseKind::SyncGroup(match answer {
                    Ok(mut response) => {
                        if consumer {
                            let down = |t: &str| self.client_name(cluster, t);
                            response.assignment = rename_assignment(&response.assignment, &down);
                        }
                        response
                    }
                    Err(e) => SyncGroupResponse::default().with_error_code(coordinator_code(&e)),
                })
            },
        )
        .await
    }

    pub(super) async fn delegate_heartbeat<'a>(
        &'a self,
        session: &mut Session,
        head: Head,
        cluster: &'a str,
        req: HeartbeatRequest,
    ) -> Pending<'a> {
        let group = req.group_id.to_string();
        self.forward(
            session,
            &head,
            Coordinator::prompt(cluster, group),
            req,
            |r: &HeartbeatResponse| r.error_code,
            |answer| {
                ResponseKind::Heartbeat(
                    answer.unwrap_or_else(|e| {
                        HeartbeatResponse::default().with_error_code(coordinator_code(&e))
                    }),
                )
            },
        )
        .await
    }

    /// A heartbeat of the consumer group protocol (KIP-848), which joins,
    /// heartbeats, reconciles and leaves in one API: subscribed topics go
    /// up under the cluster's names (a topic that lives elsewhere cannot
    /// be assigned by the cluster's coordinator: left out, logged), and
    /// topic ids, owned and assigned, are turned between the cluster's and
    /// the ones clients see (see [`client_topic_id`]). A regex
    /// subscription (v1) is the coordinator's to match against the
    /// cluster's own names.
    pub(super) async fn delegate_consumer_heartbeat<'a>(
        &'a self,
        session: &mut Session,
        head: Head,
        cluster: &'a str,
        mut req: ConsumerGroupHeartbeatRequest,
    ) -> Pending<'a> {
        let group = req.group_id.to_string();
        if let Some(topics) = &mut req.subscribed_topic_names {
            topics.retain_mut(|topic| match self.place(topic) {
                Place::Upstream(c, upstream) if c == cluster => {
                    *topic = name(&upstream);
                    true
                }
                _ => {
                    tracing::warn!(
                        group,
                        cluster,
                        topic = topic.as_str(),
                        "a consumer group coordinated by its cluster subscribes to a topic that \
                         lives elsewhere: left out of its subscription"
                    );
                    false
                }
            });
        }
        // The mask is its own inverse: a client's id gives the cluster's.
        for t in req.topic_partitions.iter_mut().flatten() {
            t.topic_id = client_topic_id(cluster, t.topic_id.as_u128());
        }
        let member_id = req.member_id.clone();
        self.forward(
            session,
            &head,
            Coordinator::prompt(cluster, group),
            req,
            |r: &ConsumerGroupHeartbeatResponse| r.error_code,
            move |answer| {
                ResponseKind::ConsumerGroupHeartbeat(match answer {
                    Ok(mut response) => {
                        if let Some(assignment) = &mut response.assignment {
                            for t in &mut assignment.topic_partitions {
                                t.topic_id = client_topic_id(cluster, t.topic_id.as_u128());
                            }
                        }
                        response
                    }
                    Err(e) => ConsumerGroupHeartbeatResponse::default()
                        .with_error_code(coordinator_code(&e))
                        .with_member_id(Some(member_id)),
                })
            },
        )
        .await
    }

    pub(super) async fn delegate_leave<'a>(
        &'a self,
        session: &mut Session,
        head: Head,
        cluster: &'a str,
        req: LeaveGroupRequest,
    ) -> Pending<'a> {
        let group = req.group_id.to_string();
        self.forward(
            session,
            &head,
            Coordinator::prompt(cluster, group),
            req,
            |r: &LeaveGroupResponse| r.error_code,
            |answer| {
                ResponseKind::LeaveGroup(
                    answer.unwrap_or_else(|e| {
                        LeaveGroupResponse::default().with_error_code(coordinator_code(&e))
                    }),
                )
            },
        )
        .await
    }

    /// A delegated group's commit: its cluster's topics go to the
    /// coordinator under the cluster's names with the member's generation
    /// (the coordinator fences it); a topic that lives elsewhere cannot be
    /// committed by a group its cluster runs (UNKNOWN_TOPIC_OR_PARTITION,
    /// logged: route the group `to: local` to commit across clusters).
    pub(super) async fn delegate_commit<'a>(
        &'a self,
        session: &mut Session,
        head: Head,
        cluster: &'a str,
        mut req: OffsetCommitRequest,
    ) -> Pending<'a> {
        let group = req.group_id.to_string();
        let mut refused: Vec<OffsetCommitResponseTopic> = Vec::new();
        // (client name, name upstream), in request order.
        let mut names: Vec<(String, String)> = Vec::new();
        req.topics.retain_mut(|topic| {
            let client = topic.name.to_string();
            match self.place(&client) {
                Place::Upstream(c, upstream) if c == cluster => {
                    topic.name = name(&upstream);
                    names.push((client, upstream));
                    true
                }
                _ => {
                    tracing::warn!(
                        group,
                        cluster,
                        topic = client,
                        "a group coordinated by its cluster commits a topic that lives elsewhere: \
                         refused; route the group `to: local` to commit across clusters"
                    );
                    refused.push(
                        OffsetCommitResponseTopic::default()
                            .with_name(topic.name.clone())
                            .with_partitions(
                                topic
                                    .partitions
                                    .iter()
                                    .map(|p| {
                                        OffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                                    })
                                    .collect(),
                            ),
                    );
                    false
                }
            }
        });
        let asked: Vec<(String, Vec<i32>)> = req
            .topics
            .iter()
            .map(|t| {
                (
                    t.name.to_string(),
                    t.partitions.iter().map(|p| p.partition_index).collect(),
                )
            })
            .collect();
        if req.topics.is_empty() {
            let response = OffsetCommitResponse::default().with_topics(refused);
            return Box::pin(std::future::ready(Reply::Respond(Box::new(
                ResponseKind::OffsetCommit(response),
            ))));
        }
        self.forward(
            session,
            &head,
            Coordinator::prompt(cluster, group),
            req,
            |r: &OffsetCommitResponse| {
                r.topics
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .map(|p| p.error_code)
                    .find(|c| *c != 0)
                    .unwrap_or(0)
            },
            move |answer| {
                let mut response = match answer {
                    Ok(mut response) => {
                        for topic in &mut response.topics {
                            if let Some((client, _)) = names.iter().find(|(_, u)| u == topic.name.as_str()) {
                                topic.name = name(client);
                            }
                        }
                        response
                    }
                    Err(e) => {
                        let code = coordinator_code(&e);
                        OffsetCommitResponse::default().with_topics(
                            asked
                                .iter()
                                .map(|(upstream, partitions)| {
                                    let client = names
                                        .iter()
                                        .find(|(_, u)| u == upstream)
                                        .map_or(upstream.as_str(), |(c, _)| c.as_str());
                                    OffsetCommitResponseTopic::default()
                                        .with_name(name(client))
                                        .with_partitions(
                                            partitions
                                                .iter()
                                                .map(|p| {
                                                    OffsetCommitResponsePartition::default()
                                                        .with_partition_index(*p)
                                                        .with_error_code(code)
                                                })
                                                .collect(),
                                        )
                                })
                                .collect(),
                        )
                    }
                };
                response.topics.extend(refused);
                ResponseKind::OffsetCommit(response)
            },
        )
        .await
    }

    /// DescribeGroups: local groups from the local coordinator, delegated
    /// ones from their clusters (names in their members' subscriptions and
    /// assignments as clients see them), in request order.
    pub(super) fn describe_groups<'a>(
        &'a self,
        session: &mut Session,
        head: Head,
        req: DescribeGroupsRequest,
    ) -> Pending<'a> {
        let local = self.local(session, &head);
        let version = head.version;
        Box::pin(async move {
            let mut local_req = req.clone();
            local_req.groups.retain(|g| self.coordinated_by(g).is_none());
            let local_part = async {
                if local_req.groups.is_empty() {
                    return Vec::new();
                }
                local.ask(local_req).await.map(|r| r.groups).unwrap_or_default()
            };
            let delegated = join_all(req.groups.iter().filter_map(|g| {
                let cluster = self.coordinated_by(g)?;
                Some(self.describe_upstream(cluster, g, version, req.include_authorized_operations))
            }));
            let (local_groups, delegated) = futures_util::future::join(local_part, delegated).await;
            let mut found: Vec<DescribedGroup> = local_groups.into_iter().chain(delegated).collect();
            let mut response = DescribeGroupsResponse::default();
            for g in &req.groups {
                if let Some(at) = found.iter().position(|d| d.group_id == *g) {
                    response.groups.push(found.swap_remove(at));
                }
            }
            Reply::Respond(Box::new(ResponseKind::DescribeGroups(response)))
        })
    }

    async fn describe_upstream(
        &self,
        cluster: &str,
        group: &str,
        version: i16,
        operations: bool,
    ) -> DescribedGroup {
        let answer = self
            .ask_coordinator(
                cluster,
                group,
                version,
                |version| {
                    let mut request = DescribeGroupsRequest::default().with_groups(vec![group_id(group)]);
                    if version >= 3 {
                        request.include_authorized_operations = operations;
                    }
                    request
                },
                |r: DescribeGroupsResponse| r.groups.into_iter().next(),
            )
            .await;
        match answer {
            Ok(mut described) => {
                if described.protocol_type.as_str() == "consumer" {
                    let down = |t: &str| self.client_name(cluster, t);
                    for member in &mut described.members {
                        member.member_metadata = rename_subscription(&member.member_metadata, &down);
                        member.member_assignment = rename_assignment(&member.member_assignment, &down);
                    }
                }
                described
            }
            Err(code) => DescribedGroup::default()
                .with_group_id(group_id(group))
                .with_error_code(code),
        }
    }

    /// ConsumerGroupDescribe (KIP-848): delegated groups from their
    /// clusters' coordinators, topics under the clients' names and ids; a
    /// group of the local coordinator is GROUP_ID_NOT_FOUND, as Kafka
    /// answers for a classic group (admin clients then ask DescribeGroups).
    pub(super) fn describe_consumer_groups<'a>(
        &'a self,
        head: Head,
        req: ConsumerGroupDescribeRequest,
    ) -> Pending<'a> {
        Box::pin(async move {
            let described = join_all(req.group_ids.iter().map(|g| async move {
                let Some(cluster) = self.coordinated_by(g) else {
                    return consumer_group_describe_response::DescribedGroup::default()
                        .with_group_id(g.clone())
                        .with_error_code(ResponseError::GroupIdNotFound.code())
                        .with_error_message(Some(StrBytes::from_string(format!(
                            "group {} is run by Strait's own coordinator, which speaks the classic protocol only",
                            g.as_str()
                        ))));
                };
                self.describe_consumer_group(cluster, g, head.version, req.include_authorized_operations)
                    .await
            }))
            .await;
            Reply::Respond(Box::new(ResponseKind::ConsumerGroupDescribe(
                ConsumerGroupDescribeResponse::default().with_groups(described),
            )))
        })
    }

    async fn describe_consumer_group(
        &self,
        cluster: &str,
        group: &GroupId,
        version: i16,
        operations: bool,
    ) -> consumer_group_describe_response::DescribedGroup {
        let answer = self
            .ask_coordinator(
                cluster,
                group,
                version,
                |_| {
                    ConsumerGroupDescribeRequest::default()
                        .with_group_ids(vec![group.clone()])
                        .with_include_authorized_operations(operations)
                },
                |r: ConsumerGroupDescribeResponse| r.groups.into_iter().next(),
            )
            .await;
        match answer {
            Ok(mut described) => {
                let down =
                    |t: &TopicName| name(&self.client_name(cluster, t).unwrap_or_else(|| t.to_string()));
                for member in &mut described.members {
                    for t in &mut member.subscribed_topic_names {
                        *t = down(t);
                    }
                    for t in member
                        .assignment
                        .topic_partitions
                        .iter_mut()
                        .chain(&mut member.target_assignment.topic_partitions)
                    {
                        t.topic_id = client_topic_id(cluster, t.topic_id.as_u128());
                        t.topic_name = down(&t.topic_name);
                    }
                }
                described
            }
            Err(code) => consumer_group_describe_response::DescribedGroup::default()
                .with_group_id(group.clone())
                .with_error_code(code),
        }
    }

    /// DeleteGroups, split between the local coordinator and the clusters.
    pub(super) fn delete_groups<'a>(
        &'a self,
        session: &mut Session,
        head: Head,
        req: DeleteGroupsRequest,
    ) -> Pending<'a> {
        let local = self.local(session, &head);
        let version = head.version;
        Box::pin(async move {
            let mut local_req = req.clone();
            local_req
                .groups_names
                .retain(|g| self.coordinated_by(g).is_none());
            let local_part = async {
                if local_req.groups_names.is_empty() {
                    return Vec::new();
                }
                local.ask(local_req).await.map(|r| r.results).unwrap_or_default()
            };
            let delegated = join_all(req.groups_names.iter().filter_map(|g| {
                let cluster = self.coordinated_by(g)?;
                Some(async move {
                    self.ask_coordinator(
                        cluster,
                        g,
                        version,
                        |_| DeleteGroupsRequest::default().with_groups_names(vec![g.clone()]),
                        |r: DeleteGroupsResponse| r.results.into_iter().next(),
                    )
                    .await
                    .unwrap_or_else(|code| {
                        DeletableGroupResult::default()
                            .with_group_id(g.clone())
                            .with_error_code(code)
                    })
                })
            }));
            let (local_results, delegated) = futures_util::future::join(local_part, delegated).await;
            let mut found: Vec<DeletableGroupResult> = local_results.into_iter().chain(delegated).collect();
            let mut response = DeleteGroupsResponse::default();
            for g in &req.groups_names {
                if let Some(at) = found.iter().position(|r| r.group_id == *g) {
                    response.results.push(found.swap_remove(at));
                }
            }
            Reply::Respond(Box::new(ResponseKind::DeleteGroups(response)))
        })
    }

    /// ListGroups: the local coordinator's groups and, from every broker of
    /// each cluster that `groups:` delegates to, the groups delegated to it.
    pub(super) fn list_groups<'a>(
        &'a self,
        session: &mut Session,
        head: Head,
        req: ListGroupsRequest,
    ) -> Pending<'a> {
        let local = self.local(session, &head);
        let version = head.version;
        Box::pin(async move {
            let local_part = local.ask(req.clone());
            let clusters: Vec<&str> = self.groups.clusters().collect();
            let upstream = join_all(
                clusters
                    .iter()
                    .map(|c| list_cluster_groups(self.cluster(c), &req, version)),
            );
            let (local_answer, upstream) = futures_util::future::join(local_part, upstream).await;
            let mut response = local_answer.unwrap_or_default();
            response
                .groups
                .retain(|g| self.coordinated_by(g.group_id.as_str()).is_none());
            for (cluster, groups) in clusters.iter().zip(upstream) {
                match groups {
                    Ok(groups) => response.groups.extend(
                        groups
                            .into_iter()
                            .filter(|g| self.coordinated_by(g.group_id.as_str()) == Some(*cluster)),
                    ),
                    Err(e) => {
                        tracing::debug!(cluster, error = %e, "listing the cluster's groups failed");
                        response.error_code = coordinator_code(&e);
                    }
                }
            }
            Reply::Respond(Box::new(ResponseKind::ListGroups(response)))
        })
    }
}

/// Every group the brokers of `cluster` coordinate.
async fn list_cluster_groups(
    cluster: &Cluster,
    req: &ListGroupsRequest,
    version: i16,
) -> Result<Vec<kafka_protocol::messages::list_groups_response::ListedGroup>, UpstreamError> {
    let metadata = cluster.metadata().await?;
    let nodes: Vec<i32> = metadata.brokers.keys().copied().collect();
    let answers = join_all(nodes.into_iter().map(|node| async move {
        let connection = cluster.broker(node).await?;
        let v = connection.version(ApiKey::ListGroups)?.min(version);
        let mut request = ListGroupsRequest::default();
        if v >= 4 {
            request.states_filter = req.states_filter.clone();
        }
        let response = connection.request_at(&request, v).await?;
        strait_upstream::error::check(
            cluster.name(),
            || format!("ListGroups on broker {node}"),
            response.error_code,
        )?;
        Ok::<_, UpstreamError>(response.groups)
    }))
    .await;
    let mut groups = Vec::new();
    for answer in answers {
        groups.extend(answer?);
    }
    Ok(groups)
}
