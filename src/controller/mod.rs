//! Runs the operator: leader election, informer caches, the Supervisor fed by the
//! EtcdCluster watch stream, the Backup supervisor fed by the EtcdBackup watch stream, the
//! Restore actor fed by the EtcdRestore watch stream, and the HTTP endpoints.
//!
//! Every API call has a deadline: the clients have connect, read and write timeouts (one
//! client for calls, one with a read timeout longer than a watch lasts for the informers),
//! and Lease calls have their own, shorter one. Every write of the actors passes the
//! leader's fence (see [`fence`]).

mod backups;
pub mod cache_metrics;
mod clients;
pub mod fence;
pub mod fenced_client;
mod leader;
pub mod ownership;
mod restores;
mod settings;
mod watch;
mod wiring;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use actix::{Actor, AsyncContext};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use prometheus_client::registry::Registry;
use serde::de::DeserializeOwned;
use slog::{Logger, info, warn};

use etcd_operator_actors::metrics::Telemetry;
use etcd_operator_actors::supervisor::{ClusterEvent, PodChanged, Supervisor};
use etcd_operator_core::topology::Topology;

use cache_metrics::CacheMetrics;
use clients::{Clients, api, clients, recorder, trim, watch_config};
use fence::Fence;
pub(crate) use leader::ElectionView;
use leader::{LeaderElection, RENEW_DEADLINE};
use ownership::{Controller, is_ours, keep_ours};
pub use settings::{LeaseSettings, Settings};
use watch::watch_event;
use wiring::{FencedWiring, KubeWiring};

use crate::Error;
use crate::api::EtcdCluster;
use crate::api::images::ImagePolicy;
use crate::backup::metrics::BackupMetrics;
use crate::http::access::AccessGate;
use crate::http::review::ApiServerReviewer;
use crate::http::serving::{CertSource, ServingCert};
use crate::http::stream_slots::StreamSlots;
use crate::kube_api::{Caches, ClusterDns, Identities};
use crate::resources::labels::{CLUSTER_LABEL, MANAGED_BY_LABEL, MANAGER};

/// Keeps a cache of the `K` objects matching `labels` that are ours (controlled as
/// `controller` says, see [`ownership`]) up to date in the background, calling
/// `on_change` with every one of ours the watch reports changed or deleted.
fn cache<K>(
    api: Api<K>,
    labels: &str,
    controller: Controller,
    size: prometheus_client::metrics::gauge::Gauge,
    log: &Logger,
    on_change: impl Fn(&K) + Send + 'static,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store();
    let watch = watcher(api, watch_config().labels(labels))
        .modify(trim)
        .filter_map(move |item| {
            std::future::ready(match item {
                Ok(event) => keep_ours(event, controller).map(Ok),
                Err(e) => Some(Err(e)),
            })
        });
    let stream = reflector::reflector(writer, watch).default_backoff();
    let log = log.clone();
    let kept = store.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            size.set(kept.len() as i64);
            match item {
                Ok(watcher::Event::Apply(object) | watcher::Event::Delete(object))
                    if is_ours(&object, controller) =>
                {
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
/// The cluster an object of the operator's belongs to, by its cluster label.
fn labelled_cluster(object: &impl ResourceExt) -> Option<Topology> {
    let cluster = object.labels().get(CLUSTER_LABEL)?;
    Some(Topology::new(&object.namespace()?, cluster))
}

/// A change handler that wakes the Cluster actor of the object's cluster (by its label).
/// Nudges are hints: when the channel is full, the next tick sees the change anyway.
fn nudger<K: ResourceExt>(
    nudges: tokio::sync::mpsc::Sender<PodChanged>,
) -> impl Fn(&K) + Send + 'static {
    move |object| {
        if let Some(cluster) = labelled_cluster(object) {
            let _ = nudges.try_send(PodChanged(cluster));
        }
    }
}

fn supervisor_events(
    api: Api<EtcdCluster>,
    writer: reflector::store::Writer<EtcdCluster>,
    images: ImagePolicy,
    log: Logger,
) -> impl Stream<Item = ClusterEvent> {
    reflector::reflector(writer, watcher(api, watch_config()).modify(trim))
        .default_backoff()
        .filter_map(move |item| {
            let log = log.clone();
            let images = images.clone();
            async move {
                match item {
                    Ok(event) => Some(watch_event(event, &images)),
                    Err(e) => {
                        warn!(log, "EtcdCluster watch error"; "error" => %e);
                        None
                    }
                }
            }
        })
}

/// The informer caches a replica keeps warm whether or not it leads, and the pod
/// changes that wake Cluster actors.
struct WarmCaches {
    pods: Store<Pod>,
    services: Store<Service>,
    budgets: Store<PodDisruptionBudget>,
    claims: Store<PersistentVolumeClaim>,
    slices: Store<EndpointSlice>,
    nudged: tokio::sync::mpsc::Receiver<PodChanged>,
}

/// Starts the caches of the operator's objects (pods, Services, PodDisruptionBudgets,
/// PersistentVolumeClaims, and the EndpointSlices of its Services) and waits until all
/// have synced.
async fn warm_caches(
    client: &Client,
    namespace: &str,
    sizes: &CacheMetrics,
    log: &Logger,
) -> Result<WarmCaches, Error> {
    let caches = start_caches(client, namespace, sizes, log);
    wait_until_synced(&caches).await?;
    info!(
        log,
        "pod, Service, PodDisruptionBudget, PersistentVolumeClaim and EndpointSlice caches synced"
    );
    Ok(caches)
}

/// Starts the caches of the operator's objects, each waking the Cluster actors of the
/// objects it sees change, without waiting for them to sync.
fn start_caches(
    client: &Client,
    namespace: &str,
    sizes: &CacheMetrics,
    log: &Logger,
) -> WarmCaches {
    let selector = format!("app=etcd,{MANAGED_BY_LABEL}={MANAGER}");
    // Pod changes wake their Cluster actor at once (a member that died is seen without
    // waiting for the next interval). Nudges are hints: when the channel is full, the
    // next tick sees the change anyway.
    let (nudges, nudged) = tokio::sync::mpsc::channel::<PodChanged>(1024);
    WarmCaches {
        pods: cache(
            api(client, namespace),
            &selector,
            Controller::EtcdCluster,
            sizes.of("Pod"),
            log,
            nudger(nudges.clone()),
        ),
        // A Service, PodDisruptionBudget or claim changed or deleted by someone else is a
        // reason to look too: a settled cluster's actor ticks only every idle interval.
        services: cache(
            api(client, namespace),
            &selector,
            Controller::EtcdCluster,
            sizes.of("Service"),
            log,
            nudger(nudges.clone()),
        ),
        budgets: cache(
            api(client, namespace),
            &selector,
            Controller::EtcdCluster,
            sizes.of("PodDisruptionBudget"),
            log,
            nudger(nudges.clone()),
        ),
        claims: cache(
            api(client, namespace),
            &selector,
            Controller::EtcdCluster,
            sizes.of("PersistentVolumeClaim"),
            log,
            nudger(nudges.clone()),
        ),
        // A member's address published in its Service's EndpointSlices (which carry the
        // Service's labels) lets the next member join: that wakes its Cluster actor too.
        slices: cache(
            api(client, namespace),
            &selector,
            Controller::NamedService,
            sizes.of("EndpointSlice"),
            log,
            nudger(nudges),
        ),
        nudged,
    }
}

/// Waits until every cache of `caches` has synced, one after the other.
async fn wait_until_synced(caches: &WarmCaches) -> Result<(), Error> {
    let synced = |cache| move |source| Error::CacheSync { cache, source };
    caches
        .pods
        .wait_until_ready()
        .await
        .map_err(synced("pod"))?;
    caches
        .services
        .wait_until_ready()
        .await
        .map_err(synced("service"))?;
    caches
        .budgets
        .wait_until_ready()
        .await
        .map_err(synced("PodDisruptionBudget"))?;
    caches
        .claims
        .wait_until_ready()
        .await
        .map_err(synced("PersistentVolumeClaim"))?;
    caches
        .slices
        .wait_until_ready()
        .await
        .map_err(synced("EndpointSlice"))?;
    Ok(())
}

/// The cluster DNS, when the operator runs in a pod whose resolver names it and the DNS
/// answers the publication check as it must (see [`ClusterDns`]); otherwise a member's
/// address counts as published once the EndpointSlices list it.
async fn cluster_dns(log: &Logger) -> Option<Arc<ClusterDns>> {
    let text = std::fs::read_to_string("/etc/resolv.conf").ok()?;
    let dns = ClusterDns::from_resolv_conf(&text)?;
    match dns.answers_as_needed().await {
        Ok(true) => {
            info!(log, "members join once the cluster DNS serves their names"; "dns" => ?dns);
            Some(Arc::new(dns))
        }
        Ok(false) => {
            warn!(log, "the cluster DNS does not answer the publication check (a name that exists is a miss): joins follow the EndpointSlices alone"; "dns" => ?dns);
            None
        }
        Err(e) => {
            warn!(log, "the cluster DNS did not answer the publication check: joins follow the EndpointSlices alone"; "error" => %e);
            None
        }
    }
}

/// Starts the Supervisor, fed by the EtcdCluster watch, with every write behind `fence`.
fn start_supervisor(
    settings: &Settings,
    clients: &Clients,
    caches: WarmCaches,
    dns: Option<Arc<ClusterDns>>,
    fence: &Fence,
    telemetry: Telemetry,
    log: &Logger,
) -> actix::Addr<Supervisor> {
    let WarmCaches {
        pods,
        services,
        budgets,
        claims,
        slices,
        mut nudged,
    } = caches;
    // What a standby was nudged about is seen by the first tick of every cluster anyway.
    while nudged.try_recv().is_ok() {}
    let (clusters, writer) = reflector::store();
    let events = supervisor_events(
        api(&clients.watches, &settings.namespace),
        writer,
        settings.images.clone(),
        log.clone(),
    );
    let kube = KubeWiring {
        client: clients.calls.clone(),
        caches: Caches {
            clusters,
            pods,
            services,
            budgets,
            claims,
            slices,
        },
        recorder: recorder(clients, &settings.identity),
        etcd_timeout: settings.etcd_timeout,
        identities: Identities::default(),
        operator_image: settings.operator_image.clone(),
        dns,
    };

    let wiring = Arc::new(FencedWiring::new(Arc::new(kube), fence.clone()));
    let config = settings.cluster;
    let log = log.clone();
    Supervisor::create(move |ctx| {
        ctx.add_stream(events);
        ctx.add_stream(tokio_stream::wrappers::ReceiverStream::new(nudged));
        Supervisor::new(wiring, config, telemetry, &log)
    })
}

/// Resolves on SIGINT or SIGTERM.
fn shutdown_signal(log: &Logger) -> Result<impl Future<Output = ()> + use<>, Error> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).map_err(Error::Signals)?;
    let log = log.clone();
    Ok(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => info!(log, "interrupted; stopping"),
            _ = terminate.recv() => info!(log, "terminated; stopping"),
        }
    })
}

/// Serves HTTPS in the background, and re-reads certificate files as they change.
async fn start_http(
    settings: &Settings,
    state: crate::http::HttpState,
    log: &Logger,
) -> Result<(), Error> {
    let listen_error = |source| Error::Listen {
        address: settings.listen,
        source,
    };
    let certificate = ServingCert::load(settings.serving.clone())
        .map_err(|e| listen_error(crate::http::ServeError::Certificate(e)))?;
    let server = crate::http::serve(settings.listen, &certificate, state)
        .await
        .map_err(listen_error)?;
    let source = match &settings.serving {
        CertSource::Files { cert, .. } => cert.display().to_string(),
        CertSource::SelfSigned(_) => "self-signed".to_string(),
    };
    info!(log, "serving HTTPS"; "address" => %settings.listen, "certificate" => source);
    tokio::spawn(server);
    if !matches!(settings.serving, CertSource::Files { .. }) {
        return Ok(());
    }
    let log = log.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(crate::http::serving::RELOAD_INTERVAL).await;
            match certificate.reload() {
                Ok(true) => info!(log, "serving a renewed certificate"),
                Ok(false) => {}
                Err(e) => warn!(log, "keeping the served certificate"; "error" => %e),
            }
        }
    });
    Ok(())
}

/// A registry of the operator's metrics: the actors', the backups' and the caches' sizes.
fn metrics_registry(
    telemetry: &Telemetry,
    backup_metrics: &BackupMetrics,
    cache_sizes: &CacheMetrics,
) -> Registry {
    let mut registry = Registry::default();
    telemetry.metrics.register(&mut registry);
    backup_metrics.register(&mut registry);
    cache_sizes.register(&mut registry);
    registry
}

/// The leader election as this replica sees it, and the fence of its writes: closed
/// until the Lease is held when electing, always open otherwise.
fn election_view_and_fence(settings: &Settings, telemetry: &Telemetry) -> (ElectionView, Fence) {
    let identity = &settings.identity;
    if settings.lease.elect {
        let lease = format!("{}/{}", settings.lease.namespace, settings.lease.name);
        let view = ElectionView::new(telemetry, &lease, identity);
        (view, Fence::new(RENEW_DEADLINE))
    } else {
        let view = ElectionView::without_election(telemetry, identity);
        (view, Fence::always_open())
    }
}

/// What the HTTP endpoints serve and whom they let read it.
fn http_state(
    settings: &Settings,
    telemetry: &Telemetry,
    registry: Registry,
    election: ElectionView,
    caches_synced: Arc<AtomicBool>,
    clients: &Clients,
) -> crate::http::HttpState {
    crate::http::HttpState {
        hub: telemetry.hub.clone(),
        registry: Arc::new(registry),
        election,
        caches_synced,
        access: Arc::new(AccessGate::new(Arc::new(ApiServerReviewer::new(
            clients.lease.clone(),
        )))),
        stream_slots: StreamSlots::new(settings.debug_stream_per_identity),
    }
}

/// The actors only the Lease holder runs, kept alive while it leads.
struct LeaderActors {
    /// The Supervisor of the EtcdClusters.
    _supervisor: actix::Addr<Supervisor>,
    /// The Backup supervisor of the EtcdBackups.
    _backups: actix::Addr<crate::backup::supervisor::BackupSupervisor>,
    /// The Restore actor of the EtcdRestores.
    _restores: actix::Addr<crate::restore::supervisor::RestoreSupervisor>,
}

/// Starts the Supervisor, the Backup supervisor and the Restore actor, every write
/// behind `fence`, with the operator's own image resolved (see
/// [`restores::operator_image`]).
async fn start_leading(
    settings: &Settings,
    clients: &Clients,
    caches: WarmCaches,
    fence: &Fence,
    telemetry: Telemetry,
    backup_metrics: BackupMetrics,
    log: &Logger,
) -> LeaderActors {
    let settings = Settings {
        operator_image: restores::operator_image(settings, &clients.calls, log).await,
        ..settings.clone()
    };
    let identity = &settings.identity;
    // Backups dial members at their pods' addresses, as the Cluster actors do.
    let pods = caches.pods.clone();
    let dns = cluster_dns(log).await;
    LeaderActors {
        _supervisor: start_supervisor(&settings, clients, caches, dns, fence, telemetry, log),
        _backups: backups::start_backups(
            &settings,
            clients,
            pods,
            identity,
            fence,
            backup_metrics,
            log,
        ),
        _restores: restores::start_restores(&settings, clients, identity, fence, log),
    }
}

/// Runs the operator until it loses leadership or is told to stop.
///
/// A replica keeps its caches warm and reports ready while it waits for the Lease; only
/// the Lease holder runs the Supervisor. It exits (with an error) when its fence closes,
/// and on SIGTERM closes the fence and then gives the Lease back.
pub async fn run(settings: Settings, log: Logger) -> Result<(), Error> {
    let telemetry = Telemetry::default();
    let backup_metrics = BackupMetrics::default();
    let cache_sizes = CacheMetrics::default();
    let registry = metrics_registry(&telemetry, &backup_metrics, &cache_sizes);
    let (view, fence) = election_view_and_fence(&settings, &telemetry);
    let clients = clients(settings.api_timeout, &fence).await?;
    let caches_synced = Arc::new(AtomicBool::new(false));
    let state = http_state(
        &settings,
        &telemetry,
        registry,
        view.clone(),
        caches_synced.clone(),
        &clients,
    );
    start_http(&settings, state, &log).await?;
    let shutdown = shutdown_signal(&log)?;
    tokio::pin!(shutdown);
    let mut election = LeaderElection::new(
        clients.lease.clone(),
        &settings.lease.namespace,
        &settings.lease.name,
        &settings.identity,
        view,
        &log,
    );
    let caches = tokio::select! {
        caches = warm_caches(&clients.watches, &settings.namespace, &cache_sizes, &log) => caches?,
        () = &mut shutdown => return Ok(()),
    };
    caches_synced.store(true, Ordering::SeqCst);
    if settings.lease.elect {
        let held = tokio::select! {
            held = election.acquire(&fence) => held,
            () = &mut shutdown => return Ok(()),
        };
        if !held {
            return Err(Error::LeaseTooLate);
        }
    }
    let _actors = start_leading(
        &settings,
        &clients,
        caches,
        &fence,
        telemetry,
        backup_metrics,
        &log,
    )
    .await;
    tokio::select! {
        reason = lead(&election, &fence, settings.lease.elect) => {
            return Err(Error::StoppedLeading(reason));
        }
        () = &mut shutdown => {}
    }
    fence.close_now("the operator is stopping");
    if settings.lease.elect {
        election.release().await;
    }
    Ok(())
}

/// Keeps the Lease until the fence closes; resolves with the reason. Without leader
/// election, never resolves.
async fn lead(election: &LeaderElection, fence: &Fence, leader_elect: bool) -> String {
    if !leader_elect {
        return futures::future::pending().await;
    }
    election.keep(fence).await
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

    use super::*;
    use crate::logging::kept::Kept;

    /// An API server that accepts every request and never answers it.
    fn silent_api_server() -> kube::Client {
        let service = tower::service_fn(|_request| {
            futures::future::pending::<
                Result<axum::http::Response<kube::client::Body>, std::convert::Infallible>,
            >()
        });
        kube::Client::new(service, "default")
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_whose_fence_another_write_closed_says_that_it_stopped_leading() {
        let kept = Kept::default();
        let log = Logger::root(kept.clone(), slog::o!());
        let view = ElectionView::new(&Telemetry::default(), "ns/lease", "me");
        view.record("me", true);
        let election =
            LeaderElection::new(silent_api_server(), "ns", "lease", "me", view.clone(), &log);
        let fence = Fence::new(leader::RENEW_DEADLINE);
        assert!(fence.renewed(tokio::time::Instant::now()));
        // Another write closes the fence while the renewal hangs (as a status write past
        // the renew deadline does).
        let writer = fence.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            writer.close_now("a write found the Lease lost");
        });
        let reason = lead(&election, &fence, true).await;
        assert_eq!(reason, "a write found the Lease lost");
        let lines = kept.lines();
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("WARN stopped leading") && l.contains("Lease lost")),
            "{lines:#?}"
        );
        assert!(!view.is_leading());
    }

    #[test]
    fn a_watched_object_is_kept_without_its_managed_fields_and_with_everything_else() {
        let meta = ObjectMeta {
            name: Some("demo-abcde".into()),
            labels: Some([("app".to_string(), "etcd".to_string())].into()),
            annotations: Some([("note".to_string(), "kept".to_string())].into()),
            managed_fields: Some(vec![ManagedFieldsEntry {
                manager: Some("etcd-operator".into()),
                ..ManagedFieldsEntry::default()
            }]),
            ..ObjectMeta::default()
        };
        let mut pod = Pod {
            metadata: meta.clone(),
            ..Pod::default()
        };
        trim(&mut pod);
        assert_eq!(
            pod.metadata,
            ObjectMeta {
                managed_fields: None,
                ..meta
            }
        );
    }
}
