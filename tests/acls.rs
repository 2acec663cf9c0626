//! `acls:` enforced, on local topics, topics routed to Apache Kafka, groups
//! Strait coordinates and groups delegated to Kafka's coordinator.
//!
//! One Strait for the binary, in front of this process's Kafka, with a
//! plaintext `main` listener (the principal `User:ANONYMOUS`, allowed
//! everything: the tests' own setup) and a SASL listener (SCRAM-SHA-512
//! and PLAIN) where:
//! - `bob` may write `orders.*` and `dc1.orders*` (routed to Kafka);
//! - `alice` may read `orders.*` and `dc1.*` in groups `billing*`, except
//!   topics with `secret` in their name (a deny beats an allow), and
//!   describe the cluster;
//! - `bob` may also use groups `audit*` (but read no topic);
//! - `carol` is a user no rule names.
//!
//! Real clients (confluent-kafka, the Java client, kafkajs, franz-go) write
//! as bob and read as alice, and are refused as the other; raw requests
//! check each API's answer code by code.

mod support;

use std::path::PathBuf;
use std::sync::OnceLock;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use support::kafka::Kafka;
use support::{free_port, raw, try_client, unique, users_cmd, Strait};

const PASSWORD: &str = "acl-secret";

struct Guarded {
    strait: Strait,
    kafka: &'static Kafka,
    /// The SASL listener's port.
    sasl: u16,
    _dir: PathBuf,
}

fn guarded() -> &'static Guarded {
    static GUARDED: OnceLock<Guarded> = OnceLock::new();
    GUARDED.get_or_init(|| {
        let kafka = Kafka::shared();
        let dir = tempfile::Builder::new()
            .prefix("strait-acls-")
            .tempdir()
            .unwrap()
            .keep();
        let users = dir.join("users.yaml");
        for user in ["alice", "bob", "carol"] {
            users_cmd(&users, &["add", user], &format!("{PASSWORD}\n"));
        }
        let sasl = free_port();
        let config = format!(
            r#"
server:
  users_file: "{users}"
  failed_authentication_delay: 100ms
  listeners:
    - name: sasl
      listen: 127.0.0.1:{sasl}
      sasl: {{ mechanisms: [SCRAM-SHA-512, PLAIN] }}
clusters:
  kafka: {{ bootstrap: ["{kafka}"] }}
routes:
  - {{ prefix: "dc1.", to: kafka, strip_prefix: true }}
  - {{ regex: ".*", to: local }}
groups:
  - {{ prefix: "billing-dc1-", to: kafka }}
  - {{ regex: ".*", to: local }}
acls:
  - {{ principal: "User:ANONYMOUS", allow: [All], topic: {{ exact: "*" }} }}
  - {{ principal: "User:ANONYMOUS", allow: [All], group: {{ exact: "*" }} }}
  - {{ principal: "User:ANONYMOUS", allow: [All], cluster: true }}
  - {{ principal: "User:bob", allow: [Write], topic: {{ prefix: "orders." }} }}
  - {{ principal: "User:bob", allow: [Write], topic: {{ prefix: "dc1.orders" }} }}
  - {{ principal: "User:alice", allow: [Read], topic: {{ prefix: "orders." }} }}
  - {{ principal: "User:alice", allow: [Read], topic: {{ prefix: "dc1." }} }}
  - {{ principal: "User:alice", deny: [Read], topic: {{ regex: ".*secret.*" }} }}
  - {{ principal: "User:alice", allow: [Read], group: {{ prefix: "billing" }} }}
  - {{ principal: "User:alice", allow: [Describe], cluster: true }}
  - {{ principal: "User:bob", allow: [Read], group: {{ prefix: "audit" }} }}
"#,
            users = users.display(),
            kafka = kafka.bootstrap(),
        );
        let file = dir.join("strait.yaml");
        std::fs::write(&file, config).unwrap();
        let strait = Strait::start(&["--config", file.to_str().unwrap()]);
        Guarded {
            strait,
            kafka,
            sasl,
            _dir: dir,
        }
    })
}

/// A local topic of `partitions`, made as ANONYMOUS on the main listener.
fn local_topic(g: &Guarded, prefix: &str, partitions: i32) -> String {
    let topic = unique(prefix);
    support::create_topic("ck_admin.py", &g.strait.bootstrap(), &topic, partitions);
    topic
}

/// A topic on Kafka, and its name for clients (`dc1.` + its name there).
fn routed_topic(g: &Guarded, name: &str, partitions: i32) -> String {
    let upstream = unique(name);
    g.kafka.create_topic(&upstream, partitions, &[]);
    format!("dc1.{upstream}")
}

/// `-X` options of `family` to log in as `user` with SCRAM-SHA-512.
fn login(family: &str, user: &str) -> Vec<String> {
    let x: Vec<String> = match family {
        "ck" => vec![
            "security.protocol=SASL_PLAINTEXT".into(),
            "sasl.mechanisms=SCRAM-SHA-512".into(),
            format!("sasl.username={user}"),
            format!("sasl.password={PASSWORD}"),
        ],
        "java" => vec![
            "security.protocol=SASL_PLAINTEXT".into(),
            "sasl.mechanism=SCRAM-SHA-512".into(),
            format!(
                "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \
                 username=\"{user}\" password=\"{PASSWORD}\";"
            ),
        ],
        "kafkajs" => {
            let sasl =
                serde_json::json!({"mechanism": "scram-sha-512", "username": user, "password": PASSWORD});
            vec![format!("client.sasl={sasl}")]
        }
        "franz" => vec![
            "sasl.mechanism=SCRAM-SHA-512".into(),
            format!("sasl.username={user}"),
            format!("sasl.password={PASSWORD}"),
        ],
        _ => unreachable!("{family}"),
    };
    x.into_iter().flat_map(|o| ["-X".to_owned(), o]).collect()
}

/// The JSON a client printed (null if none).
fn json(run: &support::ClientRun) -> serde_json::Value {
    run.json.clone().unwrap_or_default()
}

const FAMILIES: [&str; 4] = ["ck", "java", "kafkajs", "franz"];

/// `family`'s producer (`script` 0) or consumer (1) with `args`, logged
/// in as `user` on the SASL listener.
fn client(g: &Guarded, family: &str, script: usize, user: &str, args: &[&str]) -> support::ClientRun {
    let bootstrap = format!("127.0.0.1:{}", g.sasl);
    let x = login(family, user);
    let mut all = vec!["--bootstrap", &bootstrap];
    all.extend(args);
    all.extend(x.iter().map(String::as_str));
    let (produce, consume) = support::family_scripts(family);
    try_client([produce, consume][script], &all)
}

/// `family` produces `count` records to `topic` as `user`.
fn produce(g: &Guarded, family: &str, user: &str, topic: &str, count: u32) -> support::ClientRun {
    let count = count.to_string();
    client(
        g,
        family,
        0,
        user,
        &["--topic", topic, "--count", &count, "--keyed"],
    )
}

/// `family` consumes `expect` records of `topic` in `group` as `user`,
/// committing them, for at most `timeout` seconds.
fn consume(
    g: &Guarded,
    family: &str,
    user: &str,
    topic: &str,
    group: &str,
    expect: u32,
    timeout: u32,
) -> support::ClientRun {
    let (expect, timeout) = (expect.to_string(), timeout.to_string());
    let args = [
        "--topic",
        topic,
        "--group",
        group,
        "--expect",
        &expect,
        "--commit",
        "--timeout",
        &timeout,
    ];
    client(g, family, 1, user, &args)
}

/// bob writes and alice reads in her group, with every client family, a
/// local topic in a group Strait coordinates and (ck and Java) a topic on
/// Kafka in a group Kafka coordinates; the commits land.
#[test]
fn each_principal_writes_and_reads_what_the_rules_allow() {
    let g = guarded();
    let mut cases: Vec<(&str, String, String)> = FAMILIES
        .iter()
        .map(|&family| {
            (
                family,
                local_topic(g, &format!("orders.{family}"), 3),
                unique(&format!("billing-{family}")),
            )
        })
        .collect();
    for family in ["ck", "java"] {
        cases.push((
            family,
            routed_topic(g, &format!("orders-{family}"), 3),
            unique(&format!("billing-dc1-{family}")),
        ));
    }
    for (family, topic, group) in &cases {
        let produced = produce(g, family, "bob", topic, 100);
        assert_eq!(
            json(&produced)["delivered"].as_u64(),
            Some(100),
            "{family} bob -> {topic}: {}",
            produced.describe()
        );
        let consumed = consume(g, family, "alice", topic, group, 100, 90);
        assert_eq!(
            json(&consumed)["records"].as_u64(),
            Some(100),
            "{family} alice <- {topic}: {}",
            consumed.describe()
        );
        assert_eq!(
            json(&consumed)["values_sha"],
            json(&produced)["values_sha"],
            "{family} {topic}"
        );
        let committed: u64 = json(&consumed)["committed"]
            .as_object()
            .expect("committed offsets")
            .values()
            .filter_map(|v| v.as_u64())
            .sum();
        assert_eq!(
            committed,
            100,
            "{family} {topic} committed: {}",
            consumed.describe()
        );
    }
    // The delegated group's commits are on Kafka, under its own id.
    let (_, topic, group) = cases.last().unwrap();
    let described = g.kafka.tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        &[
            "--bootstrap-server",
            &g.kafka.bootstrap(),
            "--describe",
            "--group",
            group,
            "--offsets",
        ],
    );
    let upstream = topic.strip_prefix("dc1.").unwrap();
    assert!(described.contains(upstream), "{described}");
}

/// How `family` names the denial of a resource of `kind`: the Kafka
/// error's name (the Java client script prints it too), or for kafkajs the
/// description it gives that code.
fn denial(family: &str, kind: &str) -> String {
    match family {
        "kafkajs" => format!("{kind} authorization failed"),
        _ => format!("{}_AUTHORIZATION_FAILED", kind.to_uppercase()),
    }
}

/// The ACL matrix, with every client family: read-only, write-only,
/// prefix grants, a denied group, a deny beating an allow, and Metadata
/// hiding topics; each refusal is the code Kafka would give that client.
#[test]
fn every_client_is_refused_what_the_rules_deny() {
    let g = guarded();
    let orders = local_topic(g, "orders.matrix", 1);
    let secret = local_topic(g, "orders.secret-matrix", 1);
    let payments = local_topic(g, "payments-matrix", 1);
    // (what, user, producing?, topic, group, the kind of resource denied,
    // per family).
    type Case<'a> = (&'a str, &'a str, bool, &'a str, &'a str, fn(&str) -> &'static str);
    let cases: Vec<Case> = vec![
        // Read-only: the idempotent producers (Java's and franz-go's
        // defaults) are refused their producer id, as Kafka refuses a
        // principal that may write nowhere; the others their Produce.
        (
            "read-only alice writes",
            "alice",
            true,
            &orders,
            "",
            |family| match family {
                "java" | "franz" => "Cluster",
                _ => "Topic",
            },
        ),
        // Write-only: bob may use his group, not read the topic.
        (
            "write-only bob reads",
            "bob",
            false,
            &orders,
            "audit-matrix",
            |_| "Topic",
        ),
        // Prefix grants: bob writes orders.*, not payments.
        (
            "bob writes outside his prefix",
            "bob",
            true,
            &payments,
            "",
            |_| "Topic",
        ),
        (
            "alice reads in a group not hers",
            "alice",
            false,
            &orders,
            "other-matrix",
            |_| "Group",
        ),
        (
            "a deny beats an allow",
            "alice",
            false,
            &secret,
            "billing-matrix",
            |_| "Topic",
        ),
    ];
    let runs: Vec<(String, String, support::ClientRun)> = std::thread::scope(|scope| {
        let mut running = Vec::new();
        for family in FAMILIES {
            for &(what, user, producing, topic, group, kind) in &cases {
                running.push(scope.spawn(move || {
                    let run = if producing {
                        produce(g, family, user, topic, 5)
                    } else {
                        consume(g, family, user, topic, &unique(group), 1, 20)
                    };
                    (format!("{family}: {what}"), denial(family, kind(family)), run)
                }));
            }
        }
        running.into_iter().map(|r| r.join().unwrap()).collect()
    });
    for (what, expect, run) in &runs {
        let out = json(run);
        assert!(
            out["delivered"].as_u64().unwrap_or(0) == 0 && out["records"].as_u64().unwrap_or(0) == 0,
            "{what}: {}",
            run.describe()
        );
        // The Java producer whose InitProducerId is refused either reports
        // the code or, when its send already failed, dies with Kafka's
        // exception for it (ClusterAuthorizationException): the same denial.
        let described = run.describe();
        let java_exception = expect
            .strip_suffix("_AUTHORIZATION_FAILED")
            .map(|kind| {
                let kind = kind.to_lowercase();
                let mut chars = kind.chars();
                let first = chars
                    .next()
                    .map(|c| c.to_uppercase().to_string())
                    .unwrap_or_default();
                format!("{first}{}AuthorizationException", chars.as_str())
            })
            .filter(|_| what.starts_with("java:"));
        assert!(
            described.contains(expect.as_str()) || java_exception.is_some_and(|e| described.contains(&e)),
            "{what}: no {expect} in {described}"
        );
    }
    // Nothing was written.
    let mut c = raw::Conn::open(g.strait.port(), "acl-check");
    for topic in [&orders, &payments] {
        let fetched = c.fetch(&raw::fetch_request(topic, 0, 0, 1, 1 << 20, 1 << 20));
        assert!(raw::record_values(fetched.responses[0].partitions[0].records.as_ref()).is_empty());
    }

    // Metadata hides what alice may not describe, in every client's
    // listing of topics.
    let bootstrap = format!("127.0.0.1:{}", g.sasl);
    for family in FAMILIES {
        let script = match family {
            "ck" => "ck_admin.py".to_owned(),
            _ => format!("{family}:admin"),
        };
        let x = login(family, "alice");
        let mut args = vec!["--bootstrap", bootstrap.as_str()];
        args.extend(x.iter().map(String::as_str));
        args.push("describe");
        let described = try_client(&script, &args);
        let topics = json(&described)["topics"].clone();
        let listed: Vec<&String> = topics.as_object().map(|t| t.keys().collect()).unwrap_or_default();
        assert!(
            listed.contains(&&orders) && listed.contains(&&secret) && !listed.contains(&&payments),
            "{family}: {listed:?} {}",
            described.describe()
        );
    }
}

/// A raw connection logged in as `user` with SASL PLAIN.
fn as_user(g: &Guarded, user: &str) -> raw::Conn {
    let mut c = raw::Conn::open(g.sasl, user);
    let handshake = c.call(
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
        1,
    );
    assert_eq!(handshake.error_code, 0, "{handshake:?}");
    let login = c.call(
        &SaslAuthenticateRequest::default()
            .with_auth_bytes(format!("\0{user}\0{PASSWORD}").into_bytes().into()),
        2,
    );
    assert_eq!(login.error_code, 0, "{user}: {login:?}");
    c
}

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

fn group_id(group: &str) -> GroupId {
    GroupId(StrBytes::from_string(group.to_owned()))
}

const TOPIC_DENIED: i16 = 29;
const GROUP_DENIED: i16 = 30;
const CLUSTER_DENIED: i16 = 31;

/// Each API's denial, code by code, as Kafka answers it; what is allowed
/// beside it in the same request still happens.
#[test]
fn each_api_answers_a_denial_with_kafkas_code() {
    let g = guarded();
    let orders = local_topic(g, "orders.raw", 1);
    let secret = local_topic(g, "orders.secret", 1);
    let payments = local_topic(g, "payments", 1);
    let batch = raw::idempotent_batch(-1, -1, -1, &["one", "two"]);
    let mut bob = as_user(g, "bob");
    let mut alice = as_user(g, "alice");

    // Produce: bob writes orders and secret, not payments; in one request
    // the allowed part is written and the rest refused.
    assert_eq!(bob.produce(&orders, 0, &batch, 5000), (0, 0));
    assert_eq!(bob.produce(&secret, 0, &batch, 5000), (0, 0));
    assert_eq!(bob.produce(&payments, 0, &batch, 5000).0, TOPIC_DENIED);
    assert_eq!(alice.produce(&orders, 0, &batch, 5000).0, TOPIC_DENIED);
    let partition = |records: &[u8]| {
        vec![produce_request::PartitionProduceData::default()
            .with_index(0)
            .with_records(Some(records.to_vec().into()))]
    };
    let both = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![
            produce_request::TopicProduceData::default()
                .with_name(name(&payments))
                .with_partition_data(partition(&batch)),
            produce_request::TopicProduceData::default()
                .with_name(name(&orders))
                .with_partition_data(partition(&batch)),
        ]);
    let answer = bob.call(&both, 9);
    let codes: Vec<(String, i16, i64)> = answer
        .responses
        .iter()
        .map(|t| {
            let p = &t.partition_responses[0];
            (t.name.to_string(), p.error_code, p.base_offset)
        })
        .collect();
    assert!(codes.contains(&(orders.clone(), 0, 2)), "{codes:?}");
    assert!(codes.contains(&(payments.clone(), TOPIC_DENIED, -1)), "{codes:?}");

    // Fetch: alice reads orders, not secret (deny beats allow); bob reads
    // nothing.
    let values = |c: &mut raw::Conn, topic: &str| {
        let answer = c.fetch(&raw::fetch_request(topic, 0, 0, 1, 1 << 20, 1 << 20));
        let p = &answer.responses[0].partitions[0];
        (p.error_code, raw::record_values(p.records.as_ref()))
    };
    assert_eq!(
        values(&mut alice, &orders),
        (0, vec!["one".into(), "two".into(), "one".into(), "two".into()])
    );
    assert_eq!(values(&mut alice, &secret), (TOPIC_DENIED, vec![]));
    assert_eq!(values(&mut bob, &orders), (TOPIC_DENIED, vec![]));

    // Metadata: a listing shows alice only what she may describe; a topic
    // asked for by name that she may not is refused, whether or not it
    // exists, and none is created on the fly for her.
    let listed: Vec<String> = alice
        .metadata()
        .topics
        .iter()
        .filter_map(|t| t.name.as_ref().map(|n| n.to_string()))
        .collect();
    assert!(listed.contains(&orders), "{listed:?}");
    assert!(!listed.contains(&payments), "{listed:?}");
    let fresh = unique("orders.fresh");
    let named = MetadataRequest::default()
        .with_allow_auto_topic_creation(true)
        .with_topics(Some(
            [&payments, &fresh, &"nowhere".to_owned()]
                .iter()
                .map(|t| MetadataRequestTopic::default().with_name(Some(name(t))))
                .collect(),
        ));
    let answer = alice.call(&named, 12);
    let codes: Vec<(String, i16)> = answer
        .topics
        .iter()
        .map(|t| (t.name.as_ref().unwrap().to_string(), t.error_code))
        .collect();
    assert!(codes.contains(&(payments.clone(), TOPIC_DENIED)), "{codes:?}");
    assert!(codes.contains(&("nowhere".to_owned(), TOPIC_DENIED)), "{codes:?}");
    assert!(codes.contains(&(fresh.clone(), 3)), "not created: {codes:?}");

    // Groups: alice may use billing*, nothing else.
    let find = |c: &mut raw::Conn, group: &str| {
        c.call(
            &FindCoordinatorRequest::default()
                .with_key_type(0)
                .with_coordinator_keys(vec![StrBytes::from_string(group.to_owned())]),
            4,
        )
        .coordinators[0]
            .error_code
    };
    assert_eq!(find(&mut alice, "billing-raw"), 0);
    assert_eq!(find(&mut alice, "other-raw"), GROUP_DENIED);
    let join = JoinGroupRequest::default()
        .with_group_id(group_id("other-raw"))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_protocol_type(StrBytes::from_static_str("consumer"));
    assert_eq!(alice.call(&join, 5).error_code, GROUP_DENIED);
    let commit = |c: &mut raw::Conn, group: &str, topics: &[&String]| {
        let request = OffsetCommitRequest::default()
            .with_group_id(group_id(group))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(
                topics
                    .iter()
                    .map(|t| {
                        OffsetCommitRequestTopic::default()
                            .with_name(name(t))
                            .with_partitions(vec![OffsetCommitRequestPartition::default()
                                .with_partition_index(0)
                                .with_committed_offset(1)])
                    })
                    .collect(),
            );
        let answer = c.call(&request, 8);
        answer
            .topics
            .iter()
            .map(|t| (t.name.to_string(), t.partitions[0].error_code))
            .collect::<Vec<_>>()
    };
    let codes = commit(&mut alice, "billing-raw", &[&orders, &payments]);
    assert!(codes.contains(&(orders.clone(), 0)), "{codes:?}");
    assert!(codes.contains(&(payments.clone(), TOPIC_DENIED)), "{codes:?}");
    let codes = commit(&mut alice, "other-raw", &[&orders]);
    assert_eq!(codes, [(orders.clone(), GROUP_DENIED)]);
    let committed = |c: &mut raw::Conn, group: &str| {
        let answer = c.call(
            &OffsetFetchRequest::default().with_groups(vec![
                offset_fetch_request::OffsetFetchRequestGroup::default()
                    .with_group_id(group_id(group))
                    .with_topics(None),
            ]),
            8,
        );
        let group = &answer.groups[0];
        let topics: Vec<String> = group.topics.iter().map(|t| t.name.to_string()).collect();
        (group.error_code, topics)
    };
    assert_eq!(committed(&mut alice, "billing-raw"), (0, vec![orders.clone()]));
    assert_eq!(committed(&mut alice, "other-raw"), (GROUP_DENIED, vec![]));
    // ANONYMOUS commits in other-raw; alice's listing leaves it out.
    let mut anonymous = raw::Conn::open(g.strait.port(), "acl-anonymous");
    assert_eq!(
        commit(&mut anonymous, "other-raw", &[&orders]),
        [(orders.clone(), 0)]
    );
    let groups = |c: &mut raw::Conn| -> Vec<String> {
        c.call(&ListGroupsRequest::default(), 4)
            .groups
            .iter()
            .map(|g| g.group_id.to_string())
            .collect()
    };
    assert_eq!(
        commit(&mut anonymous, "audit-raw", &[&orders]),
        [(orders.clone(), 0)]
    );
    let everyone = groups(&mut anonymous);
    assert!(
        ["other-raw", "billing-raw", "audit-raw"]
            .iter()
            .all(|g| everyone.contains(&g.to_string())),
        "{everyone:?}"
    );
    let all = groups(&mut alice);
    assert!(
        everyone
            .iter()
            .filter(|g| g.ends_with("-raw"))
            .all(|g| all.contains(g)),
        "Describe on the cluster lists every group: {all:?}"
    );
    let listed = groups(&mut bob);
    assert!(
        listed.contains(&"audit-raw".to_owned()) && listed.iter().all(|g| g.starts_with("audit")),
        "bob may describe only his own groups: {listed:?}"
    );
    let deleted = alice.call(
        &DeleteGroupsRequest::default().with_groups_names(vec![group_id("billing-raw")]),
        2,
    );
    assert_eq!(
        deleted.results[0].error_code, GROUP_DENIED,
        "Read does not allow Delete"
    );

    // The cluster and topic administration.
    let init = |c: &mut raw::Conn| raw::init_producer_id(c, None).error_code;
    assert_eq!(
        init(&mut bob),
        0,
        "Write on a topic lets a producer be idempotent"
    );
    assert_eq!(init(&mut alice), CLUSTER_DENIED);
    assert_eq!(alice.call(&DescribeClusterRequest::default(), 0).error_code, 0);
    let mut carol = as_user(g, "carol");
    let cluster = carol.call(&DescribeClusterRequest::default(), 0);
    assert_eq!(cluster.error_code, CLUSTER_DENIED);
    assert!(carol.metadata().topics.is_empty(), "carol may describe no topic");
    let created = bob.call(
        &CreateTopicsRequest::default()
            .with_timeout_ms(5000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(name(&unique("orders.made")))
                .with_num_partitions(1)
                .with_replication_factor(1)]),
        5,
    );
    assert_eq!(created.topics[0].error_code, TOPIC_DENIED);
    let deleted = bob.call(
        &DeleteTopicsRequest::default()
            .with_timeout_ms(5000)
            .with_topics(vec![DeleteTopicState::default().with_name(Some(name(&orders)))]),
        6,
    );
    assert_eq!(deleted.responses[0].error_code, TOPIC_DENIED);
    assert_eq!(values(&mut alice, &orders).0, 0, "the topic is still there");

    // acks=0: the only way to tell the client is to close its connection.
    let quiet = ProduceRequest::default()
        .with_acks(0)
        .with_timeout_ms(5000)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(name(&payments))
            .with_partition_data(partition(&batch))]);
    let (_, frame) = bob.frame(ApiKey::Produce, 9, 9, &quiet);
    bob.send_raw(&frame);
    bob.assert_closed("acks=0 Produce to a denied topic");
    // Other connections are untouched.
    assert_eq!(values(&mut alice, &orders).0, 0);
}
