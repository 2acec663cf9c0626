//! What the router keeps per client connection: the order of its local
//! work, and its own connections to upstream brokers for long-polling
//! fetches and for delegated groups' coordinators.
//!
//! A connection's requests are started one after another (in the order
//! they arrived) and then run concurrently. Upstream parts reach their
//! upstream connections in that order when they start; local parts take a
//! [`Ticket`] when they start and run one at a time in ticket order, as a
//! Kafka broker handles one connection's requests (an idempotent
//! producer's pipelined produces to one partition must append in order).

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strait_upstream::{Cluster, Connection, UpstreamError};
use tokio::sync::Notify;

/// Most connections of one client connection to one upstream broker for
/// fetches. A fetch abandoned while it long-polls (another part of the
/// client's Fetch answered first) keeps its connection busy until the
/// broker answers it; the next fetch takes another connection meanwhile.
const FETCH_LANES: usize = 3;

/// The router's state for one client connection.
#[derive(Debug)]
pub struct Session {
    peer: SocketAddr,
    order: Arc<Order>,
    next_ticket: u64,
    /// Fetch connections per (cluster, upstream node).
    fetch_lanes: HashMap<(String, i32), Vec<Connection>>,
    /// Per (cluster, group) of a delegated group: the coordinator's node
    /// and this client connection's own connection to it.
    group_lanes: HashMap<(String, String), (i32, Connection)>,
    /// Per delegated group: the last JoinGroup's rebalance timeout (how
    /// long its SyncGroup may wait) and whether it joined as a consumer.
    rebalances: HashMap<String, (Duration, bool)>,
}

/// The tickets of local parts that have not finished.
#[derive(Debug, Default)]
struct Order {
    outstanding: Mutex<BTreeSet<u64>>,
    changed: Notify,
}

/// A local part's place in its connection's order. Its holder runs once
/// every earlier ticket of the connection is gone; dropping it (used or
/// not) lets the next one run.
#[derive(Debug)]
pub struct Ticket {
    order: Arc<Order>,
    number: u64,
}

impl Session {
    /// The state of a new connection from `peer`.
    pub fn new(peer: SocketAddr) -> Session {
        Session {
            peer,
            order: Arc::default(),
            next_ticket: 0,
            fetch_lanes: HashMap::new(),
            group_lanes: HashMap::new(),
            rebalances: HashMap::new(),
        }
    }

    /// The client's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The next place in the connection's local order.
    pub fn ticket(&mut self) -> Ticket {
        let number = self.next_ticket;
        self.next_ticket += 1;
        self.order
            .outstanding
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(number);
        Ticket {
            order: Arc::clone(&self.order),
            number,
        }
    }

    /// A connection to broker `node` of `cluster` for a fetch: one of this
    /// session's with nothing in flight, else a new one (up to
    /// [`FETCH_LANES`]; then the least busy).
    pub async fn fetch_lane(&mut self, cluster: &Cluster, node: i32) -> Result<Connection, UpstreamError> {
        let lanes = self
            .fetch_lanes
            .entry((cluster.name().to_owned(), node))
            .or_default();
        lanes.retain(|c| !c.is_failed());
        if let Some(idle) = lanes.iter().find(|c| c.bytes_in_flight() == 0) {
            return Ok(idle.clone());
        }
        if lanes.len() < FETCH_LANES {
            let connection = cluster.open(node).await?;
            lanes.push(connection.clone());
            return Ok(connection);
        }
        Ok(lanes
            .iter()
            .min_by_key(|c| c.bytes_in_flight())
            .expect("FETCH_LANES is not zero")
            .clone())
    }
}

impl Session {
    /// This client connection's own connection to the coordinator of the
    /// delegated `group` on `cluster` (opened again when it failed or the
    /// coordinator moved). The coordinator may hold a JoinGroup for a
    /// whole rebalance, and handles a connection's requests in order, so
    /// each client's group requests go on a connection of their own, in
    /// the order the client sent them, as they would without Strait.
    pub async fn group_lane(&mut self, cluster: &Cluster, group: &str) -> Result<Connection, UpstreamError> {
        let (node, _) = cluster.coordinator_of(group).await?;
        let key = (cluster.name().to_owned(), group.to_owned());
        if let Some((at, connection)) = self.group_lanes.get(&key) {
            if *at == node && !connection.is_failed() {
                return Ok(connection.clone());
            }
        }
        let (node, connection) = cluster.open_coordinator(group).await?;
        self.group_lanes.insert(key, (node, connection.clone()));
        Ok(connection)
    }
}

impl Session {
    /// Remembers a delegated group's JoinGroup: its rebalance timeout, and
    /// whether it speaks the consumer protocol.
    pub fn remember_rebalance(&mut self, group: &str, wait: Duration, consumer: bool) {
        self.rebalances.insert(group.to_owned(), (wait, consumer));
    }

    /// What [`Session::remember_rebalance`] kept for `group`.
    pub fn rebalance(&self, group: &str) -> Option<(Duration, bool)> {
        self.rebalances.get(group).copied()
    }
}

impl Ticket {
    /// Waits until every earlier ticket of the connection is gone.
    pub async fn wait(&self) {
        loop {
            let changed = self.order.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let first = self
                .order
                .outstanding
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .first()
                .copied();
            if first == Some(self.number) {
                return;
            }
            changed.await;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.order
            .outstanding
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.number);
        self.order.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tickets_run_in_order_and_unused_ones_step_aside() {
        let mut session = Session::new("127.0.0.1:1".parse().unwrap());
        let (a, b, c) = (session.ticket(), session.ticket(), session.ticket());
        let ran = Arc::new(Mutex::new(Vec::new()));
        let run = |ticket: Ticket, name: &'static str| {
            let ran = Arc::clone(&ran);
            tokio::spawn(async move {
                ticket.wait().await;
                ran.lock().unwrap().push(name);
            })
        };
        let third = run(c, "c");
        let first = run(a, "a");
        tokio::time::sleep(Duration::from_millis(20)).await;
        // b has not gone yet: c waits for it, a ran.
        assert_eq!(*ran.lock().unwrap(), vec!["a"]);
        drop(b);
        first.await.unwrap();
        third.await.unwrap();
        assert_eq!(*ran.lock().unwrap(), vec!["a", "c"]);
    }
}
