//! The batch header: parsing, validation, and the fields that are
//! rewritten on a batch's way (offsets and leader epoch by whoever stores
//! it, producer fields by the router and the mirror).
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

use crate::compression::Compression;

/// Size of the record batch header, in bytes.
pub const HEADER_LEN: usize = 61;
/// Bytes before `batchLength`'s count starts (baseOffset + batchLength).
pub const LOG_OVERHEAD: usize = 12;
/// Offset of the first byte the CRC covers.
pub const CRC_START: usize = 21;

/// The attribute bit of a `LogAppendTime` batch.
pub const LOG_APPEND_TIME: i16 = 0x08;
/// The attribute bit of a transactional batch.
pub const TRANSACTIONAL: i16 = 0x10;
/// The attribute bit of a control batch (transaction markers).
pub const CONTROL: i16 = 0x20;

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
        Compression::from_attributes(self.attributes)
    }

    /// Whether `maxTimestamp` is a log-append time rather than a create time.
    pub fn log_append_time(&self) -> bool {
        self.attributes & LOG_APPEND_TIME != 0
    }

    /// Whether the batch belongs to a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL != 0
    }

    /// Whether the batch holds control records (transaction markers).
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL != 0
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

/// A producer's fields for one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerStamp {
    /// The producer id.
    pub producer_id: i64,
    /// Its epoch.
    pub producer_epoch: i16,
    /// Sequence of the batch's first record on its partition.
    pub base_sequence: i32,
}

/// Makes the batch at the start of `buf` one that `producer` produces, as
/// an idempotent, non-transactional producer: base offset 0, leader epoch
/// -1, the transactional bit cleared and the producer fields written. The
/// CRC-32C is updated from the bytes that changed ([`patch_header`]), not
/// recomputed, so a damaged batch stays detectably damaged rather than
/// getting a CRC that vouches for it.
pub fn stamp_producer(buf: &mut [u8], producer: ProducerStamp) -> Result<(), BatchError> {
    let header = BatchHeader::parse_whole(buf)?;
    stamp(buf, 0, -1);
    // attributes .. baseSequence
    let mut covered = [0u8; 57 - CRC_START];
    covered.copy_from_slice(&buf[CRC_START..57]);
    covered[0..2].copy_from_slice(&(header.attributes & !TRANSACTIONAL).to_be_bytes());
    covered[43 - CRC_START..51 - CRC_START].copy_from_slice(&producer.producer_id.to_be_bytes());
    covered[51 - CRC_START..53 - CRC_START].copy_from_slice(&producer.producer_epoch.to_be_bytes());
    covered[53 - CRC_START..].copy_from_slice(&producer.base_sequence.to_be_bytes());
    patch_header(buf, CRC_START, &covered)
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
