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
//! a batch whose partition's leader (as the router knows it) is not the
//! node its producer's earlier batches there are still in flight to is
//! answered NOT_LEADER_OR_FOLLOWER without being sent: batches in flight
//! together share one upstream connection, which the leader reads in
//! order, as it would the client's own. And once a sequenced batch failed
//! (known as soon as its leader answers or its connection fails, not when
//! the client's whole request is answered), later batches of that producer
//! and partition are answered the same way (not written; every client
//! sends them again, in order) until the client sends the failed one
//! again, or until a later batch sent before the failure was known is
//! written: the upstream took it after the failed one, which was written
//! too (a timeout while its replicas caught up), and clients take both as
//! delivered and never send the first again.
//!
//! The map survives restarts: each pair is appended to a file in the data
//! directory ([`MapFile`], synced) before its first batch is sent, and
//! read back on start. A client that goes on with its producer id after
//! Strait restarted (SIGKILL included) goes on under the same upstream
//! producer id and epoch, so the upstream deduplicates a batch it sends
//! again whose answer the restart lost, and holds its sequences to the
//! ones it already has, as a Kafka broker's restart would. Several
//! instances (`instances:`) keep it in a topic they all read instead
//! ([`super::shared_producers`]), so a client producer has one upstream
//! producer id per cluster whichever instance its batches go through.

use std::collections::HashMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use strait_batch::{BatchError, BatchHeader};
use strait_upstream::{Cluster, UpstreamError};
use tokio::sync::OnceCell;
use tokio::time::Instant;

use super::shared_producers::SharedMap;

/// Producers not seen for this long are forgotten when the map is full
/// (Kafka's `producer.id.expiration.ms` is a day).
const IDLE: Duration = Duration::from_secs(24 * 3600);

/// How long a Produce waits for a cluster's producer id (retried while the
/// cluster says to) before its batch is answered NOT_LEADER_OR_FOLLOWER,
/// which the client retries: well within clients' request timeouts.
const PRODUCER_ID_PATIENCE: Duration = Duration::from_secs(10);

/// A batch sent and not answered for this long no longer holds its
/// producer's later batches to its node (its answer was lost with the
/// client connection that waited for it; clients wait 30 s by default).
const IN_FLIGHT_AT_MOST: Duration = Duration::from_secs(120);

/// Most (client producer, cluster) pairs remembered.
const CAPACITY: usize = 100_000;

/// (cluster, client producer id).
pub(super) type Key = (String, i64);

/// Upstream producer ids per client producer and cluster.
#[derive(Debug, Default)]
pub struct UpstreamProducers {
    slots: Mutex<HashMap<Key, Slot>>,
    /// Where the map is kept across restarts.
    store: Store,
    /// Each producer's partitions: batches in flight, and where to go on
    /// from after a failure.
    chains: Mutex<HashMap<Chain, ChainState>>,
}

/// Where the map is kept.
#[derive(Debug, Default)]
enum Store {
    /// In memory only (tests).
    #[default]
    Memory,
    /// In the data directory: one instance.
    File(Arc<MapFile>),
    /// In a topic every instance reads (`instances:`).
    Shared(SharedMap),
}

/// (cluster, client producer id, client epoch, topic, partition).
pub(super) type Chain = (String, i64, i16, String, i32);

/// A chain's batches under way and its earliest failure.
#[derive(Debug)]
struct ChainState {
    /// The base sequence of the earliest batch that failed and has not
    /// been sent again.
    resume: Option<i32>,
    /// Batches sent and not answered yet: base sequence, the node they
    /// went to, when.
    in_flight: Vec<(i32, i32, Instant)>,
    used: Instant,
}

impl ChainState {
    fn settle(&mut self, base: i32) {
        if let Some(i) = self.in_flight.iter().position(|(b, ..)| *b == base) {
            self.in_flight.swap_remove(i);
        }
    }

    fn idle(&self) -> bool {
        self.resume.is_none() && self.in_flight.is_empty()
    }
}

/// Why a batch is not sent now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Held {
    /// An earlier batch of its chain failed (this base sequence) and was
    /// not sent again.
    Behind(i32),
    /// Earlier batches of its chain are still in flight to another node.
    InFlightTo(i32),
}

impl Held {
    /// What the client is told (with NOT_LEADER_OR_FOLLOWER).
    pub(super) fn why(self) -> &'static str {
        match self {
            Held::Behind(_) => "an earlier batch of this producer failed: it goes first",
            Held::InFlightTo(_) => "earlier batches of this producer are in flight to the previous leader",
        }
    }
}

#[derive(Debug)]
struct Slot {
    id: Arc<OnceCell<Upstream>>,
    used: Instant,
}

/// A client producer's id on a cluster: the id and epoch the cluster gave,
/// for the client epoch it was asked for.
#[derive(Debug, Clone, Copy)]
pub(super) struct Upstream {
    pub(super) id: i64,
    pub(super) epoch: i16,
    pub(super) client_epoch: i16,
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
    /// The map kept in `dir` (read back now: blocking, before serving).
    pub fn open(dir: &Path) -> std::io::Result<UpstreamProducers> {
        let (file, known) = MapFile::open(dir)?;
        let now = Instant::now();
        let slots = known
            .into_iter()
            .map(|(key, upstream)| {
                let slot = Slot {
                    id: Arc::new(OnceCell::new_with(Some(upstream))),
                    used: now,
                };
                (key, slot)
            })
            .collect();
        Ok(UpstreamProducers {
            slots: Mutex::new(slots),
            store: Store::File(Arc::new(file)),
            chains: Mutex::default(),
        })
    }

    /// The map shared by several instances, in `topic` on `cluster`.
    pub fn shared(cluster: Cluster, topic: String) -> UpstreamProducers {
        UpstreamProducers {
            store: Store::Shared(SharedMap::new(cluster, topic)),
            ..UpstreamProducers::default()
        }
    }

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
        let make = || async {
            let (id, upstream_epoch) = cluster.init_producer_id(deadline).await?;
            Ok::<_, UpstreamError>(Upstream {
                id,
                epoch: upstream_epoch,
                client_epoch: epoch,
            })
        };
        // Kept before the first batch goes under it.
        let key = &key;
        let init = |replacing: Option<Upstream>| async move {
            match &self.store {
                Store::Memory => make().await,
                Store::Shared(shared) => shared.claim(key, replacing, make).await,
                Store::File(file) => {
                    // A disk that refuses leaves the map in memory:
                    // producing goes on, and only a restart loses these
                    // producers' deduplication.
                    let upstream = make().await?;
                    let (file, pair) = (Arc::clone(file), key.clone());
                    let kept = tokio::task::spawn_blocking(move || file.append(&pair, &upstream)).await;
                    if let Err(error) = kept.map_err(std::io::Error::other).and_then(|r| r) {
                        tracing::error!(cluster = %key.0, producer_id, %error, "keeping an upstream producer id on disk failed");
                    }
                    Ok(upstream)
                }
            }
        };
        let upstream = *id.get_or_try_init(|| init(None)).await?;
        if let Some(bumped) = upstream.epoch_for(epoch) {
            return Ok((upstream.id, bumped));
        }
        // Out of epochs upstream: a producer id of its own, as for a
        // client not seen before.
        let fresh = self.slot(key, true);
        let upstream = *fresh.get_or_try_init(|| init(Some(upstream))).await?;
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

/// The upstream producer map on disk: one line per (cluster, client
/// producer) pair, appended and synced when the pair is made, the last
/// line of a pair winning; rewritten with the live pairs only on open. A
/// line cut short by a crash is ignored (its pair was never used: the
/// append is synced before the first batch goes).
#[derive(Debug)]
struct MapFile {
    path: PathBuf,
    out: Mutex<fs::File>,
}

impl MapFile {
    fn open(dir: &Path) -> std::io::Result<(MapFile, HashMap<Key, Upstream>)> {
        let path = dir.join("upstream-producers");
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e),
        };
        let (known, order) = parse_map(&text);
        // The newest CAPACITY pairs, in the order they were made.
        let keep: Vec<&Key> = order.iter().rev().take(CAPACITY).rev().collect();
        let mut compact = String::new();
        for key in &keep {
            compact.push_str(&map_line(key, &known[*key]));
        }
        crate::files::replace(&path, compact.as_bytes())?;
        let known = keep.into_iter().map(|k| (k.clone(), known[k])).collect();
        let out = fs::OpenOptions::new().append(true).open(&path)?;
        Ok((
            MapFile {
                path,
                out: Mutex::new(out),
            },
            known,
        ))
    }

    /// Appends a pair and syncs it (blocking).
    fn append(&self, key: &Key, upstream: &Upstream) -> std::io::Result<()> {
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        out.write_all(map_line(key, upstream).as_bytes())
            .and_then(|()| out.sync_data())
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", self.path.display())))
    }
}

/// A pair's line: cluster, client producer id, upstream id, upstream
/// epoch, the client epoch it was made for; tab-separated (cluster names
/// are letters, digits, `.`, `_` and `-`, as the configuration checks).
fn map_line((cluster, client): &Key, u: &Upstream) -> String {
    format!("{cluster}\t{client}\t{}\t{}\t{}\n", u.id, u.epoch, u.client_epoch)
}

/// The pairs of a map file (last line of a pair winning) and the order
/// their last lines came in; lines that do not parse are skipped.
fn parse_map(text: &str) -> (HashMap<Key, Upstream>, Vec<Key>) {
    let mut known = HashMap::new();
    let mut order: Vec<Key> = Vec::new();
    for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
        let fields: Vec<&str> = line.trim_end_matches('\n').split('\t').collect();
        let [cluster, client, id, epoch, client_epoch] = fields[..] else {
            continue;
        };
        let parsed = (|| {
            let key: Key = (cluster.to_owned(), client.parse().ok()?);
            let upstream = Upstream {
                id: id.parse().ok()?,
                epoch: epoch.parse().ok()?,
                client_epoch: client_epoch.parse().ok()?,
            };
            Some((key, upstream))
        })();
        if let Some((key, upstream)) = parsed {
            if known.insert(key.clone(), upstream).is_some() {
                order.retain(|k| *k != key);
            }
            order.push(key);
        }
    }
    (known, order)
}

/// Whether `records` (a Produce partition's) are whole v2 batches, as the
/// client built them: a truncated or garbled one is the client's error
/// (INVALID_RECORD, as Kafka answers it), found before its producer id is
/// mapped, which would otherwise send the upstream a producer it does not
/// know. Message sets of the older formats (magic 0 and 1) are left to
/// the upstream.
pub(super) fn whole_batches(records: &[u8]) -> Result<(), BatchError> {
    if records.get(16).is_some_and(|magic| *magic != 2) {
        return Ok(());
    }
    let mut at = 0;
    while at < records.len() {
        at += BatchHeader::parse_whole(&records[at..])?.size();
    }
    Ok(())
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
    /// Whether the batch at `at` may be sent now, to `node` (its leader;
    /// -1 if not known): not if it comes after a batch of its chain that
    /// failed and was not sent again (sending that one again lets the rest
    /// follow), nor while earlier ones are in flight to another node. If
    /// it may, it is in flight until [`UpstreamProducers::written`] or
    /// [`UpstreamProducers::failed`].
    pub(super) fn in_order(&self, (chain, base): &ChainAt, node: i32) -> Result<(), Held> {
        let mut chains = self.chains.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let state = chain_state(&mut chains, chain, now);
        state
            .in_flight
            .retain(|(.., since)| now.duration_since(*since) < IN_FLIGHT_AT_MOST);
        let held = match state.resume {
            Some(at) if *base > at => Some(Held::Behind(at)),
            _ => state
                .in_flight
                .iter()
                .find(|(_, to, _)| *to != node)
                .map(|(_, to, _)| Held::InFlightTo(*to)),
        };
        if let Some(held) = held {
            if state.idle() {
                chains.remove(chain);
            }
            return Err(held);
        }
        if state.resume == Some(*base) {
            state.resume = None;
        }
        state.in_flight.push((*base, node, now));
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
        if let Some(state) = chains.get_mut(chain) {
            state.settle(*base);
            if state.resume.is_some_and(|at| at < *base) {
                state.resume = None;
            }
            if state.idle() {
                chains.remove(chain);
            }
        }
    }

    /// Notes that the batch at `at` failed (was answered with an error,
    /// or not sent, or its answer will not be waited for).
    pub(super) fn failed(&self, (chain, base): &ChainAt) {
        let mut chains = self.chains.lock().unwrap_or_else(|e| e.into_inner());
        let state = chain_state(&mut chains, chain, Instant::now());
        state.settle(*base);
        state.resume = Some(state.resume.map_or(*base, |at| at.min(*base)));
    }
}

/// `chain`'s state (a new one, room made if the map is full), marked used
/// `now`.
fn chain_state<'m>(
    chains: &'m mut HashMap<Chain, ChainState>,
    chain: &Chain,
    now: Instant,
) -> &'m mut ChainState {
    if !chains.contains_key(chain) && chains.len() >= CAPACITY {
        forget_oldest(chains, now, |c| c.used);
    }
    let state = chains.entry(chain.clone()).or_insert(ChainState {
        resume: None,
        in_flight: Vec::new(),
        used: now,
    });
    state.used = now;
    state
}

/// The sequenced batches of one Produce request, each in flight in its
/// chain until its answer is seen ([`Unsettled::settle`]); those whose
/// answers will not be (the request dropped with its client connection)
/// failed, so that their chains do not wait on them.
pub(super) struct Unsettled<'a> {
    producers: &'a UpstreamProducers,
    /// Each batch's base sequence, by client topic and partition.
    bases: HashMap<(String, i32), i32>,
    left: Mutex<HashMap<(String, i32), ChainAt>>,
}

impl<'a> Unsettled<'a> {
    pub(super) fn new(producers: &'a UpstreamProducers) -> Self {
        Unsettled {
            producers,
            bases: HashMap::new(),
            left: Mutex::default(),
        }
    }

    /// Adds the batch for the client's `topic`-`partition` at `at`, in
    /// flight since [`UpstreamProducers::in_order`] let it go.
    pub(super) fn add(&mut self, topic: &str, partition: i32, at: ChainAt) {
        let key = (topic.to_owned(), partition);
        self.bases.insert(key.clone(), at.1);
        self.left
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, at);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.bases.is_empty()
    }

    /// The base sequence of the batch for the client's `topic`-`partition`.
    pub(super) fn base(&self, topic: &str, partition: i32) -> Option<i32> {
        self.bases.get(&(topic.to_owned(), partition)).copied()
    }

    /// Notes the fate of the batch for the client's `topic`-`partition`
    /// (once; later calls do nothing).
    pub(super) fn settle(&self, topic: &str, partition: i32, written: bool) {
        let at = self
            .left
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(topic.to_owned(), partition));
        match at {
            Some(at) if written => self.producers.written(&at),
            Some(at) => self.producers.failed(&at),
            None => {}
        }
    }
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        let left = std::mem::take(self.left.get_mut().unwrap_or_else(|e| e.into_inner()));
        for at in left.values() {
            self.producers.failed(at);
        }
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

    use super::{chain_at, whole_batches, ChainAt, Held, Unsettled, Upstream, UpstreamProducers};

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

    fn at(cluster: &str, partition: i32, producer_id: i64, seq: i32) -> ChainAt {
        chain_at(cluster, "orders", partition, &batch(producer_id, seq, 0)).unwrap()
    }

    #[test]
    fn after_a_failed_batch_later_ones_wait_for_it() {
        let producers = UpstreamProducers::default();
        // Sent to node 1 and answered at once.
        let ok = |seq| {
            let at = at("east", 0, 7, seq);
            let sent = producers.in_order(&at, 1).is_ok();
            if sent {
                producers.written(&at);
            }
            sent
        };
        assert!(ok(0) && ok(2) && ok(4));
        producers.failed(&at("east", 0, 7, 4));
        producers.failed(&at("east", 0, 7, 2));
        // Past the earliest failure: not sent.
        assert_eq!(producers.in_order(&at("east", 0, 7, 4), 1), Err(Held::Behind(2)));
        assert!(!ok(6));
        // Other partitions, clusters and producers go on.
        assert!(producers.in_order(&at("east", 1, 7, 6), 1).is_ok());
        assert!(producers.in_order(&at("west", 0, 7, 6), 1).is_ok());
        assert!(producers.in_order(&at("east", 0, 8, 6), 1).is_ok());
        // An older batch (its answer lost) goes, the failure still waits.
        assert!(ok(0));
        assert!(!ok(4));
        // The failed one again, then the rest.
        assert!(ok(2));
        assert!(ok(4) && ok(6));
        // A later batch written while a failure waits (sent before the
        // failure was known): the failed one was written too, and clients
        // do not send it again.
        assert!(producers.in_order(&at("east", 0, 7, 8), 1).is_ok());
        assert!(producers.in_order(&at("east", 0, 7, 10), 1).is_ok());
        producers.failed(&at("east", 0, 7, 8));
        assert!(!ok(12));
        producers.written(&at("east", 0, 7, 10));
        assert!(ok(12));
        // Batches without a producer id, and transactional ones, have no
        // place in a chain.
        assert!(chain_at("east", "orders", 0, &batch(-1, -1, 0)).is_none());
        assert!(chain_at("east", "orders", 0, &batch(7, 8, 0x10)).is_none());
    }

    #[test]
    fn batches_in_flight_hold_later_ones_to_their_node() {
        let producers = UpstreamProducers::default();
        // Pipelined to node 1: together on one connection, in order.
        assert!(producers.in_order(&at("east", 0, 7, 0), 1).is_ok());
        assert!(producers.in_order(&at("east", 0, 7, 5), 1).is_ok());
        // The leader moved to node 2 while they are in flight: a later
        // batch there could be written before them.
        assert_eq!(
            producers.in_order(&at("east", 0, 7, 9), 2),
            Err(Held::InFlightTo(1))
        );
        // Another partition's batches are free to go elsewhere.
        assert!(producers.in_order(&at("east", 1, 7, 0), 2).is_ok());
        // The first is refused by the old leader: the rest wait for it.
        producers.failed(&at("east", 0, 7, 0));
        producers.failed(&at("east", 0, 7, 5));
        assert_eq!(producers.in_order(&at("east", 0, 7, 9), 2), Err(Held::Behind(0)));
        assert!(producers.in_order(&at("east", 0, 7, 0), 2).is_ok());
        assert!(producers.in_order(&at("east", 0, 7, 5), 2).is_ok());
        producers.written(&at("east", 0, 7, 0));
        producers.written(&at("east", 0, 7, 5));
        assert!(producers.in_order(&at("east", 0, 7, 9), 2).is_ok());
    }

    #[test]
    fn an_abandoned_request_fails_its_batches() {
        let producers = UpstreamProducers::default();
        let first = at("east", 0, 7, 0);
        assert!(producers.in_order(&first, 1).is_ok());
        let mut chained = Unsettled::new(&producers);
        chained.add("orders", 0, first);
        drop(chained);
        // Its client sends it again, wherever the leader is now.
        assert_eq!(producers.in_order(&at("east", 0, 7, 4), 2), Err(Held::Behind(0)));
        assert!(producers.in_order(&at("east", 0, 7, 0), 2).is_ok());
    }

    #[test]
    fn the_map_file_gives_back_every_pair_and_skips_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let (file, known) = super::MapFile::open(dir.path()).unwrap();
        assert!(known.is_empty());
        let pair = |id, epoch, client_epoch| Upstream {
            id,
            epoch,
            client_epoch,
        };
        file.append(&("nj".into(), 7), &pair(100, 0, 0)).unwrap();
        file.append(&("cq".into(), 7), &pair(200, 3, 1)).unwrap();
        // A pair made again (out of epochs) wins over the first.
        file.append(&("nj".into(), 7), &pair(101, 0, 5)).unwrap();
        drop(file);
        // A crash in the middle of an append.
        let path = dir.path().join("upstream-producers");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("nj\t8\t30");
        std::fs::write(&path, text).unwrap();
        let (_file, known) = super::MapFile::open(dir.path()).unwrap();
        let got = |c: &str| {
            known
                .get(&(c.to_owned(), 7))
                .map(|u| (u.id, u.epoch, u.client_epoch))
        };
        assert_eq!(known.len(), 2);
        assert_eq!(got("nj"), Some((101, 0, 5)));
        assert_eq!(got("cq"), Some((200, 3, 1)));
        // Rewritten with the live pairs only.
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        assert_eq!(lines, 2);
    }

    #[test]
    fn truncated_batches_are_not_whole() {
        let two = [batch(7, 0, 0), batch(7, 2, 0)].concat();
        assert!(whole_batches(&two).is_ok());
        assert!(whole_batches(&two[..two.len() - 1]).is_err());
        assert!(whole_batches(&two[..20]).is_err());
        // An older message set is the upstream's to judge.
        let mut v1 = two.clone();
        v1[16] = 1;
        assert!(whole_batches(&v1[..30]).is_ok());
        assert!(whole_batches(&[]).is_ok());
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
