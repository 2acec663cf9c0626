//! Which instance a group's members talk to (`instances:`): FindCoordinator
//! names the one the group hashes to, so a group's requests meet on one
//! instance while the groups spread over all. The groups are delegated to
//! a cluster (`instances:` takes no group Strait coordinates), whose
//! coordinator keeps their generations, so any instance serves them: when
//! the named one goes away, members look the coordinator up again and go
//! on through another, with the same member ids and generation.

use kafka_protocol::messages::*;

use super::{Head, Pending, Router, Session};
use crate::broker::{Reply, NODE_ID};

impl Router {
    /// FindCoordinator: the local broker's answer, each group's node the
    /// instance that coordinates it (the edge gives the address).
    pub(super) fn find_coordinator<'a>(
        &'a self,
        session: &mut Session,
        head: Head,
        req: FindCoordinatorRequest,
    ) -> Pending<'a> {
        let local = self.local(session, &head);
        Box::pin(async move {
            // v0-v3 answer in the top-level fields, v4 in `coordinators`
            // only (the top-level ones must keep their defaults).
            let group = (req.key_type == 0 && head.version < 4).then(|| req.key.to_string());
            let Some(mut found) = local.ask(req).await else {
                return Reply::Silent;
            };
            let view = self.instances.now();
            if let Some(group) = group.filter(|_| found.node_id.0 == NODE_ID && found.error_code == 0) {
                found.node_id = BrokerId(view.coordinator(&group));
            }
            for coordinator in found
                .coordinators
                .iter_mut()
                .filter(|c| c.node_id.0 == NODE_ID && c.error_code == 0)
            {
                coordinator.node_id = BrokerId(view.coordinator(coordinator.key.as_str()));
            }
            Reply::Respond(Box::new(ResponseKind::FindCoordinator(found)))
        })
    }
}
