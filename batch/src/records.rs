//! The records inside a batch: Kafka's v2 record framing (zigzag varints),
//! decoded for the few places that look inside a batch (the broker's
//! timestamp lookups, the dump tool, the mirror's re-encoding) and encoded
//! again. Appends and fetches never decode records.

use std::borrow::Cow;

use crate::compression::{decompress, Compression, DecompressError};
use crate::header::{BatchError, BatchHeader, HEADER_LEN};

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
    Decompress(#[from] DecompressError),
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

/// When the first record at or after `offset` of the batch at the start of
/// `batch` was written: its own timestamp, or the batch's for a
/// `LogAppendTime` batch (every record has the broker's append time). Reads
/// the records (decompressed, at most `limit` bytes, if need be) only for
/// a create-time batch. None when the batch holds no record at or after
/// `offset`, or is a control batch (a transaction marker, no record a
/// consumer sees).
pub fn timestamp_at(batch: &[u8], offset: i64, limit: usize) -> Result<Option<i64>, RecordError> {
    let header = BatchHeader::parse(batch)?;
    if header.is_control() || header.last_offset() < offset {
        return Ok(None);
    }
    if header.log_append_time() {
        return Ok(Some(header.max_timestamp));
    }
    let section = records_section(batch, limit)?;
    let records = parse_records(&section, header.record_count)?;
    Ok(records
        .iter()
        .find(|r| header.base_offset.saturating_add(r.offset_delta) >= offset)
        .map(|r| header.base_timestamp.saturating_add(r.timestamp_delta)))
}

/// The records section of the batch at the start of `batch`: borrowed when
/// the batch is uncompressed, decompressed (at most `limit` bytes) when it
/// is not. Decode it with [`parse_records`] and the header's record count.
pub fn records_section(batch: &[u8], limit: usize) -> Result<Cow<'_, [u8]>, RecordError> {
    let header = BatchHeader::parse(batch)?;
    let section = section_of(batch, &header)?;
    Ok(match header.compression() {
        Compression::None => Cow::Borrowed(section),
        codec => Cow::Owned(decompress(codec, section, limit)?),
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
        let (head, _headers) = read_head(&mut rest, index)?;
        out.push(Record {
            timestamp_delta: head.timestamp_delta,
            offset_delta: head.offset_delta,
            key: head.key,
            value: head.value,
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

    /// The value of the first header named `key` (`Some(None)` when its
    /// value is null), `None` when there is none.
    pub fn get(&self, key: &[u8]) -> Option<Option<&'a [u8]>> {
        self.iter().find(|h| h.key == key).map(|h| h.value)
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
        let (head, mut record) = read_head(&mut rest, index)?;
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
            attributes: head.attributes,
            timestamp_delta: head.timestamp_delta,
            offset_delta: head.offset_delta,
            key: head.key,
            value: head.value,
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

/// What every record starts with.
struct Head<'a> {
    attributes: u8,
    timestamp_delta: i64,
    offset_delta: i64,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
}

/// Reads record `index` off the front of `rest`: its first fields, and the
/// rest of its bytes (its headers).
fn read_head<'a>(rest: &mut &'a [u8], index: i32) -> Result<(Head<'a>, &'a [u8]), RecordError> {
    let bad = |what| RecordError::Malformed { index, what };
    let length = read_varint(rest).ok_or(bad("bad length"))?;
    let record = usize::try_from(length)
        .ok()
        .and_then(|l| rest.get(..l))
        .ok_or(bad("overruns the batch"))?;
    *rest = &rest[record.len()..];
    let (&attributes, mut record) = record.split_first().ok_or(bad("empty"))?;
    let head = Head {
        attributes,
        timestamp_delta: read_varint(&mut record).ok_or(bad("bad timestamp delta"))?,
        offset_delta: read_varint(&mut record).ok_or(bad("bad offset delta"))?,
        key: read_bytes(&mut record).ok_or(bad("bad key"))?,
        value: read_bytes(&mut record).ok_or(bad("bad value"))?,
    };
    Ok((head, record))
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
pub fn read_varint(buf: &mut &[u8]) -> Option<i64> {
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

/// Bytes of a zigzag varint of `value`.
pub fn varint_len(value: i64) -> usize {
    let zigzag = ((value << 1) ^ (value >> 63)) as u64;
    let bits = 64 - zigzag.leading_zeros() as usize;
    bits.div_ceil(7).max(1)
}

/// Bytes of a length-prefixed byte field (null: the length -1 alone).
fn field_len(field: Option<&[u8]>) -> usize {
    match field {
        None => varint_len(-1),
        Some(bytes) => varint_len(bytes.len() as i64) + bytes.len(),
    }
}

impl RawRecord<'_> {
    /// Encoded size of the record with these deltas (and `extra`, a header
    /// after its own, if any), its length prefix included.
    pub fn encoded_len(&self, timestamp_delta: i64, offset_delta: i64, extra: Option<Header<'_>>) -> usize {
        let body = self.body_len(timestamp_delta, offset_delta, extra);
        varint_len(body as i64) + body
    }

    fn body_len(&self, timestamp_delta: i64, offset_delta: i64, extra: Option<Header<'_>>) -> usize {
        let (count, extra_len) = match extra {
            None => (self.headers.len(), 0),
            Some(h) => (
                self.headers.len() + 1,
                field_len(Some(h.key)) + field_len(h.value),
            ),
        };
        1 + varint_len(timestamp_delta)
            + varint_len(offset_delta)
            + field_len(self.key)
            + field_len(self.value)
            + varint_len(count as i64)
            + self.headers.raw().len()
            + extra_len
    }

    /// Appends the record as Kafka encodes it, with these deltas: length,
    /// attributes, timestamp and offset deltas, key, value, headers (its
    /// own, then `extra` if any).
    pub fn write(
        &self,
        out: &mut Vec<u8>,
        timestamp_delta: i64,
        offset_delta: i64,
        extra: Option<Header<'_>>,
    ) {
        write_varint(out, self.body_len(timestamp_delta, offset_delta, extra) as i64);
        out.push(self.attributes);
        write_varint(out, timestamp_delta);
        write_varint(out, offset_delta);
        write_bytes(out, self.key);
        write_bytes(out, self.value);
        write_varint(out, (self.headers.len() + usize::from(extra.is_some())) as i64);
        out.extend_from_slice(self.headers.raw());
        if let Some(h) = extra {
            write_bytes(out, Some(h.key));
            write_bytes(out, h.value);
        }
    }
}
