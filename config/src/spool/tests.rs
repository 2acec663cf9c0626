use super::*;

fn spool(yaml: &str) -> SpoolConfig {
    serde_yaml::from_str(yaml).expect("test YAML parses")
}

#[test]
fn defaults() {
    let d = TopicSpoolConfig::default();
    assert_eq!(
        d,
        TopicSpoolConfig {
            segment_bytes: 1 << 30,
            segment_age: Duration::from_secs(7 * 86_400),
            index_interval_bytes: 4 << 10,
            index_bytes: 10 << 20,
            max_batch_bytes: 1 << 20,
            retention_bytes: None,
            retention_age: Some(Duration::from_secs(7 * 86_400)),
            durability: Durability::Interval,
            flush_interval: Duration::from_secs(1),
            flush_bytes: None,
        }
    );
    assert_eq!(SpoolConfig::default().for_topic("anything"), d);
    assert_eq!(spool("{}"), SpoolConfig::default());
}

#[test]
fn for_topic_merges_overrides_onto_defaults() {
    let s = spool(
        "
segment_bytes: 256MiB
retention_bytes: 10GiB
durability: every_batch
topics:
  payments:
    retention_age: 30d
  audit:
    retention_bytes: null
    retention_age: null
    segment_age: 1h
  fast:
    durability: interval
    flush_interval: 200ms
    flush_bytes: 1MiB
",
    );
    s.validate("spool").expect("valid");

    let other = s.for_topic("other");
    assert_eq!(other.segment_bytes, 256 << 20);
    assert_eq!(other.retention_bytes, Some(10 << 30));
    assert_eq!(other.durability, Durability::EveryBatch);

    let payments = s.for_topic("payments");
    assert_eq!(payments.retention_age, Some(Duration::from_secs(30 * 86_400)));
    assert_eq!(payments.retention_bytes, Some(10 << 30), "inherited");
    assert_eq!(payments.segment_bytes, 256 << 20, "inherited");
    assert_eq!(payments.durability, Durability::EveryBatch, "inherited");

    let audit = s.for_topic("audit");
    assert_eq!(audit.retention_bytes, None, "explicit null overrides a limit");
    assert_eq!(audit.retention_age, None, "explicit null means forever");
    assert_eq!(audit.segment_age, Duration::from_secs(3_600));

    let fast = s.for_topic("fast");
    assert_eq!(fast.durability, Durability::Interval);
    assert_eq!(fast.flush_interval, Duration::from_millis(200));
    assert_eq!(fast.flush_bytes, Some(1 << 20));
}

#[test]
fn flush_bytes_resolve_to_none_without_interval_policy() {
    let s = spool("flush_bytes: 1MiB\ntopics:\n  t:\n    durability: every_batch\n");
    s.validate("spool").expect("valid");
    assert_eq!(s.for_topic("other").flush_bytes, Some(1 << 20));
    assert_eq!(s.for_topic("t").flush_bytes, None);
}

#[test]
fn flush_interval_defaults_to_one_second_when_inherited() {
    let s = spool("durability: os\ntopics:\n  t:\n    durability: interval\n");
    s.validate("spool").expect("valid");
    assert_eq!(s.for_topic("t").flush_interval, Duration::from_secs(1));
    assert_eq!(s.for_topic("t").flush_bytes, None);
    assert_eq!(s.for_topic("t").durability, Durability::Interval);
}

/// `check(yaml, expected)`: validates a `spool:` section; `Ok(())` or the
/// expected key path and a fragment of the message.
#[track_caller]
fn check(yaml: &str, expected: Result<(), (&str, &str)>) {
    let got = spool(yaml).validate("spool");
    match (&got, expected) {
        (Ok(()), Ok(())) => {}
        (Err(e), Err((path, fragment))) => {
            assert_eq!(e.path, path, "{yaml}");
            assert!(
                e.message.contains(fragment),
                "{yaml}: message {:?} does not mention {fragment:?}",
                e.message
            );
        }
        _ => panic!("{yaml}: got {got:?}, expected {expected:?}"),
    }
}

#[test]
fn validation() {
    check("{}", Ok(()));
    check("segment_bytes: 64KiB\nmax_batch_bytes: 64KiB", Ok(()));
    check("segment_bytes: 2GiB", Ok(()));
    check("durability: every_batch", Ok(()));
    check("durability: os\nflush_interval: null\nflush_bytes: null", Ok(()));
    check("flush_interval: 10ms\nflush_bytes: 64MiB", Ok(()));
    check("retention_age: null\nretention_bytes: 1TiB", Ok(()));

    check("segment_bytes: 0", Err(("spool.segment_bytes", "at least 64KiB")));
    check(
        "segment_bytes: 65535",
        Err(("spool.segment_bytes", "at least 64KiB")),
    );
    check(
        "segment_bytes: 3GiB",
        Err(("spool.segment_bytes", "at most 2GiB")),
    );
    check("segment_age: 0s", Err(("spool.segment_age", "greater than zero")));
    check(
        "index_interval_bytes: 0",
        Err(("spool.index_interval_bytes", "greater than zero")),
    );
    check("index_bytes: 1KiB", Err(("spool.index_bytes", "at least 4KiB")));
    check(
        "max_batch_bytes: 0",
        Err(("spool.max_batch_bytes", "greater than zero")),
    );
    check(
        "max_batch_bytes: 2MiB\nsegment_bytes: 1MiB",
        Err((
            "spool.max_batch_bytes",
            "max_batch_bytes (2MiB) is larger than segment_bytes (1MiB)",
        )),
    );
    check("retention_bytes: 0", Err(("spool.retention_bytes", "use null")));
    check("retention_age: 0s", Err(("spool.retention_age", "use null")));
    check("retention_check_interval: 200ms", Ok(()));
    check(
        "retention_check_interval: 0s",
        Err(("spool.retention_check_interval", "must be greater than zero")),
    );
    check("flush_interval: 0s", Err(("spool.flush_interval", "every_batch")));
    check("flush_bytes: 0B", Err(("spool.flush_bytes", "use null")));
    check(
        "durability: every_batch\nflush_interval: 1s",
        Err((
            "spool.flush_interval",
            "has no effect with `durability: every_batch`",
        )),
    );
    check(
        "durability: os\nflush_bytes: 1MiB",
        Err(("spool.flush_bytes", "has no effect with `durability: os`")),
    );
}

#[test]
fn topic_validation_blames_the_topic_key() {
    check(
        "topics:\n  payments:\n    retention_age: 0s",
        Err(("spool.topics.payments.retention_age", "greater than zero")),
    );
    // The topic's small segment conflicts with the inherited batch limit:
    // blame the key the topic wrote.
    check(
        "topics:\n  small:\n    segment_bytes: 512KiB",
        Err((
            "spool.topics.small.segment_bytes",
            "max_batch_bytes (1MiB) is larger than segment_bytes (512KiB)",
        )),
    );
    check(
        "topics:\n  small:\n    segment_bytes: 512KiB\n    max_batch_bytes: 256KiB",
        Ok(()),
    );
    // Inherited durability makes the topic's flush setting pointless.
    check(
        "durability: every_batch\ntopics:\n  t:\n    flush_interval: 5s",
        Err((
            "spool.topics.t.flush_interval",
            "has no effect with `durability: every_batch`",
        )),
    );
    check(
        "topics:\n  t:\n    durability: os\n    flush_bytes: 1MiB",
        Err(("spool.topics.t.flush_bytes", "no effect")),
    );
    // A topic may switch policy while the defaults keep their flush settings.
    check(
        "flush_interval: 5s\nflush_bytes: 1MiB\ntopics:\n  t:\n    durability: every_batch",
        Ok(()),
    );
    // An explicit null asks for nothing, so it is harmless.
    check(
        "topics:\n  t:\n    durability: every_batch\n    flush_bytes: null",
        Ok(()),
    );
}

#[test]
fn topic_names() {
    let long = "x".repeat(249);
    let too_long = "x".repeat(250);
    for good in ["payments", "a", "A.b_c-9", "...", "_", long.as_str()] {
        assert_eq!(check_topic_name(good), Ok(()), "{good}");
    }
    for (bad, fragment) in [
        ("", "must not be empty"),
        (".", "not allowed"),
        ("..", "not allowed"),
        ("has space", "contains ' '"),
        ("slash/no", "contains '/'"),
        ("ümlaut", "contains 'ü'"),
        (too_long.as_str(), "250 characters"),
    ] {
        match check_topic_name(bad) {
            Err(message) => assert!(message.contains(fragment), "{bad}: {message}"),
            Ok(()) => panic!("{bad:?} accepted"),
        }
    }
    check(
        "topics:\n  'has space':\n    segment_age: 1h",
        Err(("spool.topics.has space", "invalid topic name `has space`")),
    );
}
