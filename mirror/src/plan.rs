//! How much one partition's fetches ask for and where fetches ahead start:
//! pure arithmetic over the source's batch density, the link's estimate and
//! the mirror's budget, kept apart from the tasks that send them
//! ([`crate::partition`]).
//!
//! Before the partition's first answer, the density comes from the source's
//! log itself (its size on disk over its offsets, [`Density::from_log`]),
//! so that fetches ahead go out with the first fetch rather than a round
//! trip after it; the first answer replaces that estimate.

use crate::grouped;
use crate::topics::DEFAULT_MAX_MESSAGE_BYTES;

/// Bytes asked for per partition per fetch, at most ...
pub const MAX_FETCH_BYTES: usize = 32 << 20;
/// ... and at least, when the budget is shared by many partitions (a
/// larger first batch still comes whole, KIP-74).
pub const MIN_FETCH_BYTES: usize = 64 << 10;
/// Batches one fetch asks for at least, budget allowing: an answer wastes
/// about one batch (the one it cuts short, or, for a fetch ahead, the
/// batch its guessed offset overlaps), so 64 waste under 2% (32 wasted
/// 3.7% of what one partition of lz4 batches fetched over 100 ms: fetches
/// are at most [`MAX_FETCH_BYTES`] anyway).
const BATCHES_PER_FETCH: f64 = 64.0;
/// The largest batch a Kafka topic takes by default (`message.max.bytes`):
/// what a partition's first fetch asks for at least, before its batches'
/// size is known, if its share of the budget allows, so that its first
/// batch comes in any answer; and the batch size assumed while only the
/// log's size is known.
const KAFKA_MAX_BATCH: usize = DEFAULT_MAX_MESSAGE_BYTES;

/// How large the source's batches are, per offset and per batch, from
/// what was fetched (moving averages; 0 before anything was), or, before
/// that, estimated from the log's size.
#[derive(Debug, Default, Clone, Copy)]
pub struct Density {
    bytes_per_offset: f64,
    bytes_per_batch: f64,
    /// Estimated from the log's size rather than seen in batches: the
    /// batch size is a guess (the largest Kafka takes by default), and
    /// the first answer replaces both.
    from_log: bool,
}

impl Density {
    /// An estimate from the source log's `size` in bytes over the
    /// `offsets` it holds (None if either is not positive).
    pub fn from_log(size: i64, offsets: i64) -> Option<Density> {
        (size > 0 && offsets > 0).then(|| Density {
            bytes_per_offset: size as f64 / offsets as f64,
            bytes_per_batch: KAFKA_MAX_BATCH.min(size as usize) as f64,
            from_log: true,
        })
    }

    /// Bytes per offset (0 while unknown).
    pub fn bytes_per_offset(&self) -> f64 {
        self.bytes_per_offset
    }

    /// Bytes per batch (0 while unknown).
    pub fn bytes_per_batch(&self) -> f64 {
        self.bytes_per_batch
    }

    /// Takes the whole batches of one answer: `bytes` over `offsets`
    /// offsets in `batches` batches.
    pub fn observe(&mut self, bytes: usize, offsets: i64, batches: usize) {
        if bytes == 0 || offsets <= 0 || batches == 0 {
            return;
        }
        let (per_offset, per_batch) = (bytes as f64 / offsets as f64, bytes as f64 / batches as f64);
        if self.bytes_per_offset == 0.0 || self.from_log {
            (self.bytes_per_offset, self.bytes_per_batch) = (per_offset, per_batch);
            self.from_log = false;
        } else {
            self.bytes_per_offset = 0.7 * self.bytes_per_offset + 0.3 * per_offset;
            self.bytes_per_batch = 0.7 * self.bytes_per_batch + 0.3 * per_batch;
        }
    }

    /// Where the next fetch should start, after one from `offset` of
    /// `bytes` bytes: about one batch before its answer's expected end
    /// (the answer starts with the batch holding `offset` and ends short
    /// of its last, cut batch), so that answers overlap by about a batch
    /// rather than leave gaps. None until a density is known.
    pub fn offset_after(&self, offset: i64, bytes: usize) -> Option<i64> {
        if self.bytes_per_offset <= 0.0 {
            return None;
        }
        let ahead = (bytes as f64 - self.bytes_per_batch) / self.bytes_per_offset;
        (ahead >= 1.0).then(|| offset.saturating_add(ahead as i64))
    }
}

/// How much one fetch asks for: its share (one of `partitions`) of what
/// the link to the leader should have in flight (`in_flight`, see
/// [`grouped::LinkEstimate`]) spread over the fetch lanes, at least
/// [`BATCHES_PER_FETCH`] batches seen (before any is, [`KAFKA_MAX_BATCH`]),
/// within [`MIN_FETCH_BYTES`]..[`MAX_FETCH_BYTES`] and a quarter of the
/// `budget`. Returns it with the bytes the partition may keep in flight:
/// its share, at least three fetches (so that the link stays busy while
/// answers are written), within half the budget; a partition alone,
/// within three quarters of it (the last quarter holds the answer being
/// written), which makes room for three fetches of the most one asks for:
/// their answers end out of step ([`step_ask`]), so two still stream while
/// the third's successor travels. Several partitions' answers end out of
/// step anyway.
pub fn fetch_plan(partitions: usize, budget: usize, in_flight: usize, density: &Density) -> (usize, usize) {
    let partitions = partitions.max(1);
    let most = if partitions == 1 {
        budget / 4 * 3
    } else {
        budget / 2
    };
    let target = (in_flight / partitions).min(most);
    let batches = if density.bytes_per_batch > 0.0 && !density.from_log {
        (BATCHES_PER_FETCH * density.bytes_per_batch) as usize
    } else {
        KAFKA_MAX_BATCH.min(budget / partitions)
    };
    let ask = (target / grouped::FETCH_LANES)
        .max(batches)
        .clamp(MIN_FETCH_BYTES, MAX_FETCH_BYTES)
        .min((budget / 4).max(MIN_FETCH_BYTES));
    (ask, target.max(3 * ask).min(most).max(ask))
}

/// What the `step`-th fetch (from 1) of a partition that starts fetching
/// with data waiting asks for, while it sends the fetches it keeps out
/// (`target` over `ask`, within [`grouped::FETCH_LANES`]), if it is the
/// mirror's only one (of `partitions`): a staircase, `ask` times `step`
/// over that many, then `ask`. Fetches that start together and ask alike
/// share the link alike and end together, and their successors, sent
/// together, leave it idle for a round trip; answers of a staircase end
/// one after another, and each successor travels while the others stream
/// (their successors, asking alike, stay in step after them). Several
/// partitions' fetches end out of step anyway, and each of them may have
/// only a few fetches to make: they ask for `ask` from the first.
pub fn step_ask(step: usize, ask: usize, target: usize, partitions: usize) -> usize {
    let steps = (target / ask.max(1)).clamp(1, grouped::FETCH_LANES);
    if step >= steps || partitions > 1 {
        return ask;
    }
    (ask / steps * step.max(1)).max(MIN_FETCH_BYTES)
}

/// What to ask for after an answer of `asked` bytes brought no whole
/// batch though records wait: the first batch is larger. Kafka (0.10.1
/// on, KIP-74) sends it whole only in the first partition of an answer
/// that has data, and nothing in the others; older brokers cut it. Twice
/// as much, within the budget (or [`MAX_FETCH_BYTES`] if that is more:
/// a batch is never refused for the budget).
pub fn grow(asked: usize, budget: usize) -> usize {
    (asked * 2).min(budget.max(MAX_FETCH_BYTES))
}

/// Where the next fetch ahead goes, with `out` fetches out and the last
/// of them (`last`: its offset and ask) furthest on: after it, if fewer
/// than [`grouped::FETCH_LANES`] are out and their asks of `ask` are
/// still under what the partition may keep in flight (`target`). None
/// until the source's density is known.
pub fn ahead_offset(
    out: usize,
    last: (i64, usize),
    density: &Density,
    ask: usize,
    target: usize,
) -> Option<i64> {
    if out >= grouped::FETCH_LANES || out * ask >= target {
        return None;
    }
    density.offset_after(last.0, last.1)
}

#[cfg(test)]
mod tests {
    use super::{fetch_plan, grow, step_ask, Density, KAFKA_MAX_BATCH, MAX_FETCH_BYTES, MIN_FETCH_BYTES};

    const MIB: usize = 1 << 20;

    #[test]
    fn fetches_ask_for_many_batches_and_keep_three_out_within_three_quarters_of_the_budget() {
        let unknown = Density::default();
        let mut large = Density::default();
        // 16 batches of 1,000 records of 500 bytes.
        large.observe(8_000_000, 16_000, 16);
        // One partition, 64 MiB budget, 32 MiB wanted in flight: before
        // anything is known, a quarter of it per lane; then 64 batches,
        // within a quarter of the budget, and three of them out.
        assert_eq!(fetch_plan(1, 64 * MIB, 32 * MIB, &unknown), (8 * MIB, 32 * MIB));
        assert_eq!(fetch_plan(1, 64 * MIB, 32 * MIB, &large), (16 * MIB, 48 * MIB));
        // A larger budget: 64 batches each, three out within three
        // quarters of it; two within half of it for one of 16 partitions.
        assert_eq!(
            fetch_plan(1, 128 * MIB, 32 * MIB, &large),
            (32_000_000, 96_000_000)
        );
        assert_eq!(
            fetch_plan(16, 128 * MIB, 32 * MIB, &large),
            (32_000_000, 64 * MIB)
        );
        assert_eq!(
            fetch_plan(1, 256 * MIB, 32 * MIB, &large),
            (32_000_000, 96_000_000)
        );
        // Larger batches: no more than the most a fetch asks for.
        let mut larger = Density::default();
        larger.observe(16_000_000, 16_000, 16);
        assert_eq!(fetch_plan(1, 256 * MIB, 32 * MIB, &larger).0, MAX_FETCH_BYTES);
        // Many partitions: a first fetch asks for Kafka's largest default
        // batch while the budget allows it, the least when it does not.
        assert_eq!(fetch_plan(16, 64 * MIB, 32 * MIB, &unknown).0, KAFKA_MAX_BATCH);
        assert_eq!(
            fetch_plan(1_000, 64 * MIB, 32 * MIB, &unknown).0,
            64 * MIB / 1_000
        );
        assert_eq!(
            fetch_plan(10_000, 64 * MIB, 32 * MIB, &unknown).0,
            MIN_FETCH_BYTES
        );
        // An estimate from the log's size asks as if nothing were known:
        // its batch size is a guess.
        let from_log = Density::from_log(1 << 30, 1_000_000).expect("a log");
        assert_eq!(
            fetch_plan(1_000, 64 * MIB, 32 * MIB, &from_log),
            fetch_plan(1_000, 64 * MIB, 32 * MIB, &unknown)
        );
        // A tiny budget bounds everything.
        assert_eq!(
            fetch_plan(1, MIB, 32 * MIB, &large),
            (MIN_FETCH_BYTES.max(MIB / 4), 3 * MIB / 4)
        );
        // An answer without a whole batch though records wait: twice as
        // much next time, within the budget (a batch is never refused).
        assert_eq!(grow(MIB / 2, 64 * MIB), MIB);
        assert_eq!(grow(48 * MIB, 64 * MIB), 64 * MIB);
        assert_eq!(grow(MIB, 4 * MIB), 2 * MIB);
        assert_eq!(grow(32 * MIB, 4 * MIB), MAX_FETCH_BYTES);
    }

    #[test]
    fn a_partitions_first_fetches_ask_in_a_staircase() {
        // Three out: a third, two thirds, then the whole ask.
        let (ask, target) = (30 * MIB, 90 * MIB);
        let steps: Vec<usize> = (1..=5).map(|k| step_ask(k, ask, target, 1)).collect();
        assert_eq!(steps, [10 * MIB, 20 * MIB, ask, ask, ask]);
        // One out: no staircase; never below the least a fetch asks for.
        assert_eq!(step_ask(1, ask, ask, 1), ask);
        assert_eq!(
            step_ask(1, MIN_FETCH_BYTES, 4 * MIN_FETCH_BYTES, 1),
            MIN_FETCH_BYTES
        );
        // At most one step per fetch lane.
        assert_eq!(step_ask(1, 4 * MIB, 64 * MIB, 1), MIB);
        // One of several partitions: no staircase.
        assert_eq!(step_ask(1, ask, target, 16), ask);
    }

    #[test]
    fn fetches_ahead_start_a_batch_short_of_the_expected_end() {
        let mut density = Density::default();
        assert_eq!(density.offset_after(100, 1 << 20), None, "nothing seen yet");
        // 10 batches of 100 records of 1,000 bytes.
        density.observe(1_000_000, 1_000, 10);
        // 1 MB ahead, less one batch of 100,000 bytes: 900 offsets.
        assert_eq!(density.offset_after(100, 1_000_000), Some(1_000));
        // A fetch smaller than one batch guesses nothing.
        assert_eq!(density.offset_after(100, 50_000), None);
        // Larger records since: the estimate moves towards them.
        density.observe(1_000_000, 100, 10);
        assert!(density.bytes_per_offset > 1_000.0 && density.bytes_per_offset < 10_000.0);
        // Answers without whole batches change nothing.
        let before = density.bytes_per_offset;
        density.observe(0, 0, 0);
        assert_eq!(density.bytes_per_offset, before);
    }

    #[test]
    fn the_logs_size_guesses_fetches_ahead_until_the_first_answer() {
        assert!(Density::from_log(0, 100).is_none(), "an empty log");
        assert!(Density::from_log(1_000, 0).is_none(), "no offsets");
        // 1 GB over 1,000,000 offsets: 1,074 bytes each, batches assumed
        // as large as Kafka takes by default (the overlap kept).
        let mut density = Density::from_log(1 << 30, 1_000_000).expect("a log");
        let ahead = density.offset_after(0, 8 << 20).expect("a guess");
        let expected = ((8 << 20) - KAFKA_MAX_BATCH) as f64 / ((1 << 30) as f64 / 1e6);
        assert_eq!(ahead, expected as i64);
        // The first answer replaces the estimate rather than averaging
        // with it: 100,000-byte batches of 100 records.
        density.observe(1_000_000, 1_000, 10);
        assert_eq!(density.bytes_per_offset(), 1_000.0);
        assert_eq!(density.bytes_per_batch(), 100_000.0);
        density.observe(1_000_000, 1_000, 10);
        assert_eq!(density.bytes_per_offset(), 1_000.0);
    }
}
