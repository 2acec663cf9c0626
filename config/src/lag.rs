//! The `lag:` section: which consumer groups Strait watches, on which
//! clusters (its own spool, `local`, and those under `clusters:`), how
//! often, and how many series their lag may take.

use serde::{Deserialize, Serialize};

use crate::cluster::{ClusterConfig, RESERVED_CLUSTER as LOCAL};
use crate::error::Invalid;
use crate::pattern::{full_match, TopicFilter};
use crate::units::HumanDuration;

/// Default `interval`: 5 seconds.
pub const DEFAULT_INTERVAL: HumanDuration = HumanDuration::secs(5);
/// Shortest accepted `interval`: 1 second.
pub const MIN_INTERVAL: HumanDuration = HumanDuration::secs(1);
/// Longest accepted `interval`: 1 hour.
pub const MAX_INTERVAL: HumanDuration = HumanDuration::secs(3600);
/// Default `max_groups`: 10,000 per cluster.
pub const DEFAULT_MAX_GROUPS: usize = 10_000;

/// The `lag:` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LagConfig {
    /// Watch consumer groups at all. Default `true`.
    pub enabled: bool,
    /// How often each watched cluster's groups, committed offsets and
    /// partition ends are read. Default `5s`, from `1s` to `1h`.
    pub interval: HumanDuration,
    /// Groups watched: a regex matching whole group ids. Default `.*`.
    pub groups: String,
    /// Groups left out, though `groups` matches them: a regex matching
    /// whole group ids. Default `""`: none.
    pub exclude: String,
    /// Groups whose consumers read committed records only
    /// (`isolation.level=read_committed`): a regex matching whole group
    /// ids. Their lag runs to a partition's last stable offset rather than
    /// its high watermark (Kafka does not tell a group's isolation level).
    /// Default `""`: none.
    pub read_committed: String,
    /// Clusters watched, by name: `local` (Strait's spool) and names under
    /// `clusters:`. Default `null`: every one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clusters: Option<Vec<String>>,
    /// Export lag per partition (with `topic` and `partition` labels), not
    /// only per topic and per group. Default `true`; switch it off for
    /// groups of very many partitions.
    pub partition_labels: bool,
    /// Most groups watched per cluster: beyond it, the rest are left out
    /// (in name order) and a warning says how many. Default `10000`, at
    /// least 1.
    pub max_groups: usize,
}

impl Default for LagConfig {
    fn default() -> Self {
        LagConfig {
            enabled: true,
            interval: DEFAULT_INTERVAL,
            groups: ".*".to_owned(),
            exclude: String::new(),
            read_committed: String::new(),
            clusters: None,
            partition_labels: true,
            max_groups: DEFAULT_MAX_GROUPS,
        }
    }
}

impl LagConfig {
    /// The compiled `groups` and `exclude`: which groups are watched.
    ///
    /// # Panics
    ///
    /// If they do not compile, which [`crate::Config::validate`] rules out.
    pub fn group_filter(&self) -> TopicFilter {
        TopicFilter::new("groups", &self.groups, &self.exclude)
            .unwrap_or_else(|(key, e)| panic!("lag.{key} was not validated: {e}"))
    }

    /// The compiled `read_committed`: which groups read committed records
    /// only (None when it is empty: none).
    ///
    /// # Panics
    ///
    /// If it does not compile, which [`crate::Config::validate`] rules out.
    pub fn read_committed_filter(&self) -> Option<TopicFilter> {
        (!self.read_committed.is_empty()).then(|| {
            TopicFilter::new("read_committed", &self.read_committed, "")
                .unwrap_or_else(|(_, e)| panic!("lag.read_committed was not validated: {e}"))
        })
    }

    /// Whether cluster `name` (`local` for the spool) is watched.
    pub fn watches(&self, name: &str) -> bool {
        self.enabled
            && self
                .clusters
                .as_ref()
                .is_none_or(|names| names.iter().any(|n| n == name))
    }

    /// Checks the interval, the regexes, the bound on groups and that
    /// every cluster named is `local` or one of `clusters`.
    pub(crate) fn validate(
        &self,
        prefix: &str,
        clusters: &std::collections::BTreeMap<String, ClusterConfig>,
    ) -> Result<(), Invalid> {
        if self.interval < MIN_INTERVAL || self.interval > MAX_INTERVAL {
            return Err(Invalid::new(
                format!("{prefix}.interval"),
                format!(
                    "must be from {MIN_INTERVAL} to {MAX_INTERVAL}, not {}",
                    self.interval
                ),
            ));
        }
        TopicFilter::new("groups", &self.groups, &self.exclude).map_err(|(key, e)| {
            Invalid::new(format!("{prefix}.{key}"), format!("is not a valid regex: {e}"))
        })?;
        full_match(&self.read_committed).map_err(|e| {
            Invalid::new(
                format!("{prefix}.read_committed"),
                format!("is not a valid regex: {e}"),
            )
        })?;
        if self.max_groups == 0 {
            return Err(Invalid::new(format!("{prefix}.max_groups"), "must be at least 1"));
        }
        for (i, name) in self.clusters.iter().flatten().enumerate() {
            if name != LOCAL && !clusters.contains_key(name) {
                let known: Vec<&str> = std::iter::once(LOCAL)
                    .chain(clusters.keys().map(String::as_str))
                    .collect();
                return Err(Invalid::new(
                    format!("{prefix}.clusters[{i}]"),
                    format!("names no cluster: {name:?} (known: {})", known.join(", ")),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
