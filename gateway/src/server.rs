//! The client-facing server: accepts connections on every listener (at
//! most `max_connections` at once across them), terminates TLS, lets each
//! request through the listener's login gate ([`crate::auth`]), reads
//! frames, answers each request in order, and shuts down gracefully.
//!
//! A connection's requests are read while earlier ones are in flight and
//! answered in request order; the router decides what runs concurrently
//! (requests to upstream clusters) and what one at a time (the local
//! broker's part of each request, as a Kafka broker handles a connection). Anything
//! wrong with the bytes of one connection (a malformed or oversized frame,
//! an unknown API) closes that connection with a log line naming the client;
//! no other connection notices.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesOrdered, StreamExt};
use kafka_protocol::messages::{ApiKey, ResponseKind};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tracing::Instrument;

use crate::auth::authorize::{Amend, Authorizer, Verdict};
use crate::auth::{Admission, Listener, Login};
use crate::broker::Reply;
use crate::codec::{decode_request, encode_response, peek_client_id, peek_header};
use crate::error::{DecodeError, FrameError};
use crate::frame::read_frame;
use crate::metrics::{self, CloseCause};
use crate::router::session::Session;
use crate::router::Router;
use crate::versions;
use strait_upstream::splice::write_chunks;

/// Limits of the server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Most connections at once.
    pub max_connections: usize,
    /// Largest request frame.
    pub max_frame_bytes: usize,
    /// Close a connection idle this long.
    pub idle_timeout: Duration,
    /// A request's bytes must all arrive within this time of its first.
    pub request_timeout: Duration,
    /// How long in-flight requests may run after shutdown begins.
    pub shutdown_grace: Duration,
    /// The `acls:` every request is checked against (`None`: everything
    /// is allowed).
    pub authorizer: Option<Authorizer>,
}

/// Serves `listeners` until `shutdown` resolves, then stops accepting, lets
/// every connection finish the request it is handling (up to
/// `shutdown_grace`) and returns.
pub async fn serve(
    listeners: Vec<(TcpListener, Arc<Listener>)>,
    router: Arc<Router>,
    options: ServerOptions,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let limit = Arc::new(Semaphore::new(options.max_connections));
    // Request bytes read ahead by every connection (MAX_READ_AHEAD_BYTES).
    let read_ahead = Arc::new(AtomicUsize::new(0));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    let mut at_limit = false;
    tokio::pin!(shutdown);
    loop {
        // Reap finished connections so the set stays small.
        while connections.try_join_next().is_some() {}
        let full = limit.available_permits() == 0;
        if full && !at_limit {
            tracing::warn!(
                max_connections = options.max_connections,
                "connection limit reached: new connections wait to be accepted until one closes"
            );
        }
        at_limit = full;
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            permit = Arc::clone(&limit).acquire_owned() => permit.expect("the semaphore is never closed"),
        };
        let (which, (stream, peer)) = tokio::select! {
            _ = &mut shutdown => break,
            (which, accepted) = accept_any(&listeners) => match accepted {
                Ok(a) => (which, a),
                Err(e) => {
                    // Out of file descriptors and the like: back off a bit.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let router = Arc::clone(&router);
        let read_ahead = Arc::clone(&read_ahead);
        let options = options.clone();
        let stop = stop_rx.clone();
        metrics::connection_opened();
        // Every line logged for this connection names the client: its
        // address now, its client id once a request carries one.
        let listener = Arc::clone(&listeners[which].1);
        let span = tracing::info_span!(
            "connection",
            %peer,
            listener = %listener.name,
            client_id = tracing::field::Empty,
            principal = tracing::field::Empty,
        );
        connections.spawn(
            async move {
                let _permit = permit;
                let (cause, why) = open(stream, peer, listener, &router, &options, &read_ahead, stop).await;
                metrics::connection_closed(cause);
                match why {
                    None => tracing::debug!(cause = cause.as_str(), "connection closed"),
                    Some(why) => {
                        tracing::warn!(cause = cause.as_str(), "closing connection: {}", one_line(&why))
                    }
                }
            }
            .instrument(span),
        );
    }
    drop(listeners);
    tracing::info!("shutting down: no new connections, finishing requests in flight");
    let _ = stop_tx.send(true);
    router.broker().begin_shutdown().await;
    let drained = tokio::time::timeout(options.shutdown_grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            connections = connections.len(),
            "connections still busy after the shutdown grace period; closing them"
        );
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
    Ok(())
}

/// The next connection on any of `listeners`, and which one took it.
async fn accept_any(
    listeners: &[(TcpListener, Arc<Listener>)],
) -> (usize, std::io::Result<(TcpStream, SocketAddr)>) {
    std::future::poll_fn(|cx| {
        for (i, (listener, _)) in listeners.iter().enumerate() {
            if let std::task::Poll::Ready(accepted) = listener.poll_accept(cx) {
                return std::task::Poll::Ready((i, accepted));
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// Bytes of a TLS connection's responses gathered before they are sealed
/// and written (a TLS record holds at most 16 KiB).
const TLS_WRITE_BUFFER: usize = 64 * 1024;

/// Sets up an accepted connection on `listener` (TLS handshake, the
/// principal of its client certificate) and serves it.
async fn open(
    stream: TcpStream,
    peer: SocketAddr,
    listener: Arc<Listener>,
    router: &Router,
    options: &ServerOptions,
    read_ahead: &AtomicUsize,
    stop: watch::Receiver<bool>,
) -> (CloseCause, Option<String>) {
    let _ = stream.set_nodelay(true);
    let Some(tls) = &listener.tls else {
        let login = Login::new(Arc::clone(&listener), None);
        let (reader, writer) = stream.into_split();
        return connection(reader, writer, peer, login, router, options, read_ahead, stop).await;
    };
    // A client that stalls in the handshake holds its connection no longer
    // than one that stalls in a request.
    let tls_stream = match tokio::time::timeout(options.request_timeout, tls.accept(stream)).await {
        Ok(Ok(tls_stream)) => tls_stream,
        Ok(Err(e)) => return (CloseCause::Tls, Some(format!("TLS handshake failed: {e}"))),
        Err(_) => {
            return (
                CloseCause::Tls,
                Some(format!(
                    "the TLS handshake did not finish within request_timeout {:?}",
                    options.request_timeout
                )),
            )
        }
    };
    let certificate = tls.principal(&tls_stream);
    if let Some(name) = &certificate {
        tracing::Span::current().record("principal", format!("User:{name}").as_str());
    }
    let login = Login::new(Arc::clone(&listener), certificate);
    let (reader, writer) = tokio::io::split(tls_stream);
    // rustls' server stream writes one buffer of a vectored write at a
    // time: a response's chunks would each become a TLS record and a
    // system call. Buffered, they are sealed together (encryption copies
    // them anyway); the server flushes after each response.
    let writer = tokio::io::BufWriter::with_capacity(TLS_WRITE_BUFFER, writer);
    connection(reader, writer, peer, login, router, options, read_ahead, stop).await
}

/// Most requests of one connection read and not yet answered. In front of
/// a cluster a round trip away a producer needs about its request rate
/// times the round trip in flight (librdkafka sends one Produce per
/// partition batch: 1,000 a second over 50 ms is 50), so the count is
/// generous and the bytes below are the real bound.
const MAX_IN_FLIGHT: usize = 1024;

/// Most request bytes of one connection read and not yet answered (one
/// request is always read, whatever its size). A producer a round trip
/// away needs its rate times the round trip in flight: 64 MiB carries
/// 1.3 GB/s over 50 ms (16 MiB held one librdkafka producer to 0.6 x its
/// direct rate in the router benchmark).
const MAX_IN_FLIGHT_BYTES: usize = 64 << 20;

/// Most request bytes read ahead and not yet answered across all
/// connections: a connection with a request in flight reads another only
/// while the total is below this (one with none always reads one), so
/// many connections in front of a stalled upstream hold at most this
/// much beside one request each.
const MAX_READ_AHEAD_BYTES: usize = 256 << 20;

/// A connection's request bytes in flight, counted in its own total and in
/// the process's (given back when the connection ends).
struct InFlightBytes<'a> {
    own: usize,
    all: &'a AtomicUsize,
}

impl InFlightBytes<'_> {
    fn add(&mut self, n: usize) {
        self.own += n;
        self.all.fetch_add(n, Ordering::Relaxed);
    }

    fn sub(&mut self, n: usize) {
        self.own -= n;
        self.all.fetch_sub(n, Ordering::Relaxed);
    }

    /// Whether another request may be read with some already in flight.
    fn room(&self) -> bool {
        self.own < MAX_IN_FLIGHT_BYTES && self.all.load(Ordering::Relaxed) < MAX_READ_AHEAD_BYTES
    }
}

impl Drop for InFlightBytes<'_> {
    fn drop(&mut self) {
        self.all.fetch_sub(self.own, Ordering::Relaxed);
    }
}

/// A request started and its answer to come, with what its response needs.
type InFlight<'a> = Pin<Box<dyn Future<Output = (Answered, Reply)> + Send + 'a>>;

/// What a response needs of its request.
#[derive(Debug, Clone, Copy)]
struct Answered {
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    /// The request frame's size, counted against [`MAX_IN_FLIGHT_BYTES`].
    size: usize,
}

/// What the connection loop waits for.
enum Event {
    /// The oldest request in flight has its answer.
    Answered(Answered, Reply),
    /// The client sent something (or closed, or failed).
    Readable(Result<std::io::Result<bool>, tokio::time::error::Elapsed>),
    /// Shutdown began.
    Stop,
}

/// Requests in flight, oldest first.
type InFlightQueue<'a> = FuturesOrdered<InFlight<'a>>;

/// Runs `work` to its end while the connection's requests in flight go on,
/// their answers (in order) kept in `ready`. Whatever the connection waits
/// for (a request's start, the rest of a frame, the client taking a
/// response), none of its requests stops moving: one may hold a lock that
/// the connection, or another, is waiting for.
async fn drive<T>(
    work: impl Future<Output = T>,
    in_flight: &mut InFlightQueue<'_>,
    ready: &mut VecDeque<(Answered, Reply)>,
) -> T {
    tokio::pin!(work);
    loop {
        tokio::select! {
            biased;
            out = &mut work => return out,
            Some(done) = in_flight.next(), if !in_flight.is_empty() => ready.push_back(done),
        }
    }
}

/// Serves one connection until the client leaves, it misbehaves, it idles
/// out, or shutdown begins: why it closed, and what to log (nothing when
/// the client left or Strait stopped).
///
/// Requests are read while earlier ones are in flight (up to
/// [`MAX_IN_FLIGHT`] and [`MAX_IN_FLIGHT_BYTES`]) and started in order
/// ([`Router::start`]); their answers are written in that order. While a
/// response is being written nothing is read, so a client that does not
/// read its responses stops being read.
#[allow(clippy::too_many_arguments)]
async fn connection<R: AsyncRead + Unpin + Send, W: AsyncWrite + Unpin + Send>(
    reader: R,
    mut writer: W,
    peer: SocketAddr,
    mut login: Login,
    router: &Router,
    options: &ServerOptions,
    read_ahead: &AtomicUsize,
    mut stop: watch::Receiver<bool>,
) -> (CloseCause, Option<String>) {
    let closed = |cause: CloseCause, why: String| (cause, Some(why));
    let listener = Arc::clone(login.listener());
    // The main listener's address is the one the broker answers with.
    let mut reader = BufReader::with_capacity(64 * 1024, reader);
    let mut client = String::new();
    let mut session = Session::new(peer);
    let mut in_flight: InFlightQueue<'_> = FuturesOrdered::new();
    // Answers not written yet, in request order.
    let mut ready: VecDeque<(Answered, Reply)> = VecDeque::new();
    // Request bytes read and not answered yet.
    let mut in_flight_bytes = InFlightBytes {
        own: 0,
        all: read_ahead,
    };
    // Set when no more requests are read: shutdown began, or the client
    // closed its end or sent something that closes the connection once
    // earlier requests are answered.
    let mut draining = false;
    // Whether shutdown is what ended the reading.
    let mut stopping = false;
    // Why the connection closes once what was read is answered (a failed
    // login), if it does.
    let mut closing: Option<String> = None;
    loop {
        if let Some((answered, reply)) = ready.pop_front() {
            in_flight_bytes.sub(answered.size);
            match reply {
                Reply::Respond(mut body) => {
                    router.instances().now().present(&mut body, &listener.name);
                    tracing::trace!(%peer, ?body, "response");
                    let sent = drive(
                        send(&mut writer, answered, *body, options),
                        &mut in_flight,
                        &mut ready,
                    )
                    .await;
                    if let Err((cause, why)) = sent {
                        return (cause, why.map(|why| format!("{why} (client {client:?})")));
                    }
                }
                Reply::Silent => {}
                Reply::Close(why) => {
                    return closed(
                        CloseCause::Protocol,
                        format!("{why} (client {client:?}, peer {peer})"),
                    )
                }
            }
            continue;
        }
        if draining && in_flight.is_empty() {
            if let Some(why) = closing.take() {
                return closed(CloseCause::Authentication, format!("{why} (client {client:?})"));
            }
            let cause = if stopping {
                CloseCause::Shutdown
            } else {
                CloseCause::Client
            };
            return (cause, None);
        }
        let room = !draining
            && (in_flight.is_empty() || (in_flight.len() < MAX_IN_FLIGHT && in_flight_bytes.room()));
        // Between requests the client may idle for `idle_timeout`; a
        // connection with requests in flight is not idle.
        let idle = if in_flight.is_empty() {
            options.idle_timeout
        } else {
            Duration::MAX
        };
        let event = tokio::select! {
            biased;
            Some((answered, reply)) = in_flight.next(), if !in_flight.is_empty() => Event::Answered(answered, reply),
            begun = timeout_or_forever(idle, reader.fill_buf()), if room => {
                Event::Readable(begun.map(|filled| filled.map(|bytes| !bytes.is_empty())))
            }
            _ = stop.changed(), if !draining => Event::Stop,
        };
        match event {
            Event::Stop => {
                draining = true;
                stopping = true;
            }
            Event::Answered(answered, reply) => ready.push_back((answered, reply)),
            Event::Readable(Err(_)) => {
                return closed(CloseCause::Idle, format!("idle for {:?}", options.idle_timeout))
            }
            // The client closed its end: what it sent is still answered.
            Event::Readable(Ok(Ok(false))) => draining = true,
            Event::Readable(Ok(Err(e))) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return (CloseCause::Client, None)
            }
            Event::Readable(Ok(Err(e))) => {
                return closed(
                    CloseCause::Io,
                    format!("reading a request: {e} (client {client:?})"),
                )
            }
            Event::Readable(Ok(Ok(true))) => {
                // Once a request has begun, all of it must arrive within
                // `request_timeout`.
                let read = tokio::time::timeout(
                    options.request_timeout,
                    read_frame(&mut reader, options.max_frame_bytes),
                );
                let frame = tokio::select! {
                    frame = drive(read, &mut in_flight, &mut ready) => frame,
                    _ = stop.changed() => {
                        draining = true;
                        stopping = true;
                        continue;
                    }
                };
                let frame = match frame {
                    Err(_) => {
                        return closed(
                            CloseCause::Timeout,
                            format!(
                            "a request did not arrive whole within request_timeout {:?} (client {client:?})",
                            options.request_timeout
                        ),
                        )
                    }
                    Ok(Ok(Some(frame))) => frame,
                    Ok(Ok(None)) => {
                        draining = true;
                        continue;
                    }
                    Ok(Err(FrameError::Io(e))) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                        return (CloseCause::Client, None)
                    }
                    Ok(Err(e @ FrameError::Io(_))) => {
                        return closed(CloseCause::Io, format!("{e} (client {client:?})"))
                    }
                    Ok(Err(e)) => return closed(CloseCause::Protocol, format!("{e} (client {client:?})")),
                };
                let size = frame.len();
                metrics::bytes_received(size + 4);
                let received = std::time::Instant::now();
                in_flight_bytes.add(size);
                let request = match decode_request(frame.clone()) {
                    Ok(request) => request,
                    Err(DecodeError::UnknownVersion {
                        api: ApiKey::ApiVersions,
                        correlation_id,
                        ..
                    }) => {
                        // KIP-511: a newer client asks with a version Strait
                        // does not know; answer in v0 with the ones it does.
                        let body = ResponseKind::ApiVersions(versions::api_versions_retry());
                        let answered = Answered {
                            api: ApiKey::ApiVersions,
                            version: 0,
                            correlation_id,
                            size,
                        };
                        let reply = Reply::Respond(Box::new(body));
                        in_flight.push_back(Box::pin(std::future::ready((answered, reply))));
                        continue;
                    }
                    Err(e) => {
                        let (api_key, version, correlation_id) = peek_header(&frame).unwrap_or((-1, -1, -1));
                        if client.is_empty() {
                            client = peek_client_id(&frame).unwrap_or_default();
                        }
                        let why = format!(
                            "{e} (api key {api_key} v{version}, correlation id {correlation_id}, client {client:?})"
                        );
                        if in_flight.is_empty() {
                            return closed(CloseCause::Protocol, why);
                        }
                        // Earlier requests are answered first.
                        let answered = Answered {
                            api: ApiKey::ApiVersions,
                            version: 0,
                            correlation_id,
                            size,
                        };
                        in_flight.push_back(Box::pin(std::future::ready((answered, Reply::Close(why)))));
                        draining = true;
                        continue;
                    }
                };
                if let Some(id) = &request.client_id {
                    if *id != client {
                        client.clone_from(id);
                        tracing::Span::current().record("client_id", client.as_str());
                    }
                }
                let answered = Answered {
                    api: request.api,
                    version: request.version,
                    correlation_id: request.correlation_id,
                    size,
                };
                tracing::trace!(%peer, ?request, "request");
                match drive(login.admit(&request), &mut in_flight, &mut ready).await {
                    Admission::Pass => {}
                    Admission::Refuse(why) => {
                        if in_flight.is_empty() {
                            return closed(CloseCause::Authentication, format!("{why} (client {client:?})"));
                        }
                        closing = Some(why);
                        draining = true;
                        continue;
                    }
                    Admission::Answer { body, delay, close } => {
                        in_flight.push_back(Box::pin(async move {
                            if !delay.is_zero() {
                                tokio::time::sleep(delay).await;
                            }
                            finish(answered, received, Reply::Respond(body))
                        }));
                        if close.is_some() {
                            closing = close;
                            draining = true;
                        }
                        continue;
                    }
                }
                let (request, amend) = match &options.authorizer {
                    None => (request, Amend::default()),
                    Some(authorizer) => {
                        let named = |id| router.topic_named_by_id(id);
                        match authorizer.check(login.principal(), request, &named) {
                            Verdict::Go(request, amend) => (*request, amend),
                            Verdict::Answer(reply) => {
                                in_flight.push_back(Box::pin(std::future::ready(finish(
                                    answered, received, reply,
                                ))));
                                continue;
                            }
                        }
                    }
                };
                let pending = drive(router.start(&mut session, request), &mut in_flight, &mut ready).await;
                in_flight.push_back(Box::pin(async move {
                    finish(answered, received, amend.apply(pending.await))
                }));
            }
        }
    }
}

/// `text` with its control characters escaped (`\n` for a newline): text
/// that came from a client (a client id, a name) stays on its log line
/// and cannot forge another.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A request's reply, counted in the metrics.
fn finish(answered: Answered, received: std::time::Instant, reply: Reply) -> (Answered, Reply) {
    let response = match &reply {
        Reply::Respond(body) => Some(&**body),
        _ => None,
    };
    metrics::answered(answered.api, received.elapsed(), response);
    (answered, reply)
}

/// `future` within `limit`, or without a limit when it is `Duration::MAX`.
async fn timeout_or_forever<F: Future>(
    limit: Duration,
    future: F,
) -> Result<F::Output, tokio::time::error::Elapsed> {
    if limit == Duration::MAX {
        Ok(future.await)
    } else {
        tokio::time::timeout(limit, future).await
    }
}

/// Encodes and writes one response. The next request is read only once the
/// client has taken all of it, so a connection holds at most one response
/// (and a Fetch response's records are views of the spool's mapped
/// segments, not copies: see [`crate::codec::ResponseFrame`]). A client that takes no
/// bytes for `idle_timeout` is disconnected.
async fn send<W: AsyncWrite + Unpin>(
    writer: &mut W,
    answered: Answered,
    body: ResponseKind,
    options: &ServerOptions,
) -> Result<(), (CloseCause, Option<String>)> {
    let frame = encode_response(answered.api, answered.version, answered.correlation_id, body)
        .map_err(|why| (CloseCause::Protocol, Some(why)))?;
    metrics::bytes_sent(frame.len());
    match write_chunks(writer, frame.chunks(), options.idle_timeout).await {
        Ok(()) => Ok(()),
        // The client hung up with a request in flight (as clients do when
        // they close): nothing to warn about.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            ) =>
        {
            Err((CloseCause::Client, None))
        }
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err((
            CloseCause::SlowClient,
            Some(format!(
                "the client read none of a {} byte response for {:?} (idle_timeout)",
                frame.len(),
                options.idle_timeout
            )),
        )),
        Err(e) => Err((CloseCause::Io, Some(format!("writing a response: {e}")))),
    }
}
