//! `strait mirror --config FILE`: run the mirrors of a configuration (and
//! its admin listener) until SIGTERM or SIGINT.

use std::path::Path;

use anyhow::Context;
use strait_config::Config;
use tokio::sync::watch;

/// Loads `config`, starts its mirrors and serves `/metrics` on
/// `admin.listen` if set. On SIGTERM each mirror writes what it fetched,
/// commits, and the process exits.
pub fn run(path: &Path) -> anyhow::Result<()> {
    let config = Config::load(path)?;
    if config.mirrors.is_empty() {
        anyhow::bail!(
            "{}: mirrors: none configured, so `strait mirror` has nothing to run; \
             see config/examples/mirror.yaml",
            path.display()
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("strait-mirror")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let (stop, stopped) = watch::channel(false);
        let admin = crate::admin::Admin::new(false);
        strait_upstream::metrics::register(&admin.registry)?;
        let listener = crate::admin::start_configured(&config, &admin, &stopped).await?;
        let mut mirrors = crate::mirrors::start(&config, &admin, &stopped)?;
        tracing::info!(mirrors = config.mirrors.len(), "Strait is mirroring");
        crate::serve::shutdown_signal().await;
        stop.send_replace(true);
        while mirrors.join_next().await.is_some() {}
        if let Some(listener) = listener {
            let _ = listener.await;
        }
        Ok(())
    })
}
