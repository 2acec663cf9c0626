//! Where a partition goes on from: exactly after the last batch already on
//! the target.
//!
//! Batches travel with their contents unchanged, and turning the same
//! source batches into target batches always gives the same bytes, so the
//! target's tail can be compared with the source batch by batch. With
//! `coalesce_below`, a target batch may instead hold several consecutive
//! source batches merged, and which ones depended on what a fetch brought;
//! merging the same batches again gives the same bytes, so a target batch
//! of N records is compared with the source batches that hold the next N
//! records, merged when they are more than one ([`batch::made_of`]):
//!
//! - **Known point** (the source kept the commit's metadata, or this
//!   process acknowledged the point itself): source offset C maps to target
//!   offset T. Every target batch from T on must be, in order, made of the
//!   next batches the source gives from C; the partition goes on after the
//!   last one. A mismatch stops the partition ([`MirrorError::Diverged`]),
//!   except with loop prevention ([`batch::Origins`]): topics that keep
//!   their names both ways have other writers on the target (its own
//!   producers), so a target batch that is not the next source batches
//!   and holds a record of theirs (no origin, or the target's) is stepped
//!   over; one whose records all came from elsewhere is the mirror's, and
//!   a mismatch stops the partition as before.
//! - **Source offset only** (a source that drops commit metadata, as Tansu
//!   0.6.0 does): the target's last batch is looked for among the batches
//!   the source gives from C, alone or as a run of them merged
//!   ([`batch::Coalesced`]); the partition goes on after it, or at C when
//!   it is not there (nothing after C was mirrored).
//! - **No commit**: the partition starts at `start` (earliest or latest)
//!   and commits that position, with the target's end, before it produces
//!   anything, so a crash before the first periodic commit still leaves a
//!   known point.

use std::sync::Arc;
use std::time::Duration;
use strait_upstream::{Cluster, UpstreamError};

use crate::batch::{
    self, Coalesced, FetchedBatches, Fingerprint, Origins, PartitionTransformer, SourceBatch, SourceRange,
    TargetBatch, TransformOptions,
};
use crate::error::{self, MirrorError};
use crate::grouped::Fetched;
use crate::positions::{self, ToCommit};
use crate::shared::{Shared, StartAt};
use crate::state::PartitionState;

/// Most bytes read per fetch while resuming.
const READ_BYTES: i32 = 8 << 20;
/// How long a target read may wait for data. Reads ask for at least 0
/// bytes, so Kafka and Strait answer at once; Tansu ignores that and waits,
/// and answers a wait of 0 without any partition, hence not 0.
const READ_WAIT: Duration = Duration::from_millis(10);

/// Where a partition goes on from, and how it got there.
#[derive(Debug, Default)]
pub struct Resumed {
    /// Where the partition starts (over), if it does: the offset map
    /// starts again from there ([`PartitionState::start_at`]).
    pub start: Option<(i64, i64)>,
    /// The target batches found already there after it (the source
    /// records each holds, its target offset), in order.
    pub found: Vec<(SourceRange, i64)>,
    /// The (source offset, target offset) to go on from.
    pub at: (i64, i64),
}

impl Resumed {
    fn at(at: (i64, i64)) -> Resumed {
        Resumed {
            start: Some(at),
            found: Vec::new(),
            at,
        }
    }

    /// Records it in `state`: the start, the batches found, the position.
    pub fn record(&self, state: &PartitionState) {
        if let Some(start) = self.start {
            state.start_at(start);
        }
        for (source, target) in &self.found {
            state.acked_batch(source, *target);
        }
        state.set_acked(self.at.0, self.at.1);
    }
}

/// Where the partition goes on from.
pub async fn resume(
    shared: &Shared,
    state: &PartitionState,
    options: TransformOptions,
    origins: Option<Arc<Origins>>,
) -> Result<Resumed, MirrorError> {
    let acked = state.acked();
    let (source_offset, target_offset) = match acked {
        Some((s, t)) => (s, Some(t)),
        None => {
            let committed = positions::load(
                &shared.source,
                &shared.group,
                &state.source_topic,
                &[state.partition],
            )
            .await
            .map_err(error::source)?;
            match committed.first() {
                Some((_, c)) => (c.offset, c.target_offset),
                None => return first_start(shared, state).await,
            }
        }
    };
    let source = SourceCursor::new(shared, state, source_offset, options, origins);
    match target_offset {
        Some(t) => {
            let mut walked = walk(shared, state, source, source_offset, t).await?;
            if acked.is_none() && walked.start.is_none() {
                // A new process: the map starts over at the commit.
                walked.start = Some((source_offset, t));
            }
            Ok(walked)
        }
        None => align(shared, state, source, source_offset).await.map(Resumed::at),
    }
}

async fn first_start(shared: &Shared, state: &PartitionState) -> Result<Resumed, MirrorError> {
    let timestamp = match shared.start {
        StartAt::Earliest => -2,
        StartAt::Latest => -1,
    };
    let start = list_offset(&shared.source, &state.source_topic, state.partition, timestamp)
        .await
        .map_err(error::source)?;
    let (end, _) = target_tail(&shared.target, &state.target_topic, state.partition).await?;
    positions::commit(
        &shared.source,
        &shared.group,
        shared.generation().as_ref(),
        &[ToCommit {
            topic: state.source_topic.to_string(),
            partition: state.partition,
            offset: start,
            target_offset: end,
        }],
    )
    .await
    .map_err(error::source)?;
    state.committed(start);
    tracing::info!(
        mirror = %shared.name, topic = %state.source_topic, partition = state.partition,
        source_offset = start, target_offset = end, "partition starts (no committed position)"
    );
    Ok(Resumed::at((start, end)))
}

/// Known point: compare the target from `t` with the source from `s`
/// (where `source` starts).
async fn walk(
    shared: &Shared,
    state: &PartitionState,
    mut source: SourceCursor<'_>,
    s: i64,
    t: i64,
) -> Result<Resumed, MirrorError> {
    let (mut s_next, mut t_next) = (s, t);
    let mut stepped_over = 0u64;
    let mut found_batches = Vec::new();
    let mut offset = t;
    loop {
        let read = match read(&shared.target, &state.target_topic, state.partition, offset).await {
            Ok(read) => read,
            Err(e) if e.code() == Some(ResponseError::OffsetOutOfRange) => {
                let (end, _) = target_tail(&shared.target, &state.target_topic, state.partition).await?;
                if end < t {
                    tracing::error!(
                        mirror = %shared.name, topic = %state.target_topic, partition = state.partition,
                        committed_target_offset = t, target_end = end,
                        "the target lost records the mirror had written and committed; mirroring goes on from the committed position"
                    );
                    return Ok(Resumed::at((s, end)));
                }
                return Ok(Resumed {
                    start: None,
                    found: found_batches,
                    at: (s_next, t_next),
                });
            }
            Err(e) => return Err(error::target(e)),
        };
        let mut any = false;
        for found in FetchedBatches::new(&read.records) {
            let found = found.map_err(|e| diverged(state, format!("unreadable target batch: {e}")))?;
            if found.last_offset() < offset {
                continue;
            }
            any = true;
            let header = found.header();
            let theirs = fingerprint(found)?;
            // The source batches it was made of: one, or several merged
            // (`coalesce_below`), as many as hold its records.
            let mut run = Vec::new();
            let mut held = 0i64;
            let mut short = false;
            while held < i64::from(header.record_count) {
                let Some(ours) = source.next().await? else {
                    short = true;
                    break;
                };
                held += i64::from(ours.record_count());
                run.push(ours);
            }
            let source_next = run.last().map_or(s_next, |b| b.source().last_offset + 1);
            let same = !short
                && held == i64::from(header.record_count)
                && batch::made_of(&run, theirs, source.options()).map_err(|error| {
                    MirrorError::SourceData {
                        offset: s_next,
                        error,
                    }
                })?;
            if !same && source.written_on_target(found)? {
                // The target's own producers' batch (names kept both ways,
                // loop prevention): the next source batches may follow it.
                source.unread(run);
                stepped_over += 1;
                offset = found.last_offset() + 1;
                continue;
            }
            if short {
                return Err(diverged(
                    state,
                    format!(
                        "the target holds a batch at offset {} that the source does not have after offset {s}",
                        header.base_offset
                    ),
                ));
            }
            if !same {
                return Err(diverged(
                    state,
                    format!(
                        "the target's batch at offset {} differs from the source's records ending at offset {}",
                        header.base_offset,
                        source_next - 1
                    ),
                ));
            }
            found_batches.push((
                SourceRange::joined(run.iter().map(|b| b.source())),
                header.base_offset,
            ));
            s_next = source_next;
            t_next = found.last_offset() + 1;
            offset = t_next;
        }
        if !any {
            if s_next != s || t_next != t {
                tracing::info!(
                    mirror = %shared.name, topic = %state.source_topic, partition = state.partition,
                    committed = s, resumes_at = s_next, already_on_target = s_next - s,
                    other_writers_batches = stepped_over,
                    "records after the committed position were already on the target; not sending them again"
                );
            } else if stepped_over > 0 {
                tracing::info!(
                    mirror = %shared.name, topic = %state.source_topic, partition = state.partition,
                    committed = s, other_writers_batches = stepped_over,
                    "only the target's own producers wrote after the committed position; resuming there"
                );
            }
            return Ok(Resumed {
                start: None,
                found: found_batches,
                at: (s_next, t_next),
            });
        }
    }
}

/// Source offset only: find the target's last batch among the source's
/// batches from `s` (where `source` starts).
async fn align(
    shared: &Shared,
    state: &PartitionState,
    mut source: SourceCursor<'_>,
    s: i64,
) -> Result<(i64, i64), MirrorError> {
    let (end, last) = target_tail(&shared.target, &state.target_topic, state.partition).await?;
    let Some((last, records)) = last else {
        return Ok((s, end));
    };
    let mut looking = Coalesced::matching(records, last, source.options());
    while let Some(ours) = source.next().await? {
        let source_next = ours.source().last_offset + 1;
        let found = looking.push(ours).map_err(|error| MirrorError::SourceData {
            offset: source_next,
            error,
        })?;
        if found {
            tracing::info!(
                mirror = %shared.name, topic = %state.source_topic, partition = state.partition,
                committed = s, resumes_at = source_next,
                "the source keeps no commit metadata; found the target's last batch by content"
            );
            return Ok((source_next, end));
        }
    }
    Ok((s, end))
}

fn fingerprint(found: SourceBatch<'_>) -> Result<Fingerprint, MirrorError> {
    batch::fingerprint(found.bytes()).map_err(|e| malformed_target(e.to_string()))
}

/// A batch read on the target that does not decode.
fn malformed_target(detail: String) -> MirrorError {
    MirrorError::Target {
        error: UpstreamError::Malformed {
            broker: "target".to_owned(),
            api: kafka_protocol::messages::ApiKey::Fetch,
            detail,
        },
    }
}

fn diverged(state: &PartitionState, detail: String) -> MirrorError {
    MirrorError::Diverged {
        source_topic: state.source_topic.to_string(),
        target_topic: state.target_topic.to_string(),
        partition: state.partition,
        detail,
    }
}

/// The target batches the source gives from an offset, one at a time.
struct SourceCursor<'a> {
    shared: &'a Shared,
    state: &'a PartitionState,
    transformer: PartitionTransformer,
    ready: std::collections::VecDeque<TargetBatch<'static>>,
    done: bool,
}

impl<'a> SourceCursor<'a> {
    fn new(
        shared: &'a Shared,
        state: &'a PartitionState,
        from: i64,
        options: TransformOptions,
        origins: Option<Arc<Origins>>,
    ) -> Self {
        SourceCursor {
            shared,
            state,
            transformer: PartitionTransformer::new(from, options).with_origins(origins),
            ready: Default::default(),
            done: false,
        }
    }

    fn options(&self) -> TransformOptions {
        self.transformer.options()
    }

    /// Whether `found`, a batch on the target, was written there by the
    /// target's own producers ([`Origins::written_on_target`]); never
    /// without loop prevention.
    fn written_on_target(&self, found: SourceBatch<'_>) -> Result<bool, MirrorError> {
        let Some(origins) = self.transformer.origins() else {
            return Ok(false);
        };
        origins
            .written_on_target(found.bytes(), self.options().max_uncompressed_bytes)
            .map_err(|e| malformed_target(e.to_string()))
    }

    /// Puts `batches` back in front, to be given again.
    fn unread(&mut self, batches: Vec<TargetBatch<'static>>) {
        for batch in batches.into_iter().rev() {
            self.ready.push_front(batch);
        }
    }

    /// The next target batch the source gives; `None` once the source has
    /// nothing more.
    async fn next(&mut self) -> Result<Option<TargetBatch<'static>>, MirrorError> {
        while self.ready.is_empty() && !self.done {
            let position = self.transformer.position();
            let fetched = self
                .shared
                .fetcher
                .fetch(
                    &self.state.source_topic,
                    self.state.partition,
                    position,
                    READ_BYTES,
                )
                .await
                .map_err(error::source)?;
            self.state.set_high_watermark(fetched.high_watermark);
            let aborted: Vec<batch::AbortedTransaction> = fetched
                .aborted
                .iter()
                .map(|&(producer_id, first_offset)| batch::AbortedTransaction {
                    producer_id,
                    first_offset,
                })
                .collect();
            self.transformer.add_aborted(&aborted);
            for found in FetchedBatches::new(&fetched.records) {
                let found = found.map_err(|error| MirrorError::SourceData {
                    offset: position,
                    error,
                })?;
                let transformed =
                    self.transformer
                        .transform(&found)
                        .map_err(|error| MirrorError::SourceData {
                            offset: position,
                            error,
                        })?;
                self.ready.extend(
                    transformed
                        .into_batches()
                        .into_iter()
                        .map(TargetBatch::into_owned),
                );
            }
            // Caught up: nothing came back and the position is at the
            // watermark (or the broker named none).
            if fetched.records.is_empty()
                && (fetched.high_watermark < 0 || self.transformer.position() >= fetched.high_watermark)
            {
                self.done = true;
            }
        }
        Ok(self.ready.pop_front())
    }
}

/// The target partition's end (next offset), and the fingerprint and
/// record count of its last batch. Reads forward from the listed end,
/// since a broker may under-report it (Tansu 0.6.0 does).
pub async fn target_tail(
    target: &Cluster,
    topic: &str,
    partition: i32,
) -> Result<(i64, Option<(Fingerprint, i32)>), MirrorError> {
    let listed = list_offset(target, topic, partition, -1)
        .await
        .map_err(error::target)?;
    let mut offset = (listed - 1).max(0);
    let mut end = listed;
    let mut last = None;
    loop {
        let read = match read(target, topic, partition, offset).await {
            Ok(read) => read,
            Err(e) if e.code() == Some(ResponseError::OffsetOutOfRange) => return Ok((end, last)),
            Err(e) => return Err(error::target(e)),
        };
        let mut any = false;
        for found in FetchedBatches::new(&read.records) {
            let Ok(found) = found else { break };
            if found.last_offset() < offset {
                continue;
            }
            any = true;
            last = Some((fingerprint(found)?, found.header().record_count));
            end = end.max(found.last_offset() + 1);
            offset = found.last_offset() + 1;
        }
        if !any {
            return Ok((end, last));
        }
    }
}

/// One read of a target partition (read_uncommitted: the mirror's own
/// writes are not transactional).
pub(crate) async fn read(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    offset: i64,
) -> Result<Fetched, UpstreamError> {
    let read = strait_upstream::log::read(cluster, topic, partition, offset, READ_WAIT, READ_BYTES).await?;
    Ok(Fetched {
        records: read.records,
        high_watermark: read.high_watermark,
        last_stable_offset: read.last_stable_offset,
        log_start_offset: read.log_start_offset,
        aborted: Vec::new(),
    })
}

use kafka_protocol::ResponseError;
pub use strait_upstream::log::list_offset;
