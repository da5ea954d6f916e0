//! Actions on the cluster's Kubernetes objects beside new member pods: its Services,
//! certificates, disruption budget, claims, and the pods of members that stay.

use crate::ports::{ServiceKind, VersionChange};
use etcd_operator_core::lifecycle::{CaRotationStep, Version};

use super::env::{ActionEnv, Done, Failure};

/// Both Services at once; the headless one, which the members' names live under, opens
/// the gate to their pods as soon as it is there (the client Service, whose cluster IP
/// the API server allocates, can take seconds longer under load).
pub(super) async fn ensure_services(env: &ActionEnv<'_>) -> Result<Done, Failure> {
    let headless = async {
        let made = env.kube.ensure_service(ServiceKind::Headless).await;
        env.services.settle(made.is_ok());
        made
    };
    let (headless, client) = futures::join!(headless, env.kube.ensure_service(ServiceKind::Client));
    let t = env.topology;
    headless
        .and(client)
        .map_err(|e| Failure::kube(format!("ensuring the Services of {}", t.name), &e))?;
    Ok(Done::cluster(format!(
        "Services {} and {} ensured",
        t.name,
        t.client_service()
    )))
}

/// The operator-managed certificates that are missing, invalid or due.
pub(super) async fn issue_certificates(env: &ActionEnv<'_>) -> Result<Done, Failure> {
    let issued = env.kube.issue_certificates().await;
    let issued = issued.map_err(|e| Failure::kube("issuing certificates".into(), &e))?;
    Ok(Done::cluster(issued))
}

/// The CA rotation moved from step `from` to step `to`.
pub(super) async fn advance_ca_rotation(
    env: &ActionEnv<'_>,
    from: Option<CaRotationStep>,
    to: Option<CaRotationStep>,
) -> Result<Done, Failure> {
    let advanced = env.kube.advance_ca_rotation(from, to).await;
    let advanced = advanced.map_err(|e| Failure::kube("advancing the CA rotation".into(), &e))?;
    Ok(Done::cluster(advanced))
}

/// The PodDisruptionBudget over the voting members, at `min_available`.
pub(super) async fn set_disruption_budget(
    env: &ActionEnv<'_>,
    min_available: u32,
) -> Result<Done, Failure> {
    let budget = env.kube.set_disruption_budget(min_available).await;
    budget.map_err(|e| Failure::kube("setting the PodDisruptionBudget".into(), &e))?;
    let note = format!(
        "PodDisruptionBudget {}: evictions leave at least {min_available} voting members ready",
        env.topology.name
    );
    Ok(Done::cluster(note))
}

/// Deletes a pod and its claim: its member has left etcd, or never was one.
pub(super) async fn delete_pod(env: &ActionEnv<'_>, name: &str) -> Result<Done, Failure> {
    let deleted = env.kube.delete_pod(name).await;
    deleted.map_err(|e| Failure::kube(format!("deleting pod {name}"), &e))?;
    Ok(Done::member(format!("deleted pod {name}"), name))
}

/// Deletes a member's pod and nothing else, so that it gets a new one on its claim.
pub(super) async fn recreate_pod(env: &ActionEnv<'_>, name: &str) -> Result<Done, Failure> {
    let deleted = env.kube.recreate_pod(name).await;
    deleted.map_err(|e| Failure::kube(format!("deleting pod {name}"), &e))?;
    let note = format!("deleted pod {name} to give its member a new one");
    Ok(Done::member(note, name))
}

/// Asks for `quantity` on member `name`'s claim.
pub(super) async fn expand_claim(
    env: &ActionEnv<'_>,
    name: &str,
    quantity: &str,
) -> Result<Done, Failure> {
    let expanded = env.kube.expand_claim(name, quantity).await;
    expanded.map_err(|e| Failure::kube(format!("expanding the claim of {name}"), &e))?;
    let note = format!("asked for {quantity} on member {name}'s volume; its data stays");
    Ok(Done::member(note, name))
}

/// Puts a voting member's pod behind the client Service.
pub(super) async fn label_voter(env: &ActionEnv<'_>, name: &str) -> Result<Done, Failure> {
    let labelled = env.kube.label_voter(name).await;
    labelled.map_err(|e| Failure::kube(format!("labelling pod {name} a voter"), &e))?;
    let note = format!("pod {name} now serves clients (a voting member)");
    Ok(Done::member(note, name))
}

/// Sets a member's pod to etcd `to`, with the upgrade mark `upgrade_from` (or none).
pub(super) async fn set_version(
    env: &ActionEnv<'_>,
    name: &str,
    to: &Version,
    upgrade_from: Option<&Version>,
    note: String,
) -> Result<Done, Failure> {
    let change = VersionChange {
        to: to.clone(),
        upgrade_from: upgrade_from.cloned(),
    };
    let set = env.kube.set_pod_version(name, &change).await;
    set.map_err(|e| Failure::kube(format!("setting pod {name} to etcd {to}"), &e))?;
    Ok(Done::member(note, name))
}
