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
    /// Frees a pod's address.
    pub fn release_ip(&self, uid: &str) {
        self.ips
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .release(uid);
    }
}
