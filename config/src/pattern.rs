//! Name patterns as the configuration writes them (`topics`, `exclude`,
//! route regexes): regexes that match whole names, and a mirror's compiled
//! filter.

use regex::Regex;

/// A mirror's `topics` and `exclude`, compiled: which source topics it
/// copies (and, alike, which groups `lag:` watches).
#[derive(Debug, Clone)]
pub struct TopicFilter {
    include: Regex,
    exclude: Regex,
}

impl TopicFilter {
    /// Compiles `include` (written under the key `include_key`: a mirror's
    /// `topics`, `lag:`'s `groups`) and `exclude` to match whole names. An
    /// error names the key of the one that is wrong:
    /// `Err((include_key, error))` or `Err(("exclude", error))`.
    pub(crate) fn new(
        include_key: &'static str,
        include: &str,
        exclude: &str,
    ) -> Result<TopicFilter, (&'static str, regex::Error)> {
        Ok(TopicFilter {
            include: full_match(include).map_err(|e| (include_key, e))?,
            exclude: full_match(exclude).map_err(|e| ("exclude", e))?,
        })
    }

    /// Whether the mirror copies `topic`: `topics` matches the whole name
    /// and `exclude` does not.
    pub fn matches(&self, topic: &str) -> bool {
        self.include.is_match(topic) && !self.exclude.is_match(topic)
    }
}

/// `pattern` compiled to match only whole names, as `^(?:pattern)$`. An
/// error points into `pattern` as written.
pub(crate) fn full_match(pattern: &str) -> Result<Regex, regex::Error> {
    Regex::new(pattern)?;
    Regex::new(&format!("^{}$", group(pattern)))
}

/// `(?:pattern)`, a group that can be put between other regex text: with a
/// newline before the `)` when the pattern ends in a comment of verbose mode
/// (`(?x)orders # all of them`), which would otherwise swallow the `)`. In
/// verbose mode the newline is ignored; outside it, it is not needed.
pub(crate) fn group(pattern: &str) -> String {
    let plain = format!("(?:{pattern})");
    if regex_syntax::Parser::new().parse(&plain).is_ok() {
        plain
    } else {
        format!("(?:{pattern}\n)")
    }
}
