//! The partition-scaling benchmark (issue 7): how `strait serve` copes with
//! thousands of partitions, as Kafka brokers commonly hold.
//!
//! Run it with `scripts/bench-partitions [DIR]`. With `PARTITIONS_BENCH_TOPICS`
//! topics of 4 partitions each (default 1000: 4,000 partitions), it measures
//! in one run, against one data directory:
//!
//! 1. start on an empty data directory, until a Metadata request is answered;
//! 2. create every topic (CreateTopics, 100 topics a request);
//! 3. one record to every partition (Produce acks=1, 100 topics a request);
//! 4. open file descriptors and memory (RssAnon, RssFile) per partition;
//! 5. SIGTERM until the process exited;
//! 6. start after that clean shutdown, until Metadata lists every topic;
//! 7. one more record to every partition, then SIGKILL;
//! 8. start after the crash, until Metadata lists every topic and every
//!    partition answers a Fetch of its two records;
//! 9. SIGTERM again.
//!
//! Each figure is printed beside the target the issue set for it. Timings
//! are of a single run on a shared machine; the bench reports, it does not
//! fail on a missed target (it fails on wrong answers: a record missing, an
//! error code).

#[path = "../tests/support/mod.rs"]
mod support;

use std::fs;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, FetchRequest, FetchResponse, MetadataRequest,
    MetadataResponse, ProduceRequest, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use strait_batch::{build, BatchHeader};
use support::raw::Conn;

const PARTITIONS_PER_TOPIC: i32 = 4;
/// Topics per CreateTopics or Produce request.
const PER_REQUEST: usize = 100;

fn topic_name(i: usize) -> String {
    format!("scale-{i:05}")
}

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

struct Broker {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Broker {
    /// Starts `strait serve` and returns it with the time until a Metadata
    /// request listing at least `topics` topics was answered.
    fn start(data: &Path, log: &Path, topics: usize) -> (Broker, Duration) {
        let port = support::free_port();
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let started = Instant::now();
        let child = Command::new(support::strait_bin())
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(data)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawning strait");
        let mut broker = Broker {
            child,
            port,
            log: log.to_owned(),
        };
        let deadline = started + Duration::from_secs(300);
        loop {
            if let Ok(Some(status)) = broker.child.try_wait() {
                panic!(
                    "strait exited with {status} while starting; see {}",
                    broker.log.display()
                );
            }
            assert!(Instant::now() < deadline, "strait did not get ready in 300 s");
            if let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) {
                let mut c = Conn::from_stream(stream, "bench-ready");
                c.stream.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
                let md = broker.metadata(&mut c);
                if md.topics.len() >= topics {
                    return (broker, started.elapsed());
                }
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    fn conn(&self) -> Conn {
        let c = Conn::open(self.port, "bench");
        c.stream.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
        c
    }

    fn metadata(&self, c: &mut Conn) -> MetadataResponse {
        let req = MetadataRequest::default()
            .with_topics(None)
            .with_allow_auto_topic_creation(false);
        let (id, f) = c.frame(ApiKey::Metadata, 12, 12, &req);
        c.send_raw(&f);
        MetadataResponse::decode(&mut &c.read(ApiKey::Metadata, 12, id)[..], 12).unwrap()
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` and returns the time until the process exited.
    fn signal_and_wait(mut self, signal: &str) -> Duration {
        let t = Instant::now();
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        self.child.wait().unwrap();
        t.elapsed()
    }
}

fn create_all(b: &Broker, topics: usize) {
    let mut c = b.conn();
    let names: Vec<String> = (0..topics).map(topic_name).collect();
    for chunk in names.chunks(PER_REQUEST) {
        let req = CreateTopicsRequest::default()
            .with_timeout_ms(60_000)
            .with_topics(
                chunk
                    .iter()
                    .map(|t| {
                        CreatableTopic::default()
                            .with_name(name(t))
                            .with_num_partitions(PARTITIONS_PER_TOPIC)
                            .with_replication_factor(1)
                    })
                    .collect(),
            );
        let (id, f) = c.frame(ApiKey::CreateTopics, 5, 5, &req);
        c.send_raw(&f);
        let r = CreateTopicsResponse::decode(&mut &c.read(ApiKey::CreateTopics, 5, id)[..], 5).unwrap();
        for t in &r.topics {
            assert_eq!(t.error_code, 0, "creating {}: {:?}", t.name.0, t.error_message);
        }
    }
}

fn produce_all(b: &Broker, topics: usize, round: u8) {
    let mut c = b.conn();
    let names: Vec<String> = (0..topics).map(topic_name).collect();
    for chunk in names.chunks(PER_REQUEST) {
        let data = chunk
            .iter()
            .map(|t| {
                TopicProduceData::default()
                    .with_name(name(t))
                    .with_partition_data(
                        (0..PARTITIONS_PER_TOPIC)
                            .map(|p| {
                                let value = format!("{t}/{p}/{round}");
                                let batch = build::batch(1_700_000_000_000, &[value.as_bytes()]);
                                PartitionProduceData::default()
                                    .with_index(p)
                                    .with_records(Some(batch.into()))
                            })
                            .collect(),
                    )
            })
            .collect();
        let req = ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(60_000)
            .with_topic_data(data);
        let (id, f) = c.frame(ApiKey::Produce, 7, 7, &req);
        c.send_raw(&f);
        let r = ProduceResponse::decode(&mut &c.read(ApiKey::Produce, 7, id)[..], 7).unwrap();
        for t in &r.responses {
            for p in &t.partition_responses {
                assert_eq!(p.error_code, 0, "producing to {}/{}", t.name.0, p.index);
                assert_eq!(p.base_offset, i64::from(round), "{}/{}", t.name.0, p.index);
            }
        }
    }
}

/// Fetches every partition from offset 0 and checks it holds `records`
/// records.
fn check_all(b: &Broker, topics: usize, want: u64) {
    let mut c = b.conn();
    let names: Vec<String> = (0..topics).map(topic_name).collect();
    for chunk in names.chunks(PER_REQUEST) {
        let req = FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(50 << 20)
            .with_topics(
                chunk
                    .iter()
                    .map(|t| {
                        FetchTopic::default().with_topic(name(t)).with_partitions(
                            (0..PARTITIONS_PER_TOPIC)
                                .map(|p| {
                                    FetchPartition::default()
                                        .with_partition(p)
                                        .with_fetch_offset(0)
                                        .with_partition_max_bytes(1 << 20)
                                })
                                .collect(),
                        )
                    })
                    .collect(),
            );
        let (id, f) = c.frame(ApiKey::Fetch, 12, 12, &req);
        c.send_raw(&f);
        let r = FetchResponse::decode(&mut &c.read(ApiKey::Fetch, 12, id)[..], 12).unwrap();
        for t in &r.responses {
            for p in &t.partitions {
                assert_eq!(p.error_code, 0, "fetching {}/{}", t.topic.0, p.partition_index);
                let records = p.records.clone().unwrap_or_default();
                let mut at = 0;
                let mut n = 0;
                while at < records.len() {
                    let h = BatchHeader::parse(&records[at..]).unwrap();
                    n += h.record_count as u64;
                    at += h.size();
                }
                assert_eq!(n, want, "records in {}/{}", t.topic.0, p.partition_index);
            }
        }
    }
}

/// Open file descriptors, RssAnon and RssFile of a process.
fn resources(pid: u32) -> (usize, u64, u64) {
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    let bytes = |key| support::proc_status_bytes(pid, key).unwrap_or(0);
    (fds, bytes("RssAnon"), bytes("RssFile"))
}

fn row(what: &str, took: Duration, target: Duration) {
    let verdict = if took <= target { "met" } else { "MISSED" };
    println!(
        "{what:<46} {:>9.2} s   target < {:>4.1} s  {verdict}",
        took.as_secs_f64(),
        target.as_secs_f64()
    );
}

fn main() {
    let topics: usize = std::env::var("PARTITIONS_BENCH_TOPICS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let parent = std::env::args()
        .nth(1)
        .filter(|a| !a.starts_with('-'))
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let work = tempfile::Builder::new()
        .prefix("bench-partitions-")
        .tempdir_in(&parent)
        .expect("work directory");
    let data = work.path().join("data");
    let log = work.path().join("strait.log");
    let partitions = topics * PARTITIONS_PER_TOPIC as usize;
    println!(
        "{partitions} partitions ({topics} topics of {PARTITIONS_PER_TOPIC}), data in {}",
        data.display()
    );
    let secs = Duration::from_secs;

    let (b, ready) = Broker::start(&data, &log, 0);
    println!(
        "{:<46} {:>9.2} s",
        "start on an empty data directory",
        ready.as_secs_f64()
    );
    let (fds0, anon0, file0) = resources(b.pid());
    let t = Instant::now();
    create_all(&b, topics);
    row("create every partition", t.elapsed(), secs(5));
    let t = Instant::now();
    produce_all(&b, topics, 0);
    row("one record to every partition", t.elapsed(), secs(2));
    let (fds, anon, file) = resources(b.pid());
    let per = |now: u64, before: u64| now.saturating_sub(before) as f64 / partitions as f64 / 1024.0;
    println!(
        "per partition: {:.2} open files, {:.1} KiB RssAnon, {:.1} KiB RssFile  (process: {fds} fds, {} MiB anon, {} MiB file)",
        (fds - fds0) as f64 / partitions as f64,
        per(anon, anon0),
        per(file, file0),
        anon >> 20,
        file >> 20
    );
    row("SIGTERM until exit", b.signal_and_wait("TERM"), secs(3));

    let (b, ready) = Broker::start(&data, &log, topics);
    row("ready after a clean shutdown", ready, secs(3));
    check_all(&b, topics, 1);
    produce_all(&b, topics, 1);
    b.signal_and_wait("KILL");

    let (b, ready) = Broker::start(&data, &log, topics);
    check_all(&b, topics, 2);
    row("ready after SIGKILL", ready, secs(10));
    row("SIGTERM until exit", b.signal_and_wait("TERM"), secs(3));
    let data_bytes: u64 = walk(&data);
    println!("data directory: {} MiB on disk", data_bytes >> 20);
}

/// Bytes allocated on disk below `dir`.
fn walk(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let mut total = 0;
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            walk(&entry.path())
        } else {
            meta.blocks() * 512
        };
    }
    total
}
