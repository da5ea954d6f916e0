//! Where the operator dials a member: its pod's address from the pod cache, so that its
//! calls never ask the cluster DNS for a member's name before the pod's address is
//! published (a miss the DNS then caches for its negative TTL).

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::resources::labels::CLUSTER_LABEL;

/// The address of the member named by `host` (`<member>.<cluster>.<ns>.svc`, with or
/// without a cluster domain after it): its pod's IP when the pod exists in `pods`, belongs
/// to that cluster, is not being deleted and has an address.
pub fn member_address(pods: &Store<Pod>, host: &str) -> Option<IpAddr> {
    let mut labels = host.split('.');
    let (member, cluster, namespace) = (labels.next()?, labels.next()?, labels.next()?);
    if labels.next() != Some("svc") {
        return None;
    }
    let pod = pods.get(&ObjectRef::new(member).within(namespace))?;
    pod_address(&pod, cluster)
}

/// The pod's IP, when it is a live member pod of `cluster` with one.
fn pod_address(pod: &Pod, cluster: &str) -> Option<IpAddr> {
    if pod.metadata.deletion_timestamp.is_some()
        || pod.labels().get(CLUSTER_LABEL).map(String::as_str) != Some(cluster)
    {
        return None;
    }
    pod.status.as_ref()?.pod_ip.as_deref()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::ObjectMeta;
    use kube::runtime::reflector::store;
    use kube::runtime::watcher::Event;

    use super::*;

    fn pod(name: &str, cluster: &str, ip: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("prod".into()),
                labels: Some([(CLUSTER_LABEL.to_string(), cluster.to_string())].into()),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                pod_ip: ip.map(String::from),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn store_of(pods: Vec<Pod>) -> Store<Pod> {
        let (reader, mut writer) = store::<Pod>();
        writer.apply_watcher_event(&Event::Init);
        for pod in pods {
            writer.apply_watcher_event(&Event::InitApply(pod));
        }
        writer.apply_watcher_event(&Event::InitDone);
        reader
    }

    #[test]
    fn a_member_with_a_pod_address_is_found_by_its_dns_name() {
        let pods = store_of(vec![pod("demo-abcde", "demo", Some("10.244.2.7"))]);
        let ip = Some(IpAddr::from([10, 244, 2, 7]));
        assert_eq!(member_address(&pods, "demo-abcde.demo.prod.svc"), ip);
        let fqdn = "demo-abcde.demo.prod.svc.cluster.local";
        assert_eq!(member_address(&pods, fqdn), ip);
    }

    #[test]
    fn no_address_for_a_pod_without_one_of_another_cluster_or_being_deleted() {
        let mut deleting = pod("demo-ccccc", "demo", Some("10.244.2.9"));
        deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
        let pods = store_of(vec![
            pod("demo-aaaaa", "demo", None),
            pod("demo-bbbbb", "other", Some("10.244.2.8")),
            deleting,
        ]);
        for host in [
            "demo-aaaaa.demo.prod.svc",
            "demo-bbbbb.demo.prod.svc",
            "demo-ccccc.demo.prod.svc",
            "demo-zzzzz.demo.prod.svc",
            "demo-aaaaa.demo.prod",
        ] {
            assert_eq!(member_address(&pods, host), None, "{host}");
        }
    }
}
