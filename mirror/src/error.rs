//! The mirror's errors. Each says which side failed (source cluster,
//! target cluster, the source's data) and whether the mirror retries by
//! itself ([`MirrorError::is_fatal`]: a partition stops only when going on
//! could lose or duplicate records).

use strait_upstream::UpstreamError;

use crate::batch::TransformError;

/// An error of one mirrored partition, or of the mirror as a whole.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MirrorError {
    /// The source cluster failed a request.
    #[error("source: {error}")]
    Source {
        /// What the upstream client said.
        error: UpstreamError,
    },
    /// The target cluster failed a request.
    #[error("target: {error}")]
    Target {
        /// What the upstream client said.
        error: UpstreamError,
    },
    /// The source sent batches that cannot be mirrored.
    #[error("source data at offset {offset}: {error}")]
    SourceData {
        /// Where the fetch started.
        offset: i64,
        /// What is wrong.
        error: TransformError,
    },
    /// The target's idempotent-producer state no longer matches the
    /// mirror's (the target lost it, or fenced the producer): the partition
    /// re-reads the target's tail and goes on from there.
    #[error("target producer state lost ({error}); re-reading the target's tail")]
    ProducerState {
        /// What the target said.
        error: UpstreamError,
    },
    /// The target partition holds records that do not match the source at
    /// the mirror's committed position: something else wrote to it, it
    /// lost records, or its brokers recompress batches (set the target
    /// topic's `compression.type` to `producer`). The partition stops;
    /// going on could duplicate or skip records.
    #[error(
        "target {target_topic}-{partition} diverged from source {source_topic}-{partition}: {detail}; \
         the partition stops (mirroring on could duplicate or skip records)"
    )]
    Diverged {
        /// Source topic.
        source_topic: String,
        /// Target topic.
        target_topic: String,
        /// Partition.
        partition: i32,
        /// What did not match.
        detail: String,
    },
    /// Source retention deleted records before they were mirrored and the
    /// mirror is set to stop (`on_lost_records: stop`).
    #[error(
        "source {topic}-{partition}: {count} records (offsets {from}..{to}) were deleted by retention \
         before they were mirrored; on_lost_records is `stop`"
    )]
    LostRecords {
        /// Source topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// First lost offset.
        from: i64,
        /// One past the last lost offset.
        to: i64,
        /// How many.
        count: i64,
    },
    /// The offset map on the target cannot be read, or cannot translate
    /// what was asked.
    #[error("offset map {topic} on the target: {detail}")]
    OffsetMap {
        /// The map topic.
        topic: String,
        /// What is wrong.
        detail: String,
    },
    /// Offsets were to be committed for a group that has members on the
    /// target: its consumers there would overwrite them, or be moved
    /// under their feet.
    #[error(
        "group {group} has {members} member(s) on the target (state {state}); stop its consumers \
         there, then apply again"
    )]
    GroupActive {
        /// The group.
        group: String,
        /// Its state.
        state: String,
        /// How many members.
        members: usize,
    },
}

impl MirrorError {
    /// Whether the partition must stop rather than retry.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            MirrorError::Diverged { .. } | MirrorError::LostRecords { .. }
        )
    }

    /// Every [`MirrorError::kind`].
    pub const KINDS: [&'static str; 8] = [
        "source",
        "target",
        "source_data",
        "producer_state",
        "diverged",
        "lost_records",
        "offset_map",
        "group_active",
    ];

    /// A short, stable name for the error's kind (a metric label).
    pub fn kind(&self) -> &'static str {
        match self {
            MirrorError::Source { .. } => "source",
            MirrorError::Target { .. } => "target",
            MirrorError::SourceData { .. } => "source_data",
            MirrorError::ProducerState { .. } => "producer_state",
            MirrorError::Diverged { .. } => "diverged",
            MirrorError::LostRecords { .. } => "lost_records",
            MirrorError::OffsetMap { .. } => "offset_map",
            MirrorError::GroupActive { .. } => "group_active",
        }
    }
}

/// Wraps a source-side upstream error.
pub(crate) fn source(error: UpstreamError) -> MirrorError {
    MirrorError::Source { error }
}

/// Wraps a target-side upstream error.
pub(crate) fn target(error: UpstreamError) -> MirrorError {
    MirrorError::Target { error }
}
