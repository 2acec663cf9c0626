//! How many Produce bytes one connection keeps unanswered.
//!
//! A Kafka broker reads a connection's next request only once it has
//! answered the last one. Requests sent beyond what keeps it busy wait in
//! socket buffers in front of it, where they help nothing: they add their
//! time to every answer, and they take away the back-pressure that makes
//! a producer put more records into each batch while its broker is busy
//! (through a proxy that read on regardless, librdkafka sent twice as
//! many requests for the same records, and spent twice the CPU).
//!
//! So a connection keeps unanswered only what its path needs, the
//! bandwidth-delay product: the best answer rate seen lately times the
//! shortest round trip seen lately, doubled so that a broker that speeds
//! up is not held back for long (BBR's congestion window, in requests
//! rather than packets). Two requests are always allowed, one being
//! handled and one waiting, and before the first answer nothing is held
//! back. On loopback that is about two requests; over
//! a 50 ms link at 100 MB/s about 10 MB. The rest waits with the caller,
//! in order: the router stops reading from the client, whose producer
//! then batches more, as it would against a busy broker.
//!
//! The round trip and rate come from the Produce answers themselves: a
//! rate sample is the bytes answered while one request was in flight over
//! its round trip, so an idle producer's samples are low and the window
//! follows it down, then doubles per round trip when it speeds up again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Requests allowed whatever their bytes: one being handled, one waiting.
const MIN_REQUESTS: usize = 2;

/// The window over the bandwidth-delay product.
const GAIN: f64 = 2.0;

/// How long the shortest round trip is remembered (a longer one then
/// takes its place: the path changed).
const RTT_PERIOD: Duration = Duration::from_secs(10);

/// How long the best rate is remembered.
const RATE_PERIOD: Duration = Duration::from_secs(2);

/// The Produce window of one connection.
#[derive(Debug, Default)]
pub(crate) struct Window {
    /// Held by the caller at the head of the queue while it waits for
    /// room, so callers are admitted in the order they came (tokio's
    /// mutex is fair).
    queue: tokio::sync::Mutex<()>,
    state: Mutex<State>,
    room: Notify,
}

#[derive(Debug)]
struct State {
    /// Bytes of requests admitted and not answered.
    bytes: usize,
    requests: usize,
    /// Bytes of requests answered, ever.
    delivered: u64,
    rtt: Windowed,
    rate: Windowed,
}

/// A request admitted to the window; dropping it (answered or not) frees
/// its room.
#[derive(Debug)]
pub(crate) struct Slot {
    window: Arc<Window>,
    bytes: usize,
    admitted: Instant,
    /// [`State::delivered`] when it was admitted.
    delivered: u64,
}

impl Window {
    /// Waits until a request of `bytes` fits, behind every caller that
    /// came earlier.
    pub(crate) async fn admit(self: &Arc<Self>, bytes: usize) -> Slot {
        let _head = self.queue.lock().await;
        loop {
            let room = self.room.notified();
            {
                let mut state = self.state.lock().expect("window lock");
                let now = Instant::now();
                if state.fits(bytes, now) {
                    state.bytes += bytes;
                    state.requests += 1;
                    return Slot {
                        window: Arc::clone(self),
                        bytes,
                        admitted: now,
                        delivered: state.delivered,
                    };
                }
            }
            room.await;
        }
    }

    /// The bytes the window allows now (at least two requests' worth are
    /// let through whatever this says); `None`, no limit, before any
    /// answer.
    #[cfg(test)]
    fn limit(&self) -> Option<usize> {
        self.state.lock().expect("window lock").limit(Instant::now())
    }
}

impl Slot {
    /// The request's answer came: its round trip and the rate it saw are
    /// samples (its room is freed as it drops).
    pub(crate) fn answered(self) {
        let now = Instant::now();
        let mut state = self.window.state.lock().expect("window lock");
        state.delivered += self.bytes as u64;
        let took = now
            .saturating_duration_since(self.admitted)
            .max(Duration::from_micros(1));
        let rate = (state.delivered - self.delivered) as f64 / took.as_secs_f64();
        state.rtt.sample(now, took.as_secs_f64());
        state.rate.sample(now, rate);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.window.state.lock().expect("window lock");
        state.bytes -= self.bytes;
        state.requests -= 1;
        drop(state);
        self.window.room.notify_one();
    }
}

impl State {
    /// Before the first answer (or after a pause that made the samples
    /// stale) nothing is known of the path, and nothing is held back: the
    /// first round trip over a long link would otherwise carry two
    /// requests, and the window take several more to open.
    fn fits(&self, bytes: usize, now: Instant) -> bool {
        self.requests < MIN_REQUESTS || self.limit(now).is_none_or(|limit| self.bytes + bytes <= limit)
    }

    fn limit(&self, now: Instant) -> Option<usize> {
        let rtt = self.rtt.get(now)?;
        let rate = self.rate.get(now)?;
        Some((GAIN * rate * rtt) as usize)
    }
}

impl Default for State {
    fn default() -> Self {
        State {
            bytes: 0,
            requests: 0,
            delivered: 0,
            rtt: Windowed::new(RTT_PERIOD, f64::min),
            rate: Windowed::new(RATE_PERIOD, f64::max),
        }
    }
}

/// The best of the samples of the last one to two periods: the current
/// period's and the one before.
#[derive(Debug)]
struct Windowed {
    period: Duration,
    /// The better of two samples (the shorter round trip, the higher rate).
    best: fn(f64, f64) -> f64,
    started: Option<Instant>,
    current: Option<f64>,
    previous: Option<f64>,
}

impl Windowed {
    fn new(period: Duration, best: fn(f64, f64) -> f64) -> Windowed {
        Windowed {
            period,
            best,
            started: None,
            current: None,
            previous: None,
        }
    }

    fn sample(&mut self, now: Instant, value: f64) {
        let (period, best) = (self.period, self.best);
        match self.started {
            Some(started) if now.saturating_duration_since(started) < period => {}
            Some(started) if now.saturating_duration_since(started) < 2 * period => {
                self.previous = self.current.take();
                self.started = Some(now);
            }
            _ => {
                self.previous = None;
                self.current = None;
                self.started = Some(now);
            }
        }
        self.current = Some(self.current.map_or(value, |c| best(c, value)));
    }

    fn get(&self, now: Instant) -> Option<f64> {
        let (period, best) = (self.period, self.best);
        let age = now.saturating_duration_since(self.started?);
        match (self.current, self.previous) {
            _ if age >= 2 * period => None,
            (Some(c), _) if age >= period => Some(c),
            (Some(c), Some(p)) => Some(best(c, p)),
            (c, p) => c.or(p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Admits `n` requests of `bytes` at once, without waiting.
    fn admit_now(window: &Arc<Window>, bytes: usize) -> Option<Slot> {
        let admitted = window.admit(bytes);
        futures_util::FutureExt::now_or_never(admitted)
    }

    #[tokio::test(start_paused = true)]
    async fn anything_goes_before_the_first_answer_then_the_bandwidth_delay_product() {
        let window = Arc::new(Window::default());
        let a = admit_now(&window, 1_000_000).expect("first");
        let b = admit_now(&window, 1_000_000).expect("second");
        assert_eq!(window.limit(), None);
        // 10 ms round trips: a's answer saw 1 MB in 10 ms, b's 2 MB in 10 ms
        // (it was admitted with a; a came back meanwhile).
        tokio::time::advance(Duration::from_millis(10)).await;
        a.answered();
        b.answered();
        // 2 x 200 MB/s x 10 ms.
        assert_eq!(window.limit(), Some(4_000_000));
        let slots: Vec<Slot> = (0..4)
            .map(|_| admit_now(&window, 1_000_000).expect("fits"))
            .collect();
        assert!(admit_now(&window, 1).is_none(), "4 MB are in flight");
        drop(slots);
        assert!(admit_now(&window, 1).is_some(), "dropped slots free their room");
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_are_admitted_in_order_as_answers_come() {
        let window = Arc::new(Window::default());
        // One answer: 100 bytes in 1 ms, a window of 200 bytes.
        let first = admit_now(&window, 100).unwrap();
        tokio::time::advance(Duration::from_millis(1)).await;
        first.answered();
        assert_eq!(window.limit(), Some(200));
        let a = admit_now(&window, 100).unwrap();
        let b = admit_now(&window, 100).unwrap();
        assert!(admit_now(&window, 100).is_none());
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiting = Vec::new();
        for i in 0..3 {
            let (window, order) = (Arc::clone(&window), Arc::clone(&order));
            waiting.push(tokio::spawn(async move {
                let slot = window.admit(100).await;
                order.lock().unwrap().push(i);
                slot
            }));
            tokio::task::yield_now().await;
        }
        assert!(order.lock().unwrap().is_empty(), "all three wait");
        tokio::time::advance(Duration::from_millis(1)).await;
        a.answered();
        b.answered();
        let mut slots = Vec::new();
        for w in waiting {
            slots.push(w.await.unwrap());
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
    }

    #[tokio::test(start_paused = true)]
    async fn old_samples_are_forgotten() {
        let window = Arc::new(Window::default());
        let a = admit_now(&window, 1000).unwrap();
        tokio::time::advance(Duration::from_millis(1)).await;
        a.answered();
        assert_eq!(window.limit(), Some(2000));
        let held: Vec<Slot> = (0..2).map(|_| admit_now(&window, 1000).unwrap()).collect();
        assert!(admit_now(&window, 1000).is_none(), "2,000 bytes are in flight");
        // Past two rate periods without answers the rate is unknown again,
        // and nothing is held back.
        tokio::time::advance(2 * RATE_PERIOD).await;
        assert_eq!(window.limit(), None);
        assert!(admit_now(&window, 1000).is_some());
        drop(held);
    }
}
