//! How connections to one cluster are secured: TLS with rustls, then SASL
//! (KIP-152: SaslHandshake v1 and SaslAuthenticate), and re-authentication
//! before the session the broker grants runs out (KIP-368).
//!
//! [`Security`] is built once per cluster from its `tls:` and `sasl:`
//! settings: certificate files are read then, so a bad file fails at
//! start-up. Secrets (passwords, tokens) are read on every authentication,
//! so a rotated file is used by the next connection and the next
//! re-authentication.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{ApiKey, SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::{Request, StrBytes};
use kafka_protocol::ResponseError;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use strait_config::{ClientSasl, ClientTls, SaslMechanism, Secret};
use tokio::net::TcpStream;

use crate::error::{Result, UpstreamError};
use crate::oauth::TokenSource;
use crate::sasl::ClientMechanism;
use crate::stream::Stream;
use crate::versions::Versions;

/// Most SaslAuthenticate round trips of one exchange (SCRAM takes two).
const MAX_STEPS: usize = 4;

/// TLS and SASL of one cluster's connections. Cheap to clone.
#[derive(Clone, Default)]
pub struct Security {
    tls: Option<Tls>,
    sasl: Option<Arc<ClientSasl>>,
    /// Where OAUTHBEARER tokens come from, with `sasl.oauth`.
    oauth: Option<Arc<TokenSource>>,
}

#[derive(Clone)]
struct Tls {
    config: Arc<ClientConfig>,
    /// `server_name`, when set; otherwise each broker's host.
    server_name: Option<ServerName<'static>>,
}

impl fmt::Debug for Security {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Security")
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl.as_ref().map(|s| s.mechanism))
            .finish()
    }
}

impl Security {
    /// The settings of cluster `cluster`: reads its CA, certificate and
    /// key files.
    pub fn new(cluster: &str, tls: Option<&ClientTls>, sasl: Option<&ClientSasl>) -> Result<Security> {
        let settings = |reason: String| UpstreamError::Settings {
            cluster: cluster.to_owned(),
            reason,
        };
        let tls = match tls {
            Some(tls) => Some(Tls {
                config: Arc::new(client_config(tls).map_err(settings)?),
                server_name: match &tls.server_name {
                    Some(name) => Some(
                        ServerName::try_from(name.clone())
                            .map_err(|e| settings(format!("tls.server_name `{name}`: {e}")))?,
                    ),
                    None => None,
                },
            }),
            None => None,
        };
        let oauth = match sasl.and_then(|s| s.oauth.as_ref()) {
            Some(client) => Some(Arc::new(TokenSource::new(client).map_err(settings)?)),
            None => None,
        };
        Ok(Security {
            tls,
            sasl: sasl.cloned().map(Arc::new),
            oauth,
        })
    }

    /// Whether connections use TLS.
    pub fn uses_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The SASL mechanism connections authenticate with, if any.
    pub fn mechanism(&self) -> Option<SaslMechanism> {
        self.sasl.as_ref().map(|s| s.mechanism)
    }

    /// `tcp`, to `addr` (`host:port`), with TLS on it when the cluster
    /// wants TLS.
    pub(crate) async fn open(&self, broker: &str, addr: &str, tcp: TcpStream) -> Result<Stream> {
        let Some(tls) = &self.tls else {
            return Ok(Stream::Plain(tcp));
        };
        let name = match &tls.server_name {
            Some(name) => name.clone(),
            None => {
                let host = host_of(addr);
                ServerName::try_from(host.to_owned())
                    .map_err(|e| refused(broker, format!("`{host}` is not a TLS server name: {e}")))?
            }
        };
        let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
        match connector.connect(name, tcp).await {
            Ok(stream) => Ok(Stream::Tls(Box::new(stream))),
            Err(e) => Err(refused(broker, tls_failure(e))),
        }
    }

    /// A new SASL exchange, its secret read now; `None` without SASL.
    pub(crate) async fn exchange(&self, broker: &str) -> Result<Option<ClientMechanism>> {
        let Some(sasl) = &self.sasl else {
            return Ok(None);
        };
        let secret = match (&sasl.password, &sasl.token, &self.oauth) {
            (Some(secret), ..) | (None, Some(secret), _) => read_secret(secret)
                .await
                .map_err(|reason| refused(broker, reason))?,
            (None, None, Some(oauth)) => oauth.token().await.map_err(|reason| refused(broker, reason))?,
            (None, None, None) => return Err(refused(broker, "no password or token configured".to_owned())),
        };
        let username = sasl.username.as_deref().unwrap_or_default();
        Ok(Some(ClientMechanism::new(sasl.mechanism, username, secret)))
    }
}

/// One request and its answer, on a connection being authenticated.
pub(crate) trait Exchange {
    /// Sends `request` at `version` and waits for its answer.
    async fn round_trip<R: Request + std::any::Any>(
        &mut self,
        request: &R,
        version: i16,
    ) -> Result<R::Response>;
}

/// Authenticates with `mechanism` over `exchange`; the session lifetime
/// the broker granted, if it set one (KIP-368).
pub(crate) async fn authenticate(
    exchange: &mut impl Exchange,
    broker: &str,
    versions: &Versions,
    mut mechanism: ClientMechanism,
    name: SaslMechanism,
) -> Result<Option<Duration>> {
    let handshake_version = version(broker, versions, ApiKey::SaslHandshake)?;
    let handshake = exchange
        .round_trip(
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(name.name())),
            handshake_version,
        )
        .await?;
    match ResponseError::try_from_code(handshake.error_code) {
        None => {}
        Some(ResponseError::UnsupportedSaslMechanism) => {
            let offered: Vec<&str> = handshake.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(refused(
                broker,
                format!(
                    "the listener does not offer {name}; it offers {}",
                    if offered.is_empty() {
                        "none".to_owned()
                    } else {
                        offered.join(", ")
                    }
                ),
            ));
        }
        Some(ResponseError::IllegalSaslState) => return Err(refused(
            broker,
            "the listener does not speak SASL (is it a PLAINTEXT or SSL listener? remove `sasl:` or use the \
                 SASL port)"
                .to_owned(),
        )),
        Some(code) => return Err(refused(broker, format!("SaslHandshake failed: {code:?}"))),
    }
    let auth_version = version(broker, versions, ApiKey::SaslAuthenticate)?;
    let mut message = mechanism.first();
    for _ in 0..MAX_STEPS {
        let answer = exchange
            .round_trip(
                &SaslAuthenticateRequest::default().with_auth_bytes(message.into()),
                auth_version,
            )
            .await?;
        if let Some(code) = ResponseError::try_from_code(answer.error_code) {
            let said = answer
                .error_message
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_default();
            let token = mechanism.refusal().map(|r| format!(" ({r})")).unwrap_or_default();
            return Err(refused(
                broker,
                format!("{name} authentication failed: {code:?}: {said}{token}"),
            ));
        }
        match mechanism.answer(&answer.auth_bytes) {
            Ok(Some(next)) => message = next,
            Ok(None) => {
                let lifetime = u64::try_from(answer.session_lifetime_ms).unwrap_or(0);
                return Ok((lifetime > 0).then(|| Duration::from_millis(lifetime)));
            }
            Err(reason) => return Err(refused(broker, format!("{name}: {reason}"))),
        }
    }
    Err(refused(
        broker,
        format!("{name} took more than {MAX_STEPS} round trips"),
    ))
}

/// When to re-authenticate a session of `lifetime`: at 80 to 90 percent of
/// it (jittered, so a cluster's connections do not all go at once), as
/// Kafka's clients do.
pub(crate) fn reauthenticate_after(lifetime: Duration) -> Duration {
    lifetime.mul_f64(0.8 + 0.1 * fastrand::f64())
}

fn version(broker: &str, versions: &Versions, api: ApiKey) -> Result<i16> {
    versions.get(api).map_err(|detail| UpstreamError::Unsupported {
        broker: broker.to_owned(),
        api,
        detail,
    })
}

fn refused(broker: &str, reason: String) -> UpstreamError {
    UpstreamError::Security {
        broker: broker.to_owned(),
        reason,
    }
}

/// The host of `host:port` (an IPv6 address without its brackets).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// A TLS handshake's failure, with what usually causes it.
fn tls_failure(e: std::io::Error) -> String {
    let hint = match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)) => {
            " (the broker's certificate is not signed by an authority Strait trusts: set tls.ca_file)"
        }
        Some(rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        )) => " (the broker's certificate has expired)",
        Some(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        )) => " (the broker's certificate does not name the host connected to: set tls.server_name)",
        Some(rustls::Error::InvalidMessage(_)) => {
            " (does this listener speak TLS? it answered something else)"
        }
        _ if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            " (the broker closed the connection: does this listener speak TLS, or want a client certificate?)"
        }
        _ => "",
    };
    format!("TLS handshake failed: {e}{hint}")
}

/// Reads a secret now: an environment variable or a file, without a
/// trailing line end.
pub async fn read_secret(secret: &Secret) -> std::result::Result<String, String> {
    let value = match secret {
        Secret::Env(name) => {
            std::env::var(name).map_err(|e| format!("cannot read the secret in {secret}: {e}"))?
        }
        Secret::File(path) => tokio::fs::read_to_string(path)
            .await
            .map_err(|e| format!("cannot read the secret in {secret}: {e}"))?,
    };
    let value = value.trim_end_matches(['\r', '\n']);
    if value.is_empty() {
        return Err(format!("the secret in {secret} is empty"));
    }
    Ok(value.to_owned())
}

/// The crypto rustls uses, client and server side: ring rather than
/// aws-lc-rs (no C toolchain run at build time beyond ring's own, and the
/// same crypto the SCRAM code uses). rustls marks ring's provider
/// deprecated for its lack of post-quantum key exchange, which Kafka's JVM
/// brokers do not offer either.
pub fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    #[allow(deprecated)]
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates of a PEM file; `key` (the setting that names it) starts
/// the message of an error.
pub fn read_certificates(
    path: &Path,
    key: &str,
) -> std::result::Result<Vec<CertificateDer<'static>>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{key} {}: {e}", path.display()))?;
    parse_certificates(&bytes, &format!("{key} {}", path.display()))
}

/// The certificates of PEM text; an error begins with `what`.
pub fn parse_certificates(
    pem: &[u8],
    what: &str,
) -> std::result::Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| format!("{what}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{what} holds no certificate"));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn read_private_key(path: &Path, key: &str) -> std::result::Result<PrivateKeyDer<'static>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{key} {}: {e}", path.display()))?;
    parse_private_key(&bytes, &format!("{key} {}", path.display()))
}

/// The private key of PEM text; an error begins with `what`.
pub fn parse_private_key(pem: &[u8], what: &str) -> std::result::Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| format!("{what}: {e}"))
}

/// rustls' client settings for `tls`.
pub(crate) fn client_config(tls: &ClientTls) -> std::result::Result<ClientConfig, String> {
    let mut roots = RootCertStore::empty();
    match &tls.ca_file {
        Some(path) => {
            for cert in read_certificates(path, "tls.ca_file")? {
                roots
                    .add(cert)
                    .map_err(|e| format!("tls.ca_file {}: {e}", path.display()))?;
            }
            if roots.is_empty() {
                return Err(format!("tls.ca_file {} holds no certificate", path.display()));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err("tls: no trusted roots found on this system; set tls.ca_file".to_owned());
            }
        }
    }
    let provider = crypto_provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?;
    let roots = Arc::new(roots);
    let builder = if tls.verify_hostname {
        builder.with_root_certificates(roots)
    } else {
        let inner = WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| format!("tls: {e}"))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyName(inner)))
    };
    match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            let chain = read_certificates(cert, "tls.cert_file")?;
            let key = read_private_key(key, "tls.key_file")?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("tls.key_file: does not go with tls.cert_file: {e}"))
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}

/// `verify_hostname: false`: the chain must still lead to a trusted root;
/// only the name is not checked.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
