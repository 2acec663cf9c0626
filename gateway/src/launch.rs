//! Assembling a running Strait from a configuration: data directory, spool
//! I/O pool, topics (with crash recovery), group coordinator, broker and
//! listener; and taking it down again in order.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use strait_config::Config;
use strait_spool::pool::PoolOptions;
use strait_spool::IoPool;
use tokio::net::TcpListener;

use crate::broker::{Broker, Identity};
use crate::error::TopicError;
use crate::group::{GroupConfig, GroupCoordinator, GroupError};
use crate::server::{serve, ServerOptions};
use crate::topics::Topics;

/// Why Strait could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration's listener or advertised address is unusable.
    #[error("{0}")]
    Config(String),
    /// The data directory cannot be used.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Opening the local topics failed.
    #[error("opening local topics: {0}")]
    Topics(#[from] TopicError),
    /// Opening the group coordinator failed.
    #[error("opening consumer groups: {0}")]
    Groups(#[from] GroupError),
    /// The listen address is taken or not ours.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// A Strait that has opened its data and bound its listener, ready to serve.
#[derive(Debug)]
pub struct Strait {
    broker: Arc<Broker>,
    pool: Arc<IoPool>,
    listener: TcpListener,
    options: ServerOptions,
}

impl Strait {
    /// Opens the data directory (running crash recovery on every partition)
    /// and binds the listener.
    pub async fn start(config: &Config) -> Result<Strait, StartError> {
        let data_dir = config.data_dir.clone();
        std::fs::create_dir_all(&data_dir).map_err(|source| StartError::DataDir {
            path: data_dir.clone(),
            source,
        })?;
        let cluster_id = cluster_id(&data_dir).map_err(|source| StartError::DataDir {
            path: data_dir.clone(),
            source,
        })?;
        let addr = config.server.listen_addr().map_err(StartError::Config)?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Bind { addr, source })?;
        let bound = listener
            .local_addr()
            .map_err(|source| StartError::Bind { addr, source })?;
        let (host, mut port) = config.server.advertised_host_port().map_err(StartError::Config)?;
        if config.server.advertised.is_none() {
            // Listening on port 0 picks a free port: advertise that one.
            port = bound.port();
        }
        let pool = Arc::new(IoPool::new(PoolOptions::default()));
        let topics = {
            let (dir, spool, pool) = (data_dir.clone(), config.spool.clone(), Arc::clone(&pool));
            tokio::task::spawn_blocking(move || Topics::open(&dir, spool, pool))
                .await
                .expect("opening topics does not panic")?
        };
        let groups = {
            let group_config = GroupConfig {
                min_session_timeout: config.broker.group_min_session_timeout.duration(),
                max_session_timeout: config.broker.group_max_session_timeout.duration(),
                initial_rebalance_delay: config.broker.group_initial_rebalance_delay.duration(),
                offsets_retention: config.broker.offsets_retention.map(|r| r.duration()),
                ..GroupConfig::new(data_dir.join("groups"))
            };
            let pool = Arc::clone(&pool);
            // Replaying the offsets log is blocking work.
            tokio::task::spawn_blocking(move || GroupCoordinator::open(group_config, pool))
                .await
                .expect("opening the group coordinator does not panic")?
        };
        let identity = Identity {
            host,
            port,
            cluster_id,
        };
        let broker = {
            // Rebuilding producer state reads every partition's batch
            // headers: blocking work.
            let (config, dir) = (config.clone(), data_dir.clone());
            tokio::task::spawn_blocking(move || Broker::new(&config, identity, topics, groups, &dir))
                .await
                .expect("assembling the broker does not panic")
                .map_err(|source| StartError::DataDir {
                    path: data_dir.clone(),
                    source,
                })?
        };
        let options = ServerOptions {
            max_connections: config.server.max_connections as usize,
            max_frame_bytes: config.server.max_frame_bytes.bytes() as usize,
            idle_timeout: config.server.idle_timeout.duration(),
            request_timeout: config.server.request_timeout.duration(),
            shutdown_grace: config.server.shutdown_grace.duration(),
        };
        tracing::info!(listen = %bound, data_dir = %data_dir.display(), topics = broker.topics().all().len(), "Strait is ready");
        Ok(Strait {
            broker: Arc::new(broker),
            pool,
            listener,
            options,
        })
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` resolves, then finishes requests in flight,
    /// syncs every partition and persists its recovery point.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        let Strait {
            broker,
            pool,
            listener,
            options,
        } = self;
        serve(listener, Arc::clone(&broker), options, shutdown).await?;
        // Every connection task has ended, so this is the last handle on
        // the broker: close every partition (sync, persist the recovery
        // point), then stop the I/O threads.
        let broker =
            Arc::try_unwrap(broker).map_err(|_| std::io::Error::other("the broker is still in use"))?;
        let closed = tokio::task::spawn_blocking(move || -> Result<(), String> {
            let mut first = Ok(());
            for topic in broker.topics().all() {
                for p in &topic.partitions {
                    if let Err(e) = p.log.close() {
                        tracing::error!(partition = %p.log.dir().display(), error = %e, "closing failed");
                        first = first.and(Err(e.to_string()));
                    }
                }
            }
            drop(broker);
            if let Ok(pool) = Arc::try_unwrap(pool) {
                pool.shutdown().map_err(|e| e.to_string())?;
            }
            first
        })
        .await
        .expect("closing the spool does not panic");
        match closed {
            Ok(()) => {
                tracing::info!("all partitions synced; bye");
                Ok(())
            }
            Err(e) => Err(std::io::Error::other(format!("closing the spool: {e}"))),
        }
    }
}

/// The cluster id, created on first start and kept in the data directory.
fn cluster_id(data_dir: &Path) -> std::io::Result<String> {
    let path = data_dir.join("cluster-id");
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_owned()),
        // Empty: a crash while it was first written. Make it again.
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let id = uuid::Uuid::new_v4().simple().to_string();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{id}\n"))?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(data_dir)?.sync_all()?;
    Ok(id)
}
