//! Decompression of a record batch's records section, for the few places
//! that must look inside a compressed batch (a timestamp lookup, a dump).
//! Appends and fetches never decompress: batches are stored and served as
//! the producer sent them.
//!
//! The formats are Kafka's: gzip (RFC 1952), Snappy either as one raw block
//! or in the xerial framing the Java client writes, LZ4 frames, and
//! Zstandard frames. Every decoder is pure Rust and stops at `limit` output
//! bytes, so a small batch cannot expand into unbounded memory.

use std::io::Read;

use crate::batch::Compression;

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

/// The xerial Snappy stream header: magic, then version and compatible
/// version (big-endian i32 each).
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_LEN: usize = 16;

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
