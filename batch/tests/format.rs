//! The record batch format: what the builder writes validates and decodes
//! again; every rewrite keeps the CRC right; every kind of damage is named.

use strait_batch::*;

#[test]
fn built_batch_validates_and_reports_fields() {
    let buf = build::batch(1_000, &[b"a", b"bb", b"ccc"]);
    let h = validate(&buf).unwrap();
    assert_eq!(h.size(), buf.len());
    assert_eq!(h.record_count, 3);
    assert_eq!(h.last_offset_delta, 2);
    assert_eq!(h.base_timestamp, 1_000);
    assert_eq!(h.max_timestamp, 1_002);
    assert_eq!(h.compression(), Compression::None);
    assert_eq!(h.producer_id, -1);
}

#[test]
fn stamping_keeps_the_crc_valid() {
    let mut buf = build::batch(0, &[b"x"]);
    stamp(&mut buf, 42, 7);
    let h = validate(&buf).unwrap();
    assert_eq!(h.base_offset, 42);
    assert_eq!(h.partition_leader_epoch, 7);
    assert_eq!(h.last_offset(), 42);
}

#[test]
fn patching_the_header_updates_the_crc_as_a_full_recompute_would() {
    let values: Vec<Vec<u8>> = (0..40).map(|i| vec![i as u8; 1 + i * 37]).collect();
    let values: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
    for len in [1, 3, 40] {
        let original = build::batch(5, &values[..len]);
        for (at, patch) in [
            (21, vec![0x00, 0x10]),
            (43, vec![0xab; 14]),
            (21, (0..36).map(|i| i * 7).collect::<Vec<u8>>()),
            (56, vec![0xff]),
            (43, original[43..57].to_vec()),
        ] {
            let mut buf = original.clone();
            patch_header(&mut buf, at, &patch).unwrap();
            assert_eq!(buf[at..at + patch.len()], patch[..]);
            let h = validate(&buf).expect("the patched CRC is the full CRC");
            assert_eq!(h.size(), original.len());
        }
        // A damaged batch stays damaged.
        let mut damaged = original.clone();
        *damaged.last_mut().unwrap() ^= 1;
        patch_header(&mut damaged, 43, &[1; 14]).unwrap();
        assert!(matches!(validate(&damaged), Err(BatchError::Crc { .. })));
    }
}

#[test]
fn a_new_producer_leaves_a_valid_batch_with_the_rest_as_it_was() {
    let original = build::batch(5, &[b"one", b"two"]);
    let mut buf = original.clone();
    set_producer(&mut buf, 0x0102_0304_0506, 7).unwrap();
    let h = validate(&buf).expect("the CRC fits");
    assert_eq!((h.producer_id, h.producer_epoch), (0x0102_0304_0506, 7));
    assert_eq!(buf[..17], original[..17]);
    assert_eq!(buf[21..43], original[21..43]);
    assert_eq!(buf[53..], original[53..]);
}

#[test]
fn every_kind_of_damage_is_named() {
    let good = build::batch(0, &[b"hello"]);
    let check = |buf: &[u8], expected: fn(&BatchError) -> bool| {
        let err = validate(buf).unwrap_err();
        assert!(expected(&err), "unexpected error {err:?}");
    };
    check(&good[..30], |e| {
        matches!(e, BatchError::TruncatedHeader { available: 30 })
    });
    check(&good[..good.len() - 1], |e| {
        matches!(e, BatchError::Truncated { .. })
    });
    let mut bad = good.clone();
    bad[16] = 1;
    check(&bad, |e| matches!(e, BatchError::Magic(1)));
    let mut bad = good.clone();
    *bad.last_mut().unwrap() ^= 0xff;
    check(&bad, |e| matches!(e, BatchError::Crc { .. }));
    let mut bad = good.clone();
    bad[8..12].copy_from_slice(&10i32.to_be_bytes());
    check(&bad, |e| matches!(e, BatchError::LengthTooSmall { length: 10 }));
    let mut bad = good.clone();
    bad[57..61].copy_from_slice(&5i32.to_be_bytes());
    check(&bad, |e| matches!(e, BatchError::RecordCount { count: 5, .. }));
}

#[test]
fn records_decode_what_build_encodes() {
    let buf = build::batch(50, &[b"a", b"", b"ccc"]);
    let decoded = records(&buf).unwrap();
    assert_eq!(decoded.len(), 3);
    assert_eq!(
        decoded[2],
        Record {
            timestamp_delta: 2,
            offset_delta: 2,
            key: None,
            value: Some(&b"ccc"[..])
        }
    );
    assert_eq!(decoded[1].value, Some(&b""[..]));
    assert!(matches!(
        records(&buf[..buf.len() - 2]),
        Err(RecordError::Header(_) | RecordError::Malformed { .. })
    ));
    let mut gzip = buf.clone();
    gzip[22] |= 1;
    assert_eq!(
        records(&gzip).unwrap_err(),
        RecordError::Compressed(Compression::Gzip)
    );
}

#[test]
fn raw_records_keep_keys_and_headers() {
    let mut section = build::record(
        0,
        0,
        Some(b"k1"),
        Some(b"v1"),
        &[(b"h", Some(b"x")), (b"n", None)],
    );
    section.extend(build::record(-5, 3, None, None, &[]));
    section.extend(build::record(
        300,
        4,
        Some(b""),
        Some(&[7; 200]),
        &[(b"", Some(b""))],
    ));
    let records = parse_raw_records(&section, 3).unwrap();
    assert_eq!(records.len(), 3);
    let r = &records[0];
    assert_eq!((r.attributes, r.timestamp_delta, r.offset_delta), (0, 0, 0));
    assert_eq!((r.key, r.value), (Some(&b"k1"[..]), Some(&b"v1"[..])));
    assert_eq!(r.headers.len(), 2);
    let headers: Vec<Header<'_>> = r.headers.iter().collect();
    assert_eq!(
        headers,
        [
            Header {
                key: b"h",
                value: Some(b"x")
            },
            Header {
                key: b"n",
                value: None
            }
        ]
    );
    assert_eq!(r.headers.raw(), b"\x02h\x02x\x02n\x01");
    assert_eq!((records[1].timestamp_delta, records[1].offset_delta), (-5, 3));
    assert_eq!((records[1].key, records[1].value), (None, None));
    assert!(records[1].headers.is_empty());
    assert_eq!(records[1].headers.iter().count(), 0);
    assert_eq!(records[2].value, Some(&[7u8; 200][..]));
    assert_eq!(records[2].headers.iter().next().unwrap().value, Some(&b""[..]));
    // The lenient decoder agrees on what both read.
    let plain = parse_records(&section, 3).unwrap();
    for (p, r) in plain.iter().zip(&records) {
        assert_eq!(
            (p.timestamp_delta, p.offset_delta, p.key, p.value),
            (r.timestamp_delta, r.offset_delta, r.key, r.value)
        );
    }
}

#[test]
fn raw_records_refuse_what_kafka_refuses() {
    let good = build::record(0, 0, None, Some(b"v"), &[(b"h", Some(b"x"))]);
    assert!(parse_raw_records(&good, 1).is_ok());
    // Bytes after the last record.
    let trailing = [good.clone(), vec![0, 0]].concat();
    assert_eq!(
        parse_raw_records(&trailing, 1),
        Err(RecordError::TrailingBytes(2))
    );
    assert!(
        parse_records(&trailing, 1).is_ok(),
        "the lenient decoder takes it"
    );
    // A record longer than its fields (one byte appended inside).
    let mut long = good.clone();
    long[0] += 2; // zigzag length + 1
    long.push(0);
    assert!(matches!(
        parse_raw_records(&long, 1),
        Err(RecordError::Malformed { index: 0, .. })
    ));
    // A null header key.
    let mut null_key = vec![0, 0, 0, 1, 0, 2];
    write_varint(&mut null_key, -1);
    write_varint(&mut null_key, -1);
    let mut framed = Vec::new();
    write_varint(&mut framed, null_key.len() as i64);
    framed.extend(null_key);
    assert!(matches!(
        parse_raw_records(&framed, 1),
        Err(RecordError::Malformed {
            what: "bad header",
            ..
        })
    ));
    // Every cut of a good record is an error, never a panic.
    for cut in 0..good.len() {
        assert!(parse_raw_records(&good[..cut], 1).is_err(), "cut at {cut}");
    }
    // More records counted than present.
    assert!(parse_raw_records(&good, 2).is_err());
}

#[test]
fn iterator_walks_concatenated_batches_and_stops_at_damage() {
    let mut buf = build::batch(0, &[b"a"]);
    let second = buf.len();
    buf.extend(build::batch(0, &[b"b", b"c"]));
    let third = buf.len();
    buf.extend_from_slice(&[0u8; 20]);
    let items: Vec<_> = Batches::new(&buf).collect();
    assert_eq!(items.len(), 3);
    assert_eq!(items[0].as_ref().unwrap().0, 0);
    assert_eq!(items[1].as_ref().unwrap().0, second);
    assert_eq!(items[1].as_ref().unwrap().1.record_count, 2);
    assert!(matches!(items[2], Err((p, BatchError::TruncatedHeader { .. })) if p == third));
}

#[test]
fn a_wrong_max_timestamp_is_recomputed_from_the_records() {
    // Records at 500, 501, 502; a producer that writes -1 as the max
    // (sarama 1.22 does) gets it fixed, with a CRC that matches again.
    let mut buf = build::batch(500, &[b"a", b"b", b"c"]);
    set_max_timestamp(&mut buf, -1).unwrap();
    let h = validate(&buf).unwrap();
    assert_eq!(h.max_timestamp, -1);
    assert_eq!(newest_record_timestamp(&buf, 1 << 20), Ok(502));
    set_max_timestamp(&mut buf, 502).unwrap();
    assert_eq!(validate(&buf).unwrap().max_timestamp, 502);
    assert!(matches!(
        set_max_timestamp(&mut buf[..40], 1),
        Err(BatchError::TruncatedHeader { .. })
    ));
}

#[test]
fn varint_lengths_match_the_encoding() {
    for v in [
        0,
        1,
        -1,
        63,
        64,
        -64,
        -65,
        8191,
        8192,
        i32::MAX as i64,
        i64::MAX,
        i64::MIN,
    ] {
        let mut out = Vec::new();
        write_varint(&mut out, v);
        assert_eq!(out.len(), varint_len(v), "{v}");
    }
}

#[test]
fn codec_bits_round_trip() {
    for codec in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let attributes = codec.bits();
        let mut batch = build::batch(0, &[b"x"]);
        batch[21..23].copy_from_slice(&attributes.to_be_bytes());
        assert_eq!(BatchHeader::parse(&batch).unwrap().compression(), codec);
        assert_eq!(attributes & !compression::CODEC_BITS, 0);
    }
}

#[test]
fn a_producer_stamp_keeps_the_crc_and_clears_the_transaction() {
    let spec = build::BatchSpec {
        attributes: TRANSACTIONAL,
        producer_id: 5,
        producer_epoch: 1,
        base_sequence: 9,
        ..build::BatchSpec::default()
    };
    let mut batch = build::batch_with(spec, &[b"a", b"b"]);
    stamp(&mut batch, 40, 3);
    let stamp_of = ProducerStamp {
        producer_id: 77,
        producer_epoch: 2,
        base_sequence: 100,
    };
    stamp_producer(&mut batch, stamp_of).unwrap();
    let h = validate(&batch).unwrap();
    assert_eq!((h.base_offset, h.partition_leader_epoch), (0, -1));
    assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence), (77, 2, 100));
    assert!(!h.is_transactional());
    assert_eq!(records(&batch).unwrap().len(), 2);
}

#[test]
fn the_timestamp_at_an_offset_is_its_records_or_the_append_time() {
    // Base offset 100; records at 100, 101, 102 written at 500, 501, 502.
    let mut buf = build::batch(500, &[b"a", b"b", b"c"]);
    stamp(&mut buf, 100, 0);
    let limit = 1 << 20;
    assert_eq!(
        timestamp_at(&buf, 0, limit),
        Ok(Some(500)),
        "before the batch: its first record"
    );
    assert_eq!(timestamp_at(&buf, 101, limit), Ok(Some(501)));
    assert_eq!(timestamp_at(&buf, 102, limit), Ok(Some(502)));
    assert_eq!(timestamp_at(&buf, 103, limit), Ok(None), "after its last record");
    // LogAppendTime: every record has the broker's time, the max.
    let appended = build::batch_with(
        build::BatchSpec {
            base_timestamp: 500,
            attributes: LOG_APPEND_TIME,
            max_timestamp: Some(9_000),
            ..build::BatchSpec::default()
        },
        &[b"a", b"b"],
    );
    assert_eq!(timestamp_at(&appended, 1, limit), Ok(Some(9_000)));
    // A transaction marker holds nothing a consumer reads.
    let marker = build::batch_with(
        build::BatchSpec {
            attributes: CONTROL | TRANSACTIONAL,
            ..build::BatchSpec::default()
        },
        &[b"m"],
    );
    assert_eq!(timestamp_at(&marker, 0, limit), Ok(None));
}
