//! From source batches, as a Fetch returns them, to target batches, ready to
//! produce.
//!
//! The mirror copies record batches as bytes and decompresses nothing it can
//! avoid. It produces to the target with its own idempotent producer, so a
//! batch it passes through changes only in the fields that producer owns:
//!
//! - `baseOffset` (0) and `partitionLeaderEpoch` (-1), as in any produce
//!   request;
//! - the transactional attribute bit, cleared: the mirror's producer is not
//!   transactional, and the source's transactions are already resolved (see
//!   below);
//! - `producerId`, `producerEpoch` and `baseSequence`, the mirror's own;
//! - and the CRC-32C, which covers the last four.
//!
//! [`stamp_producer`] (or [`TargetBatch::stamped`]) writes them all at produce time,
//! when the caller knows the sequence. The sequence advances by
//! [`TargetBatch::sequence_count`] per batch ([`next_sequence`]).
//!
//! # What is dropped
//!
//! [`PartitionTransformer`] is fed a partition's batches in offset order and
//! leaves out:
//!
//! - **control batches** (attribute bit 5): transaction markers belong to the
//!   source's transactions, and Kafka refuses them from clients anyway;
//! - **aborted transactional batches**. A Fetch at `read_committed` lists the
//!   aborted transactions of the range it returns as (producer id, first
//!   offset). As Kafka's consumer does, a transactional batch (bit 4) of
//!   producer P belongs to an aborted transaction once its last offset
//!   reaches the first offset of one of P's aborted transactions, and until
//!   P's ABORT marker (a control record whose key has type 0) ends it.
//!   Committed transactional batches pass through with the bit cleared;
//! - **records before the position**: a Fetch at offset X returns whole
//!   batches, the first of which may start before X; its records below X are
//!   already on the target;
//! - **empty batches**, which log compaction leaves behind to keep a
//!   producer's state: no records, nothing to produce;
//! - with loop prevention ([`Origins`]), **records whose origin is the
//!   target**: copies of the target's own records, coming back.
//!
//! # When a batch is re-encoded
//!
//! A batch the target would refuse as is, or whose records must be filtered,
//! is decoded (decompressed, at most
//! [`TransformOptions::max_uncompressed_bytes`]) and built anew with the
//! same keys, values, headers, record attributes, timestamps and order, and
//! contiguous offset deltas:
//!
//! - **offset gaps**: a compacted topic's batches keep their offset range
//!   but lose records (`recordCount < lastOffsetDelta + 1`), and Kafka refuses
//!   a produced batch whose count does not match its range. A batch whose
//!   count matches has deltas 0..n-1 if they increase: they are read and
//!   checked in uncompressed batches, which costs no decompression, and
//!   Kafka checked them in compressed batches when they were produced to
//!   the source. Deltas that do not increase are a [`TransformError`];
//! - **records before the position**, dropped from a batch that straddles
//!   it;
//! - **`LogAppendTime`** (bit 3): consumers of such a batch see the batch's
//!   `maxTimestamp` (the source broker's append time) as every record's
//!   timestamp, not the timestamps in the records. The target broker would
//!   keep the records' own timestamps (or stamp its own append time), so the
//!   batch is re-encoded as `CreateTime` with every record's timestamp set to
//!   the source's `maxTimestamp`: consumers of the target see the same
//!   timestamps as consumers of the source;
//! - **too large**: a batch above the target topic's `max.message.bytes`
//!   ([`TransformOptions::max_batch_bytes`]) is split into batches within it.
//!   A record that does not fit alone is an error
//!   ([`TransformError::RecordTooLarge`]): it cannot be mirrored.
//! - **loop prevention** ([`Origins`]): every batch, so that each record
//!   carries its origin and the target's own are left out;
//! - **merged**: with the mirror's `coalesce_below`, consecutive small
//!   target batches of one fetch are merged into one ([`coalesce_runs`]),
//!   so that a target broker appends fewer, larger batches.
//!
//! A re-encoded batch keeps the source's codec. If its encoder fails (see
//! [`compression::compress`]), the batch is written uncompressed instead;
//! and a single record that fits the limit only uncompressed (compression
//! made it larger) is written uncompressed too. Its base timestamp is its
//! first record's, its max timestamp the largest of its records', as Kafka's
//! producers write them.
//!
//! Every [`TargetBatch`] says whether it was passed through or re-encoded
//! (and why), and which source offsets it holds ([`SourceRange`]): with
//! contiguous offsets on the target and exact source offsets for its first
//! and last record, target offsets map back to source offsets exactly.
//!
//! # Fingerprints and determinism
//!
//! The same source batches, position, options and aborted lists always give
//! byte-identical target batches: the encoders have no randomness and no
//! time stamps (the gzip header has none). On restart the mirror compares
//! [`fingerprint`]s of the target partition's tail with those of the
//! batches it would produce. A fingerprint covers a batch's content and
//! leaves out what the mirror rewrites (see above) and what a target broker
//! may rewrite when it stores the batch as produced: the timestamp-type bit
//! and `maxTimestamp`, which a topic with `message.timestamp.type =
//! LogAppendTime` overwrites. The records' own timestamps are covered.
//! Fingerprints can only match if the target stores batches as produced:
//! a target topic whose `compression.type` differs from the batch's codec
//! (and is not `producer`) recompresses them. An upgrade of an encoder crate
//! (flate2, snap, lz4_flex, ruzstd) may change the bytes of re-encoded
//! compressed batches, and with them their fingerprints.
//!
//! Malformed source data is a [`TransformError`] whose message says that
//! the source sent it, never a panic.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use strait_batch::compression::{self, DecompressError};
use strait_batch::{self as wire, build, BatchError, BatchHeader, Compression, RawRecord, RecordError};
use strait_batch::{stamp_producer, HEADER_LEN, LOG_APPEND_TIME, LOG_OVERHEAD, TRANSACTIONAL};

pub use strait_batch::ProducerStamp;

/// Control record type of an ABORT marker.
const ABORT: i16 = 0;

/// A source batch the mirror cannot turn into target batches.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransformError {
    /// The bytes of a fetch response are not a valid record batch.
    #[error("the source sent a bad record batch at byte {position} of its fetched records: {error}")]
    BadBatch {
        /// Where the batch starts in the fetched records.
        position: usize,
        /// What is wrong with it.
        error: BatchError,
    },
    /// The source holds messages in the pre-0.11 format (magic 0 or 1).
    #[error(
        "the source sent a message set in the old format (magic {magic}) at byte {position} of its \
         fetched records: the mirror copies record batches (magic 2, Kafka 0.11 and later) only"
    )]
    OldFormat {
        /// Where the message starts in the fetched records.
        position: usize,
        /// Its magic byte.
        magic: i8,
    },
    /// The header's offsets are impossible (negative, or beyond `i64`).
    #[error(
        "the source sent a record batch with impossible offsets at byte {position} of its fetched \
         records: base offset {base_offset}, last offset delta {last_offset_delta}"
    )]
    BadOffsetRange {
        /// Where the batch starts in the fetched records.
        position: usize,
        /// The `baseOffset` field.
        base_offset: i64,
        /// The `lastOffsetDelta` field.
        last_offset_delta: i32,
    },
    /// The batch names a compression codec Kafka does not define.
    #[error("the source's batch at offset {base_offset} names compression codec {codec}, which Kafka does not define")]
    UnknownCodec {
        /// The batch's base offset.
        base_offset: i64,
        /// The codec id in its attributes.
        codec: u8,
    },
    /// The records do not decode (or do not decompress).
    #[error("the source's batch at offset {base_offset} holds malformed records: {error}")]
    BadRecords {
        /// The batch's base offset.
        base_offset: i64,
        /// What the decoder said.
        error: RecordError,
    },
    /// The records' offset deltas are not increasing within the batch's
    /// offset range.
    #[error(
        "the source's batch at offset {base_offset} holds malformed records: record {index} has \
         offset delta {offset_delta}, {what}"
    )]
    BadOffsets {
        /// The batch's base offset.
        base_offset: i64,
        /// Which record.
        index: usize,
        /// Its offset delta.
        offset_delta: i64,
        /// What is wrong with it.
        what: &'static str,
    },
    /// A control batch whose control record key does not parse.
    #[error("the source's control batch at offset {base_offset} holds a malformed control record: {what}")]
    BadControlRecord {
        /// The batch's base offset.
        base_offset: i64,
        /// What is wrong with it.
        what: &'static str,
    },
    /// The records section expands beyond the mirror's limit.
    #[error(
        "the source's batch at offset {base_offset} expands beyond {limit} bytes when decompressed \
         (the mirror's max_uncompressed_bytes)"
    )]
    TooLargeUncompressed {
        /// The batch's base offset.
        base_offset: i64,
        /// The limit.
        limit: usize,
    },
    /// One record alone makes a batch above the target's limit.
    #[error(
        "the source's record at offset {offset} cannot be mirrored: alone in a batch it takes {size} \
         bytes, above the target topic's max.message.bytes ({limit})"
    )]
    RecordTooLarge {
        /// The record's source offset.
        offset: i64,
        /// Size of the smallest batch that holds it.
        size: usize,
        /// The limit ([`TransformOptions::max_batch_bytes`]).
        limit: usize,
    },
}

/// Iterates over the record batches of a Fetch response's records, yielding
/// whole batches and stopping cleanly at a trailing partial one (Kafka cuts
/// a response at its `max_bytes`, mid-batch). Stops after the first error.
///
/// A response that holds only part of one batch yields nothing and leaves
/// all its bytes in [`FetchedBatches::partial_bytes`]: the fetch must ask
/// for more bytes (Kafka 0.10.1 and later always return at least one whole
/// batch, so this comes from old brokers only).
#[derive(Debug, Clone)]
pub struct FetchedBatches<'a> {
    buf: &'a [u8],
    pos: usize,
    partial: usize,
    done: bool,
}

impl<'a> FetchedBatches<'a> {
    /// Iterates over `records`, the records field of one partition of a
    /// Fetch response.
    pub fn new(records: &'a [u8]) -> Self {
        FetchedBatches {
            buf: records,
            pos: 0,
            partial: 0,
            done: false,
        }
    }

    /// Bytes of the partial batch that ended the records, once the iterator
    /// has returned `None` (0 if there is none, or before that).
    pub fn partial_bytes(&self) -> usize {
        self.partial
    }

    /// Bytes of the whole batches yielded so far.
    pub fn consumed_bytes(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for FetchedBatches<'a> {
    type Item = Result<SourceBatch<'a>, TransformError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let rest = &self.buf[self.pos..];
        let declared = rest
            .get(8..LOG_OVERHEAD)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        let partial = match declared {
            None => !rest.is_empty(),
            Some(length) => length >= 0 && LOG_OVERHEAD + length as usize > rest.len(),
        };
        if rest.is_empty() || partial {
            self.partial = rest.len();
            self.done = true;
            return None;
        }
        match SourceBatch::at(self.buf, self.pos) {
            Ok(batch) => {
                self.pos += batch.bytes.len();
                Some(Ok(batch))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// One whole, checked (CRC included) record batch from the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceBatch<'a> {
    bytes: &'a [u8],
    header: BatchHeader,
}

impl<'a> SourceBatch<'a> {
    /// Checks the batch at the start of `bytes` (header, length, CRC,
    /// offsets); anything after it is ignored.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, TransformError> {
        Self::at(bytes, 0)
    }

    /// The batch at byte `position` of `buf` (for errors that say where).
    fn at(buf: &'a [u8], position: usize) -> Result<Self, TransformError> {
        let bytes = &buf[position..];
        let header = wire::validate(bytes).map_err(|error| match error {
            BatchError::Magic(magic) if magic == 0 || magic == 1 => {
                TransformError::OldFormat { position, magic }
            }
            error => TransformError::BadBatch { position, error },
        })?;
        if header.base_offset < 0
            || header
                .base_offset
                .checked_add(header.last_offset_delta.into())
                .is_none()
        {
            return Err(TransformError::BadOffsetRange {
                position,
                base_offset: header.base_offset,
                last_offset_delta: header.last_offset_delta,
            });
        }
        Ok(SourceBatch {
            bytes: &bytes[..header.size()],
            header,
        })
    }

    /// The batch's bytes, exactly.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Its header.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// Its last offset (base offset plus last offset delta).
    pub fn last_offset(&self) -> i64 {
        self.header.last_offset()
    }
}

/// An aborted transaction, as a Fetch response (`read_committed`) lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AbortedTransaction {
    /// The transactional producer.
    pub producer_id: i64,
    /// Offset of the transaction's first batch.
    pub first_offset: i64,
}

/// Settings of a [`PartitionTransformer`], from the target topic and the
/// mirror's own limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransformOptions {
    /// Largest batch the target accepts, in bytes, header included: the
    /// target topic's `max.message.bytes` (Kafka's default: 1 MiB + 12).
    pub max_batch_bytes: usize,
    /// Most bytes a compressed source batch may expand to when it must be
    /// re-encoded; a larger one is [`TransformError::TooLargeUncompressed`].
    pub max_uncompressed_bytes: usize,
}

impl TransformOptions {
    /// Default for [`TransformOptions::max_uncompressed_bytes`]: 256 MiB.
    pub const DEFAULT_MAX_UNCOMPRESSED_BYTES: usize = 256 << 20;

    /// Options for a target topic whose `max.message.bytes` is
    /// `max_batch_bytes`, with the default decompression limit.
    pub fn new(max_batch_bytes: usize) -> Self {
        TransformOptions {
            max_batch_bytes,
            max_uncompressed_bytes: Self::DEFAULT_MAX_UNCOMPRESSED_BYTES,
        }
    }
}

/// Why a source batch gives no target batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Skipped {
    /// A control batch (a transaction marker).
    Control,
    /// A transactional batch of an aborted transaction.
    Aborted,
    /// Every record lies before the position (or the batch was fed before).
    BeforePosition,
    /// No records (left by log compaction).
    Empty,
    /// Every record came from the target in the first place (loop
    /// prevention, [`Origins`]).
    FromTarget,
}

/// Why a batch was re-encoded rather than passed through (one or more).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ReEncodeReasons {
    /// Offset gaps: fewer records than the batch's offset range holds
    /// (log compaction removed some).
    pub offset_gaps: bool,
    /// Records before the position were dropped.
    pub before_position: bool,
    /// Converted from `LogAppendTime` to `CreateTime`.
    pub log_append_time: bool,
    /// The source batch is above [`TransformOptions::max_batch_bytes`].
    pub too_large: bool,
    /// Small batches merged into one ([`coalesce`]).
    pub coalesced: bool,
    /// Loop prevention ([`Origins`]): records marked with their origin,
    /// or left out for theirs.
    pub origins: bool,
}

impl ReEncodeReasons {
    fn any(&self) -> bool {
        self.offset_gaps
            || self.before_position
            || self.log_append_time
            || self.too_large
            || self.coalesced
            || self.origins
    }
}

/// The record header loop prevention marks records with: the Kafka cluster
/// id of the cluster a record was first written to.
pub const ORIGIN_HEADER: &[u8] = b"strait.origin";

/// Loop prevention (a mirror's `prevent_loops`), for two mirrors in
/// opposite directions that keep topic names: every record leaves with an
/// [`ORIGIN_HEADER`] (the source's cluster id, added where the record has
/// none), and a record whose origin is the target is left out, since it is
/// a copy of one the target had first. Every batch is re-encoded.
///
/// A record left out is a gap in the source offsets the target batches
/// hold ([`SourceRange`]), as log compaction leaves them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origins {
    /// The source's cluster id: the origin of records that carry none.
    pub source: Arc<[u8]>,
    /// The target's cluster id: records from there are left out.
    pub target: Arc<[u8]>,
}

impl Origins {
    /// What becomes of `record`: left out (`None`), or kept with the header
    /// to add to it (`Some(None)`: it has its origin already).
    fn mark<'o>(&'o self, record: &RawRecord<'_>) -> Option<Option<wire::Header<'o>>> {
        match record.headers.get(ORIGIN_HEADER) {
            Some(Some(origin)) if origin == &*self.target => None,
            Some(_) => Some(None),
            None => Some(Some(wire::Header {
                key: ORIGIN_HEADER,
                value: Some(&self.source),
            })),
        }
    }

    /// Whether the batch at the start of `batch`, read on the target, holds
    /// a record the target's own producers wrote (without an origin, or
    /// with the target's) or is a control batch of theirs. With names kept
    /// both ways such batches sit among the mirror's; a batch whose records
    /// all came from elsewhere is a mirror's. Decompresses at most `limit`
    /// bytes.
    pub fn written_on_target(&self, batch: &[u8], limit: usize) -> Result<bool, RecordError> {
        let header = BatchHeader::parse(batch)?;
        if header.is_control() {
            return Ok(true);
        }
        let section = wire::records_section(batch, limit)?;
        let records = wire::parse_raw_records(&section, header.record_count)?;
        Ok(records.iter().any(|r| self.mark(r) != Some(None)))
    }
}

/// How a target batch came from its source batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TargetKind {
    /// The source's bytes; only the mirror's fields change when stamped.
    PassedThrough,
    /// Built anew from the source's records.
    ReEncoded(ReEncodeReasons),
}

/// The source offsets a target batch holds: its records, in order, are
/// `record_count` of the source's records from `first_offset` to
/// `last_offset` (both included; with gaps where the source had them,
/// which [`SourceRange::runs`] says exactly).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SourceRange {
    /// Source offset of the first record.
    pub first_offset: i64,
    /// Source offset of the last record.
    pub last_offset: i64,
    /// Number of records.
    pub record_count: i32,
    /// With gaps: the runs of consecutive offsets (first, count), in
    /// order; `None` when the offsets are consecutive.
    gapped: Option<Arc<[(i64, i64)]>>,
}

impl SourceRange {
    /// Records at consecutive offsets from `first_offset`.
    pub fn consecutive(first_offset: i64, record_count: i32) -> SourceRange {
        SourceRange {
            first_offset,
            last_offset: first_offset + i64::from(record_count) - 1,
            record_count,
            gapped: None,
        }
    }

    /// Records at `offsets` (increasing, at least one).
    pub fn of_offsets(offsets: impl IntoIterator<Item = i64>) -> SourceRange {
        let mut runs: Vec<(i64, i64)> = Vec::new();
        for offset in offsets {
            match runs.last_mut() {
                Some((first, count)) if *first + *count == offset => *count += 1,
                _ => runs.push((offset, 1)),
            }
        }
        Self::of_runs(runs)
    }

    /// The records of `ranges`, one after the other (each after the last).
    pub fn joined<'r>(ranges: impl IntoIterator<Item = &'r SourceRange>) -> SourceRange {
        let mut runs: Vec<(i64, i64)> = Vec::new();
        for (first, count) in ranges.into_iter().flat_map(SourceRange::runs) {
            match runs.last_mut() {
                Some((f, c)) if *f + *c == first => *c += count,
                _ => runs.push((first, count)),
            }
        }
        Self::of_runs(runs)
    }

    fn of_runs(runs: Vec<(i64, i64)>) -> SourceRange {
        let (first, _) = *runs.first().expect("a range holds records");
        let (last_first, last_count) = *runs.last().expect("a range holds records");
        let count: i64 = runs.iter().map(|(_, c)| c).sum();
        SourceRange {
            first_offset: first,
            last_offset: last_first + last_count - 1,
            record_count: count as i32,
            gapped: (runs.len() > 1).then(|| runs.into()),
        }
    }

    /// The runs of consecutive source offsets its records are at: (first
    /// offset, count), in order.
    pub fn runs(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        let whole = self
            .gapped
            .is_none()
            .then_some((self.first_offset, i64::from(self.record_count)));
        whole
            .into_iter()
            .chain(self.gapped.iter().flat_map(|runs| runs.iter().copied()))
    }
}

/// A batch to produce to the target: a valid record batch (CRC included)
/// whose mirror-owned fields [`stamp_producer`] sets at produce time. Until then a
/// passed-through batch still carries the source's offsets, producer fields
/// and transactional bit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetBatch<'a> {
    bytes: Cow<'a, [u8]>,
    kind: TargetKind,
    source: SourceRange,
    last_offset_delta: i32,
}

impl<'a> TargetBatch<'a> {
    /// The batch, unstamped.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The batch, unstamped: borrowed from the fetched records when passed
    /// through, owned when re-encoded.
    pub fn into_bytes(self) -> Cow<'a, [u8]> {
        self.bytes
    }

    /// Passed through or re-encoded.
    pub fn kind(&self) -> TargetKind {
        self.kind
    }

    /// The source records it holds.
    pub fn source(&self) -> &SourceRange {
        &self.source
    }

    /// Number of records.
    pub fn record_count(&self) -> i32 {
        self.source.record_count
    }

    /// How far the producer's sequence advances with this batch
    /// (`lastOffsetDelta + 1`, which is the record count of every batch the
    /// mirror emits).
    pub fn sequence_count(&self) -> i32 {
        self.last_offset_delta + 1
    }

    /// A copy of the batch with the mirror's fields written
    /// ([`stamp_producer`]), ready for a produce request.
    pub fn stamped(&self, producer: ProducerStamp) -> Vec<u8> {
        let mut bytes = self.bytes.to_vec();
        stamp_producer(&mut bytes, producer).expect("a target batch holds one whole batch");
        bytes
    }

    /// Its [`fingerprint`].
    pub fn fingerprint(&self) -> Fingerprint {
        fingerprint(&self.bytes).expect("a target batch holds one whole batch")
    }

    /// The same batch, owning its bytes.
    pub fn into_owned(self) -> TargetBatch<'static> {
        TargetBatch {
            bytes: Cow::Owned(self.bytes.into_owned()),
            kind: self.kind,
            source: self.source,
            last_offset_delta: self.last_offset_delta,
        }
    }
}

/// What became of one source batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transformed<'a> {
    /// Produce these batches, in order (at least one).
    Produce {
        /// The target batches.
        batches: Vec<TargetBatch<'a>>,
        /// Source offset to go on from.
        next_offset: i64,
    },
    /// Nothing to produce.
    Skip {
        /// Why.
        reason: Skipped,
        /// Source offset to go on from.
        next_offset: i64,
    },
}

impl<'a> Transformed<'a> {
    /// The source offset after this batch: the transformer's position, where
    /// the next fetch starts.
    pub fn next_offset(&self) -> i64 {
        match self {
            Transformed::Produce { next_offset, .. } | Transformed::Skip { next_offset, .. } => *next_offset,
        }
    }

    /// The batches to produce (none when skipped).
    pub fn batches(&self) -> &[TargetBatch<'a>] {
        match self {
            Transformed::Produce { batches, .. } => batches,
            Transformed::Skip { .. } => &[],
        }
    }

    /// The batches to produce, owned.
    pub fn into_batches(self) -> Vec<TargetBatch<'a>> {
        match self {
            Transformed::Produce { batches, .. } => batches,
            Transformed::Skip { .. } => Vec::new(),
        }
    }
}

/// Turns one source partition's batches into target batches: the caller
/// holds one per partition, feeds it each Fetch response's aborted
/// transactions ([`PartitionTransformer::add_aborted`]) and then each of its
/// batches in order ([`PartitionTransformer::transform`]). The fetches must
/// be `read_committed` (isolation level 1): only they stop short of open
/// transactions and list the aborted ones.
///
/// It tracks the position (the next source offset to mirror: records below
/// it are dropped) and the transactions under way, which may span Fetch
/// responses. It follows one forward stream of batches: when the mirror
/// fetches from an earlier offset again, it makes a new one. A batch that
/// fails to transform leaves the state as it was.
#[derive(Debug, Clone)]
pub struct PartitionTransformer {
    options: TransformOptions,
    origins: Option<Arc<Origins>>,
    /// Records left out so far because the target is their origin.
    looped: u64,
    position: i64,
    /// One past the last offset of the last batch fed (`None` before any).
    fed_to: Option<i64>,
    /// Aborted transactions not reached yet: (first offset, producer id).
    pending: BTreeSet<(i64, i64)>,
    /// Producers whose aborted transaction is under way.
    aborting: BTreeSet<i64>,
}

impl PartitionTransformer {
    /// A transformer that mirrors records from source offset `position` on.
    pub fn new(position: i64, options: TransformOptions) -> Self {
        PartitionTransformer {
            options,
            origins: None,
            looped: 0,
            position,
            fed_to: None,
            pending: BTreeSet::new(),
            aborting: BTreeSet::new(),
        }
    }

    /// The same transformer with loop prevention ([`Origins`]) on or off.
    pub fn with_origins(mut self, origins: Option<Arc<Origins>>) -> Self {
        self.origins = origins;
        self
    }

    /// A new transformer with the same settings, from `position` (the
    /// mirror fetches from another offset).
    pub fn starting_at(&self, position: i64) -> Self {
        PartitionTransformer::new(position, self.options).with_origins(self.origins.clone())
    }

    /// Records left out so far because the target is their origin.
    pub fn looped_records(&self) -> u64 {
        self.looped
    }

    /// Loop prevention's cluster ids, when it is on.
    pub fn origins(&self) -> Option<&Arc<Origins>> {
        self.origins.as_ref()
    }

    /// The next source offset to mirror (where the next fetch starts).
    pub fn position(&self) -> i64 {
        self.position
    }

    /// The options.
    pub fn options(&self) -> TransformOptions {
        self.options
    }

    /// Changes the options (the target topic's `max.message.bytes` changed).
    pub fn set_options(&mut self, options: TransformOptions) {
        self.options = options;
    }

    /// Takes a Fetch response's aborted transactions; call it before
    /// transforming the response's batches. A response lists every aborted
    /// transaction that overlaps the offsets it returns, so a transaction
    /// already under way is listed again: entries that start before the
    /// batches already fed are known and ignored, repeats are harmless.
    pub fn add_aborted(&mut self, aborted: &[AbortedTransaction]) {
        for txn in aborted {
            if self.fed_to.is_none_or(|fed_to| txn.first_offset >= fed_to) {
                self.pending.insert((txn.first_offset, txn.producer_id));
            }
        }
    }

    /// Transforms the next source batch of the partition (see the module
    /// documentation for what is passed through, re-encoded or dropped).
    pub fn transform<'a>(&mut self, batch: &SourceBatch<'a>) -> Result<Transformed<'a>, TransformError> {
        let h = batch.header;
        let last = h.last_offset();
        let next = last.saturating_add(1);
        if self.fed_to.is_some_and(|fed_to| last < fed_to) {
            // Fed before: its transaction state is counted already.
            return Ok(Transformed::Skip {
                reason: Skipped::BeforePosition,
                next_offset: self.position,
            });
        }
        // Aborted transactions this batch reaches (Kafka's consumer counts
        // a transaction from the first batch whose last offset reaches it).
        let reached: Vec<i64> = self.pending.range(..=(last, i64::MAX)).map(|&(_, p)| p).collect();
        let mut ends_abort = false;
        let outcome = if h.is_control() {
            ends_abort = is_abort_marker(batch, self.options.max_uncompressed_bytes)?;
            Err(Skipped::Control)
        } else if h.is_transactional()
            && (self.aborting.contains(&h.producer_id) || reached.contains(&h.producer_id))
        {
            Err(Skipped::Aborted)
        } else if last < self.position {
            Err(Skipped::BeforePosition)
        } else if h.record_count == 0 {
            Err(Skipped::Empty)
        } else {
            self.convert(batch)?
        };
        // Nothing failed: commit the state.
        self.pending.retain(|&(first, _)| first > last);
        self.aborting.extend(reached);
        if ends_abort {
            self.aborting.remove(&h.producer_id);
        }
        self.fed_to = Some(next);
        self.position = self.position.max(next);
        let next_offset = self.position;
        Ok(match outcome {
            Ok(batches) => Transformed::Produce { batches, next_offset },
            Err(reason) => Transformed::Skip { reason, next_offset },
        })
    }

    /// The target batches of a data batch that is neither aborted nor
    /// wholly before the position, or why none is left.
    fn convert<'a>(
        &mut self,
        batch: &SourceBatch<'a>,
    ) -> Result<Result<Vec<TargetBatch<'a>>, Skipped>, TransformError> {
        let h = batch.header;
        let codec = match h.compression() {
            Compression::Unknown(codec) => {
                return Err(TransformError::UnknownCodec {
                    base_offset: h.base_offset,
                    codec,
                })
            }
            codec => codec,
        };
        let mut reasons = ReEncodeReasons {
            offset_gaps: i64::from(h.record_count) != i64::from(h.last_offset_delta) + 1,
            before_position: h.base_offset < self.position,
            log_append_time: h.log_append_time(),
            too_large: batch.bytes.len() > self.options.max_batch_bytes,
            coalesced: false,
            origins: self.origins.is_some(),
        };
        let section = if reasons.any() || codec == Compression::None {
            Some(
                wire::records_section(batch.bytes, self.options.max_uncompressed_bytes)
                    .map_err(|e| records_error(&h, e))?,
            )
        } else {
            None
        };
        let records = match &section {
            Some(section) => {
                let records =
                    wire::parse_raw_records(section, h.record_count).map_err(|e| records_error(&h, e))?;
                check_offsets(&h, &records)?;
                // Increasing deltas within the range: 0..n-1 unless there
                // are gaps, which the count shows.
                Some(records)
            }
            None => None,
        };
        let Some(records) = records.filter(|_| reasons.any()) else {
            return Ok(Ok(vec![TargetBatch {
                bytes: Cow::Borrowed(batch.bytes),
                kind: TargetKind::PassedThrough,
                source: SourceRange::consecutive(h.base_offset, h.record_count),
                last_offset_delta: h.last_offset_delta,
            }]));
        };
        let timestamp = |record: &RawRecord<'_>| {
            if h.log_append_time() {
                h.max_timestamp
            } else {
                h.base_timestamp.wrapping_add(record.timestamp_delta)
            }
        };
        let after: Vec<&RawRecord<'_>> = records
            .iter()
            .filter(|r| h.base_offset + r.offset_delta >= self.position)
            .collect();
        reasons.before_position = after.len() < records.len();
        if after.is_empty() {
            return Ok(Err(Skipped::BeforePosition));
        }
        let fresh = after.len();
        let kept: Vec<Kept<'_>> = after
            .into_iter()
            .filter_map(|record| {
                let extra = match &self.origins {
                    Some(origins) => origins.mark(record)?,
                    None => None,
                };
                Some(Kept {
                    offset: h.base_offset + record.offset_delta,
                    timestamp: timestamp(record),
                    record,
                    extra,
                })
            })
            .collect();
        let looped = (fresh - kept.len()) as u64;
        if kept.is_empty() {
            self.looped += looped;
            return Ok(Err(Skipped::FromTarget));
        }
        let ratio = match &section {
            Some(Cow::Owned(plain)) if !plain.is_empty() => (batch.bytes.len() - HEADER_LEN, plain.len()),
            _ => (1, 1),
        };
        let kind = TargetKind::ReEncoded(reasons);
        let batches = pack(&kept, codec, ratio, self.options.max_batch_bytes)?
            .into_iter()
            .map(|(bytes, range)| TargetBatch {
                bytes: Cow::Owned(bytes),
                kind,
                source: SourceRange::of_offsets(kept[range.start..range.end].iter().map(|k| k.offset)),
                last_offset_delta: (range.end - range.start - 1) as i32,
            })
            .collect::<Vec<_>>();
        self.looped += looped;
        Ok(Ok(batches))
    }
}

fn records_error(h: &BatchHeader, error: RecordError) -> TransformError {
    match error {
        RecordError::Decompress(DecompressError::TooLarge { limit, .. }) => {
            TransformError::TooLargeUncompressed {
                base_offset: h.base_offset,
                limit,
            }
        }
        error => TransformError::BadRecords {
            base_offset: h.base_offset,
            error,
        },
    }
}

/// Checks that the records' offset deltas increase within the batch's range.
fn check_offsets(h: &BatchHeader, records: &[RawRecord<'_>]) -> Result<(), TransformError> {
    let mut previous = -1;
    for (index, record) in records.iter().enumerate() {
        let bad = |what| TransformError::BadOffsets {
            base_offset: h.base_offset,
            index,
            offset_delta: record.offset_delta,
            what,
        };
        if record.offset_delta <= previous {
            return Err(bad("not above the previous record's"));
        }
        if record.offset_delta > i64::from(h.last_offset_delta) {
            return Err(bad("beyond the batch's last offset delta"));
        }
        previous = record.offset_delta;
    }
    Ok(())
}

/// Whether a control batch is an ABORT marker (Kafka's consumer reads the
/// first control record's key: version, then type; 0 is ABORT, 1 COMMIT).
fn is_abort_marker(batch: &SourceBatch<'_>, limit: usize) -> Result<bool, TransformError> {
    let h = batch.header;
    let bad = |what| TransformError::BadControlRecord {
        base_offset: h.base_offset,
        what,
    };
    if h.record_count == 0 {
        return Ok(false);
    }
    let section = wire::records_section(batch.bytes, limit).map_err(|e| records_error(&h, e))?;
    let records = wire::parse_raw_records(&section, h.record_count).map_err(|e| records_error(&h, e))?;
    let key = records.first().and_then(|r| r.key).ok_or(bad("no key"))?;
    let (version, kind) = match key {
        [v0, v1, t0, t1, ..] => (i16::from_be_bytes([*v0, *v1]), i16::from_be_bytes([*t0, *t1])),
        _ => return Err(bad("key shorter than 4 bytes")),
    };
    if version < 0 {
        return Err(bad("negative key version"));
    }
    Ok(kind == ABORT)
}

/// A record kept for a re-encoded batch: its source offset, its timestamp as
/// consumers see it, its fields, and a header to add ([`Origins`]).
#[derive(Debug, Clone, Copy)]
struct Kept<'r> {
    offset: i64,
    timestamp: i64,
    record: &'r RawRecord<'r>,
    extra: Option<wire::Header<'r>>,
}

/// One batch of [`pack`]: its bytes and the records it holds.
type Packed = (Vec<u8>, std::ops::Range<usize>);

/// Splits `kept` into batches of `codec` within `limit` bytes, in order.
/// `ratio` (compressed, uncompressed) estimates what the codec makes of the
/// records. Returns each batch's bytes and the records it holds.
fn pack(
    kept: &[Kept<'_>],
    codec: Compression,
    ratio: (usize, usize),
    limit: usize,
) -> Result<Vec<Packed>, TransformError> {
    let budget = limit.saturating_sub(HEADER_LEN) as u128;
    let mut out = Vec::new();
    let mut start = 0;
    while start < kept.len() {
        // The most records whose estimated section fits.
        let mut end = fill(kept, start, kept.len(), |raw| {
            raw as u128 * ratio.0 as u128 <= budget * ratio.1 as u128
        });
        loop {
            let encoded = encode(&kept[start..end], codec);
            if encoded.len() <= limit {
                out.push((encoded, start..end));
                start = end;
                break;
            }
            if end - start == 1 {
                // One record: uncompressed, if compression made it larger.
                let plain = encode(&kept[start..end], Compression::None);
                if plain.len() <= limit {
                    out.push((plain, start..end));
                    start = end;
                    break;
                }
                return Err(TransformError::RecordTooLarge {
                    offset: kept[start].offset,
                    size: plain.len().min(encoded.len()),
                    limit,
                });
            }
            // Too large: keep the share of the records the measured ratio
            // lets fit, less a margin, and at least one record fewer.
            let raw_total = section_len(&kept[start..end]) as u128;
            let section = (encoded.len() - HEADER_LEN) as u128;
            let target = raw_total * budget * 15 / (section * 16).max(1);
            end = fill(kept, start, end - 1, |raw| raw as u128 <= target).max(start + 1);
        }
    }
    Ok(out)
}

/// The largest `end` in `start + 1..=max_end` (at least `start + 1`) whose
/// uncompressed records section `fits`.
fn fill(kept: &[Kept<'_>], start: usize, max_end: usize, fits: impl Fn(usize) -> bool) -> usize {
    let base = kept[start].timestamp;
    let mut raw = 0usize;
    let mut end = start;
    while end < max_end {
        let size = record_len(&kept[end], base, (end - start) as i64);
        if end > start && !fits(raw + size) {
            break;
        }
        raw += size;
        end += 1;
    }
    end.max(start + 1)
}

/// Uncompressed records section of `kept` as one batch.
fn section_len(kept: &[Kept<'_>]) -> usize {
    let base = kept[0].timestamp;
    kept.iter()
        .enumerate()
        .map(|(i, k)| record_len(k, base, i as i64))
        .sum()
}

/// Builds one batch of `kept` (offset deltas 0..n-1, base timestamp the
/// first record's), compressed with `codec`, or uncompressed if its encoder
/// fails. Unstamped: offset 0, leader epoch -1, no producer.
fn encode(kept: &[Kept<'_>], codec: Compression) -> Vec<u8> {
    let base_timestamp = kept[0].timestamp;
    let max_timestamp = kept.iter().map(|k| k.timestamp).max().unwrap_or(base_timestamp);
    let mut section = Vec::with_capacity(section_len(kept));
    for (i, k) in kept.iter().enumerate() {
        k.record.write(
            &mut section,
            k.timestamp.wrapping_sub(base_timestamp),
            i as i64,
            k.extra,
        );
    }
    let (codec, section) = match codec {
        Compression::None => (codec, section),
        _ => match compression::compress(codec, &section) {
            Ok(packed) => (codec, packed),
            Err(_) => (Compression::None, section),
        },
    };
    let spec = build::BatchSpec {
        base_timestamp,
        max_timestamp: Some(max_timestamp),
        // CreateTime, not transactional.
        attributes: codec.bits(),
        ..build::BatchSpec::default()
    };
    let mut out = build::with_section(spec, kept.len() as i32, &section);
    wire::stamp(&mut out, 0, -1);
    out
}

/// Encoded size of a record (length prefix included) with these deltas.
fn record_len(k: &Kept<'_>, base_timestamp: i64, offset_delta: i64) -> usize {
    k.record
        .encoded_len(k.timestamp.wrapping_sub(base_timestamp), offset_delta, k.extra)
}

/// Merges runs of consecutive small target batches (each under `below`
/// bytes, of one codec, together within `up_to` bytes and the target's
/// `max.message.bytes`) into one batch per run ([`coalesce`]); other
/// batches, and runs of one, stay as they are. Which batches a run takes
/// depends on what one fetch brought, so it is not the same after a
/// restart: [`made_of`] and [`Coalesced`] compare a target batch with the
/// source batches it may have been made of, whatever the run was.
pub fn coalesce_runs<'a>(
    batches: Vec<TargetBatch<'a>>,
    below: usize,
    up_to: usize,
    options: TransformOptions,
) -> Result<Vec<TargetBatch<'a>>, TransformError> {
    let up_to = up_to.min(options.max_batch_bytes);
    let mut out = Vec::with_capacity(batches.len());
    let mut run: Vec<TargetBatch<'a>> = Vec::new();
    let mut run_bytes = 0;
    let flush =
        |run: &mut Vec<TargetBatch<'a>>, out: &mut Vec<TargetBatch<'a>>| -> Result<(), TransformError> {
            if run.len() > 1 {
                if let Some(merged) = coalesce(run, options)? {
                    out.push(merged);
                    run.clear();
                    return Ok(());
                }
            }
            out.append(run);
            Ok(())
        };
    for batch in batches {
        let small = batch.bytes.len() < below;
        let fits = run.first().is_some_and(|first| {
            codec_of(first) == codec_of(&batch) && run_bytes + batch.bytes.len() <= up_to
        });
        if !(small && fits) {
            flush(&mut run, &mut out)?;
            run_bytes = 0;
        }
        if small {
            run_bytes += batch.bytes.len();
            run.push(batch);
        } else {
            out.push(batch);
        }
    }
    flush(&mut run, &mut out)?;
    Ok(out)
}

/// One batch holding the records of `batches` (at least one), in order,
/// with their keys, values, headers, attributes and timestamps, in the
/// first batch's codec; `None` when it would be larger than
/// [`TransformOptions::max_batch_bytes`]. The same batches always give the
/// same bytes.
pub fn coalesce(
    batches: &[TargetBatch<'_>],
    options: TransformOptions,
) -> Result<Option<TargetBatch<'static>>, TransformError> {
    let Some(first) = batches.first() else {
        return Ok(None);
    };
    let codec = codec_of(first);
    let mut sections = Vec::with_capacity(batches.len());
    for batch in batches {
        let h = BatchHeader::parse(&batch.bytes).expect("a target batch holds one whole batch");
        let section = wire::records_section(&batch.bytes, options.max_uncompressed_bytes)
            .map_err(|e| records_error(&h, e))?;
        sections.push((h, section));
    }
    let mut records = Vec::with_capacity(sections.len());
    for (h, section) in &sections {
        records.push((
            h,
            wire::parse_raw_records(section, h.record_count).map_err(|e| records_error(h, e))?,
        ));
    }
    // Source offsets are known only at the ends; within, they only name
    // records in errors.
    let kept: Vec<Kept<'_>> = records
        .iter()
        .flat_map(|(h, records)| {
            records.iter().map(|record| Kept {
                offset: first.source.first_offset,
                timestamp: h.base_timestamp.wrapping_add(record.timestamp_delta),
                record,
                extra: None,
            })
        })
        .collect();
    let bytes = encode(&kept, codec);
    if bytes.len() > options.max_batch_bytes {
        return Ok(None);
    }
    let count = kept.len() as i32;
    Ok(Some(TargetBatch {
        bytes: Cow::Owned(bytes),
        kind: TargetKind::ReEncoded(ReEncodeReasons {
            coalesced: true,
            ..ReEncodeReasons::default()
        }),
        source: SourceRange::joined(batches.iter().map(|b| &b.source)),
        last_offset_delta: count - 1,
    }))
}

fn codec_of(batch: &TargetBatch<'_>) -> Compression {
    BatchHeader::parse(&batch.bytes).map_or(Compression::None, |h| h.compression())
}

/// Finds a target batch among the source batches it may have been made
/// of: fed the source's target batches in order ([`Coalesced::push`]), it
/// says whether the last ones, alone or merged ([`coalesce`]), give a
/// target batch of `records` records and fingerprint `fingerprint`.
#[derive(Debug)]
pub struct Coalesced {
    records: i32,
    fingerprint: Fingerprint,
    options: TransformOptions,
    /// The latest batches, holding at most `records` records together.
    window: std::collections::VecDeque<TargetBatch<'static>>,
    held: i64,
}

impl Coalesced {
    /// Looks for a batch of `records` records with `fingerprint`.
    pub fn matching(records: i32, fingerprint: Fingerprint, options: TransformOptions) -> Self {
        Coalesced {
            records,
            fingerprint,
            options,
            window: Default::default(),
            held: 0,
        }
    }

    /// Takes the next source batch; whether the batches up to it match.
    pub fn push(&mut self, batch: TargetBatch<'_>) -> Result<bool, TransformError> {
        self.held += i64::from(batch.record_count());
        self.window.push_back(batch.into_owned());
        while self.held > i64::from(self.records) {
            let dropped = self.window.pop_front().expect("records held");
            self.held -= i64::from(dropped.record_count());
        }
        if self.held != i64::from(self.records) {
            return Ok(false);
        }
        made_of(self.window.make_contiguous(), self.fingerprint, self.options)
    }
}

/// Whether `batches` (in order, at least one) are what the target batch
/// with `fingerprint` was made of: the one batch itself, or several merged.
pub fn made_of(
    batches: &[TargetBatch<'_>],
    fingerprint: Fingerprint,
    options: TransformOptions,
) -> Result<bool, TransformError> {
    Ok(match batches {
        [] => false,
        [one] => one.fingerprint() == fingerprint,
        _ => coalesce(batches, options)?.is_some_and(|b| b.fingerprint() == fingerprint),
    })
}

/// The sequence after a batch of `count` records that starts at `sequence`,
/// wrapping past `i32::MAX` to 0 as Kafka's does.
pub fn next_sequence(sequence: i32, count: i32) -> i32 {
    if sequence > i32::MAX - count {
        count - (i32::MAX - sequence) - 1
    } else {
        sequence + count
    }
}

/// A 128-bit hash of a batch's content (XXH3-128, a fixed algorithm: the
/// same bytes give the same fingerprint in every build).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(pub u128);

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// The fingerprint of the batch at the start of `batch`: its content,
/// without the fields the mirror rewrites (base offset, leader epoch, CRC,
/// transactional bit, producer id, epoch and base sequence) nor those a
/// target broker may rewrite when it stores a batch as produced (the
/// timestamp-type bit and the max timestamp). Length, magic, codec, last
/// offset delta, base timestamp, record count and every record byte are
/// covered. The CRC is not checked.
pub fn fingerprint(batch: &[u8]) -> Result<Fingerprint, BatchError> {
    let header = BatchHeader::parse_whole(batch)?;
    let batch = &batch[..header.size()];
    let mut hasher = twox_hash::XxHash3_128::new();
    hasher.write(&batch[8..12]); // batchLength
    hasher.write(&batch[16..17]); // magic
    let attributes = header.attributes & !(TRANSACTIONAL | LOG_APPEND_TIME);
    hasher.write(&attributes.to_be_bytes());
    hasher.write(&batch[23..35]); // lastOffsetDelta, baseTimestamp
    hasher.write(&batch[57..]); // recordCount, records
    Ok(Fingerprint(hasher.finish_128()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_wrap_as_kafka_does() {
        assert_eq!(next_sequence(0, 5), 5);
        assert_eq!(next_sequence(i32::MAX - 5, 5), i32::MAX);
        assert_eq!(next_sequence(i32::MAX - 5, 6), 0);
        assert_eq!(next_sequence(i32::MAX, 1), 0);
        assert_eq!(next_sequence(i32::MAX - 1, 10), 8);
    }
}
