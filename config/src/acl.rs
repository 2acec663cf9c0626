//! The `acls:` section: who may do what, in Kafka's model (KIP-11).
//!
//! A rule names a principal (`User:alice`, or `User:*` for everyone), the
//! operations it allows or denies, and one resource: a topic, a group or a
//! transactional id matched `exact`, by `prefix` or by `regex` (whole
//! names, as clients name them), or the cluster.
//!
//! ```yaml
//! acls:
//!   - { principal: "User:alice", allow: [Read, Describe], topic: { prefix: "orders." } }
//!   - { principal: "User:alice", allow: [Read], group: { exact: billing } }
//!   - { principal: "User:*", deny: [Write], topic: { exact: audit } }
//!   - { principal: "User:admin", allow: [All], cluster: true }
//! ```
//!
//! With `acls:` present, whatever no rule allows is denied, and a deny
//! beats any allow. As in Kafka, allowing Read, Write, Delete or Alter
//! also allows Describe, and AlterConfigs also allows DescribeConfigs; a
//! deny means only the operations it names (and `All`, every one).
//! [`Acls`] is the compiled form the gateway asks.

use std::fmt;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::error::Invalid;
use crate::pattern::full_match;

/// An operation, named as Kafka names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Operation {
    /// Every operation.
    All,
    /// Fetch, commit offsets, join a group.
    Read,
    /// Produce.
    Write,
    /// Create topics.
    Create,
    /// Delete topics, records or groups.
    Delete,
    /// Add partitions.
    Alter,
    /// See a topic, group or the cluster (Metadata, ListOffsets, ...).
    Describe,
    /// Read configs.
    DescribeConfigs,
    /// Change configs.
    AlterConfigs,
    /// Produce idempotently (on the cluster; Write on a topic implies it).
    IdempotentWrite,
}

impl Operation {
    /// Whether a rule that allows `self` allows `wanted`.
    fn allows(self, wanted: Operation) -> bool {
        use Operation::*;
        self == All
            || self == wanted
            || wanted == Describe && matches!(self, Read | Write | Delete | Alter)
            || wanted == DescribeConfigs && self == AlterConfigs
    }

    /// Whether a rule that denies `self` denies `wanted`.
    fn denies(self, wanted: Operation) -> bool {
        self == Operation::All || self == wanted
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// What kind of resource a rule is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResourceType {
    /// A topic, by the name clients use.
    Topic,
    /// A consumer group.
    Group,
    /// A transactional id.
    TransactionalId,
    /// The cluster (one resource).
    Cluster,
}

/// How a rule matches a resource's name: exactly one of the three.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NameMatch {
    /// This one name (`*` matches every name, as Kafka's wildcard).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    /// Names that begin with this text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Names this regular expression matches whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
}

/// One entry of `acls:`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AclConfig {
    /// `User:<name>`, or `User:*` for every principal (`User:ANONYMOUS`
    /// is a client that did not log in). Required.
    pub principal: String,
    /// The operations this rule allows.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<Operation>,
    /// The operations this rule denies (a deny beats every allow).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<Operation>,
    /// Topics, by the names clients use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic: Option<NameMatch>,
    /// Consumer groups.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<NameMatch>,
    /// Transactional ids.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transactional_id: Option<NameMatch>,
    /// The cluster (`cluster: true`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cluster: bool,
}

/// A compiled name matcher.
#[derive(Debug, Clone)]
enum Names {
    Any,
    Exact(String),
    Prefix(String),
    Regex(Regex),
}

impl Names {
    fn matches(&self, name: &str) -> bool {
        match self {
            Names::Any => true,
            Names::Exact(exact) => exact == name,
            Names::Prefix(prefix) => name.starts_with(prefix.as_str()),
            Names::Regex(regex) => regex.is_match(name),
        }
    }
}

/// A compiled rule.
#[derive(Debug, Clone)]
struct Rule {
    /// `None`: every principal.
    principal: Option<String>,
    allow: Vec<Operation>,
    deny: Vec<Operation>,
    resource: ResourceType,
    names: Names,
}

/// The compiled `acls:`: what [`Acls::allows`] answers from. Without
/// `acls:` there is none and everything is allowed.
#[derive(Debug, Clone, Default)]
pub struct Acls {
    rules: Vec<Rule>,
}

impl Acls {
    /// Whether `principal` may do `operation` on the resource of `kind`
    /// named `name` (the cluster's name is ignored): some rule allows it and
    /// none denies it.
    pub fn allows(&self, principal: &str, kind: ResourceType, name: &str, operation: Operation) -> bool {
        let mut allowed = false;
        for rule in self.rules.iter().filter(|r| {
            r.resource == kind
                && r.principal.as_deref().is_none_or(|p| p == principal)
                && r.names.matches(name)
        }) {
            if rule.deny.iter().any(|d| d.denies(operation)) {
                return false;
            }
            allowed |= rule.allow.iter().any(|a| a.allows(operation));
        }
        allowed
    }

    /// Whether `principal` may do `operation` on some resource of `kind`
    /// (for Kafka's "Write on any topic implies IdempotentWrite", KIP-679):
    /// a rule allows it on some names, and no rule denies it on all names.
    pub fn allows_any(&self, principal: &str, kind: ResourceType, operation: Operation) -> bool {
        let applies = |r: &&Rule| r.resource == kind && r.principal.as_deref().is_none_or(|p| p == principal);
        let denied_everywhere = self
            .rules
            .iter()
            .filter(applies)
            .any(|r| matches!(r.names, Names::Any) && r.deny.iter().any(|d| d.denies(operation)));
        !denied_everywhere
            && self
                .rules
                .iter()
                .filter(applies)
                .any(|r| r.allow.iter().any(|a| a.allows(operation)))
    }

    /// The principals the rules name (for bounding metric labels).
    pub fn principals(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().filter_map(|r| r.principal.as_deref())
    }
}

/// Compiles `acls` (checked by [`validate`]).
pub fn compile(acls: &[AclConfig]) -> Acls {
    Acls {
        rules: acls
            .iter()
            .map(|acl| compile_one(acl).expect("validated ACLs compile"))
            .collect(),
    }
}

fn compile_one(acl: &AclConfig) -> Result<Rule, (&'static str, String)> {
    let principal = match acl.principal.strip_prefix("User:") {
        Some("*") => None,
        Some(name) if !name.is_empty() => Some(acl.principal.clone()),
        _ => {
            return Err((
                "principal",
                format!(
                    "`{}` is not a principal: write User:<name>, or User:* for everyone",
                    acl.principal
                ),
            ))
        }
    };
    if acl.allow.is_empty() == acl.deny.is_empty() {
        return Err((
            "allow",
            "give the operations this rule allows (allow: [...]) or denies (deny: [...]), one of them"
                .to_owned(),
        ));
    }
    let resources = [
        ("topic", ResourceType::Topic, acl.topic.as_ref()),
        ("group", ResourceType::Group, acl.group.as_ref()),
        (
            "transactional_id",
            ResourceType::TransactionalId,
            acl.transactional_id.as_ref(),
        ),
    ];
    let mut named = resources.iter().filter(|(_, _, m)| m.is_some());
    let (resource, names) =
        match (named.next(), named.next(), acl.cluster) {
            (None, None, true) => (ResourceType::Cluster, Names::Any),
            (Some(&(key, kind, Some(matcher))), None, false) => (kind, compile_names(key, matcher)?),
            _ => return Err((
                "topic",
                "name one resource: topic, group or transactional_id (each with exact, prefix or regex), \
                 or cluster: true"
                    .to_owned(),
            )),
        };
    Ok(Rule {
        principal,
        allow: acl.allow.clone(),
        deny: acl.deny.clone(),
        resource,
        names,
    })
}

fn compile_names(key: &'static str, matcher: &NameMatch) -> Result<Names, (&'static str, String)> {
    match (&matcher.exact, &matcher.prefix, &matcher.regex) {
        (Some(exact), None, None) if exact == "*" => Ok(Names::Any),
        (Some(exact), None, None) if !exact.is_empty() => Ok(Names::Exact(exact.clone())),
        (None, Some(prefix), None) if prefix.is_empty() => Ok(Names::Any),
        (None, Some(prefix), None) => Ok(Names::Prefix(prefix.clone())),
        (None, None, Some(regex)) => full_match(regex)
            .map(Names::Regex)
            .map_err(|e| (key, format!("`{regex}` is not a regular expression: {e}"))),
        _ => Err((
            key,
            "match names with exactly one of exact (`*` for all), prefix or regex".to_owned(),
        )),
    }
}

/// Checks every rule; an error names its index and key (`acls[2].principal`).
pub(crate) fn validate(acls: &[AclConfig]) -> Result<(), Invalid> {
    for (i, acl) in acls.iter().enumerate() {
        compile_one(acl).map_err(|(key, message)| Invalid::new(format!("acls[{i}].{key}"), message))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use Operation::*;
    use ResourceType::*;

    fn acls(yaml: &str) -> Acls {
        let parsed: Vec<AclConfig> = serde_yaml::from_str(yaml).unwrap();
        validate(&parsed).unwrap();
        compile(&parsed)
    }

    #[test]
    fn allow_deny_and_implied_operations() {
        let a = acls(
            r#"
- { principal: "User:alice", allow: [Read], topic: { prefix: "orders." } }
- { principal: "User:alice", allow: [Read], group: { regex: "alice-.*" } }
- { principal: "User:*", deny: [Read], topic: { exact: orders.secret } }
- { principal: "User:bob", allow: [Write, AlterConfigs], topic: { exact: "*" } }
- { principal: "User:admin", allow: [All], cluster: true }
"#,
        );
        assert!(a.allows("User:alice", Topic, "orders.eu", Read));
        assert!(
            a.allows("User:alice", Topic, "orders.eu", Describe),
            "Read implies Describe"
        );
        assert!(!a.allows("User:alice", Topic, "orders.eu", Write));
        assert!(
            !a.allows("User:alice", Topic, "payments", Read),
            "nothing allows it"
        );
        assert!(!a.allows("User:alice", Topic, "orders.secret", Read), "deny wins");
        assert!(
            a.allows("User:alice", Topic, "orders.secret", Describe),
            "a deny means only what it names"
        );
        assert!(a.allows("User:alice", Group, "alice-1", Read));
        assert!(
            !a.allows("User:alice", Group, "my-alice-1", Read),
            "regexes match whole names"
        );
        assert!(a.allows("User:bob", Topic, "anything", Write));
        assert!(a.allows("User:bob", Topic, "anything", DescribeConfigs));
        assert!(!a.allows("User:bob", Topic, "orders.secret", Read));
        assert!(a.allows("User:admin", Cluster, "", Create));
        assert!(!a.allows("User:alice", Cluster, "", Create));
        assert!(a.allows_any("User:bob", Topic, Write));
        assert!(!a.allows_any("User:alice", Topic, Write));
        assert_eq!(a.principals().count(), 4);
    }

    #[test]
    fn bad_rules_name_their_key() {
        for (yaml, key, message) in [
            (
                r#"[{ principal: alice, allow: [Read], topic: { exact: t } }]"#,
                "acls[0].principal",
                "User:<name>",
            ),
            (
                r#"[{ principal: "User:a", topic: { exact: t } }]"#,
                "acls[0].allow",
                "one of them",
            ),
            (
                r#"[{ principal: "User:a", allow: [Read], deny: [Write], topic: { exact: t } }]"#,
                "acls[0].allow",
                "one of them",
            ),
            (
                r#"[{ principal: "User:a", allow: [Read] }]"#,
                "acls[0].topic",
                "name one resource",
            ),
            (
                r#"[{ principal: "User:a", allow: [Read], topic: { exact: t }, cluster: true }]"#,
                "acls[0].topic",
                "name one resource",
            ),
            (
                r#"[{ principal: "User:a", allow: [Read], group: { exact: g, prefix: p } }]"#,
                "acls[0].group",
                "exactly one of",
            ),
            (
                r#"[{ principal: "User:a", allow: [Read], topic: { regex: "(" } }]"#,
                "acls[0].topic",
                "not a regular",
            ),
        ] {
            let parsed: Vec<AclConfig> = serde_yaml::from_str(yaml).unwrap();
            let e = validate(&parsed).unwrap_err();
            let text = e.to_string();
            assert!(text.contains(key) && text.contains(message), "{yaml}: {text}");
        }
        assert!(
            serde_yaml::from_str::<Vec<AclConfig>>(r#"[{ principal: "User:a", allow: [Fly] }]"#).is_err()
        );
    }
}
