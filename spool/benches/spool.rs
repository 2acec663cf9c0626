//! The spool benchmark: append, read and recovery speed of a partition log,
//! each set against plain file I/O measured in the same directory in the
//! same run, so the ratios say what the spool costs on top of the disk.
//!
//! Run it with `scripts/bench-spool [DIR]`, which calls
//! `cargo bench -p strait-spool --bench spool -- WORKDIR`. The work
//! directory must be on the disk under test; every case writes its files
//! into a subdirectory of it and removes them when done. Without an
//! argument, a directory under `target/bench-spool` is used and removed.
//!
//! Environment:
//! - `SPOOL_BENCH_MB` (default 512): bytes written by each append case.
//! - `SPOOL_BENCH_RECOVERY_MB` (default 1024): size of the crashed
//!   partition that recovery scans.
//! - `SPOOL_BENCH_APPENDERS` (default 8): concurrent appenders of the
//!   group-commit case.
//! - `SPOOL_BENCH_REPEAT` (default 3): runs of each case; the median is
//!   reported, with the spread of the runs ((slowest - fastest) / median).
//!
//! The cases:
//! 1. Raw baselines: 16 KiB `write`s then one `fdatasync`, and 16 KiB
//!    `write`s each followed by `fdatasync`.
//! 2. Appends of one pre-built 16 KiB batch (16 records of ~1 KiB), over and
//!    over (the spool rewrites the offsets), under each durability policy,
//!    timed until the data is durable (`close`, plus an `fdatasync` of every
//!    segment file: see [`close_durably`]). Segments are 256 MiB, so rolls
//!    are part of the run. Plus `every_batch` through an `IoPool`
//!    with several appenders, to show group commit.
//! 3. Sequential reads from the page cache, touching every byte, against
//!    `pread` of the raw file.
//! 4. Crash recovery of a partition that was never closed, with a torn batch
//!    after its data, with a cold and a warm page cache; and a clean reopen.
//!    Each against `pread` of the same segment data, equally cold or warm.
//!
//! Write cases take turns round after round, and every run writes fresh
//! files and deletes them afterwards. Before measuring, the run touches
//! fresh memory once (see [`warm_up`]).

use std::error::Error;
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use strait_batch::{self as batch, build, BatchHeader, HEADER_LEN};
use strait_spool::log::RECOVERY_POINT_FILE;
use strait_spool::pool::{block_on, PoolOptions};
use strait_spool::{Durability, IoPool, LogConfig, Partition, RecoveryReport};

type BenchResult<T> = Result<T, Box<dyn Error>>;

const MIB: u64 = 1 << 20;
/// Size of every batch appended, and of every raw write.
const BATCH_BYTES: usize = 16 * 1024;
/// Records per batch (so each record is about 1 KiB).
const RECORDS_PER_BATCH: usize = 16;
/// Framing bytes of one record as `build::batch` encodes a ~1 KiB value:
/// length, attributes, timestamp delta, offset delta, null key, value
/// length (2 bytes), header count.
const RECORD_FRAMING: usize = 9;
/// Segment size of the append cases: small enough that a run rolls.
const APPEND_SEGMENT_BYTES: u64 = 256 * MIB;
/// Bytes asked for by each read, as a consumer's fetch would.
const READ_BYTES: usize = 1 << 20;
/// Flush period of the `interval` policy.
const INTERVAL: Duration = Duration::from_secs(1);

fn main() -> BenchResult<()> {
    // `cargo bench` adds `--bench`; the only argument of ours is the dir.
    let dir_arg = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let total_mib = env_u64("SPOOL_BENCH_MB", 512)?;
    let recovery_mib = env_u64("SPOOL_BENCH_RECOVERY_MB", 1024)?;
    let appenders = env_u64("SPOOL_BENCH_APPENDERS", 8)?.max(1) as usize;
    let repeat = env_u64("SPOOL_BENCH_REPEAT", 3)?.max(1) as usize;

    let work = WorkDir::new(dir_arg)?;
    let batch = build_batch()?;
    let load = Load::new(&batch, total_mib)?;
    let recovery_load = Load::new(&batch, recovery_mib)?;
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "spool benchmark: {total_mib} MiB per run, {RECORDS_PER_BATCH} records of ~1 KiB per 16 KiB batch, \
         {} MiB segments, median of {repeat} runs, dir {} ({cores} cores)",
        APPEND_SEGMENT_BYTES / MIB,
        work.path.display()
    );
    warm_up(&work, &load, 2 * load.total_bytes() + recovery_load.total_bytes())?;

    // 1 + 2: writes. Each case is compared with the raw case listed before
    // it. The cases take turns (round after round), so a burst of outside
    // disk activity hits one run of several cases, not every run of one.
    let housekeeper = IoPool::new(PoolOptions::default());
    let interval = Durability::Interval {
        every: INTERVAL,
        bytes: None,
    };
    let load = &load;
    let mut cases = vec![
        WriteCase::raw(
            "raw write + fdatasync",
            "16 KiB writes, one fdatasync at the end",
            Box::new(|dir| raw_write(&dir.join("raw.dat"), load, false).map(WriteRun::raw)),
        ),
        WriteCase::spool(
            "append os",
            "no syncs until close()",
            // The partition is dropped (already closed) when the run ends.
            Box::new(|dir| append_direct(dir, load, Durability::Os, None).map(|(run, _)| run)),
        ),
        WriteCase::spool(
            "append interval 1s",
            "IoPool housekeeper syncs",
            Box::new(|dir| append_direct(dir, load, interval, Some(&housekeeper)).map(|(run, _)| run)),
        ),
        WriteCase::raw(
            "raw write + fdatasync each 16K",
            "baseline of every_batch",
            Box::new(|dir| raw_write(&dir.join("raw.dat"), load, true).map(WriteRun::raw)),
        ),
        WriteCase::spool(
            "append every_batch",
            "one appender",
            Box::new(|dir| append_direct(dir, load, Durability::EveryBatch, None).map(|(run, _)| run)),
        ),
        WriteCase::spool(
            &format!("append every_batch, {appenders} thr"),
            &format!("{appenders} appenders via IoPool, group commit"),
            Box::new(|dir| append_pool(dir, load, appenders)),
        ),
    ];
    for round in 0..repeat {
        eprintln!("write cases, round {} of {repeat}", round + 1);
        for case in &mut cases {
            let dir = work.subdir("write")?;
            let run = (case.run)(&dir)?;
            remove_dir(&dir)?;
            case.runs.push(run);
        }
    }
    print_row("case", "result", "vs raw", "spread", "notes");
    let mut raw_rate = 0.0;
    for case in cases {
        let measured = median_of(case.runs);
        let rate = load.rate(measured.run.elapsed);
        let mut note = case.note;
        if case.is_raw {
            raw_rate = rate;
        } else {
            let segments = measured.run.segments;
            note += &format!("; {segments} segment{}", if segments == 1 { "" } else { "s" });
        }
        if measured.run.extra_sync >= Duration::from_millis(5) {
            note += &format!(
                "; {} ms to sync what close() left",
                measured.run.extra_sync.as_millis()
            );
        }
        let vs_raw = ratio(rate, raw_rate);
        print_row(&case.name, &mb_s(rate), &vs_raw, &measured.spread(), &note);
    }

    // Every run unregistered its partition: this only stops the threads.
    housekeeper.shutdown()?;

    // 3: sequential reads from the page cache of a raw file and a partition
    // holding the same bytes (a first pass warms the cache).
    let dir = work.subdir("read")?;
    let len = load.total_bytes();
    let raw_file = dir.join("raw.dat");
    raw_write(&raw_file, load, false)?;
    read_raw(&raw_file, len)?;
    let raw_read = median(repeat, || read_raw(&raw_file, len))?;
    let raw_read_rate = gb_per_s(len, raw_read.run);
    let note = "page cache, every byte summed";
    print_row(
        "raw pread 1 MiB",
        &gb_s(raw_read_rate),
        "1.00",
        &raw_read.spread(),
        note,
    );
    let (_, partition) = append_direct(&dir.join("partition"), load, Durability::Os, None)?;
    read_partition(&partition)?;
    let read = median(repeat, || read_partition(&partition))?;
    let read_rate = gb_per_s(len, read.run);
    let note = "Partition::read, page cache; target >= 2 GB/s";
    print_row(
        "read 1 MiB",
        &gb_s(read_rate),
        &ratio(read_rate, raw_read_rate),
        &read.spread(),
        note,
    );
    drop(partition);
    remove_dir(&dir)?;

    // 4: recovery.
    recovery(&work.subdir("recovery")?, &recovery_load, repeat)
}

/// Runs a write case once in the given (fresh, later removed) directory.
type RunFn<'a> = Box<dyn FnMut(&Path) -> BenchResult<WriteRun> + 'a>;

/// A row of the write table and its runs.
struct WriteCase<'a> {
    name: String,
    note: String,
    /// A raw baseline, which the spool cases after it are compared with.
    is_raw: bool,
    run: RunFn<'a>,
    runs: Vec<WriteRun>,
}

impl<'a> WriteCase<'a> {
    fn raw(name: &str, note: &str, run: RunFn<'a>) -> Self {
        WriteCase {
            name: name.to_string(),
            note: note.to_string(),
            is_raw: true,
            run,
            runs: Vec::new(),
        }
    }

    fn spool(name: &str, note: &str, run: RunFn<'a>) -> Self {
        WriteCase {
            is_raw: false,
            ..WriteCase::raw(name, note, run)
        }
    }
}

/// Gets the machine into a steady state before anything is measured:
/// touches `memory` bytes of fresh memory once, then writes and deletes one
/// raw file. On a virtual machine the first touch of guest memory can cost
/// more than the disk write (seen here: 6 GiB took 13 s the first time,
/// 3.6 s the second), and the page cache of later cases would pay it.
fn warm_up(work: &WorkDir, load: &Load, memory: u64) -> BenchResult<()> {
    let mut scratch: Vec<u8> = Vec::new();
    scratch.resize(memory as usize, 1);
    std::hint::black_box(&scratch);
    drop(scratch);
    let path = work.path.join("warm-up.dat");
    raw_write(&path, load, false)?;
    fs::remove_file(&path)?;
    Ok(())
}

/// The median run of a case, and how far apart the runs were.
struct Measured<T> {
    run: T,
    /// (slowest - fastest) / median.
    spread: f64,
    /// Time of the slowest run.
    slowest: Duration,
}

impl<T> Measured<T> {
    fn spread(&self) -> String {
        format!("{:.0}%", self.spread * 100.0)
    }
}

/// Runs a case `repeat` times in a row; see [`median_of`].
fn median<T: Timed>(repeat: usize, mut case: impl FnMut() -> BenchResult<T>) -> BenchResult<Measured<T>> {
    let runs = (0..repeat).map(|_| case()).collect::<BenchResult<Vec<T>>>()?;
    Ok(median_of(runs))
}

/// The run of median time. The machine may be shared with other work; the
/// median shrugs off a disturbed run without picking the luckiest one.
fn median_of<T: Timed>(mut runs: Vec<T>) -> Measured<T> {
    assert!(!runs.is_empty(), "a case runs at least once");
    runs.sort_by_key(T::time);
    let fastest = runs[0].time();
    let slowest = runs[runs.len() - 1].time();
    let run = runs.swap_remove(runs.len() / 2);
    let spread = (slowest - fastest).as_secs_f64() / run.time().as_secs_f64();
    Measured { run, spread, slowest }
}

/// Something with a measured time.
trait Timed {
    fn time(&self) -> Duration;
}

impl Timed for Duration {
    fn time(&self) -> Duration {
        *self
    }
}

// ---------------------------------------------------------------------------
// The workload

/// One batch appended `batches` times.
struct Load<'a> {
    batch: &'a [u8],
    batches: u64,
}

impl<'a> Load<'a> {
    fn new(batch: &'a [u8], mib: u64) -> BenchResult<Load<'a>> {
        let batches = mib * MIB / batch.len() as u64;
        if batches == 0 {
            return Err(format!("{mib} MiB is less than one batch").into());
        }
        Ok(Load { batch, batches })
    }

    fn total_bytes(&self) -> u64 {
        self.batches * self.batch.len() as u64
    }

    fn records(&self) -> u64 {
        self.batches * RECORDS_PER_BATCH as u64
    }

    /// MB/s (10^6 bytes) of writing the whole load in `elapsed`.
    fn rate(&self, elapsed: Duration) -> f64 {
        self.total_bytes() as f64 / 1e6 / elapsed.as_secs_f64()
    }
}

/// A valid batch of exactly [`BATCH_BYTES`]: 16 records of about 1 KiB
/// (the last value a few bytes longer to fill the batch exactly).
fn build_batch() -> BenchResult<Vec<u8>> {
    let value_len = (BATCH_BYTES - HEADER_LEN) / RECORDS_PER_BATCH - RECORD_FRAMING;
    let mut values: Vec<Vec<u8>> = (0..RECORDS_PER_BATCH)
        .map(|i| (0..value_len).map(|j| (i * 31 + j * 7) as u8).collect())
        .collect();
    let short = BATCH_BYTES - build_with(&values).len();
    if let Some(last) = values.last_mut() {
        last.resize(value_len + short, b'x');
    }
    let batch = build_with(&values);
    if batch.len() != BATCH_BYTES {
        return Err(format!("built a {}-byte batch, wanted {BATCH_BYTES}", batch.len()).into());
    }
    Ok(batch)
}

fn build_with(values: &[Vec<u8>]) -> Vec<u8> {
    let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    build::batch(now_ms(), &refs)
}

fn log_config(durability: Durability, segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        durability,
        retention_age: None,
        ..LogConfig::default()
    }
}

// ---------------------------------------------------------------------------
// Appends

/// Writes the load to a new file in 16 KiB chunks with plain `write`, then
/// `fdatasync`s it; with `sync_each`, after every chunk too.
fn raw_write(path: &Path, load: &Load, sync_each: bool) -> BenchResult<Duration> {
    let mut file = File::create(path)?;
    let start = Instant::now();
    for _ in 0..load.batches {
        file.write_all(load.batch)?;
        if sync_each {
            file.sync_data()?;
        }
    }
    file.sync_data()?;
    Ok(start.elapsed())
}

/// Appends the load from this thread, one batch per `append` call, then
/// closes the partition. Timed until everything is on disk, whatever the
/// policy (see [`close_durably`]). With a pool, the partition is registered
/// with its housekeeper meanwhile (the `interval` policy's background syncs).
fn append_direct(
    dir: &Path,
    load: &Load,
    durability: Durability,
    housekeeper: Option<&IoPool>,
) -> BenchResult<(WriteRun, Partition)> {
    let partition = Partition::open(dir, log_config(durability, APPEND_SEGMENT_BYTES))?;
    if let Some(pool) = housekeeper {
        pool.register(&partition);
    }
    let start = Instant::now();
    for _ in 0..load.batches {
        partition.append(load.batch)?;
    }
    if let Some(pool) = housekeeper {
        pool.unregister(&partition);
    }
    let extra_sync = close_durably(&partition)?;
    let elapsed = start.elapsed();
    check_appended(&partition, load)?;
    let run = WriteRun {
        elapsed,
        extra_sync,
        segments: partition.segment_count(),
    };
    Ok((run, partition))
}

/// Appends the load under `every_batch` from `appenders` threads at once,
/// each submitting one batch to an [`IoPool`] and waiting for it before the
/// next (as producers with one request in flight do). The pool's writer
/// commits whatever is queued with one `fdatasync`.
fn append_pool(dir: &Path, load: &Load, appenders: usize) -> BenchResult<WriteRun> {
    let partition = Partition::open(dir, log_config(Durability::EveryBatch, APPEND_SEGMENT_BYTES))?;
    let pool = IoPool::new(PoolOptions::default());
    let batch = Bytes::copy_from_slice(load.batch);
    let start = Instant::now();
    let failures: Vec<String> = thread::scope(|scope| {
        let handles: Vec<_> = (0..appenders as u64)
            .map(|i| {
                // Spread the batches evenly; the first ones take the remainder.
                let share = load.batches / appenders as u64 + u64::from(i < load.batches % appenders as u64);
                let (pool, partition, batch) = (&pool, &partition, batch.clone());
                scope.spawn(move || -> Result<(), String> {
                    for _ in 0..share {
                        block_on(pool.append(partition, batch.clone())).map_err(|e| e.to_string())?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| match h.join() {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(_) => Some("an appender thread panicked".to_string()),
            })
            .collect()
    });
    if let Some(first) = failures.first() {
        return Err(format!("pool append failed: {first}").into());
    }
    let extra_sync = close_durably(&partition)?;
    let elapsed = start.elapsed();
    drop(pool);
    check_appended(&partition, load)?;
    Ok(WriteRun {
        elapsed,
        extra_sync,
        segments: partition.segment_count(),
    })
}

/// One timed run of a write case.
struct WriteRun {
    /// From the first write until everything is durable.
    elapsed: Duration,
    /// Part of `elapsed` spent syncing segments that `close` left unsynced.
    extra_sync: Duration,
    /// Segments at the end (spool cases).
    segments: usize,
}

impl WriteRun {
    fn raw(elapsed: Duration) -> WriteRun {
        WriteRun {
            elapsed,
            extra_sync: Duration::ZERO,
            segments: 0,
        }
    }
}

impl Timed for WriteRun {
    fn time(&self) -> Duration {
        self.elapsed
    }
}

/// Closes the partition, then `fdatasync`s every segment file. `close` syncs
/// only the active segment, and under `os` a roll does not sync the segment
/// it seals, so without this a rolled segment may still be only in the page
/// cache. Returns the time of those extra syncs (near zero where the data is
/// already on disk).
fn close_durably(partition: &Partition) -> BenchResult<Duration> {
    partition.close()?;
    let start = Instant::now();
    for segment in segment_logs(partition.dir())? {
        File::open(&segment)?.sync_data()?;
    }
    Ok(start.elapsed())
}

fn check_appended(partition: &Partition, load: &Load) -> BenchResult<()> {
    if partition.high_watermark() != load.records() || partition.size_bytes() != load.total_bytes() {
        return Err(format!(
            "partition holds {} records in {} bytes, expected {} in {}",
            partition.high_watermark(),
            partition.size_bytes(),
            load.records(),
            load.total_bytes()
        )
        .into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Reads

/// Reads `len` bytes of the raw file with `pread` into a 1 MiB buffer,
/// summing every byte.
fn read_raw(path: &Path, len: u64) -> BenchResult<Duration> {
    let file = File::open(path)?;
    let mut buf = vec![0u8; READ_BYTES];
    let mut sum = 0u64;
    let mut pos = 0u64;
    let start = Instant::now();
    while pos < len {
        let want = (len - pos).min(READ_BYTES as u64) as usize;
        let n = file.read_at(&mut buf[..want], pos)?;
        if n == 0 {
            return Err(format!("{} ended at {pos} of {len} bytes", path.display()).into());
        }
        sum = sum.wrapping_add(checksum(&buf[..n]));
        pos += n as u64;
    }
    std::hint::black_box(sum);
    Ok(start.elapsed())
}

/// Reads the whole partition from its start with `Partition::read` (1 MiB
/// per call, zero-copy over the mapped segments), summing every byte.
fn read_partition(partition: &Partition) -> BenchResult<Duration> {
    let mut offset = partition.log_start_offset();
    let mut bytes = 0u64;
    let mut sum = 0u64;
    let start = Instant::now();
    while offset < partition.high_watermark() {
        let result = partition.read(offset, READ_BYTES)?;
        if result.records.is_empty() {
            return Err(format!("read at offset {offset} returned nothing").into());
        }
        sum = sum.wrapping_add(checksum(&result.records));
        offset = next_offset(&result.records)?;
        bytes += result.records.len() as u64;
    }
    let elapsed = start.elapsed();
    std::hint::black_box(sum);
    if bytes != partition.size_bytes() {
        return Err(format!("read {bytes} bytes of {}", partition.size_bytes()).into());
    }
    Ok(elapsed)
}

/// Offset after the last of the whole batches in `records` (headers only,
/// no CRC: the read path does not check it either).
fn next_offset(records: &[u8]) -> BenchResult<u64> {
    let mut pos = 0;
    let mut next = None;
    while pos < records.len() {
        let header = BatchHeader::parse(&records[pos..])?;
        next = Some(header.last_offset() as u64 + 1);
        pos += header.size();
    }
    next.ok_or_else(|| "empty read".into())
}

/// Sum of the bytes as little-endian u64 words: touches every byte, and
/// `black_box` on the result keeps the compiler from skipping the work.
fn checksum(bytes: &[u8]) -> u64 {
    let words = bytes.chunks_exact(8);
    let tail: u64 = words.remainder().iter().map(|&b| u64::from(b)).sum();
    words
        .map(|w| u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
        .fold(tail, u64::wrapping_add)
}

// ---------------------------------------------------------------------------
// Recovery

/// Builds a one-segment partition under the `os` policy, "crashes" it
/// (dropped without `close`, no recovery point, half a batch written after
/// the data as a torn write leaves it), and times `open_with_report` with a
/// cold page cache, then with a warm one; then a clean reopen after `close`.
/// Each is compared with reading the segment's data with `pread` under the
/// same cache conditions (the ratio is raw time / spool time).
fn recovery(dir: &Path, load: &Load, repeat: usize) -> BenchResult<()> {
    // One segment with headroom, so the torn tail goes at size_bytes().
    let segment_bytes = load.total_bytes() + 64 * MIB;
    if segment_bytes > u64::from(u32::MAX) {
        return Err("SPOOL_BENCH_RECOVERY_MB must stay below 4032 (one segment of at most 4 GiB)".into());
    }
    let config = log_config(Durability::Os, segment_bytes);
    let partition = Partition::open(dir, config.clone())?;
    for _ in 0..load.batches {
        partition.append(load.batch)?;
    }
    let records = partition.high_watermark();
    let data_end = partition.size_bytes();
    if partition.segment_count() != 1 {
        return Err(format!("expected one segment, got {}", partition.segment_count()).into());
    }
    drop(partition);

    // The torn write: the first half of the next batch, offset stamped.
    let mut torn = load.batch[..load.batch.len() / 2].to_vec();
    batch::stamp(&mut torn, records as i64, 0);
    let mib = load.total_bytes() / MIB;
    let expect = Expect { records, data_end };

    // Cold: each round evicts the segment from the page cache before
    // recovery and again before a raw read of its data (the baseline).
    // Recovery goes first: on a virtual machine, the host may cache what the
    // first read brought in, so only the very first run may be truly cold;
    // the slowest runs are named too.
    let mut raw_cold = Vec::new();
    let mut cold = Vec::new();
    for _ in 0..repeat {
        let segment = crash(dir, data_end, &torn)?;
        evict_from_page_cache(&segment)?;
        cold.push(reopen(dir, &config)?);
        evict_from_page_cache(&segment)?;
        raw_cold.push(read_raw(&segment, data_end)?);
    }
    let (raw_cold, cold) = (median_of(raw_cold), median_of(cold));
    let note = format!(
        "the segment's data, 1 MiB preads; slowest {}",
        secs(raw_cold.slowest)
    );
    let name = format!("raw pread {mib} MiB, cold");
    print_row(&name, &secs(raw_cold.run), "1.00", &raw_cold.spread(), &note);
    let note = format!(
        "{}; slowest {}; target < 2 s",
        expect.check(&cold.run, true),
        secs(cold.slowest)
    );
    let name = format!("recovery {mib} MiB, cold");
    let vs_raw = ratio(raw_cold.run.as_secs_f64(), cold.run.elapsed.as_secs_f64());
    print_row(&name, &secs(cold.run.elapsed), &vs_raw, &cold.spread(), &note);

    // Warm: the same with the segment in the page cache.
    let mut raw_warm = Vec::new();
    let mut warm = Vec::new();
    for _ in 0..repeat {
        let segment = crash(dir, data_end, &torn)?;
        raw_warm.push(read_raw(&segment, data_end)?);
        warm.push(reopen(dir, &config)?);
    }
    let (raw_warm, warm) = (median_of(raw_warm), median_of(warm));
    let name = format!("raw pread {mib} MiB, warm");
    print_row(
        &name,
        &secs(raw_warm.run),
        "1.00",
        &raw_warm.spread(),
        "page cache",
    );
    let note = format!(
        "{}; one segment of {} MiB",
        expect.check(&warm.run, true),
        segment_bytes / MIB
    );
    let name = format!("recovery {mib} MiB, warm");
    let raw_secs = raw_warm.run.as_secs_f64();
    let vs_raw = ratio(raw_secs, warm.run.elapsed.as_secs_f64());
    print_row(&name, &secs(warm.run.elapsed), &vs_raw, &warm.spread(), &note);

    // The last reopen closed the partition: recovery point persisted, no
    // torn tail.
    let clean = median(repeat, || reopen(dir, &config))?;
    let scanned = clean.run.report.segments_scanned;
    let note = format!(
        "{}; {scanned} segment(s) scanned",
        expect.check(&clean.run, false)
    );
    let vs_raw = ratio(raw_secs, clean.run.elapsed.as_secs_f64());
    print_row(
        "reopen after close",
        &secs(clean.run.elapsed),
        &vs_raw,
        &clean.spread(),
        &note,
    );
    remove_dir(dir)
}

/// A timed `open_with_report`; the partition is closed again right after.
struct Reopen {
    elapsed: Duration,
    report: RecoveryReport,
    high_watermark: u64,
}

impl Timed for Reopen {
    fn time(&self) -> Duration {
        self.elapsed
    }
}

/// Opens the partition in `dir`, timed, then closes it (syncing and
/// persisting the recovery point, which [`crash`] removes again).
fn reopen(dir: &Path, config: &LogConfig) -> BenchResult<Reopen> {
    let start = Instant::now();
    let (partition, report) = Partition::open_with_report(dir, config.clone())?;
    let elapsed = start.elapsed();
    let high_watermark = partition.high_watermark();
    partition.close()?;
    Ok(Reopen {
        elapsed,
        report,
        high_watermark,
    })
}

/// What a reopen of the recovery partition must find.
struct Expect {
    records: u64,
    data_end: u64,
}

impl Expect {
    /// Says whether the reopen cut the torn tail (if there was one) at the
    /// end of the data and kept every appended record; loudly if not.
    fn check(&self, reopen: &Reopen, torn: bool) -> String {
        let truncated = match (&reopen.report.truncated, torn) {
            (Some((_, position, _)), true) if *position == self.data_end => "truncated torn tail",
            (None, false) => "nothing truncated",
            _ => "UNEXPECTED TRUNCATION",
        };
        let hw = reopen.high_watermark;
        if hw == self.records {
            format!("{truncated}, hw {hw} = appended")
        } else {
            format!(
                "{truncated}, HW {hw} != APPENDED {}: {:?}",
                self.records, reopen.report
            )
        }
    }
}

/// Leaves the partition in `dir` as a crash would: no recovery point, and
/// `torn` written at `data_end` of the active (last) segment. Returns the
/// segment's path.
fn crash(dir: &Path, data_end: u64, torn: &[u8]) -> BenchResult<PathBuf> {
    match fs::remove_file(dir.join(RECOVERY_POINT_FILE)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    let segment = segment_logs(dir)?.pop().ok_or("no segment file")?;
    OpenOptions::new()
        .write(true)
        .open(&segment)?
        .write_all_at(torn, data_end)?;
    Ok(segment)
}

/// The segment log files of the partition in `dir`, oldest first.
fn segment_logs(dir: &Path) -> BenchResult<Vec<PathBuf>> {
    let mut logs: Vec<PathBuf> = fs::read_dir(dir)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    logs.retain(|p| p.extension().is_some_and(|ext| ext == "log"));
    logs.sort();
    Ok(logs)
}

/// Writes the file back and drops it from the page cache, as after a
/// reboot, so recovery reads it from the disk.
fn evict_from_page_cache(path: &Path) -> BenchResult<()> {
    let file = File::open(path)?;
    file.sync_data()?;
    rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed)
        .map_err(|e| format!("posix_fadvise: {e}"))?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Output and small helpers

fn print_row(case: &str, result: &str, vs_raw: &str, spread: &str, notes: &str) {
    println!("{case:<31} {result:>11} {vs_raw:>6} {spread:>6}  {notes}");
}

fn mb_s(rate: f64) -> String {
    format!("{rate:.0} MB/s")
}

fn gb_s(rate: f64) -> String {
    format!("{rate:.2} GB/s")
}

fn secs(elapsed: Duration) -> String {
    format!("{:.3} s", elapsed.as_secs_f64())
}

fn ratio(value: f64, baseline: f64) -> String {
    format!("{:.2}", value / baseline)
}

fn gb_per_s(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / 1e9 / elapsed.as_secs_f64()
}

fn env_u64(name: &str, default: u64) -> BenchResult<u64> {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().map_err(|e| format!("{name}={v}: {e}").into()),
        Err(_) => Ok(default),
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn remove_dir(dir: &Path) -> BenchResult<()> {
    fs::remove_dir_all(dir).map_err(|e| format!("remove {}: {e}", dir.display()).into())
}

/// The directory the cases write into. A directory given on the command
/// line is used as is (the caller removes it); otherwise a fresh one under
/// `target/bench-spool` is made and removed when the run ends.
struct WorkDir {
    path: PathBuf,
    remove: bool,
}

impl WorkDir {
    fn new(arg: Option<String>) -> BenchResult<WorkDir> {
        let (path, remove) = match arg {
            Some(dir) => (PathBuf::from(dir), false),
            None => {
                let parent = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-spool");
                (parent.join(format!("run-{}", std::process::id())), true)
            }
        };
        fs::create_dir_all(&path)?;
        let path = path.canonicalize()?;
        Ok(WorkDir { path, remove })
    }

    /// A new directory `name` in the work directory, for one case.
    fn subdir(&self, name: &str) -> BenchResult<PathBuf> {
        let dir = self.path.join(name);
        fs::create_dir(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        Ok(dir)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.remove {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}
