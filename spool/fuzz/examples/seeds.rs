//! Writes a few valid record batches (and concatenations of them) into a
//! corpus directory, to seed the `batch_header` target past the CRC.
//! Usage: cargo run --release --example seeds -- DIR

use strait_spool::batch::{self, build};

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
        },
        &[b"k", b"v"],
    );
    let mut stamped = three.clone();
    batch::stamp(&mut stamped, 1 << 40, 3);
    let seeds: Vec<Vec<u8>> = vec![
        one.clone(),
        three.clone(),
        transactional.clone(),
        stamped,
        [one.clone(), three.clone(), transactional].concat(),
        [one.clone(), one[..30].to_vec()].concat(),
        [three, vec![0; 16]].concat(),
    ];
    for (i, seed) in seeds.iter().enumerate() {
        std::fs::write(format!("{dir}/seed-{i}"), seed).unwrap();
    }
    println!("wrote {} seeds to {dir}", seeds.len());
}
