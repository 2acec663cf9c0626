//! What a principal may do: every request is checked against `acls:`
//! here, on the names clients use, after the login gate and before the
//! router splits it by destination. Local topics, routed topics, local
//! groups and delegated groups are all checked the same way, by this one
//! module.
//!
//! Each API is checked as Kafka's brokers check it (the operation and
//! resource of each part, and the code a denial is answered with):
//!
//! - What is denied is taken out of the request and answered here: its
//!   entries (per topic, partition, group or coordinator key) are added to
//!   the answer of the rest ([`Verdict::Go`] with an [`Amend`]), or make
//!   the whole answer when nothing is left ([`Verdict::Answer`]). Nothing
//!   denied reaches the local broker or an upstream.
//! - A request for a whole group or the cluster that is denied is answered
//!   with the denial alone.
//! - Listings (Metadata of every topic, OffsetFetch of every topic,
//!   ListGroups) leave out what the principal may not Describe.
//! - `acks=0` Produce requests with a denied topic close the connection
//!   (after the rest is written), as Kafka does: the client has no other
//!   way to learn of it.
//! - Authorized operations (KIP-430), where a request asks for them, are
//!   the principal's under the rules.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use strait_config::{Acls, Operation, ResourceType};

use crate::broker::Reply;
use crate::codec::Request;
use crate::error::{kafka_code, Failure};

/// The answer to what a request asks that the rules deny.
#[derive(Debug, Clone, Copy)]
struct Denied(ResourceType);

impl Denied {
    fn code(self) -> i16 {
        kafka_code(Failure::Denied(self.0)).code()
    }
}

const TOPIC: Denied = Denied(ResourceType::Topic);
const GROUP: Denied = Denied(ResourceType::Group);
const CLUSTER: Denied = Denied(ResourceType::Cluster);
const TRANSACTIONAL_ID: Denied = Denied(ResourceType::TransactionalId);

/// The compiled `acls:`, asked for every request of every connection.
#[derive(Debug, Clone)]
pub struct Authorizer {
    acls: Arc<Acls>,
}

/// What becomes of a request.
#[derive(Debug)]
pub enum Verdict {
    /// On to the router, perhaps with less in it; its reply is amended.
    Go(Box<Request>, Amend),
    /// Answered here: everything it asked is denied.
    Answer(Reply),
}

/// What the denied parts of a request add to the reply of the rest.
#[derive(Default)]
pub struct Amend(Option<Box<dyn FnOnce(Reply) -> Reply + Send>>);

impl std::fmt::Debug for Amend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Amend" } else { "Amend(none)" })
    }
}

impl Amend {
    fn new(amend: impl FnOnce(Reply) -> Reply + Send + 'static) -> Amend {
        Amend(Some(Box::new(amend)))
    }

    /// Amends the response of a reply.
    fn response(amend: impl FnOnce(&mut ResponseKind) + Send + 'static) -> Amend {
        Amend::new(move |reply| match reply {
            Reply::Respond(mut body) => {
                amend(&mut body);
                Reply::Respond(body)
            }
            other => other,
        })
    }

    /// `reply`, with what the denied parts add.
    pub fn apply(self, reply: Reply) -> Reply {
        match self.0 {
            Some(amend) => amend(reply),
            None => reply,
        }
    }
}

/// One principal under the rules.
#[derive(Debug, Clone)]
struct Who {
    acls: Arc<Acls>,
    principal: String,
}

impl Who {
    fn may(&self, kind: ResourceType, name: &str, operation: Operation) -> bool {
        self.acls.allows(&self.principal, kind, name, operation)
    }

    fn topic(&self, name: &str, operation: Operation) -> bool {
        self.may(ResourceType::Topic, name, operation)
    }

    fn group(&self, name: &str, operation: Operation) -> bool {
        self.may(ResourceType::Group, name, operation)
    }

    fn cluster(&self, operation: Operation) -> bool {
        self.may(ResourceType::Cluster, "", operation)
    }

    /// Create on the cluster, or on the topic.
    fn may_create(&self, topic: &str) -> bool {
        self.cluster(Operation::Create) || self.topic(topic, Operation::Create)
    }

    /// The KIP-430 bit field of what the principal may do on a resource:
    /// bit n for Kafka's AclOperation code n, among the operations that
    /// apply to its kind.
    fn operations(&self, kind: ResourceType, name: &str) -> i32 {
        use Operation::*;
        let applies: &[(Operation, u32)] = match kind {
            ResourceType::Topic => &[
                (Read, 3),
                (Write, 4),
                (Create, 5),
                (Delete, 6),
                (Alter, 7),
                (Describe, 8),
                (DescribeConfigs, 10),
                (AlterConfigs, 11),
            ],
            ResourceType::Group => &[(Read, 3), (Delete, 6), (Describe, 8)],
            ResourceType::Cluster => &[
                (Create, 5),
                (Alter, 7),
                (Describe, 8),
                (DescribeConfigs, 10),
                (AlterConfigs, 11),
                (IdempotentWrite, 12),
            ],
            ResourceType::TransactionalId => &[(Write, 4), (Describe, 8)],
        };
        applies
            .iter()
            .filter(|(operation, _)| self.may(kind, name, *operation))
            .fold(0, |bits, (_, bit)| bits | 1 << bit)
    }
}

/// Takes the items `allowed` refuses out of `items`, in their order.
fn deny<T>(items: &mut Vec<T>, allowed: impl Fn(&T) -> bool) -> Vec<T> {
    let (kept, denied) = std::mem::take(items).into_iter().partition(|item| allowed(item));
    *items = kept;
    denied
}

/// The request `body` goes on when something is left in it (`left`), its
/// reply's entries (`slot`) gaining the `denied` ones; when nothing is
/// left, those entries are the whole answer (an `empty` response with
/// them).
fn strip<A: Send + 'static>(
    head: Request,
    body: RequestKind,
    left: bool,
    denied: Vec<A>,
    slot: fn(&mut ResponseKind) -> Option<&mut Vec<A>>,
    empty: fn() -> ResponseKind,
) -> Verdict {
    if denied.is_empty() {
        return go(head, body);
    }
    let add = move |response: &mut ResponseKind| {
        if let Some(entries) = slot(response) {
            entries.extend(denied);
        }
    };
    if !left {
        let mut response = empty();
        add(&mut response);
        return Verdict::Answer(Reply::Respond(Box::new(response)));
    }
    amended(head, body, Amend::response(add))
}

/// The request of `head` with `body`, on as it is.
fn go(head: Request, body: RequestKind) -> Verdict {
    amended(head, body, Amend::default())
}

/// The request of `head` with `body` on, its reply amended by `amend`.
fn amended(head: Request, body: RequestKind, amend: Amend) -> Verdict {
    Verdict::Go(Box::new(Request { body, ..head }), amend)
}

/// [`strip`] of a `$api` request, whose response lists its entries in
/// `$entries`.
macro_rules! strip_in {
    ($head:expr, $api:ident, $request:expr, $left:expr, $denied:expr, $entries:ident) => {
        strip(
            $head,
            RequestKind::$api($request),
            $left,
            $denied,
            |r| match r {
                ResponseKind::$api(r) => Some(&mut r.$entries),
                _ => None,
            },
            || ResponseKind::$api(Default::default()),
        )
    };
}

/// An answer of one response alone.
fn answer(response: ResponseKind) -> Verdict {
    Verdict::Answer(Reply::Respond(Box::new(response)))
}

impl Authorizer {
    /// The rules of `acls`.
    pub fn new(acls: Acls) -> Authorizer {
        Authorizer { acls: Arc::new(acls) }
    }

    /// Checks `request` of `principal`; `named` gives the client's name
    /// of a topic a request names by id (`None`: no topic has it, and the
    /// request goes on to be answered UNKNOWN_TOPIC_ID).
    pub fn check(
        &self,
        principal: &str,
        request: Request,
        named: &dyn Fn(uuid::Uuid) -> Option<String>,
    ) -> Verdict {
        let who = Who {
            acls: Arc::clone(&self.acls),
            principal: principal.to_owned(),
        };
        let head = Request {
            body: RequestKind::ApiVersions(ApiVersionsRequest::default()),
            ..request
        };
        use Operation::*;
        match request.body {
            RequestKind::Produce(r) => produce(&who, head, r),
            RequestKind::Fetch(r) => fetch(&who, head, r, named),
            RequestKind::ListOffsets(r) => list_offsets(&who, head, r),
            RequestKind::OffsetForLeaderEpoch(r) => offset_for_leader_epoch(&who, head, r),
            RequestKind::DeleteRecords(r) => delete_records(&who, head, r),
            RequestKind::Metadata(r) => metadata(&who, head, r, named),
            RequestKind::OffsetCommit(r) => offset_commit(&who, head, r),
            RequestKind::OffsetFetch(r) => offset_fetch(&who, head, r),
            RequestKind::FindCoordinator(r) => find_coordinator(&who, head, r),
            RequestKind::JoinGroup(r) if !who.group(&r.group_id, Read) => answer(ResponseKind::JoinGroup(
                JoinGroupResponse::default()
                    .with_error_code(GROUP.code())
                    .with_generation_id(-1),
            )),
            RequestKind::SyncGroup(r) if !who.group(&r.group_id, Read) => answer(ResponseKind::SyncGroup(
                SyncGroupResponse::default().with_error_code(GROUP.code()),
            )),
            RequestKind::Heartbeat(r) if !who.group(&r.group_id, Read) => answer(ResponseKind::Heartbeat(
                HeartbeatResponse::default().with_error_code(GROUP.code()),
            )),
            RequestKind::LeaveGroup(r) if !who.group(&r.group_id, Read) => answer(ResponseKind::LeaveGroup(
                LeaveGroupResponse::default().with_error_code(GROUP.code()),
            )),
            RequestKind::ConsumerGroupHeartbeat(r) => consumer_group_heartbeat(&who, head, r),
            RequestKind::DescribeGroups(r) => describe_groups(&who, head, r),
            RequestKind::ConsumerGroupDescribe(r) => consumer_group_describe(&who, head, r),
            RequestKind::DeleteGroups(r) => delete_groups(&who, head, r),
            RequestKind::ListGroups(r) => list_groups(&who, head, r),
            RequestKind::CreateTopics(r) => create_topics(&who, head, r),
            RequestKind::DeleteTopics(r) => delete_topics(&who, head, r, named),
            RequestKind::CreatePartitions(r) => create_partitions(&who, head, r),
            RequestKind::DescribeConfigs(r) => describe_configs(&who, head, r),
            RequestKind::InitProducerId(r) => init_producer_id(&who, head, r),
            RequestKind::DescribeCluster(r) => describe_cluster(&who, head, r),
            body => go(head, body),
        }
    }
}

/// ListOffsets: Describe on every topic.
fn list_offsets(who: &Who, head: Request, mut r: ListOffsetsRequest) -> Verdict {
    use Operation::*;
    let denied = deny(&mut r.topics, |t| who.topic(&t.name, Describe))
        .into_iter()
        .map(|t| {
            let partitions = t.partitions.iter().map(|p| {
                ListOffsetsPartitionResponse::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(TOPIC.code())
                    .with_timestamp(-1)
                    .with_offset(-1)
            });
            ListOffsetsTopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions.collect())
        })
        .collect();
    let left = !r.topics.is_empty();
    strip_in!(head, ListOffsets, r, left, denied, topics)
}

/// OffsetForLeaderEpoch: Describe on every topic.
fn offset_for_leader_epoch(who: &Who, head: Request, mut r: OffsetForLeaderEpochRequest) -> Verdict {
    use Operation::*;
    let denied = deny(&mut r.topics, |t| who.topic(&t.topic, Describe))
        .into_iter()
        .map(|t| {
            let partitions = t.partitions.iter().map(|p| {
                EpochEndOffset::default()
                    .with_partition(p.partition)
                    .with_error_code(TOPIC.code())
            });
            OffsetForLeaderTopicResult::default()
                .with_topic(t.topic)
                .with_partitions(partitions.collect())
        })
        .collect();
    let left = !r.topics.is_empty();
    strip_in!(head, OffsetForLeaderEpoch, r, left, denied, topics)
}

/// DeleteRecords: Delete on every topic.
fn delete_records(who: &Who, head: Request, mut r: DeleteRecordsRequest) -> Verdict {
    use Operation::*;
    let denied = deny(&mut r.topics, |t| who.topic(&t.name, Delete))
        .into_iter()
        .map(|t| {
            let partitions = t.partitions.iter().map(|p| {
                DeleteRecordsPartitionResult::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(TOPIC.code())
                    .with_low_watermark(-1)
            });
            DeleteRecordsTopicResult::default()
                .with_name(t.name)
                .with_partitions(partitions.collect())
        })
        .collect();
    let left = !r.topics.is_empty();
    strip_in!(head, DeleteRecords, r, left, denied, topics)
}

/// OffsetCommit: Read on the group (else every partition is answered
/// GROUP_AUTHORIZATION_FAILED) and on every topic.
fn offset_commit(who: &Who, head: Request, mut r: OffsetCommitRequest) -> Verdict {
    use Operation::*;
    let group = who.group(&r.group_id, Read);
    let denied = deny(&mut r.topics, |t| group && who.topic(&t.name, Read))
        .into_iter()
        .map(|t| {
            let code = if group { TOPIC.code() } else { GROUP.code() };
            let partitions = t.partitions.iter().map(|p| {
                OffsetCommitResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code)
            });
            OffsetCommitResponseTopic::default()
                .with_name(t.name)
                .with_partitions(partitions.collect())
        })
        .collect();
    let left = group && !r.topics.is_empty();
    strip_in!(head, OffsetCommit, r, left, denied, topics)
}

/// FindCoordinator: Describe on the group or transactional id of each key.
fn find_coordinator(who: &Who, head: Request, mut r: FindCoordinatorRequest) -> Verdict {
    use Operation::*;
    let allowed = |key: &str, key_type: i8| match key_type {
        0 => who.group(key, Describe),
        1 => who.may(ResourceType::TransactionalId, key, Describe),
        _ => true,
    };
    let code = if r.key_type == 1 {
        TRANSACTIONAL_ID.code()
    } else {
        GROUP.code()
    };
    if head.version < 4 {
        if allowed(&r.key, r.key_type) {
            return go(head, RequestKind::FindCoordinator(r));
        }
        return answer(ResponseKind::FindCoordinator(
            FindCoordinatorResponse::default()
                .with_error_code(code)
                .with_node_id(BrokerId(-1))
                .with_port(-1),
        ));
    }
    let key_type = r.key_type;
    let denied = deny(&mut r.coordinator_keys, |key| allowed(key, key_type))
        .into_iter()
        .map(|key| {
            Coordinator::default()
                .with_key(key)
                .with_node_id(BrokerId(-1))
                .with_port(-1)
                .with_error_code(code)
        })
        .collect();
    let left = !r.coordinator_keys.is_empty();
    strip_in!(head, FindCoordinator, r, left, denied, coordinators)
}

/// ConsumerGroupHeartbeat (KIP-848): Read on the group, Describe on every
/// topic subscribed to by name.
fn consumer_group_heartbeat(who: &Who, head: Request, r: ConsumerGroupHeartbeatRequest) -> Verdict {
    use Operation::*;
    let (code, message) = if !who.group(&r.group_id, Read) {
        (GROUP.code(), None)
    } else {
        let hidden: Vec<&str> = r
            .subscribed_topic_names
            .iter()
            .flatten()
            .map(|t| t.as_str())
            .filter(|t| !who.topic(t, Describe))
            .collect();
        if hidden.is_empty() {
            return go(head, RequestKind::ConsumerGroupHeartbeat(r));
        }
        (
            TOPIC.code(),
            Some(format!("not authorized to describe {}", hidden.join(", "))),
        )
    };
    answer(ResponseKind::ConsumerGroupHeartbeat(
        ConsumerGroupHeartbeatResponse::default()
            .with_error_code(code)
            .with_error_message(message.map(StrBytes::from_string)),
    ))
}

/// DescribeGroups and ConsumerGroupDescribe (`$api`, the function
/// `$name`): Describe on each group (the request's `$ids`; `$described`
/// the response's entry of a group).
macro_rules! describe_groups {
    ($name:ident, $api:ident, $request:ty, $ids:ident, $described:ty) => {
        fn $name(who: &Who, head: Request, mut r: $request) -> Verdict {
            let denied = deny(&mut r.$ids, |g| who.group(g, Operation::Describe))
                .into_iter()
                .map(|group| {
                    <$described>::default()
                        .with_group_id(group)
                        .with_error_code(GROUP.code())
                })
                .collect();
            let left = !r.$ids.is_empty();
            let operations = r.include_authorized_operations;
            let verdict = strip_in!(head, $api, r, left, denied, groups);
            with_operations(verdict, operations, who.clone(), |who, response| {
                if let ResponseKind::$api(r) = response {
                    for g in r.groups.iter_mut().filter(|g| g.error_code == 0) {
                        g.authorized_operations = who.operations(ResourceType::Group, &g.group_id);
                    }
                }
            })
        }
    };
}

describe_groups!(
    describe_groups,
    DescribeGroups,
    DescribeGroupsRequest,
    groups,
    describe_groups_response::DescribedGroup
);
describe_groups!(
    consumer_group_describe,
    ConsumerGroupDescribe,
    ConsumerGroupDescribeRequest,
    group_ids,
    consumer_group_describe_response::DescribedGroup
);

/// DeleteGroups: Delete on each group.
fn delete_groups(who: &Who, head: Request, mut r: DeleteGroupsRequest) -> Verdict {
    use Operation::*;
    let denied = deny(&mut r.groups_names, |g| who.group(g, Delete))
        .into_iter()
        .map(|group| {
            DeletableGroupResult::default()
                .with_group_id(group)
                .with_error_code(GROUP.code())
        })
        .collect();
    let left = !r.groups_names.is_empty();
    strip_in!(head, DeleteGroups, r, left, denied, results)
}

/// ListGroups: every group with Describe on the cluster, else the groups
/// the principal may Describe.
fn list_groups(who: &Who, head: Request, r: ListGroupsRequest) -> Verdict {
    use Operation::*;
    if who.cluster(Describe) {
        return go(head, RequestKind::ListGroups(r));
    }
    let who = who.clone();
    let amend = Amend::response(move |response| {
        if let ResponseKind::ListGroups(r) = response {
            r.groups.retain(|g| who.group(&g.group_id, Describe));
        }
    });
    amended(head, RequestKind::ListGroups(r), amend)
}

/// CreateTopics: Create on the cluster or on the topic.
fn create_topics(who: &Who, head: Request, mut r: CreateTopicsRequest) -> Verdict {
    let denied = deny(&mut r.topics, |t| who.may_create(&t.name))
        .into_iter()
        .map(|t| {
            CreatableTopicResult::default()
                .with_name(t.name)
                .with_error_code(TOPIC.code())
                .with_error_message(None)
                .with_configs(None)
        })
        .collect();
    let left = !r.topics.is_empty();
    strip_in!(head, CreateTopics, r, left, denied, topics)
}

/// DeleteTopics: Delete on every topic, named or (v6) by id.
fn delete_topics(
    who: &Who,
    head: Request,
    mut r: DeleteTopicsRequest,
    named: &dyn Fn(uuid::Uuid) -> Option<String>,
) -> Verdict {
    use Operation::*;
    let mut denied: Vec<DeletableTopicResult> = deny(&mut r.topic_names, |t| who.topic(t, Delete))
        .into_iter()
        .map(|name| DeletableTopicResult::default().with_name(Some(name)))
        .collect();
    let named_by = |t: &delete_topics_request::DeleteTopicState| match &t.name {
        Some(name) => Some(name.to_string()),
        None => named(t.topic_id),
    };
    denied.extend(
        deny(&mut r.topics, |t| {
            named_by(t).is_none_or(|name| who.topic(&name, Delete))
        })
        .into_iter()
        .map(|t| {
            DeletableTopicResult::default()
                .with_name(t.name)
                .with_topic_id(t.topic_id)
        }),
    );
    for result in &mut denied {
        result.error_code = TOPIC.code();
    }
    let left = !r.topic_names.is_empty() || !r.topics.is_empty();
    strip_in!(head, DeleteTopics, r, left, denied, responses)
}

/// CreatePartitions: Alter on every topic.
fn create_partitions(who: &Who, head: Request, mut r: CreatePartitionsRequest) -> Verdict {
    use Operation::*;
    let denied = deny(&mut r.topics, |t| who.topic(&t.name, Alter))
        .into_iter()
        .map(|t| {
            CreatePartitionsTopicResult::default()
                .with_name(t.name)
                .with_error_code(TOPIC.code())
        })
        .collect();
    let left = !r.topics.is_empty();
    strip_in!(head, CreatePartitions, r, left, denied, results)
}

/// DescribeConfigs: DescribeConfigs on each topic, group, or (brokers)
/// the cluster.
fn describe_configs(who: &Who, head: Request, mut r: DescribeConfigsRequest) -> Verdict {
    use Operation::*;
    // Kafka's ConfigResource types: 2 topic, 4 broker, 8 broker
    // logger, 32 group.
    let refusal = |resource: &describe_configs_request::DescribeConfigsResource| {
        let name = resource.resource_name.as_str();
        match resource.resource_type {
            2 => (!who.topic(name, DescribeConfigs)).then_some(TOPIC),
            4 | 8 => (!who.cluster(DescribeConfigs)).then_some(CLUSTER),
            32 => (!who.group(name, DescribeConfigs)).then_some(GROUP),
            _ => None,
        }
    };
    let denied = deny(&mut r.resources, |resource| refusal(resource).is_none())
        .into_iter()
        .map(|resource| {
            let code = refusal(&resource).map_or(0, Denied::code);
            DescribeConfigsResult::default()
                .with_error_code(code)
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name)
        })
        .collect();
    let left = !r.resources.is_empty();
    strip_in!(head, DescribeConfigs, r, left, denied, results)
}

/// InitProducerId: KIP-679: an idempotent producer needs IdempotentWrite on
/// the cluster or Write on some topic; a transactional one, Write on its
/// transactional id.
fn init_producer_id(who: &Who, head: Request, r: InitProducerIdRequest) -> Verdict {
    use Operation::*;
    let refused = match r.transactional_id.as_deref().filter(|id| !id.is_empty()) {
        Some(id) => (!who.may(ResourceType::TransactionalId, id, Write)).then_some(TRANSACTIONAL_ID),
        None => (!who.cluster(IdempotentWrite)
            && !who.acls.allows_any(&who.principal, ResourceType::Topic, Write))
        .then_some(CLUSTER),
    };
    match refused {
        None => go(head, RequestKind::InitProducerId(r)),
        Some(denied) => answer(ResponseKind::InitProducerId(
            InitProducerIdResponse::default()
                .with_error_code(denied.code())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )),
    }
}

/// DescribeCluster: Describe on the cluster.
fn describe_cluster(who: &Who, head: Request, r: DescribeClusterRequest) -> Verdict {
    use Operation::*;
    if !who.cluster(Describe) {
        return answer(ResponseKind::DescribeCluster(
            DescribeClusterResponse::default().with_error_code(CLUSTER.code()),
        ));
    }
    let operations = r.include_cluster_authorized_operations;
    with_operations(
        go(head, RequestKind::DescribeCluster(r)),
        operations,
        who.clone(),
        |who, response| {
            if let ResponseKind::DescribeCluster(r) = response {
                r.cluster_authorized_operations = who.operations(ResourceType::Cluster, "");
            }
        },
    )
}

/// `verdict`, its response given the principal's authorized operations
/// by `fill` when the request asked for them.
fn with_operations(verdict: Verdict, asked: bool, who: Who, fill: fn(&Who, &mut ResponseKind)) -> Verdict {
    if !asked {
        return verdict;
    }
    match verdict {
        Verdict::Go(request, amend) => Verdict::Go(
            request,
            Amend::new(move |reply| {
                Amend::response(move |response| fill(&who, response)).apply(amend.apply(reply))
            }),
        ),
        Verdict::Answer(Reply::Respond(mut response)) => {
            fill(&who, &mut response);
            Verdict::Answer(Reply::Respond(response))
        }
        answered => answered,
    }
}

/// Produce: Write on every topic (and on the transactional id, if any).
fn produce(who: &Who, head: Request, mut r: ProduceRequest) -> Verdict {
    let transactional = r.transactional_id.as_deref().filter(|id| !id.is_empty());
    let code = match transactional {
        Some(id) if !who.may(ResourceType::TransactionalId, id, Operation::Write) => TRANSACTIONAL_ID,
        _ => TOPIC,
    };
    let all_denied = code.0 == ResourceType::TransactionalId;
    let denied = deny(&mut r.topic_data, |t| {
        !all_denied && who.topic(&t.name, Operation::Write)
    });
    if denied.is_empty() {
        return go(head, RequestKind::Produce(r));
    }
    let left = !r.topic_data.is_empty();
    if r.acks == 0 {
        let topics: Vec<&str> = denied.iter().map(|t| t.name.as_str()).collect();
        let why = format!(
            "{} may not write to {} (acks=0: the connection is closed, as Kafka does)",
            who.principal,
            topics.join(", ")
        );
        if !left {
            return Verdict::Answer(Reply::Close(why));
        }
        let amend = Amend::new(move |reply| match reply {
            Reply::Silent => Reply::Close(why),
            other => other,
        });
        return amended(head, RequestKind::Produce(r), amend);
    }
    let denied = denied
        .into_iter()
        .map(|t| {
            let partitions = t.partition_data.iter().map(|p| {
                PartitionProduceResponse::default()
                    .with_index(p.index)
                    .with_error_code(code.code())
                    .with_base_offset(-1)
                    .with_log_append_time_ms(-1)
                    .with_log_start_offset(-1)
            });
            TopicProduceResponse::default()
                .with_name(t.name)
                .with_topic_id(t.topic_id)
                .with_partition_responses(partitions.collect())
        })
        .collect();
    strip_in!(head, Produce, r, left, denied, responses)
}

/// Fetch: Read on every topic, named or (v13+) by id.
fn fetch(
    who: &Who,
    head: Request,
    mut r: FetchRequest,
    named: &dyn Fn(uuid::Uuid) -> Option<String>,
) -> Verdict {
    let name_of = |t: &fetch_request::FetchTopic| {
        if t.topic_id.is_nil() {
            Some(t.topic.to_string())
        } else {
            named(t.topic_id)
        }
    };
    // An id that names nothing goes on, to be answered UNKNOWN_TOPIC_ID.
    let denied = deny(&mut r.topics, |t| {
        name_of(t).is_none_or(|name| who.topic(&name, Operation::Read))
    })
    .into_iter()
    .map(|t| {
        let partitions = t.partitions.iter().map(|p| {
            PartitionData::default()
                .with_partition_index(p.partition)
                .with_error_code(TOPIC.code())
                .with_high_watermark(-1)
                .with_last_stable_offset(-1)
                .with_log_start_offset(-1)
                .with_records(Some(Default::default()))
        });
        FetchableTopicResponse::default()
            .with_topic(t.topic)
            .with_topic_id(t.topic_id)
            .with_partitions(partitions.collect())
    })
    .collect();
    // A fetch session's incremental request goes on even with nothing in
    // it: it carries the session's other partitions and moves its epoch.
    let left = !r.topics.is_empty() || r.session_epoch > 0;
    strip_in!(head, Fetch, r, left, denied, responses)
}

/// Metadata: Describe on every topic. A topic asked for by name that the
/// principal may not Describe is answered TOPIC_AUTHORIZATION_FAILED
/// (whether it exists or not); a listing of every topic leaves it out.
/// Topics are created on the fly only with Create on the cluster or on
/// every topic asked for.
fn metadata(
    who: &Who,
    head: Request,
    mut r: MetadataRequest,
    named: &dyn Fn(uuid::Uuid) -> Option<String>,
) -> Verdict {
    let version = head.version;
    let name_of = |t: &metadata_request::MetadataRequestTopic| match &t.name {
        Some(name) => Some(name.to_string()),
        None => named(t.topic_id),
    };
    let mut denied = Vec::new();
    // The topics asked for by name (`None`: every topic; v0 asks for
    // every topic with an empty list).
    let mut asked: Option<HashSet<String>> = None;
    if let Some(topics) = r.topics.as_mut().filter(|t| version > 0 || !t.is_empty()) {
        asked = Some(topics.iter().filter_map(name_of).collect());
        denied = deny(topics, |t| {
            name_of(t).is_none_or(|name| who.topic(&name, Operation::Describe))
        })
        .into_iter()
        .map(|t| {
            MetadataResponseTopic::default()
                .with_name(t.name)
                .with_topic_id(t.topic_id)
                .with_error_code(TOPIC.code())
        })
        .collect();
        if r.allow_auto_topic_creation
            && !topics
                .iter()
                .filter_map(name_of)
                .all(|name| who.may_create(&name))
        {
            r.allow_auto_topic_creation = false;
        }
    }
    let topic_operations = r.include_topic_authorized_operations;
    let cluster_operations = r.include_cluster_authorized_operations;
    let who = who.clone();
    let amend = Amend::response(move |response| {
        let ResponseKind::Metadata(response) = response else {
            return;
        };
        response.topics.retain(|t| {
            t.name.as_ref().is_none_or(|name| {
                who.topic(name, Operation::Describe)
                    && asked.as_ref().is_none_or(|a| a.contains(name.as_str()))
            })
        });
        if topic_operations {
            for t in response.topics.iter_mut().filter(|t| t.error_code == 0) {
                if let Some(name) = &t.name {
                    t.topic_authorized_operations = who.operations(ResourceType::Topic, name);
                }
            }
        }
        if cluster_operations {
            response.cluster_authorized_operations = who.operations(ResourceType::Cluster, "");
        }
        response.topics.extend(denied);
    });
    amended(head, RequestKind::Metadata(r), amend)
}

/// OffsetFetch: Describe on the group and on every topic. A group denied
/// is answered GROUP_AUTHORIZATION_FAILED; topics asked for and denied,
/// TOPIC_AUTHORIZATION_FAILED; a listing of every topic leaves them out.
fn offset_fetch(who: &Who, head: Request, mut r: OffsetFetchRequest) -> Verdict {
    use Operation::Describe;
    let denied_partition = |index: i32, code: i16| {
        OffsetFetchResponsePartitions::default()
            .with_partition_index(index)
            .with_committed_offset(-1)
            .with_error_code(code)
    };
    if head.version < 8 {
        // One group, its error at the top (v2+) and in each partition
        // asked for (v0-v1 have no other place).
        let group = who.group(&r.group_id, Describe);
        let mut denied: Vec<OffsetFetchResponseTopic> = Vec::new();
        if let Some(topics) = r.topics.as_mut() {
            let code = if group { TOPIC.code() } else { GROUP.code() };
            denied = deny(topics, |t| group && who.topic(&t.name, Describe))
                .into_iter()
                .map(|t| {
                    let partitions = t.partition_indexes.iter().map(|&index| {
                        OffsetFetchResponsePartition::default()
                            .with_partition_index(index)
                            .with_committed_offset(-1)
                            .with_error_code(code)
                    });
                    OffsetFetchResponseTopic::default()
                        .with_name(t.name)
                        .with_partitions(partitions.collect())
                })
                .collect();
        }
        if !group {
            return answer(ResponseKind::OffsetFetch(
                OffsetFetchResponse::default()
                    .with_error_code(GROUP.code())
                    .with_topics(denied),
            ));
        }
        let who = who.clone();
        let amend = Amend::response(move |response| {
            if let ResponseKind::OffsetFetch(response) = response {
                response.topics.retain(|t| who.topic(&t.name, Describe));
                response.topics.extend(denied);
            }
        });
        return amended(head, RequestKind::OffsetFetch(r), amend);
    }
    // v8+: groups in a batch, each with its own error.
    let denied_groups: Vec<OffsetFetchResponseGroup> =
        deny(&mut r.groups, |g| who.group(&g.group_id, Describe))
            .into_iter()
            .map(|g| {
                OffsetFetchResponseGroup::default()
                    .with_group_id(g.group_id)
                    .with_error_code(GROUP.code())
            })
            .collect();
    let mut denied_topics: HashMap<String, Vec<OffsetFetchResponseTopics>> = HashMap::new();
    for group in &mut r.groups {
        let Some(topics) = group.topics.as_mut() else {
            continue;
        };
        let denied: Vec<OffsetFetchResponseTopics> = deny(topics, |t| who.topic(&t.name, Describe))
            .into_iter()
            .map(|t| {
                let partitions = t
                    .partition_indexes
                    .iter()
                    .map(|&index| denied_partition(index, TOPIC.code()));
                OffsetFetchResponseTopics::default()
                    .with_name(t.name)
                    .with_topic_id(t.topic_id)
                    .with_partitions(partitions.collect())
            })
            .collect();
        if !denied.is_empty() {
            denied_topics.insert(group.group_id.to_string(), denied);
        }
    }
    if r.groups.is_empty() {
        return answer(ResponseKind::OffsetFetch(
            OffsetFetchResponse::default().with_groups(denied_groups),
        ));
    }
    let who = who.clone();
    let amend = Amend::response(move |response| {
        let ResponseKind::OffsetFetch(response) = response else {
            return;
        };
        for group in &mut response.groups {
            group.topics.retain(|t| who.topic(&t.name, Describe));
            if let Some(denied) = denied_topics.remove(group.group_id.as_str()) {
                group.topics.extend(denied);
            }
        }
        response.groups.extend(denied_groups);
    });
    amended(head, RequestKind::OffsetFetch(r), amend)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::protocol::StrBytes;

    fn authorizer(yaml: &str) -> Authorizer {
        let config = strait_config::Config::parse(&format!("acls:\n{yaml}"), "test").unwrap();
        Authorizer::new(config.acls().unwrap())
    }

    fn request(version: i16, body: RequestKind) -> Request {
        Request {
            api: ApiKey::Produce,
            version,
            correlation_id: 7,
            client_id: None,
            body,
        }
    }

    fn topic(name: &str) -> TopicName {
        TopicName(StrBytes::from_string(name.to_owned()))
    }

    fn no_ids(_: uuid::Uuid) -> Option<String> {
        None
    }

    const RULES: &str = r#"
- { principal: "User:alice", allow: [Write, Read], topic: { prefix: "orders." } }
- { principal: "User:alice", deny: [Write], topic: { exact: orders.audit } }
- { principal: "User:alice", allow: [Read], group: { exact: billing } }
"#;

    #[test]
    fn produce_keeps_what_is_allowed_and_answers_the_rest() {
        let acls = authorizer(RULES);
        let produce = |acks: i16| {
            let partition = |i| PartitionProduceData::default().with_index(i);
            RequestKind::Produce(ProduceRequest::default().with_acks(acks).with_topic_data(vec![
                    TopicProduceData::default()
                        .with_name(topic("orders.eu"))
                        .with_partition_data(vec![partition(0)]),
                    TopicProduceData::default()
                        .with_name(topic("orders.audit"))
                        .with_partition_data(vec![partition(0), partition(1)]),
                ]))
        };
        let Verdict::Go(passed, amend) = acls.check("User:alice", request(9, produce(-1)), &no_ids) else {
            panic!("nothing passed")
        };
        let RequestKind::Produce(passed) = passed.body else {
            panic!()
        };
        let names: Vec<&str> = passed.topic_data.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["orders.eu"]);
        let reply = amend.apply(Reply::Respond(Box::new(
            ResponseKind::Produce(Default::default()),
        )));
        let Reply::Respond(body) = reply else { panic!() };
        let ResponseKind::Produce(response) = *body else {
            panic!()
        };
        assert_eq!(response.responses.len(), 1);
        assert_eq!(response.responses[0].name.as_str(), "orders.audit");
        let codes: Vec<i16> = response.responses[0]
            .partition_responses
            .iter()
            .map(|p| p.error_code)
            .collect();
        assert_eq!(codes, [29, 29]);

        // acks=0: what is allowed is written, then the connection closes.
        let Verdict::Go(_, amend) = acls.check("User:alice", request(9, produce(0)), &no_ids) else {
            panic!()
        };
        assert!(matches!(amend.apply(Reply::Silent), Reply::Close(why) if why.contains("orders.audit")));

        // Someone else may write nothing.
        let Verdict::Answer(Reply::Respond(body)) = acls.check("User:bob", request(9, produce(-1)), &no_ids)
        else {
            panic!()
        };
        let ResponseKind::Produce(response) = *body else {
            panic!()
        };
        assert_eq!(response.responses.len(), 2);
    }

    #[test]
    fn fetch_by_id_is_checked_on_the_name() {
        let acls = authorizer(RULES);
        let id = uuid::Uuid::from_u128(42);
        let fetch = RequestKind::Fetch(FetchRequest::default().with_topics(vec![
            FetchTopic::default()
                .with_topic_id(id)
                .with_partitions(vec![FetchPartition::default().with_partition(3)]),
            FetchTopic::default()
                .with_topic_id(uuid::Uuid::from_u128(43))
                .with_partitions(vec![FetchPartition::default()]),
        ]));
        let named = |asked: uuid::Uuid| (asked == id).then(|| "payments".to_owned());
        let Verdict::Go(passed, amend) = acls.check("User:alice", request(15, fetch), &named) else {
            panic!()
        };
        let RequestKind::Fetch(passed) = passed.body else {
            panic!()
        };
        assert_eq!(passed.topics.len(), 1, "an unknown id goes on");
        assert_eq!(passed.topics[0].topic_id, uuid::Uuid::from_u128(43));
        let Reply::Respond(body) =
            amend.apply(Reply::Respond(Box::new(ResponseKind::Fetch(Default::default()))))
        else {
            panic!()
        };
        let ResponseKind::Fetch(response) = *body else {
            panic!()
        };
        assert_eq!(response.responses[0].topic_id, id);
        assert_eq!(response.responses[0].partitions[0].partition_index, 3);
        assert_eq!(response.responses[0].partitions[0].error_code, 29);
    }

    #[test]
    fn groups_and_the_cluster() {
        let acls = authorizer(RULES);
        let join = |group: &str| {
            RequestKind::JoinGroup(
                JoinGroupRequest::default().with_group_id(GroupId(StrBytes::from_string(group.to_owned()))),
            )
        };
        assert!(matches!(
            acls.check("User:alice", request(9, join("billing")), &no_ids),
            Verdict::Go(..)
        ));
        let Verdict::Answer(Reply::Respond(body)) =
            acls.check("User:alice", request(9, join("other")), &no_ids)
        else {
            panic!()
        };
        assert!(matches!(*body, ResponseKind::JoinGroup(r) if r.error_code == 30));
        let init = RequestKind::InitProducerId(InitProducerIdRequest::default());
        assert!(
            matches!(
                acls.check("User:alice", request(4, init.clone()), &no_ids),
                Verdict::Go(..)
            ),
            "Write on some topic lets a producer be idempotent"
        );
        let Verdict::Answer(Reply::Respond(body)) = acls.check("User:bob", request(4, init), &no_ids) else {
            panic!()
        };
        assert!(matches!(*body, ResponseKind::InitProducerId(r) if r.error_code == 31));
    }

    #[test]
    fn metadata_hides_and_refuses() {
        let acls = authorizer(RULES);
        let metadata = |topics: Option<Vec<&str>>| {
            RequestKind::Metadata(
                MetadataRequest::default()
                    .with_allow_auto_topic_creation(true)
                    .with_topics(topics.map(|names| {
                        names
                            .into_iter()
                            .map(|n| {
                                metadata_request::MetadataRequestTopic::default().with_name(Some(topic(n)))
                            })
                            .collect()
                    })),
            )
        };
        let answered = |names: &[&str]| {
            let topics = names
                .iter()
                .map(|n| MetadataResponseTopic::default().with_name(Some(topic(n))))
                .collect();
            Reply::Respond(Box::new(ResponseKind::Metadata(
                MetadataResponse::default().with_topics(topics),
            )))
        };
        let names = |reply: Reply| -> Vec<(String, i16)> {
            let Reply::Respond(body) = reply else { panic!() };
            let ResponseKind::Metadata(r) = *body else {
                panic!()
            };
            r.topics
                .into_iter()
                .map(|t| (t.name.unwrap().to_string(), t.error_code))
                .collect()
        };
        let Verdict::Go(_, amend) = acls.check("User:alice", request(12, metadata(None)), &no_ids) else {
            panic!()
        };
        assert_eq!(
            names(amend.apply(answered(&["orders.eu", "payments"]))),
            [("orders.eu".to_owned(), 0)]
        );
        let Verdict::Go(passed, amend) = acls.check(
            "User:alice",
            request(12, metadata(Some(vec!["orders.new", "payments"]))),
            &no_ids,
        ) else {
            panic!()
        };
        let RequestKind::Metadata(passed) = passed.body else {
            panic!()
        };
        assert!(!passed.allow_auto_topic_creation, "alice may not create topics");
        assert_eq!(passed.topics.unwrap().len(), 1);
        assert_eq!(
            names(amend.apply(answered(&["orders.new"]))),
            [("orders.new".to_owned(), 0), ("payments".to_owned(), 29)]
        );
    }
}
