//! What every part of the running node shares: the API client, its identity, its state
//! directory, the image tables, the pod address pool, the log book and the pods' token
//! refreshers.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;

use crate::images::EtcdBinaries;
use crate::imagestore::ImageStore;
use crate::ipam::IpPool;
use crate::logcap::LogBook;
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
    /// Pod addresses.
    pub ips: Mutex<IpPool>,
    /// Path of util-linux `unshare`.
    pub unshare: PathBuf,
    /// The longest a node shutdown waits for a pod's processes before killing them.
    pub shutdown_grace: Duration,
    /// Images built on this machine.
    pub images: ImageStore,
    /// The API server's address as containers reach it (`KUBERNETES_SERVICE_HOST`/`_PORT`).
    pub api_host: String,
    /// Its port.
    pub api_port: u16,
    /// The container log files being written.
    pub logs: Arc<LogBook>,
    /// The directory with the live copy of the hosts file, mounted into rooted containers.
    pub hosts_dir: PathBuf,
    /// The port of the node's kubelet API.
    pub kubelet_port: u16,
    /// Per pod uid, the task keeping its service-account tokens fresh.
    pub tokens: Mutex<HashMap<String, TaskGuard>>,
}

impl NodeCtx {
    /// A pod's address: the node's own with `hostNetwork`; else the one it had before
    /// (`previous`, kept across node restarts) if the pool still has it, else a free one
    /// nothing listens on. `None` when none is left.
    pub fn pod_address(
        &self,
        uid: &str,
        host_network: bool,
        previous: Option<&str>,
    ) -> Option<String> {
        if host_network {
            return Some(self.host_ip.clone());
        }
        let busy = crate::ipam::busy_addresses();
        let mut pool = self.ips.lock().unwrap_or_else(|e| e.into_inner());
        let kept = previous
            .and_then(|ip| ip.parse().ok())
            .filter(|ip| pool.reserve(uid, *ip));
        kept.or_else(|| pool.allocate_avoiding(uid, &busy))
            .map(|ip| ip.to_string())
    }

    /// Keeps a pod's tokens fresh with `guard`'s task (replacing an earlier one).
    pub fn keep_tokens(&self, uid: &str, guard: TaskGuard) {
        self.tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid.to_string(), guard);
    }

    /// Stops refreshing a pod's tokens.
    pub fn forget_tokens(&self, uid: &str) {
        self.tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
    }

    /// Frees a pod's address.
    pub fn release_ip(&self, uid: &str) {
        self.ips
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .release(uid);
    }
}
