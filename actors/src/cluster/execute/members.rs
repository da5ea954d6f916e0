//! Actions that give a member its pod: the seed (recorded first), joiners (prepared
//! before their `member add`, or after it), and a member started again on its volume.
//! Every pod waits for the headless Service its name lives under.

use crate::member_client::{AddMember, ListMembers};
use crate::ports::{InitialState, MemberPod, NewMember};
use etcd_operator_core::lifecycle::{BootstrapRecord, MemberView, SnapshotSource, Version};

use super::env::{ActionEnv, Done, Failure};
use super::membership;

/// Names the seed, records it in status (before its pod exists), then creates its pod.
pub(super) async fn create_seed(
    env: &ActionEnv<'_>,
    version: &Version,
    restore: Option<&SnapshotSource>,
) -> Result<Done, Failure> {
    let t = env.topology;
    let name = t.new_member_name(&mut rand::rng());
    let token = format!("{}-{:016x}", t.name, rand::random::<u64>());
    env.kube
        .record_bootstrap(&BootstrapRecord::seed(&name, &token))
        .await
        .map_err(|e| Failure::kube(format!("recording the seed {name} in status"), &e))?;
    create_seed_pod(env, &name, &token, version, restore).await?;
    let note = format!(
        "created seed member {name} (etcd {version}){}",
        from_snapshot(restore)
    );
    Ok(Done::member(note, &name))
}

/// The pod of a seed already recorded (`what`: "recorded seed member", "recovery seed").
pub(super) async fn start_seed(
    env: &ActionEnv<'_>,
    what: &str,
    name: &str,
    token: &str,
    version: &Version,
    restore: Option<&SnapshotSource>,
) -> Result<Done, Failure> {
    create_seed_pod(env, name, token, version, restore).await?;
    let note = format!(
        "started {what} {name} (etcd {version}){}",
        from_snapshot(restore)
    );
    Ok(Done::member(note, name))
}

/// The pod of the next member under a new name, before its `member add`: built to join
/// `peers`, its etcd held back until the member list holds its peer URL. Never a voter
/// (not behind the client Service, not in the disruption budget) until etcd says so.
pub(super) async fn prepare_joiner(
    env: &ActionEnv<'_>,
    version: &Version,
    peers: &[String],
) -> Result<Done, Failure> {
    let name = env.topology.new_member_name(&mut rand::rng());
    let mut names = peers.to_vec();
    names.push(name.clone());
    let pod = MemberPod {
        name: name.clone(),
        version: version.clone(),
        initial_cluster: env.topology.initial_cluster(&names, env.tls),
        state: InitialState::Existing,
        voter: false,
        restore: None,
        prepared_with: Some(peers.to_vec()),
    };
    create_pod(env, &pod, "prepared joiner pod").await?;
    let note = format!("prepared joiner {name} (etcd {version}): its pod waits for its member add");
    Ok(Done::member(note, &name))
}

/// `member add` of a prepared joiner, whose pod exists: its gate lets its etcd start once
/// the member list holds its peer URL.
pub(super) async fn add_prepared(
    env: &ActionEnv<'_>,
    name: &str,
    learner: bool,
    version: &Version,
) -> Result<Done, Failure> {
    let add = AddMember {
        endpoints: env.endpoints.clone(),
        member: NewMember {
            peer_url: env.topology.peer_url(name, env.tls),
            learner,
        },
    };
    let added = membership::call(env, add, format!("member add {name}")).await?;
    let kind = if learner { "learner" } else { "member" };
    let note = format!(
        "added {kind} {name} (id {:x}, etcd {version}); its prepared pod starts etcd",
        added.id
    );
    Ok(Done::member(note, name))
}

/// `member add` under a new name, then the new member's pod: the order when no joiner can
/// be prepared (the operator's image, which a prepared joiner's gate runs, is unknown).
/// The leader then asks the cluster DNS for the new name before its pod exists, and the
/// DNS caches the miss for its negative TTL.
pub(super) async fn add_member(
    env: &ActionEnv<'_>,
    learner: bool,
    version: &Version,
) -> Result<Done, Failure> {
    let name = env.topology.new_member_name(&mut rand::rng());
    let add = AddMember {
        endpoints: env.endpoints.clone(),
        member: NewMember {
            peer_url: env.topology.peer_url(&name, env.tls),
            learner,
        },
    };
    let added = membership::call(env, add, format!("member add {name}")).await?;
    start_joining_pod(env, &name, added.id, &added.members, version).await?;
    let kind = if learner { "learner" } else { "member" };
    let note = format!(
        "added {kind} {name} (id {:x}) and started its pod",
        added.id
    );
    Ok(Done::member(note, &name))
}

/// The pod of a member that was added but has none, from the current member list.
pub(super) async fn resume_join(
    env: &ActionEnv<'_>,
    id: u64,
    name: &str,
    version: &Version,
) -> Result<Done, Failure> {
    let list = ListMembers {
        endpoints: env.endpoints.clone(),
    };
    let list = membership::call(env, list, "member list".to_string()).await?;
    start_joining_pod(env, name, id, &list.members, version).await?;
    let note = format!("started the pod of added member {name}");
    Ok(Done::member(note, name))
}

/// A new pod for a member whose data is on its volume, joining `peers` as before.
pub(super) async fn restart_member(
    env: &ActionEnv<'_>,
    name: &str,
    version: &Version,
    peers: &[String],
    voter: bool,
) -> Result<Done, Failure> {
    let pod = MemberPod {
        name: name.to_string(),
        version: version.clone(),
        initial_cluster: env.topology.initial_cluster(peers, env.tls),
        state: InitialState::Existing,
        voter,
        restore: None,
        prepared_with: None,
    };
    create_pod(env, &pod, "pod").await?;
    let note = format!("started member {name} again on its volume (etcd {version})");
    Ok(Done::member(note, name))
}

/// A survivor's pod started alone with `--force-new-cluster` on its own volume.
pub(super) async fn force_new_cluster(
    env: &ActionEnv<'_>,
    name: &str,
    version: &Version,
) -> Result<Done, Failure> {
    let pod = MemberPod {
        name: name.to_string(),
        version: version.clone(),
        initial_cluster: env.topology.initial_cluster(&[name.to_string()], env.tls),
        state: InitialState::ForceNewCluster,
        voter: true,
        restore: None,
        prepared_with: None,
    };
    create_pod(env, &pod, "pod").await?;
    let note = format!(
        "restarted survivor {name} alone with --force-new-cluster on its volume \
         (etcd {version})"
    );
    Ok(Done::member(note, name))
}

/// `, restoring snapshot <path> (revision N)` for a seed made from one.
fn from_snapshot(restore: Option<&SnapshotSource>) -> String {
    restore.map_or_else(String::new, |s| {
        format!(
            ", restoring snapshot {} (revision {})",
            s.path(),
            s.revision
        )
    })
}

/// Creates the seed's pod: `--initial-cluster-state=new` under the recorded token, after
/// restoring `restore` into its data directory when given.
async fn create_seed_pod(
    env: &ActionEnv<'_>,
    name: &str,
    token: &str,
    version: &Version,
    restore: Option<&SnapshotSource>,
) -> Result<(), Failure> {
    let pod = MemberPod {
        name: name.to_string(),
        version: version.clone(),
        initial_cluster: env.topology.initial_cluster(&[name.to_string()], env.tls),
        state: InitialState::New {
            token: token.to_string(),
        },
        voter: true,
        restore: restore.cloned(),
        prepared_with: None,
    };
    create_pod(env, &pod, "seed pod").await
}

/// Creates the pod of a member etcd already knows, with `--initial-cluster` built from
/// the live member list (never from `spec.size`).
async fn start_joining_pod(
    env: &ActionEnv<'_>,
    name: &str,
    id: u64,
    members: &[MemberView],
    version: &Version,
) -> Result<(), Failure> {
    let names: Vec<String> = members
        .iter()
        .filter_map(|m| {
            if m.id == id {
                Some(name.to_string())
            } else {
                m.pod_name()
            }
        })
        .collect();
    let pod = MemberPod {
        name: name.to_string(),
        version: version.clone(),
        initial_cluster: env.topology.initial_cluster(&names, env.tls),
        state: InitialState::Existing,
        voter: members.iter().any(|m| m.id == id && !m.is_learner),
        restore: None,
        prepared_with: None,
    };
    create_pod(env, &pod, "pod").await
}

/// Creates a member's pod once the Services allow it; `what` names it in an error.
async fn create_pod(env: &ActionEnv<'_>, pod: &MemberPod, what: &str) -> Result<(), Failure> {
    let context = || format!("creating {what} {}", pod.name);
    env.services
        .passed()
        .await
        .map_err(|e| Failure::services_missing(format!("{}: {e}", context())))?;
    env.kube
        .create_member_pod(pod)
        .await
        .map_err(|e| Failure::kube(context(), &e))
}
