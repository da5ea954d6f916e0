//! The names a cluster DNS would serve for this node's pods, as hosts entries:
//! `<hostname>.<subdomain>.<ns>.svc[.cluster.local]` for pods behind a headless Service
//! named by their subdomain, and `<service>.<ns>.svc[.cluster.local]` for Services.
//!
//! As in a real cluster, a pod is behind a Service when the Service's selector matches it
//! and it is ready (or the Service has `publishNotReadyAddresses`); terminated pods never
//! are. Non-headless Services also resolve to their pods' addresses, since no service
//! proxy runs here.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Pod, Service};

use crate::hosts::HostEntry;

/// The cluster domain suffixed to the long form of every name.
pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// Whether a pod's `Ready` condition is `True`.
pub fn pod_is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn pod_ip(pod: &Pod) -> Option<Ipv4Addr> {
    pod.status.as_ref()?.pod_ip.as_deref()?.parse().ok()
}

fn selects(service: &Service, pod: &Pod) -> bool {
    let Some(selector) = service.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    if selector.is_empty() || service.metadata.namespace != pod.metadata.namespace {
        return false;
    }
    let labels = pod.metadata.labels.as_ref();
    selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

fn publishes(service: &Service, pod: &Pod) -> bool {
    let publish_not_ready = service
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    publish_not_ready || (pod_is_ready(pod) && pod.metadata.deletion_timestamp.is_none())
}

fn is_headless(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None")
}

fn push(map: &mut BTreeMap<Ipv4Addr, Vec<String>>, ip: Ipv4Addr, short: String) {
    let names = map.entry(ip).or_default();
    for name in [
        format!("{short}.svc"),
        format!("{short}.svc.{CLUSTER_DOMAIN}"),
    ] {
        if !names.contains(&name) {
            names.push(name);
        }
    }
}

/// The hosts entries for the pods bound to `node` and the Services selecting them,
/// sorted by address.
pub fn host_entries<'a>(
    node: &str,
    pods: impl IntoIterator<Item = &'a Pod>,
    services: impl IntoIterator<Item = &'a Service>,
) -> Vec<HostEntry> {
    let mut pods: Vec<(&Pod, Ipv4Addr)> = pods
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .filter(|p| !is_terminal(p))
        .filter_map(|p| pod_ip(p).map(|ip| (p, ip)))
        .collect();
    pods.sort_by_key(|(p, _)| (p.metadata.namespace.clone(), p.metadata.name.clone()));
    let mut services: Vec<&Service> = services.into_iter().collect();
    services.sort_by_key(|s| (s.metadata.namespace.clone(), s.metadata.name.clone()));
    let mut map: BTreeMap<Ipv4Addr, Vec<String>> = BTreeMap::new();
    let behind = |service: &Service| -> Vec<(&Pod, Ipv4Addr)> {
        pods.iter()
            .filter(|(p, _)| selects(service, p) && publishes(service, p))
            .copied()
            .collect()
    };
    for service in services.iter().filter(|s| is_headless(s)) {
        let (Some(name), Some(ns)) = (&service.metadata.name, &service.metadata.namespace) else {
            continue;
        };
        for (pod, ip) in behind(service) {
            let spec = pod.spec.as_ref();
            let hostname = spec.and_then(|s| s.hostname.as_deref());
            let subdomain = spec.and_then(|s| s.subdomain.as_deref());
            if let (Some(hostname), Some(subdomain)) = (hostname, subdomain)
                && subdomain == name
            {
                push(&mut map, ip, format!("{hostname}.{subdomain}.{ns}"));
            }
        }
    }
    for service in &services {
        let (Some(name), Some(ns)) = (&service.metadata.name, &service.metadata.namespace) else {
            continue;
        };
        for (_, ip) in behind(service) {
            push(&mut map, ip, format!("{name}.{ns}"));
        }
    }
    map.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus, ServiceSpec};

    fn pod(name: &str, ip: &str, ready: bool) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.labels = Some([("app".to_string(), "etcd".to_string())].into());
        p.spec = Some(PodSpec {
            node_name: Some("n1".into()),
            hostname: Some(name.into()),
            subdomain: Some("peers".into()),
            ..Default::default()
        });
        p.status = Some(PodStatus {
            pod_ip: Some(ip.into()),
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        p
    }

    fn service(name: &str, headless: bool, publish_not_ready: bool) -> Service {
        let mut s = Service::default();
        s.metadata.name = Some(name.into());
        s.metadata.namespace = Some("ns".into());
        s.spec = Some(ServiceSpec {
            selector: Some([("app".to_string(), "etcd".to_string())].into()),
            cluster_ip: Some(if headless { "None" } else { "10.0.0.5" }.into()),
            publish_not_ready_addresses: Some(publish_not_ready),
            ..Default::default()
        });
        s
    }

    fn names(entries: &[HostEntry], ip: &str) -> Vec<String> {
        let ip: Ipv4Addr = ip.parse().unwrap();
        entries
            .iter()
            .find(|(i, _)| *i == ip)
            .map(|(_, n)| n.clone())
            .unwrap_or_default()
    }

    #[test]
    fn pod_behind_publishing_headless_service_resolves_before_ready() {
        let pods = [pod("m1", "127.0.1.1", false)];
        let services = [service("peers", true, true)];
        let entries = host_entries("n1", &pods, &services);
        assert_eq!(
            names(&entries, "127.0.1.1"),
            vec![
                "m1.peers.ns.svc",
                "m1.peers.ns.svc.cluster.local",
                "peers.ns.svc",
                "peers.ns.svc.cluster.local"
            ]
        );
    }

    #[test]
    fn not_ready_pod_is_hidden_unless_service_publishes_not_ready() {
        let pods = [pod("m1", "127.0.1.1", false)];
        let services = [service("peers", true, false)];
        assert!(host_entries("n1", &pods, &services).is_empty());
    }

    #[test]
    fn service_lists_only_ready_pods() {
        let pods = [pod("m1", "127.0.1.1", true), pod("m2", "127.0.1.2", false)];
        let services = [service("client", false, false)];
        let entries = host_entries("n1", &pods, &services);
        assert_eq!(
            names(&entries, "127.0.1.1"),
            vec!["client.ns.svc", "client.ns.svc.cluster.local"]
        );
        assert!(names(&entries, "127.0.1.2").is_empty());
    }

    #[test]
    fn pod_without_matching_headless_service_has_no_name() {
        let pods = [pod("m1", "127.0.1.1", true)];
        let services = [service("other", false, false)];
        let entries = host_entries("n1", &pods, &services);
        assert_eq!(
            names(&entries, "127.0.1.1"),
            vec!["other.ns.svc", "other.ns.svc.cluster.local"]
        );
        assert!(host_entries("n1", &pods, &[]).is_empty());
    }

    #[test]
    fn terminated_and_foreign_pods_are_omitted() {
        let mut done = pod("m1", "127.0.1.1", true);
        done.status.as_mut().unwrap().phase = Some("Failed".into());
        let mut foreign = pod("m2", "127.0.1.2", true);
        foreign.spec.as_mut().unwrap().node_name = Some("other".into());
        let services = [service("peers", true, true)];
        assert!(host_entries("n1", &[done, foreign], &services).is_empty());
    }

    #[test]
    fn terminating_pod_leaves_ready_only_service() {
        let mut p = pod("m1", "127.0.1.1", true);
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::UNIX_EPOCH,
        ));
        assert!(host_entries("n1", &[p], &[service("client", false, false)]).is_empty());
    }
}
