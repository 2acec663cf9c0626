//! JoinGroup, SyncGroup, Heartbeat and LeaveGroup: the members of a group
//! and its rebalances (the state machine is in `state.rs`).

use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::time::Instant;

use super::state::{Group, JoinInput, JoinOutcome, Reply, SyncOutcome};
use super::{err, sb, ClientInfo, GroupCoordinator};

fn millis(ms: i32) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

impl GroupCoordinator {
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
