//! Where certificates live: CoreOS's key names in the three Secrets, the directories
//! member pods mount them at, and the names of the Secrets the operator makes.

/// The three uses of a certificate in an etcd cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Member to member (server and client at once): `peer.crt` in `member.peerSecret`.
    Peer,
    /// A member serving clients: `server.crt` in `member.serverSecret`.
    Server,
    /// The operator as a client of the members: `etcd-client.crt` in `operatorSecret`.
    Client,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 3] = [Role::Peer, Role::Server, Role::Client];

    /// The key of the certificate in its Secret.
    pub fn cert_key(self) -> &'static str {
        match self {
            Role::Peer => "peer.crt",
            Role::Server => "server.crt",
            Role::Client => "etcd-client.crt",
        }
    }

    /// The key of the private key in its Secret.
    pub fn key_key(self) -> &'static str {
        match self {
            Role::Peer => "peer.key",
            Role::Server => "server.key",
            Role::Client => "etcd-client.key",
        }
    }

    /// The key of the CA bundle in its Secret: for peers, the CA of the other members'
    /// peer certificates; for a server, the CA of its clients' certificates; for the
    /// operator, the CA of the members' server certificates.
    pub fn ca_key(self) -> &'static str {
        match self {
            Role::Peer => "peer-ca.crt",
            Role::Server => "server-ca.crt",
            Role::Client => "etcd-client-ca.crt",
        }
    }

    /// Where member pods mount the Secret of this role (CoreOS's directories).
    pub fn mount_dir(self) -> &'static str {
        match self {
            Role::Peer => "/etc/etcdtls/member/peer-tls",
            Role::Server => "/etc/etcdtls/member/server-tls",
            Role::Client => "/etc/etcdtls/operator/etcd-tls",
        }
    }

    /// The name of the Secret the operator makes for this role of cluster `cluster`.
    pub fn auto_secret(self, cluster: &str) -> String {
        match self {
            Role::Peer => format!("{cluster}-peer-tls"),
            Role::Server => format!("{cluster}-server-tls"),
            Role::Client => format!("{cluster}-client-tls"),
        }
    }

    /// The role's name, for people.
    pub fn label(self) -> &'static str {
        match self {
            Role::Peer => "peer",
            Role::Server => "server",
            Role::Client => "client",
        }
    }

    /// A file of this role's Secret as mounted in a member pod.
    pub fn path(self, key: &str) -> String {
        format!("{}/{key}", self.mount_dir())
    }
}

/// Key of a CA's certificate in a `kubernetes.io/tls` Secret (the operator's own CA, or
/// the one `spec.TLS.auto.caSecret` names).
pub const CA_CERT_KEY: &str = "tls.crt";
/// Key of a CA's private key (PKCS #8 PEM) in the same Secret.
pub const CA_KEY_KEY: &str = "tls.key";

/// The name of the CA Secret the operator makes for cluster `cluster`.
pub fn auto_ca_secret(cluster: &str) -> String {
    format!("{cluster}-ca")
}

/// The name of the Secret in which the operator keeps its copy of a user's CA
/// (`spec.TLS.auto.caSecret`) for cluster `cluster`: the CA its certificates come from,
/// and the CA rotation in progress.
pub fn adopted_ca_secret(cluster: &str) -> String {
    format!("{cluster}-ca-in-use")
}

/// The Secrets a cluster's TLS uses, by role, and its CA's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretNames {
    /// The peer, server and client (operator) Secrets, in [`Role::ALL`]'s order; `Err`
    /// names the spec field that should name it and does not.
    pub roles: [(Role, Result<String, &'static str>); 3],
    /// The CA to issue from (`spec.TLS.auto` only).
    pub ca: Option<CaSecret>,
}

/// The CA Secrets of an operator-managed cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaSecret {
    /// The Secret the certificates are issued from and CA rotations are recorded in,
    /// always the operator's own: its own CA (`<cluster>-ca`), or its copy of the user's
    /// (`<cluster>-ca-in-use`).
    pub name: String,
    /// The user's CA Secret (`spec.TLS.auto.caSecret`), when the cluster names one: its
    /// CA is copied into `name` before the first member, and a new CA found in it later
    /// is adopted through a CA rotation. `None`: the operator makes its CAs.
    pub source: Option<String>,
}

impl CaSecret {
    /// The operator makes the CAs (no `caSecret`).
    pub fn owned(&self) -> bool {
        self.source.is_none()
    }
}

impl SecretNames {
    /// The Secret of `role`, when the spec names one.
    pub fn of(&self, role: Role) -> Option<&str> {
        self.roles
            .iter()
            .find(|(r, _)| *r == role)
            .and_then(|(_, name)| name.as_deref().ok())
    }
}

/// The Secrets of cluster `cluster` with TLS `policy`; `None` without TLS.
pub fn secret_names(cluster: &str, policy: Option<&crate::api::TlsPolicy>) -> Option<SecretNames> {
    let policy = policy?;
    if let Some(st) = &policy.r#static {
        let member = st.member.clone().unwrap_or_default();
        let named = |name: Option<String>, field| name.filter(|n| !n.is_empty()).ok_or(field);
        return Some(SecretNames {
            roles: [
                (
                    Role::Peer,
                    named(member.peer_secret, "spec.TLS.static.member.peerSecret"),
                ),
                (
                    Role::Server,
                    named(member.server_secret, "spec.TLS.static.member.serverSecret"),
                ),
                (
                    Role::Client,
                    named(st.operator_secret.clone(), "spec.TLS.static.operatorSecret"),
                ),
            ],
            ca: None,
        });
    }
    let auto = policy.auto.as_ref()?;
    let ca = match auto.ca_secret.as_deref().filter(|n| !n.is_empty()) {
        Some(name) => CaSecret {
            name: adopted_ca_secret(cluster),
            source: Some(name.to_string()),
        },
        None => CaSecret {
            name: auto_ca_secret(cluster),
            source: None,
        },
    };
    Some(SecretNames {
        roles: Role::ALL.map(|role| (role, Ok(role.auto_secret(cluster)))),
        ca: Some(ca),
    })
}
