//! The instances benchmark (issue 26): what running several `strait
//! serve` instances as one logical cluster (`instances:`) costs and how
//! fast clients move, beside one instance and direct to Kafka, in one run
//! on one single-node Apache Kafka 4.1.1 (the tests' harness starts it).
//! `scripts/bench-router` runs it after the router benchmark;
//! `cargo bench --bench instances` alone.
//!
//! - **Throughput**: Kafka's ProducerPerformance (1 KiB records, acks=1,
//!   linger.ms 5, as fast as it goes, 8 partitions) direct, through one
//!   instance (no `instances:`) and through two instances (leadership
//!   spread over both), after an unmeasured run warming Kafka's JVM, each
//!   path twice in alternating order: the mean of its two, and its ratio
//!   to direct.
//! - **A new idempotent producer**: InitProducerId, then a batch under
//!   the producer id it gave, written with acks=all, 50 times per path:
//!   through Strait the first batch waits for the cluster's producer id
//!   to be obtained and mapped (one synced line in the data directory with
//!   one instance, a claim written to and read back from the shared topic
//!   with several).
//! - **Offset commit**: 200 synchronous commits of a librdkafka consumer
//!   per path: Kafka's coordinator direct, Strait's own coordinator (one
//!   instance; the offsets of a routed topic go on to Kafka), and through
//!   an instance to Kafka's coordinator (several instances).
//! - **Moves**: three instances; ProducerPerformance (Java, idempotent by
//!   default) writes 12 partitions round robin at 1,000 records/s through
//!   all three; a probe reads Kafka's end of every partition every 50 ms.
//!   Then rounds, one instance each: SIGKILL (the others drop it after
//!   its 6 s session) or SIGTERM (it leaves its group on the way out),
//!   then it starts again. A partition's pause is the longest time its end
//!   stood still from the event until it moved again after the others
//!   listed only the survivors; reported for the partitions the instance
//!   led, p50 and p99 (the worst, with these few) per kind, and how long
//!   the others took to drop it. The bench fails on a record lost or
//!   written twice, never on a slow move.

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::support::instances::{instances, metadata, runtime, signal, wait_listed};
use common::support::kafka::Kafka;
use common::support::{unique, Strait};
use common::{Res, Stats};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};

/// Partitions of the moves' topic, and its rate.
const MOVE_PARTITIONS: i32 = 12;
const MOVE_RATE: u64 = 1_000;

/// Kafka's end of every partition, as the probe saw it, and when.
type Samples = Arc<Mutex<Vec<(Instant, Vec<i64>)>>>;

fn main() {
    if let Err(e) = run() {
        eprintln!("bench-instances: {e}");
        std::process::exit(1);
    }
}

/// Records/s of 1 KiB records to `topic` through `bootstrap`, as fast as
/// they go (acks=1).
fn throughput(kafka: &Kafka, bootstrap: &str, topic: &str, records: u64) -> Res<f64> {
    common::producer_performance(kafka, bootstrap, topic, (records, 1024, -1), &["acks=1"])
        .map(|(_, rate)| rate)
}

/// Milliseconds from InitProducerId to the first batch of the producer id
/// it gave written (acks=all), `runs` times, each a new producer: through
/// Strait that first batch waits for the cluster's producer id to be
/// obtained and mapped. One unmeasured run first (connections, metadata).
fn first_batches(
    runtime: &tokio::runtime::Runtime,
    bootstrap: &str,
    topic: &str,
    runs: usize,
) -> Res<Vec<f64>> {
    // The first address is enough: the rest come from its Metadata.
    let cluster = common::support::cluster(bootstrap.split(',').next().unwrap_or(bootstrap));
    let deadline = Instant::now() + Duration::from_secs(15);
    while runtime
        .block_on(cluster.refresh())
        .ok()
        .and_then(|m| m.partition_count(topic))
        .is_none()
    {
        if Instant::now() > deadline {
            return Err(format!("{topic} not in {bootstrap}'s metadata after 15 s"));
        }
        thread::sleep(Duration::from_millis(100));
    }
    let mut ms = Vec::new();
    for i in 0..=runs {
        let start = Instant::now();
        runtime.block_on(async {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            let (id, epoch) = cluster
                .init_producer_id(deadline)
                .await
                .map_err(|e| e.to_string())?;
            let record = strait_batch::build::record(0, 0, Some(b"k"), Some(b"first"), &[]);
            let batch = strait_batch::build::with_section(
                strait_batch::build::BatchSpec {
                    producer_id: id,
                    producer_epoch: epoch,
                    base_sequence: 0,
                    ..Default::default()
                },
                1,
                &record,
            );
            strait_upstream::log::append(&cluster, topic, (i % 8) as i32, batch.into())
                .await
                .map_err(|e| e.to_string())
        })?;
        if i > 0 {
            ms.push(start.elapsed().as_secs_f64() * 1000.0);
        }
    }
    Ok(ms)
}

/// Milliseconds of each of `count` synchronous commits of a consumer of
/// `topic` (partition 0 assigned) in a group of its own.
fn commits(bootstrap: &str, topic: &str, count: i64) -> Res<Vec<f64>> {
    let mut config = common::consumer_config(bootstrap, topic, &unique("commit"));
    config.set("group.id", unique("bench-commits"));
    let consumer: BaseConsumer = config.create().map_err(|e| e.to_string())?;
    let mut assigned = TopicPartitionList::new();
    assigned
        .add_partition_offset(topic, 0, Offset::Beginning)
        .map_err(|e| e.to_string())?;
    consumer.assign(&assigned).map_err(|e| e.to_string())?;
    let mut ms = Vec::new();
    for i in 0..count + 10 {
        let mut offsets = TopicPartitionList::new();
        offsets
            .add_partition_offset(topic, 0, Offset::Offset(i % 100))
            .map_err(|e| e.to_string())?;
        let start = Instant::now();
        consumer
            .commit(&offsets, CommitMode::Sync)
            .map_err(|e| format!("commit {i}: {e}"))?;
        // The first ten find the coordinator and warm the path.
        if i >= 10 {
            ms.push(start.elapsed().as_secs_f64() * 1000.0);
        }
    }
    Ok(ms)
}

fn stats(what: &str, ms: Vec<f64>) -> Res<Stats> {
    Stats::of(ms).ok_or_else(|| format!("no samples of {what}"))
}

/// `strait serve` routing every topic to `kafka`, one instance.
fn single(kafka: &str) -> Res<(Strait, tempfile::TempDir)> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let path = dir.path().join("strait.yaml");
    std::fs::write(
        &path,
        format!(
            "clusters:\n  up: {{ bootstrap: [\"{kafka}\"] }}\nroutes:\n  - {{ regex: \".*\", to: up }}\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    Ok((
        Strait::start(&["--config", path.to_str().unwrap_or_default()]),
        dir,
    ))
}

fn bootstrap_of(straits: &[&Strait]) -> String {
    straits
        .iter()
        .map(|s| s.bootstrap())
        .collect::<Vec<_>>()
        .join(",")
}

fn run() -> Res<()> {
    let throughput_records = common::env_u64("INSTANCES_BENCH_RECORDS", 200_000)?;
    let rounds = common::env_u64("INSTANCES_BENCH_ROUNDS", 4)? as usize;
    println!(
        "instances: Kafka 4.1.1 (one node), strait serve alone and as instances (session 6 s); {} cores ({}), load {}",
        common::nproc(),
        common::cpu_model(),
        common::loadavg()
    );
    let kafka = Kafka::start(0, &[]);
    let direct = kafka.bootstrap();
    let (one, _one_config) = single(&direct)?;
    let (two, _two_config) = instances(&direct, "bench-two", 2);
    let runtime = runtime();
    wait_listed(&runtime, &two.iter().collect::<Vec<_>>(), Duration::from_secs(60));
    let paths: [(&str, String); 3] = [
        ("direct to Kafka", direct.clone()),
        ("one instance", one.bootstrap()),
        ("two instances", bootstrap_of(&two.iter().collect::<Vec<_>>())),
    ];

    println!(
        "\n  throughput (ProducerPerformance, 1 KiB, acks=1, {throughput_records} records, 8 partitions):"
    );
    // Kafka's JVM warmed up first (unmeasured), then each path twice, in
    // alternating order; the median (the mean of two) of each.
    {
        let topic = unique("warm");
        kafka.create_topic(&topic, 8, &[]);
        throughput(&kafka, &direct, &topic, throughput_records / 2)?;
    }
    let mut rates = vec![Vec::new(); paths.len()];
    for i in [0, 1, 2, 2, 1, 0] {
        let topic = unique("tp");
        kafka.create_topic(&topic, 8, &[]);
        rates[i].push(throughput(&kafka, &paths[i].1, &topic, throughput_records)?);
    }
    let rates: Vec<f64> = rates
        .into_iter()
        .map(|r| common::median(r).unwrap_or(0.0))
        .collect();
    for ((label, _), rate) in paths.iter().zip(&rates) {
        println!(
            "    {label:<16} {rate:>9.0} records/s  {:>5.2}x direct",
            rate / rates[0]
        );
    }

    println!("\n  a new idempotent producer (InitProducerId, then its first batch written; 50 each), and synchronous offset commits (200 each):");
    let mut first_base = None;
    let mut commit_base = None;
    for (label, bootstrap) in &paths {
        let topic = unique("first");
        kafka.create_topic(&topic, 8, &[]);
        let first = stats("first batches", first_batches(&runtime, bootstrap, &topic, 50)?)?;
        let commit = stats("commits", commits(bootstrap, &topic, 200)?)?;
        let f = *first_base.get_or_insert(first.p99);
        let c = *commit_base.get_or_insert(commit.p99);
        println!(
            "    {label:<16} producer p50 {:>6.2} ms p99 {:>6.2} ms ({:>4.2}x direct's p99) | commit p50 {:>5.2} ms p99 {:>5.2} ms ({:>4.2}x direct's p99)",
            first.p50,
            first.p99,
            first.p99 / f,
            commit.p50,
            commit.p99,
            commit.p99 / c
        );
    }
    drop(two);
    drop(one);

    // Moves.
    let topic = unique("moves");
    kafka.create_topic(&topic, MOVE_PARTITIONS, &[]);
    let (mut three, _three_config) = instances(&direct, "bench-three", 3);
    wait_listed(
        &runtime,
        &three.iter().collect::<Vec<_>>(),
        Duration::from_secs(60),
    );
    let records = MOVE_RATE * (30 + 30 * rounds as u64);
    let samples: Samples = Arc::default();
    let probing = Arc::new(AtomicBool::new(true));
    let kafka_cluster = common::support::cluster(&direct);
    let mut kills = Vec::new();
    let mut stops = Vec::new();
    let mut dropped_kill = Vec::new();
    let mut dropped_stop = Vec::new();
    thread::scope(|scope| -> Res<()> {
        let bootstrap = bootstrap_of(&three.iter().collect::<Vec<_>>());
        let (kafka, topic) = (&kafka, &topic);
        let producer = scope.spawn(move || {
            common::producer_performance(
                kafka,
                &bootstrap,
                topic,
                (records, 200, MOVE_RATE as i64),
                &[
                    "acks=all",
                    "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner",
                ],
            )
        });
        {
            let (samples, probing, direct) = (samples.clone(), probing.clone(), direct.clone());
            scope.spawn(move || {
                let runtime = common::support::instances::runtime();
                let kafka = common::support::cluster(&direct);
                while probing.load(Ordering::Relaxed) {
                    if let Some(ends) = common::ends(&runtime, &kafka, topic, MOVE_PARTITIONS) {
                        samples.lock().expect("samples").push((Instant::now(), ends));
                    }
                    thread::sleep(Duration::from_millis(50));
                }
            });
        }
        thread::sleep(Duration::from_secs(10));
        for round in 0..rounds {
            let victim = round % 3;
            let others: Vec<usize> = (0..3).filter(|i| *i != victim).collect();
            // The partitions the victim leads, as the others show them.
            let shown = metadata(&runtime, &three[others[0]]).ok_or("no metadata")?;
            let victim_node = shown
                .brokers
                .iter()
                .find(|(_, address)| **address == three[victim].bootstrap())
                .map(|(node, _)| *node)
                .ok_or("the victim is not listed")?;
            let led: BTreeSet<usize> = shown
                .topics
                .get(topic.as_str())
                .map(|t| {
                    t.partitions
                        .iter()
                        .filter(|p| p.leader == victim_node)
                        .map(|p| p.partition as usize)
                        .collect()
                })
                .unwrap_or_default();
            let kill = round % 2 == 0;
            let event = Instant::now();
            if kill {
                three[victim].kill();
            } else {
                signal(&three[victim], "-TERM");
            }
            let live: Vec<&Strait> = others.iter().map(|i| &three[*i]).collect();
            wait_listed(&runtime, &live, Duration::from_secs(60));
            let settled = Instant::now();
            let noticed = (settled - event).as_secs_f64() * 1000.0;
            if !kill {
                three[victim].stop();
            }
            thread::sleep(Duration::from_secs(4));
            let all = samples.lock().expect("samples").clone();
            let pauses: Vec<f64> = led
                .iter()
                .map(|p| common::standstill(&all, *p, event, settled).as_secs_f64() * 1000.0)
                .collect();
            if kill {
                kills.extend(pauses);
                dropped_kill.push(noticed);
            } else {
                stops.extend(pauses);
                dropped_stop.push(noticed);
            }
            three[victim].restart();
            wait_listed(
                &runtime,
                &three.iter().collect::<Vec<_>>(),
                Duration::from_secs(60),
            );
            thread::sleep(Duration::from_secs(5));
        }
        let (sent, _) = producer.join().map_err(|_| "the producer panicked")??;
        probing.store(false, Ordering::Relaxed);
        let on_kafka: i64 = common::ends(&runtime, &kafka_cluster, topic, MOVE_PARTITIONS)
            .ok_or("Kafka's ends")?
            .iter()
            .sum();
        if on_kafka != sent as i64 || sent != records {
            return Err(format!(
                "{records} records to send, {sent} acknowledged, {on_kafka} on Kafka"
            ));
        }
        Ok(())
    })?;
    println!(
        "\n  moves: three instances, {MOVE_PARTITIONS} partitions at {MOVE_RATE} records/s (Java, idempotent), {rounds} rounds; pauses of the partitions the instance led:"
    );
    for (label, pauses, dropped) in [
        ("SIGKILL (session 6 s)", kills, dropped_kill),
        ("SIGTERM (leaves)", stops, dropped_stop),
    ] {
        let Some(p) = Stats::of(pauses) else {
            continue;
        };
        let d = Stats::of(dropped).ok_or("no drop times")?;
        println!(
            "    {label:<22} pause p50 {:>6.0} ms p99 {:>6.0} ms | dropped by the others after p50 {:>6.0} ms, worst {:>6.0} ms",
            p.p50, p.p99, d.p50, d.max
        );
    }
    println!("  every record acknowledged is on Kafka, once ({records} records)");
    Ok(())
}
