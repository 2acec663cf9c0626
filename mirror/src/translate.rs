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

use strait_upstream::{Cluster, UpstreamError};

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

/// Which way offsets translate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// A group's offsets on the source to the target (failing over).
    Forward,
    /// A group's offsets on the target's mirrored topics back to the
    /// source (failing back).
    Back,
}

/// One partition of a group, translated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The topic the group's offset was read on (the source topic going
    /// forward, the mirrored topic going back).
    pub topic: String,
    /// Partition (the same on both sides).
    pub partition: i32,
    /// The group's committed offset there.
    pub offset: i64,
    /// The topic on the other side.
    pub to_topic: String,
    /// What the offset translates to there.
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

    /// The consumer groups that `wanted` selects, by name, on the side
    /// their offsets are read (the source going forward, the target going
    /// back).
    pub async fn groups(
        &self,
        direction: Direction,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<Vec<String>, MirrorError> {
        let (cluster, side): (&Cluster, fn(UpstreamError) -> MirrorError) = match direction {
            Direction::Forward => (&self.source, error::source),
            Direction::Back => (&self.target, error::target),
        };
        let metadata = cluster.metadata().await.map_err(side)?;
        let mut groups = Vec::new();
        for &node in metadata.brokers.keys() {
            let listed = strait_lag::kafka::list_groups(cluster, node)
                .await
                .map_err(side)?;
            groups.extend(listed.into_iter().map(|(_, g)| g).filter(|g| wanted(g)));
        }
        groups.sort();
        groups.dedup();
        Ok(groups)
    }

    /// Translates committed target offset `offset` of `topic`-`partition`
    /// (a source topic: the map's key) back to the source.
    pub fn translate_back(&self, topic: &str, partition: i32, offset: i64) -> Translation {
        self.map
            .partitions
            .get(&(topic.to_owned(), partition))
            .map_or(Translation::Unknown, |m| m.translate_back(offset))
    }

    /// `group`'s committed offsets, translated the way `direction` says:
    /// forward, its offsets on the source of the topics `mirrored` selects
    /// (renamed by `rename` on the target); back, its offsets on the
    /// target of the topics the map's source topics are renamed to. In
    /// topic and partition order.
    pub async fn translate_group(
        &self,
        group: &str,
        direction: Direction,
        mirrored: impl Fn(&str) -> bool,
        rename: impl Fn(&str) -> String,
    ) -> Result<Vec<Row>, MirrorError> {
        let mut rows = Vec::new();
        match direction {
            Direction::Forward => {
                let offsets = positions::load_all(&self.source, group)
                    .await
                    .map_err(error::source)?;
                for o in offsets.into_iter().filter(|o| mirrored(&o.topic)) {
                    rows.push(Row {
                        translation: self.translate(&o.topic, o.partition, o.offset),
                        to_topic: rename(&o.topic),
                        topic: o.topic,
                        partition: o.partition,
                        offset: o.offset,
                    });
                }
            }
            Direction::Back => {
                // Mirrored topic name to source topic name, from the map.
                let sources: std::collections::HashMap<String, String> = self
                    .map
                    .partitions
                    .keys()
                    .map(|(topic, _)| (rename(topic), topic.clone()))
                    .collect();
                let offsets = positions::load_all(&self.target, group)
                    .await
                    .map_err(error::target)?;
                for o in offsets {
                    let Some(source_topic) = sources.get(&o.topic) else {
                        continue;
                    };
                    rows.push(Row {
                        translation: self.translate_back(source_topic, o.partition, o.offset),
                        to_topic: source_topic.clone(),
                        topic: o.topic,
                        partition: o.partition,
                        offset: o.offset,
                    });
                }
            }
        }
        rows.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(rows)
    }

    /// Commits `rows` that translate for `group` on the other side (the
    /// target going forward, the source going back); refused while the
    /// group has members there. Returns how many offsets were committed.
    pub async fn apply(&self, group: &str, rows: &[Row], direction: Direction) -> Result<usize, MirrorError> {
        let (cluster, side): (&Cluster, fn(UpstreamError) -> MirrorError) = match direction {
            Direction::Forward => (&self.target, error::target),
            Direction::Back => (&self.source, error::source),
        };
        check_inactive(cluster, group).await.map_err(|e| match e {
            MirrorError::Target { error } if direction == Direction::Back => error::source(error),
            e => e,
        })?;
        let offsets: Vec<(&str, i32, i64, String)> = rows
            .iter()
            .filter_map(|r| {
                Some((
                    r.to_topic.as_str(),
                    r.partition,
                    r.translation.target()?,
                    format!("strait-translated:{}:{}:{}", r.topic, r.partition, r.offset),
                ))
            })
            .collect();
        positions::commit_offsets(cluster, group, &offsets)
            .await
            .map_err(side)?;
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
