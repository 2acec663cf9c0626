//! I/O threads: the spool's way of staying off an async runtime's workers.
//!
//! [`IoPool::append`] and [`IoPool::read`] return plain futures completed by
//! the pool's own threads, so a tokio task awaits them without blocking a
//! worker on `write`, `fdatasync` or a page fault.
//!
//! - Appends to one partition always go to the same writer thread, which
//!   keeps them in order and commits everything queued for a partition with
//!   one sync (group commit under `every_batch`).
//! - Reads go to separate reader threads that prefault the pages they hand
//!   back, so a read never queues behind an `fdatasync`.
//! - A housekeeping thread runs interval syncs, persists recovery points and
//!   applies retention for the partitions registered with it.

use std::collections::hash_map::DefaultHasher;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_channel::oneshot;

use crate::error::{Result, SpoolError};
use crate::log::{now_ms, AppendInfo, Partition, ReadResult, TICK};

/// Sizes and periods of an [`IoPool`].
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// Threads that append and sync (partitions are spread over them).
    pub writer_threads: usize,
    /// Threads that serve reads.
    pub reader_threads: usize,
    /// How often recovery points are persisted.
    pub checkpoint_interval: Duration,
    /// How often retention is applied (`spool.retention_check_interval`,
    /// one minute by default). The housekeeper wakes every 50ms, so shorter
    /// intervals act as 50ms.
    pub retention_interval: Duration,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            writer_threads: 2,
            reader_threads: 2,
            checkpoint_interval: Duration::from_secs(5),
            retention_interval: Duration::from_secs(60),
        }
    }
}

struct AppendJob {
    partition: Partition,
    data: Bytes,
    reply: oneshot::Sender<Result<AppendInfo>>,
}

struct ReadJob {
    partition: Partition,
    offset: u64,
    max_bytes: usize,
    reply: oneshot::Sender<Result<ReadResult>>,
}

/// Most appends one writer thread commits together.
const GROUP_LIMIT: usize = 256;

/// The spool's I/O threads.
#[derive(Debug)]
pub struct IoPool {
    writers: Vec<Sender<AppendJob>>,
    readers: Option<Sender<ReadJob>>,
    registered: Arc<Mutex<Vec<Partition>>>,
    stop: Option<Sender<()>>,
    threads: Vec<JoinHandle<()>>,
}

impl IoPool {
    /// Starts the threads.
    pub fn new(options: PoolOptions) -> IoPool {
        let mut threads = Vec::new();
        let mut writers = Vec::new();
        for i in 0..options.writer_threads.max(1) {
            let (tx, rx) = mpsc::channel::<AppendJob>();
            writers.push(tx);
            threads.push(spawn(format!("spool-writer-{i}"), move || writer_loop(rx)));
        }
        let (read_tx, read_rx) = mpsc::channel::<ReadJob>();
        let read_rx = Arc::new(Mutex::new(read_rx));
        for i in 0..options.reader_threads.max(1) {
            let rx = Arc::clone(&read_rx);
            threads.push(spawn(format!("spool-reader-{i}"), move || reader_loop(&rx)));
        }
        let registered = Arc::new(Mutex::new(Vec::new()));
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        {
            let registered = Arc::clone(&registered);
            threads.push(spawn("spool-housekeeper".into(), move || {
                housekeeper_loop(&registered, &stop_rx, &options)
            }));
        }
        IoPool {
            writers,
            readers: Some(read_tx),
            registered,
            stop: Some(stop_tx),
            threads,
        }
    }

    /// Appends `data` to `partition` on its writer thread. The future
    /// resolves once the append is done (and, under `every_batch`, durable).
    pub fn append(
        &self,
        partition: &Partition,
        data: Bytes,
    ) -> impl Future<Output = Result<AppendInfo>> + Send + 'static {
        let (reply, rx) = oneshot::channel();
        let job = AppendJob {
            partition: partition.clone(),
            data,
            reply,
        };
        let slot = writer_slot(partition, self.writers.len());
        let sent = self.writers[slot].send(job).is_ok();
        async move {
            if !sent {
                return Err(SpoolError::Closed);
            }
            rx.await.unwrap_or(Err(SpoolError::Closed))
        }
    }

    /// Reads from `partition` on a reader thread, with the pages prefaulted.
    pub fn read(
        &self,
        partition: &Partition,
        offset: u64,
        max_bytes: usize,
    ) -> impl Future<Output = Result<ReadResult>> + Send + 'static {
        let (reply, rx) = oneshot::channel();
        let job = ReadJob {
            partition: partition.clone(),
            offset,
            max_bytes,
            reply,
        };
        let sent = self.readers.as_ref().is_some_and(|r| r.send(job).is_ok());
        async move {
            if !sent {
                return Err(SpoolError::Closed);
            }
            rx.await.unwrap_or(Err(SpoolError::Closed))
        }
    }

    /// Hands `partition` to the housekeeper (interval syncs, recovery-point
    /// checkpoints, retention).
    pub fn register(&self, partition: &Partition) {
        self.lock_registered().push(partition.clone());
    }

    /// Takes `partition` away from the housekeeper.
    pub fn unregister(&self, partition: &Partition) {
        self.lock_registered().retain(|p| !p.same_as(partition));
    }

    fn lock_registered(&self) -> std::sync::MutexGuard<'_, Vec<Partition>> {
        self.registered.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Finishes queued work, stops the threads and closes every registered
    /// partition (sync and persist the recovery point). Returns the first
    /// close error.
    pub fn shutdown(mut self) -> Result<()> {
        self.stop_threads();
        let partitions = std::mem::take(&mut *self.lock_registered());
        let mut first = Ok(());
        for p in partitions {
            if let Err(e) = p.close() {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    fn stop_threads(&mut self) {
        self.writers.clear();
        self.readers = None;
        self.stop = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for IoPool {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

/// Waits on the current thread for a future of the pool, for callers that
/// are not on an async runtime (tools, tests, benchmarks). The pool's own
/// threads complete the future, so no executor is needed.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};

    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name)
        .spawn(f)
        .expect("spawning a spool thread")
}

fn writer_slot(partition: &Partition, threads: usize) -> usize {
    let mut h = DefaultHasher::new();
    partition.dir().hash(&mut h);
    (h.finish() % threads as u64) as usize
}

fn writer_loop(rx: Receiver<AppendJob>) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        while jobs.len() < GROUP_LIMIT {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        // Group by partition, keeping each partition's order.
        let mut groups: Vec<(Partition, Vec<AppendJob>)> = Vec::new();
        for job in jobs {
            match groups.iter_mut().find(|(p, _)| p.same_as(&job.partition)) {
                Some((_, group)) => group.push(job),
                None => groups.push((job.partition.clone(), vec![job])),
            }
        }
        for (partition, group) in groups {
            let calls: Vec<&[u8]> = group.iter().map(|j| &j.data[..]).collect();
            let results = partition.append_group(&calls);
            for (job, result) in group.into_iter().zip(results) {
                let _ = job.reply.send(result);
            }
        }
    }
}

fn reader_loop(rx: &Mutex<Receiver<ReadJob>>) {
    loop {
        let job = match rx.lock().unwrap_or_else(|e| e.into_inner()).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        let result = job.partition.read_prefaulted(job.offset, job.max_bytes);
        let _ = job.reply.send(result);
    }
}

/// Partitions due for an interval sync at once from which one `syncfs`
/// replaces their `fdatasync`s.
const GROUP_SYNC_MIN: usize = 16;

fn housekeeper_loop(registered: &Mutex<Vec<Partition>>, stop: &Receiver<()>, options: &PoolOptions) {
    let mut last_checkpoint = Instant::now();
    let mut last_retention = Instant::now();
    loop {
        match stop.recv_timeout(TICK) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let partitions = registered.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let checkpoint = last_checkpoint.elapsed() >= options.checkpoint_interval;
        let retention = last_retention.elapsed() >= options.retention_interval;
        // Interval syncs: one `syncfs` when many partitions are due (one
        // journal commit, not one per partition), else one sync each. An
        // fsync error also marks the partition failed, so its appends report
        // it; the others are retried on the next round.
        let due: Vec<Partition> = partitions.iter().filter(|p| p.flush_due()).cloned().collect();
        let synced = if due.len() >= GROUP_SYNC_MIN {
            Partition::flush_together(&due)
        } else {
            due.iter().map(Partition::flush).collect()
        };
        for (p, result) in due.iter().zip(synced) {
            match result {
                // Closed since it was found due: closing synced it.
                Ok(()) | Err(SpoolError::Closed) => {}
                Err(e) => {
                    tracing::error!(partition = %p.dir().display(), error = %e, "background sync failed")
                }
            }
        }
        for p in &partitions {
            if checkpoint {
                if let Err(e) = p.checkpoint() {
                    tracing::warn!(partition = %p.dir().display(), error = %e, "persisting the recovery point failed");
                }
            }
            if retention {
                match p.apply_retention(now_ms()) {
                    Ok(0) => {}
                    Ok(n) => {
                        tracing::info!(partition = %p.dir().display(), segments = n, "retention deleted segments")
                    }
                    Err(e) => tracing::warn!(partition = %p.dir().display(), error = %e, "retention failed"),
                }
            }
        }
        if checkpoint {
            last_checkpoint = Instant::now();
        }
        if retention {
            last_retention = Instant::now();
        }
    }
}
