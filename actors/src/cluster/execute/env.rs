//! What an action needs and what it gives back: the ports and names it reaches the world
//! with, what it did, and why it failed (with the kind of error it ran into). A leaf that
//! every kind of action imports.

use actix::Addr;

use crate::member_client::MemberClient;
use crate::ports::{ApiError, ClusterApi, EtcdError, EtcdErrorKind};
use etcd_operator_core::lifecycle::TlsMode;
use etcd_operator_core::outcome::Cause;
use etcd_operator_core::topology::Topology;

use crate::cluster::services_gate::ServicesGate;

/// What an action did, and to which member.
pub(super) struct Done {
    pub(super) note: String,
    pub(super) member: Option<String>,
}

impl Done {
    pub(super) fn cluster(note: String) -> Self {
        Done { note, member: None }
    }

    pub(super) fn member(note: String, member: &str) -> Self {
        Done {
            note,
            member: Some(member.to_string()),
        }
    }
}

/// Why an action failed, with the kind of what it ran into.
pub(super) struct Failure {
    pub(super) message: String,
    pub(super) cause: Cause,
}

impl Failure {
    /// An etcd call failed while `context`.
    pub(super) fn etcd(context: String, error: &EtcdError) -> Self {
        Failure {
            message: format!("{context}: {error}"),
            cause: Cause::Etcd(error.kind),
        }
    }

    /// A Kubernetes API call failed while `context`.
    pub(super) fn kube(context: String, error: &ApiError) -> Self {
        Failure {
            message: format!("{context}: {error}"),
            cause: Cause::Kubernetes(error.kind()),
        }
    }

    /// No pod could be made: the headless Service was not.
    pub(super) fn services_missing(message: String) -> Self {
        Failure {
            message,
            cause: Cause::ServicesMissing,
        }
    }

    /// etcd's "not yet": its gate after a join, a learner still catching up.
    pub(super) fn is_not_yet(&self) -> bool {
        matches!(
            self.cause,
            Cause::Etcd(EtcdErrorKind::UnhealthyCluster | EtcdErrorKind::LearnerNotReady)
        )
    }
}

/// Everything an action needs to reach the world.
pub(crate) struct ActionEnv<'a> {
    pub kube: &'a dyn ClusterApi,
    pub members: &'a Addr<MemberClient>,
    pub topology: &'a Topology,
    /// The TLS mode of the spec: the scheme of every URL given to new members.
    pub tls: TlsMode,
    /// Client URLs of the live members, for membership calls.
    pub endpoints: Vec<String>,
    /// What a member's pod waits for while the headless Service is being made.
    pub services: ServicesGate,
}
