//! TLS as the lifecycle is told it: the mode the spec asks for and each pod runs, the
//! certificates the adapter found (as verdicts), and the steps of a CA rotation. A leaf
//! of the lifecycle's vocabulary; the decisions are in `tls.rs`.

use serde::Serialize;

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
    /// Digest of the CA bundles a member started now would trust (`peer-ca.crt` and
    /// `server-ca.crt` of the Secrets it mounts), when they can be read. etcd reads these
    /// files only when it starts, so a member whose pod records another digest still
    /// trusts the bundle it started with.
    pub trust: Option<String>,
    /// Where a CA rotation stands (`spec.TLS.auto` with the operator's own CA).
    pub rotation: CaRotationView,
    /// Time from the observation to the next certificate event the adapter knows of (a
    /// leaf's renewal, the CA's renewal point, the end of a rotation's propagation wait),
    /// when one lies ahead: a cluster that is otherwise left alone is looked at then.
    #[serde(skip)]
    pub next_event_in: Option<std::time::Duration>,
}

/// The steps of a CA rotation, in order. Each begins only when every member runs with
/// what the previous one gave it, and is recorded in the CA Secret, so an operator
/// restarted in the middle resumes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum CaRotationStep {
    /// A new CA was made and added to every trust bundle (old + new); leaf certificates
    /// are still issued by the old CA. Members restart onto the new bundle one at a time
    /// (etcd does not reload its trusted CA files).
    TrustNewCa,
    /// Leaf certificates are re-issued by the new CA; the bundle still holds both. etcd
    /// reads certificates for each new connection: no restart.
    ReissueLeaves,
    /// The old CA is dropped from every bundle; members restart onto it one at a time.
    DropOldCa,
}

impl CaRotationStep {
    /// The step's name, as the CA Secret records it and the status shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            CaRotationStep::TrustNewCa => "TrustNewCA",
            CaRotationStep::ReissueLeaves => "ReissueLeaves",
            CaRotationStep::DropOldCa => "DropOldCA",
        }
    }

    /// The step named `name` (as [`CaRotationStep::as_str`] writes it).
    pub fn parse(name: &str) -> Option<CaRotationStep> {
        [
            CaRotationStep::TrustNewCa,
            CaRotationStep::ReissueLeaves,
            CaRotationStep::DropOldCa,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }

    /// The step after `step` (`None`: no rotation); the last one is followed by none.
    pub fn after(step: Option<CaRotationStep>) -> Option<CaRotationStep> {
        match step {
            None => Some(CaRotationStep::TrustNewCa),
            Some(CaRotationStep::TrustNewCa) => Some(CaRotationStep::ReissueLeaves),
            Some(CaRotationStep::ReissueLeaves) => Some(CaRotationStep::DropOldCa),
            Some(CaRotationStep::DropOldCa) => None,
        }
    }
}

/// A CA rotation as the adapter found it in the CA Secret and the EtcdCluster.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct CaRotationView {
    /// The step in progress; `None`: no rotation.
    pub step: Option<CaRotationStep>,
    /// Why a rotation should start (the `rotate-ca` annotation has a new value, or the CA
    /// reached its renewal point), while none is in progress.
    pub due: Option<String>,
    /// In [`CaRotationStep::ReissueLeaves`]: the re-issued certificates have had time to
    /// reach every member's mounted Secret (a kubelet updates them within about a
    /// minute), so no member presents one from the old CA any more.
    pub propagated: bool,
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
