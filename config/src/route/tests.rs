use super::*;
use crate::Config;

const FILE: &str = "strait.yaml";

/// Two clusters, `dc1` and `dc2`, and what follows.
fn with_clusters(rest: &str) -> String {
    format!(
        "clusters:\n  dc1: {{ bootstrap: [\"kafka-a:9092\"] }}\n  dc2: {{ bootstrap: [\"kafka-b:9092\"] }}\n{rest}"
    )
}

/// The example of the documentation: a prefix stripped, a regex, a rename,
/// local for the rest; one group prefix delegated.
const EXAMPLE: &str = r#"
routes:
  - { prefix: "dc1.", to: dc1, strip_prefix: true }
  - { regex: "^legacy-.*", to: dc2 }
  - { exact: payments, to: dc2, as: payments-v2 }
  - { regex: ".*", to: local }
groups:
  - { prefix: "dc2-", to: dc2 }
  - { regex: ".*", to: local }
"#;

#[track_caller]
fn parse(text: &str) -> Config {
    Config::parse(text, FILE).unwrap_or_else(|e| panic!("{text}\ndid not parse: {e}"))
}

/// Parses `text`, expects an error at `path` holding every one of `words`.
#[track_caller]
fn error_has(text: &str, path: &str, words: &[&str]) {
    let error = match Config::parse(text, FILE) {
        Ok(config) => panic!("{text}\nparsed: {config:?}"),
        Err(error) => error,
    };
    let message = error.to_string();
    assert_eq!(error.path(), Some(path), "{message}");
    for word in words {
        assert!(message.contains(word), "{word:?} not in {message:?}");
    }
}

fn cluster(name: &str) -> Destination {
    Destination::Cluster(name.to_owned())
}

#[track_caller]
fn resolves(routes: &Routes, client: &str, to: &Destination, upstream: &str) {
    let routed = routes
        .resolve(client)
        .unwrap_or_else(|| panic!("{client} did not resolve"));
    assert_eq!((routed.to, routed.topic.as_ref()), (to, upstream), "{client}");
}

#[test]
fn topics_go_where_the_first_matching_route_points_under_its_name_there() {
    let routes = parse(&with_clusters(EXAMPLE)).routes();
    resolves(&routes, "dc1.orders", &cluster("dc1"), "orders");
    resolves(&routes, "legacy-billing", &cluster("dc2"), "legacy-billing");
    resolves(&routes, "payments", &cluster("dc2"), "payments-v2");
    resolves(&routes, "payments-v2", &Destination::Local, "payments-v2");
    resolves(&routes, "orders", &Destination::Local, "orders");
    // Matched by the stripped prefix, which leaves no name.
    assert_eq!(routes.resolve("dc1."), None);
    assert_eq!(routes.resolve("dc1.orders").unwrap().index, 0);
    assert_eq!(
        routes.destinations(),
        [&Destination::Local, &cluster("dc1"), &cluster("dc2")]
    );
}

#[test]
fn each_upstream_topic_has_the_one_client_name_that_leads_back_to_it() {
    let routes = parse(&with_clusters(EXAMPLE)).routes();
    let name = |to: &Destination, topic: &str| routes.client_name(to, topic);
    assert_eq!(name(&cluster("dc1"), "orders").as_deref(), Some("dc1.orders"));
    assert_eq!(name(&cluster("dc2"), "payments-v2").as_deref(), Some("payments"));
    assert_eq!(name(&cluster("dc2"), "legacy-a").as_deref(), Some("legacy-a"));
    // No route leads to these: clients do not see them.
    assert_eq!(name(&cluster("dc2"), "orders"), None);
    assert_eq!(name(&cluster("dc2"), "payments"), None);
    // A local topic whose name a route sends upstream is hidden.
    assert_eq!(name(&Destination::Local, "dc1.orders"), None);
    assert_eq!(name(&Destination::Local, "legacy-x"), None);
    assert_eq!(name(&Destination::Local, "orders").as_deref(), Some("orders"));
}

#[test]
fn without_routes_everything_is_local_and_without_groups_strait_coordinates() {
    let config = parse("");
    let routes = config.routes();
    resolves(&routes, "anything", &Destination::Local, "anything");
    assert_eq!(routes.destinations(), [&Destination::Local]);
    assert_eq!(config.group_routes().resolve("g"), &Destination::Local);
    // The effective configuration writes the defaults out, and reads back.
    let effective = config.effective();
    assert_eq!(effective.routes, default_routes());
    assert_eq!(effective.groups, default_group_routes());
    assert_eq!(parse(&config.to_yaml()), effective);
}

#[test]
fn a_topic_no_route_matches_does_not_exist() {
    let routes = parse(&with_clusters(
        "routes: [{ prefix: \"dc1.\", to: dc1, strip_prefix: true }]\n",
    ))
    .routes();
    assert_eq!(routes.resolve("orders"), None);
    resolves(&routes, "dc1.orders", &cluster("dc1"), "orders");
}

#[test]
fn groups_go_to_the_first_matching_coordinator() {
    let groups = parse(&with_clusters(EXAMPLE)).group_routes();
    assert_eq!(groups.resolve("dc2-billing"), &cluster("dc2"));
    assert_eq!(groups.resolve("dc2"), &Destination::Local);
    assert_eq!(
        groups.resolve("any group id, spaces and all"),
        &Destination::Local
    );
    let groups = parse(&with_clusters("groups: [{ exact: \"a b\", to: dc1 }]\n")).group_routes();
    assert_eq!(groups.resolve("a b"), &cluster("dc1"));
    assert_eq!(groups.resolve("other"), &Destination::Local);
}

#[test]
fn the_yaml_keeps_the_routes_as_written() {
    let config = parse(&with_clusters(EXAMPLE));
    let yaml = config.to_yaml();
    assert!(yaml.contains("as: payments-v2"), "{yaml}");
    assert!(yaml.contains("strip_prefix: true"), "{yaml}");
    assert_eq!(parse(&yaml), config.effective());
}

#[test]
fn entries_that_say_too_little_or_too_much_are_refused() {
    let routes = |r: &str| with_clusters(&format!("routes:\n  - {r}\n"));
    error_has(
        &routes("{ to: dc1 }"),
        "routes[0]",
        &["one of `prefix`, `regex` or `exact`"],
    );
    error_has(
        &routes("{ prefix: a, exact: b, to: dc1 }"),
        "routes[0]",
        &["more than one"],
    );
    error_has(
        &routes("{ prefix: a }"),
        "routes[0].to",
        &["required", "`local`, `dc1`, `dc2`"],
    );
    error_has(
        &routes("{ prefix: a, to: dc3 }"),
        "routes[0].to",
        &["unknown cluster `dc3`"],
    );
    error_has(
        &routes("{ prefix: \"\", to: dc1 }"),
        "routes[0].prefix",
        &["must not be empty"],
    );
    error_has(
        &routes("{ prefix: \"a b\", to: dc1 }"),
        "routes[0].prefix",
        &["' '"],
    );
    error_has(
        &routes("{ regex: \"(\", to: dc1 }"),
        "routes[0].regex",
        &["invalid regular expression"],
    );
    error_has(
        &routes("{ exact: \"a/b\", to: dc1 }"),
        "routes[0].exact",
        &["'/'"],
    );
    error_has(
        &routes("{ regex: a, to: dc1, strip_prefix: true }"),
        "routes[0].strip_prefix",
        &["no prefix"],
    );
    error_has(
        &routes("{ prefix: a, to: dc1, as: b }"),
        "routes[0].as",
        &["goes with `exact`"],
    );
    error_has(
        &routes("{ exact: a, to: dc1, as: \"b c\" }"),
        "routes[0].as",
        &["' '"],
    );
    error_has(
        &routes("{ prefix: a, to: local, strip_prefix: true }"),
        "routes[0]",
        &["renames a local topic"],
    );
    error_has(
        &routes("{ prefix: a, to: dc1, colour: red }"),
        "routes[0].colour",
        &["unknown field `colour`"],
    );
    error_has(
        &with_clusters("groups: [{ to: dc1 }]\n"),
        "groups[0]",
        &["one of `prefix`, `regex` or `exact`"],
    );
    error_has(
        &with_clusters("groups: [{ prefix: g, to: nowhere }]\n"),
        "groups[0].to",
        &["unknown cluster"],
    );
}

#[test]
fn a_route_that_can_never_match_is_refused() {
    let routes = |r: &str| with_clusters(&format!("routes:\n{r}"));
    for (text, at) in [
        ("  - { regex: \".*\", to: local }\n  - { prefix: a, to: dc1 }\n", "routes[1]"),
        ("  - { prefix: dc1., to: dc1 }\n  - { exact: dc1.orders, to: dc2 }\n", "routes[1]"),
        ("  - { prefix: dc1., to: dc1 }\n  - { prefix: dc1.eu., to: dc2 }\n", "routes[1]"),
        (
            "  - { regex: \"a.*\", to: dc1 }\n  - { regex: \"b.*\", to: dc2 }\n  - { regex: \"(a|b)x\", to: local }\n",
            "routes[2]",
        ),
        ("  - { exact: a, to: dc1 }\n  - { exact: a, to: dc2 }\n", "routes[1]"),
    ] {
        error_has(&routes(text), at, &["can never match", "earlier route"]);
    }
    // Names left over: fine.
    for text in [
        "  - { exact: a, to: dc1 }\n  - { regex: \"a.*\", to: dc2 }\n",
        "  - { prefix: dc1.eu., to: dc2 }\n  - { prefix: dc1., to: dc1 }\n",
        "  - { regex: \"[a-m].*\", to: dc1 }\n  - { regex: \"[k-z].*\", to: dc2 }\n",
    ] {
        parse(&routes(text));
    }
}

#[test]
fn two_client_names_for_one_upstream_topic_are_refused() {
    let routes = |r: &str| with_clusters(&format!("routes:\n{r}"));
    error_has(
        &routes("  - { prefix: dc1., to: dc1, strip_prefix: true }\n  - { regex: \".*\", to: dc1 }\n"),
        "routes[1]",
        &["routes 0 and 1", "cluster `dc1`", "twice"],
    );
    error_has(
        &routes("  - { exact: payments, to: dc2, as: payments-v2 }\n  - { regex: \"pay.*\", to: dc2 }\n"),
        "routes[1]",
        &[
            "`payments-v2` on cluster `dc2`",
            "as `payments` and as `payments-v2`",
        ],
    );
    error_has(
        &routes("  - { exact: a, to: dc2, as: x }\n  - { exact: b, to: dc2, as: x }\n"),
        "routes[1]",
        &["`x` on cluster `dc2`", "as `a` and as `b`"],
    );
    // The same renames to different clusters, or names kept on both: fine.
    parse(&routes(
        "  - { prefix: dc1., to: dc1, strip_prefix: true }\n  - { prefix: dc2., to: dc2, strip_prefix: true }\n  - { regex: \".*\", to: local }\n",
    ));
    parse(&routes(
        "  - { prefix: a, to: dc1 }\n  - { regex: \".*\", to: dc1 }\n",
    ));
    parse(&routes(
        "  - { exact: payments, to: dc2, as: payments-v2 }\n  - { regex: \"legacy-.*\", to: dc2 }\n",
    ));
}
