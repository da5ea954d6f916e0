//! The observe step of a tick: pods from Kubernetes, members and health from etcd.

use std::collections::BTreeMap;
use std::sync::Arc;

use actix::Addr;
use tokio::time::Instant;

use crate::member_client::{ListMembers, MemberClient, ask};
use crate::ports::{ApiError, ClusterApi, EtcdApi};
use etcd_operator_core::lifecycle::{
    AlarmKind, HashCheck, MemberHealth, MemberView, Membership, Observation, PodView, State,
    TlsMode, check_due,
};
use etcd_operator_core::topology::Topology;

/// Reads the world for one tick. Fails only when Kubernetes cannot be read: without the
/// pods nothing may be decided.
pub(crate) async fn observe(
    kube: &dyn ClusterApi,
    members: &Addr<MemberClient>,
    probe: &HealthProbe,
    (topology, tls): (&Topology, TlsMode),
    state: &State,
) -> Result<Observation, ApiError> {
    let view = kube.observe().await?;
    let endpoints = client_endpoints(&view.pods, topology, tls);
    let membership = if endpoints.is_empty() {
        Membership::Unreachable {
            error: "no live member pods".into(),
        }
    } else {
        let list = ListMembers {
            endpoints: endpoints.clone(),
        };
        match ask(members, list).await {
            Ok(list) => Membership::Listed {
                cluster_id: list.cluster_id,
                members: list.members,
            },
            Err(e) => Membership::Unreachable { error: e.message },
        }
    };
    let health = match &membership {
        Membership::Listed {
            members: list,
            cluster_id,
        } => probe.all(list, *cluster_id, topology, tls).await,
        Membership::Unreachable { .. } => BTreeMap::new(),
    };
    let newest_backup = if may_need_a_backup(&view, &membership, &health) {
        kube.newest_backup(state.quorum_lost_since)
            .await
            .transpose()
    } else {
        None
    };
    let corrupt = health
        .values()
        .any(|h| h.alarms.iter().any(|a| a.kind == AlarmKind::Corrupt));
    let hashes = match &membership {
        Membership::Listed { members: list, .. } if check_due(state, Instant::now(), corrupt) => {
            probe.hashes(list, &health).await
        }
        _ => None,
    };
    Ok(Observation {
        now: Instant::now(),
        newest_backup,
        pods: view.pods,
        services_present: view.services_present,
        disruption_budget: view.disruption_budget,
        claims: view.claims,
        claim_class: view.claim_class,
        recorded: view.recorded,
        name_conflict: view.name_conflict,
        restore_problem: view.restore_problem,
        endpoints,
        membership,
        health,
        tls: view.tls,
        prepares_joiners: view.prepares_joiners,
        hashes,
    })
}

/// Whether a recovery may need the newest backup: the cluster exists and no quorum of
/// its voting members answers, healthy. Only then is the store read.
fn may_need_a_backup(
    view: &crate::ports::KubeView,
    membership: &Membership,
    health: &BTreeMap<u64, MemberHealth>,
) -> bool {
    let bootstrapped = view.recorded.bootstrap.is_some() || !view.recorded.members.is_empty();
    bootstrapped
        && match membership {
            Membership::Unreachable { .. } => true,
            Membership::Listed { members, .. } => {
                let voters: Vec<&MemberView> = members.iter().filter(|m| !m.is_learner).collect();
                let healthy = voters
                    .iter()
                    .filter(|m| health.get(&m.id).is_some_and(MemberHealth::is_healthy))
                    .count();
                healthy <= voters.len() / 2
            }
        }
}

/// Status probes of members: every started member at once, straight through the etcd port
/// rather than the MemberClient's mailbox. They change nothing, so they need not wait
/// behind a membership change, and a frozen member costs one timeout (the port's deadline
/// of one call), not one per member.
pub(crate) struct HealthProbe {
    /// The etcd port.
    pub etcd: Arc<dyn EtcdApi>,
}

impl HealthProbe {
    async fn all(
        &self,
        list: &[MemberView],
        cluster_id: u64,
        topology: &Topology,
        tls: TlsMode,
    ) -> BTreeMap<u64, MemberHealth> {
        let probes = list.iter().filter(|m| m.started()).map(|m| async move {
            let endpoint = m
                .client_urls
                .first()
                .cloned()
                .unwrap_or_else(|| topology.client_url(&m.name, tls));
            let health = self
                .etcd
                .status(&endpoint)
                .await
                .unwrap_or_else(|e| MemberHealth::unreachable(&e.message));
            (m.id, of_this_cluster(health, cluster_id))
        });
        futures::future::join_all(probes)
            .await
            .into_iter()
            .collect()
    }
}

impl HealthProbe {
    /// The healthy voting members' hashes at the oldest revision among them (every one of
    /// them has it), all at once; `None` when fewer than two answered their status.
    async fn hashes(
        &self,
        list: &[MemberView],
        health: &BTreeMap<u64, MemberHealth>,
    ) -> Option<HashCheck> {
        let healthy: Vec<(&MemberView, i64)> = list
            .iter()
            .filter(|m| m.started() && !m.is_learner)
            .filter_map(|m| {
                let h = health.get(&m.id).filter(|h| h.is_healthy())?;
                Some((m, h.revision?))
            })
            .collect();
        let revision = healthy.iter().map(|(_, r)| *r).min()?;
        if healthy.len() < 2 {
            return None;
        }
        let asks = healthy.iter().filter_map(|(m, _)| {
            let endpoint = m.client_urls.first()?.clone();
            Some(async move {
                let hash = self.etcd.hash_kv(&endpoint, revision).await.ok()?;
                Some((m.id, hash))
            })
        });
        let hashes = futures::future::join_all(asks)
            .await
            .into_iter()
            .flatten()
            .collect();
        Some(HashCheck { revision, hashes })
    }
}

/// A status answer from another etcd cluster (a reused address) is no answer from this
/// member.
fn of_this_cluster(health: MemberHealth, cluster_id: u64) -> MemberHealth {
    match health.cluster_id {
        Some(other) if other != cluster_id => MemberHealth::unreachable(&format!(
            "answered for etcd cluster {other:x}, not this cluster's {cluster_id:x}"
        )),
        _ => health,
    }
}

/// Client URLs to reach etcd through: the ready member pods, or when none is ready (a
/// seed starting, a cluster recovering) every pod whose etcd may answer, those being
/// deleted included (a stopped kubelet never ends its etcd, and a majority still serving
/// there must be seen before any loss is declared). Never a prepared joiner whose etcd
/// waits for its member add: nothing answers there.
pub(crate) fn client_endpoints(pods: &[PodView], topology: &Topology, tls: TlsMode) -> Vec<String> {
    let ready: Vec<String> = pods
        .iter()
        .filter(|p| p.may_run_a_member() && p.ready)
        .map(|p| topology.client_url(&p.name, tls))
        .collect();
    if !ready.is_empty() {
        return ready;
    }
    pods.iter()
        .filter(|p| p.may_answer())
        .map(|p| topology.client_url(&p.name, tls))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_operator_core::lifecycle::PodPhase;

    fn names(endpoints: &[String]) -> Vec<&str> {
        endpoints
            .iter()
            .map(|e| e.split("//").nth(1).unwrap().split('.').next().unwrap())
            .collect()
    }

    fn pod(name: &str, f: impl FnOnce(&mut PodView)) -> PodView {
        let mut pod = PodView::running(name, "3.5.21");
        f(&mut pod);
        pod
    }

    #[test]
    fn pods_being_deleted_are_still_dialed_when_no_member_is_ready() {
        // Kubelets stopped, pods deleted: Terminating and unready, etcd may still serve.
        let pods: Vec<PodView> = ["m1", "m2", "m3"]
            .iter()
            .map(|n| {
                pod(n, |p| {
                    p.terminating = true;
                    p.ready = false;
                })
            })
            .collect();
        let endpoints = client_endpoints(&pods, &Topology::new("default", "demo"), TlsMode::Off);
        assert_eq!(names(&endpoints), ["m1", "m2", "m3"]);
    }

    #[test]
    fn ready_members_are_dialed_first_and_exited_pods_never() {
        let pods = vec![
            pod("m1", |_| {}),
            pod("m2", |p| p.terminating = true),
            pod("m3", |p| {
                p.phase = PodPhase::Failed;
                p.ready = false;
            }),
        ];
        let topology = Topology::new("default", "demo");
        assert_eq!(
            names(&client_endpoints(&pods, &topology, TlsMode::Off)),
            ["m1"]
        );
        let unready: Vec<PodView> = pods
            .into_iter()
            .map(|mut p| {
                p.ready = false;
                p
            })
            .collect();
        assert_eq!(
            names(&client_endpoints(&unready, &topology, TlsMode::Off)),
            ["m1", "m2"]
        );
    }
}
