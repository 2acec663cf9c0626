//! The upstream client (`strait-upstream`) against real brokers: Tansu and
//! `strait serve`. Pipelining, correlation, broken and stalled connections,
//! cancelled callers, the bytes-in-flight bound, metadata refresh after a
//! restart, coordinators and offset commits.

mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, FetchRequest, GroupId, MetadataRequest, OffsetCommitRequest,
    OffsetFetchRequest, ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use strait_batch as batch;
use strait_upstream::{Cluster, ClusterOptions, ConnectOptions, Connection, UpstreamError};
use support::relay::Relay;
use support::{Strait, Tansu};

fn options(bootstrap: &str) -> ClusterOptions {
    ClusterOptions {
        bootstrap: vec![bootstrap.to_owned()],
        connect: ConnectOptions {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            ..ConnectOptions::default()
        },
        metadata_max_age: Duration::from_secs(300),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

async fn create_topic(cluster: &Cluster, topic: &str, partitions: i32) {
    let connection = cluster.any_broker().await.expect("a broker");
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(1)]);
    let response = connection.request(&request).await.expect("CreateTopics");
    assert_eq!(response.topics[0].error_code, 0, "CreateTopics {topic}");
    // Wait until the metadata lists the topic with a leader for each
    // partition.
    for _ in 0..100 {
        let metadata = cluster.refresh().await.expect("metadata");
        if (0..partitions).all(|p| metadata.leader(cluster.name(), topic, p).is_ok()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{topic} never got leaders");
}

fn produce_request(topic: &str, partition: i32, batch: Vec<u8>) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(Bytes::from(batch)))])])
}

/// Produces one batch; returns its base offset.
async fn produce(
    connection: &Connection,
    topic: &str,
    partition: i32,
    batch: Vec<u8>,
) -> Result<i64, UpstreamError> {
    let response = connection
        .request(&produce_request(topic, partition, batch))
        .await?;
    let answer = &response.responses[0].partition_responses[0];
    assert_eq!(answer.error_code, 0, "produce to {topic}-{partition}");
    Ok(answer.base_offset)
}

fn fetch_request(topic: &str, partition: i32, offset: i64, max_wait_ms: i32) -> FetchRequest {
    FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(8 << 20)
        .with_isolation_level(1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(8 << 20)])])
}

/// Every value in `topic-partition` from offset 0, read with Fetch.
/// (A wait of 100 ms, not 0: Tansu 0.6.0 answers a Fetch with
/// `max_wait_ms` 0 without any partition.)
async fn fetch_values(connection: &Connection, topic: &str, partition: i32) -> Vec<Vec<u8>> {
    let mut values = Vec::new();
    let mut offset = 0;
    loop {
        let response = connection
            .request(&fetch_request(topic, partition, offset, 100))
            .await
            .expect("Fetch");
        let Some(answer) = response.responses.first().and_then(|t| t.partitions.first()) else {
            panic!("fetch {topic}-{partition} at {offset}: no partition in {response:?}");
        };
        assert_eq!(answer.error_code, 0, "fetch {topic}-{partition}");
        let records = answer.records.clone().unwrap_or_default();
        let mut got_any = false;
        for batch_bytes in batch::Batches::new(&records) {
            let (at, header) = batch_bytes.expect("whole batches from the broker");
            for record in batch::records(&records[at..]).expect("records") {
                let at = header.base_offset + record.offset_delta;
                if at >= offset {
                    values.push(record.value.unwrap_or_default().to_vec());
                }
            }
            offset = header.last_offset() + 1;
            got_any = true;
        }
        if !got_any {
            return values;
        }
    }
}

/// Both peers: connect, negotiate, metadata names the broker, topics made
/// with CreateTopics show up with leaders; 200 produces and metadata
/// requests in flight at once on one connection all get their own answer.
#[test]
fn pipelined_requests_get_their_own_answers_from_tansu_and_strait() {
    let tansu = Tansu::start();
    let strait = Strait::start(&[]);
    let rt = runtime();
    for (peer, bootstrap) in [("tansu", tansu.bootstrap()), ("strait", strait.bootstrap())] {
        rt.block_on(async {
            let cluster = Cluster::new(peer, options(&bootstrap));
            let metadata = cluster.metadata().await.expect("metadata");
            let port = bootstrap.rsplit(':').next().unwrap();
            assert!(
                metadata
                    .brokers
                    .values()
                    .any(|addr| addr.ends_with(&format!(":{port}"))),
                "{peer}: {:?}",
                metadata.brokers
            );
            create_topic(&cluster, "pipelined", 2).await;
            let (_, connection) = cluster.leader("pipelined", 0).await.expect("leader");
            assert!(connection.version(ApiKey::Produce).unwrap() >= 3);
            assert!(connection.version(ApiKey::Fetch).unwrap() >= 4);

            // 200 produces of distinct values and 50 Metadata requests, all
            // in flight together.
            let produces = (0..200).map(|i| {
                let connection = connection.clone();
                tokio::spawn(async move {
                    let value = format!("{peer}-{i:03}");
                    let offset = produce(
                        &connection,
                        "pipelined",
                        0,
                        batch::build::batch(i, &[value.as_bytes()]),
                    )
                    .await
                    .expect("produce");
                    (offset, value)
                })
            });
            let produces: Vec<_> = produces.collect();
            let metadata_requests: Vec<_> = (0..50)
                .map(|_| {
                    let connection = connection.clone();
                    tokio::spawn(async move {
                        connection
                            .request(&MetadataRequest::default().with_topics(None))
                            .await
                            .expect("metadata")
                    })
                })
                .collect();
            let mut written = Vec::new();
            for produce in produces {
                written.push(produce.await.unwrap());
            }
            for metadata in metadata_requests {
                let metadata = metadata.await.unwrap();
                assert!(metadata.topics.iter().any(|t| t.name == Some(name("pipelined"))));
            }
            // Each produce got its own offset, and reading the partition back
            // finds each value at the offset its answer named.
            written.sort();
            let offsets: Vec<i64> = written.iter().map(|(o, _)| *o).collect();
            assert_eq!(offsets, (0..200).collect::<Vec<i64>>(), "{peer}");
            let values = fetch_values(&connection, "pipelined", 0).await;
            let expected: Vec<Vec<u8>> = written.iter().map(|(_, v)| v.clone().into_bytes()).collect();
            assert_eq!(values, expected, "{peer}");
        });
    }
}

/// Long-polling fetches in flight when the broker is killed all fail at
/// once with the connection's error; the cluster reconnects by itself when
/// the broker is back on the same port.
#[test]
fn a_broken_connection_fails_everything_in_flight_and_the_cluster_recovers() {
    let mut strait = Strait::start(&[]);
    let rt = runtime();
    let cluster = Cluster::new("dc1", options(&strait.bootstrap()));
    rt.block_on(create_topic(&cluster, "broken", 1));
    let (_, connection) = rt.block_on(cluster.leader("broken", 0)).unwrap();
    let waits: Vec<_> = (0..10)
        .map(|_| {
            let connection = connection.clone();
            rt.spawn(async move {
                let started = tokio::time::Instant::now();
                let result = connection.request(&fetch_request("broken", 0, 0, 20_000)).await;
                (result, started.elapsed())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    strait.kill();
    for wait in waits {
        let (result, elapsed) = rt.block_on(wait).unwrap();
        let error = result.expect_err("the broker died");
        assert!(matches!(error, UpstreamError::Disconnected { .. }), "{error}");
        assert!(error.is_retriable());
        assert!(elapsed < Duration::from_secs(10), "failed after {elapsed:?}");
    }
    assert!(connection.is_failed());
    // Down: prompt retriable errors, no hang.
    let error = rt
        .block_on(async { cluster.refresh().await.map(|_| ()) })
        .expect_err("nobody is listening");
    assert!(error.is_retriable(), "{error}");

    strait.restart();
    let offset = rt.block_on(async {
        let mut backoff = strait_upstream::Backoff::default();
        let started = tokio::time::Instant::now();
        let deadline = started + Duration::from_secs(20);
        loop {
            let attempt = async {
                let (_, connection) = cluster.leader("broken", 0).await?;
                produce(&connection, "broken", 0, batch::build::batch(1, &[b"after"])).await
            };
            match attempt.await {
                Ok(offset) => return offset,
                Err(e) => backoff
                    .wait(deadline, started, "produce after restart", e)
                    .await
                    .unwrap(),
            }
        }
    });
    assert_eq!(offset, 0, "the topic is empty after the restart");
}

/// Callers dropped while their large produces are queued or being written
/// leave no partial frame: the connection keeps working and every batch
/// the broker stored is whole.
#[test]
fn cancelled_callers_leave_no_half_frames() {
    let strait = Strait::start(&[]);
    let rt = runtime();
    let cluster = Cluster::new("dc1", options(&strait.bootstrap()));
    rt.block_on(async {
        create_topic(&cluster, "cancelled", 1).await;
        let (_, connection) = cluster.leader("cancelled", 0).await.unwrap();
        let big = vec![7u8; 512 << 10];
        for round in 0..20 {
            let request = produce_request("cancelled", 0, batch::build::batch(round, &[&big]));
            // Give up on the request after 0..2 ms: some are dropped before the
            // writer took them, some while their frame is on the wire.
            let wait = Duration::from_micros(100 * (round as u64 % 20));
            let _ = tokio::time::timeout(wait, connection.request(&request)).await;
        }
        let after = produce(&connection, "cancelled", 0, batch::build::batch(99, &[b"after"]))
            .await
            .expect("the connection still works");
        assert!(!connection.is_failed());
        let values = fetch_values(&connection, "cancelled", 0).await;
        assert_eq!(values.len() as i64, after + 1, "every stored batch decodes");
        assert_eq!(values.last().unwrap(), b"after");
        assert!(values[..values.len() - 1].iter().all(|v| *v == big));
    });
}

/// A stalled network (the relay holds every byte): a request times out
/// after the request timeout, the connection is closed, and the cluster
/// works again through a new connection once the link is back. The bytes
/// in flight never exceed the configured bound.
#[test]
fn a_stalled_link_times_out_and_bytes_in_flight_stay_bounded() {
    let strait = Strait::start(&[]);
    let relay = Relay::start(strait.bootstrap().parse().unwrap(), Duration::ZERO);
    let rt = runtime();
    rt.block_on(async {
        let direct = Cluster::new("direct", options(&strait.bootstrap()));
        create_topic(&direct, "stalled", 1).await;
        let options = ConnectOptions {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(2),
            max_bytes_in_flight: 3 << 20,
            ..ConnectOptions::default()
        };
        let connection = Connection::connect("relayed".into(), &relay.addr(), &options)
            .await
            .expect("connect through the relay");
        relay.stall(true);
        // Each fetch reserves 1 MiB for its answer: three fit, the rest wait.
        let fetches: Vec<_> = (0..6)
            .map(|_| {
                let connection = connection.clone();
                tokio::spawn(async move {
                    let mut request = fetch_request("stalled", 0, 0, 0);
                    request.max_bytes = 1 << 20;
                    connection.request(&request).await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let in_flight = connection.bytes_in_flight();
        assert!(
            (2 << 20..=3 << 20).contains(&in_flight),
            "{in_flight} bytes in flight with a 3 MiB bound"
        );
        for fetch in fetches {
            let error = fetch.await.unwrap().expect_err("the link is stalled");
            assert!(
                matches!(
                    error,
                    UpstreamError::TimedOut { .. } | UpstreamError::Disconnected { .. }
                ),
                "{error}"
            );
            assert!(error.is_retriable());
        }
        assert!(connection.is_failed());
        assert_eq!(connection.bytes_in_flight(), 0);
        relay.stall(false);
        let connection = Connection::connect("relayed".into(), &relay.addr(), &options)
            .await
            .expect("reconnect");
        let offset = produce(&connection, "stalled", 0, batch::build::batch(0, &[b"back"]))
            .await
            .unwrap();
        assert_eq!(offset, 0);
    });
}

/// The mirror keeps its positions as consumer group offsets: find the
/// coordinator, commit standalone (generation -1) with metadata, read back.
#[test]
fn coordinator_commits_and_fetches_offsets_on_both_peers() {
    let tansu = Tansu::start();
    let strait = Strait::start(&[]);
    let rt = runtime();
    for (peer, bootstrap) in [("tansu", tansu.bootstrap()), ("strait", strait.bootstrap())] {
        rt.block_on(async {
            let cluster = Arc::new(Cluster::new(peer, options(&bootstrap)));
            create_topic(&cluster, "committed", 3).await;
            let coordinator = cluster.coordinator("mirror-group").await.expect("coordinator");
            let partitions = (0..3)
                .map(|p| {
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(p)
                        .with_committed_offset(100 + i64::from(p))
                        .with_committed_metadata(Some(StrBytes::from_string(format!("t={p}"))))
                })
                .collect();
            let commit = OffsetCommitRequest::default()
                .with_group_id(GroupId(StrBytes::from_static_str("mirror-group")))
                .with_generation_id_or_member_epoch(-1)
                .with_topics(vec![OffsetCommitRequestTopic::default()
                    .with_name(name("committed"))
                    .with_partitions(partitions)]);
            let response = coordinator.request(&commit).await.expect("OffsetCommit");
            for p in &response.topics[0].partitions {
                assert_eq!(p.error_code, 0, "{peer} commit {}", p.partition_index);
            }
            // v8 moves the group into an array; this test builds the older form.
            let version = coordinator.version(ApiKey::OffsetFetch).unwrap().min(7);
            let fetch = OffsetFetchRequest::default()
                .with_group_id(GroupId(StrBytes::from_static_str("mirror-group")))
                .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                    .with_name(name("committed"))
                    .with_partition_indexes(vec![0, 1, 2])]));
            let response = coordinator
                .request_at(&fetch, version)
                .await
                .expect("OffsetFetch");
            let mut got: Vec<(i32, i64, String)> = response.topics[0]
                .partitions
                .iter()
                .map(|p| {
                    (
                        p.partition_index,
                        p.committed_offset,
                        p.metadata.as_ref().map(|m| m.to_string()).unwrap_or_default(),
                    )
                })
                .collect();
            got.sort();
            // Tansu 0.6.0 keeps the offsets but drops the metadata string
            // (the mirror does not depend on it; see mirror's resume).
            let metadata = |p: i32| {
                if peer == "tansu" {
                    String::new()
                } else {
                    format!("t={p}")
                }
            };
            assert_eq!(
                got,
                vec![
                    (0, 100, metadata(0)),
                    (1, 101, metadata(1)),
                    (2, 102, metadata(2))
                ],
                "{peer}"
            );
        });
    }
}
