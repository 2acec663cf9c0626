//! One mirrored partition: a fetch task and a produce task joined by a
//! queue, under a supervisor that resumes from the target's tail after
//! every error it can recover from.
//!
//! - The **fetch task** reads the source from the partition's position
//!   (requests grouped by leader, [`crate::grouped`]), with several
//!   fetches out when the source holds more than one brings (at offsets
//!   estimated ahead, a mirror's only partition's first few asking in a
//!   staircase of sizes so that their answers end out of step, answers
//!   taken in order, overlaps dropped, gaps filled: [`crate::plan`]), and,
//!   caught up with a trickle, a second fetch at the position that the
//!   fetcher sends half a round trip after the first
//!   (`staggered_polls`: one is always waiting at the broker); it turns
//!   each batch into target batches ([`crate::batch`]) and queues them.
//!   Every fetch first reserves bytes from the mirror's
//!   `max_bytes_in_flight` budget (waiting for it: the first fetch before
//!   it goes, fetches ahead while an earlier answer travels), so a slow
//!   target slows fetching rather than filling memory.
//! - The **produce task** takes queued batches in order, stamps them with
//!   the mirror's idempotent producer id, epoch and sequence, and writes
//!   them with one produce in flight per partition (many partitions per
//!   request). Retries resend the same bytes with the same sequence, so
//!   the target drops duplicates. On acknowledgement the partition's exact
//!   point (next source offset, next target offset) moves and the budget
//!   is released.
//! - The **supervisor** ([`run`]) finds where to go on from
//!   ([`crate::resume`]), runs both tasks, and on an error waits a backoff
//!   and starts again from the acknowledged point: the target's tail is
//!   compared with the source again, so nothing is written twice even when
//!   the target's producer state was lost. Errors where going on could
//!   lose or duplicate records stop the partition.

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::ResponseError;
use strait_upstream::{Backoff, Cluster, UpstreamError};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit};
use tokio::time::Instant;

use crate::batch::{
    self, AbortedTransaction, FetchedBatches, PartitionTransformer, ProducerStamp, SourceRange, TargetKind,
    TransformOptions,
};
use crate::error::{self, MirrorError};
use crate::grouped;
use crate::plan::{self, Density, MIN_FETCH_BYTES};
use crate::resume;
use crate::shared::{OnLost, Shared};
use crate::state::{PartitionState, Partitions, Status};
use crate::topics;

/// A partition caught up whose answers bring less than this keeps a
/// second fetch waiting at the source half a round trip after the first
/// (with `staggered_polls`): records then wait at most half a round trip
/// for a fetch rather than a whole one, for up to twice their bytes across
/// the link (both fetches bring what arrived between them).
const STAGGER_BELOW: usize = 64 << 10;
/// What a fetch of a caught-up partition asks for (and holds of the
/// budget while it waits at the broker): a trickle's worth. An answer
/// that brings this much shows a backlog, and full-size fetches follow.
const POLL_BYTES: usize = 4 * STAGGER_BELOW;
/// Produces in flight per partition. Kafka keeps the last 5 batches of
/// each idempotent producer and partition to drop retried duplicates.
const IN_FLIGHT: usize = 5;

/// Mirrors one partition until `stop` turns true (the mirror shuts down,
/// or the partition moves to another process), finishing what it fetched,
/// or until it must stop.
pub async fn run(shared: Arc<Shared>, state: Arc<PartitionState>, stop: watch::Receiver<bool>) {
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
    let mut round = 0u32;
    let mut shutdown = stop;
    while !*shutdown.borrow() {
        round += 1;
        let before = state.acked();
        // Finding where to go on from can be dropped at shutdown (nothing
        // is in flight yet); once streaming, the tasks see the shutdown
        // themselves and finish what they fetched.
        let prepared = tokio::select! {
            prepared = prepare(&shared, &state, round) => prepared,
            _ = crate::shut_down(&mut shutdown) => return,
        };
        let outcome = match prepared {
            Ok(prepared) => stream(&shared, &state, prepared, shutdown.clone()).await,
            Err(e) => Err(e),
        };
        if let Err(e) = &outcome {
            shared.count_error(&state, e.kind());
        }
        match outcome {
            Ok(()) => return,
            Err(e) if e.is_fatal() => {
                tracing::error!(mirror = %shared.name, topic = %state.source_topic, partition = state.partition, error = %e, "partition stopped");
                state.set_status(Status::Stopped(e.to_string()));
                return;
            }
            Err(e) => {
                match &e {
                    MirrorError::Source { error } if error.wants_metadata_refresh() => {
                        shared.source.invalidate()
                    }
                    MirrorError::Target { error } if error.wants_metadata_refresh() => {
                        shared.target.invalidate()
                    }
                    _ => {}
                }
                tracing::warn!(mirror = %shared.name, topic = %state.source_topic, partition = state.partition, error = %e, "partition retrying");
                state.set_status(Status::Retrying(e.to_string()));
                if state
                    .acked()
                    .is_some_and(|now| before.is_some_and(|b| now.0 > b.0))
                {
                    // The round got somewhere: this is a new trouble.
                    backoff.reset();
                }
                let until = Instant::now() + backoff.next_delay();
                // A broker out of reach is probed while the partition
                // waits: once it answers, the partition goes on at once.
                let away = unreachable(&shared, &state, &e);
                loop {
                    // Lag stays live while the partition waits (the
                    // target away): the source's end, and the age of its
                    // oldest record not mirrored.
                    tokio::select! {
                        _ = peek(&shared, &state) => {}
                        _ = crate::shut_down(&mut shutdown) => return,
                    }
                    if Instant::now() >= until {
                        break;
                    }
                    if let Some((cluster, topic)) = away {
                        let back = tokio::select! {
                            back = answers(cluster, topic, state.partition) => back,
                            _ = crate::shut_down(&mut shutdown) => return,
                        };
                        if back {
                            tracing::info!(
                                mirror = %shared.name, topic = %state.source_topic, partition = state.partition,
                                cluster = cluster.name(), "the cluster answers again: going on"
                            );
                            backoff.reset();
                            break;
                        }
                    }
                    tokio::select! {
                        _ = tokio::time::sleep_until((Instant::now() + PEEK_INTERVAL).min(until)) => {}
                        _ = crate::shut_down(&mut shutdown) => return,
                    }
                }
            }
        }
    }
}

/// How often a partition waiting to retry reads the source's end.
const PEEK_INTERVAL: Duration = Duration::from_secs(1);

/// The cluster `error` says could not be reached (a refused or dropped
/// connection, a request that timed out), with the partition's topic
/// there, to probe while waiting to retry; `None` for errors a cluster
/// answered with, which the backoff paces.
fn unreachable<'s>(
    shared: &'s Shared,
    state: &'s PartitionState,
    error: &MirrorError,
) -> Option<(&'s Cluster, &'s str)> {
    let (cluster, topic, error) = match error {
        MirrorError::Source { error } => (&shared.source, &state.source_topic, error),
        MirrorError::Target { error } | MirrorError::ProducerState { error } => {
            (&shared.target, &state.target_topic, error)
        }
        _ => return None,
    };
    out_of_reach(error).then_some((cluster, &**topic))
}

fn out_of_reach(error: &UpstreamError) -> bool {
    match error {
        UpstreamError::Connect { .. }
        | UpstreamError::Disconnected { .. }
        | UpstreamError::TimedOut { .. }
        | UpstreamError::NoBroker { .. } => true,
        UpstreamError::Deadline { last, .. } => out_of_reach(last),
        _ => false,
    }
}

/// Whether `cluster` answers again: a connection to the leader of
/// `topic`'s `partition` there, after its metadata if that is stale (the
/// cluster's own backoff, at most a second per broker, paces the attempts
/// of every partition together).
async fn answers(cluster: &Cluster, topic: &str, partition: i32) -> bool {
    cluster.leader(topic, partition).await.is_ok()
}

/// How often the source's end of every partition this process owns is
/// read, whatever the partitions are doing.
const ENDS_INTERVAL: Duration = Duration::from_secs(1);

/// Reads the source's high watermark of every partition this process owns
/// every [`ENDS_INTERVAL`] (ListOffsets, one request per leader) until
/// `shutdown`, so that lag follows the backlog while a partition is stuck
/// on a target that is down (its produces waiting for their timeout) or
/// waits to retry.
pub async fn watch_ends(shared: Arc<Shared>, partitions: Partitions, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(ENDS_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = crate::shut_down(&mut shutdown) => return,
        }
        tokio::select! {
            _ = read_ends(&shared, &partitions) => {}
            _ = crate::shut_down(&mut shutdown) => return,
        }
    }
}

async fn read_ends(shared: &Shared, partitions: &Partitions) {
    let states = partitions.all();
    if states.is_empty() {
        return;
    }
    let Ok(metadata) = shared.source.metadata().await else {
        return;
    };
    let wanted: BTreeSet<(String, i32)> = states
        .iter()
        .map(|s| (s.source_topic.to_string(), s.partition))
        .collect();
    let Ok(ends) = strait_lag::kafka::partition_ends(&shared.source, &metadata, &wanted, false).await else {
        return;
    };
    for state in states {
        if let Some(&(high_watermark, _)) = ends.get(&(state.source_topic.to_string(), state.partition)) {
            state.raise_high_watermark(high_watermark);
        }
    }
}

/// Fetches the batch at the acknowledged position, only to learn the
/// source's high watermark and the timestamp of the oldest record not yet
/// mirrored.
async fn peek(shared: &Shared, state: &PartitionState) {
    let Some((next, _)) = state.acked() else { return };
    let Ok(fetched) = shared
        .fetcher
        .fetch(&state.source_topic, state.partition, next, 1)
        .await
    else {
        return;
    };
    state.set_high_watermark(fetched.high_watermark);
    if let Some(Ok(found)) = FetchedBatches::new(&fetched.records).next() {
        state.fetched(found.last_offset(), found.header().base_timestamp);
    }
}

/// Where a round starts: the transformer at the source position (the
/// target continues at the acknowledged point) and the producer identity.
struct Prepared {
    transformer: PartitionTransformer,
    stamp: ProducerStamp,
    /// The source log's density and readable end, if its leader told
    /// them: fetches ahead go with the first fetch.
    log: Option<(Density, i64)>,
}

async fn prepare(shared: &Shared, state: &PartitionState, round: u32) -> Result<Prepared, MirrorError> {
    let max_batch = topics::max_message_bytes(&shared.target, &state.target_topic)
        .await
        .map_err(error::target)?;
    let options = TransformOptions::new(max_batch);
    let origins = shared.origins().await?;
    // The source log's density is asked for meanwhile: no round trip more.
    let (resumed, log) = tokio::join!(
        resume::resume(shared, state, options, origins.clone()),
        log_density(shared, state)
    );
    let resumed = resumed?;
    resumed.record(state);
    let (source_offset, _) = resumed.at;
    // The first round shares the mirror's producer id; later rounds start
    // over with a fresh one, since the target's sequence state for the old
    // one is what may have been lost.
    let (producer_id, producer_epoch) = if round == 1 {
        *shared
            .producer_id
            .get_or_try_init(|| init_producer_id(&shared.target))
            .await
            .map_err(error::target)?
    } else {
        init_producer_id(&shared.target).await.map_err(error::target)?
    };
    Ok(Prepared {
        transformer: PartitionTransformer::new(source_offset, options).with_origins(origins),
        stamp: ProducerStamp {
            producer_id,
            producer_epoch,
            base_sequence: 0,
        },
        log,
    })
}

/// The source partition's bytes per offset from its size on the leader's
/// disk over the offsets it holds, with its end; None when the leader does
/// not say (a broker without DescribeLogDirs or a mirror not allowed it:
/// the first answer tells instead).
async fn log_density(shared: &Shared, state: &PartitionState) -> Option<(Density, i64)> {
    let (topic, partition) = (&*state.source_topic, state.partition);
    let asked = tokio::try_join!(
        topics::log_size(&shared.source, topic, partition),
        resume::list_offset(&shared.source, topic, partition, -2),
        resume::list_offset(&shared.source, topic, partition, -1),
    );
    match asked {
        Ok((Some(size), earliest, end)) => {
            let density = Density::from_log(size, end - earliest)?;
            tracing::debug!(
                mirror = %shared.name, topic, partition, bytes = size, offsets = end - earliest,
                "the source's log size places fetches ahead until the first answer"
            );
            Some((density, end))
        }
        Ok((None, ..)) => None,
        Err(e) => {
            tracing::debug!(mirror = %shared.name, topic, partition, error = %e, "the source's log size is unknown; fetches ahead wait for the first answer");
            None
        }
    }
}

async fn stream(
    shared: &Shared,
    state: &PartitionState,
    prepared: Prepared,
    stop: watch::Receiver<bool>,
) -> Result<(), MirrorError> {
    state.set_status(Status::Running);
    let (tx, rx) = mpsc::unbounded_channel();
    let fetching = fetch_loop(shared, state, prepared.transformer, prepared.log, tx, stop);
    let producing = produce_loop(shared, state, rx, prepared.stamp);
    tokio::try_join!(fetching, producing).map(|_| ())
}

/// A run of the queue: batches with the budget they hold, or a position
/// the source moved to without a batch (skipped control batches, records
/// lost to retention).
#[derive(Debug)]
enum Piece {
    Batch {
        bytes: Bytes,
        /// The source records it holds.
        source: SourceRange,
        sequence_count: i32,
        passed_through: bool,
        /// Its first record's timestamp.
        timestamp: i64,
        _budget: Option<OwnedSemaphorePermit>,
    },
    Position(i64),
}

/// One fetch out: where it starts, the budget it holds, its answer.
struct Flight {
    offset: i64,
    ask: usize,
    permit: OwnedSemaphorePermit,
    answer: Answer,
}

enum Answer {
    Pending(grouped::PendingFetch),
    /// Answered, held back behind a fetch that fills the gap before it.
    Ready(grouped::Fetched),
}

/// Fetches the partition from its position, several fetches ahead when
/// the source holds more than one fetch brings: the first at the
/// position, the next ones at offsets estimated from the bytes per offset
/// seen so far (before the first answer, from the log: [`Density`]), each
/// on whatever fetch lane is free, up to what the link should have in
/// flight ([`plan::fetch_plan`]), sent as soon as the budget has room
/// while the answer before them travels. Answers are
/// taken in order: overlaps are dropped (the transformer skips what it has
/// fed); an answer that starts after the position leaves a gap, which a
/// fetch at the position fills before the answer is used.
async fn fetch_loop(
    shared: &Shared,
    state: &PartitionState,
    mut transformer: PartitionTransformer,
    log: Option<(Density, i64)>,
    tx: mpsc::UnboundedSender<Piece>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), MirrorError> {
    let mut backoff = Backoff::default();
    // Bytes to ask for when a fetch brought only part of a batch (0: the
    // usual amount).
    let mut grown = 0;
    let mut flights: VecDeque<Flight> = VecDeque::new();
    // Where the source's readable records end, as last seen (-1: unknown),
    // and how large its batches are: from its log until the first answer.
    let (mut density, mut end) = log.unwrap_or((Density::default(), -1));
    // The last answer brought less than [`STAGGER_BELOW`].
    let mut trickle = false;
    // The step of the next fetch ahead in the staircase a fresh start
    // sends ([`plan::step_ask`]).
    let mut step = usize::MAX;
    loop {
        let position = transformer.position();
        let link = shared.fetcher.link(&state.source_topic, state.partition).await;
        let partitions = shared.partitions.load(Ordering::Relaxed);
        let (ask, target) =
            plan::fetch_plan(partitions, shared.budget_bytes, link.in_flight_target(), &density);
        let caught_up = end >= 0 && position >= end;
        if flights.is_empty() {
            // Caught up: a long-poll, which may wait at the broker for
            // half a second, asks for little (a larger first batch still
            // comes whole, KIP-74), so that waiting polls do not hold the
            // budget that partitions with data need.
            let ask_now = if grown > 0 {
                grown
            } else if caught_up {
                ask.min(POLL_BYTES)
            } else {
                step = 2;
                plan::step_ask(1, ask, target, partitions)
            };
            let reserve = ask_now.min(shared.budget_bytes);
            let permit = tokio::select! {
                permit = shared.budget.clone().acquire_many_owned(reserve as u32) => permit.expect("budget never closes"),
                _ = crate::shut_down(&mut shutdown) => return Ok(()),
            };
            let sent = send_fetch(shared, state, position, ask_now, position < end).await;
            let answer = match sent {
                Ok(pending) => Answer::Pending(pending),
                Err(e) => {
                    drop(permit);
                    if !fetch_failed(shared, state, e, &mut backoff, &mut shutdown).await? {
                        return Ok(());
                    }
                    continue;
                }
            };
            flights.push_back(Flight {
                offset: position,
                ask: ask_now,
                permit,
                answer,
            });
        }
        let flight = flights.pop_front().expect("a fetch is out");
        let ahead = flight.offset > position;
        // Caught up with a trickle: a second fetch at the position, which
        // the fetcher sends half a round trip after the first, so that one
        // is always waiting at the broker when a record arrives.
        if shared.staggered_polls && trickle && grown == 0 && caught_up && flights.is_empty() {
            let second = try_send_fetch(shared, state, position, ask.min(POLL_BYTES), false).await;
            flights.extend(second);
        }
        let front = (flight.offset, flight.ask);
        let fetched = match flight.answer {
            Answer::Ready(fetched) => Ok(fetched),
            Answer::Pending(mut pending) => {
                let mut refused = false;
                loop {
                    // While the answer travels, fetch ahead as soon as the
                    // budget has room, while the source has more and the link
                    // wants more in flight: waiting for the next answer to
                    // send them would leave the link idle while earlier
                    // answers are being written to the target.
                    let next = (grown == 0 && !refused)
                        .then(|| {
                            let last = flights.back().map_or(front, |last| (last.offset, last.ask));
                            plan::ahead_offset(flights.len() + 1, last, &density, ask, target)
                        })
                        .flatten()
                        .filter(|next| *next < end);
                    let ahead_ask = plan::step_ask(step, ask, target, partitions);
                    tokio::select! {
                        biased;
                        _ = crate::shut_down(&mut shutdown) => return Ok(()),
                        permit = shared.budget.clone().acquire_many_owned(ahead_ask as u32), if next.is_some() => {
                            let permit = permit.expect("budget never closes");
                            let next = next.expect("checked");
                            step = step.saturating_add(1);
                            match send_flight(shared, state, next, ahead_ask, true, permit).await {
                                Some(flight) => flights.push_back(flight),
                                // The fetch at the position will tell.
                                None => refused = true,
                            }
                        }
                        answer = &mut pending => {
                            let answer = answer.unwrap_or_else(|_| Err(UpstreamError::Disconnected {
                                broker: shared.source.name().to_owned(),
                                reason: "the fetch task stopped".to_owned(),
                            }));
                            if let Ok(fetched) = &answer {
                                PartitionState::add(&state.counters.fetched_bytes, fetched.records.len() as u64);
                            }
                            break answer;
                        }
                    }
                }
            }
        };
        let mut permit = flight.permit;
        let fetched = match fetched {
            Ok(fetched) => fetched,
            Err(_) if ahead => {
                // A guess too far (out of range, or a leader change): the
                // fetch at the position will tell.
                flights.clear();
                continue;
            }
            Err(e) if e.code() == Some(ResponseError::OffsetOutOfRange) => {
                flights.clear();
                let moved = out_of_range(shared, state, position).await?;
                transformer = transformer.starting_at(moved);
                let _ = tx.send(Piece::Position(moved));
                continue;
            }
            Err(e) => {
                flights.clear();
                drop(permit);
                if !fetch_failed(shared, state, e, &mut backoff, &mut shutdown).await? {
                    return Ok(());
                }
                continue;
            }
        };
        backoff.reset();
        trickle = fetched.records.len() < STAGGER_BELOW;
        // Answers come in order, so one at the position is the latest word
        // (a source whose log was truncated ends earlier than before).
        end = if ahead {
            end.max(fetched.readable_end())
        } else {
            fetched.readable_end()
        };
        if ahead {
            // Its first batch must hold the position, or there is a gap.
            let first = FetchedBatches::new(&fetched.records)
                .map_while(Result::ok)
                .find(|b| b.last_offset() >= position);
            match first {
                None => {
                    // Nothing there after all: guesses further on are
                    // worth no more.
                    flights.clear();
                    continue;
                }
                Some(first) if first.header().base_offset > position => {
                    let gap = (first.header().base_offset - position) as f64 * density.bytes_per_offset()
                        + density.bytes_per_batch();
                    let gap_ask = (gap as usize).clamp(MIN_FETCH_BYTES, ask.max(MIN_FETCH_BYTES));
                    tracing::debug!(
                        mirror = %shared.name, topic = %state.source_topic, partition = state.partition,
                        position, fetched_from = first.header().base_offset, gap_ask,
                        "a fetch ahead started past the position; filling the gap before it"
                    );
                    // Held budget is not waited for: the gap is small, and
                    // waiting while holding answers could starve others.
                    let gap_permit = match shared.budget.clone().try_acquire_many_owned(gap_ask as u32) {
                        Ok(p) => p,
                        Err(_) => permit
                            .split(gap_ask.min(permit.num_permits().saturating_sub(1)))
                            .unwrap_or_else(|| {
                                shared
                                    .budget
                                    .clone()
                                    .try_acquire_many_owned(0)
                                    .expect("zero permits")
                            }),
                    };
                    let sent = send_fetch(shared, state, position, gap_ask, true).await;
                    match sent {
                        Ok(pending) => {
                            flights.push_front(Flight {
                                offset: flight.offset,
                                ask: flight.ask,
                                permit,
                                answer: Answer::Ready(fetched),
                            });
                            flights.push_front(Flight {
                                offset: position,
                                ask: gap_ask,
                                permit: gap_permit,
                                answer: Answer::Pending(pending),
                            });
                        }
                        Err(_) => flights.clear(),
                    }
                    continue;
                }
                Some(_) => {}
            }
        }
        state.set_high_watermark(fetched.high_watermark);
        let aborted: Vec<AbortedTransaction> = fetched
            .aborted
            .iter()
            .map(|&(producer_id, first_offset)| AbortedTransaction {
                producer_id,
                first_offset,
            })
            .collect();
        transformer.add_aborted(&aborted);
        let records = &fetched.records;
        let mut batches = FetchedBatches::new(records);
        let source_data = |error| MirrorError::SourceData {
            offset: position,
            error,
        };
        let mut outs = Vec::new();
        let looped = transformer.looped_records();
        let (mut whole_bytes, mut whole_batches, mut first_offset, mut last_offset) = (0, 0, None, 0);
        for found in &mut batches {
            let found = found.map_err(source_data)?;
            whole_bytes += found.bytes().len();
            whole_batches += 1;
            first_offset.get_or_insert(found.header().base_offset);
            last_offset = found.last_offset();
            outs.extend(transformer.transform(&found).map_err(source_data)?.into_batches());
        }
        PartitionState::add(
            &state.counters.looped_records,
            transformer.looped_records() - looped,
        );
        if let Some(first) = first_offset {
            density.observe(whole_bytes, last_offset + 1 - first, whole_batches);
        }
        if shared.coalesce_below > 0 {
            outs = batch::coalesce_runs(
                outs,
                shared.coalesce_below,
                shared.coalesce_up_to,
                transformer.options(),
            )
            .map_err(source_data)?;
        }
        let mut pieces = Vec::new();
        for out in outs {
            let source = out.source().clone();
            let sequence_count = out.sequence_count();
            let passed_through = out.kind() == TargetKind::PassedThrough;
            let timestamp = strait_batch::BatchHeader::parse(out.bytes()).map_or(0, |h| h.base_timestamp);
            let bytes = match out.into_bytes() {
                std::borrow::Cow::Borrowed(slice) => records.slice_ref(slice),
                std::borrow::Cow::Owned(owned) => Bytes::from(owned),
            };
            state.fetched(source.last_offset, timestamp);
            pieces.push((bytes, source, sequence_count, passed_through, timestamp));
        }
        // No whole batch though records wait: the first is larger than
        // asked for.
        let cut = batches.partial_bytes() > 0 || (fetched.records.is_empty() && position < end);
        grown = if whole_batches == 0 && cut {
            plan::grow(flight.ask, shared.budget_bytes)
        } else {
            0
        };
        let used: usize = pieces.iter().map(|(bytes, ..)| bytes.len()).sum();
        if used < permit.num_permits() {
            // Give back what the answer did not use.
            drop(permit.split(permit.num_permits() - used));
        } else if used > permit.num_permits() {
            // A batch larger than asked for: hold what is free beyond the
            // reservation, never waiting (the budget may be smaller).
            let extra = (used - permit.num_permits()).min(shared.budget.available_permits());
            if let Ok(more) = shared.budget.clone().try_acquire_many_owned(extra as u32) {
                permit.merge(more);
            }
        }
        let mut permit = Some(permit);
        for (bytes, source, sequence_count, passed_through, timestamp) in pieces {
            let share = permit.as_mut().and_then(|p| {
                if p.num_permits() > bytes.len() {
                    p.split(bytes.len())
                } else {
                    None
                }
            });
            let share = share.or_else(|| permit.take());
            let _ = tx.send(Piece::Batch {
                bytes,
                source,
                sequence_count,
                passed_through,
                timestamp,
                _budget: share,
            });
        }
        if transformer.position() != position {
            let _ = tx.send(Piece::Position(transformer.position()));
        }
    }
}

/// Sends a fetch of `ask` bytes from `offset` if the budget has them free
/// now (never waiting): a caught-up partition's second.
async fn try_send_fetch(
    shared: &Shared,
    state: &PartitionState,
    offset: i64,
    ask: usize,
    has_data: bool,
) -> Option<Flight> {
    let permit = shared.budget.clone().try_acquire_many_owned(ask as u32).ok()?;
    send_flight(shared, state, offset, ask, has_data, permit).await
}

/// Sends a fetch of `ask` bytes from `offset`, holding `permit` for it
/// until its answer is used (None: the fetcher refused it).
async fn send_flight(
    shared: &Shared,
    state: &PartitionState,
    offset: i64,
    ask: usize,
    has_data: bool,
    permit: OwnedSemaphorePermit,
) -> Option<Flight> {
    let pending = send_fetch(shared, state, offset, ask, has_data).await.ok()?;
    Some(Flight {
        offset,
        ask,
        permit,
        answer: Answer::Pending(pending),
    })
}

/// Hands a fetch of the partition from `offset` to the fetcher.
async fn send_fetch(
    shared: &Shared,
    state: &PartitionState,
    offset: i64,
    ask: usize,
    has_data: bool,
) -> Result<grouped::PendingFetch, UpstreamError> {
    shared
        .fetcher
        .send(&state.source_topic, state.partition, offset, ask as i32, has_data)
        .await
}

/// A fetch at the position failed: a retriable error waits a backoff
/// (false: shutdown came meanwhile); any other ends the round.
async fn fetch_failed(
    shared: &Shared,
    state: &PartitionState,
    e: UpstreamError,
    backoff: &mut Backoff,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<bool, MirrorError> {
    if !e.is_retriable() {
        return Err(error::source(e));
    }
    shared.count_error(state, "source");
    if e.wants_metadata_refresh() {
        shared.source.invalidate();
    }
    tracing::debug!(mirror = %shared.name, topic = %state.source_topic, partition = state.partition, error = %e, "fetch retrying");
    tokio::select! {
        _ = tokio::time::sleep(backoff.next_delay()) => Ok(true),
        _ = crate::shut_down(shutdown) => Ok(false),
    }
}

/// The position is gone from the source: deleted by retention (lost
/// records), or past the end (the source lost records).
async fn out_of_range(shared: &Shared, state: &PartitionState, position: i64) -> Result<i64, MirrorError> {
    let earliest = resume::list_offset(&shared.source, &state.source_topic, state.partition, -2)
        .await
        .map_err(error::source)?;
    let latest = resume::list_offset(&shared.source, &state.source_topic, state.partition, -1)
        .await
        .map_err(error::source)?;
    if position < earliest {
        let count = earliest - position;
        if shared.on_lost == OnLost::Stop {
            return Err(MirrorError::LostRecords {
                topic: state.source_topic.to_string(),
                partition: state.partition,
                from: position,
                to: earliest,
                count,
            });
        }
        PartitionState::add(&state.counters.lost_records, count as u64);
        tracing::error!(
            mirror = %shared.name, topic = %state.source_topic, partition = state.partition,
            from = position, to = earliest, count,
            "LOST RECORDS: source retention deleted records before they were mirrored; going on from the log start"
        );
        return Ok(earliest);
    }
    tracing::error!(
        mirror = %shared.name, topic = %state.source_topic, partition = state.partition,
        position, source_end = latest,
        "the source partition ends before the mirror's position (its log was truncated); going on from its end"
    );
    Ok(latest)
}

async fn produce_loop(
    shared: &Shared,
    state: &PartitionState,
    mut rx: mpsc::UnboundedReceiver<Piece>,
    mut stamp: ProducerStamp,
) -> Result<(), MirrorError> {
    // Produces in flight, oldest first, each with the pieces it settles:
    // its batch and the positions queued after it.
    let mut in_flight: VecDeque<(grouped::Pending, Vec<Piece>, Instant)> = VecDeque::new();
    let mut fetching = true;
    loop {
        // Send while there is room and something to send; wait for a piece
        // only when nothing is in flight.
        while fetching && in_flight.len() < IN_FLIGHT {
            let piece = if in_flight.is_empty() {
                rx.recv().await
            } else {
                match rx.try_recv() {
                    Ok(piece) => Some(piece),
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => None,
                }
            };
            let Some(piece) = piece else {
                // The fetch task stopped (shutdown): write what it queued.
                fetching = false;
                break;
            };
            match piece {
                Piece::Position(p) => match in_flight.back_mut() {
                    Some((_, pieces, _)) => pieces.push(Piece::Position(p)),
                    None => {
                        let (_, target_next) = state.acked().expect("a round starts acknowledged");
                        state.set_acked(p, target_next);
                    }
                },
                Piece::Batch {
                    ref bytes,
                    sequence_count,
                    ..
                } => {
                    let mut stamped = BytesMut::from(&bytes[..]);
                    strait_batch::stamp_producer(&mut stamped, stamp).expect("target batches are whole");
                    stamp.base_sequence = batch::next_sequence(stamp.base_sequence, sequence_count);
                    let pending = shared
                        .producer
                        .produce(&state.target_topic, state.partition, stamped.freeze())
                        .await
                        .map_err(error::target)?;
                    in_flight.push_back((pending, vec![piece], Instant::now()));
                }
            }
        }
        let Some((pending, pieces, sent)) = in_flight.pop_front() else {
            if fetching {
                continue;
            }
            return Ok(());
        };
        let answer = pending.await.unwrap_or_else(|_| {
            Err(UpstreamError::Disconnected {
                broker: shared.target.name().to_owned(),
                reason: "the produce task stopped".to_owned(),
            })
        });
        let produced = match answer {
            Ok(produced) => produced,
            Err(e) => {
                // Later produces of this partition can only fail now (their
                // sequence follows this one); the round starts over from the
                // target's tail.
                for (pending, ..) in in_flight.drain(..) {
                    let _ = pending.await;
                }
                return Err(match e.code() {
                    Some(code) if producer_state_lost(code) => MirrorError::ProducerState { error: e },
                    _ => error::target(e),
                });
            }
        };
        let acknowledged = crate::state::now_ms();
        shared
            .metrics
            .produce_latency
            .with_label_values(&[&shared.name])
            .observe(sent.elapsed().as_secs_f64());
        let mut target_at = produced.base_offset;
        for piece in pieces {
            match piece {
                Piece::Batch {
                    bytes,
                    source,
                    sequence_count,
                    passed_through,
                    timestamp,
                    _budget,
                } => {
                    shared
                        .metrics
                        .replication_latency
                        .with_label_values(&[&shared.name])
                        .observe((acknowledged - timestamp).max(0) as f64 / 1000.0);
                    state.acked_batch(&source, target_at);
                    target_at += i64::from(sequence_count);
                    PartitionState::add(&state.counters.records, source.record_count as u64);
                    PartitionState::add(&state.counters.bytes, bytes.len() as u64);
                    let counter = if passed_through {
                        &state.counters.batches_passed
                    } else {
                        &state.counters.batches_reencoded
                    };
                    PartitionState::add(counter, 1);
                }
                Piece::Position(p) => state.set_acked(p, target_at),
            }
        }
    }
}

/// Target answers meaning its idempotent-producer state for the mirror is
/// not what the mirror thinks: whether the last produce was written is
/// unknown, so the partition re-reads the target's tail.
fn producer_state_lost(code: ResponseError) -> bool {
    matches!(
        code,
        ResponseError::OutOfOrderSequenceNumber
            | ResponseError::UnknownProducerId
            | ResponseError::InvalidProducerEpoch
            | ResponseError::ProducerFenced
            | ResponseError::DuplicateSequenceNumber
    )
}

/// A fresh idempotent producer id from the target (InitProducerId without
/// a transactional id), retried while the target says to.
async fn init_producer_id(target: &Cluster) -> Result<(i64, i16), UpstreamError> {
    target
        .init_producer_id(Instant::now() + Duration::from_secs(60))
        .await
}
