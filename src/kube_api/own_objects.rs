//! The writes to one of the operator's own objects (an EtcdBackup, an EtcdRestore): its
//! status patch and its Events, as a port, and that port over kube-rs once for both, each
//! write behind the leader's fence.

use std::fmt::Debug;

use async_trait::async_trait;
use etcd_operator_actors::ports::ApiError;
use kube::api::{Api, Patch, PatchParams};
use kube::core::NamespaceResourceScope;
use kube::runtime::events::Recorder;
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::error::api_error;
use crate::api::backup::{EtcdBackup, EtcdBackupStatus};
use crate::api::restore::{EtcdRestore, EtcdRestoreStatus};
use crate::controller::fence::Fence;

/// One of the operator's own objects: a namespaced custom resource whose status the
/// operator writes and on which it records Events.
pub trait OwnObject:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// Its status.
    type Status: Serialize + Send + Sync;
    /// The action its Events are recorded for.
    const ACTION: &'static str;
}

impl OwnObject for EtcdBackup {
    type Status = EtcdBackupStatus;
    const ACTION: &'static str = "Backup";
}

impl OwnObject for EtcdRestore {
    type Status = EtcdRestoreStatus;
    const ACTION: &'static str = "Restore";
}

/// An Event an actor records on its object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectEvent {
    /// A Warning, else a Normal Event.
    pub warning: bool,
    /// CamelCase reason.
    pub reason: String,
    /// For people (cut to the API server's limit when recorded).
    pub note: String,
}

impl ObjectEvent {
    /// A Normal Event of `reason`.
    pub fn normal(reason: &str, note: String) -> Self {
        ObjectEvent {
            warning: false,
            reason: reason.to_string(),
            note,
        }
    }

    /// A Warning of `reason`.
    pub fn warning(reason: &str, note: String) -> Self {
        ObjectEvent {
            warning: true,
            ..ObjectEvent::normal(reason, note)
        }
    }
}

/// The writes to an own object of kind `K`. Errors are typed as the cluster side's are.
#[async_trait]
pub trait OwnObjectWrites<K: OwnObject>: Send + Sync {
    /// Writes `object`'s status.
    async fn write_status(&self, object: &K, status: &K::Status) -> Result<(), ApiError>;
    /// Records `event` on `object`.
    async fn event(&self, object: &K, event: &ObjectEvent) -> Result<(), ApiError>;
}

/// [`OwnObjectWrites`] over kube-rs: calls through a client, Events through a recorder,
/// both behind the fence.
#[derive(Clone)]
pub struct KubeOwnObjects {
    client: Client,
    recorder: Recorder,
    fence: Fence,
}

impl KubeOwnObjects {
    /// Writes through `client`, Events through `recorder`, each behind `fence`.
    pub fn new(client: Client, recorder: Recorder, fence: Fence) -> Self {
        KubeOwnObjects {
            client,
            recorder,
            fence,
        }
    }

    /// Whether this replica may `write` now: the fence's refusal is `Forbidden`.
    pub fn may_act(&self, write: &str) -> Result<(), ApiError> {
        Ok(self.fence.check(write)?)
    }
}

#[async_trait]
impl<K: OwnObject> OwnObjectWrites<K> for KubeOwnObjects {
    async fn write_status(&self, object: &K, status: &K::Status) -> Result<(), ApiError> {
        let kind = K::kind(&());
        self.may_act(&format!("write an {kind} status"))?;
        let namespace = object.meta().namespace.as_deref().unwrap_or_default();
        let name = object.meta().name.as_deref().unwrap_or_default();
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .map(drop)
        .map_err(|e| api_error(&format!("writing the status of {kind} {name}"), &e))
    }

    async fn event(&self, object: &K, event: &ObjectEvent) -> Result<(), ApiError> {
        self.may_act("record an Event")?;
        let recorded = super::event(event.warning, &event.reason, &event.note, K::ACTION);
        self.recorder
            .publish(&recorded, &object.object_ref(&()))
            .await
            .map_err(|e| {
                let name = object.meta().name.as_deref().unwrap_or_default();
                api_error(
                    &format!("recording an Event on {} {name}", K::kind(&())),
                    &e,
                )
            })
    }
}
