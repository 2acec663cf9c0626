//! Which API versions the upstream client speaks, and the choice of one
//! version per API on each connection: the highest both sides speak
//! (learned with ApiVersions when the connection opens).
//!
//! Kept out on purpose: Fetch v13+ (topics by id), Produce v12+
//! (transactions v2), Metadata v0 (an empty topic list means "all" there,
//! "none" later), OffsetCommit/OffsetFetch v10+ (topics by id). OffsetFetch
//! stays at v8: Strait's own fetches of committed offsets carry no member
//! (Kafka lets those read any group's offsets).

use std::collections::HashMap;

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::ApiKey;

/// `(api, min, max)` of every API the upstream client sends.
pub const CLIENT: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 11),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 8),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 4),
    (ApiKey::ApiVersions, 0, 3),
    // v1: SASL messages wrapped in SaslAuthenticate (v0 sent them bare).
    (ApiKey::SaslHandshake, 1, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    // The mirror's estimate of a source partition's bytes per offset.
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
];

/// The version chosen per API for one connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Versions {
    chosen: HashMap<i16, Choice>,
}

/// What was decided for one API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    Use(i16),
    /// Both sides know the API but their ranges do not meet.
    NoOverlap {
        broker: (i16, i16),
        ours: (i16, i16),
    },
}

impl Versions {
    /// Intersects [`CLIENT`] with a broker's ApiVersions answer.
    pub fn negotiate(broker: &[ApiVersion]) -> Versions {
        let mut chosen = HashMap::new();
        for &(api, min, max) in CLIENT {
            let Some(theirs) = broker.iter().find(|v| v.api_key == api as i16) else {
                continue;
            };
            let (low, high) = (min.max(theirs.min_version), max.min(theirs.max_version));
            let choice = if low <= high {
                Choice::Use(high)
            } else {
                Choice::NoOverlap {
                    broker: (theirs.min_version, theirs.max_version),
                    ours: (min, max),
                }
            };
            chosen.insert(api as i16, choice);
        }
        Versions { chosen }
    }

    /// The version to send `api` at, or why there is none.
    pub fn get(&self, api: ApiKey) -> Result<i16, String> {
        match self.chosen.get(&(api as i16)) {
            Some(Choice::Use(version)) => Ok(*version),
            Some(Choice::NoOverlap { broker, ours }) => Err(format!(
                "broker speaks v{}..v{}, Strait v{}..v{}",
                broker.0, broker.1, ours.0, ours.1
            )),
            None if CLIENT.iter().any(|(key, ..)| *key == api) => {
                Err("the broker does not list it".to_owned())
            }
            None => Err("Strait's upstream client does not send it".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(api: ApiKey, min: i16, max: i16) -> ApiVersion {
        ApiVersion::default()
            .with_api_key(api as i16)
            .with_min_version(min)
            .with_max_version(max)
    }

    #[test]
    fn the_highest_common_version_wins() {
        let versions = Versions::negotiate(&[
            version(ApiKey::Produce, 0, 13),
            version(ApiKey::Fetch, 0, 7),
            version(ApiKey::Metadata, 0, 0),
            version(ApiKey::SaslHandshake, 0, 1),
            version(ApiKey::EndTxn, 0, 4),
        ]);
        assert_eq!(versions.get(ApiKey::Produce), Ok(11));
        assert_eq!(versions.get(ApiKey::Fetch), Ok(7));
        assert_eq!(
            versions.get(ApiKey::Metadata),
            Err("broker speaks v0..v0, Strait v1..v12".to_owned())
        );
        assert_eq!(
            versions.get(ApiKey::ListOffsets),
            Err("the broker does not list it".to_owned())
        );
        assert_eq!(versions.get(ApiKey::SaslHandshake), Ok(1));
        assert_eq!(
            versions.get(ApiKey::EndTxn),
            Err("Strait's upstream client does not send it".to_owned())
        );
    }

    #[test]
    fn client_ranges_lie_within_what_the_codec_encodes() {
        for &(api, min, max) in CLIENT {
            let range = api.valid_versions();
            assert!(range.min <= min && max <= range.max && min <= max, "{api:?}");
        }
    }
}
