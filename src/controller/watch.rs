//! Maps the kube watcher's events on EtcdClusters to the Supervisor's `WatchEvent`s.

use kube::ResourceExt;
use kube::runtime::watcher;

use etcd_operator_actors::supervisor::WatchEvent;
use etcd_operator_actors::topology::Topology;

use crate::api::{EtcdCluster, desired_cluster};

fn topology(cluster: &EtcdCluster) -> Topology {
    Topology::new(
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
    )
}

/// The Supervisor's event for one watcher event.
pub fn watch_event(event: watcher::Event<EtcdCluster>) -> WatchEvent {
    match event {
        watcher::Event::Init => WatchEvent::RelistStarted,
        watcher::Event::InitApply(c) => WatchEvent::Relisted(topology(&c), desired_cluster(&c)),
        watcher::Event::InitDone => WatchEvent::RelistDone,
        watcher::Event::Apply(c) => WatchEvent::Applied(topology(&c), desired_cluster(&c)),
        watcher::Event::Delete(c) => WatchEvent::Deleted(topology(&c)),
    }
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
        assert_eq!(watch_event(watcher::Event::Init), WatchEvent::RelistStarted);
        assert_eq!(
            watch_event(watcher::Event::InitDone),
            WatchEvent::RelistDone
        );
        match watch_event(watcher::Event::InitApply(cluster("a", 3))) {
            WatchEvent::Relisted(t, spec) => {
                assert_eq!(t.key(), "ns/a");
                assert_eq!(spec.size, 3);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(
            watch_event(watcher::Event::Delete(cluster("a", 3))),
            WatchEvent::Deleted(Topology::new("ns", "a"))
        );
    }
}
