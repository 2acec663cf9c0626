//! Several `strait serve` instances as one logical cluster (`instances:`),
//! for the tests and the instances benchmark: start them, and watch what
//! they show clients.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Strait;

/// `n` instances routing every topic to `kafka`, meeting in group
/// `group` there; the directory holds their configuration.
pub fn instances(kafka: &str, group: &str, n: usize) -> (Vec<Strait>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strait.yaml");
    std::fs::write(
        &path,
        format!(
            "clusters:\n  up: {{ bootstrap: [\"{kafka}\"] }}\n\
             routes:\n  - {{ regex: \".*\", to: up }}\n\
             instances: {{ cluster: up, group: {group}, session_timeout: 6s }}\n"
        ),
    )
    .unwrap();
    let straits = (0..n)
        .map(|_| {
            Strait::start_logging(
                &std::env::var("STRAIT_INSTANCES_LOG").unwrap_or_else(|_| "info".into()),
                &["--config", path.to_str().unwrap()],
            )
        })
        .collect();
    (straits, dir)
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// What `strait`'s Metadata shows clients (all topics).
pub fn metadata(
    runtime: &tokio::runtime::Runtime,
    strait: &Strait,
) -> Option<Arc<strait_upstream::Metadata>> {
    runtime.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(5),
            super::cluster(&strait.bootstrap()).refresh(),
        )
        .await
        .ok()?
        .ok()
    })
}

/// The brokers `strait` lists (`host:port`), sorted.
pub fn brokers(runtime: &tokio::runtime::Runtime, strait: &Strait) -> Vec<String> {
    metadata(runtime, strait)
        .map(|m| {
            m.brokers
                .values()
                .cloned()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until each of `live` lists exactly them as the brokers; returns
/// how long that took.
pub fn wait_listed(runtime: &tokio::runtime::Runtime, live: &[&Strait], within: Duration) -> Duration {
    let start = Instant::now();
    let want: Vec<String> = live
        .iter()
        .map(|s| s.bootstrap())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    loop {
        let seen: Vec<Vec<String>> = live.iter().map(|s| brokers(runtime, s)).collect();
        if seen.iter().all(|b| *b == want) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "the instances do not list {want:?} after {within:?}: {seen:?}\n--- logs ---\n{}",
            live.iter().map(|s| s.log()).collect::<Vec<_>>().join("\n---\n")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn signal(strait: &Strait, name: &str) {
    let pid = strait.pid().expect("running").to_string();
    let status = Command::new("kill").args([name, &pid]).status().unwrap();
    assert!(status.success());
}
