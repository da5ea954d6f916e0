//! CA rotation of an operator-managed cluster, as its CA Secret records it: the step in
//! progress and the CAs each step needs, the trust bundle each step gives the members,
//! when a rotation is due, and the Secret's content after each step. Pure: the Secret
//! comes in as keys and annotations, the time as a parameter.
//!
//! etcd reads its trusted CA files only when it starts, and its certificates for each new
//! connection. So the bundle every member trusts changes only with a restart of every
//! member (the lifecycle's rolling restart), and a rotation goes in three steps, each
//! begun only when every member runs with what the previous one gave it:
//!
//! 1. `TrustNewCA`: a new CA is made (`next.crt`, `next.key`) and added to every trust
//!    bundle; leaf certificates still come from the old CA (`tls.crt`, `tls.key`).
//! 2. `ReissueLeaves`: the new CA becomes `tls.crt`/`tls.key`, the old one is kept as
//!    `previous.crt` and still trusted; leaf certificates are re-issued from the new CA.
//! 3. `DropOldCA`: `previous.crt` goes; every bundle holds the new CA only.
//!
//! With a CA of the user's (`caSecret`), the CA Secret here is the operator's copy of it,
//! and the new CA of step one is the one the user wrote into their Secret: a rotation is
//! due when that is not the CA the copy issues from.

use std::collections::BTreeMap;

use etcd_operator_core::lifecycle::{CaRotationStep, CaRotationView};

use super::ca_source::{CaSource, Renewal};
use super::error::{IssueError, Problem, SecretProblem, joined};
use super::issue::Ca;
use super::layout::{CA_CERT_KEY, CA_KEY_KEY};
use super::pem::{certificates, rfc3339};
use super::validate::{CheckedCa, check_ca_keys};
use crate::secret_data::SecretData;

pub use crate::api::annotations::ROTATE_ANNOTATION;
/// Annotation on the CA Secret: the step in progress.
pub const STEP_ANNOTATION: &str = "etcd.database.coreos.com/ca-rotation-step";
/// Annotation on the CA Secret: when the step began (Unix seconds).
pub const SINCE_ANNOTATION: &str = "etcd.database.coreos.com/ca-rotation-since";
/// Annotation on the CA Secret: the last value of [`ROTATE_ANNOTATION`] acted on.
pub const HANDLED_ANNOTATION: &str = "etcd.database.coreos.com/rotate-ca-handled";
/// Key of the new CA's certificate while it is only trusted (`TrustNewCA`).
pub const NEXT_CERT_KEY: &str = "next.crt";
/// Key of the new CA's private key while it is only trusted.
pub const NEXT_KEY_KEY: &str = "next.key";
/// Key of the old CA's certificate while it is still trusted (`ReissueLeaves`).
pub const PREVIOUS_CERT_KEY: &str = "previous.crt";
/// How long after leaf certificates were re-issued the old CA may be dropped: the time a
/// kubelet takes to update a mounted Secret (its sync period, a minute, and its cache),
/// after which no member presents a certificate from the old CA.
pub const PROPAGATION_S: i64 = 90;

/// What a CA Secret records: the CA that issues, and the rotation in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaRecord {
    /// The CA that issues leaf certificates now (`tls.crt`, `tls.key`).
    pub signer: CheckedCa,
    /// The rotation step in progress.
    pub step: Option<CaRotationStep>,
    /// In `TrustNewCA`: the new CA, trusted but not issuing yet.
    pub next: Option<CheckedCa>,
    /// In `ReissueLeaves`: the old CA's certificate, still trusted.
    pub previous: Option<Vec<u8>>,
    /// When the step began (Unix seconds).
    pub since: Option<i64>,
    /// The last value of the cluster's `rotate-ca` annotation acted on.
    pub handled: Option<String>,
}

impl CaRecord {
    /// A CA with no rotation in progress.
    pub fn plain(signer: CheckedCa) -> Self {
        CaRecord {
            signer,
            step: None,
            next: None,
            previous: None,
            since: None,
            handled: None,
        }
    }

    /// The CA bundle every leaf Secret holds in this step (`peer-ca.crt`,
    /// `server-ca.crt`, `etcd-client-ca.crt`), PEM: the CAs trusted now.
    pub fn trust_bundle(&self) -> Vec<u8> {
        let mut bundle = Vec::new();
        let mut add = |pem: &[u8]| {
            bundle.extend_from_slice(pem);
            if !pem.ends_with(b"\n") {
                bundle.push(b'\n');
            }
        };
        if let Some(previous) = &self.previous {
            add(previous);
        }
        add(&self.signer.cert_pem);
        if let Some(next) = &self.next {
            add(&next.cert_pem);
        }
        bundle
    }
}

fn record_problem(secret: &str, what: String) -> Vec<SecretProblem> {
    vec![SecretProblem::secret(
        secret,
        Problem::BadRotationRecord(what),
    )]
}

/// Reads the CA Secret `secret` (its keys and annotations) at `now`.
pub fn ca_record(
    secret: &str,
    data: &SecretData,
    annotations: &BTreeMap<String, String>,
    now: i64,
) -> Result<CaRecord, Vec<SecretProblem>> {
    let signer = check_ca_keys(secret, data, (CA_CERT_KEY, CA_KEY_KEY), now)?;
    let step = match annotations.get(STEP_ANNOTATION) {
        None => None,
        Some(name) => Some(CaRotationStep::parse(name).ok_or_else(|| {
            record_problem(secret, format!("{STEP_ANNOTATION}: unknown step {name:?}"))
        })?),
    };
    let since = match (step, annotations.get(SINCE_ANNOTATION)) {
        (None, _) => None,
        (Some(_), Some(s)) => Some(s.parse::<i64>().map_err(|_| {
            record_problem(
                secret,
                format!("{SINCE_ANNOTATION}: not Unix seconds: {s:?}"),
            )
        })?),
        (Some(_), None) => {
            return Err(record_problem(
                secret,
                format!("{SINCE_ANNOTATION} missing"),
            ));
        }
    };
    let next = match step {
        Some(CaRotationStep::TrustNewCa) => Some(check_ca_keys(
            secret,
            data,
            (NEXT_CERT_KEY, NEXT_KEY_KEY),
            now,
        )?),
        _ => None,
    };
    let previous = match step {
        Some(CaRotationStep::ReissueLeaves) => {
            let pem = data.get(PREVIOUS_CERT_KEY).ok_or_else(|| {
                vec![SecretProblem::key(
                    secret,
                    PREVIOUS_CERT_KEY,
                    Problem::KeyMissing,
                )]
            })?;
            certificates(pem).map_err(|e| {
                vec![SecretProblem::key(
                    secret,
                    PREVIOUS_CERT_KEY,
                    Problem::NotACertificate(e),
                )]
            })?;
            Some(pem.clone())
        }
        _ => None,
    };
    Ok(CaRecord {
        signer,
        step,
        next,
        previous,
        since,
        handled: annotations.get(HANDLED_ANNOTATION).cloned(),
    })
}

/// Where the rotation of `record` stands at `now`, with the cluster's `rotate-ca`
/// annotation `asked`, the CA's `renewal` point, and where new CAs come from (`source`).
/// The operator's own CA is rotated when asked and at its renewal point; a user's CA is
/// never renewed by the operator (it does not write the user's Secret), but a new CA the
/// user puts in it is adopted through a rotation.
pub fn rotation_view(
    record: &CaRecord,
    source: &CaSource,
    asked: Option<&str>,
    renewal: Renewal,
    now: i64,
) -> CaRotationView {
    let propagated = record.step == Some(CaRotationStep::ReissueLeaves)
        && record
            .since
            .is_some_and(|since| now >= since + PROPAGATION_S);
    let due = match (record.step, source) {
        (Some(_), _) | (None, CaSource::User(Err(_))) => None,
        (None, CaSource::Operator) => due(record, asked, renewal, now),
        (None, CaSource::User(Ok(user))) => changed(record, user),
    };
    CaRotationView {
        step: record.step,
        due,
        propagated,
    }
}

/// The next time (Unix seconds, after `now`) at which the rotation of `record` changes on
/// its own: the end of the propagation wait in `ReissueLeaves`, or with no rotation in
/// progress the renewal point of the operator's own CA (a user's CA is never renewed by
/// the operator, so it has no such time).
pub fn next_event(record: &CaRecord, source: &CaSource, renewal: Renewal, now: i64) -> Option<i64> {
    let at = match (record.step, source) {
        (Some(CaRotationStep::ReissueLeaves), _) => record.since? + PROPAGATION_S,
        (Some(_), _) | (None, CaSource::User(_)) => return None,
        (None, CaSource::Operator) => renewal.at(record.signer.not_before, record.signer.not_after),
    };
    (at > now).then_some(at)
}

/// Why a rotation of the operator's own CA should start now, if it should.
fn due(record: &CaRecord, asked: Option<&str>, renewal: Renewal, now: i64) -> Option<String> {
    if let Some(value) = asked.filter(|v| !v.is_empty())
        && record.handled.as_deref() != Some(value)
    {
        return Some(format!("annotation {ROTATE_ANNOTATION} is {value:?}"));
    }
    let renew_at = renewal.at(record.signer.not_before, record.signer.not_after);
    (now >= renew_at).then(|| {
        format!(
            "the CA in Secret {} reached its renewal point at {} (it expires at {})",
            record.signer.secret,
            rfc3339(renew_at),
            rfc3339(record.signer.not_after)
        )
    })
}

/// Why a rotation onto the user's CA `user` should start: it is not the CA in use.
fn changed(record: &CaRecord, user: &CheckedCa) -> Option<String> {
    let first = |pem: &[u8]| certificates(pem).ok()?.into_iter().next().map(|c| c.der);
    let (in_use, theirs) = (first(&record.signer.cert_pem), first(&user.cert_pem));
    (in_use.is_none() || in_use != theirs).then(|| {
        format!(
            "the CA in Secret {} is not the one the certificates come from (its copy in \
             Secret {}): adopting it",
            user.secret, record.signer.secret
        )
    })
}

/// A CA Secret's content after a step: its keys, and its annotations (`None`: removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaWrite {
    /// Every key of the Secret.
    pub data: SecretData,
    /// Annotations to set or (`None`) remove.
    pub annotations: BTreeMap<String, Option<String>>,
    /// What changed, for people.
    pub note: String,
}

/// Why a step cannot be taken.
#[derive(Debug, thiserror::Error)]
pub enum AdvanceError {
    /// The Secret records another step than the one the decision was taken on.
    #[error(
        "the CA Secret records step {recorded}, not {expected}: nothing changed (the next \
         observation decides again)"
    )]
    NotAt {
        /// What the Secret records.
        recorded: String,
        /// What the decision expected.
        expected: String,
    },
    /// The step asked for is not the one after the current step.
    #[error("step {to} does not follow {from}: steps are never skipped")]
    Skips {
        /// The current step.
        from: String,
        /// The step asked for.
        to: String,
    },
    /// The new CA could not be made or taken.
    #[error(transparent)]
    NewCa(#[from] NewCaError),
    /// The record is at `TrustNewCA` but holds no new CA.
    #[error("the new CA is missing")]
    NextCaMissing,
}

/// Why step one of a CA rotation has no new CA.
#[derive(Debug, thiserror::Error)]
pub enum NewCaError {
    /// The operator's own new CA could not be issued.
    #[error(transparent)]
    Issue(#[from] IssueError),
    /// The user's CA Secret, which the new CA comes from, is not usable.
    #[error("{}", joined(.0))]
    UserCa(Vec<SecretProblem>),
}

fn step_name(step: Option<CaRotationStep>) -> String {
    step.map_or("(none)", CaRotationStep::as_str).to_string()
}

fn pair(cert_key: &str, cert: &[u8], key_key: &str, key: &[u8]) -> SecretData {
    BTreeMap::from([
        (cert_key.to_string(), cert.to_vec()),
        (key_key.to_string(), key.to_vec()),
    ])
}

/// The CA Secret after moving `record` from `from` to `to` at `now`. `new_ca` makes the
/// new CA (step one only); `asked` is the cluster's `rotate-ca` annotation, recorded as
/// handled when a rotation starts.
pub fn advance(
    record: &CaRecord,
    (from, to): (Option<CaRotationStep>, Option<CaRotationStep>),
    new_ca: impl FnOnce() -> Result<Ca, NewCaError>,
    asked: Option<&str>,
    now: i64,
) -> Result<CaWrite, AdvanceError> {
    if record.step != from {
        return Err(AdvanceError::NotAt {
            recorded: step_name(record.step),
            expected: step_name(from),
        });
    }
    if CaRotationStep::after(from) != to {
        return Err(AdvanceError::Skips {
            from: step_name(from),
            to: step_name(to),
        });
    }
    let signer = &record.signer;
    let (data, note) = match (from, &record.next) {
        (None, _) => {
            let ca = new_ca()?;
            let mut data = pair(CA_CERT_KEY, &signer.cert_pem, CA_KEY_KEY, &signer.key_pem);
            data.extend(pair(
                NEXT_CERT_KEY,
                ca.cert_pem.as_bytes(),
                NEXT_KEY_KEY,
                ca.key_pem.as_bytes(),
            ));
            (data, "made a new CA and added it to every trust bundle")
        }
        (Some(CaRotationStep::TrustNewCa), Some(next)) => {
            let mut data = pair(CA_CERT_KEY, &next.cert_pem, CA_KEY_KEY, &next.key_pem);
            data.insert(PREVIOUS_CERT_KEY.into(), signer.cert_pem.clone());
            (data, "the new CA issues the certificates from now on")
        }
        (Some(CaRotationStep::TrustNewCa), None) => {
            return Err(AdvanceError::NextCaMissing);
        }
        (Some(CaRotationStep::ReissueLeaves), _) => (
            pair(CA_CERT_KEY, &signer.cert_pem, CA_KEY_KEY, &signer.key_pem),
            "dropped the old CA from every trust bundle",
        ),
        (Some(CaRotationStep::DropOldCa), _) => (
            pair(CA_CERT_KEY, &signer.cert_pem, CA_KEY_KEY, &signer.key_pem),
            "the CA rotation is complete",
        ),
    };
    let mut annotations = BTreeMap::from([
        (
            STEP_ANNOTATION.to_string(),
            to.map(|s| s.as_str().to_string()),
        ),
        (SINCE_ANNOTATION.to_string(), to.map(|_| now.to_string())),
    ]);
    if from.is_none() {
        let handled = asked.map(str::to_string).or_else(|| record.handled.clone());
        annotations.insert(HANDLED_ANNOTATION.to_string(), handled);
    }
    let note = format!(
        "CA rotation {} -> {}: {note} (Secret {})",
        step_name(from),
        step_name(to),
        signer.secret
    );
    Ok(CaWrite {
        data,
        annotations,
        note,
    })
}

/// Digest of the CA bundles members trust: the certificates of `peer-ca.crt` and of
/// `server-ca.crt` (each as a set: order and PEM layout do not count), `None` when
/// either does not parse.
pub fn trust_digest(peer_ca: &[u8], server_ca: &[u8]) -> Option<String> {
    let set = |pem: &[u8]| -> Option<Vec<Vec<u8>>> {
        let mut ders: Vec<Vec<u8>> = certificates(pem).ok()?.into_iter().map(|c| c.der).collect();
        ders.sort();
        ders.dedup();
        Some(ders)
    };
    let (peer, server) = (set(peer_ca)?, set(server_ca)?);
    let bytes = [peer, server]
        .iter()
        .flat_map(|ders| {
            ders.iter()
                .flat_map(|d| d.iter().copied().chain([0xff]))
                .chain([0xfe])
                .collect::<Vec<u8>>()
        })
        .collect::<Vec<u8>>();
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    Some(format!("{hash:016x}"))
}

#[cfg(test)]
mod next_event_tests {
    use super::*;

    fn user() -> CaSource {
        CaSource::User(Ok(record(None, None).signer))
    }

    fn record(step: Option<CaRotationStep>, since: Option<i64>) -> CaRecord {
        CaRecord {
            signer: CheckedCa {
                secret: "demo-ca".into(),
                cert_pem: Vec::new(),
                key_pem: Vec::new(),
                not_before: 0,
                not_after: 3_000,
            },
            step,
            next: None,
            previous: None,
            since,
            handled: None,
        }
    }

    #[test]
    fn without_a_rotation_the_next_event_is_the_cas_renewal_point() {
        let plain = record(None, None);
        assert_eq!(
            next_event(&plain, &CaSource::Operator, Renewal::default(), 100),
            Some(2_000)
        );
        assert_eq!(
            next_event(&plain, &CaSource::Operator, Renewal::default(), 2_000),
            None
        );
        assert_eq!(next_event(&plain, &user(), Renewal::default(), 100), None);
    }

    #[test]
    fn while_leaves_are_reissued_the_next_event_is_the_end_of_the_propagation_wait() {
        let reissuing = record(Some(CaRotationStep::ReissueLeaves), Some(500));
        let at = 500 + PROPAGATION_S;
        assert_eq!(
            next_event(&reissuing, &CaSource::Operator, Renewal::default(), 510),
            Some(at)
        );
        assert_eq!(
            next_event(&reissuing, &CaSource::Operator, Renewal::default(), at),
            None
        );
    }

    #[test]
    fn a_users_ca_being_adopted_waits_out_the_propagation_too() {
        let reissuing = record(Some(CaRotationStep::ReissueLeaves), Some(500));
        assert_eq!(
            next_event(&reissuing, &user(), Renewal::default(), 510),
            Some(500 + PROPAGATION_S)
        );
    }

    #[test]
    fn steps_that_wait_for_members_have_no_time_of_their_own() {
        let trusting = record(Some(CaRotationStep::TrustNewCa), Some(500));
        assert_eq!(
            next_event(&trusting, &CaSource::Operator, Renewal::default(), 510),
            None
        );
    }
}
