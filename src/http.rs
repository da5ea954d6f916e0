//! HTTP endpoints: `/healthz`, `/readyz`, `/metrics`, `/debug/actors` (every actor's state
//! as JSON) and `/debug/stream` (transitions as they happen, one JSON object per line).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt;
use prometheus_client::registry::Registry;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

use etcd_operator_actors::debug::DebugHub;

/// What the handlers read.
#[derive(Clone)]
pub struct HttpState {
    /// Actor states and transitions.
    pub hub: DebugHub,
    /// Prometheus metrics.
    pub registry: Arc<Registry>,
    /// This replica holds the leader lease (or leader election is off).
    pub leading: Arc<AtomicBool>,
}

/// The router of every endpoint.
pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/debug/actors", get(actors))
        .route("/debug/stream", get(stream))
        .with_state(state)
}

/// Binds `address` and returns the server future.
pub async fn serve(
    address: SocketAddr,
    state: HttpState,
) -> std::io::Result<impl Future<Output = std::io::Result<()>>> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    Ok(async move { axum::serve(listener, router(state)).await })
}

async fn readyz(State(s): State<HttpState>) -> Response {
    if !s.leading.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, "standby: not the leader\n").into_response();
    }
    if !s.hub.is_synced() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "waiting for the first list\n",
        )
            .into_response();
    }
    "ok".into_response()
}

async fn metrics(State(s): State<HttpState>) -> Response {
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &s.registry) {
        return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn actors(State(s): State<HttpState>) -> Response {
    axum::Json(s.hub.snapshot()).into_response()
}

async fn stream(State(s): State<HttpState>) -> Response {
    let lines = BroadcastStream::new(s.hub.subscribe()).map(|item| {
        let line = match item {
            Ok(record) => serde_json::to_string(&record).unwrap_or_default(),
            Err(BroadcastStreamRecvError::Lagged(n)) => format!("{{\"lagged\":{n}}}"),
        };
        Ok::<_, std::convert::Infallible>(format!("{line}\n"))
    });
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(lines),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use axum::body::to_bytes;
    use axum::http::Request;
    use tower::ServiceExt;

    use super::*;

    fn state() -> HttpState {
        HttpState {
            hub: DebugHub::default(),
            registry: Arc::new(Registry::default()),
            leading: Arc::new(AtomicBool::new(true)),
        }
    }

    async fn get_path(state: HttpState, path: &str) -> (StatusCode, String) {
        let response = router(state)
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn readyz_waits_for_the_first_list() {
        let s = state();
        assert_eq!(
            get_path(s.clone(), "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        s.hub.set_synced();
        assert_eq!(get_path(s, "/readyz").await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn metrics_are_served_in_prometheus_text_format() {
        let metrics = etcd_operator_actors::metrics::Metrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        metrics.ticks.inc();
        let s = HttpState {
            registry: Arc::new(registry),
            ..state()
        };
        let (code, body) = get_path(s, "/metrics").await;
        assert_eq!(code, StatusCode::OK);
        assert!(body.contains("etcd_operator_ticks_total 1"), "{body}");
    }

    #[tokio::test]
    async fn a_standby_replica_is_not_ready() {
        let s = state();
        s.hub.set_synced();
        s.leading.store(false, Ordering::SeqCst);
        let (code, body) = get_path(s, "/readyz").await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("standby"));
    }

    #[tokio::test]
    async fn debug_actors_lists_every_actor_state_as_json() {
        let s = state();
        s.hub.set_state(
            etcd_operator_actors::debug::ActorKind::Cluster,
            "ns/a",
            serde_json::json!({"phase": "Running"}),
        );
        let (code, body) = get_path(s, "/debug/actors").await;
        assert_eq!(code, StatusCode::OK);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v[0]["key"], "ns/a");
        assert_eq!(v[0]["state"]["phase"], "Running");
    }
}
