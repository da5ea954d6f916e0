//! When the operator compares the members' hashes, and what it keeps of the result (the
//! comparison itself is in [`hashes`](super::hashes)).

use std::time::Duration;

use tokio::time::Instant;

use super::{Consistency, HASH_CHECK_INTERVAL, Observation, State, compare};

/// Whether this tick compares the members' hashes: while CORRUPT is raised or a
/// divergence is known, at once and then at most every [`RECHECK_INTERVAL`]; else every
/// [`HASH_CHECK_INTERVAL`], the first one interval after the actor's first tick (an
/// operator that starts does not read every member's whole store at once).
pub fn check_due(state: &State, now: Instant, corrupt_raised: bool) -> bool {
    let suspect = corrupt_raised || state.divergence.is_some();
    let interval = if suspect {
        RECHECK_INTERVAL
    } else {
        HASH_CHECK_INTERVAL
    };
    match state.hashes_checked {
        None => suspect,
        Some(at) => now.duration_since(at) >= interval,
    }
}

/// How often the hashes are compared again while something is known to differ.
pub const RECHECK_INTERVAL: Duration = Duration::from_secs(60);

/// Takes in the comparison this tick made, if it made one.
pub(super) fn track(state: &mut State, obs: &Observation) {
    let Some(check) = &obs.hashes else {
        state.hashes_checked.get_or_insert(obs.now);
        return;
    };
    state.hashes_checked = Some(obs.now);
    match compare(check) {
        Consistency::Consistent => state.divergence = None,
        Consistency::Differs(found) => state.divergence = Some(found),
        Consistency::Inconclusive => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::Divergence;

    #[test]
    fn hashes_are_compared_hourly_from_the_first_tick_and_at_once_under_corrupt() {
        let t0 = Instant::now();
        let fresh = State::default();
        assert!(!check_due(&fresh, t0, false), "not at the first tick");
        assert!(
            check_due(&fresh, t0, true),
            "at once when CORRUPT is raised"
        );
        let mut state = State {
            hashes_checked: Some(t0),
            ..State::default()
        };
        assert!(!check_due(&state, t0 + RECHECK_INTERVAL, false));
        assert!(check_due(&state, t0 + HASH_CHECK_INTERVAL, false));
        state.divergence = Some(Divergence {
            members: vec![3],
            revision: 9,
        });
        assert!(
            check_due(&state, t0 + RECHECK_INTERVAL, false),
            "again soon"
        );
    }
}
