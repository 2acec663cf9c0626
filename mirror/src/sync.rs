//! Group offset sync (`sync_group_offsets`): every `interval`, the
//! source's consumer groups that the mirror follows are read, their
//! committed offsets translated with the offset map
//! ([`crate::offset_map`]) and committed on the target, so that a group
//! can move to the target at any time and read on from exactly the next
//! record it had not read.
//!
//! - **Only inactive groups.** A group with members on the target is left
//!   alone: its consumers there own its offsets.
//! - **Never backwards over a consumer's commit.** On the target, a
//!   partition whose offset a consumer committed (not this sync: its
//!   commits carry `strait-sync:` metadata) only moves forward. One the
//!   sync committed follows the source either way (a source group reset
//!   to re-read is followed).
//! - **Never ahead of the mirror.** An offset translates only once the
//!   records before it are on the target: the map as this process knows it
//!   (read from the map topic at start, then the entries it writes and the
//!   positions the target acknowledged). A partition not mirrored that far
//!   yet waits for the next round; one before what the map covers (never
//!   mirrored, or older than the map's retention) is left alone.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use strait_upstream::Cluster;
use tokio::sync::{mpsc, watch};

use crate::error::{self, MirrorError};
use crate::metrics::MirrorMetrics;
use crate::mirror::{Rename, TopicFilter};
use crate::offset_map::{Entry, Map, Translation};
use crate::positions;
use crate::state::Partitions;
use crate::translate;

/// The metadata of the sync's commits on the target.
const SYNC_PREFIX: &str = "strait-sync:";
/// Groups synced at once.
const CONCURRENCY: usize = 64;

/// Which groups follow, and how often.
#[derive(Clone)]
pub struct GroupSync {
    /// The groups to follow (the mirror's own is never followed).
    pub groups: TopicFilter,
    /// How often.
    pub interval: Duration,
}

impl std::fmt::Debug for GroupSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupSync")
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

/// Offset map entries the mirror wrote, in order, for the sync's map.
pub type Written = mpsc::UnboundedSender<Vec<(String, i32, Entry)>>;

/// What one sync needs of its mirror.
pub struct Syncer {
    /// The mirror's name.
    pub name: Arc<str>,
    /// The mirror's own group (never followed).
    pub mirror_group: String,
    /// Source cluster.
    pub source: Cluster,
    /// Target cluster.
    pub target: Cluster,
    /// The topics the mirror copies.
    pub topics: TopicFilter,
    /// Their target names.
    pub rename: Rename,
    /// The offset map topic.
    pub map_topic: String,
    /// Which groups, how often.
    pub sync: GroupSync,
    /// The mirror's partitions (their acknowledged positions extend the map).
    pub partitions: Partitions,
    /// Where the commits are counted.
    pub metrics: MirrorMetrics,
}

impl std::fmt::Debug for Syncer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Syncer")
            .field("name", &self.name)
            .field("map_topic", &self.map_topic)
            .field("sync", &self.sync)
            .finish_non_exhaustive()
    }
}

impl Syncer {
    /// Runs until `shutdown`: the map is read from the map topic, then kept
    /// up with `written` and the partitions' positions; every interval the
    /// groups are synced.
    pub async fn run(
        self,
        mut written: mpsc::UnboundedReceiver<Vec<(String, i32, Entry)>>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut map: Option<Map> = None;
        let mut tick = tokio::time::interval(self.sync.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = crate::shut_down(&mut shutdown) => return,
            }
            if map.is_none() {
                match translate::read_map(&self.target, &self.map_topic).await {
                    Ok(found) => map = Some(found.unwrap_or_default()),
                    Err(e) => {
                        tracing::warn!(mirror = %self.name, error = %e, "group offset sync: cannot read the offset map yet");
                        continue;
                    }
                }
            }
            let map = map.as_mut().expect("read above");
            // Entries written while the map was read apply again, in order:
            // the last one written wins, as in the topic.
            while let Ok(entries) = written.try_recv() {
                for (topic, partition, entry) in entries {
                    map.partitions
                        .entry((topic, partition))
                        .or_default()
                        .apply(&entry);
                }
            }
            for state in self.partitions.all() {
                let (Some(acked), Some(known)) = (
                    state.acked(),
                    map.partitions
                        .get_mut(&(state.source_topic.to_string(), state.partition)),
                ) else {
                    continue;
                };
                known.extend_to(acked);
            }
            let started = Instant::now();
            match self.round(map).await {
                Ok(commits) => {
                    self.metrics
                        .group_commits
                        .with_label_values(&[&self.name])
                        .inc_by(commits as u64);
                    self.metrics
                        .group_sync
                        .with_label_values(&[&self.name])
                        .observe(started.elapsed().as_secs_f64());
                }
                Err(e) => {
                    self.metrics
                        .errors
                        .with_label_values(&[&self.name, e.kind()])
                        .inc();
                    tracing::warn!(mirror = %self.name, error = %e, "group offset sync failed; will retry");
                }
            }
        }
    }

    /// One round: every followed group; the number of partitions committed.
    async fn round(&self, map: &Map) -> Result<usize, MirrorError> {
        let metadata = self.source.metadata().await.map_err(error::source)?;
        let listed = join_all(
            metadata
                .brokers
                .keys()
                .map(|&node| strait_lag::kafka::list_groups(&self.source, node)),
        )
        .await;
        let mut groups = Vec::new();
        for found in listed {
            groups.extend(
                found
                    .map_err(error::source)?
                    .into_iter()
                    .map(|(_, g)| g)
                    .filter(|g| *g != self.mirror_group && (self.sync.groups)(g)),
            );
        }
        groups.sort();
        groups.dedup();
        let mut commits = 0;
        for chunk in groups.chunks(CONCURRENCY) {
            for (group, outcome) in chunk
                .iter()
                .zip(join_all(chunk.iter().map(|g| self.group(map, g))).await)
            {
                match outcome {
                    Ok(n) => commits += n,
                    // Active on the target, or commits raced a joining
                    // member: left alone this round.
                    Err(MirrorError::GroupActive { .. }) => {}
                    Err(e) => {
                        self.metrics
                            .errors
                            .with_label_values(&[&self.name, e.kind()])
                            .inc();
                        tracing::debug!(mirror = %self.name, group, error = %e, "group offset sync: group skipped this round");
                    }
                }
            }
        }
        Ok(commits)
    }

    /// Syncs one group; the number of partitions committed.
    async fn group(&self, map: &Map, group: &str) -> Result<usize, MirrorError> {
        let offsets = positions::load_all(&self.source, group)
            .await
            .map_err(error::source)?;
        let mut wanted: Vec<(String, i32, i64, i64)> = Vec::new();
        for o in offsets.iter().filter(|o| (self.topics)(&o.topic)) {
            let Some(known) = map.partitions.get(&(o.topic.clone(), o.partition)) else {
                continue;
            };
            // Only exact translations: one before the map (records never
            // mirrored, or older than the map's retention) would skip them.
            if let Translation::Exact(target) = known.translate(o.offset) {
                wanted.push(((self.rename)(&o.topic), o.partition, target, o.offset));
            }
        }
        if wanted.is_empty() {
            return Ok(0);
        }
        translate::check_inactive(&self.target, group).await?;
        let current: HashMap<(String, i32), (i64, Option<String>)> = positions::load_all(&self.target, group)
            .await
            .map_err(error::target)?
            .into_iter()
            .map(|o| ((o.topic, o.partition), (o.offset, o.metadata)))
            .collect();
        let commits: Vec<(&str, i32, i64, String)> = wanted
            .iter()
            .filter(|(topic, partition, target, _)| {
                match current.get(&(topic.clone(), *partition)) {
                    None => true,
                    Some((at, metadata))
                        if metadata.as_deref().is_some_and(|m| m.starts_with(SYNC_PREFIX)) =>
                    {
                        at != target
                    }
                    // A consumer's own commit on the target: only forward.
                    Some((at, _)) => target > at,
                }
            })
            .map(|(topic, partition, target, source)| {
                (
                    topic.as_str(),
                    *partition,
                    *target,
                    format!("{SYNC_PREFIX}{}:{source}", self.name),
                )
            })
            .collect();
        if commits.is_empty() {
            return Ok(0);
        }
        positions::commit_offsets(&self.target, group, &commits)
            .await
            .map_err(|e| match e.code() {
                // A member joined since the check.
                Some(
                    kafka_protocol::ResponseError::UnknownMemberId
                    | kafka_protocol::ResponseError::IllegalGeneration
                    | kafka_protocol::ResponseError::StaleMemberEpoch,
                ) => MirrorError::GroupActive {
                    group: group.to_owned(),
                    state: "joined meanwhile".to_owned(),
                    members: 1,
                },
                _ => error::target(e),
            })?;
        Ok(commits.len())
    }
}
