//! Decompression of a record batch's records section, for the few places
//! that must look inside a compressed batch (a timestamp lookup, a dump, the
//! mirror's re-encoding), and compression, for the mirror when it must build
//! a batch anew. Appends and fetches never decompress: batches are stored and
//! served as the producer sent them.
//!
//! The formats are Kafka's: gzip (RFC 1952), Snappy either as one raw block
//! or in the xerial framing the Java client writes, LZ4 frames, and
//! Zstandard frames. Every decoder is pure Rust and stops at `limit` output
//! bytes, so a small batch cannot expand into unbounded memory.
//!
//! [`compress`] writes what the Java client writes, which every client
//! reads: gzip at the default level 6, Snappy in the xerial framing with
//! 32 KiB blocks (librdkafka writes one raw block but reads the framing
//! too), LZ4 frames of independent 64 KiB blocks without checksums (the Java
//! reader decompresses each block on its own, so linked blocks would not
//! do), and Zstandard frames (ruzstd's fastest level, about zstd's level 1).
//! Its output is a function of its input alone: the same records compress to
//! the same bytes every time (with the same crate versions).

use std::fmt;
use std::io::{Read, Write};

/// The attribute bits that name the codec.
pub const CODEC_BITS: i16 = 0x07;

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

impl Compression {
    /// The codec of a batch's attribute bits (the low three).
    pub fn from_attributes(attributes: i16) -> Compression {
        match attributes & CODEC_BITS {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            other => Compression::Unknown(other as u8),
        }
    }

    /// The attribute bits of the codec (0 for an unknown one: a batch is
    /// never written with it).
    pub fn bits(self) -> i16 {
        match self {
            Compression::None | Compression::Unknown(_) => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }
}

/// Why a records section could not be decompressed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecompressError {
    /// The codec's decoder rejected the bytes.
    #[error("{codec} data is corrupt: {detail}")]
    Corrupt {
        /// The batch's codec.
        codec: Compression,
        /// What the decoder said.
        detail: String,
    },
    /// The output would exceed the limit.
    #[error("{codec} data expands beyond {limit} bytes")]
    TooLarge {
        /// The batch's codec.
        codec: Compression,
        /// The limit given.
        limit: usize,
    },
    /// The attributes name a codec Kafka does not define.
    #[error("unknown compression codec {0}")]
    UnknownCodec(u8),
}

/// Why a records section could not be compressed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompressError {
    /// The encoder failed (or, for Zstandard, wrote bytes that do not
    /// decompress to the input).
    #[error("{codec} compression failed: {detail}")]
    Failed {
        /// The codec asked for.
        codec: Compression,
        /// What went wrong.
        detail: String,
    },
    /// The attributes name a codec Kafka does not define.
    #[error("unknown compression codec {0}")]
    UnknownCodec(u8),
}

/// The xerial Snappy stream header: magic, then version and compatible
/// version (big-endian i32 each).
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_LEN: usize = 16;
/// Version and minimum compatible version the Java client writes.
const XERIAL_VERSION: i32 = 1;
/// Uncompressed bytes per xerial block (snappy-java's default, which the
/// Java client uses).
const XERIAL_BLOCK: usize = 32 * 1024;

/// Compresses `data` (a batch's records section) with `codec`, as the Java
/// client does (see the module documentation). [`Compression::None`] returns
/// a copy.
///
/// The Zstandard encoder (ruzstd's) is young: its output is decompressed
/// again and compared with the input, and a panic inside it is caught, so
/// that a bug there is a [`CompressError::Failed`] rather than a corrupt
/// batch or a crash. The other encoders are trusted.
pub fn compress(codec: Compression, data: &[u8]) -> Result<Vec<u8>, CompressError> {
    let failed = |detail: String| CompressError::Failed { codec, detail };
    match codec {
        Compression::None => Ok(data.to_vec()),
        Compression::Gzip => {
            let mut encoder = flate2::write::GzEncoder::new(
                Vec::with_capacity(data.len() / 2 + 64),
                flate2::Compression::new(6),
            );
            encoder.write_all(data).map_err(|e| failed(e.to_string()))?;
            encoder.finish().map_err(|e| failed(e.to_string()))
        }
        Compression::Snappy => {
            let mut out = Vec::with_capacity(XERIAL_HEADER_LEN + data.len() / 2 + 64);
            out.extend_from_slice(XERIAL_MAGIC);
            out.extend_from_slice(&XERIAL_VERSION.to_be_bytes());
            out.extend_from_slice(&XERIAL_VERSION.to_be_bytes());
            let mut encoder = snap::raw::Encoder::new();
            let mut block = Vec::new();
            for chunk in data.chunks(XERIAL_BLOCK) {
                block.resize(snap::raw::max_compress_len(chunk.len()), 0);
                let len = encoder
                    .compress(chunk, &mut block)
                    .map_err(|e| failed(e.to_string()))?;
                let len32 = u32::try_from(len).map_err(|_| failed(format!("block of {len} bytes")))?;
                out.extend_from_slice(&len32.to_be_bytes());
                out.extend_from_slice(&block[..len]);
            }
            Ok(out)
        }
        Compression::Lz4 => {
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent)
                .block_checksums(false)
                .content_checksum(false);
            let mut encoder =
                lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::with_capacity(data.len() / 2 + 64));
            encoder.write_all(data).map_err(|e| failed(e.to_string()))?;
            encoder.finish().map_err(|e| failed(e.to_string()))
        }
        Compression::Zstd => {
            let packed = std::panic::catch_unwind(|| {
                ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
            })
            .map_err(|_| failed("the encoder panicked".into()))?;
            match decompress(codec, &packed, data.len()) {
                Ok(back) if back == data => Ok(packed),
                Ok(_) => Err(failed("the output does not decompress to the input".into())),
                Err(e) => Err(failed(format!("the output does not decompress: {e}"))),
            }
        }
        Compression::Unknown(id) => Err(CompressError::UnknownCodec(id)),
    }
}

/// Decompresses `data` (a batch's records section) written with `codec`,
/// producing at most `limit` bytes.
pub fn decompress(codec: Compression, data: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
    let corrupt = |detail: String| DecompressError::Corrupt { codec, detail };
    match codec {
        Compression::None => {
            if data.len() > limit {
                return Err(DecompressError::TooLarge { codec, limit });
            }
            Ok(data.to_vec())
        }
        Compression::Gzip => read_limited(codec, flate2::read::MultiGzDecoder::new(data), limit),
        Compression::Lz4 => read_limited(codec, lz4_flex::frame::FrameDecoder::new(data), limit),
        Compression::Zstd => {
            let decoder =
                ruzstd::decoding::StreamingDecoder::new(data).map_err(|e| corrupt(e.to_string()))?;
            read_limited(codec, decoder, limit)
        }
        Compression::Snappy => {
            if data.len() >= XERIAL_HEADER_LEN && data.starts_with(XERIAL_MAGIC) {
                let mut out = Vec::new();
                let mut rest = &data[XERIAL_HEADER_LEN..];
                while !rest.is_empty() {
                    let len = rest
                        .get(..4)
                        .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")) as usize)
                        .ok_or_else(|| corrupt("xerial block length cut short".into()))?;
                    let block = rest
                        .get(4..4 + len)
                        .ok_or_else(|| corrupt(format!("xerial block of {len} bytes overruns the data")))?;
                    snappy_block(codec, block, limit - out.len(), &mut out)?;
                    rest = &rest[4 + len..];
                }
                Ok(out)
            } else {
                let mut out = Vec::new();
                snappy_block(codec, data, limit, &mut out)?;
                Ok(out)
            }
        }
        Compression::Unknown(id) => Err(DecompressError::UnknownCodec(id)),
    }
}

/// Appends one raw Snappy block, refusing it if it expands beyond `room`.
fn snappy_block(
    codec: Compression,
    block: &[u8],
    room: usize,
    out: &mut Vec<u8>,
) -> Result<(), DecompressError> {
    let corrupt = |e: snap::Error| DecompressError::Corrupt {
        codec,
        detail: e.to_string(),
    };
    let len = snap::raw::decompress_len(block).map_err(corrupt)?;
    if len > room {
        return Err(DecompressError::TooLarge {
            codec,
            limit: out.len() + room,
        });
    }
    let at = out.len();
    out.resize(at + len, 0);
    snap::raw::Decoder::new()
        .decompress(block, &mut out[at..])
        .map_err(corrupt)?;
    Ok(())
}

fn read_limited(codec: Compression, reader: impl Read, limit: usize) -> Result<Vec<u8>, DecompressError> {
    let mut out = Vec::new();
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| DecompressError::Corrupt {
            codec,
            detail: e.to_string(),
        })?;
    if out.len() > limit {
        return Err(DecompressError::TooLarge { codec, limit });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Every codec that compresses.
    const COMPRESSED: [Compression; 4] = [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    fn sample() -> Vec<u8> {
        (0..50_000u32).flat_map(|i| (i % 97).to_be_bytes()).collect()
    }

    fn compressed(codec: Compression, data: &[u8]) -> Vec<u8> {
        match codec {
            Compression::Gzip => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Compression::Lz4 => {
                let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Compression::Zstd => {
                ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
            }
            Compression::Snappy => snap::raw::Encoder::new().compress_vec(data).unwrap(),
            other => panic!("no encoder for {other}"),
        }
    }

    /// The xerial framing: header, then (length, raw block) pairs.
    fn xerial(data: &[u8], block: usize) -> Vec<u8> {
        let mut out = XERIAL_MAGIC.to_vec();
        out.extend_from_slice(&1i32.to_be_bytes());
        out.extend_from_slice(&1i32.to_be_bytes());
        for chunk in data.chunks(block) {
            let b = snap::raw::Encoder::new().compress_vec(chunk).unwrap();
            out.extend_from_slice(&(b.len() as u32).to_be_bytes());
            out.extend_from_slice(&b);
        }
        out
    }

    #[test]
    fn every_codec_round_trips() {
        let data = sample();
        for codec in COMPRESSED {
            let packed = compressed(codec, &data);
            assert!(packed.len() < data.len(), "{codec} did not compress");
            assert_eq!(decompress(codec, &packed, data.len()).unwrap(), data, "{codec}");
        }
        let framed = xerial(&data, 32 * 1024);
        assert_eq!(
            decompress(Compression::Snappy, &framed, data.len()).unwrap(),
            data
        );
        assert_eq!(decompress(Compression::None, &data, data.len()).unwrap(), data);
    }

    #[test]
    fn output_beyond_the_limit_is_refused() {
        let data = sample();
        for codec in COMPRESSED {
            let packed = compressed(codec, &data);
            assert_eq!(
                decompress(codec, &packed, data.len() - 1),
                Err(DecompressError::TooLarge {
                    codec,
                    limit: data.len() - 1
                }),
                "{codec}"
            );
        }
        let framed = xerial(&data, 32 * 1024);
        assert!(matches!(
            decompress(Compression::Snappy, &framed, 40_000),
            Err(DecompressError::TooLarge { .. })
        ));
    }

    #[test]
    fn compress_round_trips_and_is_deterministic() {
        let data = sample();
        let inputs: [&[u8]; 4] = [&data, b"", b"x", &[0u8; 100_000]];
        for codec in COMPRESSED {
            for input in inputs {
                let packed = compress(codec, input).unwrap();
                assert_eq!(decompress(codec, &packed, input.len()).unwrap(), input, "{codec}");
                assert_eq!(
                    compress(codec, input).unwrap(),
                    packed,
                    "{codec} is not deterministic"
                );
            }
            assert!(compress(codec, &data).unwrap().len() < data.len() / 2, "{codec}");
        }
        assert_eq!(compress(Compression::None, &data).unwrap(), data);
        assert_eq!(
            compress(Compression::Unknown(5), b"x"),
            Err(CompressError::UnknownCodec(5))
        );
    }

    #[test]
    fn compress_writes_what_the_java_client_reads() {
        let data = sample(); // 200,000 bytes
                             // Snappy: the xerial framing, version 1, 32 KiB blocks.
        let snappy = compress(Compression::Snappy, &data).unwrap();
        assert_eq!(&snappy[..8], XERIAL_MAGIC);
        assert_eq!(snappy[8..16], [0, 0, 0, 1, 0, 0, 0, 1]);
        let mut rest = &snappy[16..];
        let mut blocks = 0;
        while !rest.is_empty() {
            let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            let block = &rest[4..4 + len];
            let expected = data.len().min((blocks + 1) * XERIAL_BLOCK) - blocks * XERIAL_BLOCK;
            assert_eq!(snap::raw::decompress_len(block).unwrap(), expected);
            rest = &rest[4 + len..];
            blocks += 1;
        }
        assert_eq!(blocks, data.len().div_ceil(XERIAL_BLOCK));
        // LZ4: a frame (magic 0x184D2204), FLG version 1 with independent
        // blocks and no checksums or content size, BD 64 KiB blocks.
        let lz4 = compress(Compression::Lz4, &data).unwrap();
        assert_eq!(lz4[..4], 0x184D_2204u32.to_le_bytes());
        assert_eq!(lz4[4], 0b0110_0000, "FLG");
        assert_eq!(lz4[5], 4 << 4, "BD");
        // gzip: magic, deflate, no file name or time stamp.
        let gzip = compress(Compression::Gzip, &data).unwrap();
        assert_eq!(gzip[..4], [0x1f, 0x8b, 8, 0]);
        assert_eq!(gzip[4..8], [0, 0, 0, 0], "mtime");
        // Zstandard: a frame.
        let zstd = compress(Compression::Zstd, &data).unwrap();
        assert_eq!(zstd[..4], 0xFD2F_B528u32.to_le_bytes());
    }

    #[test]
    fn corrupt_data_is_an_error_not_a_panic() {
        let data = sample();
        for codec in COMPRESSED {
            let packed = compressed(codec, &data);
            for cut in [1, packed.len() / 2, packed.len() - 1] {
                // An error, or (a stream cut inside its trailer) a prefix of
                // the data: never bytes that were not there.
                match decompress(codec, &packed[..cut], data.len()) {
                    Err(DecompressError::Corrupt { .. }) => {}
                    Ok(d) => assert!(
                        data.starts_with(&d),
                        "{codec} cut at {cut}: {} wrong bytes",
                        d.len()
                    ),
                    Err(e) => panic!("{codec} cut at {cut}: {e}"),
                }
            }
            let garbage = vec![0xa5u8; 300];
            assert!(
                decompress(codec, &garbage, 1 << 20).is_err(),
                "{codec} took garbage"
            );
        }
        assert_eq!(
            decompress(Compression::Unknown(6), b"x", 10),
            Err(DecompressError::UnknownCodec(6))
        );
    }
}
