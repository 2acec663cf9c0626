//! Consumer lag, watched: how far each consumer group is behind on every
//! cluster Strait knows, and a verdict on its recent history
//! ([`status`]), the same evaluator that judges a mirror's partitions (a
//! mirror consumes its source).
//!
//! - [`groups`]: what one poll of a cluster found ([`Snapshot`]): each
//!   group's state, members and per-partition lag, never negative
//!   ([`Standing`] says why a lag is not a number).
//! - [`kafka`]: one poll of a Kafka cluster over the protocol.
//! - [`poll`]: what a cluster's groups are read from ([`Source`]: a Kafka
//!   cluster, or Strait's own spool in the binary) and the loop that
//!   polls it every `lag.interval`.
//! - [`tracker`]: every cluster's last poll, each group partition's
//!   window of samples and verdicts, and the Prometheus series read from
//!   them when scraped.
//! - [`status`]: the Burrow-style evaluator of a window of samples.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod groups;
pub mod kafka;
pub mod poll;
pub mod status;
pub mod tracker;

pub use groups::{first_timestamp, GroupLag, PartitionLag, Snapshot, Standing, Watch};
pub use poll::Source;
pub use tracker::{GroupView, LagCollector, PartitionView, Tracker};
