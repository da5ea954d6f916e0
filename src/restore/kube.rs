//! What the Restore actors need from Kubernetes, as a port, and its implementation over
//! kube-rs with every write (the new cluster, status, Events) behind the leader's fence.

use async_trait::async_trait;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::Recorder;
use kube::{Client, Resource};
use serde_json::json;

use crate::api::EtcdCluster;
use crate::api::restore::{EtcdRestore, EtcdRestoreStatus};
use crate::backup::kube::{BackupKube, KubeBackupApi};
use crate::controller::fence::Fence;
use crate::kube_api::event;
use crate::secret_data::SecretData;

/// What creating the new EtcdCluster did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// It was created.
    New,
    /// One of that name exists already (created meanwhile by someone else): nothing
    /// was changed.
    Exists,
}

/// The Restore actors' port to Kubernetes. Errors are the API's words.
#[async_trait]
pub trait RestoreKube: Send + Sync + 'static {
    /// The data of a Secret; `None` when it does not exist.
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<SecretData>, String>;
    /// An EtcdCluster, read fresh.
    async fn cluster(&self, namespace: &str, name: &str) -> Result<Option<EtcdCluster>, String>;
    /// Creates an EtcdCluster; one of the same name that exists is left alone.
    async fn create_cluster(&self, cluster: &EtcdCluster) -> Result<Created, String>;
    /// Writes an EtcdRestore's status.
    async fn write_status(
        &self,
        restore: &EtcdRestore,
        status: &EtcdRestoreStatus,
    ) -> Result<(), String>;
    /// Records an Event on an EtcdRestore.
    async fn event(
        &self,
        restore: &EtcdRestore,
        warning: bool,
        reason: &str,
        note: &str,
    ) -> Result<(), String>;
}

/// [`RestoreKube`] over kube-rs.
pub struct KubeRestoreApi {
    client: Client,
    recorder: Recorder,
    fence: Fence,
    secrets: KubeBackupApi,
}

impl KubeRestoreApi {
    /// Calls through `client`, Events through `recorder`, writes behind `fence`.
    pub fn new(client: Client, recorder: Recorder, fence: Fence) -> Self {
        KubeRestoreApi {
            secrets: KubeBackupApi::new(client.clone(), recorder.clone(), fence.clone()),
            client,
            recorder,
            fence,
        }
    }

    fn check(&self, what: &str) -> Result<(), String> {
        self.fence.check(what).map_err(|e| e.to_string())
    }
}

fn text(err: &kube::Error) -> String {
    crate::error::with_causes(&err.to_string(), err)
}

#[async_trait]
impl RestoreKube for KubeRestoreApi {
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<SecretData>, String> {
        self.secrets.secret(namespace, name).await
    }

    async fn cluster(&self, namespace: &str, name: &str) -> Result<Option<EtcdCluster>, String> {
        let api: Api<EtcdCluster> = Api::namespaced(self.client.clone(), namespace);
        api.get_opt(name).await.map_err(|e| text(&e))
    }

    async fn create_cluster(&self, cluster: &EtcdCluster) -> Result<Created, String> {
        self.check("create an EtcdCluster")?;
        let namespace = cluster.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<EtcdCluster> = Api::namespaced(self.client.clone(), namespace);
        match api.create(&PostParams::default(), cluster).await {
            Ok(_) => Ok(Created::New),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Created::Exists),
            Err(e) => Err(text(&e)),
        }
    }

    async fn write_status(
        &self,
        restore: &EtcdRestore,
        status: &EtcdRestoreStatus,
    ) -> Result<(), String> {
        self.check("write an EtcdRestore status")?;
        let namespace = restore.metadata.namespace.as_deref().unwrap_or_default();
        let name = restore.metadata.name.as_deref().unwrap_or_default();
        let api: Api<EtcdRestore> = Api::namespaced(self.client.clone(), namespace);
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .map(drop)
        .map_err(|e| text(&e))
    }

    async fn event(
        &self,
        restore: &EtcdRestore,
        warning: bool,
        reason: &str,
        note: &str,
    ) -> Result<(), String> {
        self.check("record an Event")?;
        let event = event(warning, reason, note, "Restore");
        self.recorder
            .publish(&event, &restore.object_ref(&()))
            .await
            .map_err(|e| text(&e))
    }
}
