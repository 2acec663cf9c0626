//! Produce, Fetch and ListOffsets, split by destination and merged back.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use strait_upstream::{Cluster, Lane, UpstreamError};

use super::{upstream_code, Place, Router};
use crate::broker::Reply;
use crate::codec::Request;

/// How often a partition's request is sent again after its leader moved
/// (each time after a metadata refresh), within the client's timeout.
const ATTEMPTS: usize = 3;

/// One partition of a request bound for an upstream cluster.
#[derive(Debug, Clone)]
struct Item<T> {
    /// The topic as the client named it.
    client: String,
    /// Its name on the cluster.
    upstream: String,
    partition: i32,
    data: T,
}

/// One destination's part of a Fetch: its topics, and whether they hold
/// records or errors (then the request is answered).
type FetchPart<'a> = std::pin::Pin<Box<dyn Future<Output = (Vec<FetchableTopicResponse>, bool)> + Send + 'a>>;

/// A partition's answer, by the client's topic name and partition.
type Answers<A> = HashMap<(String, i32), A>;

fn name(value: &str) -> TopicName {
    TopicName(StrBytes::from_string(value.to_owned()))
}

/// Sends `items` to their leaders on `cluster`, one request per leader
/// built and sent by `send` (which answers each item it was given, in
/// order). Items whose leader is unknown or moved are sent again after a
/// metadata refresh, at most `attempts` times in all and not past
/// `deadline`.
async fn scatter<T, A, F, Fut>(
    cluster: &Cluster,
    mut items: Vec<Item<T>>,
    attempts: usize,
    deadline: tokio::time::Instant,
    send: F,
) -> Vec<(Item<T>, Result<A, UpstreamError>)>
where
    T: Clone,
    F: Fn(i32, Vec<Item<T>>) -> Fut,
    Fut: Future<Output = Vec<(Item<T>, Result<A, UpstreamError>)>>,
{
    let mut done = Vec::new();
    for attempt in 1..=attempts {
        let mut groups: BTreeMap<i32, Vec<Item<T>>> = BTreeMap::new();
        let mut failed = Vec::new();
        for item in items.drain(..) {
            match cluster.leader_id(&item.upstream, item.partition).await {
                Ok(node) => groups.entry(node).or_default().push(item),
                Err(e) => failed.push((item, Err(e))),
            }
        }
        let sent = join_all(groups.into_iter().map(|(node, group)| send(node, group))).await;
        let mut retry = Vec::new();
        let last = attempt == attempts || tokio::time::Instant::now() >= deadline;
        for (item, result) in failed.into_iter().chain(sent.into_iter().flatten()) {
            match result {
                Err(e) if !last && moved(&e) => {
                    cluster.invalidate();
                    retry.push(item);
                }
                other => {
                    if other.as_ref().is_err_and(UpstreamError::wants_metadata_refresh) {
                        cluster.invalidate();
                    }
                    done.push((item, other));
                }
            }
        }
        if retry.is_empty() {
            break;
        }
        items = retry;
        tokio::time::sleep(Duration::from_millis(50 * attempt as u64)).await;
    }
    done
}

/// Whether the request failed because its leader moved or is not known
/// yet: worth sending again after a refresh, and safe to (nothing was
/// written).
fn moved(e: &UpstreamError) -> bool {
    matches!(
        e.code(),
        Some(
            ResponseError::NotLeaderOrFollower
                | ResponseError::LeaderNotAvailable
                | ResponseError::UnknownTopicOrPartition
                | ResponseError::FencedLeaderEpoch
        )
    ) && !matches!(e, UpstreamError::Deadline { .. })
}

/// `Err` for a partition-level error code of an upstream answer.
fn partition_result(cluster: &Cluster, item: &Item<impl Sized>, code: i16) -> Result<(), UpstreamError> {
    strait_upstream::error::check(
        cluster.name(),
        || format!("{}-{}", item.upstream, item.partition),
        code,
    )
}

impl Router {
    pub(super) async fn produce(
        &self,
        req: ProduceRequest,
        version: i16,
        local: impl Fn(RequestKind) -> Request,
        peer: SocketAddr,
    ) -> Reply {
        let ProduceRequest {
            transactional_id,
            acks,
            timeout_ms,
            topic_data,
            ..
        } = req;
        let order: Vec<(String, Vec<i32>)> = topic_data
            .iter()
            .map(|t| {
                (
                    t.name.to_string(),
                    t.partition_data.iter().map(|p| p.index).collect(),
                )
            })
            .collect();
        let mut answers: Answers<PartitionProduceResponse> = HashMap::new();
        let mut local_topics = Vec::new();
        let mut upstream: BTreeMap<String, Vec<Item<Option<Bytes>>>> = BTreeMap::new();
        for topic in topic_data {
            let client = topic.name.to_string();
            match self.place(&client) {
                Place::Local => local_topics.push(topic),
                Place::Nowhere => {
                    for p in topic.partition_data {
                        answers.insert(
                            (client.clone(), p.index),
                            produce_error(p.index, ResponseError::UnknownTopicOrPartition.code()),
                        );
                    }
                }
                Place::Upstream(cluster, name) => {
                    for p in topic.partition_data {
                        upstream.entry(cluster.clone()).or_default().push(Item {
                            client: client.clone(),
                            upstream: name.clone(),
                            partition: p.index,
                            data: p.records,
                        });
                    }
                }
            }
        }
        let local_part = async {
            if local_topics.is_empty() {
                return None;
            }
            let sub = ProduceRequest::default()
                .with_transactional_id(transactional_id.clone())
                .with_acks(acks)
                .with_timeout_ms(timeout_ms)
                .with_topic_data(local_topics);
            self.local_answer(local(RequestKind::Produce(sub)), peer, |k| match k {
                ResponseKind::Produce(r) => Some(r),
                _ => None,
            })
            .await
        };
        let timeout = Duration::from_millis(timeout_ms.max(0) as u64);
        let deadline = tokio::time::Instant::now() + timeout;
        // acks=0 gets no answer from a broker; upstream it is sent with
        // acks=1 so that the connection's answers stay matched.
        let upstream_acks = if acks == 0 { 1 } else { acks };
        let upstream_parts = join_all(upstream.into_iter().map(|(c, items)| {
            let cluster = self.cluster(&c).clone();
            async move {
                let send = |node: i32, group: Vec<Item<Option<Bytes>>>| {
                    let cluster = cluster.clone();
                    async move { produce_upstream(&cluster, node, group, upstream_acks, timeout_ms).await }
                };
                scatter(&cluster, items, ATTEMPTS, deadline, send).await
            }
        }));
        let (local_answer, upstream_parts) = futures_util::future::join(local_part, upstream_parts).await;
        if acks == 0 {
            return Reply::Silent;
        }
        let mut response = ProduceResponse::default();
        if let Some(local_answer) = local_answer {
            response.throttle_time_ms = local_answer.throttle_time_ms;
            for t in local_answer.responses {
                for p in t.partition_responses {
                    answers.insert((t.name.to_string(), p.index), p);
                }
            }
        }
        for (item, result) in upstream_parts.into_iter().flatten() {
            let answer = match result {
                Ok(p) => {
                    let mut out = produce_error(item.partition, p.error_code)
                        .with_base_offset(p.base_offset)
                        .with_log_append_time_ms(p.log_append_time_ms);
                    if version >= 5 {
                        out.log_start_offset = p.log_start_offset;
                    }
                    if version >= 8 {
                        out.record_errors = p.record_errors;
                        out.error_message = p.error_message;
                    }
                    out
                }
                Err(e) => {
                    let mut out = produce_error(item.partition, upstream_code(&e));
                    if version >= 8 {
                        out.error_message = Some(StrBytes::from_string(e.to_string()));
                    }
                    out
                }
            };
            answers.insert((item.client, item.partition), answer);
        }
        for (topic, partitions) in order {
            let partition_responses = partitions
                .iter()
                .map(|p| {
                    answers
                        .remove(&(topic.clone(), *p))
                        .unwrap_or_else(|| produce_error(*p, ResponseError::UnknownServerError.code()))
                })
                .collect();
            response.responses.push(
                TopicProduceResponse::default()
                    .with_name(name(&topic))
                    .with_partition_responses(partition_responses),
            );
        }
        Reply::Respond(Box::new(ResponseKind::Produce(response)))
    }

    /// Fetch: each destination's part long-polls on its own; the first
    /// part that comes back with records (or an error) answers the
    /// request, and the partitions of parts still waiting are left out of
    /// this answer (the client asks for them again).
    pub(super) async fn fetch(
        &self,
        req: FetchRequest,
        version: i16,
        local: impl Fn(RequestKind) -> Request,
        peer: SocketAddr,
    ) -> FetchResponse {
        let mut local_topics = Vec::new();
        let mut upstream: BTreeMap<String, Vec<Item<FetchPartition>>> = BTreeMap::new();
        let mut missing: Vec<FetchableTopicResponse> = Vec::new();
        let order: Vec<String> = req.topics.iter().map(|t| t.topic.to_string()).collect();
        for topic in &req.topics {
            let client = topic.topic.to_string();
            match self.place(&client) {
                Place::Local => local_topics.push(topic.clone()),
                Place::Nowhere => missing.push(
                    FetchableTopicResponse::default()
                        .with_topic(topic.topic.clone())
                        .with_partitions(
                            topic
                                .partitions
                                .iter()
                                .map(|p| {
                                    fetch_error(p.partition, ResponseError::UnknownTopicOrPartition.code())
                                })
                                .collect(),
                        ),
                ),
                Place::Upstream(cluster, name) => {
                    for p in &topic.partitions {
                        upstream.entry(cluster.clone()).or_default().push(Item {
                            client: client.clone(),
                            upstream: name.clone(),
                            partition: p.partition,
                            data: p.clone(),
                        });
                    }
                }
            }
        }
        let mut parts: FuturesUnordered<FetchPart<'_>> = FuturesUnordered::new();
        if !local_topics.is_empty() {
            let mut sub = req.clone();
            sub.topics = local_topics;
            sub.forgotten_topics_data = Vec::new();
            let request = local(RequestKind::Fetch(sub));
            parts.push(Box::pin(async move {
                let answer = self
                    .local_answer(request, peer, |k| match k {
                        ResponseKind::Fetch(r) => Some(r),
                        _ => None,
                    })
                    .await
                    .unwrap_or_default();
                let ready = has_data(&answer.responses);
                (answer.responses, ready)
            }));
        }
        let settings = (req.max_wait_ms, req.min_bytes, req.max_bytes, req.isolation_level);
        for (c, items) in upstream {
            let cluster = self.cluster(&c).clone();
            parts.push(Box::pin(async move {
                let deadline = tokio::time::Instant::now();
                let send = |node: i32, group: Vec<Item<FetchPartition>>| {
                    let cluster = cluster.clone();
                    async move { fetch_upstream(&cluster, node, group, settings).await }
                };
                let answered = scatter(&cluster, items, 1, deadline, send).await;
                let mut topics: Vec<FetchableTopicResponse> = Vec::new();
                let mut ready = false;
                for (item, result) in answered {
                    let data = match result {
                        Ok(p) => {
                            let mut out = fetch_error(item.partition, p.error_code)
                                .with_high_watermark(p.high_watermark)
                                .with_last_stable_offset(p.last_stable_offset)
                                .with_aborted_transactions(p.aborted_transactions)
                                .with_records(p.records);
                            if version >= 5 {
                                out.log_start_offset = p.log_start_offset;
                            }
                            out
                        }
                        Err(e) => fetch_error(item.partition, upstream_code(&e)),
                    };
                    ready |= data.error_code != 0 || data.records.as_ref().is_some_and(|r| !r.is_empty());
                    match topics.iter_mut().find(|t| t.topic.as_str() == item.client) {
                        Some(t) => t.partitions.push(data),
                        None => topics.push(
                            FetchableTopicResponse::default()
                                .with_topic(name(&item.client))
                                .with_partitions(vec![data]),
                        ),
                    }
                }
                (topics, ready)
            }));
        }
        let mut answered: Vec<FetchableTopicResponse> = missing;
        let mut response = FetchResponse::default();
        while let Some((part, ready)) = parts.next().await {
            answered.extend(part);
            if ready {
                break;
            }
        }
        // In the request's order.
        for topic in order {
            if let Some(at) = answered.iter().position(|t| t.topic.as_str() == topic) {
                response.responses.push(answered.swap_remove(at));
            }
        }
        response
    }

    pub(super) async fn list_offsets(
        &self,
        req: ListOffsetsRequest,
        local: impl Fn(RequestKind) -> Request,
        peer: SocketAddr,
    ) -> ListOffsetsResponse {
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
        let mut answers: Answers<ListOffsetsPartitionResponse> = HashMap::new();
        let mut local_topics = Vec::new();
        let mut upstream: BTreeMap<String, Vec<Item<ListOffsetsPartition>>> = BTreeMap::new();
        for topic in &req.topics {
            let client = topic.name.to_string();
            match self.place(&client) {
                Place::Local => local_topics.push(topic.clone()),
                Place::Nowhere => {
                    for p in &topic.partitions {
                        answers.insert(
                            (client.clone(), p.partition_index),
                            offsets_error(p.partition_index, ResponseError::UnknownTopicOrPartition.code()),
                        );
                    }
                }
                Place::Upstream(cluster, name) => {
                    for p in &topic.partitions {
                        upstream.entry(cluster.clone()).or_default().push(Item {
                            client: client.clone(),
                            upstream: name.clone(),
                            partition: p.partition_index,
                            data: p.clone(),
                        });
                    }
                }
            }
        }
        let local_part = async {
            if local_topics.is_empty() {
                return None;
            }
            let mut sub = req.clone();
            sub.topics = local_topics;
            self.local_answer(local(RequestKind::ListOffsets(sub)), peer, |k| match k {
                ResponseKind::ListOffsets(r) => Some(r),
                _ => None,
            })
            .await
        };
        let isolation = req.isolation_level;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let upstream_parts = join_all(upstream.into_iter().map(|(c, items)| {
            let cluster = self.cluster(&c).clone();
            async move {
                let send = |node: i32, group: Vec<Item<ListOffsetsPartition>>| {
                    let cluster = cluster.clone();
                    async move { list_offsets_upstream(&cluster, node, group, isolation).await }
                };
                scatter(&cluster, items, ATTEMPTS, deadline, send).await
            }
        }));
        let (local_answer, upstream_parts) = futures_util::future::join(local_part, upstream_parts).await;
        let mut response = ListOffsetsResponse::default();
        if let Some(local_answer) = local_answer {
            for t in local_answer.topics {
                for p in t.partitions {
                    answers.insert((t.name.to_string(), p.partition_index), p);
                }
            }
        }
        for (item, result) in upstream_parts.into_iter().flatten() {
            let answer = match result {
                Ok(p) => offsets_error(item.partition, p.error_code)
                    .with_timestamp(p.timestamp)
                    .with_offset(p.offset),
                Err(e) => offsets_error(item.partition, upstream_code(&e)),
            };
            answers.insert((item.client, item.partition), answer);
        }
        for (topic, partitions) in order {
            let partitions = partitions
                .iter()
                .map(|p| {
                    answers
                        .remove(&(topic.clone(), *p))
                        .unwrap_or_else(|| offsets_error(*p, ResponseError::UnknownServerError.code()))
                })
                .collect();
            response.topics.push(
                ListOffsetsTopicResponse::default()
                    .with_name(name(&topic))
                    .with_partitions(partitions),
            );
        }
        response
    }
}

/// One leader's Fetch, on the cluster's fetch lane.
async fn fetch_upstream(
    cluster: &Cluster,
    node: i32,
    group: Vec<Item<FetchPartition>>,
    (max_wait_ms, min_bytes, max_bytes, isolation_level): (i32, i32, i32, i8),
) -> Vec<(Item<FetchPartition>, Result<PartitionData, UpstreamError>)> {
    let topics = by_topic(&group, |item| {
        FetchPartition::default()
            .with_partition(item.partition)
            .with_fetch_offset(item.data.fetch_offset)
            .with_partition_max_bytes(item.data.partition_max_bytes)
    })
    .map(|(name, partitions)| FetchTopic::default().with_topic(name).with_partitions(partitions))
    .collect();
    let request = FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(min_bytes)
        .with_max_bytes(max_bytes)
        .with_isolation_level(isolation_level)
        .with_topics(topics);
    let answer: Result<FetchResponse, UpstreamError> = async {
        let connection = cluster.broker_lane(node, Lane::Fetch).await?;
        let response = connection.request(&request).await?;
        strait_upstream::error::check(cluster.name(), || "Fetch".to_owned(), response.error_code)?;
        Ok(response)
    }
    .await;
    let mut response = match answer {
        Ok(r) => r,
        Err(e) => return group.into_iter().map(|i| (i, Err(e.clone()))).collect(),
    };
    group
        .into_iter()
        .map(|item| {
            let found = response
                .responses
                .iter_mut()
                .find(|t| t.topic.as_str() == item.upstream)
                .and_then(|t| {
                    t.partitions
                        .iter_mut()
                        .find(|p| p.partition_index == item.partition)
                })
                .map(std::mem::take);
            // A broker may leave out partitions that have nothing (Tansu
            // does): no records, watermarks unknown.
            let data = found.unwrap_or_else(|| {
                fetch_error(item.partition, 0)
                    .with_high_watermark(-1)
                    .with_last_stable_offset(-1)
            });
            (item, Ok(data))
        })
        .collect()
}

/// One leader's Produce.
async fn produce_upstream(
    cluster: &Cluster,
    node: i32,
    group: Vec<Item<Option<Bytes>>>,
    acks: i16,
    timeout_ms: i32,
) -> Vec<(
    Item<Option<Bytes>>,
    Result<PartitionProduceResponse, UpstreamError>,
)> {
    let topics = by_topic(&group, |item| {
        PartitionProduceData::default()
            .with_index(item.partition)
            .with_records(item.data.clone())
    })
    .map(|(name, partitions)| {
        TopicProduceData::default()
            .with_name(name)
            .with_partition_data(partitions)
    })
    .collect();
    let request = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(timeout_ms)
        .with_topic_data(topics);
    let answer = async { cluster.broker(node).await?.request(&request).await }.await;
    settle(
        cluster,
        node,
        ApiKey::Produce,
        group,
        answer,
        |response: &ProduceResponse, item| {
            response
                .responses
                .iter()
                .find(|t| t.name.as_str() == item.upstream)
                .and_then(|t| t.partition_responses.iter().find(|p| p.index == item.partition))
                .map(|p| (p.clone(), p.error_code))
        },
    )
}

/// One leader's ListOffsets.
async fn list_offsets_upstream(
    cluster: &Cluster,
    node: i32,
    group: Vec<Item<ListOffsetsPartition>>,
    isolation_level: i8,
) -> Vec<(
    Item<ListOffsetsPartition>,
    Result<ListOffsetsPartitionResponse, UpstreamError>,
)> {
    let topics = by_topic(&group, |item| {
        ListOffsetsPartition::default()
            .with_partition_index(item.partition)
            .with_timestamp(item.data.timestamp)
    })
    .map(|(name, partitions)| {
        ListOffsetsTopic::default()
            .with_name(name)
            .with_partitions(partitions)
    })
    .collect();
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(isolation_level)
        .with_topics(topics);
    let answer = async { cluster.broker(node).await?.request(&request).await }.await;
    settle(
        cluster,
        node,
        ApiKey::ListOffsets,
        group,
        answer,
        |response: &ListOffsetsResponse, item| {
            response
                .topics
                .iter()
                .find(|t| t.name.as_str() == item.upstream)
                .and_then(|t| t.partitions.iter().find(|p| p.partition_index == item.partition))
                .map(|p| (p.clone(), p.error_code))
        },
    )
}

/// `group`'s partitions made with `partition`, gathered by upstream topic
/// in first-seen order.
fn by_topic<T, P>(
    group: &[Item<T>],
    partition: impl Fn(&Item<T>) -> P,
) -> std::vec::IntoIter<(TopicName, Vec<P>)> {
    let mut topics: Vec<(&str, Vec<P>)> = Vec::new();
    for item in group {
        let p = partition(item);
        match topics.iter_mut().find(|(t, _)| *t == item.upstream) {
            Some((_, ps)) => ps.push(p),
            None => topics.push((&item.upstream, vec![p])),
        }
    }
    topics
        .into_iter()
        .map(|(t, ps)| (name(t), ps))
        .collect::<Vec<_>>()
        .into_iter()
}

/// Each item's answer from one leader's `answer`, found with `find` (which
/// also gives its error code): every item fails with the request's error;
/// an item the answer leaves out is a malformed answer; a moved leader is
/// an error that [`scatter`] retries; any other code reaches the client
/// inside the answer.
fn settle<T, R, A>(
    cluster: &Cluster,
    node: i32,
    api: ApiKey,
    group: Vec<Item<T>>,
    answer: Result<R, UpstreamError>,
    find: impl Fn(&R, &Item<T>) -> Option<(A, i16)>,
) -> Vec<(Item<T>, Result<A, UpstreamError>)> {
    let response = match answer {
        Ok(r) => r,
        Err(e) => return group.into_iter().map(|i| (i, Err(e.clone()))).collect(),
    };
    group
        .into_iter()
        .map(|item| {
            let result = match find(&response, &item) {
                None => Err(UpstreamError::Malformed {
                    broker: format!("{} broker {node}", cluster.name()),
                    api,
                    detail: format!("no answer for {}-{}", item.upstream, item.partition),
                }),
                Some((a, code)) => match partition_result(cluster, &item, code) {
                    Err(e) if moved(&e) => Err(e),
                    _ => Ok(a),
                },
            };
            (item, result)
        })
        .collect()
}

fn has_data(topics: &[FetchableTopicResponse]) -> bool {
    topics
        .iter()
        .flat_map(|t| &t.partitions)
        .any(|p| p.error_code != 0 || p.records.as_ref().is_some_and(|r| !r.is_empty()))
}

fn produce_error(index: i32, code: i16) -> PartitionProduceResponse {
    PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(code)
        .with_base_offset(-1)
        .with_log_append_time_ms(-1)
}

fn fetch_error(partition: i32, code: i16) -> PartitionData {
    PartitionData::default()
        .with_partition_index(partition)
        .with_error_code(code)
        .with_aborted_transactions(Some(Vec::new()))
        .with_preferred_read_replica(BrokerId(-1))
        .with_records(Some(Bytes::new()))
}

fn offsets_error(partition: i32, code: i16) -> ListOffsetsPartitionResponse {
    ListOffsetsPartitionResponse::default()
        .with_partition_index(partition)
        .with_error_code(code)
        .with_timestamp(-1)
        .with_offset(-1)
        .with_leader_epoch(-1)
}
