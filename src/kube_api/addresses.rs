//! Members' addresses: where the operator dials a member (its pod's address from the pod
//! cache, so that its calls never ask the cluster DNS for a member's name before the pod's
//! address is published, a miss the DNS then caches for its negative TTL), and whether
//! the cluster DNS publishes it yet (the headless Service's EndpointSlices list it).

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::etcd_api::Route;
use crate::resources::labels::CLUSTER_LABEL;

/// How the host `host` of an endpoint is dialed. A member's name
/// (`<member>.<cluster>.<ns>.svc`, with or without a cluster domain after it) is dialed at
/// its pod's IP when the pod exists in `pods`, belongs to that cluster, is not being
/// deleted and has an address, and not at all otherwise (its name is not published
/// either: asking the DNS for it would only cache a miss); any other host by its name.
pub fn member_address(pods: &Store<Pod>, host: &str) -> Route {
    let Some((member, cluster, namespace)) = member_name(host) else {
        return Route::ByName;
    };
    pods.get(&ObjectRef::new(member).within(namespace))
        .and_then(|pod| pod_address(&pod, cluster))
        .map_or(Route::NoAddressYet, Route::Address)
}

/// The member, cluster and namespace of a member's DNS name.
fn member_name(host: &str) -> Option<(&str, &str, &str)> {
    let mut labels = host.split('.');
    let name = (labels.next()?, labels.next()?, labels.next()?);
    (labels.next() == Some("svc")).then_some(name)
}

/// The DNS names (`<member>.<cluster>.<ns>.svc`) of the pods in `pods` that are live
/// member pods of cluster `cluster` in `namespace` with an address, sorted.
pub fn member_hosts(pods: &Store<Pod>, namespace: &str, cluster: &str) -> Vec<String> {
    let mut hosts: Vec<String> = pods
        .state()
        .iter()
        .filter(|pod| pod.namespace().as_deref() == Some(namespace))
        .filter(|pod| pod_address(pod, cluster).is_some())
        .map(|pod| format!("{}.{cluster}.{namespace}.svc", pod.name_any()))
        .collect();
    hosts.sort();
    hosts
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

/// The label the EndpointSlice controller puts on each slice of a Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Whether `pod`'s current address is listed for it in one of `slices` of Service
/// `service` (the cluster DNS serves a headless Service's records from them).
pub fn is_published<'a>(
    pod: &Pod,
    service: &str,
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
) -> bool {
    let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()) else {
        return false;
    };
    let name = pod.name_any();
    slices
        .into_iter()
        .filter(|s| s.namespace() == pod.namespace())
        .filter(|s| s.labels().get(SERVICE_NAME_LABEL).map(String::as_str) == Some(service))
        .flat_map(|s| s.endpoints.iter())
        .filter(|e| e.target_ref.as_ref().and_then(|t| t.name.as_deref()) == Some(&name))
        .any(|e| e.addresses.iter().any(|a| a == ip))
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

    fn slice(service: &str, entries: &[(&str, &str)]) -> EndpointSlice {
        use k8s_openapi::api::core::v1::ObjectReference;
        use k8s_openapi::api::discovery::v1::Endpoint;
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(format!("{service}-x1")),
                namespace: Some("prod".into()),
                labels: Some([(SERVICE_NAME_LABEL.to_string(), service.to_string())].into()),
                ..ObjectMeta::default()
            },
            address_type: "IPv4".into(),
            endpoints: entries
                .iter()
                .map(|(pod, ip)| Endpoint {
                    addresses: vec![ip.to_string()],
                    target_ref: Some(ObjectReference {
                        kind: Some("Pod".into()),
                        name: Some(pod.to_string()),
                        ..ObjectReference::default()
                    }),
                    ..Endpoint::default()
                })
                .collect(),
            ports: None,
        }
    }

    #[test]
    fn a_pod_is_published_once_its_current_address_is_in_its_services_slices() {
        let member = pod("demo-aaaaa", "demo", Some("10.244.1.4"));
        let listed = slice("demo", &[("demo-aaaaa", "10.244.1.4")]);
        assert!(is_published(&member, "demo", [&listed]));
        // Its old address (a pod made again under the same name), another Service's
        // slice, another pod's entry, or no address yet: not published.
        let old = slice("demo", &[("demo-aaaaa", "10.244.1.3")]);
        let client = slice("demo-client", &[("demo-aaaaa", "10.244.1.4")]);
        let other = slice("demo", &[("demo-bbbbb", "10.244.1.4")]);
        assert!(!is_published(&member, "demo", [&old, &client, &other]));
        let unaddressed = pod("demo-aaaaa", "demo", None);
        assert!(!is_published(&unaddressed, "demo", [&listed]));
    }

    #[test]
    fn a_member_with_a_pod_address_is_found_by_its_dns_name() {
        let pods = store_of(vec![pod("demo-abcde", "demo", Some("10.244.2.7"))]);
        let ip = Route::Address(IpAddr::from([10, 244, 2, 7]));
        assert_eq!(member_address(&pods, "demo-abcde.demo.prod.svc"), ip);
        let fqdn = "demo-abcde.demo.prod.svc.cluster.local";
        assert_eq!(member_address(&pods, fqdn), ip);
    }

    #[test]
    fn a_member_whose_pod_has_no_address_of_its_cluster_is_not_dialed_and_other_names_are() {
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
        ] {
            assert_eq!(member_address(&pods, host), Route::NoAddressYet, "{host}");
        }
        for host in ["demo-aaaaa.demo.prod", "demo-client.prod.svc", "10.244.2.9"] {
            assert_eq!(member_address(&pods, host), Route::ByName, "{host}");
        }
    }
}
