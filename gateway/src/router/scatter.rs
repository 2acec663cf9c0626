//! Sending a request's partitions to their leaders on an upstream
//! cluster, in two halves: [`launch`] hands one request per leader to its
//! connection (in the order requests start), [`land`] waits for the
//! answers, gives each partition its own and sends again what a moved
//! leader refused. [`Router::split`] divides a per-partition request by
//! destination first, [`in_order`] puts the answers back in the request's
//! order.

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use futures_util::future::join_all;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Request;
use kafka_protocol::ResponseError;
use strait_upstream::{Answer, Backoff, Cluster, Connection, Throttled, UpstreamError};
use tokio::time::Instant;

use super::session::Session;
use super::{name, Place, Router};

/// One partition of a request bound for an upstream cluster.
#[derive(Debug, Clone)]
pub(super) struct Item<T> {
    /// The topic as the client named it.
    pub client: String,
    /// Its name on the cluster.
    pub upstream: String,
    pub partition: i32,
    pub data: T,
}

/// A partition's answer, by the client's topic name and partition.
pub(super) type Answers<A> = HashMap<(String, i32), A>;

/// One request of an attempt, handed to a leader's connection: the items
/// it carries and its answer to come (or why it could not be sent).
pub(super) struct Flight<R: Request, T> {
    node: i32,
    group: Vec<Item<T>>,
    answer: Result<Answer<R>, UpstreamError>,
}

impl<R: Request, T> Flight<R, T> {
    /// The items of a flight that could not be sent at all (its leader
    /// unknown or unreachable): failed already, before any answer lands.
    pub(super) fn unsent(&self) -> &[Item<T>] {
        match self.answer {
            Err(_) => &self.group,
            Ok(_) => &[],
        }
    }
}

/// Which connections a request goes on.
pub(super) enum Via<'s> {
    /// The cluster's shared connection per broker.
    Shared,
    /// The client connection's own, for long-polling fetches.
    Session(&'s mut Session),
}

impl Via<'_> {
    async fn connection(&mut self, cluster: &Cluster, node: i32) -> Result<Connection, UpstreamError> {
        match self {
            Via::Shared => cluster.broker(node).await,
            Via::Session(session) => session.fetch_lane(cluster, node).await,
        }
    }
}

/// The first half of sending `items` to their leaders on `cluster`: one
/// request per leader, made by `build`, handed to its connection in order
/// (so requests started one after another reach each broker in that
/// order). Items whose leader is not known fail in their own flight.
pub(super) async fn launch<R, T>(
    cluster: &Cluster,
    items: Vec<Item<T>>,
    via: &mut Via<'_>,
    build: &impl Fn(&[Item<T>]) -> R,
) -> Vec<Flight<R, T>>
where
    R: Request + Any,
    R::Response: Throttled,
{
    let mut groups: BTreeMap<i32, Vec<Item<T>>> = BTreeMap::new();
    let mut flights = Vec::new();
    for item in items {
        match cluster.leader_id(&item.upstream, item.partition).await {
            Ok(node) => groups.entry(node).or_default().push(item),
            Err(e) => flights.push(Flight {
                node: -1,
                group: vec![item],
                answer: Err(e),
            }),
        }
    }
    for (node, group) in groups {
        let answer = match via.connection(cluster, node).await {
            Ok(connection) => connection.send(&build(&group)).await,
            Err(e) => Err(e),
        };
        flights.push(Flight { node, group, answer });
    }
    flights
}

/// The second half: waits for the answers and gives each item its own
/// (found with `find`, see [`settle`]). Items whose leader is unknown or
/// moved are sent again on the shared connections after a metadata
/// refresh, at most `attempts` times in all and not past `deadline`.
/// `settled` sees each item's final answer as soon as its flight lands,
/// before the other flights do.
pub(super) async fn land<R, T, A>(
    cluster: &Cluster,
    mut flights: Vec<Flight<R, T>>,
    attempts: usize,
    deadline: Instant,
    build: &impl Fn(&[Item<T>]) -> R,
    find: &impl Fn(&mut R::Response, &Item<T>) -> Option<(A, i16)>,
    settled: &(impl Fn(&Item<T>, &Result<A, UpstreamError>) + Sync),
) -> Vec<(Item<T>, Result<A, UpstreamError>)>
where
    R: Request + Any,
    R::Response: Throttled,
{
    let api = ApiKey::try_from(R::KEY).expect("kafka-protocol requests have known keys");
    let mut done = Vec::new();
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_millis(400));
    for attempt in 1..=attempts {
        let answered = join_all(flights.into_iter().map(|flight| async move {
            let answer = match flight.answer {
                Ok(answer) => answer.answer().await,
                Err(e) => Err(e),
            };
            let answered = settle(cluster, flight.node, api, flight.group, answer, find);
            for (item, result) in &answered {
                if attempt == attempts || !result.as_ref().is_err_and(moved) {
                    settled(item, result);
                }
            }
            answered
        }))
        .await;
        let last = attempt == attempts || Instant::now() >= deadline;
        let mut retry = Vec::new();
        for (item, result) in answered.into_iter().flatten() {
            match result {
                Err(e) if !last && moved(&e) => {
                    cluster.invalidate();
                    retry.push(item);
                }
                other => {
                    if other.as_ref().is_err_and(UpstreamError::wants_metadata_refresh) {
                        cluster.invalidate();
                    }
                    if attempt < attempts && other.as_ref().is_err_and(moved) {
                        // Past the deadline: final only now.
                        settled(&item, &other);
                    }
                    done.push((item, other));
                }
            }
        }
        if retry.is_empty() {
            break;
        }
        tokio::time::sleep_until(deadline.min(Instant::now() + backoff.next_delay())).await;
        flights = launch(cluster, retry, &mut Via::Shared, build).await;
    }
    done
}

/// Whether the request failed because its leader moved or is not known
/// yet: worth sending again after a refresh, and safe to (nothing was
/// written).
fn moved(e: &UpstreamError) -> bool {
    matches!(
        e.code(),
        Some(
            ResponseError::NotLeaderOrFollower
                | ResponseError::LeaderNotAvailable
                | ResponseError::UnknownTopicOrPartition
                | ResponseError::FencedLeaderEpoch
        )
    ) && !matches!(e, UpstreamError::Deadline { .. })
}

/// `Err` for a partition-level error code of an upstream answer.
fn partition_result(cluster: &Cluster, item: &Item<impl Sized>, code: i16) -> Result<(), UpstreamError> {
    strait_upstream::error::check(
        cluster.name(),
        || format!("{}-{}", item.upstream, item.partition),
        code,
    )
}

/// `group`'s partitions made with `partition`, gathered by upstream topic
/// in first-seen order.
pub(super) fn by_topic<T, P>(
    group: &[Item<T>],
    partition: impl Fn(&Item<T>) -> P,
) -> std::vec::IntoIter<(TopicName, Vec<P>)> {
    let mut topics: Vec<(&str, Vec<P>)> = Vec::new();
    for item in group {
        let p = partition(item);
        match topics.iter_mut().find(|(t, _)| *t == item.upstream) {
            Some((_, ps)) => ps.push(p),
            None => topics.push((&item.upstream, vec![p])),
        }
    }
    topics
        .into_iter()
        .map(|(t, ps)| (name(t), ps))
        .collect::<Vec<_>>()
        .into_iter()
}

/// Each item's answer from one leader's `answer`, found with `find` (which
/// also gives its error code): every item fails with the request's error;
/// an item the answer leaves out is a malformed answer; a moved leader is
/// an error that [`land`] retries; any other code reaches the client
/// inside the answer.
fn settle<T, R, A>(
    cluster: &Cluster,
    node: i32,
    api: ApiKey,
    group: Vec<Item<T>>,
    answer: Result<R, UpstreamError>,
    find: &impl Fn(&mut R, &Item<T>) -> Option<(A, i16)>,
) -> Vec<(Item<T>, Result<A, UpstreamError>)> {
    let mut response = match answer {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(cluster = %cluster.name(), node, ?api, error = %e, "request failed");
            return group.into_iter().map(|i| (i, Err(e.clone()))).collect();
        }
    };
    group
        .into_iter()
        .map(|item| {
            let result = match find(&mut response, &item) {
                None => Err(UpstreamError::Malformed {
                    broker: format!("{} broker {node}", cluster.name()),
                    api,
                    detail: format!("no answer for {}-{}", item.upstream, item.partition),
                }),
                Some((a, code)) => match partition_result(cluster, &item, code) {
                    Err(e) => {
                        tracing::debug!(cluster = %cluster.name(), node, ?api, error = %e, "partition refused");
                        if moved(&e) {
                            Err(e)
                        } else {
                            Ok(a)
                        }
                    }
                    Ok(()) => Ok(a),
                },
            };
            (item, result)
        })
        .collect()
}

/// A per-partition request divided by where its topics live.
pub(super) struct Split<L, T, A> {
    /// Every topic and its partitions, as the request had them.
    pub order: Vec<(String, Vec<i32>)>,
    /// Local topics, as the request had them.
    pub local: Vec<L>,
    /// Each cluster's partitions.
    pub upstream: BTreeMap<String, Vec<Item<T>>>,
    /// Answers already known (topics no route matches).
    pub answers: Answers<A>,
}

/// One cluster's requests under way.
pub(super) type Launched<'a, R, T> = Vec<(&'a Cluster, Vec<Flight<R, T>>)>;

impl Router {
    /// Divides `topics` by destination: local ones whole, upstream ones by
    /// partition (`partitions` gives each partition's index and part),
    /// those of no route answered at once by `missing` (with
    /// UNKNOWN_TOPIC_OR_PARTITION).
    pub(super) fn split<L, T, A>(
        &self,
        topics: Vec<L>,
        name_of: impl Fn(&L) -> String,
        indexes: impl Fn(&L) -> Vec<i32>,
        partitions: impl Fn(L) -> Vec<(i32, T)>,
        missing: impl Fn(i32, i16) -> A,
    ) -> Split<L, T, A> {
        let mut split = Split {
            order: topics.iter().map(|t| (name_of(t), indexes(t))).collect(),
            local: Vec::new(),
            upstream: BTreeMap::new(),
            answers: HashMap::new(),
        };
        for topic in topics {
            let client = name_of(&topic);
            match self.place(&client) {
                Place::Local => split.local.push(topic),
                Place::Nowhere => {
                    for p in indexes(&topic) {
                        let answer = missing(p, ResponseError::UnknownTopicOrPartition.code());
                        split.answers.insert((client.clone(), p), answer);
                    }
                }
                Place::Upstream(cluster, upstream) => {
                    let items = split.upstream.entry(cluster).or_default();
                    for (partition, data) in partitions(topic) {
                        items.push(Item {
                            client: client.clone(),
                            upstream: upstream.clone(),
                            partition,
                            data,
                        });
                    }
                }
            }
        }
        split
    }

    /// [`launch`] for every cluster's items, one cluster after another.
    pub(super) async fn launch_all<R, T>(
        &self,
        upstream: BTreeMap<String, Vec<Item<T>>>,
        via: &mut Via<'_>,
        build: &impl Fn(&[Item<T>]) -> R,
    ) -> Launched<'_, R, T>
    where
        R: Request + Any,
        R::Response: Throttled,
    {
        let mut launched = Vec::new();
        for (c, items) in upstream {
            let cluster = self.cluster(&c);
            launched.push((cluster, launch(cluster, items, via, build).await));
        }
        launched
    }
}

/// [`land`] for every cluster's flights, all at once.
pub(super) async fn land_all<R, T, A>(
    launched: Launched<'_, R, T>,
    attempts: usize,
    deadline: Instant,
    build: &impl Fn(&[Item<T>]) -> R,
    find: &impl Fn(&mut R::Response, &Item<T>) -> Option<(A, i16)>,
    settled: &(impl Fn(&Item<T>, &Result<A, UpstreamError>) + Sync),
) -> Vec<(Item<T>, Result<A, UpstreamError>)>
where
    R: Request + Any,
    R::Response: Throttled,
{
    join_all(
        launched
            .into_iter()
            .map(|(cluster, flights)| land(cluster, flights, attempts, deadline, build, find, settled)),
    )
    .await
    .into_iter()
    .flatten()
    .collect()
}

/// The answers in the request's `order`, each topic's partitions in
/// theirs; a partition without one gets `missing` (UNKNOWN_SERVER_ERROR).
pub(super) fn in_order<A>(
    order: Vec<(String, Vec<i32>)>,
    answers: &mut Answers<A>,
    missing: impl Fn(i32, i16) -> A,
) -> Vec<(TopicName, Vec<A>)> {
    order
        .into_iter()
        .map(|(topic, partitions)| {
            let answered = partitions
                .into_iter()
                .map(|p| {
                    answers
                        .remove(&(topic.clone(), p))
                        .unwrap_or_else(|| missing(p, ResponseError::UnknownServerError.code()))
                })
                .collect();
            (name(&topic), answered)
        })
        .collect()
}
