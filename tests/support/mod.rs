//! Shared harness for integration tests that talk to real Kafka peers.
//!
//! Use it from a test crate with `mod support;`. What it gives:
//!
//! - [`peers()`]: installs the peers once per test process (`scripts/peers`,
//!   idempotent, fast when already installed) and returns their paths. A
//!   missing peer is a panic (the test fails, it never skips).
//! - [`Tansu`]: a real Kafka-compatible broker (Tansu 0.6.0, memory storage)
//!   on a free loopback port, killed on drop.
//! - [`Strait`]: our own `strait serve` on a free loopback port with a
//!   temporary data directory, with kill / stop / restart.
//! - [`run_client`] / [`try_client`]: run a script from `tests/clients/` with
//!   the venv's Python (or `java:produce|consume|admin`: the Java client
//!   `tests/clients/JavaClient.java`, compiled once per process; or
//!   `kafkajs:produce|consume|admin`: `tests/clients/kafkajs/client.js`
//!   under node; or `aiokafka:produce|consume|admin`:
//!   `tests/clients/ak_client.py`; or `sarama:produce|consume|admin`: the Go client
//!   `tests/clients/sarama/main.go`, built once per process) and parse the
//!   JSON line it prints last.
//! - [`kcat`]: Debian's kcat (librdkafka 2.0.2), with a timeout.
//!
//! Every child process runs under a timeout and is killed when it expires.

#![allow(dead_code)]

pub mod instances;
pub mod kafka;
pub mod local;
pub mod raw;
pub mod relay;
pub mod tls;

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

/// How long a client script may run before it is killed.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);
/// How long kcat may run before it is killed.
pub const KCAT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a broker may take to accept connections after it was spawned.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The repository root (where `scripts/` and `tests/` live).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Paths of the installed peers.
#[derive(Debug, Clone)]
pub struct Peers {
    /// The venv's Python (confluent-kafka, kafka-python).
    pub python: PathBuf,
    /// Debian's kcat (librdkafka 2.0.2).
    pub kcat: PathBuf,
    /// The Tansu 0.6.0 broker binary.
    pub tansu: PathBuf,
    /// `tests/clients/`, where the client scripts live.
    pub clients: PathBuf,
    /// The Java client's jars (kafka-clients 3.9.2 and its runtime).
    pub java_lib: PathBuf,
    /// The current Java client's (kafka-clients 4.1.1, Kafka's own release).
    pub java4_lib: PathBuf,
    /// kafkajs and its codec packages (`NODE_PATH` for the node client).
    pub node_modules: PathBuf,
    /// An OAuth 2.0 server's jars (NAV's mock-oauth2-server and its runtime).
    pub oauth_lib: PathBuf,
    /// What `scripts/peers` printed: the installed versions.
    pub versions: String,
}

/// Installs the peers (once per test process) and returns their paths.
///
/// Panics, in every test that calls it, if `scripts/peers` fails or a peer
/// is missing afterwards.
pub fn peers() -> Peers {
    static PEERS: OnceLock<Result<Peers, String>> = OnceLock::new();
    match PEERS.get_or_init(install_peers) {
        Ok(p) => p.clone(),
        Err(e) => panic!("{e}"),
    }
}

fn install_peers() -> Result<Peers, String> {
    let root = repo_root();
    let script = root.join("scripts/peers");
    let out = Command::new(&script)
        .env_remove("LD_LIBRARY_PATH")
        .current_dir(&root)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e} (run scripts/peers)", script.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(format!(
            "scripts/peers failed ({}): the test peers are not installed; run scripts/peers\n\
             --- stdout ---\n{stdout}--- stderr ---\n{stderr}",
            out.status
        ));
    }
    let peers = root.join(".peers");
    let p = Peers {
        python: peers.join("venv/bin/python"),
        kcat: peers.join("bin/kcat"),
        tansu: peers.join("bin/tansu"),
        clients: root.join("tests/clients"),
        java_lib: peers.join("java/lib"),
        java4_lib: peers.join("java4/lib"),
        node_modules: peers.join("node/node_modules"),
        oauth_lib: peers.join("oauth/libs"),
        versions: stdout,
    };
    for (name, path) in [
        ("python (venv)", &p.python),
        ("kcat", &p.kcat),
        ("tansu", &p.tansu),
        ("kafka-clients.jar", &p.java_lib.join("kafka-clients.jar")),
        ("kafka-clients.jar (4)", &p.java4_lib.join("kafka-clients.jar")),
        ("kafkajs", &p.node_modules.join("kafkajs")),
        (
            "mock-oauth2-server",
            &p.oauth_lib.join("mock-oauth2-server-2.1.10.jar"),
        ),
    ] {
        if !path.exists() {
            return Err(format!(
                "peer {name} is missing at {} after scripts/peers succeeded: run scripts/peers --force",
                path.display()
            ));
        }
    }
    Ok(p)
}

/// A loopback port that was free a moment ago (bound to port 0, released).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
    l.local_addr().expect("local_addr").port()
}

/// Sends a Kafka ApiVersions v0 request and checks that a well-formed answer
/// with the same correlation id and error code 0 comes back.
pub fn api_versions_ping(addr: SocketAddr, timeout: Duration) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind};
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let client_id = b"strait-test";
    let correlation_id: i32 = 0x5354_5254;
    let mut body = Vec::new();
    body.extend_from_slice(&18i16.to_be_bytes()); // ApiVersions
    body.extend_from_slice(&0i16.to_be_bytes()); // v0
    body.extend_from_slice(&correlation_id.to_be_bytes());
    body.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    body.extend_from_slice(client_id);
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    s.write_all(&frame)?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let len = i32::from_be_bytes(len);
    if !(6..=1 << 20).contains(&len) {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("ApiVersions response of {len} bytes"),
        ));
    }
    let mut resp = vec![0u8; len as usize];
    s.read_exact(&mut resp)?;
    let got = i32::from_be_bytes(resp[0..4].try_into().unwrap());
    let error = i16::from_be_bytes(resp[4..6].try_into().unwrap());
    if got != correlation_id || error != 0 {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("ApiVersions answer: correlation id {got:#x}, error code {error}"),
        ));
    }
    Ok(())
}

/// Polls until `addr` accepts a TCP connection (and, with `ping`, answers
/// ApiVersions), failing early if the child exits.
fn wait_ready(child: &mut Child, addr: SocketAddr, ping: bool, log: &Path) -> Result<(), String> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!(
                "exited ({status}) before accepting on {addr}\n--- log ---\n{}",
                read_log(log)
            ));
        }
        let ok = if ping {
            api_versions_ping(addr, Duration::from_secs(2)).map_err(|e| e.to_string())
        } else {
            TcpStream::connect_timeout(&addr, Duration::from_secs(1))
                .map(drop)
                .map_err(|e| e.to_string())
        };
        let last = match ok {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if Instant::now() > deadline {
            return Err(format!(
                "not ready on {addr} after {START_TIMEOUT:?} (last error: {last})\n--- log ---\n{}",
                read_log(log)
            ));
        }
        thread::sleep(Duration::from_millis(50));
    }
}

fn read_log(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| format!("(cannot read {}: {e})", path.display()))
}

fn open_log(path: &Path) -> (File, File) {
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    let g = f.try_clone().expect("cloning log file handle");
    (f, g)
}

fn kill_and_wait(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Sends SIGTERM to a process (through the shell's `kill`, no unsafe code).
fn sigterm(pid: u32) {
    let _ = Command::new("sh")
        .args(["-c", &format!("kill -TERM {pid}")])
        .status();
}

/// A Tansu 0.6.0 broker (memory storage) on a free loopback port.
#[derive(Debug)]
pub struct Tansu {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
    log: PathBuf,
}

impl Tansu {
    /// Starts a broker with cluster id `tansu_cluster`.
    pub fn start() -> Tansu {
        Tansu::start_with(&[])
    }

    /// Starts a broker with extra `tansu broker` arguments (for example
    /// `["--cluster-id", "dc2"]`).
    pub fn start_with(extra: &[&str]) -> Tansu {
        let peers = peers();
        let dir = tempfile::Builder::new()
            .prefix("tansu-")
            .tempdir()
            .expect("tempdir");
        let log = dir.path().join("tansu.log");
        let mut last = String::new();
        // A port found free can be taken before Tansu binds it: retry.
        for _ in 0..3 {
            let port = free_port();
            let url = format!("tcp://127.0.0.1:{port}");
            let (out, err) = open_log(&log);
            let mut cmd = Command::new(&peers.tansu);
            // cargo test points LD_LIBRARY_PATH at the rdkafka crate's
            // librdkafka build; peers must load their own.
            cmd.env_remove("LD_LIBRARY_PATH");
            cmd.arg("broker")
                .args(["--listener-url", &url, "--advertised-listener-url", &url])
                .args(["--storage-engine", "memory://tansu/"])
                .args(extra)
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err);
            for var in [
                "CLUSTER_ID",
                "LISTENER_URL",
                "ADVERTISED_LISTENER_URL",
                "STORAGE_ENGINE",
                "SCHEMA_REGISTRY",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ] {
                cmd.env_remove(var);
            }
            let mut child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("spawning {}: {e}", peers.tansu.display()));
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            match wait_ready(&mut child, addr, true, &log) {
                Ok(()) => {
                    return Tansu {
                        child,
                        port,
                        dir,
                        log,
                    }
                }
                Err(e) => {
                    kill_and_wait(&mut child);
                    last = e;
                }
            }
        }
        panic!("Tansu did not start: {last}");
    }

    /// `127.0.0.1:PORT`, for `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// What the broker printed so far.
    pub fn log(&self) -> String {
        read_log(&self.log)
    }
}

impl Drop for Tansu {
    fn drop(&mut self) {
        kill_and_wait(&mut self.child);
        if thread::panicking() {
            eprintln!(
                "--- tansu log ({}) ---\n{}",
                self.bootstrap(),
                read_log(&self.log)
            );
        }
    }
}

/// Our own `strait serve --listen 127.0.0.1:PORT --data-dir DIR [extra]`.
///
/// stdout and stderr go to `strait.log` in the temporary directory (appended
/// across restarts); it is printed when the owning test panics.
#[derive(Debug)]
pub struct Strait {
    child: Option<Child>,
    port: u16,
    extra: Vec<String>,
    dir: tempfile::TempDir,
    /// The data directory when not `dir/data`.
    data: Option<PathBuf>,
    log: PathBuf,
    starts: u32,
    /// STRAIT_LOG for the process, when not the test's own.
    filter: Option<String>,
}

impl Strait {
    /// Starts `strait serve` on a free port with a fresh data directory.
    pub fn start(extra: &[&str]) -> Strait {
        Strait::start_with(None, extra, None)
    }

    /// Starts `strait serve` with its data in `data` (the log stays in a
    /// directory of its own, off that file system).
    pub fn start_on(data: &Path, extra: &[&str]) -> Strait {
        Strait::start_with(Some(data.to_path_buf()), extra, None)
    }

    /// Starts `strait serve` logging what `filter` (STRAIT_LOG) selects.
    pub fn start_logging(filter: &str, extra: &[&str]) -> Strait {
        Strait::start_with(None, extra, Some(filter))
    }

    fn start_with(data: Option<PathBuf>, extra: &[&str], filter: Option<&str>) -> Strait {
        let dir = tempfile::Builder::new()
            .prefix("strait-")
            .tempdir()
            .expect("tempdir");
        let log = dir.path().join("strait.log");
        fs::create_dir_all(dir.path().join("data")).expect("creating data dir");
        let mut s = Strait {
            child: None,
            port: 0,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            dir,
            data,
            log,
            starts: 0,
            filter: filter.map(str::to_owned),
        };
        let mut last = String::new();
        for _ in 0..3 {
            s.port = free_port();
            match s.spawn() {
                Ok(()) => return s,
                Err(e) => last = e,
            }
        }
        panic!("strait serve did not start: {last}");
    }

    fn spawn(&mut self) -> Result<(), String> {
        self.starts += 1;
        let (mut out, err) = open_log(&self.log);
        let listen = format!("127.0.0.1:{}", self.port);
        let data = self.data_dir();
        let _ = writeln!(
            out,
            "=== start #{} (strait serve --listen {listen} --data-dir {} {}) ===",
            self.starts,
            data.display(),
            self.extra.join(" ")
        );
        let mut command = Command::new(env!("CARGO_BIN_EXE_strait"));
        if let Some(filter) = &self.filter {
            command.env("STRAIT_LOG", filter);
        }
        let mut child = command
            .arg("serve")
            .args(["--listen", &listen])
            .arg("--data-dir")
            .arg(&data)
            .args(&self.extra)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("spawning strait: {e}"))?;
        let addr: SocketAddr = ([127, 0, 0, 1], self.port).into();
        match wait_ready(&mut child, addr, false, &self.log) {
            Ok(()) => {
                self.child = Some(child);
                Ok(())
            }
            Err(e) => {
                kill_and_wait(&mut child);
                Err(e)
            }
        }
    }

    /// `127.0.0.1:PORT`, for `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The `--data-dir` (kept across restarts).
    pub fn data_dir(&self) -> PathBuf {
        self.data.clone().unwrap_or_else(|| self.dir.path().join("data"))
    }

    /// Everything the process printed, across restarts.
    pub fn log(&self) -> String {
        read_log(&self.log)
    }

    /// The first log line containing every one of `words`, waiting up to
    /// 10 s for it (Strait logs a closed connection just after closing).
    pub fn log_line(&self, words: &[&str]) -> Option<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let found = self
                .log()
                .lines()
                .find(|l| words.iter().all(|w| l.contains(w)))
                .map(str::to_owned);
            if found.is_some() || Instant::now() >= deadline {
                return found;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL (a crash) and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_and_wait(&mut c);
        }
    }

    /// SIGTERM and wait for the exit (30 s at most, then SIGKILL and panic).
    pub fn stop(&mut self) -> ExitStatus {
        let mut c = self.child.take().expect("strait is not running");
        sigterm(c.id());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = c.try_wait().expect("waiting for strait") {
                return status;
            }
            if Instant::now() > deadline {
                kill_and_wait(&mut c);
                panic!(
                    "strait did not exit within 30 s of SIGTERM\n--- log ---\n{}",
                    self.log()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the server again on the same port and data directory (kills a
    /// running one first).
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn() {
                Ok(()) => return,
                // The old socket may linger briefly; try again.
                Err(e) if Instant::now() < deadline => {
                    eprintln!("strait restart failed, retrying: {e}");
                    thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("strait did not restart: {e}"),
            }
        }
    }
}

impl Drop for Strait {
    fn drop(&mut self) {
        self.kill();
        if thread::panicking() {
            eprintln!(
                "--- strait log ({}) ---\n{}",
                self.bootstrap(),
                read_log(&self.log)
            );
        }
    }
}

/// A finished (or timed-out) child process.
#[derive(Debug)]
pub struct Finished {
    pub output: Output,
    pub timed_out: bool,
    pub elapsed: Duration,
}

/// Runs `cmd` with `stdin` fed to it, killing it after `timeout`.
pub fn run_timeout(mut cmd: Command, stdin: Option<&[u8]>, timeout: Duration) -> Finished {
    let started = Instant::now();
    let mut child = cmd
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
    let writer = stdin.map(|data| {
        let mut pipe = child.stdin.take().unwrap();
        let data = data.to_vec();
        thread::spawn(move || {
            let _ = pipe.write_all(&data);
        })
    });
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out_reader = thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out_pipe.read_to_end(&mut v);
        v
    });
    let err_reader = thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err_pipe.read_to_end(&mut v);
        v
    });
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for child") {
            break s;
        }
        if started.elapsed() > timeout {
            timed_out = true;
            let _ = child.kill();
            break child.wait().expect("waiting for killed child");
        }
        thread::sleep(Duration::from_millis(10));
    };
    if let Some(w) = writer {
        let _ = w.join();
    }
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    Finished {
        output: Output {
            status,
            stdout,
            stderr,
        },
        timed_out,
        elapsed: started.elapsed(),
    }
}

/// One run of a client script.
#[derive(Debug)]
pub struct ClientRun {
    /// `script arg...`, for messages.
    pub command: String,
    pub status: ExitStatus,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
    /// The last stdout line parsed as JSON (None if absent or not JSON).
    pub json: Option<serde_json::Value>,
    pub elapsed: Duration,
}

impl ClientRun {
    /// A description for assertion messages: command, status, stderr, stdout.
    pub fn describe(&self) -> String {
        format!(
            "{} -> {}{} after {:.1?}\n--- stderr ---\n{}\n--- stdout (tail) ---\n{}",
            self.command,
            self.status,
            if self.timed_out { " (TIMED OUT)" } else { "" },
            self.elapsed,
            tail(&self.stderr, 6000),
            tail(&self.stdout, 4000)
        )
    }
}

fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut i = s.len() - max;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    &s[i..]
}

/// Builds a compiled test client from `sources` into a directory named by
/// their hash under the cargo target's temporary directory, once: test
/// processes share it and an edit rebuilds. `build` gets the first source
/// and an empty output directory. Panics (failing the test) if it fails.
fn built_client(sources: &[PathBuf], build: impl FnOnce(&Path, &Path) -> Command) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for source in sources {
        let text = fs::read(source).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
        text.hash(&mut h);
    }
    let source = &sources[0];
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let name = source.file_stem().unwrap_or_default().to_string_lossy();
    let dir = base.join(format!("client-{name}-{:016x}", h.finish()));
    if dir.join("built").exists() {
        return dir;
    }
    // Build aside, then rename: a concurrent process may win the race.
    let tmp = base.join(format!("client-{name}-tmp-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp).expect("creating the build directory");
    let mut cmd = build(source, &tmp);
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot build {}: {e} (run scripts/peers)", source.display()));
    assert!(
        out.status.success(),
        "building {} failed ({:?}):\n{}{}",
        source.display(),
        cmd,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    fs::write(tmp.join("built"), b"").expect("marking the build done");
    if fs::rename(&tmp, &dir).is_err() {
        let _ = fs::remove_dir_all(&tmp);
    }
    dir
}

/// The environment of a Go build from the modules `scripts/peers`
/// downloaded into `.peers/go`: offline, nothing fetched during tests.
fn go_module_env(cmd: &mut Command) {
    let go = repo_root().join(".peers/go");
    cmd.env("GOPATH", &go)
        .env("GOMODCACHE", go.join("mod"))
        .env("GOCACHE", go.join("cache"))
        .env("GOFLAGS", "-modcacherw -buildvcs=false")
        .env("GOPROXY", "off")
        .env("GO111MODULE", "on")
        .env("CGO_ENABLED", "0");
}

/// `tests/clients/JavaClient.java` compiled against the jars in `lib`
/// (once per process for each: `cache`).
fn java_classes(peers: &Peers, lib: &Path, cache: &'static OnceLock<PathBuf>) -> PathBuf {
    cache
        .get_or_init(|| {
            built_client(
                &[
                    peers.clients.join("JavaClient.java"),
                    lib.join("kafka-clients.jar"),
                ],
                |source, out| {
                    let mut cmd = Command::new("javac");
                    cmd.arg("-d").arg(out).arg("-cp").arg(lib.join("*")).arg(source);
                    cmd
                },
            )
        })
        .clone()
}

/// `tests/clients/sarama/main.go` built against Debian's Sarama (GOPATH
/// mode: no module proxy is needed).
fn sarama_client(peers: &Peers) -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("go-build-cache");
            built_client(&[peers.clients.join("sarama/main.go")], |source, out| {
                let mut cmd = Command::new("go");
                cmd.args(["build", "-o"])
                    .arg(out.join("sarama-client"))
                    .arg(source)
                    .env("GO111MODULE", "off")
                    .env("GOPATH", "/usr/share/gocode")
                    .env("GOCACHE", &cache)
                    .env("CGO_CFLAGS", "-Wno-deprecated-declarations");
                cmd
            })
            .join("sarama-client")
        })
        .clone()
}

/// `tests/clients/sarama/main.go` built against the current Sarama
/// (`tests/clients/sarama-current/`: its go.mod pins github.com/IBM/sarama).
fn sarama_current_client(peers: &Peers) -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let dir = peers.clients.join("sarama-current");
            let sources = ["build.sh", "go.mod", "go.sum", "current.go"]
                .iter()
                .map(|f| dir.join(f))
                .chain([peers.clients.join("sarama/main.go")])
                .collect::<Vec<_>>();
            built_client(&sources, |source, out| {
                let mut cmd = Command::new("sh");
                cmd.arg(source).arg(out.join("sarama-current-client"));
                go_module_env(&mut cmd);
                cmd
            })
            .join("sarama-current-client")
        })
        .clone()
}

/// `tests/clients/franz/` (franz-go) built from its module.
fn franz_client(peers: &Peers) -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let dir = peers.clients.join("franz");
            let sources = ["main.go", "go.mod", "go.sum"]
                .iter()
                .map(|f| dir.join(f))
                .collect::<Vec<_>>();
            built_client(&sources, |_, out| {
                let mut cmd = Command::new("go");
                cmd.args(["build", "-trimpath", "-o"])
                    .arg(out.join("franz-client"))
                    .arg(".")
                    .current_dir(&dir);
                go_module_env(&mut cmd);
                cmd
            })
            .join("franz-client")
        })
        .clone()
}

/// Runs `tests/clients/<script>` with the venv's Python, or for
/// `java:<command>` (`java4:`, kafka-clients 4.1.1) / `kafkajs:<command>` / `sarama:<command>` the Java /
/// kafkajs / Sarama client with
/// `<command>` as its first argument, and returns whatever happened (no
/// assertion). Killed after [`CLIENT_TIMEOUT`].
/// The command that runs client `script` (see [`try_client`]) with `args`.
fn client_command(script: &str, args: &[&str]) -> Command {
    let peers = peers();
    let java = [("java:", &peers.java_lib), ("java4:", &peers.java4_lib)]
        .into_iter()
        .find_map(|(prefix, lib)| Some((script.strip_prefix(prefix)?, lib)));
    let mut cmd = if let Some((command, lib)) = java {
        static CLASSES: OnceLock<PathBuf> = OnceLock::new();
        static CLASSES4: OnceLock<PathBuf> = OnceLock::new();
        let cache = if lib == &peers.java_lib {
            &CLASSES
        } else {
            &CLASSES4
        };
        let classes = java_classes(&peers, lib, cache);
        let mut classpath = std::ffi::OsString::from(classes.as_os_str());
        classpath.push(":");
        classpath.push(lib.join("*"));
        let mut cmd = Command::new("java");
        cmd.arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
            .arg("-cp")
            .arg(classpath)
            .arg("JavaClient")
            .arg(command);
        cmd
    } else if let Some(command) = script.strip_prefix("aiokafka:") {
        let mut cmd = Command::new(&peers.python);
        cmd.arg(peers.clients.join("ak_client.py"))
            .arg(command)
            .env("PYTHONUNBUFFERED", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1");
        cmd
    } else if let Some(command) = script.strip_prefix("sarama:") {
        let mut cmd = Command::new(sarama_client(&peers));
        cmd.arg(command);
        cmd
    } else if let Some(command) = script.strip_prefix("sarama-current:") {
        let mut cmd = Command::new(sarama_current_client(&peers));
        cmd.arg(command);
        cmd
    } else if let Some(command) = script.strip_prefix("franz:") {
        let mut cmd = Command::new(franz_client(&peers));
        cmd.arg(command);
        cmd
    } else if let Some(command) = script.strip_prefix("kafkajs:") {
        let mut cmd = Command::new("node");
        cmd.arg(peers.clients.join("kafkajs/client.js"))
            .arg(command)
            .env("NODE_PATH", &peers.node_modules);
        cmd
    } else {
        let path = peers.clients.join(script);
        assert!(path.exists(), "no client script {}", path.display());
        let mut cmd = Command::new(&peers.python);
        cmd.arg(&path)
            .env("PYTHONUNBUFFERED", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1");
        cmd
    };
    cmd.env_remove("LD_LIBRARY_PATH");
    cmd.args(args).current_dir(&peers.clients);
    cmd
}

pub fn try_client(script: &str, args: &[&str]) -> ClientRun {
    let cmd = client_command(script, args);
    let f = run_timeout(cmd, None, CLIENT_TIMEOUT);
    let stdout = String::from_utf8_lossy(&f.output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&f.output.stderr).into_owned();
    let json = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| serde_json::from_str(l).ok());
    let run = ClientRun {
        command: format!("{script} {}", args.join(" ")),
        status: f.output.status,
        timed_out: f.timed_out,
        stdout,
        stderr,
        json,
        elapsed: f.elapsed,
    };
    eprintln!("client: {} -> {} in {:.1?}", run.command, run.status, run.elapsed);
    run
}

/// Runs a client script, asserts it exited 0 in time, and returns the JSON
/// object it printed on its last stdout line.
pub fn run_client(script: &str, args: &[&str]) -> serde_json::Value {
    let run = try_client(script, args);
    assert!(
        run.status.success() && !run.timed_out,
        "client failed: {}",
        run.describe()
    );
    match run.json {
        Some(v) => v,
        None => panic!("client printed no JSON last line: {}", run.describe()),
    }
}

/// Creates `topic` with `partitions` partitions through a scripted admin
/// client (`ck_admin.py`, `kp_admin.py`, `java:admin`, ...) and asserts it
/// worked.
pub fn create_topic(admin: &str, bootstrap: &str, topic: &str, partitions: i32) {
    let created = run_client(
        admin,
        &[
            "--bootstrap",
            bootstrap,
            "create",
            "--topic",
            topic,
            "--partitions",
            &partitions.to_string(),
        ],
    );
    assert_eq!(created["ok"], true, "{admin}: {created}");
}

/// Runs Debian's kcat with `args`, feeding `stdin` (if any), killed after
/// [`KCAT_TIMEOUT`]. No assertion on the exit status.
pub fn kcat(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let peers = peers();
    let mut cmd = Command::new(&peers.kcat);
    cmd.env_remove("LD_LIBRARY_PATH");
    cmd.args(args);
    system_librdkafka(&mut cmd);
    let f = run_timeout(cmd, stdin, KCAT_TIMEOUT);
    eprintln!(
        "kcat {} -> {}{} in {:.1?}",
        args.join(" "),
        f.output.status,
        if f.timed_out { " (TIMED OUT)" } else { "" },
        f.elapsed
    );
    f.output
}

/// Makes kcat load Debian's librdkafka (2.0.2). `cargo test` puts the
/// build directories of native dependencies on `LD_LIBRARY_PATH`, and the
/// rdkafka crate's build leaves a `librdkafka.so.1` (2.12, no zstd) there:
/// inherited, it silently replaces the system library under kcat.
fn system_librdkafka(cmd: &mut Command) {
    cmd.env_remove("LD_LIBRARY_PATH");
}

/// A unique-enough name for topics and groups within one test process.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// `json[key]` as u64, panicking with the whole object if it is not one.
pub fn get_u64(json: &serde_json::Value, key: &str) -> u64 {
    json[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no integer {key:?} in {json}"))
}

/// Runs Debian's kcat like [`kcat`], but killed after `timeout` instead of
/// [`KCAT_TIMEOUT`]. Returns what happened (no assertion) and whether it
/// timed out.
pub fn kcat_timeout(args: &[&str], stdin: Option<&[u8]>, timeout: Duration) -> (Output, bool) {
    let peers = peers();
    let mut cmd = Command::new(&peers.kcat);
    cmd.env_remove("LD_LIBRARY_PATH");
    cmd.args(args);
    system_librdkafka(&mut cmd);
    let f = run_timeout(cmd, stdin, timeout);
    eprintln!(
        "kcat {} -> {}{} in {:.1?}",
        args.join(" "),
        f.output.status,
        if f.timed_out { " (TIMED OUT)" } else { "" },
        f.elapsed
    );
    (f.output, f.timed_out)
}

/// The `strait` binary under test (for `strait spool verify|dump`).
pub fn strait_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_strait"))
}

/// A client script running in the background (see [`spawn_client`]): its
/// stdout lines are collected as they arrive. Killed on drop.
#[derive(Debug)]
pub struct BackgroundClient {
    child: Option<Child>,
    /// `script arg...`, for messages.
    pub command: String,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    readers: Vec<thread::JoinHandle<()>>,
    status: Option<ExitStatus>,
    started: Instant,
}

/// Starts client `script` (as [`try_client`] names them: a Python script
/// of `tests/clients/`, `java:produce`, ...) in the background, stdout
/// read line by line (see [`BackgroundClient::lines`]). It is killed
/// when the handle drops, and after [`CLIENT_TIMEOUT`] by
/// [`BackgroundClient::wait`].
pub fn spawn_client(script: &str, args: &[&str]) -> BackgroundClient {
    use std::io::BufRead;
    use std::sync::{Arc, Mutex};
    let mut child = client_command(script, args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {script}: {e}"));
    let lines = Arc::new(Mutex::new(Vec::new()));
    let stderr = Arc::new(Mutex::new(String::new()));
    let out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let l = Arc::clone(&lines);
    let out_reader = thread::spawn(move || {
        for line in std::io::BufReader::new(out_pipe).lines() {
            match line {
                Ok(line) => l.lock().unwrap().push(line),
                Err(_) => break,
            }
        }
    });
    let e = Arc::clone(&stderr);
    let err_reader = thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match err_pipe.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => e.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n])),
            }
        }
    });
    let command = format!("{script} {}", args.join(" "));
    eprintln!("client (background): {command}");
    BackgroundClient {
        child: Some(child),
        command,
        lines,
        stderr,
        readers: vec![out_reader, err_reader],
        status: None,
        started: Instant::now(),
    }
}

impl BackgroundClient {
    /// The stdout lines printed so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// What it printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Polls until `f(lines so far)` holds (true) or `timeout` passes or the
    /// process exits without it holding (false).
    pub fn wait_for(&mut self, timeout: Duration, f: impl Fn(&[String]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if f(&self.lines.lock().unwrap()) {
                return true;
            }
            let exited = match self.child.as_mut() {
                Some(c) => c.try_wait().ok().flatten().is_some(),
                None => true,
            };
            if exited {
                // Let the reader catch the last lines.
                thread::sleep(Duration::from_millis(100));
                return f(&self.lines.lock().unwrap());
            }
            if Instant::now() > deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits up to `timeout` for the exit; `None` if it is still running.
    /// Once it exited, stdout and stderr are read to their end.
    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if self.status.is_some() {
            return self.status;
        }
        let deadline = Instant::now() + timeout.min(CLIENT_TIMEOUT);
        let child = self.child.as_mut()?;
        loop {
            if let Some(status) = child.try_wait().expect("waiting for client") {
                self.status = Some(status);
                break;
            }
            if Instant::now() > deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        self.status
    }

    /// SIGKILL and reap (no-op if it already exited).
    pub fn kill(&mut self) -> Option<ExitStatus> {
        if let Some(c) = self.child.as_mut() {
            if self.status.is_none() {
                let _ = c.kill();
                self.status = c.wait().ok();
            }
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        self.status
    }

    /// Seconds since it started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// A description for assertion messages: command, status, stderr tail,
    /// last stdout lines.
    pub fn describe(&self) -> String {
        let lines = self.lines();
        let last: Vec<&String> = lines.iter().rev().take(5).collect();
        format!(
            "{} -> {:?} after {:.1?}, {} stdout lines\n--- stderr ---\n{}\n--- last stdout lines ---\n{}",
            self.command,
            self.status,
            self.started.elapsed(),
            lines.len(),
            tail(&self.stderr(), 4000),
            last.into_iter().rev().cloned().collect::<Vec<_>>().join("\n")
        )
    }
}

impl Drop for BackgroundClient {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A `kB` field of `/proc/PID/status` (`VmRSS`, `RssAnon`, ...), in bytes.
pub fn proc_status_bytes(pid: u32, key: &str) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib << 10)
}

/// Runs `strait spool verify DIR` and asserts it exits 0 (every batch CRC,
/// offset and index entry checks out).
pub fn verify_spool(dir: &Path) {
    let out = Command::new(strait_bin())
        .args(["spool", "verify"])
        .arg(dir)
        .output()
        .expect("running strait spool verify");
    assert!(
        out.status.success(),
        "strait spool verify {}: {}\n{}{}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `strait mirror --config FILE`: a mirror process with its own log, killed
/// on drop. Its admin listener (`/metrics`, `/healthz`) is on
/// [`MirrorProc::admin_port`], which the config must name as
/// `admin.listen: 127.0.0.1:{admin_port}` (see [`MirrorProc::start`]).
#[derive(Debug)]
pub struct MirrorProc {
    child: Option<Child>,
    dir: tempfile::TempDir,
    config: PathBuf,
    log: PathBuf,
    admin_port: u16,
    starts: u32,
}

impl MirrorProc {
    /// Writes `config` (YAML; `{admin}` in it becomes `127.0.0.1:PORT` of a
    /// free port) and starts the mirror; returns once `/healthz` answers.
    pub fn start(config: &str) -> MirrorProc {
        let dir = tempfile::Builder::new()
            .prefix("strait-mirror-")
            .tempdir()
            .expect("tempdir");
        let admin_port = free_port();
        let path = dir.path().join("mirror.yaml");
        fs::write(
            &path,
            config.replace("{admin}", &format!("127.0.0.1:{admin_port}")),
        )
        .expect("writing the mirror config");
        let log = dir.path().join("mirror.log");
        let mut m = MirrorProc {
            child: None,
            dir,
            config: path,
            log,
            admin_port,
            starts: 0,
        };
        m.spawn();
        m
    }

    fn spawn(&mut self) {
        self.starts += 1;
        let (mut out, err) = open_log(&self.log);
        let _ = writeln!(
            out,
            "=== start #{} (strait mirror --config {}) ===",
            self.starts,
            self.config.display()
        );
        let mut child = Command::new(env!("CARGO_BIN_EXE_strait"))
            .arg("mirror")
            .arg("--config")
            .arg(&self.config)
            .env("STRAIT_LOG", "info,strait_mirror=debug")
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawning strait mirror");
        let addr: SocketAddr = ([127, 0, 0, 1], self.admin_port).into();
        if let Err(e) = wait_ready(&mut child, addr, false, &self.log) {
            kill_and_wait(&mut child);
            panic!("strait mirror did not start: {e}");
        }
        self.child = Some(child);
    }

    /// The admin listener's port.
    pub fn admin_port(&self) -> u16 {
        self.admin_port
    }

    /// The configuration file it runs (for other `strait mirror` commands).
    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// GET `path` on the admin listener; the body.
    pub fn get(&self, path: &str) -> String {
        http_get(self.admin_port, path)
    }

    /// The log so far.
    pub fn log(&self) -> String {
        read_log(&self.log)
    }

    /// SIGKILL and wait.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_and_wait(&mut c);
        }
    }

    /// SIGKILL (if running) and start again with the same config.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// SIGTERM and wait for the exit (60 s at most, then panic).
    pub fn stop(&mut self) -> ExitStatus {
        let mut c = self.child.take().expect("the mirror is not running");
        sigterm(c.id());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = c.try_wait().expect("waiting for the mirror") {
                return status;
            }
            if Instant::now() > deadline {
                kill_and_wait(&mut c);
                panic!(
                    "strait mirror did not exit within 60 s of SIGTERM\n--- log ---\n{}",
                    self.log()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for MirrorProc {
    fn drop(&mut self) {
        self.kill();
        if thread::panicking() {
            eprintln!("--- mirror log ---\n{}", self.log());
        }
    }
}

/// A plain HTTP GET on 127.0.0.1:`port`: the status and the body.
pub fn http(port: u16, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connecting to the admin listener");
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("reading the HTTP answer");
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not HTTP: {head}"));
    (status, body.to_owned())
}

/// [`http`]'s body; panics on a status other than 200.
pub fn http_get(port: u16, path: &str) -> String {
    let (status, body) = http(port, path);
    assert_eq!(status, 200, "GET {path}: {body}");
    body
}

/// The value of one Prometheus sample in `metrics` text: the first line
/// whose name and labels contain every part of `selector` (e.g.
/// `["strait_mirror_lag_records{", "partition=\"3\""]`).
pub fn metric(metrics: &str, selector: &[&str]) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| selector.iter().all(|s| l.contains(s)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The sum of the samples of metric `name` (every label set) whose labels
/// hold `with` ("" for all): a counter or gauge over partitions.
pub fn metric_sum(metrics: &str, name: &str, with: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with('{')) && l.contains(with))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Every record of `topic` read with `ck_dump.py` (partitions assigned, no
/// group), per partition: each record's fields `fields` of
/// [offset, key, value, headers, timestamp type, timestamp].
pub fn dump(
    bootstrap: &str,
    topic: &str,
    expect: usize,
    fields: std::ops::Range<usize>,
) -> std::collections::BTreeMap<String, Vec<serde_json::Value>> {
    let out = run_client(
        "ck_dump.py",
        &[
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--expect",
            &expect.to_string(),
            "--timeout",
            "60",
        ],
    );
    out["partitions"]
        .as_object()
        .expect("partitions")
        .iter()
        .map(|(p, records)| {
            let records = records
                .as_array()
                .expect("records")
                .iter()
                .map(|r| serde_json::Value::Array(r.as_array().expect("a record")[fields.clone()].to_vec()))
                .collect();
            (p.clone(), records)
        })
        .collect()
}

/// What `ck_acked.py` acknowledged: (partition, offset) -> value. An
/// offset below 0 stands for a record acknowledged without one (librdkafka
/// acknowledges an idempotent batch whose answer was lost once a later
/// batch succeeds): look it up by its value.
pub type Acked = std::collections::BTreeMap<(i64, i64), String>;

/// Parses the `ACKED <partition> <offset> <value>` lines of `ck_acked.py`,
/// refusing two acknowledgements of one offset.
pub fn acked(lines: &[String]) -> Acked {
    let mut out = Acked::new();
    let mut unknown = 0;
    for l in lines.iter().filter(|l| l.starts_with("ACKED ")) {
        let f: Vec<&str> = l.split(' ').collect();
        assert_eq!(f.len(), 4, "bad line {l:?}");
        let mut key: (i64, i64) = (f[1].parse().unwrap(), f[2].parse().unwrap());
        if key.1 < 0 {
            // Acknowledged without an offset: a key of its own below 0.
            unknown += 1;
            key.1 = -unknown;
        }
        if let Some(before) = out.insert(key, f[3].to_string()) {
            panic!(
                "two acknowledgements for p{}@{}: {before} and {}",
                key.0, key.1, f[3]
            );
        }
    }
    out
}

/// A Strait whose `dc1.` topics live on `dc1` without the prefix, `legacy`
/// on `dc2` as `legacy-v2`, and every other topic locally; groups are its
/// own (the default `groups:`). The directory holds its configuration.
pub fn routed_strait(dc1: &str, dc2: &str) -> (Strait, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strait.yaml");
    fs::write(
        &path,
        format!(
            r#"clusters:
  dc1: {{ bootstrap: ["{dc1}"] }}
  dc2: {{ bootstrap: ["{dc2}"] }}
routes:
  - {{ prefix: "dc1.", to: dc1, strip_prefix: true }}
  - {{ exact: legacy, to: dc2, as: legacy-v2 }}
  - {{ regex: ".*", to: local }}
"#
        ),
    )
    .unwrap();
    (Strait::start(&["--config", path.to_str().unwrap()]), dir)
}

/// The committed offsets of `group` on `topic` by partition, read on
/// `bootstrap` as an ordinary lag tool reads them (OffsetFetch); `None`
/// where the group has none.
pub fn committed(bootstrap: &str, group: &str, topic: &str) -> std::collections::BTreeMap<i32, Option<i64>> {
    let out = run_client(
        "ck_admin.py",
        &[
            "--bootstrap",
            bootstrap,
            "committed",
            "--topic",
            topic,
            "--group",
            group,
        ],
    );
    assert!(out["error"].is_null(), "committed {group} {topic}: {out}");
    out["committed"]
        .as_object()
        .unwrap_or_else(|| panic!("{out}"))
        .iter()
        .map(|(p, o)| (p.parse().expect("a partition number"), o.as_i64()))
        .collect()
}

/// Runs `strait users ARGS --file FILE` with `stdin`; its stdout, or a
/// panic with its stderr.
pub fn users_cmd(file: &Path, args: &[&str], stdin: &str) -> String {
    let finished = run_timeout(
        {
            let mut cmd = Command::new(strait_bin());
            cmd.arg("users").args(args).arg("--file").arg(file);
            cmd
        },
        Some(stdin.as_bytes()),
        Duration::from_secs(30),
    );
    let out = &finished.output;
    assert!(
        out.status.success(),
        "strait users {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The produce and consume commands of a client family (ck, java,
/// kafkajs, franz).
pub fn family_scripts(family: &str) -> (&'static str, &'static str) {
    match family {
        "ck" => ("ck_produce.py", "ck_consume.py"),
        "java" => ("java:produce", "java:consume"),
        "kafkajs" => ("kafkajs:produce", "kafkajs:consume"),
        "franz" => ("franz:produce", "franz:consume"),
        _ => unreachable!(),
    }
}

/// Strait's own client of the cluster at `bootstrap`, for the requests a
/// test or bench makes itself (ListOffsets, group offsets, the offset map).
pub fn cluster(bootstrap: &str) -> strait_upstream::Cluster {
    strait_upstream::Cluster::new(
        "test",
        strait_upstream::ClusterOptions {
            bootstrap: vec![bootstrap.to_owned()],
            connect: strait_upstream::ConnectOptions::default(),
            metadata_max_age: Duration::from_secs(60),
        },
    )
}

/// The Java client's idempotent producer (acks=all) writing `count` keyed
/// records (`java-0`, ...) to `topic` through `bootstrap` at `rate` a
/// second, giving up after `timeout_s` (its delivery timeout).
pub fn java_idempotent_producer(
    bootstrap: &str,
    topic: &str,
    count: usize,
    rate: u32,
    timeout_s: u32,
) -> BackgroundClient {
    let (count, rate, timeout) = (count.to_string(), rate.to_string(), timeout_s.to_string());
    spawn_client(
        "java:produce",
        &[
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--count",
            &count,
            "--rate",
            &rate,
            "--keyed",
            "--acks",
            "all",
            "--idempotent",
            "--value-prefix",
            "java",
            "--timeout",
            &timeout,
        ],
    )
}
