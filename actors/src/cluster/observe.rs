//! The observe step of a tick: pods from Kubernetes, members and health from etcd.

use std::collections::BTreeMap;

use actix::Addr;
use tokio::time::Instant;

use crate::lifecycle::{MemberHealth, Membership, Observation, PodView};
use crate::member_client::{ListMembers, MemberClient, MemberStatus};
use crate::ports::{ApiError, ClusterApi, EtcdError};
use crate::topology::Topology;

/// Reads the world for one tick. Fails only when Kubernetes cannot be read: without the
/// pods nothing may be decided.
pub(crate) async fn observe(
    kube: &dyn ClusterApi,
    members: &Addr<MemberClient>,
    topology: &Topology,
) -> Result<Observation, ApiError> {
    let view = kube.observe().await?;
    let endpoints = client_endpoints(&view.pods, topology);
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
    let mut health = BTreeMap::new();
    if let Membership::Listed {
        members: list,
        cluster_id,
    } = &membership
    {
        for m in list.iter().filter(|m| m.started()) {
            let endpoint = m
                .client_urls
                .first()
                .cloned()
                .unwrap_or_else(|| topology.client_url(&m.name));
            let status = ask(members, MemberStatus { endpoint })
                .await
                .unwrap_or_else(|e| MemberHealth::unreachable(&e.message));
            health.insert(m.id, of_this_cluster(status, *cluster_id));
        }
    }
    Ok(Observation {
        now: Instant::now(),
        pods: view.pods,
        services_present: view.services_present,
        recorded: view.recorded,
        name_conflict: view.name_conflict,
        endpoints,
        membership,
        health,
    })
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
/// seed starting, a cluster recovering) every live one.
pub(crate) fn client_endpoints(pods: &[PodView], topology: &Topology) -> Vec<String> {
    let live = || pods.iter().filter(|p| !p.is_dead());
    let ready: Vec<String> = live()
        .filter(|p| p.ready)
        .map(|p| topology.client_url(&p.name))
        .collect();
    if !ready.is_empty() {
        return ready;
    }
    live().map(|p| topology.client_url(&p.name)).collect()
}

/// Sends a call to the MemberClient; a stopped MemberClient is an unavailable etcd.
pub(crate) async fn ask<M, T>(client: &Addr<MemberClient>, msg: M) -> Result<T, EtcdError>
where
    M: actix::Message<Result = Result<T, EtcdError>> + Send + 'static,
    T: Send + 'static,
    MemberClient: actix::Handler<M>,
{
    client.send(msg).await.unwrap_or_else(|e| {
        Err(EtcdError::classify(format!(
            "member client unavailable: {e}"
        )))
    })
}
