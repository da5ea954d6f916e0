//! Starts the Backup supervisor, fed by the EtcdBackup watch, once this replica leads.

use std::sync::Arc;

use actix::{Actor, AsyncContext};
use futures::StreamExt;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::{WatchStreamExt, watcher};
use slog::{Logger, warn};

use crate::api::backup::EtcdBackup;
use crate::backup::actor::{BackupConfig, BackupDeps};
use crate::backup::kube::KubeBackupApi;
use crate::backup::metrics::BackupMetrics;
use crate::backup::store::StoreTimeouts;
use crate::backup::supervisor::{BackupEvent, BackupSupervisor};

use super::fence::Fence;
use super::{Clients, Settings, api, watch_config};

/// Starts the Backup supervisor: one Backup actor per EtcdBackup, each write behind `fence`.
pub(super) fn start_backups(
    settings: &Settings,
    clients: &Clients,
    identity: &str,
    fence: &Fence,
    metrics: BackupMetrics,
    log: &Logger,
) -> actix::Addr<BackupSupervisor> {
    let watch_log = log.clone();
    let events = watcher(
        api::<EtcdBackup>(&clients.watches, &settings.namespace),
        watch_config(),
    )
    .default_backoff()
    .filter_map(move |item| {
        let log = watch_log.clone();
        async move {
            match item {
                Ok(event) => Some(BackupEvent::from(event)),
                Err(e) => {
                    warn!(log, "EtcdBackup watch error"; "error" => %e);
                    None
                }
            }
        }
    });
    let reporter = Reporter {
        controller: "etcd-operator".into(),
        instance: Some(identity.to_string()),
    };
    let recorder = Recorder::new(clients.calls.clone(), reporter);
    let deps = BackupDeps {
        kube: Arc::new(KubeBackupApi::new(
            clients.calls.clone(),
            recorder,
            fence.clone(),
        )),
        config: BackupConfig {
            etcd_timeout: settings.etcd_timeout,
            store: StoreTimeouts::default(),
        },
        metrics,
    };
    let log = log.clone();
    BackupSupervisor::create(move |ctx| {
        ctx.add_stream(events);
        BackupSupervisor::new(deps, &log)
    })
}
