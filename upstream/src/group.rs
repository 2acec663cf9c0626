//! A member of a group on an upstream cluster, joined with Kafka's classic
//! group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup): how
//! several Strait processes agree on who is alive without a consensus of
//! their own. The caller says what a member tells the group (its protocol
//! type, protocol name and metadata bytes) and how the group's leader
//! turns the members' metadata into each one's assignment; the protocol's
//! round trips, retries and coordinator moves are here.
//!
//! The member speaks on a connection of its own to the coordinator (a
//! JoinGroup is held there for a whole rebalance).

use std::any::Any;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, GroupId, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::{Request, StrBytes};
use kafka_protocol::ResponseError;

use crate::{Cluster, Connection, Throttled, UpstreamError};

/// Timeouts of the membership.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// How long the coordinator waits for a heartbeat before it drops the
    /// member from the group.
    pub session: Duration,
    /// How long a rebalance waits for members to rejoin.
    pub rebalance: Duration,
    /// How often the member heartbeats (and so how soon it learns of a
    /// rebalance).
    pub heartbeat: Duration,
}

impl Timeouts {
    /// For a session of `session` and members that take up to `grace` to
    /// get ready to rejoin: heartbeats every second (a third of the
    /// session when that is shorter), so a member learns of a rebalance
    /// within one; the rebalance waits `grace` and 30 s more.
    pub fn new(session: Duration, grace: Duration) -> Timeouts {
        Timeouts {
            session,
            rebalance: grace + Duration::from_secs(30),
            heartbeat: (session / 3).min(Duration::from_secs(1)),
        }
    }
}

/// A generation of the group as this member joined it: what its commits
/// carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// The generation id.
    pub id: i32,
    /// This member's id.
    pub member: String,
}

/// What a join gave this member.
#[derive(Debug, Clone)]
pub struct Joined {
    /// The generation joined.
    pub generation: Generation,
    /// Whether this member leads the group (it made the assignments).
    pub leader: bool,
    /// The members of the generation (known to the leader only; 0 else).
    pub members: usize,
    /// This member's assignment, as the leader wrote it.
    pub assignment: Bytes,
}

/// What a heartbeat learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beat {
    /// The generation goes on.
    Stable,
    /// The group rebalances (or this member left it): join again.
    Rebalance,
}

/// What the members of a group speak: JoinGroup's protocol type and the
/// one protocol (assignor) name offered.
#[derive(Debug, Clone, Copy)]
pub struct Protocol {
    /// The protocol type (`consumer` for consumer-protocol bytes).
    pub kind: &'static str,
    /// The protocol's name.
    pub name: &'static str,
}

/// One member of a group.
#[derive(Debug)]
pub struct Member {
    cluster: Cluster,
    group: String,
    protocol: Protocol,
    timeouts: Timeouts,
    member_id: String,
    generation: Option<Generation>,
    connection: Option<Connection>,
}

impl Member {
    /// A member of `group` on `cluster`, not yet joined.
    pub fn new(cluster: Cluster, group: String, protocol: Protocol, timeouts: Timeouts) -> Member {
        Member {
            cluster,
            group,
            protocol,
            timeouts,
            member_id: String::new(),
            generation: None,
            connection: None,
        }
    }

    /// The group's id.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// Joins the group telling it `metadata`. When this member leads the
    /// generation, `assign` gets every member's (id, metadata) and returns
    /// each one's (id, assignment).
    pub async fn join(
        &mut self,
        metadata: Bytes,
        assign: impl Fn(&[(String, Bytes)]) -> Vec<(String, Bytes)>,
    ) -> Result<Joined, UpstreamError> {
        self.generation = None;
        loop {
            let connection = self.connection().await?;
            let version = connection.version(ApiKey::JoinGroup)?;
            let request = JoinGroupRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(self.group.clone())))
                .with_session_timeout_ms(millis(self.timeouts.session))
                .with_rebalance_timeout_ms(millis(self.timeouts.rebalance))
                .with_member_id(StrBytes::from_string(self.member_id.clone()))
                .with_protocol_type(StrBytes::from_static_str(self.protocol.kind))
                .with_protocols(vec![JoinGroupRequestProtocol::default()
                    .with_name(StrBytes::from_static_str(self.protocol.name))
                    .with_metadata(metadata.clone())]);
            let answer = self.held(&connection, &request, version).await?;
            match ResponseError::try_from_code(answer.error_code) {
                None => {}
                Some(ResponseError::MemberIdRequired) => {
                    self.member_id = answer.member_id.to_string();
                    continue;
                }
                Some(ResponseError::UnknownMemberId) => {
                    self.member_id.clear();
                    continue;
                }
                Some(ResponseError::RebalanceInProgress | ResponseError::CoordinatorLoadInProgress) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                Some(code) => return Err(self.error("JoinGroup", code)),
            }
            self.member_id = answer.member_id.to_string();
            let generation = Generation {
                id: answer.generation_id,
                member: self.member_id.clone(),
            };
            let leader = answer.leader == answer.member_id;
            let mut assignments = Vec::new();
            if leader {
                let members: Vec<(String, Bytes)> = answer
                    .members
                    .iter()
                    .map(|m| (m.member_id.to_string(), m.metadata.clone()))
                    .collect();
                for (member, assignment) in assign(&members) {
                    assignments.push(
                        SyncGroupRequestAssignment::default()
                            .with_member_id(StrBytes::from_string(member))
                            .with_assignment(assignment),
                    );
                }
            }
            let members = answer.members.len();
            let version = connection.version(ApiKey::SyncGroup)?;
            let mut request = SyncGroupRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(self.group.clone())))
                .with_generation_id(generation.id)
                .with_member_id(StrBytes::from_string(generation.member.clone()))
                .with_assignments(assignments);
            if version >= 5 {
                request = request
                    .with_protocol_type(Some(StrBytes::from_static_str(self.protocol.kind)))
                    .with_protocol_name(Some(StrBytes::from_static_str(self.protocol.name)));
            }
            let answer = self.held(&connection, &request, version).await?;
            match ResponseError::try_from_code(answer.error_code) {
                None => {}
                Some(ResponseError::RebalanceInProgress | ResponseError::IllegalGeneration) => continue,
                Some(ResponseError::UnknownMemberId) => {
                    self.member_id.clear();
                    continue;
                }
                Some(code) => return Err(self.error("SyncGroup", code)),
            }
            self.generation = Some(generation.clone());
            return Ok(Joined {
                generation,
                leader,
                members: if leader { members } else { 0 },
                assignment: answer.assignment,
            });
        }
    }

    /// Tells the coordinator this member is alive, and learns whether the
    /// group rebalances. An error is the coordinator out of reach.
    pub async fn heartbeat(&mut self) -> Result<Beat, UpstreamError> {
        let Some(generation) = self.generation.clone() else {
            return Ok(Beat::Rebalance);
        };
        let connection = self.connection().await?;
        let request = HeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(self.group.clone())))
            .with_generation_id(generation.id)
            .with_member_id(StrBytes::from_string(generation.member));
        let answer = self.call(connection.request(&request).await)?;
        match ResponseError::try_from_code(answer.error_code) {
            None => Ok(Beat::Stable),
            Some(ResponseError::RebalanceInProgress) => Ok(Beat::Rebalance),
            Some(ResponseError::IllegalGeneration) => {
                self.generation = None;
                Ok(Beat::Rebalance)
            }
            Some(ResponseError::UnknownMemberId | ResponseError::FencedInstanceId) => {
                self.generation = None;
                self.member_id.clear();
                Ok(Beat::Rebalance)
            }
            Some(code) => Err(self.error("Heartbeat", code)),
        }
    }

    /// Leaves the group, so the others go on without this member at once
    /// rather than after a session timeout. Best effort: a member that
    /// cannot leave expires.
    pub async fn leave(&mut self) {
        if self.member_id.is_empty() {
            return;
        }
        let Ok(connection) = self.connection().await else {
            return;
        };
        let Ok(version) = connection.version(ApiKey::LeaveGroup) else {
            return;
        };
        let member = StrBytes::from_string(self.member_id.clone());
        let mut request =
            LeaveGroupRequest::default().with_group_id(GroupId(StrBytes::from_string(self.group.clone())));
        if version >= 3 {
            request = request.with_members(vec![MemberIdentity::default().with_member_id(member)]);
        } else {
            request = request.with_member_id(member);
        }
        match connection.request_at(&request, version).await {
            Ok(answer) if answer.error_code == 0 => {
                tracing::info!(group = %self.group, member = %self.member_id, "left the group")
            }
            Ok(answer) => {
                tracing::warn!(group = %self.group, code = answer.error_code, "LeaveGroup refused; the member expires after its session timeout")
            }
            Err(e) => {
                tracing::warn!(group = %self.group, error = %e, "LeaveGroup failed; the member expires after its session timeout")
            }
        }
        self.generation = None;
        self.member_id.clear();
    }

    async fn connection(&mut self) -> Result<Connection, UpstreamError> {
        if let Some(connection) = &self.connection {
            if !connection.is_failed() {
                return Ok(connection.clone());
            }
        }
        let (_, connection) = self
            .cluster
            .open_coordinator(&self.group)
            .await
            .inspect_err(|e| {
                if e.wants_metadata_refresh() {
                    self.cluster.forget_coordinator(&self.group);
                }
            })?;
        self.connection = Some(connection.clone());
        Ok(connection)
    }

    /// Sends a request the coordinator may hold for a whole rebalance
    /// (JoinGroup, SyncGroup) and waits as long for its answer.
    async fn held<R>(
        &mut self,
        connection: &Connection,
        request: &R,
        version: i16,
    ) -> Result<R::Response, UpstreamError>
    where
        R: Request + Any,
        R::Response: Throttled,
    {
        let answer = match connection.send_at(request, version).await {
            Ok(pending) => pending.answer_after(self.timeouts.rebalance).await,
            Err(e) => Err(e),
        };
        self.call(answer)
    }

    /// Passes an answer through, dropping the connection when it failed.
    fn call<T>(&mut self, result: Result<T, UpstreamError>) -> Result<T, UpstreamError> {
        if result.is_err() {
            self.connection = None;
            self.cluster.forget_coordinator(&self.group);
        }
        result
    }

    fn error(&mut self, api: &str, code: ResponseError) -> UpstreamError {
        if matches!(
            code,
            ResponseError::NotCoordinator | ResponseError::CoordinatorNotAvailable
        ) {
            self.connection = None;
            self.cluster.forget_coordinator(&self.group);
        }
        UpstreamError::Kafka {
            cluster: self.cluster.name().to_owned(),
            what: format!("{api} for group {}", self.group),
            code,
        }
    }
}

fn millis(d: Duration) -> i32 {
    d.as_millis().min(i32::MAX as u128) as i32
}
