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
//! [`Member`] is the upstream crate's group member
//! ([`strait_upstream::group`]) speaking the consumer protocol.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedPartition;
use kafka_protocol::messages::consumer_protocol_subscription::TopicPartition as OwnedPartition;
use kafka_protocol::messages::{ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use strait_upstream::group::Protocol;
pub use strait_upstream::group::{Beat, Generation, Timeouts};
use strait_upstream::{Cluster, UpstreamError};

/// The assignor's name in JoinGroup.
pub const ASSIGNOR: &str = "strait-mirror";
/// The group's protocol: the consumer protocol's encoding, so
/// `kafka-consumer-groups --describe` reads it.
const PROTOCOL: Protocol = Protocol {
    kind: "consumer",
    name: ASSIGNOR,
};
/// The consumer protocol version the member writes (1: owned partitions).
const VERSION: i16 = 1;
/// The newest consumer protocol version read (later ones are read as it).
const KNOWN: i16 = 3;

/// Most partitions a member may say a topic has (Kafka's own practical
/// limit is far lower): a bad subscription cannot make the leader walk
/// billions.
const MAX_PARTITIONS: i32 = 100_000;

/// A source partition: (topic, partition).
pub type TopicPartition = (String, i32);

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
    /// The topics this member subscribed with (name, partitions): it
    /// joins again when its view of the source changes from this.
    pub topics: BTreeMap<String, i32>,
}

/// One member of a mirror's group.
#[derive(Debug)]
pub struct Member(strait_upstream::group::Member);

impl Member {
    /// A member of `group` on `source`, not yet joined.
    pub fn new(source: Cluster, group: String, timeouts: Timeouts) -> Member {
        Member(strait_upstream::group::Member::new(
            source, group, PROTOCOL, timeouts,
        ))
    }

    /// Joins the group and returns this member's partitions: `owned` are
    /// the partitions it had (the leader keeps them where that stays
    /// balanced), `topics` the source topics it mirrors (name,
    /// partitions), each of them ready on the target.
    pub async fn join(
        &mut self,
        owned: &[TopicPartition],
        topics: &BTreeMap<String, i32>,
    ) -> Result<Joined, UpstreamError> {
        let subscription = encode_subscription(&Subscription {
            topics: topics.clone(),
            owned: owned.to_vec(),
        });
        let joined = self
            .0
            .join(subscription, |members| {
                let members: BTreeMap<String, Subscription> = members
                    .iter()
                    .map(|(id, metadata)| (id.clone(), decode_subscription(metadata)))
                    .collect();
                assign(&members)
                    .into_iter()
                    .map(|(member, partitions)| (member, encode_assignment(&partitions)))
                    .collect()
            })
            .await?;
        Ok(Joined {
            generation: joined.generation,
            leader: joined.leader,
            members: joined.members,
            assigned: decode_assignment(&joined.assignment),
            topics: topics.clone(),
        })
    }

    /// Tells the coordinator this member is alive, and learns whether the
    /// group rebalances. An error is the coordinator out of reach (the
    /// caller stops its partitions once that lasts a session timeout).
    pub async fn heartbeat(&mut self) -> Result<Beat, UpstreamError> {
        self.0.heartbeat().await
    }

    /// Leaves the group (after the member stopped its partitions), so the
    /// others take them at once rather than after a session timeout. Best
    /// effort: a member that cannot leave expires.
    pub async fn leave(&mut self) {
        self.0.leave().await
    }
}

/// What a member tells the group: the topics it mirrors (name,
/// partitions: its configuration's, as it found them on the source) and
/// the partitions it owned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscription {
    /// Topic name, partition count.
    pub topics: BTreeMap<String, i32>,
    /// The partitions it owned.
    pub owned: Vec<TopicPartition>,
}

/// Assigns the topics `members` subscribe to: each topic only to members
/// that subscribe to it (a process with another configuration under the
/// same group never gets topics it does not mirror, nor sends them to its
/// own target), spread over them as evenly as its partition count allows
/// (the largest count any of them saw), each member's total within one of
/// every other's when they subscribe alike, and each partition left with
/// its owner where that keeps both balances (a rebalance moves only what
/// it must).
pub fn assign(members: &BTreeMap<String, Subscription>) -> BTreeMap<String, Vec<TopicPartition>> {
    let mut out: BTreeMap<String, Vec<TopicPartition>> =
        members.keys().map(|m| (m.clone(), Vec::new())).collect();
    let mut topics: BTreeMap<&str, i32> = BTreeMap::new();
    for subscription in members.values() {
        for (topic, &count) in &subscription.topics {
            let known = topics.entry(topic.as_str()).or_insert(0);
            *known = (*known).max(count);
        }
    }
    let mut owner: HashMap<(&str, i32), &str> = HashMap::new();
    for (member, subscription) in members {
        for (topic, partition) in &subscription.owned {
            owner
                .entry((topic.as_str(), *partition))
                .or_insert(member.as_str());
        }
    }
    for (topic, partitions) in topics {
        let mut order: Vec<&str> = members
            .iter()
            .filter(|(_, s)| s.topics.contains_key(topic))
            .map(|(m, _)| m.as_str())
            .collect();
        let n = partitions.max(0) as usize;
        let count = order.len();
        let held = |member: &str| {
            (0..partitions)
                .filter(|p| owner.get(&(topic, *p)) == Some(&member))
                .count()
        };
        // The extra partitions of an uneven topic go to the members with
        // the fewest so far (then to those that hold more of the topic).
        order.sort_by_key(|m| (out[*m].len(), Reverse(held(m)), *m));
        let quota: HashMap<&str, usize> = order
            .iter()
            .enumerate()
            .map(|(i, m)| (*m, n / count + usize::from(i < n % count)))
            .collect();
        let mut taken: HashMap<&str, usize> = HashMap::new();
        let mut free = Vec::new();
        for p in 0..partitions {
            match owner.get(&(topic, p)) {
                Some(m)
                    if quota
                        .get(m)
                        .is_some_and(|q| taken.get(m).copied().unwrap_or(0) < *q) =>
                {
                    *taken.entry(m).or_default() += 1;
                    out.get_mut(*m).expect("a member").push((topic.to_owned(), p));
                }
                _ => free.push(p),
            }
        }
        let mut free = free.into_iter();
        for m in &order {
            while taken.get(m).copied().unwrap_or(0) < quota[m] {
                let Some(p) = free.next() else { break };
                *taken.entry(m).or_default() += 1;
                out.get_mut(*m).expect("a member").push((topic.to_owned(), p));
            }
        }
    }
    for assigned in out.values_mut() {
        assigned.sort();
    }
    out
}

/// A member's subscription: the topic names, their partition counts in
/// the user data (an i32 each, in the names' order), the partitions it
/// owned.
fn encode_subscription(subscription: &Subscription) -> Bytes {
    let mut counts = BytesMut::with_capacity(4 * subscription.topics.len());
    for count in subscription.topics.values() {
        counts.put_i32(*count);
    }
    let message = ConsumerProtocolSubscription::default()
        .with_topics(
            subscription
                .topics
                .keys()
                .map(|t| StrBytes::from_string(t.clone()))
                .collect(),
        )
        .with_user_data(Some(counts.freeze()))
        .with_owned_partitions(
            group_by_topic(&subscription.owned)
                .into_iter()
                .map(|(topic, partitions)| {
                    OwnedPartition::default()
                        .with_topic(TopicName(StrBytes::from_string(topic)))
                        .with_partitions(partitions)
                })
                .collect(),
        );
    encode(&message)
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

/// A member's [`Subscription`]: topics without a partition count (bytes
/// from another kind of member) have none, counts are taken up to
/// 100,000; bytes that are not a subscription subscribe to nothing.
pub fn decode_subscription(metadata: &Bytes) -> Subscription {
    let Some(message) = decode::<ConsumerProtocolSubscription>(metadata) else {
        return Subscription::default();
    };
    let mut counts = message.user_data.unwrap_or_default();
    let topics = message
        .topics
        .iter()
        .map(|t| {
            let count = if counts.remaining() >= 4 {
                counts.get_i32()
            } else {
                0
            };
            (t.to_string(), count.clamp(0, MAX_PARTITIONS))
        })
        .collect();
    let owned = message
        .owned_partitions
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.topic.to_string(), *p)))
        .collect();
    Subscription { topics, owned }
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

    /// `n` members subscribing to `topics`, owning what `owned` says.
    fn members(
        topics: &BTreeMap<String, i32>,
        owned: &BTreeMap<String, Vec<TopicPartition>>,
    ) -> BTreeMap<String, Subscription> {
        owned
            .iter()
            .map(|(m, owned)| {
                (
                    m.clone(),
                    Subscription {
                        topics: topics.clone(),
                        owned: owned.clone(),
                    },
                )
            })
            .collect()
    }

    fn fresh(n: usize) -> BTreeMap<String, Vec<TopicPartition>> {
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
        let first = assign(&members(&topics, &fresh(3)));
        check_balanced(&first, &topics);
        // The same members again: nothing moves.
        assert_eq!(assign(&members(&topics, &first)), first);
        // A fourth joins: it takes its 9, the others keep the rest.
        let mut four = first.clone();
        four.insert("m3".to_owned(), Vec::new());
        let second = assign(&members(&topics, &four));
        check_balanced(&second, &topics);
        let moved: usize = first
            .iter()
            .map(|(m, old)| old.iter().filter(|p| !second[m].contains(p)).count())
            .sum();
        assert_eq!(moved, second["m3"].len());
        assert_eq!(moved, 9);
        // One leaves: only its partitions move.
        let mut three = second.clone();
        three.remove("m1").unwrap();
        let third = assign(&members(&topics, &three));
        check_balanced(&third, &topics);
        let moved: usize = three
            .iter()
            .map(|(m, old)| old.iter().filter(|p| !third[m].contains(p)).count())
            .sum();
        assert_eq!(moved, 0);
    }

    #[test]
    fn a_member_gets_only_topics_it_subscribes_to_at_the_largest_count_seen() {
        let mut members = BTreeMap::new();
        for (m, topics) in [
            ("a", vec![("orders", 4), ("audit", 2)]),
            ("b", vec![("orders", 6)]),
            ("other-config", vec![("payments", 3)]),
        ] {
            members.insert(
                m.to_owned(),
                Subscription {
                    topics: topics.into_iter().map(|(t, n)| (t.to_owned(), n)).collect(),
                    owned: vec![("payments".to_owned(), 0)],
                },
            );
        }
        let assigned = assign(&members);
        let topics_of = |m: &str| -> BTreeSet<&str> { assigned[m].iter().map(|(t, _)| t.as_str()).collect() };
        assert_eq!(topics_of("other-config"), BTreeSet::from(["payments"]));
        assert_eq!(assigned["other-config"].len(), 3);
        assert!(!topics_of("a").contains("payments") && !topics_of("b").contains("payments"));
        // orders, at b's count, spread over both; audit to a alone.
        let orders = |m: &str| assigned[m].iter().filter(|(t, _)| t == "orders").count();
        assert_eq!((orders("a"), orders("b")), (3, 3), "{assigned:?}");
        assert_eq!(assigned["a"].len(), 5, "{assigned:?}");
    }

    #[test]
    fn subscriptions_and_assignments_round_trip_and_bad_bytes_subscribe_to_nothing() {
        let subscription = Subscription {
            topics: BTreeMap::from([("a".to_owned(), 4), ("b".to_owned(), 2)]),
            owned: vec![("a".to_owned(), 0), ("a".to_owned(), 3), ("b".to_owned(), 1)],
        };
        assert_eq!(
            decode_subscription(&encode_subscription(&subscription)),
            subscription
        );
        assert_eq!(
            decode_assignment(&encode_assignment(&subscription.owned)),
            subscription.owned
        );
        assert_eq!(
            decode_subscription(&Bytes::from_static(&[0, 1, 0xff])),
            Subscription::default()
        );
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
            let first = assign(&members(&topics, &fresh(n)));
            check_balanced(&first, &topics);
            prop_assert_eq!(&assign(&members(&topics, &first)), &first);
            // Some members leave, one joins: still balanced.
            let mut next: BTreeMap<String, Vec<TopicPartition>> = first
                .iter()
                .enumerate()
                .filter(|(i, _)| keep[*i])
                .map(|(_, (m, a))| (m.clone(), a.clone()))
                .collect();
            next.insert("new".to_owned(), Vec::new());
            check_balanced(&assign(&members(&topics, &next)), &topics);
        }
    }
}
