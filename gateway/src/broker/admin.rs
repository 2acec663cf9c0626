//! CreateTopics, DeleteTopics, CreatePartitions and DescribeConfigs.

use std::collections::BTreeMap;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use super::{s, Broker, NODE_ID};
use crate::error::{kafka_code, Failure, TopicError};
use crate::topics::Topic;

/// DescribeConfigs resource types.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
/// Config sources.
const SOURCE_TOPIC: i8 = 1;
const SOURCE_DEFAULT: i8 = 5;

impl Broker {
    pub(super) async fn create_topics(&self, req: CreateTopicsRequest, version: i16) -> CreateTopicsResponse {
        let mut response = CreateTopicsResponse::default();
        for topic in req.topics {
            let name = topic.name.0.to_string();
            let partitions = if topic.num_partitions == -1 {
                self.default_partitions
            } else {
                topic.num_partitions
            };
            let replication = if topic.replication_factor == -1 {
                1
            } else {
                topic.replication_factor
            };
            let mut result = CreatableTopicResult::default().with_name(topic.name.clone());
            let configs: BTreeMap<String, String> = topic
                .configs
                .iter()
                .filter_map(|c| c.value.as_ref().map(|v| (c.name.to_string(), v.to_string())))
                .collect();
            let outcome = if !topic.assignments.is_empty() {
                Err(TopicError::InvalidReplication(
                    topic.assignments[0].broker_ids.len() as i16,
                ))
            } else if req.validate_only {
                self.topics
                    .validate_create(&name, partitions, replication, &configs)
                    .map(|()| None)
            } else {
                self.topics
                    .create(&name, partitions, replication, configs)
                    .await
                    .map(Some)
            };
            match outcome {
                Ok(created) => {
                    if version >= 5 {
                        result = result.with_num_partitions(partitions).with_replication_factor(1);
                    }
                    if let Some(t) = created {
                        if version >= 7 {
                            result = result.with_topic_id(t.id);
                        }
                        if version >= 5 {
                            result = result.with_configs(Some(
                                topic_configs(&t)
                                    .into_iter()
                                    .map(|(k, v, source)| {
                                        kafka_protocol::messages::create_topics_response::CreatableTopicConfigs::default()
                                            .with_name(s(&k))
                                            .with_value(Some(s(&v)))
                                            .with_config_source(source)
                                    })
                                    .collect(),
                            ));
                        }
                    }
                }
                Err(e) => {
                    result = result
                        .with_error_code(kafka_code(Failure::Topic(&e)).code())
                        .with_error_message(Some(s(&e.to_string())));
                }
            }
            response.topics.push(result);
        }
        response
    }

    pub(super) async fn delete_topics(&self, req: DeleteTopicsRequest, version: i16) -> DeleteTopicsResponse {
        let mut response = DeleteTopicsResponse::default();
        // v0-5 name topics in `topic_names`; v6 in `topics`, by name or id.
        let mut wanted: Vec<(Option<String>, uuid::Uuid)> = req
            .topic_names
            .iter()
            .map(|n| (Some(n.0.to_string()), uuid::Uuid::nil()))
            .collect();
        wanted.extend(
            req.topics
                .iter()
                .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id)),
        );
        for (name, id) in wanted {
            let found = match &name {
                Some(n) => self.topics.get(n),
                None => self.topics.by_id(id),
            };
            let mut result = DeletableTopicResult::default()
                .with_name(name.clone().map(|n| TopicName(s(&n))))
                .with_topic_id(id);
            let outcome = match found {
                None => Err(TopicError::Unknown(name.unwrap_or_else(|| id.to_string()))),
                Some(t) => {
                    result = result.with_name(Some(TopicName(s(&t.name)))).with_topic_id(t.id);
                    let deleted = self.topics.delete(&t.name).await;
                    if deleted.is_ok() {
                        self.groups.delete_topic_offsets(&t.name).await;
                    }
                    deleted
                }
            };
            if let Err(e) = outcome {
                result = result.with_error_code(kafka_code(Failure::Topic(&e)).code());
                if version >= 5 {
                    result = result.with_error_message(Some(s(&e.to_string())));
                }
            }
            if version < 6 {
                result.topic_id = uuid::Uuid::nil();
            }
            response.responses.push(result);
        }
        response
    }

    pub(super) async fn create_partitions(&self, req: CreatePartitionsRequest) -> CreatePartitionsResponse {
        let mut response = CreatePartitionsResponse::default();
        for topic in req.topics {
            let name = topic.name.0.to_string();
            let outcome = if topic.assignments.is_some() {
                Err(TopicError::InvalidReplication(1))
            } else {
                self.topics
                    .add_partitions(&name, topic.count, req.validate_only)
                    .await
            };
            let mut result = CreatePartitionsTopicResult::default().with_name(topic.name);
            if let Err(e) = outcome {
                result = result
                    .with_error_code(kafka_code(Failure::Topic(&e)).code())
                    .with_error_message(Some(s(&e.to_string())));
            }
            response.results.push(result);
        }
        response
    }

    pub(super) fn describe_configs(&self, req: DescribeConfigsRequest) -> DescribeConfigsResponse {
        let mut response = DescribeConfigsResponse::default();
        for resource in req.resources {
            let mut result = DescribeConfigsResult::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            let entries = match resource.resource_type {
                RESOURCE_TOPIC => match self.topics.get(&resource.resource_name) {
                    Some(t) => Ok(topic_configs(&t)),
                    None => Err(ResponseError::UnknownTopicOrPartition),
                },
                RESOURCE_BROKER
                    if resource.resource_name.is_empty()
                        || *resource.resource_name == *NODE_ID.to_string() =>
                {
                    Ok(vec![
                        ("broker.id".into(), NODE_ID.to_string(), SOURCE_DEFAULT),
                        (
                            "auto.create.topics.enable".into(),
                            self.auto_create_topics.to_string(),
                            SOURCE_DEFAULT,
                        ),
                        (
                            "num.partitions".into(),
                            self.default_partitions.to_string(),
                            SOURCE_DEFAULT,
                        ),
                    ])
                }
                _ => Err(ResponseError::InvalidRequest),
            };
            match entries {
                Ok(entries) => {
                    let keys: Option<Vec<String>> = resource
                        .configuration_keys
                        .as_ref()
                        .map(|k| k.iter().map(|k| k.to_string()).collect());
                    result.configs = entries
                        .into_iter()
                        .filter(|(k, ..)| keys.as_ref().is_none_or(|keys| keys.contains(k)))
                        .map(|(k, v, source)| {
                            DescribeConfigsResourceResult::default()
                                .with_name(s(&k))
                                .with_value(Some(s(&v)))
                                .with_read_only(resource.resource_type == RESOURCE_BROKER)
                                .with_config_source(source)
                        })
                        .collect();
                }
                Err(code) => {
                    result = result
                        .with_error_code(code.code())
                        .with_error_message(Some(s(&format!(
                            "no resource {} of type {}",
                            &*resource.resource_name, resource.resource_type
                        ))));
                }
            }
            response.results.push(result);
        }
        response
    }
}

/// The Kafka topic configs of a local topic, as (name, value, source).
fn topic_configs(t: &Topic) -> Vec<(String, String, i8)> {
    let source = |key: &str| {
        if t.configs.contains_key(key) {
            SOURCE_TOPIC
        } else {
            SOURCE_DEFAULT
        }
    };
    let st = &t.settings;
    let millis = |d: Option<std::time::Duration>| d.map_or(-1, |d| d.as_millis() as i64);
    vec![
        ("cleanup.policy".into(), "delete".into(), source("cleanup.policy")),
        (
            "retention.ms".into(),
            millis(st.retention_age).to_string(),
            source("retention.ms"),
        ),
        (
            "retention.bytes".into(),
            st.retention_bytes.map_or(-1, |b| b as i64).to_string(),
            source("retention.bytes"),
        ),
        (
            "segment.bytes".into(),
            st.segment_bytes.to_string(),
            source("segment.bytes"),
        ),
        (
            "segment.ms".into(),
            millis(Some(st.segment_age)).to_string(),
            source("segment.ms"),
        ),
        (
            "max.message.bytes".into(),
            st.max_batch_bytes.to_string(),
            source("max.message.bytes"),
        ),
    ]
}
