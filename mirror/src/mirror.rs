//! One mirror: topic discovery, the mirror's group, a task per owned
//! partition, and the commit loop.
//!
//! - **Discovery**, at start and every `discovery_interval`: the source's
//!   metadata is re-read; each matching topic gets its target topic
//!   (created with the source's partition count and configs, or grown when
//!   the source gained partitions). A source topic that disappears is
//!   logged; the target topic is left alone.
//! - **The group** ([`crate::membership`]): the process joins the mirror's
//!   group on the source; its leader assigns the discovered partitions
//!   over every process running the mirror, and rebalances when they
//!   change. The process runs a task per partition it owns; on every
//!   rebalance it stops them, lets them write what they fetched, commits,
//!   and joins again.
//! - **Commits**, every `commit_interval`: each partition's acknowledged
//!   position (only what the target acknowledged) is committed to the
//!   source under the mirror's group, with the target offset it maps to.
//! - **Shutdown**: fetching stops, what was fetched is written (for at most
//!   `shutdown_grace`), the positions are committed, and `run` returns.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use strait_upstream::{Backoff, Cluster};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use crate::grouped::{FetchSettings, Fetcher, Producer};
use crate::membership::{Beat, Member, Timeouts, TopicPartition};
use crate::metrics::MirrorMetrics;
use crate::offset_map;
use crate::partition;
use crate::positions;
use crate::shared::{OnLost, Shared, StartAt};
use crate::state::{Membership, PartitionState, Partitions, Status};
use crate::sync::{GroupSync, Syncer, Written};
use crate::topics;

/// Which source topics a mirror takes, and their target names.
pub type TopicFilter = Arc<dyn Fn(&str) -> bool + Send + Sync>;
/// Source topic name to target topic name.
pub type Rename = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// Everything one mirror needs, as plain values.
#[derive(Clone)]
pub struct MirrorSpec {
    /// The mirror's name.
    pub name: String,
    /// The source cluster.
    pub source: Cluster,
    /// The target cluster.
    pub target: Cluster,
    /// Which source topics to mirror.
    pub topics: TopicFilter,
    /// Target topic names.
    pub rename: Rename,
    /// Consumer group on the source holding the positions.
    pub group: String,
    /// How often positions are committed.
    pub commit_interval: Duration,
    /// How often new topics and partitions are looked for.
    pub discovery_interval: Duration,
    /// Where partitions without a committed position start.
    pub start: StartAt,
    /// Bytes fetched and not yet acknowledged by the target, at most.
    pub max_bytes_in_flight: usize,
    /// What to do about records lost to source retention.
    pub on_lost: OnLost,
    /// Batches smaller than this are merged with their small neighbours
    /// ([`crate::batch::coalesce_runs`]); 0: none are.
    pub coalesce_below: usize,
    /// The largest batch small ones are merged into.
    pub coalesce_up_to: usize,
    /// Caught-up partitions keep a second fetch waiting at the source, half
    /// a round trip after the first: lower latency for more bytes across
    /// the link.
    pub staggered_polls: bool,
    /// Marks records with their origin and leaves out the target's own
    /// ([`crate::batch::Origins`]).
    pub prevent_loops: bool,
    /// How long shutdown waits for fetched records to be written.
    pub shutdown_grace: Duration,
    /// The mirror's group membership on the source: session, rebalance
    /// and heartbeat ([`crate::membership`]).
    pub membership: Timeouts,
    /// The topic on the target holding the offset map
    /// ([`crate::offset_map`]).
    pub offset_map_topic: String,
    /// The offset map topic's retention (set when the mirror creates it).
    pub offset_map_retention: Duration,
    /// Source groups followed on the target, if any.
    pub sync_groups: Option<GroupSync>,
    /// Where histograms and error counters go.
    pub metrics: MirrorMetrics,
}

impl std::fmt::Debug for MirrorSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorSpec")
            .field("name", &self.name)
            .field("source", &self.source.name())
            .field("target", &self.target.name())
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

/// Runs `spec` until `shutdown` turns true. `partitions` holds the
/// partitions this process owns (pass a clone to the metrics).
pub async fn run(spec: MirrorSpec, partitions: Partitions, shutdown: watch::Receiver<bool>) {
    let shared = Arc::new(Shared {
        name: spec.name.clone().into(),
        group: spec.group.clone(),
        source: spec.source.clone(),
        target: spec.target.clone(),
        fetcher: Fetcher::new(
            spec.source.clone(),
            FetchSettings {
                max_wait: Duration::from_millis(500),
                max_bytes: 64 << 20,
            },
        ),
        producer: Producer::new(spec.target.clone(), Duration::from_secs(30)),
        budget: Arc::new(Semaphore::new(spec.max_bytes_in_flight)),
        budget_bytes: spec.max_bytes_in_flight,
        start: spec.start,
        on_lost: spec.on_lost,
        coalesce_below: spec.coalesce_below,
        coalesce_up_to: spec.coalesce_up_to,
        staggered_polls: spec.staggered_polls,
        prevent_loops: spec.prevent_loops,
        origins: tokio::sync::OnceCell::new(),
        generation: std::sync::Mutex::new(None),
        producer_id: tokio::sync::OnceCell::new(),
        metrics: spec.metrics.clone(),
        partitions: AtomicUsize::new(0),
    });
    tracing::info!(
        mirror = %spec.name, source = spec.source.name(), target = spec.target.name(), group = %spec.group,
        "mirror starting"
    );
    let mut map = MapWriter {
        ready: false,
        sync: None,
    };
    if let Some(sync) = spec.sync_groups.clone() {
        let (written, entries) = tokio::sync::mpsc::unbounded_channel();
        map.sync = Some(written);
        let syncer = Syncer {
            name: shared.name.clone(),
            mirror_group: spec.group.clone(),
            source: spec.source.clone(),
            target: spec.target.clone(),
            topics: spec.topics.clone(),
            rename: spec.rename.clone(),
            map_topic: spec.offset_map_topic.clone(),
            sync,
            partitions: partitions.clone(),
            metrics: spec.metrics.clone(),
        };
        tokio::spawn(syncer.run(entries, shutdown.clone()));
    }
    tokio::spawn(crate::partition::watch_ends(
        shared.clone(),
        partitions.clone(),
        shutdown.clone(),
    ));
    let mut member = Member::new(spec.source.clone(), spec.group.clone(), spec.membership);
    let mut topics: BTreeMap<String, i32> = BTreeMap::new();
    let mut owned = Owned::default();
    let mut stop = shutdown.clone();
    let mut discovery = tokio::time::interval(spec.discovery_interval);
    let mut commits = tokio::time::interval(spec.commit_interval);
    let mut watch_pause = tokio::time::interval(Duration::from_millis(50));
    for interval in [&mut discovery, &mut commits, &mut watch_pause] {
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    }
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    // When this process last stopped its partitions for a rebalance.
    let mut paused: Option<Instant> = None;
    'member: loop {
        discover(&spec, &mut topics).await;
        let joined = tokio::select! {
            joined = member.join(&owned.assigned, &topics) => joined,
            _ = crate::shut_down(&mut stop) => break 'member,
        };
        let joined = match joined {
            Ok(joined) => joined,
            Err(e) => {
                spec.metrics
                    .errors
                    .with_label_values(&[&spec.name, "source"])
                    .inc();
                tracing::warn!(mirror = %spec.name, group = %spec.group, error = %e, "cannot join the mirror's group on the source; will retry");
                tokio::select! {
                    _ = tokio::time::sleep(backoff.next_delay()) => continue 'member,
                    _ = crate::shut_down(&mut stop) => break 'member,
                }
            }
        };
        backoff.reset();
        tracing::info!(
            mirror = %spec.name, group = %spec.group, generation = joined.generation.id,
            member = %joined.generation.member, leader = joined.leader, partitions = joined.assigned.len(),
            "joined the mirror's group"
        );
        *shared.generation.lock().expect("generation") = Some(joined.generation.clone());
        spec.metrics.rebalances.with_label_values(&[&spec.name]).inc();
        spec.metrics
            .owned
            .with_label_values(&[&spec.name])
            .set(joined.assigned.len() as i64);
        partitions.set_member(Some(Membership {
            member_id: joined.generation.member.clone(),
            generation: joined.generation.id,
            leader: joined.leader,
            members: joined.members,
        }));
        owned.start(&spec, &shared, &partitions, joined.assigned.clone());
        let mut heartbeats = tokio::time::interval(spec.membership.heartbeat);
        heartbeats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_beat = Instant::now();
        let mut stopping = false;
        loop {
            tokio::select! {
                _ = heartbeats.tick() => match member.heartbeat().await {
                    Ok(Beat::Stable) => last_beat = Instant::now(),
                    Ok(Beat::Rebalance) => {
                        tracing::info!(mirror = %spec.name, group = %spec.group, "the mirror's group rebalances: handing over");
                        break;
                    }
                    Err(e) if last_beat.elapsed() >= spec.membership.session => {
                        tracing::warn!(
                            mirror = %spec.name, group = %spec.group, error = %e,
                            "the group coordinator was out of reach for a session timeout: stopping this process's partitions (the others may own them now)"
                        );
                        break;
                    }
                    Err(e) => tracing::debug!(mirror = %spec.name, error = %e, "heartbeat failed; retrying"),
                },
                _ = discovery.tick() => {
                    discover(&spec, &mut topics).await;
                    if topics != joined.topics {
                        tracing::info!(mirror = %spec.name, group = %spec.group, "source topics changed: joining again");
                        break;
                    }
                }
                _ = commits.tick() => commit(&spec, &shared, &partitions, &mut map).await,
                _ = watch_pause.tick(), if paused.is_some() => {
                    // Every owned partition streams (or stopped for good).
                    if partitions.all().iter().all(|s| matches!(s.status(), Status::Running | Status::Stopped(_))) {
                        let pause = paused.take().expect("paused").elapsed();
                        spec.metrics.rebalance_pause.with_label_values(&[&spec.name]).observe(pause.as_secs_f64());
                        tracing::info!(mirror = %spec.name, pause_ms = pause.as_millis() as u64, "rebalance done: every owned partition streams");
                    }
                }
                Some(_) = owned.tasks.join_next() => {}
                _ = crate::shut_down(&mut stop) => {
                    stopping = true;
                    break;
                }
            }
        }
        if stopping {
            tracing::info!(mirror = %spec.name, "mirror stopping: writing what was fetched");
        }
        paused = Some(Instant::now());
        owned.stop(&spec, &mut member).await;
        spec.metrics.owned.with_label_values(&[&spec.name]).set(0);
        commit(&spec, &shared, &partitions, &mut map).await;
        if stopping {
            member.leave().await;
            break;
        }
    }
    partitions.set_member(None);
    tracing::info!(mirror = %spec.name, "mirror stopped");
}

/// The partitions this process owns, and their tasks.
#[derive(Default)]
struct Owned {
    /// The partitions of the last assignment.
    assigned: Vec<TopicPartition>,
    tasks: JoinSet<()>,
    /// True stops every task (the protocol is eager: all stop together).
    stop: Option<watch::Sender<bool>>,
}

impl Owned {
    /// Starts a task for each partition of `assigned`. A partition this
    /// process owned before keeps its state (counters, offset map run).
    fn start(
        &mut self,
        spec: &MirrorSpec,
        shared: &Arc<Shared>,
        partitions: &Partitions,
        assigned: Vec<TopicPartition>,
    ) {
        partitions.retain(|topic, partition| assigned.iter().any(|(t, p)| t == topic && *p == partition));
        shared.partitions.store(assigned.len(), Ordering::Relaxed);
        let (stop, stopped) = watch::channel(false);
        self.stop = Some(stop);
        for (topic, partition) in &assigned {
            let state = partitions.get(topic, *partition).unwrap_or_else(|| {
                let state = Arc::new(PartitionState::new(
                    topic.as_str().into(),
                    (spec.rename)(topic).into(),
                    *partition,
                ));
                partitions.insert(state.clone());
                state
            });
            state.set_status(Status::Starting);
            let span = tracing::info_span!("partition", mirror = %shared.name, topic = %topic, partition);
            self.tasks
                .spawn(partition::run(shared.clone(), state, stopped.clone()).instrument(span));
        }
        self.assigned = assigned;
    }

    /// Stops every task: fetching stops, what was fetched is written (for
    /// at most `shutdown_grace`; a partition stopped before that resumes
    /// exactly from the target's tail wherever it runs next). `member`
    /// goes on heartbeating meanwhile, so that it stays in the group.
    async fn stop(&mut self, spec: &MirrorSpec, member: &mut Member) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        let deadline = Instant::now() + spec.shutdown_grace;
        let mut heartbeats = tokio::time::interval(spec.membership.heartbeat);
        heartbeats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                next = self.tasks.join_next() => if next.is_none() {
                    return;
                },
                _ = heartbeats.tick() => {
                    let _ = member.heartbeat().await;
                }
                _ = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(mirror = %spec.name, grace = ?spec.shutdown_grace, "partitions still writing after the shutdown grace; stopping them (they resume exactly wherever they run next)");
                    self.tasks.shutdown().await;
                    return;
                }
            }
        }
    }
}

/// Reads the source's topics that the mirror takes into `topics` (name,
/// partitions), each once its target topic exists with as many
/// partitions (created with the source's configs, or grown). A source
/// topic that disappears leaves `topics`; its target topic is left alone.
async fn discover(spec: &MirrorSpec, topics: &mut BTreeMap<String, i32>) {
    let metadata = match spec.source.refresh().await {
        Ok(metadata) => metadata,
        Err(e) => {
            tracing::warn!(mirror = %spec.name, error = %e, "topic discovery: source metadata unavailable");
            return;
        }
    };
    for (topic, found) in &metadata.topics {
        if found.internal || found.error.is_some() || !(spec.topics)(topic) || *topic == spec.offset_map_topic
        {
            continue;
        }
        let count = found.partitions.len();
        let have = topics.get(topic).copied().unwrap_or(0) as usize;
        if count <= have {
            continue;
        }
        let target_topic = (spec.rename)(topic);
        let configs = if have == 0 {
            match topics::configs_to_copy(&spec.source, topic).await {
                Ok(configs) => configs,
                Err(e) => {
                    tracing::warn!(mirror = %spec.name, %topic, error = %e, "cannot read the source topic's configs; will retry");
                    continue;
                }
            }
        } else {
            Vec::new()
        };
        match topics::ensure(&spec.target, &target_topic, count, &configs).await {
            Ok(ensured) => tracing::info!(
                mirror = %spec.name, %topic, %target_topic, partitions = count, ?ensured, configs = ?configs,
                "mirroring topic"
            ),
            Err(e) => {
                tracing::warn!(mirror = %spec.name, %topic, %target_topic, error = %e, "cannot create or grow the target topic; will retry");
                continue;
            }
        }
        topics.insert(topic.clone(), count as i32);
    }
    topics.retain(|topic, _| {
        let kept = metadata.topics.contains_key(topic);
        if !kept {
            tracing::warn!(mirror = %spec.name, %topic, "source topic deleted: its partitions stop; the target topic is kept");
        }
        kept
    });
}

/// Commits every partition's acknowledged position that moved, after
/// writing the offset map entries those positions need (a position is
/// committed only once the map covers it: see [`crate::offset_map`]).
async fn commit(spec: &MirrorSpec, shared: &Shared, partitions: &Partitions, map: &mut MapWriter) {
    let refresh = spec.offset_map_retention / 4;
    let due: Vec<_> = partitions
        .all()
        .into_iter()
        .filter_map(|s| s.to_commit(refresh).map(|(c, e)| (s, c, e)))
        .collect();
    if due.is_empty() {
        return;
    }
    let entries: Vec<(String, i32, offset_map::Entry)> = due
        .iter()
        .filter_map(|(_, c, e)| e.as_ref().map(|(e, _)| (c.topic.clone(), c.partition, e.clone())))
        .collect();
    if !entries.is_empty() {
        if let Err(e) = write_map(spec, shared, &entries, &mut map.ready).await {
            tracing::warn!(
                mirror = %spec.name, topic = %spec.offset_map_topic, error = %e,
                "cannot write the offset map; positions are committed once it is written (will retry)"
            );
            return;
        }
        for (state, _, entry) in &due {
            if let Some((entry, token)) = entry {
                state.map_written(entry, *token);
            }
        }
        if let Some(sync) = &map.sync {
            let _ = sync.send(entries);
        }
    }
    let batch: Vec<positions::ToCommit> = due.iter().map(|(_, c, _)| c.clone()).collect();
    match positions::commit(&spec.source, &spec.group, shared.generation().as_ref(), &batch).await {
        Ok(()) => {
            for (state, c, _) in due {
                state.committed(c.offset);
            }
        }
        Err(e) => {
            tracing::warn!(mirror = %spec.name, group = %spec.group, error = %e, "commit failed; will retry")
        }
    }
}

/// The offset map topic as the commit loop writes it.
struct MapWriter {
    /// The topic is known to exist.
    ready: bool,
    /// Where entries written go for the group offset sync.
    sync: Option<Written>,
}

/// Most bytes of entries in one batch of the map topic (within Kafka's
/// default `max.message.bytes` of 1 MiB).
const MAP_BATCH_BYTES: usize = 512 << 10;

/// Writes `entries` to the offset map topic (created first if it is not
/// there), in order, each batch acknowledged before the next is sent.
async fn write_map(
    spec: &MirrorSpec,
    shared: &Shared,
    entries: &[(String, i32, offset_map::Entry)],
    map_ready: &mut bool,
) -> Result<(), strait_upstream::UpstreamError> {
    let topic: Arc<str> = spec.offset_map_topic.as_str().into();
    if !*map_ready {
        let configs = [
            ("cleanup.policy".to_owned(), "delete".to_owned()),
            (
                "retention.ms".to_owned(),
                spec.offset_map_retention.as_millis().to_string(),
            ),
        ];
        topics::ensure(&spec.target, &topic, 1, &configs).await?;
        *map_ready = true;
    }
    let mut start = 0;
    while start < entries.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < entries.len() && (end == start || bytes < MAP_BATCH_BYTES) {
            bytes += entries[end].2.encode().len();
            end += 1;
        }
        let batch = offset_map::batch_of(&entries[start..end], crate::state::now_ms());
        let answer = shared
            .producer
            .produce(&topic, 0, bytes::Bytes::from(batch))
            .await?
            .await;
        answer.unwrap_or_else(|_| {
            Err(strait_upstream::UpstreamError::Disconnected {
                broker: spec.target.name().to_owned(),
                reason: "the produce task stopped".to_owned(),
            })
        })?;
        start = end;
    }
    Ok(())
}
