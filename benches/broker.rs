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

// What the benches share (process and CPU accounting, the librdkafka load
// generator, the report's cells), with the integration tests' harness.
#[path = "common/mod.rs"]
mod common;

use std::error::Error;
use std::fmt::Write as _;
use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::producer::{Producer, ThreadedProducer};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use common::{
    cell, env_u64, loadavg, payload, print_rows, send, Deliveries, Proc, Res, Stats, PARTITIONS,
    RECORD_BYTES, STALL,
};

type BenchResult<T> = Result<T, Box<dyn Error>>;

/// linger.ms of the throughput producer.
const LINGER_MS: u64 = 5;
/// Records sent (and not measured) before the latency run.
const LATENCY_WARMUP: u64 = 100;

fn main() -> BenchResult<()> {
    // `cargo bench` adds `--bench`; the only argument of ours is the dir.
    let dir_arg = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let knobs = Knobs {
        records: env_u64("BROKER_BENCH_RECORDS", 1_000_000)?.max(PARTITIONS as u64),
        latency_records: env_u64("BROKER_BENCH_LATENCY_RECORDS", 5_000)?.max(1),
        repeat: env_u64("BROKER_BENCH_REPEAT", 3)?.max(1) as usize,
        strait_config: std::env::var_os("BROKER_BENCH_STRAIT_CONFIG").map(PathBuf::from),
        strait_bin: common::strait_bin(),
        tansu_bin: common::tansu_bin(),
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
    let clk_tck = common::clock_ticks();

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
    let strait_logs = results
        .iter()
        .filter(|(k, _)| *k == Kind::Strait)
        .filter_map(|(_, r)| r.log.as_deref());
    common::print_flagged_lines("Strait logs", strait_logs);
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

fn print_facts(knobs: &Knobs, work: &Path) {
    let mem = fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:").map(|r| r.trim().to_owned()))
        .unwrap_or_else(|| "?".into());
    let tansu_version = common::tansu_version(&knobs.tansu_bin);
    println!("broker benchmark: Strait vs Tansu, same load generator, same machine");
    println!(
        "  machine: nproc {}, {}, MemTotal {mem}, load average {}",
        common::nproc(),
        common::cpu_model(),
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
        "  client:  rdkafka crate 0.39, librdkafka {}; work dir {}",
        common::librdkafka_version(),
        work.display()
    );
    println!(
        "  produce: {} records x {RECORD_BYTES} B (no key) round-robin over {PARTITIONS} partitions, one producer, \
         acks=1, linger.ms={LINGER_MS}, batch.size default, compression none; timed to the last ack",
        knobs.records
    );
    println!(
        "  consume: one consumer, all {PARTITIONS} partitions assigned from the beginning (no group), fetch defaults"
    );
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
    proc: Proc,
    port: u16,
    log: PathBuf,
}

impl Broker {
    fn start(kind: Kind, knobs: &Knobs, dir: &Path) -> Res<Broker> {
        let log = dir.join(format!("{}.log", kind.name()));
        let data = dir.join("data");
        if kind == Kind::Strait {
            fs::create_dir_all(&data).map_err(|e| format!("creating {}: {e}", data.display()))?;
        }
        let (proc, port) = common::start_server(kind.name(), &log, |port| match kind {
            Kind::Strait => {
                let mut c = Command::new(&knobs.strait_bin);
                c.arg("serve")
                    .args(["--listen", &format!("127.0.0.1:{port}")])
                    .arg("--data-dir")
                    .arg(&data)
                    .current_dir(dir);
                if let Some(config) = &knobs.strait_config {
                    c.arg("--config").arg(config);
                }
                c
            }
            Kind::Tansu => {
                let url = format!("tcp://127.0.0.1:{port}");
                let mut c = common::tansu_command(&knobs.tansu_bin, dir);
                c.arg("broker")
                    .args(["--listener-url", &url, "--advertised-listener-url", &url])
                    .args(["--storage-engine", "memory://tansu/"]);
                c
            }
        })?;
        Ok(Broker { proc, port, log })
    }

    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Peak resident memory, and what is resident now split into anonymous
    /// memory and file-backed pages (mmapped segments count as those).
    fn memory(&self) -> Option<String> {
        let status = fs::read_to_string(format!("/proc/{}/status", self.proc.pid())).ok()?;
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

    /// CPU counters now: the broker's, this process's, the machine's.
    fn sample(&self) -> CpuSample {
        CpuSample::take([self.proc.cpu_ticks()])
    }
}

// ---------------------------------------------------------------------------
// One run against one broker

/// CPU counters of the broker (the one process), this process and the
/// machine.
type CpuSample = common::CpuSample<1>;
/// CPU seconds of one phase: `procs[0]` is the broker's.
type CpuUse = common::CpuUse<1>;
/// Records per second and payload bytes per second of one phase.
type Throughput = common::Throughput<1>;

fn describe_cpu(cpu: &CpuUse) -> String {
    let f = |c: Option<f64>| c.map_or_else(|| "?".into(), |c| format!("{c:.1}"));
    format!(
        "cpu s: broker {}, client {}, other {}",
        f(cpu.procs[0]),
        f(cpu.client),
        f(cpu.other)
    )
}

#[derive(Debug, Clone, Copy)]
struct Latency {
    ms: Stats,
    cpu: CpuUse,
}

#[derive(Debug)]
struct RunResult {
    produce: Res<Throughput>,
    raw_produce: Res<Throughput>,
    raw_consume: Res<Throughput>,
    consume: Res<Throughput>,
    latency: Res<Latency>,
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
        let tp = |r: &Res<Throughput>| match r {
            Ok(t) => format!(
                "{:.0} rec/s {:.1} MB/s in {:.2} s{} ({})",
                t.records_per_sec(),
                t.mb_per_sec(),
                t.secs,
                t.first_record_secs
                    .map_or_else(String::new, |f| format!(", first record after {f:.2} s")),
                describe_cpu(&t.cpu)
            ),
            Err(e) => format!("n/a: {e}"),
        };
        let lat = match &self.latency {
            Ok(l) => format!(
                "p50 {:.3} ms, p99 {:.3} ms, max {:.2} ms ({})",
                l.ms.p50,
                l.ms.p99,
                l.ms.max,
                describe_cpu(&l.cpu)
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
                let _ = write!(s, "\n{}", common::log_excerpt(kind.name(), log, 0, 15, 20));
            }
        }
        s
    }
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

    let before = broker.sample();
    let produced = produce_throughput(&bootstrap, &topic, knobs.records);
    let after = broker.sample();
    result.produce = match &produced {
        Ok((t, _)) => Ok(Throughput {
            cpu: before.until(&after, clk_tck),
            ..*t
        }),
        Err(e) => Err(with_exit(&mut broker, e.clone())),
    };

    result.consume = match &produced {
        Ok((_, per_partition)) => {
            let before = broker.sample();
            let consumed = consume_throughput(&bootstrap, &topic, per_partition);
            let after = broker.sample();
            consumed
                .map(|t| Throughput {
                    cpu: before.until(&after, clk_tck),
                    ..t
                })
                .map_err(|e| with_exit(&mut broker, e))
        }
        Err(_) => Err("skipped: produce failed".into()),
    };

    let before = broker.sample();
    result.latency = produce_latency(&bootstrap, &topic, knobs.latency_records)
        .map(|l| Latency {
            cpu: before.until(&broker.sample(), clk_tck),
            ..l
        })
        .map_err(|e| with_exit(&mut broker, e));

    let raw_topic = format!("{topic}-raw");
    result.raw_produce = create_topic(&bootstrap, &raw_topic)
        .and_then(|()| {
            let before = broker.sample();
            raw_produce_throughput(&bootstrap, &raw_topic, knobs.records).map(|t| Throughput {
                cpu: before.until(&broker.sample(), clk_tck),
                ..t
            })
        })
        .map_err(|e| with_exit(&mut broker, e));
    result.raw_consume = match &result.raw_produce {
        Ok(produced) => {
            let before = broker.sample();
            let per_partition = produced.records / PARTITIONS as u64;
            raw_consume_throughput(&bootstrap, &raw_topic, per_partition)
                .map(|t| Throughput {
                    cpu: before.until(&broker.sample(), clk_tck),
                    ..t
                })
                .map_err(|e| with_exit(&mut broker, e))
        }
        Err(_) => Err("skipped: raw produce failed".into()),
    };

    result.memory = broker.memory();
    if let Some(status) = broker.proc.exited() {
        result
            .notes
            .push(format!("the broker exited during the run ({status})"));
    } else if kind == Kind::Strait {
        // Tansu is simply killed; Strait shows its graceful shutdown.
        match broker.proc.stop() {
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
    match broker.proc.exited() {
        Some(status) => format!("{e} (broker exited: {status})"),
        None => e,
    }
}

// ---------------------------------------------------------------------------
// The load generator

fn create_topic(bootstrap: &str, topic: &str) -> Res<()> {
    common::create_topic(bootstrap, topic, PARTITIONS, "strait-bench-admin")
}

fn producer(bootstrap: &str, linger_ms: u64, keep_latencies: bool) -> Res<ThreadedProducer<Deliveries>> {
    common::producer_config(bootstrap, "strait-bench-producer", "1", linger_ms)
        .create_with_context(Deliveries::new(Instant::now(), keep_latencies, PARTITIONS))
        .map_err(|e| format!("producer: {e}"))
}

/// Produces `records` records; returns the throughput and how many records
/// each partition took.
fn produce_throughput(bootstrap: &str, topic: &str, records: u64) -> Res<(Throughput, Vec<u64>)> {
    let producer = producer(bootstrap, LINGER_MS, false)?;
    // Connected and knowing the leaders before the clock starts.
    producer
        .client()
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| format!("producer metadata: {e}"))?;
    let (secs, per_partition) = common::produce_records(&producer, topic, records, PARTITIONS)?;
    Ok((Throughput::new(records, secs), per_partition))
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
fn raw_produce_throughput(bootstrap: &str, topic: &str, records: u64) -> Res<Throughput> {
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
    Ok(Throughput::new(acknowledged * per_request, secs))
}

/// The raw phase's request frame (length prefix included), correlation id 0.
fn raw_produce_frame(topic: &str) -> Result<Vec<u8>, String> {
    let value = payload();
    let values: Vec<&[u8]> = (0..RAW_BATCH_RECORDS).map(|_| &value[..]).collect();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let batch = bytes::Bytes::from(strait_batch::build::batch(now_ms, &values));
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
fn raw_consume_throughput(bootstrap: &str, topic: &str, per_partition: u64) -> Res<Throughput> {
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
    Ok(Throughput::new(records, secs))
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

/// Reads every partition from the beginning until `expected[p]` records of
/// each partition `p` were read.
fn consume_throughput(bootstrap: &str, topic: &str, expected: &[u64]) -> Res<Throughput> {
    let consumer = common::consumer(bootstrap, topic, "strait-bench-consumer")?;
    // Connect and learn the leaders first: assigned before it knows them,
    // librdkafka retries its offset lookup only after 500 ms, the same
    // fixed delay on every broker.
    consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| format!("consumer metadata: {e}"))?;
    let start = Instant::now();
    common::assign_all(&consumer, topic, PARTITIONS)?;
    let read = common::read_all(&consumer, start, expected)?;
    Ok(Throughput {
        first_record_secs: read.first_record_secs,
        ..Throughput::new(read.records, read.secs)
    })
}

/// Sends records one at a time, each after the previous one's delivery.
fn produce_latency(bootstrap: &str, topic: &str, records: u64) -> Res<Latency> {
    let producer = producer(bootstrap, 0, true)?;
    let value = payload();
    let deliveries = producer.context();
    for i in 0..LATENCY_WARMUP + records {
        send(
            &producer,
            topic,
            &value,
            (i % PARTITIONS as u64) as i32,
            deliveries.stamp(),
        )?;
        deliveries.wait_for(i + 1)?;
        if i + 1 == LATENCY_WARMUP {
            deliveries.state.lock().unwrap().latencies.clear();
        }
    }
    let st = deliveries.state.lock().unwrap();
    let ms = st.latencies.iter().map(|(_, l)| *l as f64 / 1e6).collect();
    Ok(Latency {
        ms: Stats::of(ms).ok_or("no latencies recorded")?,
        cpu: CpuUse::default(),
    })
}

// ---------------------------------------------------------------------------
// Report

/// A phase's value in each run of `kind`.
fn values<T>(
    results: &[(Kind, RunResult)],
    kind: Kind,
    phase: impl Fn(&RunResult) -> &Res<T>,
    metric: impl Fn(&T) -> f64,
) -> Vec<Res<f64>> {
    results
        .iter()
        .filter(|(k, _)| *k == kind)
        .map(|(_, r)| phase(r).as_ref().map(&metric).map_err(Clone::clone))
        .collect()
}

fn print_table(knobs: &Knobs, results: &[(Kind, RunResult)]) {
    // Name, whether higher is better, the value in each run, its format.
    type Row = (
        &'static str,
        bool,
        fn(&[(Kind, RunResult)], Kind) -> Vec<Res<f64>>,
        fn(f64) -> String,
    );
    let rate = |v: f64| format!("{v:.0}");
    let mb = |v: f64| format!("{v:.1}");
    let ms = |v: f64| format!("{v:.3}");
    let table: [Row; 11] = [
        (
            "produce records/s",
            true,
            |r, k| values(r, k, |x| &x.produce, Throughput::records_per_sec),
            rate,
        ),
        (
            "produce MB/s",
            true,
            |r, k| values(r, k, |x| &x.produce, Throughput::mb_per_sec),
            mb,
        ),
        (
            "consume records/s",
            true,
            |r, k| values(r, k, |x| &x.consume, Throughput::records_per_sec),
            rate,
        ),
        (
            "consume MB/s",
            true,
            |r, k| values(r, k, |x| &x.consume, Throughput::mb_per_sec),
            mb,
        ),
        (
            "raw produce records/s",
            true,
            |r, k| values(r, k, |x| &x.raw_produce, Throughput::records_per_sec),
            rate,
        ),
        (
            "raw produce MB/s",
            true,
            |r, k| values(r, k, |x| &x.raw_produce, Throughput::mb_per_sec),
            mb,
        ),
        (
            "raw consume records/s",
            true,
            |r, k| values(r, k, |x| &x.raw_consume, Throughput::records_per_sec),
            rate,
        ),
        (
            "raw consume MB/s",
            true,
            |r, k| values(r, k, |x| &x.raw_consume, Throughput::mb_per_sec),
            mb,
        ),
        (
            "produce latency p50 ms",
            false,
            |r, k| values(r, k, |x| &x.latency, |l| l.ms.p50),
            ms,
        ),
        (
            "produce latency p99 ms",
            false,
            |r, k| values(r, k, |x| &x.latency, |l| l.ms.p99),
            ms,
        ),
        (
            "produce latency max ms",
            false,
            |r, k| values(r, k, |x| &x.latency, |l| l.ms.max),
            ms,
        ),
    ];
    let mut reasons = Vec::new();
    let mut rows = Vec::new();
    for (name, higher_is_better, metric, format) in table {
        let s = cell(
            Kind::Strait.name(),
            metric(results, Kind::Strait),
            &format,
            &mut reasons,
        );
        let t = cell(
            Kind::Tansu.name(),
            metric(results, Kind::Tansu),
            &format,
            &mut reasons,
        );
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
        rows.push(vec![name.to_owned(), s.text, t.text, ratio]);
    }
    println!(
        "median of {} runs per broker; {} x 1 KiB records, {PARTITIONS} partitions, acks=1; \
         latency: {} sequential records",
        knobs.repeat, knobs.records, knobs.latency_records
    );
    print_rows(&["metric", "Strait", "Tansu", "Strait/Tansu"], &rows);
    println!("throughput: ratio > 1 is better for Strait; latency: ratio < 1 is better for Strait");
    for (i, r) in reasons.iter().enumerate() {
        println!("[{}] {r}", i + 1);
    }
}
