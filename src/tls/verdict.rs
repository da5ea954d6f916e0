//! From the Secrets found to what the lifecycle decides on: which certificates are in
//! use and until when, what is wrong with them, what the operator must issue, and the
//! operator's client identity. Pure: the Secrets and the time come in.

use etcd_operator_core::lifecycle::{CertificateInfo, TlsObservation};

use super::error::{Problem, SecretProblem};
use std::collections::BTreeMap;

use super::ca_source::{CaSource, Renewal};
use super::layout::{CA_CERT_KEY, Role, SecretNames};
use super::names::ClusterNames;
use super::pem::{certificates, rfc3339, signed_by};
use super::rotation::{CaRecord, NEXT_CERT_KEY, ca_record, trust_digest};
use super::validate::{Bundle, CheckedBundle, CheckedCa, check_bundle};
use super::{ClientIdentity, check_trust};
use crate::secret_data::SecretData;

/// One Secret as read.
#[derive(Debug, Clone, Copy)]
pub struct ReadSecret<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its keys, when it exists.
    pub data: Option<&'a SecretData>,
    /// It belongs to the cluster (an ownerReference with its UID).
    pub ours: bool,
}

/// The verdict on a cluster's certificates.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Verdict {
    /// What the lifecycle sees.
    pub observation: TlsObservation,
    /// The operator's client certificate, when it can be used.
    pub identity: Option<ClientIdentity>,
}

fn info(bundle: &CheckedBundle, renew_at: Option<i64>) -> CertificateInfo {
    CertificateInfo {
        secret: bundle.secret.clone(),
        key: bundle.role.cert_key().to_string(),
        not_after: rfc3339(bundle.not_after),
        renew_at: renew_at.map(rfc3339),
    }
}

fn identity(client: &CheckedBundle) -> ClientIdentity {
    ClientIdentity {
        ca_pem: client.ca_pem.clone(),
        cert_pem: client.cert_pem.clone(),
        key_pem: client.key_pem.clone(),
    }
}

/// The verdict on the user's Secrets (`spec.TLS.static`): every problem of every Secret;
/// no renewals.
pub fn static_verdict(
    names: &SecretNames,
    found: &[ReadSecret<'_>; 3],
    cluster: &ClusterNames,
    now: i64,
) -> Verdict {
    let mut problems: Vec<SecretProblem> = Vec::new();
    let mut checked: Vec<CheckedBundle> = Vec::new();
    for ((role, name), found) in names.roles.iter().zip(found) {
        if let Err(field) = name {
            problems.push(SecretProblem::secret("(none)", Problem::Unset(field)));
            continue;
        }
        let bundle = Bundle {
            role: *role,
            secret: found.name,
            data: found.data,
        };
        match check_bundle(bundle, cluster, now) {
            Ok(b) => checked.push(b),
            Err(mut p) => problems.append(&mut p),
        }
    }
    let identity = checked
        .iter()
        .find(|b| b.role == Role::Client)
        .map(identity);
    if let [peer, server, client] = checked.as_slice() {
        problems.extend(check_trust(peer, server, client));
    }
    let certificates = if problems.is_empty() {
        checked.iter().map(|b| info(b, None)).collect()
    } else {
        Vec::new()
    };
    Verdict {
        observation: TlsObservation {
            certificates,
            problems: problems.iter().map(ToString::to_string).collect(),
            trust: members_trust(&found.map(|f| f.data)),
            ..TlsObservation::default()
        },
        identity,
    }
}

/// The digest of the CA bundles a member started now would trust: `peer-ca.crt` of the
/// peer Secret and `server-ca.crt` of the server Secret (`datas` in [`Role::ALL`]'s
/// order), as they are.
pub fn members_trust(datas: &[Option<&SecretData>; 3]) -> Option<String> {
    let (peer, server) = (Role::Peer, Role::Server);
    let peer_ca = datas[0]?.get(peer.ca_key())?;
    let server_ca = datas[1]?.get(server.ca_key())?;
    trust_digest(peer_ca, server_ca)
}

/// Where one operator-made certificate stands.
#[derive(Debug, Clone, PartialEq)]
pub enum LeafState {
    /// Usable; renewed at the time given.
    Valid(CheckedBundle, i64),
    /// Usable, and due for renewal.
    Due(CheckedBundle, i64),
    /// To issue (missing, or not usable), with why.
    Issue(String),
    /// Usable now, but not what the CA record asks for (its bundle or its issuer belong
    /// to an earlier rotation step): to issue again, with why. Until it is, it serves.
    Rewrite(CheckedBundle, String),
    /// Someone else's Secret under the operator's name: never overwritten.
    Foreign(SecretProblem),
}

/// Where the certificate of `role` in `found` stands at `now`, against the CA record
/// `ca`: it must be issued by its signer and hold the trust bundle of its step.
pub fn leaf_state(
    role: Role,
    found: ReadSecret<'_>,
    ca: &CaRecord,
    cluster: &ClusterNames,
    renewal: Renewal,
    now: i64,
) -> LeafState {
    if found.data.is_some() && !found.ours {
        let problem = Problem::NotOurs("does not belong to this EtcdCluster".into());
        return LeafState::Foreign(SecretProblem::secret(found.name, problem));
    }
    let bundle = Bundle {
        role,
        secret: found.name,
        data: found.data,
    };
    let checked = match check_bundle(bundle, cluster, now) {
        Ok(checked) => checked,
        Err(problems) => {
            let why: Vec<String> = problems.iter().map(ToString::to_string).collect();
            return LeafState::Issue(why.join("; "));
        }
    };
    if checked.ca_pem != ca.trust_bundle() {
        let why = format!(
            "Secret {}: its CA bundle is not the one Secret {} gives (a CA rotation, or \
             another CA)",
            found.name, ca.signer.secret
        );
        return LeafState::Rewrite(checked, why);
    }
    let signer = certificates(&ca.signer.cert_pem).ok();
    if !signer.is_some_and(|s| s.iter().any(|s| signed_by(&checked.cert, s))) {
        let why = format!(
            "Secret {}: not issued by the CA in Secret {}",
            found.name, ca.signer.secret
        );
        return LeafState::Rewrite(checked, why);
    }
    let renew_at = renewal.at(checked.not_before, checked.not_after);
    if now >= renew_at {
        LeafState::Due(checked, renew_at)
    } else {
        LeafState::Valid(checked, renew_at)
    }
}

/// Where the CA of an operator-managed cluster stands.
#[derive(Debug, Clone, PartialEq)]
pub enum CaState {
    /// Usable, with the rotation it records.
    Valid(Box<CaRecord>),
    /// The operator's own CA does not exist and may be made: no member exists yet.
    ToMake,
    /// The operator's copy of the user's CA (Secret `record`) does not exist yet: it is
    /// made from the user's Secret, whose CA is `ca`.
    Adopt {
        /// The Secret the copy goes into.
        record: String,
        /// The user's CA.
        ca: Box<CheckedCa>,
    },
    /// Not usable, and not to be replaced (the members trust it, or the user's Secret is
    /// not usable).
    Invalid(Vec<SecretProblem>),
}

/// Where the CA in the operator's CA Secret `found` (with the Secret's `annotations`)
/// stands at `now`, its CAs coming from `source`. The operator makes its own CA when it
/// is missing before any member exists (`born` false); a copy of the user's CA whenever
/// it is missing (clusters made before the copy existed get one too). A user's Secret
/// that cannot be used is a problem even while the copy can: it is what the cluster
/// names. Otherwise a CA that cannot be used is a problem, since members trust it (a new
/// CA reaches them only through a rotation).
pub fn ca_state(
    found: ReadSecret<'_>,
    annotations: &BTreeMap<String, String>,
    source: &CaSource,
    born: bool,
    now: i64,
) -> CaState {
    if found.data.is_some() && !found.ours {
        let problem = Problem::NotOurs("does not belong to this EtcdCluster".into());
        return CaState::Invalid(vec![SecretProblem::secret(found.name, problem)]);
    }
    if let CaSource::User(Err(problems)) = source {
        return CaState::Invalid(problems.clone());
    }
    let Some(data) = found.data else {
        return match source {
            CaSource::Operator if !born => CaState::ToMake,
            CaSource::User(Ok(ca)) => CaState::Adopt {
                record: found.name.to_string(),
                ca: Box::new(ca.clone()),
            },
            _ => CaState::Invalid(vec![SecretProblem::secret(
                found.name,
                Problem::SecretMissing,
            )]),
        };
    };
    match ca_record(found.name, data, annotations, now) {
        Ok(record) => CaState::Valid(Box::new(record)),
        Err(problems) => CaState::Invalid(problems),
    }
}

/// The verdict on an operator-managed cluster (`spec.TLS.auto`).
pub fn auto_verdict(
    ca: CaState,
    leaves: &[(Role, ReadSecret<'_>); 3],
    cluster: &ClusterNames,
    renewal: Renewal,
    now: i64,
) -> Verdict {
    let mut obs = TlsObservation {
        trust: members_trust(&leaves.map(|(_, f)| f.data)),
        ..TlsObservation::default()
    };
    let ca = match ca {
        CaState::Invalid(problems) => return invalid(&problems),
        CaState::ToMake => return all_missing(leaves),
        CaState::Valid(ca) => *ca,
        CaState::Adopt { record, ca } => {
            obs.to_issue.push(format!(
                "Secret {record}: the operator's copy of the CA in Secret {}, not made yet",
                ca.secret
            ));
            CaRecord::plain(*ca)
        }
    };
    obs.certificates.push(CertificateInfo {
        secret: ca.signer.secret.clone(),
        key: CA_CERT_KEY.into(),
        not_after: rfc3339(ca.signer.not_after),
        renew_at: None,
    });
    if let Some(next) = &ca.next {
        obs.certificates.push(CertificateInfo {
            secret: next.secret.clone(),
            key: NEXT_CERT_KEY.into(),
            not_after: rfc3339(next.not_after),
            renew_at: None,
        });
    }
    let mut identity = None;
    for (role, found) in leaves {
        match leaf_state(*role, *found, &ca, cluster, renewal, now) {
            LeafState::Valid(b, at) => {
                identity = identity.or((*role == Role::Client).then(|| self::identity(&b)));
                obs.certificates.push(info(&b, Some(at)));
            }
            LeafState::Due(b, at) => {
                identity = identity.or((*role == Role::Client).then(|| self::identity(&b)));
                let due = format!("Secret {}: renewal due since {}", b.secret, rfc3339(at));
                obs.to_issue.push(due);
                obs.certificates.push(info(&b, Some(at)));
            }
            LeafState::Rewrite(b, why) => {
                identity = identity.or((*role == Role::Client).then(|| self::identity(&b)));
                obs.to_issue.push(why);
                obs.certificates.push(info(&b, None));
            }
            LeafState::Issue(why) => {
                obs.missing |= found.data.is_none();
                obs.to_issue.push(why);
            }
            LeafState::Foreign(problem) => obs.problems.push(problem.to_string()),
        }
    }
    Verdict {
        observation: obs,
        identity,
    }
}

fn invalid(problems: &[SecretProblem]) -> Verdict {
    Verdict {
        observation: TlsObservation {
            problems: problems.iter().map(ToString::to_string).collect(),
            ..TlsObservation::default()
        },
        identity: None,
    }
}

fn all_missing(leaves: &[(Role, ReadSecret<'_>); 3]) -> Verdict {
    let mut to_issue = vec!["the cluster's CA: not made yet".to_string()];
    to_issue.extend(
        leaves
            .iter()
            .map(|(_, f)| format!("Secret {}: not made yet", f.name)),
    );
    Verdict {
        observation: TlsObservation {
            to_issue,
            missing: true,
            ..TlsObservation::default()
        },
        identity: None,
    }
}
