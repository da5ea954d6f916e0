//! The act step of a tick: performs a decision's actions in order, stopping at the first
//! failure; those that run alongside ([`Action::runs_alongside`]: the Services) start at
//! once beside the others, and a pod waits for the headless Service (`services_gate.rs`).
//! What to tell people about them is the report step's business.

use actix::Addr;

use crate::member_client::{
    AddMember, ListMembers, MemberClient, MoveLeader, PromoteMember, RemoveMember, ask,
};
use crate::ports::{
    ClusterApi, EtcdError, EtcdErrorKind, EventRecord, EventType, InitialState, MemberPod,
    NewMember, ServiceKind, VersionChange,
};
use etcd_operator_core::lifecycle::{
    Action, BootstrapRecord, MemberView, RecoveryPolicy, RecoveryRecord, SnapshotSource, TlsMode,
    Version,
};
use etcd_operator_core::topology::Topology;

use super::services_gate::ServicesGate;
use etcd_operator_core::outcome::{ActionOutcome, ActionResult};

/// What an action did, and to which member.
struct Done {
    note: String,
    member: Option<String>,
}

impl Done {
    fn cluster(note: String) -> Self {
        Done { note, member: None }
    }

    fn member(note: String, member: &str) -> Self {
        Done {
            note,
            member: Some(member.to_string()),
        }
    }
}

/// Why an action failed.
struct Failure {
    message: String,
    not_yet: bool,
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure {
            message,
            not_yet: false,
        }
    }
}

impl Failure {
    fn etcd(context: String, error: &EtcdError) -> Self {
        Failure {
            message: format!("{context}: {error}"),
            not_yet: matches!(
                error.kind,
                EtcdErrorKind::UnhealthyCluster | EtcdErrorKind::LearnerNotReady
            ),
        }
    }
}

/// Everything an action needs to reach the world.
pub(crate) struct Effectors<'a> {
    pub kube: &'a dyn ClusterApi,
    pub members: &'a Addr<MemberClient>,
    pub topology: &'a Topology,
    /// The TLS mode of the spec: the scheme of every URL given to new members.
    pub tls: TlsMode,
    /// Client URLs of the live members, for membership calls.
    pub endpoints: Vec<String>,
    /// What a member's pod waits for while the headless Service is being made.
    pub services: ServicesGate,
}

/// Executes `actions`: those that run alongside start at once, beside the others, which
/// run in order and stop after the first failure; a pod waits for the headless Service
/// (opened by `ensure_services`, or by the end of every action alongside) and is not made
/// when it failed. The outcomes come in the order of `actions`.
pub(crate) async fn execute(fx: &Effectors<'_>, actions: &[Action]) -> Vec<ActionOutcome> {
    let (beside, in_turn): (Vec<_>, Vec<_>) = actions
        .iter()
        .enumerate()
        .partition(|(_, action)| action.runs_alongside());
    if !beside.is_empty() {
        fx.services.close();
    }
    let beside = async {
        let outcomes = futures::future::join_all(
            beside
                .into_iter()
                .map(|(i, action)| async move { (i, outcome(fx, action).await) }),
        )
        .await;
        // Whatever has not opened or shut the gate by its end decides it now.
        fx.services
            .settle(outcomes.iter().all(|(_, o)| o.result.is_done()));
        outcomes
    };
    let in_turn = async {
        let mut outcomes = Vec::new();
        for (i, action) in in_turn {
            let outcome = outcome(fx, action).await;
            let failed = !outcome.result.is_done();
            outcomes.push((i, outcome));
            if failed {
                break;
            }
        }
        outcomes
    };
    let (mut outcomes, in_turn) = futures::join!(beside, in_turn);
    outcomes.extend(in_turn);
    outcomes.sort_by_key(|(i, _)| *i);
    outcomes.into_iter().map(|(_, outcome)| outcome).collect()
}

/// Performs one action and says how it ended.
async fn outcome(fx: &Effectors<'_>, action: &Action) -> ActionOutcome {
    let result = match perform(fx, action).await {
        Ok(done) => ActionResult::Done {
            note: done.note,
            member: done.member,
        },
        Err(f) if f.not_yet => ActionResult::NotYet { error: f.message },
        Err(f) => ActionResult::Failed { error: f.message },
    };
    ActionOutcome {
        action: action.clone(),
        result,
    }
}

async fn perform(fx: &Effectors<'_>, action: &Action) -> Result<Done, Failure> {
    match action {
        Action::IssueCertificates => {
            let issued = fx.kube.issue_certificates().await;
            Ok(Done::cluster(issued.map_err(|e| e.to_string())?))
        }
        Action::AdvanceCaRotation { from, to } => {
            let advanced = fx.kube.advance_ca_rotation(*from, *to).await;
            Ok(Done::cluster(advanced.map_err(|e| e.to_string())?))
        }
        Action::EnsureServices => ensure_services(fx).await,
        Action::CreateSeed { version, restore } => create_seed(fx, version, restore.as_ref()).await,
        Action::StartSeed {
            name,
            token,
            version,
            restore,
        } => {
            start_seed(fx, name, token, version, restore.as_ref()).await?;
            let note = format!(
                "started recorded seed member {name} (etcd {version}){}",
                from_snapshot(restore.as_ref())
            );
            Ok(Done::member(note, name))
        }
        Action::PrepareJoiner { version, peers } => prepare_joiner(fx, version, peers).await,
        Action::AddMember {
            learner,
            version,
            prepared: Some(name),
        } => add_prepared(fx, name, *learner, version).await,
        Action::AddMember {
            learner,
            version,
            prepared: None,
        } => add_member(fx, *learner, version).await,
        Action::ResumeJoin { id, name, version } => resume_join(fx, *id, name, version).await,
        Action::RestartMember {
            name,
            version,
            peers,
            voter,
        } => {
            let pod = MemberPod {
                name: name.clone(),
                version: version.clone(),
                initial_cluster: fx.topology.initial_cluster(peers, fx.tls),
                state: InitialState::Existing,
                voter: *voter,
                restore: None,
                prepared_with: None,
            };
            create_pod(fx, &pod, "pod").await?;
            let note = format!("started member {name} again on its volume (etcd {version})");
            Ok(Done::member(note, name))
        }
        Action::PromoteLearner { id, name } => {
            let call = PromoteMember {
                endpoints: fx.endpoints.clone(),
                id: *id,
            };
            membership(fx, call, format!("member promote {name}")).await?;
            let note = format!("promoted learner {name} to a voting member");
            Ok(Done::member(note, name))
        }
        Action::MoveLeader { from, to, name } => {
            let call = MoveLeader {
                leader: fx.topology.client_url(from, fx.tls),
                to: *to,
            };
            membership(fx, call, format!("move leader {from} -> {name}")).await?;
            let note = format!("member {name} is the leader now (was {from})");
            Ok(Done::member(note, name))
        }
        Action::RemoveMember { id, name } => {
            let call = RemoveMember {
                endpoints: fx.endpoints.clone(),
                id: *id,
            };
            membership(fx, call, format!("member remove {name}")).await?;
            let note = format!("removed member {name} (id {id:x}) from etcd");
            Ok(Done::member(note, name))
        }
        Action::DeletePod { name } => {
            fx.kube.delete_pod(name).await.map_err(|e| e.to_string())?;
            Ok(Done::member(format!("deleted pod {name}"), name))
        }
        Action::RecreatePod { name } => {
            fx.kube
                .recreate_pod(name)
                .await
                .map_err(|e| e.to_string())?;
            let note = format!("deleted pod {name} to give its member a new one");
            Ok(Done::member(note, name))
        }
        Action::ExpandClaim { name, quantity } => {
            let expanded = fx.kube.expand_claim(name, quantity).await;
            expanded.map_err(|e| e.to_string())?;
            let note = format!("asked for {quantity} on member {name}'s volume; its data stays");
            Ok(Done::member(note, name))
        }
        Action::SetDisruptionBudget { min_available } => {
            let budget = fx.kube.set_disruption_budget(*min_available).await;
            budget.map_err(|e| e.to_string())?;
            let note = format!(
                "PodDisruptionBudget {}: evictions leave at least {min_available} voting \
                 members ready",
                fx.topology.name
            );
            Ok(Done::cluster(note))
        }
        Action::LabelVoter { name } => {
            fx.kube.label_voter(name).await.map_err(|e| e.to_string())?;
            let note = format!("pod {name} now serves clients (a voting member)");
            Ok(Done::member(note, name))
        }
        Action::UpgradeMember { name, from, to } => {
            let note = format!("set member {name} from etcd {from} to {to}; its data stays");
            set_version(fx, name, to, Some(from), note).await
        }
        Action::RollBackMember { name, to } => {
            let note = format!("moved member {name} back to etcd {to}; its data stays");
            set_version(fx, name, to, None, note).await
        }
        Action::ConfirmUpgrade { name, version } => {
            let note = format!("member {name} is healthy on etcd {version}");
            set_version(fx, name, version, None, note).await
        }
        Action::BeginRecovery { record } => begin_recovery(fx, record).await,
        Action::ForceNewCluster { name, version } => {
            let pod = MemberPod {
                name: name.clone(),
                version: version.clone(),
                initial_cluster: fx
                    .topology
                    .initial_cluster(std::slice::from_ref(name), fx.tls),
                state: InitialState::ForceNewCluster,
                voter: true,
                restore: None,
                prepared_with: None,
            };
            create_pod(fx, &pod, "pod").await?;
            let note = format!(
                "restarted survivor {name} alone with --force-new-cluster on its volume \
                 (etcd {version})"
            );
            Ok(Done::member(note, name))
        }
        Action::StartRecoverySeed {
            name,
            token,
            version,
            restore,
        } => {
            start_seed(fx, name, token, version, restore.as_ref()).await?;
            let note = format!(
                "started recovery seed {name} (etcd {version}){}",
                from_snapshot(restore.as_ref())
            );
            Ok(Done::member(note, name))
        }
        Action::FinishRecovery { record } => {
            let note = recovery_note(record);
            fx.kube
                .record_recovery(record)
                .await
                .map_err(|e| format!("recording the end of the recovery in status: {e}"))?;
            let reason = if record.abandoned {
                "RecoveryAbandoned"
            } else {
                "RecoveryFinished"
            };
            announce(fx, reason, &note).await;
            Ok(Done::cluster(note))
        }
    }
}

/// Records a recovery (naming a restore's new seed first), then raises its Event: both
/// before anything of the recovery is done.
async fn begin_recovery(fx: &Effectors<'_>, record: &RecoveryRecord) -> Result<Done, Failure> {
    let mut record = record.clone();
    let new_seed = matches!(
        record.policy,
        RecoveryPolicy::FromBackup | RecoveryPolicy::Reseed
    );
    if new_seed && record.seed.is_none() {
        let t = fx.topology;
        record.seed = Some(t.new_member_name(&mut rand::rng()));
        record.token = Some(format!("{}-{:016x}", t.name, rand::random::<u64>()));
    }
    fx.kube
        .record_recovery(&record)
        .await
        .map_err(|e| format!("recording the recovery in status: {e}"))?;
    let note = recovery_note(&record);
    announce(fx, "RecoveryStarted", &note).await;
    Ok(Done::cluster(note))
}

/// Raises a recovery's Warning Event now (not after the tick): it must precede the steps.
async fn announce(fx: &Effectors<'_>, reason: &str, note: &str) {
    let event = EventRecord {
        kind: EventType::Warning,
        reason: reason.to_string(),
        action: "Recover".into(),
        note: note.to_string(),
        member: None,
    };
    // An Event that cannot be written must not stop the recovery: the status has it.
    let _ = fx.kube.record_event(&event).await;
}

/// What a recovery record says, for people.
fn recovery_note(r: &RecoveryRecord) -> String {
    let rev = |r: Option<i64>| r.map_or_else(|| "unknown".to_string(), |r| r.to_string());
    let what = match (&r.survivor, &r.backup) {
        (Some(s), _) => format!(
            "from survivor {s} (raft index {})",
            r.raft_index
                .map_or_else(|| "unknown".into(), |i| i.to_string())
        ),
        (None, Some(b)) => format!(
            "from backup {} (revision {}) into seed {}",
            b.path(),
            b.revision,
            r.seed.as_deref().unwrap_or("?")
        ),
        (None, None) if r.policy == RecoveryPolicy::Reseed => format!(
            "into a new, empty seed {}",
            r.seed.as_deref().unwrap_or("?")
        ),
        (None, None) => "with nothing to recover from".to_string(),
    };
    let state = match (r.finished, r.abandoned) {
        (_, true) => "abandoned",
        (true, false) => "finished",
        (false, false) => "started",
    };
    format!(
        "{} recovery {state} for incident {:?} (lost {}), {what}; last known revision {}, \
         restored revision {}",
        r.policy,
        r.incident,
        r.lost.join(", "),
        rev(r.last_revision),
        rev(r.restored_revision)
    )
}

/// A membership call through the MemberClient; `context` names it in the error.
async fn membership<M, T>(fx: &Effectors<'_>, call: M, context: String) -> Result<T, Failure>
where
    M: actix::Message<Result = Result<T, EtcdError>> + Send + 'static,
    T: Send + 'static,
    MemberClient: actix::Handler<M>,
{
    ask(fx.members, call)
        .await
        .map_err(|e| Failure::etcd(context, &e))
}

/// Both Services at once; the headless one, which the members' names live under, opens
/// the gate to their pods as soon as it is there (the client Service, whose cluster IP
/// the API server allocates, can take seconds longer under load).
async fn ensure_services(fx: &Effectors<'_>) -> Result<Done, Failure> {
    let headless = async {
        let made = fx.kube.ensure_service(ServiceKind::Headless).await;
        fx.services.settle(made.is_ok());
        made
    };
    let (headless, client) = futures::join!(headless, fx.kube.ensure_service(ServiceKind::Client));
    headless.and(client).map_err(|e| e.to_string())?;
    let t = fx.topology;
    Ok(Done::cluster(format!(
        "Services {} and {} ensured",
        t.name,
        t.client_service()
    )))
}

/// Names the seed, records it in status (before its pod exists), then creates its pod.
async fn create_seed(
    fx: &Effectors<'_>,
    version: &Version,
    restore: Option<&SnapshotSource>,
) -> Result<Done, Failure> {
    let t = fx.topology;
    let name = t.new_member_name(&mut rand::rng());
    let token = format!("{}-{:016x}", t.name, rand::random::<u64>());
    fx.kube
        .record_bootstrap(&BootstrapRecord::seed(&name, &token))
        .await
        .map_err(|e| format!("recording the seed {name} in status: {e}"))?;
    start_seed(fx, &name, &token, version, restore).await?;
    let note = format!(
        "created seed member {name} (etcd {version}){}",
        from_snapshot(restore)
    );
    Ok(Done::member(note, &name))
}

/// The pod of the next member under a new name, before its `member add`: built to join
/// `peers`, its etcd held back until the member list holds its peer URL. Never a voter
/// (not behind the client Service, not in the disruption budget) until etcd says so.
async fn prepare_joiner(
    fx: &Effectors<'_>,
    version: &Version,
    peers: &[String],
) -> Result<Done, Failure> {
    let name = fx.topology.new_member_name(&mut rand::rng());
    let mut names = peers.to_vec();
    names.push(name.clone());
    let pod = MemberPod {
        name: name.clone(),
        version: version.clone(),
        initial_cluster: fx.topology.initial_cluster(&names, fx.tls),
        state: InitialState::Existing,
        voter: false,
        restore: None,
        prepared_with: Some(peers.to_vec()),
    };
    create_pod(fx, &pod, "prepared joiner pod").await?;
    let note = format!("prepared joiner {name} (etcd {version}): its pod waits for its member add");
    Ok(Done::member(note, &name))
}

/// `member add` of a prepared joiner, whose pod exists: its gate lets its etcd start once
/// the member list holds its peer URL.
async fn add_prepared(
    fx: &Effectors<'_>,
    name: &str,
    learner: bool,
    version: &Version,
) -> Result<Done, Failure> {
    let call = AddMember {
        endpoints: fx.endpoints.clone(),
        member: NewMember {
            peer_url: fx.topology.peer_url(name, fx.tls),
            learner,
        },
    };
    let added = membership(fx, call, format!("member add {name}")).await?;
    let kind = if learner { "learner" } else { "member" };
    let note = format!(
        "added {kind} {name} (id {:x}, etcd {version}); its prepared pod starts etcd",
        added.id
    );
    Ok(Done::member(note, name))
}

/// `member add` under a new name, then the new member's pod: the order when no joiner can
/// be prepared (the operator's image, which a prepared joiner's gate runs, is unknown).
/// The leader then asks the cluster DNS for the new name before its pod exists, and the
/// DNS caches the miss for its negative TTL.
async fn add_member(fx: &Effectors<'_>, learner: bool, version: &Version) -> Result<Done, Failure> {
    let name = fx.topology.new_member_name(&mut rand::rng());
    let call = AddMember {
        endpoints: fx.endpoints.clone(),
        member: NewMember {
            peer_url: fx.topology.peer_url(&name, fx.tls),
            learner,
        },
    };
    let added = membership(fx, call, format!("member add {name}")).await?;
    start_joining_pod(fx, &name, added.id, &added.members, version).await?;
    let kind = if learner { "learner" } else { "member" };
    let note = format!(
        "added {kind} {name} (id {:x}) and started its pod",
        added.id
    );
    Ok(Done::member(note, &name))
}

/// The pod of a member that was added but has none, from the current member list.
async fn resume_join(
    fx: &Effectors<'_>,
    id: u64,
    name: &str,
    version: &Version,
) -> Result<Done, Failure> {
    let call = ListMembers {
        endpoints: fx.endpoints.clone(),
    };
    let list = membership(fx, call, "member list".to_string()).await?;
    start_joining_pod(fx, name, id, &list.members, version).await?;
    let note = format!("started the pod of added member {name}");
    Ok(Done::member(note, name))
}

/// Sets a member's pod to etcd `to`, with the upgrade mark `upgrade_from` (or none).
async fn set_version(
    fx: &Effectors<'_>,
    name: &str,
    to: &Version,
    upgrade_from: Option<&Version>,
    note: String,
) -> Result<Done, Failure> {
    let change = VersionChange {
        to: to.clone(),
        upgrade_from: upgrade_from.cloned(),
    };
    fx.kube
        .set_pod_version(name, &change)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Done::member(note, name))
}

/// `, restoring snapshot <path> (revision N)` for a seed made from one.
fn from_snapshot(restore: Option<&SnapshotSource>) -> String {
    restore.map_or_else(String::new, |s| {
        format!(
            ", restoring snapshot {} (revision {})",
            s.path(),
            s.revision
        )
    })
}

/// Creates the seed's pod: `--initial-cluster-state=new` under the recorded token, after
/// restoring `restore` into its data directory when given.
async fn start_seed(
    fx: &Effectors<'_>,
    name: &str,
    token: &str,
    version: &Version,
    restore: Option<&SnapshotSource>,
) -> Result<(), String> {
    let pod = MemberPod {
        name: name.to_string(),
        version: version.clone(),
        initial_cluster: fx.topology.initial_cluster(&[name.to_string()], fx.tls),
        state: InitialState::New {
            token: token.to_string(),
        },
        voter: true,
        restore: restore.cloned(),
        prepared_with: None,
    };
    create_pod(fx, &pod, "seed pod").await
}

/// Creates the pod of a member etcd already knows, with `--initial-cluster` built from
/// the live member list (never from `spec.size`).
async fn start_joining_pod(
    fx: &Effectors<'_>,
    name: &str,
    id: u64,
    members: &[MemberView],
    version: &Version,
) -> Result<(), String> {
    let names: Vec<String> = members
        .iter()
        .filter_map(|m| {
            if m.id == id {
                Some(name.to_string())
            } else {
                m.pod_name()
            }
        })
        .collect();
    let pod = MemberPod {
        name: name.to_string(),
        version: version.clone(),
        initial_cluster: fx.topology.initial_cluster(&names, fx.tls),
        state: InitialState::Existing,
        voter: members.iter().any(|m| m.id == id && !m.is_learner),
        restore: None,
        prepared_with: None,
    };
    create_pod(fx, &pod, "pod").await
}

/// Creates a member's pod once the Services allow it; `what` names it in an error.
async fn create_pod(fx: &Effectors<'_>, pod: &MemberPod, what: &str) -> Result<(), String> {
    let name = &pod.name;
    fx.services
        .passed()
        .await
        .map_err(|e| format!("creating {what} {name}: {e}"))?;
    fx.kube
        .create_member_pod(pod)
        .await
        .map_err(|e| format!("creating {what} {name}: {e}"))
}
