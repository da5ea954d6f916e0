//! Reduces a Kubernetes Pod to the lifecycle's `PodView`.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use etcd_operator_actors::lifecycle::{PodPhase, PodView};

use crate::resources::labels::{UPGRADE_FROM_ANNOTATION, VOTER_LABEL};
use crate::resources::{ETCD_CONTAINER, version_of_image};

/// The lifecycle's view of a pod.
pub fn pod_view(pod: &Pod) -> PodView {
    let status = pod.status.as_ref();
    let phase = match status.and_then(|s| s.phase.as_deref()) {
        Some("Running") => PodPhase::Running,
        Some("Succeeded") => PodPhase::Succeeded,
        Some("Failed") => PodPhase::Failed,
        Some("Unknown") => PodPhase::Unknown,
        _ => PodPhase::Pending,
    };
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let version = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == ETCD_CONTAINER))
        .and_then(|c| c.image.as_deref())
        .and_then(version_of_image);
    PodView {
        name: pod.name_any(),
        phase,
        ready,
        terminating: pod.metadata.deletion_timestamp.is_some(),
        version,
        problem: problem(pod),
        started: etcd_ran(pod),
        upgrade_from: annotation(pod, UPGRADE_FROM_ANNOTATION),
        voter: pod.labels().get(VOTER_LABEL).is_some_and(|v| v == "true"),
    }
}

fn annotation(pod: &Pod, key: &str) -> Option<String> {
    pod.annotations().get(key).cloned()
}

/// Whether the pod's etcd container has ever run: it runs now, it exited, or it was
/// restarted. A container still waiting (pulling its image, say) never ran.
fn etcd_ran(pod: &Pod) -> bool {
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref());
    statuses.into_iter().flatten().any(|cs| {
        let ran = |state: Option<&k8s_openapi::api::core::v1::ContainerState>| {
            state.is_some_and(|s| s.running.is_some() || s.terminated.is_some())
        };
        cs.name == ETCD_CONTAINER
            && (ran(cs.state.as_ref()) || ran(cs.last_state.as_ref()) || cs.restart_count > 0)
    })
}

/// Why a container is waiting or terminated with an error, as the kubelet reports it.
fn problem(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let all = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for cs in all {
        let state = cs.state.as_ref();
        if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
            let reason = w.reason.clone().unwrap_or_default();
            if reason != "PodInitializing" && reason != "ContainerCreating" {
                let message = w.message.clone().unwrap_or_default();
                return Some(format!("{}: {reason}: {message}", cs.name));
            }
        }
        if let Some(t) = state.and_then(|s| s.terminated.as_ref())
            && t.exit_code != 0
        {
            let reason = t
                .reason
                .as_ref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            return Some(format!(
                "{}: exited with code {}{reason}",
                cs.name, t.exit_code
            ));
        }
    }
    None
}
