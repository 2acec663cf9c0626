//! `strait serve` on a real full disk (issue 7): its data directory is a
//! small tmpfs, filled to the last page by a file the test removes again.
//! A full disk must heal by itself: writes are refused with retriable
//! errors while it is full, and work again once space is freed, without a
//! restart; a broker killed on a full disk starts and serves reads; a
//! CreateTopics that runs out of room leaves nothing behind.
//!
//! Mounting needs root (CI runs as root). Without it the tests fail and say
//! so rather than skipping.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, FetchRequest, FetchResponse, GroupId,
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, ProduceRequest,
    ProduceResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use strait_batch::{build, Batches};
use support::Strait;

/// The tests of this file run one at a time: a restart reuses its port,
/// which a test starting in parallel could take meanwhile.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const KAFKA_STORAGE_ERROR: i16 = 56;

/// A mounted tmpfs, unmounted (then its mount point removed) on drop.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(options: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("running mount");
        assert!(
            status.success(),
            "mounting a tmpfs ({options}) failed: this test needs root to create a small real file system"
        );
        Tmpfs(dir)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }

    /// Free inodes.
    fn free_inodes(&self) -> u64 {
        let out = Command::new("stat")
            .args(["-f", "-c", "%d"])
            .arg(self.path())
            .output()
            .expect("running stat");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("a free inode count")
    }

    /// Fills the file system to the last page; removing the returned file
    /// frees the space again.
    fn fill(&self) -> PathBuf {
        let path = self.path().join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let chunk = vec![0xAAu8; 64 << 10];
        loop {
            match file.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
                Err(e) => panic!("filling the disk: {e}"),
            }
        }
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.0.path()).status();
    }
}

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_string())
}

/// A raw Kafka connection, one request at a time.
struct Conn {
    stream: TcpStream,
    next_id: i32,
}

impl Conn {
    fn open(port: u16) -> Conn {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Conn { stream, next_id: 1 }
    }

    fn call<Q: Encodable, R: Decodable>(&mut self, api: ApiKey, v: i16, req: &Q) -> R {
        let id = self.next_id;
        self.next_id += 1;
        let mut buf = Vec::new();
        RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(v)
            .with_correlation_id(id)
            .with_client_id(Some(s("disk-full-test")))
            .encode(&mut buf, api.request_header_version(v))
            .unwrap();
        req.encode(&mut buf, v).unwrap();
        let mut frame = (buf.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(&buf);
        self.stream.write_all(&frame).expect("sending a request");
        let mut len = [0u8; 4];
        self.stream
            .read_exact(&mut len)
            .expect("reading a response length");
        let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut body).expect("reading a response");
        let mut cursor = &body[..];
        let header = ResponseHeader::decode(&mut cursor, api.response_header_version(v)).unwrap();
        assert_eq!(header.correlation_id, id, "{api:?} correlation id");
        R::decode(&mut cursor, v).unwrap_or_else(|e| panic!("{api:?} v{v} response: {e}"))
    }

    /// CreateTopics v5: (error code, message).
    fn create_topic(&mut self, name: &str, partitions: i32) -> (i16, String) {
        let req = CreateTopicsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(s(name)))
                .with_num_partitions(partitions)
                .with_replication_factor(1)]);
        let r: CreateTopicsResponse = self.call(ApiKey::CreateTopics, 5, &req);
        let t = &r.topics[0];
        (t.error_code, t.error_message.as_deref().unwrap_or("").to_string())
    }

    /// Produce v9 (acks=all) of one batch to partition 0: (error, base offset).
    fn produce(&mut self, topic: &str, batch: &[u8]) -> (i16, i64) {
        let req = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(s(topic)))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(batch.to_vec().into()))])]);
        let r: ProduceResponse = self.call(ApiKey::Produce, 9, &req);
        let p = &r.responses[0].partition_responses[0];
        (p.error_code, p.base_offset)
    }

    /// Every batch of partition 0 (Fetch v11 from offset 0), as (base
    /// offset, bytes).
    fn fetch_all(&mut self, topic: &str) -> Vec<(i64, Vec<u8>)> {
        let req = FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(64 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(s(topic)))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(64 << 20)])]);
        let r: FetchResponse = self.call(ApiKey::Fetch, 11, &req);
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "Fetch: {p:?}");
        let records = p.records.clone().unwrap_or_default();
        let batches: Vec<(i64, Vec<u8>)> = Batches::new(&records)
            .map(|item| {
                let (pos, h) = item.expect("fetched batches are valid");
                (h.base_offset, records[pos..pos + h.size()].to_vec())
            })
            .collect();
        let end = batches.last().map_or(0, |(_, b)| {
            let h = strait_batch::BatchHeader::parse(b).unwrap();
            h.last_offset() + 1
        });
        assert_eq!(end, p.high_watermark, "one fetch reads the whole partition");
        batches
    }

    /// OffsetCommit v7 of partition 0 by a standalone consumer: the error.
    fn commit(&mut self, group: &str, topic: &str, offset: i64, metadata: &str) -> i16 {
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id_or_member_epoch(-1)
            .with_member_id(s(""))
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName(s(topic)))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(offset)
                    .with_committed_leader_epoch(-1)
                    .with_committed_metadata(Some(s(metadata)))])]);
        let r: OffsetCommitResponse = self.call(ApiKey::OffsetCommit, 7, &req);
        r.topics[0].partitions[0].error_code
    }

    /// OffsetFetch v5 of partition 0: the committed offset (-1: none).
    fn committed(&mut self, group: &str, topic: &str) -> i64 {
        let req = OffsetFetchRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(TopicName(s(topic)))
                .with_partition_indexes(vec![0])]));
        let r: OffsetFetchResponse = self.call(ApiKey::OffsetFetch, 5, &req);
        assert_eq!(r.error_code, 0, "OffsetFetch: {r:?}");
        let p = &r.topics[0].partitions[0];
        assert_eq!(p.error_code, 0, "OffsetFetch: {p:?}");
        p.committed_offset
    }
}

/// A batch of exactly `size` bytes (one record of `tag` bytes).
fn batch_sized(tag: u8, size: usize) -> Vec<u8> {
    for len in (size.saturating_sub(100)..size).rev() {
        let b = build::batch(1_000, &[&vec![tag; len]]);
        if b.len() == size {
            return b;
        }
    }
    panic!("no batch of {size} bytes");
}

/// `batch` as stored at `offset`.
fn stamped(batch: &[u8], offset: i64) -> Vec<u8> {
    let mut out = batch.to_vec();
    strait_batch::stamp(&mut out, offset, 0);
    out
}

/// Bytes of batches in the consumer-offsets log.
fn offsets_log_bytes(data: &Path) -> u64 {
    let report = strait_spool::verify::verify_partition(&data.join("groups")).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    report.bytes
}

#[test]
fn offset_commits_and_produces_work_again_once_space_returns_without_a_restart() {
    let _serial = serial();
    let fs = Tmpfs::mount("size=2m");
    let data = fs.path().join("data");
    let strait = Strait::start_on(&data, &[]);
    let mut c = Conn::open(strait.port());
    assert_eq!(c.create_topic("t", 1).0, 0);
    let first = batch_sized(1, 1000);
    assert_eq!(c.produce("t", &first), (0, 0));

    // Make the offsets log end exactly on a page boundary: the next commit
    // then cannot write a single byte on the full disk (the case that used
    // to fail the log until a restart).
    assert_eq!(c.commit("g", "t", 1, &"m".repeat(100)), 0);
    let one = offsets_log_bytes(&data) as usize;
    let pad = 100 + 4096 - 2 * one;
    assert_eq!(c.commit("g", "t", 2, &"m".repeat(pad)), 0);
    assert_eq!(offsets_log_bytes(&data), 4096);

    let filler = fs.fill();
    for attempt in 0..3 {
        assert_eq!(
            c.commit("g", "t", 3, "full"),
            COORDINATOR_NOT_AVAILABLE,
            "commit {attempt} on the full disk"
        );
        // Runs past the page the log has into one the disk cannot give.
        assert_eq!(
            c.produce("t", &batch_sized(2, 4000)).0,
            KAFKA_STORAGE_ERROR,
            "produce {attempt} on the full disk"
        );
    }
    assert_eq!(c.committed("g", "t"), 2);
    assert_eq!(c.fetch_all("t"), vec![(0, stamped(&first, 0))]);

    // Space returns: commits and produces work again, same process.
    std::fs::remove_file(&filler).unwrap();
    assert_eq!(c.commit("g", "t", 4, "back"), 0);
    assert_eq!(c.committed("g", "t"), 4);
    let second = batch_sized(3, 300);
    assert_eq!(c.produce("t", &second), (0, 1));
    assert_eq!(
        c.fetch_all("t"),
        vec![(0, stamped(&first, 0)), (1, stamped(&second, 1))]
    );
    assert!(!strait.log().contains("must be reopened"), "{}", strait.log());
}

#[test]
fn a_broker_killed_on_a_full_disk_starts_serves_reads_and_takes_writes_once_space_returns() {
    let _serial = serial();
    let fs = Tmpfs::mount("size=2m");
    let data = fs.path().join("data");
    let mut strait = Strait::start_on(&data, &[]);
    let mut c = Conn::open(strait.port());
    assert_eq!(c.create_topic("t", 1).0, 0);
    // Two batches of a page each: the log ends on a page boundary, so
    // recovery's look past the last batch lands in a hole.
    let batches = [batch_sized(1, 4096), batch_sized(2, 4096)];
    assert_eq!(c.produce("t", &batches[0]), (0, 0));
    assert_eq!(c.produce("t", &batches[1]), (0, 1));
    assert_eq!(c.commit("g", "t", 2, ""), 0);
    let mut expected: Vec<(i64, Vec<u8>)> = vec![(0, stamped(&batches[0], 0)), (1, stamped(&batches[1], 1))];

    // SIGKILL before any recovery point was written: the restart has to
    // write one for every partition, on a full disk.
    strait.kill();
    for dir in [data.join("topics/t-0"), data.join("groups")] {
        let _ = std::fs::remove_file(dir.join("recovery-point"));
    }
    let filler = fs.fill();
    strait.restart();
    let mut c = Conn::open(strait.port());
    assert_eq!(c.fetch_all("t"), expected);
    assert_eq!(c.committed("g", "t"), 2);
    assert_eq!(c.produce("t", &batch_sized(3, 300)).0, KAFKA_STORAGE_ERROR);
    // Longer than the rest of the offsets log's last page.
    assert_eq!(
        c.commit("g", "t", 3, &"m".repeat(4000)),
        COORDINATOR_NOT_AVAILABLE
    );

    // The verifier reads the full disk's partitions without a fault.
    support::verify_spool(&data);

    // Space returns: writes are taken again, without a restart.
    std::fs::remove_file(&filler).unwrap();
    let third = batch_sized(3, 300);
    assert_eq!(c.produce("t", &third), (0, 2));
    expected.push((2, stamped(&third, 2)));
    assert_eq!(c.fetch_all("t"), expected);
    assert_eq!(c.commit("g", "t", 3, ""), 0);
    assert_eq!(c.committed("g", "t"), 3);
}

#[test]
fn a_create_topics_that_runs_out_of_room_leaves_nothing_behind() {
    let _serial = serial();
    let fs = Tmpfs::mount("size=4m,nr_inodes=200");
    let data = fs.path().join("data");
    let mut strait = Strait::start_on(&data, &[]);
    let mut c = Conn::open(strait.port());
    let free = fs.free_inodes();
    // Four inodes a partition (directory, log, two indexes): 100 do not fit.
    let (code, message) = c.create_topic("big", 100);
    assert_eq!(code, KAFKA_STORAGE_ERROR, "{message}");
    assert!(message.contains("no space left"), "{message}");
    let mut left: Vec<String> = std::fs::read_dir(data.join("topics"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert!(left.is_empty(), "a failed create left {left:?}");
    assert_eq!(fs.free_inodes(), free, "every inode of the failed create is back");
    assert_eq!(
        c.produce("big", &batch_sized(1, 300)).0,
        UNKNOWN_TOPIC_OR_PARTITION
    );

    // The room it took is back: a smaller create works, same process.
    assert_eq!(c.create_topic("small", 3).0, 0);
    let b = batch_sized(1, 300);
    assert_eq!(c.produce("small", &b), (0, 0));

    // Partition directories no topic names (a create interrupted by a
    // crash) are removed at start, and the log says so.
    strait.kill();
    for stray in ["big-0", "big-1", "small-3"] {
        let dir = data.join("topics").join(stray);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("00000000000000000000.log"), b"").unwrap();
    }
    strait.restart();
    let mut left: Vec<String> = std::fs::read_dir(data.join("topics"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["small-0", "small-1", "small-2", "small.topic"]);
    assert!(
        strait
            .log_line(&["big", "removed partition directories", "does not exist"])
            .is_some(),
        "{}",
        strait.log()
    );
    let mut c = Conn::open(strait.port());
    assert_eq!(c.fetch_all("small"), vec![(0, stamped(&b, 0))]);
}

#[test]
fn a_create_topics_that_runs_out_of_file_descriptors_leaves_nothing_behind() {
    let _serial = serial();
    let fs = Tmpfs::mount("size=4m");
    let data = fs.path().join("data");
    let strait = Strait::start_on(&data, &[]);
    let mut c = Conn::open(strait.port());
    // Three open files a partition: 200 partitions need more than 256.
    let pid = strait.pid().expect("strait runs").to_string();
    let status = Command::new("prlimit")
        .args(["--pid", &pid, "--nofile=256:256"])
        .status()
        .expect("running prlimit");
    assert!(status.success(), "prlimit --pid {pid} failed");
    let (code, message) = c.create_topic("many", 200);
    assert_eq!(code, KAFKA_STORAGE_ERROR, "{message}");
    assert!(message.contains("Too many open files"), "{message}");
    let left: Vec<String> = std::fs::read_dir(data.join("topics"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        left.is_empty(),
        "a failed create left {} entries: {left:?}",
        left.len()
    );
    assert_eq!(
        c.produce("many", &batch_sized(1, 300)).0,
        UNKNOWN_TOPIC_OR_PARTITION
    );
    // The descriptors are back: a smaller create works.
    assert_eq!(c.create_topic("few", 20).0, 0);
    let b = batch_sized(1, 300);
    assert_eq!(c.produce("few", &b), (0, 0));
    assert_eq!(c.fetch_all("few"), vec![(0, stamped(&b, 0))]);
}
