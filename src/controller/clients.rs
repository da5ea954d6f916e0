//! The operator's API clients and the watch plumbing its informers share: the three
//! clients and their timeouts, the watch configuration, what is trimmed from watched
//! objects, and the Event recorder.

use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::api::Api;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use slog::{Logger, warn};

use super::fence::Fence;
use super::fenced_client::FenceLayer;
use crate::Error;

/// Seconds the API server keeps one watch open before the watcher starts the next.
pub(super) const WATCH_TIMEOUT_S: u32 = 290;
/// Read timeout of the watch client: a watch may stay silent for its whole duration.
pub(super) const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(WATCH_TIMEOUT_S as u64 + 30);
/// Connect and write timeout of both clients.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Every watch's configuration: the server-side timeout of one watch.
pub(super) fn watch_config() -> watcher::Config {
    watcher::Config::default().timeout(WATCH_TIMEOUT_S)
}

/// Drops what the operator never reads from a watched object before it is kept or
/// handed on: its `managedFields` (a JSON tree per field manager, most of an object's
/// size in memory, and the informer caches hold every pod, Service, EndpointSlice,
/// budget and claim of every cluster). Nothing is written back from a cached object with
/// a PUT, and an absent `managedFields` in a write leaves the server's as they are.
pub(super) fn trim<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// The events of a watch on every `K` of `api`, each made an `E` by `map`; a watch error
/// is logged (naming `kind`) and skipped, the watcher retrying with its default backoff.
pub(super) fn logged_watch<K, E>(
    api: Api<K>,
    kind: &'static str,
    log: &Logger,
    map: fn(watcher::Event<K>) -> E,
) -> impl Stream<Item = E> + use<K, E>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    E: 'static,
{
    let log = log.clone();
    watcher(api, watch_config())
        .modify(trim)
        .default_backoff()
        .filter_map(move |item| {
            let log = log.clone();
            async move {
                match item {
                    Ok(event) => Some(map(event)),
                    Err(e) => {
                        warn!(log, "{} watch error", kind; "error" => %e);
                        None
                    }
                }
            }
        })
}

/// The Event recorder of this replica (`identity`), writing through the calls client.
pub(super) fn recorder(clients: &Clients, identity: &str) -> Recorder {
    let reporter = Reporter {
        controller: "etcd-operator".into(),
        instance: Some(identity.to_string()),
    };
    Recorder::new(clients.calls.clone(), reporter)
}

/// The API clients: one for calls (reads and writes that answer at once), its every write
/// behind the leader's fence; one for the Lease, which keeps the fence open and so cannot
/// be behind it; one for the informers' lists and watches.
pub(super) struct Clients {
    /// Reads and writes that answer at once, behind the fence.
    pub(super) calls: Client,
    /// The Lease's client, outside the fence.
    pub(super) lease: Client,
    /// The informers' lists and watches.
    pub(super) watches: Client,
}

/// `config` with the operator's timeouts: connect and write, and `read_timeout`.
pub(super) fn with_timeouts(mut config: kube::Config, read_timeout: Duration) -> kube::Config {
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.write_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(read_timeout);
    // The read timeout counts from each request, not from when a pooled connection idled.
    config.reset_reader_on_write = true;
    config
}

/// The three API clients, from the in-cluster (or local) configuration.
pub(super) async fn clients(api_timeout: Duration, fence: &Fence) -> Result<Clients, Error> {
    let config = kube::Config::infer().await.map_err(Error::KubeConfig)?;
    let plain = |read_timeout| {
        Client::try_from(with_timeouts(config.clone(), read_timeout)).map_err(Error::KubeClient)
    };
    let calls = kube::client::ClientBuilder::try_from(with_timeouts(config.clone(), api_timeout))
        .map_err(Error::KubeClient)?
        .with_layer(&FenceLayer::new(fence.clone(), api_timeout))
        .build();
    Ok(Clients {
        calls,
        lease: plain(api_timeout)?,
        watches: plain(WATCH_READ_TIMEOUT)?,
    })
}

/// The API of every `K` in `namespace`, or in all namespaces when it is empty.
pub(super) fn api<K>(client: &Client, namespace: &str) -> Api<K>
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
