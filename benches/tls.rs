//! The TLS benchmark (issue 21): what securing both sides of the router
//! costs, measured side by side in one run.
//!
//! Run it with `scripts/bench-tls`. One Apache Kafka 4.1.1 (single node,
//! KRaft) with a PLAINTEXT and an SSL listener (certificates made at run
//! time), and one `strait serve` in front of it with two clusters, `plain`
//! (Kafka's PLAINTEXT port) and `tls` (its SSL port, the CA trusted), and
//! two listeners: `main` (plaintext) and `secure` (TLS with SCRAM-SHA-512
//! logins). Topics `plain-*` route to `plain`, `tls-*` to `tls`. So the
//! same process carries both paths:
//!
//! - plaintext: librdkafka -> plaintext -> Strait -> plaintext -> Kafka;
//! - TLS: librdkafka -> TLS + SCRAM -> Strait -> TLS -> Kafka.
//!
//! The same load also goes direct to Kafka's PLAINTEXT and SSL listeners,
//! so that what TLS costs Kafka itself on this machine stands beside what
//! it costs through Strait.
//!
//! Measured for each with Kafka's own perf tools (ProducerPerformance and
//! ConsumerPerformance: the Java client, which speaks TLS and SCRAM; the
//! benches' librdkafka is built without OpenSSL), alternating,
//! `TLS_BENCH_REPEATS` times (default 3, medians reported): produce
//! throughput (`TLS_BENCH_RECORDS` records of 1 KiB, default 200,000, 8
//! partitions, acks=1, linger 5 ms), consume throughput of the same
//! records (fetch MB/s, the group join left out), and the latency of
//! 10,000 records produced at 1,000 a second (p50, p99). Then TLS handshakes per second
//! on the secure listener (new connections, each a full handshake and one
//! ApiVersions, from 4 threads for 5 s) beside plaintext connections per
//! second on the main listener. Ratios are printed next to the goal the
//! issue set (throughput at least 0.8x plaintext). Timing on a shared
//! machine: the bench reports, it fails only on wrong answers.

// What the benches share, with the integration tests' harness as
// `common::support` (Kafka, certificates, `strait serve`).
#[path = "common/mod.rs"]
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::support::{self, kafka::Kafka, tls};
use common::{Res, PARTITIONS};

const USER: &str = "bench";
const PASSWORD: &str = "bench-secret";

/// One path's figures of one repeat.
#[derive(Debug, Default, Clone)]
struct Figures {
    produce_mb_s: f64,
    consume_mb_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// Strait's CPU seconds per GB it carried (produced and consumed;
    /// 0 for the direct paths).
    strait_cpu_s_per_gb: f64,
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .filter(|a| !a.starts_with('-'))
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| support::repo_root().join("target/bench-tls"));
    if let Err(e) = bench(&dir) {
        eprintln!("tls bench failed: {e}");
        std::process::exit(1);
    }
}

fn bench(parent: &Path) -> Res<()> {
    let records = common::env_u64("TLS_BENCH_RECORDS", 200_000)?;
    let repeats = common::env_u64("TLS_BENCH_REPEATS", 3)?;
    std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
    let dir = tempfile::Builder::new()
        .prefix("run-")
        .tempdir_in(parent)
        .map_err(|e| e.to_string())?;
    let certs = tls::generate(&dir.path().join("certs"));
    let (plain, ssl) = (support::free_port(), support::free_port());
    let c = certs.clone();
    let lines = move |controller: u16| {
        let listeners = format!("PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl}");
        vec![
            format!("listeners={listeners},CONTROLLER://127.0.0.1:{controller}"),
            format!("advertised.listeners={listeners}"),
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT".into(),
            "ssl.keystore.type=PEM".into(),
            format!("ssl.keystore.certificate.chain={}", tls::property(&c.server.cert)),
            format!("ssl.keystore.key={}", tls::property(&c.server.key)),
        ]
    };
    println!("starting Kafka 4.1.1 (PLAINTEXT and SSL listeners) ...");
    let kafka = Kafka::start_single(plain, &lines);
    let users = dir.path().join("users.yaml");
    let mut add = std::process::Command::new(support::strait_bin());
    add.args(["users", "add", USER, "--mechanism", "SCRAM-SHA-512", "--file"])
        .arg(&users);
    let added = support::run_timeout(
        add,
        Some(format!("{PASSWORD}\n").as_bytes()),
        Duration::from_secs(30),
    );
    if !added.output.status.success() {
        return Err(format!(
            "strait users add: {}",
            String::from_utf8_lossy(&added.output.stderr)
        ));
    }
    let secure = support::free_port();
    let config = dir.path().join("strait.yaml");
    std::fs::write(
        &config,
        format!(
            r#"
server:
  users_file: "{users}"
  listeners:
    - name: secure
      listen: 127.0.0.1:{secure}
      tls: {{ cert_file: "{cert}", key_file: "{key}" }}
      sasl: {{ mechanisms: [SCRAM-SHA-512] }}
clusters:
  plain: {{ bootstrap: ["127.0.0.1:{plain}"] }}
  tls: {{ bootstrap: ["127.0.0.1:{ssl}"], tls: {{ ca_file: "{ca}" }} }}
routes:
  - {{ prefix: "plain-", to: plain }}
  - {{ prefix: "tls-", to: tls }}
"#,
            users = users.display(),
            cert = certs.server.cert_file.display(),
            key = certs.server.key_file.display(),
            ca = certs.ca_file.display(),
        ),
    )
    .map_err(|e| e.to_string())?;
    let strait = support::Strait::start(&["--config", config.to_str().unwrap()]);
    let main_bootstrap = strait.bootstrap();
    let secure_bootstrap = format!("127.0.0.1:{secure}");
    let plain_properties = dir.path().join("plain.properties");
    std::fs::write(&plain_properties, "").map_err(|e| e.to_string())?;
    let tls_properties = dir.path().join("tls.properties");
    std::fs::write(
        &tls_properties,
        format!(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n\
             sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \
             username=\"{USER}\" password=\"{PASSWORD}\";\n\
             ssl.truststore.type=PEM\nssl.truststore.location={}\n",
            certs.ca_file.display()
        ),
    )
    .map_err(|e| e.to_string())?;
    println!(
        "Kafka's ProducerPerformance and ConsumerPerformance (Java client 4.1.1); {} records of {} B, \
         {PARTITIONS} partitions, acks=1, linger.ms=5, {repeats} repeats; {} cores, load {}",
        records,
        common::RECORD_BYTES,
        common::nproc(),
        common::loadavg()
    );
    let (mut plain_runs, mut tls_runs) = (Vec::new(), Vec::new());
    let (mut direct_plain_runs, mut direct_tls_runs) = (Vec::new(), Vec::new());
    let (kafka_plain, kafka_ssl) = (format!("127.0.0.1:{plain}"), format!("127.0.0.1:{ssl}"));
    let ssl_properties = dir.path().join("ssl.properties");
    std::fs::write(
        &ssl_properties,
        format!(
            "security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={}\n",
            certs.ca_file.display()
        ),
    )
    .map_err(|e| e.to_string())?;
    let clk_tck = common::clock_ticks();
    let strait_ticks = || {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", strait.pid()?)).ok()?;
        common::cpu_ticks_of(&stat)
    };
    for repeat in 0..repeats {
        for (path, bootstrap, properties, runs) in [
            ("plain", &main_bootstrap, &plain_properties, &mut plain_runs),
            ("tls", &secure_bootstrap, &tls_properties, &mut tls_runs),
            (
                "direct-plain",
                &kafka_plain,
                &plain_properties,
                &mut direct_plain_runs,
            ),
            ("direct-tls", &kafka_ssl, &ssl_properties, &mut direct_tls_runs),
        ] {
            let topic = format!("{path}-{repeat}");
            let admin = if path.starts_with("direct") {
                &kafka_plain
            } else {
                &main_bootstrap
            };
            common::create_topic(admin, &topic, PARTITIONS, "tls-bench-admin")?;
            let before = strait_ticks();
            let mut figures = run(&kafka, bootstrap, properties, &topic, records)?;
            if !path.starts_with("direct") {
                // Produced, consumed, and the 10,000 records of the
                // latency run.
                let gb = ((2 * records + 10_000) * common::RECORD_BYTES as u64) as f64 / 1e9;
                let ticks = strait_ticks().zip(before).map_or(0, |(a, b)| a.saturating_sub(b));
                figures.strait_cpu_s_per_gb = ticks as f64 / clk_tck / gb;
            }
            println!(
                "  repeat {repeat} {path:12}: produce {:7.1} MB/s, consume {:7.1} MB/s, one at a time p50 {:.2} ms p99 {:.2} ms, \
                 Strait {:.2} cpu s/GB",
                figures.produce_mb_s, figures.consume_mb_s, figures.p50_ms, figures.p99_ms, figures.strait_cpu_s_per_gb
            );
            runs.push(figures);
        }
    }
    let median = |runs: &[Figures], f: fn(&Figures) -> f64| {
        common::median(runs.iter().map(f).collect()).unwrap_or(0.0)
    };
    let (plain_handshakes, tls_handshakes) = (
        connections_per_second(strait.port(), None)?,
        connections_per_second(secure, Some(&certs.ca_file))?,
    );
    println!();
    println!(
        "| path | produce MB/s | consume MB/s | p50 ms at 1,000/s | p99 ms | new connections/s | Strait cpu s/GB |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (name, runs, conns) in [
        (
            "through Strait, plaintext both sides",
            &plain_runs,
            format!("{plain_handshakes:.0}"),
        ),
        (
            "through Strait, TLS + SCRAM to Strait, TLS to Kafka",
            &tls_runs,
            format!("{tls_handshakes:.0}"),
        ),
        ("direct to Kafka, plaintext", &direct_plain_runs, String::new()),
        ("direct to Kafka, TLS", &direct_tls_runs, String::new()),
    ] {
        let cpu = median(runs, |f| f.strait_cpu_s_per_gb);
        println!(
            "| {name} | {:.1} | {:.1} | {:.2} | {:.2} | {conns} | {} |",
            median(runs, |f| f.produce_mb_s),
            median(runs, |f| f.consume_mb_s),
            median(runs, |f| f.p50_ms),
            median(runs, |f| f.p99_ms),
            if cpu > 0.0 {
                format!("{cpu:.2}")
            } else {
                String::new()
            },
        );
    }
    let ratio = |a: &[Figures], b: &[Figures], f: fn(&Figures) -> f64| {
        median(a, f) / median(b, f).max(f64::MIN_POSITIVE)
    };
    println!();
    println!(
        "Through Strait, TLS / plaintext: produce {:.2}x, consume {:.2}x (goal: at least 0.8x); p99 added {:+.2} ms; \
         TLS handshakes {:.0}/s ({:.2}x plaintext connections)",
        ratio(&tls_runs, &plain_runs, |f| f.produce_mb_s),
        ratio(&tls_runs, &plain_runs, |f| f.consume_mb_s),
        median(&tls_runs, |f| f.p99_ms) - median(&plain_runs, |f| f.p99_ms),
        tls_handshakes,
        tls_handshakes / plain_handshakes.max(f64::MIN_POSITIVE),
    );
    println!(
        "Direct to Kafka, TLS / plaintext (Kafka's own cost, same machine): produce {:.2}x, consume {:.2}x; \
         p99 added {:+.2} ms",
        ratio(&direct_tls_runs, &direct_plain_runs, |f| f.produce_mb_s),
        ratio(&direct_tls_runs, &direct_plain_runs, |f| f.consume_mb_s),
        median(&direct_tls_runs, |f| f.p99_ms) - median(&direct_plain_runs, |f| f.p99_ms),
    );
    drop(strait);
    drop(kafka);
    Ok(())
}

/// The number after `before` and before `after` in `text`.
fn number_between(text: &str, before: &str, after: &str) -> Res<f64> {
    let rest = text
        .rsplit_once(before)
        .map(|(_, rest)| rest)
        .ok_or_else(|| format!("no `{before}` in: {text}"))?;
    let end = rest
        .find(after)
        .ok_or_else(|| format!("no `{after}` after `{before}` in: {text}"))?;
    rest[..end]
        .trim()
        .parse()
        .map_err(|e| format!("`{}`: {e}", &rest[..end]))
}

/// One path's runs on `topic` with Kafka's own perf tools (the Java client,
/// which speaks TLS and SCRAM on every build), `properties` its client
/// settings: produce as fast as it goes, consume it all, then produce at a
/// fixed rate for the latency.
fn run(kafka: &Kafka, bootstrap: &str, properties: &Path, topic: &str, records: u64) -> Res<Figures> {
    let config = properties.to_str().unwrap();
    let bootstrap_prop = format!("bootstrap.servers={bootstrap}");
    let produce = |count: u64, rate: &str| {
        kafka.tool(
            "org.apache.kafka.tools.ProducerPerformance",
            &[
                "--topic",
                topic,
                "--num-records",
                &count.to_string(),
                "--record-size",
                &common::RECORD_BYTES.to_string(),
                "--throughput",
                rate,
                "--producer-props",
                &bootstrap_prop,
                "acks=1",
                "linger.ms=5",
                "--producer.config",
                config,
            ],
        )
    };
    let fast = produce(records, "-1");
    // The last line sums the run: "N records sent, R records/sec (M MB/sec), ...".
    let produce_mb_s = number_between(&fast, "records/sec (", "MB/sec")?;
    let consumed = kafka.tool(
        "org.apache.kafka.tools.ConsumerPerformance",
        &[
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--messages",
            &records.to_string(),
            "--consumer.config",
            config,
            "--timeout",
            "60000",
        ],
    );
    // "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg,
    // nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec":
    // fetch.MB.sec leaves out joining the group.
    let row = consumed
        .lines()
        .rev()
        .find(|l| l.split(',').count() >= 10)
        .ok_or_else(|| format!("no result row in: {consumed}"))?;
    let consume_mb_s: f64 = row
        .split(',')
        .nth(8)
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no fetch.MB.sec in `{row}`"))?;
    let paced = produce(10_000, "1000");
    Ok(Figures {
        produce_mb_s,
        consume_mb_s,
        p50_ms: number_between(&paced, "max latency,", "ms 50th")?,
        p99_ms: number_between(&paced, "95th,", "ms 99th")?,
        strait_cpu_s_per_gb: 0.0,
    })
}

/// New connections per second to `port`, each answering one ApiVersions:
/// with TLS (a full handshake, trusting `ca`) or plain TCP. 4 threads, 5 s.
fn connections_per_second(port: u16, ca: Option<&Path>) -> Res<f64> {
    let config = match ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in strait_upstream::security::read_certificates(ca, "ca")? {
                roots.add(cert).map_err(|e| e.to_string())?;
            }
            Some(Arc::new(
                rustls::ClientConfig::builder_with_provider(strait_upstream::security::crypto_provider())
                    .with_safe_default_protocol_versions()
                    .map_err(|e| e.to_string())?
                    .with_root_certificates(roots)
                    .with_no_client_auth(),
            ))
        }
        None => None,
    };
    // ApiVersions v0, correlation id 1, client id "b".
    let request: &[u8] = &[0, 0, 0, 11, 0, 18, 0, 0, 0, 0, 0, 1, 0, 1, b'b'];
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(5);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (config, done) = (config.clone(), Arc::clone(&done));
            std::thread::spawn(move || -> Res<()> {
                while Instant::now() < until {
                    let mut tcp = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
                    tcp.set_nodelay(true).ok();
                    let mut length = [0u8; 4];
                    match &config {
                        Some(config) => {
                            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
                            let connection = rustls::ClientConnection::new(Arc::clone(config), name)
                                .map_err(|e| e.to_string())?;
                            let mut stream = rustls::StreamOwned::new(connection, tcp);
                            stream.write_all(request).map_err(|e| e.to_string())?;
                            stream.read_exact(&mut length).map_err(|e| e.to_string())?;
                        }
                        None => {
                            tcp.write_all(request).map_err(|e| e.to_string())?;
                            tcp.read_exact(&mut length).map_err(|e| e.to_string())?;
                        }
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread
            .join()
            .map_err(|_| "a connection thread panicked".to_owned())??;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / 5.0)
}
