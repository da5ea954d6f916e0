//! Who may read the operator's endpoints. Every request except the kubelet's probes
//! (`/healthz`, `/readyz`) carries a bearer token; the API server says whose it is
//! (TokenReview) and whether they may `get` the path (SubjectAccessReview on the
//! non-resource URL, so RBAC grants it with `nonResourceURLs: ["/metrics"]` or
//! `["/debug/*"]`). This is how Kubernetes' own components and kube-rbac-proxy delegate
//! both questions.
//!
//! Answers are kept for [`ANSWER_TTL`] (the delegating authenticator's and authorizer's
//! default), keyed by a digest of the token (never the token itself), the verb and the
//! path, in a cache of at most [`MAX_ANSWERS`] entries. A failed review (the API server
//! unreachable) is never cached and is answered 503, so a token is never taken as valid
//! because nobody could be asked.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// Paths served without a token: the kubelet probes them and carries none.
pub const OPEN_PATHS: &[&str] = &["/healthz", "/readyz"];

/// How long an answer of the API server is reused.
pub const ANSWER_TTL: Duration = Duration::from_secs(10);

/// Most answers kept at once; past it, expired answers are dropped, then all.
pub const MAX_ANSWERS: usize = 4096;

/// A user as the API server's TokenReview names them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// The user name (`system:serviceaccount:<ns>:<name>` for a ServiceAccount).
    pub username: String,
    /// The user's UID, when the authenticator gives one.
    pub uid: Option<String>,
    /// The groups the user is in.
    pub groups: Vec<String>,
    /// Further attributes the authenticator attached (passed on to authorization).
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What the API server said of a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authentication {
    /// The token is valid and belongs to this user.
    Known(Identity),
    /// The token is not valid; why, as the API server says it.
    Unknown(String),
}

/// What the API server said of a user's request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authorization {
    /// The user may.
    Allowed,
    /// The user may not; the API server's reason (often empty).
    Denied(String),
}

/// The API server could not be asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the API server could not review the request: {0}")]
pub struct ReviewError(pub String);

/// Asks the API server (or, in unit tests, a stand-in) about tokens and rights.
#[async_trait::async_trait]
pub trait Reviewer: Send + Sync + 'static {
    /// Whose token this is.
    async fn authenticate(&self, token: &str) -> Result<Authentication, ReviewError>;
    /// Whether `who` may `verb` the non-resource URL `path`.
    async fn authorize(
        &self,
        who: &Identity,
        verb: &str,
        path: &str,
    ) -> Result<Authorization, ReviewError>;
}

/// The outcome for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// Served, to this user.
    Granted(Identity),
    /// No token, or one the API server does not know: 401.
    Unauthenticated(String),
    /// A known user without the right: 403.
    Denied {
        /// Who asked.
        username: String,
        /// The API server's reason, if it gave one.
        reason: String,
    },
}

impl Access {
    /// The response refusing the request, or `None` when it is granted.
    pub fn refusal(&self, verb: &str, path: &str) -> Option<Response> {
        match self {
            Access::Granted(_) => None,
            Access::Unauthenticated(why) => Some(
                (
                    StatusCode::UNAUTHORIZED,
                    [(header::WWW_AUTHENTICATE, "Bearer")],
                    format!("Unauthorized: {why}\n"),
                )
                    .into_response(),
            ),
            Access::Denied { username, reason } => {
                let reason = if reason.is_empty() {
                    String::new()
                } else {
                    format!(": {reason}")
                };
                let message = format!(
                    "Forbidden: user \"{username}\" may not {verb} {path} (grant it with an RBAC \
                     rule on nonResourceURLs){reason}\n"
                );
                Some((StatusCode::FORBIDDEN, message).into_response())
            }
        }
    }
}

/// The bearer token of a request, if it has one.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The RBAC verb of an HTTP method on a non-resource URL (the API server's rule:
/// the method in lower case).
pub fn verb_of(method: &axum::http::Method) -> String {
    method.as_str().to_ascii_lowercase()
}

type AnswerKey = ([u8; 32], String, String);

/// Answers kept for a while, bounded.
#[derive(Default)]
struct Answers {
    entries: HashMap<AnswerKey, (Instant, Access)>,
}

impl Answers {
    fn get(&self, key: &AnswerKey, now: Instant) -> Option<Access> {
        let (expires, access) = self.entries.get(key)?;
        (*expires > now).then(|| access.clone())
    }

    fn put(&mut self, key: AnswerKey, access: Access, now: Instant) {
        if self.entries.len() >= MAX_ANSWERS {
            self.entries.retain(|_, (expires, _)| *expires > now);
        }
        if self.entries.len() >= MAX_ANSWERS {
            self.entries.clear();
        }
        self.entries.insert(key, (now + ANSWER_TTL, access));
    }
}

/// Decides each request with the reviewer's answers, cached.
pub struct AccessGate {
    reviewer: Arc<dyn Reviewer>,
    answers: Mutex<Answers>,
}

impl AccessGate {
    /// A gate asking `reviewer`.
    pub fn new(reviewer: Arc<dyn Reviewer>) -> Self {
        AccessGate {
            reviewer,
            answers: Mutex::new(Answers::default()),
        }
    }

    /// Answers kept now (for tests and the cache bound).
    #[cfg(test)]
    pub fn cached_answers(&self) -> usize {
        self.answers.lock().expect("answers lock").entries.len()
    }

    /// Whether the holder of `token` may `verb` `path`.
    pub async fn check(
        &self,
        token: Option<&str>,
        verb: &str,
        path: &str,
    ) -> Result<Access, ReviewError> {
        let Some(token) = token else {
            return Ok(Access::Unauthenticated(
                "no bearer token; send `Authorization: Bearer <token>` (e.g. from \
                 `kubectl create token`)"
                    .to_string(),
            ));
        };
        let key: AnswerKey = (
            Sha256::digest(token.as_bytes()).into(),
            verb.to_string(),
            path.to_string(),
        );
        if let Some(access) = self
            .answers
            .lock()
            .expect("answers lock")
            .get(&key, Instant::now())
        {
            return Ok(access);
        }
        let access = match self.reviewer.authenticate(token).await? {
            Authentication::Unknown(why) => Access::Unauthenticated(why),
            Authentication::Known(who) => match self.reviewer.authorize(&who, verb, path).await? {
                Authorization::Allowed => Access::Granted(who),
                Authorization::Denied(reason) => Access::Denied {
                    username: who.username,
                    reason,
                },
            },
        };
        self.answers
            .lock()
            .expect("answers lock")
            .put(key, access.clone(), Instant::now());
        Ok(access)
    }
}

/// The middleware in front of every route: open paths pass, others need a granted token.
/// A granted request carries its [`Identity`] as an extension.
pub async fn require_access(
    State(gate): State<Arc<AccessGate>>,
    mut request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path().to_string();
    if OPEN_PATHS.contains(&path.as_str()) {
        return next.run(request).await;
    }
    let verb = verb_of(request.method());
    let token = bearer_token(request.headers());
    match gate.check(token, &verb, &path).await {
        Ok(Access::Granted(who)) => {
            request.extensions_mut().insert(who);
            next.run(request).await
        }
        Ok(refused) => refused
            .refusal(&verb, &path)
            .unwrap_or_else(|| StatusCode::FORBIDDEN.into_response()),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}; try again\n")).into_response(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A stand-in API server: token `reader-token` belongs to `reader`, who may get
    /// `/metrics` and `/debug/*`; `nobody-token` belongs to `nobody`, who may get nothing;
    /// `broken` cannot be reviewed. Counts the reviews it answers.
    #[derive(Default)]
    pub(crate) struct FixedReviewer {
        pub reviews: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl Reviewer for FixedReviewer {
        async fn authenticate(&self, token: &str) -> Result<Authentication, ReviewError> {
            self.reviews.fetch_add(1, Ordering::SeqCst);
            let user = |name: &str| {
                Authentication::Known(Identity {
                    username: name.to_string(),
                    ..Identity::default()
                })
            };
            match token {
                "reader-token" => Ok(user("reader")),
                "other-reader-token" => Ok(user("other-reader")),
                "nobody-token" => Ok(user("nobody")),
                "broken" => Err(ReviewError("connection refused".into())),
                _ => Ok(Authentication::Unknown("token not valid".into())),
            }
        }

        async fn authorize(
            &self,
            who: &Identity,
            verb: &str,
            path: &str,
        ) -> Result<Authorization, ReviewError> {
            let readable = path == "/metrics" || path.starts_with("/debug/");
            Ok(
                if who.username.ends_with("reader") && verb == "get" && readable {
                    Authorization::Allowed
                } else {
                    Authorization::Denied(String::new())
                },
            )
        }
    }

    fn gate() -> (Arc<FixedReviewer>, AccessGate) {
        let reviewer = Arc::new(FixedReviewer::default());
        (reviewer.clone(), AccessGate::new(reviewer))
    }

    #[tokio::test]
    async fn a_request_without_a_token_is_unauthenticated_without_asking() {
        let (reviewer, gate) = gate();
        let access = gate.check(None, "get", "/metrics").await.unwrap();
        assert!(matches!(access, Access::Unauthenticated(m) if m.contains("kubectl create token")));
        assert_eq!(reviewer.reviews.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_known_user_without_the_right_is_denied_and_a_reader_granted() {
        let (_, gate) = gate();
        let denied = gate.check(Some("nobody-token"), "get", "/metrics").await;
        assert!(matches!(denied, Ok(Access::Denied { username, .. }) if username == "nobody"));
        let granted = gate
            .check(Some("reader-token"), "get", "/debug/actors")
            .await;
        assert!(matches!(granted, Ok(Access::Granted(who)) if who.username == "reader"));
        let wrong_verb = gate.check(Some("reader-token"), "post", "/metrics").await;
        assert!(matches!(wrong_verb, Ok(Access::Denied { .. })));
        let unknown = gate.check(Some("forged"), "get", "/metrics").await;
        assert!(matches!(unknown, Ok(Access::Unauthenticated(_))));
    }

    #[tokio::test(start_paused = true)]
    async fn answers_are_reused_for_their_ttl_then_asked_again() {
        let (reviewer, gate) = gate();
        for _ in 0..3 {
            gate.check(Some("reader-token"), "get", "/metrics")
                .await
                .unwrap();
        }
        assert_eq!(reviewer.reviews.load(Ordering::SeqCst), 1);
        tokio::time::advance(ANSWER_TTL + Duration::from_millis(1)).await;
        gate.check(Some("reader-token"), "get", "/metrics")
            .await
            .unwrap();
        assert_eq!(reviewer.reviews.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_review_that_fails_is_an_error_and_is_not_cached() {
        let (reviewer, gate) = gate();
        for _ in 0..2 {
            assert!(gate.check(Some("broken"), "get", "/metrics").await.is_err());
        }
        assert_eq!(reviewer.reviews.load(Ordering::SeqCst), 2);
        assert_eq!(gate.cached_answers(), 0);
    }

    #[tokio::test]
    async fn the_answer_cache_never_grows_past_its_bound() {
        let (_, gate) = gate();
        for i in 0..(MAX_ANSWERS + 10) {
            let token = format!("forged-{i}");
            gate.check(Some(&token), "get", "/metrics").await.unwrap();
        }
        assert!(
            gate.cached_answers() <= MAX_ANSWERS,
            "{}",
            gate.cached_answers()
        );
    }

    #[test]
    fn the_bearer_token_is_read_from_the_authorization_header_only() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer_token(&headers), None);
        headers.insert(header::AUTHORIZATION, "Basic dXNlcjpwdw==".parse().unwrap());
        assert_eq!(bearer_token(&headers), None);
        headers.insert(header::AUTHORIZATION, "Bearer   ".parse().unwrap());
        assert_eq!(bearer_token(&headers), None);
        headers.insert(header::AUTHORIZATION, "bearer abc.def".parse().unwrap());
        assert_eq!(bearer_token(&headers), Some("abc.def"));
    }
}
