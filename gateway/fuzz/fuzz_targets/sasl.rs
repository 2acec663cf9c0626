//! Arbitrary bytes as the SASL messages Strait reads from the other side
//! of a connection: SCRAM's four messages (client-first and client-final
//! as a server reads them, server-first and server-final as a client does)
//! and the challenges of a SCRAM exchange in progress, and the messages of
//! a client logging in to Strait (PLAIN, and SCRAM's two, checked against
//! a users file with one user), and an OAuth token endpoint's HTTP answer
//! (OAUTHBEARER's client-credentials grant). Parsing must never
//! panic, and what parses must hold together: a user name escapes back to
//! what was read, a proof is what its base64 said.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use strait_config::SaslMechanism;
use strait_gateway::auth::sasl::{Exchange, Step};
use strait_gateway::auth::users::{decode, new_credential, UserMap};
use strait_upstream::sasl::scram::{self, Client, Hash};

/// `user` with password `pencil`, for SCRAM-SHA-256 only (PLAIN's check
/// runs PBKDF2 on every input that names `user`: one mechanism, the
/// fewest iterations).
static USERS: LazyLock<UserMap> = LazyLock::new(|| {
    let mut file = strait_config::UsersFile::default();
    let user = strait_config::User {
        scram_sha_256: Some(new_credential(SaslMechanism::ScramSha256, "pencil", 4096).unwrap()),
        ..Default::default()
    };
    file.users.insert("user".into(), user);
    decode(&file.render()).unwrap()
});

#[global_allocator]
static ALLOCATOR: strait_gateway::alloc::GuardedAlloc = strait_gateway::alloc::GuardedAlloc;

fuzz_target!(|data: &[u8]| {
    if let Ok((token, _)) = strait_upstream::oauth::parse_response(data) {
        assert!(!token.is_empty());
    }
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
    // Strait's side: the input as PLAIN's message, and split as SCRAM's two
    // (the random server nonce keeps a forged final message from passing).
    let step = Exchange::new(SaslMechanism::Plain).step(&USERS, data);
    assert!(!matches!(step, Step::Done { .. }) || data.ends_with(b"\0user\0pencil"));
    let mut server = Exchange::new(SaslMechanism::ScramSha256);
    if let Step::Challenge(challenge) = server.step(&USERS, a) {
        assert!(challenge.starts_with(b"r="));
        assert!(matches!(server.step(&USERS, b), Step::Refused(_)));
    }
});
