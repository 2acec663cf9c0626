//! Topic administration across destinations: CreateTopics, DeleteTopics,
//! CreatePartitions and DescribeConfigs split by topic, each cluster's part
//! sent to its controller under the cluster's names (at the lower of the
//! client's version and the cluster's highest), the answers merged back
//! under the clients' names in request order; a cluster that cannot be
//! reached fails its own topics only.

use std::collections::BTreeMap;
use std::future::Future;

use futures_util::future::join_all;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Request, StrBytes};
use kafka_protocol::ResponseError;
use strait_upstream::{Cluster, Throttled, UpstreamError};

use super::session::Session;
use super::{name, upstream_code, Head, Pending, Place, Router};
use crate::broker::Reply;

/// DescribeConfigs' resource type of a topic.
const TOPIC_RESOURCE: i8 = 2;

/// How the names of one API's request topics and answers are read and
/// written.
struct Names<T, A> {
    topic: fn(&T) -> String,
    rename_topic: fn(&mut T, &str),
    answer: fn(&A) -> String,
    rename_answer: fn(&mut A, &str),
}

/// `request` to the controller of `cluster` (or any broker), at the lower
/// of `version` and the highest the cluster speaks.
async fn to_controller<R>(cluster: &Cluster, request: &R, version: i16) -> Result<R::Response, UpstreamError>
where
    R: Request + std::any::Any,
    R::Response: Throttled,
{
    let connection = cluster.any_broker().await?;
    let api = ApiKey::try_from(R::KEY).expect("kafka-protocol requests have known keys");
    let version = connection.version(api)?.min(version);
    let response = connection.request_at(request, version).await;
    // What the cluster holds changed (or may have): read its metadata anew.
    cluster.invalidate();
    response
}

fn message(text: String) -> Option<StrBytes> {
    Some(StrBytes::from_string(text))
}

impl Router {
    /// Splits `topics` by destination and merges the answers: `local` gets
    /// the local topics, `upstream` each cluster's (renamed), `failed`
    /// makes the answer of a topic that gets none (no route, or its
    /// cluster failed: code and message).
    async fn split_admin<T, A, LocalFut, UpFut>(
        &self,
        topics: Vec<T>,
        names: Names<T, A>,
        local: impl FnOnce(Vec<T>) -> LocalFut,
        upstream: impl Fn(&str, Vec<T>) -> UpFut,
        failed: impl Fn(&str, i16, String) -> A,
    ) -> Vec<A>
    where
        LocalFut: Future<Output = Vec<A>>,
        UpFut: Future<Output = Result<Vec<A>, UpstreamError>>,
    {
        let order: Vec<String> = topics.iter().map(names.topic).collect();
        let mut answers: BTreeMap<String, A> = BTreeMap::new();
        let mut local_topics = Vec::new();
        let mut by_cluster: BTreeMap<String, Vec<T>> = BTreeMap::new();
        // Per cluster: its name of a topic to the client's.
        let mut client_names: BTreeMap<(String, String), String> = BTreeMap::new();
        for mut topic in topics {
            let client = (names.topic)(&topic);
            match self.place(&client) {
                Place::Local => local_topics.push(topic),
                Place::Nowhere => {
                    let why = format!("no route of Strait's configuration matches topic {client}");
                    answers.insert(
                        client.clone(),
                        failed(&client, ResponseError::UnknownTopicOrPartition.code(), why),
                    );
                }
                Place::Upstream(cluster, upstream_name) => {
                    (names.rename_topic)(&mut topic, &upstream_name);
                    client_names.insert((cluster.clone(), upstream_name), client);
                    by_cluster.entry(cluster).or_default().push(topic);
                }
            }
        }
        let local_part = async {
            if local_topics.is_empty() {
                Vec::new()
            } else {
                local(local_topics).await
            }
        };
        let upstream_parts = join_all(by_cluster.into_iter().map(|(cluster, topics)| {
            let asked: Vec<String> = topics.iter().map(names.topic).collect();
            let sent = upstream(&cluster, topics);
            async move { (cluster, asked, sent.await) }
        }));
        let (local_answers, upstream_answers) = futures_util::future::join(local_part, upstream_parts).await;
        for answer in local_answers {
            answers.insert((names.answer)(&answer), answer);
        }
        for (cluster, asked, result) in upstream_answers {
            match result {
                Ok(found) => {
                    for mut answer in found {
                        let theirs = (names.answer)(&answer);
                        if let Some(client) = client_names.get(&(cluster.clone(), theirs)) {
                            (names.rename_answer)(&mut answer, client);
                            answers.insert(client.clone(), answer);
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(cluster, error = %e, "topic administration on the cluster failed");
                    for theirs in asked {
                        let client = &client_names[&(cluster.clone(), theirs)];
                        answers.insert(client.clone(), failed(client, upstream_code(&e), e.to_string()));
                    }
                }
            }
        }
        order
            .iter()
            .map(|client| {
                answers.remove(client).unwrap_or_else(|| {
                    let why = format!("no answer for topic {client}");
                    failed(client, ResponseError::UnknownServerError.code(), why)
                })
            })
            .collect()
    }

    pub(super) fn create_topics<'a>(
        &'a self,
        session: &mut Session,
        head: Head,
        req: CreateTopicsRequest,
    ) -> Pending<'a> {
        let local = self.local(session, &head);
        let version = head.version;
        Box::pin(async move {
            let mut template = req;
            let topics = std::mem::take(&mut template.topics);
            let names = Names {
                topic: |t: &CreatableTopic| t.name.to_string(),
                rename_topic: |t: &mut CreatableTopic, n| t.name = name(n),
                answer: |a: &CreatableTopicResult| a.name.to_string(),
                rename_answer: |a: &mut CreatableTopicResult, n| a.name = name(n),
            };
            let results = self
                .split_admin(
                    topics,
                    names,
                    |topics| {
                        let sub = template.clone().with_topics(topics);
                        async move { local.ask(sub).await.map(|r| r.topics).unwrap_or_default() }
                    },
                    |cluster, topics| {
                        let (cluster, sub) = (self.cluster(cluster), template.clone().with_topics(topics));
                        async move { Ok(to_controller(cluster, &sub, version).await?.topics) }
                    },
                    |client, code, why| {
                        let mut result = CreatableTopicResult::default()
                            .with_name(name(client))
                            .with_error_code(code);
                        if version >= 1 {
                            result.error_message = message(why);
                        }
                        result
                    },
                )
                .await;
            let response = CreateTopicsResponse::default().with_topics(results);
            Reply::Respond(Box::new(ResponseKind::CreateTopics(response)))
        })
    }

    pub(super) fn delete_topics<'a>(
        &'a self,
        session: &mut Session,
        head: Head,
        req: DeleteTopicsRequest,
    ) -> Pending<'a> {
        let local = self.local(session, &head);
        let version = head.version;
        Box::pin(async move {
            // v6 names topics in `topics` (by name; topic ids are local
            // only), earlier versions in `topic_names`: one list for both.
            let by_name: Vec<DeleteTopicState> = if version >= 6 {
                req.topics.clone()
            } else {
                req.topic_names
                    .iter()
                    .map(|n| DeleteTopicState::default().with_name(Some(n.clone())))
                    .collect()
            };
            let request_of = |topics: Vec<DeleteTopicState>, v: i16| {
                let mut sub = req.clone();
                if v >= 6 {
                    sub.topics = topics;
                    sub.topic_names = Vec::new();
                } else {
                    sub.topics = Vec::new();
                    sub.topic_names = topics.into_iter().filter_map(|t| t.name).collect();
                }
                sub
            };
            let names = Names {
                topic: |t: &DeleteTopicState| t.name.as_ref().map_or_else(String::new, |n| n.to_string()),
                rename_topic: |t: &mut DeleteTopicState, n| t.name = Some(name(n)),
                answer: |a: &DeletableTopicResult| {
                    a.name.as_ref().map_or_else(String::new, |n| n.to_string())
                },
                rename_answer: |a: &mut DeletableTopicResult, n| a.name = Some(name(n)),
            };
            let results = self
                .split_admin(
                    by_name,
                    names,
                    |topics| {
                        let sub = request_of(topics, version);
                        async move { local.ask(sub).await.map(|r| r.responses).unwrap_or_default() }
                    },
                    |cluster, topics| {
                        let cluster = self.cluster(cluster);
                        async move {
                            // The version decides the request's shape.
                            let connection = cluster.any_broker().await?;
                            let v = connection.version(ApiKey::DeleteTopics)?.min(version);
                            let response = connection.request_at(&request_of(topics, v), v).await;
                            cluster.invalidate();
                            Ok(response?.responses)
                        }
                    },
                    |client, code, why| {
                        let mut result = DeletableTopicResult::default()
                            .with_name(Some(name(client)))
                            .with_error_code(code);
                        if version >= 5 {
                            result.error_message = message(why);
                        }
                        result
                    },
                )
                .await;
            let response = DeleteTopicsResponse::default().with_responses(results);
            Reply::Respond(Box::new(ResponseKind::DeleteTopics(response)))
        })
    }

    pub(super) fn create_partitions<'a>(
        &'a self,
        session: &mut Session,
        head: Head,
        req: CreatePartitionsRequest,
    ) -> Pending<'a> {
        let local = self.local(session, &head);
        let version = head.version;
        Box::pin(async move {
            let mut template = req;
            let topics = std::mem::take(&mut template.topics);
            let names = Names {
                topic: |t: &CreatePartitionsTopic| t.name.to_string(),
                rename_topic: |t: &mut CreatePartitionsTopic, n| t.name = name(n),
                answer: |a: &CreatePartitionsTopicResult| a.name.to_string(),
                rename_answer: |a: &mut CreatePartitionsTopicResult, n| a.name = name(n),
            };
            let results = self
                .split_admin(
                    topics,
                    names,
                    |topics| {
                        let sub = template.clone().with_topics(topics);
                        async move { local.ask(sub).await.map(|r| r.results).unwrap_or_default() }
                    },
                    |cluster, topics| {
                        let (cluster, sub) = (self.cluster(cluster), template.clone().with_topics(topics));
                        async move { Ok(to_controller(cluster, &sub, version).await?.results) }
                    },
                    |client, code, why| {
                        CreatePartitionsTopicResult::default()
                            .with_name(name(client))
                            .with_error_code(code)
                            .with_error_message(message(why))
                    },
                )
                .await;
            let response = CreatePartitionsResponse::default().with_results(results);
            Reply::Respond(Box::new(ResponseKind::CreatePartitions(response)))
        })
    }

    /// DescribeConfigs: topic resources split like the other topic
    /// administration; broker resources are Strait's own (the local
    /// broker's answer).
    pub(super) fn describe_configs<'a>(
        &'a self,
        session: &mut Session,
        head: Head,
        req: DescribeConfigsRequest,
    ) -> Pending<'a> {
        let local = self.local(session, &head);
        let version = head.version;
        Box::pin(async move {
            let mut template = req;
            let (topics, brokers): (Vec<DescribeConfigsResource>, Vec<DescribeConfigsResource>) =
                std::mem::take(&mut template.resources)
                    .into_iter()
                    .partition(|r| r.resource_type == TOPIC_RESOURCE);
            let order: Vec<(i8, String)> = topics
                .iter()
                .chain(&brokers)
                .map(|r| (r.resource_type, r.resource_name.to_string()))
                .collect();
            let names = Names {
                topic: |t: &DescribeConfigsResource| t.resource_name.to_string(),
                rename_topic: |t: &mut DescribeConfigsResource, n| {
                    t.resource_name = StrBytes::from_string(n.to_owned())
                },
                answer: |a: &DescribeConfigsResult| a.resource_name.to_string(),
                rename_answer: |a: &mut DescribeConfigsResult, n| {
                    a.resource_name = StrBytes::from_string(n.to_owned())
                },
            };
            // The local broker answers for the local topics and the broker
            // resources in one request.
            let mut local_resources: Vec<DescribeConfigsResource> = topics
                .iter()
                .filter(|r| self.place(r.resource_name.as_str()) == Place::Local)
                .cloned()
                .collect();
            local_resources.extend(brokers);
            let local_results = if local_resources.is_empty() {
                Vec::new()
            } else {
                let sub = template.clone().with_resources(local_resources);
                local.ask(sub).await.map(|r| r.results).unwrap_or_default()
            };
            let (local_topics, broker_results): (Vec<_>, Vec<_>) = local_results
                .into_iter()
                .partition(|r| r.resource_type == TOPIC_RESOURCE);
            let topic_results = self
                .split_admin(
                    topics,
                    names,
                    |_| std::future::ready(local_topics),
                    |cluster, topics| {
                        let (cluster, sub) = (self.cluster(cluster), template.clone().with_resources(topics));
                        async move { Ok(to_controller(cluster, &sub, version).await?.results) }
                    },
                    |client, code, why| {
                        DescribeConfigsResult::default()
                            .with_resource_type(TOPIC_RESOURCE)
                            .with_resource_name(StrBytes::from_string(client.to_owned()))
                            .with_error_code(code)
                            .with_error_message(message(why))
                    },
                )
                .await;
            let mut results: Vec<DescribeConfigsResult> =
                topic_results.into_iter().chain(broker_results).collect();
            // In request order.
            let mut response = DescribeConfigsResponse::default();
            for (kind, resource) in order {
                if let Some(at) = results
                    .iter()
                    .position(|r| r.resource_type == kind && r.resource_name.as_str() == resource)
                {
                    response.results.push(results.swap_remove(at));
                }
            }
            Reply::Respond(Box::new(ResponseKind::DescribeConfigs(response)))
        })
    }
}
