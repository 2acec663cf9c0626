//! OffsetCommit and OffsetFetch, the membership checks of a commit
//! (`check_commit`), the offsets of deleted topics, and the offsets log's
//! upkeep: expiry of old offsets and compaction in the background (the
//! log's format is in `offsets.rs`).

use std::sync::{Arc, Weak};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use strait_spool::Partition;
use tokio::time::Instant;

use super::offsets::{self, Committed, Entry, OffsetStore};
use super::state::Group;
use super::{
    err, reopen, sb, GroupCoordinator, GroupOffsets, GroupState, GroupStats, OffsetLogStats, Shared, State,
};
use crate::error::{kafka_code, Failure};

/// Every `offsets_retention_check_interval`, deletes expired offsets.
pub(super) async fn expirer(shared: Weak<Shared>) {
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

impl GroupCoordinator {
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

    pub(super) fn maybe_compact(&self, st: &mut State) {
        maybe_compact(&self.shared, st);
    }

    /// Deletes the offsets that have expired at `now_ms` (see
    /// [`GroupConfig::offsets_retention`]); returns the groups they were
    /// of. A background task calls this every
    /// [`GroupConfig::offsets_retention_check_interval`].
    ///
    /// [`GroupConfig::offsets_retention`]: super::GroupConfig::offsets_retention
    /// [`GroupConfig::offsets_retention_check_interval`]: super::GroupConfig::offsets_retention_check_interval
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

    /// Rebalances so far.
    pub fn stats(&self) -> GroupStats {
        let st = self.shared.lock();
        let live: u64 = st.groups.values().map(|g| g.generation.max(0) as u64).sum();
        GroupStats {
            rebalances: st.retired_generations + live,
        }
    }

    /// The groups `wanted` names, in id order: state, members and
    /// committed offsets.
    pub fn group_offsets(&self, wanted: impl Fn(&str) -> bool) -> Vec<GroupOffsets> {
        let st = self.shared.lock();
        let mut groups: Vec<GroupOffsets> = st
            .groups
            .values()
            .filter(|g| wanted(&g.id))
            .map(|g| GroupOffsets {
                group: g.id.clone(),
                state: g.state.name(),
                members: g.members.len(),
                committed: st.offsets.group(&g.id).map_or_else(Vec::new, |offsets| {
                    offsets
                        .iter()
                        .map(|((topic, partition), c)| (topic.clone(), *partition, c.offset))
                        .collect()
                }),
            })
            .collect();
        groups.sort_by(|a, b| a.group.cmp(&b.group));
        groups
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
