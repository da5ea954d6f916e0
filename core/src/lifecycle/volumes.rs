//! Members on PersistentVolumeClaims (`spec.pod.persistentVolumeClaimSpec`): a member's
//! identity is its volume. A member whose pod is gone while its claim keeps its data gets
//! a new pod on it, under its own name; etcd sees the same member come back, so nothing
//! changes in the membership, and a cluster whose pods all went at once (a power cut,
//! every pod deleted) comes back whole. Only a member whose claim is lost (or gone) has
//! lost its data, and only that one is replaced.

use std::collections::BTreeSet;

use super::decision::Decision;
use super::{
    Action, DesiredCluster, MemberView, Observation, Phase, Reason, State, Version, Why, evidence,
};

/// What to do for the members whose pods are gone while their volumes hold their data.
#[derive(Debug, PartialEq)]
pub(super) enum OnVolumes {
    /// A pod of such a member is still being deleted: its volume is released only once
    /// it is gone, so the new pod waits.
    Wait(Why),
    /// New pods on the volumes.
    Restart(Vec<Action>, Why),
}

impl OnVolumes {
    /// The decision of members restarted on their volumes (or waited for): part of a
    /// rolling restart, or a recovery.
    pub(super) fn decision(self, state: State) -> Decision {
        let phase = match state.phase {
            Phase::Restarting => Phase::Restarting,
            _ => Phase::Recovering,
        };
        match self {
            OnVolumes::Wait(why) => Decision::new(state, phase, vec![], why),
            OnVolumes::Restart(actions, why) => Decision::new(state, phase, actions, why),
        }
    }
}

/// Whether the member named `name` may be restarted on its volume: it has a claim that
/// holds its data.
pub(super) fn on_a_volume(obs: &Observation, name: &str) -> bool {
    obs.claims.get(name).is_some_and(|c| c.phase.holds_data())
}

/// With etcd's member list: the started members whose pods are missing or being deleted
/// and whose claims hold their data (voters as voters, learners as learners).
pub(super) fn with_member_list(
    obs: &Observation,
    members: &[MemberView],
    version: &Version,
) -> Option<OnVolumes> {
    let started = members
        .iter()
        .filter(|m| m.started())
        .map(|m| m.name.as_str());
    if let Some(on) = exited(obs, started) {
        return Some(on);
    }
    let gone: Vec<&MemberView> = members
        .iter()
        .filter(|m| m.started() && on_a_volume(obs, &m.name))
        .filter(|m| obs.pod(&m.name).is_none_or(|p| p.terminating))
        .collect();
    let peers: Vec<String> = members.iter().filter_map(MemberView::pod_name).collect();
    let restarts = gone
        .iter()
        .map(|m| (m.name.clone(), !m.is_learner))
        .collect();
    decide(obs, restarts, peers, version)
}

/// Without a member list (no member answers): every claim holding data whose pod is
/// missing or being deleted. Started as non-voters for the client Service until etcd's
/// list says which are voting members.
pub(super) fn without_member_list(obs: &Observation, version: &Version) -> Option<OnVolumes> {
    if let Some(on) = exited(obs, obs.claims.keys().map(String::as_str)) {
        return Some(on);
    }
    let gone: Vec<(String, bool)> = obs
        .claims
        .iter()
        .filter(|(_, c)| c.phase.holds_data())
        .filter(|(name, _)| obs.pod(name).is_none_or(|p| p.terminating))
        .map(|(name, _)| (name.clone(), false))
        .collect();
    let mut peers: BTreeSet<String> = obs.claims.keys().cloned().collect();
    peers.extend(
        obs.pods
            .iter()
            .filter(|p| p.may_run_a_member())
            .map(|p| p.name.clone()),
    );
    decide(obs, gone, peers.into_iter().collect(), version)
}

/// Members among `names` whose pods exited for good (Failed or Succeeded: a graceful node
/// shutdown, an eviction) while their claims hold their data: their pods are deleted, the
/// claims kept, and the members come back on them under their own names, with or without
/// a quorum. Never replaced: their data is there.
fn exited<'a>(obs: &Observation, names: impl Iterator<Item = &'a str>) -> Option<OnVolumes> {
    let exited: Vec<&str> = names
        .filter(|name| evidence::held_on_claim(obs, name))
        .filter(|name| {
            evidence::member_data(obs, name)
                == evidence::MemberData::Unreachable(evidence::Unreachable::Exited)
        })
        .collect();
    if exited.is_empty() {
        return None;
    }
    let why = Why::new(
        Reason::RestartingMembers,
        format!(
            "the pods of {} exited and their claims hold their data: deleting the pods (the \
             claims stay) to restart the same members on them",
            exited.join(", ")
        ),
    );
    let actions = exited
        .into_iter()
        .map(|name| Action::RecreatePod {
            name: name.to_string(),
        })
        .collect();
    Some(OnVolumes::Restart(actions, why))
}

fn decide(
    obs: &Observation,
    gone: Vec<(String, bool)>,
    peers: Vec<String>,
    version: &Version,
) -> Option<OnVolumes> {
    if gone.is_empty() {
        return None;
    }
    let names: Vec<&str> = gone.iter().map(|(n, _)| n.as_str()).collect();
    if let Some(old) = names.iter().find(|n| obs.pod(n).is_some()) {
        return Some(OnVolumes::Wait(Why::new(
            Reason::RestartingMembers,
            format!("waiting for member {old}'s old pod to go; its volume keeps its data"),
        )));
    }
    let why = Why::new(
        Reason::RestartingMembers,
        format!(
            "the pods of {} are gone and their volumes hold their data: new pods on them, \
             same members (etcd {version})",
            names.join(", ")
        ),
    );
    let actions = gone
        .into_iter()
        .map(|(name, voter)| Action::RestartMember {
            name,
            version: version.clone(),
            peers: peers.clone(),
            voter,
        })
        .collect();
    Some(OnVolumes::Restart(actions, why))
}

/// The claims to grow to the spec's storage request: those that hold data and ask for
/// less, when their StorageClass allows expansion (otherwise the status says why they
/// stay as they are; a claim never shrinks).
pub(super) fn growth(obs: &Observation, spec: &DesiredCluster) -> Vec<Action> {
    let Some(storage) = &spec.storage else {
        return Vec::new();
    };
    if !obs.claim_class.as_ref().is_some_and(|c| c.allows_expansion) {
        return Vec::new();
    }
    obs.claims
        .iter()
        .filter(|(_, c)| c.phase.holds_data())
        .filter(|(_, c)| c.requested_bytes.is_some_and(|r| r < storage.bytes))
        .map(|(name, _)| Action::ExpandClaim {
            name: name.clone(),
            quantity: storage.quantity.clone(),
        })
        .collect()
}
