//! The loop that polls one cluster's groups every `lag.interval` into the
//! [`Tracker`], whatever reads them: a Kafka cluster over the protocol
//! ([`crate::kafka::Poller`]) or Strait's own spool, read in process by
//! the binary.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::{Snapshot, Tracker};

/// What one cluster's groups are read from.
pub trait Source: Send {
    /// Reads every watched group once: its state, members, committed
    /// offsets, each partition's end and, where it is behind, when the
    /// oldest record it has not read was written. An error says why the
    /// cluster could not be read at all.
    fn poll(&mut self) -> impl Future<Output = Result<Snapshot, String>> + Send;
}

/// Polls `source` (cluster `name`) every `interval` into `tracker` until
/// `shutdown` turns true. A failed poll is logged when its error differs
/// from the last one's, and groups left out for `max_groups` when their
/// number changes.
pub async fn run(
    name: String,
    mut source: impl Source,
    tracker: Arc<Tracker>,
    interval: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut last_error, mut last_skipped) = (None::<String>, 0);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        let polled = tokio::select! {
            polled = source.poll() => polled,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        match &polled {
            Err(error) if last_error.as_ref() != Some(error) => {
                tracing::warn!(cluster = %name, %error, "cannot read the cluster's consumer groups; their lag is not updated");
                last_error = Some(error.clone());
            }
            Err(_) => {}
            Ok(snapshot) => {
                if last_error.take().is_some() {
                    tracing::info!(cluster = %name, groups = snapshot.groups.len(), "reading the cluster's consumer groups again");
                }
                if snapshot.skipped != last_skipped {
                    if snapshot.skipped > 0 {
                        tracing::warn!(
                            cluster = %name, watched = snapshot.groups.len(), left_out = snapshot.skipped,
                            "more consumer groups than lag.max_groups: the rest (in name order) are not watched"
                        );
                    }
                    last_skipped = snapshot.skipped;
                }
            }
        }
        tracker.record(&name, now_ms(), polled);
    }
}

/// Milliseconds since the epoch.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
