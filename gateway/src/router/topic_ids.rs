//! Topic ids as clients see them (KIP-516): an upstream topic's id masked
//! per cluster in Metadata, and the way back from an id a client sends
//! (Fetch v13+) to the topic it names.

use std::collections::HashMap;

use strait_config::Destination;

use super::{name, Place, Router};

/// The id clients see for a topic whose id on `cluster` is `upstream`: the
/// cluster's id XORed with a mask of 128 bits hashed from the cluster's
/// name. Stable across restarts and instances (it depends on nothing
/// else), different for the same topic reached through two cluster
/// names, distinct across clusters and from local topics' random ids (a
/// collision needs two random 128-bit values to meet), and reversible
/// given the cluster. A cluster that gives no id (0) gives none.
pub(crate) fn client_topic_id(cluster: &str, upstream: u128) -> uuid::Uuid {
    if upstream == 0 {
        return uuid::Uuid::nil();
    }
    let mask = twox_hash::XxHash3_128::oneshot(format!("strait topic ids of cluster {cluster}").as_bytes());
    uuid::Uuid::from_u128(upstream ^ mask)
}

/// Topics of a request that came by id, named: which id each client name
/// stands for, and the request's topics whose id names none.
#[derive(Debug)]
pub(super) struct ByIds<T> {
    pub ids: HashMap<String, uuid::Uuid>,
    pub unknown: Vec<T>,
}

impl Router {
    /// The client's name of the topic whose client id is `id`: a local
    /// topic's own, or an upstream topic's (the cluster's id found again
    /// through [`client_topic_id`]'s mask, in the metadata last loaded,
    /// which the client's own Metadata request loaded), under the name
    /// its route gives it. `None` when no topic clients can reach has it.
    pub(crate) fn topic_named_by_id(&self, id: uuid::Uuid) -> Option<String> {
        if id.is_nil() {
            return None;
        }
        if let Some(local) = self.broker.topics().by_id(id) {
            return matches!(self.place(&local.name), Place::Local).then(|| local.name.to_string());
        }
        self.upstreams.iter().find_map(|(cluster, handle)| {
            let upstream = client_topic_id(cluster, id.as_u128()).as_u128();
            let metadata = handle.cached_metadata()?;
            let topic = metadata.topic_named_by_id(upstream)?;
            self.routes
                .client_name(&Destination::Cluster(cluster.clone()), topic)
        })
    }

    /// Names the topics of `topics` that came by id (`topic_id`, empty
    /// name) with [`Router::topic_named_by_id`], dropping those whose id
    /// names nothing (in `unknown` of the answer, for an UNKNOWN_TOPIC_ID).
    pub(super) fn name_by_id<T>(
        &self,
        topics: Vec<T>,
        parts: impl Fn(&mut T) -> (&mut kafka_protocol::messages::TopicName, uuid::Uuid),
    ) -> (Vec<T>, ByIds<T>) {
        let mut by_ids = ByIds {
            ids: HashMap::new(),
            unknown: Vec::new(),
        };
        let mut named = Vec::with_capacity(topics.len());
        for mut t in topics {
            let (topic, id) = parts(&mut t);
            if topic.is_empty() {
                let Some(client) = self.topic_named_by_id(id) else {
                    by_ids.unknown.push(t);
                    continue;
                };
                *topic = name(&client);
                by_ids.ids.insert(client, id);
            }
            named.push(t);
        }
        (named, by_ids)
    }
}

#[cfg(test)]
mod tests {
    use super::client_topic_id;

    #[test]
    fn client_topic_ids_are_stable_per_cluster_and_reversible() {
        let upstream = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210_u128;
        let east = client_topic_id("east", upstream);
        assert_eq!(east, client_topic_id("east", upstream));
        assert_ne!(east.as_u128(), upstream);
        assert_ne!(east, client_topic_id("west", upstream));
        assert!(client_topic_id("east", 0).is_nil());
        // XOR twice with the same mask gives the cluster's id back.
        assert_eq!(client_topic_id("east", east.as_u128()).as_u128(), upstream);
    }
}
