//! etcd's membership API over the `etcd-client` crate: the actors' [`EtcdApi`] port.
//!
//! [`EtcdClientApi`] keeps one connected [`Client`] per endpoint list and reuses it from call
//! to call; a client whose call failed below etcd (connection refused, timeout, broken
//! transport) is dropped so that the next call connects afresh.
//!
//! The adapter owns the deadline of each call (`--etcd-timeout-ms`): connecting, trying the
//! endpoints one by one and the request itself all fit in it. Every failure comes back as an
//! [`EtcdError`] classified here, once: from the gRPC status code and, within a code, from
//! etcd's exact error descriptions (as etcd's own Go client maps them), or from the kind of
//! transport error.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    AlarmAction, AlarmOptions, AlarmType, Certificate, Client, ConnectOptions, Identity, Member,
    MemberAddOptions, TlsOptions,
};
use etcd_operator_actors::ports::{
    AddedMember, Defragmented, EtcdApi, EtcdError, EtcdErrorKind, MemberList, NewMember,
};
use etcd_operator_core::lifecycle::{Alarm, AlarmKind, KvHash, MemberHealth, MemberView};
use tonic::Code;

use crate::error::with_causes;
use crate::tls::ClientIdentity;

/// How many endpoint lists keep a cached client; past that the cache starts over.
const MAX_CACHED_CLIENTS: usize = 64;

/// Where the operator's client certificate for a TLS cluster comes from, asked at every
/// connection (a renewed certificate is used from the next connection on).
pub type IdentitySource = Arc<dyn Fn() -> Option<ClientIdentity> + Send + Sync>;

/// Where a member is reached, asked at every connection with the host of its URL
/// (`<member>.<cluster>.<ns>.svc`).
pub type AddressSource = Arc<dyn Fn(&str) -> Route + Send + Sync>;

/// How the host of an endpoint URL is dialed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// A member whose pod's address is known: dialed there (TLS still verifies the member
    /// by its name).
    Address(IpAddr),
    /// A member whose pod has no address the operator knows yet: not dialed at all. Its
    /// name is not published yet either, and asking the cluster DNS for it now would put a
    /// miss in the DNS's cache for its negative TTL (5 s and more), during which nobody in
    /// the cluster (a joiner's gate, a joining etcd) could reach this member by name.
    NoAddressYet,
    /// Not a member's name (a Service, an address, a name outside the cluster): dialed by
    /// name.
    ByName,
}

/// A cached client: by endpoint list, the URLs it dialed, the fingerprint of the
/// identity it was made with, and its request timeout.
type ClientKey = (Vec<String>, Vec<String>, u64, Duration);

/// The deadline of one member's defragmentation: it rewrites the whole backend (about a
/// second per GiB on an SSD), within the Cluster actor's tick (60 s by default). One that
/// takes longer is reported failed; etcd finishes it regardless, and the next member waits
/// until this one answers healthy again.
pub const DEFRAGMENT_TIMEOUT: Duration = Duration::from_secs(45);

/// [`EtcdApi`] over gRPC with `etcd-client`.
pub struct EtcdClientApi {
    timeout: Duration,
    clients: Mutex<HashMap<ClientKey, Client>>,
    identity: Option<IdentitySource>,
    addresses: Option<AddressSource>,
}

impl EtcdClientApi {
    /// An API whose every call ends within `timeout`: connecting, trying each endpoint and
    /// the request together (the deadline the [`EtcdApi`] contract promises).
    pub fn new(timeout: Duration) -> Self {
        EtcdClientApi {
            timeout,
            clients: Mutex::new(HashMap::new()),
            identity: None,
            addresses: None,
        }
    }

    /// The same, dialing a member at the address `addresses` gives for its name (TLS still
    /// verifies the member by that name), and not at all while it has none (see [`Route`]).
    /// A name asked of the cluster DNS before the pod's address is published is cached
    /// there as unknown for the DNS's negative TTL (5 to 30 s), so the first calls to every
    /// new member, by the operator and by the other members' pods, would wait that long.
    pub fn with_addresses(mut self, addresses: AddressSource) -> Self {
        self.addresses = Some(addresses);
        self
    }

    /// The same, presenting the client certificate `identity` gives to `https` endpoints
    /// and verifying each member's server certificate against its CAs by the endpoint's
    /// DNS name.
    pub fn with_identity(mut self, identity: IdentitySource) -> Self {
        self.identity = Some(identity);
        self
    }

    /// Connection options; with TLS, the identity to present and, when members are
    /// dialed by address, the name their certificates are verified by.
    fn options(
        &self,
        identity: Option<&ClientIdentity>,
        name: Option<&str>,
        timeout: Duration,
    ) -> ConnectOptions {
        let options = ConnectOptions::new()
            .with_connect_timeout(self.timeout)
            .with_timeout(timeout);
        match identity {
            Some(id) => {
                let tls = TlsOptions::new()
                    .ca_certificate(Certificate::from_pem(&id.ca_pem))
                    .identity(Identity::from_pem(&id.cert_pem, &id.key_pem));
                options.with_tls(match name {
                    Some(name) => tls.domain_name(name),
                    None => tls,
                })
            }
            None => options,
        }
    }

    fn cached(&self, key: &ClientKey) -> Option<Client> {
        self.lock().get(key).cloned()
    }

    fn forget(&self, endpoints: &[String]) {
        self.lock().retain(|(key, _, _, _), _| key != endpoints);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ClientKey, Client>> {
        // A panic while holding the lock cannot leave the map inconsistent.
        self.clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The identity for `endpoints`: none for plain HTTP; for `https`, the source's, or an
    /// error when there is none yet (the cluster's Secrets are not usable).
    fn identity_for(
        &self,
        endpoints: &[String],
    ) -> Result<Option<ClientIdentity>, etcd_client::Error> {
        if !endpoints.iter().any(|e| e.starts_with("https://")) {
            return Ok(None);
        }
        match self.identity.as_ref().and_then(|source| source()) {
            Some(identity) => Ok(Some(identity)),
            None => Err(etcd_client::Error::InvalidArgs(
                "no client certificate for this TLS cluster (its Secrets are not usable yet)"
                    .into(),
            )),
        }
    }

    /// The URLs `endpoints` are dialed at.
    fn plan(&self, endpoints: &[String]) -> DialPlan {
        match &self.addresses {
            Some(addresses) => dial_plan(endpoints, addresses.as_ref()),
            None => DialPlan::by_name(endpoints),
        }
    }

    async fn client(
        &self,
        endpoints: &[String],
        plan: DialPlan,
        timeout: Duration,
    ) -> Result<Client, etcd_client::Error> {
        let identity = self.identity_for(endpoints)?;
        let key = (
            endpoints.to_vec(),
            plan.urls.clone(),
            identity.as_ref().map_or(0, ClientIdentity::fingerprint),
            timeout,
        );
        if let Some(client) = self.cached(&key) {
            return Ok(client);
        }
        let options = self.options(identity.as_ref(), plan.name.as_deref(), timeout);
        let client = Client::connect(&plan.urls, Some(options)).await?;
        let mut clients = self.lock();
        if clients.len() >= MAX_CACHED_CLIENTS {
            clients.clear();
        }
        Ok(clients.entry(key).or_insert(client).clone())
    }

    /// Runs `call` with a client for `endpoints`, every try within one deadline of the
    /// timeout; the client is dropped from the cache unless etcd itself answered. When the connection to the
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
        self.call_within(what, endpoints, self.timeout, call).await
    }

    /// [`Self::call`] with a deadline of `timeout` instead of the API's own.
    async fn call_within<T, F, Fut>(
        &self,
        what: &str,
        endpoints: &[String],
        timeout: Duration,
        call: F,
    ) -> Result<T, EtcdError>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let key = endpoint_key(endpoints);
        if key.is_empty() {
            return Err(EtcdError::new(
                EtcdErrorKind::Unavailable,
                format!("{what}: no endpoints to connect to"),
            ));
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let mut result = self.attempt(what, &key, (deadline, timeout), &call).await;
        if key.len() > 1 {
            for single in &key {
                match &result {
                    Err((error, true)) if error.kind != EtcdErrorKind::Timeout => {}
                    _ => break,
                }
                result = self
                    .attempt(
                        what,
                        std::slice::from_ref(single),
                        (deadline, timeout),
                        &call,
                    )
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
        (deadline, timeout): (tokio::time::Instant, Duration),
        call: &F,
    ) -> Result<T, (EtcdError, bool)>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let plan = self.plan(key);
        if plan.urls.is_empty() {
            let message = format!(
                "{what}: {}: no address known yet (the pod has none): not dialed",
                key.join(", ")
            );
            return Err((EtcdError::new(EtcdErrorKind::Unavailable, message), true));
        }
        let attempt = async {
            let client = self.client(key, plan, timeout).await?;
            call(client).await
        };
        match tokio::time::timeout_at(deadline, attempt).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => {
                if !answered_by_etcd(&err) {
                    self.forget(key);
                }
                let error = EtcdError::new(classify(&err), describe(&err));
                Err((error, unsent(&err)))
            }
            Err(_) => {
                self.forget(key);
                Err((EtcdError::timeout(what, timeout), false))
            }
        }
    }
}

impl std::fmt::Debug for EtcdClientApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClientApi")
            .field("timeout", &self.timeout)
            .field("tls", &self.identity.is_some())
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

    async fn add(&self, endpoints: &[String], new: &NewMember) -> Result<AddedMember, EtcdError> {
        let urls = vec![new.peer_url.clone()];
        let learner = new.learner;
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
            let mut health = health(resp.version(), resp.leader(), resp.errors());
            health.db_size = u64::try_from(resp.db_size()).ok();
            health.db_size_in_use = u64::try_from(resp.raft_used_db_size())
                .ok()
                .filter(|in_use| *in_use > 0);
            health.cluster_id = resp.header().map(|h| h.cluster_id());
            health.revision = resp.header().map(|h| h.revision());
            health.raft_index = Some(resp.raft_index());
            Ok(health)
        })
        .await
    }

    async fn disarm_alarm(&self, endpoints: &[String], alarm: Alarm) -> Result<(), EtcdError> {
        let kind = match alarm.kind {
            AlarmKind::NoSpace => AlarmType::Nospace,
            AlarmKind::Corrupt => AlarmType::Corrupt,
        };
        self.call("alarm disarm", endpoints, |mut client| async move {
            let mut options = AlarmOptions::new();
            options.with_member(alarm.member);
            client
                .alarm(AlarmAction::Deactivate, kind, Some(options))
                .await
                .map(|_| ())
        })
        .await
    }

    async fn compact(&self, endpoints: &[String], revision: i64) -> Result<(), EtcdError> {
        self.call("compact", endpoints, |mut client| async move {
            match client.compact(revision, None).await {
                Err(etcd_client::Error::GRpcStatus(status)) if already_compacted(&status) => Ok(()),
                answer => answer.map(|_| ()),
            }
        })
        .await
    }

    async fn hash_kv(&self, endpoint: &str, revision: i64) -> Result<KvHash, EtcdError> {
        let endpoints = [endpoint.to_string()];
        self.call("hash kv", &endpoints, |mut client| async move {
            let resp = client.hash_kv(revision).await?;
            Ok(KvHash {
                hash: resp.hash(),
                compact_revision: resp.compact_version(),
            })
        })
        .await
    }

    async fn defragment(&self, endpoint: &str) -> Result<Defragmented, EtcdError> {
        let endpoints = [endpoint.to_string()];
        let size = |health: Result<MemberHealth, EtcdError>| health.ok().and_then(|h| h.db_size);
        let before = size(self.status(endpoint).await);
        self.call_within(
            "defrag",
            &endpoints,
            DEFRAGMENT_TIMEOUT,
            |mut client| async move { client.defragment().await.map(|_| ()) },
        )
        .await?;
        let after = size(self.status(endpoint).await);
        Ok(Defragmented { before, after })
    }

    async fn move_leader(&self, leader: &str, to: u64) -> Result<(), EtcdError> {
        let endpoints = [leader.to_string()];
        self.call("move leader", &endpoints, |mut client| async move {
            client.move_leader(to).await.map(|_| ())
        })
        .await
    }
}

/// The URLs a client dials for an endpoint list, and the name TLS verifies members by
/// when some are dialed by address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DialPlan {
    /// The URLs to dial.
    pub(crate) urls: Vec<String>,
    /// The name TLS verifies members by, when some are dialed by address.
    pub(crate) name: Option<String>,
}

impl DialPlan {
    pub(crate) fn by_name(endpoints: &[String]) -> Self {
        DialPlan {
            urls: endpoints.to_vec(),
            name: None,
        }
    }
}

/// Each endpoint `scheme://host:port` whose host `route` gives an address becomes
/// `scheme://address:port`; the first such host is the name TLS verifies every member by
/// (one client per list; members' certificates cover every member's name, as CoreOS's
/// wildcard `*.<cluster>.<ns>.svc` does). Members with no address yet are left out;
/// other hosts are dialed by name.
pub(crate) fn dial_plan(
    endpoints: &[String],
    route: &(dyn Fn(&str) -> Route + Send + Sync),
) -> DialPlan {
    let mut name = None;
    let urls = endpoints
        .iter()
        .filter_map(|endpoint| {
            let Some((_, rest)) = endpoint.split_once("://") else {
                return Some(endpoint.clone());
            };
            let (host, _) = rest.rsplit_once(':').unwrap_or((rest, ""));
            Some(match route(host) {
                Route::NoAddressYet => return None,
                Route::Address(ip) => {
                    name.get_or_insert_with(|| host.to_string());
                    at_address(endpoint, ip)?
                }
                Route::ByName => endpoint.clone(),
            })
        })
        .collect();
    DialPlan { urls, name }
}

/// `scheme://host[:port]` with `ip` for its host; `None` when it is not of that form.
pub(crate) fn at_address(endpoint: &str, ip: IpAddr) -> Option<String> {
    let (scheme, rest) = endpoint.split_once("://")?;
    let port = match rest.rsplit_once(':') {
        Some((_, port)) if !port.contains(']') => Some(port),
        _ => None,
    };
    let ip = match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    };
    Some(match port {
        Some(port) => format!("{scheme}://{ip}:{port}"),
        None => format!("{scheme}://{ip}"),
    })
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
fn health(version: &str, leader: u64, errors: &[String]) -> MemberHealth {
    let (mut alarms, mut others) = (Vec::new(), Vec::new());
    for error in errors {
        match alarm(error) {
            Some(raised) => alarms.push(raised),
            None => others.push(error.clone()),
        }
    }
    MemberHealth {
        reachable: true,
        version: version.parse().ok(),
        leader: (leader != 0).then_some(leader),
        errors: others,
        alarms,
        db_size: None,
        db_size_in_use: None,
        cluster_id: None,
        raft_index: None,
        revision: None,
    }
}

/// The alarm one entry of a status's errors stands for, if it is one. etcd lists every
/// raised alarm there as its protobuf text, `memberID:<decimal id> alarm:<NAME>`; an alarm
/// raised for no member (member 0: a CORRUPT whose members etcd could not tell apart) has
/// no `memberID`, as protobuf's text leaves zeroes out.
fn alarm(error: &str) -> Option<Alarm> {
    let field = |name: &str| {
        error
            .split_whitespace()
            .find_map(|word| word.strip_prefix(name)?.strip_prefix(':'))
    };
    let kind = match field("alarm")? {
        "NOSPACE" => AlarmKind::NoSpace,
        "CORRUPT" => AlarmKind::Corrupt,
        _ => return None,
    };
    let member = match field("memberID") {
        Some(id) => id.parse().ok()?,
        None => 0,
    };
    Some(Alarm { member, kind })
}

/// etcd's descriptions of the errors the operator tells apart (`rpctypes` in etcd's API).
mod desc {
    pub const UNHEALTHY_CLUSTER: &str = "etcdserver: unhealthy cluster";
    pub const LEARNER_NOT_READY: &str =
        "etcdserver: can only promote a learner member which is in sync with leader";
    pub const TOO_MANY_LEARNERS: &str = "etcdserver: too many learner members in cluster";
    pub const MEMBER_NOT_FOUND: &str = "etcdserver: member not found";
    pub const NOT_SUPPORTED_FOR_LEARNER: &str = "etcdserver: rpc not supported for learner";
    /// A compaction to a revision the history was already compacted past.
    pub const COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";
    /// etcd's own request timeouts, all with code `Unavailable`.
    pub const TIMEOUTS: [&str; 3] = [
        "etcdserver: request timed out",
        "etcdserver: request timed out, possibly due to previous leader failure",
        "etcdserver: request timed out, possibly due to connection lost",
    ];
}

/// Whether etcd refused a compaction because its history was compacted past it already.
fn already_compacted(status: &tonic::Status) -> bool {
    status.code() == Code::OutOfRange && status.message() == desc::COMPACTED
}

/// What kind of failure `err` is: by gRPC code, then etcd's exact description within it;
/// failures below gRPC (transport, IO) are `Unavailable`.
fn classify(err: &etcd_client::Error) -> EtcdErrorKind {
    match err {
        etcd_client::Error::GRpcStatus(status) => classify_status(status),
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => {
            EtcdErrorKind::Unavailable
        }
        _ => EtcdErrorKind::Rejected,
    }
}

fn classify_status(status: &tonic::Status) -> EtcdErrorKind {
    use EtcdErrorKind::*;
    let description = status.message();
    match status.code() {
        Code::Unavailable if description == desc::UNHEALTHY_CLUSTER => UnhealthyCluster,
        Code::Unavailable if desc::TIMEOUTS.contains(&description) => Timeout,
        Code::Unavailable => Unavailable,
        Code::FailedPrecondition if description == desc::LEARNER_NOT_READY => LearnerNotReady,
        Code::FailedPrecondition if description == desc::TOO_MANY_LEARNERS => TooManyLearners,
        Code::NotFound if description == desc::MEMBER_NOT_FOUND => MemberNotFound,
        Code::DeadlineExceeded => Timeout,
        // tonic's own request timeout is a cancellation caused by `TimeoutExpired`; any
        // other cancellation on the client side is a connection that went away.
        Code::Cancelled if caused_by::<tonic::TimeoutExpired>(status) => Timeout,
        Code::Cancelled => Unavailable,
        Code::Unknown if below_grpc(status) => Unavailable,
        _ => Rejected,
    }
}

/// Whether the call failed before anything reached a voting member: the connection could
/// not be made (a name that does not resolve yet, a refused or failed connect), or the
/// balancer picked a learner, which serves no cluster-wide calls.
fn unsent(err: &etcd_client::Error) -> bool {
    match err {
        etcd_client::Error::GRpcStatus(status) => {
            (status.code() == Code::Unavailable
                && status.message() == desc::NOT_SUPPORTED_FOR_LEARNER)
                || connect_failed(status)
        }
        etcd_client::Error::TransportError(e) => connect_failed(e),
        etcd_client::Error::IoError(e) => connect_failed(e),
        _ => false,
    }
}

/// Whether a connection attempt failed somewhere in `err`'s causes.
fn connect_failed(err: &(dyn std::error::Error + 'static)) -> bool {
    causes(err).any(|cause| {
        cause.is::<tonic::ConnectError>()
            || cause
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
    })
}

/// Whether one of `err`'s causes is a `T`.
fn caused_by<T: std::error::Error + 'static>(err: &(dyn std::error::Error + 'static)) -> bool {
    causes(err).any(|cause| cause.is::<T>())
}

/// Whether a status was made on this side from a failure below gRPC (transport, IO).
fn below_grpc(status: &tonic::Status) -> bool {
    causes(status).any(|cause| {
        cause.is::<tonic::transport::Error>()
            || cause.is::<tonic::ConnectError>()
            || cause.is::<std::io::Error>()
    })
}

/// `err` and its causes, outermost first.
fn causes<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(err), |e| e.source())
}

/// Whether etcd itself refused the call (the connection is fine), rather than the transport:
/// every error etcd sends describes itself with the `etcdserver:` prefix.
fn answered_by_etcd(err: &etcd_client::Error) -> bool {
    matches!(err, etcd_client::Error::GRpcStatus(status) if status.message().starts_with("etcdserver:"))
}

/// The error for people.
///
/// `etcd-client`'s own `Display` is unhelpful for the two cases that matter: a gRPC status
/// prints with its metadata, and a transport error prints only `transport error`.
pub(crate) fn describe(err: &etcd_client::Error) -> String {
    match err {
        etcd_client::Error::GRpcStatus(status) => {
            let message = with_causes(status.message(), status);
            describe_status(status.code(), &message)
        }
        etcd_client::Error::TransportError(e) => with_causes("transport error", e),
        etcd_client::Error::IoError(e) => with_causes(&format!("io error: {e}"), e),
        other => other.to_string(),
    }
}

/// A gRPC status as `message (Code)`.
fn describe_status(code: Code, message: &str) -> String {
    let message = message.trim();
    if message.is_empty() {
        return format!("{code:?}");
    }
    if code == Code::Unknown {
        return message.to_string();
    }
    format!("{message} ({code:?})")
}

#[cfg(test)]
mod tests {
    use etcd_operator_actors::ports::EtcdErrorKind;

    use super::*;

    fn known(host: &str) -> Route {
        match host {
            "a.demo.prod.svc" => Route::Address(IpAddr::from([10, 244, 1, 5])),
            "b.demo.prod.svc" => Route::Address("fd00::7".parse().unwrap()),
            "c.demo.prod.svc" => Route::NoAddressYet,
            _ => Route::ByName,
        }
    }

    #[test]
    fn members_whose_pod_address_is_known_are_dialed_by_it_and_verified_by_their_name() {
        let endpoints = [
            "https://demo-client.prod.svc:2379".to_string(),
            "https://a.demo.prod.svc:2379".to_string(),
            "https://b.demo.prod.svc:2379".to_string(),
        ];
        let plan = dial_plan(&endpoints, &known);
        assert_eq!(
            plan.urls,
            [
                "https://demo-client.prod.svc:2379",
                "https://10.244.1.5:2379",
                "https://[fd00::7]:2379"
            ]
        );
        assert_eq!(plan.name.as_deref(), Some("a.demo.prod.svc"));
    }

    #[test]
    fn a_member_with_no_address_yet_is_left_out_and_other_names_are_left_to_dns() {
        let endpoints = [
            "http://c.demo.prod.svc:2379".to_string(),
            "http://a.demo.prod.svc:2379".to_string(),
        ];
        let plan = dial_plan(&endpoints, &known);
        assert_eq!(plan.urls, ["http://10.244.1.5:2379"]);
        let service = ["http://demo-client.prod.svc:2379".to_string()];
        assert_eq!(dial_plan(&service, &known), DialPlan::by_name(&service));
    }

    /// The operator's etcd calls reproduced what was seen on a live cluster: the first
    /// health check of a new seed, made before the operator's pod cache held the pod's
    /// address, asked the cluster DNS for the seed's name, which was not published yet;
    /// the DNS cached the miss for 5 s and the first joiner's gate, asking by that name,
    /// waited it out. A member with no address yet is now not dialed at all.
    #[tokio::test]
    async fn a_call_to_members_with_no_address_yet_fails_at_once_without_dialing() {
        let addresses: AddressSource = Arc::new(known);
        let api = EtcdClientApi::new(Duration::from_secs(30)).with_addresses(addresses);
        let endpoints = ["http://c.demo.prod.svc:2379".to_string()];
        let error = api.status(&endpoints[0]).await.unwrap_err();
        assert_eq!(error.kind, EtcdErrorKind::Unavailable, "{error}");
        assert!(
            error.to_string().contains("no address known yet"),
            "{error}"
        );
        let error = api.list(&endpoints).await.unwrap_err();
        assert!(error.to_string().contains("not dialed"), "{error}");
        // Nothing was dialed: no client was made.
        assert_eq!(api.lock().len(), 0);
    }

    /// The kind of a status etcd (or tonic) answered with `code` and `message`.
    fn kind(code: Code, message: &str) -> EtcdErrorKind {
        classify(&status(code, message))
    }

    fn status(code: Code, message: &str) -> etcd_client::Error {
        etcd_client::Error::GRpcStatus(tonic::Status::new(code, message))
    }

    /// A status tonic makes on this side from `cause`, as it does for a failed call.
    fn status_from(cause: impl std::error::Error + Send + Sync + 'static) -> etcd_client::Error {
        etcd_client::Error::GRpcStatus(tonic::Status::from_error(Box::new(cause)))
    }

    fn refused() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused")
    }

    /// Each `(code, message, kind)` classifies as `kind`.
    fn assert_kinds(cases: &[(Code, &str, EtcdErrorKind)]) {
        for (code, message, want) in cases {
            assert_eq!(kind(*code, message), *want, "{code:?} {message:?}");
        }
    }

    #[test]
    fn etcd_status_messages_classify_by_what_etcd_said() {
        use Code::{FailedPrecondition, NotFound, Unavailable};
        use EtcdErrorKind::*;
        assert_kinds(&[
            (
                Unavailable,
                "etcdserver: unhealthy cluster",
                UnhealthyCluster,
            ),
            (
                FailedPrecondition,
                "etcdserver: can only promote a learner member which is in sync with leader",
                LearnerNotReady,
            ),
            (
                FailedPrecondition,
                "etcdserver: too many learner members in cluster",
                TooManyLearners,
            ),
            (NotFound, "etcdserver: member not found", MemberNotFound),
            (
                FailedPrecondition,
                "etcdserver: Peer URLs already exists",
                Rejected,
            ),
            (
                FailedPrecondition,
                "etcdserver: re-configuration failed due to not enough started members",
                Rejected,
            ),
            // Promoting a voter is refused for good, not "not ready yet".
            (
                FailedPrecondition,
                "etcdserver: can only promote a learner member",
                Rejected,
            ),
        ]);
    }

    #[test]
    fn a_description_counts_only_under_the_code_etcd_sends_it_with() {
        use Code::{FailedPrecondition, InvalidArgument};
        use EtcdErrorKind::*;
        assert_kinds(&[
            (InvalidArgument, "etcdserver: unhealthy cluster", Rejected),
            (
                Code::Unavailable,
                "etcdserver: member not found",
                Unavailable,
            ),
            (
                Code::Unavailable,
                "etcdserver: too many learner members in cluster",
                Unavailable,
            ),
            (
                FailedPrecondition,
                "member not found, etcdserver said",
                Rejected,
            ),
        ]);
    }

    #[test]
    fn status_codes_classify_messages_that_do_not_say_what_went_wrong() {
        use Code::{DeadlineExceeded, PermissionDenied, Unknown};
        use EtcdErrorKind::*;
        assert_kinds(&[
            (Code::Unavailable, "etcdserver: no leader", Unavailable),
            (Code::Unavailable, "etcdserver: leader changed", Unavailable),
            (Code::Unavailable, "etcdserver: request timed out", Timeout),
            (
                Code::Unavailable,
                "etcdserver: request timed out, possibly due to previous leader failure",
                Timeout,
            ),
            (DeadlineExceeded, "context deadline exceeded", Timeout),
            (Code::Unavailable, "", Unavailable),
            (Unknown, "boom", Rejected),
            (PermissionDenied, "etcdserver: permission denied", Rejected),
        ]);
    }

    #[test]
    fn tonics_own_timeout_is_a_timeout_and_other_cancellations_are_unavailable() {
        let timed_out = status_from(tonic::TimeoutExpired(()));
        assert_eq!(classify(&timed_out), EtcdErrorKind::Timeout);
        assert_eq!(describe(&timed_out), "Timeout expired (Cancelled)");
        assert_eq!(
            kind(Code::Cancelled, "operation was canceled"),
            EtcdErrorKind::Unavailable
        );
    }

    #[test]
    fn failures_below_grpc_are_unavailable() {
        let connect = status_from(tonic::ConnectError(Box::new(refused())));
        assert_eq!(classify(&connect), EtcdErrorKind::Unavailable);
        let io = etcd_client::Error::IoError(refused());
        assert_eq!(classify(&io), EtcdErrorKind::Unavailable);
        // A status tonic could not map, made from an IO failure on this side.
        let unknown = etcd_client::Error::GRpcStatus(tonic::Status::from_error(Box::new(
            std::io::Error::other("stream broke"),
        )));
        assert_eq!(classify(&unknown), EtcdErrorKind::Unavailable);
        let ours = etcd_client::Error::InvalidArgs("no new member".into());
        assert_eq!(classify(&ours), EtcdErrorKind::Rejected);
    }

    #[test]
    fn nothing_was_sent_when_the_connection_failed_or_a_learner_answered() {
        let connect = status_from(tonic::ConnectError(Box::new(refused())));
        assert!(unsent(&connect));
        assert!(unsent(&etcd_client::Error::IoError(refused())));
        assert!(unsent(&status(
            Code::Unavailable,
            "etcdserver: rpc not supported for learner"
        )));
        // etcd answered: the call reached a voting member.
        assert!(!unsent(&status(
            Code::Unavailable,
            "etcdserver: unhealthy cluster"
        )));
        assert!(!unsent(&status(Code::Unavailable, "etcdserver: no leader")));
        assert!(!unsent(&status_from(tonic::TimeoutExpired(()))));
        // The same words under another code are not etcd's learner refusal.
        assert!(!unsent(&status(
            Code::Unknown,
            "etcdserver: rpc not supported for learner"
        )));
    }

    #[test]
    fn status_messages_keep_what_etcd_said_first() {
        assert_eq!(
            describe_status(Code::Unavailable, "etcdserver: unhealthy cluster"),
            "etcdserver: unhealthy cluster (Unavailable)"
        );
        assert_eq!(describe_status(Code::Unknown, "boom"), "boom");
        assert_eq!(describe_status(Code::Unavailable, " "), "Unavailable");
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
        let text = with_causes("transport error", &refused);
        assert_eq!(
            text,
            "transport error: tcp connect error: Connection refused (os error 111)"
        );
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
        let h = health(
            "3.4.23",
            0x8e9e05c52164694d,
            &["etcdserver: no leader".to_string()],
        );
        assert!(h.reachable);
        assert_eq!(h.version, "3.4.23".parse().ok());
        assert_eq!(h.leader, Some(0x8e9e05c52164694d));
        assert!(!h.is_healthy());

        let no_leader = health("3.4.23", 0, &[]);
        assert_eq!(no_leader.leader, None);
        assert!(no_leader.is_healthy());
    }

    #[test]
    fn an_alarm_in_a_status_is_an_alarm_not_an_error() {
        let errors = [
            "memberID:10276657743932975437 alarm:NOSPACE ".to_string(),
            "memberID:2 alarm:CORRUPT".to_string(),
            "memberID:3 alarm:SOMETHING_NEW".to_string(),
        ];
        let h = health("3.5.17", 2, &errors);
        assert_eq!(
            h.alarms,
            [
                Alarm {
                    member: 10276657743932975437,
                    kind: AlarmKind::NoSpace
                },
                Alarm {
                    member: 2,
                    kind: AlarmKind::Corrupt
                },
            ]
        );
        assert_eq!(h.errors, ["memberID:3 alarm:SOMETHING_NEW"]);
        assert!(!h.is_healthy(), "an alarm it does not know stays an error");
        assert!(health("3.5.17", 2, &errors[..2]).is_healthy());
    }

    #[test]
    fn an_alarm_etcd_raised_for_no_member_is_an_alarm_not_an_error() {
        // etcd raises CORRUPT for member 0 when it cannot tell which members differ, and
        // protobuf's text leaves the zero out.
        let h = health("3.5.35", 2, &["alarm:CORRUPT ".to_string()]);
        assert_eq!(
            h.alarms,
            [Alarm {
                member: 0,
                kind: AlarmKind::Corrupt
            }]
        );
        assert!(h.is_healthy(), "{h:?}");
    }

    #[tokio::test]
    async fn calls_without_endpoints_fail_as_unavailable() {
        let api = EtcdClientApi::new(Duration::from_millis(200));
        let err = api.list(&[]).await.unwrap_err();
        assert_eq!(err.kind, EtcdErrorKind::Unavailable);
    }

    #[tokio::test]
    async fn a_refused_connection_is_unavailable_and_is_not_cached() {
        let api = EtcdClientApi::new(Duration::from_millis(500));
        // Port 1 on loopback: nothing listens there.
        let err = api.status("http://127.0.0.1:1").await.unwrap_err();
        assert_eq!(err.kind, EtcdErrorKind::Unavailable, "{err:?}");
        assert!(api.lock().is_empty(), "a failed client stays cached");
    }

    #[tokio::test]
    async fn a_refused_connection_is_known_from_the_error_to_have_sent_nothing() {
        // What decides whether the other endpoints are tried alone, on a real error.
        let api = EtcdClientApi::new(Duration::from_millis(500));
        let key = endpoint_key(&["http://127.0.0.1:1".into()]);
        let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
        let result = api
            .attempt(
                "member list",
                &key,
                (deadline, Duration::from_millis(500)),
                &|mut client: Client| async move { client.member_list().await },
            )
            .await;
        let (error, unsent) = result.expect_err("nothing listens");
        assert!(unsent, "a refused connection sent nothing: {error:?}");
        assert_eq!(error.kind, EtcdErrorKind::Unavailable);
    }

    #[tokio::test]
    async fn a_member_that_accepts_but_never_answers_costs_one_deadline() {
        // A listener that accepts connections and never speaks: a frozen member.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let deadline = Duration::from_millis(300);
        let api = EtcdClientApi::new(deadline);
        let started = std::time::Instant::now();
        let err = api.status(&endpoint).await.unwrap_err();
        let took = started.elapsed();
        assert_eq!(err.kind, EtcdErrorKind::Timeout, "{err:?}");
        assert!(took >= deadline, "{took:?}");
        // Generous: the deadline, not the kernel's TCP timeouts, ended the call.
        assert!(took < deadline * 10, "{took:?}");
        drop(listener);
    }
}
