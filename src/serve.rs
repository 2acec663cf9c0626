//! `strait serve`: run the Kafka broker for local topics.

use std::path::PathBuf;

use anyhow::Context;
use strait_config::Config;
use strait_gateway::launch::Strait;

/// Command-line overrides of the configuration.
#[derive(Debug, Default)]
pub struct Overrides {
    /// `--config FILE`.
    pub config: Option<PathBuf>,
    /// `--listen ADDR`.
    pub listen: Option<String>,
    /// `--advertised HOST:PORT`.
    pub advertised: Option<String>,
    /// `--data-dir DIR`.
    pub data_dir: Option<PathBuf>,
}

/// Loads the configuration (or the embedded default), applies the flags,
/// and serves until SIGTERM or SIGINT.
pub fn run(overrides: Overrides) -> anyhow::Result<()> {
    let mut config = match &overrides.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(listen) = overrides.listen {
        config.server.listen = listen;
    }
    if let Some(advertised) = overrides.advertised {
        config.server.advertised = Some(advertised);
    }
    if let Some(dir) = overrides.data_dir {
        config.data_dir = dir;
    }
    let origin = overrides
        .config
        .as_ref()
        .map_or_else(|| "command line".to_owned(), |p| p.display().to_string());
    config
        .validate()
        .map_err(|invalid| anyhow::anyhow!("{origin}: {invalid}"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("strait")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let strait = Strait::start(&config).await?;
        strait.run(shutdown_signal()).await.context("serving")?;
        Ok(())
    })
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot watch SIGTERM; only Ctrl-C stops Strait");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
    }
}
