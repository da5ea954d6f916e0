//! The TLS parts of a member pod: etcd's certificate flags, the three Secrets mounted
//! where the flags point, and a readiness probe that speaks TLS with the operator's
//! client certificate.

use k8s_openapi::api::core::v1::{ExecAction, Pod, Probe, SecretVolumeSource, Volume, VolumeMount};

use etcd_operator_core::lifecycle::template_with_trust;
use etcd_operator_core::topology::CLIENT_PORT;

use super::labels::POD_TEMPLATE_ANNOTATION;
use crate::tls::{Role, SecretNames};

/// Adds to a member pod's template annotation the digest of the CA bundles it mounts
/// (`trust`, read just before it is created): etcd reads them only when it starts, so
/// the pod records what its member trusts, and a changed bundle restarts it.
pub(crate) fn record_trust(pod: &mut Pod, trust: Option<&str>) {
    let annotations = pod
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    if let Some(template) = annotations.get_mut(POD_TEMPLATE_ANNOTATION) {
        *template = template_with_trust(template, trust);
    }
}

/// Name of the volume of `role`'s Secret in a member pod.
fn volume_name(role: Role) -> String {
    format!("{}-tls", role.label())
}

/// etcd's TLS flags: certificates for peers and clients from the mounted Secrets, and
/// client certificates required on both sides.
pub(crate) fn etcd_tls_flags() -> Vec<String> {
    let (peer, server) = (Role::Peer, Role::Server);
    vec![
        "--peer-client-cert-auth=true".into(),
        format!("--peer-trusted-ca-file={}", peer.path(peer.ca_key())),
        format!("--peer-cert-file={}", peer.path(peer.cert_key())),
        format!("--peer-key-file={}", peer.path(peer.key_key())),
        "--client-cert-auth=true".into(),
        format!("--trusted-ca-file={}", server.path(server.ca_key())),
        format!("--cert-file={}", server.path(server.cert_key())),
        format!("--key-file={}", server.path(server.key_key())),
    ]
}

/// The three Secrets as volumes (read only by the owner: they hold private keys).
pub(crate) fn tls_volumes(names: &SecretNames) -> Vec<Volume> {
    Role::ALL
        .iter()
        .filter_map(|role| {
            Some(Volume {
                name: volume_name(*role),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(names.of(*role)?.to_string()),
                    default_mode: Some(0o400),
                    ..SecretVolumeSource::default()
                }),
                ..Volume::default()
            })
        })
        .collect()
}

/// Where the etcd container mounts them (CoreOS's directories).
pub(crate) fn tls_mounts() -> Vec<VolumeMount> {
    Role::ALL
        .iter()
        .map(|role| VolumeMount {
            name: volume_name(*role),
            mount_path: role.mount_dir().to_string(),
            read_only: Some(true),
            ..VolumeMount::default()
        })
        .collect()
}

/// Name of the volume of the operator's client Secret as a prepared joiner's gate reads
/// it.
const GATE_TLS_VOLUME: &str = "client-tls-gate";
/// Where the gate mounts it.
pub(crate) const GATE_TLS_DIR: &str = "/etc/etcdtls/gate/client-tls";

/// The operator's client Secret once more, for a prepared joiner's gate: it runs the
/// operator's image as that image's non-root user, which cannot read the etcd container's
/// copy (readable by its owner only), so this copy is readable by any user; only the gate
/// mounts it. (The pod mounts that Secret already, for its readiness probe.)
pub(crate) fn gate_tls_volume(names: &SecretNames) -> Option<Volume> {
    Some(Volume {
        name: GATE_TLS_VOLUME.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(names.of(Role::Client)?.to_string()),
            default_mode: Some(0o444),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    })
}

/// Where the gate mounts its copy of the operator's client Secret.
pub(crate) fn gate_tls_mount() -> VolumeMount {
    VolumeMount {
        name: GATE_TLS_VOLUME.into(),
        mount_path: GATE_TLS_DIR.into(),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

/// The gate's TLS flags: the CA of the members' server certificates, and the operator's
/// client certificate (no names in it: etcd looks nothing up about the gate's address).
pub(crate) fn gate_tls_args() -> Vec<String> {
    let client = Role::Client;
    let file = |key: &str| format!("{GATE_TLS_DIR}/{key}");
    vec![
        format!("--cacert={}", file(client.ca_key())),
        format!("--cert={}", file(client.cert_key())),
        format!("--key={}", file(client.key_key())),
    ]
}

/// Readiness over TLS: a linearizable `etcdctl get` against the member's own loopback
/// listener (`localhost`, which the server certificate covers), with the operator's
/// client certificate, so a member that refuses the operator, or has no quorum, is not
/// ready. Not `endpoint health`: from etcd 3.5 it fails on any alarm, and a member with
/// NOSPACE still serves reads and the deletes that free space.
pub(crate) fn tls_readiness_probe() -> Probe {
    let client = Role::Client;
    Probe {
        exec: Some(ExecAction {
            command: Some(vec![
                "/usr/local/bin/etcdctl".into(),
                format!("--endpoints=https://localhost:{CLIENT_PORT}"),
                format!("--cacert={}", client.path(client.ca_key())),
                format!("--cert={}", client.path(client.cert_key())),
                format!("--key={}", client.path(client.key_key())),
                "--dial-timeout=2s".into(),
                "--command-timeout=2s".into(),
                "get".into(),
                "health".into(),
            ]),
        }),
        period_seconds: Some(2),
        timeout_seconds: Some(4),
        failure_threshold: Some(3),
        ..Probe::default()
    }
}
