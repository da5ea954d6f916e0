//! Turns a tick's `StatusReport` into the EtcdCluster status, keeping each condition's
//! `lastTransitionTime` while its status does not change.

use etcd_operator_core::lifecycle::Compaction;
use etcd_operator_core::report::{CompactionReport, MemberReport, StatusReport, TlsReport};
use etcd_operator_core::topology::{CLIENT_PORT, Topology};

use crate::api::maintenance::duration_text;
use crate::api::{
    BootstrapStatus, CertificateStatus, ClusterCondition, CompactionStatus, EtcdClusterStatus,
    MemberStatus, MembersStatus, TlsStatus,
};
use crate::resources::pvc_name;

/// The status to write, given the report and the status currently stored.
pub fn status_from_report(
    report: &StatusReport,
    topology: &Topology,
    previous: Option<&EtcdClusterStatus>,
    now: &str,
) -> EtcdClusterStatus {
    let conditions = report
        .conditions
        .iter()
        .map(|c| {
            let status = if c.status { "True" } else { "False" };
            let since = previous
                .and_then(|p| p.conditions.iter().find(|old| old.r#type == c.kind))
                .filter(|old| old.status == status)
                .and_then(|old| old.last_transition_time.clone())
                .unwrap_or_else(|| now.to_string());
            ClusterCondition {
                r#type: c.kind.to_string(),
                status: status.to_string(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_transition_time: Some(since),
            }
        })
        .collect();
    let members = MembersStatus {
        ready: report.ready.clone(),
        unready: report.unready.clone(),
        details: report.details.iter().map(member_status).collect(),
    };
    // The bootstrap record is never lost: a report without one keeps the stored one.
    let bootstrap = report
        .bootstrap
        .as_ref()
        .map(BootstrapStatus::from_record)
        .or_else(|| previous.and_then(|p| p.bootstrap.clone()));
    EtcdClusterStatus {
        phase: report.phase.name().to_string(),
        reason: report.reason.as_str().to_string(),
        message: report.message.clone(),
        control_paused: report.paused,
        conditions,
        size: i32::try_from(report.size).unwrap_or(i32::MAX),
        ready_members: i32::try_from(report.ready.len()).unwrap_or(i32::MAX),
        service_name: topology.client_service(),
        client_port: i32::from(CLIENT_PORT),
        members,
        current_version: report.current_version.clone().unwrap_or_default(),
        target_version: report.target_version.clone(),
        quota_used_percent: report
            .quota_used_percent
            .and_then(|p| i64::try_from(p).ok()),
        observed_generation: Some(report.observed_generation),
        bootstrap,
        // Written by the recovery itself (`record_recovery`), never by a report.
        recovery: None,
        revision: report.revision,
        failed_version: report.failed_version.clone(),
        tls: report.tls.as_ref().map(tls_status),
        compaction: Some(compaction_status(
            &report.compaction,
            previous.and_then(|p| p.compaction.as_ref()),
            now,
        )),
    }
}

/// `status.compaction`: the time of the last compaction is kept while its revision is.
fn compaction_status(
    report: &CompactionReport,
    previous: Option<&CompactionStatus>,
    now: &str,
) -> CompactionStatus {
    let (source, mode, retention) = match report.mode {
        Compaction::ByEtcd => ("EtcdEnv", "", String::new()),
        Compaction::Periodic { retention } => ("Operator", "Periodic", duration_text(retention)),
        Compaction::Revision { retention } => ("Operator", "Revision", retention.to_string()),
    };
    let time = report.revision.map(|revision| {
        previous
            .filter(|p| p.revision == Some(revision))
            .and_then(|p| p.time.clone())
            .unwrap_or_else(|| now.to_string())
    });
    CompactionStatus {
        source: source.into(),
        mode: mode.into(),
        retention,
        revision: report.revision,
        time,
    }
}

/// The TLS part of the status.
fn tls_status(tls: &TlsReport) -> TlsStatus {
    TlsStatus {
        mode: tls.mode.as_str().to_string(),
        certificates: tls
            .certificates
            .iter()
            .map(|c| CertificateStatus {
                secret: c.secret.clone(),
                key: c.key.clone(),
                not_after: c.not_after.clone(),
                renew_at: c.renew_at.clone(),
            })
            .collect(),
        next_rotation: tls.next_rotation.clone(),
        ca_rotation: tls.ca_rotation.clone(),
    }
}

/// One member's status line.
fn member_status(m: &MemberReport) -> MemberStatus {
    MemberStatus {
        name: m.name.clone(),
        id: format!("{:x}", m.id),
        role: if m.voter { "Voter" } else { "Learner" }.to_string(),
        ready: m.ready,
        restarts: i32::try_from(m.restarts).unwrap_or(i32::MAX),
        persistent_volume_claim: m.on_claim.then(|| pvc_name(&m.name)),
        db_size_bytes: m.db_size.and_then(|b| i64::try_from(b).ok()),
        db_size_in_use_bytes: m.db_size_in_use.and_then(|b| i64::try_from(b).ok()),
        quota_backend_bytes: i64::try_from(m.quota).ok(),
        alarms: m.alarms.iter().map(|a| a.as_str().to_string()).collect(),
        revision: m.revision,
    }
}

#[cfg(test)]
mod tests {
    use etcd_operator_core::lifecycle::{AlarmKind, BootstrapRecord, Phase, Reason};
    use etcd_operator_core::report::ConditionReport;

    use super::*;

    fn report(available: bool) -> StatusReport {
        StatusReport {
            phase: Phase::Running,
            reason: Reason::Converged,
            message: "3 members running 3.5.21".into(),
            size: 3,
            ready: vec!["a".into(), "b".into(), "c".into()],
            unready: vec![],
            details: vec![
                MemberReport {
                    name: "a".into(),
                    id: 0xa1,
                    voter: true,
                    ready: true,
                    restarts: 2,
                    on_claim: true,
                    db_size: Some(4096),
                    db_size_in_use: Some(2048),
                    quota: 8192,
                    alarms: vec![AlarmKind::NoSpace],
                    revision: Some(77),
                },
                MemberReport {
                    name: "d".into(),
                    id: 0xd4,
                    voter: false,
                    ready: false,
                    restarts: 0,
                    on_claim: false,
                    db_size: None,
                    db_size_in_use: None,
                    quota: 8192,
                    alarms: vec![],
                    revision: None,
                },
            ],
            current_version: Some("3.5.21".into()),
            target_version: "3.5.21".into(),
            quota_used_percent: Some(50),
            conditions: vec![ConditionReport {
                kind: "Available",
                status: available,
                reason: "QuorumHealthy".into(),
                message: String::new(),
            }],
            paused: false,
            observed_generation: 4,
            bootstrap: Some(BootstrapRecord {
                seed: Some("a".into()),
                token: Some("demo-1".into()),
                cluster_id: Some(0xabc),
            }),
            failed_version: None,
            revision: None,
            compaction: CompactionReport {
                mode: Compaction::default(),
                revision: Some(120),
            },
            tls: None,
        }
    }

    #[test]
    fn status_carries_coreos_fields_and_observed_generation() {
        let t = Topology::new("prod", "demo");
        let s = status_from_report(&report(true), &t, None, "2026-01-01T00:00:00Z");
        assert_eq!(s.service_name, "demo-client");
        assert_eq!(s.client_port, 2379);
        assert_eq!(s.ready_members, 3);
        assert_eq!(s.observed_generation, Some(4));
        assert_eq!(s.current_version, "3.5.21");
    }

    #[test]
    fn each_member_shows_its_id_role_readiness_restarts_claim_sizes_and_alarms() {
        let t = Topology::new("prod", "demo");
        let s = status_from_report(&report(true), &t, None, "T");
        let details = &s.members.details;
        assert_eq!(
            details[0],
            MemberStatus {
                name: "a".into(),
                id: "a1".into(),
                role: "Voter".into(),
                ready: true,
                restarts: 2,
                persistent_volume_claim: Some("a-data".into()),
                db_size_bytes: Some(4096),
                db_size_in_use_bytes: Some(2048),
                quota_backend_bytes: Some(8192),
                alarms: vec!["NOSPACE".into()],
                revision: Some(77),
            }
        );
        assert_eq!(
            (
                details[1].role.as_str(),
                details[1].ready,
                &details[1].persistent_volume_claim
            ),
            ("Learner", false, &None)
        );
    }

    #[test]
    fn the_bootstrap_record_is_kept_when_a_report_has_none() {
        let t = Topology::new("prod", "demo");
        let before = status_from_report(&report(true), &t, None, "T1");
        assert_eq!(
            before
                .bootstrap
                .as_ref()
                .and_then(|b| b.cluster_id.as_deref()),
            Some("abc")
        );
        let mut without = report(false);
        without.bootstrap = None;
        let after = status_from_report(&without, &t, Some(&before), "T2");
        assert_eq!(after.bootstrap, before.bootstrap);
        assert_eq!(
            after.recorded().bootstrap.and_then(|b| b.cluster_id),
            Some(0xabc)
        );
    }

    #[test]
    fn condition_keeps_its_transition_time_until_its_status_changes() {
        let t = Topology::new("prod", "demo");
        let first = status_from_report(&report(true), &t, None, "T1");
        let same = status_from_report(&report(true), &t, Some(&first), "T2");
        assert_eq!(
            same.conditions[0].last_transition_time.as_deref(),
            Some("T1")
        );
        let flipped = status_from_report(&report(false), &t, Some(&same), "T3");
        assert_eq!(
            flipped.conditions[0].last_transition_time.as_deref(),
            Some("T3")
        );
    }
}
