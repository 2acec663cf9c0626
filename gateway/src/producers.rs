//! Idempotent producers: producer id allocation and per-partition sequence
//! checks (KIP-98).
//!
//! Each batch of an idempotent producer carries its producer id, epoch and
//! the sequence number of its first record. Per partition and producer the
//! broker remembers the last five batches, so that:
//!
//! - a retried batch that was already written is acknowledged again with
//!   its original offset and not appended twice;
//! - a batch whose first sequence does not follow the last one gets
//!   `OUT_OF_ORDER_SEQUENCE_NUMBER`;
//! - a batch from an older epoch gets `INVALID_PRODUCER_EPOCH`.
//!
//! The state is rebuilt on start from the batch headers in the spool (the
//! log is the source of truth), and producer ids are allocated from a
//! counter persisted in blocks, so neither is lost across restarts.

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use kafka_protocol::ResponseError;
use strait_batch::BatchHeader;

/// Batches remembered per producer and partition, as Kafka does.
const REMEMBERED: usize = 5;
/// Producer ids reserved on disk at a time.
const ID_BLOCK: i64 = 1000;

/// A batch already written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Written {
    first_seq: i32,
    last_seq: i32,
    base_offset: u64,
}

#[derive(Debug, Default)]
struct ProducerState {
    epoch: i16,
    batches: VecDeque<Written>,
}

/// What to do with an idempotent batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Append it.
    Append,
    /// Already written at this base offset: acknowledge, do not append.
    Duplicate(u64),
    /// Refuse it with this error.
    Reject(ResponseError),
}

/// Sequence state of one partition.
#[derive(Debug, Default)]
pub struct PartitionProducers {
    producers: Mutex<HashMap<i64, ProducerState>>,
}

impl PartitionProducers {
    /// Decides about the batches of one produce call for this partition.
    /// Calls for one partition must be checked and recorded in append
    /// order (the produce path holds the partition's append lock).
    pub fn check(&self, headers: &[BatchHeader]) -> Check {
        let producers = self.lock();
        let mut verdict = Check::Append;
        for h in headers.iter().filter(|h| h.producer_id >= 0) {
            let last_seq = h.base_sequence.wrapping_add(h.last_offset_delta);
            let this = match producers.get(&h.producer_id) {
                None if h.base_sequence == 0 => Check::Append,
                // Unknown producer that does not start at 0: its earlier
                // batches are gone (or never came).
                None => Check::Reject(ResponseError::OutOfOrderSequenceNumber),
                Some(state) if h.producer_epoch < state.epoch => {
                    Check::Reject(ResponseError::InvalidProducerEpoch)
                }
                Some(state) if h.producer_epoch > state.epoch => {
                    if h.base_sequence == 0 {
                        Check::Append
                    } else {
                        Check::Reject(ResponseError::OutOfOrderSequenceNumber)
                    }
                }
                Some(state) => {
                    if let Some(w) = state
                        .batches
                        .iter()
                        .find(|w| w.first_seq == h.base_sequence && w.last_seq == last_seq)
                    {
                        Check::Duplicate(w.base_offset)
                    } else if state
                        .batches
                        .back()
                        .is_none_or(|w| w.last_seq.wrapping_add(1) == h.base_sequence)
                    {
                        Check::Append
                    } else {
                        Check::Reject(ResponseError::OutOfOrderSequenceNumber)
                    }
                }
            };
            verdict = match (verdict, this) {
                (Check::Reject(e), _) | (_, Check::Reject(e)) => Check::Reject(e),
                (Check::Duplicate(o), _) | (_, Check::Duplicate(o)) => Check::Duplicate(o),
                _ => Check::Append,
            };
        }
        verdict
    }

    /// Records batches written at their stamped base offsets.
    pub fn record(&self, headers: &[BatchHeader], base_offsets: impl IntoIterator<Item = u64>) {
        let mut producers = self.lock();
        for (h, base) in headers.iter().zip(base_offsets) {
            if h.producer_id < 0 {
                continue;
            }
            let state = producers.entry(h.producer_id).or_default();
            if h.producer_epoch != state.epoch {
                state.epoch = h.producer_epoch;
                state.batches.clear();
            }
            state.batches.push_back(Written {
                first_seq: h.base_sequence,
                last_seq: h.base_sequence.wrapping_add(h.last_offset_delta),
                base_offset: base,
            });
            if state.batches.len() > REMEMBERED {
                state.batches.pop_front();
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, ProducerState>> {
        self.producers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Allocates producer ids, durably: the file holds the first id of the next
/// block, so ids are never handed out twice, even after a crash.
#[derive(Debug)]
pub struct ProducerIds {
    path: PathBuf,
    state: Mutex<(i64, i64)>,
}

impl ProducerIds {
    /// Opens (or creates) the counter in `dir`.
    pub fn open(dir: &Path) -> std::io::Result<ProducerIds> {
        let path = dir.join("producer-ids");
        let next = match fs::read_to_string(&path) {
            Ok(text) => text.trim().parse::<i64>().map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: not a number", path.display()),
                )
            })?,
            // A new data directory starts at a random point of a 2^40 range,
            // so that several Strait instances in front of the same clusters
            // hand out different ids (each maps its clients' ids to upstream
            // ones; a client that moves between instances keeps its id).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                (uuid::Uuid::new_v4().as_u64_pair().0 >> 24) as i64
            }
            Err(e) => return Err(e),
        };
        Ok(ProducerIds {
            path,
            // Nothing is reserved yet: the first allocation writes a block.
            state: Mutex::new((next, next)),
        })
    }

    /// A new producer id. Blocking (a small file write once per block).
    pub fn allocate(&self) -> std::io::Result<i64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (next, reserved) = *state;
        if next >= reserved {
            let limit = next + ID_BLOCK;
            crate::files::replace(&self.path, format!("{limit}\n").as_bytes())?;
            state.1 = limit;
        }
        state.0 = next + 1;
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(pid: i64, epoch: i16, seq: i32, records: i32) -> BatchHeader {
        BatchHeader {
            base_offset: 0,
            batch_length: 0,
            partition_leader_epoch: 0,
            crc: 0,
            attributes: 0,
            last_offset_delta: records - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            record_count: records,
        }
    }

    #[test]
    fn sequences_dedupe_and_order() {
        let p = PartitionProducers::default();
        let first = [header(7, 0, 0, 3)];
        assert_eq!(p.check(&first), Check::Append);
        p.record(&first, [100]);
        // The same batch again: the original offset, no append.
        assert_eq!(p.check(&first), Check::Duplicate(100));
        let next = [header(7, 0, 3, 2)];
        assert_eq!(p.check(&next), Check::Append);
        p.record(&next, [103]);
        // A gap.
        assert_eq!(
            p.check(&[header(7, 0, 9, 1)]),
            Check::Reject(ResponseError::OutOfOrderSequenceNumber)
        );
        // An older epoch, a new epoch.
        p.record(&[header(7, 1, 0, 1)], [105]);
        assert_eq!(
            p.check(&[header(7, 0, 5, 1)]),
            Check::Reject(ResponseError::InvalidProducerEpoch)
        );
        assert_eq!(p.check(&[header(7, 1, 1, 1)]), Check::Append);
        // An unknown producer must start at 0.
        assert_eq!(
            p.check(&[header(8, 0, 4, 1)]),
            Check::Reject(ResponseError::OutOfOrderSequenceNumber)
        );
        // Non-idempotent batches are not checked.
        assert_eq!(p.check(&[header(-1, -1, -1, 1)]), Check::Append);
    }

    #[test]
    fn only_the_last_five_batches_are_remembered() {
        let p = PartitionProducers::default();
        for i in 0..7 {
            p.record(&[header(1, 0, i, 1)], [i as u64]);
        }
        assert_eq!(p.check(&[header(1, 0, 6, 1)]), Check::Duplicate(6));
        assert_eq!(p.check(&[header(1, 0, 2, 1)]), Check::Duplicate(2));
        assert_eq!(
            p.check(&[header(1, 0, 1, 1)]),
            Check::Reject(ResponseError::OutOfOrderSequenceNumber)
        );
    }

    #[test]
    fn producer_ids_are_never_reused_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let ids = ProducerIds::open(dir.path()).unwrap();
        let first = ids.allocate().unwrap();
        assert!((0..1 << 40).contains(&first), "{first}");
        assert_eq!(ids.allocate().unwrap(), first + 1);
        drop(ids);
        let ids = ProducerIds::open(dir.path()).unwrap();
        assert_eq!(ids.allocate().unwrap(), first + ID_BLOCK);
        // Another data directory starts elsewhere.
        let other = tempfile::tempdir().unwrap();
        let elsewhere = ProducerIds::open(other.path()).unwrap().allocate().unwrap();
        assert!(
            elsewhere.abs_diff(first) > ID_BLOCK as u64,
            "{first} and {elsewhere}"
        );
    }
}
