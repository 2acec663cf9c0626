//! What other members of a mirror's group send through the coordinator:
//! their subscriptions (the topics they mirror with partition counts, the
//! partitions they say they own) and the assignment the leader sends.
//! Decoding never panics, and whatever the members claim (partitions
//! twice, past a topic's end, counts that disagree), the assignor gives
//! every partition of every subscribed topic to exactly one member, and
//! only to one that subscribes to its topic.

#![no_main]

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strait_mirror::membership::{assign, decode_assignment, decode_subscription, Subscription};

// As in the binary: a forged array length asks for gigabytes, which the
// guard serves lazily rather than abort.
#[global_allocator]
static ALLOCATOR: strait_gateway::alloc::GuardedAlloc = strait_gateway::alloc::GuardedAlloc;

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    let _ = decode_assignment(&bytes);
    let split = data.first().map_or(0, |&b| usize::from(b)).min(data.len());
    let (first, second) = data.split_at(split);
    let mut members: BTreeMap<String, Subscription> = [first, second]
        .iter()
        .enumerate()
        .map(|(i, b)| (format!("m{i}"), decode_subscription(&Bytes::copy_from_slice(b))))
        .collect();
    // Partition counts the assignor would walk: keep the work bounded.
    for subscription in members.values_mut() {
        for count in subscription.topics.values_mut() {
            *count = (*count).min(1_000);
        }
    }
    members.insert(
        "m2".to_owned(),
        Subscription {
            topics: BTreeMap::from([("t".to_owned(), 7)]),
            owned: Vec::new(),
        },
    );
    let assigned = assign(&members);
    let mut expected: BTreeMap<&str, i32> = BTreeMap::new();
    for subscription in members.values() {
        for (topic, &count) in &subscription.topics {
            let known = expected.entry(topic.as_str()).or_insert(0);
            *known = (*known).max(count);
        }
    }
    let all: Vec<&(String, i32)> = assigned.values().flatten().collect();
    let unique: BTreeSet<&(String, i32)> = all.iter().copied().collect();
    assert_eq!(all.len(), unique.len(), "a partition assigned twice");
    assert_eq!(all.len(), expected.values().map(|&c| c as usize).sum::<usize>());
    for (member, partitions) in &assigned {
        for (topic, _) in partitions {
            assert!(members[member].topics.contains_key(topic), "a topic to a member that does not mirror it");
        }
    }
});
