//! Builds each Cluster actor's ports from the shared client and caches, and puts every
//! write of those ports behind the leader's fence.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::runtime::events::Recorder;

use etcd_operator_actors::ports::{ClusterApi, EtcdApi};
use etcd_operator_actors::supervisor::ClusterWiring;
use etcd_operator_core::topology::Topology;

use super::fence::{Fence, FencedClusterApi, FencedEtcdApi};
use crate::etcd_api::{AddressSource, EtcdClientApi, IdentitySource};
use crate::kube_api::{Caches, ClusterDns, Identities, KubeClusterApi, member_address};

/// Wires Cluster actors to the real Kubernetes API and real etcd.
pub struct KubeWiring {
    /// API client.
    pub client: Client,
    /// Informer caches.
    pub caches: Caches,
    /// Event recorder.
    pub recorder: Recorder,
    /// Deadline of etcd calls.
    pub etcd_timeout: Duration,
    /// The operator's client identity of every TLS cluster, from its Secrets.
    pub identities: Identities,
    /// The operator's own image (seeds restoring a snapshot run it).
    pub operator_image: Option<String>,
    /// The cluster DNS a member's name must be served by before it joins, when known.
    pub dns: Option<Arc<ClusterDns>>,
}

impl ClusterWiring for KubeWiring {
    fn cluster_api(&self, cluster: &Topology) -> Arc<dyn ClusterApi> {
        Arc::new(
            KubeClusterApi::new(
                self.client.clone(),
                cluster.clone(),
                self.caches.clone(),
                self.recorder.clone(),
                self.identities.clone(),
            )
            .with_operator_image(self.operator_image.clone())
            .with_cluster_dns(self.dns.clone()),
        )
    }

    fn etcd_api(&self, cluster: &Topology) -> Arc<dyn EtcdApi> {
        let (identities, cluster) = (self.identities.clone(), cluster.clone());
        let source: IdentitySource = Arc::new(move || identities.get(&cluster));
        let pods = self.caches.pods.clone();
        let addresses: AddressSource = Arc::new(move |host| member_address(&pods, host));
        Arc::new(
            EtcdClientApi::new(self.etcd_timeout)
                .with_identity(source)
                .with_addresses(addresses),
        )
    }
}

/// Any wiring whose ports' writes (Kubernetes writes and etcd membership changes) each
/// pass the fence first; reads go straight through.
pub struct FencedWiring {
    inner: Arc<dyn ClusterWiring>,
    fence: Fence,
}

impl FencedWiring {
    /// Puts the writes of `inner`'s ports behind `fence`.
    pub fn new(inner: Arc<dyn ClusterWiring>, fence: Fence) -> Self {
        FencedWiring { inner, fence }
    }
}

impl ClusterWiring for FencedWiring {
    fn cluster_api(&self, cluster: &Topology) -> Arc<dyn ClusterApi> {
        Arc::new(FencedClusterApi::new(
            self.inner.cluster_api(cluster),
            self.fence.clone(),
        ))
    }

    fn etcd_api(&self, cluster: &Topology) -> Arc<dyn EtcdApi> {
        Arc::new(FencedEtcdApi::new(
            self.inner.etcd_api(cluster),
            self.fence.clone(),
        ))
    }
}
