//! Kafka's framing: every request and response is a 4-byte big-endian
//! length followed by that many bytes.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

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
    let mut body = BytesMut::zeroed(size);
    reader.read_exact(&mut body).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            FrameError::Truncated
        } else {
            FrameError::Io(e)
        }
    })?;
    Ok(Some(body.freeze()))
}

/// Writes one frame whose first four bytes are reserved for the length
/// (see [`crate::codec::encode_response`]), filling the length in.
pub async fn write_frame<W: AsyncWrite + Unpin>(writer: &mut W, mut frame: BytesMut) -> std::io::Result<()> {
    let len = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&len.to_be_bytes());
    writer.write_all(&frame).await
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
