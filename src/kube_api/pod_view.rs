//! Reduces a Kubernetes Pod to the lifecycle's `PodView`.

use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod};
use kube::ResourceExt;

use etcd_operator_core::lifecycle::{PodPhase, PodView, TlsMode};

use crate::resources::labels::{
    FORCE_NEW_CLUSTER_ANNOTATION, POD_TEMPLATE_ANNOTATION, PREPARED_ANNOTATION, TLS_ANNOTATION,
    UPGRADE_FROM_ANNOTATION, VOTER_LABEL,
};
use crate::resources::{ETCD_CONTAINER, data_on_claim, version_of_image};

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
        pod_template: annotation(pod, POD_TEMPLATE_ANNOTATION),
        restarts: etcd_status(pod).map_or(0, |cs| u32::try_from(cs.restart_count).unwrap_or(0)),
        crash: etcd_status(pod).and_then(last_crash),
        // Pods made before TLS existed carry no mark: they run plain HTTP.
        tls: annotation(pod, TLS_ANNOTATION)
            .and_then(|m| TlsMode::parse(&m))
            .unwrap_or(TlsMode::Off),
        // Known from the cluster's EndpointSlices, not from the pod (`published_in`).
        published: false,
        prepared_with: annotation(pod, PREPARED_ANNOTATION).map(|peers| {
            peers
                .split(',')
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect()
        }),
        force_new_cluster: annotation(pod, FORCE_NEW_CLUSTER_ANNOTATION).as_deref() == Some("true"),
        on_claim: data_on_claim(pod),
    }
}

/// The etcd container's status.
fn etcd_status(pod: &Pod) -> Option<&ContainerStatus> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().find(|cs| cs.name == ETCD_CONTAINER)
}

/// How the container last failed: its current state when it is terminated with an
/// error, else its last state (it was restarted since) when that was an error.
fn last_crash(cs: &ContainerStatus) -> Option<String> {
    let failed = |state: Option<&ContainerState>| {
        state
            .and_then(|s| s.terminated.as_ref())
            .filter(|t| t.exit_code != 0)
            .cloned()
    };
    let t = failed(cs.state.as_ref()).or_else(|| failed(cs.last_state.as_ref()))?;
    let reason = t.reason.map(|r| format!(" ({r})")).unwrap_or_default();
    let log = t
        .message
        .filter(|m| !m.trim().is_empty())
        .map(|m| format!(": {}", m.trim_end()))
        .unwrap_or_default();
    Some(format!("exited with code {}{reason}{log}", t.exit_code))
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

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
        ContainerStatus, Pod, PodStatus,
    };

    use super::pod_view;
    use crate::resources::ETCD_CONTAINER;

    fn pod_with(status: ContainerStatus) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some("Running".into()),
                container_statuses: Some(vec![status]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn terminated(code: i32, message: Option<&str>) -> ContainerState {
        ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                reason: Some("Error".into()),
                message: message.map(str::to_string),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        }
    }

    #[test]
    fn a_restarted_etcd_shows_its_restarts_and_how_it_last_failed() {
        let waiting = ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("CrashLoopBackOff".into()),
                ..ContainerStateWaiting::default()
            }),
            ..ContainerState::default()
        };
        let view = pod_view(&pod_with(ContainerStatus {
            name: ETCD_CONTAINER.into(),
            restart_count: 3,
            state: Some(waiting),
            last_state: Some(terminated(2, Some("line 1\npanic: walpb: crc mismatch\n"))),
            ..ContainerStatus::default()
        }));
        assert_eq!(view.restarts, 3);
        assert_eq!(
            view.crash.as_deref(),
            Some("exited with code 2 (Error): line 1\npanic: walpb: crc mismatch")
        );
        // Running again after a crash: the crash stays as evidence.
        let running = ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..ContainerState::default()
        };
        let view = pod_view(&pod_with(ContainerStatus {
            name: ETCD_CONTAINER.into(),
            restart_count: 1,
            state: Some(running.clone()),
            last_state: Some(terminated(137, None)),
            ..ContainerStatus::default()
        }));
        assert_eq!(view.crash.as_deref(), Some("exited with code 137 (Error)"));
        // A clean exit, or none, is no crash.
        let view = pod_view(&pod_with(ContainerStatus {
            name: ETCD_CONTAINER.into(),
            restart_count: 1,
            state: Some(running),
            last_state: Some(terminated(0, None)),
            ..ContainerStatus::default()
        }));
        assert_eq!((view.restarts, view.crash), (1, None));
    }
}
