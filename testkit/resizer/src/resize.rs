//! Volume expansion as an external resizer does it, for directory volumes: when a bound
//! claim asks for more than its volume holds, the claim is marked in progress (condition
//! `Resizing`, `allocatedResourceStatuses.storage: ControllerResizeInProgress`,
//! `allocatedResources.storage`: the new size), the volume's capacity is raised, and the
//! claim is marked finished: `status.capacity` the new size, the resize conditions and
//! its resize status removed, `allocatedResources` left at the new size. A directory needs
//! no file system resize on the node, so there is no `FileSystemResizePending` step.

use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use etcd_operator_core::quantity::{QuantityError, bytes};

use crate::requested;

/// The resize status of a claim whose volume is being expanded.
pub const IN_PROGRESS: &str = "ControllerResizeInProgress";
/// The conditions a resizer sets while it works and removes when done.
const RESIZE_CONDITIONS: [&str; 2] = ["Resizing", "FileSystemResizePending"];

/// What a claim's size asks of its volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resize {
    /// The volume is smaller than the claim's request: grow it to `to`, then report.
    Expand {
        /// The new size, as the claim writes it.
        to: String,
    },
    /// The volume has grown to `to` but the claim does not show it yet: report only.
    Finish {
        /// The volume's size.
        to: String,
    },
}

fn storage_of(
    map: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
) -> Option<&str> {
    map?.get("storage").map(|q| q.0.as_str())
}

fn bound_to(claim: &PersistentVolumeClaim, pv: &PersistentVolume) -> bool {
    let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
    let volume = claim.spec.as_ref().and_then(|s| s.volume_name.as_deref());
    let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    phase == Some("Bound")
        && volume.is_some()
        && volume == pv.metadata.name.as_deref()
        && claim_ref.and_then(|r| r.uid.as_deref()) == claim.metadata.uid.as_deref()
}

/// Whether a resize of `claim` was started and not finished.
pub fn in_progress(claim: &PersistentVolumeClaim) -> bool {
    let Some(status) = &claim.status else {
        return false;
    };
    let resizing = status
        .conditions
        .iter()
        .flatten()
        .any(|c| RESIZE_CONDITIONS.contains(&c.type_.as_str()) && c.status == "True");
    let marked = status
        .allocated_resource_statuses
        .as_ref()
        .and_then(|m| m.get("storage"))
        .is_some_and(|s| s == IN_PROGRESS);
    resizing || marked
}

/// What `claim`, bound to `pv`, asks: nothing, an expansion, or the report of one done.
/// A smaller request never shrinks a volume (the API server refuses one below the
/// claim's capacity).
pub fn step(
    claim: &PersistentVolumeClaim,
    pv: &PersistentVolume,
) -> Result<Option<Resize>, QuantityError> {
    if !bound_to(claim, pv) {
        return Ok(None);
    }
    let capacity = storage_of(pv.spec.as_ref().and_then(|s| s.capacity.as_ref()));
    let reported = storage_of(claim.status.as_ref().and_then(|s| s.capacity.as_ref()));
    let (Some(request), Some(capacity), Some(reported)) = (requested(claim), capacity, reported)
    else {
        return Ok(None);
    };
    if bytes(request)? > bytes(capacity)? {
        return Ok(Some(Resize::Expand {
            to: request.to_string(),
        }));
    }
    if bytes(reported)? < bytes(capacity)? || in_progress(claim) {
        return Ok(Some(Resize::Finish {
            to: capacity.to_string(),
        }));
    }
    Ok(None)
}

/// The claim's conditions without the resize conditions, plus `added`.
fn conditions(
    claim: &PersistentVolumeClaim,
    added: Option<PersistentVolumeClaimCondition>,
) -> Value {
    let mut kept: Vec<PersistentVolumeClaimCondition> = claim
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .filter(|c| !RESIZE_CONDITIONS.contains(&c.type_.as_str()))
        .cloned()
        .collect();
    kept.extend(added);
    serde_json::to_value(kept).expect("conditions serialize")
}

/// The status patch (JSON merge, guarded by the claim's resourceVersion) that marks an
/// expansion to `to` started at `now`.
pub fn started_patch(claim: &PersistentVolumeClaim, to: &str, now: jiff::Timestamp) -> Value {
    let resizing = PersistentVolumeClaimCondition {
        type_: "Resizing".into(),
        status: "True".into(),
        last_transition_time: Some(Time(now)),
        ..Default::default()
    };
    json!({
        "metadata": {"resourceVersion": claim.metadata.resource_version},
        "status": {
            "conditions": conditions(claim, Some(resizing)),
            "allocatedResourceStatuses": {"storage": IN_PROGRESS},
            "allocatedResources": {"storage": to},
        },
    })
}

/// The status patch that reports the volume's new size `to` and ends the resize.
pub fn finished_patch(claim: &PersistentVolumeClaim, to: &str) -> Value {
    json!({
        "metadata": {"resourceVersion": claim.metadata.resource_version},
        "status": {
            "capacity": {"storage": to},
            "conditions": conditions(claim, None),
            "allocatedResourceStatuses": {"storage": null},
        },
    })
}

/// The patch of the volume's capacity.
pub fn capacity_patch(to: &str) -> Value {
    json!({"spec": {"capacity": {"storage": to}}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(
        request: &str,
        capacity: &str,
        reported: &str,
    ) -> (PersistentVolumeClaim, PersistentVolume) {
        let claim = serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "ns", "uid": "u-1", "resourceVersion": "7"},
            "spec": {"volumeName": "pvc-u-1", "resources": {"requests": {"storage": request}}},
            "status": {"phase": "Bound", "capacity": {"storage": reported},
                       "conditions": [{"type": "ModifyingVolume", "status": "True"}]},
        }))
        .unwrap();
        let pv = serde_json::from_value(json!({
            "metadata": {"name": "pvc-u-1"},
            "spec": {"capacity": {"storage": capacity}, "claimRef": {"name": "data", "namespace": "ns", "uid": "u-1"}},
        }))
        .unwrap();
        (claim, pv)
    }

    #[test]
    fn a_larger_request_expands_the_volume() {
        let (claim, pv) = pair("2Gi", "1Gi", "1Gi");
        assert_eq!(
            step(&claim, &pv),
            Ok(Some(Resize::Expand { to: "2Gi".into() }))
        );
    }

    #[test]
    fn an_expanded_volume_not_yet_reported_is_finished() {
        let (claim, pv) = pair("2Gi", "2Gi", "1Gi");
        assert_eq!(
            step(&claim, &pv),
            Ok(Some(Resize::Finish { to: "2Gi".into() }))
        );
    }

    #[test]
    fn equal_sizes_in_other_units_and_smaller_requests_ask_nothing() {
        let (claim, pv) = pair("1024Mi", "1Gi", "1Gi");
        assert_eq!(step(&claim, &pv), Ok(None));
        let (claim, pv) = pair("1Gi", "2Gi", "2Gi");
        assert_eq!(step(&claim, &pv), Ok(None));
    }

    #[test]
    fn a_resize_left_in_progress_is_finished() {
        let (claim, pv) = pair("2Gi", "2Gi", "1Gi");
        let started: PersistentVolumeClaim = {
            let mut v = serde_json::to_value(&claim).unwrap();
            json_patch(
                &mut v,
                &started_patch(&claim, "2Gi", jiff::Timestamp::UNIX_EPOCH),
            );
            v["status"]["capacity"]["storage"] = json!("2Gi");
            serde_json::from_value(v).unwrap()
        };
        assert!(in_progress(&started));
        assert_eq!(
            step(&started, &pv),
            Ok(Some(Resize::Finish { to: "2Gi".into() }))
        );
    }

    #[test]
    fn a_claim_not_bound_to_the_volume_is_left_alone() {
        let (mut claim, pv) = pair("2Gi", "1Gi", "1Gi");
        claim.metadata.uid = Some("u-2".into());
        assert_eq!(step(&claim, &pv), Ok(None));
    }

    #[test]
    fn the_finished_claim_shows_the_size_without_resize_marks_as_the_resizer_leaves_it() {
        let (claim, _) = pair("2Gi", "1Gi", "1Gi");
        let mut v = serde_json::to_value(&claim).unwrap();
        json_patch(
            &mut v,
            &started_patch(&claim, "2Gi", jiff::Timestamp::UNIX_EPOCH),
        );
        let started: PersistentVolumeClaim = serde_json::from_value(v.clone()).unwrap();
        let types: Vec<_> = started
            .status
            .as_ref()
            .unwrap()
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.clone())
            .collect();
        assert_eq!(types, ["ModifyingVolume", "Resizing"]);
        json_patch(&mut v, &finished_patch(&started, "2Gi"));
        let done: PersistentVolumeClaim = serde_json::from_value(v).unwrap();
        let status = done.status.unwrap();
        assert_eq!(status.capacity.unwrap()["storage"].0, "2Gi");
        assert_eq!(status.allocated_resources.unwrap()["storage"].0, "2Gi");
        assert!(
            status
                .allocated_resource_statuses
                .unwrap_or_default()
                .is_empty()
        );
        let types: Vec<_> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.clone())
            .collect();
        assert_eq!(types, ["ModifyingVolume"]);
    }

    /// Applies a JSON merge patch (RFC 7396), as the API server does.
    fn json_patch(target: &mut Value, patch: &Value) {
        let Value::Object(patch) = patch else {
            *target = patch.clone();
            return;
        };
        if !target.is_object() {
            *target = json!({});
        }
        let target = target.as_object_mut().expect("an object");
        for (k, v) in patch {
            if v.is_null() {
                target.remove(k);
            } else {
                json_patch(target.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}
