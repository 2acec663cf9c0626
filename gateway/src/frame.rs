//! Kafka's framing: every request and response is a 4-byte big-endian
//! length followed by that many bytes.

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::FrameError;

/// Reads one frame. `Ok(None)` when the peer closed the connection cleanly
/// between frames. A frame larger than `max` is refused before anything is
/// allocated for it.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> Result<Option<Bytes>, FrameError> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let n = reader.read(&mut len[got..]).await.map_err(FrameError::Io)?;
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(FrameError::Truncated)
            };
        }
        got += n;
    }
    let size = i32::from_be_bytes(len);
    if size < 0 {
        return Err(FrameError::NegativeSize(size));
    }
    let size = size as usize;
    if size > max {
        return Err(FrameError::TooLarge { size, max });
    }
    // Memory follows the bytes that really arrived: a client that declares
    // a large frame and then trickles (or stops) holds at most
    // `FIRST_ALLOCATION` plus what it sent, not the size it claimed.
    let mut body = BytesMut::with_capacity(size.min(FIRST_ALLOCATION));
    while body.len() < size {
        let want = size - body.len();
        if body.capacity() == body.len() {
            body.reserve(want.min(body.len().max(FIRST_ALLOCATION)));
        }
        let room = want.min(body.capacity() - body.len());
        let n = reader
            .read_buf(&mut (&mut body).limit(room))
            .await
            .map_err(FrameError::Io)?;
        if n == 0 {
            return Err(FrameError::Truncated);
        }
    }
    Ok(Some(body.freeze()))
}

/// What a frame's buffer starts at; it doubles from there as bytes arrive.
const FIRST_ALLOCATION: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use strait_upstream::splice::write_chunks;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn frames_round_trip_and_limits_hold() {
        let mut input: Vec<u8> = Vec::new();
        input.extend_from_slice(&3i32.to_be_bytes());
        input.extend_from_slice(b"abc");
        input.extend_from_slice(&0i32.to_be_bytes());
        let mut reader = &input[..];
        assert_eq!(
            read_frame(&mut reader, 10).await.unwrap().unwrap(),
            Bytes::from_static(b"abc")
        );
        assert_eq!(read_frame(&mut reader, 10).await.unwrap().unwrap(), Bytes::new());
        assert!(read_frame(&mut reader, 10).await.unwrap().is_none());

        let big = 11i32.to_be_bytes();
        let err = read_frame(&mut &big[..], 10).await.unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { size: 11, max: 10 }), "{err}");
        let negative = (-5i32).to_be_bytes();
        assert!(matches!(
            read_frame(&mut &negative[..], 10).await,
            Err(FrameError::NegativeSize(-5))
        ));
        let short = [0u8, 0, 0, 9, 1, 2];
        assert!(matches!(
            read_frame(&mut &short[..], 10).await,
            Err(FrameError::Truncated)
        ));
        let half_length = [0u8, 0];
        assert!(matches!(
            read_frame(&mut &half_length[..], 10).await,
            Err(FrameError::Truncated)
        ));
    }

    #[tokio::test]
    async fn a_frame_larger_than_the_first_allocation_arrives_whole() {
        // 3.5 MiB of a pattern, fed through a 7-byte-at-a-time duplex pipe
        // so every buffer growth step is crossed mid-read.
        let size = FIRST_ALLOCATION * 3 + FIRST_ALLOCATION / 2;
        let payload: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        let mut input = (size as i32).to_be_bytes().to_vec();
        input.extend_from_slice(&payload);
        let (mut client, mut server) = tokio::io::duplex(7);
        let writer = tokio::spawn(async move {
            client.write_all(&input).await.unwrap();
        });
        let frame = read_frame(&mut server, size).await.unwrap().unwrap();
        writer.await.unwrap();
        assert_eq!(frame.len(), size);
        assert!(frame == payload, "the frame's bytes differ from what was sent");
    }

    #[tokio::test]
    async fn chunks_are_written_whole_and_in_order_through_short_writes() {
        // 200 chunks of varied sizes (more than one writev takes), some
        // empty, through a 13-byte pipe so every write is partial.
        let chunks: Vec<Bytes> = (0..200usize)
            .map(|i| Bytes::from((0..(i * 37) % 300).map(|j| (i + j) as u8).collect::<Vec<u8>>()))
            .collect();
        let want: Vec<u8> = chunks.concat();
        let (mut client, mut server) = tokio::io::duplex(13);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            client.read_to_end(&mut got).await.unwrap();
            got
        });
        write_chunks(&mut server, &chunks, Duration::from_secs(5))
            .await
            .unwrap();
        drop(server);
        assert!(reader.await.unwrap() == want);
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_that_takes_nothing_times_the_write_out() {
        let (_client, mut server) = tokio::io::duplex(16);
        let chunks = [Bytes::from(vec![7u8; 100])];
        let err = write_chunks(&mut server, &chunks, Duration::from_secs(30))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    }
}
