//! Assembling a running Strait from a configuration: data directory, spool
//! I/O pool, topics (with crash recovery), group coordinator, broker and
//! listener; and taking it down again in order.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use strait_config::Config;
use strait_spool::pool::PoolOptions;
use strait_spool::IoPool;
use strait_upstream::{Cluster, ClusterOptions, ConnectOptions, Security};
use tokio::net::{TcpListener, TcpSocket};

/// Connections the kernel queues before Strait accepts them.
const LISTEN_BACKLOG: u32 = 1024;

use crate::auth::authorize::Authorizer;
use crate::auth::users::Users;
use crate::auth::Listener;
use crate::broker::{Broker, Identity};
use crate::error::TopicError;
use crate::group::{GroupConfig, GroupCoordinator, GroupError};
use crate::instances::{self, Instance, Instances};
use crate::router::{Router, UpstreamProducers};
use crate::server::{serve, ServerOptions};
use crate::topics::{in_parallel, Topics};

/// Why Strait could not start.
///
/// Every message is one line that begins with the configuration key to
/// change ([`StartError::key`]: `server.listen`, `data_dir`), quotes the OS
/// error once and says what to do. Like the other errors of the workspace
/// it exposes no [`source`](std::error::Error::source): the message already
/// holds the cause, and a chain printed in full must not repeat it.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A configuration value is unusable (normally caught earlier by
    /// [`Config::validate`]).
    #[error("{key}: {message}")]
    Config {
        /// The dotted key path.
        key: &'static str,
        /// What is wrong, as the configuration crate says it.
        message: String,
    },
    /// The data directory cannot be used: the message says why and what
    /// to do.
    #[error("data_dir: {message}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// What is wrong, naming the path and the OS error.
        message: String,
    },
    /// Opening the local topics failed.
    #[error("data_dir: cannot open the local topics in {}: {error}", path.display())]
    Topics {
        /// The data directory.
        path: PathBuf,
        /// Why.
        error: TopicError,
    },
    /// Opening the group coordinator failed.
    #[error("data_dir: cannot open the consumer groups in {}: {error}", path.display())]
    Groups {
        /// The data directory.
        path: PathBuf,
        /// Why.
        error: GroupError,
    },
    /// A cluster's TLS or SASL settings cannot be used (a certificate
    /// file that is missing or does not parse).
    #[error("{0}")]
    Cluster(strait_upstream::UpstreamError),
    /// A listen address is taken or not ours.
    #[error("{key}: cannot listen on {addr}: {error}; {}", bind_advice(.error))]
    Bind {
        /// `server.listen` or `server.listeners`.
        key: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        error: std::io::Error,
    },
}

impl StartError {
    /// The configuration key whose value made the start fail.
    pub fn key(&self) -> &'static str {
        match self {
            StartError::Config { key, .. } => key,
            StartError::DataDir { .. } | StartError::Topics { .. } | StartError::Groups { .. } => "data_dir",
            StartError::Bind { key, .. } => key,
            StartError::Cluster(_) => "clusters",
        }
    }
}

/// What to do about a listener that cannot bind.
fn bind_advice(error: &std::io::Error) -> &'static str {
    use std::io::ErrorKind;
    match error.kind() {
        ErrorKind::AddrInUse => {
            "another process is listening on this port: stop it, or set server.listen to a free port"
        }
        ErrorKind::AddrNotAvailable => {
            "no network interface of this host has this address: set server.listen to one of its \
             addresses, or 0.0.0.0 to listen on all of them"
        }
        ErrorKind::PermissionDenied => {
            "ports below 1024 need root or CAP_NET_BIND_SERVICE: set server.listen to a port from \
             1024 up, such as 9092"
        }
        _ => "set server.listen to an address and port of this host",
    }
}

/// Makes sure `dir` is a directory this process can write, creating it if
/// needed; otherwise a [`StartError::DataDir`] saying what is wrong and what
/// to do.
fn prepare_data_dir(dir: &Path) -> Result<(), StartError> {
    let shown = dir.display();
    let fail = |message: String| StartError::DataDir {
        path: dir.to_path_buf(),
        message,
    };
    let elsewhere = "point data_dir at a directory, or move the file away";
    // A parent that exists but is not a directory, if that is the trouble.
    let blocked = || {
        let (file, _) = dir
            .ancestors()
            .skip(1)
            .find_map(|a| std::fs::metadata(a).ok().map(|m| (a, m)))
            .filter(|(_, m)| !m.is_dir())?;
        Some(fail(format!(
            "cannot create {shown}: {} is a file, not a directory; {elsewhere}",
            file.display()
        )))
    };
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(fail(format!("{shown} is a file, not a directory; {elsewhere}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Err(error) = std::fs::create_dir_all(dir) {
                return Err(blocked().unwrap_or_else(|| {
                    fail(format!(
                        "cannot create {shown}: {error}; create it for the user running Strait \
                         (uid {}), or point data_dir at a directory it can write",
                        rustix::process::geteuid().as_raw()
                    ))
                }));
            }
        }
        Err(error) => return Err(blocked().unwrap_or_else(|| fail(format!("cannot use {shown}: {error}")))),
    }
    // Permissions alone do not say whether a write succeeds (a read-only
    // mount, an ACL): write a file and remove it.
    let probe = dir.join(".strait-write-check");
    let written = std::fs::write(&probe, b"").and_then(|()| std::fs::remove_file(&probe));
    if let Err(error) = written {
        return Err(fail(format!(
            "{shown} is not writable: {error}; give the user running Strait (uid {}) write \
             access to it, or point data_dir at a directory it can write",
            rustix::process::geteuid().as_raw()
        )));
    }
    Ok(())
}

/// A Strait that has opened its data and bound its listener, ready to serve.
#[derive(Debug)]
pub struct Strait {
    router: Arc<Router>,
    pool: Arc<IoPool>,
    listeners: Vec<(TcpListener, Arc<Listener>)>,
    options: ServerOptions,
    /// The membership of `instances:` (how to stop it, its task).
    membership: Option<(tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>)>,
}

/// A handle on each upstream cluster of `config`, by name. Nothing is
/// contacted until first use; certificate files are read now.
pub fn upstream_clusters(config: &Config) -> Result<BTreeMap<String, Cluster>, StartError> {
    config
        .clusters
        .iter()
        .map(|(name, c)| {
            let security =
                Security::new(name, c.tls.as_ref(), c.sasl.as_ref()).map_err(StartError::Cluster)?;
            let options = ClusterOptions {
                bootstrap: c.bootstrap.clone(),
                connect: ConnectOptions {
                    client_id: c.client_id.clone(),
                    connect_timeout: c.connect_timeout.into(),
                    request_timeout: c.request_timeout.into(),
                    max_bytes_in_flight: c.max_bytes_in_flight.bytes() as usize,
                    security,
                },
                metadata_max_age: c.metadata_refresh.into(),
            };
            Ok((name.clone(), Cluster::new(name.clone(), options)))
        })
        .collect()
}

/// The listeners of `config` as the server runs them, the `i`th advertised
/// as `advertised[i]`: reads their certificate files and the users file.
pub fn listeners_of(config: &Config, advertised: &[(String, u16)]) -> Result<Vec<Listener>, StartError> {
    let users = match &config.server.users_file {
        Some(path) => Some(Arc::new(Users::open(path).map_err(|message| {
            StartError::Config {
                key: "server.users_file",
                message,
            }
        })?)),
        None => None,
    };
    let delay = config.server.failed_authentication_delay.duration();
    config
        .server
        .all_listeners()
        .iter()
        .zip(advertised)
        .enumerate()
        .map(|(i, (listener, advertised))| {
            let (key, at) = if i == 0 {
                ("server.tls", "server".to_owned())
            } else {
                ("server.listeners", format!("server.listeners[{}]", i - 1))
            };
            Listener::new(&at, listener, advertised.clone(), users.clone(), delay)
                .map_err(|message| StartError::Config { key, message })
        })
        .collect()
}

/// What `strait check` reads as a start would, short of binding and
/// opening the data: every cluster's and listener's certificate and key
/// files, and the users file.
pub fn check_files(config: &Config) -> Result<(), StartError> {
    upstream_clusters(config)?;
    let advertised = config
        .server
        .all_listeners()
        .iter()
        .map(|l| l.advertised_host_port())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|message| StartError::Config {
            key: "server.listeners",
            message,
        })?;
    listeners_of(config, &advertised).map(drop)
}

impl Strait {
    /// Opens the data directory (running crash recovery on every partition)
    /// and binds the listener.
    pub async fn start(config: &Config) -> Result<Strait, StartError> {
        let data_dir = config.data_dir.clone();
        prepare_data_dir(&data_dir)?;
        let cluster_id = cluster_id(&data_dir).map_err(|error| StartError::DataDir {
            path: data_dir.clone(),
            message: format!(
                "cannot read or write the cluster id in {}: {error}",
                data_dir.display()
            ),
        })?;
        // The instances of one logical cluster show clients one cluster id,
        // made from where they meet.
        let cluster_id = match &config.instances {
            Some(instances) => uuid::Uuid::from_u128(twox_hash::XxHash3_128::oneshot(
                format!("strait instances {} {}", instances.cluster, instances.group).as_bytes(),
            ))
            .simple()
            .to_string(),
            None => cluster_id,
        };
        // Bound now, so that a taken port is reported before the data is
        // opened; listening only once the broker can answer, so that no
        // client connects to a port that does not answer yet (before that,
        // connections are refused and clients retry).
        let mut sockets = Vec::new();
        for (i, listener) in config.server.all_listeners().iter().enumerate() {
            let key = if i == 0 {
                "server.listen"
            } else {
                "server.listeners"
            };
            let addr = listener
                .listen_addr()
                .map_err(|message| StartError::Config { key, message })?;
            let bind_error = |error| StartError::Bind { key, addr, error };
            let socket = if addr.is_ipv4() {
                TcpSocket::new_v4()
            } else {
                TcpSocket::new_v6()
            }
            .map_err(bind_error)?;
            socket.set_reuseaddr(true).map_err(bind_error)?;
            socket.bind(addr).map_err(bind_error)?;
            let bound = socket.local_addr().map_err(bind_error)?;
            let (host, mut port) = listener
                .advertised_host_port()
                .map_err(|message| StartError::Config {
                    key: if i == 0 {
                        "server.advertised"
                    } else {
                        "server.listeners"
                    },
                    message,
                })?;
            if listener.advertised.is_none() {
                // Listening on port 0 picks a free port: advertise that one.
                port = bound.port();
            }
            sockets.push((key, addr, socket, bound, (host, port)));
        }
        let (host, port) = sockets[0].4.clone();
        let bound = sockets[0].3;
        let pool = Arc::new(IoPool::new(PoolOptions {
            retention_interval: config.spool.retention_check_interval.duration(),
            ..PoolOptions::default()
        }));
        let topics = {
            let (dir, spool, pool) = (data_dir.clone(), config.spool.clone(), Arc::clone(&pool));
            tokio::task::spawn_blocking(move || Topics::open(&dir, spool, pool))
                .await
                .expect("opening topics does not panic")
                .map_err(|error| StartError::Topics {
                    path: data_dir.clone(),
                    error,
                })?
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
                .expect("opening the group coordinator does not panic")
                .map_err(|error| StartError::Groups {
                    path: data_dir.clone(),
                    error,
                })?
        };
        let identity = Identity {
            host: host.clone(),
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
                .map_err(|error| StartError::DataDir {
                    path: data_dir.clone(),
                    message: format!(
                        "cannot open the producer state in {}: {error}",
                        data_dir.display()
                    ),
                })?
        };
        let upstreams = upstream_clusters(config)?;
        // Several instances share the map in a topic; one keeps it in its
        // data directory.
        let producers = match &config.instances {
            Some(settings) => UpstreamProducers::shared(
                upstreams[&settings.cluster].clone(),
                settings.producers_topic.clone(),
            ),
            None => {
                let dir = data_dir.clone();
                tokio::task::spawn_blocking(move || UpstreamProducers::open(&dir))
                    .await
                    .expect("reading the upstream producer map does not panic")
                    .map_err(|error| StartError::DataDir {
                        path: data_dir.clone(),
                        message: format!(
                            "cannot read or write the upstream producer map in {}: {error}",
                            data_dir.display()
                        ),
                    })?
            }
        };
        let options = ServerOptions {
            max_connections: config.server.max_connections as usize,
            max_frame_bytes: config.server.max_frame_bytes.bytes() as usize,
            idle_timeout: config.server.idle_timeout.duration(),
            request_timeout: config.server.request_timeout.duration(),
            shutdown_grace: config.server.shutdown_grace.duration(),
            authorizer: config.acls().map(Authorizer::new),
        };
        // Logged before listening: a client that got in has the line in the
        // log before it (a test relies on that).
        let advertised: Vec<_> = sockets.iter().map(|s| s.4.clone()).collect();
        let mut listeners = Vec::new();
        for ((key, addr, socket, bound, _), listener) in
            sockets.into_iter().zip(listeners_of(config, &advertised)?)
        {
            if listener.name != strait_config::MAIN_LISTENER {
                tracing::info!(listener = %listener.name, listen = %bound, tls = listener.tls.is_some(), "listening");
            }
            let socket =
                socket
                    .listen(LISTEN_BACKLOG)
                    .map_err(|error| StartError::Bind { key, addr, error })?;
            listeners.push((socket, Arc::new(listener)));
        }
        let addresses = listeners
            .iter()
            .map(|(_, l)| (l.name.clone(), l.advertised.0.clone(), l.advertised.1))
            .collect();
        let (instances, membership) = match &config.instances {
            Some(settings) => {
                let me = Instance {
                    node: Instance::node_of(&host, port),
                    listeners: addresses,
                };
                tracing::info!(node = me.node, group = %settings.group, cluster = %settings.cluster, "joining the instances' group");
                let (stop, stopped) = tokio::sync::oneshot::channel();
                let (view, task) =
                    instances::join(upstreams[&settings.cluster].clone(), settings, me, stopped);
                (view, Some((stop, task)))
            }
            None => (
                Instances::alone(Instance {
                    node: crate::broker::NODE_ID,
                    listeners: addresses,
                }),
                None,
            ),
        };
        tracing::info!(listen = %bound, data_dir = %data_dir.display(), topics = broker.topics().all().len(), "Strait is ready");
        let router = Router::new(
            Arc::new(broker),
            config.routes(),
            config.group_routes(),
            upstreams,
            producers,
            instances,
        );
        Ok(Strait {
            router: Arc::new(router),
            pool,
            listeners,
            options,
            membership,
        })
    }

    /// The upstream clusters, by name (the handles the router uses).
    pub fn upstreams(&self) -> &BTreeMap<String, Cluster> {
        self.router.upstreams()
    }

    /// The local broker: the spool's topics and the groups it
    /// coordinates.
    pub fn broker(&self) -> Arc<crate::broker::Broker> {
        self.router.broker().clone()
    }

    /// The metrics read from the local broker when scraped: topic sizes,
    /// the disk, groups.
    pub fn collector(&self, topic_labels: bool) -> crate::broker::BrokerCollector {
        crate::broker::BrokerCollector::new(self.router.broker(), topic_labels)
    }

    /// The address the main listener is bound to.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listeners[0].0.local_addr()
    }

    /// Serves until `shutdown` resolves, then finishes requests in flight,
    /// syncs every partition and persists its recovery point.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        let Strait {
            router,
            pool,
            listeners,
            options,
            membership,
        } = self;
        let watch = tokio::spawn(watch_upstreams(router.upstreams().clone()));
        let (leave, left) = match membership {
            Some((stop, task)) => (Some(stop), Some(task)),
            None => (None, None),
        };
        // On shutdown the instance leaves its group at once, so the others
        // take its partitions while it finishes what is in flight.
        let shutdown = async move {
            shutdown.await;
            if let Some(leave) = leave {
                let _ = leave.send(());
            }
        };
        let served = serve(listeners, Arc::clone(&router), options, shutdown).await;
        watch.abort();
        if let Some(left) = left {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), left).await;
        }
        served?;
        // Every connection task has ended, so the router is free: close
        // every partition (sync, persist the recovery point), then stop the
        // I/O threads. (A scrape of the metrics may read the broker
        // meanwhile; reads of a closed partition still work.)
        let broker = Arc::try_unwrap(router)
            .map_err(|_| std::io::Error::other("the router is still in use"))?
            .into_broker();
        let closed = tokio::task::spawn_blocking(move || -> Result<(), String> {
            // On several threads: a close may sync, which is waiting.
            let logs: Vec<_> = broker
                .topics()
                .all()
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| p.log.clone()))
                .collect();
            let mut first = Ok(());
            for (log, closed) in logs.iter().zip(in_parallel(logs.clone(), |log| log.close())) {
                if let Err(e) = closed {
                    tracing::error!(partition = %log.dir().display(), error = %e, "closing failed");
                    first = first.and(Err(e.to_string()));
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

/// How often every upstream cluster's metadata is loaded, so that its
/// health (`strait_upstream_up`, `/readyz`) is known while no client uses
/// it.
const HEALTH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Loads each cluster's metadata now and every [`HEALTH_INTERVAL`] (a
/// failure is counted and logged by the cluster itself).
async fn watch_upstreams(clusters: BTreeMap<String, Cluster>) {
    let mut tick = tokio::time::interval(HEALTH_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        futures_util::future::join_all(clusters.values().map(|c| c.refresh())).await;
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
    crate::files::replace(&path, format!("{id}\n").as_bytes())?;
    Ok(id)
}
