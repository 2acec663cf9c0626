//! What the broker and router benchmarks share (`benches/broker.rs`,
//! `benches/router.rs`): facts about the machine, child processes (spawned
//! with a log, killed on drop, their CPU time from /proc), Tansu's command
//! line, log excerpts, CPU accounting per phase, medians and percentiles,
//! the report's table cells, and the librdkafka load generator's pieces
//! (topic creation, the metadata check, the producer with its delivery
//! reports, the consumer that reads every partition from the beginning).
//!
//! A bench includes it with `#[path = "common/mod.rs"] mod common;` (a
//! `benches/*.rs` file is a crate root of its own). It brings the
//! integration tests' harness along as `common::support` (free ports, the
//! ApiVersions readiness check, the delay relay).

// Each bench uses part of it (and of the tests' harness).
#![allow(dead_code)]

#[path = "../../tests/support/mod.rs"]
pub mod support;

use std::fmt::Write as _;
use std::fs::{self, File};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{Client, ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

pub type Res<T> = Result<T, String>;

/// Partitions of the benchmark topics.
pub const PARTITIONS: i32 = 8;
/// Size of every record value.
pub const RECORD_BYTES: usize = 1024;
/// A phase with no progress for this long is given up.
pub const STALL: Duration = Duration::from_secs(30);
/// How long a process may take to answer ApiVersions after it was spawned.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------
// The environment and the machine

pub fn env_u64(name: &str, default: u64) -> Res<u64> {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().map_err(|e| format!("{name}={v:?}: {e}")),
        Err(_) => Ok(default),
    }
}

/// `STRAIT_BIN`, or the binary cargo built for the bench.
pub fn strait_bin() -> PathBuf {
    std::env::var_os("STRAIT_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_strait")), PathBuf::from)
}

/// `TANSU_BIN`, or the one `scripts/peers` installs.
pub fn tansu_bin() -> PathBuf {
    std::env::var_os("TANSU_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".peers/bin/tansu"),
        PathBuf::from,
    )
}

pub fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// The 1, 5 and 15 minute load averages.
pub fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "?".into(),
        |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

pub fn nproc() -> usize {
    thread::available_parallelism().map_or(0, |n| n.get())
}

/// The CPU's model name from /proc/cpuinfo.
pub fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "?".into())
}

/// The first line of `tansu --version`.
pub fn tansu_version(tansu_bin: &Path) -> String {
    Command::new(tansu_bin)
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("?")
                .to_owned()
        })
        .unwrap_or_else(|e| format!("cannot run {}: {e}", tansu_bin.display()))
}

/// librdkafka's version string.
pub fn librdkafka_version() -> String {
    rdkafka::util::get_rdkafka_version().1
}

// ---------------------------------------------------------------------------
// Processes

/// A child process, killed on drop.
#[derive(Debug)]
pub struct Proc {
    pub child: Child,
}

impl Proc {
    /// Spawns `cmd` with stdout and stderr appended to `log`.
    pub fn spawn(mut cmd: Command, what: &str, log: &Path) -> Res<Proc> {
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| format!("opening {}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("spawning {what} ({:?}): {e}", cmd.get_program()))?;
        Ok(Proc { child })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// User + system CPU time so far, in clock ticks.
    pub fn cpu_ticks(&self) -> Option<u64> {
        cpu_ticks_of(&fs::read_to_string(format!("/proc/{}/stat", self.pid())).ok()?)
    }

    /// The exit status if it has exited.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    /// SIGTERM, then SIGKILL after 10 s; how long the exit took.
    pub fn stop(&mut self) -> Res<Duration> {
        let started = Instant::now();
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
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

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts a server on a free port (`cmd` builds its command line for a
/// port) and waits until it answers ApiVersions there; a port taken in
/// between is retried.
pub fn start_server(what: &str, log: &Path, cmd: impl Fn(u16) -> Command) -> Res<(Proc, u16)> {
    let mut last = String::new();
    for _ in 0..3 {
        let port = support::free_port();
        let mut proc = Proc::spawn(cmd(port), what, log)?;
        match wait_ready(&mut proc, port) {
            Ok(()) => return Ok((proc, port)),
            Err(e) => last = e,
        }
    }
    Err(format!("{what} did not start: {last}"))
}

/// Polls until `port` answers ApiVersions v0, failing early if the process
/// exits.
pub fn wait_ready(proc: &mut Proc, port: u16) -> Res<()> {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(status) = proc.exited() {
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

/// Tansu, run in `dir`, with its settings from flags only (none of its
/// environment variables) and uncolored logs.
pub fn tansu_command(tansu_bin: &Path, dir: &Path) -> Command {
    let mut c = Command::new(tansu_bin);
    for var in [
        "CLUSTER_ID",
        "LISTENER_URL",
        "ADVERTISED_LISTENER_URL",
        "ORIGIN_URL",
        "STORAGE_ENGINE",
        "SCHEMA_REGISTRY",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ] {
        c.env_remove(var);
    }
    c.env("NO_COLOR", "1").current_dir(dir);
    c
}

// ---------------------------------------------------------------------------
// Logs

pub fn flagged_line(l: &str) -> bool {
    l.contains("WARN") || l.contains("ERROR") || l.contains("panicked")
}

/// The first `flagged` WARN/ERROR lines and the last `tail` lines of a log,
/// each line indented by `indent` (the lines of the log by two more).
pub fn log_excerpt(what: &str, log: &Path, indent: usize, flagged: usize, tail: usize) -> String {
    let text = fs::read_to_string(log).unwrap_or_else(|e| format!("(cannot read {}: {e})", log.display()));
    let text = strip_ansi(&text);
    let lines: Vec<&str> = text.lines().collect();
    let i = "";
    let mut s = format!("{i:indent$}--- {what} log {} ---\n", log.display());
    let warned: Vec<&&str> = lines.iter().filter(|l| flagged_line(l)).collect();
    if !warned.is_empty() {
        let _ = writeln!(
            s,
            "{i:indent$}({} WARN/ERROR lines, first {flagged}:)",
            warned.len()
        );
        for l in warned.iter().take(flagged) {
            let _ = writeln!(s, "{i:indent$}  {l}");
        }
    }
    let _ = writeln!(s, "{i:indent$}(last {tail} of {} lines:)", lines.len());
    for l in &lines[lines.len().saturating_sub(tail)..] {
        let _ = writeln!(s, "{i:indent$}  {l}");
    }
    let _ = write!(s, "{i:indent$}---");
    s
}

/// `text` without ANSI escape sequences (`ESC [ ... letter`): colored logs.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Prints the WARN/ERROR lines of Strait's logs (the first 10), or that
/// there are none, after `prefix` ("Strait logs", ...).
pub fn print_flagged_lines<'a>(prefix: &str, logs: impl IntoIterator<Item = &'a Path>) {
    let mut flagged = Vec::new();
    let mut read = 0;
    for log in logs {
        let Ok(text) = fs::read_to_string(log) else {
            continue;
        };
        read += 1;
        flagged.extend(text.lines().filter(|l| flagged_line(l)).map(str::to_owned));
    }
    if flagged.is_empty() {
        println!("{prefix}: no WARN/ERROR lines in {read} runs");
    } else {
        println!(
            "{prefix}: {} WARN/ERROR lines in {read} runs, first 10:",
            flagged.len()
        );
        for l in flagged.iter().take(10) {
            println!("  {l}");
        }
    }
}

// ---------------------------------------------------------------------------
// CPU accounting

/// Field 14 (utime) + 15 (stime) of a /proc/PID/stat line.
pub fn cpu_ticks_of(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces; it ends at the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// CPU time of this process (the load generator, librdkafka's threads
/// included), in clock ticks.
pub fn own_cpu_ticks() -> Option<u64> {
    cpu_ticks_of(&fs::read_to_string("/proc/self/stat").ok()?)
}

/// Busy time of all CPUs (everything but idle and iowait), in clock ticks.
pub fn machine_busy_ticks() -> Option<u64> {
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

/// CPU counters at one instant, in clock ticks: `N` child processes, this
/// process and the whole machine.
#[derive(Debug, Clone, Copy)]
pub struct CpuSample<const N: usize> {
    procs: [Option<u64>; N],
    client: Option<u64>,
    machine: Option<u64>,
}

/// CPU seconds spent during one phase.
#[derive(Debug, Clone, Copy)]
pub struct CpuUse<const N: usize> {
    /// By each child process (a bench names them).
    pub procs: [Option<f64>; N],
    /// By the load generator (this process, librdkafka's threads included).
    pub client: Option<f64>,
    /// By everything else on the machine (other work on a shared machine
    /// skews the figures: compare runs with little of it).
    pub other: Option<f64>,
}

impl<const N: usize> Default for CpuUse<N> {
    fn default() -> Self {
        CpuUse {
            procs: [None; N],
            client: None,
            other: None,
        }
    }
}

impl<const N: usize> CpuSample<N> {
    /// Now, with the child processes' counters given.
    pub fn take(procs: [Option<u64>; N]) -> CpuSample<N> {
        CpuSample {
            procs,
            client: own_cpu_ticks(),
            machine: machine_busy_ticks(),
        }
    }

    pub fn until(&self, later: &CpuSample<N>, clk_tck: f64) -> CpuUse<N> {
        let d = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?) as f64 / clk_tck);
        let procs: [Option<f64>; N] = std::array::from_fn(|i| d(self.procs[i], later.procs[i]));
        let client = d(self.client, later.client);
        let other = d(self.machine, later.machine).map(|m| {
            let ours: f64 = procs.iter().chain([&client]).map(|c| c.unwrap_or(0.0)).sum();
            (m - ours).max(0.0)
        });
        CpuUse { procs, client, other }
    }
}

impl<const N: usize> CpuUse<N> {
    /// "cpu s: NAME 0.12, ..., client 0.30, other 0.01", leaving out what
    /// was not measured.
    pub fn describe(&self, names: [&str; N]) -> String {
        let mut s = String::from("cpu s:");
        let parts = names
            .iter()
            .zip(self.procs)
            .chain([(&"client", self.client), (&"other", self.other)]);
        for (name, v) in parts {
            if let Some(v) = v {
                let _ = write!(s, " {name} {v:.2},");
            }
        }
        s.pop();
        s
    }
}

// ---------------------------------------------------------------------------
// Figures

/// Records and seconds of one throughput phase, and its CPU use.
#[derive(Debug, Clone, Copy)]
pub struct Throughput<const N: usize> {
    pub records: u64,
    pub secs: f64,
    /// Consumers: seconds from the assignment to the first record.
    pub first_record_secs: Option<f64>,
    pub cpu: CpuUse<N>,
}

impl<const N: usize> Throughput<N> {
    pub fn new(records: u64, secs: f64) -> Throughput<N> {
        Throughput {
            records,
            secs,
            first_record_secs: None,
            cpu: CpuUse::default(),
        }
    }

    pub fn records_per_sec(&self) -> f64 {
        self.records as f64 / self.secs
    }

    pub fn mb_per_sec(&self) -> f64 {
        self.records as f64 * RECORD_BYTES as f64 / 1e6 / self.secs
    }
}

pub fn median(mut v: Vec<f64>) -> Option<f64> {
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

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// p50, p99 and max, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Stats {
    pub fn of(mut ms: Vec<f64>) -> Option<Stats> {
        if ms.is_empty() {
            return None;
        }
        ms.sort_by(f64::total_cmp);
        Some(Stats {
            p50: percentile(&ms, 50.0),
            p99: percentile(&ms, 99.0),
            max: ms[ms.len() - 1],
        })
    }
}

/// One table cell: the median over the successful runs, or "n/a" with a
/// numbered reason.
#[derive(Debug)]
pub struct Cell {
    pub value: Option<f64>,
    pub text: String,
}

/// The cell of the runs of `who` (the column): their median, how many
/// succeeded when some failed, and the first failure as a numbered reason
/// (`reasons` collects them, each once).
pub fn cell(
    who: &str,
    runs: Vec<Res<f64>>,
    format: &dyn Fn(f64) -> String,
    reasons: &mut Vec<String>,
) -> Cell {
    let total = runs.len();
    if total == 0 {
        return Cell {
            value: None,
            text: "not run".into(),
        };
    }
    let first_err = runs.iter().find_map(|r| r.as_ref().err().cloned());
    let ok: Vec<f64> = runs.into_iter().filter_map(Result::ok).collect();
    let value = median(ok.clone());
    let mut text = value.map_or_else(|| "n/a".to_owned(), format);
    if let Some(e) = first_err {
        let reason = format!("{who}: {e}");
        let idx = match reasons.iter().position(|r| *r == reason) {
            Some(i) => i,
            None => {
                reasons.push(reason);
                reasons.len() - 1
            }
        };
        if value.is_some() {
            let _ = write!(text, " ({} of {total} runs) [{}]", ok.len(), idx + 1);
        } else {
            let _ = write!(text, " [{}]", idx + 1);
        }
    }
    Cell { value, text }
}

/// A Markdown table, its columns as wide as their widest cell.
pub fn print_rows(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::from("|");
        for (c, w) in cells.iter().zip(&widths) {
            let _ = write!(s, " {c:<w$} |");
        }
        println!("{s}");
    };
    line(&header.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>());
    line(&widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>());
    for row in rows {
        line(row);
    }
}

// ---------------------------------------------------------------------------
// The librdkafka load generator

/// Creates `topic` (AdminClient through `bootstrap`) and waits until its
/// metadata shows every partition with a leader.
pub fn create_topic(bootstrap: &str, topic: &str, partitions: i32, client_id: &str) -> Res<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("client.id", client_id)
        .create()
        .map_err(|e| format!("admin client: {e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
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
    topic_ready(admin.inner(), topic, partitions, None)
}

/// Waits (up to 15 s) until metadata shows `topic` with its `partitions`
/// partitions, every one led. With `only` (the address the client
/// bootstrapped from), also checks that the metadata names that one broker
/// only: the client goes through it and nowhere else.
pub fn topic_ready<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    partitions: i32,
    only: Option<&str>,
) -> Res<()> {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut last;
    loop {
        match client.fetch_metadata(Some(topic), Duration::from_secs(10)) {
            Ok(md) => {
                let brokers: Vec<String> = md
                    .brokers()
                    .iter()
                    .map(|b| format!("{}:{}", b.host(), b.port()))
                    .collect();
                if let Some(only) = only.filter(|only| brokers.iter().any(|b| b != only)) {
                    return Err(format!(
                        "metadata through {only} names brokers {brokers:?}: clients would not go through it alone"
                    ));
                }
                match md.topics().iter().find(|t| t.name() == topic) {
                    Some(t) if t.error().is_some() => last = format!("metadata of {topic}: {:?}", t.error()),
                    Some(t) => {
                        let led = t.partitions().iter().filter(|p| p.leader() >= 0).count();
                        if led == partitions as usize && t.partitions().len() == partitions as usize {
                            return Ok(());
                        }
                        last = format!(
                            "metadata of {topic}: {} partitions, {led} with a leader",
                            t.partitions().len()
                        );
                    }
                    None => last = format!("metadata: no topic {topic}"),
                }
            }
            Err(e) => last = format!("metadata: {e}"),
        }
        if Instant::now() > deadline {
            let through = only.map_or_else(String::new, |b| format!(" through {b}"));
            return Err(format!("topic not ready{through} after 15 s: {last}"));
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// Delivery reports, counted; the send time travels as the opaque
/// (nanoseconds since `base`).
#[derive(Debug)]
pub struct Deliveries {
    pub base: Instant,
    pub state: Mutex<DeliveryState>,
    cv: Condvar,
    keep_latencies: bool,
}

#[derive(Debug, Default)]
pub struct DeliveryState {
    pub ok: u64,
    pub failed: u64,
    /// Records delivered to each partition.
    pub per_partition: Vec<u64>,
    pub first_error: Option<String>,
    /// librdkafka's error reports (the first 100).
    pub client_errors: Vec<String>,
    /// (sent, delivery latency), nanoseconds; with `keep_latencies` only.
    pub latencies: Vec<(u64, u64)>,
    pub last_delivery: Option<Instant>,
}

impl Deliveries {
    pub fn new(base: Instant, keep_latencies: bool, partitions: i32) -> Deliveries {
        Deliveries {
            base,
            state: Mutex::new(DeliveryState {
                per_partition: vec![0; partitions as usize],
                ..DeliveryState::default()
            }),
            cv: Condvar::new(),
            keep_latencies,
        }
    }

    /// Now, in nanoseconds since `base`: a send time.
    pub fn stamp(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// Reports (ok or failed) so far.
    pub fn reported(&self) -> u64 {
        let st = self.state.lock().unwrap();
        st.ok + st.failed
    }

    /// Waits until `count` reports (ok or failed) arrived; gives up when no
    /// report came for `STALL`. A failed delivery is an error.
    pub fn wait_for(&self, count: u64) -> Res<()> {
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
                    "stalled: {seen} of {count} delivery reports, none for {} s{}",
                    STALL.as_secs(),
                    client_errors(&st.client_errors)
                ));
            }
        }
        if st.failed > 0 {
            return Err(format!(
                "{} of {count} deliveries failed, first: {}{}",
                st.failed,
                st.first_error.as_deref().unwrap_or("?"),
                client_errors(&st.client_errors)
            ));
        }
        Ok(())
    }
}

/// "; last client error: E (N in all)", or nothing.
pub fn client_errors(errors: &[String]) -> String {
    match errors.last() {
        Some(e) => format!("; last client error: {e} ({} in all)", errors.len()),
        None => String::new(),
    }
}

/// Keeps a client's error report (the first 100).
fn keep_error(errors: &mut Vec<String>, error: KafkaError, reason: &str) {
    if errors.len() < 100 {
        errors.push(format!("{error}: {reason}"));
    }
}

impl ClientContext for Deliveries {
    fn error(&self, error: KafkaError, reason: &str) {
        keep_error(&mut self.state.lock().unwrap().client_errors, error, reason);
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
                    let at = (now - self.base).as_nanos() as u64;
                    st.latencies.push((sent as u64, at.saturating_sub(sent as u64)));
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

/// The producer settings every bench shares: `acks`, `linger_ms`, no
/// compression, no idempotence, a minute to deliver; the rest librdkafka's
/// defaults.
pub fn producer_config(bootstrap: &str, client_id: &str, acks: &str, linger_ms: u64) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("client.id", client_id)
        .set("acks", acks)
        .set("linger.ms", linger_ms.to_string())
        .set("compression.type", "none")
        .set("enable.idempotence", "false")
        .set("message.timeout.ms", "60000");
    config
}

/// A record value: 1 KiB of printable bytes (the router's latency runs
/// stamp the first 8 with the send time).
pub fn payload() -> Vec<u8> {
    (0..RECORD_BYTES).map(|i| b'a' + (i % 26) as u8).collect()
}

/// Sends one record to `partition`, waiting while the producer's queue is
/// full; the opaque is the send time `sent` (see [`Deliveries::stamp`]).
pub fn send(
    producer: &ThreadedProducer<Deliveries>,
    topic: &str,
    value: &[u8],
    partition: i32,
    sent: u64,
) -> Res<()> {
    let mut record = BaseRecord::<(), [u8], usize>::with_opaque_to(topic, sent as usize)
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
                        client_errors(&st.client_errors)
                    ));
                }
                thread::sleep(Duration::from_micros(500));
            }
            Err((e, _)) => return Err(format!("send: {e}")),
        }
    }
}

/// Sends `records` records round-robin over `partitions` partitions as
/// fast as the producer takes them and waits for their delivery reports;
/// returns the seconds from the first send to the last report and the
/// records delivered to each partition so far.
pub fn produce_records(
    producer: &ThreadedProducer<Deliveries>,
    topic: &str,
    records: u64,
    partitions: i32,
) -> Res<(f64, Vec<u64>)> {
    let deliveries = producer.context();
    let before = deliveries.reported();
    let value = payload();
    let start = Instant::now();
    for i in 0..records {
        send(producer, topic, &value, (i % partitions as u64) as i32, 0)?;
    }
    deliveries.wait_for(before + records)?;
    let st = deliveries.state.lock().unwrap();
    let end = st.last_delivery.unwrap_or_else(Instant::now);
    Ok(((end - start).as_secs_f64(), st.per_partition.clone()))
}

/// Consumer context that keeps the client's error reports.
#[derive(Debug, Default)]
pub struct ConsumerErrors(pub Mutex<Vec<String>>);

impl ClientContext for ConsumerErrors {
    fn error(&self, error: KafkaError, reason: &str) {
        keep_error(&mut self.0.lock().unwrap(), error, reason);
    }
}

impl ConsumerContext for ConsumerErrors {}

/// A consumer that joins no group (librdkafka wants a group id for
/// `assign`: `{topic}-{client_id}`, never joined), commits nothing and
/// starts from the beginning; fetch settings librdkafka's defaults.
pub fn consumer(bootstrap: &str, topic: &str, client_id: &str) -> Res<BaseConsumer<ConsumerErrors>> {
    consumer_config(bootstrap, topic, client_id)
        .create_with_context(ConsumerErrors::default())
        .map_err(|e| format!("consumer: {e}"))
}

/// The settings of [`consumer`], for a caller that adds its own.
pub fn consumer_config(bootstrap: &str, topic: &str, client_id: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("client.id", client_id)
        .set("group.id", format!("{topic}-{client_id}"))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("auto.offset.reset", "earliest");
    config
}

/// Assigns partitions 0 to `partitions - 1` of `topic` from the beginning.
pub fn assign_all(consumer: &BaseConsumer<ConsumerErrors>, topic: &str, partitions: i32) -> Res<()> {
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .map_err(|e| e.to_string())?;
    }
    consumer.assign(&assignment).map_err(|e| format!("assign: {e}"))
}

/// What [`read_all`] read.
#[derive(Debug)]
pub struct Consumed {
    pub records: u64,
    /// From `start` to the last record.
    pub secs: f64,
    /// From `start` to the first record.
    pub first_record_secs: Option<f64>,
    /// The last error a poll returned, if any.
    pub poll_error: Option<String>,
}

/// Polls an assigned consumer until `expected[p]` records of each partition
/// `p` were read (re-fetched records skipped, not counted), every value
/// `RECORD_BYTES` long; times from `start`.
pub fn read_all(consumer: &BaseConsumer<ConsumerErrors>, start: Instant, expected: &[u64]) -> Res<Consumed> {
    let total: u64 = expected.iter().sum();
    let mut read = vec![0u64; expected.len()];
    let mut next_offset = vec![-1i64; expected.len()];
    let (mut count, mut bad_size) = (0u64, 0u64);
    let mut poll_error: Option<String> = None;
    let mut progress = Instant::now();
    let mut last_record = start;
    let mut first_record = None;
    while count < total {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let p = m.partition() as usize;
                if p >= read.len() {
                    return Err(format!(
                        "record from partition {p} of a topic of {} partitions",
                        read.len()
                    ));
                }
                if m.offset() < next_offset[p] {
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
            Some(Err(e)) => poll_error = Some(e.to_string()),
            None => {}
        }
        if progress.elapsed() > STALL {
            let errors = consumer.context().0.lock().unwrap();
            return Err(format!(
                "stalled: {count} of {total} records read, none for {} s (per partition {read:?}, \
                 expected {expected:?}){}{}",
                STALL.as_secs(),
                poll_error.map_or_else(String::new, |e| format!("; last poll error: {e}")),
                client_errors(&errors)
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
    Ok(Consumed {
        records: count,
        secs: (last_record - start).as_secs_f64(),
        first_record_secs: first_record.map(|f| (f - start).as_secs_f64()),
        poll_error,
    })
}

/// How long partition `p`'s end stood still at most, in `samples` (time,
/// every partition's end) from `from` until it moved after `settled`.
pub fn standstill(samples: &[(Instant, Vec<i64>)], p: usize, from: Instant, settled: Instant) -> Duration {
    let moved = |pair: &[(Instant, Vec<i64>)]| pair[1].1[p] > pair[0].1[p];
    let mut last_move = samples
        .windows(2)
        .rfind(|pair| pair[1].0 <= from && moved(pair))
        .map(|pair| pair[1].0)
        .unwrap_or(from);
    let mut worst = Duration::ZERO;
    for pair in samples.windows(2).filter(|pair| pair[1].0 > from && moved(pair)) {
        let t = pair[1].0;
        worst = worst.max(t.duration_since(last_move));
        last_move = t;
        if t > settled {
            break;
        }
    }
    worst
}

/// Kafka's ends of every partition of `topic`.
pub fn ends(
    runtime: &tokio::runtime::Runtime,
    kafka: &strait_upstream::Cluster,
    topic: &str,
    n: i32,
) -> Option<Vec<i64>> {
    runtime.block_on(async {
        let mut ends = Vec::new();
        for p in 0..n {
            ends.push(
                strait_upstream::log::list_offset(kafka, topic, p, -1)
                    .await
                    .ok()?,
            );
        }
        Some(ends)
    })
}

/// Kafka's ProducerPerformance writing `records` records of `size` bytes
/// to `topic` through `bootstrap` at `rate` a second (-1: as fast as it
/// goes), linger.ms 5 and `props`: the records it sent and its records/s.
pub fn producer_performance(
    kafka: &support::kafka::Kafka,
    bootstrap: &str,
    topic: &str,
    (records, size, rate): (u64, u32, i64),
    props: &[&str],
) -> Res<(u64, f64)> {
    let bootstrap = format!("bootstrap.servers={bootstrap}");
    let (records, size, rate) = (records.to_string(), size.to_string(), rate.to_string());
    let mut args = vec![
        "--topic",
        topic,
        "--num-records",
        &records,
        "--record-size",
        &size,
        "--throughput",
        &rate,
        "--producer-props",
        &bootstrap,
        "linger.ms=5",
    ];
    args.extend_from_slice(props);
    let out = kafka.tool("org.apache.kafka.tools.ProducerPerformance", &args);
    // "200000 records sent, 51234.5 records/sec (50.03 MB/sec), ..."
    out.lines()
        .rev()
        .find_map(|l| {
            let (sent, rest) = l.split_once(" records sent, ")?;
            Some((sent.parse().ok()?, rest.split(' ').next()?.parse().ok()?))
        })
        .ok_or_else(|| format!("no summary in ProducerPerformance's output: {out}"))
}
