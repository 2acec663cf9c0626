//! Strait's mirror: replicates topics from a source Kafka cluster to a
//! target cluster, batch for batch, exactly once across crashes, with lag
//! metrics.
//!
//! - [`mirror`]: one mirror: topic discovery, the group membership loop
//!   (a task per partition this process owns, handed over on every
//!   rebalance), the commit loop, shutdown; [`membership`]: the mirror's
//!   group on the source and the assignor that shares the partitions
//!   among the processes running the mirror.
//! - [`partition`]: one partition's fetch and produce tasks and their
//!   supervisor; [`plan`]: how much its fetches ask for and where
//!   fetches ahead start (the source's density, from its log before the
//!   first answer); [`shared`]: what a mirror's partitions share (clusters,
//!   budget, settings); [`state`]: what each partition's progress is (the
//!   exact source-to-target point, lag, counters) and the mirror's set of
//!   them.
//! - [`resume`]: where a partition goes on from after a start or an error,
//!   by comparing the target's tail with the source.
//! - [`batch`]: source batches (as fetched) to target batches (ready to
//!   produce): pass-through with the mirror's producer fields, re-encoding
//!   where the target would refuse a batch or records must be dropped
//!   (compaction gaps, records before the position, control and aborted
//!   transactional batches, `LogAppendTime`, batches above the target's
//!   `max.message.bytes`), and fingerprints to resume after a restart.
//! - [`grouped`]: fetches and produces of many partitions grouped into
//!   requests per leader (several Fetches in flight per source broker, on
//!   connections of their own, sized from the link's measured round trip
//!   and rate; several Produce requests per target broker).
//! - [`topics`]: target topics created with the source's partitions and
//!   configs; [`positions`]: committed positions on the source.
//! - [`offset_map`]: the source-to-target offset map (segments, the map
//!   topic's entries, the recorder each partition feeds, the reader's
//!   map); [`translate`]: groups' committed offsets translated with it and
//!   committed on the target; [`sync`]: the same every interval for the
//!   groups `sync_group_offsets` follows.
//! - [`metrics`]: the Prometheus metrics; [`status`]: each partition's
//!   Burrow-style status over a sliding window.
//! - [`error`]: [`MirrorError`], which side failed and whether the
//!   partition goes on.
//!
//! Modules depend one way: `mirror` on `membership` (which needs only
//! the upstream client), `mirror` on `sync` on `translate`, and on
//! `partition` on `resume` on `shared` on `metrics` and `state` on
//! `offset_map` (data only). The crate knows nothing of the gateway or the
//! spool (the record batch format is `strait_batch`'s); the `strait`
//! binary maps the configuration onto [`mirror::MirrorSpec`].

pub mod batch;
pub mod error;
pub mod grouped;
pub mod membership;
pub mod metrics;
pub mod mirror;
pub mod offset_map;
pub mod partition;
pub mod plan;
pub mod positions;
pub mod resume;
pub mod shared;
pub mod state;
pub mod status;
pub mod sync;
pub mod topics;
pub mod translate;

pub use error::MirrorError;

/// Resolves once `shutdown` is true (or its sender is gone), holding no
/// borrow of the value across an await.
pub(crate) async fn shut_down(shutdown: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}
