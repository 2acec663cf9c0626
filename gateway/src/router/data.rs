//! Produce and Fetch, split by destination and by upstream leader and
//! merged back, each with its own rules beside the common walk (the other
//! per-partition requests are `partitioned`'s).

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use strait_upstream::UpstreamError;
use tokio::time::Instant;

use super::partitioned::ATTEMPTS;
use super::producers;
use super::scatter::{by_topic, in_order, land, land_all, Item, Split, Via};
use super::session::Session;
use super::topic_ids::ByIds;
use super::{name, partition_code, producer_id_code, Head, Pending, Router};
use crate::broker::Reply;

/// How long after its `max_wait_ms` a Fetch that spans destinations waits
/// for parts still out (an upstream answers its long poll one round trip
/// after it ends).
const FETCH_GRACE: Duration = Duration::from_millis(500);

/// A Produce request divided by destination.
type ProduceSplit = Split<TopicProduceData, Option<Bytes>, PartitionProduceResponse>;

/// One destination's part of a Fetch: its topics.
type FetchPart<'a> = std::pin::Pin<Box<dyn Future<Output = Vec<FetchableTopicResponse>> + Send + 'a>>;

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
        let mut split = self.split(
            topic_data,
            |t| t.name.to_string(),
            |t| t.partition_data.iter().map(|p| p.index).collect(),
            |t| {
                t.partition_data
                    .into_iter()
                    .map(|p| (p.index, p.records))
                    .collect()
            },
            produce_error,
        );
        let chained = self.chain(&mut split, head.version).await;
        let local = (!split.local.is_empty()).then(|| {
            let sub = ProduceRequest::default()
                .with_transactional_id(transactional_id)
                .with_acks(acks)
                .with_timeout_ms(timeout_ms)
                .with_topic_data(std::mem::take(&mut split.local));
            (self.local(session, &head), sub)
        });
        let deadline = Instant::now() + Duration::from_millis(timeout_ms.max(0) as u64);
        // acks=0 gets no answer from a broker; upstream it is sent with
        // acks=1 so that the connection's answers stay matched.
        let upstream_acks = if acks == 0 { 1 } else { acks };
        // A leader holds a batch until its replicas have it or the
        // request's timeout passes, then answers REQUEST_TIMED_OUT. Told to
        // give up before Strait stops waiting for the answer, it answers,
        // on a connection that stays up, rather than leave Strait to drop
        // the connection and every other request on it (whose batches the
        // leader may still append, after later ones sent on a new one).
        let upstream_timeout_ms = split
            .upstream
            .keys()
            .map(|c| self.cluster(c).options().connect.request_timeout * 4 / 5)
            .min()
            .map_or(timeout_ms, |patience| {
                timeout_ms.min(i32::try_from(patience.as_millis()).unwrap_or(i32::MAX))
            });
        let build =
            move |group: &[Item<Option<Bytes>>]| produce_request(group, upstream_acks, upstream_timeout_ms);
        let launched = self
            .launch_all(std::mem::take(&mut split.upstream), &mut Via::Shared, &build)
            .await;
        // Batches that could not be sent failed now: the connection's next
        // requests must see it, not wait for this one's other answers.
        for item in launched
            .iter()
            .flat_map(|(_, flights)| flights)
            .flat_map(|f| f.unsent())
        {
            chained.settle(&item.client, item.partition, false);
        }
        let version = head.version;
        Box::pin(async move {
            let local_part = async {
                let (call, sub) = local?;
                call.ask(sub).await
            };
            // Batches with sequence numbers are never sent again here: a
            // moved leader's NOT_LEADER_OR_FOLLOWER goes back to the
            // client, which sends its batches again in their order. (Each
            // request retrying on its own could reach the new leader out of
            // order, and the client would take the upstream's
            // OUT_OF_ORDER_SEQUENCE_NUMBER for a fatal error.)
            let attempts = if chained.is_empty() { ATTEMPTS } else { 1 };
            // A batch's fate goes into its chain as soon as its leader
            // answers (or its connection fails), not once the whole request
            // is answered: the client's next requests, launched meanwhile,
            // must not pass a failed batch (a new connection may bring
            // them to the leader first, which takes them from a producer it
            // has no state for, and the failed one is then refused).
            let settled = |item: &Item<Option<Bytes>>, result: &Result<PartitionProduceResponse, _>| {
                let written = matches!(result, Ok(p) if p.error_code == 0);
                chained.settle(&item.client, item.partition, written);
            };
            let upstream_part = land_all(launched, attempts, deadline, &build, &find_produced, &settled);
            let (local_answer, upstream_answers) =
                futures_util::future::join(local_part, upstream_part).await;
            if acks == 0 {
                return Reply::Silent;
            }
            let mut response = ProduceResponse::default();
            let answers = &mut split.answers;
            if let Some(local_answer) = local_answer {
                response.throttle_time_ms = local_answer.throttle_time_ms;
                for t in local_answer.responses {
                    for p in t.partition_responses {
                        answers.insert((t.name.to_string(), p.index), p);
                    }
                }
            }
            for (item, result) in upstream_answers {
                if result.as_ref().map_or(true, |p| p.error_code != 0) {
                    let sequence = chained.base(&item.client, item.partition);
                    let code = result.as_ref().map_or(-1, |p| p.error_code);
                    tracing::debug!(topic = %item.upstream, partition = item.partition, code, ?sequence, "produce failed");
                }
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
                        let mut out = produce_error(item.partition, partition_code(&e));
                        if version >= 8 {
                            out.error_message = Some(StrBytes::from_string(e.to_string()));
                        }
                        out
                    }
                };
                answers.insert((item.client, item.partition), answer);
            }
            response.responses = in_order(split.order, answers, produce_error)
                .into_iter()
                .map(|(name, partitions)| {
                    TopicProduceResponse::default()
                        .with_name(name)
                        .with_partition_responses(partitions)
                })
                .collect();
            Reply::Respond(Box::new(ResponseKind::Produce(response)))
        })
    }

    /// Idempotent batches bound upstream carry the cluster's own producer
    /// id and keep their order per producer and partition (see
    /// `producers`): a batch behind a failed one of its chain, or whose
    /// cluster gave no producer id, is answered now and not sent. Returns
    /// the place in its chain of each batch that goes, failed if dropped
    /// before its answer was seen.
    async fn chain(&self, split: &mut ProduceSplit, version: i16) -> producers::Unsettled<'_> {
        let mut chained = producers::Unsettled::new(&self.producers);
        let answer = |partition, code: i16, why: String| {
            let mut answer = produce_error(partition, code);
            if version >= 8 {
                answer.error_message = Some(StrBytes::from_string(why));
            }
            answer
        };
        for (c, items) in split.upstream.iter_mut() {
            let cluster = self.cluster(c);
            // A cluster that gave no producer id gives none to this
            // request's other partitions either (each asking would wait
            // out the patience again).
            let mut no_id = None;
            let mut kept = Vec::with_capacity(items.len());
            for mut item in items.drain(..) {
                if let Some(records) = item.data.take() {
                    if let Err(e) = producers::whole_batches(&records) {
                        tracing::debug!(cluster = %c, topic = %item.upstream, partition = item.partition, error = %e, "refused: not whole record batches");
                        let why = format!("not whole record batches: {e}");
                        let refused = answer(item.partition, ResponseError::InvalidRecord.code(), why);
                        split.answers.insert((item.client, item.partition), refused);
                        continue;
                    }
                    let at = producers::chain_at(c, &item.upstream, item.partition, &records);
                    if let Some(at) = &at {
                        let node = cluster
                            .leader_id(&item.upstream, item.partition)
                            .await
                            .unwrap_or(-1);
                        if let Err(held) = self.producers.in_order(at, node) {
                            tracing::debug!(cluster = %c, topic = %item.upstream, partition = item.partition, sequence = at.1, node, ?held, "held back");
                            let refused = answer(
                                item.partition,
                                ResponseError::NotLeaderOrFollower.code(),
                                held.why().into(),
                            );
                            split.answers.insert((item.client, item.partition), refused);
                            continue;
                        }
                        chained.add(&item.client, item.partition, at.clone());
                    }
                    let rewritten = match &no_id {
                        Some(e) => Err(UpstreamError::clone(e)),
                        None => self.producers.rewrite(cluster, records).await,
                    };
                    match rewritten {
                        Ok(records) => item.data = Some(records),
                        Err(e) => {
                            tracing::debug!(cluster = %c, error = %e, "no upstream producer id");
                            chained.settle(&item.client, item.partition, false);
                            let refused = answer(item.partition, producer_id_code(&e), e.to_string());
                            split.answers.insert((item.client, item.partition), refused);
                            no_id = Some(e);
                            continue;
                        }
                    }
                }
                kept.push(item);
            }
            *items = kept;
        }
        chained
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
        mut req: FetchRequest,
    ) -> Pending<'a> {
        // From v13 on topics come by id (KIP-516); they are routed by the
        // names the ids stand for, and answered with the ids again.
        let by_ids = (head.version >= 13).then(|| {
            let (named, by_ids) =
                self.name_by_id(std::mem::take(&mut req.topics), |t| (&mut t.topic, t.topic_id));
            req.topics = named;
            by_ids
        });
        let split = self.split(
            req.topics.clone(),
            |t| t.topic.to_string(),
            |t| t.partitions.iter().map(|p| p.partition).collect(),
            |t| t.partitions.into_iter().map(|p| (p.partition, p)).collect(),
            fetch_error,
        );
        let order: Vec<String> = split.order.iter().map(|(t, _)| t.clone()).collect();
        // Partitions of topics no route matches, answered at once.
        let mut missing: Vec<FetchableTopicResponse> = Vec::new();
        let mut unrouted: Vec<((String, i32), PartitionData)> = split.answers.into_iter().collect();
        unrouted.sort_by(|a, b| a.0.cmp(&b.0));
        for ((topic, _), data) in unrouted {
            match missing.iter_mut().find(|t| t.topic.as_str() == topic) {
                Some(t) => t.partitions.push(data),
                None => missing.push(
                    FetchableTopicResponse::default()
                        .with_topic(name(&topic))
                        .with_partitions(vec![data]),
                ),
            }
        }
        let (local_topics, upstream) = (split.local, split.upstream);
        let (max_wait_ms, min_bytes, max_bytes) = (req.max_wait_ms, req.min_bytes, req.max_bytes);
        let local = (!local_topics.is_empty()).then(|| {
            let mut sub = req.clone();
            sub.topics = local_topics;
            sub.forgotten_topics_data = Vec::new();
            (self.local(session, &head), sub)
        });
        let settings = (max_wait_ms, min_bytes, max_bytes, req.isolation_level);
        let build = move |group: &[Item<FetchPartition>]| fetch_request(group, settings);
        let launched = self
            .launch_all(upstream, &mut Via::Session(session), &build)
            .await;
        let version = head.version;
        Box::pin(async move {
            let deadline = Instant::now() + Duration::from_millis(max_wait_ms.max(0) as u64) + FETCH_GRACE;
            let mut parts: FuturesUnordered<FetchPart<'_>> = FuturesUnordered::new();
            if let Some((call, sub)) = local {
                parts.push(Box::pin(async move {
                    call.ask(sub).await.map(|r| r.responses).unwrap_or_default()
                }));
            }
            for (cluster, flights) in launched {
                let build = &build;
                parts.push(Box::pin(async move {
                    let answered = land(
                        cluster,
                        flights,
                        1,
                        Instant::now(),
                        build,
                        &find_fetched,
                        &|_, _| {},
                    )
                    .await;
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
                            Err(e) => fetch_error(item.partition, partition_code(&e)),
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
            if let Some(by_ids) = by_ids {
                with_topic_ids(&mut response, by_ids);
            }
            Reply::Respond(Box::new(ResponseKind::Fetch(response)))
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

/// A Fetch answer for a request by topic ids: each topic with the id the
/// client named it by, and UNKNOWN_TOPIC_ID for ids that name no topic.
fn with_topic_ids(response: &mut FetchResponse, by_ids: ByIds<FetchTopic>) {
    for t in &mut response.responses {
        if let Some(id) = by_ids.ids.get(t.topic.as_str()) {
            t.topic_id = *id;
        }
    }
    for unknown in by_ids.unknown {
        let partitions = unknown
            .partitions
            .iter()
            .map(|p| fetch_error(p.partition, ResponseError::UnknownTopicId.code()))
            .collect();
        response.responses.push(
            FetchableTopicResponse::default()
                .with_topic_id(unknown.topic_id)
                .with_partitions(partitions),
        );
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
            // Removed, not taken: a taken slot would be left with the
            // default partition index 0 and found again for partition 0.
            let at = t
                .partitions
                .iter()
                .position(|p| p.partition_index == item.partition)?;
            Some(t.partitions.swap_remove(at))
        });
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
