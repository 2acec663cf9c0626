//! Translating consumer groups' committed source offsets to target offsets
//! with a mirror's offset map ([`crate::offset_map`]), and committing them
//! on the target: what `strait mirror translate-offsets` does, so that a
//! group moved to the other datacenter reads on from exactly the next
//! record it had not read.
//!
//! The map is read whole from the target's map topic and brought up to
//! the mirror's committed positions (read from the source, where the mirror
//! commits them). A group's committed offsets are read from the source,
//! its members on the target are checked before anything is committed
//! there.

use strait_upstream::Cluster;

use crate::batch::FetchedBatches;
use crate::error::{self, MirrorError};
use crate::offset_map::{Map, Translation};
use crate::positions;
use crate::resume;

/// A mirror's offset map with what is needed to use it.
#[derive(Debug)]
pub struct Translator {
    source: Cluster,
    target: Cluster,
    map_topic: String,
    map: Map,
}

/// One partition of a group, translated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Source topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The group's committed offset on the source.
    pub source_offset: i64,
    /// What it translates to.
    pub translation: Translation,
}

impl Translator {
    /// Reads the offset map in `map_topic` on `target` and brings it up to
    /// the positions the mirror (consumer group `mirror_group`) committed
    /// on `source`.
    pub async fn load(
        source: Cluster,
        target: Cluster,
        mirror_group: &str,
        map_topic: &str,
    ) -> Result<Translator, MirrorError> {
        let map = read_map(&target, map_topic)
            .await?
            .ok_or_else(|| MirrorError::OffsetMap {
                topic: map_topic.to_owned(),
                detail: "no such topic: the mirror has not committed a position yet, or its \
                     offset_map_topic differs"
                    .to_owned(),
            })?;
        let mut translator = Translator {
            source,
            target,
            map_topic: map_topic.to_owned(),
            map,
        };
        let committed = positions::load_all(&translator.source, mirror_group)
            .await
            .map_err(error::source)?;
        for c in committed {
            let Some(target_offset) = positions::target_offset(c.metadata.as_deref()) else {
                continue;
            };
            let Some(map) = translator.map.partitions.get_mut(&(c.topic.clone(), c.partition)) else {
                continue;
            };
            if !map.extend_to((c.offset, target_offset)) {
                tracing::warn!(
                    topic = c.topic, partition = c.partition, committed = c.offset, target_offset, map_end = ?map.end(),
                    "the mirror's committed position is past its offset map by different amounts; \
                     translating up to the map's end"
                );
            }
        }
        Ok(translator)
    }

    /// The map as read (its partitions, entries and size).
    pub fn map(&self) -> &Map {
        &self.map
    }

    /// Translates committed source offset `offset` of `topic`-`partition`.
    pub fn translate(&self, topic: &str, partition: i32, offset: i64) -> Translation {
        self.map
            .partitions
            .get(&(topic.to_owned(), partition))
            .map_or(Translation::Unknown, |m| m.translate(offset))
    }

    /// The consumer groups on the source that `wanted` selects, by name.
    pub async fn groups(&self, wanted: impl Fn(&str) -> bool) -> Result<Vec<String>, MirrorError> {
        let metadata = self.source.metadata().await.map_err(error::source)?;
        let mut groups = Vec::new();
        for &node in metadata.brokers.keys() {
            let listed = strait_lag::kafka::list_groups(&self.source, node)
                .await
                .map_err(error::source)?;
            groups.extend(listed.into_iter().map(|(_, g)| g).filter(|g| wanted(g)));
        }
        groups.sort();
        groups.dedup();
        Ok(groups)
    }

    /// `group`'s committed source offsets of the topics `mirrored` selects,
    /// translated, in topic and partition order.
    pub async fn translate_group(
        &self,
        group: &str,
        mirrored: impl Fn(&str) -> bool,
    ) -> Result<Vec<Row>, MirrorError> {
        let mut offsets = positions::load_all(&self.source, group)
            .await
            .map_err(error::source)?;
        offsets.retain(|o| mirrored(&o.topic));
        offsets.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(offsets
            .into_iter()
            .map(|o| Row {
                translation: self.translate(&o.topic, o.partition, o.offset),
                topic: o.topic,
                partition: o.partition,
                source_offset: o.offset,
            })
            .collect())
    }

    /// Commits `rows` that translate (each to `rename` of its topic) for
    /// `group` on the target; refused while the group has members there.
    /// Returns how many offsets were committed.
    pub async fn apply(
        &self,
        group: &str,
        rows: &[Row],
        rename: impl Fn(&str) -> String,
    ) -> Result<usize, MirrorError> {
        check_inactive(&self.target, group).await?;
        let targets: Vec<(String, i32, i64, String)> = rows
            .iter()
            .filter_map(|r| {
                let offset = r.translation.target()?;
                Some((
                    rename(&r.topic),
                    r.partition,
                    offset,
                    format!(
                        "strait-translated:{}:{}:{}",
                        r.topic, r.partition, r.source_offset
                    ),
                ))
            })
            .collect();
        let offsets: Vec<(&str, i32, i64, String)> = targets
            .iter()
            .map(|(t, p, o, m)| (t.as_str(), *p, *o, m.clone()))
            .collect();
        positions::commit_offsets(&self.target, group, &offsets)
            .await
            .map_err(error::target)?;
        Ok(offsets.len())
    }

    /// The map topic's name.
    pub fn map_topic(&self) -> &str {
        &self.map_topic
    }
}

/// Refuses a group that has members on `target`.
pub async fn check_inactive(target: &Cluster, group: &str) -> Result<(), MirrorError> {
    let (node, _) = target.coordinator_of(group).await.map_err(error::target)?;
    let described = strait_lag::kafka::describe(target, node, &[group.to_owned()])
        .await
        .map_err(error::target)?;
    match described.into_iter().find(|(g, _)| g == group) {
        Some((_, (state, members))) if members > 0 => Err(MirrorError::GroupActive {
            group: group.to_owned(),
            state,
            members,
        }),
        _ => Ok(()),
    }
}

/// Reads every entry of the map topic, partition by partition, from the
/// log start to the end; `None` if the target has no such topic.
pub async fn read_map(target: &Cluster, topic: &str) -> Result<Option<Map>, MirrorError> {
    read_map_filtered(target, topic, |_| true).await
}

/// [`read_map`], of the entries whose key `keep` takes.
pub async fn read_map_filtered(
    target: &Cluster,
    topic: &str,
    keep: impl Fn(&[u8]) -> bool,
) -> Result<Option<Map>, MirrorError> {
    let bad = |detail: String| MirrorError::OffsetMap {
        topic: topic.to_owned(),
        detail,
    };
    let metadata = target.refresh().await.map_err(error::target)?;
    let Some(partitions) = metadata.partition_count(topic) else {
        return Ok(None);
    };
    let mut map = Map::default();
    for partition in 0..partitions as i32 {
        let start = resume::list_offset(target, topic, partition, -2)
            .await
            .map_err(error::target)?;
        let end = resume::list_offset(target, topic, partition, -1)
            .await
            .map_err(error::target)?;
        let mut offset = start;
        while offset < end {
            let read = resume::read(target, topic, partition, offset)
                .await
                .map_err(error::target)?;
            let before = offset;
            for batch in FetchedBatches::new(&read.records) {
                let batch = batch.map_err(|e| bad(format!("partition {partition} at {offset}: {e}")))?;
                let h = batch.header();
                if h.last_offset() < offset || h.is_control() {
                    offset = offset.max(h.last_offset() + 1);
                    continue;
                }
                each_record(batch.bytes(), |delta, key, value| {
                    let at = h.base_offset + delta;
                    if at < offset || !key.is_some_and(&keep) {
                        return Ok(());
                    }
                    map.apply(key, value).map_err(|e| format!("offset {at}: {e}"))
                })
                .map_err(|e| bad(format!("partition {partition}, batch at {}: {e}", h.base_offset)))?;
                offset = h.last_offset() + 1;
            }
            if offset == before {
                return Err(bad(format!(
                    "partition {partition}: nothing read at offset {offset} below its end {end}"
                )));
            }
        }
    }
    Ok(Some(map))
}

/// Calls `each` with every record's (offset delta, key, value) of one
/// batch, decompressed if need be.
fn each_record(
    batch: &[u8],
    mut each: impl FnMut(i64, Option<&[u8]>, Option<&[u8]>) -> Result<(), String>,
) -> Result<(), String> {
    let h = strait_batch::BatchHeader::parse(batch).map_err(|e| e.to_string())?;
    let section = strait_batch::records_section(batch, MAX_MAP_BATCH).map_err(|e| e.to_string())?;
    for r in strait_batch::parse_records(&section, h.record_count).map_err(|e| e.to_string())? {
        each(r.offset_delta, r.key, r.value)?;
    }
    Ok(())
}

/// The most a map batch may hold decompressed.
const MAX_MAP_BATCH: usize = 64 << 20;
