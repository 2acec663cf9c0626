//! Arbitrary bytes as a request frame: decoding must return a request or an
//! error, never panic, hang or abort. The guarded allocator is installed as
//! in the binary, so forged array lengths cost address space, not the
//! process.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strait_gateway::codec::{decode_request, peek_header};

#[global_allocator]
static ALLOCATOR: strait_gateway::alloc::GuardedAlloc = strait_gateway::alloc::GuardedAlloc;

fuzz_target!(|data: &[u8]| {
    let peeked = peek_header(data);
    match decode_request(Bytes::copy_from_slice(data)) {
        Ok(request) => {
            // A decoded request's header is what the first bytes say.
            let (api_key, version, correlation_id) = peeked.expect("a decoded request has a header");
            assert_eq!(request.api as i16, api_key);
            assert_eq!(request.version, version);
            assert_eq!(request.correlation_id, correlation_id);
        }
        Err(_) => {}
    }
});
