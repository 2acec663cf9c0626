//! Kafka's record batch format (magic v2), the one place Strait reads and
//! writes it: the spool stores batches, the broker and the router rewrite
//! their headers, the mirror re-encodes them.
//!
//! Batches travel as bytes and are stored exactly as a producer sent them.
//! The bytes that change on a batch's way are header fields: the base
//! offset and the partition leader epoch, outside the CRC-32C, by whoever
//! stores it ([`stamp`]); the producer fields, inside it, by the router and
//! the mirror ([`set_producer`], [`stamp_producer`]), the CRC updated from
//! the bytes that changed ([`patch_header`]) so that a damaged batch stays
//! detectably damaged.
//!
//! - [`header`]: the 61-byte header, validation (CRC included), the
//!   iterator over concatenated batches, the rewrites.
//! - [`records`]: the records inside, decoded and encoded.
//! - [`compression`]: the codecs, for the few places that look inside a
//!   compressed batch or build one.
//! - [`build`]: batches made from values or around a records section.
//!
//! `compression` depends on nothing here; `header` on `compression` (a
//! batch's codec); `records` on both; `build` on `header` and `records`.

pub mod build;
pub mod compression;
pub mod header;
pub mod records;

pub use compression::Compression;
pub use header::{
    patch_header, set_max_timestamp, set_producer, stamp, stamp_producer, validate, BatchError, BatchHeader,
    Batches, ProducerStamp, CONTROL, CRC_START, HEADER_LEN, LOG_APPEND_TIME, LOG_OVERHEAD, TRANSACTIONAL,
};
pub use records::{
    newest_record_timestamp, parse_raw_records, parse_records, read_varint, records, records_section,
    timestamp_at, varint_len, write_bytes, write_varint, Header, HeaderIter, Headers, RawRecord, Record,
    RecordError,
};
