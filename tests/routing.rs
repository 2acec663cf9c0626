//! One endpoint for many clusters: topics routed by `routes:` to upstream
//! clusters (Tansu brokers, `strait serve`, and Apache Kafka: this
//! process's shared single node) and to Strait's own spool, produced and
//! consumed through Strait with real clients, and read on the upstream
//! directly.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ConsumerGroupDescribeRequest, GroupId};
use kafka_protocol::protocol::StrBytes;
use serde_json::Value;
use strait_batch::build;
use support::relay::Relay;
use support::{committed, kcat, raw, routed_strait, run_client, Strait, Tansu};

fn produce(script: &str, bootstrap: &str, topic: &str, count: usize, extra: &[&str]) {
    let count_s = count.to_string();
    let mut args = vec![
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--count",
        &count_s,
        "--keyed",
        "--value-prefix",
        topic,
    ];
    args.extend_from_slice(extra);
    let out = run_client(script, &args);
    assert_eq!(
        out["delivered"].as_u64(),
        Some(count as u64),
        "{script} to {topic}: {out}"
    );
}

/// Every record of `topic` per partition, [offset, key, value].
fn dump(bootstrap: &str, topic: &str, expect: usize) -> BTreeMap<String, Vec<Value>> {
    support::dump(bootstrap, topic, expect, 0..3)
}

fn count(dump: &BTreeMap<String, Vec<Value>>) -> usize {
    dump.values().map(Vec::len).sum()
}

#[test]
fn topics_go_to_their_cluster_under_its_names_and_come_back_under_the_clients() {
    let tansu = Tansu::start();
    let dc2 = Tansu::start_with(&["--cluster-id", "dc2"]);
    support::create_topic("ck_admin.py", &tansu.bootstrap(), "orders", 3);
    support::create_topic("ck_admin.py", &dc2.bootstrap(), "legacy-v2", 2);
    support::create_topic("ck_admin.py", &dc2.bootstrap(), "hidden", 1);
    let (strait, _dir) = routed_strait(&tansu.bootstrap(), &dc2.bootstrap());
    let b = strait.bootstrap();

    // librdkafka and kafka-python produce through Strait to both places.
    produce("ck_produce.py", &b, "dc1.orders", 300, &["--compression", "lz4"]);
    produce("kp_produce.py", &b, "dc1.orders", 100, &["--start", "300"]);
    produce("ck_produce.py", &b, "legacy", 50, &[]);
    produce(
        "ck_produce.py",
        &b,
        "local-orders",
        120,
        &["--compression", "zstd"],
    );

    // On the upstream, under its own names, with the clients' offsets.
    let upstream = dump(&tansu.bootstrap(), "orders", 400);
    assert_eq!(count(&upstream), 400, "{upstream:?}");
    let through = dump(&b, "dc1.orders", 400);
    assert_eq!(through, upstream, "read through Strait as on the upstream");
    assert_eq!(count(&dump(&dc2.bootstrap(), "legacy-v2", 50)), 50);
    let legacy = dump(&b, "legacy", 50);
    assert_eq!(count(&legacy), 50);
    for records in legacy.values() {
        for r in records {
            assert!(r[2].as_str().unwrap().starts_with("legacy-"), "{r}");
        }
    }
    // The local topic is local: the upstream does not have it.
    let local = dump(&b, "local-orders", 120);
    assert_eq!(count(&local), 120);
    assert!(
        strait.log_line(&["created topic", "local-orders"]).is_some(),
        "local-orders was not created in the spool: {}",
        strait.log()
    );
    // Metadata names Strait alone, and the clients' names only.
    let listed = kcat(&["-L", "-b", &b, "-m", "10"], None);
    let listing = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(listed.status.success(), "{listing}");
    assert!(listing.contains(" 1 brokers:"), "{listing}");
    assert!(
        listing.contains(&format!("at 127.0.0.1:{}", strait.port())),
        "{listing}"
    );
    assert!(
        !listing.contains(&tansu.port().to_string()),
        "an upstream address leaked: {listing}"
    );
    for topic in [
        "\"dc1.orders\" with 3 partitions",
        "\"legacy\" with 2 partitions",
        "\"local-orders\"",
    ] {
        assert!(listing.contains(topic), "{topic} not in {listing}");
    }
    for hidden in ["\"orders\"", "\"legacy-v2\"", "\"hidden\""] {
        assert!(!listing.contains(hidden), "{hidden} shown: {listing}");
    }
}

/// A Strait in front of an upstream `strait serve` reached through a relay
/// (the upstream advertises the relay, so every connection to it crosses
/// the relay): `dc1.` topics live there, the rest locally.
fn behind_relay() -> (Relay, Strait, Strait, tempfile::TempDir) {
    let relay = Relay::start("127.0.0.1:9".parse().unwrap(), Duration::ZERO);
    let upstream = Strait::start(&["--advertised", &relay.addr()]);
    relay.retarget(upstream.bootstrap().parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strait.yaml");
    std::fs::write(
        &path,
        format!(
            r#"clusters:
  dc1: {{ bootstrap: ["{}"] }}
routes:
  - {{ prefix: "dc1.", to: dc1, strip_prefix: true }}
  - {{ regex: ".*", to: local }}
"#,
            relay.addr()
        ),
    )
    .unwrap();
    let gateway = Strait::start(&["--config", path.to_str().unwrap()]);
    (relay, upstream, gateway, dir)
}

#[test]
fn a_connections_requests_go_upstream_without_waiting_for_earlier_answers_and_come_back_in_order() {
    let (relay, upstream, gateway, _dir) = behind_relay();
    support::create_topic("ck_admin.py", &upstream.bootstrap(), "pipelined", 1);
    support::create_topic("ck_admin.py", &gateway.bootstrap(), "local-pipelined", 1);
    let mut conn = raw::Conn::open(gateway.port(), "pipeline-test");
    let batch = build::batch(1_000, &[&[7u8; 2_000]]);
    // Warm up: the gateway has the upstream's metadata and a connection.
    assert_eq!(conn.produce("dc1.pipelined", 0, &batch, 10_000), (0, 0));
    assert_eq!(conn.produce("local-pipelined", 0, &batch, 10_000), (0, 0));

    // The link stalls: nothing reaches the upstream, nothing comes back.
    relay.stall(true);
    let before = relay.bytes_from_clients();
    let topics = [
        "dc1.pipelined",
        "dc1.pipelined",
        "local-pipelined",
        "dc1.pipelined",
        "dc1.pipelined",
    ];
    let sent: Vec<i32> = topics
        .iter()
        .map(|topic| {
            let (id, frame) = conn.produce_frame(topic, 0, &batch, 30_000);
            conn.send_raw(&frame);
            id
        })
        .collect();
    // The second upstream produce leaves the gateway while the first is
    // still unanswered (one at a time, only the first would). More wait in
    // the gateway: the connection keeps two requests unanswered, or its
    // path's bandwidth-delay product if more (upstream/src/window.rs).
    let upstream_bytes = 2 * batch.len() as u64;
    let deadline = Instant::now() + Duration::from_secs(20);
    while relay.bytes_from_clients() - before < upstream_bytes {
        assert!(
            Instant::now() < deadline,
            "only {} of at least {upstream_bytes} request bytes reached the link: the gateway waits \
             for each answer before forwarding the next request",
            relay.bytes_from_clients() - before
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    relay.stall(false);
    // Answers in request order (each read checks its correlation id), the
    // upstream's offsets in the order sent.
    let answers: Vec<(i16, i64)> = sent.iter().map(|id| conn.produce_answer(*id)).collect();
    assert_eq!(answers, vec![(0, 1), (0, 2), (0, 1), (0, 3), (0, 4)]);
    let records = support::dump(&upstream.bootstrap(), "pipelined", 5, 0..1);
    assert_eq!(count(&records), 5, "{records:?}");
}

/// A Strait whose `dc1.` topics live on `upstream` (without the prefix),
/// the rest locally.
fn in_front_of(upstream: &str) -> (Strait, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strait.yaml");
    std::fs::write(
        &path,
        format!(
            r#"clusters:
  dc1: {{ bootstrap: ["{upstream}"] }}
routes:
  - {{ prefix: "dc1.", to: dc1, strip_prefix: true }}
  - {{ regex: ".*", to: local }}
"#
        ),
    )
    .unwrap();
    (Strait::start(&["--config", path.to_str().unwrap()]), dir)
}

/// A `strait serve` as cluster dc1 holding `topic` (of `partitions`),
/// behind a Strait from [`in_front_of`].
fn over_strait_upstream(topic: &str, partitions: i32) -> (Strait, Strait, tempfile::TempDir) {
    let upstream = Strait::start(&[]);
    support::create_topic("ck_admin.py", &upstream.bootstrap(), topic, partitions);
    let (gateway, dir) = in_front_of(&upstream.bootstrap());
    (upstream, gateway, dir)
}

#[test]
fn an_idempotent_producer_keeps_its_checks_upstream_under_the_clusters_own_producer_id() {
    // The upstream is a `strait serve`: Tansu does not check sequences.
    let upstream = Strait::start(&[]);
    support::create_topic("ck_admin.py", &upstream.bootstrap(), "idem", 1);
    let mut direct = raw::Conn::open(upstream.port(), "direct");
    // The upstream hands out a few ids first, so that its ids and the
    // gateway's differ.
    for _ in 0..3 {
        assert_eq!(raw::init_producer_id(&mut direct, None).error_code, 0);
    }
    let (gateway, _dir) = in_front_of(&upstream.bootstrap());
    support::create_topic("ck_admin.py", &gateway.bootstrap(), "local-idem", 1);
    let mut c = raw::Conn::open(gateway.port(), "idempotent");
    let init = raw::init_producer_id(&mut c, None);
    assert_eq!(init.error_code, 0);
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);

    let first = raw::idempotent_batch(pid, epoch, 0, &["a", "b"]);
    assert_eq!(c.produce("dc1.idem", 0, &first, 10_000), (0, 0));
    // A retry is acknowledged with its offset and not written twice.
    assert_eq!(c.produce("dc1.idem", 0, &first, 10_000), (0, 0));
    let next = raw::idempotent_batch(pid, epoch, 2, &["c"]);
    assert_eq!(c.produce("dc1.idem", 0, &next, 10_000), (0, 2));
    // A gap in the sequence.
    let gap = raw::idempotent_batch(pid, epoch, 9, &["x"]);
    assert_eq!(
        c.produce("dc1.idem", 0, &gap, 10_000).0,
        45,
        "OUT_OF_ORDER_SEQUENCE_NUMBER"
    );
    // The same producer on a local topic: its own id, sequences from 0.
    assert_eq!(c.produce("local-idem", 0, &first, 10_000), (0, 0));

    let upstream_batches = raw::batch_headers(&mut direct, "idem");
    assert_eq!(
        upstream_batches.iter().map(|h| h.record_count).sum::<i32>(),
        3,
        "{upstream_batches:?}"
    );
    let upstream_ids: BTreeSet<(i64, i16)> = upstream_batches
        .iter()
        .map(|h| (h.producer_id, h.producer_epoch))
        .collect();
    assert_eq!(upstream_ids.len(), 1, "{upstream_batches:?}");
    let (upstream_pid, _) = *upstream_ids.first().unwrap();
    assert!(
        upstream_pid >= 0 && upstream_pid != pid,
        "{upstream_pid} vs {pid}"
    );
    assert_eq!(
        upstream_batches
            .iter()
            .map(|h| h.base_sequence)
            .collect::<Vec<_>>(),
        vec![0, 2]
    );
    let local = raw::batch_headers(&mut c, "local-idem");
    assert_eq!(local.len(), 1);
    assert_eq!((local[0].producer_id, local[0].base_sequence), (pid, 0));
}

#[test]
fn a_truncated_idempotent_batch_is_refused_as_kafka_refuses_it_and_its_producer_goes_on() {
    let kafka = support::kafka::Kafka::shared();
    let topic = support::unique("truncated");
    kafka.create_topic(&topic, 1, &[]);
    let (gateway, _dir) = in_front_of(&kafka.bootstrap());
    let mut c = raw::Conn::open(gateway.port(), "truncating");
    let init = raw::init_producer_id(&mut c, None);
    assert_eq!(init.error_code, 0);
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
    let client_topic = format!("dc1.{topic}");
    let first = raw::idempotent_batch(pid, epoch, 0, &["a", "b"]);
    // Kafka 4.1 answers INVALID_RECORD to a batch cut short (not the
    // retriable CORRUPT_MESSAGE: the client would send it again and
    // again); so does the router, before its producer is mapped or
    // anything is sent.
    let mut direct = raw::Conn::open(kafka.port(), "direct");
    let own = raw::init_producer_id(&mut direct, None);
    let own = raw::idempotent_batch(own.producer_id.0, own.producer_epoch, 0, &["a", "b"]);
    for cut in [1, 20, first.len() - 61] {
        let (code, _) = direct.produce(&topic, 0, &own[..own.len() - cut], 10_000);
        assert_eq!(code, 87, "Kafka: INVALID_RECORD for {cut} bytes short");
        let (code, _) = c.produce(&client_topic, 0, &first[..first.len() - cut], 10_000);
        assert_eq!(code, 87, "Strait: INVALID_RECORD for {cut} bytes short");
    }
    // The whole batch is the producer's first, at sequence 0.
    assert_eq!(c.produce(&client_topic, 0, &first, 10_000), (0, 0));
    let next = raw::idempotent_batch(pid, epoch, 2, &["c"]);
    assert_eq!(c.produce(&client_topic, 0, &next, 10_000), (0, 2));
    let batches = raw::batch_headers(&mut direct, &topic);
    assert_eq!(
        batches
            .iter()
            .map(|h| (h.base_sequence, h.record_count))
            .collect::<Vec<_>>(),
        vec![(0, 2), (2, 1)],
        "{batches:?}"
    );
}

#[test]
fn a_java_producer_writes_to_two_clusters_and_a_local_topic_under_one_producer_id() {
    let dc1 = Tansu::start();
    let dc2 = Tansu::start_with(&["--cluster-id", "dc2"]);
    support::create_topic("ck_admin.py", &dc1.bootstrap(), "orders", 2);
    support::create_topic("ck_admin.py", &dc2.bootstrap(), "legacy-v2", 2);
    let (strait, _dir) = routed_strait(&dc1.bootstrap(), &dc2.bootstrap());
    let b = strait.bootstrap();
    support::create_topic("ck_admin.py", &b, "local-java", 2);
    // Java's producer is idempotent by default at acks=all.
    let out = run_client(
        "java:produce",
        &[
            "--bootstrap",
            &b,
            "--topic",
            "dc1.orders,legacy,local-java",
            "--count",
            "600",
            "--keyed",
            "--value-prefix",
            "java",
        ],
    );
    assert_eq!(out["delivered"].as_u64(), Some(600), "{out}");
    for topic in ["dc1.orders", "legacy", "local-java"] {
        assert_eq!(out["topics"][topic].as_u64(), Some(200), "{out}");
    }
    // Every record once, where its route says, read on each cluster.
    assert_eq!(count(&dump(&dc1.bootstrap(), "orders", 200)), 200);
    assert_eq!(count(&dump(&dc2.bootstrap(), "legacy-v2", 200)), 200);
    assert_eq!(count(&dump(&b, "local-java", 200)), 200);
    // Each cluster's batches carry one producer id of that cluster's.
    for (cluster, port, topic) in [("dc1", dc1.port(), "orders"), ("dc2", dc2.port(), "legacy-v2")] {
        let mut c = raw::Conn::open(port, "check");
        let ids: BTreeSet<i64> = raw::batch_headers(&mut c, topic)
            .iter()
            .map(|h| h.producer_id)
            .collect();
        assert_eq!(ids.len(), 1, "{cluster}: {ids:?}");
        assert!(*ids.first().unwrap() >= 0, "{cluster}: {ids:?}");
    }
}

#[test]
fn a_group_spans_two_clusters_and_local_topics_and_commits_where_the_data_lives() {
    // dc1 is Kafka (this process's; no other test here has an `orders`
    // there), dc2 Tansu.
    let dc1 = support::kafka::Kafka::shared();
    let dc2 = Tansu::start_with(&["--cluster-id", "dc2"]);
    dc1.create_topic("orders", 2, &[]);
    support::create_topic("ck_admin.py", &dc2.bootstrap(), "legacy-v2", 2);
    let (strait, _dir) = routed_strait(&dc1.bootstrap(), &dc2.bootstrap());
    let b = strait.bootstrap();
    support::create_topic("ck_admin.py", &b, "local-orders", 2);
    let topics = ["dc1.orders", "legacy", "local-orders"];
    for topic in topics {
        produce("ck_produce.py", &b, topic, 60, &[]);
    }
    // Two members of one group coordinated by Strait, subscribed to all
    // three, commit as they go.
    let group_args = |expect: &'static str| {
        vec![
            "--bootstrap".to_owned(),
            b.clone(),
            "--topic".to_owned(),
            topics.join(","),
            "--group".to_owned(),
            "span".to_owned(),
            "--members".to_owned(),
            "2".to_owned(),
            "--commit".to_owned(),
            "--expect".to_owned(),
            expect.to_owned(),
            "--linger".to_owned(),
            "2".to_owned(),
        ]
    };
    let args = group_args("180");
    let out = run_client(
        "ck_consume.py",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert_eq!(out["records"].as_u64(), Some(180), "{out}");
    let members = out["by_member"].as_object().unwrap();
    assert!(
        members.values().all(|n| n.as_u64().unwrap_or(0) > 0),
        "both members consumed: {out}"
    );
    let through: u64 = out["committed"]
        .as_object()
        .unwrap()
        .values()
        .map(|o| {
            o.as_u64()
                .unwrap_or_else(|| panic!("a partition without a commit: {out}"))
        })
        .sum();
    assert_eq!(through, 180, "{out}");

    // The upstream clusters hold the group's offsets of their topics, under
    // their own names, for their own lag tools.
    let on_dc1 = committed(&dc1.bootstrap(), "span", "orders");
    assert_eq!(
        on_dc1.values().map(|o| o.unwrap_or(0)).sum::<i64>(),
        60,
        "{on_dc1:?}"
    );
    let on_dc2 = committed(&dc2.bootstrap(), "span", "legacy-v2");
    assert_eq!(
        on_dc2.values().map(|o| o.unwrap_or(0)).sum::<i64>(),
        60,
        "{on_dc2:?}"
    );
    let local = committed(&b, "span", "local-orders");
    assert_eq!(
        local.values().map(|o| o.unwrap_or(0)).sum::<i64>(),
        60,
        "{local:?}"
    );

    // The group resumes from its commits: only the new records come.
    for topic in topics {
        produce("ck_produce.py", &b, topic, 10, &["--start", "60"]);
    }
    let args = group_args("30");
    let out = run_client(
        "ck_consume.py",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert_eq!(out["records"].as_u64(), Some(30), "{out}");
    assert_eq!(out["duplicates"].as_u64(), Some(0), "{out}");
}

/// A Strait whose `legacy` topic is `upstream` on `dc2` and whose `dc2-`
/// groups `dc2` coordinates.
fn delegating_strait(dc2: &str, upstream: &str) -> (Strait, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strait.yaml");
    std::fs::write(
        &path,
        format!(
            r#"clusters:
  dc2: {{ bootstrap: ["{dc2}"] }}
routes:
  - {{ exact: legacy, to: dc2, as: "{upstream}" }}
  - {{ regex: ".*", to: local }}
groups:
  - {{ prefix: "dc2-", to: dc2 }}
"#
        ),
    )
    .unwrap();
    (Strait::start(&["--config", path.to_str().unwrap()]), dir)
}

#[test]
fn a_delegated_group_is_run_by_its_cluster_and_served_by_two_straits() {
    // dc2 is a `strait serve`: Tansu's DescribeGroups lists no members.
    let dc2 = Strait::start(&[]);
    support::create_topic("ck_admin.py", &dc2.bootstrap(), "legacy-v2", 4);
    delegated_group(&dc2.bootstrap(), "legacy-v2", "dc2-shared");
}

/// The same with Kafka's own group coordinator (the classic protocol).
#[test]
fn a_delegated_group_is_run_by_kafkas_coordinator_and_served_by_two_straits() {
    let kafka = support::kafka::Kafka::shared();
    let upstream = support::unique("legacy-v2");
    kafka.create_topic(&upstream, 4, &[]);
    delegated_group(&kafka.bootstrap(), &upstream, &support::unique("dc2-shared"));
}

/// The consumer group protocol (KIP-848) through Strait: a group delegated
/// to Kafka's coordinator, under a renamed topic, joins with
/// ConsumerGroupHeartbeat (Strait renames the subscription and turns the
/// assignment's topic ids into the ones clients see), with two members of
/// the Java client (4.1.1) and then two of franz-go. Each group gets every record
/// once, commits on Kafka under the cluster's name, and Kafka knows it as
/// a consumer-protocol group (ConsumerGroupDescribe finds it; a classic
/// group would be GROUP_ID_NOT_FOUND there).
#[test]
fn a_kip848_group_is_run_by_kafkas_coordinator_under_a_renamed_topic() {
    let kafka = support::kafka::Kafka::shared();
    let upstream = support::unique("legacy-848");
    kafka.create_topic(&upstream, 4, &[]);
    let (strait, _dir) = delegating_strait(&kafka.bootstrap(), &upstream);
    let versions = raw::Conn::open(strait.port(), "versions").api_versions(3);
    let heartbeat = versions.api_keys.iter().find(|k| k.api_key == 68);
    assert_eq!(
        heartbeat.map(|k| (k.min_version, k.max_version)),
        Some((0, 1)),
        "ConsumerGroupHeartbeat: {versions:?}"
    );
    produce("franz:produce", &strait.bootstrap(), "legacy", 200, &[]);
    let legacy_id = raw::Conn::open(strait.port(), "metadata")
        .metadata()
        .topics
        .into_iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == "legacy"))
        .map(|t| t.topic_id)
        .expect("legacy in Strait's Metadata");
    for client in ["java4:consume", "franz:consume"] {
        let group = support::unique("dc2-848");
        // The members stay 6 s after the last record: time to describe
        // the group through Strait while it is running.
        let args = consume_848_args(&strait.bootstrap(), "legacy", &group, 200, 6);
        let mut members = support::spawn_client(client, &args.iter().map(String::as_str).collect::<Vec<_>>());
        let waited = Instant::now();
        let running = loop {
            let described = describe_consumer_group(strait.port(), &group);
            let assigned: usize = described
                .members
                .iter()
                .flat_map(|m| &m.assignment.topic_partitions)
                .map(|t| t.partitions.len())
                .sum();
            if described.members.len() == 2 && assigned == 4 {
                break described;
            }
            assert!(
                waited.elapsed() < Duration::from_secs(60),
                "{client}: {group} never ran with 2 members and 4 partitions: {described:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        };
        assert_eq!(running.error_code, 0, "{client}: {running:?}");
        for member in &running.members {
            assert_eq!(
                member.subscribed_topic_names,
                vec![name_of("legacy")],
                "{client}: {member:?}"
            );
            for t in &member.assignment.topic_partitions {
                assert_eq!(
                    (t.topic_name.as_str(), t.topic_id),
                    ("legacy", legacy_id),
                    "{client}: the client's name and id: {member:?}"
                );
            }
        }
        assert!(
            members
                .wait(Duration::from_secs(120))
                .is_some_and(|s| s.success()),
            "{client}: {}",
            members.stderr()
        );
        let out: Value = serde_json::from_str(members.lines().last().expect("the client's JSON")).unwrap();
        assert_eq!(out["records"], 200, "{client}: {out}");
        assert_eq!(out["duplicates"], 0, "{client}: {out}");
        let on_kafka = committed(&kafka.bootstrap(), &group, &upstream);
        assert_eq!(
            on_kafka.values().map(|o| o.unwrap_or(0)).sum::<i64>(),
            200,
            "{client}: {on_kafka:?}"
        );
        // Kafka runs it as a consumer-protocol group (a classic one is
        // GROUP_ID_NOT_FOUND there).
        let found = describe_consumer_group(kafka.port(), &group);
        assert_eq!(
            found.error_code, 0,
            "{client}: {group} is not a consumer group on Kafka: {found:?}"
        );
    }
}

/// ConsumerGroupDescribe v0 of `group` at the broker on `port`.
fn describe_consumer_group(
    port: u16,
    group: &str,
) -> kafka_protocol::messages::consumer_group_describe_response::DescribedGroup {
    raw::Conn::open(port, "describe")
        .call(
            &ConsumerGroupDescribeRequest::default()
                .with_group_ids(vec![GroupId(StrBytes::from_string(group.to_owned()))]),
            0,
        )
        .groups
        .remove(0)
}

fn name_of(topic: &str) -> kafka_protocol::messages::TopicName {
    kafka_protocol::messages::TopicName(StrBytes::from_string(topic.to_owned()))
}

/// A client that would join with KIP-848 a group Strait's own coordinator
/// runs (franz-go with `group.protocol=consumer`) is answered
/// UNSUPPORTED_VERSION and falls back to the classic protocol.
#[test]
fn a_kip848_client_of_a_local_group_falls_back_to_the_classic_protocol() {
    let kafka = support::kafka::Kafka::shared();
    let upstream = support::unique("legacy-848");
    kafka.create_topic(&upstream, 1, &[]);
    let (strait, _dir) = delegating_strait(&kafka.bootstrap(), &upstream);
    let topic = support::unique("local-848");
    support::create_topic("ck_admin.py", &strait.bootstrap(), &topic, 3);
    produce("franz:produce", &strait.bootstrap(), &topic, 120, &[]);
    let args = consume_848_args(&strait.bootstrap(), &topic, &support::unique("local-848"), 120, 2);
    let out = run_client(
        "franz:consume",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert_eq!(out["records"], 120, "{out}");
    assert_eq!(out["duplicates"], 0, "{out}");
}

/// The arguments of two members consuming `expect` records of `topic` in
/// `group` with `group.protocol=consumer`, committing, staying `linger`
/// seconds after the last.
fn consume_848_args(bootstrap: &str, topic: &str, group: &str, expect: usize, linger: u32) -> Vec<String> {
    [
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--group",
        group,
        "--members",
        "2",
        "--commit",
        "--expect",
    ]
    .iter()
    .map(|a| a.to_string())
    .chain([
        expect.to_string(),
        "--linger".into(),
        linger.to_string(),
        "-X".into(),
        "group.protocol=consumer".into(),
    ])
    .collect()
}

/// Two members of `group`, coordinated by `dc2` (which holds `legacy` as
/// `upstream`), one through each of two Straits.
fn delegated_group(dc2: &str, upstream: &str, group: &str) {
    let (one, _d1) = delegating_strait(dc2, upstream);
    let (two, _d2) = delegating_strait(dc2, upstream);
    // One member through each Strait; each reads until a while after its
    // first record.
    let member = |strait: &Strait| {
        support::spawn_client(
            "ck_consume.py",
            &[
                "--bootstrap",
                &strait.bootstrap(),
                "--topic",
                "legacy",
                "--group",
                group,
                "--commit",
                "--expect",
                "1",
                "--linger",
                "10",
                "--records",
                "--timeout",
                "90",
            ],
        )
    };
    let mut first = member(&one);
    let mut second = member(&two);
    // One group of two members on dc2, each with its share, in the
    // clients' topic name.
    let deadline = Instant::now() + Duration::from_secs(60);
    let described = loop {
        let out = support::try_client(
            "ck_admin.py",
            &["--bootstrap", &one.bootstrap(), "group", "--group", group],
        );
        let json = out.json.clone().unwrap_or_default();
        let members = json["members"].as_array().cloned().unwrap_or_default();
        if members.len() == 2
            && members
                .iter()
                .all(|m| !m["assignment"].as_array().unwrap().is_empty())
        {
            break json;
        }
        assert!(
            Instant::now() < deadline,
            "the group did not settle with two members: {}\n{}\n{}",
            out.describe(),
            first.describe(),
            second.describe()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let mut assigned: Vec<String> = described["members"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| {
            m["assignment"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_owned())
        })
        .collect();
    assigned.sort();
    assert_eq!(
        assigned,
        vec!["legacy:0", "legacy:1", "legacy:2", "legacy:3"],
        "{described}"
    );

    produce("ck_produce.py", &one.bootstrap(), "legacy", 200, &[]);
    let mut seen = BTreeSet::new();
    for (name, m) in [("first", &mut first), ("second", &mut second)] {
        // Its own timeout (90 s) and teardown, so a member that saw nothing
        // still prints what it saw and its errors.
        let status = m.wait(Duration::from_secs(150));
        assert!(status.is_some_and(|s| s.success()), "{name}: {}", m.describe());
        let out: Value = serde_json::from_str(m.lines().last().unwrap()).unwrap();
        let records = out["records_list"].as_array().unwrap();
        assert!(!records.is_empty(), "{name} consumed nothing: {out}");
        for r in records {
            assert!(seen.insert((r[0].as_u64(), r[1].as_u64())), "read twice: {r}");
        }
    }
    assert_eq!(seen.len(), 200);
    // The commits are dc2's, under its topic name.
    let on_dc2 = committed(dc2, group, upstream);
    assert_eq!(
        on_dc2.values().map(|o| o.unwrap_or(0)).sum::<i64>(),
        200,
        "{on_dc2:?}"
    );
}

/// `op` of ck_admin.py on `bootstrap` for `topic` (with `extra`), its JSON.
fn admin(bootstrap: &str, op: &str, topic: &str, extra: &[&str]) -> Value {
    let mut args = vec!["--bootstrap", bootstrap, op, "--topic", topic];
    args.extend_from_slice(extra);
    support::try_client("ck_admin.py", &args)
        .json
        .unwrap_or_else(|| panic!("ck_admin {op} {topic} printed no JSON"))
}

#[test]
fn topics_are_created_grown_described_and_deleted_where_their_route_points() {
    // The upstream is a `strait serve`: Tansu has no CreatePartitions.
    let upstream = Strait::start(&[]);
    let (gateway, _dir) = in_front_of(&upstream.bootstrap());
    let (b, u) = (gateway.bootstrap(), upstream.bootstrap());

    let made = admin(&b, "create", "dc1.made", &["--partitions", "3"]);
    assert_eq!(made["ok"], true, "{made}");
    assert_eq!(
        admin(&u, "describe", "made", &[])["topics"]["made"]["partitions"],
        3
    );
    let again = admin(&b, "create", "dc1.made", &["--partitions", "3"]);
    assert!(
        again["error"]
            .as_str()
            .unwrap_or("")
            .starts_with("TOPIC_ALREADY_EXISTS"),
        "{again}"
    );
    let described = admin(&b, "describe", "dc1.made", &[]);
    assert_eq!(described["topics"]["dc1.made"]["partitions"], 3, "{described}");
    assert!(
        described["configs"]
            .as_object()
            .is_some_and(|c| c.contains_key("retention.ms")),
        "the upstream's topic configs: {described}"
    );
    assert_eq!(described["brokers"].as_array().unwrap().len(), 1, "{described}");
    assert_eq!(described["brokers"][0]["port"], gateway.port(), "{described}");

    let grown = admin(&b, "grow", "dc1.made", &["--partitions", "5"]);
    assert_eq!(grown["ok"], true, "{grown}");
    assert_eq!(
        admin(&u, "describe", "made", &[])["topics"]["made"]["partitions"],
        5
    );
    assert_eq!(
        admin(&b, "describe", "dc1.made", &[])["topics"]["dc1.made"]["partitions"],
        5
    );

    let deleted = admin(&b, "delete", "dc1.made", &[]);
    assert_eq!(deleted["ok"], true, "{deleted}");
    let gone = admin(&u, "describe", "made", &[]);
    assert!(gone["topics"]["made"]["error"].is_string(), "{gone}");

    // A local topic is made in the spool, not upstream.
    assert_eq!(
        admin(&b, "create", "local-made", &["--partitions", "2"])["ok"],
        true
    );
    assert!(strait_created(&gateway, "local-made"));
    let upstream_view = admin(&u, "describe", "local-made", &[]);
    assert!(
        upstream_view["topics"]["local-made"]["error"].is_string(),
        "{upstream_view}"
    );

    // A producer's auto-creation happens where the route points.
    produce("ck_produce.py", &b, "dc1.auto", 5, &[]);
    assert_eq!(
        admin(&u, "describe", "auto", &[])["topics"]["auto"]["partitions"],
        1
    );
    assert!(!strait_created(&gateway, "dc1.auto"), "{}", gateway.log());
}

fn strait_created(strait: &Strait, topic: &str) -> bool {
    strait.log_line(&["created topic", topic]).is_some()
}

#[test]
fn leader_epochs_and_record_deletion_reach_the_upstream() {
    let (_upstream, gateway, _dir) = over_strait_upstream("epochs", 1);
    let mut c = raw::Conn::open(gateway.port(), "epochs");
    for i in 0..3 {
        let batch = build::batch(1_000 + i, &[b"x", b"y"]);
        assert_eq!(c.produce("dc1.epochs", 0, &batch, 10_000), (0, 2 * i));
    }
    // The end of epoch 0 on the upstream: its log end.
    let epochs = raw::offset_for_leader_epoch(&mut c, "dc1.epochs", 0, 0);
    assert_eq!((epochs.error_code, epochs.end_offset), (0, 6), "{epochs:?}");

    // DeleteRecords goes to the partition's leader: Tansu lists it, but its
    // memory storage panics on it ("not yet implemented") and drops the
    // connection, and `strait serve`'s spool keeps records until
    // retention, so no peer here deletes. What the client sees is the
    // upstream's failure as a retriable error (its leader is unreachable
    // for a moment: NOT_LEADER_OR_FOLLOWER), promptly, and the gateway
    // goes on serving the topic.
    let tansu = Tansu::start();
    support::create_topic("ck_admin.py", &tansu.bootstrap(), "trimmed", 1);
    let (front, _dir2) = in_front_of(&tansu.bootstrap());
    produce(
        "ck_produce.py",
        &front.bootstrap(),
        "dc1.trimmed",
        10,
        &["--partition", "0"],
    );
    let mut c = raw::Conn::open(front.port(), "trim");
    let trimmed = raw::delete_records(&mut c, "dc1.trimmed", 0, 4);
    assert_eq!(trimmed.error_code, 6, "NOT_LEADER_OR_FOLLOWER: {trimmed:?}");
    produce(
        "ck_produce.py",
        &front.bootstrap(),
        "dc1.trimmed",
        5,
        &["--partition", "0"],
    );
    assert_eq!(count(&dump(&front.bootstrap(), "dc1.trimmed", 15)), 15);
    // A local topic's records are kept: refused.
    support::create_topic("ck_admin.py", &front.bootstrap(), "local-kept", 1);
    let kept = raw::delete_records(&mut c, "local-kept", 0, 1);
    assert_eq!(kept.error_code, 44, "POLICY_VIOLATION: {kept:?}");
}

#[test]
fn an_upstream_killed_and_restarted_mid_stream_loses_no_acknowledged_record() {
    // The upstream is a `strait serve` on a data directory, so that it
    // comes back with what it acknowledged (Tansu keeps it in memory).
    let mut upstream = Strait::start(&[]);
    support::create_topic("ck_admin.py", &upstream.bootstrap(), "outage", 2);
    let (gateway, _dir) = in_front_of(&upstream.bootstrap());
    let b = gateway.bootstrap();
    let mut producer = support::spawn_client(
        "ck_acked.py",
        &[
            "--bootstrap",
            &b,
            "--topic",
            "dc1.outage",
            "--acks",
            "all",
            "--keyed",
            "--value-prefix",
            "outage",
            "--rate",
            "500",
            "--duration",
            "14",
            "--message-timeout",
            "60",
        ],
    );
    let started = producer.wait_for(Duration::from_secs(30), |l| {
        l.iter().filter(|l| l.starts_with("ACKED ")).count() >= 200
    });
    assert!(started, "no acknowledgements: {}", producer.describe());
    upstream.kill();
    let at_kill = support::acked(&producer.lines()).len();
    // Down for three seconds: the gateway answers with retriable errors,
    // the producer retries.
    std::thread::sleep(Duration::from_secs(3));
    upstream.restart();
    let status = producer.wait(Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| s.success()),
        "{}\n{}",
        producer.describe(),
        gateway.log()
    );
    let acked = support::acked(&producer.lines());
    assert!(
        acked.len() > at_kill + 200,
        "the producer did not go on after the restart: {} acknowledged, {at_kill} before the kill: {}",
        acked.len(),
        producer.describe()
    );
    // Every acknowledged record is on the upstream, where its
    // acknowledgement said, and reads the same through the gateway.
    let stored = dump(&upstream.bootstrap(), "outage", acked.len());
    let mut lost = Vec::new();
    for ((p, o), value) in &acked {
        // Acknowledged without an offset (o < 0): found by its value.
        let found = stored.get(&p.to_string()).and_then(|records| {
            records
                .iter()
                .find(|r| r[0].as_i64() == Some(*o) || (*o < 0 && r[2].as_str() == Some(value.as_str())))
        });
        if found.and_then(|r| r[2].as_str()) != Some(value.as_str()) {
            lost.push(format!("p{p}@{o} {value}: {found:?}"));
        }
    }
    assert!(
        lost.is_empty(),
        "{} of {} lost: {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(10)]
    );
    assert_eq!(dump(&b, "dc1.outage", acked.len()), stored);
}

#[test]
fn a_stalled_upstream_holds_bounded_memory_and_local_topics_keep_working() {
    let (relay, upstream, gateway, _dir) = behind_relay();
    support::create_topic("ck_admin.py", &upstream.bootstrap(), "stalled", 1);
    support::create_topic("ck_admin.py", &gateway.bootstrap(), "local-busy", 1);
    // Half a MiB each (the upstream takes batches up to 1 MiB).
    let batch = build::batch(1_000, &[&vec![7u8; 512 << 10]]);
    let mut warm = raw::Conn::open(gateway.port(), "warm");
    assert_eq!(warm.produce("dc1.stalled", 0, &batch, 60_000), (0, 0));
    let pid = gateway.pid().expect("gateway pid");
    let before = support::proc_status_bytes(pid, "RssAnon").unwrap();

    // The link stalls; eight producers push produces at the gateway
    // as fast as it reads them, until it stops reading.
    relay.stall(true);
    let writers: Vec<_> = (0..8)
        .map(|i| {
            let port = gateway.port();
            let batch = batch.clone();
            std::thread::spawn(move || {
                let mut c = raw::Conn::open(port, &format!("pusher-{i}"));
                c.stream.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
                let mut sent = 0;
                loop {
                    let (_, frame) = c.produce_frame("dc1.stalled", 0, &batch, 60_000);
                    if std::io::Write::write_all(&mut c.stream, &frame).is_err() {
                        return (c, sent);
                    }
                    sent += 1;
                    if sent == 400 {
                        return (c, sent);
                    }
                }
            })
        })
        .collect();
    let pushed: Vec<(raw::Conn, usize)> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    let offered: usize = pushed.iter().map(|(_, n)| n).sum::<usize>() / 2;
    let held = support::proc_status_bytes(pid, "RssAnon").unwrap();
    // The connections read at most 256 MiB of requests ahead in all (64
    // MiB each) beside one request each, and what waits for the upstream
    // is bounded by its connection's 64 MiB budget (plus 64 MiB of slack).
    let bound = before + (256 << 20) + 8 * batch.len() as u64 + (64 << 20) + (64 << 20);
    assert!(
        held < bound,
        "anonymous memory grew from {} MiB to {} MiB with {offered} MiB offered (bound {} MiB)",
        before >> 20,
        held >> 20,
        bound >> 20
    );
    // It stopped reading: every pusher was held back (its write timed out)
    // before it sent all it had. (Each connection waits to start its next
    // request once the upstream connection's Produce window is full, and
    // is not read meanwhile.)
    assert!(
        pushed.iter().all(|(_, n)| *n < 400),
        "the gateway read on while the upstream answered nothing: {offered} MiB offered"
    );
    // Meanwhile a local topic is served.
    let mut local = raw::Conn::open(gateway.port(), "local");
    assert_eq!(local.produce("local-busy", 0, &batch, 10_000), (0, 0));
    eprintln!(
        "stalled: {offered} MiB offered, anonymous memory {} -> {} MiB",
        before >> 20,
        held >> 20
    );
    drop(pushed);
    relay.stall(false);
    // Once the link is back, the upstream is reached again.
    let mut after = raw::Conn::open(gateway.port(), "after");
    let small = build::batch(1_000, &[b"after"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, _) = after.produce("dc1.stalled", 0, &small, 30_000);
        if code == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the upstream is not reached again: error {code}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_fetch_across_destinations_keeps_to_its_max_bytes_in_all() {
    let (_upstream, gateway, _dir) = over_strait_upstream("big", 1);
    support::create_topic("ck_admin.py", &gateway.bootstrap(), "local-big", 1);
    let mut c = raw::Conn::open(gateway.port(), "fetcher");
    let batch = build::batch(1_000, &[&vec![3u8; 400 << 10]]);
    for topic in ["dc1.big", "local-big"] {
        for i in 0..3 {
            assert_eq!(c.produce(topic, 0, &batch, 10_000), (0, i));
        }
    }
    // Both parts have more than max_bytes; min_bytes above what either has
    // alone makes the gateway wait for both before it answers.
    let partition = |topic: &str| {
        kafka_protocol::messages::fetch_request::FetchTopic::default()
            .with_topic(kafka_protocol::messages::TopicName(
                kafka_protocol::protocol::StrBytes::from_string(topic.to_owned()),
            ))
            .with_partitions(vec![
                kafka_protocol::messages::fetch_request::FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(8 << 20),
            ])
    };
    let max_bytes = 1 << 20;
    let request = kafka_protocol::messages::FetchRequest::default()
        .with_max_wait_ms(1_000)
        .with_min_bytes(4 << 20)
        .with_max_bytes(max_bytes)
        .with_topics(vec![partition("dc1.big"), partition("local-big")]);
    let response = c.fetch(&request);
    let sizes: Vec<(String, usize, i64)> = response
        .responses
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| {
                assert_eq!(p.error_code, 0, "{}: {p:?}", t.topic.as_str());
                (
                    t.topic.to_string(),
                    p.records.as_ref().map_or(0, |r| r.len()),
                    p.high_watermark,
                )
            })
        })
        .collect();
    // Both answered, in request order, with their watermarks; records of
    // one only, as much as max_bytes allows.
    let names: Vec<&str> = sizes.iter().map(|(t, ..)| t.as_str()).collect();
    assert_eq!(names, vec!["dc1.big", "local-big"], "{sizes:?}");
    assert!(sizes.iter().all(|(_, _, hw)| *hw == 3), "{sizes:?}");
    let total: usize = sizes.iter().map(|(_, n, _)| n).sum();
    assert!(
        total > 0 && total <= max_bytes as usize + batch.len(),
        "{sizes:?}"
    );
    assert_eq!(sizes.iter().filter(|(_, n, _)| *n > 0).count(), 1, "{sizes:?}");
}

#[test]
fn a_fetch_answers_every_partition_with_its_own_records_in_any_order() {
    // A broker that answers every partition it was asked for (Strait
    // does; Tansu leaves out those without records), asked for partition
    // 0 after others: each partition gets its own records back.
    let (_upstream, gateway, _dir) = over_strait_upstream("spread", 4);
    let mut c = raw::Conn::open(gateway.port(), "fetcher");
    for p in 0..3 {
        let batch = build::batch(1_000, &[format!("p{p}").as_bytes()]);
        assert_eq!(c.produce("dc1.spread", p, &batch, 10_000), (0, 0));
    }
    let fetch = |p: i32| {
        kafka_protocol::messages::fetch_request::FetchPartition::default()
            .with_partition(p)
            .with_fetch_offset(0)
            .with_partition_max_bytes(1 << 20)
    };
    let request = kafka_protocol::messages::FetchRequest::default()
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(8 << 20)
        .with_topics(vec![
            kafka_protocol::messages::fetch_request::FetchTopic::default()
                .with_topic(kafka_protocol::messages::TopicName(
                    kafka_protocol::protocol::StrBytes::from_static_str("dc1.spread"),
                ))
                .with_partitions(vec![fetch(2), fetch(3), fetch(1), fetch(0)]),
        ]);
    let response = c.fetch(&request);
    assert_eq!(response.responses.len(), 1, "{response:?}");
    // Each partition's index, watermark and which of the values its
    // records hold (uncompressed, so the value's bytes are in them).
    let answered: Vec<(i32, i64, Vec<String>)> = response.responses[0]
        .partitions
        .iter()
        .map(|p| {
            assert_eq!(p.error_code, 0, "{p:?}");
            let records = p.records.clone().unwrap_or_default();
            let held = (0..4)
                .map(|v| format!("p{v}"))
                .filter(|v| records.windows(2).any(|w| w == v.as_bytes()))
                .collect();
            (p.partition_index, p.high_watermark, held)
        })
        .collect();
    let held = |v: &str| vec![v.to_owned()];
    assert_eq!(
        answered,
        vec![
            (2, 1, held("p2")),
            (3, 0, vec![]),
            (1, 1, held("p1")),
            (0, 1, held("p0"))
        ]
    );
}

/// Topic ids (Metadata v10+): an upstream topic's id reaches clients
/// mapped by the cluster's name (the same for every Strait with that
/// config, never the cluster's own, different when one cluster is
/// configured under two names), beside local topics' own ids.
#[test]
fn upstream_topic_ids_reach_clients_without_colliding() {
    let kafka = support::kafka::Kafka::shared();
    let upstream = support::unique("ids");
    kafka.create_topic(&upstream, 1, &[]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strait.yaml");
    let b = kafka.bootstrap();
    std::fs::write(
        &path,
        format!(
            "clusters:\n  east: {{ bootstrap: [\"{b}\"] }}\n  alias: {{ bootstrap: [\"{b}\"] }}\n\
             routes:\n  - {{ exact: east.t, to: east, as: \"{upstream}\" }}\n\
             \x20 - {{ exact: alias.t, to: alias, as: \"{upstream}\" }}\n  - {{ regex: \".*\", to: local }}\n"
        ),
    )
    .unwrap();
    let one = Strait::start(&["--config", path.to_str().unwrap()]);
    let two = Strait::start(&["--config", path.to_str().unwrap()]);
    support::create_topic("ck_admin.py", &one.bootstrap(), "local-ids", 1);
    let id_of = |port: u16, topic: &str| {
        let md = raw::Conn::open(port, "ids").metadata();
        md.topics
            .iter()
            .find(|t| t.name.as_ref().map(|n| n.as_str()) == Some(topic))
            .unwrap_or_else(|| panic!("no {topic} in {md:?}"))
            .topic_id
    };
    let theirs = id_of(kafka.port(), &upstream);
    let east = id_of(one.port(), "east.t");
    let alias = id_of(one.port(), "alias.t");
    let local = id_of(one.port(), "local-ids");
    assert!(!theirs.is_nil() && !east.is_nil() && !alias.is_nil() && !local.is_nil());
    let distinct: BTreeSet<_> = [theirs, east, alias, local].into_iter().collect();
    assert_eq!(distinct.len(), 4, "{theirs} {east} {alias} {local}");
    assert_eq!(
        id_of(two.port(), "east.t"),
        east,
        "another Strait maps the same way"
    );
    assert_eq!(id_of(two.port(), "alias.t"), alias);

    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::FetchRequest;
    use kafka_protocol::ResponseError;
    // A Fetch by ids (v17, as the Java client sends it): each topic's
    // records under the id it was asked by; an id of nothing gets
    // UNKNOWN_TOPIC_ID. The second Strait finds the upstream ids without
    // having handed them out.
    let mut c = raw::Conn::open(one.port(), "ids");
    for (topic, value) in [("east.t", "upstream record"), ("local-ids", "local record")] {
        let (code, _) = c.produce(topic, 0, &raw::idempotent_batch(-1, -1, -1, &[value]), 5000);
        assert_eq!(code, 0, "producing to {topic}");
    }
    let nowhere = uuid::Uuid::from_u128(0x5eed);
    let by_id = |id: uuid::Uuid| {
        FetchTopic::default()
            .with_topic_id(id)
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])
    };
    // More than there is: every part answers (after its long poll).
    let request = FetchRequest::default()
        .with_max_wait_ms(1000)
        .with_min_bytes(1 << 20)
        .with_max_bytes(4 << 20)
        .with_topics(vec![by_id(east), by_id(local), by_id(nowhere), by_id(alias)]);
    for port in [one.port(), two.port()] {
        let answer = raw::Conn::open(port, "ids").fetch_at(&request, 17);
        let of = |id: uuid::Uuid| {
            let topic = answer
                .responses
                .iter()
                .find(|t| t.topic_id == id)
                .unwrap_or_else(|| panic!("no answer for {id} in {answer:?}"));
            assert_eq!(topic.partitions.len(), 1, "{topic:?}");
            let p = &topic.partitions[0];
            (p.error_code, raw::record_values(p.records.as_ref()))
        };
        let upstream_record = (0, vec!["upstream record".to_owned()]);
        assert_eq!(of(east), upstream_record, "east.t from {port}");
        assert_eq!(of(alias), upstream_record, "alias.t from {port}");
        // The local topic is the first Strait's own.
        if port == one.port() {
            assert_eq!(of(local), (0, vec!["local record".to_owned()]));
        } else {
            assert_eq!(of(local), (ResponseError::UnknownTopicId.code(), vec![]));
        }
        assert_eq!(of(nowhere), (ResponseError::UnknownTopicId.code(), vec![]));
    }
}
