//! Produce, Fetch, ListOffsets and OffsetForLeaderEpoch on local topics.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{join_all, select_all};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use strait_batch::{BatchHeader, Compression};
use tokio::time::Instant;

use super::{s, Broker};
use crate::error::{kafka_code, Failure};
use crate::producers::Check;
use crate::topics::PartitionHandle;

/// Most bytes a compressed batch may expand to when a timestamp lookup
/// looks inside it; a larger one answers with the batch's first offset.
const MAX_DECOMPRESSED: usize = 64 << 20;

/// Longest a Fetch waits for data, whatever the client asks.
const MAX_FETCH_WAIT: Duration = Duration::from_secs(30);

impl Broker {
    /// Produce. `None` for `acks=0`, which gets no response.
    pub(super) async fn produce(&self, req: ProduceRequest, version: i16) -> Option<ProduceResponse> {
        let refuse = if req.transactional_id.as_ref().is_some_and(|t| !t.0.is_empty()) {
            Some(ResponseError::TransactionalIdAuthorizationFailed)
        } else if !matches!(req.acks, -1..=1) {
            Some(ResponseError::InvalidRequiredAcks)
        } else {
            None
        };
        // Kafka's produce timeout: how long the request may wait for its
        // appends (here: the write, and under `every_batch` the sync).
        // Zero or less waits as long as it takes.
        let timeout = (req.timeout_ms > 0).then(|| Duration::from_millis(req.timeout_ms as u64));
        let mut work = Vec::new();
        for topic in &req.topic_data {
            for p in &topic.partition_data {
                let name = topic.name.0.to_string();
                let records = p.records.clone();
                let index = p.index;
                work.push(async move {
                    let answer = match refuse {
                        Some(code) => error_produce(index, code, None),
                        None => {
                            self.produce_partition(&name, index, records, version, timeout)
                                .await
                        }
                    };
                    for_version(answer, version)
                });
            }
        }
        let mut results = join_all(work).await.into_iter();
        if req.acks == 0 {
            return None;
        }
        let mut response = ProduceResponse::default();
        for topic in req.topic_data {
            let partition_responses = topic
                .partition_data
                .iter()
                .map(|_| results.next().expect("one result per partition"))
                .collect();
            response.responses.push(
                TopicProduceResponse::default()
                    .with_name(topic.name)
                    .with_partition_responses(partition_responses),
            );
        }
        Some(response)
    }

    async fn produce_partition(
        &self,
        topic: &str,
        index: i32,
        records: Option<Bytes>,
        version: i16,
        timeout: Option<Duration>,
    ) -> PartitionProduceResponse {
        let Some(partition) = self.topics.get(topic).and_then(|t| t.partition(index).cloned()) else {
            return error_produce(index, ResponseError::UnknownTopicOrPartition, None);
        };
        let Some(records) = records else {
            return error_produce(index, ResponseError::CorruptMessage, Some("no records"));
        };
        let headers = headers_of(&records);
        // As Kafka's broker: Produce v3+ carries exactly one batch per
        // partition (a second one would also escape the sequence checks).
        if headers.len() > 1 {
            return error_produce(
                index,
                ResponseError::InvalidRecord,
                Some("a Produce request carries exactly one record batch per partition"),
            );
        }
        // Transaction markers come from a coordinator, never from clients;
        // and a transactional batch needs a transaction Strait refuses.
        if headers.iter().any(BatchHeader::is_control) {
            return error_produce(
                index,
                ResponseError::InvalidRecord,
                Some("control batches are not accepted from clients"),
            );
        }
        if headers.iter().any(BatchHeader::is_transactional) {
            return error_produce(
                index,
                ResponseError::TransactionalIdAuthorizationFailed,
                Some("transactions are not supported by Strait yet"),
            );
        }
        // KIP-110: zstd needs Produce v7, as in Kafka.
        if version < 7 && headers.iter().any(|h| h.compression() == Compression::Zstd) {
            return error_produce(
                index,
                ResponseError::UnsupportedCompressionType,
                Some("zstd needs Produce v7 or later"),
            );
        }
        // A batch whose max timestamp is below its first timestamp (sarama
        // 1.22 writes -1) gets the max of its records, as Kafka's broker
        // sets it: retention and timestamp lookups go by it.
        let records = if headers
            .iter()
            .any(|h| !h.log_append_time() && h.max_timestamp < h.base_timestamp)
        {
            tokio::task::spawn_blocking(move || repair_max_timestamps(records))
                .await
                .expect("repairing timestamps does not panic")
        } else {
            records
        };
        let idempotent = headers.iter().any(|h| h.producer_id >= 0);
        let lock = self.append_lock(topic, index);
        let sequences = self.sequences(topic, index);
        let pool = Arc::clone(self.topics.pool());
        let deadline = timeout.map(|t| Instant::now() + t);
        let timed_out = || {
            error_produce(
                index,
                ResponseError::RequestTimedOut,
                Some("the append did not complete within the request's timeout (it may still complete)"),
            )
        };
        // Idempotent appends to one partition are checked and written one
        // at a time, so the sequence state follows the log. Nothing is
        // written if the request's time runs out before its turn.
        let admitted = async {
            let guard = if idempotent {
                Some(Arc::clone(&lock).lock_owned().await)
            } else {
                None
            };
            if idempotent {
                match sequences.check(&headers) {
                    Check::Append => {}
                    Check::Duplicate(base_offset) => {
                        return Err(PartitionProduceResponse::default()
                            .with_index(index)
                            .with_base_offset(base_offset as i64)
                            .with_log_append_time_ms(-1)
                            .with_log_start_offset(partition.log.log_start_offset() as i64));
                    }
                    Check::Reject(code) => return Err(error_produce(index, code, None)),
                }
            }
            Ok(guard)
        };
        let admitted = match deadline {
            None => admitted.await,
            Some(at) => match tokio::time::timeout_at(at, admitted).await {
                Ok(admitted) => admitted,
                Err(_) => return timed_out(),
            },
        };
        let guard = match admitted {
            Ok(guard) => guard,
            Err(answer) => return answer,
        };
        let append = pool.append(&partition.log, records);
        let topic = topic.to_owned();
        let mut finish = Box::pin(async move {
            let _guard = guard;
            let result = append.await;
            if let Ok(info) = &result {
                if idempotent {
                    let mut next = info.base_offset;
                    let bases: Vec<u64> = headers
                        .iter()
                        .map(|h| {
                            let base = next;
                            next += h.offset_count();
                            base
                        })
                        .collect();
                    sequences.record(&headers, bases);
                }
                partition.appended.notify_waiters();
            }
            match result {
                Ok(info) => PartitionProduceResponse::default()
                    .with_index(index)
                    .with_base_offset(info.base_offset as i64)
                    .with_log_append_time_ms(-1)
                    .with_log_start_offset(partition.log.log_start_offset() as i64),
                Err(e) => {
                    if !matches!(e.side(), strait_spool::Side::Client) {
                        tracing::error!(topic, partition = index, error = %e, "append failed");
                    }
                    let message = e.to_string();
                    error_produce(index, kafka_code(Failure::Spool(&e)), Some(&message))
                }
            }
        });
        match deadline {
            None => finish.await,
            Some(at) => match tokio::time::timeout_at(at, &mut finish).await {
                Ok(answer) => answer,
                Err(_) => {
                    // The append finishes on its own, and its sequences are
                    // recorded: the client's retry is then a duplicate.
                    tokio::spawn(finish);
                    timed_out()
                }
            },
        }
    }

    /// Fetch with long polling: answers once `min_bytes` are there, or when
    /// `max_wait_ms` has passed, or at once on an error.
    pub(super) async fn fetch(&self, mut req: FetchRequest, version: i16) -> FetchResponse {
        // From v13 on topics come by id (KIP-516): named here, and the
        // answer carries the ids back.
        let ids: Vec<uuid::Uuid> = req.topics.iter().map(|t| t.topic_id).collect();
        if version >= 13 {
            for t in &mut req.topics {
                if t.topic.is_empty() {
                    if let Some(found) = self.topics.by_id(t.topic_id) {
                        t.topic = TopicName(StrBytes::from_string(found.name.to_string()));
                    }
                }
            }
        }
        let mut response = self.fetch_named(&req, version).await;
        if version >= 13 {
            for (topic, id) in response.responses.iter_mut().zip(ids) {
                topic.topic_id = id;
                if topic.topic.is_empty() {
                    for p in &mut topic.partitions {
                        p.error_code = ResponseError::UnknownTopicId.code();
                    }
                }
            }
        }
        response
    }

    async fn fetch_named(&self, req: &FetchRequest, version: i16) -> FetchResponse {
        let wait = Duration::from_millis(req.max_wait_ms.max(0) as u64).min(MAX_FETCH_WAIT);
        let deadline = Instant::now() + wait;
        loop {
            // Register for wake-ups before reading, so an append between
            // the read and the wait is not missed.
            let partitions: Vec<Arc<PartitionHandle>> = req
                .topics
                .iter()
                .filter_map(|t| self.topics.get(&t.topic.0))
                .flat_map(|t| {
                    let wanted: Vec<i32> = req
                        .topics
                        .iter()
                        .filter(|ft| *ft.topic.0 == *t.name)
                        .flat_map(|ft| ft.partitions.iter().map(|p| p.partition))
                        .collect();
                    wanted
                        .into_iter()
                        .filter_map(|i| t.partition(i).cloned())
                        .collect::<Vec<_>>()
                })
                .collect();
            let mut waits: Vec<_> = partitions
                .iter()
                .map(|p| Box::pin(p.appended.notified()))
                .collect();
            for w in waits.iter_mut() {
                w.as_mut().enable();
            }
            let stopping = self.stopping.notified();
            tokio::pin!(stopping);
            stopping.as_mut().enable();
            let (response, bytes, errors) = self.fetch_once(req, version).await;
            if bytes >= req.min_bytes.max(0) as usize
                || errors
                || waits.is_empty()
                || Instant::now() >= deadline
                || self.is_stopping()
            {
                return response;
            }
            tokio::select! {
                _ = select_all(waits) => {}
                _ = tokio::time::sleep_until(deadline) => {}
                // Shutting down: answer with what there is now.
                _ = stopping => {}
            }
        }
    }

    /// One pass over the fetched partitions: the response, the bytes it
    /// carries, and whether any partition had an error.
    async fn fetch_once(&self, req: &FetchRequest, version: i16) -> (FetchResponse, usize, bool) {
        // log_start_offset exists from v5 on.
        let start = |offset: u64| if version >= 5 { offset as i64 } else { -1 };
        // The request's max_bytes, capped by the broker's (Kafka's
        // fetch.max.bytes), so no request makes a response of gigabytes.
        let mut budget = (req.max_bytes.max(0) as usize).min(self.fetch_max_bytes);
        let mut total = 0usize;
        let mut errors = false;
        let mut response = FetchResponse::default();
        for topic in &req.topics {
            let found = self.topics.get(&topic.topic.0);
            let mut out = FetchableTopicResponse::default().with_topic(topic.topic.clone());
            for fp in &topic.partitions {
                let mut data = PartitionData::default()
                    .with_partition_index(fp.partition)
                    .with_aborted_transactions(Some(Vec::new()))
                    .with_preferred_read_replica(BrokerId(-1))
                    .with_records(Some(Bytes::new()));
                let Some(partition) = found.as_ref().and_then(|t| t.partition(fp.partition)) else {
                    errors = true;
                    out.partitions
                        .push(data.with_error_code(ResponseError::UnknownTopicOrPartition.code()));
                    continue;
                };
                let log = &partition.log;
                let hw = log.high_watermark() as i64;
                data = data
                    .with_high_watermark(hw)
                    .with_last_stable_offset(hw)
                    .with_log_start_offset(start(log.log_start_offset()));
                // KIP-74: the first batch is returned whole even if larger
                // than the limits, so a consumer always makes progress.
                let limit = (fp.partition_max_bytes.max(0) as usize).min(budget);
                if fp.fetch_offset < 0 {
                    errors = true;
                    out.partitions
                        .push(data.with_error_code(ResponseError::OffsetOutOfRange.code()));
                    continue;
                }
                if limit == 0 && total > 0 {
                    out.partitions.push(data);
                    continue;
                }
                match self
                    .topics
                    .pool()
                    .read(log, fp.fetch_offset as u64, limit.max(1))
                    .await
                {
                    // Only the first partition with data may go over the
                    // limits (by one batch, KIP-74); later partitions get
                    // nothing rather than more than what is left.
                    Ok(read) if total > 0 && read.records.len() > limit => {
                        out.partitions.push(
                            data.with_high_watermark(read.high_watermark as i64)
                                .with_last_stable_offset(read.high_watermark as i64),
                        );
                    }
                    // KIP-110: a consumer older than Fetch v10 cannot read
                    // zstd; Kafka answers so rather than send it.
                    Ok(read) if version < 10 && has_zstd(&read.records) => {
                        errors = true;
                        out.partitions
                            .push(data.with_error_code(ResponseError::UnsupportedCompressionType.code()));
                    }
                    Ok(read) => {
                        total += read.records.len();
                        budget = budget.saturating_sub(read.records.len());
                        out.partitions.push(
                            data.with_high_watermark(read.high_watermark as i64)
                                .with_last_stable_offset(read.high_watermark as i64)
                                .with_log_start_offset(start(read.log_start_offset))
                                .with_records(Some(read.records)),
                        );
                    }
                    Err(e) => {
                        errors = true;
                        out.partitions
                            .push(data.with_error_code(kafka_code(Failure::Spool(&e)).code()));
                    }
                }
            }
            response.responses.push(out);
        }
        (response, total, errors)
    }

    pub(super) async fn list_offsets(&self, req: ListOffsetsRequest, version: i16) -> ListOffsetsResponse {
        let mut response = ListOffsetsResponse::default();
        for topic in req.topics {
            let found = self.topics.get(&topic.name.0);
            let mut out = ListOffsetsTopicResponse::default().with_name(topic.name.clone());
            for p in topic.partitions {
                let answer = ListOffsetsPartitionResponse::default()
                    .with_partition_index(p.partition_index)
                    .with_timestamp(-1)
                    .with_offset(-1)
                    .with_leader_epoch(if version >= 4 { 0 } else { -1 });
                let Some(partition) = found.as_ref().and_then(|t| t.partition(p.partition_index)) else {
                    out.partitions
                        .push(answer.with_error_code(ResponseError::UnknownTopicOrPartition.code()));
                    continue;
                };
                let log = &partition.log;
                let answer = match p.timestamp {
                    -1 => answer.with_offset(log.high_watermark() as i64),
                    -2 => answer.with_offset(log.log_start_offset() as i64),
                    ts if ts >= 0 => match log.offset_for_timestamp(ts) {
                        Some((base, max_timestamp)) => {
                            // The spool finds the batch; the record inside it
                            // is found here, decompressing off the runtime's
                            // workers if need be.
                            let exact = match self.topics.pool().read(log, base, 1).await {
                                Ok(read) => tokio::task::spawn_blocking(move || {
                                    first_record_at_or_after(&read.records, ts)
                                })
                                .await
                                .ok()
                                .flatten(),
                                Err(_) => None,
                            };
                            let (offset, timestamp) = exact.unwrap_or((base, max_timestamp));
                            answer.with_offset(offset as i64).with_timestamp(timestamp)
                        }
                        None => answer,
                    },
                    _ => answer.with_error_code(ResponseError::UnsupportedVersion.code()),
                };
                out.partitions.push(answer);
            }
            response.topics.push(out);
        }
        response
    }

    pub(super) fn offset_for_leader_epoch(
        &self,
        req: OffsetForLeaderEpochRequest,
    ) -> OffsetForLeaderEpochResponse {
        let mut response = OffsetForLeaderEpochResponse::default();
        for topic in req.topics {
            let found = self.topics.get(&topic.topic.0);
            let mut out = OffsetForLeaderTopicResult::default().with_topic(topic.topic.clone());
            for p in topic.partitions {
                let answer = EpochEndOffset::default()
                    .with_partition(p.partition)
                    .with_leader_epoch(-1)
                    .with_end_offset(-1);
                let answer = match found.as_ref().and_then(|t| t.partition(p.partition)) {
                    None => answer.with_error_code(ResponseError::UnknownTopicOrPartition.code()),
                    // The only leader epoch there has ever been is 0.
                    Some(_) if p.current_leader_epoch > 0 => {
                        answer.with_error_code(ResponseError::UnknownLeaderEpoch.code())
                    }
                    Some(_) if p.leader_epoch < 0 => answer,
                    Some(partition) => answer
                        .with_leader_epoch(0)
                        .with_end_offset(partition.log.high_watermark() as i64),
                };
                out.partitions.push(answer);
            }
            response.topics.push(out);
        }
        response
    }
}

/// Clears what `version` of the Produce response does not carry.
fn for_version(mut answer: PartitionProduceResponse, version: i16) -> PartitionProduceResponse {
    if version < 5 {
        answer.log_start_offset = -1;
    }
    if version < 8 {
        answer.error_message = None;
    }
    answer
}

fn error_produce(index: i32, code: ResponseError, message: Option<&str>) -> PartitionProduceResponse {
    PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(code.code())
        .with_base_offset(-1)
        .with_log_append_time_ms(-1)
        .with_log_start_offset(-1)
        .with_error_message(message.map(s))
}

/// In an uncompressed batch (the first of `batch`), the offset and
/// timestamp of the first record whose timestamp is at least `target`.
/// Whether any whole batch in `records` is zstd-compressed.
fn has_zstd(records: &[u8]) -> bool {
    let mut rest = records;
    while let Ok(h) = BatchHeader::parse(rest) {
        if h.compression() == Compression::Zstd {
            return true;
        }
        rest = rest.get(h.size()..).unwrap_or_default();
    }
    false
}

/// Sets, in a copy of `records`, the max timestamp of every batch whose
/// header has it below the first timestamp, from the batch's records. A
/// batch that does not validate, or whose records do not decode, is left as
/// it is (the append refuses the first kind).
fn repair_max_timestamps(records: Bytes) -> Bytes {
    let mut buf = records.to_vec();
    let mut at = 0;
    while let Ok(h) = BatchHeader::parse(&buf[at..]) {
        let end = at + h.size();
        if end > buf.len() {
            break;
        }
        let batch = &mut buf[at..end];
        if !h.log_append_time() && h.max_timestamp < h.base_timestamp && strait_batch::validate(batch).is_ok()
        {
            if let Ok(newest) = strait_batch::newest_record_timestamp(batch, MAX_DECOMPRESSED) {
                let _ = strait_batch::set_max_timestamp(batch, newest);
            }
        }
        at = end;
    }
    Bytes::from(buf)
}

fn first_record_at_or_after(batch: &[u8], target: i64) -> Option<(u64, i64)> {
    let h = BatchHeader::parse(batch).ok()?;
    if h.log_append_time() {
        return (h.max_timestamp >= target).then_some((h.base_offset as u64, h.max_timestamp));
    }
    let section = strait_batch::records_section(batch, MAX_DECOMPRESSED).ok()?;
    strait_batch::parse_records(&section, h.record_count)
        .ok()?
        .iter()
        .find_map(|r| {
            let timestamp = h.base_timestamp.checked_add(r.timestamp_delta)?;
            (timestamp >= target).then_some(((h.base_offset + r.offset_delta) as u64, timestamp))
        })
}

/// The headers of the batches in a produce payload, as far as they parse
/// (the spool validates everything, CRCs included, when appending).
fn headers_of(records: &[u8]) -> Vec<BatchHeader> {
    let mut headers = Vec::new();
    let mut at = 0;
    while at < records.len() {
        let Ok(h) = BatchHeader::parse(&records[at..]) else {
            break;
        };
        at += h.size();
        headers.push(h);
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use strait_batch::build;

    #[test]
    fn the_record_not_the_batch_answers_a_timestamp_query() {
        // Records at 100, 101, 102, 103 (build spaces them 1 ms apart).
        let mut batch = build::batch(100, &[b"a", b"b", b"c", b"d"]);
        strait_batch::stamp(&mut batch, 40, 0);
        assert_eq!(first_record_at_or_after(&batch, 0), Some((40, 100)));
        assert_eq!(first_record_at_or_after(&batch, 102), Some((42, 102)));
        assert_eq!(first_record_at_or_after(&batch, 103), Some((43, 103)));
        assert_eq!(first_record_at_or_after(&batch, 104), None);
        assert_eq!(first_record_at_or_after(&batch[..30], 0), None);
    }

    #[test]
    fn max_timestamps_below_the_first_are_repaired_from_the_records() {
        use strait_batch::{set_max_timestamp, validate};
        let good = build::batch(100, &[b"a", b"b"]);
        let mut broken = build::batch(500, &[b"a", b"b", b"c"]);
        set_max_timestamp(&mut broken, -1).unwrap();
        let mut corrupt = broken.clone();
        corrupt[70] ^= 1; // a record byte: the CRC no longer matches
        let input = Bytes::from([good.clone(), broken.clone(), corrupt.clone()].concat());
        let out = repair_max_timestamps(input);
        let (a, rest) = out.split_at(good.len());
        let (b, c) = rest.split_at(broken.len());
        assert_eq!(a, &good[..], "a sound batch is untouched");
        let fixed = validate(b).expect("the repaired batch validates");
        assert_eq!((fixed.base_timestamp, fixed.max_timestamp), (500, 502));
        assert_eq!(
            c,
            &corrupt[..],
            "a corrupt batch is left for the append to refuse"
        );
    }

    #[test]
    fn zstd_batches_are_found_among_others() {
        let plain = build::batch(0, &[b"a"]);
        let mut zstd = build::batch(0, &[b"b"]);
        zstd[22] |= 4; // attributes: codec 4 (the bytes need not decompress here)
        assert!(!has_zstd(&plain));
        assert!(has_zstd(&[plain.clone(), zstd.clone()].concat()));
        assert!(!has_zstd(&[plain.clone(), zstd[..30].to_vec()].concat()));
    }
}
