//! The `instances:` section: several `strait serve` processes with the same
//! configuration as one logical cluster. They meet in a group on one of
//! `clusters` (Kafka's group protocol keeps who is alive); Metadata lists
//! the live ones as the brokers and spreads the partitions' leadership
//! over them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cluster::ClusterConfig;
use crate::error::Invalid;
use crate::route::{Destination, GroupRouteConfig, RouteConfig};
use crate::spool::check_topic_name;
use crate::units::HumanDuration;

/// The group the instances meet in, unless `group` says otherwise.
pub const DEFAULT_GROUP: &str = "strait-instances";
/// The topic of the shared producer map, unless `producers_topic` says
/// otherwise.
pub const DEFAULT_PRODUCERS_TOPIC: &str = "__strait_gateway_producers";
/// Kafka's own lowest session timeout (`group.min.session.timeout.ms`).
const DEFAULT_SESSION_TIMEOUT: HumanDuration = HumanDuration::secs(6);

/// The `instances:` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstancesConfig {
    /// The cluster of `clusters` whose group coordinator keeps which
    /// instances are alive. Required.
    pub cluster: String,
    /// The group's id on that cluster. Default `strait-instances`; give
    /// each logical gateway (each set of instances) its own.
    #[serde(default = "default_group")]
    pub group: String,
    /// How long an instance may go unheard before the others take its
    /// partitions (the group's session timeout). Default `6s`, the least
    /// Kafka takes by default (`group.min.session.timeout.ms`); at least
    /// `1s`, at most `5m`.
    #[serde(default = "default_session_timeout")]
    pub session_timeout: HumanDuration,
    /// The compacted topic on that cluster where the instances keep which
    /// upstream producer id each client's idempotent producer has on each
    /// cluster, so any instance goes on with it. Created on first use.
    /// Default `__strait_gateway_producers`.
    #[serde(default = "default_producers_topic")]
    pub producers_topic: String,
}

fn default_producers_topic() -> String {
    DEFAULT_PRODUCERS_TOPIC.to_owned()
}

fn default_group() -> String {
    DEFAULT_GROUP.to_owned()
}

fn default_session_timeout() -> HumanDuration {
    DEFAULT_SESSION_TIMEOUT
}

impl InstancesConfig {
    /// Checks the cluster, the timeout, and that no topic is local and no
    /// group coordinated by Strait: a local topic lives on one instance's
    /// disk and a local group's generation in one instance's memory, which
    /// the others cannot serve.
    /// `routes` are the effective routes (the default sends every topic to
    /// `local`).
    pub(crate) fn validate(
        &self,
        prefix: &str,
        clusters: &BTreeMap<String, ClusterConfig>,
        routes: &[RouteConfig],
        routes_given: bool,
        groups: &[GroupRouteConfig],
    ) -> Result<(), Invalid> {
        if !clusters.contains_key(&self.cluster) {
            return Err(Invalid::new(
                format!("{prefix}.cluster"),
                format!(
                    "`{}` is not a cluster under `clusters:` (the instances meet in a group on one)",
                    self.cluster
                ),
            ));
        }
        if self.group.is_empty() {
            return Err(Invalid::new(format!("{prefix}.group"), "must not be empty"));
        }
        check_topic_name(&self.producers_topic)
            .map_err(|m| Invalid::new(format!("{prefix}.producers_topic"), m))?;
        let timeout = std::time::Duration::from(self.session_timeout);
        if timeout < std::time::Duration::from_secs(1) || timeout > std::time::Duration::from_secs(300) {
            return Err(Invalid::new(
                format!("{prefix}.session_timeout"),
                "must be between 1s and 5m",
            ));
        }
        if let Some((i, _)) = routes
            .iter()
            .enumerate()
            .find(|(_, r)| Destination::parse(&r.to) == Destination::Local)
        {
            let (at, what) = if routes_given {
                (format!("routes[{i}].to"), "this route sends topics")
            } else {
                (
                    prefix.to_owned(),
                    "without `routes:` every topic is local, so set `routes:` and send",
                )
            };
            return Err(Invalid::new(
                at,
                format!(
                    "{what} to `local`, but local topics live on one instance's disk and \
                     the other instances of `instances:` cannot serve them: route every \
                     topic to a cluster, or run one instance without `instances:`"
                ),
            ));
        }
        if let Some(i) = groups
            .iter()
            .position(|g| Destination::parse(&g.to) == Destination::Local)
        {
            return Err(Invalid::new(
                format!("groups[{i}].to"),
                "a group Strait coordinates keeps its members and generation in one \
                 instance's memory, which the other instances of `instances:` cannot \
                 serve: route groups to a cluster (without `groups:`, every group goes \
                 to the cluster of `instances:`)",
            ));
        }
        Ok(())
    }
}
