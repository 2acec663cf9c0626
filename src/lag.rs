//! Watching consumer groups' lag (the `lag:` section) for `strait serve`:
//! on the clusters Strait holds connections to, over the protocol, and on
//! its own spool (cluster `local`), read in process.
//!
//! Groups are shown under the names clients of the router use. A group
//! Strait coordinates (`local`) that spans clusters shows, beside its
//! spool topics, its partitions on each cluster a route reaches (from
//! that cluster's last poll: the router commits them there), under the
//! routes' names for them. A group `groups:` delegates to a cluster shows
//! there under the routes' topic names. Each cluster's other groups keep
//! the cluster's own names, as its own tools show them.

use std::collections::BTreeMap;
use std::sync::Arc;

use strait_config::{Config, Destination, GroupRoutes, Routes};
use strait_gateway::broker::Broker;
use strait_lag::{first_timestamp, GroupLag, LagCollector, PartitionLag, Snapshot, Source, Tracker, Watch};
use strait_upstream::Cluster;
use tokio::sync::watch;

/// The name the spool's groups go under.
const LOCAL: &str = strait_config::cluster::RESERVED_CLUSTER;

/// Bytes read from a partition to find the oldest unread record's
/// timestamp (a larger first batch is read whole).
const LOOKUP_BYTES: usize = 64 << 10;

/// Starts a poll loop per watched cluster of `clusters` (already
/// connected, by name) and for the spool of `broker`, registers the lag
/// series and hands the groups to `admin`. Nothing when `lag.enabled` is
/// false.
pub fn start(
    config: &Config,
    broker: Arc<Broker>,
    clusters: &BTreeMap<String, Cluster>,
    admin: &crate::admin::Admin,
    shutdown: &watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let lag = &config.lag;
    if !lag.enabled {
        return Ok(());
    }
    let tracker = Arc::new(Tracker::new(lag.interval.into()));
    admin
        .registry
        .register(Box::new(LagCollector::new(tracker.clone(), lag.partition_labels)))?;
    let filter = lag.group_filter();
    let committed = lag.read_committed_filter();
    let watch = Watch {
        groups: Arc::new(move |group| filter.matches(group)),
        read_committed: Arc::new(move |group| committed.as_ref().is_some_and(|f| f.matches(group))),
        max_groups: lag.max_groups,
    };
    let interval = std::time::Duration::from(lag.interval);
    let names = ClientNames {
        routes: Arc::new(config.routes()),
        groups: Arc::new(config.group_routes()),
    };
    if lag.watches(LOCAL) {
        let spool = Spool {
            broker,
            watch: watch.clone(),
            names: names.clone(),
            tracker: tracker.clone(),
        };
        let polls = strait_lag::poll::run(
            LOCAL.to_owned(),
            spool,
            tracker.clone(),
            interval,
            shutdown.clone(),
        );
        tokio::spawn(polls);
    }
    for (name, cluster) in clusters.iter().filter(|(name, _)| lag.watches(name)) {
        let poller = Delegated {
            poller: strait_lag::kafka::Poller::new(cluster.clone(), watch.clone()),
            cluster: name.clone(),
            names: names.clone(),
        };
        let polls = strait_lag::poll::run(name.clone(), poller, tracker.clone(), interval, shutdown.clone());
        tokio::spawn(polls);
    }
    admin.set_groups(tracker);
    Ok(())
}

/// How clients of the router name topics and who runs their groups.
#[derive(Clone)]
struct ClientNames {
    routes: Arc<Routes>,
    groups: Arc<GroupRoutes>,
}

impl ClientNames {
    /// What clients call `topic` of `cluster`, if a route reaches it.
    fn topic(&self, cluster: &str, topic: &str) -> Option<String> {
        self.routes
            .client_name(&Destination::Cluster(cluster.to_owned()), topic)
    }

    /// The clusters routes reach.
    fn routed_clusters(&self) -> Vec<String> {
        self.routes
            .destinations()
            .into_iter()
            .filter_map(|d| d.cluster().map(str::to_owned))
            .collect()
    }
}

/// Strait's own spool: the groups its coordinator holds, its partitions'
/// ends and their records, read in process; and, for a group spanning
/// clusters, its partitions on them from their last polls in `tracker`.
struct Spool {
    broker: Arc<Broker>,
    watch: Watch,
    names: ClientNames,
    tracker: Arc<Tracker>,
}

impl Source for Spool {
    async fn poll(&mut self) -> Result<Snapshot, String> {
        let (broker, watch) = (self.broker.clone(), self.watch.clone());
        // Reading records may fault pages in from disk.
        let mut snapshot = tokio::task::spawn_blocking(move || spool_snapshot(&broker, &watch))
            .await
            .map_err(|e| format!("reading the spool's groups stopped: {e}"))?;
        for cluster in self.names.routed_clusters() {
            self.tracker.with_snapshot(&cluster, |polled| {
                for group in &mut snapshot.groups {
                    let Ok(at) = polled.groups.binary_search_by(|g| g.group.cmp(&group.group)) else {
                        continue;
                    };
                    for p in &polled.groups[at].partitions {
                        if let Some(topic) = self.names.topic(&cluster, &p.topic) {
                            group.partitions.push(PartitionLag { topic, ..p.clone() });
                        }
                    }
                }
            });
        }
        Ok(snapshot)
    }
}

/// A Kafka cluster's groups, those that `groups:` delegates to it under
/// the names clients use for their topics.
struct Delegated {
    poller: strait_lag::kafka::Poller,
    cluster: String,
    names: ClientNames,
}

impl Source for Delegated {
    async fn poll(&mut self) -> Result<Snapshot, String> {
        let mut snapshot = Source::poll(&mut self.poller).await?;
        for group in &mut snapshot.groups {
            if self.names.groups.resolve(&group.group).cluster() != Some(self.cluster.as_str()) {
                continue;
            }
            for p in &mut group.partitions {
                if let Some(topic) = self.names.topic(&self.cluster, &p.topic) {
                    p.topic = topic;
                }
            }
        }
        Ok(snapshot)
    }
}

/// One poll of the spool's groups. The spool has no transactions: a
/// partition's last stable offset is its high watermark.
fn spool_snapshot(broker: &Broker, watch: &Watch) -> Snapshot {
    let mut found = broker.groups().group_offsets(|group| (watch.groups)(group));
    let skipped = found.len().saturating_sub(watch.max_groups);
    found.truncate(watch.max_groups);
    let topics = broker.topics();
    let partition_lag = |topic: String, partition: i32, committed: i64| {
        let handle = topics.get(&topic).and_then(|t| t.partition(partition).cloned());
        let end = handle.as_ref().map(|p| p.log.high_watermark() as i64);
        let oldest_unread_ms = handle
            .filter(|_| committed >= 0 && end.is_some_and(|end| end > committed))
            .and_then(|p| {
                let read = p.log.read(committed as u64, LOOKUP_BYTES).ok()?;
                first_timestamp(&read.records, committed)
            });
        PartitionLag {
            topic,
            partition,
            committed,
            end,
            oldest_unread_ms,
        }
    };
    let groups = found
        .into_iter()
        .map(|g| GroupLag {
            group: g.group,
            state: g.state.to_owned(),
            members: g.members,
            partitions: g
                .committed
                .into_iter()
                .map(|(topic, partition, committed)| partition_lag(topic, partition, committed))
                .collect(),
            error: None,
        })
        .collect();
    Snapshot { groups, skipped }
}
