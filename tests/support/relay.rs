//! A TCP relay between a client and a broker that can delay, stall and cut
//! the traffic: the slow link between two datacenters (this kernel has no
//! netem, so the delay is added here) and the network faults no real peer
//! produces on demand.
//!
//! Each direction of each connection is a reader thread that stamps every
//! chunk it reads with the time it may leave, and a writer thread that
//! sends chunks when they are due. The queue between them is bounded
//! (`QUEUE_CHUNKS` of up to 64 KiB), so a stalled side pushes back on the
//! other through TCP, as a real link would.
//!
//! **The window.** A real link also holds each TCP connection to its
//! window: a sender has at most that many bytes unacknowledged, so one
//! connection carries at most a window per round trip. The relay does the
//! same for each direction of each connection: a chunk read at time `t`
//! counts as unacknowledged until `t` + 2 x the one-way delay (its delivery,
//! then the ack's way back), and the reader reads at most the window less
//! what is unacknowledged; when that is nothing it sleeps until the oldest
//! chunk's ack is due, so the sender is pushed back through TCP. The window
//! is [`DEFAULT_WINDOW`] (6 MiB, Linux's default largest receive buffer,
//! `net.ipv4.tcp_rmem`'s max of 6291456) unless [`Relay::set_window`] says
//! otherwise (0: no limit): at a 50 ms round trip one connection carries at
//! most 6 MiB / 50 ms = 126 MB/s, at 100 ms 63 MB/s. With no delay, acks
//! are immediate and the window never binds. It is approximate: the bytes
//! the kernel buffers on either side of the relay come on top.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const CHUNK: usize = 64 << 10;
const QUEUE_CHUNKS: usize = 1024;
/// Each direction of each connection holds at most this many bytes
/// unacknowledged by default: Linux's default largest TCP receive buffer
/// (`net.ipv4.tcp_rmem` max, 6291456).
pub const DEFAULT_WINDOW: u64 = 6 << 20;

/// A running relay; stops accepting and cuts its connections on drop.
pub struct Relay {
    port: u16,
    state: Arc<State>,
}

struct State {
    target: Mutex<SocketAddr>,
    /// One-way delay in microseconds.
    delay_us: AtomicU64,
    /// Most unacknowledged bytes per direction of a connection; 0: no limit.
    window: AtomicU64,
    stalled: AtomicBool,
    stopped: AtomicBool,
    connections: Mutex<Vec<TcpStream>>,
    /// Bytes read from the clients' side, delivered or not.
    from_clients: AtomicU64,
    /// Bytes read from the targets' side, delivered or not.
    to_clients: AtomicU64,
}

impl Relay {
    /// Relays a free loopback port to `target`, delaying each direction by
    /// `one_way_delay` (half the added round-trip time), each direction of
    /// each connection held to a window of [`DEFAULT_WINDOW`].
    pub fn start(target: SocketAddr, one_way_delay: Duration) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind relay");
        let port = listener.local_addr().expect("relay addr").port();
        let state = Arc::new(State {
            target: Mutex::new(target),
            delay_us: AtomicU64::new(one_way_delay.as_micros() as u64),
            window: AtomicU64::new(DEFAULT_WINDOW),
            stalled: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            connections: Mutex::new(Vec::new()),
            from_clients: AtomicU64::new(0),
            to_clients: AtomicU64::new(0),
        });
        let accepting = state.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stopped.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = client else { continue };
                let target = *accepting.target.lock().unwrap();
                let Ok(server) = TcpStream::connect(target) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut open = accepting.connections.lock().unwrap();
                    open.push(client.try_clone().unwrap());
                    open.push(server.try_clone().unwrap());
                }
                pump(
                    accepting.clone(),
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    true,
                );
                pump(accepting.clone(), server, client, false);
            }
        });
        Relay { port, state }
    }

    /// The relay's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Relays new connections to `target` from now on (for a broker that
    /// must be told the relay's address before it starts).
    pub fn retarget(&self, target: SocketAddr) {
        *self.state.target.lock().unwrap() = target;
    }

    /// Holds (or releases) every byte in both directions: a network stall.
    /// Connections stay open.
    pub fn stall(&self, stalled: bool) {
        self.state.stalled.store(stalled, Ordering::Relaxed);
    }

    /// Bytes the relay has read from its clients so far, also those it
    /// holds back while stalled.
    pub fn bytes_from_clients(&self) -> u64 {
        self.state.from_clients.load(Ordering::Relaxed)
    }

    /// Bytes the relay has read from the targets' side so far (what it
    /// carries to its clients), also those it has not delivered yet.
    pub fn bytes_to_clients(&self) -> u64 {
        self.state.to_clients.load(Ordering::Relaxed)
    }

    /// Changes the one-way delay for bytes read from now on.
    pub fn set_delay(&self, one_way_delay: Duration) {
        self.state
            .delay_us
            .store(one_way_delay.as_micros() as u64, Ordering::Relaxed);
    }

    /// Holds each direction of each connection, open ones included, to
    /// `bytes` unacknowledged from now on (see the module docs); 0: no
    /// limit.
    pub fn set_window(&self, bytes: u64) {
        self.state.window.store(bytes, Ordering::Relaxed);
    }

    /// Closes every relayed connection (both sides see a reset or EOF);
    /// new connections are still accepted.
    pub fn cut(&self) {
        for stream in self.state.connections.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::Relaxed);
        self.cut();
        // Wake the accept loop so it sees `stopped`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Copies `from` to `to` through a delaying queue (`from` is a client when
/// `upstream`).
fn pump(state: Arc<State>, mut from: TcpStream, to: TcpStream, upstream: bool) {
    let (tx, rx) = sync_channel::<(Instant, Vec<u8>)>(QUEUE_CHUNKS);
    let reading = state.clone();
    thread::spawn(move || {
        let mut buf = vec![0u8; CHUNK];
        let mut unacked = Unacked::default();
        loop {
            let room = unacked.room(&reading);
            match from.read(&mut buf[..room]) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let counter = if upstream {
                        &reading.from_clients
                    } else {
                        &reading.to_clients
                    };
                    counter.fetch_add(n as u64, Ordering::Relaxed);
                    let delay = Duration::from_micros(reading.delay_us.load(Ordering::Relaxed));
                    let now = Instant::now();
                    unacked.chunks.push_back((now + 2 * delay, n as u64));
                    unacked.held += n as u64;
                    if tx.send((now + delay, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
        // Dropping `tx` tells the writer to finish and close its side.
    });
    thread::spawn(move || deliver(state, rx, to));
}

/// The chunks a reader has read and not seen acknowledged yet.
#[derive(Default)]
struct Unacked {
    /// (when its ack is due, bytes), oldest first.
    chunks: VecDeque<(Instant, u64)>,
    /// Their bytes.
    held: u64,
}

impl Unacked {
    /// How many bytes the reader may read now (at most [`CHUNK`], at least
    /// 1): what the window leaves once the acks due by now are taken out.
    /// Sleeps until the oldest ack is due while the window is full.
    fn room(&mut self, state: &State) -> usize {
        loop {
            let now = Instant::now();
            while let Some(&(due, n)) = self.chunks.front() {
                if due > now {
                    break;
                }
                self.chunks.pop_front();
                self.held -= n;
            }
            let window = state.window.load(Ordering::Relaxed);
            if window == 0 {
                return CHUNK;
            }
            if self.held < window {
                return (window - self.held).min(CHUNK as u64) as usize;
            }
            let (due, _) = self.chunks.front().expect("a full window holds a chunk");
            thread::sleep(*due - now);
        }
    }
}

fn deliver(state: Arc<State>, rx: Receiver<(Instant, Vec<u8>)>, mut to: TcpStream) {
    for (due, chunk) in rx {
        loop {
            if state.stopped.load(Ordering::Relaxed) {
                return;
            }
            if state.stalled.load(Ordering::Relaxed) {
                thread::sleep(Duration::from_millis(5));
                continue;
            }
            let now = Instant::now();
            if now >= due {
                break;
            }
            thread::sleep(due - now);
        }
        if to.write_all(&chunk).is_err() {
            return;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
