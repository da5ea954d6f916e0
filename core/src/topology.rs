//! Names and URLs of one cluster's members, derived from the cluster's name and namespace.

use serde::Serialize;

use crate::lifecycle::TlsMode;

/// Port etcd serves clients on.
pub const CLIENT_PORT: u16 = 2379;
/// Port etcd members talk to each other on.
pub const PEER_PORT: u16 = 2380;

/// Identifies one EtcdCluster and derives every DNS name the operator uses for it.
///
/// Member `m` of cluster `c` in namespace `ns` is reached at `m.c.ns.svc`, a name the
/// headless Service `c` gives each pod (hostname `m`, subdomain `c`) before the pod has
/// an IP. URLs never contain pod IPs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Topology {
    /// Namespace of the EtcdCluster.
    pub namespace: String,
    /// Name of the EtcdCluster (and of its headless Service).
    pub name: String,
}

/// `namespace/name`, as [`Topology::key`].
impl std::fmt::Display for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl Topology {
    /// The topology of cluster `name` in `namespace`.
    pub fn new(namespace: &str, name: &str) -> Self {
        Topology {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// `namespace/name`, the key used in logs, metrics-free places and the debug stream.
    pub fn key(&self) -> String {
        self.to_string()
    }

    /// DNS name of a member.
    pub fn member_host(&self, member: &str) -> String {
        format!("{member}.{}.{}.svc", self.name, self.namespace)
    }

    /// Peer URL of a member: `https` when the cluster runs TLS.
    pub fn peer_url(&self, member: &str, tls: TlsMode) -> String {
        format!(
            "{}://{}:{PEER_PORT}",
            tls.scheme(),
            self.member_host(member)
        )
    }

    /// Client URL of a member: `https` when the cluster runs TLS.
    pub fn client_url(&self, member: &str, tls: TlsMode) -> String {
        format!(
            "{}://{}:{CLIENT_PORT}",
            tls.scheme(),
            self.member_host(member)
        )
    }

    /// Name of the Service clients use.
    pub fn client_service(&self) -> String {
        format!("{}-client", self.name)
    }

    /// A new member name: the cluster name and five random lowercase characters.
    pub fn new_member_name(&self, rng: &mut impl rand::Rng) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let suffix: String = (0..5)
            .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
            .collect();
        format!("{}-{suffix}", self.name)
    }

    /// `--initial-cluster` value: `name=peerURL` pairs, comma-separated, in the given order.
    pub fn initial_cluster(&self, members: &[String], tls: TlsMode) -> String {
        members
            .iter()
            .map(|m| format!("{m}={}", self.peer_url(m, tls)))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_use_the_member_dns_name_never_an_ip() {
        let t = Topology::new("prod", "etcd-a");
        assert_eq!(
            t.peer_url("etcd-a-x7k2p", TlsMode::Off),
            "http://etcd-a-x7k2p.etcd-a.prod.svc:2380"
        );
        assert_eq!(
            t.client_url("etcd-a-x7k2p", TlsMode::Off),
            "http://etcd-a-x7k2p.etcd-a.prod.svc:2379"
        );
    }

    #[test]
    fn urls_of_a_tls_cluster_are_https_by_the_same_dns_names() {
        let t = Topology::new("prod", "etcd-a");
        assert_eq!(
            t.peer_url("etcd-a-x7k2p", TlsMode::Static),
            "https://etcd-a-x7k2p.etcd-a.prod.svc:2380"
        );
        assert_eq!(
            t.client_url("etcd-a-x7k2p", TlsMode::Auto),
            "https://etcd-a-x7k2p.etcd-a.prod.svc:2379"
        );
        assert_eq!(
            t.initial_cluster(&["etcd-a-x7k2p".into()], TlsMode::Auto),
            "etcd-a-x7k2p=https://etcd-a-x7k2p.etcd-a.prod.svc:2380"
        );
    }

    #[test]
    fn new_member_names_are_prefixed_by_the_cluster_and_differ() {
        let t = Topology::new("default", "demo");
        let mut rng = rand::rng();
        let a = t.new_member_name(&mut rng);
        let b = t.new_member_name(&mut rng);
        assert!(a.starts_with("demo-") && a.len() == "demo-".len() + 5);
        assert_ne!(a, b);
    }

    #[test]
    fn initial_cluster_lists_every_given_member_with_its_peer_url() {
        let t = Topology::new("default", "demo");
        assert_eq!(
            t.initial_cluster(&["demo-a".into(), "demo-b".into()], TlsMode::Off),
            "demo-a=http://demo-a.demo.default.svc:2380,demo-b=http://demo-b.demo.default.svc:2380"
        );
    }
}
