//! With no member list (no member answers): whether a seed is created, restarted or
//! waited for, under the bootstrap rule; a cluster that exists is only reported on.

use super::decision::Decision;
use super::{
    Action, BootstrapStage, DesiredCluster, Observation, Phase, PodView, Reason, SnapshotSource,
    State, Version, Why, check_readable,
};
use super::{evidence, recovery, volumes};

/// What a seed is made from: the version to run and the snapshot to restore, if any.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seed<'a> {
    pub(super) version: &'a Version,
    pub(super) restore: Option<&'a SnapshotSource>,
}

/// A cluster to be bootstrapped from a snapshot its version cannot read gets no seed.
pub(super) fn unreadable_snapshot(birth: BootstrapStage<'_>, seed: Seed<'_>) -> Option<Why> {
    let source = seed.restore.filter(|_| !birth.is_bootstrapped())?;
    let problem = check_readable(&source.etcd_version, seed.version).err()?;
    Some(Why::new(
        Reason::RestoreRefused,
        format!(
            "spec.restore names snapshot {}: {problem}; no member is created (set \
             spec.version to a version that can read it)",
            source.path()
        ),
    ))
}

pub(super) fn without_member_list(
    state: State,
    obs: &Observation,
    birth: BootstrapStage<'_>,
    error: &str,
    (seed, spec): (Seed<'_>, &DesiredCluster),
) -> Decision {
    let target = seed.version;
    // Missing Services are recreated whatever else happens: without the headless Service
    // the members cannot even find each other, and creating it never touches data.
    let mut actions = Vec::new();
    if !obs.services_present {
        actions.push(Action::EnsureServices);
    }
    // A prepared joiner still waiting for its member add is no member: nothing answers
    // there and it holds no data.
    let live: Vec<_> = obs.pods.iter().filter(|p| p.may_run_a_member()).collect();
    let block = |state, why: Why, actions| {
        Decision::new(state, Phase::Blocked { reason: why.reason }, actions, why)
    };
    if let Some(why) = unreadable_snapshot(birth, seed) {
        return block(state, why, actions);
    }
    if let (BootstrapStage::Bootstrapped { .. }, Some(on)) =
        (birth, volumes::without_member_list(obs, target))
    {
        let mut d = on.decision(state);
        actions.append(&mut d.actions);
        d.actions = actions;
        return d;
    }
    match birth {
        BootstrapStage::Bootstrapped { .. } if live.is_empty() => {
            let why = Why::new(
                Reason::AllMembersLost,
                format!(
                    "no member answers and no pod runs one ({}); their data is not known to \
                     be gone, so the operator recovers nothing, creates no empty cluster in \
                     their place and deletes nothing (a pod being deleted goes once its node \
                     confirms it; an exited pod keeps its volume until it is deleted)",
                    evidence::describe(obs, &evidence::known_members(obs))
                ),
            );
            let mut d = recovery::quorum_lost(state, obs, spec, target, why);
            actions.append(&mut d.actions);
            d.actions = actions;
            d
        }
        BootstrapStage::Bootstrapped { .. } => block(
            state,
            Why::new(
                Reason::EtcdUnreachable,
                format!(
                    "{} member pod(s) exist but no member answers ({error}); changing nothing",
                    live.len()
                ),
            ),
            actions,
        ),
        BootstrapStage::NeverSeeded if obs.pods.is_empty() => {
            actions.push(Action::CreateSeed {
                version: target.clone(),
                restore: seed.restore.cloned(),
            });
            let why = Why::new(Reason::CreatingSeed, creating_seed_message(seed));
            Decision::new(state, Phase::Bootstrapping, actions, why)
        }
        BootstrapStage::NeverSeeded => unrecorded_seed(state, obs, &live, error),
        BootstrapStage::Seeding { seed: name, token } => {
            recorded_seed(state, obs, actions, (name, token), error, seed)
        }
    }
}

pub(super) fn creating_seed_message(seed: Seed<'_>) -> String {
    match seed.restore {
        Some(source) => format!(
            "no members yet: creating the seed member from snapshot {} (revision {})",
            source.path(),
            source.revision
        ),
        None => "no members yet: creating the seed member".to_string(),
    }
}

/// Pods exist but no seed was ever recorded: an older operator's seed. It is waited for,
/// or when it died before any member answered (it holds no data), deleted to start over.
pub(super) fn unrecorded_seed(
    state: State,
    obs: &Observation,
    live: &[&PodView],
    error: &str,
) -> Decision {
    if let Some(pod) = live.first() {
        return waiting_for_seed(state, pod, error);
    }
    let actions = obs
        .pods
        .iter()
        .filter(|p| !p.terminating)
        .map(|p| Action::DeletePod {
            name: p.name.clone(),
        })
        .collect();
    let why = Why::new(
        Reason::RestartingFailedSeed,
        "the seed member died before the cluster formed (it holds no data): starting over",
    );
    Decision::new(state, Phase::Bootstrapping, actions, why)
}

/// The recorded seed: started under its recorded name and token when its pod is missing,
/// recreated from the current spec when it never ran and the spec moved on, restarted when
/// it died before any member answered, waited for otherwise.
pub(super) fn recorded_seed(
    state: State,
    obs: &Observation,
    mut actions: Vec<Action>,
    (seed, token): (&str, &str),
    error: &str,
    made_from: Seed<'_>,
) -> Decision {
    let target = made_from.version;
    let Some(pod) = obs.pod(seed) else {
        actions.push(Action::StartSeed {
            name: seed.to_string(),
            token: token.to_string(),
            version: target.clone(),
            restore: made_from.restore.cloned(),
        });
        let why = Why::new(
            Reason::CreatingSeed,
            format!("starting the recorded seed member {seed}"),
        );
        return Decision::new(state, Phase::Bootstrapping, actions, why);
    };
    let stale = !pod.started && pod.version.as_deref() != Some(target.to_string().as_str());
    let (reason, message) = if pod.terminating {
        return waiting_for_seed(state, pod, error);
    } else if pod.is_dead() {
        (
            Reason::RestartingFailedSeed,
            format!(
                "seed member {seed} died before the cluster formed (no member ever answered): starting it again"
            ),
        )
    } else if stale {
        (
            Reason::RecreatingSeed,
            format!(
                "seed member {seed} never started and the spec now asks for etcd {target}: recreating it (it holds no data)"
            ),
        )
    } else {
        return waiting_for_seed(state, pod, error);
    };
    actions.push(Action::DeletePod {
        name: seed.to_string(),
    });
    Decision::new(
        state,
        Phase::Bootstrapping,
        actions,
        Why::new(reason, message),
    )
}

pub(super) fn waiting_for_seed(state: State, pod: &PodView, error: &str) -> Decision {
    let detail = pod
        .problem
        .clone()
        .unwrap_or_else(|| format!("etcd not answering yet: {error}"));
    let why = Why::new(
        Reason::WaitingForSeed,
        format!("waiting for seed member {} to start ({detail})", pod.name),
    );
    Decision::new(state, Phase::Bootstrapping, vec![], why)
}
