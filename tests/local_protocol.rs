//! The protocol, raw: `strait serve` with local topics, spoken to with the
//! `kafka-protocol` crate (`support/raw.rs`): ApiVersions (and the v0
//! fallback for an unknown version), the connection limit and request
//! timeout, SASL refused, garbage and oversized frames, Fetch long polls
//! and limits, idempotent sequences across a restart, bad produce input, a
//! Produce on a stalled disk, the classic group protocol (generations,
//! rebalance timeout), OffsetForLeaderEpoch, and SIGTERM with a parked long
//! poll. The rdkafka crate creates the topics and writes and reads records
//! around them.

mod support;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::Encodable;
use support::local::{log_tail, rd_consume_assign, rd_create_topic, rd_produce, rd_produce_at, rd_producer};
use support::{raw, run_client, unique, Strait};

#[test]
fn protocol_api_versions_v3_and_unknown_v99_fallback() {
    let strait = Strait::start(&[]);
    let mut c = raw::Conn::open(strait.port(), "proto-apiversions");

    let v3 = c.api_versions(3);
    assert_eq!(v3.error_code, 0);
    let advertised: BTreeMap<i16, (i16, i16)> = v3
        .api_keys
        .iter()
        .map(|k| (k.api_key, (k.min_version, k.max_version)))
        .collect();
    for api in [
        ApiKey::Produce,
        ApiKey::Fetch,
        ApiKey::ListOffsets,
        ApiKey::Metadata,
        ApiKey::OffsetCommit,
        ApiKey::OffsetFetch,
        ApiKey::FindCoordinator,
        ApiKey::JoinGroup,
        ApiKey::Heartbeat,
        ApiKey::LeaveGroup,
        ApiKey::SyncGroup,
        ApiKey::DescribeGroups,
        ApiKey::ListGroups,
        ApiKey::ApiVersions,
        ApiKey::CreateTopics,
        ApiKey::DeleteTopics,
        ApiKey::InitProducerId,
        ApiKey::OffsetForLeaderEpoch,
        ApiKey::DescribeConfigs,
        ApiKey::CreatePartitions,
        ApiKey::DeleteGroups,
        ApiKey::DescribeCluster,
    ] {
        let (min, max) = advertised
            .get(&(api as i16))
            .copied()
            .unwrap_or_else(|| panic!("{api:?} is not advertised: {advertised:?}"));
        assert!(min <= max, "{api:?} {min}..{max}");
        let codec = api.valid_versions();
        assert!(
            codec.min <= min && max <= codec.max,
            "{api:?} {min}..{max} beyond what exists"
        );
    }
    // What mainstream clients need.
    assert!(advertised[&(ApiKey::ApiVersions as i16)].1 >= 3);
    assert!(advertised[&(ApiKey::Produce as i16)].1 >= 9, "{advertised:?}");
    assert!(advertised[&(ApiKey::Fetch as i16)].1 >= 11, "{advertised:?}");
    assert!(advertised[&(ApiKey::Metadata as i16)].1 >= 9, "{advertised:?}");
    // Answered on every listener, as Kafka does (a listener without SASL
    // answers SaslHandshake with ILLEGAL_SASL_STATE).
    assert_eq!(advertised[&(ApiKey::SaslHandshake as i16)], (1, 1));
    assert_eq!(advertised[&(ApiKey::SaslAuthenticate as i16)], (0, 2));
    // Not handled, so not advertised.
    for api in [ApiKey::EndTxn, ApiKey::AddPartitionsToTxn] {
        assert!(!advertised.contains_key(&(api as i16)), "{api:?} is advertised");
    }

    // ApiVersions v99 (a client from the future): UNSUPPORTED_VERSION (35)
    // with ApiVersions' own range, in the v0 layout (KIP-511), on a usable
    // connection.
    let (id, f) = c.frame(
        ApiKey::ApiVersions,
        99,
        3,
        &kafka_protocol::messages::ApiVersionsRequest::default()
            .with_client_software_name(kafka_protocol::protocol::StrBytes::from_static_str("future"))
            .with_client_software_version(kafka_protocol::protocol::StrBytes::from_static_str("99")),
    );
    c.send_raw(&f);
    let body = c.read(ApiKey::ApiVersions, 0, id);
    let mut cursor = &body[..];
    let v0 = <kafka_protocol::messages::ApiVersionsResponse as kafka_protocol::protocol::Decodable>::decode(
        &mut cursor,
        0,
    )
    .expect("a v0 ApiVersions answer");
    assert_eq!(v0.error_code, 35, "UNSUPPORTED_VERSION");
    assert!(
        cursor.is_empty(),
        "{} bytes after the v0 answer: not the v0 layout",
        cursor.len()
    );
    let fallback: BTreeMap<i16, (i16, i16)> = v0
        .api_keys
        .iter()
        .map(|k| (k.api_key, (k.min_version, k.max_version)))
        .collect();
    assert_eq!(
        fallback,
        BTreeMap::from([(18, advertised[&18])]),
        "the fallback list is not ApiVersions' range alone"
    );
    // The client retries with a version from the list, same connection.
    assert_eq!(c.api_versions(3).error_code, 0);
    raw::check_metadata(&c.metadata(), strait.port());
}

/// `server.max_connections` and `server.request_timeout`: at the limit a
/// new connection waits, unanswered, until one closes, and Strait logs it
/// once; a request whose bytes stop arriving closes only its connection.
#[test]
fn protocol_connection_limit_and_request_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("strait.yaml");
    std::fs::write(&path, "server:\n  max_connections: 2\n  request_timeout: 1s\n").expect("config");
    let strait = Strait::start(&["--config", path.to_str().unwrap()]);
    // (The harness's readiness ping has closed; should its slot not be
    // free yet, `b` waits a moment for it.)
    let mut a = raw::Conn::open(strait.port(), "limit-a");
    assert_eq!(a.api_versions(3).error_code, 0);
    let mut b = raw::Conn::open(strait.port(), "limit-b");
    assert_eq!(b.api_versions(3).error_code, 0);

    // Strait is at its limit once it says so (the readiness ping's slot
    // may take a moment to free).
    let deadline = Instant::now() + Duration::from_secs(10);
    while strait.log_line(&["connection limit reached"]).is_none() {
        assert!(
            Instant::now() < deadline,
            "two connections open and no word of the limit\n{}",
            log_tail(&strait)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A third connection is queued by the kernel: its request is written
    // but nothing answers while two are open.
    let mut c = raw::Conn::open(strait.port(), "limit-c");
    let (id, frame) = c.frame(
        kafka_protocol::messages::ApiKey::ApiVersions,
        3,
        3,
        &kafka_protocol::messages::ApiVersionsRequest::default(),
    );
    c.send_raw(&frame);
    c.stream
        .set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    let mut byte = [0u8; 1];
    match c.stream.read(&mut byte) {
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) => {}
        other => panic!("a connection beyond max_connections was served: {other:?}"),
    }
    // The two admitted connections keep working.
    raw::check_metadata(&a.metadata(), strait.port());
    assert_eq!(b.api_versions(3).error_code, 0);

    // One closes: the queued connection is accepted and its request,
    // waiting in the socket all along, is answered.
    drop(a);
    c.stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = c.read(kafka_protocol::messages::ApiKey::ApiVersions, 3, id);
    let answer =
        <kafka_protocol::messages::ApiVersionsResponse as kafka_protocol::protocol::Decodable>::decode(
            &mut &body[..],
            3,
        )
        .expect("ApiVersions response");
    assert_eq!(answer.error_code, 0);

    // request_timeout: a request frame declares 100 bytes, sends 10 and
    // stalls. Strait closes that connection after about 1 s and says why.
    drop(b);
    let mut slow = raw::Conn::open(strait.port(), "limit-slow");
    let slow_peer = slow.local();
    let mut partial = 100i32.to_be_bytes().to_vec();
    partial.extend_from_slice(&[0u8; 10]);
    slow.send_raw(&partial);
    let stalled_at = Instant::now();
    slow.assert_closed("a request stalled after 10 of 100 bytes");
    assert!(
        stalled_at.elapsed() >= Duration::from_millis(900),
        "closed after {:?}, before request_timeout",
        stalled_at.elapsed()
    );
    let line = strait
        .log_line(&[&slow_peer, "request_timeout"])
        .unwrap_or_else(|| {
            panic!(
                "no log line names the stalled client {slow_peer}\n{}",
                log_tail(&strait)
            )
        });
    assert!(line.contains("WARN"), "{line}");
    // The queued-then-admitted connection was not disturbed.
    raw::check_metadata(&c.metadata(), strait.port());
}

#[test]
fn protocol_sasl_handshake_is_refused_and_the_connection_stays_usable() {
    let strait = Strait::start(&[]);
    let mut c = raw::Conn::open(strait.port(), "proto-sasl");
    assert_eq!(c.api_versions(3).error_code, 0);
    // As a Kafka listener without SASL answers: ILLEGAL_SASL_STATE.
    let sasl = c.sasl_handshake();
    assert_eq!(sasl.error_code, 34, "ILLEGAL_SASL_STATE: {sasl:?}");
    raw::check_metadata(&c.metadata(), strait.port());
    let again = c.sasl_handshake();
    assert_eq!(again.error_code, 34);
    assert_eq!(c.api_versions(3).error_code, 0);
}

#[test]
fn protocol_garbage_and_oversized_frames_close_only_their_connection() {
    let strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let topic = unique("proto-data");
    rd_create_topic(&b, &topic, 8).expect("create");
    let producer = rd_producer(&b, "none", false).expect("producer");
    let acked = rd_produce(&producer, &topic, "before", 0, 200);

    // Opened before the bad frames; must keep working after each.
    let mut good = raw::Conn::open(strait.port(), "proto-good");
    assert_eq!(good.api_versions(3).error_code, 0);

    // 1. A known API (Produce v9) whose body is cut short.
    let mut bad = raw::Conn::open(strait.port(), "proto-garbage-short");
    assert_eq!(bad.api_versions(3).error_code, 0);
    let mut header = Vec::new();
    kafka_protocol::messages::RequestHeader::default()
        .with_request_api_key(ApiKey::Produce as i16)
        .with_request_api_version(9)
        .with_correlation_id(77)
        .with_client_id(Some(kafka_protocol::protocol::StrBytes::from_static_str(
            "proto-garbage-short",
        )))
        .encode(&mut header, ApiKey::Produce.request_header_version(9))
        .unwrap();
    let mut frame_body = header.clone();
    frame_body.extend_from_slice(&[1, 2, 3]);
    let mut frame = (frame_body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&frame_body);
    bad.send_raw(&frame);
    bad.assert_closed("Produce with a truncated body");
    let short_peer = bad.local();
    raw::check_metadata(&good.metadata(), strait.port());

    // 2. A known API (Metadata v12) whose body is 256 bytes of 0xff, from
    // a client id that would forge a log line of its own.
    let mut bad = raw::Conn::open(strait.port(), "proto-garbage-ff");
    let mut header = Vec::new();
    kafka_protocol::messages::RequestHeader::default()
        .with_request_api_key(ApiKey::Metadata as i16)
        .with_request_api_version(12)
        .with_correlation_id(78)
        .with_client_id(Some(kafka_protocol::protocol::StrBytes::from_static_str(
            "proto-garbage-ff\nFORGED ERROR line",
        )))
        .encode(&mut header, ApiKey::Metadata.request_header_version(12))
        .unwrap();
    header.extend_from_slice(&[0xff; 256]);
    let mut frame = (header.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&header);
    bad.send_raw(&frame);
    bad.assert_closed("Metadata with a 0xff body");
    let ff_peer = bad.local();
    raw::check_metadata(&good.metadata(), strait.port());

    // 3. A frame length far beyond max_frame_bytes (100 MiB by default):
    // refused from the length alone, nothing else sent.
    let mut big = raw::Conn::open(strait.port(), "proto-oversized");
    big.send_raw(&i32::MAX.to_be_bytes());
    big.assert_closed("a 2 GiB frame length");
    let big_peer = big.local();
    // 4. A negative frame length.
    let mut neg = raw::Conn::open(strait.port(), "proto-negative");
    neg.send_raw(&(-1i32).to_be_bytes());
    neg.assert_closed("a negative frame length");

    // The connection opened before still works, Strait still runs, and the
    // data produced before is all there.
    raw::check_metadata(&good.metadata(), strait.port());
    assert_eq!(good.api_versions(3).error_code, 0);
    assert!(strait.pid().is_some());
    let more = rd_produce(&producer, &topic, "after", 200, 50);
    drop(producer);
    let consumed = rd_consume_assign(&b, &topic, 250);
    for (p, o, v) in acked.iter().chain(&more) {
        assert_eq!(
            consumed.records.get(&(*p, *o)).map(|r| &r.1),
            Some(v),
            "record p{p}@{o} after the bad frames"
        );
    }
    assert_eq!(consumed.records.len(), 250);

    // Each closed connection got a log line naming the client.
    let log = strait.log();
    for (peer, what) in [
        (&short_peer, "truncated Produce"),
        (&ff_peer, "0xff Metadata"),
        (&big_peer, "oversized frame"),
    ] {
        let line = log
            .lines()
            .find(|l| l.contains(peer.as_str()))
            .unwrap_or_else(|| {
                panic!(
                    "no log line names the {what} client {peer}\n{}",
                    log_tail(&strait)
                )
            });
        assert!(
            line.contains("WARN") || line.contains("closing"),
            "{what}: {line}"
        );
    }
    // Text from a client stays on its line, escaped.
    assert!(
        log.contains("FORGED") && !log.lines().any(|l| l.starts_with("FORGED")),
        "a client id's newline split a log line\n{}",
        log_tail(&strait)
    );
    assert!(
        log.contains("proto-garbage-short"),
        "the truncated Produce's log line does not name its client id\n{}",
        log_tail(&strait)
    );
    // A connection whose first request is garbage is named by the client
    // id in that request's header.
    assert!(
        log.contains("proto-garbage-ff"),
        "the 0xff Metadata's log line does not name its client id\n{}",
        log_tail(&strait)
    );
}

mod raw_fetch {
    use super::*;

    /// One Fetch v12 of partition 0; returns (elapsed, error, high
    /// watermark, record bytes).
    pub fn fetch(
        c: &mut raw::Conn,
        topic: &str,
        offset: i64,
        max_wait_ms: i32,
        min_bytes: i32,
        max_bytes: i32,
        partition_max_bytes: i32,
    ) -> (Duration, i16, i64, usize) {
        let req = raw::fetch_request(
            topic,
            offset,
            max_wait_ms,
            min_bytes,
            max_bytes,
            partition_max_bytes,
        );
        let sent = Instant::now();
        let r = c.fetch(&req);
        let elapsed = sent.elapsed();
        let p = &r.responses[0].partitions[0];
        (
            elapsed,
            p.error_code,
            p.high_watermark,
            p.records.as_ref().map_or(0, |r| r.len()),
        )
    }
}

/// Fetch at the protocol level: max wait honoured on an empty partition,
/// woken early by a produce, min bytes waits for the max wait, per-partition
/// and total max bytes still return the first batch whole, and an offset
/// past the end is OFFSET_OUT_OF_RANGE.
#[test]
fn protocol_fetch_long_poll_and_limits() {
    let strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let topic = unique("proto-fetch");
    rd_create_topic(&b, &topic, 1).expect("create");
    rd_produce_at(&b, &topic, 0, "none", "f", 10, |_| 1_700_000_000_000);
    let mut c = raw::Conn::open(strait.port(), "proto-fetch");
    assert_eq!(c.api_versions(3).error_code, 0);

    // At the end, nothing arrives: the answer comes after max_wait.
    let (t, err, hw, n) = raw_fetch::fetch(&mut c, &topic, 10, 1000, 1, 1 << 20, 1 << 20);
    assert_eq!((err, hw, n), (0, 10, 0));
    assert!(
        (Duration::from_millis(900)..Duration::from_secs(3)).contains(&t),
        "empty fetch with max_wait 1000 ms answered after {t:?}"
    );

    // A produce during the wait answers it early, with the record.
    let port = strait.port();
    let t2 = topic.clone();
    let waiter = thread::spawn(move || {
        let mut c = raw::Conn::open(port, "proto-fetch-wait");
        raw_fetch::fetch(&mut c, &t2, 10, 10_000, 1, 1 << 20, 1 << 20)
    });
    thread::sleep(Duration::from_millis(700));
    rd_produce_at(&b, &topic, 0, "none", "g", 1, |_| 1_700_000_000_000);
    let (t, err, hw, n) = waiter.join().expect("fetch thread");
    assert_eq!((err, hw), (0, 11));
    assert!(n > 0, "the woken fetch carried no records");
    assert!(
        t < Duration::from_secs(4),
        "a fetch with max_wait 10 s was answered after {t:?} although a record arrived after 0.7 s"
    );

    // min_bytes more than there is: waits out max_wait, then answers with
    // what there is.
    let (t, err, _, n) = raw_fetch::fetch(&mut c, &topic, 0, 1000, 1 << 20, 1 << 20, 1 << 20);
    assert_eq!(err, 0);
    assert!(n > 0);
    assert!(
        (Duration::from_millis(900)..Duration::from_secs(3)).contains(&t),
        "fetch with unmet min_bytes and max_wait 1000 ms answered after {t:?}"
    );

    // Limits of 1 byte: the first batch still comes back whole.
    let (_, err, _, n) = raw_fetch::fetch(&mut c, &topic, 0, 0, 1, 1, 1);
    assert_eq!(err, 0);
    assert!(
        n > 61,
        "limits below one batch returned {n} bytes, not the first batch"
    );

    // Past the end.
    let (_, err, hw, _) = raw_fetch::fetch(&mut c, &topic, 1000, 0, 1, 1 << 20, 1 << 20);
    assert_eq!((err, hw), (1, 11), "OFFSET_OUT_OF_RANGE");
}

mod raw_produce {
    use super::*;
    pub use support::raw::{idempotent_batch as batch, init_producer_id};

    /// Produce v9, acks=all, one batch to partition 0: (error, base offset).
    pub fn produce(c: &mut raw::Conn, topic: &str, batch: &[u8]) -> (i16, i64) {
        c.produce(topic, 0, batch, 10_000)
    }
}

/// Idempotent producer state at the protocol level: a retried batch is
/// acknowledged at its first offset without a second append, a sequence gap
/// gets OUT_OF_ORDER_SEQUENCE_NUMBER (45), the state survives a restart,
/// and a transactional id is refused.
#[test]
fn protocol_idempotent_sequences_dedupe_retries_refuse_gaps_and_survive_restart() {
    use raw_produce::{batch, init_producer_id, produce};
    let mut strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let topic = unique("proto-idem");
    rd_create_topic(&b, &topic, 1).expect("create");
    let mut c = raw::Conn::open(strait.port(), "proto-idem");
    assert_eq!(c.api_versions(3).error_code, 0);
    let init = init_producer_id(&mut c, None);
    assert_eq!(init.error_code, 0, "{init:?}");
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
    assert!(pid >= 0 && epoch >= 0, "{init:?}");

    let first = batch(pid, epoch, 0, &["a0", "a1", "a2"]);
    assert_eq!(produce(&mut c, &topic, &first), (0, 0));
    assert_eq!(produce(&mut c, &topic, &first), (0, 0), "retry of the last batch");
    let second = batch(pid, epoch, 3, &["a3", "a4"]);
    assert_eq!(produce(&mut c, &topic, &second), (0, 3));
    assert_eq!(
        produce(&mut c, &topic, &second),
        (0, 3),
        "retry of the last batch"
    );
    // A retry of an older batch (Kafka remembers the last five): no error
    // (or DUPLICATE_SEQUENCE_NUMBER, 46, which clients take as success),
    // and never a second copy.
    let (err, _) = produce(&mut c, &topic, &first);
    assert!(err == 0 || err == 46, "retry of an older batch: error {err}");
    let (err, _) = produce(&mut c, &topic, &batch(pid, epoch, 10, &["gap"]));
    assert_eq!(err, 45, "a sequence gap must get OUT_OF_ORDER_SEQUENCE_NUMBER");

    let status = strait.stop();
    assert!(status.success(), "strait exited {status}\n{}", log_tail(&strait));
    strait.restart();
    let mut c = raw::Conn::open(strait.port(), "proto-idem-2");
    assert_eq!(
        produce(&mut c, &topic, &second),
        (0, 3),
        "retry of the last batch after a restart"
    );
    assert_eq!(produce(&mut c, &topic, &batch(pid, epoch, 5, &["a5"])), (0, 5));
    let (err, _) = produce(&mut c, &topic, &batch(pid, epoch, 9, &["gap2"]));
    assert_eq!(err, 45, "a sequence gap after a restart");

    let tx = init_producer_id(&mut c, Some("tx-1"));
    assert_ne!(
        tx.error_code, 0,
        "a transactional id must be refused until transactions exist: {tx:?}"
    );

    let consumed = rd_consume_assign(&b, &topic, 6);
    let got: Vec<(i64, &str)> = consumed
        .records
        .iter()
        .map(|((_, o), (_, v))| (*o, v.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![(0, "a0"), (1, "a1"), (2, "a2"), (3, "a3"), (4, "a4"), (5, "a5")],
        "the log after retries, gaps and a restart"
    );
}

/// Bad produce input gets Kafka error codes, nothing is stored, and the
/// connection stays usable: a batch with a broken CRC (CORRUPT_MESSAGE, 2),
/// a partition that does not exist and an unknown topic
/// (UNKNOWN_TOPIC_OR_PARTITION, 3), two batches for one partition and a
/// control batch (INVALID_RECORD, 87), a transactional batch
/// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, 53).
#[test]
fn protocol_produce_refuses_corrupt_batches_and_unknown_partitions() {
    use raw_produce::{batch, produce};
    // No auto-creation, so that a Produce to an unknown topic cannot create
    // it either.
    let conf = tempfile::tempdir().expect("tempdir");
    let path = conf.path().join("strait.yaml");
    std::fs::write(&path, "broker:\n  auto_create_topics: false\n").unwrap();
    let strait = Strait::start(&["--config", path.to_str().unwrap()]);
    let b = strait.bootstrap();
    let topic = unique("proto-bad-produce");
    rd_create_topic(&b, &topic, 1).expect("create");
    let mut c = raw::Conn::open(strait.port(), "proto-bad-produce");
    assert_eq!(c.api_versions(3).error_code, 0);

    let mut corrupt = batch(-1, -1, -1, &["x0", "x1"]);
    let n = corrupt.len();
    corrupt[n - 1] ^= 0x55; // in the last record's value: the CRC no longer matches
    let (err, _) = produce(&mut c, &topic, &corrupt);
    assert_eq!(err, 2, "a batch with a bad CRC must get CORRUPT_MESSAGE");

    let good = batch(-1, -1, -1, &["g0", "g1"]);
    let mut wrong_partition = raw::Conn::open(strait.port(), "proto-bad-partition");
    assert_eq!(
        wrong_partition.produce(&topic, 5, &good, 10_000).0,
        3,
        "partition 5 of a 1-partition topic"
    );
    let unknown = unique("proto-no-such-topic");
    let (err, _) = produce(&mut c, &unknown, &good);
    assert_eq!(err, 3, "Produce to an unknown topic");

    // Two batches for one partition: INVALID_RECORD (87), as Kafka answers
    // (Produce v3+ carries exactly one batch per partition); nothing stored.
    let two = [batch(-1, -1, -1, &["t0"]), batch(-1, -1, -1, &["t1"])].concat();
    assert_eq!(
        produce(&mut c, &topic, &two).0,
        87,
        "two batches in one partition"
    );
    // A control batch (a transaction marker) from a client: INVALID_RECORD;
    // a transactional batch: refused like a transactional id (53).
    let mut control = batch(-1, -1, -1, &["c"]);
    control[22] |= 0x20;
    fix_crc(&mut control);
    assert_eq!(produce(&mut c, &topic, &control).0, 87, "a control batch");
    let mut transactional = batch(-1, -1, -1, &["x"]);
    transactional[22] |= 0x10;
    fix_crc(&mut transactional);
    assert_eq!(
        produce(&mut c, &topic, &transactional).0,
        53,
        "a transactional batch"
    );

    assert_eq!(produce(&mut c, &topic, &good), (0, 0));
    let consumed = rd_consume_assign(&b, &topic, 2);
    let got: Vec<(i64, &str)> = consumed
        .records
        .iter()
        .map(|((_, o), (_, v))| (*o, v.as_str()))
        .collect();
    assert_eq!(got, vec![(0, "g0"), (1, "g1")]);
    let d = run_client("ck_admin.py", &["--bootstrap", &b, "describe"]);
    assert!(
        d["topics"].get(&unknown).is_none(),
        "Produce created a topic: {d}"
    );
}

/// A small ext4 file system in a loop-mounted image file, which the test can
/// freeze (`fsfreeze`): writes and syncs to it then block, as on a stalled
/// disk, until it is thawed. Thawed, unmounted and removed on drop.
/// Mounting needs root (CI runs as root); without it the test fails.
struct FreezableDisk {
    dir: tempfile::TempDir,
}

impl FreezableDisk {
    fn mount() -> FreezableDisk {
        let dir = tempfile::tempdir().expect("tempdir");
        let image = dir.path().join("disk.img");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(256 << 20))
            .expect("image file");
        for (what, cmd) in [
            (
                "mkfs.ext4",
                Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image).status(),
            ),
            (
                "mount -o loop",
                Command::new("mount")
                    .args(["-o", "loop"])
                    .arg(&image)
                    .arg(&mnt)
                    .status(),
            ),
        ] {
            let status = cmd.unwrap_or_else(|e| panic!("running {what}: {e}"));
            assert!(
                status.success(),
                "{what} failed ({status}): this test needs root and loop devices for a real file system it can freeze"
            );
        }
        FreezableDisk { dir }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    /// Freezes the file system; the returned guard thaws it.
    fn freeze(&self) -> Frozen {
        let status = Command::new("fsfreeze")
            .arg("--freeze")
            .arg(self.path())
            .status()
            .expect("running fsfreeze");
        assert!(status.success(), "fsfreeze --freeze failed ({status})");
        Frozen(self.path())
    }
}

impl Drop for FreezableDisk {
    fn drop(&mut self) {
        let _ = Command::new("fsfreeze")
            .arg("--unfreeze")
            .arg(self.path())
            .status();
        let _ = Command::new("umount").arg("-l").arg(self.path()).status();
    }
}

/// A frozen file system, thawed on drop.
struct Frozen(PathBuf);

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = Command::new("fsfreeze").arg("--unfreeze").arg(&self.0).status();
    }
}

/// A stalled disk (a frozen file system under `durability: every_batch`):
/// a Produce whose append cannot finish answers REQUEST_TIMED_OUT (7) at
/// its timeout_ms instead of hanging, other requests and connections go on
/// being answered, and once the disk is back the append completes, so the
/// idempotent producer's retry is acknowledged at the same offset, not
/// written twice.
#[test]
fn protocol_produce_times_out_on_a_stalled_disk_and_the_retry_is_not_duplicated() {
    use raw_produce::{batch, init_producer_id, produce};
    let disk = FreezableDisk::mount();
    let conf = disk.path().join("strait.yaml");
    std::fs::write(&conf, "spool:\n  durability: every_batch\n").unwrap();
    let strait = Strait::start_on(&disk.path().join("data"), &["--config", conf.to_str().unwrap()]);
    let b = strait.bootstrap();
    let topic = unique("proto-stall");
    rd_create_topic(&b, &topic, 1).expect("create");
    let mut c = raw::Conn::open(strait.port(), "proto-stall");
    let pid = init_producer_id(&mut c, None);
    assert_eq!(pid.error_code, 0);
    let (pid, epoch) = (pid.producer_id.0, pid.producer_epoch);
    assert_eq!(
        produce(&mut c, &topic, &batch(pid, epoch, 0, &["a0", "a1"])),
        (0, 0)
    );

    let frozen = disk.freeze();
    let second = batch(pid, epoch, 2, &["b2", "b3"]);
    let asked = Instant::now();
    let (err, _) = c.produce(&topic, 0, &second, 1000);
    let waited = asked.elapsed();
    assert_eq!(err, 7, "a Produce on a frozen disk must get REQUEST_TIMED_OUT");
    assert!(
        waited >= Duration::from_millis(900),
        "answered after {waited:?}, before its timeout"
    );
    // The broker is not stuck: the same connection and a new one are
    // answered while the disk is still frozen.
    assert_eq!(c.api_versions(3).error_code, 0);
    let mut other = raw::Conn::open(strait.port(), "proto-stall-other");
    raw::check_metadata(&other.metadata(), strait.port());

    drop(frozen);
    // The retry (same producer, same sequences) waits for the first
    // attempt, which completes now, and is acknowledged at its offset.
    assert_eq!(
        produce(&mut c, &topic, &second),
        (0, 2),
        "the retry after the disk came back"
    );
    let consumed = rd_consume_assign(&b, &topic, 4);
    let got: Vec<(i64, &str)> = consumed
        .records
        .iter()
        .map(|((_, o), (_, v))| (*o, v.as_str()))
        .collect();
    assert_eq!(got, vec![(0, "a0"), (1, "a1"), (2, "b2"), (3, "b3")]);
    let logged = strait.log();
    assert!(!logged.contains("ERROR"), "{}", log_tail(&strait));
}

/// Recomputes the CRC-32C of the batch in `buf` after an edit.
fn fix_crc(buf: &mut [u8]) {
    let crc = crc32c::crc32c(&buf[21..]);
    buf[17..21].copy_from_slice(&crc.to_be_bytes());
}

mod raw_group {
    use super::*;
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::leave_group_request::MemberIdentity;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
    use kafka_protocol::messages::{
        GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
        LeaveGroupResponse, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest,
        OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
    };
    use kafka_protocol::protocol::{Decodable, StrBytes};

    pub fn s(x: &str) -> StrBytes {
        StrBytes::from_string(x.to_string())
    }

    pub fn call<Q: Encodable, R: Decodable>(c: &mut raw::Conn, api: ApiKey, v: i16, req: &Q) -> R {
        let (id, f) = c.frame(api, v, v, req);
        c.send_raw(&f);
        let body = c.read(api, v, id);
        R::decode(&mut &body[..], v).unwrap_or_else(|e| panic!("{api:?} v{v} response: {e}"))
    }

    /// JoinGroup v5 with `member_id` (may be empty).
    pub fn join(c: &mut raw::Conn, group: &str, member_id: &str) -> JoinGroupResponse {
        join_with(c, group, member_id, 10_000, 10_000)
    }

    /// JoinGroup v5 with the given session and rebalance timeouts.
    pub fn join_with(
        c: &mut raw::Conn,
        group: &str,
        member_id: &str,
        session_ms: i32,
        rebalance_ms: i32,
    ) -> JoinGroupResponse {
        let req = JoinGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_session_timeout_ms(session_ms)
            .with_rebalance_timeout_ms(rebalance_ms)
            .with_member_id(s(member_id))
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(b"raw".to_vec().into())]);
        call(c, ApiKey::JoinGroup, 5, &req)
    }

    /// Joins as a new member: the first JoinGroup (v4+) answers
    /// MEMBER_ID_REQUIRED (79) with the id to join with.
    pub fn join_new(c: &mut raw::Conn, group: &str) -> JoinGroupResponse {
        let first = join(c, group, "");
        if first.error_code != 79 {
            return first;
        }
        assert!(
            !first.member_id.is_empty(),
            "MEMBER_ID_REQUIRED without an id: {first:?}"
        );
        join(c, group, &first.member_id)
    }

    pub fn sync(
        c: &mut raw::Conn,
        group: &str,
        generation: i32,
        member: &str,
        assignments: &[(&str, &[u8])],
    ) -> SyncGroupResponse {
        let req = SyncGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id(generation)
            .with_member_id(s(member))
            .with_assignments(
                assignments
                    .iter()
                    .map(|(m, a)| {
                        SyncGroupRequestAssignment::default()
                            .with_member_id(s(m))
                            .with_assignment(a.to_vec().into())
                    })
                    .collect(),
            );
        call(c, ApiKey::SyncGroup, 3, &req)
    }

    pub fn heartbeat(c: &mut raw::Conn, group: &str, generation: i32, member: &str) -> i16 {
        let req = HeartbeatRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id(generation)
            .with_member_id(s(member));
        let r: HeartbeatResponse = call(c, ApiKey::Heartbeat, 3, &req);
        r.error_code
    }

    /// OffsetCommit v7 of one partition; returns its error code.
    pub fn commit(
        c: &mut raw::Conn,
        group: &str,
        generation: i32,
        member: &str,
        topic: &str,
        offset: i64,
    ) -> i16 {
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(s(member))
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName(s(topic)))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(offset)
                    .with_committed_leader_epoch(-1)])]);
        let r: OffsetCommitResponse = call(c, ApiKey::OffsetCommit, 7, &req);
        r.topics[0].partitions[0].error_code
    }

    /// OffsetFetch v5 of partition 0: (error, committed offset).
    pub fn fetch_offset(c: &mut raw::Conn, group: &str, topic: &str) -> (i16, i64) {
        let req = OffsetFetchRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(TopicName(s(topic)))
                .with_partition_indexes(vec![0])]));
        let r: OffsetFetchResponse = call(c, ApiKey::OffsetFetch, 5, &req);
        assert_eq!(r.error_code, 0, "OffsetFetch: {r:?}");
        let p = &r.topics[0].partitions[0];
        (p.error_code, p.committed_offset)
    }

    pub fn leave(c: &mut raw::Conn, group: &str, member: &str) -> i16 {
        let req = LeaveGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_members(vec![MemberIdentity::default().with_member_id(s(member))]);
        let r: LeaveGroupResponse = call(c, ApiKey::LeaveGroup, 3, &req);
        assert_eq!(r.error_code, 0, "{r:?}");
        r.members.first().map_or(0, |m| m.error_code)
    }
}

/// The classic group protocol, raw: member ids (MEMBER_ID_REQUIRED), a
/// second member triggers a rebalance that heartbeats report, commits of
/// the current generation are still taken while the group prepares the
/// rebalance (what commit-on-revoke relies on), a commit from a stale
/// generation is refused (ILLEGAL_GENERATION), as are unknown members,
/// and the committed offset is the last accepted one.
#[test]
fn protocol_group_generations_fence_stale_commits() {
    use raw_group::{commit, fetch_offset, heartbeat, join, join_new, leave, sync};
    let strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let topic = unique("proto-group");
    let group = unique("proto-group");
    rd_create_topic(&b, &topic, 1).expect("create");
    let port = strait.port();

    let mut a = raw::Conn::open(port, "member-a");
    let ja = join_new(&mut a, &group);
    assert_eq!(ja.error_code, 0, "{ja:?}");
    let (a_id, gen1) = (ja.member_id.to_string(), ja.generation_id);
    assert_eq!(ja.leader.as_str(), a_id, "the only member leads");
    assert_eq!(ja.members.len(), 1);
    let sa = sync(&mut a, &group, gen1, &a_id, &[(&a_id, b"all-of-it")]);
    assert_eq!((sa.error_code, &sa.assignment[..]), (0, &b"all-of-it"[..]));
    assert_eq!(heartbeat(&mut a, &group, gen1, &a_id), 0);
    assert_eq!(commit(&mut a, &group, gen1, &a_id, &topic, 5), 0);

    // A second member: its JoinGroup waits for the rebalance.
    let g2 = group.clone();
    let joiner = thread::spawn(move || {
        let mut bc = raw::Conn::open(port, "member-b");
        let jb = join_new(&mut bc, &g2);
        (bc, jb)
    });
    let deadline = Instant::now() + Duration::from_secs(8);
    loop {
        let hb = heartbeat(&mut a, &group, gen1, &a_id);
        if hb == 27 {
            break;
        }
        assert_eq!(hb, 0, "heartbeat while the second member joins");
        assert!(
            Instant::now() < deadline,
            "heartbeats never reported REBALANCE_IN_PROGRESS"
        );
        thread::sleep(Duration::from_millis(100));
    }
    // Preparing the rebalance: a commit of the current generation is taken.
    assert_eq!(
        commit(&mut a, &group, gen1, &a_id, &topic, 6),
        0,
        "commit while preparing a rebalance"
    );

    let ja2 = join(&mut a, &group, &a_id);
    assert_eq!(ja2.error_code, 0, "{ja2:?}");
    let gen2 = ja2.generation_id;
    assert!(gen2 > gen1, "generation {gen1} -> {gen2}");
    let (mut bc, jb) = joiner.join().expect("joiner");
    assert_eq!(jb.error_code, 0, "{jb:?}");
    assert_eq!(jb.generation_id, gen2);
    let b_id = jb.member_id.to_string();
    let leader = ja2.leader.to_string();
    assert!(leader == a_id || leader == b_id);
    let (lead_conn, other_conn, lead_id, other_id) = if leader == a_id {
        (&mut a, &mut bc, a_id.clone(), b_id.clone())
    } else {
        (&mut bc, &mut a, b_id.clone(), a_id.clone())
    };
    let members = if leader == a_id { &ja2.members } else { &jb.members };
    assert_eq!(members.len(), 2, "the leader sees both members");

    // The old generation is fenced.
    assert_eq!(
        commit(lead_conn, &group, gen1, &lead_id, &topic, 1),
        22,
        "stale generation: ILLEGAL_GENERATION"
    );
    assert_eq!(
        commit(lead_conn, &group, gen2 + 7, &lead_id, &topic, 1),
        22,
        "future generation: ILLEGAL_GENERATION"
    );
    assert_eq!(
        commit(lead_conn, &group, gen2, "nobody", &topic, 1),
        25,
        "UNKNOWN_MEMBER_ID"
    );

    // SyncGroup: the follower waits for the leader's assignment.
    let (g3, oid) = (group.clone(), other_id.clone());
    let other_sync = {
        let mut taken = raw::Conn::open(port, "member-sync");
        std::mem::swap(&mut taken, other_conn);
        thread::spawn(move || {
            let r = sync(&mut taken, &g3, gen2, &oid, &[]);
            (taken, r)
        })
    };
    let ls = sync(
        lead_conn,
        &group,
        gen2,
        &lead_id,
        &[(&lead_id, b"lead"), (&other_id, b"other")],
    );
    assert_eq!((ls.error_code, &ls.assignment[..]), (0, &b"lead"[..]));
    let (taken, os) = other_sync.join().expect("follower sync");
    *other_conn = taken;
    assert_eq!((os.error_code, &os.assignment[..]), (0, &b"other"[..]));

    assert_eq!(commit(lead_conn, &group, gen2, &lead_id, &topic, 9), 0);
    assert_eq!(
        commit(lead_conn, &group, gen1, &lead_id, &topic, 2),
        22,
        "stale generation after the rebalance"
    );
    assert_eq!(fetch_offset(lead_conn, &group, &topic), (0, 9));
    assert_eq!(heartbeat(lead_conn, &group, gen2, &lead_id), 0);
    assert_eq!(heartbeat(other_conn, &group, gen2, &other_id), 0);
    assert_eq!(
        heartbeat(other_conn, &group, gen1, &other_id),
        22,
        "heartbeat of a stale generation"
    );

    assert_eq!(leave(lead_conn, &group, &lead_id), 0);
    assert_eq!(leave(other_conn, &group, &other_id), 0);
    // Empty now: a standalone commit (generation -1, no member) is taken.
    assert_eq!(
        commit(lead_conn, &group, -1, "", &topic, 11),
        0,
        "standalone commit on an empty group"
    );
    assert_eq!(fetch_offset(lead_conn, &group, &topic), (0, 11));
}

/// Rebalance timeout: a member that keeps heartbeating but does not rejoin
/// is dropped once the rebalance timeout passes, and the rebalance
/// completes without it (its generation is then fenced).
#[test]
fn protocol_group_drops_a_member_that_does_not_rejoin() {
    use raw_group::{commit, heartbeat, join_with};
    let strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let topic = unique("proto-rebalance");
    let group = unique("proto-rebalance");
    rd_create_topic(&b, &topic, 1).expect("create");
    let port = strait.port();

    let mut a = raw::Conn::open(port, "lazy-member");
    let first = join_with(&mut a, &group, "", 6000, 1500);
    assert_eq!(first.error_code, 79, "{first:?}");
    let ja = join_with(&mut a, &group, &first.member_id, 6000, 1500);
    assert_eq!(ja.error_code, 0, "{ja:?}");
    let (a_id, gen1) = (ja.member_id.to_string(), ja.generation_id);
    let sa = raw_group::sync(&mut a, &group, gen1, &a_id, &[(&a_id, b"x")]);
    assert_eq!(sa.error_code, 0);

    let g2 = group.clone();
    let joiner = thread::spawn(move || {
        let mut bc = raw::Conn::open(port, "eager-member");
        let first = join_with(&mut bc, &g2, "", 6000, 1500);
        assert_eq!(first.error_code, 79, "{first:?}");
        let started = Instant::now();
        let jb = join_with(&mut bc, &g2, &first.member_id, 6000, 1500);
        (jb, started.elapsed())
    });
    // A heartbeats through the rebalance but never rejoins.
    let deadline = Instant::now() + Duration::from_secs(12);
    let mut last = 0;
    while !joiner.is_finished() && Instant::now() < deadline {
        last = heartbeat(&mut a, &group, gen1, &a_id);
        thread::sleep(Duration::from_millis(200));
    }
    assert!(
        joiner.is_finished(),
        "the rebalance never completed without the member that did not rejoin"
    );
    let (jb, waited) = joiner.join().unwrap();
    assert_eq!(jb.error_code, 0, "{jb:?}");
    assert!(jb.generation_id > gen1);
    assert_eq!(jb.members.len(), 1, "the lazy member should be gone: {jb:?}");
    assert_eq!(jb.leader, jb.member_id);
    assert!(
        waited < Duration::from_secs(8),
        "the rebalance took {waited:?} with a 1.5 s rebalance timeout"
    );
    assert_eq!(
        last, 27,
        "heartbeats during the rebalance should say REBALANCE_IN_PROGRESS"
    );
    // The dropped member is fenced.
    let hb = heartbeat(&mut a, &group, gen1, &a_id);
    assert!(hb == 25 || hb == 22, "heartbeat of the dropped member: {hb}");
    let c = commit(&mut a, &group, gen1, &a_id, &topic, 3);
    assert!(c == 25 || c == 22, "commit of the dropped member: {c}");
}

/// Fetch's total max_bytes limits the whole answer across partitions
/// (beyond the first batch, which comes back whole however large).
#[test]
fn protocol_fetch_total_max_bytes_spans_partitions() {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
    use kafka_protocol::protocol::{Decodable, StrBytes};
    let strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let topic = unique("proto-maxbytes");
    rd_create_topic(&b, &topic, 3).expect("create");
    let pad = "x".repeat(1000);
    for p in 0..3 {
        // Batches of about 10 KB: 10 records each, flushed per batch.
        for n in 0..4 {
            rd_produce_at(&b, &topic, p, "none", &format!("{pad}{p}-{n}"), 10, |_| {
                1_700_000_000_000
            });
        }
    }
    let mut c = raw::Conn::open(strait.port(), "proto-maxbytes");
    let fetch = |c: &mut raw::Conn, max_bytes: i32, partition_max: i32| -> Vec<usize> {
        let req = FetchRequest::default()
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(max_bytes)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.clone())))
                .with_partitions(
                    (0..3)
                        .map(|p| {
                            FetchPartition::default()
                                .with_partition(p)
                                .with_fetch_offset(0)
                                .with_partition_max_bytes(partition_max)
                        })
                        .collect(),
                )]);
        let (id, f) = c.frame(ApiKey::Fetch, 12, 12, &req);
        c.send_raw(&f);
        let body = c.read(ApiKey::Fetch, 12, id);
        let r = FetchResponse::decode(&mut &body[..], 12).expect("Fetch");
        let mut sizes = vec![0; 3];
        for p in &r.responses[0].partitions {
            assert_eq!(p.error_code, 0);
            sizes[p.partition_index as usize] = p.records.as_ref().map_or(0, |r| r.len());
        }
        sizes
    };
    let all = fetch(&mut c, 1 << 20, 1 << 20);
    assert!(all.iter().all(|&n| n > 35_000), "everything: {all:?}");
    let per = fetch(&mut c, 1 << 20, 15_000);
    assert!(
        per.iter().all(|n| (1..=15_000).contains(n)),
        "per-partition limit 15000: {per:?}"
    );
    let tiny = fetch(&mut c, 1, 1 << 20);
    assert!(
        (1..15_000).contains(&tiny[0]) && tiny[1] == 0 && tiny[2] == 0,
        "total limit 1: only the first batch: {tiny:?}"
    );
    let total = fetch(&mut c, 25_000, 1 << 20);
    let sum: usize = total.iter().sum();
    assert!(
        (1..=25_000).contains(&sum),
        "Fetch max_bytes 25000 over 3 partitions answered {sum} bytes {total:?}: only the first \
         non-empty partition may exceed the limits (KIP-74); a later partition must get at most \
         what is left of max_bytes (Kafka sends a partial batch or nothing)"
    );
}

/// OffsetForLeaderEpoch (how the Java consumer validates its position after
/// a metadata change): epoch 0, the only one, ends at the high watermark.
#[test]
fn protocol_offset_for_leader_epoch() {
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let topic = unique("proto-epoch");
    rd_create_topic(&b, &topic, 2).expect("create");
    rd_produce_at(&b, &topic, 0, "none", "e", 7, |_| 1_700_000_000_000);
    let mut c = raw::Conn::open(strait.port(), "proto-epoch");
    let req = OffsetForLeaderEpochRequest::default().with_topics(vec![OffsetForLeaderTopic::default()
        .with_topic(TopicName(StrBytes::from_string(topic.clone())))
        .with_partitions(vec![
            OffsetForLeaderPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(0)
                .with_leader_epoch(0),
            OffsetForLeaderPartition::default()
                .with_partition(1)
                .with_current_leader_epoch(-1)
                .with_leader_epoch(0),
            OffsetForLeaderPartition::default()
                .with_partition(9)
                .with_current_leader_epoch(0)
                .with_leader_epoch(0),
        ])]);
    let r: OffsetForLeaderEpochResponse = raw_group::call(&mut c, ApiKey::OffsetForLeaderEpoch, 4, &req);
    let got: Vec<(i32, i16, i32, i64)> = r.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition, p.error_code, p.leader_epoch, p.end_offset))
        .collect();
    assert_eq!(got[0], (0, 0, 0, 7), "{got:?}");
    assert_eq!(got[1], (1, 0, 0, 0), "{got:?}");
    assert_eq!(
        (got[2].0, got[2].1),
        (9, 3),
        "UNKNOWN_TOPIC_OR_PARTITION: {got:?}"
    );
}

/// SIGTERM while a consumer's Fetch is parked in a long poll (max wait
/// 30 s): the shutdown finishes that request at once (an empty answer) and
/// exits promptly instead of holding the process for the whole poll or the
/// shutdown grace period (10 s).
#[test]
fn protocol_sigterm_answers_a_parked_long_poll_promptly() {
    let mut strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let topic = unique("proto-park");
    rd_create_topic(&b, &topic, 1).expect("create");
    rd_produce_at(&b, &topic, 0, "none", "p", 3, |_| 1_700_000_000_000);
    let port = strait.port();
    let t = topic.clone();
    let parked = thread::spawn(move || {
        let mut c = raw::Conn::open(port, "proto-parked");
        c.stream.set_read_timeout(Some(Duration::from_secs(40))).unwrap();
        let started = Instant::now();
        let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            raw_fetch::fetch(&mut c, &t, 3, 30_000, 1, 1 << 20, 1 << 20)
        }));
        (answered.is_ok(), started.elapsed())
    });
    thread::sleep(Duration::from_millis(800));
    let t0 = Instant::now();
    let status = strait.stop();
    let took = t0.elapsed();
    let (answered, parked_for) = parked.join().expect("parked fetch thread");
    assert!(status.success(), "strait exited {status}\n{}", log_tail(&strait));
    let log = strait.log();
    let mut problems = Vec::new();
    if took >= Duration::from_secs(3) {
        problems.push(format!("SIGTERM took {took:?} to stop Strait"));
    }
    if !answered {
        problems.push(format!(
            "the parked Fetch got no answer (connection closed after {parked_for:?})"
        ));
    }
    if !log.contains("all partitions synced") {
        problems.push("the spool was not synced and closed on the way out".to_string());
    }
    assert!(
        problems.is_empty(),
        "shutdown with a Fetch parked in a long poll: {}\n{}",
        problems.join("; "),
        log_tail(&strait)
    );
}
