//! Watching consumer groups' lag (the `lag:` section) for `strait serve`:
//! on the clusters Strait holds connections to, over the protocol, and on
//! its own spool (cluster `local`), read in process.

use std::collections::BTreeMap;
use std::sync::Arc;

use strait_config::Config;
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
    if lag.watches(LOCAL) {
        let spool = Spool {
            broker,
            watch: watch.clone(),
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
        let poller = strait_lag::kafka::Poller::new(cluster.clone(), watch.clone());
        let polls = strait_lag::poll::run(name.clone(), poller, tracker.clone(), interval, shutdown.clone());
        tokio::spawn(polls);
    }
    admin.set_groups(tracker);
    Ok(())
}

/// Strait's own spool: the groups its coordinator holds, its partitions'
/// ends and their records, read in process.
struct Spool {
    broker: Arc<Broker>,
    watch: Watch,
}

impl Source for Spool {
    async fn poll(&mut self) -> Result<Snapshot, String> {
        let (broker, watch) = (self.broker.clone(), self.watch.clone());
        // Reading records may fault pages in from disk.
        tokio::task::spawn_blocking(move || spool_snapshot(&broker, &watch))
            .await
            .map_err(|e| format!("reading the spool's groups stopped: {e}"))
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
