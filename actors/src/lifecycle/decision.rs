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

pub(super) fn settle(mut state: State, phase: Phase, actions: Vec<Action>, why: Why) -> Decision {
    state.phase = phase;
    Decision {
        state,
        actions,
        why,
    }
}

pub(super) fn blocked(state: State, why: Why) -> Decision {
    settle(state, Phase::Blocked { reason: why.reason }, vec![], why)
}

pub(super) type Step = Box<dyn FnOnce(State) -> Decision>;
