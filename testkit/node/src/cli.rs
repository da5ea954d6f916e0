//! Command-line interface: `run` plays the kubelet, `kill` crashes a pod's processes.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Where the node keeps pod state unless told otherwise.
pub const DEFAULT_STATE_DIR: &str = "/tmp/etcd-operator-local/node";

/// A process node: plays the kubelet for one Node, running pod containers as local
/// processes.
#[derive(Debug, Parser)]
#[command(name = "etcd-operator-node", version)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Register the node and run the pods bound to it until SIGINT/SIGTERM.
    Run(RunArgs),
    /// Signal a pod's running container processes (for failure tests).
    Kill(KillArgs),
    /// Become a container rooted in its image (run by the node itself, see `rooted`).
    #[command(hide = true)]
    ContainerInit(ContainerInitArgs),
}

/// Options of `container-init`.
#[derive(Debug, Args)]
pub struct ContainerInitArgs {
    /// The container's spec, written by the node.
    #[arg(long)]
    pub spec: PathBuf,
}

/// Options of `run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Kubeconfig of the cluster (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Name of the Node to play.
    #[arg(long, default_value = "local-node")]
    pub node_name: String,
    /// Directory for pod volumes, logs and pid files.
    #[arg(long, default_value = DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// An etcd version and its binary, e.g. 3.4.23=/usr/bin/etcd (repeatable; also read
    /// from NODE_ETCD_BINARIES="V=PATH,V=PATH", which the flags override).
    #[arg(long = "etcd-binary", value_name = "VERSION=PATH")]
    pub etcd_binary: Vec<String>,
    /// The pod network's script (testkit/env/podnet.sh): every pod not on the host's
    /// network gets a namespace and an address of the node's `spec.podCIDR` from it. Its
    /// records are where its environment says (PODNET_DIR, else $LOCAL_ENV_DIR/podnet).
    #[arg(long, value_name = "PODNET_SH")]
    pub podnet: PathBuf,
    /// The cluster DNS Service's address, the nameserver of pods (`ClusterFirst`).
    #[arg(long, default_value = "10.96.0.10")]
    pub cluster_dns: Ipv4Addr,
    /// The cluster domain: pods' search path and FQDNs.
    #[arg(long, default_value = "cluster.local")]
    pub cluster_domain: String,
    /// On node shutdown, the longest wait for a pod's processes before SIGKILL.
    #[arg(long, default_value_t = 10)]
    pub shutdown_grace_seconds: u64,
    /// Where images built on this machine are found (`index.tsv` and the archives it
    /// names; default: $ETCD_OPERATOR_CACHE/images, else ~/.cache/etcd-operator/images).
    #[arg(long)]
    pub image_dir: Option<PathBuf>,
    /// The port of the kubelet API (container logs), advertised in the Node's status.
    #[arg(long, default_value_t = 10250)]
    pub kubelet_port: u16,
    /// Who binds pending pods to nodes: this node itself (a one-node environment without
    /// a scheduler), or a kube-scheduler (several nodes).
    #[arg(long, value_enum, default_value_t = Binding::Node)]
    pub binding: Binding,
}

/// Who places pending pods on nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Binding {
    /// The node binds every pending pod its labels match, deciding claims' volume binding
    /// itself (`volume.kubernetes.io/selected-node`), as a lone scheduler would.
    Node,
    /// A kube-scheduler binds pods and selects claims' nodes; the node runs what is bound
    /// to it and provisions the volumes selected for it.
    Scheduler,
}

/// The image directory: the flag, else the project cache's.
pub fn image_dir(flag: Option<&std::path::Path>) -> PathBuf {
    if let Some(dir) = flag {
        return dir.to_path_buf();
    }
    let cache = std::env::var_os("ETCD_OPERATOR_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            PathBuf::from(home).join(".cache/etcd-operator")
        });
    cache.join("images")
}

/// Options of `kill`.
#[derive(Debug, Args)]
pub struct KillArgs {
    /// The node's state directory.
    #[arg(long, default_value = DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// The pod's namespace.
    #[arg(long, short = 'n', default_value = "default")]
    pub namespace: String,
    /// The pod's name (or `--all`).
    #[arg(long, required_unless_present = "all", conflicts_with = "all")]
    pub pod: Option<String>,
    /// Every pod of the node, in every namespace: with KILL, after the node process itself
    /// was killed, a power cut.
    #[arg(long)]
    pub all: bool,
    /// The signal to send (KILL, TERM, INT, 9, ...).
    #[arg(long, default_value = "KILL")]
    pub signal: String,
}

/// The etcd table entries: NODE_ETCD_BINARIES first, then the flags.
pub fn etcd_entries(env_value: Option<&str>, flags: &[String]) -> Vec<String> {
    env_value
        .into_iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .chain(flags.iter().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_flags_parse_with_defaults() {
        let cli = Cli::parse_from([
            "etcd-operator-node",
            "run",
            "--etcd-binary",
            "3.4.23=/usr/bin/etcd",
            "--etcd-binary",
            "3.5.21=/x/etcd",
            "--podnet",
            "/env/podnet.sh",
        ]);
        let Command::Run(args) = cli.command else {
            panic!("not run");
        };
        assert_eq!(args.node_name, "local-node");
        assert_eq!(args.etcd_binary.len(), 2);
        assert_eq!(args.podnet, PathBuf::from("/env/podnet.sh"));
        assert_eq!(args.cluster_dns, Ipv4Addr::new(10, 96, 0, 10));
        assert_eq!(args.cluster_domain, "cluster.local");
    }

    #[test]
    fn kill_defaults_to_sigkill() {
        let cli = Cli::parse_from(["etcd-operator-node", "kill", "--pod", "m1"]);
        let Command::Kill(args) = cli.command else {
            panic!("not kill");
        };
        assert_eq!(args.signal, "KILL");
        assert_eq!(args.namespace, "default");
    }

    #[test]
    fn env_entries_come_first_so_flags_override() {
        let entries = etcd_entries(Some("3.4.23=/a, 3.5.21=/b,"), &["3.4.23=/c".to_string()]);
        assert_eq!(entries, vec!["3.4.23=/a", "3.5.21=/b", "3.4.23=/c"]);
    }
}
