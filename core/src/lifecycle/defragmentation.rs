//! Defragmentation by rule, as data: which member is defragmented next, and when.
//!
//! A compaction frees pages inside a member's backend; only a defragmentation returns
//! them, rewriting the file while the member serves nothing. The operator defragments a
//! converged cluster one member a tick, only while every member is healthy with its pod
//! Ready: a member is due when [`is_due`] says so by its sizes, and was not defragmented
//! in the last [`DEFRAG_MIN_INTERVAL`]. Followers go first; a due leader hands
//! leadership over first (so its defragmentation is a follower's), unless it is the only
//! member. The defragmentation returns once it is done, and the next member waits for a
//! tick that sees every member healthy again.

use std::collections::BTreeMap;

use tokio::time::Instant;

use super::leadership::hand_over;
use super::view::ClusterView;
use super::{
    Action, DEFRAG_MIN_INTERVAL, Decision, Defragmentation, MemberHealth, MemberView, Phase,
    Reason, Why, is_due,
};

/// The defragmentation step of a converged cluster, if one is due: a member's
/// defragmentation, or the leader's hand-over before its own. `defragmented` holds when
/// each member was last defragmented (this actor's life).
pub(super) fn next(
    converged: &Decision,
    view: &ClusterView<'_>,
    rule: (Defragmentation, u64),
    defragmented: &BTreeMap<u64, Instant>,
) -> Option<(Action, Why)> {
    let (Defragmentation::Auto(rule), quota) = rule else {
        return None;
    };
    let obs = view.obs;
    let all_healthy = view
        .members
        .iter()
        .all(|m| view.is_healthy(m) && obs.pod(&m.name).is_some_and(|p| p.ready && !p.terminating));
    if !all_healthy || converged.state.phase != Phase::Running {
        return None;
    }
    let recent = |m: &MemberView| {
        defragmented
            .get(&m.id)
            .is_some_and(|at| obs.now.duration_since(*at) < DEFRAG_MIN_INTERVAL)
    };
    let due: Vec<(&MemberView, &MemberHealth)> = view
        .members
        .iter()
        .filter(|m| !recent(m))
        .filter_map(|m| Some((m, obs.health.get(&m.id)?)))
        .filter(|(_, h)| is_due(h, quota, &rule))
        .collect();
    let (member, health) = due
        .iter()
        .find(|(m, _)| view.leader != Some(m.id))
        .or_else(|| due.first())?;
    if let Some(hand_over) = hand_over(view, member, "be defragmented") {
        return Some(hand_over);
    }
    let size = health.db_size.unwrap_or_default();
    let in_use = health.db_size_in_use.unwrap_or_default();
    let why = Why::new(
        Reason::Defragmenting,
        format!(
            "defragmenting member {}: its {size}-byte backend holds {in_use} bytes in use \
             ({}% of the {quota}-byte quota)",
            member.name,
            size.saturating_mul(100) / quota.max(1)
        ),
    );
    let action = Action::Defragment {
        name: member.name.clone(),
        id: member.id,
        db_size: size,
    };
    Some((action, why))
}
