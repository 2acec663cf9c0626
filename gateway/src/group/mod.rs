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

mod offsets;
mod state;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse, GroupId,
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use strait_spool::{Durability, IoPool, Partition, SpoolError};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::{kafka_code, Failure};
use offsets::{Committed, Entry, OffsetStore};
pub use state::GroupState;
use state::{Group, JoinInput, JoinOutcome, Reply, SyncOutcome, Timers};

/// Bit set DescribeGroups reports for `include_authorized_operations`
/// (no ACLs: READ, DELETE and DESCRIBE are allowed).
const GROUP_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8);

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
            self.groups.remove(id);
        }
    }

    fn gc_all(&mut self) {
        let offsets = &self.offsets;
        self.groups.retain(|id, g| !g.is_idle() || offsets.has_group(id));
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

/// Every `offsets_retention_check_interval`, deletes expired offsets.
async fn expirer(shared: Weak<Shared>) {
    let Some(interval) = shared.upgrade().and_then(|s| {
        s.config
            .offsets_retention
            .map(|_| s.config.offsets_retention_check_interval)
    }) else {
        return;
    };
    loop {
        tokio::time::sleep(interval).await;
        let Some(shared) = shared.upgrade() else { return };
        if shared.lock().closed {
            return;
        }
        expire_offsets(&shared, offsets::now_ms()).await;
    }
}

/// Deletes, durably, the offsets of every group that has no members and
/// whose newest commit is older than `offsets_retention` at `now_ms`.
/// Returns the groups whose offsets expired. Kafka expires a consumer
/// group's offsets this way once it has been empty for the retention time;
/// Strait measures from the newest commit, which a consumer group makes as
/// its last members leave. (Kafka expires a standalone group partition by
/// partition; Strait keeps all of a group's offsets while any is fresh.)
async fn expire_offsets(shared: &Arc<Shared>, now_ms: i64) -> Vec<String> {
    let Some(retention) = shared.config.offsets_retention else {
        return Vec::new();
    };
    let cutoff = now_ms.saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX));
    let gate = shared.gate.read().await;
    let (seq, entries, append) = {
        let mut guard = shared.lock();
        let st = &mut *guard;
        // A commit in flight is applied after the deletion is written; wait
        // for a quiet moment rather than delete what it writes.
        if st.closed || st.offsets.has_inflight() {
            return Vec::new();
        }
        let Some(log) = st.log.as_ref() else {
            return Vec::new();
        };
        let expired: Vec<String> = st
            .offsets
            .group_ids()
            .filter(|id| st.groups.get(*id).is_none_or(Group::is_idle))
            .filter(|id| {
                st.offsets
                    .group(id)
                    .is_some_and(|o| o.values().all(|c| c.commit_timestamp < cutoff))
            })
            .cloned()
            .collect();
        if expired.is_empty() {
            return Vec::new();
        }
        let entries: Vec<Entry> = expired
            .iter()
            .map(|group| Entry::DeleteGroup { group: group.clone() })
            .collect();
        let seq = st.offsets.begin();
        let append = shared.pool.append(log, offsets::encode_batch(&entries, now_ms));
        (seq, entries, append)
    };
    let outcome = append.await;
    let mut st = shared.lock();
    let mut expired = Vec::new();
    match outcome {
        Ok(_) => {
            for entry in &entries {
                if let Entry::DeleteGroup { group } = entry {
                    tracing::info!(group = %group, retention = ?retention, "committed offsets expired");
                    expired.push(group.clone());
                }
            }
            st.apply(seq, entries);
            st.gc_all();
        }
        Err(e) => tracing::warn!(error = %e, "writing the expiry of committed offsets failed"),
    }
    st.offsets.finish(seq);
    maybe_compact(shared, &mut st);
    drop(st);
    drop(gate);
    expired
}

/// Starts a background compaction of the offsets log when it is due.
fn maybe_compact(shared: &Arc<Shared>, st: &mut State) {
    if st.compacting
        || st.closed
        || st.offsets.log_entries < st.compact_retry_at
        || !st
            .offsets
            .needs_compaction(shared.config.compact_min_dead_entries)
    {
        return;
    }
    st.compacting = true;
    tokio::spawn(compact_online(Arc::clone(shared)));
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

fn millis(ms: i32) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
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

    /// JoinGroup (v0-v9). Waits until the join round completes.
    pub async fn join_group(
        &self,
        req: JoinGroupRequest,
        version: i16,
        client: &ClientInfo,
    ) -> JoinGroupResponse {
        let member_id = req.member_id.to_string();
        let outcome = match self.join_now(req, version, client) {
            Reply::Now(outcome) => outcome,
            Reply::Wait(rx) => rx
                .await
                .unwrap_or_else(|_| JoinOutcome::error(&member_id, ResponseError::CoordinatorNotAvailable)),
        };
        join_response(outcome, version)
    }

    fn join_now(&self, req: JoinGroupRequest, version: i16, client: &ClientInfo) -> Reply<JoinOutcome> {
        let member_id = req.member_id.to_string();
        let group_id = req.group_id.0.to_string();
        let fail = |e| Reply::Now(JoinOutcome::error(&member_id, e));
        if group_id.is_empty() {
            return fail(ResponseError::InvalidGroupId);
        }
        let config = &self.shared.config;
        let session = millis(req.session_timeout_ms);
        if req.session_timeout_ms < 0
            || session < config.min_session_timeout
            || session > config.max_session_timeout
        {
            return fail(ResponseError::InvalidSessionTimeout);
        }
        let rebalance = if version == 0 || req.rebalance_timeout_ms < 0 {
            session
        } else {
            millis(req.rebalance_timeout_ms)
        };
        if let Some(reason) = req.reason.as_deref().filter(|r| !r.is_empty()) {
            tracing::debug!(group = %group_id, member = %member_id, reason, "join group");
        }
        let input = JoinInput {
            member_id: member_id.clone(),
            instance_id: req
                .group_instance_id
                .filter(|_| version >= 5)
                .map(|s| s.to_string()),
            client_id: client.client_id.clone(),
            client_host: client.client_host.clone(),
            session_timeout: session,
            rebalance_timeout: rebalance,
            protocol_type: req.protocol_type.to_string(),
            protocols: req
                .protocols
                .into_iter()
                .map(|p| (p.name.to_string(), p.metadata))
                .collect(),
            require_known_member_id: version >= 4,
            supports_skip_assignment: version >= 9,
        };
        let mut guard = self.shared.lock();
        let st = &mut *guard;
        if st.closed {
            return fail(ResponseError::CoordinatorNotAvailable);
        }
        let now = Instant::now();
        let group = if member_id.is_empty() {
            st.groups
                .entry(group_id.clone())
                .or_insert_with(|| Group::new(group_id.clone()))
        } else {
            match st.groups.get_mut(&group_id) {
                Some(group) => group,
                None => return fail(ResponseError::UnknownMemberId),
            }
        };
        let reply = group.join(input, &mut st.timers, now);
        st.gc(&group_id);
        reply
    }

    /// SyncGroup (v0-v5). A follower waits for the leader's assignment.
    pub async fn sync_group(&self, req: SyncGroupRequest, version: i16) -> SyncGroupResponse {
        let reply = {
            let group_id = req.group_id.0.to_string();
            let mut guard = self.shared.lock();
            let st = &mut *guard;
            if group_id.is_empty() {
                Reply::Now(SyncOutcome::error(ResponseError::InvalidGroupId))
            } else if st.closed {
                Reply::Now(SyncOutcome::error(ResponseError::CoordinatorNotAvailable))
            } else if let Some(group) = st.groups.get_mut(&group_id) {
                let (protocol_type, protocol_name) = if version >= 5 {
                    (req.protocol_type.as_deref(), req.protocol_name.as_deref())
                } else {
                    (None, None)
                };
                let assignments = req
                    .assignments
                    .iter()
                    .map(|a| (a.member_id.to_string(), a.assignment.clone()))
                    .collect();
                group.sync(
                    &req.member_id,
                    req.group_instance_id.as_deref().filter(|_| version >= 3),
                    req.generation_id,
                    protocol_type,
                    protocol_name,
                    assignments,
                    &mut st.timers,
                    Instant::now(),
                )
            } else {
                Reply::Now(SyncOutcome::error(ResponseError::UnknownMemberId))
            }
        };
        let outcome = match reply {
            Reply::Now(outcome) => outcome,
            Reply::Wait(rx) => rx
                .await
                .unwrap_or_else(|_| SyncOutcome::error(ResponseError::CoordinatorNotAvailable)),
        };
        let mut resp = SyncGroupResponse::default();
        resp.error_code = outcome.error;
        resp.assignment = outcome.assignment;
        if version >= 5 && outcome.error == 0 {
            resp.protocol_type = outcome.protocol_type.map(sb);
            resp.protocol_name = outcome.protocol_name.map(sb);
        }
        resp
    }

    /// Heartbeat (v0-v4).
    pub async fn heartbeat(&self, req: HeartbeatRequest, version: i16) -> HeartbeatResponse {
        let group_id = req.group_id.0.to_string();
        let result = {
            let mut guard = self.shared.lock();
            let st = &mut *guard;
            if group_id.is_empty() {
                Err(ResponseError::InvalidGroupId)
            } else if st.closed {
                Err(ResponseError::CoordinatorNotAvailable)
            } else if let Some(group) = st.groups.get_mut(&group_id) {
                group.heartbeat(
                    &req.member_id,
                    req.group_instance_id.as_deref().filter(|_| version >= 3),
                    req.generation_id,
                    &mut st.timers,
                    Instant::now(),
                )
            } else {
                Err(ResponseError::UnknownMemberId)
            }
        };
        let mut resp = HeartbeatResponse::default();
        resp.error_code = result.err().map_or(0, err);
        resp
    }

    /// LeaveGroup (v0-v5; v3+ carries a batch of members).
    pub async fn leave_group(&self, req: LeaveGroupRequest, version: i16) -> LeaveGroupResponse {
        let group_id = req.group_id.0.to_string();
        let leaving: Vec<(StrBytes, Option<StrBytes>)> = if version >= 3 {
            req.members
                .into_iter()
                .map(|m| (m.member_id, m.group_instance_id))
                .collect()
        } else {
            vec![(req.member_id, None)]
        };
        let (top, results): (Option<ResponseError>, Vec<Result<(), ResponseError>>) = {
            let mut guard = self.shared.lock();
            let st = &mut *guard;
            if group_id.is_empty() {
                (Some(ResponseError::InvalidGroupId), Vec::new())
            } else if st.closed {
                (Some(ResponseError::CoordinatorNotAvailable), Vec::new())
            } else if let Some(group) = st.groups.get_mut(&group_id) {
                let now = Instant::now();
                let results = leaving
                    .iter()
                    .map(|(member, instance)| group.leave(member, instance.as_deref(), &mut st.timers, now))
                    .collect();
                st.gc(&group_id);
                (None, results)
            } else {
                (
                    None,
                    leaving
                        .iter()
                        .map(|_| Err(ResponseError::UnknownMemberId))
                        .collect(),
                )
            }
        };
        let mut resp = LeaveGroupResponse::default();
        if version >= 3 {
            resp.error_code = top.map_or(0, err);
            resp.members = leaving
                .into_iter()
                .zip(results)
                .map(|((member_id, instance), result)| {
                    let mut m = MemberResponse::default();
                    m.member_id = member_id;
                    m.group_instance_id = instance;
                    m.error_code = result.err().map_or(0, err);
                    m
                })
                .collect();
        } else {
            resp.error_code = top
                .or_else(|| results.into_iter().find_map(Result::err))
                .map_or(0, err);
        }
        resp
    }

    /// OffsetCommit (v2-v9). Answers once the offsets are on disk.
    /// `partition_exists` says whether a topic-partition exists (others get
    /// UNKNOWN_TOPIC_OR_PARTITION).
    pub async fn offset_commit(
        &self,
        req: OffsetCommitRequest,
        version: i16,
        partition_exists: &(dyn Fn(&str, i32) -> bool + Sync),
    ) -> OffsetCommitResponse {
        let group_id = req.group_id.0.to_string();
        let member_id = req.member_id.to_string();
        let instance_id = req.group_instance_id.as_deref().filter(|_| version >= 7);
        let generation = req.generation_id_or_member_epoch;
        // Per partition, in request order: Some(error) or None (to write).
        let mut results: Vec<Vec<Option<i16>>> = req
            .topics
            .iter()
            .map(|t| {
                t.partitions
                    .iter()
                    .map(|p| {
                        (!partition_exists(&t.name.0, p.partition_index))
                            .then(|| err(ResponseError::UnknownTopicOrPartition))
                    })
                    .collect()
            })
            .collect();
        let gate = self.shared.gate.read().await;
        let pending = {
            let mut guard = self.shared.lock();
            let st = &mut *guard;
            let now = Instant::now();
            let group_error = if st.closed || st.log.is_none() {
                Some(ResponseError::CoordinatorNotAvailable)
            } else {
                validate_commit(st.groups.get(&group_id), generation, &member_id, instance_id)
            };
            if let Some(e) = group_error {
                for r in results.iter_mut().flatten().filter(|r| r.is_none()) {
                    *r = Some(err(e));
                }
                None
            } else {
                if let Some(group) = st.groups.get_mut(&group_id) {
                    if matches!(group.state, GroupState::Stable | GroupState::PreparingRebalance) {
                        group.touch_member(&member_id, &mut st.timers, now);
                    }
                }
                let timestamp = offsets::now_ms();
                let mut entries = Vec::new();
                let mut positions = Vec::new();
                for (ti, topic) in req.topics.iter().enumerate() {
                    for (pi, p) in topic.partitions.iter().enumerate() {
                        if results[ti][pi].is_some() {
                            continue;
                        }
                        let metadata = p.committed_metadata.as_deref().unwrap_or("");
                        if metadata.len() > self.shared.config.max_metadata_bytes {
                            results[ti][pi] = Some(err(ResponseError::OffsetMetadataTooLarge));
                            continue;
                        }
                        entries.push(Entry::Commit {
                            group: group_id.clone(),
                            topic: topic.name.0.to_string(),
                            partition: p.partition_index,
                            offset: p.committed_offset,
                            leader_epoch: if version >= 6 {
                                p.committed_leader_epoch
                            } else {
                                -1
                            },
                            commit_timestamp: timestamp,
                            metadata: Some(metadata.to_string()),
                        });
                        positions.push((ti, pi));
                    }
                }
                if entries.is_empty() {
                    None
                } else {
                    let log = st.log.as_ref().expect("checked above");
                    let seq = st.offsets.begin();
                    let append = self
                        .shared
                        .pool
                        .append(log, offsets::encode_batch(&entries, timestamp));
                    Some((seq, entries, positions, append))
                }
            }
        };
        if let Some((seq, entries, positions, append)) = pending {
            let outcome = append.await;
            let mut st = self.shared.lock();
            let code = match outcome {
                Ok(_) => {
                    st.apply(seq, entries);
                    0
                }
                Err(e) => {
                    tracing::warn!(group = %group_id, error = %e, "writing committed offsets failed");
                    st.gc(&group_id);
                    err(kafka_code(Failure::OffsetLog(&e)))
                }
            };
            st.offsets.finish(seq);
            for (ti, pi) in positions {
                results[ti][pi] = Some(code);
            }
            self.maybe_compact(&mut st);
        } else {
            let mut st = self.shared.lock();
            st.gc(&group_id);
        }
        drop(gate);
        let mut resp = OffsetCommitResponse::default();
        resp.topics = req
            .topics
            .into_iter()
            .zip(results)
            .map(|(topic, codes)| {
                let mut t = OffsetCommitResponseTopic::default();
                t.name = topic.name;
                t.partitions = topic
                    .partitions
                    .iter()
                    .zip(codes)
                    .map(|(p, code)| {
                        let mut r = OffsetCommitResponsePartition::default();
                        r.partition_index = p.partition_index;
                        r.error_code = code.unwrap_or(0);
                        r
                    })
                    .collect();
                t
            })
            .collect();
        resp
    }

    /// The error a commit of `req`'s group, generation and member would
    /// get now, or `None` when it would be accepted; an accepted member's
    /// session is touched, as a commit does. For the offsets the router
    /// commits elsewhere (on the upstream cluster of their topic) under a
    /// group this coordinator runs.
    pub fn check_commit(&self, req: &OffsetCommitRequest, version: i16) -> Option<ResponseError> {
        let member_id = req.member_id.to_string();
        let instance_id = req.group_instance_id.as_deref().filter(|_| version >= 7);
        let mut guard = self.shared.lock();
        let st = &mut *guard;
        if st.closed {
            return Some(ResponseError::CoordinatorNotAvailable);
        }
        let error = validate_commit(
            st.groups.get(req.group_id.as_str()),
            req.generation_id_or_member_epoch,
            &member_id,
            instance_id,
        );
        if error.is_none() {
            if let Some(group) = st.groups.get_mut(req.group_id.as_str()) {
                if matches!(group.state, GroupState::Stable | GroupState::PreparingRebalance) {
                    group.touch_member(&member_id, &mut st.timers, Instant::now());
                }
            }
        }
        error
    }

    fn maybe_compact(&self, st: &mut State) {
        maybe_compact(&self.shared, st);
    }

    /// Deletes the offsets that have expired at `now_ms` (see
    /// [`GroupConfig::offsets_retention`]); returns the groups they were
    /// of. A background task calls this every
    /// [`GroupConfig::offsets_retention_check_interval`].
    pub async fn expire_offsets_at(&self, now_ms: i64) -> Vec<String> {
        expire_offsets(&self.shared, now_ms).await
    }

    /// OffsetFetch (v1-v9). Partitions without a commit get offset -1 and no
    /// error; `topics` null means every committed partition of the group.
    /// `require_stable` is ignored (no transactions).
    pub async fn offset_fetch(&self, req: OffsetFetchRequest, version: i16) -> OffsetFetchResponse {
        let st = self.shared.lock();
        let closed = st.closed;
        let mut resp = OffsetFetchResponse::default();
        if version >= 8 {
            resp.groups = req
                .groups
                .iter()
                .map(|g| {
                    let asked = g.topics.as_ref().map(|topics| {
                        topics
                            .iter()
                            .map(|t| (t.name.0.clone(), t.partition_indexes.clone()))
                            .collect::<Vec<_>>()
                    });
                    let mut group = OffsetFetchResponseGroup::default();
                    group.group_id = g.group_id.clone();
                    if closed {
                        group.error_code = err(ResponseError::CoordinatorNotAvailable);
                        return group;
                    }
                    group.topics = fetch(&st.offsets, &g.group_id.0, asked)
                        .into_iter()
                        .map(|(name, partitions)| {
                            let mut t = OffsetFetchResponseTopics::default();
                            t.name = TopicName(name);
                            t.partitions = partitions
                                .into_iter()
                                .map(|(index, c)| {
                                    let mut p = OffsetFetchResponsePartitions::default();
                                    p.partition_index = index;
                                    p.committed_offset = c.map_or(-1, |c| c.offset);
                                    p.committed_leader_epoch = c.map_or(-1, |c| c.leader_epoch);
                                    p.metadata =
                                        Some(sb(c.and_then(|c| c.metadata.clone()).unwrap_or_default()));
                                    p
                                })
                                .collect();
                            t
                        })
                        .collect();
                    group
                })
                .collect();
            return resp;
        }
        if closed {
            if version >= 2 {
                resp.error_code = err(ResponseError::CoordinatorNotAvailable);
            }
            return resp;
        }
        let asked = req.topics.as_ref().map(|topics| {
            topics
                .iter()
                .map(|t| (t.name.0.clone(), t.partition_indexes.clone()))
                .collect::<Vec<_>>()
        });
        resp.topics = fetch(&st.offsets, &req.group_id.0, asked)
            .into_iter()
            .map(|(name, partitions)| {
                let mut t = OffsetFetchResponseTopic::default();
                t.name = TopicName(name);
                t.partitions = partitions
                    .into_iter()
                    .map(|(index, c)| {
                        let mut p = OffsetFetchResponsePartition::default();
                        p.partition_index = index;
                        p.committed_offset = c.map_or(-1, |c| c.offset);
                        if version >= 5 {
                            p.committed_leader_epoch = c.map_or(-1, |c| c.leader_epoch);
                        }
                        p.metadata = Some(sb(c.and_then(|c| c.metadata.clone()).unwrap_or_default()));
                        p
                    })
                    .collect();
                t
            })
            .collect();
        resp
    }

    /// DescribeGroups (v0-v6).
    pub fn describe_groups(&self, req: DescribeGroupsRequest, version: i16) -> DescribeGroupsResponse {
        let st = self.shared.lock();
        let mut resp = DescribeGroupsResponse::default();
        resp.groups = req
            .groups
            .into_iter()
            .map(|id| {
                let mut d = DescribedGroup::default();
                if version >= 3 && req.include_authorized_operations {
                    d.authorized_operations = GROUP_OPERATIONS;
                }
                d.group_state = sb(GroupState::Dead.name());
                if st.closed {
                    d.error_code = err(ResponseError::CoordinatorNotAvailable);
                } else if let Some(g) = st.groups.get(id.0.as_str()) {
                    d.group_state = sb(g.state.name());
                    d.protocol_type = sb(g.protocol_type.clone().unwrap_or_default());
                    let stable = g.state == GroupState::Stable;
                    let protocol = g.protocol_name.clone().unwrap_or_default();
                    if stable {
                        d.protocol_data = sb(protocol.clone());
                    }
                    d.members = g
                        .members
                        .iter()
                        .map(|m| {
                            let mut dm = DescribedGroupMember::default();
                            dm.member_id = sb(m.id.clone());
                            if version >= 4 {
                                dm.group_instance_id = m.instance_id.clone().map(sb);
                            }
                            dm.client_id = sb(m.client_id.clone());
                            dm.client_host = sb(m.client_host.clone());
                            if stable {
                                dm.member_metadata = m.metadata(&protocol);
                                dm.member_assignment = m.assignment.clone();
                            }
                            dm
                        })
                        .collect();
                } else if version >= 6 {
                    d.error_code = err(ResponseError::GroupIdNotFound);
                    d.error_message = Some(sb(format!("Group {} not found.", id.0)));
                }
                d.group_id = id;
                d
            })
            .collect();
        resp
    }

    /// ListGroups (v0-v5; v4+ filters by state, v5+ by type).
    pub fn list_groups(&self, req: ListGroupsRequest, version: i16) -> ListGroupsResponse {
        let st = self.shared.lock();
        let mut resp = ListGroupsResponse::default();
        if st.closed {
            resp.error_code = err(ResponseError::CoordinatorNotAvailable);
            return resp;
        }
        let states: Vec<String> = if version >= 4 {
            req.states_filter.iter().map(|s| s.to_lowercase()).collect()
        } else {
            Vec::new()
        };
        let classic_wanted = version < 5
            || req.types_filter.is_empty()
            || req.types_filter.iter().any(|t| t.eq_ignore_ascii_case("classic"));
        if !classic_wanted {
            return resp;
        }
        let mut groups: Vec<&Group> = st
            .groups
            .values()
            .filter(|g| states.is_empty() || states.contains(&g.state.name().to_lowercase()))
            .collect();
        groups.sort_by(|a, b| a.id.cmp(&b.id));
        resp.groups = groups
            .into_iter()
            .map(|g| {
                let mut l = ListedGroup::default();
                l.group_id = GroupId(sb(g.id.clone()));
                l.protocol_type = sb(g.protocol_type.clone().unwrap_or_default());
                if version >= 4 {
                    l.group_state = sb(g.state.name());
                }
                if version >= 5 {
                    l.group_type = sb("classic");
                }
                l
            })
            .collect();
        resp
    }

    /// DeleteGroups (v0-v2): deletes Empty groups and, durably, their
    /// offsets. Groups with members get NON_EMPTY_GROUP.
    pub async fn delete_groups(&self, req: DeleteGroupsRequest, _version: i16) -> DeleteGroupsResponse {
        let gate = self.shared.gate.read().await;
        let mut results: Vec<(GroupId, Option<ResponseError>)> = Vec::new();
        let pending = {
            let mut guard = self.shared.lock();
            let st = &mut *guard;
            let mut deleting = Vec::new();
            for id in req.groups_names {
                let name = id.0.to_string();
                let error = if st.closed || st.log.is_none() {
                    Some(ResponseError::CoordinatorNotAvailable)
                } else {
                    match st.groups.get(&name).map(|g| g.state) {
                        None => Some(ResponseError::GroupIdNotFound),
                        Some(state) if state != GroupState::Empty => Some(ResponseError::NonEmptyGroup),
                        Some(_) => {
                            st.groups.remove(&name);
                            if st.offsets.has_group(&name) || st.offsets.has_inflight() {
                                deleting.push(Entry::DeleteGroup { group: name.clone() });
                            }
                            tracing::info!(group = %name, "group deleted");
                            None
                        }
                    }
                };
                results.push((id, error));
            }
            if deleting.is_empty() {
                None
            } else {
                let log = st.log.as_ref().expect("checked above");
                let seq = st.offsets.begin();
                let batch = offsets::encode_batch(&deleting, offsets::now_ms());
                Some((seq, deleting, self.shared.pool.append(log, batch)))
            }
        };
        if let Some((seq, entries, append)) = pending {
            let outcome = append.await;
            let mut st = self.shared.lock();
            match outcome {
                Ok(_) => st.apply(seq, entries),
                Err(e) => {
                    tracing::warn!(error = %e, "writing group deletions failed");
                    for entry in entries {
                        let Entry::DeleteGroup { group } = entry else {
                            continue;
                        };
                        if st.offsets.has_group(&group) && !st.groups.contains_key(&group) {
                            st.groups.insert(group.clone(), Group::new(group.clone()));
                        }
                        for (id, error) in results.iter_mut() {
                            if id.0.as_str() == group {
                                *error = Some(kafka_code(Failure::OffsetLog(&e)));
                            }
                        }
                    }
                }
            }
            st.offsets.finish(seq);
            self.maybe_compact(&mut st);
        }
        drop(gate);
        let mut resp = DeleteGroupsResponse::default();
        resp.results = results
            .into_iter()
            .map(|(id, error)| {
                let mut r = DeletableGroupResult::default();
                r.group_id = id;
                r.error_code = error.map_or(0, err);
                r
            })
            .collect();
        resp
    }

    /// Drops every group's committed offsets of a deleted topic (durably).
    pub async fn delete_topic_offsets(&self, topic: &str) {
        let gate = self.shared.gate.read().await;
        let pending = {
            let mut guard = self.shared.lock();
            let st = &mut *guard;
            match &st.log {
                Some(log) if !st.closed && (st.offsets.has_topic(topic) || st.offsets.has_inflight()) => {
                    let entries = vec![Entry::DeleteTopic {
                        topic: topic.to_string(),
                    }];
                    let seq = st.offsets.begin();
                    let append = self
                        .shared
                        .pool
                        .append(log, offsets::encode_batch(&entries, offsets::now_ms()));
                    Some((seq, entries, append))
                }
                _ => None,
            }
        };
        if let Some((seq, entries, append)) = pending {
            let outcome = append.await;
            let mut st = self.shared.lock();
            match outcome {
                Ok(_) => {
                    st.apply(seq, entries);
                    st.gc_all();
                }
                Err(e) => tracing::warn!(topic, error = %e, "deleting the offsets of a deleted topic failed"),
            }
            st.offsets.finish(seq);
            self.maybe_compact(&mut st);
        }
        drop(gate);
    }

    /// Counters of the offsets log.
    pub fn offset_log_stats(&self) -> OffsetLogStats {
        let st = self.shared.lock();
        OffsetLogStats {
            log_entries: st.offsets.log_entries,
            live_offsets: st.offsets.live,
            log_bytes: st.log.as_ref().map_or(0, Partition::size_bytes),
            compactions: st.compactions,
        }
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

/// Committed offsets per topic, per partition (None = no commit).
type Fetched<'a> = Vec<(StrBytes, Vec<(i32, Option<&'a Committed>)>)>;

/// Kafka's OffsetCommit membership checks.
fn validate_commit(
    group: Option<&Group>,
    generation: i32,
    member_id: &str,
    instance_id: Option<&str>,
) -> Option<ResponseError> {
    let Some(group) = group else {
        // No group: a standalone commit is fine, a member commit is stale.
        return (generation >= 0).then_some(ResponseError::IllegalGeneration);
    };
    if generation >= 0 || !member_id.is_empty() || instance_id.is_some() {
        if let Err(e) = group.validate_member(member_id, instance_id) {
            return Some(e);
        }
        if generation != group.generation {
            return Some(ResponseError::IllegalGeneration);
        }
    } else if group.state != GroupState::Empty {
        // Only members commit to a group that has members.
        return Some(ResponseError::UnknownMemberId);
    }
    (group.state == GroupState::CompletingRebalance).then_some(ResponseError::RebalanceInProgress)
}

/// The committed offsets asked for: per topic, per partition (None = no
/// commit). `asked` None means every committed partition.
fn fetch<'a>(store: &'a OffsetStore, group: &str, asked: Option<Vec<(StrBytes, Vec<i32>)>>) -> Fetched<'a> {
    match asked {
        Some(topics) => topics
            .into_iter()
            .map(|(name, partitions)| {
                let found = partitions
                    .into_iter()
                    .map(|p| (p, store.get(group, &name, p)))
                    .collect();
                (name, found)
            })
            .collect(),
        None => {
            let mut out: Fetched<'_> = Vec::new();
            for ((topic, partition), c) in store.group(group).into_iter().flatten() {
                match out.last_mut() {
                    Some((name, partitions)) if name.as_str() == topic => {
                        partitions.push((*partition, Some(c)))
                    }
                    _ => out.push((sb(topic.clone()), vec![(*partition, Some(c))])),
                }
            }
            out
        }
    }
}

fn join_response(o: JoinOutcome, version: i16) -> JoinGroupResponse {
    let mut r = JoinGroupResponse::default();
    r.error_code = o.error;
    r.generation_id = o.generation;
    if version >= 7 {
        r.protocol_type = o.protocol_type.map(sb);
        r.protocol_name = o.protocol_name.map(sb);
    } else {
        r.protocol_type = None;
        r.protocol_name = Some(sb(o.protocol_name.unwrap_or_default()));
    }
    r.leader = sb(o.leader);
    r.skip_assignment = version >= 9 && o.skip_assignment;
    r.member_id = sb(o.member_id);
    r.members = o
        .members
        .into_iter()
        .map(|(id, instance, metadata)| {
            let mut m = JoinGroupResponseMember::default();
            m.member_id = sb(id);
            m.group_instance_id = instance.filter(|_| version >= 5).map(sb);
            m.metadata = metadata;
            m
        })
        .collect();
    r
}

/// Rewrites the offsets log in the background once it is mostly dead
/// entries. Appends wait (on the gate) while it runs.
async fn compact_online(shared: Arc<Shared>) {
    let gate = shared.gate.write().await;
    let job = {
        let st = shared.lock();
        match &st.log {
            Some(log) if !st.closed => Some((st.offsets.live_entries(), log.clone())),
            _ => None,
        }
    };
    let Some((entries, log)) = job else {
        shared.lock().compacting = false;
        return;
    };
    let dir = shared.config.offsets_dir.clone();
    let config = shared.log_config();
    let live = entries.len() as u64;
    tracing::info!(dir = %dir.display(), live, "compacting the offsets log");
    let result = tokio::task::spawn_blocking(move || {
        match offsets::compact_dir(&dir, config.clone(), &entries, &log) {
            Ok(fresh) => Ok((fresh, live, true)),
            Err(e) => {
                tracing::warn!(error = %e, "compacting the offsets log failed; reopening it");
                let _ = log.close();
                drop(log);
                reopen(&dir, config).map(|(log, entries)| (log, entries, false))
            }
        }
    })
    .await;
    let mut st = shared.lock();
    st.compacting = false;
    match result {
        Ok(Ok((fresh, entries, compacted))) => {
            if compacted {
                st.compactions += 1;
            } else {
                st.compact_retry_at = entries.saturating_mul(2);
            }
            st.log = Some(fresh);
            st.offsets.log_entries = entries;
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "the offsets log cannot be reopened; offset commits will fail");
            st.log = None;
        }
        Err(e) => {
            tracing::error!(error = %e, "offsets log compaction panicked; offset commits will fail");
            st.log = None;
        }
    }
    drop(st);
    drop(gate);
}
