//! Jittered exponential backoff with a deadline, for retry loops.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Result, UpstreamError};

/// Delays that double from `base` up to `max`, each drawn at random from
/// its upper half, so many clients retrying after one outage do not
/// return in step.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// Starts at `base`, never waits longer than `max`.
    pub fn new(base: Duration, max: Duration) -> Backoff {
        Backoff {
            base,
            max: max.max(base),
            next: base,
        }
    }

    /// The next delay, and doubles the one after.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.next;
        self.next = (self.next * 2).min(self.max);
        let nanos = ceiling.as_nanos() as u64;
        Duration::from_nanos(nanos / 2 + fastrand::u64(0..=nanos / 2))
    }

    /// Back to the first delay (after a success).
    pub fn reset(&mut self) {
        self.next = self.base;
    }

    /// Sleeps the next delay, or, if that would pass `deadline`, gives up
    /// with [`UpstreamError::Deadline`] carrying `last`.
    pub async fn wait(
        &mut self,
        deadline: Instant,
        started: Instant,
        what: &str,
        last: UpstreamError,
    ) -> Result<()> {
        let delay = self.next_delay();
        let now = Instant::now();
        if now + delay > deadline {
            return Err(UpstreamError::Deadline {
                what: what.to_owned(),
                after: now - started,
                last: Box::new(last),
            });
        }
        tokio::time::sleep(delay).await;
        Ok(())
    }
}

impl Backoff {
    /// For connecting to a broker that refuses or drops connections: 50 ms
    /// doubling to 1 s, as the Java client's `reconnect.backoff.ms` and
    /// `reconnect.backoff.max.ms`, so that a broker that comes back is
    /// reached within about a second.
    pub fn reconnect() -> Backoff {
        Backoff::new(Duration::from_millis(50), Duration::from_secs(1))
    }
}

impl Default for Backoff {
    /// 100 ms doubling to 10 s, as librdkafka's `retry.backoff.ms` and
    /// `retry.backoff.max.ms`.
    fn default() -> Self {
        Backoff::new(Duration::from_millis(100), Duration::from_secs(10))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_within_jitter_and_cap() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(500));
        let delays: Vec<Duration> = (0..5).map(|_| backoff.next_delay()).collect();
        let ceilings = [100, 200, 400, 500, 500];
        for (delay, ceiling) in delays.iter().zip(ceilings) {
            let ceiling = Duration::from_millis(ceiling);
            assert!(
                *delay <= ceiling && *delay >= ceiling / 2,
                "{delay:?} vs {ceiling:?}"
            );
        }
        backoff.reset();
        assert!(backoff.next_delay() <= Duration::from_millis(100));
    }

    #[tokio::test(start_paused = true)]
    async fn wait_gives_up_at_the_deadline() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(1));
        let started = Instant::now();
        let deadline = started + Duration::from_millis(2500);
        let last = UpstreamError::NoBroker {
            cluster: "nj".into(),
            reason: "refused".into(),
        };
        let mut waits = 0;
        let error = loop {
            match backoff.wait(deadline, started, "Metadata", last.clone()).await {
                Ok(()) => waits += 1,
                Err(error) => break error,
            }
        };
        assert!((2..=4).contains(&waits), "{waits}");
        assert!(Instant::now() <= deadline);
        assert!(error.to_string().starts_with("Metadata gave up after"), "{error}");
    }
}
