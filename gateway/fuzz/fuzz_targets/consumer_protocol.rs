//! Arbitrary bytes as a consumer's subscription or assignment (the opaque
//! bytes of JoinGroup and SyncGroup that the router rewrites for delegated
//! groups): renaming topics must never panic, must leave bytes untouched
//! when no name changes, and renaming back must give the bytes back.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strait_gateway::router::consumer_protocol::{rename_assignment, rename_subscription};

#[global_allocator]
static ALLOCATOR: strait_gateway::alloc::GuardedAlloc = strait_gateway::alloc::GuardedAlloc;

fn to(from: &'static str, to: &'static str) -> impl Fn(&str) -> Option<String> {
    move |t| (t == from).then(|| to.to_owned())
}

fn untouched(_: &str) -> Option<String> {
    None
}

/// The properties for one of the two renames.
macro_rules! check {
    ($rename:ident, $data:expr, $input:expr) => {{
        assert_eq!($rename(&$input, &untouched), $input);
        let renamed = $rename(&$input, &to("a", "bb"));
        if renamed != $input && !$data.windows(2).any(|w| w == b"bb") {
            assert_eq!($rename(&renamed, &to("bb", "a")), $input);
        }
    }};
}

fuzz_target!(|data: &[u8]| {
    let input = Bytes::copy_from_slice(data);
    check!(rename_subscription, data, input);
    check!(rename_assignment, data, input);
});
