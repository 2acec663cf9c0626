//! Building record batches: a header around a records section (the
//! mirror's re-encoded batches), and whole batches of values for tests,
//! benchmarks and fuzz seeds. Records are encoded as Kafka does (varint
//! framing), so every client decodes them.

use crate::header::{stamp, CRC_START, HEADER_LEN, LOG_OVERHEAD};
use crate::records::{write_bytes, write_varint};

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
    /// The largest timestamp (`None`: the base timestamp plus the record
    /// count less one, as [`batch`] gives its records).
    pub max_timestamp: Option<i64>,
}

impl Default for BatchSpec {
    fn default() -> Self {
        BatchSpec {
            base_timestamp: 0,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            attributes: 0,
            max_timestamp: None,
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
/// given (compressed or not: `spec.attributes` says which codec), at base
/// offset 0 and leader epoch 0.
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
    let max_timestamp = spec
        .max_timestamp
        .unwrap_or(spec.base_timestamp + count as i64 - 1);
    buf.extend_from_slice(&max_timestamp.to_be_bytes());
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
