//! Crash tests of `strait serve` (issue 3): producers write while Strait is
//! killed with SIGKILL; after a restart on the same data directory every
//! acknowledged record must be there, at the partition and offset its
//! acknowledgement named, with its value.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value;
use support::{
    acked, create_topic, get_u64, spawn_client, try_client, unique, Acked, BackgroundClient, Strait,
};

fn write_config(dir: &std::path::Path, yaml: &str) -> String {
    let path = dir.join("strait.yaml");
    std::fs::write(&path, yaml).expect("writing the config");
    path.to_str().unwrap().to_string()
}

/// Reads the whole topic from offset 0 (no group) and returns
/// (partition, offset) -> value, asserting the client saw no duplicates and
/// kept each partition's order.
fn consume_all(b: &str, topic: &str, expect: usize) -> BTreeMap<(i64, i64), String> {
    let e = expect.to_string();
    let run = try_client(
        "ck_consume.py",
        &[
            "--bootstrap",
            b,
            "--topic",
            topic,
            "--assign",
            "--expect",
            &e,
            "--linger",
            "2",
            "--records",
            "--timeout",
            "60",
        ],
    );
    let json: Value = run
        .json
        .clone()
        .unwrap_or_else(|| panic!("no JSON from the consumer: {}", run.describe()));
    assert!(
        run.status.success(),
        "read back {} records, {expect} acknowledged: {}",
        json["records"],
        run.describe()
    );
    assert_eq!(get_u64(&json, "duplicates"), 0, "{}", run.describe());
    assert_eq!(json["per_partition_in_order"], true, "{}", run.describe());
    json["records_list"]
        .as_array()
        .expect("records_list")
        .iter()
        .map(|r| {
            (
                (r[0].as_i64().unwrap(), r[1].as_i64().unwrap()),
                r[3].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Waits until the producer has acknowledgements, lets it run `run_for`
/// more, SIGKILLs Strait, and waits for the producer to give up.
fn produce_through_a_crash(strait: &mut Strait, producer: &mut BackgroundClient, run_for: Duration) -> Acked {
    let started = producer.wait_for(Duration::from_secs(30), |l| {
        l.iter().any(|l| l.starts_with("ACKED "))
    });
    assert!(
        started,
        "the producer got no acknowledgement: {}\n{}",
        producer.describe(),
        strait.log()
    );
    std::thread::sleep(run_for);
    strait.kill();
    let before_exit = acked(&producer.lines()).len();
    // Its deliveries time out (message.timeout) with Strait gone.
    if producer.wait(Duration::from_secs(30)).is_none() {
        eprintln!("the producer did not give up in 30 s; killing it");
        producer.kill();
    }
    let lines = producer.lines();
    let acked = acked(&lines);
    eprintln!(
        "producer: {} acknowledged ({} when Strait was killed), {} failed; last line: {}",
        acked.len(),
        before_exit,
        lines.iter().filter(|l| l.starts_with("FAILED ")).count(),
        lines.last().map(String::as_str).unwrap_or("")
    );
    assert!(
        acked.len() >= 100,
        "too few acknowledgements to prove anything: {}",
        producer.describe()
    );
    acked
}

/// Asserts that every acknowledged record is in `log` at its partition and
/// offset with its value, that each partition's offsets are contiguous
/// from 0, and that no value is stored twice.
fn check_acked_present(round: &str, acked: &Acked, log: &BTreeMap<(i64, i64), String>) {
    let mut missing = Vec::new();
    let mut wrong = Vec::new();
    for ((p, o), v) in acked {
        if *o < 0 {
            if !log.iter().any(|((lp, _), lv)| lp == p && lv == v) {
                missing.push(format!("p{p}@? {v}"));
            }
            continue;
        }
        match log.get(&(*p, *o)) {
            None => missing.push(format!("p{p}@{o} {v}")),
            Some(got) if got != v => wrong.push(format!("p{p}@{o}: acked {v}, stored {got}")),
            Some(_) => {}
        }
    }
    assert!(
        missing.is_empty() && wrong.is_empty(),
        "{round}: {} of {} acknowledged records lost, {} replaced; lost (first 20): {:?}; replaced (first 20): {:?}",
        missing.len(),
        acked.len(),
        wrong.len(),
        &missing[..missing.len().min(20)],
        &wrong[..wrong.len().min(20)]
    );
    let mut by_partition: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (p, o) in log.keys() {
        by_partition.entry(*p).or_default().push(*o);
    }
    for (p, offsets) in by_partition {
        let want: Vec<i64> = (0..offsets.len() as i64).collect();
        assert_eq!(offsets, want, "{round}: partition {p} has holes");
    }
    let values: BTreeSet<&String> = log.values().collect();
    assert_eq!(values.len(), log.len(), "{round}: a value is stored twice");
}

fn spawn_acked_producer(b: &str, topic: &str, prefix: &str, extra: &[&str]) -> BackgroundClient {
    let mut args = vec![
        "--bootstrap",
        b,
        "--topic",
        topic,
        "--acks",
        "all",
        "--keyed",
        "--value-prefix",
        prefix,
        "--rate",
        "3000",
        "--duration",
        "60",
    ];
    args.extend_from_slice(extra);
    spawn_client("ck_acked.py", &args)
}

/// acks=all under `durability: every_batch`, SIGKILL twice: after each
/// restart every record acknowledged so far is there, in place. Small
/// segments, so that crashes meet segment rolls (and `spool verify`, which
/// reads whole preallocated segments, stays fast).
#[test]
fn acks_all_records_survive_sigkill_under_every_batch() {
    let conf_dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        conf_dir.path(),
        "spool:\n  durability: every_batch\n  segment_bytes: 64KiB\n  max_batch_bytes: 32KiB\n",
    );
    let mut strait = Strait::start(&["--config", &config]);
    let b = strait.bootstrap();
    let topic = unique("durable");
    create_topic("ck_admin.py", &b, &topic, 4);

    let mut all_acked = Acked::new();
    for round in ["r1", "r2"] {
        let mut producer = spawn_acked_producer(
            &b,
            &topic,
            round,
            &["--message-timeout", "3", "--value-size", "100"],
        );
        let acked = produce_through_a_crash(&mut strait, &mut producer, Duration::from_millis(1500));
        drop(producer);
        for (k, v) in acked {
            assert!(
                all_acked.insert(k, v).is_none(),
                "offset {k:?} acknowledged twice"
            );
        }
        strait.restart();
        let log = consume_all(&b, &topic, all_acked.len());
        check_acked_present(&format!("after crash {round}"), &all_acked, &log);
        eprintln!(
            "{round}: {} acknowledged so far, {} stored ({} stored without an acknowledgement)",
            all_acked.len(),
            log.len(),
            log.len() - all_acked.len()
        );
    }

    let status = strait.stop();
    assert!(
        status.success(),
        "strait exited {status} after SIGTERM\n{}",
        strait.log()
    );
    support::verify_spool(&strait.data_dir());
    let segments = std::fs::read_dir(strait.data_dir().join("topics").join(format!("{topic}-0")))
        .expect("partition 0 directory")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "log"))
        })
        .count();
    assert!(
        segments >= 2,
        "partition 0 never rolled a segment ({segments}): the test lost its point"
    );
}

/// An idempotent producer keeps writing while Strait is SIGKILLed and
/// restarted under it: once the producer is done, every record it produced
/// is stored exactly once (no duplicate from a retried batch whose answer
/// was lost, no gap), at the offset its acknowledgement named.
#[test]
fn idempotent_producer_rides_through_a_crash_without_duplicates() {
    let conf_dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(conf_dir.path(), "spool:\n  durability: every_batch\n");
    let mut strait = Strait::start(&["--config", &config]);
    let b = strait.bootstrap();
    let topic = unique("idem-crash");
    create_topic("ck_admin.py", &b, &topic, 4);

    const TOTAL: usize = 6000;
    let total = TOTAL.to_string();
    let mut producer = spawn_acked_producer(
        &b,
        &topic,
        "idem",
        &[
            "--max",
            &total,
            "--message-timeout",
            "30",
            "-X",
            "enable.idempotence=true",
        ],
    );
    let started = producer.wait_for(Duration::from_secs(30), |l| {
        l.iter().filter(|l| l.starts_with("ACKED ")).count() >= 500
    });
    assert!(started, "no progress: {}", producer.describe());
    strait.kill();
    std::thread::sleep(Duration::from_millis(300));
    strait.restart();
    let status = producer.wait(Duration::from_secs(60));
    let lines = producer.lines();
    let summary: Value = lines
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null);
    assert!(
        status.is_some_and(|s| s.success()),
        "the idempotent producer did not deliver everything across the restart: {summary}\n{}\n{}",
        producer.describe(),
        strait.log()
    );
    let acked = acked(&lines);
    assert_eq!(acked.len(), TOTAL, "{summary}");

    let log = consume_all(&b, &topic, TOTAL);
    check_acked_present("idempotent producer across a crash", &acked, &log);
    let values: BTreeSet<String> = (0..TOTAL).map(|i| format!("idem-{i}")).collect();
    let stored: BTreeSet<String> = log.values().cloned().collect();
    assert_eq!(stored, values, "stored values differ from produced ones");
    assert_eq!(log.len(), TOTAL, "a record is stored twice");
}

/// SIGTERM while an acks=all producer writes, under the default `interval`
/// durability: Strait finishes the requests in flight, syncs every
/// partition and exits 0 promptly; after a restart every acknowledged
/// record is there.
#[test]
fn sigterm_while_producing_keeps_every_acknowledged_record() {
    let mut strait = Strait::start(&[]);
    let b = strait.bootstrap();
    let topic = unique("sigterm");
    create_topic("ck_admin.py", &b, &topic, 4);
    let mut producer = spawn_acked_producer(
        &b,
        &topic,
        "term",
        &["--message-timeout", "3", "--value-size", "200"],
    );
    let started = producer.wait_for(Duration::from_secs(30), |l| {
        l.iter().any(|l| l.starts_with("ACKED "))
    });
    assert!(started, "no acknowledgement: {}", producer.describe());
    std::thread::sleep(Duration::from_millis(1200));
    let t = std::time::Instant::now();
    let status = strait.stop();
    let took = t.elapsed();
    assert!(
        status.success(),
        "strait exited {status} after SIGTERM under load\n{}",
        strait.log()
    );
    assert!(
        took < Duration::from_secs(5),
        "strait took {took:?} to stop under load\n{}",
        strait.log()
    );
    assert!(
        strait.log().contains("all partitions synced"),
        "no clean-shutdown line\n{}",
        strait.log()
    );
    if producer.wait(Duration::from_secs(30)).is_none() {
        producer.kill();
    }
    let acked = acked(&producer.lines());
    eprintln!(
        "producer: {} acknowledged before and during the shutdown",
        acked.len()
    );
    assert!(acked.len() >= 100, "{}", producer.describe());
    drop(producer);
    strait.restart();
    let log = consume_all(&b, &topic, acked.len());
    check_acked_present("after SIGTERM", &acked, &log);
}
