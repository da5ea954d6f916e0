//! A pod's `/etc/hosts` and `/etc/resolv.conf`, as a kubelet and its runtime write them,
//! kept in the pod's state directory and bind-mounted over the container's (in the
//! container's private mount namespace; the host's files are never written).
//!
//! - hosts: the kubelet's managed file: localhost entries, then the pod's address with
//!   its FQDN (`<hostname>.<subdomain>.<ns>.svc.<domain>`, when it has a subdomain) and
//!   hostname, then `hostAliases`. A `hostNetwork` pod gets the host's file.
//! - resolv.conf by `dnsPolicy`: `ClusterFirst` (the default; a `hostNetwork` pod falls
//!   back to `Default`), `ClusterFirstWithHostNet`: the cluster DNS, the search path
//!   `<ns>.svc.<domain> svc.<domain> <domain>` and `ndots:5`; `Default`: the host's
//!   resolver configuration; `None`: only `dnsConfig`. `dnsConfig` nameservers and
//!   searches are appended, its options override by name. The host's search domains are
//!   not appended to the cluster's (a kubelet does; here they name nothing a pod can
//!   reach, eo-net has no upstream).

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Pod, PodDNSConfig};

use crate::prepare::pod_hostname;

/// The cluster's DNS, as a kubelet's `--cluster-dns` and `--cluster-domain` give it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterDns {
    /// The DNS Service's address.
    pub server: Ipv4Addr,
    /// The cluster domain.
    pub domain: String,
}

/// The two files of a pod, on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodEtc {
    /// Its `/etc/hosts`.
    pub hosts: PathBuf,
    /// Its `/etc/resolv.conf`.
    pub resolv_conf: PathBuf,
}

/// A resolver configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Resolver {
    nameservers: Vec<String>,
    searches: Vec<String>,
    options: Vec<String>,
}

/// The kubelet's `/etc/hosts` for a pod at `ip` (not on the host's network).
pub fn hosts_file(pod: &Pod, ip: &str, domain: &str) -> String {
    let spec = pod.spec.clone().unwrap_or_default();
    let hostname = pod_hostname(pod);
    let mut text = String::from(
        "# Kubernetes-managed hosts file.\n\
         127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         fe00::0\tip6-mcastprefix\n\
         fe00::1\tip6-allnodes\n\
         fe00::2\tip6-allrouters\n",
    );
    match spec.subdomain.as_deref().filter(|s| !s.is_empty()) {
        Some(sub) => {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            text.push_str(&format!(
                "{ip}\t{hostname}.{sub}.{ns}.svc.{domain}\t{hostname}\n"
            ));
        }
        None => text.push_str(&format!("{ip}\t{hostname}\n")),
    }
    let aliases = spec.host_aliases.unwrap_or_default();
    if !aliases.is_empty() {
        text.push_str("\n# Entries added by HostAliases.\n");
        for alias in aliases {
            let names = alias.hostnames.unwrap_or_default().join("\t");
            text.push_str(&format!("{}\t{names}\n", alias.ip));
        }
    }
    text
}

/// The `/etc/hosts` of a `hostNetwork` pod: the host's.
pub fn host_network_hosts_file(host_hosts: &str) -> String {
    format!("# Kubernetes-managed hosts file (host network).\n{host_hosts}")
}

fn parse_resolver(text: &str) -> Resolver {
    let mut conf = Resolver::default();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => conf.nameservers.extend(words.next().map(str::to_string)),
            Some("search") | Some("domain") => conf.searches = words.map(str::to_string).collect(),
            Some("options") => conf.options.extend(words.map(str::to_string)),
            _ => {}
        }
    }
    conf
}

/// `dnsConfig` added to `base`: nameservers and searches appended (no duplicates),
/// options replacing those of the same name.
fn merge(mut base: Resolver, extra: Option<&PodDNSConfig>) -> Resolver {
    let Some(extra) = extra else { return base };
    for (into, from) in [
        (&mut base.nameservers, &extra.nameservers),
        (&mut base.searches, &extra.searches),
    ] {
        for item in from.iter().flatten() {
            if !into.contains(item) {
                into.push(item.clone());
            }
        }
    }
    for option in extra.options.iter().flatten() {
        let rendered = match &option.value {
            Some(value) => format!("{}:{value}", option.name.as_deref().unwrap_or_default()),
            None => option.name.clone().unwrap_or_default(),
        };
        let name = option.name.as_deref().unwrap_or_default();
        base.options.retain(|o| o.split(':').next() != Some(name));
        base.options.push(rendered);
    }
    base
}

/// The pod's `/etc/resolv.conf` by its `dnsPolicy` (see the module), `host_resolv` being
/// the host's.
pub fn resolv_conf(pod: &Pod, dns: &ClusterDns, host_resolv: &str) -> String {
    let spec = pod.spec.clone().unwrap_or_default();
    let host_network = spec.host_network == Some(true);
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let domain = &dns.domain;
    let cluster = Resolver {
        nameservers: vec![dns.server.to_string()],
        searches: vec![
            format!("{ns}.svc.{domain}"),
            format!("svc.{domain}"),
            domain.clone(),
        ],
        options: vec!["ndots:5".to_string()],
    };
    let base = match spec.dns_policy.as_deref().unwrap_or("ClusterFirst") {
        "ClusterFirstWithHostNet" => cluster,
        "ClusterFirst" if !host_network => cluster,
        "None" => Resolver::default(),
        _ => parse_resolver(host_resolv),
    };
    let conf = merge(base, spec.dns_config.as_ref());
    let mut text = String::new();
    if !conf.searches.is_empty() {
        text.push_str(&format!("search {}\n", conf.searches.join(" ")));
    }
    for server in &conf.nameservers {
        text.push_str(&format!("nameserver {server}\n"));
    }
    if !conf.options.is_empty() {
        text.push_str(&format!("options {}\n", conf.options.join(" ")));
    }
    text
}

/// Writes `text` to `path` unless it holds it already, in place: containers bind-mount the
/// file, and a bind mount keeps the inode it was made with.
fn write_in_place(path: &Path, text: &str) -> std::io::Result<()> {
    if std::fs::read_to_string(path).ok().as_deref() == Some(text) {
        return Ok(());
    }
    std::fs::write(path, text)
}

/// Writes the pod's two files into `dir` (made if missing) for a pod at `ip`.
pub fn write(dir: &Path, pod: &Pod, ip: &str, dns: &ClusterDns) -> std::io::Result<PodEtc> {
    std::fs::create_dir_all(dir)?;
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let host_network = pod.spec.as_ref().and_then(|s| s.host_network) == Some(true);
    let hosts = if host_network {
        host_network_hosts_file(&read("/etc/hosts"))
    } else {
        hosts_file(pod, ip, &dns.domain)
    };
    let files = PodEtc {
        hosts: dir.join("hosts"),
        resolv_conf: dir.join("resolv.conf"),
    };
    write_in_place(&files.hosts, &hosts)?;
    write_in_place(
        &files.resolv_conf,
        &resolv_conf(pod, dns, &read("/etc/resolv.conf")),
    )?;
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "m1", "namespace": "ns1"}, "spec": spec,
        }))
        .unwrap()
    }

    fn dns() -> ClusterDns {
        ClusterDns {
            server: Ipv4Addr::new(10, 96, 0, 10),
            domain: "cluster.local".into(),
        }
    }

    const HOST_RESOLV: &str = "# host\nnameserver 192.0.2.53\nsearch corp.example\noptions edns0\n";

    #[test]
    fn a_pod_with_a_subdomain_finds_its_fqdn_in_its_hosts_file() {
        let p = pod(
            json!({"hostname": "m1", "subdomain": "peers", "containers": [],
            "hostAliases": [{"ip": "10.1.2.3", "hostnames": ["a", "b"]}]}),
        );
        let text = hosts_file(&p, "10.244.1.2", "cluster.local");
        assert!(text.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"));
        assert!(
            text.contains("\n10.244.1.2\tm1.peers.ns1.svc.cluster.local\tm1\n"),
            "{text}"
        );
        assert!(
            text.ends_with("\n# Entries added by HostAliases.\n10.1.2.3\ta\tb\n"),
            "{text}"
        );
    }

    #[test]
    fn a_pod_without_a_subdomain_finds_its_hostname_only() {
        let text = hosts_file(
            &pod(json!({"containers": []})),
            "10.244.1.2",
            "cluster.local",
        );
        assert!(
            text.ends_with("fe00::2\tip6-allrouters\n10.244.1.2\tm1\n"),
            "{text}"
        );
    }

    #[test]
    fn cluster_first_points_at_the_cluster_dns_with_the_namespace_search_path() {
        let text = resolv_conf(&pod(json!({"containers": []})), &dns(), HOST_RESOLV);
        assert_eq!(
            text,
            "search ns1.svc.cluster.local svc.cluster.local cluster.local\n\
             nameserver 10.96.0.10\noptions ndots:5\n"
        );
    }

    #[test]
    fn host_network_pods_use_the_hosts_resolver_unless_asked_otherwise() {
        let host_net = pod(json!({"hostNetwork": true, "containers": []}));
        assert_eq!(
            resolv_conf(&host_net, &dns(), HOST_RESOLV),
            "search corp.example\nnameserver 192.0.2.53\noptions edns0\n"
        );
        let with = pod(
            json!({"hostNetwork": true, "dnsPolicy": "ClusterFirstWithHostNet", "containers": []}),
        );
        assert!(resolv_conf(&with, &dns(), HOST_RESOLV).contains("nameserver 10.96.0.10\n"));
    }

    #[test]
    fn dns_config_is_appended_and_its_options_override() {
        let p = pod(json!({"containers": [], "dnsConfig": {
            "nameservers": ["10.0.0.53"], "searches": ["extra.example"],
            "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]}}));
        assert_eq!(
            resolv_conf(&p, &dns(), HOST_RESOLV),
            "search ns1.svc.cluster.local svc.cluster.local cluster.local extra.example\n\
             nameserver 10.96.0.10\nnameserver 10.0.0.53\noptions ndots:2 edns0\n"
        );
        let none = pod(json!({"dnsPolicy": "None", "containers": [],
            "dnsConfig": {"nameservers": ["10.0.0.53"]}}));
        assert_eq!(
            resolv_conf(&none, &dns(), HOST_RESOLV),
            "nameserver 10.0.0.53\n"
        );
    }

    #[test]
    fn files_are_rewritten_in_place_so_bind_mounts_see_them() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let p = pod(json!({"containers": []}));
        let files = write(dir.path(), &p, "10.244.1.2", &dns()).unwrap();
        let before = std::fs::metadata(&files.hosts).unwrap().ino();
        write(dir.path(), &p, "10.244.1.3", &dns()).unwrap();
        assert_eq!(std::fs::metadata(&files.hosts).unwrap().ino(), before);
        let text = std::fs::read_to_string(&files.hosts).unwrap();
        assert!(text.ends_with("10.244.1.3\tm1\n"), "{text}");
    }
}
