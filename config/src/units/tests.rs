use super::*;

/// Parses `input` as a size and compares with `expected` (bytes), or, for
/// `Err(fragment)`, checks that the error message contains `fragment`.
#[track_caller]
fn check_size(input: &str, expected: Result<u64, &str>) {
    let got = input.parse::<ByteSize>();
    match (got, expected) {
        (Ok(size), Ok(bytes)) => assert_eq!(size.bytes(), bytes, "input {input:?}"),
        (Err(e), Err(fragment)) => assert!(
            e.to_string().contains(fragment),
            "input {input:?}: error {e:?} does not mention {fragment:?}"
        ),
        (got, expected) => panic!("input {input:?}: got {got:?}, expected {expected:?}"),
    }
}

#[track_caller]
fn check_duration(input: &str, expected: Result<Duration, &str>) {
    let got = input.parse::<HumanDuration>();
    match (got, expected) {
        (Ok(d), Ok(want)) => assert_eq!(d.duration(), want, "input {input:?}"),
        (Err(e), Err(fragment)) => assert!(
            e.to_string().contains(fragment),
            "input {input:?}: error {e:?} does not mention {fragment:?}"
        ),
        (got, expected) => panic!("input {input:?}: got {got:?}, expected {expected:?}"),
    }
}

#[test]
fn sizes() {
    const KI: u64 = 1024;
    check_size("0", Ok(0));
    check_size("4096", Ok(4096));
    check_size("12B", Ok(12));
    check_size("4KiB", Ok(4 * KI));
    check_size("10MiB", Ok(10 * KI * KI));
    check_size("1GiB", Ok(KI * KI * KI));
    check_size("2TiB", Ok(2 * KI * KI * KI * KI));
    check_size("3KB", Ok(3_000));
    check_size("5MB", Ok(5_000_000));
    check_size("1GB", Ok(1_000_000_000));
    check_size("1TB", Ok(1_000_000_000_000));
    check_size("1 GiB", Ok(KI * KI * KI));
    check_size("  64 KiB  ", Ok(64 * KI));
    check_size("64kib", Ok(64 * KI));
    check_size("64KIB", Ok(64 * KI));
    check_size("1mb", Ok(1_000_000));
    check_size("7b", Ok(7));
    check_size("18446744073709551615", Ok(u64::MAX));

    check_size("", Err("expected a whole number"));
    check_size("GiB", Err("expected a whole number"));
    check_size("-1", Err("invalid size `-1`: must not be negative"));
    check_size("-5MiB", Err("invalid size `-5MiB`: must not be negative"));
    check_size("1.5GiB", Err("fractions are not supported"));
    check_size("1G", Err("`G` is ambiguous"));
    check_size("1k", Err("`K` is ambiguous"));
    check_size("12 parsecs", Err("unknown unit `parsecs`"));
    check_size("1GiB extra", Err("unknown unit `GiB extra`"));
    check_size("18446744073709551616", Err("too large"));
    check_size("16777216TiB", Err("too large"));
}

#[test]
fn durations() {
    let secs = Duration::from_secs;
    check_duration("0s", Ok(Duration::ZERO));
    check_duration("500ms", Ok(Duration::from_millis(500)));
    check_duration("1s", Ok(secs(1)));
    check_duration("90s", Ok(secs(90)));
    check_duration("5m", Ok(secs(300)));
    check_duration("2h", Ok(secs(7_200)));
    check_duration("7d", Ok(secs(7 * 86_400)));
    check_duration("1h30m", Ok(secs(5_400)));
    check_duration("1h 30m", Ok(secs(5_400)));
    check_duration("1d2h3m4s5ms", Ok(Duration::new(93_784, 5_000_000)));
    check_duration(" 10 s ", Ok(secs(10)));
    check_duration("250us", Ok(Duration::from_micros(250)));
    check_duration("250µs", Ok(Duration::from_micros(250)));
    check_duration("42ns", Ok(Duration::from_nanos(42)));

    check_duration("", Err("expected a number and a unit"));
    check_duration("30", Err("a bare number is ambiguous; add a unit, e.g. `30s`"));
    check_duration("1h30", Err("`30` has no unit"));
    check_duration("1.5s", Err("fractions are not supported"));
    check_duration("3w", Err("unknown unit `w`"));
    check_duration("1S", Err("unknown unit `S`"));
    check_duration("s", Err("expected a number before `s`"));
    check_duration("30m1h", Err("largest first"));
    check_duration("1m1m", Err("largest first"));
    check_duration("-1s", Err("invalid duration `-1s`: must not be negative"));
    check_duration("99999999999999999999999d", Err("too large"));
    check_duration("213503982334601d", Ok(secs(213_503_982_334_601 * 86_400)));
    check_duration("213503982334602d", Err("too large"));
}

#[test]
fn sizes_display_in_largest_exact_unit() {
    let check = |bytes: u64, text: &str| {
        assert_eq!(ByteSize(bytes).to_string(), text);
        assert_eq!(text.parse::<ByteSize>(), Ok(ByteSize(bytes)));
    };
    check(0, "0B");
    check(1, "1B");
    check(1023, "1023B");
    check(1024, "1KiB");
    check(1000, "1KB");
    check(1536, "1536B");
    check(3 << 19, "1536KiB");
    check(1 << 30, "1GiB");
    check(3_000_000, "3MB");
    check(1_024_000, "1000KiB");
    check(1 << 40, "1TiB");
    check(u64::MAX, "18446744073709551615B");
}

#[test]
fn durations_display_in_largest_exact_unit() {
    let check = |d: Duration, text: &str| {
        assert_eq!(HumanDuration(d).to_string(), text);
        assert_eq!(text.parse::<HumanDuration>(), Ok(HumanDuration(d)));
    };
    check(Duration::ZERO, "0s");
    check(Duration::from_millis(500), "500ms");
    check(Duration::from_millis(1_500), "1500ms");
    check(Duration::from_secs(1), "1s");
    check(Duration::from_secs(90), "90s");
    check(Duration::from_secs(5_400), "90m");
    check(Duration::from_secs(7 * 86_400), "7d");
    check(Duration::from_secs(30 * 86_400), "30d");
    check(Duration::from_nanos(1_001), "1001ns");
    check(Duration::MAX, "18446744073709551615999999999ns");
}

#[test]
fn constructors_agree_with_parsing() {
    assert_eq!(ByteSize::kib(4), "4KiB".parse().unwrap());
    assert_eq!(ByteSize::mib(10), "10MiB".parse().unwrap());
    assert_eq!(ByteSize::gib(1), "1GiB".parse().unwrap());
    assert_eq!(HumanDuration::millis(500), "500ms".parse().unwrap());
    assert_eq!(HumanDuration::secs(1), "1s".parse().unwrap());
    assert_eq!(HumanDuration::minutes(5), "5m".parse().unwrap());
    assert_eq!(HumanDuration::hours(2), "2h".parse().unwrap());
    assert_eq!(HumanDuration::days(7), "7d".parse().unwrap());
}

/// Values come from YAML as integers or strings; both paths must work.
#[test]
fn yaml_scalars() {
    let size = |yaml: &str| serde_yaml::from_str::<ByteSize>(yaml).map_err(|e| e.to_string());
    assert_eq!(size("1048576"), Ok(ByteSize::mib(1)));
    assert_eq!(size("1MiB"), Ok(ByteSize::mib(1)));
    assert_eq!(size("'1 MiB'"), Ok(ByteSize::mib(1)));
    assert!(size("-3")
        .unwrap_err()
        .contains("invalid size `-3`: must not be negative"));
    assert!(size("-3MiB")
        .unwrap_err()
        .contains("invalid size `-3MiB`: must not be negative"));
    assert!(size("-1.5")
        .unwrap_err()
        .contains("invalid size `-1.5`: must not be negative"));
    assert!(size("1.5").unwrap_err().contains("whole number"));
    assert!(size("99999999999999999999")
        .unwrap_err()
        .contains("invalid size `99999999999999999999`: too large"));
    assert!(size("-99999999999999999999")
        .unwrap_err()
        .contains("invalid size `-99999999999999999999`: must not be negative"));

    let duration = |yaml: &str| serde_yaml::from_str::<HumanDuration>(yaml).map_err(|e| e.to_string());
    assert_eq!(duration("7d"), Ok(HumanDuration::days(7)));
    assert_eq!(duration("'500ms'"), Ok(HumanDuration::millis(500)));
    assert!(duration("5").unwrap_err().contains("add a unit, e.g. `5s`"));
    assert!(duration("'5'").unwrap_err().contains("add a unit, e.g. `5s`"));
    assert!(duration("-5")
        .unwrap_err()
        .contains("invalid duration `-5`: must not be negative"));
    assert!(duration("-5s")
        .unwrap_err()
        .contains("invalid duration `-5s`: must not be negative"));
    assert!(duration("0.5")
        .unwrap_err()
        .contains("fractions are not supported"));

    assert_eq!(serde_yaml::to_string(&ByteSize::gib(1)).unwrap(), "1GiB\n");
    assert_eq!(serde_yaml::to_string(&HumanDuration::days(7)).unwrap(), "7d\n");
}

/// Counts (`max_connections`) are worded as sizes and durations are.
#[test]
fn counts() {
    #[derive(Debug, serde::Deserialize)]
    struct Holder {
        #[serde(deserialize_with = "deserialize_count")]
        n: u32,
    }
    let count = |yaml: &str| {
        serde_yaml::from_str::<Holder>(&format!("n: {yaml}"))
            .map(|h| h.n)
            .map_err(|e| e.to_string())
    };
    assert_eq!(count("0"), Ok(0));
    assert_eq!(count("100"), Ok(100));
    assert_eq!(count("'100'"), Ok(100));
    assert_eq!(count("4294967295"), Ok(u32::MAX));
    let err = |yaml: &str| count(yaml).unwrap_err();
    assert!(
        err("-1").starts_with("n: invalid number `-1`: must not be negative"),
        "{}",
        err("-1")
    );
    assert!(err("'-1'").starts_with("n: invalid number `-1`: must not be negative"));
    assert!(err("-1.5").starts_with("n: invalid number `-1.5`: must not be negative"));
    assert!(err("4294967296").starts_with("n: invalid number `4294967296`: too large (at most 4294967295)"));
    assert!(
        err("99999999999999999999").contains("too large (at most 4294967295)"),
        "{}",
        err("99999999999999999999")
    );
    assert!(err("1.5").contains("invalid number `1.5`: expected a whole number, e.g. `100`"));
    assert!(err("lots").contains("invalid number `lots`: expected a whole number"));
}
