//! The pod of one etcd member: the exact etcd flags, the gate of a prepared joiner, and
//! the user's pod policy.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, HTTPGetAction,
    ObjectFieldSelector, PersistentVolumeClaimVolumeSource, Pod, PodAffinityTerm, PodAntiAffinity,
    PodSpec, Probe, Volume, VolumeMount, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use etcd_operator_actors::ports::{InitialState, MemberPod};
use etcd_operator_core::lifecycle::TlsMode;
use etcd_operator_core::topology::{CLIENT_PORT, PEER_PORT, Topology};

use super::labels::{
    FORCE_NEW_CLUSTER_ANNOTATION, POD_TEMPLATE_ANNOTATION, PREPARED_ANNOTATION, TLS_ANNOTATION,
    VOTER_LABEL, object_labels, owner_reference, selector,
};
use super::restore::{credentials_volume, restore_containers};
use super::security::{pod_security_context, restricted};
use super::tls::{
    etcd_tls_flags, gate_tls_args, gate_tls_mount, gate_tls_volume, tls_mounts,
    tls_readiness_probe, tls_volumes,
};
use crate::api::{EtcdCluster, PodPolicy};
use crate::tls::secret_names;

pub(crate) use super::data_volume::{DATA_DIR, DATA_MOUNT, DATA_VOLUME};
pub(crate) use crate::api::names::{member_of_claim, pvc_name};

/// Name of the etcd container in a member pod.
pub(crate) const ETCD_CONTAINER: &str = "etcd";

/// The image for `version`: `<repository>:v<version>`.
pub fn image(repository: &str, version: &str) -> String {
    format!("{repository}:v{version}")
}

/// The etcd version an image runs, read from its tag (`quay.io/coreos/etcd:v3.5.21` → 3.5.21).
pub(crate) fn version_of_image(image: &str) -> Option<String> {
    let last = image.rsplit('/').next()?;
    let (_, tag) = last.split_once(':')?;
    let tag = tag.split('@').next()?;
    Some(tag.strip_prefix('v').unwrap_or(tag).to_string())
}

/// The etcd command line of a member. Listen addresses use the pod's IP (from the
/// downward API); every advertised URL uses the member's DNS name, never an IP. With TLS
/// the URLs are `https`, clients also reach the member on its own loopback address (the
/// readiness probe), and both sides need certificates.
pub fn etcd_flags(topology: &Topology, member: &MemberPod, tls: TlsMode) -> Vec<String> {
    let scheme = tls.scheme();
    let mut listen_clients = format!("{scheme}://$(POD_IP):{CLIENT_PORT}");
    if tls.enabled() {
        listen_clients.push_str(&format!(",{scheme}://127.0.0.1:{CLIENT_PORT}"));
    }
    let mut flags = vec![
        format!("--name={}", member.name),
        format!("--data-dir={DATA_DIR}"),
        format!("--listen-peer-urls={scheme}://$(POD_IP):{PEER_PORT}"),
        format!("--listen-client-urls={listen_clients}"),
        format!(
            "--initial-advertise-peer-urls={}",
            topology.peer_url(&member.name, tls)
        ),
        format!(
            "--advertise-client-urls={}",
            topology.client_url(&member.name, tls)
        ),
        format!("--initial-cluster={}", member.initial_cluster),
    ];
    if tls.enabled() {
        flags.extend(etcd_tls_flags());
    }
    match &member.state {
        InitialState::New { token } => {
            flags.push("--initial-cluster-state=new".into());
            flags.push(format!("--initial-cluster-token={token}"));
        }
        InitialState::Existing => flags.push("--initial-cluster-state=existing".into()),
        InitialState::ForceNewCluster => {
            // The member's own data directory says which cluster it is; etcd keeps it
            // (cluster ID, keys) and drops every other member.
            flags.push("--initial-cluster-state=existing".into());
            flags.push("--force-new-cluster".into());
        }
    }
    flags
}

fn env_from_field(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.to_string(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

/// Pod anti-affinity among the members of `cluster` on the node's hostname: required
/// (no two members on one node; `antiAffinity: true`, as in CoreOS) or preferred (the
/// default: spread where the nodes allow, never left pending for it).
fn anti_affinity(cluster: &str, required: bool) -> Affinity {
    let term = PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_labels: Some(selector(cluster)),
            ..LabelSelector::default()
        }),
        topology_key: "kubernetes.io/hostname".into(),
        ..PodAffinityTerm::default()
    };
    let anti = if required {
        PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![term]),
            ..PodAntiAffinity::default()
        }
    } else {
        PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                WeightedPodAffinityTerm {
                    weight: 100,
                    pod_affinity_term: term,
                },
            ]),
            ..PodAntiAffinity::default()
        }
    };
    Affinity {
        pod_anti_affinity: Some(anti),
        ..Affinity::default()
    }
}

/// Name of the init container that holds a prepared joiner's etcd back.
pub(crate) const GATE_CONTAINER: &str = "await-membership";

/// The pod of `member` in `cluster`. A seed that restores a snapshot gets the restore's
/// init containers, a prepared joiner its gate; both run `operator_image` (the caller
/// makes sure it is known).
pub(crate) fn member_pod(
    cluster: &EtcdCluster,
    member: &MemberPod,
    operator_image: Option<&str>,
) -> Pod {
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let topology = Topology::new(&namespace, &name);
    let policy = cluster.spec.pod.clone().unwrap_or_default();
    let affinity = policy
        .affinity
        .clone()
        .unwrap_or_else(|| anti_affinity(&name, policy.anti_affinity == Some(true)));
    Pod {
        metadata: ObjectMeta {
            name: Some(member.name.clone()),
            namespace: Some(namespace),
            labels: Some(pod_labels(&name, &policy, member.voter)),
            annotations: Some(pod_annotations(cluster, &policy, member)),
            owner_references: Some(vec![owner_reference(cluster)]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            hostname: Some(member.name.clone()),
            subdomain: Some(name),
            // A member whose etcd exits (a crash, an OOM kill) is restarted in place, on
            // its own data and under its own identity: a crash costs seconds, not a
            // replacement. One that keeps failing is reported (`CrashLooping`) and
            // replaced only when its last words say its data is unusable.
            restart_policy: Some("Always".into()),
            // No init container waits for the member's own DNS name: etcd (3.4 and
            // later) does not resolve it to start, and a name asked for before the pod's
            // address is published is cached by the cluster DNS as unknown for its
            // negative TTL (5 s with CoreDNS's default, 30 s as kubeadm sets it up),
            // which each member start then paid in full. A member joins only once the
            // others' addresses are published (`WaitingForMemberAddresses`), so the names
            // it asks for resolve; the others reach it over the connections it opens.
            init_containers: init_containers(cluster, &topology, member, operator_image),
            containers: vec![etcd_container(cluster, &topology, member, &policy)],
            volumes: Some(volumes(cluster, &policy, member)),
            node_selector: policy.node_selector.clone(),
            tolerations: policy.tolerations.clone(),
            affinity: Some(affinity),
            security_context: Some(pod_security_context(policy.security_context.as_ref())),
            automount_service_account_token: Some(false),
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// For a seed born from a snapshot, the restore's three steps; for a prepared joiner, its
/// gate; no init container otherwise.
fn init_containers(
    cluster: &EtcdCluster,
    topology: &Topology,
    member: &MemberPod,
    operator_image: Option<&str>,
) -> Option<Vec<Container>> {
    let operator = operator_image?;
    if let Some(peers) = &member.prepared_with {
        return Some(vec![gate_container(
            topology,
            member,
            peers,
            operator,
            cluster.spec.tls_mode(),
        )]);
    }
    let source = member.restore.as_ref()?;
    let etcd = image(
        cluster.spec.repository_or_default(),
        &member.version.to_string(),
    );
    Some(restore_containers(
        topology,
        member,
        source,
        (operator, etcd),
        cluster.spec.tls_mode(),
    ))
}

/// The arguments of `etcd-operator await-membership` for prepared joiner `member`, built
/// to join `peers`: its own peer URL, and whom to ask (never its own name: the gate does
/// not look it up). Without TLS, the others' peer listeners; with TLS, their client
/// listeners, with the operator's client certificate the pod mounts: it carries no names,
/// so etcd looks nothing up about the gate's address, which may not be published yet when
/// the gate first asks (the pod's peer certificate carries names: etcd would look the
/// address up, and the cluster DNS cache the miss).
pub(crate) fn gate_args(
    topology: &Topology,
    member: &MemberPod,
    peers: &[String],
    tls: TlsMode,
) -> Vec<String> {
    let others = peers.iter().filter(|p| **p != member.name);
    let mut args = vec![
        "await-membership".to_string(),
        format!("--peer-url={}", topology.peer_url(&member.name, tls)),
        format!("--data-dir={DATA_DIR}"),
    ];
    if tls.enabled() {
        let urls: Vec<String> = others.map(|p| topology.client_url(p, tls)).collect();
        args.push(format!("--endpoints={}", urls.join(",")));
        args.extend(gate_tls_args());
    } else {
        let urls: Vec<String> = others.map(|p| topology.peer_url(p, tls)).collect();
        args.push(format!("--peers={}", urls.join(",")));
    }
    args
}

/// The init container of a prepared joiner: the operator's image, waiting until the
/// members list the joiner's peer URL (then etcd starts and joins them).
fn gate_container(
    topology: &Topology,
    member: &MemberPod,
    peers: &[String],
    operator_image: &str,
    tls: TlsMode,
) -> Container {
    Container {
        name: GATE_CONTAINER.into(),
        image: Some(operator_image.to_string()),
        args: Some(gate_args(topology, member, peers, tls)),
        // The data volume, read only: a member that ran already starts without waiting
        // (after its pod's sandbox was made again, the members it joined may be gone).
        volume_mounts: Some(
            std::iter::once(VolumeMount {
                name: DATA_VOLUME.into(),
                mount_path: DATA_MOUNT.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            })
            .chain(tls.enabled().then(gate_tls_mount))
            .collect(),
        ),
        security_context: Some(restricted()),
        ..Container::default()
    }
}

/// The user's labels, then the cluster's own (which win), and the voter label.
fn pod_labels(cluster: &str, policy: &PodPolicy, voter: bool) -> BTreeMap<String, String> {
    let mut labels = policy.labels.clone().unwrap_or_default();
    labels.extend(object_labels(cluster));
    if voter {
        labels.insert(VOTER_LABEL.to_string(), "true".to_string());
    }
    labels
}

/// The user's annotations plus the digest of the pod policy the pod was made from (and
/// for a prepared joiner, the members it was built to join; for a survivor restarted
/// alone, that it is).
fn pod_annotations(
    cluster: &EtcdCluster,
    policy: &PodPolicy,
    member: &MemberPod,
) -> BTreeMap<String, String> {
    let mut annotations = policy.annotations.clone().unwrap_or_default();
    annotations.insert(
        POD_TEMPLATE_ANNOTATION.to_string(),
        cluster.spec.pod_template_digest(),
    );
    annotations.insert(
        TLS_ANNOTATION.to_string(),
        cluster.spec.tls_mode().as_str().to_string(),
    );
    if let Some(peers) = &member.prepared_with {
        annotations.insert(PREPARED_ANNOTATION.to_string(), peers.join(","));
    }
    if member.state == InitialState::ForceNewCluster {
        annotations.insert(FORCE_NEW_CLUSTER_ANNOTATION.to_string(), "true".to_string());
    }
    annotations
}

/// The member's data volume, with TLS its three Secrets, and for a seed born from a
/// snapshot the store's credentials.
fn volumes(cluster: &EtcdCluster, policy: &PodPolicy, member: &MemberPod) -> Vec<Volume> {
    let mut volumes = vec![data_volume(policy, &member.name)];
    if let Some(source) = &member.restore {
        volumes.push(credentials_volume(source));
    }
    if let Some(names) = secret_names(&cluster.name_any(), cluster.spec.tls.as_ref()) {
        volumes.extend(tls_volumes(&names));
        if member.prepared_with.is_some() {
            volumes.extend(gate_tls_volume(&names));
        }
    }
    volumes
}

/// The etcd container: the member's flags, its image, ports, readiness and data mount.
fn etcd_container(
    cluster: &EtcdCluster,
    topology: &Topology,
    member: &MemberPod,
    policy: &PodPolicy,
) -> Container {
    let mut env = vec![env_from_field("POD_IP", "status.podIP")];
    env.extend(super::corruption::corruption_check_env(
        cluster.spec.etcd_env(),
    ));
    env.extend(policy.etcd_env.clone().unwrap_or_default());
    env.extend(crate::api::maintenance::quota_env(
        cluster.spec.quota_backend_bytes,
    ));
    let tls = cluster.spec.tls_mode();
    let mut command = vec!["/usr/local/bin/etcd".to_string()];
    command.extend(etcd_flags(topology, member, tls));
    let mut mounts = vec![VolumeMount {
        name: DATA_VOLUME.into(),
        mount_path: DATA_MOUNT.into(),
        ..VolumeMount::default()
    }];
    if tls.enabled() {
        mounts.extend(tls_mounts());
    }
    let port = |name: &str, number: u16| ContainerPort {
        name: Some(name.into()),
        container_port: i32::from(number),
        ..ContainerPort::default()
    };
    Container {
        name: ETCD_CONTAINER.into(),
        image: Some(image(
            cluster.spec.repository_or_default(),
            &member.version.to_string(),
        )),
        command: Some(command),
        env: Some(env),
        ports: Some(vec![port("client", CLIENT_PORT), port("peer", PEER_PORT)]),
        readiness_probe: Some(if tls.enabled() {
            tls_readiness_probe()
        } else {
            http_readiness_probe()
        }),
        resources: policy.resources.clone(),
        // The end of etcd's log becomes the reason a crash is reported with.
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        volume_mounts: Some(mounts),
        security_context: Some(restricted()),
        ..Container::default()
    }
}

/// The path the readiness probe of a plain-HTTP member asks.
const READINESS_PATH: &str = "/health?exclude=NOSPACE";

/// Readiness of a plain-HTTP member: etcd's `/health`, every second (the pod's Ready
/// condition puts it behind the client Service; one cheap request a second per member).
/// A NOSPACE alarm is left out: a full member still serves reads and the deletes that
/// free space, so it stays behind the Service (etcd 3.4 and later read `exclude`).
fn http_readiness_probe() -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(READINESS_PATH.into()),
            port: IntOrString::Int(i32::from(CLIENT_PORT)),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(1),
        timeout_seconds: Some(1),
        failure_threshold: Some(3),
        ..Probe::default()
    }
}

/// The member's data: its PersistentVolumeClaim when the policy asks for one, else an
/// emptyDir.
fn data_volume(policy: &PodPolicy, member: &str) -> Volume {
    let mut volume = Volume {
        name: DATA_VOLUME.into(),
        ..Volume::default()
    };
    match &policy.persistent_volume_claim_spec {
        Some(_) => {
            volume.persistent_volume_claim = Some(PersistentVolumeClaimVolumeSource {
                claim_name: pvc_name(member),
                ..PersistentVolumeClaimVolumeSource::default()
            })
        }
        None => volume.empty_dir = Some(EmptyDirVolumeSource::default()),
    }
    volume
}
