//! Arbitrary bytes through the batch header parser, the full validation,
//! the batch iterator, and the records decoders (lenient and strict) with
//! decompression: never a panic, never unbounded output, and what they say
//! about the bytes must hold.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strait_batch::{self as batch, BatchError, BatchHeader, Batches, HEADER_LEN, LOG_OVERHEAD};

fuzz_target!(|data: &[u8]| {
    check_header(data);
    check_batches(data);
    check_records(data);
});

/// Most bytes a compressed section may expand to here.
const LIMIT: usize = 1 << 20;

fn check_records(data: &[u8]) {
    let Ok(h) = BatchHeader::parse(data) else {
        return;
    };
    let Ok(section) = batch::records_section(data, LIMIT) else {
        return;
    };
    if h.compression() != batch::Compression::None {
        assert!(section.len() <= LIMIT, "decompressed {} bytes", section.len());
    }
    let lenient = batch::parse_records(&section, h.record_count);
    if let Ok(records) = &lenient {
        assert_eq!(records.len(), h.record_count as usize);
        for r in records {
            let lens = r.key.map_or(0, <[u8]>::len) + r.value.map_or(0, <[u8]>::len);
            assert!(lens <= section.len());
        }
    }
    // The strict decoder takes less than the lenient one, and agrees with
    // it on what both read; its headers decode to what it counted.
    if let Ok(raw) = batch::parse_raw_records(&section, h.record_count) {
        let records = lenient.expect("the strict decoder took what the lenient one refused");
        assert_eq!(raw.len(), records.len());
        for (r, p) in raw.iter().zip(&records) {
            assert_eq!(
                (r.timestamp_delta, r.offset_delta, r.key, r.value),
                (p.timestamp_delta, p.offset_delta, p.key, p.value)
            );
            assert_eq!(r.headers.iter().count(), r.headers.len());
            assert!(r.headers.raw().len() <= section.len());
        }
    }
}

fn check_header(data: &[u8]) {
    let parsed = BatchHeader::parse(data);
    match &parsed {
        Ok(h) => {
            assert!(data.len() >= HEADER_LEN);
            assert_eq!(data[16], 2, "parsed a header with magic {}", data[16]);
            assert!(h.batch_length as usize >= HEADER_LEN - LOG_OVERHEAD);
            assert!(h.size() >= HEADER_LEN);
            assert!(h.record_count >= 0 && h.last_offset_delta >= 0);
            assert!(h.last_offset_delta >= h.record_count - 1);
            assert!(h.offset_count() >= 1 && h.offset_count() <= 1 << 31);
            // Fields are where the format puts them.
            assert_eq!(h.base_offset.to_be_bytes(), data[0..8]);
            assert_eq!(h.crc.to_be_bytes(), data[17..21]);
            assert_eq!(h.record_count.to_be_bytes(), data[57..61]);
            let _ = (
                h.compression().to_string(),
                h.is_control(),
                h.is_transactional(),
                h.log_append_time(),
            );
        }
        Err(BatchError::TruncatedHeader { available }) => {
            assert!(data.len() < HEADER_LEN && *available == data.len());
        }
        Err(BatchError::Magic(m)) => assert_eq!(*m as u8, data[16]),
        Err(BatchError::LengthTooSmall { .. } | BatchError::RecordCount { .. }) => {}
        Err(e @ (BatchError::Truncated { .. } | BatchError::Crc { .. })) => {
            panic!("parse does not look at the data or the CRC, yet said {e:?}")
        }
    }

    match batch::validate(data) {
        Ok(h) => {
            assert_eq!(parsed, Ok(h), "validate accepted what parse refused");
            let size = h.size();
            assert!(size <= data.len(), "validated size {size} > {} bytes", data.len());
            assert_eq!(crc32c::crc32c(&data[21..size]), h.crc);
            // The batch alone, without what follows, is still valid.
            assert_eq!(batch::validate(&data[..size]), Ok(h));
            // One byte short is not.
            assert!(matches!(
                batch::validate(&data[..size - 1]),
                Err(BatchError::Truncated { .. } | BatchError::TruncatedHeader { .. })
            ));
            // Stamping offset and epoch keeps it valid and changes only them.
            let mut copy = data[..size].to_vec();
            batch::stamp(&mut copy, 12_345, 7);
            let stamped = batch::validate(&copy).expect("stamping broke the batch");
            assert_eq!((stamped.base_offset, stamped.partition_leader_epoch), (12_345, 7));
            assert_eq!(
                BatchHeader {
                    base_offset: h.base_offset,
                    partition_leader_epoch: h.partition_leader_epoch,
                    ..stamped
                },
                h
            );
            assert_eq!(stamped.last_offset(), 12_345 + h.last_offset_delta as i64);
        }
        Err(e) => match parsed {
            Err(pe) => assert_eq!(e, pe, "validate and parse disagree on a bad header"),
            Ok(h) => assert!(
                matches!(e, BatchError::Truncated { needed, available } if needed == h.size() && available == data.len())
                    || matches!(e, BatchError::Crc { stored, .. } if stored == h.crc),
                "validate said {e:?} for a header that parses"
            ),
        },
    }
}

fn check_batches(data: &[u8]) {
    let mut expected = 0usize;
    let mut previous: Option<usize> = None;
    let mut failed = false;
    for item in Batches::new(data) {
        assert!(!failed, "the iterator went on after an error");
        match item {
            Ok((pos, h)) => {
                assert_eq!(pos, expected, "batches are not back to back");
                if let Some(prev) = previous {
                    assert!(pos > prev, "positions do not increase");
                }
                assert_eq!(
                    batch::validate(&data[pos..]),
                    Ok(h),
                    "an item does not re-validate"
                );
                expected = pos + h.size();
                assert!(expected <= data.len());
                previous = Some(pos);
            }
            Err((pos, e)) => {
                assert_eq!(pos, expected, "error reported away from the next batch");
                assert!(pos < data.len());
                assert_eq!(batch::validate(&data[pos..]), Err(e));
                failed = true;
            }
        }
    }
    assert!(
        failed || expected == data.len(),
        "the iterator stopped early at {expected} of {}",
        data.len()
    );
}
