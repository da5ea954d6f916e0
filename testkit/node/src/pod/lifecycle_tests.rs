//! The pod lifecycle's pure steps, on containers built from a pod spec.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use serde_json::json;
use tokio::time::Instant;

use super::lifecycle::*;
use super::slot::{Kind, Proc, StopWhy};
use crate::phase::Phase;
use crate::record::RunState;
use crate::restart::RestartPolicy;

const GRACE: Duration = Duration::from_secs(5);

fn spec(init: &[&str], main: &[(&str, &str)]) -> PodSpec {
    let init: Vec<_> = init
        .iter()
        .map(|n| json!({ "name": n, "image": "busybox:1.36" }))
        .collect();
    let main: Vec<_> = main
        .iter()
        .map(|(n, image)| json!({ "name": n, "image": image }))
        .collect();
    serde_json::from_value(json!({ "initContainers": init, "containers": main })).unwrap()
}

fn restarts(policy: RestartPolicy) -> Restarts<'static> {
    Restarts {
        policy,
        pod_name: "m1",
    }
}

/// Gives the container a running process of `image`.
fn run(containers: &mut Containers, kind: Kind, i: usize, image: &str, generation: u64) {
    let slot = containers.slot_mut(kind, i);
    slot.record.state = RunState::Running {
        started_at: Timestamp::UNIX_EPOCH,
        container_id: format!("process://{}", 100 + generation),
    };
    slot.record.ready = true;
    slot.proc = Some(Proc {
        pid: 100 + generation as i32,
        generation,
        image: image.to_string(),
        started_at: Timestamp::UNIX_EPOCH,
    });
}

fn exit(generation: u64, code: i32) -> Exit {
    Exit {
        generation,
        code: Some(code),
        signal: None,
        message: None,
    }
}

fn waiting_reason(containers: &Containers, kind: Kind, i: usize) -> String {
    match &containers.slots(kind)[i].record.state {
        RunState::Waiting { reason, .. } => reason.clone(),
        other => panic!("not waiting: {other:?}"),
    }
}

#[test]
fn init_containers_start_one_at_a_time_before_the_containers() {
    let spec = spec(&["a", "b"], &[("etcd", "etcd:v3.4.23")]);
    let mut c = Containers::of(&spec, &PodStatus::default());
    let now = Instant::now();
    let plan1 = plan(&mut c, RestartPolicy::Always, Some(&spec), GRACE, now);
    assert_eq!(plan1, [Effect::Start(Kind::Init, 0)]);
    run(&mut c, Kind::Init, 0, "busybox:1.36", 0);
    assert_eq!(
        plan(&mut c, RestartPolicy::Always, Some(&spec), GRACE, now),
        []
    );
    let at = Timestamp::now();
    exited(&mut c, exit(0, 0), restarts(RestartPolicy::Always), at, now).unwrap();
    let plan2 = plan(&mut c, RestartPolicy::Always, Some(&spec), GRACE, now);
    assert_eq!(plan2, [Effect::Start(Kind::Init, 1)]);
    run(&mut c, Kind::Init, 1, "busybox:1.36", 1);
    exited(&mut c, exit(1, 0), restarts(RestartPolicy::Always), at, now).unwrap();
    let plan3 = plan(&mut c, RestartPolicy::Always, Some(&spec), GRACE, now);
    assert_eq!(plan3, [Effect::Start(Kind::Main, 0)]);
}

#[test]
fn expired_grace_period_kills_the_process_group_once() {
    let spec = spec(&[], &[("etcd", "etcd:v3.4.23")]);
    let mut c = Containers::of(&spec, &PodStatus::default());
    run(&mut c, Kind::Main, 0, "etcd:v3.4.23", 7);
    let now = Instant::now();
    c.main[0].kill_at = Some(now);
    let effects = plan(&mut c, RestartPolicy::Always, Some(&spec), GRACE, now);
    assert_eq!(effects, [Effect::Kill { pid: 107 }]);
    assert_eq!(c.main[0].kill_at, None);
    assert_eq!(
        plan(&mut c, RestartPolicy::Always, Some(&spec), GRACE, now),
        []
    );
}

#[test]
fn image_change_stops_the_process_then_starts_the_new_image_at_once() {
    let old = spec(&[], &[("etcd", "etcd:v3.4.23")]);
    let new = spec(&[], &[("etcd", "etcd:v3.5.35")]);
    let mut c = Containers::of(&old, &PodStatus::default());
    run(&mut c, Kind::Main, 0, "etcd:v3.4.23", 3);
    let now = Instant::now();
    let effects = plan(&mut c, RestartPolicy::Never, Some(&new), GRACE, now);
    let stop = Effect::StopForImage {
        name: "etcd".into(),
        pid: 103,
        from: "etcd:v3.4.23".into(),
        to: "etcd:v3.5.35".into(),
        grace: GRACE,
    };
    assert_eq!(effects, [stop]);
    let slot = &c.main[0];
    assert_eq!(slot.stopping, Some(StopWhy::ImageChange));
    assert_eq!(slot.kill_at, Some(now + GRACE));
    assert!(!slot.record.ready);
    assert_eq!(
        plan(&mut c, RestartPolicy::Never, Some(&new), GRACE, now),
        []
    );

    let ended = exited(
        &mut c,
        exit(3, 143),
        restarts(RestartPolicy::Never),
        Timestamp::now(),
        now,
    );
    assert_eq!(
        ended.map(|e| (e.name, e.pid)),
        Some(("etcd".to_string(), 103))
    );
    assert_eq!(waiting_reason(&c, Kind::Main, 0), "ContainerCreating");
    assert_eq!(c.main[0].record.restart_count, 1);
    assert_eq!(c.main[0].kill_at, None);
    let effects = plan(&mut c, RestartPolicy::Never, Some(&new), GRACE, now);
    assert_eq!(effects, [Effect::Start(Kind::Main, 0)]);
}

/// A running etcd container under `Always`, restarted `restarts_before` times so far, that
/// exits with code 1 at the instant returned.
fn exits_under_always(restarts_before: i32) -> (Containers, PodSpec, Instant) {
    let spec = spec(&[], &[("etcd", "etcd:v3.4.23")]);
    let mut c = Containers::of(&spec, &PodStatus::default());
    run(&mut c, Kind::Main, 0, "etcd:v3.4.23", 0);
    c.main[0].record.restart_count = restarts_before;
    let now = Instant::now();
    exited(
        &mut c,
        exit(0, 1),
        restarts(RestartPolicy::Always),
        Timestamp::now(),
        now,
    )
    .unwrap();
    (c, spec, now)
}

#[test]
fn a_containers_first_exit_under_always_is_restarted_at_once_as_a_kubelet_does() {
    let (mut c, spec, now) = exits_under_always(0);
    assert_eq!(waiting_reason(&c, Kind::Main, 0), "ContainerCreating");
    assert_eq!(c.main[0].record.restart_count, 1);
    let effects = plan(&mut c, RestartPolicy::Always, Some(&spec), GRACE, now);
    assert_eq!(effects, [Effect::Start(Kind::Main, 0)]);
}

#[test]
fn crash_under_always_waits_out_the_back_off_before_restarting() {
    // Its second exit: the first was restarted at once.
    let (mut c, spec, now) = exits_under_always(1);
    assert_eq!(waiting_reason(&c, Kind::Main, 0), "CrashLoopBackOff");
    assert_eq!(c.main[0].record.restart_count, 2);
    assert_eq!(
        c.main[0]
            .record
            .last_termination
            .as_ref()
            .map(|t| t.exit_code),
        Some(1)
    );
    assert_eq!(
        plan(&mut c, RestartPolicy::Always, Some(&spec), GRACE, now),
        []
    );
    let later = now + Duration::from_secs(1);
    let effects = plan(&mut c, RestartPolicy::Always, Some(&spec), GRACE, later);
    assert_eq!(effects, [Effect::Start(Kind::Main, 0)]);
    assert_eq!(finished(&c, RestartPolicy::Always), None);
}

#[test]
fn exit_under_never_finishes_the_pod_with_the_exit_code() {
    let spec = spec(&[], &[("etcd", "etcd:v3.4.23")]);
    let mut c = Containers::of(&spec, &PodStatus::default());
    run(&mut c, Kind::Main, 0, "etcd:v3.4.23", 0);
    let killed = Exit {
        generation: 0,
        code: None,
        signal: Some(9),
        message: None,
    };
    let ended = exited(
        &mut c,
        killed,
        restarts(RestartPolicy::Never),
        Timestamp::now(),
        Instant::now(),
    );
    assert_eq!(ended.map(|e| e.term.exit_code), Some(137));
    assert_eq!(finished(&c, RestartPolicy::Never), Some(Phase::Failed));
}

#[test]
fn exit_of_a_process_that_is_not_current_is_ignored() {
    let spec = spec(&[], &[("etcd", "etcd:v3.4.23")]);
    let mut c = Containers::of(&spec, &PodStatus::default());
    run(&mut c, Kind::Main, 0, "etcd:v3.4.23", 5);
    let ended = exited(
        &mut c,
        exit(4, 1),
        restarts(RestartPolicy::Always),
        Timestamp::now(),
        Instant::now(),
    );
    assert_eq!(ended, None);
    assert!(c.main[0].record.is_running());
}

#[test]
fn image_that_could_not_be_pulled_waits_for_another_image() {
    let spec = spec(&[], &[("web", "nginx:1.25")]);
    let mut c = Containers::of(&spec, &PodStatus::default());
    c.main[0].record.wait("ErrImagePull", None);
    c.main[0].blocked_image = Some("nginx:1.25".into());
    let now = Instant::now();
    assert_eq!(
        plan(&mut c, RestartPolicy::Never, Some(&spec), GRACE, now),
        []
    );
    let fixed = spec_with_image("web", "busybox:1.36");
    let effects = plan(&mut c, RestartPolicy::Never, Some(&fixed), GRACE, now);
    assert_eq!(effects, [Effect::Start(Kind::Main, 0)]);
}

fn spec_with_image(name: &str, image: &str) -> PodSpec {
    spec(&[], &[(name, image)])
}

#[test]
fn failed_init_container_under_never_finishes_the_pod_failed() {
    let spec = spec(&["check"], &[("etcd", "etcd:v3.4.23")]);
    let mut c = Containers::of(&spec, &PodStatus::default());
    run(&mut c, Kind::Init, 0, "busybox:1.36", 0);
    let now = Instant::now();
    exited(
        &mut c,
        exit(0, 3),
        restarts(RestartPolicy::Never),
        Timestamp::now(),
        now,
    )
    .unwrap();
    assert_eq!(
        plan(&mut c, RestartPolicy::Never, Some(&spec), GRACE, now),
        []
    );
    assert_eq!(finished(&c, RestartPolicy::Never), Some(Phase::Failed));
}

#[test]
fn containers_running_before_a_node_restart_are_treated_as_exited_unknown() {
    let spec = spec(
        &[],
        &[("etcd", "etcd:v3.4.23"), ("sidecar", "busybox:1.36")],
    );
    let status: PodStatus = serde_json::from_value(json!({
        "containerStatuses": [
            { "name": "etcd", "image": "etcd:v3.4.23", "imageID": "", "ready": true,
              "restartCount": 0, "containerID": "process://42",
              "state": { "running": { "startedAt": "2024-01-01T00:00:00Z" } } },
            { "name": "sidecar", "image": "busybox:1.36", "imageID": "", "ready": false,
              "restartCount": 0, "state": { "waiting": { "reason": "ContainerCreating" } } },
        ],
    }))
    .unwrap();
    let mut c = Containers::of(&spec, &status);
    let names = recover(
        &mut c,
        restarts(RestartPolicy::Never),
        Timestamp::now(),
        Instant::now(),
    );
    assert_eq!(names, ["etcd"]);
    let RunState::Terminated(term) = &c.main[0].record.state else {
        panic!("etcd not terminated: {:?}", c.main[0].record.state);
    };
    assert_eq!((term.exit_code, term.reason.as_str()), (255, "Unknown"));
    assert_eq!(term.container_id.as_deref(), Some("process://42"));
    assert_eq!(waiting_reason(&c, Kind::Main, 1), "ContainerCreating");
}

#[test]
fn deletion_grace_period_replaces_the_pod_spec_one_only_when_deleting() {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "m1", "deletionGracePeriodSeconds": 2 },
        "spec": { "containers": [], "terminationGracePeriodSeconds": 7 },
    }))
    .unwrap();
    assert_eq!(grace_period(&pod, true), Duration::from_secs(2));
    assert_eq!(grace_period(&pod, false), Duration::from_secs(7));
    assert_eq!(
        grace_period(&Pod::default(), false),
        Duration::from_secs(30)
    );
}

#[test]
fn only_a_failed_container_that_asks_for_it_gets_its_log_as_termination_message() {
    let mut container = k8s_openapi::api::core::v1::Container {
        name: "etcd".into(),
        ..k8s_openapi::api::core::v1::Container::default()
    };
    assert!(!log_is_termination_message(&container, Some(1)));
    container.termination_message_policy = Some("FallbackToLogsOnError".into());
    assert!(log_is_termination_message(&container, Some(1)));
    assert!(
        log_is_termination_message(&container, None),
        "killed by a signal"
    );
    assert!(!log_is_termination_message(&container, Some(0)));
}

#[test]
fn an_exits_message_is_the_terminated_states_message() {
    let spec = spec(&[], &[("etcd", "etcd:v3.4.23")]);
    let mut c = Containers::of(&spec, &PodStatus::default());
    run(&mut c, Kind::Main, 0, "etcd:v3.4.23", 7);
    let mut failed = exit(7, 2);
    failed.message = Some("panic: wal: crc mismatch".into());
    let ended = exited(
        &mut c,
        failed,
        restarts(RestartPolicy::Always),
        Timestamp::now(),
        Instant::now(),
    )
    .unwrap();
    assert_eq!(
        ended.term.message.as_deref(),
        Some("panic: wal: crc mismatch")
    );
}
