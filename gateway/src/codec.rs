//! Request decoding and response encoding with the `kafka-protocol` crate.
//!
//! A request frame is a header (API key, version, correlation id, client
//! id; tagged fields from header v2) and a body whose layout the API and
//! version decide. Responses carry a header whose version depends on the API
//! and version too (ApiVersions always uses header v0).

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::error::DecodeError;

/// A decoded request.
#[derive(Debug)]
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

/// Encodes a response frame, leaving four bytes at the front for the length
/// that [`crate::frame::write_frame`] fills in.
pub fn encode_response(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> Result<BytesMut, String> {
    let mut buf = BytesMut::with_capacity(256);
    buf.extend_from_slice(&[0; 4]);
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut buf, api.response_header_version(version))
        .map_err(|e| format!("encoding {api:?} v{version} response header: {e}"))?;
    body.encode(&mut buf, version)
        .map_err(|e| format!("encoding {api:?} v{version} response: {e}"))?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest};
    use kafka_protocol::protocol::StrBytes;

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
}
