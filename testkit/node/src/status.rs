//! Container records and the pod status built from them: container statuses, conditions
//! (PodScheduled, PodReadyToStartContainers, Initialized, ContainersReady, Ready), IPs.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::phase::{InitProgress, Phase};

/// How a container process ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Terminated {
    /// Exit code; 128+N when killed by signal N.
    pub exit_code: i32,
    /// The signal that killed it, if any.
    pub signal: Option<i32>,
    /// `Completed` for exit code 0, else `Error` (or a node-specific reason).
    pub reason: String,
    /// Extra detail.
    pub message: Option<String>,
    /// When it started, if known.
    pub started_at: Option<Timestamp>,
    /// When it ended.
    pub finished_at: Timestamp,
    /// `process://<pid>`, if known.
    pub container_id: Option<String>,
}

impl Terminated {
    /// The record of an exit with `code` or by `signal`.
    pub fn from_exit(
        code: Option<i32>,
        signal: Option<i32>,
        started_at: Option<Timestamp>,
        finished_at: Timestamp,
        container_id: Option<String>,
    ) -> Terminated {
        let exit_code = code.unwrap_or_else(|| 128 + signal.unwrap_or(0));
        Terminated {
            exit_code,
            signal,
            reason: if exit_code == 0 { "Completed" } else { "Error" }.to_string(),
            message: None,
            started_at,
            finished_at,
            container_id,
        }
    }

    fn to_api(&self) -> ContainerStateTerminated {
        ContainerStateTerminated {
            container_id: self.container_id.clone(),
            exit_code: self.exit_code,
            signal: self.signal,
            reason: Some(self.reason.clone()),
            message: self.message.clone(),
            started_at: self.started_at.map(Time),
            finished_at: Some(Time(self.finished_at)),
        }
    }

    fn from_api(t: &ContainerStateTerminated) -> Terminated {
        Terminated {
            exit_code: t.exit_code,
            signal: t.signal,
            reason: t.reason.clone().unwrap_or_else(|| "Error".to_string()),
            message: t.message.clone(),
            started_at: t.started_at.as_ref().map(|x| x.0),
            finished_at: t
                .finished_at
                .as_ref()
                .map(|x| x.0)
                .unwrap_or_else(Timestamp::now),
            container_id: t.container_id.clone(),
        }
    }
}

/// A container's current state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Not running: not started yet, backing off, or unable to start.
    Waiting {
        /// Why (`ContainerCreating`, `PodInitializing`, `ErrImagePull`, `CrashLoopBackOff`...).
        reason: String,
        /// Detail.
        message: Option<String>,
    },
    /// Its process runs.
    Running {
        /// When the process started.
        started_at: Timestamp,
        /// `process://<pid>`.
        container_id: String,
    },
    /// Its process ended and will not be restarted (for now).
    Terminated(Terminated),
}

/// Everything the node reports about one container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerRecord {
    /// Container name.
    pub name: String,
    /// The image of the spec.
    pub image: String,
    /// What the image resolved to, empty until it did.
    pub image_id: String,
    /// Current state.
    pub state: RunState,
    /// How the previous process of this container ended.
    pub last_termination: Option<Terminated>,
    /// How many times it was restarted.
    pub restart_count: i32,
    /// Whether it is ready (readiness probe passed, or running without one).
    pub ready: bool,
}

impl ContainerRecord {
    /// A container not started yet, waiting for `reason`.
    pub fn new(name: &str, image: &str, reason: &str) -> ContainerRecord {
        ContainerRecord {
            name: name.to_string(),
            image: image.to_string(),
            image_id: String::new(),
            state: RunState::Waiting {
                reason: reason.to_string(),
                message: None,
            },
            last_termination: None,
            restart_count: 0,
            ready: false,
        }
    }

    /// Whether its process runs.
    pub fn is_running(&self) -> bool {
        matches!(self.state, RunState::Running { .. })
    }

    /// Sets a waiting state.
    pub fn wait(&mut self, reason: &str, message: Option<String>) {
        self.state = RunState::Waiting {
            reason: reason.to_string(),
            message,
        };
        self.ready = false;
    }

    /// The record as it was reported before (used when the node restarts).
    pub fn from_api(status: &ContainerStatus) -> ContainerRecord {
        let state = status.state.as_ref();
        let run_state = if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
            RunState::Terminated(Terminated::from_api(t))
        } else if let Some(r) = state.and_then(|s| s.running.as_ref()) {
            RunState::Running {
                started_at: r
                    .started_at
                    .as_ref()
                    .map(|x| x.0)
                    .unwrap_or_else(Timestamp::now),
                container_id: status.container_id.clone().unwrap_or_default(),
            }
        } else {
            let w = state.and_then(|s| s.waiting.as_ref());
            RunState::Waiting {
                reason: w
                    .and_then(|w| w.reason.clone())
                    .unwrap_or_else(|| "ContainerCreating".to_string()),
                message: w.and_then(|w| w.message.clone()),
            }
        };
        ContainerRecord {
            name: status.name.clone(),
            image: status.image.clone(),
            image_id: status.image_id.clone(),
            state: run_state,
            last_termination: status
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .map(Terminated::from_api),
            restart_count: status.restart_count,
            ready: status.ready,
        }
    }

    /// The API's container status.
    pub fn to_api(&self) -> ContainerStatus {
        let (state, container_id) = match &self.state {
            RunState::Waiting { reason, message } => (
                ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some(reason.clone()),
                        message: message.clone(),
                    }),
                    ..Default::default()
                },
                None,
            ),
            RunState::Running {
                started_at,
                container_id,
            } => (
                ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(Time(*started_at)),
                    }),
                    ..Default::default()
                },
                Some(container_id.clone()),
            ),
            RunState::Terminated(t) => (
                ContainerState {
                    terminated: Some(t.to_api()),
                    ..Default::default()
                },
                t.container_id.clone(),
            ),
        };
        ContainerStatus {
            name: self.name.clone(),
            image: self.image.clone(),
            image_id: self.image_id.clone(),
            container_id,
            ready: self.ready,
            restart_count: self.restart_count,
            started: Some(self.is_running()),
            state: Some(state),
            last_state: Some(ContainerState {
                terminated: self.last_termination.as_ref().map(Terminated::to_api),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

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

    fn ready_running(name: &str) -> ContainerRecord {
        let mut r = ContainerRecord::new(name, "img", "ContainerCreating");
        r.state = RunState::Running {
            started_at: Timestamp::UNIX_EPOCH,
            container_id: "process://42".into(),
        };
        r.ready = true;
        r
    }

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
        let records = [ready_running("etcd")];
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
        let mut r = ready_running("etcd");
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
        let records = [ready_running("etcd")];
        let first = pod_conditions(&input(Phase::Running, &records, &[]));
        let mut later = input(Phase::Running, &records, &first);
        later.now = Timestamp::from_second(2000).unwrap();
        let second = pod_conditions(&later);
        assert_eq!(first, second);
        let mut r = ready_running("etcd");
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
        let records = [ready_running("etcd")];
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
    fn killed_by_signal_reports_128_plus_signal_and_error() {
        let t = Terminated::from_exit(None, Some(9), None, Timestamp::UNIX_EPOCH, None);
        assert_eq!(t.exit_code, 137);
        assert_eq!(t.reason, "Error");
        let t = Terminated::from_exit(Some(0), None, None, Timestamp::UNIX_EPOCH, None);
        assert_eq!(t.reason, "Completed");
    }

    #[test]
    fn container_status_round_trips_through_the_api_shape() {
        let mut r = ready_running("etcd");
        r.restart_count = 2;
        r.last_termination = Some(Terminated::from_exit(
            Some(1),
            None,
            Some(Timestamp::UNIX_EPOCH),
            Timestamp::from_second(5).unwrap(),
            Some("process://7".into()),
        ));
        let api = r.to_api();
        assert_eq!(api.container_id.as_deref(), Some("process://42"));
        assert_eq!(api.started, Some(true));
        assert_eq!(ContainerRecord::from_api(&api), r);
    }

    #[test]
    fn pod_status_carries_ips_and_phase() {
        let records = [ready_running("etcd")];
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
