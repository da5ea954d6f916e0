//! One step of a restore, start to end: the named cluster checked (never over one that
//! exists), the snapshot resolved, its metadata and its bytes verified, the version rule
//! applied, the EtcdCluster created; later steps follow it until it runs.

use std::time::Duration;

use kube::ResourceExt;

use crate::api::EtcdCluster;
use crate::api::restore::{EtcdRestore, EtcdRestoreStatus};
use crate::api::s3::S3Store;
use crate::backup::credentials::S3Credentials;
use crate::backup::store::{BackupStore, Location, StoreConfig, StoreTimeouts};
use crate::kube_api::own_objects::ObjectEvent;

use super::plan::{self, Existing, Refusal};
use super::port::{Created, RestoreKube};
use super::reason::RestoreReason;
use super::source::{self, Lookup};

/// How often a restore whose cluster is coming up looks at it again.
pub const FOLLOW_INTERVAL: Duration = Duration::from_secs(2);

/// What one step ends with: the status to write, an Event, and whether to look again.
#[derive(Debug, Clone, PartialEq)]
pub struct StepOutcome {
    /// The status.
    pub status: EtcdRestoreStatus,
    /// The Event to record.
    pub event: Option<ObjectEvent>,
    /// The restore is not finished: run another step (after `FOLLOW_INTERVAL`, or a
    /// retry delay after a failure).
    pub again: bool,
}

/// Whether nothing more is to be done for `restore` with `status`: it succeeded, or it
/// was refused for the spec it has now.
pub fn finished(restore: &EtcdRestore, status: &EtcdRestoreStatus) -> bool {
    status.phase == "Succeeded"
        || (status.phase == "Refused" && status.observed_generation == restore.metadata.generation)
}

fn refuse(
    restore: &EtcdRestore,
    refusal: Refusal,
    previous: &EtcdRestoreStatus,
    now: &str,
) -> StepOutcome {
    let status = plan::refused(restore, &refusal, now);
    // A retried failure says so once per reason, not on every retry.
    let reason = refusal.reason.as_str();
    let event = (previous.reason != reason || status.phase == "Refused")
        .then(|| ObjectEvent::warning(reason, refusal.message.clone()));
    StepOutcome {
        again: status.phase != "Refused",
        status,
        event,
    }
}

/// One step for `restore`, whose last written status is `previous`.
pub async fn step(
    kube: &dyn RestoreKube,
    restore: &EtcdRestore,
    previous: &EtcdRestoreStatus,
    timeouts: StoreTimeouts,
    now: &str,
) -> StepOutcome {
    let namespace = restore.namespace().unwrap_or_default();
    let name = &restore.spec.etcd_cluster.name;
    let cluster = match kube.cluster(&namespace, name).await {
        Ok(cluster) => cluster,
        Err(e) => {
            let message = e.to_string();
            return refuse(
                restore,
                Refusal {
                    reason: RestoreReason::KubernetesUnavailable,
                    message,
                },
                previous,
                now,
            );
        }
    };
    let uid = restore.metadata.uid.clone().unwrap_or_default();
    match plan::existing(cluster.as_ref(), &uid) {
        Existing::Ours => follow(
            restore,
            cluster.as_ref().expect("ours exists"),
            previous,
            now,
        ),
        Existing::Other { bootstrapped } => refuse(
            restore,
            plan::cluster_exists(name, bootstrapped),
            previous,
            now,
        ),
        Existing::None
            if previous.phase == "Restoring"
                && previous.observed_generation == restore.metadata.generation =>
        {
            let message = format!(
                "EtcdCluster {name}, created by this restore, was deleted before it ran; \
                 nothing is created again (change the spec to restore anew)"
            );
            refuse(
                restore,
                Refusal {
                    reason: RestoreReason::ClusterDeleted,
                    message,
                },
                previous,
                now,
            )
        }
        Existing::None => match create(kube, restore, timeouts, now).await {
            Ok(step) => step,
            Err(refusal) => refuse(restore, refusal, previous, now),
        },
    }
}

/// The cluster this restore made: succeeded once it runs with every member.
fn follow(
    restore: &EtcdRestore,
    cluster: &EtcdCluster,
    previous: &EtcdRestoreStatus,
    now: &str,
) -> StepOutcome {
    let Some(source) = cluster.spec.restore.clone() else {
        let message = format!(
            "EtcdCluster {} has no spec.restore any more",
            cluster.name_any()
        );
        return refuse(
            restore,
            Refusal {
                reason: RestoreReason::InvalidSpec,
                message,
            },
            previous,
            now,
        );
    };
    match plan::progress(cluster) {
        plan::Progress::Running { cluster_id } => {
            let status = plan::succeeded(restore, &source, &cluster.name_any(), &cluster_id, now);
            let event = Some(ObjectEvent::normal(
                "RestoreSucceeded",
                status.message.clone(),
            ));
            StepOutcome {
                status,
                event,
                again: false,
            }
        }
        plan::Progress::ComingUp(message) => StepOutcome {
            status: plan::restoring(restore, &source, message, now),
            event: None,
            again: true,
        },
    }
}

/// The store and the snapshot `s3` names, opened with its Secret's credentials.
async fn open_store(
    kube: &dyn RestoreKube,
    namespace: &str,
    s3: &S3Store,
    lookup: &Lookup,
    timeouts: StoreTimeouts,
) -> Result<BackupStore, Refusal> {
    let secret = &s3.aws_secret;
    let data = kube
        .secret(namespace, secret)
        .await
        .map_err(|e| Refusal {
            reason: RestoreReason::KubernetesUnavailable,
            message: e.to_string(),
        })?
        .ok_or_else(|| Refusal {
            reason: RestoreReason::SecretNotFound,
            message: format!("secret {secret} does not exist"),
        })?;
    store_for(s3, lookup, &data, timeouts)
}

/// The store `s3` names, for `lookup`, opened with the credentials in `data` (the data of
/// the Secret `s3.awsSecret`).
pub(crate) fn store_for(
    s3: &S3Store,
    lookup: &Lookup,
    data: &crate::secret_data::SecretData,
    timeouts: StoreTimeouts,
) -> Result<BackupStore, Refusal> {
    let secret = &s3.aws_secret;
    let credentials = S3Credentials::from_secret(data).map_err(|e| Refusal {
        reason: RestoreReason::InvalidSecret,
        message: format!("secret {secret}: {e}"),
    })?;
    let config = StoreConfig::S3 {
        location: Location {
            bucket: lookup.bucket().to_string(),
            prefix: lookup.prefix().to_string(),
        },
        endpoint: s3.endpoint.clone().filter(|e| !e.is_empty()),
        force_path_style: s3.force_path_style,
        credentials,
    };
    BackupStore::open(&config, timeouts).map_err(|e| Refusal {
        reason: RestoreReason::from(&e),
        message: e.to_string(),
    })
}

fn from_source(e: source::SourceError) -> Refusal {
    Refusal {
        reason: e.reason(),
        message: format!("{e}; nothing was created"),
    }
}

/// Resolves and verifies the snapshot, then creates the cluster from it.
async fn create(
    kube: &dyn RestoreKube,
    restore: &EtcdRestore,
    timeouts: StoreTimeouts,
    now: &str,
) -> Result<StepOutcome, Refusal> {
    let namespace = restore.namespace().unwrap_or_default();
    let s3 = restore.spec.s3.as_ref().ok_or_else(|| Refusal {
        reason: RestoreReason::InvalidSpec,
        message: "backupStorageType S3 needs s3".to_string(),
    })?;
    let lookup = Lookup::of(&s3.path);
    let store = open_store(kube, &namespace, s3, &lookup, timeouts).await?;
    let metadata = source::resolve(&store, &lookup)
        .await
        .map_err(from_source)?;
    source::verify(&store, &metadata)
        .await
        .map_err(from_source)?;
    let cluster = plan::new_cluster(restore, &metadata, s3)?;
    let name = cluster.name_any();
    match kube.create_cluster(&cluster).await {
        Ok(Created::New) => {}
        Ok(Created::Exists) => return Err(plan::cluster_exists(&name, false)),
        Err(e) => {
            return Err(Refusal {
                reason: RestoreReason::KubernetesUnavailable,
                message: e.to_string(),
            });
        }
    }
    let source = cluster
        .spec
        .restore
        .clone()
        .expect("a restored cluster names its snapshot");
    let note = format!(
        "created EtcdCluster {name} ({} members, etcd {}) from snapshot {} (revision {}, \
         sha256 {}, taken by etcd {})",
        cluster.spec.size,
        cluster.spec.version.as_deref().unwrap_or_default(),
        source.s3.path,
        source.revision,
        source.sha256,
        source.etcd_version
    );
    Ok(StepOutcome {
        status: plan::restoring(restore, &source, note.clone(), now),
        event: Some(ObjectEvent::normal("ClusterCreated", note)),
        again: true,
    })
}
