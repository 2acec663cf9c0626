//! The throttle time a broker puts in its answers (KIP-219): the client
//! must send that broker nothing more until it has passed.

use kafka_protocol::messages::*;

/// An answer that carries `throttle_time_ms`.
pub trait Throttled {
    /// Milliseconds the broker asks the client to wait; 0 when none.
    fn throttle_ms(&self) -> i32;
}

macro_rules! throttled {
    ($($response:ty),* $(,)?) => {
        $(impl Throttled for $response {
            fn throttle_ms(&self) -> i32 {
                self.throttle_time_ms
            }
        })*
    };
}

throttled!(
    ProduceResponse,
    FetchResponse,
    ListOffsetsResponse,
    MetadataResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    FindCoordinatorResponse,
    JoinGroupResponse,
    HeartbeatResponse,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupDescribeResponse,
    LeaveGroupResponse,
    SyncGroupResponse,
    DescribeGroupsResponse,
    ListGroupsResponse,
    ApiVersionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    DeleteRecordsResponse,
    InitProducerIdResponse,
    OffsetForLeaderEpochResponse,
    DescribeConfigsResponse,
    DescribeLogDirsResponse,
    CreatePartitionsResponse,
    DescribeClusterResponse,
    DeleteGroupsResponse,
    DescribeProducersResponse,
);
