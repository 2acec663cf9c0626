//! Certificates made at test time (rcgen): a CA, a server certificate for
//! 127.0.0.1 and localhost, a client certificate for mTLS, an expired
//! server certificate, and a CA nobody uses. PEM files in a directory, and
//! the same PEM in Java properties form for Kafka's inline PEM stores
//! (`ssl.keystore.key`: an unencrypted key is accepted there, not in a
//! PEM file).

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

/// The PEM of one certificate and its key.
#[derive(Debug, Clone)]
pub struct Pair {
    /// The certificate, PEM.
    pub cert: String,
    /// Its private key, PKCS#8 PEM.
    pub key: String,
    /// Files holding them.
    pub cert_file: PathBuf,
    /// The key's file.
    pub key_file: PathBuf,
}

/// Every certificate of a test run.
#[derive(Debug, Clone)]
pub struct Certs {
    /// The CA's certificate (PEM file).
    pub ca_file: PathBuf,
    /// The CA's certificate, PEM.
    pub ca: String,
    /// A CA that signed nothing here (PEM file).
    pub other_ca_file: PathBuf,
    /// Server certificate for 127.0.0.1 and localhost.
    pub server: Pair,
    /// The same names, expired in 2020.
    pub expired: Pair,
    /// Client certificate, subject `CN=strait-client`.
    pub client: Pair,
}

fn ca(name: &str) -> (CertificateParams, KeyPair, String) {
    let key = KeyPair::generate().expect("a key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key).expect("self-signed CA");
    (params, key, cert.pem())
}

fn leaf(
    dir: &Path,
    name: &str,
    sans: &[&str],
    cn: &str,
    issuer: &Issuer<'_, KeyPair>,
    expired: bool,
) -> Pair {
    let key = KeyPair::generate().expect("a key");
    let mut params =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).expect("leaf params");
    params.distinguished_name.push(DnType::CommonName, cn);
    if expired {
        params.not_before = date_time_ymd(2019, 1, 1);
        params.not_after = date_time_ymd(2020, 1, 1);
    }
    let cert = params.signed_by(&key, issuer).expect("signed leaf").pem();
    let key = key.serialize_pem();
    let cert_file = dir.join(format!("{name}.pem"));
    let key_file = dir.join(format!("{name}-key.pem"));
    fs::write(&cert_file, &cert).unwrap();
    fs::write(&key_file, &key).unwrap();
    Pair {
        cert,
        key,
        cert_file,
        key_file,
    }
}

/// Makes every certificate in `dir`.
pub fn generate(dir: &Path) -> Certs {
    fs::create_dir_all(dir).unwrap();
    let (params, key, ca_pem) = ca("Strait test CA");
    let issuer = Issuer::new(params, key);
    let (_, _, other_pem) = ca("Unrelated CA");
    let ca_file = dir.join("ca.pem");
    fs::write(&ca_file, &ca_pem).unwrap();
    let other_ca_file = dir.join("other-ca.pem");
    fs::write(&other_ca_file, &other_pem).unwrap();
    let names = ["127.0.0.1", "localhost"];
    Certs {
        ca_file,
        ca: ca_pem,
        other_ca_file,
        server: leaf(dir, "server", &names, "kafka", &issuer, false),
        expired: leaf(dir, "expired", &names, "kafka-expired", &issuer, true),
        client: leaf(dir, "client", &[], "strait-client", &issuer, false),
    }
}

/// `pem` as one line of a Java properties file (newlines escaped).
pub fn property(pem: &str) -> String {
    pem.trim_end().replace('\n', "\\n")
}
