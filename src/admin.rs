//! The admin HTTP listener (`admin.listen`): `/metrics` in Prometheus's
//! text format and `/healthz`.

use std::net::SocketAddr;

use anyhow::Context;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus::{Encoder, Registry, TextEncoder};
use tokio::sync::watch;

/// Starts the admin listener when `admin.listen` is set.
pub async fn start_configured(
    config: &strait_config::Config,
    registry: &Registry,
    shutdown: &watch::Receiver<bool>,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    match config.admin.listen_addr().map_err(anyhow::Error::msg)? {
        Some(addr) => Ok(Some(start(addr, registry.clone(), shutdown.clone()).await?)),
        None => Ok(None),
    }
}

/// Binds `addr` (so a taken port fails the start, naming the key) and
/// serves until `shutdown` turns true.
pub async fn start(
    addr: SocketAddr,
    registry: Registry,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("admin.listen: cannot listen on {addr}; choose a free port"))?;
    let app = Router::new()
        .route("/metrics", get(move || metrics(registry.clone())))
        .route("/healthz", get(|| async { "ok\n" }));
    tracing::info!(listen = %addr, "admin listener ready (/metrics, /healthz)");
    Ok(tokio::spawn(async move {
        let stopped = async move {
            let _ = shutdown.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stopped).await {
            tracing::error!(error = %e, "admin listener failed");
        }
    }))
}

async fn metrics(registry: Registry) -> impl IntoResponse {
    let encoder = TextEncoder::new();
    let mut body = Vec::new();
    match encoder.encode(&registry.gather(), &mut body) {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, encoder.format_type().to_owned())],
            body,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain".to_owned())],
            format!("encoding metrics failed: {e}\n").into_bytes(),
        ),
    }
}
