//! The `strait` binary's offline subcommands, run as a user runs them.

use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::process::{Command, Output};

use strait_spool::batch::build;
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
