//! One group's membership state machine (Kafka's classic protocol), and the
//! timers that drive it. Everything here runs under the coordinator's lock
//! and never waits: a JoinGroup or SyncGroup that has to wait gets a
//! `oneshot` receiver, completed later by another request or by a timer.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

const NONE: i16 = 0;

pub(crate) fn code(e: ResponseError) -> i16 {
    e.code()
}

/// A group's state, as Kafka names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    /// No members (the group may still have committed offsets).
    Empty,
    /// Waiting for members to (re)join.
    PreparingRebalance,
    /// Joined; waiting for the leader's assignment.
    CompletingRebalance,
    /// Assignment distributed.
    Stable,
    /// Does not exist.
    Dead,
}

impl GroupState {
    /// The name Kafka uses on the wire (DescribeGroups, ListGroups).
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// What a JoinGroup gets back.
#[derive(Debug, Clone)]
pub(crate) struct JoinOutcome {
    pub error: i16,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// (member id, group instance id, metadata): only for the leader.
    pub members: Vec<(String, Option<String>, Bytes)>,
    pub skip_assignment: bool,
}

impl JoinOutcome {
    pub fn error(member_id: &str, error: ResponseError) -> Self {
        JoinOutcome {
            error: code(error),
            generation: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
            skip_assignment: false,
        }
    }
}

/// What a SyncGroup gets back.
#[derive(Debug, Clone)]
pub(crate) struct SyncOutcome {
    pub error: i16,
    pub assignment: Bytes,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
}

impl SyncOutcome {
    pub fn error(error: ResponseError) -> Self {
        SyncOutcome {
            error: code(error),
            assignment: Bytes::new(),
            protocol_type: None,
            protocol_name: None,
        }
    }
}

/// An answer now, or a receiver for one later.
#[derive(Debug)]
pub(crate) enum Reply<T> {
    Now(T),
    Wait(oneshot::Receiver<T>),
}

/// A JoinGroup, decoded and validated for shape.
#[derive(Debug, Clone)]
pub(crate) struct JoinInput {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+ (KIP-394).
    pub require_known_member_id: bool,
    /// JoinGroup v9+ (KIP-814).
    pub supports_skip_assignment: bool,
}

#[derive(Debug)]
pub(crate) struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    join_waiter: Option<oneshot::Sender<JoinOutcome>>,
    sync_waiter: Option<oneshot::Sender<SyncOutcome>>,
    /// Joined but has not yet completed a join round (KIP-394): expires
    /// after `new_member_join_timeout` even while waiting.
    is_new: bool,
    deadline: Instant,
    /// Instant of the live session timer entry, if any.
    timer_at: Option<Instant>,
}

impl Member {
    pub fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|(name, _)| name == protocol)
    }

    /// A member waiting in a join or sync round is not expected to
    /// heartbeat (unless it is new, see `is_new`).
    fn exempt_from_session(&self) -> bool {
        (self.join_waiter.is_some() && !self.is_new) || self.sync_waiter.is_some()
    }

    fn answer_join(&mut self, outcome: JoinOutcome) {
        if let Some(tx) = self.join_waiter.take() {
            let _ = tx.send(outcome);
        }
    }

    fn answer_sync(&mut self, outcome: SyncOutcome) {
        if let Some(tx) = self.sync_waiter.take() {
            let _ = tx.send(outcome);
        }
    }
}

/// What a timer entry is for. Entries are checked against the current
/// state when they fire, so stale ones are harmless.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimerKey {
    Session { group: String, member: String },
    Pending { group: String, member: String },
    Join { group: String, epoch: u64 },
    Sync { group: String, epoch: u64 },
}

impl TimerKey {
    pub fn group(&self) -> &str {
        match self {
            TimerKey::Session { group, .. }
            | TimerKey::Pending { group, .. }
            | TimerKey::Join { group, .. }
            | TimerKey::Sync { group, .. } => group,
        }
    }
}

/// The coordinator's timer queue and the settings the state machine needs.
#[derive(Debug)]
pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<(Instant, u64, TimerKey)>>,
    counter: u64,
    wake: Arc<Notify>,
    pub initial_rebalance_delay: Duration,
    pub new_member_join_timeout: Duration,
}

impl Timers {
    pub fn new(
        wake: Arc<Notify>,
        initial_rebalance_delay: Duration,
        new_member_join_timeout: Duration,
    ) -> Self {
        Timers {
            heap: BinaryHeap::new(),
            counter: 0,
            wake,
            initial_rebalance_delay,
            new_member_join_timeout,
        }
    }

    fn push(&mut self, at: Instant, key: TimerKey) {
        let earliest = self.heap.peek().is_none_or(|Reverse((first, _, _))| at < *first);
        self.counter += 1;
        self.heap.push(Reverse((at, self.counter, key)));
        if earliest {
            self.wake.notify_one();
        }
    }

    pub fn next_id(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    /// The next entry due at `now`, if any.
    pub fn pop_due(&mut self, now: Instant) -> Option<(Instant, TimerKey)> {
        if self.heap.peek().is_some_and(|Reverse((at, _, _))| *at <= now) {
            self.heap.pop().map(|Reverse((at, _, key))| (at, key))
        } else {
            None
        }
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// A fresh member id: `{prefix}-{uuid-shaped random hex}`.
    pub fn member_id(&mut self, prefix: &str) -> String {
        use std::hash::{BuildHasher, Hasher};
        let n = self.next_id();
        let state = std::collections::hash_map::RandomState::new();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let mut h = state.build_hasher();
        h.write_u64(n);
        h.write_u128(nanos);
        let a = h.finish();
        let mut h = state.build_hasher();
        h.write_u64(a);
        h.write_u64(n.rotate_left(32));
        let b = h.finish();
        format!(
            "{prefix}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            (a >> 32) as u32,
            (a >> 16) as u16,
            a as u16,
            (b >> 48) as u16,
            b & 0xffff_ffff_ffff
        )
    }
}

#[derive(Debug)]
struct Rebalance {
    epoch: u64,
    /// Set while the group's first join round waits for
    /// `initial_rebalance_delay` (Kafka's InitialDelayedJoin).
    initial: Option<InitialDelay>,
}

#[derive(Debug)]
struct InitialDelay {
    remaining: Duration,
    new_member_added: bool,
}

/// One consumer group.
#[derive(Debug)]
pub(crate) struct Group {
    pub id: String,
    pub state: GroupState,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    /// In join order.
    pub members: Vec<Member>,
    static_members: HashMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, and when they expire.
    pub pending_members: HashMap<String, Instant>,
    pending_sync: HashSet<String>,
    rebalance: Option<Rebalance>,
    sync_epoch: u64,
}

impl Group {
    pub fn new(id: String) -> Self {
        Group {
            id,
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: Vec::new(),
            static_members: HashMap::new(),
            pending_members: HashMap::new(),
            pending_sync: HashSet::new(),
            rebalance: None,
            sync_epoch: 0,
        }
    }

    /// Whether the group holds nothing but (maybe) offsets.
    pub fn is_idle(&self) -> bool {
        self.state == GroupState::Empty && self.members.is_empty() && self.pending_members.is_empty()
    }

    fn index(&self, member_id: &str) -> Option<usize> {
        self.members.iter().position(|m| m.id == member_id)
    }

    pub fn has(&self, member_id: &str) -> bool {
        self.index(member_id).is_some()
    }

    fn is_leader(&self, member_id: &str) -> bool {
        self.leader.as_deref() == Some(member_id)
    }

    /// A static member whose instance id now belongs to another member id.
    fn is_fenced(&self, member_id: &str, instance_id: Option<&str>) -> bool {
        instance_id
            .and_then(|i| self.static_members.get(i))
            .is_some_and(|current| current != member_id)
    }

    /// Checks the member of a Heartbeat / SyncGroup / OffsetCommit.
    pub fn validate_member(&self, member_id: &str, instance_id: Option<&str>) -> Result<(), ResponseError> {
        if self.is_fenced(member_id, instance_id) {
            Err(ResponseError::FencedInstanceId)
        } else if !self.has(member_id) {
            Err(ResponseError::UnknownMemberId)
        } else {
            Ok(())
        }
    }

    fn touch(&mut self, idx: usize, timers: &mut Timers, now: Instant) {
        let m = &mut self.members[idx];
        let timeout = if m.is_new && m.join_waiter.is_some() {
            timers.new_member_join_timeout
        } else {
            m.session_timeout
        };
        m.deadline = now + timeout;
        if m.timer_at.is_none_or(|at| m.deadline < at) {
            m.timer_at = Some(m.deadline);
            timers.push(
                m.deadline,
                TimerKey::Session {
                    group: self.id.clone(),
                    member: m.id.clone(),
                },
            );
        }
    }

    /// Resets a member's session timer (any heartbeat, join, sync or commit).
    pub fn touch_member(&mut self, member_id: &str, timers: &mut Timers, now: Instant) {
        if let Some(idx) = self.index(member_id) {
            self.touch(idx, timers, now);
        }
    }

    /// Whether a member with these protocols could join.
    fn supports_protocols(
        &self,
        member_id: Option<&str>,
        protocol_type: &str,
        protocols: &[(String, Bytes)],
    ) -> bool {
        if protocol_type.is_empty() || protocols.is_empty() {
            return false;
        }
        let mut others = self
            .members
            .iter()
            .filter(|m| Some(m.id.as_str()) != member_id)
            .peekable();
        if others.peek().is_none() {
            return true;
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return false;
        }
        let others: Vec<&Member> = others.collect();
        protocols
            .iter()
            .any(|(name, _)| others.iter().all(|m| m.supports(name)))
    }

    /// The protocol every member supports that most members prefer (ties go
    /// to the first member's preference order).
    pub fn select_protocol(&self) -> Option<String> {
        let first = self.members.first()?;
        let candidates: Vec<&str> = first
            .protocols
            .iter()
            .map(|(name, _)| name.as_str())
            .filter(|name| self.members.iter().all(|m| m.supports(name)))
            .collect();
        let mut votes = vec![0usize; candidates.len()];
        for m in &self.members {
            if let Some(i) = m
                .protocols
                .iter()
                .find_map(|(name, _)| candidates.iter().position(|c| c == name))
            {
                votes[i] += 1;
            }
        }
        let best = votes.iter().enumerate().max_by_key(|&(i, v)| (*v, Reverse(i)))?.0;
        Some(candidates[best].to_string())
    }

    fn all_member_metadata(&self) -> Vec<(String, Option<String>, Bytes)> {
        let protocol = self.protocol_name.clone().unwrap_or_default();
        self.members
            .iter()
            .map(|m| (m.id.clone(), m.instance_id.clone(), m.metadata(&protocol)))
            .collect()
    }

    fn current_outcome(&self, member_id: &str, with_members: bool) -> JoinOutcome {
        JoinOutcome {
            error: NONE,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            member_id: member_id.to_string(),
            members: if with_members {
                self.all_member_metadata()
            } else {
                Vec::new()
            },
            skip_assignment: false,
        }
    }

    // ---- JoinGroup -------------------------------------------------------

    pub fn join(&mut self, input: JoinInput, timers: &mut Timers, now: Instant) -> Reply<JoinOutcome> {
        let reply = if input.member_id.is_empty() {
            self.join_new(input, timers, now)
        } else {
            self.join_known(input, timers, now)
        };
        if self.state == GroupState::PreparingRebalance {
            self.maybe_complete_join(timers, now);
        }
        reply
    }

    fn join_new(&mut self, input: JoinInput, timers: &mut Timers, now: Instant) -> Reply<JoinOutcome> {
        // A static member being replaced is not checked against itself.
        let replaced = input
            .instance_id
            .as_ref()
            .and_then(|i| self.static_members.get(i))
            .cloned();
        if !self.supports_protocols(replaced.as_deref(), &input.protocol_type, &input.protocols) {
            return Reply::Now(JoinOutcome::error("", ResponseError::InconsistentGroupProtocol));
        }
        let prefix = input
            .instance_id
            .as_deref()
            .unwrap_or(&input.client_id)
            .to_string();
        let new_id = timers.member_id(&prefix);
        if let Some(instance) = &input.instance_id {
            if let Some(old_id) = self.static_members.get(instance).cloned() {
                if self.has(&old_id) {
                    return self.static_rejoin(old_id, new_id, input, timers, now);
                }
                self.static_members.remove(instance);
            }
        } else if input.require_known_member_id {
            let deadline = now + input.session_timeout;
            self.pending_members.insert(new_id.clone(), deadline);
            timers.push(
                deadline,
                TimerKey::Pending {
                    group: self.id.clone(),
                    member: new_id.clone(),
                },
            );
            return Reply::Now(JoinOutcome::error(&new_id, ResponseError::MemberIdRequired));
        }
        self.add_member_and_rebalance(new_id, input, timers, now)
    }

    fn join_known(&mut self, input: JoinInput, timers: &mut Timers, now: Instant) -> Reply<JoinOutcome> {
        let member_id = input.member_id.clone();
        if !self.supports_protocols(Some(&member_id), &input.protocol_type, &input.protocols) {
            return Reply::Now(JoinOutcome::error(
                &member_id,
                ResponseError::InconsistentGroupProtocol,
            ));
        }
        if self.pending_members.remove(&member_id).is_some() {
            if let Some(instance) = &input.instance_id {
                if self.static_members.contains_key(instance) {
                    return Reply::Now(JoinOutcome::error(&member_id, ResponseError::FencedInstanceId));
                }
            }
            return self.add_member_and_rebalance(member_id, input, timers, now);
        }
        if self.is_fenced(&member_id, input.instance_id.as_deref()) {
            return Reply::Now(JoinOutcome::error(&member_id, ResponseError::FencedInstanceId));
        }
        let instance_unknown = input
            .instance_id
            .as_ref()
            .is_some_and(|i| !self.static_members.contains_key(i));
        let Some(idx) = self.index(&member_id).filter(|_| !instance_unknown) else {
            return Reply::Now(JoinOutcome::error(&member_id, ResponseError::UnknownMemberId));
        };
        if self.members.len() == 1 {
            self.protocol_type = Some(input.protocol_type.clone());
        }
        let matches = self.members[idx].protocols == input.protocols;
        match self.state {
            GroupState::PreparingRebalance => self.update_member_and_rebalance(idx, input, timers, now),
            GroupState::CompletingRebalance if matches => {
                // A retry of the join this round already answered.
                self.touch(idx, timers, now);
                let leader = self.is_leader(&member_id);
                Reply::Now(self.current_outcome(&member_id, leader))
            }
            GroupState::Stable if matches && !self.is_leader(&member_id) => {
                self.touch(idx, timers, now);
                Reply::Now(self.current_outcome(&member_id, false))
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                // Changed metadata, or the leader asking for a rebalance.
                self.update_member_and_rebalance(idx, input, timers, now)
            }
            GroupState::Empty | GroupState::Dead => {
                Reply::Now(JoinOutcome::error(&member_id, ResponseError::UnknownMemberId))
            }
        }
    }

    fn add_member_and_rebalance(
        &mut self,
        member_id: String,
        input: JoinInput,
        timers: &mut Timers,
        now: Instant,
    ) -> Reply<JoinOutcome> {
        let (tx, rx) = oneshot::channel();
        if self.members.is_empty() {
            self.protocol_type = Some(input.protocol_type.clone());
        }
        if self.state == GroupState::PreparingRebalance && self.generation == 0 {
            if let Some(initial) = self.rebalance.as_mut().and_then(|r| r.initial.as_mut()) {
                initial.new_member_added = true;
            }
        }
        if let Some(instance) = &input.instance_id {
            self.static_members.insert(instance.clone(), member_id.clone());
        }
        if self.leader.is_none() {
            self.leader = Some(member_id.clone());
        }
        tracing::debug!(group = %self.id, member = %member_id, "member joins");
        self.members.push(Member {
            id: member_id,
            instance_id: input.instance_id,
            client_id: input.client_id,
            client_host: input.client_host,
            session_timeout: input.session_timeout,
            rebalance_timeout: input.rebalance_timeout,
            protocols: input.protocols,
            assignment: Bytes::new(),
            join_waiter: Some(tx),
            sync_waiter: None,
            is_new: true,
            deadline: now,
            timer_at: None,
        });
        let idx = self.members.len() - 1;
        self.touch(idx, timers, now);
        self.maybe_prepare_rebalance(timers, now);
        Reply::Wait(rx)
    }

    fn update_member_and_rebalance(
        &mut self,
        idx: usize,
        input: JoinInput,
        timers: &mut Timers,
        now: Instant,
    ) -> Reply<JoinOutcome> {
        let (tx, rx) = oneshot::channel();
        let m = &mut self.members[idx];
        m.answer_join(JoinOutcome::error(&m.id, ResponseError::RebalanceInProgress));
        m.protocols = input.protocols;
        m.session_timeout = input.session_timeout;
        m.rebalance_timeout = input.rebalance_timeout;
        m.join_waiter = Some(tx);
        self.touch(idx, timers, now);
        self.maybe_prepare_rebalance(timers, now);
        Reply::Wait(rx)
    }

    /// A static member rejoining with an unknown member id takes over its
    /// instance's member (KIP-345): the old id is fenced, and when nothing
    /// that matters changed the group does not rebalance.
    fn static_rejoin(
        &mut self,
        old_id: String,
        new_id: String,
        input: JoinInput,
        timers: &mut Timers,
        now: Instant,
    ) -> Reply<JoinOutcome> {
        let current_leader = self.leader.clone().unwrap_or_default();
        let idx = self.index(&old_id).expect("static member is a member");
        let (tx, rx) = oneshot::channel();
        {
            let m = &mut self.members[idx];
            m.answer_join(JoinOutcome::error(&old_id, ResponseError::FencedInstanceId));
            m.answer_sync(SyncOutcome::error(ResponseError::FencedInstanceId));
            m.id = new_id.clone();
            m.timer_at = None;
            m.client_id = input.client_id;
            m.client_host = input.client_host;
            m.protocols = input.protocols;
            m.session_timeout = input.session_timeout;
            m.rebalance_timeout = input.rebalance_timeout;
            m.join_waiter = Some(tx);
        }
        if self.leader.as_deref() == Some(old_id.as_str()) {
            self.leader = Some(new_id.clone());
        }
        if let Some(instance) = input.instance_id {
            tracing::info!(group = %self.id, instance = %instance, old = %old_id, new = %new_id,
                "static member rejoined with a new member id");
            self.static_members.insert(instance, new_id.clone());
        }
        if self.pending_sync.remove(&old_id) {
            self.pending_sync.insert(new_id.clone());
        }
        self.touch(idx, timers, now);
        match self.state {
            GroupState::Stable => {
                if self.select_protocol() == self.protocol_name {
                    let skip = input.supports_skip_assignment && self.is_leader(&new_id);
                    let mut outcome = self.current_outcome(&new_id, skip);
                    outcome.skip_assignment = skip;
                    if !skip {
                        // The old leader id keeps a rejoined leader from
                        // computing an assignment a stable group would
                        // not distribute.
                        outcome.leader = current_leader;
                    }
                    self.members[idx].answer_join(outcome);
                    self.touch(idx, timers, now);
                } else {
                    self.prepare_rebalance(timers, now);
                }
            }
            GroupState::CompletingRebalance => self.prepare_rebalance(timers, now),
            GroupState::PreparingRebalance | GroupState::Empty | GroupState::Dead => {}
        }
        Reply::Wait(rx)
    }

    fn maybe_prepare_rebalance(&mut self, timers: &mut Timers, now: Instant) {
        if matches!(
            self.state,
            GroupState::Stable | GroupState::CompletingRebalance | GroupState::Empty
        ) {
            self.prepare_rebalance(timers, now);
        }
    }

    fn rebalance_timeout(&self) -> Duration {
        self.members
            .iter()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or_default()
    }

    fn prepare_rebalance(&mut self, timers: &mut Timers, now: Instant) {
        if self.state == GroupState::CompletingRebalance {
            for idx in 0..self.members.len() {
                let m = &mut self.members[idx];
                m.assignment = Bytes::new();
                if m.sync_waiter.is_some() {
                    m.answer_sync(SyncOutcome::error(ResponseError::RebalanceInProgress));
                    self.touch(idx, timers, now);
                }
            }
        }
        self.pending_sync.clear();
        let timeout = self.rebalance_timeout();
        let epoch = timers.next_id();
        let (delay, initial) = if self.state == GroupState::Empty {
            let delay = timers.initial_rebalance_delay;
            let initial = InitialDelay {
                remaining: timeout.saturating_sub(delay),
                new_member_added: false,
            };
            (delay, Some(initial))
        } else {
            (timeout, None)
        };
        tracing::info!(group = %self.id, generation = self.generation, from = self.state.name(),
            "preparing to rebalance");
        let delayed = initial.is_some();
        self.rebalance = Some(Rebalance { epoch, initial });
        self.state = GroupState::PreparingRebalance;
        timers.push(
            now + delay,
            TimerKey::Join {
                group: self.id.clone(),
                epoch,
            },
        );
        if !delayed {
            self.maybe_complete_join(timers, now);
        }
    }

    fn maybe_complete_join(&mut self, timers: &mut Timers, now: Instant) {
        let ready = self.state == GroupState::PreparingRebalance
            && self.rebalance.as_ref().is_some_and(|r| r.initial.is_none())
            && self.pending_members.is_empty()
            && self.members.iter().all(|m| m.join_waiter.is_some());
        if ready {
            self.complete_join(timers, now);
        }
    }

    fn complete_join(&mut self, timers: &mut Timers, now: Instant) {
        let gone: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.join_waiter.is_none())
            .map(|m| m.id.clone())
            .collect();
        for id in gone {
            tracing::info!(group = %self.id, member = %id, "member did not rejoin in time; removed");
            self.remove_member_raw(&id);
        }
        self.rebalance = None;
        self.generation += 1;
        if self.members.is_empty() {
            self.protocol_name = None;
            self.state = GroupState::Empty;
            tracing::info!(group = %self.id, generation = self.generation, "group is empty");
            return;
        }
        if !self.leader.as_ref().is_some_and(|l| self.has(l)) {
            self.leader = self.members.first().map(|m| m.id.clone());
        }
        self.protocol_name = self.select_protocol();
        self.state = GroupState::CompletingRebalance;
        tracing::info!(group = %self.id, generation = self.generation, members = self.members.len(),
            protocol = self.protocol_name.as_deref().unwrap_or(""), "join round complete");
        let all = self.all_member_metadata();
        for idx in 0..self.members.len() {
            let id = self.members[idx].id.clone();
            let mut outcome = self.current_outcome(&id, false);
            if self.is_leader(&id) {
                outcome.members = all.clone();
            }
            let m = &mut self.members[idx];
            m.answer_join(outcome);
            m.is_new = false;
            self.touch(idx, timers, now);
        }
        self.pending_sync = self.members.iter().map(|m| m.id.clone()).collect();
        self.sync_epoch = timers.next_id();
        timers.push(
            now + self.rebalance_timeout(),
            TimerKey::Sync {
                group: self.id.clone(),
                epoch: self.sync_epoch,
            },
        );
    }

    /// Removes a member without touching the group state. Its waiting
    /// requests get UNKNOWN_MEMBER_ID.
    fn remove_member_raw(&mut self, member_id: &str) -> Option<Member> {
        let idx = self.index(member_id)?;
        let mut m = self.members.remove(idx);
        m.answer_join(JoinOutcome::error(member_id, ResponseError::UnknownMemberId));
        m.answer_sync(SyncOutcome::error(ResponseError::UnknownMemberId));
        if let Some(instance) = &m.instance_id {
            if self
                .static_members
                .get(instance)
                .is_some_and(|id| id == member_id)
            {
                self.static_members.remove(instance);
            }
        }
        self.pending_sync.remove(member_id);
        if self.is_leader(member_id) {
            self.leader = self
                .members
                .iter()
                .find(|m| m.join_waiter.is_some())
                .or(self.members.first())
                .map(|m| m.id.clone());
        }
        Some(m)
    }

    /// Removes a member and rebalances what is left.
    pub fn remove_member(&mut self, member_id: &str, timers: &mut Timers, now: Instant) {
        if self.remove_member_raw(member_id).is_none() {
            return;
        }
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => self.prepare_rebalance(timers, now),
            GroupState::PreparingRebalance => self.maybe_complete_join(timers, now),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    // ---- SyncGroup, Heartbeat, LeaveGroup --------------------------------

    #[allow(clippy::too_many_arguments)]
    pub fn sync(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Bytes)>,
        timers: &mut Timers,
        now: Instant,
    ) -> Reply<SyncOutcome> {
        if let Err(e) = self.validate_member(member_id, instance_id) {
            return Reply::Now(SyncOutcome::error(e));
        }
        if generation != self.generation {
            return Reply::Now(SyncOutcome::error(ResponseError::IllegalGeneration));
        }
        let type_mismatch = protocol_type.is_some_and(|t| self.protocol_type.as_deref() != Some(t));
        let name_mismatch = protocol_name.is_some_and(|n| self.protocol_name.as_deref() != Some(n));
        if type_mismatch || name_mismatch {
            return Reply::Now(SyncOutcome::error(ResponseError::InconsistentGroupProtocol));
        }
        let idx = self.index(member_id).expect("validated member");
        match self.state {
            GroupState::Empty | GroupState::Dead => {
                Reply::Now(SyncOutcome::error(ResponseError::UnknownMemberId))
            }
            GroupState::PreparingRebalance => {
                Reply::Now(SyncOutcome::error(ResponseError::RebalanceInProgress))
            }
            GroupState::CompletingRebalance => {
                let (tx, rx) = oneshot::channel();
                let m = &mut self.members[idx];
                m.answer_sync(SyncOutcome::error(ResponseError::RebalanceInProgress));
                m.sync_waiter = Some(tx);
                self.pending_sync.remove(member_id);
                if self.is_leader(member_id) {
                    let mut by_member: HashMap<String, Bytes> = assignments.into_iter().collect();
                    for m in &mut self.members {
                        m.assignment = by_member.remove(&m.id).unwrap_or_default();
                    }
                    self.state = GroupState::Stable;
                    tracing::info!(group = %self.id, generation = self.generation, "assignment received from the leader; stable");
                    for idx in 0..self.members.len() {
                        if self.members[idx].sync_waiter.is_some() {
                            let outcome = self.sync_ok(idx);
                            self.members[idx].answer_sync(outcome);
                            self.touch(idx, timers, now);
                        }
                    }
                }
                Reply::Wait(rx)
            }
            GroupState::Stable => {
                self.pending_sync.remove(member_id);
                self.touch(idx, timers, now);
                Reply::Now(self.sync_ok(idx))
            }
        }
    }

    fn sync_ok(&self, idx: usize) -> SyncOutcome {
        SyncOutcome {
            error: NONE,
            assignment: self.members[idx].assignment.clone(),
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
        }
    }

    pub fn heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        timers: &mut Timers,
        now: Instant,
    ) -> Result<(), ResponseError> {
        self.validate_member(member_id, instance_id)?;
        if generation != self.generation {
            return Err(ResponseError::IllegalGeneration);
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => Err(ResponseError::UnknownMemberId),
            GroupState::PreparingRebalance => {
                self.touch_member(member_id, timers, now);
                Err(ResponseError::RebalanceInProgress)
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.touch_member(member_id, timers, now);
                Ok(())
            }
        }
    }

    /// One member of a LeaveGroup.
    pub fn leave(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        timers: &mut Timers,
        now: Instant,
    ) -> Result<(), ResponseError> {
        if !member_id.is_empty() && self.is_fenced(member_id, instance_id) {
            return Err(ResponseError::FencedInstanceId);
        }
        if self.pending_members.remove(member_id).is_some() {
            self.maybe_complete_join(timers, now);
            return Ok(());
        }
        let target = match instance_id.and_then(|i| self.static_members.get(i)) {
            Some(id) => id.clone(),
            None if self.has(member_id) => member_id.to_string(),
            None => return Err(ResponseError::UnknownMemberId),
        };
        tracing::info!(group = %self.id, member = %target, "member left");
        self.remove_member(&target, timers, now);
        Ok(())
    }

    // ---- timers ----------------------------------------------------------

    pub fn on_timer(&mut self, at: Instant, key: &TimerKey, timers: &mut Timers, now: Instant) {
        match key {
            TimerKey::Session { member, .. } => {
                let Some(idx) = self.index(member) else { return };
                let m = &mut self.members[idx];
                if m.timer_at != Some(at) {
                    return; // superseded by an earlier entry
                }
                m.timer_at = None;
                if m.exempt_from_session() {
                    return; // rescheduled when it stops waiting
                }
                if now >= m.deadline {
                    tracing::info!(group = %self.id, member = %member, "session expired; removing member");
                    self.remove_member(member, timers, now);
                } else {
                    self.touch_at(idx, timers);
                }
            }
            TimerKey::Pending { member, .. } => {
                if self.pending_members.get(member) == Some(&at) {
                    self.pending_members.remove(member);
                    self.maybe_complete_join(timers, now);
                }
            }
            TimerKey::Join { epoch, .. } => {
                let Some(rebalance) = self.rebalance.as_mut().filter(|r| r.epoch == *epoch) else {
                    return;
                };
                if self.state != GroupState::PreparingRebalance {
                    return;
                }
                if let Some(initial) = rebalance.initial.as_mut() {
                    if initial.new_member_added && !initial.remaining.is_zero() {
                        let delay = timers.initial_rebalance_delay.min(initial.remaining);
                        initial.remaining -= delay;
                        initial.new_member_added = false;
                        timers.push(
                            now + delay,
                            TimerKey::Join {
                                group: self.id.clone(),
                                epoch: *epoch,
                            },
                        );
                        return;
                    }
                }
                self.complete_join(timers, now);
            }
            TimerKey::Sync { epoch, .. } => {
                let waiting = matches!(self.state, GroupState::CompletingRebalance | GroupState::Stable);
                if *epoch != self.sync_epoch || !waiting || self.pending_sync.is_empty() {
                    return;
                }
                let late: Vec<String> = self.pending_sync.drain().collect();
                for id in late {
                    tracing::info!(group = %self.id, member = %id, "member did not sync in time; removed");
                    self.remove_member(&id, timers, now);
                }
            }
        }
    }

    /// Re-arms a member's session timer at its current deadline.
    fn touch_at(&mut self, idx: usize, timers: &mut Timers) {
        let m = &mut self.members[idx];
        m.timer_at = Some(m.deadline);
        timers.push(
            m.deadline,
            TimerKey::Session {
                group: self.id.clone(),
                member: m.id.clone(),
            },
        );
    }

    /// Answers every waiting request (the coordinator is shutting down).
    pub fn fail_waiters(&mut self, error: ResponseError) {
        for m in &mut self.members {
            let id = m.id.clone();
            m.answer_join(JoinOutcome::error(&id, error));
            m.answer_sync(SyncOutcome::error(error));
        }
    }
}
