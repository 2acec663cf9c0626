//! The classic consumer group coordinator (JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup, OffsetCommit, OffsetFetch, DescribeGroups, ListGroups,
//! DeleteGroups), as a pure module: the connection layer decodes a request
//! with `kafka_protocol`, calls the matching method with the request and its
//! API version, and encodes what comes back.
//!
//! Semantics follow Kafka's classic `GroupCoordinator` (KIP-848 groups are
//! out of scope):
//!
//! - Group states Empty, PreparingRebalance, CompletingRebalance, Stable
//!   ([`GroupState`]; Dead is what DescribeGroups reports for an unknown
//!   group). A JoinGroup waits until its round completes: when every known
//!   member has rejoined (and no MEMBER_ID_REQUIRED id is outstanding), or
//!   when the rebalance timeout (the largest of the members') expires, which
//!   removes the members that did not rejoin. The first round of an empty
//!   group waits [`GroupConfig::initial_rebalance_delay`] for more members,
//!   extended while new members keep arriving (Kafka's InitialDelayedJoin).
//! - JoinGroup v4+ with an empty member id gets MEMBER_ID_REQUIRED and a
//!   fresh `{client_id}-{uuid}` (KIP-394); the id expires after the session
//!   timeout if the member does not come back with it.
//! - Every heartbeat, join, sync and member commit resets the member's
//!   session timer; an expired member is removed and the group rebalances.
//!   Members that do not send SyncGroup within the rebalance timeout after a
//!   join round are removed too.
//! - Static membership (KIP-345): a member with a `group_instance_id` never
//!   needs MEMBER_ID_REQUIRED; rejoining with an unknown member id replaces
//!   its old member id (the old id gets FENCED_INSTANCE_ID) without a
//!   rebalance when the group is Stable and the selected protocol does not
//!   change. KIP-814's `skip_assignment` is returned to a rejoining static
//!   leader on JoinGroup v9.
//! - Committed offsets are durable (fsynced) before OffsetCommit answers.
//!   They live in a spool partition at [`GroupConfig::offsets_dir`] (format
//!   in `offsets.rs`), replayed on [`GroupCoordinator::open`] and compacted
//!   (rewritten with only the live offsets, swapped in by renames) at open
//!   and in the background once dead entries outnumber live ones.
//! - Offsets expire: a group with no members whose newest commit is older
//!   than [`GroupConfig::offsets_retention`] (7 days) loses its offsets,
//!   durably, at the next check (every 10 min).
//!
//! Not persisted: group membership. After a restart, groups come back Empty
//! (with their offsets) and members rejoin after their next request fails
//! with UNKNOWN_MEMBER_ID, as after a Kafka coordinator failover without
//! group metadata.
//!
//! Concurrency: all state sits behind one `std::sync::Mutex`, never held
//! across an `.await`. Waiting requests hold `oneshot` receivers; a
//! background task fires the timers (sessions, rebalance and sync
//! timeouts, pending member ids).
//!
//! Layout: the types, [`GroupCoordinator::open`] and
//! [`GroupCoordinator::shutdown`] here; the requests in `membership.rs`
//! (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), `commits.rs`
//! (OffsetCommit, OffsetFetch, `check_commit`, and the offsets log's
//! expiry and compaction) and `admin.rs` (DescribeGroups, ListGroups,
//! DeleteGroups); one group's state machine and timers in `state.rs`; the
//! committed offsets' table and log in `offsets.rs`.

mod admin;
mod commits;
mod membership;
mod offsets;
mod state;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::protocol::StrBytes;
use strait_spool::{Durability, IoPool, Partition, SpoolError};
use tokio::sync::Notify;
use tokio::time::Instant;

use commits::expirer;
use offsets::{Entry, OffsetStore};
pub use state::GroupState;
use state::{Group, Timers};

/// Settings of the coordinator.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// Smallest session timeout a member may ask for
    /// (`group.min.session.timeout.ms`, 6 s).
    pub min_session_timeout: Duration,
    /// Largest session timeout (`group.max.session.timeout.ms`, 30 min).
    pub max_session_timeout: Duration,
    /// How long the first join round of an empty group waits for more
    /// members (`group.initial.rebalance.delay.ms`). Default 3 s, Kafka's
    /// default: a group of consumers starting together rebalances once
    /// instead of once per consumer. Set 0 for tests and single consumers.
    pub initial_rebalance_delay: Duration,
    /// How long a new member may wait in its first join round before it is
    /// dropped (Kafka's fixed 5 min, KIP-394).
    pub new_member_join_timeout: Duration,
    /// Largest OffsetCommit metadata string, in bytes
    /// (`offset.metadata.max.bytes`, 4096).
    pub max_metadata_bytes: usize,
    /// Directory of the committed-offsets log (a spool partition).
    pub offsets_dir: PathBuf,
    /// Segment size of the offsets log (64 MiB).
    pub offsets_segment_bytes: u64,
    /// Compact the offsets log (at open, or in the background) once it
    /// holds at least this many dead entries and no fewer dead than live
    /// ones. Default 100 000.
    pub compact_min_dead_entries: u64,
    /// The committed offsets of a group with no members are deleted once
    /// its newest commit is this old (Kafka's `offsets.retention.minutes`,
    /// 7 days). `None` keeps them forever.
    pub offsets_retention: Option<Duration>,
    /// How often expired offsets are looked for (Kafka's
    /// `offsets.retention.check.interval.ms`, 10 min).
    pub offsets_retention_check_interval: Duration,
}

impl GroupConfig {
    /// Kafka's defaults, with the offsets log in `offsets_dir`.
    pub fn new(offsets_dir: impl Into<PathBuf>) -> Self {
        GroupConfig {
            min_session_timeout: Duration::from_secs(6),
            max_session_timeout: Duration::from_secs(30 * 60),
            initial_rebalance_delay: Duration::from_secs(3),
            new_member_join_timeout: Duration::from_secs(5 * 60),
            max_metadata_bytes: 4096,
            offsets_dir: offsets_dir.into(),
            offsets_segment_bytes: 64 << 20,
            compact_min_dead_entries: 100_000,
            offsets_retention: Some(Duration::from_secs(7 * 24 * 3600)),
            offsets_retention_check_interval: Duration::from_secs(10 * 60),
        }
    }
}

/// Who sent a JoinGroup (from the request header and the connection); shown
/// by DescribeGroups and used in generated member ids.
#[derive(Debug, Clone, Default)]
pub struct ClientInfo {
    /// The request header's client id.
    pub client_id: String,
    /// The client's address, as Kafka shows it (`/127.0.0.1`).
    pub client_host: String,
}

/// Counters of the offsets log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetLogStats {
    /// Entries (records) in the log: commits and deletions, live or not.
    pub log_entries: u64,
    /// Live committed offsets.
    pub live_offsets: u64,
    /// Bytes of record batches in the log.
    pub log_bytes: u64,
    /// Compactions done since open (including one at open).
    pub compactions: u64,
}

/// What the coordinator's groups look like now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Rebalances completed since the start (generations begun), of every
    /// group, forgotten ones included.
    pub rebalances: u64,
}

/// One group the coordinator knows (with members or committed offsets),
/// as a lag watcher reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffsets {
    /// Its id.
    pub group: String,
    /// Its state, as Kafka names it (`Stable`, `Empty`, ...).
    pub state: &'static str,
    /// Members now.
    pub members: usize,
    /// Its committed offsets: (topic, partition, offset), by topic and
    /// partition.
    pub committed: Vec<(String, i32, i64)>,
}

/// Errors opening the coordinator.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    /// The offsets log could not be opened or written.
    #[error("offsets log: {0}")]
    Spool(SpoolError),
    /// The offsets log holds an entry this version cannot read.
    #[error("offsets log {} at offset {offset}: {reason}", dir.display())]
    Corrupt {
        /// The log directory.
        dir: PathBuf,
        /// Offset of the batch.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A file operation of compaction failed.
    #[error("{op} {}: {error}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// [`GroupCoordinator::open`] was called outside a tokio runtime.
    #[error("the group coordinator must be opened inside a tokio runtime")]
    NoRuntime,
}

impl From<SpoolError> for GroupError {
    fn from(error: SpoolError) -> Self {
        // Not `#[from]`, which would also make it the `source` that the
        // message already quotes.
        GroupError::Spool(error)
    }
}

/// The group coordinator. Cheap to clone; clones share the state. Dropping
/// the last clone stops its timer and expiry tasks (call
/// [`GroupCoordinator::shutdown`] first for a clean close of the offsets
/// log).
#[derive(Debug, Clone)]
pub struct GroupCoordinator {
    shared: Arc<Shared>,
    _reaper: Arc<ReaperGuard>,
}

#[derive(Debug)]
struct Shared {
    config: GroupConfig,
    pool: Arc<IoPool>,
    state: Mutex<State>,
    wake: Arc<Notify>,
    /// Appends to the offsets log hold it shared (across their await);
    /// compaction and shutdown hold it exclusively.
    gate: tokio::sync::RwLock<()>,
}

#[derive(Debug)]
struct State {
    groups: HashMap<String, Group>,
    timers: Timers,
    offsets: OffsetStore,
    log: Option<Partition>,
    closed: bool,
    compacting: bool,
    compactions: u64,
    /// Generations of groups forgotten since the start, so that
    /// [`GroupCoordinator::stats`] counts their rebalances too.
    retired_generations: u64,
    /// After a failed compaction, the log size to reach before trying again.
    compact_retry_at: u64,
}

impl State {
    fn run_timers(&mut self, now: Instant) {
        while let Some((at, key)) = self.timers.pop_due(now) {
            let id = key.group().to_string();
            if let Some(group) = self.groups.get_mut(&id) {
                group.on_timer(at, &key, &mut self.timers, now);
            }
            self.gc(&id);
        }
    }

    /// Forgets a group with no members, no pending member ids and no
    /// offsets.
    fn gc(&mut self, id: &str) {
        if self.groups.get(id).is_some_and(Group::is_idle) && !self.offsets.has_group(id) {
            self.forget(id);
        }
    }

    fn gc_all(&mut self) {
        let offsets = &self.offsets;
        let retired = &mut self.retired_generations;
        self.groups.retain(|id, g| {
            let keep = !g.is_idle() || offsets.has_group(id);
            if !keep {
                *retired += g.generation.max(0) as u64;
            }
            keep
        });
    }

    /// Removes a group, keeping the count of its rebalances.
    fn forget(&mut self, id: &str) {
        if let Some(group) = self.groups.remove(id) {
            self.retired_generations += group.generation.max(0) as u64;
        }
    }

    /// Applies durable entries and makes sure groups with offsets exist.
    fn apply(&mut self, seq: u64, entries: Vec<Entry>) {
        self.offsets.log_entries += entries.len() as u64;
        for entry in entries {
            if let Entry::Commit { group, .. } = &entry {
                if !self.groups.contains_key(group) {
                    self.groups.insert(group.clone(), Group::new(group.clone()));
                }
            }
            self.offsets.apply(seq, entry);
        }
    }
}

/// Aborts the coordinator's background tasks when the last clone goes.
#[derive(Debug)]
struct ReaperGuard(Vec<tokio::task::JoinHandle<()>>);

impl Drop for ReaperGuard {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Fires due timers, then sleeps until the next one (or until a new,
/// earlier timer is pushed).
async fn reaper(shared: Weak<Shared>, wake: Arc<Notify>) {
    loop {
        let next = {
            let Some(shared) = shared.upgrade() else { return };
            let mut st = shared.lock();
            if st.closed {
                return;
            }
            st.run_timers(Instant::now());
            st.timers.next_deadline()
        };
        match next {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Handlers keep the state consistent at every return; a panic in
        // one leaves nothing half-done worth refusing service over.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn log_config(&self) -> strait_spool::LogConfig {
        offsets::log_config(self.config.offsets_segment_bytes, Durability::EveryBatch)
    }
}

fn sb(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

fn err(e: ResponseError) -> i16 {
    e.code()
}

/// Opens the log at `dir` after a failed compaction, and counts its entries.
fn reopen(
    shared_dir: &std::path::Path,
    config: strait_spool::LogConfig,
) -> Result<(Partition, u64), GroupError> {
    offsets::recover_dirs(shared_dir)?;
    let log = Partition::open(shared_dir, config)?;
    let mut entries = 0;
    offsets::read_log(&log, |_| entries += 1)?;
    Ok((log, entries))
}

impl GroupCoordinator {
    /// Opens the offsets log (replaying it, compacting it if it is mostly
    /// dead entries) and starts the timer task. Must run inside a tokio
    /// runtime; does blocking disk I/O (call it at startup, or from
    /// `spawn_blocking`).
    pub fn open(config: GroupConfig, pool: Arc<IoPool>) -> Result<Self, GroupError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| GroupError::NoRuntime)?;
        let dir = config.offsets_dir.clone();
        let log_config = offsets::log_config(config.offsets_segment_bytes, Durability::EveryBatch);
        offsets::recover_dirs(&dir)?;
        let mut log = Partition::open(&dir, log_config.clone())?;
        let mut store = OffsetStore::new();
        offsets::read_log(&log, |entry| store.replay(entry))?;
        let mut compactions = 0;
        if store.needs_compaction(config.compact_min_dead_entries) {
            let entries = store.live_entries();
            tracing::info!(dir = %dir.display(), entries = store.log_entries, live = store.live,
                "compacting the offsets log");
            match offsets::compact_dir(&dir, log_config.clone(), &entries, &log) {
                Ok(fresh) => {
                    log = fresh;
                    store.log_entries = entries.len() as u64;
                    compactions = 1;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "compacting the offsets log failed; keeping it as it is");
                    let _ = log.close();
                    drop(log);
                    let (reopened, count) = reopen(&dir, log_config)?;
                    log = reopened;
                    store.log_entries = count;
                }
            }
        }
        let wake = Arc::new(Notify::new());
        let timers = Timers::new(
            Arc::clone(&wake),
            config.initial_rebalance_delay,
            config.new_member_join_timeout,
        );
        let groups = store
            .group_ids()
            .map(|id| (id.clone(), Group::new(id.clone())))
            .collect();
        tracing::info!(dir = %dir.display(), groups = store.group_ids().count(), offsets = store.live,
            "group coordinator opened");
        let shared = Arc::new(Shared {
            config,
            pool,
            state: Mutex::new(State {
                groups,
                timers,
                offsets: store,
                log: Some(log),
                closed: false,
                compacting: false,
                compactions,
                retired_generations: 0,
                compact_retry_at: 0,
            }),
            wake: Arc::clone(&wake),
            gate: tokio::sync::RwLock::new(()),
        });
        let tasks = vec![
            runtime.spawn(reaper(Arc::downgrade(&shared), wake)),
            runtime.spawn(expirer(Arc::downgrade(&shared))),
        ];
        Ok(GroupCoordinator {
            shared,
            _reaper: Arc::new(ReaperGuard(tasks)),
        })
    }

    /// Stops the coordinator: waiting joins and syncs get
    /// COORDINATOR_NOT_AVAILABLE, later requests too; in-flight commits
    /// finish; the offsets log is closed (synced).
    pub async fn shutdown(&self) {
        {
            let mut st = self.shared.lock();
            if st.closed {
                return;
            }
            st.closed = true;
            for group in st.groups.values_mut() {
                group.fail_waiters(ResponseError::CoordinatorNotAvailable);
            }
        }
        self.shared.wake.notify_one();
        let gate = self.shared.gate.write().await;
        let log = self.shared.lock().log.take();
        if let Some(log) = log {
            match tokio::task::spawn_blocking(move || log.close()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "closing the offsets log failed"),
                Err(e) => tracing::warn!(error = %e, "closing the offsets log panicked"),
            }
        }
        drop(gate);
    }
}
