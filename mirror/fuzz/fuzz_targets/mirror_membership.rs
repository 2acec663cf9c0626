//! What other members of a mirror's group send through the coordinator:
//! their subscriptions (the partitions they say they own) and the
//! assignment the leader sends. Decoding never panics, and whatever the
//! members claim to own (partitions twice, past a topic's end, of topics
//! not mirrored), the assignor gives every partition to exactly one of
//! them, each member within one of the others.

#![no_main]

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strait_mirror::membership::{assign, decode_assignment, decode_owned};

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    let _ = decode_assignment(&bytes);
    let split = data.first().map_or(0, |&b| usize::from(b)).min(data.len());
    let (first, second) = data.split_at(split);
    let members: BTreeMap<String, Vec<(String, i32)>> = [first, second, &[][..]]
        .iter()
        .enumerate()
        .map(|(i, b)| (format!("m{i}"), decode_owned(&Bytes::copy_from_slice(b))))
        .collect();
    let mut topics: BTreeMap<String, i32> = BTreeMap::from([("t".to_owned(), 7), ("u".to_owned(), 1)]);
    for owned in members.values() {
        for (topic, _) in owned.iter().take(4) {
            topics.entry(topic.clone()).or_insert(3);
        }
    }
    let assigned = assign(&members, &topics);
    let all: Vec<&(String, i32)> = assigned.values().flatten().collect();
    let unique: BTreeSet<&(String, i32)> = all.iter().copied().collect();
    assert_eq!(all.len(), unique.len(), "a partition assigned twice");
    assert_eq!(all.len(), topics.values().sum::<i32>() as usize);
    let sizes: Vec<usize> = assigned.values().map(Vec::len).collect();
    assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1);
});
