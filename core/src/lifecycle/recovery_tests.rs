//! Recovery from a permanent loss of quorum: every case of the decision.

use std::time::Duration;

use tokio::time::Instant;

use super::fixtures::{
    CLUSTER_ID, World, assert_idle, assert_idle_saying, assert_no_action, assert_reason,
    running_state,
};
use super::*;
use crate::api_error::ApiError;

const VERSION: &str = "3.5.35";
const DEADLINE: Duration = Duration::from_secs(60);

fn spec(policy: RecoveryPolicy) -> DesiredCluster {
    let mut spec = DesiredCluster::new(3, VERSION);
    spec.recovery = RecoverySpec {
        policy,
        requested: None,
        quorum_loss: DEADLINE,
        ..RecoverySpec::default()
    };
    spec
}

/// A spec under the Manual policy whose annotation requests one `policy` recovery.
fn requested(policy: RecoveryPolicy) -> DesiredCluster {
    let mut spec = spec(RecoveryPolicy::Manual);
    spec.recovery.requested = Some(policy);
    spec
}

/// A spec under `policy` whose recorded recovery fails `secs` after it began.
fn failing_after(policy: RecoveryPolicy, secs: u64) -> DesiredCluster {
    let mut spec = spec(policy);
    spec.recovery.deadline = Duration::from_secs(secs);
    spec
}

/// The decision does nothing, for `reason`, and its message says each of `words`.
fn assert_idle_saying_each(d: &Decision, reason: Reason, words: &[&str]) {
    assert_idle(d, reason);
    for words in words {
        assert!(d.why.message.contains(words), "{words}: {}", d.why.message);
    }
}

/// The decision times no loss of quorum: no deadline toward a recovery runs.
fn assert_no_loss_timed(d: &Decision) {
    assert!(d.state.quorum_lost_since.is_none(), "{}", d.why.message);
}

fn run(state: State, obs: &Observation, spec: &DesiredCluster) -> Decision {
    decide(state, obs, spec, &Deadlines::default())
}

/// Member `name` is gone with its data: no pod, no claim, no answer.
fn gone(obs: &mut Observation, id: u64, name: &str) {
    obs.pods.retain(|p| p.name != name);
    obs.claims.remove(name);
    obs.health
        .insert(id, MemberHealth::unreachable("connection refused"));
}

/// Member `id` does not answer (its pod may still run).
fn silent(obs: &mut Observation, id: u64) {
    obs.health
        .insert(id, MemberHealth::unreachable("deadline exceeded"));
}

/// Member `id` answers its status call with `raft_index` and `revision`, and no leader.
fn answers(obs: &mut Observation, id: u64, raft_index: u64, revision: i64) {
    let health = obs.health.get_mut(&id).unwrap();
    health.leader = None;
    health.raft_index = Some(raft_index);
    health.revision = Some(revision);
}

/// Members `m1..m<n>` on claims; those in `lost` gone with their data, the others
/// answering with raft index `100 * id` and revision `10 * id`.
fn losing(now: Instant, n: u64, lost: &[u64]) -> Observation {
    let mut obs = World::healthy(now, n, VERSION)
        .on_volumes()
        .bootstrapped()
        .build();
    for id in 1..=n {
        if lost.contains(&id) {
            gone(&mut obs, id, &format!("m{id}"));
        } else {
            answers(&mut obs, id, 100 * id, 10 * i64::try_from(id).unwrap());
        }
    }
    obs
}

/// The decision once the loss in `at(now)` has lasted past the deadline.
fn after_deadline(
    at: impl Fn(Instant) -> Observation,
    spec: &DesiredCluster,
) -> (Decision, Decision) {
    let t0 = Instant::now();
    let first = run(running_state(), &at(t0), spec);
    let later = run(
        first.state.clone(),
        &at(t0 + DEADLINE + Duration::from_secs(1)),
        spec,
    );
    (first, later)
}

fn begun(d: &Decision) -> &RecoveryRecord {
    match d.actions.first() {
        Some(Action::BeginRecovery { record }) => record,
        other => panic!(
            "expected BeginRecovery first, got {other:?} ({})",
            d.why.message
        ),
    }
}

#[test]
fn before_the_deadline_a_permanent_loss_is_only_reported() {
    let spec = spec(RecoveryPolicy::FromSurvivor);
    let t0 = Instant::now();
    let d = run(running_state(), &losing(t0, 3, &[2, 3]), &spec);
    assert_idle_saying(&d, Reason::QuorumLost, "once the loss has lasted 60s");
    let almost = t0 + DEADLINE - Duration::from_secs(1);
    let d = run(d.state, &losing(almost, 3, &[2, 3]), &spec);
    assert_idle(&d, Reason::QuorumLost);
}

#[test]
fn members_that_may_come_back_are_never_recovered_from() {
    let spec = spec(RecoveryPolicy::FromSurvivor);
    // Their pods run but do not answer: not gone, merely unreachable.
    let unreachable = |now| {
        let mut obs = losing(now, 3, &[]);
        for id in [2, 3] {
            silent(&mut obs, id);
        }
        obs
    };
    let (_, d) = after_deadline(unreachable, &spec);
    assert_idle(&d, Reason::QuorumLost);
    assert_no_loss_timed(&d);
    // Their pods are gone but their claims keep their data: they are restarted on them.
    let on_claims = |now| {
        let mut obs = losing(now, 3, &[]);
        for (id, name) in [(2, "m2"), (3, "m3")] {
            obs.pods.retain(|p| p.name != name);
            obs.health
                .insert(id, MemberHealth::unreachable("connection refused"));
        }
        obs
    };
    let (_, d) = after_deadline(on_claims, &spec);
    assert_reason(&d, Reason::RestartingMembers);
    assert!(
        d.actions
            .iter()
            .all(|a| matches!(a, Action::RestartMember { .. })),
        "{:?}",
        d.actions
    );
}

#[test]
fn manual_reports_survivors_raft_index_revision_and_the_annotation_only() {
    let (_, d) = after_deadline(|now| losing(now, 3, &[2, 3]), &spec(RecoveryPolicy::Manual));
    let words = [
        "2 of 3 voting members are gone with their data (m2, m3)",
        "m1 (raft index 100, revision 10)",
        "etcd.database.coreos.com/recover=FromSurvivor",
    ];
    assert_idle_saying_each(&d, Reason::QuorumLost, &words);
}

#[test]
fn manual_without_any_survivor_offers_the_newest_backup_or_a_reseed() {
    let found = |now| total_loss(now, Some(Ok(backup(120, VERSION))));
    let (_, d) = after_deadline(found, &spec(RecoveryPolicy::Manual));
    let words = [
        "etcd.database.coreos.com/recover=FromBackup to restore the newest backup",
        "etcd.database.coreos.com/recover=Reseed",
    ];
    assert_idle_saying_each(&d, Reason::AllMembersLost, &words);
}

#[test]
fn the_annotation_triggers_a_recovery_under_a_manual_policy() {
    let spec = requested(RecoveryPolicy::FromSurvivor);
    let (first, d) = after_deadline(|now| losing(now, 3, &[2, 3]), &spec);
    assert_idle(&first, Reason::QuorumLost);
    assert_eq!(d.why.reason, Reason::RecoveringFromSurvivor);
    assert_eq!(begun(&d).survivor.as_deref(), Some("m1"));
}

#[test]
fn from_survivor_records_first_then_stops_the_survivor_with_the_highest_raft_index() {
    let five = |now| {
        let mut obs = losing(now, 5, &[1, 2, 5]);
        answers(&mut obs, 3, 900, 77);
        answers(&mut obs, 4, 400, 60);
        obs
    };
    let (_, d) = after_deadline(five, &spec(RecoveryPolicy::FromSurvivor));
    assert_eq!(d.state.phase, Phase::Recovering);
    let record = begun(&d);
    assert_eq!(record.policy, RecoveryPolicy::FromSurvivor);
    assert_eq!(record.survivor.as_deref(), Some("m3"));
    assert_eq!(record.raft_index, Some(900));
    assert_eq!(record.last_revision, Some(77));
    assert_eq!(record.lost, ["m1", "m2", "m5"]);
    assert_eq!(record.cluster_id, Some(CLUSTER_ID));
    assert!(!record.finished);
    assert_eq!(d.actions[1..], [Action::RecreatePod { name: "m3".into() }]);
}

#[test]
fn from_survivor_without_any_survivor_says_why_and_does_nothing() {
    let (_, d) = after_deadline(
        |now| total_loss(now, None),
        &spec(RecoveryPolicy::FromSurvivor),
    );
    assert_idle_saying(&d, Reason::RecoveryRefused, "no member survives with data");
}

#[test]
fn from_survivor_on_empty_dir_members_says_why_and_does_nothing() {
    let empty_dir = |now| {
        let mut obs = losing(now, 3, &[2, 3]);
        obs.claims.clear();
        obs
    };
    let (_, d) = after_deadline(empty_dir, &spec(RecoveryPolicy::FromSurvivor));
    assert_idle_saying(&d, Reason::RecoveryRefused, "emptyDir");
}

#[test]
fn from_survivor_refuses_an_etcd_whose_force_new_cluster_may_lose_committed_keys() {
    let old = |now| {
        let mut obs = losing(now, 3, &[2, 3]);
        obs.health.get_mut(&1).unwrap().version = "3.4.23".parse().ok();
        obs
    };
    let (_, d) = after_deadline(old, &spec(RecoveryPolicy::FromSurvivor));
    assert_idle_saying(&d, Reason::RecoveryRefused, "3.4.23");
    for (version, safe) in [
        ("3.4.23", false),
        ("3.5.21", false),
        ("3.5.35", true),
        ("3.5.40", true),
        ("3.6.0", false),
        ("3.6.16", true),
        ("3.7.0", true),
    ] {
        let v: Version = version.parse().unwrap();
        assert_eq!(force_new_cluster_is_safe(&v), safe, "{version}");
    }
}

#[test]
fn from_survivor_waits_for_a_survivor_that_does_not_report_its_raft_index() {
    let silent = |now| {
        let mut obs = losing(now, 5, &[1, 2, 3]);
        obs.health.get_mut(&4).unwrap().raft_index = None;
        obs
    };
    let (_, d) = after_deadline(silent, &spec(RecoveryPolicy::FromSurvivor));
    assert_idle_saying(&d, Reason::RecoveryRefused, "m4");
}

/// Every member gone with its data: no pod, no claim, no answer; the status remembers
/// `m1..m3` and revision 500.
fn total_loss(now: Instant, backup: Option<Result<SnapshotSource, ApiError>>) -> Observation {
    let mut obs = World::empty(now).bootstrapped().build();
    obs.recorded.members = vec!["m1".into(), "m2".into(), "m3".into()];
    obs.recorded.revision = Some(500);
    obs.newest_backup = backup;
    obs
}

fn backup(revision: i64, etcd_version: &str) -> SnapshotSource {
    SnapshotSource {
        bucket: "backups".into(),
        key: "demo/demo-r000000000120-20260101T000000Z.db".into(),
        endpoint: Some("http://127.0.0.1:9000".into()),
        force_path_style: true,
        secret: "s3-credentials".into(),
        sha256: "ab".repeat(32),
        size: 4096,
        etcd_version: etcd_version.into(),
        revision,
        cluster_id: None,
    }
}

#[test]
fn from_backup_without_a_backup_says_why_and_does_nothing() {
    let spec = spec(RecoveryPolicy::FromBackup);
    let (_, d) = after_deadline(|now| total_loss(now, None), &spec);
    let no_store = "spec.recovery.backup names no store";
    assert_idle_saying(&d, Reason::RecoveryRefused, no_store);
    let missing = |now| {
        total_loss(
            now,
            Some(Err(ApiError::NotFound(
                "no snapshot under backups/demo".into(),
            ))),
        )
    };
    let (_, d) = after_deadline(missing, &spec);
    assert_idle_saying(
        &d,
        Reason::RecoveryRefused,
        "no snapshot under backups/demo",
    );
}

#[test]
fn from_backup_refuses_a_backup_its_version_cannot_read() {
    let newer = |now| total_loss(now, Some(Ok(backup(120, "3.6.0"))));
    let (_, d) = after_deadline(newer, &spec(RecoveryPolicy::FromBackup));
    assert_idle_saying(&d, Reason::RecoveryRefused, "3.6.0");
}

#[test]
fn from_backup_never_throws_away_a_survivor_s_data() {
    let (_, d) = after_deadline(
        |now| losing(now, 3, &[2, 3]),
        &spec(RecoveryPolicy::FromBackup),
    );
    assert_idle_saying(&d, Reason::RecoveryRefused, "m1");
}

#[test]
fn from_backup_records_the_newest_backup_and_the_last_known_revision_first() {
    let found = |now| total_loss(now, Some(Ok(backup(120, VERSION))));
    let (_, d) = after_deadline(found, &spec(RecoveryPolicy::FromBackup));
    assert_reason(&d, Reason::RecoveringFromBackup);
    assert_eq!(d.actions.len(), 1, "{:?}", d.actions);
    let record = begun(&d);
    assert_eq!(record.backup, Some(backup(120, VERSION)));
    assert_eq!(record.last_revision, Some(500));
    assert_eq!(record.lost, ["m1", "m2", "m3"]);
    assert_eq!(record.seed, None, "named when it is recorded");
}

#[test]
fn a_prepared_joiner_left_from_a_replacement_does_not_keep_a_lost_cluster_from_its_backup() {
    // The last members went while a replacement's joiner waited for its member add: its
    // etcd never ran, so it holds nothing and no member answers there.
    let with_joiner = |now| {
        let mut obs = total_loss(now, Some(Ok(backup(120, VERSION))));
        let joiner = World::empty(now).prepared("m4", &["m1", "m2"]).build();
        obs.pods = joiner.pods;
        obs
    };
    let (_, d) = after_deadline(with_joiner, &spec(RecoveryPolicy::FromBackup));
    let record = begun(&d);
    assert_eq!(
        record.lost,
        ["m1", "m2", "m3"],
        "the joiner was never a member"
    );
}

#[test]
fn a_recovery_never_begins_on_the_tick_that_first_sees_the_loss() {
    // What that tick read of the store may predate the loss (answers are kept a while);
    // the next tick's was read after it began.
    let mut spec = spec(RecoveryPolicy::FromBackup);
    spec.recovery.quorum_loss = Duration::ZERO;
    let t0 = Instant::now();
    let first = run(
        running_state(),
        &total_loss(t0, Some(Ok(backup(120, VERSION)))),
        &spec,
    );
    assert_idle(&first, Reason::AllMembersLost);
    let next = total_loss(t0 + Duration::from_secs(1), Some(Ok(backup(120, VERSION))));
    let d = run(first.state, &next, &spec);
    assert_eq!(begun(&d).backup, Some(backup(120, VERSION)));
}

/// The record a recovery from survivor `m1` of a 3-member cluster wrote.
fn survivor_record(finished: bool) -> RecoveryRecord {
    RecoveryRecord {
        incident: format!("{CLUSTER_ID:x}: lost m2, m3"),
        policy: RecoveryPolicy::FromSurvivor,
        lost: vec!["m2".into(), "m3".into()],
        survivor: Some("m1".into()),
        raft_index: Some(100),
        version: Some(VERSION.into()),
        backup: None,
        last_revision: Some(10),
        restored_revision: finished.then_some(10),
        seed: None,
        token: None,
        cluster_id: Some(CLUSTER_ID),
        uid: None,
        finished,
        abandoned: false,
    }
}

#[test]
fn a_recovered_incident_is_never_recovered_again() {
    let recovered = |now| {
        let mut obs = losing(now, 3, &[2, 3]);
        obs.recorded.recovery = Some(survivor_record(true));
        obs
    };
    let (first, d) = after_deadline(recovered, &spec(RecoveryPolicy::FromSurvivor));
    for d in [first, d] {
        assert_idle_saying(&d, Reason::RecoveryRefused, "never repeated");
    }
}

#[test]
fn the_fence_lets_one_recovery_start_per_incident_and_only_its_own_finish() {
    let started = survivor_record(false);
    let finished = survivor_record(true);
    let other = RecoveryRecord {
        incident: "feed: lost every member".into(),
        ..survivor_record(false)
    };
    assert_eq!(check_fence(None, &started), Ok(()));
    assert!(check_fence(Some(&started), &started).is_err(), "twice");
    assert!(
        check_fence(Some(&started), &other).is_err(),
        "one at a time"
    );
    assert!(
        check_fence(Some(&finished), &started).is_err(),
        "same incident"
    );
    assert_eq!(check_fence(Some(&finished), &other), Ok(()));
    assert_eq!(check_fence(Some(&started), &finished), Ok(()));
    assert!(check_fence(None, &finished).is_err(), "nothing to finish");
    assert!(
        check_fence(Some(&finished), &finished).is_err(),
        "finished once"
    );
}

/// `m1` survives with its claim; `m2` and `m3` are gone; the status records the recovery.
fn recovering(now: Instant) -> Observation {
    let mut obs = losing(now, 3, &[2, 3]);
    obs.recorded.recovery = Some(survivor_record(false));
    obs
}

#[test]
fn a_recorded_recovery_from_a_survivor_stops_it_then_restarts_it_alone() {
    let spec = spec(RecoveryPolicy::FromSurvivor);
    let now = Instant::now();
    // Its pod from before the loss: stopped (the claim stays).
    let d = run(running_state(), &recovering(now), &spec);
    assert_eq!(d.actions, [Action::RecreatePod { name: "m1".into() }]);
    assert_eq!(d.why.reason, Reason::RecoveringFromSurvivor);
    // Gone: a pod on the same claim with --force-new-cluster.
    let mut obs = recovering(now);
    obs.pods.clear();
    obs.membership = Membership::Unreachable {
        error: "no live member pods".into(),
    };
    let d = run(running_state(), &obs, &spec);
    assert_eq!(
        d.actions,
        [Action::ForceNewCluster {
            name: "m1".into(),
            version: VERSION.parse().unwrap(),
        }]
    );
}

/// `world`'s one member `m1`, started with `--force-new-cluster`, answers alone at raft
/// index 105 and revision 10; the status records the recovery `record`.
fn forced_alone(world: World, record: Option<RecoveryRecord>) -> Observation {
    let mut obs = world
        .bootstrapped()
        .pod("m1", |p| p.force_new_cluster = true)
        .build();
    answers(&mut obs, 1, 105, 10);
    obs.recorded.recovery = record;
    obs
}

#[test]
fn a_survivor_running_alone_finishes_the_recovery_and_drops_the_flag() {
    let spec = spec(RecoveryPolicy::FromSurvivor);
    let claimed = World::healthy(Instant::now(), 1, VERSION).on_volumes();
    let obs = forced_alone(claimed, Some(survivor_record(false)));
    let d = run(running_state(), &obs, &spec);
    assert_reason(&d, Reason::Recovered);
    let Some(Action::FinishRecovery { record }) = d.actions.first() else {
        panic!("{:?}", d.actions);
    };
    assert!(record.finished);
    assert_eq!(record.restored_revision, Some(10));
    assert_eq!(d.actions[1], Action::RecreatePod { name: "m1".into() });
    assert!(d.why.message.contains("revision 10"), "{}", d.why.message);
    // Not alone yet (etcd still lists the others): wait.
    let mut waiting = recovering(Instant::now());
    waiting.pods[0].force_new_cluster = true;
    let d = run(running_state(), &waiting, &spec);
    assert_idle(&d, Reason::RecoveringFromSurvivor);
}

/// The record of a restore from backup into seed `s1`.
fn backup_record() -> RecoveryRecord {
    RecoveryRecord {
        incident: format!("{CLUSTER_ID:x}: lost every member"),
        policy: RecoveryPolicy::FromBackup,
        lost: vec!["m1".into(), "m2".into(), "m3".into()],
        survivor: None,
        raft_index: None,
        backup: Some(backup(120, VERSION)),
        last_revision: Some(500),
        seed: Some("s1".into()),
        token: Some("demo-recovery".into()),
        cluster_id: None,
        ..survivor_record(false)
    }
}

#[test]
fn a_recorded_recovery_from_a_backup_starts_its_seed_from_the_backup() {
    let mut obs = total_loss(Instant::now(), None);
    obs.recorded.recovery = Some(backup_record());
    let d = run(running_state(), &obs, &spec(RecoveryPolicy::FromBackup));
    assert_eq!(d.actions, [start_recovery_seed(Some(backup(120, VERSION)))]);
    assert_eq!(d.state.phase, Phase::Recovering);
}

/// Starting the seed `s1` of [`backup_record`], restoring `restore`.
fn start_recovery_seed(restore: Option<SnapshotSource>) -> Action {
    Action::StartRecoverySeed {
        name: "s1".into(),
        token: "demo-recovery".into(),
        version: VERSION.parse().unwrap(),
        restore,
    }
}

/// The seed `s1` runs and answers alone, as the only member of the new etcd cluster
/// `cluster_id`, at `revision`.
fn seed_answers_alone(obs: &mut Observation, cluster_id: u64, revision: i64) {
    obs.pods.push(PodView::running("s1", VERSION));
    let mut health = MemberHealth::healthy(VERSION);
    health.revision = Some(revision);
    health.cluster_id = Some(cluster_id);
    obs.health.insert(7, health);
    obs.membership = Membership::Listed {
        cluster_id,
        members: vec![MemberView {
            id: 7,
            name: "s1".into(),
            peer_urls: vec![super::fixtures::peer_url("s1")],
            client_urls: vec![],
            is_learner: false,
        }],
    };
}

/// The restored seed `s1` of the FromBackup recovery [`backup_record`] answering alone, as
/// the only member of the new etcd cluster `cluster_id`, at `revision`.
fn restored_seed_alone(cluster_id: u64, revision: i64) -> Observation {
    let mut obs = World::empty(Instant::now()).bootstrapped().build();
    seed_answers_alone(&mut obs, cluster_id, revision);
    obs.recorded.recovery = Some(backup_record());
    obs
}

#[test]
fn a_seed_restored_with_bumped_revisions_reports_the_window_lost_from_the_backups_revision() {
    // etcdutl --bump-revision: the seed's revisions start far past anything lost.
    let obs = restored_seed_alone(0xfeed, 1_000_000_121);
    let d = run(running_state(), &obs, &spec(RecoveryPolicy::FromBackup));
    assert_reason(&d, Reason::Recovered);
    let Some(Action::FinishRecovery { record }) = d.actions.first() else {
        panic!("{:?}", d.actions);
    };
    assert_eq!(record.restored_revision, Some(120));
    assert!(
        d.why.message.contains("revisions 121 to 500 are lost")
            && d.why.message.contains("at revision 1000000121"),
        "{}",
        d.why.message
    );
}

#[test]
fn a_restored_seed_of_a_new_cluster_finishes_the_recovery_with_the_revision_window() {
    let new_cluster = 0xfeed;
    let mut obs = restored_seed_alone(new_cluster, 121);
    // The bootstrap record names the old cluster: the restore's new one is accepted.
    let d = run(running_state(), &obs, &spec(RecoveryPolicy::FromBackup));
    assert_reason(&d, Reason::Recovered);
    let Some(Action::FinishRecovery { record }) = d.actions.first() else {
        panic!("{:?}", d.actions);
    };
    assert_eq!(record.cluster_id, Some(new_cluster));
    assert_eq!(record.restored_revision, Some(120));
    assert!(
        d.why.message.contains("revisions 121 to 500 are lost"),
        "{}",
        d.why.message
    );
    // Once finished, the new cluster is this cluster.
    obs.recorded.recovery = Some(record.clone());
    let d = run(running_state(), &obs, &spec(RecoveryPolicy::FromBackup));
    assert_ne!(d.why.reason, Reason::ClusterIdMismatch, "{}", d.why.message);
    assert!(
        d.actions
            .iter()
            .any(|a| matches!(a, Action::AddMember { learner: true, .. })),
        "{:?}",
        d.actions
    );
}

#[test]
fn recovery_actions_are_refused_for_a_cluster_that_does_not_exist() {
    let actions = [Action::BeginRecovery {
        record: survivor_record(false),
    }];
    let err = transition::check(&Phase::Running, &Phase::Recovering, &actions, false).unwrap_err();
    assert_eq!(
        err.rule,
        "only a cluster that exists is recovered, in phase Recovering"
    );
    assert!(transition::check(&Phase::Running, &Phase::Running, &actions, true).is_err());
    transition::check(
        &Phase::Blocked {
            reason: Reason::QuorumLost,
        },
        &Phase::Recovering,
        &actions,
        true,
    )
    .unwrap();
}

// Issue 34: a recovery acts only on members whose data is gone by the evidence rule
// (`evidence::member_data`): a pod object that still exists is never gone.

/// No member answers, every member's pod not ready and as `pod` leaves it; the status
/// remembers `m1..m3` and a verified backup exists.
fn no_member_answers(now: Instant, pod: impl Fn(&mut PodView)) -> Observation {
    let mut obs = World::healthy(now, 3, VERSION)
        .bootstrapped()
        .etcd_down()
        .build();
    for p in &mut obs.pods {
        p.ready = false;
        pod(p);
    }
    obs.recorded.members = vec!["m1".into(), "m2".into(), "m3".into()];
    obs.newest_backup = Some(Ok(backup(120, VERSION)));
    obs
}

/// Every member's pod is being deleted while no member answers (their kubelets stopped:
/// etcd may still serve behind them); a verified backup exists.
fn terminating_everywhere(now: Instant) -> Observation {
    no_member_answers(now, |p| p.terminating = true)
}

#[test]
fn pods_being_deleted_are_unreachable_not_gone_and_no_backup_is_restored_over_them() {
    let (first, d) = after_deadline(terminating_everywhere, &spec(RecoveryPolicy::FromBackup));
    for d in [&first, &d] {
        assert_no_action!(
            d,
            Action::BeginRecovery { .. } | Action::StartRecoverySeed { .. }
        );
        assert_no_loss_timed(d);
        assert!(
            d.why
                .message
                .contains("being deleted but may still run etcd"),
            "{}",
            d.why.message
        );
    }
}

#[test]
fn exited_pods_keep_their_data_until_deleted_and_are_never_restored_over() {
    let exited = |now| no_member_answers(now, |p| p.phase = PodPhase::Failed);
    let (_, d) = after_deadline(exited, &spec(RecoveryPolicy::FromBackup));
    assert_no_action!(d, Action::BeginRecovery { .. } | Action::DeletePod { .. });
    assert_no_loss_timed(&d);
}

/// `m2` and `m3` do not answer; their claims are being deleted, but pvc-protection keeps
/// them while their pods (still there) mount them.
fn claims_deleting_under_live_pods(now: Instant) -> Observation {
    let mut obs = losing(now, 3, &[]);
    for (id, name) in [(2, "m2"), (3, "m3")] {
        obs.claims.get_mut(name).unwrap().phase = ClaimPhase::Deleting;
        silent(&mut obs, id);
    }
    obs
}

#[test]
fn claims_being_deleted_that_live_pods_still_mount_are_no_loss() {
    let deleting = claims_deleting_under_live_pods;
    let (_, d) = after_deadline(deleting, &spec(RecoveryPolicy::FromSurvivor));

    assert_no_action!(d, Action::BeginRecovery { .. } | Action::RecreatePod { .. });
    assert_no_loss_timed(&d);
}

#[test]
fn mid_move_onto_claims_a_quorum_blip_never_forces_the_one_claimed_member() {
    // m1 is already on a claim, m2 and m3 still on emptyDir and running; every member
    // answers with an alarm (unhealthy): no member is gone, nothing is a loss.
    let mixed = |now| {
        let mut obs = World::healthy(now, 3, VERSION)
            .claim("m1", ClaimPhase::Bound)
            .bootstrapped()
            .build();
        for id in 1..=3 {
            answers(&mut obs, id, 100 * id, 10);
            obs.health.get_mut(&id).unwrap().errors = vec!["NOSPACE".into()];
        }
        obs
    };
    let (_, d) = after_deadline(mixed, &spec(RecoveryPolicy::FromSurvivor));
    assert_no_action!(
        d,
        Action::BeginRecovery { .. } | Action::RecreatePod { .. } | Action::ForceNewCluster { .. }
    );
    assert_no_loss_timed(&d);
}

#[test]
fn from_survivor_refuses_when_the_most_advanced_survivor_is_not_on_a_claim() {
    // m2 and m3 gone with their data; survivors m1 (emptyDir, ahead) and m4 (claim) of 5
    // with m5 gone too: forcing m4 would drop what only m1 has.
    let five = |now| {
        let mut obs = losing(now, 5, &[2, 3, 5]);
        obs.claims.remove("m1");
        obs.pods
            .iter_mut()
            .find(|p| p.name == "m1")
            .unwrap()
            .on_claim = false;
        answers(&mut obs, 1, 900, 90);
        answers(&mut obs, 4, 400, 40);
        obs
    };
    let (_, d) = after_deadline(five, &spec(RecoveryPolicy::FromSurvivor));
    assert_idle_saying(&d, Reason::RecoveryRefused, "m1");
    assert!(d.why.message.contains("emptyDir"), "{}", d.why.message);
}

#[test]
fn from_backup_refuses_a_snapshot_of_another_etcd_cluster_id_than_the_recorded_one() {
    // Found under this cluster's name and namespace, but taken from another etcd cluster
    // (a cluster deleted and re-applied under the same name wrote there too).
    let foreign = |now| {
        let mut snapshot = backup(120, VERSION);
        snapshot.cluster_id = Some(CLUSTER_ID + 1);
        total_loss(now, Some(Ok(snapshot)))
    };
    let (_, d) = after_deadline(foreign, &spec(RecoveryPolicy::FromBackup));
    assert_idle(&d, Reason::RecoveryRefused);
    let message = &d.why.message;
    assert!(
        message.contains(&format!("{:x}", CLUSTER_ID + 1)),
        "{message}"
    );
    assert!(message.contains(&format!("{CLUSTER_ID:x}")), "{message}");
    // The recorded cluster's own snapshot is restored.
    let own = |now| {
        let mut snapshot = backup(120, VERSION);
        snapshot.cluster_id = Some(CLUSTER_ID);
        total_loss(now, Some(Ok(snapshot)))
    };
    let (_, d) = after_deadline(own, &spec(RecoveryPolicy::FromBackup));
    assert_reason(&d, Reason::RecoveringFromBackup);
}

#[test]
fn a_pod_still_forcing_a_new_cluster_after_its_recovery_finished_is_recreated_before_anything_else()
{
    // FinishRecovery was written but the RecreatePod of the same tick failed: the next
    // container restart would force a new cluster again, splitting the one grown since.
    let claimed = World::healthy(Instant::now(), 1, VERSION).on_volumes();
    let obs = forced_alone(claimed, Some(survivor_record(true)));
    let d = run(running_state(), &obs, &spec(RecoveryPolicy::FromSurvivor));
    assert_eq!(d.actions, [Action::RecreatePod { name: "m1".into() }]);
    assert!(
        d.why.message.contains("--force-new-cluster"),
        "{}",
        d.why.message
    );
    // Also without any recovery record (a status restored from an old copy), and before
    // anything waits for a quorum.
    let mut quorumless = World::healthy(Instant::now(), 3, VERSION)
        .on_volumes()
        .bootstrapped()
        .pod("m2", |p| p.force_new_cluster = true)
        .unreachable(1)
        .unreachable(3)
        .build();
    quorumless.recorded.recovery = None;
    let d = run(running_state(), &quorumless, &spec(RecoveryPolicy::Manual));
    assert_eq!(d.actions, [Action::RecreatePod { name: "m2".into() }]);
}

#[test]
fn a_pod_forcing_a_new_cluster_on_an_empty_dir_is_never_deleted() {
    // Its data would go with it; nothing the operator makes looks like this.
    let obs = forced_alone(World::healthy(Instant::now(), 1, VERSION), None);
    let d = run(running_state(), &obs, &spec(RecoveryPolicy::FromSurvivor));
    assert_no_action!(d, Action::RecreatePod { .. } | Action::DeletePod { .. });
}

#[test]
fn an_unfinished_record_whose_lost_members_still_run_is_never_acted_on() {
    // A status patched by hand, or restored from an old copy: the record says m2 and m3
    // were lost, but every member runs. Acting on it would force a new cluster from m1.
    let mut obs = World::healthy(Instant::now(), 3, VERSION)
        .on_volumes()
        .bootstrapped()
        .build();
    obs.recorded.recovery = Some(survivor_record(false));
    let d = run(running_state(), &obs, &spec(RecoveryPolicy::FromSurvivor));
    assert_idle(&d, Reason::RecoveryRefused);
    let message = &d.why.message;
    assert!(
        message.contains("m2") && message.contains("status.recovery"),
        "{message}"
    );
    assert!(
        message.contains(super::ABANDON_RECOVERY_ANNOTATION),
        "{message}"
    );
}

#[test]
fn an_unfinished_record_written_for_another_object_is_never_acted_on() {
    // The loss it names holds, but the record was written for an EtcdCluster of the same
    // name that was deleted since (its UID differs).
    let mut obs = recovering(Instant::now());
    obs.recorded.recovery.as_mut().unwrap().uid = Some("uid-of-the-old-object".into());
    let mut spec = spec(RecoveryPolicy::FromSurvivor);
    spec.uid = "uid-of-this-object".into();
    let d = run(running_state(), &obs, &spec);
    assert_idle_saying(&d, Reason::RecoveryRefused, "uid-of-the-old-object");
    // Written for this object: carried out.
    obs.recorded.recovery.as_mut().unwrap().uid = Some("uid-of-this-object".into());
    let d = run(running_state(), &obs, &spec);
    assert_eq!(d.actions, [Action::RecreatePod { name: "m1".into() }]);
}

#[test]
fn a_recovery_record_is_bound_to_the_object_it_is_written_for() {
    let mut spec = spec(RecoveryPolicy::FromSurvivor);
    spec.uid = "uid-of-this-object".into();
    let (_, d) = after_deadline(|now| losing(now, 3, &[2, 3]), &spec);
    assert_eq!(begun(&d).uid.as_deref(), Some("uid-of-this-object"));
}

/// The FromBackup recovery of `backup_record`, whose seed `s1` never starts: its fetch
/// crash-loops (the pod is Pending, not dead).
fn stuck_seed(now: Instant) -> Observation {
    let mut obs = total_loss(now, None);
    obs.recorded.recovery = Some(backup_record());
    let mut seed = PodView::running("s1", VERSION);
    seed.phase = PodPhase::Pending;
    seed.ready = false;
    seed.started = false;
    obs.pods.push(seed);
    obs
}

#[test]
fn a_recorded_recovery_that_cannot_complete_fails_at_its_deadline_and_says_what_to_do() {
    let spec = failing_after(RecoveryPolicy::FromBackup, 600);
    let t0 = Instant::now();
    let first = run(running_state(), &stuck_seed(t0), &spec);
    assert_reason(&first, Reason::RecoveringFromBackup);
    let before = run(
        first.state.clone(),
        &stuck_seed(t0 + Duration::from_secs(599)),
        &spec,
    );
    assert_eq!(before.why.reason, Reason::RecoveringFromBackup);
    let after = run(
        before.state,
        &stuck_seed(t0 + Duration::from_secs(601)),
        &spec,
    );
    assert_idle(&after, Reason::RecoveryFailed);
    let message = &after.why.message;
    assert!(message.contains("600s"), "{message}");
    assert!(
        message.contains(super::ABANDON_RECOVERY_ANNOTATION),
        "{message}"
    );
    assert!(message.contains(&backup_record().incident), "{message}");
    assert_eq!(
        after.state.phase,
        Phase::Blocked {
            reason: Reason::RecoveryFailed
        }
    );
}

#[test]
fn a_failed_recovery_still_finishes_when_its_member_answers_after_the_deadline() {
    let spec = failing_after(RecoveryPolicy::FromSurvivor, 60);
    let t0 = Instant::now();
    let first = run(running_state(), &recovering(t0), &spec);
    let claimed = World::healthy(t0 + Duration::from_secs(3600), 1, VERSION).on_volumes();
    let alone = forced_alone(claimed, Some(survivor_record(false)));
    let d = run(first.state, &alone, &spec);
    assert_reason(&d, Reason::Recovered);
}

#[test]
fn the_abandon_annotation_gives_up_only_the_recovery_whose_incident_it_names() {
    let mut spec = spec(RecoveryPolicy::FromBackup);
    spec.recovery.abandon = Some("another incident".into());
    let d = run(running_state(), &stuck_seed(Instant::now()), &spec);
    assert_reason(&d, Reason::RecoveringFromBackup);
    spec.recovery.abandon = Some(backup_record().incident);
    let d = run(running_state(), &stuck_seed(Instant::now()), &spec);
    assert_reason(&d, Reason::RecoveryAbandoned);
    let [Action::FinishRecovery { record }] = d.actions.as_slice() else {
        panic!("{:?}", d.actions);
    };
    assert!(record.finished && record.abandoned);
    assert_no_action!(d, Action::DeletePod { .. } | Action::RecreatePod { .. });
}

#[test]
fn an_abandoned_incident_may_be_recovered_again() {
    let abandoned = RecoveryRecord {
        finished: true,
        abandoned: true,
        ..backup_record()
    };
    let again = RecoveryRecord {
        finished: false,
        ..backup_record()
    };
    assert_eq!(check_fence(Some(&abandoned), &again), Ok(()));
    let lost_again = |now| {
        let mut obs = total_loss(now, Some(Ok(backup(120, VERSION))));
        obs.recorded.recovery = Some(RecoveryRecord {
            incident: format!("{CLUSTER_ID:x}: lost every member"),
            ..abandoned.clone()
        });
        obs
    };
    let (_, d) = after_deadline(lost_again, &spec(RecoveryPolicy::FromBackup));
    assert_reason(&d, Reason::RecoveringFromBackup);
}

#[test]
fn all_lost_without_a_backup_store_offers_reseed_and_says_what_was_last_seen() {
    // No spec.recovery.backup: a FromBackup recovery has nothing to restore.
    let fresh = |now| {
        let mut obs = total_loss(now, None);
        obs.recorded.revision = Some(1);
        obs
    };
    let (_, d) = after_deadline(fresh, &spec(RecoveryPolicy::Manual));
    assert_idle(&d, Reason::AllMembersLost);
    let message = &d.why.message;
    assert!(
        message.contains("etcd.database.coreos.com/recover=Reseed"),
        "{message}"
    );
    assert!(!message.contains("recover=FromBackup"), "{message}");
    assert!(
        message.contains("revision 1 (no write was ever made)"),
        "{message}"
    );
    assert!(message.contains(&format!("{CLUSTER_ID:x}")), "{message}");
    // With writes: the revision says what a reseed throws away.
    let (_, d) = after_deadline(|now| total_loss(now, None), &spec(RecoveryPolicy::Manual));
    assert!(d.why.message.contains("revision 500"), "{}", d.why.message);
}

#[test]
fn reseed_records_first_then_starts_an_empty_seed_and_finishes_once_it_answers() {
    let spec = requested(RecoveryPolicy::Reseed);
    let (_, d) = after_deadline(|now| total_loss(now, None), &spec);
    assert_reason(&d, Reason::Reseeding);
    let record = begun(&d);
    assert_eq!(record.policy, RecoveryPolicy::Reseed);
    assert_eq!(record.backup, None);
    assert_eq!(record.last_revision, Some(500));
    // Recorded, with its seed named: an empty seed, no restore.
    let mut obs = total_loss(Instant::now(), None);
    obs.recorded.recovery = Some(RecoveryRecord {
        policy: RecoveryPolicy::Reseed,
        backup: None,
        ..backup_record()
    });
    let d = run(running_state(), &obs, &spec);
    assert_eq!(d.actions, [start_recovery_seed(None)]);
    // It answers alone: finished.
    let new_cluster = 0xfeed;
    seed_answers_alone(&mut obs, new_cluster, 1);
    let d = run(running_state(), &obs, &spec);
    assert_reason(&d, Reason::Recovered);
    let [Action::FinishRecovery { record }] = d.actions.as_slice() else {
        panic!("{:?}", d.actions);
    };
    assert_eq!(record.cluster_id, Some(new_cluster));
    assert!(d.why.message.contains("empty"), "{}", d.why.message);
}

#[test]
fn reseed_is_refused_while_any_member_may_keep_data() {
    let spec = requested(RecoveryPolicy::Reseed);
    let (_, d) = after_deadline(|now| losing(now, 3, &[2, 3]), &spec);
    assert_idle_saying(&d, Reason::RecoveryRefused, "m1");
    // Pods being deleted may still serve: no loss at all, nothing to reseed.
    let terminating = |now| {
        World::healthy(now, 3, VERSION)
            .bootstrapped()
            .pod("m1", |p| p.terminating = true)
            .pod("m2", |p| p.terminating = true)
            .pod("m3", |p| p.terminating = true)
            .etcd_down()
            .build()
    };
    let (_, d) = after_deadline(terminating, &spec);
    assert_no_action!(d, Action::BeginRecovery { .. });
}

#[test]
fn reseed_is_never_a_standing_policy_only_a_one_time_request() {
    assert_eq!(
        RecoveryPolicy::parse("Reseed"),
        Some(RecoveryPolicy::Reseed)
    );
    let standing = RecoverySpec {
        policy: RecoveryPolicy::Reseed,
        ..RecoverySpec::default()
    };
    assert_eq!(standing.effective(), RecoveryPolicy::Manual);
}
