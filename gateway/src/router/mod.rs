//! The router: one Kafka endpoint in front of the local broker and the
//! upstream clusters of `routes:`.
//!
//! Every topic a client names is resolved with [`Routes::resolve`] to a
//! destination (the local broker, or a cluster and the topic's name there).
//! A request is split by destination, the parts are sent concurrently (to
//! an upstream, one request per partition leader), and the answers are
//! merged back in the request's order under the clients' names. A part that
//! fails becomes per-partition error codes; the rest still succeed.
//!
//! Clients see one broker, Strait: every partition's leader is node 0, and
//! nothing an upstream says about its own brokers (addresses, node ids,
//! leader hints, preferred read replicas) is passed on. Upstream leader
//! epochs are not passed on either (clients see -1 and skip epoch
//! validation, which would need OffsetForLeaderEpoch on the upstream).
//!
//! - `mod.rs`: dispatch, Metadata, ApiVersions, the local broker's part of
//!   a request ([`LocalCall`]), and refusing what is not routed yet.
//! - `session.rs`: per-connection state (the order of local parts, the
//!   connection's own upstream fetch and coordinator connections).
//! - `scatter.rs`: a request's partitions split by destination, sent to
//!   their leaders in two halves (launch in order, land concurrently,
//!   moved leaders retried), answers put back in the request's order.
//! - `partitioned.rs`: one definition per routed per-partition API
//!   (ListOffsets, OffsetForLeaderEpoch, DeleteRecords) and the one walk
//!   they share; `data.rs`: Produce and Fetch, which add their own rules.
//! - `admin.rs`: topic administration by topic; `offsets.rs`: committed
//!   offsets where the data lives; `delegated.rs`: groups run by a
//!   cluster's coordinator; `consumer_protocol.rs`: topic names inside
//!   subscriptions and assignments.
//! - `producers.rs`: one idempotent producer id per client across
//!   clusters; `topic_ids.rs`: topic ids as clients see them.
//!
//! With the default routes (everything local) every request goes straight
//! to the local broker.

mod admin;
pub mod consumer_protocol;
mod coordinators;
mod data;
mod delegated;
mod offsets;
mod partitioned;
mod producers;
mod scatter;
pub mod session;
mod shared_producers;
mod topic_ids;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::future::join_all;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::{MetadataResponsePartition, MetadataResponseTopic};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use strait_config::{Destination, GroupRoutes, Routes};
use strait_upstream::Cluster;

use crate::broker::{Broker, Reply, NODE_ID};
use crate::codec::Request;
use crate::error::{kafka_code, Failure};
use crate::instances::Instances;
use crate::versions;
pub use producers::UpstreamProducers;
use session::{Session, Ticket};
use topic_ids::client_topic_id;

/// The gateway's request handler: the local broker alone, or the local
/// broker and upstream clusters behind routes.
#[derive(Debug)]
pub struct Router {
    broker: Arc<Broker>,
    routes: Routes,
    groups: GroupRoutes,
    upstreams: BTreeMap<String, Cluster>,
    /// Each client producer's producer id on each cluster.
    producers: UpstreamProducers,
    /// Whether any route leads to an upstream (else every request goes to
    /// the local broker as it is).
    routing: bool,
    /// The live instances (`instances:`), or this one alone.
    instances: Instances,
}

/// APIs the router answers though the local broker does not (local topics
/// get an error), and their versions.
const ROUTED_ONLY: &[(ApiKey, i16, i16)] = &[(ApiKey::DeleteRecords, 0, 2)];

/// APIs forwarded to the clusters topics are routed to, at the client's
/// version or theirs: advertised within what every such cluster speaks.
const FORWARDED_DATA: &[ApiKey] = &[
    ApiKey::Produce,
    ApiKey::Fetch,
    ApiKey::ListOffsets,
    ApiKey::OffsetForLeaderEpoch,
    ApiKey::DeleteRecords,
    ApiKey::CreateTopics,
    ApiKey::DeleteTopics,
    ApiKey::CreatePartitions,
    ApiKey::DescribeConfigs,
];

/// Forwarded APIs whose newer versions the router answers by asking a
/// cluster at an older one: a cluster that speaks `(api, version)` serves
/// every version of `api` Strait advertises (Fetch v13+ names topics by
/// id, which the router turns into names for the cluster's Fetch v12).
const TRANSLATED: &[(ApiKey, i16)] = &[(ApiKey::Fetch, 12)];

/// APIs the router forwards for groups delegated to a cluster though the
/// local coordinator does not speak them (local groups get
/// UNSUPPORTED_VERSION, on which clients fall back to the classic
/// protocol or say how to): advertised only when `groups:` delegates to a
/// cluster, within what every such cluster speaks.
const DELEGATED_ONLY: &[(ApiKey, i16, i16)] = &[
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
];

/// APIs forwarded to the clusters groups are delegated to.
const FORWARDED_GROUPS: &[ApiKey] = &[
    ApiKey::ConsumerGroupHeartbeat,
    ApiKey::ConsumerGroupDescribe,
    ApiKey::JoinGroup,
    ApiKey::SyncGroup,
    ApiKey::Heartbeat,
    ApiKey::LeaveGroup,
    ApiKey::OffsetCommit,
    ApiKey::DescribeGroups,
    ApiKey::DeleteGroups,
];

/// How long an ApiVersions waits for a cluster not reached yet.
const VERSIONS_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether the router takes `api` at `version`.
fn handles(api: ApiKey, version: i16) -> bool {
    versions::supported(api)
        .or_else(|| {
            ROUTED_ONLY
                .iter()
                .chain(DELEGATED_ONLY)
                .find(|(a, ..)| *a == api)
                .map(|&(_, min, max)| (min, max))
        })
        .is_some_and(|(min, max)| (min..=max).contains(&version))
}

/// What is left of a request once it started: its answer to come.
pub type Pending<'a> = Pin<Box<dyn Future<Output = Reply> + Send + 'a>>;

/// The header fields of a request, repeated in its parts.
#[derive(Debug, Clone)]
struct Head {
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: Option<String>,
}

/// A request's part for the local broker, in its place in the connection's
/// local order (see [`session`]).
#[derive(Debug)]
struct LocalCall<'a> {
    broker: &'a Broker,
    head: Head,
    peer: SocketAddr,
    ticket: Ticket,
}

impl LocalCall<'_> {
    /// Waits until the connection's earlier local parts are done.
    async fn wait(&self) {
        self.ticket.wait().await;
    }

    /// The local broker's reply to `body`, once the connection's earlier
    /// local parts are done.
    async fn reply(self, body: RequestKind) -> Reply {
        self.ticket.wait().await;
        let Head {
            api,
            version,
            correlation_id,
            client_id,
        } = self.head;
        let request = Request {
            api,
            version,
            correlation_id,
            client_id,
            body,
        };
        self.broker.handle(request, self.peer).await
    }

    /// [`LocalCall::reply`] as a request's whole answer to come.
    fn reply_boxed<'b>(self, body: RequestKind) -> Pending<'b>
    where
        Self: 'b,
    {
        Box::pin(self.reply(body))
    }

    /// The local broker's answer to `request` (`None` if it sent none).
    async fn ask<R: LocalApi>(self, request: R) -> Option<R::Response> {
        match self.reply(request.into()).await {
            Reply::Respond(kind) => R::answer_of(*kind),
            Reply::Silent | Reply::Close(_) => None,
        }
    }
}

/// A request the router hands the local broker for its local part: its
/// answer is the reply of the same kind.
trait LocalApi: Into<RequestKind> + kafka_protocol::protocol::Request {
    fn answer_of(reply: ResponseKind) -> Option<Self::Response>;
}

macro_rules! local_apis {
    ($($kind:ident: $request:ty),* $(,)?) => {$(
        impl LocalApi for $request {
            fn answer_of(reply: ResponseKind) -> Option<Self::Response> {
                match reply {
                    ResponseKind::$kind(r) => Some(r),
                    _ => None,
                }
            }
        }
    )*};
}

local_apis!(
    Produce: ProduceRequest,
    Fetch: FetchRequest,
    ListOffsets: ListOffsetsRequest,
    OffsetForLeaderEpoch: OffsetForLeaderEpochRequest,
    Metadata: MetadataRequest,
    CreateTopics: CreateTopicsRequest,
    DeleteTopics: DeleteTopicsRequest,
    CreatePartitions: CreatePartitionsRequest,
    DescribeConfigs: DescribeConfigsRequest,
    OffsetCommit: OffsetCommitRequest,
    OffsetFetch: OffsetFetchRequest,
    DescribeGroups: DescribeGroupsRequest,
    DeleteGroups: DeleteGroupsRequest,
    DeleteRecords: DeleteRecordsRequest,
    ListGroups: ListGroupsRequest,
    FindCoordinator: FindCoordinatorRequest,
);

/// One topic of a request, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    /// Local, under the client's name.
    Local,
    /// On this cluster, under this name.
    Upstream(String, String),
    /// No route matches: the topic does not exist for clients.
    Nowhere,
}

impl Router {
    /// A router over `broker` and the `upstreams` the routes name (by
    /// cluster name; every cluster a route points to must be there), with
    /// the map of its clients' producers to theirs on each upstream
    /// ([`UpstreamProducers::open`] on the data directory) and the live
    /// instances.
    pub fn new(
        broker: Arc<Broker>,
        routes: Routes,
        groups: GroupRoutes,
        upstreams: BTreeMap<String, Cluster>,
        producers: UpstreamProducers,
        instances: Instances,
    ) -> Router {
        let routing =
            routes.destinations().iter().any(|d| d.cluster().is_some()) || groups.clusters().next().is_some();
        for c in routes
            .destinations()
            .iter()
            .filter_map(|d| d.cluster())
            .chain(groups.clusters())
        {
            assert!(
                upstreams.contains_key(c),
                "route to cluster {c}, which was not given"
            );
        }
        Router {
            broker,
            routes,
            groups,
            upstreams,
            producers,
            routing,
            instances,
        }
    }

    /// The live instances, as clients are shown them.
    pub fn instances(&self) -> &Instances {
        &self.instances
    }

    /// The local broker.
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// The upstream clusters, by name.
    pub fn upstreams(&self) -> &BTreeMap<String, Cluster> {
        &self.upstreams
    }

    /// Takes the local broker back once every connection is gone.
    pub fn into_broker(self) -> Arc<Broker> {
        self.broker
    }

    fn place(&self, client_topic: &str) -> Place {
        match self.routes.resolve(client_topic) {
            None => Place::Nowhere,
            Some(routed) => match routed.to {
                Destination::Local => Place::Local,
                Destination::Cluster(c) => Place::Upstream(c.clone(), routed.topic.into_owned()),
            },
        }
    }

    fn cluster(&self, name: &str) -> &Cluster {
        &self.upstreams[name]
    }

    /// Starts one request of `session`'s client: what must happen in the
    /// order requests arrived (taking a place in the local order, handing
    /// upstream requests to their connections) happens before this
    /// returns; the rest, waiting for the answers and merging them, is the
    /// returned future, which the server runs beside the connection's
    /// other requests and answers in order.
    pub async fn start<'a>(&'a self, session: &mut Session, request: Request) -> Pending<'a> {
        if !self.routing {
            let ticket = session.ticket();
            let peer = session.peer();
            return Box::pin(async move {
                ticket.wait().await;
                self.broker.handle(request, peer).await
            });
        }
        let Request {
            api,
            version,
            correlation_id,
            client_id,
            body,
        } = request;
        let head = Head {
            api,
            version,
            correlation_id,
            client_id,
        };
        let respond = |kind| Reply::Respond(Box::new(kind));
        if !handles(api, version) {
            // The local broker refuses it as it refuses what it does not
            // speak.
            return self.local(session, &head).reply_boxed(body);
        }
        match body {
            RequestKind::FindCoordinator(req) => self.find_coordinator(session, head, req),
            RequestKind::ApiVersions(_) => {
                let apis = self.api_versions().await;
                Box::pin(std::future::ready(respond(ResponseKind::ApiVersions(
                    versions::api_versions_of(&apis, None),
                ))))
            }
            RequestKind::Metadata(req) => {
                let local = self.local(session, &head);
                Box::pin(
                    async move { respond(ResponseKind::Metadata(self.metadata(req, version, local).await)) },
                )
            }
            RequestKind::Produce(req) => self.produce(session, head, req).await,
            RequestKind::Fetch(req) => self.fetch(session, head, req).await,
            RequestKind::ListOffsets(req) => {
                let api = partitioned::ListOffsets {
                    isolation_level: req.isolation_level,
                };
                self.partitioned(session, head, api, req).await
            }
            RequestKind::OffsetForLeaderEpoch(req) => {
                self.partitioned(session, head, partitioned::OffsetForLeaderEpoch, req)
                    .await
            }
            RequestKind::DeleteRecords(req) => {
                let api = partitioned::DeleteRecords {
                    timeout_ms: req.timeout_ms,
                };
                self.partitioned(session, head, api, req).await
            }
            RequestKind::JoinGroup(req) => match self.coordinated_by(req.group_id.as_str()) {
                Some(cluster) => self.delegate_join(session, head, cluster, req).await,
                None => self
                    .local(session, &head)
                    .reply_boxed(RequestKind::JoinGroup(req)),
            },
            RequestKind::SyncGroup(req) => match self.coordinated_by(req.group_id.as_str()) {
                Some(cluster) => self.delegate_sync(session, head, cluster, req).await,
                None => self
                    .local(session, &head)
                    .reply_boxed(RequestKind::SyncGroup(req)),
            },
            RequestKind::Heartbeat(req) => match self.coordinated_by(req.group_id.as_str()) {
                Some(cluster) => self.delegate_heartbeat(session, head, cluster, req).await,
                None => self
                    .local(session, &head)
                    .reply_boxed(RequestKind::Heartbeat(req)),
            },
            RequestKind::LeaveGroup(req) => match self.coordinated_by(req.group_id.as_str()) {
                Some(cluster) => self.delegate_leave(session, head, cluster, req).await,
                None => self
                    .local(session, &head)
                    .reply_boxed(RequestKind::LeaveGroup(req)),
            },
            RequestKind::ConsumerGroupHeartbeat(req) => match self.coordinated_by(req.group_id.as_str()) {
                Some(cluster) => {
                    self.delegate_consumer_heartbeat(session, head, cluster, req)
                        .await
                }
                None => self
                    .local(session, &head)
                    .reply_boxed(RequestKind::ConsumerGroupHeartbeat(req)),
            },
            RequestKind::OffsetCommit(req) => match self.coordinated_by(req.group_id.as_str()) {
                Some(cluster) => self.delegate_commit(session, head, cluster, req).await,
                None => self.offset_commit(session, head, req),
            },
            RequestKind::DescribeGroups(req) => self.describe_groups(session, head, req),
            RequestKind::ConsumerGroupDescribe(req) => self.describe_consumer_groups(head, req),
            RequestKind::DeleteGroups(req) => self.delete_groups(session, head, req),
            RequestKind::ListGroups(req) => self.list_groups(session, head, req),
            RequestKind::OffsetFetch(req) => self.offset_fetch(session, head, req),
            RequestKind::CreateTopics(req) => self.create_topics(session, head, req),
            RequestKind::DeleteTopics(req) => self.delete_topics(session, head, req),
            RequestKind::CreatePartitions(req) => self.create_partitions(session, head, req),
            RequestKind::DescribeConfigs(req) => self.describe_configs(session, head, req),
            body => self.local(session, &head).reply_boxed(body),
        }
    }

    /// The APIs and versions clients are told of: what Strait handles,
    /// within what every cluster it forwards them to speaks (the data and
    /// topic APIs for clusters that topics are routed to, the group APIs
    /// for clusters that groups are delegated to). A cluster not reached
    /// yet is asked now, for at most [`VERSIONS_WAIT`]; one that does not
    /// answer leaves the versions as they are (and is logged).
    async fn api_versions(&self) -> Vec<(ApiKey, i16, i16)> {
        let group_clusters: Vec<&str> = self.groups.clusters().collect();
        let delegated: &[_] = if group_clusters.is_empty() {
            &[]
        } else {
            DELEGATED_ONLY
        };
        let mut apis: Vec<(ApiKey, i16, i16)> = versions::SUPPORTED
            .iter()
            .chain(ROUTED_ONLY)
            .chain(delegated)
            .copied()
            .collect();
        let topic_clusters: Vec<&str> = self
            .routes
            .destinations()
            .into_iter()
            .filter_map(|d| d.cluster())
            .collect();
        for (name, cluster) in &self.upstreams {
            let forwarded: Vec<ApiKey> = [
                (topic_clusters.contains(&name.as_str()), FORWARDED_DATA),
                (group_clusters.contains(&name.as_str()), FORWARDED_GROUPS),
            ]
            .into_iter()
            .filter(|(used, _)| *used)
            .flat_map(|(_, apis)| apis.iter().copied())
            .collect();
            if forwarded.is_empty() {
                continue;
            }
            let known = match cluster.versions() {
                Some(v) => Some(v),
                None => {
                    let _ = tokio::time::timeout(VERSIONS_WAIT, cluster.metadata()).await;
                    cluster.versions()
                }
            };
            let Some(theirs) = known else {
                tracing::debug!(cluster = %name, "cluster not reachable: ApiVersions answered without its versions");
                continue;
            };
            apis.retain_mut(|(api, min, max)| {
                if !forwarded.contains(api) {
                    return true;
                }
                match theirs.get(*api) {
                    Ok(top) if top >= *min => {
                        if !TRANSLATED.iter().any(|&(a, v)| a == *api && top >= v) {
                            *max = (*max).min(top);
                        }
                        true
                    }
                    Ok(top) => {
                        tracing::warn!(cluster = %name, ?api, top, min = *min, "cluster speaks only versions Strait does not: advertised as Strait speaks it");
                        true
                    }
                    // An API only the clusters answer needs every one.
                    Err(_) => !ROUTED_ONLY.iter().chain(DELEGATED_ONLY).any(|(a, ..)| a == api),
                }
            });
        }
        apis
    }

    /// A call on the local broker for a part of a request of `session`,
    /// in its place in the connection's local order.
    fn local(&self, session: &mut Session, head: &Head) -> LocalCall<'_> {
        LocalCall {
            broker: &self.broker,
            head: head.clone(),
            peer: session.peer(),
            ticket: session.ticket(),
        }
    }

    async fn metadata(&self, req: MetadataRequest, version: i16, local: LocalCall<'_>) -> MetadataResponse {
        let all = match &req.topics {
            None => true,
            Some(t) => t.is_empty() && version == 0,
        };
        // The local part: every local topic, or the wanted local ones.
        let mut local_req = req.clone();
        let mut wanted: Vec<(String, Place)> = Vec::new();
        if !all {
            let topics = req.topics.clone().unwrap_or_default();
            wanted = topics
                .iter()
                .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
                .map(|n| {
                    let place = self.place(&n);
                    (n, place)
                })
                .collect();
            local_req.topics = Some(
                topics
                    .into_iter()
                    .filter(|t| match &t.name {
                        Some(n) => self.place(n.as_str()) == Place::Local,
                        // By id: local topic ids only.
                        None => true,
                    })
                    .collect::<Vec<MetadataRequestTopic>>(),
            );
        }
        let ask_local = all || local_req.topics.as_ref().is_some_and(|t| !t.is_empty());
        let mut response = if ask_local {
            local.ask(local_req).await.unwrap_or_default()
        } else {
            // Brokers and cluster id from an empty local answer.
            let empty = MetadataRequest::default().with_topics(Some(Vec::new()));
            let mut m = local.ask(empty).await.unwrap_or_default();
            m.topics.clear();
            m
        };
        // Local topics that a route sends elsewhere are hidden.
        response.topics.retain(|t| match &t.name {
            Some(n) => {
                t.error_code != 0 || self.routes.client_name(&Destination::Local, n.as_str()).is_some()
            }
            None => true,
        });
        // The upstream part: each cluster's metadata, from its cache.
        let clusters: Vec<&str> = if all {
            self.upstreams.keys().map(String::as_str).collect()
        } else {
            let mut c: Vec<&str> = wanted
                .iter()
                .filter_map(|(_, p)| match p {
                    Place::Upstream(c, _) => Some(c.as_str()),
                    _ => None,
                })
                .collect();
            c.sort_unstable();
            c.dedup();
            c
        };
        let wanted_ref = &wanted;
        let auto_create = self.broker.auto_creates_topics() && (version < 4 || req.allow_auto_topic_creation);
        let loaded = join_all(clusters.iter().map(|c| async move {
            let cluster = self.cluster(c);
            let absent = |m: &strait_upstream::Metadata| -> Vec<String> {
                wanted_ref
                    .iter()
                    .filter_map(|(_, p)| match p {
                        Place::Upstream(pc, t) if pc == c && !m.topics.contains_key(t) => Some(t.clone()),
                        _ => None,
                    })
                    .collect()
            };
            let mut metadata = cluster.metadata().await;
            // A wanted topic the cache does not know: read again once, and
            // where the client may auto-create topics, ask the cluster to
            // (its own auto.create.topics.enable decides).
            if let Ok(m) = &metadata {
                if !all && !absent(m).is_empty() {
                    metadata = cluster.refresh().await;
                }
            }
            if let Ok(m) = &metadata {
                let missing = absent(m);
                if !all && auto_create && !missing.is_empty() {
                    if let Err(e) = auto_create_upstream(cluster, missing).await {
                        tracing::debug!(cluster = %c, error = %e, "auto-creating topics upstream failed");
                    }
                    metadata = cluster.refresh().await;
                }
            }
            (*c, metadata)
        }))
        .await;
        let loaded: HashMap<&str, _> = loaded.into_iter().collect();
        if all {
            for (c, metadata) in &loaded {
                match metadata {
                    Ok(m) => {
                        let destination = Destination::Cluster((*c).to_owned());
                        for (name, topic) in &m.topics {
                            if let Some(client) = self.routes.client_name(&destination, name) {
                                response.topics.push(upstream_topic(&client, c, topic, version));
                            }
                        }
                    }
                    Err(e) => {
                        tracing::debug!(cluster = c, error = %e, "cluster metadata unavailable: its topics are left out")
                    }
                }
            }
            return response;
        }
        // Wanted topics in request order (local ones are in the local
        // answer already; put everything in order at the end).
        let mut by_name: HashMap<String, MetadataResponseTopic> = response
            .topics
            .drain(..)
            .filter_map(|t| t.name.clone().map(|n| (n.0.to_string(), t)))
            .collect();
        for (name, place) in &wanted {
            let entry = match place {
                Place::Local => continue,
                Place::Nowhere => error_topic(name, ResponseError::UnknownTopicOrPartition),
                Place::Upstream(c, upstream) => match &loaded[c.as_str()] {
                    Ok(m) => match m.topics.get(upstream) {
                        Some(topic) => upstream_topic(name, c, topic, version),
                        None => error_topic(name, ResponseError::UnknownTopicOrPartition),
                    },
                    Err(e) => {
                        tracing::debug!(cluster = %c, error = %e, "cluster metadata unavailable");
                        // Retriable: the client asks again.
                        error_topic(name, ResponseError::LeaderNotAvailable)
                    }
                },
            };
            by_name.insert(name.clone(), entry);
        }
        let mut seen = std::collections::HashSet::new();
        response.topics = wanted
            .iter()
            .filter(|(n, _)| seen.insert(n.clone()))
            .filter_map(|(n, _)| by_name.remove(n))
            .collect();
        // Topics asked by id (local only) come after.
        response.topics.extend(by_name.into_values());
        response
    }
}

/// Asks `cluster` for the metadata of `topics` allowing auto-creation, so
/// that the cluster creates them if its configuration lets it.
async fn auto_create_upstream(
    cluster: &Cluster,
    topics: Vec<String>,
) -> Result<(), strait_upstream::UpstreamError> {
    let connection = cluster.any_broker().await?;
    let version = connection.version(ApiKey::Metadata)?;
    let topics = topics
        .into_iter()
        .map(|t| MetadataRequestTopic::default().with_name(Some(name(&t))))
        .collect();
    let mut request = MetadataRequest::default().with_topics(Some(topics));
    if version >= 4 {
        request.allow_auto_topic_creation = true;
    }
    connection.request_at(&request, version).await?;
    Ok(())
}

/// A topic of an upstream's metadata as clients see it: under `client`,
/// with its id as [`client_topic_id`] gives it (Metadata v10+), every
/// partition led by Strait, no epochs.
fn upstream_topic(
    client: &str,
    cluster: &str,
    topic: &strait_upstream::TopicMetadata,
    version: i16,
) -> MetadataResponseTopic {
    let partitions = topic
        .partitions
        .iter()
        .map(|p| {
            let error = p
                .error
                .or((p.leader < 0).then_some(ResponseError::LeaderNotAvailable));
            MetadataResponsePartition::default()
                .with_error_code(error.map_or(0, |e| e.code()))
                .with_partition_index(p.partition)
                .with_leader_id(BrokerId(if p.leader < 0 { -1 } else { NODE_ID }))
                .with_leader_epoch(-1)
                .with_replica_nodes(vec![BrokerId(NODE_ID)])
                .with_isr_nodes(vec![BrokerId(NODE_ID)])
        })
        .collect();
    let id = if version >= 10 {
        client_topic_id(cluster, topic.id)
    } else {
        uuid::Uuid::nil()
    };
    MetadataResponseTopic::default()
        .with_error_code(topic.error.map_or(0, |e| e.code()))
        .with_name(Some(TopicName(StrBytes::from_string(client.to_owned()))))
        .with_topic_id(id)
        .with_is_internal(topic.internal)
        .with_partitions(partitions)
}

/// A topic name for a request or response.
fn name(value: &str) -> TopicName {
    TopicName(StrBytes::from_string(value.to_owned()))
}

/// A group id for a request or response.
fn group_id(value: &str) -> GroupId {
    GroupId(StrBytes::from_string(value.to_owned()))
}

fn error_topic(name: &str, code: ResponseError) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(code.code())
        .with_name(Some(TopicName(StrBytes::from_string(name.to_owned()))))
}

/// The code a client sees for an upstream failure of topic
/// administration.
fn upstream_code(e: &strait_upstream::UpstreamError) -> i16 {
    kafka_code(Failure::Upstream(e)).code()
}

/// The code a client sees for an upstream failure of a partition's part
/// of a request.
fn partition_code(e: &strait_upstream::UpstreamError) -> i16 {
    kafka_code(Failure::Partition(e)).code()
}

/// The code a client sees when a cluster's producer id for its idempotent
/// batch could not be had.
fn producer_id_code(e: &strait_upstream::UpstreamError) -> i16 {
    kafka_code(Failure::ProducerId(e)).code()
}

/// The code a client sees for an upstream failure of a group coordinator.
fn coordinator_code(e: &strait_upstream::UpstreamError) -> i16 {
    kafka_code(Failure::Coordinator(e)).code()
}
