//! What blocks every action before any rule runs: a spec the operator cannot act on, and
//! members answering for another etcd cluster than the one recorded.

use super::recovery;
use super::{DesiredCluster, Membership, Observation, Reason, State, Version, Why};

/// Remembers the cluster ID etcd answers with, and refuses an answer from another cluster
/// than the one recorded (a reused address, a stale DNS record): such an endpoint is never
/// taken for a member of this cluster.
pub(super) fn check_cluster_id(state: &mut State, obs: &Observation) -> Result<(), Why> {
    let Membership::Listed { cluster_id, .. } = &obs.membership else {
        return Ok(());
    };
    match recovery::recorded_cluster_id(state, obs) {
        Some(expected) if expected != *cluster_id => Err(Why::new(
            Reason::ClusterIdMismatch,
            format!(
                "the members answered for etcd cluster {cluster_id:x}, but this EtcdCluster's \
                 cluster is {expected:x}; nothing is changed (check the pods and DNS records \
                 of this cluster)"
            ),
        )),
        _ => {
            state.cluster_id = Some(*cluster_id);
            Ok(())
        }
    }
}

pub(super) fn check_spec(spec: &DesiredCluster) -> Result<Version, Why> {
    if let Some(problem) = &spec.name_problem {
        return Err(Why::new(Reason::InvalidName, problem.clone()));
    }
    if let Some(problem) = &spec.pod_policy_problem {
        return Err(Why::new(Reason::InvalidSpec, problem.clone()));
    }
    if let Some(problem) = &spec.image_problem {
        return Err(Why::new(Reason::ImageNotAllowed, problem.clone()));
    }
    if spec.size == 0 {
        return Err(Why::new(
            Reason::InvalidSpec,
            "spec.size must be at least 1",
        ));
    }
    spec.version
        .parse::<Version>()
        .map_err(|e| Why::new(Reason::InvalidSpec, format!("spec.version: {e}")))
}
