//! TLS termination for a listener: rustls with the certificate and key of
//! its `tls:` files, read again when either changes (connections already
//! open keep the session they have; new handshakes get the new
//! certificate), and client certificates checked against `client_ca_file`
//! when mTLS is on.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::CertificateDer;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use strait_config::{CertPrincipal, ClientAuth, ServerTls};
use strait_upstream::security::{
    crypto_provider, parse_certificates, parse_private_key, read_certificates, read_private_key,
};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// How often the certificate and key files are looked at.
const RELOAD_CHECK: Duration = Duration::from_secs(1);

/// A listener's TLS.
#[derive(Clone)]
pub struct Tls {
    acceptor: TlsAcceptor,
    principal: CertPrincipal,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("principal", &self.principal)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// Reads the files of `settings` (`at` is the setting's key path, for
    /// messages) and starts watching the certificate and key for changes.
    pub fn new(at: &str, settings: &ServerTls) -> Result<Tls, String> {
        let provider = crypto_provider();
        let chain = read_certificates(&settings.cert_file, &format!("{at}.cert_file"))?;
        let key = read_private_key(&settings.key_file, &format!("{at}.key_file"))?;
        let certified = certified(&provider, chain, key).map_err(|e| format!("{at}: {e}"))?;
        let resolver = Arc::new(Reloading {
            current: RwLock::new(Arc::new(certified)),
        });
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("{at}: {e}"))?;
        let builder = match &settings.client_ca_file {
            Some(path) => {
                let mut roots = RootCertStore::empty();
                for cert in read_certificates(path, &format!("{at}.client_ca_file"))? {
                    roots
                        .add(cert)
                        .map_err(|e| format!("{at}.client_ca_file {}: {e}", path.display()))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider));
                let verifier = match settings.client_auth {
                    ClientAuth::Required => verifier,
                    ClientAuth::Requested => verifier.allow_unauthenticated(),
                }
                .build()
                .map_err(|e| format!("{at}.client_ca_file {}: {e}", path.display()))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let config = builder.with_cert_resolver(Arc::clone(&resolver) as Arc<dyn ResolvesServerCert>);
        // (`strait check` reads the files without a runtime: no watching.)
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(watch(
                resolver,
                provider,
                settings.cert_file.clone(),
                settings.key_file.clone(),
                at.to_owned(),
            ));
        }
        Ok(Tls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            principal: settings.principal,
        })
    }

    /// The TLS handshake on an accepted connection.
    pub async fn accept(&self, tcp: TcpStream) -> std::io::Result<TlsStream<TcpStream>> {
        self.acceptor.accept(tcp).await
    }

    /// The principal's name that a verified client certificate carries, if
    /// the client presented one.
    pub fn principal(&self, stream: &TlsStream<TcpStream>) -> Option<String> {
        let cert = stream.get_ref().1.peer_certificates()?.first()?;
        name_of(cert, self.principal)
    }
}

/// The principal's name in `cert`: its subject's common name, or its first
/// DNS or email subject alternative name.
pub fn name_of(cert: &CertificateDer<'_>, from: CertPrincipal) -> Option<String> {
    use x509_parser::extensions::GeneralName;
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    match from {
        CertPrincipal::Cn => parsed
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .map(str::to_owned),
        CertPrincipal::San => parsed
            .subject_alternative_name()
            .ok()??
            .value
            .general_names
            .iter()
            .find_map(|name| match name {
                GeneralName::DNSName(n) | GeneralName::RFC822Name(n) => Some((*n).to_owned()),
                _ => None,
            }),
    }
}

fn certified(
    provider: &CryptoProvider,
    chain: Vec<CertificateDer<'static>>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
) -> Result<CertifiedKey, String> {
    let certified = CertifiedKey::from_der(chain, key, provider)
        .map_err(|e| format!("the key does not go with the certificate: {e}"))?;
    Ok(certified)
}

/// The certificate handshakes get: the last that was read whole.
#[derive(Debug)]
struct Reloading {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.current.read().expect("certificate lock")))
    }
}

/// Reads the certificate and key again whenever either file's modification
/// time changes. A pair that does not load (a file half written, a key of
/// another certificate) is logged once and tried again at the next change;
/// the certificate before stays in use.
async fn watch(
    resolver: Arc<Reloading>,
    provider: Arc<CryptoProvider>,
    cert: PathBuf,
    key: PathBuf,
    at: String,
) {
    let stamp =
        |path: PathBuf| async move { tokio::fs::metadata(path).await.and_then(|m| m.modified()).ok() };
    let mut seen: (Option<SystemTime>, Option<SystemTime>) =
        (stamp(cert.clone()).await, stamp(key.clone()).await);
    let mut tick = tokio::time::interval(RELOAD_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if Arc::strong_count(&resolver) == 1 {
            // The listener is gone.
            return;
        }
        let now = (stamp(cert.clone()).await, stamp(key.clone()).await);
        if now == seen {
            continue;
        }
        seen = now;
        let loaded = async {
            let chain = tokio::fs::read(&cert)
                .await
                .map_err(|e| format!("{at}.cert_file {}: {e}", cert.display()))?;
            let chain = parse_certificates(&chain, &format!("{at}.cert_file {}", cert.display()))?;
            let pem = tokio::fs::read(&key)
                .await
                .map_err(|e| format!("{at}.key_file {}: {e}", key.display()))?;
            let private = parse_private_key(&pem, &format!("{at}.key_file {}", key.display()))?;
            certified(&provider, chain, private)
        }
        .await;
        match loaded {
            Ok(certified) => {
                *resolver.current.write().expect("certificate lock") = Arc::new(certified);
                tracing::info!(listener = %at, cert = %cert.display(), "TLS certificate read again");
            }
            Err(e) => tracing::warn!(
                listener = %at,
                "the TLS certificate changed but cannot be used; keeping the one before: {e}"
            ),
        }
    }
}
