//! The mirror benchmark: `strait mirror` against MirrorMaker 2, a plain
//! librdkafka consume-then-produce mirror and the limit of what can be read
//! from the source, Apache Kafka to Apache Kafka, on the same data in the
//! same run: on loopback, with sources written in small batches (the Java
//! client's defaults) and in large ones; then over emulated WAN links (the
//! matrix of issue 22: 50 ms x 50 MB/s and 100 ms x 100 MB/s, each with 1
//! partition and with 16, uncompressed and lz4), with the replication
//! latency at a fixed rate over each link.
//!
//! Run it with `scripts/bench-mirror [DIR]`, which installs the peers,
//! builds Strait and calls `cargo bench --bench mirror -- WORKDIR`.
//!
//! **Brokers.** Source and target are each a single Apache Kafka 4.1.1 node
//! (combined broker and controller, KRaft) started here from the jars
//! `scripts/peers` put in `.peers/kafka/libs`, with `kafka-server-start.sh`'s
//! JVM settings (1 GB heap, G1) and a fresh directory under the work
//! directory. Then, unless `MIRROR_BENCH_BROKERS` leaves `strait` out, the
//! same cases run again between two `strait serve` (MirrorMaker 2 left out
//! there): the figures this bench printed before Kafka was the reference.
//!
//! **The data.** `MIRROR_BENCH_RECORDS` records of 1 KiB (no key) spread
//! round-robin over the partitions of each source topic, produced by
//! librdkafka (the `rdkafka` crate) with acks=all and idempotence. The LAN
//! cases' topics have 16 partitions and lz4, one per batch size:
//!
//! - *small* (`mirror-bench-small`): linger.ms=0 and batch.size
//!   `MIRROR_BENCH_SMALL_BATCH_BYTES` (16384), the Java producer's classic
//!   defaults (5 requests in flight, as Java's): about 15 records a batch,
//!   what most applications write;
//! - *large* (`mirror-bench-large`): linger.ms=5 and batch.size
//!   `MIRROR_BENCH_BATCH_BYTES` (1000000, librdkafka's default).
//!
//! The WAN cases' topics are written in large batches, one per partition
//! count of `MIRROR_BENCH_WAN_PARTITIONS` (default `1,16`) and compression
//! of `MIRROR_BENCH_WAN_COMPRESSION` (default `none,lz4`):
//! `mirror-bench-large-p1-none` and so on (16 partitions with lz4 is
//! `mirror-bench-large`). MirrorMaker 2's and the librdkafka mirror's
//! producers compress as the source was, so every target holds what Strait's
//! mirror, passing batches through, holds.
//!
//! Each value is 512 bytes that no codec shrinks and 512 bytes of text that
//! repeats across records: about 2:1 under lz4, so that what crosses the WAN
//! is neither the raw size nor next to nothing. MB are 10^6 bytes of record
//! values; "batch MB" are 10^6 bytes of the record batches as stored on the
//! source (compressed or not), which is what crosses the link.
//!
//! **What runs, per case** (LAN small or large batches; per WAN link, each
//! partition count and compression), in the order of `MIRROR_BENCH_PEERS`
//! (default `strait,mm2,rdkafka`), rotated by one from each case to the next
//! (on a busy machine the first run of a case was seen to cost the target
//! more, whichever mirror it was):
//!
//! - *Fetch limit* (over the WAN: *bare fetch*): the whole topic read as
//!   fast as Strait's own upstream client (`strait-upstream`: `Cluster`,
//!   `Connection::request`) reads it: one connection,
//!   `MIRROR_BENCH_LIMIT_IN_FLIGHT` (default 4) Fetch requests in flight,
//!   each for its share of the partitions (so as many as there are
//!   partitions at most: one for a topic of one), with fixed fetch sizes
//!   (the mirror's before it sized its fetches from the link: 1 MiB per
//!   partition, 64 MiB per answer; read_committed); only batch headers are
//!   read. After one unmeasured
//!   pass the topic is read again until a second has passed; the figure is
//!   per pass. On loopback no mirror can go faster. Over the WAN it reads
//!   through the source's relay (it fails unless the relay carried at least
//!   the bytes it read) and is what a plain client gets across the link,
//!   not a bound: its one connection is held to the relay's window (6 MiB a
//!   round trip: 63 MB/s at 100 ms), and a partition's next fetch waits for
//!   the answer before (1 MiB a round trip for a topic of one partition),
//!   where Strait's mirror spreads its fetches over several connections and
//!   fetches ahead within a partition.
//! - *Strait's mirror*: `strait mirror --config FILE` copying the topic to
//!   the target (default settings).
//! - *MirrorMaker 2*: `org.apache.kafka.connect.mirror.MirrorMaker` (Kafka
//!   4.1.1, dedicated mode) with `connect-mirror-maker.sh`'s JVM settings
//!   (-Xms256M -Xmx2G, G1), `tasks.max` `MIRROR_BENCH_MM2_TASKS` (4),
//!   heartbeats, checkpoints, offset syncs and config/ACL syncing off (it
//!   only copies), the source consumer with the fetch limit's fetch
//!   settings and the producer re-batching with the source's compression,
//!   linger.ms=5 and batch.size 1000000 (Connect keeps its one request in
//!   flight per task);
//!   `MIRROR_BENCH_MM2_OPTIONS` adds or overrides properties. The target
//!   topic is `mm2-CASE.TOPIC` (the source's cluster alias, default
//!   replication policy).
//! - *librdkafka mirror*: this binary re-run as a child process
//!   (`child-rdkafka-mirror`): a BaseConsumer assigned all the partitions
//!   from the beginning (no group joined; the fetch limit's fetch settings:
//!   fetch.max.bytes 64 MiB, 1 MiB per partition, fetch.wait.max.ms 500,
//!   queued.max.messages.kbytes 64 MiB like the mirror's
//!   max_bytes_in_flight, read_committed), each record handed to a
//!   BaseProducer (the source's compression, acks=all, idempotent,
//!   linger.ms=5, batch.size
//!   `MIRROR_BENCH_BATCH_BYTES`, whatever the source's batches) with the
//!   same partition, key, value, headers and CreateTime, into a target topic
//!   created beforehand.
//!
//! Every mirror writes into a target topic created beforehand (the
//! source's partitions, leaders elected), so that none pays for topic
//! creation, and is timed from its process start until the target's
//! ListOffsets (latest; polled every 50 ms until the first record, then
//! every 200 ms, more often as the end nears, down to every 10 ms) add up
//! to every record. Over the WAN each run also says how many bytes the
//! source's relay carried to this side meanwhile (at least the source's
//! batches: the mirror read across the link). CPU seconds come from
//! /proc/PID/stat: the mirror's process, and the TARGET broker's, read
//! before the start, when the first record shows on the target, when half
//! of them are there and at the end. MB/s and CPU seconds per GB are those of the *copy* (from the
//! first record on the target to the last), which is what a mirror that
//! runs for months costs; the start-up before the first record
//! (MirrorMaker 2's JVM and Connect's group take seconds, Strait's tens of
//! milliseconds) is printed beside, and so is the copy's second half (a
//! JVM's compilation of its hot paths mostly behind it). Afterwards the
//! target topic is read once to count the batches the mirror wrote: passed
//! through, they are the source's; re-batched, the mirror producer's.
//!
//! The target broker's figure is made to be the mirror's doing: before
//! anything is measured the target is warmed up (half the records, at least
//! 20,000, of each batch size and compression of the sources produced into
//! scratch topics, so that its JVM has compiled the produce path before the
//! first mirror; the group coordinators created on both brokers); each run starts once both brokers
//! are quiet (CPU at most 0.1 core above idle over 300 ms, at most 15 s);
//! the target's CPU is counted until it is quiet again after the last record
//! (the garbage collection a run leaves behind is that run's), less its
//! baseline over that time: its idle CPU and, per ListOffsets the bench
//! sent, what a poll costs it (both measured once after the warm-up; a
//! Kafka broker spends 1.5 to 4 ms of CPU on each poll that comes alone).
//! On a shared machine the figures still move by tens of percent from run
//! to run; compare the ratios of one run.
//!
//! **WAN** (skipped, saying so, when network namespaces cannot be made):
//! each source broker is restarted on its data inside a network namespace
//! (`MIRROR_BENCH_NETNS`) behind a veth pair whose two ends are limited by
//! `tc qdisc tbf` (netem is not in this kernel), and reached from the
//! target's side through the tests' delay relay (`tests/support/relay.rs`),
//! which adds half the round trip each way and holds each connection to a
//! window of `MIRROR_BENCH_WAN_WINDOW` bytes each way (default 6 MiB,
//! Linux's default largest receive buffer; 0: none). A source listens on
//! the same port inside the namespace as its relay does outside and
//! advertises `127.0.0.1:PORT`, so clients in the source's datacenter reach
//! it directly and clients in the target's (the mirrors, as MirrorMaker
//! deployments run) cross the link. Kafka runs there as
//! `ip netns exec NS java ... kafka.Kafka`, its controller on the
//! namespace's own loopback. The links are `MIRROR_BENCH_WAN_LINKS`
//! (default `50ms:50MB,100ms:100MB`: the added round trip, and MB/s each
//! way, applied as tbf's rate: 1 MB/s = 8 Mbit/s); between links the tbf
//! of both ends is replaced and the relay's delay changed, and every run
//! (each mirror a process of its own, the bare fetch a client of its own)
//! opens its connections after that. The link's rate counts frames, so
//! record batches fill about 0.95 of it at most (a 1448-byte TCP segment
//! in a 1514-byte frame), less the Kafka protocol's share.
//!
//! Per link, the cases run (every partition count with every compression),
//! then, for the first pair, the latency runs: for each mirror of
//! `MIRROR_BENCH_LATENCY_PEERS` (default `strait,mm2`; those of
//! `MIRROR_BENCH_PEERS` only), a fresh 16-partition source topic and its
//! target topic created beforehand; a producer in the source's namespace
//! (`child-rate-producer`, lz4, linger.ms=5) writes a probe record into
//! each partition, and once a librdkafka consumer beside the target has
//! read every probe (the mirror runs every partition, the consumer fetches
//! from each, the producer has its id and connection; MirrorMaker 2 takes
//! seconds to start), the producer writes `MIRROR_BENCH_LATENCY_RATE`
//! records a second for `MIRROR_BENCH_LATENCY_WARMUP` seconds (default 2,
//! left out of the figures: the load starting after idle, whose worst
//! latencies per 100 ms are printed beside) and `MIRROR_BENCH_LATENCY_SECS`
//! more, which the consumer reads: latency is the time a record is read there minus its
//! timestamp, which the source topic sets when it appends the record
//! (`message.timestamp.type=LogAppendTime`; every mirror keeps it), so
//! the producer's linger and produce are not counted. Beside it, the
//! Strait mirror's own `strait_mirror_replication_latency_seconds`
//! histogram.
//!
//! **Report.** The bench reports; it fails only on wrong answers (a
//! partition short of records). Every figure is printed beside the goal the
//! issue set for it, as a ratio of two figures of the same run. On
//! loopback: Strait's mirror at least 3 x MirrorMaker 2's MB per mirror CPU
//! second, at least its MB/s, a target broker cost per GB no higher than
//! under MirrorMaker 2, and at least 0.8 x the fetch limit. Over the WAN
//! (issue 22), a table per link: a row per partition count and
//! compression, each peer's batch MB/s and its ratio to the link's
//! bandwidth (and the CPU ratios against MirrorMaker 2); then per case:
//! Strait's mirror at least 0.9 x the link and ahead of MirrorMaker 2 and
//! of the librdkafka mirror (MB/s); and per link the replication latency's
//! p99 at most the round trip + 50 ms.
//!
//! Environment (see `scripts/bench-mirror`): `MIRROR_BENCH_RECORDS`,
//! `MIRROR_BENCH_BATCHES`, `MIRROR_BENCH_PEERS`, `MIRROR_BENCH_BROKERS`,
//! `MIRROR_BENCH_BATCH_BYTES`, `MIRROR_BENCH_SMALL_BATCH_BYTES`,
//! `MIRROR_BENCH_MM2_TASKS`, `MIRROR_BENCH_MM2_OPTIONS`,
//! `MIRROR_BENCH_KAFKA_HEAP`, `MIRROR_BENCH_LAN`, `MIRROR_BENCH_WAN`,
//! `MIRROR_BENCH_WAN_LINKS`, `MIRROR_BENCH_WAN_PARTITIONS`,
//! `MIRROR_BENCH_WAN_COMPRESSION`, `MIRROR_BENCH_WAN_WINDOW`,
//! `MIRROR_BENCH_LATENCY_RATE`, `MIRROR_BENCH_LATENCY_SECS`, `MIRROR_BENCH_LATENCY_WARMUP`,
//! `MIRROR_BENCH_LATENCY_PEERS`, `MIRROR_BENCH_LIMIT_IN_FLIGHT`,
//! `MIRROR_BENCH_POLL_MS`, `MIRROR_BENCH_WARM_BYTES`, `MIRROR_BENCH_CLUSTER_OPTIONS`,
//! `MIRROR_BENCH_MIRROR_OPTIONS`,
//! `MIRROR_BENCH_NETNS` (the sources' namespace; default
//! `strait-mb-PID`), `STRAIT_BIN`.

// The integration tests' harness: free ports, the broker readiness check,
// Kafka's classpath and the delay relay (the rest of it is unused here).
#[path = "../tests/support/mod.rs"]
mod support;

use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, ListOffsetsRequest, ListOffsetsResponse, RequestHeader, ResponseHeader,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use strait_batch::{BatchHeader, HEADER_LEN};
use strait_upstream::{Cluster, ClusterOptions, ConnectOptions, Connection};
use support::relay::Relay;

type Res<T> = Result<T, String>;

/// The source topics are `TOPIC_PREFIX-` and their [`Spec::name`].
const TOPIC_PREFIX: &str = "mirror-bench";
/// The latency runs' source topics start so.
const LATENCY_TOPIC: &str = "mirror-bench-latency";
/// Partitions of the LAN cases' topics, of the latency runs' and of the
/// scratch topics.
const PARTITIONS: i32 = 16;
/// Size of every record value.
const RECORD_BYTES: usize = 1024;
/// Bytes of each value that no codec shrinks; the rest is repeated text.
const RANDOM_BYTES: usize = 512;
/// linger.ms of the large-batch producers (the source's, the librdkafka
/// mirror's, the latency run's).
const LARGE_LINGER_MS: u32 = 5;
/// The mirror's fetch settings before it sized its fetches from the link
/// (mirror/src/partition.rs, grouped.rs): the fetch limit, the librdkafka
/// mirror and MirrorMaker 2 use them.
const FETCH_PARTITION_BYTES: i32 = 1 << 20;
const FETCH_MAX_BYTES: i32 = 64 << 20;
const FETCH_MAX_WAIT_MS: i32 = 500;
/// The mirror's default `max_bytes_in_flight` (the librdkafka mirror
/// queues as much).
const MIRROR_BUDGET_BYTES: u64 = strait_config::mirror::DEFAULT_MAX_BYTES_IN_FLIGHT.0;
/// Fetch requests in flight in the fetch limit by default (the partitions
/// are split between them).
const LIMIT_IN_FLIGHT: u64 = 4;
/// The fetch limit reads the topic again until this much time has passed.
const LIMIT_MIN_TIME: Duration = Duration::from_secs(1);
/// A phase with no progress for this long is given up.
const STALL: Duration = Duration::from_secs(60);
/// How long a `strait serve` may take to answer ApiVersions after it was
/// spawned.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a Kafka node may take to list itself in its metadata (a JVM
/// start and log loading, on a busy two-core machine).
const KAFKA_START_TIMEOUT: Duration = Duration::from_secs(150);
/// How often the target's offsets are polled while a mirror runs: every
/// [`POLL_START`] until the first record, then every `MIRROR_BENCH_POLL_MS`
/// (this by default) at most, and more often as the end nears: a quarter of
/// the time the copy's rate so far leaves, down to [`POLL_END`]. Each ListOffsets costs a Kafka broker 1.5 to 4 ms of CPU
/// when they come one at a time, which a poll every 10 ms would make a good
/// part of what the target spends on a slow mirror.
const POLL_MS: u64 = 200;
const POLL_END: Duration = Duration::from_millis(10);
const POLL_START: Duration = Duration::from_millis(50);
/// How long [`settle`] waits at most for a broker to go quiet.
const SETTLE_MAX: Duration = Duration::from_secs(15);
/// A broker is quiet when it uses at most its idle CPU plus this many
/// cores over [`SETTLE_WINDOW`].
const SETTLE_MARGIN: f64 = 0.1;
const SETTLE_WINDOW: Duration = Duration::from_millis(300);
/// `kafka-run-class.sh`'s JVM performance options (Kafka 4.1.1), used for
/// the brokers and MirrorMaker 2 alike.
const KAFKA_JVM_OPTS: &[&str] = &[
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
];
/// `connect-mirror-maker.sh`'s heap.
const MM2_HEAP: &[&str] = &["-Xms256M", "-Xmx2G"];
/// Quiet logs for Kafka's JVMs: warnings, and the lines that say a broker
/// or MirrorMaker started.
const LOG4J2: &str = "\
rootLogger.level=WARN
rootLogger.appenderRef.out.ref=OUT
appender.out.type=Console
appender.out.name=OUT
appender.out.layout.type=PatternLayout
appender.out.layout.pattern=[%d] %p %m (%c)%n
logger.server.name=kafka.server.KafkaRaftServer
logger.server.level=INFO
logger.mm2.name=org.apache.kafka.connect.mirror.MirrorMaker
logger.mm2.level=INFO
";

fn main() {
    // A test runner listing the tests of every target (`--list`) finds none
    // here, rather than starting the whole bench.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // `cargo bench` adds `--bench`; our arguments are positional.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let outcome = match args.first().map(String::as_str) {
        Some("child-rdkafka-mirror") => child_rdkafka_mirror(&args[1..]),
        Some("child-rate-producer") => child_rate_producer(&args[1..]),
        dir => bench(dir.map(PathBuf::from)),
    };
    if let Err(e) = outcome {
        eprintln!("mirror bench: {e}");
        std::process::exit(1);
    }
}

// ---------------------------------------------------------------------------
// What is compared

/// The brokers of a source-target pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Kafka,
    Strait,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Kafka => "kafka",
            Kind::Strait => "strait",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Kind::Kafka => "Apache Kafka 4.1.1 -> Apache Kafka 4.1.1",
            Kind::Strait => "strait serve -> strait serve",
        }
    }
}

/// How the source's producers batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Batches {
    Small,
    Large,
}

impl Batches {
    fn name(self) -> &'static str {
        match self {
            Batches::Small => "small",
            Batches::Large => "large",
        }
    }

    /// The source producers' (linger.ms, batch.size).
    fn producer(self, knobs: &Knobs) -> (u32, u64) {
        match self {
            Batches::Small => (0, knobs.small_batch_bytes),
            Batches::Large => (LARGE_LINGER_MS, knobs.batch_bytes),
        }
    }
}

/// How the source's producers compress (librdkafka's and Kafka's
/// `compression.type`). The mirrors' producers (MirrorMaker 2's, the
/// librdkafka mirror's) use the source's, so that every target holds what
/// a mirror passing batches through holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Codec {
    fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Gzip => "gzip",
            Codec::Snappy => "snappy",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }

    fn parse(word: &str) -> Option<Codec> {
        [Codec::None, Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd]
            .into_iter()
            .find(|c| c.name() == word)
    }
}

/// What a source topic holds: how it was written, over how many
/// partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Spec {
    batches: Batches,
    partitions: i32,
    codec: Codec,
}

impl Spec {
    /// A LAN case's topic: 16 partitions, lz4.
    fn lan(batches: Batches) -> Spec {
        Spec {
            batches,
            partitions: PARTITIONS,
            codec: Codec::Lz4,
        }
    }

    /// "small" and "large" for 16 partitions and lz4 (the LAN cases'
    /// topics; the WAN case of 16 partitions and lz4 reads the "large"
    /// one), else e.g. "large-p1-none".
    fn name(self) -> String {
        if self.partitions == PARTITIONS && self.codec == Codec::Lz4 {
            self.batches.name().to_owned()
        } else {
            format!(
                "{}-p{}-{}",
                self.batches.name(),
                self.partitions,
                self.codec.name()
            )
        }
    }

    fn topic(self) -> String {
        format!("{TOPIC_PREFIX}-{}", self.name())
    }

    /// "large batches, 1 partition, none".
    fn describe(self) -> String {
        format!(
            "{} batches, {} partition{}, {}",
            self.batches.name(),
            self.partitions,
            if self.partitions == 1 { "" } else { "s" },
            self.codec.name()
        )
    }
}

/// An emulated WAN link: the round trip the delay relay adds, and the
/// bandwidth each way (tbf).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Link {
    rtt_ms: u64,
    /// 10^6 bytes per second each way.
    mb_s: u64,
}

impl Link {
    /// "50ms:50MB" (case-insensitive; "MB/s" and a bare number too).
    fn parse(word: &str) -> Option<Link> {
        let (rtt, rate) = word.split_once(':')?;
        let rtt = rtt.strip_suffix("ms").unwrap_or(rtt).trim();
        let rate = rate.strip_suffix("/s").unwrap_or(rate);
        let rate = rate.strip_suffix("mb").unwrap_or(rate).trim();
        let link = Link {
            rtt_ms: rtt.parse().ok()?,
            mb_s: rate.parse().ok()?,
        };
        (link.mb_s > 0).then_some(link)
    }

    /// "50ms-50mb", part of names.
    fn name(self) -> String {
        format!("{}ms-{}mb", self.rtt_ms, self.mb_s)
    }

    /// "50 ms x 50 MB/s".
    fn title(self) -> String {
        format!("{} ms x {} MB/s", self.rtt_ms, self.mb_s)
    }

    fn one_way(self) -> Duration {
        Duration::from_micros(self.rtt_ms * 1000 / 2)
    }
}

/// Where the mirrors run relative to the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Net {
    Lan,
    Wan(Link),
}

impl Net {
    fn name(self) -> String {
        match self {
            Net::Lan => "lan".into(),
            Net::Wan(link) => format!("wan-{}", link.name()),
        }
    }

    fn title(self) -> String {
        match self {
            Net::Lan => "LAN".into(),
            Net::Wan(link) => format!("WAN {}", link.title()),
        }
    }
}

/// A mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Peer {
    Strait,
    Mm2,
    Rdkafka,
}

impl Peer {
    /// Part of names.
    fn name(self) -> &'static str {
        match self {
            Peer::Strait => "strait",
            Peer::Mm2 => "mm2",
            Peer::Rdkafka => "rdkafka",
        }
    }

    fn parse(word: &str) -> Option<Peer> {
        match word {
            "strait" => Some(Peer::Strait),
            "mm2" | "mirrormaker" | "mirrormaker2" => Some(Peer::Mm2),
            "rdkafka" | "librdkafka" => Some(Peer::Rdkafka),
            _ => None,
        }
    }

    fn title(self) -> &'static str {
        match self {
            Peer::Strait => "Strait mirror",
            Peer::Mm2 => "MirrorMaker 2",
            Peer::Rdkafka => "librdkafka mirror",
        }
    }

    /// Whether it runs between brokers of `kind`.
    fn runs_on(self, kind: Kind) -> bool {
        self != Peer::Mm2 || kind == Kind::Kafka
    }
}

// ---------------------------------------------------------------------------
// Knobs

/// What the environment asked for.
#[derive(Debug, Clone)]
struct Knobs {
    records: u64,
    batches: Vec<Batches>,
    peers: Vec<Peer>,
    brokers: Vec<Kind>,
    batch_bytes: u64,
    small_batch_bytes: u64,
    mm2_tasks: u64,
    mm2_options: Vec<String>,
    kafka_heap: String,
    /// Whether the LAN cases run.
    lan: bool,
    wan: bool,
    wan_links: Vec<Link>,
    wan_partitions: Vec<i32>,
    wan_codecs: Vec<Codec>,
    /// The delay relay's window per connection and direction (0: none).
    wan_window: u64,
    latency_rate: u64,
    latency_secs: u64,
    latency_warmup: u64,
    /// The mirrors whose replication latency is measured.
    latency_peers: Vec<Peer>,
    limit_in_flight: usize,
    poll: Duration,
    warm_bytes: u64,
    cluster_options: String,
    /// More keys of the Strait mirror itself, YAML lines.
    mirror_options: Vec<String>,
    netns: String,
    strait_bin: PathBuf,
}

fn env_u64(name: &str, default: u64) -> Res<u64> {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().map_err(|e| format!("{name}={v:?}: {e}")),
        Err(_) => Ok(default),
    }
}

/// A comma-separated list of names, each mapped by `parse`; `default`
/// when unset.
fn env_list<T: Copy + PartialEq>(
    name: &str,
    default: &[T],
    parse: impl Fn(&str) -> Option<T>,
) -> Res<Vec<T>> {
    let Ok(v) = std::env::var(name) else {
        return Ok(default.to_vec());
    };
    let mut out = Vec::new();
    for word in v.split([',', ' ']).map(str::trim).filter(|w| !w.is_empty()) {
        let item =
            parse(&word.to_ascii_lowercase()).ok_or_else(|| format!("{name}={v:?}: unknown {word:?}"))?;
        if !out.contains(&item) {
            out.push(item);
        }
    }
    if out.is_empty() {
        return Err(format!("{name}={v:?}: empty"));
    }
    Ok(out)
}

fn knobs() -> Res<Knobs> {
    for old in ["MIRROR_BENCH_WAN_MBIT", "MIRROR_BENCH_WAN_RTT_MS"] {
        if std::env::var_os(old).is_some() {
            return Err(format!(
                "{old} is gone: MIRROR_BENCH_WAN_LINKS lists the links as RTT:BANDWIDTH, e.g. \
                 '50ms:50MB,100ms:100MB' (MB/s each way; 1 MB/s = 8 Mbit/s)"
            ));
        }
    }
    let records = env_u64("MIRROR_BENCH_RECORDS", 200_000)?.max(PARTITIONS as u64);
    let peers = env_list(
        "MIRROR_BENCH_PEERS",
        &[Peer::Strait, Peer::Mm2, Peer::Rdkafka],
        Peer::parse,
    )?;
    let knobs = Knobs {
        records,
        batches: env_list(
            "MIRROR_BENCH_BATCHES",
            &[Batches::Small, Batches::Large],
            |w| match w {
                "small" => Some(Batches::Small),
                "large" => Some(Batches::Large),
                _ => None,
            },
        )?,
        latency_peers: env_list(
            "MIRROR_BENCH_LATENCY_PEERS",
            &[Peer::Strait, Peer::Mm2],
            Peer::parse,
        )?
        .into_iter()
        .filter(|p| peers.contains(p))
        .collect(),
        peers,
        brokers: env_list(
            "MIRROR_BENCH_BROKERS",
            &[Kind::Kafka, Kind::Strait],
            |w| match w {
                "kafka" => Some(Kind::Kafka),
                "strait" => Some(Kind::Strait),
                _ => None,
            },
        )?,
        batch_bytes: env_u64("MIRROR_BENCH_BATCH_BYTES", 1_000_000)?.max(RECORD_BYTES as u64 + 100),
        small_batch_bytes: env_u64("MIRROR_BENCH_SMALL_BATCH_BYTES", 16_384)?.max(RECORD_BYTES as u64 + 100),
        mm2_tasks: env_u64("MIRROR_BENCH_MM2_TASKS", 4)?.clamp(1, PARTITIONS as u64),
        mm2_options: std::env::var("MIRROR_BENCH_MM2_OPTIONS")
            .unwrap_or_default()
            .split([';', '\n'])
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        kafka_heap: std::env::var("MIRROR_BENCH_KAFKA_HEAP").unwrap_or_else(|_| "1G".into()),
        lan: env_u64("MIRROR_BENCH_LAN", 1)? != 0,
        wan: env_u64("MIRROR_BENCH_WAN", 1)? != 0,
        wan_links: env_list(
            "MIRROR_BENCH_WAN_LINKS",
            &[
                Link { rtt_ms: 50, mb_s: 50 },
                Link {
                    rtt_ms: 100,
                    mb_s: 100,
                },
            ],
            Link::parse,
        )?,
        wan_partitions: env_list("MIRROR_BENCH_WAN_PARTITIONS", &[1, 16], |w| {
            w.parse::<i32>().ok().filter(|p| (1..=1024).contains(p))
        })?,
        wan_codecs: env_list(
            "MIRROR_BENCH_WAN_COMPRESSION",
            &[Codec::None, Codec::Lz4],
            Codec::parse,
        )?,
        wan_window: env_u64("MIRROR_BENCH_WAN_WINDOW", support::relay::DEFAULT_WINDOW)?,
        latency_rate: env_u64("MIRROR_BENCH_LATENCY_RATE", 2_000)?.max(1),
        latency_secs: env_u64("MIRROR_BENCH_LATENCY_SECS", 20)?,
        latency_warmup: env_u64("MIRROR_BENCH_LATENCY_WARMUP", 2)?,
        limit_in_flight: env_u64("MIRROR_BENCH_LIMIT_IN_FLIGHT", LIMIT_IN_FLIGHT)?.clamp(1, PARTITIONS as u64)
            as usize,
        poll: Duration::from_millis(env_u64("MIRROR_BENCH_POLL_MS", POLL_MS)?.max(10)),
        warm_bytes: match std::env::var("MIRROR_BENCH_WARM_BYTES") {
            Ok(_) => env_u64("MIRROR_BENCH_WARM_BYTES", 0)?,
            // Three times the values: more than the target's page cache grows
            // by in a case (three copies, about half the values each).
            Err(_) => 3 * records * RECORD_BYTES as u64,
        },
        cluster_options: std::env::var("MIRROR_BENCH_CLUSTER_OPTIONS").unwrap_or_default(),
        mirror_options: std::env::var("MIRROR_BENCH_MIRROR_OPTIONS")
            .unwrap_or_default()
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        netns: std::env::var("MIRROR_BENCH_NETNS")
            .unwrap_or_else(|_| format!("strait-mb-{}", std::process::id())),
        strait_bin: std::env::var_os("STRAIT_BIN")
            .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_strait")), PathBuf::from),
    };
    if !knobs.lan && !knobs.wan {
        return Err("MIRROR_BENCH_LAN=0 and MIRROR_BENCH_WAN=0: nothing to run".into());
    }
    Ok(knobs)
}

impl Knobs {
    /// The LAN cases' source topics.
    fn lan_specs(&self) -> Vec<Spec> {
        if !self.lan {
            return Vec::new();
        }
        self.batches.iter().map(|b| Spec::lan(*b)).collect()
    }

    /// The WAN cases' source topics, per link: large batches, every
    /// partition count with every codec.
    fn wan_specs(&self) -> Vec<Spec> {
        if !self.wan {
            return Vec::new();
        }
        let mut specs = Vec::new();
        for &partitions in &self.wan_partitions {
            for &codec in &self.wan_codecs {
                specs.push(Spec {
                    batches: Batches::Large,
                    partitions,
                    codec,
                });
            }
        }
        specs
    }
}

/// What every measurement needs.
struct Ctx {
    knobs: Knobs,
    work: PathBuf,
    clk: f64,
}

// ---------------------------------------------------------------------------
// The run

/// A source and a target broker, and the source's topics.
struct Pair {
    kind: Kind,
    /// `None` while it moves behind the link.
    source: Option<Broker>,
    target: Broker,
    /// Per source topic: its end offsets.
    topics: Vec<(Spec, Vec<i64>)>,
}

impl Pair {
    /// The end offsets of the source topic of `spec` (filled by
    /// [`start_pair`]).
    fn ends(&self, spec: Spec) -> &[i64] {
        &self
            .topics
            .iter()
            .find(|(s, _)| *s == spec)
            .expect("every case's topic is filled")
            .1
    }
}

/// One case's results: the fetch limit and every mirror.
struct CaseResult {
    kind: Kind,
    net: Net,
    spec: Spec,
    limit: Res<Run>,
    /// (records, batches, bytes) of the source topic, from the limit.
    source_tally: Option<Tally>,
    mirrors: Vec<(Peer, Res<Run>)>,
}

/// Which case [`run_case`] runs.
struct CaseAt<'a> {
    kind: Kind,
    net: Net,
    spec: Spec,
    /// Its place in the pair's cases: the mirrors' order rotates by one from
    /// each case to the next.
    index: usize,
    /// The source's delay relay, over the WAN.
    relay: Option<&'a Relay>,
}

/// One latency run's result.
struct LatencyResult {
    link: Link,
    peer: Peer,
    latency: Res<Latency>,
}

fn bench(dir: Option<PathBuf>) -> Res<()> {
    let knobs = knobs()?;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let work = match dir {
        Some(d) => d,
        None => root
            .join("target/bench-mirror")
            .join(format!("run.{}", std::process::id())),
    };
    fs::create_dir_all(&work).map_err(|e| format!("creating {}: {e}", work.display()))?;
    fs::write(work.join("log4j2.properties"), LOG4J2)
        .map_err(|e| format!("writing log4j2.properties: {e}"))?;
    let ctx = Ctx {
        clk: clock_ticks(),
        knobs,
        work,
    };
    print_facts(&ctx);
    let started = Instant::now();

    // The brokers and the data.
    let mut pairs = Vec::new();
    for &kind in &ctx.knobs.brokers {
        pairs.push(start_pair(&ctx, kind)?);
    }
    if ctx.knobs.warm_bytes > 0 {
        warm_memory(&ctx.work, ctx.knobs.warm_bytes)?;
    }

    let mut results: Vec<CaseResult> = Vec::new();
    for pair in &pairs {
        let source = pair.source.as_ref().expect("the source runs");
        for (index, spec) in ctx.knobs.lan_specs().into_iter().enumerate() {
            results.push(run_case(
                &ctx,
                CaseAt {
                    kind: pair.kind,
                    net: Net::Lan,
                    spec,
                    index,
                    relay: None,
                },
                source,
                &pair.target,
                pair.ends(spec),
            ));
        }
    }
    let mut latencies = Vec::new();
    let wan_skipped = run_wan(&ctx, &mut pairs, &mut results, &mut latencies);

    println!();
    print_report(&ctx.knobs, &results, wan_skipped.as_deref(), &latencies);
    println!();
    println!(
        "total bench time {:.0} s; load average now {}; logs under {}",
        started.elapsed().as_secs_f64(),
        loadavg(),
        ctx.work.display()
    );
    for pair in &mut pairs {
        if let Some(s) = pair.source.as_mut() {
            let _ = s.stop();
        }
        let _ = pair.target.stop();
    }
    print_log_summary(&ctx.work);
    Ok(())
}

/// The WAN part: every pair's source moved behind the link, every link of
/// `MIRROR_BENCH_WAN_LINKS` in turn. Returns why it was skipped, if it was.
fn run_wan(
    ctx: &Ctx,
    pairs: &mut [Pair],
    results: &mut Vec<CaseResult>,
    latencies: &mut Vec<LatencyResult>,
) -> Option<String> {
    if !ctx.knobs.wan {
        return Some("MIRROR_BENCH_WAN=0".to_owned());
    }
    let mut wan = match Wan::setup(&ctx.knobs) {
        Ok(wan) => wan,
        Err(e) => {
            println!("WAN part skipped: {e}");
            return Some(e);
        }
    };
    println!(
        "\nWAN: sources in namespace {} behind a veth pair (tc tbf each way) and the delay relay (window {} \
         per connection and direction); links {}",
        wan.ns,
        window_text(ctx.knobs.wan_window),
        ctx.knobs
            .wan_links
            .iter()
            .map(|l| l.title())
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (i, pair) in pairs.iter_mut().enumerate() {
        wan_pair(ctx, &mut wan, pair, i == 0, results, latencies);
    }
    wan.teardown();
    None
}

/// One pair over the WAN: its source restarted behind the link on the same
/// data, then per link the cases and (for the first pair) the latency
/// runs; the source stopped afterwards, so that it takes no CPU from the
/// next pair's runs.
fn wan_pair(
    ctx: &Ctx,
    wan: &mut Wan,
    pair: &mut Pair,
    first: bool,
    results: &mut Vec<CaseResult>,
    latencies: &mut Vec<LatencyResult>,
) {
    let knobs = &ctx.knobs;
    let failed = |results: &mut Vec<CaseResult>, link: Link, e: &str| {
        for spec in knobs.wan_specs() {
            results.push(CaseResult::failed(pair.kind, Net::Wan(link), spec, e));
        }
    };
    let Some(mut source) = pair.source.take() else {
        return;
    };
    if let Err(e) = source.stop() {
        println!("  note: {} source shutdown: {e}", pair.kind.name());
    }
    let port = wan.expose();
    let moved = match pair.kind {
        Kind::Kafka => source.restart_kafka(ctx, Some((&wan.ns, port))),
        Kind::Strait => Broker::start_strait(
            ctx,
            &format!("{}-source-wan", pair.kind.name()),
            &source.dir,
            Some((&wan.ns, port)),
        ),
    };
    drop(source);
    let mut source = match moved {
        Ok(s) => s,
        Err(e) => {
            println!(
                "WAN {}: the source did not start behind the link: {e}",
                pair.kind.name()
            );
            for &link in &knobs.wan_links {
                failed(
                    results,
                    link,
                    &format!("the source did not start behind the link: {e}"),
                );
            }
            return;
        }
    };
    println!(
        "WAN {}: source behind the link at 127.0.0.1:{port}",
        pair.kind.title()
    );
    let mut index = knobs.lan_specs().len();
    for &link in &knobs.wan_links {
        if let Err(e) = wan.set_link(link) {
            println!("WAN {}: cannot set the link: {e}", link.title());
            failed(results, link, &format!("cannot set the link: {e}"));
            continue;
        }
        println!(
            "\nWAN link now {} (tc tbf {} Mbit/s each way)",
            link.title(),
            link.mb_s * 8
        );
        for spec in knobs.wan_specs() {
            let at = CaseAt {
                kind: pair.kind,
                net: Net::Wan(link),
                spec,
                index,
                relay: wan.relay(port),
            };
            results.push(run_case(ctx, at, &source, &pair.target, pair.ends(spec)));
            index += 1;
        }
        if !first || knobs.latency_secs == 0 {
            continue;
        }
        for &peer in knobs.latency_peers.iter().filter(|p| p.runs_on(pair.kind)) {
            let latency = latency_run(ctx, wan, port, link, peer, &source, &pair.target);
            print_latency_line(peer, &latency);
            latencies.push(LatencyResult { link, peer, latency });
        }
    }
    let _ = source.stop();
    pair.source = Some(source);
}

/// Starts a pair's brokers and fills its source topics.
fn start_pair(ctx: &Ctx, kind: Kind) -> Res<Pair> {
    let (source, target) = match kind {
        Kind::Kafka => (
            Broker::start_kafka(
                ctx,
                "kafka-source",
                &ctx.work.join("kafka-source"),
                "bWlycm9yLWJlbmNoLXNyYw",
            )?,
            Broker::start_kafka(
                ctx,
                "kafka-target",
                &ctx.work.join("kafka-target"),
                "bWlycm9yLWJlbmNoLWRzdA",
            )?,
        ),
        Kind::Strait => (
            Broker::start_strait(ctx, "strait-source", &ctx.work.join("strait-source-data"), None)?,
            Broker::start_strait(ctx, "strait-target", &ctx.work.join("strait-target-data"), None)?,
        ),
    };
    println!(
        "{}: source {} (pid {}), target {} (pid {})",
        kind.title(),
        source.bootstrap(),
        source.proc.pid(),
        target.bootstrap(),
        target.proc.pid()
    );
    let mut topics = Vec::new();
    let mut specs = ctx.knobs.lan_specs();
    for spec in ctx.knobs.wan_specs() {
        if !specs.contains(&spec) {
            specs.push(spec);
        }
    }
    for spec in specs {
        let topic = spec.topic();
        create_topic(&source.bootstrap(), &topic, spec.partitions)?;
        let (linger, batch_bytes) = spec.batches.producer(&ctx.knobs);
        let secs = fill_source(&ctx.knobs, &source.bootstrap(), &topic, ctx.knobs.records, spec)?;
        let ends = wait_offsets(&source.bootstrap(), &topic, spec.partitions)?;
        if ends.iter().sum::<i64>() != ctx.knobs.records as i64 {
            return Err(format!(
                "{topic} holds {} records after {} were produced (per partition {ends:?})",
                ends.iter().sum::<i64>(),
                ctx.knobs.records
            ));
        }
        println!(
            "  {topic} filled: {} records over {} partition(s) in {:.1} s ({:.0} MB/s from librdkafka, {}, \
             linger.ms={linger}, batch.size={batch_bytes})",
            ctx.knobs.records,
            spec.partitions,
            secs,
            mb(ctx.knobs.records) / secs,
            spec.codec.name()
        );
        topics.push((spec, ends));
    }
    let mut pair = Pair {
        kind,
        source: Some(source),
        target,
        topics,
    };
    warm_up(ctx, &mut pair)?;
    Ok(pair)
}

/// Unmeasured work before anything is measured, so that no mirror pays for
/// a cold broker: the target's JVM compiles its produce path (half the
/// records, at least 20,000, of each batch size and codec of the sources
/// written into a scratch topic, as the sources were), both brokers create
/// their group coordinator's topic (an offset commit; the mirrors commit to
/// the source, MirrorMaker 2's Connect group lives on the target), and the
/// target's [`Baseline`] is taken once it is quiet.
fn warm_up(ctx: &Ctx, pair: &mut Pair) -> Res<()> {
    let started = Instant::now();
    let target = pair.target.bootstrap();
    let source = pair.source.as_ref().expect("the source runs").bootstrap();
    let records = (ctx.knobs.records / 2).max(20_000);
    let mut scratch = String::new();
    let mut done: Vec<(Batches, Codec)> = Vec::new();
    for (spec, _) in &pair.topics {
        if done.contains(&(spec.batches, spec.codec)) {
            continue;
        }
        done.push((spec.batches, spec.codec));
        let shape = Spec {
            partitions: PARTITIONS,
            ..*spec
        };
        scratch = format!(
            "{TOPIC_PREFIX}-warmup-{}-{}",
            spec.batches.name(),
            spec.codec.name()
        );
        create_topic(&target, &scratch, PARTITIONS)?;
        fill_source(&ctx.knobs, &target, &scratch, records, shape)?;
    }
    let first = pair.topics.first().ok_or("no source topic to run")?.0;
    commit_offset(&source, &first.topic())?;
    commit_offset(&target, &scratch)?;
    settle(ctx, &pair.target);
    pair.target.baseline = measure_baseline(ctx, &pair.target, &scratch);
    println!(
        "  target warmed up in {:.1} s ({records} records of each batch size and codec into \
         {TOPIC_PREFIX}-warmup-*, group coordinators ready); its baseline: {:.3} cores idle, {:.2} ms of CPU \
         per offset poll",
        started.elapsed().as_secs_f64(),
        pair.target.baseline.idle,
        pair.target.baseline.per_poll * 1e3
    );
    Ok(())
}

/// Commits offset 0 of partition 0 of `topic` for group
/// `mirror-bench-warmup` (retrying while the coordinator loads).
fn commit_offset(bootstrap: &str, topic: &str) -> Res<()> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("client.id", "mirror-bench-warmup")
        .set("group.id", "mirror-bench-warmup")
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|e| format!("consumer: {e}"))?;
    let mut offsets = TopicPartitionList::new();
    offsets
        .add_partition_offset(topic, 0, Offset::Offset(0))
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match consumer.commit(&offsets, CommitMode::Sync) {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(format!("commit on {bootstrap}: {e}")),
            Err(_) => thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// The broker's CPU rate for 3 s idle, then its CPU per offset poll of
/// `topic` over 4 s of polls every 20 ms (after 2 s of them unmeasured: the
/// JVM compiles that path first).
fn measure_baseline(ctx: &Ctx, broker: &Broker, topic: &str) -> Baseline {
    // (CPU seconds, seconds, steps) over `span`.
    let run = |span: Duration, step: &mut dyn FnMut()| -> (f64, f64, u64) {
        let before = broker.cpu(ctx.clk);
        let started = Instant::now();
        let mut steps = 0;
        while started.elapsed() < span {
            step();
            steps += 1;
        }
        let cpu = minus(broker.cpu(ctx.clk), before).unwrap_or(0.0);
        (cpu, started.elapsed().as_secs_f64(), steps)
    };
    let (cpu, secs, _) = run(Duration::from_secs(3), &mut || {
        thread::sleep(Duration::from_millis(20))
    });
    let idle = cpu / secs;
    let mut watch = OffsetWatch::new(&broker.bootstrap(), topic, PARTITIONS);
    let mut poll = || {
        let _ = watch.latest();
        thread::sleep(Duration::from_millis(20));
    };
    run(Duration::from_secs(2), &mut poll);
    let (cpu, secs, polls) = run(Duration::from_secs(4), &mut poll);
    Baseline {
        idle,
        per_poll: ((cpu - idle * secs) / polls.max(1) as f64).max(0.0),
    }
}

/// Waits, at most [`SETTLE_MAX`], until `broker` is quiet: no more than its
/// idle CPU plus [`SETTLE_MARGIN`] cores over [`SETTLE_WINDOW`] (garbage
/// collection and compilation a run left behind, a mirror's shutdown).
/// Returns when, and its CPU seconds then.
fn settle(ctx: &Ctx, broker: &Broker) -> (Instant, Option<f64>) {
    let deadline = Instant::now() + SETTLE_MAX;
    let mut last = (Instant::now(), broker.cpu(ctx.clk));
    loop {
        thread::sleep(SETTLE_WINDOW);
        let now = (Instant::now(), broker.cpu(ctx.clk));
        let (Some(a), Some(b)) = (last.1, now.1) else {
            return now;
        };
        let rate = (b - a) / now.0.duration_since(last.0).as_secs_f64();
        if rate <= broker.baseline.idle + SETTLE_MARGIN || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// The fetch limit (the bare fetch, over the WAN) and every mirror of one
/// case.
fn run_case(ctx: &Ctx, at: CaseAt<'_>, source: &Broker, target: &Broker, ends: &[i64]) -> CaseResult {
    let CaseAt {
        kind,
        net,
        spec,
        index,
        relay,
    } = at;
    let topic = spec.topic();
    println!(
        "\n== {} {}, {} ({topic})",
        kind.title(),
        net.title(),
        spec.describe()
    );
    let (limit, tally) = match measure_fetch(ctx, &source.bootstrap(), &topic, ends, relay) {
        Ok((run, tally)) => (Ok(run), Some(tally)),
        Err(e) => (Err(e), None),
    };
    print_run(&format!("{} (strait-upstream)", limit_title(net)), &limit);
    if let Some(t) = &tally {
        println!(
            "  source batches: {} of {:.1} records, {:.0} B each on average ({:.1} MB for {:.1} MB of values, \
             {} {:.2}:1)",
            t.batches,
            t.records as f64 / t.batches.max(1) as f64,
            t.bytes as f64 / t.batches.max(1) as f64,
            t.bytes as f64 / 1e6,
            mb(t.records),
            spec.codec.name(),
            mb(t.records) * 1e6 / t.bytes.max(1) as f64
        );
    }
    let case = Case {
        kind,
        spec,
        name: format!("{}-{}", net.name(), spec.name()),
        topic: topic.clone(),
        source,
        target,
        ends,
        batch_bytes: tally.as_ref().map(|t| t.bytes),
        relay,
    };
    // The order rotates from case to case: on a busy machine the first run
    // of a case was seen to cost the target more, whichever mirror it was.
    let mut peers: Vec<Peer> = ctx
        .knobs
        .peers
        .iter()
        .copied()
        .filter(|p| p.runs_on(kind))
        .collect();
    if !peers.is_empty() {
        let n = index % peers.len();
        peers.rotate_left(n);
    }
    let mut mirrors = Vec::new();
    for peer in peers {
        let run = run_mirror(ctx, &case, peer);
        print_run(peer.title(), &run);
        mirrors.push((peer, run));
    }
    CaseResult {
        kind,
        net,
        spec,
        limit,
        source_tally: tally,
        mirrors,
    }
}

/// "fetch limit" on the LAN, "bare fetch" over the WAN (where the mirrors
/// may go faster: see the module docs).
fn limit_title(net: Net) -> &'static str {
    match net {
        Net::Lan => "fetch limit",
        Net::Wan(_) => "bare fetch",
    }
}

/// Touches `bytes` of memory before anything is measured: writes a scratch
/// file of that size into the page cache and deletes it, twice, printing
/// both rates.
///
/// Some virtual machines (this project's CI machines among them) get their
/// memory from the host on first touch: a page the guest has never used
/// costs several times more to write the first time (here `dd` of 2 GB into
/// a file: about 0.7 GB/s the first time, 4.4 GB/s after deleting it and
/// writing again). Every run below fills fresh page cache on the target and
/// fresh heap in the mirrors, while the fetch limit reads page cache the
/// fill already paid for; without this, whichever run comes first pays the
/// host's first touch and the comparison measures the VM rather than the
/// mirrors. A machine that has been up a while has its memory backed
/// already. MIRROR_BENCH_WARM_BYTES=0 skips it.
fn warm_memory(work: &Path, bytes: u64) -> Res<()> {
    let path = work.join("warm-memory.scratch");
    let chunk = vec![0x5au8; 1 << 20];
    let mut rates = Vec::new();
    for _ in 0..2 {
        let started = Instant::now();
        let mut file = fs::File::create(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
        let mut written = 0u64;
        while written < bytes {
            file.write_all(&chunk)
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            written += chunk.len() as u64;
        }
        drop(file);
        rates.push(written as f64 / 1e9 / started.elapsed().as_secs_f64());
        fs::remove_file(&path).map_err(|e| format!("removing {}: {e}", path.display()))?;
    }
    println!(
        "memory warmed: {:.1} GB written to page cache and freed, twice: {:.1} GB/s, then {:.1} GB/s",
        bytes as f64 / 1e9,
        rates[0],
        rates[1]
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Facts

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// The 1, 5 and 15 minute load averages.
fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "?".into(),
        |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

fn print_facts(ctx: &Ctx) {
    let knobs = &ctx.knobs;
    let nproc = thread::available_parallelism().map_or(0, |n| n.get());
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "?".into());
    let (_, librdkafka) = rdkafka::util::get_rdkafka_version();
    let names = |v: Vec<&str>| v.join(", ");
    println!(
        "mirror benchmark: {} vs the source's fetch limit",
        names(knobs.peers.iter().map(|p| p.title()).collect())
    );
    println!("  machine: nproc {nproc}, {model}, load average {}", loadavg());
    println!(
        "  brokers: {} (fresh directories under {}); Kafka {} heap, MirrorMaker 2 {}",
        names(knobs.brokers.iter().map(|k| k.title()).collect()),
        ctx.work.display(),
        knobs.kafka_heap,
        MM2_HEAP.join(" ")
    );
    let batches: Vec<String> = knobs
        .batches
        .iter()
        .map(|b| {
            let (linger, size) = b.producer(knobs);
            format!("{} (linger.ms={linger}, batch.size={size})", b.name())
        })
        .collect();
    println!(
        "  data:    {} records x {RECORD_BYTES} B (no key; {RANDOM_BYTES} B random + text) per source topic, \
         librdkafka {librdkafka}, acks=all, idempotent; LAN: {PARTITIONS} partitions, lz4, source batches {}{}",
        knobs.records,
        batches.join(", "),
        if knobs.lan { "" } else { " (not run: MIRROR_BENCH_LAN=0)" }
    );
    println!(
        "  fetch:   {} MiB per partition, {} MiB per answer, max wait {FETCH_MAX_WAIT_MS} ms, read_committed \
         (the fetch limit's, MM2's and the librdkafka mirror's; Strait's mirror sizes its own; the limit keeps \
         {} requests in flight on one connection)",
        FETCH_PARTITION_BYTES >> 20,
        FETCH_MAX_BYTES >> 20,
        knobs.limit_in_flight
    );
    println!(
        "  MM2:     tasks.max={}, producer with the source's compression, linger.ms=5, batch.size=1000000{}",
        knobs.mm2_tasks,
        if knobs.mm2_options.is_empty() {
            String::new()
        } else {
            format!("; plus {}", knobs.mm2_options.join("; "))
        }
    );
    if knobs.wan {
        let links: Vec<String> = knobs
            .wan_links
            .iter()
            .map(|l| format!("{} ({} Mbit/s)", l.title(), l.mb_s * 8))
            .collect();
        let partitions: Vec<String> = knobs.wan_partitions.iter().map(i32::to_string).collect();
        let codecs: Vec<&str> = knobs.wan_codecs.iter().map(|c| c.name()).collect();
        println!(
            "  WAN:     links {} (round trip added by the delay relay, window {} per connection and \
             direction; bandwidth each way by tc tbf on a veth pair), source behind it, mirrors and target on \
             this side; per link large batches over {} partition(s), compression {}; latency of {} at {} \
             records/s for {} s after {} s of warm-up",
            links.join(", "),
            window_text(knobs.wan_window),
            partitions.join(", "),
            codecs.join(", "),
            names(knobs.latency_peers.iter().map(|p| p.title()).collect()),
            knobs.latency_rate,
            knobs.latency_secs,
            knobs.latency_warmup
        );
    }
    if !knobs.cluster_options.is_empty() {
        println!("  Strait mirror clusters get: {}", knobs.cluster_options);
    }
    if !knobs.mirror_options.is_empty() {
        println!("  the Strait mirror gets: {}", knobs.mirror_options.join("; "));
    }
    println!(
        "  MB = 10^6 B of record values; batch MB = 10^6 B of record batches as stored on the source (what \
         crosses the link); rates and CPU per GB of the copy (first record on the target to last), start-up \
         apart"
    );
    println!();
}

// ---------------------------------------------------------------------------
// Processes

/// A child process (a broker, a mirror), killed on drop.
#[derive(Debug)]
struct Proc {
    child: Child,
    what: String,
    log: PathBuf,
}

impl Proc {
    /// Spawns `cmd`, its output appended to `log`. With `marker` (a string
    /// of its command line), a watchdog kills it should this bench die
    /// without dropping it.
    fn spawn(mut cmd: Command, what: &str, log: PathBuf, marker: Option<&Path>) -> Res<Proc> {
        let out = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| format!("opening {}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = cmd
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("spawning {what} ({:?}): {e}", cmd.get_program()))?;
        if let Some(marker) = marker {
            reap_after_us(child.id(), marker);
        }
        Ok(Proc {
            child,
            what: what.to_owned(),
            log,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// User + system CPU seconds so far.
    fn cpu(&self, clk: f64) -> Option<f64> {
        pid_cpu(self.pid(), clk)
    }

    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    /// SIGTERM, then SIGKILL after `grace`. Returns how long the exit took.
    fn stop_within(&mut self, grace: Duration) -> Res<Duration> {
        let started = Instant::now();
        if self.exited().is_some() {
            return Ok(Duration::ZERO);
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return Ok(started.elapsed());
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        Err(format!(
            "{} did not exit within {} s of SIGTERM (killed)",
            self.what,
            grace.as_secs()
        ))
    }

    fn stop(&mut self) -> Res<Duration> {
        self.stop_within(Duration::from_secs(20))
    }

    /// "(NAME exited: STATUS; last log lines ...)" when it is gone.
    fn gone(&mut self) -> Option<String> {
        let status = self.exited()?;
        Some(format!(
            "{} exited ({status}); {}",
            self.what,
            log_tail(&self.log, 8)
        ))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Kills `pid` once this bench has exited, if it is still running and its
/// command line still names `marker` (a path under the work directory):
/// the JVMs and brokers must not outlive an interrupted bench.
fn reap_after_us(pid: u32, marker: &Path) {
    let me = std::process::id();
    let script = format!(
        "while kill -0 {me} 2>/dev/null && kill -0 {pid} 2>/dev/null; do sleep 1; done; \
         kill -0 {me} 2>/dev/null || {{ tr '\\0' ' ' < /proc/{pid}/cmdline 2>/dev/null | grep -qF '{}' && kill -9 {pid}; }}",
        marker.display()
    );
    let _ = Command::new("setsid")
        .args(["sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

/// User + system CPU seconds of process `pid` so far.
fn pid_cpu(pid: u32, clk: f64) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(cpu_ticks_of(&stat)? as f64 / clk)
}

/// Field 14 (utime) + 15 (stime) of a /proc/PID/stat line.
fn cpu_ticks_of(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces; it ends at the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn own_cpu(clk: f64) -> Option<f64> {
    Some(cpu_ticks_of(&fs::read_to_string("/proc/self/stat").ok()?)? as f64 / clk)
}

fn minus(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a? - b?)
}

/// The last `n` lines of a log, and its WARN/ERROR lines, for a message.
fn log_tail(log: &Path, n: usize) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let flagged: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panicked"))
        .take(5)
        .collect();
    let mut s = format!("log {}:", log.display());
    for l in flagged {
        let _ = write!(s, "\n    {l}");
    }
    for l in &lines[lines.len().saturating_sub(n)..] {
        let _ = write!(s, "\n    {l}");
    }
    s
}

/// A broker (`strait serve` or a Kafka node), killed on drop.
#[derive(Debug)]
struct Broker {
    kind: Kind,
    name: String,
    proc: Proc,
    /// Where clients connect (on this side of the WAN).
    addr: SocketAddr,
    /// `strait serve`: its data directory. Kafka: the node's directory
    /// (properties, `data/`).
    dir: PathBuf,
    /// Kafka: the controller listener's port, kept across restarts.
    controller_port: u16,
    /// What it spends when no mirror runs (see [`measure_baseline`]).
    baseline: Baseline,
}

/// A broker's CPU use when no mirror runs: cores when idle, and CPU
/// seconds per offset poll of the bench.
#[derive(Debug, Clone, Copy, Default)]
struct Baseline {
    idle: f64,
    per_poll: f64,
}

impl Baseline {
    /// What the broker spends in `secs` seconds with `polls` offset polls.
    fn over(&self, secs: f64, polls: u64) -> f64 {
        self.idle * secs + self.per_poll * polls as f64
    }
}

impl Broker {
    /// `strait serve` on a free loopback port, or (with `netns`) on
    /// `0.0.0.0:port` inside that namespace, advertising `127.0.0.1:port`.
    fn start_strait(ctx: &Ctx, name: &str, data: &Path, netns: Option<(&str, u16)>) -> Res<Broker> {
        fs::create_dir_all(data).map_err(|e| format!("creating {}: {e}", data.display()))?;
        let log = ctx.work.join(format!("{name}.log"));
        let mut last = String::new();
        // A port found free can be taken before the broker binds it: retry.
        for _ in 0..3 {
            let (mut cmd, port) = match netns {
                Some((ns, port)) => {
                    let mut c = Command::new("ip");
                    c.args(["netns", "exec", ns])
                        .arg(&ctx.knobs.strait_bin)
                        .arg("serve")
                        .args([
                            "--listen",
                            &format!("0.0.0.0:{port}"),
                            "--advertised",
                            &format!("127.0.0.1:{port}"),
                        ]);
                    (c, port)
                }
                None => {
                    let port = support::free_port();
                    let mut c = Command::new(&ctx.knobs.strait_bin);
                    c.arg("serve").args(["--listen", &format!("127.0.0.1:{port}")]);
                    (c, port)
                }
            };
            cmd.arg("--data-dir")
                .arg(data)
                .current_dir(&ctx.work)
                .stdin(Stdio::null());
            let mut proc = Proc::spawn(cmd, name, log.clone(), Some(data))?;
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            match wait_ready(&mut proc, addr) {
                Ok(()) => {
                    return Ok(Broker {
                        kind: Kind::Strait,
                        name: name.to_owned(),
                        proc,
                        addr,
                        dir: data.to_owned(),
                        controller_port: 0,
                        baseline: Baseline::default(),
                    })
                }
                Err(e) => last = e,
            }
            if netns.is_some() {
                break;
            }
        }
        Err(format!("{name} did not start: {last}"))
    }

    /// A single Kafka node (broker and controller) in a fresh `dir`, on
    /// free loopback ports.
    fn start_kafka(ctx: &Ctx, name: &str, dir: &Path, cluster_id: &str) -> Res<Broker> {
        fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let mut last = String::new();
        // Ports found free can be taken before the JVM binds them: retry.
        for attempt in 0..3 {
            let port = support::free_port();
            let controller_port = support::free_port();
            let properties = write_kafka_properties(dir, port, controller_port, false)?;
            if attempt == 0 {
                format_kafka(dir, &properties, cluster_id)?;
            }
            match spawn_kafka(ctx, name, dir, &properties, port, controller_port, None) {
                Ok(b) => return Ok(b),
                Err(e) => last = e,
            }
        }
        Err(format!("{name} did not start: {last}"))
    }

    /// Stops nothing: starts this Kafka node's directory again, inside
    /// `netns` on `0.0.0.0:port` (advertising `127.0.0.1:port`) or on a
    /// free loopback port. The caller stopped this one first.
    fn restart_kafka(&self, ctx: &Ctx, netns: Option<(&str, u16)>) -> Res<Broker> {
        let port = netns.map_or_else(support::free_port, |(_, p)| p);
        let properties = write_kafka_properties(&self.dir, port, self.controller_port, netns.is_some())?;
        let name = format!("{}-wan", self.name);
        spawn_kafka(
            ctx,
            &name,
            &self.dir,
            &properties,
            port,
            self.controller_port,
            netns,
        )
    }

    fn bootstrap(&self) -> String {
        self.addr.to_string()
    }

    fn cpu(&self, clk: f64) -> Option<f64> {
        self.proc.cpu(clk)
    }

    fn stop(&mut self) -> Res<Duration> {
        match self.kind {
            // A controlled shutdown can take a while on a busy machine.
            Kind::Kafka => self.proc.stop_within(Duration::from_secs(60)),
            Kind::Strait => self.proc.stop(),
        }
    }
}

/// Writes `dir/server.properties` for a combined broker+controller node
/// with a replication factor of 1 everywhere; returns its path.
/// The JVM options and class path of Kafka's jars (the brokers and
/// MirrorMaker 2), logging as the bench's log4j2 file says.
fn kafka_jvm<'a>(ctx: &Ctx, cmd: &'a mut Command) -> &'a mut Command {
    cmd.args(KAFKA_JVM_OPTS)
        .arg(format!(
            "-Dlog4j2.configurationFile={}",
            ctx.work.join("log4j2.properties").display()
        ))
        .arg("-cp")
        .arg(support::kafka::kafka_classpath())
}

fn write_kafka_properties(dir: &Path, port: u16, controller_port: u16, any_address: bool) -> Res<PathBuf> {
    let host = if any_address { "0.0.0.0" } else { "127.0.0.1" };
    let mut lines =
        support::kafka::combined_node_properties(host, port, port, controller_port, &dir.join("data"));
    lines.push("auto.create.topics.enable=false".into());
    let path = dir.join("server.properties");
    fs::write(&path, lines.join("\n") + "\n").map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(path)
}

/// `kafka-storage.sh format` for a new node.
fn format_kafka(dir: &Path, properties: &Path, cluster_id: &str) -> Res<()> {
    let out = support::kafka::format_command(properties, cluster_id)
        .output()
        .map_err(|e| format!("running kafka.tools.StorageTool: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "formatting {}: {}{}",
            dir.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// Starts `kafka.Kafka properties` (inside `netns` when given) and waits
/// until it lists itself as a broker.
fn spawn_kafka(
    ctx: &Ctx,
    name: &str,
    dir: &Path,
    properties: &Path,
    port: u16,
    controller_port: u16,
    netns: Option<(&str, u16)>,
) -> Res<Broker> {
    let mut cmd = match netns {
        Some((ns, _)) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "java"]);
            c
        }
        None => Command::new("java"),
    };
    cmd.arg(format!("-Xmx{}", ctx.knobs.kafka_heap))
        .arg(format!("-Xms{}", ctx.knobs.kafka_heap));
    kafka_jvm(ctx, &mut cmd)
        .arg("kafka.Kafka")
        .arg(properties)
        .env_remove("LD_LIBRARY_PATH")
        .current_dir(&ctx.work)
        .stdin(Stdio::null());
    let log = ctx.work.join(format!("{name}.log"));
    let mut proc = Proc::spawn(cmd, name, log, Some(properties))?;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_kafka_ready(&mut proc, addr)?;
    Ok(Broker {
        kind: Kind::Kafka,
        name: name.trim_end_matches("-wan").to_owned(),
        proc,
        addr,
        dir: dir.to_owned(),
        controller_port,
        baseline: Baseline::default(),
    })
}

/// Polls until the broker answers ApiVersions, failing early if it exits.
fn wait_ready(proc: &mut Proc, addr: SocketAddr) -> Res<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(gone) = proc.gone() {
            return Err(gone);
        }
        match support::api_versions_ping(addr, Duration::from_secs(2)) {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                return Err(format!(
                    "not ready on {addr} after {START_TIMEOUT:?} (last error: {e})"
                ));
            }
            Err(_) => thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Polls until a Kafka node answers ApiVersions and its metadata lists a
/// broker (an unfenced one: topics can be created), failing early if it
/// exits.
fn wait_kafka_ready(proc: &mut Proc, addr: SocketAddr) -> Res<()> {
    let deadline = Instant::now() + KAFKA_START_TIMEOUT;
    let mut last = String::from("no answer yet");
    loop {
        if let Some(gone) = proc.gone() {
            return Err(gone);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "not ready on {addr} after {KAFKA_START_TIMEOUT:?} (last: {last}); {}",
                log_tail(&proc.log, 8)
            ));
        }
        match support::api_versions_ping(addr, Duration::from_secs(2)) {
            Err(e) => last = e.to_string(),
            Ok(()) => match broker_count(&addr.to_string()) {
                Ok(n) if n > 0 => return Ok(()),
                Ok(_) => last = "no broker in the metadata".into(),
                Err(e) => last = e,
            },
        }
        thread::sleep(Duration::from_millis(200));
    }
}

/// Brokers in the metadata of the cluster at `bootstrap`.
fn broker_count(bootstrap: &str) -> Res<usize> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("client.id", "mirror-bench-ready")
        .set("log_level", "0")
        .create()
        .map_err(|e| format!("consumer: {e}"))?;
    let md = consumer
        .fetch_metadata(None, Duration::from_secs(5))
        .map_err(|e| format!("metadata: {e}"))?;
    Ok(md.brokers().len())
}

// ---------------------------------------------------------------------------
// Results

/// One measured copy (or read) of a whole topic.
#[derive(Debug, Clone, Default)]
struct Run {
    records: u64,
    /// Bytes of the source's record batches for those records, when known.
    batch_bytes: Option<u64>,
    /// Seconds from the start until every record was on the target (per
    /// pass for the fetch limit).
    secs: f64,
    /// When the first record showed on the target (mirrors).
    first: Option<First>,
    /// When half of the records were there (mirrors).
    half: Option<First>,
    /// CPU seconds of the process measured (the mirror, or this bench for
    /// the fetch limit), the whole run.
    cpu: Option<f64>,
    /// CPU seconds of the target broker over the whole run (mirrors).
    target_cpu: Option<f64>,
    /// The target topic's batches afterwards (mirrors).
    target_tally: Option<Tally>,
    /// What else used the CPU meanwhile, and other notes.
    detail: String,
}

/// The start-up: from the mirror's start to the first record on the
/// target.
#[derive(Debug, Clone, Default)]
struct First {
    secs: f64,
    /// Records on the target at that poll.
    records: u64,
    /// CPU seconds of the mirror by then.
    cpu: Option<f64>,
    /// CPU seconds of the target broker since the start, by then.
    target_cpu: Option<f64>,
    /// Offset polls by then.
    polls: u64,
}

/// Part of a run: from a poll of the target to the last record.
struct Phase {
    secs: f64,
    records: u64,
    /// Bytes of the source's batches for those records.
    batch_bytes: Option<f64>,
    /// CPU seconds of the mirror, and of the target broker.
    cpu: Option<f64>,
    target_cpu: Option<f64>,
}

impl Phase {
    fn mb_s(&self) -> f64 {
        mb(self.records) / self.secs
    }

    fn batch_mb_s(&self) -> Option<f64> {
        Some(self.batch_bytes? / 1e6 / self.secs)
    }

    fn cpu_per_gb(&self) -> Option<f64> {
        Some(self.cpu? / (mb(self.records) / 1e3))
    }

    fn target_cpu_per_gb(&self) -> Option<f64> {
        Some(self.target_cpu? / (mb(self.records) / 1e3))
    }

    fn mb_per_cpu_s(&self) -> Option<f64> {
        let cpu = self.cpu?;
        (cpu > 0.0).then(|| mb(self.records) / cpu)
    }
}

impl Run {
    /// From the poll `from` to the last record; the whole run without it.
    fn phase(&self, from: Option<&First>) -> Phase {
        let (secs, records, cpu, target_cpu) = match from {
            Some(f) => (
                self.secs - f.secs,
                self.records - f.records.min(self.records),
                minus(self.cpu, f.cpu),
                minus(self.target_cpu, f.target_cpu),
            ),
            None => (self.secs, self.records, self.cpu, self.target_cpu),
        };
        Phase {
            secs,
            records,
            batch_bytes: self
                .batch_bytes
                .map(|b| b as f64 * records as f64 / self.records.max(1) as f64),
            cpu,
            target_cpu,
        }
    }

    /// The copy: from the first record on the target to the last; the whole
    /// run when that leaves less than half of the records (a copy too quick
    /// for the polls), and for the fetch limit.
    fn copy(&self) -> Phase {
        let first = self
            .first
            .as_ref()
            .filter(|f| self.secs > f.secs && f.records * 2 <= self.records);
        self.phase(first)
    }

    /// The second half of the copy (from the poll that saw half of the
    /// records): a mirror's steady state, its start-up and a JVM's
    /// compilation of the hot paths mostly behind it.
    fn second_half(&self) -> Option<Phase> {
        let half = self
            .half
            .as_ref()
            .filter(|h| self.secs > h.secs && h.records < self.records)?;
        Some(self.phase(Some(half)))
    }

    fn mb_s(&self) -> f64 {
        self.copy().mb_s()
    }

    fn batch_mb_s(&self) -> Option<f64> {
        self.copy().batch_mb_s()
    }

    fn cpu_per_gb(&self) -> Option<f64> {
        self.copy().cpu_per_gb()
    }

    fn target_cpu_per_gb(&self) -> Option<f64> {
        self.copy().target_cpu_per_gb()
    }

    fn mb_per_cpu_s(&self) -> Option<f64> {
        self.copy().mb_per_cpu_s()
    }
}

/// MB (10^6 B) of record values in `records` records.
fn mb(records: u64) -> f64 {
    records as f64 * RECORD_BYTES as f64 / 1e6
}

fn opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or_else(|| "?".into(), |v| format!("{v:.decimals$}"))
}

fn print_run(what: &str, run: &Res<Run>) {
    match run {
        Ok(r) => {
            let mut s = format!("{what}: {:.1} MB/s", r.mb_s());
            if let Some(b) = r.batch_mb_s() {
                let _ = write!(s, " ({b:.1} batch MB/s)");
            }
            match &r.first {
                Some(f) => {
                    let p = r.copy();
                    let _ = write!(
                        s,
                        " over {:.2} s of copy ({} records); CPU s per GB: mirror {}, target broker {}; \
                         start-up {:.2} s to the first record (mirror {} CPU s, target {}); whole run {:.2} s, \
                         mirror {} CPU s, target {}",
                        p.secs,
                        p.records,
                        opt(r.cpu_per_gb(), 2),
                        opt(r.target_cpu_per_gb(), 2),
                        f.secs,
                        opt(f.cpu, 2),
                        opt(f.target_cpu, 2),
                        r.secs,
                        opt(r.cpu, 2),
                        opt(r.target_cpu, 2)
                    );
                }
                None => {
                    let _ = write!(
                        s,
                        "; {} records in {:.2} s; {} CPU s ({} per GB)",
                        r.records,
                        r.secs,
                        opt(r.cpu, 2),
                        opt(r.cpu_per_gb(), 2)
                    );
                }
            }
            if let Some(h) = r.second_half() {
                let _ = write!(
                    s,
                    "; second half of the copy: {:.1} MB/s, CPU s per GB: mirror {}, target broker {}",
                    h.mb_s(),
                    opt(h.cpu_per_gb(), 2),
                    opt(h.target_cpu_per_gb(), 2)
                );
            }
            if let Some(t) = &r.target_tally {
                let _ = write!(
                    s,
                    "; target holds {} batches of {:.1} records ({:.0} B)",
                    t.batches,
                    t.records as f64 / t.batches.max(1) as f64,
                    t.bytes as f64 / t.batches.max(1) as f64
                );
            }
            println!("{s}");
            if !r.detail.is_empty() {
                println!("  {}", r.detail.replace('\n', "\n  "));
            }
        }
        Err(e) => println!("{what}: n/a: {e}"),
    }
}

/// CPU seconds of other processes over a phase.
struct CpuWatch {
    procs: Vec<(String, u32, Option<f64>)>,
    bench: Option<f64>,
    machine: Option<f64>,
    clk: f64,
}

impl CpuWatch {
    fn start(brokers: &[&Broker], clk: f64) -> CpuWatch {
        CpuWatch {
            procs: brokers
                .iter()
                .map(|b| (b.name.clone(), b.proc.pid(), b.proc.cpu(clk)))
                .collect(),
            bench: own_cpu(clk),
            machine: machine_busy(clk),
            clk,
        }
    }

    /// "cpu s: source 1.2, target 0.8, bench 0.1, other 0.3" (other: the
    /// machine's busy time less these and `measured`).
    fn describe(&self, measured: Option<f64>) -> String {
        let mut s = String::from("whole run, cpu s:");
        let mut known = measured.unwrap_or(0.0);
        for (name, pid, before) in &self.procs {
            match (before, pid_cpu(*pid, self.clk)) {
                (Some(b), Some(n)) => {
                    let _ = write!(s, " {name} {:.2},", n - b);
                    known += n - b;
                }
                _ => {
                    let _ = write!(s, " {name} ?,");
                }
            }
        }
        if let (Some(b), Some(n)) = (self.bench, own_cpu(self.clk)) {
            let _ = write!(s, " this bench (offset poller, WAN relay) {:.2},", n - b);
            known += n - b;
        }
        match (self.machine, machine_busy(self.clk)) {
            (Some(b), Some(n)) => {
                let _ = write!(s, " everything else {:.2}", (n - b - known).max(0.0));
            }
            _ => s.push_str(" everything else ?"),
        }
        s
    }
}

/// Busy time of all CPUs (everything but idle and iowait), in seconds.
fn machine_busy(clk: f64) -> Option<f64> {
    let stat = fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let v = v.get(..8)?;
    Some((v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) as f64 / clk)
}

// ---------------------------------------------------------------------------
// The data

/// Record `i`'s value: [`RANDOM_BYTES`] that no codec shrinks (xorshift
/// seeded by `i`), then text that lz4 finds again in the records before.
fn fill_value(i: u64, buf: &mut [u8]) {
    const TEXT: &[u8] = b"{\"service\":\"checkout\",\"region\":\"nj\",\"level\":\"info\",\
        \"message\":\"order accepted\",\"currency\":\"USD\",\"channel\":\"web\",\
        \"items\":[{\"sku\":\"A-1001\",\"qty\":1},{\"sku\":\"B-2002\",\"qty\":2}],";
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    for chunk in buf[..RANDOM_BYTES].chunks_mut(8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let v = x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
    for (j, b) in buf[RANDOM_BYTES..].iter_mut().enumerate() {
        *b = TEXT[j % TEXT.len()];
    }
}

/// The settings of every librdkafka producer here: acks=all, idempotence
/// (so at most 5 requests in flight, as Java's), and the given compression
/// and batching.
fn producer_config(
    bootstrap: &str,
    client_id: &str,
    codec: Codec,
    linger_ms: u32,
    batch_bytes: u64,
) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("client.id", client_id)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("compression.type", codec.name())
        .set("linger.ms", linger_ms.to_string())
        .set("batch.size", batch_bytes.to_string())
        .set("message.timeout.ms", "120000");
    c
}

/// Delivery reports, counted.
#[derive(Debug, Default)]
struct Deliveries {
    ok: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Deliveries {
    fn done(&self) -> u64 {
        self.ok.load(Ordering::Relaxed) + self.failed.load(Ordering::Relaxed)
    }

    fn check(&self, expected: u64) -> Res<()> {
        let failed = self.failed.load(Ordering::Relaxed);
        if failed > 0 {
            return Err(format!(
                "{failed} of {expected} deliveries failed, first: {}",
                self.first_error.lock().unwrap().as_deref().unwrap_or("?")
            ));
        }
        Ok(())
    }
}

impl ClientContext for Deliveries {
    fn error(&self, error: KafkaError, reason: &str) {
        eprintln!("librdkafka: {error}: {reason}");
    }
}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                self.first_error
                    .lock()
                    .unwrap()
                    .get_or_insert_with(|| e.to_string());
            }
        }
    }
}

/// Sends one record through a ThreadedProducer, waiting while its queue
/// is full.
fn send_value(producer: &ThreadedProducer<Deliveries>, topic: &str, partition: i32, value: &[u8]) -> Res<()> {
    let mut record = BaseRecord::<(), [u8], ()>::to(topic)
        .payload(value)
        .partition(partition);
    let mut blocked: Option<Instant> = None;
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                if blocked.get_or_insert_with(Instant::now).elapsed() > STALL {
                    return Err(format!("producer queue full for {} s", STALL.as_secs()));
                }
                thread::sleep(Duration::from_micros(500));
            }
            Err((e, _)) => return Err(format!("send: {e}")),
        }
    }
}

/// Waits until `count` delivery reports came, or none came for [`STALL`].
fn wait_deliveries(deliveries: &Deliveries, count: u64) -> Res<()> {
    let mut seen = deliveries.done();
    let mut progress = Instant::now();
    while deliveries.done() < count {
        thread::sleep(Duration::from_millis(5));
        let now = deliveries.done();
        if now > seen {
            seen = now;
            progress = Instant::now();
        } else if progress.elapsed() > STALL {
            return Err(format!(
                "{seen} of {count} delivery reports, none for {} s",
                STALL.as_secs()
            ));
        }
    }
    deliveries.check(count)
}

/// Produces `records` records round-robin into the partitions of `topic`,
/// batched and compressed as `spec` says; returns the seconds it took.
fn fill_source(knobs: &Knobs, bootstrap: &str, topic: &str, records: u64, spec: Spec) -> Res<f64> {
    let (linger_ms, batch_bytes) = spec.batches.producer(knobs);
    let producer: ThreadedProducer<Deliveries> =
        producer_config(bootstrap, "mirror-bench-fill", spec.codec, linger_ms, batch_bytes)
            .create_with_context(Deliveries::default())
            .map_err(|e| format!("producer: {e}"))?;
    let start = Instant::now();
    let mut value = vec![0u8; RECORD_BYTES];
    for i in 0..records {
        fill_value(i, &mut value);
        send_value(&producer, topic, (i % spec.partitions as u64) as i32, &value)?;
    }
    wait_deliveries(producer.context(), records)?;
    Ok(start.elapsed().as_secs_f64())
}

/// Creates `topic` (replication factor 1), retrying for a while: a Kafka
/// node just started may not take it at once.
fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Res<()> {
    create_topic_with(bootstrap, topic, partitions, &[])
}

/// [`create_topic`] with topic configs.
fn create_topic_with(bootstrap: &str, topic: &str, partitions: i32, configs: &[(&str, &str)]) -> Res<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match try_create_topic(bootstrap, topic, partitions, configs) {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(e) if e.contains("TopicAlreadyExists") || e.contains("already exists") => return Ok(()),
            Err(_) => thread::sleep(Duration::from_millis(500)),
        }
    }
}

fn try_create_topic(bootstrap: &str, topic: &str, partitions: i32, configs: &[(&str, &str)]) -> Res<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("client.id", "mirror-bench-admin")
        .create()
        .map_err(|e| format!("admin client: {e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let new_topic = configs.iter().fold(
        NewTopic::new(topic, partitions, TopicReplication::Fixed(1)),
        |t, (k, v)| t.set(k, v),
    );
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
    let results = runtime
        .block_on(async {
            tokio::time::timeout(
                Duration::from_secs(30),
                admin.create_topics([&new_topic], &options),
            )
            .await
        })
        .map_err(|_| "CreateTopics: no answer within 30 s".to_owned())?
        .map_err(|e| format!("CreateTopics: {e}"))?;
    for r in results {
        if let Err((name, code)) = r {
            return Err(format!("CreateTopics {name}: {code:?}"));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Raw ListOffsets, to watch the target fill up

const LIST_OFFSETS_VERSION: i16 = 2;

/// Latest offsets of every partition of `topic` (`partitions` of them, in
/// partition order), or `None` while the broker does not know the topic.
fn latest_offsets(bootstrap: &str, topic: &str, partitions: i32) -> Res<Option<Vec<i64>>> {
    OffsetWatch::new(bootstrap, topic, partitions).latest()
}

/// Latest offsets of `topic` (of `partitions` partitions), waiting (up to
/// 30 s) for every partition to have a leader.
fn wait_offsets(bootstrap: &str, topic: &str, partitions: i32) -> Res<Vec<i64>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match latest_offsets(bootstrap, topic, partitions) {
            Ok(Some(o)) => return Ok(o),
            Ok(None) if Instant::now() > deadline => return Err(format!("{topic}: unknown to {bootstrap}")),
            Err(e) if Instant::now() > deadline => return Err(e),
            _ => thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// One connection asking one broker for a topic's latest offsets.
struct OffsetWatch {
    bootstrap: String,
    topic: String,
    partitions: i32,
    stream: Option<TcpStream>,
    id: i32,
}

impl OffsetWatch {
    fn new(bootstrap: &str, topic: &str, partitions: i32) -> OffsetWatch {
        OffsetWatch {
            bootstrap: bootstrap.to_owned(),
            topic: topic.to_owned(),
            partitions,
            stream: None,
            id: 0,
        }
    }

    fn latest(&mut self) -> Res<Option<Vec<i64>>> {
        let answer = self.ask();
        if answer.is_err() {
            self.stream = None;
        }
        answer
    }

    fn ask(&mut self) -> Res<Option<Vec<i64>>> {
        if self.stream.is_none() {
            let s = TcpStream::connect(&self.bootstrap)
                .map_err(|e| format!("connect {}: {e}", self.bootstrap))?;
            s.set_nodelay(true).map_err(|e| e.to_string())?;
            s.set_read_timeout(Some(Duration::from_secs(10)))
                .map_err(|e| e.to_string())?;
            self.stream = Some(s);
        }
        let stream = self.stream.as_mut().expect("connected");
        self.id += 1;
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(TopicName(StrBytes::from_string(self.topic.clone())))
                .with_partitions(
                    (0..self.partitions)
                        .map(|p| {
                            ListOffsetsPartition::default()
                                .with_partition_index(p)
                                .with_timestamp(-1)
                        })
                        .collect(),
                )]);
        let mut frame = vec![0u8; 4];
        RequestHeader::default()
            .with_request_api_key(ApiKey::ListOffsets as i16)
            .with_request_api_version(LIST_OFFSETS_VERSION)
            .with_correlation_id(self.id)
            .with_client_id(Some(StrBytes::from_static_str("mirror-bench")))
            .encode(
                &mut frame,
                ApiKey::ListOffsets.request_header_version(LIST_OFFSETS_VERSION),
            )
            .map_err(|e| e.to_string())?;
        request
            .encode(&mut frame, LIST_OFFSETS_VERSION)
            .map_err(|e| e.to_string())?;
        let len = (frame.len() - 4) as i32;
        frame[..4].copy_from_slice(&len.to_be_bytes());
        stream
            .write_all(&frame)
            .map_err(|e| format!("ListOffsets send: {e}"))?;
        let mut len = [0u8; 4];
        stream
            .read_exact(&mut len)
            .map_err(|e| format!("ListOffsets read: {e}"))?;
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        stream
            .read_exact(&mut body)
            .map_err(|e| format!("ListOffsets read: {e}"))?;
        let mut cursor = &body[..];
        let header = ResponseHeader::decode(
            &mut cursor,
            ApiKey::ListOffsets.response_header_version(LIST_OFFSETS_VERSION),
        )
        .map_err(|e| e.to_string())?;
        if header.correlation_id != self.id {
            return Err(format!(
                "ListOffsets answer {} for request {}",
                header.correlation_id, self.id
            ));
        }
        let answer =
            ListOffsetsResponse::decode(&mut cursor, LIST_OFFSETS_VERSION).map_err(|e| e.to_string())?;
        let mut offsets = vec![-1i64; self.partitions as usize];
        for t in &answer.topics {
            for p in &t.partitions {
                match p.error_code {
                    0 => {}
                    // UNKNOWN_TOPIC_OR_PARTITION: not created yet.
                    3 => return Ok(None),
                    code => {
                        return Err(format!(
                            "ListOffsets {}-{}: error {code}",
                            self.topic, p.partition_index
                        ))
                    }
                }
                if let Some(o) = offsets.get_mut(p.partition_index as usize) {
                    *o = p.offset;
                }
            }
        }
        if offsets.contains(&-1) {
            return Ok(None);
        }
        Ok(Some(offsets))
    }
}

// ---------------------------------------------------------------------------
// The fetch limit

/// What a read of a topic saw.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    records: u64,
    batches: u64,
    bytes: u64,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, o: Tally) {
        self.records += o.records;
        self.batches += o.batches;
        self.bytes += o.bytes;
    }
}

/// Reads the whole topic with strait-upstream (see the module docs); the
/// run per pass and one pass's tally. Over the WAN (`relay`), fails unless
/// every batch it read crossed the link.
fn measure_fetch(
    ctx: &Ctx,
    bootstrap: &str,
    topic: &str,
    ends: &[i64],
    relay: Option<&Relay>,
) -> Res<(Run, Tally)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let relayed_before = relay.map(Relay::bytes_to_clients);
    let cpu_before = own_cpu(ctx.clk);
    let (tally, secs, passes) = runtime.block_on(fetch_all(
        bootstrap.to_owned(),
        topic.to_owned(),
        ends.to_vec(),
        ctx.knobs.limit_in_flight,
        true,
    ))?;
    let cpu = match (cpu_before, own_cpu(ctx.clk)) {
        (Some(b), Some(a)) => Some((a - b) / passes as f64),
        _ => None,
    };
    let mut detail = format!(
        "per pass, mean of {passes}; CPU: this bench's process (the reader, and over the WAN the delay \
         relay's threads), not the source broker's"
    );
    if let (Some(relay), Some(before)) = (relay, relayed_before) {
        // The passes and the unmeasured one before them.
        let read = tally.bytes * (passes + 1);
        let crossed = relay.bytes_to_clients() - before;
        if crossed < read {
            return Err(format!(
                "read {read} B of batches but only {crossed} B crossed the link: not read through the relay"
            ));
        }
        let _ = write!(
            detail,
            "; {:.1} MB crossed the link for {:.1} MB of batches read",
            crossed as f64 / 1e6,
            read as f64 / 1e6
        );
    }
    let run = Run {
        records: tally.records,
        batch_bytes: Some(tally.bytes),
        secs,
        cpu,
        detail,
        ..Run::default()
    };
    Ok((run, tally))
}

/// Reads a topic once, unmeasured: what the target holds after a mirror.
fn count_batches(bootstrap: &str, topic: &str, ends: &[i64]) -> Res<Tally> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let (tally, _, _) = runtime.block_on(fetch_all(
        bootstrap.to_owned(),
        topic.to_owned(),
        ends.to_vec(),
        LIMIT_IN_FLIGHT as usize,
        false,
    ))?;
    Ok(tally)
}

/// Reads `topic` to `ends`: with `timed`, one unmeasured pass then passes
/// until [`LIMIT_MIN_TIME`] has gone (returns the tally and seconds per
/// pass, and the passes); without, one pass.
async fn fetch_all(
    bootstrap: String,
    topic: String,
    ends: Vec<i64>,
    in_flight: usize,
    timed: bool,
) -> Res<(Tally, f64, u64)> {
    let cluster = Cluster::new(
        "source",
        ClusterOptions {
            bootstrap: vec![bootstrap],
            connect: ConnectOptions {
                client_id: "mirror-bench-fetch".into(),
                // Room for every request in flight (a Fetch counts its
                // max_bytes).
                max_bytes_in_flight: 1 << 30,
                ..ConnectOptions::default()
            },
            metadata_max_age: Duration::from_secs(300),
        },
    );
    // Every partition has the one broker as its leader; connect and learn
    // the versions before the clock starts.
    let (_, connection) = cluster.leader(&topic, 0).await.map_err(|e| e.to_string())?;
    // One unmeasured pass: the first read of freshly written segments
    // faults their pages into the broker's maps.
    let first = read_all(&connection, &topic, &ends, in_flight).await?;
    if !timed {
        return Ok((first, 0.0, 1));
    }
    let start = Instant::now();
    let mut tally = Tally::default();
    let mut passes = 0;
    // One pass over a small topic takes a few milliseconds on loopback:
    // read it again until a second has passed, for a steadier figure.
    while passes == 0 || start.elapsed() < LIMIT_MIN_TIME {
        tally += read_all(&connection, &topic, &ends, in_flight).await?;
        passes += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let per_pass = Tally {
        records: tally.records / passes,
        batches: tally.batches / passes,
        bytes: tally.bytes / passes,
    };
    Ok((per_pass, secs / passes as f64, passes))
}

/// One read of the whole topic (its partitions are `ends`' indices), the
/// partitions split between `in_flight` tasks (as many as there are
/// partitions at most).
async fn read_all(connection: &Connection, topic: &str, ends: &[i64], in_flight: usize) -> Res<Tally> {
    let mut tasks = tokio::task::JoinSet::new();
    let in_flight = in_flight.clamp(1, ends.len().max(1));
    for k in 0..in_flight {
        let mine: Vec<(i32, i64)> = (0..ends.len())
            .filter(|p| p % in_flight == k)
            .map(|p| (p as i32, ends[p]))
            .collect();
        tasks.spawn(fetch_partitions(connection.clone(), topic.to_owned(), mine));
    }
    let mut tally = Tally::default();
    while let Some(done) = tasks.join_next().await {
        tally += done.map_err(|e| e.to_string())??;
    }
    Ok(tally)
}

/// Fetches `partitions` (partition, end offset) from offset 0 to their
/// ends, one request at a time.
async fn fetch_partitions(connection: Connection, topic: String, partitions: Vec<(i32, i64)>) -> Res<Tally> {
    let mut next = vec![0i64; partitions.len()];
    let mut tally = Tally::default();
    loop {
        let wanted: Vec<FetchPartition> = partitions
            .iter()
            .zip(&next)
            .filter(|((_, end), n)| *n < end)
            .map(|((p, _), n)| {
                FetchPartition::default()
                    .with_partition(*p)
                    .with_fetch_offset(*n)
                    .with_partition_max_bytes(FETCH_PARTITION_BYTES)
            })
            .collect();
        if wanted.is_empty() {
            return Ok(tally);
        }
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(FETCH_MAX_WAIT_MS)
            .with_min_bytes(1)
            .with_max_bytes(FETCH_MAX_BYTES)
            .with_isolation_level(1)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.clone())))
                .with_partitions(wanted)]);
        let answer = tokio::time::timeout(STALL, connection.request(&request))
            .await
            .map_err(|_| format!("no Fetch answer within {} s", STALL.as_secs()))?
            .map_err(|e| e.to_string())?;
        for t in &answer.responses {
            for p in &t.partitions {
                if p.error_code != 0 {
                    return Err(format!(
                        "Fetch {topic}-{}: error {}",
                        p.partition_index, p.error_code
                    ));
                }
                let Some(i) = partitions.iter().position(|(q, _)| *q == p.partition_index) else {
                    return Err(format!(
                        "Fetch: answer for partition {} not asked for",
                        p.partition_index
                    ));
                };
                // Whole batches only; a cut-off last batch comes again.
                let mut rest = p.records.as_deref().unwrap_or_default();
                while rest.len() >= HEADER_LEN {
                    let header = BatchHeader::parse(rest)
                        .map_err(|e| format!("{topic}-{}: {e}", p.partition_index))?;
                    if rest.len() < header.size() {
                        break;
                    }
                    // Kafka may answer from before the offset asked for
                    // (a compressed batch holding it); skip what we have.
                    if header.last_offset() < next[i] {
                        rest = &rest[header.size()..];
                        continue;
                    }
                    if header.base_offset != next[i] {
                        return Err(format!(
                            "{topic}-{}: batch at {}, expected {}",
                            p.partition_index, header.base_offset, next[i]
                        ));
                    }
                    next[i] = header.last_offset() + 1;
                    tally.records += header.record_count as u64;
                    tally.batches += 1;
                    tally.bytes += header.size() as u64;
                    rest = &rest[header.size()..];
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The mirrors

/// One case: what a mirror copies, from where to where.
struct Case<'a> {
    kind: Kind,
    /// How the source topic was written (the mirrors' producers compress
    /// as it was).
    spec: Spec,
    /// "lan-small", "wan-50ms-50mb-large-p1-none": part of the mirrors' and
    /// the target topics' names.
    name: String,
    /// The source topic.
    topic: String,
    source: &'a Broker,
    target: &'a Broker,
    /// The source topic's end offsets, one per partition.
    ends: &'a [i64],
    /// Bytes of the source topic's batches (from the fetch limit).
    batch_bytes: Option<u64>,
    /// The source's delay relay, over the WAN.
    relay: Option<&'a Relay>,
}

impl Case<'_> {
    /// "kafka-lan-small": part of file names.
    fn tag(&self) -> String {
        format!("{}-{}", self.kind.name(), self.name)
    }

    fn records(&self) -> u64 {
        self.ends.iter().sum::<i64>() as u64
    }

    fn partitions(&self) -> i32 {
        self.ends.len() as i32
    }
}

/// What [`wait_mirrored`] saw.
struct Completion {
    secs: f64,
    first: Option<First>,
    /// The poll that saw half of the records.
    half: Option<First>,
    /// Offset polls in all.
    polls: u64,
}

/// Polls the target until `topic` holds `ends` (per partition) or the
/// mirror stalls or exits. Reads the mirror's and the target broker's CPU
/// at the first record (the target's as an absolute figure).
fn wait_mirrored(
    ctx: &Ctx,
    case: &Case<'_>,
    topic: &str,
    mirror: &mut Proc,
    start: Instant,
) -> Res<Completion> {
    let ends = case.ends;
    let total: i64 = ends.iter().sum();
    let mut watch = OffsetWatch::new(&case.target.bootstrap(), topic, case.partitions());
    let mut first: Option<First> = None;
    let mut half: Option<First> = None;
    let mut polls = 0;
    let mut seen = 0i64;
    let mut progress = Instant::now();
    let mut last_error = String::new();
    loop {
        polls += 1;
        match watch.latest() {
            Ok(Some(offsets)) => {
                let sum: i64 = offsets.iter().sum();
                let sample = |mirror: &Proc| First {
                    secs: start.elapsed().as_secs_f64(),
                    records: sum as u64,
                    cpu: mirror.cpu(ctx.clk),
                    target_cpu: case.target.cpu(ctx.clk),
                    polls,
                };
                if sum > 0 && first.is_none() {
                    first = Some(sample(mirror));
                }
                if sum * 2 >= total && half.is_none() {
                    half = Some(sample(mirror));
                }
                if sum >= total {
                    let secs = start.elapsed().as_secs_f64();
                    if offsets != ends {
                        return Err(format!(
                            "{topic}: per partition {offsets:?} on the target, {ends:?} on the source"
                        ));
                    }
                    return Ok(Completion {
                        secs,
                        first,
                        half,
                        polls,
                    });
                }
                if sum > seen {
                    seen = sum;
                    progress = Instant::now();
                }
            }
            Ok(None) => {}
            Err(e) => last_error = e,
        }
        if let Some(gone) = mirror.gone() {
            return Err(format!("{seen} of {total} records on the target: {gone}"));
        }
        if progress.elapsed() > STALL {
            return Err(format!(
                "stalled: {seen} of {total} records on the target, none for {} s{}; {}",
                STALL.as_secs(),
                if last_error.is_empty() {
                    String::new()
                } else {
                    format!(" (last error: {last_error})")
                },
                log_tail(&mirror.log, 8)
            ));
        }
        // Until the first record, every 50 ms; then a quarter of what is
        // left at the rate since the first record (every 20 ms until there
        // is a rate).
        let wait = match &first {
            None => POLL_START,
            Some(f) => {
                let done = seen as f64 - f.records as f64;
                let secs = start.elapsed().as_secs_f64() - f.secs;
                if done > 0.0 && secs > 0.0 {
                    Duration::from_secs_f64(((total - seen) as f64 / (done / secs) / 4.0).min(60.0))
                } else {
                    POLL_END * 2
                }
            }
        };
        thread::sleep(wait.clamp(POLL_END, ctx.knobs.poll));
    }
}

/// A mirror being measured: started by `spawn` once both brokers are
/// quiet (the clock and the CPU readings start just before), until the
/// target's `topic` is complete. The target broker's CPU is counted until it
/// is quiet again after the last record, less its [`Baseline`]: idle during
/// that tail, answering the offset polls before. Returns the run and the
/// mirror, still running.
fn measure_mirror(
    ctx: &Ctx,
    case: &Case<'_>,
    topic: &str,
    spawn: impl FnOnce() -> Res<Proc>,
) -> Res<(Run, Proc)> {
    settle(ctx, case.source);
    settle(ctx, case.target);
    let target_before = case.target.cpu(ctx.clk);
    let watch = CpuWatch::start(&[case.source, case.target], ctx.clk);
    let relayed_before = case.relay.map(Relay::bytes_to_clients);
    let start = Instant::now();
    let mut proc = spawn()?;
    let done = wait_mirrored(ctx, case, topic, &mut proc, start)?;
    let cpu = proc.cpu(ctx.clk);
    let mut detail = watch.describe(cpu);
    if let (Some(relay), Some(before)) = (case.relay, relayed_before) {
        let crossed = relay.bytes_to_clients() - before;
        let _ = write!(
            detail,
            "\nthe link carried {:.1} MB to this side meanwhile, for {} MB of source batches{}",
            crossed as f64 / 1e6,
            opt(case.batch_bytes.map(|b| b as f64 / 1e6), 1),
            match case.batch_bytes {
                Some(b) if crossed < b => " (less: not read across the link?)",
                _ => "",
            }
        );
    }
    let (quiet, target_after) = settle(ctx, case.target);
    let until_quiet = quiet.duration_since(start).as_secs_f64();
    let tail = (until_quiet - done.secs).max(0.0);
    let base = case.target.baseline;
    let target_cpu = minus(target_after, target_before).map(|c| c - base.over(until_quiet, done.polls));
    // Target CPU since the start, less its baseline.
    let since_start = |f: First| First {
        target_cpu: minus(f.target_cpu, target_before).map(|c| c - base.over(f.secs, f.polls)),
        ..f
    };
    let _ = write!(
        detail,
        "\ntarget broker: quiet {tail:.1} s after the last record; {} CPU s from the start until then, less \
         {:.2} for its baseline",
        opt(minus(target_after, target_before), 2),
        base.over(until_quiet, done.polls)
    );
    let run = Run {
        records: case.records(),
        batch_bytes: case.batch_bytes,
        secs: done.secs,
        first: done.first.map(since_start),
        half: done.half.map(since_start),
        cpu,
        target_cpu,
        target_tally: None,
        detail,
    };
    Ok((run, proc))
}

/// Creates a mirror's target topic beforehand (the source's partitions)
/// and waits for its leaders, so that no mirror pays for topic creation in
/// its run.
fn create_target_topic(case: &Case<'_>, topic: &str) -> Res<()> {
    create_topic(&case.target.bootstrap(), topic, case.partitions())?;
    wait_offsets(&case.target.bootstrap(), topic, case.partitions())?;
    Ok(())
}

/// Counts the target topic's batches into `run` (after the mirror
/// stopped).
fn tally_target(case: &Case<'_>, topic: &str, run: &mut Run) {
    match count_batches(&case.target.bootstrap(), topic, case.ends) {
        Ok(t) => run.target_tally = Some(t),
        Err(e) => {
            let _ = write!(run.detail, "\ncounting the target's batches: {e}");
        }
    }
}

/// The config of one `strait mirror` copying `topics` as
/// `strait-NAME.{topic}`.
fn mirror_config(
    knobs: &Knobs,
    source: &str,
    target: &str,
    name: &str,
    topics: &str,
    admin_port: u16,
) -> String {
    let extra = if knobs.cluster_options.is_empty() {
        String::new()
    } else {
        format!(", {}", knobs.cluster_options)
    };
    let mirror_extra: String = knobs
        .mirror_options
        .iter()
        .map(|o| format!("    {o}\n"))
        .collect();
    format!(
        "# written by benches/mirror.rs\n\
         clusters:\n  \
           source: {{ bootstrap: [\"{source}\"]{extra} }}\n  \
           target: {{ bootstrap: [\"{target}\"]{extra} }}\n\
         admin:\n  listen: 127.0.0.1:{admin_port}\n\
         mirrors:\n  \
           strait-{name}:\n    \
             source: source\n    \
             target: target\n    \
             topics: \"{topics}\"\n    \
             rename: \"strait-{name}.{{topic}}\"\n{mirror_extra}"
    )
}

/// A running `strait mirror` and its admin port.
struct StraitMirror {
    proc: Proc,
    admin_port: u16,
}

impl StraitMirror {
    /// Starts `strait mirror` copying `topics` from `source` to `target`.
    fn spawn(
        ctx: &Ctx,
        source: &str,
        target: &str,
        name: &str,
        topics: &str,
        tag: &str,
    ) -> Res<StraitMirror> {
        let admin_port = support::free_port();
        let config = ctx.work.join(format!("{tag}-strait.yaml"));
        fs::write(
            &config,
            mirror_config(&ctx.knobs, source, target, name, topics, admin_port),
        )
        .map_err(|e| format!("writing {}: {e}", config.display()))?;
        let mut cmd = Command::new(&ctx.knobs.strait_bin);
        cmd.arg("mirror")
            .arg("--config")
            .arg(&config)
            .current_dir(&ctx.work)
            .stdin(Stdio::null());
        let proc = Proc::spawn(
            cmd,
            "strait mirror",
            ctx.work.join(format!("{tag}-strait.log")),
            Some(&config),
        )?;
        Ok(StraitMirror { proc, admin_port })
    }
}

/// A mirror's target topic for `case`.
fn target_topic(peer: Peer, case: &Case<'_>) -> String {
    format!("{}-{}.{}", peer.name(), case.name, case.topic)
}

/// A mirror process just started, and the Strait mirror's admin port.
struct Spawned {
    proc: Proc,
    admin_port: Option<u16>,
}

/// Starts `peer` copying the case's topic into `topic` on the target:
///
/// - `strait mirror --config FILE`;
/// - MirrorMaker 2 (`org.apache.kafka.connect.mirror.MirrorMaker`, see
///   [`mm2_properties`]), its source cluster's alias `mm2-NAME`, so that it
///   writes into `mm2-NAME.TOPIC` (the default replication policy);
/// - this binary as `child-rdkafka-mirror`, which waits for its stdin to
///   close before it exits, so that its CPU time can be read when the
///   target is complete.
fn spawn_mirror(ctx: &Ctx, case: &Case<'_>, peer: Peer, topic: &str) -> Res<Spawned> {
    match peer {
        Peer::Strait => {
            let m = StraitMirror::spawn(
                ctx,
                &case.source.bootstrap(),
                &case.target.bootstrap(),
                &case.name,
                &case.topic,
                &case.tag(),
            )?;
            Ok(Spawned {
                proc: m.proc,
                admin_port: Some(m.admin_port),
            })
        }
        Peer::Mm2 => {
            let alias = format!("mm2-{}", case.name);
            debug_assert_eq!(format!("{alias}.{}", case.topic), topic);
            let properties = ctx.work.join(format!("{}-mm2.properties", case.tag()));
            fs::write(&properties, mm2_properties(ctx, case, &alias))
                .map_err(|e| format!("writing {}: {e}", properties.display()))?;
            let mut cmd = Command::new("java");
            cmd.args(MM2_HEAP);
            kafka_jvm(ctx, &mut cmd)
                .arg("org.apache.kafka.connect.mirror.MirrorMaker")
                .arg(&properties)
                .env_remove("LD_LIBRARY_PATH")
                .current_dir(&ctx.work)
                .stdin(Stdio::null());
            let proc = Proc::spawn(
                cmd,
                "MirrorMaker 2",
                ctx.work.join(format!("{}-mm2.log", case.tag())),
                Some(&properties),
            )?;
            Ok(Spawned {
                proc,
                admin_port: None,
            })
        }
        Peer::Rdkafka => {
            let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
            let mut cmd = Command::new(exe);
            cmd.args([
                "child-rdkafka-mirror",
                &case.source.bootstrap(),
                &case.target.bootstrap(),
                &case.topic,
                topic,
                &case.records().to_string(),
                &ctx.knobs.batch_bytes.to_string(),
                &case.partitions().to_string(),
                case.spec.codec.name(),
            ])
            .stdin(Stdio::piped())
            .current_dir(&ctx.work);
            let proc = Proc::spawn(
                cmd,
                "librdkafka mirror",
                ctx.work.join(format!("{}-rdkafka.log", case.tag())),
                None,
            )?;
            Ok(Spawned {
                proc,
                admin_port: None,
            })
        }
    }
}

/// Stops a mirror the way each exits best; a note on how it went.
fn stop_mirror(peer: Peer, proc: &mut Proc) -> String {
    let stopped = match peer {
        Peer::Strait => proc.stop(),
        Peer::Mm2 => proc.stop_within(Duration::from_secs(60)),
        Peer::Rdkafka => {
            // It exits once its stdin closes (it has flushed by then).
            let started = Instant::now();
            drop(proc.child.stdin.take());
            let deadline = Instant::now() + Duration::from_secs(10);
            while proc.exited().is_none() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(20));
            }
            if proc.exited().is_none() {
                proc.stop()
            } else {
                Ok(started.elapsed())
            }
        }
    };
    match stopped {
        Ok(took) => format!("exited {:.1} s after it was told to", took.as_secs_f64()),
        Err(e) => e,
    }
}

/// Runs `peer` until the target holds every record of the case (see
/// [`measure_mirror`]), then stops it and counts the target's batches.
fn run_mirror(ctx: &Ctx, case: &Case<'_>, peer: Peer) -> Res<Run> {
    let topic = target_topic(peer, case);
    create_target_topic(case, &topic)?;
    let mut admin_port = None;
    let (mut run, mut proc) = measure_mirror(ctx, case, &topic, || {
        let spawned = spawn_mirror(ctx, case, peer, &topic)?;
        admin_port = spawned.admin_port;
        Ok(spawned.proc)
    })?;
    if let Some(port) = admin_port {
        match http_get(port, "/metrics") {
            Ok(m) => {
                let records = support::metric_sum(&m, "strait_mirror_records_total", "");
                let reencoded = support::metric_sum(&m, "strait_mirror_batches_total", "reencoded");
                let passed = support::metric_sum(&m, "strait_mirror_batches_total", "") - reencoded;
                let errors = support::metric_sum(&m, "strait_mirror_errors_total", "");
                let _ = write!(
                    run.detail,
                    "\nmirror /metrics: {records:.0} records, {passed:.0} batches passed through, {reencoded:.0} \
                     re-encoded, {errors:.0} errors"
                );
            }
            Err(e) => {
                let _ = write!(run.detail, "\nmirror /metrics: {e}");
            }
        }
    }
    let _ = write!(run.detail, "\n{}", stop_mirror(peer, &mut proc));
    tally_target(case, &topic, &mut run);
    Ok(run)
}

/// The properties of one MirrorMaker 2 (dedicated mode) copying the case's
/// topic from cluster `alias` to `dst`.
fn mm2_properties(ctx: &Ctx, case: &Case<'_>, alias: &str) -> String {
    let knobs = &ctx.knobs;
    let mut lines = vec![
        "# written by benches/mirror.rs: MirrorMaker 2, dedicated mode, copying only".to_owned(),
        format!("clusters = {alias}, dst"),
        format!("{alias}.bootstrap.servers = {}", case.source.bootstrap()),
        format!("dst.bootstrap.servers = {}", case.target.bootstrap()),
        format!("{alias}->dst.enabled = true"),
        format!("{alias}->dst.topics = {}", case.topic),
        format!("tasks.max = {}", knobs.mm2_tasks),
        // A single broker on each side.
        "replication.factor = 1".into(),
        "offset-syncs.topic.replication.factor = 1".into(),
        "checkpoints.topic.replication.factor = 1".into(),
        "heartbeats.topic.replication.factor = 1".into(),
        "offset.storage.replication.factor = 1".into(),
        "config.storage.replication.factor = 1".into(),
        "status.storage.replication.factor = 1".into(),
        // Only the copy: no heartbeats or checkpoints (the checkpoint
        // connector then logs that it cannot run; offset syncs stay on, as
        // that connector insists), no config or ACL syncing.
        "emit.heartbeats.enabled = false".into(),
        "emit.checkpoints.enabled = false".into(),
        "sync.topic.configs.enabled = false".into(),
        "sync.topic.acls.enabled = false".into(),
        "refresh.groups.enabled = false".into(),
        // Start-up only: find Connect's plugins from their manifests rather
        // than by scanning every jar (twice).
        "plugin.discovery = service_load".into(),
        "dst.plugin.discovery = service_load".into(),
        // The source consumer with the fetch limit's fetch settings.
        format!("{alias}.consumer.fetch.max.bytes = {FETCH_MAX_BYTES}"),
        format!("{alias}.consumer.max.partition.fetch.bytes = {FETCH_PARTITION_BYTES}"),
        format!("{alias}.consumer.fetch.max.wait.ms = {FETCH_MAX_WAIT_MS}"),
        format!("{alias}.consumer.isolation.level = read_committed"),
        // The producer re-batching into large batches, compressed as the
        // source was.
        format!("dst.producer.compression.type = {}", case.spec.codec.name()),
        format!("dst.producer.linger.ms = {LARGE_LINGER_MS}"),
        format!("dst.producer.batch.size = {}", knobs.batch_bytes),
    ];
    lines.extend(knobs.mm2_options.iter().cloned());
    lines.join("\n") + "\n"
}

/// The librdkafka mirror, in a child process: args SOURCE TARGET TOPIC
/// TARGET_TOPIC RECORDS BATCH_BYTES PARTITIONS CODEC.
fn child_rdkafka_mirror(args: &[String]) -> Res<()> {
    let [source, target, topic, target_topic, records, batch_bytes, partitions, codec] = args else {
        return Err(format!(
            "child-rdkafka-mirror: 8 arguments expected, got {args:?}"
        ));
    };
    let records: u64 = records.parse().map_err(|e| format!("records: {e}"))?;
    let batch_bytes: u64 = batch_bytes.parse().map_err(|e| format!("batch bytes: {e}"))?;
    let partitions: i32 = partitions.parse().map_err(|e| format!("partitions: {e}"))?;
    let codec = Codec::parse(codec).ok_or_else(|| format!("compression {codec:?}: unknown"))?;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", source)
        .set("client.id", "mirror-bench-rdkafka-mirror")
        // librdkafka wants a group for assign(); it is never joined.
        .set("group.id", "mirror-bench-rdkafka-mirror")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", FETCH_MAX_WAIT_MS.to_string())
        .set("fetch.max.bytes", FETCH_MAX_BYTES.to_string())
        .set("max.partition.fetch.bytes", FETCH_PARTITION_BYTES.to_string())
        .set(
            "receive.message.max.bytes",
            (FETCH_MAX_BYTES + (1 << 20)).to_string(),
        )
        .set(
            "queued.max.messages.kbytes",
            (MIRROR_BUDGET_BYTES >> 10).to_string(),
        )
        .create()
        .map_err(|e| format!("consumer: {e}"))?;
    let producer: BaseProducer<Deliveries> = producer_config(
        target,
        "mirror-bench-rdkafka-mirror",
        codec,
        LARGE_LINGER_MS,
        batch_bytes,
    )
    .create_with_context(Deliveries::default())
    .map_err(|e| format!("producer: {e}"))?;
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .map_err(|e| e.to_string())?;
    }
    consumer.assign(&assignment).map_err(|e| format!("assign: {e}"))?;
    let mut consumed = 0u64;
    let mut progress = Instant::now();
    while consumed < records {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let mut record = BaseRecord::<[u8], [u8], ()>::to(target_topic).partition(m.partition());
                if let Some(ts) = m.timestamp().to_millis() {
                    record = record.timestamp(ts);
                }
                if let Some(key) = m.key() {
                    record = record.key(key);
                }
                if let Some(value) = m.payload() {
                    record = record.payload(value);
                }
                if let Some(headers) = m.headers() {
                    record = record.headers(headers.detach());
                }
                loop {
                    match producer.send(record) {
                        Ok(()) => break,
                        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                            record = r;
                            producer.poll(Duration::from_millis(5));
                        }
                        Err((e, _)) => return Err(format!("produce: {e}")),
                    }
                }
                consumed += 1;
                progress = Instant::now();
                producer.poll(Duration::ZERO);
            }
            Some(Err(e)) => eprintln!("consume: {e}"),
            None => {
                producer.poll(Duration::ZERO);
            }
        }
        if progress.elapsed() > STALL {
            return Err(format!(
                "{consumed} of {records} records consumed, none for {} s",
                STALL.as_secs()
            ));
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .map_err(|e| format!("flush: {e}"))?;
    let deliveries = producer.context();
    wait_deliveries_polling(&producer, records)?;
    deliveries.check(records)?;
    println!("librdkafka mirror: {consumed} records consumed and delivered");
    let _ = std::io::stdout().flush();
    // Stay (idle) until the parent has read our CPU time.
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    Ok(())
}

/// Polls a BaseProducer until `count` delivery reports came.
fn wait_deliveries_polling(producer: &BaseProducer<Deliveries>, count: u64) -> Res<()> {
    let mut progress = Instant::now();
    let mut seen = producer.context().done();
    while producer.context().done() < count {
        producer.poll(Duration::from_millis(10));
        let now = producer.context().done();
        if now > seen {
            seen = now;
            progress = Instant::now();
        } else if progress.elapsed() > STALL {
            return Err(format!(
                "{seen} of {count} delivery reports, none for {} s",
                STALL.as_secs()
            ));
        }
    }
    Ok(())
}

/// The latency run's producer, in a child process inside the sources'
/// network namespace: args BOOTSTRAP TOPIC RATE SECS BATCH_BYTES. Writes a
/// probe record into each partition first, then waits for the line "go"
/// on its stdin before the records it times.
fn child_rate_producer(args: &[String]) -> Res<()> {
    let [bootstrap, topic, rate, secs, batch_bytes] = args else {
        return Err(format!("child-rate-producer: 5 arguments expected, got {args:?}"));
    };
    let rate: u64 = rate.parse().map_err(|e| format!("rate: {e}"))?;
    let secs: u64 = secs.parse().map_err(|e| format!("secs: {e}"))?;
    let batch_bytes: u64 = batch_bytes.parse().map_err(|e| format!("batch bytes: {e}"))?;
    let producer: ThreadedProducer<Deliveries> = producer_config(
        bootstrap,
        "mirror-bench-rate",
        Codec::Lz4,
        LARGE_LINGER_MS,
        batch_bytes,
    )
    .create_with_context(Deliveries::default())
    .map_err(|e| format!("producer: {e}"))?;
    producer
        .client()
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| format!("metadata: {e}"))?;
    // The probes (one record per partition), which also get the producer
    // its id and connection before anything is timed.
    let mut value = vec![0u8; RECORD_BYTES];
    for i in 0..PROBES {
        fill_value((1 << 41) + i, &mut value);
        send_value(&producer, topic, (i % PARTITIONS as u64) as i32, &value)?;
    }
    wait_deliveries(producer.context(), PROBES)?;
    println!("rate producer: {PROBES} probe records delivered");
    let _ = std::io::stdout().flush();
    let mut go = String::new();
    std::io::stdin()
        .read_line(&mut go)
        .map_err(|e| format!("stdin: {e}"))?;
    if go.trim() != "go" {
        return Err(format!("told {go:?} rather than \"go\": no records produced"));
    }
    let total = rate * secs;
    let start = Instant::now();
    let mut late = Duration::ZERO;
    for i in 0..total {
        let due = start + Duration::from_nanos(i * 1_000_000_000 / rate);
        let now = Instant::now();
        if due > now {
            thread::sleep(due - now);
        } else {
            late = late.max(now - due);
        }
        fill_value((1 << 40) + i, &mut value);
        send_value(&producer, topic, (i % PARTITIONS as u64) as i32, &value)?;
    }
    wait_deliveries(producer.context(), PROBES + total)?;
    println!(
        "rate producer: {total} records in {:.2} s (at most {:.1} ms behind schedule), all delivered",
        start.elapsed().as_secs_f64(),
        late.as_secs_f64() * 1e3
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Metrics

/// A plain HTTP/1.1 GET on 127.0.0.1:`port`; the body.
fn http_get(port: u16, path: &str) -> Res<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("admin listener: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(|e| e.to_string())?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("GET {path}: {}", head.lines().next().unwrap_or("")));
    }
    Ok(body.to_owned())
}

/// The cumulative buckets (upper bound, count) of histogram `name`.
fn histogram(metrics: &str, name: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{");
    metrics
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, l.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// The bucket bound under which a fraction `q` of the observations made
/// between two snapshots lie.
fn histogram_quantile(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> Option<f64> {
    let diff: Vec<(f64, f64)> = after
        .iter()
        .map(|(le, n)| {
            let was = before.iter().find(|(b, _)| b == le).map_or(0.0, |(_, c)| *c);
            (*le, n - was)
        })
        .collect();
    let total = diff.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = (q * total).ceil();
    diff.iter().find(|(_, n)| *n >= rank).map(|(le, _)| *le)
}

// ---------------------------------------------------------------------------
// The WAN

/// The sources' datacenter: a network namespace behind a veth pair whose
/// ends are rate-limited, and a delay relay in front of each source.
struct Wan {
    ns: String,
    veth: String,
    /// The namespace's end of the veth pair.
    peer: String,
    /// The namespace's end of the veth pair has `SUBNET.2`.
    subnet: String,
    relays: Vec<Relay>,
    /// The link now.
    link: Link,
    /// Each relay's window.
    window: u64,
}

fn sh(args: &[&str]) -> Res<()> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("`{}`: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// "6 MiB" (or "none" for 0).
fn window_text(bytes: u64) -> String {
    match bytes {
        0 => "none".into(),
        b if b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b => format!("{b} B"),
    }
}

impl Wan {
    fn setup(knobs: &Knobs) -> Res<Wan> {
        if !rustix::process::geteuid().is_root() {
            return Err("network namespaces need root (this bench is not running as root)".into());
        }
        let pid = std::process::id();
        let ns = knobs.netns.clone();
        let veth = format!("smb{}", pid % 1_000_000);
        let peer = format!("{veth}p");
        // A /30 of link-local addresses, on our own veth pair only.
        let subnet = format!("169.254.{}", 1 + pid % 250);
        let mut wan = Wan {
            ns: ns.clone(),
            veth: veth.clone(),
            peer: peer.clone(),
            subnet: subnet.clone(),
            relays: Vec::new(),
            link: knobs.wan_links[0],
            window: knobs.wan_window,
        };
        let steps: Vec<Vec<String>> = vec![
            vec!["ip", "netns", "add", &ns],
            vec!["ip", "link", "add", &veth, "type", "veth", "peer", "name", &peer],
            vec!["ip", "link", "set", &peer, "netns", &ns],
            vec!["ip", "addr", "add", &format!("{subnet}.1/30"), "dev", &veth],
            vec!["ip", "link", "set", &veth, "up"],
            vec![
                "ip",
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{subnet}.2/30"),
                "dev",
                &peer,
            ],
            vec!["ip", "-n", &ns, "link", "set", &peer, "up"],
            vec!["ip", "-n", &ns, "link", "set", "lo", "up"],
        ]
        .into_iter()
        .map(|v| v.into_iter().map(str::to_owned).collect())
        .collect();
        for step in &steps {
            let args: Vec<&str> = step.iter().map(String::as_str).collect();
            sh(&args).map_err(|e| format!("cannot build the emulated WAN: {e}"))?;
        }
        wan.set_link(wan.link)
            .map_err(|e| format!("cannot build the emulated WAN: {e}"))?;
        Ok(wan)
    }

    /// Makes the link `link` from now on: `tc qdisc replace` of the tbf on
    /// both ends of the veth pair, and the relays' one-way delay for the
    /// bytes they read from now on (every mirror run and bare fetch opens
    /// its own connections after this).
    fn set_link(&mut self, link: Link) -> Res<()> {
        let rate = format!("{}mbit", link.mb_s * 8);
        // tbf's bucket: 5 ms of the rate, at least 64 KiB (a GSO segment).
        let burst = (link.mb_s * 1_000_000 / 200).max(64 << 10).to_string();
        let tbf = ["root", "tbf", "rate", &rate, "burst", &burst, "latency", "100ms"];
        let mut here = vec!["tc", "qdisc", "replace", "dev", &self.veth];
        here.extend(tbf);
        sh(&here)?;
        let mut there = vec![
            "ip", "netns", "exec", &self.ns, "tc", "qdisc", "replace", "dev", &self.peer,
        ];
        there.extend(tbf);
        sh(&there)?;
        for relay in &self.relays {
            relay.set_delay(link.one_way());
        }
        self.link = link;
        Ok(())
    }

    /// A delay relay on a free loopback port here, to the same port inside
    /// the namespace (where every port is free): a source started there on
    /// that port is reached through it. Returns the port.
    fn expose(&mut self) -> u16 {
        let relay = Relay::start(([127, 0, 0, 1], 9).into(), self.link.one_way());
        relay.set_window(self.window);
        let port = relay.port();
        let inside: SocketAddr = format!("{}.2:{port}", self.subnet)
            .parse()
            .expect("an IPv4 socket address");
        relay.retarget(inside);
        self.relays.push(relay);
        port
    }

    /// The relay on `port`.
    fn relay(&self, port: u16) -> Option<&Relay> {
        self.relays.iter().find(|r| r.port() == port)
    }

    fn teardown(&mut self) {
        self.relays.clear();
        let _ = sh(&["ip", "netns", "del", &self.ns]);
        // Gone with the namespace unless it failed half-way.
        let _ = Command::new("ip")
            .args(["link", "del", &self.veth])
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Wan {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// A histogram bucket bound in ms ("n/a" when none).
fn bound(b: Option<f64>) -> String {
    match b {
        Some(b) if b.is_infinite() => "+Inf".into(),
        Some(b) => format!("{:.0} ms", b * 1e3),
        None => "n/a".into(),
    }
}

/// What a latency run measured: read beside the target minus the source's
/// append time,
/// in ms.
#[derive(Debug, Clone)]
struct Latency {
    records: u64,
    p50: f64,
    p99: f64,
    max: f64,
    /// The Strait mirror's own histogram's bounds.
    hist_p50: Option<f64>,
    hist_p99: Option<f64>,
    detail: String,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A probe record per partition of a latency run's topic, before the
/// measured records: once the consumer beside the target has read them all,
/// the mirror runs every partition, the consumer fetches from each, and the
/// producer has its id and connection.
const PROBES: u64 = PARTITIONS as u64;

/// One mirror's replication latency over the link: records produced at a
/// fixed rate in the source's datacenter (`child-rate-producer`, inside the
/// namespace) into a fresh topic that `peer` copies (once the probe record
/// of every partition has come through), read by a librdkafka consumer on
/// the target's side: the time it reads each minus the source's append time.
fn latency_run(
    ctx: &Ctx,
    wan: &Wan,
    port: u16,
    link: Link,
    peer: Peer,
    source: &Broker,
    target: &Broker,
) -> Res<Latency> {
    let knobs = &ctx.knobs;
    let net = Net::Wan(link);
    let spec = Spec::lan(Batches::Large);
    let name = format!("{}-latency", net.name());
    let topic = format!("{LATENCY_TOPIC}-{}-{}", link.name(), peer.name());
    // Timestamps of the source's own append: latency is what the link and
    // the mirror add, not the producer's linger or its produce.
    create_topic_with(
        &source.bootstrap(),
        &topic,
        PARTITIONS,
        &[("message.timestamp.type", "LogAppendTime")],
    )?;
    wait_offsets(&source.bootstrap(), &topic, PARTITIONS)?;
    // Per partition: its probe, then its share of the rate producer's
    // (the warm-up's and the measured ones).
    let total = knobs.latency_rate * (knobs.latency_warmup + knobs.latency_secs);
    let parts = PARTITIONS as u64;
    let ends: Vec<i64> = (0..parts)
        .map(|p| (1 + (total + parts - 1 - p) / parts) as i64)
        .collect();
    let case = Case {
        kind: source.kind,
        spec,
        name,
        topic: topic.clone(),
        source,
        target,
        ends: &ends,
        batch_bytes: None,
        relay: wan.relay(port),
    };
    // The target topic with its leaders elected beforehand: partitions of a
    // topic a mirror has just created retry (with back-off) while they have
    // none, and would measure that instead.
    let copy = target_topic(peer, &case);
    create_target_topic(&case, &copy)?;
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &wan.ns])
        .arg(exe)
        .args([
            "child-rate-producer",
            &format!("127.0.0.1:{port}"),
            &topic,
            &knobs.latency_rate.to_string(),
            &(knobs.latency_warmup + knobs.latency_secs).to_string(),
            &knobs.batch_bytes.to_string(),
        ])
        .stdin(Stdio::piped())
        .current_dir(&ctx.work);
    let mut producer = Proc::spawn(
        cmd,
        "rate producer",
        ctx.work
            .join(format!("{}-{}-rate-producer.log", case.tag(), peer.name())),
        None,
    )?;
    let consumer = latency_consumer(&target.bootstrap(), &copy, PARTITIONS)?;
    let mut mirror = spawn_mirror(ctx, &case, peer, &copy)?;
    read_probes(&consumer, PARTITIONS, &mut mirror.proc, &mut producer)?;
    let metrics = |m: &Spawned| -> Option<Vec<(f64, f64)>> {
        let text = http_get(m.admin_port?, "/metrics").ok()?;
        Some(histogram(&text, "strait_mirror_replication_latency_seconds"))
    };
    let histogram_before = metrics(&mirror);
    let mirror_cpu = mirror.proc.cpu(ctx.clk);
    let mut go = producer
        .child
        .stdin
        .take()
        .ok_or("the rate producer's stdin is gone")?;
    go.write_all(b"go\n")
        .map_err(|e| format!("telling the rate producer to go: {e}"))?;
    drop(go);
    let latencies = read_latencies(&consumer, total, &mut producer, &mut mirror.proc)?;
    let histogram_after = metrics(&mirror);
    let mirror_cpu = match (mirror_cpu, mirror.proc.cpu(ctx.clk)) {
        (Some(b), Some(a)) => format!("{:.2}", a - b),
        _ => "?".into(),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while producer.exited().is_none() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    let produced = fs::read_to_string(&producer.log).unwrap_or_default();
    let stopped = stop_mirror(peer, &mut mirror.proc);
    // The warm-up (the load starting after idle: brokers, links and
    // mirror waking up) is left out; its worst latency per 100 ms of append
    // time over the first 2 s and its p99 are printed beside.
    let start = latencies.iter().map(|(ts, _)| *ts).min().unwrap_or(0);
    let warm = start + knobs.latency_warmup as i64 * 1000;
    let mut start_profile = [0f64; 20];
    for (ts, l) in &latencies {
        if let Some(worst) = start_profile.get_mut(((ts - start) / 100) as usize) {
            *worst = worst.max(*l);
        }
    }
    let start_profile: Vec<String> = start_profile.iter().map(|l| format!("{l:.0}")).collect();
    let mut warming: Vec<f64> = latencies
        .iter()
        .filter(|(ts, _)| *ts < warm)
        .map(|(_, l)| *l)
        .collect();
    warming.sort_by(f64::total_cmp);
    let warming_p99 = if warming.is_empty() {
        "n/a".to_owned()
    } else {
        format!("{:.0} ms", percentile(&warming, 99.0))
    };
    let latencies: Vec<(i64, f64)> = latencies.into_iter().filter(|(ts, _)| *ts >= warm).collect();
    if latencies.is_empty() {
        return Err("no record appended after the warm-up".into());
    }
    let mut latencies: Vec<f64> = latencies.into_iter().map(|(_, l)| l).collect();
    latencies.sort_by(f64::total_cmp);
    let quantile = |q: f64| match (&histogram_before, &histogram_after) {
        (Some(b), Some(a)) => histogram_quantile(b, a, q),
        _ => None,
    };
    Ok(Latency {
        records: latencies.len() as u64,
        p50: percentile(&latencies, 50.0),
        p99: percentile(&latencies, 99.0),
        max: latencies[latencies.len() - 1],
        hist_p50: quantile(0.5),
        hist_p99: quantile(0.99),
        detail: format!(
            "warm-up ({} s, left out): p99 {warming_p99}, worst ms per 100 ms of the first 2 s: {}; \
             {}; mirror CPU {mirror_cpu} s meanwhile (warm-up included); mirror {stopped}",
            knobs.latency_warmup,
            start_profile.join(" "),
            produced.lines().last().unwrap_or("rate producer: no report")
        ),
    })
}

/// A librdkafka consumer beside the target, assigned every partition of
/// `topic` (fresh: the probes are its first records) from the start.
fn latency_consumer(bootstrap: &str, topic: &str, partitions: i32) -> Res<BaseConsumer> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("client.id", "mirror-bench-latency")
        .set("group.id", "mirror-bench-latency")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .create()
        .map_err(|e| format!("consumer: {e}"))?;
    consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| format!("consumer metadata: {e}"))?;
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment
            .add_partition_offset(topic, p, Offset::Offset(0))
            .map_err(|e| e.to_string())?;
    }
    consumer.assign(&assignment).map_err(|e| format!("assign: {e}"))?;
    Ok(consumer)
}

/// Reads the probe record of every partition (up to 2 minutes: MirrorMaker
/// 2 takes seconds to start): the mirror runs every partition, and the
/// consumer fetches from every one, before anything is timed.
fn read_probes(consumer: &BaseConsumer, partitions: i32, mirror: &mut Proc, producer: &mut Proc) -> Res<()> {
    let mut seen = vec![false; partitions as usize];
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.contains(&false) {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                if let Some(s) = seen.get_mut(m.partition() as usize) {
                    *s = true;
                }
            }
            Some(Err(e)) => return Err(format!("latency consumer: {e}")),
            None => {}
        }
        if let Some(gone) = mirror.gone().or_else(|| producer.gone()) {
            return Err(gone);
        }
        if Instant::now() > deadline {
            let missing: Vec<usize> = (0..seen.len()).filter(|p| !seen[*p]).collect();
            return Err(format!(
                "no probe record read on the target from partitions {missing:?} after 120 s; {}",
                log_tail(&mirror.log, 8)
            ));
        }
    }
    Ok(())
}

/// Reads `total` records: each one's timestamp and its read time minus
/// that (ms); fails should the producer fail or nothing come for 30 s.
fn read_latencies(
    consumer: &BaseConsumer,
    total: u64,
    producer: &mut Proc,
    mirror: &mut Proc,
) -> Res<Vec<(i64, f64)>> {
    let mut latencies = Vec::with_capacity(total as usize);
    let mut progress = Instant::now();
    while (latencies.len() as u64) < total {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let read = now_ms();
                if let Some(ts) = m.timestamp().to_millis() {
                    latencies.push((ts, (read - ts) as f64));
                }
                progress = Instant::now();
            }
            Some(Err(e)) => return Err(format!("latency consumer: {e}")),
            None => {}
        }
        if let Some(status) = producer.exited() {
            if status != "exit status: 0" {
                return Err(format!(
                    "the rate producer failed: {}",
                    log_tail(&producer.log, 8)
                ));
            }
        }
        if progress.elapsed() > Duration::from_secs(30) {
            return Err(format!(
                "{} of {total} records read on the target, none for 30 s; {}",
                latencies.len(),
                log_tail(&mirror.log, 8)
            ));
        }
    }
    Ok(latencies)
}

/// The latency run's line as it ends.
fn print_latency_line(peer: Peer, latency: &Res<Latency>) {
    match latency {
        Ok(l) => println!(
            "replication latency through the {}: {} records, p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms{}\n  {}",
            peer.title(),
            l.records,
            l.p50,
            l.p99,
            l.max,
            if peer == Peer::Strait {
                format!(
                    "; mirror histogram p50 <= {}, p99 <= {}",
                    bound(l.hist_p50),
                    bound(l.hist_p99)
                )
            } else {
                String::new()
            },
            l.detail
        ),
        Err(e) => println!("replication latency through the {}: n/a: {e}", peer.title()),
    }
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

// ---------------------------------------------------------------------------
// The report

/// A ratio: two decimals, or two significant digits below 0.1.
fn ratio(x: f64) -> String {
    if x >= 0.1 || x <= 0.0 {
        format!("{x:.2}")
    } else {
        let decimals = ((-x.log10()).floor() as usize + 2).min(6);
        format!("{x:.decimals$}")
    }
}

/// "met" or "MISSED".
fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

/// Prints a Markdown table, columns padded.
fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::from("|");
        for (c, w) in cells.iter().zip(&widths) {
            let pad = w - c.chars().count();
            let _ = write!(s, " {c}{} |", " ".repeat(pad));
        }
        println!("{s}");
    };
    line(&header.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    line(&widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>());
    for row in rows {
        line(row);
    }
}

impl CaseResult {
    /// A case that could not run.
    fn failed(kind: Kind, net: Net, spec: Spec, e: &str) -> CaseResult {
        CaseResult {
            kind,
            net,
            spec,
            limit: Err(e.to_owned()),
            source_tally: None,
            mirrors: Vec::new(),
        }
    }

    /// "LAN small", "WAN 50 ms x 50 MB/s, 1 p, none".
    fn title(&self) -> String {
        match self.net {
            Net::Lan => format!("LAN {}", self.spec.batches.name()),
            Net::Wan(link) => format!(
                "WAN {}, {} p, {}",
                link.title(),
                self.spec.partitions,
                self.spec.codec.name()
            ),
        }
    }

    fn mirror(&self, peer: Peer) -> Option<&Run> {
        self.mirrors.iter().find(|(p, _)| *p == peer)?.1.as_ref().ok()
    }

    /// A run's batch MB/s over the link's bandwidth (WAN cases).
    fn link_ratio(&self, run: &Run) -> Option<f64> {
        match self.net {
            Net::Lan => None,
            Net::Wan(link) => Some(run.batch_mb_s()? / link.mb_s as f64),
        }
    }
}

/// Why figures are missing, numbered as the tables cite them.
#[derive(Default)]
struct Reasons(Vec<String>);

impl Reasons {
    /// "n/a [N]" for `e`.
    fn na(&mut self, e: &str) -> String {
        let i = self.0.iter().position(|r| r == e).unwrap_or_else(|| {
            self.0.push(e.to_owned());
            self.0.len() - 1
        });
        format!("n/a [{}]", i + 1)
    }
}

/// A ratio beside its goal's verdict, when it has one.
fn goal(x: f64, ok: Option<bool>) -> String {
    match ok {
        Some(ok) => format!("{} {}", ratio(x), verdict(ok)),
        None => ratio(x),
    }
}

fn print_report(
    knobs: &Knobs,
    results: &[CaseResult],
    wan_skipped: Option<&str>,
    latencies: &[LatencyResult],
) {
    let mut reasons = Reasons::default();
    for (i, &kind) in knobs.brokers.iter().enumerate() {
        let cases: Vec<&CaseResult> = results.iter().filter(|c| c.kind == kind).collect();
        if cases.is_empty() {
            continue;
        }
        print_runs_table(knobs, kind, &cases, &mut reasons);
        let lan: Vec<&CaseResult> = cases.iter().copied().filter(|c| c.net == Net::Lan).collect();
        if !lan.is_empty() {
            print_lan_ratios(kind, &lan);
        }
        for &link in &knobs.wan_links {
            let wan: Vec<&CaseResult> = cases
                .iter()
                .copied()
                .filter(|c| c.net == Net::Wan(link))
                .collect();
            if wan.is_empty() {
                continue;
            }
            print_wan_link(knobs, kind, link, &wan, &mut reasons);
            // The latency runs are the first pair's.
            if i == 0 {
                print_latency(knobs, link, latencies, &mut reasons);
            }
        }
    }
    if let Some(skipped) = wan_skipped {
        let links: Vec<String> = knobs.wan_links.iter().map(|l| l.title()).collect();
        println!("WAN ({}): skipped: {skipped}", links.join(", "));
    }
    for (i, r) in reasons.0.iter().enumerate() {
        println!("[{}] {r}", i + 1);
    }
}

/// Every run of a pair, LAN and WAN: rates, CPU per GB, batches, start-up.
fn print_runs_table(knobs: &Knobs, kind: Kind, cases: &[&CaseResult], reasons: &mut Reasons) {
    println!(
        "{}: {} records x 1 KiB per case (LAN: {PARTITIONS} partitions, lz4); MB/s and CPU s per GB of the copy \
         (first record on the target to last); start-up = seconds to the first record, and the CPU seconds the \
         mirror and the target broker spent by then",
        kind.title(),
        knobs.records
    );
    let mut rows = Vec::new();
    for c in cases {
        let limit = c.limit.as_ref().ok();
        let vs = |r: &Run| -> String {
            match c.net {
                Net::Lan => limit.map_or_else(|| "?".into(), |l| ratio(r.mb_s() / l.mb_s())),
                Net::Wan(_) => c
                    .link_ratio(r)
                    .map_or_else(|| "?".into(), |x| format!("{} link", ratio(x))),
            }
        };
        let per_batch = |t: &Option<Tally>| match t {
            Some(t) => format!(
                "{:.1} ({:.0} B)",
                t.records as f64 / t.batches.max(1) as f64,
                t.bytes as f64 / t.batches.max(1) as f64
            ),
            None => "?".into(),
        };
        let blank = |title: String, what: String, na: String| {
            let mut row = vec![title, what, na];
            row.resize(9, String::new());
            row
        };
        match &c.limit {
            Ok(r) => rows.push(vec![
                c.title(),
                limit_title(c.net).into(),
                format!("{:.1}", r.mb_s()),
                opt(r.batch_mb_s(), 1),
                vs(r),
                format!("{} (reader)", opt(r.cpu_per_gb(), 2)),
                String::new(),
                per_batch(&c.source_tally),
                String::new(),
            ]),
            Err(e) => rows.push(blank(c.title(), limit_title(c.net).into(), reasons.na(e))),
        }
        let mut ordered: Vec<&(Peer, Res<Run>)> = c.mirrors.iter().collect();
        ordered.sort_by_key(|(p, _)| knobs.peers.iter().position(|q| q == p));
        for (peer, run) in ordered {
            match run {
                Ok(r) => rows.push(vec![
                    c.title(),
                    peer.title().into(),
                    format!("{:.1}", r.mb_s()),
                    opt(r.batch_mb_s(), 1),
                    vs(r),
                    opt(r.cpu_per_gb(), 2),
                    opt(r.target_cpu_per_gb(), 2),
                    per_batch(&r.target_tally),
                    match &r.first {
                        Some(f) => format!("{:.2} s; {} / {}", f.secs, opt(f.cpu, 2), opt(f.target_cpu, 2)),
                        None => "?".into(),
                    },
                ]),
                Err(e) => rows.push(blank(c.title(), peer.title().into(), reasons.na(e))),
            }
        }
    }
    print_table(
        &[
            "case",
            "mirror",
            "MB/s",
            "batch MB/s",
            "x limit (LAN) / link (WAN)",
            "mirror CPU s/GB",
            "target broker CPU s/GB",
            "records (bytes) per batch on the target",
            "start-up: s; mirror / target CPU s",
        ],
        &rows,
    );
    println!();
}

/// The LAN cases' ratios against their goals, one column per case.
fn print_lan_ratios(kind: Kind, cases: &[&CaseResult]) {
    let titles: Vec<String> = cases.iter().map(|c| c.title()).collect();
    let mut header: Vec<&str> = vec!["ratio (goal)"];
    header.extend(titles.iter().map(String::as_str));
    let mut rows: Vec<Vec<String>> = Vec::new();
    type Cell<'a> = Box<dyn Fn(&CaseResult) -> Option<String> + 'a>;
    let mut row = |name: &str, cell: Cell<'_>| {
        let mut r = vec![name.to_owned()];
        r.extend(cases.iter().map(|c| cell(c).unwrap_or_else(|| "n/a".into())));
        rows.push(r);
    };
    if kind == Kind::Kafka {
        row(
            "MB per mirror CPU s, Strait / MM2 (>= 3)",
            Box::new(|c| {
                let x = c.mirror(Peer::Strait)?.mb_per_cpu_s()? / c.mirror(Peer::Mm2)?.mb_per_cpu_s()?;
                Some(goal(x, Some(x >= 3.0)))
            }),
        );
        row(
            "MB/s, Strait / MM2 (>= 1)",
            Box::new(|c| {
                let x = c.mirror(Peer::Strait)?.mb_s() / c.mirror(Peer::Mm2)?.mb_s();
                Some(goal(x, Some(x >= 1.0)))
            }),
        );
        row(
            "target broker CPU s per GB, Strait / MM2 (<= 1)",
            Box::new(|c| {
                let x = c.mirror(Peer::Strait)?.target_cpu_per_gb()?
                    / c.mirror(Peer::Mm2)?.target_cpu_per_gb()?;
                Some(goal(x, Some(x <= 1.0)))
            }),
        );
        row(
            "  the same three, second half of the copy",
            Box::new(|c| {
                let s = c.mirror(Peer::Strait)?.second_half()?;
                let m = c.mirror(Peer::Mm2)?.second_half()?;
                Some(format!(
                    "{} / {} / {}",
                    ratio(s.mb_per_cpu_s()? / m.mb_per_cpu_s()?),
                    ratio(s.mb_s() / m.mb_s()),
                    ratio(s.target_cpu_per_gb()? / m.target_cpu_per_gb()?)
                ))
            }),
        );
    }
    row(
        "MB/s, Strait / librdkafka",
        Box::new(|c| {
            Some(ratio(
                c.mirror(Peer::Strait)?.mb_s() / c.mirror(Peer::Rdkafka)?.mb_s(),
            ))
        }),
    );
    row(
        "MB per mirror CPU s, Strait / librdkafka",
        Box::new(|c| {
            Some(ratio(
                c.mirror(Peer::Strait)?.mb_per_cpu_s()? / c.mirror(Peer::Rdkafka)?.mb_per_cpu_s()?,
            ))
        }),
    );
    row(
        "target broker CPU s per GB, Strait / librdkafka",
        Box::new(|c| {
            Some(ratio(
                c.mirror(Peer::Strait)?.target_cpu_per_gb()?
                    / c.mirror(Peer::Rdkafka)?.target_cpu_per_gb()?,
            ))
        }),
    );
    row(
        "MB/s, Strait / fetch limit (>= 0.8)",
        Box::new(|c| {
            let x = c.mirror(Peer::Strait)?.mb_s() / c.limit.as_ref().ok()?.mb_s();
            Some(goal(x, Some(x >= 0.8)))
        }),
    );
    print_table(&header, &rows);
    println!();
}

/// One link's cases: a row per (partitions, compression), each peer's batch
/// MB/s and its ratio to the link, then the goals of each case.
fn print_wan_link(knobs: &Knobs, kind: Kind, link: Link, cases: &[&CaseResult], reasons: &mut Reasons) {
    let peers: Vec<Peer> = [Peer::Strait, Peer::Mm2, Peer::Rdkafka]
        .into_iter()
        .filter(|p| knobs.peers.contains(p) && p.runs_on(kind))
        .collect();
    let mm2 = peers.contains(&Peer::Mm2);
    println!(
        "{} over the WAN, {} ({} Mbit/s each way, window {} per connection): MB/s of record batches as stored \
         on the source (what crosses the link), x link = over {} MB/s",
        kind.title(),
        link.title(),
        link.mb_s * 8,
        window_text(knobs.wan_window),
        link.mb_s
    );
    let mut header: Vec<String> = [
        "partitions",
        "compression",
        "source MB",
        "bare fetch MB/s",
        "x link",
    ]
    .map(String::from)
    .to_vec();
    for peer in &peers {
        header.push(format!("{} MB/s", peer.title()));
        header.push("x link".into());
    }
    if mm2 {
        header.push("MB per mirror CPU s, Strait / MM2 (>= 3)".into());
        header.push("target CPU s per GB, Strait / MM2 (<= 1)".into());
    }
    let mut rows = Vec::new();
    for c in cases {
        let mut row = vec![
            c.spec.partitions.to_string(),
            c.spec.codec.name().to_owned(),
            c.source_tally
                .map_or_else(|| "?".into(), |t| format!("{:.1}", t.bytes as f64 / 1e6)),
        ];
        let mut cells = |run: Option<&Res<Run>>, row: &mut Vec<String>| match run {
            Some(Ok(r)) => {
                row.push(opt(r.batch_mb_s(), 1));
                row.push(c.link_ratio(r).map_or_else(|| "?".into(), ratio));
            }
            Some(Err(e)) => {
                row.push(reasons.na(e));
                row.push(String::new());
            }
            None => {
                row.push("-".into());
                row.push(String::new());
            }
        };
        cells(Some(&c.limit), &mut row);
        for peer in &peers {
            cells(
                c.mirrors.iter().find(|(p, _)| p == peer).map(|(_, r)| r),
                &mut row,
            );
        }
        if mm2 {
            let s = c.mirror(Peer::Strait);
            let m = c.mirror(Peer::Mm2);
            let cpu = (|| Some(s?.mb_per_cpu_s()? / m?.mb_per_cpu_s()?))();
            let target = (|| Some(s?.target_cpu_per_gb()? / m?.target_cpu_per_gb()?))();
            row.push(cpu.map_or_else(|| "n/a".into(), |x| goal(x, Some(x >= 3.0))));
            row.push(target.map_or_else(|| "n/a".into(), |x| goal(x, Some(x <= 1.0))));
        }
        rows.push(row);
    }
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    print_table(&header, &rows);
    println!("goals over {} (issue 22):", link.title());
    for c in cases {
        let strait = c.mirror(Peer::Strait);
        let mut line = format!("  {} p, {}: ", c.spec.partitions, c.spec.codec.name());
        match strait.and_then(|s| c.link_ratio(s)) {
            Some(x) => {
                let _ = write!(line, "Strait {} x link (>= 0.9) {}", ratio(x), verdict(x >= 0.9));
            }
            None => line.push_str("Strait x link n/a"),
        }
        for other in [Peer::Mm2, Peer::Rdkafka]
            .into_iter()
            .filter(|p| peers.contains(p))
        {
            match (strait, c.mirror(other)) {
                (Some(s), Some(o)) => {
                    let x = s.mb_s() / o.mb_s();
                    let _ = write!(
                        line,
                        "; Strait / {} {} (> 1) {}",
                        other.title(),
                        ratio(x),
                        verdict(x > 1.0)
                    );
                }
                _ => {
                    let _ = write!(line, "; Strait / {} n/a", other.title());
                }
            }
        }
        println!("{line}");
    }
    println!();
}

/// The latency runs over `link`, against the goal p99 <= round trip + 50 ms.
fn print_latency(knobs: &Knobs, link: Link, latencies: &[LatencyResult], reasons: &mut Reasons) {
    let budget = (link.rtt_ms + 50) as f64;
    let runs: Vec<&LatencyResult> = latencies.iter().filter(|l| l.link == link).collect();
    if runs.is_empty() {
        let why = if knobs.latency_secs == 0 {
            "MIRROR_BENCH_LATENCY_SECS=0"
        } else {
            "no mirror of MIRROR_BENCH_LATENCY_PEERS ran"
        };
        println!(
            "replication latency over {}: not measured ({why})\n",
            link.title()
        );
        return;
    }
    println!(
        "replication latency over {}, {} records/s for {} s (1 KiB, {PARTITIONS} partitions, lz4), read by a \
         librdkafka consumer beside the target: time read minus the source's append time; goal p99 <= round trip + 50 ms = \
         {budget:.0} ms",
        link.title(),
        knobs.latency_rate,
        knobs.latency_secs
    );
    for run in runs {
        match &run.latency {
            Ok(l) => {
                let mut line = format!(
                    "  {}: p50 {:.0} ms, p99 {:.0} ms (max {:.0}, {} records): p99 <= {budget:.0} ms {}",
                    run.peer.title(),
                    l.p50,
                    l.p99,
                    l.max,
                    l.records,
                    verdict(l.p99 <= budget)
                );
                if run.peer == Peer::Strait {
                    let _ = write!(
                        line,
                        "; strait_mirror_replication_latency_seconds p50 <= {}, p99 <= {} (bucket bounds; first \
                         record of each batch)",
                        bound(l.hist_p50),
                        bound(l.hist_p99)
                    );
                }
                println!("{line}");
            }
            Err(e) => println!("  {}: {}", run.peer.title(), reasons.na(e)),
        }
    }
    println!();
}

/// WARN/ERROR lines of the mirrors' and brokers' logs.
fn print_log_summary(work: &Path) {
    let Ok(entries) = fs::read_dir(work) else { return };
    let mut logs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    for log in logs {
        let text = fs::read_to_string(&log).unwrap_or_default();
        let flagged: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panicked"))
            .collect();
        let name = log
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        if flagged.is_empty() {
            println!("{name}: no WARN/ERROR lines");
        } else {
            println!("{name}: {} WARN/ERROR lines, first 3:", flagged.len());
            for l in flagged.iter().take(3) {
                println!("  {l}");
            }
        }
    }
}
