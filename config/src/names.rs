//! Maps keyed by name (`spool.topics`, `clusters`, `mirrors`): a
//! deserializer that refuses a name listed twice, and the rule for the
//! names of clusters and mirrors.

use std::collections::btree_map::{BTreeMap, Entry};
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// Deserializes a map from name to `V`, refusing a name listed twice (YAML
/// parsers otherwise keep the last entry and silently drop the first). The
/// error reads ``duplicate {noun} `name`: {advice}``; `parse_error` in
/// `lib.rs` knows that form and puts the name in the key path. A `null`
/// (a key with nothing under it) is an empty map.
pub(crate) fn unique_map<'de, D, V>(
    deserializer: D,
    noun: &'static str,
    advice: &'static str,
) -> Result<BTreeMap<String, V>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
{
    struct UniqueVisitor<V> {
        noun: &'static str,
        advice: &'static str,
        value: PhantomData<V>,
    }

    impl<'de, V: Deserialize<'de>> Visitor<'de> for UniqueVisitor<V> {
        type Value = BTreeMap<String, V>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a map from {} name to its settings", self.noun)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut entries = BTreeMap::new();
            while let Some((name, value)) = map.next_entry::<String, V>()? {
                match entries.entry(name) {
                    Entry::Vacant(entry) => {
                        entry.insert(value);
                    }
                    Entry::Occupied(entry) => {
                        return Err(de::Error::custom(format!(
                            "duplicate {} `{}`: {}",
                            self.noun,
                            entry.key(),
                            self.advice
                        )));
                    }
                }
            }
            Ok(entries)
        }
    }

    deserializer.deserialize_map(UniqueVisitor {
        noun,
        advice,
        value: PhantomData,
    })
}

/// The nouns `unique_map` is called with, for `parse_error`.
pub(crate) const NOUNS: [&str; 3] = ["topic", "cluster", "mirror"];

/// Checks the name of a cluster or a mirror: one or more ASCII letters,
/// digits, `.`, `_` and `-`. These names become metric label values and
/// consumer group ids.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "contains {bad:?}; only ASCII letters, digits, `.`, `_` and `-` are allowed"
        ));
    }
    Ok(())
}
