//! Arbitrary bytes as a fetch response's records, run through the mirror's
//! batch transform: never a panic, and every target batch it produces is
//! valid, within the limit, holds contiguous offsets and only source
//! records from the position on, in order (a re-encoded one decodes; a
//! passed-through one is the source's bytes); the same input gives the same
//! bytes twice.
//!
//! With flag bit 1, the target batches are then merged as `coalesce_below`
//! does: an error or batches within the limit that hold the same records,
//! in order. With flag bit 2, loop prevention is on: every batch is
//! re-encoded and each of its records carries an origin that is not the
//! target.
//!
//! Input: 2 bytes of limit, 1 byte of position, 1 byte of flags (bit 0: an
//! aborted transaction of producer 1000 at the position; bit 1: merge; bit
//! 2: loop prevention), then the records.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strait_batch::{self as batch, BatchHeader};
use std::sync::Arc;

use strait_mirror::batch::{
    coalesce_runs, fingerprint, AbortedTransaction, FetchedBatches, Origins, PartitionTransformer,
    ProducerStamp, TargetBatch, TargetKind, TransformOptions, ORIGIN_HEADER,
};

fuzz_target!(|data: &[u8]| {
    let [l0, l1, pos, flags, records @ ..] = data else {
        return;
    };
    let limit = 61 + usize::from(u16::from_be_bytes([*l0, *l1]));
    let first_offset = FetchedBatches::new(records)
        .next()
        .and_then(Result::ok)
        .map_or(0, |b| b.header().base_offset);
    let position = first_offset.saturating_add(i64::from(*pos));
    let aborted = if flags & 1 != 0 {
        vec![AbortedTransaction {
            producer_id: 1000,
            first_offset: position,
        }]
    } else {
        Vec::new()
    };
    let origins = (flags & 4 != 0).then(|| {
        Arc::new(Origins {
            source: b"src".as_slice().into(),
            target: b"dst".as_slice().into(),
        })
    });
    let first = run(records, position, limit, &aborted, &origins);
    let again = run(records, position, limit, &aborted, &origins);
    assert_eq!(bytes(&first), bytes(&again), "not deterministic");
    if flags & 2 != 0 {
        merge(first, limit);
    }
});

fn bytes(batches: &[TargetBatch<'_>]) -> Vec<Vec<u8>> {
    batches.iter().map(|b| b.bytes().to_vec()).collect()
}

/// Merges `batches` as `coalesce_below: limit` would and checks the result.
fn merge(batches: Vec<TargetBatch<'_>>, limit: usize) {
    let options = TransformOptions {
        max_batch_bytes: limit,
        max_uncompressed_bytes: 1 << 20,
    };
    let records: i64 = batches.iter().map(|b| i64::from(b.record_count())).sum();
    let offsets: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            b.source()
                .runs()
                .flat_map(|(first, count)| first..first + count)
                .collect::<Vec<_>>()
        })
        .collect();
    let first = batches.first().map(|b| b.source().first_offset);
    let last = batches.last().map(|b| b.source().last_offset);
    // A passed-through compressed batch was never decoded: merging it may
    // find it bad, which is an error, not a panic.
    let Ok(merged) = coalesce_runs(batches, limit, limit, options) else {
        return;
    };
    assert_eq!(
        merged.iter().map(|b| i64::from(b.record_count())).sum::<i64>(),
        records
    );
    assert_eq!(merged.first().map(|b| b.source().first_offset), first);
    assert_eq!(merged.last().map(|b| b.source().last_offset), last);
    // Every record's source offset is still known exactly.
    let merged_offsets: Vec<i64> = merged
        .iter()
        .flat_map(|b| {
            b.source()
                .runs()
                .flat_map(|(first, count)| first..first + count)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(merged_offsets, offsets);
    for b in &merged {
        assert!(b.bytes().len() <= limit);
        let h = batch::validate(b.bytes()).expect("a merged batch validates");
        assert_eq!(h.record_count, b.record_count());
    }
}

/// The produced batches, after checking each.
fn run<'a>(
    records: &'a [u8],
    position: i64,
    limit: usize,
    aborted: &[AbortedTransaction],
    origins: &Option<Arc<Origins>>,
) -> Vec<TargetBatch<'a>> {
    let options = TransformOptions {
        max_batch_bytes: limit,
        max_uncompressed_bytes: 1 << 20,
    };
    let mut t = PartitionTransformer::new(position, options).with_origins(origins.clone());
    t.add_aborted(aborted);
    let mut produced = Vec::new();
    let mut previous_last = position - 1;
    let mut it = FetchedBatches::new(records);
    for item in &mut it {
        let Ok(source) = item else { break };
        let before = t.position();
        let Ok(out) = t.transform(&source) else {
            assert_eq!(t.position(), before, "an error moved the position");
            break;
        };
        assert_eq!(out.next_offset(), t.position());
        assert!(t.position() >= before);
        for target in out.into_batches() {
            let bytes = target.bytes();
            assert!(
                bytes.len() <= limit,
                "{} bytes above the limit {limit}",
                bytes.len()
            );
            let stamp = ProducerStamp {
                producer_id: 5,
                producer_epoch: 1,
                base_sequence: 0,
            };
            let stamped = target.stamped(stamp);
            let h = batch::validate(&stamped).expect("a stamped target batch validates");
            assert_eq!(h.size(), stamped.len());
            assert!(!h.is_control() && !h.is_transactional());
            assert_eq!(h.record_count, h.last_offset_delta + 1);
            assert_eq!(target.sequence_count(), h.record_count);
            assert_eq!(fingerprint(&stamped).ok(), Some(target.fingerprint()));
            let range = target.source();
            assert_eq!(range.record_count, h.record_count);
            assert_eq!(
                range.runs().map(|(_, count)| count).sum::<i64>(),
                i64::from(h.record_count)
            );
            assert!(range.first_offset > previous_last && range.first_offset >= position);
            assert!(range.last_offset >= range.first_offset);
            assert!(range.last_offset <= source.last_offset());
            previous_last = range.last_offset;
            match target.kind() {
                // Passed through as fetched: a compressed one is not
                // decoded (the source broker checked it when it took it).
                TargetKind::PassedThrough => {
                    assert!(origins.is_none(), "passed through with loop prevention");
                    assert_eq!(bytes, source.bytes())
                }
                TargetKind::ReEncoded(_) => {
                    let section = batch::records_section(&stamped, 1 << 24).expect("decompresses");
                    let recs = batch::parse_raw_records(&section, h.record_count).expect("decodes");
                    for (i, r) in recs.iter().enumerate() {
                        assert_eq!(r.offset_delta, i as i64);
                        if origins.is_some() {
                            let origin = r.headers.get(ORIGIN_HEADER).expect("an origin");
                            assert_ne!(origin, Some(&b"dst"[..]), "a record from the target");
                        }
                    }
                }
            }
            let _ = BatchHeader::parse(bytes).expect("parses");
            produced.push(target);
        }
    }
    assert!(it.partial_bytes() <= records.len());
    produced
}
