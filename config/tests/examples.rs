//! Every file in `config/examples/` must parse and validate, so the examples
//! in the repository can never drift from the schema.

use std::path::Path;

use strait_config::{Config, Durability, OnLostRecords, StartPosition};

#[test]
fn every_example_is_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("examples directory is readable") {
        let path = entry.expect("directory entry").path();
        if path.extension().is_some_and(|ext| ext == "yaml" || ext == "yml") {
            let config = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
            // The effective form of every example parses back to itself.
            let again = Config::parse(&config.to_yaml(), "effective")
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(again, config.effective(), "{}", path.display());
            checked.push(path.file_name().unwrap_or_default().to_owned());
        }
    }
    checked.sort();
    assert_eq!(
        checked,
        [
            "durable.yaml",
            "instances.yaml",
            "minimal.yaml",
            "mirror.yaml",
            "retention.yaml",
            "routes.yaml",
            "secure.yaml"
        ],
        "update this list when adding examples"
    );
}

fn load(name: &str) -> Config {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name);
    Config::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn minimal_is_the_default() {
    assert_eq!(load("minimal.yaml"), Config::default());
}

#[test]
fn durable_syncs_every_batch() {
    let config = load("durable.yaml");
    let topic = config.spool.for_topic("anything");
    assert_eq!(topic.durability, Durability::EveryBatch);
    assert_eq!(topic.retention_bytes, Some(50 << 30));
}

#[test]
fn retention_overrides_per_topic() {
    let spool = load("retention.yaml").spool;
    let day = 86_400;

    let payments = spool.for_topic("payments");
    assert_eq!(payments.durability, Durability::EveryBatch);
    assert_eq!(payments.retention_age.map(|d| d.as_secs()), Some(30 * day));
    assert_eq!(payments.retention_bytes, Some(20 << 30), "inherited");

    let audit = spool.for_topic("audit.log");
    assert_eq!(audit.retention_age, None);
    assert_eq!(audit.retention_bytes, None);
    assert_eq!(audit.durability, Durability::Interval, "inherited");

    let metrics = spool.for_topic("metrics-raw");
    assert_eq!(metrics.durability, Durability::Os);
    assert_eq!(metrics.segment_bytes, 64 << 20);

    assert_eq!(spool.retention_check_interval.duration().as_secs(), 30);

    let other = spool.for_topic("orders");
    assert_eq!(other.retention_age.map(|d| d.as_secs()), Some(3 * day));
    assert_eq!(other.flush_bytes, Some(64 << 20));
}

#[test]
fn mirror_copies_some_topics_under_a_prefix() {
    let config = load("mirror.yaml");
    assert_eq!(config.clusters.keys().collect::<Vec<_>>(), ["cq", "nj"]);
    assert_eq!(config.clusters["nj"].bootstrap.len(), 2);
    assert_eq!(
        config.admin.listen_addr().unwrap(),
        Some("127.0.0.1:9644".parse().unwrap())
    );

    let mirror = &config.mirrors["nj-to-cq"];
    assert_eq!((mirror.source.as_str(), mirror.target.as_str()), ("nj", "cq"));
    let filter = mirror.topic_filter();
    for topic in ["orders", "payments", "audit.eu"] {
        assert!(filter.matches(topic), "{topic}");
    }
    for topic in ["orders-old", "audit", "__consumer_offsets"] {
        assert!(!filter.matches(topic), "{topic}");
    }
    assert_eq!(mirror.target_topic("audit.eu"), "nj.audit.eu");
    assert_eq!(mirror.group_id("nj-to-cq"), "nj-to-cq");
    assert_eq!(mirror.start, StartPosition::Earliest);
    assert_eq!(mirror.on_lost_records, OnLostRecords::Continue);
}

#[test]
fn secure_names_its_secrets_and_listeners() {
    let config = load("secure.yaml");
    let names: Vec<_> = config
        .server
        .all_listeners()
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(names, ["main", "secure", "services"]);
    let nj = &config.clusters["nj"];
    assert_eq!(
        nj.sasl.as_ref().unwrap().password,
        Some(strait_config::Secret::Env("NJ_PASSWORD".into()))
    );
    assert!(config.admin.token.is_some());
    // Secrets print as where they are, never as what they are.
    let printed = config.to_yaml();
    assert!(printed.contains("env: NJ_PASSWORD"), "{printed}");
}

#[test]
fn instances_meet_on_dc1_and_send_it_every_topic_and_group() {
    let config = load("instances.yaml");
    let instances = config.instances.as_ref().expect("instances");
    assert_eq!(instances.cluster, "dc1");
    assert_eq!(
        config.group_routes().resolve("orders-readers").cluster(),
        Some("dc1")
    );
}
