//! Running the `mirrors:` of a configuration, for `strait mirror` and
//! `strait serve`.

use std::sync::Arc;
use std::time::Duration;

use strait_config::mirror::{OnLostRecords, StartPosition};
use strait_config::Config;
use strait_mirror::membership::Timeouts;
use strait_mirror::metrics::{MirrorMetrics, PartitionCollector};
use strait_mirror::mirror::MirrorSpec;
use strait_mirror::shared::{OnLost, StartAt};
use strait_mirror::state::Partitions;
use strait_mirror::status::{StatusCollector, Tracker};
use strait_mirror::sync::GroupSync;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Starts every mirror of a validated `config`, registers their metrics
/// and hands their status to `admin`. Each runs until `shutdown` turns
/// true, then writes what it fetched (for at most `server.shutdown_grace`)
/// and commits.
pub fn start(
    config: &Config,
    admin: &crate::admin::Admin,
    shutdown: &watch::Receiver<bool>,
) -> anyhow::Result<JoinSet<()>> {
    let registry = &admin.registry;
    let clusters = strait_gateway::launch::upstream_clusters(config)?;
    let metrics = MirrorMetrics::register(registry)?;
    let collector = Arc::new(PartitionCollector::new(config.admin.partition_labels));
    registry.register(Box::new(CollectorHandle(collector.clone())))?;
    let tracker = Arc::new(Tracker::default());
    registry.register(Box::new(StatusCollector::new(
        tracker.clone(),
        config.admin.partition_labels,
    )))?;
    let mut tasks = JoinSet::new();
    for (name, m) in &config.mirrors {
        let filter = m.topic_filter();
        let rename = m.clone();
        let spec = MirrorSpec {
            name: name.clone(),
            source: clusters[&m.source].clone(),
            target: clusters[&m.target].clone(),
            topics: Arc::new(move |topic| filter.matches(topic)),
            rename: Arc::new(move |topic| rename.target_topic(topic)),
            group: m.group_id(name),
            commit_interval: m.commit_interval.into(),
            discovery_interval: m.discovery_interval.into(),
            start: match m.start {
                StartPosition::Earliest => StartAt::Earliest,
                StartPosition::Latest => StartAt::Latest,
            },
            max_bytes_in_flight: m.max_bytes_in_flight.bytes() as usize,
            on_lost: match m.on_lost_records {
                OnLostRecords::Continue => OnLost::Continue,
                OnLostRecords::Stop => OnLost::Stop,
            },
            coalesce_below: m.coalesce_below.bytes() as usize,
            coalesce_up_to: strait_config::mirror::COALESCE_UP_TO.bytes() as usize,
            staggered_polls: m.staggered_polls,
            prevent_loops: m.prevent_loops,
            shutdown_grace: Duration::from(config.server.shutdown_grace),
            membership: Timeouts::new(m.session_timeout.into(), config.server.shutdown_grace.into()),
            offset_map_topic: m.offset_map_topic(name),
            offset_map_retention: m.offset_map_retention.into(),
            sync_groups: m.sync_group_offsets.as_ref().map(|sync| {
                let filter = sync.filter();
                GroupSync {
                    groups: Arc::new(move |group| filter.matches(group)),
                    interval: sync.interval.into(),
                }
            }),
            metrics: metrics.clone(),
        };
        metrics.start_mirror(name);
        let partitions = Partitions::default();
        collector.add(name, partitions.clone());
        tracker.add(
            name,
            &m.source,
            &m.target,
            m.commit_interval.into(),
            partitions.clone(),
        );
        tasks.spawn(strait_mirror::mirror::run(spec, partitions, shutdown.clone()));
    }
    tokio::spawn(tracker.clone().run(shutdown.clone()));
    admin.set_mirrors(tracker);
    Ok(tasks)
}

/// Lets one collector be registered while the mirrors keep adding to it.
#[derive(Debug)]
struct CollectorHandle(Arc<PartitionCollector>);

impl prometheus::core::Collector for CollectorHandle {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.0.desc()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.0.collect()
    }
}
