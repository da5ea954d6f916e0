//! Prometheus metrics of backups. Labels are bounded (outcome and reason), never object
//! names; the age of the newest good backup is reported for the stalest EtcdBackup, the
//! one an alert is about.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of a finished backup attempt.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `succeeded` or `failed`.
    pub outcome: &'static str,
    /// The status `Reason` of a failure (a fixed set), empty on success.
    pub reason: &'static str,
}

/// When each EtcdBackup's newest good backup was taken, by `namespace/name`.
#[derive(Debug, Default)]
struct NewestGood(Mutex<HashMap<String, Timestamp>>);

impl NewestGood {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Timestamp>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Seconds since the oldest of the newest good backups; `None` when none is known.
    fn stalest_age(&self, now: Timestamp) -> Option<f64> {
        let oldest = self.lock().values().min().copied()?;
        Some(now.duration_since(oldest).as_secs_f64().max(0.0))
    }
}

impl Collector for NewestGood {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(age) = self.stalest_age(Timestamp::now()) else {
            return Ok(());
        };
        let gauge = ConstGauge::new(age);
        let metric = encoder.encode_descriptor(
            "etcd_operator_backup_newest_age_seconds",
            "Age of the newest good backup of the EtcdBackup whose newest good backup is oldest",
            None,
            gauge.metric_type(),
        )?;
        gauge.encode(metric)
    }
}

/// The backup metrics, registered in one registry.
#[derive(Clone, Debug)]
pub struct BackupMetrics {
    /// Backup attempts, by outcome and reason.
    pub backups: Family<OutcomeLabels, Counter>,
    /// Time one backup attempt takes.
    pub duration_seconds: Histogram,
    /// Bytes of each good backup.
    pub size_bytes: Histogram,
    newest_good: Arc<NewestGood>,
}

impl Default for BackupMetrics {
    fn default() -> Self {
        BackupMetrics {
            backups: Family::default(),
            duration_seconds: Histogram::new(exponential_buckets(0.05, 2.0, 14)),
            size_bytes: Histogram::new(exponential_buckets(64.0 * 1024.0, 4.0, 10)),
            newest_good: Arc::default(),
        }
    }
}

impl BackupMetrics {
    /// Registers every metric under the `etcd_operator` prefix.
    pub fn register(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(self.newest_good.clone()));
        let r = registry.sub_registry_with_prefix("etcd_operator");
        r.register(
            "backups",
            "Backup attempts by outcome and failure reason",
            self.backups.clone(),
        );
        r.register(
            "backup_duration_seconds",
            "Duration of one backup attempt (snapshot, upload, verification)",
            self.duration_seconds.clone(),
        );
        r.register(
            "backup_size_bytes",
            "Size of each good backup",
            self.size_bytes.clone(),
        );
    }

    /// Records a good backup of `key` taken at `time`.
    pub fn succeeded(&self, key: &str, seconds: f64, size: u64, time: Timestamp) {
        self.backups
            .get_or_create(&OutcomeLabels {
                outcome: "succeeded",
                reason: "",
            })
            .inc();
        self.duration_seconds.observe(seconds);
        self.size_bytes.observe(size as f64);
        self.newest_good.lock().insert(key.to_string(), time);
    }

    /// Records a failed attempt.
    pub fn failed(&self, reason: &'static str, seconds: f64) {
        self.backups
            .get_or_create(&OutcomeLabels {
                outcome: "failed",
                reason,
            })
            .inc();
        self.duration_seconds.observe(seconds);
    }

    /// Records the newest good backup known from status (after an operator restart).
    pub fn known_good(&self, key: &str, time: Timestamp) {
        let mut newest = self.newest_good.lock();
        let entry = newest.entry(key.to_string()).or_insert(time);
        *entry = (*entry).max(time);
    }

    /// Forgets an EtcdBackup that was deleted.
    pub fn forget(&self, key: &str) {
        self.newest_good.lock().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_age_reported_is_the_stalest_newest_backups() {
        let metrics = BackupMetrics::default();
        let now: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        assert_eq!(metrics.newest_good.stalest_age(now), None);
        metrics.succeeded("ns/a", 1.0, 100, "2026-01-01T00:59:00Z".parse().unwrap());
        metrics.known_good("ns/b", "2026-01-01T00:50:00Z".parse().unwrap());
        assert_eq!(metrics.newest_good.stalest_age(now), Some(600.0));
        metrics.forget("ns/b");
        assert_eq!(metrics.newest_good.stalest_age(now), Some(60.0));
    }

    #[test]
    fn every_metric_is_exposed() {
        let metrics = BackupMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        metrics.succeeded("ns/a", 1.0, 100, Timestamp::now());
        metrics.failed("StoreUnreachable", 0.5);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for name in [
            "etcd_operator_backups_total{outcome=\"succeeded\",reason=\"\"} 1",
            "etcd_operator_backups_total{outcome=\"failed\",reason=\"StoreUnreachable\"} 1",
            "etcd_operator_backup_duration_seconds_count 2",
            "etcd_operator_backup_size_bytes_count 1",
            "etcd_operator_backup_newest_age_seconds ",
        ] {
            assert!(text.contains(name), "{name} missing from\n{text}");
        }
    }
}
