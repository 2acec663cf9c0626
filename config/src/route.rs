//! The `routes:` and `groups:` sections: where each topic a client names
//! lives (Strait's own spool, or an upstream cluster of `clusters:` under
//! which name), and which coordinator serves each consumer group.
//!
//! Both are lists, read in order; the first entry that matches wins. Each
//! entry matches with exactly one of `prefix` (the name begins with it),
//! `regex` (matched against the whole name, as mirrors' `topics`) or `exact`.
//! A topic route may rename: `strip_prefix` (with `prefix`: clients see
//! `dc1.orders`, the cluster holds `orders`) or `as` (with `exact`: clients
//! see `payments`, the cluster holds `payments-v2`).
//!
//! Without `routes:` every topic is local; without `groups:` Strait
//! coordinates every group. With `routes:`, a topic no route matches does
//! not exist for clients (UNKNOWN_TOPIC_OR_PARTITION).
//!
//! [`Config::validate`](crate::Config::validate) refuses a route that can
//! never match (every name it matches is taken by an earlier route) and two
//! routes that show one upstream topic to clients under two names; see
//! [`validate`].

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::cluster::{ClusterConfig, RESERVED_CLUSTER};
use crate::error::Invalid;
use crate::overlap::{overlap, NameMap, Overlap, Template};
use crate::pattern::{full_match, TopicFilter};
use crate::spool::check_topic_name;

#[cfg(test)]
mod tests;

/// Where a route or a group route points: Strait's own spool, or an
/// upstream cluster by its name under `clusters:`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Destination {
    /// Strait's own spool topics (`to: local`).
    Local,
    /// The upstream cluster of this name.
    Cluster(String),
}

impl Destination {
    pub(crate) fn parse(to: &str) -> Destination {
        if to == RESERVED_CLUSTER {
            Destination::Local
        } else {
            Destination::Cluster(to.to_owned())
        }
    }

    /// The cluster's name, or `None` for the local spool.
    pub fn cluster(&self) -> Option<&str> {
        match self {
            Destination::Local => None,
            Destination::Cluster(name) => Some(name),
        }
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.cluster().unwrap_or(RESERVED_CLUSTER))
    }
}

/// One entry of `routes:`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouteConfig {
    /// Matches topic names that begin with this text (topic name
    /// characters only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Matches topic names this regular expression matches whole
    /// (`legacy-.*` matches `legacy-orders`, not `my-legacy-orders`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    /// Matches this one topic name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    /// Where matching topics live: `local` (Strait's spool) or a cluster
    /// under `clusters:`. Required.
    pub to: String,
    /// With `prefix`: the cluster holds the topic without the prefix
    /// (clients' `dc1.orders` is `orders` there). Default `false`. Only for
    /// routes to a cluster.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub strip_prefix: bool,
    /// With `exact`: the topic's name on the cluster. Only for routes to a
    /// cluster.
    #[serde(rename = "as", skip_serializing_if = "Option::is_none")]
    pub as_name: Option<String>,
}

/// One entry of `groups:`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GroupRouteConfig {
    /// Matches group ids that begin with this text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Matches group ids this regular expression matches whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    /// Matches this one group id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    /// Who coordinates matching groups: `local` (Strait) or a cluster under
    /// `clusters:` (its own coordinator, Strait forwarding the protocol).
    /// Required.
    pub to: String,
}

/// The routes when `routes:` is empty or absent: every topic local.
pub fn default_routes() -> Vec<RouteConfig> {
    vec![RouteConfig {
        regex: Some(".*".to_owned()),
        to: RESERVED_CLUSTER.to_owned(),
        ..RouteConfig::default()
    }]
}

/// The group routes when `groups:` is empty or absent: Strait coordinates
/// every group.
pub fn default_group_routes() -> Vec<GroupRouteConfig> {
    vec![GroupRouteConfig {
        regex: Some(".*".to_owned()),
        to: RESERVED_CLUSTER.to_owned(),
        ..GroupRouteConfig::default()
    }]
}

/// How a route's names are matched.
#[derive(Debug, Clone)]
enum Matcher {
    Prefix(String),
    Regex(Regex),
    Exact(String),
}

impl Matcher {
    fn matches(&self, name: &str) -> bool {
        match self {
            Matcher::Prefix(p) => name.starts_with(p.as_str()),
            Matcher::Regex(r) => r.is_match(name),
            Matcher::Exact(e) => name == e,
        }
    }
}

/// How a route changes names on their way to the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Rename {
    Keep,
    StripPrefix(String),
    To { client: String, upstream: String },
}

/// A checked route.
#[derive(Debug, Clone)]
struct Route {
    matcher: Matcher,
    to: Destination,
    rename: Rename,
}

impl Route {
    /// The name on the destination of `client_topic`, if this route matches
    /// it and can name it there.
    fn upstream_name<'a>(&self, client_topic: &'a str) -> Option<Cow<'a, str>> {
        if !self.matcher.matches(client_topic) {
            return None;
        }
        match &self.rename {
            Rename::Keep => Some(Cow::Borrowed(client_topic)),
            Rename::StripPrefix(p) => {
                let rest = &client_topic[p.len()..];
                check_topic_name(rest).ok().map(|()| Cow::Borrowed(rest))
            }
            Rename::To { upstream, .. } => Some(Cow::Owned(upstream.clone())),
        }
    }

    /// The client's name of `upstream_topic` on this route's destination,
    /// if this route can lead to it.
    fn client_name(&self, upstream_topic: &str) -> Option<String> {
        let name = match &self.rename {
            Rename::Keep => upstream_topic.to_owned(),
            Rename::StripPrefix(p) => format!("{p}{upstream_topic}"),
            Rename::To { client, upstream } if upstream == upstream_topic => client.clone(),
            Rename::To { .. } => return None,
        };
        (self.matcher.matches(&name) && check_topic_name(&name).is_ok()).then_some(name)
    }
}

/// Where a client's topic lives: see [`Routes::resolve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routed<'a> {
    /// The route's position in `routes:`.
    pub index: usize,
    /// Where the topic lives.
    pub to: &'a Destination,
    /// Its name there.
    pub topic: Cow<'a, str>,
}

/// The compiled `routes:`, from [`Config::routes`](crate::Config::routes).
#[derive(Debug, Clone)]
pub struct Routes {
    routes: Vec<Route>,
}

impl Routes {
    /// Where `client_topic` lives and under which name: the first route
    /// that matches it, or `None` (the topic does not exist for clients).
    pub fn resolve<'a>(&'a self, client_topic: &'a str) -> Option<Routed<'a>> {
        // The first route whose matcher matches decides, even when it
        // cannot name the topic (`dc1.` alone under a stripped prefix).
        let (index, route) = self
            .routes
            .iter()
            .enumerate()
            .find(|(_, r)| r.matcher.matches(client_topic))?;
        let topic = route.upstream_name(client_topic)?;
        Some(Routed {
            index,
            to: &route.to,
            topic,
        })
    }

    /// The name clients know `topic` of `destination` by, if any: the name
    /// whose [`resolve`](Routes::resolve) leads back to it. A topic of a
    /// cluster that no route reaches, or that an earlier route hides, has
    /// none and is not shown to clients.
    pub fn client_name(&self, destination: &Destination, topic: &str) -> Option<String> {
        self.routes
            .iter()
            .filter(|r| r.to == *destination)
            .filter_map(|r| r.client_name(topic))
            .find(|name| {
                self.resolve(name)
                    .is_some_and(|routed| routed.to == destination && routed.topic == topic)
            })
    }

    /// Every destination some route points to, each once, local first.
    pub fn destinations(&self) -> Vec<&Destination> {
        let mut all: Vec<&Destination> = self.routes.iter().map(|r| &r.to).collect();
        all.sort();
        all.dedup();
        all
    }
}

/// The compiled `groups:`, from
/// [`Config::group_routes`](crate::Config::group_routes).
#[derive(Debug, Clone)]
pub struct GroupRoutes {
    routes: Vec<(Matcher, Destination)>,
}

impl GroupRoutes {
    /// Who coordinates `group`: the first group route that matches it, or
    /// Strait itself when none does.
    pub fn resolve(&self, group: &str) -> &Destination {
        const LOCAL: &Destination = &Destination::Local;
        self.routes
            .iter()
            .find(|(m, _)| m.matches(group))
            .map_or(LOCAL, |(_, to)| to)
    }

    /// Every cluster some group route delegates to, once each.
    pub fn clusters(&self) -> impl Iterator<Item = &str> {
        let mut clusters: Vec<&str> = self.routes.iter().filter_map(|(_, to)| to.cluster()).collect();
        clusters.sort_unstable();
        clusters.dedup();
        clusters.into_iter()
    }
}

/// The one matcher of an entry, checked: exactly one of `prefix`, `regex`
/// and `exact`. `path` is the entry's key path; `what` is "topic" or
/// "group".
fn matcher(
    prefix: &Option<String>,
    regex: &Option<String>,
    exact: &Option<String>,
    path: &str,
    what: &str,
) -> Result<Matcher, Invalid> {
    let example = if what == "topic" { "orders" } else { "billing-" };
    match (prefix, regex, exact) {
        (Some(p), None, None) => {
            if p.is_empty() {
                return Err(Invalid::new(
                    format!("{path}.prefix"),
                    "must not be empty; to match every name, write `regex: \".*\"`",
                ));
            }
            if what == "topic" {
                if let Some(bad) = p
                    .chars()
                    .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
                {
                    return Err(Invalid::new(
                        format!("{path}.prefix"),
                        format!("`{p}` contains {bad:?}, which no topic name holds"),
                    ));
                }
            }
            Ok(Matcher::Prefix(p.clone()))
        }
        (None, Some(r), None) => full_match(r).map(Matcher::Regex).map_err(|error| {
            let detail = error.to_string();
            let detail = detail.strip_prefix("regex parse error:").unwrap_or(&detail);
            let detail = detail
                .strip_prefix('\n')
                .map_or(format!(" {detail}"), |d| format!("\n{d}"));
            Invalid::new(
                format!("{path}.regex"),
                format!("invalid regular expression:{detail}"),
            )
        }),
        (None, None, Some(e)) => {
            if what == "topic" {
                check_topic_name(e)
                    .map_err(|why| Invalid::new(format!("{path}.exact"), format!("`{e}` {why}")))?;
            } else if e.is_empty() {
                return Err(Invalid::new(format!("{path}.exact"), "must not be empty"));
            }
            Ok(Matcher::Exact(e.clone()))
        }
        (None, None, None) => Err(Invalid::new(
            path,
            format!(
                "says nothing to match: give one of `prefix`, `regex` or `exact`, such as \
                 `{{ prefix: \"{example}\", to: local }}`"
            ),
        )),
        _ => Err(Invalid::new(
            path,
            "gives more than one of `prefix`, `regex` and `exact`; an entry matches one way: \
             split it into two entries",
        )),
    }
}

/// `to`, checked against `clusters`.
fn destination(
    to: &str,
    path: &str,
    clusters: &BTreeMap<String, ClusterConfig>,
) -> Result<Destination, Invalid> {
    let known = || {
        let mut names = vec![format!("`{RESERVED_CLUSTER}`")];
        names.extend(clusters.keys().map(|c| format!("`{c}`")));
        names.join(", ")
    };
    if to.is_empty() {
        return Err(Invalid::new(
            format!("{path}.to"),
            format!("required: where the names go, one of {}", known()),
        ));
    }
    if to != RESERVED_CLUSTER && !clusters.contains_key(to) {
        return Err(Invalid::new(
            format!("{path}.to"),
            format!("unknown cluster `{to}`: one of {}", known()),
        ));
    }
    Ok(Destination::parse(to))
}

impl RouteConfig {
    /// The regular expression of the client names this route matches.
    fn client_pattern(&self) -> String {
        match (&self.prefix, &self.regex, &self.exact) {
            (Some(p), ..) => format!("{}.*", regex::escape(p)),
            (_, Some(r), _) => r.clone(),
            (.., Some(e)) => regex::escape(e),
            _ => unreachable!("a checked route has a matcher"),
        }
    }

    /// The regular expression of the names on the destination this route
    /// can lead to.
    fn upstream_pattern(&self) -> String {
        if self.strip_prefix {
            ".+".to_owned()
        } else if let Some(a) = &self.as_name {
            regex::escape(a)
        } else {
            self.client_pattern()
        }
    }

    fn check(&self, path: &str, clusters: &BTreeMap<String, ClusterConfig>) -> Result<Route, Invalid> {
        let matcher = matcher(&self.prefix, &self.regex, &self.exact, path, "topic")?;
        let to = destination(&self.to, path, clusters)?;
        let rename = match (self.strip_prefix, &self.as_name) {
            (false, None) => Rename::Keep,
            (true, Some(_)) => {
                return Err(Invalid::new(
                    path,
                    "gives both `strip_prefix` and `as`; `strip_prefix` goes with `prefix`, `as` \
                     with `exact`",
                ))
            }
            (true, None) => match &self.prefix {
                Some(p) => Rename::StripPrefix(p.clone()),
                None => {
                    return Err(Invalid::new(
                        format!("{path}.strip_prefix"),
                        "goes with `prefix`: there is no prefix to strip",
                    ))
                }
            },
            (false, Some(a)) => {
                let Some(e) = &self.exact else {
                    return Err(Invalid::new(
                        format!("{path}.as"),
                        "goes with `exact`: it names one topic; to rename many, use `prefix` with \
                         `strip_prefix`",
                    ));
                };
                check_topic_name(a)
                    .map_err(|why| Invalid::new(format!("{path}.as"), format!("`{a}` {why}")))?;
                if a == e {
                    Rename::Keep
                } else {
                    Rename::To {
                        client: e.clone(),
                        upstream: a.clone(),
                    }
                }
            }
        };
        if rename != Rename::Keep && to == Destination::Local {
            return Err(Invalid::new(
                path,
                "renames a local topic; local topics are stored under the names clients use, so \
                 `strip_prefix` and `as` are for routes to a cluster",
            ));
        }
        Ok(Route { matcher, to, rename })
    }
}

/// Checks `routes` (the key path of the section is `prefix`) and compiles
/// them: each entry alone, then each against the earlier ones (a route none
/// of whose names is left after the earlier routes can never match), then
/// pairs of routes to one cluster (two client names for one topic there).
pub(crate) fn validate(
    routes: &[RouteConfig],
    clusters: &BTreeMap<String, ClusterConfig>,
    prefix: &str,
) -> Result<Routes, Invalid> {
    let mut checked = Vec::with_capacity(routes.len());
    for (i, route) in routes.iter().enumerate() {
        checked.push(route.check(&format!("{prefix}[{i}]"), clusters)?);
    }
    let any = TopicFilter::new("regex", ".*", "").expect("`.*` compiles");
    let identity = Template::parse("{topic}", "").expect("the identity rename parses");
    for (i, route) in routes.iter().enumerate().skip(1) {
        let earlier: Vec<String> = routes[..i]
            .iter()
            .map(|r| crate::pattern::group(&r.client_pattern()))
            .collect();
        let earlier = earlier.join("|");
        let mine = route.client_pattern();
        let filter = TopicFilter::new("regex", &mine, &earlier).expect("checked patterns compile");
        let left = NameMap {
            include: &mine,
            exclude: &earlier,
            filter: &filter,
            template: &identity,
        };
        let all = NameMap {
            include: ".*",
            exclude: "",
            filter: &any,
            template: &identity,
        };
        if overlap(left, all) == Overlap::Disjoint {
            return Err(Invalid::new(
                format!("{prefix}[{i}]"),
                "can never match: every topic name it matches is taken by an earlier route (the \
                 first match wins); move it above them, or remove it",
            ));
        }
    }
    for (j, b) in routes.iter().enumerate() {
        for (i, a) in routes.iter().enumerate().take(j) {
            if checked[i].to != checked[j].to
                || checked[i].rename == Rename::Keep && checked[j].rename == Rename::Keep
            {
                continue;
            }
            let (pa, pb) = (a.upstream_pattern(), b.upstream_pattern());
            let (fa, fb) = (
                TopicFilter::new("regex", &pa, "").expect("checked patterns compile"),
                TopicFilter::new("regex", &pb, "").expect("checked patterns compile"),
            );
            let first = NameMap {
                include: &pa,
                exclude: "",
                filter: &fa,
                template: &identity,
            };
            let second = NameMap {
                include: &pb,
                exclude: "",
                filter: &fb,
                template: &identity,
            };
            let cluster = &checked[j].to;
            let message = match overlap(first, second) {
                Overlap::Disjoint => continue,
                Overlap::Example { target, .. } => {
                    let (ca, cb) = (checked[i].client_name(&target), checked[j].client_name(&target));
                    match (ca, cb) {
                        (Some(ca), Some(cb)) if ca != cb => format!(
                            "routes {i} and {j} both lead to topic `{target}` on cluster `{cluster}`, \
                             which clients would see twice, as `{ca}` and as `{cb}` (offsets and \
                             groups would count it twice); narrow one of them"
                        ),
                        _ => continue,
                    }
                }
                Overlap::Unknown(why) => format!(
                    "routes {i} and {j} both lead to cluster `{cluster}` and one renames; Strait \
                     cannot prove that they never lead to the same topic there ({why}); narrow one \
                     of them"
                ),
            };
            return Err(Invalid::new(format!("{prefix}[{j}]"), message));
        }
    }
    Ok(Routes { routes: checked })
}

/// Checks `groups` (the key path of the section is `prefix`) and compiles
/// them.
pub(crate) fn validate_groups(
    groups: &[GroupRouteConfig],
    clusters: &BTreeMap<String, ClusterConfig>,
    prefix: &str,
) -> Result<GroupRoutes, Invalid> {
    let mut routes = Vec::with_capacity(groups.len());
    for (i, g) in groups.iter().enumerate() {
        let path = format!("{prefix}[{i}]");
        let matcher = matcher(&g.prefix, &g.regex, &g.exact, &path, "group")?;
        routes.push((matcher, destination(&g.to, &path, clusters)?));
    }
    Ok(GroupRoutes { routes })
}
