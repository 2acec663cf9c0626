//! The router benchmark: the same load, in the same run, sent straight to
//! an upstream broker (Apache Kafka by default), through Strait (`strait
//! serve` routing every topic to that upstream) and through two other Kafka
//! proxies, Tansu's (`tansu proxy`) and Kroxylicious, first on loopback,
//! then with a round trip added between the front and the upstream. It
//! answers the issue's question: what does routing through Strait cost a
//! client, against going direct to Kafka and against other Kafka proxies?
//!
//! Run it with `scripts/bench-router [DIR]`, which installs the peers
//! (`scripts/peers`, `scripts/peers.d/kroxylicious`), builds Strait and
//! calls `cargo bench --bench router -- WORKDIR`.
//!
//! **The upstream** (`ROUTER_BENCH_UPSTREAM`): `kafka` (the default, the
//! reference), Apache Kafka from the jars `scripts/peers` installs (the
//! tests' classpath, `support::kafka::kafka_classpath`): one combined
//! broker and controller (KRaft, node id 1, 1 GB heap, G1), its
//! `server.properties` written here (not `support::kafka::Kafka::start`,
//! which advertises its own port: the WAN case needs the relay's), its
//! data in the case's directory; `tansu`, one Tansu 0.6.0 broker (memory
//! storage); or `strait`, one `strait serve --listen 127.0.0.1:PORT
//! --data-dir DIR` (no config: local topics on disk, DIR in the run's
//! directory, removed after the run). Every header says which upstream a
//! run used.
//!
//! **JVMs are not measured cold.** Kafka is started once per network case
//! (with the relay in front of it in the WAN case), not once per run, and
//! warmed up before the first run: `ROUTER_BENCH_JVM_WARMUP_RECORDS`
//! (default 50000) records produced and consumed as fast as they go, then
//! 2 s of 5,000 records/s with a consumer polling (the latency runs' long
//! polls), all unmeasured, through the direct path. Each run then creates
//! its topics on it and deletes them after. Kroxylicious in front of Kafka
//! is kept the same way (started by its first run of the case and warmed
//! up through itself). With a Tansu or Strait upstream, everything is
//! fresh for each run as before, Kroxylicious too (warmed up in each run
//! before its clock starts).
//!
//! **The paths.**
//! - *direct*: the clients bootstrap from the upstream address and talk to
//!   the upstream (through the relay in the WAN case, see below);
//! - *Strait*: `strait serve --config F` with one cluster `up` (bootstrap:
//!   the upstream address) and the one route `{ regex: ".*", to: up }`
//!   (every topic upstream, names unchanged), checked first with `strait
//!   check --config F`. Strait presents itself as the only broker;
//! - *tansu proxy*: `tansu proxy --origin-url tcp://UPSTREAM`, advertising
//!   itself (it fronts any Kafka broker, a Strait upstream too; where it
//!   fails, its figures are n/a with the reason: in front of Kafka 4.1 its
//!   Metadata answers to librdkafka 2.12, which asks for v13, come out
//!   short, "Read underflow", so every phase is n/a there);
//! - *Kroxylicious*: kroxylicious-runtime 0.12.0 (`scripts/peers.d/kroxylicious`;
//!   Maven Central here has no kroxylicious-app, so a launcher of a few
//!   lines does what its `io.kroxylicious.app.Kroxylicious` does), 512 MB
//!   heap: one virtual cluster with the upstream address as its target
//!   and no filters, a `portIdentifiesNode` gateway with a bootstrap port
//!   and one port for the upstream's broker (its node id asked first).
//!
//! Each run checks that the metadata a client gets through its path names
//! one broker, the path's own address (Kroxylicious's: its port for the
//! upstream's broker), so the clients really go through the front (and the
//! fronts are not bypassed).
//!
//! **The network cases.** *loopback*: the upstream address is the
//! upstream's own. *+RTT* (`ROUTER_BENCH_WAN_RTT_MS`, default 50 ms): the
//! tests' delay relay (`tests/support/relay.rs`, half the round trip each
//! way, in a child process of this binary so that its CPU is counted
//! apart) stands in front of the upstream, which advertises the relay's
//! address: the relay is started on a dummy target, the upstream with the
//! relay as its advertised address (Kafka `advertised.listeners`, Tansu
//! `--advertised-listener-url`, Strait `--advertised`), and the relay then
//! retargeted at the upstream. Every connection to the upstream crosses
//! the delay: the direct clients', Strait's and the proxies'; the clients'
//! hop to Strait or to a proxy does not.
//!
//! **Every run** starts fresh processes on free loopback ports (the relay, the
//! upstream, and the path's front, if any, except what a Kafka upstream's
//! case keeps, see above), creates a fresh topic of 8 partitions directly on
//! the upstream (AdminClient; Tansu would auto-create 4; the sequential and
//! pipelining runs create theirs of one partition, see 5. and 6.), and stops
//! them all after (on a kept Kafka: deletes its topics). Records are 1 KiB
//! values without a key, spread round-robin over the partitions by the
//! producer; every producer is librdkafka (the `rdkafka` crate) with acks
//! `ROUTER_BENCH_ACKS` (default 1),
//! linger.ms `ROUTER_BENCH_LINGER_MS` (default 5), no compression, no
//! idempotence, every other setting librdkafka's default (among them up to
//! 1,000,000 requests in flight per connection; it sends one Produce request
//! per partition batch). Consumers are assigned all partitions from the
//! beginning, no group joined (a group id is set, librdkafka wants one), fetch
//! settings librdkafka's defaults. Records are counted by consuming them, per
//! partition, never from watermarks: Tansu's ListOffsets under-reports when
//! batches hold many records.
//!
//! 1. *Produce throughput*: `ROUTER_BENCH_RECORDS` records sent as fast as
//!    the producer takes them, timed from the first send to the last
//!    delivery report, after one record to each partition was sent and
//!    delivered unmeasured (so every connection on the path is open and
//!    Strait knows the topic's leaders: over the round trip a run lasts
//!    only a few of them, and opening connections on the way would count
//!    two or three more against the front).
//! 2. *Consume throughput*: those records read back by a new consumer,
//!    timed from the assignment (after its metadata) to the last record.
//! 3. *Produce latency* at half of the maximum load: the median records/s
//!    of the direct path's produce runs (1.), halved, is the rate of every
//!    path's latency runs (the same for all; `ROUTER_BENCH_LATENCY_RATE`
//!    overrides it). Those runs come after all throughput runs of a network
//!    case. A producer paces records at that rate for
//!    `ROUTER_BENCH_WARMUP_SECS` (default 1, not measured) plus
//!    `ROUTER_BENCH_LATENCY_SECS` (default 5) seconds; the latency of each
//!    record is its delivery report's time minus its send time.
//! 4. *End-to-end fetch latency*, in the same runs: a consumer polling
//!    through the same path from before the first record was sent; a
//!    record's latency is the time it was polled minus the time stamped
//!    into its value just before it was sent (a monotonic clock shared by
//!    producer and consumer, both in this process; microsecond resolution,
//!    which a Kafka CreateTime in milliseconds would not give on loopback).
//! 5. *Sequential produce latency* (the overhead, without the load: at
//!    half the maximum load the machine's queueing and the upstream's
//!    jitter swamp what a front adds), in both network cases, on every
//!    path, after the case's latency runs: one setup per run with a fresh
//!    topic of one partition and one producer, linger.ms 0 (acks
//!    `ROUTER_BENCH_ACKS`, every other setting as above), that sends one
//!    record of 1 KiB, waits for its delivery report, then sends the next:
//!    `SEQUENTIAL_WARMUP` (100) unmeasured, then
//!    `ROUTER_BENCH_SEQUENTIAL_RECORDS` (default 3000) measured, each
//!    record's latency its delivery report's time minus its send time
//!    (after its metadata was checked, so its connection is open). With the
//!    round trip every record waits for one (3000 records would take 150 s
//!    per run at 50 ms), so that case sends
//!    `ROUTER_BENCH_WAN_SEQUENTIAL_RECORDS` (default: 500, or
//!    `ROUTER_BENCH_SEQUENTIAL_RECORDS` if fewer). `ROUTER_BENCH_SEQUENTIAL=0`
//!    skips them.
//! 6. *Pipelining*, in the +RTT case only, on every path, after the case's
//!    sequential runs: the issue's
//!    "over a 50 ms link to an upstream, a producer with 5 requests in
//!    flight gets about 5x the throughput of one at a time". One setup per
//!    run (relay, upstream, the front) with three fresh topics of one
//!    partition, and three producers one after the other, each to its own
//!    topic: `max.in.flight.requests.per.connection` 1, 5 and librdkafka's
//!    default (1,000,000; in that order in odd repetitions, reversed in even
//!    ones), every other setting as above (acks `ROUTER_BENCH_ACKS`,
//!    linger.ms `ROUTER_BENCH_LINGER_MS`). Each producer checks its metadata,
//!    sends one record and waits for its delivery (its connection to the
//!    leader is then open, and over the round trip opening it would cost
//!    the direct path two round trips that Strait's hop on loopback does
//!    not), then sends `ROUTER_BENCH_PIPELINE_RECORDS` records (default
//!    50000) as fast as it takes them, timed from the first send to the last
//!    delivery report. One partition, not the 8 of the other runs:
//!    librdkafka puts one partition's batch in a Produce request, so with one
//!    partition every request but the last carries a full batch of it and
//!    the in-flight limit alone decides how many round trips overlap (with
//!    8, each partition fills its batch 8 times slower, the first batches
//!    leave small at linger.ms and each partition ends on a short one); and
//!    Strait has to overlap one partition's requests upstream while keeping
//!    them in order. A batch holds at most
//!    batch.size (librdkafka's default, 1,000,000 B: about 967 records of
//!    1 KiB), so one request at a time carries about 1 MB per round trip;
//!    with N batches to send, 5 in flight need about N / 5 + 1 round trips
//!    for N, which is 4.0x for 20,000 records (21 batches) and 4.6x for the
//!    default 50,000 (52): with fewer records even a perfect pipeline
//!    cannot show "about 5x".
//!
//! Runs alternate between the paths (D S T K, K T S D, D S T K, ...) and every
//! figure is the median of `ROUTER_BENCH_REPEAT` runs (default 3). A run that
//! fails (an error, a stall of 30 s, a process exiting, a latency run whose
//! producer falls 10 s behind its schedule because the path does not carry the
//! rate) is reported as "n/a" with the reason, and the bench goes on. Every
//! phase of every run prints the CPU seconds (from /proc) of the upstream, of
//! the front (Strait or a proxy), of the relay, of this process (the
//! clients: librdkafka) and of everything else on the machine (on a shared
//! machine, other work skews a run); the tables give their medians. At the end
//! come the WARN/ERROR lines of Strait's, Kafka's and Kroxylicious's logs and
//! the notes of each path (librdkafka's error reports, a producer behind its
//! schedule).
//!
//! The report: one table per network case, a column per path (direct, Strait,
//! tansu proxy, Kroxylicious) and rows throughput (produce, consume), produce
//! latency p50/p99 and end-to-end fetch latency p50/p99, with Strait / each
//! other path for throughput and the milliseconds Strait adds to each other
//! path's latencies, and a goal column; after each, the overhead table: the
//! sequential produce latency p50/p99/max per path and the milliseconds each
//! front adds to the direct path's; after the +RTT case's, the pipelining
//! table: records/s per in-flight limit on every path, Strait/direct, and the
//! ratios of the medians with 5 and with the default in flight over the median
//! with one; then the issue's goals, each met or missed, decided on this run's
//! medians and printed with the ratio or difference: Strait at least 0.9 x
//! direct throughput (produce and consume, in both cases); at most 1 ms added
//! p99 (produce and end-to-end fetch) at half of the maximum load on loopback;
//! on loopback, at most 1 ms added to the direct sequential produce latency p99
//! (not one of the issue's: the overhead without the machine's queueing); ahead
//! of every proxy peer (higher throughput, lower p99) in both cases; over the
//! round trip, a producer with 5 requests in flight through Strait at "about
//! 5x" (counted as at least 4x) the records/s of one with one request in flight
//! (the other paths' ratios are printed beside it, for reference).
//!
//! Environment (see `scripts/bench-router`): `ROUTER_BENCH_UPSTREAM` (`kafka`,
//! the default, `tansu` or `strait`), `ROUTER_BENCH_RECORDS` (default
//! 100000), `ROUTER_BENCH_WAN_RECORDS` (default: `ROUTER_BENCH_RECORDS`),
//! `ROUTER_BENCH_REPEAT`, `ROUTER_BENCH_LATENCY_SECS`,
//! `ROUTER_BENCH_WARMUP_SECS`, `ROUTER_BENCH_LATENCY_RATE`,
//! `ROUTER_BENCH_PATHS` (default `direct,strait,tansu-proxy,kroxylicious`,
//! `proxy` meaning `tansu-proxy`; the runs of the others are left out),
//! `ROUTER_BENCH_JVM_WARMUP_RECORDS` (default 50000), `ROUTER_BENCH_LOOPBACK`
//! (0: no loopback case), `ROUTER_BENCH_WAN` (0: no case with the added round
//! trip), `ROUTER_BENCH_WAN_RTT_MS`, `ROUTER_BENCH_PIPELINE` (0: no pipelining
//! runs), `ROUTER_BENCH_PIPELINE_RECORDS` (default 50000),
//! `ROUTER_BENCH_SEQUENTIAL` (0: no sequential runs),
//! `ROUTER_BENCH_SEQUENTIAL_RECORDS` (default 3000),
//! `ROUTER_BENCH_WAN_SEQUENTIAL_RECORDS`, `ROUTER_BENCH_ACKS`,
//! `ROUTER_BENCH_LINGER_MS` (the sequential producers' is 0),
//! `ROUTER_BENCH_KEEP`, `STRAIT_BIN`, `TANSU_BIN`, `KROXYLICIOUS_DIR`.

// What the benches share (process and CPU accounting, the librdkafka load
// generator, the report's cells), with the integration tests' harness (free
// ports, the readiness check and the delay relay).
#[path = "common/mod.rs"]
mod common;

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{Producer, ThreadedProducer};

use common::support::{self, relay::Relay};
use common::{
    cell, client_errors, env_u64, loadavg, median, payload, print_rows, send, Cell, ConsumerErrors,
    Deliveries, Proc, Res, Stats, PARTITIONS, RECORD_BYTES, STALL,
};

/// A latency run whose producer falls this far behind its schedule (its
/// path does not carry the rate) is given up.
const MAX_BEHIND: Duration = Duration::from_secs(10);
/// librdkafka's `max.in.flight.requests.per.connection` of the pipelining
/// producers, in the order of the first repetition: 1, 5 and librdkafka's
/// default (none set).
const IN_FLIGHT: [Option<u32>; 3] = [Some(1), Some(5), None];
/// librdkafka's default `max.in.flight.requests.per.connection`.
const DEFAULT_IN_FLIGHT: u32 = 1_000_000;
/// Partitions of the pipelining topics.
const PIPELINE_PARTITIONS: i32 = 1;
/// Partitions of the sequential (overhead) topics.
const SEQUENTIAL_PARTITIONS: i32 = 1;
/// Records each sequential producer sends, unmeasured, before the
/// measured ones.
const SEQUENTIAL_WARMUP: u64 = 100;
/// The default of `ROUTER_BENCH_WAN_SEQUENTIAL_RECORDS` at most: over the
/// round trip every sequential record waits for one.
const WAN_SEQUENTIAL_RECORDS: u64 = 500;
/// The goals the issue set.
const GOAL_THROUGHPUT_RATIO: f64 = 0.9;
const GOAL_ADDED_P99_MS: f64 = 1.0;
/// What Strait may add to the direct sequential produce latency p99 on
/// loopback.
const GOAL_SEQUENTIAL_ADDED_P99_MS: f64 = 1.0;
/// "About 5x" the throughput with 5 requests in flight over one at a time.
const GOAL_PIPELINE_RATIO: f64 = 4.0;

fn main() {
    // `cargo bench` adds `--bench`; our arguments are positional.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let outcome = match args.first().map(String::as_str) {
        Some("child-relay") => child_relay(&args[1..]),
        dir => bench(dir.map(PathBuf::from)),
    };
    if let Err(e) = outcome {
        eprintln!("router bench: {e}");
        std::process::exit(1);
    }
}

/// What the environment asked for.
#[derive(Debug, Clone)]
struct Knobs {
    records: u64,
    wan_records: u64,
    repeat: usize,
    latency_secs: u64,
    warmup_secs: u64,
    latency_rate: Option<u64>,
    ways: Vec<Way>,
    loopback: bool,
    wan: bool,
    wan_rtt_ms: u64,
    acks: String,
    linger_ms: u64,
    pipeline: bool,
    pipeline_records: u64,
    sequential: bool,
    sequential_records: u64,
    wan_sequential_records: u64,
    upstream: Upstream,
    /// Records produced and consumed through a JVM (Kafka, Kroxylicious)
    /// after it starts, unmeasured.
    jvm_warmup_records: u64,
    keep: bool,
    strait_bin: PathBuf,
    tansu_bin: PathBuf,
    /// Kroxylicious as `scripts/peers.d/kroxylicious` installs it.
    kroxylicious_dir: PathBuf,
}

fn knobs() -> Res<Knobs> {
    let records = env_u64("ROUTER_BENCH_RECORDS", 100_000)?.max(PARTITIONS as u64);
    let acks = std::env::var("ROUTER_BENCH_ACKS").unwrap_or_else(|_| "1".into());
    if !["0", "1", "all", "-1"].contains(&acks.as_str()) {
        return Err(format!("ROUTER_BENCH_ACKS={acks:?}: 0, 1 or all"));
    }
    let upstream = match std::env::var("ROUTER_BENCH_UPSTREAM") {
        Err(_) => Upstream::Kafka,
        Ok(v) => match v.trim() {
            "kafka" => Upstream::Kafka,
            "tansu" => Upstream::Tansu,
            "strait" => Upstream::Strait,
            _ => return Err(format!("ROUTER_BENCH_UPSTREAM={v:?}: kafka, tansu or strait")),
        },
    };
    let sequential_records = env_u64("ROUTER_BENCH_SEQUENTIAL_RECORDS", 3000)?.max(1);
    Ok(Knobs {
        records,
        wan_records: env_u64("ROUTER_BENCH_WAN_RECORDS", records)?.max(PARTITIONS as u64),
        repeat: env_u64("ROUTER_BENCH_REPEAT", 3)?.max(1) as usize,
        latency_secs: env_u64("ROUTER_BENCH_LATENCY_SECS", 5)?.max(1),
        warmup_secs: env_u64("ROUTER_BENCH_WARMUP_SECS", 1)?,
        latency_rate: match std::env::var("ROUTER_BENCH_LATENCY_RATE") {
            Ok(_) => Some(env_u64("ROUTER_BENCH_LATENCY_RATE", 0)?.max(1)),
            Err(_) => None,
        },
        ways: match std::env::var("ROUTER_BENCH_PATHS") {
            Err(_) => Way::ALL.to_vec(),
            Ok(v) => {
                let named = v
                    .split(',')
                    .map(|name| {
                        Way::parse(name.trim()).ok_or_else(|| {
                            format!(
                                "ROUTER_BENCH_PATHS={v:?}: direct, strait, tansu-proxy (proxy), kroxylicious"
                            )
                        })
                    })
                    .collect::<Res<Vec<Way>>>()?;
                // In the canonical order, each once.
                Way::ALL.into_iter().filter(|w| named.contains(w)).collect()
            }
        },
        loopback: env_u64("ROUTER_BENCH_LOOPBACK", 1)? != 0,
        wan: env_u64("ROUTER_BENCH_WAN", 1)? != 0,
        wan_rtt_ms: env_u64("ROUTER_BENCH_WAN_RTT_MS", 50)?,
        acks,
        linger_ms: env_u64("ROUTER_BENCH_LINGER_MS", 5)?,
        pipeline: env_u64("ROUTER_BENCH_PIPELINE", 1)? != 0,
        pipeline_records: env_u64("ROUTER_BENCH_PIPELINE_RECORDS", 50_000)?.max(1),
        sequential: env_u64("ROUTER_BENCH_SEQUENTIAL", 1)? != 0,
        sequential_records,
        wan_sequential_records: env_u64(
            "ROUTER_BENCH_WAN_SEQUENTIAL_RECORDS",
            sequential_records.min(WAN_SEQUENTIAL_RECORDS),
        )?
        .max(1),
        upstream,
        jvm_warmup_records: env_u64("ROUTER_BENCH_JVM_WARMUP_RECORDS", 50_000)?,
        keep: std::env::var("ROUTER_BENCH_KEEP").is_ok_and(|v| v == "1"),
        strait_bin: common::strait_bin(),
        tansu_bin: common::tansu_bin(),
        kroxylicious_dir: std::env::var_os("KROXYLICIOUS_DIR").map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".peers/kroxylicious"),
            PathBuf::from,
        ),
    })
}

/// The ways to the upstream: direct, and through each front.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    Direct,
    Strait,
    /// `tansu proxy`.
    TansuProxy,
    /// Kroxylicious, a virtual cluster without filters.
    Kroxylicious,
}

impl Way {
    const ALL: [Way; 4] = [Way::Direct, Way::Strait, Way::TansuProxy, Way::Kroxylicious];
    /// The other Kafka proxies, Strait's peers.
    const PROXIES: [Way; 2] = [Way::TansuProxy, Way::Kroxylicious];

    fn name(self) -> &'static str {
        match self {
            Way::Direct => "direct",
            Way::Strait => "strait",
            Way::TansuProxy => "tansu-proxy",
            Way::Kroxylicious => "kroxylicious",
        }
    }

    /// A name of `ROUTER_BENCH_PATHS` (`proxy`, the old name of
    /// `tansu-proxy`, too).
    fn parse(name: &str) -> Option<Way> {
        match name {
            "proxy" => Some(Way::TansuProxy),
            _ => Way::ALL.into_iter().find(|w| w.name() == name),
        }
    }

    fn title(self) -> &'static str {
        match self {
            Way::Direct => "direct",
            Way::Strait => "Strait",
            Way::TansuProxy => "tansu proxy",
            Way::Kroxylicious => "Kroxylicious",
        }
    }

    fn letter(self) -> char {
        match self {
            Way::Direct => 'D',
            Way::Strait => 'S',
            Way::TansuProxy => 'T',
            Way::Kroxylicious => 'K',
        }
    }

    /// The front's log in a run's directory.
    fn log(self) -> Option<&'static str> {
        match self {
            Way::Direct => None,
            Way::Strait => Some("strait.log"),
            Way::TansuProxy => Some("proxy.log"),
            Way::Kroxylicious => Some("kroxylicious.log"),
        }
    }
}

/// The upstream broker every path leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upstream {
    /// Apache Kafka, one combined broker and controller (KRaft), the
    /// reference: started once per network case.
    Kafka,
    /// One Tansu broker, memory storage.
    Tansu,
    /// `strait serve`, local topics on disk (no config).
    Strait,
}

impl Upstream {
    fn title(self) -> &'static str {
        match self {
            Upstream::Kafka => "Kafka",
            Upstream::Tansu => "Tansu",
            Upstream::Strait => "Strait",
        }
    }

    /// Its log in a run's directory (Kafka's: in the case's directory).
    fn log(self) -> &'static str {
        match self {
            Upstream::Kafka => "kafka.log",
            Upstream::Tansu => "tansu.log",
            Upstream::Strait => "upstream-strait.log",
        }
    }

    /// Whether it lives for a whole network case rather than one run: a
    /// JVM, started and warmed up once (its topics are deleted after each
    /// run).
    fn kept(self) -> bool {
        self == Upstream::Kafka
    }
}

/// Where the upstream Strait keeps its topics, in a run's directory (the
/// front Strait's: `FRONT_DATA`).
const UPSTREAM_DATA: &str = "upstream-data";
const FRONT_DATA: &str = "strait-data";

/// A network case: loopback, or a delay between the fronts and the upstream.
#[derive(Debug, Clone)]
struct Net {
    title: String,
    slug: &'static str,
    /// Added one way by the relay; none: no relay.
    one_way: Option<Duration>,
    records: u64,
    /// Records of each sequential producer (measured).
    sequential_records: u64,
}

impl Net {
    fn is_loopback(&self) -> bool {
        self.one_way.is_none()
    }
}

fn bench(dir: Option<PathBuf>) -> Res<()> {
    let knobs = knobs()?;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let work = match dir {
        Some(d) => d,
        None => root
            .join("target/bench-router")
            .join(format!("run.{}", std::process::id())),
    };
    fs::create_dir_all(&work).map_err(|e| format!("creating {}: {e}", work.display()))?;
    let clk = common::clock_ticks();
    print_facts(&knobs, &work);
    let started = Instant::now();

    let mut nets = Vec::new();
    if knobs.loopback {
        nets.push(Net {
            title: "loopback".into(),
            slug: "loopback",
            one_way: None,
            records: knobs.records,
            sequential_records: knobs.sequential_records,
        });
    } else {
        println!("(ROUTER_BENCH_LOOPBACK=0: no loopback case)");
    }
    if knobs.wan {
        nets.push(Net {
            title: format!("+{} ms between front and upstream", knobs.wan_rtt_ms),
            slug: "wan",
            one_way: Some(Duration::from_micros(knobs.wan_rtt_ms * 500)),
            records: knobs.wan_records,
            sequential_records: knobs.wan_sequential_records,
        });
    } else {
        println!("(ROUTER_BENCH_WAN=0: the loopback case only)");
    }

    let mut reports = Vec::new();
    for net in &nets {
        let dir = work.join(net.slug);
        fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        reports.push(run_case(&knobs, net, &dir, clk));
        println!();
    }

    println!("==> summary");
    for r in &reports {
        println!();
        r.print_table(&knobs);
        if r.sequenced {
            println!();
            r.print_sequential_table(&knobs);
        }
        if r.pipelined {
            println!();
            r.print_pipeline_table(&knobs);
        }
    }
    println!();
    print_goals(&reports, &knobs);
    println!();
    println!(
        "total bench time {:.0} s; load average now {}; logs under {} \
         (scripts/bench-router removes them unless ROUTER_BENCH_KEEP=1)",
        started.elapsed().as_secs_f64(),
        loadavg(),
        work.display()
    );
    for r in &reports {
        r.print_log_summary(&knobs);
    }
    Ok(())
}

fn print_facts(knobs: &Knobs, work: &Path) {
    let tansu_version = common::tansu_version(&knobs.tansu_bin);
    let ways: Vec<&str> = knobs.ways.iter().map(|w| w.title()).collect();
    println!(
        "router benchmark, upstream {}: {}; same load, same run",
        knobs.upstream.title(),
        ways.join(", ")
    );
    println!(
        "  machine:  nproc {}, {}, load average {}",
        common::nproc(),
        common::cpu_model(),
        loadavg()
    );
    match knobs.upstream {
        Upstream::Kafka => println!(
            "  upstream: Apache Kafka {} (ROUTER_BENCH_UPSTREAM=kafka, the reference), one combined broker and \
             controller (KRaft), heap {KAFKA_HEAP}, log.dirs under the run directory; started once per network case \
             and warmed up (unmeasured: {} records produced and consumed, then {WARMUP_PACED_SECS} s at \
             {WARMUP_RATE} records/s with a consumer polling); each run's topics deleted after it",
            kafka_version(),
            knobs.jvm_warmup_records
        ),
        Upstream::Tansu => println!(
            "  upstream: Tansu (ROUTER_BENCH_UPSTREAM=tansu): {tansu_version} broker, --storage-engine memory://tansu/, \
             fresh for each run"
        ),
        Upstream::Strait => println!(
            "  upstream: Strait (ROUTER_BENCH_UPSTREAM=strait): {} serve --listen --data-dir (no config: \
             local topics on disk, under the run directory), fresh for each run",
            knobs.strait_bin.display()
        ),
    }
    if knobs.ways.contains(&Way::Strait) {
        println!(
            "  strait:   {} serve --config (cluster up = the upstream, route {{ regex: \".*\", to: up }}), fresh for \
             each run",
            knobs.strait_bin.display()
        );
    }
    if knobs.ways.contains(&Way::TansuProxy) {
        println!("  tansu proxy:  {tansu_version} proxy --origin-url tcp://UPSTREAM, fresh for each run");
    }
    if knobs.ways.contains(&Way::Kroxylicious) {
        println!(
            "  Kroxylicious: {}; one virtual cluster, no filters, a portIdentifiesNode gateway (bootstrap port and \
             one port for the upstream's broker), heap {KROXYLICIOUS_HEAP}; {}, warmed up like Kafka ({} records)",
            kroxylicious_version(knobs),
            if knobs.upstream.kept() {
                "started once per network case, like Kafka"
            } else {
                "fresh for each run"
            },
            knobs.jvm_warmup_records
        );
    }
    println!(
        "  client:   rdkafka crate 0.39, librdkafka {}; work dir {}",
        common::librdkafka_version(),
        work.display()
    );
    println!(
        "  load:     {RECORD_BYTES} B values (no key) round-robin over {PARTITIONS} partitions, acks={}, linger.ms={}, \
         compression none; produce {} records (WAN {}), consume them back",
        knobs.acks, knobs.linger_ms, knobs.records, knobs.wan_records
    );
    println!(
        "  latency:  {} at {} s unmeasured + {} s measured, with a consumer polling through the same path",
        knobs.latency_rate.map_or_else(
            || "half of the direct path's median produce records/s".to_owned(),
            |r| format!("{r} records/s (ROUTER_BENCH_LATENCY_RATE)")
        ),
        knobs.warmup_secs,
        knobs.latency_secs
    );
    if knobs.sequential {
        println!(
            "  overhead: sequential produce latency, one record at a time (send, its delivery report, the next; \
             linger.ms=0, acks={}) to a topic of {SEQUENTIAL_PARTITIONS} partition, {} records (WAN {}) after \
             {SEQUENTIAL_WARMUP} unmeasured",
            knobs.acks, knobs.sequential_records, knobs.wan_sequential_records
        );
    }
    let letters: Vec<String> = knobs.ways.iter().map(|w| w.letter().to_string()).collect();
    let reversed: Vec<String> = letters.iter().rev().cloned().collect();
    let (letters, reversed) = (letters.join(" "), reversed.join(" "));
    println!(
        "  runs:     {} per path and phase, alternating ({letters}, {reversed}, ...); medians reported; \
         MB = 10^6 B of values",
        knobs.repeat
    );
    if knobs.wan {
        println!(
            "  WAN:      {} ms round trip added by the delay relay between every front (or direct client) and the \
             upstream ({})",
            knobs.wan_rtt_ms,
            knobs.upstream.title()
        );
        if knobs.pipeline {
            println!(
                "  pipeline: over that round trip, every path, {} records to a topic of {PIPELINE_PARTITIONS} \
                 partition per producer, max.in.flight.requests.per.connection 1, 5 and librdkafka's default \
                 ({DEFAULT_IN_FLIGHT})",
                knobs.pipeline_records
            );
        }
    }
    println!();
}

/// The Kafka version of the jars `scripts/peers` installed.
fn kafka_version() -> String {
    let Ok(libs) = std::panic::catch_unwind(support::kafka::kafka_libs) else {
        return "(not installed: scripts/peers installs it)".into();
    };
    fs::read_dir(&libs)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .find_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("kafka_2.13-")?
                .strip_suffix(".jar")
                .map(str::to_owned)
        })
        .unwrap_or_else(|| format!("(no kafka_2.13 jar in {})", libs.display()))
}

/// What `scripts/peers.d/kroxylicious` says it installed.
fn kroxylicious_version(knobs: &Knobs) -> String {
    let file = knobs.kroxylicious_dir.join("version");
    fs::read_to_string(&file).map_or_else(
        |_| {
            format!(
                "not installed in {} (scripts/peers.d/kroxylicious)",
                knobs.kroxylicious_dir.display()
            )
        },
        |v| v.trim().to_owned(),
    )
}

// ---------------------------------------------------------------------------
// Processes

/// The delay relay in a child process (this binary, `child-relay`): its
/// CPU is then its own, not the load generator's. It is told its target on
/// stdin and exits when stdin closes.
#[derive(Debug)]
struct RelayProc {
    proc: Proc,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    port: u16,
}

impl RelayProc {
    fn start(one_way: Duration, log: &Path) -> Res<RelayProc> {
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let err = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| format!("opening {}: {e}", log.display()))?;
        let mut child = Command::new(exe)
            .args(["child-relay", &one_way.as_micros().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .map_err(|e| format!("spawning the relay: {e}"))?;
        let stdin = child.stdin.take().ok_or("relay stdin")?;
        let stdout = child.stdout.take().ok_or("relay stdout")?;
        let proc = Proc { child };
        let mut relay = RelayProc {
            proc,
            stdin,
            stdout: BufReader::new(stdout),
            port: 0,
        };
        let line = relay.read_line()?;
        relay.port = line
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| format!("the relay said {line:?}, not its port"))?;
        Ok(relay)
    }

    fn read_line(&mut self) -> Res<String> {
        let mut line = String::new();
        match self.stdout.read_line(&mut line) {
            Ok(0) => Err(format!(
                "the relay exited ({})",
                self.proc.exited().unwrap_or_else(|| "still running".into())
            )),
            Ok(_) => Ok(line.trim().to_owned()),
            Err(e) => Err(format!("reading from the relay: {e}")),
        }
    }

    fn retarget(&mut self, target: SocketAddr) -> Res<()> {
        writeln!(self.stdin, "target {target}").map_err(|e| format!("telling the relay: {e}"))?;
        self.stdin
            .flush()
            .map_err(|e| format!("telling the relay: {e}"))?;
        match self.read_line()?.as_str() {
            "ok" => Ok(()),
            other => Err(format!("the relay answered {other:?}")),
        }
    }
}

/// The relay's child process: args ONE_WAY_DELAY_MICROS. Prints `port N`,
/// then reads `target ADDR` lines (answering `ok`) until stdin closes.
fn child_relay(args: &[String]) -> Res<()> {
    let [delay] = args else {
        return Err(format!("child-relay: 1 argument expected, got {args:?}"));
    };
    let delay: u64 = delay.parse().map_err(|e| format!("delay: {e}"))?;
    // Nothing listens on the discard port: connections before the first
    // retarget are refused.
    let relay = Relay::start(([127, 0, 0, 1], 9).into(), Duration::from_micros(delay));
    let mut out = std::io::stdout().lock();
    writeln!(out, "port {}", relay.port()).map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())?;
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let answer = match line.trim().strip_prefix("target ").map(str::parse::<SocketAddr>) {
            Some(Ok(target)) => {
                relay.retarget(target);
                "ok".to_owned()
            }
            _ => format!("cannot parse {line:?}"),
        };
        writeln!(out, "{answer}").map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The upstream side of the runs: the relay (in the WAN case), the upstream
/// broker and, with a Kafka upstream, Kroxylicious. A Kafka upstream's
/// `Base` serves every run of a network case (see [`Kept`]); with Tansu or
/// Strait each run starts its own.
#[derive(Debug)]
struct Base {
    relay: Option<RelayProc>,
    upstream: Proc,
    /// The upstream's own port: topics are created (and deleted) there.
    own_port: u16,
    /// Where the fronts and the direct clients reach the upstream: the
    /// relay in the WAN case, else the upstream itself.
    addr: String,
    /// Kept for the case with the upstream: Kroxylicious, started (and
    /// warmed up) by its first run; an error if it did not start.
    kroxylicious: Option<Res<Kroxylicious>>,
    /// Where its logs go.
    dir: PathBuf,
}

impl Base {
    /// Starts the relay (WAN case) and the upstream, advertising the
    /// relay's address; the relay then forwards to the upstream.
    fn start(knobs: &Knobs, net: &Net, dir: &Path) -> Res<Base> {
        let mut relay = match net.one_way {
            Some(d) => Some(RelayProc::start(d, &dir.join("relay.log")).map_err(|e| format!("relay: {e}"))?),
            None => None,
        };
        let advertised = relay.as_ref().map(|r| r.port);
        let (upstream, own_port) = start_upstream(knobs, dir, advertised)?;
        let port = match &mut relay {
            Some(r) => {
                r.retarget(([127, 0, 0, 1], own_port).into())?;
                support::api_versions_ping(([127, 0, 0, 1], r.port).into(), Duration::from_secs(5))
                    .map_err(|e| format!("{} through the relay: {e}", knobs.upstream.title()))?;
                r.port
            }
            None => own_port,
        };
        Ok(Base {
            relay,
            upstream,
            own_port,
            addr: format!("127.0.0.1:{port}"),
            kroxylicious: None,
            dir: dir.to_owned(),
        })
    }

    /// The upstream's own address, for topic administration.
    fn admin(&self) -> String {
        format!("127.0.0.1:{}", self.own_port)
    }

    /// The case's Kroxylicious: started and warmed up on first use, started
    /// again if it exited.
    fn kroxylicious(&mut self, knobs: &Knobs) -> Res<&Kroxylicious> {
        if let Some(Ok(k)) = &mut self.kroxylicious {
            if let Some(s) = k.proc.exited() {
                println!("(Kroxylicious had exited ({s}); starting it again)");
                self.kroxylicious = None;
            }
        }
        if self.kroxylicious.is_none() {
            let started = Instant::now();
            let k = start_kroxylicious(knobs, &self.addr, &self.dir).and_then(|k| {
                let warm = warm_up(knobs, self, &k.entry(), "kroxylicious")?;
                println!(
                    "(Kroxylicious for this case: up in {:.1} s with the warm-up: {warm})",
                    started.elapsed().as_secs_f64()
                );
                Ok(k)
            });
            self.kroxylicious = Some(k.map_err(|e| format!("Kroxylicious: {e}")));
        }
        match self.kroxylicious.as_ref() {
            Some(Ok(k)) => Ok(k),
            Some(Err(e)) => Err(e.clone()),
            None => unreachable!("set above"),
        }
    }
}

/// What a network case keeps from run to run with a Kafka upstream: the
/// relay, Kafka (and Kroxylicious, see [`Base::kroxylicious`]), JVMs
/// started and warmed up once rather than measured cold in every run
/// (each run creates its own topics and deletes them after).
#[derive(Debug)]
struct Kept {
    base: Option<Base>,
    /// Why the upstream could not be started: every later run says so
    /// rather than trying again.
    failed: Option<String>,
    dir: PathBuf,
}

impl Kept {
    fn new(dir: &Path) -> Kept {
        Kept {
            base: None,
            failed: None,
            dir: dir.to_owned(),
        }
    }

    /// The case's base, started (and warmed up) on first use, and started
    /// again if the upstream exited.
    fn get(&mut self, knobs: &Knobs, net: &Net) -> Res<&mut Base> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if let Some(b) = &mut self.base {
            if let Some(s) = b.upstream.exited() {
                println!("({} had exited ({s}); starting it again)", knobs.upstream.title());
                self.base = None;
            }
        }
        if self.base.is_none() {
            let started = Instant::now();
            let base = Base::start(knobs, net, &self.dir).and_then(|b| {
                let warm = warm_up(knobs, &b, &Entry::direct(&b.addr), "upstream")?;
                println!(
                    "({} for this case: up in {:.1} s with the warm-up: {warm})",
                    knobs.upstream.title(),
                    started.elapsed().as_secs_f64()
                );
                Ok(b)
            });
            match base {
                Ok(b) => self.base = Some(b),
                Err(e) => {
                    let e = format!("{} for this case did not start: {e}", knobs.upstream.title());
                    self.failed = Some(e.clone());
                    return Err(e);
                }
            }
        }
        Ok(self.base.as_mut().expect("set above"))
    }
}

/// A run's base: its own, or the case's.
#[derive(Debug)]
enum Held<'a> {
    Own(Box<Base>),
    Kept(&'a mut Base),
}

impl Held<'_> {
    fn get(&self) -> &Base {
        match self {
            Held::Own(b) => b,
            Held::Kept(b) => b,
        }
    }

    fn get_mut(&mut self) -> &mut Base {
        match self {
            Held::Own(b) => b,
            Held::Kept(b) => b,
        }
    }
}

/// Where a path's clients go: the address they bootstrap from and the
/// one broker the metadata must name (the front's own address, or
/// Kroxylicious's address for the upstream's broker), so that they go
/// through the front and nowhere else.
#[derive(Debug, Clone)]
struct Entry {
    bootstrap: String,
    broker: String,
}

impl Entry {
    /// A broker that names itself (the upstream, Strait, tansu proxy).
    fn direct(addr: &str) -> Entry {
        Entry {
            bootstrap: addr.to_owned(),
            broker: addr.to_owned(),
        }
    }
}

/// Everything one run needs: the base (relay, upstream) and the front of
/// the path, if any.
#[derive(Debug)]
struct Setup<'a> {
    base: Held<'a>,
    /// The front started for this run (a kept Kroxylicious is the base's).
    front: Option<Proc>,
    way: Way,
    entry: Entry,
    /// The run's topics, deleted after it on a kept upstream.
    topics: Vec<String>,
}

impl<'a> Setup<'a> {
    /// Starts the processes of `way` (the base too, unless the case keeps
    /// one) and creates `topics` (name, partitions) on the upstream before
    /// the front starts.
    fn start(
        knobs: &Knobs,
        net: &Net,
        way: Way,
        dir: &Path,
        topics: &[(&str, i32)],
        kept: &'a mut Kept,
    ) -> Res<Setup<'a>> {
        let mut base = if knobs.upstream.kept() {
            Held::Kept(kept.get(knobs, net)?)
        } else {
            Held::Own(Box::new(Base::start(knobs, net, dir)?))
        };
        let admin = base.get().admin();
        for &(topic, partitions) in topics {
            common::create_topic(&admin, topic, partitions, "router-bench-admin").map_err(|e| {
                format!(
                    "creating {topic} on the upstream ({}): {e}",
                    knobs.upstream.title()
                )
            })?;
        }
        let upstream = base.get().addr.clone();
        let (front, entry) = match way {
            Way::Direct => (None, Entry::direct(&upstream)),
            Way::Strait => {
                let (proc, port) = start_strait_front(knobs, dir, &upstream)?;
                (Some(proc), Entry::direct(&format!("127.0.0.1:{port}")))
            }
            Way::TansuProxy => {
                let (proc, port) = common::start_server("tansu proxy", &dir.join("proxy.log"), |port| {
                    let url = format!("tcp://127.0.0.1:{port}");
                    let mut c = common::tansu_command(&knobs.tansu_bin, dir);
                    c.arg("proxy")
                        .args(["--listener-url", &url, "--advertised-listener-url", &url])
                        .args(["--origin-url", &format!("tcp://{upstream}")]);
                    c
                })?;
                (Some(proc), Entry::direct(&format!("127.0.0.1:{port}")))
            }
            Way::Kroxylicious => match &mut base {
                Held::Kept(b) => (None, b.kroxylicious(knobs)?.entry()),
                Held::Own(b) => {
                    let k = start_kroxylicious(knobs, &upstream, dir)?;
                    let entry = k.entry();
                    warm_up(knobs, b, &entry, "kroxylicious").map_err(|e| format!("Kroxylicious: {e}"))?;
                    (Some(k.proc), entry)
                }
            },
        };
        Ok(Setup {
            base,
            front,
            way,
            entry,
            topics: topics.iter().map(|(t, _)| (*t).to_owned()).collect(),
        })
    }

    /// The front's process: this run's, or the case's Kroxylicious.
    fn front_proc(&self) -> Option<&Proc> {
        match (&self.front, self.way, &self.base.get().kroxylicious) {
            (Some(p), _, _) => Some(p),
            (None, Way::Kroxylicious, Some(Ok(k))) => Some(&k.proc),
            _ => None,
        }
    }

    fn sample(&self) -> CpuSample {
        let base = self.base.get();
        CpuSample::take([
            base.upstream.cpu_ticks(),
            self.front_proc().and_then(Proc::cpu_ticks),
            base.relay.as_ref().and_then(|r| r.proc.cpu_ticks()),
        ])
    }

    /// Whether the front has exited, and how.
    fn front_exited(&mut self) -> Option<String> {
        if let Some(p) = &mut self.front {
            return p.exited();
        }
        match (self.way, &mut self.base.get_mut().kroxylicious) {
            (Way::Kroxylicious, Some(Ok(k))) => k.proc.exited(),
            _ => None,
        }
    }

    /// Appends which process has exited, if any, to an error.
    fn explain(&mut self, e: String) -> String {
        let mut gone = Vec::new();
        if let Some(s) = self.base.get_mut().upstream.exited() {
            gone.push(format!("the upstream exited: {s}"));
        }
        if let Some(s) = self.front_exited() {
            gone.push(format!("the front exited: {s}"));
        }
        if let Some(s) = self.base.get_mut().relay.as_mut().and_then(|r| r.proc.exited()) {
            gone.push(format!("the relay exited: {s}"));
        }
        if gone.is_empty() {
            e
        } else {
            format!("{e} ({})", gone.join("; "))
        }
    }

    /// Stops everything of the run; the front Strait with SIGTERM (a slow
    /// or failed shutdown is a note), the rest (an upstream Strait too)
    /// killed. On a kept upstream, deletes the run's topics instead.
    fn finish(mut self, notes: &mut Vec<String>) {
        let way = self.way;
        if let Some(s) = self.base.get_mut().upstream.exited() {
            notes.push(format!("the upstream exited during the run ({s})"));
        }
        if let Some(s) = self.front_exited() {
            notes.push(format!("{} exited during the run ({s})", way.name()));
        } else if let (Some(front), Way::Strait) = (&mut self.front, way) {
            match front.stop() {
                Ok(d) if d > Duration::from_secs(2) => {
                    notes.push(format!("Strait's SIGTERM shutdown took {:.1} s", d.as_secs_f64()))
                }
                Ok(_) => {}
                Err(e) => notes.push(format!("Strait's shutdown: {e}")),
            }
        }
        if let Held::Kept(base) = &self.base {
            // Whatever is left of the clients' connections through the
            // front goes with it first.
            drop(self.front.take());
            if let Err(e) = delete_topics(&base.admin(), &self.topics) {
                notes.push(format!("deleting the run's topics on the upstream: {e}"));
            }
        }
    }
}

/// `strait serve --config F` with the upstream as cluster `up` and the one
/// route `{ regex: ".*", to: up }`, checked first with `strait check`.
fn start_strait_front(knobs: &Knobs, dir: &Path, upstream: &str) -> Res<(Proc, u16)> {
    let config = dir.join("strait.yaml");
    fs::write(
        &config,
        format!(
            "# The router benchmark: every topic to the one upstream, names unchanged.\n\
             clusters:\n  up: {{ bootstrap: [\"{upstream}\"] }}\n\
             routes:\n  - {{ regex: \".*\", to: up }}\n"
        ),
    )
    .map_err(|e| format!("writing {}: {e}", config.display()))?;
    let check = Command::new(&knobs.strait_bin)
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .map_err(|e| format!("strait check: {e}"))?;
    if !check.status.success() {
        return Err(format!(
            "strait check --config {} failed ({}): {}",
            config.display(),
            check.status,
            String::from_utf8_lossy(&check.stderr).trim()
        ));
    }
    let data = dir.join(FRONT_DATA);
    common::start_server("strait", &dir.join("strait.log"), |port| {
        let mut c = Command::new(&knobs.strait_bin);
        c.arg("serve")
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(&data)
            .arg("--config")
            .arg(&config)
            .current_dir(dir);
        c
    })
}

/// Starts the upstream broker of `knobs.upstream` on a free port of its
/// own, advertising `advertised` (the relay's port) if given, else that
/// port; returns it and the port.
fn start_upstream(knobs: &Knobs, dir: &Path, advertised: Option<u16>) -> Res<(Proc, u16)> {
    let log = dir.join(knobs.upstream.log());
    match knobs.upstream {
        Upstream::Kafka => start_kafka(dir, advertised),
        Upstream::Tansu => common::start_server("tansu", &log, |port| {
            let listen = format!("tcp://127.0.0.1:{port}");
            let advertised = format!("tcp://127.0.0.1:{}", advertised.unwrap_or(port));
            let mut c = common::tansu_command(&knobs.tansu_bin, dir);
            c.arg("broker")
                .args([
                    "--listener-url",
                    &listen,
                    "--advertised-listener-url",
                    &advertised,
                ])
                .args(["--storage-engine", "memory://tansu/"]);
            c
        }),
        Upstream::Strait => {
            let data = dir.join(UPSTREAM_DATA);
            common::start_server("strait (upstream)", &log, |port| {
                let mut c = Command::new(&knobs.strait_bin);
                c.arg("serve")
                    .args(["--listen", &format!("127.0.0.1:{port}")])
                    .arg("--data-dir")
                    .arg(&data);
                if let Some(relay) = advertised {
                    c.args(["--advertised", &format!("127.0.0.1:{relay}")]);
                }
                c.current_dir(dir);
                c
            })
        }
    }
}

/// How long a JVM (Kafka, Kroxylicious) may take to answer ApiVersions
/// after it was spawned: on a loaded 2-core machine a Kafka start takes
/// 10 to 30 s.
const JVM_START: Duration = Duration::from_secs(120);
/// Kafka's heap (the tests' is 512 MB; a broker under a throughput load
/// gets more).
const KAFKA_HEAP: &str = "1g";
/// Kroxylicious's heap (Netty's buffers are direct memory, outside it).
const KROXYLICIOUS_HEAP: &str = "512m";
/// The cluster id of the bench's Kafka: 16 bytes, base64 without padding.
const KAFKA_CLUSTER_ID: &str = "c3RyYWl0LXJvdXRlci1ibg";
/// Kafka's data directory, in its case's directory.
const KAFKA_DATA: &str = "kafka-data";
/// Kafka's logging: warnings, and its start and stop.
const KAFKA_LOG4J: &str = "\
rootLogger.level=WARN
rootLogger.appenderRef.out.ref=OUT
appender.out.type=Console
appender.out.name=OUT
appender.out.layout.type=PatternLayout
appender.out.layout.pattern=[%d] %p %m (%c)%n
logger.server.name=kafka.server.KafkaRaftServer
logger.server.level=INFO
";

/// Apache Kafka (the jars `scripts/peers` installs, the tests' harness's
/// classpath), one combined broker and controller (KRaft) on loopback, with
/// its data in `dir`, advertising `advertised` (the relay's port) if given,
/// else its own port (its properties are the harness's,
/// `support::kafka::combined_node_properties`; not `Kafka::start`, whose
/// broker advertises its own port where the WAN case needs the relay's).
fn start_kafka(dir: &Path, advertised: Option<u16>) -> Res<(Proc, u16)> {
    let classpath = std::panic::catch_unwind(support::kafka::kafka_classpath)
        .map_err(|_| "Kafka's jars are not installed (scripts/peers installs them)".to_owned())?;
    let data = dir.join(KAFKA_DATA);
    let _ = fs::remove_dir_all(&data);
    let port = support::free_port();
    let controller = loop {
        let p = support::free_port();
        if p != port {
            break p;
        }
    };
    let properties = dir.join("kafka.properties");
    let lines = support::kafka::combined_node_properties(
        "127.0.0.1",
        port,
        advertised.unwrap_or(port),
        controller,
        &data,
    );
    fs::write(&properties, lines.join("\n") + "\n")
        .map_err(|e| format!("writing {}: {e}", properties.display()))?;
    let log4j = dir.join("kafka-log4j2.properties");
    fs::write(&log4j, KAFKA_LOG4J).map_err(|e| format!("writing {}: {e}", log4j.display()))?;
    let format = support::kafka::format_command(&properties, KAFKA_CLUSTER_ID)
        .output()
        .map_err(|e| format!("running kafka.tools.StorageTool: {e}"))?;
    if !format.status.success() {
        return Err(format!(
            "kafka.tools.StorageTool format failed ({}): {}{}",
            format.status,
            String::from_utf8_lossy(&format.stdout).trim(),
            String::from_utf8_lossy(&format.stderr).trim()
        ));
    }
    let mut cmd = Command::new("java");
    cmd.arg(format!("-Xmx{KAFKA_HEAP}"))
        .arg(format!("-Xms{KAFKA_HEAP}"))
        .args([
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
        ])
        .arg(format!("-Dlog4j2.configurationFile={}", log4j.display()))
        .args(["-cp", &classpath, "kafka.Kafka"])
        .arg(&properties)
        .env_remove("LD_LIBRARY_PATH")
        .current_dir(dir);
    let mut proc = Proc::spawn(cmd, "kafka", &dir.join(Upstream::Kafka.log()))?;
    wait_jvm(&mut proc, port)?;
    Ok((proc, port))
}

/// Kroxylicious, as `scripts/peers.d/kroxylicious` installs it.
#[derive(Debug)]
struct Kroxylicious {
    proc: Proc,
    /// Its gateway's bootstrap address.
    bootstrap: String,
    /// Where it gives clients the upstream's broker: the one address its
    /// metadata names.
    broker: String,
}

impl Kroxylicious {
    fn entry(&self) -> Entry {
        Entry {
            bootstrap: self.bootstrap.clone(),
            broker: self.broker.clone(),
        }
    }
}

/// Starts Kroxylicious in front of `upstream` (one broker, whose node id it
/// asks first), its configuration and log in `dir`: one virtual cluster
/// without filters, a gateway whose port identifies the node
/// (`portIdentifiesNode`: a bootstrap port, and one port for the
/// upstream's broker).
fn start_kroxylicious(knobs: &Knobs, upstream: &str, dir: &Path) -> Res<Kroxylicious> {
    let home = &knobs.kroxylicious_dir;
    if !home.join("classes/KroxyliciousMain.class").exists() {
        return Err(format!(
            "not installed in {} (scripts/peers.d/kroxylicious installs it)",
            home.display()
        ));
    }
    let node = upstream_node_id(upstream)?;
    let bootstrap = support::free_port();
    let node_port = loop {
        let p = support::free_port();
        if p != bootstrap {
            break p;
        }
    };
    let config = dir.join("kroxylicious.yaml");
    fs::write(
        &config,
        format!(
            "# The router benchmark: Kroxylicious in front of the upstream, no filters.\n\
             virtualClusters:\n\
             \x20 - name: bench\n\
             \x20   targetCluster:\n\
             \x20     bootstrapServers: {upstream}\n\
             \x20   gateways:\n\
             \x20     - name: plain\n\
             \x20       portIdentifiesNode:\n\
             \x20         bootstrapAddress: 127.0.0.1:{bootstrap}\n\
             \x20         nodeStartPort: {node_port}\n\
             \x20         nodeIdRanges:\n\
             \x20           - {{ name: upstream, start: {node}, end: {node} }}\n"
        ),
    )
    .map_err(|e| format!("writing {}: {e}", config.display()))?;
    let mut cmd = Command::new("java");
    cmd.arg(format!("-Xmx{KROXYLICIOUS_HEAP}"))
        .arg(format!("-Xms{KROXYLICIOUS_HEAP}"))
        .arg("-cp")
        .arg(format!(
            "{}:{}/*",
            home.join("classes").display(),
            home.join("libs").display()
        ))
        .args(["KroxyliciousMain", "--config"])
        .arg(&config)
        .env_remove("LD_LIBRARY_PATH")
        .current_dir(dir);
    let mut proc = Proc::spawn(cmd, "kroxylicious", &dir.join("kroxylicious.log"))?;
    wait_jvm(&mut proc, bootstrap)?;
    Ok(Kroxylicious {
        proc,
        bootstrap: format!("127.0.0.1:{bootstrap}"),
        broker: format!("127.0.0.1:{node_port}"),
    })
}

/// The node id of the one broker the metadata of `upstream` names.
fn upstream_node_id(upstream: &str) -> Res<i32> {
    let client: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", upstream)
        .set("client.id", "router-bench-admin")
        .create()
        .map_err(|e| format!("metadata client: {e}"))?;
    let md = client
        .fetch_metadata(None, Duration::from_secs(20))
        .map_err(|e| format!("metadata of {upstream}: {e}"))?;
    match md.brokers() {
        [b] => Ok(b.id()),
        brokers => Err(format!(
            "the upstream's metadata names {} brokers, the bench's Kroxylicious gateway maps one",
            brokers.len()
        )),
    }
}

/// Polls until the JVM answers ApiVersions on `port` (within `JVM_START`),
/// failing early if it exits.
fn wait_jvm(proc: &mut Proc, port: u16) -> Res<()> {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let started = Instant::now();
    loop {
        if let Some(status) = proc.exited() {
            return Err(format!("exited ({status}) before answering on {addr}"));
        }
        match support::api_versions_ping(addr, Duration::from_secs(2)) {
            Ok(()) => return Ok(()),
            Err(e) if started.elapsed() > JVM_START => {
                return Err(format!(
                    "not ready on {addr} after {JVM_START:?} (last error: {e})"
                ));
            }
            Err(_) => thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// Records per second and seconds of the paced part of a JVM's warm-up.
const WARMUP_RATE: u64 = 5000;
const WARMUP_PACED_SECS: u64 = 2;

/// Warms up a JVM just started (Kafka, Kroxylicious) through `entry`,
/// unmeasured, so that it compiles its hot paths under this load rather
/// than under the measured one: `ROUTER_BENCH_JVM_WARMUP_RECORDS` records
/// produced and consumed as fast as they go, then `WARMUP_PACED_SECS` of
/// `WARMUP_RATE` records/s with a consumer polling at the same time (the
/// latency runs' long polls), each to a topic of its own (created on the
/// upstream, deleted after on a kept one). Returns what it took.
fn warm_up(knobs: &Knobs, base: &Base, entry: &Entry, what: &str) -> Res<String> {
    static WARM_UPS: AtomicU64 = AtomicU64::new(0);
    let records = knobs.jvm_warmup_records;
    if records == 0 {
        return Ok("no warm-up (ROUTER_BENCH_JVM_WARMUP_RECORDS=0)".into());
    }
    let n = WARM_UPS.fetch_add(1, Ordering::Relaxed) + 1;
    let topics = [
        format!("router-warmup-{what}-{n}"),
        format!("router-warmup-{what}-{n}-paced"),
    ];
    // A Kafka just started may not take CreateTopics yet.
    let deadline = Instant::now() + Duration::from_secs(60);
    for topic in &topics {
        loop {
            match common::create_topic(&base.admin(), topic, PARTITIONS, "router-bench-admin") {
                Ok(()) => break,
                Err(e) if Instant::now() > deadline => return Err(format!("warm-up topic: {e}")),
                Err(_) => thread::sleep(Duration::from_millis(500)),
            }
        }
    }
    let mut notes = Vec::new();
    let (produce_secs, per_partition) = produce_throughput(knobs, entry, &topics[0], records, &mut notes)
        .map_err(|e| format!("warm-up: {e}"))?;
    let consume_secs = consume_throughput(entry, &topics[0], &per_partition, &mut notes)
        .map_err(|e| format!("warm-up: {e}"))?;
    let paced = Knobs {
        warmup_secs: 0,
        latency_secs: WARMUP_PACED_SECS,
        ..knobs.clone()
    };
    let latency = measure_latency(&paced, entry, &topics[1], WARMUP_RATE, &mut notes)
        .map_err(|e| format!("warm-up, paced: {e}"))?;
    if knobs.upstream.kept() {
        delete_topics(&base.admin(), &topics).map_err(|e| format!("warm-up: {e}"))?;
    }
    Ok(format!(
        "{records} records produced in {produce_secs:.2} s and consumed in {consume_secs:.2} s, then \
         {WARMUP_PACED_SECS} s at {WARMUP_RATE} records/s (produce p99 {:.1} ms), unmeasured",
        latency.produce.p99
    ))
}

/// Deletes `topics` (AdminClient through `bootstrap`).
fn delete_topics(bootstrap: &str, topics: &[String]) -> Res<()> {
    if topics.is_empty() {
        return Ok(());
    }
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("client.id", "router-bench-admin")
        .create()
        .map_err(|e| format!("admin client: {e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let options = AdminOptions::new()
        .operation_timeout(Some(Duration::from_secs(20)))
        .request_timeout(Some(Duration::from_secs(20)));
    let results = runtime
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(30), admin.delete_topics(&names, &options)).await
        })
        .map_err(|_| "DeleteTopics: no answer within 30 s".to_owned())?
        .map_err(|e| format!("DeleteTopics: {e}"))?;
    for r in results {
        if let Err((name, code)) = r {
            return Err(format!("DeleteTopics {name}: {code}"));
        }
    }
    Ok(())
}

/// Removes the data directories of a finished run (Strait's, front and
/// upstream), unless `ROUTER_BENCH_KEEP=1`.
fn remove_data(knobs: &Knobs, dir: &Path) {
    if !knobs.keep {
        let _ = fs::remove_dir_all(dir.join(FRONT_DATA));
        let _ = fs::remove_dir_all(dir.join(UPSTREAM_DATA));
    }
}

// ---------------------------------------------------------------------------
// CPU accounting and figures

/// CPU counters of the upstream (Kafka, Tansu or Strait), the front
/// (Strait or a proxy) and the relay (in `CpuUse::procs`, at `UPSTREAM`, `FRONT` and
/// `RELAY`), this process (the librdkafka clients) and the machine.
type CpuSample = common::CpuSample<3>;
type CpuUse = common::CpuUse<3>;
const UPSTREAM: usize = 0;
const FRONT: usize = 1;
const RELAY: usize = 2;

fn describe_cpu(cpu: &CpuUse, way: Way) -> String {
    cpu.describe(["upstream", way.name(), "relay"])
}

// ---------------------------------------------------------------------------
// One run

/// One throughput phase's figures.
type Throughput = common::Throughput<3>;

fn describe_throughput(t: &Throughput, way: Way) -> String {
    format!(
        "{:.0} rec/s {:.1} MB/s ({} records in {:.2} s; {})",
        t.records_per_sec(),
        t.mb_per_sec(),
        t.records,
        t.secs,
        describe_cpu(&t.cpu, way)
    )
}

fn describe_stats(s: &Stats) -> String {
    format!("p50 {:.3} ms, p99 {:.3} ms, max {:.1} ms", s.p50, s.p99, s.max)
}

#[derive(Debug, Clone, Copy)]
struct Latency {
    /// Records measured (after the warm-up).
    records: u64,
    /// Records per second sent.
    achieved: f64,
    /// How far behind its schedule the producer fell at worst.
    behind_ms: f64,
    produce: Stats,
    fetch: Stats,
    cpu: CpuUse,
}

#[derive(Debug)]
struct ThroughputRun {
    produce: Res<Throughput>,
    consume: Res<Throughput>,
    notes: Vec<String>,
    logs: Vec<(String, PathBuf)>,
}

#[derive(Debug)]
struct LatencyRun {
    latency: Res<Latency>,
    notes: Vec<String>,
    logs: Vec<(String, PathBuf)>,
}

/// One pipelining run: a producer for each in-flight limit, one after the
/// other, each to a topic of its own.
#[derive(Debug)]
struct PipelineRun {
    /// The in-flight limit (none: librdkafka's default) and its producer's
    /// throughput, in the order they ran.
    produce: Vec<(Option<u32>, Res<Throughput>)>,
    notes: Vec<String>,
    logs: Vec<(String, PathBuf)>,
}

/// One sequential (overhead) run's figures: one record at a time.
#[derive(Debug, Clone, Copy)]
struct Sequential {
    /// Records measured (after the warm-up).
    records: u64,
    /// Seconds of the measured records, the first send to the last report.
    secs: f64,
    produce: Stats,
    cpu: CpuUse,
}

#[derive(Debug)]
struct SequentialRun {
    sequential: Res<Sequential>,
    notes: Vec<String>,
    logs: Vec<(String, PathBuf)>,
}

/// "1", "5", "default (1000000)".
fn in_flight_name(in_flight: Option<u32>) -> String {
    in_flight.map_or_else(|| format!("default ({DEFAULT_IN_FLIGHT})"), |n| n.to_string())
}

/// The logs of a run's processes, to show when something failed.
fn run_logs(knobs: &Knobs, dir: &Path, way: Way, net: &Net) -> Vec<(String, PathBuf)> {
    // A kept upstream (with its relay and Kroxylicious) logs into the
    // case's directory, the parent of the run's.
    let case = if knobs.upstream.kept() {
        dir.parent().unwrap_or(dir)
    } else {
        dir
    };
    let mut logs = Vec::new();
    if let Some(log) = way.log() {
        let at = if way == Way::Kroxylicious { case } else { dir };
        logs.push((way.name().to_owned(), at.join(log)));
    }
    logs.push(("upstream".into(), case.join(knobs.upstream.log())));
    if !net.is_loopback() {
        logs.push(("relay".into(), case.join("relay.log")));
    }
    logs
}

fn print_notes_and_logs(indent: usize, failed: bool, notes: &[String], logs: &[(String, PathBuf)]) {
    for n in notes {
        println!("{:indent$}note: {n}", "");
    }
    if failed
        || notes
            .iter()
            .any(|n| n.contains("exited") || n.contains("shutdown"))
    {
        for (what, log) in logs {
            println!("{}", common::log_excerpt(what, log, 4, 10, 12));
        }
    }
}

fn throughput_run(
    knobs: &Knobs,
    net: &Net,
    way: Way,
    (dir, kept): (&Path, &mut Kept),
    rep: usize,
    clk: f64,
) -> ThroughputRun {
    let topic = format!("router-{}-{}-{rep}", net.slug, way.name());
    let logs = run_logs(knobs, dir, way, net);
    let mut setup = match Setup::start(knobs, net, way, dir, &[(&topic, PARTITIONS)], kept) {
        Ok(s) => s,
        Err(e) => {
            let e = format!("setup: {e}");
            return ThroughputRun {
                produce: Err(e.clone()),
                consume: Err(e),
                notes: Vec::new(),
                logs,
            };
        }
    };
    let mut notes = Vec::new();
    let before = setup.sample();
    let produced = produce_throughput(knobs, &setup.entry, &topic, net.records, &mut notes);
    let after = setup.sample();
    let produce = match &produced {
        Ok((secs, _)) => Ok(Throughput {
            cpu: before.until(&after, clk),
            ..Throughput::new(net.records, *secs)
        }),
        Err(e) => Err(setup.explain(e.clone())),
    };
    let consume = match &produced {
        Ok((_, per_partition)) => {
            let before = setup.sample();
            let consumed = consume_throughput(&setup.entry, &topic, per_partition, &mut notes);
            let after = setup.sample();
            match consumed {
                Ok(secs) => Ok(Throughput {
                    cpu: before.until(&after, clk),
                    ..Throughput::new(per_partition.iter().sum(), secs)
                }),
                Err(e) => Err(setup.explain(e)),
            }
        }
        Err(_) => Err("skipped: produce failed".into()),
    };
    setup.finish(&mut notes);
    remove_data(knobs, dir);
    ThroughputRun {
        produce,
        consume,
        notes,
        logs,
    }
}

fn latency_run(
    knobs: &Knobs,
    net: &Net,
    way: Way,
    (dir, kept): (&Path, &mut Kept),
    rep: usize,
    rate: u64,
    clk: f64,
) -> LatencyRun {
    let topic = format!("router-{}-latency-{}-{rep}", net.slug, way.name());
    let logs = run_logs(knobs, dir, way, net);
    let mut notes = Vec::new();
    let latency = match Setup::start(knobs, net, way, dir, &[(&topic, PARTITIONS)], kept) {
        Err(e) => Err(format!("setup: {e}")),
        Ok(mut setup) => {
            let before = setup.sample();
            let result = measure_latency(knobs, &setup.entry, &topic, rate, &mut notes);
            let after = setup.sample();
            let result = result
                .map(|l| Latency {
                    cpu: before.until(&after, clk),
                    ..l
                })
                .map_err(|e| setup.explain(e));
            setup.finish(&mut notes);
            result
        }
    };
    remove_data(knobs, dir);
    LatencyRun { latency, notes, logs }
}

/// The sequential run of `way` (see the module docs): one setup, a fresh
/// topic of `SEQUENTIAL_PARTITIONS`, one record at a time.
fn sequential_run(
    knobs: &Knobs,
    net: &Net,
    way: Way,
    (dir, kept): (&Path, &mut Kept),
    rep: usize,
    clk: f64,
) -> SequentialRun {
    let topic = format!("router-{}-sequential-{}-{rep}", net.slug, way.name());
    let logs = run_logs(knobs, dir, way, net);
    let mut notes = Vec::new();
    let sequential = match Setup::start(knobs, net, way, dir, &[(&topic, SEQUENTIAL_PARTITIONS)], kept) {
        Err(e) => Err(format!("setup: {e}")),
        Ok(mut setup) => {
            let result = sequential_producer(knobs, &setup.entry, &topic).and_then(|producer| {
                let before = setup.sample();
                let measured = measure_sequential(&producer, &topic, net.sequential_records);
                let after = setup.sample();
                note_client_errors(
                    "sequential producer",
                    &producer.context().state.lock().unwrap().client_errors,
                    &mut notes,
                );
                measured.map(|s| Sequential {
                    cpu: before.until(&after, clk),
                    ..s
                })
            });
            let result = result.map_err(|e| setup.explain(e));
            setup.finish(&mut notes);
            result
        }
    };
    remove_data(knobs, dir);
    SequentialRun {
        sequential,
        notes,
        logs,
    }
}

/// The pipelining run of `way` (see the module docs): one setup, a fresh
/// topic of `PIPELINE_PARTITIONS` for each in-flight limit, the limits in
/// `IN_FLIGHT` order in odd repetitions and reversed in even ones.
fn pipeline_run(
    knobs: &Knobs,
    net: &Net,
    way: Way,
    (dir, kept): (&Path, &mut Kept),
    rep: usize,
    clk: f64,
) -> PipelineRun {
    let mut limits = IN_FLIGHT;
    if rep.is_multiple_of(2) {
        limits.reverse();
    }
    let topics: Vec<String> = limits
        .iter()
        .map(|n| {
            let n = n.map_or_else(|| "default".to_owned(), |n| n.to_string());
            format!("router-{}-pipeline-{}-{rep}-{n}", net.slug, way.name())
        })
        .collect();
    let logs = run_logs(knobs, dir, way, net);
    let mut notes = Vec::new();
    let specs: Vec<(&str, i32)> = topics.iter().map(|t| (t.as_str(), PIPELINE_PARTITIONS)).collect();
    let produce = match Setup::start(knobs, net, way, dir, &specs, kept) {
        Err(e) => {
            let e = format!("setup: {e}");
            limits.iter().map(|&n| (n, Err(e.clone()))).collect()
        }
        Ok(mut setup) => {
            let mut produce = Vec::new();
            // A path that could not start one producer (its metadata, its
            // first record) is not tried again with the next limits.
            let mut unusable: Option<String> = None;
            for (&n, topic) in limits.iter().zip(&topics) {
                if let Some(e) = &unusable {
                    produce.push((n, Err(format!("skipped: {e}"))));
                    continue;
                }
                let producer = match pipelined_producer(knobs, &setup.entry, topic, n) {
                    Ok(p) => p,
                    Err(e) => {
                        let e = setup.explain(e);
                        unusable = Some(e.clone());
                        produce.push((n, Err(e)));
                        continue;
                    }
                };
                let before = setup.sample();
                let produced =
                    common::produce_records(&producer, topic, knobs.pipeline_records, PIPELINE_PARTITIONS);
                let after = setup.sample();
                note_client_errors(
                    &format!("producer (in flight {})", in_flight_name(n)),
                    &producer.context().state.lock().unwrap().client_errors,
                    &mut notes,
                );
                let result = match produced {
                    Ok((secs, _)) => Ok(Throughput {
                        cpu: before.until(&after, clk),
                        ..Throughput::new(knobs.pipeline_records, secs)
                    }),
                    Err(e) => Err(setup.explain(e)),
                };
                produce.push((n, result));
            }
            setup.finish(&mut notes);
            produce
        }
    };
    remove_data(knobs, dir);
    PipelineRun { produce, notes, logs }
}

// ---------------------------------------------------------------------------
// The load generator

/// A note about errors librdkafka reported although the phase went
/// through (reconnections, request timeouts, ...).
fn note_client_errors(what: &str, errors: &[String], notes: &mut Vec<String>) {
    if let Some(first) = errors.first() {
        notes.push(format!(
            "{what}: {} client error report(s), first: {first}",
            errors.len()
        ));
    }
}

/// A producer with the bench's settings (and `in_flight` as
/// `max.in.flight.requests.per.connection`, if set), connected and knowing
/// the leaders of `topic`'s `partitions` (checked to go through
/// `entry` alone) before the clock starts.
fn producer(
    knobs: &Knobs,
    entry: &Entry,
    topic: &str,
    partitions: i32,
    in_flight: Option<u32>,
    deliveries: Deliveries,
) -> Res<ThreadedProducer<Deliveries>> {
    let mut config = common::producer_config(
        &entry.bootstrap,
        "router-bench-producer",
        &knobs.acks,
        knobs.linger_ms,
    );
    if let Some(n) = in_flight {
        config.set("max.in.flight.requests.per.connection", n.to_string());
    }
    let producer: ThreadedProducer<Deliveries> = config
        .create_with_context(deliveries)
        .map_err(|e| format!("producer: {e}"))?;
    common::topic_ready(producer.client(), topic, partitions, Some(&entry.broker))
        .map_err(|e| format!("producer: {e}"))?;
    Ok(producer)
}

/// Produces `records` records; returns the seconds from the first send to
/// the last delivery and how many records each partition took.
fn produce_throughput(
    knobs: &Knobs,
    entry: &Entry,
    topic: &str,
    records: u64,
    notes: &mut Vec<String>,
) -> Res<(f64, Vec<u64>)> {
    let deliveries = Deliveries::new(Instant::now(), false, PARTITIONS);
    let producer = producer(knobs, entry, topic, PARTITIONS, None, deliveries)?;
    // One record to each partition, delivered before the clock starts.
    let value = payload();
    for p in 0..PARTITIONS {
        send(&producer, topic, &value, p, 0)?;
    }
    producer
        .context()
        .wait_for(PARTITIONS as u64)
        .map_err(|e| format!("the warm-up records: {e}"))?;
    let produced = common::produce_records(&producer, topic, records, PARTITIONS)?;
    note_client_errors(
        "producer",
        &producer.context().state.lock().unwrap().client_errors,
        notes,
    );
    Ok(produced)
}

/// The producer of a pipelining run: the bench's settings with `in_flight`
/// requests in flight at most (none: librdkafka's default), its connection
/// to the partition's leader open: one record sent and delivered before
/// the clock starts.
fn pipelined_producer(
    knobs: &Knobs,
    entry: &Entry,
    topic: &str,
    in_flight: Option<u32>,
) -> Res<ThreadedProducer<Deliveries>> {
    let deliveries = Deliveries::new(Instant::now(), false, PIPELINE_PARTITIONS);
    let producer = producer(knobs, entry, topic, PIPELINE_PARTITIONS, in_flight, deliveries)?;
    send(&producer, topic, &payload(), 0, 0)?;
    producer
        .context()
        .wait_for(1)
        .map_err(|e| format!("the first record: {e}"))?;
    Ok(producer)
}

/// The producer of a sequential run: the bench's settings but linger.ms 0
/// (a record leaves at once), its metadata checked before the clock starts.
fn sequential_producer(knobs: &Knobs, entry: &Entry, topic: &str) -> Res<ThreadedProducer<Deliveries>> {
    let producer: ThreadedProducer<Deliveries> =
        common::producer_config(&entry.bootstrap, "router-bench-sequential", &knobs.acks, 0)
            .create_with_context(Deliveries::new(Instant::now(), true, SEQUENTIAL_PARTITIONS))
            .map_err(|e| format!("producer: {e}"))?;
    common::topic_ready(
        producer.client(),
        topic,
        SEQUENTIAL_PARTITIONS,
        Some(&entry.broker),
    )
    .map_err(|e| format!("producer: {e}"))?;
    Ok(producer)
}

/// Sends `SEQUENTIAL_WARMUP` and then `records` records one at a time,
/// each after the delivery report of the one before; the latencies (send
/// to delivery report) of the `records` measured ones.
fn measure_sequential(producer: &ThreadedProducer<Deliveries>, topic: &str, records: u64) -> Res<Sequential> {
    let deliveries = producer.context();
    let value = payload();
    let total = SEQUENTIAL_WARMUP + records;
    let mut start = Instant::now();
    for i in 0..total {
        if i == SEQUENTIAL_WARMUP {
            start = Instant::now();
        }
        send(producer, topic, &value, 0, deliveries.stamp())?;
        deliveries
            .wait_for(i + 1)
            .map_err(|e| format!("record {} of {total}: {e}", i + 1))?;
    }
    let secs = start.elapsed().as_secs_f64();
    let st = deliveries.state.lock().unwrap();
    // One record in flight at a time: the reports came in the order sent.
    let produce = Stats::of(
        st.latencies
            .iter()
            .skip(SEQUENTIAL_WARMUP as usize)
            .map(|(_, l)| *l as f64 / 1e6)
            .collect(),
    )
    .ok_or("no sequential latencies after the warm-up")?;
    Ok(Sequential {
        records,
        secs,
        produce,
        cpu: CpuUse::default(),
    })
}

/// A consumer assigned every partition of `topic` from the beginning,
/// after its metadata was checked.
fn consumer(entry: &Entry, topic: &str, client_id: &str) -> Res<BaseConsumer<ConsumerErrors>> {
    let consumer = common::consumer(&entry.bootstrap, topic, client_id)?;
    // Connect and learn the leaders first: assigned before it knows them,
    // librdkafka retries its offset lookup only after 500 ms.
    common::topic_ready(consumer.client(), topic, PARTITIONS, Some(&entry.broker))
        .map_err(|e| format!("consumer: {e}"))?;
    common::assign_all(&consumer, topic, PARTITIONS)?;
    Ok(consumer)
}

/// Reads every partition from the beginning until `expected[p]` records of
/// each partition `p` were read; the seconds from the assignment to the
/// last record.
fn consume_throughput(entry: &Entry, topic: &str, expected: &[u64], notes: &mut Vec<String>) -> Res<f64> {
    // The clock starts at the assignment, which consumer() makes last.
    let consumer = consumer(entry, topic, "router-bench-consumer")?;
    let read = common::read_all(&consumer, Instant::now(), expected)?;
    note_client_errors("consumer", &consumer.context().0.lock().unwrap(), notes);
    if let Some(e) = read.poll_error {
        notes.push(format!("consumer: a poll returned an error: {e}"));
    }
    Ok(read.secs)
}

/// The latency run: records paced at `rate` per second with a consumer
/// polling through the same path (see the module docs).
fn measure_latency(
    knobs: &Knobs,
    entry: &Entry,
    topic: &str,
    rate: u64,
    notes: &mut Vec<String>,
) -> Res<Latency> {
    let base = Instant::now();
    let warmup = rate * knobs.warmup_secs;
    let total = warmup + rate * knobs.latency_secs;
    let warmup_end_ns = knobs.warmup_secs * 1_000_000_000;

    // The consumer, in a thread of its own, assigned before anything is sent.
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel::<Res<()>>();
    let reader = {
        let (entry, topic, stop) = (entry.clone(), topic.to_owned(), stop.clone());
        thread::spawn(move || read_stamped(&entry, &topic, base, total, &stop, ready_tx))
    };
    let ready = ready_rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| Err("the latency consumer did not get ready within 60 s".into()));
    if let Err(e) = ready {
        stop.store(true, Ordering::Relaxed);
        let _ = reader.join();
        return Err(format!("latency consumer: {e}"));
    }
    // Let its first fetches reach the broker (and wait there) first.
    thread::sleep(Duration::from_millis(500));

    let sent = (|| -> Res<(ThreadedProducer<Deliveries>, f64, f64)> {
        let producer = producer(
            knobs,
            entry,
            topic,
            PARTITIONS,
            None,
            Deliveries::new(base, true, PARTITIONS),
        )?;
        let mut value = payload();
        let start = Instant::now();
        let mut behind = Duration::ZERO;
        for i in 0..total {
            let due = start + Duration::from_nanos(i * 1_000_000_000 / rate);
            let now = Instant::now();
            if due > now + Duration::from_micros(100) {
                thread::sleep(due - now);
            } else if now > due {
                behind = behind.max(now - due);
                if behind > MAX_BEHIND {
                    return Err(format!(
                        "cannot carry {rate} records/s: {} s behind its schedule after {i} of {total} records \
                         ({:.0} records/s sent)",
                        MAX_BEHIND.as_secs(),
                        i as f64 / start.elapsed().as_secs_f64()
                    ));
                }
            }
            // The send time, since `base`: in the value for the consumer, as
            // the opaque for the delivery report.
            let stamp = (Instant::now() - base).as_nanos() as u64;
            value[..8].copy_from_slice(&stamp.to_le_bytes());
            send(&producer, topic, &value, (i % PARTITIONS as u64) as i32, stamp)?;
        }
        let achieved = total as f64 / start.elapsed().as_secs_f64();
        producer.context().wait_for(total)?;
        Ok((producer, achieved, behind.as_secs_f64() * 1e3))
    })();
    let (producer, achieved, behind_ms) = match sent {
        Ok(s) => s,
        Err(e) => {
            stop.store(true, Ordering::Relaxed);
            let _ = reader.join();
            return Err(format!("producer: {e}"));
        }
    };
    let read = reader
        .join()
        .map_err(|_| "the latency consumer panicked".to_owned())?
        .map_err(|e| format!("latency consumer: {e}"))?;
    let (fetched, consumer_errors) = read;
    note_client_errors("latency consumer", &consumer_errors, notes);
    let st = producer.context().state.lock().unwrap();
    note_client_errors("latency producer", &st.client_errors, notes);

    // Measured: what was sent after the warm-up, counted from the first send.
    let first_send = st.latencies.iter().map(|(s, _)| *s).min().unwrap_or(0);
    let measured = |sent: u64| sent >= first_send + warmup_end_ns;
    let produce = Stats::of(
        st.latencies
            .iter()
            .filter(|(s, _)| measured(*s))
            .map(|(_, l)| *l as f64 / 1e6)
            .collect(),
    )
    .ok_or("no produce latencies after the warm-up")?;
    let fetch_ms: Vec<f64> = fetched
        .iter()
        .filter(|(s, _)| measured(*s))
        .map(|(_, l)| *l as f64 / 1e6)
        .collect();
    let records = fetch_ms.len() as u64;
    let fetch = Stats::of(fetch_ms).ok_or("no fetch latencies after the warm-up")?;
    if behind_ms > 100.0 {
        notes.push(format!(
            "the producer fell {behind_ms:.0} ms behind its schedule of {rate} records/s (sent {achieved:.0}/s)"
        ));
    }
    Ok(Latency {
        records,
        achieved,
        behind_ms,
        produce,
        fetch,
        cpu: CpuUse::default(),
    })
}

/// The latency run's consumer: reads `total` stamped records and returns
/// (stamp, poll time minus stamp) of each, in nanoseconds, and the
/// client's error reports.
type Stamped = (Vec<(u64, u64)>, Vec<String>);

fn read_stamped(
    entry: &Entry,
    topic: &str,
    base: Instant,
    total: u64,
    stop: &AtomicBool,
    ready: mpsc::Sender<Res<()>>,
) -> Res<Stamped> {
    let consumer = match consumer(entry, topic, "router-bench-latency") {
        Ok(c) => {
            let _ = ready.send(Ok(()));
            c
        }
        Err(e) => {
            let _ = ready.send(Err(e.clone()));
            return Err(e);
        }
    };
    let mut next_offset = vec![-1i64; PARTITIONS as usize];
    let mut out = Vec::with_capacity(total as usize);
    let mut progress = Instant::now();
    let mut last_error = None;
    while (out.len() as u64) < total && !stop.load(Ordering::Relaxed) {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let now = (Instant::now() - base).as_nanos() as u64;
                let p = m.partition() as usize;
                if p >= next_offset.len() || m.offset() < next_offset[p] {
                    continue;
                }
                next_offset[p] = m.offset() + 1;
                let Some(stamp) = m
                    .payload()
                    .and_then(|v| v.get(..8))
                    .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
                else {
                    return Err(format!("a record of {topic} without a stamp"));
                };
                out.push((stamp, now.saturating_sub(stamp)));
                progress = Instant::now();
            }
            Some(Err(e)) => last_error = Some(e.to_string()),
            None => {}
        }
        // Before the first record the producer may still be starting.
        if progress.elapsed() > STALL + if out.is_empty() { STALL } else { Duration::ZERO } {
            let errors = consumer.context().0.lock().unwrap();
            return Err(format!(
                "stalled: {} of {total} records read, none for {} s{}{}",
                out.len(),
                STALL.as_secs(),
                last_error.map_or_else(String::new, |e| format!("; last poll error: {e}")),
                client_errors(&errors)
            ));
        }
    }
    if (out.len() as u64) < total {
        return Err(format!("stopped after {} of {total} records", out.len()));
    }
    let errors = consumer.context().0.lock().unwrap().clone();
    Ok((out, errors))
}

// ---------------------------------------------------------------------------
// A network case

#[derive(Debug)]
struct CaseReport {
    net: Net,
    throughput: Vec<(Way, ThroughputRun)>,
    /// The latency runs' rate, or why there is none.
    rate: Res<(u64, String)>,
    latency: Vec<(Way, LatencyRun)>,
    /// Whether the case measures the sequential produce latency (and its
    /// runs).
    sequenced: bool,
    sequential: Vec<(Way, SequentialRun)>,
    /// Whether the case measures pipelining (and its runs).
    pipelined: bool,
    pipeline: Vec<(Way, PipelineRun)>,
    /// The case's directory (a kept upstream's logs) and its runs'.
    dir: PathBuf,
    dirs: Vec<(Way, PathBuf)>,
}

/// The paths of repetition `rep`, in the order they run.
fn order(rep: usize, ways: &[Way]) -> Vec<Way> {
    let mut order: Vec<Way> = Way::ALL.into_iter().filter(|w| ways.contains(w)).collect();
    if rep % 2 == 1 {
        order.reverse();
    }
    order
}

fn run_case(knobs: &Knobs, net: &Net, dir: &Path, clk: f64) -> CaseReport {
    println!("==> {}: throughput, {} records per run", net.title, net.records);
    // A Kafka upstream (and Kroxylicious) is started by the case's first
    // run and serves them all; dropped (killed) at the end of the case.
    let mut kept = Kept::new(dir);
    let mut report = CaseReport {
        net: net.clone(),
        throughput: Vec::new(),
        rate: Err("not measured".into()),
        latency: Vec::new(),
        sequenced: knobs.sequential,
        sequential: Vec::new(),
        pipelined: !net.is_loopback() && knobs.pipeline,
        pipeline: Vec::new(),
        dir: dir.to_owned(),
        dirs: Vec::new(),
    };
    for rep in 0..knobs.repeat {
        for way in order(rep, &knobs.ways) {
            let run_dir = dir.join(format!("throughput-{}-{}", way.name(), rep + 1));
            let run = match fs::create_dir_all(&run_dir) {
                Ok(()) => throughput_run(knobs, net, way, (&run_dir, &mut kept), rep + 1, clk),
                Err(e) => ThroughputRun {
                    produce: Err(format!("creating {}: {e}", run_dir.display())),
                    consume: Err("skipped".into()),
                    notes: Vec::new(),
                    logs: Vec::new(),
                },
            };
            let w = way.name().len() + 8;
            let show = |r: &Res<Throughput>| match r {
                Ok(t) => describe_throughput(t, way),
                Err(e) => format!("n/a: {e}"),
            };
            println!("{} run {}: produce {}", way.name(), rep + 1, show(&run.produce));
            println!("{:w$}consume {}", "", show(&run.consume));
            let failed = run.produce.is_err() || run.consume.is_err();
            print_notes_and_logs(w, failed, &run.notes, &run.logs);
            report.dirs.push((way, run_dir));
            report.throughput.push((way, run));
        }
    }

    report.rate = match knobs.latency_rate {
        Some(r) => Ok((r, "ROUTER_BENCH_LATENCY_RATE".into())),
        None => {
            let direct: Vec<f64> = report
                .throughput
                .iter()
                .filter(|(w, _)| *w == Way::Direct)
                .filter_map(|(_, r)| r.produce.as_ref().ok().map(Throughput::records_per_sec))
                .collect();
            match median(direct) {
                Some(max) => Ok((
                    ((max / 2.0) as u64).max(1),
                    format!("half of the direct path's median produce rate, {max:.0} records/s"),
                )),
                None => Err("no direct produce rate to halve (ROUTER_BENCH_LATENCY_RATE sets one)".into()),
            }
        }
    };
    match &report.rate {
        Ok((rate, why)) => println!(
            "==> {}: latency at {rate} records/s ({why}), {} s + {} s unmeasured per run",
            net.title, knobs.latency_secs, knobs.warmup_secs
        ),
        Err(e) => println!("==> {}: latency runs skipped: {e}", net.title),
    }
    if let Ok((rate, _)) = report.rate.clone() {
        for rep in 0..knobs.repeat {
            for way in order(rep, &knobs.ways) {
                let run_dir = dir.join(format!("latency-{}-{}", way.name(), rep + 1));
                let run = match fs::create_dir_all(&run_dir) {
                    Ok(()) => latency_run(knobs, net, way, (&run_dir, &mut kept), rep + 1, rate, clk),
                    Err(e) => LatencyRun {
                        latency: Err(format!("creating {}: {e}", run_dir.display())),
                        notes: Vec::new(),
                        logs: Vec::new(),
                    },
                };
                let w = way.name().len() + 8;
                match &run.latency {
                    Ok(l) => {
                        println!(
                            "{} run {}: produce {}; {} records measured at {:.0}/s (at most {:.1} ms behind)",
                            way.name(),
                            rep + 1,
                            describe_stats(&l.produce),
                            l.records,
                            l.achieved,
                            l.behind_ms
                        );
                        println!(
                            "{:w$}fetch   {} ({})",
                            "",
                            describe_stats(&l.fetch),
                            describe_cpu(&l.cpu, way)
                        );
                    }
                    Err(e) => println!("{} run {}: latency n/a: {e}", way.name(), rep + 1),
                }
                print_notes_and_logs(w, run.latency.is_err(), &run.notes, &run.logs);
                report.dirs.push((way, run_dir));
                report.latency.push((way, run));
            }
        }
    }
    if report.sequenced {
        run_sequential(knobs, net, (dir, &mut kept), clk, &mut report);
    } else {
        println!(
            "==> {}: no sequential runs (ROUTER_BENCH_SEQUENTIAL=0)",
            net.title
        );
    }
    if report.pipelined {
        run_pipeline(knobs, net, (dir, &mut kept), clk, &mut report);
    } else if !net.is_loopback() {
        println!("==> {}: no pipelining runs (ROUTER_BENCH_PIPELINE=0)", net.title);
    }
    drop(kept);
    if !knobs.keep {
        let _ = fs::remove_dir_all(dir.join(KAFKA_DATA));
    }
    report
}

/// The sequential (overhead) runs of a case, every path.
fn run_sequential(
    knobs: &Knobs,
    net: &Net,
    (dir, kept): (&Path, &mut Kept),
    clk: f64,
    report: &mut CaseReport,
) {
    println!(
        "==> {}: sequential produce latency, {} records one at a time after {SEQUENTIAL_WARMUP} unmeasured, \
         linger.ms=0, acks={}",
        net.title, net.sequential_records, knobs.acks
    );
    for rep in 0..knobs.repeat {
        for way in order(rep, &knobs.ways) {
            let run_dir = dir.join(format!("sequential-{}-{}", way.name(), rep + 1));
            let run = match fs::create_dir_all(&run_dir) {
                Ok(()) => sequential_run(knobs, net, way, (&run_dir, &mut *kept), rep + 1, clk),
                Err(e) => SequentialRun {
                    sequential: Err(format!("creating {}: {e}", run_dir.display())),
                    notes: Vec::new(),
                    logs: Vec::new(),
                },
            };
            let w = way.name().len() + 8;
            match &run.sequential {
                Ok(s) => println!(
                    "{} run {}: sequential {}; {} records in {:.2} s, {:.0}/s ({})",
                    way.name(),
                    rep + 1,
                    describe_stats(&s.produce),
                    s.records,
                    s.secs,
                    s.records as f64 / s.secs,
                    describe_cpu(&s.cpu, way)
                ),
                Err(e) => println!("{} run {}: sequential n/a: {e}", way.name(), rep + 1),
            }
            print_notes_and_logs(w, run.sequential.is_err(), &run.notes, &run.logs);
            report.dirs.push((way, run_dir));
            report.sequential.push((way, run));
        }
    }
}

/// The pipelining runs of a case, every path.
fn run_pipeline(
    knobs: &Knobs,
    net: &Net,
    (dir, kept): (&Path, &mut Kept),
    clk: f64,
    report: &mut CaseReport,
) {
    let ways = &knobs.ways;
    println!(
        "==> {}: pipelining, {} records per producer to a topic of {PIPELINE_PARTITIONS} partition, \
         max.in.flight.requests.per.connection {}",
        net.title,
        knobs.pipeline_records,
        IN_FLIGHT.map(in_flight_name).join(", ")
    );
    for rep in 0..knobs.repeat {
        for way in order(rep, ways) {
            let run_dir = dir.join(format!("pipeline-{}-{}", way.name(), rep + 1));
            let run = match fs::create_dir_all(&run_dir) {
                Ok(()) => pipeline_run(knobs, net, way, (&run_dir, &mut *kept), rep + 1, clk),
                Err(e) => PipelineRun {
                    produce: IN_FLIGHT
                        .iter()
                        .map(|&n| (n, Err(format!("creating {}: {e}", run_dir.display()))))
                        .collect(),
                    notes: Vec::new(),
                    logs: Vec::new(),
                },
            };
            let w = way.name().len() + 8;
            for (i, (n, r)) in run.produce.iter().enumerate() {
                let lead = if i == 0 {
                    format!("{} run {}: ", way.name(), rep + 1)
                } else {
                    " ".repeat(w)
                };
                let figures = match r {
                    Ok(t) => describe_throughput(t, way),
                    Err(e) => format!("n/a: {e}"),
                };
                println!("{lead}in flight {}: {figures}", in_flight_name(*n));
            }
            let failed = run.produce.iter().any(|(_, r)| r.is_err());
            print_notes_and_logs(w, failed, &run.notes, &run.logs);
            report.dirs.push((way, run_dir));
            report.pipeline.push((way, run));
        }
    }
}

// ---------------------------------------------------------------------------
// The report

/// A metric of the table: its name, whether higher is better, and its
/// value in a run.
type Metric<'a> = (&'a str, bool, Box<dyn Fn(&CaseReport, Way) -> Vec<Res<f64>> + 'a>);

/// The MB/s of a phase (produce or consume) in each throughput run of `way`.
fn throughput_values(
    r: &CaseReport,
    way: Way,
    phase: impl Fn(&ThroughputRun) -> &Res<Throughput>,
) -> Vec<Res<f64>> {
    r.throughput
        .iter()
        .filter(|(w, _)| *w == way)
        .map(|(_, t)| {
            phase(t)
                .as_ref()
                .map(Throughput::mb_per_sec)
                .map_err(Clone::clone)
        })
        .collect()
}

fn latency_values(r: &CaseReport, way: Way, f: impl Fn(&Latency) -> f64) -> Vec<Res<f64>> {
    let v: Vec<Res<f64>> = r
        .latency
        .iter()
        .filter(|(w, _)| *w == way)
        .map(|(_, l)| l.latency.as_ref().map(&f).map_err(Clone::clone))
        .collect();
    match (&r.rate, v.is_empty()) {
        (Err(e), true) => vec![Err(e.clone())],
        _ => v,
    }
}

fn metrics<'a>() -> Vec<Metric<'a>> {
    vec![
        (
            "produce MB/s",
            true,
            Box::new(|r, w| throughput_values(r, w, |t| &t.produce)),
        ),
        (
            "consume MB/s",
            true,
            Box::new(|r, w| throughput_values(r, w, |t| &t.consume)),
        ),
        (
            "produce latency p50 ms",
            false,
            Box::new(|r, w| latency_values(r, w, |l| l.produce.p50)),
        ),
        (
            "produce latency p99 ms",
            false,
            Box::new(|r, w| latency_values(r, w, |l| l.produce.p99)),
        ),
        (
            "fetch latency (end to end) p50 ms",
            false,
            Box::new(|r, w| latency_values(r, w, |l| l.fetch.p50)),
        ),
        (
            "fetch latency (end to end) p99 ms",
            false,
            Box::new(|r, w| latency_values(r, w, |l| l.fetch.p99)),
        ),
    ]
}

/// The median of a metric over a path's runs.
fn metric_value(r: &CaseReport, name: &str, way: Way) -> Option<f64> {
    let m = metrics();
    let (_, _, f) = m.iter().find(|(n, _, _)| *n == name)?;
    median(f(r, way).into_iter().filter_map(Result::ok).collect())
}

/// One of the issue's goals for one figure, checked on the medians of one
/// bench run.
#[derive(Debug)]
struct Check {
    /// In a sentence, for the goals list.
    goal: String,
    /// In a few words, for the tables' goal column.
    short: String,
    /// Met, missed, or n/a (a figure missing).
    ok: Option<bool>,
    /// The ratio or the difference it was decided on.
    figure: String,
}

fn verdict(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "met",
        Some(false) => "missed",
        None => "n/a",
    }
}

/// "0.83 x", or "n/a".
fn ratio_text(r: Option<f64>) -> String {
    r.map_or_else(|| "n/a".into(), |x| format!("{x:.2} x"))
}

/// "+0.512 ms", or "n/a".
fn added_text(a: Option<f64>) -> String {
    a.map_or_else(|| "n/a".into(), |x| format!("{x:+.3} ms"))
}

/// The goals on metric `name` of the main table: throughput at least
/// `GOAL_THROUGHPUT_RATIO` x direct; on loopback, at most
/// `GOAL_ADDED_P99_MS` added to the direct p99s at half the maximum load;
/// and ahead of every proxy that ran on throughput and p99.
fn metric_checks(r: &CaseReport, knobs: &Knobs, name: &str) -> Vec<Check> {
    let ran = |w: Way| knobs.ways.contains(&w);
    let mut checks = Vec::new();
    if !ran(Way::Strait) {
        return checks;
    }
    let v = |w: Way| metric_value(r, name, w);
    let throughput = name.ends_with("MB/s");
    let p99 = name.contains("p99");
    if !throughput && !p99 {
        return checks;
    }
    if ran(Way::Direct) {
        if throughput {
            let ratio = v(Way::Strait)
                .zip(v(Way::Direct))
                .filter(|(_, d)| *d > 0.0)
                .map(|(s, d)| s / d);
            checks.push(Check {
                goal: format!("Strait {name} >= {GOAL_THROUGHPUT_RATIO} x direct"),
                short: format!(">= {GOAL_THROUGHPUT_RATIO} x direct"),
                ok: ratio.map(|x| x >= GOAL_THROUGHPUT_RATIO),
                figure: ratio_text(ratio),
            });
        } else if r.net.is_loopback() {
            let added = v(Way::Strait).zip(v(Way::Direct)).map(|(s, d)| s - d);
            checks.push(Check {
                goal: format!(
                    "Strait adds <= {GOAL_ADDED_P99_MS} ms to the direct {name} at half the max load"
                ),
                short: format!("<= +{GOAL_ADDED_P99_MS} ms vs direct"),
                ok: added.map(|a| a <= GOAL_ADDED_P99_MS),
                figure: added_text(added),
            });
        }
    }
    for p in Way::PROXIES.into_iter().filter(|p| ran(*p)) {
        let sp = v(Way::Strait).zip(v(p));
        let (ok, figure) = if throughput {
            let ratio = sp.filter(|(_, p)| *p > 0.0).map(|(s, p)| s / p);
            (sp.map(|(s, p)| s > p), ratio_text(ratio))
        } else {
            (sp.map(|(s, p)| s < p), added_text(sp.map(|(s, p)| s - p)))
        };
        checks.push(Check {
            goal: format!("Strait ahead of {}, {name}", p.title()),
            short: format!("{} {}", if throughput { ">" } else { "<" }, p.title()),
            ok,
            figure,
        });
    }
    checks
}

/// The tables' goal column: each goal's verdict in a few words.
fn goal_cell(checks: &[Check]) -> String {
    checks
        .iter()
        .map(|c| format!("{}: {}", c.short, verdict(c.ok)))
        .collect::<Vec<_>>()
        .join("; ")
}

impl CaseReport {
    fn print_table(&self, knobs: &Knobs) {
        println!(
            "{}, upstream {}: median of {} runs per path; {} x {RECORD_BYTES} B records, {PARTITIONS} partitions, \
             acks={}; latency at {}",
            self.net.title,
            knobs.upstream.title(),
            knobs.repeat,
            self.net.records,
            knobs.acks,
            match &self.rate {
                Ok((rate, why)) => format!("{rate} records/s ({why})"),
                Err(e) => format!("n/a ({e})"),
            }
        );
        let ways = &knobs.ways;
        let others: Vec<Way> = ways.iter().copied().filter(|w| *w != Way::Strait).collect();
        let mut reasons = Vec::new();
        let mut rows = Vec::new();
        for (name, higher_is_better, f) in metrics() {
            let format = |v: f64| {
                if higher_is_better {
                    format!("{v:.1}")
                } else {
                    format!("{v:.3}")
                }
            };
            let cells: Vec<(Way, Cell)> = ways
                .iter()
                .map(|&w| (w, cell(w.title(), f(self, w), &format, &mut reasons)))
                .collect();
            let value = |way: Way| cells.iter().find(|(w, _)| *w == way).and_then(|(_, c)| c.value);
            let vs = |other: Way| match (value(Way::Strait), value(other)) {
                (Some(s), Some(o)) if higher_is_better && o > 0.0 => format!("{:.2} x", s / o),
                (Some(s), Some(o)) if !higher_is_better => format!("{:+.3} ms", s - o),
                _ => "n/a".into(),
            };
            let mut row = vec![name.to_owned()];
            row.extend(cells.iter().map(|(_, c)| c.text.clone()));
            if ways.contains(&Way::Strait) {
                row.extend(others.iter().map(|&o| vs(o)));
            }
            row.push(goal_cell(&metric_checks(self, knobs, name)));
            rows.push(row);
        }
        let mut header: Vec<String> = vec!["metric".into()];
        header.extend(ways.iter().map(|w| w.title().to_owned()));
        if ways.contains(&Way::Strait) {
            header.extend(others.iter().map(|o| format!("Strait vs {}", o.title())));
        }
        header.push("goals (Strait)".into());
        print_table_notes(
            &header.iter().map(String::as_str).collect::<Vec<_>>(),
            &rows,
            "throughput: Strait / other (> 1 better); latency: Strait minus other (< 0 better); goals decided on \
             these medians",
            &reasons,
        );
        self.print_cpu(knobs);
    }

    /// The CPU use of a phase in each successful run of `way`.
    fn cpu_of(&self, phase: &str, way: Way) -> Vec<CpuUse> {
        let throughput = self.throughput.iter().filter(|(w, _)| *w == way).map(|(_, r)| r);
        match phase {
            "produce" => throughput
                .filter_map(|r| r.produce.as_ref().ok().map(|t| t.cpu))
                .collect(),
            "consume" => throughput
                .filter_map(|r| r.consume.as_ref().ok().map(|t| t.cpu))
                .collect(),
            "sequential" => self
                .sequential
                .iter()
                .filter(|(w, _)| *w == way)
                .filter_map(|(_, r)| r.sequential.as_ref().ok().map(|s| s.cpu))
                .collect(),
            _ => self
                .latency
                .iter()
                .filter(|(w, _)| *w == way)
                .filter_map(|(_, r)| r.latency.as_ref().ok().map(|l| l.cpu))
                .collect(),
        }
    }

    /// Median CPU seconds per phase and process.
    fn print_cpu(&self, knobs: &Knobs) {
        type Pick = fn(&CpuUse) -> Option<f64>;
        let procs: Vec<(String, Pick)> = {
            let mut p: Vec<(String, Pick)> = vec![
                (format!("upstream ({})", knobs.upstream.title()), |c| {
                    c.procs[UPSTREAM]
                }),
                ("front (Strait / a proxy)".into(), |c| c.procs[FRONT]),
            ];
            if !self.net.is_loopback() {
                p.push(("relay".into(), |c| c.procs[RELAY]));
            }
            p.push(("client (librdkafka, this process)".into(), |c| c.client));
            p.push(("other (rest of the machine)".into(), |c| c.other));
            p
        };
        let mut phases = vec!["produce", "consume", "latency run"];
        if self.sequenced {
            phases.push("sequential");
        }
        let ways = &knobs.ways;
        let mut rows = Vec::new();
        for phase in phases {
            let per_way: Vec<(Way, Vec<CpuUse>)> = ways.iter().map(|&w| (w, self.cpu_of(phase, w))).collect();
            for (proc, pick) in &procs {
                let mut row = vec![format!("{phase}: {proc}")];
                for (w, u) in &per_way {
                    let v = median(u.iter().filter_map(pick).collect());
                    row.push(match v {
                        Some(v) => format!("{v:.2}"),
                        None if *w == Way::Direct && proc.starts_with("front") => "-".into(),
                        None => "n/a".into(),
                    });
                }
                rows.push(row);
            }
        }
        println!(
            "{}: CPU seconds per phase, medians of the successful runs",
            self.net.title
        );
        let mut header = vec!["phase: process"];
        header.extend(ways.iter().map(|w| w.title()));
        print_rows(&header, &rows);
    }

    /// WARN/ERROR lines in Strait's logs (the upstream Strait's apart),
    /// Kafka's and Kroxylicious's, and the notes of each path.
    fn print_log_summary(&self, knobs: &Knobs) {
        let run_logs = |way: Way, log: &str| -> Vec<PathBuf> {
            self.dirs
                .iter()
                .filter(|(w, _)| *w == way)
                .map(|(_, dir)| dir.join(log))
                .collect()
        };
        let flagged = |what: &str, logs: &[PathBuf]| {
            common::print_flagged_lines(
                &format!("{}: {what}", self.net.title),
                logs.iter().map(PathBuf::as_path),
            );
        };
        if knobs.ways.contains(&Way::Strait) {
            flagged("Strait logs", &run_logs(Way::Strait, "strait.log"));
        }
        match knobs.upstream {
            Upstream::Kafka => flagged("Kafka's log", &[self.dir.join(Upstream::Kafka.log())]),
            Upstream::Strait => {
                let logs: Vec<PathBuf> = self
                    .dirs
                    .iter()
                    .map(|(_, dir)| dir.join(Upstream::Strait.log()))
                    .collect();
                flagged("upstream Strait logs", &logs);
            }
            Upstream::Tansu => {}
        }
        if knobs.ways.contains(&Way::Kroxylicious) {
            let logs = if knobs.upstream.kept() {
                vec![self.dir.join("kroxylicious.log")]
            } else {
                run_logs(Way::Kroxylicious, "kroxylicious.log")
            };
            flagged("Kroxylicious logs", &logs);
        }
        for &way in &knobs.ways {
            let notes: Vec<&String> = self
                .throughput
                .iter()
                .filter(|(w, _)| *w == way)
                .flat_map(|(_, r)| &r.notes)
                .chain(
                    self.latency
                        .iter()
                        .filter(|(w, _)| *w == way)
                        .flat_map(|(_, r)| &r.notes),
                )
                .chain(
                    self.sequential
                        .iter()
                        .filter(|(w, _)| *w == way)
                        .flat_map(|(_, r)| &r.notes),
                )
                .chain(
                    self.pipeline
                        .iter()
                        .filter(|(w, _)| *w == way)
                        .flat_map(|(_, r)| &r.notes),
                )
                .collect();
            if !notes.is_empty() {
                println!(
                    "{}: {} notes on the {} path, first: {}",
                    self.net.title,
                    notes.len(),
                    way.title(),
                    notes[0]
                );
            }
        }
    }

    /// A figure of the sequential runs of `way`, one per run.
    fn sequential_values(&self, way: Way, f: impl Fn(&Stats) -> f64) -> Vec<Res<f64>> {
        self.sequential
            .iter()
            .filter(|(w, _)| *w == way)
            .map(|(_, r)| r.sequential.as_ref().map(|s| f(&s.produce)).map_err(Clone::clone))
            .collect()
    }

    /// The median of a figure of the sequential runs of `way`.
    fn sequential_value(&self, way: Way, f: impl Fn(&Stats) -> f64) -> Option<f64> {
        median(
            self.sequential_values(way, f)
                .into_iter()
                .filter_map(Result::ok)
                .collect(),
        )
    }

    /// The goal on the sequential produce latency p99 (loopback only):
    /// Strait adds at most `GOAL_SEQUENTIAL_ADDED_P99_MS` to direct's.
    fn sequential_checks(&self, knobs: &Knobs) -> Vec<Check> {
        if !self.net.is_loopback() || !knobs.ways.contains(&Way::Strait) || !knobs.ways.contains(&Way::Direct)
        {
            return Vec::new();
        }
        let p99 = |w| self.sequential_value(w, |s| s.p99);
        let added = p99(Way::Strait).zip(p99(Way::Direct)).map(|(s, d)| s - d);
        vec![Check {
            goal: format!(
                "Strait adds <= {GOAL_SEQUENTIAL_ADDED_P99_MS} ms to the direct sequential produce latency p99"
            ),
            short: format!("<= +{GOAL_SEQUENTIAL_ADDED_P99_MS} ms vs direct"),
            ok: added.map(|a| a <= GOAL_SEQUENTIAL_ADDED_P99_MS),
            figure: added_text(added),
        }]
    }

    /// The overhead table: the sequential produce latency p50/p99/max per
    /// path and what Strait and each proxy add to the direct path's.
    fn print_sequential_table(&self, knobs: &Knobs) {
        println!(
            "{}, upstream {}: sequential produce latency (one record at a time), median of {} runs per path; \
             {} x {RECORD_BYTES} B records after {SEQUENTIAL_WARMUP} unmeasured, to a topic of \
             {SEQUENTIAL_PARTITIONS} partition, acks={}, linger.ms=0",
            self.net.title,
            knobs.upstream.title(),
            knobs.repeat,
            self.net.sequential_records,
            knobs.acks
        );
        type Figure = fn(&Stats) -> f64;
        let figures: [(&str, Figure); 3] = [
            ("sequential produce latency p50 ms", |s| s.p50),
            ("sequential produce latency p99 ms", |s| s.p99),
            ("sequential produce latency max ms", |s| s.max),
        ];
        let ways = &knobs.ways;
        let fronts: Vec<Way> = ways.iter().copied().filter(|w| *w != Way::Direct).collect();
        let mut reasons = Vec::new();
        let mut rows = Vec::new();
        for (name, f) in figures {
            let cells: Vec<(Way, Cell)> = ways
                .iter()
                .map(|&w| {
                    (
                        w,
                        cell(
                            w.title(),
                            self.sequential_values(w, f),
                            &|v| format!("{v:.3}"),
                            &mut reasons,
                        ),
                    )
                })
                .collect();
            let value = |way: Way| cells.iter().find(|(w, _)| *w == way).and_then(|(_, c)| c.value);
            let mut row = vec![name.to_owned()];
            row.extend(cells.iter().map(|(_, c)| c.text.clone()));
            for &w in &fronts {
                row.push(added_text(value(w).zip(value(Way::Direct)).map(|(v, d)| v - d)));
            }
            row.push(if name.contains("p99") {
                goal_cell(&self.sequential_checks(knobs))
            } else {
                String::new()
            });
            rows.push(row);
        }
        let mut header: Vec<String> = vec!["metric".into()];
        header.extend(ways.iter().map(|w| w.title().to_owned()));
        header.extend(fronts.iter().map(|w| format!("{} adds (vs direct)", w.title())));
        header.push("goals (Strait)".into());
        print_table_notes(
            &header.iter().map(String::as_str).collect::<Vec<_>>(),
            &rows,
            "send to delivery report, each record sent after the report of the one before",
            &reasons,
        );
    }

    /// The records/s of the pipelining producers with `in_flight`, one per
    /// run of `way`.
    fn pipeline_values(&self, way: Way, in_flight: Option<u32>) -> Vec<Res<f64>> {
        self.pipeline
            .iter()
            .filter(|(w, _)| *w == way)
            .flat_map(|(_, r)| &r.produce)
            .filter(|(n, _)| *n == in_flight)
            .map(|(_, t)| t.as_ref().map(Throughput::records_per_sec).map_err(Clone::clone))
            .collect()
    }

    /// The median records/s with `in_flight` over the median with one
    /// request in flight, on `way`.
    fn pipeline_ratio(&self, way: Way, in_flight: Option<u32>) -> Option<f64> {
        let rate = |n| {
            median(
                self.pipeline_values(way, n)
                    .into_iter()
                    .filter_map(Result::ok)
                    .collect(),
            )
        };
        rate(in_flight)
            .zip(rate(Some(1)))
            .filter(|(_, one)| *one > 0.0)
            .map(|(n, one)| n / one)
    }

    /// The goal on pipelining: through Strait, 5 requests in flight get
    /// "about 5x" (at least `GOAL_PIPELINE_RATIO`) one at a time.
    fn pipeline_checks(&self, knobs: &Knobs) -> Vec<Check> {
        if !self.pipelined || !knobs.ways.contains(&Way::Strait) {
            return Vec::new();
        }
        let ratio = self.pipeline_ratio(Way::Strait, Some(5));
        let others: Vec<String> = knobs
            .ways
            .iter()
            .filter(|w| **w != Way::Strait)
            .map(|&w| format!("{} {}", w.title(), ratio_text(self.pipeline_ratio(w, Some(5)))))
            .collect();
        vec![Check {
            goal: format!(
                "a producer with 5 requests in flight gets about 5x (>= {GOAL_PIPELINE_RATIO}x) the throughput of one \
                 at a time, through Strait"
            ),
            short: format!(">= {GOAL_PIPELINE_RATIO} x"),
            ok: ratio.map(|x| x >= GOAL_PIPELINE_RATIO),
            figure: if others.is_empty() {
                ratio_text(ratio)
            } else {
                format!("{}; {}", ratio_text(ratio), others.join(", "))
            },
        }]
    }

    /// The pipelining table: records/s per in-flight limit on every path,
    /// Strait / direct, and the ratios to one request in flight.
    fn print_pipeline_table(&self, knobs: &Knobs) {
        println!(
            "{}: pipelining, median of {} runs per path; {} x {RECORD_BYTES} B records per producer to a topic of \
             {PIPELINE_PARTITIONS} partition, acks={}, linger.ms={}",
            self.net.title, knobs.repeat, knobs.pipeline_records, knobs.acks, knobs.linger_ms
        );
        let ways = &knobs.ways;
        let vs_direct = ways.contains(&Way::Strait) && ways.contains(&Way::Direct);
        let mut reasons = Vec::new();
        let mut rows = Vec::new();
        for n in IN_FLIGHT {
            let cells: Vec<(Way, Cell)> = ways
                .iter()
                .map(|&w| {
                    (
                        w,
                        cell(
                            w.title(),
                            self.pipeline_values(w, n),
                            &|v| format!("{v:.0}"),
                            &mut reasons,
                        ),
                    )
                })
                .collect();
            let value = |way: Way| cells.iter().find(|(w, _)| *w == way).and_then(|(_, c)| c.value);
            let mut row = vec![format!("in flight {}: records/s", in_flight_name(n))];
            row.extend(cells.iter().map(|(_, c)| c.text.clone()));
            if vs_direct {
                row.push(ratio_text(
                    value(Way::Strait)
                        .zip(value(Way::Direct))
                        .filter(|(_, d)| *d > 0.0)
                        .map(|(s, d)| s / d),
                ));
            }
            row.push(String::new());
            rows.push(row);
        }
        for n in IN_FLIGHT.into_iter().filter(|n| *n != Some(1)) {
            let mut row = vec![format!("in flight {} / in flight 1", in_flight_name(n))];
            for &w in ways {
                row.push(ratio_text(self.pipeline_ratio(w, n)));
            }
            if vs_direct {
                row.push(String::new());
            }
            row.push(if n == Some(5) {
                goal_cell(&self.pipeline_checks(knobs))
            } else {
                String::new()
            });
            rows.push(row);
        }
        let mut header: Vec<String> = vec!["producer (max.in.flight.requests.per.connection)".into()];
        header.extend(ways.iter().map(|w| w.title().to_owned()));
        if vs_direct {
            header.push("Strait vs direct".into());
        }
        header.push("goals (Strait)".into());
        print_table_notes(
            &header.iter().map(String::as_str).collect::<Vec<_>>(),
            &rows,
            "records/s from the first send to the last delivery report (one record delivered before); \
             ratios of the medians",
            &reasons,
        );
    }
}

/// A table, the line that says how to read it, and the numbered reasons
/// its "n/a" cells refer to.
fn print_table_notes(header: &[&str], rows: &[Vec<String>], note: &str, reasons: &[String]) {
    print_rows(header, rows);
    println!("{note}");
    for (i, r) in reasons.iter().enumerate() {
        println!("[{}] {r}", i + 1);
    }
}

/// The issue's goals, each met or missed, with the ratio or difference
/// (of this run's medians) it was decided on.
fn print_goals(reports: &[CaseReport], knobs: &Knobs) {
    println!(
        "goals (the issue's), each decided on the medians of this run, upstream {}:",
        knobs.upstream.title()
    );
    let (mut met, mut all) = (0, 0);
    for r in reports {
        let mut checks = Vec::new();
        for (name, _, _) in metrics() {
            checks.extend(metric_checks(r, knobs, name));
        }
        checks.extend(r.sequential_checks(knobs));
        checks.extend(r.pipeline_checks(knobs));
        for c in checks {
            all += 1;
            met += usize::from(c.ok == Some(true));
            println!("  {}: {}: {} ({})", r.net.title, c.goal, verdict(c.ok), c.figure);
        }
    }
    println!("  {met} of {all} met");
}
