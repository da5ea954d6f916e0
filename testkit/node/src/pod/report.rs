//! Status reporting: the pod status a kubelet would compute from the containers, patched
//! when it differs from the last one sent, retried a little later when the patch fails.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use tokio::time::Instant;

use super::lifecycle::{self, Containers};
use super::slot::Kind;
use crate::log::event;
use crate::phase::Phase;
use crate::restart::RestartPolicy;
use crate::status::{self, ConditionInput, StatusInput};

/// The status patch of the pod with `uid`. The UID makes it apply to that pod only, as a
/// kubelet's does: the API server refuses a patch that would change `metadata.uid`, so a
/// worker whose pod was deleted cannot write its status into a new pod of the same name
/// (seen: a deleted seed's node set its address in the seed made again on another node,
/// whose own status then never went through).
fn status_patch(uid: Option<&str>, status: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "metadata": { "uid": uid },
        "status": status::clear_absent_condition_fields(status),
    })
}

/// How long a failed status patch waits before the next try.
const PATCH_RETRY: Duration = Duration::from_secs(2);

/// Everything the pod status is computed from.
pub struct Snapshot<'a> {
    /// The pod as last seen (readiness gates, generation).
    pub pod: &'a Pod,
    /// `namespace/name`, for the log.
    pub id: &'a str,
    /// Its restart policy.
    pub policy: RestartPolicy,
    /// Its containers.
    pub containers: &'a Containers,
    /// The phase it finished in, once it did.
    pub terminal: Option<Phase>,
    /// The pod's address.
    pub ip: &'a str,
    /// The node's address.
    pub host_ip: &'a str,
    /// When the node accepted the pod.
    pub start_time: Timestamp,
}

/// What became of a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reported {
    /// Sent, unchanged, or to be retried later.
    Done,
    /// The pod object no longer exists.
    Gone,
}

/// The last status sent for a pod.
pub struct Reporter {
    last_sent: Option<serde_json::Value>,
    last_phase: Option<Phase>,
    conditions: Vec<PodCondition>,
    retry_at: Option<Instant>,
}

impl Reporter {
    /// A reporter for a pod whose status holds `conditions` and, if it finished,
    /// `terminal`.
    pub fn new(conditions: Vec<PodCondition>, terminal: Option<Phase>) -> Reporter {
        Reporter {
            last_sent: None,
            last_phase: terminal,
            conditions,
            retry_at: None,
        }
    }

    /// When a failed patch is tried again.
    pub fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }

    /// The next report is sent without waiting for the retry time.
    pub fn retry_now(&mut self) {
        self.retry_at = None;
    }

    /// Reports the status if it changed since the last report.
    pub async fn publish(&mut self, client: &Client, snapshot: &Snapshot<'_>) -> Reported {
        if self.retry_at.is_some_and(|t| Instant::now() < t) {
            return Reported::Done;
        }
        let (phase, conditions, value) = match self.status(snapshot) {
            Ok(status) => status,
            Err(e) => {
                event!("pod {}: cannot encode status: {e}", snapshot.id);
                return Reported::Done;
            }
        };
        if self.last_sent.as_ref() == Some(&value) {
            return Reported::Done;
        }
        let pod = &snapshot.pod.metadata;
        let api: Api<Pod> =
            Api::namespaced(client.clone(), pod.namespace.as_deref().unwrap_or_default());
        let patch = Patch::Strategic(status_patch(pod.uid.as_deref(), &value));
        let name = pod.name.as_deref().unwrap_or_default();
        match api
            .patch_status(name, &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => self.sent(snapshot, phase, conditions, value),
            Err(kube::Error::Api(e)) if e.code == 404 => return Reported::Gone,
            Err(e) => {
                event!("pod {}: status update failed: {e}", snapshot.id);
                self.retry_at = Some(Instant::now() + PATCH_RETRY);
            }
        }
        Reported::Done
    }

    /// The phase, the conditions and the status as JSON.
    fn status(
        &self,
        snapshot: &Snapshot<'_>,
    ) -> serde_json::Result<(Phase, Vec<PodCondition>, serde_json::Value)> {
        let containers = snapshot.containers;
        let (init, phase) =
            lifecycle::current_phase(containers, snapshot.policy, snapshot.terminal);
        let (init_records, records) = (
            containers.records(Kind::Init),
            containers.records(Kind::Main),
        );
        let conditions = status::pod_conditions(&ConditionInput {
            phase,
            init,
            init_records: &init_records,
            records: &records,
            unready_gates: unready_gates(snapshot.pod),
            previous: &self.conditions,
            now: Timestamp::now(),
        });
        let status = status::pod_status(StatusInput {
            phase,
            pod_ip: snapshot.ip.to_string(),
            host_ip: snapshot.host_ip.to_string(),
            start_time: snapshot.start_time,
            init_records: &init_records,
            records: &records,
            conditions: conditions.clone(),
            observed_generation: snapshot.pod.metadata.generation,
        });
        Ok((phase, conditions, serde_json::to_value(&status)?))
    }

    fn sent(
        &mut self,
        snapshot: &Snapshot<'_>,
        phase: Phase,
        conditions: Vec<PodCondition>,
        value: serde_json::Value,
    ) {
        self.last_sent = Some(value);
        self.conditions = conditions;
        self.retry_at = None;
        if self.last_phase != Some(phase) {
            self.last_phase = Some(phase);
            event!(
                "pod {} phase {} (IP {})",
                snapshot.id,
                phase.as_str(),
                snapshot.ip
            );
        }
    }
}

/// The readiness gates of the pod whose condition is not `True`.
fn unready_gates(pod: &Pod) -> Vec<String> {
    let gates = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.clone())
        .unwrap_or_default();
    let current = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    gates
        .into_iter()
        .map(|g| g.condition_type)
        .filter(|t| !current.iter().any(|c| &c.type_ == t && c.status == "True"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_patch_names_its_pods_uid_so_it_cannot_land_on_a_namesake() {
        let status = serde_json::json!({ "phase": "Running", "podIP": "10.244.1.86" });
        let patch = status_patch(Some("928a-uid"), &status);
        assert_eq!(patch["metadata"]["uid"], "928a-uid");
        assert_eq!(patch["status"]["phase"], "Running");
        assert_eq!(patch["status"]["podIP"], "10.244.1.86");
    }
}
