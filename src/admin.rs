//! The admin HTTP listener (`admin.listen`): the status page (`/`),
//! `/metrics` in Prometheus's text format, `/healthz`, `/readyz`, and the
//! JSON of `/api/v1/mirrors` and `/api/v1/gateway`. The paths and the JSON
//! are documented in `dashboards/README.md`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use anyhow::Context;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus::{Encoder, Registry, TextEncoder};
use serde_json::{json, Value};
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
    match config.admin.listen_addr().map_err(anyhow::Error::msg)? {
        Some(addr) => Ok(Some(start(addr, admin.clone(), shutdown.clone()).await?)),
        None => Ok(None),
    }
}

/// Binds `addr` (so a taken port fails the start, naming the key) and
/// serves until `shutdown` turns true.
pub async fn start(
    addr: SocketAddr,
    admin: Arc<Admin>,
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
        .with_state(admin);
    tracing::info!(listen = %addr, "admin listener ready (/, /metrics, /healthz, /readyz, /api/v1/mirrors, /api/v1/gateway)");
    Ok(tokio::spawn(async move {
        let stopped = async move {
            let _ = shutdown.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stopped).await {
            tracing::error!(error = %e, "admin listener failed");
        }
    }))
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
