//! A consumer's status over a sliding window, the way Burrow evaluates a
//! consumer: a partition is sampled every [`SAMPLE_INTERVAL`], the last
//! [`WINDOW`] samples are kept, and [`evaluate`] judges them (the rules
//! are in `dashboards/README.md` and on [`evaluate`]). A mirror's
//! partitions and consumer groups' partitions are judged alike.

use std::time::Duration;

/// How often a mirror's partitions are sampled.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);

/// Samples kept per partition: one minute at [`SAMPLE_INTERVAL`].
pub const WINDOW: usize = 12;

/// Fewer samples than this say nothing about a trend: `OK`.
const MIN_SAMPLES: usize = 3;

/// A partition's evaluated status, best to worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Keeping up.
    Ok,
    /// Moving, but the lag grew at every sample across the window.
    Warn,
    /// Not moving while behind.
    Stall,
    /// Stopped, or no longer committing while behind.
    Stop,
    /// Retrying after errors, or its position went backwards.
    Err,
}

impl Level {
    /// Every level, for the `status` label.
    pub const ALL: [Level; 5] = [Level::Ok, Level::Warn, Level::Stall, Level::Stop, Level::Err];

    /// `OK`, `WARN`, `STALL`, `STOP`, `ERR`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "OK",
            Level::Warn => "WARN",
            Level::Stall => "STALL",
            Level::Stop => "STOP",
            Level::Err => "ERR",
        }
    }
}

/// One sample of a partition.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Wall-clock time, milliseconds since the epoch.
    pub t_ms: i64,
    /// Next source offset to mirror, once known.
    pub position: Option<i64>,
    /// The source's high watermark as last fetched (-1 before).
    pub high_watermark: i64,
    /// Lag in records.
    pub lag_records: i64,
    /// Lag in seconds, once known.
    pub lag_seconds: Option<f64>,
    /// Seconds since the last commit, if any.
    pub commit_age: Option<f64>,
    /// Errors seen so far (monotonic).
    pub errors: u64,
    /// How the consumer itself says it is.
    pub health: Health,
}

/// How a consumer itself says it is, beside what its samples show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Running (or starting).
    Running,
    /// Retrying after an error (the message).
    Retrying(String),
    /// Stopped (the message).
    Stopped(String),
}

/// A status and the rule that gave it, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The status.
    pub level: Level,
    /// Why, for people.
    pub reason: String,
}

fn verdict(level: Level, reason: impl Into<String>) -> Verdict {
    Verdict {
        level,
        reason: reason.into(),
    }
}

/// Judges a window of samples (oldest first) of a partition that commits
/// every `commit_interval`. First match wins:
///
/// 1. `ERR`: retrying after an error now, errors within the window, or
///    the position went backwards.
/// 2. `STOP`: stopped; or behind with the last commit older than the
///    window and than three commit intervals.
/// 3. `OK`: fewer than 3 samples, or the lag was zero in some sample.
/// 4. `STALL`: the position did not move across the window.
/// 5. `WARN`: the lag grew from every sample to the next.
/// 6. `OK`.
pub fn evaluate(window: &[Sample], commit_interval: Duration) -> Verdict {
    let Some(last) = window.last() else {
        return verdict(Level::Ok, "not sampled yet");
    };
    let first = &window[0];
    if let Health::Retrying(why) = &last.health {
        return verdict(Level::Err, format!("retrying: {why}"));
    }
    if last.errors > first.errors {
        return verdict(
            Level::Err,
            format!("{} errors within the window", last.errors - first.errors),
        );
    }
    let positions: Vec<i64> = window.iter().filter_map(|s| s.position).collect();
    if positions.windows(2).any(|w| w[1] < w[0]) {
        return verdict(Level::Err, "the position went backwards");
    }
    if let Health::Stopped(why) = &last.health {
        return verdict(Level::Stop, format!("stopped: {why}"));
    }
    let span = Duration::from_millis((last.t_ms - first.t_ms).max(0) as u64);
    let stale_after = span.max(commit_interval * 3);
    if last.lag_records > 0 && window.len() >= MIN_SAMPLES {
        if let Some(age) = last.commit_age.filter(|age| *age > stale_after.as_secs_f64()) {
            return verdict(Level::Stop, format!("no commit for {age:.0} s while behind"));
        }
    }
    if window.len() < MIN_SAMPLES {
        return verdict(Level::Ok, "too few samples to judge a trend");
    }
    if window.iter().any(|s| s.lag_records == 0) {
        return verdict(Level::Ok, "lag was zero within the window");
    }
    if positions.len() == window.len() && positions.first() == positions.last() {
        return verdict(
            Level::Stall,
            format!(
                "position {} did not move in {:.0} s while {} records behind",
                positions[0],
                span.as_secs_f64(),
                last.lag_records
            ),
        );
    }
    if window.windows(2).all(|w| w[1].lag_records > w[0].lag_records) {
        return verdict(
            Level::Warn,
            format!(
                "lag grew at every sample, {} to {} records",
                first.lag_records, last.lag_records
            ),
        );
    }
    verdict(Level::Ok, "moving, lag not growing")
}

/// Records per second the position moved across the window (0 with fewer
/// than two positions).
pub fn rate(window: &[Sample]) -> f64 {
    let known: Vec<(i64, i64)> = window
        .iter()
        .filter_map(|s| s.position.map(|p| (s.t_ms, p)))
        .collect();
    match (known.first(), known.last()) {
        (Some(&(t0, p0)), Some(&(t1, p1))) if t1 > t0 => (p1 - p0).max(0) as f64 * 1000.0 / (t1 - t0) as f64,
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: i64, position: i64, lag: i64) -> Sample {
        Sample {
            t_ms: t * 5_000,
            position: Some(position),
            high_watermark: position + lag,
            lag_records: lag,
            lag_seconds: Some(if lag == 0 { 0.0 } else { 1.0 }),
            commit_age: Some(1.0),
            errors: 0,
            health: Health::Running,
        }
    }

    fn level(window: &[Sample]) -> Level {
        evaluate(window, Duration::from_secs(5)).level
    }

    #[test]
    fn each_rule_gives_its_status() {
        let caught_up: Vec<Sample> = (0..12).map(|t| sample(t, 100 + t * 10, 0)).collect();
        assert_eq!(level(&caught_up), Level::Ok);

        let keeping_pace: Vec<Sample> = (0..12).map(|t| sample(t, 100 + t * 10, 5 + t % 2)).collect();
        assert_eq!(level(&keeping_pace), Level::Ok);

        let falling_behind: Vec<Sample> = (0..12).map(|t| sample(t, 100 + t * 10, 5 + t * 3)).collect();
        let verdict = evaluate(&falling_behind, Duration::from_secs(5));
        assert_eq!(verdict.level, Level::Warn);
        assert_eq!(verdict.reason, "lag grew at every sample, 5 to 38 records");

        let stalled: Vec<Sample> = (0..12).map(|t| sample(t, 100, 5 + t)).collect();
        assert_eq!(level(&stalled), Level::Stall);

        let mut not_committing = keeping_pace.clone();
        not_committing.last_mut().unwrap().commit_age = Some(120.0);
        assert_eq!(level(&not_committing), Level::Stop);

        let mut stopped = caught_up.clone();
        stopped.last_mut().unwrap().health = Health::Stopped("records lost".into());
        assert_eq!(level(&stopped), Level::Stop);

        let mut retrying = caught_up.clone();
        retrying.last_mut().unwrap().health = Health::Retrying("target down".into());
        let verdict = evaluate(&retrying, Duration::from_secs(5));
        assert_eq!(
            (verdict.level, verdict.reason.as_str()),
            (Level::Err, "retrying: target down")
        );

        let mut errors = caught_up.clone();
        errors.last_mut().unwrap().errors = 2;
        assert_eq!(level(&errors), Level::Err);

        let mut rewound = caught_up.clone();
        rewound[5].position = Some(0);
        assert_eq!(level(&rewound), Level::Err);
    }

    #[test]
    fn a_short_window_is_ok_and_a_stall_needs_lag() {
        let short: Vec<Sample> = (0..2).map(|t| sample(t, 100, 50)).collect();
        assert_eq!(level(&short), Level::Ok);
        assert_eq!(level(&[]), Level::Ok);
        let idle: Vec<Sample> = (0..12).map(|t| sample(t, 100, 0)).collect();
        assert_eq!(level(&idle), Level::Ok);
    }

    #[test]
    fn rate_is_the_positions_slope() {
        let window: Vec<Sample> = (0..12).map(|t| sample(t, 100 + t * 50, 0)).collect();
        assert_eq!(rate(&window), 10.0);
        assert_eq!(rate(&window[..1]), 0.0);
    }
}
