//! Writes seeds for the `mirror_transform` target: fetch responses of
//! valid batches (every codec, headers, offset gaps, transactions and their
//! markers, LogAppendTime), each behind the target's 4-byte prefix.
//! Usage: cargo run --release --example seeds -- DIR

use strait_batch::{build, Compression};
use strait_batch::compression;

/// A batch at `base` whose records sit at the given offset deltas.
fn batch(
    base: i64,
    deltas: &[i64],
    last_delta: i32,
    attributes: i16,
    producer_id: i64,
    key: &[u8],
) -> Vec<u8> {
    let mut section = Vec::new();
    for &d in deltas {
        let value = format!("value {d}");
        section.extend(build::record(
            d * 2,
            d,
            Some(key),
            Some(value.as_bytes()),
            &[(b"h", Some(b"v"))],
        ));
    }
    let codec = match attributes & 7 {
        1 => Compression::Gzip,
        2 => Compression::Snappy,
        3 => Compression::Lz4,
        4 => Compression::Zstd,
        _ => Compression::None,
    };
    let section = compression::compress(codec, &section).unwrap();
    let spec = build::BatchSpec {
        base_timestamp: 1_700_000_000_000,
        producer_id,
        producer_epoch: 0,
        base_sequence: 0,
        attributes,
        max_timestamp: None,
    };
    let mut b = build::with_section(spec, deltas.len() as i32, &section);
    b[0..8].copy_from_slice(&base.to_be_bytes());
    b[23..27].copy_from_slice(&last_delta.to_be_bytes());
    let crc = crc(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

fn crc(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn main() {
    let dir = std::env::args().nth(1).expect("usage: seeds DIR");
    std::fs::create_dir_all(&dir).unwrap();
    let mut seeds: Vec<Vec<u8>> = Vec::new();
    for codec in 0..=4 {
        let log = [
            batch(0, &[0, 1, 2], 2, codec, -1, b"k"),
            batch(3, &[0, 2, 5], 6, codec, 7, b"gaps"),
            batch(10, &[0, 1], 1, codec | 0x10, 1000, b"txn"),
            batch(12, &[0], 0, 0x30, 1000, &[0, 0, 0, 0]), // ABORT marker
            batch(13, &[0, 1], 1, codec | 0x08, -1, b"append-time"),
        ]
        .concat();
        for prefix in [[0x01, 0x00, 0, 1], [0x00, 0x80, 2, 0], [0xff, 0xff, 11, 1]] {
            seeds.push([&prefix[..], &log].concat());
        }
        // Cut mid-batch, as Kafka cuts at max_bytes.
        seeds.push([&[0x10, 0, 0, 0][..], &log[..log.len() - 7]].concat());
    }
    for (i, seed) in seeds.iter().enumerate() {
        std::fs::write(format!("{dir}/seed-{i}"), seed).unwrap();
    }
    println!("wrote {} seeds to {dir}", seeds.len());
}
