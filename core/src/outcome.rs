//! How each action of a tick ended: what the act step hands to the report, the logs and
//! the trace. A leaf: it names only the lifecycle's `Action`.

use serde::Serialize;

use crate::lifecycle::Action;

/// What happened to one action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActionOutcome {
    /// The action.
    pub action: Action,
    /// How it ended.
    pub result: ActionResult,
}

/// How one action ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "camelCase")]
pub enum ActionResult {
    /// It was carried out.
    Done {
        /// What it did, for people.
        note: String,
        /// The member (pod) it concerned, if one.
        member: Option<String>,
    },
    /// etcd said "not yet" (its 5-second gate after a join, a learner still catching up):
    /// retried on the next tick, not worth a Warning.
    NotYet {
        /// What etcd said.
        error: String,
    },
    /// It failed.
    Failed {
        /// Why.
        error: String,
    },
}

impl ActionResult {
    /// Whether the action was carried out.
    pub fn is_done(&self) -> bool {
        matches!(self, ActionResult::Done { .. })
    }
}
