//! More of the protocol through real clients (the rdkafka crate,
//! confluent-kafka, kafka-python, kcat) against `strait serve` with local
//! topics: commits without a group, timestamps (ListOffsets), long polling,
//! fetch and record size limits, acks, old protocol versions, partitions,
//! topic configs, auto-creation.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::thread;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use support::local::{
    assert_one_batch, block_on, check_exactly_once, ck_create, client_consume_assign, client_produce,
    kcat_lines, kcat_produce, log_tail, rd_admin, rd_codecs, rd_config, rd_consume_assign, rd_create,
    rd_create_topic, rd_produce_at, rd_producer, rd_record, values, Consumed, KCAT_FORMAT,
};
use support::{get_u64, kcat_timeout, run_client, try_client, unique, Strait};

/// A consumer that assigns partitions itself commits with generation -1
/// (standalone commits, as Kafka allows); the commits survive a restart.
#[test]
fn rdkafka_crate_standalone_commits_without_a_group_survive_a_restart() {
    let mut strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let topic = unique("rd-standalone");
    let group = unique("rd-standalone");
    rd_create_topic(&b, &topic, 4).expect("create");
    for p in 0..4 {
        rd_produce_at(&b, &topic, p, "none", &format!("p{p}"), 20, |_| 1_700_000_000_000);
    }
    let consumer: BaseConsumer = rd_config(&b)
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for (p, o) in [(0, 5), (1, 20), (2, 0), (3, 13)] {
        tpl.add_partition_offset(&topic, p, Offset::Offset(o)).unwrap();
    }
    consumer
        .commit(&tpl, CommitMode::Sync)
        .expect("standalone OffsetCommit");
    drop(consumer);

    let status = strait.stop();
    assert!(status.success(), "strait exited {status}\n{}", log_tail(&strait));
    strait.restart();

    let probe: BaseConsumer = rd_config(&b)
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut q = TopicPartitionList::new();
    for p in 0..4 {
        q.add_partition(&topic, p);
    }
    let got = probe
        .committed_offsets(q, Duration::from_secs(10))
        .expect("OffsetFetch");
    let got: Vec<(i32, Offset)> = got
        .elements()
        .iter()
        .map(|e| (e.partition(), e.offset()))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, Offset::Offset(5)),
            (1, Offset::Offset(20)),
            (2, Offset::Offset(0)),
            (3, Offset::Offset(13)),
        ],
        "committed offsets after a restart"
    );

    // A consumer of the group starts where the commits say.
    let c: BaseConsumer = rd_config(&b)
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut a = TopicPartitionList::new();
    a.add_partition_offset(&topic, 3, Offset::Stored).unwrap();
    c.assign(&a).expect("assign");
    let deadline = Instant::now() + Duration::from_secs(20);
    let first = loop {
        assert!(Instant::now() < deadline, "nothing read from the stored offset");
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            break rd_record(&m.expect("message"));
        }
    };
    assert_eq!((first.0, first.1, first.3.as_str()), (3, 13, "p3-13"));
}

/// ListOffsets: earliest, latest and by timestamp (the offset of the first
/// record whose timestamp is at or after the one asked, as Kafka answers;
/// -1 past the newest). Partition 0 holds 20 records one per batch, every
/// other partition the same timestamps in one batch of 20 (what producers
/// send), one partition per codec, so a failure on those alone points at
/// answers found inside a batch.
#[test]
fn rdkafka_crate_list_offsets_by_timestamp() {
    let strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let topic = unique("rd-times");
    // Partition 0: one record per batch. Partitions 1..: one batch of 20
    // records each, in every codec this librdkafka has: the record inside a
    // compressed batch is found by decompressing it.
    let codecs = rd_codecs(&b);
    rd_create_topic(&b, &topic, 1 + codecs.len() as i32).expect("create");
    let t0: i64 = 1_700_000_000_000;
    for i in 0..20 {
        let offsets = rd_produce_at(&b, &topic, 0, "none", &format!("s{i}"), 1, |_| {
            t0 + i as i64 * 1000
        });
        assert_eq!(offsets, vec![i as i64]);
    }
    let mut layout = vec![(0, "none, one record per batch")];
    for (n, codec) in codecs.iter().enumerate() {
        let p = n as i32 + 1;
        // Long, repetitive values: librdkafka sends a batch uncompressed
        // when compressing does not make it smaller.
        let prefix = "t".repeat(300);
        let offsets = rd_produce_at(&b, &topic, p, codec, &prefix, 20, |i| t0 + i as i64 * 1000);
        assert_eq!(offsets, (0..20).collect::<Vec<i64>>());
        layout.push((p, codec));
    }
    for &(p, codec) in &layout[1..] {
        assert_one_batch(&strait, &topic, p, codec);
    }

    let c: BaseConsumer = rd_config(&b)
        .set("group.id", "rd-times")
        .create()
        .expect("consumer");
    let mut wrong = Vec::new();
    for &(p, what) in &layout {
        assert_eq!(
            c.fetch_watermarks(&topic, p, Duration::from_secs(10))
                .expect("watermarks"),
            (0, 20)
        );
        for (ts, want) in [
            (t0 - 5000, Offset::Offset(0)),
            (t0, Offset::Offset(0)),
            (t0 + 5500, Offset::Offset(6)),
            (t0 + 19_000, Offset::Offset(19)),
            (t0 + 60_000, Offset::End),
        ] {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(&topic, p, Offset::Offset(ts)).unwrap();
            let got = c
                .offsets_for_times(tpl, Duration::from_secs(10))
                .expect("ListOffsets");
            let got = got.elements()[0].offset();
            // librdkafka shows "no such record" (-1) as End.
            let ok = got == want || (want == Offset::End && got == Offset::Offset(-1));
            if !ok {
                wrong.push(format!(
                    "partition {p} ({what}): timestamp t0{:+} -> {got:?}, want {want:?}",
                    ts - t0
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "ListOffsets by timestamp:\n{}",
        wrong.join("\n")
    );
}

/// A consumer parked at the end of a partition with a long fetch.wait.max.ms
/// gets a new record as soon as it is produced (the long poll wakes on the
/// append instead of sleeping out its max wait).
#[test]
fn rdkafka_crate_long_poll_wakes_on_produce() {
    let strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let topic = unique("rd-longpoll");
    rd_create_topic(&b, &topic, 1).expect("create");
    let c: BaseConsumer = rd_config(&b)
        .set("group.id", "rd-longpoll")
        .set("fetch.wait.max.ms", "8000")
        .set("fetch.min.bytes", "1")
        .set("enable.partition.eof", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, Offset::Beginning).unwrap();
    c.assign(&tpl).expect("assign");
    let producer = rd_producer(&b, "none", false).expect("producer");
    // Let the consumer reach the (empty) end and park its fetch.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1500) {
        assert!(
            c.poll(Duration::from_millis(100)).is_none(),
            "a record from an empty topic"
        );
    }
    for i in 0..3 {
        let value = format!("wake-{i}");
        let sent = Instant::now();
        producer
            .send(BaseRecord::<str, str>::to(&topic).payload(value.as_str()))
            .map_err(|(e, _)| e)
            .expect("send");
        producer.flush(Duration::from_secs(10)).expect("flush");
        let got = loop {
            if let Some(m) = c.poll(Duration::from_millis(50)) {
                break rd_record(&m.expect("message"));
            }
            assert!(
                sent.elapsed() < Duration::from_secs(15),
                "record {i} never arrived"
            );
        };
        let latency = sent.elapsed();
        assert_eq!((got.1, got.3.as_str()), (i, value.as_str()));
        assert!(
            latency < Duration::from_secs(3),
            "record {i} took {latency:?} to reach a consumer whose fetch waits up to 8 s: \
             the long poll did not wake on the append"
        );
        // Park again before the next one.
        thread::sleep(Duration::from_millis(700));
    }
}

/// Topics grow with CreatePartitions; the new partitions take records.
#[test]
fn rdkafka_crate_create_partitions_grows_a_topic() {
    let strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let admin = rd_admin(&b);
    let topic = unique("rd-grow");
    rd_create(&admin, &topic, 2, 1).expect("create");
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
    let grown = block_on(admin.create_partitions([&rdkafka::admin::NewPartitions::new(&topic, 5)], &opts))
        .expect("CreatePartitions");
    assert_eq!(grown, vec![Ok(topic.clone())]);
    let shrink = block_on(admin.create_partitions([&rdkafka::admin::NewPartitions::new(&topic, 3)], &opts))
        .expect("CreatePartitions");
    assert!(
        matches!(&shrink[..], [Err((_, RDKafkaErrorCode::InvalidPartitions))]),
        "shrinking: {shrink:?}"
    );
    let md = admin
        .inner()
        .fetch_metadata(Some(&topic), Duration::from_secs(10))
        .expect("metadata");
    assert_eq!(md.topics()[0].partitions().len(), 5);
    let offsets = rd_produce_at(&b, &topic, 4, "none", "new", 10, |_| 1_700_000_000_000);
    assert_eq!(offsets, (0..10).collect::<Vec<i64>>());
    let consumed = rd_consume_assign(&b, &topic, 10);
    assert!(
        consumed.records.keys().all(|(p, _)| *p == 4),
        "{:?}",
        consumed.records.keys()
    );
    assert_eq!(consumed.records.len(), 10);
}

/// acks=0 and acks=1 records are stored like acks=all ones.
#[test]
fn confluent_kafka_acks_0_and_1_are_stored() {
    let strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let topic = unique("ck-acks");
    ck_create(&b, &topic, 4);
    for (acks, start) in [("0", 0u64), ("1", 150)] {
        let (s, prefix) = (start.to_string(), format!("acks{acks}"));
        let produced = run_client(
            "ck_produce.py",
            &[
                "--bootstrap",
                &b,
                "--topic",
                &topic,
                "--count",
                "150",
                "--start",
                &s,
                "--keyed",
                "--acks",
                acks,
                "--value-prefix",
                &prefix,
            ],
        );
        assert_eq!(get_u64(&produced, "delivered"), 150, "{produced}");
    }
    let consumed = client_consume_assign("ck_consume.py", &b, &topic, 300);
    let expected: BTreeSet<String> = values("acks0", 0, 150)
        .into_iter()
        .chain(values("acks1", 150, 150))
        .collect();
    check_exactly_once("acks 0 and 1", &consumed, &expected, &BTreeMap::new());
    // acks=0 gets no answer at all: the connection must not be confused by
    // answers it does not expect (checked by the acks=1 run after it).
}

/// A record larger than max_batch_bytes (1 MiB by default) is refused with
/// MESSAGE_TOO_LARGE, and the producer's next records still go through.
#[test]
fn confluent_kafka_oversized_record_is_refused_with_message_too_large() {
    let strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let topic = unique("ck-big");
    ck_create(&b, &topic, 1);
    let run = try_client(
        "ck_produce.py",
        &[
            "--bootstrap",
            &b,
            "--topic",
            &topic,
            "--count",
            "1",
            "--value-size",
            "1500000",
            "--value-prefix",
            "big",
            "-X",
            "message.max.bytes=3000000",
            "--timeout",
            "15",
        ],
    );
    let json = run.json.clone().unwrap_or_else(|| panic!("{}", run.describe()));
    assert_eq!(get_u64(&json, "delivered"), 0, "{json}");
    let errors = json["errors"].to_string();
    assert!(
        errors.contains("MSG_SIZE_TOO_LARGE"),
        "the error should be MESSAGE_TOO_LARGE: {json}"
    );
    assert!(
        run.elapsed < Duration::from_secs(14),
        "refused only by the client's timeout: {json}"
    );
    let produced = run_client(
        "ck_produce.py",
        &[
            "--bootstrap",
            &b,
            "--topic",
            &topic,
            "--count",
            "20",
            "--value-size",
            "900000",
            "--value-prefix",
            "ok",
            "-X",
            "message.max.bytes=3000000",
            "-X",
            "batch.size=1000000",
        ],
    );
    assert_eq!(get_u64(&produced, "delivered"), 20, "{produced}");
    let consumed = client_consume_assign("ck_consume.py", &b, &topic, 20);
    assert_eq!(consumed.records.len(), 20);
    assert!(consumed
        .records
        .values()
        .all(|(_, v)| v.starts_with("ok-") && v.len() == 900_000));
}

/// Fetch limits smaller than one record still make progress (Kafka
/// returns the first batch whole even if it exceeds the limits).
#[test]
fn kafka_python_and_confluent_kafka_progress_with_tiny_fetch_limits() {
    let strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let topic = unique("tiny-fetch");
    ck_create(&b, &topic, 2);
    let produced = run_client(
        "ck_produce.py",
        &[
            "--bootstrap",
            &b,
            "--topic",
            &topic,
            "--count",
            "60",
            "--keyed",
            "--value-size",
            "5000",
            "--linger-ms",
            "20",
        ],
    );
    assert_eq!(get_u64(&produced, "delivered"), 60, "{produced}");
    let expected: BTreeSet<String> = values("none", 0, 60)
        .into_iter()
        .map(|v| format!("{v:.<5000}"))
        .collect();

    let run = try_client(
        "kp_consume.py",
        &[
            "--bootstrap",
            &b,
            "--topic",
            &topic,
            "--assign",
            "--expect",
            "60",
            "--linger",
            "1",
            "--records",
            "--timeout",
            "30",
            "-X",
            "max_partition_fetch_bytes=1024",
            "-X",
            "fetch_max_bytes=1024",
        ],
    );
    let json = run.json.clone().unwrap_or_else(|| panic!("{}", run.describe()));
    assert!(
        run.status.success(),
        "kafka-python with 1 KiB fetch limits: {}",
        run.describe()
    );
    check_exactly_once(
        "kafka-python, 1 KiB fetches",
        &Consumed::from_json(&json),
        &expected,
        &BTreeMap::new(),
    );

    let run = try_client(
        "ck_consume.py",
        &[
            "--bootstrap",
            &b,
            "--topic",
            &topic,
            "--assign",
            "--expect",
            "60",
            "--linger",
            "1",
            "--records",
            "--timeout",
            "30",
            "-X",
            "max.partition.fetch.bytes=1024",
            "-X",
            "fetch.max.bytes=1024",
            "-X",
            "message.max.bytes=1000",
        ],
    );
    let json = run.json.clone().unwrap_or_else(|| panic!("{}", run.describe()));
    assert!(
        run.status.success(),
        "confluent-kafka with 1 KiB fetch limits: {}",
        run.describe()
    );
    check_exactly_once(
        "confluent-kafka, 1 KiB fetches",
        &Consumed::from_json(&json),
        &expected,
        &BTreeMap::new(),
    );
}

/// Producing to a topic that does not exist creates it with the default
/// partition count (1), as `auto.create.topics.enable` does.
#[test]
fn kcat_produce_auto_creates_a_topic() {
    let strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let topic = unique("kcat-auto");
    kcat_produce(&b, &topic, "lz4", 0, 30);
    let d = run_client("ck_admin.py", &["--bootstrap", &b, "describe", "--topic", &topic]);
    assert_eq!(d["topics"][&topic]["partitions"], 1, "{d}");
    let (out, _) = kcat_timeout(
        &[
            "-b",
            &b,
            "-C",
            "-t",
            &topic,
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            KCAT_FORMAT,
        ],
        None,
        Duration::from_secs(30),
    );
    let consumed = Consumed::from_arrivals(&[kcat_lines(&out.stdout)]);
    check_exactly_once(
        "kcat auto-created topic",
        &consumed,
        &values("lz4", 0, 30),
        &BTreeMap::new(),
    );
}

/// A consumer starting at an offset inside a stored batch gets exactly the
/// records from that offset on (the broker returns the whole batch; the
/// client skips the earlier records).
#[test]
fn rdkafka_crate_consumer_starts_inside_a_batch() {
    let strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let topic = unique("rd-mid-batch");
    rd_create_topic(&b, &topic, 1).expect("create");
    rd_produce_at(&b, &topic, 0, "none", "m", 20, |_| 1_700_000_000_000);
    let c: BaseConsumer = rd_config(&b)
        .set("group.id", "rd-mid")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, Offset::Offset(7)).unwrap();
    c.assign(&tpl).expect("assign");
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < 13 && Instant::now() < deadline {
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            let r = rd_record(&m.expect("message"));
            got.push((r.1, r.3));
        }
    }
    let want: Vec<(i64, String)> = (7..20).map(|i| (i, format!("m-{i}"))).collect();
    assert_eq!(got, want);
}

/// kafka-python pinned to old broker versions speaks old Produce, Fetch,
/// Metadata and ListOffsets versions (Produce v3-v5, Fetch v4-v6): every
/// record still goes through, in every codec those versions allow.
#[test]
fn kafka_python_with_old_protocol_versions() {
    let strait = Strait::start(&[]);
    let b = strait.bootstrap();
    for (version, codecs) in [
        ("0.11.0", &["gzip", "snappy", "lz4"][..]),
        ("1.1.0", &["none", "lz4"][..]),
    ] {
        let topic = unique("kp-old");
        ck_create(&b, &topic, 4);
        let api = format!("api_version={version}");
        let mut expected = BTreeSet::new();
        for (n, codec) in codecs.iter().enumerate() {
            let start = n as u64 * 50;
            client_produce("kp_produce.py", &b, &topic, codec, start, 50, &["-X", &api]);
            expected.extend(values(codec, start, 50));
        }
        let e = expected.len().to_string();
        let run = try_client(
            "kp_consume.py",
            &[
                "--bootstrap",
                &b,
                "--topic",
                &topic,
                "--assign",
                "--expect",
                &e,
                "--linger",
                "1",
                "--records",
                "--timeout",
                "30",
                "-X",
                &api,
            ],
        );
        let json = run.json.clone().unwrap_or_else(|| panic!("{}", run.describe()));
        assert!(
            run.status.success(),
            "kafka-python api_version {version}: {}",
            run.describe()
        );
        check_exactly_once(
            &format!("kafka-python api_version {version}"),
            &Consumed::from_json(&json),
            &expected,
            &BTreeMap::new(),
        );
    }
}

/// CreateTopics details: topic configs are applied, reported by
/// DescribeConfigs and kept across a restart; bad configs, names and
/// partition counts get INVALID_CONFIG / INVALID_TOPIC_EXCEPTION /
/// INVALID_PARTITIONS; validate_only creates nothing; a deleted topic
/// recreated under its name starts empty (old records and group commits
/// gone).
#[test]
fn rdkafka_crate_admin_configs_validation_and_recreate() {
    let mut strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let admin = rd_admin(&b);
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
    let topic = unique("rd-cfg");
    let new = NewTopic::new(&topic, 3, TopicReplication::Fixed(1))
        .set("retention.ms", "3600000")
        .set("max.message.bytes", "500000");
    assert_eq!(
        block_on(admin.create_topics([&new], &opts)).expect("CreateTopics"),
        vec![Ok(topic.clone())]
    );

    let describe = |admin: &AdminClient<DefaultClientContext>| -> BTreeMap<String, (Option<String>, String)> {
        let ropts = AdminOptions::new().request_timeout(Some(Duration::from_secs(20)));
        let r = block_on(admin.describe_configs([&ResourceSpecifier::Topic(&topic)], &ropts))
            .expect("DescribeConfigs");
        r[0].as_ref()
            .expect("configs")
            .entries
            .iter()
            .map(|e| (e.name.clone(), (e.value.clone(), format!("{:?}", e.source))))
            .collect()
    };
    let check = |cfg: &BTreeMap<String, (Option<String>, String)>, when: &str| {
        assert_eq!(
            cfg["retention.ms"],
            (Some("3600000".to_string()), "DynamicTopic".to_string()),
            "{when}: {cfg:?}"
        );
        assert_eq!(
            cfg["max.message.bytes"].0.as_deref(),
            Some("500000"),
            "{when}: {cfg:?}"
        );
        assert_eq!(
            cfg["cleanup.policy"].0.as_deref(),
            Some("delete"),
            "{when}: {cfg:?}"
        );
    };
    check(&describe(&admin), "after create");

    for (name, key, value, code) in [
        (
            unique("rd-bad"),
            "retention.ms",
            "banana",
            RDKafkaErrorCode::InvalidConfig,
        ),
        (
            unique("rd-bad"),
            "no.such.config",
            "1",
            RDKafkaErrorCode::InvalidConfig,
        ),
        (
            unique("rd-bad"),
            "cleanup.policy",
            "compact",
            RDKafkaErrorCode::InvalidConfig,
        ),
        (
            "bad/name".to_string(),
            "retention.ms",
            "1000",
            RDKafkaErrorCode::InvalidTopic,
        ),
    ] {
        let t = NewTopic::new(&name, 1, TopicReplication::Fixed(1)).set(key, value);
        let r = block_on(admin.create_topics([&t], &opts)).expect("CreateTopics");
        assert_eq!(r, vec![Err((name.clone(), code))], "{name} {key}={value}");
    }
    let zero = unique("rd-zero");
    assert_eq!(
        rd_create(&admin, &zero, 0, 1),
        Err(RDKafkaErrorCode::InvalidPartitions)
    );
    let dry = unique("rd-dry");
    let vopts = AdminOptions::new()
        .operation_timeout(Some(Duration::from_secs(20)))
        .validate_only(true);
    let r = block_on(admin.create_topics([&NewTopic::new(&dry, 4, TopicReplication::Fixed(1))], &vopts))
        .expect("CreateTopics");
    assert_eq!(r, vec![Ok(dry.clone())]);
    let md = admin
        .inner()
        .fetch_metadata(None, Duration::from_secs(10))
        .expect("metadata");
    let names: Vec<&str> = md.topics().iter().map(|t| t.name()).collect();
    assert_eq!(
        names,
        vec![topic.as_str()],
        "only the real topic exists (no refused, zero or validate_only topic)"
    );

    // Configs survive a restart.
    let status = strait.stop();
    assert!(status.success(), "{status}\n{}", log_tail(&strait));
    strait.restart();
    let admin = rd_admin(&b);
    check(&describe(&admin), "after a restart");

    // Records and a group commit, then delete and recreate the topic.
    rd_produce_at(&b, &topic, 0, "none", "old", 5, |_| 1_700_000_000_000);
    let group = unique("rd-recreate");
    let c: BaseConsumer = rd_config(&b).set("group.id", &group).create().expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, Offset::Offset(5)).unwrap();
    c.commit(&tpl, CommitMode::Sync).expect("commit");
    assert_eq!(
        block_on(admin.delete_topics(&[&topic], &opts)).expect("DeleteTopics"),
        vec![Ok(topic.clone())]
    );
    rd_create(&admin, &topic, 2, 1).expect("recreate");
    assert_eq!(
        c.fetch_watermarks(&topic, 0, Duration::from_secs(10))
            .expect("watermarks"),
        (0, 0)
    );
    let md = admin
        .inner()
        .fetch_metadata(Some(&topic), Duration::from_secs(10))
        .expect("metadata");
    assert_eq!(md.topics()[0].partitions().len(), 2);
    let mut q = TopicPartitionList::new();
    q.add_partition(&topic, 0);
    let committed = c
        .committed_offsets(q, Duration::from_secs(10))
        .expect("OffsetFetch");
    assert_eq!(
        committed.elements()[0].offset(),
        Offset::Invalid,
        "a group commit of the deleted topic survived into the new one"
    );
    let cfg = describe(&admin);
    assert_eq!(
        cfg["retention.ms"].1, "Default",
        "the recreated topic kept the old one's configs: {cfg:?}"
    );
    assert_eq!(
        rd_produce_at(&b, &topic, 0, "none", "new", 3, |_| 1_700_000_000_000),
        vec![0, 1, 2]
    );
    let consumed = rd_consume_assign(&b, &topic, 3);
    let vals: Vec<&str> = consumed.records.values().map(|(_, v)| v.as_str()).collect();
    assert_eq!(vals, vec!["new-0", "new-1", "new-2"]);
}

/// librdkafka lets `receive.message.max.bytes` be as small as
/// `fetch.max.bytes` + 512; against Kafka such a consumer works, since a
/// Fetch answer stays within fetch.max.bytes (but for one first batch
/// larger than it). Batches of ~8 KB on 3 partitions, fetch.max.bytes
/// 20000: every record must arrive.
#[test]
fn confluent_kafka_consumer_with_tight_fetch_and_receive_limits_reads_everything() {
    let strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let topic = unique("ck-tight");
    ck_create(&b, &topic, 3);
    let mut expected = BTreeSet::new();
    for p in 0..3u64 {
        let (ps, start) = (p.to_string(), (p * 80).to_string());
        let produced = run_client(
            "ck_produce.py",
            &[
                "--bootstrap",
                &b,
                "--topic",
                &topic,
                "--count",
                "80",
                "--start",
                &start,
                "--partition",
                &ps,
                "--value-size",
                "1000",
                "--linger-ms",
                "50",
                "-X",
                "batch.num.messages=8",
            ],
        );
        assert_eq!(get_u64(&produced, "delivered"), 80, "{produced}");
        expected.extend(
            values("none", p * 80, 80)
                .into_iter()
                .map(|v| format!("{v:.<1000}")),
        );
    }
    let run = try_client(
        "ck_consume.py",
        &[
            "--bootstrap",
            &b,
            "--topic",
            &topic,
            "--assign",
            "--expect",
            "240",
            "--linger",
            "1",
            "--records",
            "--timeout",
            "12",
            "-X",
            "fetch.max.bytes=20000",
            "-X",
            "receive.message.max.bytes=20512",
            "-X",
            "max.partition.fetch.bytes=20000",
            "-X",
            "message.max.bytes=1000",
        ],
    );
    let json = run.json.clone().unwrap_or_else(|| panic!("{}", run.describe()));
    assert!(
        run.status.success(),
        "a consumer with fetch.max.bytes=20000, receive.message.max.bytes=20512 read {} of 240 records \
         (Strait's Fetch answers exceed fetch.max.bytes): {}",
        json["records"],
        run.describe()
    );
    // The records were produced to explicit partitions, unkeyed: check
    // exactly-once and order directly rather than key placement.
    let consumed = Consumed::from_json(&json);
    assert_eq!(consumed.duplicates, 0, "tight fetch limits: duplicates");
    assert!(
        consumed.in_order,
        "tight fetch limits: {}",
        consumed.order_violations
    );
    let values: BTreeSet<String> = consumed.records.values().map(|(_, v)| v.clone()).collect();
    assert_eq!(
        values.len(),
        consumed.records.len(),
        "a value is stored at two offsets"
    );
    assert_eq!(
        &values, &expected,
        "tight fetch limits: the records read are not the records produced"
    );
}
