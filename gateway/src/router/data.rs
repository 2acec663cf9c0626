//! Produce, Fetch and ListOffsets, split by destination and merged back.

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
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
use kafka_protocol::protocol::{Request, StrBytes};
use kafka_protocol::ResponseError;
use strait_upstream::{Answer, Cluster, Connection, Throttled, UpstreamError};
use tokio::time::Instant;

use super::session::Session;
use super::{name, upstream_code, Head, Pending, Place, Router};
use crate::broker::Reply;

/// How often a partition's request is sent again after its leader moved
/// (each time after a metadata refresh), within the client's timeout.
const ATTEMPTS: usize = 3;

/// How long after its `max_wait_ms` a Fetch that spans destinations waits
/// for parts still out (an upstream answers its long poll one round trip
/// after it ends).
const FETCH_GRACE: Duration = Duration::from_millis(500);

/// How long a ListOffsets (which has no timeout of its own) retries
/// partitions whose leader moved.
const LIST_OFFSETS_TIMEOUT: Duration = Duration::from_secs(5);

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

/// One destination's part of a Fetch: its topics.
type FetchPart<'a> = std::pin::Pin<Box<dyn Future<Output = Vec<FetchableTopicResponse>> + Send + 'a>>;

/// A partition's answer, by the client's topic name and partition.
type Answers<A> = HashMap<(String, i32), A>;

/// One request of an attempt, handed to a leader's connection: the items
/// it carries and its answer to come (or why it could not be sent).
struct Flight<R: Request, T> {
    node: i32,
    group: Vec<Item<T>>,
    answer: Result<Answer<R>, UpstreamError>,
}

/// Which connections a request goes on.
enum Via<'s> {
    /// The cluster's shared connection per broker.
    Shared,
    /// The client connection's own, for long-polling fetches.
    Session(&'s mut Session),
}

impl Via<'_> {
    async fn connection(&mut self, cluster: &Cluster, node: i32) -> Result<Connection, UpstreamError> {
        match self {
            Via::Shared => cluster.broker(node).await,
            Via::Session(session) => session.fetch_lane(cluster, node).await,
        }
    }
}

/// The first half of sending `items` to their leaders on `cluster`: one
/// request per leader, made by `build`, handed to its connection in order
/// (so requests started one after another reach each broker in that
/// order). Items whose leader is not known fail in their own flight.
async fn launch<R, T>(
    cluster: &Cluster,
    items: Vec<Item<T>>,
    via: &mut Via<'_>,
    build: &impl Fn(&[Item<T>]) -> R,
) -> Vec<Flight<R, T>>
where
    R: Request + Any,
    R::Response: Throttled,
{
    let mut groups: BTreeMap<i32, Vec<Item<T>>> = BTreeMap::new();
    let mut flights = Vec::new();
    for item in items {
        match cluster.leader_id(&item.upstream, item.partition).await {
            Ok(node) => groups.entry(node).or_default().push(item),
            Err(e) => flights.push(Flight {
                node: -1,
                group: vec![item],
                answer: Err(e),
            }),
        }
    }
    for (node, group) in groups {
        let answer = match via.connection(cluster, node).await {
            Ok(connection) => connection.send(&build(&group)).await,
            Err(e) => Err(e),
        };
        flights.push(Flight { node, group, answer });
    }
    flights
}

/// The second half: waits for the answers and gives each item its own
/// (found with `find`, see [`settle`]). Items whose leader is unknown or
/// moved are sent again on the shared connections after a metadata
/// refresh, at most `attempts` times in all and not past `deadline`.
async fn land<R, T, A>(
    cluster: &Cluster,
    mut flights: Vec<Flight<R, T>>,
    attempts: usize,
    deadline: Instant,
    build: &impl Fn(&[Item<T>]) -> R,
    find: &impl Fn(&mut R::Response, &Item<T>) -> Option<(A, i16)>,
) -> Vec<(Item<T>, Result<A, UpstreamError>)>
where
    R: Request + Any,
    R::Response: Throttled,
{
    let api = ApiKey::try_from(R::KEY).expect("kafka-protocol requests have known keys");
    let mut done = Vec::new();
    for attempt in 1..=attempts {
        let answered = join_all(flights.into_iter().map(|flight| async move {
            let answer = match flight.answer {
                Ok(answer) => answer.answer().await,
                Err(e) => Err(e),
            };
            settle(cluster, flight.node, api, flight.group, answer, find)
        }))
        .await;
        let last = attempt == attempts || Instant::now() >= deadline;
        let mut retry = Vec::new();
        for (item, result) in answered.into_iter().flatten() {
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
        let pause = Duration::from_millis(50 * attempt as u64);
        tokio::time::sleep_until(deadline.min(Instant::now() + pause)).await;
        flights = launch(cluster, retry, &mut Via::Shared, build).await;
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
    pub(super) async fn produce<'a>(
        &'a self,
        session: &mut Session,
        head: Head,
        req: ProduceRequest,
    ) -> Pending<'a> {
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
        // Idempotent batches carry the cluster's own producer id.
        for (c, items) in upstream.iter_mut() {
            let cluster = self.cluster(c);
            let mut kept = Vec::with_capacity(items.len());
            for mut item in items.drain(..) {
                if let Some(records) = item.data.take() {
                    match self.producers.rewrite(cluster, records).await {
                        Ok(records) => item.data = Some(records),
                        Err(e) => {
                            tracing::debug!(cluster = %c, error = %e, "no upstream producer id");
                            let mut answer = produce_error(item.partition, upstream_code(&e));
                            if head.version >= 8 {
                                answer.error_message = Some(StrBytes::from_string(e.to_string()));
                            }
                            answers.insert((item.client, item.partition), answer);
                            continue;
                        }
                    }
                }
                kept.push(item);
            }
            *items = kept;
        }
        let local = (!local_topics.is_empty()).then(|| {
            let sub = ProduceRequest::default()
                .with_transactional_id(transactional_id)
                .with_acks(acks)
                .with_timeout_ms(timeout_ms)
                .with_topic_data(local_topics);
            (self.local(session, &head), sub)
        });
        let deadline = Instant::now() + Duration::from_millis(timeout_ms.max(0) as u64);
        // acks=0 gets no answer from a broker; upstream it is sent with
        // acks=1 so that the connection's answers stay matched.
        let upstream_acks = if acks == 0 { 1 } else { acks };
        let build = move |group: &[Item<Option<Bytes>>]| produce_request(group, upstream_acks, timeout_ms);
        let mut launched = Vec::new();
        for (c, items) in upstream {
            let flights = launch(self.cluster(&c), items, &mut Via::Shared, &build).await;
            launched.push((c, flights));
        }
        let version = head.version;
        Box::pin(async move {
            let local_part = async {
                let (call, sub) = local?;
                call.answer(RequestKind::Produce(sub), |k| match k {
                    ResponseKind::Produce(r) => Some(r),
                    _ => None,
                })
                .await
            };
            let upstream_parts = join_all(launched.into_iter().map(|(c, flights)| async move {
                land(
                    self.cluster(&c),
                    flights,
                    ATTEMPTS,
                    deadline,
                    &build,
                    &find_produced,
                )
                .await
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
        })
    }

    /// Fetch: every destination's part is sent at once and long-polls on
    /// its own (upstream ones on the client connection's own fetch
    /// connections). The request is answered once the parts that came
    /// back hold `min_bytes` (or an error), or every part came back, or
    /// `max_wait_ms` (and a grace for the upstream's round trip) passed;
    /// partitions of parts still waiting are left out of this answer (the
    /// client asks for them again). Records past `max_bytes` in all are
    /// left out too, but never those of the first partition that has some.
    pub(super) async fn fetch<'a>(
        &'a self,
        session: &mut Session,
        head: Head,
        req: FetchRequest,
    ) -> Pending<'a> {
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
        let (max_wait_ms, min_bytes, max_bytes) = (req.max_wait_ms, req.min_bytes, req.max_bytes);
        let local = (!local_topics.is_empty()).then(|| {
            let mut sub = req.clone();
            sub.topics = local_topics;
            sub.forgotten_topics_data = Vec::new();
            (self.local(session, &head), sub)
        });
        let settings = (max_wait_ms, min_bytes, max_bytes, req.isolation_level);
        let build = move |group: &[Item<FetchPartition>]| fetch_request(group, settings);
        let mut launched = Vec::new();
        for (c, items) in upstream {
            let flights = launch(self.cluster(&c), items, &mut Via::Session(session), &build).await;
            launched.push((c, flights));
        }
        let version = head.version;
        Box::pin(async move {
            let deadline = Instant::now() + Duration::from_millis(max_wait_ms.max(0) as u64) + FETCH_GRACE;
            let mut parts: FuturesUnordered<FetchPart<'_>> = FuturesUnordered::new();
            if let Some((call, sub)) = local {
                parts.push(Box::pin(async move {
                    call.answer(RequestKind::Fetch(sub), |k| match k {
                        ResponseKind::Fetch(r) => Some(r.responses),
                        _ => None,
                    })
                    .await
                    .unwrap_or_default()
                }));
            }
            for (c, flights) in launched {
                let build = &build;
                parts.push(Box::pin(async move {
                    let answered =
                        land(self.cluster(&c), flights, 1, Instant::now(), build, &find_fetched).await;
                    let mut topics: Vec<FetchableTopicResponse> = Vec::new();
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
                        match topics.iter_mut().find(|t| t.topic.as_str() == item.client) {
                            Some(t) => t.partitions.push(data),
                            None => topics.push(
                                FetchableTopicResponse::default()
                                    .with_topic(name(&item.client))
                                    .with_partitions(vec![data]),
                            ),
                        }
                    }
                    topics
                }));
            }
            let mut answered: Vec<FetchableTopicResponse> = missing;
            let mut bytes = 0usize;
            let mut errors = false;
            let expire = tokio::time::sleep_until(deadline);
            tokio::pin!(expire);
            loop {
                let part = tokio::select! {
                    part = parts.next() => part,
                    () = &mut expire => break,
                };
                let Some(part) = part else { break };
                for p in part.iter().flat_map(|t| &t.partitions) {
                    bytes += p.records.as_ref().map_or(0, Bytes::len);
                    errors |= p.error_code != 0;
                }
                answered.extend(part);
                if parts.is_empty() || errors || (bytes > 0 && bytes >= min_bytes.max(0) as usize) {
                    break;
                }
            }
            let mut response = FetchResponse::default();
            // In the request's order.
            for topic in order {
                if let Some(at) = answered.iter().position(|t| t.topic.as_str() == topic) {
                    response.responses.push(answered.swap_remove(at));
                }
            }
            within_max_bytes(&mut response.responses, max_bytes);
            Reply::Respond(Box::new(ResponseKind::Fetch(response)))
        })
    }

    pub(super) async fn list_offsets<'a>(
        &'a self,
        session: &mut Session,
        head: Head,
        req: ListOffsetsRequest,
    ) -> Pending<'a> {
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
        let isolation = req.isolation_level;
        let local = (!local_topics.is_empty()).then(|| {
            let mut sub = req;
            sub.topics = local_topics;
            (self.local(session, &head), sub)
        });
        let build = move |group: &[Item<ListOffsetsPartition>]| list_offsets_request(group, isolation);
        let mut launched = Vec::new();
        for (c, items) in upstream {
            let flights = launch(self.cluster(&c), items, &mut Via::Shared, &build).await;
            launched.push((c, flights));
        }
        let deadline = Instant::now() + LIST_OFFSETS_TIMEOUT;
        Box::pin(async move {
            let local_part = async {
                let (call, sub) = local?;
                call.answer(RequestKind::ListOffsets(sub), |k| match k {
                    ResponseKind::ListOffsets(r) => Some(r),
                    _ => None,
                })
                .await
            };
            let upstream_parts = join_all(launched.into_iter().map(|(c, flights)| async move {
                land(
                    self.cluster(&c),
                    flights,
                    ATTEMPTS,
                    deadline,
                    &build,
                    &find_offsets,
                )
                .await
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
            Reply::Respond(Box::new(ResponseKind::ListOffsets(response)))
        })
    }
}

/// Record bytes past `max_bytes` (counted in order) are left out, except
/// those of the first partition that has any (as a broker always returns
/// at least one batch, so that a consumer makes progress).
fn within_max_bytes(topics: &mut [FetchableTopicResponse], max_bytes: i32) {
    let max = max_bytes.max(0) as usize;
    let mut total = 0usize;
    for p in topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
        let len = p.records.as_ref().map_or(0, Bytes::len);
        if len == 0 {
            continue;
        }
        if total > 0 && total + len > max {
            p.records = Some(Bytes::new());
        } else {
            total += len;
        }
    }
}

/// One leader's Fetch.
fn fetch_request(
    group: &[Item<FetchPartition>],
    (max_wait_ms, min_bytes, max_bytes, isolation_level): (i32, i32, i32, i8),
) -> FetchRequest {
    let topics = by_topic(group, |item| {
        FetchPartition::default()
            .with_partition(item.partition)
            .with_fetch_offset(item.data.fetch_offset)
            .with_partition_max_bytes(item.data.partition_max_bytes)
    })
    .map(|(name, partitions)| FetchTopic::default().with_topic(name).with_partitions(partitions))
    .collect();
    FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(min_bytes)
        .with_max_bytes(max_bytes)
        .with_isolation_level(isolation_level)
        .with_topics(topics)
}

/// An item's part of a Fetch answer. A broker may leave out partitions
/// that have nothing (Tansu does): no records, watermarks unknown.
fn find_fetched(response: &mut FetchResponse, item: &Item<FetchPartition>) -> Option<(PartitionData, i16)> {
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
    let mut data = found.unwrap_or_else(|| {
        fetch_error(item.partition, 0)
            .with_high_watermark(-1)
            .with_last_stable_offset(-1)
    });
    if response.error_code != 0 {
        data.error_code = response.error_code;
    }
    let code = data.error_code;
    Some((data, code))
}

/// One leader's Produce.
fn produce_request(group: &[Item<Option<Bytes>>], acks: i16, timeout_ms: i32) -> ProduceRequest {
    let topics = by_topic(group, |item| {
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
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(timeout_ms)
        .with_topic_data(topics)
}

fn find_produced(
    response: &mut ProduceResponse,
    item: &Item<Option<Bytes>>,
) -> Option<(PartitionProduceResponse, i16)> {
    response
        .responses
        .iter()
        .find(|t| t.name.as_str() == item.upstream)
        .and_then(|t| t.partition_responses.iter().find(|p| p.index == item.partition))
        .map(|p| (p.clone(), p.error_code))
}

/// One leader's ListOffsets.
fn list_offsets_request(group: &[Item<ListOffsetsPartition>], isolation_level: i8) -> ListOffsetsRequest {
    let topics = by_topic(group, |item| {
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
    ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(isolation_level)
        .with_topics(topics)
}

fn find_offsets(
    response: &mut ListOffsetsResponse,
    item: &Item<ListOffsetsPartition>,
) -> Option<(ListOffsetsPartitionResponse, i16)> {
    response
        .topics
        .iter()
        .find(|t| t.name.as_str() == item.upstream)
        .and_then(|t| t.partitions.iter().find(|p| p.partition_index == item.partition))
        .map(|p| (p.clone(), p.error_code))
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
/// an error that [`land`] retries; any other code reaches the client
/// inside the answer.
fn settle<T, R, A>(
    cluster: &Cluster,
    node: i32,
    api: ApiKey,
    group: Vec<Item<T>>,
    answer: Result<R, UpstreamError>,
    find: &impl Fn(&mut R, &Item<T>) -> Option<(A, i16)>,
) -> Vec<(Item<T>, Result<A, UpstreamError>)> {
    let mut response = match answer {
        Ok(r) => r,
        Err(e) => return group.into_iter().map(|i| (i, Err(e.clone()))).collect(),
    };
    group
        .into_iter()
        .map(|item| {
            let result = match find(&mut response, &item) {
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
