//! The upstream producer map shared by several instances (`instances:`):
//! a compacted topic on the cluster where the instances meet, one record
//! per (cluster, client producer) pair, read by every instance.
//!
//! Instances may make a pair at once (a client's batches for two
//! partitions reach two instances). The topic's one partition orders their
//! claims, and every reader takes the same one: the first record of a pair
//! wins, and a later one wins only when it names the winner it replaces
//! (`prev`: a producer out of upstream epochs gets a new id). So an
//! instance writes its claim, reads the partition up to it, and goes on
//! with whatever won, its own claim or an earlier one; a producer id it
//! got and lost is never used. A loser then writes the winner again, so
//! the pair's newest record (what compaction keeps) is the winner.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use strait_batch::BatchHeader;
use strait_upstream::{log, Cluster, UpstreamError};

use super::producers::{Key, Upstream};

/// The most a fetch of the map reads at once.
const READ_BYTES: i32 = 4 << 20;
/// The most a map batch may hold decompressed.
const MAX_BATCH: usize = 64 << 20;
/// `prev` of a claim that replaces nothing, and of a winner written again.
const NEW: i64 = -1;
const AGAIN: i64 = -2;

/// The shared map: where it lives and what this instance has read of it.
#[derive(Debug)]
pub(super) struct SharedMap {
    cluster: Cluster,
    topic: String,
    read: tokio::sync::Mutex<Reader>,
}

#[derive(Debug, Default)]
struct Reader {
    /// Whether the topic is known to exist and `next` was found.
    ready: bool,
    /// The next offset to read.
    next: i64,
    /// Each pair's winner.
    known: HashMap<Key, Upstream>,
    /// The upstream id of each pair's newest record.
    newest: HashMap<Key, i64>,
}

impl Reader {
    fn apply(&mut self, key: Key, upstream: Upstream, prev: i64) {
        match self.known.get(&key) {
            None => {
                self.known.insert(key.clone(), upstream);
            }
            Some(winner) if winner.id == prev => {
                self.known.insert(key.clone(), upstream);
            }
            Some(_) => {}
        }
        self.newest.insert(key, upstream.id);
    }
}

impl SharedMap {
    /// The map in `topic` on `cluster` (nothing is read until first use).
    pub(super) fn new(cluster: Cluster, topic: String) -> SharedMap {
        SharedMap {
            cluster,
            topic,
            read: tokio::sync::Mutex::default(),
        }
    }

    /// `key`'s upstream producer: the one the map holds (that is not
    /// `replacing`), or else the one `make` gets, if its claim wins.
    pub(super) async fn claim<F, Fut>(
        &self,
        key: &Key,
        replacing: Option<Upstream>,
        make: F,
    ) -> Result<Upstream, UpstreamError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Upstream, UpstreamError>>,
    {
        let stale = |u: &Upstream| replacing.is_some_and(|r| r.id == u.id);
        {
            let mut read = self.read.lock().await;
            self.catch_up(&mut read, 0).await?;
            if let Some(winner) = read.known.get(key).filter(|u| !stale(u)) {
                return Ok(*winner);
            }
        }
        let mine = make().await?;
        let prev = replacing.map_or(NEW, |r| r.id);
        let at = log::append(&self.cluster, &self.topic, 0, batch(key, &mine, prev)).await?;
        let mut read = self.read.lock().await;
        self.catch_up(&mut read, at + 1).await?;
        let winner = *read.known.get(key).expect("the claim was read back");
        if read.newest.get(key) != Some(&winner.id) {
            // Lost to a claim written first: write the winner again, so
            // compaction keeps it.
            log::append(&self.cluster, &self.topic, 0, batch(key, &winner, AGAIN)).await?;
        }
        if winner.id != mine.id {
            tracing::debug!(cluster = %key.0, producer_id = key.1, upstream = winner.id, lost = mine.id, "another instance mapped this producer first");
        }
        Ok(winner)
    }

    /// Reads the map up to its end, and at least to `to`.
    async fn catch_up(&self, read: &mut Reader, to: i64) -> Result<(), UpstreamError> {
        if !read.ready {
            let configs = [("cleanup.policy".to_owned(), "compact".to_owned())];
            log::create_topic(&self.cluster, &self.topic, 1, &configs).await?;
            read.next = log::list_offset(&self.cluster, &self.topic, 0, -2).await?;
            read.ready = true;
        }
        let end = log::list_offset(&self.cluster, &self.topic, 0, -1).await?.max(to);
        while read.next < end {
            let got = log::read(
                &self.cluster,
                &self.topic,
                0,
                read.next,
                Duration::from_millis(10),
                READ_BYTES,
            )
            .await?;
            let before = read.next;
            let from = read.next.max(got.log_start_offset);
            let after = each_record(&got.records, from, |offset, key, value| match parse(key, value) {
                Some((key, upstream, prev)) => read.apply(key, upstream, prev),
                None => {
                    tracing::warn!(topic = %self.topic, offset, "skipping a record of the shared producer map that is not one")
                }
            });
            read.next = after.unwrap_or(from);
            if read.next == before {
                return Err(UpstreamError::Malformed {
                    broker: self.cluster.name().to_owned(),
                    api: kafka_protocol::messages::ApiKey::Fetch,
                    detail: format!(
                        "{}-0: nothing read at offset {before} below its end {end}",
                        self.topic
                    ),
                });
            }
        }
        Ok(())
    }
}

/// Calls `each` with every record's (offset, key, value) at `from` or
/// after in `records`, and returns the offset after the last whole batch
/// (a batch cut short at the end is left for the next read; a control
/// batch, or one that does not parse, is skipped).
fn each_record(records: &Bytes, from: i64, mut each: impl FnMut(i64, &[u8], &[u8])) -> Option<i64> {
    let mut at = 0;
    let mut next = None;
    while at < records.len() {
        let Ok(header) = BatchHeader::parse_whole(&records[at..]) else {
            break;
        };
        let bytes = &records[at..at + header.size()];
        at += header.size();
        if header.last_offset() < from {
            continue;
        }
        next = Some(header.last_offset() + 1);
        if header.is_control() {
            continue;
        }
        let Ok(section) = strait_batch::records_section(bytes, MAX_BATCH) else {
            continue;
        };
        let Ok(parsed) = strait_batch::parse_records(&section, header.record_count) else {
            continue;
        };
        for record in parsed {
            let offset = header.base_offset + record.offset_delta;
            if offset >= from {
                each(
                    offset,
                    record.key.unwrap_or_default(),
                    record.value.unwrap_or_default(),
                );
            }
        }
    }
    next
}

/// A claim's record: key `cluster TAB client`, value `id TAB epoch TAB
/// client_epoch TAB prev`.
fn batch((cluster, client): &Key, u: &Upstream, prev: i64) -> Bytes {
    let key = format!("{cluster}\t{client}");
    let value = format!("{}\t{}\t{}\t{prev}", u.id, u.epoch, u.client_epoch);
    let record = strait_batch::build::record(0, 0, Some(key.as_bytes()), Some(value.as_bytes()), &[]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    Bytes::from(strait_batch::build::with_section(
        strait_batch::build::BatchSpec {
            base_timestamp: now,
            max_timestamp: Some(now),
            ..Default::default()
        },
        1,
        &record,
    ))
}

fn parse(key: &[u8], value: &[u8]) -> Option<(Key, Upstream, i64)> {
    let key = std::str::from_utf8(key).ok()?;
    let value = std::str::from_utf8(value).ok()?;
    let (cluster, client) = key.split_once('\t')?;
    let fields: Vec<&str> = value.split('\t').collect();
    let [id, epoch, client_epoch, prev] = fields[..] else {
        return None;
    };
    Some((
        (cluster.to_owned(), client.parse().ok()?),
        Upstream {
            id: id.parse().ok()?,
            epoch: epoch.parse().ok()?,
            client_epoch: client_epoch.parse().ok()?,
        },
        prev.parse().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(id: i64) -> Upstream {
        Upstream {
            id,
            epoch: 0,
            client_epoch: 0,
        }
    }

    #[test]
    fn the_first_claim_wins_and_a_replacement_must_name_the_winner() {
        let key: Key = ("dc1".into(), 7);
        let mut read = Reader::default();
        read.apply(key.clone(), up(10), NEW);
        read.apply(key.clone(), up(11), NEW);
        assert_eq!(read.known[&key].id, 10);
        assert_eq!(read.newest[&key], 11);
        read.apply(key.clone(), up(10), AGAIN);
        assert_eq!((read.known[&key].id, read.newest[&key]), (10, 10));
        read.apply(key.clone(), up(12), 11);
        assert_eq!(
            read.known[&key].id, 10,
            "a replacement of a loser is no replacement"
        );
        read.apply(key.clone(), up(13), 10);
        assert_eq!(read.known[&key].id, 13);
        // After compaction only the newest record is left: it wins alone.
        let mut compacted = Reader::default();
        compacted.apply(key.clone(), up(13), 10);
        assert_eq!(compacted.known[&key].id, 13);
    }

    #[test]
    fn records_read_back() {
        let key: Key = ("dc-1.a".into(), 1 << 40);
        let u = Upstream {
            id: 5,
            epoch: 3,
            client_epoch: 2,
        };
        let bytes = batch(&key, &u, NEW);
        let mut seen = Vec::new();
        let next = each_record(&bytes, 0, |offset, k, v| seen.push((offset, parse(k, v))));
        assert_eq!(next, Some(1));
        assert_eq!(seen.len(), 1);
        let (offset, parsed) = &seen[0];
        let (k, got, prev) = parsed.clone().unwrap();
        assert_eq!(
            (*offset, k, got.id, got.epoch, got.client_epoch, prev),
            (0, key, 5, 3, 2, NEW)
        );
        assert!(parse(b"no tab", b"1\t2\t3\t4").is_none());
        assert!(parse(b"c\t1", b"1\t2\t3").is_none());
        // A batch cut short is left for later.
        let mut none = 0;
        let next = each_record(&bytes.slice(..bytes.len() - 1), 0, |_, _, _| none += 1);
        assert_eq!((none, next), (0, None));
    }
}
