//! Tests of the group coordinator, through its public API. Timer tests run
//! on tokio's paused clock; tests that write offsets run on the real clock
//! (the paused clock jumps ahead while a task waits for the disk).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, StrBytes};
use strait_spool::pool::PoolOptions;
use strait_spool::IoPool;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{ClientInfo, GroupConfig, GroupCoordinator, GroupState};

const NONE: i16 = 0;

fn code(e: ResponseError) -> i16 {
    e.code()
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn pool() -> Arc<IoPool> {
    Arc::new(IoPool::new(PoolOptions::default()))
}

fn config(dir: &Path) -> GroupConfig {
    let mut c = GroupConfig::new(dir.join("offsets"));
    c.initial_rebalance_delay = Duration::ZERO;
    c
}

fn open(dir: &Path) -> GroupCoordinator {
    GroupCoordinator::open(config(dir), pool()).unwrap()
}

/// Every response must encode at the version it answers.
fn encodes<T: Encodable>(msg: &T, version: i16) {
    let mut buf = BytesMut::new();
    msg.encode(&mut buf, version)
        .unwrap_or_else(|e| panic!("response does not encode at v{version}: {e}"));
}

fn client(id: &str) -> ClientInfo {
    ClientInfo {
        client_id: id.to_string(),
        client_host: "/127.0.0.1".to_string(),
    }
}

fn join_req(group: &str, member: &str, protocols: &[(&str, &[u8])]) -> JoinGroupRequest {
    let mut r = JoinGroupRequest::default();
    r.group_id = GroupId(s(group));
    r.member_id = s(member);
    r.session_timeout_ms = 10_000;
    r.rebalance_timeout_ms = 20_000;
    r.protocol_type = s("consumer");
    r.protocols = protocols
        .iter()
        .map(|(name, meta)| {
            let mut p = JoinGroupRequestProtocol::default();
            p.name = s(name);
            p.metadata = Bytes::copy_from_slice(meta);
            p
        })
        .collect();
    r
}

async fn join(
    c: &GroupCoordinator,
    req: JoinGroupRequest,
    version: i16,
    client_id: &str,
) -> JoinGroupResponse {
    let resp = c.join_group(req, version, &client(client_id)).await;
    encodes(&resp, version);
    resp
}

fn spawn_join(
    c: &GroupCoordinator,
    req: JoinGroupRequest,
    version: i16,
    client_id: &str,
) -> JoinHandle<JoinGroupResponse> {
    let c = c.clone();
    let client_id = client_id.to_string();
    tokio::spawn(async move { join(&c, req, version, &client_id).await })
}

/// JoinGroup v5 with no member id: MEMBER_ID_REQUIRED and the id to use.
async fn new_member_id(c: &GroupCoordinator, group: &str, client_id: &str) -> String {
    let r = join(c, join_req(group, "", &[("range", b"m")]), 5, client_id).await;
    assert_eq!(r.error_code, code(ResponseError::MemberIdRequired));
    assert_eq!(r.generation_id, -1);
    assert!(
        r.member_id.starts_with(&format!("{client_id}-")),
        "{}",
        r.member_id
    );
    assert_eq!(r.member_id.len(), client_id.len() + 1 + 36);
    r.member_id.to_string()
}

fn sync_req(group: &str, member: &str, generation: i32, assignments: &[(&str, &[u8])]) -> SyncGroupRequest {
    let mut r = SyncGroupRequest::default();
    r.group_id = GroupId(s(group));
    r.member_id = s(member);
    r.generation_id = generation;
    r.assignments = assignments
        .iter()
        .map(|(m, a)| {
            let mut x = SyncGroupRequestAssignment::default();
            x.member_id = s(m);
            x.assignment = Bytes::copy_from_slice(a);
            x
        })
        .collect();
    r
}

async fn sync(c: &GroupCoordinator, req: SyncGroupRequest, version: i16) -> SyncGroupResponse {
    let resp = c.sync_group(req, version).await;
    encodes(&resp, version);
    resp
}

fn spawn_sync(c: &GroupCoordinator, req: SyncGroupRequest) -> JoinHandle<SyncGroupResponse> {
    let c = c.clone();
    tokio::spawn(async move { sync(&c, req, 5).await })
}

async fn heartbeat(c: &GroupCoordinator, group: &str, member: &str, generation: i32) -> i16 {
    let mut r = HeartbeatRequest::default();
    r.group_id = GroupId(s(group));
    r.member_id = s(member);
    r.generation_id = generation;
    let resp = c.heartbeat(r, 4).await;
    encodes(&resp, 4);
    resp.error_code
}

fn describe(c: &GroupCoordinator, group: &str, version: i16) -> describe_groups_response::DescribedGroup {
    let mut r = DescribeGroupsRequest::default();
    r.groups = vec![GroupId(s(group))];
    let resp = c.describe_groups(r, version);
    encodes(&resp, version);
    resp.groups.into_iter().next().unwrap()
}

fn state(c: &GroupCoordinator, group: &str) -> String {
    describe(c, group, 5).group_state.to_string()
}

/// Lets spawned requests run until the group reaches `want`.
async fn wait_state(c: &GroupCoordinator, group: &str, want: GroupState) {
    for _ in 0..1000 {
        if state(c, group) == want.name() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!(
        "group {group} never reached {}, is {}",
        want.name(),
        state(c, group)
    );
}

/// Two members in `group`, synced at generation 2: (leader id, follower id).
async fn form_group(c: &GroupCoordinator, group: &str) -> (String, String) {
    let a = new_member_id(c, group, "client-a").await;
    let ra = join(c, join_req(group, &a, &[("range", b"meta-a")]), 5, "client-a").await;
    assert_eq!(ra.error_code, NONE);
    assert_eq!(ra.generation_id, 1);
    assert_eq!(ra.leader, s(&a));
    assert_eq!(ra.member_id, s(&a));
    assert_eq!(ra.protocol_name, Some(s("range")));
    assert_eq!(ra.members.len(), 1);
    assert_eq!(ra.members[0].metadata, Bytes::from_static(b"meta-a"));
    let sa = sync(c, sync_req(group, &a, 1, &[(&a, b"assign-a1")]), 5).await;
    assert_eq!(sa.error_code, NONE);
    assert_eq!(sa.assignment, Bytes::from_static(b"assign-a1"));
    assert_eq!(sa.protocol_type, Some(s("consumer")));
    assert_eq!(sa.protocol_name, Some(s("range")));
    assert_eq!(state(c, group), "Stable");

    let b = new_member_id(c, group, "client-b").await;
    assert_ne!(a, b);
    // A pending member id alone does not disturb the group.
    assert_eq!(heartbeat(c, group, &a, 1).await, NONE);
    let jb = spawn_join(c, join_req(group, &b, &[("range", b"meta-b")]), 5, "client-b");
    wait_state(c, group, GroupState::PreparingRebalance).await;
    assert_eq!(
        heartbeat(c, group, &a, 1).await,
        code(ResponseError::RebalanceInProgress)
    );
    let ra = join(c, join_req(group, &a, &[("range", b"meta-a")]), 5, "client-a").await;
    let rb = jb.await.unwrap();
    assert_eq!((ra.error_code, rb.error_code), (NONE, NONE));
    assert_eq!((ra.generation_id, rb.generation_id), (2, 2));
    assert_eq!(
        (ra.leader.to_string(), rb.leader.to_string()),
        (a.clone(), a.clone())
    );
    let mut seen: Vec<(String, Bytes)> = ra
        .members
        .iter()
        .map(|m| (m.member_id.to_string(), m.metadata.clone()))
        .collect();
    seen.sort();
    let mut want = vec![
        (a.clone(), Bytes::from_static(b"meta-a")),
        (b.clone(), Bytes::from_static(b"meta-b")),
    ];
    want.sort();
    assert_eq!(seen, want);
    assert!(rb.members.is_empty(), "only the leader gets the members");
    assert_eq!(state(c, group), "CompletingRebalance");
    // CompletingRebalance: heartbeats are fine, the follower waits in sync.
    assert_eq!(heartbeat(c, group, &b, 2).await, NONE);
    let follower = spawn_sync(c, sync_req(group, &b, 2, &[]));
    tokio::task::yield_now().await;
    let leader = sync(
        c,
        sync_req(group, &a, 2, &[(&a, b"assign-a2"), (&b, b"assign-b2")]),
        5,
    )
    .await;
    let follower = follower.await.unwrap();
    assert_eq!(leader.error_code, NONE);
    assert_eq!(leader.assignment, Bytes::from_static(b"assign-a2"));
    assert_eq!(follower.error_code, NONE);
    assert_eq!(follower.assignment, Bytes::from_static(b"assign-b2"));
    assert_eq!(state(c, group), "Stable");
    (a, b)
}

#[tokio::test(start_paused = true)]
async fn two_members_join_and_sync_their_assignments() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path());
    let (a, b) = form_group(&c, "g").await;

    assert_eq!(heartbeat(&c, "g", &a, 2).await, NONE);
    assert_eq!(heartbeat(&c, "g", &b, 2).await, NONE);
    assert_eq!(
        heartbeat(&c, "g", &b, 1).await,
        code(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        heartbeat(&c, "g", "nobody", 2).await,
        code(ResponseError::UnknownMemberId)
    );
    assert_eq!(
        heartbeat(&c, "other", &a, 2).await,
        code(ResponseError::UnknownMemberId)
    );
    let stale = sync(&c, sync_req("g", &b, 1, &[]), 5).await;
    assert_eq!(stale.error_code, code(ResponseError::IllegalGeneration));
    let unknown = sync(&c, sync_req("g", "nobody", 2, &[]), 5).await;
    assert_eq!(unknown.error_code, code(ResponseError::UnknownMemberId));
    let mut wrong = sync_req("g", &b, 2, &[]);
    wrong.protocol_name = Some(s("roundrobin"));
    let wrong = sync(&c, wrong, 5).await;
    assert_eq!(wrong.error_code, code(ResponseError::InconsistentGroupProtocol));
    // In a stable group, a sync returns the member's current assignment.
    let again = sync(&c, sync_req("g", &b, 2, &[]), 3).await;
    assert_eq!(again.assignment, Bytes::from_static(b"assign-b2"));
    // A follower rejoining with unchanged metadata gets the current
    // generation without a rebalance.
    let rb = join(&c, join_req("g", &b, &[("range", b"meta-b")]), 5, "client-b").await;
    assert_eq!((rb.error_code, rb.generation_id), (NONE, 2));
    assert_eq!(rb.leader, s(&a));
    assert_eq!(state(&c, "g"), "Stable");

    let d = describe(&c, "g", 5);
    assert_eq!(d.group_state, s("Stable"));
    assert_eq!(d.protocol_type, s("consumer"));
    assert_eq!(d.protocol_data, s("range"));
    let mut members: Vec<(String, String, String, Bytes, Bytes)> = d
        .members
        .iter()
        .map(|m| {
            (
                m.member_id.to_string(),
                m.client_id.to_string(),
                m.client_host.to_string(),
                m.member_metadata.clone(),
                m.member_assignment.clone(),
            )
        })
        .collect();
    members.sort();
    let mut want = vec![
        (
            a.clone(),
            "client-a".to_string(),
            "/127.0.0.1".to_string(),
            Bytes::from_static(b"meta-a"),
            Bytes::from_static(b"assign-a2"),
        ),
        (
            b.clone(),
            "client-b".to_string(),
            "/127.0.0.1".to_string(),
            Bytes::from_static(b"meta-b"),
            Bytes::from_static(b"assign-b2"),
        ),
    ];
    want.sort();
    assert_eq!(members, want);
}

#[tokio::test(start_paused = true)]
async fn session_expiry_evicts_a_member_and_the_rest_rebalance() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path());
    let (a, b) = form_group(&c, "g").await;
    let start = Instant::now();
    // A heartbeats every 3 s; B is silent. B's session is 10 s.
    let mut rebalancing_at = None;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let e = heartbeat(&c, "g", &a, 2).await;
        if e == code(ResponseError::RebalanceInProgress) {
            rebalancing_at = Some(start.elapsed());
            break;
        }
        assert_eq!(e, NONE);
    }
    let at = rebalancing_at.expect("B never expired");
    assert!(
        at >= Duration::from_secs(10) && at <= Duration::from_secs(13),
        "{at:?}"
    );
    assert_eq!(
        heartbeat(&c, "g", &b, 2).await,
        code(ResponseError::UnknownMemberId)
    );
    let ra = join(&c, join_req("g", &a, &[("range", b"meta-a")]), 5, "client-a").await;
    assert_eq!(ra.error_code, NONE);
    assert_eq!(ra.generation_id, 3);
    assert_eq!(ra.leader, s(&a));
    assert_eq!(ra.members.len(), 1);
    assert_eq!(ra.members[0].member_id, s(&a));
    let sa = sync(&c, sync_req("g", &a, 3, &[(&a, b"all-partitions")]), 5).await;
    assert_eq!(sa.assignment, Bytes::from_static(b"all-partitions"));
    let d = describe(&c, "g", 5);
    assert_eq!(d.group_state, s("Stable"));
    assert_eq!(d.members.len(), 1);
    // And A alone expires too: the group empties (and, with no offsets,
    // is forgotten).
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!(
        heartbeat(&c, "g", &a, 3).await,
        code(ResponseError::UnknownMemberId)
    );
    assert_eq!(state(&c, "g"), "Dead");
}

#[tokio::test(start_paused = true)]
async fn members_that_do_not_rejoin_in_the_rebalance_timeout_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path());
    let (a, b) = form_group(&c, "g").await;
    let start = Instant::now();
    // B changes its metadata: a rebalance. A keeps heartbeating but never
    // rejoins.
    let jb = spawn_join(&c, join_req("g", &b, &[("range", b"meta-b2")]), 5, "client-b");
    wait_state(&c, "g", GroupState::PreparingRebalance).await;
    let hb = {
        let c = c.clone();
        let a = a.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(3)).await;
                let e = heartbeat(&c, "g", &a, 2).await;
                if e != code(ResponseError::RebalanceInProgress) {
                    return e;
                }
            }
        })
    };
    let rb = jb.await.unwrap();
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(20) && waited < Duration::from_secs(21),
        "{waited:?}"
    );
    assert_eq!(rb.error_code, NONE);
    assert_eq!(rb.generation_id, 3);
    assert_eq!(rb.leader, s(&b), "the remaining member leads");
    assert_eq!(rb.members.len(), 1);
    assert_eq!(rb.members[0].metadata, Bytes::from_static(b"meta-b2"));
    assert_eq!(hb.await.unwrap(), code(ResponseError::UnknownMemberId));
}

#[tokio::test(start_paused = true)]
async fn members_that_do_not_sync_in_time_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path());
    let a = new_member_id(&c, "g", "client-a").await;
    let ra = join(&c, join_req("g", &a, &[("range", b"meta-a")]), 5, "client-a").await;
    assert_eq!(ra.generation_id, 1);
    // The leader never syncs; it heartbeats, so only the sync timeout
    // (the rebalance timeout, 20 s) removes it.
    let start = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let e = heartbeat(&c, "g", &a, 1).await;
        if e != NONE {
            assert_eq!(e, code(ResponseError::UnknownMemberId));
            break;
        }
    }
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(20) && waited <= Duration::from_secs(23),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn pending_member_ids_expire_after_the_session_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path());
    let id = new_member_id(&c, "g", "client-a").await;
    assert_eq!(state(&c, "g"), "Empty");
    tokio::time::sleep(Duration::from_secs(11)).await;
    let r = join(&c, join_req("g", &id, &[("range", b"m")]), 5, "client-a").await;
    assert_eq!(r.error_code, code(ResponseError::UnknownMemberId));
    assert_eq!(r.member_id, s(&id));
}

#[tokio::test(start_paused = true)]
async fn initial_rebalance_delay_gathers_members_into_one_round() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.initial_rebalance_delay = Duration::from_secs(3);
    let c = GroupCoordinator::open(cfg, pool()).unwrap();
    let start = Instant::now();
    // JoinGroup v3: no MEMBER_ID_REQUIRED round trip.
    let ja = spawn_join(&c, join_req("g", "", &[("range", b"a")]), 3, "client-a");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let jb = spawn_join(&c, join_req("g", "", &[("range", b"b")]), 3, "client-b");
    let (ra, rb) = (ja.await.unwrap(), jb.await.unwrap());
    let waited = start.elapsed();
    // B arrived during the delay, so the round waited one more delay.
    assert!(
        waited >= Duration::from_secs(6) && waited < Duration::from_secs(7),
        "{waited:?}"
    );
    assert_eq!((ra.error_code, rb.error_code), (NONE, NONE));
    assert_eq!((ra.generation_id, rb.generation_id), (1, 1));
    assert_eq!(ra.leader, ra.member_id);
    assert_eq!(rb.leader, ra.member_id);
    assert_eq!(ra.members.len(), 2);
    assert!(ra.member_id.starts_with("client-a-"));
    assert!(rb.member_id.starts_with("client-b-"));
}

#[tokio::test(start_paused = true)]
async fn join_validation_and_protocol_vote() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path());
    let mut short = join_req("g", "", &[("range", b"m")]);
    short.session_timeout_ms = 1000;
    let r = join(&c, short, 5, "x").await;
    assert_eq!(r.error_code, code(ResponseError::InvalidSessionTimeout));
    let mut long = join_req("g", "", &[("range", b"m")]);
    long.session_timeout_ms = 31 * 60 * 1000;
    assert_eq!(
        join(&c, long, 5, "x").await.error_code,
        code(ResponseError::InvalidSessionTimeout)
    );
    assert_eq!(
        join(&c, join_req("", "", &[("range", b"m")]), 5, "x")
            .await
            .error_code,
        code(ResponseError::InvalidGroupId)
    );
    assert_eq!(
        join(&c, join_req("g", "", &[]), 5, "x").await.error_code,
        code(ResponseError::InconsistentGroupProtocol)
    );
    assert_eq!(
        join(&c, join_req("g", "ghost", &[("range", b"m")]), 5, "x")
            .await
            .error_code,
        code(ResponseError::UnknownMemberId)
    );

    // Three members joining together (v3: no MEMBER_ID_REQUIRED).
    let ja = spawn_join(
        &c,
        join_req("g", "", &[("range", b"a1"), ("roundrobin", b"a2")]),
        3,
        "a",
    );
    let jb = spawn_join(
        &c,
        join_req("g", "", &[("roundrobin", b"b2"), ("range", b"b1")]),
        3,
        "b",
    );
    let jc = spawn_join(
        &c,
        join_req("g", "", &[("roundrobin", b"c2"), ("range", b"c1")]),
        3,
        "c",
    );
    let (ra, rb, rc) = (ja.await.unwrap(), jb.await.unwrap(), jc.await.unwrap());
    // All three arrived within the (zero) initial delay: one round.
    assert_eq!([ra.generation_id, rb.generation_id, rc.generation_id], [1, 1, 1]);
    assert_eq!(describe(&c, "g", 5).members.len(), 3);
    for r in [&ra, &rb, &rc] {
        assert_eq!(r.leader, ra.member_id);
        assert_eq!(r.protocol_name, Some(s("roundrobin")), "2 votes to 1");
    }
    let metadata: Vec<(String, Bytes)> = ra
        .members
        .iter()
        .map(|m| (m.member_id[..2].to_string(), m.metadata.clone()))
        .collect();
    assert_eq!(
        metadata,
        vec![
            ("a-".to_string(), Bytes::from_static(b"a2")),
            ("b-".to_string(), Bytes::from_static(b"b2")),
            ("c-".to_string(), Bytes::from_static(b"c2")),
        ]
    );

    // A different protocol type, or no common protocol, is refused.
    let mut other = join_req("g", "", &[("roundrobin", b"x")]);
    other.protocol_type = s("connect");
    assert_eq!(
        join(&c, other, 3, "x").await.error_code,
        code(ResponseError::InconsistentGroupProtocol)
    );
    assert_eq!(
        join(&c, join_req("g", "", &[("sticky", b"x")]), 3, "x")
            .await
            .error_code,
        code(ResponseError::InconsistentGroupProtocol)
    );
}

#[tokio::test(start_paused = true)]
async fn static_member_rejoins_with_a_new_id_without_a_rebalance() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path());
    let mut req = join_req("g", "", &[("range", b"meta")]);
    req.group_instance_id = Some(s("instance-1"));
    // Static members skip MEMBER_ID_REQUIRED.
    let r1 = join(&c, req.clone(), 5, "client").await;
    assert_eq!(r1.error_code, NONE);
    assert_eq!(r1.generation_id, 1);
    let old = r1.member_id.to_string();
    assert!(old.starts_with("instance-1-"), "{old}");
    assert_eq!(r1.members[0].group_instance_id, Some(s("instance-1")));
    let mut sreq = sync_req("g", &old, 1, &[(&old, b"assigned")]);
    sreq.group_instance_id = Some(s("instance-1"));
    assert_eq!(
        sync(&c, sreq, 5).await.assignment,
        Bytes::from_static(b"assigned")
    );

    // The instance restarts and rejoins without its member id.
    let r2 = join(&c, req.clone(), 5, "client").await;
    assert_eq!(r2.error_code, NONE);
    let new = r2.member_id.to_string();
    assert_ne!(new, old);
    assert_eq!(r2.generation_id, 1, "no rebalance");
    assert_eq!(
        r2.leader,
        s(&old),
        "v5: the old leader id, so no new assignment is computed"
    );
    assert!(r2.members.is_empty());
    assert_eq!(state(&c, "g"), "Stable");
    let mut hb = HeartbeatRequest::default();
    hb.group_id = GroupId(s("g"));
    hb.member_id = s(&old);
    hb.generation_id = 1;
    hb.group_instance_id = Some(s("instance-1"));
    assert_eq!(
        c.heartbeat(hb, 4).await.error_code,
        code(ResponseError::FencedInstanceId)
    );
    let mut sreq = sync_req("g", &new, 1, &[]);
    sreq.group_instance_id = Some(s("instance-1"));
    assert_eq!(
        sync(&c, sreq, 5).await.assignment,
        Bytes::from_static(b"assigned")
    );
    let mut stale = req.clone();
    stale.member_id = s(&old);
    assert_eq!(
        join(&c, stale, 5, "client").await.error_code,
        code(ResponseError::FencedInstanceId)
    );

    // JoinGroup v9 (KIP-814): the rejoining leader learns it leads, with
    // skip_assignment.
    let r3 = join(&c, req.clone(), 9, "client").await;
    assert_eq!(r3.error_code, NONE);
    assert_eq!(r3.generation_id, 1);
    assert!(r3.skip_assignment);
    assert_eq!(r3.leader, r3.member_id);
    assert_eq!(r3.members.len(), 1);
    assert_eq!(r3.members[0].metadata, Bytes::from_static(b"meta"));

    // Changed protocols mean a rebalance.
    let mut changed = join_req("g", "", &[("roundrobin", b"meta")]);
    changed.group_instance_id = Some(s("instance-1"));
    let r4 = join(&c, changed, 5, "client").await;
    assert_eq!(r4.generation_id, 2);
    assert_eq!(r4.protocol_name, Some(s("roundrobin")));

    // A static member leaves by instance id.
    let mut leave = LeaveGroupRequest::default();
    leave.group_id = GroupId(s("g"));
    let mut who = MemberIdentity::default();
    who.group_instance_id = Some(s("instance-1"));
    leave.members = vec![who];
    let resp = c.leave_group(leave, 4).await;
    encodes(&resp, 4);
    assert_eq!(resp.members[0].error_code, NONE);
    assert_eq!(state(&c, "g"), "Dead");
}

#[tokio::test(start_paused = true)]
async fn leave_group_batch_and_single() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path());
    let (a, b) = form_group(&c, "g").await;
    let mut leave = LeaveGroupRequest::default();
    leave.group_id = GroupId(s("g"));
    leave.members = [a.as_str(), "ghost"]
        .iter()
        .map(|id| {
            let mut m = MemberIdentity::default();
            m.member_id = s(id);
            m
        })
        .collect();
    let resp = c.leave_group(leave, 3).await;
    encodes(&resp, 3);
    assert_eq!(resp.error_code, NONE);
    let codes: Vec<(String, i16)> = resp
        .members
        .iter()
        .map(|m| (m.member_id.to_string(), m.error_code))
        .collect();
    assert_eq!(
        codes,
        vec![
            (a.clone(), NONE),
            ("ghost".into(), code(ResponseError::UnknownMemberId))
        ]
    );
    assert_eq!(state(&c, "g"), "PreparingRebalance");
    let rb = join(&c, join_req("g", &b, &[("range", b"meta-b")]), 5, "client-b").await;
    assert_eq!(
        (rb.generation_id, rb.leader.to_string(), rb.members.len()),
        (3, b.clone(), 1)
    );

    let mut single = LeaveGroupRequest::default();
    single.group_id = GroupId(s("g"));
    single.member_id = s(&b);
    let resp = c.leave_group(single.clone(), 0).await;
    encodes(&resp, 0);
    assert_eq!(resp.error_code, NONE);
    let resp = c.leave_group(single, 0).await;
    assert_eq!(resp.error_code, code(ResponseError::UnknownMemberId));
}

// ---- offsets ---------------------------------------------------------------

fn commit_req(
    group: &str,
    generation: i32,
    member: &str,
    parts: &[(&str, i32, i64, &str)],
) -> OffsetCommitRequest {
    let mut r = OffsetCommitRequest::default();
    r.group_id = GroupId(s(group));
    r.generation_id_or_member_epoch = generation;
    r.member_id = s(member);
    let mut topics: Vec<OffsetCommitRequestTopic> = Vec::new();
    for (topic, partition, offset, metadata) in parts {
        if topics.last().is_none_or(|t| t.name.0.as_str() != *topic) {
            let mut t = OffsetCommitRequestTopic::default();
            t.name = TopicName(s(topic));
            topics.push(t);
        }
        let mut p = OffsetCommitRequestPartition::default();
        p.partition_index = *partition;
        p.committed_offset = *offset;
        p.committed_leader_epoch = 7;
        p.committed_metadata = Some(s(metadata));
        topics.last_mut().unwrap().partitions.push(p);
    }
    r.topics = topics;
    r
}

fn exists(topic: &str, partition: i32) -> bool {
    topic != "missing" && partition < 1000
}

/// Commits; returns (topic, partition, error) in request order.
async fn commit(c: &GroupCoordinator, req: OffsetCommitRequest, version: i16) -> Vec<(String, i32, i16)> {
    let resp = c.offset_commit(req, version, &exists).await;
    encodes(&resp, version);
    resp.topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.0.to_string(), p.partition_index, p.error_code))
        })
        .collect()
}

fn errors(results: &[(String, i32, i16)]) -> Vec<i16> {
    results.iter().map(|r| r.2).collect()
}

/// OffsetFetch v7 (topics None = all): (topic, partition, offset, epoch,
/// metadata).
async fn fetch_v7(
    c: &GroupCoordinator,
    group: &str,
    topics: Option<&[(&str, &[i32])]>,
) -> Vec<(String, i32, i64, i32, String)> {
    let mut r = OffsetFetchRequest::default();
    r.group_id = GroupId(s(group));
    r.topics = topics.map(|ts| {
        ts.iter()
            .map(|(name, parts)| {
                let mut t = OffsetFetchRequestTopic::default();
                t.name = TopicName(s(name));
                t.partition_indexes = parts.to_vec();
                t
            })
            .collect()
    });
    let resp = c.offset_fetch(r, 7).await;
    encodes(&resp, 7);
    assert_eq!(resp.error_code, NONE);
    resp.topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                assert_eq!(p.error_code, NONE);
                (
                    t.name.0.to_string(),
                    p.partition_index,
                    p.committed_offset,
                    p.committed_leader_epoch,
                    p.metadata.as_deref().unwrap_or("<null>").to_string(),
                )
            })
        })
        .collect()
}

fn row(
    topic: &str,
    partition: i32,
    offset: i64,
    epoch: i32,
    metadata: &str,
) -> (String, i32, i64, i32, String) {
    (topic.to_string(), partition, offset, epoch, metadata.to_string())
}

#[tokio::test]
async fn commits_are_fenced_by_generation_and_membership() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path());
    let (a, b) = form_group(&c, "g").await;

    let stale = commit(&c, commit_req("g", 1, &a, &[("t", 0, 10, "")]), 8).await;
    assert_eq!(errors(&stale), vec![code(ResponseError::IllegalGeneration)]);
    let stranger = commit(&c, commit_req("g", 2, "ghost", &[("t", 0, 10, "")]), 8).await;
    assert_eq!(errors(&stranger), vec![code(ResponseError::UnknownMemberId)]);
    let standalone = commit(&c, commit_req("g", -1, "", &[("t", 0, 10, "")]), 8).await;
    assert_eq!(errors(&standalone), vec![code(ResponseError::UnknownMemberId)]);
    assert!(fetch_v7(&c, "g", None).await.is_empty(), "nothing was written");

    let big = "x".repeat(4097);
    let ok = commit(
        &c,
        commit_req(
            "g",
            2,
            &a,
            &[
                ("t", 0, 10, "m0"),
                ("t", 1, 11, ""),
                ("t", 2, 12, &big),
                ("missing", 0, 5, ""),
            ],
        ),
        8,
    )
    .await;
    assert_eq!(
        ok,
        vec![
            ("t".into(), 0, NONE),
            ("t".into(), 1, NONE),
            ("t".into(), 2, code(ResponseError::OffsetMetadataTooLarge)),
            ("missing".into(), 0, code(ResponseError::UnknownTopicOrPartition)),
        ]
    );
    // The other member commits too; the later value wins.
    let ok = commit(&c, commit_req("g", 2, &b, &[("t", 1, 21, "by-b")]), 2).await;
    assert_eq!(errors(&ok), vec![NONE]);
    assert_eq!(
        fetch_v7(&c, "g", None).await,
        vec![row("t", 0, 10, 7, "m0"), row("t", 1, 21, -1, "by-b")]
    );
    assert_eq!(
        fetch_v7(&c, "g", Some(&[("t", &[1, 2]), ("u", &[0])])).await,
        vec![
            row("t", 1, 21, -1, "by-b"),
            row("t", 2, -1, -1, ""),
            row("u", 0, -1, -1, "")
        ]
    );

    // During CompletingRebalance, commits get REBALANCE_IN_PROGRESS.
    let jb = spawn_join(&c, join_req("g", &b, &[("range", b"meta-b2")]), 5, "client-b");
    wait_state(&c, "g", GroupState::PreparingRebalance).await;
    // PreparingRebalance still takes commits of the current generation.
    let during = commit(&c, commit_req("g", 2, &a, &[("t", 0, 15, "")]), 8).await;
    assert_eq!(errors(&during), vec![NONE]);
    let ra = join(&c, join_req("g", &a, &[("range", b"meta-a")]), 5, "client-a").await;
    assert_eq!(ra.generation_id, 3);
    jb.await.unwrap();
    let completing = commit(&c, commit_req("g", 3, &a, &[("t", 0, 16, "")]), 8).await;
    assert_eq!(
        errors(&completing),
        vec![code(ResponseError::RebalanceInProgress)]
    );
    assert_eq!(
        fetch_v7(&c, "g", Some(&[("t", &[0])])).await,
        vec![row("t", 0, 15, 7, "")]
    );
}

#[tokio::test]
async fn standalone_commits_need_no_members() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path());
    let member_commit = commit(&c, commit_req("solo", 5, "someone", &[("t", 0, 1, "")]), 8).await;
    assert_eq!(
        errors(&member_commit),
        vec![code(ResponseError::IllegalGeneration)]
    );
    assert_eq!(state(&c, "solo"), "Dead");
    let ok = commit(
        &c,
        commit_req("solo", -1, "", &[("t", 0, 100, "meta"), ("t", 3, 300, "")]),
        8,
    )
    .await;
    assert_eq!(errors(&ok), vec![NONE, NONE]);
    assert_eq!(
        fetch_v7(&c, "solo", None).await,
        vec![row("t", 0, 100, 7, "meta"), row("t", 3, 300, 7, "")]
    );
    // The group now exists, Empty, and still takes standalone commits.
    assert_eq!(state(&c, "solo"), "Empty");
    let again = commit(&c, commit_req("solo", -1, "", &[("t", 0, 101, "")]), 3).await;
    assert_eq!(errors(&again), vec![NONE]);
    // OffsetFetch v8: several groups at once.
    let mut r = OffsetFetchRequest::default();
    r.groups = ["solo", "nobody"]
        .iter()
        .map(|g| {
            let mut x = OffsetFetchRequestGroup::default();
            x.group_id = GroupId(s(g));
            let mut t = OffsetFetchRequestTopics::default();
            t.name = TopicName(s("t"));
            t.partition_indexes = vec![0, 1];
            x.topics = Some(vec![t]);
            x
        })
        .collect();
    let resp = c.offset_fetch(r, 8).await;
    encodes(&resp, 8);
    let got: Vec<(String, i32, i64)> = resp
        .groups
        .iter()
        .flat_map(|g| {
            assert_eq!(g.error_code, NONE);
            g.topics.iter().flat_map(move |t| {
                t.partitions
                    .iter()
                    .map(move |p| (g.group_id.0.to_string(), p.partition_index, p.committed_offset))
            })
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("solo".into(), 0, 101),
            ("solo".into(), 1, -1),
            ("nobody".into(), 0, -1),
            ("nobody".into(), 1, -1)
        ]
    );
}

#[tokio::test]
async fn offsets_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let c = open(dir.path());
        let r = commit(
            &c,
            commit_req("g", -1, "", &[("t", 0, 42, "hello"), ("u", 9, 7, "")]),
            8,
        )
        .await;
        assert_eq!(errors(&r), vec![NONE, NONE]);
        let r = commit(&c, commit_req("g", -1, "", &[("t", 0, 43, "again")]), 8).await;
        assert_eq!(errors(&r), vec![NONE]);
        c.shutdown().await;
        let closed = commit(&c, commit_req("g", -1, "", &[("t", 0, 44, "")]), 8).await;
        assert_eq!(
            errors(&closed),
            vec![code(ResponseError::CoordinatorNotAvailable)]
        );
    }
    {
        let c = open(dir.path());
        assert_eq!(
            fetch_v7(&c, "g", None).await,
            vec![row("t", 0, 43, 7, "again"), row("u", 9, 7, 7, "")]
        );
        assert_eq!(state(&c, "g"), "Empty");
        let stats = c.offset_log_stats();
        assert_eq!((stats.log_entries, stats.live_offsets), (3, 2));
        // No clean shutdown this time: every commit was synced already.
        let r = commit(&c, commit_req("g", -1, "", &[("u", 9, 8, "")]), 8).await;
        assert_eq!(errors(&r), vec![NONE]);
    }
    let c = open(dir.path());
    assert_eq!(
        fetch_v7(&c, "g", None).await,
        vec![row("t", 0, 43, 7, "again"), row("u", 9, 8, 7, "")]
    );
}

async fn delete_groups(c: &GroupCoordinator, groups: &[&str]) -> Vec<(String, i16)> {
    let mut r = DeleteGroupsRequest::default();
    r.groups_names = groups.iter().map(|g| GroupId(s(g))).collect();
    let resp = c.delete_groups(r, 2).await;
    encodes(&resp, 2);
    resp.results
        .iter()
        .map(|r| (r.group_id.0.to_string(), r.error_code))
        .collect()
}

#[tokio::test]
async fn deleting_groups_and_topics_removes_their_offsets_durably() {
    let dir = tempfile::tempdir().unwrap();
    {
        let c = open(dir.path());
        for g in ["g1", "g2"] {
            let r = commit(
                &c,
                commit_req(g, -1, "", &[("t", 0, 1, ""), ("gone", 0, 2, "")]),
                8,
            )
            .await;
            assert_eq!(errors(&r), vec![NONE, NONE]);
        }
        let (a, _) = form_group(&c, "busy").await;
        let r = commit(&c, commit_req("busy", 2, &a, &[("t", 0, 3, "")]), 8).await;
        assert_eq!(errors(&r), vec![NONE]);
        assert_eq!(
            delete_groups(&c, &["g1", "busy", "never"]).await,
            vec![
                ("g1".into(), NONE),
                ("busy".into(), code(ResponseError::NonEmptyGroup)),
                ("never".into(), code(ResponseError::GroupIdNotFound)),
            ]
        );
        assert!(fetch_v7(&c, "g1", None).await.is_empty());
        assert_eq!(state(&c, "g1"), "Dead");
        assert_eq!(fetch_v7(&c, "busy", None).await, vec![row("t", 0, 3, 7, "")]);
        c.delete_topic_offsets("gone").await;
        assert_eq!(fetch_v7(&c, "g2", None).await, vec![row("t", 0, 1, 7, "")]);
        // A group can come back after deletion.
        let r = commit(&c, commit_req("g1", -1, "", &[("t", 5, 50, "")]), 8).await;
        assert_eq!(errors(&r), vec![NONE]);
    }
    let c = open(dir.path());
    assert_eq!(fetch_v7(&c, "g1", None).await, vec![row("t", 5, 50, 7, "")]);
    assert_eq!(fetch_v7(&c, "g2", None).await, vec![row("t", 0, 1, 7, "")]);
    assert_eq!(fetch_v7(&c, "busy", None).await, vec![row("t", 0, 3, 7, "")]);
    assert_eq!(c.offset_log_stats().live_offsets, 3);
}

/// One commit of `partitions` partitions of topic `t` at `offset`.
fn wide_commit(group: &str, partitions: i32, offset: i64) -> OffsetCommitRequest {
    let parts: Vec<(&str, i32, i64, &str)> = (0..partitions).map(|p| ("t", p, offset, "m")).collect();
    commit_req(group, -1, "", &parts)
}

fn offsets_dir_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn compaction_on_open_keeps_only_live_values() {
    let dir = tempfile::tempdir().unwrap();
    let before;
    {
        let mut cfg = config(dir.path());
        cfg.compact_min_dead_entries = u64::MAX;
        let c = GroupCoordinator::open(cfg, pool()).unwrap();
        for round in 0..4 {
            let r = commit(&c, wide_commit("g", 500, round), 8).await;
            assert!(errors(&r).iter().all(|&e| e == NONE));
        }
        let r = commit(&c, wide_commit("doomed", 100, 1), 8).await;
        assert!(errors(&r).iter().all(|&e| e == NONE));
        assert_eq!(
            delete_groups(&c, &["doomed"]).await,
            vec![("doomed".into(), NONE)]
        );
        before = c.offset_log_stats();
        assert_eq!(before.log_entries, 4 * 500 + 100 + 1);
        assert_eq!(before.live_offsets, 500);
        assert_eq!(before.compactions, 0);
        c.shutdown().await;
    }
    let mut cfg = config(dir.path());
    cfg.compact_min_dead_entries = 1000;
    let c = GroupCoordinator::open(cfg.clone(), pool()).unwrap();
    let after = c.offset_log_stats();
    assert_eq!(after.compactions, 1);
    assert_eq!(after.log_entries, 500);
    assert_eq!(after.live_offsets, 500);
    assert!(after.log_bytes * 4 < before.log_bytes, "{after:?} vs {before:?}");
    assert_eq!(offsets_dir_names(dir.path()), vec!["offsets".to_string()]);
    let all = fetch_v7(&c, "g", None).await;
    assert_eq!(all.len(), 500);
    assert!(all
        .iter()
        .enumerate()
        .all(|(i, r)| *r == row("t", i as i32, 3, 7, "m")));
    assert!(fetch_v7(&c, "doomed", None).await.is_empty());
    // The compacted log takes appends and replays like any other.
    let r = commit(&c, commit_req("g", -1, "", &[("t", 0, 99, "")]), 8).await;
    assert_eq!(errors(&r), vec![NONE]);
    c.shutdown().await;
    drop(c);
    let c = GroupCoordinator::open(cfg, pool()).unwrap();
    let again = c.offset_log_stats();
    assert_eq!(
        (again.compactions, again.log_entries, again.live_offsets),
        (0, 501, 500)
    );
    assert_eq!(
        fetch_v7(&c, "g", Some(&[("t", &[0, 1])])).await,
        vec![row("t", 0, 99, 7, ""), row("t", 1, 3, 7, "m")]
    );
}

#[tokio::test]
async fn an_interrupted_compaction_is_finished_or_discarded_at_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let c = open(dir.path());
        let r = commit(&c, commit_req("g", -1, "", &[("t", 0, 7, "")]), 8).await;
        assert_eq!(errors(&r), vec![NONE]);
        c.shutdown().await;
    }
    // Crash after writing the new log, before the swap: it is discarded.
    std::fs::create_dir_all(dir.path().join("offsets.compacting")).unwrap();
    std::fs::write(dir.path().join("offsets.compacting/junk"), b"x").unwrap();
    {
        let c = open(dir.path());
        assert_eq!(fetch_v7(&c, "g", None).await, vec![row("t", 0, 7, 7, "")]);
        c.shutdown().await;
    }
    assert_eq!(offsets_dir_names(dir.path()), vec!["offsets".to_string()]);
    // Crash between the two renames: the old log is put back.
    std::fs::rename(dir.path().join("offsets"), dir.path().join("offsets.old")).unwrap();
    let c = open(dir.path());
    assert_eq!(fetch_v7(&c, "g", None).await, vec![row("t", 0, 7, 7, "")]);
    assert_eq!(offsets_dir_names(dir.path()), vec!["offsets".to_string()]);
}

#[tokio::test]
async fn the_log_is_compacted_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.compact_min_dead_entries = 200;
    let c = GroupCoordinator::open(cfg.clone(), pool()).unwrap();
    for round in 0..3 {
        let r = commit(&c, wide_commit("g", 100, round), 8).await;
        assert!(errors(&r).iter().all(|&e| e == NONE));
    }
    // 300 entries, 100 live: the third commit started a compaction.
    for _ in 0..2000 {
        if c.offset_log_stats().compactions > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let stats = c.offset_log_stats();
    assert_eq!(
        (stats.compactions, stats.log_entries, stats.live_offsets),
        (1, 100, 100)
    );
    let r = commit(&c, commit_req("g", -1, "", &[("t", 1, 1000, "")]), 8).await;
    assert_eq!(errors(&r), vec![NONE]);
    drop(c);
    let c = GroupCoordinator::open(cfg, pool()).unwrap();
    let all = fetch_v7(&c, "g", None).await;
    assert_eq!(all.len(), 100);
    assert_eq!(all[0], row("t", 0, 2, 7, "m"));
    assert_eq!(all[1], row("t", 1, 1000, 7, ""));
    assert_eq!(c.offset_log_stats().log_entries, 101);
}

// ---- describe / list -------------------------------------------------------

fn list(
    c: &GroupCoordinator,
    version: i16,
    states: &[&str],
    types: &[&str],
) -> Vec<(String, String, String)> {
    let mut r = ListGroupsRequest::default();
    r.states_filter = states.iter().map(|x| s(x)).collect();
    r.types_filter = types.iter().map(|x| s(x)).collect();
    let resp = c.list_groups(r, version);
    encodes(&resp, version);
    assert_eq!(resp.error_code, NONE);
    resp.groups
        .iter()
        .map(|g| {
            (
                g.group_id.0.to_string(),
                g.protocol_type.to_string(),
                g.group_state.to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn describe_and_list_show_states() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path());
    form_group(&c, "stable").await;
    let r = commit(&c, commit_req("offsets-only", -1, "", &[("t", 0, 1, "")]), 8).await;
    assert_eq!(errors(&r), vec![NONE]);
    // A group stuck in PreparingRebalance (its member has not rejoined).
    let (a, _b) = form_group(&c, "preparing").await;
    let _waiting = spawn_join(
        &c,
        join_req("preparing", &a, &[("range", b"changed")]),
        5,
        "client-a",
    );
    wait_state(&c, "preparing", GroupState::PreparingRebalance).await;
    // A group in CompletingRebalance (joined, not synced).
    let x = new_member_id(&c, "completing", "client-x").await;
    join(&c, join_req("completing", &x, &[("range", b"mx")]), 5, "client-x").await;

    assert_eq!(
        list(&c, 4, &[], &[]),
        vec![
            (
                "completing".into(),
                "consumer".into(),
                "CompletingRebalance".into()
            ),
            ("offsets-only".into(), "".into(), "Empty".into()),
            ("preparing".into(), "consumer".into(), "PreparingRebalance".into()),
            ("stable".into(), "consumer".into(), "Stable".into()),
        ]
    );
    assert_eq!(
        list(&c, 4, &["stable", "EMPTY"], &[]),
        vec![
            ("offsets-only".into(), "".into(), "Empty".into()),
            ("stable".into(), "consumer".into(), "Stable".into()),
        ]
    );
    assert_eq!(list(&c, 5, &[], &["consumer"]), vec![]);
    assert_eq!(list(&c, 5, &["Stable"], &["Classic"]).len(), 1);
    assert_eq!(list(&c, 0, &[], &[]).len(), 4);

    let d = describe(&c, "completing", 5);
    assert_eq!(d.group_state, s("CompletingRebalance"));
    assert_eq!(d.protocol_data, s(""), "protocol shown only when stable");
    assert_eq!(d.members.len(), 1);
    assert_eq!(d.members[0].member_id, s(&x));
    assert_eq!(d.members[0].client_id, s("client-x"));
    assert!(d.members[0].member_metadata.is_empty());
    let d = describe(&c, "offsets-only", 5);
    assert_eq!(
        (d.error_code, d.group_state.to_string(), d.members.len()),
        (NONE, "Empty".into(), 0)
    );
    let d = describe(&c, "unknown", 5);
    assert_eq!((d.error_code, d.group_state.to_string()), (NONE, "Dead".into()));
    let d = describe(&c, "unknown", 6);
    assert_eq!(d.error_code, code(ResponseError::GroupIdNotFound));
    let mut r = DescribeGroupsRequest::default();
    r.groups = vec![GroupId(s("stable"))];
    r.include_authorized_operations = true;
    let resp = c.describe_groups(r, 3);
    encodes(&resp, 3);
    assert_eq!(
        resp.groups[0].authorized_operations,
        (1 << 3) | (1 << 6) | (1 << 8)
    );
}

#[tokio::test]
async fn shutdown_answers_waiting_requests() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path());
    let (a, b) = form_group(&c, "g").await;
    let waiting = spawn_join(&c, join_req("g", &b, &[("range", b"new")]), 5, "client-b");
    wait_state(&c, "g", GroupState::PreparingRebalance).await;
    c.shutdown().await;
    let r = waiting.await.unwrap();
    assert_eq!(r.error_code, code(ResponseError::CoordinatorNotAvailable));
    assert_eq!(
        heartbeat(&c, "g", &a, 2).await,
        code(ResponseError::CoordinatorNotAvailable)
    );
}

#[tokio::test(start_paused = true)]
async fn every_version_encodes() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path());
    for version in 0..=9 {
        let group = format!("g{version}");
        let first = join(&c, join_req(&group, "", &[("range", b"m")]), version, "v").await;
        let member = if version >= 4 {
            assert_eq!(first.error_code, code(ResponseError::MemberIdRequired));
            let r = join(
                &c,
                join_req(&group, &first.member_id, &[("range", b"m")]),
                version,
                "v",
            )
            .await;
            r.member_id.to_string()
        } else {
            first.member_id.to_string()
        };
        let d = describe(&c, &group, 6);
        assert_eq!(d.group_state, s("CompletingRebalance"), "v{version}");
        let sv = version.min(5);
        let r = sync(&c, sync_req(&group, &member, 1, &[(&member, b"x")]), sv).await;
        assert_eq!(
            (r.error_code, r.assignment.clone()),
            (NONE, Bytes::from_static(b"x")),
            "v{version}"
        );
        for v in 0..=4 {
            let mut h = HeartbeatRequest::default();
            h.group_id = GroupId(s(&group));
            h.member_id = s(&member);
            h.generation_id = 1;
            let resp = c.heartbeat(h, v).await;
            encodes(&resp, v);
            assert_eq!(resp.error_code, NONE);
        }
    }
    for v in 0..=6 {
        describe(&c, "g9", v);
        describe(&c, "nothing", v);
    }
    for v in 0..=5 {
        list(&c, v, &[], &[]);
    }
}

/// The server spawns handlers on a multi-threaded runtime.
#[tokio::test]
async fn handler_futures_are_send() {
    fn send<T: Send>(_: &T) {}
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path());
    let info = client("x");
    send(&c.join_group(JoinGroupRequest::default(), 5, &info));
    send(&c.sync_group(SyncGroupRequest::default(), 5));
    send(&c.heartbeat(HeartbeatRequest::default(), 4));
    send(&c.leave_group(LeaveGroupRequest::default(), 5));
    send(&c.offset_commit(OffsetCommitRequest::default(), 9, &exists));
    send(&c.offset_fetch(OffsetFetchRequest::default(), 9));
    send(&c.delete_groups(DeleteGroupsRequest::default(), 2));
    send(&c.delete_topic_offsets("t"));
    send(&c.shutdown());
    fn shared<T: Send + Sync + Clone + 'static>(_: &T) {}
    shared(&c);
}

#[tokio::test]
async fn offsets_of_groups_without_members_expire_durably() {
    let dir = tempfile::tempdir().unwrap();
    let day_ms = 24 * 3600 * 1000;
    let committed_at = {
        let c = open(dir.path());
        // A standalone group, and a consumer group with members.
        let r = commit(&c, commit_req("idle", -1, "", &[("t", 0, 10, "")]), 8).await;
        assert_eq!(errors(&r), vec![NONE]);
        let (a, _) = form_group(&c, "busy").await;
        let r = commit(&c, commit_req("busy", 2, &a, &[("t", 0, 20, "")]), 8).await;
        assert_eq!(errors(&r), vec![NONE]);
        let at = super::offsets::now_ms();

        // Not yet: the newest commit is younger than the 7-day retention.
        assert!(c.expire_offsets_at(at + 6 * day_ms).await.is_empty());
        assert_eq!(fetch_v7(&c, "idle", None).await, vec![row("t", 0, 10, 7, "")]);

        // Past the retention: the group without members loses its offsets,
        // the group with members keeps them.
        assert_eq!(
            c.expire_offsets_at(at + 8 * day_ms).await,
            vec!["idle".to_string()]
        );
        assert!(fetch_v7(&c, "idle", None).await.is_empty());
        assert_eq!(state(&c, "idle"), "Dead");
        assert_eq!(fetch_v7(&c, "busy", None).await, vec![row("t", 0, 20, 7, "")]);
        c.shutdown().await;
        at
    };
    // The expiry is in the log: gone after a reopen too, and the group
    // with members (none now, after the restart) expires in its turn.
    let c = open(dir.path());
    assert!(fetch_v7(&c, "idle", None).await.is_empty());
    assert_eq!(fetch_v7(&c, "busy", None).await, vec![row("t", 0, 20, 7, "")]);
    assert_eq!(
        c.expire_offsets_at(committed_at + 8 * day_ms).await,
        vec!["busy".to_string()]
    );
    assert_eq!(c.offset_log_stats().live_offsets, 0);

    // Retention off: nothing ever expires.
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.offsets_retention = None;
    let c = GroupCoordinator::open(config, pool()).unwrap();
    let r = commit(&c, commit_req("kept", -1, "", &[("t", 0, 1, "")]), 8).await;
    assert_eq!(errors(&r), vec![NONE]);
    assert!(c.expire_offsets_at(i64::MAX).await.is_empty());
    assert_eq!(fetch_v7(&c, "kept", None).await, vec![row("t", 0, 1, 7, "")]);
}
