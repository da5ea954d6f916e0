//! What running the operator can fail with: the crate's one error type, reported by `main`.

use std::net::SocketAddr;

/// Why [`crate::controller::run`] stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No Kubernetes configuration was found (in-cluster or `KUBECONFIG`).
    #[error("no Kubernetes configuration (in-cluster or KUBECONFIG): {0}")]
    KubeConfig(#[source] kube::config::InferConfigError),
    /// The Kubernetes client could not be built from the configuration.
    #[error("building the Kubernetes client: {0}")]
    KubeClient(#[source] kube::Error),
    /// An informer cache stopped before it synced.
    #[error("the {cache} cache stopped before it synced: {source}")]
    CacheSync {
        /// Which cache.
        cache: &'static str,
        /// Why.
        source: kube::runtime::reflector::store::WriterDropped,
    },
    /// The HTTPS server could not listen.
    #[error("cannot serve HTTPS on {address}: {source}")]
    Listen {
        /// The address asked for.
        address: SocketAddr,
        /// Why.
        source: crate::http::ServeError,
    },
    /// The SIGTERM handler could not be installed.
    #[error("installing the SIGTERM handler: {0}")]
    Signals(#[source] std::io::Error),
    /// The leader Lease was acquired after the fence had closed: too late to act on it.
    #[error("acquired the leader lease too late to act on it; exiting")]
    LeaseTooLate,
    /// This replica stopped leading; a fresh replica takes over.
    #[error("stopped leading ({0}); exiting so a fresh replica takes over")]
    StoppedLeading(String),
}

/// `head`, then every cause of `err` that says something new: error chains often repeat
/// their causes, or say only "transport error" (tonic) or "client error (Connect)"
/// (kube-rs) at the top.
pub(crate) fn with_causes(head: &str, err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = head.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        let says_something = !cause_text.is_empty() && cause_text != "transport error";
        if says_something && !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
