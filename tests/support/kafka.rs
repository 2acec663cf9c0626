//! Apache Kafka, the reference peer: KRaft brokers on loopback, started from
//! the jars `scripts/peers` copied into `.peers/kafka/libs`.
//!
//! - [`Kafka::shared`]: one combined broker+controller, started once per
//!   test process and shared by its tests (512 MB heap; topics named per
//!   test keep them apart); [`Kafka::second`], another, for a second
//!   datacenter.
//! - [`Kafka::cluster`]: a dedicated controller and three brokers
//!   (replication factor 3, `min.insync.replicas=2`), once per test process,
//!   for the failure tests: any broker can be killed, stopped, frozen with
//!   SIGSTOP and started again while the controller keeps the cluster.
//!
//! A Kafka started here lives as long as the test process: a watchdog shell
//! kills it (and removes its data) once the process is gone, since a
//! `static` is never dropped. A broker that does not start fails the test
//! with the tail of its log.

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::{free_port, open_log, peers, raw, read_log, tail};

/// How long a Kafka node may take to start (JVM start, log recovery, and
/// under CI load, the other tests).
const KAFKA_START: Duration = Duration::from_secs(90);

/// One JVM of a cluster: a broker, a controller, or both.
#[derive(Debug)]
struct Node {
    id: i32,
    /// The client listener (0 for a dedicated controller).
    port: u16,
    properties: PathBuf,
    log: PathBuf,
    heap: &'static str,
    /// JVM system properties (`-Dkey=value`).
    jvm: Vec<String>,
    child: Option<Child>,
    frozen: bool,
}

/// A running Kafka cluster (KRaft).
#[derive(Debug)]
pub struct Kafka {
    dir: PathBuf,
    nodes: Mutex<Vec<Node>>,
    /// Node ids of the brokers, in order.
    brokers: Vec<i32>,
    /// The Kafka version the jars are (`kafka_2.13-<version>.jar`).
    pub version: String,
}

/// Where `scripts/peers` put Kafka's jars.
pub fn kafka_libs() -> PathBuf {
    peers();
    super::repo_root().join(".peers/kafka/libs")
}

/// The classpath of Kafka's jars (a wildcard for `java -cp`).
pub fn kafka_classpath() -> String {
    format!("{}/*", kafka_libs().display())
}

/// Kafka's version, read off the broker jar's name.
fn kafka_version(libs: &Path) -> String {
    fs::read_dir(libs)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/peers)", libs.display()))
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("kafka_2.13-")?
                .strip_suffix(".jar")
                .map(str::to_owned)
        })
        .next()
        .unwrap_or_else(|| panic!("no kafka_2.13-*.jar in {} (run scripts/peers)", libs.display()))
}

/// Kills `pid` (if it still runs `properties`) and removes `dir` once this
/// test process has exited.
fn reap_after_us(pid: u32, properties: &Path, dir: Option<&Path>) {
    let me = std::process::id();
    let rm = dir
        .map(|d| format!("; rm -rf '{}'", d.display()))
        .unwrap_or_default();
    let script = format!(
        "while kill -0 {me} 2>/dev/null; do sleep 1; done; \
         grep -qF '{}' /proc/{pid}/cmdline 2>/dev/null && kill -9 {pid}{rm}",
        properties.display()
    );
    let _ = Command::new("setsid")
        .args(["sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

/// Runs a signal through the shell's `kill` (no unsafe code here).
fn signal(pid: u32, sig: &str) {
    let _ = Command::new("sh")
        .args(["-c", &format!("kill -{sig} {pid}")])
        .status();
}

const LOG4J: &str = "\
rootLogger.level=WARN
rootLogger.appenderRef.out.ref=OUT
appender.out.type=Console
appender.out.name=OUT
appender.out.layout.type=PatternLayout
appender.out.layout.pattern=[%d] %p %m (%c)%n
logger.server.name=kafka.server.KafkaRaftServer
logger.server.level=INFO
logger.broker.name=kafka.server.BrokerServer
logger.broker.level=INFO
logger.coordinator.name=org.apache.kafka.coordinator
logger.coordinator.level=INFO
";

impl Kafka {
    /// The single-node Kafka of this test process (started on first use).
    pub fn shared() -> &'static Kafka {
        static SHARED: OnceLock<Kafka> = OnceLock::new();
        SHARED.get_or_init(|| Kafka::start(0, &[]))
    }

    /// A second single-node Kafka of this test process (started on first
    /// use): the other datacenter.
    pub fn second() -> &'static Kafka {
        static SECOND: OnceLock<Kafka> = OnceLock::new();
        SECOND.get_or_init(|| Kafka::start(0, &[]))
    }

    /// The three-broker cluster of this test process (started on first
    /// use): replication factor 3 and `min.insync.replicas=2` by default.
    /// (Topics made with `--replica-assignment` did not take the brokers'
    /// `min.insync.replicas` in these runs: give it as a topic config.)
    pub fn cluster() -> &'static Kafka {
        static CLUSTER: OnceLock<Kafka> = OnceLock::new();
        CLUSTER.get_or_init(|| {
            Kafka::start(
                3,
                &[
                    "default.replication.factor=3",
                    "min.insync.replicas=2",
                    "offsets.topic.replication.factor=3",
                    "transaction.state.log.replication.factor=3",
                    "transaction.state.log.min.isr=2",
                    // Leaders move back soon after a restarted broker is in sync.
                    "leader.imbalance.check.interval.seconds=5",
                ],
            )
        })
    }

    /// Starts a cluster: with `brokers` 0, one combined broker+controller;
    /// otherwise a dedicated controller and that many brokers. `extra` are
    /// more `server.properties` lines for every broker.
    pub fn start(brokers: usize, extra: &[&str]) -> Kafka {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Kafka::launch(brokers, &|_| extra.clone(), None)
    }

    /// A single combined node whose PLAINTEXT listener is on `port`, with
    /// the `server.properties` lines `extra` makes of the controller's port
    /// (so they can list listeners of their own: later lines win); lines
    /// beginning with `-D` are JVM system properties instead.
    pub fn start_single(port: u16, extra: &dyn Fn(u16) -> Vec<String>) -> Kafka {
        Kafka::launch(0, extra, Some(port))
    }

    fn launch(brokers: usize, extra: &dyn Fn(u16) -> Vec<String>, port: Option<u16>) -> Kafka {
        let libs = kafka_libs();
        let version = kafka_version(&libs);
        let dir = tempfile::Builder::new()
            .prefix("kafka-")
            .tempdir()
            .expect("tempdir")
            .keep();
        fs::write(dir.join("log4j2.properties"), LOG4J).unwrap();
        let controller_port = free_port();
        let extra = extra(controller_port);
        // Small segments: a test's data is little, and compaction needs
        // rolled segments.
        let segments = "log.segment.bytes=16777216".to_owned();
        let common = |node: i32| {
            let mut lines = node_properties(node, controller_port, &dir.join(format!("data-{node}")), false);
            lines.push(segments.clone());
            lines
        };
        let mut nodes = Vec::new();
        if brokers == 0 {
            let port = port.unwrap_or_else(free_port);
            let mut lines =
                combined_node_properties("127.0.0.1", port, port, controller_port, &dir.join("data-1"));
            lines.push(segments.clone());
            lines.extend(extra.iter().cloned());
            nodes.push(Node::write(&dir, 1, port, lines, "512m"));
        } else {
            let mut lines = common(1);
            lines.extend([
                "process.roles=controller".into(),
                format!("listeners=CONTROLLER://127.0.0.1:{controller_port}"),
            ]);
            nodes.push(Node::write(&dir, 1, 0, lines, "256m"));
            for id in 2..2 + brokers as i32 {
                let port = free_port();
                let mut lines = common(id);
                lines.extend([
                    "process.roles=broker".into(),
                    format!("listeners=PLAINTEXT://127.0.0.1:{port}"),
                    format!("advertised.listeners=PLAINTEXT://127.0.0.1:{port}"),
                ]);
                lines.extend(extra.iter().cloned());
                nodes.push(Node::write(&dir, id, port, lines, "384m"));
            }
        }
        // Format every node's directory (in parallel: each is a JVM start).
        // Each cluster an id of its own, as real ones have (loop prevention
        // tells clusters apart by it).
        let cluster_id = &new_cluster_id();
        std::thread::scope(|s| {
            for n in &nodes {
                s.spawn(move || {
                    let out = format_command(&n.properties, cluster_id)
                        .output()
                        .expect("running kafka.tools.StorageTool");
                    assert!(
                        out.status.success(),
                        "formatting Kafka node {}: {}\n{}",
                        n.id,
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    );
                });
            }
        });
        let brokers_ids: Vec<i32> = nodes.iter().filter(|n| n.port != 0).map(|n| n.id).collect();
        let kafka = Kafka {
            dir: dir.clone(),
            nodes: Mutex::new(nodes),
            brokers: brokers_ids,
            version,
        };
        {
            let mut nodes = kafka.nodes.lock().unwrap();
            for (i, n) in nodes.iter_mut().enumerate() {
                // The watchdog of the first node also removes the data.
                n.spawn(&kafka.dir, i == 0);
            }
        }
        kafka.wait_brokers(&kafka.brokers.clone());
        eprintln!(
            "kafka {}: {} up in {}",
            kafka.version,
            kafka.bootstrap(),
            dir.display()
        );
        kafka
    }

    /// `host:port,...` of every broker, for `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        let nodes = self.nodes.lock().unwrap();
        nodes
            .iter()
            .filter(|n| n.port != 0)
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The first broker's client port.
    pub fn port(&self) -> u16 {
        self.broker_port(self.brokers[0])
    }

    /// The client port of broker `id`.
    pub fn broker_port(&self, id: i32) -> u16 {
        let nodes = self.nodes.lock().unwrap();
        nodes
            .iter()
            .find(|n| n.id == id)
            .map(|n| n.port)
            .expect("no such broker")
    }

    /// The brokers' node ids.
    pub fn brokers(&self) -> &[i32] {
        &self.brokers
    }

    /// The leader of `topic`'s partition `p` (Metadata from a live broker).
    pub fn leader(&self, topic: &str, p: i32) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            for id in &self.brokers {
                let port = self.broker_port(*id);
                let Some(md) = try_metadata(port) else { continue };
                let leader = md
                    .topics
                    .iter()
                    .find(|t| t.name.as_ref().map(|n| n.as_str()) == Some(topic))
                    .and_then(|t| t.partitions.iter().find(|x| x.partition_index == p))
                    .map(|x| x.leader_id.0);
                if let Some(l) = leader.filter(|l| *l >= 0) {
                    return l;
                }
            }
            assert!(Instant::now() < deadline, "{topic} p{p} has no leader");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until every replica of `topic`'s partition `p` is in sync.
    pub fn wait_in_sync(&self, topic: &str, p: i32) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let in_sync = self.brokers.iter().any(|id| {
                try_metadata(self.broker_port(*id))
                    .and_then(|md| {
                        let t = md
                            .topics
                            .into_iter()
                            .find(|t| t.name.as_ref().map(|n| n.as_str()) == Some(topic))?;
                        t.partitions.into_iter().find(|x| x.partition_index == p)
                    })
                    .is_some_and(|x| {
                        !x.replica_nodes.is_empty() && x.isr_nodes.len() == x.replica_nodes.len()
                    })
            });
            if in_sync {
                return;
            }
            assert!(Instant::now() < deadline, "{topic} p{p}: replicas not in sync");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// SIGKILLs node `id`.
    pub fn kill(&self, id: i32) {
        let mut nodes = self.nodes.lock().unwrap();
        let n = nodes.iter_mut().find(|n| n.id == id).expect("no such node");
        if let Some(mut c) = n.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops node `id` the way an operator does: SIGTERM, a controlled
    /// shutdown that moves its leaders away first.
    pub fn shutdown(&self, id: i32) {
        let mut nodes = self.nodes.lock().unwrap();
        let n = nodes.iter_mut().find(|n| n.id == id).expect("no such node");
        if let Some(mut c) = n.child.take() {
            signal(c.id(), "TERM");
            let deadline = Instant::now() + Duration::from_secs(60);
            while c.try_wait().ok().flatten().is_none() {
                if Instant::now() > deadline {
                    let _ = c.kill();
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// Freezes (SIGSTOP) or thaws (SIGCONT) node `id`: its sockets stay open
    /// and nothing answers.
    pub fn freeze(&self, id: i32, frozen: bool) {
        let mut nodes = self.nodes.lock().unwrap();
        let n = nodes.iter_mut().find(|n| n.id == id).expect("no such node");
        let pid = n.child.as_ref().expect("node not running").id();
        signal(pid, if frozen { "STOP" } else { "CONT" });
        n.frozen = frozen;
    }

    /// Thaws every frozen node and starts every stopped one, then waits
    /// for all brokers: a failure drill's cleanup, so that the next drill
    /// finds the whole cluster.
    pub fn heal(&self) {
        let mut restarted = false;
        {
            let mut nodes = self.nodes.lock().unwrap();
            for n in nodes.iter_mut() {
                if n.frozen {
                    if let Some(c) = &n.child {
                        signal(c.id(), "CONT");
                    }
                    n.frozen = false;
                }
                if n.child.is_none() {
                    n.spawn(&self.dir, false);
                    restarted = true;
                }
            }
        }
        if restarted {
            self.wait_brokers(&self.brokers.clone());
        }
    }

    /// Starts node `id` again (after [`kill`](Self::kill) or
    /// [`shutdown`](Self::shutdown)) and waits until it is a broker again.
    pub fn restart(&self, id: i32) {
        {
            let mut nodes = self.nodes.lock().unwrap();
            let n = nodes.iter_mut().find(|n| n.id == id).expect("no such node");
            assert!(n.child.is_none(), "node {id} is running");
            n.spawn(&self.dir, false);
        }
        if self.brokers.contains(&id) {
            self.wait_brokers(&[id]);
        }
    }

    /// What node `id` logged.
    pub fn log(&self, id: i32) -> String {
        let nodes = self.nodes.lock().unwrap();
        let n = nodes.iter().find(|n| n.id == id).expect("no such node");
        read_log(&n.log)
    }

    /// Waits until each of `ids` answers and the cluster's metadata lists it.
    fn wait_brokers(&self, ids: &[i32]) {
        let deadline = Instant::now() + KAFKA_START;
        for id in ids {
            let port = self.broker_port(*id);
            loop {
                let listed = try_metadata(port)
                    .map(|md| md.brokers.iter().any(|b| b.node_id.0 == *id))
                    .unwrap_or(false);
                if listed {
                    break;
                }
                let exited = {
                    let mut nodes = self.nodes.lock().unwrap();
                    let n = nodes.iter_mut().find(|n| n.id == *id).unwrap();
                    n.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
                };
                if exited.is_some() || Instant::now() > deadline {
                    let log = self.log(*id);
                    panic!(
                        "Kafka broker {id} on 127.0.0.1:{port} did not start ({}): \n--- log tail ---\n{}",
                        exited
                            .map(|s| format!("exited: {s}"))
                            .unwrap_or_else(|| format!("not up after {KAFKA_START:?}")),
                        tail(&log, 6000)
                    );
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }

    /// Runs one of Kafka's own tools (`org.apache.kafka.tools.TopicCommand`,
    /// `...LeaderElectionCommand`, ...) with `args`; returns its output, and
    /// fails the test if it fails.
    pub fn tool(&self, class: &str, args: &[&str]) -> String {
        let out = Command::new("java")
            .args(["-Xmx256m", "-cp", &kafka_classpath()])
            .arg(format!(
                "-Dlog4j2.configurationFile={}/log4j2.properties",
                self.dir.display()
            ))
            .arg(class)
            .args(args)
            .env_remove("LD_LIBRARY_PATH")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running {class}: {e}"));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{class} {args:?} failed: {text}");
        text
    }

    /// Creates `topic` with Kafka's own `kafka-topics` (TopicCommand):
    /// `partitions` partitions, the cluster's default replication, and
    /// `configs` (`key=value`).
    pub fn create_topic(&self, topic: &str, partitions: i32, configs: &[&str]) {
        self.topic_command(topic, &["--partitions", &partitions.to_string()], configs);
    }

    /// Creates `topic` with an explicit replica assignment: one list of
    /// broker ids per partition, the first the preferred leader.
    pub fn create_topic_assigned(&self, topic: &str, replicas: &[&[i32]], configs: &[&str]) {
        let assignment = replicas
            .iter()
            .map(|r| r.iter().map(i32::to_string).collect::<Vec<_>>().join(":"))
            .collect::<Vec<_>>()
            .join(",");
        self.topic_command(topic, &["--replica-assignment", &assignment], configs);
    }

    fn topic_command(&self, topic: &str, layout: &[&str], configs: &[&str]) {
        let b = self.bootstrap();
        let mut args = vec!["--bootstrap-server", &b, "--create", "--topic", topic];
        args.extend(layout);
        for c in configs {
            args.extend(["--config", c]);
        }
        self.tool("org.apache.kafka.tools.TopicCommand", &args);
    }
}

/// The `server.properties` lines every node of a cluster shares: node
/// `node` of a quorum whose one voter is 127.0.0.1:`controller`, its data
/// in `data`, and with `single` (one broker) internal topics of one
/// replica.
fn node_properties(node: i32, controller: u16, data: &Path, single: bool) -> Vec<String> {
    let mut lines = vec![
        format!("node.id={node}"),
        format!("controller.quorum.voters=1@127.0.0.1:{controller}"),
        "controller.listener.names=CONTROLLER".into(),
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT".into(),
        "inter.broker.listener.name=PLAINTEXT".into(),
        format!("log.dirs={}", data.display()),
        "group.initial.rebalance.delay.ms=0".into(),
        "num.partitions=1".into(),
        "offsets.topic.num.partitions=4".into(),
        "transaction.state.log.num.partitions=4".into(),
        "share.coordinator.state.topic.num.partitions=1".into(),
    ];
    if single {
        lines.extend([
            "offsets.topic.replication.factor=1".into(),
            "transaction.state.log.replication.factor=1".into(),
            "transaction.state.log.min.isr=1".into(),
            "share.coordinator.state.topic.replication.factor=1".into(),
            "share.coordinator.state.topic.min.isr=1".into(),
        ]);
    }
    lines
}

/// The `server.properties` lines of one combined broker+controller
/// (KRaft) node: clients' listener on `host:port`, advertised as
/// 127.0.0.1:`advertised` (a relay's port, say), the controller on
/// 127.0.0.1:`controller`, its data in `data`. The tests' single nodes
/// and the benchmarks' brokers are all written by this.
pub fn combined_node_properties(
    host: &str,
    port: u16,
    advertised: u16,
    controller: u16,
    data: &Path,
) -> Vec<String> {
    let mut lines = node_properties(1, controller, data, true);
    lines.extend([
        "process.roles=broker,controller".into(),
        format!("listeners=PLAINTEXT://{host}:{port},CONTROLLER://127.0.0.1:{controller}"),
        format!("advertised.listeners=PLAINTEXT://127.0.0.1:{advertised}"),
    ]);
    lines
}

/// `kafka.tools.StorageTool format` of the node configured by
/// `properties` into cluster `cluster_id` (22 base64 characters), as a
/// command to run.
pub fn format_command(properties: &Path, cluster_id: &str) -> Command {
    let mut cmd = Command::new("java");
    cmd.args([
        "-Xmx256m",
        "-cp",
        &kafka_classpath(),
        "kafka.tools.StorageTool",
        "format",
    ])
    .args(["-t", cluster_id, "-c"])
    .arg(properties)
    .env_remove("LD_LIBRARY_PATH")
    .stdin(Stdio::null());
    cmd
}

/// Metadata v12 (every topic) from the broker at `port`, or `None` if it
/// does not answer.
fn try_metadata(port: u16) -> Option<kafka_protocol::messages::MetadataResponse> {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    // A closed port or a broker not yet serving: no panic from raw::Conn.
    super::api_versions_ping(addr, Duration::from_secs(2)).ok()?;
    std::panic::catch_unwind(|| raw::Conn::open(port, "strait-tests").metadata()).ok()
}

impl Node {
    /// A node of `lines`: `server.properties` lines, and JVM system
    /// properties (those beginning with `-D`).
    fn write(dir: &Path, id: i32, port: u16, lines: Vec<String>, heap: &'static str) -> Node {
        let properties = dir.join(format!("node-{id}.properties"));
        let (jvm, lines): (Vec<String>, Vec<String>) = lines.into_iter().partition(|l| l.starts_with("-D"));
        fs::write(&properties, lines.join("\n") + "\n").unwrap();
        Node {
            id,
            port,
            properties,
            log: dir.join(format!("node-{id}.log")),
            heap,
            jvm,
            child: None,
            frozen: false,
        }
    }

    fn spawn(&mut self, dir: &Path, owns_dir: bool) {
        let (out, err) = open_log(&self.log);
        let child = Command::new("java")
            .arg(format!("-Xmx{}", self.heap))
            .arg(format!("-Xms{}", self.heap))
            .args([
                "-XX:+UseG1GC",
                "-XX:MaxGCPauseMillis=20",
                "-Djava.awt.headless=true",
            ])
            .arg(format!(
                "-Dlog4j2.configurationFile={}/log4j2.properties",
                dir.display()
            ))
            .args(&self.jvm)
            .arg("-cp")
            .arg(format!("{}/*", kafka_libs().display()))
            .arg("kafka.Kafka")
            .arg(&self.properties)
            .env_remove("LD_LIBRARY_PATH")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawning java kafka.Kafka");
        reap_after_us(child.id(), &self.properties, owns_dir.then_some(dir));
        self.child = Some(child);
    }
}

/// A Kafka cluster id: 16 bytes, unpadded URL-safe base64 (22 characters),
/// different for every cluster a test run starts.
fn new_cluster_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STARTED: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let high = u64::from(std::process::id()) << 32 | STARTED.fetch_add(1, Ordering::Relaxed);
    let bytes = [nanos.to_be_bytes(), high.to_be_bytes()].concat();
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bits = u128::from_be_bytes(bytes.try_into().expect("16 bytes"));
    // 22 characters of 6 bits hold 132: the last character's low 4 bits are 0.
    (0..22)
        .map(|i| {
            let shift: i32 = 128 - 6 * (i + 1);
            let sextet = if shift >= 0 { bits >> shift } else { bits << -shift };
            ALPHABET[(sextet & 63) as usize] as char
        })
        .collect()
}
