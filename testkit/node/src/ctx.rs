//! What every part of the running node shares: the API client, its identity, its state
//! directory, the image table and the pod address pool.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use kube::Client;

use crate::images::EtcdBinaries;
use crate::ipam::IpPool;
use crate::statedir::StateDir;

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

    /// Frees a pod's address.
    pub fn release_ip(&self, uid: &str) {
        self.ips
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .release(uid);
    }
}
