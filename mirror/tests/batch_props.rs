//! Property tests: random partitions (gaps, codecs, LogAppendTime), random
//! positions, limits and fetch cuts; what the target gets is exactly the
//! source's records from the position on.

mod support;

use proptest::prelude::*;
use strait_batch::Compression;
use strait_mirror::batch::{
    coalesce_runs, made_of, FetchedBatches, PartitionTransformer, TargetBatch, TransformOptions,
};
use support::{consumed, decode, Rec, Src};

/// One record: key, value, headers, timestamp (relative).
type RecordPlan = (Option<Vec<u8>>, Option<Vec<u8>>, Vec<Header>, i64);
type Header = (Vec<u8>, Option<Vec<u8>>);

/// One source batch: record offsets relative to its base, its offset range,
/// codec, and LogAppendTime.
#[derive(Debug, Clone)]
struct BatchPlan {
    lead_gap: i64,
    gaps: Vec<i64>,
    tail_gap: i64,
    codec: Compression,
    log_append_time: Option<i64>,
    records: Vec<RecordPlan>,
}

fn codec() -> impl Strategy<Value = Compression> {
    prop_oneof![
        Just(Compression::None),
        Just(Compression::Gzip),
        Just(Compression::Snappy),
        Just(Compression::Lz4),
        Just(Compression::Zstd),
    ]
}

fn record() -> impl Strategy<Value = RecordPlan> {
    (
        prop::option::of(prop::collection::vec(any::<u8>(), 0..20)),
        prop::option::of(prop::collection::vec(
            prop_oneof![Just(b'a'), any::<u8>()],
            0..120,
        )),
        prop::collection::vec(
            (
                prop::collection::vec(any::<u8>(), 0..8),
                prop::option::of(prop::collection::vec(any::<u8>(), 0..16)),
            ),
            0..3,
        ),
        -1_000i64..100_000,
    )
}

fn batch_plan() -> impl Strategy<Value = BatchPlan> {
    (1usize..25).prop_flat_map(|n| {
        (
            // Mostly no gaps and CreateTime, so that many batches pass
            // through; the rest have gaps or need converting.
            prop_oneof![4 => Just(0i64), 1 => 1i64..3],
            prop::collection::vec(prop_oneof![30 => Just(1i64), 1 => 2i64..5], n - 1),
            prop_oneof![4 => Just(0i64), 1 => 1i64..3],
            codec(),
            prop_oneof![
                3 => Just(None),
                1 => (1_600_000_000_000i64..1_700_000_000_000).prop_map(Some)
            ],
            prop::collection::vec(record(), n),
        )
            .prop_map(
                |(lead_gap, gaps, tail_gap, codec, log_append_time, records)| BatchPlan {
                    lead_gap,
                    gaps,
                    tail_gap,
                    codec,
                    log_append_time,
                    records,
                },
            )
    })
}

/// The source batches and the records a consumer of the source sees.
fn build(plans: &[BatchPlan]) -> (Vec<Vec<u8>>, Vec<Rec>) {
    let mut next = 0i64;
    let mut batches = Vec::new();
    let mut seen = Vec::new();
    for plan in plans {
        let base = next;
        let mut offset = base + plan.lead_gap;
        let mut records = Vec::new();
        for (i, (key, value, headers, ts)) in plan.records.iter().enumerate() {
            if i > 0 {
                offset += plan.gaps[i - 1];
            }
            records.push(Rec {
                offset,
                timestamp: 1_650_000_000_000 + ts,
                key: key.clone(),
                value: value.clone(),
                headers: headers.clone(),
            });
        }
        let last = offset + plan.tail_gap;
        let mut src = Src::new(base, records.clone()).codec(plan.codec);
        src.last_offset_delta = Some((last - base) as i32);
        src.log_append_time = plan.log_append_time;
        batches.push(src.encode());
        for mut r in records {
            if let Some(t) = plan.log_append_time {
                r.timestamp = t;
            }
            seen.push(r);
        }
        next = last + 1;
    }
    (batches, seen)
}

/// The source batches of `plans`, every record in them, a position picked
/// at `pick` of the offsets (past the end above 1), and the records from
/// it on.
fn source(plans: &[BatchPlan], pick: f64) -> (Vec<Vec<u8>>, Vec<Rec>, i64, Vec<Rec>) {
    let (batches, seen) = build(plans);
    let end = seen.last().map_or(0, |r| r.offset) + 3;
    let position = (end as f64 * pick) as i64;
    let expected = seen.iter().filter(|r| r.offset >= position).cloned().collect();
    (batches, seen, position, expected)
}

/// Mirrors `blob` from `position` as the mirror would: fetch, transform
/// the whole batches, fetch again from the first byte not consumed (the
/// partial tail is fetched again), with responses cut at `cut` bytes.
fn mirror(blob: &[u8], position: i64, limit: usize, cut: usize) -> (Vec<TargetBatch<'_>>, i64) {
    mirror_merging(blob, position, limit, cut, 0)
}

/// [`mirror`], merging each response's batches below `below` bytes as
/// `coalesce_below` does (0: none).
fn mirror_merging(
    blob: &[u8],
    position: i64,
    limit: usize,
    cut: usize,
    below: usize,
) -> (Vec<TargetBatch<'_>>, i64) {
    let options = TransformOptions::new(limit);
    let mut t = PartitionTransformer::new(position, options);
    let mut out = Vec::new();
    let mut at = 0;
    while at < blob.len() {
        let end = (at + cut).min(blob.len());
        let mut it = FetchedBatches::new(&blob[at..end]);
        let mut consumed = 0;
        let mut fetched = Vec::new();
        for batch in &mut it {
            let batch = batch.expect("valid source");
            let transformed = t.transform(&batch).expect("transformable source");
            assert_eq!(transformed.next_offset(), t.position());
            fetched.extend(transformed.into_batches());
            consumed += batch.bytes().len();
        }
        if below > 0 {
            fetched = coalesce_runs(fetched, below, 1 << 20, options).expect("mergeable");
        }
        out.extend(fetched);
        assert_eq!(it.consumed_bytes(), consumed);
        assert_eq!(consumed + it.partial_bytes(), end - at);
        if consumed == 0 {
            // A batch larger than the response: ask for more.
            assert!(it.partial_bytes() > 0);
            let whole = FetchedBatches::new(&blob[at..]).next().unwrap().unwrap();
            let transformed = t.transform(&whole).expect("transformable source");
            out.extend(transformed.into_batches());
            at += whole.bytes().len();
        } else {
            at += consumed;
        }
    }
    (out, t.position())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_target_gets_exactly_the_records_from_the_position_on(
        plans in prop::collection::vec(batch_plan(), 1..6),
        position_pick in 0.0f64..1.1,
        limit in 400usize..6_000,
        cut in 64usize..8_000,
    ) {
        let (batches, seen, position, expected) = source(&plans, position_pick);
        let blob = batches.concat();
        let (out, reached) = mirror(&blob, position, limit, cut);

        prop_assert_eq!(consumed(&out, &seen), expected);
        let source_end = batches
            .last()
            .map_or(0, |b| strait_batch::BatchHeader::parse(b).unwrap().last_offset() + 1);
        prop_assert_eq!(reached, source_end.max(position));
        let mut previous_last = position - 1;
        for b in &out {
            prop_assert!(b.bytes().len() <= limit, "{} bytes above {limit}", b.bytes().len());
            let (h, recs) = decode(b.bytes(), 0); // CRC, contiguous deltas
            prop_assert_eq!(recs.len() as i32, b.source().record_count);
            prop_assert_eq!(h.last_offset_delta + 1, b.sequence_count());
            prop_assert!(b.source().first_offset > previous_last);
            previous_last = b.source().last_offset;
            // Stamped, it validates and keeps its fingerprint.
            let stamped = b.stamped(strait_mirror::batch::ProducerStamp {
                producer_id: 1,
                producer_epoch: 0,
                base_sequence: 0,
            });
            prop_assert!(strait_batch::validate(&stamped).is_ok());
            prop_assert_eq!(strait_mirror::batch::fingerprint(&stamped).unwrap(), b.fingerprint());
        }

        // Deterministic: the same again, byte for byte, whatever the cuts.
        let (again, _) = mirror(&blob, position, limit, blob.len() + 1);
        let bytes = |v: &[TargetBatch<'_>]| v.iter().map(|b| b.bytes().to_vec()).collect::<Vec<_>>();
        prop_assert_eq!(bytes(&out), bytes(&again));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Merged per fetch, whatever the cuts: the target gets exactly the
    /// source's records, and a restart that walks the source's batches
    /// (cut some other way, not merged) finds each merged batch as the
    /// run of them holding its records.
    #[test]
    fn merged_batches_hold_the_records_and_are_found_again_after_a_restart(
        plans in prop::collection::vec(batch_plan(), 1..8),
        position_pick in 0.0f64..1.1,
        limit in 400usize..6_000,
        cut in 64usize..8_000,
        below in 1usize..3_000,
    ) {
        let (batches, seen, position, expected) = source(&plans, position_pick);
        let blob = batches.concat();
        let (merged, _) = mirror_merging(&blob, position, limit, cut, below);
        prop_assert_eq!(consumed(&merged, &seen), expected);
        for b in &merged {
            prop_assert!(b.bytes().len() <= limit, "{} bytes above {limit}", b.bytes().len());
        }
        let (plain, _) = mirror(&blob, position, limit, blob.len() + 1);
        let mut source = plain.into_iter();
        for b in &merged {
            let mut run = Vec::new();
            let mut held = 0;
            while held < b.record_count() {
                let next = source.next().expect("the source holds the merged records");
                held += next.record_count();
                run.push(next);
            }
            prop_assert_eq!(held, b.record_count());
            prop_assert!(made_of(&run, b.fingerprint(), TransformOptions::new(limit)).unwrap());
        }
        prop_assert!(source.next().is_none());
    }
}
