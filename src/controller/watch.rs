//! Maps the kube watcher's events on EtcdClusters to the Supervisor's `WatchEvent`s.

use kube::ResourceExt;
use kube::runtime::watcher;

use etcd_operator_actors::roster::WatchEvent;
use etcd_operator_actors::supervisor::ClusterEvent;
use etcd_operator_core::lifecycle::DesiredCluster;
use etcd_operator_core::topology::Topology;

use crate::api::images::ImagePolicy;
use crate::api::{EtcdCluster, desired_cluster};

fn topology(cluster: &EtcdCluster) -> Topology {
    Topology::new(
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
    )
}

/// The desired cluster of `cluster`, its image checked against `images`.
fn desired(cluster: &EtcdCluster, images: &ImagePolicy) -> DesiredCluster {
    DesiredCluster {
        image_problem: images.problem(cluster.spec.repository_or_default()),
        ..desired_cluster(cluster)
    }
}

/// The Supervisor's event for one watcher event, images checked against `images`.
pub fn watch_event(event: watcher::Event<EtcdCluster>, images: &ImagePolicy) -> ClusterEvent {
    roster_event(event, topology, |c| desired(&c, images))
}

/// A watcher event as the roster's: each object reduced to its `key` and its `value`.
pub(crate) fn roster_event<T, K, V>(
    event: watcher::Event<T>,
    key: impl Fn(&T) -> K,
    value: impl FnOnce(T) -> V,
) -> WatchEvent<K, V> {
    match event {
        watcher::Event::Init => WatchEvent::RelistStarted,
        watcher::Event::InitApply(o) => WatchEvent::Relisted(key(&o), value(o)),
        watcher::Event::InitDone => WatchEvent::RelistDone,
        watcher::Event::Apply(o) => WatchEvent::Applied(key(&o), value(o)),
        watcher::Event::Delete(o) => WatchEvent::Deleted(key(&o)),
    }
}

/// `namespace/name` of an object: the roster's key of an EtcdBackup or EtcdRestore.
pub(crate) fn object_key<T: ResourceExt>(object: &T) -> String {
    format!(
        "{}/{}",
        object.namespace().unwrap_or_default(),
        object.name_any()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::EtcdClusterSpec;

    fn cluster(name: &str, size: i32) -> EtcdCluster {
        let mut c = EtcdCluster::new(
            name,
            EtcdClusterSpec {
                size,
                ..EtcdClusterSpec::default()
            },
        );
        c.metadata.namespace = Some("ns".into());
        c
    }

    #[test]
    fn relist_events_map_to_the_supervisors_relist_protocol() {
        assert_eq!(
            watch_event(watcher::Event::Init, &ImagePolicy::default()),
            WatchEvent::RelistStarted
        );
        assert_eq!(
            watch_event(watcher::Event::InitDone, &ImagePolicy::default()),
            WatchEvent::RelistDone
        );
        match watch_event(
            watcher::Event::InitApply(cluster("a", 3)),
            &ImagePolicy::default(),
        ) {
            WatchEvent::Relisted(t, spec) => {
                assert_eq!(t.key(), "ns/a");
                assert_eq!(spec.size, 3);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(
            watch_event(
                watcher::Event::Delete(cluster("a", 3)),
                &ImagePolicy::default()
            ),
            WatchEvent::Deleted(Topology::new("ns", "a"))
        );
    }
}
