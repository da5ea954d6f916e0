//! Builds each Cluster actor's ports from the shared client and caches.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::runtime::events::Recorder;

use etcd_operator_actors::ports::{ClusterApi, EtcdApi};
use etcd_operator_actors::supervisor::ClusterWiring;
use etcd_operator_actors::topology::Topology;

use crate::etcd_api::EtcdClientApi;
use crate::kube_api::{Caches, KubeClusterApi};

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
}

impl ClusterWiring for KubeWiring {
    fn cluster_api(&self, cluster: &Topology) -> Arc<dyn ClusterApi> {
        Arc::new(KubeClusterApi::new(
            self.client.clone(),
            cluster.clone(),
            self.caches.clone(),
            self.recorder.clone(),
        ))
    }

    fn etcd_api(&self, _: &Topology) -> Arc<dyn EtcdApi> {
        Arc::new(EtcdClientApi::new(self.etcd_timeout))
    }
}
