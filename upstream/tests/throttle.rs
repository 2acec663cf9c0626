//! A broker's throttle time (KIP-219) holds back the client's next request
//! to it. No real peer here throttles on demand (Kafka needs quotas, Tansu
//! and Strait have none), so a scripted broker answers instead: this test
//! injects that one fault, beside the real-broker tests in the root crate's
//! `tests/upstream.rs`.

use std::time::Duration;

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, MetadataRequest, MetadataResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use strait_upstream::{ConnectOptions, Connection};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

async fn read_request(stream: &mut TcpStream) -> (RequestHeader, Instant) {
    let size = stream.read_i32().await.unwrap() as usize;
    let mut frame = vec![0u8; size];
    stream.read_exact(&mut frame).await.unwrap();
    let arrived = Instant::now();
    let mut buf = bytes::Bytes::from(frame);
    let key = ApiKey::try_from(i16::from_be_bytes([buf[0], buf[1]])).unwrap();
    let version = i16::from_be_bytes([buf[2], buf[3]]);
    let header = RequestHeader::decode(&mut buf, key.request_header_version(version)).unwrap();
    (header, arrived)
}

async fn answer<T: Encodable>(stream: &mut TcpStream, header: &RequestHeader, body: &T, header_version: i16) {
    let mut buf = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(header.correlation_id)
        .encode(&mut buf, header_version)
        .unwrap();
    body.encode(&mut buf, header.request_api_version).unwrap();
    let mut frame = BytesMut::new();
    frame.put_i32(buf.len() as i32);
    frame.extend_from_slice(&buf);
    stream.write_all(&frame).await.unwrap();
}

#[tokio::test]
async fn a_throttled_answer_holds_back_the_next_request() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let broker = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let (header, _) = read_request(&mut stream).await;
        let versions = ApiVersionsResponse::default().with_api_keys(vec![
            ApiVersion::default()
                .with_api_key(ApiKey::ApiVersions as i16)
                .with_max_version(3),
            ApiVersion::default()
                .with_api_key(ApiKey::Metadata as i16)
                .with_min_version(1)
                .with_max_version(12),
        ]);
        answer(&mut stream, &header, &versions, 0).await;
        let metadata = MetadataResponse::default().with_brokers(vec![MetadataResponseBroker::default()
            .with_node_id(BrokerId(1))
            .with_host(StrBytes::from_static_str("127.0.0.1"))
            .with_port(1)]);
        // First Metadata: answered at once, asking for 400 ms of quiet.
        let (header, _) = read_request(&mut stream).await;
        let answered = Instant::now();
        answer(
            &mut stream,
            &header,
            &metadata.clone().with_throttle_time_ms(400),
            1,
        )
        .await;
        // The next request may arrive only after that.
        let (header, arrived) = read_request(&mut stream).await;
        answer(&mut stream, &header, &metadata, 1).await;
        arrived - answered
    });
    let connection = Connection::connect("scripted broker".into(), &addr, &ConnectOptions::default())
        .await
        .unwrap();
    let request = MetadataRequest::default().with_topics(None);
    let first = connection.request(&request).await.unwrap();
    assert_eq!(first.throttle_time_ms, 400);
    connection.request(&request).await.unwrap();
    let quiet = broker.await.unwrap();
    assert!(
        quiet >= Duration::from_millis(390),
        "the next request came after {quiet:?}"
    );
}
