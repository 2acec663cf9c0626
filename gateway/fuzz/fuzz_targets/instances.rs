//! What other instances send through the instances' group coordinator
//! (`instances:`): their member metadata and the list the leader hands
//! out. Decoding never panics, and whatever the members claim, the leader
//! hands every member the same list, each instance in it once, in node
//! order.

#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strait_gateway::instances::{assign, decode_list};

// As in the binary: a forged length asks for gigabytes, which the guard
// serves lazily rather than abort.
#[global_allocator]
static ALLOCATOR: strait_gateway::alloc::GuardedAlloc = strait_gateway::alloc::GuardedAlloc;

fuzz_target!(|data: &[u8]| {
    let _ = decode_list(&Bytes::copy_from_slice(data));
    let members: Vec<(String, Bytes)> = data
        .split(|b| *b == 0xff)
        .enumerate()
        .map(|(i, part)| (format!("m{i}"), Bytes::copy_from_slice(part)))
        .collect();
    let out = assign(&members);
    assert_eq!(out.len(), members.len());
    let first = out.first().map(|(_, list)| list.clone());
    for (_, list) in &out {
        assert_eq!(Some(list), first.as_ref());
        let instances = decode_list(list).expect("the leader's list reads back");
        assert!(instances.windows(2).all(|w| w[0].node < w[1].node));
    }
});
