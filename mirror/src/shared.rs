//! What every partition of one mirror shares: the clusters, the grouped
//! fetcher and producer, the byte budget and the settings
//! ([`Shared`]), which the partition's tasks ([`crate::partition`]) and
//! its resumption ([`crate::resume`]) both read.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use strait_upstream::Cluster;
use tokio::sync::Semaphore;

use crate::batch::Origins;
use crate::error::{self, MirrorError};
use crate::grouped::{Fetcher, Producer};
use crate::membership::Generation;
use crate::metrics::MirrorMetrics;
use crate::state::PartitionState;

/// Where a partition starts when its group has no committed position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    /// The source's log start.
    Earliest,
    /// The source's high watermark when the partition is first seen.
    Latest,
}

/// What to do when source retention deleted records before they were
/// mirrored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLost {
    /// Count them, log loudly, go on from the log start.
    Continue,
    /// Stop the partition.
    Stop,
}

/// What every partition of one mirror shares.
#[derive(Debug)]
pub struct Shared {
    /// The mirror's name (for logs).
    pub name: Arc<str>,
    /// The consumer group holding positions on the source.
    pub group: String,
    /// The source cluster.
    pub source: Cluster,
    /// The target cluster.
    pub target: Cluster,
    /// Source fetches grouped by leader.
    pub fetcher: Fetcher,
    /// Target produces grouped by leader.
    pub producer: Producer,
    /// Bytes fetched and not yet acknowledged by the target.
    pub budget: Arc<Semaphore>,
    /// The budget's size.
    pub budget_bytes: usize,
    /// Where a partition without a committed position starts.
    pub start: StartAt,
    /// Lost records: go on or stop.
    pub on_lost: OnLost,
    /// Batches smaller than this are merged (0: none are).
    pub coalesce_below: usize,
    /// Caught-up partitions keep a second fetch waiting at the source
    /// ([`crate::partition`]).
    pub staggered_polls: bool,
    /// The largest batch they are merged into.
    pub coalesce_up_to: usize,
    /// Loop prevention (`prevent_loops`): records are marked with their
    /// origin, and those from the target left out ([`Origins`]).
    pub prevent_loops: bool,
    /// The clusters' ids loop prevention uses, once both told them.
    pub origins: tokio::sync::OnceCell<Arc<Origins>>,
    /// The generation of the mirror's group this process is in, which its
    /// commits carry ([`crate::membership`]).
    pub generation: std::sync::Mutex<Option<Generation>>,
    /// The producer id every partition starts with.
    pub producer_id: tokio::sync::OnceCell<(i64, i16)>,
    /// Histograms and error counters.
    pub metrics: MirrorMetrics,
    /// Partitions running, to share the budget among.
    pub partitions: AtomicUsize,
}

impl Shared {
    /// The generation commits carry now.
    pub(crate) fn generation(&self) -> Option<Generation> {
        self.generation.lock().expect("generation").clone()
    }

    /// The cluster ids that loop prevention marks records with and leaves
    /// out, asked of both clusters once; `None` when the mirror does not
    /// prevent loops.
    pub(crate) async fn origins(&self) -> Result<Option<Arc<Origins>>, MirrorError> {
        if !self.prevent_loops {
            return Ok(None);
        }
        let origins = self
            .origins
            .get_or_try_init(|| async {
                let (source, target) = tokio::join!(self.source.metadata(), self.target.metadata());
                let id = |cluster: &Cluster, metadata: Arc<strait_upstream::Metadata>| {
                    metadata.cluster_id.clone().ok_or_else(|| strait_upstream::UpstreamError::Malformed {
                        broker: cluster.name().to_owned(),
                        api: kafka_protocol::messages::ApiKey::Metadata,
                        detail: "the cluster gives no cluster id, which prevent_loops marks records with"
                            .to_owned(),
                    })
                };
                let source = id(&self.source, source.map_err(error::source)?).map_err(error::source)?;
                let target = id(&self.target, target.map_err(error::target)?).map_err(error::target)?;
                if source == target {
                    tracing::warn!(
                        mirror = %self.name, cluster_id = %source,
                        "the source and the target report the same cluster id: loop prevention would leave out every record already mirrored"
                    );
                }
                Ok::<_, MirrorError>(Arc::new(Origins {
                    source: source.into_bytes().into(),
                    target: target.into_bytes().into(),
                }))
            })
            .await?;
        Ok(Some(origins.clone()))
    }

    /// Counts an error of `kind` (a [`MirrorError::kind`]) for a partition.
    pub(crate) fn count_error(&self, state: &PartitionState, kind: &str) {
        PartitionState::add(&state.counters.errors, 1);
        self.metrics.errors.with_label_values(&[&self.name, kind]).inc();
    }
}
