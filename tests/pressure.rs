//! `strait serve` under pressure (issue 7): clients that stop reading their
//! responses must not make the broker hold memory, nor slow down the
//! clients that behave.

mod support;

use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, FetchRequest};
use strait_batch::{build, BatchHeader};
use support::{create_topic, get_u64, raw, run_client, unique, Strait};

/// Bytes of records in the big topic: more than one Fetch response may
/// carry (`broker.fetch_max_bytes` is 55 MiB).
const BIG_BYTES: usize = 80 << 20;
/// Values of 16 KiB, 63 to a batch (just under 1 MiB, the largest batch).
const VALUE_BYTES: usize = 16 << 10;
const PER_BATCH: usize = 63;
const STALLED: usize = 20;
/// The documented bound: anonymous memory of the broker with 20 stalled
/// 100 MiB fetches outstanding (before issue 7: 2.04 GB).
const RSS_ANON_BOUND: u64 = 64 << 20;

/// A consumer's Fetch of partition 0 from `offset`, no waiting, limits
/// (total and partition) of `max_bytes`.
fn fetch_request(topic: &str, offset: i64, max_bytes: i32) -> FetchRequest {
    raw::fetch_request(topic, offset, 0, 1, max_bytes, max_bytes)
}

/// `RssAnon` of a process, in bytes.
fn rss_anon(pid: u32) -> u64 {
    support::proc_status_bytes(pid, "RssAnon").expect("RssAnon in /proc/PID/status")
}

/// A connection whose receive buffer is 4 KiB, as a client that stopped
/// reading would leave it.
fn tiny_receive_buffer(port: u16) -> TcpStream {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let stream = runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        socket.connect(([127, 0, 0, 1], port).into()).await.unwrap()
    });
    let stream = stream.into_std().unwrap();
    stream.set_nonblocking(false).unwrap();
    stream
}

/// Fills partition 0 of `topic` with `BIG_BYTES` of records, returning the
/// record count.
fn fill(c: &mut raw::Conn, topic: &str) -> u64 {
    let value = vec![b'v'; VALUE_BYTES];
    let values: Vec<&[u8]> = vec![&value[..]; PER_BATCH];
    let batch = build::batch(1_700_000_000_000, &values);
    let batches = BIG_BYTES.div_ceil(batch.len());
    for _ in 0..batches {
        assert_eq!(c.produce(topic, 0, &batch, 30_000).0, 0, "filling {topic}");
    }
    (batches * PER_BATCH) as u64
}

/// Twenty clients ask for 100 MiB each and never read: the broker caps each
/// response at `fetch_max_bytes`, writes it from the spool's mapped
/// segments (its anonymous memory stays within tens of MiB, where it once
/// reached 2 GB), producers and consumers beside them keep working, and
/// the stalled connections are closed after `idle_timeout`.
#[test]
fn stalled_fetches_hold_no_memory_and_others_keep_working() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("strait.yaml");
    std::fs::write(&config, "server:\n  idle_timeout: 20s\n").unwrap();
    let strait = Strait::start(&["--config", config.to_str().unwrap()]);
    let b = strait.bootstrap();
    let pid = strait.pid().unwrap();
    let big = unique("big");
    create_topic("ck_admin.py", &b, &big, 1);
    let mut c = raw::Conn::open(strait.port(), "filler");
    let records = fill(&mut c, &big);

    // One whole 100 MiB fetch: capped at 55 MiB (plus at most one batch).
    let r = c.fetch(&fetch_request(&big, 0, 100 << 20));
    let got = r.responses[0].partitions[0].records.clone().unwrap();
    assert!(
        (50 << 20..=56 << 20).contains(&got.len()),
        "a fetch of 100 MiB returned {} bytes, not about fetch_max_bytes (55 MiB)",
        got.len()
    );
    let mut at = 0;
    while at < got.len() {
        let h = BatchHeader::parse(&got[at..]).expect("whole batches");
        at += h.size();
    }
    assert_eq!(at, got.len(), "the response ends on a batch boundary");
    let before = rss_anon(pid);

    // Twenty stalled fetches of 100 MiB.
    let mut stalled = Vec::new();
    for i in 0..STALLED {
        let stream = tiny_receive_buffer(strait.port());
        let mut conn = raw::Conn::from_stream(stream, &format!("stalled-{i}"));
        let (_, f) = conn.frame(ApiKey::Fetch, 12, 12, &fetch_request(&big, 0, 100 << 20));
        conn.send_raw(&f);
        stalled.push(conn);
    }
    thread::sleep(Duration::from_secs(2));
    let stalled_anon = rss_anon(pid);

    // Producers and consumers beside them.
    let busy = unique("busy");
    create_topic("ck_admin.py", &b, &busy, 4);
    let produced = run_client(
        "ck_produce.py",
        &[
            "--bootstrap",
            &b,
            "--topic",
            &busy,
            "--count",
            "20000",
            "--value-size",
            "1000",
            "--keyed",
        ],
    );
    assert_eq!(get_u64(&produced, "delivered"), 20_000, "{produced}");
    let consumed = run_client(
        "ck_consume.py",
        &[
            "--bootstrap",
            &b,
            "--topic",
            &busy,
            "--assign",
            "--expect",
            "20000",
        ],
    );
    assert_eq!(get_u64(&consumed, "records"), 20_000, "{consumed}");
    assert_eq!(
        consumed["values_sha"], produced["values_sha"],
        "consumed values differ"
    );
    // And the big topic read whole by a well-behaved reader.
    let mut reader = raw::Conn::open(strait.port(), "reader");
    let (mut offset, mut seen) = (0i64, 0u64);
    while (seen as i64) < records as i64 {
        let r = reader.fetch(&fetch_request(&big, offset, 8 << 20));
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 0);
        let got = p.records.clone().unwrap_or_default();
        assert!(!got.is_empty(), "no records at offset {offset} of {records}");
        let mut at = 0;
        while at < got.len() {
            let h = BatchHeader::parse(&got[at..]).unwrap();
            assert_eq!(h.base_offset, offset, "batches are contiguous");
            offset += h.offset_count() as i64;
            seen += h.record_count as u64;
            at += h.size();
        }
    }
    assert_eq!(seen, records);
    let busy_anon = rss_anon(pid);
    eprintln!(
        "beside {STALLED} stalled fetches: 20,000 records of 1 kB produced in {} s, consumed in {} s",
        produced["elapsed_s"], consumed["elapsed_s"]
    );
    eprintln!(
        "RssAnon: {} MiB before the stalled fetches, {} MiB with {STALLED} stalled, {} MiB with clients beside them",
        before >> 20,
        stalled_anon >> 20,
        busy_anon >> 20
    );
    for (what, anon) in [
        ("with the stalled fetches", stalled_anon),
        ("with clients beside them", busy_anon),
    ] {
        assert!(
            anon <= RSS_ANON_BOUND,
            "the broker's anonymous memory {what} is {} MiB, over the {} MiB bound",
            anon >> 20,
            RSS_ANON_BOUND >> 20
        );
    }

    // The stalled connections are closed once idle_timeout passes without
    // the client taking a byte.
    let deadline = Instant::now() + Duration::from_secs(60);
    let line = loop {
        // (log_line waits up to 10 s itself.)
        let line = strait.log_line(&["read none of a", "idle_timeout"]);
        if line.is_some() || Instant::now() >= deadline {
            break line;
        }
    };
    let line = line.expect("a stalled connection closed after idle_timeout, with a log line");
    assert!(line.contains("stalled-"), "the log line names the client: {line}");
    drop(stalled);
}

/// Kills a child process on drop.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A broker still opening its partitions refuses connections rather than
/// accepting ones it cannot answer yet: during a start with 2,000
/// partitions, the first connection the kernel accepts finds the broker's
/// "ready" line already logged, and is answered.
#[test]
fn connections_are_accepted_only_once_the_broker_can_answer() {
    let mut strait = Strait::start(&[]);
    create_topic("ck_admin.py", &strait.bootstrap(), &unique("many"), 2000);
    let (data, port) = (strait.data_dir(), strait.port());
    assert!(strait.stop().success());
    let log = tempfile::NamedTempFile::new().unwrap();
    let child = std::process::Command::new(support::strait_bin())
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(&data)
        .stdout(log.reopen().unwrap())
        .stderr(log.reopen().unwrap())
        .spawn()
        .expect("starting strait");
    let _child = Killed(child);
    let logged = || std::fs::read_to_string(log.path()).unwrap_or_default();
    let started = Instant::now();
    let mut refused = 0;
    let stream = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(stream) => break stream,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => refused += 1,
            Err(e) => panic!("connecting: {e}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not ready within 60 s\n{}",
            logged()
        );
        thread::sleep(Duration::from_millis(1));
    };
    assert!(
        logged().contains("Strait is ready"),
        "a connection was accepted {:?} into the start, before the broker was ready:\n{}",
        started.elapsed(),
        logged()
    );
    let mut c = raw::Conn::from_stream(stream, "first-in");
    assert_eq!(c.api_versions(3).error_code, 0);
    eprintln!(
        "accepted {:?} after the start, {refused} connections refused before",
        started.elapsed()
    );
}
