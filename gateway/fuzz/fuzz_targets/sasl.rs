//! Arbitrary bytes as the SASL messages Strait reads from the other side
//! of a connection: SCRAM's four messages (client-first and client-final
//! as a server reads them, server-first and server-final as a client does)
//! and the challenges of a SCRAM exchange in progress. Parsing must never
//! panic, and what parses must hold together: a user name escapes back to
//! what was read, a proof is what its base64 said.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strait_upstream::sasl::scram::{self, Client, Hash};

#[global_allocator]
static ALLOCATOR: strait_gateway::alloc::GuardedAlloc = strait_gateway::alloc::GuardedAlloc;

fuzz_target!(|data: &[u8]| {
    if let Ok(first) = scram::parse_client_first(data) {
        assert_eq!(scram::unescape(&scram::escape(&first.username)).as_deref(), Some(first.username.as_str()));
        assert!(!first.nonce.is_empty());
    }
    if let Ok(last) = scram::parse_client_final(data) {
        assert!(std::str::from_utf8(data).unwrap().starts_with(&last.without_proof));
    }
    if let Ok(first) = scram::parse_server_first(data) {
        assert!(std::str::from_utf8(data).unwrap().starts_with(&format!("r={}", first.nonce)));
    }
    let _ = scram::parse_server_final(data);
    // A client's exchange fed the input as the server's two challenges
    // (its random nonce keeps most inputs from reaching key derivation).
    let (a, b) = data.split_at(data.len() / 2);
    let mut client = Client::new(Hash::Sha256, "user", "pencil".to_owned());
    client.first();
    if let Ok(Some(_)) = client.answer(a) {
        assert!(client.answer(b).is_err() || b.starts_with(b"v="));
    }
    assert!(client.answer(a).is_err(), "an exchange goes one way");
});
