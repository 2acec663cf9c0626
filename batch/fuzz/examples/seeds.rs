//! Writes a few valid record batches (and concatenations of them) into a
//! corpus directory, to seed the `batch_header` target past the CRC, and
//! one batch per compression codec, to seed it into the decompressors.
//! Usage: cargo run --release --example seeds -- DIR

use std::io::Write;

use strait_batch::{self as batch, build};

/// A valid batch of `values` whose records section is compressed with the
/// codec whose attribute bits are `codec`.
fn compressed(codec: i16, values: &[&[u8]]) -> Vec<u8> {
    let plain = build::encode_records(values);
    let section = match codec {
        1 => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(&plain).unwrap();
            e.finish().unwrap()
        }
        2 => snap::raw::Encoder::new().compress_vec(&plain).unwrap(),
        3 => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(&plain).unwrap();
            e.finish().unwrap()
        }
        4 => ruzstd::encoding::compress_to_vec(&plain[..], ruzstd::encoding::CompressionLevel::Fastest),
        _ => unreachable!("codec {codec}"),
    };
    let spec = build::BatchSpec {
        base_timestamp: 1_700_000_000_000,
        attributes: codec,
        ..build::BatchSpec::default()
    };
    build::with_section(spec, values.len() as i32, &section)
}

fn main() {
    let dir = std::env::args().nth(1).expect("usage: seeds DIR");
    std::fs::create_dir_all(&dir).unwrap();
    let one = build::batch(1_700_000_000_000, &[b"hello"]);
    let three = build::batch(0, &[b"", b"a", &[0x5a; 200]]);
    let transactional = build::batch_with(
        build::BatchSpec {
            base_timestamp: 42,
            producer_id: 7,
            producer_epoch: 1,
            base_sequence: 0,
            attributes: 0x10 | 0x4,
            max_timestamp: None,
        },
        &[b"k", b"v"],
    );
    let mut stamped = three.clone();
    batch::stamp(&mut stamped, 1 << 40, 3);
    let values: [&[u8]; 3] = [b"one", &[0x61; 300], b"three"];
    let mut seeds: Vec<Vec<u8>> = (1..=4).map(|codec| compressed(codec, &values)).collect();
    seeds.extend([
        one.clone(),
        three.clone(),
        transactional.clone(),
        stamped,
        [one.clone(), three.clone(), transactional].concat(),
        [one.clone(), one[..30].to_vec()].concat(),
        [three, vec![0; 16]].concat(),
    ]);
    for (i, seed) in seeds.iter().enumerate() {
        std::fs::write(format!("{dir}/seed-{i}"), seed).unwrap();
    }
    println!("wrote {} seeds to {dir}", seeds.len());
}
