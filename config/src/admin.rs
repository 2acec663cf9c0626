//! The `admin:` section: the HTTP listener for the status page, `/metrics`,
//! `/healthz`, `/readyz` and the JSON API,
//! and what the metrics are labelled with.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::error::Invalid;
use crate::security::{Secret, ServerTls};
use crate::server::{parse_listen, ServerConfig};

/// Port of the admin listener in examples and messages.
const EXAMPLE_PORT: u16 = 9644;

/// The `admin:` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// IP address and port of the HTTP listener serving `/metrics`
    /// (Prometheus) and `/healthz`, such as `127.0.0.1:9644`. Default
    /// `null`: no admin listener. Must not be `server.listen`.
    pub listen: Option<String>,
    /// Label metrics per partition (with `topic` and `partition`), not
    /// only per topic. Default `true`; switch it off for mirrors of very
    /// many partitions, where one series per partition costs the
    /// monitoring system more than it is worth.
    pub partition_labels: bool,
    /// Label the local spool's metrics per topic. Default `true`; switch
    /// it off with very many local topics: their sizes are then summed
    /// into one series.
    pub topic_labels: bool,
    /// Serve HTTPS with this certificate and key (read again when they
    /// change), as a Kafka listener's `tls:`; with `client_ca_file`,
    /// callers must present a client certificate. Default: plain HTTP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<ServerTls>,
    /// A bearer token every request but `/healthz` and `/readyz` must carry
    /// (`Authorization: Bearer <token>`; Prometheus's
    /// `authorization: { credentials_file: ... }`), from `{ env: NAME }` or
    /// `{ file: /path }` (read again at every request, so it can be
    /// rotated). The status page takes it after `#token=` in its address.
    /// Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: None,
            partition_labels: true,
            topic_labels: true,
            tls: None,
            token: None,
        }
    }
}

impl AdminConfig {
    /// The listen address, parsed; `None` when there is no admin listener.
    /// Valid after [`Config::validate`](crate::Config::validate).
    pub fn listen_addr(&self) -> Result<Option<SocketAddr>, String> {
        self.listen
            .as_deref()
            .map(|listen| parse_listen(listen, EXAMPLE_PORT))
            .transpose()
    }

    /// Checks the listen address, and that it cannot take the Kafka
    /// listener's port. `prefix` is the key path of this section.
    pub(crate) fn validate(&self, prefix: &str, server: &ServerConfig) -> Result<(), Invalid> {
        if let Some(tls) = &self.tls {
            tls.validate(&format!("{prefix}.tls"))?;
        }
        if let Some(token) = &self.token {
            token.validate(&format!("{prefix}.token"))?;
        }
        let path = format!("{prefix}.listen");
        let Some(addr) = self.listen_addr().map_err(|m| Invalid::new(&path, m))? else {
            return Ok(());
        };
        if let Ok(kafka) = server.listen_addr() {
            let same_ip =
                addr.ip() == kafka.ip() || addr.ip().is_unspecified() || kafka.ip().is_unspecified();
            if addr.port() != 0 && addr.port() == kafka.port() && same_ip {
                return Err(Invalid::new(
                    path,
                    format!(
                        "{addr} takes the port of server.listen ({kafka}); give the admin \
                         listener a port of its own, such as {}",
                        SocketAddr::new(addr.ip(), EXAMPLE_PORT)
                    ),
                ));
            }
        }
        Ok(())
    }
}
