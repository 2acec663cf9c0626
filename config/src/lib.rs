//! Strait's configuration: typed YAML, plain data plus validation.
//!
//! A configuration file is read once at start-up by [`Config::load`], which
//! parses it ([`Config::parse`]) and checks it ([`Config::validate`]). The
//! crate does no I/O beyond reading that file and knows nothing of sockets,
//! tokio or the spool: other crates take the plain values it produces.
//!
//! Modules:
//!
//! - [`units`]: [`ByteSize`] (`64KiB`, `1GiB`, `10MB`) and [`HumanDuration`]
//!   (`500ms`, `1h30m`, `7d`), the human-friendly quantities used in values.
//! - [`server`]: the `server:` section (the Kafka listeners and their limits)
//!   and the `broker:` section (auto-creation, consumer group timeouts).
//! - [`spool`]: the `spool:` section: storage defaults for local topics,
//!   per-topic overrides, and [`SpoolConfig::for_topic`], which resolves
//!   them into a [`TopicSpoolConfig`] of plain values.
//! - [`cluster`]: the `clusters:` section: upstream Kafka clusters by name
//!   ([`ClusterConfig`]: bootstrap brokers, client id, timeouts, TLS and
//!   SASL).
//! - [`security`]: TLS and SASL settings, as a client of upstream clusters
//!   ([`ClientTls`], [`ClientSasl`]) and as a server of Strait's own
//!   clients ([`ServerTls`], [`ServerSasl`]), and the [`Secret`]s they name
//!   (environment variables or files, never the secret itself).
//! - [`acl`]: the `acls:` section: Kafka's ACL model ([`AclConfig`]),
//!   compiled into [`Acls`], which answers whether a principal may do an
//!   operation on a resource.
//! - [`users`]: the users file ([`UsersFile`]): who may log in with SASL,
//!   with salted and hashed SCRAM credentials.
//! - [`admin`]: the `admin:` section: the HTTP listener for `/metrics` and
//!   `/healthz` ([`AdminConfig`]).
//! - [`instances`]: the `instances:` section: several `strait serve`
//!   processes as one logical cluster ([`InstancesConfig`]), meeting in a
//!   group on one of `clusters`.
//! - [`lag`]: the `lag:` section: which consumer groups Strait watches,
//!   on which clusters, how often ([`LagConfig`]).
//! - [`mirror`]: the `mirrors:` section: what to copy between clusters
//!   ([`MirrorConfig`]), with the runtime helpers
//!   [`MirrorConfig::topic_filter`], [`MirrorConfig::target_topic`] and
//!   [`MirrorConfig::group_id`], and the checks that keep mirrors from
//!   writing one target topic twice or copying their own copies.
//! - [`route`]: the `routes:` and `groups:` sections: where each topic
//!   lives (local or an upstream cluster, under which name) and who
//!   coordinates each group, compiled into [`Routes`] and [`GroupRoutes`],
//!   and the checks that refuse routes that never match or show one
//!   upstream topic under two names.
//! - `pattern`: regexes that match whole names, and a mirror's compiled
//!   [`TopicFilter`]; `overlap`: what `strait check` proves about names
//!   two mirrors or routes can write; `names`: the checks of names.
//! - [`error`]: [`ConfigError`]; every error names the file and the key path
//!   (`spool.topics.payments.retention_age`), parse errors also the line
//!   and column.
//!
//! Conventions every section follows, so adding one is a matter of a module
//! with a struct and a `validate` function called from [`Config::validate`]:
//!
//! - `#[serde(default, deny_unknown_fields)]`: every key is optional, and a
//!   misspelt key is an error rather than a silently ignored setting.
//! - Defaults live in the section's `Default` impl, and each field's `///`
//!   comment states its default and bounds.
//! - Units are in the values (`segment_age: 7d`), not in key names.
//! - `validate` reports a problem as an [`Invalid`] carrying the dotted key
//!   path of the offending value.
//! - Maps keyed by name (`spool.topics`, `clusters`, `mirrors`) are
//!   `BTreeMap`s, so the effective configuration prints in a stable order,
//!   and refuse a name listed twice.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub mod acl;
pub mod admin;
pub mod cluster;
pub mod error;
pub mod instances;
pub mod lag;
pub mod mirror;
mod names;
mod overlap;
mod pattern;
pub mod route;
pub mod security;
pub mod server;
pub mod spool;
pub mod units;
pub mod users;

pub use acl::{AclConfig, Acls, NameMatch, Operation, ResourceType};
pub use admin::AdminConfig;
pub use cluster::ClusterConfig;
pub use error::{ConfigError, Invalid};
pub use instances::InstancesConfig;
pub use lag::LagConfig;
pub use mirror::{MirrorConfig, OnLostRecords, StartPosition};
pub use pattern::TopicFilter;
pub use route::{Destination, GroupRouteConfig, GroupRoutes, RouteConfig, Routed, Routes};
pub use security::{
    CertPrincipal, ClientAuth, ClientSasl, ClientTls, OAuthClient, SaslMechanism, Secret, ServerSasl,
    ServerTls,
};
pub use server::{BrokerConfig, ListenerConfig, ServerConfig, MAIN_LISTENER};
pub use spool::{Durability, SpoolConfig, TopicOverrides, TopicSpoolConfig};
pub use units::{ByteSize, HumanDuration, UnitError};
pub use users::{ScramCredential, User, UsersFile};

#[cfg(test)]
mod tests;

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Directory holding the local spool topics. A relative path is taken
    /// from the working directory of the `strait` process. Default `./data`.
    #[serde(serialize_with = "serialize_path")]
    pub data_dir: PathBuf,
    /// The client-facing listener and its limits. See [`ServerConfig`].
    pub server: ServerConfig,
    /// Broker behaviour for local topics: auto-creation, consumer group
    /// timeouts. See [`BrokerConfig`].
    pub broker: BrokerConfig,
    /// Storage settings for local topics. See [`SpoolConfig`].
    pub spool: SpoolConfig,
    /// Upstream Kafka clusters, by name: one or more of ASCII letters,
    /// digits, `.`, `_` and `-`, and not `local` (Strait's own spool).
    /// Default: none. See [`ClusterConfig`].
    #[serde(deserialize_with = "unique_clusters")]
    pub clusters: BTreeMap<String, ClusterConfig>,
    /// The HTTP listener for metrics and health checks. See
    /// [`AdminConfig`].
    pub admin: AdminConfig,
    /// Mirrors from one cluster of `clusters` to another, by name (the
    /// same characters as cluster names). Default: none. See
    /// [`MirrorConfig`].
    #[serde(deserialize_with = "unique_mirrors")]
    pub mirrors: BTreeMap<String, MirrorConfig>,
    /// Where each topic clients name lives, first match wins. Default (an
    /// empty list): every topic local. See [`RouteConfig`] and the
    /// [`route`] module.
    pub routes: Vec<RouteConfig>,
    /// Who coordinates each consumer group, first match wins. Default (an
    /// empty list): Strait. See [`GroupRouteConfig`].
    pub groups: Vec<GroupRouteConfig>,
    /// Who may do what (Kafka's ACLs). Default `null`: every client may do
    /// everything; with a list, only what a rule allows and none denies.
    /// See [`AclConfig`] and the [`acl`] module.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acls: Option<Vec<AclConfig>>,
    /// Several `strait serve` processes as one logical cluster: where they
    /// meet. Default `null`: one instance. See [`InstancesConfig`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instances: Option<InstancesConfig>,
    /// The consumer groups whose lag Strait exports, on its spool and on
    /// every cluster under `clusters`. Default: every group, every 5 s.
    /// See [`LagConfig`].
    pub lag: LagConfig,
}

fn unique_clusters<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, ClusterConfig>, D::Error> {
    names::unique_map(deserializer, "cluster", "list each cluster once")
}

fn unique_mirrors<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, MirrorConfig>, D::Error> {
    names::unique_map(deserializer, "mirror", "list each mirror once")
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("./data"),
            server: ServerConfig::default(),
            broker: BrokerConfig::default(),
            spool: SpoolConfig::default(),
            clusters: BTreeMap::new(),
            admin: AdminConfig::default(),
            mirrors: BTreeMap::new(),
            routes: Vec::new(),
            groups: Vec::new(),
            acls: None,
            instances: None,
            lag: LagConfig::default(),
        }
    }
}

/// Writes a path as a string, replacing any bytes that are not UTF-8, so
/// serializing a [`Config`] cannot fail. (Paths read from YAML are always
/// UTF-8.)
fn serialize_path<S: Serializer>(path: &Path, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&path.to_string_lossy())
}

impl Config {
    /// Reads, parses and validates the configuration file at `path`.
    /// Errors name the file as given.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Io {
            file: file.clone(),
            error,
        })?;
        Config::parse(&text, &file)
    }

    /// Parses and validates configuration text. `origin` names the source
    /// in error messages, normally the file name.
    ///
    /// An empty document (or one holding only comments) is the default
    /// configuration. The result holds the values as written; see
    /// [`Config::effective`] for the values with defaults written out.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let deserializer = serde_yaml::Deserializer::from_str(text);
        let config: Config =
            serde_path_to_error::deserialize(deserializer).map_err(|error| parse_error(origin, error))?;
        config.validate().map_err(|invalid| ConfigError::Invalid {
            file: origin.to_owned(),
            invalid,
        })?;
        Ok(config)
    }

    /// Checks values that parse but make no sense: sizes and intervals out
    /// of range, a batch limit larger than a segment, flush settings that
    /// would have no effect, invalid topic names, mirrors naming unknown
    /// clusters or able to write one target topic twice. Reports the first
    /// problem found, in the order of the sections.
    pub fn validate(&self) -> Result<(), Invalid> {
        if self.data_dir.as_os_str().is_empty() {
            return Err(Invalid::new("data_dir", "must not be empty"));
        }
        self.server.validate("server")?;
        self.broker.validate("broker")?;
        self.spool.validate("spool")?;
        for (name, cluster) in &self.clusters {
            cluster.validate(name, &format!("clusters.{name}"))?;
        }
        self.admin.validate("admin", &self.server)?;
        mirror::validate(&self.mirrors, &self.clusters, "mirrors")?;
        if let Some(acls) = &self.acls {
            acl::validate(acls)?;
        }
        route::validate(&self.routes, &self.clusters, "routes")?;
        route::validate_groups(&self.groups, &self.clusters, "groups")?;
        self.lag.validate("lag", &self.clusters)?;
        if let Some(instances) = &self.instances {
            instances.validate(
                "instances",
                &self.clusters,
                &self.effective_routes(),
                !self.routes.is_empty(),
                &self.groups,
            )?;
        }
        Ok(())
    }

    /// The compiled `routes:` ([`route::default_routes`] when empty).
    ///
    /// # Panics
    ///
    /// If the routes do not validate, which [`Config::validate`] rules out.
    pub fn routes(&self) -> Routes {
        let routes = self.effective_routes();
        route::validate(&routes, &self.clusters, "routes")
            .unwrap_or_else(|e| panic!("routes were not validated: {e}"))
    }

    /// The compiled `acls:`; `None` when absent (everything allowed).
    ///
    /// # Panics
    ///
    /// If the rules do not validate, which [`Config::validate`] rules out.
    pub fn acls(&self) -> Option<Acls> {
        self.acls.as_deref().map(acl::compile)
    }

    /// The compiled `groups:` ([`route::default_group_routes`] when empty).
    ///
    /// # Panics
    ///
    /// If the group routes do not validate, which [`Config::validate`]
    /// rules out.
    pub fn group_routes(&self) -> GroupRoutes {
        let groups = self.effective_groups();
        route::validate_groups(&groups, &self.clusters, "groups")
            .unwrap_or_else(|e| panic!("group routes were not validated: {e}"))
    }

    /// `routes:` as given, or the default when empty.
    pub fn effective_routes(&self) -> Vec<RouteConfig> {
        if self.routes.is_empty() {
            route::default_routes()
        } else {
            self.routes.clone()
        }
    }

    /// `groups:` as given, or the default when empty: Strait coordinates
    /// every group, or with `instances:` the cluster where they meet (its
    /// coordinator keeps each group's generation, which every instance
    /// then serves).
    pub fn effective_groups(&self) -> Vec<GroupRouteConfig> {
        match (&self.instances, self.groups.is_empty()) {
            (_, false) => self.groups.clone(),
            (Some(instances), true) => vec![GroupRouteConfig {
                regex: Some(".*".to_owned()),
                to: instances.cluster.clone(),
                ..GroupRouteConfig::default()
            }],
            (None, true) => route::default_group_routes(),
        }
    }

    /// This configuration with every default written out, as Strait will
    /// use it. Per-topic overrides stay as written (absent keys inherit);
    /// [`SpoolConfig::for_topic`] resolves them. A mirror's `group` is
    /// filled in with its name when unset.
    pub fn effective(&self) -> Config {
        Config {
            data_dir: self.data_dir.clone(),
            server: self.server.clone(),
            broker: self.broker.clone(),
            spool: self.spool.effective(),
            clusters: self.clusters.clone(),
            admin: self.admin.clone(),
            mirrors: self
                .mirrors
                .iter()
                .map(|(name, mirror)| (name.clone(), mirror.effective(name)))
                .collect(),
            routes: self.effective_routes(),
            groups: self.effective_groups(),
            acls: self.acls.clone(),
            instances: self.instances.clone(),
            lag: self.lag.clone(),
        }
    }

    /// The [effective](Config::effective) configuration as YAML, with sizes
    /// and durations in their human form (`1GiB`, `7d`). Parsing the output
    /// gives back `self.effective()`.
    pub fn to_yaml(&self) -> String {
        // Every value in a Config is a string, number, boolean, null,
        // sequence, map or unit enum variant, which serde_yaml always
        // serializes; paths are written lossily (see `serialize_path`).
        serde_yaml::to_string(&self.effective()).expect("a Config always serializes to YAML")
    }
}

/// Turns a serde error into a [`ConfigError::Parse`] with the key path,
/// the location, and the bare message (serde_yaml's own message repeats its
/// path and location, which the error formats itself).
fn parse_error(origin: &str, error: serde_path_to_error::Error<serde_yaml::Error>) -> ConfigError {
    let mut path = error.path().to_string();
    let inner = error.into_inner();
    let location = inner.location();
    let mut message = inner.to_string();
    if let Some(loc) = &location {
        let suffix = format!(" at line {} column {}", loc.line(), loc.column());
        if let Some(at) = message.find(&suffix) {
            message.replace_range(at..at + suffix.len(), "");
        }
    }
    // serde_yaml prefixes its own path, which is the enclosing map of the
    // key path we have (or the same path).
    if let Some((prefix, rest)) = message.split_once(": ") {
        if path == prefix || path.starts_with(&format!("{prefix}.")) {
            message = rest.to_owned();
        }
    }
    // For a duplicate key serde reports the path of the enclosing map; name
    // the key itself, so the path reads `spool.segment_bytes`.
    let duplicate = std::iter::once("field")
        .chain(names::NOUNS)
        .find_map(|noun| quoted_after(&message, &format!("duplicate {noun} `")));
    if let Some(key) = duplicate {
        path = if path == "." {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        };
    }
    ConfigError::Parse {
        file: origin.to_owned(),
        path,
        line: location.as_ref().map(serde_yaml::Location::line),
        column: location.as_ref().map(serde_yaml::Location::column),
        message,
    }
}

/// The name in `message` between `start` (which ends in a backquote) and
/// the next backquote.
fn quoted_after<'a>(message: &'a str, start: &str) -> Option<&'a str> {
    let rest = message.strip_prefix(start)?;
    rest.split_once('`').map(|(key, _)| key)
}
