//! The client-facing server: accepts connections (at most
//! `max_connections` at once), reads frames, answers each request in order,
//! and shuts down gracefully.
//!
//! A connection serves one request at a time, as a Kafka broker does:
//! clients may pipeline, and responses go back in request order. Anything
//! wrong with the bytes of one connection (a malformed or oversized frame,
//! an unknown API) closes that connection with a log line naming the client;
//! no other connection notices.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{ApiKey, ResponseKind};
use kafka_protocol::ResponseError;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::broker::Reply;
use crate::codec::{decode_request, encode_response, peek_client_id, peek_header};
use crate::error::{DecodeError, FrameError};
use crate::frame::{read_frame, write_chunks};
use crate::router::Router;
use crate::versions;

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
}

/// Serves `listener` until `shutdown` resolves, then stops accepting, lets
/// every connection finish the request it is handling (up to
/// `shutdown_grace`) and returns.
pub async fn serve(
    listener: TcpListener,
    router: Arc<Router>,
    options: ServerOptions,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let limit = Arc::new(Semaphore::new(options.max_connections));
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
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off a bit.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let router = Arc::clone(&router);
        let options = options.clone();
        let stop = stop_rx.clone();
        connections.spawn(async move {
            let _permit = permit;
            match connection(stream, peer, &router, &options, stop).await {
                Ok(()) => {}
                Err(why) if why == CLIENT_GONE => tracing::debug!(%peer, "{why}"),
                Err(why) => tracing::warn!(%peer, "closing connection: {why}"),
            }
        });
    }
    drop(listener);
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

/// Serves one connection until the client leaves, it misbehaves, it idles
/// out, or shutdown begins. `Err` carries the reason to log.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: &Router,
    options: &ServerOptions,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    let _ = stream.set_nodelay(true);
    let (reader, mut writer) = stream.into_split();
    let mut reader = BufReader::with_capacity(64 * 1024, reader);
    let mut client = String::new();
    loop {
        // Between requests the client may idle for `idle_timeout`; once a
        // request has begun, all of it must arrive within `request_timeout`.
        let begun = tokio::select! {
            begun = tokio::time::timeout(options.idle_timeout, reader.fill_buf()) => begun,
            _ = stop.changed() => return Ok(()),
        };
        match begun {
            Err(_) => return Err(format!("idle for {:?}", options.idle_timeout)),
            Ok(Ok([])) => return Ok(()),
            Ok(Ok(_)) => {}
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(()),
            Ok(Err(e)) => return Err(format!("reading a request: {e} (client {client:?})")),
        }
        let frame = tokio::select! {
            frame = tokio::time::timeout(options.request_timeout, read_frame(&mut reader, options.max_frame_bytes)) => frame,
            _ = stop.changed() => return Ok(()),
        };
        let frame = match frame {
            Err(_) => {
                return Err(format!(
                    "a request did not arrive whole within request_timeout {:?} (client {client:?})",
                    options.request_timeout
                ))
            }
            Ok(Ok(Some(frame))) => frame,
            Ok(Ok(None)) => return Ok(()),
            Ok(Err(FrameError::Io(e))) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(()),
            Ok(Err(e)) => return Err(format!("{e} (client {client:?})")),
        };
        let request = match decode_request(frame.clone()) {
            Ok(request) => request,
            Err(DecodeError::UnknownVersion {
                api: ApiKey::ApiVersions,
                correlation_id,
                ..
            }) => {
                // KIP-511: a newer client asks with a version Strait does
                // not know; answer in v0 with the versions it does.
                let body = ResponseKind::ApiVersions(versions::api_versions_response(Some(
                    ResponseError::UnsupportedVersion,
                )));
                send(&mut writer, ApiKey::ApiVersions, 0, correlation_id, body, options).await?;
                continue;
            }
            Err(e) => {
                let (api_key, version, correlation_id) = peek_header(&frame).unwrap_or((-1, -1, -1));
                if client.is_empty() {
                    client = peek_client_id(&frame).unwrap_or_default();
                }
                return Err(format!(
                    "{e} (api key {api_key} v{version}, correlation id {correlation_id}, client {client:?})"
                ));
            }
        };
        if let Some(id) = &request.client_id {
            if *id != client {
                client.clone_from(id);
            }
        }
        let (api, version, correlation_id) = (request.api, request.version, request.correlation_id);
        tracing::trace!(%peer, ?request, "request");
        match router.handle(request, peer).await {
            Reply::Respond(body) => {
                tracing::trace!(%peer, ?body, "response");
                send(&mut writer, api, version, correlation_id, *body, options)
                    .await
                    .map_err(|why| {
                        if why == CLIENT_GONE {
                            why
                        } else {
                            format!("{why} (client {client:?})")
                        }
                    })?
            }
            Reply::Silent => {}
            Reply::Close(why) => return Err(format!("{why} (client {client:?}, peer {peer})")),
        }
    }
}

/// Encodes and writes one response. The next request is read only once the
/// client has taken all of it, so a connection holds at most one response
/// (and a Fetch response's records are views of the spool's mapped
/// segments, not copies: see [`crate::codec::ResponseFrame`]). A client that takes no
/// bytes for `idle_timeout` is disconnected.
async fn send(
    writer: &mut OwnedWriteHalf,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: ResponseKind,
    options: &ServerOptions,
) -> Result<(), String> {
    let frame = encode_response(api, version, correlation_id, body)?;
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
            Err(CLIENT_GONE.to_owned())
        }
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err(format!(
            "the client read none of a {} byte response for {:?} (idle_timeout)",
            frame.len(),
            options.idle_timeout
        )),
        Err(e) => Err(format!("writing a response: {e}")),
    }
}

/// The reason given when the client closed its end first.
const CLIENT_GONE: &str = "client closed the connection";
