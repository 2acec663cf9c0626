//! Restarts under idempotent producers (issue 26): of the upstream Kafka
//! (a Kafka that has just started, whose producer-id manager is still
//! loading) and of Strait itself.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use support::kafka::Kafka;
use support::{spawn_client, unique, Strait};

/// A Strait routing `k.` topics to the cluster at `upstream` (without the
/// prefix), other topics to its local spool, on a data directory of its
/// own that its restarts keep; the directory holds its configuration.
fn gateway_over(upstream: &str) -> (Strait, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strait.yaml");
    std::fs::write(
        &path,
        format!(
            "clusters:\n  up: {{ bootstrap: [\"{upstream}\"] }}\n\
             routes:\n  - {{ prefix: \"k.\", to: up, strip_prefix: true }}\n  - {{ regex: \".*\", to: local }}\n"
        ),
    )
    .unwrap();
    let strait = Strait::start_logging(
        "info,strait_gateway::router=debug,strait_upstream=debug",
        &["--config", path.to_str().unwrap()],
    );
    (strait, dir)
}

/// How many times the stress-worthy drills repeat: `STRAIT_STRESS_RUNS`
/// (the suite's stress mode), 1 by default.
fn runs() -> usize {
    std::env::var("STRAIT_STRESS_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// Waits for `client`, a producer of `tests/clients/`, and asserts that it
/// delivered all its `count` records without an error.
fn assert_delivered(client: &mut support::BackgroundClient, count: usize, strait: &Strait) {
    let status = client.wait(Duration::from_secs(120)).expect("a producer ends");
    let lines = client.lines();
    let json: Value =
        serde_json::from_str(lines.last().map(String::as_str).unwrap_or("{}")).unwrap_or_default();
    assert!(
        status.success() && json["delivered"] == count && json["errors"] == Value::Array(vec![]),
        "{}\n--- strait log ---\n{}",
        client.describe(),
        strait.log()
    );
}

#[test]
fn a_kafka_frozen_while_producer_ids_are_obtained_costs_no_record() {
    let kafka = Kafka::start(0, &[]);
    let topic = unique("frozen");
    support::create_topic("ck_admin.py", &kafka.bootstrap(), &topic, 3);
    let (strait, _config) = gateway_over(&kafka.bootstrap());
    let mut java =
        support::java_idempotent_producer(&strait.bootstrap(), &format!("k.{topic}"), 3000, 500, 60);
    std::thread::sleep(Duration::from_millis(200));
    kafka.freeze(1, true);
    std::thread::sleep(Duration::from_secs(12));
    kafka.freeze(1, false);
    assert_delivered(&mut java, 3000, &strait);
    // The freeze came while the producer id was asked for, not after.
    assert!(
        strait.log().contains("no upstream producer id"),
        "the frozen Kafka never failed an InitProducerId:\n{}",
        strait.log()
    );
}

/// Each client family's idempotent producer (the scripts of
/// `tests/clients/`, all taking the same flags).
const PRODUCERS: [&str; 8] = [
    "java:produce",
    "java4:produce",
    "ck_produce.py",
    "kp_produce.py",
    "aiokafka:produce",
    "kafkajs:produce",
    "franz:produce",
    "sarama-current:produce",
];

/// Records each family writes.
const EACH: usize = 1_000;

#[test]
fn idempotent_producers_through_strait_to_a_kafka_just_started_deliver_every_record_once() {
    for run in 0..runs() {
        let kafka = Kafka::start(0, &[]);
        let topic = unique("fresh");
        support::create_topic("ck_admin.py", &kafka.bootstrap(), &topic, 3);
        let (strait, _config) = gateway_over(&kafka.bootstrap());
        let client_topic = format!("k.{topic}");
        let b = strait.bootstrap();
        let count = EACH.to_string();
        // Every family at once, each producer's first InitProducerId
        // upstream within seconds of Kafka's start.
        let mut clients: Vec<_> = PRODUCERS
            .iter()
            .map(|script| {
                let prefix = script.split(':').next().unwrap().trim_end_matches("_produce.py");
                let client = spawn_client(
                    script,
                    &[
                        "--bootstrap",
                        &b,
                        "--topic",
                        &client_topic,
                        "--count",
                        &count,
                        "--keyed",
                        "--acks",
                        "all",
                        "--idempotent",
                        "--compression",
                        "none",
                        "--value-prefix",
                        prefix,
                        "--timeout",
                        "60",
                    ],
                );
                (prefix.to_owned(), client)
            })
            .collect();
        for (_, client) in &mut clients {
            assert_delivered(client, EACH, &strait);
        }
        // On Kafka: each family's records once.
        let dump = support::dump(&kafka.bootstrap(), &topic, EACH * PRODUCERS.len(), 2..3);
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for value in dump.values().flatten() {
            *seen
                .entry(value[0].as_str().unwrap_or_default().to_owned())
                .or_default() += 1;
        }
        let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "run {run}: written twice: {twice:?}");
        for (prefix, _) in &clients {
            let mine = seen
                .keys()
                .filter(|v| v.starts_with(&format!("{prefix}-")))
                .count();
            assert_eq!(mine, EACH, "run {run}: {prefix}'s records on Kafka");
        }
    }
}

const CK_RECORDS: usize = 6_000;
const JAVA_RECORDS: usize = 3_000;

/// librdkafka's and the Java client's idempotent producers write through
/// `strait` to `topic` on the cluster at `upstream` while `restarts`
/// happen to Strait; every record must be acknowledged without an error
/// and be on the upstream exactly once.
fn producers_through_restarts(
    upstream: &str,
    topic: &str,
    strait: &mut Strait,
    restarts: impl FnOnce(&mut Strait),
) {
    let b = strait.bootstrap();
    let client_topic = format!("k.{topic}");
    let ck_max = CK_RECORDS.to_string();
    let mut ck = spawn_client(
        "ck_acked.py",
        &[
            "--bootstrap",
            &b,
            "--topic",
            &client_topic,
            "--keyed",
            "--value-prefix",
            "ck",
            "--max",
            &ck_max,
            "--rate",
            "600",
            "--duration",
            "60",
            "--message-timeout",
            "60",
            "-X",
            "enable.idempotence=true",
        ],
    );
    let mut java = support::java_idempotent_producer(&b, &client_topic, JAVA_RECORDS, 300, 60);
    let going = ck.wait_for(Duration::from_secs(60), |lines| {
        lines.iter().filter(|l| l.starts_with("ACKED")).count() >= 1_500
    });
    assert!(
        going,
        "the librdkafka producer did not get going: {}",
        ck.describe()
    );
    restarts(strait);
    assert!(
        ck.wait(Duration::from_secs(120)).is_some_and(|s| s.success()),
        "{}",
        ck.describe()
    );
    let lines = ck.lines();
    assert!(
        !lines.iter().any(|l| l.starts_with("FAILED")),
        "{}",
        ck.describe()
    );
    let acked = support::acked(&lines);
    assert_eq!(acked.len(), CK_RECORDS, "{}", ck.describe());
    assert_delivered(&mut java, JAVA_RECORDS, strait);
    let dump = support::dump(upstream, topic, CK_RECORDS + JAVA_RECORDS, 2..3);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for value in dump.values().flatten() {
        *seen
            .entry(value[0].as_str().unwrap_or_default().to_owned())
            .or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "written twice upstream: {twice:?}");
    let ck_values: std::collections::BTreeSet<&String> = acked.values().collect();
    for v in &ck_values {
        assert!(seen.contains_key(*v), "acknowledged {v} is not upstream");
    }
    for i in 0..JAVA_RECORDS {
        assert!(
            seen.contains_key(&format!("java-{i}")),
            "acknowledged java-{i} is not upstream"
        );
    }
    assert_eq!(seen.len(), CK_RECORDS + JAVA_RECORDS);
}

#[test]
fn idempotent_producers_keep_every_record_once_through_gateway_restarts_in_front_of_kafka() {
    let kafka = Kafka::shared();
    let topic = unique("gw-restart");
    kafka.create_topic(&topic, 3, &[]);
    let (mut strait, _config) = gateway_over(&kafka.bootstrap());
    producers_through_restarts(&kafka.bootstrap(), &topic, &mut strait, |strait| {
        // SIGKILL, back 2 s later; then SIGTERM and back at once.
        strait.kill();
        std::thread::sleep(Duration::from_secs(2));
        strait.restart();
        std::thread::sleep(Duration::from_secs(3));
        assert!(strait.stop().success());
        strait.restart();
    });
}

#[test]
fn idempotent_producers_keep_every_record_once_through_a_gateway_sigkill_in_front_of_strait_serve() {
    // A `strait serve` upstream refuses a producer it does not know unless
    // it starts at sequence 0: a restarted gateway must go on under the
    // producer ids it used before.
    let upstream = Strait::start(&[]);
    let topic = unique("gw-restart");
    support::create_topic("ck_admin.py", &upstream.bootstrap(), &topic, 3);
    let (mut strait, _config) = gateway_over(&upstream.bootstrap());
    producers_through_restarts(&upstream.bootstrap(), &topic, &mut strait, |strait| {
        strait.kill();
        std::thread::sleep(Duration::from_secs(2));
        strait.restart();
    });
}
