//! The node's provisioner, resizer and reclaimer for its StorageClass
//! ([`PROVISIONER`](super::PROVISIONER)): one task of `run`, acting on the claims whose
//! selected node is this node and on the volumes it made. It reconciles everything on
//! every change of claims, volumes or classes, and every few seconds.
//!
//! - A claim waiting for us gets a directory `<state>/volumes/pvc-<uid>` (mode 0777, so
//!   that containers of any uid can write, as an emptyDir) and a PersistentVolume bound in
//!   advance to it; the PersistentVolume controller completes the binding.
//! - A bound claim asking for more than its volume holds is expanded ([`super::resize`]).
//! - A volume of ours released by its claim under reclaim policy Delete loses its
//!   directory, then its object (the PersistentVolume controller leaves volumes of external
//!   provisioners to them).

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use super::provision::{self, ProvisionError};
use super::resize::{self, Resize};
use super::{PROVISIONER, Storage, StorageView, claim_class};
use crate::log::event;

/// How often everything is reconciled without a change.
const RESYNC: Duration = Duration::from_secs(10);

/// The provisioner of one node.
pub struct Provisioner {
    client: Client,
    node: String,
    volumes_dir: PathBuf,
    /// Claims already reported as refused, by uid (reported once).
    refused: HashSet<String>,
    /// Volumes already reclaimed, by uid, while the watch may still show them.
    reclaimed: HashSet<String>,
}

fn key(claim: &PersistentVolumeClaim) -> String {
    format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default()
    )
}

/// A conflict or a missing object: another writer was first; the next pass sees it.
fn superseded(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 || s.code == 404)
}

impl Provisioner {
    /// The provisioner of `node`, its volumes under `volumes_dir`.
    pub fn new(client: Client, node: String, volumes_dir: PathBuf) -> Provisioner {
        Provisioner {
            client,
            node,
            volumes_dir,
            refused: HashSet::new(),
            reclaimed: HashSet::new(),
        }
    }

    /// Reconciles on every change of `storage` until `shutdown`.
    pub async fn run(mut self, storage: Arc<Storage>, shutdown: CancellationToken) {
        let mut changed = storage.subscribe();
        tokio::select! {
            ready = storage.ready() => if !ready { return },
            _ = shutdown.cancelled() => return,
        }
        event!(
            "provisioner {PROVISIONER}: volumes of node {} in {}",
            self.node,
            self.volumes_dir.display()
        );
        loop {
            self.reconcile(&storage).await;
            tokio::select! {
                _ = shutdown.cancelled() => return,
                r = changed.changed() => if r.is_err() { return },
                _ = tokio::time::sleep(RESYNC) => {}
            }
        }
    }

    async fn reconcile(&mut self, storage: &Storage) {
        for claim in storage.claims() {
            let class = claim_class(&claim).and_then(|c| storage.class(c));
            if provision::wants_volume(&claim, class.as_deref(), &self.node)
                && let Some(class) = class
            {
                self.provision(&claim, &class).await;
            }
        }
        let volumes = storage.volumes();
        let uid = |pv: &PersistentVolume| pv.metadata.uid.clone().unwrap_or_default();
        let present: HashSet<String> = volumes.iter().map(|pv| uid(pv)).collect();
        self.reclaimed.retain(|u| present.contains(u));
        for pv in volumes {
            if self.reclaimed.contains(&uid(&pv)) {
                continue;
            }
            if let Some(dir) = provision::to_reclaim(&pv, &self.node, &self.volumes_dir) {
                self.reclaim(&pv, &dir).await;
            } else if provision::is_ours(&pv, &self.node, &self.volumes_dir)
                && let Some(claim) = claim_of(&pv, storage)
            {
                self.resize(&claim, &pv).await;
            }
        }
    }

    /// Makes the claim's directory and its volume.
    async fn provision(&mut self, claim: &PersistentVolumeClaim, class: &StorageClass) {
        let dir = self.volumes_dir.join(provision::volume_name(claim));
        let pv = match provision::volume_for(claim, class, &self.node, &dir) {
            Ok(pv) => pv,
            Err(e) => return self.refuse(claim, &e),
        };
        if let Err(e) = make_dir(&dir) {
            event!("claim {}: cannot make {}: {e}", key(claim), dir.display());
            return;
        }
        let name = pv.metadata.name.clone().unwrap_or_default();
        match Api::<PersistentVolume>::all(self.client.clone())
            .create(&PostParams::default(), &pv)
            .await
        {
            Ok(_) => event!(
                "claim {}: provisioned volume {name} ({}) at {}",
                key(claim),
                super::requested(claim).unwrap_or_default(),
                dir.display()
            ),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => event!("claim {}: creating volume {name} failed: {e}", key(claim)),
        }
    }

    fn refuse(&mut self, claim: &PersistentVolumeClaim, e: &ProvisionError) {
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        if self.refused.insert(uid) {
            event!("claim {}: not provisioned: {e}", key(claim));
        }
    }

    /// Removes a released volume's directory, then the volume.
    async fn reclaim(&mut self, pv: &PersistentVolume, dir: &Path) {
        let name = pv.metadata.name.clone().unwrap_or_default();
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                event!("volume {name}: cannot remove {}: {e}", dir.display());
                return;
            }
            _ => {}
        }
        match Api::<PersistentVolume>::all(self.client.clone())
            .delete(&name, &DeleteParams::default())
            .await
        {
            Ok(_) => event!(
                "volume {name}: released; removed {} and the volume",
                dir.display()
            ),
            Err(e) if superseded(&e) => {}
            Err(e) => return event!("volume {name}: deleting failed: {e}"),
        }
        self.reclaimed
            .insert(pv.metadata.uid.clone().unwrap_or_default());
    }

    /// Expands the volume of a claim that asks for more, or finishes the report of one.
    async fn resize(&self, claim: &PersistentVolumeClaim, pv: &PersistentVolume) {
        let step = match resize::step(claim, pv) {
            Ok(Some(step)) => step,
            Ok(None) => return,
            Err(e) => return event!("claim {}: cannot compare sizes: {e}", key(claim)),
        };
        let result = match &step {
            Resize::Expand { to } => self.expand(claim, pv, to).await,
            Resize::Finish { to } => self.finish(claim, to).await.map(|_| ()),
        };
        match result {
            Ok(()) => event!(
                "claim {}: volume {} is {}",
                key(claim),
                pv.metadata.name.as_deref().unwrap_or_default(),
                match step {
                    Resize::Expand { to } | Resize::Finish { to } => to,
                }
            ),
            Err(e) if superseded(&e) => {}
            Err(e) => event!("claim {}: resizing failed: {e}", key(claim)),
        }
    }

    async fn expand(
        &self,
        claim: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        to: &str,
    ) -> kube::Result<()> {
        let claims = self.claims(claim);
        let name = claim.metadata.name.as_deref().unwrap_or_default();
        let started = resize::started_patch(claim, to, jiff::Timestamp::now());
        let claim = claims
            .patch_status(name, &PatchParams::default(), &Patch::Merge(started))
            .await?;
        Api::<PersistentVolume>::all(self.client.clone())
            .patch(
                pv.metadata.name.as_deref().unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Merge(resize::capacity_patch(to)),
            )
            .await?;
        self.finish(&claim, to).await.map(|_| ())
    }

    async fn finish(
        &self,
        claim: &PersistentVolumeClaim,
        to: &str,
    ) -> kube::Result<PersistentVolumeClaim> {
        let name = claim.metadata.name.as_deref().unwrap_or_default();
        self.claims(claim)
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(resize::finished_patch(claim, to)),
            )
            .await
    }

    fn claims(&self, claim: &PersistentVolumeClaim) -> Api<PersistentVolumeClaim> {
        let ns = claim.metadata.namespace.as_deref().unwrap_or_default();
        Api::namespaced(self.client.clone(), ns)
    }
}

/// The claim a volume is bound to, as watched.
fn claim_of(pv: &PersistentVolume, storage: &Storage) -> Option<Arc<PersistentVolumeClaim>> {
    let r = pv.spec.as_ref()?.claim_ref.as_ref()?;
    storage.claim(r.namespace.as_deref()?, r.name.as_deref()?)
}

/// The volume's directory, writable by every uid.
fn make_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))
}
