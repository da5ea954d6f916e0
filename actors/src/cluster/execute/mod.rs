//! The act step of a tick: performs a decision's actions in order, stopping at the first
//! failure; those that run alongside ([`Action::runs_alongside`]: the Services) start at
//! once beside the others, and a pod waits for the headless Service (`services_gate.rs`).
//! What to tell people about them is the report step's business.

use etcd_operator_core::lifecycle::Action;
use etcd_operator_core::outcome::{ActionOutcome, ActionResult};

pub(crate) use env::ActionEnv;
use env::{Done, Failure};

mod env;
mod members;
mod membership;
mod objects;
mod recovery;

/// Executes `actions`: those that run alongside start at once, beside the others, which
/// run in order and stop after the first failure; a pod waits for the headless Service
/// (opened by `ensure_services`, or by the end of every action alongside) and is not made
/// when it failed. The outcomes come in the order of `actions`.
pub(crate) async fn execute(env: &ActionEnv<'_>, actions: &[Action]) -> Vec<ActionOutcome> {
    let (beside, in_turn): (Vec<_>, Vec<_>) = actions
        .iter()
        .enumerate()
        .partition(|(_, action)| action.runs_alongside());
    if !beside.is_empty() {
        env.services.close();
    }
    let beside = async {
        let outcomes = futures::future::join_all(
            beside
                .into_iter()
                .map(|(i, action)| async move { (i, outcome(env, action).await) }),
        )
        .await;
        // Whatever has not opened or shut the gate by its end decides it now.
        env.services
            .settle(outcomes.iter().all(|(_, o)| o.result.is_done()));
        outcomes
    };
    let in_turn = async {
        let mut outcomes = Vec::new();
        for (i, action) in in_turn {
            let outcome = outcome(env, action).await;
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
async fn outcome(env: &ActionEnv<'_>, action: &Action) -> ActionOutcome {
    let result = match perform(env, action).await {
        Ok(done) => ActionResult::Done {
            note: done.note,
            member: done.member,
        },
        Err(f) if f.is_not_yet() => ActionResult::NotYet { error: f.message },
        Err(f) => ActionResult::Failed {
            error: f.message,
            cause: f.cause,
        },
    };
    ActionOutcome {
        action: action.clone(),
        result,
    }
}

/// Hands each action to the function that carries it out, by kind: a member's pod
/// (`members.rs`), a membership call (`membership.rs`), another Kubernetes object
/// (`objects.rs`), a recovery's record (`recovery.rs`).
async fn perform(env: &ActionEnv<'_>, action: &Action) -> Result<Done, Failure> {
    use Action::*;
    match action {
        IssueCertificates => objects::issue_certificates(env).await,
        AdvanceCaRotation { from, to } => objects::advance_ca_rotation(env, *from, *to).await,
        EnsureServices => objects::ensure_services(env).await,
        SetDisruptionBudget { min_available } => {
            objects::set_disruption_budget(env, *min_available).await
        }
        ExpandClaim { name, quantity } => objects::expand_claim(env, name, quantity).await,
        DeletePod { name } => objects::delete_pod(env, name).await,
        RecreatePod { name } => objects::recreate_pod(env, name).await,
        LabelVoter { name } => objects::label_voter(env, name).await,
        UpgradeMember { name, from, to } => {
            let note = format!("set member {name} from etcd {from} to {to}; its data stays");
            objects::set_version(env, name, to, Some(from), note).await
        }
        RollBackMember { name, to } => {
            let note = format!("moved member {name} back to etcd {to}; its data stays");
            objects::set_version(env, name, to, None, note).await
        }
        ConfirmUpgrade { name, version } => {
            let note = format!("member {name} is healthy on etcd {version}");
            objects::set_version(env, name, version, None, note).await
        }
        CreateSeed { version, restore } => {
            members::create_seed(env, version, restore.as_ref()).await
        }
        StartSeed {
            name,
            token,
            version,
            restore,
        } => {
            let what = "recorded seed member";
            members::start_seed(env, what, name, token, version, restore.as_ref()).await
        }
        PrepareJoiner { version, peers } => members::prepare_joiner(env, version, peers).await,
        AddMember {
            learner,
            version,
            prepared: Some(name),
        } => members::add_prepared(env, name, *learner, version).await,
        AddMember {
            learner,
            version,
            prepared: None,
        } => members::add_member(env, *learner, version).await,
        ResumeJoin { id, name, version } => members::resume_join(env, *id, name, version).await,
        RestartMember {
            name,
            version,
            peers,
            voter,
        } => members::restart_member(env, name, version, peers, *voter).await,
        PromoteLearner { id, name } => membership::promote(env, *id, name).await,
        MoveLeader { from, to, name } => membership::move_leader(env, from, *to, name).await,
        DisarmAlarm { alarm } => membership::disarm_alarm(env, *alarm).await,
        Compact { revision } => membership::compact(env, *revision).await,
        Defragment { name, db_size, .. } => membership::defragment(env, name, *db_size).await,
        RemoveMember { id, name } => membership::remove(env, *id, name).await,
        BeginRecovery { record } => recovery::begin(env, record).await,
        ForceNewCluster { name, version } => members::force_new_cluster(env, name, version).await,
        StartRecoverySeed {
            name,
            token,
            version,
            restore,
        } => {
            let what = "recovery seed";
            members::start_seed(env, what, name, token, version, restore.as_ref()).await
        }
        FinishRecovery { record } => recovery::finish(env, record).await,
    }
}
