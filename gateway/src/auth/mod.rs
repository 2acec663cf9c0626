//! Who a client is, per listener: TLS termination ([`tls`]), SASL logins
//! checked against the users file ([`sasl`], [`users`]), and the gate
//! every request of a connection passes before the router sees it
//! ([`Login::admit`]), then what its principal may do under `acls:`
//! ([`authorize`]).
//!
//! A listener with `sasl:` answers only ApiVersions, SaslHandshake and
//! SaslAuthenticate until the client has logged in; anything else closes
//! the connection, as Kafka does. A failed login is answered after
//! `failed_authentication_delay` and closes the connection. With a
//! `session_lifetime` a login lasts that long: clients re-authenticate
//! within it (KIP-368), as the same user, and a connection whose login
//! expired is closed at its next request.
//!
//! The principal is `User:<name>`: the SASL user, else the client
//! certificate's name (mTLS), else `User:ANONYMOUS`.

pub mod authorize;
pub mod sasl;
pub mod tls;
pub mod users;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, RequestKind, ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use strait_config::{ListenerConfig, SaslMechanism, ServerSasl};

use crate::codec::Request;
use crate::metrics;
use sasl::{Exchange, Step};
use users::Users;

/// The principal of a connection that has not logged in.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// A listener as the server runs it.
#[derive(Debug)]
pub struct Listener {
    /// Its name (`main` for `server.listen`).
    pub name: String,
    /// The `(host, port)` its clients are told to connect to.
    pub advertised: (String, u16),
    /// TLS termination, if on.
    pub tls: Option<tls::Tls>,
    sasl: Option<ServerSasl>,
    users: Option<Arc<Users>>,
    failed_delay: Duration,
}

impl Listener {
    /// The listener of `config`, advertised as `advertised`; `at` is its
    /// key path (`server`, `server.listeners[0]`) for messages. Reads its
    /// certificate files.
    pub fn new(
        at: &str,
        config: &ListenerConfig,
        advertised: (String, u16),
        users: Option<Arc<Users>>,
        failed_delay: Duration,
    ) -> Result<Listener, String> {
        let tls = match &config.tls {
            Some(settings) => Some(tls::Tls::new(&format!("{at}.tls"), settings)?),
            None => None,
        };
        Ok(Listener {
            name: config.name.clone(),
            advertised,
            tls,
            sasl: config.sasl.clone(),
            users: if config.sasl.is_some() { users } else { None },
            failed_delay,
        })
    }

    /// A plaintext listener without logins (tests, `Strait::bind`).
    pub fn plain(name: &str, advertised: (String, u16)) -> Listener {
        Listener {
            name: name.to_owned(),
            advertised,
            tls: None,
            sasl: None,
            users: None,
            failed_delay: Duration::ZERO,
        }
    }
}

/// What the gate does with a request.
#[derive(Debug)]
pub enum Admission {
    /// On to the router.
    Pass,
    /// A login request, answered here after `delay`; then the connection
    /// closes if `close` says why.
    Answer {
        /// The answer.
        body: Box<ResponseKind>,
        /// How long to hold it (a failed login).
        delay: Duration,
        /// Why the connection closes after it, if it does.
        close: Option<String>,
    },
    /// Close the connection now, for this reason.
    Refuse(String),
}

/// One connection's login state.
#[derive(Debug)]
pub struct Login {
    listener: Arc<Listener>,
    principal: String,
    /// The principal's metric label.
    label: String,
    /// Whether the client has logged in (always, without SASL).
    logged_in: bool,
    /// A SaslHandshake chose this mechanism; SaslAuthenticate comes next.
    exchange: Option<Exchange>,
    /// When the login runs out (`session_lifetime`).
    expires: Option<Instant>,
}

impl Login {
    /// A new connection on `listener`, whose TLS client certificate named
    /// `certificate` (if any).
    pub fn new(listener: Arc<Listener>, certificate: Option<String>) -> Login {
        let principal = certificate.map_or_else(|| ANONYMOUS.to_owned(), |name| format!("User:{name}"));
        let logged_in = listener.sasl.is_none();
        Login {
            label: metrics::principal_label(&principal),
            listener,
            principal,
            logged_in,
            exchange: None,
            expires: None,
        }
    }

    /// The listener the connection came in on.
    pub fn listener(&self) -> &Arc<Listener> {
        &self.listener
    }

    /// The principal: `User:<name>`.
    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// Decides what happens to `request`.
    pub async fn admit(&mut self, request: &Request) -> Admission {
        match &request.body {
            RequestKind::SaslHandshake(handshake) => self.handshake(request.version, &handshake.mechanism),
            RequestKind::SaslAuthenticate(authenticate) => {
                self.authenticate(request.version, authenticate.auth_bytes.clone())
                    .await
            }
            _ if request.api == ApiKey::ApiVersions => self.pass(),
            _ if !self.logged_in => Admission::Refuse(format!(
                "{:?} before logging in: a client of listener `{}` must log in with SASL first \
                 (is it configured for SASL_PLAINTEXT or SASL_SSL?)",
                request.api, self.listener.name
            )),
            _ if self.exchange.is_some() => self.pass(),
            _ => match self.expires {
                Some(at) if Instant::now() >= at => Admission::Refuse(format!(
                    "the login of {} expired and the client did not re-authenticate (KIP-368)",
                    self.principal
                )),
                _ => self.pass(),
            },
        }
    }

    fn pass(&self) -> Admission {
        metrics::principal_request(&self.listener.name, &self.label);
        Admission::Pass
    }

    fn handshake(&mut self, version: i16, mechanism: &str) -> Admission {
        let answer = |code: i16, mechanisms: &[SaslMechanism]| {
            Box::new(ResponseKind::SaslHandshake(
                SaslHandshakeResponse::default()
                    .with_error_code(code)
                    .with_mechanisms(
                        mechanisms
                            .iter()
                            .map(|m| StrBytes::from_static_str(m.name()))
                            .collect(),
                    ),
            ))
        };
        let Some(sasl) = &self.listener.sasl else {
            // As a Kafka listener without SASL answers.
            return Admission::Answer {
                body: answer(ResponseError::IllegalSaslState.code(), &[]),
                delay: Duration::ZERO,
                close: None,
            };
        };
        let offered = &sasl.mechanisms;
        if version == 0 {
            return Admission::Answer {
                body: answer(ResponseError::UnsupportedVersion.code(), offered),
                delay: Duration::ZERO,
                close: Some(
                    "SaslHandshake v0 (SASL messages without Kafka framing) is not supported: \
                     clients since Kafka 1.0 send v1"
                        .to_owned(),
                ),
            };
        }
        if self.exchange.is_some() {
            return Admission::Answer {
                body: answer(ResponseError::IllegalSaslState.code(), offered),
                delay: Duration::ZERO,
                close: Some("a second SaslHandshake before SaslAuthenticate".to_owned()),
            };
        }
        match offered.iter().find(|m| m.name() == mechanism) {
            Some(&chosen) => {
                self.exchange = Some(Exchange::new(chosen));
                Admission::Answer {
                    body: answer(0, offered),
                    delay: Duration::ZERO,
                    close: None,
                }
            }
            None => Admission::Answer {
                body: answer(ResponseError::UnsupportedSaslMechanism.code(), offered),
                delay: Duration::ZERO,
                close: Some(format!(
                    "the client asked for SASL mechanism {mechanism:?}; listener `{}` offers {}",
                    self.listener.name,
                    offered.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ")
                )),
            },
        }
    }

    async fn authenticate(&mut self, version: i16, message: Bytes) -> Admission {
        let (Some(mut exchange), Some(users)) = (self.exchange.take(), self.listener.users.clone()) else {
            return Admission::Answer {
                body: authenticate_answer(ResponseError::IllegalSaslState.code(), None, Bytes::new(), 0),
                delay: Duration::ZERO,
                close: Some("SaslAuthenticate without a SaslHandshake before it".to_owned()),
            };
        };
        let mechanism = exchange.mechanism();
        let users = users.current().await;
        // PLAIN runs PBKDF2: off the async workers.
        let (exchange, step) = tokio::task::spawn_blocking(move || {
            let step = exchange.step(&users, &message);
            (exchange, step)
        })
        .await
        .expect("a SASL step does not panic");
        match step {
            Step::Challenge(challenge) => {
                self.exchange = Some(exchange);
                Admission::Answer {
                    body: authenticate_answer(0, None, challenge.into(), 0),
                    delay: Duration::ZERO,
                    close: None,
                }
            }
            Step::Done { user, last } => {
                let principal = format!("User:{user}");
                if self.logged_in && principal != self.principal {
                    metrics::login(&self.listener.name, mechanism.name(), false);
                    return self.failed(
                        mechanism,
                        format!("re-authenticated as {principal}, not {}", self.principal),
                    );
                }
                metrics::login(&self.listener.name, mechanism.name(), true);
                let lifetime = self
                    .listener
                    .sasl
                    .as_ref()
                    .and_then(|s| s.session_lifetime)
                    .map(|l| l.duration());
                self.expires = lifetime.map(|l| Instant::now() + l);
                if self.logged_in {
                    tracing::debug!(principal = %principal, "re-authenticated");
                } else {
                    tracing::Span::current().record("principal", principal.as_str());
                    tracing::debug!(principal = %principal, mechanism = mechanism.name(), "logged in");
                }
                self.label = metrics::principal_label(&principal);
                self.principal = principal;
                self.logged_in = true;
                let lifetime_ms = if version >= 1 {
                    lifetime.map_or(0, |l| l.as_millis() as i64)
                } else {
                    0
                };
                Admission::Answer {
                    body: authenticate_answer(0, None, last.into(), lifetime_ms),
                    delay: Duration::ZERO,
                    close: None,
                }
            }
            Step::Refused(why) => {
                metrics::login(&self.listener.name, mechanism.name(), false);
                self.failed(mechanism, why)
            }
        }
    }

    fn failed(&self, mechanism: SaslMechanism, why: String) -> Admission {
        let told = format!(
            "Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
        );
        Admission::Answer {
            body: authenticate_answer(
                ResponseError::SaslAuthenticationFailed.code(),
                Some(told),
                Bytes::new(),
                0,
            ),
            delay: self.listener.failed_delay,
            close: Some(format!("failed {mechanism} login: {why}")),
        }
    }
}

fn authenticate_answer(
    code: i16,
    message: Option<String>,
    bytes: Bytes,
    lifetime_ms: i64,
) -> Box<ResponseKind> {
    let mut response = SaslAuthenticateResponse::default()
        .with_error_code(code)
        .with_auth_bytes(bytes)
        .with_session_lifetime_ms(lifetime_ms);
    response.error_message = message.map(StrBytes::from_string);
    Box::new(ResponseKind::SaslAuthenticate(response))
}
