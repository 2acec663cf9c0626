//! Which APIs and versions Strait answers, and the ApiVersions response.
//!
//! Only what is really handled is advertised. Versions that need features
//! Strait does not have yet are left out on purpose: Produce v12+
//! (transactions v2), InitProducerId v5+, ListOffsets v7+ (the
//! max-timestamp query). OffsetCommit and OffsetFetch v9 carry KIP-848
//! member epochs: the local coordinator runs classic groups only, for
//! which v9 means what v8 does, and the router passes them on for groups
//! delegated to a cluster (v10's topic ids are not spoken).

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::ResponseError;

/// `(api, min, max)` of every API Strait handles.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 11),
    (ApiKey::Fetch, 4, 17),
    (ApiKey::ListOffsets, 1, 6),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 4),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::DescribeCluster, 0, 1),
    // Answered by the server's login gate (crate::auth): v1 wraps SASL
    // messages in SaslAuthenticate (v0 sent them bare, which Strait does
    // not read).
    (ApiKey::SaslHandshake, 1, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
];

/// The advertised version range of `api`, if Strait handles it.
pub fn supported(api: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(key, ..)| *key == api)
        .map(|&(_, min, max)| (min, max))
}

/// The ApiVersions answer of the local broker.
pub fn api_versions_response() -> ApiVersionsResponse {
    api_versions_of(SUPPORTED, None)
}

/// The answer to an ApiVersions of a version Strait does not speak
/// (KIP-511): UNSUPPORTED_VERSION with ApiVersions' own range alone, as
/// Kafka answers, so the client asks again at a version from it and learns
/// the whole list then (the router's list, not the local broker's: a
/// client that kept this one would miss what only the router forwards).
pub fn api_versions_retry() -> ApiVersionsResponse {
    let own: Vec<_> = SUPPORTED
        .iter()
        .filter(|(api, ..)| *api == ApiKey::ApiVersions)
        .copied()
        .collect();
    api_versions_of(&own, Some(ResponseError::UnsupportedVersion))
}

/// The ApiVersions answer for `apis` (`(api, min, max)`).
pub fn api_versions_of(apis: &[(ApiKey, i16, i16)], error: Option<ResponseError>) -> ApiVersionsResponse {
    let keys = apis
        .iter()
        .map(|&(key, min, max)| {
            ApiVersion::default()
                .with_api_key(key as i16)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(error.map_or(0, |e| e.code()))
        .with_api_keys(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertised_versions_lie_within_what_the_codec_parses() {
        for &(api, min, max) in SUPPORTED {
            let range = api.valid_versions();
            assert!(
                range.min <= min && max <= range.max && min <= max,
                "{api:?} {min}..{max}"
            );
        }
        assert_eq!(supported(ApiKey::Produce), Some((3, 11)));
        assert_eq!(supported(ApiKey::SaslHandshake), Some((1, 1)));
        let response = api_versions_response();
        assert_eq!(response.api_keys.len(), SUPPORTED.len());
    }
}
