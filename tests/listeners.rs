//! Strait as a secure server: several listeners (plaintext, TLS with SASL
//! SCRAM and PLAIN, mTLS, SASL without TLS and with re-authentication),
//! users made with `strait users`, certificates made at test time.
//!
//! One Strait for the whole binary, with these listeners:
//! - `main` (plaintext, `--listen`): for the tests' own checks;
//! - `secure`: TLS, SASL SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN;
//! - `mtls`: TLS with a client certificate required;
//! - `sasl`: SASL SCRAM-SHA-512 without TLS, logins lasting 2 s (KIP-368).

mod support;

use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, MetadataRequest, SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::{Decodable, StrBytes};
use strait_config::{ClientSasl, ClientTls, SaslMechanism, Secret};
use strait_upstream::sasl::scram::{Client, Hash};
use strait_upstream::{ConnectOptions, Connection, Security};
use support::tls::{self, Certs};
use support::{free_port, http_get, metric, raw, run_client, try_client, unique, users_cmd, Strait};

const USER: &str = "alice";
const PASSWORD: &str = "alice-secret";
/// The `sasl` listener's login lifetime.
const SESSION: Duration = Duration::from_secs(2);
/// `server.failed_authentication_delay`.
const FAILED_DELAY: Duration = Duration::from_millis(500);

struct Secured {
    strait: Strait,
    certs: Certs,
    dir: PathBuf,
    users: PathBuf,
    secure: u16,
    mtls: u16,
    sasl: u16,
    admin: u16,
}

fn secured() -> &'static Secured {
    static SECURED: OnceLock<Secured> = OnceLock::new();
    SECURED.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("strait-listeners-")
            .tempdir()
            .unwrap()
            .keep();
        let certs = tls::generate(&dir);
        let users = dir.join("users.yaml");
        // The users, as an operator makes them.
        let added = users_cmd(&users, &["add", USER], &format!("{PASSWORD}\n"));
        assert!(
            added.contains("added user alice (SCRAM-SHA-256, SCRAM-SHA-512)"),
            "{added}"
        );
        let text = std::fs::read_to_string(&users).unwrap();
        assert!(
            !text.contains(PASSWORD),
            "the password is stored as it is: {text}"
        );
        let (secure, mtls, sasl, admin) = (free_port(), free_port(), free_port(), free_port());
        let config = format!(
            r#"
server:
  users_file: "{users}"
  failed_authentication_delay: {delay}ms
  request_timeout: 3s
  listeners:
    - name: secure
      listen: 127.0.0.1:{secure}
      tls: {{ cert_file: "{cert}", key_file: "{key}" }}
      sasl: {{ mechanisms: [SCRAM-SHA-256, SCRAM-SHA-512, PLAIN] }}
    - name: mtls
      listen: 127.0.0.1:{mtls}
      tls: {{ cert_file: "{cert}", key_file: "{key}", client_ca_file: "{ca}" }}
    - name: sasl
      listen: 127.0.0.1:{sasl}
      sasl: {{ mechanisms: [SCRAM-SHA-512], session_lifetime: {session}s }}
admin:
  listen: 127.0.0.1:{admin}
"#,
            users = users.display(),
            delay = FAILED_DELAY.as_millis(),
            cert = certs.server.cert_file.display(),
            key = certs.server.key_file.display(),
            ca = certs.ca_file.display(),
            session = SESSION.as_secs(),
        );
        let file = dir.join("strait.yaml");
        std::fs::write(&file, config).unwrap();
        let strait = Strait::start_logging(
            "info,strait_gateway::auth=debug",
            &["--config", file.to_str().unwrap()],
        );
        Secured {
            strait,
            certs,
            dir,
            users,
            secure,
            mtls,
            sasl,
            admin,
        }
    })
}

fn addr(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

/// Client options per client family for a listener.
#[derive(Clone, Copy)]
enum Via {
    /// TLS with SCRAM-SHA-512 as `alice`.
    Scram,
    /// TLS with the client certificate.
    Mtls,
}

/// `-X` options of `family` (ck, java, kafkajs, franz) for `via`.
fn options(s: &Secured, family: &str, via: Via) -> Vec<String> {
    let ca = s.certs.ca_file.display().to_string();
    let cert = s.certs.client.cert_file.display().to_string();
    let key = s.certs.client.key_file.display().to_string();
    let x: Vec<String> = match (family, via) {
        ("ck", Via::Scram) => vec![
            "security.protocol=SASL_SSL".into(),
            "sasl.mechanisms=SCRAM-SHA-512".into(),
            format!("sasl.username={USER}"),
            format!("sasl.password={PASSWORD}"),
            format!("ssl.ca.location={ca}"),
        ],
        ("ck", Via::Mtls) => vec![
            "security.protocol=SSL".into(),
            format!("ssl.ca.location={ca}"),
            format!("ssl.certificate.location={cert}"),
            format!("ssl.key.location={key}"),
        ],
        ("java", via) => {
            let mut x = vec![
                "ssl.truststore.type=PEM".into(),
                format!("ssl.truststore.certificates={}", s.certs.ca),
            ];
            match via {
                Via::Scram => x.extend([
                    "security.protocol=SASL_SSL".into(),
                    "sasl.mechanism=SCRAM-SHA-512".into(),
                    format!(
                        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \
                         username=\"{USER}\" password=\"{PASSWORD}\";"
                    ),
                ]),
                Via::Mtls => x.extend([
                    "security.protocol=SSL".into(),
                    "ssl.keystore.type=PEM".into(),
                    format!("ssl.keystore.certificate.chain={}", s.certs.client.cert),
                    format!("ssl.keystore.key={}", s.certs.client.key),
                ]),
            }
            x
        }
        ("kafkajs", via) => {
            let mut ssl = serde_json::json!({ "ca": [s.certs.ca] });
            if let Via::Mtls = via {
                ssl["cert"] = s.certs.client.cert.clone().into();
                ssl["key"] = s.certs.client.key.clone().into();
            }
            let mut x = vec![format!("client.ssl={ssl}")];
            if let Via::Scram = via {
                let sasl =
                    serde_json::json!({"mechanism": "scram-sha-512", "username": USER, "password": PASSWORD});
                x.push(format!("client.sasl={sasl}"));
            }
            x
        }
        ("franz", via) => {
            // franz-go asks for no topic to be created unless told.
            let mut x = vec![format!("tls.ca={ca}"), "allow.auto.create.topics=true".into()];
            match via {
                Via::Scram => x.extend([
                    "sasl.mechanism=SCRAM-SHA-512".into(),
                    format!("sasl.username={USER}"),
                    format!("sasl.password={PASSWORD}"),
                ]),
                Via::Mtls => x.extend([format!("tls.cert={cert}"), format!("tls.key={key}")]),
            }
            x
        }
        _ => unreachable!("{family}"),
    };
    x.into_iter().flat_map(|o| ["-X".to_owned(), o]).collect()
}

const FAMILIES: [&str; 4] = ["ck", "java", "kafkajs", "franz"];

/// Produces 200 records through `port` and consumes them in a group that
/// commits, with `family`'s client.
fn produce_and_consume(s: &Secured, family: &str, via: Via, port: u16) {
    let topic = unique(&format!("tls-{family}"));
    let group = unique("tls-group");
    let x = options(s, family, via);
    let x: Vec<&str> = x.iter().map(String::as_str).collect();
    let (produce, consume) = support::family_scripts(family);
    let bootstrap = addr(port);
    let mut args = vec![
        "--bootstrap",
        &bootstrap,
        "--topic",
        &topic,
        "--count",
        "200",
        "--keyed",
    ];
    args.extend(&x);
    let produced = run_client(produce, &args);
    assert_eq!(
        produced["delivered"].as_u64(),
        Some(200),
        "{family} produce: {produced}"
    );
    let mut args = vec![
        "--bootstrap",
        &bootstrap,
        "--topic",
        &topic,
        "--group",
        &group,
        "--expect",
        "200",
        "--commit",
        "--timeout",
        "90",
    ];
    args.extend(&x);
    let consumed = run_client(consume, &args);
    assert_eq!(
        consumed["records"].as_u64(),
        Some(200),
        "{family} consume: {consumed}"
    );
    assert_eq!(consumed["values_sha"], produced["values_sha"], "{family}");
    // The commit is on Strait, under the client's group.
    let committed: u64 = consumed["committed"]
        .as_object()
        .expect("committed offsets")
        .values()
        .filter_map(|v| v.as_u64())
        .sum();
    assert_eq!(committed, 200, "{family} committed: {consumed}");
}

#[test]
fn every_client_produces_and_consumes_in_a_group_over_tls_with_scram() {
    let s = secured();
    for family in FAMILIES {
        produce_and_consume(s, family, Via::Scram, s.secure);
    }
    let metrics = http_get(s.admin, "/metrics");
    let alice = metric(
        &metrics,
        &[
            "strait_principal_requests_total{",
            "listener=\"secure\"",
            "principal=\"User:alice\"",
        ],
    );
    assert!(alice.unwrap_or(0.0) > 0.0, "{metrics}");
    let logins = metric(
        &metrics,
        &[
            "strait_logins_total{",
            "listener=\"secure\"",
            "mechanism=\"SCRAM-SHA-512\"",
            "outcome=\"ok\"",
        ],
    );
    assert!(logins.unwrap_or(0.0) >= 8.0, "{metrics}");
}

#[test]
fn every_client_produces_and_consumes_in_a_group_over_mtls() {
    let s = secured();
    for family in FAMILIES {
        produce_and_consume(s, family, Via::Mtls, s.mtls);
    }
    // The principal is the certificate's common name.
    let metrics = http_get(s.admin, "/metrics");
    let client = metric(
        &metrics,
        &[
            "strait_principal_requests_total{",
            "listener=\"mtls\"",
            "principal=\"User:strait-client\"",
        ],
    );
    assert!(client.unwrap_or(0.0) > 0.0, "{metrics}");
}

#[test]
fn each_listener_advertises_its_own_address() {
    let s = secured();
    let x = options(s, "ck", Via::Scram);
    let x: Vec<&str> = x.iter().map(String::as_str).collect();
    let bootstrap = addr(s.secure);
    let mut args = vec!["describe", "--bootstrap", &bootstrap];
    args.extend(&x);
    let described = run_client("ck_admin.py", &args);
    assert_eq!(
        described["brokers"][0]["port"].as_u64(),
        Some(u64::from(s.secure)),
        "{described}"
    );
    let main = run_client("ck_admin.py", &["describe", "--bootstrap", &s.strait.bootstrap()]);
    assert_eq!(
        main["brokers"][0]["port"].as_u64(),
        Some(u64::from(s.strait.port())),
        "{main}"
    );
}

/// A connection of Strait's own upstream client to the `sasl` listener.
fn upstream_login(
    s: &Secured,
    port: u16,
    mechanism: SaslMechanism,
    user: &str,
    password: &str,
    tls: bool,
) -> Result<(), String> {
    let file = s.dir.join(unique("password"));
    std::fs::write(&file, password).unwrap();
    let sasl = ClientSasl {
        mechanism,
        username: Some(user.to_owned()),
        password: Some(Secret::File(file)),
        token: None,
        oauth: None,
    };
    let tls = tls.then(|| ClientTls {
        ca_file: Some(s.certs.ca_file.clone()),
        ..ClientTls::default()
    });
    let security = Security::new("strait", tls.as_ref(), Some(&sasl)).map_err(|e| e.to_string())?;
    let options = ConnectOptions {
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(10),
        security,
        ..ConnectOptions::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(async {
            let connection = Connection::connect("strait".into(), &addr(port), &options).await?;
            // Logged in: a request is answered.
            connection.request(&MetadataRequest::default()).await?;
            Ok::<_, strait_upstream::UpstreamError>(())
        })
        .map_err(|e| e.to_string())
}

#[test]
fn logins_with_every_mechanism_and_reauthentication() {
    let s = secured();
    for mechanism in [
        SaslMechanism::ScramSha256,
        SaslMechanism::ScramSha512,
        SaslMechanism::Plain,
    ] {
        upstream_login(s, s.secure, mechanism, USER, PASSWORD, true)
            .unwrap_or_else(|e| panic!("{mechanism}: {e}"));
    }
    // librdkafka re-authenticates within the 2 s login lifetime (KIP-368):
    // a producer that runs for three lifetimes keeps its connection.
    let topic = unique("reauth");
    let before = http_get(s.admin, "/metrics");
    let logins = |m: &str| {
        metric(
            m,
            &["strait_logins_total{", "listener=\"sasl\"", "outcome=\"ok\""],
        )
        .unwrap_or(0.0)
    };
    let sasl = addr(s.sasl);
    let out = run_client(
        "ck_acked.py",
        &[
            "--bootstrap",
            &sasl,
            "--topic",
            &topic,
            "--rate",
            "50",
            "--duration",
            "7",
            "-X",
            "security.protocol=SASL_PLAINTEXT",
            "-X",
            "sasl.mechanisms=SCRAM-SHA-512",
            "-X",
            &format!("sasl.username={USER}"),
            "-X",
            &format!("sasl.password={PASSWORD}"),
        ],
    );
    assert_eq!(out["failed"].as_u64(), Some(0), "{out}");
    assert!(out["acked"].as_u64().unwrap_or(0) >= 200, "{out}");
    let after = http_get(s.admin, "/metrics");
    assert!(
        logins(&after) - logins(&before) >= 4.0,
        "the client logged in again within each lifetime: {} -> {}",
        logins(&before),
        logins(&after)
    );
    assert!(
        !s.strait.log().contains("did not re-authenticate"),
        "a connection was closed for an expired login"
    );
    wait_for_log(s, "re-authenticated");
    // A client that does not re-authenticate is cut off at its first
    // request after the login's lifetime.
    let mut c = handshaken(s.sasl, "SCRAM-SHA-512");
    let mut client = Client::new(Hash::Sha512, USER, PASSWORD.to_owned());
    let first = SaslAuthenticateRequest::default().with_auth_bytes(client.first().into());
    let challenge = c.call(&first, 2);
    let last = client.answer(&challenge.auth_bytes).unwrap().unwrap();
    let done = c.call(
        &SaslAuthenticateRequest::default().with_auth_bytes(last.into()),
        2,
    );
    assert_eq!(done.error_code, 0, "{done:?}");
    assert_eq!(done.session_lifetime_ms, SESSION.as_millis() as i64);
    assert_eq!(
        client.answer(&done.auth_bytes).unwrap(),
        None,
        "Strait's signature checks out"
    );
    assert!(c.call(&MetadataRequest::default(), 12).brokers.len() == 1);
    std::thread::sleep(SESSION + Duration::from_millis(500));
    let (_, frame) = c.frame(ApiKey::Metadata, 12, 12, &MetadataRequest::default());
    c.send_raw(&frame);
    assert!(closed(&mut c.stream), "an expired login closes the connection");
    wait_for_log(s, "expired and the client did not re-authenticate");
}

/// Waits up to 10 s for `text` in Strait's log (a line is written just
/// after the connection it is about closes).
fn wait_for_log(s: &Secured, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !s.strait.log().contains(text) {
        assert!(
            Instant::now() < deadline,
            "no {text:?} in the log:\n{}",
            s.strait.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A raw connection that has sent SaslHandshake for `mechanism`.
fn handshaken(port: u16, mechanism: &str) -> raw::Conn {
    let mut c = raw::Conn::open(port, "raw-sasl");
    let answer = c.call(
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.to_owned())),
        1,
    );
    assert_eq!(answer.error_code, 0, "{answer:?}");
    c
}

/// Sends SaslAuthenticate v2 with `bytes`; its answer's error code, and
/// whether Strait closed the connection after it.
fn authenticate(c: &mut raw::Conn, bytes: &[u8]) -> (i16, Option<String>, bool) {
    let request = SaslAuthenticateRequest::default().with_auth_bytes(bytes.to_vec().into());
    let (id, frame) = c.frame(ApiKey::SaslAuthenticate, 2, 2, &request);
    c.send_raw(&frame);
    let body = c.read(ApiKey::SaslAuthenticate, 2, id);
    let answer =
        kafka_protocol::messages::SaslAuthenticateResponse::decode(&mut &body[..], 2).expect("an answer");
    (
        answer.error_code,
        answer.error_message.map(|m| m.to_string()),
        closed(&mut c.stream),
    )
}

/// Whether the peer closed `stream` (EOF within 5 s, after at most a TLS
/// alert's bytes).
fn closed(stream: &mut TcpStream) -> bool {
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut seen = 0;
    loop {
        match stream.read(&mut [0u8; 64]) {
            Ok(0) => return true,
            Err(e) => {
                return e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut
            }
            Ok(n) if seen + n <= 64 => seen += n,
            Ok(_) => return false,
        }
    }
}

#[test]
fn every_refusal_says_why_and_closes_only_its_connection() {
    let s = secured();
    // A wrong password and an unknown user get the same answer, after the
    // delay, and the connection closes.
    for (user, password) in [(USER, "wrong"), ("mallory", PASSWORD)] {
        let started = Instant::now();
        let e = upstream_login(s, s.secure, SaslMechanism::ScramSha512, user, password, true).unwrap_err();
        assert!(
            started.elapsed() >= FAILED_DELAY,
            "answered before the failed-login delay"
        );
        assert!(
            e.contains("Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"),
            "{e}"
        );
    }
    wait_for_log(s, "failed SCRAM-SHA-512 login: user \"alice\": wrong password");
    wait_for_log(s, "failed SCRAM-SHA-512 login: user \"mallory\": no such user");
    // PLAIN is not offered on the `sasl` listener.
    let e = upstream_login(s, s.sasl, SaslMechanism::Plain, USER, PASSWORD, false).unwrap_err();
    assert!(e.contains("does not offer PLAIN; it offers SCRAM-SHA-512"), "{e}");
    // A client that sends requests before logging in is cut off.
    let mut c = raw::Conn::open(s.sasl, "no-login");
    assert_eq!(c.api_versions(3).error_code, 0);
    let (_, frame) = c.frame(ApiKey::Metadata, 12, 12, &MetadataRequest::default());
    c.send_raw(&frame);
    assert!(
        closed(&mut c.stream),
        "a Metadata before logging in closes the connection"
    );
    wait_for_log(s, "Metadata before logging in");
    // Garbage, truncated and forged SCRAM messages.
    for (what, first, last) in [
        ("garbage", &b"\xff\x00garbage"[..], None),
        ("truncated", b"n,,n=alice", None),
        ("channel binding", b"p=tls-unique,,n=alice,r=abc", None),
        (
            "wrong nonce",
            b"n,,n=alice,r=abc",
            Some(&b"c=biws,r=abcNOTOURS,p=AAAA"[..]),
        ),
        ("wrong proof", b"n,,n=alice,r=abc", Some(b"c=biws,r=NONCE,p=AAAA")),
    ] {
        let mut c = handshaken(s.sasl, "SCRAM-SHA-512");
        let (code, message, closed_now) = match last {
            None => authenticate(&mut c, first),
            Some(last) => {
                let request = SaslAuthenticateRequest::default().with_auth_bytes(first.to_vec().into());
                let challenge = c.call(&request, 2);
                assert_eq!(challenge.error_code, 0, "{what}: {challenge:?}");
                let server_first = String::from_utf8(challenge.auth_bytes.to_vec()).unwrap();
                let nonce = server_first
                    .strip_prefix("r=")
                    .unwrap()
                    .split(',')
                    .next()
                    .unwrap();
                let last = String::from_utf8(last.to_vec()).unwrap().replace("NONCE", nonce);
                authenticate(&mut c, last.as_bytes())
            }
        };
        assert_eq!(code, 58, "{what}: SASL_AUTHENTICATION_FAILED, {message:?}");
        assert!(closed_now, "{what}: the connection closes");
    }
    // A SaslAuthenticate without a handshake is out of place.
    let mut c = raw::Conn::open(s.sasl, "no-handshake");
    let (code, _, closed_now) = authenticate(&mut c, b"n,,n=alice,r=abc");
    assert_eq!(code, 34, "ILLEGAL_SASL_STATE");
    assert!(closed_now);
    // A plaintext client on a TLS listener fails its handshake; a TLS
    // client without a certificate is refused by the mTLS listener.
    let mut c = raw::Conn::open(s.secure, "plaintext-on-tls");
    let (_, frame) = c.frame(
        ApiKey::ApiVersions,
        3,
        3,
        &kafka_protocol::messages::ApiVersionsRequest::default(),
    );
    c.send_raw(&frame);
    assert!(closed(&mut c.stream));
    let e = try_client(
        "ck_admin.py",
        &[
            "describe",
            "--bootstrap",
            &addr(s.mtls),
            "-X",
            "security.protocol=SSL",
            "-X",
            &format!("ssl.ca.location={}", s.certs.ca_file.display()),
            "--timeout",
            "5",
        ],
    );
    assert!(!e.status.success(), "{}", e.describe());
    // A TLS handshake that stalls is cut at request_timeout (3 s).
    let mut stalled = TcpStream::connect(addr(s.secure)).unwrap();
    let started = Instant::now();
    stalled.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    assert!(matches!(stalled.read(&mut [0u8; 1]), Ok(0) | Err(_)));
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "cut after {:?}",
        started.elapsed()
    );
    wait_for_log(s, "TLS handshake failed");
    wait_for_log(s, "the TLS handshake did not finish within request_timeout");
    // Other connections were untouched.
    upstream_login(s, s.secure, SaslMechanism::ScramSha256, USER, PASSWORD, true).unwrap();
    let metrics = http_get(s.admin, "/metrics");
    assert!(
        metric(&metrics, &["strait_logins_total{", "outcome=\"failed\""]).unwrap_or(0.0) >= 1.0,
        "{metrics}"
    );
}

#[test]
fn users_are_added_changed_and_removed_while_strait_runs() {
    let s = secured();
    let file = &s.users;
    users_cmd(
        file,
        &[
            "add",
            "bob",
            "--mechanism",
            "SCRAM-SHA-256",
            "--iterations",
            "8192",
        ],
        "bob-1\n",
    );
    let listed = users_cmd(file, &["list"], "");
    assert!(
        listed.contains("bob: SCRAM-SHA-256 (iterations 8192)"),
        "{listed}"
    );
    assert!(
        listed.contains("alice: SCRAM-SHA-256 (iterations 4096), SCRAM-SHA-512"),
        "{listed}"
    );
    let login = |password: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let result = upstream_login(s, s.secure, SaslMechanism::ScramSha256, "bob", password, true);
            if result.is_ok() || Instant::now() > deadline {
                return result.is_ok();
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    assert!(login("bob-1"), "a new user logs in without a restart");
    users_cmd(file, &["add", "bob", "--mechanism", "SCRAM-SHA-256"], "bob-2\n");
    assert!(login("bob-2"), "the changed password works");
    assert!(upstream_login(s, s.secure, SaslMechanism::ScramSha256, "bob", "bob-1", true).is_err());
    users_cmd(file, &["remove", "bob"], "");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(upstream_login(s, s.secure, SaslMechanism::ScramSha256, "bob", "bob-2", true).is_err());
    // Bad input to the command.
    let bad = support::run_timeout(
        {
            let mut cmd = Command::new(support::strait_bin());
            cmd.args(["users", "add", "", "--file"]).arg(file);
            cmd
        },
        Some(b"pw\n"),
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&bad.output.stderr);
    assert!(!bad.output.status.success());
    assert!(stderr.contains("cannot be a user's name"), "{stderr}");
}

#[test]
fn a_changed_certificate_is_used_by_new_connections_without_dropping_old_ones() {
    let s = secured();
    // A listener of its own, so the other tests keep their certificate.
    let dir = s.dir.join("reload");
    let first = tls::generate(&dir.join("a"));
    let second = tls::generate(&dir.join("b"));
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::copy(&first.server.cert_file, &cert).unwrap();
    std::fs::copy(&first.server.key_file, &key).unwrap();
    let config = dir.join("strait.yaml");
    std::fs::write(
        &config,
        format!(
            "server:\n  tls: {{ cert_file: \"{}\", key_file: \"{}\" }}\n",
            cert.display(),
            key.display()
        ),
    )
    .unwrap();
    let strait = Strait::start(&["--config", config.to_str().unwrap()]);
    let bootstrap = strait.bootstrap();
    let describe = |ca: &Path| {
        try_client(
            "ck_admin.py",
            &[
                "describe",
                "--bootstrap",
                &bootstrap,
                "-X",
                "security.protocol=SSL",
                "-X",
                &format!("ssl.ca.location={}", ca.display()),
                "--timeout",
                "5",
            ],
        )
    };
    assert!(describe(&first.ca_file).status.success());
    // An open connection of Strait's own client, from before the change.
    let tls_a = ClientTls {
        ca_file: Some(first.ca_file.clone()),
        ..ClientTls::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let options = ConnectOptions {
        security: Security::new("strait", Some(&tls_a), None).unwrap(),
        ..ConnectOptions::default()
    };
    let open = runtime
        .block_on(Connection::connect("strait".into(), &bootstrap, &options))
        .unwrap();
    // The key first, then the certificate: in between the pair does not
    // match, and Strait keeps the old one.
    std::fs::copy(&second.server.key_file, &key).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::copy(&second.server.cert_file, &cert).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !describe(&second.ca_file).status.success() {
        assert!(
            Instant::now() < deadline,
            "the new certificate was not taken up: {}",
            strait.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        !describe(&first.ca_file).status.success(),
        "the old certificate is still served"
    );
    // The connection from before still answers.
    let metadata = runtime
        .block_on(open.request(&MetadataRequest::default()))
        .expect("the open connection still works");
    assert_eq!(metadata.brokers.len(), 1);
    let log = strait.log();
    assert!(log.contains("keeping the one before"), "{log}");
    assert!(log.contains("TLS certificate read again"), "{log}");
}

/// `GET path` over HTTPS (trusting `ca`), with `token` as a bearer token:
/// the status and the body.
fn https_get(port: u16, ca: &Path, path: &str, token: Option<&str>) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut roots = rustls::RootCertStore::empty();
        for cert in strait_upstream::security::read_certificates(ca, "ca").unwrap() {
            roots.add(cert).unwrap();
        }
        let config =
            rustls::ClientConfig::builder_with_provider(strait_upstream::security::crypto_provider())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
            .connect(name, tcp)
            .await
            .expect("a TLS handshake with the admin listener");
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        tls.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{auth}\r\n").as_bytes())
            .await
            .unwrap();
        let mut response = Vec::new();
        let _ = tls.read_to_end(&mut response).await;
        let text = String::from_utf8_lossy(&response).into_owned();
        let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        (status, body)
    })
}

#[test]
fn the_admin_listener_speaks_tls_and_wants_its_token() {
    let s = secured();
    let dir = s.dir.join("admin");
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("token");
    std::fs::write(&token_file, "first-token\n").unwrap();
    let admin = free_port();
    let config = dir.join("strait.yaml");
    std::fs::write(
        &config,
        format!(
            "admin:\n  listen: 127.0.0.1:{admin}\n  tls: {{ cert_file: \"{}\", key_file: \"{}\" }}\n  \
             token: {{ file: \"{}\" }}\n",
            s.certs.server.cert_file.display(),
            s.certs.server.key_file.display(),
            token_file.display()
        ),
    )
    .unwrap();
    let _strait = Strait::start(&["--config", config.to_str().unwrap()]);
    let ca = &s.certs.ca_file;
    let get = |path: &str, token: Option<&str>| https_get(admin, ca, path, token);
    // The probes and the (static) status page need no token.
    assert_eq!(get("/healthz", None), (200, "ok\n".to_owned()));
    assert_eq!(get("/readyz", None).0, 200);
    assert_eq!(get("/", None).0, 200);
    // The data does.
    for path in ["/metrics", "/api/v1/gateway", "/api/v1/mirrors"] {
        let (status, body) = get(path, None);
        assert_eq!(status, 401, "{path}: {body}");
        assert!(body.contains("Authorization: Bearer"), "{body}");
        assert_eq!(get(path, Some("wrong")).0, 401, "{path}");
        let (status, body) = get(path, Some("first-token"));
        assert_eq!(status, 200, "{path}: {body}");
    }
    assert!(get("/metrics", Some("first-token"))
        .1
        .contains("strait_build_info"));
    // A rotated token is used at once.
    std::fs::write(&token_file, "second-token").unwrap();
    assert_eq!(get("/metrics", Some("first-token")).0, 401);
    assert_eq!(get("/metrics", Some("second-token")).0, 200);
    // Plain HTTP gets no answer.
    let mut plain = TcpStream::connect(("127.0.0.1", admin)).unwrap();
    std::io::Write::write_all(&mut plain, b"GET /healthz HTTP/1.0\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    plain.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let _ = plain.read_to_end(&mut answer);
    assert!(
        !String::from_utf8_lossy(&answer).contains("ok"),
        "plain HTTP was answered"
    );
}
