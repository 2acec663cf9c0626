//! The failover benchmark (issue 24): what the mirror's offset map costs,
//! how soon `sync_group_offsets` brings a source commit to the target, and
//! how long translating 1,000 groups takes.
//!
//! Run it with `scripts/bench-failover`. Two single-node Apache Kafka
//! clusters (the tests' harness starts them) and one `strait mirror`
//! between them, following the groups `fo-.*`:
//!
//! - **Map cost.** Kafka's ProducerPerformance writes a plain topic (1 KB
//!   records, `FAILOVER_BENCH_MB`, default 200 MB) and a transactional one
//!   (the same records, a transaction every 20 ms, so a marker every few
//!   hundred records); once mirrored, the map topic's bytes per GB
//!   mirrored, per topic.
//! - **Sync delay.** 100 groups commit on the source, one commit every
//!   50 ms at an offset already mirrored (so the replication lag is 0 and
//!   what is measured is the sync's own delay); each commit's delay is the
//!   time until the target holds its translation (polled every 10 ms).
//!   p50, p99 and the worst of 300. MirrorMaker 2's default is 60 s
//!   (`sync.group.offsets.interval.seconds`).
//! - **1,000 groups.** 1,000 more groups commit 10 partitions each; `strait
//!   mirror translate-offsets --group 'fo-k.*'` (a process reading the
//!   whole map, the groups and their offsets) is timed, every one of its
//!   10,000 translations checked against the map; and the sync's own round
//!   over the 1,100 groups (`strait_mirror_group_sync_seconds`).
//!
//! The bench fails on a wrong translation, never on a slow one.

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::support::kafka::Kafka;
use common::support::{self, cluster, MirrorProc};
use common::{env_u64, Res};
use strait_mirror::offset_map::Translation;
use strait_mirror::translate::Translator;

const PLAIN: &str = "fo-plain";
const TXNS: &str = "fo-txns";
const PARTITIONS: i32 = 10;

fn main() {
    if let Err(e) = run() {
        eprintln!("bench-failover: {e}");
        std::process::exit(1);
    }
}

fn run() -> Res<()> {
    let mb = env_u64("FAILOVER_BENCH_MB", 200)?;
    println!(
        "failover: Kafka 4.1.1 to Kafka 4.1.1, one strait mirror; {} cores ({}), load {}",
        common::nproc(),
        common::cpu_model(),
        common::loadavg()
    );
    let source = Kafka::start(0, &[]);
    let target = Kafka::start(0, &[]);
    let (src, dst) = (source.bootstrap(), target.bootstrap());
    let records = mb * 1000;
    for (topic, txn) in [(PLAIN, false), (TXNS, true)] {
        source.create_topic(topic, PARTITIONS, &[]);
        let started = Instant::now();
        let mut props = vec!["acks=all"];
        if txn {
            props.extend([
                "--transactional-id",
                "fo-bench",
                "--transaction-duration-ms",
                "20",
            ]);
        }
        common::producer_performance(&source, &src, topic, (records, 1000, -1), &props)?;
        println!(
            "  {topic}: {mb} MB written in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    let config = format!(
        "clusters:\n  nj: {{ bootstrap: [\"{src}\"] }}\n  cq: {{ bootstrap: [\"{dst}\"] }}\n\
         admin:\n  listen: \"{{admin}}\"\nmirrors:\n  m:\n    source: nj\n    target: cq\n    \
         topics: \"fo-.*\"\n    sync_group_offsets: {{ groups: \"fo-.*\" }}\n"
    );
    let mirror = MirrorProc::start(&config);
    let started = Instant::now();
    let source_cluster = cluster(&src);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    // Mirrored and committed to the source's end.
    let ends = |topic: &str| -> Res<Vec<i64>> {
        runtime.block_on(async {
            let mut ends = Vec::new();
            for p in 0..PARTITIONS {
                ends.push(
                    strait_mirror::resume::list_offset(&source_cluster, topic, p, -1)
                        .await
                        .map_err(|e| e.to_string())?,
                );
            }
            Ok(ends)
        })
    };
    let (plain_ends, txn_ends) = (ends(PLAIN)?, ends(TXNS)?);
    loop {
        let done = runtime.block_on(async {
            let all = strait_mirror::positions::load_all(&source_cluster, "m")
                .await
                .ok()?;
            let at = |topic: &str, p: i32| {
                all.iter()
                    .find(|o| o.topic == topic && o.partition == p)
                    .map_or(-1, |o| o.offset)
            };
            Some(
                (0..PARTITIONS)
                    .all(|p| at(PLAIN, p) == plain_ends[p as usize] && at(TXNS, p) == txn_ends[p as usize]),
            )
        });
        if done == Some(true) {
            break;
        }
        if started.elapsed() > Duration::from_secs(600) {
            return Err("the mirror did not catch up in 10 minutes".into());
        }
        thread::sleep(Duration::from_millis(200));
    }
    println!("  mirrored both in {:.1} s", started.elapsed().as_secs_f64());

    // The map's cost per GB, per topic.
    let translator = runtime
        .block_on(Translator::load(
            cluster(&src),
            cluster(&dst),
            "m",
            "__strait_mirror_offsets.m",
        ))
        .map_err(|e| e.to_string())?;
    let metrics = mirror.get("/metrics");
    println!(
        "\n  {:<10} {:>10} {:>12} {:>9} {:>10} {:>12} {:>12}",
        "topic", "MB", "gaps", "entries", "segments", "map bytes", "bytes per GB"
    );
    let map = translator.map();
    for (topic, ends) in [(PLAIN, &plain_ends), (TXNS, &txn_ends)] {
        let bytes = support::metric_sum(
            &metrics,
            "strait_mirror_bytes_total",
            &format!("topic=\"{topic}\""),
        );
        let parts: Vec<_> = map.partitions.iter().filter(|((t, _), _)| t == topic).collect();
        let segments: usize = parts.iter().map(|(_, m)| m.segments().len()).sum();
        let gaps: i64 = ends.iter().sum::<i64>() - records as i64;
        // Entries and their bytes of this topic, re-read by key.
        let (entries, map_bytes) = runtime.block_on(topic_entries(&dst, topic))?;
        println!(
            "  {topic:<10} {:>10.0} {gaps:>12} {entries:>9} {segments:>10} {map_bytes:>12} {:>12.0}",
            bytes / 1e6,
            map_bytes as f64 / (bytes / 1e9)
        );
    }

    // The sync's delay: commits at offsets already mirrored.
    let groups: Vec<String> = (0..100).map(|g| format!("fo-d{g:03}")).collect();
    let delays = Arc::new(Mutex::new(Vec::new()));
    let target_cluster = cluster(&dst);
    let mut waits = Vec::new();
    for i in 0..300u64 {
        let group = groups[i as usize % groups.len()].clone();
        let p = (i % PARTITIONS as u64) as i32;
        let offset = ((i * 7919) % plain_ends[p as usize] as u64) as i64;
        let want = match translator.translate(PLAIN, p, offset) {
            Translation::Exact(t) => t,
            other => return Err(format!("{PLAIN}-{p} at {offset} translates to {other:?}")),
        };
        let at = Instant::now();
        runtime
            .block_on(strait_mirror::positions::commit_offsets(
                &source_cluster,
                &group,
                &[(PLAIN, p, offset, String::new())],
            ))
            .map_err(|e| e.to_string())?;
        let target_cluster = target_cluster.clone();
        let delays = delays.clone();
        waits.push(runtime.spawn(async move {
            loop {
                if let Ok(found) = strait_mirror::positions::load_all(&target_cluster, &group).await {
                    if found
                        .iter()
                        .any(|o| o.topic == PLAIN && o.partition == p && o.offset == want)
                    {
                        delays.lock().unwrap().push(at.elapsed().as_secs_f64());
                        return;
                    }
                }
                if at.elapsed() > Duration::from_secs(30) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }));
        // One commit per group in flight at most: the next commit of the
        // same group comes 100 commits (5 s) later.
        thread::sleep(Duration::from_millis(50));
    }
    for w in waits {
        let _ = runtime.block_on(w);
    }
    let mut delays = delays.lock().unwrap().clone();
    if delays.len() != 300 {
        return Err(format!("{} of 300 commits reached the target", delays.len()));
    }
    delays.sort_by(f64::total_cmp);
    println!(
        "\n  sync delay, source commit to target commit (interval 500ms, 100 groups): p50 {:.0} ms, \
         p99 {:.0} ms, max {:.0} ms (MirrorMaker 2's default interval: 60 s)",
        1e3 * common::percentile(&delays, 50.0),
        1e3 * common::percentile(&delays, 99.0),
        1e3 * delays.last().copied().unwrap_or_default()
    );

    // 1,000 groups x 10 partitions.
    let started = Instant::now();
    let mut expected: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for g in 0..1000u64 {
        let group = format!("fo-k{g:04}");
        let offsets: Vec<(&str, i32, i64, String)> = (0..PARTITIONS)
            .map(|p| {
                (
                    PLAIN,
                    p,
                    ((g * 31 + p as u64 * 7) % plain_ends[p as usize] as u64) as i64,
                    String::new(),
                )
            })
            .collect();
        runtime
            .block_on(strait_mirror::positions::commit_offsets(
                &source_cluster,
                &group,
                &offsets,
            ))
            .map_err(|e| e.to_string())?;
        for (_, p, o, _) in offsets {
            let t = translator
                .translate(PLAIN, p, o)
                .target()
                .ok_or("an offset does not translate")?;
            expected.insert((group.clone(), p), t);
        }
    }
    println!(
        "\n  1,000 groups x {PARTITIONS} partitions committed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let config_path = mirror.config_path().to_owned();
    let mut best = f64::MAX;
    for _ in 0..3 {
        let started = Instant::now();
        let out = Command::new(common::strait_bin())
            .args(["mirror", "translate-offsets", "--config"])
            .arg(&config_path)
            .args(["--mirror", "m", "--group", "fo-k.*", "--json"])
            .output()
            .map_err(|e| e.to_string())?;
        let took = started.elapsed().as_secs_f64();
        best = best.min(took);
        if !out.status.success() {
            return Err(format!(
                "translate-offsets: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
        let mut seen = 0;
        for g in json["groups"].as_array().ok_or("no groups")? {
            for row in g["partitions"].as_array().ok_or("no partitions")? {
                let key = (
                    g["group"].as_str().unwrap_or_default().to_owned(),
                    row["partition"].as_i64().unwrap_or(-1) as i32,
                );
                if row["to_offset"].as_i64() != expected.get(&key).copied() {
                    return Err(format!("{key:?}: {row}, expected {:?}", expected.get(&key)));
                }
                seen += 1;
            }
        }
        if seen != expected.len() {
            return Err(format!(
                "translate-offsets printed {seen} of {} offsets",
                expected.len()
            ));
        }
    }
    // The sync's rounds now cover 1,100 groups: their mean over the next
    // rounds.
    let sums = || {
        let m = mirror.get("/metrics");
        (
            support::metric_sum(&m, "strait_mirror_group_sync_seconds_sum", ""),
            support::metric_sum(&m, "strait_mirror_group_sync_seconds_count", ""),
        )
    };
    thread::sleep(Duration::from_secs(3));
    let (s0, n0) = sums();
    thread::sleep(Duration::from_secs(10));
    let (s1, n1) = sums();
    println!(
        "  translate-offsets of 1,000 groups ({} offsets, all exact): {:.2} s (best of 3, a new process \
         reading the whole map); the sync's round over 1,100 groups: {:.0} ms (mean of {} rounds)",
        expected.len(),
        best,
        1e3 * (s1 - s0) / (n1 - n0).max(1.0),
        n1 - n0
    );
    Ok(())
}

/// Entries of `topic` in the map topic and their bytes (keys and values).
async fn topic_entries(target: &str, topic: &str) -> Res<(u64, u64)> {
    // The map as a whole counts; per topic, entries are filtered by key.
    let cluster = cluster(target);
    let prefix = format!("{topic}:");
    let map = strait_mirror::translate::read_map_filtered(&cluster, "__strait_mirror_offsets.m", |key| {
        key.starts_with(prefix.as_bytes())
    })
    .await
    .map_err(|e| e.to_string())?
    .ok_or("no map topic")?;
    Ok((map.entries, map.bytes))
}
