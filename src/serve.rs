//! `strait serve`: run the Kafka broker for local topics.

use std::path::PathBuf;

use anyhow::Context;
use strait_config::Config;
use strait_gateway::launch::Strait;
use tokio::sync::watch;

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
///
/// A start-up failure is one line naming the key and where its value came
/// from: `KEY (from --flag): what is wrong; what to do` for a flag,
/// `FILE: KEY: ...` for a configuration file, `KEY: ...` for a built-in
/// default.
pub fn run(overrides: Overrides) -> anyhow::Result<()> {
    let mut config = match &overrides.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let mut flags: Vec<(&str, &str)> = Vec::new();
    if let Some(listen) = overrides.listen {
        config.server.listen = listen;
        flags.push(("server.listen", "--listen"));
    }
    if let Some(advertised) = overrides.advertised {
        config.server.advertised = Some(advertised);
        flags.push(("server.advertised", "--advertised"));
    }
    if let Some(dir) = overrides.data_dir {
        config.data_dir = dir;
        flags.push(("data_dir", "--data-dir"));
    }
    let file = overrides.config.as_ref().map(|p| p.display().to_string());
    // `message` begins with `key: `; name where the value came from.
    let blame = |key: &str, message: String| -> anyhow::Error {
        if let Some((_, flag)) = flags.iter().find(|(k, _)| *k == key) {
            if let Some(rest) = message.strip_prefix(&format!("{key}: ")) {
                return anyhow::anyhow!("{key} (from {flag}): {rest}");
            }
        }
        match &file {
            Some(file) => anyhow::anyhow!("{file}: {message}"),
            None => anyhow::anyhow!("{message}"),
        }
    };
    config
        .validate()
        .map_err(|invalid| blame(&invalid.path, invalid.to_string()))?;
    // Before any partition is opened.
    let files = crate::limits::raise_open_files();
    crate::limits::log_open_files(files, u64::from(config.server.max_connections));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("strait")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let (stop, stopped) = watch::channel(false);
        let admin = crate::admin::Admin::new(true);
        strait_gateway::metrics::register(&admin.registry)?;
        let listener = crate::admin::start_configured(&config, &admin, &stopped).await?;
        let strait = Strait::start(&config)
            .await
            .map_err(|e| blame(e.key(), e.to_string()))?;
        admin
            .registry
            .register(Box::new(strait.collector(config.admin.topic_labels)))?;
        admin.set_gateway(crate::admin::Gateway {
            listen: strait.local_addr()?,
            routes: serde_json::to_value(config.effective_routes())?,
            groups: serde_json::to_value(config.effective_groups())?,
            upstreams: strait.upstreams().clone(),
        });
        crate::lag::start(&config, strait.broker(), strait.upstreams(), &admin, &stopped)?;
        // The mirrors of the configuration run beside the broker.
        let mut mirrors = crate::mirrors::start(&config, &admin, &stopped)?;
        tokio::spawn(async move {
            shutdown_signal().await;
            stop.send_replace(true);
        });
        let mut until = stopped.clone();
        let served = strait
            .run(async move {
                let _ = until.wait_for(|s| *s).await;
            })
            .await
            .context("serving");
        while mirrors.join_next().await.is_some() {}
        if let Some(listener) = listener {
            let _ = listener.await;
        }
        served
    })
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
pub(crate) async fn shutdown_signal() {
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
