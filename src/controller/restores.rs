//! Starts the Restore supervisor, fed by the EtcdRestore watch, once this replica leads; and
//! finds the operator's own image, which a restoring seed's init containers run.

use std::sync::Arc;

use actix::{Actor, AsyncContext};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use slog::{Logger, info, warn};

use crate::api::restore::EtcdRestore;
use crate::backup::store::StoreTimeouts;
use crate::restore::adapter::KubeRestoreApi;
use crate::restore::supervisor::{RestoreEvent, RestoreSupervisor};

use super::Settings;
use super::clients::{Clients, api, logged_watch, recorder};
use super::fence::Fence;
use super::watch::{object_key, roster_event};

/// Starts the Restore supervisor: every EtcdRestore's steps, each write behind `fence`.
pub(super) fn start_restores(
    settings: &Settings,
    clients: &Clients,
    identity: &str,
    fence: &Fence,
    log: &Logger,
) -> actix::Addr<RestoreSupervisor> {
    let events = logged_watch::<EtcdRestore, RestoreEvent>(
        api(&clients.watches, &settings.namespace),
        "EtcdRestore",
        log,
        |event| roster_event(event, object_key, Box::new),
    );
    let recorder = recorder(clients, identity);
    let kube = Arc::new(KubeRestoreApi::new(
        clients.calls.clone(),
        recorder,
        fence.clone(),
    ));
    let log = log.clone();
    RestoreSupervisor::create(move |ctx| {
        ctx.add_stream(events);
        RestoreSupervisor::new(kube, StoreTimeouts::default(), &log)
    })
}

/// The operator's own image: as configured (`--operator-image`), else read from its own
/// pod (`POD_NAME` in `POD_NAMESPACE`: the image of its container `operator`, or of its
/// only container). `None` when neither works: restores then fail with that reason.
pub(super) async fn operator_image(
    settings: &Settings,
    client: &Client,
    log: &Logger,
) -> Option<String> {
    if let Some(image) = settings.operator_image.clone().filter(|i| !i.is_empty()) {
        return Some(image);
    }
    let (Ok(name), Ok(namespace)) = (std::env::var("POD_NAME"), std::env::var("POD_NAMESPACE"))
    else {
        warn!(
            log,
            "the operator's image is unknown (no --operator-image, no POD_NAME and POD_NAMESPACE): restores cannot run"
        );
        return None;
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    match pods.get(&name).await {
        Ok(pod) => {
            let containers = pod.spec.map(|s| s.containers).unwrap_or_default();
            let image = containers
                .iter()
                .find(|c| c.name == "operator")
                .or(containers.first().filter(|_| containers.len() == 1))
                .and_then(|c| c.image.clone());
            info!(log, "the operator's image, for restores"; "image" => image.as_deref().unwrap_or("unknown"));
            image
        }
        Err(e) => {
            warn!(log, "could not read the operator's own pod for its image: restores cannot run"; "error" => %e);
            None
        }
    }
}
