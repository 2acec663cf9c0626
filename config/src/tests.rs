use super::*;

use std::time::Duration;

const FILE: &str = "strait.yaml";

fn parse(text: &str) -> Config {
    match Config::parse(text, FILE) {
        Ok(config) => config,
        Err(e) => panic!("{text:?} did not parse: {e}"),
    }
}

/// Parses `text`, expects an error, and checks that its message names the
/// file, the key path and the reason, and that the error knows the path.
#[track_caller]
fn check_error(text: &str, path: &str, reason: &str) -> ConfigError {
    let error = match Config::parse(text, FILE) {
        Ok(config) => panic!("{text:?} parsed: {config:?}"),
        Err(error) => error,
    };
    let message = error.to_string();
    assert!(message.starts_with(FILE), "no file name in {message:?}");
    assert!(
        message.contains(&format!(" {path}: ")),
        "no key path {path:?} in {message:?}"
    );
    assert!(message.contains(reason), "no {reason:?} in {message:?}");
    assert_eq!(error.path(), Some(path));
    error
}

#[test]
fn empty_documents_are_the_default() {
    for text in [
        "",
        "\n",
        "# nothing set\n",
        "---\n",
        "{}",
        "spool:\n",
        "spool: {}\n",
        "spool:\n  topics:\n",
        "clusters:\n",
        "clusters: {}\nmirrors: {}\n",
        "mirrors:\n",
        "admin:\n",
        "admin:\n  listen: null\n",
    ] {
        assert_eq!(parse(text), Config::default(), "{text:?}");
    }
}

#[test]
fn misspelt_key() {
    let error = check_error(
        "data_dir: /var/lib/strait\nspool:\n  segmnt_bytes: 1GiB\n",
        "spool.segmnt_bytes",
        "unknown field `segmnt_bytes`, expected one of `segment_bytes`, `segment_age`",
    );
    assert_eq!(
        error.to_string(),
        "strait.yaml:3:3: spool.segmnt_bytes: unknown field `segmnt_bytes`, expected one of \
         `segment_bytes`, `segment_age`, `index_interval_bytes`, `index_bytes`, \
         `max_batch_bytes`, `retention_bytes`, `retention_age`, `retention_check_interval`, \
         `durability`, `flush_interval`, `flush_bytes`, `topics`"
    );
    check_error(
        "spol: {}\n",
        "spol",
        "unknown field `spol`, expected one of `data_dir`, `server`, `broker`, `spool`, \
         `clusters`, `admin`, `mirrors`",
    );
    check_error(
        "mirror: {}\n",
        "mirror",
        "unknown field `mirror`, expected one of",
    );
    check_error(
        "spool:\n  topics:\n    payments:\n      retention: 30d\n",
        "spool.topics.payments.retention",
        "unknown field `retention`",
    );
    // The retention check runs for all topics at once.
    check_error(
        "spool:\n  topics:\n    payments:\n      retention_check_interval: 1m\n",
        "spool.topics.payments.retention_check_interval",
        "unknown field `retention_check_interval`",
    );
    // `topics` is not allowed inside a topic.
    check_error(
        "spool:\n  topics:\n    payments:\n      topics: {}\n",
        "spool.topics.payments.topics",
        "unknown field `topics`",
    );
}

#[test]
fn bad_values() {
    let error = check_error(
        "spool:\n  segment_bytes: 12 parsecs\n",
        "spool.segment_bytes",
        "invalid size `12 parsecs`: unknown unit `parsecs`",
    );
    assert!(error.to_string().starts_with("strait.yaml:2:18: "), "{error}");
    check_error(
        "spool:\n  topics:\n    payments:\n      max_batch_bytes: 1.5MiB\n",
        "spool.topics.payments.max_batch_bytes",
        "fractions are not supported",
    );
    check_error(
        "spool:\n  segment_age: 7\n",
        "spool.segment_age",
        "a bare number is ambiguous; add a unit, e.g. `7s`",
    );
    check_error(
        "spool:\n  topics:\n    t:\n      flush_interval: 100\n",
        "spool.topics.t.flush_interval",
        "add a unit, e.g. `100s`, `100ms`",
    );
    check_error(
        "spool:\n  durability: fsync\n",
        "spool.durability",
        "unknown variant `fsync`, expected one of `every_batch`, `interval`, `os`",
    );
    check_error(
        "spool:\n  segment_bytes: null\n",
        "spool.segment_bytes",
        "invalid type: unit value",
    );
    // A negative value reads the same whatever its kind or form.
    let negative = [
        (
            "spool:\n  segment_bytes: -5MiB\n",
            "spool.segment_bytes",
            "invalid size `-5MiB`",
        ),
        (
            "spool:\n  segment_bytes: -1\n",
            "spool.segment_bytes",
            "invalid size `-1`",
        ),
        (
            "spool:\n  segment_age: -5s\n",
            "spool.segment_age",
            "invalid duration `-5s`",
        ),
        (
            "spool:\n  segment_age: -5\n",
            "spool.segment_age",
            "invalid duration `-5`",
        ),
        (
            "server:\n  max_connections: -1\n",
            "server.max_connections",
            "invalid number `-1`",
        ),
        (
            "broker:\n  default_partitions: -3\n",
            "broker.default_partitions",
            "invalid number `-3`",
        ),
    ];
    for (text, path, start) in negative {
        let error = check_error(text, path, &format!("{start}: must not be negative"));
        assert!(error.to_string().ends_with(": must not be negative"), "{error}");
    }
    check_error(
        "server:\n  max_connections: 99999999999\n",
        "server.max_connections",
        "invalid number `99999999999`: too large (at most 4294967295)",
    );
    check_error(
        "spool:\n  segment_age: 1d\n  segment_age: 2d\n",
        "spool.segment_age",
        "duplicate field `segment_age`",
    );
}

#[test]
fn bad_yaml() {
    let error = Config::parse("spool:\n\tsegment_bytes: 1GiB\n", FILE).unwrap_err();
    let message = error.to_string();
    assert!(message.starts_with("strait.yaml:2:1: "), "{message}");
    assert!(message.contains("cannot start any token"), "{message}");

    let error = Config::parse("{}\n---\n{}\n", FILE).unwrap_err();
    assert!(error.to_string().contains("more than one document"), "{error}");
}

#[test]
fn validation_errors_name_file_and_key() {
    let error = check_error(
        "spool:\n  topics:\n    payments:\n      retention_age: 0s\n",
        "spool.topics.payments.retention_age",
        "must be greater than zero; use null to keep data forever",
    );
    assert!(matches!(error, ConfigError::Invalid { .. }));
    assert_eq!(
        error.to_string(),
        "strait.yaml: spool.topics.payments.retention_age: must be greater than zero; \
         use null to keep data forever"
    );
    check_error(
        "spool:\n  segment_bytes: 1MiB\n  max_batch_bytes: 4MiB\n",
        "spool.max_batch_bytes",
        "max_batch_bytes (4MiB) is larger than segment_bytes (1MiB)",
    );
    check_error(
        "spool:\n  durability: every_batch\n  flush_interval: 1s\n",
        "spool.flush_interval",
        "has no effect with `durability: every_batch`",
    );
    check_error(
        "spool:\n  topics:\n    '..':\n      segment_age: 1h\n",
        "spool.topics...",
        "invalid topic name `..`",
    );
    check_error("data_dir: ''\n", "data_dir", "must not be empty");
}

#[test]
fn retention_check_interval() {
    assert_eq!(
        Config::default().spool.retention_check_interval,
        HumanDuration::minutes(1)
    );
    let config = parse("spool:\n  retention_check_interval: 5m\n");
    assert_eq!(
        config.spool.retention_check_interval.duration(),
        Duration::from_secs(300)
    );
    check_error(
        "spool:\n  retention_check_interval: 0s\n",
        "spool.retention_check_interval",
        "must be greater than zero",
    );
    check_error(
        "spool:\n  retention_check_interval: 300000\n",
        "spool.retention_check_interval",
        "a bare number is ambiguous; add a unit",
    );
    check_error(
        "spool:\n  retention_check_interval: -1m\n",
        "spool.retention_check_interval",
        "invalid duration `-1m`: must not be negative",
    );
}

#[test]
fn duplicate_topics_are_rejected() {
    let error = check_error(
        "spool:\n  topics:\n    a:\n      segment_age: 1h\n    b: {}\n    a:\n      segment_age: 2h\n",
        "spool.topics.a",
        "duplicate topic `a`",
    );
    assert!(error.to_string().starts_with("strait.yaml:3:5: "), "{error}");
}

#[test]
fn load_reads_the_file_and_names_it() {
    let dir = std::env::temp_dir().join(format!("strait-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let good = dir.join("good.yaml");
    std::fs::write(&good, "spool:\n  durability: os\n").unwrap();
    let config = Config::load(&good).unwrap();
    assert_eq!(config.spool.durability, Durability::Os);

    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "spool:\n  segment_age: 7\n").unwrap();
    let message = Config::load(&bad).unwrap_err().to_string();
    assert!(
        message.starts_with(&format!("{}:2:16: spool.segment_age: ", bad.display())),
        "{message}"
    );

    let missing = dir.join("missing.yaml");
    let error = Config::load(&missing).unwrap_err();
    assert!(matches!(error, ConfigError::Io { .. }));
    let message = error.to_string();
    assert!(
        message.starts_with(&format!("cannot read configuration file {}: ", missing.display())),
        "{message}"
    );
    assert_eq!(error.path(), None);

    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn to_yaml_writes_defaults_in_human_units() {
    assert_eq!(
        Config::default().to_yaml(),
        "\
data_dir: ./data
server:
  listen: 127.0.0.1:9092
  advertised: null
  max_connections: 10000
  max_frame_bytes: 100MiB
  idle_timeout: 10m
  request_timeout: 30s
  shutdown_grace: 10s
  failed_authentication_delay: 100ms
broker:
  auto_create_topics: true
  default_partitions: 1
  group_min_session_timeout: 6s
  group_max_session_timeout: 30m
  group_initial_rebalance_delay: 3s
  offsets_retention: 7d
  fetch_max_bytes: 55MiB
spool:
  segment_bytes: 1GiB
  segment_age: 7d
  index_interval_bytes: 4KiB
  index_bytes: 10MiB
  max_batch_bytes: 1MiB
  retention_bytes: null
  retention_age: 7d
  retention_check_interval: 1m
  durability: interval
  flush_interval: 1s
  flush_bytes: null
  topics: {}
clusters: {}
admin:
  listen: null
  partition_labels: true
  topic_labels: true
mirrors: {}
routes:
- regex: .*
  to: local
groups:
- regex: .*
  to: local
lag:
  enabled: true
  interval: 5s
  groups: .*
  exclude: ''
  read_committed: ''
  partition_labels: true
  max_groups: 10000
"
    );
}

#[test]
fn to_yaml_writes_every_default_of_clusters_and_mirrors() {
    let config = parse(
        "
clusters:
  nj: { bootstrap: [\"kafka-nj-1:9092\"] }
  cq: { bootstrap: [\"kafka-cq-1:9092\", \"kafka-cq-2:9092\"], client_id: strait-cq }
admin:
  listen: 127.0.0.1:9644
mirrors:
  nj-to-cq: { source: nj, target: cq, topics: \"orders|payments\", rename: \"nj.{topic}\" }
",
    );
    let yaml = config.to_yaml();
    let sections = &yaml[yaml.find("clusters:").expect("clusters are written")..];
    assert_eq!(
        sections,
        "\
clusters:
  cq:
    bootstrap:
    - kafka-cq-1:9092
    - kafka-cq-2:9092
    client_id: strait-cq
    connect_timeout: 10s
    request_timeout: 30s
    metadata_refresh: 5m
    max_bytes_in_flight: 64MiB
  nj:
    bootstrap:
    - kafka-nj-1:9092
    client_id: strait
    connect_timeout: 10s
    request_timeout: 30s
    metadata_refresh: 5m
    max_bytes_in_flight: 64MiB
admin:
  listen: 127.0.0.1:9644
  partition_labels: true
  topic_labels: true
mirrors:
  nj-to-cq:
    source: nj
    target: cq
    topics: orders|payments
    exclude: __.*
    rename: nj.{topic}
    group: nj-to-cq
    commit_interval: 1s
    session_timeout: 10s
    start: earliest
    discovery_interval: 10s
    max_bytes_in_flight: 128MiB
    on_lost_records: continue
    coalesce_below: 0B
    staggered_polls: true
    prevent_loops: false
    offset_map_topic: __strait_mirror_offsets.nj-to-cq
    offset_map_retention: 7d
routes:
- regex: .*
  to: local
groups:
- regex: .*
  to: local
lag:
  enabled: true
  interval: 5s
  groups: .*
  exclude: ''
  read_committed: ''
  partition_labels: true
  max_groups: 10000
"
    );
}

#[test]
fn round_trip() {
    let texts = [
        "",
        "data_dir: /var/lib/strait\nspool:\n  durability: every_batch\n",
        "spool:\n  durability: os\n  retention_age: null\n  retention_bytes: 100GB\n",
        "
spool:
  segment_bytes: 1536MiB
  segment_age: 1h30m
  index_interval_bytes: 1000
  index_bytes: 1 MiB
  max_batch_bytes: 8MiB
  retention_bytes: 1TiB
  retention_age: 36h
  retention_check_interval: 30s
  flush_interval: 250ms
  flush_bytes: 16MiB
  topics:
    payments:
      durability: every_batch
      retention_age: 30d
    audit.log:
      retention_age: null
      retention_bytes: null
      flush_bytes: null
    '0042':
      segment_bytes: 64KiB
      max_batch_bytes: 64KiB
      index_bytes: 4KiB
      index_interval_bytes: 1B
      segment_age: 90s
      durability: interval
      flush_interval: 1500ms
",
        r#"
clusters:
  nj: { bootstrap: ["kafka-nj-1:9092", "[::1]:9093"] }
  ny: { bootstrap: ["10.0.0.1:9092"], metadata_refresh: 30s, max_bytes_in_flight: 1MiB }
  cq:
    bootstrap: ["kafka-cq-1:9092"]
    client_id: "strait mirror \u00e9"
    connect_timeout: 1500ms
    request_timeout: 1m
admin:
  listen: "[::]:9644"
  partition_labels: false
mirrors:
  nj-to-cq:
    source: nj
    target: cq
    topics: "orders|payments|audit\\..*"
    rename: "nj.{topic}"
  ny-to-cq:
    source: ny
    target: cq
    topics: "(?x) .* # everything"
    exclude: ""
    rename: "ny.{topic}"
    group: "legacy:mm2"
    commit_interval: 250ms
    start: latest
    discovery_interval: 1m
    max_bytes_in_flight: 1GiB
    on_lost_records: stop
  '0':
    source: cq
    target: cq
    topics: "orders|payments"
    rename: "{topic}.{topic}.backup"
"#,
    ];
    for text in texts {
        let config = parse(text);
        let yaml = config.to_yaml();
        let again = parse(&yaml);
        assert_eq!(again, config.effective(), "{text}\n=>\n{yaml}");
        assert_eq!(again.to_yaml(), yaml, "to_yaml is a fixed point");
        for topic in ["payments", "audit.log", "0042", "other"] {
            assert_eq!(
                again.spool.for_topic(topic),
                config.spool.for_topic(topic),
                "{topic}"
            );
        }
        for (name, mirror) in &config.mirrors {
            let back = &again.mirrors[name];
            assert_eq!(back.group_id(name), mirror.group_id(name), "{name}");
            let (before, after) = (mirror.topic_filter(), back.topic_filter());
            for topic in ["orders", "audit.eu", "abc", "__consumer_offsets", "x.y"] {
                assert_eq!(after.matches(topic), before.matches(topic), "{name} {topic}");
                assert_eq!(back.target_topic(topic), mirror.target_topic(topic));
            }
        }
    }
}

#[test]
fn effective_fills_flush_interval_only_under_interval() {
    let effective = Config::default().effective();
    assert_eq!(effective.spool.flush_interval, Some(HumanDuration::secs(1)));
    assert_eq!(effective.effective(), effective);

    let durable = parse("spool:\n  durability: every_batch\n").effective();
    assert_eq!(durable.spool.flush_interval, None);
    assert!(durable.to_yaml().contains("  flush_interval: null\n"));
}

#[test]
fn resolved_topic() {
    let config =
        parse("spool:\n  topics:\n    payments:\n      durability: every_batch\n      retention_age: 30d\n");
    let payments = config.spool.for_topic("payments");
    assert_eq!(payments.durability, Durability::EveryBatch);
    assert_eq!(payments.retention_age, Some(Duration::from_secs(30 * 86_400)));
    assert_eq!(payments.segment_bytes, 1 << 30);
    assert_eq!(config.spool.for_topic("other"), TopicSpoolConfig::default());
}

#[test]
fn cluster_tls_and_sasl() {
    let config = parse(
        "
clusters:
  nj:
    bootstrap: [\"kafka-nj-1:9093\"]
    tls: { ca_file: /etc/strait/nj-ca.pem, cert_file: /etc/strait/me.pem, key_file: /etc/strait/me.key }
    sasl: { mechanism: SCRAM-SHA-512, username: strait, password: { env: NJ_PASSWORD } }
  cq:
    bootstrap: [\"kafka-cq-1:9093\"]
    tls: {}
    sasl: { mechanism: OAUTHBEARER, token: { file: /run/secrets/cq-token } }
",
    );
    let nj = &config.clusters["nj"];
    let tls = nj.tls.as_ref().unwrap();
    assert!(tls.verify_hostname, "hostnames are verified by default");
    assert_eq!(tls.key_file.as_deref(), Some(Path::new("/etc/strait/me.key")));
    let sasl = nj.sasl.as_ref().unwrap();
    assert_eq!(sasl.mechanism, SaslMechanism::ScramSha512);
    assert_eq!(sasl.password, Some(Secret::Env("NJ_PASSWORD".into())));
    let cq = &config.clusters["cq"];
    assert_eq!(cq.tls, Some(ClientTls::default()));
    assert_eq!(
        cq.sasl.as_ref().unwrap().token,
        Some(Secret::File("/run/secrets/cq-token".into()))
    );
    // Printed back with the secrets' places, never a secret.
    let yaml = config.to_yaml();
    assert!(yaml.contains("password:\n        env: NJ_PASSWORD"), "{yaml}");
    assert!(yaml.contains("mechanism: OAUTHBEARER"), "{yaml}");
    assert_eq!(Config::parse(&yaml, FILE).unwrap().clusters, config.clusters);
    // A cluster without either prints neither.
    let plain = parse("clusters:\n  nj: { bootstrap: [\"k:9092\"] }\n");
    assert!(!plain.to_yaml().contains("tls"));
}

#[test]
fn bad_tls_and_sasl() {
    let cluster = |rest: &str| format!("clusters:\n  nj: {{ bootstrap: [\"k:9093\"], {rest} }}\n");
    for (rest, path, reason) in [
        (
            "sasl: { mechanism: PLAIN, username: u, password: hunter2 }",
            "clusters.nj.sasl.password",
            "never the secret itself",
        ),
        (
            "sasl: { mechanism: PLAIN, username: u, password: { env: A, file: /b } }",
            "clusters.nj.sasl.password",
            "either { env: NAME } or { file: /path }",
        ),
        (
            "sasl: { mechanism: SCRAM-SHA-256, username: u }",
            "clusters.nj.sasl.password",
            "required for SCRAM-SHA-256",
        ),
        (
            "sasl: { mechanism: SCRAM-SHA-512, password: { env: P } }",
            "clusters.nj.sasl.username",
            "required for SCRAM-SHA-512",
        ),
        (
            "sasl: { mechanism: OAUTHBEARER, username: u }",
            "clusters.nj.sasl.username",
            "use `token` or `oauth` instead",
        ),
        (
            "sasl: { mechanism: OAUTHBEARER }",
            "clusters.nj.sasl.token",
            "required for OAUTHBEARER",
        ),
        (
            "sasl: { mechanism: PLAIN, username: u, password: { env: P }, token: { env: T } }",
            "clusters.nj.sasl.token",
            "not a token",
        ),
        (
            "sasl: { mechanism: PLAIN, username: u, password: { env: \"\" } }",
            "clusters.nj.sasl.password",
            "not an environment variable's name",
        ),
        (
            "sasl: { mechanism: OAUTHBEARER, oauth: { token_endpoint: \"ftp://idp/token\", client_id: s, client_secret: { env: S } } }",
            "clusters.nj.sasl.oauth.token_endpoint",
            "not an http:// or https:// address",
        ),
        (
            "sasl: { mechanism: OAUTHBEARER, oauth: { token_endpoint: \"https://idp/token\", client_id: \"a:b\", client_secret: { env: S } } }",
            "clusters.nj.sasl.oauth.client_id",
            "must not be empty or hold `:`",
        ),
        (
            "sasl: { mechanism: OAUTHBEARER, token: { env: T }, oauth: { token_endpoint: \"https://idp/token\", client_id: s, client_secret: { env: S } } }",
            "clusters.nj.sasl.oauth",
            "not both",
        ),
        (
            "sasl: { mechanism: PLAIN, username: u, password: { env: P }, oauth: { token_endpoint: \"https://idp/token\", client_id: s, client_secret: { env: S } } }",
            "clusters.nj.sasl.oauth",
            "not a token",
        ),
        (
            "sasl: { mechanism: GSSAPI }",
            "clusters.nj.sasl.mechanism",
            "GSSAPI",
        ),
        (
            "tls: { cert_file: /a.pem }",
            "clusters.nj.tls.key_file",
            "required with cert_file",
        ),
        (
            "tls: { key_file: /a.key }",
            "clusters.nj.tls.cert_file",
            "required with key_file",
        ),
        (
            "tls: { server_name: \"a b\" }",
            "clusters.nj.tls.server_name",
            "not a host name",
        ),
        (
            "tls: { ca: /a.pem }",
            "clusters.nj.tls.ca",
            "unknown field `ca`, expected one of `ca_file`",
        ),
    ] {
        check_error(&cluster(rest), path, reason);
    }
}

#[test]
fn listeners_with_tls_and_sasl() {
    let config = parse(
        "server:\n  users_file: /etc/strait/users.yaml\n  listeners:\n    - name: secure\n      listen: 0.0.0.0:9093\n      \
         advertised: kafka.example.com:9093\n      tls: { cert_file: /c.pem, key_file: /k.pem, client_ca_file: /ca.pem, \
         client_auth: requested, principal: san }\n      sasl: { mechanisms: [SCRAM-SHA-512], session_lifetime: 1h }\n",
    )
    ;
    let all = config.server.all_listeners();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].name, MAIN_LISTENER);
    assert_eq!(all[0].listen, "127.0.0.1:9092");
    assert_eq!(
        all[1].advertised_host_port().unwrap(),
        ("kafka.example.com".into(), 9093)
    );
    let tls = all[1].tls.as_ref().unwrap();
    assert_eq!(tls.client_auth, crate::ClientAuth::Requested);
    assert_eq!(tls.principal, crate::CertPrincipal::San);
    let sasl = all[1].sasl.as_ref().unwrap();
    assert_eq!(sasl.mechanisms, vec![SaslMechanism::ScramSha512]);
    // Printed back, it reads the same.
    let again = parse(&config.to_yaml());
    assert_eq!(again.server, config.server);
}

#[test]
fn bad_listeners() {
    let listener = |rest: &str| {
        format!("server:\n  users_file: /u.yaml\n  listeners:\n    - {{ name: secure, listen: \"127.0.0.1:9093\"{rest} }}\n")
    };
    for (yaml, path, reason) in [
        (
            "server:\n  sasl: {}\n".to_owned(),
            "server.users_file",
            "required by server.sasl",
        ),
        (
            listener(", sasl: { mechanisms: [OAUTHBEARER] }"),
            "server.listeners[0].sasl.mechanisms",
            "does not accept OAUTHBEARER",
        ),
        (
            listener(", sasl: { mechanisms: [] }"),
            "server.listeners[0].sasl.mechanisms",
            "at least one",
        ),
        (
            listener(", tls: { cert_file: /c, key_file: /k, client_auth: requested }"),
            "server.listeners[0].tls.client_auth",
            "needs client_ca_file",
        ),
        (
            listener(", tls: { cert_file: /c }"),
            "server.listeners[0].tls",
            "missing field `key_file`",
        ),
        (
            "server:\n  listeners:\n    - { name: main, listen: \"127.0.0.1:9093\" }\n".to_owned(),
            "server.listeners[0].name",
            "names two listeners",
        ),
        (
            "server:\n  listeners:\n    - { name: b, listen: \"127.0.0.1:9092\" }\n".to_owned(),
            "server.listeners[0].listen",
            "also listener `main`'s address",
        ),
        (
            "server:\n  listeners:\n    - { name: \"a b\", listen: \"127.0.0.1:9093\" }\n".to_owned(),
            "server.listeners[0].name",
            "is not a name",
        ),
        (
            "server:\n  request_timeout: 1s\n  failed_authentication_delay: 2s\n".to_owned(),
            "server.failed_authentication_delay",
            "must not exceed request_timeout",
        ),
    ] {
        check_error(&yaml, path, reason);
    }
}

#[test]
fn instances_meet_on_a_cluster_and_refuse_local_topics() {
    let clusters = "clusters:\n  dc1: { bootstrap: [\"k1:9092\"] }\n";
    let config = parse(&format!(
        "{clusters}routes:\n  - {{ regex: \".*\", to: dc1 }}\ninstances: {{ cluster: dc1 }}\n"
    ));
    let instances = config.instances.as_ref().expect("instances");
    assert_eq!(instances.group, instances::DEFAULT_GROUP);
    assert_eq!(instances.producers_topic, instances::DEFAULT_PRODUCERS_TOPIC);
    assert_eq!(Duration::from(instances.session_timeout), Duration::from_secs(6));
    assert_eq!(config.effective().instances, config.instances);
    // Groups go to the cluster where the instances meet.
    let groups = config.group_routes();
    assert_eq!(groups.resolve("any").cluster(), Some("dc1"));
    check_error(
        &format!(
            "{clusters}routes:\n  - {{ regex: \".*\", to: dc1 }}\ngroups:\n  - {{ prefix: a, to: dc1 }}\n  - {{ regex: \".*\", to: local }}\ninstances: {{ cluster: dc1 }}\n"
        ),
        "groups[1].to",
        "one instance's memory",
    );
    check_error(
        &format!("{clusters}routes:\n  - {{ regex: \".*\", to: dc1 }}\ninstances: {{ cluster: dc2 }}\n"),
        "instances.cluster",
        "`dc2` is not a cluster",
    );
    check_error(
        &format!(
            "{clusters}routes:\n  - {{ prefix: \"a.\", to: dc1 }}\n  - {{ regex: \".*\", to: local }}\ninstances: {{ cluster: dc1 }}\n"
        ),
        "routes[1].to",
        "local topics live on one instance's disk",
    );
    check_error(
        &format!("{clusters}instances: {{ cluster: dc1 }}\n"),
        "instances",
        "without `routes:` every topic is local",
    );
    check_error(
        &format!(
            "{clusters}routes:\n  - {{ regex: \".*\", to: dc1 }}\ninstances: {{ cluster: dc1, session_timeout: 10m }}\n"
        ),
        "instances.session_timeout",
        "between 1s and 5m",
    );
    check_error(
        &format!(
            "{clusters}routes:\n  - {{ regex: \".*\", to: dc1 }}\ninstances: {{ cluster: dc1, producers_topic: \"a b\" }}\n"
        ),
        "instances.producers_topic",
        "",
    );
    check_error(
        &format!("{clusters}routes:\n  - {{ regex: \".*\", to: dc1 }}\ninstances: {{ group: g }}\n"),
        "instances",
        "cluster",
    );
}
