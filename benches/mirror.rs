//! The mirror benchmark: `strait mirror` against MirrorMaker 2, a plain
//! librdkafka consume-then-produce mirror and the limit of what can be read
//! from the source, Apache Kafka to Apache Kafka, on the same data in the
//! same run: on loopback and over an emulated WAN, with sources written in
//! small batches (the Java client's defaults) and in large ones; then the
//! replication latency at a fixed rate over that WAN.
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
//! round-robin over the 16 partitions of one source topic per batch size,
//! produced by librdkafka (the `rdkafka` crate) with lz4, acks=all and
//! idempotence:
//!
//! - *small* (`mirror-bench-small`): linger.ms=0 and batch.size
//!   `MIRROR_BENCH_SMALL_BATCH_BYTES` (16384), the Java producer's classic
//!   defaults (5 requests in flight, as Java's): about 15 records a batch,
//!   what most applications write;
//! - *large* (`mirror-bench-large`): linger.ms=5 and batch.size
//!   `MIRROR_BENCH_BATCH_BYTES` (1000000, librdkafka's default).
//!
//! Each value is 512 bytes that no codec shrinks and 512 bytes of text that
//! repeats across records: about 2:1 under lz4, so that what crosses the WAN
//! is neither the raw size nor next to nothing. MB are 10^6 bytes of record
//! values; "batch MB" are 10^6 bytes of the compressed record batches as
//! stored on the source, which is what crosses the link.
//!
//! **What runs, per case** (LAN or WAN, small or large batches), in the
//! order of `MIRROR_BENCH_PEERS` (default `strait,mm2,rdkafka`), rotated by
//! one from each case to the next (on a busy machine the first run of a
//! case was seen to cost the target more, whichever mirror it was):
//!
//! - *Fetch limit*: the whole topic read as fast as Strait's own upstream
//!   client (`strait-upstream`: `Cluster`, `Connection::request`) reads it:
//!   one connection, `MIRROR_BENCH_LIMIT_IN_FLIGHT` (default 4) Fetch
//!   requests in flight, each for its share of the 16 partitions, with the
//!   mirror's fetch settings (1 MiB per partition, 64 MiB per answer,
//!   read_committed); only batch headers are read. After one unmeasured
//!   pass the topic is read again until a second has passed; the figure is
//!   per pass. No mirror can go faster.
//! - *Strait's mirror*: `strait mirror --config FILE` copying the topic to
//!   the target (default settings).
//! - *MirrorMaker 2*: `org.apache.kafka.connect.mirror.MirrorMaker` (Kafka
//!   4.1.1, dedicated mode) with `connect-mirror-maker.sh`'s JVM settings
//!   (-Xms256M -Xmx2G, G1), `tasks.max` `MIRROR_BENCH_MM2_TASKS` (4),
//!   heartbeats, checkpoints, offset syncs and config/ACL syncing off (it
//!   only copies), the source consumer with the mirror's fetch settings and
//!   the producer re-batching with lz4, linger.ms=5 and batch.size 1000000
//!   (Connect keeps its one request in flight per task);
//!   `MIRROR_BENCH_MM2_OPTIONS` adds or overrides properties. The target
//!   topic is `mm2-CASE.TOPIC` (the source's cluster alias, default
//!   replication policy).
//! - *librdkafka mirror*: this binary re-run as a child process
//!   (`child-rdkafka-mirror`): a BaseConsumer assigned all 16 partitions
//!   from the beginning (no group joined; the mirror's fetch settings:
//!   fetch.max.bytes 64 MiB, 1 MiB per partition, fetch.wait.max.ms 500,
//!   queued.max.messages.kbytes 64 MiB like the mirror's
//!   max_bytes_in_flight, read_committed), each record handed to a
//!   BaseProducer (lz4, acks=all, idempotent, linger.ms=5, batch.size
//!   `MIRROR_BENCH_BATCH_BYTES`, whatever the source's batches) with the
//!   same partition, key, value, headers and CreateTime, into a target topic
//!   created beforehand.
//!
//! Every mirror writes into a target topic created beforehand (16
//! partitions, leaders elected), so that none pays for topic creation, and
//! is timed from its process start until the target's ListOffsets (latest;
//! polled every 50 ms until the first record, then every 200 ms, more often
//! as the end nears, down to every 10 ms) add up to every record. CPU seconds come from /proc/PID/stat: the
//! mirror's process, and the TARGET broker's, read before the start, when
//! the first record shows on the target, when half of them are there and at
//! the end. MB/s and CPU seconds per GB are those of the *copy* (from the
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
//! 20,000, of each batch size produced into scratch topics, so that its JVM
//! has compiled the produce path before the first mirror; the group
//! coordinators created on both brokers); each run starts once both brokers
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
//! `tc qdisc tbf` to `MIRROR_BENCH_WAN_MBIT` (netem is not in this kernel),
//! and reached from the target's side through the tests' delay relay
//! (`tests/support/relay.rs`), which adds half of `MIRROR_BENCH_WAN_RTT_MS`
//! each way. A source listens on the same port inside the namespace as its
//! relay does outside and advertises `127.0.0.1:PORT`, so clients in the
//! source's datacenter reach it directly and clients in the target's (the
//! mirrors, as MirrorMaker deployments run) cross the link. Kafka runs
//! there as `ip netns exec NS java ... kafka.Kafka`, its controller on the
//! namespace's own loopback. The same cases run over the link; then, for
//! the first pair, a Strait mirror of a fresh topic (its target topic
//! created beforehand, records only once its 16 partitions run) stays
//! running for the latency run: a
//! producer in the source's namespace (`child-rate-producer`) writes
//! `MIRROR_BENCH_LATENCY_RATE` records a second for
//! `MIRROR_BENCH_LATENCY_SECS` seconds, and a consumer on the target's side
//! reads the mirrored topic from its end: latency is the time a record is
//! read there minus its CreateTime. The mirror's own
//! `strait_mirror_replication_latency_seconds` histogram is printed beside.
//!
//! The bench reports; it fails only on wrong answers (a partition short of
//! records). Every figure is printed beside the goal the issue set for it,
//! as a ratio of two figures of the same run: Strait's mirror at least 3 x
//! MirrorMaker 2's MB per mirror CPU second, at least its MB/s on loopback
//! and 1.2 x over the WAN, and a target broker cost per GB no higher than
//! under MirrorMaker 2; at least 0.8 x the fetch limit on loopback and 0.8 x
//! the link over the WAN.
//!
//! Environment (see `scripts/bench-mirror`): `MIRROR_BENCH_RECORDS`,
//! `MIRROR_BENCH_BATCHES`, `MIRROR_BENCH_PEERS`, `MIRROR_BENCH_BROKERS`,
//! `MIRROR_BENCH_BATCH_BYTES`, `MIRROR_BENCH_SMALL_BATCH_BYTES`,
//! `MIRROR_BENCH_MM2_TASKS`, `MIRROR_BENCH_MM2_OPTIONS`,
//! `MIRROR_BENCH_KAFKA_HEAP`, `MIRROR_BENCH_WAN`, `MIRROR_BENCH_WAN_MBIT`,
//! `MIRROR_BENCH_WAN_RTT_MS`, `MIRROR_BENCH_LATENCY_RATE`,
//! `MIRROR_BENCH_LATENCY_SECS`, `MIRROR_BENCH_LIMIT_IN_FLIGHT`,
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

/// The source topics are `TOPIC_PREFIX-small` and `TOPIC_PREFIX-large`.
const TOPIC_PREFIX: &str = "mirror-bench";
/// The latency run's source topic.
const LATENCY_TOPIC: &str = "mirror-bench-latency";
/// Partitions of every topic.
const PARTITIONS: i32 = 16;
/// Size of every record value.
const RECORD_BYTES: usize = 1024;
/// Bytes of each value that no codec shrinks; the rest is repeated text.
const RANDOM_BYTES: usize = 512;
/// linger.ms of the large-batch producers (the source's, the librdkafka
/// mirror's, the latency run's).
const LARGE_LINGER_MS: u32 = 5;
/// The mirror's fetch settings (mirror/src/partition.rs, mirror.rs), which
/// the fetch limit, the librdkafka mirror and MirrorMaker 2 use too.
const FETCH_PARTITION_BYTES: i32 = 1 << 20;
const FETCH_MAX_BYTES: i32 = 64 << 20;
const FETCH_MAX_WAIT_MS: i32 = 500;
/// The mirror's default `max_bytes_in_flight`.
const MIRROR_BUDGET_BYTES: u64 = 64 << 20;
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

    fn topic(self) -> String {
        format!("{TOPIC_PREFIX}-{}", self.name())
    }

    /// The source producers' (linger.ms, batch.size).
    fn producer(self, knobs: &Knobs) -> (u32, u64) {
        match self {
            Batches::Small => (0, knobs.small_batch_bytes),
            Batches::Large => (LARGE_LINGER_MS, knobs.batch_bytes),
        }
    }
}

/// Where the mirrors run relative to the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Net {
    Lan,
    Wan,
}

impl Net {
    fn name(self) -> &'static str {
        match self {
            Net::Lan => "lan",
            Net::Wan => "wan",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Net::Lan => "LAN",
            Net::Wan => "WAN",
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
    wan: bool,
    wan_mbit: u64,
    wan_rtt_ms: u64,
    latency_rate: u64,
    latency_secs: u64,
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
    let records = env_u64("MIRROR_BENCH_RECORDS", 200_000)?.max(PARTITIONS as u64);
    Ok(Knobs {
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
        peers: env_list(
            "MIRROR_BENCH_PEERS",
            &[Peer::Strait, Peer::Mm2, Peer::Rdkafka],
            |w| match w {
                "strait" => Some(Peer::Strait),
                "mm2" | "mirrormaker" | "mirrormaker2" => Some(Peer::Mm2),
                "rdkafka" | "librdkafka" => Some(Peer::Rdkafka),
                _ => None,
            },
        )?,
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
        wan: env_u64("MIRROR_BENCH_WAN", 1)? != 0,
        wan_mbit: env_u64("MIRROR_BENCH_WAN_MBIT", 200)?.max(1),
        wan_rtt_ms: env_u64("MIRROR_BENCH_WAN_RTT_MS", 50)?,
        latency_rate: env_u64("MIRROR_BENCH_LATENCY_RATE", 2_000)?.max(1),
        latency_secs: env_u64("MIRROR_BENCH_LATENCY_SECS", 20)?,
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
    })
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
    /// Per batch size: the source topic's end offsets.
    topics: Vec<(Batches, Vec<i64>)>,
}

/// One case's results: the fetch limit and every mirror.
struct CaseResult {
    kind: Kind,
    net: Net,
    batches: Batches,
    limit: Res<Run>,
    /// (records, batches, bytes) of the source topic, from the limit.
    source_tally: Option<Tally>,
    mirrors: Vec<(Peer, Res<Run>)>,
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
        for (batches, ends) in &pair.topics {
            results.push(run_case(
                &ctx,
                pair.kind,
                Net::Lan,
                *batches,
                source,
                &pair.target,
                ends,
            ));
        }
    }

    // The WAN.
    let mut wan_skipped = None;
    let mut latency: Res<Latency> = Err("not run".into());
    if !ctx.knobs.wan {
        wan_skipped = Some("MIRROR_BENCH_WAN=0".to_owned());
    } else {
        match Wan::setup(&ctx.knobs) {
            Err(e) => {
                println!("WAN part skipped: {e}");
                wan_skipped = Some(e);
            }
            Ok(mut wan) => {
                println!(
                    "\nWAN: sources in namespace {} behind {} Mbit/s each way and {} ms round trip",
                    wan.ns, ctx.knobs.wan_mbit, ctx.knobs.wan_rtt_ms
                );
                for (i, pair) in pairs.iter_mut().enumerate() {
                    // The source moves behind the link, on the same data.
                    let Some(mut source) = pair.source.take() else {
                        continue;
                    };
                    if let Err(e) = source.stop() {
                        println!("  note: {} source shutdown: {e}", pair.kind.name());
                    }
                    let port = wan.expose(&ctx.knobs);
                    let moved = match pair.kind {
                        Kind::Kafka => source.restart_kafka(&ctx, Some((&wan.ns, port))),
                        Kind::Strait => Broker::start_strait(
                            &ctx,
                            &format!("{}-source-wan", pair.kind.name()),
                            &source.dir,
                            Some((&wan.ns, port)),
                        ),
                    };
                    drop(source);
                    let source = match moved {
                        Ok(s) => s,
                        Err(e) => {
                            println!(
                                "WAN {}: the source did not start behind the link: {e}",
                                pair.kind.name()
                            );
                            for (batches, _) in &pair.topics {
                                results.push(CaseResult {
                                    kind: pair.kind,
                                    net: Net::Wan,
                                    batches: *batches,
                                    limit: Err(format!("the source did not start behind the link: {e}")),
                                    source_tally: None,
                                    mirrors: Vec::new(),
                                });
                            }
                            continue;
                        }
                    };
                    println!(
                        "WAN {}: source behind the link at 127.0.0.1:{port}",
                        pair.kind.title()
                    );
                    for (batches, ends) in &pair.topics {
                        results.push(run_case(
                            &ctx,
                            pair.kind,
                            Net::Wan,
                            *batches,
                            &source,
                            &pair.target,
                            ends,
                        ));
                    }
                    if i == 0 && ctx.knobs.latency_secs > 0 {
                        latency = latency_run(&ctx, &wan, port, &source, &pair.target);
                        match &latency {
                            Ok(l) => println!(
                                "WAN replication latency: {} records, p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; \
                                 mirror histogram p50 <= {}, p99 <= {}\n  {}",
                                l.records,
                                l.p50,
                                l.p99,
                                l.max,
                                bound(l.hist_p50),
                                bound(l.hist_p99),
                                l.detail
                            ),
                            Err(e) => println!("WAN replication latency: n/a: {e}"),
                        }
                    }
                    pair.source = Some(source);
                    // Idle behind the link from now on: stopped, so that it
                    // takes no CPU from the next pair's runs.
                    if let Some(s) = pair.source.as_mut() {
                        let _ = s.stop();
                    }
                }
                wan.teardown();
            }
        }
    }
    if ctx.knobs.latency_secs == 0 {
        latency = Err("MIRROR_BENCH_LATENCY_SECS=0".into());
    }

    println!();
    print_report(&ctx.knobs, &results, wan_skipped.as_deref(), &latency);
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
    for &batches in &ctx.knobs.batches {
        let topic = batches.topic();
        create_topic(&source.bootstrap(), &topic, PARTITIONS)?;
        let (linger, batch_bytes) = batches.producer(&ctx.knobs);
        let secs = fill_source(
            &source.bootstrap(),
            &topic,
            ctx.knobs.records,
            linger,
            batch_bytes,
        )?;
        let ends = wait_offsets(&source.bootstrap(), &topic)?;
        if ends.iter().sum::<i64>() != ctx.knobs.records as i64 {
            return Err(format!(
                "{topic} holds {} records after {} were produced (per partition {ends:?})",
                ends.iter().sum::<i64>(),
                ctx.knobs.records
            ));
        }
        println!(
            "  {topic} filled: {} records in {:.1} s ({:.0} MB/s from librdkafka, lz4, linger.ms={linger}, \
             batch.size={batch_bytes})",
            ctx.knobs.records,
            secs,
            mb(ctx.knobs.records) / secs
        );
        topics.push((batches, ends));
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
/// records, at least 20,000, of each batch size written into a scratch
/// topic, as the sources were), both brokers create their group
/// coordinator's topic (an offset commit; the mirrors commit to the source,
/// MirrorMaker 2's Connect group lives on the target), and the target's
/// [`Baseline`] is taken once it is quiet.
fn warm_up(ctx: &Ctx, pair: &mut Pair) -> Res<()> {
    let started = Instant::now();
    let target = pair.target.bootstrap();
    let source = pair.source.as_ref().expect("the source runs").bootstrap();
    let records = (ctx.knobs.records / 2).max(20_000);
    let mut scratch = String::new();
    for &batches in &ctx.knobs.batches {
        scratch = format!("{TOPIC_PREFIX}-warmup-{}", batches.name());
        create_topic(&target, &scratch, PARTITIONS)?;
        let (linger, batch_bytes) = batches.producer(&ctx.knobs);
        fill_source(&target, &scratch, records, linger, batch_bytes)?;
    }
    commit_offset(&source, &ctx.knobs.batches[0].topic())?;
    commit_offset(&target, &scratch)?;
    settle(ctx, &pair.target);
    pair.target.baseline = measure_baseline(ctx, &pair.target, &scratch);
    println!(
        "  target warmed up in {:.1} s ({records} records of each batch size into {TOPIC_PREFIX}-warmup-*, \
         group coordinators ready); its baseline: {:.3} cores idle, {:.2} ms of CPU per offset poll",
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
    let mut watch = OffsetWatch::new(&broker.bootstrap(), topic);
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

/// The fetch limit and every mirror of one case.
fn run_case(
    ctx: &Ctx,
    kind: Kind,
    net: Net,
    batches: Batches,
    source: &Broker,
    target: &Broker,
    ends: &[i64],
) -> CaseResult {
    let topic = batches.topic();
    println!(
        "\n== {} {}, {} batches ({topic})",
        kind.title(),
        net.title(),
        batches.name()
    );
    let (limit, tally) = match measure_fetch(ctx, &source.bootstrap(), &topic, ends) {
        Ok((run, tally)) => (Ok(run), Some(tally)),
        Err(e) => (Err(e), None),
    };
    print_run("fetch limit (strait-upstream)", &limit);
    if let Some(t) = &tally {
        println!(
            "  source batches: {} of {:.1} records, {:.0} B each on average ({:.1} MB for {:.1} MB of values, \
             lz4 {:.2}:1)",
            t.batches,
            t.records as f64 / t.batches.max(1) as f64,
            t.bytes as f64 / t.batches.max(1) as f64,
            t.bytes as f64 / 1e6,
            mb(t.records),
            mb(t.records) * 1e6 / t.bytes.max(1) as f64
        );
    }
    let case = Case {
        kind,
        net,
        batches,
        source,
        target,
        ends,
        batch_bytes: tally.as_ref().map(|t| t.bytes),
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
    let case_index = match net {
        Net::Lan => 0,
        Net::Wan => ctx.knobs.batches.len(),
    } + ctx.knobs.batches.iter().position(|b| *b == batches).unwrap_or(0);
    if !peers.is_empty() {
        let n = case_index % peers.len();
        peers.rotate_left(n);
    }
    let mut mirrors = Vec::new();
    for peer in peers {
        let run = match peer {
            Peer::Strait => run_strait_mirror(ctx, &case),
            Peer::Mm2 => run_mm2(ctx, &case),
            Peer::Rdkafka => run_rdkafka_mirror(ctx, &case),
        };
        print_run(peer.title(), &run);
        mirrors.push((peer, run));
    }
    CaseResult {
        kind,
        net,
        batches,
        limit,
        source_tally: tally,
        mirrors,
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
        "  data:    {} records x {RECORD_BYTES} B (no key; {RANDOM_BYTES} B random + text) over {PARTITIONS} \
         partitions, librdkafka {librdkafka}, lz4, acks=all, idempotent; source batches {}",
        knobs.records,
        batches.join(", ")
    );
    println!(
        "  fetch:   {} MiB per partition, {} MiB per answer, max wait {FETCH_MAX_WAIT_MS} ms, read_committed \
         (the mirror's; the limit keeps {} requests in flight on one connection)",
        FETCH_PARTITION_BYTES >> 20,
        FETCH_MAX_BYTES >> 20,
        knobs.limit_in_flight
    );
    println!(
        "  MM2:     tasks.max={}, producer lz4, linger.ms=5, batch.size=1000000{}",
        knobs.mm2_tasks,
        if knobs.mm2_options.is_empty() {
            String::new()
        } else {
            format!("; plus {}", knobs.mm2_options.join("; "))
        }
    );
    if knobs.wan {
        println!(
            "  WAN:     {} Mbit/s each way (tc tbf on a veth pair), {} ms round trip (delay relay), source \
             behind it, mirrors and target on this side; latency at {} records/s for {} s",
            knobs.wan_mbit, knobs.wan_rtt_ms, knobs.latency_rate, knobs.latency_secs
        );
    }
    if !knobs.cluster_options.is_empty() {
        println!("  Strait mirror clusters get: {}", knobs.cluster_options);
    }
    if !knobs.mirror_options.is_empty() {
        println!("  the Strait mirror gets: {}", knobs.mirror_options.join("; "));
    }
    println!(
        "  MB = 10^6 B of record values; batch MB = 10^6 B of record batches as stored (lz4); rates and CPU \
         per GB of the copy (first record on the target to last), start-up apart"
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
        .arg(format!("-Xms{}", ctx.knobs.kafka_heap))
        .args(KAFKA_JVM_OPTS)
        .arg(format!(
            "-Dlog4j2.configurationFile={}",
            ctx.work.join("log4j2.properties").display()
        ))
        .arg("-cp")
        .arg(support::kafka::kafka_classpath())
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

/// The settings of every librdkafka producer here: lz4, acks=all,
/// idempotence (so at most 5 requests in flight, as Java's), and the given
/// batching.
fn producer_config(bootstrap: &str, client_id: &str, linger_ms: u32, batch_bytes: u64) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("client.id", client_id)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("compression.type", "lz4")
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

/// Produces `records` records round-robin into `topic`; returns the
/// seconds it took.
fn fill_source(bootstrap: &str, topic: &str, records: u64, linger_ms: u32, batch_bytes: u64) -> Res<f64> {
    let producer: ThreadedProducer<Deliveries> =
        producer_config(bootstrap, "mirror-bench-fill", linger_ms, batch_bytes)
            .create_with_context(Deliveries::default())
            .map_err(|e| format!("producer: {e}"))?;
    let start = Instant::now();
    let mut value = vec![0u8; RECORD_BYTES];
    for i in 0..records {
        fill_value(i, &mut value);
        send_value(&producer, topic, (i % PARTITIONS as u64) as i32, &value)?;
    }
    wait_deliveries(producer.context(), records)?;
    Ok(start.elapsed().as_secs_f64())
}

/// Creates `topic` (replication factor 1), retrying for a while: a Kafka
/// node just started may not take it at once.
fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Res<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match try_create_topic(bootstrap, topic, partitions) {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(e) if e.contains("TopicAlreadyExists") || e.contains("already exists") => return Ok(()),
            Err(_) => thread::sleep(Duration::from_millis(500)),
        }
    }
}

fn try_create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Res<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("client.id", "mirror-bench-admin")
        .create()
        .map_err(|e| format!("admin client: {e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
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

/// Latest offsets of every partition of `topic` (partition order), or
/// `None` while the broker does not know the topic.
fn latest_offsets(bootstrap: &str, topic: &str) -> Res<Option<Vec<i64>>> {
    OffsetWatch::new(bootstrap, topic).latest()
}

/// Latest offsets of `topic`, waiting (up to 30 s) for every partition to
/// have a leader.
fn wait_offsets(bootstrap: &str, topic: &str) -> Res<Vec<i64>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match latest_offsets(bootstrap, topic) {
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
    stream: Option<TcpStream>,
    id: i32,
}

impl OffsetWatch {
    fn new(bootstrap: &str, topic: &str) -> OffsetWatch {
        OffsetWatch {
            bootstrap: bootstrap.to_owned(),
            topic: topic.to_owned(),
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
                    (0..PARTITIONS)
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
        let mut offsets = vec![-1i64; PARTITIONS as usize];
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
/// run per pass and one pass's tally.
fn measure_fetch(ctx: &Ctx, bootstrap: &str, topic: &str, ends: &[i64]) -> Res<(Run, Tally)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
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
    let run = Run {
        records: tally.records,
        batch_bytes: Some(tally.bytes),
        secs,
        cpu,
        detail: format!(
            "per pass, mean of {passes}; CPU: this bench's process (the reader, and over the WAN the \
             delay relay's threads), not the source broker's"
        ),
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

/// One read of the whole topic, the partitions split between `in_flight`
/// tasks.
async fn read_all(connection: &Connection, topic: &str, ends: &[i64], in_flight: usize) -> Res<Tally> {
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..in_flight {
        let mine: Vec<(i32, i64)> = (0..PARTITIONS)
            .filter(|p| *p as usize % in_flight == k)
            .map(|p| (p, ends[p as usize]))
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
    net: Net,
    batches: Batches,
    source: &'a Broker,
    target: &'a Broker,
    /// The source topic's end offsets.
    ends: &'a [i64],
    /// Bytes of the source topic's batches (from the fetch limit).
    batch_bytes: Option<u64>,
}

impl Case<'_> {
    fn topic(&self) -> String {
        self.batches.topic()
    }

    /// "lan-small": part of the mirrors' and the target topics' names.
    fn name(&self) -> String {
        format!("{}-{}", self.net.name(), self.batches.name())
    }

    /// "kafka-lan-small": part of file names.
    fn tag(&self) -> String {
        format!("{}-{}", self.kind.name(), self.name())
    }

    fn records(&self) -> u64 {
        self.ends.iter().sum::<i64>() as u64
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
    let mut watch = OffsetWatch::new(&case.target.bootstrap(), topic);
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
    let start = Instant::now();
    let mut proc = spawn()?;
    let done = wait_mirrored(ctx, case, topic, &mut proc, start)?;
    let cpu = proc.cpu(ctx.clk);
    let mut detail = watch.describe(cpu);
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

/// Creates a mirror's target topic beforehand (16 partitions) and waits for
/// its leaders, so that no mirror pays for topic creation in its run.
fn create_target_topic(case: &Case<'_>, topic: &str) -> Res<()> {
    create_topic(&case.target.bootstrap(), topic, PARTITIONS)?;
    wait_offsets(&case.target.bootstrap(), topic)?;
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

    fn metrics(&self) -> Res<String> {
        http_get(self.admin_port, "/metrics")
    }
}

/// Runs `strait mirror` until the target holds every record.
fn run_strait_mirror(ctx: &Ctx, case: &Case<'_>) -> Res<Run> {
    let name = case.name();
    let topic = format!("strait-{name}.{}", case.topic());
    create_target_topic(case, &topic)?;
    let mut admin_port = 0;
    let (mut run, proc) = measure_mirror(ctx, case, &topic, || {
        let m = StraitMirror::spawn(
            ctx,
            &case.source.bootstrap(),
            &case.target.bootstrap(),
            &name,
            &case.topic(),
            &case.tag(),
        )?;
        admin_port = m.admin_port;
        Ok(m.proc)
    })?;
    let mut mirror = StraitMirror { proc, admin_port };
    match mirror.metrics() {
        Ok(m) => {
            let records = metric_sum(&m, "strait_mirror_records_total{");
            let reencoded = metric_sum_with(&m, "strait_mirror_batches_total{", "reencoded");
            let passed = metric_sum(&m, "strait_mirror_batches_total{") - reencoded;
            let errors = metric_sum(&m, "strait_mirror_errors_total{");
            let _ = write!(
                run.detail,
                "\nmirror /metrics: {records:.0} records, {passed:.0} batches passed through, {reencoded:.0} re-encoded, {errors:.0} errors"
            );
        }
        Err(e) => {
            let _ = write!(run.detail, "\nmirror /metrics: {e}");
        }
    }
    match mirror.proc.stop() {
        Ok(took) => {
            let _ = write!(run.detail, "; exited {:.1} s after SIGTERM", took.as_secs_f64());
        }
        Err(e) => {
            let _ = write!(run.detail, "; {e}");
        }
    }
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
        format!("{alias}->dst.topics = {}", case.topic()),
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
        // The source consumer with the mirror's fetch settings.
        format!("{alias}.consumer.fetch.max.bytes = {FETCH_MAX_BYTES}"),
        format!("{alias}.consumer.max.partition.fetch.bytes = {FETCH_PARTITION_BYTES}"),
        format!("{alias}.consumer.fetch.max.wait.ms = {FETCH_MAX_WAIT_MS}"),
        format!("{alias}.consumer.isolation.level = read_committed"),
        // The producer re-batching into large lz4 batches.
        "dst.producer.compression.type = lz4".into(),
        format!("dst.producer.linger.ms = {LARGE_LINGER_MS}"),
        format!("dst.producer.batch.size = {}", knobs.batch_bytes),
    ];
    lines.extend(knobs.mm2_options.iter().cloned());
    lines.join("\n") + "\n"
}

/// Runs MirrorMaker 2 until the target holds every record.
fn run_mm2(ctx: &Ctx, case: &Case<'_>) -> Res<Run> {
    let alias = format!("mm2-{}", case.name());
    let topic = format!("{alias}.{}", case.topic());
    create_target_topic(case, &topic)?;
    let properties = ctx.work.join(format!("{}-mm2.properties", case.tag()));
    fs::write(&properties, mm2_properties(ctx, case, &alias))
        .map_err(|e| format!("writing {}: {e}", properties.display()))?;
    let (mut run, mut proc) = measure_mirror(ctx, case, &topic, || {
        let mut cmd = Command::new("java");
        cmd.args(MM2_HEAP)
            .args(KAFKA_JVM_OPTS)
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                ctx.work.join("log4j2.properties").display()
            ))
            .arg("-cp")
            .arg(support::kafka::kafka_classpath())
            .arg("org.apache.kafka.connect.mirror.MirrorMaker")
            .arg(&properties)
            .env_remove("LD_LIBRARY_PATH")
            .current_dir(&ctx.work)
            .stdin(Stdio::null());
        Proc::spawn(
            cmd,
            "MirrorMaker 2",
            ctx.work.join(format!("{}-mm2.log", case.tag())),
            Some(&properties),
        )
    })?;
    match proc.stop_within(Duration::from_secs(60)) {
        Ok(took) => {
            let _ = write!(run.detail, "\nexited {:.1} s after SIGTERM", took.as_secs_f64());
        }
        Err(e) => {
            let _ = write!(run.detail, "\n{e}");
        }
    }
    tally_target(case, &topic, &mut run);
    Ok(run)
}

/// Runs the librdkafka mirror (this binary, `child-rdkafka-mirror`) until
/// the target holds every record.
fn run_rdkafka_mirror(ctx: &Ctx, case: &Case<'_>) -> Res<Run> {
    let topic = format!("rdkafka-{}.{}", case.name(), case.topic());
    create_target_topic(case, &topic)?;
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let (mut run, mut proc) = measure_mirror(ctx, case, &topic, || {
        let mut cmd = Command::new(exe);
        cmd.args([
            "child-rdkafka-mirror",
            &case.source.bootstrap(),
            &case.target.bootstrap(),
            &case.topic(),
            &topic,
            &case.records().to_string(),
            &ctx.knobs.batch_bytes.to_string(),
        ])
        // The child waits for its stdin to close before it exits, so that
        // its CPU time can be read when the target is complete.
        .stdin(Stdio::piped())
        .current_dir(&ctx.work);
        Proc::spawn(
            cmd,
            "librdkafka mirror",
            ctx.work.join(format!("{}-rdkafka.log", case.tag())),
            None,
        )
    })?;
    drop(proc.child.stdin.take());
    let deadline = Instant::now() + Duration::from_secs(10);
    while proc.exited().is_none() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    tally_target(case, &topic, &mut run);
    Ok(run)
}

/// The librdkafka mirror, in a child process: args SOURCE TARGET TOPIC
/// TARGET_TOPIC RECORDS BATCH_BYTES.
fn child_rdkafka_mirror(args: &[String]) -> Res<()> {
    let [source, target, topic, target_topic, records, batch_bytes] = args else {
        return Err(format!(
            "child-rdkafka-mirror: 6 arguments expected, got {args:?}"
        ));
    };
    let records: u64 = records.parse().map_err(|e| format!("records: {e}"))?;
    let batch_bytes: u64 = batch_bytes.parse().map_err(|e| format!("batch bytes: {e}"))?;
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
        LARGE_LINGER_MS,
        batch_bytes,
    )
    .create_with_context(Deliveries::default())
    .map_err(|e| format!("producer: {e}"))?;
    let mut assignment = TopicPartitionList::new();
    for p in 0..PARTITIONS {
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
/// network namespace: args BOOTSTRAP TOPIC RATE SECS BATCH_BYTES.
fn child_rate_producer(args: &[String]) -> Res<()> {
    let [bootstrap, topic, rate, secs, batch_bytes] = args else {
        return Err(format!("child-rate-producer: 5 arguments expected, got {args:?}"));
    };
    let rate: u64 = rate.parse().map_err(|e| format!("rate: {e}"))?;
    let secs: u64 = secs.parse().map_err(|e| format!("secs: {e}"))?;
    let batch_bytes: u64 = batch_bytes.parse().map_err(|e| format!("batch bytes: {e}"))?;
    let producer: ThreadedProducer<Deliveries> =
        producer_config(bootstrap, "mirror-bench-rate", LARGE_LINGER_MS, batch_bytes)
            .create_with_context(Deliveries::default())
            .map_err(|e| format!("producer: {e}"))?;
    producer
        .client()
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| format!("metadata: {e}"))?;
    let total = rate * secs;
    let mut value = vec![0u8; RECORD_BYTES];
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
    wait_deliveries(producer.context(), total)?;
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

/// Sum of every sample whose line starts with `prefix`.
fn metric_sum(metrics: &str, prefix: &str) -> f64 {
    metric_sum_with(metrics, prefix, "")
}

/// Sum of every sample whose line starts with `prefix` and contains `with`.
fn metric_sum_with(metrics: &str, prefix: &str, with: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(prefix) && l.contains(with))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |a, b| a + b)
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
    /// The namespace's end of the veth pair has `SUBNET.2`.
    subnet: String,
    relays: Vec<Relay>,
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
            subnet: subnet.clone(),
            relays: Vec::new(),
        };
        let rate = format!("{}mbit", knobs.wan_mbit);
        // tbf's bucket: 5 ms of the rate, at least 64 KiB (a GSO segment).
        let burst = (knobs.wan_mbit * 1_000_000 / 8 / 200).max(64 << 10).to_string();
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
            vec![
                "tc", "qdisc", "add", "dev", &veth, "root", "tbf", "rate", &rate, "burst", &burst, "latency",
                "100ms",
            ],
            vec![
                "ip", "netns", "exec", &ns, "tc", "qdisc", "add", "dev", &peer, "root", "tbf", "rate", &rate,
                "burst", &burst, "latency", "100ms",
            ],
        ]
        .into_iter()
        .map(|v| v.into_iter().map(str::to_owned).collect())
        .collect();
        for step in &steps {
            let args: Vec<&str> = step.iter().map(String::as_str).collect();
            if let Err(e) = sh(&args) {
                wan.teardown();
                return Err(format!("cannot build the emulated WAN: {e}"));
            }
        }
        Ok(wan)
    }

    /// A delay relay on a free loopback port here, to the same port inside
    /// the namespace (where every port is free): a source started there on
    /// that port is reached through it. Returns the port.
    fn expose(&mut self, knobs: &Knobs) -> u16 {
        let relay = Relay::start(
            ([127, 0, 0, 1], 9).into(),
            Duration::from_micros(knobs.wan_rtt_ms * 1000 / 2),
        );
        let port = relay.port();
        let inside: SocketAddr = format!("{}.2:{port}", self.subnet)
            .parse()
            .expect("an IPv4 socket address");
        relay.retarget(inside);
        self.relays.push(relay);
        port
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

#[derive(Debug, Clone)]
struct Latency {
    records: u64,
    p50: f64,
    p99: f64,
    max: f64,
    hist_p50: Option<f64>,
    hist_p99: Option<f64>,
    detail: String,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Records produced at a fixed rate in the source's datacenter into a
/// fresh topic that a Strait mirror copies, read on the target's side:
/// read time minus CreateTime.
fn latency_run(ctx: &Ctx, wan: &Wan, port: u16, source: &Broker, target: &Broker) -> Res<Latency> {
    let knobs = &ctx.knobs;
    create_topic(&source.bootstrap(), LATENCY_TOPIC, PARTITIONS)?;
    wait_offsets(&source.bootstrap(), LATENCY_TOPIC)?;
    // The target topic too, with its leaders elected: partitions of a topic
    // the mirror has just created retry (with back-off) while they have
    // none, and would measure that instead.
    let topic = format!("strait-wan-latency.{LATENCY_TOPIC}");
    create_topic(&target.bootstrap(), &topic, PARTITIONS)?;
    let from = wait_offsets(&target.bootstrap(), &topic)?;
    let tag = format!("{}-wan-latency", source.kind.name());
    let mut mirror = StraitMirror::spawn(
        ctx,
        &source.bootstrap(),
        &target.bootstrap(),
        "wan-latency",
        LATENCY_TOPIC,
        &tag,
    )?;
    // Every partition of the mirror running before records come.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let running = mirror
            .metrics()
            .map(|m| metric_sum_with(&m, "strait_mirror_partition_status{", "status=\"running\""))
            .unwrap_or(0.0);
        if running >= PARTITIONS as f64 {
            break;
        }
        if let Some(gone) = mirror.proc.gone() {
            return Err(gone);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{running} of {PARTITIONS} mirror partitions running after 60 s; {}",
                log_tail(&mirror.proc.log, 8)
            ));
        }
        thread::sleep(Duration::from_millis(100));
    }
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", target.bootstrap())
        .set("client.id", "mirror-bench-latency")
        .set("group.id", "mirror-bench-latency")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .create()
        .map_err(|e| format!("consumer: {e}"))?;
    consumer
        .fetch_metadata(Some(&topic), Duration::from_secs(10))
        .map_err(|e| format!("consumer metadata: {e}"))?;
    let mut assignment = TopicPartitionList::new();
    for (p, offset) in from.iter().enumerate() {
        assignment
            .add_partition_offset(&topic, p as i32, Offset::Offset(*offset))
            .map_err(|e| e.to_string())?;
    }
    consumer.assign(&assignment).map_err(|e| format!("assign: {e}"))?;
    // Let the consumer's first fetches reach the broker, and the mirror's
    // first (empty) fetches the source, before records come.
    let _ = consumer.poll(Duration::from_millis(1000));
    let histogram_before = histogram(&mirror.metrics()?, "strait_mirror_replication_latency_seconds");
    let mirror_cpu = mirror.proc.cpu(ctx.clk);
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &wan.ns])
        .arg(exe)
        .args([
            "child-rate-producer",
            &format!("127.0.0.1:{port}"),
            LATENCY_TOPIC,
            &knobs.latency_rate.to_string(),
            &knobs.latency_secs.to_string(),
            &knobs.batch_bytes.to_string(),
        ])
        .stdin(Stdio::null())
        .current_dir(&ctx.work);
    let mut producer = Proc::spawn(
        cmd,
        "rate producer",
        ctx.work.join(format!("{tag}-rate-producer.log")),
        None,
    )?;
    let total = knobs.latency_rate * knobs.latency_secs;
    let mut latencies: Vec<f64> = Vec::with_capacity(total as usize);
    let mut progress = Instant::now();
    while (latencies.len() as u64) < total {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let read = now_ms();
                if let Some(ts) = m.timestamp().to_millis() {
                    latencies.push((read - ts) as f64);
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
                log_tail(&mirror.proc.log, 8)
            ));
        }
    }
    let histogram_after = histogram(&mirror.metrics()?, "strait_mirror_replication_latency_seconds");
    let mirror_cpu = match (mirror_cpu, mirror.proc.cpu(ctx.clk)) {
        (Some(b), Some(a)) => format!("{:.2}", a - b),
        _ => "?".into(),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while producer.exited().is_none() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    let produced = fs::read_to_string(&producer.log).unwrap_or_default();
    let stopped = match mirror.proc.stop() {
        Ok(took) => format!("mirror exited {:.1} s after SIGTERM", took.as_secs_f64()),
        Err(e) => e,
    };
    latencies.sort_by(f64::total_cmp);
    Ok(Latency {
        records: latencies.len() as u64,
        p50: percentile(&latencies, 50.0),
        p99: percentile(&latencies, 99.0),
        max: latencies[latencies.len() - 1],
        hist_p50: histogram_quantile(&histogram_before, &histogram_after, 0.5),
        hist_p99: histogram_quantile(&histogram_before, &histogram_after, 0.99),
        detail: format!(
            "{}; mirror CPU {mirror_cpu} s meanwhile; {stopped}",
            produced.lines().last().unwrap_or("rate producer: no report")
        ),
    })
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
    fn title(&self) -> String {
        format!("{} {}", self.net.title(), self.batches.name())
    }

    fn mirror(&self, peer: Peer) -> Option<&Run> {
        self.mirrors.iter().find(|(p, _)| *p == peer)?.1.as_ref().ok()
    }
}

fn print_report(knobs: &Knobs, results: &[CaseResult], wan_skipped: Option<&str>, latency: &Res<Latency>) {
    let link = knobs.wan_mbit as f64 / 8.0;
    let mut reasons: Vec<String> = Vec::new();
    let mut na = |e: &str| {
        let i = reasons.iter().position(|r| r == e).unwrap_or_else(|| {
            reasons.push(e.to_owned());
            reasons.len() - 1
        });
        format!("n/a [{}]", i + 1)
    };
    for &kind in &knobs.brokers {
        let cases: Vec<&CaseResult> = results.iter().filter(|c| c.kind == kind).collect();
        if cases.is_empty() {
            continue;
        }
        println!(
            "{}: {} records x 1 KiB, {PARTITIONS} partitions, lz4; MB/s and CPU s per GB of the copy (first \
             record on the target to last); start-up = seconds to the first record, and the CPU seconds the \
             mirror and the target broker spent by then",
            kind.title(),
            knobs.records
        );
        let mut rows = Vec::new();
        for c in &cases {
            let limit = c.limit.as_ref().ok();
            let vs = |r: &Run| -> String {
                match c.net {
                    Net::Lan => limit.map_or_else(|| "?".into(), |l| ratio(r.mb_s() / l.mb_s())),
                    Net::Wan => r
                        .batch_mb_s()
                        .map_or_else(|| "?".into(), |b| format!("{} link", ratio(b / link))),
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
            match &c.limit {
                Ok(r) => rows.push(vec![
                    c.title(),
                    "fetch limit".into(),
                    format!("{:.1}", r.mb_s()),
                    opt(r.batch_mb_s(), 1),
                    vs(r),
                    format!("{} (reader)", opt(r.cpu_per_gb(), 2)),
                    String::new(),
                    per_batch(&c.source_tally),
                    String::new(),
                ]),
                Err(e) => rows.push(vec![
                    c.title(),
                    "fetch limit".into(),
                    na(e),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                ]),
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
                            Some(f) => {
                                format!("{:.2} s; {} / {}", f.secs, opt(f.cpu, 2), opt(f.target_cpu, 2))
                            }
                            None => "?".into(),
                        },
                    ]),
                    Err(e) => rows.push(vec![
                        c.title(),
                        peer.title().into(),
                        na(e),
                        String::new(),
                        String::new(),
                        String::new(),
                        String::new(),
                        String::new(),
                        String::new(),
                    ]),
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

        // The ratios, one column per case.
        let titles: Vec<String> = cases.iter().map(|c| c.title()).collect();
        let mut header: Vec<&str> = vec!["ratio (goal)"];
        header.extend(titles.iter().map(String::as_str));
        let mut rows: Vec<Vec<String>> = Vec::new();
        type Cell<'a> = Box<dyn Fn(&CaseResult) -> Option<String> + 'a>;
        let mut row = |name: String, cell: Cell<'_>| {
            let mut r = vec![name];
            r.extend(cases.iter().map(|c| cell(c).unwrap_or_else(|| "n/a".into())));
            rows.push(r);
        };
        let goal = |x: f64, ok: Option<bool>| match ok {
            Some(ok) => format!("{} {}", ratio(x), verdict(ok)),
            None => ratio(x),
        };
        if kind == Kind::Kafka {
            row(
                "MB per mirror CPU s, Strait / MM2 (>= 3)".into(),
                Box::new(|c| {
                    let x = c.mirror(Peer::Strait)?.mb_per_cpu_s()? / c.mirror(Peer::Mm2)?.mb_per_cpu_s()?;
                    Some(goal(x, Some(x >= 3.0)))
                }),
            );
            row(
                "MB/s, Strait / MM2 (>= 1 LAN, >= 1.2 WAN)".into(),
                Box::new(|c| {
                    let x = c.mirror(Peer::Strait)?.mb_s() / c.mirror(Peer::Mm2)?.mb_s();
                    let want = if c.net == Net::Lan { 1.0 } else { 1.2 };
                    Some(goal(x, Some(x >= want)))
                }),
            );
            row(
                "target broker CPU s per GB, Strait / MM2 (<= 1)".into(),
                Box::new(|c| {
                    let x = c.mirror(Peer::Strait)?.target_cpu_per_gb()?
                        / c.mirror(Peer::Mm2)?.target_cpu_per_gb()?;
                    Some(goal(x, Some(x <= 1.0)))
                }),
            );
            row(
                "  the same three, second half of the copy".into(),
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
            "MB/s, Strait / librdkafka".into(),
            Box::new(|c| {
                Some(ratio(
                    c.mirror(Peer::Strait)?.mb_s() / c.mirror(Peer::Rdkafka)?.mb_s(),
                ))
            }),
        );
        row(
            "MB per mirror CPU s, Strait / librdkafka".into(),
            Box::new(|c| {
                Some(ratio(
                    c.mirror(Peer::Strait)?.mb_per_cpu_s()? / c.mirror(Peer::Rdkafka)?.mb_per_cpu_s()?,
                ))
            }),
        );
        row(
            "target broker CPU s per GB, Strait / librdkafka".into(),
            Box::new(|c| {
                Some(ratio(
                    c.mirror(Peer::Strait)?.target_cpu_per_gb()?
                        / c.mirror(Peer::Rdkafka)?.target_cpu_per_gb()?,
                ))
            }),
        );
        row(
            "MB/s, Strait / fetch limit (>= 0.8 LAN)".into(),
            Box::new(|c| {
                let x = c.mirror(Peer::Strait)?.mb_s() / c.limit.as_ref().ok()?.mb_s();
                Some(goal(x, (c.net == Net::Lan).then_some(x >= 0.8)))
            }),
        );
        row(
            "batch MB/s, Strait / link (>= 0.8 WAN)".into(),
            Box::new(|c| {
                if c.net != Net::Wan {
                    return Some("-".into());
                }
                let x = c.mirror(Peer::Strait)?.batch_mb_s()? / link;
                Some(goal(x, Some(x >= 0.8)))
            }),
        );
        print_table(&header, &rows);
        println!();
    }
    if let Some(skipped) = wan_skipped {
        println!(
            "WAN ({} Mbit/s, {} ms RTT): skipped: {skipped}",
            knobs.wan_mbit, knobs.wan_rtt_ms
        );
    } else {
        let budget = 50.0 + knobs.wan_rtt_ms as f64;
        match latency {
            Ok(l) => {
                println!(
                    "WAN ({} Mbit/s, {} ms RTT) replication latency through the Strait mirror, {} records/s for \
                     {} s, {}: read on the target minus CreateTime p50 {:.0} ms, p99 {:.0} ms (max {:.0}): \
                     p99 < {budget:.0} ms {}; strait_mirror_replication_latency_seconds p50 <= {}, p99 <= {} \
                     (bucket bounds; first record of each batch)",
                    knobs.wan_mbit,
                    knobs.wan_rtt_ms,
                    knobs.latency_rate,
                    knobs.latency_secs,
                    knobs.brokers[0].title(),
                    l.p50,
                    l.p99,
                    l.max,
                    verdict(l.p99 < budget),
                    bound(l.hist_p50),
                    bound(l.hist_p99)
                );
            }
            Err(e) => println!("WAN replication latency: {}", na(e)),
        }
    }
    for (i, r) in reasons.iter().enumerate() {
        println!("[{}] {r}", i + 1);
    }
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
