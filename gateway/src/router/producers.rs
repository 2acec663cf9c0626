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
//! A client that bumps its epoch itself (the Java client does, after a
//! batch timed out) keeps its upstream producer id, bumped as much: Kafka
//! then holds the new epoch to sequence 0 on every partition it wrote, as
//! it would the client's own, rather than taking any first sequence from
//! an unknown producer (which lets a batch in flight before the bump land
//! after one sent after it).
//!
//! A proxy must also keep a producer's batches for one partition in order
//! where a broker's connection would. Strait answers each request on its
//! own, so a client pipelines batches to "the one broker" while an earlier
//! one fails (its leader gone); a later batch reaching the new leader first
//! is taken there, since a leader takes any first sequence from a producer
//! it has no state for, and the earlier one is then refused for good. So
//! once a sequenced batch failed (known as soon as its leader answers or
//! its connection fails, not when the client's whole request is answered),
//! later batches of that producer and
//! partition are answered NOT_LEADER_OR_FOLLOWER without being sent (not
//! written; every client sends them again, in order) until the client sends
//! the failed one again, or until a later batch sent before the failure was
//! known is written: the upstream took it after the failed one, which was
//! written too (a timeout while its replicas caught up), and clients take
//! both as delivered and never send the first again.
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
use strait_batch::BatchHeader;
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

/// (cluster, client producer id).
type Key = (String, i64);

/// Upstream producer ids per client producer and cluster.
#[derive(Debug, Default)]
pub(super) struct UpstreamProducers {
    slots: Mutex<HashMap<Key, Slot>>,
    /// Where each producer's partitions must go on from after a failure.
    chains: Mutex<HashMap<Chain, Resume>>,
}

/// (cluster, client producer id, client epoch, topic, partition).
pub(super) type Chain = (String, i64, i16, String, i32);

/// The base sequence of the earliest batch of a chain that failed and
/// has not been sent again.
#[derive(Debug)]
struct Resume {
    at: i32,
    used: Instant,
}

#[derive(Debug)]
struct Slot {
    id: Arc<OnceCell<Upstream>>,
    used: Instant,
}

/// A client producer's id on a cluster: the id and epoch the cluster gave,
/// for the client epoch it was asked for.
#[derive(Debug, Clone, Copy)]
struct Upstream {
    id: i64,
    epoch: i16,
    client_epoch: i16,
}

impl Upstream {
    /// The upstream epoch for the client's `epoch`: bumped as often as the
    /// client bumped its own; `None` below 0 or past the largest epoch.
    fn epoch_for(&self, epoch: i16) -> Option<i16> {
        let upstream = i32::from(self.epoch) + i32::from(epoch) - i32::from(self.client_epoch);
        i16::try_from(upstream).ok().filter(|e| (0..i16::MAX).contains(e))
    }
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
        let key = (cluster.name().to_owned(), producer_id);
        let id = self.slot(&key, false);
        let deadline = Instant::now()
            + cluster
                .options()
                .connect
                .request_timeout
                .min(PRODUCER_ID_PATIENCE);
        let init = || async {
            let (id, upstream_epoch) = cluster.init_producer_id(deadline).await?;
            Ok::<_, UpstreamError>(Upstream {
                id,
                epoch: upstream_epoch,
                client_epoch: epoch,
            })
        };
        let upstream = *id.get_or_try_init(init).await?;
        if let Some(bumped) = upstream.epoch_for(epoch) {
            return Ok((upstream.id, bumped));
        }
        // Out of epochs upstream: a producer id of its own, as for a
        // client not seen before.
        let fresh = self.slot(&key, true);
        let upstream = *fresh.get_or_try_init(init).await?;
        Ok((upstream.id, upstream.epoch_for(epoch).unwrap_or(upstream.epoch)))
    }

    /// The slot of `key` (a new one if `replace`), marked used now.
    fn slot(&self, key: &Key, replace: bool) -> Arc<OnceCell<Upstream>> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if replace {
            slots.remove(key);
        }
        if !slots.contains_key(key) && slots.len() >= CAPACITY {
            forget_oldest(&mut slots, now, |s| s.used);
        }
        let slot = slots.entry(key.clone()).or_insert_with(|| Slot {
            id: Arc::default(),
            used: now,
        });
        slot.used = now;
        Arc::clone(&slot.id)
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
            if header.producer_id >= 0 && !header.is_transactional() {
                let (id, epoch) = self
                    .get(cluster, header.producer_id, header.producer_epoch)
                    .await?;
                let buf = copy.get_or_insert_with(|| BytesMut::from(&records[..]));
                strait_batch::set_producer(&mut buf[at..at + size], id, epoch)
                    .expect("the header parsed above");
            }
            at += size;
        }
        Ok(copy.map_or(records, BytesMut::freeze))
    }
}

/// A sequenced batch's place in its producer's chain for one partition, and
/// its base sequence.
pub(super) type ChainAt = (Chain, i32);

/// Where `records` (a Produce partition's batches, as the client sent
/// them) bound for `cluster`'s `topic`-`partition` stand in their chain,
/// if they are sequenced (idempotent, not transactional).
pub(super) fn chain_at(cluster: &str, topic: &str, partition: i32, records: &Bytes) -> Option<ChainAt> {
    let header = BatchHeader::parse_whole(records).ok()?;
    (header.producer_id >= 0 && !header.is_transactional()).then(|| {
        let chain = (
            cluster.to_owned(),
            header.producer_id,
            header.producer_epoch,
            topic.to_owned(),
            partition,
        );
        (chain, header.base_sequence)
    })
}

impl UpstreamProducers {
    /// Whether the batch at `at` may be sent now: not if it comes after
    /// a batch of its chain that failed and was not sent again (whose base
    /// sequence is the error). Sending that one again lets the rest follow.
    pub(super) fn in_order(&self, (chain, base): &ChainAt) -> Result<(), i32> {
        let mut chains = self.chains.lock().unwrap_or_else(|e| e.into_inner());
        let Some(resume) = chains.get(chain) else {
            return Ok(());
        };
        if *base > resume.at {
            return Err(resume.at);
        }
        if *base == resume.at {
            chains.remove(chain);
        }
        Ok(())
    }

    /// Notes that the batch at `at` was written. The upstream takes a
    /// batch only after every earlier sequence of its producer, so an
    /// earlier one that failed with its fate unknown (a timeout while its
    /// replicas caught up) was written too: clients take it as delivered
    /// and never send it again (librdkafka acknowledges it implicitly), so
    /// the chain goes on.
    pub(super) fn written(&self, (chain, base): &ChainAt) {
        let mut chains = self.chains.lock().unwrap_or_else(|e| e.into_inner());
        if chains.get(chain).is_some_and(|resume| resume.at < *base) {
            chains.remove(chain);
        }
    }

    /// Notes that the batch at `at` failed (was answered with an error,
    /// or not sent).
    pub(super) fn failed(&self, (chain, base): &ChainAt) {
        let mut chains = self.chains.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if !chains.contains_key(chain) && chains.len() >= CAPACITY {
            forget_oldest(&mut chains, now, |r| r.used);
        }
        let resume = chains
            .entry(chain.clone())
            .or_insert(Resume { at: *base, used: now });
        resume.at = resume.at.min(*base);
        resume.used = now;
    }
}

/// Makes room in `map`: forgets entries idle for [`IDLE`], or else the
/// one used longest ago.
fn forget_oldest<K: Clone + Eq + std::hash::Hash, V>(
    map: &mut HashMap<K, V>,
    now: Instant,
    used: impl Fn(&V) -> Instant,
) {
    map.retain(|_, v| now.duration_since(used(v)) < IDLE);
    if map.len() >= CAPACITY {
        if let Some(oldest) = map.iter().min_by_key(|(_, v)| used(v)).map(|(k, _)| k.clone()) {
            map.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use strait_batch::build::{batch_with, BatchSpec};

    use super::{chain_at, Upstream, UpstreamProducers};

    fn batch(producer_id: i64, base_sequence: i32, attributes: i16) -> Bytes {
        let spec = BatchSpec {
            producer_id,
            producer_epoch: 0,
            base_sequence,
            attributes,
            ..BatchSpec::default()
        };
        Bytes::from(batch_with(spec, &[b"a", b"b"]))
    }

    #[test]
    fn after_a_failed_batch_later_ones_wait_for_it() {
        let producers = UpstreamProducers::default();
        let at = |cluster: &str, partition, producer_id, seq| {
            chain_at(cluster, "orders", partition, &batch(producer_id, seq, 0)).unwrap()
        };
        let ok = |seq| producers.in_order(&at("east", 0, 7, seq)).is_ok();
        assert!(ok(0) && ok(2) && ok(4));
        producers.failed(&at("east", 0, 7, 4));
        producers.failed(&at("east", 0, 7, 2));
        // Past the earliest failure: not sent.
        assert_eq!(producers.in_order(&at("east", 0, 7, 4)), Err(2));
        assert!(!ok(6));
        // Other partitions, clusters and producers go on.
        assert!(producers.in_order(&at("east", 1, 7, 6)).is_ok());
        assert!(producers.in_order(&at("west", 0, 7, 6)).is_ok());
        assert!(producers.in_order(&at("east", 0, 8, 6)).is_ok());
        // An older batch (its answer lost) goes, the failure still waits.
        assert!(ok(0));
        assert!(!ok(4));
        // The failed one again, then the rest.
        assert!(ok(2));
        assert!(ok(4) && ok(6));
        // A later batch written while a failure waits (sent before the
        // failure was known): the failed one was written too, and clients
        // do not send it again.
        producers.failed(&at("east", 0, 7, 8));
        producers.written(&at("east", 0, 7, 6));
        assert!(!ok(10));
        producers.written(&at("east", 0, 7, 10));
        assert!(ok(12));
        // Batches without a producer id, and transactional ones, have no
        // place in a chain.
        assert!(chain_at("east", "orders", 0, &batch(-1, -1, 0)).is_none());
        assert!(chain_at("east", "orders", 0, &batch(7, 8, 0x10)).is_none());
    }

    #[test]
    fn client_epoch_bumps_bump_the_upstream_epoch() {
        let upstream = Upstream {
            id: 1001,
            epoch: 3,
            client_epoch: 0,
        };
        assert_eq!(upstream.epoch_for(0), Some(3));
        assert_eq!(upstream.epoch_for(2), Some(5));
        // An older epoch is an older one upstream too (which the cluster
        // fences, as it would the client's); below 0 or past the largest
        // epoch there is none.
        assert_eq!(upstream.epoch_for(-1), Some(2));
        let late = Upstream {
            id: 1001,
            epoch: 0,
            client_epoch: 5,
        };
        assert_eq!(late.epoch_for(4), None);
        let high = Upstream {
            id: 1001,
            epoch: i16::MAX - 2,
            client_epoch: 0,
        };
        assert_eq!(high.epoch_for(1), Some(i16::MAX - 1));
        assert_eq!(high.epoch_for(2), None);
    }
}
