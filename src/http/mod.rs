//! HTTPS endpoints: `/healthz`, `/readyz`, `/metrics`, `/debug/actors` (every actor's state
//! as JSON), `/debug/stream` (transitions and lifecycle steps as they happen, one JSON
//! object per line, told apart by `"record": "transition"` or `"step"`; an empty line is a
//! heartbeat) and `/debug/trace`
//! (each cluster's recorded steps with their times; `?cluster=namespace/name` for one
//! cluster, `&summary=1` for each step once with its first and last time since the spec
//! was seen).
//!
//! Everything but `/healthz` and `/readyz` needs a bearer token that may `get` the path
//! ([`access`]); the listener speaks TLS only ([`serving`]); each identity holds at most a
//! few `/debug/stream` subscriptions ([`stream_slots`]).
//!
//! Readiness means "healthy and able to take over", whether or not this replica leads: its
//! caches are synced and it has read the leader Lease recently; the leader must also have
//! processed the first list of EtcdClusters. A standby is therefore ready, so a rolling
//! update of the two-replica Deployment can proceed. Who leads is shown by the
//! `etcd_operator_leader` gauge and the `leader-election` entry of `/debug/actors`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt;
use prometheus_client::registry::Registry;

use etcd_operator_actors::debug::{DebugHub, Received, StreamRecord, Subscription};
use serde::Deserialize;

use crate::controller::ElectionView;

pub mod access;
pub mod review;
pub mod serving;
pub mod stream_slots;

use access::{AccessGate, Identity};
use serving::ServingCert;
use stream_slots::{Slot, StreamSlots};

/// What the handlers read.
#[derive(Clone)]
pub(crate) struct HttpState {
    /// Actor states and transitions.
    pub hub: DebugHub,
    /// Prometheus metrics.
    pub registry: Arc<Registry>,
    /// The leader election as this replica sees it.
    pub election: ElectionView,
    /// The pod and Service caches have synced (a standby keeps them warm).
    pub caches_synced: Arc<AtomicBool>,
    /// Who may read what.
    pub access: Arc<AccessGate>,
    /// Each identity's `/debug/stream` subscriptions.
    pub stream_slots: StreamSlots,
}

impl HttpState {
    /// Why this replica is not ready, if it is not.
    fn not_ready(&self) -> Option<String> {
        if !self.caches_synced.load(Ordering::SeqCst) {
            return Some("waiting for the pod and Service caches".to_string());
        }
        if let Some(reason) = self.election.cannot_take_over(tokio::time::Instant::now()) {
            return Some(reason);
        }
        if self.election.is_leading() && !self.hub.is_synced() {
            return Some("leading; waiting for the first list".to_string());
        }
        None
    }
}

/// The router of every endpoint.
pub(crate) fn router(state: HttpState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/debug/actors", get(actors))
        .route("/debug/stream", get(stream))
        .route("/debug/trace", get(trace))
        .layer(axum::middleware::from_fn_with_state(
            state.access.clone(),
            access::require_access,
        ))
        .with_state(state)
}

/// Binds `address` and returns the HTTPS server future.
pub async fn serve(
    address: SocketAddr,
    certificate: &Arc<ServingCert>,
    state: HttpState,
) -> Result<impl Future<Output = std::io::Result<()>> + use<>, ServeError> {
    let config = certificate.server_config()?;
    let tcp = tokio::net::TcpListener::bind(address)
        .await
        .map_err(ServeError::Bind)?;
    let listener = serving::TlsListener::new(tcp, config).map_err(ServeError::Bind)?;
    Ok(async move { axum::serve(listener, router(state)).await })
}

/// Why the listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The certificate could not be served.
    #[error(transparent)]
    Certificate(#[from] serving::ServingError),
    /// The address could not be bound.
    #[error("binding: {0}")]
    Bind(std::io::Error),
}

async fn readyz(State(s): State<HttpState>) -> Response {
    if let Some(reason) = s.not_ready() {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")).into_response();
    }
    let role = if s.election.is_leading() {
        "leader"
    } else {
        "standby"
    };
    format!("ok ({role})\n").into_response()
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

/// How long a quiet `/debug/stream` waits before it sends an empty line: a subscriber that
/// went away is noticed when that write fails, and its slots are given back.
pub const STREAM_HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(5);

/// The next line of a subscriber's stream, and the subscription if the stream goes on;
/// an empty line when nothing happened for [`STREAM_HEARTBEAT`].
async fn next_line(mut subscription: Subscription) -> Option<(String, Option<Subscription>)> {
    let Ok(received) = tokio::time::timeout(STREAM_HEARTBEAT, subscription.next()).await else {
        return Some(("\n".to_string(), Some(subscription)));
    };
    let record = match received {
        Received::Transition(record) => StreamRecord::Transition(record),
        Received::Step(record) => StreamRecord::Step(record),
        Received::Dropped(missed) => {
            let line = serde_json::json!({
                "dropped": format!(
                    "this subscriber fell {missed} transitions behind and was dropped; reconnect"
                ),
                "missed": missed,
            });
            return Some((format!("{line}\n"), None));
        }
        Received::Closed => return None,
    };
    let line = serde_json::to_string(&record).unwrap_or_default();
    Some((format!("{line}\n"), Some(subscription)))
}

/// The query of `/debug/trace`.
#[derive(Debug, Default, Deserialize)]
struct TraceQuery {
    /// Only this cluster, `namespace/name`.
    cluster: Option<String>,
    /// `1`: each step once, with its first and last time since the spec was seen.
    summary: Option<String>,
}

async fn trace(State(s): State<HttpState>, Query(q): Query<TraceQuery>) -> Response {
    let trace = s.hub.trace();
    let cluster = q.cluster.as_deref().filter(|c| !c.is_empty());
    if !matches!(q.summary.as_deref(), Some("1" | "true")) {
        return axum::Json(trace.records(cluster)).into_response();
    }
    let summaries: Vec<serde_json::Value> = trace
        .clusters()
        .into_iter()
        .filter(|key| cluster.is_none_or(|c| c == key))
        .map(|key| serde_json::json!({ "steps": trace.summary(&key), "cluster": key }))
        .collect();
    axum::Json(summaries).into_response()
}

async fn stream(
    State(s): State<HttpState>,
    axum::Extension(who): axum::Extension<Identity>,
) -> Response {
    let slot: Slot = match s.stream_slots.take(&who.username) {
        Ok(slot) => slot,
        Err(too_many) => {
            let message = format!("{too_many}; close one first\n");
            return (StatusCode::TOO_MANY_REQUESTS, message).into_response();
        }
    };
    let subscription = match s.hub.subscribe() {
        Ok(subscription) => subscription,
        Err(full) => {
            let message = format!("{full}; try again later\n");
            return (StatusCode::SERVICE_UNAVAILABLE, message).into_response();
        }
    };
    // The slot lives as long as the stream: the body drops it with the connection.
    let lines = futures::stream::unfold(
        (Some(subscription), slot),
        |(subscription, slot)| async move {
            let (line, rest) = next_line(subscription?).await?;
            Some((line, (rest, slot)))
        },
    )
    .map(Ok::<_, std::convert::Infallible>);
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

    use etcd_operator_actors::debug::TransitionRecord;
    use etcd_operator_actors::metrics::Telemetry;
    use etcd_operator_actors::trace::Step;

    use access::tests::FixedReviewer;

    /// A GET of `path` with `token` (none: anonymous).
    fn request(path: &str, token: Option<&str>) -> Request<Body> {
        let mut request = Request::get(path);
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        request.body(Body::empty()).unwrap()
    }

    async fn get_as(state: HttpState, path: &str, token: Option<&str>) -> (StatusCode, String) {
        let response = router(state).oneshot(request(path, token)).await.unwrap();
        let status = response.status();
        let body = to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// A replica without leader election (it leads), caches synced.
    fn state() -> HttpState {
        let telemetry = Telemetry::default();
        HttpState {
            hub: telemetry.hub.clone(),
            registry: Arc::new(Registry::default()),
            election: ElectionView::without_election(&telemetry, "me"),
            caches_synced: Arc::new(AtomicBool::new(true)),
            access: Arc::new(AccessGate::new(Arc::new(FixedReviewer::default()))),
            stream_slots: StreamSlots::new(8),
        }
    }

    /// A replica in the election that has read the Lease, held by `holder`.
    fn elected_state(hub: DebugHub, holder: &str) -> HttpState {
        let telemetry = Telemetry {
            hub,
            ..Telemetry::default()
        };
        let election = ElectionView::new(&telemetry, "ns/lease", "me");
        election.record(holder, holder == "me");
        HttpState {
            election,
            hub: telemetry.hub,
            ..state()
        }
    }

    /// A GET of `path` by a user who may read every endpoint.
    async fn get_path(state: HttpState, path: &str) -> (StatusCode, String) {
        get_as(state, path, Some("reader-token")).await
    }

    #[tokio::test]
    async fn the_probes_are_open_and_everything_else_needs_a_token_with_the_right() {
        let s = state();
        s.hub.set_synced();
        for open in ["/healthz", "/readyz"] {
            assert_eq!(
                get_as(s.clone(), open, None).await.0,
                StatusCode::OK,
                "{open}"
            );
        }
        for guarded in ["/metrics", "/debug/actors", "/debug/trace", "/debug/stream"] {
            let (code, body) = get_as(s.clone(), guarded, None).await;
            assert_eq!(code, StatusCode::UNAUTHORIZED, "{guarded}: {body}");
            let (code, body) = get_as(s.clone(), guarded, Some("forged")).await;
            assert_eq!(code, StatusCode::UNAUTHORIZED, "{guarded}: {body}");
            let (code, body) = get_as(s.clone(), guarded, Some("nobody-token")).await;
            assert_eq!(code, StatusCode::FORBIDDEN, "{guarded}: {body}");
            assert!(body.contains("\"nobody\" may not get"), "{body}");
        }
        let (code, _) = get_as(s.clone(), "/debug/actors", Some("reader-token")).await;
        assert_eq!(code, StatusCode::OK);
        let (code, _) = get_as(s, "/no-such-path", None).await;
        assert_eq!(
            code,
            StatusCode::UNAUTHORIZED,
            "unknown paths are not probed anonymously"
        );
    }

    #[tokio::test]
    async fn one_identity_cannot_take_every_debug_stream_slot() {
        let s = HttpState {
            stream_slots: StreamSlots::new(2),
            ..state()
        };
        let open_as = |token: &'static str| {
            let s = s.clone();
            async move {
                router(s)
                    .oneshot(request("/debug/stream", Some(token)))
                    .await
                    .unwrap()
            }
        };
        let (first, second) = (open_as("reader-token").await, open_as("reader-token").await);
        assert_eq!(
            (first.status(), second.status()),
            (StatusCode::OK, StatusCode::OK)
        );
        let third = open_as("reader-token").await;
        assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
        let other = open_as("other-reader-token").await;
        assert_eq!(
            other.status(),
            StatusCode::OK,
            "another reader still gets one"
        );
        drop(first);
        assert_eq!(open_as("reader-token").await.status(), StatusCode::OK);
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
    async fn a_standby_replica_with_synced_caches_is_ready_to_take_over() {
        let s = elected_state(DebugHub::default(), "other");
        let (code, body) = get_path(s.clone(), "/readyz").await;
        assert_eq!(code, StatusCode::OK, "{body}");
        assert!(body.contains("standby"), "{body}");
        let (_, actors) = get_path(s, "/debug/actors").await;
        let v: serde_json::Value = serde_json::from_str(&actors).unwrap();
        assert_eq!(v[0]["kind"], "leader-election");
        assert_eq!(v[0]["state"]["leading"], false);
        assert_eq!(v[0]["state"]["holder"], "other");
    }

    #[tokio::test]
    async fn a_replica_is_not_ready_before_its_caches_synced() {
        let s = elected_state(DebugHub::default(), "other");
        s.caches_synced.store(false, Ordering::SeqCst);
        let (code, body) = get_path(s, "/readyz").await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("caches"), "{body}");
    }

    #[tokio::test]
    async fn a_standby_that_never_read_the_lease_is_not_ready() {
        let telemetry = Telemetry::default();
        let s = HttpState {
            election: ElectionView::new(&telemetry, "ns/lease", "me"),
            ..state()
        };
        let (code, body) = get_path(s, "/readyz").await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("Lease"), "{body}");
    }

    #[tokio::test]
    async fn a_new_leader_is_ready_once_it_processed_the_first_list() {
        let s = elected_state(DebugHub::default(), "me");
        assert_eq!(
            get_path(s.clone(), "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        s.hub.set_synced();
        let (code, body) = get_path(s, "/readyz").await;
        assert_eq!(code, StatusCode::OK);
        assert!(body.contains("leader"), "{body}");
    }

    fn record(to: &str) -> TransitionRecord {
        TransitionRecord {
            time_unix_ms: 0,
            kind: etcd_operator_actors::debug::ActorKind::Cluster,
            key: "ns/a".into(),
            from: "Bootstrapping".into(),
            to: to.into(),
            reason: "Converged".into(),
            message: String::new(),
        }
    }

    async fn open_stream(s: &HttpState) -> Response {
        router(s.clone())
            .oneshot(request("/debug/stream", Some("reader-token")))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn the_debug_stream_refuses_subscribers_beyond_its_maximum() {
        let s = HttpState {
            hub: DebugHub::with_limits(8, 1),
            ..state()
        };
        let first = open_stream(&s).await;
        assert_eq!(first.status(), StatusCode::OK);
        let (code, body) = get_path(s.clone(), "/debug/stream").await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("maximum of 1 subscribers"), "{body}");
        drop(first);
        assert_eq!(open_stream(&s).await.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn a_slow_debug_stream_subscriber_gets_a_last_line_saying_it_was_dropped() {
        let s = HttpState {
            hub: DebugHub::with_limits(4, 2),
            ..state()
        };
        let response = open_stream(&s).await;
        s.hub.publish(record("Scaling"));
        let mut body = response.into_body().into_data_stream();
        let first = body.next().await.unwrap().unwrap();
        assert!(String::from_utf8_lossy(&first).contains("Scaling"));
        // Ten more while it does not read: more than the stream keeps.
        for i in 0..10 {
            s.hub.publish(record(&format!("phase-{i}")));
        }
        let rest = to_bytes(Body::from_stream(body), 1 << 20).await.unwrap();
        let rest = String::from_utf8_lossy(&rest).into_owned();
        let lines: Vec<serde_json::Value> = rest
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 1, "{rest}");
        assert_eq!(lines[0]["missed"], 6);
        assert!(lines[0]["dropped"].as_str().unwrap().contains("dropped"));
        // Its slot is free again.
        assert!(s.hub.subscribe().is_ok());
        assert!(s.hub.subscribe().is_ok());
    }

    #[tokio::test]
    async fn the_debug_stream_tags_transitions_and_steps_by_record() {
        let s = state();
        let response = open_stream(&s).await;
        s.hub.publish(record("Running"));
        s.hub.step("ns/a", Step::Ready, None, 5);
        let mut body = response.into_body().into_data_stream();
        let mut lines = Vec::new();
        while lines.len() < 2 {
            let chunk = body.next().await.unwrap().unwrap();
            for line in String::from_utf8_lossy(&chunk).lines() {
                lines.push(serde_json::from_str::<serde_json::Value>(line).unwrap());
            }
        }
        assert_eq!(lines[0]["record"], "transition");
        assert_eq!(lines[0]["to"], "Running");
        assert_eq!(lines[1]["record"], "step");
        assert_eq!(lines[1]["step"], "ready");
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_debug_stream_sends_an_empty_line_as_a_heartbeat() {
        let s = state();
        let mut body = open_stream(&s).await.into_body().into_data_stream();
        let chunk = tokio::time::timeout(STREAM_HEARTBEAT * 2, body.next())
            .await
            .expect("a heartbeat within twice its interval")
            .unwrap()
            .unwrap();
        assert_eq!(&chunk[..], b"\n");
        s.hub.publish(record("Running"));
        let chunk = body.next().await.unwrap().unwrap();
        assert!(String::from_utf8_lossy(&chunk).contains("Running"));
    }

    fn traced() -> HttpState {
        let s = state();
        s.hub.step("ns/a", Step::SpecSeen, None, 1_000);
        s.hub
            .step("ns/a", Step::MemberHealthy, Some("a-1".into()), 1_400);
        s.hub
            .step("ns/a", Step::MemberHealthy, Some("a-2".into()), 1_900);
        s.hub.step("ns/b", Step::SpecSeen, None, 2_000);
        s
    }

    #[tokio::test]
    async fn debug_trace_lists_every_step_or_one_clusters() {
        let (code, body) = get_path(traced(), "/debug/trace").await;
        assert_eq!(code, StatusCode::OK);
        let all: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(all.as_array().unwrap().len(), 4);
        let (_, body) = get_path(traced(), "/debug/trace?cluster=ns/a").await;
        let one: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(one.as_array().unwrap().len(), 3);
        assert_eq!(one[1]["member"], "a-1");
        assert_eq!(one[1]["since_spec_ms"], 400);
    }

    #[tokio::test]
    async fn debug_trace_summary_gives_each_step_once_with_its_times_since_the_spec() {
        let (code, body) = get_path(traced(), "/debug/trace?cluster=ns%2Fa&summary=1").await;
        assert_eq!(code, StatusCode::OK);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 1, "{body}");
        assert_eq!(v[0]["cluster"], "ns/a");
        let healthy = &v[0]["steps"][1];
        assert_eq!(healthy["step"], "member_healthy");
        assert_eq!(
            (&healthy["count"], &healthy["first_ms"]),
            (&2.into(), &400.into())
        );
        assert_eq!(healthy["last_ms"], 900);
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
