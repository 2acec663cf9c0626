//! The broker benchmark: Strait (`strait serve`, local spool topics) against
//! Tansu 0.6.0 (a Kafka-compatible broker, memory storage), in the same run,
//! on the same machine, with the same load generator (librdkafka through
//! the `rdkafka` crate).
//!
//! Run it with `scripts/bench-broker [DIR]`, which builds Strait, installs
//! the peers (`scripts/peers`) and calls
//! `cargo bench --bench broker -- WORKDIR`. Strait's data directory and both
//! brokers' logs live under the work directory (default: a temporary
//! directory under `target/bench-broker`).
//!
//! For each broker, every run starts a fresh broker on a free loopback port,
//! creates a topic with 8 partitions (AdminClient; Tansu would auto-create
//! 4), and measures:
//!
//! 1. Produce throughput: `BROKER_BENCH_RECORDS` records of 1 KiB (no key),
//!    spread round-robin over the 8 partitions, acks=1, linger.ms=5,
//!    batch.size default, no compression, one producer. Timed from the first
//!    send (after the producer fetched metadata) to the last delivery report.
//! 2. Consume throughput: one consumer, all 8 partitions assigned from the
//!    beginning (no group is joined), until every delivered record was read
//!    (counted by consuming: Tansu's ListOffsets(latest) under-reports).
//!    Timed from the assignment (after the consumer fetched metadata) to
//!    the last record.
//! 3. Produce latency at acks=1: `BROKER_BENCH_LATENCY_RECORDS` records sent
//!    one at a time (linger.ms=0), each waiting for its delivery report
//!    before the next is sent; p50, p99 and max of send-to-delivery time.
//! 4. Raw produce throughput: the same number of 1 KiB records into a second
//!    8-partition topic, from a load generator that costs next to no CPU,
//!    so that the broker, not librdkafka, sets the pace on a small machine.
//!    One Produce request (v9, acks=1) carrying a 16-record batch for each
//!    of the 8 partitions is encoded once and sent over and over (only the
//!    correlation id changes) on 4 connections with up to 5 requests in
//!    flight on each; every partition answer must be error-free. Timed from
//!    the first send to the last answer.
//! 5. Raw consume throughput: that topic read back by a load generator just
//!    as thrifty: 4 connections, 2 partitions each, one Fetch (v12) in flight
//!    per connection with librdkafka's default limits (1 MiB per partition,
//!    50 MiB per response, max wait 500 ms). Only batch headers are read to
//!    advance the offsets; every record must arrive. Timed from the first
//!    Fetch to the last record.
//!
//! Runs alternate between the brokers (S T, T S, S T, ...) and each figure
//! is the median of `BROKER_BENCH_REPEAT` runs. A phase that fails (error,
//! stall, broker exit) is reported as "n/a" with the reason; the bench goes
//! on. Every run prints the CPU time of the broker, of the load generator and
//! of everything else on the machine during each phase (from /proc): client
//! and broker share the cores, and on a shared machine other work skews a
//! run.
//!
//! Environment:
//! - `BROKER_BENCH_RECORDS` (default 1000000, about 1 GB): records of the
//!   throughput runs. Smaller runs last well under a second on Strait and
//!   scatter more.
//! - `BROKER_BENCH_LATENCY_RECORDS` (default 5000): records of the latency run.
//! - `BROKER_BENCH_REPEAT` (default 3): runs per broker.
//! - `BROKER_BENCH_STRAIT_CONFIG`: a config file for `strait serve --config`
//!   (to try another durability policy; default: none, `interval` 1s).
//! - `BROKER_BENCH_KEEP=1`: keep Strait's data directories (by default each
//!   is removed after its run; the brokers' logs stay in the work directory).
//! - `STRAIT_BIN`, `TANSU_BIN`: override the broker binaries.

// The integration tests' harness: the broker readiness check and free
// ports (the rest of it is unused here).
#[path = "../tests/support/mod.rs"]
mod support;

use std::error::Error;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

type BenchResult<T> = Result<T, Box<dyn Error>>;

/// Partitions of the benchmark topic.
const PARTITIONS: i32 = 8;
/// Size of every record value.
const RECORD_BYTES: usize = 1024;
/// linger.ms of the throughput producer.
const LINGER_MS: u32 = 5;
/// Records sent (and not measured) before the latency run.
const LATENCY_WARMUP: u64 = 100;
/// A phase with no progress for this long is given up.
const STALL: Duration = Duration::from_secs(30);
/// How long a broker may take to answer ApiVersions after it was spawned.
const START_TIMEOUT: Duration = Duration::from_secs(30);

fn main() -> BenchResult<()> {
    // `cargo bench` adds `--bench`; the only argument of ours is the dir.
    let dir_arg = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let knobs = Knobs {
        records: env_u64("BROKER_BENCH_RECORDS", 1_000_000)?.max(PARTITIONS as u64),
        latency_records: env_u64("BROKER_BENCH_LATENCY_RECORDS", 5_000)?.max(1),
        repeat: env_u64("BROKER_BENCH_REPEAT", 3)?.max(1) as usize,
        strait_config: std::env::var_os("BROKER_BENCH_STRAIT_CONFIG").map(PathBuf::from),
        strait_bin: std::env::var_os("STRAIT_BIN")
            .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_strait")), PathBuf::from),
        tansu_bin: std::env::var_os("TANSU_BIN").map_or_else(|| root.join(".peers/bin/tansu"), PathBuf::from),
        keep: std::env::var("BROKER_BENCH_KEEP").is_ok_and(|v| v == "1"),
    };
    let work = match dir_arg {
        Some(d) => PathBuf::from(d),
        None => {
            let parent = root.join("target/bench-broker");
            fs::create_dir_all(&parent)?;
            tempdir_in(&parent)?
        }
    };
    fs::create_dir_all(&work)?;
    let clk_tck = clock_ticks();

    print_facts(&knobs, &work);

    let mut results: Vec<(Kind, RunResult)> = Vec::new();
    let started = Instant::now();
    for rep in 0..knobs.repeat {
        let order = if rep % 2 == 0 {
            [Kind::Strait, Kind::Tansu]
        } else {
            [Kind::Tansu, Kind::Strait]
        };
        for kind in order {
            let dir = work.join(format!("{}-{}", kind.name(), rep + 1));
            fs::create_dir_all(&dir)?;
            let run = run_once(kind, &knobs, &dir, rep + 1, clk_tck);
            println!("{}", run.summary(kind, rep + 1));
            results.push((kind, run));
        }
    }
    let total = started.elapsed();

    println!();
    print_table(&knobs, &results);
    println!();
    println!(
        "total bench time {:.0} s; load average now {}; broker logs under {} \
         (scripts/bench-broker removes them unless BROKER_BENCH_KEEP=1)",
        total.as_secs_f64(),
        loadavg(),
        work.display()
    );
    print_strait_log_summary(&results);
    Ok(())
}

/// What the environment asked for.
#[derive(Debug)]
struct Knobs {
    records: u64,
    latency_records: u64,
    repeat: usize,
    strait_config: Option<PathBuf>,
    strait_bin: PathBuf,
    tansu_bin: PathBuf,
    keep: bool,
}

fn env_u64(name: &str, default: u64) -> BenchResult<u64> {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().map_err(|e| format!("{name}={v:?}: {e}").into()),
        Err(_) => Ok(default),
    }
}

fn tempdir_in(parent: &Path) -> BenchResult<PathBuf> {
    let pid = std::process::id();
    for i in 0..1000 {
        let p = parent.join(format!("run.{pid}.{i}"));
        if fs::create_dir(&p).is_ok() {
            return Ok(p);
        }
    }
    Err(format!("cannot create a run directory under {}", parent.display()).into())
}

/// The 1, 5 and 15 minute load averages.
fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "?".into(),
        |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

fn print_facts(knobs: &Knobs, work: &Path) {
    let nproc = thread::available_parallelism().map_or(0, |n| n.get());
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "?".into());
    let mem = fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:").map(|r| r.trim().to_owned()))
        .unwrap_or_else(|| "?".into());
    let tansu_version = Command::new(&knobs.tansu_bin)
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("?")
                .to_owned()
        })
        .unwrap_or_else(|e| format!("cannot run {}: {e}", knobs.tansu_bin.display()));
    let (_, librdkafka) = rdkafka::util::get_rdkafka_version();
    println!("broker benchmark: Strait vs Tansu, same load generator, same machine");
    println!(
        "  machine: nproc {nproc}, {model}, MemTotal {mem}, load average {}",
        loadavg()
    );
    println!(
        "  strait:  {} serve{} (durability: {})",
        knobs.strait_bin.display(),
        knobs
            .strait_config
            .as_ref()
            .map_or_else(String::new, |c| format!(" --config {}", c.display())),
        if knobs.strait_config.is_some() {
            "from the config file"
        } else {
            "default, interval 1s"
        }
    );
    println!("  tansu:   {tansu_version}, --storage-engine memory://tansu/");
    println!(
        "  client:  rdkafka crate 0.39, librdkafka {librdkafka}; work dir {}",
        work.display()
    );
    println!(
        "  produce: {} records x {RECORD_BYTES} B (no key) round-robin over {PARTITIONS} partitions, one producer, \
         acks=1, linger.ms={LINGER_MS}, batch.size default, compression none; timed to the last ack",
        knobs.records
    );
    println!("  consume: one consumer, all {PARTITIONS} partitions assigned from the beginning (no group), fetch defaults");
    println!(
        "  latency: {} records sent one at a time (after {LATENCY_WARMUP} unmeasured), each awaited, acks=1, linger.ms=0",
        knobs.latency_records
    );
    println!(
        "  runs:    {} per broker, alternating; medians reported; MB = 10^6 B of record values",
        knobs.repeat
    );
    println!();
}

// ---------------------------------------------------------------------------
// Brokers

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Strait,
    Tansu,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Strait => "strait",
            Kind::Tansu => "tansu",
        }
    }
}

/// A running broker, killed on drop.
#[derive(Debug)]
struct Broker {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Broker {
    fn start(kind: Kind, knobs: &Knobs, dir: &Path) -> Result<Broker, String> {
        let log = dir.join(format!("{}.log", kind.name()));
        let mut last = String::new();
        // A port found free can be taken before the broker binds it: retry.
        for _ in 0..3 {
            let port = support::free_port();
            let out = File::options()
                .create(true)
                .append(true)
                .open(&log)
                .map_err(|e| format!("opening {}: {e}", log.display()))?;
            let err = out.try_clone().map_err(|e| e.to_string())?;
            let mut cmd = match kind {
                Kind::Strait => {
                    let data = dir.join("data");
                    fs::create_dir_all(&data).map_err(|e| format!("creating {}: {e}", data.display()))?;
                    let mut c = Command::new(&knobs.strait_bin);
                    c.arg("serve")
                        .args(["--listen", &format!("127.0.0.1:{port}")])
                        .arg("--data-dir")
                        .arg(&data);
                    if let Some(config) = &knobs.strait_config {
                        c.arg("--config").arg(config);
                    }
                    c
                }
                Kind::Tansu => {
                    let url = format!("tcp://127.0.0.1:{port}");
                    let mut c = Command::new(&knobs.tansu_bin);
                    c.arg("broker")
                        .args(["--listener-url", &url, "--advertised-listener-url", &url])
                        .args(["--storage-engine", "memory://tansu/"]);
                    for var in [
                        "CLUSTER_ID",
                        "LISTENER_URL",
                        "ADVERTISED_LISTENER_URL",
                        "STORAGE_ENGINE",
                        "SCHEMA_REGISTRY",
                        "OTEL_EXPORTER_OTLP_ENDPOINT",
                    ] {
                        c.env_remove(var);
                    }
                    c
                }
            };
            let mut child = cmd
                .current_dir(dir)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .map_err(|e| format!("spawning {:?}: {e}", cmd.get_program()))?;
            match wait_ready(&mut child, port) {
                Ok(()) => return Ok(Broker { child, port, log }),
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    last = e;
                }
            }
        }
        Err(format!("{} did not start: {last}", kind.name()))
    }

    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The broker's exit status if it has exited.
    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    /// User + system CPU time of the broker so far, in clock ticks.
    fn cpu_ticks(&self) -> Option<u64> {
        let stat = fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        cpu_ticks_of(&stat)
    }

    /// Peak resident memory, and what is resident now split into anonymous
    /// memory and file-backed pages (mmapped segments count as those).
    fn memory(&self) -> Option<String> {
        let status = fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let mib = |key: &str| -> Option<f64> {
            let kib: f64 = status
                .lines()
                .find_map(|l| l.strip_prefix(key))?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()?;
            Some(kib / 1024.0)
        };
        Some(format!(
            "peak RSS {:.0} MiB; at the end anonymous {:.0} MiB, file-backed {:.0} MiB",
            mib("VmHWM:")?,
            mib("RssAnon:")?,
            mib("RssFile:")?
        ))
    }

    /// SIGTERM, then SIGKILL after 10 s. Returns how long the exit took.
    fn stop(&mut self) -> Result<Duration, String> {
        let started = Instant::now();
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => return Ok(started.elapsed()),
                Ok(None) if started.elapsed() < Duration::from_secs(10) => {
                    thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err("did not exit within 10 s of SIGTERM (killed)".into());
                }
            }
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Field 14 (utime) + 15 (stime) of a /proc/PID/stat line.
fn cpu_ticks_of(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces; it ends at the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// CPU time of this process (the load generator, librdkafka threads
/// included), in clock ticks.
fn own_cpu_ticks() -> Option<u64> {
    cpu_ticks_of(&fs::read_to_string("/proc/self/stat").ok()?)
}

/// Polls until the broker answers ApiVersions v0, failing early if it exits.
fn wait_ready(child: &mut Child, port: u16) -> Result<(), String> {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!("exited ({status}) before answering on {addr}"));
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

// ---------------------------------------------------------------------------
// One run against one broker

/// Records per second and payload bytes per second of one phase.
#[derive(Debug, Clone, Copy)]
struct Throughput {
    records: u64,
    secs: f64,
    /// Consume only: seconds from the assignment to the first record.
    first_record_secs: Option<f64>,
    cpu: CpuUse,
}

impl Throughput {
    fn records_per_sec(&self) -> f64 {
        self.records as f64 / self.secs
    }

    fn mb_per_sec(&self) -> f64 {
        self.records as f64 * RECORD_BYTES as f64 / 1e6 / self.secs
    }
}

#[derive(Debug, Clone, Copy)]
struct Latency {
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    cpu: CpuUse,
}

/// CPU seconds spent during one phase.
#[derive(Debug, Clone, Copy, Default)]
struct CpuUse {
    /// By the broker process.
    broker: Option<f64>,
    /// By the load generator (this process, librdkafka's threads included).
    client: Option<f64>,
    /// By everything else on the machine (other work on a shared machine
    /// skews the figures: compare runs with little of it).
    other: Option<f64>,
}

impl CpuUse {
    fn describe(&self) -> String {
        let f = |c: Option<f64>| c.map_or_else(|| "?".into(), |c| format!("{c:.1}"));
        format!(
            "cpu s: broker {}, client {}, other {}",
            f(self.broker),
            f(self.client),
            f(self.other)
        )
    }
}

/// CPU counters at one instant, in clock ticks.
#[derive(Debug, Clone, Copy)]
struct CpuSample {
    broker: Option<u64>,
    client: Option<u64>,
    machine: Option<u64>,
}

impl CpuSample {
    fn take(broker: &Broker) -> CpuSample {
        CpuSample {
            broker: broker.cpu_ticks(),
            client: own_cpu_ticks(),
            machine: machine_busy_ticks(),
        }
    }

    fn until(&self, later: &CpuSample, clk_tck: f64) -> CpuUse {
        let d = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?) as f64 / clk_tck);
        let broker = d(self.broker, later.broker);
        let client = d(self.client, later.client);
        let machine = d(self.machine, later.machine);
        let other = match (machine, broker, client) {
            (Some(m), Some(b), Some(c)) => Some((m - b - c).max(0.0)),
            _ => None,
        };
        CpuUse {
            broker,
            client,
            other,
        }
    }
}

/// Busy time of all CPUs (everything but idle and iowait), in clock ticks.
fn machine_busy_ticks() -> Option<u64> {
    let stat = fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest is within user).
    let v = v.get(..8)?;
    Some(v[0] + v[1] + v[2] + v[5] + v[6] + v[7])
}

#[derive(Debug)]
struct RunResult {
    produce: Result<Throughput, String>,
    raw_produce: Result<Throughput, String>,
    raw_consume: Result<Throughput, String>,
    consume: Result<Throughput, String>,
    latency: Result<Latency, String>,
    memory: Option<String>,
    log: Option<PathBuf>,
    notes: Vec<String>,
}

impl RunResult {
    fn failed(reason: String) -> RunResult {
        RunResult {
            produce: Err(reason.clone()),
            raw_produce: Err(reason.clone()),
            raw_consume: Err(reason.clone()),
            consume: Err(reason.clone()),
            latency: Err(reason),
            memory: None,
            log: None,
            notes: Vec::new(),
        }
    }

    fn any_error(&self) -> bool {
        self.produce.is_err()
            || self.consume.is_err()
            || self.latency.is_err()
            || self.raw_produce.is_err()
            || self.raw_consume.is_err()
            || !self.notes.is_empty()
    }

    fn summary(&self, kind: Kind, rep: usize) -> String {
        let tp = |r: &Result<Throughput, String>| match r {
            Ok(t) => format!(
                "{:.0} rec/s {:.1} MB/s in {:.2} s{} ({})",
                t.records_per_sec(),
                t.mb_per_sec(),
                t.secs,
                t.first_record_secs
                    .map_or_else(String::new, |f| format!(", first record after {f:.2} s")),
                t.cpu.describe()
            ),
            Err(e) => format!("n/a: {e}"),
        };
        let lat = match &self.latency {
            Ok(l) => format!(
                "p50 {:.3} ms, p99 {:.3} ms, max {:.2} ms ({})",
                l.p50_ms,
                l.p99_ms,
                l.max_ms,
                l.cpu.describe()
            ),
            Err(e) => format!("n/a: {e}"),
        };
        let mut s = format!(
            "{} run {rep}: produce {}\n{:>w$}consume {}\n{:>w$}latency {}\n{:>w$}raw produce {}\n{:>w$}raw consume {}",
            kind.name(),
            tp(&self.produce),
            "",
            tp(&self.consume),
            "",
            lat,
            "",
            tp(&self.raw_produce),
            "",
            tp(&self.raw_consume),
            w = kind.name().len() + 8
        );
        if let Some(mem) = &self.memory {
            let _ = write!(s, "\n{:>w$}broker memory: {mem}", "", w = kind.name().len() + 8);
        }
        for n in &self.notes {
            let _ = write!(s, "\n{:>w$}note: {n}", "", w = kind.name().len() + 8);
        }
        if self.any_error() {
            if let Some(log) = &self.log {
                let _ = write!(s, "\n{}", log_excerpt(kind, log));
            }
        }
        s
    }
}

/// The last lines and the WARN/ERROR lines of a broker's log.
fn log_excerpt(kind: Kind, log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_else(|e| format!("(cannot read {}: {e})", log.display()));
    let lines: Vec<&str> = text.lines().collect();
    let mut s = format!("--- {} log {} ---\n", kind.name(), log.display());
    let flagged: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panicked"))
        .collect();
    if !flagged.is_empty() {
        let _ = writeln!(s, "({} WARN/ERROR lines, first 15:)", flagged.len());
        for l in flagged.iter().take(15) {
            let _ = writeln!(s, "  {l}");
        }
    }
    let _ = writeln!(s, "(last 20 of {} lines:)", lines.len());
    for l in &lines[lines.len().saturating_sub(20)..] {
        let _ = writeln!(s, "  {l}");
    }
    s.push_str("---");
    s
}

fn run_once(kind: Kind, knobs: &Knobs, dir: &Path, rep: usize, clk_tck: f64) -> RunResult {
    let mut broker = match Broker::start(kind, knobs, dir) {
        Ok(b) => b,
        Err(e) => {
            let mut r = RunResult::failed(format!("broker did not start: {e}"));
            r.log = Some(dir.join(format!("{}.log", kind.name())));
            return r;
        }
    };
    let bootstrap = broker.bootstrap();
    let topic = format!("bench-{}-{rep}", kind.name());
    let mut result = RunResult::failed(String::new());
    result.log = Some(broker.log.clone());

    if let Err(e) = create_topic(&bootstrap, &topic) {
        let mut r = RunResult::failed(format!("creating the topic: {e}"));
        r.log = Some(broker.log.clone());
        return r;
    }

    let before = CpuSample::take(&broker);
    let produced = produce_throughput(&bootstrap, &topic, knobs.records);
    let after = CpuSample::take(&broker);
    result.produce = match &produced {
        Ok((t, _)) => Ok(Throughput {
            cpu: before.until(&after, clk_tck),
            ..*t
        }),
        Err(e) => Err(with_exit(&mut broker, e.clone())),
    };

    result.consume = match &produced {
        Ok((_, per_partition)) => {
            let before = CpuSample::take(&broker);
            let consumed = consume_throughput(&bootstrap, &topic, per_partition);
            let after = CpuSample::take(&broker);
            consumed
                .map(|t| Throughput {
                    cpu: before.until(&after, clk_tck),
                    ..t
                })
                .map_err(|e| with_exit(&mut broker, e))
        }
        Err(_) => Err("skipped: produce failed".into()),
    };

    let before = CpuSample::take(&broker);
    result.latency = produce_latency(&bootstrap, &topic, knobs.latency_records)
        .map(|l| Latency {
            cpu: before.until(&CpuSample::take(&broker), clk_tck),
            ..l
        })
        .map_err(|e| with_exit(&mut broker, e));

    let raw_topic = format!("{topic}-raw");
    result.raw_produce = create_topic(&bootstrap, &raw_topic)
        .and_then(|()| {
            let before = CpuSample::take(&broker);
            raw_produce_throughput(&bootstrap, &raw_topic, knobs.records).map(|t| Throughput {
                cpu: before.until(&CpuSample::take(&broker), clk_tck),
                ..t
            })
        })
        .map_err(|e| with_exit(&mut broker, e));
    result.raw_consume = match &result.raw_produce {
        Ok(produced) => {
            let before = CpuSample::take(&broker);
            let per_partition = produced.records / PARTITIONS as u64;
            raw_consume_throughput(&bootstrap, &raw_topic, per_partition)
                .map(|t| Throughput {
                    cpu: before.until(&CpuSample::take(&broker), clk_tck),
                    ..t
                })
                .map_err(|e| with_exit(&mut broker, e))
        }
        Err(_) => Err("skipped: raw produce failed".into()),
    };

    result.memory = broker.memory();
    if let Some(status) = broker.exited() {
        result
            .notes
            .push(format!("the broker exited during the run ({status})"));
    } else if kind == Kind::Strait {
        // Tansu is simply killed; Strait shows its graceful shutdown.
        match broker.stop() {
            Ok(d) if d > Duration::from_secs(2) => result
                .notes
                .push(format!("SIGTERM shutdown took {:.1} s", d.as_secs_f64())),
            Ok(_) => {}
            Err(e) => result.notes.push(format!("shutdown: {e}")),
        }
    }
    drop(broker);
    if kind == Kind::Strait && !knobs.keep {
        // A gigabyte per run adds up; the log stays.
        let _ = fs::remove_dir_all(dir.join("data"));
    }
    result
}

/// Appends "(broker exited: STATUS)" to an error when the broker is gone.
fn with_exit(broker: &mut Broker, e: String) -> String {
    match broker.exited() {
        Some(status) => format!("{e} (broker exited: {status})"),
        None => e,
    }
}

// ---------------------------------------------------------------------------
// The load generator

fn create_topic(bootstrap: &str, topic: &str) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("client.id", "strait-bench-admin")
        .create()
        .map_err(|e| format!("admin client: {e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let new_topic = NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(1));
    let options = AdminOptions::new()
        .operation_timeout(Some(Duration::from_secs(20)))
        .request_timeout(Some(Duration::from_secs(20)));
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
            return Err(format!("CreateTopics {name}: {code}"));
        }
    }
    // Wait until the metadata shows every partition with a leader.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut last;
    loop {
        match admin.inner().fetch_metadata(Some(topic), Duration::from_secs(5)) {
            Ok(md) => match md.topics().iter().find(|t| t.name() == topic) {
                Some(t) if t.error().is_some() => last = format!("metadata of {topic}: {:?}", t.error()),
                Some(t) => {
                    let led = t.partitions().iter().filter(|p| p.leader() >= 0).count();
                    if led == PARTITIONS as usize && t.partitions().len() == PARTITIONS as usize {
                        return Ok(());
                    }
                    last = format!(
                        "metadata of {topic}: {} partitions, {led} with a leader",
                        t.partitions().len()
                    );
                }
                None => last = format!("metadata: no topic {topic}"),
            },
            Err(e) => last = format!("metadata: {e}"),
        }
        if Instant::now() > deadline {
            return Err(format!("topic not ready after 15 s: {last}"));
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// Delivery reports, counted; the send time travels as the opaque
/// (nanoseconds since `base`).
#[derive(Debug)]
struct Deliveries {
    base: Instant,
    state: Mutex<DeliveryState>,
    cv: Condvar,
    keep_latencies: bool,
}

#[derive(Debug)]
struct DeliveryState {
    ok: u64,
    failed: u64,
    per_partition: Vec<u64>,
    first_error: Option<String>,
    client_errors: Vec<String>,
    latencies: Vec<Duration>,
    last_delivery: Option<Instant>,
}

impl Deliveries {
    fn new(keep_latencies: bool) -> Deliveries {
        Deliveries {
            base: Instant::now(),
            state: Mutex::new(DeliveryState {
                ok: 0,
                failed: 0,
                per_partition: vec![0; PARTITIONS as usize],
                first_error: None,
                client_errors: Vec::new(),
                latencies: Vec::new(),
                last_delivery: None,
            }),
            cv: Condvar::new(),
            keep_latencies,
        }
    }

    /// Waits until `count` reports (ok or failed) arrived; gives up when no
    /// report came for `STALL`.
    fn wait_for(&self, count: u64) -> Result<(), String> {
        let mut st = self.state.lock().unwrap();
        let mut seen = st.ok + st.failed;
        let mut progress = Instant::now();
        while st.ok + st.failed < count {
            let (next, _) = self.cv.wait_timeout(st, Duration::from_millis(200)).unwrap();
            st = next;
            if st.ok + st.failed > seen {
                seen = st.ok + st.failed;
                progress = Instant::now();
            } else if progress.elapsed() > STALL {
                return Err(format!(
                    "stalled: {} of {count} delivery reports after {} s without progress{}",
                    seen,
                    STALL.as_secs(),
                    client_errors(&st)
                ));
            }
        }
        Ok(())
    }
}

fn client_errors(st: &DeliveryState) -> String {
    match st.client_errors.last() {
        Some(e) => format!("; client error: {e} ({} in all)", st.client_errors.len()),
        None => String::new(),
    }
}

impl ClientContext for Deliveries {
    fn error(&self, error: KafkaError, reason: &str) {
        let mut st = self.state.lock().unwrap();
        if st.client_errors.len() < 100 {
            st.client_errors.push(format!("{error}: {reason}"));
        }
    }
}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, sent: usize) {
        let now = Instant::now();
        let mut st = self.state.lock().unwrap();
        match result {
            Ok(m) => {
                st.ok += 1;
                if let Some(n) = st.per_partition.get_mut(m.partition() as usize) {
                    *n += 1;
                }
                if self.keep_latencies {
                    st.latencies
                        .push(now - (self.base + Duration::from_nanos(sent as u64)));
                }
            }
            Err((e, _)) => {
                st.failed += 1;
                if st.first_error.is_none() {
                    st.first_error = Some(e.to_string());
                }
            }
        }
        st.last_delivery = Some(now);
        drop(st);
        self.cv.notify_all();
    }
}

fn producer(
    bootstrap: &str,
    linger_ms: u32,
    keep_latencies: bool,
) -> Result<ThreadedProducer<Deliveries>, String> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("client.id", "strait-bench-producer")
        .set("acks", "1")
        .set("linger.ms", linger_ms.to_string())
        .set("compression.type", "none")
        .set("enable.idempotence", "false")
        .set("message.timeout.ms", "60000")
        .create_with_context(Deliveries::new(keep_latencies))
        .map_err(|e| format!("producer: {e}"))
}

/// A record value: 1 KiB of printable bytes.
fn payload() -> Vec<u8> {
    (0..RECORD_BYTES).map(|i| b'a' + (i % 26) as u8).collect()
}

/// Sends one record, waiting while the producer's queue is full.
fn send(
    producer: &ThreadedProducer<Deliveries>,
    topic: &str,
    value: &[u8],
    partition: i32,
) -> Result<(), String> {
    let sent = producer.context().base.elapsed().as_nanos() as usize;
    let mut record = BaseRecord::<(), [u8], usize>::with_opaque_to(topic, sent)
        .payload(value)
        .partition(partition);
    let mut blocked: Option<Instant> = None;
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                let since = *blocked.get_or_insert_with(Instant::now);
                if since.elapsed() > STALL {
                    let st = producer.context().state.lock().unwrap();
                    return Err(format!(
                        "stalled: producer queue full for {} s, {} records in flight{}",
                        STALL.as_secs(),
                        producer.in_flight_count(),
                        client_errors(&st)
                    ));
                }
                thread::sleep(Duration::from_micros(500));
            }
            Err((e, _)) => return Err(format!("send: {e}")),
        }
    }
}

/// Produces `records` records; returns the throughput and how many records
/// each partition took.
fn produce_throughput(bootstrap: &str, topic: &str, records: u64) -> Result<(Throughput, Vec<u64>), String> {
    let producer = producer(bootstrap, LINGER_MS, false)?;
    // Connected and knowing the leaders before the clock starts.
    producer
        .client()
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| format!("producer metadata: {e}"))?;
    let value = payload();
    let start = Instant::now();
    for i in 0..records {
        send(&producer, topic, &value, (i % PARTITIONS as u64) as i32)?;
    }
    let deliveries = producer.context();
    deliveries.wait_for(records)?;
    let st = deliveries.state.lock().unwrap();
    if st.failed > 0 {
        return Err(format!(
            "{} of {records} deliveries failed, first: {}{}",
            st.failed,
            st.first_error.as_deref().unwrap_or("?"),
            client_errors(&st)
        ));
    }
    let end = st.last_delivery.unwrap_or_else(Instant::now);
    Ok((
        Throughput {
            records,
            secs: (end - start).as_secs_f64(),
            first_record_secs: None,
            cpu: CpuUse::default(),
        },
        st.per_partition.clone(),
    ))
}

/// Connections of the raw produce phase.
const RAW_CONNECTIONS: usize = 4;
/// Produce requests in flight per connection in the raw phase.
const RAW_IN_FLIGHT: usize = 5;
/// Records per batch (one batch per partition per request) in the raw phase.
const RAW_BATCH_RECORDS: usize = 16;
/// Produce version of the raw phase.
const RAW_PRODUCE_VERSION: i16 = 9;

/// The raw produce phase: one pre-encoded Produce request sent over and over
/// (see the module docs); returns the throughput of acknowledged records.
fn raw_produce_throughput(bootstrap: &str, topic: &str, records: u64) -> Result<Throughput, String> {
    let per_request = (RAW_BATCH_RECORDS * PARTITIONS as usize) as u64;
    let requests = records.div_ceil(per_request);
    let frame = raw_produce_frame(topic)?;
    let started = Instant::now();
    let workers: Vec<_> = (0..RAW_CONNECTIONS as u64)
        .map(|c| {
            // Connection c sends requests c, c + RAW_CONNECTIONS, ...
            let mine = requests / RAW_CONNECTIONS as u64 + u64::from(c < requests % RAW_CONNECTIONS as u64);
            let frame = frame.clone();
            let bootstrap = bootstrap.to_owned();
            thread::spawn(move || raw_connection(&bootstrap, frame, mine))
        })
        .collect();
    let mut acknowledged = 0;
    let mut first_error = None;
    for w in workers {
        match w.join() {
            Ok(Ok(n)) => acknowledged += n,
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(_) => {
                first_error.get_or_insert_with(|| "a raw producer thread panicked".to_owned());
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    if let Some(e) = first_error {
        return Err(e);
    }
    Ok(Throughput {
        records: acknowledged * per_request,
        secs,
        first_record_secs: None,
        cpu: CpuUse::default(),
    })
}

/// The raw phase's request frame (length prefix included), correlation id 0.
fn raw_produce_frame(topic: &str) -> Result<Vec<u8>, String> {
    let value = payload();
    let values: Vec<&[u8]> = (0..RAW_BATCH_RECORDS).map(|_| &value[..]).collect();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let batch = bytes::Bytes::from(strait_spool::batch::build::batch(now_ms, &values));
    let request = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partition_data(
                (0..PARTITIONS)
                    .map(|p| {
                        PartitionProduceData::default()
                            .with_index(p)
                            .with_records(Some(batch.clone()))
                    })
                    .collect(),
            )]);
    raw_frame(ApiKey::Produce, RAW_PRODUCE_VERSION, 0, &request)
}

/// A request frame (length prefix included) for the raw phases.
fn raw_frame<T: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
) -> Result<Vec<u8>, String> {
    let mut buf = vec![0u8; 4];
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("strait-bench-raw")))
        .encode(&mut buf, api.request_header_version(version))
        .map_err(|e| format!("encoding the {api:?} request header: {e}"))?;
    body.encode(&mut buf, version)
        .map_err(|e| format!("encoding the {api:?} request: {e}"))?;
    let len = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    Ok(buf)
}

/// Reads one response frame into `buf`, checks its correlation id, and
/// returns the body after the header.
fn raw_response<'a>(
    stream: &mut TcpStream,
    buf: &'a mut Vec<u8>,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
) -> Result<&'a [u8], String> {
    let mut len = [0u8; 4];
    stream
        .read_exact(&mut len)
        .map_err(|e| format!("raw {api:?} read: {e}"))?;
    buf.resize(u32::from_be_bytes(len) as usize, 0);
    stream
        .read_exact(buf)
        .map_err(|e| format!("raw {api:?} read: {e}"))?;
    let mut body = &buf[..];
    let header = ResponseHeader::decode(&mut body, api.response_header_version(version))
        .map_err(|e| format!("raw {api:?} response header: {e}"))?;
    if header.correlation_id != correlation_id {
        return Err(format!(
            "raw {api:?}: answer {} came for request {correlation_id}",
            header.correlation_id
        ));
    }
    Ok(body)
}

/// Sends `count` copies of `frame` on one connection, at most
/// [`RAW_IN_FLIGHT`] unanswered, and returns how many were answered
/// without error. The correlation id sits at bytes 8..12 of the frame.
fn raw_connection(bootstrap: &str, mut frame: Vec<u8>, count: u64) -> Result<u64, String> {
    let mut stream = TcpStream::connect(bootstrap).map_err(|e| format!("raw connect: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(STALL)).map_err(|e| e.to_string())?;
    let mut sent = 0u64;
    let mut answered = 0u64;
    let mut response = Vec::new();
    while answered < count {
        while sent < count && sent - answered < RAW_IN_FLIGHT as u64 {
            frame[8..12].copy_from_slice(&(sent as i32).to_be_bytes());
            stream
                .write_all(&frame)
                .map_err(|e| format!("raw send after {answered} answers: {e}"))?;
            sent += 1;
        }
        let mut body = raw_response(
            &mut stream,
            &mut response,
            ApiKey::Produce,
            RAW_PRODUCE_VERSION,
            answered as i32,
        )?;
        let answer = ProduceResponse::decode(&mut body, RAW_PRODUCE_VERSION)
            .map_err(|e| format!("raw Produce response: {e}"))?;
        for t in &answer.responses {
            for p in &t.partition_responses {
                if p.error_code != 0 {
                    return Err(format!(
                        "raw: partition {} answered error {} ({:?})",
                        p.index, p.error_code, p.error_message
                    ));
                }
            }
        }
        answered += 1;
    }
    Ok(answered)
}

/// Fetch version of the raw consume phase.
const RAW_FETCH_VERSION: i16 = 12;

/// The raw consume phase: reads `per_partition` records from each partition
/// of `topic` (see the module docs).
fn raw_consume_throughput(bootstrap: &str, topic: &str, per_partition: u64) -> Result<Throughput, String> {
    let started = Instant::now();
    let per_connection = PARTITIONS as usize / RAW_CONNECTIONS;
    let workers: Vec<_> = (0..RAW_CONNECTIONS)
        .map(|c| {
            let partitions: Vec<i32> = (0..per_connection)
                .map(|i| (c * per_connection + i) as i32)
                .collect();
            let (bootstrap, topic) = (bootstrap.to_owned(), topic.to_owned());
            thread::spawn(move || raw_fetcher(&bootstrap, &topic, &partitions, per_partition))
        })
        .collect();
    let mut records = 0;
    let mut first_error = None;
    for w in workers {
        match w.join() {
            Ok(Ok(n)) => records += n,
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(_) => {
                first_error.get_or_insert_with(|| "a raw fetcher thread panicked".to_owned());
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    if let Some(e) = first_error {
        return Err(e);
    }
    Ok(Throughput {
        records,
        secs,
        first_record_secs: None,
        cpu: CpuUse::default(),
    })
}

/// Fetches `partitions` from offset 0 until each has given `want` records;
/// returns the records read.
fn raw_fetcher(bootstrap: &str, topic: &str, partitions: &[i32], want: u64) -> Result<u64, String> {
    let mut stream = TcpStream::connect(bootstrap).map_err(|e| format!("raw connect: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(STALL)).map_err(|e| e.to_string())?;
    let mut next: Vec<u64> = vec![0; partitions.len()];
    let mut response = Vec::new();
    let mut id = 0;
    while next.iter().any(|&n| n < want) {
        let request = FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_max_wait_ms(500)
            .with_min_bytes(1)
            .with_max_bytes(50 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partitions(
                    partitions
                        .iter()
                        .zip(&next)
                        .filter(|(_, &n)| n < want)
                        .map(|(&p, &n)| {
                            FetchPartition::default()
                                .with_partition(p)
                                .with_fetch_offset(n as i64)
                                .with_partition_max_bytes(1 << 20)
                        })
                        .collect(),
                )]);
        id += 1;
        let frame = raw_frame(ApiKey::Fetch, RAW_FETCH_VERSION, id, &request)?;
        stream
            .write_all(&frame)
            .map_err(|e| format!("raw Fetch send: {e}"))?;
        let mut body = raw_response(&mut stream, &mut response, ApiKey::Fetch, RAW_FETCH_VERSION, id)?;
        let answer = FetchResponse::decode(&mut body, RAW_FETCH_VERSION)
            .map_err(|e| format!("raw Fetch response: {e}"))?;
        for t in &answer.responses {
            for p in &t.partitions {
                if p.error_code != 0 {
                    return Err(format!(
                        "raw Fetch: partition {} error {}",
                        p.partition_index, p.error_code
                    ));
                }
                let Some(i) = partitions.iter().position(|&x| x == p.partition_index) else {
                    return Err(format!(
                        "raw Fetch: answer for partition {} not asked for",
                        p.partition_index
                    ));
                };
                // Whole batches only; a cut-off last batch is fetched again.
                let mut batches = p.records.as_deref().unwrap_or_default();
                while batches.len() >= 61 {
                    let len = i32::from_be_bytes(batches[8..12].try_into().unwrap()) as usize + 12;
                    if batches.len() < len {
                        break;
                    }
                    let base = i64::from_be_bytes(batches[..8].try_into().unwrap()) as u64;
                    let last_delta = i32::from_be_bytes(batches[23..27].try_into().unwrap()) as u64;
                    if base != next[i] {
                        return Err(format!(
                            "raw Fetch: partition {} batch at {base}, expected {}",
                            p.partition_index, next[i]
                        ));
                    }
                    next[i] = base + last_delta + 1;
                    batches = &batches[len..];
                }
            }
        }
    }
    Ok(next.iter().sum())
}

/// Consumer context that keeps the client's error reports.
#[derive(Debug, Default)]
struct ConsumerErrors(Mutex<Vec<String>>);

impl ClientContext for ConsumerErrors {
    fn error(&self, error: KafkaError, reason: &str) {
        let mut v = self.0.lock().unwrap();
        if v.len() < 100 {
            v.push(format!("{error}: {reason}"));
        }
    }
}

impl rdkafka::consumer::ConsumerContext for ConsumerErrors {}

/// Reads every partition from the beginning until `expected[p]` records of
/// each partition `p` were read.
fn consume_throughput(bootstrap: &str, topic: &str, expected: &[u64]) -> Result<Throughput, String> {
    let consumer: BaseConsumer<ConsumerErrors> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("client.id", "strait-bench-consumer")
        // librdkafka wants a group for assign(); it is never joined.
        .set("group.id", format!("{topic}-reader"))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("auto.offset.reset", "earliest")
        .create_with_context(ConsumerErrors::default())
        .map_err(|e| format!("consumer: {e}"))?;
    let mut assignment = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .map_err(|e| e.to_string())?;
    }
    let total: u64 = expected.iter().sum();
    let mut read = vec![0u64; PARTITIONS as usize];
    let mut next_offset = vec![-1i64; PARTITIONS as usize];
    let (mut count, mut duplicates, mut bad_size) = (0u64, 0u64, 0u64);
    let mut last_error: Option<String> = None;
    // Connect and learn the leaders first: assigned before it knows them,
    // librdkafka retries its offset lookup only after 500 ms, the same
    // fixed delay on every broker.
    consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| format!("consumer metadata: {e}"))?;
    let start = Instant::now();
    consumer.assign(&assignment).map_err(|e| format!("assign: {e}"))?;
    let mut progress = Instant::now();
    let mut last_record = start;
    let mut first_record: Option<Instant> = None;
    while count < total {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let p = m.partition() as usize;
                if p >= read.len() {
                    return Err(format!(
                        "record from partition {p} of an {PARTITIONS}-partition topic"
                    ));
                }
                if m.offset() < next_offset[p] {
                    duplicates += 1;
                    continue;
                }
                next_offset[p] = m.offset() + 1;
                if m.payload().map_or(0, <[u8]>::len) != RECORD_BYTES {
                    bad_size += 1;
                }
                read[p] += 1;
                count += 1;
                progress = Instant::now();
                last_record = progress;
                first_record.get_or_insert(progress);
            }
            Some(Err(e)) => last_error = Some(e.to_string()),
            None => {}
        }
        if progress.elapsed() > STALL {
            let errors = consumer.context().0.lock().unwrap();
            return Err(format!(
                "stalled: {count} of {total} records read after {} s without progress (per partition {read:?}, \
                 expected {expected:?}){}{}",
                STALL.as_secs(),
                last_error.map_or_else(String::new, |e| format!("; last poll error: {e}")),
                errors
                    .last()
                    .map_or_else(String::new, |e| format!("; client error: {e}"))
            ));
        }
    }
    if bad_size > 0 {
        return Err(format!(
            "{bad_size} records with a value that is not {RECORD_BYTES} bytes"
        ));
    }
    if read != expected {
        return Err(format!("read per partition {read:?}, produced {expected:?}"));
    }
    let _ = duplicates; // Re-fetched records are skipped, not counted.
    Ok(Throughput {
        records: count,
        secs: (last_record - start).as_secs_f64(),
        first_record_secs: first_record.map(|f| (f - start).as_secs_f64()),
        cpu: CpuUse::default(),
    })
}

/// Sends records one at a time, each after the previous one's delivery.
fn produce_latency(bootstrap: &str, topic: &str, records: u64) -> Result<Latency, String> {
    let producer = producer(bootstrap, 0, true)?;
    let value = payload();
    let deliveries = producer.context();
    for i in 0..LATENCY_WARMUP + records {
        send(&producer, topic, &value, (i % PARTITIONS as u64) as i32)?;
        deliveries.wait_for(i + 1)?;
        if i + 1 == LATENCY_WARMUP {
            deliveries.state.lock().unwrap().latencies.clear();
        }
    }
    let st = deliveries.state.lock().unwrap();
    if st.failed > 0 {
        return Err(format!(
            "{} of {} deliveries failed, first: {}",
            st.failed,
            LATENCY_WARMUP + records,
            st.first_error.as_deref().unwrap_or("?")
        ));
    }
    let mut ms: Vec<f64> = st.latencies.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    if ms.is_empty() {
        return Err("no latencies recorded".into());
    }
    ms.sort_by(f64::total_cmp);
    Ok(Latency {
        p50_ms: percentile(&ms, 50.0),
        p99_ms: percentile(&ms, 99.0),
        max_ms: ms[ms.len() - 1],
        cpu: CpuUse::default(),
    })
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

// ---------------------------------------------------------------------------
// Report

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// One table cell: the median over the successful runs, or "n/a" with the
/// first failure's reason.
struct Cell {
    value: Option<f64>,
    text: String,
}

fn cell<T>(
    results: &[(Kind, RunResult)],
    kind: Kind,
    phase: impl Fn(&RunResult) -> &Result<T, String>,
    metric: impl Fn(&T) -> f64,
    format: impl Fn(f64) -> String,
    reasons: &mut Vec<String>,
) -> Cell {
    let runs: Vec<&RunResult> = results
        .iter()
        .filter(|(k, _)| *k == kind)
        .map(|(_, r)| r)
        .collect();
    let ok: Vec<f64> = runs
        .iter()
        .filter_map(|r| phase(r).as_ref().ok().map(&metric))
        .collect();
    let first_err = runs.iter().find_map(|r| phase(r).as_ref().err());
    let value = median(ok.clone());
    let mut text = value.map_or_else(|| "n/a".to_owned(), &format);
    if let Some(e) = first_err {
        let reason = format!("{}: {e}", kind.name());
        let idx = match reasons.iter().position(|r| *r == reason) {
            Some(i) => i,
            None => {
                reasons.push(reason);
                reasons.len() - 1
            }
        };
        if value.is_some() {
            let _ = write!(text, " ({} of {} runs) [{}]", ok.len(), runs.len(), idx + 1);
        } else {
            let _ = write!(text, " [{}]", idx + 1);
        }
    }
    Cell { value, text }
}

fn print_table(knobs: &Knobs, results: &[(Kind, RunResult)]) {
    let mut reasons = Vec::new();
    let mut rows: Vec<[String; 4]> = Vec::new();
    let fmt_rate = |v: f64| format!("{v:.0}");
    let fmt_mb = |v: f64| format!("{v:.1}");
    let fmt_ms = |v: f64| format!("{v:.3}");
    type Row<'a> = (&'a str, bool, Box<dyn Fn(Kind, &mut Vec<String>) -> Cell + 'a>);
    let table: Vec<Row> = vec![
        (
            "produce records/s",
            true,
            Box::new(|k, r| {
                cell(
                    results,
                    k,
                    |x| &x.produce,
                    Throughput::records_per_sec,
                    fmt_rate,
                    r,
                )
            }),
        ),
        (
            "produce MB/s",
            true,
            Box::new(|k, r| cell(results, k, |x| &x.produce, Throughput::mb_per_sec, fmt_mb, r)),
        ),
        (
            "consume records/s",
            true,
            Box::new(|k, r| {
                cell(
                    results,
                    k,
                    |x| &x.consume,
                    Throughput::records_per_sec,
                    fmt_rate,
                    r,
                )
            }),
        ),
        (
            "consume MB/s",
            true,
            Box::new(|k, r| cell(results, k, |x| &x.consume, Throughput::mb_per_sec, fmt_mb, r)),
        ),
        (
            "raw produce records/s",
            true,
            Box::new(|k, r| {
                cell(
                    results,
                    k,
                    |x| &x.raw_produce,
                    Throughput::records_per_sec,
                    fmt_rate,
                    r,
                )
            }),
        ),
        (
            "raw produce MB/s",
            true,
            Box::new(|k, r| cell(results, k, |x| &x.raw_produce, Throughput::mb_per_sec, fmt_mb, r)),
        ),
        (
            "raw consume records/s",
            true,
            Box::new(|k, r| {
                cell(
                    results,
                    k,
                    |x| &x.raw_consume,
                    Throughput::records_per_sec,
                    fmt_rate,
                    r,
                )
            }),
        ),
        (
            "raw consume MB/s",
            true,
            Box::new(|k, r| cell(results, k, |x| &x.raw_consume, Throughput::mb_per_sec, fmt_mb, r)),
        ),
        (
            "produce latency p50 ms",
            false,
            Box::new(|k, r| cell(results, k, |x| &x.latency, |l| l.p50_ms, fmt_ms, r)),
        ),
        (
            "produce latency p99 ms",
            false,
            Box::new(|k, r| cell(results, k, |x| &x.latency, |l| l.p99_ms, fmt_ms, r)),
        ),
        (
            "produce latency max ms",
            false,
            Box::new(|k, r| cell(results, k, |x| &x.latency, |l| l.max_ms, fmt_ms, r)),
        ),
    ];
    for (name, higher_is_better, f) in &table {
        let s = f(Kind::Strait, &mut reasons);
        let t = f(Kind::Tansu, &mut reasons);
        let ratio = match (s.value, t.value) {
            (Some(a), Some(b)) if b > 0.0 => {
                let r = a / b;
                let verdict = match (higher_is_better, r) {
                    (true, r) if r >= 1.0 => "better",
                    (false, r) if r <= 1.0 => "better",
                    _ => "worse",
                };
                format!("{r:.2} ({verdict})")
            }
            _ => "n/a".into(),
        };
        rows.push([name.to_string(), s.text, t.text, ratio]);
    }
    let header = ["metric", "Strait", "Tansu", "Strait/Tansu"];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    println!(
        "median of {} runs per broker; {} x 1 KiB records, {PARTITIONS} partitions, acks=1; \
         latency: {} sequential records",
        knobs.repeat, knobs.records, knobs.latency_records
    );
    let line = |cells: [&str; 4]| {
        let mut s = String::from("|");
        for (c, w) in cells.iter().zip(widths) {
            let _ = write!(s, " {c:<w$} |");
        }
        println!("{s}");
    };
    line(header);
    let rule = widths.map(|w| "-".repeat(w));
    line([&rule[0], &rule[1], &rule[2], &rule[3]]);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3]]);
    }
    println!("throughput: ratio > 1 is better for Strait; latency: ratio < 1 is better for Strait");
    for (i, r) in reasons.iter().enumerate() {
        println!("[{}] {r}", i + 1);
    }
}

fn print_strait_log_summary(results: &[(Kind, RunResult)]) {
    let mut flagged = Vec::new();
    let mut logs = 0;
    for (_, r) in results.iter().filter(|(k, _)| *k == Kind::Strait) {
        let Some(log) = &r.log else { continue };
        logs += 1;
        let text = fs::read_to_string(log).unwrap_or_default();
        flagged.extend(
            text.lines()
                .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panicked"))
                .map(str::to_owned),
        );
    }
    if flagged.is_empty() {
        println!("Strait logs: no WARN/ERROR lines in {logs} runs");
    } else {
        println!(
            "Strait logs: {} WARN/ERROR lines in {logs} runs, first 10:",
            flagged.len()
        );
        for l in flagged.iter().take(10) {
            println!("  {l}");
        }
    }
}
