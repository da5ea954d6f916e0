//! The fence at the depth of single requests: a layer of the calls client that asks the
//! leader's fence before every write request is sent, and gives each write no longer than
//! the fence stays open.
//!
//! The ports ask the fence once per call ([`super::fence::FencedClusterApi`]), but one
//! call may send several writes (a pod and then its claim; a status and then an
//! annotation), and the Event recorder and the backup and restore controllers write
//! through the same client. Here every write request is checked on its own, right before
//! it leaves. A write still in flight when the fence closes is abandoned at that moment:
//! the fence closes a renew deadline after the last renewal began, which is before the
//! Lease may pass to another replica, so a write that is answered was received while
//! this replica still led. Reads (`GET`, `HEAD`, watches) are not fenced: they change
//! nothing.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{Method, Request};
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};

use super::fence::Fence;

/// A write that was sent but not answered before its deadline: the fence's closing, or
/// the client's deadline of one call, whichever came first. Whether the API server applied
/// it is not known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{write}: no answer within {waited:?} ({why})")]
pub struct WriteTimedOut {
    /// The request, as `METHOD path`.
    pub write: String,
    /// How long it waited.
    pub waited: Duration,
    /// Which deadline ended it.
    pub why: &'static str,
}

/// Puts every write request of a client behind `fence`, each bounded by `timeout` and by
/// the time left before the fence closes.
#[derive(Clone)]
pub struct FenceLayer {
    fence: Fence,
    timeout: Duration,
}

impl FenceLayer {
    /// Writes wait at most `timeout` for their answer, and never past the fence's closing.
    pub fn new(fence: Fence, timeout: Duration) -> Self {
        FenceLayer { fence, timeout }
    }
}

impl<S> Layer<S> for FenceLayer {
    type Service = FencedService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FencedService {
            inner,
            fence: self.fence.clone(),
            timeout: self.timeout,
        }
    }
}

/// The service [`FenceLayer`] makes.
#[derive(Clone)]
pub struct FencedService<S> {
    inner: S,
    fence: Fence,
    timeout: Duration,
}

/// Whether a request only reads.
fn reads_only(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

type Answer<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

impl<S, B> Service<Request<B>> for FencedService<S>
where
    S: Service<Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Answer<S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if reads_only(request.method()) {
            let answer = self.inner.call(request);
            return Box::pin(async move { answer.await.map_err(Into::into) });
        }
        let write = format!("{} {}", request.method(), request.uri().path());
        if let Err(refused) = self.fence.check(&write) {
            return Box::pin(std::future::ready(Err(refused.into())));
        }
        let sent = Instant::now();
        let (deadline, why) = match self.fence.closes_at() {
            Some(closes) if closes < sent + self.timeout => {
                (closes, "the leader fence closes unless renewed")
            }
            _ => (sent + self.timeout, "the deadline of one API call"),
        };
        let answer = self.inner.call(request);
        Box::pin(async move {
            match tokio::time::timeout_at(deadline, answer).await {
                Ok(answer) => answer.map_err(Into::into),
                Err(_) => Err(WriteTimedOut {
                    write,
                    waited: sent.elapsed(),
                    why,
                }
                .into()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::http::Response;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, DeleteParams};
    use kube::client::{Body, ClientBuilder};

    use super::*;
    use crate::controller::fence::Fenced;

    const TIMEOUT: Duration = Duration::from_secs(10);
    const RENEW_DEADLINE: Duration = Duration::from_secs(10);

    /// An API server that records each request (`METHOD path`) and answers 404, or never
    /// answers writes when `hang`.
    #[derive(Clone, Default)]
    struct Server {
        seen: Arc<Mutex<Vec<String>>>,
        hang: bool,
    }

    impl Server {
        fn client(&self, fence: &Fence) -> kube::Client {
            let server = self.clone();
            let service = tower::service_fn(move |req: Request<Body>| {
                let server = server.clone();
                async move {
                    let call = format!("{} {}", req.method(), req.uri().path());
                    server.seen.lock().unwrap().push(call);
                    if server.hang && !reads_only(req.method()) {
                        std::future::pending::<()>().await;
                    }
                    let status = serde_json::json!({"kind": "Status", "apiVersion": "v1",
                        "status": "Failure", "reason": "NotFound", "code": 404});
                    Ok::<_, std::convert::Infallible>(
                        Response::builder()
                            .status(404)
                            .header("content-type", "application/json")
                            .body(Body::from(serde_json::to_vec(&status).unwrap()))
                            .unwrap(),
                    )
                }
            });
            ClientBuilder::new(service, "ns")
                .with_layer(&FenceLayer::new(fence.clone(), TIMEOUT))
                .build()
        }

        fn seen(&self) -> Vec<String> {
            self.seen.lock().unwrap().clone()
        }
    }

    fn held() -> Fence {
        let fence = Fence::new(RENEW_DEADLINE);
        assert!(fence.renewed(Instant::now()));
        fence
    }

    fn cause<E: std::error::Error + 'static>(error: &kube::Error) -> Option<&E> {
        let mut source = std::error::Error::source(error);
        while let Some(e) = source {
            if let Some(found) = e.downcast_ref::<E>() {
                return Some(found);
            }
            source = e.source();
        }
        None
    }

    #[tokio::test]
    async fn a_write_after_the_fence_closed_is_never_sent_though_reads_still_are() {
        let (server, fence) = (Server::default(), held());
        let pods: Api<Pod> = Api::namespaced(server.client(&fence), "ns");
        let _ = pods.delete("m1", &DeleteParams::default()).await;
        fence.close_now("the Lease was lost");
        let refused = pods
            .delete("m2", &DeleteParams::default())
            .await
            .unwrap_err();
        let fenced = cause::<Fenced>(&refused).expect("refused by the fence");
        assert_eq!(fenced.write, "DELETE /api/v1/namespaces/ns/pods/m2");
        let _ = pods.get_opt("m3").await;
        assert_eq!(
            server.seen(),
            [
                "DELETE /api/v1/namespaces/ns/pods/m1",
                "GET /api/v1/namespaces/ns/pods/m3"
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_waits_no_longer_than_the_fence_stays_open() {
        let server = Server {
            hang: true,
            ..Server::default()
        };
        let fence = Fence::new(RENEW_DEADLINE);
        let renewed = Instant::now();
        assert!(fence.renewed(renewed));
        // 7 s into the Lease, a write gets the 3 s left, not the call deadline of 10 s.
        tokio::time::advance(Duration::from_secs(7)).await;
        let pods: Api<Pod> = Api::namespaced(server.client(&fence), "ns");
        let error = pods
            .delete("m1", &DeleteParams::default())
            .await
            .unwrap_err();
        let timed_out = cause::<WriteTimedOut>(&error).expect("timed out");
        assert_eq!(timed_out.why, "the leader fence closes unless renewed");
        assert_eq!(Instant::now(), renewed + RENEW_DEADLINE);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_with_the_fence_far_from_closing_gets_the_call_deadline() {
        let server = Server {
            hang: true,
            ..Server::default()
        };
        let fence = Fence::always_open();
        let pods: Api<Pod> = Api::namespaced(server.client(&fence), "ns");
        let sent = Instant::now();
        let error = pods
            .delete("m1", &DeleteParams::default())
            .await
            .unwrap_err();
        let timed_out = cause::<WriteTimedOut>(&error).expect("timed out");
        assert_eq!(timed_out.why, "the deadline of one API call");
        assert_eq!(Instant::now(), sent + TIMEOUT);
    }
}
