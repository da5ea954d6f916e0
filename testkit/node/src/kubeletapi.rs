//! The kubelet API the API server calls for `kubectl logs`: HTTPS on the node's address and
//! the port its Node object advertises, with a serving certificate signed by the cluster
//! CA (see [`crate::servingcert`]). A client must present a certificate signed by that CA;
//! its common name and organizations are the user and groups a SubjectAccessReview asks
//! about, as the kubelet's webhook authorization does (`get nodes/proxy` on this node for
//! `/containerLogs`). Served: `GET /containerLogs/{namespace}/{pod}/{container}` and
//! `GET /healthz`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use x509_parser::prelude::FromDer;

use crate::crilog::LogQuery;
use crate::ctx::NodeCtx;
use crate::log::event;
use crate::logserve::{self, LogError};
use crate::servingcert::ServingCert;

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Who a client certificate names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// The common name.
    pub user: String,
    /// The organizations.
    pub groups: Vec<String>,
}

/// The user and groups of a DER client certificate.
pub fn identity(der: &[u8]) -> Option<Identity> {
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(der).ok()?;
    let subject = cert.subject();
    let user = subject
        .iter_common_name()
        .find_map(|a| a.as_str().ok())?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok().map(str::to_string))
        .collect();
    Some(Identity { user, groups })
}

/// What a request asks for, in the kubelet's authorization terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// A container's log.
    ContainerLogs {
        /// Namespace.
        namespace: String,
        /// Pod.
        pod: String,
        /// Container.
        container: String,
    },
    /// The health check.
    Healthz,
}

/// The route of a path, if it is one the node serves.
pub fn route(path: &str) -> Option<Route> {
    if path == "/healthz" {
        return Some(Route::Healthz);
    }
    let rest = path.strip_prefix("/containerLogs/")?;
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        [ns, pod, container] if [ns, pod, container].iter().all(|p| !p.is_empty()) => {
            Some(Route::ContainerLogs {
                namespace: ns.to_string(),
                pod: pod.to_string(),
                container: container.to_string(),
            })
        }
        _ => None,
    }
}

/// The SubjectAccessReview the kubelet makes for a request: `get nodes/proxy` on the node
/// for a GET (the kubelet's verb mapping), `nodes/proxy` being its subresource for every
/// path but a few (none of which this node serves).
pub fn access_review(who: &Identity, method: &Method, node: &str) -> SubjectAccessReview {
    let verb = match *method {
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "get",
    };
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(who.user.clone()),
            groups: Some(who.groups.clone()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.to_string()),
                version: Some("v1".to_string()),
                resource: Some("nodes".to_string()),
                subresource: Some("proxy".to_string()),
                name: Some(node.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The TLS configuration: the serving certificate, and client certificates required and
/// verified against `client_cas` (DER).
pub fn tls_config(
    cert: &ServingCert,
    client_cas: &[Vec<u8>],
) -> anyhow::Result<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for der in client_cas {
        roots.add(CertificateDer::from(der.clone()))?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()?;
    let chain =
        CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes())?;
    Ok(rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)?)
}

fn text(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    let mut body = message.into();
    body.push('\n');
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed_unsync());
    *response.status_mut() = status;
    response
}

/// Serves the kubelet API on `address` until `shutdown`.
pub async fn serve(
    ctx: Arc<NodeCtx>,
    address: SocketAddr,
    config: rustls::ServerConfig,
    shutdown: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = TcpListener::bind(address).await?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    event!("kubelet API (container logs) at https://{address}");
    Ok(tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let Ok((stream, _)) = accepted else { continue };
            let (ctx, acceptor) = (ctx.clone(), acceptor.clone());
            tokio::spawn(async move { connection(ctx, acceptor, stream).await });
        }
    }))
}

async fn connection(
    ctx: Arc<NodeCtx>,
    acceptor: tokio_rustls::TlsAcceptor,
    stream: tokio::net::TcpStream,
) {
    let Ok(tls) = acceptor.accept(stream).await else {
        return;
    };
    let who = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .and_then(|der| identity(der.as_ref()));
    let service = hyper::service::service_fn(move |req| {
        let (ctx, who) = (ctx.clone(), who.clone());
        async move { Ok::<_, Infallible>(handle(&ctx, who, req).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(tls), service)
        .await;
}

async fn allowed(ctx: &NodeCtx, who: &Identity, method: &Method) -> Result<bool, String> {
    let api: Api<SubjectAccessReview> = Api::all(ctx.client.clone());
    let review = api
        .create(
            &PostParams::default(),
            &access_review(who, method, &ctx.node_name),
        )
        .await
        .map_err(|e| format!("authorization check failed: {e}"))?;
    Ok(review.status.is_some_and(|s| s.allowed))
}

async fn handle(ctx: &NodeCtx, who: Option<Identity>, req: Request<Incoming>) -> Response<Body> {
    let Some(who) = who else {
        return text(StatusCode::UNAUTHORIZED, "Unauthorized");
    };
    match allowed(ctx, &who, req.method()).await {
        Ok(true) => {}
        Ok(false) => {
            return text(
                StatusCode::FORBIDDEN,
                format!(
                    "Forbidden (user={}, verb=get, resource=nodes, subresource=proxy)",
                    who.user
                ),
            );
        }
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
    if req.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET is served");
    }
    match route(req.uri().path()) {
        Some(Route::Healthz) => text(StatusCode::OK, "ok"),
        Some(Route::ContainerLogs {
            namespace,
            pod,
            container,
        }) => {
            let query = req.uri().query().unwrap_or_default();
            let restarts = restart_count(ctx, &namespace, &pod, &container).await;
            container_logs(ctx, &namespace, &pod, &container, query, restarts)
        }
        None => text(StatusCode::NOT_FOUND, "404 page not found"),
    }
}

/// The container's restart count as its status reports it (which process is current).
async fn restart_count(ctx: &NodeCtx, namespace: &str, pod: &str, container: &str) -> Option<i64> {
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let status = api.get_opt(pod).await.ok()??.status?;
    status
        .container_statuses
        .into_iter()
        .chain(status.init_container_statuses)
        .flatten()
        .find(|s| s.name == container)
        .map(|s| i64::from(s.restart_count))
}

fn container_logs(
    ctx: &NodeCtx,
    namespace: &str,
    pod: &str,
    container: &str,
    query: &str,
    restarts: Option<i64>,
) -> Response<Body> {
    let query = match LogQuery::parse(query, jiff::Timestamp::now()) {
        Ok(q) => q,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    let path = match logserve::locate(
        &ctx.state,
        namespace,
        pod,
        container,
        query.previous,
        restarts,
    ) {
        Ok(path) => path,
        Err(e @ LogError::NotFound(_)) => return text(StatusCode::NOT_FOUND, e.to_string()),
        Err(e @ LogError::BadRequest(_)) => return text(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let (tx, rx) = futures::channel::mpsc::channel(16);
    tokio::spawn(logserve::stream(path, query, ctx.logs.clone(), tx));
    let body = StreamBody::new(rx.map(|chunk| Ok::<_, Infallible>(Frame::data(chunk))));
    let mut response = Response::new(body.boxed_unsync());
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_log_paths_are_routed_and_others_not() {
        assert_eq!(
            route("/containerLogs/ns/p/c"),
            Some(Route::ContainerLogs {
                namespace: "ns".into(),
                pod: "p".into(),
                container: "c".into()
            })
        );
        assert_eq!(route("/healthz"), Some(Route::Healthz));
        for bad in [
            "/containerLogs/ns/p",
            "/containerLogs/ns/p/c/x",
            "/containerLogs//p/c",
            "/pods",
        ] {
            assert_eq!(route(bad), None, "{bad}");
        }
    }

    #[test]
    fn access_review_asks_for_get_nodes_proxy_on_this_node() {
        let who = Identity {
            user: "kube-apiserver-kubelet-client".into(),
            groups: vec!["g".into()],
        };
        let review = access_review(&who, &Method::GET, "n1");
        let attrs = review.spec.resource_attributes.unwrap();
        assert_eq!(
            review.spec.user.as_deref(),
            Some("kube-apiserver-kubelet-client")
        );
        assert_eq!(review.spec.groups, Some(vec!["g".to_string()]));
        assert_eq!(attrs.verb.as_deref(), Some("get"));
        assert_eq!(attrs.resource.as_deref(), Some("nodes"));
        assert_eq!(attrs.subresource.as_deref(), Some("proxy"));
        assert_eq!(attrs.name.as_deref(), Some("n1"));
    }

    #[test]
    fn client_certificate_names_user_and_groups() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        let mut name = rcgen::DistinguishedName::new();
        name.push(rcgen::DnType::OrganizationName, "team-a");
        name.push(rcgen::DnType::CommonName, "alice");
        params.distinguished_name = name;
        let cert = params.self_signed(&key).unwrap();
        let who = identity(cert.der()).unwrap();
        assert_eq!(who.user, "alice");
        assert_eq!(who.groups, vec!["team-a".to_string()]);
    }
}
