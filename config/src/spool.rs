//! The `spool:` section: storage settings for local topics, with defaults
//! for every topic and per-topic overrides, and [`SpoolConfig::for_topic`]
//! to resolve the two into the plain values the spool uses.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::Invalid;
use crate::units::{ByteSize, HumanDuration};

#[cfg(test)]
mod tests;

/// Default `segment_bytes`: 1GiB.
pub const DEFAULT_SEGMENT_BYTES: ByteSize = ByteSize::gib(1);
/// Default `segment_age`: 7 days.
pub const DEFAULT_SEGMENT_AGE: HumanDuration = HumanDuration::days(7);
/// Default `index_interval_bytes`: 4KiB.
pub const DEFAULT_INDEX_INTERVAL_BYTES: ByteSize = ByteSize::kib(4);
/// Default `index_bytes`: 10MiB.
pub const DEFAULT_INDEX_BYTES: ByteSize = ByteSize::mib(10);
/// Default `max_batch_bytes`: 1MiB.
pub const DEFAULT_MAX_BATCH_BYTES: ByteSize = ByteSize::mib(1);
/// Default `retention_age`: 7 days.
pub const DEFAULT_RETENTION_AGE: HumanDuration = HumanDuration::days(7);
/// Default `retention_check_interval`: 1 minute.
pub const DEFAULT_RETENTION_CHECK_INTERVAL: HumanDuration = HumanDuration::minutes(1);
/// Default `flush_interval` under `durability: interval`: 1 second.
pub const DEFAULT_FLUSH_INTERVAL: HumanDuration = HumanDuration::secs(1);

/// Smallest accepted `segment_bytes`: 64KiB.
pub const MIN_SEGMENT_BYTES: ByteSize = ByteSize::kib(64);
/// Largest accepted `segment_bytes`: 2GiB. With `max_batch_bytes` at most
/// `segment_bytes`, every position inside a segment file fits in a `u32`.
pub const MAX_SEGMENT_BYTES: ByteSize = ByteSize::gib(2);
/// Smallest accepted `index_bytes`: 4KiB, one page.
pub const MIN_INDEX_BYTES: ByteSize = ByteSize::kib(4);

/// When the spool calls `fsync` on a partition's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Sync before acknowledging every batch: an acknowledged batch survives
    /// a power loss. Slowest.
    EveryBatch,
    /// Sync at least every `flush_interval` (and, if set, after
    /// `flush_bytes` unsynced bytes). A crash loses at most that window.
    #[default]
    Interval,
    /// Never sync explicitly; leave it to the operating system. Survives a
    /// process crash, not a power loss.
    Os,
}

impl Durability {
    /// The name as written in YAML: `every_batch`, `interval`, `os`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Durability::EveryBatch => "every_batch",
            Durability::Interval => "interval",
            Durability::Os => "os",
        }
    }
}

/// The `spool:` section: defaults for every local topic, plus per-topic
/// overrides under `topics:`.
///
/// Absent keys take the defaults documented on each field (the `DEFAULT_*`
/// constants of this module). Use [`SpoolConfig::for_topic`] to get the
/// settings of one topic as plain values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpoolConfig {
    /// Roll to a new segment once the active one reaches this size.
    /// Default `1GiB`; at least `64KiB`, at most `2GiB`.
    pub segment_bytes: ByteSize,
    /// Roll to a new segment once the active one is this old, so time-based
    /// retention can delete data from quiet partitions. Default `7d`.
    pub segment_age: HumanDuration,
    /// Bytes of log between two entries of the sparse offset and time
    /// indexes: smaller means faster lookups and bigger indexes.
    /// Default `4KiB`.
    pub index_interval_bytes: ByteSize,
    /// Maximum size of one index file; a full index rolls the segment.
    /// Default `10MiB`; at least `4KiB`.
    pub index_bytes: ByteSize,
    /// Largest record batch a producer may send; larger ones are rejected
    /// with MESSAGE_TOO_LARGE. Default `1MiB`; at most `segment_bytes`.
    pub max_batch_bytes: ByteSize,
    /// Delete a partition's oldest segments while it is larger than this.
    /// `null` (the default) means no size limit.
    pub retention_bytes: Option<ByteSize>,
    /// Delete segments whose newest record is older than this. `null` keeps
    /// data forever. Default `7d`.
    #[serde(default = "default_retention_age")]
    pub retention_age: Option<HumanDuration>,
    /// How often retention (`retention_bytes`, `retention_age`) is applied
    /// to every partition (Kafka's `log.retention.check.interval.ms`).
    /// Between checks a partition can outgrow `retention_bytes` by what is
    /// written meanwhile. Default `1m`, where Kafka's is `5m`: a check is
    /// done in memory, a few microseconds per partition, unless it deletes
    /// segments. Must be greater than zero; the check runs on a 50ms tick,
    /// so shorter intervals act as 50ms. Applies to all topics: it cannot be
    /// overridden per topic.
    pub retention_check_interval: HumanDuration,
    /// When to `fsync`: `every_batch`, `interval` or `os`.
    /// Default `interval`.
    pub durability: Durability,
    /// Under `durability: interval`, sync at least this often. `null` (or
    /// absent) means `1s`. Setting it under another policy is an error,
    /// because it would have no effect.
    pub flush_interval: Option<HumanDuration>,
    /// Under `durability: interval`, also sync once this many bytes are
    /// unsynced. `null` (the default) means no byte trigger. Setting it
    /// under another policy is an error, because it would have no effect.
    pub flush_bytes: Option<ByteSize>,
    /// Per-topic overrides, by topic name. Each takes the keys above except
    /// `topics`, all optional; absent keys inherit the values above.
    #[serde(deserialize_with = "unique_topics")]
    pub topics: BTreeMap<String, TopicOverrides>,
}

fn default_retention_age() -> Option<HumanDuration> {
    Some(DEFAULT_RETENTION_AGE)
}

impl Default for SpoolConfig {
    fn default() -> Self {
        SpoolConfig {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            segment_age: DEFAULT_SEGMENT_AGE,
            index_interval_bytes: DEFAULT_INDEX_INTERVAL_BYTES,
            index_bytes: DEFAULT_INDEX_BYTES,
            max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
            retention_bytes: None,
            retention_age: default_retention_age(),
            retention_check_interval: DEFAULT_RETENTION_CHECK_INTERVAL,
            durability: Durability::default(),
            flush_interval: None,
            flush_bytes: None,
            topics: BTreeMap::new(),
        }
    }
}

/// Overrides for one topic under `spool.topics`. `None` means "inherit
/// from the `spool:` defaults". For keys that accept `null` in the defaults
/// (`retention_bytes`, `retention_age`, `flush_bytes`), `Some(None)` is an
/// explicit `null`: unlimited, forever, or no byte trigger for this topic.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TopicOverrides {
    /// Overrides `spool.segment_bytes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment_bytes: Option<ByteSize>,
    /// Overrides `spool.segment_age`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment_age: Option<HumanDuration>,
    /// Overrides `spool.index_interval_bytes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index_interval_bytes: Option<ByteSize>,
    /// Overrides `spool.index_bytes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index_bytes: Option<ByteSize>,
    /// Overrides `spool.max_batch_bytes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_batch_bytes: Option<ByteSize>,
    /// Overrides `spool.retention_bytes`; `null` means unlimited.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "explicit_null")]
    pub retention_bytes: Option<Option<ByteSize>>,
    /// Overrides `spool.retention_age`; `null` means keep forever.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "explicit_null")]
    pub retention_age: Option<Option<HumanDuration>>,
    /// Overrides `spool.durability`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub durability: Option<Durability>,
    /// Overrides `spool.flush_interval`; only allowed when this topic's
    /// durability is `interval`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flush_interval: Option<HumanDuration>,
    /// Overrides `spool.flush_bytes`; `null` means no byte trigger. Only
    /// allowed when this topic's durability is `interval`.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "explicit_null")]
    pub flush_bytes: Option<Option<ByteSize>>,
}

/// Deserializes a present key into `Some(value)`, keeping an explicit
/// `null` as `Some(None)`; an absent key stays `None` via `#[serde(default)]`.
fn explicit_null<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// Deserializes the `topics` map, rejecting a topic listed twice.
fn unique_topics<'de, D>(deserializer: D) -> Result<BTreeMap<String, TopicOverrides>, D::Error>
where
    D: Deserializer<'de>,
{
    crate::names::unique_map(
        deserializer,
        "topic",
        "list each topic once, with all its overrides",
    )
}

/// The spool settings of one topic, resolved: the topic's overrides merged
/// onto the `spool:` defaults, in plain units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicSpoolConfig {
    /// Roll the active segment at this many bytes.
    pub segment_bytes: u64,
    /// Roll the active segment at this age.
    pub segment_age: Duration,
    /// Bytes of log between sparse index entries.
    pub index_interval_bytes: u64,
    /// Maximum size of one index file in bytes.
    pub index_bytes: u64,
    /// Largest accepted record batch in bytes.
    pub max_batch_bytes: u64,
    /// Size limit per partition; `None` is unlimited.
    pub retention_bytes: Option<u64>,
    /// Age limit per segment (by its newest record); `None` keeps forever.
    pub retention_age: Option<Duration>,
    /// The fsync policy.
    pub durability: Durability,
    /// Longest time between syncs; meaningful only for
    /// [`Durability::Interval`].
    pub flush_interval: Duration,
    /// Unsynced bytes that trigger a sync under [`Durability::Interval`];
    /// `None` is no byte trigger, and always `None` under other policies.
    pub flush_bytes: Option<u64>,
}

impl Default for TopicSpoolConfig {
    /// The built-in defaults, as for a topic with no overrides in an empty
    /// configuration.
    fn default() -> Self {
        SpoolConfig::default().defaults()
    }
}

impl SpoolConfig {
    /// The settings of `topic`: its overrides under `topics` merged onto
    /// the defaults of this section. Topics without overrides get the
    /// defaults.
    pub fn for_topic(&self, topic: &str) -> TopicSpoolConfig {
        let base = self.defaults();
        let mut resolved = match self.topics.get(topic) {
            Some(overrides) => overrides.apply(base),
            None => base,
        };
        if resolved.durability != Durability::Interval {
            // Inherited from defaults written for the interval policy.
            resolved.flush_bytes = None;
        }
        resolved
    }

    /// The defaults of this section as plain values.
    fn defaults(&self) -> TopicSpoolConfig {
        TopicSpoolConfig {
            segment_bytes: self.segment_bytes.bytes(),
            segment_age: self.segment_age.duration(),
            index_interval_bytes: self.index_interval_bytes.bytes(),
            index_bytes: self.index_bytes.bytes(),
            max_batch_bytes: self.max_batch_bytes.bytes(),
            retention_bytes: self.retention_bytes.map(ByteSize::bytes),
            retention_age: self.retention_age.map(HumanDuration::duration),
            durability: self.durability,
            flush_interval: self.flush_interval.unwrap_or(DEFAULT_FLUSH_INTERVAL).duration(),
            flush_bytes: self.flush_bytes.map(ByteSize::bytes),
        }
    }

    /// This section with defaults written out: `flush_interval` is filled
    /// in when the policy is `interval`. Overrides stay as written.
    pub(crate) fn effective(&self) -> SpoolConfig {
        let mut spool = self.clone();
        if spool.durability == Durability::Interval && spool.flush_interval.is_none() {
            spool.flush_interval = Some(DEFAULT_FLUSH_INTERVAL);
        }
        spool
    }

    /// Checks value ranges and consistency, for the defaults and then for
    /// every topic as resolved. `prefix` is the key path of this section.
    pub(crate) fn validate(&self, prefix: &str) -> Result<(), Invalid> {
        if self.retention_check_interval.is_zero() {
            return Err(Invalid::new(
                format!("{prefix}.retention_check_interval"),
                "must be greater than zero",
            ));
        }
        let defaults = self.defaults();
        check_layer(&defaults, |field| match field {
            Field::FlushInterval => self.flush_interval.is_some(),
            Field::FlushBytes => self.flush_bytes.is_some(),
            _ => true,
        })
        .map_err(|(field, message)| Invalid::new(format!("{prefix}.{}", field.name()), message))?;

        for (topic, overrides) in &self.topics {
            let topic_path = format!("{prefix}.topics.{topic}");
            if let Err(why) = check_topic_name(topic) {
                return Err(Invalid::new(
                    topic_path,
                    format!("invalid topic name `{topic}`: {why}"),
                ));
            }
            check_layer(&overrides.apply(defaults), |field| overrides.sets(field)).map_err(
                |(field, message)| Invalid::new(format!("{topic_path}.{}", field.name()), message),
            )?;
        }
        Ok(())
    }
}

impl TopicOverrides {
    /// `base` with these overrides applied.
    fn apply(&self, base: TopicSpoolConfig) -> TopicSpoolConfig {
        TopicSpoolConfig {
            segment_bytes: self.segment_bytes.map_or(base.segment_bytes, ByteSize::bytes),
            segment_age: self.segment_age.map_or(base.segment_age, HumanDuration::duration),
            index_interval_bytes: self
                .index_interval_bytes
                .map_or(base.index_interval_bytes, ByteSize::bytes),
            index_bytes: self.index_bytes.map_or(base.index_bytes, ByteSize::bytes),
            max_batch_bytes: self.max_batch_bytes.map_or(base.max_batch_bytes, ByteSize::bytes),
            retention_bytes: self
                .retention_bytes
                .map_or(base.retention_bytes, |v| v.map(ByteSize::bytes)),
            retention_age: self
                .retention_age
                .map_or(base.retention_age, |v| v.map(HumanDuration::duration)),
            durability: self.durability.unwrap_or(base.durability),
            flush_interval: self
                .flush_interval
                .map_or(base.flush_interval, HumanDuration::duration),
            flush_bytes: self
                .flush_bytes
                .map_or(base.flush_bytes, |v| v.map(ByteSize::bytes)),
        }
    }

    /// Whether this override writes `field`.
    fn sets(&self, field: Field) -> bool {
        match field {
            Field::SegmentBytes => self.segment_bytes.is_some(),
            Field::SegmentAge => self.segment_age.is_some(),
            Field::IndexIntervalBytes => self.index_interval_bytes.is_some(),
            Field::IndexBytes => self.index_bytes.is_some(),
            Field::MaxBatchBytes => self.max_batch_bytes.is_some(),
            Field::RetentionBytes => self.retention_bytes.is_some(),
            Field::RetentionAge => self.retention_age.is_some(),
            Field::FlushInterval => self.flush_interval.is_some(),
            Field::FlushBytes => self.flush_bytes.is_some(),
        }
    }
}

/// The keys a validation rule can blame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    SegmentBytes,
    SegmentAge,
    IndexIntervalBytes,
    IndexBytes,
    MaxBatchBytes,
    RetentionBytes,
    RetentionAge,
    FlushInterval,
    FlushBytes,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::SegmentBytes => "segment_bytes",
            Field::SegmentAge => "segment_age",
            Field::IndexIntervalBytes => "index_interval_bytes",
            Field::IndexBytes => "index_bytes",
            Field::MaxBatchBytes => "max_batch_bytes",
            Field::RetentionBytes => "retention_bytes",
            Field::RetentionAge => "retention_age",
            Field::FlushInterval => "flush_interval",
            Field::FlushBytes => "flush_bytes",
        }
    }
}

/// Checks one layer of settings (the defaults, or a topic as resolved).
///
/// A rule fails only if the layer writes one of the keys the rule involves
/// (`sets`), and the error blames the first such key. For a topic, keys it
/// inherits were already checked with the defaults, so a conflict is always
/// reported where the topic introduced it.
fn check_layer(v: &TopicSpoolConfig, sets: impl Fn(Field) -> bool) -> Result<(), (Field, String)> {
    use Field::*;

    let size = |n: u64| ByteSize(n).to_string();
    let rules: [(bool, &[Field], String); 13] = [
        (
            v.segment_bytes < MIN_SEGMENT_BYTES.bytes(),
            &[SegmentBytes],
            format!(
                "{} is too small; a segment must be at least {MIN_SEGMENT_BYTES}",
                size(v.segment_bytes)
            ),
        ),
        (
            v.segment_bytes > MAX_SEGMENT_BYTES.bytes(),
            &[SegmentBytes],
            format!(
                "{} is too large; a segment can be at most {MAX_SEGMENT_BYTES}",
                size(v.segment_bytes)
            ),
        ),
        (
            v.segment_age.is_zero(),
            &[SegmentAge],
            "must be greater than zero".into(),
        ),
        (
            v.index_interval_bytes == 0,
            &[IndexIntervalBytes],
            "must be greater than zero".into(),
        ),
        (
            v.index_bytes < MIN_INDEX_BYTES.bytes(),
            &[IndexBytes],
            format!(
                "{} is too small; an index must be at least {MIN_INDEX_BYTES}",
                size(v.index_bytes)
            ),
        ),
        (
            v.max_batch_bytes == 0,
            &[MaxBatchBytes],
            "must be greater than zero".into(),
        ),
        (
            v.max_batch_bytes > v.segment_bytes,
            &[MaxBatchBytes, SegmentBytes],
            format!(
                "max_batch_bytes ({}) is larger than segment_bytes ({}); \
                 a batch must fit in one segment",
                size(v.max_batch_bytes),
                size(v.segment_bytes)
            ),
        ),
        (
            v.retention_bytes == Some(0),
            &[RetentionBytes],
            "must be greater than zero; use null for no size limit".into(),
        ),
        (
            v.retention_age == Some(Duration::ZERO),
            &[RetentionAge],
            "must be greater than zero; use null to keep data forever".into(),
        ),
        (
            v.flush_interval.is_zero(),
            &[FlushInterval],
            "must be greater than zero; use `durability: every_batch` to sync every batch".into(),
        ),
        (
            v.flush_bytes == Some(0),
            &[FlushBytes],
            "must be greater than zero; use null for no byte trigger".into(),
        ),
        (
            v.durability != Durability::Interval,
            &[FlushInterval],
            no_effect(v.durability),
        ),
        (
            v.durability != Durability::Interval && v.flush_bytes.is_some(),
            &[FlushBytes],
            no_effect(v.durability),
        ),
    ];
    for (failed, fields, message) in rules {
        if !failed {
            continue;
        }
        if let Some(&field) = fields.iter().find(|&&f| sets(f)) {
            return Err((field, message));
        }
    }
    Ok(())
}

fn no_effect(durability: Durability) -> String {
    format!(
        "has no effect with `durability: {}`; it applies only to `durability: interval` \
         (remove it, or set durability to interval)",
        durability.as_str()
    )
}

/// Checks a topic name against Kafka's rules: 1 to 249 characters of
/// `[a-zA-Z0-9._-]`, and not `.` or `..`.
pub(crate) fn check_topic_name(name: &str) -> Result<(), String> {
    const MAX_LEN: usize = 249;
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name == "." || name == ".." {
        return Err("`.` and `..` are not allowed".into());
    }
    if name.len() > MAX_LEN {
        return Err(format!(
            "is {} characters long; at most {MAX_LEN} are allowed",
            name.len()
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "contains {bad:?}; only ASCII letters, digits, `.`, `_` and `-` are allowed"
        ));
    }
    Ok(())
}
