//! Frames whose record batches are not copied: a Produce request going
//! upstream, a Fetch response going to a client.
//!
//! The `kafka-protocol` encoder writes a message into one buffer, so
//! encoding a Produce copies every batch once more, into memory freshly
//! faulted in for it (a tenth of the router's CPU under produce load).
//! Instead the records fields are found by encoding the message twice
//! without records: once with every `records` field null and once with
//! every one empty. The two encodings have the same length (null and
//! empty take the same width: -1 and 0 as INT32, 0 and 1 as an unsigned
//! varint in flexible versions) and differ exactly at the first byte of
//! each `records` field, in the order the encoder writes them. The frame
//! is the null encoding with each field given its real length, and the
//! large record sections as chunks of their own, the very `Bytes` the
//! message held, for a vectored write.

use std::io::IoSlice;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{FetchResponse, ProduceRequest};
use kafka_protocol::protocol::Encodable;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Record sections smaller than this are copied in beside the fields
/// around them: one write of a few kilobytes beats many tiny ones.
pub const SPLICE_MIN: usize = 4096;

/// A message with `records` fields that can be spliced.
pub trait Spliceable: Encodable {
    /// Every `records` field, in the order they are encoded.
    fn records_mut(&mut self) -> Vec<&mut Option<Bytes>>;
}

impl Spliceable for ProduceRequest {
    fn records_mut(&mut self) -> Vec<&mut Option<Bytes>> {
        self.topic_data
            .iter_mut()
            .flat_map(|t| t.partition_data.iter_mut())
            .map(|p| &mut p.records)
            .collect()
    }
}

impl Spliceable for FetchResponse {
    fn records_mut(&mut self) -> Vec<&mut Option<Bytes>> {
        self.responses
            .iter_mut()
            .flat_map(|t| t.partitions.iter_mut())
            .map(|p| &mut p.records)
            .collect()
    }
}

/// Encodes `message` at `version` after `head` (which begins with 4 bytes
/// for the frame's length, then the header), sets the length, and returns
/// the frame's chunks. `compact`: the version encodes `records` as compact
/// (flexible) bytes. A message without a large records section comes back
/// as one chunk.
pub fn encode_frame<M: Spliceable>(
    mut head: BytesMut,
    mut message: M,
    version: i16,
    compact: bool,
) -> Result<Vec<Bytes>, String> {
    let large = |r: &mut Option<Bytes>| r.as_ref().is_some_and(|r| r.len() >= SPLICE_MIN);
    if !message.records_mut().into_iter().any(large) {
        message.encode(&mut head, version).map_err(|e| e.to_string())?;
        let total = head.len();
        set_length(&mut head, total)?;
        return Ok(vec![head.freeze()]);
    }
    let records: Vec<Option<Bytes>> = message.records_mut().into_iter().map(Option::take).collect();
    let mut nulls = BytesMut::new();
    message.encode(&mut nulls, version).map_err(|e| e.to_string())?;
    for r in message.records_mut() {
        *r = Some(Bytes::new());
    }
    let mut empties = BytesMut::new();
    message.encode(&mut empties, version).map_err(|e| e.to_string())?;
    let width = if compact { 1 } else { 4 };
    let mut fields = Vec::with_capacity(records.len());
    let mut at = 0;
    while at < nulls.len().min(empties.len()) {
        if nulls[at] != empties[at] {
            fields.push(at);
            at += width;
        } else {
            at += 1;
        }
    }
    if nulls.len() != empties.len() || fields.len() != records.len() {
        return Err(format!(
            "found {} records fields for {} partitions",
            fields.len(),
            records.len()
        ));
    }
    let prefix = |len: usize| if compact { varint_len(len as u64 + 1) } else { 4 };
    let total = head.len()
        + nulls.len()
        + records
            .iter()
            .flatten()
            .map(|r| prefix(r.len()) - width + r.len())
            .sum::<usize>();
    set_length(&mut head, total)?;
    let mut chunks = Vec::new();
    let mut from = 0;
    for (field, records) in fields.into_iter().zip(records) {
        head.extend_from_slice(&nulls[from..field]);
        from = field + width;
        let Some(records) = records else {
            head.extend_from_slice(&nulls[field..from]);
            continue;
        };
        if compact {
            put_unsigned_varint(&mut head, records.len() as u64 + 1);
        } else {
            let len = i32::try_from(records.len())
                .map_err(|_| format!("{} record bytes in one partition", records.len()))?;
            head.extend_from_slice(&len.to_be_bytes());
        }
        if records.len() < SPLICE_MIN {
            head.extend_from_slice(&records);
        } else {
            chunks.push(head.split().freeze());
            chunks.push(records);
        }
    }
    head.extend_from_slice(&nulls[from..]);
    chunks.push(head.freeze());
    Ok(chunks)
}

/// Most chunks handed to one vectored write.
const MAX_IOVECS: usize = 64;

/// Writes `chunks` in order with vectored writes (no copy into a buffer of
/// our own), failing with `TimedOut` when the writer takes no byte for
/// `stall`.
pub async fn write_chunks<W: AsyncWrite + Unpin>(
    writer: &mut W,
    chunks: &[Bytes],
    stall: Duration,
) -> std::io::Result<()> {
    let (mut chunk, mut offset) = (0, 0);
    while chunk < chunks.len() {
        let slices: Vec<IoSlice<'_>> = std::iter::once(&chunks[chunk][offset..])
            .chain(chunks[chunk + 1..].iter().map(|c| &c[..]))
            .take(MAX_IOVECS)
            .map(IoSlice::new)
            .collect();
        let mut written = match tokio::time::timeout(stall, writer.write_vectored(&slices)).await {
            Ok(written) => written?,
            Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
        };
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while chunk < chunks.len() && written >= chunks[chunk].len() - offset {
            written -= chunks[chunk].len() - offset;
            chunk += 1;
            offset = 0;
        }
        offset += written;
    }
    writer.flush().await
}

/// Writes a frame's length (`total` less the 4 bytes of the length itself)
/// into its first four bytes.
pub fn set_length(head: &mut BytesMut, total: usize) -> Result<(), String> {
    let len = i32::try_from(total - 4).map_err(|_| format!("a frame of {total} bytes is too large"))?;
    head[..4].copy_from_slice(&len.to_be_bytes());
    Ok(())
}

fn varint_len(value: u64) -> usize {
    (64 - value.max(1).leading_zeros() as usize).div_ceil(7)
}

fn put_unsigned_varint(buf: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        buf.extend_from_slice(&[(value as u8 & 0x7f) | 0x80]);
        value >>= 7;
    }
    buf.extend_from_slice(&[value as u8]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::StrBytes;

    fn pattern(n: usize, seed: u8) -> Bytes {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect::<Vec<u8>>()
            .into()
    }

    #[test]
    fn produce_requests_splice_their_batches_and_match_the_plain_encoding() {
        let big = pattern(70_000, 1);
        // Either side of the splice threshold and of the one-byte varint,
        // a null and an empty records field.
        let sizes = [
            Some(big.clone()),
            None,
            Some(pattern(100, 2)),
            Some(Bytes::new()),
            Some(pattern(SPLICE_MIN, 3)),
            Some(pattern(SPLICE_MIN * 3 + 5, 4)),
        ];
        let topic = |name: &str, parts: &[Option<Bytes>]| {
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(name.to_owned())))
                .with_partition_data(
                    parts
                        .iter()
                        .enumerate()
                        .map(|(i, records)| {
                            PartitionProduceData::default()
                                .with_index(i as i32)
                                .with_records(records.clone())
                        })
                        .collect(),
                )
        };
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![
                topic("alpha", &sizes),
                topic("", &sizes[..2]),
                topic("gamma", &sizes[3..]),
            ]);
        for version in 3..=11 {
            let mut want = BytesMut::new();
            want.extend_from_slice(&[1, 2, 3, 4, 9]);
            request.encode(&mut want, version).unwrap();
            let len = (want.len() - 4) as i32;
            want[..4].copy_from_slice(&len.to_be_bytes());
            let mut head = BytesMut::new();
            head.extend_from_slice(&[0, 0, 0, 0, 9]);
            let chunks = encode_frame(head, request.clone(), version, version >= 9).unwrap();
            assert!(
                chunks.concat() == want[..],
                "v{version}: the spliced frame differs from the plain one"
            );
            // The large batches are the very same memory, not copies.
            let spliced = chunks.iter().filter(|c| c.as_ptr() == big.as_ptr()).count();
            assert_eq!(spliced, 2, "v{version}");
            assert_eq!(chunks.len(), 2 * 6 + 1, "v{version}: six large sections");
        }
        // Without a large section: one chunk.
        let small = ProduceRequest::default().with_topic_data(vec![topic("t", &sizes[1..4])]);
        let chunks = encode_frame(BytesMut::from(&[0u8; 4][..]), small, 9, true).unwrap();
        assert_eq!(chunks.len(), 1);
    }
}
