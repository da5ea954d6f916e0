//! How each action of a tick ended: what the act step hands to the report, the logs, the
//! trace and the back-off. A leaf: it names only the lifecycle's `Action` and the kinds of
//! the ports' errors.

use serde::Serialize;

use crate::lifecycle::Action;
use crate::ports::{ApiErrorKind, EtcdErrorKind};

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
        /// Why, for people.
        error: String,
        /// What it ran into, by kind.
        cause: Cause,
    },
}

/// What a failed action ran into: the kind of its error, kept from the port that raised
/// it so that the report and the back-off can tell a refusal from a passing fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "from", content = "kind", rename_all = "camelCase")]
pub enum Cause {
    /// A Kubernetes API call failed.
    Kubernetes(ApiErrorKind),
    /// An etcd call failed.
    Etcd(EtcdErrorKind),
    /// The cluster's headless Service could not be made this tick, so no pod was made.
    ServicesMissing,
}

impl Cause {
    /// A stable snake_case name (`kubernetes_forbidden`, `etcd_timeout`, ...), for logs
    /// and Events.
    pub fn label(self) -> String {
        match self {
            Cause::Kubernetes(kind) => format!("kubernetes_{}", kind.metric_label()),
            Cause::Etcd(kind) => format!("etcd_{}", kind.metric_label()),
            Cause::ServicesMissing => "services_missing".to_string(),
        }
    }

    /// A failure that retrying soon does not mend: the operator may not do it (a missing
    /// permission, a namespace being deleted, the leader fence), or the API server
    /// rejected the request itself. A tick that met only such failures backs off to the
    /// longest wait at once.
    pub fn is_lasting(self) -> bool {
        matches!(
            self,
            Cause::Kubernetes(ApiErrorKind::Forbidden | ApiErrorKind::Invalid)
        )
    }
}

impl ActionResult {
    /// Whether the action was carried out.
    pub fn is_done(&self) -> bool {
        matches!(self, ActionResult::Done { .. })
    }
}
