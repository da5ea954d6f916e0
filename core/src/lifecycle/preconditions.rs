//! What blocks every action before any rule runs: a spec the operator cannot act on, and
//! members answering for another etcd cluster than the one recorded.

use super::decision::Decision;
use super::{DesiredCluster, Membership, Observation, Phase, Reason, State, Version, Why};
use super::{recovery, tls};

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

/// The checks before any rule: a cluster being deleted, a changed cluster ID, a bad spec,
/// unusable TLS, a name owned by someone else or a restore not allowed blocks it, and
/// `paused` only reports. Passed: the state (its cluster ID remembered) and the target
/// version; refused: the decision (boxed: it is large, and made once a tick).
pub(super) fn gate(
    mut state: State,
    obs: &Observation,
    spec: &DesiredCluster,
) -> Result<(State, Version), Box<Decision>> {
    if spec.deleting {
        let why = Why::new(
            Reason::Deleting,
            "the EtcdCluster is being deleted (metadata.deletionTimestamp is set): no pod, \
             claim or recovery is made for it; the garbage collector removes what it owns",
        );
        return Err(Box::new(Decision::blocked(state, why)));
    }
    if let Err(why) = check_cluster_id(&mut state, obs) {
        return Err(Box::new(Decision::blocked(state, why)));
    }
    let target = match check_spec(spec) {
        Ok(target) => target,
        Err(why) => return Err(Box::new(Decision::blocked(state, why))),
    };
    if let Err(why) = tls::check(obs, spec) {
        return Err(Box::new(Decision::blocked(state, why)));
    }
    if let Some(owner) = &obs.name_conflict {
        let why = Why::new(
            Reason::NameConflict,
            format!(
                "{owner}; this cluster shares nothing with it and waits until the name is free"
            ),
        );
        return Err(Box::new(Decision::blocked(state, why)));
    }
    if let Some(problem) = obs
        .restore_problem
        .as_ref()
        .filter(|_| spec.restore.is_some())
    {
        return Err(Box::new(Decision::blocked(
            state,
            Why::new(Reason::RestoreNotAllowed, problem.clone()),
        )));
    }
    if spec.paused {
        let why = Why::new(
            Reason::Paused,
            "spec.paused is true: observing and reporting only",
        );
        return Err(Box::new(Decision::new(state, Phase::Paused, vec![], why)));
    }
    Ok((state, target))
}
