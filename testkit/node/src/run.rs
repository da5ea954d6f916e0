//! The `run` subcommand: connects, registers the Node, waits for its pod range, then runs
//! the heartbeat and the pod dispatcher until SIGINT/SIGTERM.

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Config};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cli::{Binding, RunArgs, etcd_entries};
use crate::ctx::NodeCtx;
use crate::dispatcher::Dispatcher;
use crate::etcfiles::ClusterDns;
use crate::images::{EtcdBinaries, sibling_tools};
use crate::imagestore::ImageStore;
use crate::launch::HostTools;
use crate::log::event;
use crate::logcap::LogBook;
use crate::podnet::{self, PodNetwork};
use crate::statedir::StateDir;
use crate::storage::Storage;
use crate::storage::controller::Provisioner;
use crate::{kubeletapi, nodereg, servingcert};

/// How long the node waits for the controller-manager to give it a pod range.
const POD_CIDR_TIMEOUT: Duration = Duration::from_secs(60);

/// The API client's configuration from a kubeconfig file, or the usual inference.
pub async fn config(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<Config> {
    Ok(match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?
        }
        None => Config::infer().await?,
    })
}

fn etcd_table(args: &RunArgs) -> anyhow::Result<EtcdBinaries> {
    let env = std::env::var("NODE_ETCD_BINARIES").ok();
    let entries = etcd_entries(env.as_deref(), &args.etcd_binary);
    let table = EtcdBinaries::parse(entries.iter().map(String::as_str), sibling_tools)
        .map_err(anyhow::Error::msg)?;
    for release in table.releases() {
        let server = release.server();
        let executable = std::fs::metadata(server)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false);
        if !executable {
            anyhow::bail!(
                "etcd {}: {} is not an executable file",
                release.version,
                server.display()
            );
        }
        let tools: Vec<String> = release
            .tools
            .iter()
            .map(|(name, path)| format!("{name}={}", path.display()))
            .collect();
        event!("etcd {}: {}", release.version, tools.join(" "));
    }
    if table.releases().next().is_none() {
        event!(
            "no etcd binaries configured (--etcd-binary VERSION=PATH): etcd images will fail with ErrImagePull"
        );
    }
    Ok(table)
}

/// Removes the state and the network namespace of pods that no longer exist (deleted
/// while the node was down); pods still bound here keep both.
async fn adopt_existing(ctx: &NodeCtx, network: &PodNetwork) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::all(ctx.client.clone());
    let params = ListParams::default().fields(&format!("spec.nodeName={}", ctx.node_name));
    let pods = api
        .list(&params)
        .await
        .context("listing pods bound to the node")?;
    let uids: HashSet<String> = pods
        .items
        .iter()
        .map(|pod| pod.metadata.uid.clone().unwrap_or_default())
        .collect();
    event!(
        "{} pod(s) already bound to node {}",
        pods.items.len(),
        ctx.node_name
    );
    for (dir, ns, name, uid) in ctx.state.all_pods() {
        if uids.contains(&uid) {
            continue;
        }
        dir.kill_live_processes();
        if let Err(e) = network.del(&uid).await {
            event!("cannot remove the network namespace of vanished pod {ns}/{name}: {e}");
        }
        match dir.remove() {
            Ok(()) => event!("removed state of vanished pod {ns}/{name} ({uid})"),
            Err(e) => event!("cannot remove {}: {e}", dir.path().display()),
        }
    }
    Ok(())
}

fn watch_signals(shutdown: CancellationToken) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    tokio::spawn(async move {
        let mut count = 0;
        loop {
            let name = tokio::select! {
                _ = int.recv() => "SIGINT",
                _ = term.recv() => "SIGTERM",
            };
            count += 1;
            if count == 1 {
                event!("{name}: shutting down (stopping pods' processes; pods stay in the API)");
                shutdown.cancel();
            } else {
                event!("{name} again: exiting at once");
                std::process::exit(130);
            }
        }
    });
    Ok(())
}

/// The `kubernetes` Service's ClusterIP and HTTPS port, which a kubelet gives containers
/// as `KUBERNETES_SERVICE_HOST`/`_PORT`.
async fn kubernetes_service(client: &Client) -> anyhow::Result<(String, u16)> {
    let service = Api::<Service>::namespaced(client.clone(), "default")
        .get("kubernetes")
        .await
        .context("reading the kubernetes Service")?;
    let spec = service.spec.unwrap_or_default();
    let host = spec
        .cluster_ip
        .filter(|ip| !ip.is_empty() && ip != "None")
        .context("the kubernetes Service has no ClusterIP")?;
    let ports = spec.ports.unwrap_or_default();
    let port = ports
        .iter()
        .find(|p| p.name.as_deref() == Some("https"))
        .or(ports.first())
        .context("the kubernetes Service has no port")?
        .port;
    Ok((host, u16::try_from(port)?))
}

/// The node's shared context: its tools, etcd binaries, images, state directory, API
/// client, the cluster's DNS and the `kubernetes` Service's address.
async fn node_ctx(args: &RunArgs, config: &Config) -> anyhow::Result<NodeCtx> {
    let tools = HostTools::find().map_err(anyhow::Error::msg)?;
    let etcd = etcd_table(args)?;
    std::fs::create_dir_all(&args.state_dir)
        .with_context(|| format!("creating {}", args.state_dir.display()))?;
    let state = StateDir::new(&args.state_dir);
    let image_dir = crate::cli::image_dir(args.image_dir.as_deref());
    event!(
        "images built here: {}",
        image_dir.join(crate::imagestore::INDEX_FILE).display()
    );
    let client = Client::try_from(config.clone())?;
    let (api_host, api_port) = kubernetes_service(&client).await?;
    Ok(NodeCtx {
        client,
        node_name: args.node_name.clone(),
        host_ip: "127.0.0.1".to_string(),
        images: ImageStore::new(image_dir, state.images().join("oci")),
        state,
        etcd,
        network: OnceLock::new(),
        dns: ClusterDns {
            server: args.cluster_dns,
            domain: args.cluster_domain.clone(),
        },
        tools,
        shutdown_grace: Duration::from_secs(args.shutdown_grace_seconds),
        api_host,
        api_port,
        logs: Arc::new(LogBook::default()),
        kubelet_port: args.kubelet_port,
        tokens: Mutex::new(Default::default()),
        volume_syncs: Mutex::new(Default::default()),
    })
}

/// The node's pod network, once the controller-manager has given the Node its pod range.
async fn pod_network(ctx: &NodeCtx, args: &RunArgs) -> anyhow::Result<PodNetwork> {
    let cidr = nodereg::wait_pod_cidr(ctx, POD_CIDR_TIMEOUT).await?;
    let index = podnet::node_index(&cidr).map_err(anyhow::Error::msg)?;
    event!(
        "pod range {cidr}: pod network node index {index} ({})",
        args.podnet.display()
    );
    Ok(PodNetwork::new(args.podnet.clone(), index))
}

/// The kubelet API (container logs): a serving certificate from the cluster's signer, then
/// HTTPS on the node's address, client certificates checked against the kubeconfig's CA.
async fn kubelet_api(
    ctx: &Arc<NodeCtx>,
    config: &Config,
    shutdown: CancellationToken,
) -> anyhow::Result<JoinHandle<()>> {
    let address: std::net::IpAddr = ctx.host_ip.parse().context("the node's address")?;
    let cert = servingcert::obtain(&ctx.client, &ctx.node_name, address)
        .await
        .context("obtaining the kubelet API's serving certificate")?;
    let cas = config
        .root_cert
        .clone()
        .context("the kubeconfig names no certificate authority to verify clients with")?;
    let tls = kubeletapi::tls_config(&cert, &cas)?;
    let at = std::net::SocketAddr::new(address, ctx.kubelet_port);
    kubeletapi::serve(ctx.clone(), at, tls, shutdown)
        .await
        .with_context(|| format!("serving the kubelet API on {at}"))
}

/// The pods the node watches: with a kube-scheduler binding them, only those bound to it
/// (a kubelet's `spec.nodeName` field selector: the API server sends no other pod's
/// changes to this node); binding them itself, every pod, the pending ones included.
fn pods_to_watch(binding: Binding, node_name: &str) -> watcher::Config {
    match binding {
        Binding::Scheduler => {
            watcher::Config::default().fields(&format!("spec.nodeName={node_name}"))
        }
        Binding::Node => watcher::Config::default(),
    }
}

/// Runs the node until SIGINT/SIGTERM.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = config(args.kubeconfig.as_deref()).await?;
    let ctx = Arc::new(node_ctx(&args, &config).await?);
    let client = ctx.client.clone();
    let shutdown = CancellationToken::new();
    let kubelet = kubelet_api(&ctx, &config, shutdown.clone()).await?;
    let registration = nodereg::register(&ctx)
        .await
        .context("registering the Node")?;
    let network = pod_network(&ctx, &args).await?;
    adopt_existing(&ctx, &network).await?;
    let _ = ctx.network.set(network);

    watch_signals(shutdown.clone())?;
    let pods = watcher(
        Api::<Pod>::all(client.clone()),
        pods_to_watch(args.binding, &args.node_name),
    )
    .default_backoff();
    let (storage, storage_tasks) = Storage::watch(&client, &shutdown);
    let provisioner = Provisioner::new(client.clone(), args.node_name.clone(), ctx.state.volumes());
    let provisioner = tokio::spawn(provisioner.run(storage.clone(), shutdown.clone()));
    let heartbeat = tokio::spawn(nodereg::heartbeat(
        ctx.clone(),
        registration,
        shutdown.clone(),
    ));
    event!(
        "node {} running (state {}, cluster DNS {}, kubernetes Service {}:{})",
        args.node_name,
        args.state_dir.display(),
        ctx.dns.server,
        ctx.api_host,
        ctx.api_port
    );
    Dispatcher::new(
        ctx.clone(),
        nodereg::node_labels(&args.node_name),
        (storage, args.binding),
        shutdown.clone(),
    )
    .run(pods)
    .await;
    let _ = provisioner.await;
    for task in storage_tasks {
        let _ = task.await;
    }
    let _ = heartbeat.await;
    let _ = kubelet.await;
    event!("node {} stopped", args.node_name);
    Ok(())
}

#[cfg(test)]
mod pod_watch_tests {
    use super::*;

    #[test]
    fn a_node_the_scheduler_binds_to_watches_only_its_own_pods() {
        let config = pods_to_watch(Binding::Scheduler, "local-node-1");
        assert_eq!(
            config.field_selector.as_deref(),
            Some("spec.nodeName=local-node-1")
        );
        assert_eq!(
            pods_to_watch(Binding::Node, "local-node-1").field_selector,
            None
        );
    }
}
