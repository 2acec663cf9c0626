//! Helpers shared by the `local_*` test crates (`strait serve` as a Kafka
//! broker for local spool topics, against real clients): records and the
//! exactly-once check, scripted clients and kcat, the stored batches (seen
//! with `strait spool dump`), and the rdkafka crate.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext, Message, Offset, TopicPartitionList};
use serde_json::Value;

use super::{create_topic, get_u64, kcat_timeout, run_client, strait_bin, try_client, Strait};

/// A delivered record: (partition, offset, key, value).
pub type Arrival = (i32, i64, Option<String>, String);

/// Every codec Kafka has.
pub const CODECS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];
/// Records per codec.
pub const PER_CODEC: u64 = 60;
/// Partitions of every test topic.
pub const PARTITIONS: i32 = 8;

// ---------------------------------------------------------------------------
// Records and the exactly-once check

/// What a consumer saw.
#[derive(Debug, Default)]
pub struct Consumed {
    /// Distinct records: (partition, offset) -> (key, value).
    pub records: BTreeMap<(i32, i64), (Option<String>, String)>,
    /// Deliveries of a (partition, offset) already seen.
    pub duplicates: u64,
    /// Each partition's offsets rose strictly in delivery order (per
    /// consumer; a partition handed over in a rebalance starts over).
    pub in_order: bool,
    /// Why not, if not.
    pub order_violations: String,
}

impl Consumed {
    /// From a `ck_consume.py` / `kp_consume.py` JSON result (with
    /// `--records`).
    pub fn from_json(v: &Value) -> Consumed {
        let list = v["records_list"]
            .as_array()
            .unwrap_or_else(|| panic!("no records_list in {v}"));
        let mut records = BTreeMap::new();
        for r in list {
            let p = r[0].as_i64().expect("partition") as i32;
            let o = r[1].as_i64().expect("offset");
            let key = r[2].as_str().map(str::to_string);
            let value = r[3].as_str().expect("value").to_string();
            records.insert((p, o), (key, value));
        }
        Consumed {
            records,
            duplicates: get_u64(v, "duplicates"),
            in_order: v["per_partition_in_order"] == true,
            order_violations: v["order_violations"].to_string(),
        }
    }

    /// From records in delivery order, one list per consumer.
    pub fn from_arrivals(per_consumer: &[Vec<Arrival>]) -> Consumed {
        let mut c = Consumed {
            in_order: true,
            ..Consumed::default()
        };
        for arrivals in per_consumer {
            let mut last: BTreeMap<i32, i64> = BTreeMap::new();
            for (p, o, key, value) in arrivals {
                if let Some(&prev) = last.get(p) {
                    if *o <= prev {
                        c.in_order = false;
                        if c.order_violations.len() < 500 {
                            c.order_violations += &format!("[p{p}: {prev} then {o}] ");
                        }
                    }
                }
                last.insert(*p, *o);
                if c.records.insert((*p, *o), (key.clone(), value.clone())).is_some() {
                    c.duplicates += 1;
                }
            }
        }
        c
    }

    pub fn per_partition(&self) -> BTreeMap<i32, u64> {
        let mut m = BTreeMap::new();
        for (p, _) in self.records.keys() {
            *m.entry(*p).or_insert(0) += 1;
        }
        m
    }

    pub fn first_offsets(&self) -> BTreeMap<i32, i64> {
        let mut m = BTreeMap::new();
        for (p, o) in self.records.keys() {
            m.entry(*p).or_insert(*o);
        }
        m
    }
}

/// Values "{prefix}-{i}" for i in start..start+count.
pub fn values(prefix: &str, start: u64, count: u64) -> BTreeSet<String> {
    (start..start + count).map(|i| format!("{prefix}-{i}")).collect()
}

/// Parses "{prefix}-{i}" (padding dots ignored) into (prefix, i).
pub fn split_value(v: &str) -> (String, u64) {
    let v = v.trim_end_matches('.');
    let (prefix, i) = v.rsplit_once('-').unwrap_or_else(|| panic!("bad value {v:?}"));
    (
        prefix.to_string(),
        i.parse().unwrap_or_else(|_| panic!("bad value {v:?}")),
    )
}

/// Asserts `c` holds exactly the `expected` values, each once, with key
/// `k{i % 16}`, each key on one partition in production order, every
/// partition's offsets contiguous from `first[p]` (0 if absent), and no
/// duplicate or out-of-order delivery.
pub fn check_exactly_once(what: &str, c: &Consumed, expected: &BTreeSet<String>, first: &BTreeMap<i32, i64>) {
    assert_eq!(
        c.duplicates, 0,
        "{what}: {} records were delivered twice",
        c.duplicates
    );
    assert!(
        c.in_order,
        "{what}: a partition's records came out of order: {}",
        c.order_violations
    );
    let got: Vec<&String> = c.records.values().map(|(_, v)| v).collect();
    let distinct: BTreeSet<String> = got.iter().map(|v| v.to_string()).collect();
    assert_eq!(
        distinct.len(),
        got.len(),
        "{what}: a value is stored at two offsets (a duplicate append)"
    );
    let missing: Vec<&String> = expected.difference(&distinct).take(10).collect();
    let extra: Vec<&String> = distinct.difference(expected).take(10).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: consumed {} records, expected {}; missing (first 10) {missing:?}, unexpected {extra:?}",
        distinct.len(),
        expected.len()
    );

    let mut partition_of_key: BTreeMap<String, i32> = BTreeMap::new();
    let mut by_key: BTreeMap<String, Vec<(i64, u64)>> = BTreeMap::new();
    for ((p, o), (key, value)) in &c.records {
        let (_, i) = split_value(value);
        let key = key
            .clone()
            .unwrap_or_else(|| panic!("{what}: record p{p}@{o} {value:?} has no key"));
        assert_eq!(key, format!("k{}", i % 16), "{what}: record p{p}@{o} {value:?}");
        let on = *partition_of_key.entry(key.clone()).or_insert(*p);
        assert_eq!(on, *p, "{what}: key {key} is on partitions {on} and {p}");
        by_key.entry(key).or_default().push((*o, i));
    }
    for (key, mut recs) in by_key {
        recs.sort();
        let order: Vec<u64> = recs.iter().map(|r| r.1).collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(
            order, sorted,
            "{what}: key {key}: offsets not in production order"
        );
    }
    for (p, n) in c.per_partition() {
        let start = first.get(&p).copied().unwrap_or(0);
        let offsets: Vec<i64> = c
            .records
            .range((p, i64::MIN)..=(p, i64::MAX))
            .map(|(k, _)| k.1)
            .collect();
        let want: Vec<i64> = (start..start + n as i64).collect();
        assert_eq!(
            offsets, want,
            "{what}: partition {p} offsets are not contiguous from {start}"
        );
    }
}

pub fn sum(m: &BTreeMap<i32, u64>) -> u64 {
    m.values().sum()
}

/// `{"p": n}` JSON object into a map.
pub fn partition_counts(v: &Value, key: &str) -> BTreeMap<i32, u64> {
    v[key]
        .as_object()
        .unwrap_or_else(|| panic!("no object {key:?} in {v}"))
        .iter()
        .map(|(p, n)| {
            (
                p.parse().unwrap(),
                n.as_u64().unwrap_or_else(|| panic!("{key}.{p} in {v}")),
            )
        })
        .collect()
}

/// The Strait log, for assertion messages.
pub fn log_tail(strait: &Strait) -> String {
    let log = strait.log();
    let n = log.len().saturating_sub(6000);
    let mut i = n;
    while !log.is_char_boundary(i) {
        i += 1;
    }
    format!("--- strait.log (tail) ---\n{}", &log[i..])
}

// ---------------------------------------------------------------------------
// Scripted clients (tests/clients/): Python, Java, kafkajs, Sarama

pub fn ck_create(b: &str, topic: &str, partitions: i32) {
    create_topic("ck_admin.py", b, topic, partitions);
}

/// Runs a scripted producer (`*_produce.py`, `java:produce`,
/// `kafkajs:produce`); asserts every record was delivered and
/// returns the per-partition counts.
pub fn client_produce(
    script: &str,
    b: &str,
    topic: &str,
    codec: &str,
    start: u64,
    count: u64,
    extra: &[&str],
) -> BTreeMap<i32, u64> {
    let (s, n) = (start.to_string(), count.to_string());
    let mut args = vec![
        "--bootstrap",
        b,
        "--topic",
        topic,
        "--count",
        &n,
        "--start",
        &s,
        "--compression",
        codec,
        "--keyed",
        "--acks",
        "all",
    ];
    args.extend_from_slice(extra);
    let produced = run_client(script, &args);
    assert_eq!(
        get_u64(&produced, "delivered"),
        count,
        "{script} {codec}: {produced}"
    );
    assert_eq!(
        get_u64(&produced, "error_count"),
        0,
        "{script} {codec}: {produced}"
    );
    let counts = partition_counts(&produced, "partitions");
    assert_eq!(sum(&counts), count, "{produced}");
    counts
}

/// Runs a scripted consumer in `--assign` mode (no group).
pub fn client_consume_assign(script: &str, b: &str, topic: &str, expect: u64) -> Consumed {
    let e = expect.to_string();
    let run = try_client(
        script,
        &[
            "--bootstrap",
            b,
            "--topic",
            topic,
            "--assign",
            "--expect",
            &e,
            "--linger",
            "1",
            "--records",
            "--timeout",
            "30",
        ],
    );
    let json = run
        .json
        .clone()
        .unwrap_or_else(|| panic!("no JSON from consumer: {}", run.describe()));
    assert!(
        run.status.success(),
        "{script} --assign saw {} of {expect} records: {}",
        json["records"],
        run.describe()
    );
    assert_eq!(json["errors"].as_array().map(Vec::len), Some(0), "{json}");
    Consumed::from_json(&json)
}

/// A Strait for the group tests: the first rebalance of a new group waits
/// 1 s for more members instead of Kafka's (and Strait's default) 3 s; the
/// members of a test start within milliseconds of each other. Keep the
/// returned directory (the config file is read again on restart).
pub fn group_strait() -> (Strait, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("strait.yaml");
    std::fs::write(&path, "broker:\n  group_initial_rebalance_delay: 1s\n").expect("config");
    (Strait::start(&["--config", path.to_str().unwrap()]), dir)
}

/// Asserts both members of a group consumed something.
pub fn check_both_members(what: &str, by_member: &[u64]) {
    assert!(
        by_member.len() == 2 && by_member.iter().all(|&n| n > 0),
        "{what}: both members should take part, records per member: {by_member:?}"
    );
}

// ---------------------------------------------------------------------------
// kcat

pub const KCAT_FORMAT: &str = "%p\t%o\t%k\t%s\n";

pub fn kcat_lines(out: &[u8]) -> Vec<Arrival> {
    String::from_utf8_lossy(out)
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.splitn(4, '\t').collect();
            assert_eq!(f.len(), 4, "kcat line {l:?}");
            (
                f[0].parse().unwrap_or_else(|_| panic!("kcat line {l:?}")),
                f[1].parse().unwrap_or_else(|_| panic!("kcat line {l:?}")),
                (!f[2].is_empty()).then(|| f[2].to_string()),
                f[3].to_string(),
            )
        })
        .collect()
}

/// Produces keyed records "k{i%16}:{codec}-{i}" with kcat.
pub fn kcat_produce(b: &str, topic: &str, codec: &str, start: u64, count: u64) {
    let input: String = (start..start + count)
        .map(|i| format!("k{}:{codec}-{i}\n", i % 16))
        .collect();
    let (out, timed_out) = kcat_timeout(
        &[
            "-b", b, "-P", "-t", topic, "-K", ":", "-z", codec, "-X", "acks=all",
        ],
        Some(input.as_bytes()),
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !timed_out && !stderr.contains("ERROR") && !stderr.contains("failed"),
        "kcat -P -z {codec}: {} {stderr}",
        out.status
    );
}

// ---------------------------------------------------------------------------
// The stored batches, seen with `strait spool dump`

/// Every stored batch of the topic carries a producer id, the sequences
/// of each producer id rise without gaps per partition, and `ids` producer
/// ids wrote them (seen with `strait spool dump`).
pub fn check_idempotent_batches(strait: &Strait, topic: &str, ids: usize) {
    let mut producer_ids = BTreeSet::new();
    for p in 0..PARTITIONS {
        let dir = strait.data_dir().join("topics").join(format!("{topic}-{p}"));
        let out = Command::new(strait_bin())
            .args(["spool", "dump"])
            .arg(&dir)
            .output()
            .expect("running strait spool dump");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "spool dump {}: {text}", dir.display());
        let mut next_seq: BTreeMap<i64, i64> = BTreeMap::new();
        for line in text.lines().filter(|l| l.starts_with("baseOffset:")) {
            let field = |name: &str| -> i64 {
                let at = line
                    .find(&format!("{name}: "))
                    .unwrap_or_else(|| panic!("no {name} in {line}"));
                line[at + name.len() + 2..]
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap()
            };
            let pid = field("producerId");
            assert!(pid >= 0, "partition {p}: a batch without producer id: {line}");
            producer_ids.insert(pid);
            let (base, last) = (field("baseSequence"), field("lastSequence"));
            let want = next_seq.get(&pid).copied().unwrap_or(0);
            assert_eq!(
                base, want,
                "partition {p}: producer {pid} sequence gap or repeat: {line}"
            );
            next_seq.insert(pid, last + 1);
        }
    }
    assert_eq!(
        producer_ids.len(),
        ids,
        "producer ids in the log: {producer_ids:?}"
    );
}

/// Asserts that partition `p` of `topic` holds exactly one batch, written
/// with `codec` (seen with `strait spool dump`).
pub fn assert_one_batch(strait: &Strait, topic: &str, p: i32, codec: &str) {
    let dir = strait.data_dir().join("topics").join(format!("{topic}-{p}"));
    let out = Command::new(strait_bin())
        .args(["spool", "dump"])
        .arg(&dir)
        .output()
        .expect("strait spool dump");
    let text = String::from_utf8_lossy(&out.stdout);
    let batches: Vec<&str> = text.lines().filter(|l| l.starts_with("baseOffset:")).collect();
    assert_eq!(batches.len(), 1, "partition {p}: {text}");
    assert!(
        batches[0].contains(&format!("compresscodec: {codec}")),
        "partition {p}: {}",
        batches[0]
    );
}

// ---------------------------------------------------------------------------
// The rdkafka crate (librdkafka 2.12, built without zstd by default)

/// Collects delivery reports.
#[derive(Default)]
pub struct Deliveries {
    /// (partition, offset, value) of every acknowledged record.
    pub acked: Mutex<Vec<(i32, i64, String)>>,
    /// What failed, with its value.
    pub failed: Mutex<Vec<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(m) => self.acked.lock().unwrap().push((
                m.partition(),
                m.offset(),
                String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
            )),
            Err((e, m)) => self.failed.lock().unwrap().push(format!(
                "{e} ({})",
                String::from_utf8_lossy(m.payload().unwrap_or_default())
            )),
        }
    }
}

pub fn rd_config(b: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", b)
        .set("allow.auto.create.topics", "false")
        .set("socket.timeout.ms", "10000");
    c
}

pub fn rd_producer(b: &str, codec: &str, idempotent: bool) -> Result<BaseProducer<Deliveries>, KafkaError> {
    rd_config(b)
        .set("compression.codec", codec)
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "30000")
        .set("enable.idempotence", if idempotent { "true" } else { "false" })
        .create_with_context(Deliveries::default())
}

/// Produces keyed "{codec}-{i}" records; asserts all were acknowledged and
/// returns (partition, offset, value) per record.
pub fn rd_produce(
    producer: &BaseProducer<Deliveries>,
    topic: &str,
    prefix: &str,
    start: u64,
    count: u64,
) -> Vec<(i32, i64, String)> {
    for i in start..start + count {
        let key = format!("k{}", i % 16);
        let value = format!("{prefix}-{i}");
        let mut record = BaseRecord::to(topic).key(&key).payload(&value);
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
    producer.flush(Duration::from_secs(40)).expect("rdkafka flush");
    let failed = producer.context().failed.lock().unwrap().clone();
    assert!(failed.is_empty(), "rdkafka deliveries failed: {failed:?}");
    let acked: Vec<_> = std::mem::take(&mut *producer.context().acked.lock().unwrap());
    assert_eq!(acked.len() as u64, count, "rdkafka acknowledged records");
    acked
}

pub fn rd_record(m: &rdkafka::message::BorrowedMessage<'_>) -> Arrival {
    (
        m.partition(),
        m.offset(),
        m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
        String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
    )
}

/// Reads every partition from the beginning without a group until
/// `expect` records arrived (plus one second for extras) or 30 s.
pub fn rd_consume_assign(b: &str, topic: &str, expect: usize) -> Consumed {
    let consumer: BaseConsumer = rd_config(b)
        .set("group.id", "rd-assign-unused")
        .set("enable.auto.commit", "false")
        .create()
        .expect("rdkafka consumer");
    let md = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("rdkafka metadata");
    let partitions = md.topics()[0].partitions().len() as i32;
    assert!(partitions > 0, "no partitions for {topic}");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).expect("rdkafka assign");
    let mut arrivals = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut reached: Option<Instant> = None;
    while Instant::now() < deadline && reached.is_none_or(|t| t.elapsed() < Duration::from_secs(1)) {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => arrivals.push(rd_record(&m)),
            Some(Err(e)) => panic!("rdkafka consumer error: {e}"),
            None => {}
        }
        if reached.is_none() && arrivals.len() >= expect {
            reached = Some(Instant::now());
        }
    }
    assert!(
        arrivals.len() >= expect,
        "rdkafka consumer saw {} of {expect}",
        arrivals.len()
    );
    Consumed::from_arrivals(&[arrivals])
}

/// Codecs the rdkafka crate's librdkafka was built with, checked: zstd
/// needs the crate's `zstd` feature, which the workspace does not enable,
/// so librdkafka must refuse it at configuration time.
pub fn rd_codecs(b: &str) -> Vec<&'static str> {
    match rd_producer(b, "zstd", false) {
        Ok(_) => CODECS.to_vec(),
        Err(e) => {
            assert!(
                e.to_string().contains("zstd"),
                "zstd refused for another reason: {e}"
            );
            CODECS.iter().copied().filter(|c| *c != "zstd").collect()
        }
    }
}

/// A current-thread runtime to wait for the admin client's futures.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(f)
}

pub fn rd_admin(b: &str) -> AdminClient<DefaultClientContext> {
    rd_config(b).create().expect("rdkafka admin client")
}

pub fn rd_create_topic(b: &str, topic: &str, partitions: i32) -> Result<(), RDKafkaErrorCode> {
    rd_create(&rd_admin(b), topic, partitions, 1)
}

pub fn rd_create(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
    partitions: i32,
    rf: i32,
) -> Result<(), RDKafkaErrorCode> {
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(rf));
    let results = block_on(admin.create_topics([&new], &opts)).expect("CreateTopics request");
    assert_eq!(results.len(), 1);
    match &results[0] {
        Ok(name) => {
            assert_eq!(name, topic);
            Ok(())
        }
        Err((name, code)) => {
            assert_eq!(name, topic);
            Err(*code)
        }
    }
}

/// Produces `count` records "{prefix}-{i}" to one partition with explicit
/// timestamps `ts(i)`; returns their acknowledged offsets.
#[allow(clippy::too_many_arguments)]
pub fn rd_produce_at(
    b: &str,
    topic: &str,
    partition: i32,
    codec: &str,
    prefix: &str,
    count: u64,
    ts: impl Fn(u64) -> i64,
) -> Vec<i64> {
    let producer = rd_producer(b, codec, false).expect("producer");
    for i in 0..count {
        let key = format!("k{}", i % 16);
        let value = format!("{prefix}-{i}");
        producer
            .send(
                BaseRecord::to(topic)
                    .partition(partition)
                    .key(&key)
                    .payload(&value)
                    .timestamp(ts(i)),
            )
            .map_err(|(e, _)| e)
            .expect("send");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    let failed = producer.context().failed.lock().unwrap().clone();
    assert!(failed.is_empty(), "{failed:?}");
    let mut acked = producer.context().acked.lock().unwrap().clone();
    acked.sort();
    assert_eq!(acked.len() as u64, count);
    acked.into_iter().map(|a| a.1).collect()
}
