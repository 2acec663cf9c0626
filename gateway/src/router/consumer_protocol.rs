//! Topic names inside the classic consumer protocol's opaque bytes: a
//! member's subscription (JoinGroup metadata) and its assignment
//! (SyncGroup). A group delegated to an upstream cluster must see that
//! cluster's names there, its members the clients' names.
//!
//! Both start with an i16 version. Versions past the ones the codec knows
//! (3) are read as version 3 and whatever follows is kept as it was, the
//! way Kafka's own readers treat a newer version's additions. Bytes that do
//! not parse, and bytes in which no name changes, pass untouched.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// The newest version the codec reads.
const KNOWN: i16 = 3;

/// `subscription` with each topic `rename` gives a new name for renamed.
pub fn rename_subscription(subscription: &Bytes, rename: &impl Fn(&str) -> Option<String>) -> Bytes {
    rewrite::<ConsumerProtocolSubscription>(subscription, |s| {
        let mut changed = false;
        for topic in &mut s.topics {
            if let Some(new) = rename(topic) {
                *topic = StrBytes::from_string(new);
                changed = true;
            }
        }
        for owned in &mut s.owned_partitions {
            if let Some(new) = rename(&owned.topic) {
                owned.topic = TopicName(StrBytes::from_string(new));
                changed = true;
            }
        }
        changed
    })
}

/// `assignment` with each topic `rename` gives a new name for renamed.
pub fn rename_assignment(assignment: &Bytes, rename: &impl Fn(&str) -> Option<String>) -> Bytes {
    rewrite::<ConsumerProtocolAssignment>(assignment, |a| {
        let mut changed = false;
        for assigned in &mut a.assigned_partitions {
            if let Some(new) = rename(&assigned.topic) {
                assigned.topic = TopicName(StrBytes::from_string(new));
                changed = true;
            }
        }
        changed
    })
}

fn rewrite<M: Encodable + Decodable>(bytes: &Bytes, change: impl FnOnce(&mut M) -> bool) -> Bytes {
    let mut rest = bytes.clone();
    if rest.remaining() < 2 {
        return bytes.clone();
    }
    let version = rest.get_i16();
    if version < 0 {
        return bytes.clone();
    }
    let read_as = version.min(KNOWN);
    let Ok(mut message) = M::decode(&mut rest, read_as) else {
        return bytes.clone();
    };
    if !change(&mut message) {
        return bytes.clone();
    }
    let mut out = BytesMut::with_capacity(bytes.len() + 64);
    out.put_i16(version);
    if message.encode(&mut out, read_as).is_err() {
        return bytes.clone();
    }
    out.put_slice(&rest);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as Assigned;
    use kafka_protocol::messages::consumer_protocol_subscription::TopicPartition as Owned;

    fn encode<M: Encodable>(m: &M, version: i16, tail: &[u8]) -> Bytes {
        let mut buf = BytesMut::new();
        buf.put_i16(version);
        m.encode(&mut buf, version.min(KNOWN)).unwrap();
        buf.put_slice(tail);
        buf.freeze()
    }

    fn upstream(name: &str) -> Option<String> {
        name.strip_prefix("dc1.").map(str::to_owned)
    }

    fn s(name: &str) -> StrBytes {
        StrBytes::from_string(name.to_owned())
    }

    #[test]
    fn subscriptions_and_assignments_get_the_other_sides_names_and_keep_the_rest() {
        let subscription = ConsumerProtocolSubscription::default()
            .with_topics(vec![s("dc1.orders"), s("local")])
            .with_user_data(Some(Bytes::from_static(b"sticky")))
            .with_owned_partitions(vec![Owned::default()
                .with_topic(TopicName(s("dc1.orders")))
                .with_partitions(vec![0, 2])])
            .with_generation_id(7)
            .with_rack_id(Some(s("rack-a")));
        for (version, tail) in [(0, &b""[..]), (3, b""), (5, b"\x00\x01future")] {
            let bytes = encode(&subscription, version, tail);
            let renamed = rename_subscription(&bytes, &upstream);
            let mut rest = renamed.clone();
            assert_eq!(rest.get_i16(), version);
            let read = ConsumerProtocolSubscription::decode(&mut rest, version.min(KNOWN)).unwrap();
            assert_eq!(read.topics, vec![s("orders"), s("local")]);
            assert_eq!(read.user_data, subscription.user_data);
            assert_eq!(&rest[..], tail, "what a newer version adds is kept");
            if version >= 1 {
                assert_eq!(read.owned_partitions[0].topic.0, s("orders"));
                assert_eq!(read.owned_partitions[0].partitions, vec![0, 2]);
            }
            if version >= 3 {
                assert_eq!((read.generation_id, read.rack_id), (7, Some(s("rack-a"))));
            }
        }

        let assignment = ConsumerProtocolAssignment::default()
            .with_assigned_partitions(vec![
                Assigned::default()
                    .with_topic(TopicName(s("dc1.orders")))
                    .with_partitions(vec![1]),
                Assigned::default()
                    .with_topic(TopicName(s("other")))
                    .with_partitions(vec![0]),
            ])
            .with_user_data(None);
        let renamed = rename_assignment(&encode(&assignment, 1, b""), &upstream);
        let mut rest = renamed.clone();
        assert_eq!(rest.get_i16(), 1);
        let read = ConsumerProtocolAssignment::decode(&mut rest, 1).unwrap();
        let names: Vec<_> = read
            .assigned_partitions
            .iter()
            .map(|a| a.topic.0.clone())
            .collect();
        assert_eq!(names, vec![s("orders"), s("other")]);
    }

    #[test]
    fn bytes_that_do_not_parse_or_need_no_change_pass_untouched() {
        for bytes in [
            Bytes::new(),
            Bytes::from_static(b"\x00"),
            Bytes::from_static(b"\xff\xff garbage"),
            Bytes::from_static(b"\x00\x01\x00\x00\x00\x09short"),
        ] {
            assert_eq!(rename_subscription(&bytes, &upstream), bytes);
            assert_eq!(rename_assignment(&bytes, &upstream), bytes);
        }
        let unrenamed = encode(
            &ConsumerProtocolSubscription::default().with_topics(vec![s("local")]),
            1,
            b"",
        );
        let same = rename_subscription(&unrenamed, &upstream);
        assert_eq!(same.as_ptr(), unrenamed.as_ptr(), "not even copied");
    }
}
