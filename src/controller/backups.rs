//! Starts the Backup supervisor, fed by the EtcdBackup watch, once this replica leads.

use std::sync::Arc;

use actix::{Actor, AsyncContext};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::Store;
use slog::Logger;

use crate::api::backup::EtcdBackup;
use crate::backup::actor::{BackupConfig, BackupDeps};
use crate::backup::adapter::KubeBackupApi;
use crate::backup::metrics::BackupMetrics;
use crate::backup::store::StoreTimeouts;
use crate::backup::supervisor::{BackupEvent, BackupSupervisor};

use super::Settings;
use super::clients::{Clients, api, logged_watch, recorder};
use super::fence::Fence;
use super::watch::{object_key, roster_event};

/// Starts the Backup supervisor: one Backup actor per EtcdBackup, each write behind `fence`,
/// members dialed at their addresses in `pods`.
pub(super) fn start_backups(
    settings: &Settings,
    clients: &Clients,
    pods: Store<Pod>,
    identity: &str,
    fence: &Fence,
    metrics: BackupMetrics,
    log: &Logger,
) -> actix::Addr<BackupSupervisor> {
    let events = logged_watch::<EtcdBackup, BackupEvent>(
        api(&clients.watches, &settings.namespace),
        "EtcdBackup",
        log,
        |event| roster_event(event, object_key, Box::new),
    );
    let recorder = recorder(clients, identity);
    let deps = BackupDeps {
        kube: Arc::new(
            KubeBackupApi::new(clients.calls.clone(), recorder, fence.clone()).with_pods(pods),
        ),
        config: BackupConfig {
            etcd_timeout: settings.etcd_timeout,
            store: StoreTimeouts::default(),
            endpoints: settings.backup_endpoints,
        },
        metrics,
    };
    let log = log.clone();
    BackupSupervisor::create(move |ctx| {
        ctx.add_stream(events);
        BackupSupervisor::new(deps, &log)
    })
}
