//! `strait spool verify` and `strait spool dump`.

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context};
use strait_batch as batch;
use strait_spool::verify::{self, BatchInfo};

/// Verifies a partition or data directory; fails if anything is wrong.
pub fn verify(dir: &Path) -> anyhow::Result<()> {
    let reports = verify::verify_tree(dir).with_context(|| format!("verifying {}", dir.display()))?;
    if reports.is_empty() {
        bail!(
            "{}: no partition found (no *.log segment files at or below it)",
            dir.display()
        );
    }
    let mut out = std::io::stdout().lock();
    let mut problems = 0;
    for r in &reports {
        let status = if r.problems.is_empty() { "ok" } else { "CORRUPT" };
        writeln!(
            out,
            "{status} {}: {} segments, {} batches, {} records, {} bytes, offsets {}..{}, {} index entries",
            r.dir.display(),
            r.segments,
            r.batches,
            r.records,
            r.bytes,
            r.log_start_offset,
            r.next_offset,
            r.index_entries
        )?;
        for p in &r.problems {
            writeln!(out, "  {p}")?;
        }
        problems += r.problems.len();
    }
    out.flush()?;
    if problems > 0 {
        bail!(
            "{problems} problems in {} partitions",
            reports.iter().filter(|r| !r.problems.is_empty()).count()
        );
    }
    Ok(())
}

/// Prints every batch of a partition from `from` on, with its records if
/// `records`.
pub fn dump(dir: &Path, from: u64, records: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let mut segment = None;
    let mut result = Ok(());
    verify::dump_partition(dir, from, |info| {
        if result.is_err() {
            return;
        }
        if segment.as_ref() != Some(&info.segment) {
            segment = Some(info.segment.clone());
            result = writeln!(out, "segment {}", info.segment.display());
        }
        if result.is_ok() {
            result = writeln!(out, "{}", describe(info));
        }
        if records && result.is_ok() {
            result = write_records(&mut out, info);
        }
    })
    .with_context(|| format!("dumping {}", dir.display()))?;
    result?;
    out.flush()?;
    Ok(())
}

/// Most bytes a compressed batch may expand to here.
const MAX_DECOMPRESSED: usize = 256 << 20;

/// One line per record, `| offset: ... key: ... payload: ...` as Kafka's
/// dump-log prints them (keys and values as UTF-8, invalid bytes replaced),
/// or one line saying why the records cannot be shown.
fn write_records(out: &mut impl Write, info: &BatchInfo<'_>) -> std::io::Result<()> {
    let h = &info.header;
    let decoded =
        batch::records_section(info.bytes, MAX_DECOMPRESSED).and_then(|section| {
            Ok(batch::parse_records(&section, h.record_count)?
                .iter()
                .map(|r| {
                    let text = |b: Option<&[u8]>| {
                        b.map_or_else(|| "null".to_owned(), |b| String::from_utf8_lossy(b).into_owned())
                    };
                    let sequence = if h.base_sequence < 0 {
                        -1
                    } else {
                        h.base_sequence.wrapping_add(r.offset_delta as i32)
                    };
                    format!(
                "| offset: {} {}: {} keySize: {} valueSize: {} sequence: {sequence} key: {} payload: {}",
                h.base_offset + r.offset_delta,
                if h.log_append_time() { "LogAppendTime" } else { "CreateTime" },
                if h.log_append_time() { h.max_timestamp } else { h.base_timestamp + r.timestamp_delta },
                r.key.map_or(-1, |k| k.len() as i64),
                r.value.map_or(-1, |v| v.len() as i64),
                text(r.key),
                text(r.value),
            )
                })
                .collect::<Vec<_>>())
        });
    match decoded {
        Ok(lines) => {
            for line in lines {
                writeln!(out, "{line}")?;
            }
            Ok(())
        }
        Err(e) => writeln!(out, "| records not shown: {e}"),
    }
}

fn describe(info: &BatchInfo<'_>) -> String {
    let h = &info.header;
    let last_sequence = if h.base_sequence < 0 {
        -1
    } else {
        h.base_sequence.wrapping_add(h.last_offset_delta)
    };
    let time_type = if h.log_append_time() {
        "LogAppendTime"
    } else {
        "CreateTime"
    };
    format!(
        "baseOffset: {} lastOffset: {} count: {} baseSequence: {} lastSequence: {last_sequence} \
         producerId: {} producerEpoch: {} partitionLeaderEpoch: {} isTransactional: {} isControl: {} \
         position: {} baseTimestamp: {} {time_type}: {} size: {} magic: 2 compresscodec: {} crc: {}",
        h.base_offset,
        h.last_offset(),
        h.record_count,
        h.base_sequence,
        h.producer_id,
        h.producer_epoch,
        h.partition_leader_epoch,
        h.is_transactional(),
        h.is_control(),
        info.position,
        h.base_timestamp,
        h.max_timestamp,
        h.size(),
        h.compression(),
        h.crc
    )
}
