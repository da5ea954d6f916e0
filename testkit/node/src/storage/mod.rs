//! Persistent volumes on the node, in the manner of a local-path provisioner: the cluster's
//! claims, volumes and classes as watched ([`Storage`]); the scheduler's volume binding
//! ([`volbind`]); volumes provisioned as directories of the node's state, expanded (by
//! the rules of `etcd_operator_resizer`, the real nodes' resizer too) and reclaimed
//! ([`provision`], [`controller`]); and a claim resolved to the directory a pod mounts
//! ([`mount`]).
//!
//! The controller-manager does the rest as in any cluster: its PersistentVolume controller
//! names the provisioner on the claim and binds claim and volume, its expander hands
//! resizes of volumes no in-tree plugin knows to an external resizer (this node), and the
//! protection controllers keep claims and volumes in use from going away.

pub mod affinity;
pub mod controller;
pub mod mount;
pub mod provision;
pub mod volbind;

pub use etcd_operator_resizer::{requested, resize};

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::log::event;

/// The provisioner of this test rig's StorageClass (`testkit/env/storage-class.yaml`).
pub const PROVISIONER: &str = "etcd-operator.test/local-path";
/// The node a WaitForFirstConsumer claim is provisioned on, as the scheduler writes it.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The provisioner the PersistentVolume controller asks for, on the claim.
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// The same, under its deprecated name (the controller still writes both).
pub const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// Which provisioner made a volume, on the volume.
pub const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// The node label a volume's node affinity names.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Read access to claims, volumes and classes; [`Storage`] in the node, maps in tests.
pub trait StorageView {
    /// The claim `name` in `namespace`.
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>>;
    /// The volume `name`.
    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>>;
    /// The class `name`.
    fn class(&self, name: &str) -> Option<Arc<StorageClass>>;
}

/// The cluster's claims, volumes and classes, kept by watches; every change bumps a
/// counter that [`Storage::subscribe`] receivers see.
pub struct Storage {
    claims: Store<PersistentVolumeClaim>,
    volumes: Store<PersistentVolume>,
    classes: Store<StorageClass>,
    changed: watch::Receiver<u64>,
}

impl Storage {
    /// Starts the three watches; they end at `shutdown`.
    pub fn watch(
        client: &Client,
        shutdown: &CancellationToken,
    ) -> (Arc<Storage>, Vec<JoinHandle<()>>) {
        let (tx, changed) = watch::channel(0u64);
        let tx = Arc::new(tx);
        let (claims, a) = reflect(Api::all(client.clone()), tx.clone(), shutdown.clone());
        let (volumes, b) = reflect(Api::all(client.clone()), tx.clone(), shutdown.clone());
        let (classes, c) = reflect(Api::all(client.clone()), tx, shutdown.clone());
        let storage = Storage {
            claims,
            volumes,
            classes,
            changed,
        };
        (Arc::new(storage), vec![a, b, c])
    }

    /// Waits until every watch has listed once; `false` if a watch ended first.
    pub async fn ready(&self) -> bool {
        self.claims.wait_until_ready().await.is_ok()
            && self.volumes.wait_until_ready().await.is_ok()
            && self.classes.wait_until_ready().await.is_ok()
    }

    /// A receiver that sees every change from now on.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.clone()
    }

    /// Every claim.
    pub fn claims(&self) -> Vec<Arc<PersistentVolumeClaim>> {
        self.claims.state()
    }

    /// Every volume.
    pub fn volumes(&self) -> Vec<Arc<PersistentVolume>> {
        self.volumes.state()
    }
}

impl StorageView for Storage {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims.get(&ObjectRef::new(name).within(namespace))
    }

    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.volumes.get(&ObjectRef::new(name))
    }

    fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.classes.get(&ObjectRef::new(name))
    }
}

/// Watches `api` into a store, bumping `changed` on every event, until `shutdown`.
fn reflect<K>(
    api: Api<K>,
    changed: Arc<watch::Sender<u64>>,
    shutdown: CancellationToken,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let (store, writer) = reflector::store::<K>();
    let stream = reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                ev = stream.next() => match ev {
                    Some(Ok(_)) => changed.send_modify(|n| *n = n.wrapping_add(1)),
                    Some(Err(e)) => event!("{kind} watch error (retrying): {e}"),
                    None => return,
                }
            }
        }
    });
    (store, task)
}

/// The class a claim names; `None` for none or `""`.
pub fn claim_class(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .spec
        .as_ref()?
        .storage_class_name
        .as_deref()
        .filter(|c| !c.is_empty())
}

/// An annotation of an object.
pub fn annotation<'a>(meta: &'a kube::api::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}
