//! What every part of the running node shares: the API client, its identity, its state
//! directory, the image tables, the pod network, the cluster's DNS, the log book and the
//! pods' token refreshers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use kube::Client;

use crate::etcfiles::ClusterDns;
use crate::images::EtcdBinaries;
use crate::imagestore::ImageStore;
use crate::launch::HostTools;
use crate::logcap::LogBook;
use crate::podnet::PodNetwork;
use crate::statedir::StateDir;
use crate::tasks::TaskGuard;

/// The node's shared context.
pub struct NodeCtx {
    /// API client.
    pub client: Client,
    /// The Node this process plays.
    pub node_name: String,
    /// The node's address (`hostIP` of its pods).
    pub host_ip: String,
    /// Where pods keep their volumes, logs and pid files.
    pub state: StateDir,
    /// etcd versions that can run.
    pub etcd: EtcdBinaries,
    /// The pod network, once the node knows its pod range (`spec.podCIDR`).
    pub network: OnceLock<PodNetwork>,
    /// The cluster DNS pods resolve names with.
    pub dns: ClusterDns,
    /// util-linux programs that start processes in namespaces.
    pub tools: HostTools,
    /// The longest a node shutdown waits for a pod's processes before killing them.
    pub shutdown_grace: Duration,
    /// Images built on this machine.
    pub images: ImageStore,
    /// The `kubernetes` Service's ClusterIP (`KUBERNETES_SERVICE_HOST`).
    pub api_host: String,
    /// Its port.
    pub api_port: u16,
    /// The container log files being written.
    pub logs: Arc<LogBook>,
    /// The port of the node's kubelet API.
    pub kubelet_port: u16,
    /// Per pod uid, the task keeping its service-account tokens fresh.
    pub tokens: Mutex<HashMap<String, TaskGuard>>,
    /// Per pod uid, the task keeping its configMap and secret volumes in step.
    pub volume_syncs: Mutex<HashMap<String, TaskGuard>>,
}

impl NodeCtx {
    /// Keeps a pod's tokens fresh with `guard`'s task (replacing an earlier one).
    pub fn keep_tokens(&self, uid: &str, guard: TaskGuard) {
        self.tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid.to_string(), guard);
    }

    /// Stops refreshing a pod's tokens and syncing its volumes.
    pub fn forget_tokens(&self, uid: &str) {
        self.tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        self.volume_syncs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
    }

    /// Keeps a pod's configMap and secret volumes in step with `guard`'s task (replacing
    /// an earlier one).
    pub fn keep_volume_sync(&self, uid: &str, guard: TaskGuard) {
        self.volume_syncs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid.to_string(), guard);
    }
}
