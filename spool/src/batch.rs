//! Kafka record batches (magic v2): header parsing and validation.
//!
//! The spool stores batches exactly as a producer sent them. The only bytes it
//! ever changes are the base offset and the partition leader epoch, which lie
//! outside the CRC-32C, so a stored batch still carries the producer's
//! checksum. The spool never decodes records; the decoders here
//! ([`parse_records`], and [`parse_raw_records`], which keeps headers and
//! every byte the mirror needs to build a record anew) serve the broker's
//! timestamp lookups, the dump tool and the mirror.
//!
//! Layout of the 61-byte header (all integers big-endian):
//!
//! ```text
//! 0  baseOffset            i64   rewritten on append
//! 8  batchLength           i32   bytes after this field
//! 12 partitionLeaderEpoch  i32   rewritten on append
//! 16 magic                 i8    must be 2
//! 17 crc                   u32   CRC-32C of bytes 21..end
//! 21 attributes            i16   compression (bits 0-2), timestamp type (3),
//!                                transactional (4), control (5)
//! 23 lastOffsetDelta       i32
//! 27 baseTimestamp         i64
//! 35 maxTimestamp          i64
//! 43 producerId            i64
//! 51 producerEpoch         i16
//! 53 baseSequence          i32
//! 57 recordCount           i32
//! ```

use std::borrow::Cow;
use std::fmt;

/// Size of the record batch header, in bytes.
pub const HEADER_LEN: usize = 61;
/// Bytes before `batchLength`'s count starts (baseOffset + batchLength).
pub const LOG_OVERHEAD: usize = 12;
/// Offset of the first byte the CRC covers.
pub(crate) const CRC_START: usize = 21;

/// Why a byte range is not a valid record batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// Fewer bytes than a batch header.
    #[error("truncated header: {available} bytes, a batch header needs {HEADER_LEN}")]
    TruncatedHeader {
        /// Bytes that were there.
        available: usize,
    },
    /// `batchLength` is too small to hold the header.
    #[error("batch length {length} is below the minimum {}", HEADER_LEN - LOG_OVERHEAD)]
    LengthTooSmall {
        /// The declared `batchLength`.
        length: i32,
    },
    /// `batchLength` runs past the end of the data.
    #[error("batch declares {needed} bytes but only {available} are present")]
    Truncated {
        /// Total size the header declares.
        needed: usize,
        /// Bytes that were there.
        available: usize,
    },
    /// Not a v2 batch.
    #[error("unsupported magic {0} (only record batch v2 is stored)")]
    Magic(i8),
    /// The checksum does not match the contents.
    #[error("CRC-32C mismatch: header says {stored:#010x}, contents give {computed:#010x}")]
    Crc {
        /// The checksum in the header.
        stored: u32,
        /// The checksum of the bytes.
        computed: u32,
    },
    /// Record count or last offset delta are impossible.
    #[error("record count {count} does not fit last offset delta {last_offset_delta}")]
    RecordCount {
        /// The `recordCount` field.
        count: i32,
        /// The `lastOffsetDelta` field.
        last_offset_delta: i32,
    },
}

/// Compression codec, from the low three attribute bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// No compression.
    None,
    /// gzip.
    Gzip,
    /// Snappy (xerial framing).
    Snappy,
    /// LZ4 frame.
    Lz4,
    /// Zstandard.
    Zstd,
    /// A codec id Kafka does not define.
    Unknown(u8),
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Compression::None => f.write_str("none"),
            Compression::Gzip => f.write_str("gzip"),
            Compression::Snappy => f.write_str("snappy"),
            Compression::Lz4 => f.write_str("lz4"),
            Compression::Zstd => f.write_str("zstd"),
            Compression::Unknown(id) => write!(f, "unknown({id})"),
        }
    }
}

/// The fields of a batch header, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Bytes after the `batchLength` field.
    pub batch_length: i32,
    /// Leader epoch stamped by the broker.
    pub partition_leader_epoch: i32,
    /// Checksum stored in the header.
    pub crc: u32,
    /// Raw attribute bits.
    pub attributes: i16,
    /// Offset delta of the last record.
    pub last_offset_delta: i32,
    /// Timestamp of the first record.
    pub base_timestamp: i64,
    /// Largest timestamp in the batch.
    pub max_timestamp: i64,
    /// Idempotent / transactional producer id, or -1.
    pub producer_id: i64,
    /// Producer epoch, or -1.
    pub producer_epoch: i16,
    /// Sequence number of the first record, or -1.
    pub base_sequence: i32,
    /// Number of records.
    pub record_count: i32,
}

impl BatchHeader {
    /// Parses the header and checks that the whole batch it declares is in
    /// `buf` (the CRC is not checked).
    pub fn parse_whole(buf: &[u8]) -> Result<BatchHeader, BatchError> {
        let header = BatchHeader::parse(buf)?;
        if header.size() > buf.len() {
            return Err(BatchError::Truncated {
                needed: header.size(),
                available: buf.len(),
            });
        }
        Ok(header)
    }

    /// Parses the header fields without checking the CRC or the length
    /// against the data. Needs at least [`HEADER_LEN`] bytes.
    pub fn parse(buf: &[u8]) -> Result<BatchHeader, BatchError> {
        if buf.len() < HEADER_LEN {
            return Err(BatchError::TruncatedHeader { available: buf.len() });
        }
        let header = BatchHeader {
            base_offset: i64_at(buf, 0),
            batch_length: i32_at(buf, 8),
            partition_leader_epoch: i32_at(buf, 12),
            crc: u32::from_be_bytes(buf[17..21].try_into().expect("4 bytes")),
            attributes: i16::from_be_bytes(buf[21..23].try_into().expect("2 bytes")),
            last_offset_delta: i32_at(buf, 23),
            base_timestamp: i64_at(buf, 27),
            max_timestamp: i64_at(buf, 35),
            producer_id: i64_at(buf, 43),
            producer_epoch: i16::from_be_bytes(buf[51..53].try_into().expect("2 bytes")),
            base_sequence: i32_at(buf, 53),
            record_count: i32_at(buf, 57),
        };
        let magic = buf[16] as i8;
        if magic != 2 {
            return Err(BatchError::Magic(magic));
        }
        if (header.batch_length as i64) < (HEADER_LEN - LOG_OVERHEAD) as i64 {
            return Err(BatchError::LengthTooSmall {
                length: header.batch_length,
            });
        }
        if header.record_count < 0
            || header.last_offset_delta < 0
            || header.last_offset_delta < header.record_count - 1
        {
            return Err(BatchError::RecordCount {
                count: header.record_count,
                last_offset_delta: header.last_offset_delta,
            });
        }
        Ok(header)
    }

    /// Total size of the batch on disk, header included.
    pub fn size(&self) -> usize {
        LOG_OVERHEAD + self.batch_length as usize
    }

    /// Offset of the last record (base offset plus last offset delta).
    pub fn last_offset(&self) -> i64 {
        self.base_offset + self.last_offset_delta as i64
    }

    /// Number of offsets the batch occupies.
    pub fn offset_count(&self) -> u64 {
        self.last_offset_delta as u64 + 1
    }

    /// The compression codec.
    pub fn compression(&self) -> Compression {
        match self.attributes & 0x7 {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            other => Compression::Unknown(other as u8),
        }
    }

    /// Whether `maxTimestamp` is a log-append time rather than a create time.
    pub fn log_append_time(&self) -> bool {
        self.attributes & 0x8 != 0
    }

    /// Whether the batch belongs to a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & 0x10 != 0
    }

    /// Whether the batch holds control records (transaction markers).
    pub fn is_control(&self) -> bool {
        self.attributes & 0x20 != 0
    }
}

/// Parses and fully validates the batch at the start of `buf`: header, length
/// against the available bytes, and CRC-32C. Returns the header; the batch
/// occupies `buf[..header.size()]`.
pub fn validate(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::parse_whole(buf)?;
    let size = header.size();
    let computed = crc32c::crc32c(&buf[CRC_START..size]);
    if computed != header.crc {
        return Err(BatchError::Crc {
            stored: header.crc,
            computed,
        });
    }
    Ok(header)
}

/// Overwrites the base offset and partition leader epoch of the batch at the
/// start of `buf`. Neither field is covered by the CRC.
pub fn stamp(buf: &mut [u8], base_offset: i64, leader_epoch: i32) {
    buf[0..8].copy_from_slice(&base_offset.to_be_bytes());
    buf[12..16].copy_from_slice(&leader_epoch.to_be_bytes());
}

/// Overwrites the CRC-covered header bytes `at..at + bytes.len()` of the
/// batch at the start of `buf` (all within its header, after the CRC) and
/// updates the CRC from the old one and the bytes that changed, in time
/// that does not grow with the batch: CRC-32C is linear, so the new CRC is
/// the old one XOR the CRC of the difference, shifted past the bytes that
/// follow it. The CRC stays exactly as right or wrong as it was: a batch
/// that arrived damaged stays detectably damaged.
pub fn patch_header(buf: &mut [u8], at: usize, bytes: &[u8]) -> Result<(), BatchError> {
    const ZEROS: [u8; HEADER_LEN] = [0; HEADER_LEN];
    let header = BatchHeader::parse_whole(buf)?;
    let size = header.size();
    let end = at + bytes.len();
    assert!(
        at >= CRC_START && end <= HEADER_LEN,
        "patch_header: {at}..{end} is not in the CRC-covered header {CRC_START}..{HEADER_LEN}"
    );
    let mut diff = [0u8; HEADER_LEN];
    for (d, (old, new)) in diff.iter_mut().zip(buf[at..end].iter().zip(bytes)) {
        *d = old ^ new;
    }
    let diff = &diff[..bytes.len()];
    // The linear part of the CRC of the difference: CRC(d) XOR CRC(zeros)
    // cancels the initial value and final XOR, which depend only on length.
    let linear = crc32c::crc32c(diff) ^ crc32c::crc32c(&ZEROS[..bytes.len()]);
    let shifted = crc32c::crc32c_combine(linear, 0, size - end);
    buf[at..end].copy_from_slice(bytes);
    buf[17..21].copy_from_slice(&(header.crc ^ shifted).to_be_bytes());
    Ok(())
}

/// Overwrites the producer id and epoch of the batch at the start of `buf`,
/// updating its CRC from the bytes that changed ([`patch_header`]).
pub fn set_producer(buf: &mut [u8], producer_id: i64, producer_epoch: i16) -> Result<(), BatchError> {
    let mut fields = [0u8; 10];
    fields[..8].copy_from_slice(&producer_id.to_be_bytes());
    fields[8..].copy_from_slice(&producer_epoch.to_be_bytes());
    patch_header(buf, 43, &fields)
}

/// Iterates over the batches of a buffer, validating each (CRC included).
/// Stops after the first error.
#[derive(Debug, Clone)]
pub struct Batches<'a> {
    buf: &'a [u8],
    pos: usize,
    failed: bool,
}

impl<'a> Batches<'a> {
    /// Iterates over `buf` from its start.
    pub fn new(buf: &'a [u8]) -> Self {
        Batches {
            buf,
            pos: 0,
            failed: false,
        }
    }
}

impl Iterator for Batches<'_> {
    /// The byte position of the batch in the buffer and its header, or the
    /// position of the invalid bytes and why.
    type Item = Result<(usize, BatchHeader), (usize, BatchError)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let pos = self.pos;
        match validate(&self.buf[pos..]) {
            Ok(header) => {
                self.pos += header.size();
                Some(Ok((pos, header)))
            }
            Err(err) => {
                self.failed = true;
                Some(Err((pos, err)))
            }
        }
    }
}

fn i64_at(buf: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

fn i32_at(buf: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

/// One record of an uncompressed batch (see [`records`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Timestamp minus the batch's base timestamp.
    pub timestamp_delta: i64,
    /// Offset minus the batch's base offset.
    pub offset_delta: i64,
    /// The key, `None` when null.
    pub key: Option<&'a [u8]>,
    /// The value, `None` when null.
    pub value: Option<&'a [u8]>,
}

/// Why [`records`] cannot decode a batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The header does not parse.
    #[error(transparent)]
    Header(#[from] BatchError),
    /// [`records`] takes uncompressed batches only (see [`records_section`]).
    #[error("compressed batch ({0})")]
    Compressed(Compression),
    /// The compressed records section does not decompress.
    #[error(transparent)]
    Decompress(#[from] crate::compression::DecompressError),
    /// A record's framing does not fit the batch.
    #[error("record {index}: {what}")]
    Malformed {
        /// Which record.
        index: i32,
        /// What does not fit.
        what: &'static str,
    },
    /// Bytes follow the last record the header counts (Kafka's readers
    /// refuse such a batch too). Only [`parse_raw_records`] checks this.
    #[error("{0} bytes follow the last record")]
    TrailingBytes(usize),
}

/// Decodes the records of the uncompressed batch at the start of `batch`
/// (Kafka's v2 record framing: zigzag varints; headers are skipped). The
/// spool itself never needs this; the broker does for timestamp lookups and
/// its own internal logs.
pub fn records(batch: &[u8]) -> Result<Vec<Record<'_>>, RecordError> {
    let header = BatchHeader::parse(batch)?;
    if header.compression() != Compression::None {
        return Err(RecordError::Compressed(header.compression()));
    }
    parse_records(section_of(batch, &header)?, header.record_count)
}

/// The newest record timestamp of the batch at the start of `batch`, read
/// from its records (decompressed, at most `limit` bytes, if need be)
/// rather than from the header's max timestamp.
pub fn newest_record_timestamp(batch: &[u8], limit: usize) -> Result<i64, RecordError> {
    let header = BatchHeader::parse(batch)?;
    let section = records_section(batch, limit)?;
    let records = parse_records(&section, header.record_count)?;
    Ok(records
        .iter()
        .map(|r| header.base_timestamp.saturating_add(r.timestamp_delta))
        .fold(header.base_timestamp, i64::max))
}

/// Rewrites the max timestamp of the batch at the start of `buf` and
/// recomputes its CRC (which covers it). Check the batch first: the new CRC
/// vouches for whatever bytes are there.
pub fn set_max_timestamp(buf: &mut [u8], max_timestamp: i64) -> Result<(), BatchError> {
    let header = BatchHeader::parse_whole(buf)?;
    let size = header.size();
    buf[35..43].copy_from_slice(&max_timestamp.to_be_bytes());
    let crc = crc32c::crc32c(&buf[CRC_START..size]);
    buf[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// The records section of the batch at the start of `batch`: borrowed when
/// the batch is uncompressed, decompressed (at most `limit` bytes) when it
/// is not. Decode it with [`parse_records`] and the header's record count.
pub fn records_section(batch: &[u8], limit: usize) -> Result<Cow<'_, [u8]>, RecordError> {
    let header = BatchHeader::parse(batch)?;
    let section = section_of(batch, &header)?;
    Ok(match header.compression() {
        Compression::None => Cow::Borrowed(section),
        codec => Cow::Owned(crate::compression::decompress(codec, section, limit)?),
    })
}

fn section_of<'a>(batch: &'a [u8], header: &BatchHeader) -> Result<&'a [u8], BatchError> {
    batch.get(HEADER_LEN..header.size()).ok_or(BatchError::Truncated {
        needed: header.size(),
        available: batch.len(),
    })
}

/// Decodes `count` records from an uncompressed records section (Kafka's
/// v2 record framing: zigzag varints; headers are skipped).
pub fn parse_records(section: &[u8], count: i32) -> Result<Vec<Record<'_>>, RecordError> {
    let mut rest = section;
    let mut out = Vec::with_capacity((count.max(0) as usize).min(rest.len()));
    for index in 0..count {
        let bad = |what| RecordError::Malformed { index, what };
        let length = read_varint(&mut rest).ok_or(bad("bad length"))?;
        let mut record = usize::try_from(length)
            .ok()
            .and_then(|l| rest.get(..l))
            .ok_or(bad("overruns the batch"))?;
        rest = &rest[record.len()..];
        record = record.get(1..).ok_or(bad("empty"))?; // attributes
        let timestamp_delta = read_varint(&mut record).ok_or(bad("bad timestamp delta"))?;
        let offset_delta = read_varint(&mut record).ok_or(bad("bad offset delta"))?;
        let key = read_bytes(&mut record).ok_or(bad("bad key"))?;
        let value = read_bytes(&mut record).ok_or(bad("bad value"))?;
        out.push(Record {
            timestamp_delta,
            offset_delta,
            key,
            value,
        });
    }
    Ok(out)
}

/// One record with everything it carries, headers included, as
/// [`parse_raw_records`] finds it: enough to encode it again unchanged or
/// with other deltas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawRecord<'a> {
    /// The record's attribute byte (Kafka defines no bit of it yet; kept as
    /// found).
    pub attributes: u8,
    /// Timestamp minus the batch's base timestamp.
    pub timestamp_delta: i64,
    /// Offset minus the batch's base offset.
    pub offset_delta: i64,
    /// The key, `None` when null.
    pub key: Option<&'a [u8]>,
    /// The value, `None` when null.
    pub value: Option<&'a [u8]>,
    /// The headers, checked and still encoded.
    pub headers: Headers<'a>,
}

/// A record's headers as they are encoded: a count, then for each a key
/// (varint length, never null) and a value (varint length, -1 for null).
/// [`parse_raw_records`] has checked that `raw` holds exactly `len()` of
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headers<'a> {
    count: usize,
    raw: &'a [u8],
}

impl<'a> Headers<'a> {
    /// Number of headers.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The encoded headers after their count, to copy into a new record
    /// (after a varint count of [`Headers::len`]).
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }

    /// The headers, decoded, in order.
    pub fn iter(&self) -> HeaderIter<'a> {
        HeaderIter {
            rest: self.raw,
            left: self.count,
        }
    }
}

/// One record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    /// The key (a UTF-8 string by Kafka's contract, not checked here).
    pub key: &'a [u8],
    /// The value, `None` when null.
    pub value: Option<&'a [u8]>,
}

/// Iterator over [`Headers`].
#[derive(Debug, Clone)]
pub struct HeaderIter<'a> {
    rest: &'a [u8],
    left: usize,
}

impl<'a> Iterator for HeaderIter<'a> {
    type Item = Header<'a>;

    fn next(&mut self) -> Option<Header<'a>> {
        if self.left == 0 {
            return None;
        }
        // Checked by parse_raw_records, so this never stops early.
        let (header, rest) = read_header(self.rest)?;
        self.rest = rest;
        self.left -= 1;
        Some(header)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left))
    }
}

/// Reads one header off the front of `buf`: key (never null), value.
fn read_header(mut buf: &[u8]) -> Option<(Header<'_>, &[u8])> {
    let key = read_bytes(&mut buf)??;
    let value = read_bytes(&mut buf)?;
    Some((Header { key, value }, buf))
}

/// Decodes `count` records from an uncompressed records section, keeping
/// every field, headers included (see [`RawRecord`]). Stricter than
/// [`parse_records`], as Kafka's own readers are: each record must end
/// exactly where its length says, header keys must not be null, and no
/// bytes may follow the last record.
pub fn parse_raw_records(section: &[u8], count: i32) -> Result<Vec<RawRecord<'_>>, RecordError> {
    let mut rest = section;
    let mut out = Vec::with_capacity((count.max(0) as usize).min(rest.len() / 7));
    for index in 0..count {
        let bad = |what| RecordError::Malformed { index, what };
        let length = read_varint(&mut rest).ok_or(bad("bad length"))?;
        let mut record = usize::try_from(length)
            .ok()
            .and_then(|l| rest.get(..l))
            .ok_or(bad("overruns the batch"))?;
        rest = &rest[record.len()..];
        let (&attributes, tail) = record.split_first().ok_or(bad("empty"))?;
        record = tail;
        let timestamp_delta = read_varint(&mut record).ok_or(bad("bad timestamp delta"))?;
        let offset_delta = read_varint(&mut record).ok_or(bad("bad offset delta"))?;
        let key = read_bytes(&mut record).ok_or(bad("bad key"))?;
        let value = read_bytes(&mut record).ok_or(bad("bad value"))?;
        let header_count = read_varint(&mut record).ok_or(bad("bad header count"))?;
        let header_count = usize::try_from(header_count).map_err(|_| bad("negative header count"))?;
        let raw = record;
        for _ in 0..header_count {
            let (_, after) = read_header(record).ok_or(bad("bad header"))?;
            record = after;
        }
        if !record.is_empty() {
            return Err(bad("bytes left over after its headers"));
        }
        out.push(RawRecord {
            attributes,
            timestamp_delta,
            offset_delta,
            key,
            value,
            headers: Headers {
                count: header_count,
                raw,
            },
        });
    }
    if !rest.is_empty() {
        return Err(RecordError::TrailingBytes(rest.len()));
    }
    Ok(out)
}

/// Reads a length-prefixed byte field (length -1 is null) off the front of
/// `buf`; `None` if it does not fit.
fn read_bytes<'a>(buf: &mut &'a [u8]) -> Option<Option<&'a [u8]>> {
    let len = read_varint(buf)?;
    if len < 0 {
        return Some(None);
    }
    let field = buf.get(..usize::try_from(len).ok()?)?;
    *buf = &buf[field.len()..];
    Some(Some(field))
}

/// Reads a zigzag varint (at most 10 bytes) off the front of `buf`.
fn read_varint(buf: &mut &[u8]) -> Option<i64> {
    let mut value: u64 = 0;
    for (i, &byte) in buf.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *buf = &buf[i + 1..];
            return Some((value >> 1) as i64 ^ -((value & 1) as i64));
        }
    }
    None
}

/// Appends a zigzag varint, as Kafka's record framing writes it.
pub fn write_varint(out: &mut Vec<u8>, value: i64) {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a length-prefixed byte field (length -1 for null), the
/// counterpart of the reader of keys, values and headers.
pub fn write_bytes(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => write_varint(out, -1),
        Some(b) => {
            write_varint(out, b.len() as i64);
            out.extend_from_slice(b);
        }
    }
}

/// Builds valid record batches for tests, benchmarks and fuzz seeds. The
/// records are encoded as Kafka does (varint framing), so real clients can
/// decode them.
pub mod build {
    use super::{stamp, write_bytes, write_varint, CRC_START, HEADER_LEN, LOG_OVERHEAD};

    /// One record as Kafka encodes it (its length first), with key, value
    /// and headers.
    pub fn record(
        timestamp_delta: i64,
        offset_delta: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
    ) -> Vec<u8> {
        let mut body = vec![0]; // record attributes
        write_varint(&mut body, timestamp_delta);
        write_varint(&mut body, offset_delta);
        write_bytes(&mut body, key);
        write_bytes(&mut body, value);
        write_varint(&mut body, headers.len() as i64);
        for (k, v) in headers {
            write_bytes(&mut body, Some(k));
            write_bytes(&mut body, *v);
        }
        let mut out = Vec::with_capacity(body.len() + 5);
        write_varint(&mut out, body.len() as i64);
        out.extend(body);
        out
    }

    /// A batch of `values.len()` records (null keys) with the given
    /// timestamps base, each record's timestamp delta equal to its index.
    pub fn batch(base_timestamp: i64, values: &[&[u8]]) -> Vec<u8> {
        batch_with(
            BatchSpec {
                base_timestamp,
                ..BatchSpec::default()
            },
            values,
        )
    }

    /// Producer fields and attributes of a built batch.
    #[derive(Debug, Clone, Copy)]
    pub struct BatchSpec {
        /// First record's timestamp.
        pub base_timestamp: i64,
        /// Producer id (-1 for none).
        pub producer_id: i64,
        /// Producer epoch (-1 for none).
        pub producer_epoch: i16,
        /// First sequence (-1 for none).
        pub base_sequence: i32,
        /// Attribute bits (compression codec is not applied to the bytes).
        pub attributes: i16,
    }

    impl Default for BatchSpec {
        fn default() -> Self {
            BatchSpec {
                base_timestamp: 0,
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
                attributes: 0,
            }
        }
    }

    /// A batch with explicit producer fields.
    pub fn batch_with(spec: BatchSpec, values: &[&[u8]]) -> Vec<u8> {
        assert!(!values.is_empty(), "a batch needs at least one record");
        with_section(spec, values.len() as i32, &encode_records(values))
    }

    /// The records section of [`batch_with`] for `values`, uncompressed (to
    /// compress it and build a batch around it with [`with_section`]).
    pub fn encode_records(values: &[&[u8]]) -> Vec<u8> {
        values
            .iter()
            .enumerate()
            .flat_map(|(i, value)| record(i as i64, i as i64, None, Some(value), &[]))
            .collect()
    }

    /// A batch of `count` records whose records section is `section` as
    /// given (compressed or not: `spec.attributes` says which codec).
    pub fn with_section(spec: BatchSpec, count: i32, section: &[u8]) -> Vec<u8> {
        let mut buf = Vec::with_capacity(HEADER_LEN + section.len());
        buf.extend_from_slice(&0i64.to_be_bytes());
        let length = (HEADER_LEN - LOG_OVERHEAD + section.len()) as i32;
        buf.extend_from_slice(&length.to_be_bytes());
        buf.extend_from_slice(&0i32.to_be_bytes());
        buf.push(2);
        buf.extend_from_slice(&0u32.to_be_bytes());
        buf.extend_from_slice(&spec.attributes.to_be_bytes());
        buf.extend_from_slice(&(count - 1).to_be_bytes());
        buf.extend_from_slice(&spec.base_timestamp.to_be_bytes());
        buf.extend_from_slice(&(spec.base_timestamp + count as i64 - 1).to_be_bytes());
        buf.extend_from_slice(&spec.producer_id.to_be_bytes());
        buf.extend_from_slice(&spec.producer_epoch.to_be_bytes());
        buf.extend_from_slice(&spec.base_sequence.to_be_bytes());
        buf.extend_from_slice(&count.to_be_bytes());
        buf.extend_from_slice(section);
        let crc = crc32c::crc32c(&buf[CRC_START..]);
        buf[17..21].copy_from_slice(&crc.to_be_bytes());
        stamp(&mut buf, 0, 0);
        buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_batch_validates_and_reports_fields() {
        let buf = build::batch(1_000, &[b"a", b"bb", b"ccc"]);
        let h = validate(&buf).unwrap();
        assert_eq!(h.size(), buf.len());
        assert_eq!(h.record_count, 3);
        assert_eq!(h.last_offset_delta, 2);
        assert_eq!(h.base_timestamp, 1_000);
        assert_eq!(h.max_timestamp, 1_002);
        assert_eq!(h.compression(), Compression::None);
        assert_eq!(h.producer_id, -1);
    }

    #[test]
    fn stamping_keeps_the_crc_valid() {
        let mut buf = build::batch(0, &[b"x"]);
        stamp(&mut buf, 42, 7);
        let h = validate(&buf).unwrap();
        assert_eq!(h.base_offset, 42);
        assert_eq!(h.partition_leader_epoch, 7);
        assert_eq!(h.last_offset(), 42);
    }

    #[test]
    fn patching_the_header_updates_the_crc_as_a_full_recompute_would() {
        let values: Vec<Vec<u8>> = (0..40).map(|i| vec![i as u8; 1 + i * 37]).collect();
        let values: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
        for len in [1, 3, 40] {
            let original = build::batch(5, &values[..len]);
            for (at, patch) in [
                (21, vec![0x00, 0x10]),
                (43, vec![0xab; 14]),
                (21, (0..36).map(|i| i * 7).collect::<Vec<u8>>()),
                (56, vec![0xff]),
                (43, original[43..57].to_vec()),
            ] {
                let mut buf = original.clone();
                patch_header(&mut buf, at, &patch).unwrap();
                assert_eq!(buf[at..at + patch.len()], patch[..]);
                let h = validate(&buf).expect("the patched CRC is the full CRC");
                assert_eq!(h.size(), original.len());
            }
            // A damaged batch stays damaged.
            let mut damaged = original.clone();
            *damaged.last_mut().unwrap() ^= 1;
            patch_header(&mut damaged, 43, &[1; 14]).unwrap();
            assert!(matches!(validate(&damaged), Err(BatchError::Crc { .. })));
        }
    }

    #[test]
    fn a_new_producer_leaves_a_valid_batch_with_the_rest_as_it_was() {
        let original = build::batch(5, &[b"one", b"two"]);
        let mut buf = original.clone();
        set_producer(&mut buf, 0x0102_0304_0506, 7).unwrap();
        let h = validate(&buf).expect("the CRC fits");
        assert_eq!((h.producer_id, h.producer_epoch), (0x0102_0304_0506, 7));
        assert_eq!(buf[..17], original[..17]);
        assert_eq!(buf[21..43], original[21..43]);
        assert_eq!(buf[53..], original[53..]);
    }

    #[test]
    fn every_kind_of_damage_is_named() {
        let good = build::batch(0, &[b"hello"]);
        let check = |buf: &[u8], expected: fn(&BatchError) -> bool| {
            let err = validate(buf).unwrap_err();
            assert!(expected(&err), "unexpected error {err:?}");
        };
        check(&good[..30], |e| {
            matches!(e, BatchError::TruncatedHeader { available: 30 })
        });
        check(&good[..good.len() - 1], |e| {
            matches!(e, BatchError::Truncated { .. })
        });
        let mut bad = good.clone();
        bad[16] = 1;
        check(&bad, |e| matches!(e, BatchError::Magic(1)));
        let mut bad = good.clone();
        *bad.last_mut().unwrap() ^= 0xff;
        check(&bad, |e| matches!(e, BatchError::Crc { .. }));
        let mut bad = good.clone();
        bad[8..12].copy_from_slice(&10i32.to_be_bytes());
        check(&bad, |e| matches!(e, BatchError::LengthTooSmall { length: 10 }));
        let mut bad = good.clone();
        bad[57..61].copy_from_slice(&5i32.to_be_bytes());
        check(&bad, |e| matches!(e, BatchError::RecordCount { count: 5, .. }));
    }

    #[test]
    fn records_decode_what_build_encodes() {
        let buf = build::batch(50, &[b"a", b"", b"ccc"]);
        let decoded = records(&buf).unwrap();
        assert_eq!(decoded.len(), 3);
        assert_eq!(
            decoded[2],
            Record {
                timestamp_delta: 2,
                offset_delta: 2,
                key: None,
                value: Some(&b"ccc"[..])
            }
        );
        assert_eq!(decoded[1].value, Some(&b""[..]));
        assert!(matches!(
            records(&buf[..buf.len() - 2]),
            Err(RecordError::Header(_) | RecordError::Malformed { .. })
        ));
        let mut gzip = buf.clone();
        gzip[22] |= 1;
        assert_eq!(
            records(&gzip).unwrap_err(),
            RecordError::Compressed(Compression::Gzip)
        );
    }

    #[test]
    fn raw_records_keep_keys_and_headers() {
        let mut section = build::record(
            0,
            0,
            Some(b"k1"),
            Some(b"v1"),
            &[(b"h", Some(b"x")), (b"n", None)],
        );
        section.extend(build::record(-5, 3, None, None, &[]));
        section.extend(build::record(
            300,
            4,
            Some(b""),
            Some(&[7; 200]),
            &[(b"", Some(b""))],
        ));
        let records = parse_raw_records(&section, 3).unwrap();
        assert_eq!(records.len(), 3);
        let r = &records[0];
        assert_eq!((r.attributes, r.timestamp_delta, r.offset_delta), (0, 0, 0));
        assert_eq!((r.key, r.value), (Some(&b"k1"[..]), Some(&b"v1"[..])));
        assert_eq!(r.headers.len(), 2);
        let headers: Vec<Header<'_>> = r.headers.iter().collect();
        assert_eq!(
            headers,
            [
                Header {
                    key: b"h",
                    value: Some(b"x")
                },
                Header {
                    key: b"n",
                    value: None
                }
            ]
        );
        assert_eq!(r.headers.raw(), b"\x02h\x02x\x02n\x01");
        assert_eq!((records[1].timestamp_delta, records[1].offset_delta), (-5, 3));
        assert_eq!((records[1].key, records[1].value), (None, None));
        assert!(records[1].headers.is_empty());
        assert_eq!(records[1].headers.iter().count(), 0);
        assert_eq!(records[2].value, Some(&[7u8; 200][..]));
        assert_eq!(records[2].headers.iter().next().unwrap().value, Some(&b""[..]));
        // The lenient decoder agrees on what both read.
        let plain = parse_records(&section, 3).unwrap();
        for (p, r) in plain.iter().zip(&records) {
            assert_eq!(
                (p.timestamp_delta, p.offset_delta, p.key, p.value),
                (r.timestamp_delta, r.offset_delta, r.key, r.value)
            );
        }
    }

    #[test]
    fn raw_records_refuse_what_kafka_refuses() {
        let good = build::record(0, 0, None, Some(b"v"), &[(b"h", Some(b"x"))]);
        assert!(parse_raw_records(&good, 1).is_ok());
        // Bytes after the last record.
        let trailing = [good.clone(), vec![0, 0]].concat();
        assert_eq!(
            parse_raw_records(&trailing, 1),
            Err(RecordError::TrailingBytes(2))
        );
        assert!(
            parse_records(&trailing, 1).is_ok(),
            "the lenient decoder takes it"
        );
        // A record longer than its fields (one byte appended inside).
        let mut long = good.clone();
        long[0] += 2; // zigzag length + 1
        long.push(0);
        assert!(matches!(
            parse_raw_records(&long, 1),
            Err(RecordError::Malformed { index: 0, .. })
        ));
        // A null header key.
        let mut null_key = vec![0, 0, 0, 1, 0, 2];
        write_varint(&mut null_key, -1);
        write_varint(&mut null_key, -1);
        let mut framed = Vec::new();
        write_varint(&mut framed, null_key.len() as i64);
        framed.extend(null_key);
        assert!(matches!(
            parse_raw_records(&framed, 1),
            Err(RecordError::Malformed {
                what: "bad header",
                ..
            })
        ));
        // Every cut of a good record is an error, never a panic.
        for cut in 0..good.len() {
            assert!(parse_raw_records(&good[..cut], 1).is_err(), "cut at {cut}");
        }
        // More records counted than present.
        assert!(parse_raw_records(&good, 2).is_err());
    }

    #[test]
    fn iterator_walks_concatenated_batches_and_stops_at_damage() {
        let mut buf = build::batch(0, &[b"a"]);
        let second = buf.len();
        buf.extend(build::batch(0, &[b"b", b"c"]));
        let third = buf.len();
        buf.extend_from_slice(&[0u8; 20]);
        let items: Vec<_> = Batches::new(&buf).collect();
        assert_eq!(items.len(), 3);
        assert_eq!(items[0].as_ref().unwrap().0, 0);
        assert_eq!(items[1].as_ref().unwrap().0, second);
        assert_eq!(items[1].as_ref().unwrap().1.record_count, 2);
        assert!(matches!(items[2], Err((p, BatchError::TruncatedHeader { .. })) if p == third));
    }

    #[test]
    fn a_wrong_max_timestamp_is_recomputed_from_the_records() {
        // Records at 500, 501, 502; a producer that writes -1 as the max
        // (sarama 1.22 does) gets it fixed, with a CRC that matches again.
        let mut buf = build::batch(500, &[b"a", b"b", b"c"]);
        set_max_timestamp(&mut buf, -1).unwrap();
        let h = validate(&buf).unwrap();
        assert_eq!(h.max_timestamp, -1);
        assert_eq!(newest_record_timestamp(&buf, 1 << 20), Ok(502));
        set_max_timestamp(&mut buf, 502).unwrap();
        assert_eq!(validate(&buf).unwrap().max_timestamp, 502);
        assert!(matches!(
            set_max_timestamp(&mut buf[..40], 1),
            Err(BatchError::TruncatedHeader { .. })
        ));
    }
}
