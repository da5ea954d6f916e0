//! What one decision is: the next state, the actions in order, and why.

use super::{Action, Phase, State, Why};

/// The outcome of one decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The state to carry to the next tick.
    pub state: State,
    /// What the actor must do now, in order.
    pub actions: Vec<Action>,
    /// Why: the reason shown in conditions, logs and Events.
    pub why: Why,
}

impl Decision {
    /// `state` moved to `phase`, with the actions to take and why.
    pub(super) fn new(mut state: State, phase: Phase, actions: Vec<Action>, why: Why) -> Self {
        state.phase = phase;
        Decision {
            state,
            actions,
            why,
        }
    }

    /// `state` blocked for `why`, with no action.
    pub(super) fn blocked(state: State, why: Why) -> Self {
        Decision::new(state, Phase::Blocked { reason: why.reason }, vec![], why)
    }
}

pub(super) type PendingDecision = Box<dyn FnOnce(State) -> Decision>;
