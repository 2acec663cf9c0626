//! The `mirrors:` section: which topics to copy from one cluster of
//! `clusters:` to another, under which names, and from where a partition
//! begins. The mirror (in progress) reads these settings.
//!
//! Besides checking each mirror, [`Config::validate`](crate::Config::validate)
//! checks the mirrors together: no two may write the same target topic, no
//! mirror within one cluster may select a topic it writes itself, and of
//! two mirrors in opposite directions one must never select what the other
//! writes (records would go round). See
//! the crate's `overlap` module for how.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::cluster::{check_bytes_in_flight, ClusterConfig};
use crate::error::Invalid;
use crate::names::check_name;
use crate::units::{ByteSize, HumanDuration};

use crate::overlap::{self, NameMap, Overlap, Template};
use crate::pattern::TopicFilter;
#[cfg(test)]
mod tests;

/// Default `exclude`: `__.*`, Kafka's internal topics
/// (`__consumer_offsets`, `__transaction_state`).
pub const DEFAULT_EXCLUDE: &str = "__.*";
/// Default `rename`: `{topic}`, the source topic's own name.
pub const DEFAULT_RENAME: &str = "{topic}";
/// Default `commit_interval`: 1 second.
pub const DEFAULT_COMMIT_INTERVAL: HumanDuration = HumanDuration::secs(1);
/// Default `session_timeout`: 10 seconds.
pub const DEFAULT_SESSION_TIMEOUT: HumanDuration = HumanDuration::secs(10);
/// Default `discovery_interval`: 10 seconds.
pub const DEFAULT_DISCOVERY_INTERVAL: HumanDuration = HumanDuration::secs(10);
/// Default `max_bytes_in_flight` of a mirror: 128MiB, room for three
/// fetches of 32 MiB (the most one fetch asks for) in flight (three
/// quarters of the budget) beside the answer being written: what one
/// partition needs to fill a 100 ms x 100 MB/s link.
pub const DEFAULT_MAX_BYTES_IN_FLIGHT: ByteSize = ByteSize::mib(128);
/// Default `offset_map_retention`: 7 days, Kafka's default retention.
pub const DEFAULT_OFFSET_MAP_RETENTION: HumanDuration = HumanDuration::days(7);
/// The default `offset_map_topic` of a mirror, `{name}` standing for its
/// name: it begins with `__`, so the default `exclude` keeps a mirror in
/// the other direction from copying it back.
pub const DEFAULT_OFFSET_MAP_TOPIC: &str = "__strait_mirror_offsets.{name}";
/// The largest batch `coalesce_below` merges small batches into: 1MiB.
pub const COALESCE_UP_TO: ByteSize = ByteSize::mib(1);

/// Where a mirror begins a partition for which its group has no committed
/// position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartPosition {
    /// At the partition's log start: everything the source still holds is
    /// copied.
    #[default]
    Earliest,
    /// At the partition's end: only records written from then on.
    Latest,
}

/// What a mirror does when the source cluster's retention deleted records
/// before they were copied (its position fell below the log start).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnLostRecords {
    /// Log it loudly, count the lost records, and go on from the log start.
    #[default]
    Continue,
    /// Stop mirroring that partition until an operator steps in.
    Stop,
}

/// A mirror's `sync_group_offsets`: consumer groups of the source whose
/// committed offsets the mirror translates and commits on the target, so
/// that they can move there at any time and read on from exactly the next
/// record they had not read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SyncGroupOffsets {
    /// Regular expression of the groups to follow, matched against the
    /// whole name. Required.
    pub groups: String,
    /// Groups not to follow, though `groups` matches them. Default: none.
    /// The mirror's own group is never followed.
    pub exclude: String,
    /// How often the groups' offsets are read and translated. Default
    /// `500ms`, so that a source commit reaches the target within a second
    /// (plus the time its records take to be mirrored); from `100ms` to
    /// `1h`.
    pub interval: HumanDuration,
}

impl Default for SyncGroupOffsets {
    fn default() -> Self {
        SyncGroupOffsets {
            groups: String::new(),
            exclude: String::new(),
            interval: HumanDuration::millis(500),
        }
    }
}

impl SyncGroupOffsets {
    /// The compiled `groups` and `exclude`.
    ///
    /// # Panics
    ///
    /// If either does not compile, which
    /// [`Config::validate`](crate::Config::validate) rules out.
    pub fn filter(&self) -> TopicFilter {
        TopicFilter::new("groups", &self.groups, &self.exclude).unwrap_or_else(|(key, error)| {
            panic!("sync_group_offsets {key} regex was not validated: {error}")
        })
    }

    fn validate(&self, prefix: &str) -> Result<(), Invalid> {
        if self.groups.is_empty() {
            return Err(Invalid::new(
                format!("{prefix}.groups"),
                "required: a regular expression of the source's groups to follow, such as `.*`",
            ));
        }
        TopicFilter::new("groups", &self.groups, &self.exclude).map_err(|(key, e)| {
            Invalid::new(format!("{prefix}.{key}"), format!("is not a valid regex: {e}"))
        })?;
        if self.interval < HumanDuration::millis(100) || self.interval > HumanDuration::hours(1) {
            return Err(Invalid::new(
                format!("{prefix}.interval"),
                format!("must be from 100ms to 1h, not {}", self.interval),
            ));
        }
        Ok(())
    }
}

/// One entry of `mirrors:`, keyed by the mirror's name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MirrorConfig {
    /// The cluster to copy from: a name under `clusters:`. Required.
    pub source: String,
    /// The cluster to copy to: a name under `clusters:`. Required. It may
    /// be `source` only with a `rename` that changes names.
    pub target: String,
    /// Regular expression of the source topics to copy, matched against
    /// the whole name, as MirrorMaker's whitelist (Java's `matches()`):
    /// `orders|payments` selects those two topics, not `orders-eu`.
    /// Required. The syntax is Rust's `regex` crate's (no look-around or
    /// back-references).
    pub topics: String,
    /// Regular expression of topics not to copy even when `topics` selects
    /// them, also matched against the whole name. Default `__.*`: Kafka's
    /// internal topics. `""` excludes nothing.
    pub exclude: String,
    /// The target topic's name, in which `{topic}` stands for the source
    /// topic's name: `nj.{topic}` copies `orders` to `nj.orders`. Default
    /// `{topic}`, the same name. Must hold `{topic}` (at least once) and
    /// otherwise only topic name characters.
    pub rename: String,
    /// The consumer group on the source cluster that holds the mirror's
    /// committed positions. Default: the mirror's name (the effective
    /// configuration writes it out). Each mirror on a source cluster needs
    /// a group of its own.
    pub group: Option<String>,
    /// Commit positions to `group` at least this often. Default `1s`; must
    /// be positive.
    pub commit_interval: HumanDuration,
    /// Every `strait mirror` or `strait serve` process running this
    /// mirror joins `group` on the source and the group's leader shares
    /// the partitions among them. When a process dies, the others take
    /// its partitions once the source's group coordinator has heard
    /// nothing from it for this long. Default `10s`; at least `1s`, and
    /// within the source brokers' `group.min.session.timeout.ms` and
    /// `group.max.session.timeout.ms` (Kafka: 6s to 30m), which they
    /// enforce.
    pub session_timeout: HumanDuration,
    /// Where a partition with no committed position begins: `earliest` or
    /// `latest`. Default `earliest`.
    pub start: StartPosition,
    /// Look for new topics and partitions on the source this often.
    /// Default `10s`; must be positive.
    pub discovery_interval: HumanDuration,
    /// Most record bytes read from the source and not yet acknowledged by
    /// the target. Default `128MiB`; at least `1MiB`.
    pub max_bytes_in_flight: ByteSize,
    /// When source retention deleted records before they were copied:
    /// `continue` (log them, count them, go on from the log start) or
    /// `stop`. Default `continue`.
    pub on_lost_records: OnLostRecords,
    /// Source batches smaller than this are written to the target merged
    /// with their small neighbours, into batches of up to
    /// [`COALESCE_UP_TO`] (within the target topic's `max.message.bytes`):
    /// fewer, larger batches cost the target broker less per record than a
    /// producer's small ones (`linger.ms=0`). Records keep their keys,
    /// values, headers and timestamps, in order, exactly once; batch
    /// boundaries and producer ids are the mirror's, as with MirrorMaker 2.
    /// Default `0`: every batch is written as the source holds it. At most
    /// [`COALESCE_UP_TO`].
    pub coalesce_below: ByteSize,
    /// While a partition has caught up with the source and records arrive
    /// a few at a time, keep a second fetch waiting at the source half a
    /// round trip after the first, so that a new record waits at most half
    /// a round trip for one: replication latency about one round trip
    /// rather than one and a half. Both fetches bring what arrived between
    /// them, so such partitions send up to twice their bytes across the
    /// link (partitions with a backlog are unaffected). Default `true`;
    /// `false` where cross-datacenter bytes are dear.
    pub staggered_polls: bool,
    /// Mark every record with the cluster it was first written to (a
    /// `strait.origin` header holding that cluster's Kafka cluster id,
    /// added where a record has none) and leave out records whose origin is
    /// the target: two mirrors in opposite directions that both set it may
    /// keep topic names both ways without copying a record back. Every
    /// batch is then decoded and built anew (its records with one header
    /// more), which costs CPU and a few bytes per record; batches are no
    /// longer passed through. Default `false`.
    pub prevent_loops: bool,
    /// The topic on the target cluster where the mirror keeps its offset
    /// map (which target offset each source record went to), for
    /// `strait mirror translate-offsets`. Default
    /// `__strait_mirror_offsets.<mirror name>` (the effective configuration
    /// writes it out); created with one partition and `cleanup.policy=delete`.
    pub offset_map_topic: Option<String>,
    /// How long the offset map topic keeps entries (its `retention.ms` when
    /// the mirror creates it): offsets committed before that translate to
    /// the first target offset the map still knows. Default `7d`; at least
    /// `1h`.
    pub offset_map_retention: HumanDuration,
    /// Follow the source's consumer groups on the target (see
    /// [`SyncGroupOffsets`]). Default: off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_group_offsets: Option<SyncGroupOffsets>,
}

impl Default for MirrorConfig {
    /// The defaults, with no `source`, `target` or `topics` (which a mirror
    /// must set).
    fn default() -> Self {
        MirrorConfig {
            source: String::new(),
            target: String::new(),
            topics: String::new(),
            exclude: DEFAULT_EXCLUDE.to_owned(),
            rename: DEFAULT_RENAME.to_owned(),
            group: None,
            commit_interval: DEFAULT_COMMIT_INTERVAL,
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            start: StartPosition::default(),
            discovery_interval: DEFAULT_DISCOVERY_INTERVAL,
            max_bytes_in_flight: DEFAULT_MAX_BYTES_IN_FLIGHT,
            on_lost_records: OnLostRecords::default(),
            coalesce_below: ByteSize::b(0),
            staggered_polls: true,
            prevent_loops: false,
            offset_map_topic: None,
            offset_map_retention: DEFAULT_OFFSET_MAP_RETENTION,
            sync_group_offsets: None,
        }
    }
}

impl MirrorConfig {
    /// The compiled `topics` and `exclude`.
    ///
    /// # Panics
    ///
    /// If either does not compile, which
    /// [`Config::validate`](crate::Config::validate) rules out.
    pub fn topic_filter(&self) -> TopicFilter {
        TopicFilter::new("topics", &self.topics, &self.exclude)
            .unwrap_or_else(|(key, error)| panic!("mirror {key} regex was not validated: {error}"))
    }

    /// The target topic's name for `source_topic`: `rename` with every
    /// `{topic}` replaced by it.
    pub fn target_topic(&self, source_topic: &str) -> String {
        self.rename.replace(overlap::PLACEHOLDER, source_topic)
    }

    /// The consumer group holding the positions of this mirror, whose name
    /// (its key under `mirrors:`) is `name`: `group`, or `name` when unset.
    /// In the [effective](crate::Config::effective) configuration `group`
    /// is always set.
    pub fn group_id(&self, name: &str) -> String {
        self.group.clone().unwrap_or_else(|| name.to_owned())
    }

    /// The topic on the target holding this mirror's offset map:
    /// `offset_map_topic`, or [`DEFAULT_OFFSET_MAP_TOPIC`] for mirror
    /// `name`.
    pub fn offset_map_topic(&self, name: &str) -> String {
        self.offset_map_topic
            .clone()
            .unwrap_or_else(|| DEFAULT_OFFSET_MAP_TOPIC.replace("{name}", name))
    }

    /// This mirror with its default group and offset map topic written out.
    pub(crate) fn effective(&self, name: &str) -> MirrorConfig {
        MirrorConfig {
            group: Some(self.group_id(name)),
            offset_map_topic: Some(self.offset_map_topic(name)),
            ..self.clone()
        }
    }

    /// Checks this mirror alone (its name, clusters, regexes, rename,
    /// group and bounds) and returns its compiled filter and rename.
    fn validate<'a>(
        &'a self,
        name: &str,
        prefix: &str,
        clusters: &BTreeMap<String, ClusterConfig>,
    ) -> Result<(TopicFilter, Template<'a>), Invalid> {
        let path = |key: &str| format!("{prefix}.{key}");
        check_name(name)
            .map_err(|why| Invalid::new(prefix, format!("invalid mirror name `{name}`: {why}")))?;
        for (key, cluster, role) in [
            ("source", &self.source, "copy from"),
            ("target", &self.target, "copy to"),
        ] {
            if cluster.is_empty() {
                return Err(Invalid::new(
                    path(key),
                    format!("required: the cluster to {role}, {}", ClusterList(clusters)),
                ));
            }
            if !clusters.contains_key(cluster) {
                return Err(Invalid::new(
                    path(key),
                    format!("unknown cluster `{cluster}`: {}", ClusterList(clusters)),
                ));
            }
        }
        if self.topics.is_empty() {
            return Err(Invalid::new(
                path("topics"),
                "required: a regular expression of the source topics to copy, such as \
                 `orders|payments` or `.*`",
            ));
        }
        let filter = TopicFilter::new("topics", &self.topics, &self.exclude).map_err(|(key, error)| {
            let detail = error.to_string();
            let detail = detail.strip_prefix("regex parse error:").unwrap_or(&detail);
            let detail = detail
                .strip_prefix('\n')
                .map_or(format!(" {detail}"), |d| format!("\n{d}"));
            Invalid::new(path(key), format!("invalid regular expression:{detail}"))
        })?;
        let template =
            Template::parse(&self.rename, &self.source).map_err(|m| Invalid::new(path("rename"), m))?;
        if let Some(group) = &self.group {
            if group.is_empty() {
                return Err(Invalid::new(
                    path("group"),
                    format!("must not be empty; leave it out to use the mirror's name `{name}`"),
                ));
            }
            if group.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(Invalid::new(
                    path("group"),
                    format!("`{group}` holds a space or a control character"),
                ));
            }
        }
        for (key, value) in [
            ("commit_interval", self.commit_interval),
            ("discovery_interval", self.discovery_interval),
        ] {
            if value.is_zero() {
                return Err(Invalid::new(path(key), "must be positive"));
            }
        }
        if self.session_timeout < HumanDuration::secs(1) {
            return Err(Invalid::new(
                path("session_timeout"),
                format!("{} is below 1s", self.session_timeout),
            ));
        }
        check_bytes_in_flight(self.max_bytes_in_flight, &path("max_bytes_in_flight"))?;
        let map_topic = self.offset_map_topic(name);
        if map_topic.len() > 249 {
            return Err(Invalid::new(
                path("offset_map_topic"),
                format!("`{map_topic}` is longer than Kafka's 249 characters"),
            ));
        }
        check_name(&map_topic).map_err(|why| {
            Invalid::new(
                path("offset_map_topic"),
                format!("`{map_topic}` is not a topic name: {why}"),
            )
        })?;
        if let Some(sync) = &self.sync_group_offsets {
            sync.validate(&path("sync_group_offsets"))?;
        }
        if self.offset_map_retention < HumanDuration::hours(1) {
            return Err(Invalid::new(
                path("offset_map_retention"),
                format!("{} is below 1h", self.offset_map_retention),
            ));
        }
        if self.coalesce_below > COALESCE_UP_TO {
            return Err(Invalid::new(
                path("coalesce_below"),
                format!(
                    "{} is above {COALESCE_UP_TO}, the largest batch small ones are merged into",
                    self.coalesce_below
                ),
            ));
        }
        if self.source == self.target {
            self.check_not_into_itself(prefix, &filter, &template)?;
        }
        Ok((filter, template))
    }

    /// For a mirror within one cluster: refuses a rename that keeps names
    /// (every topic copied onto itself), and `topics` that select a topic
    /// the mirror writes (it would copy its copies, without end).
    fn check_not_into_itself(
        &self,
        prefix: &str,
        filter: &TopicFilter,
        template: &Template<'_>,
    ) -> Result<(), Invalid> {
        let cluster = &self.source;
        if template.is_identity() {
            return Err(Invalid::new(
                format!("{prefix}.target"),
                format!(
                    "`{cluster}` is also the source, and rename `{}` keeps every name: each topic \
                     would be copied onto itself; name another cluster, or set a rename such as \
                     `copy.{{topic}}`",
                    self.rename
                ),
            ));
        }
        let writes = NameMap {
            include: &self.topics,
            exclude: &self.exclude,
            filter,
            template,
        };
        let identity = Template::parse(DEFAULT_RENAME, "").expect("the default rename parses");
        let reads = NameMap {
            template: &identity,
            ..writes
        };
        // Every name the mirror writes begins with the rename's prefix and
        // ends with its suffix; without either, suggest a prefix.
        let own = match (template.prefix(), template.suffix()) {
            ("", "") => "a prefix to the rename, such as `copy.{topic}`, and `copy\\..*`".to_owned(),
            (prefix, suffix) => format!("`{}.*{}`", regex::escape(prefix), regex::escape(suffix)),
        };
        let message = match overlap::overlap(writes, reads) {
            Overlap::Disjoint => return Ok(()),
            Overlap::Example { target, a, .. } => format!(
                "mirror would copy its own copies: it writes `{a}` to `{target}` on the same \
                 cluster `{cluster}`, and `topics` selects `{target}` too (then `{}`, and so on); \
                 narrow `topics`, or add {own} to `exclude`",
                self.target_topic(&target)
            ),
            Overlap::Unknown(why) => format!(
                "mirror copies within cluster `{cluster}` (rename `{}`), and Strait cannot prove \
                 that `topics` never selects a topic it writes ({why}); add {own} to `exclude`",
                self.rename
            ),
        };
        Err(Invalid::new(format!("{prefix}.topics"), message))
    }
}

/// The clusters a mirror can name, for messages: ``one of `cq`, `nj` ``,
/// or a hint that `clusters:` is empty.
struct ClusterList<'a>(&'a BTreeMap<String, ClusterConfig>);

impl fmt::Display for ClusterList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("but `clusters:` names none; add the cluster there");
        }
        f.write_str("one of ")?;
        for (i, name) in self.0.keys().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "`{name}`")?;
        }
        Ok(())
    }
}

/// Checks every mirror, then the mirrors together: two mirrors reading one
/// source cluster need distinct groups, and two mirrors writing one target
/// cluster must not be able to write the same topic. `prefix` is the key
/// path of the section (`mirrors`).
pub(crate) fn validate(
    mirrors: &BTreeMap<String, MirrorConfig>,
    clusters: &BTreeMap<String, ClusterConfig>,
    prefix: &str,
) -> Result<(), Invalid> {
    let mut checked = Vec::with_capacity(mirrors.len());
    for (name, mirror) in mirrors {
        let (filter, template) = mirror.validate(name, &format!("{prefix}.{name}"), clusters)?;
        checked.push((name, mirror, filter, template));
    }
    for (j, (b_name, b, b_filter, b_template)) in checked.iter().enumerate() {
        for (a_name, a, a_filter, a_template) in &checked[..j] {
            if a.source == b.source && a.group_id(a_name) == b.group_id(b_name) {
                let (blamed, other) = if b.group.is_some() {
                    (b_name, a_name)
                } else {
                    (a_name, b_name)
                };
                return Err(Invalid::new(
                    format!("{prefix}.{blamed}.group"),
                    format!(
                        "`{}` is also the group of mirror `{other}` on cluster `{}`; each mirror \
                         keeps its positions in a group of its own",
                        b.group_id(b_name),
                        b.source
                    ),
                ));
            }
            if a.source == b.target
                && a.target == b.source
                && a.source != a.target
                && !(a.prevent_loops && b.prevent_loops)
            {
                check_no_round_trip(
                    prefix,
                    (a_name, a, a_filter, a_template),
                    (b_name, b, b_filter, b_template),
                )?;
            }
            if a.target != b.target {
                continue;
            }
            let first = NameMap {
                include: &a.topics,
                exclude: &a.exclude,
                filter: a_filter,
                template: a_template,
            };
            let second = NameMap {
                include: &b.topics,
                exclude: &b.exclude,
                filter: b_filter,
                template: b_template,
            };
            let (x, y) = suggested_prefixes((a_name, &a.source), (b_name, &b.source));
            let advice = format!(
                "give each mirror a rename prefix of its own, such as `{x}.{{topic}}` and \
                 `{y}.{{topic}}`"
            );
            let target = &b.target;
            let message = match overlap::overlap(first, second) {
                Overlap::Disjoint => continue,
                Overlap::Example {
                    target: topic,
                    a: from_a,
                    b: from_b,
                } => format!(
                    "mirrors `{a_name}` and `{b_name}` can both write topic `{topic}` on cluster \
                     `{target}` (`{a_name}` copying `{from_a}` from `{}`, `{b_name}` copying \
                     `{from_b}` from `{}`); {advice}, or `topics` that do not overlap",
                    a.source, b.source
                ),
                Overlap::Unknown(why) => format!(
                    "mirrors `{a_name}` and `{b_name}` both write to cluster `{target}`, and their \
                     renames (`{}` and `{}`) can give two source topics the same name there; \
                     Strait cannot prove that their `topics` never select such a pair ({why}); \
                     {advice}",
                    a.rename, b.rename
                ),
            };
            return Err(Invalid::new(format!("{prefix}.{b_name}.rename"), message));
        }
    }
    Ok(())
}

/// A mirror with its compiled filter and rename, for the checks of mirrors
/// together.
type Checked<'a> = (&'a String, &'a MirrorConfig, &'a TopicFilter, &'a Template<'a>);

/// For two mirrors in opposite directions between two clusters: refuses
/// them unless one of them never selects a topic the other writes, so that
/// no record is copied back to where it came from (and on, without end).
fn check_no_round_trip(prefix: &str, a: Checked<'_>, b: Checked<'_>) -> Result<(), Invalid> {
    let identity = Template::parse(DEFAULT_RENAME, "").expect("the default rename parses");
    fn writes<'m>(m: &Checked<'m>) -> NameMap<'m> {
        NameMap {
            include: &m.1.topics,
            exclude: &m.1.exclude,
            filter: m.2,
            template: m.3,
        }
    }
    let mut found = Vec::new();
    for (from, back) in [(&a, &b), (&b, &a)] {
        let reads = NameMap {
            template: &identity,
            ..writes(back)
        };
        match overlap::overlap(writes(from), reads) {
            Overlap::Disjoint => return Ok(()),
            Overlap::Example {
                target, a: copied, ..
            } => found.push(format!(
                "`{}` copies `{copied}` from `{}` to `{target}` on `{}`, which `{}` selects",
                from.0, from.1.source, from.1.target, back.0
            )),
            Overlap::Unknown(why) => found.push(format!(
                "Strait cannot prove that `{}` never selects what `{}` writes ({why})",
                back.0, from.0
            )),
        }
    }
    let (x, y) = suggested_prefixes((a.0, &a.1.source), (b.0, &b.1.source));
    Err(Invalid::new(
        format!("{prefix}.{}.topics", b.0),
        format!(
            "mirrors `{}` and `{}` copy in opposite directions between `{}` and `{}`, and records \
             would go round: {}; rename each mirror's topics after their origin (such as `{x}.{{topic}}` \
             and `{y}.{{topic}}`) and exclude the other's (`{}` in `{}`, `{}` in `{}`), or set \
             `prevent_loops: true` on both mirrors to keep the names both ways (each record's origin \
             goes in a header{})",
            a.0,
            b.0,
            a.1.source,
            b.1.source,
            found.join("; and "),
            regex::escape(&format!("{y}.")) + ".*",
            a.0,
            regex::escape(&format!("{x}.")) + ".*",
            b.0,
            match (a.1.prevent_loops, b.1.prevent_loops) {
                (true, false) => format!("; `{}` sets it, `{}` does not", a.0, b.0),
                (false, true) => format!("; `{}` sets it, `{}` does not", b.0, a.0),
                _ => String::new(),
            },
        ),
    ))
}

/// Two rename prefixes to suggest for mirrors `a` and `b` (each a name and
/// a source cluster) that would keep their names apart: the source
/// clusters' names when they differ, else the mirrors' names, as long as
/// neither `x.` begins `y.`.
fn suggested_prefixes<'a>(a: (&'a str, &'a str), b: (&'a str, &'a str)) -> (&'a str, &'a str) {
    let apart = |x: &str, y: &str| {
        let (x, y) = (format!("{x}."), format!("{y}."));
        !x.starts_with(&y) && !y.starts_with(&x)
    };
    [(a.1, b.1), (a.0, b.0)]
        .into_iter()
        .find(|&(x, y)| apart(x, y))
        .unwrap_or(("one", "two"))
}
