//! Watching Strait as its users do: a real Prometheus (Debian's) scraping a
//! `strait serve` that routes clients to two Apache Kafka clusters (this
//! process's two shared single nodes; each scene's topic named after it),
//! keeps local topics, mirrors one cluster to the other and watches the
//! consumer groups of both (the mirror's own among them), running every PromQL
//! expression of the dashboards and alert rules; the status page in
//! headless Chromium against `/api/v1/mirrors`; `/readyz` with an upstream
//! that does not answer.

mod support;

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::kafka::Kafka;
use support::{free_port, http, kcat, repo_root, run_client, unique, Strait};

/// Records produced through Strait to `dc1.orders` (`orders-N` on dc1,
/// mirrored to dc2).
const ORDERS: u64 = 400;
/// Records produced to the local topic `local.events`.
const EVENTS: u64 = 200;

/// Two Kafka clusters behind one Strait, with traffic of every kind done.
struct Scene {
    /// The topic `dc1.orders` is on dc1, and its mirror's on dc2.
    orders: String,
    strait: Strait,
    admin: u16,
    _dir: tempfile::TempDir,
}

impl Scene {
    fn start() -> Scene {
        let (dc1, dc2) = (Kafka::shared(), Kafka::second());
        let orders = unique("orders");
        dc1.create_topic(&orders, 2, &[]);
        let admin = free_port();
        let (strait, dir) = strait_with(&format!(
            r#"clusters:
  dc1: {{ bootstrap: ["{dc1}"], request_timeout: 10s, connect_timeout: 5s }}
  dc2: {{ bootstrap: ["{dc2}"], request_timeout: 10s, connect_timeout: 5s }}
routes:
  - {{ exact: "dc1.orders", to: dc1, as: "{orders}" }}
  - {{ prefix: "local.", to: local }}
admin:
  listen: "127.0.0.1:{admin}"
lag:
  interval: 1s
mirrors:
  dc1-to-dc2:
    source: dc1
    target: dc2
    topics: "{orders}"
    group: "{orders}"
    commit_interval: 500ms
    discovery_interval: 1s
"#,
            dc1 = dc1.bootstrap(),
            dc2 = dc2.bootstrap(),
        ));
        let scene = Scene {
            orders,
            strait,
            admin,
            _dir: dir,
        };
        scene.wait_ready();
        let b = scene.strait.bootstrap();
        let produce = |topic: &str, count: u64| {
            let out = run_client(
                "ck_produce.py",
                &["--bootstrap", &b, "--topic", topic, "--count", &count.to_string()],
            );
            assert_eq!(out["delivered"].as_u64(), Some(count), "{topic}: {out}");
        };
        produce("dc1.orders", ORDERS);
        produce("local.events", EVENTS);
        let consumed = run_client(
            "ck_consume.py",
            &[
                "--bootstrap",
                &b,
                "--topic",
                "local.events",
                "--group",
                "obs-group",
                "--expect",
                &EVENTS.to_string(),
                "--commit",
            ],
        );
        assert_eq!(consumed["records"].as_u64(), Some(EVENTS), "{consumed}");
        // A topic no route leads to: UNKNOWN_TOPIC_OR_PARTITION, counted.
        let out = kcat(&["-b", &b, "-L", "-t", "elsewhere.orders"], None);
        let listing =
            String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(listing.contains("Unknown topic"), "{listing}");
        scene.wait_mirrored();
        scene
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, body) = http(self.admin, "/readyz");
            if status == 200 {
                assert_eq!(body, "ready\n");
                return;
            }
            assert!(Instant::now() < deadline, "/readyz still {status} {body}");
            thread::sleep(Duration::from_millis(200));
        }
    }

    fn mirrors(&self) -> Value {
        let (status, body) = http(self.admin, "/api/v1/mirrors");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).expect("/api/v1/mirrors is JSON")
    }

    /// Waits until the mirror has written every order and its partitions
    /// have been sampled a few times.
    fn wait_mirrored(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let json = self.mirrors();
            let partitions = json["mirrors"][0]["partitions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let positions: i64 = partitions.iter().filter_map(|p| p["position"].as_i64()).sum();
            let sampled = partitions
                .iter()
                .all(|p| p["history"].as_array().is_some_and(|h| h.len() >= 3));
            if partitions.len() == 2 && positions == ORDERS as i64 && sampled {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the mirror did not catch up: {json}\n{}",
                self.strait.log()
            );
            thread::sleep(Duration::from_millis(500));
        }
    }

    fn metrics(&self) -> String {
        let (status, body) = http(self.admin, "/metrics");
        assert_eq!(status, 200);
        body
    }
}

/// `strait serve` with the configuration `yaml`, kept in the directory
/// returned.
fn strait_with(yaml: &str) -> (Strait, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("strait.yaml");
    std::fs::write(&config, yaml).unwrap();
    (Strait::start(&["--config", config.to_str().unwrap()]), dir)
}

/// GET `path` on 127.0.0.1:`port`: the status code and the body. HTTP/1.0,
/// so that the body comes whole, not in chunks.
fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server scraping Strait's admin listener every second with
/// Strait's alert rules loaded.
struct Prometheus {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(target_port: u16) -> Prometheus {
        let binary = which("prometheus").unwrap_or_else(|| {
            panic!("Debian's prometheus is not installed: scripts/peers installs it (apt-get install prometheus)")
        });
        let dir = tempfile::tempdir().unwrap();
        let rules = repo_root().join("dashboards/alerts.yml");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n\
                 scrape_configs:\n  - job_name: strait\n    static_configs:\n      - targets: [\"127.0.0.1:{target_port}\"]\n",
                rules.display()
            ),
        )
        .unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting prometheus");
        let p = Prometheus {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() || http(port, "/-/ready").0 != 200 {
            assert!(Instant::now() < deadline, "prometheus did not start: {}", p.log());
            thread::sleep(Duration::from_millis(200));
        }
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// Runs an instant query: the result vector, or the error Prometheus
    /// gave.
    fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let (status, body) = http(self.port, &format!("/api/v1/query?query={}", url_encode(expr)));
        let json: Value = serde_json::from_str(&body).map_err(|e| format!("HTTP {status}: {e}: {body}"))?;
        if json["status"] != "success" {
            return Err(format!("{}: {}", json["errorType"], json["error"]));
        }
        Ok(json["data"]["result"].as_array().cloned().unwrap_or_default())
    }

    fn value(&self, expr: &str) -> f64 {
        let result = self.query(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
        assert_eq!(result.len(), 1, "{expr}: {result:?}");
        result[0]["value"][1].as_str().unwrap().parse().unwrap()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!("--- prometheus log ---\n{}", self.log());
        }
    }
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
}

/// Every dashboard expression, as `dashboards/generate.py --exprs` prints
/// them (template variables matching everything): (dashboard, panel, expr).
fn dashboard_exprs() -> Vec<(String, String, String)> {
    let out = Command::new("python3")
        .arg(repo_root().join("dashboards/generate.py"))
        .arg("--exprs")
        .output()
        .expect("running dashboards/generate.py");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("one JSON object per line");
            let s = |k: &str| v[k].as_str().unwrap().to_owned();
            (s("dashboard"), s("panel"), s("expr"))
        })
        .collect()
}

/// Every alert rule of `dashboards/alerts.yml`: (name, expr).
fn alert_rules() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo_root().join("dashboards/alerts.yml")).unwrap();
    let yaml: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    yaml["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap().iter())
        .map(|r| {
            (
                r["alert"].as_str().unwrap().to_owned(),
                r["expr"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// An alert expression without its thresholds (`x > 300` is `x`): what it
/// compares, which must have data even while the alert does not fire.
fn without_thresholds(expr: &str) -> String {
    let re = regex::Regex::new(r"\s*(==|!=|>=|<=|>|<)\s*[0-9.]+").unwrap();
    re.replace_all(expr, "").into_owned()
}

#[test]
fn prometheus_gets_data_for_every_dashboard_panel_and_alert_rule() {
    let scene = Scene::start();
    let prometheus = Prometheus::start(scene.admin);
    // Enough scrapes for rates over a minute's window to have two points,
    // and rules evaluated a few times.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let scrapes = prometheus
            .query("count_over_time(strait_build_info[1m])")
            .ok()
            .and_then(|r| {
                r.first().map(|s| {
                    s["value"][1]
                        .as_str()
                        .unwrap_or("0")
                        .parse::<f64>()
                        .unwrap_or(0.0)
                })
            })
            .unwrap_or(0.0);
        if scrapes >= 5.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "prometheus did not scrape Strait: {}",
            prometheus.log()
        );
        thread::sleep(Duration::from_millis(500));
    }

    let mut broken = Vec::new();
    let exprs = dashboard_exprs();
    assert!(exprs.len() >= 30, "{} dashboard expressions", exprs.len());
    for (dashboard, panel, expr) in &exprs {
        match prometheus.query(expr) {
            Ok(result) if result.is_empty() => broken.push(format!("{dashboard} / {panel}: no data: {expr}")),
            Ok(_) => {}
            Err(e) => broken.push(format!("{dashboard} / {panel}: {e}: {expr}")),
        }
    }
    let rules = alert_rules();
    assert!(rules.len() >= 9, "{} alert rules", rules.len());
    for (alert, expr) in &rules {
        if let Err(e) = prometheus.query(expr) {
            broken.push(format!("alert {alert}: {e}: {expr}"));
        }
        let compared = without_thresholds(expr);
        match prometheus.query(&compared) {
            Ok(result) if result.is_empty() => broken.push(format!("alert {alert}: no data: {compared}")),
            Ok(_) => {}
            Err(e) => broken.push(format!("alert {alert}: {e}: {compared}")),
        }
    }
    // Prometheus evaluated every rule without an error.
    let (_, body) = http(prometheus.port, "/api/v1/rules");
    let json: Value = serde_json::from_str(&body).unwrap();
    let evaluated: Vec<&Value> = json["data"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect();
    assert_eq!(evaluated.len(), rules.len(), "{body}");
    for rule in evaluated {
        if rule["health"] != "ok" {
            broken.push(format!(
                "rule {} is {}: {}",
                rule["name"], rule["health"], rule["lastError"]
            ));
        }
    }
    assert!(
        broken.is_empty(),
        "broken panels and rules:\n{}",
        broken.join("\n")
    );

    // The numbers are the traffic's.
    let sum = |expr: &str| prometheus.value(expr);
    assert_eq!(
        sum(r#"sum(strait_mirror_records_total{mirror="dc1-to-dc2"})"#),
        ORDERS as f64
    );
    assert_eq!(sum(r#"sum(strait_mirror_lag_records{mirror="dc1-to-dc2"})"#), 0.0);
    assert_eq!(sum(r#"strait_upstream_up{cluster="dc1"}"#), 1.0);
    assert_eq!(sum(r#"strait_upstream_up{cluster="dc2"}"#), 1.0);
    assert_eq!(sum(r#"strait_spool_partitions{topic="local.events"}"#), 1.0);
    assert!(sum(r#"strait_spool_size_bytes{topic="local.events"}"#) > (EVENTS * 10) as f64);
    assert_eq!(
        sum(r#"strait_group_members{cluster="local",group="obs-group"}"#),
        0.0
    );
    assert!(sum("strait_group_rebalances_total") >= 1.0);
    assert!(sum(r#"sum(strait_requests_total{api="Produce",outcome="ok"})"#) >= 2.0);
    assert!(sum(r#"sum(strait_upstream_requests_total{cluster="dc1",api="Produce",outcome="ok"})"#) >= 1.0);
    assert!(
        sum(r#"sum(strait_request_errors_total{api="Metadata",error="unknown_topic_or_partition"})"#) >= 1.0
    );
    assert_eq!(
        sum(r#"sum(strait_mirror_status{mirror="dc1-to-dc2",status="OK"})"#),
        2.0,
        "both partitions are OK"
    );
    // No address or client id ever becomes a label.
    let metrics = scene.metrics();
    for line in metrics.lines().filter(|l| !l.starts_with('#')) {
        assert!(!line.contains("127.0.0.1") && !line.contains("rdkafka"), "{line}");
    }
}

#[test]
fn the_status_page_shows_what_the_api_says() {
    let scene = Scene::start();
    let screenshot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    let _ = std::fs::remove_file(&screenshot);
    // A group behind on the spool with no members: STOP, listed.
    let stopped = unique("obs-stopped");
    let committed = run_client(
        "ck_admin.py",
        &[
            "--bootstrap",
            &scene.strait.bootstrap(),
            "commit",
            "--topic",
            "local.events",
            "--group",
            &stopped,
            "--offset",
            "50",
        ],
    );
    assert_eq!(committed["ok"], true, "{committed}");
    metrics_until(scene.admin, &scene.strait, "the stopped group", &|m| {
        support::metric(
            m,
            &[
                "strait_group_status{",
                &format!("group=\"{stopped}\""),
                "status=\"STOP\"",
            ],
        ) == Some(1.0)
    });
    let url = format!("http://127.0.0.1:{}", scene.admin);
    let page = run_client("status_page.py", &[&url, screenshot.to_str().unwrap()]);
    assert_eq!(
        page["groups_not_ok"][format!("local/{stopped}")],
        "STOP",
        "{page}"
    );
    assert_eq!(page["rows"], 2, "{page}");
    assert_eq!(page["mirrors"]["dc1-to-dc2"], "OK", "{page}");
    assert_eq!(page["upstreams"]["dc1"], true, "{page}");
    assert_eq!(page["upstreams"]["dc2"], true, "{page}");
    let png = std::fs::read(&screenshot).expect("the screenshot is kept");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    eprintln!("status page screenshot: {}", screenshot.display());

    // What the page showed is the API's.
    let json = scene.mirrors();
    let mirror = &json["mirrors"][0];
    assert_eq!(mirror["name"], "dc1-to-dc2");
    assert_eq!(
        (mirror["source"].as_str(), mirror["target"].as_str()),
        (Some("dc1"), Some("dc2"))
    );
    let partitions: BTreeMap<i64, &Value> = mirror["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["partition"].as_i64().unwrap(), p))
        .collect();
    assert_eq!(partitions.keys().copied().collect::<Vec<_>>(), [0, 1]);
    for p in partitions.values() {
        assert_eq!(p["status"], "OK", "{p}");
        assert_eq!(p["state"], "running", "{p}");
        assert_eq!(p["lag_records"], 0, "{p}");
        assert_eq!(p["position"], p["high_watermark"], "{p}");
        assert_eq!(p["target_topic"], scene.orders.as_str(), "{p}");
    }
    let (status, body) = http(scene.admin, "/api/v1/gateway");
    assert_eq!(status, 200);
    let gateway: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(gateway["ready"], true);
    assert_eq!(gateway["routes"][0]["exact"], "dc1.orders", "{gateway}");
    assert_eq!(gateway["routes"][0]["as"], scene.orders.as_str(), "{gateway}");
    assert_eq!(gateway["upstreams"][0]["name"], "dc1", "{gateway}");
    assert_eq!(gateway["upstreams"][0]["up"], true, "{gateway}");
    assert_eq!(gateway["upstreams"][0]["brokers"], 1, "{gateway}");
}

#[test]
fn readyz_waits_for_every_upstream_and_names_the_one_missing() {
    // A port nothing listens on.
    let dead = free_port();
    let admin = free_port();
    let (strait, _dir) = strait_with(&format!(
        "clusters:\n  gone: {{ bootstrap: [\"127.0.0.1:{dead}\"], connect_timeout: 1s }}\n\
         routes:\n  - {{ prefix: \"gone.\", to: gone }}\n  - {{ regex: \".*\", to: local }}\n\
         admin:\n  listen: \"127.0.0.1:{admin}\"\n"
    ));
    // Local topics work meanwhile.
    let out = run_client(
        "ck_produce.py",
        &[
            "--bootstrap",
            &strait.bootstrap(),
            "--topic",
            "here",
            "--count",
            "10",
        ],
    );
    assert_eq!(out["delivered"], 10, "{out}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let gateway = loop {
        let (_, body) = http(admin, "/api/v1/gateway");
        let gateway: Value = serde_json::from_str(&body).unwrap();
        if gateway["upstreams"][0]["up"] == false {
            break gateway;
        }
        assert!(Instant::now() < deadline, "{gateway}");
        thread::sleep(Duration::from_millis(200));
    };
    let error = gateway["upstreams"][0]["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(error.contains("gone"), "{gateway}");
    assert_eq!(gateway["ready"], false);
    let (status, body) = http(admin, "/readyz");
    assert_eq!(status, 503, "{body}");
    // It names the cluster and why its metadata does not load.
    assert!(
        body.starts_with("not ready: waiting for the first metadata of cluster gone (")
            && body.contains("Connection refused"),
        "{body}"
    );
    let (status, _) = http(admin, "/healthz");
    assert_eq!(status, 200);
    let metrics = http(admin, "/metrics").1;
    assert_eq!(
        support::metric(&metrics, &["strait_upstream_up{", "cluster=\"gone\""]),
        Some(0.0)
    );
    assert!(
        support::metric(
            &metrics,
            &[
                "strait_upstream_metadata_refreshes_total{",
                "cluster=\"gone\"",
                "outcome=\"error\""
            ]
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{metrics}"
    );
    assert_eq!(
        support::metric(&metrics, &["strait_spool_partitions{", "topic=\"here\""]),
        Some(1.0)
    );
}

#[test]
fn json_logs_name_the_connection_and_topic_labels_can_be_summed() {
    let admin = free_port();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("strait.yaml");
    std::fs::write(
        &config,
        format!("admin:\n  listen: \"127.0.0.1:{admin}\"\n  topic_labels: false\n"),
    )
    .unwrap();
    let json = Strait::start(&["--config", config.to_str().unwrap(), "--log-format", "json"]);
    for topic in ["one", "two"] {
        let out = run_client(
            "ck_produce.py",
            &["--bootstrap", &json.bootstrap(), "--topic", topic, "--count", "5"],
        );
        assert_eq!(out["delivered"], 5, "{out}");
    }
    // Summed over topics: one series without a topic label.
    let metrics = http(admin, "/metrics").1;
    let partitions: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("strait_spool_partitions"))
        .collect();
    assert_eq!(partitions, ["strait_spool_partitions 2"], "{metrics}");
    // Every line is a JSON object; the topics' creation is logged in the
    // span of the connection that asked for it.
    let log = json.log();
    let mut created = Vec::new();
    for line in log.lines().filter(|l| !l.starts_with("===")) {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["timestamp"].is_string() && v["level"].is_string(), "{line}");
        if v["fields"]["message"] == "created topic" {
            assert_eq!(v["span"]["name"], "connection", "{line}");
            assert_eq!(v["span"]["client_id"], "ck_produce", "{line}");
            assert!(
                v["span"]["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
                "{line}"
            );
            created.push(v["fields"]["topic"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(created, ["one", "two"], "{log}");
}

/// Issue 23: a group behind on a topic of Apache Kafka, as `strait serve`
/// watching the cluster (no routes) exports it ([`exact_group_lag`]), and
/// the same lag per partition as Kafka's own `kafka-consumer-groups`.
#[test]
fn a_groups_lag_on_kafka_is_exact_per_partition() {
    let dc1 = Kafka::shared();
    let group = unique("lag-group");
    let admin = free_port();
    let b = dc1.bootstrap();
    let (strait, _dir) = strait_with(&format!(
        "clusters:\n  dc1: {{ bootstrap: [\"{b}\"] }}\nadmin:\n  listen: \"127.0.0.1:{admin}\"\n\
         lag:\n  interval: 1s\n  groups: \"{group}|other\"\n"
    ));
    let topic = exact_group_lag(&strait, admin, "dc1", &b, &group, |topic| {
        dc1.create_topic(topic, 2, &[])
    });
    same_lag_as_kafkas_tool(admin, "dc1", &b, &group, &topic);
}

/// Issue 23: a group of the consumer protocol (KIP-848, the Java client's
/// `group.protocol=consumer` against Kafka 4), which DescribeGroups
/// reports as not found: its state and members come from
/// ConsumerGroupDescribe, so a live member is not taken for none (which
/// would make a lagging group STOP).
#[test]
fn a_consumer_protocol_groups_state_and_members_are_read() {
    let dc1 = Kafka::shared();
    let b = dc1.bootstrap();
    let (topic, group) = (unique("lag-848"), unique("lag-848-group"));
    dc1.create_topic(&topic, 1, &[]);
    let produced = run_client(
        "ck_produce.py",
        &["--bootstrap", &b, "--topic", &topic, "--count", "20"],
    );
    assert_eq!(produced["delivered"], 20, "{produced}");
    let admin = free_port();
    let (strait, _dir) = strait_with(&format!(
        "clusters:\n  dc1: {{ bootstrap: [\"{b}\"] }}\nadmin:\n  listen: \"127.0.0.1:{admin}\"\n\
         lag:\n  interval: 1s\n  groups: \"{group}\"\n"
    ));
    // The member stays in the group for a minute after reading all 20.
    let _member = support::spawn_client(
        "java4:consume",
        &[
            "--bootstrap",
            &b,
            "--topic",
            &topic,
            "--group",
            &group,
            "--expect",
            "20",
            "--commit",
            "--linger",
            "60",
            "--timeout",
            "90",
            "-X",
            "group.protocol=consumer",
        ],
    );
    let of_group = |metrics: &str, name: &str, extra: &str| {
        support::metric(
            metrics,
            &[name, "cluster=\"dc1\"", &format!("group=\"{group}\""), extra],
        )
    };
    metrics_until(admin, &strait, "the group not Stable with one member", &|m| {
        of_group(m, "strait_group_members{", "") == Some(1.0)
            && of_group(m, "strait_group_state{", "state=\"Stable\"") == Some(1.0)
    });
    let view: Value = serde_json::from_str(&http(admin, &format!("/api/v1/groups/dc1/{group}")).1).unwrap();
    assert_eq!(
        (view["state"].as_str(), view["members"].as_i64()),
        (Some("Stable"), Some(1)),
        "{view}"
    );
}

/// Issue 23: a group behind on a topic of Strait's own spool (cluster
/// `local`), the same as on Kafka ([`exact_group_lag`]), and the same lag
/// per partition as Kafka's `kafka-consumer-groups` reads through Strait.
#[test]
fn a_groups_lag_on_the_spool_is_exact_per_partition() {
    let group = unique("lag-group");
    let admin = free_port();
    let (strait, _dir) = strait_with(&format!(
        "admin:\n  listen: \"127.0.0.1:{admin}\"\nlag:\n  interval: 1s\n  groups: \"{group}|other\"\n"
    ));
    let b = strait.bootstrap();
    let topic = exact_group_lag(&strait, admin, "local", &b, &group, |topic| {
        support::create_topic("ck_admin.py", &b, topic, 2)
    });
    same_lag_as_kafkas_tool(admin, "local", &b, &group, &topic);
}

/// Kafka's own `kafka-consumer-groups --describe` of `group` at
/// `bootstrap` shows, for each of the two partitions of `topic`, the lag
/// Strait (admin listener `admin`) exports under `cluster`.
fn same_lag_as_kafkas_tool(admin: u16, cluster: &str, bootstrap: &str, group: &str, topic: &str) {
    let described = Kafka::shared().tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        &["--bootstrap-server", bootstrap, "--describe", "--group", group],
    );
    let metrics = http(admin, "/metrics").1;
    let mut rows = 0;
    // GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
    for cols in described
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
    {
        if cols.len() < 6 || cols[1] != topic {
            continue;
        }
        let strait_lag = support::metric(
            &metrics,
            &[
                "strait_group_lag_records{",
                &format!("cluster=\"{cluster}\""),
                &format!("group=\"{group}\""),
                &format!("topic=\"{topic}\""),
                &format!("partition=\"{}\"", cols[2]),
            ],
        );
        assert_eq!(
            strait_lag,
            cols[5].parse::<f64>().ok(),
            "partition {}: {described}",
            cols[2]
        );
        rows += 1;
    }
    assert_eq!(rows, 2, "{described}");
}

/// Issue 23: groups through the router, under the names its clients use.
/// A group Strait coordinates commits a local topic and a topic of dc1
/// (`dc1.T` to clients, `T` there: the router commits that part to dc1);
/// a group `groups:` delegates to dc1 commits `dc1.T`. Under cluster
/// `local` the first shows both partitions with the clients' names and
/// each lag from where the partition lives; under `dc1` the delegated one
/// shows `dc1.T`, and the first shows dc1's own name, as dc1's tools do.
#[test]
fn groups_through_the_router_are_under_the_clients_names() {
    let dc1 = Kafka::shared();
    let b = dc1.bootstrap();
    let (remote, local_topic) = (unique("lag-remote"), unique("lag-local"));
    let (spanning, delegated) = (unique("lag-span"), unique("lag-deleg"));
    dc1.create_topic(&remote, 1, &[]);
    let admin = free_port();
    let (strait, _dir) = strait_with(&format!(
        "clusters:\n  dc1: {{ bootstrap: [\"{b}\"] }}\nadmin:\n  listen: \"127.0.0.1:{admin}\"\n\
         routes:\n  - {{ prefix: \"dc1.\", to: dc1, strip_prefix: true }}\n  - {{ regex: \".*\", to: local }}\n\
         groups:\n  - {{ exact: \"{delegated}\", to: dc1 }}\n\
         lag:\n  interval: 1s\n  groups: \"{spanning}|{delegated}\"\n"
    ));
    let s = strait.bootstrap();
    support::create_topic("ck_admin.py", &s, &local_topic, 1);
    let client_remote = format!("dc1.{remote}");
    for topic in [&local_topic, &client_remote] {
        let produced = run_client(
            "ck_produce.py",
            &["--bootstrap", &s, "--topic", topic, "--count", "10"],
        );
        assert_eq!(produced["delivered"], 10, "{produced}");
    }
    let commit = |group: &str, topic: &str, offset: &str| {
        let out = run_client(
            "ck_admin.py",
            &[
                "--bootstrap",
                &s,
                "commit",
                "--topic",
                topic,
                "--group",
                group,
                "--offset",
                offset,
            ],
        );
        assert_eq!(out["ok"], true, "{group} {topic}: {out}");
    };
    commit(&spanning, &local_topic, "4");
    commit(&spanning, &client_remote, "3");
    commit(&delegated, &client_remote, "2");
    let expected = [
        ("local", spanning.as_str(), local_topic.as_str(), 6.0),
        ("local", spanning.as_str(), client_remote.as_str(), 7.0),
        ("dc1", spanning.as_str(), remote.as_str(), 7.0),
        ("dc1", delegated.as_str(), client_remote.as_str(), 8.0),
    ];
    let lag = |metrics: &str, (cluster, group, topic, _): (&str, &str, &str, f64)| {
        support::metric(
            metrics,
            &[
                "strait_group_lag_records{",
                &format!("cluster=\"{cluster}\""),
                &format!("group=\"{group}\""),
                &format!("topic=\"{topic}\""),
            ],
        )
    };
    let metrics = metrics_until(admin, &strait, "lag under the clients' names", &|m| {
        expected.iter().all(|&e| lag(m, e) == Some(e.3))
    });
    // The delegated group's topic only under the clients' name.
    assert_eq!(
        lag(&metrics, ("dc1", &delegated, &remote, 0.0)),
        None,
        "{}",
        lag_series(&metrics)
    );
    let view: Value =
        serde_json::from_str(&http(admin, &format!("/api/v1/groups/local/{spanning}")).1).unwrap();
    assert_eq!(view["max_lag_records"], 7, "{view}");
}

/// A group behind on a new topic of two partitions of `cluster` (it read
/// and committed 30 and 20 records, then 15 and 5 more arrived), as
/// `strait` (admin listener on `admin`, watching `group` every second)
/// exports it: the exact lag in records per partition, in seconds since
/// the oldest unread record was written (within one poll interval), the
/// group's state, members and status, in `/metrics` and `/api/v1/groups`.
/// Returns the topic.
fn exact_group_lag(
    strait: &Strait,
    admin: u16,
    cluster: &str,
    b: &str,
    group: &str,
    create_topic: impl Fn(&str),
) -> String {
    let topic = unique("lag");
    create_topic(&topic);
    let since_epoch = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    let produce = |partition: i32, start: usize, count: usize| {
        let produced = run_client(
            "ck_produce.py",
            &[
                "--bootstrap",
                b,
                "--topic",
                &topic,
                "--start",
                &start.to_string(),
                "--count",
                &count.to_string(),
                "--partition",
                &partition.to_string(),
            ],
        );
        assert_eq!(produced["delivered"], count, "{produced}");
    };
    produce(0, 0, 30);
    produce(1, 30, 20);
    // One member reads all 50 and commits them; then 15 and 5 more
    // arrive, unread.
    let consumed = run_client(
        "ck_consume.py",
        &[
            "--bootstrap",
            b,
            "--topic",
            &topic,
            "--group",
            group,
            "--expect",
            "50",
            "--commit",
        ],
    );
    assert_eq!(consumed["records"], 50, "{consumed}");
    let produced_from = since_epoch();
    produce(0, 50, 15);
    produce(1, 65, 5);
    let produced_to = since_epoch();
    let committed = support::committed(b, group, &topic);
    assert_eq!(committed, BTreeMap::from([(0, Some(30)), (1, Some(20))]));
    let expected = BTreeMap::from([(0, 15i64), (1, 5i64)]);

    let selector = |name: &str, p: i32| {
        [
            format!("{name}{{"),
            format!("cluster=\"{cluster}\""),
            format!("group=\"{group}\""),
            format!("topic=\"{topic}\""),
            format!("partition=\"{p}\""),
        ]
    };
    let value = |metrics: &str, name: &str, p: i32| {
        let parts = selector(name, p);
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        support::metric(metrics, &parts)
    };
    let metrics = metrics_until(
        admin,
        strait,
        &format!("lag not exported as {expected:?}"),
        &|m| {
            expected
                .iter()
                .all(|(&p, &lag)| value(m, "strait_group_lag_records", p) == Some(lag as f64))
                && value(m, "strait_group_lag_seconds", 0).is_some()
        },
    );
    // At most the moment the scrape above was read.
    let scraped = since_epoch();
    // Lag in seconds: the oldest unread record was produced between
    // `produced_from` and `produced_to`, and timed at a poll within one
    // interval (1 s, and the poll's own time) before the scrape.
    for p in [0, 1] {
        let seconds = value(&metrics, "strait_group_lag_seconds", p)
            .unwrap_or_else(|| panic!("no lag in seconds for partition {p}: {metrics}"));
        let (low, high) = (scraped - 1.5 - produced_to, scraped + 0.5 - produced_from);
        assert!(
            seconds >= low.max(0.0) && seconds <= high,
            "partition {p}: {seconds} s, not within {low:.2}..{high:.2}"
        );
    }
    let of_group = |name: &str, extra: &str| {
        support::metric(
            &metrics,
            &[
                name,
                &format!("cluster=\"{cluster}\""),
                &format!("group=\"{group}\""),
                extra,
            ],
        )
    };
    assert_eq!(of_group("strait_group_max_lag_records{", ""), Some(15.0));
    assert_eq!(
        of_group("strait_group_state{", "state=\"Empty\""),
        Some(1.0),
        "{metrics}"
    );
    // Behind with no members: stopped.
    assert_eq!(
        of_group("strait_group_status{", "status=\"STOP\""),
        Some(1.0),
        "{metrics}"
    );
    assert!(!metrics.contains("group=\"__"), "only the groups watched");

    let (status, body) = http(admin, &format!("/api/v1/groups/{cluster}/{group}"));
    assert_eq!(status, 200, "{body}");
    let view: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(view["state"], "Empty", "{view}");
    assert_eq!(view["members"], 0, "{view}");
    assert_eq!(view["status"], "STOP", "{view}");
    assert_eq!(view["max_lag_records"], 15, "{view}");
    for (&p, &lag) in &expected {
        let found = view["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["topic"] == topic.as_str() && x["partition"] == p)
            .unwrap_or_else(|| panic!("partition {p} in {view}"));
        assert_eq!(found["lag_records"], lag, "{view}");
        assert_eq!(found["committed"].as_i64(), committed[&p], "{view}");
        assert_eq!(found["end"].as_i64(), committed[&p].map(|c| c + lag), "{view}");
    }
    let listed: Value = serde_json::from_str(&http(admin, "/api/v1/groups").1).unwrap();
    assert_eq!(listed["watching"], true, "{listed}");
    assert!(
        listed["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["group"] == group && g["cluster"] == cluster),
        "{listed}"
    );
    let (status, body) = http(admin, &format!("/api/v1/groups/{cluster}/no-such-group"));
    assert_eq!(status, 404, "{body}");
    topic
}

/// Issue 23: groups that go away or point past their partition's end give
/// a clear state, never a negative lag or a series left behind: a deleted
/// group's series and JSON go; a deleted topic's lag goes (Kafka drops its
/// offsets, or the partition reads as gone); an offset committed beyond
/// the partition's end (as after a topic is recreated) has no lag series
/// and is ERR with its reason.
#[test]
fn deleted_groups_and_topics_and_offsets_past_the_end_leave_no_stale_lag() {
    let dc1 = Kafka::shared();
    let b = dc1.bootstrap();
    let (kept, gone) = (unique("lag-kept"), unique("lag-gone"));
    let (deleted, on_gone, past) = (unique("lag-deleted"), unique("lag-on-gone"), unique("lag-past"));
    for topic in [&kept, &gone] {
        dc1.create_topic(topic, 1, &[]);
        let produced = run_client(
            "ck_produce.py",
            &["--bootstrap", &b, "--topic", topic, "--count", "10"],
        );
        assert_eq!(produced["delivered"], 10, "{produced}");
    }
    let admin_op = |args: &[&str]| {
        let mut all = vec!["--bootstrap", b.as_str()];
        all.extend_from_slice(args);
        let out = run_client("ck_admin.py", &all);
        assert_eq!(out["ok"], true, "{args:?}: {out}");
    };
    admin_op(&["commit", "--topic", &kept, "--group", &deleted, "--offset", "4"]);
    admin_op(&["commit", "--topic", &gone, "--group", &on_gone, "--offset", "3"]);
    admin_op(&["commit", "--topic", &kept, "--group", &past, "--offset", "1000"]);

    let admin = free_port();
    let (strait, _dir) = strait_with(&format!(
        "clusters:\n  dc1: {{ bootstrap: [\"{b}\"] }}\nadmin:\n  listen: \"127.0.0.1:{admin}\"\n\
         lag:\n  interval: 1s\n  groups: \"lag-(deleted|on-gone|past)-.*\"\n"
    ));
    let lag = |metrics: &str, group: &str| {
        support::metric(
            metrics,
            &["strait_group_lag_records{", &format!("group=\"{group}\"")],
        )
    };
    let wait = |what: &str, done: &dyn Fn(&str) -> bool| metrics_until(admin, &strait, what, done);
    let metrics = wait("lag of the groups", &|m| {
        lag(m, &deleted) == Some(6.0) && lag(m, &on_gone) == Some(7.0)
    });
    // Past the end: no lag series, ERR, and why.
    assert_eq!(lag(&metrics, &past), None, "{metrics}");
    let view: Value = serde_json::from_str(&http(admin, &format!("/api/v1/groups/dc1/{past}")).1).unwrap();
    assert_eq!(view["status"], "ERR", "{view}");
    assert_eq!(
        view["partitions"][0]["standing"], "offset beyond the end",
        "{view}"
    );
    assert_eq!(view["partitions"][0]["lag_records"], Value::Null, "{view}");
    assert!(view["reason"].as_str().unwrap().contains("beyond"), "{view}");

    // A deleted group: its series and its JSON go.
    admin_op(&["delete-group", "--group", &deleted]);
    wait("the deleted group's series gone", &|m| {
        !m.contains(&format!("group=\"{deleted}\""))
    });
    let (status, _) = http(admin, &format!("/api/v1/groups/dc1/{deleted}"));
    assert_eq!(status, 404);

    // A deleted topic: its lag goes, and nothing turns negative.
    admin_op(&["delete", "--topic", &gone]);
    let metrics = wait("the deleted topic's lag gone", &|m| lag(m, &on_gone).is_none());
    assert!(
        !metrics
            .lines()
            .filter(|l| l.starts_with("strait_group_lag"))
            .any(|l| l.ends_with(" -1") || l.contains(" -")),
        "{metrics}"
    );
    let (status, body) = http(admin, &format!("/api/v1/groups/dc1/{on_gone}"));
    if status == 200 {
        let view: Value = serde_json::from_str(&body).unwrap();
        for p in view["partitions"].as_array().unwrap() {
            assert_eq!(p["standing"], "partition gone", "{view}");
            assert_eq!(p["lag_records"], Value::Null, "{view}");
        }
    }
}

/// Scrapes `admin`'s `/metrics` until `done` holds (at most a minute),
/// then returns them; fails with `what`, the lag series and `strait`'s log.
fn metrics_until(admin: u16, strait: &Strait, what: &str, done: &dyn Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let metrics = http(admin, "/metrics").1;
        if done(&metrics) {
            return metrics;
        }
        assert!(
            Instant::now() < deadline,
            "{what}:\n{}\n{}",
            lag_series(&metrics),
            strait.log()
        );
        thread::sleep(Duration::from_millis(300));
    }
}

/// The `strait_group_*` and `strait_lag_*` lines of `metrics`, for a
/// failure's message.
fn lag_series(metrics: &str) -> String {
    metrics
        .lines()
        .filter(|l| l.starts_with("strait_group") || l.starts_with("strait_lag"))
        .collect::<Vec<_>>()
        .join("\n")
}
