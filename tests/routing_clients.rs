//! Every client through Strait's router: kafka-python, the Java client (3.9.2 and 4.1.1),
//! kafkajs, Sarama (Debian's 1.22 and the current one), franz-go, aiokafka
//! and the rdkafka crate each produce keyed
//! records through one Strait to two upstream clusters, Apache Kafka (this
//! process's shared broker: `dc1.orders` is a topic named after the test
//! there) and Tansu (`legacy` is `legacy-v2` there), which hold them under
//! their own names, and consume them back through Strait in a group of two
//! members that Strait coordinates, whose commits land on the upstream
//! clusters; a second round in the same group resumes from those commits.
//! Idempotent producers (InitProducerId answered by Strait) write to
//! `dc1.orders`, plain gzip producers to `legacy`. (confluent-kafka goes
//! through the router in `tests/routing.rs`.)

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};
use serde_json::Value;
use strait_batch::BatchHeader;
use support::kafka::Kafka;
use support::local::{rd_config, Deliveries};
use support::{committed, raw, run_client, unique, Strait, Tansu};

/// Kafka and Tansu with their topics, and the Strait in front of them.
struct Routed {
    kafka: &'static Kafka,
    tansu: Tansu,
    /// Each route's topic on its cluster.
    names: Vec<String>,
    strait: Strait,
    _config: tempfile::TempDir,
}

impl Routed {
    /// For the test `name`: its topics on the shared Kafka carry its name.
    fn start(name: &str) -> Routed {
        let kafka = Kafka::shared();
        let tansu = Tansu::start_with(&["--cluster-id", "dc2"]);
        let names: Vec<String> = ROUTES
            .iter()
            .map(|r| {
                if r.on_kafka {
                    unique(&format!("{name}-{}", r.upstream))
                } else {
                    r.upstream.to_owned()
                }
            })
            .collect();
        for (route, upstream) in ROUTES.iter().zip(&names) {
            if route.on_kafka {
                kafka.create_topic(upstream, route.partitions, &[]);
            } else {
                support::create_topic("ck_admin.py", &tansu.bootstrap(), upstream, route.partitions);
            }
        }
        let routes: String = ROUTES
            .iter()
            .zip(&names)
            .map(|(r, n)| {
                let to = if r.on_kafka { "kafka" } else { "tansu" };
                format!("  - {{ exact: \"{}\", to: {to}, as: \"{n}\" }}\n", r.client)
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("strait.yaml");
        std::fs::write(
            &path,
            format!(
                "clusters:\n  kafka: {{ bootstrap: [\"{}\"] }}\n  tansu: {{ bootstrap: [\"{}\"] }}\n\
                 routes:\n{routes}  - {{ regex: \".*\", to: local }}\n",
                kafka.bootstrap(),
                tansu.bootstrap()
            ),
        )
        .unwrap();
        let strait = Strait::start(&["--config", path.to_str().unwrap()]);
        Routed {
            kafka,
            tansu,
            names,
            strait,
            _config: dir,
        }
    }

    /// The route's cluster: (its port, its bootstrap), and the topic's name
    /// there.
    fn upstream(&self, route: &Route) -> (u16, String, &str) {
        let i = ROUTES.iter().position(|r| r.client == route.client).unwrap();
        let name = self.names[i].as_str();
        if route.on_kafka {
            (self.kafka.port(), self.kafka.bootstrap(), name)
        } else {
            (self.tansu.port(), self.tansu.bootstrap(), name)
        }
    }
}

/// A topic as clients name it, where it lives, and how it is produced.
#[derive(Clone, Copy, Debug)]
struct Route {
    client: &'static str,
    /// Its name upstream (on Kafka, after the test's name).
    upstream: &'static str,
    on_kafka: bool,
    partitions: i32,
    count: usize,
    /// An idempotent producer (its InitProducerId is answered by Strait).
    idempotent: bool,
    compression: &'static str,
}

const ROUTES: [Route; 2] = [
    Route {
        client: "dc1.orders",
        upstream: "orders",
        on_kafka: true,
        partitions: 3,
        count: 150,
        idempotent: true,
        compression: "none",
    },
    Route {
        client: "legacy",
        upstream: "legacy-v2",
        on_kafka: false,
        partitions: 2,
        count: 80,
        idempotent: false,
        compression: "gzip",
    },
];

/// What a producer reported: records per partition, each partition's
/// [min, max] offset, and a fingerprint of the values to compare with the
/// consumer's (`values_sha` for the scripts).
#[derive(Debug)]
struct Produced {
    delivered: usize,
    partitions: BTreeMap<i32, u64>,
    offsets: BTreeMap<i32, (i64, i64)>,
    values_id: String,
    report: String,
}

/// What a group consumer reported.
#[derive(Debug)]
struct Consumed {
    records: u64,
    received: u64,
    duplicates: u64,
    values_id: String,
    /// Records each member received.
    by_member: Vec<u64>,
    /// The group's committed offsets, read through Strait after the run.
    committed: BTreeMap<i32, Option<i64>>,
    errors: Vec<String>,
    report: String,
}

/// A client under test.
#[derive(Clone, Copy, Debug)]
enum Client {
    /// A script of `tests/clients/` (`run_client` names) for produce and
    /// consume, and the flag that turns its idempotence off (if any).
    Script {
        produce: &'static str,
        consume: &'static str,
        no_idempotent: Option<&'static str>,
    },
    /// The rdkafka crate, driven here.
    Rdkafka,
}

impl Client {
    /// Records `start..start + count` of `route`, keyed.
    fn produce(self, b: &str, route: &Route, start: usize, count: usize) -> Produced {
        match self {
            Client::Script {
                produce,
                no_idempotent,
                ..
            } => {
                let (start, count) = (start.to_string(), count.to_string());
                let mut args = vec![
                    "--bootstrap",
                    b,
                    "--topic",
                    route.client,
                    "--start",
                    &start,
                    "--count",
                    &count,
                    "--keyed",
                    "--value-prefix",
                    route.client,
                    "--acks",
                    "all",
                    "--compression",
                    route.compression,
                    "--timeout",
                    "40",
                ];
                if route.idempotent {
                    args.push("--idempotent");
                } else if let Some(flag) = no_idempotent {
                    args.push(flag);
                }
                let out = run_client(produce, &args);
                Produced {
                    delivered: out["delivered"].as_u64().unwrap_or(0) as usize,
                    partitions: int_map(&out["partitions"])
                        .into_iter()
                        .map(|(p, n)| (p, n.as_u64().unwrap_or_else(|| panic!("{out}"))))
                        .collect(),
                    offsets: int_map(&out["offsets"])
                        .into_iter()
                        .map(|(p, r)| {
                            let r = r.as_array().unwrap_or_else(|| panic!("{out}"));
                            (p, (r[0].as_i64().unwrap(), r[1].as_i64().unwrap()))
                        })
                        .collect(),
                    values_id: out["values_sha"].as_str().unwrap_or_default().to_owned(),
                    report: out.to_string(),
                }
            }
            Client::Rdkafka => rd_produce(b, route, start, count),
        }
    }

    /// [`MEMBERS`] members of `group` subscribed to `route`'s topic,
    /// committing, until `expect` records arrived between them (and 2 s
    /// more for extras).
    fn consume(self, b: &str, route: &Route, group: &str, expect: usize) -> Consumed {
        match self {
            Client::Script { consume, .. } => {
                let expect = expect.to_string();
                let members = MEMBERS.to_string();
                let out = run_client(
                    consume,
                    &[
                        "--bootstrap",
                        b,
                        "--topic",
                        route.client,
                        "--group",
                        group,
                        "--commit",
                        "--members",
                        &members,
                        "--expect",
                        &expect,
                        "--linger",
                        "2",
                        "--timeout",
                        "40",
                    ],
                );
                Consumed {
                    records: support::get_u64(&out, "records"),
                    received: support::get_u64(&out, "received"),
                    duplicates: support::get_u64(&out, "duplicates"),
                    values_id: out["values_sha"].as_str().unwrap_or_default().to_owned(),
                    by_member: int_map(&out["by_member"])
                        .into_values()
                        .map(|n| n.as_u64().unwrap_or_else(|| panic!("{out}")))
                        .collect(),
                    committed: int_map(&out["committed"])
                        .into_iter()
                        .map(|(p, o)| (p, o.as_i64()))
                        .collect(),
                    errors: out["errors"]
                        .as_array()
                        .map(|e| e.iter().map(Value::to_string).collect())
                        .unwrap_or_default(),
                    report: out.to_string(),
                }
            }
            Client::Rdkafka => rd_consume(b, route, group, expect),
        }
    }
}

/// A JSON object keyed by partition numbers.
fn int_map(v: &Value) -> BTreeMap<i32, Value> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .iter()
        .map(|(p, x)| (p.parse().unwrap_or_else(|_| panic!("partition {p:?}")), x.clone()))
        .collect()
}

/// `prefix-i` -> i.
fn index_of(value: &str, prefix: &str) -> Option<u64> {
    value.strip_prefix(prefix)?.strip_prefix('-')?.parse().ok()
}

/// The record batch headers of partition `p` of `topic` on the broker at
/// `port` from offset `from` up to `end` (raw Fetch v12 requests).
fn upstream_batches(port: u16, topic: &str, p: i32, from: i64, end: i64) -> Vec<BatchHeader> {
    let mut c = raw::Conn::open(port, "batches");
    let mut headers: Vec<BatchHeader> = Vec::new();
    let mut next = from;
    let deadline = Instant::now() + Duration::from_secs(20);
    while next < end {
        let mut req = raw::fetch_request(topic, next, 100, 1, 8 << 20, 8 << 20);
        req.topics[0].partitions[0].partition = p;
        let response = c.fetch(&req);
        let partition = &response.responses[0].partitions[0];
        assert_eq!(partition.error_code, 0, "fetching {topic} p{p}: {partition:?}");
        let records = partition.records.clone().unwrap_or_default();
        let before = next;
        let mut at = 0;
        while let Ok(h) = BatchHeader::parse_whole(&records[at..]) {
            at += h.size();
            // (A fetch from inside a batch returns the whole batch.)
            if h.last_offset() >= next {
                next = h.last_offset() + 1;
                headers.push(h);
            }
        }
        if next == before {
            assert!(
                Instant::now() < deadline,
                "{topic} p{p}: no batch from offset {next} (up to {end}): {headers:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    headers
}

/// Records per route the resumed round adds.
const MORE: usize = 30;

/// Members of the group in each round.
const MEMBERS: usize = 2;

/// With `client`, through Strait, for every route: a first round (produce,
/// check on the upstream, consume in a group, check its commits there),
/// then a second round in the same group, which resumes from its commits
/// on the upstream and gets only the new records.
fn through_the_router(name: &str, client: Client) {
    let started = Instant::now();
    let routed = Routed::start(name);
    let group = unique(&format!("{name}-group"));
    for route in &ROUTES {
        let ends = round(
            name,
            client,
            &routed,
            route,
            &group,
            0,
            route.count,
            &BTreeMap::new(),
        );
        round(name, client, &routed, route, &group, route.count, MORE, &ends);
    }
    eprintln!("{name}: done in {:.1?}", started.elapsed());
}

/// One round on `route`: `client` produces records `start..start + count`
/// through Strait; the upstream holds every record so far once under its
/// own name, as the producer was told, in batches as produced (after
/// `before`, each partition's end before the round); the members of
/// `group` get exactly this round's records back through Strait between
/// them and commit them, and the upstream holds the commits. Returns each
/// partition's end.
#[allow(clippy::too_many_arguments)]
fn round(
    name: &str,
    client: Client,
    routed: &Routed,
    route: &Route,
    group: &str,
    start: usize,
    count: usize,
    before: &BTreeMap<i32, i64>,
) -> BTreeMap<i32, i64> {
    let what = format!("{name} {} (records {start}..{})", route.client, start + count);
    let b = routed.strait.bootstrap();
    let (upstream_port, upstream, upstream_topic) = routed.upstream(route);

    let produced = client.produce(&b, route, start, count);
    assert_eq!(produced.delivered, count, "{what}: {}", produced.report);

    // On the upstream, under its own name: every record once, keyed, this
    // round's where and at the offsets the producer was told.
    let stored = support::dump(&upstream, upstream_topic, start + count, 0..3);
    let mut indexes = BTreeSet::new();
    let mut key_partitions: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    let mut ends = BTreeMap::new();
    let mut this_round: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for (p, records) in &stored {
        let p: i32 = p.parse().unwrap();
        let mut offsets = BTreeSet::new();
        for r in records {
            let offset = r[0].as_i64().unwrap();
            assert!(offsets.insert(offset), "{what}: offset {offset} twice in p{p}");
            let value = r[2].as_str().unwrap_or_else(|| panic!("{what}: {r}"));
            let i =
                index_of(value, route.client).unwrap_or_else(|| panic!("{what}: a value not produced: {r}"));
            assert!(indexes.insert(i), "{what}: {value} stored twice");
            let key = format!("k{}", i % 16);
            assert_eq!(r[1].as_str(), Some(key.as_str()), "{what}: key of {r}");
            key_partitions.entry(key).or_default().insert(p);
            if i >= start as u64 {
                this_round.entry(p).or_default().push(offset);
            }
        }
        if let Some(last) = offsets.last() {
            ends.insert(p, last + 1);
        }
    }
    assert_eq!(
        indexes,
        (0..(start + count) as u64).collect::<BTreeSet<_>>(),
        "{what}: the values on {upstream} {}",
        upstream_topic
    );
    assert!(
        key_partitions.values().all(|ps| ps.len() == 1),
        "{what}: a key in two partitions: {key_partitions:?}"
    );
    let seen: BTreeMap<i32, (u64, (i64, i64))> = this_round
        .iter()
        .map(|(p, o)| (*p, (o.len() as u64, (o[0], *o.iter().max().unwrap()))))
        .collect();
    let told: BTreeMap<i32, (u64, (i64, i64))> = produced
        .partitions
        .iter()
        .map(|(p, n)| (*p, (*n, produced.offsets.get(p).copied().unwrap_or((-1, -1)))))
        .collect();
    assert_eq!(
        seen, told,
        "{what}: per partition (records, [first, last] offset) on the upstream vs the \
         producer's acknowledgements: {}",
        produced.report
    );

    // This round's batches as the upstream holds them: the producer's
    // codec, and for an idempotent producer one producer id (the
    // upstream's, which Strait asked for) with each partition's sequences
    // from 0.
    let mut producers = BTreeSet::new();
    for (p, end) in &ends {
        let from = before.get(p).copied().unwrap_or(0);
        let batches = upstream_batches(upstream_port, upstream_topic, *p, from, *end);
        assert_eq!(
            batches.iter().map(|h| h.record_count as u64).sum::<u64>(),
            produced.partitions.get(p).copied().unwrap_or(0),
            "{what}: p{p} {batches:?}"
        );
        let mut sequence = 0;
        for h in &batches {
            assert_eq!(
                h.compression().to_string(),
                route.compression,
                "{what}: p{p} {h:?}"
            );
            if route.idempotent {
                assert!(h.producer_id >= 0, "{what}: not idempotent: p{p} {h:?}");
                assert_eq!(h.base_sequence, sequence, "{what}: p{p} {batches:?}");
                sequence += h.record_count;
                producers.insert((h.producer_id, h.producer_epoch));
            } else {
                // (kafkajs, Sarama and aiokafka write base sequence 0.)
                assert_eq!(h.producer_id, -1, "{what}: p{p} {h:?}");
            }
        }
    }
    if route.idempotent {
        assert_eq!(producers.len(), 1, "{what}: {producers:?}");
    }

    // Back through Strait, in a group Strait coordinates: this round's
    // records exactly once (the group resumes from its commits), committed
    // where the data lives.
    let consumed = client.consume(&b, route, group, count);
    let report = &consumed.report;
    assert_eq!(consumed.records, count as u64, "{what}: {report}");
    assert_eq!(consumed.received, count as u64, "{what}: {report}");
    assert_eq!(consumed.duplicates, 0, "{what}: {report}");
    assert_eq!(
        consumed.values_id, produced.values_id,
        "{what}: the consumer's values vs the producer's: {report}"
    );
    assert!(consumed.errors.is_empty(), "{what}: {report}");
    assert_eq!(consumed.by_member.len(), MEMBERS, "{what}: {report}");
    if start == 0 {
        // (The members start together: both are in the first generation.)
        assert!(
            consumed.by_member.iter().all(|n| *n > 0),
            "{what}: a member got nothing: {report}"
        );
    }
    let expected: BTreeMap<i32, Option<i64>> = (0..route.partitions)
        .map(|p| (p, ends.get(&p).copied()))
        .collect();
    assert_eq!(
        consumed.committed, expected,
        "{what}: the group's commits read through Strait: {report}"
    );
    let on_upstream = committed(&upstream, group, upstream_topic);
    assert_eq!(
        on_upstream, expected,
        "{what}: the group's commits on the upstream {upstream} {}",
        upstream_topic
    );
    ends
}

#[test]
fn kafka_python_produces_and_consumes_through_the_router() {
    through_the_router(
        "kafka-python",
        Client::Script {
            produce: "kp_produce.py",
            consume: "kp_consume.py",
            no_idempotent: None,
        },
    );
}

#[test]
fn the_java_client_produces_and_consumes_through_the_router() {
    through_the_router(
        "java",
        Client::Script {
            produce: "java:produce",
            consume: "java:consume",
            no_idempotent: Some("--no-idempotent"),
        },
    );
}

/// The same with the current Java client, Kafka 4.1.1's own.
#[test]
fn the_current_java_client_produces_and_consumes_through_the_router() {
    through_the_router(
        "java4",
        Client::Script {
            produce: "java4:produce",
            consume: "java4:consume",
            no_idempotent: Some("--no-idempotent"),
        },
    );
}

#[test]
fn kafkajs_produces_and_consumes_through_the_router() {
    through_the_router(
        "kafkajs",
        Client::Script {
            produce: "kafkajs:produce",
            consume: "kafkajs:consume",
            no_idempotent: Some("--no-idempotent"),
        },
    );
}

#[test]
fn sarama_produces_and_consumes_through_the_router() {
    through_the_router(
        "sarama",
        Client::Script {
            produce: "sarama:produce",
            consume: "sarama:consume",
            no_idempotent: Some("--no-idempotent"),
        },
    );
}

#[test]
fn the_current_sarama_produces_and_consumes_through_the_router() {
    through_the_router(
        "sarama-current",
        Client::Script {
            produce: "sarama-current:produce",
            consume: "sarama-current:consume",
            no_idempotent: Some("--no-idempotent"),
        },
    );
}

#[test]
fn franz_go_produces_and_consumes_through_the_router() {
    through_the_router(
        "franz-go",
        Client::Script {
            produce: "franz:produce",
            consume: "franz:consume",
            no_idempotent: Some("--no-idempotent"),
        },
    );
}

#[test]
fn aiokafka_produces_and_consumes_through_the_router() {
    through_the_router(
        "aiokafka",
        Client::Script {
            produce: "aiokafka:produce",
            consume: "aiokafka:consume",
            no_idempotent: None,
        },
    );
}

#[test]
fn the_rdkafka_crate_produces_and_consumes_through_the_router() {
    through_the_router("rdkafka", Client::Rdkafka);
}

// ---------------------------------------------------------------------------
// The rdkafka crate (librdkafka 2.12)

/// The values' fingerprint: sorted distinct values, one a line.
fn values_id<'a>(values: impl Iterator<Item = &'a str>) -> String {
    values
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
        .join("\n")
}

/// Keyed `{topic}-{i}` records, as the scripts produce them.
fn rd_produce(b: &str, route: &Route, start: usize, count: usize) -> Produced {
    let producer: BaseProducer<Deliveries> = rd_config(b)
        .set("compression.codec", route.compression)
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "40000")
        .set("enable.idempotence", route.idempotent.to_string())
        .create_with_context(Deliveries::default())
        .expect("rdkafka producer");
    for i in start..start + count {
        let key = format!("k{}", i % 16);
        let value = format!("{}-{i}", route.client);
        let mut record = BaseRecord::to(route.client).key(&key).payload(&value);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(50));
                }
                Err((e, _)) => panic!("rdkafka send {value}: {e}"),
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(45)).expect("rdkafka flush");
    let failed = producer.context().failed.lock().unwrap().clone();
    let acked = producer.context().acked.lock().unwrap().clone();
    let mut partitions = BTreeMap::new();
    let mut offsets: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
    for (p, o, _) in &acked {
        *partitions.entry(*p).or_insert(0) += 1;
        let e = offsets.entry(*p).or_insert((*o, *o));
        *e = (e.0.min(*o), e.1.max(*o));
    }
    Produced {
        delivered: if failed.is_empty() { acked.len() } else { 0 },
        report: format!(
            "{} acknowledged, failed: {failed:?}, partitions {partitions:?}, offsets {offsets:?}",
            acked.len()
        ),
        values_id: values_id(acked.iter().map(|(_, _, v)| v.as_str())),
        partitions,
        offsets,
    }
}

/// [`MEMBERS`] rdkafka consumers (threads) in `group` subscribed to the
/// route's topic until `expect` distinct records arrived between them (then
/// 2 s more for extras) or 40 s; they commit automatically (librdkafka also
/// commits on revocation) and synchronously at the end. Then the group's
/// commits are read back through Strait.
fn rd_consume(b: &str, route: &Route, group: &str, expect: usize) -> Consumed {
    let seen = Mutex::new(BTreeMap::new());
    let reached = Mutex::new(None::<Instant>);
    let errors = Mutex::new(Vec::new());
    let deadline = Instant::now() + Duration::from_secs(40);
    let by_member: Vec<u64> = std::thread::scope(|scope| {
        let members: Vec<_> = (0..MEMBERS)
            .map(|i| {
                let (seen, reached, errors) = (&seen, &reached, &errors);
                scope.spawn(move || {
                    let consumer: BaseConsumer = rd_config(b)
                        .set("group.id", group)
                        .set("client.id", format!("rd-member-{i}"))
                        .set("auto.offset.reset", "earliest")
                        .set("enable.auto.commit", "true")
                        .set("auto.commit.interval.ms", "200")
                        .set("session.timeout.ms", "10000")
                        .set("heartbeat.interval.ms", "1000")
                        .create()
                        .expect("rdkafka consumer");
                    consumer.subscribe(&[route.client]).expect("subscribe");
                    let mut received = 0;
                    loop {
                        let done = match *reached.lock().unwrap() {
                            Some(t) => t.elapsed() > Duration::from_secs(2),
                            None => Instant::now() > deadline,
                        };
                        if done {
                            break;
                        }
                        match consumer.poll(Duration::from_millis(100)) {
                            Some(Ok(m)) => {
                                received += 1;
                                let value = String::from_utf8_lossy(m.payload().unwrap_or_default());
                                let mut s = seen.lock().unwrap();
                                s.insert((m.partition(), m.offset()), value.into_owned());
                                if s.len() >= expect {
                                    reached.lock().unwrap().get_or_insert_with(Instant::now);
                                }
                            }
                            Some(Err(e)) => errors.lock().unwrap().push(format!("member {i}: {e}")),
                            None => {}
                        }
                    }
                    match consumer.commit_consumer_state(CommitMode::Sync) {
                        Ok(()) | Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
                        Err(e) => errors.lock().unwrap().push(format!("member {i} commit: {e}")),
                    }
                    consumer.unsubscribe();
                    received
                })
            })
            .collect();
        members
            .into_iter()
            .map(|m| m.join().expect("member thread"))
            .collect()
    });
    let probe: BaseConsumer = rd_config(b)
        .set("group.id", group)
        .create()
        .expect("rdkafka consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..route.partitions {
        tpl.add_partition(route.client, p);
    }
    let committed = probe
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("rdkafka OffsetFetch")
        .elements()
        .iter()
        .map(|e| {
            let o = match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            };
            (e.partition(), o)
        })
        .collect();
    let seen = seen.into_inner().unwrap();
    let errors = errors.into_inner().unwrap();
    let received = by_member.iter().sum::<u64>();
    Consumed {
        records: seen.len() as u64,
        received,
        duplicates: received - seen.len() as u64,
        values_id: values_id(seen.values().map(String::as_str)),
        report: format!(
            "{} distinct of {received} received (by member {by_member:?}), committed \
             {committed:?}, errors {errors:?}",
            seen.len()
        ),
        by_member,
        committed,
        errors,
    }
}
