//! How many objects each of the operator's caches keeps: after the ownership filter
//! ([`super::ownership`]) only the operator's own, so this follows the clusters it runs,
//! not what others label.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The kind a cache holds.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// `Pod`, `Service`, `PodDisruptionBudget`, `PersistentVolumeClaim` or `EndpointSlice`.
    pub kind: String,
}

/// `etcd_operator_cached_objects{kind}`.
#[derive(Debug, Clone, Default)]
pub struct CacheMetrics {
    objects: Family<KindLabel, Gauge>,
}

impl CacheMetrics {
    /// Adds the gauge to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "etcd_operator_cached_objects",
            "Objects the operator keeps in its caches, by kind (only its own)",
            self.objects.clone(),
        );
    }

    /// The gauge of caches of `kind`.
    pub fn of(&self, kind: &str) -> Gauge {
        self.objects
            .get_or_create(&KindLabel {
                kind: kind.to_string(),
            })
            .clone()
    }
}
