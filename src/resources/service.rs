//! The two Services of a cluster: headless for member DNS names, and one for clients.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use kube::ResourceExt;

use etcd_operator_core::topology::{CLIENT_PORT, PEER_PORT, Topology};

use super::labels::{client_selector, object_meta, selector};
use crate::api::EtcdCluster;

fn port(name: &str, number: u16) -> ServicePort {
    ServicePort {
        name: Some(name.to_string()),
        port: i32::from(number),
        target_port: Some(
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i32::from(number)),
        ),
        ..ServicePort::default()
    }
}

/// The headless Service named like the cluster. It publishes not-ready addresses so every
/// member has its DNS name `<member>.<cluster>.<namespace>.svc` before it is ready, which
/// a joining member needs to reach its peers.
pub(crate) fn headless_service(cluster: &EtcdCluster) -> Service {
    Service {
        metadata: object_meta(cluster, cluster.name_any()),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(selector(&cluster.name_any())),
            ports: Some(vec![port("client", CLIENT_PORT), port("peer", PEER_PORT)]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The client Service `<cluster>-client`, routing to ready voting members only.
pub fn client_service(cluster: &EtcdCluster) -> Service {
    let topology = Topology::new(
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
    );
    Service {
        metadata: object_meta(cluster, topology.client_service()),
        spec: Some(ServiceSpec {
            selector: Some(client_selector(&cluster.name_any())),
            ports: Some(vec![port("client", CLIENT_PORT)]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}
