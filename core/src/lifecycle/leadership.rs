//! The leader's restart without an election: before the leader's member is restarted
//! (a rolling restart, an upgrade), leadership is handed to another member.
//!
//! etcd tries to hand leadership over by itself when it is stopped with SIGTERM, but
//! nothing waits for that; when it does not happen in time, or the leader is killed, the
//! others notice only after an election timeout and then elect, and meanwhile every
//! member answers "no leader" and serves no request. Asked of the running leader,
//! `move-leader` makes a member of the operator's choice the leader and returns once it
//! leads; the leader's restart that follows is a follower's.

use super::view::ClusterView;
use super::{Action, MemberView, Reason, Why};

/// The `MoveLeader` to take before member `next` goes through `step` (what happens to it
/// next, for the message), with its reason, when `next` is the leader and another voting
/// member can lead: healthy, its pod Ready, the furthest along in the raft log (ties: the
/// first by name).
pub(super) fn hand_over(
    view: &ClusterView<'_>,
    next: &MemberView,
    step: &str,
) -> Option<(Action, Why)> {
    if view.leader != Some(next.id) {
        return None;
    }
    let index = |m: &MemberView| view.obs.health.get(&m.id).and_then(|h| h.raft_index);
    let to = view
        .members
        .iter()
        .filter(|m| m.id != next.id && !m.is_learner && view.is_healthy(m))
        .filter(|m| {
            view.obs
                .pod(&m.name)
                .is_some_and(|p| p.ready && !p.terminating)
        })
        .max_by(|a, b| index(a).cmp(&index(b)).then_with(|| b.name.cmp(&a.name)))?;
    let why = Why::new(
        Reason::MovingLeader,
        format!(
            "member {} is the leader and the last to {step}; it hands leadership over to \
             member {} first",
            next.name, to.name
        ),
    );
    let action = Action::MoveLeader {
        from: next.name.clone(),
        to: to.id,
        name: to.name.clone(),
    };
    Some((action, why))
}
