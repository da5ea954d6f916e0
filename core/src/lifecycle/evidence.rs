//! Whether a member's data is gone: the one answer every destructive action asks.
//!
//! The operator deletes claims, replaces members and recovers from a lost quorum only on
//! what the observation proves, never on what it merely cannot see. The rule:
//!
//! - a member whose pod object exists is never gone, whatever its state: a pod being
//!   deleted (its kubelet may be stopped while etcd still serves), Failed or Succeeded
//!   (its emptyDir stays on the node until the pod object goes), Unknown, or on a node
//!   that stopped reporting is *unreachable*: its data may be there;
//! - a member whose pod object no longer exists keeps its data when its claim holds it
//!   (Pending or Bound): it is restarted on that claim;
//! - otherwise (no pod object, and no claim, or a claim Lost or being deleted, which no pod
//!   mounts any more) its data is gone.
//!
//! A node known to be gone (deleted, or tainted `node.kubernetes.io/out-of-service`) is
//! seen through its pods: Kubernetes' pod garbage collector deletes the pod objects of
//! such nodes, and from then on the rule above applies. `docs/design/safety.md` lists, for each
//! destructive action, the evidence it requires.

use std::fmt;

use super::{Observation, PodPhase, PodView};

/// What the observation proves about one member's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemberData {
    /// Its pod exists and may run etcd on the data.
    Live,
    /// Its pod exists but cannot be counted on to serve; the data may be there.
    Unreachable(Unreachable),
    /// Its pod object is gone and its claim holds the data: it comes back on the claim.
    OnClaim,
    /// Its data is gone.
    Gone(Gone),
}

/// Why a member whose pod exists cannot be counted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unreachable {
    /// The pod is being deleted (its etcd may still run: a stopped kubelet never ends it).
    Terminating,
    /// The pod's containers exited for good (Failed or Succeeded): a graceful node
    /// shutdown, an eviction. Its volume stays until the pod object is deleted.
    Exited,
    /// The kubelet stopped reporting the pod (phase Unknown).
    NotReported,
}

/// Why a member's data is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gone {
    /// No pod object, and no claim: it lived in the pod's emptyDir.
    WithPod,
    /// No pod object, and its claim's volume is lost.
    ClaimLost,
    /// No pod object, and its claim is deleted or being deleted.
    ClaimDeleted,
}

impl MemberData {
    /// The data is gone for good.
    pub(crate) fn is_gone(self) -> bool {
        matches!(self, MemberData::Gone(_))
    }
}

/// What `obs` proves about the data of member `name`.
pub(crate) fn member_data(obs: &Observation, name: &str) -> MemberData {
    if let Some(pod) = obs.pod(name) {
        return match unreachable(pod) {
            Some(why) => MemberData::Unreachable(why),
            None => MemberData::Live,
        };
    }
    match obs.claims.get(name).map(|c| c.phase) {
        None => MemberData::Gone(Gone::WithPod),
        Some(phase) if phase.holds_data() => MemberData::OnClaim,
        Some(super::ClaimPhase::Lost) => MemberData::Gone(Gone::ClaimLost),
        Some(_) => MemberData::Gone(Gone::ClaimDeleted),
    }
}

/// Why the pod cannot be counted on to run its member, if it cannot.
fn unreachable(pod: &PodView) -> Option<Unreachable> {
    if pod.terminating {
        return Some(Unreachable::Terminating);
    }
    match pod.phase {
        PodPhase::Failed | PodPhase::Succeeded => Some(Unreachable::Exited),
        PodPhase::Unknown => Some(Unreachable::NotReported),
        PodPhase::Pending | PodPhase::Running => None,
    }
}

/// Whether member `name` keeps its data on a claim that holds it: its pod (when there is
/// one) mounts its claim, and the claim is Pending or Bound. Such a member is restarted on
/// its claim, never replaced, and its claim is never deleted while it is a member.
pub(crate) fn held_on_claim(obs: &Observation, name: &str) -> bool {
    let claimed = obs.claims.get(name).is_some_and(|c| c.phase.holds_data());
    claimed && obs.pod(name).is_none_or(|p| p.on_claim)
}

/// Every member the observation knows of when no member list can be read: those the
/// status remembers, every pod that may have run one (not a prepared joiner that never
/// ran), and every claim; by name.
pub(crate) fn known_members(obs: &Observation) -> Vec<String> {
    let mut known: Vec<String> = obs.recorded.members.clone();
    let pods = obs.pods.iter().filter(|p| !p.awaits_membership());
    known.extend(pods.map(|p| p.name.clone()));
    known.extend(obs.claims.keys().cloned());
    known.sort();
    known.dedup();
    known
}

/// What the observation proves of each of `names`, for people: `m1: its pod ...; m2: ...`.
pub(crate) fn describe(obs: &Observation, names: &[String]) -> String {
    if names.is_empty() {
        return "no member is known".to_string();
    }
    let each: Vec<String> = names
        .iter()
        .map(|name| format!("{name}: {}", member_data(obs, name)))
        .collect();
    each.join("; ")
}

impl fmt::Display for MemberData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MemberData::Live => "its pod runs",
            MemberData::Unreachable(Unreachable::Terminating) => {
                "its pod is being deleted but may still run etcd"
            }
            MemberData::Unreachable(Unreachable::Exited) => {
                "its pod exited and keeps its volume until the pod is deleted"
            }
            MemberData::Unreachable(Unreachable::NotReported) => {
                "its pod is no longer reported by its node"
            }
            MemberData::OnClaim => "its pod is gone and its claim holds its data",
            MemberData::Gone(Gone::WithPod) => "its pod is gone with its emptyDir",
            MemberData::Gone(Gone::ClaimLost) => "its pod is gone and its claim's volume is lost",
            MemberData::Gone(Gone::ClaimDeleted) => "its pod and its claim are gone",
        })
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::super::ClaimPhase;
    use super::super::fixtures::World;
    use super::*;

    fn data(world: World, name: &str) -> MemberData {
        member_data(&world.build(), name)
    }

    fn world() -> World {
        World::healthy(Instant::now(), 1, "3.5.35")
    }

    /// A change to a member's pod.
    type Change = fn(&mut PodView);

    #[test]
    fn a_member_whose_pod_object_exists_is_never_gone_whatever_its_state() {
        let cases: [(Change, Unreachable); 4] = [
            (|p| p.terminating = true, Unreachable::Terminating),
            (|p| p.phase = PodPhase::Failed, Unreachable::Exited),
            (|p| p.phase = PodPhase::Succeeded, Unreachable::Exited),
            (|p| p.phase = PodPhase::Unknown, Unreachable::NotReported),
        ];
        for (change, why) in cases {
            assert_eq!(
                data(world().pod("m1", change), "m1"),
                MemberData::Unreachable(why)
            );
            // Not even when its claim is lost or being deleted: the pod still mounts it.
            for phase in [ClaimPhase::Lost, ClaimPhase::Deleting] {
                let claimed = world().claim("m1", phase).pod("m1", change);
                assert_eq!(data(claimed, "m1"), MemberData::Unreachable(why));
            }
        }
        assert_eq!(data(world(), "m1"), MemberData::Live);
        let deleting = world().claim("m1", ClaimPhase::Deleting);
        assert_eq!(data(deleting, "m1"), MemberData::Live);
    }

    #[test]
    fn a_member_without_a_pod_object_is_gone_unless_its_claim_holds_its_data() {
        let gone = || world().without_pod("m1");
        assert_eq!(data(gone(), "m1"), MemberData::Gone(Gone::WithPod));
        for phase in [ClaimPhase::Pending, ClaimPhase::Bound] {
            assert_eq!(data(gone().claim("m1", phase), "m1"), MemberData::OnClaim);
        }
        let lost = gone().claim("m1", ClaimPhase::Lost);
        assert_eq!(data(lost, "m1"), MemberData::Gone(Gone::ClaimLost));
        let deleted = gone().claim("m1", ClaimPhase::Deleting);
        assert_eq!(data(deleted, "m1"), MemberData::Gone(Gone::ClaimDeleted));
    }

    #[test]
    fn a_member_is_held_on_its_claim_only_when_its_own_pod_mounts_it() {
        let claimed = world().claim("m1", ClaimPhase::Bound);
        assert!(held_on_claim(&claimed.clone().build(), "m1"));
        assert!(held_on_claim(
            &claimed.clone().without_pod("m1").build(),
            "m1"
        ));
        let on_empty_dir = claimed.pod("m1", |p| p.on_claim = false);
        assert!(!held_on_claim(&on_empty_dir.build(), "m1"));
        assert!(!held_on_claim(&world().build(), "m1"));
    }
}
