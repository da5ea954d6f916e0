//! etcd's membership API over the `etcd-client` crate: the actors' [`EtcdApi`] port.
//!
//! [`EtcdClientApi`] keeps one connected [`Client`] per endpoint list and reuses it from call
//! to call; a client whose call failed below etcd (connection refused, timeout, broken
//! transport) is dropped so that the next call connects afresh. Every failure comes back as
//! an [`EtcdError`] classified from the message etcd or the transport gave.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Client, ConnectOptions, Member, MemberAddOptions};
use etcd_operator_actors::lifecycle::{MemberHealth, MemberView};
use etcd_operator_actors::ports::{AddedMember, EtcdApi, EtcdError, EtcdErrorKind, MemberList};

/// How many endpoint lists keep a cached client; past that the cache starts over.
const MAX_CACHED_CLIENTS: usize = 64;

/// [`EtcdApi`] over gRPC with `etcd-client`.
pub struct EtcdClientApi {
    timeout: Duration,
    clients: Mutex<HashMap<Vec<String>, Client>>,
}

impl EtcdClientApi {
    /// An API whose connections and requests each get `timeout`.
    pub fn new(timeout: Duration) -> Self {
        EtcdClientApi {
            timeout,
            clients: Mutex::new(HashMap::new()),
        }
    }

    fn options(&self) -> ConnectOptions {
        ConnectOptions::new()
            .with_connect_timeout(self.timeout)
            .with_timeout(self.timeout)
    }

    fn cached(&self, key: &[String]) -> Option<Client> {
        self.lock().get(key).cloned()
    }

    fn forget(&self, key: &[String]) {
        self.lock().remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<String>, Client>> {
        // A panic while holding the lock cannot leave the map inconsistent.
        self.clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn client(&self, key: &[String]) -> Result<Client, etcd_client::Error> {
        if let Some(client) = self.cached(key) {
            return Ok(client);
        }
        let client = Client::connect(key, Some(self.options())).await?;
        let mut clients = self.lock();
        if clients.len() >= MAX_CACHED_CLIENTS {
            clients.clear();
        }
        Ok(clients.entry(key.to_vec()).or_insert(client).clone())
    }

    /// Runs `call` with a client for `endpoints`, bounded by the timeout; the client is
    /// dropped from the cache unless etcd itself answered. When the connection to the
    /// endpoint set fails before anything was sent, each endpoint is tried alone in turn:
    /// a member that is still starting must not hide the others.
    async fn call<T, F, Fut>(
        &self,
        what: &str,
        endpoints: &[String],
        call: F,
    ) -> Result<T, EtcdError>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let key = endpoint_key(endpoints);
        if key.is_empty() {
            return Err(EtcdError::classify(format!(
                "{what}: no endpoints to connect to"
            )));
        }
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut result = self.attempt(what, &key, deadline, &call).await;
        if key.len() > 1 {
            for single in &key {
                match &result {
                    Err((error, true)) if error.kind != EtcdErrorKind::Timeout => {}
                    _ => break,
                }
                result = self
                    .attempt(what, std::slice::from_ref(single), deadline, &call)
                    .await;
            }
        }
        result.map_err(|(error, _)| error)
    }

    /// One try against one endpoint set; the error says whether nothing was sent.
    async fn attempt<T, F, Fut>(
        &self,
        what: &str,
        key: &[String],
        deadline: tokio::time::Instant,
        call: &F,
    ) -> Result<T, (EtcdError, bool)>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let attempt = async {
            let client = self.client(key).await?;
            call(client).await
        };
        match tokio::time::timeout_at(deadline, attempt).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => {
                if !answered_by_etcd(&err) {
                    self.forget(key);
                }
                let message = describe(&err);
                // Nothing reached a voting member: a name did not resolve yet (a member
                // just created), the connection failed, or the balancer picked a learner,
                // which serves no cluster-wide calls.
                let unsent = message.contains("dns error")
                    || message.contains("connect error")
                    || message.contains("Connection refused")
                    || message.contains("not supported for learner");
                Err((EtcdError::classify(message), unsent))
            }
            Err(_) => {
                self.forget(key);
                Err((EtcdError::timeout(what, self.timeout), false))
            }
        }
    }
}

impl std::fmt::Debug for EtcdClientApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClientApi")
            .field("timeout", &self.timeout)
            .field("cached_clients", &self.lock().len())
            .finish()
    }
}

#[async_trait]
impl EtcdApi for EtcdClientApi {
    async fn list(&self, endpoints: &[String]) -> Result<MemberList, EtcdError> {
        self.call("member list", endpoints, |mut client| async move {
            let resp = client.member_list().await?;
            Ok(MemberList {
                cluster_id: resp.header().map(|h| h.cluster_id()).unwrap_or_default(),
                members: resp.members().iter().map(member_view).collect(),
            })
        })
        .await
    }

    async fn add(
        &self,
        endpoints: &[String],
        peer_url: &str,
        learner: bool,
    ) -> Result<AddedMember, EtcdError> {
        let urls = vec![peer_url.to_string()];
        self.call("member add", endpoints, |mut client| {
            let urls = urls.clone();
            async move {
                let options = if learner {
                    MemberAddOptions::new().with_is_learner()
                } else {
                    MemberAddOptions::new()
                };
                let resp = client.member_add(urls, Some(options)).await?;
                let id = match resp.member() {
                    Some(member) => member.id(),
                    None => {
                        return Err(etcd_client::Error::InvalidArgs(
                            "etcd answered member add without the new member".to_string(),
                        ));
                    }
                };
                Ok(AddedMember {
                    id,
                    members: resp.member_list().iter().map(member_view).collect(),
                })
            }
        })
        .await
    }

    async fn remove(&self, endpoints: &[String], id: u64) -> Result<(), EtcdError> {
        self.call("member remove", endpoints, |mut client| async move {
            client.member_remove(id).await.map(|_| ())
        })
        .await
    }

    async fn promote(&self, endpoints: &[String], id: u64) -> Result<(), EtcdError> {
        self.call("member promote", endpoints, |mut client| async move {
            client.member_promote(id).await.map(|_| ())
        })
        .await
    }

    async fn status(&self, endpoint: &str) -> Result<MemberHealth, EtcdError> {
        let endpoints = [endpoint.to_string()];
        self.call("endpoint status", &endpoints, |mut client| async move {
            let resp = client.status().await?;
            let mut health = health(
                resp.version(),
                resp.leader(),
                resp.raft_index(),
                resp.errors(),
            );
            health.cluster_id = resp.header().map(|h| h.cluster_id());
            Ok(health)
        })
        .await
    }
}

/// The cache key of an endpoint list: order and repeats do not matter.
fn endpoint_key(endpoints: &[String]) -> Vec<String> {
    let mut key: Vec<String> = endpoints
        .iter()
        .map(|e| e.trim().to_string())
        .filter(|e| !e.is_empty())
        .collect();
    key.sort();
    key.dedup();
    key
}

/// One entry of etcd's member list.
fn member_view(member: &Member) -> MemberView {
    MemberView {
        id: member.id(),
        name: member.name().to_string(),
        peer_urls: member.peer_urls().to_vec(),
        client_urls: member.client_urls().to_vec(),
        is_learner: member.is_learner(),
    }
}

/// A member's answer to `endpoint status`; leader 0 means it knows no leader.
fn health(version: &str, leader: u64, raft_index: u64, errors: &[String]) -> MemberHealth {
    MemberHealth {
        reachable: true,
        version: version.parse().ok(),
        leader: (leader != 0).then_some(leader),
        raft_index,
        errors: errors.to_vec(),
        cluster_id: None,
    }
}

/// Whether etcd itself refused the call (the connection is fine), rather than the transport.
fn answered_by_etcd(err: &etcd_client::Error) -> bool {
    matches!(err, etcd_client::Error::GRpcStatus(status) if status.message().starts_with("etcdserver:"))
}

/// The error as a message [`EtcdError::classify`] understands.
///
/// `etcd-client`'s own `Display` is unhelpful for the two cases that matter: a gRPC status
/// prints with its metadata, and a transport error prints only `transport error`.
fn describe(err: &etcd_client::Error) -> String {
    match err {
        etcd_client::Error::GRpcStatus(status) => {
            let message = with_sources(status.message(), status);
            describe_status(&format!("{:?}", status.code()), &message)
        }
        etcd_client::Error::TransportError(e) => with_sources("transport error", e),
        etcd_client::Error::IoError(e) => with_sources(&format!("io error: {e}"), e),
        other => other.to_string(),
    }
}

/// A gRPC status as `message (Code)`, so that a code such as `Unavailable` or
/// `DeadlineExceeded` classifies a message that does not say it (`etcdserver: no leader`).
fn describe_status(code: &str, message: &str) -> String {
    let message = message.trim();
    if message.is_empty() {
        return code.to_string();
    }
    let lower = message.to_ascii_lowercase();
    if code == "Cancelled" && lower.contains("timeout expired") {
        // tonic's request timeout.
        return format!("{message} (request timed out)");
    }
    if code == "Unknown" {
        return message.to_string();
    }
    format!("{message} ({code})")
}

/// `head`, then every cause of `err` that says something new.
fn with_sources(head: &str, err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = head.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // tonic wraps causes in a `transport error` that says nothing by itself.
        let says_something = !cause_text.is_empty() && cause_text != "transport error";
        if says_something && !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use etcd_operator_actors::ports::EtcdErrorKind;

    use super::*;

    fn kind(code: &str, message: &str) -> EtcdErrorKind {
        EtcdError::classify(describe_status(code, message)).kind
    }

    #[test]
    fn etcd_status_messages_classify_by_what_etcd_said() {
        use EtcdErrorKind::*;
        assert_eq!(
            kind("Unavailable", "etcdserver: unhealthy cluster"),
            UnhealthyCluster
        );
        assert_eq!(
            kind(
                "FailedPrecondition",
                "etcdserver: can only promote a learner member which is in sync with leader"
            ),
            LearnerNotReady
        );
        assert_eq!(
            kind(
                "FailedPrecondition",
                "etcdserver: too many learner members in cluster"
            ),
            TooManyLearners
        );
        assert_eq!(
            kind("NotFound", "etcdserver: member not found"),
            MemberNotFound
        );
        assert_eq!(
            kind("FailedPrecondition", "etcdserver: Peer URLs already exists"),
            Rejected
        );
        assert_eq!(
            kind(
                "FailedPrecondition",
                "etcdserver: re-configuration failed due to not enough started members"
            ),
            Rejected
        );
    }

    #[test]
    fn status_codes_classify_messages_that_do_not_say_what_went_wrong() {
        use EtcdErrorKind::*;
        assert_eq!(kind("Unavailable", "etcdserver: no leader"), Unavailable);
        assert_eq!(
            kind("Unavailable", "etcdserver: leader changed"),
            Unavailable
        );
        assert_eq!(
            kind("Unavailable", "etcdserver: request timed out"),
            Timeout
        );
        assert_eq!(
            kind("DeadlineExceeded", "context deadline exceeded"),
            Timeout
        );
        assert_eq!(kind("Cancelled", "Timeout expired"), Timeout);
        assert_eq!(kind("Unavailable", ""), Unavailable);
    }

    #[test]
    fn status_messages_keep_what_etcd_said_first() {
        assert_eq!(
            describe_status("Unavailable", "etcdserver: unhealthy cluster"),
            "etcdserver: unhealthy cluster (Unavailable)"
        );
        assert_eq!(describe_status("Unknown", "boom"), "boom");
    }

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    #[test]
    fn transport_errors_say_their_causes_without_tonic_wrappers() {
        // What tonic reports when nothing listens on the endpoint.
        let refused = Layer(
            "transport error",
            Some(Box::new(Layer(
                "tcp connect error",
                Some(Box::new(Layer(
                    "transport error",
                    Some(Box::new(Layer("Connection refused (os error 111)", None))),
                ))),
            ))),
        );
        let text = with_sources("transport error", &refused);
        assert_eq!(
            text,
            "transport error: tcp connect error: Connection refused (os error 111)"
        );
        assert_eq!(EtcdError::classify(text).kind, EtcdErrorKind::Unavailable);
    }

    #[test]
    fn endpoint_lists_share_a_client_whatever_their_order() {
        let a = endpoint_key(&["http://b:2379".into(), "http://a:2379".into()]);
        let b = endpoint_key(&[
            "http://a:2379".into(),
            " http://b:2379".into(),
            "http://a:2379".into(),
            String::new(),
        ]);
        assert_eq!(a, b);
        assert_eq!(a, vec!["http://a:2379", "http://b:2379"]);
    }

    #[test]
    fn status_answers_become_member_health() {
        let h = health("3.4.23", 0x8e9e05c52164694d, 42, &["NOSPACE".to_string()]);
        assert!(h.reachable);
        assert_eq!(h.version, "3.4.23".parse().ok());
        assert_eq!(h.leader, Some(0x8e9e05c52164694d));
        assert_eq!(h.raft_index, 42);
        assert!(!h.is_healthy());

        let no_leader = health("3.4.23", 0, 7, &[]);
        assert_eq!(no_leader.leader, None);
        assert!(no_leader.is_healthy());
    }

    #[tokio::test]
    async fn calls_without_endpoints_fail_as_unavailable() {
        let api = EtcdClientApi::new(Duration::from_millis(200));
        let err = api.list(&[]).await.unwrap_err();
        assert_eq!(err.kind, EtcdErrorKind::Unavailable);
    }

    #[tokio::test]
    async fn a_refused_connection_is_an_error_value_and_is_not_cached() {
        let api = EtcdClientApi::new(Duration::from_millis(500));
        // Port 1 on loopback: nothing listens there.
        let err = api.status("http://127.0.0.1:1").await.unwrap_err();
        assert!(
            matches!(
                err.kind,
                EtcdErrorKind::Unavailable | EtcdErrorKind::Timeout
            ),
            "{err:?}"
        );
        assert!(api.lock().is_empty(), "a failed client stays cached");
    }
}
