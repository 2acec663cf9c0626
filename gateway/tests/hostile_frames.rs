//! Frames that claim absurd array lengths: decoding fails with an error
//! instead of aborting the process on an allocation it cannot make. Without
//! the guarded allocator (installed here as in the binary) this test process
//! would abort.

use bytes::Bytes;
use strait_gateway::codec::decode_request;
use strait_gateway::error::DecodeError;

#[global_allocator]
static ALLOCATOR: strait_gateway::alloc::GuardedAlloc = strait_gateway::alloc::GuardedAlloc;

fn assert_malformed(frame: Vec<u8>, what: &str) {
    match decode_request(Bytes::from(frame)) {
        Err(DecodeError::Malformed { .. }) => {}
        other => panic!("{what}: expected a malformed-request error, got {other:?}"),
    }
}

#[test]
fn a_forged_array_length_is_an_error_not_an_abort() {
    // Metadata v0: api key 3, version 0, correlation id 1, null client id,
    // then a topics array claiming i32::MAX entries and no bytes for them.
    let mut v0 = vec![0, 3, 0, 0, 0, 0, 0, 1, 0xff, 0xff];
    v0.extend_from_slice(&i32::MAX.to_be_bytes());
    assert_malformed(v0, "Metadata v0 with 2^31-1 topics");

    // Metadata v12 (flexible): compact array length as an unsigned varint
    // of 2^32-1 (+1 encoding), after the v2 header's tagged fields.
    let mut v12 = vec![0, 3, 0, 12, 0, 0, 0, 2, 0xff, 0xff, 0];
    v12.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    assert_malformed(v12, "Metadata v12 with 2^32-2 topics");
}

#[test]
fn ordinary_allocations_still_work_after_a_forged_one() {
    let mut v0 = vec![0, 3, 0, 0, 0, 0, 0, 1, 0xff, 0xff];
    v0.extend_from_slice(&i32::MAX.to_be_bytes());
    assert_malformed(v0, "forged");
    let big: Vec<u64> = (0..1_000_000).collect();
    assert_eq!(big.iter().sum::<u64>(), 499_999_500_000);
}
