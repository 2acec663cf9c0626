//! Requests grouped by leader: each partition's task asks for its own
//! fetches or produces, and one task per broker gathers whatever
//! partitions are waiting into requests.
//!
//! **Fetches** go on [`FETCH_LANES`] connections per source broker, one
//! request in flight on each: a broker answers a connection's requests in
//! order, and TCP holds each connection to its window, so one connection
//! cannot keep a long, fat link full. A partition may have several fetches
//! out at once (at offsets it estimates ahead of its position, see
//! [`crate::partition`]); a Fetch carries each partition at most once, so
//! a partition's later fetches ride later requests, on other lanes.
//! Requests that may long-poll (every partition in them has caught up
//! with the source) are at most [`POLLS`] at a time, on the lowest free
//! lanes, while requests that carry data take the highest: a partition
//! caught up keeps a second fetch waiting at the broker half a round trip
//! after its first (see [`crate::partition`]), and long-polls never hold
//! every lane. A request carries at most [`LinkEstimate::in_flight_target`]
//! divided among the lanes, so a mirror of many partitions spreads its
//! data over the lanes rather than asking for everything at once. Each
//! answer feeds the broker's [`LinkEstimate`] (lowest round trip, highest
//! delivery rate), from which partitions size their fetches.
//!
//! **Produces**: several requests in flight per target broker. A
//! partition may have several batches queued for produce; each Produce
//! carries at most one of them (Kafka's rule), in order.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{FetchRequest, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use strait_upstream::{Cluster, Lane, UpstreamError};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Produce requests in flight per broker.
const IN_FLIGHT: usize = 8;
/// Fetch connections (and requests in flight) per source broker. With
/// Linux's default 6 MiB receive window, 4 connections carry up to 24 MiB
/// per round trip: 240 MB/s at 100 ms.
pub const FETCH_LANES: usize = 4;
/// Requests that may long-poll out at once per source broker: two, so
/// that caught-up partitions can keep one waiting at the broker while the
/// answer to the other travels.
pub const POLLS: usize = 2;
/// How long the next long-poll waits, after a long-poll's answer, for the
/// partitions it answered to ask again.
const GATHER: Duration = Duration::from_millis(5);
/// Most bytes of records in one Produce request.
const MAX_PRODUCE_REQUEST: usize = 16 << 20;

/// What a fetch of one partition brought.
#[derive(Debug, Clone, Default)]
pub struct Fetched {
    /// Record batches as the broker sent them (the last one may be cut
    /// short at the size limit).
    pub records: Bytes,
    /// The partition's high watermark.
    pub high_watermark: i64,
    /// Its last stable offset (read_committed reads stop there), -1 if not
    /// given.
    pub last_stable_offset: i64,
    /// Its log start offset, -1 if not given.
    pub log_start_offset: i64,
    /// Aborted transactions in the range: (producer id, first offset).
    pub aborted: Vec<(i64, i64)>,
}

impl Fetched {
    /// Where read_committed reads of the partition end: the last stable
    /// offset, or the high watermark when the broker gives none.
    pub fn readable_end(&self) -> i64 {
        if self.last_stable_offset >= 0 {
            self.last_stable_offset
        } else {
            self.high_watermark
        }
    }
}

/// What the target said to one partition's produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Produced {
    /// Offset of the first record written.
    pub base_offset: i64,
}

/// A topic and partition.
type PartitionKey = (Arc<str>, i32);

/// One partition's fetch, waiting for a request to carry it.
#[derive(Debug)]
struct FetchItem {
    topic: Arc<str>,
    partition: i32,
    offset: i64,
    max_bytes: i32,
    /// The partition's source is known to hold records at `offset`, so the
    /// broker answers at once (false: the fetch may long-poll).
    has_data: bool,
    reply: oneshot::Sender<Result<Fetched, UpstreamError>>,
}

#[derive(Debug)]
struct ProduceItem {
    topic: Arc<str>,
    partition: i32,
    records: Bytes,
    reply: oneshot::Sender<Result<Produced, UpstreamError>>,
}

/// Fetch settings shared by every request.
#[derive(Debug, Clone, Copy)]
pub struct FetchSettings {
    /// How long the broker may hold a fetch that found nothing.
    pub max_wait: Duration,
    /// Most bytes in one Fetch answer.
    pub max_bytes: i32,
}

/// A fetch handed to a broker's request task; await it for the answer.
pub type PendingFetch = oneshot::Receiver<Result<Fetched, UpstreamError>>;

/// Fetches from the source, grouped by leader. Reads are read_committed:
/// aborted transactions are listed and records past the last stable
/// offset are not returned.
#[derive(Debug, Clone)]
pub struct Fetcher {
    cluster: Cluster,
    settings: FetchSettings,
    queues: Arc<Queues<FetchItem>>,
    links: Arc<Mutex<HashMap<i32, Arc<LinkEstimate>>>>,
}

impl Fetcher {
    /// A fetcher over `cluster`.
    pub fn new(cluster: Cluster, settings: FetchSettings) -> Fetcher {
        Fetcher {
            cluster,
            settings,
            queues: Arc::default(),
            links: Arc::default(),
        }
    }

    /// Fetches `topic-partition` from `offset`, at most `max_bytes` of it
    /// (a first batch larger than that still comes whole, KIP-74), and
    /// waits for the answer.
    pub async fn fetch(
        &self,
        topic: &Arc<str>,
        partition: i32,
        offset: i64,
        max_bytes: i32,
    ) -> Result<Fetched, UpstreamError> {
        let pending = self.send(topic, partition, offset, max_bytes, false).await?;
        pending.await.map_err(|_| gone(&self.cluster))?
    }

    /// Hands a fetch of `topic-partition` from `offset` to its leader's
    /// request task and returns without waiting for the answer, so that a
    /// partition can have several out. `has_data`: the source is known to
    /// hold records at `offset` (the fetch will not long-poll).
    pub async fn send(
        &self,
        topic: &Arc<str>,
        partition: i32,
        offset: i64,
        max_bytes: i32,
        has_data: bool,
    ) -> Result<PendingFetch, UpstreamError> {
        let node = self.cluster.leader_id(topic, partition).await?;
        let (reply, answer) = oneshot::channel();
        let item = FetchItem {
            topic: topic.clone(),
            partition,
            offset,
            max_bytes,
            has_data,
            reply,
        };
        self.queue(node).send(item).map_err(|_| gone(&self.cluster))?;
        Ok(answer)
    }

    /// What is known of the link to the leader of `topic-partition`
    /// (defaults while nothing was measured, or the leader is unknown).
    pub async fn link(&self, topic: &Arc<str>, partition: i32) -> Arc<LinkEstimate> {
        match self.cluster.leader_id(topic, partition).await {
            Ok(node) => self.link_of(node),
            Err(_) => Arc::new(LinkEstimate::default()),
        }
    }

    fn link_of(&self, node: i32) -> Arc<LinkEstimate> {
        self.links
            .lock()
            .expect("fetch links")
            .entry(node)
            .or_default()
            .clone()
    }

    fn queue(&self, node: i32) -> mpsc::UnboundedSender<FetchItem> {
        let link = self.link_of(node);
        queue(&self.queues, node, |rx| {
            fetch_loop(self.cluster.clone(), self.settings, node, link, rx)
        })
    }
}

/// What the fetches to one source broker have measured of the link: the
/// lowest round trip of an answer that did not wait at the broker, and the
/// highest rate at which answers brought bytes, each over the last few
/// seconds. Their product is the link's bandwidth-delay product.
#[derive(Debug, Default)]
pub struct LinkEstimate {
    inner: Mutex<Samples>,
}

/// Round trips are kept per [`RTT_WINDOW`] (this one's lowest and the
/// last one's); rates per [`RATE_INTERVAL`], the last [`RATE_INTERVALS`].
#[derive(Debug, Default)]
struct Samples {
    rtt: [Option<Duration>; 2],
    rtt_since: Option<Instant>,
    bytes: u64,
    rate_since: Option<Instant>,
    rates: VecDeque<f64>,
}

const RTT_WINDOW: Duration = Duration::from_secs(10);
const RATE_INTERVAL: Duration = Duration::from_millis(250);
const RATE_INTERVALS: usize = 8;
/// Bytes the fetches of one broker keep in flight before anything is
/// measured, and at least: 32 MiB fills 250 MB/s at a 100 ms round trip
/// (and half the default budget).
pub const MIN_IN_FLIGHT: usize = 32 << 20;
/// Most bytes in flight per broker however fast the link looks (the
/// mirror's budget bounds it too).
const MAX_IN_FLIGHT: usize = 1 << 30;

impl LinkEstimate {
    /// One answer: it took `took` and brought `bytes` of records;
    /// `immediate` when the broker had data for it (so it did not wait).
    fn observe(&self, took: Duration, bytes: usize, immediate: bool) {
        let now = Instant::now();
        let mut s = self.inner.lock().expect("link estimate");
        if immediate {
            if s.rtt_since.is_none_or(|since| now - since >= RTT_WINDOW) {
                s.rtt = [None, s.rtt[0]];
                s.rtt_since = Some(now);
            }
            s.rtt[0] = Some(s.rtt[0].map_or(took, |r| r.min(took)));
        }
        s.bytes += bytes as u64;
        let since = *s.rate_since.get_or_insert(now);
        let elapsed = now - since;
        if elapsed >= RATE_INTERVAL {
            let rate = s.bytes as f64 / elapsed.as_secs_f64();
            if s.rates.len() == RATE_INTERVALS {
                s.rates.pop_front();
            }
            s.rates.push_back(rate);
            s.bytes = 0;
            s.rate_since = Some(now);
        }
    }

    /// The lowest round trip seen lately, if any.
    pub fn round_trip(&self) -> Option<Duration> {
        let s = self.inner.lock().expect("link estimate");
        s.rtt.iter().flatten().min().copied()
    }

    /// The highest delivery rate seen lately, bytes per second.
    pub fn rate(&self) -> f64 {
        let s = self.inner.lock().expect("link estimate");
        s.rates.iter().copied().fold(0.0, f64::max)
    }

    /// Bytes the broker's fetches should keep in flight: twice the
    /// bandwidth-delay product measured (so that the link stays busy while
    /// answers are being sent and new requests travel), at least
    /// [`MIN_IN_FLIGHT`]. While fetches fill the link the measured rate is
    /// the link's; while they do not, doubling what is in flight raises
    /// the rate, and the next estimate with it.
    pub fn in_flight_target(&self) -> usize {
        let bdp = self
            .round_trip()
            .map_or(0.0, |rtt| rtt.as_secs_f64() * self.rate());
        ((2.0 * bdp) as usize).clamp(MIN_IN_FLIGHT, MAX_IN_FLIGHT)
    }
}

/// A broker's fetch requests: up to [`FETCH_LANES`] in flight, each on a
/// connection of its own, carrying the partitions that asked (each once).
/// Requests that may long-poll are at most [`POLLS`] at a time, on the
/// lowest free lanes; requests with data take the highest. After a
/// long-poll's answer, the loop waits a moment (at most [`GATHER`]) for
/// the partitions it answered to ask again, so its next Fetch carries them
/// too rather than long-polling without them.
///
/// A partition's second long-poll (one of its fetches is already waiting
/// at the broker) goes out half a round trip after the request carrying
/// the first, never sooner: the two then reach the broker half a round
/// trip apart, and one of them is always waiting there when a record
/// arrives. Both may be released by the same record; the next pair is
/// spaced again.
async fn fetch_loop(
    cluster: Cluster,
    settings: FetchSettings,
    node: i32,
    link: Arc<LinkEstimate>,
    mut rx: mpsc::UnboundedReceiver<FetchItem>,
) {
    let mut waiting: VecDeque<FetchItem> = VecDeque::new();
    let mut busy = [false; FETCH_LANES];
    // Per lane carrying a long-poll: when it was sent, and its partitions.
    let mut polling: [Option<(Instant, HashSet<PartitionKey>)>; FETCH_LANES] = Default::default();
    let mut requests: JoinSet<(usize, HashSet<PartitionKey>)> = JoinSet::new();
    // After a long-poll's answer: until when, and who it waits for.
    let mut gathering: Option<(Instant, HashSet<PartitionKey>)> = None;
    let mut open = true;
    loop {
        // When each waiting fetch may go: a partition's second long-poll
        // half a round trip after its first.
        let spacing = link.round_trip().map_or(Duration::ZERO, |rtt| rtt / 2);
        let now = Instant::now();
        let mut wake = gathering.as_ref().map(|(until, _)| *until);
        // Send while a lane is free and something may go on it.
        loop {
            let polls = polling.iter().flatten().count();
            let ready = |item: &FetchItem| may_go(item, &polling, spacing, now) <= now;
            let has_data = waiting.iter().any(|i| i.has_data);
            let lane = if has_data {
                (0..FETCH_LANES).rev().find(|&l| !busy[l])
            } else if gathering.is_none() && polls < POLLS && waiting.iter().any(ready) {
                (0..FETCH_LANES).find(|&l| !busy[l])
            } else {
                None
            };
            let Some(lane) = lane else {
                break;
            };
            let cap = link.in_flight_target() / FETCH_LANES;
            let items = take_request(&mut waiting, cap, ready);
            if items.is_empty() {
                break;
            }
            let keys: HashSet<PartitionKey> = items.iter().map(|i| (i.topic.clone(), i.partition)).collect();
            busy[lane] = true;
            if !items.iter().any(|i| i.has_data) {
                polling[lane] = Some((Instant::now(), keys.clone()));
            }
            let (cluster, link) = (cluster.clone(), link.clone());
            requests.spawn(async move {
                fetch_group(&cluster, settings, node, lane, &link, items).await;
                (lane, keys)
            });
        }
        // Second long-polls wait for their spacing.
        if polling.iter().flatten().count() < POLLS {
            let next = waiting
                .iter()
                .map(|i| may_go(i, &polling, spacing, now))
                .filter(|at| *at > now)
                .min();
            wake = wake.into_iter().chain(next).min();
        }
        if !open && waiting.is_empty() && requests.is_empty() {
            return;
        }
        tokio::select! {
            item = rx.recv(), if open => match item {
                Some(item) => {
                    if let Some((_, awaited)) = &mut gathering {
                        awaited.remove(&(item.topic.clone(), item.partition));
                        if awaited.is_empty() {
                            gathering = None;
                        }
                    }
                    waiting.push_back(item);
                    while let Ok(item) = rx.try_recv() {
                        waiting.push_back(item);
                    }
                }
                None => open = false,
            },
            Some(done) = requests.join_next() => {
                if let Ok((lane, answered)) = done {
                    busy[lane] = false;
                    if polling[lane].take().is_some() {
                        let still: HashSet<_> = answered
                            .into_iter()
                            .filter(|k| !waiting.iter().any(|i| (&i.topic, i.partition) == (&k.0, k.1)))
                            .collect();
                        if !still.is_empty() {
                            gathering = Some((Instant::now() + GATHER, still));
                        }
                    }
                }
            },
            _ = tokio::time::sleep_until(wake.unwrap_or_else(Instant::now)), if wake.is_some() => {
                if gathering.as_ref().is_some_and(|(until, _)| *until <= Instant::now()) {
                    gathering = None;
                }
            }
        }
    }
}

/// When a waiting fetch may go: at once, or, for a partition's second
/// long-poll, `spacing` after the request carrying its first was sent.
fn may_go(
    item: &FetchItem,
    polling: &[Option<(Instant, HashSet<PartitionKey>)>],
    spacing: Duration,
    now: Instant,
) -> Instant {
    if item.has_data {
        return now;
    }
    let key = (item.topic.clone(), item.partition);
    polling
        .iter()
        .flatten()
        .filter(|(_, keys)| keys.contains(&key))
        .map(|(sent, _)| *sent + spacing)
        .fold(now, Instant::max)
}

/// The next request's items: the first waiting fetch of each partition
/// that `ready` lets go, in order, until their bytes reach `cap` (at least
/// one item; fetches that may long-poll bring nothing and do not count).
fn take_request(
    waiting: &mut VecDeque<FetchItem>,
    cap: usize,
    ready: impl Fn(&FetchItem) -> bool,
) -> Vec<FetchItem> {
    let mut items = Vec::new();
    let mut rest = VecDeque::new();
    let mut taken: HashSet<(Arc<str>, i32)> = HashSet::new();
    let mut bytes = 0usize;
    while let Some(item) = waiting.pop_front() {
        let key = (item.topic.clone(), item.partition);
        let full = !items.is_empty() && item.has_data && bytes + item.max_bytes as usize > cap;
        if full || taken.contains(&key) || !ready(&item) {
            rest.push_back(item);
            continue;
        }
        if item.has_data {
            bytes += item.max_bytes as usize;
        }
        taken.insert(key);
        items.push(item);
    }
    *waiting = rest;
    items
}

async fn fetch_group(
    cluster: &Cluster,
    settings: FetchSettings,
    node: i32,
    lane: usize,
    link: &LinkEstimate,
    items: Vec<FetchItem>,
) {
    let mut topics: Vec<FetchTopic> = Vec::new();
    for item in &items {
        let partition = FetchPartition::default()
            .with_partition(item.partition)
            .with_fetch_offset(item.offset)
            .with_partition_max_bytes(item.max_bytes);
        match topics.iter_mut().find(|t| *t.topic == *item.topic) {
            Some(topic) => topic.partitions.push(partition),
            None => topics.push(
                FetchTopic::default()
                    .with_topic(topic_name(&item.topic))
                    .with_partitions(vec![partition]),
            ),
        }
    }
    let request = FetchRequest::default()
        .with_max_wait_ms(settings.max_wait.as_millis() as i32)
        .with_min_bytes(1)
        .with_max_bytes(settings.max_bytes)
        .with_isolation_level(1)
        .with_topics(topics);
    let immediate = items.iter().any(|i| i.has_data);
    let result = async {
        let connection = cluster.broker_lane(node, Lane::Fetch(lane as u8)).await?;
        let sent = Instant::now();
        let response = connection.request(&request).await?;
        Ok((sent.elapsed(), response))
    }
    .await;
    let response = match result {
        Ok((_, response)) if response.error_code != 0 => {
            Err(kafka_error(cluster, "Fetch".to_owned(), response.error_code))
        }
        Ok((took, response)) => {
            let bytes = response
                .responses
                .iter()
                .flat_map(|t| &t.partitions)
                .map(|p| p.records.as_ref().map_or(0, Bytes::len))
                .sum();
            link.observe(took, bytes, immediate || bytes > 0);
            tracing::trace!(
                node,
                lane,
                partitions = items.len(),
                immediate,
                bytes,
                took_ms = took.as_secs_f64() * 1e3,
                "fetch answered"
            );
            Ok(response)
        }
        Err(e) => Err(e),
    };
    let mut response = match response {
        Ok(response) => response,
        Err(error) => {
            for item in items {
                let _ = item.reply.send(Err(error.clone()));
            }
            return;
        }
    };
    // Answers by (topic, partition), taken out as they are handed over.
    let mut answers: HashMap<(String, i32), _> = response
        .responses
        .iter_mut()
        .flat_map(|t| {
            let topic = t.topic.to_string();
            t.partitions
                .drain(..)
                .map(move |p| ((topic.clone(), p.partition_index), p))
        })
        .collect();
    for item in items {
        let found = answers.remove(&(item.topic.to_string(), item.partition));
        let answer = match found {
            // Tansu 0.6.0 leaves partitions out of answers that found
            // nothing: the same as no data.
            None => Ok(Fetched {
                last_stable_offset: -1,
                log_start_offset: -1,
                high_watermark: -1,
                ..Fetched::default()
            }),
            Some(p) if p.error_code != 0 => Err(kafka_error(
                cluster,
                format!("Fetch {}-{}", item.topic, item.partition),
                p.error_code,
            )),
            Some(mut p) => Ok(Fetched {
                records: p.records.take().unwrap_or_default(),
                high_watermark: p.high_watermark,
                last_stable_offset: p.last_stable_offset,
                log_start_offset: p.log_start_offset,
                aborted: p
                    .aborted_transactions
                    .iter()
                    .flatten()
                    .map(|a| (a.producer_id.0, a.first_offset))
                    .collect(),
            }),
        };
        let _ = item.reply.send(answer);
    }
}

/// Produces to the target with acks=all, grouped by leader.
///
/// Kafka takes exactly one record batch per partition in a Produce
/// request, so a request carries one batch of each partition waiting; a
/// partition's next batch goes into a later request. Requests to a broker
/// are handed to its connection in the order the batches were queued, and
/// Kafka handles a connection's requests in order, so a partition may have
/// several produces in flight and its batches still land in order.
#[derive(Debug, Clone)]
pub struct Producer {
    cluster: Cluster,
    timeout: Duration,
    queues: Arc<Queues<ProduceItem>>,
}

/// The target's answer to one queued batch, to be awaited.
pub type Pending = oneshot::Receiver<Result<Produced, UpstreamError>>;

impl Producer {
    /// A producer over `cluster`; `timeout` is the Produce request's own
    /// timeout (how long the leader may wait for its replicas).
    pub fn new(cluster: Cluster, timeout: Duration) -> Producer {
        Producer {
            cluster,
            timeout,
            queues: Arc::default(),
        }
    }

    /// Queues `batch` (one whole batch, already stamped for the target) for
    /// `topic-partition` behind the partition's earlier batches; the
    /// returned receiver gets the target's answer.
    pub async fn produce(
        &self,
        topic: &Arc<str>,
        partition: i32,
        batch: Bytes,
    ) -> Result<Pending, UpstreamError> {
        let node = self.cluster.leader_id(topic, partition).await?;
        let (reply, answer) = oneshot::channel();
        let item = ProduceItem {
            topic: topic.clone(),
            partition,
            records: batch,
            reply,
        };
        self.queue(node).send(item).map_err(|_| gone(&self.cluster))?;
        Ok(answer)
    }

    fn queue(&self, node: i32) -> mpsc::UnboundedSender<ProduceItem> {
        queue(&self.queues, node, |rx| {
            produce_loop(self.cluster.clone(), self.timeout, node, rx)
        })
    }
}

async fn produce_loop(
    cluster: Cluster,
    timeout: Duration,
    node: i32,
    mut rx: mpsc::UnboundedReceiver<ProduceItem>,
) {
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut waiting: VecDeque<ProduceItem> = VecDeque::new();
    loop {
        if waiting.is_empty() {
            match rx.recv().await {
                Some(item) => waiting.push_back(item),
                None => return,
            }
        }
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        while let Ok(item) = rx.try_recv() {
            waiting.push_back(item);
        }
        // One batch per partition, in queue order, up to the size limit.
        let mut items: Vec<ProduceItem> = Vec::new();
        let mut size = 0;
        let mut rest = VecDeque::new();
        let mut taken: HashSet<(Arc<str>, i32)> = HashSet::new();
        let mut deferred: HashSet<(Arc<str>, i32)> = HashSet::new();
        while let Some(item) = waiting.pop_front() {
            let key = (item.topic.clone(), item.partition);
            let full = !items.is_empty() && size + item.records.len() > MAX_PRODUCE_REQUEST;
            if full || taken.contains(&key) || deferred.contains(&key) {
                // Its partition's later batches stay behind it.
                deferred.insert(key);
                rest.push_back(item);
            } else {
                taken.insert(key);
                size += item.records.len();
                items.push(item);
            }
        }
        waiting = rest;
        let request = produce_request(&items, timeout);
        // Handed to the connection here, in order; answered concurrently.
        let sent = async {
            let connection = cluster.broker(node).await?;
            connection.send(&request).await
        }
        .await;
        let cluster = cluster.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let answer = match sent {
                Ok(pending) => pending.answer().await,
                Err(e) => Err(e),
            };
            distribute(&cluster, node, items, answer);
        });
    }
}

fn produce_request(items: &[ProduceItem], timeout: Duration) -> ProduceRequest {
    let mut topics: Vec<TopicProduceData> = Vec::new();
    for item in items {
        let partition = PartitionProduceData::default()
            .with_index(item.partition)
            .with_records(Some(item.records.clone()));
        match topics.iter_mut().find(|t| *t.name == *item.topic) {
            Some(topic) => topic.partition_data.push(partition),
            None => topics.push(
                TopicProduceData::default()
                    .with_name(topic_name(&item.topic))
                    .with_partition_data(vec![partition]),
            ),
        }
    }
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(timeout.as_millis() as i32)
        .with_topic_data(topics)
}

fn distribute(
    cluster: &Cluster,
    node: i32,
    items: Vec<ProduceItem>,
    answer: Result<kafka_protocol::messages::ProduceResponse, UpstreamError>,
) {
    let response = match answer {
        Ok(response) => response,
        Err(error) => {
            for item in items {
                let _ = item.reply.send(Err(error.clone()));
            }
            return;
        }
    };
    for item in items {
        let found = response
            .responses
            .iter()
            .find(|t| *t.name == *item.topic)
            .and_then(|t| t.partition_responses.iter().find(|p| p.index == item.partition));
        let what = || format!("Produce {}-{}", item.topic, item.partition);
        let answer = match found {
            None => Err(UpstreamError::Malformed {
                broker: format!("{} broker {node}", cluster.name()),
                api: kafka_protocol::messages::ApiKey::Produce,
                detail: format!("no answer for {}", what()),
            }),
            Some(p) if p.error_code != 0 => {
                let detail = p
                    .error_message
                    .as_ref()
                    .map(|m| format!(" ({})", m.as_str()))
                    .unwrap_or_default();
                Err(kafka_error(cluster, format!("{}{detail}", what()), p.error_code))
            }
            Some(p) => Ok(Produced {
                base_offset: p.base_offset,
            }),
        };
        let _ = item.reply.send(answer);
    }
}

/// Broker node id to the queue of its request task.
type Queues<T> = Mutex<HashMap<i32, mpsc::UnboundedSender<T>>>;

/// The queue of `node`'s request task, started with `task` on first use.
fn queue<T, F>(
    queues: &Queues<T>,
    node: i32,
    task: impl FnOnce(mpsc::UnboundedReceiver<T>) -> F,
) -> mpsc::UnboundedSender<T>
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let mut queues = queues.lock().expect("request queues");
    queues
        .entry(node)
        .or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(task(rx));
            tx
        })
        .clone()
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

fn kafka_error(cluster: &Cluster, what: String, code: i16) -> UpstreamError {
    UpstreamError::Kafka {
        cluster: cluster.name().to_owned(),
        what,
        code: ResponseError::try_from_code(code).unwrap_or(ResponseError::Unknown(code)),
    }
}

fn gone(cluster: &Cluster) -> UpstreamError {
    UpstreamError::Disconnected {
        broker: cluster.name().to_owned(),
        reason: "the request task stopped".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(topic: &str, partition: i32, max_bytes: i32, has_data: bool) -> FetchItem {
        FetchItem {
            topic: topic.into(),
            partition,
            offset: 0,
            max_bytes,
            has_data,
            reply: oneshot::channel().0,
        }
    }

    #[test]
    fn a_partitions_second_long_poll_goes_half_a_round_trip_after_its_first() {
        let now = Instant::now();
        let spacing = Duration::from_millis(50);
        let sent = now - Duration::from_millis(20);
        let keys: HashSet<PartitionKey> = [("a".into(), 0)].into_iter().collect();
        let mut polling: [Option<(Instant, HashSet<PartitionKey>)>; FETCH_LANES] = Default::default();
        polling[1] = Some((sent, keys));
        // a-0 has a long-poll out since 20 ms: its second waits 30 ms more.
        assert_eq!(
            may_go(&item("a", 0, 1, false), &polling, spacing, now),
            sent + spacing
        );
        // With data it goes at once; so do partitions with nothing out.
        assert_eq!(may_go(&item("a", 0, 1, true), &polling, spacing, now), now);
        assert_eq!(may_go(&item("a", 1, 1, false), &polling, spacing, now), now);
        // Once the first has been out half a round trip, the second goes.
        let later = sent + spacing;
        assert_eq!(may_go(&item("a", 0, 1, false), &polling, spacing, later), later);
        // A request takes only what may go.
        let mut waiting: VecDeque<FetchItem> = [item("a", 0, 1, false), item("a", 1, 1, false)]
            .into_iter()
            .collect();
        let taken = take_request(&mut waiting, 8 << 20, |i| {
            may_go(i, &polling, spacing, now) <= now
        });
        assert_eq!(taken.len(), 1);
        assert_eq!((&*taken[0].topic, taken[0].partition), ("a", 1));
        assert_eq!(waiting.len(), 1);
    }

    #[test]
    fn the_link_target_is_twice_the_measured_bandwidth_delay_product() {
        let link = LinkEstimate::default();
        assert_eq!(link.in_flight_target(), MIN_IN_FLIGHT, "nothing measured");
        // A long-poll that waited is no round trip; answers with data are.
        link.observe(Duration::from_millis(500), 0, false);
        assert_eq!(link.round_trip(), None);
        link.observe(Duration::from_millis(120), 1 << 20, true);
        link.observe(Duration::from_millis(100), 1 << 20, true);
        assert_eq!(link.round_trip(), Some(Duration::from_millis(100)));
        // 100 MB arriving over one rate interval: about 100 MB/s if the
        // interval is a second; whatever it was, the target follows it.
        std::thread::sleep(RATE_INTERVAL);
        link.observe(Duration::from_millis(100), 100 << 20, true);
        let rate = link.rate();
        assert!(rate > 0.0);
        let expected = (2.0 * 0.1 * rate) as usize;
        assert_eq!(
            link.in_flight_target(),
            expected.clamp(MIN_IN_FLIGHT, MAX_IN_FLIGHT)
        );
    }

    #[test]
    fn a_request_takes_each_partition_once_up_to_its_share() {
        let mut waiting: VecDeque<FetchItem> = [
            item("a", 0, 4 << 20, true),
            item("a", 0, 4 << 20, true),
            item("a", 1, 4 << 20, true),
            item("b", 0, 1 << 20, false),
            item("a", 2, 4 << 20, true),
        ]
        .into_iter()
        .collect();
        let taken = take_request(&mut waiting, 8 << 20, |_| true);
        let keys: Vec<(&str, i32)> = taken.iter().map(|i| (&*i.topic, i.partition)).collect();
        // a-0 once, a-1 (8 MiB reached), b-0 (may long-poll: counts nothing).
        assert_eq!(keys, [("a", 0), ("a", 1), ("b", 0)]);
        let left: Vec<(&str, i32)> = waiting.iter().map(|i| (&*i.topic, i.partition)).collect();
        assert_eq!(left, [("a", 0), ("a", 2)]);
    }
}
