//! Kafka's own failures under load through Strait: a three-broker Kafka
//! cluster (a dedicated controller, replication factor 3,
//! `min.insync.replicas=2`) behind a Strait that routes `k.` topics to it,
//! and one mirror from it to itself.
//!
//! Each drill stops, kills or freezes brokers of the one cluster this test
//! process shares, so drills run one at a time ([`Drill`]) and each leaves
//! the whole cluster running again, even when it fails.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::kafka::Kafka;
use support::{spawn_client, unique, BackgroundClient, Strait};

/// The cluster, one drill at a time, healed afterwards.
struct Drill {
    kafka: &'static Kafka,
    strait: Strait,
    _config: tempfile::TempDir,
    _turn: MutexGuard<'static, ()>,
}

impl Drill {
    fn start() -> Drill {
        static TURN: Mutex<()> = Mutex::new(());
        let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        let kafka = Kafka::cluster();
        kafka.heal();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("strait.yaml");
        let bootstrap: Vec<String> = kafka.bootstrap().split(',').map(|b| format!("\"{b}\"")).collect();
        std::fs::write(
            &path,
            format!(
                "clusters:\n  kafka: {{ bootstrap: [{}], request_timeout: 5s, connect_timeout: 2s }}\n\
                 routes:\n  - {{ prefix: \"k.\", to: kafka, strip_prefix: true }}\n  - {{ regex: \".*\", to: local }}\n",
                bootstrap.join(", ")
            ),
        )
        .unwrap();
        // The router's refusals and failures, printed if a drill fails.
        let strait = Strait::start_logging(
            "info,strait_gateway::router=debug",
            &["--config", path.to_str().unwrap()],
        );
        Drill {
            kafka,
            strait,
            _config: dir,
            _turn: turn,
        }
    }

    /// A topic of three partitions on Kafka, each led by a different
    /// broker and replicated on all three; its name there and for clients.
    fn topic(&self, name: &str) -> (String, String) {
        let topic = unique(name);
        let b = self.kafka.brokers();
        let replicas: Vec<Vec<i32>> = (0..3).map(|p| (0..3).map(|r| b[(p + r) % 3]).collect()).collect();
        let replicas: Vec<&[i32]> = replicas.iter().map(Vec::as_slice).collect();
        self.kafka
            .create_topic_assigned(&topic, &replicas, &["min.insync.replicas=2"]);
        for p in 0..3 {
            self.kafka.leader(&topic, p);
        }
        let client = format!("k.{topic}");
        (topic, client)
    }
}

impl Drop for Drill {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for id in self.kafka.brokers() {
                let log = self.kafka.log(*id);
                let start = log.len().saturating_sub(4000);
                let start = (start..log.len()).find(|i| log.is_char_boundary(*i)).unwrap_or(0);
                eprintln!("--- Kafka broker {id} log (tail) ---\n{}", &log[start..]);
            }
        }
        self.kafka.heal();
    }
}

/// Producers (librdkafka and the Java client, both idempotent with
/// acks=all) and a consumer group of two, all through Strait, running
/// while `failure` happens to the cluster.
struct Load {
    librdkafka: BackgroundClient,
    java: BackgroundClient,
    group: BackgroundClient,
}

const CK_RECORDS: usize = 6_000;
const JAVA_RECORDS: usize = 4_000;

impl Load {
    fn start(drill: &Drill, client_topic: &str) -> Load {
        let b = drill.strait.bootstrap();
        let group = unique("drill");
        let group = spawn_client(
            "ck_consume.py",
            &[
                "--bootstrap",
                &b,
                "--topic",
                client_topic,
                "--group",
                &group,
                "--members",
                "2",
                "--commit",
                "--expect",
                &(CK_RECORDS + JAVA_RECORDS).to_string(),
                "--linger",
                "3",
                "--records",
                "--timeout",
                "110",
            ],
        );
        let librdkafka = spawn_client(
            "ck_acked.py",
            &[
                "--bootstrap",
                &b,
                "--topic",
                client_topic,
                "--keyed",
                "--value-prefix",
                "ck",
                "--max",
                &CK_RECORDS.to_string(),
                "--rate",
                "500",
                "--duration",
                "100",
                "--message-timeout",
                "90",
                "-X",
                "enable.idempotence=true",
                "-X",
                "debug=eos",
            ],
        );
        let java = support::java_idempotent_producer(&b, client_topic, JAVA_RECORDS, 330, 100);
        Load {
            librdkafka,
            java,
            group,
        }
    }

    /// Waits until both producers have been going for a while.
    fn wait_started(&mut self) {
        let ok = self.librdkafka.wait_for(Duration::from_secs(60), |lines| {
            lines.iter().filter(|l| l.starts_with("ACKED")).count() >= 1_000
        });
        assert!(
            ok,
            "the librdkafka producer did not get going: {}",
            self.librdkafka.describe()
        );
    }

    /// Waits for everyone; asserts that no producer gave up or lost a
    /// record, and returns every value acknowledged and what the group
    /// consumed.
    fn finish(mut self) -> (BTreeSet<String>, Value) {
        let status = self
            .librdkafka
            .wait(Duration::from_secs(150))
            .expect("librdkafka producer ends");
        assert!(
            status.success(),
            "librdkafka producer: {}",
            self.librdkafka.describe()
        );
        let lines = self.librdkafka.lines();
        assert!(
            !lines.iter().any(|l| l.starts_with("FAILED")),
            "{}",
            self.librdkafka.describe()
        );
        let mut values: BTreeSet<String> = support::acked(&lines).into_values().collect();
        assert_eq!(values.len(), CK_RECORDS, "{}", self.librdkafka.describe());
        let status = self
            .java
            .wait(Duration::from_secs(150))
            .expect("Java producer ends");
        assert!(status.success(), "Java producer: {}", self.java.describe());
        let java = last_json(&self.java);
        assert_eq!(java["delivered"], JAVA_RECORDS, "{java}");
        assert_eq!(java["errors"], Value::Array(vec![]), "{java}");
        values.extend((0..JAVA_RECORDS).map(|i| format!("java-{i}")));
        let status = self.group.wait(Duration::from_secs(150)).expect("the group ends");
        assert!(status.success(), "group: {}", self.group.describe());
        (values, last_json(&self.group))
    }
}

fn last_json(client: &BackgroundClient) -> Value {
    let lines = client.lines();
    let last = lines
        .iter()
        .rev()
        .find(|l| !l.trim().is_empty())
        .cloned()
        .unwrap_or_default();
    serde_json::from_str(&last).unwrap_or_else(|e| panic!("{e}: {}", client.describe()))
}

/// Every value in `topic` on Kafka, read there directly: each must be
/// acknowledged and none twice.
fn assert_once_on_kafka(kafka: &Kafka, topic: &str, acked: &BTreeSet<String>) {
    let stored = support::dump(&kafka.bootstrap(), topic, acked.len(), 0..3);
    let mut seen = BTreeMap::new();
    for records in stored.values() {
        for r in records {
            let v = r[2].as_str().unwrap().to_owned();
            *seen.entry(v).or_insert(0) += 1;
        }
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "{topic}: stored twice on Kafka: {twice:?}");
    let stored: BTreeSet<String> = seen.into_keys().collect();
    let missing: Vec<_> = acked.difference(&stored).collect();
    assert!(
        missing.is_empty(),
        "{topic}: acknowledged but not on Kafka: {missing:?}"
    );
    let extra: Vec<_> = stored.difference(acked).collect();
    assert!(
        extra.is_empty(),
        "{topic}: on Kafka but never produced: {extra:?}"
    );
}

/// The group got every record, none twice.
fn assert_group_saw_all(group: &Value, acked: &BTreeSet<String>) {
    let got: Vec<String> = group["records_list"]
        .as_array()
        .unwrap_or_else(|| panic!("{group}"))
        .iter()
        .map(|r| r[3].as_str().unwrap().to_owned())
        .collect();
    let distinct: BTreeSet<String> = got.iter().cloned().collect();
    let missing: Vec<_> = acked.difference(&distinct).take(20).collect();
    assert!(missing.is_empty(), "the group missed records: {missing:?}…");
    assert_eq!(
        group["duplicates"],
        0,
        "the group got records twice: {}",
        summary(group)
    );
    assert_eq!(group["errors"], Value::Array(vec![]), "{}", summary(group));
}

fn summary(group: &Value) -> String {
    let mut g = group.clone();
    g.as_object_mut().unwrap().remove("records_list");
    g.to_string()
}

/// Runs [`Load`] through Strait on a new topic named after `name` while
/// `failure` happens to the cluster (given the topic's name on Kafka), then
/// checks that every acknowledged record is on Kafka once and that the
/// group missed nothing and got nothing twice.
fn under_load(name: &str, failure: impl FnOnce(&Drill, &str)) {
    let drill = Drill::start();
    let (topic, client_topic) = drill.topic(name);
    let mut load = Load::start(&drill, &client_topic);
    load.wait_started();
    failure(&drill, &topic);
    let (acked, group) = load.finish();
    assert_once_on_kafka(drill.kafka, &topic, &acked);
    assert_group_saw_all(&group, &acked);
}

/// The leader of a routed partition is SIGKILLed under the load and
/// started again 5 s later: every acknowledged record is on Kafka once,
/// the group misses nothing, and no client gives up.
#[test]
fn a_partition_leader_killed_under_load_loses_and_doubles_nothing() {
    under_load("killed", |drill, topic| {
        let leader = drill.kafka.leader(topic, 0);
        eprintln!("SIGKILL broker {leader}, the leader of {topic}-0");
        drill.kafka.kill(leader);
        std::thread::sleep(Duration::from_secs(5));
        drill.kafka.restart(leader);
    });
}

/// A controlled shutdown (SIGTERM: the broker hands its leaders over
/// first) and then a preferred leader election with Kafka's own tool move
/// leaders under the load: no client error, no duplicate.
#[test]
fn a_controlled_shutdown_and_a_preferred_leader_election_move_leaders_without_errors() {
    under_load("moved", |drill, topic| {
        let leader = drill.kafka.leader(topic, 1);
        eprintln!("controlled shutdown of broker {leader}, the leader of {topic}-1");
        drill.kafka.shutdown(leader);
        assert_ne!(drill.kafka.leader(topic, 1), leader, "the leader moved away");
        std::thread::sleep(Duration::from_secs(2));
        drill.kafka.restart(leader);
        // Back in sync, then the preferred leader (the first replica) again.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = drill.kafka.tool(
                "org.apache.kafka.tools.LeaderElectionCommand",
                &[
                    "--bootstrap-server",
                    &drill.kafka.bootstrap(),
                    "--election-type",
                    "preferred",
                    "--topic",
                    topic,
                    "--partition",
                    "1",
                ],
            );
            eprintln!("leader election: {}", out.trim());
            if drill.kafka.leader(topic, 1) == leader {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{topic}-1 never went back to broker {leader}: {out}"
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    });
}

/// Two of a partition's three replicas stopped: `min.insync.replicas=2` is
/// not met, a Produce through Strait gets NOT_ENOUGH_REPLICAS (retriable),
/// and a producer that keeps retrying succeeds once a broker is back.
#[test]
fn not_enough_replicas_is_retriable_and_passes_once_a_broker_is_back() {
    let drill = Drill::start();
    let (topic, client_topic) = drill.topic("isr");
    let b = drill.kafka.brokers().to_vec();
    // Partition 0's replicas are b[0], b[1], b[2] with b[0] leading.
    drill.kafka.shutdown(b[1]);
    drill.kafka.shutdown(b[2]);
    let mut conn = support::raw::Conn::open(drill.strait.port(), "isr");
    let batch = support::raw::idempotent_batch(-1, -1, -1, &["lonely"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let code = loop {
        let (code, _) = conn.produce(&client_topic, 0, &batch, 5_000);
        // (NOT_LEADER_OR_FOLLOWER while leadership settles.)
        if code == 19 || code == 20 || Instant::now() > deadline {
            break code;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(
        code == 19 || code == 20,
        "Produce with one replica of three in sync answered {code}"
    );
    let mut producer = spawn_client(
        "ck_acked.py",
        &[
            "--bootstrap",
            &drill.strait.bootstrap(),
            "--topic",
            &client_topic,
            "--value-prefix",
            "isr",
            "--max",
            "50",
            "--duration",
            "60",
            "--message-timeout",
            "60",
            "-X",
            "partitioner=random",
            "-X",
            "enable.idempotence=true",
        ],
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !producer.lines().iter().any(|l| l.starts_with("FAILED")),
        "{}",
        producer.describe()
    );
    drill.kafka.restart(b[1]);
    let status = producer.wait(Duration::from_secs(90)).expect("the producer ends");
    assert!(status.success(), "{}", producer.describe());
    let acked: BTreeSet<String> = support::acked(&producer.lines()).into_values().collect();
    assert_eq!(acked.len(), 50, "{}", producer.describe());
    let mut all = acked.clone();
    let stored = support::dump(&drill.kafka.bootstrap(), &topic, 50, 0..3);
    let lonely = stored.values().flatten().filter(|r| r[2] == "lonely").count();
    assert!(lonely <= 1, "the refused record is stored {lonely} times");
    if lonely == 1 {
        all.insert("lonely".into());
    }
    assert_once_on_kafka(drill.kafka, &topic, &all);
}

/// A broker that accepts connections but never answers (SIGSTOP): through
/// Strait, a Produce to a partition it leads is answered within Strait's
/// request timeout (5 s here) with a retriable error, and what does not
/// need that broker flows meanwhile, on the same connection and on
/// others: a local topic, and a Fetch from a partition another broker
/// leads. (A Produce with acks=all to such a partition waits, on Kafka
/// itself, until the controller fences the frozen follower out of the
/// ISR, about 9 s.)
#[test]
fn a_frozen_broker_fails_its_partitions_in_time_and_the_rest_flows() {
    let drill = Drill::start();
    let (topic, client_topic) = drill.topic("frozen");
    let frozen = drill.kafka.leader(&topic, 0);
    let other = (1..3)
        .find(|p| drill.kafka.leader(&topic, *p) != frozen)
        .expect("a partition led elsewhere");
    let mut conn = support::raw::Conn::open(drill.strait.port(), "frozen");
    let batch = support::raw::idempotent_batch(-1, -1, -1, &["before"]);
    assert_eq!(conn.produce(&client_topic, 0, &batch, 5_000).0, 0);
    assert_eq!(conn.produce(&client_topic, other, &batch, 5_000).0, 0);
    let local = unique("local");
    support::local::ck_create(&drill.strait.bootstrap(), &local, 1);
    let flows = |conn: &mut support::raw::Conn, what: &str| {
        let t = Instant::now();
        let (code, _) = conn.produce(&local, 0, &batch, 5_000);
        assert_eq!(code, 0, "{what}: local produce");
        let mut fetch = support::raw::fetch_request(&client_topic, 0, 0, 1, 1 << 20, 1 << 20);
        fetch.topics[0].partitions[0].partition = other;
        // Kafka has once in a while answered this Fetch (v12, offset 0)
        // OFFSET_OUT_OF_RANGE right after p0's answer, and then not
        // again: asked again, it must flow. (Under investigation: printed,
        // so it stays visible.)
        let asked = Instant::now();
        let mut answer = conn.fetch(&fetch);
        while answer.responses[0].partitions[0].error_code != 0 && asked.elapsed() < Duration::from_secs(3) {
            eprintln!(
                "{what}: fetch p{other} answered {:?} after {:?} ({:?} into the check); asking again",
                answer.responses[0].partitions[0],
                asked.elapsed(),
                t.elapsed()
            );
            std::thread::sleep(Duration::from_millis(100));
            answer = conn.fetch(&fetch);
        }
        let p = &answer.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "{what}: fetch p{other}: {p:?}");
        assert!(p.high_watermark >= 1, "{what}: fetch p{other}: {p:?}");
        // Not held up by the frozen broker: that would take Strait's
        // request timeout (5 s) at least.
        assert!(
            t.elapsed() < Duration::from_millis(4_500),
            "{what}: took {:?}",
            t.elapsed()
        );
    };
    eprintln!("SIGSTOP broker {frozen}, the leader of {topic}-0");
    drill.kafka.freeze(frozen, true);
    let batch = support::raw::idempotent_batch(-1, -1, -1, &["during"]);
    let started = Instant::now();
    let (id, frame) = conn.produce_frame(&client_topic, 0, &batch, 5_000);
    conn.send_raw(&frame);
    let mut others = support::raw::Conn::open(drill.strait.port(), "others");
    flows(&mut others, "another connection, p0's leader frozen");
    // The frozen leader's partition: answered in time, with a retriable
    // error (or, once the controller moved the leader, not).
    let (code, _) = conn.produce_answer(id);
    let waited = started.elapsed();
    eprintln!("p0 with its leader frozen: code {code} after {waited:?}");
    assert!(waited < Duration::from_secs(12), "p0 answered after {waited:?}");
    assert!(
        code == 0 || [6, 7, 13].contains(&code),
        "p0 answered {code}, not a retriable error"
    );
    flows(&mut conn, "the same connection, after p0's answer");
    drill.kafka.freeze(frozen, false);
    // And p0 is written again once its broker is back (or led elsewhere).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, _) = conn.produce(&client_topic, 0, &batch, 5_000);
        if code == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "p0 still answers {code}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// An idempotent producer pipelines two batches to one partition; the
/// first times out waiting for its replicas (it is on the leader, its fate
/// unknown to the client) while the second is acknowledged. Kafka took the
/// second after the first, so clients take both as delivered (librdkafka
/// acknowledges the first implicitly) and never send the first again:
/// Strait must let the producer's next batch through, not hold it back
/// until the first comes again. Kafka holds every record once.
#[test]
fn a_timed_out_batch_followed_by_a_written_one_lets_the_producer_go_on() {
    use support::raw;
    let drill = Drill::start();
    let (topic, client_topic) = drill.topic("timedout");
    // (A replica out of sync after an earlier drill would make the answer
    // NOT_ENOUGH_REPLICAS instead.)
    drill.kafka.wait_in_sync(&topic, 0);
    let mut conn = raw::Conn::open(drill.strait.port(), "pipelined");
    // As clients do, the topic's leaders first.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !conn.metadata().topics.iter().any(|t| {
        t.name.as_ref().is_some_and(|n| n.as_str() == client_topic)
            && t.error_code == 0
            && !t.partitions.is_empty()
    }) {
        assert!(
            Instant::now() < deadline,
            "{client_topic} not in Strait's metadata"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let init = raw::init_producer_id(&mut conn, None);
    assert_eq!(init.error_code, 0, "{init:?}");
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
    // acks=all and no time to wait: the leader appends the batch and
    // answers REQUEST_TIMED_OUT before the followers have it. On a busy
    // machine the followers are sometimes faster, and the batch is simply
    // written: then the pair is tried again, further on in the sequence.
    let mut acked = BTreeSet::new();
    let mut sequence = 0;
    let mut timed_out = false;
    for attempt in 0..5 {
        let values: Vec<String> = ["a0", "a1", "b0", "b1"]
            .iter()
            .map(|v| format!("{v}.{attempt}"))
            .collect();
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        let first = raw::idempotent_batch(pid, epoch, sequence, &values[..2]);
        let second = raw::idempotent_batch(pid, epoch, sequence + 2, &values[2..]);
        let (id0, frame0) = conn.produce_frame(&client_topic, 0, &first, 0);
        let (id1, frame1) = conn.produce_frame(&client_topic, 0, &second, 5_000);
        // In one write, so that Strait sends the second before the first's
        // answer is back (a batch sent after a failure is known is held
        // back).
        conn.send_raw(&[frame0, frame1].concat());
        let code = conn.produce_answer(id0).0;
        assert!(
            code == 7 || code == 0,
            "the first batch: {code}, not REQUEST_TIMED_OUT (or written)"
        );
        assert_eq!(conn.produce_answer(id1).0, 0, "the second batch");
        acked.extend(values.iter().map(|v| v.to_string()));
        sequence += 4;
        if code == 7 {
            timed_out = true;
            break;
        }
        eprintln!("attempt {attempt}: the followers had the first batch in time");
    }
    assert!(timed_out, "Kafka never timed the first batch out");
    let third = raw::idempotent_batch(pid, epoch, sequence, &["c0", "c1"]);
    assert_eq!(
        conn.produce(&client_topic, 0, &third, 5_000).0,
        0,
        "the next batch"
    );
    acked.extend(["c0".to_owned(), "c1".to_owned()]);
    assert_once_on_kafka(drill.kafka, &topic, &acked);
}

/// `strait mirror` from the cluster to itself (`m.` before each name)
/// while the leader of a source partition and then of a target partition
/// is SIGKILLed and started again: the target holds every source record
/// once, in order.
#[test]
fn leaders_killed_on_the_mirrors_source_and_target_keep_exactly_once() {
    let drill = Drill::start();
    let kafka = drill.kafka;
    let (topic, _) = drill.topic("mirrored");
    let target_topic = format!("m.{topic}");
    let b = kafka.bootstrap();
    let total = 6_000;
    let mut producer = spawn_client(
        "ck_acked.py",
        &[
            "--bootstrap",
            &b,
            "--topic",
            &topic,
            "--keyed",
            "--max",
            &total.to_string(),
            "--rate",
            "500",
            "--duration",
            "100",
            "--message-timeout",
            "90",
            "-X",
            "enable.idempotence=true",
        ],
    );
    let bootstrap: Vec<String> = b.split(',').map(|b| format!("\"{b}\"")).collect();
    let cluster = format!(
        "{{ bootstrap: [{}], request_timeout: 5s, connect_timeout: 2s }}",
        bootstrap.join(", ")
    );
    let mirror = support::MirrorProc::start(&format!(
        "clusters:\n  src: {cluster}\n  dst: {cluster}\nadmin:\n  listen: \"{{admin}}\"\n\
         mirrors:\n  m:\n    source: src\n    target: dst\n    topics: \"{topic}\"\n    rename: \"m.{{topic}}\"\n\
         \x20   commit_interval: 1s\n    discovery_interval: 1s\n"
    ));
    let acked_at_least = |producer: &mut BackgroundClient, n: usize| {
        let ok = producer.wait_for(Duration::from_secs(60), |lines| {
            lines.iter().filter(|l| l.starts_with("ACKED")).count() >= n
        });
        assert!(ok, "{}", producer.describe());
    };
    acked_at_least(&mut producer, 1_500);
    let leader = kafka.leader(&topic, 0);
    eprintln!("SIGKILL broker {leader}, the leader of source {topic}-0");
    kafka.kill(leader);
    std::thread::sleep(Duration::from_secs(4));
    kafka.restart(leader);
    acked_at_least(&mut producer, 3_500);
    let leader = kafka.leader(&target_topic, 1);
    eprintln!("SIGKILL broker {leader}, the leader of target {target_topic}-1");
    kafka.kill(leader);
    std::thread::sleep(Duration::from_secs(4));
    kafka.restart(leader);
    let status = producer
        .wait(Duration::from_secs(150))
        .expect("the producer ends");
    assert!(status.success(), "{}", producer.describe());
    let source = support::dump(&b, &topic, total, 1..6);
    let target = support::dump(&b, &target_topic, total, 1..6);
    for p in 0..3 {
        let p = p.to_string();
        let (s, t) = (&source[&p], target.get(&p).cloned().unwrap_or_default());
        assert_eq!(
            s.len(),
            t.len(),
            "partition {p}: {} on the source, {} on the target",
            s.len(),
            t.len()
        );
        assert_eq!(s, &t, "partition {p} differs");
    }
    assert_eq!(source.values().map(Vec::len).sum::<usize>(), total);
    drop(mirror);
}
