//! Runs the operator: leader election, informer caches, the Supervisor fed by the
//! EtcdCluster watch stream, and the HTTP endpoints.

mod leader;
mod watch;
mod wiring;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use actix::{Actor, AsyncContext};
use anyhow::Context as _;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::Api;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use prometheus_client::registry::Registry;
use serde::de::DeserializeOwned;
use slog::{Logger, info, warn};

use etcd_operator_actors::metrics::Telemetry;
use etcd_operator_actors::supervisor::{PodChanged, Supervisor, WatchEvent};
use etcd_operator_actors::topology::Topology;

pub use leader::{LeaderElection, can_take};
pub use watch::watch_event;
pub use wiring::KubeWiring;

use crate::api::EtcdCluster;
use crate::cli::RunArgs;
use crate::kube_api::Caches;
use crate::resources::labels::{CLUSTER_LABEL, MANAGED_BY_LABEL, MANAGER};

fn api<K>(client: &Client, namespace: &str) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    if namespace.is_empty() {
        Api::all(client.clone())
    } else {
        Api::namespaced(client.clone(), namespace)
    }
}

/// Keeps a cache of `K` objects matching `labels` up to date in the background, calling
/// `on_change` with every object the watch reports changed or deleted.
fn cache<K>(
    api: Api<K>,
    labels: &str,
    log: &Logger,
    on_change: impl Fn(&K) + Send + 'static,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default().labels(labels)),
    )
    .default_backoff();
    let log = log.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            match item {
                Ok(watcher::Event::Apply(object) | watcher::Event::Delete(object)) => {
                    on_change(&object)
                }
                Ok(_) => {}
                Err(e) => {
                    warn!(log, "watch error"; "kind" => K::kind(&Default::default()).to_string(), "error" => %e)
                }
            }
        }
    });
    store
}

/// The cluster a member pod belongs to.
fn pod_cluster(pod: &Pod) -> Option<Topology> {
    let cluster = pod.labels().get(CLUSTER_LABEL)?;
    Some(Topology::new(&pod.namespace()?, cluster))
}

fn supervisor_events(
    api: Api<EtcdCluster>,
    writer: reflector::store::Writer<EtcdCluster>,
    log: Logger,
) -> impl Stream<Item = WatchEvent> {
    reflector::reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .filter_map(move |item| {
            let log = log.clone();
            async move {
                match item {
                    Ok(event) => Some(watch_event(event)),
                    Err(e) => {
                        warn!(log, "EtcdCluster watch error"; "error" => %e);
                        None
                    }
                }
            }
        })
}

/// Runs the operator until it loses leadership or is told to stop.
pub async fn run(args: RunArgs, log: Logger) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("no Kubernetes configuration (in-cluster or KUBECONFIG)")?;
    let telemetry = Telemetry::default();
    let mut registry = Registry::default();
    telemetry.metrics.register(&mut registry);
    let leading = Arc::new(AtomicBool::new(false));
    let server = crate::http::serve(
        args.listen,
        crate::http::HttpState {
            hub: telemetry.hub.clone(),
            registry: Arc::new(registry),
            leading: leading.clone(),
        },
    )
    .await
    .with_context(|| format!("cannot listen on {}", args.listen))?;
    info!(log, "serving HTTP"; "address" => %args.listen);
    tokio::spawn(server);

    let identity = args.identity.clone().unwrap_or_else(|| {
        std::env::var("HOSTNAME")
            .unwrap_or_else(|_| format!("etcd-operator-{}", std::process::id()))
    });
    let election = LeaderElection::new(
        client.clone(),
        &args.lease_namespace,
        &args.lease_name,
        &identity,
        &log,
    );
    if args.leader_elect {
        election.acquire().await;
    }
    leading.store(true, Ordering::SeqCst);

    let selector = format!("app=etcd,{MANAGED_BY_LABEL}={MANAGER}");
    // Pod changes wake their Cluster actor at once (a member that died is seen without
    // waiting for the next interval). Nudges are hints: when the channel is full, the
    // next tick sees the change anyway.
    let (nudges, nudged) = tokio::sync::mpsc::channel::<PodChanged>(1024);
    let pods: Store<Pod> = cache(api(&client, &args.namespace), &selector, &log, move |pod| {
        if let Some(cluster) = pod_cluster(pod) {
            let _ = nudges.try_send(PodChanged(cluster));
        }
    });
    let services: Store<Service> = cache(api(&client, &args.namespace), &selector, &log, |_| {});
    pods.wait_until_ready().await.context("pod cache")?;
    services.wait_until_ready().await.context("service cache")?;
    info!(log, "pod and service caches synced");

    let (clusters, writer) = reflector::store();
    let events = supervisor_events(api(&client, &args.namespace), writer, log.clone());
    let reporter = Reporter {
        controller: "etcd-operator".into(),
        instance: Some(identity.clone()),
    };
    let wiring = Arc::new(KubeWiring {
        client: client.clone(),
        caches: Caches {
            clusters,
            pods,
            services,
        },
        recorder: Recorder::new(client.clone(), reporter),
        etcd_timeout: args.cluster_config().etcd_timeout,
    });
    let config = args.cluster_config();
    let sup_log = log.clone();
    let _supervisor = Supervisor::create(move |ctx| {
        ctx.add_stream(events);
        ctx.add_stream(tokio_stream::wrappers::ReceiverStream::new(nudged));
        Supervisor::new(wiring, config, telemetry, &sup_log)
    });

    let lost = async {
        if args.leader_elect {
            election.keep().await;
        } else {
            futures::future::pending::<()>().await;
        }
    };
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        () = lost => anyhow::bail!("lost the leader lease; exiting so a fresh replica takes over"),
        _ = tokio::signal::ctrl_c() => info!(log, "interrupted; stopping"),
        _ = terminate.recv() => info!(log, "terminated; stopping"),
    }
    Ok(())
}
