//! The members' PersistentVolumeClaims as the lifecycle sees them, and their StorageClass
//! (read at most once a minute: it decides only whether claims may grow).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::{Api, Client, ResourceExt};

use etcd_operator_actors::ports::ApiError;
use etcd_operator_core::lifecycle::{Claim, ClaimClass, ClaimPhase};
use etcd_operator_core::quantity;

use super::error::api_error;
use crate::resources::member_of_claim;

/// How long a StorageClass read is trusted.
const CLASS_TTL: Duration = Duration::from_secs(60);

/// The member a claim belongs to and the lifecycle's view of it; `None` for a claim not
/// named like a member's.
pub(crate) fn claim_view(pvc: &PersistentVolumeClaim) -> Option<(String, Claim)> {
    let member = member_of_claim(&pvc.name_any())?.to_string();
    let phase = match pvc.metadata.deletion_timestamp {
        Some(_) => ClaimPhase::Deleting,
        None => claim_phase(pvc.status.as_ref().and_then(|s| s.phase.as_deref())),
    };
    let requested = pvc
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"));
    let capacity = pvc
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"));
    let claim = Claim {
        phase,
        requested_bytes: requested.and_then(|q| quantity::bytes(&q.0).ok()),
        capacity_bytes: capacity.and_then(|q| quantity::bytes(&q.0).ok()),
    };
    Some((member, claim))
}

/// A claim's phase as the lifecycle sees it: `Lost` when its volume is gone, `Bound`,
/// else (not bound yet) `Pending`.
fn claim_phase(phase: Option<&str>) -> ClaimPhase {
    match phase {
        Some("Bound") => ClaimPhase::Bound,
        Some("Lost") => ClaimPhase::Lost,
        _ => ClaimPhase::Pending,
    }
}

/// The StorageClass of a claim (set by the API server to the default class when the
/// claim names none).
pub(crate) fn class_of(pvc: &PersistentVolumeClaim) -> Option<String> {
    pvc.spec.as_ref()?.storage_class_name.clone()
}

/// The last StorageClass read, by name, with when it was read.
#[derive(Default)]
pub(crate) struct ClassCache {
    last: Mutex<Option<(ClaimClass, Instant)>>,
}

impl ClassCache {
    /// StorageClass `name`: from the last read when it is recent, else from the API.
    pub(crate) async fn get(&self, client: &Client, name: &str) -> Result<ClaimClass, ApiError> {
        if let Some((class, at)) = self.lock().as_ref()
            && class.name == name
            && at.elapsed() < CLASS_TTL
        {
            return Ok(class.clone());
        }
        let api: Api<StorageClass> = Api::all(client.clone());
        let read = api.get(name).await;
        let class = read.map_err(|e| api_error(&format!("reading StorageClass {name}"), &e))?;
        let class = ClaimClass {
            name: name.to_string(),
            allows_expansion: class.allow_volume_expansion == Some(true),
        };
        *self.lock() = Some((class.clone(), Instant::now()));
        Ok(class)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(ClaimClass, Instant)>> {
        self.last.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{
        PersistentVolumeClaimSpec, PersistentVolumeClaimStatus, VolumeResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;

    #[test]
    fn a_claim_shows_its_member_phase_request_and_capacity_in_bytes() {
        let storage = |q: &str| BTreeMap::from([("storage".to_string(), Quantity(q.into()))]);
        let mut pvc = PersistentVolumeClaim {
            spec: Some(PersistentVolumeClaimSpec {
                storage_class_name: Some("local-path".into()),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(storage("2Gi")),
                    ..VolumeResourceRequirements::default()
                }),
                ..PersistentVolumeClaimSpec::default()
            }),
            status: Some(PersistentVolumeClaimStatus {
                phase: Some("Bound".into()),
                capacity: Some(storage("1Gi")),
                ..PersistentVolumeClaimStatus::default()
            }),
            ..PersistentVolumeClaim::default()
        };
        pvc.metadata.name = Some("demo-ab3cd-data".into());
        let (member, claim) = claim_view(&pvc).unwrap();
        assert_eq!(member, "demo-ab3cd");
        assert_eq!(claim.phase, ClaimPhase::Bound);
        assert_eq!(claim.requested_bytes, Some(2 << 30));
        assert_eq!(claim.capacity_bytes, Some(1 << 30));
        assert_eq!(class_of(&pvc).as_deref(), Some("local-path"));
        pvc.metadata.name = Some("someone-elses".into());
        assert_eq!(claim_view(&pvc), None);
    }
}
