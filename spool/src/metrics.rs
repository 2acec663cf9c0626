//! The spool's one process-wide metric: how long each fsync takes
//! (`strait_spool_fsync_duration_seconds`), whatever partition it is for.
//! Per-topic sizes are read from the partitions when scraped, by whoever
//! owns them (the gateway).

use std::sync::LazyLock;
use std::time::Instant;

use prometheus::{Histogram, HistogramOpts, Registry};

/// Buckets, seconds: 50 µs (a cached or battery-backed write) to 10 s (a
/// disk in trouble).
const BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

static FSYNC: LazyLock<Histogram> = LazyLock::new(|| {
    Histogram::with_opts(
        HistogramOpts::new(
            "strait_spool_fsync_duration_seconds",
            "One fsync of the spool: fdatasync of a segment, or syncfs for many partitions at once.",
        )
        .buckets(BUCKETS.to_vec()),
    )
    .expect("valid metric")
});

/// Adds the fsync histogram to `registry` (once per registry).
pub fn register(registry: &Registry) -> prometheus::Result<()> {
    registry.register(Box::new(FSYNC.clone()))
}

/// Runs one fsync, timing it.
pub(crate) fn timed<T>(sync: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = sync();
    FSYNC.observe(start.elapsed().as_secs_f64());
    out
}
