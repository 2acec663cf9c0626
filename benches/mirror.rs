//! The mirror benchmark: `strait mirror` against the limit of what can be
//! read from the source, and against a plain librdkafka consume-then-produce
//! mirror, on the same data in the same run; then the same over an emulated
//! WAN, and the replication latency at a fixed rate over that WAN.
//!
//! Run it with `scripts/bench-mirror [DIR]`, which installs the peers,
//! builds Strait and calls `cargo bench --bench mirror -- WORKDIR`.
//!
//! Source and target are both `strait serve` (a fresh data directory each,
//! under the work directory): Tansu, the other broker of the test peers,
//! under-reports its watermarks (ListOffsets latest, by which this bench
//! sees the target complete) and keeps every record in memory.
//!
//! The data: `MIRROR_BENCH_RECORDS` records of 1 KiB (no key) spread
//! round-robin over the 16 partitions of topic `mirror-bench` on the
//! source, produced by librdkafka (the `rdkafka` crate) with lz4, acks=all,
//! idempotence, linger.ms=5 and `batch.size` `MIRROR_BENCH_BATCH_BYTES`. Each
//! value is 512 bytes that no codec shrinks and 512 bytes of text that
//! repeats across records: about 2:1 under lz4, so that what crosses the
//! WAN is neither the raw size nor next to nothing. MB are 10^6 bytes of
//! record values; "batch MB" are 10^6 bytes of the compressed record
//! batches as stored on the source, which is what crosses the wire.
//!
//! **LAN** (everything on loopback), in this order:
//!
//! 1. *Fetch limit*: the whole topic read as fast as Strait's own upstream
//!    client (`strait-upstream`: `Cluster`, `Connection::request`) reads
//!    it: one connection, `MIRROR_BENCH_LIMIT_IN_FLIGHT` (default 4) Fetch
//!    requests in flight, each for its share of the 16 partitions, with the
//!    mirror's fetch settings (1 MiB per partition, 64 MiB per answer,
//!    read_committed); only batch headers are read. After one unmeasured
//!    pass, the topic is read again until a second has passed; the figure
//!    is per pass. The mirror cannot go faster than this.
//! 2. *Strait's mirror*: `strait mirror --config FILE` copying the topic to
//!    the target (default settings), timed from the process start until
//!    the target's ListOffsets (latest) add up to every record, polled every
//!    10 ms. CPU seconds of the mirror process from /proc/PID/stat at that
//!    moment (start-up included).
//! 3. *librdkafka mirror*: this binary re-run as a child process
//!    (`child-rdkafka-mirror`): a BaseConsumer assigned all 16 partitions
//!    from the beginning (no group joined; the mirror's fetch settings:
//!    fetch.max.bytes 64 MiB, 1 MiB per partition, fetch.wait.max.ms 500,
//!    queued.max.messages.kbytes 64 MiB like the mirror's
//!    max_bytes_in_flight, read_committed), each record handed to a
//!    BaseProducer with the source producer's settings, same partition,
//!    key, value, headers and CreateTime, into a second target topic
//!    created beforehand. Timed and measured like Strait's.
//!
//! **WAN** (skipped, saying so, when network namespaces cannot be made):
//! the source is restarted on the same data directory inside a network
//! namespace of its own, behind a veth pair whose two ends are limited by
//! `tc qdisc tbf` to `MIRROR_BENCH_WAN_MBIT` (netem is not in this kernel),
//! and reached from the target's side through the tests' delay relay
//! (`tests/support/relay.rs`), which adds half of `MIRROR_BENCH_WAN_RTT_MS`
//! each way. The source listens on the same port inside its namespace as
//! the relay does outside and advertises `127.0.0.1:PORT`, so clients in
//! the source's datacenter reach it directly and clients in the target's
//! (the mirrors, as MirrorMaker deployments run) cross the link. Then:
//! the fetch over the link (as 1.), the librdkafka mirror over it (as 3.),
//! Strait's mirror over it (as 2.), which then stays running for the
//! latency run: a producer in the source's namespace
//! (`child-rate-producer`) writes `MIRROR_BENCH_LATENCY_RATE` records a
//! second for `MIRROR_BENCH_LATENCY_SECS` seconds, and a consumer on the
//! target's side reads the mirrored topic from its end: latency is the
//! time a record is read there minus its CreateTime. The mirror's own
//! `strait_mirror_replication_latency_seconds` histogram is printed beside.
//!
//! The bench reports; it fails only on wrong answers (a partition short of
//! records). Every figure is printed beside the goal the issue set for it.
//!
//! Environment (see `scripts/bench-mirror`): `MIRROR_BENCH_RECORDS`,
//! `MIRROR_BENCH_BATCH_BYTES`, `MIRROR_BENCH_WAN`, `MIRROR_BENCH_WAN_MBIT`,
//! `MIRROR_BENCH_WAN_RTT_MS`, `MIRROR_BENCH_LATENCY_RATE`,
//! `MIRROR_BENCH_LATENCY_SECS`, `MIRROR_BENCH_LIMIT_IN_FLIGHT`,
//! `MIRROR_BENCH_CLUSTER_OPTIONS`, `MIRROR_BENCH_NETNS` (the source's
//! namespace; default `strait-mb-PID`), `STRAIT_BIN`.

// The integration tests' harness: free ports, the broker readiness check
// and the delay relay (the rest of it is unused here).
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
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use strait_spool::batch::{BatchHeader, HEADER_LEN};
use strait_upstream::{Cluster, ClusterOptions, ConnectOptions, Connection};
use support::relay::Relay;

type Res<T> = Result<T, String>;

/// The source topic.
const TOPIC: &str = "mirror-bench";
/// Its partitions.
const PARTITIONS: i32 = 16;
/// Size of every record value.
const RECORD_BYTES: usize = 1024;
/// Bytes of each value that no codec shrinks; the rest is repeated text.
const RANDOM_BYTES: usize = 512;
/// linger.ms of every librdkafka producer.
const LINGER_MS: u32 = 5;
/// The mirror's fetch settings (mirror/src/partition.rs, mirror.rs), which
/// the fetch limit and the librdkafka mirror use too.
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
/// How long a broker may take to answer ApiVersions after it was spawned.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the target's offsets are polled while a mirror runs.
const POLL: Duration = Duration::from_millis(10);

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

/// What the environment asked for.
#[derive(Debug, Clone)]
struct Knobs {
    records: u64,
    batch_bytes: u64,
    wan: bool,
    wan_mbit: u64,
    wan_rtt_ms: u64,
    latency_rate: u64,
    latency_secs: u64,
    limit_in_flight: usize,
    warm_bytes: u64,
    cluster_options: String,
    netns: String,
    strait_bin: PathBuf,
}

fn env_u64(name: &str, default: u64) -> Res<u64> {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().map_err(|e| format!("{name}={v:?}: {e}")),
        Err(_) => Ok(default),
    }
}

fn knobs() -> Res<Knobs> {
    Ok(Knobs {
        records: env_u64("MIRROR_BENCH_RECORDS", 200_000)?.max(PARTITIONS as u64),
        batch_bytes: env_u64("MIRROR_BENCH_BATCH_BYTES", 1_000_000)?.max(RECORD_BYTES as u64 + 100),
        wan: env_u64("MIRROR_BENCH_WAN", 1)? != 0,
        wan_mbit: env_u64("MIRROR_BENCH_WAN_MBIT", 200)?.max(1),
        wan_rtt_ms: env_u64("MIRROR_BENCH_WAN_RTT_MS", 50)?,
        latency_rate: env_u64("MIRROR_BENCH_LATENCY_RATE", 2_000)?.max(1),
        latency_secs: env_u64("MIRROR_BENCH_LATENCY_SECS", 20)?.max(1),
        limit_in_flight: env_u64("MIRROR_BENCH_LIMIT_IN_FLIGHT", LIMIT_IN_FLIGHT)?.clamp(1, PARTITIONS as u64)
            as usize,
        warm_bytes: match std::env::var("MIRROR_BENCH_WARM_BYTES") {
            Ok(_) => env_u64("MIRROR_BENCH_WARM_BYTES", 0)?,
            // Three times the values: more than the target's page cache grows
            // by in the LAN runs (two copies, about half the values each).
            Err(_) => 3 * env_u64("MIRROR_BENCH_RECORDS", 200_000)? * RECORD_BYTES as u64,
        },
        cluster_options: std::env::var("MIRROR_BENCH_CLUSTER_OPTIONS").unwrap_or_default(),
        netns: std::env::var("MIRROR_BENCH_NETNS")
            .unwrap_or_else(|_| format!("strait-mb-{}", std::process::id())),
        strait_bin: std::env::var_os("STRAIT_BIN")
            .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_strait")), PathBuf::from),
    })
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
    let clk = clock_ticks();
    print_facts(&knobs, &work);
    let started = Instant::now();

    let source_data = work.join("source-data");
    let mut source = Broker::start(&knobs, "source", &source_data, None, &work)?;
    let target = Broker::start(&knobs, "target", &work.join("target-data"), None, &work)?;

    // The data.
    create_topic(&source.bootstrap(), TOPIC, PARTITIONS)?;
    let produced = fill_source(&source.bootstrap(), knobs.records, knobs.batch_bytes)?;
    let ends = latest_offsets(&source.bootstrap(), TOPIC)?.ok_or("the source topic vanished")?;
    if ends.iter().sum::<i64>() != knobs.records as i64 {
        return Err(format!(
            "the source holds {} records after {} were produced (per partition {ends:?})",
            ends.iter().sum::<i64>(),
            knobs.records
        ));
    }
    println!(
        "source filled: {} records in {:.1} s ({:.0} MB/s from librdkafka, lz4)",
        knobs.records,
        produced,
        mb(knobs.records) / produced
    );

    if knobs.warm_bytes > 0 {
        warm_memory(&work, knobs.warm_bytes)?;
    }

    let mut report = Report::default();

    // LAN 1: the fetch limit.
    let limit = measure_fetch(&knobs, &source.bootstrap(), &ends, clk, "LAN fetch limit");
    print_run("LAN fetch limit (strait-upstream)", &limit);
    let batch_bytes = limit.as_ref().ok().and_then(|r| r.batch_bytes);
    if let Some(b) = batch_bytes {
        println!(
            "  source batches: {:.1} MB for {:.1} MB of values (lz4 {:.2}:1)",
            b as f64 / 1e6,
            mb(knobs.records),
            mb(knobs.records) * 1e6 / b as f64
        );
    }
    report.lan_limit = limit;

    // LAN 2 and 3: the two mirrors.
    let lan = Route {
        name: "lan",
        source: source.bootstrap(),
        target: target.bootstrap(),
    };
    let strait_lan = run_strait_mirror(&knobs, &work, &lan, &ends, &[&source, &target], clk, false);
    report.lan_strait = strait_lan.map(|(r, _)| r.with_batch_bytes(batch_bytes));
    print_run("LAN Strait mirror", &report.lan_strait);
    report.lan_rdkafka = run_rdkafka_mirror(&knobs, &work, &lan, &ends, &[&source, &target], clk)
        .map(|r| r.with_batch_bytes(batch_bytes));
    print_run("LAN librdkafka mirror", &report.lan_rdkafka);

    // The WAN.
    if !knobs.wan {
        report.wan_skipped = Some("MIRROR_BENCH_WAN=0".into());
    } else {
        match Wan::setup(&knobs, &work) {
            Err(e) => {
                println!("WAN part skipped: {e}");
                report.wan_skipped = Some(e);
            }
            Ok(mut wan) => {
                // The source moves behind the link, on the same data.
                if let Err(e) = source.stop() {
                    println!("  note: source shutdown: {e}");
                }
                drop(source);
                match wan.start_source(&knobs, &source_data, &work) {
                    Err(e) => {
                        println!("WAN part failed: {e}");
                        report.wan_skipped = Some(format!("the source did not start behind the link: {e}"));
                    }
                    Ok(wan_source) => {
                        run_wan(
                            &knobs,
                            &work,
                            &wan,
                            &wan_source,
                            &target,
                            &ends,
                            batch_bytes,
                            clk,
                            &mut report,
                        );
                    }
                }
                wan.teardown();
            }
        }
    }

    println!();
    report.print(&knobs);
    println!();
    println!(
        "total bench time {:.0} s; load average now {}; logs under {}",
        started.elapsed().as_secs_f64(),
        loadavg(),
        work.display()
    );
    print_log_summary(&work);
    Ok(())
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
    use std::io::Write;
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
    let (_, librdkafka) = rdkafka::util::get_rdkafka_version();
    println!("mirror benchmark: strait mirror vs the source's fetch limit and a librdkafka mirror");
    println!("  machine: nproc {nproc}, {model}, load average {}", loadavg());
    println!(
        "  brokers: source and target are `{} serve`, fresh data directories under {}",
        knobs.strait_bin.display(),
        work.display()
    );
    println!(
        "  data:    {} records x {RECORD_BYTES} B (no key; {RANDOM_BYTES} B random + text) over {PARTITIONS} \
         partitions, librdkafka {librdkafka}, lz4, acks=all, idempotent, linger.ms={LINGER_MS}, batch.size={}",
        knobs.records, knobs.batch_bytes
    );
    println!(
        "  fetch:   {} MiB per partition, {} MiB per answer, max wait {FETCH_MAX_WAIT_MS} ms, read_committed \
         (the mirror's; the limit keeps {} requests in flight on one connection)",
        FETCH_PARTITION_BYTES >> 20,
        FETCH_MAX_BYTES >> 20,
        knobs.limit_in_flight
    );
    if knobs.wan {
        println!(
            "  WAN:     {} Mbit/s each way (tc tbf on a veth pair), {} ms round trip (delay relay), source \
             behind it, mirrors and target on this side; latency at {} records/s for {} s",
            knobs.wan_mbit, knobs.wan_rtt_ms, knobs.latency_rate, knobs.latency_secs
        );
    }
    if !knobs.cluster_options.is_empty() {
        println!("  mirror clusters get: {}", knobs.cluster_options);
    }
    println!("  MB = 10^6 B of record values; batch MB = 10^6 B of record batches as stored (lz4)");
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
    fn spawn(mut cmd: Command, what: &str, log: PathBuf) -> Res<Proc> {
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
        let stat = fs::read_to_string(format!("/proc/{}/stat", self.pid())).ok()?;
        Some(cpu_ticks_of(&stat)? as f64 / clk)
    }

    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    /// SIGTERM, then SIGKILL after 20 s.
    /// Returns how long the exit took.
    fn stop(&mut self) -> Res<Duration> {
        let started = Instant::now();
        if self.exited().is_some() {
            return Ok(Duration::ZERO);
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return Ok(started.elapsed());
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        Err(format!(
            "{} did not exit within 20 s of SIGTERM (killed)",
            self.what
        ))
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

/// A `strait serve`, killed on drop.
#[derive(Debug)]
struct Broker {
    proc: Proc,
    /// Where clients connect (on this side of the WAN).
    addr: SocketAddr,
}

impl Broker {
    /// `strait serve` on a free loopback port, or (with `netns`) on
    /// `0.0.0.0:port` inside that namespace, advertising `127.0.0.1:port`.
    fn start(knobs: &Knobs, name: &str, data: &Path, netns: Option<(&str, u16)>, work: &Path) -> Res<Broker> {
        fs::create_dir_all(data).map_err(|e| format!("creating {}: {e}", data.display()))?;
        let log = work.join(format!("{name}.log"));
        let mut last = String::new();
        // A port found free can be taken before the broker binds it: retry.
        for _ in 0..3 {
            let (mut cmd, port) = match netns {
                Some((ns, port)) => {
                    let mut c = Command::new("ip");
                    c.args(["netns", "exec", ns])
                        .arg(&knobs.strait_bin)
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
                    let mut c = Command::new(&knobs.strait_bin);
                    c.arg("serve").args(["--listen", &format!("127.0.0.1:{port}")]);
                    (c, port)
                }
            };
            cmd.arg("--data-dir")
                .arg(data)
                .current_dir(work)
                .stdin(Stdio::null());
            let mut proc = Proc::spawn(cmd, name, log.clone())?;
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            match wait_ready(&mut proc, addr) {
                Ok(()) => return Ok(Broker { proc, addr }),
                Err(e) => last = e,
            }
            if netns.is_some() {
                break;
            }
        }
        Err(format!("{name} did not start: {last}"))
    }

    fn bootstrap(&self) -> String {
        self.addr.to_string()
    }

    fn stop(&mut self) -> Res<Duration> {
        self.proc.stop()
    }
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

// ---------------------------------------------------------------------------
// Results

/// One measured copy (or read) of the whole topic.
#[derive(Debug, Clone, Default)]
struct Run {
    records: u64,
    /// Bytes of record batches moved, when known.
    batch_bytes: Option<u64>,
    secs: f64,
    /// Seconds until the first record was on the target (mirrors).
    first_secs: Option<f64>,
    /// CPU seconds of the process measured (the mirror, or this bench for
    /// the fetch limit).
    cpu: Option<f64>,
    /// What else used the CPU meanwhile.
    detail: String,
}

impl Run {
    fn mb_s(&self) -> f64 {
        mb(self.records) / self.secs
    }

    fn batch_mb_s(&self) -> Option<f64> {
        Some(self.batch_bytes? as f64 / 1e6 / self.secs)
    }

    fn cpu_per_gb(&self) -> Option<f64> {
        Some(self.cpu? / (mb(self.records) / 1e3))
    }

    fn mb_per_cpu_s(&self) -> Option<f64> {
        let cpu = self.cpu?;
        (cpu > 0.0).then(|| mb(self.records) / cpu)
    }

    fn with_batch_bytes(mut self, bytes: Option<u64>) -> Run {
        if self.batch_bytes.is_none() {
            self.batch_bytes = bytes;
        }
        self
    }
}

/// MB (10^6 B) of record values in `records` records.
fn mb(records: u64) -> f64 {
    records as f64 * RECORD_BYTES as f64 / 1e6
}

fn print_run(what: &str, run: &Res<Run>) {
    match run {
        Ok(r) => {
            let mut s = format!(
                "{what}: {} records in {:.2} s, {:.1} MB/s",
                r.records,
                r.secs,
                r.mb_s()
            );
            if let Some(b) = r.batch_mb_s() {
                let _ = write!(s, " ({b:.1} batch MB/s)");
            }
            if let Some(f) = r.first_secs {
                let _ = write!(s, ", first record on the target after {f:.2} s");
            }
            if let (Some(c), Some(g)) = (r.cpu, r.cpu_per_gb()) {
                let _ = write!(s, "; {c:.2} CPU s ({g:.2} per GB)");
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
struct CpuWatch<'a> {
    procs: Vec<(&'a str, u32, Option<f64>)>,
    bench: Option<f64>,
    machine: Option<f64>,
    clk: f64,
}

impl<'a> CpuWatch<'a> {
    fn start(brokers: &[&'a Broker], clk: f64) -> CpuWatch<'a> {
        CpuWatch {
            procs: brokers
                .iter()
                .map(|b| (b.proc.what.as_str(), b.proc.pid(), b.proc.cpu(clk)))
                .collect(),
            bench: own_cpu(clk),
            machine: machine_busy(clk),
            clk,
        }
    }

    /// "cpu s: source 1.2, target 0.8, bench 0.1, other 0.3" (other: the
    /// machine's busy time less these and `measured`).
    fn describe(&self, measured: Option<f64>) -> String {
        let mut s = String::from("cpu s:");
        let mut known = measured.unwrap_or(0.0);
        for (name, pid, before) in &self.procs {
            let now = fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| cpu_ticks_of(&s))
                .map(|t| t as f64 / self.clk);
            match (before, now) {
                (Some(b), Some(n)) => {
                    let _ = write!(s, " {name} broker {:.2},", n - b);
                    known += n - b;
                }
                _ => {
                    let _ = write!(s, " {name} broker ?,");
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

/// The settings of every librdkafka producer here (the source's, the
/// librdkafka mirror's, the latency run's).
fn producer_config(bootstrap: &str, client_id: &str, batch_bytes: u64) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("client.id", client_id)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("compression.type", "lz4")
        .set("linger.ms", LINGER_MS.to_string())
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

/// Produces `records` records round-robin into the source topic; returns
/// the seconds it took.
fn fill_source(bootstrap: &str, records: u64, batch_bytes: u64) -> Res<f64> {
    let producer: ThreadedProducer<Deliveries> = producer_config(bootstrap, "mirror-bench-fill", batch_bytes)
        .create_with_context(Deliveries::default())
        .map_err(|e| format!("producer: {e}"))?;
    let start = Instant::now();
    let mut value = vec![0u8; RECORD_BYTES];
    for i in 0..records {
        fill_value(i, &mut value);
        send_value(&producer, TOPIC, (i % PARTITIONS as u64) as i32, &value)?;
    }
    wait_deliveries(producer.context(), records)?;
    Ok(start.elapsed().as_secs_f64())
}

fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Res<()> {
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
            return Err(format!("CreateTopics {name}: {code}"));
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

/// Reads the whole topic with strait-upstream (see the module docs).
fn measure_fetch(knobs: &Knobs, bootstrap: &str, ends: &[i64], clk: f64, what: &str) -> Res<Run> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let cpu_before = own_cpu(clk);
    let (records, bytes, secs, passes) = runtime
        .block_on(fetch_all(
            bootstrap.to_owned(),
            ends.to_vec(),
            knobs.limit_in_flight,
        ))
        .map_err(|e| format!("{what}: {e}"))?;
    let cpu = match (cpu_before, own_cpu(clk)) {
        (Some(b), Some(a)) => Some((a - b) / passes as f64),
        _ => None,
    };
    Ok(Run {
        records,
        batch_bytes: Some(bytes),
        secs,
        first_secs: None,
        cpu,
        detail: format!(
            "per pass, mean of {passes}; CPU: this bench's process (the reader, and over the WAN the \
             delay relay's threads), not the source broker's"
        ),
    })
}

async fn fetch_all(bootstrap: String, ends: Vec<i64>, in_flight: usize) -> Res<(u64, u64, f64, u64)> {
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
    let (_, connection) = cluster.leader(TOPIC, 0).await.map_err(|e| e.to_string())?;
    // One unmeasured pass: the first read of freshly written segments
    // faults their pages into the broker's maps.
    read_all(&connection, &ends, in_flight).await?;
    let start = Instant::now();
    let (mut records, mut bytes, mut passes) = (0, 0, 0);
    // One pass over a small topic takes a few milliseconds on loopback:
    // read it again until a second has passed, for a steadier figure.
    while passes == 0 || start.elapsed() < LIMIT_MIN_TIME {
        let (r, b) = read_all(&connection, &ends, in_flight).await?;
        records += r;
        bytes += b;
        passes += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    Ok((records / passes, bytes / passes, secs / passes as f64, passes))
}

/// One read of the whole topic, the partitions split between `in_flight`
/// tasks; returns (records, batch bytes).
async fn read_all(connection: &Connection, ends: &[i64], in_flight: usize) -> Res<(u64, u64)> {
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..in_flight {
        let mine: Vec<(i32, i64)> = (0..PARTITIONS)
            .filter(|p| *p as usize % in_flight == k)
            .map(|p| (p, ends[p as usize]))
            .collect();
        tasks.spawn(fetch_partitions(connection.clone(), mine));
    }
    let (mut records, mut bytes) = (0, 0);
    while let Some(done) = tasks.join_next().await {
        let (r, b) = done.map_err(|e| e.to_string())??;
        records += r;
        bytes += b;
    }
    Ok((records, bytes))
}

/// Fetches `partitions` (partition, end offset) from offset 0 to their
/// ends, one request at a time; returns (records, batch bytes).
async fn fetch_partitions(connection: Connection, partitions: Vec<(i32, i64)>) -> Res<(u64, u64)> {
    let mut next = vec![0i64; partitions.len()];
    let (mut records, mut bytes) = (0u64, 0u64);
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
            return Ok((records, bytes));
        }
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(FETCH_MAX_WAIT_MS)
            .with_min_bytes(1)
            .with_max_bytes(FETCH_MAX_BYTES)
            .with_isolation_level(1)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partitions(wanted)]);
        let answer = tokio::time::timeout(STALL, connection.request(&request))
            .await
            .map_err(|_| format!("no Fetch answer within {} s", STALL.as_secs()))?
            .map_err(|e| e.to_string())?;
        for t in &answer.responses {
            for p in &t.partitions {
                if p.error_code != 0 {
                    return Err(format!(
                        "Fetch partition {}: error {}",
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
                        .map_err(|e| format!("partition {}: {e}", p.partition_index))?;
                    if rest.len() < header.size() {
                        break;
                    }
                    if header.base_offset != next[i] {
                        return Err(format!(
                            "partition {}: batch at {}, expected {}",
                            p.partition_index, header.base_offset, next[i]
                        ));
                    }
                    next[i] = header.last_offset() + 1;
                    records += header.record_count as u64;
                    bytes += header.size() as u64;
                    rest = &rest[header.size()..];
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The mirrors

/// Where a mirror copies from and to.
struct Route {
    /// "lan" or "wan": part of the mirror's and the topics' names.
    name: &'static str,
    source: String,
    target: String,
}

/// Polls the target until `topic` holds `ends` (per partition) or the
/// mirror stalls or exits; returns (seconds to complete, seconds to the
/// first record) since `start`.
fn wait_mirrored(
    target: &str,
    topic: &str,
    ends: &[i64],
    mirror: &mut Proc,
    start: Instant,
) -> Res<(f64, Option<f64>)> {
    let total: i64 = ends.iter().sum();
    let mut watch = OffsetWatch::new(target, topic);
    let mut first = None;
    let mut seen = 0i64;
    let mut progress = Instant::now();
    let mut last_error = String::new();
    loop {
        match watch.latest() {
            Ok(Some(offsets)) => {
                let sum: i64 = offsets.iter().sum();
                if sum > 0 && first.is_none() {
                    first = Some(start.elapsed().as_secs_f64());
                }
                if sum >= total {
                    let secs = start.elapsed().as_secs_f64();
                    if offsets != ends {
                        return Err(format!(
                            "{topic}: per partition {offsets:?} on the target, {ends:?} on the source"
                        ));
                    }
                    return Ok((secs, first));
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
        thread::sleep(POLL);
    }
}

/// The config of one `strait mirror`.
fn mirror_config(knobs: &Knobs, route: &Route, admin_port: u16) -> String {
    let extra = if knobs.cluster_options.is_empty() {
        String::new()
    } else {
        format!(", {}", knobs.cluster_options)
    };
    format!(
        "# written by benches/mirror.rs\n\
         clusters:\n  \
           source: {{ bootstrap: [\"{}\"]{extra} }}\n  \
           target: {{ bootstrap: [\"{}\"]{extra} }}\n\
         admin:\n  listen: 127.0.0.1:{admin_port}\n\
         mirrors:\n  \
           strait-{name}:\n    \
             source: source\n    \
             target: target\n    \
             topics: \"{TOPIC}\"\n    \
             rename: \"strait-{name}.{{topic}}\"\n",
        route.source,
        route.target,
        name = route.name
    )
}

/// A running `strait mirror` and its admin port.
struct StraitMirror {
    proc: Proc,
    admin_port: u16,
}

impl StraitMirror {
    fn metrics(&self) -> Res<String> {
        http_get(self.admin_port, "/metrics")
    }
}

/// Runs `strait mirror` until the target holds every record. With
/// `keep_running` the mirror is handed back (for the latency run).
fn run_strait_mirror(
    knobs: &Knobs,
    work: &Path,
    route: &Route,
    ends: &[i64],
    brokers: &[&Broker],
    clk: f64,
    keep_running: bool,
) -> Res<(Run, Option<StraitMirror>)> {
    let admin_port = support::free_port();
    let config = work.join(format!("mirror-{}.yaml", route.name));
    fs::write(&config, mirror_config(knobs, route, admin_port))
        .map_err(|e| format!("writing {}: {e}", config.display()))?;
    let watch = CpuWatch::start(brokers, clk);
    let start = Instant::now();
    let mut cmd = Command::new(&knobs.strait_bin);
    cmd.arg("mirror")
        .arg("--config")
        .arg(&config)
        .current_dir(work)
        .stdin(Stdio::null());
    let mut proc = Proc::spawn(
        cmd,
        "strait mirror",
        work.join(format!("mirror-{}.log", route.name)),
    )?;
    let topic = format!("strait-{}.{TOPIC}", route.name);
    let (secs, first) = wait_mirrored(&route.target, &topic, ends, &mut proc, start)?;
    let cpu = proc.cpu(clk);
    let mut detail = watch.describe(cpu);
    let mirror = StraitMirror { proc, admin_port };
    match mirror.metrics() {
        Ok(m) => {
            let records = metric_sum(&m, "strait_mirror_records_total{");
            let passed = metric_sum(&m, "strait_mirror_batches_total{")
                - metric_sum_with(&m, "strait_mirror_batches_total{", "reencoded");
            let reencoded = metric_sum_with(&m, "strait_mirror_batches_total{", "reencoded");
            let errors = metric_sum(&m, "strait_mirror_errors_total{");
            let _ = write!(
                detail,
                "\nmirror /metrics: {records:.0} records, {passed:.0} batches passed through, {reencoded:.0} re-encoded, {errors:.0} errors"
            );
        }
        Err(e) => {
            let _ = write!(detail, "\nmirror /metrics: {e}");
        }
    }
    let mut mirror = mirror;
    if !keep_running {
        match mirror.proc.stop() {
            Ok(took) => {
                let _ = write!(detail, "; exited {:.1} s after SIGTERM", took.as_secs_f64());
            }
            Err(e) => {
                let _ = write!(detail, "; {e}");
            }
        }
    }
    let run = Run {
        records: ends.iter().sum::<i64>() as u64,
        batch_bytes: None,
        secs,
        first_secs: first,
        cpu,
        detail,
    };
    Ok((run, keep_running.then_some(mirror)))
}

/// Runs the librdkafka mirror (this binary, `child-rdkafka-mirror`) until
/// the target holds every record.
fn run_rdkafka_mirror(
    knobs: &Knobs,
    work: &Path,
    route: &Route,
    ends: &[i64],
    brokers: &[&Broker],
    clk: f64,
) -> Res<Run> {
    let topic = format!("rdkafka-{}.{TOPIC}", route.name);
    create_topic(&route.target, &topic, PARTITIONS)?;
    let total: i64 = ends.iter().sum();
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let watch = CpuWatch::start(brokers, clk);
    let start = Instant::now();
    let mut cmd = Command::new(exe);
    cmd.args([
        "child-rdkafka-mirror",
        &route.source,
        &route.target,
        TOPIC,
        &topic,
        &total.to_string(),
        &knobs.batch_bytes.to_string(),
    ])
    // The child waits for its stdin to close before it exits, so that
    // its CPU time can be read when the target is complete.
    .stdin(Stdio::piped())
    .current_dir(work);
    let mut proc = Proc::spawn(
        cmd,
        "librdkafka mirror",
        work.join(format!("rdkafka-mirror-{}.log", route.name)),
    )?;
    let (secs, first) = wait_mirrored(&route.target, &topic, ends, &mut proc, start)?;
    let cpu = proc.cpu(clk);
    let detail = watch.describe(cpu);
    drop(proc.child.stdin.take());
    let deadline = Instant::now() + Duration::from_secs(10);
    while proc.exited().is_none() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    Ok(Run {
        records: total as u64,
        batch_bytes: None,
        secs,
        first_secs: first,
        cpu,
        detail,
    })
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
    let producer: BaseProducer<Deliveries> =
        producer_config(target, "mirror-bench-rdkafka-mirror", batch_bytes)
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

/// The latency run's producer, in a child process inside the source's
/// network namespace: args BOOTSTRAP TOPIC RATE SECS BATCH_BYTES.
fn child_rate_producer(args: &[String]) -> Res<()> {
    let [bootstrap, topic, rate, secs, batch_bytes] = args else {
        return Err(format!("child-rate-producer: 5 arguments expected, got {args:?}"));
    };
    let rate: u64 = rate.parse().map_err(|e| format!("rate: {e}"))?;
    let secs: u64 = secs.parse().map_err(|e| format!("secs: {e}"))?;
    let batch_bytes: u64 = batch_bytes.parse().map_err(|e| format!("batch bytes: {e}"))?;
    let producer: ThreadedProducer<Deliveries> = producer_config(bootstrap, "mirror-bench-rate", batch_bytes)
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

/// The source's datacenter: a network namespace behind a veth pair whose
/// ends are rate-limited, and the delay relay in front of it.
struct Wan {
    ns: String,
    veth: String,
    /// The port the source listens on inside, and the relay outside.
    port: u16,
    relay: Option<Relay>,
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
    fn setup(knobs: &Knobs, _work: &Path) -> Res<Wan> {
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
            port: 0,
            relay: None,
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
        // The relay listens here on a free port; the source listens on the
        // same port in its namespace (where every port is free), so the
        // relay learns where to connect once its port is known.
        let relay = Relay::start(
            ([127, 0, 0, 1], 9).into(),
            Duration::from_micros(knobs.wan_rtt_ms * 1000 / 2),
        );
        wan.port = relay.port();
        let inside: SocketAddr = format!("{subnet}.2:{}", wan.port)
            .parse()
            .map_err(|e| format!("{e}"))?;
        relay.retarget(inside);
        wan.relay = Some(relay);
        Ok(wan)
    }

    fn start_source(&self, knobs: &Knobs, data: &Path, work: &Path) -> Res<Broker> {
        Broker::start(knobs, "source-wan", data, Some((&self.ns, self.port)), work)
    }

    fn teardown(&mut self) {
        self.relay = None;
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

#[allow(clippy::too_many_arguments)]
fn run_wan(
    knobs: &Knobs,
    work: &Path,
    wan: &Wan,
    source: &Broker,
    target: &Broker,
    ends: &[i64],
    batch_bytes: Option<u64>,
    clk: f64,
    report: &mut Report,
) {
    let route = Route {
        name: "wan",
        source: source.bootstrap(),
        target: target.bootstrap(),
    };
    println!(
        "WAN: source in namespace {} behind {} Mbit/s and {} ms round trip, via 127.0.0.1:{}",
        wan.ns, knobs.wan_mbit, knobs.wan_rtt_ms, wan.port
    );
    report.wan_fetch = measure_fetch(knobs, &source.bootstrap(), ends, clk, "WAN fetch");
    print_run("WAN fetch over the link (strait-upstream)", &report.wan_fetch);
    report.wan_rdkafka = run_rdkafka_mirror(knobs, work, &route, ends, &[source, target], clk)
        .map(|r| r.with_batch_bytes(batch_bytes));
    print_run("WAN librdkafka mirror", &report.wan_rdkafka);
    let strait = run_strait_mirror(knobs, work, &route, ends, &[source, target], clk, true);
    let mut mirror = match strait {
        Ok((run, mirror)) => {
            report.wan_strait = Ok(run.with_batch_bytes(batch_bytes));
            mirror
        }
        Err(e) => {
            report.wan_strait = Err(e);
            None
        }
    };
    print_run("WAN Strait mirror", &report.wan_strait);
    report.latency = match &mut mirror {
        Some(m) => latency_run(knobs, work, wan, m, &route, clk),
        None => Err("skipped: the mirror did not run".into()),
    };
    match &report.latency {
        Ok(l) => println!(
            "WAN replication latency: {} records, p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; mirror histogram p50 <= {}, p99 <= {}\n  {}",
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
    if let Some(mut m) = mirror {
        match m.proc.stop() {
            Ok(took) => println!(
                "WAN Strait mirror exited {:.1} s after SIGTERM",
                took.as_secs_f64()
            ),
            Err(e) => println!("WAN Strait mirror: {e}"),
        }
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

/// Records produced at a fixed rate in the source's datacenter, read on
/// the target's side: read time minus CreateTime.
fn latency_run(
    knobs: &Knobs,
    work: &Path,
    wan: &Wan,
    mirror: &mut StraitMirror,
    route: &Route,
    clk: f64,
) -> Res<Latency> {
    let topic = format!("strait-{}.{TOPIC}", route.name);
    let from = latest_offsets(&route.target, &topic)?.ok_or("the mirrored topic is gone")?;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &route.target)
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
    // Let the consumer's first fetches reach the broker before records come.
    let _ = consumer.poll(Duration::from_millis(500));
    let histogram_before = histogram(&mirror.metrics()?, "strait_mirror_replication_latency_seconds");
    let mirror_cpu = mirror.proc.cpu(clk);
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &wan.ns])
        .arg(exe)
        .args([
            "child-rate-producer",
            &format!("127.0.0.1:{}", wan.port),
            TOPIC,
            &knobs.latency_rate.to_string(),
            &knobs.latency_secs.to_string(),
            &knobs.batch_bytes.to_string(),
        ])
        .stdin(Stdio::null())
        .current_dir(work);
    let mut producer = Proc::spawn(cmd, "rate producer", work.join("rate-producer.log"))?;
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
            if !status.contains("exit status: 0") && status != "exit status: 0" {
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
    let mirror_cpu = match (mirror_cpu, mirror.proc.cpu(clk)) {
        (Some(b), Some(a)) => format!("{:.2}", a - b),
        _ => "?".into(),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while producer.exited().is_none() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    let produced = fs::read_to_string(&producer.log).unwrap_or_default();
    latencies.sort_by(f64::total_cmp);
    Ok(Latency {
        records: latencies.len() as u64,
        p50: percentile(&latencies, 50.0),
        p99: percentile(&latencies, 99.0),
        max: latencies[latencies.len() - 1],
        hist_p50: histogram_quantile(&histogram_before, &histogram_after, 0.5),
        hist_p99: histogram_quantile(&histogram_before, &histogram_after, 0.99),
        detail: format!(
            "{}; mirror CPU {mirror_cpu} s meanwhile",
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

struct Report {
    lan_limit: Res<Run>,
    lan_strait: Res<Run>,
    lan_rdkafka: Res<Run>,
    wan_skipped: Option<String>,
    wan_fetch: Res<Run>,
    wan_strait: Res<Run>,
    wan_rdkafka: Res<Run>,
    latency: Res<Latency>,
}

impl Default for Report {
    fn default() -> Self {
        let n = || Err("not run".to_owned());
        Report {
            lan_limit: n(),
            lan_strait: n(),
            lan_rdkafka: n(),
            wan_skipped: None,
            wan_fetch: n(),
            wan_strait: n(),
            wan_rdkafka: n(),
            latency: Err("not run".to_owned()),
        }
    }
}

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

impl Report {
    fn print(&self, knobs: &Knobs) {
        let mut rows: Vec<[String; 4]> = Vec::new();
        let mut reasons: Vec<String> = Vec::new();
        let mut na = |e: &String| {
            let i = reasons.iter().position(|r| r == e).unwrap_or_else(|| {
                reasons.push(e.clone());
                reasons.len() - 1
            });
            format!("n/a [{}]", i + 1)
        };
        let rate = |r: &Run| match r.batch_mb_s() {
            Some(b) => format!("{:.1} MB/s ({b:.1} batch MB/s)", r.mb_s()),
            None => format!("{:.1} MB/s", r.mb_s()),
        };
        let cpu = |r: &Run| r.cpu_per_gb().map_or_else(|| "?".into(), |c| format!("{c:.2}"));
        // LAN.
        let limit = self.lan_limit.as_ref().ok().map(Run::mb_s);
        match &self.lan_limit {
            Ok(r) => rows.push([
                "LAN source fetch limit (strait-upstream)".into(),
                rate(r),
                format!("{} (the reader)", cpu(r)),
                "the limit".into(),
            ]),
            Err(e) => rows.push([
                "LAN source fetch limit (strait-upstream)".into(),
                na(e),
                String::new(),
                "the limit".into(),
            ]),
        }
        match &self.lan_strait {
            Ok(r) => rows.push([
                "LAN Strait mirror".into(),
                rate(r),
                cpu(r),
                match limit {
                    Some(l) => {
                        let x = r.mb_s() / l;
                        format!(">= 0.8 x limit: {} x, {}", ratio(x), verdict(x >= 0.8))
                    }
                    None => ">= 0.8 x limit: n/a".into(),
                },
            ]),
            Err(e) => rows.push([
                "LAN Strait mirror".into(),
                na(e),
                String::new(),
                ">= 0.8 x limit".into(),
            ]),
        }
        match &self.lan_rdkafka {
            Ok(r) => rows.push(["LAN librdkafka mirror".into(), rate(r), cpu(r), String::new()]),
            Err(e) => rows.push([
                "LAN librdkafka mirror".into(),
                na(e),
                String::new(),
                String::new(),
            ]),
        }
        let efficiency = |s: &Res<Run>, k: &Res<Run>| match (s, k) {
            (Ok(s), Ok(k)) => match (s.mb_per_cpu_s(), k.mb_per_cpu_s()) {
                (Some(a), Some(b)) if b > 0.0 => Some((a, b, a / b)),
                _ => None,
            },
            _ => None,
        };
        match efficiency(&self.lan_strait, &self.lan_rdkafka) {
            Some((a, b, x)) => rows.push([
                "LAN MB per mirror CPU s, Strait / librdkafka".into(),
                format!("{a:.0} / {b:.0} = {x:.1} x"),
                String::new(),
                format!(">= 3 x: {}", verdict(x >= 3.0)),
            ]),
            None => rows.push([
                "LAN MB per mirror CPU s, Strait / librdkafka".into(),
                "n/a".into(),
                String::new(),
                ">= 3 x".into(),
            ]),
        }
        // WAN.
        let link = knobs.wan_mbit as f64 / 8.0;
        let wan = format!("WAN ({} Mbit/s, {} ms RTT)", knobs.wan_mbit, knobs.wan_rtt_ms);
        if let Some(skipped) = &self.wan_skipped {
            rows.push([
                format!("{wan}: skipped"),
                na(skipped),
                String::new(),
                String::new(),
            ]);
        } else {
            let vs_link = |r: &Run| match r.batch_mb_s() {
                Some(b) => format!(
                    "{b:.1} batch MB/s = {} x link ({:.1} MB/s)",
                    ratio(b / link),
                    r.mb_s()
                ),
                None => format!("{:.1} MB/s (batch bytes unknown)", r.mb_s()),
            };
            let lines: [(&str, &Res<Run>, bool); 3] = [
                ("source fetch over the link", &self.wan_fetch, false),
                ("Strait mirror", &self.wan_strait, true),
                ("librdkafka mirror", &self.wan_rdkafka, false),
            ];
            for (what, run, goal) in lines {
                let name = format!("{wan} {what}");
                match run {
                    Ok(r) => rows.push([
                        name,
                        vs_link(r),
                        cpu(r),
                        if goal {
                            match r.batch_mb_s() {
                                Some(b) => format!(">= 0.8 x link: {}", verdict(b / link >= 0.8)),
                                None => ">= 0.8 x link: n/a".into(),
                            }
                        } else {
                            String::new()
                        },
                    ]),
                    Err(e) => rows.push([
                        name,
                        na(e),
                        String::new(),
                        if goal {
                            ">= 0.8 x link".into()
                        } else {
                            String::new()
                        },
                    ]),
                }
            }
            if let Some((a, b, x)) = efficiency(&self.wan_strait, &self.wan_rdkafka) {
                rows.push([
                    format!("{wan} MB per mirror CPU s, Strait / librdkafka"),
                    format!("{a:.0} / {b:.0} = {x:.1} x"),
                    String::new(),
                    String::new(),
                ]);
            }
            let budget = 50.0 + knobs.wan_rtt_ms as f64;
            let name = format!(
                "{wan} replication latency p50 / p99, {} rec/s",
                knobs.latency_rate
            );
            match &self.latency {
                Ok(l) => {
                    rows.push([
                        name,
                        format!("{:.0} / {:.0} ms (max {:.0})", l.p50, l.p99, l.max),
                        String::new(),
                        format!("p99 < {budget:.0} ms: {}", verdict(l.p99 < budget)),
                    ]);
                    rows.push([
                        format!("{wan} strait_mirror_replication_latency_seconds p50 / p99"),
                        format!("<= {} / <= {}", bound(l.hist_p50), bound(l.hist_p99)),
                        String::new(),
                        "(bucket bounds; first record of each batch)".into(),
                    ]);
                }
                Err(e) => rows.push([name, na(e), String::new(), format!("p99 < {budget:.0} ms")]),
            }
        }
        let header = ["measurement", "result", "CPU s per GB", "goal"];
        let mut widths = header.map(str::len);
        for row in &rows {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        println!(
            "{} records x 1 KiB, {PARTITIONS} partitions, lz4 batches from librdkafka; MB = 10^6 B of values, \
             batch MB = 10^6 B of record batches as stored; CPU of the mirror process (of the reader for the limit)",
            knobs.records
        );
        let line = |cells: [&str; 4]| {
            let mut s = String::from("|");
            for (c, w) in cells.iter().zip(widths) {
                let pad = w - c.chars().count();
                let _ = write!(s, " {c}{} |", " ".repeat(pad));
            }
            println!("{s}");
        };
        line(header);
        let rule = widths.map(|w| "-".repeat(w));
        line([&rule[0], &rule[1], &rule[2], &rule[3]]);
        for row in &rows {
            line([&row[0], &row[1], &row[2], &row[3]]);
        }
        for (i, r) in reasons.iter().enumerate() {
            println!("[{}] {r}", i + 1);
        }
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
            println!("{name}: {} WARN/ERROR lines, first 5:", flagged.len());
            for l in flagged.iter().take(5) {
                println!("  {l}");
            }
        }
    }
}
