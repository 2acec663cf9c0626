use super::*;
use crate::Config;

const FILE: &str = "strait.yaml";

#[track_caller]
fn parse(text: &str) -> Config {
    Config::parse(text, FILE).unwrap_or_else(|e| panic!("{text}\ndid not parse: {e}"))
}

/// Parses `text`, expects an error at `path`, and returns its message.
#[track_caller]
fn error(text: &str, path: &str) -> String {
    let error = Config::parse(text, FILE).expect_err(text);
    assert_eq!(error.path(), Some(path), "{error}");
    error.to_string()
}

#[test]
fn by_default_every_group_of_every_cluster_is_watched_every_five_seconds() {
    let config = parse("clusters:\n  nj: { bootstrap: [\"kafka-nj-1:9092\"] }\n");
    let lag = &config.lag;
    assert!(lag.watches("local") && lag.watches("nj"));
    assert_eq!(lag.interval, DEFAULT_INTERVAL);
    assert!(lag.partition_labels);
    assert_eq!(lag.max_groups, DEFAULT_MAX_GROUPS);
    let filter = lag.group_filter();
    assert!(filter.matches("payments") && filter.matches("__anything"));
    assert!(lag.read_committed_filter().is_none());
    // The effective configuration writes the section out and reads back.
    let effective = config.effective();
    let yaml = effective.to_yaml();
    assert!(yaml.contains("lag:"), "{yaml}");
    assert_eq!(parse(&yaml).lag, *lag);
}

#[test]
fn filters_clusters_and_limits_as_written() {
    let config = parse(
        "clusters:\n  nj: { bootstrap: [\"kafka-nj-1:9092\"] }\n  cq: { bootstrap: [\"kafka-cq-1:9092\"] }\n\
         lag:\n  interval: 30s\n  groups: \"payments-.*|billing\"\n  exclude: \".*-test\"\n  \
         read_committed: \"billing\"\n  clusters: [local, cq]\n  partition_labels: false\n  max_groups: 50\n",
    );
    let lag = &config.lag;
    assert_eq!(lag.interval, HumanDuration::secs(30));
    assert!(lag.watches("local") && lag.watches("cq") && !lag.watches("nj"));
    let filter = lag.group_filter();
    assert!(filter.matches("payments-eu") && filter.matches("billing"));
    assert!(!filter.matches("payments-eu-test"), "excluded");
    assert!(!filter.matches("billing-2"), "whole names only");
    let committed = lag.read_committed_filter().expect("a filter");
    assert!(committed.matches("billing") && !committed.matches("payments-eu"));
    assert!(!lag.partition_labels);
    assert_eq!(lag.max_groups, 50);
    // Switched off: nothing is watched.
    let off = parse("lag: { enabled: false }\n");
    assert!(!off.lag.watches("local"));
}

#[test]
fn bad_values_name_their_key() {
    let message = error("lag: { interval: 100ms }\n", "lag.interval");
    assert!(message.contains("from 1s to 1h"), "{message}");
    assert!(error("lag: { interval: 2h }\n", "lag.interval").contains("not 2h"));
    let message = error("lag: { groups: \"(\" }\n", "lag.groups");
    assert!(message.contains("regex"), "{message}");
    error("lag: { exclude: \"[\" }\n", "lag.exclude");
    error("lag: { read_committed: \"(\" }\n", "lag.read_committed");
    error("lag: { max_groups: 0 }\n", "lag.max_groups");
    let message = error(
        "clusters:\n  nj: { bootstrap: [\"kafka-nj-1:9092\"] }\nlag: { clusters: [local, ny] }\n",
        "lag.clusters[1]",
    );
    assert!(
        message.contains("\"ny\"") && message.contains("local, nj"),
        "{message}"
    );
    error("lag: { poll: 5s }\n", "lag.poll");
}
