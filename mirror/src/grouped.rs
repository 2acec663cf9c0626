//! Requests grouped by leader: each partition's task asks for its own
//! fetch or produce, and one task per broker gathers whatever partitions
//! are waiting into one request: one Fetch in flight per source broker
//! (on a connection of its own, since it may long-poll), several Produce
//! requests in flight per target broker.
//!
//! A partition has at most one fetch waiting here at a time, so a Fetch
//! never carries a partition twice. A partition may have several batches
//! queued for produce; each Produce carries at most one of them (Kafka's
//! rule), in order.

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

/// Produce requests in flight per broker.
const IN_FLIGHT: usize = 8;
/// How long a broker's fetch loop waits, after an answer, for the
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

/// What the target said to one partition's produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Produced {
    /// Offset of the first record written.
    pub base_offset: i64,
}

#[derive(Debug)]
struct FetchItem {
    topic: Arc<str>,
    partition: i32,
    offset: i64,
    max_bytes: i32,
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

/// Fetches from the source, grouped by leader. Reads are read_committed:
/// aborted transactions are listed and records past the last stable
/// offset are not returned.
#[derive(Debug, Clone)]
pub struct Fetcher {
    cluster: Cluster,
    settings: FetchSettings,
    queues: Arc<Queues<FetchItem>>,
}

impl Fetcher {
    /// A fetcher over `cluster`.
    pub fn new(cluster: Cluster, settings: FetchSettings) -> Fetcher {
        Fetcher {
            cluster,
            settings,
            queues: Arc::default(),
        }
    }

    /// Fetches `topic-partition` from `offset`, at most `max_bytes` of it
    /// (a first batch larger than that still comes whole, KIP-74).
    pub async fn fetch(
        &self,
        topic: &Arc<str>,
        partition: i32,
        offset: i64,
        max_bytes: i32,
    ) -> Result<Fetched, UpstreamError> {
        let node = self.cluster.leader_id(topic, partition).await?;
        let (reply, answer) = oneshot::channel();
        let item = FetchItem {
            topic: topic.clone(),
            partition,
            offset,
            max_bytes,
            reply,
        };
        self.queue(node).send(item).map_err(|_| gone(&self.cluster))?;
        answer.await.map_err(|_| gone(&self.cluster))?
    }

    fn queue(&self, node: i32) -> mpsc::UnboundedSender<FetchItem> {
        queue(&self.queues, node, |rx| {
            fetch_loop(self.cluster.clone(), self.settings, node, rx)
        })
    }
}

/// One Fetch in flight per broker, as Kafka's own clients do, carrying
/// every partition that asked. After an answer, the loop waits a moment
/// (at most [`GATHER`]) for the partitions it answered to ask again, so the
/// next Fetch carries them too rather than long-polling without them.
async fn fetch_loop(
    cluster: Cluster,
    settings: FetchSettings,
    node: i32,
    mut rx: mpsc::UnboundedReceiver<FetchItem>,
) {
    let mut waiting: Vec<FetchItem> = Vec::new();
    loop {
        if waiting.is_empty() {
            match rx.recv().await {
                Some(item) => waiting.push(item),
                None => return,
            }
        }
        while let Ok(item) = rx.try_recv() {
            waiting.push(item);
        }
        let items = std::mem::take(&mut waiting);
        let answered: HashSet<(Arc<str>, i32)> =
            items.iter().map(|i| (i.topic.clone(), i.partition)).collect();
        fetch_group(&cluster, settings, node, items).await;
        let deadline = tokio::time::Instant::now() + GATHER;
        let mut back = 0;
        while back < answered.len() {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(item)) => {
                    if answered.contains(&(item.topic.clone(), item.partition)) {
                        back += 1;
                    }
                    waiting.push(item);
                }
                Ok(None) => return,
                Err(_) => break,
            }
        }
    }
}

async fn fetch_group(cluster: &Cluster, settings: FetchSettings, node: i32, items: Vec<FetchItem>) {
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
    let result = async {
        let connection = cluster.broker_lane(node, Lane::Fetch).await?;
        connection.request(&request).await
    }
    .await;
    let response = match result {
        Ok(response) if response.error_code != 0 => {
            Err(kafka_error(cluster, "Fetch".to_owned(), response.error_code))
        }
        other => other,
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
