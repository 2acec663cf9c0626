//! Several `strait serve` processes as one logical cluster (`instances:`).
//!
//! Each instance is a member of a group on an upstream cluster (Kafka's
//! classic group protocol, [`strait_upstream::group`]): the coordinator
//! there keeps who is alive, and the group's leader hands every member the
//! list of all of them. That list is a [`View`]; clients see it at the
//! edge ([`View::present`]): Metadata lists the live instances as the
//! brokers and spreads the partitions' leadership over them by rendezvous
//! hashing (an instance that goes away gives up only its own partitions),
//! FindCoordinator names the instance that coordinates a group the same
//! way. Everything else answers as one instance would: the local broker
//! and the router say node [`NODE_ID`], which the edge replaces.
//!
//! Any instance serves any routed partition (routes keep no state of their
//! own), so an instance never refuses a partition it does not lead:
//! clients move when their metadata says so, with no error in between.
//! Groups are delegated to a cluster (the configuration takes no group
//! Strait coordinates with `instances:`), so any instance serves them too.
//!
//! Without `instances:` the view is this instance alone, under node
//! [`NODE_ID`], and the edge only sets the address of the listener a
//! client came through.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::BrokerId;
use kafka_protocol::protocol::StrBytes;
use strait_config::InstancesConfig;
use strait_upstream::group::{Beat, Member, Protocol, Timeouts};
use strait_upstream::{Backoff, Cluster};
use tokio::sync::watch;

use crate::broker::NODE_ID;
use kafka_protocol::messages::ResponseKind;

/// What the instances' group speaks (its own protocol type: the members'
/// bytes are not the consumer protocol's).
const PROTOCOL: Protocol = Protocol {
    kind: "strait-gateway",
    name: "instances",
};

/// The version of the bytes below.
const VERSION: i16 = 0;
/// Most listeners an instance may say it has, and most instances a list
/// may hold: bytes from the group cannot make a reader allocate more.
const MAX_LISTENERS: usize = 64;
const MAX_INSTANCES: usize = 10_000;

/// One instance: its node id and where each of its listeners is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// Its node id in Metadata.
    pub node: i32,
    /// (listener name, advertised host, port).
    pub listeners: Vec<(String, String, u16)>,
}

impl Instance {
    /// The node id of an instance whose main listener is advertised as
    /// `host:port`: the same on every restart, and (with 2^30 ids) apart
    /// from the other instances'. Never [`NODE_ID`].
    pub fn node_of(host: &str, port: u16) -> i32 {
        let hash = twox_hash::XxHash3_128::oneshot(format!("strait instance {host}:{port}").as_bytes());
        (hash as u32 & 0x3fff_ffff) as i32 + 1
    }

    fn address(&self, listener: &str) -> Option<(&str, u16)> {
        self.listeners
            .iter()
            .find(|(name, ..)| name == listener)
            .map(|(_, host, port)| (host.as_str(), *port))
    }

    fn encode(&self, out: &mut BytesMut) {
        out.put_i32(self.node);
        out.put_u16(self.listeners.len() as u16);
        for (name, host, port) in &self.listeners {
            put_str(out, name);
            put_str(out, host);
            out.put_u16(*port);
        }
    }

    fn decode(bytes: &mut Bytes) -> Option<Instance> {
        if bytes.remaining() < 6 {
            return None;
        }
        let node = bytes.get_i32();
        let count = usize::from(bytes.get_u16());
        if count > MAX_LISTENERS || node <= 0 {
            return None;
        }
        let mut listeners = Vec::with_capacity(count);
        for _ in 0..count {
            let name = get_str(bytes)?;
            let host = get_str(bytes)?;
            if bytes.remaining() < 2 {
                return None;
            }
            listeners.push((name, host, bytes.get_u16()));
        }
        Some(Instance { node, listeners })
    }
}

fn put_str(out: &mut BytesMut, value: &str) {
    let bytes = &value.as_bytes()[..value.len().min(u16::MAX as usize)];
    out.put_u16(bytes.len() as u16);
    out.put_slice(bytes);
}

fn get_str(bytes: &mut Bytes) -> Option<String> {
    if bytes.remaining() < 2 {
        return None;
    }
    let len = usize::from(bytes.get_u16());
    if bytes.remaining() < len {
        return None;
    }
    String::from_utf8(bytes.split_to(len).to_vec()).ok()
}

/// A member's metadata: the version, then the instance.
fn encode_member(instance: &Instance) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(VERSION);
    instance.encode(&mut out);
    out.freeze()
}

fn decode_member(metadata: &Bytes) -> Option<Instance> {
    let mut bytes = metadata.clone();
    if bytes.remaining() < 2 || bytes.get_i16() < VERSION {
        return None;
    }
    Instance::decode(&mut bytes)
}

/// An assignment: the version, then every live instance.
fn encode_list(instances: &[Instance]) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(VERSION);
    out.put_u32(instances.len() as u32);
    for instance in instances {
        instance.encode(&mut out);
    }
    out.freeze()
}

/// The instances an assignment lists; `None` when the bytes are not one.
pub fn decode_list(assignment: &Bytes) -> Option<Vec<Instance>> {
    let mut bytes = assignment.clone();
    if bytes.remaining() < 6 || bytes.get_i16() < VERSION {
        return None;
    }
    let count = bytes.get_u32() as usize;
    if count > MAX_INSTANCES {
        return None;
    }
    let mut instances = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        instances.push(Instance::decode(&mut bytes)?);
    }
    Some(instances)
}

/// The leader's assignment: every member gets the list of all instances
/// (by node id, each once: a restarted instance may still have its old
/// member in the group until that one's session ends). Members whose
/// bytes are not an instance's are left out of the list.
pub fn assign(members: &[(String, Bytes)]) -> Vec<(String, Bytes)> {
    let mut instances: Vec<Instance> = members.iter().filter_map(|(_, m)| decode_member(m)).collect();
    instances.sort_by_key(|i| i.node);
    instances.dedup_by_key(|i| i.node);
    let list = encode_list(&instances);
    members.iter().map(|(id, _)| (id.clone(), list.clone())).collect()
}

/// The live instances as this one knows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    me: i32,
    /// Sorted by node id; holds this instance.
    members: Vec<Instance>,
}

impl View {
    /// This instance alone.
    pub fn alone(me: Instance) -> View {
        View {
            me: me.node,
            members: vec![me],
        }
    }

    /// `me` among `others` (a list from the group, which may not hold
    /// `me` yet: a member learns the list before the others see it).
    fn with(me: &Instance, mut others: Vec<Instance>) -> View {
        others.retain(|i| i.node != me.node);
        others.push(me.clone());
        others.sort_by_key(|i| i.node);
        View {
            me: me.node,
            members: others,
        }
    }

    /// The instance `key` belongs to: the one that scores highest for it
    /// (rendezvous hashing).
    fn owner(&self, key: &[u8]) -> i32 {
        if self.members.len() == 1 {
            return self.members[0].node;
        }
        self.members
            .iter()
            .map(|i| {
                let mut scored = Vec::with_capacity(key.len() + 4);
                scored.extend_from_slice(&i.node.to_be_bytes());
                scored.extend_from_slice(key);
                (twox_hash::XxHash3_128::oneshot(&scored), i.node)
            })
            .max()
            .map_or(self.me, |(_, node)| node)
    }

    /// The instance that leads `partition` of `topic` for clients.
    pub fn leader(&self, topic: &str, partition: i32) -> i32 {
        let mut key = Vec::with_capacity(topic.len() + 5);
        key.push(b't');
        key.extend_from_slice(&partition.to_be_bytes());
        key.extend_from_slice(topic.as_bytes());
        self.owner(&key)
    }

    /// The instance `group`'s members are sent to.
    pub fn coordinator(&self, group: &str) -> i32 {
        let mut key = Vec::with_capacity(group.len() + 1);
        key.push(b'g');
        key.extend_from_slice(group.as_bytes());
        self.owner(&key)
    }

    /// `node`'s address on `listener` (none for a node not in the view or
    /// without that listener).
    fn address(&self, node: i32, listener: &str) -> Option<(&str, u16)> {
        let node = if node == NODE_ID { self.me } else { node };
        self.members
            .iter()
            .find(|i| i.node == node)
            .and_then(|i| i.address(listener))
    }

    /// Every live instance that has `listener`: its node id and address
    /// there, as answers carry them.
    fn listed<'a>(&'a self, listener: &'a str) -> impl Iterator<Item = (BrokerId, StrBytes, i32)> + 'a {
        self.members.iter().filter_map(move |i| {
            let (host, port) = i.address(listener)?;
            Some((
                BrokerId(i.node),
                StrBytes::from_string(host.to_owned()),
                i32::from(port),
            ))
        })
    }

    /// Turns an answer naming this instance as node [`NODE_ID`] into what
    /// a client of `listener` sees: Metadata lists every live instance
    /// (each at its address on that listener) and spreads leadership over
    /// them; FindCoordinator names the group's coordinator; DescribeCluster
    /// lists every instance, the lowest node as the controller.
    pub fn present(&self, body: &mut ResponseKind, listener: &str) {
        let node = |n: i32| if n == NODE_ID { self.me } else { n };
        let controller = self.members[0].node;
        match body {
            ResponseKind::Metadata(metadata) => {
                if metadata.brokers.iter().any(|b| b.node_id.0 == NODE_ID) {
                    metadata.brokers = self
                        .listed(listener)
                        .map(|(node, host, port)| {
                            MetadataResponseBroker::default()
                                .with_node_id(node)
                                .with_host(host)
                                .with_port(port)
                        })
                        .collect();
                }
                if metadata.controller_id.0 == NODE_ID {
                    metadata.controller_id = BrokerId(controller);
                }
                if self.me == NODE_ID && self.members.len() == 1 {
                    return;
                }
                for topic in metadata.topics.iter_mut() {
                    let name = topic.name.as_ref().map_or("", |n| n.as_str());
                    for partition in topic.partitions.iter_mut() {
                        if partition.leader_id.0 != NODE_ID {
                            continue;
                        }
                        let leader = BrokerId(self.leader(name, partition.partition_index));
                        partition.leader_id = leader;
                        partition.replica_nodes = vec![leader];
                        partition.isr_nodes = vec![leader];
                    }
                }
            }
            ResponseKind::DescribeCluster(cluster) => {
                if cluster.brokers.iter().any(|b| b.broker_id.0 == NODE_ID) {
                    cluster.brokers = self
                        .listed(listener)
                        .map(|(node, host, port)| {
                            DescribeClusterBroker::default()
                                .with_broker_id(node)
                                .with_host(host)
                                .with_port(port)
                        })
                        .collect();
                }
                if cluster.controller_id.0 == NODE_ID {
                    cluster.controller_id = BrokerId(controller);
                }
            }
            ResponseKind::FindCoordinator(found) => {
                // v0-v3 answer in the top-level fields; v4 has only
                // `coordinators`. The router named the node (the group's
                // coordinator); here it gets its address.
                if found.error_code == 0 && !found.host.is_empty() {
                    if let Some((host, port)) = self.address(found.node_id.0, listener) {
                        found.node_id = BrokerId(node(found.node_id.0));
                        found.host = StrBytes::from_string(host.to_owned());
                        found.port = i32::from(port);
                    }
                }
                for coordinator in found.coordinators.iter_mut().filter(|c| c.error_code == 0) {
                    if let Some((host, port)) = self.address(coordinator.node_id.0, listener) {
                        coordinator.node_id = BrokerId(node(coordinator.node_id.0));
                        coordinator.host = StrBytes::from_string(host.to_owned());
                        coordinator.port = i32::from(port);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The view clients are shown, as the membership last learned it.
#[derive(Debug, Clone)]
pub struct Instances(watch::Receiver<Arc<View>>);

impl Instances {
    /// The view now.
    pub fn now(&self) -> Arc<View> {
        self.0.borrow().clone()
    }

    /// This instance alone, for good (no `instances:`).
    pub fn alone(me: Instance) -> Instances {
        // The sender goes: the receiver keeps reading its one value.
        let (_, rx) = watch::channel(Arc::new(View::alone(me)));
        Instances(rx)
    }
}

/// This instance's membership of `config`'s group on `cluster`: starts it
/// and returns the view (this instance alone until the first join) and
/// the task, which ends (leaving the group) when `stop` fires.
pub fn join(
    cluster: Cluster,
    config: &InstancesConfig,
    me: Instance,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> (Instances, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(Arc::new(View::alone(me.clone())));
    let session = config.session_timeout.duration();
    let timeouts = Timeouts {
        session,
        rebalance: session + Duration::from_secs(4),
        heartbeat: (session / 3).min(Duration::from_secs(1)),
    };
    let member = Member::new(cluster, config.group.clone(), PROTOCOL, timeouts);
    let task = tokio::spawn(membership(member, me, timeouts, tx, stop));
    (Instances(rx), task)
}

async fn membership(
    mut member: Member,
    me: Instance,
    timeouts: Timeouts,
    view: watch::Sender<Arc<View>>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let metadata = encode_member(&me);
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(2));
    'join: loop {
        let joined = tokio::select! {
            joined = member.join(metadata.clone(), assign) => joined,
            _ = &mut stop => break 'join,
        };
        let joined = match joined {
            Ok(joined) => joined,
            Err(e) => {
                tracing::warn!(group = %member.group(), error = %e, "cannot join the instances' group; keeping the last view of the instances, will retry");
                tokio::select! {
                    _ = tokio::time::sleep(backoff.next_delay()) => continue 'join,
                    _ = &mut stop => break 'join,
                }
            }
        };
        backoff.reset();
        let Some(list) = decode_list(&joined.assignment) else {
            tracing::warn!(group = %member.group(), "the instances' group handed out an assignment that is not a list of instances (another program in the group?); joining again");
            tokio::select! {
                _ = tokio::time::sleep(backoff.next_delay()) => continue 'join,
                _ = &mut stop => break 'join,
            }
        };
        let next = View::with(&me, list);
        if **view.borrow() != next {
            let nodes: Vec<String> = next
                .members
                .iter()
                .map(|i| match i.address(strait_config::MAIN_LISTENER) {
                    Some((host, port)) => format!("{}@{host}:{port}", i.node),
                    None => i.node.to_string(),
                })
                .collect();
            tracing::info!(group = %member.group(), generation = joined.generation.id, me = me.node, instances = %nodes.join(","), "the live instances changed");
            view.send_replace(Arc::new(next));
        }
        let mut beats = tokio::time::interval(timeouts.heartbeat);
        beats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        beats.tick().await;
        loop {
            tokio::select! {
                _ = beats.tick() => {}
                _ = &mut stop => break 'join,
            }
            match member.heartbeat().await {
                Ok(Beat::Stable) => {}
                Ok(Beat::Rebalance) => continue 'join,
                Err(e) => {
                    tracing::warn!(group = %member.group(), error = %e, "heartbeat to the instances' group failed; joining again");
                    continue 'join;
                }
            }
        }
    }
    member.leave().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(node: i32, port: u16) -> Instance {
        Instance {
            node,
            listeners: vec![
                ("main".into(), "10.0.0.1".into(), port),
                ("tls".into(), "gw.example".into(), port + 1),
            ],
        }
    }

    #[test]
    fn members_and_lists_read_back_and_garbage_is_refused() {
        let a = instance(7, 9092);
        assert_eq!(decode_member(&encode_member(&a)), Some(a.clone()));
        let list = vec![a.clone(), instance(9, 9192)];
        assert_eq!(decode_list(&encode_list(&list)), Some(list.clone()));
        let bytes = encode_list(&list);
        for cut in 0..bytes.len() {
            assert_eq!(decode_list(&bytes.slice(..cut)), None, "cut at {cut}");
        }
        assert_eq!(decode_list(&Bytes::from_static(b"\0\0\xff\xff\xff\xff")), None);
        assert_eq!(decode_member(&Bytes::from_static(b"")), None);
    }

    #[test]
    fn the_leader_hands_every_member_every_instance_once() {
        let members = vec![
            ("m1".to_owned(), encode_member(&instance(9, 9192))),
            ("m2".to_owned(), encode_member(&instance(7, 9092))),
            // The same instance restarted: its old member is still in.
            ("m0".to_owned(), encode_member(&instance(7, 9092))),
            ("x".to_owned(), Bytes::from_static(b"not ours")),
        ];
        let out = assign(&members);
        assert_eq!(out.len(), 4);
        for (_, list) in &out {
            assert_eq!(
                decode_list(list),
                Some(vec![instance(7, 9092), instance(9, 9192)])
            );
        }
    }

    #[test]
    fn leadership_spreads_and_moves_only_from_an_instance_that_left() {
        let three = View::with(&instance(1, 1), vec![instance(2, 2), instance(3, 3)]);
        let two = View::with(&instance(1, 1), vec![instance(2, 2)]);
        let mut counts = std::collections::BTreeMap::new();
        for p in 0..3000 {
            let before = three.leader("orders", p);
            *counts.entry(before).or_insert(0) += 1;
            let after = two.leader("orders", p);
            if before != 3 {
                assert_eq!(before, after, "partition {p} moved between instances that stayed");
            }
        }
        assert_eq!(counts.len(), 3);
        assert!(counts.values().all(|&c| c > 800), "{counts:?}");
        // Every instance computes the same owner.
        let seen_by_2 = View::with(&instance(2, 2), vec![instance(1, 1), instance(3, 3)]);
        assert_eq!(three.coordinator("g"), seen_by_2.coordinator("g"));
        assert_ne!(Instance::node_of("a", 1), Instance::node_of("a", 2));
        assert!(Instance::node_of("a", 1) > 0);
    }
}
