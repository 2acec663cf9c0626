//! Several `strait serve` instances as one logical cluster (`instances:`,
//! issue 26): they meet in a group on Apache Kafka, every instance shows
//! clients the live ones as the brokers, and clients move off an instance
//! that dies or freezes with nothing lost or written twice.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value;
use support::instances::{instances, metadata, runtime, signal, wait_listed};
use support::kafka::Kafka;
use support::{spawn_client, unique, Strait};

#[test]
fn instances_show_clients_one_cluster_and_spread_leadership_over_the_live_ones() {
    let kafka = Kafka::shared();
    let topic = unique("spread");
    kafka.create_topic(&topic, 30, &[]);
    let (straits, _config) = instances(&kafka.bootstrap(), &unique("gw"), 3);
    let runtime = runtime();
    let all: Vec<&Strait> = straits.iter().collect();
    wait_listed(&runtime, &all, Duration::from_secs(60));
    let views: Vec<_> = straits.iter().map(|s| metadata(&runtime, s).unwrap()).collect();
    let leaders = |m: &strait_upstream::Metadata| -> Vec<i32> {
        m.topics[&topic].partitions.iter().map(|p| p.leader).collect()
    };
    for view in &views[1..] {
        assert_eq!(view.cluster_id, views[0].cluster_id, "one cluster id");
        assert_eq!(view.brokers, views[0].brokers, "the same node ids");
        assert_eq!(leaders(view), leaders(&views[0]), "the same leaders");
    }
    // Every instance leads some of the 30 partitions.
    let led: BTreeSet<i32> = leaders(&views[0]).into_iter().collect();
    assert_eq!(led, views[0].brokers.keys().copied().collect::<BTreeSet<_>>());
    // A group's coordinator is the same instance whichever is asked.
    let group = unique("g");
    let coordinators: BTreeSet<(i32, String)> = straits
        .iter()
        .map(|s| {
            runtime
                .block_on(support::cluster(&s.bootstrap()).coordinator_of(&group))
                .unwrap()
        })
        .collect();
    assert_eq!(coordinators.len(), 1, "{coordinators:?}");
    // Records go through any instance to the same topic.
    for (i, s) in straits.iter().enumerate() {
        let out = support::run_client(
            "ck_produce.py",
            &[
                "--bootstrap",
                &s.bootstrap(),
                "--topic",
                &topic,
                "--count",
                "100",
                "--start",
                &(i * 100).to_string(),
            ],
        );
        assert_eq!(out["delivered"], 100, "{out}");
    }
    let dump = support::dump(&kafka.bootstrap(), &topic, 300, 2..3);
    let values: BTreeSet<String> = dump
        .values()
        .flatten()
        .map(|v| v[0].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(values.len(), 300, "{values:?}");
    // One idempotent producer through all three: its batches reach every
    // instance (each leads some partitions), and every instance writes them
    // under the one upstream producer id the shared map gives it.
    let ids = unique("ids");
    kafka.create_topic(&ids, 30, &[]);
    let bootstrap = straits
        .iter()
        .map(Strait::bootstrap)
        .collect::<Vec<_>>()
        .join(",");
    let out = support::run_client(
        "java:produce",
        &[
            "--bootstrap",
            &bootstrap,
            "--topic",
            &ids,
            "--count",
            "3000",
            "--acks",
            "all",
            "--idempotent",
            "-X",
            "linger.ms=20",
            "-X",
            "batch.size=2000",
        ],
    );
    assert_eq!(out["delivered"], 3000, "{out}");
    let producers = upstream_producers(&runtime, &kafka.bootstrap(), &ids, 30);
    let leaders = leaders(&views[0]);
    let written: BTreeSet<i32> = producers.keys().map(|p| leaders[*p as usize]).collect();
    assert!(
        written.len() >= 2,
        "the batches reached one instance only: {producers:?}"
    );
    let distinct: BTreeSet<i64> = producers.values().flatten().copied().collect();
    assert_eq!(distinct.len(), 1, "one producer, upstream ids {producers:?}");
}

/// The producer ids Kafka at `bootstrap` holds state for on each partition
/// of `topic` that has any (DescribeProducers).
fn upstream_producers(
    runtime: &tokio::runtime::Runtime,
    bootstrap: &str,
    topic: &str,
    partitions: i32,
) -> BTreeMap<i32, Vec<i64>> {
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    use kafka_protocol::messages::{DescribeProducersRequest, TopicName};
    let request = DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
        .with_name(TopicName(topic.to_owned().into()))
        .with_partition_indexes((0..partitions).collect())]);
    let answer = runtime.block_on(async {
        let connection = support::cluster(bootstrap).any_broker().await.unwrap();
        connection.request_at(&request, 0).await.unwrap()
    });
    answer
        .topics
        .iter()
        .flat_map(|t| &t.partitions)
        .inspect(|p| assert_eq!(p.error_code, 0, "{p:?}"))
        .filter(|p| !p.active_producers.is_empty())
        .map(|p| {
            (
                p.partition_index,
                p.active_producers.iter().map(|s| s.producer_id.0).collect(),
            )
        })
        .collect()
}

/// A new 6-partition topic on `kafka` and three instances in front of it
/// that list each other.
fn three_listed(
    kafka: &Kafka,
    name: &str,
) -> (String, Vec<Strait>, tempfile::TempDir, tokio::runtime::Runtime) {
    let topic = unique(name);
    kafka.create_topic(&topic, 6, &[]);
    let (straits, config) = instances(&kafka.bootstrap(), &unique("gw"), 3);
    let runtime = runtime();
    wait_listed(
        &runtime,
        &straits.iter().collect::<Vec<_>>(),
        Duration::from_secs(60),
    );
    (topic, straits, config, runtime)
}

#[test]
fn clients_move_off_a_killed_and_a_frozen_instance_and_lose_nothing() {
    let _one = ONE_LOAD_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const RECORDS: usize = 6000;
    let kafka = Kafka::shared();
    let (topic, mut straits, _config, runtime) = three_listed(kafka, "moves");
    let load = Load::start(&straits, &topic, RECORDS, 150);
    std::thread::sleep(Duration::from_secs(8));
    // SIGKILL the instance that coordinates the group.
    let (_, at) = runtime
        .block_on(support::cluster(&straits[0].bootstrap()).coordinator_of(&load.group))
        .unwrap();
    let killed = straits
        .iter()
        .position(|s| s.bootstrap() == at)
        .expect("the coordinator is an instance");
    straits[killed].kill();
    let live: Vec<&Strait> = (0..3).filter(|i| *i != killed).map(|i| &straits[i]).collect();
    let noticed = wait_listed(&runtime, &live, Duration::from_secs(30));
    eprintln!("the others listed the killed instance for {noticed:?}");
    straits[killed].restart();
    wait_listed(
        &runtime,
        &straits.iter().collect::<Vec<_>>(),
        Duration::from_secs(30),
    );
    // Freeze another one past its session.
    let frozen = (killed + 1) % 3;
    signal(&straits[frozen], "-STOP");
    let live: Vec<&Strait> = (0..3).filter(|i| *i != frozen).map(|i| &straits[i]).collect();
    wait_listed(&runtime, &live, Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(4));
    signal(&straits[frozen], "-CONT");
    wait_listed(
        &runtime,
        &straits.iter().collect::<Vec<_>>(),
        Duration::from_secs(30),
    );

    // Fenced members re-read what they had not committed; the group's
    // offsets still reach every end.
    load.check(kafka, &straits, true);
}

/// The errors a `ck_consume.py` run reported beside the ones librdkafka
/// raises for a broker going away (a connection closed or refused), which
/// it also raises when a Kafka broker restarts; with `fenced`, beside a
/// commit refused because the member was fenced too (a member whose
/// heartbeats went through an instance frozen past the member's session
/// is dropped by the coordinator, as one cut off from its coordinator by
/// the network).
fn real_errors(read: &Value, fenced: bool) -> Vec<String> {
    let fencing = ["UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS"];
    read["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e.as_str())
        .filter(|e| !e.starts_with("_TRANSPORT") && !e.starts_with("_ALL_BROKERS_DOWN"))
        .filter(|e| !(fenced && e.starts_with("commit: ") && fencing.iter().any(|f| e.contains(f))))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_rolling_restart_of_three_instances_costs_no_client_an_error_or_a_record() {
    let _one = ONE_LOAD_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const RECORDS: usize = 4000;
    let kafka = Kafka::shared();
    let (topic, mut straits, _config, runtime) = three_listed(kafka, "rolling");
    let load = Load::start(&straits, &topic, RECORDS, 100);
    std::thread::sleep(Duration::from_secs(5));
    for i in 0..3 {
        assert!(straits[i].stop().success(), "{}", straits[i].log());
        // It left its group on the way out: the others drop it at once,
        // not after its session.
        let live: Vec<&Strait> = (0..3).filter(|j| *j != i).map(|j| &straits[j]).collect();
        let gone = wait_listed(&runtime, &live, Duration::from_secs(30));
        eprintln!("instance {i} was dropped {gone:?} after its SIGTERM ended");
        straits[i].restart();
        wait_listed(
            &runtime,
            &straits.iter().collect::<Vec<_>>(),
            Duration::from_secs(30),
        );
        std::thread::sleep(Duration::from_secs(3));
    }
    load.check(kafka, &straits, false);
}

/// Under way through `straits`: the Java client's idempotent producer
/// writing `records` keyed records to `topic` at `rate` a second, and a
/// group of two confluent-kafka consumers reading them and committing.
struct Load {
    producer: support::BackgroundClient,
    consumer: support::BackgroundClient,
    topic: String,
    group: String,
    records: usize,
}

/// The load tests run one at a time: three instances, a JVM and two
/// consumers each are a lot for a CI machine of two cores.
static ONE_LOAD_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Load {
    fn start(straits: &[Strait], topic: &str, records: usize, rate: u32) -> Load {
        let bootstrap = straits
            .iter()
            .map(Strait::bootstrap)
            .collect::<Vec<_>>()
            .join(",");
        let group = unique("g");
        let count = records.to_string();
        let producer = support::java_idempotent_producer(&bootstrap, topic, records, rate, 150);
        let consumer = spawn_client(
            "ck_consume.py",
            &[
                "--bootstrap",
                &bootstrap,
                "--topic",
                topic,
                "--group",
                &group,
                "--members",
                "2",
                "--commit",
                "--expect",
                &count,
                "--timeout",
                "200",
                // A request to a frozen instance is given up after 10 s
                // rather than librdkafka's 60 s, as against a frozen
                // broker: the test's clients move sooner.
                "-X",
                "socket.timeout.ms=10000",
            ],
        );
        Load {
            producer,
            consumer,
            topic: topic.to_owned(),
            group,
            records,
        }
    }

    /// Waits for both clients and checks: every record delivered with no
    /// producer error, on Kafka once each; the group read every one, with
    /// no error but a broker going away (and, if `fenced`, members fenced
    /// by the coordinator), and committed the ends.
    fn check(mut self, kafka: &Kafka, straits: &[Strait], fenced: bool) {
        let logs = || {
            straits
                .iter()
                .map(|s| s.log())
                .collect::<Vec<_>>()
                .join("\n---\n")
        };
        let status = self
            .producer
            .wait(Duration::from_secs(180))
            .expect("the producer ends");
        let lines = self.producer.lines();
        let json: Value =
            serde_json::from_str(lines.last().map(String::as_str).unwrap_or("{}")).unwrap_or_default();
        assert!(
            status.success() && json["delivered"] == self.records && json["errors"] == Value::Array(vec![]),
            "{}\n--- strait logs ---\n{}",
            self.producer.describe(),
            logs()
        );
        // Two waits: one is at most the suite's client timeout.
        let read = self
            .consumer
            .wait(Duration::from_secs(120))
            .or_else(|| self.consumer.wait(Duration::from_secs(120)));
        assert!(
            read.is_some_and(|s| s.success()),
            "{}\n--- strait logs ---\n{}",
            self.consumer.describe(),
            logs()
        );
        let read: Value = serde_json::from_str(self.consumer.lines().last().unwrap()).unwrap();
        assert_eq!(read["records"], self.records, "{read}");
        assert_eq!(real_errors(&read, fenced), Vec::<String>::new(), "{read}");
        let dump = support::dump(&kafka.bootstrap(), &self.topic, self.records, 2..3);
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for value in dump.values().flatten() {
            *seen
                .entry(value[0].as_str().unwrap_or_default().to_owned())
                .or_default() += 1;
        }
        assert_eq!(seen.len(), self.records);
        let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "written twice: {twice:?}");
        let committed = support::committed(&kafka.bootstrap(), &self.group, &self.topic);
        let ends: i64 = committed.values().map(|o| o.unwrap_or(0)).sum();
        assert_eq!(ends, self.records as i64, "{committed:?}");
    }
}
