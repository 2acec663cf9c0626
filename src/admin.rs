//! The admin HTTP listener (`admin.listen`): the status page (`/`),
//! `/metrics` in Prometheus's text format, `/healthz`, `/readyz`, and the
//! JSON of `/api/v1/mirrors` and `/api/v1/gateway`. The paths and the JSON
//! are documented in `dashboards/README.md`. With `admin.tls` it speaks
//! HTTPS; with `admin.token` every path but `/healthz`, `/readyz` and the
//! (static) status page wants `Authorization: Bearer <token>`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use anyhow::Context;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus::{Encoder, Registry, TextEncoder};
use serde_json::{json, Value};
use strait_config::Secret;
use strait_gateway::auth::tls::Tls;
use strait_mirror::state::{now_ms, Status};
use strait_mirror::status::{Tracker, SAMPLE_INTERVAL, WINDOW};
use strait_upstream::Cluster;
use tokio::sync::watch;

/// The status page: one file, no build step, no CDN.
const STATUS_PAGE: &str = include_str!("status.html");

/// What the admin listener shows, filled in as the parts start.
#[derive(Debug)]
pub struct Admin {
    /// Every metric of the process.
    pub registry: Registry,
    /// Whether a Kafka listener is part of this process (`strait serve`).
    serving: bool,
    gateway: OnceLock<Gateway>,
    mirrors: OnceLock<Arc<Tracker>>,
    groups: OnceLock<Arc<strait_lag::Tracker>>,
}

/// The gateway as `/api/v1/gateway` shows it.
#[derive(Debug)]
pub struct Gateway {
    /// The Kafka listener's address.
    pub listen: SocketAddr,
    /// `routes:` as configured (defaults included).
    pub routes: Value,
    /// `groups:` as configured.
    pub groups: Value,
    /// The clusters the router uses, by name.
    pub upstreams: BTreeMap<String, Cluster>,
}

impl Admin {
    /// An admin view for `strait serve` (`serving`) or `strait mirror`.
    pub fn new(serving: bool) -> Arc<Admin> {
        Arc::new(Admin {
            registry: Registry::new(),
            serving,
            gateway: OnceLock::new(),
            mirrors: OnceLock::new(),
            groups: OnceLock::new(),
        })
    }

    /// The gateway is listening.
    pub fn set_gateway(&self, gateway: Gateway) {
        let _ = self.gateway.set(gateway);
    }

    /// The mirrors started.
    pub fn set_mirrors(&self, tracker: Arc<Tracker>) {
        let _ = self.mirrors.set(tracker);
    }

    /// Consumer groups are watched.
    pub fn set_groups(&self, tracker: Arc<strait_lag::Tracker>) {
        let _ = self.groups.set(tracker);
    }

    /// `Ok` when ready: the Kafka listener is up and every upstream
    /// cluster's metadata has loaded once; else why not.
    fn ready(&self) -> Result<(), String> {
        if self.serving {
            let Some(gateway) = self.gateway.get() else {
                return Err("the Kafka listener is not up yet".to_owned());
            };
            let waiting: Vec<String> = gateway
                .upstreams
                .iter()
                .filter(|(_, c)| c.cached_metadata().is_none())
                .map(|(name, c)| match c.health().last_load {
                    Some(Err(e)) => format!("{name} ({e})"),
                    _ => name.clone(),
                })
                .collect();
            if !waiting.is_empty() {
                return Err(format!(
                    "waiting for the first metadata of cluster {}",
                    waiting.join(", ")
                ));
            }
        }
        if self.mirrors.get().is_none() && !self.serving {
            return Err("the mirrors have not started yet".to_owned());
        }
        Ok(())
    }
}

/// Starts the admin listener when `admin.listen` is set.
pub async fn start_configured(
    config: &strait_config::Config,
    admin: &Arc<Admin>,
    shutdown: &watch::Receiver<bool>,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    let Some(addr) = config.admin.listen_addr().map_err(anyhow::Error::msg)? else {
        return Ok(None);
    };
    let tls = match &config.admin.tls {
        Some(settings) => Some(Tls::new("admin.tls", settings).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let token = config.admin.token.clone().map(Arc::new);
    Ok(Some(
        start(addr, admin.clone(), tls, token, shutdown.clone()).await?,
    ))
}

/// How long a TLS handshake on the admin listener may take.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Binds `addr` (so a taken port fails the start, naming the key) and
/// serves until `shutdown` turns true.
pub async fn start(
    addr: SocketAddr,
    admin: Arc<Admin>,
    tls: Option<Tls>,
    token: Option<Arc<Secret>>,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("admin.listen: cannot listen on {addr}; choose a free port"))?;
    let app = Router::new()
        .route("/", get(status_page))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/api/v1/mirrors", get(mirrors))
        .route("/api/v1/gateway", get(gateway))
        .route("/api/v1/groups", get(groups))
        .route("/api/v1/groups/{cluster}/{group}", get(group))
        .with_state(admin)
        .layer(axum::middleware::from_fn_with_state(token.clone(), authorize));
    tracing::info!(
        listen = %addr,
        tls = tls.is_some(),
        token = token.is_some(),
        "admin listener ready (/, /metrics, /healthz, /readyz, /api/v1/mirrors, /api/v1/gateway, /api/v1/groups)"
    );
    Ok(tokio::spawn(async move {
        let stopped = async move {
            let _ = shutdown.wait_for(|s| *s).await;
        };
        let served = match tls {
            None => axum::serve(listener, app).with_graceful_shutdown(stopped).await,
            Some(tls) => {
                let listener = TlsListener::new(listener, tls);
                axum::serve(listener, app).with_graceful_shutdown(stopped).await
            }
        };
        if let Err(e) = served {
            tracing::error!(error = %e, "admin listener failed");
        }
    }))
}

/// Paths anyone may read: the probes, and the status page (static; its
/// data comes from the API, which wants the token).
fn open_path(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/")
}

/// With `admin.token`, lets through only requests that carry it.
async fn authorize(
    State(token): State<Option<Arc<Secret>>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(token) = token else {
        return next.run(request).await;
    };
    if open_path(request.uri().path()) {
        return next.run(request).await;
    }
    let expected = match strait_upstream::security::read_secret(&token).await {
        Ok(expected) => expected,
        Err(e) => {
            tracing::warn!("admin.token: {e}");
            return (StatusCode::INTERNAL_SERVER_ERROR, format!("admin.token: {e}\n")).into_response();
        }
    };
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if strait_upstream::sasl::scram::same(given.as_bytes(), expected.as_bytes()) {
        next.run(request).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "this admin listener wants `Authorization: Bearer <admin.token>`\n",
        )
            .into_response()
    }
}

/// The admin listener with TLS: handshakes run beside the accept loop (a
/// client that stalls in one holds up no other, and is cut after
/// [`HANDSHAKE_TIMEOUT`]); finished ones are handed to the HTTP server.
struct TlsListener {
    handshaken:
        tokio::sync::mpsc::Receiver<(tokio_rustls::server::TlsStream<tokio::net::TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    fn new(tcp: tokio::net::TcpListener, tls: Tls) -> TlsListener {
        let local = tcp.local_addr().expect("a bound listener has an address");
        let (tx, handshaken) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::warn!(error = %e, "admin listener: accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    return;
                }
                let (tls, tx) = (tls.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "admin listener: TLS handshake failed")
                        }
                        Err(_) => tracing::debug!(%peer, "admin listener: TLS handshake timed out"),
                    }
                });
            }
        });
        TlsListener { handshaken, local }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.handshaken.recv().await {
            Some(accepted) => accepted,
            // The accept task ended: nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

async fn status_page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        STATUS_PAGE,
    )
        .into_response()
}

async fn metrics(State(admin): State<Arc<Admin>>) -> Response {
    let encoder = TextEncoder::new();
    let mut body = Vec::new();
    match encoder.encode(&admin.registry.gather(), &mut body) {
        Ok(()) => ([(header::CONTENT_TYPE, encoder.format_type().to_owned())], body).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics failed: {e}\n"),
        )
            .into_response(),
    }
}

async fn readyz(State(admin): State<Arc<Admin>>) -> Response {
    match admin.ready() {
        Ok(()) => "ready\n".into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")).into_response(),
    }
}

fn json_response(value: Value) -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        value.to_string(),
    )
        .into_response()
}

async fn groups(State(admin): State<Arc<Admin>>) -> Response {
    let tracker = admin.groups.get();
    let views = tracker.map(|t| t.view()).unwrap_or_default();
    let clusters: Vec<Value> = tracker
        .map(|t| t.clusters())
        .unwrap_or_default()
        .into_iter()
        .map(|(name, error, polls_failed, skipped)| {
            json!({ "cluster": name, "error": error, "polls_failed": polls_failed, "groups_left_out": skipped })
        })
        .collect();
    json_response(json!({
        "watching": tracker.is_some(),
        "clusters": clusters,
        "groups": views.iter().map(|g| group_json(g, false)).collect::<Vec<_>>(),
    }))
}

async fn group(State(admin): State<Arc<Admin>>, Path((cluster, group)): Path<(String, String)>) -> Response {
    let views = (admin.groups.get())
        .map(|t| t.view_where(|c, g| c == cluster && g == group))
        .unwrap_or_default();
    match views.first() {
        Some(g) => json_response(group_json(g, true)),
        None => (
            StatusCode::NOT_FOUND,
            format!("no watched group {group:?} on cluster {cluster:?} (see /api/v1/groups)\n"),
        )
            .into_response(),
    }
}

/// A group of `/api/v1/groups`; with its partitions if `partitions`.
fn group_json(g: &strait_lag::GroupView, partitions: bool) -> Value {
    let mut value = json!({
        "cluster": g.cluster,
        "group": g.group,
        "state": g.state,
        "members": g.members,
        "max_lag_records": g.max_lag_records,
        "max_lag_seconds": g.max_lag_seconds,
        "status": g.verdict.level.as_str(),
        "reason": g.verdict.reason,
    });
    if partitions {
        value["partitions"] = g
            .partitions
            .iter()
            .map(|p| {
                let (lag, standing) = match p.standing {
                    strait_lag::Standing::Behind(n) => (Some(n), "behind"),
                    strait_lag::Standing::Gone => (None, "partition gone"),
                    strait_lag::Standing::BeyondEnd => (None, "offset beyond the end"),
                };
                json!({
                    "topic": p.topic,
                    "partition": p.partition,
                    "committed": p.committed,
                    "end": p.end,
                    "lag_records": lag,
                    "lag_seconds": p.lag_seconds,
                    "standing": standing,
                    "status": p.verdict.level.as_str(),
                    "reason": p.verdict.reason,
                })
            })
            .collect();
    }
    value
}

async fn mirrors(State(admin): State<Arc<Admin>>) -> Response {
    json_response(mirrors_json(admin.mirrors.get().map(|t| t.as_ref())))
}

/// `/api/v1/mirrors`.
fn mirrors_json(tracker: Option<&Tracker>) -> Value {
    let views = tracker.map(Tracker::view).unwrap_or_default();
    let mirrors: Vec<Value> = views
        .iter()
        .map(|m| {
            let partitions: Vec<Value> = m
                .partitions
                .iter()
                .map(|p| {
                    let s = &p.state;
                    let (state, error) = match s.status() {
                        Status::Starting => ("starting", None),
                        Status::Running => ("running", None),
                        Status::Retrying(why) => ("retrying", Some(why)),
                        Status::Stopped(why) => ("stopped", Some(why)),
                    };
                    let history: Vec<Value> = p
                        .window
                        .iter()
                        .map(|w| {
                            json!({
                                "t_ms": w.t_ms,
                                "lag_records": w.lag_records,
                                "lag_seconds": w.lag_seconds,
                                "position": w.position,
                            })
                        })
                        .collect();
                    let high_watermark = s.high_watermark();
                    json!({
                        "topic": &*s.source_topic,
                        "target_topic": &*s.target_topic,
                        "partition": s.partition,
                        "status": p.verdict.level.as_str(),
                        "reason": p.verdict.reason,
                        "state": state,
                        "error": error,
                        "lag_records": s.lag_records(),
                        "lag_seconds": s.lag_seconds(),
                        "position": s.acked().map(|(position, _)| position),
                        "high_watermark": (high_watermark >= 0).then_some(high_watermark),
                        "commit_age_seconds": s.commit_age(),
                        "records_per_second": p.rate,
                        "history": history,
                    })
                })
                .collect();
            let lag_seconds = m
                .partitions
                .iter()
                .filter_map(|p| p.state.lag_seconds())
                .reduce(f64::max);
            json!({
                "name": m.name,
                "source": m.source,
                "target": m.target,
                "status": m.level.as_str(),
                "lag_records": m.partitions.iter().map(|p| p.state.lag_records()).sum::<i64>(),
                "lag_seconds": lag_seconds,
                "records_per_second": m.partitions.iter().map(|p| p.rate).sum::<f64>(),
                "member": m.member.as_ref().map(|g| json!({
                    "member_id": g.member_id,
                    "generation": g.generation,
                    "leader": g.leader,
                    "members": (g.leader).then_some(g.members),
                })),
                "partitions": partitions,
            })
        })
        .collect();
    json!({
        "now_ms": now_ms(),
        "window_seconds": SAMPLE_INTERVAL.as_secs() * WINDOW as u64,
        "sample_interval_seconds": SAMPLE_INTERVAL.as_secs(),
        "mirrors": mirrors,
    })
}

async fn gateway(State(admin): State<Arc<Admin>>) -> Response {
    let ready = admin.ready().is_ok();
    let Some(g) = admin.gateway.get() else {
        return json_response(json!({
            "ready": ready,
            "listen": null,
            "routes": [],
            "groups": [],
            "upstreams": [],
        }));
    };
    let upstreams: Vec<Value> = g
        .upstreams
        .iter()
        .map(|(name, cluster)| {
            let health = cluster.health();
            let metadata = health.metadata.as_ref();
            let up = health.last_load.as_ref().map(Result::is_ok);
            let error = health.last_load.and_then(Result::err).map(|e| e.to_string());
            json!({
                "name": name,
                "bootstrap": cluster.options().bootstrap,
                "up": up,
                "metadata_age_seconds": metadata.map(|m| m.fetched_at.elapsed().as_secs_f64()),
                "brokers": metadata.map(|m| m.brokers.len()),
                "topics": metadata.map(|m| m.topics.len()),
                "error": error,
            })
        })
        .collect();
    json_response(json!({
        "ready": ready,
        "listen": g.listen.to_string(),
        "routes": g.routes,
        "groups": g.groups,
        "upstreams": upstreams,
    }))
}
