//! Temporary stand-in for the group coordinator while it is written.
#![allow(missing_docs, dead_code, clippy::unused_async)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::*;
use strait_spool::IoPool;

#[derive(Debug, Clone, Default)]
pub struct GroupConfig {
    pub min_session_timeout: Duration,
    pub max_session_timeout: Duration,
    pub initial_rebalance_delay: Duration,
    pub offsets_dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
#[error("groups")]
pub struct GroupError;

#[derive(Debug)]
pub struct GroupCoordinator;

impl GroupCoordinator {
    pub fn open(_config: GroupConfig, _pool: Arc<IoPool>) -> Result<Self, GroupError> {
        Ok(GroupCoordinator)
    }
    pub async fn join_group(&self, _req: JoinGroupRequest, _version: i16) -> JoinGroupResponse {
        JoinGroupResponse::default().with_error_code(15)
    }
    pub async fn sync_group(&self, _req: SyncGroupRequest, _version: i16) -> SyncGroupResponse {
        SyncGroupResponse::default().with_error_code(15)
    }
    pub async fn heartbeat(&self, _req: HeartbeatRequest, _version: i16) -> HeartbeatResponse {
        HeartbeatResponse::default().with_error_code(15)
    }
    pub async fn leave_group(&self, _req: LeaveGroupRequest, _version: i16) -> LeaveGroupResponse {
        LeaveGroupResponse::default().with_error_code(15)
    }
    pub async fn offset_commit(
        &self,
        _req: OffsetCommitRequest,
        _version: i16,
        _exists: &(dyn Fn(&str, i32) -> bool + Sync),
    ) -> OffsetCommitResponse {
        OffsetCommitResponse::default()
    }
    pub async fn offset_fetch(&self, _req: OffsetFetchRequest, _version: i16) -> OffsetFetchResponse {
        OffsetFetchResponse::default().with_error_code(15)
    }
    pub fn describe_groups(&self, _req: DescribeGroupsRequest, _version: i16) -> DescribeGroupsResponse {
        DescribeGroupsResponse::default()
    }
    pub fn list_groups(&self, _req: ListGroupsRequest, _version: i16) -> ListGroupsResponse {
        ListGroupsResponse::default()
    }
    pub async fn delete_groups(&self, _req: DeleteGroupsRequest, _version: i16) -> DeleteGroupsResponse {
        DeleteGroupsResponse::default()
    }
    pub async fn delete_topic_offsets(&self, _topic: &str) {}
    pub async fn shutdown(&self) {}
}
