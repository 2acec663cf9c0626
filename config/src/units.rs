//! Human-friendly quantities: [`ByteSize`] (`64KiB`, `1GiB`, `10MB`) and
//! [`HumanDuration`] (`500ms`, `1s`, `1h30m`, `7d`).
//!
//! Both deserialize from the text a person would write and serialize back to
//! the shortest exact form (the largest unit that divides the value), so an
//! effective configuration printed by `strait check` reads like one a person
//! wrote.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

#[cfg(test)]
mod tests;

/// Why a size or a duration could not be parsed. The message is meant for
/// people: it quotes the input and says what would have been accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UnitError(String);

/// The one wording for a negative value, whatever its kind (`size`,
/// `duration`, `number`) and however it was written (`-1`, `-5MiB`, `-5s`).
fn negative(kind: &str, input: &str) -> UnitError {
    UnitError(format!("invalid {kind} `{}`: must not be negative", input.trim()))
}

/// A number of bytes.
///
/// Accepted forms: a plain integer (bytes), or an integer followed by an
/// optional space and a unit: `B`; binary `KiB`, `MiB`, `GiB`, `TiB`
/// (powers of 1024); decimal `KB`, `MB`, `GB`, `TB` (powers of 1000).
/// Unit letters are matched without regard to case (`kib` = `KiB`,
/// `mb` = `MB`). Bare `K`, `M`, `G` are rejected: they do not say whether
/// 1000 or 1024 is meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

/// Size units, largest first, as written when serializing.
const SIZE_UNITS: [(&str, u64); 9] = [
    ("TiB", 1 << 40),
    ("TB", 1_000_000_000_000),
    ("GiB", 1 << 30),
    ("GB", 1_000_000_000),
    ("MiB", 1 << 20),
    ("MB", 1_000_000),
    ("KiB", 1 << 10),
    ("KB", 1_000),
    ("B", 1),
];

const SIZE_UNIT_LIST: &str = "B, KiB, MiB, GiB, TiB, KB, MB, GB or TB";

impl ByteSize {
    /// `n` bytes.
    pub const fn b(n: u64) -> Self {
        ByteSize(n)
    }

    /// `n` KiB (`n * 1024` bytes).
    pub const fn kib(n: u64) -> Self {
        ByteSize(n.saturating_mul(1 << 10))
    }

    /// `n` MiB (`n * 1024^2` bytes).
    pub const fn mib(n: u64) -> Self {
        ByteSize(n.saturating_mul(1 << 20))
    }

    /// `n` GiB (`n * 1024^3` bytes).
    pub const fn gib(n: u64) -> Self {
        ByteSize(n.saturating_mul(1 << 30))
    }

    /// The number of bytes.
    pub const fn bytes(self) -> u64 {
        self.0
    }
}

impl From<u64> for ByteSize {
    fn from(n: u64) -> Self {
        ByteSize(n)
    }
}

impl From<ByteSize> for u64 {
    fn from(size: ByteSize) -> Self {
        size.0
    }
}

impl FromStr for ByteSize {
    type Err = UnitError;

    fn from_str(input: &str) -> Result<Self, UnitError> {
        let text = input.trim();
        if text.starts_with('-') {
            return Err(negative("size", input));
        }
        let digits_end = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
        let (number, unit) = text.split_at(digits_end);
        let unit = unit.trim_start();
        if number.is_empty() {
            return Err(UnitError(format!(
                "invalid size `{input}`: expected a whole number followed by an optional unit \
                 ({SIZE_UNIT_LIST}), e.g. `64KiB` or `1GiB`"
            )));
        }
        if unit.starts_with('.') {
            return Err(UnitError(format!(
                "invalid size `{input}`: fractions are not supported; use a smaller unit, \
                 e.g. `1536MiB` instead of `1.5GiB`"
            )));
        }
        let multiplier = match unit.to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "kib" => 1 << 10,
            "mib" => 1 << 20,
            "gib" => 1 << 30,
            "tib" => 1 << 40,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            "tb" => 1_000_000_000_000,
            "k" | "m" | "g" | "t" => {
                return Err(UnitError(format!(
                    "invalid size `{input}`: unit `{unit}` is ambiguous; write `{unit}iB` \
                     (powers of 1024) or `{unit}B` (powers of 1000)",
                    unit = unit.to_ascii_uppercase()
                )))
            }
            _ => {
                return Err(UnitError(format!(
                    "invalid size `{input}`: unknown unit `{unit}`; expected {SIZE_UNIT_LIST}"
                )))
            }
        };
        number
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(multiplier))
            .map(ByteSize)
            .ok_or_else(|| {
                UnitError(format!(
                    "invalid size `{input}`: too large (at most {} bytes)",
                    u64::MAX
                ))
            })
    }
}

impl fmt::Display for ByteSize {
    /// Writes the size in the largest unit that represents it exactly:
    /// `1GiB`, `1500KB`, `0B`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("0B");
        }
        for (name, multiplier) in SIZE_UNITS {
            if self.0.is_multiple_of(multiplier) {
                return write!(f, "{}{name}", self.0 / multiplier);
            }
        }
        // Unreachable: the last unit has multiplier 1.
        write!(f, "{}B", self.0)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SizeVisitor;

        impl Visitor<'_> for SizeVisitor {
            type Value = ByteSize;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as `1048576`, `64KiB` or `1GiB`")
            }

            fn visit_u64<E: de::Error>(self, n: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(n))
            }

            fn visit_i64<E: de::Error>(self, n: i64) -> Result<ByteSize, E> {
                u64::try_from(n)
                    .map(ByteSize)
                    .map_err(|_| E::custom(negative("size", &n.to_string())))
            }

            fn visit_u128<E: de::Error>(self, n: u128) -> Result<ByteSize, E> {
                u64::try_from(n).map(ByteSize).map_err(|_| {
                    E::custom(format!(
                        "invalid size `{n}`: too large (at most {} bytes)",
                        u64::MAX
                    ))
                })
            }

            fn visit_i128<E: de::Error>(self, n: i128) -> Result<ByteSize, E> {
                match u128::try_from(n) {
                    Ok(n) => self.visit_u128(n),
                    Err(_) => Err(E::custom(negative("size", &n.to_string()))),
                }
            }

            fn visit_f64<E: de::Error>(self, n: f64) -> Result<ByteSize, E> {
                if n < 0.0 {
                    return Err(E::custom(negative("size", &n.to_string())));
                }
                Err(E::custom(format!(
                    "invalid size `{n}`: expected a whole number of bytes or a unit, e.g. `64KiB`"
                )))
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<ByteSize, E> {
                s.parse().map_err(E::custom)
            }
        }

        deserializer.deserialize_any(SizeVisitor)
    }
}

/// A span of time.
///
/// Accepted forms: one or more `<integer><unit>` parts, largest unit first,
/// optionally separated by spaces: `500ms`, `1s`, `90s`, `1h30m`, `7d`.
/// Units: `ns`, `us`, `ms`, `s`, `m` (minutes), `h`, `d`; lower case only,
/// so `m` can never be mistaken for months. A bare number is rejected
/// because it does not say which unit is meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HumanDuration(pub Duration);

/// Duration units in nanoseconds, largest first, as written when serializing.
const DURATION_UNITS: [(&str, u128); 7] = [
    ("d", 86_400_000_000_000),
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

const DURATION_UNIT_LIST: &str = "ms, s, m, h or d (also us, ns)";

impl HumanDuration {
    /// `n` milliseconds.
    pub const fn millis(n: u64) -> Self {
        HumanDuration(Duration::from_millis(n))
    }

    /// `n` seconds.
    pub const fn secs(n: u64) -> Self {
        HumanDuration(Duration::from_secs(n))
    }

    /// `n` minutes.
    pub const fn minutes(n: u64) -> Self {
        HumanDuration(Duration::from_secs(n.saturating_mul(60)))
    }

    /// `n` hours.
    pub const fn hours(n: u64) -> Self {
        HumanDuration(Duration::from_secs(n.saturating_mul(3_600)))
    }

    /// `n` days.
    pub const fn days(n: u64) -> Self {
        HumanDuration(Duration::from_secs(n.saturating_mul(86_400)))
    }

    /// The span as a [`Duration`].
    pub const fn duration(self) -> Duration {
        self.0
    }

    /// `true` for a zero-length span.
    pub const fn is_zero(self) -> bool {
        self.0.is_zero()
    }
}

impl From<Duration> for HumanDuration {
    fn from(d: Duration) -> Self {
        HumanDuration(d)
    }
}

impl From<HumanDuration> for Duration {
    fn from(d: HumanDuration) -> Self {
        d.0
    }
}

fn bare_number_error(input: &str) -> UnitError {
    let n = input.trim();
    UnitError(format!(
        "invalid duration `{n}`: a bare number is ambiguous; add a unit, \
         e.g. `{n}s`, `{n}ms`, `{n}m`, `{n}h` or `{n}d`"
    ))
}

impl FromStr for HumanDuration {
    type Err = UnitError;

    fn from_str(input: &str) -> Result<Self, UnitError> {
        let invalid = |why: &str| UnitError(format!("invalid duration `{input}`: {why}"));
        let mut rest = input.trim();
        if rest.starts_with('-') {
            return Err(negative("duration", input));
        }
        if rest.is_empty() {
            return Err(invalid(&format!(
                "expected a number and a unit ({DURATION_UNIT_LIST}), e.g. `1s` or `7d`"
            )));
        }
        if rest.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bare_number_error(input));
        }
        let mut total: u128 = 0;
        // Index into DURATION_UNITS of the previous part's unit, to insist on
        // largest-first order without repeats (`1h30m`, not `30m1h` or `1m1m`).
        let mut previous: Option<usize> = None;
        while !rest.is_empty() {
            let digits_end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            let (number, after) = rest.split_at(digits_end);
            if number.is_empty() {
                return Err(invalid(&format!(
                    "expected a number before `{rest}`, e.g. `1s` or `1h30m`"
                )));
            }
            let after = after.trim_start();
            let unit_end = after
                .find(|c: char| !c.is_ascii_alphabetic() && c != 'µ')
                .unwrap_or(after.len());
            let (unit, after) = after.split_at(unit_end);
            if unit.is_empty() {
                if after.starts_with('.') {
                    return Err(invalid(
                        "fractions are not supported; use a smaller unit, e.g. `1500ms`",
                    ));
                }
                return Err(invalid(&format!(
                    "`{number}` has no unit; expected {DURATION_UNIT_LIST}"
                )));
            }
            let unit_name = if unit == "µs" { "us" } else { unit };
            let Some(index) = DURATION_UNITS.iter().position(|(n, _)| *n == unit_name) else {
                return Err(invalid(&format!(
                    "unknown unit `{unit}`; expected {DURATION_UNIT_LIST}"
                )));
            };
            if previous.is_some_and(|p| p >= index) {
                return Err(invalid("write each unit once, largest first, e.g. `1h30m`"));
            }
            previous = Some(index);
            let too_large = || invalid("too large");
            let n: u128 = number.parse().map_err(|_| too_large())?;
            total = n
                .checked_mul(DURATION_UNITS[index].1)
                .and_then(|part| total.checked_add(part))
                .ok_or_else(too_large)?;
            rest = after.trim_start();
        }
        let secs = u64::try_from(total / 1_000_000_000).map_err(|_| invalid("too large"))?;
        // The remainder is below 10^9 and so fits in u32.
        let nanos = (total % 1_000_000_000) as u32;
        Ok(HumanDuration(Duration::new(secs, nanos)))
    }
}

impl fmt::Display for HumanDuration {
    /// Writes the span in the largest unit that represents it exactly:
    /// `7d`, `90m`, `1500ms`, `0s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.as_nanos();
        if nanos == 0 {
            return f.write_str("0s");
        }
        for (name, per_unit) in DURATION_UNITS {
            if nanos.is_multiple_of(per_unit) {
                return write!(f, "{}{name}", nanos / per_unit);
            }
        }
        // Unreachable: the last unit is one nanosecond.
        write!(f, "{nanos}ns")
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;

        impl Visitor<'_> for DurationVisitor {
            type Value = HumanDuration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as `500ms`, `1s` or `7d`")
            }

            fn visit_u64<E: de::Error>(self, n: u64) -> Result<HumanDuration, E> {
                Err(E::custom(bare_number_error(&n.to_string())))
            }

            fn visit_i64<E: de::Error>(self, n: i64) -> Result<HumanDuration, E> {
                if n < 0 {
                    return Err(E::custom(negative("duration", &n.to_string())));
                }
                Err(E::custom(bare_number_error(&n.to_string())))
            }

            fn visit_u128<E: de::Error>(self, n: u128) -> Result<HumanDuration, E> {
                Err(E::custom(bare_number_error(&n.to_string())))
            }

            fn visit_i128<E: de::Error>(self, n: i128) -> Result<HumanDuration, E> {
                if n < 0 {
                    return Err(E::custom(negative("duration", &n.to_string())));
                }
                Err(E::custom(bare_number_error(&n.to_string())))
            }

            fn visit_f64<E: de::Error>(self, n: f64) -> Result<HumanDuration, E> {
                if n < 0.0 {
                    return Err(E::custom(negative("duration", &n.to_string())));
                }
                Err(E::custom(format!(
                    "invalid duration `{n}`: a bare number is ambiguous and fractions are not \
                     supported; write e.g. `1500ms`"
                )))
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<HumanDuration, E> {
                s.parse().map_err(E::custom)
            }
        }

        deserializer.deserialize_any(DurationVisitor)
    }
}

/// Deserializes a count such as `server.max_connections`: a whole number
/// from 0 to `u32::MAX`, with messages worded as those of sizes and
/// durations (`invalid number `-1`: must not be negative`) rather than
/// serde's `invalid type: integer `-1`, expected u32`. Range checks beyond
/// the type are the section's `validate`.
pub(crate) fn deserialize_count<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    struct CountVisitor;

    fn whole<E: de::Error>(input: &str) -> E {
        E::custom(format!(
            "invalid number `{input}`: expected a whole number, e.g. `100`"
        ))
    }

    impl Visitor<'_> for CountVisitor {
        type Value = u32;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a whole number such as `100`")
        }

        fn visit_u64<E: de::Error>(self, n: u64) -> Result<u32, E> {
            u32::try_from(n)
                .map_err(|_| E::custom(format!("invalid number `{n}`: too large (at most {})", u32::MAX)))
        }

        fn visit_i64<E: de::Error>(self, n: i64) -> Result<u32, E> {
            match u64::try_from(n) {
                Ok(n) => self.visit_u64(n),
                Err(_) => Err(E::custom(negative("number", &n.to_string()))),
            }
        }

        fn visit_u128<E: de::Error>(self, n: u128) -> Result<u32, E> {
            u32::try_from(n)
                .map_err(|_| E::custom(format!("invalid number `{n}`: too large (at most {})", u32::MAX)))
        }

        fn visit_i128<E: de::Error>(self, n: i128) -> Result<u32, E> {
            match u128::try_from(n) {
                Ok(n) => self.visit_u128(n),
                Err(_) => Err(E::custom(negative("number", &n.to_string()))),
            }
        }

        fn visit_f64<E: de::Error>(self, n: f64) -> Result<u32, E> {
            if n < 0.0 {
                return Err(E::custom(negative("number", &n.to_string())));
            }
            Err(whole(&n.to_string()))
        }

        fn visit_str<E: de::Error>(self, s: &str) -> Result<u32, E> {
            let text = s.trim();
            if text.starts_with('-') {
                return Err(E::custom(negative("number", s)));
            }
            if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
                return Err(whole(s));
            }
            match text.parse::<u64>() {
                Ok(n) => self.visit_u64(n),
                Err(_) => Err(E::custom(format!(
                    "invalid number `{text}`: too large (at most {})",
                    u32::MAX
                ))),
            }
        }
    }

    deserializer.deserialize_any(CountVisitor)
}
