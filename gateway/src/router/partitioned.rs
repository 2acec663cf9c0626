//! One shape for the routed per-partition requests that need nothing but
//! the common walk: ListOffsets, OffsetForLeaderEpoch and DeleteRecords.
//!
//! Each API says, in one [`Partitioned`] definition, how its request
//! divides into topics and partitions, what one leader is sent, where a
//! partition's answer is in a leader's response and in the local
//! broker's, and how the answers make a response. [`Router::partitioned`]
//! walks every one of them the same way: the request is split by
//! destination, the local part goes to the local broker and the upstream
//! parts to their leaders (moved leaders are retried), and the answers
//! come back in the request's order under the clients' names. Produce and
//! Fetch walk the same halves (`scatter`) with more of their own: producer
//! chains and `acks=0`, long polls answered in part.

use std::time::Duration;

use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Request;
use kafka_protocol::ResponseError;
use strait_upstream::Throttled;
use tokio::time::Instant;

use super::scatter::{by_topic, in_order, land_all, Item, Via};
use super::session::Session;
use super::{partition_code, Head, LocalApi, Pending, Router};
use crate::broker::Reply;

/// How often a partition's request is sent again after its leader moved
/// (each time after a metadata refresh), within the request's time.
pub(super) const ATTEMPTS: usize = 3;

/// How long a request without a timeout of its own (ListOffsets,
/// OffsetForLeaderEpoch) retries partitions whose leader moved.
const LEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// A routed per-partition API.
pub(super) trait Partitioned: Send + Sync + 'static {
    /// The request, as clients send it; the local broker takes its local
    /// part, and each leader its own.
    type Request: LocalApi + Request<Response: Throttled + Send> + Send + Sync + 'static;
    /// One topic of the request.
    type Topic: Send + Sync;
    /// One partition of a topic.
    type Partition: Clone + Send + Sync;
    /// One partition's answer.
    type Answer: Clone + Send + Sync;

    /// The request's topics, taken out of it.
    fn take_topics(request: &mut Self::Request) -> Vec<Self::Topic>;
    /// `request` (the client's, its topics taken) with `topics`.
    fn with_topics(request: Self::Request, topics: Vec<Self::Topic>) -> Self::Request;
    /// A topic's name, as the request has it.
    fn topic_name(topic: &Self::Topic) -> String;
    /// The indexes of a topic's partitions.
    fn indexes(topic: &Self::Topic) -> Vec<i32>;
    /// A topic's partitions, each with its index.
    fn partitions(topic: Self::Topic) -> Vec<(i32, Self::Partition)>;

    /// A partition's answer that is only an error.
    fn error(partition: i32, code: i16) -> Self::Answer;
    /// The error code of an answer.
    fn code(answer: &Self::Answer) -> i16;
    /// The answer of `topic`'s `partition` in `response`.
    fn find(response: &mut Response<Self>, topic: &str, partition: i32) -> Option<Self::Answer>;
    /// Every partition answer of a response: its topic, index and answer.
    fn answers(response: Response<Self>) -> Vec<(String, i32, Self::Answer)>;
    /// The client's answer of `partition` from a leader's.
    fn to_client(answer: Self::Answer, _partition: i32) -> Self::Answer {
        answer
    }
    /// The response of `topics`, each with its partitions' answers.
    fn respond(topics: Vec<(TopicName, Vec<Self::Answer>)>) -> ResponseKind;
    /// The code local partitions are refused with, when the local broker
    /// does not do what the API asks (`None`: it answers them).
    fn local_refused() -> Option<ResponseError> {
        None
    }

    /// What one leader is sent for `group` (its partitions under their
    /// upstream names).
    fn build(&self, group: &[Item<Self::Partition>]) -> Self::Request;
    /// How long moved leaders are retried.
    fn patience(&self) -> Duration {
        LEADER_TIMEOUT
    }
}

/// The response to an API's request.
pub(super) type Response<P> = <<P as Partitioned>::Request as Request>::Response;

impl Router {
    /// Runs `api`'s `request` along the common walk (see the module).
    pub(super) async fn partitioned<'a, P: Partitioned>(
        &'a self,
        session: &mut Session,
        head: Head,
        api: P,
        mut request: P::Request,
    ) -> Pending<'a> {
        let mut split = self.split(
            P::take_topics(&mut request),
            P::topic_name,
            P::indexes,
            P::partitions,
            P::error,
        );
        if let Some(refused) = P::local_refused() {
            for topic in std::mem::take(&mut split.local) {
                let name = P::topic_name(&topic);
                for index in P::indexes(&topic) {
                    split
                        .answers
                        .insert((name.clone(), index), P::error(index, refused.code()));
                }
            }
        }
        let local = (!split.local.is_empty()).then(|| {
            let sub = P::with_topics(request, std::mem::take(&mut split.local));
            (self.local(session, &head), sub)
        });
        let deadline = Instant::now() + api.patience();
        let build = move |group: &[Item<P::Partition>]| api.build(group);
        let launched = self
            .launch_all(std::mem::take(&mut split.upstream), &mut Via::Shared, &build)
            .await;
        Box::pin(async move {
            let local_part = async {
                let (call, sub) = local?;
                call.ask(sub).await
            };
            let find = |response: &mut Response<P>, item: &Item<P::Partition>| {
                P::find(response, &item.upstream, item.partition).map(|a| {
                    let code = P::code(&a);
                    (a, code)
                })
            };
            let upstream_part = land_all(launched, ATTEMPTS, deadline, &build, &find, &|_, _| {});
            let (local_answer, upstream_answers) =
                futures_util::future::join(local_part, upstream_part).await;
            let answers = &mut split.answers;
            for (topic, index, answer) in local_answer.map(P::answers).unwrap_or_default() {
                answers.insert((topic, index), answer);
            }
            for (item, result) in upstream_answers {
                let answer = match result {
                    Ok(answer) => P::to_client(answer, item.partition),
                    Err(e) => P::error(item.partition, partition_code(&e)),
                };
                answers.insert((item.client, item.partition), answer);
            }
            Reply::Respond(Box::new(P::respond(in_order(split.order, answers, P::error))))
        })
    }
}

/// The methods of [`Partitioned`] that only follow the request's and the
/// response's fields: the request topic's name and partition index
/// fields, the response topic's, its topic type, the response type and
/// its kind.
macro_rules! fields {
    ($name:ident, $index:ident; $rname:ident, $rindex:ident; $rtopic:ty, $response:ty, $kind:ident) => {
        fn take_topics(request: &mut Self::Request) -> Vec<Self::Topic> {
            std::mem::take(&mut request.topics)
        }
        fn with_topics(request: Self::Request, topics: Vec<Self::Topic>) -> Self::Request {
            request.with_topics(topics)
        }
        fn topic_name(topic: &Self::Topic) -> String {
            topic.$name.to_string()
        }
        fn indexes(topic: &Self::Topic) -> Vec<i32> {
            topic.partitions.iter().map(|p| p.$index).collect()
        }
        fn partitions(topic: Self::Topic) -> Vec<(i32, Self::Partition)> {
            topic
                .partitions
                .into_iter()
                .map(|p| (p.$index, p))
                .collect()
        }
        fn code(answer: &Self::Answer) -> i16 {
            answer.error_code
        }
        fn find(response: &mut Response<Self>, topic: &str, partition: i32) -> Option<Self::Answer> {
            let t = response
                .topics
                .iter()
                .find(|t| t.$rname.as_str() == topic)?;
            t.partitions
                .iter()
                .find(|p| p.$rindex == partition)
                .cloned()
        }
        fn answers(response: Response<Self>) -> Vec<(String, i32, Self::Answer)> {
            let mut all = Vec::new();
            for t in response.topics {
                let topic = t.$rname.to_string();
                all.extend(
                    t.partitions
                        .into_iter()
                        .map(|p| (topic.clone(), p.$rindex, p)),
                );
            }
            all
        }
        fn respond(topics: Vec<(TopicName, Vec<Self::Answer>)>) -> ResponseKind {
            let mut response = <$response>::default();
            for (name, partitions) in topics {
                let mut topic = <$rtopic>::default();
                topic.$rname = name;
                topic.partitions = partitions;
                response.topics.push(topic);
            }
            ResponseKind::$kind(response)
        }
    };
}

/// ListOffsets, at the client's isolation level.
pub(super) struct ListOffsets {
    pub isolation_level: i8,
}

impl Partitioned for ListOffsets {
    type Request = ListOffsetsRequest;
    type Topic = ListOffsetsTopic;
    type Partition = ListOffsetsPartition;
    type Answer = ListOffsetsPartitionResponse;

    fields!(name, partition_index; name, partition_index; ListOffsetsTopicResponse, ListOffsetsResponse, ListOffsets);

    fn error(partition: i32, code: i16) -> ListOffsetsPartitionResponse {
        ListOffsetsPartitionResponse::default()
            .with_partition_index(partition)
            .with_error_code(code)
            .with_timestamp(-1)
            .with_offset(-1)
            .with_leader_epoch(-1)
    }
    /// The upstream's timestamp and offset; its leader epoch is not the
    /// client's to compare with.
    fn to_client(answer: ListOffsetsPartitionResponse, partition: i32) -> ListOffsetsPartitionResponse {
        Self::error(partition, answer.error_code)
            .with_timestamp(answer.timestamp)
            .with_offset(answer.offset)
    }

    fn build(&self, group: &[Item<ListOffsetsPartition>]) -> ListOffsetsRequest {
        // The timestamp asked for; the client's leader epoch is not the
        // upstream's.
        let partition = |item: &Item<ListOffsetsPartition>| {
            ListOffsetsPartition::default()
                .with_partition_index(item.partition)
                .with_timestamp(item.data.timestamp)
        };
        let topics = by_topic(group, partition)
            .map(|(name, partitions)| {
                ListOffsetsTopic::default()
                    .with_name(name)
                    .with_partitions(partitions)
            })
            .collect();
        ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(self.isolation_level)
            .with_topics(topics)
    }
}

/// OffsetForLeaderEpoch: upstream partitions are asked of their leaders
/// with the epochs the client has, which are the upstream's (clients read
/// them from the batches they fetched).
pub(super) struct OffsetForLeaderEpoch;

impl Partitioned for OffsetForLeaderEpoch {
    type Request = OffsetForLeaderEpochRequest;
    type Topic = OffsetForLeaderTopic;
    type Partition = OffsetForLeaderPartition;
    type Answer = EpochEndOffset;

    fields!(topic, partition; topic, partition; OffsetForLeaderTopicResult, OffsetForLeaderEpochResponse, OffsetForLeaderEpoch);

    fn error(partition: i32, code: i16) -> EpochEndOffset {
        EpochEndOffset::default()
            .with_partition(partition)
            .with_error_code(code)
            .with_leader_epoch(-1)
            .with_end_offset(-1)
    }
    fn to_client(answer: EpochEndOffset, partition: i32) -> EpochEndOffset {
        answer.with_partition(partition)
    }

    fn build(&self, group: &[Item<OffsetForLeaderPartition>]) -> OffsetForLeaderEpochRequest {
        let topics = by_topic(group, |item| item.data.clone())
            .map(|(name, partitions)| {
                OffsetForLeaderTopic::default()
                    .with_topic(name)
                    .with_partitions(partitions)
            })
            .collect();
        OffsetForLeaderEpochRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(topics)
    }
}

/// DeleteRecords: upstream partitions go to their leaders. The spool
/// deletes whole segments by retention only, so local partitions get
/// POLICY_VIOLATION (as a broker whose policy forbids it answers).
pub(super) struct DeleteRecords {
    pub timeout_ms: i32,
}

impl Partitioned for DeleteRecords {
    type Request = DeleteRecordsRequest;
    type Topic = DeleteRecordsTopic;
    type Partition = DeleteRecordsPartition;
    type Answer = DeleteRecordsPartitionResult;

    fields!(name, partition_index; name, partition_index; DeleteRecordsTopicResult, DeleteRecordsResponse, DeleteRecords);

    fn error(partition: i32, code: i16) -> DeleteRecordsPartitionResult {
        DeleteRecordsPartitionResult::default()
            .with_partition_index(partition)
            .with_error_code(code)
            .with_low_watermark(-1)
    }
    fn local_refused() -> Option<ResponseError> {
        Some(ResponseError::PolicyViolation)
    }

    fn build(&self, group: &[Item<DeleteRecordsPartition>]) -> DeleteRecordsRequest {
        let topics = by_topic(group, |item| item.data.clone())
            .map(|(name, partitions)| {
                DeleteRecordsTopic::default()
                    .with_name(name)
                    .with_partitions(partitions)
            })
            .collect();
        DeleteRecordsRequest::default()
            .with_timeout_ms(self.timeout_ms)
            .with_topics(topics)
    }
    fn patience(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(0) as u64)
    }
}
