//! The `run` subcommand: connects, registers the Node, then runs the heartbeat, the pod
//! dispatcher, the Service watch and the hosts block until SIGINT/SIGTERM.

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Config};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cli::{RunArgs, etcd_entries};
use crate::ctx::NodeCtx;
use crate::dispatcher::Dispatcher;
use crate::images::{EtcdBinaries, sibling_tools};
use crate::imagestore::ImageStore;
use crate::ipam::IpPool;
use crate::log::event;
use crate::logcap::LogBook;
use crate::statedir::StateDir;
use crate::storage::Storage;
use crate::storage::controller::Provisioner;
use crate::{hosts, hostsync, kubeletapi, launch, nodereg, servingcert};

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

/// Reserves the addresses of pods already bound here and removes the state of pods that
/// no longer exist.
async fn adopt_existing(ctx: &NodeCtx) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::all(ctx.client.clone());
    let params = ListParams::default().fields(&format!("spec.nodeName={}", ctx.node_name));
    let pods = api
        .list(&params)
        .await
        .context("listing pods bound to the node")?;
    let mut uids = HashSet::new();
    {
        let mut pool = ctx.ips.lock().unwrap_or_else(|e| e.into_inner());
        for pod in &pods.items {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            if let Some(ip) = pod
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.as_deref())
                .and_then(|ip| ip.parse().ok())
            {
                pool.reserve(&uid, ip);
            }
            uids.insert(uid);
        }
    }
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

/// The node's shared context: its tools, etcd binaries, images, state directory and API
/// client; the hosts file copied for containers rooted in their image.
async fn node_ctx(args: &RunArgs, config: &Config) -> anyhow::Result<NodeCtx> {
    let unshare = launch::find_program("unshare")
        .context("util-linux `unshare` not found in PATH (apt-get install util-linux)")?;
    let etcd = etcd_table(args)?;
    std::fs::create_dir_all(&args.state_dir)
        .with_context(|| format!("creating {}", args.state_dir.display()))?;
    let state = StateDir::new(&args.state_dir);
    let hosts_dir = args.state_dir.join("etc");
    hosts::mirror(&args.hosts_file, &hosts_dir).with_context(|| {
        format!(
            "copying {} to {}",
            args.hosts_file.display(),
            hosts_dir.display()
        )
    })?;
    let image_dir = crate::cli::image_dir(args.image_dir.as_deref());
    event!(
        "images built here: {}",
        image_dir.join(crate::imagestore::INDEX_FILE).display()
    );
    let api_host = config
        .cluster_url
        .host()
        .unwrap_or("127.0.0.1")
        .trim_matches(['[', ']'])
        .to_string();
    let api_port = config.cluster_url.port_u16().unwrap_or(443);
    Ok(NodeCtx {
        client: Client::try_from(config.clone())?,
        node_name: args.node_name.clone(),
        host_ip: "127.0.0.1".to_string(),
        images: ImageStore::new(image_dir, state.images().join("oci")),
        state,
        etcd,
        ips: Mutex::new(IpPool::new(args.pod_ip_range)),
        unshare,
        shutdown_grace: Duration::from_secs(args.shutdown_grace_seconds),
        api_host,
        api_port,
        logs: Arc::new(LogBook::default()),
        hosts_dir,
        kubelet_port: args.kubelet_port,
        tokens: Mutex::new(Default::default()),
    })
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

/// Watches Services cluster-wide into a store, notifying `changed` on every event.
fn watch_services(
    client: Client,
    shutdown: CancellationToken,
    changed: Arc<Notify>,
) -> (Store<Service>, JoinHandle<()>) {
    let (store, writer) = reflector::store::<Service>();
    let services = reflector(
        writer,
        watcher(Api::<Service>::all(client), watcher::Config::default()),
    )
    .default_backoff();
    let task = tokio::spawn(async move {
        let mut services = std::pin::pin!(services);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                ev = services.next() => match ev {
                    Some(Ok(_)) => changed.notify_one(),
                    Some(Err(e)) => event!("service watch error (retrying): {e}"),
                    None => return,
                }
            }
        }
    });
    (store, task)
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
    adopt_existing(&ctx).await?;

    watch_signals(shutdown.clone())?;
    let changed = Arc::new(Notify::new());
    let (service_store, service_task) =
        watch_services(client.clone(), shutdown.clone(), changed.clone());
    let (pod_store, pod_writer) = reflector::store::<Pod>();
    let pods = reflector(
        pod_writer,
        watcher(Api::<Pod>::all(client.clone()), watcher::Config::default()),
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
    let hosts = tokio::spawn(hostsync::run(
        args.node_name.clone(),
        args.hosts_file.clone(),
        ctx.hosts_dir.clone(),
        pod_store,
        service_store,
        changed.clone(),
        shutdown.clone(),
    ));
    event!(
        "node {} running (state {}, hosts {}, pod IPs {})",
        args.node_name,
        args.state_dir.display(),
        args.hosts_file.display(),
        args.pod_ip_range
    );
    Dispatcher::new(
        ctx.clone(),
        nodereg::node_labels(&args.node_name),
        storage,
        shutdown.clone(),
    )
    .run(pods, changed)
    .await;
    let _ = provisioner.await;
    for task in storage_tasks {
        let _ = task.await;
    }
    let _ = hosts.await;
    let _ = heartbeat.await;
    let _ = service_task.await;
    let _ = kubelet.await;
    event!("node {} stopped", args.node_name);
    Ok(())
}
