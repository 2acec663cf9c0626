//! The spool: Strait's on-disk log of Kafka record batches.
//!
//! A *partition* ([`Partition`]) is a directory of *segments*. Each segment
//! is a preallocated log file holding record batches exactly as producers
//! sent them (only the base offset and leader epoch are rewritten), with a
//! sparse offset index and a sparse time index, both memory-mapped.
//!
//! - [`config`]: a partition's settings ([`LogConfig`], [`Durability`]).
//! - `segment`, `index`, `map`: one segment's files; `map` is the only
//!   module with `unsafe` (the memory maps).
//! - [`log`]: the partition: append, read, roll, retention, sync, crash
//!   recovery.
//! - [`pool`]: the I/O threads that run appends, syncs and cold reads off an
//!   async runtime, handing back futures.
//! - [`verify`]: read-only checking and dumping of partitions on disk.
//! - [`metrics`]: the fsync latency histogram.
//!
//! The batch format itself is `strait_batch`'s. The crate knows nothing of
//! sockets or async runtimes: its futures are plain `std::future::Future`s
//! completed by its own threads.

pub mod config;
pub mod error;
mod index;
pub mod log;
mod map;
pub mod metrics;
pub mod pool;
mod segment;
pub mod verify;

pub use config::{Durability, LogConfig};
pub use error::{Result, Side, SpoolError};
pub use log::{AppendInfo, FileRange, Partition, ReadResult, RecoveryReport};
pub use pool::IoPool;
pub use segment::{ScanStop, FILES_PER_SEGMENT};
