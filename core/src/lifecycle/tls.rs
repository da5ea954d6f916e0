//! The lifecycle's TLS rules: whether TLS as observed blocks the cluster, which pods are
//! stale for the CA bundles they trust, certificates issued before a tick's step, and the
//! next step of a CA rotation. What they read (modes, certificate verdicts, rotation
//! steps) is in `certificates.rs`.

use super::{Action, Decision, DesiredCluster, Observation, Phase, PodView, Reason, Why};
use super::{CaRotationStep, TlsMode};

/// The separator between the pod template digest and the trust digest in a pod's
/// template annotation.
const TRUST_SEPARATOR: char = '.';

/// What a pod's template annotation records: the digest of the spec it was built from,
/// and with TLS the digest of the CA bundles it trusts (see [`TlsObservation::trust`]).
pub fn template_with_trust(template: &str, trust: Option<&str>) -> String {
    match trust {
        Some(trust) => format!("{template}{TRUST_SEPARATOR}{trust}"),
        None => template.to_string(),
    }
}

/// The two parts of a pod's template annotation.
fn split_template(annotation: &str) -> (&str, Option<&str>) {
    match annotation.split_once(TRUST_SEPARATOR) {
        Some((template, trust)) => (template, Some(trust)),
        None => (annotation, None),
    }
}

/// Whether `pod` runs another pod template than the spec's, or (with TLS) trusts another
/// CA bundle than its Secrets hold now. Pods made by operators that did not record their
/// template are left alone; a TLS pod that did not record its trust counts as trusting
/// another bundle (it may), so a rotation never proceeds past it.
pub fn is_stale(pod: &PodView, spec: &DesiredCluster, obs: &Observation) -> bool {
    let Some(annotation) = &pod.pod_template else {
        return false;
    };
    let (template, _) = split_template(annotation);
    template != spec.pod_template || trusts_another_bundle(pod, spec, obs)
}

/// Whether `pod` (with TLS, the Secrets' trust known) started with another CA bundle
/// than they hold now, or did not record which.
pub(super) fn trusts_another_bundle(
    pod: &PodView,
    spec: &DesiredCluster,
    obs: &Observation,
) -> bool {
    let Some(current) = obs.tls.trust.as_deref().filter(|_| spec.tls.enabled()) else {
        return false;
    };
    let Some(annotation) = pod.pod_template.as_deref() else {
        return false;
    };
    split_template(annotation).1 != Some(current)
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

/// What a CA rotation asks for on a tick where every member is healthy and runs the
/// current pod template and trust bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RotationStep {
    /// Move the rotation from one step to the next (`None`: no rotation).
    Advance {
        /// The step the CA Secret must be at.
        from: Option<CaRotationStep>,
        /// The step to record.
        to: Option<CaRotationStep>,
        /// Why, for people.
        why: Why,
    },
    /// Wait: the current step has not reached every member yet.
    Wait(Why),
}

/// The next move of a CA rotation, if one is due or in progress. Called only when every
/// member is healthy and none runs an older pod template or trust bundle (the rolling
/// restart found nothing to do); it still checks every live pod itself, so a step never
/// begins while one runs with what the step before it replaced, and steps go strictly in
/// order, one per call.
pub(super) fn rotation(obs: &Observation, spec: &DesiredCluster) -> Option<RotationStep> {
    let view = &obs.tls.rotation;
    if spec.tls != TlsMode::Auto || (view.step.is_none() && view.due.is_none()) {
        return None;
    }
    let wait = |message: String| Some(RotationStep::Wait(Why::new(Reason::RotatingCa, message)));
    let doing = view
        .step
        .map_or("starting a CA rotation", CaRotationStep::as_str);
    if !obs.tls.to_issue.is_empty() {
        return wait(format!(
            "CA rotation ({doing}): writing the certificates of this step first"
        ));
    }
    let Some(trust) = obs.tls.trust.as_deref() else {
        return wait(format!(
            "CA rotation ({doing}): the trust bundles in the Secrets cannot be read"
        ));
    };
    let behind: Vec<&str> = obs
        .pods
        .iter()
        .filter(|p| !p.is_dead())
        .filter(|p| p.pod_template.as_deref().map(|t| split_template(t).1) != Some(Some(trust)))
        .map(|p| p.name.as_str())
        .collect();
    if !behind.is_empty() {
        return wait(format!(
            "CA rotation ({doing}): members {} do not run the current trust bundle yet; \
             the next step waits for every member",
            behind.join(", ")
        ));
    }
    let advance = |message: &str| {
        Some(RotationStep::Advance {
            from: view.step,
            to: CaRotationStep::after(view.step),
            why: Why::new(Reason::RotatingCa, message.to_string()),
        })
    };
    match view.step {
        None => advance(&format!(
            "starting a CA rotation ({}): a new CA is made and added to every trust \
             bundle, and members restart onto it one at a time",
            view.due.as_deref().unwrap_or_default()
        )),
        Some(CaRotationStep::TrustNewCa) => advance(
            "every member trusts the old and the new CA: re-issuing the certificates from \
             the new CA (no restart: etcd reads them for each new connection)",
        ),
        Some(CaRotationStep::ReissueLeaves) if !view.propagated => wait(
            "CA rotation (ReissueLeaves): waiting for the re-issued certificates to reach \
             every member's mounted Secret before the old CA is dropped"
                .into(),
        ),
        Some(CaRotationStep::ReissueLeaves) => advance(
            "every certificate is issued by the new CA: dropping the old CA from every \
             trust bundle, and members restart onto it one at a time",
        ),
        Some(CaRotationStep::DropOldCa) => {
            advance("every member trusts the new CA only: the CA rotation is complete")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::{CertificateInfo, TlsObservation};

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
