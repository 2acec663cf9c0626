//! [`ConfigError`], the one error type of this crate, and [`Invalid`], a
//! semantic problem found by `validate()`.

use std::fmt;

/// Why a configuration could not be loaded.
///
/// Every variant names the file (or the `origin` given to
/// [`Config::parse`](crate::Config::parse)); parse and validation errors also
/// name the key path (`spool.topics.payments.retention_age`), and parse errors
/// carry the line and column when the YAML parser knows them. The messages
/// are complete on their own: they repeat the underlying reason instead of
/// exposing it as a [`source`](std::error::Error::source), so printing just
/// the error shows everything.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read configuration file {file}: {error}")]
    Io {
        /// The file as given.
        file: String,
        /// The underlying I/O error.
        error: std::io::Error,
    },

    /// The file is not valid YAML, or does not match the schema: an unknown
    /// key, a value of the wrong type, a malformed size or duration.
    #[error("{file}{}: {}{message}", Location(*.line, *.column), KeyPrefix(.path))]
    Parse {
        /// The file (or origin) as given.
        file: String,
        /// Dotted key path to the offending value, `.` for the document root.
        path: String,
        /// 1-based line, when known.
        line: Option<usize>,
        /// 1-based column, when known.
        column: Option<usize>,
        /// What is wrong.
        message: String,
    },

    /// The file parsed but a value is out of range or contradicts another.
    #[error("{file}: {invalid}")]
    Invalid {
        /// The file (or origin) as given.
        file: String,
        /// The key path and the problem.
        invalid: Invalid,
    },
}

impl ConfigError {
    /// The key path the error is about (`spool.segment_bytes`), if any.
    pub fn path(&self) -> Option<&str> {
        match self {
            ConfigError::Io { .. } => None,
            ConfigError::Parse { path, .. } => Some(path),
            ConfigError::Invalid { invalid, .. } => Some(&invalid.path),
        }
    }
}

/// A semantic problem in an otherwise well-formed configuration: a value out
/// of range, or two values that contradict each other.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct Invalid {
    /// Dotted key path of the offending value, e.g. `spool.max_batch_bytes`.
    pub path: String,
    /// What is wrong and, where possible, what to write instead.
    pub message: String,
}

impl Invalid {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Invalid {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// Formats `:line:column` (compiler style), or nothing when unknown.
struct Location(Option<usize>, Option<usize>);

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0, self.1) {
            (Some(line), Some(column)) => write!(f, ":{line}:{column}"),
            (Some(line), None) => write!(f, ":{line}"),
            _ => Ok(()),
        }
    }
}

/// Formats `path: `, or nothing for the document root.
struct KeyPrefix<'a>(&'a str);

impl fmt::Display for KeyPrefix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() || self.0 == "." {
            Ok(())
        } else {
            write!(f, "{}: ", self.0)
        }
    }
}
