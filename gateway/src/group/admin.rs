//! DescribeGroups, ListGroups and DeleteGroups.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse, GroupId,
    ListGroupsRequest, ListGroupsResponse,
};

use super::offsets::{self, Entry};
use super::state::Group;
use super::{err, sb, GroupCoordinator, GroupState};
use crate::error::{kafka_code, Failure};

/// Bit set DescribeGroups reports for `include_authorized_operations`
/// (no ACLs: READ, DELETE and DESCRIBE are allowed).
const GROUP_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8);

impl GroupCoordinator {
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
                            st.forget(&name);
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
}
