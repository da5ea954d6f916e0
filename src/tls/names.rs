//! The DNS names of one cluster that its certificates must cover, and how a certificate
//! name covers a host name.

/// The names of cluster `name` in `namespace`, under the cluster domain `domain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNames {
    /// Namespace of the EtcdCluster.
    pub namespace: String,
    /// Name of the EtcdCluster (and of its headless Service).
    pub name: String,
    /// The Kubernetes cluster domain, without dots around it (`cluster.local`).
    pub domain: String,
}

impl ClusterNames {
    /// The names of cluster `name` in `namespace` under `domain` (a leading dot, as
    /// CoreOS's `clusterDomain` writes it, is dropped; empty means `cluster.local`).
    pub fn new(namespace: &str, name: &str, domain: &str) -> Self {
        let domain = domain.trim_matches('.');
        ClusterNames {
            namespace: namespace.to_string(),
            name: name.to_string(),
            domain: if domain.is_empty() {
                "cluster.local".into()
            } else {
                domain.into()
            },
        }
    }

    /// `*.<name>.<ns>.svc`: every member's DNS name, present and future.
    pub fn members(&self) -> String {
        format!("*.{}.{}.svc", self.name, self.namespace)
    }

    /// `*.<name>.<ns>.svc.<domain>`: the same, fully qualified, which is what a member's
    /// address resolves back to (etcd checks a peer's certificate against that name).
    pub fn members_fqdn(&self) -> String {
        format!("{}.{}", self.members(), self.domain)
    }

    /// A member's DNS name as new members get them, to check a certificate covers
    /// members not created yet (`<name>-bcdfg.<name>.<ns>.svc`).
    pub fn sample_member(&self) -> String {
        self.members()
            .replacen('*', &format!("{}-bcdfg", self.name), 1)
    }

    /// The same, fully qualified.
    pub fn sample_member_fqdn(&self) -> String {
        format!("{}.{}", self.sample_member(), self.domain)
    }

    /// `<name>-client.<ns>.svc`: the client Service.
    pub fn client_service(&self) -> String {
        format!("{}-client.{}.svc", self.name, self.namespace)
    }

    /// The names of an operator-made peer certificate: the members, in both forms.
    pub fn peer_sans(&self) -> Vec<String> {
        vec![self.members(), self.members_fqdn()]
    }

    /// The names of an operator-made server certificate: the members, the client
    /// Service in its forms, and `localhost` (the readiness probe's).
    pub fn server_sans(&self) -> Vec<String> {
        let service = format!("{}-client", self.name);
        vec![
            self.members(),
            self.members_fqdn(),
            self.client_service(),
            format!("{}.{}", self.client_service(), self.domain),
            format!("{service}.{}", self.namespace),
            service,
            "localhost".into(),
        ]
    }
}

/// Whether the certificate name `pattern` covers `host`, as TLS clients match them: equal
/// ignoring case, or a wildcard `*.rest` standing for exactly one leftmost label.
pub fn covers(pattern: &str, host: &str) -> bool {
    let (pattern, host) = (pattern.to_ascii_lowercase(), host.to_ascii_lowercase());
    match pattern.strip_prefix("*.") {
        Some(rest) => host
            .split_once('.')
            .is_some_and(|(label, tail)| !label.is_empty() && tail == rest),
        None => pattern == host,
    }
}
