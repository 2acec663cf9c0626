//! End-to-end tests of `strait serve` as a Kafka broker for local spool
//! topics with the rdkafka crate (librdkafka 2.12, built without zstd by
//! default): every codec read back exactly once at the offsets acknowledged,
//! an idempotent producer, topic administration, a group of two that
//! commits and resumes after a restart (with ListGroups, DescribeGroups and
//! DeleteGroups), and retention at the configured check interval.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminOptions, ResourceSpecifier};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::BaseProducer;
use rdkafka::{Offset, TopicPartitionList};
use support::local::{
    block_on, check_both_members, check_exactly_once, check_idempotent_batches, group_strait, log_tail,
    rd_admin, rd_codecs, rd_config, rd_consume_assign, rd_create, rd_create_topic, rd_produce, rd_producer,
    rd_record, values, Arrival, Consumed, Deliveries, PARTITIONS, PER_CODEC,
};
use support::{unique, Strait};

#[test]
fn rdkafka_crate_produces_each_codec_and_reads_everything_back() {
    let strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let topic = unique("rd-codecs");
    rd_create_topic(&b, &topic, 8).expect("rdkafka create");
    let mut acked = Vec::new();
    let mut expected = BTreeSet::new();
    for (n, codec) in rd_codecs(&b).into_iter().enumerate() {
        let producer = rd_producer(&b, codec, false).expect("rdkafka producer");
        let start = n as u64 * PER_CODEC;
        acked.extend(rd_produce(&producer, &topic, codec, start, PER_CODEC));
        expected.extend(values(codec, start, PER_CODEC));
    }
    let consumed = rd_consume_assign(&b, &topic, expected.len());
    check_exactly_once(
        "rdkafka crate, every codec",
        &consumed,
        &expected,
        &BTreeMap::new(),
    );
    // Each record sits exactly at the offset its acknowledgement named.
    for (p, o, v) in &acked {
        assert_eq!(
            consumed.records.get(&(*p, *o)).map(|r| &r.1),
            Some(v),
            "acknowledged p{p}@{o}"
        );
    }
}

#[test]
fn rdkafka_crate_idempotent_producer_writes_each_record_once() {
    let strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let topic = unique("rd-idem");
    rd_create_topic(&b, &topic, 8).expect("rdkafka create");
    let producer = rd_producer(&b, "lz4", true).expect("rdkafka producer");
    let mut acked = rd_produce(&producer, &topic, "lz4", 0, 250);
    acked.extend(rd_produce(&producer, &topic, "lz4", 250, 250));
    drop(producer);
    let consumed = rd_consume_assign(&b, &topic, 500);
    check_exactly_once(
        "rdkafka idempotent",
        &consumed,
        &values("lz4", 0, 500),
        &BTreeMap::new(),
    );
    for (p, o, v) in &acked {
        assert_eq!(
            consumed.records.get(&(*p, *o)).map(|r| &r.1),
            Some(v),
            "acknowledged p{p}@{o}"
        );
    }
    check_idempotent_batches(&strait, &topic, 1);
}

/// `spool.retention_check_interval` reaches the spool: at 200ms, a topic
/// held to 64KiB by `retention_bytes` loses its oldest segments within
/// seconds of being filled (the default interval would wait a minute after
/// start), and the log start offset clients see moves with them.
#[test]
fn retention_runs_at_the_configured_check_interval() {
    let config_dir = tempfile::tempdir().unwrap();
    let config = config_dir.path().join("strait.yaml");
    std::fs::write(
        &config,
        "spool:\n  segment_bytes: 64KiB\n  max_batch_bytes: 64KiB\n  retention_bytes: 64KiB\n  \
         retention_check_interval: 200ms\n",
    )
    .unwrap();
    let strait = Strait::start(&["--config", config.to_str().unwrap()]);
    let b = strait.bootstrap();
    let topic = unique("retention-check");
    rd_create_topic(&b, &topic, 1).expect("rdkafka create");
    let producer: BaseProducer<Deliveries> = rd_config(&b)
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("batch.size", "16384")
        .create_with_context(Deliveries::default())
        .expect("rdkafka producer");
    // About 450KB: seven segments of 64KiB.
    rd_produce(&producer, &topic, &"r".repeat(200), 0, 2000);

    let c: BaseConsumer = rd_config(&b)
        .set("group.id", unique("retention-check"))
        .create()
        .expect("consumer");
    // The segments below the log start go from disk; about 64KiB stays.
    // Retention passes run while the last batches arrive, so wait for both.
    let dir = strait.data_dir().join("topics").join(format!("{topic}-0"));
    let logs = || {
        let mut logs: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".log"))
            .collect();
        logs.sort();
        logs
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    let (low, high, logs) = loop {
        let (low, high) = c
            .fetch_watermarks(&topic, 0, Duration::from_secs(10))
            .expect("watermarks");
        let logs = logs();
        if low > 0 && logs.len() <= 3 {
            break (low, high, logs);
        }
        assert!(
            Instant::now() < deadline,
            "within 15 s, the log start offset is {low} and the segments are {logs:?}\n{}",
            strait.log()
        );
        thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(high, 2000);
    assert_eq!(logs[0], format!("{low:020}.log"), "{logs:?}");
    let line = strait
        .log_line(&["retention deleted segments", &format!("{topic}-0")])
        .unwrap_or_else(|| panic!("no retention log line\n{}", strait.log()));
    assert!(line.contains("INFO"), "{line}");
}

#[test]
fn rdkafka_crate_admin_creates_describes_and_deletes() {
    let strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let admin = rd_admin(&b);
    let topic = unique("rd-admin");
    rd_create(&admin, &topic, 8, 1).expect("create");

    let md = admin
        .inner()
        .fetch_metadata(Some(&topic), Duration::from_secs(10))
        .expect("metadata");
    assert_eq!(md.orig_broker_id(), 0);
    assert_eq!(md.brokers().len(), 1);
    assert_eq!(md.brokers()[0].id(), 0);
    assert_eq!(md.brokers()[0].port(), strait.port() as i32);
    let t = &md.topics()[0];
    assert_eq!(t.name(), topic);
    assert!(t.error().is_none(), "{:?}", t.error());
    assert_eq!(t.partitions().len(), 8);
    for (i, p) in t.partitions().iter().enumerate() {
        assert_eq!(p.id(), i as i32);
        assert_eq!(p.leader(), 0);
        assert_eq!(p.replicas(), &[0]);
        assert_eq!(p.isr(), &[0]);
        assert!(p.error().is_none());
    }

    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(20)));
    let configs = block_on(admin.describe_configs([&ResourceSpecifier::Topic(&topic)], &opts))
        .expect("DescribeConfigs");
    let resource = configs[0].as_ref().expect("topic configs");
    assert_eq!(
        resource.get("cleanup.policy").and_then(|e| e.value.as_deref()),
        Some("delete")
    );
    for key in [
        "retention.ms",
        "retention.bytes",
        "segment.bytes",
        "max.message.bytes",
    ] {
        let v = resource.get(key).and_then(|e| e.value.clone());
        assert!(
            v.as_deref().is_some_and(|v| v.parse::<i64>().is_ok()),
            "{key} = {v:?}"
        );
    }

    assert_eq!(
        rd_create(&admin, &topic, 8, 1),
        Err(RDKafkaErrorCode::TopicAlreadyExists)
    );
    let other = unique("rd-admin-rf3");
    assert_eq!(
        rd_create(&admin, &other, 8, 3),
        Err(RDKafkaErrorCode::InvalidReplicationFactor)
    );

    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
    let deleted = block_on(admin.delete_topics(&[&topic], &opts)).expect("DeleteTopics");
    assert_eq!(deleted, vec![Ok(topic.clone())]);
    let all = admin
        .inner()
        .fetch_metadata(None, Duration::from_secs(10))
        .expect("metadata");
    let names: Vec<&str> = all.topics().iter().map(|t| t.name()).collect();
    assert!(
        !names.contains(&topic.as_str()),
        "deleted topic listed: {names:?}"
    );
    assert!(
        !names.contains(&other.as_str()),
        "refused topic listed: {names:?}"
    );
    let again = block_on(admin.delete_topics(&[&topic], &opts)).expect("DeleteTopics");
    assert_eq!(
        again,
        vec![Err((topic.clone(), RDKafkaErrorCode::UnknownTopicOrPartition))]
    );
}

#[test]
fn rdkafka_crate_group_of_two_commits_and_resumes_after_restart() {
    let (mut strait, _config) = group_strait();
    let b = strait.bootstrap();
    let topic = unique("rd-group");
    let group = unique("rd-group");
    rd_create_topic(&b, &topic, 8).expect("create");
    let producer = rd_producer(&b, "snappy", false).expect("producer");
    rd_produce(&producer, &topic, "snappy", 0, 300);
    drop(producer);

    let (outs, committed) = rd_group_round(&strait, &topic, &group, 300);
    let first = Consumed::from_arrivals(&outs);
    check_exactly_once(
        "rdkafka group, first run",
        &first,
        &values("snappy", 0, 300),
        &BTreeMap::new(),
    );
    check_both_members(
        "rdkafka group",
        &outs.iter().map(|o| o.len() as u64).collect::<Vec<_>>(),
    );
    let counts = first.per_partition();
    for p in 0..PARTITIONS {
        assert_eq!(
            committed.get(&p).copied().unwrap_or(0),
            counts.get(&p).copied().unwrap_or(0) as i64,
            "committed offsets {committed:?}"
        );
    }

    let status = strait.stop();
    assert!(
        status.success(),
        "strait exited {status} after SIGTERM\n{}",
        log_tail(&strait)
    );
    strait.restart();

    let producer = rd_producer(&b, "gzip", false).expect("producer");
    let acked = rd_produce(&producer, &topic, "gzip", 300, 100);
    drop(producer);
    let (outs, committed) = rd_group_round(&strait, &topic, &group, 100);
    let resumed = Consumed::from_arrivals(&outs);
    let starts: BTreeMap<i32, i64> = (0..PARTITIONS)
        .map(|p| (p, counts.get(&p).copied().unwrap_or(0) as i64))
        .collect();
    check_exactly_once(
        "rdkafka group, resumed",
        &resumed,
        &values("gzip", 300, 100),
        &starts,
    );
    let mut ends = counts.clone();
    for (p, _, _) in &acked {
        *ends.entry(*p).or_insert(0) += 1;
    }
    for p in 0..PARTITIONS {
        assert_eq!(
            committed.get(&p).copied().unwrap_or(0),
            ends.get(&p).copied().unwrap_or(0) as i64,
            "committed offsets after the resumed run {committed:?}"
        );
    }

    // ListGroups + DescribeGroups: the group is there, empty now.
    let probe: BaseConsumer = rd_config(&b)
        .set("group.id", "rd-probe")
        .create()
        .expect("consumer");
    let list = probe
        .fetch_group_list(None, Duration::from_secs(10))
        .expect("ListGroups");
    let ours: Vec<(String, String, usize)> = list
        .groups()
        .iter()
        .filter(|g| g.name() == group)
        .map(|g| {
            (
                g.state().to_string(),
                g.protocol_type().to_string(),
                g.members().len(),
            )
        })
        .collect();
    assert_eq!(
        ours,
        vec![("Empty".to_string(), "consumer".to_string(), 0)],
        "ListGroups"
    );

    // DeleteGroups drops the group and its commits.
    let admin = rd_admin(&b);
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
    let deleted = block_on(admin.delete_groups(&[&group], &opts)).expect("DeleteGroups");
    assert_eq!(deleted, vec![Ok(group.clone())]);
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition(&topic, p);
    }
    let fresh: BaseConsumer = rd_config(&b).set("group.id", &group).create().expect("consumer");
    let after = fresh
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("OffsetFetch");
    assert!(
        after.elements().iter().all(|e| e.offset() == Offset::Invalid),
        "commits survived DeleteGroups: {after:?}"
    );
    let list = probe
        .fetch_group_list(None, Duration::from_secs(10))
        .expect("ListGroups");
    assert!(
        list.groups().iter().all(|g| g.name() != group),
        "deleted group still listed"
    );
}

/// Two rdkafka consumers in `group` (threads) subscribed to `topic` until
/// `expect` distinct records arrived between them (then 2 s more for
/// extras); each commits synchronously at the end. Returns each member's
/// deliveries and the group's committed offsets.
fn rd_group_round(
    strait: &Strait,
    topic: &str,
    group: &str,
    expect: usize,
) -> (Vec<Vec<Arrival>>, BTreeMap<i32, i64>) {
    let b = strait.bootstrap();
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let reached = Arc::new(Mutex::new(None::<Instant>));
    let errors = Arc::new(Mutex::new(Vec::new()));
    let deadline = Instant::now() + Duration::from_secs(40);
    let members: Vec<_> = (0..2)
        .map(|i| {
            let (b, topic, group) = (b.clone(), topic.to_string(), group.to_string());
            let (seen, reached, errors) = (Arc::clone(&seen), Arc::clone(&reached), Arc::clone(&errors));
            thread::spawn(move || {
                let consumer: BaseConsumer = rd_config(&b)
                    .set("group.id", &group)
                    .set("client.id", format!("rd-member-{i}"))
                    .set("auto.offset.reset", "earliest")
                    .set("enable.auto.commit", "true")
                    .set("auto.commit.interval.ms", "200")
                    .set("session.timeout.ms", "10000")
                    .set("heartbeat.interval.ms", "1000")
                    .create()
                    .expect("rdkafka consumer");
                consumer.subscribe(&[&topic]).expect("subscribe");
                let mut arrivals = Vec::new();
                let mut described = None;
                loop {
                    if i == 0 && described.is_none() && reached.lock().unwrap().is_some() {
                        // DescribeGroups while both members are in.
                        described = Some(
                            consumer
                                .fetch_group_list(Some(&group), Duration::from_secs(5))
                                .map(|list| {
                                    list.groups()
                                        .iter()
                                        .map(|g| {
                                            let mut ids: Vec<String> = g
                                                .members()
                                                .iter()
                                                .map(|m| m.client_id().to_string())
                                                .collect();
                                            ids.sort();
                                            format!(
                                                "{} state={} type={} protocol={} members={ids:?}",
                                                g.name(),
                                                g.state(),
                                                g.protocol_type(),
                                                g.protocol()
                                            )
                                        })
                                        .collect::<Vec<_>>()
                                })
                                .map_err(|e| e.to_string()),
                        );
                    }
                    let done = match *reached.lock().unwrap() {
                        Some(t) => t.elapsed() > Duration::from_millis(1500),
                        None => Instant::now() > deadline,
                    };
                    if done {
                        break;
                    }
                    match consumer.poll(Duration::from_millis(100)) {
                        Some(Ok(m)) => {
                            let r = rd_record(&m);
                            let mut s = seen.lock().unwrap();
                            s.insert((r.0, r.1));
                            if s.len() >= expect {
                                reached.lock().unwrap().get_or_insert_with(Instant::now);
                            }
                            arrivals.push(r);
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
                (arrivals, described)
            })
        })
        .collect();
    let mut described = None;
    let outs: Vec<_> = members
        .into_iter()
        .map(|m| {
            let (arrivals, d) = m.join().expect("member thread");
            described = described.take().or(d);
            arrivals
        })
        .collect();
    let errors = errors.lock().unwrap().clone();
    let total: usize = seen.lock().unwrap().len();
    assert!(
        total >= expect,
        "rdkafka group of two saw {total} of {expect} records (JoinGroup answered \
         COORDINATOR_NOT_AVAILABLE until the coordinator lands?); errors: {errors:?}\n{}",
        log_tail(strait)
    );
    assert!(errors.is_empty(), "rdkafka group errors: {errors:?}");
    let described = described.expect("member 0 described the group");
    assert_eq!(
        described,
        Ok(vec![format!(
            "{group} state=Stable type=consumer protocol=range members=[\"rd-member-0\", \"rd-member-1\"]"
        )]),
        "DescribeGroups while both members consume"
    );

    // What the group committed, asked by a consumer that does not join.
    let probe: BaseConsumer = rd_config(&b)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("rdkafka consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition(topic, p);
    }
    let committed = probe
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("OffsetFetch");
    let committed = committed
        .elements()
        .iter()
        .map(|e| {
            (
                e.partition(),
                match e.offset() {
                    Offset::Offset(o) => o,
                    _ => 0,
                },
            )
        })
        .collect();
    (outs, committed)
}
