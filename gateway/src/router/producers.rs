//! One idempotent producer id for a client across clusters.
//!
//! A client's InitProducerId is answered by the local broker (one producer
//! id, allocated durably, whatever the topics). For each cluster its
//! batches go to, the router asks that cluster for a producer id of its
//! own, once, and writes it and its epoch into the batch headers on the
//! way (the CRC-32C updated from the bytes that changed). Sequence numbers
//! pass through untouched: a client's producer id and its upstream one
//! both start every partition at sequence 0, so the upstream's own checks
//! are the client's: a retried batch is deduplicated, a gap gets
//! OUT_OF_ORDER_SEQUENCE_NUMBER, as on a single broker.
//!
//! The map lives in memory. A client that goes on with its producer id
//! after Strait restarted gets a new upstream producer id, whose first
//! sequence the upstream may refuse (OUT_OF_ORDER_SEQUENCE_NUMBER or
//! UNKNOWN_PRODUCER_ID); clients then initialize again, as after a broker
//! lost their state.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use strait_spool::batch::BatchHeader;
use strait_upstream::{Cluster, UpstreamError};
use tokio::sync::OnceCell;
use tokio::time::Instant;

/// Producers not seen for this long are forgotten when the map is full
/// (Kafka's `producer.id.expiration.ms` is a day).
const IDLE: Duration = Duration::from_secs(24 * 3600);

/// How long a Produce waits for a cluster's producer id (retried while the
/// cluster says to) before its batch is answered NOT_LEADER_OR_FOLLOWER,
/// which the client retries: well within clients' request timeouts.
const PRODUCER_ID_PATIENCE: Duration = Duration::from_secs(10);

/// Most (client producer, cluster) pairs remembered.
const CAPACITY: usize = 100_000;

/// The transactional bit of a batch's attributes.
const TRANSACTIONAL: i16 = 0x10;

/// (cluster, client producer id, client epoch).
type Key = (String, i64, i16);

/// Upstream producer ids per client producer and cluster.
#[derive(Debug, Default)]
pub(super) struct UpstreamProducers {
    slots: Mutex<HashMap<Key, Slot>>,
}

#[derive(Debug)]
struct Slot {
    id: Arc<OnceCell<(i64, i16)>>,
    used: Instant,
}

impl UpstreamProducers {
    /// The producer id and epoch on `cluster` for the client's producer
    /// `(producer_id, epoch)`, asked for on first use. Concurrent first
    /// uses share one InitProducerId; a failed one is tried again by the
    /// next caller.
    pub(super) async fn get(
        &self,
        cluster: &Cluster,
        producer_id: i64,
        epoch: i16,
    ) -> Result<(i64, i16), UpstreamError> {
        let id = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            let key = (cluster.name().to_owned(), producer_id, epoch);
            if !slots.contains_key(&key) && slots.len() >= CAPACITY {
                forget_oldest(&mut slots, now);
            }
            let slot = slots.entry(key).or_insert_with(|| Slot {
                id: Arc::default(),
                used: now,
            });
            slot.used = now;
            Arc::clone(&slot.id)
        };
        let deadline = Instant::now()
            + cluster
                .options()
                .connect
                .request_timeout
                .min(PRODUCER_ID_PATIENCE);
        id.get_or_try_init(|| cluster.init_producer_id(deadline))
            .await
            .copied()
    }

    /// `records` (a Produce partition's record batches) with the client's
    /// producer id and epoch replaced by `cluster`'s. Batches without a
    /// producer id, and transactional ones (Strait hands out no
    /// transactional ids), pass as they are; so does anything that does
    /// not parse as a batch (the upstream refuses it with its own error).
    pub(super) async fn rewrite(&self, cluster: &Cluster, records: Bytes) -> Result<Bytes, UpstreamError> {
        let mut copy: Option<BytesMut> = None;
        let mut at = 0;
        while at < records.len() {
            let Ok(header) = BatchHeader::parse_whole(&records[at..]) else {
                break;
            };
            let size = header.size();
            if header.producer_id >= 0 && header.attributes & TRANSACTIONAL == 0 {
                let (id, epoch) = self
                    .get(cluster, header.producer_id, header.producer_epoch)
                    .await?;
                let buf = copy.get_or_insert_with(|| BytesMut::from(&records[..]));
                strait_spool::batch::set_producer(&mut buf[at..at + size], id, epoch)
                    .expect("the header parsed above");
            }
            at += size;
        }
        Ok(copy.map_or(records, BytesMut::freeze))
    }
}

/// Makes room: forgets producers idle for [`IDLE`], or else the one used
/// longest ago.
fn forget_oldest(slots: &mut HashMap<Key, Slot>, now: Instant) {
    slots.retain(|_, slot| now.duration_since(slot.used) < IDLE);
    if slots.len() >= CAPACITY {
        if let Some(oldest) = slots.iter().min_by_key(|(_, s)| s.used).map(|(k, _)| k.clone()) {
            slots.remove(&oldest);
        }
    }
}
