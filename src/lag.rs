//! Watching consumer groups' lag (the `lag:` section) on the clusters
//! Strait holds connections to, for `strait serve`.

use std::collections::BTreeMap;
use std::sync::Arc;

use strait_config::Config;
use strait_lag::{LagCollector, Tracker, Watch};
use strait_upstream::Cluster;
use tokio::sync::watch;

/// Starts a poll loop per watched cluster of `clusters` (already
/// connected, by name), registers the lag series and hands the groups to
/// `admin`. Nothing when `lag.enabled` is false.
pub fn start(
    config: &Config,
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
    for (name, cluster) in clusters.iter().filter(|(name, _)| lag.watches(name)) {
        tokio::spawn(strait_lag::kafka::run(
            name.clone(),
            cluster.clone(),
            watch.clone(),
            tracker.clone(),
            lag.interval.into(),
            shutdown.clone(),
        ));
    }
    admin.set_groups(tracker);
    Ok(())
}
