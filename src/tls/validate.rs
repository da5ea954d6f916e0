//! The checks a cluster's certificates pass before any member uses them: every Secret
//! and key there, certificates and keys that parse, within their validity, keys matching,
//! the names each role needs covered, the right key usage, and signatures by the CAs the
//! other side trusts. Every problem found is reported, each naming its Secret and key.

use super::error::{Problem, SecretProblem};
use super::layout::{CA_CERT_KEY, CA_KEY_KEY, Role};
use super::names::{ClusterNames, covers};
use super::pem::{CertFacts, certificates, key_spki, rfc3339, signed_by};
use crate::secret_data::SecretData;

/// One role's Secret as read: its name, and its keys (`None`: it does not exist).
#[derive(Debug, Clone, Copy)]
pub struct Bundle<'a> {
    /// Which certificate it holds.
    pub role: Role,
    /// The Secret's name.
    pub secret: &'a str,
    /// Its keys, when it exists.
    pub data: Option<&'a SecretData>,
}

/// A certificate, key and CA bundle that passed their own checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedBundle {
    /// Which certificate it is.
    pub role: Role,
    /// The Secret it came from.
    pub secret: String,
    /// Start of the certificate's validity (Unix seconds).
    pub not_before: i64,
    /// End of its validity (Unix seconds).
    pub not_after: i64,
    /// The certificate (PEM, as in the Secret).
    pub cert_pem: Vec<u8>,
    /// Its private key (PEM).
    pub key_pem: Vec<u8>,
    /// The CA bundle (PEM).
    pub ca_pem: Vec<u8>,
    pub(crate) cert: CertFacts,
    pub(crate) cas: Vec<CertFacts>,
}

/// Checks one role's Secret on its own at `now` (Unix seconds): everything but the
/// signatures across Secrets ([`check_trust`]).
pub fn check_bundle(
    bundle: Bundle<'_>,
    names: &ClusterNames,
    now: i64,
) -> Result<CheckedBundle, Vec<SecretProblem>> {
    let role = bundle.role;
    let secret = bundle.secret;
    let Some(data) = bundle.data else {
        return Err(vec![SecretProblem::secret(secret, Problem::SecretMissing)]);
    };
    let keys = [role.cert_key(), role.key_key(), role.ca_key()];
    let missing: Vec<SecretProblem> = keys
        .iter()
        .filter(|k| !data.contains_key(**k))
        .map(|k| SecretProblem::key(secret, k, Problem::KeyMissing))
        .collect();
    if !missing.is_empty() {
        return Err(missing);
    }
    let (cert_pem, key_pem, ca_pem) = (&data[keys[0]], &data[keys[1]], &data[keys[2]]);
    let at = |key: &str, problem| SecretProblem::key(secret, key, problem);
    let certs = certificates(cert_pem).map_err(|e| vec![at(keys[0], Problem::NotACertificate(e))]);
    let spki = key_spki(key_pem).map_err(|e| vec![at(keys[1], Problem::NotAKey(e))]);
    let cas = certificates(ca_pem).map_err(|e| vec![at(keys[2], Problem::NotACertificate(e))]);
    let (certs, spki, cas) = match (certs, spki, cas) {
        (Ok(c), Ok(s), Ok(a)) => (c, s, a),
        (c, s, a) => {
            let problems = [c.err(), s.err(), a.err()];
            return Err(problems.into_iter().flatten().flatten().collect());
        }
    };
    let cert = certs[0].clone();
    let mut problems = leaf_problems(role, &cert, names, now);
    if cert.spki != spki {
        problems.push(Problem::KeyMismatch(keys[0].to_string()));
    }
    let mut found: Vec<SecretProblem> = problems.into_iter().map(|p| at(keys[0], p)).collect();
    if let Some(p) = bundle_problem(&cas, now) {
        found.push(at(keys[2], p));
    }
    if !found.is_empty() {
        return Err(found);
    }
    Ok(CheckedBundle {
        role,
        secret: secret.to_string(),
        not_before: cert.not_before,
        not_after: cert.not_after,
        cert_pem: cert_pem.clone(),
        key_pem: key_pem.clone(),
        ca_pem: ca_pem.clone(),
        cert,
        cas,
    })
}

/// What is wrong with a role's own certificate at `now`.
fn leaf_problems(role: Role, cert: &CertFacts, names: &ClusterNames, now: i64) -> Vec<Problem> {
    let mut problems = validity_problems(cert, now);
    for (name, why) in required_names(role, names) {
        if !cert.dns_names.iter().any(|n| covers(n, &name)) {
            problems.push(Problem::NameNotCovered { name, why });
        }
    }
    let (server, client) = cert.usage;
    let needs = match role {
        Role::Peer => [
            (server, "TLS server authentication"),
            (client, "TLS client authentication"),
        ]
        .to_vec(),
        Role::Server => vec![(server, "TLS server authentication")],
        Role::Client => vec![(client, "TLS client authentication")],
    };
    problems.extend(
        needs
            .into_iter()
            .filter(|(ok, _)| !ok)
            .map(|(_, what)| Problem::WrongUsage(what)),
    );
    problems
}

fn validity_problems(cert: &CertFacts, now: i64) -> Vec<Problem> {
    if now < cert.not_before {
        vec![Problem::NotYetValid(rfc3339(cert.not_before))]
    } else if now > cert.not_after {
        vec![Problem::Expired(rfc3339(cert.not_after))]
    } else {
        Vec::new()
    }
}

/// A CA bundle with no certificate valid at `now`.
fn bundle_problem(cas: &[CertFacts], now: i64) -> Option<Problem> {
    if cas.iter().any(|ca| validity_problems(ca, now).is_empty()) {
        return None;
    }
    cas.iter().flat_map(|ca| validity_problems(ca, now)).next()
}

/// The names a role's certificate must cover, each with who needs it.
fn required_names(role: Role, names: &ClusterNames) -> Vec<(String, &'static str)> {
    let members = "members are reached by <member>.<cluster>.<namespace>.svc: use a wildcard";
    match role {
        Role::Peer => vec![
            (names.sample_member(), members),
            (
                names.sample_member_fqdn(),
                "etcd checks a peer's certificate against the name its address resolves back to",
            ),
        ],
        Role::Server => vec![
            (names.sample_member(), members),
            (
                "localhost".into(),
                "the members' readiness probe connects to it",
            ),
        ],
        Role::Client => Vec::new(),
    }
}

/// Checks the signatures across Secrets: each peer certificate by the peer CA, the
/// members' server certificate by the CA the operator trusts (`etcd-client-ca.crt`), the
/// operator's client certificate by the CA the members trust for clients
/// (`server-ca.crt`).
pub fn check_trust(
    peer: &CheckedBundle,
    server: &CheckedBundle,
    client: &CheckedBundle,
) -> Vec<SecretProblem> {
    [(peer, peer), (server, client), (client, server)]
        .into_iter()
        .filter(|(leaf, trust)| !trust.cas.iter().any(|ca| signed_by(&leaf.cert, ca)))
        .map(|(leaf, trust)| {
            let by = format!("Secret {} key {}", trust.secret, trust.role.ca_key());
            SecretProblem::key(&leaf.secret, leaf.role.cert_key(), Problem::NotSignedBy(by))
        })
        .collect()
}

/// A CA that passed its checks: its certificate and key (PEM) and when it expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedCa {
    /// The Secret it came from.
    pub secret: String,
    /// The CA certificate.
    pub cert_pem: Vec<u8>,
    /// Its private key.
    pub key_pem: Vec<u8>,
    /// Start of its validity (Unix seconds).
    pub not_before: i64,
    /// End of its validity (Unix seconds).
    pub not_after: i64,
}

/// Checks a CA Secret (`tls.crt`, `tls.key`) at `now`: present, a CA certificate within
/// its validity, the key its own.
pub fn check_ca(
    secret: &str,
    data: Option<&SecretData>,
    now: i64,
) -> Result<CheckedCa, Vec<SecretProblem>> {
    let Some(data) = data else {
        return Err(vec![SecretProblem::secret(secret, Problem::SecretMissing)]);
    };
    check_ca_keys(secret, data, (CA_CERT_KEY, CA_KEY_KEY), now)
}

/// Checks the CA under the keys `(cert_key, key_key)` of a CA Secret's `data` at `now`.
pub(crate) fn check_ca_keys(
    secret: &str,
    data: &SecretData,
    (cert_key, key_key): (&str, &str),
    now: i64,
) -> Result<CheckedCa, Vec<SecretProblem>> {
    let at = |key: &str, problem| vec![SecretProblem::key(secret, key, problem)];
    let cert_pem = data
        .get(cert_key)
        .ok_or_else(|| at(cert_key, Problem::KeyMissing))?;
    let key_pem = data
        .get(key_key)
        .ok_or_else(|| at(key_key, Problem::KeyMissing))?;
    let cert = certificates(cert_pem)
        .map_err(|e| at(cert_key, Problem::NotACertificate(e)))?
        .remove(0);
    let spki = key_spki(key_pem).map_err(|e| at(key_key, Problem::NotAKey(e)))?;
    let mut problems = validity_problems(&cert, now);
    if cert.ca != Some(true) {
        problems.push(Problem::NotACa);
    }
    if cert.spki != spki {
        problems.push(Problem::KeyMismatch(cert_key.into()));
    }
    if let Some(problem) = problems.into_iter().next() {
        return Err(at(cert_key, problem));
    }
    Ok(CheckedCa {
        secret: secret.to_string(),
        cert_pem: cert_pem.clone(),
        key_pem: key_pem.clone(),
        not_before: cert.not_before,
        not_after: cert.not_after,
    })
}
