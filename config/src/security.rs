//! TLS and SASL settings of Strait as a client: a cluster's `tls:` and
//! `sasl:` under `clusters:`, and the [`Secret`]s they name.
//!
//! Secrets are never written in the configuration itself: a [`Secret`]
//! names an environment variable or a file, which the process reads when
//! it connects (a file is read again on every new connection, so a rotated
//! password or token is picked up without a restart). The configuration,
//! and so `strait check`'s print of it, holds only those names.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::Invalid;
use crate::units::HumanDuration;

/// Where a secret (a password, a token) is read from: `{ env: NAME }` or
/// `{ file: /path }`. A file's content is used without a trailing line
/// end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "SecretInput", into = "SecretKeys")]
pub enum Secret {
    /// The value of this environment variable of the Strait process.
    Env(String),
    /// The content of this file.
    File(PathBuf),
}

/// A [`Secret`] as written: a map with one of its two keys.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretKeys {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    file: Option<PathBuf>,
}

/// What a secret's place may hold when read: the map, or (refused) the
/// secret itself.
#[derive(Deserialize)]
#[serde(untagged)]
enum SecretInput {
    Keys(SecretKeys),
    Inline(serde::de::IgnoredAny),
}

impl TryFrom<SecretInput> for Secret {
    type Error = &'static str;

    fn try_from(input: SecretInput) -> Result<Self, Self::Error> {
        match input {
            SecretInput::Keys(SecretKeys {
                env: Some(env),
                file: None,
            }) => Ok(Secret::Env(env)),
            SecretInput::Keys(SecretKeys {
                env: None,
                file: Some(file),
            }) => Ok(Secret::File(file)),
            _ => Err(
                "write where the secret is, either { env: NAME } or { file: /path }, never the secret itself",
            ),
        }
    }
}

impl From<Secret> for SecretKeys {
    fn from(secret: Secret) -> Self {
        match secret {
            Secret::Env(env) => SecretKeys {
                env: Some(env),
                file: None,
            },
            Secret::File(file) => SecretKeys {
                env: None,
                file: Some(file),
            },
        }
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Secret::Env(name) => write!(f, "environment variable {name}"),
            Secret::File(path) => write!(f, "file {}", path.display()),
        }
    }
}

impl Secret {
    pub(crate) fn validate(&self, path: &str) -> Result<(), Invalid> {
        match self {
            Secret::Env(name) if name.is_empty() || name.contains('=') || name.contains('\0') => Err(
                Invalid::new(path, format!("`{name}` is not an environment variable's name")),
            ),
            Secret::File(file) if file.as_os_str().is_empty() => {
                Err(Invalid::new(path, "the file's path must not be empty"))
            }
            _ => Ok(()),
        }
    }
}

/// A cluster's `tls:`: connect with TLS (Kafka's `SSL` and `SASL_SSL`
/// security protocols).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientTls {
    /// PEM file of the certificate authorities to trust. Default: the
    /// system's roots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// PEM file of Strait's own certificate chain, for clusters that
    /// authenticate clients by certificate (mTLS). Needs `key_file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// PEM file of the private key of `cert_file` (PKCS#8, PKCS#1 or SEC1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// The name sent in SNI and checked against the broker's certificate.
    /// Default: each broker's host as the cluster advertises it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
    /// Whether the broker's certificate must name the host connected to
    /// (Kafka's `ssl.endpoint.identification.algorithm=https`). Default
    /// `true`; with `false` the certificate must still chain to a trusted
    /// authority.
    pub verify_hostname: bool,
}

impl Default for ClientTls {
    fn default() -> Self {
        ClientTls {
            ca_file: None,
            cert_file: None,
            key_file: None,
            server_name: None,
            verify_hostname: true,
        }
    }
}

impl ClientTls {
    pub(crate) fn validate(&self, prefix: &str) -> Result<(), Invalid> {
        for (key, file) in [
            ("ca_file", &self.ca_file),
            ("cert_file", &self.cert_file),
            ("key_file", &self.key_file),
        ] {
            if file.as_ref().is_some_and(|f| f.as_os_str().is_empty()) {
                return Err(Invalid::new(format!("{prefix}.{key}"), "must not be empty"));
            }
        }
        match (&self.cert_file, &self.key_file) {
            (Some(_), None) => Err(Invalid::new(
                format!("{prefix}.key_file"),
                "required with cert_file: the private key of Strait's certificate",
            )),
            (None, Some(_)) => Err(Invalid::new(
                format!("{prefix}.cert_file"),
                "required with key_file: the certificate chain of that key",
            )),
            _ => match &self.server_name {
                Some(name)
                    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) =>
                {
                    Err(Invalid::new(
                        format!("{prefix}.server_name"),
                        format!("`{name}` is not a host name"),
                    ))
                }
                _ => Ok(()),
            },
        }
    }
}

/// A SASL mechanism, named as Kafka names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SaslMechanism {
    /// `PLAIN`: user name and password, in the clear inside the connection
    /// (use it with `tls:`).
    #[serde(rename = "PLAIN")]
    Plain,
    /// `SCRAM-SHA-256` (RFC 7677).
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    /// `SCRAM-SHA-512`.
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
    /// `OAUTHBEARER` (RFC 7628, KIP-255): a bearer token.
    #[serde(rename = "OAUTHBEARER")]
    OAuthBearer,
}

impl SaslMechanism {
    /// The mechanism's name on the wire (`SCRAM-SHA-512`).
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            SaslMechanism::OAuthBearer => "OAUTHBEARER",
        }
    }
}

impl fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A cluster's `sasl:`: how Strait authenticates to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSasl {
    /// `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512` or `OAUTHBEARER`.
    pub mechanism: SaslMechanism,
    /// The user (PLAIN and SCRAM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The user's password (PLAIN and SCRAM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<Secret>,
    /// The bearer token, a JWT (OAUTHBEARER). A file is read again for
    /// every connection, so a token rotated in place is used from then on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
    /// Tokens from an OAuth 2.0 token endpoint instead (OAUTHBEARER): the
    /// client-credentials grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<OAuthClient>,
}

/// The OAuth 2.0 client-credentials grant (RFC 6749 section 4.4) that
/// gets OAUTHBEARER tokens, as Kafka's `sasl.oauthbearer.token.endpoint.url`
/// with `clientId` and `clientSecret` does. A token is asked for when the
/// first connection needs one and again once 80% of its lifetime has
/// passed (Kafka's `sasl.login.refresh.window.factor`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthClient {
    /// The token endpoint, `https://...` (or `http://` on a trusted
    /// network).
    pub token_endpoint: String,
    /// The client id (sent with the secret as HTTP Basic authentication).
    pub client_id: String,
    /// The client secret.
    pub client_secret: Secret,
    /// The scope to ask for, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// CA certificates (PEM) that sign an `https` endpoint's certificate;
    /// default: the system's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
}

impl OAuthClient {
    fn validate(&self, prefix: &str) -> Result<(), Invalid> {
        let endpoint = &self.token_endpoint;
        let rest = endpoint
            .strip_prefix("https://")
            .or_else(|| endpoint.strip_prefix("http://"))
            .ok_or_else(|| {
                Invalid::new(
                    format!("{prefix}.token_endpoint"),
                    format!("`{endpoint}` is not an http:// or https:// address"),
                )
            })?;
        if rest.is_empty() || rest.starts_with('/') {
            return Err(Invalid::new(
                format!("{prefix}.token_endpoint"),
                format!("`{endpoint}` names no host"),
            ));
        }
        if self.client_id.is_empty() || self.client_id.contains(':') {
            return Err(Invalid::new(
                format!("{prefix}.client_id"),
                "must not be empty or hold `:`",
            ));
        }
        self.client_secret.validate(&format!("{prefix}.client_secret"))
    }
}

impl ClientSasl {
    pub(crate) fn validate(&self, prefix: &str) -> Result<(), Invalid> {
        let mechanism = self.mechanism;
        match mechanism {
            SaslMechanism::OAuthBearer => {
                for (key, set) in [
                    ("username", self.username.is_some()),
                    ("password", self.password.is_some()),
                ] {
                    if set {
                        return Err(Invalid::new(
                            format!("{prefix}.{key}"),
                            "OAUTHBEARER authenticates with a token: use `token` or `oauth` instead",
                        ));
                    }
                }
                match (&self.token, &self.oauth) {
                    (Some(token), None) => token.validate(&format!("{prefix}.token")),
                    (None, Some(oauth)) => oauth.validate(&format!("{prefix}.oauth")),
                    (Some(_), Some(_)) => Err(Invalid::new(
                        format!("{prefix}.oauth"),
                        "give `token` or `oauth`, not both",
                    )),
                    (None, None) => Err(Invalid::new(
                        format!("{prefix}.token"),
                        "required for OAUTHBEARER: { file: /path/to/token } or { env: NAME }; \
                         or `oauth:` with a token endpoint",
                    )),
                }
            }
            _ => {
                for (key, set) in [("token", self.token.is_some()), ("oauth", self.oauth.is_some())] {
                    if set {
                        return Err(Invalid::new(
                            format!("{prefix}.{key}"),
                            format!("{mechanism} authenticates with username and password, not a token"),
                        ));
                    }
                }
                match &self.username {
                    None => {
                        return Err(Invalid::new(
                            format!("{prefix}.username"),
                            format!("required for {mechanism}"),
                        ))
                    }
                    Some(user) if user.is_empty() || user.contains('\0') => {
                        return Err(Invalid::new(
                            format!("{prefix}.username"),
                            "must not be empty or hold NUL characters",
                        ))
                    }
                    Some(_) => {}
                }
                let password = self.password.as_ref().ok_or_else(|| {
                    Invalid::new(
                        format!("{prefix}.password"),
                        format!(
                            "required for {mechanism}: {{ env: NAME }} or {{ file: /path }} \
                             (never the password itself)"
                        ),
                    )
                })?;
                password.validate(&format!("{prefix}.password"))
            }
        }
    }
}

/// A listener's `tls:`: Strait terminates TLS for its clients (Kafka's
/// `SSL` and `SASL_SSL` listeners). The certificate and key are read again
/// when either file changes, without dropping connections.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerTls {
    /// PEM file of Strait's certificate chain, its own certificate first.
    pub cert_file: PathBuf,
    /// PEM file of that certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// PEM file of the authorities whose client certificates are accepted
    /// (mTLS, Kafka's `ssl.client.auth`). Without it no client certificate
    /// is asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca_file: Option<PathBuf>,
    /// With `client_ca_file`: `required` (the default: a client without a
    /// trusted certificate is refused in the handshake) or `requested` (a
    /// client without one connects, and is `User:ANONYMOUS` unless it logs
    /// in with SASL).
    #[serde(default)]
    pub client_auth: ClientAuth,
    /// Which name of a client certificate becomes the principal
    /// (`User:<name>`): `cn`, the subject's common name (the default), or
    /// `san`, its first DNS or email subject alternative name.
    #[serde(default)]
    pub principal: CertPrincipal,
}

/// Whether a listener with `client_ca_file` demands a client certificate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// A client must present a certificate signed by `client_ca_file`.
    #[default]
    Required,
    /// A client may present one; without it, it connects anonymously.
    Requested,
}

/// Where a client certificate's principal comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CertPrincipal {
    /// The subject's common name (`CN=alice,O=Example` gives `User:alice`).
    #[default]
    Cn,
    /// The first DNS name or email address among the subject alternative
    /// names.
    San,
}

impl ServerTls {
    pub(crate) fn validate(&self, prefix: &str) -> Result<(), Invalid> {
        for (key, file) in [
            ("cert_file", Some(&self.cert_file)),
            ("key_file", Some(&self.key_file)),
            ("client_ca_file", self.client_ca_file.as_ref()),
        ] {
            if file.is_some_and(|f| f.as_os_str().is_empty()) {
                return Err(Invalid::new(format!("{prefix}.{key}"), "must not be empty"));
            }
        }
        if self.client_ca_file.is_none() && self.client_auth == ClientAuth::Requested {
            return Err(Invalid::new(
                format!("{prefix}.client_auth"),
                "needs client_ca_file: the authorities whose client certificates are trusted",
            ));
        }
        Ok(())
    }
}

/// A listener's `sasl:`: clients log in with one of these mechanisms
/// before any other request (Kafka's `SASL_PLAINTEXT` and `SASL_SSL`
/// listeners), as users of `server.users_file`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSasl {
    /// Mechanisms offered: `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`.
    /// Default: the two SCRAM ones. PLAIN sends the password itself: offer
    /// it on a TLS listener only.
    pub mechanisms: Vec<SaslMechanism>,
    /// How long a login lasts (KIP-368, Kafka's
    /// `connections.max.reauth.ms`): clients that know re-authentication
    /// log in again within it, and a connection whose login has expired is
    /// closed at its next request. Default `null`: a login lasts as long as
    /// the connection.
    pub session_lifetime: Option<HumanDuration>,
}

impl Default for ServerSasl {
    fn default() -> Self {
        ServerSasl {
            mechanisms: vec![SaslMechanism::ScramSha256, SaslMechanism::ScramSha512],
            session_lifetime: None,
        }
    }
}

impl ServerSasl {
    pub(crate) fn validate(&self, prefix: &str) -> Result<(), Invalid> {
        if self.mechanisms.is_empty() {
            return Err(Invalid::new(
                format!("{prefix}.mechanisms"),
                "name at least one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
            ));
        }
        if self.mechanisms.contains(&SaslMechanism::OAuthBearer) {
            return Err(Invalid::new(
                format!("{prefix}.mechanisms"),
                "Strait does not accept OAUTHBEARER logins yet: offer PLAIN or SCRAM",
            ));
        }
        if self
            .session_lifetime
            .is_some_and(|l| l.duration() < std::time::Duration::from_secs(1))
        {
            return Err(Invalid::new(
                format!("{prefix}.session_lifetime"),
                "must be at least 1s",
            ));
        }
        Ok(())
    }
}
