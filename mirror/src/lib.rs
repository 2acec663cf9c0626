//! Strait's mirror: the pipeline that replicates partitions between clusters,
//! its offset tracking and its lag metrics.
//!
//! - [`batch`]: source batches (as fetched) to target batches (ready to
//!   produce): pass-through with the mirror's producer fields, re-encoding
//!   where the target would refuse a batch or records must be dropped
//!   (compaction gaps, records before the position, control and aborted
//!   transactional batches, `LogAppendTime`, batches above the target's
//!   `max.message.bytes`), and fingerprints to resume after a restart.
//!
//! Pure code so far: the fetch and produce loops, and the `mirror`
//! subcommand, are still to come.

pub mod batch;
