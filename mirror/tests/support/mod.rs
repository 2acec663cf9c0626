//! Source batches as Kafka brokers serve them, encoded here independently of
//! the code under test (own record encoder, the codecs' crates directly),
//! and a decoder of target batches into the records a consumer would see.
#![allow(dead_code)]

use std::io::Write;

use strait_batch::{self as batch, build, BatchHeader, Compression};
use strait_mirror::batch::{
    AbortedTransaction, FetchedBatches, PartitionTransformer, TargetBatch, TransformError, Transformed,
};

/// A record as a consumer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rec {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl Rec {
    /// A record with a key, a value and a header derived from `offset`.
    pub fn at(offset: i64) -> Rec {
        Rec {
            offset,
            timestamp: 1_700_000_000_000 + offset * 3,
            key: Some(format!("key-{offset}").into_bytes()),
            value: Some(format!("value {offset} {}", "x".repeat((offset % 7) as usize)).into_bytes()),
            headers: vec![
                (b"trace".to_vec(), Some(offset.to_be_bytes().to_vec())),
                (b"empty".to_vec(), None),
            ],
        }
    }
}

/// How to build a source batch.
#[derive(Debug, Clone)]
pub struct Src {
    pub base_offset: i64,
    /// The records; their offsets must increase from `base_offset` on.
    pub records: Vec<Rec>,
    pub codec: Compression,
    /// Raw Snappy (as librdkafka writes) rather than the xerial framing.
    pub raw_snappy: bool,
    pub transactional: bool,
    pub control: bool,
    /// LogAppendTime with this append time as max timestamp.
    pub log_append_time: Option<i64>,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    /// Defaults to the last record's offset delta.
    pub last_offset_delta: Option<i32>,
}

impl Src {
    pub fn new(base_offset: i64, records: Vec<Rec>) -> Src {
        Src {
            base_offset,
            records,
            codec: Compression::None,
            raw_snappy: false,
            transactional: false,
            control: false,
            log_append_time: None,
            producer_id: 1000,
            producer_epoch: 3,
            base_sequence: 17,
            last_offset_delta: None,
        }
    }

    /// Records at each of `offsets`.
    pub fn at(offsets: &[i64]) -> Src {
        Src::new(offsets[0], offsets.iter().map(|&o| Rec::at(o)).collect())
    }

    pub fn codec(mut self, codec: Compression) -> Src {
        self.codec = codec;
        self
    }

    pub fn producer(mut self, id: i64) -> Src {
        self.producer_id = id;
        self
    }

    pub fn transactional(mut self) -> Src {
        self.transactional = true;
        self
    }

    pub fn encode(&self) -> Vec<u8> {
        let base_ts = self.records.first().map_or(0, |r| r.timestamp);
        let mut section = Vec::new();
        for r in &self.records {
            let headers: Vec<(&[u8], Option<&[u8]>)> =
                r.headers.iter().map(|(k, v)| (&k[..], v.as_deref())).collect();
            section.extend(build::record(
                r.timestamp - base_ts,
                r.offset - self.base_offset,
                r.key.as_deref(),
                r.value.as_deref(),
                &headers,
            ));
        }
        let section = compress(self.codec, &section, self.raw_snappy);
        let mut attributes: i16 = match self.codec {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
            Compression::Unknown(id) => id as i16,
        };
        if self.log_append_time.is_some() {
            attributes |= 0x08;
        }
        if self.transactional {
            attributes |= 0x10;
        }
        if self.control {
            attributes |= 0x20;
        }
        let last_delta = self.last_offset_delta.unwrap_or_else(|| {
            self.records
                .last()
                .map_or(0, |r| (r.offset - self.base_offset) as i32)
        });
        let max_ts = self
            .log_append_time
            .unwrap_or_else(|| self.records.iter().map(|r| r.timestamp).max().unwrap_or(-1));
        let mut out = Vec::new();
        out.extend_from_slice(&self.base_offset.to_be_bytes());
        out.extend_from_slice(&((49 + section.len()) as i32).to_be_bytes());
        out.extend_from_slice(&7i32.to_be_bytes()); // leader epoch
        out.push(2);
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&attributes.to_be_bytes());
        out.extend_from_slice(&last_delta.to_be_bytes());
        out.extend_from_slice(&base_ts.to_be_bytes());
        out.extend_from_slice(&max_ts.to_be_bytes());
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        out.extend_from_slice(&self.base_sequence.to_be_bytes());
        out.extend_from_slice(&(self.records.len() as i32).to_be_bytes());
        out.extend(section);
        fix_crc(&mut out);
        out
    }
}

/// A transaction marker of `producer_id` at `offset`.
pub fn marker(producer_id: i64, offset: i64, abort: bool) -> Vec<u8> {
    let mut key = 0i16.to_be_bytes().to_vec();
    key.extend_from_slice(&(if abort { 0i16 } else { 1 }).to_be_bytes());
    let mut value = 0i16.to_be_bytes().to_vec();
    value.extend_from_slice(&5i32.to_be_bytes()); // coordinator epoch
    let mut src = Src::new(
        offset,
        vec![Rec {
            offset,
            timestamp: 1_700_000_000_000,
            key: Some(key),
            value: Some(value),
            headers: vec![],
        }],
    )
    .producer(producer_id)
    .transactional();
    src.control = true;
    src.encode()
}

/// Recomputes the CRC of a whole batch.
pub fn fix_crc(batch: &mut [u8]) {
    let crc = crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

pub fn crc32c(bytes: &[u8]) -> u32 {
    // Bitwise CRC-32C (Castagnoli), independent of the crc32c crate.
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

pub fn compress(codec: Compression, data: &[u8], raw_snappy: bool) -> Vec<u8> {
    match codec {
        Compression::None | Compression::Unknown(_) => data.to_vec(),
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        Compression::Snappy if raw_snappy => snap::raw::Encoder::new().compress_vec(data).unwrap(),
        Compression::Snappy => {
            let mut out = b"\x82SNAPPY\x00".to_vec();
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            for chunk in data.chunks(8 * 1024) {
                let b = snap::raw::Encoder::new().compress_vec(chunk).unwrap();
                out.extend_from_slice(&(b.len() as u32).to_be_bytes());
                out.extend_from_slice(&b);
            }
            out
        }
        Compression::Lz4 => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        Compression::Zstd => {
            ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
        }
    }
}

/// Checks a target batch (CRC, contiguous deltas, counts) and decodes what
/// a consumer of the target would see, with offsets counted from `base`.
pub fn decode(bytes: &[u8], base: i64) -> (BatchHeader, Vec<Rec>) {
    let h = batch::validate(bytes).expect("a target batch validates (CRC included)");
    assert_eq!(h.size(), bytes.len());
    assert!(!h.is_control());
    assert_eq!(h.record_count, h.last_offset_delta + 1, "offsets are contiguous");
    let section = batch::records_section(bytes, 1 << 30).unwrap();
    let records = batch::parse_raw_records(&section, h.record_count).unwrap();
    let recs = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            assert_eq!(r.offset_delta, i as i64, "offset deltas are 0..n-1");
            Rec {
                offset: base + r.offset_delta,
                timestamp: if h.log_append_time() {
                    h.max_timestamp
                } else {
                    h.base_timestamp + r.timestamp_delta
                },
                key: r.key.map(<[u8]>::to_vec),
                value: r.value.map(<[u8]>::to_vec),
                headers: r
                    .headers
                    .iter()
                    .map(|h| (h.key.to_vec(), h.value.map(<[u8]>::to_vec)))
                    .collect(),
            }
        })
        .collect();
    (h, recs)
}

/// Runs `batches` (one fetch response of concatenated batches) through `t`,
/// collecting what is produced.
pub fn run<'a>(
    t: &mut PartitionTransformer,
    aborted: &[AbortedTransaction],
    records: &'a [u8],
) -> Result<Vec<TargetBatch<'a>>, TransformError> {
    t.add_aborted(aborted);
    let mut out = Vec::new();
    let mut it = FetchedBatches::new(records);
    for batch in &mut it {
        let transformed: Transformed<'a> = t.transform(&batch?)?;
        out.extend(transformed.into_batches());
    }
    assert_eq!(it.partial_bytes(), 0);
    Ok(out)
}

/// The records a consumer of the target sees in `batches`, with the source
/// offsets the batches' ranges give (first record at `first_offset`,
/// records in between taken from `originals`).
pub fn consumed(batches: &[TargetBatch<'_>], originals: &[Rec]) -> Vec<Rec> {
    let mut out = Vec::new();
    for b in batches {
        let (_, recs) = decode(b.bytes(), 0);
        let range = b.source();
        assert_eq!(range.record_count as usize, recs.len());
        // Source offsets of the records: those of the originals in the range.
        let offsets: Vec<i64> = originals
            .iter()
            .map(|r| r.offset)
            .filter(|o| (range.first_offset..=range.last_offset).contains(o))
            .collect();
        assert_eq!(
            offsets.len(),
            recs.len(),
            "range {range:?} does not match the records"
        );
        for (mut r, o) in recs.into_iter().zip(offsets) {
            r.offset = o;
            out.push(r);
        }
    }
    out
}
