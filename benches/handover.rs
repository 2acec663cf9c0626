//! The handover benchmark (issue 24): how long a partition stops being
//! copied when the processes sharing a mirror change.
//!
//! Run it with `scripts/bench-handover`. Two single-node Apache Kafka
//! clusters (the tests' harness starts them); Kafka's ProducerPerformance
//! writes a 32-partition topic at 2,000 records/s (200 B, round robin over
//! the partitions) throughout, and
//! three `strait mirror` processes with the same config (the default
//! `session_timeout` of 10 s) share it. A probe reads the target's end of
//! every partition every 50 ms. Then, each once the processes share the
//! partitions again:
//!
//! - **quiet**: nothing happens (the probe's own resolution and the
//!   producer's batching);
//! - **kill**: one process is SIGKILLed (its partitions wait for its
//!   session to expire, then move);
//! - **join**: a fourth process starts (a clean handover: every process
//!   stops, writes what it fetched, commits, joins again);
//! - **stop**: one process stops with SIGTERM (it leaves the group, the
//!   others take over at once).
//!
//! A partition's pause is the longest time its target end stood still
//! from the event until the processes share the partitions again and it
//! moved once more. Reported: the median and worst partition per event,
//! beside the processes' own `strait_mirror_rebalance_pause_seconds`
//! (from stopping their partitions to all of their new ones streaming).
//! The goal for a clean handover is under 5 s (Kafka Connect's
//! `scheduled.rebalance.max.delay.ms` is 5 minutes). The bench fails on
//! a record lost or doubled, never on a slow handover.

#[path = "common/mod.rs"]
mod common;

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::support::kafka::Kafka;
use common::support::{self, cluster, MirrorProc};
use common::Res;
use serde_json::Value;

const TOPIC: &str = "ho-shared";
const PARTITIONS: i32 = 32;
const RATE: u64 = 2_000;

fn main() {
    if let Err(e) = run() {
        eprintln!("bench-handover: {e}");
        std::process::exit(1);
    }
}

/// The target's end of every partition, as the probe saw it.
type Samples = Arc<Mutex<Vec<(Instant, Vec<i64>)>>>;

/// The partitions each of `mirrors` owns, once they share all of them
/// evenly in one generation.
fn shared(mirrors: &[&MirrorProc]) -> bool {
    let mut total = 0;
    let mut generations = Vec::new();
    for m in mirrors {
        let Ok(api) = serde_json::from_str::<Value>(&m.get("/api/v1/mirrors")) else {
            return false;
        };
        let mirror = &api["mirrors"][0];
        let Some(generation) = mirror["member"]["generation"].as_i64() else {
            return false;
        };
        let owned = mirror["partitions"].as_array().map_or(0, Vec::len);
        if owned < PARTITIONS as usize / mirrors.len() {
            return false;
        }
        generations.push(generation);
        total += owned;
    }
    total == PARTITIONS as usize && generations.iter().all(|g| *g == generations[0])
}

fn wait_shared(mirrors: &[&MirrorProc]) -> Res<Instant> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !shared(mirrors) {
        if Instant::now() > deadline {
            return Err(format!(
                "{} processes did not share the partitions in 120 s",
                mirrors.len()
            ));
        }
        thread::sleep(Duration::from_millis(50));
    }
    Ok(Instant::now())
}

/// Each partition's longest standstill from `from` until it moved after
/// `settled`.
fn pauses(samples: &[(Instant, Vec<i64>)], from: Instant, settled: Instant) -> Vec<f64> {
    (0..PARTITIONS as usize)
        .map(|p| common::standstill(samples, p, from, settled).as_secs_f64())
        .collect()
}

fn summary(pauses: &mut [f64]) -> String {
    pauses.sort_by(f64::total_cmp);
    format!(
        "median partition {:.2} s, worst {:.2} s",
        pauses[pauses.len() / 2],
        pauses[pauses.len() - 1]
    )
}

/// `strait_mirror_rebalance_pause_seconds` of `mirrors`: (sum, count).
fn own_pauses(mirrors: &[&MirrorProc]) -> (f64, f64) {
    mirrors.iter().fold((0.0, 0.0), |(s, c), m| {
        let metrics = m.get("/metrics");
        (
            s + support::metric_sum(&metrics, "strait_mirror_rebalance_pause_seconds_sum", ""),
            c + support::metric_sum(&metrics, "strait_mirror_rebalance_pause_seconds_count", ""),
        )
    })
}

fn run() -> Res<()> {
    println!(
        "handover: Kafka 4.1.1 to Kafka 4.1.1, 3 strait mirror processes, {PARTITIONS} partitions at {RATE} records/s; {} cores ({}), load {}",
        common::nproc(),
        common::cpu_model(),
        common::loadavg()
    );
    let source = Kafka::start(0, &[]);
    let target = Kafka::start(0, &[]);
    let (src, dst) = (source.bootstrap(), target.bootstrap());
    source.create_topic(TOPIC, PARTITIONS, &[]);
    let records = RATE * 90;
    let config = format!(
        "clusters:\n  nj: {{ bootstrap: [\"{src}\"] }}\n  cq: {{ bootstrap: [\"{dst}\"] }}\n\
         admin:\n  listen: \"{{admin}}\"\nmirrors:\n  m:\n    source: nj\n    target: cq\n    \
         topics: \"{TOPIC}\"\n    discovery_interval: 1s\n"
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let samples: Samples = Arc::default();
    let probing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    thread::scope(|scope| -> Res<()> {
        let producer = scope.spawn(|| {
            let props = format!("bootstrap.servers={src}");
            source.tool(
                "org.apache.kafka.tools.ProducerPerformance",
                &[
                    "--topic",
                    TOPIC,
                    "--num-records",
                    &records.to_string(),
                    "--record-size",
                    "200",
                    "--throughput",
                    &RATE.to_string(),
                    "--producer-props",
                    &props,
                    "acks=all",
                    "linger.ms=5",
                    // Every partition gets records all the time (the
                    // default partitioner fills one partition's batch
                    // before it moves on: seconds between a partition's
                    // batches at this rate).
                    "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner",
                ],
            );
        });
        let mut first: Vec<MirrorProc> = (0..3).map(|_| MirrorProc::start(&config)).collect();
        wait_shared(&first.iter().collect::<Vec<_>>())?;
        {
            let samples = samples.clone();
            let probing = probing.clone();
            let dst = dst.clone();
            scope.spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime");
                let target = cluster(&dst);
                while probing.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Some(ends) = common::ends(&runtime, &target, TOPIC, PARTITIONS) {
                        samples.lock().expect("samples").push((Instant::now(), ends));
                    }
                    thread::sleep(Duration::from_millis(50));
                }
            });
        }
        thread::sleep(Duration::from_secs(10));
        let quiet = Instant::now();
        thread::sleep(Duration::from_secs(10));
        let mut quiet_pauses = pauses(&samples.lock().expect("samples"), quiet, Instant::now());
        println!("  quiet (3 processes):      {}", summary(&mut quiet_pauses));

        let before = own_pauses(&[&first[1], &first[2]]);
        let kill = Instant::now();
        first[0].kill();
        let settled = wait_shared(&[&first[1], &first[2]])?;
        thread::sleep(Duration::from_secs(5));
        let after = own_pauses(&[&first[1], &first[2]]);
        println!(
            "  kill one of three (SIGKILL, session 10 s): {}; moved in {:.2} s; the survivors' own pause {:.2} s",
            summary(&mut pauses(&samples.lock().expect("samples"), kill, settled)),
            (settled - kill).as_secs_f64(),
            (after.0 - before.0) / (after.1 - before.1).max(1.0)
        );

        let joined = MirrorProc::start(&config);
        let join = Instant::now();
        let before = own_pauses(&[&first[1], &first[2]]);
        let settled = wait_shared(&[&first[1], &first[2], &joined])?;
        thread::sleep(Duration::from_secs(5));
        let after = own_pauses(&[&first[1], &first[2]]);
        println!(
            "  a process joins (clean handover): {}; shared in {:.2} s; the others' own pause {:.2} s",
            summary(&mut pauses(&samples.lock().expect("samples"), join, settled)),
            (settled - join).as_secs_f64(),
            (after.0 - before.0) / (after.1 - before.1).max(1.0)
        );

        let before = own_pauses(&[&first[2], &joined]);
        let stop = Instant::now();
        first[1].stop();
        let settled = wait_shared(&[&first[2], &joined])?;
        thread::sleep(Duration::from_secs(5));
        let after = own_pauses(&[&first[2], &joined]);
        println!(
            "  one stops (SIGTERM, leaves): {}; moved in {:.2} s; the others' own pause {:.2} s",
            summary(&mut pauses(&samples.lock().expect("samples"), stop, settled)),
            (settled - stop).as_secs_f64(),
            (after.0 - before.0) / (after.1 - before.1).max(1.0)
        );
        probing.store(false, std::sync::atomic::Ordering::Relaxed);
        producer.join().map_err(|_| "the producer panicked")?;
        // Every record once: the target's ends are the source's.
        let source_ends = common::ends(&runtime, &cluster(&src), TOPIC, PARTITIONS).ok_or("source ends")?;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let target_ends =
                common::ends(&runtime, &cluster(&dst), TOPIC, PARTITIONS).ok_or("target ends")?;
            if target_ends == source_ends {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the target's ends {target_ends:?} are not the source's {source_ends:?}"
                ));
            }
            thread::sleep(Duration::from_millis(500));
        }
        Ok(())
    })?;
    println!("  every partition's end on the target is the source's ({records} records)");
    Ok(())
}
