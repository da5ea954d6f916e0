//! Which etcd endpoints a backup may dial: only pods of the EtcdBackup's own namespace,
//! unless the operator is started with `--allow-backup-endpoints-outside-namespace`.
//!
//! The operator holds cluster-wide rights, so a backup dials nothing on its author's word
//! alone. Every endpoint (of `etcdEndpoints`, of the operator's own list for a named
//! cluster, and every client URL of the member list a cluster answers with) is resolved
//! through the Kubernetes API, never through DNS, to pods of that namespace; the pods'
//! addresses are dialed (TLS still verifies the member by the name it was given). The
//! forms accepted, with `<ns>` the EtcdBackup's namespace and any cluster domain after
//! `svc`:
//!
//! - `<service>` (relative to `<ns>`, as the CoreOS examples write it) and
//!   `<service>.<ns>.svc`: the running pods that Service's selector picks;
//! - `<hostname>.<subdomain>.<ns>.svc`: the pod of that hostname and subdomain;
//! - an IP address: a pod of `<ns>` that has it, or the pods of a Service whose cluster IP
//!   it is.
//!
//! Everything else is refused with its reason: a name of another namespace, a name
//! outside the cluster, an address of no pod or Service of the namespace, an
//! `ExternalName` Service or one without a selector (its endpoints are whatever someone
//! wrote, not pods of the namespace), a pod on its node's network (its address is the
//! node's).

use std::collections::BTreeMap;
use std::net::IpAddr;

/// The flag that lets backups dial endpoints outside their namespace.
pub const ALLOW_FLAG: &str = "--allow-backup-endpoints-outside-namespace";

/// Where the operator's backups may dial (its flag).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EndpointPolicy {
    /// Only pods of the EtcdBackup's namespace.
    #[default]
    OwnNamespace,
    /// Any endpoint, by its name ([`ALLOW_FLAG`]).
    Anywhere,
}

/// A pod of the namespace, as far as dialing it matters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodFacts {
    /// Its name.
    pub name: String,
    /// `spec.hostname` (its name when unset).
    pub hostname: Option<String>,
    /// `spec.subdomain`.
    pub subdomain: Option<String>,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its addresses (`status.podIPs`).
    pub ips: Vec<IpAddr>,
    /// `spec.hostNetwork`: its address is its node's.
    pub host_network: bool,
    /// Its phase is `Succeeded` or `Failed`: nothing runs at its address any more.
    pub finished: bool,
}

/// A Service of the namespace, as far as dialing it matters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceFacts {
    /// Its name.
    pub name: String,
    /// Its selector (`None` or empty: its endpoints are written by hand).
    pub selector: Option<BTreeMap<String, String>>,
    /// `spec.externalName` of an `ExternalName` Service.
    pub external_name: Option<String>,
    /// Its cluster IPs.
    pub cluster_ips: Vec<IpAddr>,
}

/// The pods and Services of one namespace, listed when a backup starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceView {
    /// The namespace.
    pub namespace: String,
    /// Its pods.
    pub pods: Vec<PodFacts>,
    /// Its Services.
    pub services: Vec<ServiceFacts>,
}

/// Why an endpoint is not dialed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A name of another namespace.
    #[error("it names namespace {found}, not the EtcdBackup's namespace {namespace}")]
    OtherNamespace {
        /// The namespace the name is in.
        found: String,
        /// The EtcdBackup's namespace.
        namespace: String,
    },
    /// A name that is not a Service's or a pod's of the cluster.
    #[error(
        "it is not a name of a Service or pod in namespace {namespace} (write <service>, \
         <service>.{namespace}.svc or <hostname>.<subdomain>.{namespace}.svc)"
    )]
    NotInCluster {
        /// The EtcdBackup's namespace.
        namespace: String,
    },
    /// An address of no pod or Service of the namespace.
    #[error("it is not the address of a pod or Service in namespace {namespace}")]
    UnknownAddress {
        /// The EtcdBackup's namespace.
        namespace: String,
    },
    /// No such Service or pod in the namespace.
    #[error("namespace {namespace} has no Service or pod of that name")]
    NotFound {
        /// The EtcdBackup's namespace.
        namespace: String,
    },
    /// An `ExternalName` Service: a name somewhere else.
    #[error(
        "Service {service} is an ExternalName Service (for {target}), not pods of namespace {namespace}"
    )]
    ExternalName {
        /// The Service.
        service: String,
        /// Its external name.
        target: String,
        /// The EtcdBackup's namespace.
        namespace: String,
    },
    /// A Service without a selector: its endpoints are written by hand.
    #[error(
        "Service {service} has no selector: its endpoints are not known to be pods of \
         namespace {namespace}"
    )]
    NoSelector {
        /// The Service.
        service: String,
        /// The EtcdBackup's namespace.
        namespace: String,
    },
    /// The only pods are on their node's network.
    #[error("pod {pod} runs on its node's network: its address is the node's")]
    HostNetwork {
        /// The pod.
        pod: String,
    },
}

impl Refusal {
    /// Whether only a change of the spec can make the endpoint acceptable (a name of
    /// another namespace or outside the cluster); the others may change with the
    /// namespace's pods and Services.
    pub fn is_spec_problem(&self) -> bool {
        matches!(
            self,
            Refusal::OtherNamespace { .. } | Refusal::NotInCluster { .. }
        )
    }
}

/// An endpoint refused, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{source_of} {endpoint} is refused: {refusal}; an EtcdBackup dials only pods of its own \
     namespace (the operator's {ALLOW_FLAG} allows others)"
)]
pub struct OutsideNamespace {
    /// What named it (`etcdEndpoints`, `the member list`, ...).
    pub source_of: String,
    /// The endpoint.
    pub endpoint: String,
    /// Why.
    pub refusal: Refusal,
}

/// What an endpoint's host resolves to: the addresses to dial (empty while its pods have
/// none yet), or why it is refused.
pub type Resolution = Result<Vec<IpAddr>, Refusal>;

/// The host of a `scheme://host[:port][/...]` endpoint, lowercased, brackets of an IPv6
/// address removed; `None` when it has no host.
pub fn host_of(endpoint: &str) -> Option<String> {
    let url = url::Url::parse(endpoint).ok()?;
    Some(match url.host()? {
        url::Host::Domain(name) => name.trim_end_matches('.').to_ascii_lowercase(),
        url::Host::Ipv4(ip) => ip.to_string(),
        url::Host::Ipv6(ip) => ip.to_string(),
    })
}

/// A name of the cluster's DNS: a Service, or a pod under a Service (its subdomain).
#[derive(Debug, Clone, PartialEq, Eq)]
enum ClusterName<'a> {
    Service(&'a str),
    Pod {
        hostname: &'a str,
        subdomain: &'a str,
    },
}

impl NamespaceView {
    /// What `host` resolves to in this namespace (see the module documentation).
    pub fn resolve(&self, host: &str) -> Resolution {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return self.by_address(ip);
        }
        match self.cluster_name(host)? {
            ClusterName::Service(name) => match self.services.iter().find(|s| s.name == name) {
                Some(service) => self.service_pods(service),
                None => Err(self.not_found()),
            },
            ClusterName::Pod {
                hostname,
                subdomain,
            } => {
                let pod = self.pods.iter().find(|p| {
                    p.hostname.as_deref().unwrap_or(&p.name) == hostname
                        && p.subdomain.as_deref() == Some(subdomain)
                });
                match pod {
                    Some(pod) => live_addresses([pod]),
                    None => Err(self.not_found()),
                }
            }
        }
    }

    fn not_found(&self) -> Refusal {
        Refusal::NotFound {
            namespace: self.namespace.clone(),
        }
    }

    /// `host` as a Service's or a pod's name of this namespace.
    fn cluster_name<'a>(&self, host: &'a str) -> Result<ClusterName<'a>, Refusal> {
        let labels: Vec<&str> = host.split('.').collect();
        // The first `svc` after a name and a namespace; a cluster domain may follow it.
        let svc = labels.iter().skip(2).position(|l| *l == "svc");
        let namespace_at = match svc {
            Some(after_two) => after_two + 1,
            _ if labels.len() == 1 && !host.is_empty() => {
                return Ok(ClusterName::Service(labels[0]));
            }
            _ => {
                return Err(Refusal::NotInCluster {
                    namespace: self.namespace.clone(),
                });
            }
        };
        let found = labels[namespace_at];
        if found != self.namespace {
            return Err(Refusal::OtherNamespace {
                found: found.to_string(),
                namespace: self.namespace.clone(),
            });
        }
        match &labels[..namespace_at] {
            [service] => Ok(ClusterName::Service(service)),
            [hostname, subdomain] => Ok(ClusterName::Pod {
                hostname,
                subdomain,
            }),
            _ => Err(Refusal::NotInCluster {
                namespace: self.namespace.clone(),
            }),
        }
    }

    fn by_address(&self, ip: IpAddr) -> Resolution {
        if let Some(pod) = self.pods.iter().find(|p| p.ips.contains(&ip)) {
            return live_addresses([pod]).map(|_| vec![ip]);
        }
        match self.services.iter().find(|s| s.cluster_ips.contains(&ip)) {
            Some(service) => self.service_pods(service),
            None => Err(Refusal::UnknownAddress {
                namespace: self.namespace.clone(),
            }),
        }
    }

    /// The addresses of the pods `service` selects.
    fn service_pods(&self, service: &ServiceFacts) -> Resolution {
        if let Some(target) = &service.external_name {
            return Err(Refusal::ExternalName {
                service: service.name.clone(),
                target: target.clone(),
                namespace: self.namespace.clone(),
            });
        }
        let selector = match &service.selector {
            Some(selector) if !selector.is_empty() => selector,
            _ => {
                return Err(Refusal::NoSelector {
                    service: service.name.clone(),
                    namespace: self.namespace.clone(),
                });
            }
        };
        live_addresses(self.pods.iter().filter(|pod| {
            selector
                .iter()
                .all(|(k, v)| pod.labels.get(k).is_some_and(|l| l == v))
        }))
    }
}

/// The addresses of `pods` that still run, on the pod network; refused when the only
/// ones with an address are on their node's network.
fn live_addresses<'a>(pods: impl IntoIterator<Item = &'a PodFacts>) -> Resolution {
    let mut addresses = Vec::new();
    let mut on_host = None;
    for pod in pods
        .into_iter()
        .filter(|p| !p.finished && !p.ips.is_empty())
    {
        if pod.host_network {
            on_host.get_or_insert_with(|| pod.name.clone());
        } else {
            addresses.extend(pod.ips.iter().copied());
        }
    }
    match (addresses.is_empty(), on_host) {
        (true, Some(pod)) => Err(Refusal::HostNetwork { pod }),
        _ => Ok(addresses),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn member(name: &str, address: &str) -> PodFacts {
        PodFacts {
            name: name.into(),
            hostname: Some(name.into()),
            subdomain: Some("demo".into()),
            labels: labels(&[("etcd_cluster", "demo")]),
            ips: vec![ip(address)],
            ..PodFacts::default()
        }
    }

    fn service(name: &str, selector: &[(&str, &str)], cluster_ip: &str) -> ServiceFacts {
        ServiceFacts {
            name: name.into(),
            selector: Some(labels(selector)),
            cluster_ips: vec![ip(cluster_ip)],
            ..ServiceFacts::default()
        }
    }

    fn view() -> NamespaceView {
        NamespaceView {
            namespace: "tenant".into(),
            pods: vec![
                member("demo-a", "10.244.1.5"),
                member("demo-b", "10.244.2.6"),
            ],
            services: vec![service(
                "demo-client",
                &[("etcd_cluster", "demo")],
                "10.96.3.4",
            )],
        }
    }

    #[test]
    fn a_service_of_the_namespace_resolves_to_the_pods_its_selector_picks() {
        let both = Ok(vec![ip("10.244.1.5"), ip("10.244.2.6")]);
        for host in [
            "demo-client",
            "demo-client.tenant.svc",
            "demo-client.tenant.svc.cluster.local",
            "10.96.3.4",
        ] {
            assert_eq!(view().resolve(host), both, "{host}");
        }
    }

    #[test]
    fn a_member_name_or_pod_address_of_the_namespace_resolves_to_that_pod() {
        let view = view();
        assert_eq!(
            view.resolve("demo-b.demo.tenant.svc"),
            Ok(vec![ip("10.244.2.6")])
        );
        assert_eq!(view.resolve("10.244.1.5"), Ok(vec![ip("10.244.1.5")]));
    }

    #[test]
    fn names_of_other_namespaces_are_refused_whatever_their_form() {
        for host in [
            "victim-client.victim.svc",
            "victim-client.victim.svc.cluster.local",
            "victim-0.victim.victim.svc",
        ] {
            let refusal = view().resolve(host).unwrap_err();
            assert_eq!(
                refusal,
                Refusal::OtherNamespace {
                    found: "victim".into(),
                    namespace: "tenant".into()
                },
                "{host}"
            );
            assert!(refusal.is_spec_problem());
        }
    }

    #[test]
    fn names_outside_the_cluster_and_unknown_addresses_are_refused() {
        let view = view();
        for host in ["etcd.example.com", "demo-client.tenant", "a.b.c.tenant.svc"] {
            assert!(
                matches!(view.resolve(host), Err(Refusal::NotInCluster { .. })),
                "{host}"
            );
        }
        // Another namespace's pod, or a node, by address.
        assert!(matches!(
            view.resolve("10.244.9.9"),
            Err(Refusal::UnknownAddress { .. })
        ));
        assert!(matches!(
            view.resolve("nothing.tenant.svc"),
            Err(Refusal::NotFound { .. })
        ));
    }

    #[test]
    fn services_that_may_point_anywhere_are_refused() {
        let mut view = view();
        view.services.push(ServiceFacts {
            name: "alias".into(),
            external_name: Some("victim-client.victim.svc.cluster.local".into()),
            ..ServiceFacts::default()
        });
        view.services.push(ServiceFacts {
            name: "manual".into(),
            selector: None,
            cluster_ips: vec![ip("10.96.7.7")],
            ..ServiceFacts::default()
        });
        let refusal = view.resolve("alias.tenant.svc").unwrap_err();
        assert!(matches!(refusal, Refusal::ExternalName { .. }), "{refusal}");
        assert!(refusal.to_string().contains("victim-client.victim"));
        for host in ["manual", "10.96.7.7"] {
            assert!(
                matches!(view.resolve(host), Err(Refusal::NoSelector { .. })),
                "{host}"
            );
        }
    }

    #[test]
    fn pods_on_their_nodes_network_or_finished_are_never_dialed() {
        let mut view = view();
        view.pods[0].host_network = true;
        view.pods[1].finished = true;
        let refusal = view.resolve("demo-client").unwrap_err();
        assert_eq!(
            refusal,
            Refusal::HostNetwork {
                pod: "demo-a".into()
            }
        );
        assert_eq!(
            view.resolve("10.244.1.5"),
            Err(Refusal::HostNetwork {
                pod: "demo-a".into()
            })
        );
        // A finished pod's address is no refusal: nothing to dial yet.
        assert_eq!(view.resolve("demo-b.demo.tenant.svc"), Ok(vec![]));
    }

    #[test]
    fn hosts_are_read_from_endpoints_lowercased_without_brackets_or_a_final_dot() {
        assert_eq!(
            host_of("http://Demo-Client.Tenant.svc.:2379").as_deref(),
            Some("demo-client.tenant.svc")
        );
        assert_eq!(
            host_of("https://[fd00::5]:2379").as_deref(),
            Some("fd00::5")
        );
        assert_eq!(host_of("http://10.0.0.1").as_deref(), Some("10.0.0.1"));
        assert_eq!(host_of("not a url"), None);
    }

    #[test]
    fn a_refusal_names_the_endpoint_its_source_and_the_flag() {
        let refused = OutsideNamespace {
            source_of: "etcdEndpoints".into(),
            endpoint: "http://victim-client.victim.svc:2379".into(),
            refusal: view().resolve("victim-client.victim.svc").unwrap_err(),
        };
        let text = refused.to_string();
        for part in [
            "etcdEndpoints http://victim-client.victim.svc:2379",
            "namespace victim",
            "namespace tenant",
            ALLOW_FLAG,
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
    }
}
