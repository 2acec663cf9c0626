//! The lag-watch benchmark (issue 23): what watching every consumer group
//! of a Kafka cluster costs `strait serve`, beside a lag exporter's polls
//! in the same run.
//!
//! Run it with `scripts/bench-lag`. On one single-node Apache Kafka (the
//! tests' harness starts it), a topic of 10 partitions
//! (`LAG_BENCH_PARTITIONS`) gets 200 records a partition, and 1,000
//! groups (`LAG_BENCH_GROUPS`) each commit an offset on every partition
//! (OffsetCommit with no member, as tools and standalone consumers do;
//! group g commits `(7g + 3p) % (end + 1)` on partition p, so lags differ
//! and some are 0). Then, in the same minute:
//!
//! - `strait serve` watching the cluster (`lag: { interval: 5s }`, per
//!   partition series): every poll lists, describes and reads the offsets
//!   of every group, the partitions' ends, and, once per committed offset,
//!   the oldest unread record's timestamp (lag in seconds);
//! - the Java AdminClient doing what kafka_exporter does every 5 s
//!   (`JavaClient lagpoll`: list and describe the groups, their offsets, the
//!   partitions' latest offsets; lag in records only). kafka_exporter
//!   itself is not served by the Go module proxy this project may use.
//!
//! Before the window, every one of Strait's `strait_group_lag_records`
//! series must equal the committed lag (end minus offset) exactly, and
//! the Java poller's summed lag must equal the same sum: the bench fails
//! on a wrong figure, never on a slow one. Over the window (after 15 s
//! of warm-up, `LAG_BENCH_SECONDS` long, default 60) it reports each
//! watcher's CPU seconds (Strait's from /proc, the JVM's own process CPU
//! time), its share of a core, its resident memory at the end and the
//! ratio of the two CPU figures.

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use common::support::kafka::Kafka;
use common::support::raw::Conn;
use common::support::{self, Strait};
use common::{env_u64, Res};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    FindCoordinatorRequest, GroupId, ListOffsetsRequest, OffsetCommitRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

const TOPIC: &str = "lag-bench";
/// Records written to each partition.
const RECORDS_PER_PARTITION: u64 = 200;
/// Warm-up before the measured window (the JVM's class loading and JIT,
/// Strait's first polls reading every timestamp).
const WARMUP_SECS: u64 = 15;
/// Kafka's "retry" error codes while `__consumer_offsets` is created and
/// loaded: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
/// NOT_COORDINATOR.
const COORDINATOR_STARTING: [i16; 3] = [14, 15, 16];

fn main() {
    if let Err(e) = run() {
        eprintln!("bench-lag: {e}");
        std::process::exit(1);
    }
}

fn run() -> Res<()> {
    let groups = env_u64("LAG_BENCH_GROUPS", 1000)? as usize;
    let partitions = env_u64("LAG_BENCH_PARTITIONS", 10)? as i32;
    let window = env_u64("LAG_BENCH_SECONDS", 60)?;
    println!(
        "lag watch: {groups} groups x {partitions} partitions on one Apache Kafka, polled every 5 s; \
         {} cores ({}), load {}",
        common::nproc(),
        common::cpu_model(),
        common::loadavg()
    );
    let kafka = Kafka::start(0, &[]);
    let bootstrap = kafka.bootstrap();
    kafka.create_topic(TOPIC, partitions, &[]);
    for p in 0..partitions {
        let produced = support::run_client(
            "ck_produce.py",
            &[
                "--bootstrap",
                &bootstrap,
                "--topic",
                TOPIC,
                "--partition",
                &p.to_string(),
                "--count",
                &RECORDS_PER_PARTITION.to_string(),
            ],
        );
        if produced["delivered"] != RECORDS_PER_PARTITION {
            return Err(format!("producing to partition {p}: {produced}"));
        }
    }
    let mut conn = Conn::open(kafka.port(), "lag-bench");
    let ends = ends(&mut conn, partitions)?;
    let started = Instant::now();
    let mut expected: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for g in 0..groups {
        let group = format!("lag-bench-{g:05}");
        let offsets: Vec<(i32, i64)> = (0..partitions)
            .map(|p| (p, (7 * g as i64 + 3 * p as i64) % (ends[p as usize] + 1)))
            .collect();
        commit(&mut conn, &group, &offsets)?;
        for (p, offset) in offsets {
            expected.insert((group.clone(), p), ends[p as usize] - offset);
        }
    }
    println!(
        "  {} offsets committed in {:.1} s; lag summed over them: {} records",
        expected.len(),
        started.elapsed().as_secs_f64(),
        expected.values().sum::<i64>()
    );

    let admin = support::free_port();
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let config = dir.path().join("strait.yaml");
    fs::write(
        &config,
        format!(
            "clusters:\n  k: {{ bootstrap: [\"{bootstrap}\"] }}\nadmin:\n  listen: \"127.0.0.1:{admin}\"\n\
             lag:\n  interval: 5s\n  clusters: [k]\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    let strait = Strait::start(&["--config", config.to_str().expect("a UTF-8 path")]);
    let pid = strait.pid().ok_or("strait serve exited")?;
    let first = Instant::now();
    exact_lag(admin, &expected, &strait)?;
    println!(
        "  Strait exports every partition's lag exactly ({} series) {:.1} s after it started",
        expected.len(),
        first.elapsed().as_secs_f64()
    );

    // The window: both watchers at once.
    let total = WARMUP_SECS + window;
    let java_bootstrap = bootstrap.clone();
    let java = thread::spawn(move || {
        support::run_client(
            "java4:lagpoll",
            &[
                "--bootstrap",
                &java_bootstrap,
                "--interval",
                "5",
                "--seconds",
                &total.to_string(),
                "--warmup",
                &WARMUP_SECS.to_string(),
            ],
        )
    });
    thread::sleep(Duration::from_secs(WARMUP_SECS));
    let ticks = || common::cpu_ticks_of(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?);
    let (t0, cpu0) = (Instant::now(), ticks().ok_or("reading Strait's CPU time")?);
    thread::sleep(Duration::from_secs(window));
    let (secs, cpu1) = (
        t0.elapsed().as_secs_f64(),
        ticks().ok_or("reading Strait's CPU time")?,
    );
    let strait_cpu = (cpu1 - cpu0) as f64 / common::clock_ticks();
    let strait_rss = rss(pid)?;
    let java = java.join().map_err(|_| "the Java poller panicked")?;
    if java["error"] != serde_json::Value::Null {
        return Err(format!("the Java poller: {java}"));
    }
    let java_lag = java["lag"].as_i64().unwrap_or(-1);
    let lag_sum: i64 = expected.values().sum();
    if java_lag != lag_sum || java["partitions"] != expected.len() {
        return Err(format!(
            "the Java poller read {java_lag} records of lag over {} partitions, not {lag_sum} over {}",
            java["partitions"],
            expected.len()
        ));
    }
    // Still exact after the window.
    exact_lag(admin, &expected, &strait)?;
    let java_cpu = java["cpu_seconds"].as_f64().unwrap_or(0.0);
    let java_secs = java["measured_seconds"].as_f64().unwrap_or(0.0);
    let java_rss = java["rss_bytes"].as_f64().unwrap_or(0.0);
    println!(
        "\n  {:<44} {:>10} {:>8} {:>9} {:>8}",
        "watcher", "CPU s", "% core", "RSS MB", "seconds"
    );
    let row = |name: &str, cpu: f64, over: f64, rss: f64, lag_seconds: &str| {
        println!(
            "  {name:<44} {cpu:>10.2} {:>8.2} {:>9.1} {lag_seconds:>8}",
            100.0 * cpu / over.max(1e-9),
            rss / 1e6
        );
    };
    row(
        "strait serve (lag: every 5 s)",
        strait_cpu,
        secs,
        strait_rss,
        "exact",
    );
    row(
        "Java AdminClient (kafka_exporter's requests)",
        java_cpu,
        java_secs,
        java_rss,
        "none",
    );
    println!(
        "\n  over {secs:.0} s (Java: {java_secs:.0} s, {} polls): Strait's CPU is {:.2}x the Java poller's \
         (goal: at most 1x kafka_exporter's), its memory {:.2}x",
        java["measured_polls"],
        (strait_cpu / secs) / (java_cpu / java_secs.max(1e-9)).max(1e-9),
        strait_rss / java_rss.max(1.0)
    );
    Ok(())
}

/// Each partition's high watermark, by partition.
fn ends(conn: &mut Conn, partitions: i32) -> Res<Vec<i64>> {
    let request = ListOffsetsRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partitions(
                (0..partitions)
                    .map(|p| {
                        ListOffsetsPartition::default()
                            .with_partition_index(p)
                            .with_timestamp(-1)
                    })
                    .collect(),
            )]);
    let response = conn.call(&request, 5);
    let mut ends = vec![-1; partitions as usize];
    for p in response.topics.iter().flat_map(|t| &t.partitions) {
        if p.error_code != 0 {
            return Err(format!(
                "ListOffsets of partition {}: error {}",
                p.partition_index, p.error_code
            ));
        }
        ends[p.partition_index as usize] = p.offset;
    }
    match ends.iter().any(|&e| e < 0) {
        true => Err(format!("ListOffsets left partitions out: {ends:?}")),
        false => Ok(ends),
    }
}

/// Commits `offsets` (partition, offset) of the topic for `group`, with
/// no member, after finding its coordinator (the single broker), retrying
/// while the offsets topic is created and loaded.
fn commit(conn: &mut Conn, group: &str, offsets: &[(i32, i64)]) -> Res<()> {
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partitions(
                offsets
                    .iter()
                    .map(|&(p, offset)| {
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(p)
                            .with_committed_offset(offset)
                    })
                    .collect(),
            )]);
    let deadline = Instant::now() + Duration::from_secs(60);
    // The first FindCoordinator creates the offsets topic.
    let find = FindCoordinatorRequest::default().with_key(StrBytes::from_string(group.to_owned()));
    while conn.call(&find, 3).error_code != 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(200));
    }
    loop {
        let response = conn.call(&request, 7);
        let errors: Vec<i16> = response
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| p.error_code)
            .filter(|&e| e != 0)
            .collect();
        match errors.first() {
            None => return Ok(()),
            Some(e) if COORDINATOR_STARTING.contains(e) && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(200));
            }
            Some(e) => return Err(format!("OffsetCommit of {group}: error {e}")),
        }
    }
}

/// Waits (at most 2 minutes) until Strait's `strait_group_lag_records`
/// series are exactly `expected`, by group and partition.
fn exact_lag(admin: u16, expected: &BTreeMap<(String, i32), i64>, strait: &Strait) -> Res<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let metrics = support::http(admin, "/metrics").1;
        let mut found: BTreeMap<(String, i32), i64> = BTreeMap::new();
        for line in metrics
            .lines()
            .filter(|l| l.starts_with("strait_group_lag_records{"))
        {
            let label = |name: &str| {
                let start = line.find(&format!("{name}=\""))? + name.len() + 2;
                line[start..].split('"').next().map(str::to_owned)
            };
            let (Some(group), Some(partition), Some(value)) =
                (label("group"), label("partition"), line.rsplit(' ').next())
            else {
                continue;
            };
            let (Ok(partition), Ok(value)) = (partition.parse(), value.parse::<f64>()) else {
                continue;
            };
            found.insert((group, partition), value as i64);
        }
        // Lag 0 has a series too: every committed partition is listed.
        if &found == expected {
            return Ok(());
        }
        if Instant::now() > deadline {
            let wrong = expected
                .iter()
                .filter(|(k, v)| found.get(*k) != Some(*v))
                .take(5)
                .map(|((g, p), v)| format!("{g}/{p}: {:?}, not {v}", found.get(&(g.clone(), *p))))
                .collect::<Vec<_>>();
            return Err(format!(
                "Strait's lag is not exact after 2 minutes ({} of {} series; e.g. {wrong:?}); its log:\n{}",
                found.len(),
                expected.len(),
                strait.log()
            ));
        }
        thread::sleep(Duration::from_secs(1));
    }
}

/// Resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> Res<f64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| e.to_string())?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb * 1024.0)
        .ok_or_else(|| "no VmRSS".to_owned())
}
