//! Strait's mirror: the pipeline that replicates partitions between clusters,
//! its offset tracking and its lag metrics.
//!
//! Not built yet: this crate is the home of the `mirror` subcommand.
