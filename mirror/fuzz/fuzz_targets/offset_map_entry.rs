//! The offset map's entries, as read from the map topic on the target
//! (bytes any client of that cluster could have written): decoding never
//! panics; what decodes encodes back to the same entry and applies to a
//! map that translates every offset without panicking, to a target offset
//! or as not mirrored yet past the map's end.

#![no_main]

use libfuzzer_sys::fuzz_target;
use strait_mirror::offset_map::{Entry, Map, Translation};

fuzz_target!(|data: &[u8]| {
    // Two entries of one partition, split where the first byte says.
    let split = data.first().map_or(0, |&b| usize::from(b)).min(data.len());
    let (first, second) = data.split_at(split);
    let mut map = Map::default();
    for bytes in [first, second] {
        let Ok(entry) = Entry::decode(bytes) else { continue };
        // (Varints may come longer than needed: the same entry, not the
        // same bytes.)
        assert_eq!(
            Entry::decode(&entry.encode()).as_ref(),
            Ok(&entry),
            "an entry encodes and decodes back"
        );
        map.apply(Some(b"t:0"), Some(bytes))
            .expect("a decoded entry applies");
    }
    let Some(partition) = map.partitions.get(&("t".to_owned(), 0)) else {
        return;
    };
    let (end_source, _) = partition.end().expect("an applied map has an end");
    let probes = partition
        .segments()
        .iter()
        .flat_map(|s| {
            let end = s.source + s.count; // checked by decoding
            [s.source.saturating_sub(1), s.source, end - 1, end]
        })
        .chain([0, end_source, end_source.saturating_add(1)]);
    for offset in probes {
        match partition.translate(offset) {
            Translation::Exact(t) | Translation::BeforeMap(t) => assert!(t >= 0),
            Translation::Ahead(at) => assert!(offset > at && at == end_source),
            Translation::Unknown => panic!("an applied map knows its partition"),
        }
    }
});
