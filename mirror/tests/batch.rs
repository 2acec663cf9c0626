//! Source batches to target batches, case by case, with real batch bytes.

mod support;

use strait_batch::{
    self as batch, stamp_producer as stamp, BatchError, BatchHeader, Compression, RecordError,
};
use strait_mirror::batch::{
    coalesce, coalesce_runs, fingerprint, made_of, AbortedTransaction, Coalesced, FetchedBatches, Origins,
    PartitionTransformer, ProducerStamp, ReEncodeReasons, Skipped, SourceBatch, TargetBatch, TargetKind,
    TransformError, TransformOptions, Transformed, ORIGIN_HEADER,
};
use support::{consumed, decode, fix_crc, marker, run, Rec, Src};

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

const MIRROR: ProducerStamp = ProducerStamp {
    producer_id: 4242,
    producer_epoch: 9,
    base_sequence: 123,
};

fn opts() -> TransformOptions {
    TransformOptions::new(1 << 20)
}

fn transform<'a>(t: &mut PartitionTransformer, bytes: &'a [u8]) -> Result<Transformed<'a>, TransformError> {
    t.transform(&SourceBatch::parse(bytes)?)
}

fn recs(offsets: impl IntoIterator<Item = i64>) -> Vec<Rec> {
    offsets.into_iter().map(Rec::at).collect()
}

#[test]
fn a_batch_the_target_accepts_passes_through_and_stamping_changes_only_the_mirrors_fields() {
    for codec in CODECS {
        let src = Src::at(&[100, 101, 102]).codec(codec).encode();
        let mut t = PartitionTransformer::new(100, opts());
        let out = transform(&mut t, &src).unwrap();
        assert_eq!(out.next_offset(), 103);
        assert_eq!(t.position(), 103);
        let [target] = out.batches() else {
            panic!("{out:?}")
        };
        assert_eq!(target.kind(), TargetKind::PassedThrough, "{codec}");
        assert_eq!(target.bytes(), &src[..], "passed through as is, until stamped");
        assert_eq!(target.source().first_offset, 100);
        assert_eq!(target.source().last_offset, 102);
        assert_eq!(target.source().record_count, 3);
        assert_eq!(target.sequence_count(), 3);

        let stamped = target.stamped(MIRROR);
        let h = batch::validate(&stamped).expect("the CRC is updated");
        assert_eq!(
            (
                h.base_offset,
                h.partition_leader_epoch,
                h.producer_id,
                h.producer_epoch,
                h.base_sequence
            ),
            (0, -1, 4242, 9, 123)
        );
        // Everything else is the source's, byte for byte.
        assert_eq!(stamped[8..12], src[8..12]);
        assert_eq!(stamped[16], src[16]);
        assert_eq!(stamped[21..43], src[21..43]);
        assert_eq!(stamped[57..], src[57..]);
        assert_eq!(stamped.len(), src.len());
        // A consumer of the target sees the source's records.
        let (_, seen) = decode(&stamped, 100);
        assert_eq!(seen, recs(100..103));
        // Stamping leaves the fingerprint alone.
        assert_eq!(fingerprint(&stamped).unwrap(), target.fingerprint());
    }
}

#[test]
fn committed_transactional_batches_pass_through_with_the_transactional_bit_cleared() {
    let src = Src::at(&[5, 6]).transactional().encode();
    let mut t = PartitionTransformer::new(0, opts());
    let out = transform(&mut t, &src).unwrap();
    let [target] = out.batches() else {
        panic!("{out:?}")
    };
    assert_eq!(target.kind(), TargetKind::PassedThrough);
    let stamped = target.stamped(MIRROR);
    let h = batch::validate(&stamped).unwrap();
    assert!(!h.is_transactional());
    assert_eq!(h.attributes, 0);
    // stamp on a slice with trailing bytes touches only the batch.
    let mut buf = [src.clone(), vec![0xee; 5]].concat();
    stamp(&mut buf, MIRROR).unwrap();
    assert_eq!(&buf[..stamped.len()], &stamped[..]);
    assert_eq!(buf[stamped.len()..], [0xee; 5]);
    assert!(matches!(
        stamp(&mut buf[..40], MIRROR),
        Err(BatchError::TruncatedHeader { available: 40 })
    ));
    assert!(matches!(
        stamp(&mut buf[..70], MIRROR),
        Err(BatchError::Truncated { .. })
    ));
}

#[test]
fn offset_gaps_are_re_encoded_with_contiguous_deltas_in_every_codec() {
    let offsets = [10, 11, 14, 20, 21, 35];
    for codec in CODECS {
        for raw_snappy in [false, true] {
            let mut src = Src::at(&offsets).codec(codec);
            src.raw_snappy = raw_snappy;
            src.last_offset_delta = Some(30); // the compacted batch kept its range: 10..=40
            let bytes = src.encode();
            let mut t = PartitionTransformer::new(0, opts());
            let out = transform(&mut t, &bytes).unwrap();
            assert_eq!(out.next_offset(), 41, "the whole source range is done");
            let [target] = out.batches() else {
                panic!("{out:?}")
            };
            assert_eq!(
                target.kind(),
                TargetKind::ReEncoded(ReEncodeReasons {
                    offset_gaps: true,
                    ..ReEncodeReasons::default()
                })
            );
            let h = BatchHeader::parse(target.bytes()).unwrap();
            assert_eq!(h.compression(), codec, "the source's codec is kept");
            assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence), (-1, -1, -1));
            assert_eq!((h.base_offset, h.partition_leader_epoch), (0, -1));
            assert_eq!(h.base_timestamp, Rec::at(10).timestamp);
            assert_eq!(h.max_timestamp, Rec::at(35).timestamp);
            let range = target.source();
            assert_eq!(
                (range.first_offset, range.last_offset, range.record_count),
                (10, 35, 6)
            );
            assert_eq!(consumed(out.batches(), &src.records), src.records, "{codec}");
            // Stamped, it is what the target gets.
            let stamped = target.stamped(MIRROR);
            let (h, _) = decode(&stamped, 0);
            assert_eq!(
                (h.producer_id, h.base_sequence, h.last_offset_delta),
                (4242, 123, 5)
            );
        }
    }
}

/// Loop prevention between clusters `nj` (the source) and `cq` (the
/// target): records from nowhere else leave marked `nj`, records from `cq`
/// stay home, records from a third cluster keep their mark.
#[test]
fn loop_prevention_marks_each_record_with_its_origin_and_leaves_the_targets_own_out() {
    let origins = std::sync::Arc::new(Origins {
        source: b"nj-cluster-id".as_slice().into(),
        target: b"cq-cluster-id".as_slice().into(),
    });
    let from =
        |rec: &mut Rec, origin: &[u8]| rec.headers.push((ORIGIN_HEADER.to_vec(), Some(origin.to_vec())));
    for codec in CODECS {
        // 10, 11: written on nj; 12, 14: copies of cq's records; 13: from
        // a third cluster; 15 on nj.
        let mut src = Src::at(&[10, 11, 12, 13, 14, 15]).codec(codec);
        from(&mut src.records[2], b"cq-cluster-id");
        from(&mut src.records[3], b"ny-cluster-id");
        from(&mut src.records[4], b"cq-cluster-id");
        let bytes = src.encode();
        let mut t = PartitionTransformer::new(11, opts()).with_origins(Some(origins.clone()));
        let out = transform(&mut t, &bytes).unwrap();
        assert_eq!(out.next_offset(), 16);
        let [target] = out.batches() else {
            panic!("{out:?}")
        };
        assert_eq!(
            target.kind(),
            TargetKind::ReEncoded(ReEncodeReasons {
                before_position: true,
                origins: true,
                ..ReEncodeReasons::default()
            }),
            "{codec}"
        );
        assert_eq!(BatchHeader::parse(target.bytes()).unwrap().compression(), codec);
        let range = target.source();
        assert_eq!(
            (range.first_offset, range.last_offset, range.record_count),
            (11, 15, 3)
        );
        assert_eq!(range.runs().collect::<Vec<_>>(), [(11, 1), (13, 1), (15, 1)]);
        let marked = target.bytes().to_vec();
        let mut expected: Vec<Rec> = [1, 3, 5].iter().map(|&i| src.records[i].clone()).collect();
        from(&mut expected[0], b"nj-cluster-id");
        from(&mut expected[2], b"nj-cluster-id");
        assert_eq!(consumed(out.batches(), &expected), expected, "{codec}");

        // A batch of the target's own records alone: nothing to produce.
        let mut home = Src::at(&[16, 17]).codec(codec);
        for rec in &mut home.records {
            from(rec, b"cq-cluster-id");
        }
        let home_bytes = home.encode();
        let out = transform(&mut t, &home_bytes).unwrap();
        assert_eq!(
            out,
            Transformed::Skip {
                reason: Skipped::FromTarget,
                next_offset: 18
            }
        );

        // The same batch without loop prevention passes as it is.
        let mut plain = PartitionTransformer::new(16, opts());
        let encoded = home.encode();
        let out = transform(&mut plain, &encoded).unwrap();
        assert_eq!(out.batches()[0].kind(), TargetKind::PassedThrough);
        // Marked again, the same bytes (resumption compares them).
        let again = PartitionTransformer::new(11, opts())
            .with_origins(Some(origins.clone()))
            .transform(&SourceBatch::parse(&bytes).unwrap())
            .unwrap();
        assert_eq!(again.batches()[0].bytes(), marked);
    }
}

/// On resuming with names kept both ways, the target's own producers'
/// batches are told from the mirror's by their records' origins.
#[test]
fn batches_of_the_targets_own_producers_are_told_from_the_mirrors() {
    let origins = Origins {
        source: b"nj-cluster-id".as_slice().into(),
        target: b"cq-cluster-id".as_slice().into(),
    };
    let with = |marks: &[Option<&[u8]>]| {
        let mut src = Src::at(&(0..marks.len() as i64).collect::<Vec<_>>()).codec(Compression::Lz4);
        for (rec, origin) in src.records.iter_mut().zip(marks) {
            if let Some(origin) = origin {
                rec.headers.push((ORIGIN_HEADER.to_vec(), Some(origin.to_vec())));
            }
        }
        origins.written_on_target(&src.encode(), 1 << 20).unwrap()
    };
    // Copies from nj (and from a third cluster through nj): the mirror's.
    assert!(!with(&[Some(b"nj-cluster-id"), Some(b"ny-cluster-id")]));
    // A record without an origin, or with the target's: a local producer's.
    assert!(with(&[Some(b"nj-cluster-id"), None]));
    assert!(with(&[Some(b"cq-cluster-id")]));
    // Its transaction markers too.
    assert!(origins.written_on_target(&marker(7, 3, false), 1 << 20).unwrap());
    // Bytes that are not a batch are an error, not a guess.
    assert!(origins.written_on_target(b"not a batch", 1 << 20).is_err());
}

#[test]
fn records_before_the_position_are_dropped() {
    for codec in CODECS {
        let src = Src::at(&[50, 51, 52, 53, 54]).codec(codec);
        let bytes = src.encode();
        // A fetch at 52 returns the batch starting at 50.
        let mut t = PartitionTransformer::new(52, opts());
        let out = transform(&mut t, &bytes).unwrap();
        let [target] = out.batches() else {
            panic!("{out:?}")
        };
        assert_eq!(
            target.kind(),
            TargetKind::ReEncoded(ReEncodeReasons {
                before_position: true,
                ..ReEncodeReasons::default()
            })
        );
        assert_eq!(BatchHeader::parse(target.bytes()).unwrap().compression(), codec);
        assert_eq!(consumed(out.batches(), &src.records), recs(52..55));
        assert_eq!(out.next_offset(), 55);

        // Starting at the position: passed through.
        let mut t = PartitionTransformer::new(50, opts());
        assert_eq!(
            transform(&mut t, &bytes).unwrap().batches()[0].kind(),
            TargetKind::PassedThrough
        );

        // Wholly before the position: skipped, the position stays.
        let mut t = PartitionTransformer::new(60, opts());
        let out = transform(&mut t, &bytes).unwrap();
        assert_eq!(
            out,
            Transformed::Skip {
                reason: Skipped::BeforePosition,
                next_offset: 60
            }
        );
    }
    // Compacted, with the records before the position gone already and
    // those after it kept: only the gaps are a reason.
    let mut src = Src::at(&[70, 75]);
    src.last_offset_delta = Some(9);
    let bytes = src.encode();
    let mut t = PartitionTransformer::new(72, opts());
    let out = transform(&mut t, &bytes).unwrap();
    assert_eq!(consumed(out.batches(), &src.records), recs([75]));
    assert_eq!(
        out.batches()[0].kind(),
        TargetKind::ReEncoded(ReEncodeReasons {
            offset_gaps: true,
            before_position: true,
            ..ReEncodeReasons::default()
        })
    );
    // ... and with every record left before it.
    let mut t = PartitionTransformer::new(76, opts());
    let out = transform(&mut t, &bytes).unwrap();
    assert_eq!(
        out,
        Transformed::Skip {
            reason: Skipped::BeforePosition,
            next_offset: 80
        }
    );
}

#[test]
fn the_same_batch_fed_twice_is_skipped_the_second_time() {
    let bytes = Src::at(&[0, 1]).encode();
    let mut t = PartitionTransformer::new(0, opts());
    assert_eq!(transform(&mut t, &bytes).unwrap().batches().len(), 1);
    assert_eq!(
        transform(&mut t, &bytes).unwrap(),
        Transformed::Skip {
            reason: Skipped::BeforePosition,
            next_offset: 2
        }
    );
}

#[test]
fn empty_batches_left_by_compaction_are_skipped() {
    let mut src = Src::new(30, vec![]);
    src.last_offset_delta = Some(4);
    let bytes = src.encode();
    let mut t = PartitionTransformer::new(0, opts());
    assert_eq!(
        transform(&mut t, &bytes).unwrap(),
        Transformed::Skip {
            reason: Skipped::Empty,
            next_offset: 35
        }
    );
}

#[test]
fn log_append_time_becomes_create_time_with_the_append_time_on_every_record() {
    for codec in CODECS {
        let mut src = Src::at(&[0, 1, 2]).codec(codec);
        src.log_append_time = Some(1_800_000_000_000);
        let bytes = src.encode();
        // What a consumer of the source sees: the append time everywhere.
        let (_, source_view) = decode(&bytes, 0);
        assert!(source_view.iter().all(|r| r.timestamp == 1_800_000_000_000));

        let mut t = PartitionTransformer::new(0, opts());
        let out = transform(&mut t, &bytes).unwrap();
        let [target] = out.batches() else {
            panic!("{out:?}")
        };
        assert_eq!(
            target.kind(),
            TargetKind::ReEncoded(ReEncodeReasons {
                log_append_time: true,
                ..ReEncodeReasons::default()
            })
        );
        let (h, seen) = decode(target.bytes(), 0);
        assert!(!h.log_append_time(), "CreateTime");
        assert_eq!(
            (h.base_timestamp, h.max_timestamp),
            (1_800_000_000_000, 1_800_000_000_000)
        );
        assert_eq!(seen, source_view, "{codec}");
    }
}

#[test]
fn control_batches_are_never_produced() {
    let commit = marker(7, 3, false);
    let abort = marker(7, 3, true);
    for bytes in [&commit, &abort] {
        let mut t = PartitionTransformer::new(0, opts());
        assert_eq!(
            transform(&mut t, bytes).unwrap(),
            Transformed::Skip {
                reason: Skipped::Control,
                next_offset: 4
            }
        );
    }
}

/// One partition's log with two transactional producers (7 aborts, then
/// commits; 8 commits) and a plain producer between them.
fn transactional_log() -> (Vec<Vec<u8>>, Vec<AbortedTransaction>, Vec<Rec>) {
    let batches = vec![
        Src::at(&[0, 1]).producer(1).encode(),                 // plain
        Src::at(&[2, 3]).producer(7).transactional().encode(), // aborted
        Src::at(&[4]).producer(8).transactional().encode(),    // committed
        Src::at(&[5, 6]).producer(1).encode(),                 // plain
        Src::at(&[7]).producer(7).transactional().encode(),    // aborted
        marker(8, 8, false),
        marker(7, 9, true),
        Src::at(&[10, 11]).producer(7).transactional().encode(), // committed
        Src::at(&[12]).producer(1).encode(),
        marker(7, 13, false),
        Src::at(&[14]).producer(7).transactional().encode(), // aborted again
        marker(7, 15, true),
        Src::at(&[16]).producer(7).transactional().encode(), // a later one, committed
    ];
    let aborted = vec![
        AbortedTransaction {
            producer_id: 7,
            first_offset: 2,
        },
        AbortedTransaction {
            producer_id: 7,
            first_offset: 14,
        },
    ];
    let kept = recs([0, 1, 4, 5, 6, 10, 11, 12, 16]);
    (batches, aborted, kept)
}

#[test]
fn aborted_transactions_are_dropped_and_committed_ones_kept() {
    let (batches, aborted, kept) = transactional_log();
    let all = batches.concat();
    let originals = recs(0..17);
    let mut t = PartitionTransformer::new(0, opts());
    let out = run(&mut t, &aborted, &all).unwrap();
    assert_eq!(consumed(&out, &originals), kept);
    assert!(out.iter().all(|b| b.kind() == TargetKind::PassedThrough));
    assert_eq!(t.position(), 17);
    for b in &out {
        assert!(!batch::validate(&b.stamped(MIRROR)).unwrap().is_transactional());
    }
}

#[test]
fn transactions_span_fetch_responses() {
    let (batches, aborted, kept) = transactional_log();
    let originals = recs(0..17);
    // Every way to cut the log into two responses; each lists the aborted
    // transactions that overlap it, as Kafka's broker does (those whose
    // range reaches its first offset and that start before its end).
    for cut in 1..batches.len() {
        let first = batches[..cut].concat();
        let second = batches[cut..].concat();
        let second_start = BatchHeader::parse(&batches[cut]).unwrap().base_offset;
        let overlapping = |from: i64, to: i64| -> Vec<AbortedTransaction> {
            // Transaction (7, 2) ends at 9, (7, 14) at 15.
            aborted
                .iter()
                .copied()
                .filter(|a| {
                    let end = if a.first_offset == 2 { 9 } else { 15 };
                    end >= from && a.first_offset <= to
                })
                .collect()
        };
        let mut t = PartitionTransformer::new(0, opts());
        let mut out = run(&mut t, &overlapping(0, second_start - 1), &first).unwrap();
        out.extend(run(&mut t, &overlapping(second_start, 16), &second).unwrap());
        assert_eq!(consumed(&out, &originals), kept, "cut before batch {cut}");
        // A response that lists everything (a broker may list more) works too.
        let mut t = PartitionTransformer::new(0, opts());
        let mut out = run(&mut t, &aborted, &first).unwrap();
        out.extend(run(&mut t, &aborted, &second).unwrap());
        assert_eq!(
            consumed(&out, &originals),
            kept,
            "cut before batch {cut}, full lists"
        );
    }
}

#[test]
fn a_mirror_that_starts_inside_an_aborted_transaction_drops_the_rest_of_it() {
    let (batches, aborted, _) = transactional_log();
    // Start at offset 5 (batch 3): the transaction begun at 2 is under way.
    let rest = batches[3..].concat();
    let mut t = PartitionTransformer::new(5, opts());
    let out = run(&mut t, &aborted, &rest).unwrap();
    assert_eq!(consumed(&out, &recs(0..17)), recs([5, 6, 10, 11, 12, 16]));
}

#[test]
fn large_batches_are_split_within_the_limit() {
    let offsets: Vec<i64> = (0..400).collect();
    let mut src = Src::at(&offsets);
    for r in &mut src.records {
        // Poorly compressible values, so that every codec needs splits.
        let mut v = Vec::with_capacity(300);
        let mut x = (r.offset as u32).wrapping_mul(2_654_435_761) | 1;
        for _ in 0..300 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            v.push(x as u8);
        }
        r.value = Some(v);
    }
    for codec in CODECS {
        let bytes = src.clone().codec(codec).encode();
        let limit = 10_000;
        let mut t = PartitionTransformer::new(0, TransformOptions::new(limit));
        let out = transform(&mut t, &bytes).unwrap();
        assert!(
            out.batches().len() >= 12,
            "{codec}: {} batches",
            out.batches().len()
        );
        for b in out.batches() {
            assert!(b.bytes().len() <= limit, "{codec}: {} bytes", b.bytes().len());
            assert_eq!(
                b.kind(),
                TargetKind::ReEncoded(ReEncodeReasons {
                    too_large: true,
                    ..ReEncodeReasons::default()
                })
            );
            assert_eq!(BatchHeader::parse(b.bytes()).unwrap().compression(), codec);
        }
        // Not too many batches either: each holds most of what fits.
        let total: usize = out.batches().iter().map(|b| b.bytes().len()).sum();
        assert!(
            total / out.batches().len() > limit / 2,
            "{codec}: batches too small"
        );
        assert_eq!(consumed(out.batches(), &src.records), src.records, "{codec}");
        // Source ranges chain up.
        for pair in out.batches().windows(2) {
            assert_eq!(pair[0].source().last_offset + 1, pair[1].source().first_offset);
        }
    }
}

#[test]
fn compressible_batches_split_by_their_compressed_size() {
    // 2 MB of repetitive records compress far below the 100 KB limit per
    // batch: few batches, not one per 100 KB of raw records.
    let offsets: Vec<i64> = (0..2_000).collect();
    let mut src = Src::at(&offsets);
    src.last_offset_delta = Some(2_500); // gaps: re-encoded
    for r in &mut src.records {
        r.value = Some(vec![b'a' + (r.offset % 3) as u8; 1_000]);
    }
    for codec in [
        Compression::Gzip,
        Compression::Lz4,
        Compression::Zstd,
        Compression::Snappy,
    ] {
        let bytes = src.clone().codec(codec).encode();
        let limit = 100_000;
        let mut t = PartitionTransformer::new(0, TransformOptions::new(limit));
        let out = transform(&mut t, &bytes).unwrap();
        assert!(
            out.batches().len() <= 4,
            "{codec}: {} batches",
            out.batches().len()
        );
        assert_eq!(consumed(out.batches(), &src.records), src.records, "{codec}");
    }
}

#[test]
fn a_record_too_large_for_the_target_is_an_error() {
    let mut src = Src::at(&[0, 1, 2]);
    src.records[1].value = Some(vec![7; 5_000]);
    let bytes = src.encode();
    let mut t = PartitionTransformer::new(0, TransformOptions::new(2_000));
    let err = transform(&mut t, &bytes).unwrap_err();
    assert!(
        matches!(err, TransformError::RecordTooLarge { offset: 1, limit: 2_000, size } if size > 5_000),
        "{err:?}"
    );
    assert!(err.to_string().contains("cannot be mirrored"), "{err}");
    // Nothing moved: the state is as before the call.
    assert_eq!(t.position(), 0);
    // Compressed, the same record fits.
    let bytes = src.codec(Compression::Gzip).encode();
    let out = transform(&mut t, &bytes).unwrap();
    assert_eq!(out.batches().len(), 1);
    assert_eq!(out.batches()[0].kind(), TargetKind::PassedThrough);
}

#[test]
fn a_single_record_that_compression_enlarges_is_written_uncompressed() {
    // Random bytes: gzip makes them a little larger.
    let mut v = Vec::new();
    let mut x = 12345u64;
    for _ in 0..3_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        v.push((x >> 56) as u8);
    }
    let mut src = Src::at(&[0]).codec(Compression::Gzip);
    src.records[0].value = Some(v);
    src.records[0].headers.clear();
    src.records[0].key = None;
    let plain = Src {
        codec: Compression::None,
        ..src.clone()
    }
    .encode();
    let mut src_gz = src.clone();
    src_gz.log_append_time = Some(5); // forces a re-encode
    let bytes = src_gz.encode();
    let mut t = PartitionTransformer::new(0, TransformOptions::new(plain.len()));
    let out = transform(&mut t, &bytes).unwrap();
    let [target] = out.batches() else {
        panic!("{out:?}")
    };
    assert_eq!(
        BatchHeader::parse(target.bytes()).unwrap().compression(),
        Compression::None
    );
    assert!(target.bytes().len() <= plain.len());
}

#[test]
fn the_same_source_gives_the_same_bytes_and_fingerprints() {
    for codec in CODECS {
        let offsets: Vec<i64> = (0..300).filter(|o| o % 7 != 3).collect();
        let mut src = Src::at(&offsets).codec(codec);
        src.last_offset_delta = Some(299);
        let bytes = src.encode();
        let run_once = || {
            let mut t = PartitionTransformer::new(20, TransformOptions::new(1_000));
            let out = transform(&mut t, &bytes).unwrap();
            out.into_batches()
                .into_iter()
                .map(|b| (b.bytes().to_vec(), b.fingerprint()))
                .collect::<Vec<_>>()
        };
        let first = run_once();
        assert!(first.len() > 1, "{codec}");
        assert_eq!(first, run_once(), "{codec}");
        // Fingerprints tell different batches apart.
        let mut prints: Vec<_> = first.iter().map(|(_, f)| *f).collect();
        prints.sort();
        prints.dedup();
        assert_eq!(prints.len(), first.len());
    }
}

#[test]
fn fingerprints_ignore_what_the_mirror_and_the_target_broker_rewrite() {
    let bytes = Src::at(&[3, 4, 5])
        .transactional()
        .codec(Compression::Lz4)
        .encode();
    let print = fingerprint(&bytes).unwrap();
    let stamped = {
        let mut b = bytes.clone();
        stamp(&mut b, MIRROR).unwrap();
        b
    };
    assert_eq!(fingerprint(&stamped).unwrap(), print);
    // As a target broker stores it: offset, leader epoch; and a topic with
    // LogAppendTime sets the timestamp type and max timestamp.
    let mut stored = stamped.clone();
    batch::stamp(&mut stored, 987_654, 12);
    stored[22] |= 0x08;
    stored[35..43].copy_from_slice(&1_900_000_000_000i64.to_be_bytes());
    fix_crc(&mut stored);
    assert_eq!(fingerprint(&stored).unwrap(), print);
    // Trailing bytes are not part of it.
    assert_eq!(
        fingerprint(&[stored.clone(), vec![1, 2, 3]].concat()).unwrap(),
        print
    );
    // Content is.
    for at in [8, 16, 22, 23, 27, 57, 61, bytes.len() - 1] {
        let mut other = bytes.clone();
        other[at] ^= 0x01;
        assert_ne!(fingerprint(&other).ok(), Some(print), "byte {at}");
    }
    assert!(fingerprint(&bytes[..bytes.len() - 1]).is_err());
    assert_eq!(print.to_string().len(), 32);
}

#[test]
fn fetched_records_yield_whole_batches_and_report_a_partial_tail() {
    let a = Src::at(&[0, 1]).encode();
    let b = Src::at(&[2]).codec(Compression::Zstd).encode();
    let c = Src::at(&[3, 4, 5]).encode();
    let whole = [a.clone(), b.clone(), c.clone()].concat();
    for cut in 0..=whole.len() {
        let mut it = FetchedBatches::new(&whole[..cut]);
        let got: Vec<_> = (&mut it).map(|r| r.unwrap().bytes().to_vec()).collect();
        let mut expected = Vec::new();
        let mut end = 0;
        for batch in [&a, &b, &c] {
            if end + batch.len() > cut {
                break;
            }
            expected.push(batch.to_vec());
            end += batch.len();
        }
        assert_eq!(got, expected, "cut at {cut}");
        assert_eq!(it.partial_bytes(), cut - end, "cut at {cut}");
        assert_eq!(it.consumed_bytes(), end);
        assert!(it.next().is_none());
    }
}

#[test]
fn malformed_source_data_is_a_typed_error_never_a_panic() {
    let good = Src::at(&[10, 11, 12]).encode();
    let expect_err = |bytes: &[u8], check: &dyn Fn(&TransformError) -> bool| {
        let mut t = PartitionTransformer::new(0, opts());
        let result = FetchedBatches::new(bytes)
            .next()
            .expect("a whole batch")
            .and_then(|b| t.transform(&b));
        let err = result.expect_err("an error");
        assert!(check(&err), "unexpected {err:?}");
        assert!(err.to_string().contains("source"), "{err}");
        assert_eq!(t.position(), 0, "the state moved on an error");
    };
    // Bad CRC.
    let mut bad = good.clone();
    *bad.last_mut().unwrap() ^= 1;
    expect_err(&bad, &|e| {
        matches!(
            e,
            TransformError::BadBatch {
                position: 0,
                error: BatchError::Crc { .. }
            }
        )
    });
    // Old message format.
    let mut old = good.clone();
    old[16] = 1;
    expect_err(&old, &|e| matches!(e, TransformError::OldFormat { magic: 1, .. }));
    // Impossible offsets.
    let mut negative = good.clone();
    negative[0..8].copy_from_slice(&(-5i64).to_be_bytes());
    expect_err(&negative, &|e| matches!(e, TransformError::BadOffsetRange { .. }));
    // Unknown codec.
    let mut unknown = good.clone();
    unknown[22] |= 6;
    fix_crc(&mut unknown);
    expect_err(&unknown, &|e| {
        matches!(e, TransformError::UnknownCodec { codec: 6, .. })
    });
    // Records that do not decode, with a valid CRC.
    let mut garbage = good.clone();
    for b in &mut garbage[61..] {
        *b = 0xff;
    }
    fix_crc(&mut garbage);
    expect_err(&garbage, &|e| {
        matches!(e, TransformError::BadRecords { base_offset: 10, .. })
    });
    // A compressed section that does not decompress.
    let mut corrupt = Src::at(&[10, 11, 12]).codec(Compression::Gzip);
    corrupt.last_offset_delta = Some(5); // gaps: must decode
    let mut corrupt = corrupt.encode();
    let n = corrupt.len();
    corrupt[n - 12..n - 4].fill(0);
    fix_crc(&mut corrupt);
    expect_err(&corrupt, &|e| {
        matches!(
            e,
            TransformError::BadRecords {
                error: RecordError::Decompress(_),
                ..
            }
        )
    });
    // Offset deltas that go backwards.
    let mut backwards = Src::at(&[10, 11, 12]);
    backwards.records.swap(0, 1);
    backwards.records[1].timestamp = backwards.records[0].timestamp;
    expect_err(&backwards.encode(), &|e| {
        matches!(
            e,
            TransformError::BadOffsets {
                index: 1,
                offset_delta: 0,
                ..
            }
        )
    });
    // A control record whose key is too short.
    let mut control = Src::at(&[3]).producer(7).transactional();
    control.control = true;
    control.records[0].key = Some(vec![0, 0]);
    expect_err(&control.encode(), &|e| {
        matches!(e, TransformError::BadControlRecord { .. })
    });
    // A batch above the decompression limit.
    let big = Src::at(&[0, 1]).codec(Compression::Zstd);
    let mut big = big;
    big.last_offset_delta = Some(3);
    big.records[0].value = Some(vec![0; 100_000]);
    let bytes = big.encode();
    let mut t = PartitionTransformer::new(
        0,
        TransformOptions {
            max_batch_bytes: 1 << 20,
            max_uncompressed_bytes: 50_000,
        },
    );
    let err = transform(&mut t, &bytes).unwrap_err();
    assert_eq!(
        err,
        TransformError::TooLargeUncompressed {
            base_offset: 0,
            limit: 50_000
        }
    );

    // A bad batch after good ones stops the iterator.
    let stream = [good.clone(), bad.clone(), good.clone()].concat();
    let items: Vec<_> = FetchedBatches::new(&stream).collect();
    assert_eq!(items.len(), 2);
    assert!(items[0].is_ok());
    assert!(matches!(items[1], Err(TransformError::BadBatch { position, .. }) if position == good.len()));
}

#[test]
fn every_cut_and_bit_flip_of_a_batch_is_an_error_or_a_valid_result() {
    let mut src = Src::at(&[0, 2, 3]).codec(Compression::Snappy);
    src.last_offset_delta = Some(4);
    let good = src.encode();
    for at in 0..good.len() {
        for bit in [0x01, 0x80] {
            let mut bytes = good.clone();
            bytes[at] ^= bit;
            fix_crc(&mut bytes); // get past the CRC to the parsers
            let mut t = PartitionTransformer::new(0, TransformOptions::new(300));
            for item in FetchedBatches::new(&bytes) {
                let Ok(b) = item else { break };
                if let Ok(out) = t.transform(&b) {
                    for target in out.batches() {
                        assert!(batch::validate(&target.stamped(MIRROR)).is_ok());
                        assert!(target.bytes().len() <= 300 || target.kind() == TargetKind::PassedThrough);
                    }
                }
            }
        }
    }
}

#[test]
fn ranges_map_target_offsets_back_to_source_offsets() {
    let offsets: Vec<i64> = vec![100, 103, 104, 110, 111, 112, 130];
    let mut src = Src::at(&offsets);
    src.last_offset_delta = Some(35);
    let bytes = src.encode();
    let mut t = PartitionTransformer::new(104, TransformOptions::new(250));
    let out = transform(&mut t, &bytes).unwrap();
    let mut mapped = Vec::new();
    for b in out.batches() {
        let range = b.source();
        let (_, seen) = decode(b.bytes(), 0);
        assert_eq!(seen.first().unwrap().key, Rec::at(range.first_offset).key);
        assert_eq!(seen.last().unwrap().key, Rec::at(range.last_offset).key);
        mapped.extend(seen.iter().map(|r| r.key.clone()));
    }
    assert_eq!(
        mapped,
        recs([104, 110, 111, 112, 130])
            .into_iter()
            .map(|r| r.key)
            .collect::<Vec<_>>()
    );
    assert_eq!(t.position(), 136);
}

/// Source batches of `per` records each from offset 0, in `codec`, with a
/// transactional one and a control batch between them, concatenated as one
/// fetch brings them; and their records.
fn small_batches(codec: Compression, batches: i64, per: i64) -> (Vec<u8>, Vec<Rec>) {
    let mut bytes = Vec::new();
    let mut records = Vec::new();
    let mut offset = 0;
    for b in 0..batches {
        if b == batches / 2 {
            // A committed transaction's batch and its marker in between.
            let recs = recs(offset..offset + per);
            bytes.extend(
                Src::new(offset, recs.clone())
                    .codec(codec)
                    .producer(7)
                    .transactional()
                    .encode(),
            );
            records.extend(recs);
            offset += per;
            bytes.extend(marker(7, offset, false));
            offset += 1;
        }
        let recs = recs(offset..offset + per);
        bytes.extend(Src::new(offset, recs.clone()).codec(codec).encode());
        records.extend(recs);
        offset += per;
    }
    (bytes, records)
}

#[test]
fn small_batches_coalesce_into_one_with_every_record_as_it_was() {
    for codec in CODECS {
        let (bytes, records) = small_batches(codec, 20, 5);
        let mut t = PartitionTransformer::new(0, opts());
        let out = run(&mut t, &[], &bytes).unwrap();
        assert_eq!(out.len(), 21, "{codec}");
        let merged = coalesce_runs(out.clone(), 1 << 20, 1 << 20, opts()).unwrap();
        assert_eq!(merged.len(), 1, "{codec}");
        let batch = &merged[0];
        assert_eq!(
            batch.kind(),
            TargetKind::ReEncoded(ReEncodeReasons {
                coalesced: true,
                ..ReEncodeReasons::default()
            })
        );
        let (h, _) = decode(batch.bytes(), 0);
        assert_eq!(h.compression(), codec);
        assert!(!h.is_transactional());
        assert_eq!(batch.sequence_count(), 105);
        let range = batch.source();
        assert_eq!(
            (range.first_offset, range.last_offset, range.record_count),
            (0, 105, 105)
        );
        // Keys, values, headers and timestamps as the source had them, in
        // order, the marker's offset left out.
        assert_eq!(consumed(&merged, &records), records, "{codec}");
        // Merging the same batches again gives the same bytes.
        assert_eq!(coalesce(&out, opts()).unwrap().unwrap().bytes(), batch.bytes());
    }
}

#[test]
fn coalescing_keeps_large_batches_and_limits_as_they_are() {
    let (bytes, records) = small_batches(Compression::None, 12, 10);
    let mut t = PartitionTransformer::new(0, opts());
    let out = run(&mut t, &[], &bytes).unwrap();
    let sizes: Vec<usize> = out.iter().map(|b| b.bytes().len()).collect();
    let one = *sizes.iter().max().unwrap();
    // Below the size of the smallest batch: nothing is small.
    let none = coalesce_runs(out.clone(), *sizes.iter().min().unwrap(), 1 << 20, opts()).unwrap();
    assert_eq!(none, out);
    // Runs of at most three batches' bytes.
    let threes = coalesce_runs(out.clone(), one + 1, 3 * one + 10, opts()).unwrap();
    assert!(
        threes.iter().all(|b| b.record_count() <= 30),
        "{:?}",
        threes.iter().map(TargetBatch::record_count).collect::<Vec<_>>()
    );
    assert!(threes.len() < out.len());
    assert_eq!(consumed(&threes, &records), records);
    // Within the target's max.message.bytes, whatever up_to says.
    let small = TransformOptions::new(2 * one + 10);
    let pairs = coalesce_runs(out.clone(), one + 1, 1 << 20, small).unwrap();
    assert!(pairs.iter().all(|b| b.bytes().len() <= 2 * one + 10));
    assert_eq!(consumed(&pairs, &records), records);
    // Codecs are not mixed: a run ends where the codec changes.
    let mut mixed = Src::at(&[200, 201]).codec(Compression::Lz4).encode();
    mixed.extend(Src::at(&[202, 203]).encode());
    mixed.extend(Src::at(&[204, 205]).encode());
    let mut t = PartitionTransformer::new(200, opts());
    let out = run(&mut t, &[], &mixed).unwrap();
    let runs = coalesce_runs(out, 1 << 20, 1 << 20, opts()).unwrap();
    assert_eq!(
        runs.iter().map(TargetBatch::record_count).collect::<Vec<_>>(),
        vec![2, 4]
    );
}

#[test]
fn a_merged_batch_is_found_among_the_source_batches_it_was_made_of() {
    let (bytes, _) = small_batches(Compression::Lz4, 10, 4);
    let mut t = PartitionTransformer::new(0, opts());
    let out: Vec<TargetBatch<'static>> = run(&mut t, &[], &bytes)
        .unwrap()
        .into_iter()
        .map(TargetBatch::into_owned)
        .collect();
    // As a fetch that brought batches 3..7 merged them.
    let merged = coalesce(&out[3..7], opts()).unwrap().unwrap();
    let print = merged.fingerprint();
    assert!(made_of(&out[3..7], print, opts()).unwrap());
    assert!(!made_of(&out[3..6], print, opts()).unwrap());
    assert!(!made_of(&out[4..8], print, opts()).unwrap());
    assert!(made_of(&out[5..6], out[5].fingerprint(), opts()).unwrap());
    // Found by content as the source's batches come one by one.
    let mut looking = Coalesced::matching(merged.record_count(), print, opts());
    let found: Vec<bool> = out.iter().map(|b| looking.push(b.clone()).unwrap()).collect();
    assert_eq!(found.iter().position(|&f| f), Some(6), "{found:?}");
    // A single batch too.
    let mut looking = Coalesced::matching(out[8].record_count(), out[8].fingerprint(), opts());
    let found: Vec<bool> = out.iter().map(|b| looking.push(b.clone()).unwrap()).collect();
    assert_eq!(found.iter().position(|&f| f), Some(8), "{found:?}");
}
