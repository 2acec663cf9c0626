//! The registry of local topics: which exist, their partitions (open spool
//! logs), ids and configs, persisted under `<data_dir>/topics/`.
//!
//! On disk, topic `orders` with two partitions is `topics/orders.topic` (a
//! small text file: id, partition count, topic configs) plus the partition
//! directories `topics/orders-0/` and `topics/orders-1/`. The metadata file
//! is written last on create (atomically, by rename) and removed first on
//! delete, so it is the commit point: partition directories without one are
//! leftovers of an interrupted create or delete, removed when the registry
//! opens. A create that fails removes the directories it made.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use strait_config::{Durability as ConfigDurability, SpoolConfig, TopicSpoolConfig};
use strait_spool::{Durability, IoPool, LogConfig, Partition};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::error::TopicError;

/// One partition of a local topic.
#[derive(Debug)]
pub struct PartitionHandle {
    /// The log.
    pub log: Partition,
    /// Woken after every append, for fetches waiting on new data.
    pub appended: Notify,
}

/// A local topic.
#[derive(Debug)]
pub struct Topic {
    /// Its name.
    pub name: String,
    /// Its id (Metadata v10+, DeleteTopics v6).
    pub id: Uuid,
    /// Its partitions, by index.
    pub partitions: Vec<Arc<PartitionHandle>>,
    /// Kafka topic configs set at creation (`retention.ms`, ...).
    pub configs: BTreeMap<String, String>,
    /// The resolved storage settings.
    pub settings: TopicSpoolConfig,
}

impl Topic {
    /// Partition `index`, if it exists.
    pub fn partition(&self, index: i32) -> Option<&Arc<PartitionHandle>> {
        usize::try_from(index).ok().and_then(|i| self.partitions.get(i))
    }
}

/// Kafka topic configs Strait applies, and how.
pub const TOPIC_CONFIGS: &[&str] = &[
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "segment.bytes",
    "segment.ms",
    "max.message.bytes",
];

/// All local topics.
#[derive(Debug)]
pub struct Topics {
    root: PathBuf,
    spool: SpoolConfig,
    pool: Arc<IoPool>,
    topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    /// Serialises creates, deletes and partition additions.
    changes: tokio::sync::Mutex<()>,
}

impl Topics {
    /// The directory of the topics, `<data_dir>/topics`.
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// Opens every topic under `<data_dir>/topics`, running crash recovery
    /// on each partition. Blocking: call before serving, or off the runtime.
    pub fn open(data_dir: &Path, spool: SpoolConfig, pool: Arc<IoPool>) -> Result<Topics, TopicError> {
        let root = data_dir.join("topics");
        fs::create_dir_all(&root).map_err(|source| TopicError::Io {
            path: root.clone(),
            error: source,
        })?;
        let mut metas = Vec::new();
        let entries = fs::read_dir(&root).map_err(|source| TopicError::Io {
            path: root.clone(),
            error: source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| TopicError::Io {
                path: root.clone(),
                error: source,
            })?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".deleted") {
                // An interrupted delete: finish it.
                let _ = fs::remove_dir_all(&path);
                continue;
            }
            let Some(topic) = name.strip_suffix(".topic") else {
                continue;
            };
            let meta = read_meta(&path)?;
            let settings = resolve(&spool, topic, &meta.configs)?;
            metas.push((topic.to_owned(), meta, settings));
        }
        // Opening a partition is mostly waiting for the disk (recovery reads,
        // file creation): open them all on several threads at once.
        let jobs: Vec<(PathBuf, LogConfig)> = metas
            .iter()
            .flat_map(|(topic, meta, settings)| {
                (0..meta.partitions).map(|p| (partition_dir(&root, topic, p as i32), log_config(settings)))
            })
            .collect();
        let mut opened = in_parallel(jobs, |(dir, config)| Partition::open(&dir, config)).into_iter();
        let mut topics = BTreeMap::new();
        for (topic, meta, settings) in metas {
            let mut partitions = Vec::with_capacity(meta.partitions);
            for _ in 0..meta.partitions {
                let log = opened.next().expect("one result per partition")?;
                pool.register(&log);
                partitions.push(Arc::new(PartitionHandle {
                    log,
                    appended: Notify::new(),
                }));
            }
            topics.insert(
                topic.clone(),
                Arc::new(Topic {
                    name: topic,
                    id: meta.id,
                    partitions,
                    configs: meta.configs,
                    settings,
                }),
            );
        }
        let committed = topics
            .iter()
            .map(|(name, t): (&String, &Arc<Topic>)| (name.clone(), t.partitions.len()))
            .collect();
        remove_strays(&root, &committed)?;
        Ok(Topics {
            root,
            spool,
            pool,
            topics: RwLock::new(topics),
            changes: tokio::sync::Mutex::new(()),
        })
    }

    /// The topic named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Topic>> {
        self.read().get(name).cloned()
    }

    /// The topic with id `id`.
    pub fn by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        self.read().values().find(|t| t.id == id).cloned()
    }

    /// Every topic, by name.
    pub fn all(&self) -> Vec<Arc<Topic>> {
        self.read().values().cloned().collect()
    }

    /// The I/O pool partitions append and read through.
    pub fn pool(&self) -> &Arc<IoPool> {
        &self.pool
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<Topic>>> {
        self.topics.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<Topic>>> {
        self.topics.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Checks a create without doing it (CreateTopics `validate_only`).
    pub fn validate_create(
        &self,
        name: &str,
        partitions: i32,
        replication: i16,
        configs: &BTreeMap<String, String>,
    ) -> Result<(), TopicError> {
        check_name(name)?;
        if self.get(name).is_some() {
            return Err(TopicError::Exists(name.to_owned()));
        }
        if !(1..=10_000).contains(&partitions) {
            return Err(TopicError::InvalidPartitions(format!(
                "{partitions} partitions requested; between 1 and 10000 are possible"
            )));
        }
        if replication != 1 {
            return Err(TopicError::InvalidReplication(replication));
        }
        resolve(&self.spool, name, configs)?;
        Ok(())
    }

    /// Creates a topic. `partitions` and `replication` must already be
    /// resolved (no -1).
    pub async fn create(
        &self,
        name: &str,
        partitions: i32,
        replication: i16,
        configs: BTreeMap<String, String>,
    ) -> Result<Arc<Topic>, TopicError> {
        let _guard = self.changes.lock().await;
        self.validate_create(name, partitions, replication, &configs)?;
        let settings = resolve(&self.spool, name, &configs)?;
        let meta = Meta {
            id: Uuid::new_v4(),
            partitions: partitions as usize,
            configs,
        };
        let root = self.root.clone();
        let topic_name = name.to_owned();
        let topic = tokio::task::spawn_blocking(move || -> Result<Topic, TopicError> {
            let handles = open_new_partitions(&root, &topic_name, 0..meta.partitions as i32, &settings)
                .and_then(|handles| match write_meta(&root, &topic_name, &meta) {
                    Ok(()) => Ok(handles),
                    Err(e) => {
                        drop(handles);
                        remove_partition_dirs(&root, &topic_name, 0..meta.partitions as i32);
                        Err(e)
                    }
                })?;
            Ok(Topic {
                name: topic_name,
                id: meta.id,
                partitions: handles,
                configs: meta.configs,
                settings,
            })
        })
        .await
        .expect("topic creation does not panic")?;
        for p in &topic.partitions {
            self.pool.register(&p.log);
        }
        let topic = Arc::new(topic);
        self.write().insert(name.to_owned(), Arc::clone(&topic));
        tracing::info!(topic = name, partitions, "created topic");
        Ok(topic)
    }

    /// Deletes a topic and its data.
    pub async fn delete(&self, name: &str) -> Result<(), TopicError> {
        let _guard = self.changes.lock().await;
        let topic = self
            .write()
            .remove(name)
            .ok_or_else(|| TopicError::Unknown(name.to_owned()))?;
        for p in &topic.partitions {
            self.pool.unregister(&p.log);
            // Wake fetches so they notice the topic is gone.
            p.appended.notify_waiters();
        }
        let root = self.root.clone();
        let owned = name.to_owned();
        tokio::task::spawn_blocking(move || -> Result<(), TopicError> {
            let meta = root.join(format!("{owned}.topic"));
            fs::remove_file(&meta).map_err(|source| TopicError::Io {
                path: meta,
                error: source,
            })?;
            sync_dir(&root)?;
            for (i, p) in topic.partitions.iter().enumerate() {
                let _ = p.log.close();
                let dir = partition_dir(&root, &owned, i as i32);
                let doomed = root.join(format!("{owned}-{i}.{}.deleted", Uuid::new_v4().simple()));
                if fs::rename(&dir, &doomed).is_ok() {
                    let _ = fs::remove_dir_all(&doomed);
                }
            }
            Ok(())
        })
        .await
        .expect("topic deletion does not panic")?;
        tracing::info!(topic = %name, "deleted topic");
        Ok(())
    }

    /// Grows a topic to `count` partitions.
    pub async fn add_partitions(
        &self,
        name: &str,
        count: i32,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        let _guard = self.changes.lock().await;
        let topic = self
            .get(name)
            .ok_or_else(|| TopicError::Unknown(name.to_owned()))?;
        let current = topic.partitions.len() as i32;
        if count <= current {
            return Err(TopicError::InvalidPartitions(format!(
                "topic {name} has {current} partitions; the new count {count} must be larger"
            )));
        }
        if count > 10_000 {
            return Err(TopicError::InvalidPartitions(format!(
                "{count} partitions exceed 10000"
            )));
        }
        if validate_only {
            return Ok(());
        }
        let root = self.root.clone();
        let settings = topic.settings;
        let name_owned = name.to_owned();
        let meta = Meta {
            id: topic.id,
            partitions: count as usize,
            configs: topic.configs.clone(),
        };
        let added = tokio::task::spawn_blocking(move || -> Result<Vec<Arc<PartitionHandle>>, TopicError> {
            let added = open_new_partitions(&root, &name_owned, current..count, &settings)?;
            if let Err(e) = write_meta(&root, &name_owned, &meta) {
                drop(added);
                remove_partition_dirs(&root, &name_owned, current..count);
                return Err(e);
            }
            Ok(added)
        })
        .await
        .expect("adding partitions does not panic")?;
        for p in &added {
            self.pool.register(&p.log);
        }
        let mut partitions = topic.partitions.clone();
        partitions.extend(added);
        let grown = Topic {
            name: topic.name.clone(),
            id: topic.id,
            partitions,
            configs: topic.configs.clone(),
            settings: topic.settings,
        };
        self.write().insert(name.to_owned(), Arc::new(grown));
        Ok(())
    }
}

/// Threads that open (or close) partitions at once (the work is mostly
/// waiting for the disk, so more threads than cores pay off).
const OPEN_THREADS: usize = 16;

/// `f` applied to every item on up to [`OPEN_THREADS`] threads; the results
/// in the order of the items.
pub(crate) fn in_parallel<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let threads = OPEN_THREADS.min(items.len());
    if threads <= 1 {
        return items.into_iter().map(f).collect();
    }
    let count = items.len();
    let queue = std::sync::Mutex::new(items.into_iter().enumerate());
    let results = std::sync::Mutex::new((0..count).map(|_| None).collect::<Vec<Option<R>>>());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                let Some((i, item)) = next else { break };
                let result = f(item);
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(result);
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .map(|r| r.expect("every item has a result"))
        .collect()
}

/// Creates the partitions `range` of a topic not yet committed (its metadata
/// file does not name them). If one fails (no space, no file descriptors),
/// the ones made so far are closed and every directory of the range is
/// removed again, so that a failed create leaves nothing behind.
fn open_new_partitions(
    root: &Path,
    topic: &str,
    range: std::ops::Range<i32>,
    settings: &TopicSpoolConfig,
) -> Result<Vec<Arc<PartitionHandle>>, TopicError> {
    let opened = in_parallel(range.clone().collect(), |p| {
        let dir = partition_dir(root, topic, p);
        // Leftovers of an interrupted create are not this topic's.
        match fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(TopicError::Io { path: dir, error: e }),
            _ => Partition::open(&dir, log_config(settings)).map_err(TopicError::from),
        }
    });
    let mut handles = Vec::with_capacity(range.len());
    let mut failed = None;
    let mut failures = 0;
    for (p, opened) in range.clone().zip(opened) {
        match opened {
            Ok(log) => handles.push(Arc::new(PartitionHandle {
                log,
                appended: Notify::new(),
            })),
            Err(e) => {
                failures += 1;
                failed.get_or_insert((p, e));
            }
        }
    }
    if let Some((p, e)) = failed {
        tracing::warn!(topic, partition = p, failures, error = %e,
            "creating partitions failed; removing the partitions made");
        drop(handles);
        remove_partition_dirs(root, topic, range);
        return Err(e);
    }
    Ok(handles)
}

/// Removes the directories of partitions `range` of `topic` that exist
/// (best effort: what stays is removed at the next start).
fn remove_partition_dirs(root: &Path, topic: &str, range: std::ops::Range<i32>) {
    for p in range {
        let dir = partition_dir(root, topic, p);
        match fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "removing a partition directory failed")
            }
        }
    }
}

/// Removes what interrupted creates, deletes and partition additions left
/// in `root`: partition directories that no topic's metadata file names
/// (the metadata file is the commit point), and unfinished metadata files.
/// `topics` maps each committed topic to its partition count. Anything
/// else unexpected is logged and left alone.
fn remove_strays(root: &Path, topics: &BTreeMap<String, usize>) -> Result<(), TopicError> {
    let io = |error| TopicError::Io {
        path: root.to_path_buf(),
        error,
    };
    let mut removed: BTreeMap<String, usize> = BTreeMap::new();
    for entry in fs::read_dir(root).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name.ends_with(".topic") || name.ends_with(".deleted") {
            continue;
        }
        if name.ends_with(".topic.tmp") {
            let _ = fs::remove_file(&path);
            continue;
        }
        let partition_of = name
            .rsplit_once('-')
            .filter(|(topic, index)| {
                check_name(topic).is_ok() && !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit())
            })
            .and_then(|(topic, index)| Some((topic.to_owned(), index.parse::<usize>().ok()?)));
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        match partition_of {
            Some((topic, index)) if is_dir => {
                if topics.get(&topic).is_some_and(|&count| index < count) {
                    continue;
                }
                match fs::remove_dir_all(&path) {
                    Ok(()) => *removed.entry(topic).or_default() += 1,
                    Err(e) => {
                        tracing::warn!(dir = %path.display(), error = %e, "removing a stray partition directory failed")
                    }
                }
            }
            _ => {
                tracing::warn!(path = %path.display(), "unexpected entry among the local topics; left alone")
            }
        }
    }
    for (topic, count) in &removed {
        let state = if topics.contains_key(topic) {
            "beyond its partition count"
        } else {
            "of a topic that does not exist"
        };
        tracing::warn!(topic = %topic, directories = count,
            "removed partition directories {state} (left by an interrupted or failed create or delete)");
    }
    Ok(())
}

/// Kafka's rules for topic names.
pub fn check_name(name: &str) -> Result<(), TopicError> {
    let bad = |why| {
        Err(TopicError::InvalidName {
            name: name.to_owned(),
            why,
        })
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name == "." || name == ".." {
        return bad("`.` and `..` are not allowed");
    }
    if name.len() > 249 {
        return bad("longer than 249 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return bad("only ASCII letters, digits, `.`, `_` and `-` are allowed");
    }
    Ok(())
}

fn partition_dir(root: &Path, topic: &str, partition: i32) -> PathBuf {
    root.join(format!("{topic}-{partition}"))
}

/// The spool settings of a partition of a topic with these settings.
pub fn log_config(t: &TopicSpoolConfig) -> LogConfig {
    LogConfig {
        segment_bytes: t.segment_bytes,
        segment_age: t.segment_age,
        index_interval_bytes: t.index_interval_bytes,
        index_bytes: t.index_bytes,
        max_batch_bytes: t.max_batch_bytes,
        retention_bytes: t.retention_bytes,
        retention_age: t.retention_age,
        durability: match t.durability {
            ConfigDurability::EveryBatch => Durability::EveryBatch,
            ConfigDurability::Interval => Durability::Interval {
                every: t.flush_interval,
                bytes: t.flush_bytes,
            },
            ConfigDurability::Os => Durability::Os,
        },
    }
}

/// The YAML settings of `topic`, with the Kafka topic configs it was
/// created with applied on top.
fn resolve(
    spool: &SpoolConfig,
    topic: &str,
    configs: &BTreeMap<String, String>,
) -> Result<TopicSpoolConfig, TopicError> {
    let mut t = spool.for_topic(topic);
    for (key, value) in configs {
        let invalid = |why: String| TopicError::InvalidConfig {
            key: key.clone(),
            why,
        };
        let number = || -> Result<i64, TopicError> {
            value
                .parse::<i64>()
                .map_err(|_| invalid(format!("`{value}` is not a number")))
        };
        match key.as_str() {
            "cleanup.policy" => {
                if value != "delete" {
                    return Err(invalid(format!(
                        "`{value}` is not supported: local topics only delete old segments"
                    )));
                }
            }
            "retention.ms" => {
                let v = number()?;
                t.retention_age = (v >= 0).then(|| std::time::Duration::from_millis(v as u64));
            }
            "retention.bytes" => {
                let v = number()?;
                t.retention_bytes = (v >= 0).then_some(v as u64);
            }
            "segment.bytes" => {
                let v = number()?;
                if !(64 << 10..=2 << 30).contains(&v) {
                    return Err(invalid(format!("{v} is outside 64KiB..2GiB")));
                }
                t.segment_bytes = v as u64;
                t.max_batch_bytes = t.max_batch_bytes.min(t.segment_bytes);
            }
            "segment.ms" => {
                let v = number()?;
                if v <= 0 {
                    return Err(invalid(format!("{v} must be positive")));
                }
                t.segment_age = std::time::Duration::from_millis(v as u64);
            }
            "max.message.bytes" => {
                let v = number()?;
                if v <= 0 || v as u64 > t.segment_bytes {
                    return Err(invalid(format!(
                        "{v} must be between 1 and segment.bytes {}",
                        t.segment_bytes
                    )));
                }
                t.max_batch_bytes = v as u64;
            }
            _ => {
                return Err(invalid(format!(
                    "not a topic config Strait applies (it applies {})",
                    TOPIC_CONFIGS.join(", ")
                )))
            }
        }
    }
    Ok(t)
}

/// The persisted part of a topic.
struct Meta {
    id: Uuid,
    partitions: usize,
    configs: BTreeMap<String, String>,
}

fn read_meta(path: &Path) -> Result<Meta, TopicError> {
    let corrupt = |why: &str| TopicError::Io {
        path: path.to_path_buf(),
        error: std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_owned()),
    };
    let text = fs::read_to_string(path).map_err(|source| TopicError::Io {
        path: path.to_path_buf(),
        error: source,
    })?;
    let (mut id, mut partitions, mut configs) = (None, None, BTreeMap::new());
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| corrupt("a line without `=`"))?;
        match key {
            "id" => id = Some(Uuid::parse_str(value).map_err(|_| corrupt("bad id"))?),
            "partitions" => partitions = Some(value.parse().map_err(|_| corrupt("bad partition count"))?),
            _ => {
                if let Some(config) = key.strip_prefix("config.") {
                    configs.insert(config.to_owned(), value.to_owned());
                }
            }
        }
    }
    Ok(Meta {
        id: id.ok_or_else(|| corrupt("no id"))?,
        partitions: partitions.ok_or_else(|| corrupt("no partition count"))?,
        configs,
    })
}

/// Writes `<root>/<topic>.topic` atomically and durably.
fn write_meta(root: &Path, topic: &str, meta: &Meta) -> Result<(), TopicError> {
    let path = root.join(format!("{topic}.topic"));
    let tmp = root.join(format!("{topic}.topic.tmp"));
    let mut text = format!(
        "# Strait topic metadata; partitions live in {topic}-N/\nid={}\npartitions={}\n",
        meta.id, meta.partitions
    );
    for (key, value) in &meta.configs {
        text.push_str(&format!("config.{key}={value}\n"));
    }
    let write = || -> std::io::Result<()> {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        fs::rename(&tmp, &path)
    };
    write().map_err(|source| TopicError::Io {
        path: path.clone(),
        error: source,
    })?;
    sync_dir(root)
}

fn sync_dir(dir: &Path) -> Result<(), TopicError> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| TopicError::Io {
            path: dir.to_path_buf(),
            error: source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> Arc<IoPool> {
        Arc::new(IoPool::new(strait_spool::pool::PoolOptions::default()))
    }

    #[test]
    fn in_parallel_keeps_the_order_of_the_items() {
        let items: Vec<u64> = (0..500).collect();
        let squares = in_parallel(items.clone(), |i| {
            // Uneven work, so threads finish out of order.
            std::thread::sleep(std::time::Duration::from_micros(i % 7 * 50));
            i * i
        });
        assert_eq!(squares, items.iter().map(|i| i * i).collect::<Vec<_>>());
        assert_eq!(in_parallel(vec![3u8], |i| i + 1), vec![4]);
        assert!(in_parallel(Vec::<u8>::new(), |i| i).is_empty());
    }

    #[tokio::test]
    async fn topics_are_created_grown_persisted_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let spool = SpoolConfig::default();
        let topics = Topics::open(dir.path(), spool.clone(), pool()).unwrap();
        let configs = BTreeMap::from([("retention.ms".to_owned(), "60000".to_owned())]);
        let t = topics.create("orders", 3, 1, configs).await.unwrap();
        assert_eq!(t.partitions.len(), 3);
        assert_eq!(t.settings.retention_age, Some(std::time::Duration::from_secs(60)));
        assert!(matches!(
            topics.create("orders", 1, 1, BTreeMap::new()).await,
            Err(TopicError::Exists(_))
        ));
        topics.add_partitions("orders", 5, false).await.unwrap();
        assert_eq!(topics.get("orders").unwrap().partitions.len(), 5);
        let id = t.id;
        drop(topics);

        let topics = Topics::open(dir.path(), spool.clone(), pool()).unwrap();
        let t = topics.get("orders").unwrap();
        assert_eq!((t.id, t.partitions.len()), (id, 5));
        assert_eq!(t.configs.get("retention.ms").map(String::as_str), Some("60000"));
        assert_eq!(topics.by_id(id).unwrap().name, "orders");
        topics.delete("orders").await.unwrap();
        assert!(topics.get("orders").is_none());
        drop(topics);
        let topics = Topics::open(dir.path(), spool, pool()).unwrap();
        assert!(topics.all().is_empty());
        let leftovers: Vec<_> = fs::read_dir(dir.path().join("topics")).unwrap().collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[tokio::test]
    async fn partitions_no_metadata_names_are_removed_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let spool = SpoolConfig::default();
        let topics = Topics::open(dir.path(), spool.clone(), pool()).unwrap();
        topics.create("orders", 2, 1, BTreeMap::new()).await.unwrap();
        topics.create("a-1", 1, 1, BTreeMap::new()).await.unwrap();
        drop(topics);
        let root = dir.path().join("topics");
        // What interrupted creates and partition additions leave behind.
        for stray in ["ghost-0", "ghost-1", "orders-2", "a-1-1"] {
            Partition::open(&root.join(stray), LogConfig::default()).unwrap();
        }
        fs::write(root.join("ghost.topic.tmp"), "id=").unwrap();
        fs::write(root.join("notes.txt"), "mine").unwrap();

        let topics = Topics::open(dir.path(), spool, pool()).unwrap();
        assert_eq!(topics.get("orders").unwrap().partitions.len(), 2);
        assert_eq!(topics.get("a-1").unwrap().partitions.len(), 1);
        assert!(topics.get("ghost").is_none());
        let mut left: Vec<String> = fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "a-1-0",
                "a-1.topic",
                "notes.txt",
                "orders-0",
                "orders-1",
                "orders.topic"
            ]
        );
    }

    #[tokio::test]
    async fn bad_creates_say_why() {
        let dir = tempfile::tempdir().unwrap();
        let topics = Topics::open(dir.path(), SpoolConfig::default(), pool()).unwrap();
        let none = BTreeMap::new();
        let check = |r: Result<(), TopicError>, words: &str| {
            let e = r.unwrap_err();
            assert!(e.to_string().contains(words), "{e}");
        };
        check(topics.validate_create("a/b", 1, 1, &none), "only ASCII");
        check(topics.validate_create("..", 1, 1, &none), "not allowed");
        check(topics.validate_create("t", 0, 1, &none), "between 1 and 10000");
        check(topics.validate_create("t", 1, 3, &none), "one-node cluster");
        let compact = BTreeMap::from([("cleanup.policy".to_owned(), "compact".to_owned())]);
        check(topics.validate_create("t", 1, 1, &compact), "not supported");
        let unknown = BTreeMap::from([("flush.ms".to_owned(), "1".to_owned())]);
        check(topics.validate_create("t", 1, 1, &unknown), "not a topic config");
    }
}
