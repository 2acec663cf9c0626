//! Strait as a secure client of Apache Kafka: TLS (rustls, certificates
//! made at test time), SASL PLAIN, SCRAM-SHA-256/512 (users made with
//! Kafka's own `kafka-configs`) and OAUTHBEARER (an unsecured JWT, which
//! Kafka's default validator accepts), mTLS, and re-authentication before
//! the session Kafka grants ends (KIP-368). The router and the mirror
//! authenticate with every mechanism; every failure gives its cause.
//!
//! One Kafka for the whole binary, with these listeners:
//! - PLAINTEXT: for the tests' own reads and Kafka's tools;
//! - SASL_SSL: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER;
//! - MTLS (SSL, client certificate required);
//! - SASL_PLAINTEXT: SCRAM-SHA-512 only, sessions of 2 s;
//! - EXPIRED (SSL): a certificate that expired in 2020;
//! - OAUTH (SASL_PLAINTEXT): OAUTHBEARER tokens signed by a real OAuth 2.0
//!   server (NAV's mock-oauth2-server, a peer), checked by Kafka's
//!   `OAuthBearerValidatorCallbackHandler` against the server's JWKS; Strait
//!   gets them with the client-credentials grant.

mod support;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use base64::Engine as _;
use kafka_protocol::messages::MetadataRequest;
use strait_config::{ClientSasl, ClientTls, OAuthClient, SaslMechanism, Secret};
use strait_upstream::{ConnectOptions, Connection, Security, UpstreamError};
use support::kafka::Kafka;
use support::tls::{self, Certs};
use support::{free_port, http, http_get, metric, run_client, unique, MirrorProc, Strait};

const PLAIN_USER: &str = "straitplain";
const PLAIN_PASSWORD: &str = "plain-secret";
const SCRAM_USER: &str = "strait";
const SCRAM_PASSWORD: &str = "scram-secret";
/// The reauthenticating listener's session lifetime.
const SESSION: Duration = Duration::from_secs(2);

/// The OAuth 2.0 server of the run (issuer `default`; any other issuer
/// name is a second issuer, with keys of its own).
struct Idp {
    child: std::process::Child,
    port: u16,
}

impl Idp {
    fn start() -> Idp {
        let peers = support::peers();
        let port = free_port();
        let log = std::fs::File::create(std::env::temp_dir().join(format!("strait-idp-{port}.log"))).unwrap();
        let child = std::process::Command::new("java")
            .args(["-Xmx128m", "-cp"])
            .arg(format!("{}/*", peers.oauth_lib.display()))
            .arg("no.nav.security.mock.oauth2.StandaloneMockOAuth2ServerKt")
            .env("SERVER_PORT", port.to_string())
            .env_remove("LD_LIBRARY_PATH")
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting the OAuth server");
        let idp = Idp { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        let up = || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
                && http(port, "/default/.well-known/openid-configuration").0 == 200
        };
        while !up() {
            assert!(
                Instant::now() < deadline,
                "the OAuth server did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        idp
    }

    /// `issuer`'s token endpoint.
    fn token_endpoint(&self, issuer: &str) -> String {
        format!("http://127.0.0.1:{}/{issuer}/token", self.port)
    }
}

impl Drop for Idp {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

struct Secure {
    kafka: Kafka,
    idp: Idp,
    /// The OAUTH listener.
    oauth: u16,
    certs: Certs,
    dir: std::path::PathBuf,
    sasl_ssl: u16,
    mtls: u16,
    sasl_plaintext: u16,
    expired: u16,
}

impl Secure {
    fn addr(port: u16) -> String {
        format!("127.0.0.1:{port}")
    }

    /// A file holding `content`, in the run's directory.
    fn file(&self, name: &str, content: &str) -> std::path::PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, content).unwrap();
        path
    }

    /// An unsecured JWT (`alg: none`) for `sub`, valid for an hour, as
    /// Kafka's default OAUTHBEARER validator takes it.
    fn token(sub: &str) -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let header = b64.encode(br#"{"alg":"none"}"#);
        let claims = b64.encode(format!(r#"{{"sub":"{sub}","iat":{now},"exp":{}}}"#, now + 3600));
        format!("{header}.{claims}.")
    }
}

fn secure() -> &'static Secure {
    static SECURE: OnceLock<Secure> = OnceLock::new();
    SECURE.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("strait-tls-")
            .tempdir()
            .unwrap()
            .keep();
        let certs = tls::generate(&dir);
        let (plain, sasl_ssl, mtls, sasl_plaintext, expired, oauth) = (
            free_port(),
            free_port(),
            free_port(),
            free_port(),
            free_port(),
            free_port(),
        );
        let idp = Idp::start();
        let issuer = format!("http://127.0.0.1:{}/default", idp.port);
        let jwks = format!("{issuer}/jwks");
        let jaas = |module: &str, options: &str| {
            format!("org.apache.kafka.common.security.{module} required{options};")
        };
        let c = certs.clone();
        let lines =
            move |controller: u16| {
                let listeners = format!(
                    "PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{sasl_ssl},MTLS://127.0.0.1:{mtls},\
                 SASL_PLAINTEXT://127.0.0.1:{sasl_plaintext},EXPIRED://127.0.0.1:{expired},\
                 OAUTH://127.0.0.1:{oauth}"
                );
                vec![
                format!("listeners={listeners},CONTROLLER://127.0.0.1:{controller}"),
                format!("advertised.listeners={listeners}"),
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,\
                 MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,EXPIRED:SSL,OAUTH:SASL_PLAINTEXT"
                    .into(),
                "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER".into(),
                format!(
                    "listener.name.sasl_ssl.plain.sasl.jaas.config={}",
                    jaas("plain.PlainLoginModule", &format!(" user_{PLAIN_USER}=\"{PLAIN_PASSWORD}\""))
                ),
                format!(
                    "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config={}",
                    jaas("scram.ScramLoginModule", "")
                ),
                format!(
                    "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={}",
                    jaas("scram.ScramLoginModule", "")
                ),
                format!(
                    "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config={}",
                    jaas("oauthbearer.OAuthBearerLoginModule", "")
                ),
                "listener.name.sasl_plaintext.sasl.enabled.mechanisms=SCRAM-SHA-512".into(),
                format!(
                    "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config={}",
                    jaas("scram.ScramLoginModule", "")
                ),
                format!(
                    "listener.name.sasl_plaintext.scram-sha-512.connections.max.reauth.ms={}",
                    SESSION.as_millis()
                ),
                "ssl.keystore.type=PEM".into(),
                format!("ssl.keystore.certificate.chain={}", tls::property(&c.server.cert)),
                format!("ssl.keystore.key={}", tls::property(&c.server.key)),
                "ssl.truststore.type=PEM".into(),
                format!("ssl.truststore.certificates={}", tls::property(&c.ca)),
                "listener.name.mtls.ssl.client.auth=required".into(),
                format!(
                    "listener.name.expired.ssl.keystore.certificate.chain={}",
                    tls::property(&c.expired.cert)
                ),
                format!("listener.name.expired.ssl.keystore.key={}", tls::property(&c.expired.key)),
                "listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER".into(),
                format!(
                    "listener.name.oauth.oauthbearer.sasl.jaas.config={}",
                    jaas("oauthbearer.OAuthBearerLoginModule", "")
                ),
                "listener.name.oauth.oauthbearer.sasl.server.callback.handler.class=\
                 org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
                    .into(),
                format!("sasl.oauthbearer.jwks.endpoint.url={jwks}"),
                format!("sasl.oauthbearer.expected.issuer={issuer}"),
                // Kafka 4 fetches only from the URLs this allows.
                format!("-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={jwks}"),
            ]
            };
        let kafka = Kafka::start_single(plain, &lines);
        // SCRAM users, as an operator makes them (one mechanism per call:
        // Kafka refuses two changes to one user in one request).
        for config in [
            format!("SCRAM-SHA-256=[iterations=8192,password={SCRAM_PASSWORD}]"),
            format!("SCRAM-SHA-512=[password={SCRAM_PASSWORD}]"),
        ] {
            kafka.tool(
                "kafka.admin.ConfigCommand",
                &[
                    "--bootstrap-server",
                    &Secure::addr(plain),
                    "--alter",
                    "--add-config",
                    &config,
                    "--entity-type",
                    "users",
                    "--entity-name",
                    SCRAM_USER,
                ],
            );
        }
        Secure {
            kafka,
            idp,
            oauth,
            certs,
            dir,
            sasl_ssl,
            mtls,
            sasl_plaintext,
            expired,
        }
    })
}

/// A cluster's `tls:` and `sasl:` in YAML for `mechanism` (None: TLS only).
fn cluster_yaml(s: &Secure, port: u16, tls: bool, mechanism: Option<SaslMechanism>) -> String {
    let mut yaml = format!("{{ bootstrap: [\"127.0.0.1:{port}\"], connect_timeout: 5s, request_timeout: 10s");
    if tls {
        yaml += &format!(", tls: {{ ca_file: \"{}\" }}", s.certs.ca_file.display());
    }
    match mechanism {
        Some(SaslMechanism::Plain) => {
            let file = s.file("plain-password", &format!("{PLAIN_PASSWORD}\n"));
            yaml += &format!(
                ", sasl: {{ mechanism: PLAIN, username: {PLAIN_USER}, password: {{ file: \"{}\" }} }}",
                file.display()
            );
        }
        Some(m @ (SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512)) => {
            let file = s.file("scram-password", SCRAM_PASSWORD);
            yaml += &format!(
                ", sasl: {{ mechanism: {m}, username: {SCRAM_USER}, password: {{ file: \"{}\" }} }}",
                file.display()
            );
        }
        Some(SaslMechanism::OAuthBearer) => {
            let file = s.file("token", &Secure::token("strait-oauth"));
            yaml += &format!(
                ", sasl: {{ mechanism: OAUTHBEARER, token: {{ file: \"{}\" }} }}",
                file.display()
            );
        }
        None => {}
    }
    yaml + " }"
}

const MECHANISMS: [SaslMechanism; 4] = [
    SaslMechanism::Plain,
    SaslMechanism::ScramSha256,
    SaslMechanism::ScramSha512,
    SaslMechanism::OAuthBearer,
];

fn label(m: SaslMechanism) -> String {
    m.name().to_lowercase().replace('-', "")
}

fn produce(bootstrap: &str, topic: &str, count: usize) {
    let out = run_client(
        "ck_produce.py",
        &[
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--count",
            &count.to_string(),
            "--keyed",
            "--value-prefix",
            topic,
        ],
    );
    assert_eq!(out["delivered"].as_u64(), Some(count as u64), "{topic}: {out}");
}

fn values(bootstrap: &str, topic: &str, expect: usize) -> Vec<String> {
    let mut values: Vec<String> = support::dump(bootstrap, topic, expect, 2..3)
        .into_values()
        .flatten()
        .map(|v| v[0].as_str().unwrap_or_default().to_owned())
        .collect();
    values.sort();
    values
}

/// The router reaches Kafka over TLS with each mechanism (one cluster per
/// mechanism, all on the SASL_SSL listener), over mTLS, and over a
/// listener whose sessions end every 2 s; what clients produce through
/// Strait is on Kafka, and reads back through Strait.
#[test]
fn the_router_authenticates_with_every_mechanism() {
    let s = secure();
    let mut clusters = String::new();
    let mut routes = String::new();
    let mut topics = Vec::new();
    for m in MECHANISMS {
        let name = label(m);
        clusters += &format!("  {name}: {}\n", cluster_yaml(s, s.sasl_ssl, true, Some(m)));
        routes += &format!("  - {{ prefix: \"{name}.\", to: {name}, strip_prefix: true }}\n");
        topics.push((format!("{name}."), unique(&format!("sec-{name}"))));
    }
    let mtls = format!(
        "{{ bootstrap: [\"127.0.0.1:{}\"], tls: {{ ca_file: \"{}\", cert_file: \"{}\", key_file: \"{}\" }} }}",
        s.mtls,
        s.certs.ca_file.display(),
        s.certs.client.cert_file.display(),
        s.certs.client.key_file.display()
    );
    clusters += &format!("  mtls: {mtls}\n");
    routes += "  - { prefix: \"mtls.\", to: mtls, strip_prefix: true }\n";
    topics.push(("mtls.".to_owned(), unique("sec-mtls")));
    clusters += &format!(
        "  reauth: {}\n",
        cluster_yaml(s, s.sasl_plaintext, false, Some(SaslMechanism::ScramSha512))
    );
    routes += "  - { prefix: \"reauth.\", to: reauth, strip_prefix: true }\n";
    topics.push(("reauth.".to_owned(), unique("sec-reauth")));
    // Tokens from the OAuth server (client credentials), which Kafka
    // checks against the server's keys.
    let secret = s.file("oauth-client-secret", "client-secret\n");
    clusters += &format!(
        "  oauth: {{ bootstrap: [\"127.0.0.1:{}\"], sasl: {{ mechanism: OAUTHBEARER, oauth: {{ token_endpoint: \"{}\", \
         client_id: strait-nj, client_secret: {{ file: \"{}\" }}, scope: kafka }} }} }}\n",
        s.oauth,
        s.idp.token_endpoint("default"),
        secret.display()
    );
    routes += "  - { prefix: \"oauth.\", to: oauth, strip_prefix: true }\n";
    topics.push(("oauth.".to_owned(), unique("sec-oauth")));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("strait.yaml");
    std::fs::write(
        &config,
        format!("clusters:\n{clusters}routes:\n{routes}  - {{ regex: \".*\", to: local }}\n"),
    )
    .unwrap();
    let strait = Strait::start_logging(
        "info,strait_upstream=debug",
        &["--config", config.to_str().unwrap()],
    );
    for (_, topic) in &topics {
        s.kafka.create_topic(topic, 2, &[]);
    }
    for (prefix, topic) in &topics {
        produce(&strait.bootstrap(), &format!("{prefix}{topic}"), 200);
    }
    // Past two sessions of the re-authenticating listener, the same
    // connections go on.
    std::thread::sleep(SESSION * 2 + Duration::from_millis(500));
    for (prefix, topic) in &topics {
        let through = format!("{prefix}{topic}");
        let upstream = values(&s.kafka.bootstrap(), topic, 200);
        assert_eq!(upstream.len(), 200, "{topic} on Kafka");
        assert!(
            upstream.iter().all(|v| v.starts_with(&through)),
            "{topic}: {upstream:?}"
        );
        assert_eq!(
            values(&strait.bootstrap(), &through, 200),
            upstream,
            "{through} read through Strait"
        );
    }
    let log = strait.log();
    assert!(
        log.contains("re-authenticated"),
        "no re-authentication logged:\n{log}"
    );
    assert!(!log.contains("re-authentication failed"), "{log}");
}

/// A mirror from Kafka to itself, reading with SCRAM-SHA-512 over TLS and
/// writing with OAUTHBEARER over TLS: every record arrives once.
#[test]
fn the_mirror_authenticates_on_both_sides() {
    let s = secure();
    let topic = unique("sec-mirror");
    s.kafka.create_topic(&topic, 3, &[]);
    produce(&s.kafka.bootstrap(), &topic, 300);
    let config = format!(
        "clusters:\n  src: {}\n  dst: {}\nadmin:\n  listen: \"{{admin}}\"\nmirrors:\n  m:\n    source: src\n    \
         target: dst\n    topics: \"{topic}\"\n    rename: \"copy-{{topic}}\"\n",
        cluster_yaml(s, s.sasl_ssl, true, Some(SaslMechanism::ScramSha512)),
        cluster_yaml(s, s.sasl_ssl, true, Some(SaslMechanism::OAuthBearer)),
    );
    let mirror = MirrorProc::start(&config);
    let copied = values(&s.kafka.bootstrap(), &format!("copy-{topic}"), 300);
    let source = values(&s.kafka.bootstrap(), &topic, 300);
    assert_eq!(copied, source, "{}", mirror.log());
    let metrics = mirror.get("/metrics");
    assert_eq!(
        metric(&metrics, &["strait_upstream_up", "cluster=\"src\""]),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, &["strait_upstream_up", "cluster=\"dst\""]),
        Some(1.0),
        "{metrics}"
    );
}

fn options(tls: Option<ClientTls>, sasl: Option<ClientSasl>) -> ConnectOptions {
    ConnectOptions {
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(5),
        security: Security::new("sec", tls.as_ref(), sasl.as_ref()).expect("usable settings"),
        ..ConnectOptions::default()
    }
}

fn trusting(s: &Secure) -> ClientTls {
    ClientTls {
        ca_file: Some(s.certs.ca_file.clone()),
        ..ClientTls::default()
    }
}

fn scram(m: SaslMechanism, password: &str) -> ClientSasl {
    ClientSasl {
        mechanism: m,
        username: Some(SCRAM_USER.to_owned()),
        password: Some(Secret::File(
            secure().file(&format!("pw-{}", password.len()), password),
        )),
        token: None,
        oauth: None,
    }
}

async fn connect(port: u16, options: &ConnectOptions) -> Result<Connection, UpstreamError> {
    Connection::connect("sec broker 1".into(), &Secure::addr(port), options).await
}

/// Every way a secure connection can fail gives its cause.
#[tokio::test]
async fn every_failure_says_what_went_wrong() {
    let s = secure();
    let sha512 = SaslMechanism::ScramSha512;
    let oauth = |endpoint: String| {
        Some(ClientSasl {
            mechanism: SaslMechanism::OAuthBearer,
            username: None,
            password: None,
            token: None,
            oauth: Some(OAuthClient {
                token_endpoint: endpoint,
                client_id: "strait-nj".into(),
                client_secret: Secret::File(s.file("oauth-secret", "client-secret")),
                scope: None,
                ca_file: None,
            }),
        })
    };
    // The right issuer's token gets in.
    let c = connect(s.oauth, &options(None, oauth(s.idp.token_endpoint("default"))))
        .await
        .expect("a token of the issuer Kafka trusts");
    assert!(!c
        .request(&MetadataRequest::default())
        .await
        .unwrap()
        .brokers
        .is_empty());
    let nowhere = free_port();
    let cases: Vec<(&str, u16, ConnectOptions, &str)> = vec![
        (
            "a token endpoint that does not answer",
            s.oauth,
            options(None, oauth(format!("http://127.0.0.1:{nowhere}/default/token"))),
            "cannot connect to the token endpoint http://127.0.0.1:",
        ),
        (
            "a token endpoint that is not there",
            s.oauth,
            options(
                None,
                oauth(format!("http://127.0.0.1:{}/default/nothing", s.idp.port)),
            ),
            "the token endpoint http://127.0.0.1:",
        ),
        (
            "a wrong password",
            s.sasl_ssl,
            options(Some(trusting(s)), Some(scram(sha512, "not-the-password"))),
            "SCRAM-SHA-512 authentication failed: SaslAuthenticationFailed",
        ),
        (
            "an untrusted certificate",
            s.sasl_ssl,
            options(
                Some(ClientTls {
                    ca_file: Some(s.certs.other_ca_file.clone()),
                    ..ClientTls::default()
                }),
                None,
            ),
            "not signed by an authority Strait trusts",
        ),
        (
            "a certificate for another name",
            s.sasl_ssl,
            options(
                Some(ClientTls {
                    server_name: Some("kafka.example.com".into()),
                    ..trusting(s)
                }),
                None,
            ),
            "does not name the host",
        ),
        (
            "an expired certificate",
            s.expired,
            options(Some(trusting(s)), None),
            "has expired",
        ),
        (
            "TLS to a plaintext listener",
            s.kafka.port(),
            options(Some(trusting(s)), None),
            "does this listener speak TLS",
        ),
        (
            "plaintext to a TLS listener",
            s.sasl_ssl,
            options(None, None),
            "if this listener wants TLS, set the cluster's `tls:`",
        ),
        (
            "SASL to a listener without it",
            s.kafka.port(),
            options(None, Some(scram(sha512, SCRAM_PASSWORD))),
            "does not speak SASL",
        ),
        (
            "a mechanism the listener does not offer",
            s.sasl_plaintext,
            options(None, Some(scram(SaslMechanism::ScramSha256, SCRAM_PASSWORD))),
            "does not offer SCRAM-SHA-256; it offers SCRAM-SHA-512",
        ),
        (
            "no client certificate where one is required",
            s.mtls,
            options(Some(trusting(s)), None),
            "does the listener want a client certificate",
        ),
        (
            "a token Kafka refuses",
            s.sasl_ssl,
            options(
                Some(trusting(s)),
                Some(ClientSasl {
                    mechanism: SaslMechanism::OAuthBearer,
                    username: None,
                    password: None,
                    token: Some(Secret::File(s.file("bad-token", "not-a-jwt"))),
                    oauth: None,
                }),
            ),
            "OAUTHBEARER authentication failed",
        ),
        (
            "a secret that is not there",
            s.sasl_ssl,
            options(
                Some(trusting(s)),
                Some(ClientSasl {
                    password: Some(Secret::Env("STRAIT_TEST_NO_SUCH_VARIABLE".into())),
                    ..scram(sha512, SCRAM_PASSWORD)
                }),
            ),
            "cannot read the secret in environment variable STRAIT_TEST_NO_SUCH_VARIABLE",
        ),
    ];
    for (what, port, options, expect) in cases {
        let err = match connect(port, &options).await {
            Ok(c) => match c.request(&MetadataRequest::default()).await {
                Ok(_) => panic!("{what}: connected"),
                Err(e) => e,
            },
            Err(e) => e,
        };
        let message = err.to_string();
        assert!(message.contains("sec broker 1"), "{what}: {message}");
        assert!(
            message.contains(expect),
            "{what}: expected `{expect}` in: {message}"
        );
    }
}

/// A connection on a listener whose sessions last 2 s keeps working past
/// several of them: it re-authenticates in band (Kafka closes a connection
/// whose session ended at its next request).
#[tokio::test]
async fn a_connection_reauthenticates_before_its_session_ends() {
    let s = secure();
    let options = options(None, Some(scram(SaslMechanism::ScramSha512, SCRAM_PASSWORD)));
    let connection = connect(s.sasl_plaintext, &options).await.expect("authenticated");
    let until = Instant::now() + SESSION * 3;
    let mut asked = 0;
    while Instant::now() < until {
        let metadata = connection
            .request(&MetadataRequest::default())
            .await
            .unwrap_or_else(|e| panic!("request {asked} on a connection of {:?}: {e}", until.elapsed()));
        assert_eq!(metadata.brokers.len(), 1);
        asked += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(!connection.is_failed());
    assert!(asked >= 10, "{asked}");
}

/// A Strait whose cluster refuses its password says so on `/readyz` and
/// `strait_upstream_up`, and does not hammer the cluster with logins.
#[test]
fn a_refused_login_shows_on_readyz_and_metrics() {
    let s = secure();
    let admin = free_port();
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("password");
    std::fs::write(&password, "wrong").unwrap();
    let config = dir.path().join("strait.yaml");
    std::fs::write(
        &config,
        format!(
            "clusters:\n  nj: {{ bootstrap: [\"127.0.0.1:{}\"], tls: {{ ca_file: \"{}\" }}, sasl: {{ mechanism: \
             SCRAM-SHA-512, username: {SCRAM_USER}, password: {{ file: \"{}\" }} }} }}\nroutes:\n  - {{ prefix: \
             \"nj.\", to: nj, strip_prefix: true }}\n  - {{ regex: \".*\", to: local }}\nadmin:\n  listen: \
             \"127.0.0.1:{admin}\"\n",
            s.sasl_ssl,
            s.certs.ca_file.display(),
            password.display()
        ),
    )
    .unwrap();
    let strait = Strait::start(&["--config", config.to_str().unwrap()]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let (status, ready) = loop {
        let (status, ready) = http(admin, "/readyz");
        if ready.contains("authentication failed") || Instant::now() > deadline {
            break (status, ready);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(status, 503, "{ready}");
    assert!(ready.contains("nj"), "{ready}");
    assert!(ready.contains("SCRAM-SHA-512 authentication failed"), "{ready}");
    let metrics = http_get(admin, "/metrics");
    assert_eq!(
        metric(&metrics, &["strait_upstream_up", "cluster=\"nj\""]),
        Some(0.0),
        "{metrics}"
    );
    // The password is fixed in place: the next login uses it.
    std::fs::write(&password, SCRAM_PASSWORD).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, ready) = http(admin, "/readyz");
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "{ready}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let topic = unique("sec-fixed");
    s.kafka.create_topic(&topic, 1, &[]);
    produce(&strait.bootstrap(), &format!("nj.{topic}"), 10);
    assert_eq!(values(&s.kafka.bootstrap(), &topic, 10).len(), 10);
}
