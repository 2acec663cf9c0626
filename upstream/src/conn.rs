//! One pipelined connection to one upstream broker.
//!
//! Requests are encoded by the caller and handed to a writer task that owns
//! the socket's write half, so a caller that is cancelled (its future
//! dropped) never leaves half a frame on the wire: the frame is written
//! whole or the connection is closed. A reader task matches answers to
//! requests by correlation id; many requests are in flight at once and
//! Kafka answers them in order.
//!
//! A connection that fails in any way (socket error, an answer nobody asked
//! for, a request that timed out) is closed at once and every request in
//! flight on it fails with the same [`UpstreamError`]; the owner
//! ([`crate::Cluster`]) opens a new one for the next request. Requests that
//! would push the bytes in flight past `max_bytes_in_flight` wait for room
//! (a Fetch counts its `max_bytes` for the answer it will get), and
//! Produce requests wait for room in the connection's [`crate::window`].
//! A broker's throttle time (KIP-219) holds back further requests to it
//! until it ends.
//!
//! A connection to a cluster with `tls:` runs over TLS, and one with
//! `sasl:` authenticates after ApiVersions ([`crate::security`]). When
//! the broker grants a session of limited life (KIP-368), the writer
//! re-authenticates in band before it ends: it sends no request of its
//! own meanwhile, and what callers hand it waits in its queue.
//!
//! Produce with `acks=0` gets no answer from Kafka and is not supported.

use std::any::Any;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, FetchRequest, ProduceRequest, RequestHeader,
    ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::error::{Result, UpstreamError};
use crate::metrics::ClusterMetrics;
use crate::security::{self, Exchange, Security};
use crate::splice;
use crate::stream::{Reader, Stream, Writer};
use crate::throttle::Throttled;
use crate::versions::Versions;
use crate::window::{Slot, Window};

/// Largest answer accepted from a broker. Fetch answers are bounded by the
/// request's `max_bytes` well below this; a length beyond it means the
/// stream is not Kafka.
const MAX_RESPONSE_BYTES: usize = 1 << 30;

/// Requests queued for the writer before callers wait.
const QUEUE: usize = 256;

/// Bytes counted for the answer of a request that is not a Fetch.
const SMALL_RESPONSE: usize = 64 << 10;

/// How to open and use connections.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Sent in every request header.
    pub client_id: String,
    /// TCP connect plus the ApiVersions exchange.
    pub connect_timeout: Duration,
    /// From handing a request to the connection until its answer; past it
    /// the connection is closed.
    pub request_timeout: Duration,
    /// Request bytes plus expected answer bytes in flight at once.
    pub max_bytes_in_flight: usize,
    /// TLS and SASL.
    pub security: Security,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            client_id: "strait".to_owned(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_bytes_in_flight: 64 << 20,
            security: Security::default(),
        }
    }
}

/// A pipelined connection to one broker. Cheap to clone; the socket closes
/// when the last clone is dropped or the connection fails.
#[derive(Debug, Clone)]
pub struct Connection {
    shared: Arc<Shared>,
    tx: mpsc::Sender<Outgoing>,
}

#[derive(Debug)]
struct Shared {
    /// `cluster broker N at host:port`, for messages.
    broker: String,
    versions: Versions,
    client_id: StrBytes,
    request_timeout: Duration,
    next_id: AtomicI32,
    pending: Mutex<HashMap<i32, Pending>>,
    /// Set once, when the connection fails; every later request gets it.
    failed: OnceLock<UpstreamError>,
    closed: watch::Sender<bool>,
    throttled_until: Mutex<Option<Instant>>,
    budget: Arc<Semaphore>,
    max_budget: usize,
    /// Produce requests unanswered at once (see [`crate::window`]).
    window: Arc<Window>,
    /// The cluster's metrics, for connections a [`crate::Cluster`] opened.
    metrics: Option<Arc<ClusterMetrics>>,
    /// For re-authentication.
    security: Security,
}

#[derive(Debug)]
struct Pending {
    reply: oneshot::Sender<Result<Bytes>>,
    _permit: OwnedSemaphorePermit,
    /// A Produce's place in the window.
    slot: Option<Slot>,
}

#[derive(Debug)]
struct Outgoing {
    correlation_id: i32,
    /// The frame, in chunks (see [`crate::splice`]).
    frame: Vec<Bytes>,
    pending: Pending,
}

impl Connection {
    /// Connects to `addr` and learns the broker's API versions. `broker`
    /// names it in messages (`nj broker 2 at kafka-nj-2:9092`).
    pub async fn connect(broker: String, addr: &str, options: &ConnectOptions) -> Result<Connection> {
        Connection::connect_metered(broker, addr, options, None).await
    }

    /// [`Connection::connect`], counted in a cluster's metrics.
    pub(crate) async fn connect_metered(
        broker: String,
        addr: &str,
        options: &ConnectOptions,
        metrics: Option<Arc<ClusterMetrics>>,
    ) -> Result<Connection> {
        let opened = tokio::time::timeout(options.connect_timeout, async {
            let tcp = TcpStream::connect(addr)
                .await
                .map_err(|e| connect_error(&broker, e.to_string()))?;
            tcp.set_nodelay(true)
                .map_err(|e| connect_error(&broker, e.to_string()))?;
            let mut stream = options.security.open(&broker, addr, tcp).await?;
            let versions = handshake(
                &broker,
                &mut stream,
                &options.client_id,
                options.security.uses_tls(),
            )
            .await?;
            let mut lifetime = None;
            if let Some(exchange) = options.security.exchange(&broker).await? {
                let name = options.security.mechanism().expect("an exchange has a mechanism");
                let mut raw = RawExchange {
                    stream: &mut stream,
                    broker: &broker,
                    client_id: &options.client_id,
                    next_id: 1,
                };
                lifetime = security::authenticate(&mut raw, &broker, &versions, exchange, name).await?;
            }
            Ok::<_, UpstreamError>((stream, versions, lifetime))
        })
        .await;
        let (stream, versions, lifetime) = match opened {
            Ok(opened) => opened?,
            Err(_) => {
                return Err(connect_error(
                    &broker,
                    format!(
                        "no connection and ApiVersions answer within {:?}",
                        options.connect_timeout
                    ),
                ))
            }
        };
        let (closed, _) = watch::channel(false);
        let max_budget = options.max_bytes_in_flight.clamp(1, Semaphore::MAX_PERMITS);
        let shared = Arc::new(Shared {
            broker,
            versions,
            client_id: StrBytes::from_string(options.client_id.clone()),
            request_timeout: options.request_timeout,
            next_id: AtomicI32::new(1),
            pending: Mutex::new(HashMap::new()),
            failed: OnceLock::new(),
            closed,
            throttled_until: Mutex::new(None),
            budget: Arc::new(Semaphore::new(max_budget)),
            max_budget,
            window: Arc::default(),
            metrics,
            security: options.security.clone(),
        });
        if let Some(metrics) = &shared.metrics {
            metrics.opened();
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        let (read, write) = stream.into_split();
        let reauthenticate = lifetime.map(|l| Instant::now() + security::reauthenticate_after(l));
        tokio::spawn(write_loop(shared.clone(), rx, write, reauthenticate));
        tokio::spawn(read_loop(shared.clone(), read));
        Ok(Connection { shared, tx })
    }

    /// The broker's name in messages.
    pub fn broker(&self) -> &str {
        &self.shared.broker
    }

    /// The versions chosen for this connection, API by API.
    pub fn versions(&self) -> &Versions {
        &self.shared.versions
    }

    /// The version requests of `api` are sent at on this connection.
    pub fn version(&self, api: ApiKey) -> Result<i16> {
        self.shared
            .versions
            .get(api)
            .map_err(|detail| UpstreamError::Unsupported {
                broker: self.shared.broker.clone(),
                api,
                detail,
            })
    }

    /// Whether the connection has failed (requests on it fail at once).
    pub fn is_failed(&self) -> bool {
        self.shared.failed.get().is_some() || self.tx.is_closed()
    }

    /// Request and expected answer bytes counted against
    /// `max_bytes_in_flight` now.
    pub fn bytes_in_flight(&self) -> usize {
        self.shared.max_budget - self.shared.budget.available_permits()
    }

    /// Sends `request` at the negotiated version and waits for its answer.
    pub async fn request<R>(&self, request: &R) -> Result<R::Response>
    where
        R: Request + Any,
        R::Response: Throttled,
    {
        let api = api_of::<R>();
        let version = self.version(api)?;
        self.request_at(request, version).await
    }

    /// Sends `request` at `version` (which must be one [`Connection::version`]
    /// allows; requests whose fields depend on the version are built for it).
    pub async fn request_at<R>(&self, request: &R, version: i16) -> Result<R::Response>
    where
        R: Request + Any,
        R::Response: Throttled,
    {
        self.send_at(request, version).await?.answer().await
    }

    /// Hands `request` (at the negotiated version) to the connection and
    /// returns once it is queued for the wire, before its answer: requests
    /// sent one after another from one task reach the broker in that order
    /// (Kafka handles a connection's requests in order, which an
    /// idempotent producer with several produces in flight relies on).
    pub async fn send<R>(&self, request: &R) -> Result<Answer<R>>
    where
        R: Request + Any,
        R::Response: Throttled,
    {
        let version = self.version(api_of::<R>())?;
        self.send_at(request, version).await
    }

    /// [`Connection::send`] at `version`.
    pub async fn send_at<R>(&self, request: &R, version: i16) -> Result<Answer<R>>
    where
        R: Request + Any,
        R::Response: Throttled,
    {
        let api = api_of::<R>();
        let sent_at = Instant::now();
        let correlation_id = self.shared.next_id.fetch_add(1, Ordering::Relaxed) & i32::MAX;
        let frame = self.shared.encode(api, version, correlation_id, request)?;
        let size = frame.iter().map(Bytes::len).sum::<usize>();
        let cost = (size + response_budget(request)).min(self.shared.max_budget);
        let timeout = self.shared.request_timeout;
        let sent = match tokio::time::timeout(
            timeout,
            self.send_frame(api, correlation_id, frame, size, cost),
        )
        .await
        {
            Ok(sent) => sent,
            // The frame never reached the writer: the connection is busy
            // (its bytes-in-flight budget is used up), not broken.
            Err(_) => Err(UpstreamError::TimedOut {
                broker: self.shared.broker.clone(),
                api,
                after: timeout,
            }),
        };
        if let Some(metrics) = &self.shared.metrics {
            match &sent {
                Ok(_) => metrics.sent(size),
                Err(_) => metrics.answered(api, sent_at.elapsed(), None),
            }
        }
        Ok(Answer {
            connection: self.clone(),
            api,
            version,
            answer: sent?,
            sent_at,
            request: PhantomData,
        })
    }

    /// Hands a frame to the writer once the budget has room; the receiver
    /// gets the answer frame.
    async fn send_frame(
        &self,
        api: ApiKey,
        correlation_id: i32,
        frame: Vec<Bytes>,
        size: usize,
        cost: usize,
    ) -> Result<oneshot::Receiver<Result<Bytes>>> {
        if let Some(failed) = self.shared.failed.get() {
            return Err(failed.clone());
        }
        let slot = match api {
            ApiKey::Produce => Some(self.shared.window.admit(size).await),
            _ => None,
        };
        let permit = self
            .shared
            .budget
            .clone()
            .acquire_many_owned(cost as u32)
            .await
            .map_err(|_| self.failure())?;
        let (reply, answer) = oneshot::channel();
        let outgoing = Outgoing {
            correlation_id,
            frame,
            pending: Pending {
                reply,
                _permit: permit,
                slot,
            },
        };
        self.tx.send(outgoing).await.map_err(|_| self.failure())?;
        Ok(answer)
    }

    fn failure(&self) -> UpstreamError {
        self.shared
            .failed
            .get()
            .cloned()
            .unwrap_or_else(|| UpstreamError::Disconnected {
                broker: self.shared.broker.clone(),
                reason: "connection closed".to_owned(),
            })
    }
}

/// The answer to come of a request that was sent.
#[derive(Debug)]
pub struct Answer<R> {
    connection: Connection,
    api: ApiKey,
    version: i16,
    answer: oneshot::Receiver<Result<Bytes>>,
    sent_at: Instant,
    request: PhantomData<fn() -> R>,
}

impl<R> Answer<R>
where
    R: Request,
    R::Response: Throttled,
{
    /// Waits for the answer (at most the request timeout; past it the
    /// connection is closed) and decodes it.
    pub async fn answer(self) -> Result<R::Response> {
        self.answer_after(Duration::ZERO).await
    }

    /// [`Answer::answer`] for a request the broker may hold for `wait`
    /// before it answers (a JoinGroup, for its rebalance timeout): waits
    /// that much longer than the request timeout.
    pub async fn answer_after(self, wait: Duration) -> Result<R::Response> {
        let shared = &self.connection.shared;
        let timeout = shared.request_timeout.saturating_add(wait);
        let frame = match tokio::time::timeout(timeout, self.answer).await {
            Ok(Ok(frame)) => frame,
            Ok(Err(_)) => Err(self.connection.failure()),
            Err(_) => {
                let error = UpstreamError::TimedOut {
                    broker: shared.broker.clone(),
                    api: self.api,
                    after: timeout,
                };
                shared.fail(error.clone());
                Err(error)
            }
        };
        if let Some(metrics) = &shared.metrics {
            let size = frame.as_ref().ok().map(|f| f.len() + 4);
            metrics.answered(self.api, self.sent_at.elapsed(), size);
        }
        let frame = frame?;
        let response = shared.decode::<R>(self.api, self.version, frame)?;
        let throttle = response.throttle_ms();
        if throttle > 0 {
            let until = Instant::now() + Duration::from_millis(throttle as u64);
            let mut throttled = shared.throttled_until.lock().expect("throttle lock");
            *throttled = Some(throttled.map_or(until, |t| t.max(until)));
        }
        Ok(response)
    }
}

impl Shared {
    /// The request's frame. A Produce's record batches are chunks of their
    /// own, not copies ([`crate::splice`]).
    fn encode<R: Request + Any>(
        &self,
        api: ApiKey,
        version: i16,
        correlation_id: i32,
        request: &R,
    ) -> Result<Vec<Bytes>> {
        let encode_error = |detail: String| UpstreamError::Encode { api, version, detail };
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(self.client_id.clone()));
        let header_version = R::header_version(version);
        if let Some(produce) = (request as &dyn Any).downcast_ref::<ProduceRequest>() {
            let mut head = BytesMut::with_capacity(256);
            head.put_i32(0);
            header
                .encode(&mut head, header_version)
                .map_err(|e| encode_error(e.to_string()))?;
            return splice::encode_frame(head, produce.clone(), version, version >= 9).map_err(encode_error);
        }
        let size = header
            .compute_size(header_version)
            .and_then(|h| Ok(h + request.compute_size(version)?))
            .map_err(|e| encode_error(e.to_string()))?;
        let length = i32::try_from(size).map_err(|_| encode_error(format!("{size} bytes")))?;
        let mut buf = BytesMut::with_capacity(4 + size);
        buf.put_i32(length);
        header
            .encode(&mut buf, header_version)
            .and_then(|()| request.encode(&mut buf, version))
            .map_err(|e| encode_error(e.to_string()))?;
        Ok(vec![buf.freeze()])
    }

    fn decode<R>(&self, api: ApiKey, version: i16, mut frame: Bytes) -> Result<R::Response>
    where
        R: Request,
    {
        let malformed = |detail: String| UpstreamError::Malformed {
            broker: self.broker.clone(),
            api,
            detail,
        };
        ResponseHeader::decode(
            &mut frame,
            <R::Response as HeaderVersion>::header_version(version),
        )
        .map_err(|e| malformed(format!("header: {e}")))?;
        R::Response::decode(&mut frame, version).map_err(|e| malformed(e.to_string()))
    }

    /// Records a request as in flight, unless the connection has failed
    /// (then the request fails at once). Under the same lock as [`fail`],
    /// so no request is left waiting on a dead connection.
    fn register(&self, correlation_id: i32, pending: Pending) -> bool {
        let mut map = self.pending.lock().expect("pending lock");
        if let Some(failed) = self.failed.get() {
            let _ = pending.reply.send(Err(failed.clone()));
            return false;
        }
        map.insert(correlation_id, pending);
        true
    }

    /// Closes the connection: the first error is kept and every request in
    /// flight fails with it.
    fn fail(&self, error: UpstreamError) {
        let (error, drained) = {
            let mut map = self.pending.lock().expect("pending lock");
            let first = self.failed.get().is_none();
            let error = self.failed.get_or_init(|| error).clone();
            if first {
                if let Some(metrics) = &self.metrics {
                    metrics.closed();
                }
            }
            (error, std::mem::take(&mut *map))
        };
        if !drained.is_empty() {
            tracing::debug!(broker = %self.broker, in_flight = drained.len(), %error, "upstream connection failed");
        }
        for (_, pending) in drained {
            let _ = pending.reply.send(Err(error.clone()));
        }
        self.closed.send_replace(true);
    }

    fn disconnected(&self, reason: impl Into<String>) -> UpstreamError {
        UpstreamError::Disconnected {
            broker: self.broker.clone(),
            reason: reason.into(),
        }
    }
}

async fn write_loop(
    shared: Arc<Shared>,
    mut rx: mpsc::Receiver<Outgoing>,
    mut write: Writer,
    mut reauthenticate: Option<Instant>,
) {
    let mut closed = shared.closed.subscribe();
    loop {
        let due = async {
            match reauthenticate {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let next = tokio::select! {
            biased;
            _ = closed.wait_for(|c| *c) => break,
            () = due => None,
            outgoing = rx.recv() => match outgoing {
                Some(outgoing) => Some(outgoing),
                None => break,
            },
        };
        let Some(outgoing) = next else {
            match reauthenticated(&shared, &mut write).await {
                Ok(lifetime) => {
                    reauthenticate = lifetime.map(|l| Instant::now() + security::reauthenticate_after(l));
                    continue;
                }
                Err(e) => {
                    tracing::warn!(broker = %shared.broker, error = %e, "re-authentication failed; the connection closes");
                    shared.fail(e);
                    break;
                }
            }
        };
        if !shared.register(outgoing.correlation_id, outgoing.pending) {
            continue;
        }
        let throttled = *shared.throttled_until.lock().expect("throttle lock");
        let written = async {
            if let Some(until) = throttled {
                tokio::time::sleep_until(until).await;
            }
            splice::write_chunks(&mut write, &outgoing.frame, shared.request_timeout).await
        };
        let result = tokio::select! {
            biased;
            _ = closed.wait_for(|c| *c) => break,
            result = written => result,
        };
        if let Err(e) = result {
            shared.fail(shared.disconnected(format!("write failed: {e}")));
            break;
        }
    }
    // Whatever ended the loop, nothing more goes out on this connection.
    shared.fail(shared.disconnected("connection closed"));
}

/// Re-authenticates on the writer's own turn (KIP-368): the broker
/// answers what came before first, and nothing else is sent until the
/// exchange ends. The new session's lifetime, if limited.
async fn reauthenticated(shared: &Arc<Shared>, write: &mut Writer) -> Result<Option<Duration>> {
    let Some(exchange) = shared.security.exchange(&shared.broker).await? else {
        return Ok(None);
    };
    let name = shared.security.mechanism().expect("an exchange has a mechanism");
    let lifetime = security::authenticate(
        &mut InBand { shared, write },
        &shared.broker,
        &shared.versions,
        exchange,
        name,
    )
    .await?;
    tracing::debug!(broker = %shared.broker, ?lifetime, "re-authenticated");
    Ok(lifetime)
}

/// SASL requests sent by the writer on an open connection, their answers
/// matched by the reader as any other.
struct InBand<'a> {
    shared: &'a Arc<Shared>,
    write: &'a mut Writer,
}

impl Exchange for InBand<'_> {
    async fn round_trip<R: Request + Any>(&mut self, request: &R, version: i16) -> Result<R::Response> {
        let api = api_of::<R>();
        let shared = self.shared;
        let correlation_id = shared.next_id.fetch_add(1, Ordering::Relaxed) & i32::MAX;
        let frame = shared.encode(api, version, correlation_id, request)?;
        let permit = shared
            .budget
            .clone()
            .acquire_many_owned(0)
            .await
            .map_err(|_| shared.disconnected("connection closed"))?;
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            reply,
            _permit: permit,
            slot: None,
        };
        if !shared.register(correlation_id, pending) {
            return Err(shared
                .failed
                .get()
                .cloned()
                .unwrap_or_else(|| shared.disconnected("connection closed")));
        }
        splice::write_chunks(self.write, &frame, shared.request_timeout)
            .await
            .map_err(|e| shared.disconnected(format!("write failed: {e}")))?;
        let frame = match tokio::time::timeout(shared.request_timeout, answer).await {
            Ok(Ok(frame)) => frame?,
            Ok(Err(_)) => return Err(shared.disconnected("connection closed")),
            Err(_) => {
                return Err(UpstreamError::TimedOut {
                    broker: shared.broker.clone(),
                    api,
                    after: shared.request_timeout,
                })
            }
        };
        shared.decode::<R>(api, version, frame)
    }
}

/// SASL requests on a connection being opened, on the stream itself
/// (nothing else is in flight yet).
struct RawExchange<'a> {
    stream: &'a mut Stream,
    broker: &'a str,
    client_id: &'a str,
    next_id: i32,
}

impl Exchange for RawExchange<'_> {
    async fn round_trip<R: Request + Any>(&mut self, request: &R, version: i16) -> Result<R::Response> {
        let api = api_of::<R>();
        self.next_id += 1;
        let body = raw_round_trip(
            self.stream,
            self.broker,
            self.client_id,
            self.next_id,
            request,
            version,
        )
        .await?;
        let mut body = body;
        let malformed = |detail: String| UpstreamError::Malformed {
            broker: self.broker.to_owned(),
            api,
            detail,
        };
        ResponseHeader::decode(&mut body, <R::Response as HeaderVersion>::header_version(version))
            .map_err(|e| malformed(format!("header: {e}")))?;
        R::Response::decode(&mut body, version).map_err(|e| malformed(e.to_string()))
    }
}

async fn read_loop(shared: Arc<Shared>, mut read: Reader) {
    let mut closed = shared.closed.subscribe();
    loop {
        let frame = tokio::select! {
            biased;
            _ = closed.wait_for(|c| *c) => return,
            frame = read_frame(&mut read) => frame,
        };
        let frame = match frame {
            Ok(frame) => frame,
            Err(reason) => {
                shared.fail(shared.disconnected(reason));
                return;
            }
        };
        let correlation_id = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
        let pending = shared
            .pending
            .lock()
            .expect("pending lock")
            .remove(&correlation_id);
        match pending {
            Some(mut pending) => {
                if let Some(slot) = pending.slot.take() {
                    slot.answered();
                }
                let _ = pending.reply.send(Ok(frame));
            }
            None => {
                shared.fail(shared.disconnected(format!(
                    "answer with correlation id {correlation_id}, which no request in flight has"
                )));
                return;
            }
        }
    }
}

/// Reads one answer frame (at least its 4-byte correlation id).
async fn read_frame(read: &mut Reader) -> std::result::Result<Bytes, String> {
    let size = match read.read_i32().await {
        Ok(size) => size,
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err("the broker closed the connection".to_owned())
        }
        Err(e) => return Err(format!("read failed: {e}")),
    };
    let size = usize::try_from(size)
        .ok()
        .filter(|s| (4..=MAX_RESPONSE_BYTES).contains(s))
        .ok_or_else(|| format!("answer length {size} is not a Kafka frame"))?;
    // Filled as it arrives rather than zeroed first: a Fetch answer is
    // megabytes, and writing it twice shows in a consumer's round trip.
    let mut body = BytesMut::with_capacity(size);
    while body.len() < size {
        let want = size - body.len();
        let mut rest = (&mut body).limit(want);
        match read.read_buf(&mut rest).await {
            Ok(0) => return Err("the broker closed the connection inside an answer".to_owned()),
            Ok(_) => {}
            Err(e) => return Err(format!("read failed inside an answer: {e}")),
        }
    }
    Ok(body.freeze())
}

/// One request on a connection being opened, written and answered on the
/// stream itself; the answer's frame after its length (correlation id
/// first).
async fn raw_round_trip<S, R>(
    stream: &mut S,
    broker: &str,
    client_id: &str,
    correlation_id: i32,
    request: &R,
    version: i16,
) -> Result<Bytes>
where
    S: AsyncRead + AsyncWrite + Unpin,
    R: Request,
{
    let api = api_of::<R>();
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client_id.to_owned())));
    let mut body = BytesMut::new();
    let encoded = header
        .encode(&mut body, R::header_version(version))
        .and_then(|()| request.encode(&mut body, version));
    if let Err(e) = encoded {
        return Err(UpstreamError::Encode {
            api,
            version,
            detail: e.to_string(),
        });
    }
    let io = |e: std::io::Error| connect_error(broker, format!("{api:?} exchange failed: {e}"));
    stream.write_i32(body.len() as i32).await.map_err(io)?;
    stream.write_all(&body).await.map_err(io)?;
    stream.flush().await.map_err(io)?;
    let size = stream.read_i32().await.map_err(io)?;
    let size = usize::try_from(size)
        .ok()
        .filter(|s| (4..=1 << 20).contains(s))
        .ok_or_else(|| {
            connect_error(
                broker,
                format!("{api:?} answer length {size} is not a Kafka frame"),
            )
        })?;
    let mut frame = BytesMut::zeroed(size);
    stream.read_exact(&mut frame).await.map_err(io)?;
    let frame = frame.freeze();
    let answered = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
    if answered != correlation_id {
        return Err(connect_error(
            broker,
            format!("{api:?} answered with correlation id {answered}, not {correlation_id}"),
        ));
    }
    Ok(frame)
}

/// The ApiVersions exchange on a fresh connection, on the stream itself
/// (nothing else is in flight yet). v3 first; a broker that does not speak
/// it answers in v0 with its version list (KIP-511), which is all we need.
/// `tls` says whether the stream is TLS, for the hint when the listener
/// answers in another tongue.
async fn handshake(broker: &str, stream: &mut Stream, client_id: &str, tls: bool) -> Result<Versions> {
    let request = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("strait"))
        .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
    let version = 3;
    let frame = match raw_round_trip(stream, broker, client_id, 0, &request, version).await {
        Ok(frame) => frame,
        Err(UpstreamError::Connect { broker, reason }) if !tls => {
            return Err(UpstreamError::Connect {
                broker,
                reason: format!("{reason} (if this listener wants TLS, set the cluster's `tls:`)"),
            })
        }
        // TLS 1.3 ends the handshake before the server checks the client's
        // certificate: its verdict comes as an alert on the first read, or,
        // when the server has already closed the socket, as a broken pipe or
        // reset on the first write.
        Err(UpstreamError::Connect { broker, reason }) if refused_after_handshake(&reason) => {
            return Err(UpstreamError::Security {
                broker,
                reason: format!(
                    "the broker refused the TLS session: {reason} (does the listener want a client \
                     certificate? set tls.cert_file and tls.key_file)"
                ),
            })
        }
        Err(e) => return Err(e),
    };
    let malformed = |detail: String| UpstreamError::Malformed {
        broker: broker.to_owned(),
        api: ApiKey::ApiVersions,
        detail,
    };
    // ApiVersions answers always use response header v0: the correlation id.
    let body = frame.slice(4..);
    let answer = match ApiVersionsResponse::decode(&mut body.clone(), version) {
        Ok(answer) if answer.error_code == 0 => answer,
        _ => ApiVersionsResponse::decode(&mut body.clone(), 0).map_err(|e| malformed(e.to_string()))?,
    };
    if answer.api_keys.is_empty() {
        return Err(malformed(format!(
            "no API versions listed (error code {})",
            answer.error_code
        )));
    }
    Ok(Versions::negotiate(&answer.api_keys))
}

/// Whether the first exchange on a fresh TLS session failed the way a
/// server that refused the session after its handshake makes it fail.
fn refused_after_handshake(reason: &str) -> bool {
    [
        "received fatal alert",
        "Broken pipe",
        "Connection reset",
        "early eof",
    ]
    .iter()
    .any(|sign| reason.contains(sign))
}

fn connect_error(broker: &str, reason: String) -> UpstreamError {
    UpstreamError::Connect {
        broker: broker.to_owned(),
        reason,
    }
}

fn api_of<R: Request>() -> ApiKey {
    ApiKey::try_from(R::KEY).expect("kafka-protocol requests have known keys")
}

/// Bytes to reserve for the answer: what a Fetch can bring back (its
/// `max_bytes`, or less when its partitions' limits add up to less), a
/// small allowance for everything else.
fn response_budget(request: &dyn Any) -> usize {
    match request.downcast_ref::<FetchRequest>() {
        Some(fetch) => {
            let partitions: usize = fetch
                .topics
                .iter()
                .flat_map(|t| &t.partitions)
                .map(|p| p.partition_max_bytes.max(0) as usize)
                .sum();
            if fetch.max_bytes > 0 {
                partitions.min(fetch.max_bytes as usize)
            } else {
                partitions
            }
        }
        None => SMALL_RESPONSE,
    }
}
