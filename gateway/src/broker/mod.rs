//! The local broker: answers each decoded request from the topic registry,
//! the spool and the group coordinator, as a one-node Kafka cluster whose
//! only node (id 0) is this Strait.
//!
//! - `mod.rs`: dispatch, Metadata, FindCoordinator, DescribeCluster,
//!   InitProducerId, and the answers to APIs Strait does not handle.
//! - `data.rs`: Produce, Fetch, ListOffsets, OffsetForLeaderEpoch.
//! - `admin.rs`: CreateTopics, DeleteTopics, CreatePartitions,
//!   DescribeConfigs.

mod admin;
mod collector;
mod data;

pub use collector::BrokerCollector;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use strait_config::Config;

use crate::codec::Request;
use crate::group::{ClientInfo, GroupCoordinator};
use crate::producers::{PartitionProducers, ProducerIds};
use crate::topics::Topics;
use crate::versions;

/// Node id of this broker in every answer.
pub const NODE_ID: i32 = 0;

/// What to do after a request.
#[derive(Debug)]
pub enum Reply {
    /// Send this response.
    Respond(Box<ResponseKind>),
    /// Send nothing (a Produce with `acks=0`).
    Silent,
    /// Close the connection, logging why.
    Close(String),
}

/// A topic name and partition index.
type PartitionKey = (String, i32);
type AppendLock = Arc<tokio::sync::Mutex<()>>;

/// How this broker presents itself.
#[derive(Debug, Clone)]
pub struct Identity {
    /// Host clients connect to.
    pub host: String,
    /// Port clients connect to.
    pub port: u16,
    /// The cluster id, persisted in the data directory.
    pub cluster_id: String,
}

/// The local broker.
#[derive(Debug)]
pub struct Broker {
    identity: Identity,
    auto_create_topics: bool,
    default_partitions: i32,
    /// Most record bytes in one Fetch response (`broker.fetch_max_bytes`).
    fetch_max_bytes: usize,
    topics: Topics,
    groups: GroupCoordinator,
    producer_ids: Arc<ProducerIds>,
    /// Sequence state per partition.
    sequences: Mutex<HashMap<PartitionKey, Arc<PartitionProducers>>>,
    /// One idempotent append at a time per partition, so that sequence
    /// checks and appends happen in the same order.
    append_locks: Mutex<HashMap<PartitionKey, AppendLock>>,
    /// Set when shutdown begins; long polls answer at once.
    stopping_flag: std::sync::atomic::AtomicBool,
    /// Wakes long polls when shutdown begins.
    stopping: tokio::sync::Notify,
}

/// Wraps a string for a response.
pub(crate) fn s(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

impl Broker {
    /// Assembles the broker. `topics` and `groups` are opened by the caller
    /// (recovery is blocking work done before serving).
    pub fn new(
        config: &Config,
        identity: Identity,
        topics: Topics,
        groups: GroupCoordinator,
        data_dir: &Path,
    ) -> std::io::Result<Broker> {
        let producer_ids = Arc::new(ProducerIds::open(data_dir)?);
        let broker = Broker {
            identity,
            auto_create_topics: config.broker.auto_create_topics,
            default_partitions: config.broker.default_partitions as i32,
            fetch_max_bytes: config.broker.fetch_max_bytes.bytes() as usize,
            topics,
            groups,
            producer_ids,
            sequences: Mutex::new(HashMap::new()),
            append_locks: Mutex::new(HashMap::new()),
            stopping_flag: std::sync::atomic::AtomicBool::new(false),
            stopping: tokio::sync::Notify::new(),
        };
        broker.rebuild_producer_state();
        Ok(broker)
    }

    /// Begins shutdown: long polls (Fetch) answer at once with what they
    /// have, and requests waiting in a group rebalance are answered with a
    /// retriable error, so connections finish their requests promptly.
    pub async fn begin_shutdown(&self) {
        self.stopping_flag
            .store(true, std::sync::atomic::Ordering::Release);
        self.stopping.notify_waiters();
        self.groups.shutdown().await;
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping_flag.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether Metadata creates the topics it is asked for
    /// (`broker.auto_create_topics`).
    pub fn auto_creates_topics(&self) -> bool {
        self.auto_create_topics
    }

    /// The topic registry.
    pub fn topics(&self) -> &Topics {
        &self.topics
    }

    /// The group coordinator.
    pub fn groups(&self) -> &GroupCoordinator {
        &self.groups
    }

    /// Answers one request from the client at `peer`.
    pub async fn handle(&self, request: Request, peer: std::net::SocketAddr) -> Reply {
        let api = request.api;
        let start = std::time::Instant::now();
        let reply = self.answer(request, peer).await;
        crate::metrics::local_answered(api, start.elapsed());
        reply
    }

    async fn answer(&self, request: Request, peer: std::net::SocketAddr) -> Reply {
        let version = request.version;
        if let Some(refusal) = self.refuse_unsupported(&request) {
            return refusal;
        }
        Reply::Respond(Box::new(match request.body {
            RequestKind::ApiVersions(_) => ResponseKind::ApiVersions(versions::api_versions_response()),
            RequestKind::Metadata(req) => ResponseKind::Metadata(self.metadata(req, version).await),
            RequestKind::Produce(req) => {
                return match self.produce(req, version).await {
                    Some(response) => Reply::Respond(Box::new(ResponseKind::Produce(response))),
                    None => Reply::Silent,
                }
            }
            RequestKind::Fetch(req) => ResponseKind::Fetch(self.fetch(req, version).await),
            RequestKind::ListOffsets(req) => ResponseKind::ListOffsets(self.list_offsets(req, version).await),
            RequestKind::OffsetForLeaderEpoch(req) => {
                ResponseKind::OffsetForLeaderEpoch(self.offset_for_leader_epoch(req))
            }
            RequestKind::FindCoordinator(req) => {
                ResponseKind::FindCoordinator(self.find_coordinator(req, version))
            }
            RequestKind::DescribeCluster(_) => ResponseKind::DescribeCluster(self.describe_cluster()),
            // The server's login gate (crate::auth) answers these; should one
            // get here, it is out of place.
            RequestKind::SaslHandshake(_) => ResponseKind::SaslHandshake(
                SaslHandshakeResponse::default().with_error_code(ResponseError::IllegalSaslState.code()),
            ),
            RequestKind::SaslAuthenticate(_) => ResponseKind::SaslAuthenticate(
                kafka_protocol::messages::SaslAuthenticateResponse::default()
                    .with_error_code(ResponseError::IllegalSaslState.code()),
            ),
            RequestKind::InitProducerId(req) => {
                ResponseKind::InitProducerId(self.init_producer_id(req).await)
            }
            RequestKind::CreateTopics(req) => {
                ResponseKind::CreateTopics(self.create_topics(req, version).await)
            }
            RequestKind::DeleteTopics(req) => {
                ResponseKind::DeleteTopics(self.delete_topics(req, version).await)
            }
            RequestKind::CreatePartitions(req) => {
                ResponseKind::CreatePartitions(self.create_partitions(req).await)
            }
            RequestKind::DescribeConfigs(req) => ResponseKind::DescribeConfigs(self.describe_configs(req)),
            RequestKind::JoinGroup(req) => {
                let client = ClientInfo {
                    client_id: request.client_id.clone().unwrap_or_default(),
                    client_host: format!("/{}", peer.ip()),
                };
                ResponseKind::JoinGroup(self.groups.join_group(req, version, &client).await)
            }
            RequestKind::SyncGroup(req) => {
                ResponseKind::SyncGroup(self.groups.sync_group(req, version).await)
            }
            RequestKind::Heartbeat(req) => ResponseKind::Heartbeat(self.groups.heartbeat(req, version).await),
            RequestKind::LeaveGroup(req) => {
                ResponseKind::LeaveGroup(self.groups.leave_group(req, version).await)
            }
            RequestKind::OffsetCommit(req) => {
                let exists = |topic: &str, partition: i32| {
                    self.topics
                        .get(topic)
                        .is_some_and(|t| t.partition(partition).is_some())
                };
                ResponseKind::OffsetCommit(self.groups.offset_commit(req, version, &exists).await)
            }
            RequestKind::OffsetFetch(req) => {
                ResponseKind::OffsetFetch(self.groups.offset_fetch(req, version).await)
            }
            RequestKind::DescribeGroups(req) => {
                ResponseKind::DescribeGroups(self.groups.describe_groups(req, version))
            }
            RequestKind::ListGroups(req) => ResponseKind::ListGroups(self.groups.list_groups(req, version)),
            RequestKind::DeleteGroups(req) => {
                ResponseKind::DeleteGroups(self.groups.delete_groups(req, version).await)
            }
            // `refuse_unsupported` answered everything else.
            _ => unreachable!("unsupported requests are refused above"),
        }))
    }

    /// The answer to APIs Strait does not handle and to versions it does not
    /// advertise. `None` for requests it handles.
    fn refuse_unsupported(&self, request: &Request) -> Option<Reply> {
        if let Some((min, max)) = versions::supported(request.api) {
            if (min..=max).contains(&request.version) {
                return None;
            }
            if request.api == ApiKey::ApiVersions {
                // KIP-511: the client retries with a version Strait speaks.
                return Some(Reply::Respond(Box::new(ResponseKind::ApiVersions(
                    versions::api_versions_retry(),
                ))));
            }
        }
        tracing::warn!(
            api = ?request.api,
            version = request.version,
            client = request.client_id.as_deref().unwrap_or(""),
            "refusing a request Strait does not support"
        );
        let unsupported = ResponseError::UnsupportedVersion.code();
        Some(match unsupported_response(request.api, unsupported) {
            Some(response) => Reply::Respond(Box::new(response)),
            None => Reply::Close(format!(
                "{:?} v{} is not supported and its response has no error code to say so",
                request.api, request.version
            )),
        })
    }

    async fn metadata(&self, req: MetadataRequest, version: i16) -> MetadataResponse {
        let mut response = MetadataResponse::default();
        response.brokers = vec![MetadataResponseBroker::default()
            .with_node_id(BrokerId(NODE_ID))
            .with_host(s(&self.identity.host))
            .with_port(self.identity.port as i32)];
        // Fields a version does not have must keep their default, or the
        // encoder refuses the response.
        if version >= 2 {
            response.cluster_id = Some(s(&self.identity.cluster_id));
        }
        if version >= 1 {
            response.controller_id = BrokerId(NODE_ID);
        }
        // v0: an empty list means all topics; v1+: null means all.
        let all = match &req.topics {
            None => true,
            Some(t) => t.is_empty() && version == 0,
        };
        let auto_create = self.auto_create_topics && (version < 4 || req.allow_auto_topic_creation);
        if all {
            response.topics = self
                .topics
                .all()
                .iter()
                .map(|t| topic_metadata(t, version))
                .collect();
            return response;
        }
        for wanted in req.topics.unwrap_or_default() {
            let by_id = wanted.name.is_none() && !wanted.topic_id.is_nil();
            let name = wanted.name.map(|n| n.0.to_string());
            let found = match (&name, by_id) {
                (_, true) => self.topics.by_id(wanted.topic_id),
                (Some(n), false) => self.topics.get(n),
                (None, false) => None,
            };
            let entry = match (found, name) {
                (Some(t), _) => topic_metadata(&t, version),
                (None, Some(n)) if auto_create => match self
                    .topics
                    .create(&n, self.default_partitions, 1, Default::default())
                    .await
                {
                    Ok(t) => topic_metadata(&t, version),
                    // Another request created it meanwhile.
                    Err(crate::error::TopicError::Exists(_)) => self.topics.get(&n).map_or_else(
                        || unknown_topic(Some(&n), wanted.topic_id, version),
                        |t| topic_metadata(&t, version),
                    ),
                    Err(e) => {
                        let code = crate::error::kafka_code(crate::error::Failure::Topic(&e));
                        unknown_topic(Some(&n), wanted.topic_id, version).with_error_code(code.code())
                    }
                },
                (None, n) => unknown_topic(n.as_deref(), wanted.topic_id, version),
            };
            response.topics.push(entry);
        }
        response
    }

    fn find_coordinator(&self, req: FindCoordinatorRequest, version: i16) -> FindCoordinatorResponse {
        let answer = |key_type: i8| -> (i16, Option<StrBytes>) {
            match key_type {
                0 => (0, None),
                _ => (
                    ResponseError::TransactionalIdAuthorizationFailed.code(),
                    Some(s("transactions are not supported by Strait yet")),
                ),
            }
        };
        let mut response = FindCoordinatorResponse::default();
        if version >= 4 {
            response.coordinators = req
                .coordinator_keys
                .iter()
                .map(|key| {
                    let (code, message) = answer(req.key_type);
                    Coordinator::default()
                        .with_key(key.clone())
                        .with_node_id(BrokerId(if code == 0 { NODE_ID } else { -1 }))
                        .with_host(if code == 0 { s(&self.identity.host) } else { s("") })
                        .with_port(if code == 0 { self.identity.port as i32 } else { -1 })
                        .with_error_code(code)
                        .with_error_message(message)
                })
                .collect();
        } else {
            let (code, message) = answer(req.key_type);
            response.error_code = code;
            if version >= 1 {
                response.error_message = message;
            }
            if code == 0 {
                response.node_id = BrokerId(NODE_ID);
                response.host = s(&self.identity.host);
                response.port = self.identity.port as i32;
            } else {
                response.node_id = BrokerId(-1);
                response.port = -1;
            }
        }
        response
    }

    fn describe_cluster(&self) -> DescribeClusterResponse {
        use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
        let mut response = DescribeClusterResponse::default();
        response.cluster_id = s(&self.identity.cluster_id);
        response.controller_id = BrokerId(NODE_ID);
        response.brokers = vec![DescribeClusterBroker::default()
            .with_broker_id(BrokerId(NODE_ID))
            .with_host(s(&self.identity.host))
            .with_port(self.identity.port as i32)];
        response
    }

    async fn init_producer_id(&self, req: InitProducerIdRequest) -> InitProducerIdResponse {
        let mut response = InitProducerIdResponse::default();
        if req.transactional_id.as_ref().is_some_and(|t| !t.0.is_empty()) {
            tracing::warn!(
                "refusing InitProducerId with a transactional id: transactions are not supported yet"
            );
            response.error_code = ResponseError::TransactionalIdAuthorizationFailed.code();
            response.producer_id = ProducerId(-1);
            response.producer_epoch = -1;
            return response;
        }
        // A known producer asking to bump its epoch (KIP-360) gets a fresh
        // id instead, which is always safe for a non-transactional producer.
        let ids = Arc::clone(&self.producer_ids);
        match tokio::task::spawn_blocking(move || ids.allocate())
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
        {
            Ok(id) => {
                response.producer_id = ProducerId(id);
                response.producer_epoch = 0;
            }
            Err(e) => {
                tracing::error!(error = %e, "allocating a producer id failed");
                response.error_code = ResponseError::KafkaStorageError.code();
                response.producer_id = ProducerId(-1);
                response.producer_epoch = -1;
            }
        }
        response
    }

    pub(crate) fn sequences(&self, topic: &str, partition: i32) -> Arc<PartitionProducers> {
        let mut map = self.sequences.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(map.entry((topic.to_owned(), partition)).or_default())
    }

    pub(crate) fn append_lock(&self, topic: &str, partition: i32) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.append_locks.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(map.entry((topic.to_owned(), partition)).or_default())
    }

    /// Rebuilds the idempotent producers' sequence state from the batch
    /// headers stored in every partition.
    fn rebuild_producer_state(&self) {
        for topic in self.topics.all() {
            for (index, p) in topic.partitions.iter().enumerate() {
                let sequences = self.sequences(&topic.name, index as i32);
                let mut offset = p.log.log_start_offset();
                while offset < p.log.high_watermark() {
                    let Ok(read) = p.log.read(offset, 1 << 20) else {
                        break;
                    };
                    if read.records.is_empty() {
                        break;
                    }
                    let mut at = 0;
                    while at < read.records.len() {
                        let Ok(h) = strait_batch::BatchHeader::parse(&read.records[at..]) else {
                            break;
                        };
                        if h.producer_id >= 0 {
                            sequences.record(&[h], [h.base_offset as u64]);
                        }
                        offset = h.last_offset() as u64 + 1;
                        at += h.size();
                    }
                }
            }
        }
    }
}

fn topic_metadata(t: &crate::topics::Topic, version: i16) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(s(&t.name))))
        .with_topic_id(if version >= 10 { t.id } else { uuid::Uuid::nil() })
        .with_partitions(
            (0..t.partitions.len() as i32)
                .map(|p| {
                    MetadataResponsePartition::default()
                        .with_partition_index(p)
                        .with_leader_id(BrokerId(NODE_ID))
                        .with_leader_epoch(if version >= 7 { 0 } else { -1 })
                        .with_replica_nodes(vec![BrokerId(NODE_ID)])
                        .with_isr_nodes(vec![BrokerId(NODE_ID)])
                })
                .collect(),
        )
}

fn unknown_topic(name: Option<&str>, id: uuid::Uuid, version: i16) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(ResponseError::UnknownTopicOrPartition.code())
        .with_name(name.map(|n| TopicName(s(n))))
        .with_topic_id(if version >= 10 { id } else { uuid::Uuid::nil() })
}

/// An error response for an API Strait does not handle, where the response
/// has a top-level error code. `None` where it has none (the connection is
/// then closed, as Kafka does for requests it cannot parse).
fn unsupported_response(api: ApiKey, code: i16) -> Option<ResponseKind> {
    Some(match api {
        ApiKey::SaslAuthenticate => ResponseKind::SaslAuthenticate(
            SaslAuthenticateResponse::default()
                .with_error_code(code)
                .with_error_message(Some(s("SASL is not supported by Strait"))),
        ),
        ApiKey::EndTxn => ResponseKind::EndTxn(EndTxnResponse::default().with_error_code(code)),
        ApiKey::DescribeAcls => ResponseKind::DescribeAcls(
            DescribeAclsResponse::default()
                .with_error_code(ResponseError::SecurityDisabled.code())
                .with_error_message(Some(s("ACLs are not supported by Strait"))),
        ),
        ApiKey::DescribeLogDirs => {
            ResponseKind::DescribeLogDirs(DescribeLogDirsResponse::default().with_error_code(code))
        }
        ApiKey::DescribeClientQuotas => {
            ResponseKind::DescribeClientQuotas(DescribeClientQuotasResponse::default().with_error_code(code))
        }
        ApiKey::DescribeUserScramCredentials => ResponseKind::DescribeUserScramCredentials(
            DescribeUserScramCredentialsResponse::default().with_error_code(code),
        ),
        ApiKey::DescribeQuorum => {
            ResponseKind::DescribeQuorum(DescribeQuorumResponse::default().with_error_code(code))
        }
        ApiKey::ConsumerGroupHeartbeat => ResponseKind::ConsumerGroupHeartbeat(
            ConsumerGroupHeartbeatResponse::default()
                .with_error_code(code)
                .with_error_message(Some(s(
                    "the consumer protocol (KIP-848) is not supported; use the classic protocol",
                ))),
        ),
        ApiKey::GetTelemetrySubscriptions => ResponseKind::GetTelemetrySubscriptions(
            GetTelemetrySubscriptionsResponse::default().with_error_code(code),
        ),
        _ => return None,
    })
}
