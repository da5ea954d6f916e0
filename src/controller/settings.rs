//! What one operator process runs with. The command line (`crate::cli`) builds it; the
//! controller depends on nothing of the command line.

use std::net::SocketAddr;
use std::time::Duration;

use etcd_operator_actors::cluster::ClusterConfig;

use crate::api::images::ImagePolicy;
use crate::backup::scope::EndpointPolicy;
use crate::http::serving::CertSource;

/// The operator's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Only EtcdClusters in this namespace; empty: every namespace.
    pub namespace: String,
    /// Address of the HTTPS server (/healthz, /readyz, /metrics, /debug/...).
    pub listen: SocketAddr,
    /// Where the HTTPS server's certificate comes from.
    pub serving: CertSource,
    /// Most `/debug/stream` subscriptions of one user at once.
    pub debug_stream_per_identity: usize,
    /// Read timeout of each Kubernetes API call (not watches).
    pub api_timeout: Duration,
    /// Deadline of each etcd call, owned by the etcd adapter.
    pub etcd_timeout: Duration,
    /// The Cluster actors' configuration.
    pub cluster: ClusterConfig,
    /// Leader election.
    pub lease: LeaseSettings,
    /// This replica's identity in the Lease and in Events.
    pub identity: String,
    /// The operator's own image, which restoring seeds run to fetch their snapshot;
    /// `None`: read from the operator's pod at start.
    pub operator_image: Option<String>,
    /// Where backups may dial etcd.
    pub backup_endpoints: EndpointPolicy,
    /// The image repositories clusters may run.
    pub images: ImagePolicy,
}

/// The leader-election Lease.
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    /// Elect a leader so only one replica acts; without it this replica acts at once.
    pub elect: bool,
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
}
