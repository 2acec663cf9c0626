use super::*;
use crate::overlap::{finite_names, overlap, NameMap, Overlap, Template, MAX_STATES};
use crate::{Config, ConfigError};

const FILE: &str = "strait.yaml";

/// Two clusters, `nj` and `cq`, and what follows.
fn with_clusters(rest: &str) -> String {
    format!(
        "clusters:\n  nj: {{ bootstrap: [\"kafka-nj-1:9092\"] }}\n  ny: {{ bootstrap: [\"kafka-ny-1:9092\"] }}\n  \
         cq: {{ bootstrap: [\"kafka-cq-1:9092\"] }}\n{rest}"
    )
}

#[track_caller]
fn parse(text: &str) -> Config {
    Config::parse(text, FILE).unwrap_or_else(|e| panic!("{text}\ndid not parse: {e}"))
}

/// Parses `text`, expects an error naming `path`, and returns its message
/// (after the path).
#[track_caller]
fn error(text: &str, path: &str) -> String {
    let error = match Config::parse(text, FILE) {
        Ok(config) => panic!("{text}\nparsed: {config:?}"),
        Err(error) => error,
    };
    let message = error.to_string();
    assert_eq!(error.path(), Some(path), "{message}");
    let start = format!(" {path}: ");
    let at = message
        .find(&start)
        .unwrap_or_else(|| panic!("no {start:?} in {message:?}"));
    assert!(message.starts_with(FILE), "{message}");
    message[at + start.len()..].to_owned()
}

#[track_caller]
fn error_has(text: &str, path: &str, words: &[&str]) -> String {
    let message = error(text, path);
    for word in words {
        assert!(message.contains(word), "no {word:?} in {message:?}");
    }
    message
}

/// A mirror `m` with the given keys, indented two spaces.
fn mirror(name: &str, keys: &str) -> String {
    let mut out = format!("  {name}:\n");
    for line in keys.lines() {
        out.push_str("    ");
        out.push_str(line.trim());
        out.push('\n');
    }
    out
}

#[test]
fn the_whole_example_parses() {
    let config = parse(
        r#"
clusters:
  nj: { bootstrap: ["kafka-nj-1:9092", "kafka-nj-2:9092"] }
  cq:
    bootstrap: ["kafka-cq-1:9092"]
    client_id: strait
    connect_timeout: 10s
    request_timeout: 30s
    metadata_refresh: 5m
    max_bytes_in_flight: 64MiB
admin:
  listen: 127.0.0.1:9644
  partition_labels: true
mirrors:
  nj-to-cq:
    source: nj
    target: cq
    topics: "orders|payments|audit\\..*"
    exclude: "__.*"
    rename: "nj.{topic}"
    group: nj-to-cq
    commit_interval: 1s
    start: earliest
    discovery_interval: 10s
    max_bytes_in_flight: 128MiB
    on_lost_records: continue
"#,
    );
    let nj = &config.clusters["nj"];
    assert_eq!(nj.bootstrap, ["kafka-nj-1:9092", "kafka-nj-2:9092"]);
    assert_eq!(
        nj,
        &ClusterConfig {
            bootstrap: nj.bootstrap.clone(),
            ..ClusterConfig::default()
        }
    );
    assert_eq!(
        config.clusters["cq"],
        ClusterConfig {
            bootstrap: vec!["kafka-cq-1:9092".into()],
            ..ClusterConfig::default()
        }
    );
    assert_eq!(
        config.admin.listen_addr().unwrap(),
        Some("127.0.0.1:9644".parse().unwrap())
    );
    let m = &config.mirrors["nj-to-cq"];
    assert_eq!(
        m,
        &MirrorConfig {
            source: "nj".into(),
            target: "cq".into(),
            topics: "orders|payments|audit\\..*".into(),
            rename: "nj.{topic}".into(),
            group: Some("nj-to-cq".into()),
            ..MirrorConfig::default()
        }
    );
    let filter = m.topic_filter();
    for topic in ["orders", "payments", "audit.eu", "audit."] {
        assert!(filter.matches(topic), "{topic}");
    }
    for topic in [
        "orders-eu",
        "xorders",
        "audit",
        "auditxeu",
        "payments2",
        "__consumer_offsets",
    ] {
        assert!(!filter.matches(topic), "{topic}");
    }
    assert_eq!(m.target_topic("orders"), "nj.orders");
}

#[test]
fn defaults() {
    let cluster = ClusterConfig::default();
    assert!(cluster.bootstrap.is_empty());
    assert_eq!(cluster.client_id, "strait");
    assert_eq!(cluster.connect_timeout, HumanDuration::secs(10));
    assert_eq!(cluster.request_timeout, HumanDuration::secs(30));
    assert_eq!(cluster.metadata_refresh, HumanDuration::minutes(5));
    assert_eq!(cluster.max_bytes_in_flight, ByteSize::mib(64));

    let admin = crate::AdminConfig::default();
    assert_eq!(admin.listen, None);
    assert_eq!(admin.listen_addr(), Ok(None));
    assert!(admin.partition_labels);

    let config = parse(&with_clusters(
        "mirrors:\n  m:\n    source: nj\n    target: cq\n    topics: orders\n",
    ));
    let m = &config.mirrors["m"];
    assert_eq!(m.exclude, "__.*");
    assert_eq!(m.rename, "{topic}");
    assert_eq!(m.group, None);
    assert_eq!(m.group_id("m"), "m");
    assert_eq!(m.commit_interval, HumanDuration::secs(1));
    assert_eq!(m.start, StartPosition::Earliest);
    assert_eq!(m.discovery_interval, HumanDuration::secs(10));
    assert_eq!(m.max_bytes_in_flight, ByteSize::mib(128));
    assert_eq!(m.on_lost_records, OnLostRecords::Continue);
    assert_eq!(m.coalesce_below, ByteSize::b(0));
    assert!(m.staggered_polls);
    assert_eq!(m.target_topic("orders"), "orders");

    // The effective configuration writes the group out.
    let effective = config.effective();
    assert_eq!(effective.mirrors["m"].group.as_deref(), Some("m"));
    assert_eq!(effective.mirrors["m"].group_id("m"), "m");
    assert_eq!(effective.effective(), effective);

    let other = parse(&with_clusters(
        "mirrors:\n  m:\n    source: nj\n    target: cq\n    topics: orders\n    group: legacy-mm\n    \
         start: latest\n    on_lost_records: stop\n",
    ));
    let m = &other.mirrors["m"];
    assert_eq!(m.group_id("m"), "legacy-mm");
    assert_eq!(m.start, StartPosition::Latest);
    assert_eq!(m.on_lost_records, OnLostRecords::Stop);
}

#[test]
fn topic_filter_matches_whole_names() {
    let filter = TopicFilter::new("topics", "orders|payments", "").unwrap();
    assert!(filter.matches("orders"));
    assert!(filter.matches("payments"));
    assert!(
        !filter.matches("orders2"),
        "no prefix match: `orders|payments` is whole"
    );
    assert!(!filter.matches("my-payments"));

    // An alternation is grouped before anchoring, and `""` excludes nothing.
    let filter = TopicFilter::new("topics", "a|b.*", "").unwrap();
    assert!(filter.matches("a"));
    assert!(filter.matches("bcd"));
    assert!(!filter.matches("ab"));

    // The default exclude keeps internal topics out.
    let filter = TopicFilter::new("topics", ".*", DEFAULT_EXCLUDE).unwrap();
    assert!(filter.matches("orders"));
    assert!(filter.matches("_private"));
    assert!(!filter.matches("__consumer_offsets"));
    assert!(!filter.matches("__transaction_state"));

    // Anchors and flags inside the pattern keep their meaning.
    let filter = TopicFilter::new("topics", "^orders$|(?i)AUDIT", "").unwrap();
    assert!(filter.matches("orders"));
    assert!(filter.matches("audit"));
    assert!(!filter.matches("xaudit"));

    // A verbose-mode comment at the end does not swallow the anchoring.
    let filter = TopicFilter::new("topics", "(?x) orders | payments  # the money topics", "").unwrap();
    assert!(filter.matches("orders"));
    assert!(filter.matches("payments"));
    assert!(!filter.matches("orderss"));

    let Err((key, _)) = TopicFilter::new("topics", "orders", "(") else {
        panic!("`(` compiled");
    };
    assert_eq!(key, "exclude");
}

#[test]
fn target_topic_and_group_id() {
    let m = MirrorConfig {
        rename: "{topic}.from-{topic}".into(),
        ..MirrorConfig::default()
    };
    assert_eq!(m.target_topic("orders"), "orders.from-orders");
    let m = MirrorConfig {
        rename: "nj.{topic}.v2".into(),
        ..MirrorConfig::default()
    };
    assert_eq!(m.target_topic("orders"), "nj.orders.v2");
    assert_eq!(m.group_id("nj-to-cq"), "nj-to-cq");
    let m = MirrorConfig {
        group: Some("g".into()),
        ..m
    };
    assert_eq!(m.group_id("nj-to-cq"), "g");
}

#[test]
fn cluster_refusals() {
    let reserved = error_has(
        "clusters:\n  local: { bootstrap: [\"k:9092\"] }\n",
        "clusters.local",
        &["the cluster name `local` is reserved for Strait's own spool topics"],
    );
    assert!(reserved.contains("such as `nj`"), "{reserved}");
    error_has(
        "clusters:\n  'n j': { bootstrap: [\"k:9092\"] }\n",
        "clusters.n j",
        &["invalid cluster name `n j`: contains ' '; only ASCII letters"],
    );
    error_has(
        "clusters:\n  '': { bootstrap: [\"k:9092\"] }\n",
        "clusters.",
        &["invalid cluster name ``: must not be empty"],
    );
    error_has(
        "clusters:\n  nj: {}\n",
        "clusters.nj.bootstrap",
        &["required: list at least one broker"],
    );
    error_has(
        "clusters:\n  nj:\n    bootstrap: []\n",
        "clusters.nj.bootstrap",
        &["required"],
    );
    error_has(
        "clusters:\n  nj:\n    bootstrap: [\"a:9092\", \"kafka-nj-2\"]\n",
        "clusters.nj.bootstrap[1]",
        &["`kafka-nj-2` is not host:port: write a broker's name or address and port"],
    );
    error_has(
        "clusters:\n  nj:\n    bootstrap: [\"a:9092,b:9092\"]\n",
        "clusters.nj.bootstrap[0]",
        &["is not host:port"],
    );
    // A single string is not a list.
    error_has(
        "clusters:\n  nj:\n    bootstrap: a:9092\n",
        "clusters.nj.bootstrap",
        &["expected a sequence"],
    );
    error_has(
        "clusters:\n  nj:\n    bootstrap: [\"a:9092\"]\n    client_id: ''\n",
        "clusters.nj.client_id",
        &["must not be empty"],
    );
    for key in ["connect_timeout", "request_timeout", "metadata_refresh"] {
        error_has(
            &format!("clusters:\n  nj:\n    bootstrap: [\"a:9092\"]\n    {key}: 0s\n"),
            &format!("clusters.nj.{key}"),
            &["must be positive"],
        );
    }
    error_has(
        "clusters:\n  nj:\n    bootstrap: [\"a:9092\"]\n    max_bytes_in_flight: 512KiB\n",
        "clusters.nj.max_bytes_in_flight",
        &["512KiB is too small; at least 1MiB"],
    );
    error_has(
        "clusters:\n  nj:\n    bootstrap: [\"a:9092\"]\n    bootstrp: []\n",
        "clusters.nj.bootstrp",
        &["unknown field `bootstrp`"],
    );
    let message = error_has(
        "clusters:\n  nj: { bootstrap: [\"a:9092\"] }\n  nj: { bootstrap: [\"b:9092\"] }\n",
        "clusters.nj",
        &["duplicate cluster `nj`: list each cluster once"],
    );
    assert!(!message.is_empty());
    // Names with `.`, `_` and `-`, IPv6 and IP bootstrap entries are fine.
    parse("clusters:\n  dc-1.east_2: { bootstrap: [\"[::1]:9092\", \"10.0.0.1:9092\"] }\n");
}

#[test]
fn admin_refusals() {
    error_has(
        "admin:\n  listen: localhost:9644\n",
        "admin.listen",
        &[
            "`localhost:9644` is not an IP address and port (host names are not resolved): write \
             one such as 127.0.0.1:9644",
        ],
    );
    error_has(
        "admin:\n  listen: 127.0.0.1:9092\n",
        "admin.listen",
        &[
            "127.0.0.1:9092 takes the port of server.listen (127.0.0.1:9092)",
            "127.0.0.1:9644",
        ],
    );
    error_has(
        "server:\n  listen: 0.0.0.0:9092\nadmin:\n  listen: 127.0.0.1:9092\n",
        "admin.listen",
        &["takes the port of server.listen"],
    );
    let config = parse("admin:\n  listen: '[::1]:9644'\n  partition_labels: false\n");
    assert_eq!(
        config.admin.listen_addr().unwrap(),
        Some("[::1]:9644".parse().unwrap())
    );
    assert!(!config.admin.partition_labels);
    parse("admin:\n  listen: 127.0.0.1:0\n");
    parse("admin:\n  listen: 10.1.1.1:9092\n");
}

#[test]
fn mirror_refusals() {
    let cases: &[(&str, &str, &[&str])] = &[
        ("target: cq\ntopics: orders", "mirrors.m.source", &[
            "required: the cluster to copy from, one of `cq`, `nj`, `ny`",
        ]),
        ("source: nj\ntopics: orders", "mirrors.m.target", &["required: the cluster to copy to"]),
        ("source: nx\ntarget: cq\ntopics: orders", "mirrors.m.source", &[
            "unknown cluster `nx`: one of `cq`, `nj`, `ny`",
        ]),
        ("source: nj\ntarget: local\ntopics: orders", "mirrors.m.target", &["unknown cluster `local`"]),
        ("source: nj\ntarget: cq", "mirrors.m.topics", &[
            "required: a regular expression of the source topics to copy",
        ]),
        ("source: nj\ntarget: cq\ntopics: \"orders|(payments\"", "mirrors.m.topics", &[
            "invalid regular expression:\n    orders|(payments\n           ^\nerror: unclosed group",
        ]),
        ("source: nj\ntarget: cq\ntopics: \"(?<=x)orders\"", "mirrors.m.topics", &[
            "invalid regular expression:",
            "look-around",
        ]),
        ("source: nj\ntarget: cq\ntopics: orders\nexclude: \"[\"", "mirrors.m.exclude", &[
            "invalid regular expression:",
            "unclosed character class",
        ]),
        ("source: nj\ntarget: cq\ntopics: orders\nrename: nj.orders", "mirrors.m.rename", &[
            "`nj.orders` has no `{topic}`, so every source topic would be written to the one topic \
             `nj.orders`; write a template such as `nj.{topic}`",
        ]),
        ("source: nj\ntarget: cq\ntopics: orders\nrename: \"\"", "mirrors.m.rename", &[
            "must not be empty: write a template such as `nj.{topic}`",
        ]),
        ("source: nj\ntarget: cq\ntopics: orders\nrename: \"{cluster}.{topic}\"", "mirrors.m.rename", &[
            "`{cluster}.{topic}` holds `{cluster}`, which is not a placeholder: only `{topic}` is replaced",
        ]),
        ("source: nj\ntarget: cq\ntopics: orders\nrename: \"{Topic}\"", "mirrors.m.rename", &[
            "holds `{Topic}`, which is not a placeholder",
        ]),
        ("source: nj\ntarget: cq\ntopics: orders\nrename: \"nj.{topic\"", "mirrors.m.rename", &[
            "holds `{topic`, which is not a placeholder",
        ]),
        ("source: nj\ntarget: cq\ntopics: orders\nrename: \"nj}.{topic}\"", "mirrors.m.rename", &[
            "holds a `}` outside `{topic}`",
        ]),
        ("source: nj\ntarget: cq\ntopics: orders\nrename: \"nj/{topic}\"", "mirrors.m.rename", &[
            "holds '/'; a topic name has only ASCII letters",
        ]),
        ("source: nj\ntarget: cq\ntopics: orders\ngroup: \"\"", "mirrors.m.group", &[
            "must not be empty; leave it out to use the mirror's name `m`",
        ]),
        ("source: nj\ntarget: cq\ntopics: orders\ngroup: a b", "mirrors.m.group", &["holds a space"]),
        ("source: nj\ntarget: cq\ntopics: orders\ncommit_interval: 0s", "mirrors.m.commit_interval", &[
            "must be positive",
        ]),
        ("source: nj\ntarget: cq\ntopics: orders\ndiscovery_interval: 0ms", "mirrors.m.discovery_interval", &[
            "must be positive",
        ]),
        ("source: nj\ntarget: cq\ntopics: orders\nmax_bytes_in_flight: 1000KiB", "mirrors.m.max_bytes_in_flight", &[
            "1000KiB is too small; at least 1MiB",
        ]),
        ("source: nj\ntarget: cq\ntopics: orders\ncoalesce_below: 2MiB", "mirrors.m.coalesce_below", &[
            "2MiB is above 1MiB, the largest batch small ones are merged into",
        ]),
        ("source: nj\ntarget: cq\ntopics: orders\nstart: beginning", "mirrors.m.start", &[
            "unknown variant `beginning`, expected `earliest` or `latest`",
        ]),
        ("source: nj\ntarget: cq\ntopics: orders\non_lost_records: skip", "mirrors.m.on_lost_records", &[
            "unknown variant `skip`, expected `continue` or `stop`",
        ]),
        ("source: nj\ntarget: cq\ntopics: orders\nwhitelist: orders", "mirrors.m.whitelist", &[
            "unknown field `whitelist`",
        ]),
    ];
    for (keys, path, words) in cases {
        error_has(
            &with_clusters(&format!("mirrors:\n{}", mirror("m", keys))),
            path,
            words,
        );
    }
    error_has(
        "mirrors:\n  m: { source: nj, target: cq, topics: orders }\n",
        "mirrors.m.source",
        &["unknown cluster `nj`: but `clusters:` names none; add the cluster there"],
    );
    error_has(
        &with_clusters("mirrors:\n  'm/1': { source: nj, target: cq, topics: orders }\n"),
        "mirrors.m/1",
        &["invalid mirror name `m/1`: contains '/'"],
    );
    error_has(
        &with_clusters(
            "mirrors:\n  m: { source: nj, target: cq, topics: a }\n  m: { source: ny, target: cq, topics: b }\n",
        ),
        "mirrors.m",
        &["duplicate mirror `m`: list each mirror once"],
    );
    // `{topic}` twice is a valid rename.
    parse(&with_clusters(&format!(
        "mirrors:\n{}",
        mirror(
            "m",
            "source: nj\ntarget: cq\ntopics: orders\nrename: \"{topic}.{topic}\""
        )
    )));
}

#[test]
fn a_mirror_into_its_own_cluster() {
    let yaml = |keys: &str| with_clusters(&format!("mirrors:\n{}", mirror("m", keys)));
    let message = error(
        &yaml("source: nj\ntarget: nj\ntopics: orders"),
        "mirrors.m.target",
    );
    assert_eq!(
        message,
        "`nj` is also the source, and rename `{topic}` keeps every name: each topic would be \
         copied onto itself; name another cluster, or set a rename such as `copy.{topic}`"
    );
    // With a rename that changes names, a mirror may copy within a cluster,
    // as long as it does not select what it writes.
    parse(&yaml(
        "source: nj\ntarget: nj\ntopics: orders|payments\nrename: copy.{topic}",
    ));
    parse(&yaml(
        "source: nj\ntarget: nj\ntopics: \"orders\\\\..*\"\nrename: copy.{topic}",
    ));
    parse(&yaml(
        "source: nj\ntarget: nj\ntopics: \".*\"\nexclude: \"copy\\\\..*\"\nrename: copy.{topic}",
    ));
    let message = error(
        &yaml("source: nj\ntarget: nj\ntopics: \".*\"\nrename: copy.{topic}"),
        "mirrors.m.topics",
    );
    assert_eq!(
        message,
        "mirror would copy its own copies: it writes `a` to `copy.a` on the same cluster `nj`, \
         and `topics` selects `copy.a` too (then `copy.copy.a`, and so on); narrow `topics`, or \
         add `copy\\..*` to `exclude`"
    );
    error_has(
        &yaml("source: nj\ntarget: nj\ntopics: \"orders|copy.orders\"\nrename: copy.{topic}"),
        "mirrors.m.topics",
        &["it writes `orders` to `copy.orders`"],
    );
    error_has(
        &yaml("source: nj\ntarget: nj\ntopics: \"[a-z]+\"\nrename: \"{topic}{topic}\""),
        "mirrors.m.topics",
        &[
            "mirror copies within cluster `nj` (rename `{topic}{topic}`), and Strait cannot prove \
             that `topics` never selects a topic it writes (neither `topics` is a finite list",
            "add a prefix to the rename, such as `copy.{topic}`, and `copy\\..*` to `exclude`",
        ],
    );
    error_has(
        &yaml("source: nj\ntarget: nj\ntopics: \"[a-z.]+\"\nrename: \"{topic}.{topic}.bak\""),
        "mirrors.m.topics",
        &["cannot prove", "add `.*\\.bak` to `exclude`"],
    );
}

#[test]
fn mirrors_into_one_cluster_must_not_write_one_topic() {
    let two = |a: &str, b: &str| with_clusters(&format!("mirrors:\n{}{}", mirror("a", a), mirror("b", b)));

    // Distinct prefixes: names cannot meet, whatever the topics.
    parse(&two(
        "source: nj\ntarget: cq\ntopics: \".*\"\nrename: nj.{topic}",
        "source: ny\ntarget: cq\ntopics: \".*\"\nrename: ny.{topic}",
    ));
    // So do distinct suffixes.
    parse(&two(
        "source: nj\ntarget: cq\ntopics: \".*\"\nrename: \"{topic}.nj\"",
        "source: ny\ntarget: cq\ntopics: \".*\"\nrename: \"{topic}.ny\"",
    ));
    // Same rename, lists of names that do not overlap.
    parse(&two(
        "source: nj\ntarget: cq\ntopics: orders|payments",
        "source: ny\ntarget: cq\ntopics: audit|metrics",
    ));
    // Same rename, regexes whose languages do not overlap.
    parse(&two(
        "source: nj\ntarget: cq\ntopics: \"orders\\\\..*\"",
        "source: ny\ntarget: cq\ntopics: \"payments\\\\..*\"",
    ));
    // ... or do, but `exclude` takes the common part out.
    parse(&two(
        "source: nj\ntarget: cq\ntopics: \".*\"\nexclude: \"__.*|orders.*\"",
        "source: ny\ntarget: cq\ntopics: \"orders.*\"",
    ));
    // Two mirrors from one source to two targets.
    parse(&two(
        "source: nj\ntarget: cq\ntopics: \".*\"",
        "source: nj\ntarget: ny\ntopics: \".*\"",
    ));

    let message = error(
        &two(
            "source: nj\ntarget: cq\ntopics: orders|payments",
            "source: ny\ntarget: cq\ntopics: payments|audit",
        ),
        "mirrors.b.rename",
    );
    assert_eq!(
        message,
        "mirrors `a` and `b` can both write topic `payments` on cluster `cq` (`a` copying \
         `payments` from `nj`, `b` copying `payments` from `ny`); give each mirror a rename prefix \
         of its own, such as `nj.{topic}` and `ny.{topic}`, or `topics` that do not overlap"
    );
    // A prefix one mirror adds can be part of a name the other copies.
    error_has(
        &two(
            "source: nj\ntarget: cq\ntopics: orders\nrename: nj.{topic}",
            "source: ny\ntarget: cq\ntopics: \"nj\\\\..*\"",
        ),
        "mirrors.b.rename",
        &["can both write topic `nj.orders` on cluster `cq` (`a` copying `orders` from `nj`, `b` copying `nj.orders` from `ny`)"],
    );
    // Found by the automata: the shortest name both can write.
    error_has(
        &two(
            "source: nj\ntarget: cq\ntopics: \"orders.*\"",
            "source: ny\ntarget: cq\ntopics: \".*s\"",
        ),
        "mirrors.b.rename",
        &["can both write topic `orders` on cluster `cq`"],
    );
    // One source, one target, one topic twice: duplicates.
    error_has(
        &two(
            "source: nj\ntarget: cq\ntopics: orders",
            "source: nj\ntarget: cq\ntopics: \"ord.*\"",
        ),
        "mirrors.b.rename",
        &[
            "can both write topic `orders`",
            "such as `a.{topic}` and `b.{topic}`",
        ],
    );
    // Unprovable: conservative, and says why.
    error_has(
        &two(
            "source: nj\ntarget: cq\ntopics: \"[a-z]+\"\nrename: \"{topic}{topic}\"",
            "source: ny\ntarget: cq\ntopics: \"[a-z]+\"",
        ),
        "mirrors.b.rename",
        &[
            "mirrors `a` and `b` both write to cluster `cq`, and their renames (`{topic}{topic}` \
             and `{topic}`) can give two source topics the same name there; Strait cannot prove \
             that their `topics` never select such a pair (neither `topics` is a finite list of \
             names, and a rename repeats `{topic}`); give each mirror a rename prefix of its own, \
             such as `nj.{topic}` and `ny.{topic}`",
        ],
    );
    // With a finite list on one side, repeated `{topic}`s are compared exactly.
    parse(&two(
        "source: nj\ntarget: cq\ntopics: orders\nrename: \"{topic}{topic}\"",
        "source: ny\ntarget: cq\ntopics: \"[a-z]+\"\nexclude: ordersorders",
    ));
    error_has(
        &two(
            "source: nj\ntarget: cq\ntopics: orders\nrename: \"{topic}{topic}\"",
            "source: ny\ntarget: cq\ntopics: \"[a-z]+\"",
        ),
        "mirrors.b.rename",
        &["can both write topic `ordersorders`"],
    );
}

#[test]
fn mirrors_on_one_source_need_their_own_groups() {
    let two = |a: &str, b: &str| with_clusters(&format!("mirrors:\n{}{}", mirror("a", a), mirror("b", b)));
    error_has(
        &two(
            "source: nj\ntarget: cq\ntopics: orders\ngroup: mm",
            "source: nj\ntarget: ny\ntopics: orders\ngroup: mm",
        ),
        "mirrors.b.group",
        &["`mm` is also the group of mirror `a` on cluster `nj`; each mirror keeps its positions in a group of its own"],
    );
    // The group set by `a` is `b`'s default group: blame the one set.
    error_has(
        &two(
            "source: nj\ntarget: cq\ntopics: orders\ngroup: b",
            "source: nj\ntarget: ny\ntopics: orders",
        ),
        "mirrors.a.group",
        &["`b` is also the group of mirror `b`"],
    );
    // One group name on two source clusters is two groups.
    parse(&two(
        "source: nj\ntarget: cq\ntopics: orders\ngroup: mm",
        "source: ny\ntarget: cq\ntopics: payments\ngroup: mm",
    ));
}

#[test]
fn templates() {
    let t = Template::parse("nj.{topic}", "nj").unwrap();
    assert_eq!(t.apply("orders"), "nj.orders");
    assert_eq!(t.invert("nj.orders").as_deref(), Some("orders"));
    assert_eq!(t.invert("nj."), None, "no empty topic");
    assert_eq!(t.invert("ny.orders"), None);
    assert!(!t.is_identity());

    let t = Template::parse("a{topic}b{topic}c", "nj").unwrap();
    assert_eq!(t.apply("xy"), "axybxyc");
    assert_eq!(t.invert("axybxyc").as_deref(), Some("xy"));
    assert_eq!(t.invert("axybxzc"), None);
    assert_eq!(t.invert("axybxyzc"), None, "odd length");

    assert!(Template::parse("{topic}", "").unwrap().is_identity());
    assert!(Template::parse(&"x".repeat(249), "nj").is_err());
    assert!(Template::parse(&format!("{}{{topic}}", "x".repeat(248)), "nj").is_ok());
    assert!(Template::parse(&format!("{}{{topic}}", "x".repeat(249)), "nj")
        .unwrap_err()
        .contains("leaves no room for the topic's name"));

    let meet = |a: &str, b: &str| {
        Template::parse(a, "")
            .unwrap()
            .may_meet(&Template::parse(b, "").unwrap())
    };
    assert!(meet("{topic}", "{topic}"));
    assert!(meet("nj.{topic}", "{topic}"));
    assert!(meet("nj.{topic}", "n{topic}"));
    assert!(!meet("nj.{topic}", "ny.{topic}"));
    assert!(!meet("{topic}.a", "{topic}.b"));
    assert!(meet("{topic}.a", "{topic}"));
    assert!(meet("a.{topic}", "{topic}.b"), "`a.b` from `b` and from `a`");
}

#[test]
fn finite_lists_of_names() {
    let names = |p: &str| finite_names(p).map(|s| s.into_iter().collect::<Vec<_>>());
    assert_eq!(names("orders|payments").unwrap(), ["orders", "payments"]);
    assert_eq!(names("audit\\.(eu|us)").unwrap(), ["audit.eu", "audit.us"]);
    assert_eq!(names("t[0-2]").unwrap(), ["t0", "t1", "t2"]);
    assert_eq!(names("v(1)?").unwrap(), ["v", "v1"]);
    assert_eq!(names("x{2,3}").unwrap(), ["xx", "xxx"]);
    assert_eq!(names("(?i)ab").unwrap(), ["AB", "Ab", "aB", "ab"]);
    assert_eq!(names("^orders$|^payments").unwrap(), ["orders", "payments"]);
    assert_eq!(names("a^b|c").unwrap(), ["c"], "`^` inside a name never holds");
    assert_eq!(names("a$b|c$").unwrap(), ["c"]);
    assert_eq!(
        names("(?x) orders | payments # money").unwrap(),
        ["orders", "payments"]
    );
    assert_eq!(names("orders.*"), None);
    assert_eq!(names("o+"), None);
    assert_eq!(names("\\w{3}"), None, "too many");
    assert_eq!(names("\\borders"), None, "word boundaries are not followed");
}

fn map<'a>(
    include: &'a str,
    exclude: &'a str,
    filter: &'a TopicFilter,
    template: &'a Template<'a>,
) -> NameMap<'a> {
    NameMap {
        include,
        exclude,
        filter,
        template,
    }
}

/// The overlap of two mirrors given as (topics, exclude, rename).
fn overlap_of(a: (&str, &str, &str), b: (&str, &str, &str)) -> Overlap {
    let (fa, fb) = (
        TopicFilter::new("topics", a.0, a.1).unwrap(),
        TopicFilter::new("topics", b.0, b.1).unwrap(),
    );
    let (ta, tb) = (
        Template::parse(a.2, "").unwrap(),
        Template::parse(b.2, "").unwrap(),
    );
    let forward = overlap(map(a.0, a.1, &fa, &ta), map(b.0, b.1, &fb, &tb));
    // The same answer either way round, with the sources swapped.
    let backward = overlap(map(b.0, b.1, &fb, &tb), map(a.0, a.1, &fa, &ta));
    match (&forward, backward) {
        (
            Overlap::Example { target, a, b },
            Overlap::Example {
                target: t,
                a: x,
                b: y,
            },
        ) => {
            assert_eq!((target, a, b), (&t, &y, &x));
            // The example is real: both mirrors select their topic and
            // rename it to the target.
            assert!(fa.matches(a) && fb.matches(b), "{forward:?}");
            assert_eq!((ta.apply(a), tb.apply(b)), (target.clone(), target.clone()));
        }
        (forward, backward) => assert_eq!(forward, &backward),
    }
    forward
}

fn example(target: &str, a: &str, b: &str) -> Overlap {
    Overlap::Example {
        target: target.into(),
        a: a.into(),
        b: b.into(),
    }
}

#[test]
fn overlaps() {
    use Overlap::Disjoint;
    assert_eq!(
        overlap_of(("a|b", "", "{topic}"), ("c|d", "", "{topic}")),
        Disjoint
    );
    assert_eq!(
        overlap_of(("a|b", "", "{topic}"), ("b|c", "", "{topic}")),
        example("b", "b", "b")
    );
    assert_eq!(
        overlap_of(("a|b", "b", "{topic}"), ("b|c", "", "{topic}")),
        Disjoint,
        "excluded"
    );
    assert_eq!(
        overlap_of(("x", "", "a.{topic}"), ("a\\..*", "", "{topic}")),
        example("a.x", "x", "a.x")
    );
    assert_eq!(
        overlap_of(("x", "", "a.{topic}"), ("b\\..*", "", "{topic}")),
        Disjoint
    );
    // Both infinite: the automata.
    assert_eq!(
        overlap_of(("a.*", "", "{topic}"), ("b.*", "", "{topic}")),
        Disjoint
    );
    assert_eq!(
        overlap_of(("a.*", "", "{topic}"), (".*z", "", "{topic}")),
        example("az", "az", "az")
    );
    assert_eq!(
        overlap_of((".*", "__.*", "{topic}"), ("__.*", "", "{topic}")),
        Disjoint
    );
    assert_eq!(
        overlap_of((".+", "", "p.{topic}"), (".+", "", "{topic}.s")),
        example("p.s", "s", "p"),
        "the shortest, in the order of the topic characters"
    );
    assert_eq!(
        overlap_of(("[a-z]+", "", "p.{topic}"), ("p\\.[0-9]+", "", "{topic}")),
        Disjoint
    );
    assert_eq!(
        overlap_of(
            ("[a-z]+", "", "{topic}.v1"),
            ("[a-z]+\\.v1|[a-z]+\\.v2", ".*v1", "{topic}")
        ),
        Disjoint
    );
    // Unicode classes and word boundaries compile to automata too.
    assert_eq!(
        overlap_of(("\\w+", "", "{topic}"), ("\\bx\\w*", "", "{topic}")),
        example("x", "x", "x")
    );
    // An empty name is no topic: `a*` and `a*` meet at `a`, not at ``.
    assert_eq!(
        overlap_of(("a*", "", "p{topic}"), ("a*", "", "p{topic}")),
        example("pa", "a", "a")
    );
    // Anchors and word boundaries in `topics` hold at the topic's edges,
    // not the target name's.
    assert_eq!(
        overlap_of(("^orders.*$", "", "nj.{topic}"), ("nj\\..*", "", "{topic}")),
        example("nj.orders", "orders", "nj.orders")
    );
    assert_eq!(
        overlap_of(("\\bx.*", "", "p{topic}"), ("px.*", "", "{topic}")),
        example("px", "x", "px")
    );
    assert_eq!(
        overlap_of((".*x\\b", "", "{topic}s"), (".*xs", "", "{topic}")),
        example("xs", "x", "xs")
    );
    assert_eq!(
        overlap_of(("[a-z]+", "^a.*", "p.{topic}"), ("p\\..*", "", "{topic}")),
        example("p.b", "b", "p.b"),
        "`^a` excludes topics beginning with `a`, not names"
    );
    // A suffix can begin inside what looks like the topic.
    assert_eq!(
        overlap_of(("a.*", "", "{topic}.a"), (".*\\.a\\.a", "", "{topic}")),
        example("a.a.a", "a.a", "a.a.a")
    );
    assert!(matches!(
        overlap_of(("[a-z]+", "", "{topic}{topic}"), ("[a-z]+", "", "{topic}")),
        Overlap::Unknown(_)
    ));
}

#[test]
fn the_search_gives_up_rather_than_run_long() {
    // Two counters far apart: the product of their automata is large.
    let a = ("[a-z]*a[a-z]{14}", "", "{topic}");
    let b = ("[a-z]*b[a-z]{15}", "", "{topic}");
    match overlap_of(a, b) {
        Overlap::Unknown(why) => assert!(
            why.contains(&format!("gave up after {MAX_STATES} states")),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn errors_are_invalid_not_parse_errors() {
    let error = Config::parse(
        &with_clusters("mirrors:\n  m: { source: nj, target: nx, topics: orders }\n"),
        FILE,
    )
    .unwrap_err();
    assert!(matches!(error, ConfigError::Invalid { .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        "strait.yaml: mirrors.m.target: unknown cluster `nx`: one of `cq`, `nj`, `ny`"
    );
}

#[test]
fn the_offset_map_and_group_sync_settings_are_checked() {
    let yaml = |keys: &str| {
        with_clusters(&format!(
            "mirrors:\n{}",
            mirror("m", &format!("source: nj\ntarget: cq\ntopics: orders\n{keys}"))
        ))
    };
    let config = parse(&yaml("sync_group_offsets: { groups: \"orders-.*\" }"));
    let m = &config.mirrors["m"];
    assert_eq!(m.offset_map_topic("m"), "__strait_mirror_offsets.m");
    assert_eq!(m.offset_map_retention, HumanDuration::days(7));
    let sync = m.sync_group_offsets.as_ref().unwrap();
    assert_eq!(sync.interval, HumanDuration::millis(500));
    assert!(sync.filter().matches("orders-app") && !sync.filter().matches("billing"));
    assert!(m.topic_filter().matches("orders"));
    // The default exclude keeps the other direction's map topic out.
    assert!(!m.topic_filter().matches("__strait_mirror_offsets.back"));
    error_has(
        &yaml("sync_group_offsets: { interval: 1s }"),
        "mirrors.m.sync_group_offsets.groups",
        &["required"],
    );
    error_has(
        &yaml("sync_group_offsets: { groups: \"(\" }"),
        "mirrors.m.sync_group_offsets.groups",
        &["not a valid regex"],
    );
    error_has(
        &yaml("sync_group_offsets: { groups: \".*\", interval: 10ms }"),
        "mirrors.m.sync_group_offsets.interval",
        &["from 100ms to 1h"],
    );
    error_has(
        &yaml("offset_map_topic: \"no spaces\""),
        "mirrors.m.offset_map_topic",
        &["not a topic name"],
    );
    error_has(
        &yaml("offset_map_retention: 10m"),
        "mirrors.m.offset_map_retention",
        &["below 1h"],
    );
}

#[test]
fn mirrors_in_opposite_directions_must_not_copy_records_back() {
    let two = |a: &str, b: &str| {
        with_clusters(&format!(
            "mirrors:\n{}{}",
            mirror("nj-to-cq", &format!("source: nj\ntarget: cq\n{a}")),
            mirror("cq-to-nj", &format!("source: cq\ntarget: nj\n{b}"))
        ))
    };
    // The same names both ways: every record would come back.
    let message = error_has(
        &two("topics: orders", "topics: orders"),
        "mirrors.nj-to-cq.topics",
        &[
            "copy in opposite directions between `cq` and `nj`",
            "`cq-to-nj` copies `orders` from `cq` to `orders` on `nj`, which `nj-to-cq` selects",
            "header",
        ],
    );
    assert!(message.contains("`nj.{topic}`"), "{message}");
    assert!(message.contains("`prevent_loops: true` on both"), "{message}");
    // Loop prevention on both: each record's origin stops it.
    let both = parse(&two(
        "topics: orders\nprevent_loops: true",
        "topics: orders\nprevent_loops: true",
    ));
    assert!(both.mirrors.values().all(|m| m.prevent_loops));
    // On one only: the other would still copy records back.
    error_has(
        &two("topics: orders\nprevent_loops: true", "topics: orders"),
        "mirrors.nj-to-cq.topics",
        &["would go round", "`nj-to-cq` sets it, `cq-to-nj` does not"],
    );
    // Renamed after their origin, but each takes everything.
    error_has(
        &two(
            "topics: \".*\"\nrename: \"nj.{topic}\"",
            "topics: \".*\"\nrename: \"cq.{topic}\"",
        ),
        "mirrors.nj-to-cq.topics",
        &["would go round", "`nj\\..*` in `cq-to-nj`"],
    );
    // Renamed, and each excludes the other's copies: proved apart.
    parse(&two(
        "topics: \".*\"\nexclude: \"__.*|cq\\\\..*\"\nrename: \"nj.{topic}\"",
        "topics: \".*\"\nexclude: \"__.*|nj\\\\..*\"\nrename: \"cq.{topic}\"",
    ));
    // One direction never selects what the other writes.
    parse(&two("topics: orders", "topics: billing"));
    parse(&two(
        "topics: orders\nrename: \"nj.{topic}\"",
        "topics: \"[a-z]+\"",
    ));
}
