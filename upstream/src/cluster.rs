//! One upstream cluster: its metadata cache and one connection per broker.
//!
//! - **Metadata** is loaded on first use and re-read when it is older than
//!   `metadata_max_age`, or after [`Cluster::invalidate`] (callers invalidate
//!   on NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION and the like;
//!   a failed connection invalidates by itself). Concurrent refreshes
//!   coalesce into one request. Known brokers are asked first, the
//!   bootstrap list when none answers.
//! - **Connections**: one per broker, opened on first use and shared by
//!   every caller. A connection that failed is replaced on the next use;
//!   reconnecting to a broker that just refused waits a jittered backoff
//!   (50 ms doubling to 1 s, as the Java client's) and answers the failure
//!   at once meanwhile, so callers do not queue behind a dead broker's
//!   connect timeout.
//! - **Coordinators** found with FindCoordinator are remembered per group
//!   until [`Cluster::forget_coordinator`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use kafka_protocol::messages::{
    ApiKey, FindCoordinatorRequest, FindCoordinatorResponse, InitProducerIdRequest, MetadataRequest,
    ProducerId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::conn::{ConnectOptions, Connection};
use crate::error::{check, Result, UpstreamError};
use crate::metadata::Metadata;
use crate::metrics::ClusterMetrics;
use crate::versions::Versions;

/// Settings of one cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// `host:port` to ask for metadata when no known broker answers.
    pub bootstrap: Vec<String>,
    /// How connections are opened and used.
    pub connect: ConnectOptions,
    /// Metadata older than this is re-read on next use.
    pub metadata_max_age: Duration,
}

/// What [`Cluster::health`] says.
#[derive(Debug, Clone)]
pub struct Health {
    /// How the last metadata load went; `None` before the first.
    pub last_load: Option<std::result::Result<(), UpstreamError>>,
    /// The metadata last loaded, if any load succeeded.
    pub metadata: Option<Arc<Metadata>>,
}

/// A handle on one upstream cluster. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    name: String,
    options: ClusterOptions,
    metadata: RwLock<Option<Arc<Metadata>>>,
    stale: AtomicBool,
    refreshing: tokio::sync::Mutex<()>,
    brokers: Mutex<Slots>,
    coordinators: Mutex<HashMap<String, (i32, String)>>,
    /// The versions of the connection metadata was last read on.
    versions: Mutex<Option<Versions>>,
    /// How the last metadata load went; `None` before the first.
    last_load: Mutex<Option<std::result::Result<(), UpstreamError>>>,
    metrics: Arc<ClusterMetrics>,
}

/// Which of a broker's connections a request goes on. A broker handles a
/// connection's requests one after another, so long-polling fetches get a
/// connection of their own and do not hold up produces, commits or
/// metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Everything but long-polling fetches.
    Default,
    /// Fetches that may wait at the broker (`max_wait_ms`): the mirror
    /// keeps several in flight per broker, each on a connection of its own
    /// (numbered), since a broker answers a connection's requests in order
    /// and TCP limits each connection to its window.
    Fetch(u8),
}

/// Each broker's connection per lane.
type Slots = HashMap<(i32, Lane), Arc<tokio::sync::Mutex<Slot>>>;

/// The connection to one broker, or the memory of the last failure to
/// open it.
#[derive(Debug)]
struct Slot {
    connection: Option<(String, Connection)>,
    failed: Option<(Instant, UpstreamError)>,
    backoff: Backoff,
}

impl Cluster {
    /// A cluster handle. Nothing is contacted until first use.
    pub fn new(name: impl Into<String>, options: ClusterOptions) -> Cluster {
        let name = name.into();
        Cluster {
            inner: Arc::new(Inner {
                metrics: ClusterMetrics::new(&name),
                last_load: Mutex::new(None),
                name,
                options,
                metadata: RwLock::new(None),
                stale: AtomicBool::new(true),
                refreshing: tokio::sync::Mutex::new(()),
                brokers: Mutex::new(HashMap::new()),
                coordinators: Mutex::new(HashMap::new()),
                versions: Mutex::new(None),
            }),
        }
    }

    /// The cluster's configured name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The options it was made with.
    pub fn options(&self) -> &ClusterOptions {
        &self.inner.options
    }

    /// Marks the metadata stale: the next [`Cluster::metadata`] re-reads it.
    pub fn invalidate(&self) {
        self.inner.stale.store(true, Ordering::Relaxed);
    }

    /// The metadata last loaded, without contacting the cluster.
    pub fn cached_metadata(&self) -> Option<Arc<Metadata>> {
        self.inner.metadata.read().expect("metadata lock").clone()
    }

    /// Current metadata: the cached snapshot unless it is stale or older
    /// than `metadata_max_age`, else a fresh one.
    pub async fn metadata(&self) -> Result<Arc<Metadata>> {
        if !self.inner.stale.load(Ordering::Relaxed) {
            if let Some(cached) = self.cached_metadata() {
                if cached.fetched_at.elapsed() < self.inner.options.metadata_max_age {
                    return Ok(cached);
                }
            }
        }
        self.refresh().await
    }

    /// Reads metadata from the cluster now. Callers that arrive while a
    /// refresh is under way share its answer.
    pub async fn refresh(&self) -> Result<Arc<Metadata>> {
        let asked = Instant::now();
        let _one = self.inner.refreshing.lock().await;
        if let Some(cached) = self.cached_metadata() {
            if cached.fetched_at >= asked {
                return Ok(cached);
            }
        }
        let loaded = self.load_metadata().await;
        self.note_load(loaded.as_ref().err());
        let mut fresh = loaded?;
        if let Some(cached) = self.cached_metadata() {
            let kept = fresh.keep_newer_leaders(&cached);
            if kept > 0 {
                tracing::debug!(cluster = %self.inner.name, partitions = kept, "metadata answer behind on leader epochs: newer leaders kept");
            }
        }
        let fresh = Arc::new(fresh);
        *self.inner.metadata.write().expect("metadata lock") = Some(fresh.clone());
        self.inner.stale.store(false, Ordering::Relaxed);
        tracing::debug!(cluster = %self.inner.name, brokers = fresh.brokers.len(), topics = fresh.topics.len(), "metadata loaded");
        Ok(fresh)
    }

    /// Keeps how a metadata load went, counts it, and logs the cluster
    /// becoming unreachable (a load failed) and reachable again, once each
    /// time, not per request.
    fn note_load(&self, failure: Option<&UpstreamError>) {
        self.inner.metrics.metadata_loaded(failure.is_none());
        let last = failure.map_or(Ok(()), |e| Err(e.clone()));
        let previous = self.inner.last_load.lock().expect("last load lock").replace(last);
        let before = !matches!(previous, Some(Err(_)));
        match failure {
            Some(e) if before => tracing::warn!(
                cluster = %self.inner.name,
                error = %e,
                "cluster unreachable: its requests get retriable errors until it answers"
            ),
            None if !before => tracing::info!(cluster = %self.inner.name, "cluster reachable"),
            _ => {}
        }
    }

    async fn load_metadata(&self) -> Result<Metadata> {
        let mut last = None;
        // Known brokers first (in random order, so one slow broker does not
        // take every refresh), then the bootstrap list.
        let mut known: Vec<(i32, String)> = self
            .cached_metadata()
            .map(|m| m.brokers.iter().map(|(n, a)| (*n, a.clone())).collect())
            .unwrap_or_default();
        fastrand::shuffle(&mut known);
        for (node, addr) in known {
            match self.connect(node, Lane::Default, addr).await {
                Ok(connection) => match self.metadata_from(&connection).await {
                    Ok(metadata) => return Ok(metadata),
                    Err(e) => last = Some(e),
                },
                Err(e) => last = Some(e),
            }
        }
        for (i, addr) in self.inner.options.bootstrap.iter().enumerate() {
            let label = format!("{} bootstrap server {} ({addr})", self.inner.name, i + 1);
            match self.connect_labelled(label, addr).await {
                Ok(connection) => match self.metadata_from(&connection).await {
                    Ok(metadata) => return Ok(metadata),
                    Err(e) => last = Some(e),
                },
                Err(e) => last = Some(e),
            }
        }
        Err(UpstreamError::NoBroker {
            cluster: self.inner.name.clone(),
            reason: last.map_or_else(|| "no bootstrap servers configured".to_owned(), |e| e.to_string()),
        })
    }

    async fn connect_labelled(&self, label: String, addr: &str) -> Result<Connection> {
        let metrics = Some(self.inner.metrics.clone());
        Connection::connect_metered(label, addr, &self.inner.options.connect, metrics).await
    }

    /// How the cluster's last metadata load went, and the metadata last
    /// loaded.
    pub fn health(&self) -> Health {
        Health {
            last_load: self.inner.last_load.lock().expect("last load lock").clone(),
            metadata: self.cached_metadata(),
        }
    }

    /// The API versions Strait speaks with this cluster (those of the
    /// connection its metadata was last read on), once it has been reached.
    pub fn versions(&self) -> Option<Versions> {
        self.inner.versions.lock().expect("versions lock").clone()
    }

    async fn metadata_from(&self, connection: &Connection) -> Result<Metadata> {
        *self.inner.versions.lock().expect("versions lock") = Some(connection.versions().clone());
        let version = connection.version(ApiKey::Metadata)?;
        let mut request = MetadataRequest::default().with_topics(None);
        if version >= 4 {
            request.allow_auto_topic_creation = false;
        }
        let response = connection.request_at(&request, version).await?;
        if response.brokers.is_empty() {
            return Err(UpstreamError::Malformed {
                broker: connection.broker().to_owned(),
                api: ApiKey::Metadata,
                detail: "no brokers listed".to_owned(),
            });
        }
        Ok(Metadata::from_response(&response))
    }

    /// The connection to broker `node` (as the metadata names it), opened
    /// if need be.
    pub async fn broker(&self, node: i32) -> Result<Connection> {
        self.broker_lane(node, Lane::Default).await
    }

    /// The connection to broker `node` for `lane`, opened if need be.
    pub async fn broker_lane(&self, node: i32, lane: Lane) -> Result<Connection> {
        let addr = self.broker_addr(node).await?;
        self.connect(node, lane, addr).await
    }

    /// A new connection to broker `node` that no one else shares (the
    /// router gives each client connection its own for long-polling
    /// fetches). While the broker's shared connection is in its reconnect
    /// backoff, fails at once with that connection's error.
    pub async fn open(&self, node: i32) -> Result<Connection> {
        let addr = self.broker_addr(node).await?;
        self.open_at(node, &addr).await
    }

    /// [`Cluster::open`] for broker `node` at `addr`.
    async fn open_at(&self, node: i32, addr: &str) -> Result<Connection> {
        let slot = self
            .inner
            .brokers
            .lock()
            .expect("brokers lock")
            .get(&(node, Lane::Default))
            .cloned();
        if let Some(slot) = slot {
            if let Ok(slot) = slot.try_lock() {
                if let Some((until, error)) = &slot.failed {
                    if Instant::now() < *until {
                        return Err(error.clone());
                    }
                }
            }
        }
        let label = format!("{} broker {node} at {addr}", self.inner.name);
        self.connect_labelled(label, addr)
            .await
            .inspect_err(|_| self.invalidate())
    }

    async fn broker_addr(&self, node: i32) -> Result<String> {
        Ok(
            match self.cached_metadata().and_then(|m| m.brokers.get(&node).cloned()) {
                Some(addr) => addr,
                None => {
                    let metadata = self.refresh().await?;
                    metadata
                        .brokers
                        .get(&node)
                        .cloned()
                        .ok_or_else(|| UpstreamError::Kafka {
                            cluster: self.inner.name.clone(),
                            what: format!("Metadata for broker {node}"),
                            code: ResponseError::BrokerNotAvailable,
                        })?
                }
            },
        )
    }

    async fn connect(&self, node: i32, lane: Lane, addr: String) -> Result<Connection> {
        let slot = self
            .inner
            .brokers
            .lock()
            .expect("brokers lock")
            .entry((node, lane))
            .or_insert_with(|| {
                Arc::new(tokio::sync::Mutex::new(Slot {
                    connection: None,
                    failed: None,
                    backoff: Backoff::reconnect(),
                }))
            })
            .clone();
        let mut slot = slot.lock().await;
        if let Some((at, connection)) = &slot.connection {
            if *at == addr && !connection.is_failed() {
                return Ok(connection.clone());
            }
            // A failed connection means the cluster may have changed.
            self.invalidate();
            slot.connection = None;
        }
        if let Some((until, error)) = &slot.failed {
            if Instant::now() < *until {
                return Err(error.clone());
            }
        }
        let label = format!("{} broker {node} at {addr}", self.inner.name);
        match self.connect_labelled(label, &addr).await {
            Ok(connection) => {
                slot.backoff.reset();
                slot.failed = None;
                slot.connection = Some((addr, connection.clone()));
                Ok(connection)
            }
            Err(error) => {
                self.invalidate();
                let until = Instant::now() + slot.backoff.next_delay();
                slot.failed = Some((until, error.clone()));
                Err(error)
            }
        }
    }

    /// The node id of a partition's leader. When the metadata names none
    /// (an unknown topic, no leader), it is marked stale so the next call
    /// reads it again.
    pub async fn leader_id(&self, topic: &str, partition: i32) -> Result<i32> {
        let metadata = self.metadata().await?;
        metadata
            .leader(&self.inner.name, topic, partition)
            .inspect_err(|_| self.invalidate())
    }

    /// The leader of a partition and the connection to it.
    pub async fn leader(&self, topic: &str, partition: i32) -> Result<(i32, Connection)> {
        let node = self.leader_id(topic, partition).await?;
        Ok((node, self.broker(node).await?))
    }

    /// A connection to any broker: the controller when the metadata names
    /// one (older Kafka wants CreateTopics there), else the first that
    /// answers.
    pub async fn any_broker(&self) -> Result<Connection> {
        let metadata = self.metadata().await?;
        let mut last = None;
        let nodes = metadata
            .controller
            .into_iter()
            .chain(metadata.brokers.keys().copied());
        for node in nodes {
            match self.broker(node).await {
                Ok(connection) => return Ok(connection),
                Err(e) => last = Some(e),
            }
        }
        Err(UpstreamError::NoBroker {
            cluster: self.inner.name.clone(),
            reason: last.map_or_else(|| "the metadata lists no brokers".to_owned(), |e| e.to_string()),
        })
    }

    /// A fresh idempotent (not transactional) producer id and epoch,
    /// retried with the backoff while the cluster says to (a coordinator
    /// still loading, as a Kafka that just started answers; a broker
    /// unreachable) until `deadline`, as Kafka's own clients retry it.
    pub async fn init_producer_id(&self, deadline: Instant) -> Result<(i64, i16)> {
        let started = Instant::now();
        let mut backoff = Backoff::default();
        loop {
            let attempt = async {
                let connection = self.any_broker().await?;
                let request = InitProducerIdRequest::default()
                    .with_transactional_id(None)
                    .with_transaction_timeout_ms(60_000)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1);
                let response = connection.request(&request).await?;
                check(
                    &self.inner.name,
                    || "InitProducerId".to_owned(),
                    response.error_code,
                )?;
                Ok::<_, UpstreamError>((response.producer_id.0, response.producer_epoch))
            };
            match attempt.await {
                Ok(id) => {
                    tracing::debug!(cluster = %self.inner.name, producer_id = id.0, epoch = id.1, "upstream producer id");
                    return Ok(id);
                }
                Err(e) if e.is_retriable() => {
                    if e.wants_metadata_refresh() {
                        self.invalidate();
                    }
                    backoff.wait(deadline, started, "InitProducerId", e).await?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The connection to the coordinator of consumer group `group`.
    pub async fn coordinator(&self, group: &str) -> Result<Connection> {
        let (node, addr) = self.coordinator_of(group).await?;
        self.connect(node, Lane::Default, addr).await
    }

    /// A new connection to the coordinator of `group` that no one else
    /// shares, and the coordinator's node id: for a client's group
    /// requests, which a coordinator may hold for a whole rebalance.
    pub async fn open_coordinator(&self, group: &str) -> Result<(i32, Connection)> {
        let (node, addr) = self.coordinator_of(group).await?;
        Ok((node, self.open_at(node, &addr).await?))
    }

    /// The node id and address of `group`'s coordinator, remembered from
    /// the last FindCoordinator until [`Cluster::forget_coordinator`].
    pub async fn coordinator_of(&self, group: &str) -> Result<(i32, String)> {
        let known = self
            .inner
            .coordinators
            .lock()
            .expect("coordinators lock")
            .get(group)
            .cloned();
        if let Some(found) = known {
            return Ok(found);
        }
        let found = self.find_coordinator(group).await?;
        self.inner
            .coordinators
            .lock()
            .expect("coordinators lock")
            .insert(group.to_owned(), found.clone());
        Ok(found)
    }

    /// Forgets a group's coordinator (after NOT_COORDINATOR and the like),
    /// so the next [`Cluster::coordinator`] asks again.
    pub fn forget_coordinator(&self, group: &str) {
        self.inner
            .coordinators
            .lock()
            .expect("coordinators lock")
            .remove(group);
    }

    async fn find_coordinator(&self, group: &str) -> Result<(i32, String)> {
        let connection = self.any_broker().await?;
        let version = connection.version(ApiKey::FindCoordinator)?;
        let key = StrBytes::from_string(group.to_owned());
        let request = if version >= 4 {
            FindCoordinatorRequest::default().with_coordinator_keys(vec![key])
        } else {
            FindCoordinatorRequest::default().with_key(key)
        };
        let response: FindCoordinatorResponse = connection.request_at(&request, version).await?;
        let what = || format!("FindCoordinator for group {group}");
        let (code, node, host, port) = match response.coordinators.first() {
            Some(c) if version >= 4 => (c.error_code, c.node_id.0, c.host.to_string(), c.port),
            _ => (
                response.error_code,
                response.node_id.0,
                response.host.to_string(),
                response.port,
            ),
        };
        check(&self.inner.name, what, code)?;
        Ok((node, format!("{host}:{port}")))
    }
}
