//! The pod status built from the container records: phase, container statuses, conditions
//! (PodScheduled, PodReadyToStartContainers, Initialized, ContainersReady, Ready), IPs.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{HostIP, PodCondition, PodIP, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::phase::{InitProgress, Phase};
use crate::record::{ContainerRecord, RunState};

/// What the pod conditions are computed from.
#[derive(Clone, Debug)]
pub struct ConditionInput<'a> {
    /// The phase.
    pub phase: Phase,
    /// The init containers' progress.
    pub init: InitProgress,
    /// Init container records.
    pub init_records: &'a [ContainerRecord],
    /// Regular container records.
    pub records: &'a [ContainerRecord],
    /// Readiness gates not `True` yet.
    pub unready_gates: Vec<String>,
    /// Conditions reported before, for their transition times.
    pub previous: &'a [PodCondition],
    /// Now.
    pub now: Timestamp,
}

/// The kubelet-owned pod conditions.
pub fn pod_conditions(input: &ConditionInput<'_>) -> Vec<PodCondition> {
    let make = |type_: &str, ok: bool, reason: Option<&str>, message: Option<String>| {
        let status = if ok { "True" } else { "False" };
        let since = input
            .previous
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or(Time(input.now));
        PodCondition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: if ok { None } else { reason.map(str::to_string) },
            message: if ok { None } else { message },
            last_transition_time: Some(since),
            ..Default::default()
        }
    };
    let terminal = input.phase.is_terminal();
    let incomplete: Vec<&str> = input
        .init_records
        .iter()
        .filter(|r| !matches!(&r.state, RunState::Terminated(t) if t.exit_code == 0))
        .map(|r| r.name.as_str())
        .collect();
    let unready: Vec<&str> = input
        .records
        .iter()
        .filter(|r| !r.ready)
        .map(|r| r.name.as_str())
        .collect();
    let initialized = input.init == InitProgress::Done;
    let containers_ready = unready.is_empty() && !terminal;
    let not_ready_reason = if input.phase == Phase::Succeeded {
        "PodCompleted"
    } else {
        "ContainersNotReady"
    };
    let unready_message = Some(format!(
        "containers with unready status: [{}]",
        unready.join(" ")
    ));
    let ready = containers_ready && input.unready_gates.is_empty();
    let (ready_reason, ready_message) = if containers_ready {
        (
            "ReadinessGatesNotReady",
            Some(format!(
                "corresponding condition of pod readiness gate \"{}\" does not exist or is not True",
                input.unready_gates.join("\", \"")
            )),
        )
    } else {
        (not_ready_reason, unready_message.clone())
    };
    vec![
        make("PodReadyToStartContainers", !terminal, None, None),
        make(
            "Initialized",
            initialized,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: [{}]",
                incomplete.join(" ")
            )),
        ),
        make("Ready", ready, Some(ready_reason), ready_message),
        make(
            "ContainersReady",
            containers_ready,
            Some(not_ready_reason),
            unready_message,
        ),
        make("PodScheduled", true, None, None),
    ]
}

/// Everything the pod status is built from.
#[derive(Clone, Debug)]
pub struct StatusInput<'a> {
    /// The phase.
    pub phase: Phase,
    /// The pod's address.
    pub pod_ip: String,
    /// The node's address.
    pub host_ip: String,
    /// When the node accepted the pod.
    pub start_time: Timestamp,
    /// Init container records.
    pub init_records: &'a [ContainerRecord],
    /// Regular container records.
    pub records: &'a [ContainerRecord],
    /// The conditions, from [`pod_conditions`].
    pub conditions: Vec<PodCondition>,
    /// `metadata.generation` of the pod spec acted on.
    pub observed_generation: Option<i64>,
}

/// The pod status a kubelet would report.
pub fn pod_status(input: StatusInput<'_>) -> PodStatus {
    PodStatus {
        phase: Some(input.phase.as_str().to_string()),
        conditions: Some(input.conditions),
        pod_ip: Some(input.pod_ip.clone()),
        pod_ips: Some(vec![PodIP { ip: input.pod_ip }]),
        host_ip: Some(input.host_ip.clone()),
        host_ips: Some(vec![HostIP { ip: input.host_ip }]),
        start_time: Some(Time(input.start_time)),
        init_container_statuses: Some(
            input
                .init_records
                .iter()
                .map(ContainerRecord::to_api)
                .collect(),
        ),
        container_statuses: Some(input.records.iter().map(ContainerRecord::to_api).collect()),
        observed_generation: input.observed_generation,
        ..Default::default()
    }
}

/// Conditions are merged by type in a strategic merge patch, so a field left out would keep
/// its old value: send the optional fields a condition lacks as explicit nulls.
pub fn clear_absent_condition_fields(status: &serde_json::Value) -> serde_json::Value {
    let mut status = status.clone();
    if let Some(conditions) = status.get_mut("conditions").and_then(|c| c.as_array_mut()) {
        for condition in conditions.iter_mut().filter_map(|c| c.as_object_mut()) {
            for field in ["reason", "message"] {
                condition.entry(field).or_insert(serde_json::Value::Null);
            }
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Terminated;

    fn input<'a>(
        phase: Phase,
        records: &'a [ContainerRecord],
        previous: &'a [PodCondition],
    ) -> ConditionInput<'a> {
        ConditionInput {
            phase,
            init: InitProgress::Done,
            init_records: &[],
            records,
            unready_gates: vec![],
            previous,
            now: Timestamp::from_second(1000).unwrap(),
        }
    }

    fn get<'a>(conds: &'a [PodCondition], t: &str) -> &'a PodCondition {
        conds.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn running_ready_containers_make_pod_ready() {
        let records = [ContainerRecord::ready_running("etcd")];
        let conds = pod_conditions(&input(Phase::Running, &records, &[]));
        for t in [
            "PodScheduled",
            "Initialized",
            "ContainersReady",
            "Ready",
            "PodReadyToStartContainers",
        ] {
            assert_eq!(get(&conds, t).status, "True", "{t}");
        }
    }

    #[test]
    fn unready_container_is_named_in_ready_condition() {
        let mut r = ContainerRecord::ready_running("etcd");
        r.ready = false;
        let records = [r];
        let conds = pod_conditions(&input(Phase::Running, &records, &[]));
        let ready = get(&conds, "Ready");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some("containers with unready status: [etcd]")
        );
    }

    #[test]
    fn pending_init_containers_are_listed() {
        let init = [ContainerRecord::new(
            "wait-dns",
            "busybox",
            "PodInitializing",
        )];
        let records = [ContainerRecord::new("etcd", "etcd", "PodInitializing")];
        let mut i = input(Phase::Pending, &records, &[]);
        i.init = InitProgress::Pending;
        i.init_records = &init;
        let conds = pod_conditions(&i);
        let c = get(&conds, "Initialized");
        assert_eq!(c.status, "False");
        assert_eq!(
            c.message.as_deref(),
            Some("containers with incomplete status: [wait-dns]")
        );
    }

    #[test]
    fn transition_time_is_kept_while_status_is_unchanged() {
        let records = [ContainerRecord::ready_running("etcd")];
        let first = pod_conditions(&input(Phase::Running, &records, &[]));
        let mut later = input(Phase::Running, &records, &first);
        later.now = Timestamp::from_second(2000).unwrap();
        let second = pod_conditions(&later);
        assert_eq!(first, second);
        let mut r = ContainerRecord::ready_running("etcd");
        r.ready = false;
        let unready = [r];
        let mut changed = input(Phase::Running, &unready, &second);
        changed.now = Timestamp::from_second(3000).unwrap();
        let third = pod_conditions(&changed);
        assert_eq!(
            get(&third, "Ready").last_transition_time,
            Some(Time(Timestamp::from_second(3000).unwrap()))
        );
        assert_eq!(
            get(&third, "PodScheduled").last_transition_time,
            get(&first, "PodScheduled").last_transition_time
        );
    }

    #[test]
    fn unready_gate_blocks_ready_but_not_containers_ready() {
        let records = [ContainerRecord::ready_running("etcd")];
        let mut i = input(Phase::Running, &records, &[]);
        i.unready_gates = vec!["example.com/gate".into()];
        let conds = pod_conditions(&i);
        assert_eq!(get(&conds, "ContainersReady").status, "True");
        assert_eq!(get(&conds, "Ready").status, "False");
        assert_eq!(
            get(&conds, "Ready").reason.as_deref(),
            Some("ReadinessGatesNotReady")
        );
    }

    #[test]
    fn terminal_pod_is_not_ready() {
        let mut r = ContainerRecord::new("etcd", "img", "x");
        r.state = RunState::Terminated(Terminated::from_exit(
            None,
            Some(9),
            None,
            Timestamp::UNIX_EPOCH,
            None,
        ));
        let records = [r];
        let conds = pod_conditions(&input(Phase::Failed, &records, &[]));
        assert_eq!(get(&conds, "Ready").status, "False");
        assert_eq!(get(&conds, "PodReadyToStartContainers").status, "False");
    }

    #[test]
    fn pod_status_carries_ips_and_phase() {
        let records = [ContainerRecord::ready_running("etcd")];
        let status = pod_status(StatusInput {
            phase: Phase::Running,
            pod_ip: "127.0.1.4".into(),
            host_ip: "127.0.0.1".into(),
            start_time: Timestamp::UNIX_EPOCH,
            init_records: &[],
            records: &records,
            conditions: vec![],
            observed_generation: Some(3),
        });
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.pod_ip.as_deref(), Some("127.0.1.4"));
        assert_eq!(status.pod_ips.unwrap()[0].ip, "127.0.1.4");
        assert_eq!(status.host_ip.as_deref(), Some("127.0.0.1"));
        assert_eq!(status.container_statuses.unwrap().len(), 1);
    }

    #[test]
    fn absent_condition_reason_and_message_become_null() {
        let status = serde_json::json!({
            "phase": "Running",
            "conditions": [
                { "type": "Ready", "status": "True" },
                { "type": "Initialized", "status": "False", "reason": "X", "message": "m" },
            ],
        });
        let patched = clear_absent_condition_fields(&status);
        assert_eq!(patched["conditions"][0]["reason"], serde_json::Value::Null);
        assert!(
            patched["conditions"][0]
                .as_object()
                .unwrap()
                .contains_key("message")
        );
        assert_eq!(patched["conditions"][1]["reason"], "X");
        assert_eq!(patched["phase"], "Running");
    }
}
