//! How a backup reaches etcd: over plain HTTP, or over TLS with a client certificate,
//! verifying each member's server certificate against the CA by the DNS name the member
//! is reached by; and, when the operator knows a member's pod address, at that address
//! (as the cluster side dials members), still verified by the member's name.
//!
//! The scheme of every endpoint must agree with the dialer: a dialer with a client
//! certificate never dials an `http` endpoint (nothing goes to a TLS cluster's member
//! unencrypted), and one without never dials an `https` endpoint.
//!
//! What a dialer may reach is its [`Reach`]: the operator's backups dial only pods of the
//! EtcdBackup's namespace, found through the Kubernetes API ([`scope`](super::scope)).

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

use crate::etcd_api::{AddressSource, DialPlan, at_address, dial_plan};
use crate::tls::ClientIdentity;

use super::scope::{NamespaceView, OutsideNamespace, Refusal, host_of};

/// Why an endpoint was not dialed, or its connection failed (each says it without the
/// endpoint, which callers name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DialError {
    /// A plain `http` endpoint, while the backup uses TLS.
    #[error("plain http while the backup uses TLS: nothing is sent to it unencrypted")]
    PlaintextEndpoint(String),
    /// An `https` endpoint, while the backup has no client certificate.
    #[error(
        "https, but the backup has no client certificate (set clientTLSSecret): nothing is \
         sent to it"
    )]
    NoClientCertificate(String),
    /// The endpoint is outside what the dialer may reach.
    #[error("{0}")]
    Refused(Refusal),
    /// Its pods have no address yet.
    #[error("no pod it names has an address yet")]
    NoAddress,
    /// The connection failed.
    #[error("{message}")]
    Connect {
        /// The endpoint.
        endpoint: String,
        /// What the client said.
        message: String,
    },
}

/// What a dialer may reach.
#[derive(Clone)]
pub enum Reach {
    /// Any endpoint, by its name; members at their pods' addresses when a source knows
    /// them (`--allow-backup-endpoints-outside-namespace`, and the tests' loopback
    /// members).
    Anywhere(Option<AddressSource>),
    /// Only pods of one namespace, at their addresses (the operator's default).
    Namespace(Arc<NamespaceView>),
}

impl Default for Reach {
    fn default() -> Self {
        Reach::Anywhere(None)
    }
}

/// How a backup dials etcd endpoints (see the module documentation).
#[derive(Clone, Default)]
pub struct Dialer {
    identity: Option<ClientIdentity>,
    reach: Reach,
}

impl Dialer {
    /// Plain HTTP, every endpoint by its name.
    pub fn plain() -> Self {
        Dialer::default()
    }

    /// TLS, presenting `identity`'s certificate and trusting its CA bundle.
    pub fn tls(identity: ClientIdentity) -> Self {
        Dialer {
            identity: Some(identity),
            reach: Reach::default(),
        }
    }

    /// The same, dialing a member at the address `addresses` gives for the host of its
    /// URL (TLS still verifies it by that host name).
    pub fn with_addresses(self, addresses: AddressSource) -> Self {
        self.with_reach(Reach::Anywhere(Some(addresses)))
    }

    /// The same, reaching only what `reach` allows.
    pub fn with_reach(mut self, reach: Reach) -> Self {
        self.reach = reach;
        self
    }

    /// `Err` when `endpoint` is outside what this dialer may reach; `source_of` says what
    /// named it (`etcdEndpoints`, `the member list`).
    pub fn check(&self, endpoint: &str, source_of: &str) -> Result<(), OutsideNamespace> {
        match self.plan(endpoint) {
            // Not there yet (a member whose pod came after the namespace was listed): no
            // refusal, only an endpoint that does not answer.
            Err(DialError::Refused(Refusal::NotFound { .. })) => Ok(()),
            Err(DialError::Refused(refusal)) => Err(OutsideNamespace {
                source_of: source_of.to_string(),
                endpoint: endpoint.to_string(),
                refusal,
            }),
            _ => Ok(()),
        }
    }

    /// Whether endpoints are dialed over TLS.
    pub fn uses_tls(&self) -> bool {
        self.identity.is_some()
    }

    /// The URL dialed for `endpoint`, and the name its certificate is verified by when
    /// that is not the URL's host.
    fn plan(&self, endpoint: &str) -> Result<DialPlan, DialError> {
        let endpoints = [endpoint.to_string()];
        match &self.reach {
            Reach::Anywhere(Some(addresses)) => Ok(dial_plan(&endpoints, addresses.as_ref())),
            Reach::Anywhere(None) => Ok(DialPlan::by_name(&endpoints)),
            Reach::Namespace(view) => {
                let refused = || Refusal::NotInCluster {
                    namespace: view.namespace.clone(),
                };
                let host = host_of(endpoint).ok_or_else(|| DialError::Refused(refused()))?;
                let addresses = view.resolve(&host).map_err(DialError::Refused)?;
                if addresses.is_empty() {
                    return Err(DialError::NoAddress);
                }
                let urls = addresses
                    .iter()
                    .map(|ip| at_address(endpoint, *ip))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| DialError::Refused(refused()))?;
                Ok(DialPlan {
                    urls,
                    name: Some(host),
                })
            }
        }
    }

    /// Checks `endpoint`'s scheme against the dialer, and the options to dial it with.
    fn options(&self, endpoint: &str, name: Option<&str>) -> Result<ConnectOptions, DialError> {
        let secure = endpoint.starts_with("https://");
        let options = ConnectOptions::new();
        match (&self.identity, secure) {
            (None, false) => Ok(options),
            (None, true) => Err(DialError::NoClientCertificate(endpoint.to_string())),
            (Some(_), false) => Err(DialError::PlaintextEndpoint(endpoint.to_string())),
            (Some(id), true) => {
                let tls = TlsOptions::new()
                    .ca_certificate(Certificate::from_pem(&id.ca_pem))
                    .identity(Identity::from_pem(&id.cert_pem, &id.key_pem));
                Ok(options.with_tls(match name {
                    Some(name) => tls.domain_name(name),
                    None => tls,
                }))
            }
        }
    }

    /// A client of `endpoint` alone, connected within `timeout`. No request timeout is
    /// set: it would bound the whole snapshot stream (callers bound each call instead).
    pub async fn connect(&self, endpoint: &str, timeout: Duration) -> Result<Client, DialError> {
        let plan = self.plan(endpoint)?;
        let options = self
            .options(endpoint, plan.name.as_deref())?
            .with_connect_timeout(timeout);
        let failed = |message: String| DialError::Connect {
            endpoint: endpoint.to_string(),
            message,
        };
        match tokio::time::timeout(timeout, Client::connect(&plan.urls, Some(options))).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(failed(crate::etcd_api::describe(&e))),
            Err(_) => Err(failed(format!("connecting took over {timeout:?}"))),
        }
    }
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer")
            .field("identity", &self.identity)
            .field(
                "reach",
                &match &self.reach {
                    Reach::Anywhere(addresses) => {
                        format!("anywhere, by address: {}", addresses.is_some())
                    }
                    Reach::Namespace(view) => format!("namespace {}", view.namespace),
                },
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::sync::Arc;

    use super::*;
    use crate::etcd_api::Route;

    fn identity() -> ClientIdentity {
        ClientIdentity {
            ca_pem: b"ca".to_vec(),
            cert_pem: b"cert".to_vec(),
            key_pem: b"key".to_vec(),
        }
    }

    #[tokio::test]
    async fn a_tls_dialer_never_dials_a_plain_http_endpoint() {
        let err = Dialer::tls(identity())
            .connect("http://127.0.0.1:1", Duration::from_millis(200))
            .await
            .err()
            .expect("refused before dialing");
        assert_eq!(
            err,
            DialError::PlaintextEndpoint("http://127.0.0.1:1".into())
        );
        assert!(err.to_string().contains("unencrypted"), "{err}");
    }

    #[tokio::test]
    async fn a_dialer_without_a_certificate_never_dials_an_https_endpoint() {
        let err = Dialer::plain()
            .connect("https://127.0.0.1:1", Duration::from_millis(200))
            .await
            .err()
            .expect("refused before dialing");
        assert_eq!(
            err,
            DialError::NoClientCertificate("https://127.0.0.1:1".into())
        );
        assert!(err.to_string().contains("clientTLSSecret"), "{err}");
    }

    #[test]
    fn a_member_whose_pod_address_is_known_is_dialed_there_and_verified_by_its_name() {
        let addresses: AddressSource = Arc::new(|host: &str| match host {
            "a.demo.prod.svc" => Route::Address(IpAddr::from([10, 244, 1, 5])),
            _ => Route::ByName,
        });
        let dialer = Dialer::tls(identity()).with_addresses(addresses);
        let plan = dialer.plan("https://a.demo.prod.svc:2379").unwrap();
        assert_eq!(plan.urls, ["https://10.244.1.5:2379"]);
        assert_eq!(plan.name.as_deref(), Some("a.demo.prod.svc"));
        // The client Service is not a member: left to DNS, verified by its own name.
        let service = dialer.plan("https://demo-client.prod.svc:2379").unwrap();
        assert_eq!(service.urls, ["https://demo-client.prod.svc:2379"]);
        assert_eq!(service.name, None);
    }

    #[test]
    fn the_dialers_debug_form_never_shows_the_key() {
        let text = format!("{:?}", Dialer::tls(identity()));
        assert!(!text.contains("key"), "{text}");
        assert!(text.contains("fingerprint"), "{text}");
    }
}
