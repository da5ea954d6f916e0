//! The init containers of a seed born from a snapshot: fetch the snapshot into the
//! member's data volume (checking its sha256), restore it with etcd's own tool under the
//! new cluster's seed name, peer URL and token, then move the restored data directory
//! into place.
//!
//! Fetching and placing run the operator's own image (`etcd-operator snapshot-fetch` and
//! `snapshot-place`); the restore runs the member's etcd image (`etcdutl snapshot restore`
//! from 3.5, `etcdctl snapshot restore` on 3.4). Every path is a direct child of the data
//! volume's mount, so the data directory moves into place with one rename, whatever user
//! each image runs as. The steps run again whenever the pod sandbox is made anew: over a
//! data directory in place, the fetch fetches nothing, etcd's tool restores an empty
//! placeholder, and the place step throws that away ([`crate::restore::fetch::prepare`]).

use k8s_openapi::api::core::v1::{Container, EnvVar, SecretVolumeSource, Volume, VolumeMount};

use etcd_operator_actors::ports::{InitialState, MemberPod};
use etcd_operator_core::lifecycle::{SnapshotSource, TlsMode, Version, restores_with_etcdutl};
use etcd_operator_core::topology::Topology;

use super::pod::{DATA_DIR, DATA_MOUNT, DATA_VOLUME};
use super::security::restricted;

/// Where the fetched snapshot is written, in the data volume.
pub(crate) const SNAPSHOT_FILE: &str = "/var/etcd/restore.db";
/// Where etcd's tool writes the restored data directory, beside the final one.
pub(crate) const RESTORED_DIR: &str = "/var/etcd/restored";
/// The volume of the store's credentials Secret.
const CREDENTIALS_VOLUME: &str = "restore-credentials";
/// Where the credentials Secret is mounted in the fetching container.
pub(crate) const CREDENTIALS_MOUNT: &str = "/etc/etcd-restore/credentials";

fn data_mount() -> VolumeMount {
    VolumeMount {
        name: DATA_VOLUME.into(),
        mount_path: DATA_MOUNT.into(),
        ..VolumeMount::default()
    }
}

/// The arguments of `etcd-operator snapshot-fetch` for `source`.
pub(crate) fn fetch_args(source: &SnapshotSource) -> Vec<String> {
    let mut args = vec![
        "snapshot-fetch".to_string(),
        format!("--bucket={}", source.bucket),
        format!("--key={}", source.key),
        format!("--sha256={}", source.sha256),
        format!("--size={}", source.size),
        format!("--credentials={CREDENTIALS_MOUNT}"),
        format!("--out={SNAPSHOT_FILE}"),
        format!("--restored-dir={RESTORED_DIR}"),
        format!("--data-dir={DATA_DIR}"),
    ];
    if let Some(endpoint) = &source.endpoint {
        args.push(format!("--endpoint={endpoint}"));
    }
    if source.force_path_style {
        args.push("--force-path-style".to_string());
    }
    args
}

/// The arguments of `etcd-operator snapshot-place`.
pub(crate) fn place_args() -> Vec<String> {
    vec![
        "snapshot-place".to_string(),
        format!("--restored-dir={RESTORED_DIR}"),
        format!("--data-dir={DATA_DIR}"),
        format!("--snapshot={SNAPSHOT_FILE}"),
    ]
}

/// How far a restore moves etcd's revision past the snapshot's (`--bump-revision`).
///
/// Clients that stay connected across a restore (a FromBackup recovery keeps the
/// cluster's name and Services) have seen revisions written after the backup; a restore
/// that starts again at the snapshot's revision makes revisions go backwards for them, and
/// watch caches (the Kubernetes API server's among them) stay stale (etcd-io/etcd#16028).
/// The revision a restored member starts from must exceed any revision written before the
/// loss. The operator does not always know that revision (the newest one it saw may be
/// older than the last write), so the bump is a fixed, generous amount, as etcd's restore
/// documentation suggests: a billion revisions, far more than any cluster writes between
/// two backups, and small enough beside the revision's range (`i64`, about 9.2 billion
/// billions) for billions of restores. With `--mark-compacted` the revisions up to the
/// bumped one are compacted: watchers from before the restore are cancelled and start
/// again from a fresh read, instead of missing what changed.
pub(crate) const RESTORE_REVISION_BUMP: u64 = 1_000_000_000;

/// Whether the restoring tool of etcd `version` knows `--bump-revision` and
/// `--mark-compacted`: `etcdutl` from 3.5.10 (the 3.5 backport of etcd-io/etcd#16029,
/// etcd-io/etcd#16165) and every 3.6. `etcdctl snapshot restore` of 3.4 (3.4.23 here) and
/// `etcdutl` before 3.5.10 refuse the flags, so a restore with them does not bump:
/// clients connected across it may see revisions go backwards.
pub(crate) fn bumps_revision(version: &Version) -> bool {
    restores_with_etcdutl(version) && (version.major, version.minor, version.patch) >= (3, 5, 10)
}

/// `etcdutl snapshot restore` (or `etcdctl` on 3.4) of the fetched file, as the seed
/// `member` of the new cluster: its name, peer URL, `--initial-cluster` and token; where
/// the tool can, the revision moved past any lost write ([`RESTORE_REVISION_BUMP`]).
pub(crate) fn restore_command(
    topology: &Topology,
    member: &MemberPod,
    tls: TlsMode,
) -> Vec<String> {
    let tool = if restores_with_etcdutl(&member.version) {
        "etcdutl"
    } else {
        "etcdctl"
    };
    let mut command = vec![
        format!("/usr/local/bin/{tool}"),
        "snapshot".into(),
        "restore".into(),
        SNAPSHOT_FILE.into(),
        format!("--name={}", member.name),
        format!("--initial-cluster={}", member.initial_cluster),
        format!(
            "--initial-advertise-peer-urls={}",
            topology.peer_url(&member.name, tls)
        ),
        format!("--data-dir={RESTORED_DIR}"),
    ];
    if let InitialState::New { token } = &member.state {
        command.push(format!("--initial-cluster-token={token}"));
    }
    if bumps_revision(&member.version) {
        command.push(format!("--bump-revision={RESTORE_REVISION_BUMP}"));
        command.push("--mark-compacted".into());
    }
    command
}

/// The three init containers, in order: fetch, restore, place.
pub(crate) fn restore_containers(
    topology: &Topology,
    member: &MemberPod,
    source: &SnapshotSource,
    (operator_image, etcd_image): (&str, String),
    tls: TlsMode,
) -> Vec<Container> {
    let credentials = VolumeMount {
        name: CREDENTIALS_VOLUME.into(),
        mount_path: CREDENTIALS_MOUNT.into(),
        read_only: Some(true),
        ..VolumeMount::default()
    };
    let fetch = Container {
        name: "fetch-snapshot".into(),
        image: Some(operator_image.to_string()),
        args: Some(fetch_args(source)),
        volume_mounts: Some(vec![data_mount(), credentials]),
        security_context: Some(restricted()),
        ..Container::default()
    };
    let restore = Container {
        name: "restore-snapshot".into(),
        image: Some(etcd_image),
        command: Some(restore_command(topology, member, tls)),
        // etcdctl 3.4 speaks the v3 API only when told.
        env: Some(vec![EnvVar {
            name: "ETCDCTL_API".into(),
            value: Some("3".into()),
            ..EnvVar::default()
        }]),
        volume_mounts: Some(vec![data_mount()]),
        ..Container::default()
    };
    let place = Container {
        name: "place-data".into(),
        image: Some(operator_image.to_string()),
        args: Some(place_args()),
        volume_mounts: Some(vec![data_mount()]),
        security_context: Some(restricted()),
        ..Container::default()
    };
    vec![fetch, restore, place]
}

/// The credentials Secret as a volume.
pub(crate) fn credentials_volume(source: &SnapshotSource) -> Volume {
    Volume {
        name: CREDENTIALS_VOLUME.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(source.secret.clone()),
            // A Secret deleted after the restore must not keep the pod from starting on
            // its data: over data in place, the fetch reads no credentials.
            optional: Some(true),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}
