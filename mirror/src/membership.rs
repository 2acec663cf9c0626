//! Several processes of one mirror share its partitions: each is a member
//! of the mirror's consumer group on the source, joined with Kafka's
//! classic group protocol (protocol type `consumer`, so
//! `kafka-consumer-groups --describe` shows who owns what), and the
//! group's leader assigns the partitions with [`assign`].
//!
//! The protocol is eager: when the group rebalances, every member first
//! stops its partitions, lets their in-flight produces finish and commits
//! their positions, and only then joins again ([`crate::mirror`] does
//! that). A partition therefore never has two processes writing it, and
//! its next owner resumes exactly where the last one stopped. A process
//! that dies holds its partitions until the coordinator expires its
//! session; one that cannot reach the coordinator for a session timeout
//! stops its partitions itself, as a Kafka consumer does.
//!
//! [`Member`] speaks the protocol (JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup) on a connection of its own to the coordinator (a JoinGroup
//! is held there for a whole rebalance).

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedPartition;
use kafka_protocol::messages::consumer_protocol_subscription::TopicPartition as OwnedPartition;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, ConsumerProtocolAssignment, ConsumerProtocolSubscription, GroupId, HeartbeatRequest,
    JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::ResponseError;
use strait_upstream::{Cluster, Connection, UpstreamError};

/// The assignor's name in JoinGroup.
pub const ASSIGNOR: &str = "strait-mirror";
/// The group's protocol type: the consumer protocol's encoding.
const PROTOCOL_TYPE: &str = "consumer";
/// The consumer protocol version the member writes (1: owned partitions).
const VERSION: i16 = 1;
/// The newest consumer protocol version read (later ones are read as it).
const KNOWN: i16 = 3;

/// A source partition: (topic, partition).
pub type TopicPartition = (String, i32);

/// Timeouts of the membership.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// How long the coordinator waits for a heartbeat before it gives the
    /// member's partitions to the others.
    pub session: Duration,
    /// How long a rebalance waits for members to stop and rejoin.
    pub rebalance: Duration,
    /// How often the member heartbeats (and so how soon it learns of a
    /// rebalance).
    pub heartbeat: Duration,
}

impl Timeouts {
    /// For a session of `session` and partitions that take up to `grace`
    /// to stop: heartbeats every second (a third of the session when that
    /// is shorter), so a member learns of a rebalance within one; the
    /// rebalance waits for members to stop their partitions, and 30 s
    /// more.
    pub fn new(session: Duration, grace: Duration) -> Timeouts {
        Timeouts {
            session,
            rebalance: grace + Duration::from_secs(30),
            heartbeat: (session / 3).min(Duration::from_secs(1)),
        }
    }
}

/// A generation of the group as this member joined it: what its commits
/// carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// The generation id.
    pub id: i32,
    /// This member's id.
    pub member: String,
}

/// What a join gave this member.
#[derive(Debug, Clone)]
pub struct Joined {
    /// The generation joined.
    pub generation: Generation,
    /// Whether this member leads the group (it assigned the partitions).
    pub leader: bool,
    /// The members of the generation (known to the leader only; 0 else).
    pub members: usize,
    /// The partitions this member owns.
    pub assigned: Vec<TopicPartition>,
    /// The topics the leader assigned (name, partitions): the leader
    /// rebalances when its view of the source changes from this.
    pub topics: BTreeMap<String, i32>,
}

/// What a heartbeat learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beat {
    /// The generation goes on.
    Stable,
    /// The group rebalances (or this member left it): stop, then join.
    Rebalance,
}

/// One member of a mirror's group.
#[derive(Debug)]
pub struct Member {
    source: Cluster,
    group: String,
    timeouts: Timeouts,
    member_id: String,
    generation: Option<Generation>,
    connection: Option<Connection>,
}

impl Member {
    /// A member of `group` on `source`, not yet joined.
    pub fn new(source: Cluster, group: String, timeouts: Timeouts) -> Member {
        Member {
            source,
            group,
            timeouts,
            member_id: String::new(),
            generation: None,
            connection: None,
        }
    }

    /// The generation this member is in, if it joined one.
    pub fn generation(&self) -> Option<&Generation> {
        self.generation.as_ref()
    }

    /// Joins the group and returns this member's partitions: `owned` are
    /// the partitions it had (the leader keeps them where that stays
    /// balanced), `topics` the source topics to assign if it leads.
    pub async fn join(
        &mut self,
        owned: &[TopicPartition],
        topics: &BTreeMap<String, i32>,
    ) -> Result<Joined, UpstreamError> {
        self.generation = None;
        let subscription = encode_subscription(topics.keys(), owned);
        loop {
            let connection = self.connection().await?;
            let version = connection.version(ApiKey::JoinGroup)?;
            let request = JoinGroupRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(self.group.clone())))
                .with_session_timeout_ms(millis(self.timeouts.session))
                .with_rebalance_timeout_ms(millis(self.timeouts.rebalance))
                .with_member_id(StrBytes::from_string(self.member_id.clone()))
                .with_protocol_type(StrBytes::from_static_str(PROTOCOL_TYPE))
                .with_protocols(vec![JoinGroupRequestProtocol::default()
                    .with_name(StrBytes::from_static_str(ASSIGNOR))
                    .with_metadata(subscription.clone())]);
            let answer = self.call(
                connection
                    .send_at(&request, version)
                    .await?
                    .answer_after(self.timeouts.rebalance)
                    .await,
            )?;
            match ResponseError::try_from_code(answer.error_code) {
                None => {}
                Some(ResponseError::MemberIdRequired) => {
                    self.member_id = answer.member_id.to_string();
                    continue;
                }
                Some(ResponseError::UnknownMemberId) => {
                    self.member_id.clear();
                    continue;
                }
                Some(ResponseError::RebalanceInProgress | ResponseError::CoordinatorLoadInProgress) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                Some(code) => return Err(self.error("JoinGroup", code)),
            }
            self.member_id = answer.member_id.to_string();
            let generation = Generation {
                id: answer.generation_id,
                member: self.member_id.clone(),
            };
            let leader = answer.leader == answer.member_id;
            let mut assignments = Vec::new();
            if leader {
                let members: BTreeMap<String, Vec<TopicPartition>> = answer
                    .members
                    .iter()
                    .map(|m| (m.member_id.to_string(), decode_owned(&m.metadata)))
                    .collect();
                for (member, partitions) in assign(&members, topics) {
                    assignments.push(
                        SyncGroupRequestAssignment::default()
                            .with_member_id(StrBytes::from_string(member))
                            .with_assignment(encode_assignment(&partitions)),
                    );
                }
            }
            let members = answer.members.len();
            let version = connection.version(ApiKey::SyncGroup)?;
            let mut request = SyncGroupRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(self.group.clone())))
                .with_generation_id(generation.id)
                .with_member_id(StrBytes::from_string(generation.member.clone()))
                .with_assignments(assignments);
            if version >= 5 {
                request = request
                    .with_protocol_type(Some(StrBytes::from_static_str(PROTOCOL_TYPE)))
                    .with_protocol_name(Some(StrBytes::from_static_str(ASSIGNOR)));
            }
            let answer = self.call(
                connection
                    .send_at(&request, version)
                    .await?
                    .answer_after(self.timeouts.rebalance)
                    .await,
            )?;
            match ResponseError::try_from_code(answer.error_code) {
                None => {}
                Some(ResponseError::RebalanceInProgress | ResponseError::IllegalGeneration) => continue,
                Some(ResponseError::UnknownMemberId) => {
                    self.member_id.clear();
                    continue;
                }
                Some(code) => return Err(self.error("SyncGroup", code)),
            }
            let assigned = decode_assignment(&answer.assignment);
            self.generation = Some(generation.clone());
            return Ok(Joined {
                generation,
                leader,
                members: if leader { members } else { 0 },
                assigned,
                topics: topics.clone(),
            });
        }
    }

    /// Tells the coordinator this member is alive, and learns whether the
    /// group rebalances. An error is the coordinator out of reach (the
    /// caller stops its partitions once that lasts a session timeout).
    pub async fn heartbeat(&mut self) -> Result<Beat, UpstreamError> {
        let Some(generation) = self.generation.clone() else {
            return Ok(Beat::Rebalance);
        };
        let connection = self.connection().await?;
        let request = HeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(self.group.clone())))
            .with_generation_id(generation.id)
            .with_member_id(StrBytes::from_string(generation.member));
        let answer = self.call(connection.request(&request).await)?;
        match ResponseError::try_from_code(answer.error_code) {
            None => Ok(Beat::Stable),
            Some(ResponseError::RebalanceInProgress) => Ok(Beat::Rebalance),
            Some(ResponseError::IllegalGeneration) => {
                self.generation = None;
                Ok(Beat::Rebalance)
            }
            Some(ResponseError::UnknownMemberId | ResponseError::FencedInstanceId) => {
                self.generation = None;
                self.member_id.clear();
                Ok(Beat::Rebalance)
            }
            Some(code) => Err(self.error("Heartbeat", code)),
        }
    }

    /// Leaves the group (after the member stopped its partitions), so the
    /// others take them at once rather than after a session timeout. Best
    /// effort: a member that cannot leave expires.
    pub async fn leave(&mut self) {
        if self.member_id.is_empty() {
            return;
        }
        let Ok(connection) = self.connection().await else {
            return;
        };
        let Ok(version) = connection.version(ApiKey::LeaveGroup) else {
            return;
        };
        let member = StrBytes::from_string(self.member_id.clone());
        let mut request =
            LeaveGroupRequest::default().with_group_id(GroupId(StrBytes::from_string(self.group.clone())));
        if version >= 3 {
            request = request.with_members(vec![MemberIdentity::default().with_member_id(member)]);
        } else {
            request = request.with_member_id(member);
        }
        match connection.request_at(&request, version).await {
            Ok(answer) if answer.error_code == 0 => {
                tracing::info!(group = %self.group, member = %self.member_id, "left the mirror's group")
            }
            Ok(answer) => {
                tracing::warn!(group = %self.group, code = answer.error_code, "LeaveGroup refused; the member expires after its session timeout")
            }
            Err(e) => {
                tracing::warn!(group = %self.group, error = %e, "LeaveGroup failed; the member expires after its session timeout")
            }
        }
        self.generation = None;
        self.member_id.clear();
    }

    async fn connection(&mut self) -> Result<Connection, UpstreamError> {
        if let Some(connection) = &self.connection {
            if !connection.is_failed() {
                return Ok(connection.clone());
            }
        }
        let (_, connection) = self.source.open_coordinator(&self.group).await.inspect_err(|e| {
            if e.wants_metadata_refresh() {
                self.source.forget_coordinator(&self.group);
            }
        })?;
        self.connection = Some(connection.clone());
        Ok(connection)
    }

    /// Passes an answer through, dropping the connection when it failed.
    fn call<T>(&mut self, result: Result<T, UpstreamError>) -> Result<T, UpstreamError> {
        if result.is_err() {
            self.connection = None;
            self.source.forget_coordinator(&self.group);
        }
        result
    }

    fn error(&mut self, api: &str, code: ResponseError) -> UpstreamError {
        if matches!(
            code,
            ResponseError::NotCoordinator | ResponseError::CoordinatorNotAvailable
        ) {
            self.connection = None;
            self.source.forget_coordinator(&self.group);
        }
        UpstreamError::Kafka {
            cluster: self.source.name().to_owned(),
            what: format!("{api} for group {}", self.group),
            code,
        }
    }
}

fn millis(d: Duration) -> i32 {
    d.as_millis().min(i32::MAX as u128) as i32
}

/// Assigns `topics` (name, partition count) to `members` (member id, the
/// partitions it owned): each topic spread over the members as evenly as
/// its count allows, each member's total within one of every other's, and
/// each partition left with its owner where that keeps both balances (a
/// rebalance moves only what it must).
pub fn assign(
    members: &BTreeMap<String, Vec<TopicPartition>>,
    topics: &BTreeMap<String, i32>,
) -> BTreeMap<String, Vec<TopicPartition>> {
    let mut out: BTreeMap<String, Vec<TopicPartition>> =
        members.keys().map(|m| (m.clone(), Vec::new())).collect();
    if members.is_empty() {
        return out;
    }
    let mut owner: HashMap<(&str, i32), &str> = HashMap::new();
    for (member, owned) in members {
        for (topic, partition) in owned {
            owner
                .entry((topic.as_str(), *partition))
                .or_insert(member.as_str());
        }
    }
    let count = members.len();
    for (topic, &partitions) in topics {
        let n = partitions.max(0) as usize;
        let held = |member: &str| {
            (0..partitions)
                .filter(|p| owner.get(&(topic.as_str(), *p)) == Some(&member))
                .count()
        };
        // The extra partitions of an uneven topic go to the members with
        // the fewest so far (then to those that hold more of the topic).
        let mut order: Vec<&str> = members.keys().map(String::as_str).collect();
        order.sort_by_key(|m| (out[*m].len(), Reverse(held(m)), *m));
        let quota: HashMap<&str, usize> = order
            .iter()
            .enumerate()
            .map(|(i, m)| (*m, n / count + usize::from(i < n % count)))
            .collect();
        let mut taken: HashMap<&str, usize> = HashMap::new();
        let mut free = Vec::new();
        for p in 0..partitions {
            match owner.get(&(topic.as_str(), p)) {
                Some(m)
                    if quota
                        .get(m)
                        .is_some_and(|q| taken.get(m).copied().unwrap_or(0) < *q) =>
                {
                    *taken.entry(m).or_default() += 1;
                    out.get_mut(*m).expect("a member").push((topic.clone(), p));
                }
                _ => free.push(p),
            }
        }
        let mut free = free.into_iter();
        for m in &order {
            while taken.get(m).copied().unwrap_or(0) < quota[m] {
                let Some(p) = free.next() else { break };
                *taken.entry(m).or_default() += 1;
                out.get_mut(*m).expect("a member").push((topic.clone(), p));
            }
        }
    }
    for assigned in out.values_mut() {
        assigned.sort();
    }
    out
}

/// A member's subscription: the topics it sees, the partitions it owned.
fn encode_subscription<'a>(topics: impl Iterator<Item = &'a String>, owned: &[TopicPartition]) -> Bytes {
    let subscription = ConsumerProtocolSubscription::default()
        .with_topics(topics.map(|t| StrBytes::from_string(t.clone())).collect())
        .with_owned_partitions(
            group_by_topic(owned)
                .into_iter()
                .map(|(topic, partitions)| {
                    OwnedPartition::default()
                        .with_topic(TopicName(StrBytes::from_string(topic)))
                        .with_partitions(partitions)
                })
                .collect(),
        );
    encode(&subscription)
}

fn encode_assignment(partitions: &[TopicPartition]) -> Bytes {
    let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(
        group_by_topic(partitions)
            .into_iter()
            .map(|(topic, partitions)| {
                AssignedPartition::default()
                    .with_topic(TopicName(StrBytes::from_string(topic)))
                    .with_partitions(partitions)
            })
            .collect(),
    );
    encode(&assignment)
}

fn group_by_topic(partitions: &[TopicPartition]) -> BTreeMap<String, Vec<i32>> {
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in partitions {
        by_topic.entry(topic.clone()).or_default().push(*partition);
    }
    by_topic
}

fn encode<M: Encodable>(message: &M) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(VERSION);
    message
        .encode(&mut out, VERSION)
        .expect("a consumer protocol message encodes at version 1");
    out.freeze()
}

/// Reads a consumer protocol message (its version first); `None` when the
/// bytes are not one.
fn decode<M: Decodable>(bytes: &Bytes) -> Option<M> {
    let mut rest = bytes.clone();
    if rest.remaining() < 2 {
        return None;
    }
    let version = rest.get_i16();
    if version < 0 {
        return None;
    }
    M::decode(&mut rest, version.min(KNOWN)).ok()
}

/// The partitions a member's subscription says it owned (none when the
/// bytes are not a subscription: it is then treated as owning nothing).
pub fn decode_owned(metadata: &Bytes) -> Vec<TopicPartition> {
    decode::<ConsumerProtocolSubscription>(metadata)
        .map(|s| {
            s.owned_partitions
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| (t.topic.to_string(), *p)))
                .collect()
        })
        .unwrap_or_default()
}

/// The partitions an assignment gives (none when the bytes are not one).
pub fn decode_assignment(assignment: &Bytes) -> Vec<TopicPartition> {
    let mut assigned: Vec<TopicPartition> = decode::<ConsumerProtocolAssignment>(assignment)
        .map(|a| {
            a.assigned_partitions
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| (t.topic.to_string(), *p)))
                .collect()
        })
        .unwrap_or_default();
    assigned.sort();
    assigned
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn members(n: usize) -> BTreeMap<String, Vec<TopicPartition>> {
        (0..n).map(|i| (format!("m{i}"), Vec::new())).collect()
    }

    /// Every partition once; per topic and in total, members within one.
    fn check_balanced(assigned: &BTreeMap<String, Vec<TopicPartition>>, topics: &BTreeMap<String, i32>) {
        let all: Vec<&TopicPartition> = assigned.values().flatten().collect();
        let unique: BTreeSet<&TopicPartition> = all.iter().copied().collect();
        assert_eq!(
            all.len(),
            unique.len(),
            "a partition assigned twice: {assigned:?}"
        );
        let expected: BTreeSet<TopicPartition> = topics
            .iter()
            .flat_map(|(t, n)| (0..*n).map(move |p| (t.clone(), p)))
            .collect();
        assert_eq!(unique, expected.iter().collect());
        let spread = |counts: Vec<usize>| counts.iter().max().unwrap() - counts.iter().min().unwrap();
        assert!(
            spread(assigned.values().map(Vec::len).collect()) <= 1,
            "{assigned:?}"
        );
        for topic in topics.keys() {
            let per: Vec<usize> = assigned
                .values()
                .map(|a| a.iter().filter(|(t, _)| t == topic).count())
                .collect();
            assert!(spread(per) <= 1, "{topic}: {assigned:?}");
        }
    }

    #[test]
    fn three_members_share_32_partitions_and_a_fourth_takes_only_its_share() {
        let topics = BTreeMap::from([("orders".to_owned(), 32), ("audit".to_owned(), 4)]);
        let first = assign(&members(3), &topics);
        check_balanced(&first, &topics);
        // The same members again: nothing moves.
        assert_eq!(assign(&first, &topics), first);
        // A fourth joins: it takes its 9, the others keep the rest.
        let mut four = first.clone();
        four.insert("m3".to_owned(), Vec::new());
        let second = assign(&four, &topics);
        check_balanced(&second, &topics);
        let moved: usize = first
            .iter()
            .map(|(m, old)| old.iter().filter(|p| !second[m].contains(p)).count())
            .sum();
        assert_eq!(moved, second["m3"].len());
        assert_eq!(moved, 9);
        // One leaves: only its partitions move.
        let mut three = second.clone();
        let gone = three.remove("m1").unwrap();
        let third = assign(&three, &topics);
        check_balanced(&third, &topics);
        let moved: usize = three
            .iter()
            .map(|(m, old)| old.iter().filter(|p| !third[m].contains(p)).count())
            .sum();
        assert_eq!(moved, 0, "{gone:?}");
    }

    #[test]
    fn subscriptions_and_assignments_round_trip_and_bad_bytes_own_nothing() {
        let owned = vec![("a".to_owned(), 0), ("a".to_owned(), 3), ("b".to_owned(), 1)];
        let topics = ["a".to_owned(), "b".to_owned()];
        assert_eq!(decode_owned(&encode_subscription(topics.iter(), &owned)), owned);
        assert_eq!(decode_assignment(&encode_assignment(&owned)), owned);
        assert!(decode_owned(&Bytes::from_static(&[0, 1, 0xff])).is_empty());
        assert!(decode_assignment(&Bytes::new()).is_empty());
    }

    proptest! {
        #[test]
        fn any_members_and_topics_are_balanced_and_sticky(
            counts in proptest::collection::vec(0i32..40, 1..6),
            n in 1usize..8,
            keep in proptest::collection::vec(any::<bool>(), 8),
        ) {
            let topics: BTreeMap<String, i32> =
                counts.iter().enumerate().map(|(i, c)| (format!("t{i}"), *c)).collect();
            let first = assign(&members(n), &topics);
            check_balanced(&first, &topics);
            prop_assert_eq!(&assign(&first, &topics), &first);
            // Some members leave, one joins: still balanced, and nothing
            // of a member that stayed moves unless balance needs it.
            let mut next: BTreeMap<String, Vec<TopicPartition>> = first
                .iter()
                .enumerate()
                .filter(|(i, _)| keep[*i])
                .map(|(_, (m, a))| (m.clone(), a.clone()))
                .collect();
            next.insert("new".to_owned(), Vec::new());
            let second = assign(&next, &topics);
            check_balanced(&second, &topics);
        }
    }
}
