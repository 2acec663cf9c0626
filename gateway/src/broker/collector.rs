//! The local broker's metrics read when scraped: its topics, the data
//! directory's file system and the consumer groups' rebalances (their
//! members and lag are the lag watcher's, cluster `local`).

use std::sync::{Arc, Weak};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, IntCounterVec, Opts};

use super::Broker;

/// Reads the local topics, the data directory's file system and the
/// consumer groups when scraped. Holds the broker weakly: a scrape never
/// keeps a stopping Strait from closing its partitions.
#[derive(Debug)]
pub struct BrokerCollector {
    broker: Weak<Broker>,
    topic_labels: bool,
    descs: Vec<Desc>,
}

struct BrokerFamilies {
    size: GaugeVec,
    segments: GaugeVec,
    partitions: GaugeVec,
    disk_free: GaugeVec,
    disk_size: GaugeVec,
    rebalances: IntCounterVec,
}

impl BrokerFamilies {
    fn new(topic_labels: bool) -> BrokerFamilies {
        let topic: &[&str] = if topic_labels { &["topic"] } else { &[] };
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            GaugeVec::new(Opts::new(name, help), labels).expect("valid metric")
        };
        BrokerFamilies {
            size: gauge(
                "strait_spool_size_bytes",
                "Bytes of the local topic's segments on disk.",
                topic,
            ),
            segments: gauge(
                "strait_spool_segments",
                "Segment files of the local topic.",
                topic,
            ),
            partitions: gauge("strait_spool_partitions", "Partitions of the local topic.", topic),
            disk_free: gauge(
                "strait_spool_disk_free_bytes",
                "Bytes free for unprivileged users on the file system of data_dir.",
                &[],
            ),
            disk_size: gauge(
                "strait_spool_disk_size_bytes",
                "Size of the file system of data_dir.",
                &[],
            ),
            rebalances: IntCounterVec::new(
                Opts::new(
                    "strait_group_rebalances_total",
                    "Rebalances completed (generations begun) by Strait's group coordinator.",
                ),
                &[],
            )
            .expect("valid metric"),
        }
    }

    fn collectors(&self) -> [&dyn Collector; 6] {
        [
            &self.size,
            &self.segments,
            &self.partitions,
            &self.disk_free,
            &self.disk_size,
            &self.rebalances,
        ]
    }
}

impl BrokerCollector {
    /// A collector over `broker`'s topics and groups; with `topic_labels`
    /// false the per-topic series are summed into one.
    pub fn new(broker: &Arc<Broker>, topic_labels: bool) -> BrokerCollector {
        let descs = BrokerFamilies::new(topic_labels)
            .collectors()
            .iter()
            .flat_map(|c| c.desc().into_iter().cloned())
            .collect();
        BrokerCollector {
            broker: Arc::downgrade(broker),
            topic_labels,
            descs,
        }
    }
}

impl Collector for BrokerCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let Some(broker) = self.broker.upgrade() else {
            return Vec::new();
        };
        let f = BrokerFamilies::new(self.topic_labels);
        for topic in broker.topics().all() {
            let labels: Vec<&str> = if self.topic_labels {
                vec![topic.name.as_str()]
            } else {
                Vec::new()
            };
            let (mut bytes, mut segments) = (0u64, 0usize);
            for p in &topic.partitions {
                bytes += p.log.size_bytes();
                segments += p.log.segment_count();
            }
            f.size.with_label_values(&labels).add(bytes as f64);
            f.segments.with_label_values(&labels).add(segments as f64);
            f.partitions
                .with_label_values(&labels)
                .add(topic.partitions.len() as f64);
        }
        if let Ok(fs) = rustix::fs::statvfs(broker.topics().dir()) {
            let block = fs.f_frsize.max(1) as f64;
            f.disk_free
                .with_label_values::<&str>(&[])
                .set(fs.f_bavail as f64 * block);
            f.disk_size
                .with_label_values::<&str>(&[])
                .set(fs.f_blocks as f64 * block);
        }
        let groups = broker.groups().stats();
        f.rebalances
            .with_label_values::<&str>(&[])
            .inc_by(groups.rebalances);
        drop(broker);
        f.collectors().iter().flat_map(|c| c.collect()).collect()
    }
}
