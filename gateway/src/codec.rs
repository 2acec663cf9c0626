//! Request decoding and response encoding with the `kafka-protocol` crate.
//!
//! A request frame is a header (API key, version, correlation id, client
//! id; tagged fields from header v2) and a body whose layout the API and
//! version decide. Responses carry a header whose version depends on the API
//! and version too (ApiVersions always uses header v0).

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable};
use strait_upstream::splice::{encode_frame, set_length};

use crate::error::DecodeError;

/// A decoded request.
#[derive(Debug, Clone)]
pub struct Request {
    /// Which API.
    pub api: ApiKey,
    /// Its version.
    pub version: i16,
    /// Echoed in the response.
    pub correlation_id: i32,
    /// The client's self-chosen name, for logs.
    pub client_id: Option<String>,
    /// The body.
    pub body: RequestKind,
}

/// The API key, version and correlation id at the start of a frame, read
/// without decoding anything else (enough to answer or log about a request
/// whose body cannot be decoded).
pub fn peek_header(frame: &[u8]) -> Result<(i16, i16, i32), DecodeError> {
    if frame.len() < 8 {
        return Err(DecodeError::TooShort(frame.len()));
    }
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    Ok((api_key, version, correlation_id))
}

/// The client id of a request frame whose body may not decode: the nullable
/// string that follows the correlation id in request headers v1 and later
/// (every API but ControlledShutdown v0). For log lines about bad requests.
pub fn peek_client_id(frame: &[u8]) -> Option<String> {
    let len = i16::from_be_bytes(frame.get(8..10)?.try_into().ok()?);
    let bytes = frame.get(10..10 + usize::try_from(len).ok()?)?;
    Some(String::from_utf8_lossy(bytes).into_owned())
}

/// Decodes a whole request frame.
pub fn decode_request(mut frame: Bytes) -> Result<Request, DecodeError> {
    let (api_key, version, correlation_id) = peek_header(&frame)?;
    let api = ApiKey::try_from(api_key).map_err(|()| DecodeError::UnknownApiKey {
        api_key,
        correlation_id,
    })?;
    let range = api.valid_versions();
    if version < range.min || version > range.max {
        return Err(DecodeError::UnknownVersion {
            api,
            version,
            correlation_id,
        });
    }
    let malformed = |reason: String| DecodeError::Malformed { api, version, reason };
    let header = RequestHeader::decode(&mut frame, api.request_header_version(version))
        .map_err(|e| malformed(format!("header: {e}")))?;
    // Bytes left after the body are ignored, as Kafka brokers do.
    let body = RequestKind::decode(api, &mut frame, version).map_err(|e| malformed(e.to_string()))?;
    Ok(Request {
        api,
        version,
        correlation_id,
        client_id: header.client_id.map(|s| s.to_string()),
        body,
    })
}

/// An encoded response frame, ready to write: its chunks in order, the
/// first beginning with the frame's 4-byte length.
///
/// The record batches of a Fetch response are chunks of their own: the very
/// `Bytes` the spool handed out, views of its mapped segments. They are
/// written to the socket from there (vectored writes), so a response waiting
/// for a slow client holds page-cache pages, not copies on the heap.
#[derive(Debug)]
pub struct ResponseFrame {
    chunks: Vec<Bytes>,
}

impl ResponseFrame {
    /// The chunks to write, in order.
    pub fn chunks(&self) -> &[Bytes] {
        &self.chunks
    }

    /// The frame's size on the wire, length prefix included.
    pub fn len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }

    /// Whether the frame has no bytes (never true for an encoded frame).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The whole frame in one buffer (copies; for tests and small frames).
    pub fn to_vec(&self) -> Vec<u8> {
        self.chunks.concat()
    }
}

/// Encodes a response frame. A Fetch response's record batches are spliced
/// in as chunks of their own rather than copied (see [`ResponseFrame`]).
pub fn encode_response(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: ResponseKind,
) -> Result<ResponseFrame, String> {
    let mut head = BytesMut::with_capacity(256);
    head.extend_from_slice(&[0; 4]);
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut head, api.response_header_version(version))
        .map_err(|e| format!("encoding {api:?} v{version} response header: {e}"))?;
    let chunks = match body {
        ResponseKind::Fetch(fetch) => encode_frame(head, fetch, version, version >= 12)
            .map_err(|e| format!("encoding Fetch v{version} response: {e}"))?,
        body => {
            body.encode(&mut head, version)
                .map_err(|e| format!("encoding {api:?} v{version} response: {e}"))?;
            let total = head.len();
            set_length(&mut head, total)?;
            vec![head.freeze()]
        }
    };
    Ok(ResponseFrame { chunks })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{ApiVersionsRequest, FetchResponse, MetadataRequest};
    use kafka_protocol::protocol::StrBytes;
    use strait_upstream::splice::SPLICE_MIN;

    fn frame<T: Encodable>(api: ApiKey, version: i16, body: &T) -> Bytes {
        let mut buf = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(7)
            .with_client_id(Some(StrBytes::from_static_str("test-client")))
            .encode(&mut buf, api.request_header_version(version))
            .unwrap();
        body.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    #[test]
    fn requests_decode_with_their_header() {
        let req = decode_request(frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())).unwrap();
        assert_eq!(
            (req.api, req.version, req.correlation_id),
            (ApiKey::ApiVersions, 3, 7)
        );
        assert_eq!(req.client_id.as_deref(), Some("test-client"));
        assert!(matches!(req.body, RequestKind::ApiVersions(_)));
        let req = decode_request(frame(ApiKey::Metadata, 12, &MetadataRequest::default())).unwrap();
        assert!(matches!(req.body, RequestKind::Metadata(_)));
    }

    #[test]
    fn the_client_id_is_found_even_when_the_body_is_garbage() {
        let mut f = frame(ApiKey::Metadata, 12, &MetadataRequest::default()).to_vec();
        f.truncate(8 + 2 + "test-client".len());
        f.extend_from_slice(&[0xff; 9]);
        assert_eq!(peek_client_id(&f).as_deref(), Some("test-client"));
        assert_eq!(peek_client_id(&f[..12]), None);
        let mut null = f[..8].to_vec();
        null.extend_from_slice(&(-1i16).to_be_bytes());
        assert_eq!(peek_client_id(&null), None);
    }

    #[test]
    fn bad_requests_are_errors_not_panics() {
        assert!(matches!(
            decode_request(Bytes::from_static(&[0, 3])),
            Err(DecodeError::TooShort(2))
        ));
        let unknown = Bytes::from_static(&[0x7f, 0, 0, 0, 0, 0, 0, 1]);
        assert!(matches!(
            decode_request(unknown),
            Err(DecodeError::UnknownApiKey {
                api_key: 0x7f00,
                correlation_id: 1
            })
        ));
        let future = Bytes::from_static(&[0, 3, 0x40, 0, 0, 0, 0, 1]);
        assert!(matches!(
            decode_request(future),
            Err(DecodeError::UnknownVersion { .. })
        ));
        // A Metadata v12 request cut short.
        let full = frame(ApiKey::Metadata, 12, &MetadataRequest::default());
        let cut = full.slice(..full.len() - 1);
        assert!(matches!(decode_request(cut), Err(DecodeError::Malformed { .. })));
    }

    /// The plain encoding of a response, for comparison.
    fn plain(api: ApiKey, version: i16, correlation_id: i32, body: &ResponseKind) -> Vec<u8> {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[0; 4]);
        ResponseHeader::default()
            .with_correlation_id(correlation_id)
            .encode(&mut buf, api.response_header_version(version))
            .unwrap();
        body.encode(&mut buf, version).unwrap();
        let len = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        buf.to_vec()
    }

    #[test]
    fn fetch_responses_splice_their_records_and_match_the_plain_encoding() {
        use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
        use kafka_protocol::messages::TopicName;
        let pattern = |n: usize, seed: u8| {
            Bytes::from(
                (0..n)
                    .map(|i| (i as u8).wrapping_mul(31) ^ seed)
                    .collect::<Vec<u8>>(),
            )
        };
        // Sizes either side of the splice threshold and of the one-byte
        // varint, a null and an empty records field, an error partition.
        let big = pattern(70_000, 1);
        let sizes: [(Option<Bytes>, i16); 6] = [
            (Some(big.clone()), 0),
            (None, 0),
            (Some(pattern(100, 2)), 0),
            (Some(Bytes::new()), 1),
            (Some(pattern(SPLICE_MIN, 3)), 0),
            (Some(pattern(SPLICE_MIN * 3 + 5, 4)), 0),
        ];
        let topic = |name: &str, parts: &[(Option<Bytes>, i16)]| {
            FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_string(name.to_owned())))
                .with_partitions(
                    parts
                        .iter()
                        .enumerate()
                        .map(|(i, (records, error))| {
                            PartitionData::default()
                                .with_partition_index(i as i32)
                                .with_error_code(*error)
                                .with_high_watermark(1_000_000 + i as i64)
                                .with_aborted_transactions(Some(Vec::new()))
                                .with_records(records.clone())
                        })
                        .collect(),
                )
        };
        let response = FetchResponse::default()
            .with_throttle_time_ms(3)
            .with_session_id(0)
            .with_responses(vec![
                topic("alpha", &sizes),
                topic("", &sizes[..2]),
                topic("gamma", &sizes[3..]),
            ]);
        for version in 4..=12 {
            let body = ResponseKind::Fetch(response.clone());
            let want = plain(ApiKey::Fetch, version, 99, &body);
            let frame = encode_response(ApiKey::Fetch, version, 99, body).unwrap();
            assert_eq!(frame.len(), want.len(), "v{version}");
            assert!(
                frame.to_vec() == want,
                "v{version}: the spliced encoding differs from the plain one"
            );
            // The large record sections are the very same memory, not copies.
            let spliced = frame
                .chunks()
                .iter()
                .filter(|c| c.as_ptr() == big.as_ptr() && c.len() == big.len())
                .count();
            assert_eq!(
                spliced, 2,
                "v{version}: the 70 kB section is written from where it was"
            );
        }
    }

    #[test]
    fn other_responses_are_one_chunk() {
        let body = ResponseKind::ApiVersions(kafka_protocol::messages::ApiVersionsResponse::default());
        let want = plain(ApiKey::ApiVersions, 3, 5, &body);
        let frame = encode_response(ApiKey::ApiVersions, 3, 5, body).unwrap();
        assert_eq!(frame.chunks().len(), 1);
        assert_eq!(frame.to_vec(), want);
    }
}
