//! A raw Kafka connection for protocol-level tests: frames encoded with the
//! `kafka-protocol` crate, written and read on a blocking socket.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, FetchRequest, FetchResponse, InitProducerIdRequest,
    InitProducerIdResponse, MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse, ProducerId,
    RequestHeader, ResponseHeader, SaslHandshakeRequest, SaslHandshakeResponse, TopicName, TransactionalId,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// A raw Kafka connection.
pub struct Conn {
    pub stream: TcpStream,
    next_id: i32,
    pub client_id: String,
}

impl Conn {
    pub fn open(port: u16, client_id: &str) -> Conn {
        Conn::from_stream(
            TcpStream::connect(("127.0.0.1", port)).expect("connect"),
            client_id,
        )
    }

    /// A connection over a stream the caller opened (with its own socket
    /// options).
    pub fn from_stream(stream: TcpStream, client_id: &str) -> Conn {
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        stream.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        Conn {
            stream,
            next_id: 1,
            client_id: client_id.to_string(),
        }
    }

    /// `127.0.0.1:PORT` of our end, as Strait logs it.
    pub fn local(&self) -> String {
        self.stream.local_addr().unwrap().to_string()
    }

    /// A request frame: header of `api`'s header version for
    /// `header_for` (normally `version`), then the body.
    pub fn frame<T: Encodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        header_for: i16,
        body: &T,
    ) -> (i32, Vec<u8>) {
        let id = self.next_id;
        self.next_id += 1;
        let mut buf = Vec::new();
        RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(id)
            .with_client_id(Some(StrBytes::from_string(self.client_id.clone())))
            .encode(&mut buf, api.request_header_version(header_for))
            .unwrap();
        body.encode(&mut buf, header_for).unwrap();
        let mut out = (buf.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(&buf);
        (id, out)
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// Reads one response frame and returns (correlation id checked,
    /// body after the header).
    pub fn read(&mut self, api: ApiKey, header_version_of: i16, want_id: i32) -> Vec<u8> {
        let mut len = [0u8; 4];
        self.stream
            .read_exact(&mut len)
            .expect("reading a response length");
        let len = i32::from_be_bytes(len);
        assert!((4..=64 << 20).contains(&len), "response of {len} bytes");
        let mut body = vec![0u8; len as usize];
        self.stream.read_exact(&mut body).expect("reading a response");
        let mut cursor = &body[..];
        let header = ResponseHeader::decode(&mut cursor, api.response_header_version(header_version_of))
            .expect("response header");
        assert_eq!(header.correlation_id, want_id, "{api:?} correlation id");
        cursor.to_vec()
    }

    /// Sends `body` at `version` and reads its answer.
    pub fn call<R: kafka_protocol::protocol::Request>(&mut self, body: &R, version: i16) -> R::Response {
        let api = ApiKey::try_from(R::KEY).expect("a known API");
        let (id, f) = self.frame(api, version, version, body);
        self.send_raw(&f);
        let bytes = self.read(api, version, id);
        R::Response::decode(&mut &bytes[..], version).expect("a response that decodes")
    }

    pub fn api_versions(&mut self, version: i16) -> ApiVersionsResponse {
        let (id, f) = self.frame(
            ApiKey::ApiVersions,
            version,
            version,
            &ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("strait-tests"))
                .with_client_software_version(StrBytes::from_static_str("1.0")),
        );
        self.send_raw(&f);
        let body = self.read(ApiKey::ApiVersions, version, id);
        ApiVersionsResponse::decode(&mut &body[..], version).expect("ApiVersions response")
    }

    pub fn metadata(&mut self) -> MetadataResponse {
        let (id, f) = self.frame(
            ApiKey::Metadata,
            12,
            12,
            &MetadataRequest::default()
                .with_topics(None)
                .with_allow_auto_topic_creation(false),
        );
        self.send_raw(&f);
        let body = self.read(ApiKey::Metadata, 12, id);
        MetadataResponse::decode(&mut &body[..], 12).expect("Metadata response")
    }

    /// Produce v9 (acks=all) of `batch` to `partition` of `topic` with the
    /// request's `timeout_ms`; returns (error code, base offset).
    pub fn produce(&mut self, topic: &str, partition: i32, batch: &[u8], timeout_ms: i32) -> (i16, i64) {
        let (id, f) = self.produce_frame(topic, partition, batch, timeout_ms);
        self.send_raw(&f);
        self.produce_answer(id)
    }

    /// The frame of [`Conn::produce`] and its correlation id, to send
    /// without waiting for the answer.
    pub fn produce_frame(
        &mut self,
        topic: &str,
        partition: i32,
        batch: &[u8],
        timeout_ms: i32,
    ) -> (i32, Vec<u8>) {
        let req = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(timeout_ms)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(batch.to_vec().into()))])]);
        self.frame(ApiKey::Produce, 9, 9, &req)
    }

    /// Reads the answer to a [`Conn::produce_frame`]: (error code, base
    /// offset).
    pub fn produce_answer(&mut self, id: i32) -> (i16, i64) {
        let body = self.read(ApiKey::Produce, 9, id);
        let r = ProduceResponse::decode(&mut &body[..], 9).expect("Produce response");
        let p = &r.responses[0].partition_responses[0];
        (p.error_code, p.base_offset)
    }

    /// Sends a Fetch v12 and reads its answer.
    pub fn fetch(&mut self, req: &FetchRequest) -> FetchResponse {
        self.fetch_at(req, 12)
    }

    /// Sends a Fetch at `version` and reads its answer.
    pub fn fetch_at(&mut self, req: &FetchRequest, version: i16) -> FetchResponse {
        let (id, f) = self.frame(ApiKey::Fetch, version, version, req);
        self.send_raw(&f);
        let body = self.read(ApiKey::Fetch, version, id);
        let r = FetchResponse::decode(&mut &body[..], version).expect("Fetch response");
        assert_eq!(r.error_code, 0, "{r:?}");
        r
    }

    pub fn sasl_handshake(&mut self) -> SaslHandshakeResponse {
        let (id, f) = self.frame(
            ApiKey::SaslHandshake,
            1,
            1,
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
        );
        self.send_raw(&f);
        let body = self.read(ApiKey::SaslHandshake, 1, id);
        SaslHandshakeResponse::decode(&mut &body[..], 1).expect("SaslHandshake response")
    }

    /// Asserts that Strait closes this connection (EOF or reset within
    /// 10 s) without answering.
    pub fn assert_closed(&mut self, what: &str) {
        let mut buf = [0u8; 64];
        match self.stream.read(&mut buf) {
            Ok(0) => {}
            Ok(n) => panic!(
                "{what}: Strait answered {n} bytes instead of closing: {:?}",
                &buf[..n]
            ),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                ) => {}
            Err(e) => panic!("{what}: the connection stayed open: {e}"),
        }
    }
}

pub fn check_metadata(md: &MetadataResponse, port: u16) {
    assert_eq!(md.brokers.len(), 1, "{md:?}");
    assert_eq!(md.brokers[0].node_id.0, 0);
    assert_eq!(md.brokers[0].port, port as i32);
}

/// A Fetch of partition 0 of `topic`, as a consumer (replica -1) asks.
pub fn fetch_request(
    topic: &str,
    offset: i64,
    max_wait_ms: i32,
    min_bytes: i32,
    max_bytes: i32,
    partition_max_bytes: i32,
) -> FetchRequest {
    FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(min_bytes)
        .with_max_bytes(max_bytes)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(partition_max_bytes)])])
}

/// InitProducerId v4 (a transactional one with `transactional`).
pub fn init_producer_id(c: &mut Conn, transactional: Option<&str>) -> InitProducerIdResponse {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(transactional.map(|t| TransactionalId(StrBytes::from_string(t.to_string()))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let (id, f) = c.frame(ApiKey::InitProducerId, 4, 4, &req);
    c.send_raw(&f);
    let body = c.read(ApiKey::InitProducerId, 4, id);
    InitProducerIdResponse::decode(&mut &body[..], 4).expect("InitProducerId response")
}

/// An uncompressed v2 batch of `values` from producer (pid, epoch)
/// starting at sequence `base_seq`.
pub fn idempotent_batch(pid: i64, epoch: i16, base_seq: i32, values: &[&str]) -> Vec<u8> {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: pid,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: base_seq + i as i32,
            timestamp: 1_700_000_000_000 + i as i64,
            key: None,
            value: Some(v.as_bytes().to_vec().into()),
            headers: Default::default(),
        })
        .collect();
    let mut buf = Vec::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encoding a batch");
    buf
}

/// The values of the records of a Fetch answer's `records` (as text).
pub fn record_values(records: Option<&bytes::Bytes>) -> Vec<String> {
    let mut buf = records.cloned().unwrap_or_default();
    RecordBatchDecoder::decode_all(&mut buf)
        .expect("decoding fetched batches")
        .into_iter()
        .flat_map(|set| set.records)
        .map(|r| String::from_utf8_lossy(&r.value.unwrap_or_default()).into_owned())
        .collect()
}

/// The headers of the record batches of partition 0 of `topic` from
/// offset 0 (one Fetch of up to 8 MiB), as the broker stores them.
pub fn batch_headers(c: &mut Conn, topic: &str) -> Vec<strait_batch::BatchHeader> {
    let response = c.fetch(&fetch_request(topic, 0, 100, 1, 8 << 20, 8 << 20));
    let partition = &response.responses[0].partitions[0];
    assert_eq!(partition.error_code, 0, "fetching {topic}: {partition:?}");
    let records = partition.records.clone().unwrap_or_default();
    let mut headers = Vec::new();
    let mut at = 0;
    while let Ok(h) = strait_batch::BatchHeader::parse_whole(&records[at..]) {
        at += h.size();
        headers.push(h);
    }
    headers
}

/// OffsetForLeaderEpoch v4 for one partition: its answer.
pub fn offset_for_leader_epoch(
    c: &mut Conn,
    topic: &str,
    partition: i32,
    leader_epoch: i32,
) -> kafka_protocol::messages::offset_for_leader_epoch_response::EpochEndOffset {
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol::messages::{BrokerId, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
    let req = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![OffsetForLeaderTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![OffsetForLeaderPartition::default()
                .with_partition(partition)
                .with_current_leader_epoch(-1)
                .with_leader_epoch(leader_epoch)])]);
    let (id, f) = c.frame(ApiKey::OffsetForLeaderEpoch, 4, 4, &req);
    c.send_raw(&f);
    let body = c.read(ApiKey::OffsetForLeaderEpoch, 4, id);
    let response =
        OffsetForLeaderEpochResponse::decode(&mut &body[..], 4).expect("OffsetForLeaderEpoch response");
    response.topics[0].partitions[0].clone()
}

/// DeleteRecords v2 before `offset` in one partition: its answer.
pub fn delete_records(
    c: &mut Conn,
    topic: &str,
    partition: i32,
    offset: i64,
) -> kafka_protocol::messages::delete_records_response::DeleteRecordsPartitionResult {
    use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
    use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
    let req = DeleteRecordsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![DeleteRecordsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(partition)
                .with_offset(offset)])]);
    let (id, f) = c.frame(ApiKey::DeleteRecords, 2, 2, &req);
    c.send_raw(&f);
    let body = c.read(ApiKey::DeleteRecords, 2, id);
    let response = DeleteRecordsResponse::decode(&mut &body[..], 2).expect("DeleteRecords response");
    response.topics[0].partitions[0].clone()
}
