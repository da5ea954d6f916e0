//! `EtcdCluster.spec.recovery` and `status.recovery`: what the operator does about a
//! permanent loss of quorum, and the record of each recovery.

use std::time::Duration;

use etcd_operator_core::lifecycle::{
    ABANDON_RECOVERY_ANNOTATION, DEFAULT_QUORUM_LOSS, DEFAULT_RECOVERY_DEADLINE,
    RECOVER_ANNOTATION, RecoveryPolicy, RecoveryRecord, RecoverySpec,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::restore::{ClusterRestore, RestoreStorageType};
use super::s3::S3Store;

/// What the operator does when a majority of the voting members is gone with its data
/// (pods gone, claims lost or deleted) for `quorumLossSeconds`. Members that merely do
/// not answer are never recovered from: their quorum may come back by itself.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRecovery {
    /// `Manual` (default): report what is known (members gone and surviving, each
    /// survivor's raft index and revision, the newest backup) and wait for the annotation
    /// `etcd.database.coreos.com/recover: FromSurvivor`, `FromBackup` or `Reseed`.
    /// `FromSurvivor`: restart the survivor with the highest raft index alone
    /// (`--force-new-cluster`, on its own claim), then grow back with learners.
    /// `FromBackup`: when no member keeps any data, restore the newest verified backup of
    /// `backup` in place (same name, same Services). `Reseed` (annotation only, never a
    /// policy): when no member keeps any data, start a new, empty seed in place. Each
    /// recovery happens at most once per incident and is recorded in `status.recovery`
    /// before it acts.
    #[serde(default)]
    pub policy: RecoveryPolicyName,
    /// Seconds a permanent loss of quorum lasts before a recovery may start (also one the
    /// annotation asks for). Default 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub quorum_loss_seconds: Option<i64>,
    /// Seconds a recorded recovery may take (until the cluster answers again) before it is
    /// reported `RecoveryFailed`; after that nothing more is done for it but its finish,
    /// and the annotation `etcd.database.coreos.com/abandon-recovery: <incident>` gives it
    /// up. Default 900.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 604800))]
    pub deadline_seconds: Option<i64>,
    /// Where the backups of this cluster are (as an EtcdBackup writes them): the newest
    /// verified snapshot under `s3.path` is what `FromBackup` restores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<RecoveryBackup>,
}

/// `spec.recovery.policy`.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RecoveryPolicyName {
    /// Report only; the annotation triggers a recovery.
    #[default]
    Manual,
    /// Restart the most up-to-date survivor alone, then grow back.
    FromSurvivor,
    /// Restore the newest verified backup in place when no member keeps data.
    FromBackup,
}

/// The store of a cluster's backups.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryBackup {
    /// Where the backups are: `S3`.
    #[serde(default)]
    pub backup_storage_type: RestoreStorageType,
    /// The S3 store; `path` is `<bucket>/<prefix>` of the backups (or one snapshot).
    pub s3: S3Store,
}

impl ClusterRecovery {
    /// The lifecycle's view, with the recovery annotations that are set.
    pub(crate) fn to_spec(recovery: Option<&Self>, annotations: Annotations<'_>) -> RecoverySpec {
        let seconds = recovery
            .and_then(|r| r.quorum_loss_seconds)
            .and_then(|s| u64::try_from(s).ok());
        let deadline = recovery
            .and_then(|r| r.deadline_seconds)
            .and_then(|s| u64::try_from(s).ok());
        RecoverySpec {
            policy: match recovery.map(|r| r.policy).unwrap_or_default() {
                RecoveryPolicyName::Manual => RecoveryPolicy::Manual,
                RecoveryPolicyName::FromSurvivor => RecoveryPolicy::FromSurvivor,
                RecoveryPolicyName::FromBackup => RecoveryPolicy::FromBackup,
            },
            requested: annotations
                .get(RECOVER_ANNOTATION)
                .and_then(|a| RecoveryPolicy::parse(a))
                .filter(|p| *p != RecoveryPolicy::Manual),
            quorum_loss: seconds.map_or(DEFAULT_QUORUM_LOSS, Duration::from_secs),
            deadline: deadline.map_or(DEFAULT_RECOVERY_DEADLINE, Duration::from_secs),
            abandon: annotations.get(ABANDON_RECOVERY_ANNOTATION).cloned(),
        }
    }
}

/// An object's annotations.
pub(crate) type Annotations<'a> = &'a std::collections::BTreeMap<String, String>;

/// `status.recovery`: the last recovery from a loss of quorum.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryStatus {
    /// The etcd cluster and the members it lost: recovered at most once.
    pub incident: String,
    /// `FromSurvivor`, `FromBackup` or `Reseed`.
    pub policy: String,
    /// When the recovery was recorded, before it acted (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<String>,
    /// When the cluster came back (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<String>,
    /// The voting members gone with their data.
    #[serde(default)]
    pub lost: Vec<String>,
    /// `FromSurvivor`: the member restarted alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub survivor: Option<String>,
    /// `FromSurvivor`: its raft index when it was chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raft_index: Option<u64>,
    /// The etcd version of the recovered member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_version: Option<String>,
    /// `FromBackup`: the snapshot restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<ClusterRestore>,
    /// The newest revision known before the loss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_revision: Option<i64>,
    /// The revision the cluster came back at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_revision: Option<i64>,
    /// `FromBackup`: the new seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<String>,
    /// `FromBackup`: the new seed's `--initial-cluster-token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The etcd cluster ID after the recovery (hexadecimal).
    #[serde(rename = "clusterID", default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// `metadata.uid` of the EtcdCluster this record was written for: it is carried out
    /// on no other object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// The user gave the recovery up before it finished (`abandon-recovery`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abandoned: bool,
}

/// Every field of [`RecoveryStatus`] as it is serialized.
const RECOVERY_STATUS_FIELDS: &[&str] = &[
    "incident",
    "policy",
    "started",
    "finished",
    "lost",
    "survivor",
    "raftIndex",
    "etcdVersion",
    "backup",
    "lastRevision",
    "restoredRevision",
    "seed",
    "token",
    "clusterID",
    "uid",
    "abandoned",
];

impl RecoveryStatus {
    /// The status form of `record`, written at `now`.
    pub(crate) fn from_record(record: &RecoveryRecord, started: Option<String>, now: &str) -> Self {
        RecoveryStatus {
            incident: record.incident.clone(),
            policy: record.policy.as_str().to_string(),
            started: started.or_else(|| Some(now.to_string())),
            finished: record.finished.then(|| now.to_string()),
            lost: record.lost.clone(),
            survivor: record.survivor.clone(),
            raft_index: record.raft_index,
            etcd_version: record.version.clone(),
            backup: record.backup.as_ref().map(super::restore::cluster_restore),
            last_revision: record.last_revision,
            restored_revision: record.restored_revision,
            seed: record.seed.clone(),
            token: record.token.clone(),
            cluster_id: record.cluster_id.map(|id| format!("{id:x}")),
            uid: record.uid.clone(),
            abandoned: record.abandoned,
        }
    }

    /// The JSON of a merge patch that writes this status whole: every field this record
    /// leaves out is written `null`, so nothing of an earlier record stays behind.
    pub(crate) fn merge_patch(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(self).expect("a recovery status serializes");
        if let Some(fields) = value.as_object_mut() {
            for key in RECOVERY_STATUS_FIELDS {
                fields.entry(*key).or_insert(serde_json::Value::Null);
            }
        }
        value
    }

    /// The record this status holds.
    pub(crate) fn to_record(&self) -> RecoveryRecord {
        RecoveryRecord {
            incident: self.incident.clone(),
            policy: RecoveryPolicy::parse(&self.policy).unwrap_or(RecoveryPolicy::Manual),
            lost: self.lost.clone(),
            survivor: self.survivor.clone(),
            raft_index: self.raft_index,
            version: self.etcd_version.clone(),
            backup: self.backup.as_ref().map(super::restore::snapshot_source),
            last_revision: self.last_revision,
            restored_revision: self.restored_revision,
            seed: self.seed.clone(),
            token: self.token.clone(),
            cluster_id: self
                .cluster_id
                .as_deref()
                .map(|id| u64::from_str_radix(id, 16).unwrap_or(u64::MAX)),
            uid: self.uid.clone(),
            finished: self.finished.is_some(),
            abandoned: self.abandoned,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_annotation_asks_for_a_recovery_over_the_policy_and_manual_asks_for_none() {
        let spec = ClusterRecovery {
            policy: RecoveryPolicyName::FromSurvivor,
            quorum_loss_seconds: Some(30),
            deadline_seconds: Some(120),
            backup: None,
        };
        let annotated = |value: &str| {
            std::collections::BTreeMap::from([(RECOVER_ANNOTATION.to_string(), value.to_string())])
        };
        let none = std::collections::BTreeMap::new();
        let read = ClusterRecovery::to_spec(Some(&spec), &none);
        assert_eq!(read.policy, RecoveryPolicy::FromSurvivor);
        assert_eq!(read.quorum_loss, Duration::from_secs(30));
        assert_eq!(read.deadline, Duration::from_secs(120));
        let asked = ClusterRecovery::to_spec(None, &annotated("FromBackup"));
        assert_eq!(asked.effective(), RecoveryPolicy::FromBackup);
        assert_eq!(asked.quorum_loss, DEFAULT_QUORUM_LOSS);
        assert_eq!(asked.deadline, DEFAULT_RECOVERY_DEADLINE);
        let manual = ClusterRecovery::to_spec(Some(&spec), &annotated("Manual"));
        assert_eq!(manual.requested, None);
        assert_eq!(
            ClusterRecovery::to_spec(None, &annotated("bogus")).requested,
            None
        );
    }

    #[test]
    fn the_abandon_annotation_is_read_as_the_incident_it_gives_up() {
        let annotations = std::collections::BTreeMap::from([(
            ABANDON_RECOVERY_ANNOTATION.to_string(),
            "dead: lost m2, m3".to_string(),
        )]);
        let read = ClusterRecovery::to_spec(None, &annotations);
        assert_eq!(read.abandon.as_deref(), Some("dead: lost m2, m3"));
        assert_eq!(read.requested, None);
    }

    #[test]
    fn a_merge_patch_of_a_recovery_names_every_field_so_none_of_an_older_one_stays() {
        let patch = RecoveryStatus::default().merge_patch();
        let keys: Vec<&String> = patch.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), RECOVERY_STATUS_FIELDS.len(), "{keys:?}");
        let full = RecoveryStatus {
            started: Some("t".into()),
            finished: Some("t".into()),
            survivor: Some("m1".into()),
            raft_index: Some(1),
            etcd_version: Some("3.5.21".into()),
            backup: Some(ClusterRestore::default()),
            last_revision: Some(1),
            restored_revision: Some(1),
            seed: Some("s".into()),
            token: Some("t".into()),
            cluster_id: Some("1".into()),
            uid: Some("u".into()),
            abandoned: true,
            ..RecoveryStatus::default()
        };
        let serialized = serde_json::to_value(&full).unwrap();
        let written: Vec<&String> = serialized.as_object().unwrap().keys().collect();
        assert_eq!(written, keys);
    }

    #[test]
    fn a_recovery_record_survives_the_round_trip_through_the_status() {
        let record = RecoveryRecord {
            incident: "dead: lost m2, m3".into(),
            policy: RecoveryPolicy::FromSurvivor,
            lost: vec!["m2".into(), "m3".into()],
            survivor: Some("m1".into()),
            raft_index: Some(42),
            version: Some("3.5.21".into()),
            backup: None,
            last_revision: Some(9),
            restored_revision: Some(9),
            seed: None,
            token: None,
            cluster_id: Some(0xdead),
            uid: Some("0b1ec7".into()),
            finished: true,
            abandoned: true,
        };
        let status = RecoveryStatus::from_record(&record, None, "2026-01-01T00:00:00Z");
        assert_eq!(status.started.as_deref(), Some("2026-01-01T00:00:00Z"));
        assert_eq!(status.cluster_id.as_deref(), Some("dead"));
        assert_eq!(status.to_record(), record);
    }
}
