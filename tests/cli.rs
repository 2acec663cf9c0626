//! The `strait` binary's offline subcommands, and the start-up failures of
//! `strait serve`, run as a user runs them.

use std::os::unix::fs::FileExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use strait_batch::build;
use strait_spool::{Durability, LogConfig, Partition};

fn strait(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strait"))
        .args(args)
        .output()
        .expect("running strait")
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[test]
fn check_prints_the_effective_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("strait.yaml");
    std::fs::write(
        &file,
        "spool:\n  durability: every_batch\n  segment_bytes: 256MiB\n",
    )
    .unwrap();
    let out = strait(&["check", "--config", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("durability: every_batch"), "{stdout}");
    assert!(stdout.contains("segment_bytes: 256MiB"), "{stdout}");
    // Defaults are written out.
    assert!(stdout.contains("index_interval_bytes: 4KiB"), "{stdout}");
}

#[test]
fn check_names_the_file_and_key_of_a_mistake() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.yaml");
    std::fs::write(&file, "spool:\n  segmnt_bytes: 1GiB\n").unwrap();
    let out = strait(&["check", "--config", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("bad.yaml"), "{stderr}");
    assert!(stderr.contains("segmnt_bytes"), "{stderr}");

    std::fs::write(&file, "spool:\n  topics:\n    t:\n      retention_age: 30\n").unwrap();
    let out = strait(&["check", "--config", file.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("spool.topics.t.retention_age"), "{stderr}");

    let out = strait(&["check", "--config", "/nonexistent/strait.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("/nonexistent/strait.yaml"));
}

fn write_partition(dir: &Path, batches: usize) {
    let config = LogConfig {
        segment_bytes: 4096,
        max_batch_bytes: 4096,
        index_bytes: 1024,
        index_interval_bytes: 256,
        durability: Durability::Os,
        ..LogConfig::default()
    };
    let p = Partition::open(dir, config).unwrap();
    for i in 0..batches {
        let value = format!("value-{i}");
        p.append(&build::batch(1_000 + i as i64, &[value.as_bytes(), b"second"]))
            .unwrap();
    }
    p.close().unwrap();
}

#[test]
fn verify_and_dump_a_data_directory() {
    let data = tempfile::tempdir().unwrap();
    write_partition(&data.path().join("orders-0"), 60);
    write_partition(&data.path().join("orders-1"), 3);

    let out = strait(&["spool", "verify", data.path().to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("orders-0: "), "{stdout}");
    assert!(stdout.contains("60 batches, 120 records"), "{stdout}");
    assert!(stdout.contains("3 batches, 6 records"), "{stdout}");
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("ok ")).count(),
        2,
        "{stdout}"
    );

    let out = strait(&[
        "spool",
        "dump",
        data.path().join("orders-1").to_str().unwrap(),
        "--from",
        "2",
    ]);
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    let batches: Vec<&str> = stdout.lines().filter(|l| l.starts_with("baseOffset:")).collect();
    // Offsets 0-1, 2-3, 4-5: the first ends before offset 2.
    assert_eq!(batches.len(), 2, "{stdout}");
    assert!(
        batches[0].starts_with("baseOffset: 2 lastOffset: 3 count: 2 "),
        "{}",
        batches[0]
    );
    assert!(batches[1].contains("CreateTime: 1003"), "{}", batches[1]);
    assert!(batches[1].contains("compresscodec: none"), "{}", batches[1]);

    // --records: every record under its batch.
    let out = strait(&[
        "spool",
        "dump",
        data.path().join("orders-1").to_str().unwrap(),
        "--records",
    ]);
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    let records: Vec<&str> = stdout.lines().filter(|l| l.starts_with("| offset:")).collect();
    assert_eq!(
        records,
        [
            "| offset: 0 CreateTime: 1000 keySize: -1 valueSize: 7 sequence: -1 key: null payload: value-0",
            "| offset: 1 CreateTime: 1001 keySize: -1 valueSize: 6 sequence: -1 key: null payload: second",
            "| offset: 2 CreateTime: 1001 keySize: -1 valueSize: 7 sequence: -1 key: null payload: value-1",
            "| offset: 3 CreateTime: 1002 keySize: -1 valueSize: 6 sequence: -1 key: null payload: second",
            "| offset: 4 CreateTime: 1002 keySize: -1 valueSize: 7 sequence: -1 key: null payload: value-2",
            "| offset: 5 CreateTime: 1003 keySize: -1 valueSize: 6 sequence: -1 key: null payload: second",
        ],
        "{stdout}"
    );
}

#[test]
fn verify_reports_corruption_with_file_and_position_and_fails() {
    let data = tempfile::tempdir().unwrap();
    let partition = data.path().join("t-0");
    write_partition(&partition, 5);
    let log = partition.join("00000000000000000000.log");
    let file = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
    // Damage a record byte of the third batch.
    let size = std::fs::read(&log).unwrap();
    let second = 12 + i32::from_be_bytes(size[8..12].try_into().unwrap()) as u64;
    let third = second * 2;
    file.write_all_at(b"X", third + 70).unwrap();

    let out = strait(&["spool", "verify", partition.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("CORRUPT "), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "00000000000000000000.log at byte {third}: invalid batch: CRC-32C mismatch"
        )),
        "{stdout}"
    );
    assert!(
        text(&out.stderr).contains("problems in 1 partitions"),
        "{}",
        text(&out.stderr)
    );
    // Data the recovery point says was synced is missing: that is named too.
    assert!(
        stdout.contains("recovery point 10 is past the end of the log (4)"),
        "{stdout}"
    );

    let out = strait(&["spool", "verify", data.path().join("missing").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn verify_skips_the_holes_of_a_preallocated_segment_but_not_bytes_in_them() {
    // A 256 MiB segment, preallocated sparse, holding three small batches:
    // verify reads only the file's data regions, yet a stray byte deep in
    // the preallocated tail is still found, at its exact position.
    let data = tempfile::tempdir().unwrap();
    let partition = data.path().join("t-0");
    let config = LogConfig {
        segment_bytes: 256 << 20,
        durability: Durability::Os,
        ..LogConfig::default()
    };
    let p = Partition::open(&partition, config).unwrap();
    for i in 0..3 {
        p.append(&build::batch(1_000 + i, &[b"v"])).unwrap();
    }
    p.close().unwrap();
    let log = partition.join("00000000000000000000.log");
    assert_eq!(std::fs::metadata(&log).unwrap().len(), 256 << 20);

    let out = strait(&["spool", "verify", partition.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("3 batches, 3 records"),
        "{}",
        text(&out.stdout)
    );

    let stray = 200u64 << 20;
    let file = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
    file.write_all_at(b"\x07", stray).unwrap();
    let out = strait(&["spool", "verify", partition.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains(&format!(
            "00000000000000000000.log at byte {stray}: non-zero bytes after the last batch"
        )),
        "{}",
        text(&out.stdout)
    );
}

/// Runs `strait serve ARGS` (as `uid`, if given), which must fail at
/// start-up: exit code 1 within 30 s and exactly one `strait: error: `
/// line. Returns that line without its prefix, and the whole stderr.
fn serve_fails(args: &[&str], uid: Option<u32>) -> (String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_strait"));
    command
        .arg("serve")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(uid) = uid {
        command.uid(uid).gid(uid);
    }
    let mut child = command.spawn().expect("running strait serve");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("waiting for strait").is_none() {
        if Instant::now() > deadline {
            child.kill().expect("killing strait");
            let out = child.wait_with_output().expect("collecting output");
            panic!("strait serve {args:?} did not fail: {}", text(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("collecting output");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("strait: error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{args:?}: {stderr}");
    (errors[0].to_owned(), stderr)
}

#[test]
fn serve_names_the_key_of_a_listen_address_in_use_and_the_os_error_once() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().join("data");
    let (error, stderr) = serve_fails(
        &["--listen", &addr, "--data-dir", data_dir.to_str().unwrap()],
        None,
    );
    assert_eq!(
        error,
        format!(
            "server.listen (from --listen): cannot listen on {addr}: Address already in use \
             (os error 98); another process is listening on this port: stop it, or set \
             server.listen to a free port"
        )
    );
    assert_eq!(stderr.matches("Address already in use").count(), 1, "{stderr}");

    // Set in a file, the file is named instead of the flag.
    let file = data.path().join("strait.yaml");
    std::fs::write(
        &file,
        format!("data_dir: {}\nserver:\n  listen: {addr}\n", data_dir.display()),
    )
    .unwrap();
    let (error, _) = serve_fails(&["--config", file.to_str().unwrap()], None);
    assert_eq!(
        error,
        format!(
            "{}: server.listen: cannot listen on {addr}: Address already in use (os error 98); \
             another process is listening on this port: stop it, or set server.listen to a \
             free port",
            file.display()
        )
    );
    drop(taken);
}

#[test]
fn serve_names_the_key_of_an_address_that_does_not_parse() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_str().unwrap();
    let (error, _) = serve_fails(&["--listen", "localhost:9092", "--data-dir", dir], None);
    assert_eq!(
        error,
        "server.listen (from --listen): `localhost:9092` is not an IP address and port (host \
         names are not resolved): write one such as 127.0.0.1:9092, or 0.0.0.0:9092 to accept \
         from other hosts"
    );
    let (error, _) = serve_fails(
        &[
            "--listen",
            "127.0.0.1:0",
            "--advertised",
            "kafka",
            "--data-dir",
            dir,
        ],
        None,
    );
    assert_eq!(
        error,
        "server.advertised (from --advertised): `kafka` is not host:port: write the name or \
         address and port clients should connect to, such as kafka.example.com:9092"
    );
}

#[test]
fn serve_names_data_dir_when_it_is_a_file() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("afile");
    std::fs::write(&file, "not a directory").unwrap();
    let (error, stderr) = serve_fails(
        &["--listen", "127.0.0.1:0", "--data-dir", file.to_str().unwrap()],
        None,
    );
    assert_eq!(
        error,
        format!(
            "data_dir (from --data-dir): {} is a file, not a directory; point data_dir at a \
             directory, or move the file away",
            file.display()
        )
    );
    assert!(!stderr.contains("os error"), "{stderr}");

    // Below a file, from a configuration file: the file in the way is named.
    let config = tmp.path().join("strait.yaml");
    let below = file.join("data");
    std::fs::write(
        &config,
        format!("data_dir: {}\nserver:\n  listen: 127.0.0.1:0\n", below.display()),
    )
    .unwrap();
    let (error, _) = serve_fails(&["--config", config.to_str().unwrap()], None);
    assert_eq!(
        error,
        format!(
            "{}: data_dir: cannot create {}: {} is a file, not a directory; point data_dir at \
             a directory, or move the file away",
            config.display(),
            below.display(),
            file.display()
        )
    );
}

#[test]
fn serve_names_data_dir_when_it_is_not_writable() {
    // Root may write anywhere: run as `nobody` then, so the directory's
    // permissions apply.
    let root = rustix::process::geteuid().is_root();
    let uid = if root {
        65_534
    } else {
        rustix::process::geteuid().as_raw()
    };
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = tmp.path().join("readonly");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    let (error, stderr) = serve_fails(
        &["--listen", "127.0.0.1:0", "--data-dir", dir.to_str().unwrap()],
        root.then_some(uid),
    );
    assert_eq!(
        error,
        format!(
            "data_dir (from --data-dir): {} is not writable: Permission denied (os error 13); \
             give the user running Strait (uid {uid}) write access to it, or point data_dir at \
             a directory it can write",
            dir.display()
        )
    );
    assert_eq!(stderr.matches("os error 13").count(), 1, "{stderr}");

    let missing = dir.join("data");
    let (error, _) = serve_fails(
        &["--listen", "127.0.0.1:0", "--data-dir", missing.to_str().unwrap()],
        root.then_some(uid),
    );
    assert_eq!(
        error,
        format!(
            "data_dir (from --data-dir): cannot create {}: Permission denied (os error 13); \
             create it for the user running Strait (uid {uid}), or point data_dir at a \
             directory it can write",
            missing.display()
        )
    );
}

#[test]
fn serve_and_check_word_negative_values_alike() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("strait.yaml");
    let f = file.display();
    for (yaml, expected) in [
        (
            "spool:\n  segment_bytes: -5MiB\n",
            format!("{f}:2:18: spool.segment_bytes: invalid size `-5MiB`: must not be negative"),
        ),
        (
            "spool:\n  segment_bytes: -1\n",
            format!("{f}:2:18: spool.segment_bytes: invalid size `-1`: must not be negative"),
        ),
        (
            "spool:\n  retention_age: -7d\n",
            format!("{f}:2:18: spool.retention_age: invalid duration `-7d`: must not be negative"),
        ),
        (
            "server:\n  max_connections: -1\n",
            format!("{f}:2:20: server.max_connections: invalid number `-1`: must not be negative"),
        ),
        (
            "server:\n  max_connections: 5000000000\n",
            format!(
                "{f}:2:20: server.max_connections: invalid number `5000000000`: too large (at \
                 most 4294967295)"
            ),
        ),
        (
            "server:\n  max_frame_bytes: 2GiB\n",
            format!("{f}: server.max_frame_bytes: 2GiB is outside 64KiB..1GiB"),
        ),
    ] {
        std::fs::write(&file, yaml).unwrap();
        let (error, _) = serve_fails(&["--config", file.to_str().unwrap()], None);
        assert_eq!(error, expected, "{yaml}");
        let out = strait(&["check", "--config", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(
            text(&out.stderr),
            format!("strait: error: {expected}\n"),
            "{yaml}"
        );
    }
}

#[test]
fn spool_errors_name_the_os_error_once() {
    let tmp = tempfile::tempdir().unwrap();
    let partition = tmp.path().join("t-0");
    std::fs::create_dir(&partition).unwrap();
    let log = partition.join("00000000000000000000.log");
    std::os::unix::fs::symlink(tmp.path().join("gone"), &log).unwrap();
    let out = strait(&["spool", "dump", partition.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "strait: error: dumping {}: open segment {}: No such file or directory (os error 2)\n",
            partition.display(),
            log.display()
        )
    );
}

/// Started with a soft open-files limit of 256 (by util-linux's `prlimit`,
/// which then runs strait in its place), `strait serve` raises it to the
/// hard limit, says so and what it allows, and really runs with it.
#[test]
fn serve_raises_the_open_files_limit_to_the_hard_limit() {
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .maximum
        .expect("Linux's hard limit of open files is finite");
    assert!(hard > 256, "the test needs a hard limit above 256, not {hard}");
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("strait.yaml");
    std::fs::write(
        &config,
        format!(
            "data_dir: {}\nserver:\n  listen: 127.0.0.1:0\n  max_connections: 100\n",
            tmp.path().join("data").display()
        ),
    )
    .unwrap();
    let mut child = Command::new("prlimit")
        .arg("--nofile=256:")
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_strait"))
        .args(["serve", "--config", config.to_str().unwrap()])
        .env("STRAIT_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running prlimit (util-linux)");
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stderr).lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut wait_for = |what: &str| -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.contains(what) => return line,
                Ok(line) => seen.push(line),
                Err(_) => panic!("no {what:?} in the log:\n{}", seen.join("\n")),
            }
        }
    };
    let line = wait_for("open files limit");
    wait_for("Strait is ready");
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id()));
    child.kill().unwrap();
    child.wait().unwrap();

    let room = (hard - 100 - 64) / 3;
    assert!(
        line.ends_with(&format!(
            " INFO strait::limits: open files limit {hard} (raised from 256): room for about \
             {room} partitions at 3 files each (per segment) beside 100 connections"
        )),
        "{line}"
    );
    let limits = limits.unwrap();
    let open_files: Vec<&str> = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a Max open files line")
        .split_whitespace()
        .collect();
    assert_eq!(
        open_files,
        [
            "Max",
            "open",
            "files",
            &hard.to_string(),
            &hard.to_string(),
            "files"
        ],
        "{limits}"
    );
}

#[test]
fn serve_refuses_local_topics_with_several_instances_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("strait.yaml");
    std::fs::write(
        &file,
        "clusters:\n  dc1: { bootstrap: [\"127.0.0.1:1\"] }\n\
         routes:\n  - { prefix: \"a.\", to: dc1 }\n  - { regex: \".*\", to: local }\n\
         instances: { cluster: dc1 }\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let (error, _) = serve_fails(
        &[
            "--config",
            file.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            data.to_str().unwrap(),
        ],
        None,
    );
    assert!(error.contains("routes[1].to"), "{error}");
    assert!(
        error.contains("local topics live on one instance's disk"),
        "{error}"
    );
    // Nothing was started: no data directory was made.
    assert!(!data.exists());
    let out = strait(&["check", "--config", file.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("routes[1].to"),
        "{}",
        text(&out.stderr)
    );
}
