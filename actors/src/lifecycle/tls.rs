//! TLS as the lifecycle sees it: which mode the spec asks for, which mode each member pod
//! runs, and what the adapter found of the cluster's certificates. Certificates themselves
//! (parsing, checking, issuing) are the adapter's business; here they are verdicts.

use serde::Serialize;

use super::{Action, Decision, DesiredCluster, Observation, Phase, Reason, Why};

/// How a cluster's peer and client traffic is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
pub enum TlsMode {
    /// Plain HTTP (no `spec.TLS`).
    #[default]
    Off,
    /// Certificates from the user's Secrets (`spec.TLS.static`, CoreOS).
    Static,
    /// Certificates the operator makes and renews (`spec.TLS.auto`).
    Auto,
}

impl TlsMode {
    /// Whether members speak TLS (https URLs, client certificates).
    pub fn enabled(self) -> bool {
        self != TlsMode::Off
    }

    /// The mode's name, as pods are annotated with it and the status shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Off => "Off",
            TlsMode::Static => "Static",
            TlsMode::Auto => "Auto",
        }
    }

    /// The mode named `name` (as [`TlsMode::as_str`] writes it).
    pub fn parse(name: &str) -> Option<TlsMode> {
        [TlsMode::Off, TlsMode::Static, TlsMode::Auto]
            .into_iter()
            .find(|m| m.as_str() == name)
    }

    /// `https` with TLS, else `http`.
    pub fn scheme(self) -> &'static str {
        if self.enabled() { "https" } else { "http" }
    }
}

/// One certificate in use, for the status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CertificateInfo {
    /// The Secret holding it.
    pub secret: String,
    /// Its key in the Secret (`peer.crt`, `server.crt`, `etcd-client.crt`, `tls.crt`).
    pub key: String,
    /// When it expires (RFC 3339).
    pub not_after: String,
    /// When the operator renews it (RFC 3339); `None` for certificates it does not renew
    /// (the user's, and CAs).
    pub renew_at: Option<String>,
}

/// What the adapter found of a cluster's certificates on one tick.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct TlsObservation {
    /// Certificates that are in use and valid.
    pub certificates: Vec<CertificateInfo>,
    /// Why the certificates cannot be used, each naming the Secret, the key and the
    /// problem. Not empty: no member may be created or changed.
    pub problems: Vec<String>,
    /// Operator-managed certificates to issue now (missing, invalid, or due for renewal),
    /// each with why, for people. Not empty: the operator issues them before anything else.
    pub to_issue: Vec<String>,
    /// Whether some certificate a member pod needs does not exist yet (so no pod may be
    /// created until it is issued), as opposed to one only due for renewal.
    pub missing: bool,
}

impl TlsObservation {
    /// The earliest planned renewal, if any.
    pub fn next_rotation(&self) -> Option<&str> {
        self.certificates
            .iter()
            .filter_map(|c| c.renew_at.as_deref())
            .min()
    }
}

/// Refuses TLS that cannot be used: pods running another mode than the spec asks for
/// (turning TLS on or off, or swapping static and auto, changes every peer URL or the CA
/// the members trust: a migration this operator does not do), and certificates the
/// adapter found invalid. Nothing may be created or changed then: a member created without
/// them would run unencrypted, or not at all.
pub(super) fn check(obs: &Observation, spec: &DesiredCluster) -> Result<(), Why> {
    let others: Vec<String> = obs
        .pods
        .iter()
        .filter(|p| p.tls != spec.tls)
        .map(|p| format!("{} ({})", p.name, p.tls.as_str()))
        .collect();
    if !others.is_empty() {
        return Err(Why::new(
            Reason::TlsChangeRefused,
            format!(
                "spec.TLS asks for TLS mode {} but member pods run another: {}; changing it \
                 on an existing cluster needs every member's peer URLs or trusted CA \
                 migrated, which this operator does not do: set spec.TLS back, or create a \
                 new cluster and move the data",
                spec.tls.as_str(),
                others.join(", ")
            ),
        ));
    }
    if spec.tls.enabled() && !obs.tls.problems.is_empty() {
        return Err(Why::new(
            Reason::TlsSecretInvalid,
            format!(
                "{}; no member is created or changed until the Secrets are fixed",
                obs.tls.problems.join("; ")
            ),
        ));
    }
    Ok(())
}

/// Puts the issuing of operator-managed certificates that are missing or due first in a
/// decision that may act (not blocked, not paused): the pods it creates mount them.
pub(super) fn with_certificates(
    mut decision: Decision,
    obs: &Observation,
    spec: &DesiredCluster,
) -> Decision {
    let acting = !matches!(decision.state.phase, Phase::Blocked { .. } | Phase::Paused);
    if spec.tls != TlsMode::Auto || obs.tls.to_issue.is_empty() || !acting {
        return decision;
    }
    if decision.actions.is_empty() {
        decision.why = Why::new(Reason::IssuingCertificates, obs.tls.to_issue.join("; "));
    }
    decision.actions.insert(0, Action::IssueCertificates);
    decision
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_round_trip_through_their_names_and_pick_their_scheme() {
        for mode in [TlsMode::Off, TlsMode::Static, TlsMode::Auto] {
            assert_eq!(TlsMode::parse(mode.as_str()), Some(mode));
        }
        assert_eq!(TlsMode::parse("on"), None);
        assert_eq!(TlsMode::Off.scheme(), "http");
        assert_eq!(TlsMode::Static.scheme(), "https");
        assert_eq!(TlsMode::Auto.scheme(), "https");
    }

    #[test]
    fn the_next_rotation_is_the_earliest_renewal() {
        let cert = |secret: &str, renew: Option<&str>| CertificateInfo {
            secret: secret.into(),
            key: "peer.crt".into(),
            not_after: "2030-01-01T00:00:00Z".into(),
            renew_at: renew.map(Into::into),
        };
        let obs = TlsObservation {
            certificates: vec![
                cert("ca", None),
                cert("peer", Some("2029-05-01T00:00:00Z")),
                cert("server", Some("2029-04-01T00:00:00Z")),
            ],
            ..TlsObservation::default()
        };
        assert_eq!(obs.next_rotation(), Some("2029-04-01T00:00:00Z"));
        assert_eq!(TlsObservation::default().next_rotation(), None);
    }
}
