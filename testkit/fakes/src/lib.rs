//! In-memory fakes of the ports, for tests and benchmarks.
//!
//! A [`FakeCluster`] simulates both sides of one EtcdCluster at once: the Kubernetes
//! objects ([`ClusterApi`]: pods, Services, status, Events) and the etcd cluster running in
//! those pods ([`EtcdApi`]: the member list, `member add/remove/promote`, `endpoint status`).
//! The two sides are tied together the way they are in a real cluster: creating a member's
//! pod starts the member, a killed pod's member stops answering, and a member reports the
//! version of its pod's image.
//!
//! It is a cheap cloneable handle (`Arc<Mutex<..>>`), so a test keeps one clone to inject
//! faults and inspect the world while the actors use another. Knobs:
//!
//! - [`FakeCluster::kill_member`]: the pod fails, the member stays in etcd, unreachable;
//! - [`FakeCluster::fail_next_add`]: errors returned by the next `member add` calls;
//! - [`FakeCluster::set_hang`]: etcd calls hang until their deadline, then fail as timed
//!   out (the [`EtcdApi`] contract: every call ends within its deadline);
//! - [`FakeCluster::set_call_timeout`]: that per-call deadline ([`FAKE_CALL_TIMEOUT`] by
//!   default); a latency past it times out too;
//! - [`FakeCluster::set_kube_hang`]: `observe` never returns (a hung API call);
//! - [`FakeCluster::refuse_pod_creation`]: every pod creation is refused with an error
//!   (a namespace being deleted, a quota, a policy);
//! - [`FakeCluster::set_latency`]: etcd calls take this long (to expose overlapping calls);
//! - [`FakeCluster::set_service_latency`]: making one of the Services takes this long;
//! - [`FakeCluster::refuse_service`]: making one of the Services fails with an error;
//! - [`FakeCluster::panic_on_next_observe`]: the next `observe` panics once;
//! - [`FakeCluster::calls`]: call counters, with the most calls ever in flight at once.
//!
//! [`FakeWiring`] hands out one `FakeCluster` per [`Topology`] to a Supervisor.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use etcd_operator_actors::ports::{
    AddedMember, ApiError, ClusterApi, Defragmented, EtcdApi, EtcdError, EtcdErrorKind,
    EventRecord, InitialState, KubeView, MemberList, MemberPod, NewMember, ServiceKind,
    VersionChange,
};
use etcd_operator_core::lifecycle::{
    Alarm, BootstrapRecord, CaRotationStep, Claim, ClaimPhase, KvHash, MemberHealth, MemberView,
    PodPhase, PodView, Recorded, RecoveryRecord, SnapshotSource, TlsMode, TlsObservation, Version,
    check_fence,
};

/// Where a Service's state sits in the fake's per-Service arrays.
fn service_index(service: ServiceKind) -> usize {
    match service {
        ServiceKind::Headless => 0,
        ServiceKind::Client => 1,
    }
}
use etcd_operator_actors::supervisor::ClusterWiring;
use etcd_operator_core::report::StatusReport;
use etcd_operator_core::topology::Topology;

/// How many times each fake call was made, and the most calls that were ever in flight at
/// the same time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// `ClusterApi::observe`.
    pub observe: u64,
    /// `ClusterApi::ensure_service`, either kind.
    pub ensure_services: u64,
    /// `ClusterApi::set_disruption_budget`.
    pub set_disruption_budget: u64,
    /// `ClusterApi::expand_claim` (the fake has no claims: never called by the lifecycle).
    pub expand_claim: u64,
    /// `ClusterApi::create_member_pod`.
    pub create_member_pod: u64,
    /// `ClusterApi::delete_pod`.
    pub delete_pod: u64,
    /// `ClusterApi::recreate_pod`.
    pub recreate_pod: u64,
    /// `ClusterApi::set_pod_version`.
    pub set_pod_version: u64,
    /// `ClusterApi::publish_status`.
    pub publish_status: u64,
    /// `ClusterApi::record_event`.
    pub record_event: u64,
    /// `EtcdApi::list`.
    pub list: u64,
    /// `EtcdApi::add`, failed calls included.
    pub add: u64,
    /// `EtcdApi::remove`, failed calls included.
    pub remove: u64,
    /// `EtcdApi::promote`, failed calls included.
    pub promote: u64,
    /// `EtcdApi::move_leader`.
    pub move_leader: u64,
    /// `EtcdApi::disarm_alarm`.
    pub disarm_alarm: u64,
    /// `EtcdApi::compact`: the revisions asked for.
    pub compact: Vec<i64>,
    /// `EtcdApi::defragment`: the endpoints asked for.
    pub defragment: Vec<String>,
    /// `EtcdApi::status`.
    pub status: u64,
    /// Most etcd calls (of any kind) in flight at once.
    pub max_etcd_in_flight: usize,
    /// Most membership changes (`add`, `remove`, `promote`) in flight at once.
    pub max_membership_in_flight: usize,
}

impl CallCounts {
    /// Membership changes attempted: `add + remove + promote`.
    pub fn membership_changes(&self) -> u64 {
        self.add + self.remove + self.promote
    }
}

/// The simulated world of one cluster.
#[derive(Debug, Default)]
struct World {
    pods: Vec<PodView>,
    members: Vec<MemberView>,
    /// Which Services exist, headless and client ([`service_index`]).
    services: [bool; 2],
    /// The PodDisruptionBudget's `minAvailable`, once set.
    disruption_budget: Option<u32>,
    /// The status as the real adapter keeps it: written by `publish_status` and
    /// `record_bootstrap`, read back by `observe`.
    recorded: Recorded,
    /// etcd's cluster ID, set when the seed forms the cluster.
    cluster_id: u64,
    next_id: u64,
    created_pods: Vec<MemberPod>,
    last_status: Option<StatusReport>,
    events: Vec<EventRecord>,
    /// For each Event, how many observations had been made when it was raised: Events
    /// of one tick share the number.
    event_ticks: Vec<u64>,
    add_errors: VecDeque<EtcdError>,
    hang: bool,
    /// Deadline of one etcd call; `None` (a fresh world) means [`FAKE_CALL_TIMEOUT`].
    call_timeout: Option<Duration>,
    kube_hang: bool,
    /// The error every `create_member_pod` returns, while set.
    pod_creation_refused: Option<ApiError>,
    /// Joiners' pods are made before their member add (as the real adapter does when it
    /// knows the operator's image).
    prepares_joiners: bool,
    /// Versions whose image cannot be run (pulled): a pod set to one does not serve.
    unrunnable: Vec<String>,
    latency: Duration,
    /// How long `ensure_service` takes before each Service exists.
    service_latency: [Duration; 2],
    /// The error every `ensure_service` of each kind returns, while set.
    services_refused: [Option<ApiError>; 2],
    panic_next_observe: bool,
    /// Members the operator cannot reach while the rest of the cluster (and the kubelet)
    /// can: a network split between the operator and one member.
    cut_off: Vec<String>,
    calls: CallCounts,
    /// The member a `move_leader` made the leader, while it serves.
    moved_leader: Option<u64>,
    /// The alarms etcd has raised, reported by every member's status, with each
    /// member's backend size (a member not listed reports none).
    alarms: Vec<Alarm>,
    /// Each member's backend size in bytes, by member name.
    db_sizes: BTreeMap<String, u64>,
    /// Members keep their data on claims (`persistentVolumeClaimSpec`), by member name.
    claims: Option<BTreeMap<String, Claim>>,
    etcd_in_flight: usize,
    membership_in_flight: usize,
    /// When each `observe` call was made.
    observed_at: Vec<tokio::time::Instant>,
    /// A certificate event announced for this time (as the real adapter announces a
    /// leaf's renewal), reported to each `observe` before it.
    certificate_event: Option<tokio::time::Instant>,
}

impl World {
    fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn pod(&self, name: &str) -> Option<&PodView> {
        self.pods.iter().find(|p| p.name == name)
    }

    fn recovery_record(&self) -> Option<RecoveryRecord> {
        self.recorded.recovery.clone()
    }

    /// Whether the etcd process of member `name` runs: its pod is Running and the member
    /// has started.
    fn serving(&self, name: &str) -> bool {
        let pod_runs = self.pod(name).is_some_and(|p| {
            p.phase == PodPhase::Running
                && !p.terminating
                && !p
                    .version
                    .as_ref()
                    .is_some_and(|v| self.unrunnable.contains(v))
        });
        pod_runs && self.members.iter().any(|m| m.name == name)
    }

    /// Whether any of `endpoints` answers the operator.
    fn any_answers(&self, endpoints: &[String]) -> bool {
        endpoints
            .iter()
            .filter_map(|e| host_label(e))
            .any(|name| self.serving(&name) && !self.cut_off.contains(&name))
    }

    /// The leader: the member leadership was moved to while it serves, else the serving
    /// voter with the lowest ID.
    fn leader(&self) -> Option<u64> {
        let voters = self
            .members
            .iter()
            .filter(|m| m.started() && !m.is_learner && self.serving(&m.name))
            .map(|m| m.id);
        match self.moved_leader {
            Some(id) if voters.clone().any(|v| v == id) => Some(id),
            _ => voters.min(),
        }
    }
}

/// The first label of a URL's host: the member (and pod) name in this operator's URLs.
fn host_label(url: &str) -> Option<String> {
    let host = url.split("://").nth(1).unwrap_or(url);
    let name = host.split(['.', ':', '/']).next()?;
    (!name.is_empty()).then(|| name.to_string())
}

/// The deadline of one fake etcd call unless [`FakeCluster::set_call_timeout`] says otherwise.
pub const FAKE_CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// An etcd error of `kind`, with the message etcd or the transport would give.
pub fn etcd_error(kind: EtcdErrorKind) -> EtcdError {
    let message = match kind {
        EtcdErrorKind::Unavailable => "transport: error while dialing: connection refused",
        EtcdErrorKind::Timeout => "context deadline exceeded",
        EtcdErrorKind::UnhealthyCluster => "etcdserver: unhealthy cluster",
        EtcdErrorKind::LearnerNotReady => {
            "etcdserver: can only promote a learner member which is in sync with leader"
        }
        EtcdErrorKind::TooManyLearners => "etcdserver: too many learner members in cluster",
        EtcdErrorKind::MemberNotFound => "etcdserver: member not found",
        EtcdErrorKind::Rejected => "etcdserver: request rejected",
    };
    EtcdError::new(kind, message)
}

/// Counts one etcd call as in flight until dropped (also when a timeout cancels it).
struct InFlight {
    world: Arc<Mutex<World>>,
    membership: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut w = lock(&self.world);
        w.etcd_in_flight -= 1;
        if self.membership {
            w.membership_in_flight -= 1;
        }
    }
}

fn lock(world: &Mutex<World>) -> MutexGuard<'_, World> {
    world
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One simulated EtcdCluster: its pods and Services, and the etcd cluster they run.
/// Implements both [`ClusterApi`] and [`EtcdApi`]; clones share the same world.
#[derive(Clone)]
pub struct FakeCluster {
    topology: Topology,
    world: Arc<Mutex<World>>,
}

impl FakeCluster {
    /// A cluster that has nothing yet: no pods, no Services, no members.
    pub fn new(topology: Topology) -> Self {
        FakeCluster {
            topology,
            world: Arc::default(),
        }
    }

    /// A cluster already converged: Services, and `size` started voting members, each
    /// with a Running, ready pod at `version`; its status says it has had members.
    pub fn running(topology: Topology, size: usize, version: &str) -> Self {
        let fake = FakeCluster::new(topology);
        {
            let mut w = fake.lock();
            w.services = [true; 2];
            w.cluster_id = FAKE_CLUSTER_ID;
            w.recorded.bootstrap = Some(BootstrapRecord {
                seed: None,
                token: None,
                cluster_id: Some(FAKE_CLUSTER_ID),
            });
            for i in 0..size {
                let name = format!("{}-m{i}", fake.topology.name);
                let id = w.fresh_id();
                w.members.push(MemberView {
                    id,
                    name: name.clone(),
                    peer_urls: vec![fake.topology.peer_url(&name, TlsMode::Off)],
                    client_urls: vec![fake.topology.client_url(&name, TlsMode::Off)],
                    is_learner: false,
                });
                w.pods.push(PodView::running(&name, version));
            }
        }
        fake
    }

    fn lock(&self) -> MutexGuard<'_, World> {
        lock(&self.world)
    }

    /// The cluster this fake simulates.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    // ---- knobs ----

    /// Members keep their data on claims: every pod made from now on gets a Bound one,
    /// and so does every pod there is.
    pub fn on_claims(self) -> Self {
        {
            let mut w = self.lock();
            let claims = w
                .pods
                .iter()
                .map(|p| (p.name.clone(), Claim::new(ClaimPhase::Bound)))
                .collect();
            w.claims = Some(claims);
            for pod in &mut w.pods {
                pod.on_claim = true;
            }
        }
        self
    }

    /// Member `name` is gone with its data: its pod and its claim deleted (it stays in
    /// etcd's member list, answering nothing).
    pub fn lose_member_data(&self, name: &str) {
        let mut w = self.lock();
        w.pods.retain(|p| p.name != name);
        if let Some(claims) = w.claims.as_mut() {
            claims.remove(name);
        }
    }

    /// The times at which the operator observed the cluster (`observe` calls).
    pub fn observed_at(&self) -> Vec<tokio::time::Instant> {
        self.lock().observed_at.clone()
    }

    /// Announces a certificate event (a renewal) at `at`: each observation before it
    /// reports the time left until it, as the real adapter does for the renewal time of
    /// a leaf certificate.
    pub fn announce_certificate_event(&self, at: tokio::time::Instant) {
        self.lock().certificate_event = Some(at);
    }

    /// The seed the status records (`record_bootstrap`).
    pub fn bootstrap(&self) -> Option<BootstrapRecord> {
        self.lock().recorded.bootstrap.clone()
    }

    /// The recovery the status records (`record_recovery`).
    pub fn recovery(&self) -> Option<RecoveryRecord> {
        self.lock().recovery_record()
    }

    /// Kills member `name`'s pod: it turns Failed and not ready, and the member, still in
    /// etcd's member list, stops answering. Returns whether the pod existed.
    pub fn kill_member(&self, name: &str) -> bool {
        let mut w = self.lock();
        match w.pods.iter_mut().find(|p| p.name == name) {
            Some(pod) => {
                pod.phase = PodPhase::Failed;
                pod.ready = false;
                pod.problem = Some("Error: etcd exited with code 1".into());
                true
            }
            None => false,
        }
    }

    /// Sets what the kubelet says is wrong with pod `name` (its container's waiting or
    /// terminated reason), as a pod's status would. Returns whether the pod exists.
    pub fn set_pod_problem(&self, name: &str, problem: Option<String>) -> bool {
        let mut w = self.lock();
        match w.pods.iter_mut().find(|p| p.name == name) {
            Some(pod) => {
                pod.problem = problem;
                true
            }
            None => false,
        }
    }

    /// Makes the next `member add` call fail with `kind` (queued: each call takes one).
    pub fn fail_next_add(&self, kind: EtcdErrorKind) {
        self.lock().add_errors.push_back(etcd_error(kind));
    }

    /// Pods set to etcd `version` cannot run it (as with an image that cannot be pulled).
    pub fn make_unrunnable(&self, version: &str) {
        self.lock().unrunnable.push(version.to_string());
    }

    /// Whether the Kubernetes side offers to prepare joiners' pods before their member
    /// add (a prepared pod's etcd starts once a member add names its peer URL).
    pub fn set_prepares_joiners(&self, prepares: bool) {
        self.lock().prepares_joiners = prepares;
    }

    /// While `hang` is true, every `observe` of the Kubernetes side never returns.
    pub fn set_kube_hang(&self, hang: bool) {
        self.lock().kube_hang = hang;
    }

    /// While `error` is set, every pod creation is refused with it (and counted), creating
    /// nothing.
    pub fn refuse_pod_creation(&self, error: Option<ApiError>) {
        self.lock().pod_creation_refused = error;
    }

    /// While `hang` is true, every etcd call that starts gets no answer: it fails with
    /// [`EtcdErrorKind::Timeout`] when its deadline ([`FakeCluster::set_call_timeout`])
    /// passes, having changed nothing.
    pub fn set_hang(&self, hang: bool) {
        self.lock().hang = hang;
    }

    /// The deadline of each etcd call from now on, as the real adapter's `--etcd-timeout-ms`.
    pub fn set_call_timeout(&self, timeout: Duration) {
        self.lock().call_timeout = Some(timeout);
    }

    /// While `error` is set, making the `service` fails with it (a Service of the same
    /// name that another object owns: a conflict).
    pub fn refuse_service(&self, service: ServiceKind, error: Option<ApiError>) {
        self.lock().services_refused[service_index(service)] = error;
    }

    /// Making the `service` takes `latency` (a Tokio sleep), as under a loaded API server
    /// (a client Service's cluster IP).
    pub fn set_service_latency(&self, service: ServiceKind, latency: Duration) {
        self.lock().service_latency[service_index(service)] = latency;
    }

    /// Every etcd call takes `latency` (a Tokio sleep) before it takes effect; a latency
    /// past the call's deadline makes it time out instead.
    pub fn set_latency(&self, latency: Duration) {
        self.lock().latency = latency;
    }

    /// Splits the operator from member `name` (or heals the split): its calls to that
    /// member fail, while the member keeps serving its peers and its pod stays ready.
    pub fn cut_off_from_operator(&self, name: &str, cut: bool) {
        let mut w = self.lock();
        w.cut_off.retain(|n| n != name);
        if cut {
            w.cut_off.push(name.to_string());
        }
    }

    /// Freezes member `name` (as SIGSTOP would): its pod stays Running but turns not ready,
    /// and it answers nobody, the operator included.
    pub fn freeze_member(&self, name: &str) {
        let mut w = self.lock();
        if let Some(pod) = w.pods.iter_mut().find(|p| p.name == name) {
            pod.ready = false;
        }
        w.cut_off.push(name.to_string());
    }

    /// Forgets everything: pods, Services, members, status (as for an EtcdCluster deleted
    /// and created again under the same name, once the garbage collector is done).
    pub fn replace_world(&self) {
        *self.lock() = World::default();
    }

    /// The next `observe` call panics (once).
    pub fn panic_on_next_observe(&self) {
        self.lock().panic_next_observe = true;
    }

    // ---- inspection ----

    /// Call counters so far.
    pub fn calls(&self) -> CallCounts {
        self.lock().calls.clone()
    }

    /// etcd's member list.
    pub fn members(&self) -> Vec<MemberView> {
        self.lock().members.clone()
    }

    /// The cluster's pods.
    pub fn pods(&self) -> Vec<PodView> {
        self.lock().pods.clone()
    }

    /// Whether both Services exist.
    pub fn services_present(&self) -> bool {
        self.lock().services == [true; 2]
    }

    /// Whether the `service` exists.
    pub fn service_present(&self, service: ServiceKind) -> bool {
        self.lock().services[service_index(service)]
    }

    /// The PodDisruptionBudget's `minAvailable`, once set.
    pub fn disruption_budget(&self) -> Option<u32> {
        self.lock().disruption_budget
    }

    /// Every pod creation request, in order.
    pub fn created_pods(&self) -> Vec<MemberPod> {
        self.lock().created_pods.clone()
    }

    /// The status written last.
    pub fn last_status(&self) -> Option<StatusReport> {
        self.lock().last_status.clone()
    }

    /// Every Event recorded, in order.
    pub fn events(&self) -> Vec<EventRecord> {
        self.lock().events.clone()
    }

    /// Every Event's reason with the tick that raised it (numbered by the observations
    /// made so far: the Events of one tick share the number).
    pub fn events_by_tick(&self) -> Vec<(u64, String)> {
        let w = self.lock();
        let reasons = w.events.iter().map(|e| e.reason.clone());
        w.event_ticks.iter().copied().zip(reasons).collect()
    }

    /// The ID of the member the others follow: the lowest ID of the serving voters.
    pub fn leader(&self) -> Option<u64> {
        self.lock().leader()
    }

    /// Whether the cluster is exactly `size` started voting members, no learner, each
    /// with a Running, ready pod at `version`, and no other pod.
    pub fn is_converged(&self, size: usize, version: &str) -> bool {
        let w = self.lock();
        w.members.len() == size
            && w.pods.len() == size
            && w.members.iter().all(|m| {
                m.started()
                    && !m.is_learner
                    && w.pod(&m.name).is_some_and(|p| {
                        p.phase == PodPhase::Running
                            && p.ready
                            && p.version.as_deref() == Some(version)
                    })
            })
    }

    // ---- etcd call plumbing ----

    /// Registers an etcd call, then waits out the hang switch and the latency, within the
    /// call's deadline: a call that runs out of time fails before it takes effect.
    async fn enter(&self, what: &str, membership: bool) -> Result<InFlight, EtcdError> {
        let (hang, latency, deadline) = {
            let mut w = self.lock();
            w.etcd_in_flight += 1;
            w.calls.max_etcd_in_flight = w.calls.max_etcd_in_flight.max(w.etcd_in_flight);
            if membership {
                w.membership_in_flight += 1;
                w.calls.max_membership_in_flight =
                    w.calls.max_membership_in_flight.max(w.membership_in_flight);
            }
            (
                w.hang,
                w.latency,
                w.call_timeout.unwrap_or(FAKE_CALL_TIMEOUT),
            )
        };
        let guard = InFlight {
            world: self.world.clone(),
            membership,
        };
        let wait = async {
            if hang {
                std::future::pending::<()>().await;
            }
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
        };
        match tokio::time::timeout(deadline, wait).await {
            Ok(()) => Ok(guard),
            Err(_) => Err(EtcdError::timeout(what, deadline)),
        }
    }
}

/// The cluster ID a fake etcd cluster answers with.
pub const FAKE_CLUSTER_ID: u64 = 0x00c1_a57e_12d0_0001;

#[async_trait]
impl EtcdApi for FakeCluster {
    async fn list(&self, endpoints: &[String]) -> Result<MemberList, EtcdError> {
        self.lock().calls.list += 1;
        let _call = self.enter("member list", false).await?;
        let w = self.lock();
        if !w.any_answers(endpoints) {
            return Err(etcd_error(EtcdErrorKind::Unavailable));
        }
        Ok(MemberList {
            cluster_id: w.cluster_id,
            members: w.members.clone(),
        })
    }

    async fn add(&self, endpoints: &[String], new: &NewMember) -> Result<AddedMember, EtcdError> {
        let NewMember { peer_url, learner } = new;
        let learner = *learner;
        self.lock().calls.add += 1;
        let _call = self.enter("member add", true).await?;
        let mut w = self.lock();
        if !w.any_answers(endpoints) {
            return Err(etcd_error(EtcdErrorKind::Unavailable));
        }
        if let Some(error) = w.add_errors.pop_front() {
            return Err(error);
        }
        if w.members
            .iter()
            .any(|m| m.peer_urls.iter().any(|u| u == peer_url))
        {
            return Err(EtcdError::new(
                EtcdErrorKind::Rejected,
                "etcdserver: Peer URLs already exists",
            ));
        }
        if learner && w.members.iter().any(|m| m.is_learner) {
            return Err(etcd_error(EtcdErrorKind::TooManyLearners));
        }
        let id = w.fresh_id();
        w.members.push(MemberView {
            id,
            name: String::new(),
            peer_urls: vec![peer_url.to_string()],
            client_urls: Vec::new(),
            is_learner: learner,
        });
        // A prepared joiner's gate sees its peer URL listed: its etcd starts and joins.
        let prepared = w
            .pods
            .iter()
            .find(|p| {
                p.awaits_membership() && self.topology.peer_url(&p.name, TlsMode::Off) == *peer_url
            })
            .map(|p| p.name.clone());
        if let Some(name) = prepared {
            let client_url = self.topology.client_url(&name, TlsMode::Off);
            if let Some(m) = w.members.iter_mut().find(|m| m.id == id) {
                m.name = name.clone();
                m.client_urls = vec![client_url];
            }
            if let Some(pod) = w.pods.iter_mut().find(|p| p.name == name) {
                pod.started = true;
                pod.ready = true;
            }
        }
        Ok(AddedMember {
            id,
            members: w.members.clone(),
        })
    }

    async fn remove(&self, endpoints: &[String], id: u64) -> Result<(), EtcdError> {
        self.lock().calls.remove += 1;
        let _call = self.enter("member remove", true).await?;
        let mut w = self.lock();
        if !w.any_answers(endpoints) {
            return Err(etcd_error(EtcdErrorKind::Unavailable));
        }
        let before = w.members.len();
        w.members.retain(|m| m.id != id);
        if w.members.len() == before {
            return Err(etcd_error(EtcdErrorKind::MemberNotFound));
        }
        Ok(())
    }

    async fn promote(&self, endpoints: &[String], id: u64) -> Result<(), EtcdError> {
        self.lock().calls.promote += 1;
        let _call = self.enter("member promote", true).await?;
        let mut w = self.lock();
        if !w.any_answers(endpoints) {
            return Err(etcd_error(EtcdErrorKind::Unavailable));
        }
        let Some(member) = w.members.iter().find(|m| m.id == id).cloned() else {
            return Err(etcd_error(EtcdErrorKind::MemberNotFound));
        };
        if !member.is_learner {
            return Err(EtcdError::new(
                EtcdErrorKind::Rejected,
                "etcdserver: can only promote a learner member",
            ));
        }
        if !w.serving(&member.name) {
            return Err(etcd_error(EtcdErrorKind::LearnerNotReady));
        }
        if let Some(m) = w.members.iter_mut().find(|m| m.id == id) {
            m.is_learner = false;
        }
        Ok(())
    }

    async fn move_leader(&self, leader: &str, to: u64) -> Result<(), EtcdError> {
        self.lock().calls.move_leader += 1;
        let _call = self.enter("move leader", true).await?;
        let mut w = self.lock();
        let current = w.leader();
        let asked = host_label(leader);
        let is_leader = w
            .members
            .iter()
            .any(|m| Some(m.id) == current && asked.as_deref() == Some(m.name.as_str()));
        if !w.any_answers(&[leader.to_string()]) {
            return Err(etcd_error(EtcdErrorKind::Unavailable));
        }
        if !is_leader {
            return Err(EtcdError::new(
                EtcdErrorKind::Rejected,
                "etcdserver: not leader",
            ));
        }
        let target = w.members.iter().find(|m| m.id == to);
        if !target.is_some_and(|m| !m.is_learner && w.serving(&m.name)) {
            return Err(EtcdError::new(
                EtcdErrorKind::Rejected,
                "etcdserver: bad leader transferee",
            ));
        }
        w.moved_leader = Some(to);
        Ok(())
    }

    async fn status(&self, endpoint: &str) -> Result<MemberHealth, EtcdError> {
        self.lock().calls.status += 1;
        let _call = self.enter("endpoint status", false).await?;
        let w = self.lock();
        let member = w.members.iter().find(|m| {
            m.client_urls.iter().any(|u| u == endpoint)
                || (m.started() && host_label(endpoint).as_deref() == Some(m.name.as_str()))
        });
        let Some(member) = member.filter(|m| w.serving(&m.name) && !w.cut_off.contains(&m.name))
        else {
            return Err(etcd_error(EtcdErrorKind::Unavailable));
        };
        let version = w.pod(&member.name).and_then(|p| p.version.as_deref());
        Ok(MemberHealth {
            reachable: true,
            version: version.and_then(|v| v.parse::<Version>().ok()),
            leader: w.leader(),
            errors: Vec::new(),
            alarms: w.alarms.clone(),
            db_size: w.db_sizes.get(&member.name).copied(),
            db_size_in_use: None,
            cluster_id: Some(w.cluster_id),
            raft_index: Some(100 + member.id),
            revision: Some(50),
        })
    }

    async fn disarm_alarm(&self, endpoints: &[String], alarm: Alarm) -> Result<(), EtcdError> {
        self.lock().calls.disarm_alarm += 1;
        let _call = self.enter("alarm disarm", false).await?;
        let mut w = self.lock();
        if !w.any_answers(endpoints) {
            return Err(etcd_error(EtcdErrorKind::Unavailable));
        }
        w.alarms.retain(|a| *a != alarm);
        Ok(())
    }

    async fn hash_kv(&self, endpoint: &str, _revision: i64) -> Result<KvHash, EtcdError> {
        let _call = self.enter("hash kv", false).await?;
        if !self.lock().any_answers(&[endpoint.to_string()]) {
            return Err(etcd_error(EtcdErrorKind::Unavailable));
        }
        Ok(KvHash {
            hash: 0,
            compact_revision: 0,
        })
    }

    async fn defragment(&self, endpoint: &str) -> Result<Defragmented, EtcdError> {
        self.lock().calls.defragment.push(endpoint.to_string());
        let _call = self.enter("defragment", false).await?;
        if !self.lock().any_answers(&[endpoint.to_string()]) {
            return Err(etcd_error(EtcdErrorKind::Unavailable));
        }
        Ok(Defragmented::default())
    }

    async fn compact(&self, endpoints: &[String], revision: i64) -> Result<(), EtcdError> {
        self.lock().calls.compact.push(revision);
        let _call = self.enter("compact", false).await?;
        if !self.lock().any_answers(endpoints) {
            return Err(etcd_error(EtcdErrorKind::Unavailable));
        }
        Ok(())
    }
}

#[async_trait]
impl ClusterApi for FakeCluster {
    async fn observe(&self) -> Result<KubeView, ApiError> {
        let panic_now = {
            let mut w = self.lock();
            w.calls.observe += 1;
            w.observed_at.push(tokio::time::Instant::now());
            std::mem::take(&mut w.panic_next_observe)
        };
        if panic_now {
            panic!("injected panic in FakeCluster::observe");
        }
        if self.lock().kube_hang {
            std::future::pending::<()>().await;
        }
        let w = self.lock();
        let now = tokio::time::Instant::now();
        let tls = TlsObservation {
            next_event_in: w
                .certificate_event
                .filter(|at| *at > now)
                .map(|at| at - now),
            ..TlsObservation::default()
        };
        Ok(KubeView {
            pods: w.pods.clone(),
            services_present: w.services == [true; 2],
            disruption_budget: w.disruption_budget,
            claims: w.claims.clone().unwrap_or_default(),
            claim_class: None,
            recorded: w.recorded.clone(),
            name_conflict: None,
            restore_problem: None,
            tls,
            prepares_joiners: w.prepares_joiners,
        })
    }

    async fn issue_certificates(&self) -> Result<String, ApiError> {
        // The fake runs plaintext clusters only (`TlsMode::Off`): nothing asks for this.
        Err(ApiError::Invalid(
            "the fake cluster has no TLS certificates to issue".into(),
        ))
    }

    async fn advance_ca_rotation(
        &self,
        _from: Option<CaRotationStep>,
        _to: Option<CaRotationStep>,
    ) -> Result<String, ApiError> {
        // Plaintext clusters only, as above: no CA to rotate.
        Err(ApiError::Invalid(
            "the fake cluster has no CA to rotate".into(),
        ))
    }

    async fn ensure_service(&self, service: ServiceKind) -> Result<(), ApiError> {
        let i = service_index(service);
        let latency = {
            let mut w = self.lock();
            w.calls.ensure_services += 1;
            w.service_latency[i]
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let mut w = self.lock();
        if let Some(error) = &w.services_refused[i] {
            return Err(error.clone());
        }
        w.services[i] = true;
        Ok(())
    }

    async fn set_disruption_budget(&self, min_available: u32) -> Result<(), ApiError> {
        let mut w = self.lock();
        w.calls.set_disruption_budget += 1;
        w.disruption_budget = Some(min_available);
        Ok(())
    }

    async fn expand_claim(&self, _name: &str, _quantity: &str) -> Result<(), ApiError> {
        self.lock().calls.expand_claim += 1;
        Ok(())
    }

    async fn create_member_pod(&self, pod: &MemberPod) -> Result<(), ApiError> {
        let mut w = self.lock();
        w.calls.create_member_pod += 1;
        if let Some(error) = &w.pod_creation_refused {
            return Err(error.clone());
        }
        w.created_pods.push(pod.clone());
        if w.pod(&pod.name).is_some() {
            // As the real adapter: creating a pod of ours that exists is done already.
            return Ok(());
        }
        if let Some(claims) = w.claims.as_mut() {
            claims
                .entry(pod.name.clone())
                .or_insert_with(|| Claim::new(ClaimPhase::Bound));
        }
        let mut view = PodView::running(&pod.name, &pod.version.to_string());
        view.voter = pod.voter;
        view.on_claim = w.claims.is_some();
        if let Some(peers) = &pod.prepared_with {
            // A prepared joiner: its etcd waits (not started, not ready) until a member
            // add names it.
            view.prepared_with = Some(peers.clone());
            view.started = false;
            view.ready = false;
            w.pods.push(view);
            return Ok(());
        }
        match &pod.state {
            InitialState::New { .. } => {
                // A new cluster of one: the seed starts and forms it.
                w.cluster_id = FAKE_CLUSTER_ID;
                let id = w.fresh_id();
                w.members = vec![MemberView {
                    id,
                    name: pod.name.clone(),
                    peer_urls: vec![self.topology.peer_url(&pod.name, TlsMode::Off)],
                    client_urls: vec![self.topology.client_url(&pod.name, TlsMode::Off)],
                    is_learner: false,
                }];
            }
            InitialState::ForceNewCluster => {
                // etcd drops every other member and keeps this one, with its data.
                w.members.retain(|m| m.name == pod.name);
                view.force_new_cluster = true;
            }
            // A member that has started comes back on its claim with its data.
            InitialState::Existing if w.members.iter().any(|m| m.name == pod.name) => {}
            InitialState::Existing => {
                let client_url = self.topology.client_url(&pod.name, TlsMode::Off);
                let joining = w
                    .members
                    .iter_mut()
                    .find(|m| !m.started() && m.pod_name().as_deref() == Some(pod.name.as_str()));
                match joining {
                    Some(m) => {
                        m.name = pod.name.clone();
                        m.client_urls = vec![client_url];
                    }
                    None => {
                        // etcd refuses to join a cluster that does not know it.
                        view.ready = false;
                        view.problem = Some("etcd: member not found in the cluster".into());
                    }
                }
            }
        }
        w.pods.push(view);
        Ok(())
    }

    async fn delete_pod(&self, name: &str) -> Result<(), ApiError> {
        let mut w = self.lock();
        w.calls.delete_pod += 1;
        w.pods.retain(|p| p.name != name);
        if let Some(claims) = w.claims.as_mut() {
            claims.remove(name);
        }
        Ok(())
    }

    async fn recreate_pod(&self, name: &str) -> Result<(), ApiError> {
        let mut w = self.lock();
        w.calls.recreate_pod += 1;
        w.pods.retain(|p| p.name != name);
        Ok(())
    }

    async fn set_pod_version(&self, name: &str, change: &VersionChange) -> Result<(), ApiError> {
        let mut w = self.lock();
        w.calls.set_pod_version += 1;
        let bad = w.unrunnable.contains(&change.to.to_string());
        let Some(pod) = w.pods.iter_mut().find(|p| p.name == name) else {
            return Err(ApiError::NotFound(format!("pods \"{name}\" not found")));
        };
        pod.version = Some(change.to.to_string());
        pod.upgrade_from = change.upgrade_from.as_ref().map(ToString::to_string);
        pod.ready = !bad;
        pod.problem = bad.then(|| format!("etcd: ErrImagePull: no etcd {}", change.to));
        Ok(())
    }

    async fn label_voter(&self, name: &str) -> Result<(), ApiError> {
        let mut w = self.lock();
        match w.pods.iter_mut().find(|p| p.name == name) {
            Some(pod) => {
                pod.voter = true;
                Ok(())
            }
            None => Err(ApiError::NotFound(format!("pods \"{name}\" not found"))),
        }
    }

    async fn publish_status(&self, report: &StatusReport) -> Result<(), ApiError> {
        let mut w = self.lock();
        w.calls.publish_status += 1;
        // What the real adapter stores: the record is never lost, members and reason are
        // read back on the next observation.
        if let Some(record) = &report.bootstrap {
            w.recorded.bootstrap = Some(record.clone());
        }
        w.recorded.members = report
            .ready
            .iter()
            .chain(&report.unready)
            .cloned()
            .collect();
        w.recorded.reason = report.reason.as_str().to_string();
        w.recorded.failed_version = report.failed_version.clone();
        w.last_status = Some(report.clone());
        Ok(())
    }

    async fn record_bootstrap(&self, record: &BootstrapRecord) -> Result<(), ApiError> {
        let mut w = self.lock();
        if let Some(existing) = &w.recorded.bootstrap {
            return Err(ApiError::Conflict(format!(
                "the cluster was bootstrapped already ({existing:?})"
            )));
        }
        w.recorded.bootstrap = Some(record.clone());
        Ok(())
    }

    async fn record_event(&self, event: &EventRecord) -> Result<(), ApiError> {
        let mut w = self.lock();
        w.calls.record_event += 1;
        let tick = w.calls.observe;
        w.events.push(event.clone());
        w.event_ticks.push(tick);
        Ok(())
    }

    async fn record_recovery(&self, record: &RecoveryRecord) -> Result<(), ApiError> {
        let mut w = self.lock();
        check_fence(w.recorded.recovery.as_ref(), record)
            .map_err(|refusal| ApiError::Conflict(refusal.to_string()))?;
        w.recorded.recovery = Some(record.clone());
        Ok(())
    }

    async fn newest_backup(
        &self,
        _read_since: Option<Instant>,
    ) -> Result<Option<SnapshotSource>, ApiError> {
        // The fake has no object store.
        Ok(None)
    }
}

/// A [`ClusterWiring`] that hands a Supervisor one [`FakeCluster`] per [`Topology`]:
/// the one inserted for it, or a new empty one created on first use.
#[derive(Default)]
pub struct FakeWiring {
    clusters: Mutex<BTreeMap<Topology, FakeCluster>>,
}

impl FakeWiring {
    /// Wiring without any cluster yet.
    pub fn new() -> Self {
        FakeWiring::default()
    }

    /// Uses `fake` for its topology from now on.
    pub fn insert(&self, fake: FakeCluster) {
        self.lock().insert(fake.topology.clone(), fake);
    }

    /// The fake of `cluster`, created empty if it has none yet.
    pub fn cluster(&self, cluster: &Topology) -> FakeCluster {
        self.lock()
            .entry(cluster.clone())
            .or_insert_with(|| FakeCluster::new(cluster.clone()))
            .clone()
    }

    /// Every fake handed out or inserted so far.
    pub fn clusters(&self) -> Vec<FakeCluster> {
        self.lock().values().cloned().collect()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<Topology, FakeCluster>> {
        self.clusters
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl ClusterWiring for FakeWiring {
    fn cluster_api(&self, cluster: &Topology) -> Arc<dyn ClusterApi> {
        Arc::new(self.cluster(cluster))
    }

    fn etcd_api(&self, cluster: &Topology) -> Arc<dyn EtcdApi> {
        Arc::new(self.cluster(cluster))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A learner to add under `name`.
    fn new_member(name: &str) -> NewMember {
        NewMember {
            peer_url: demo().peer_url(name, TlsMode::Off),
            learner: true,
        }
    }

    fn demo() -> Topology {
        Topology::new("default", "demo")
    }

    fn endpoints(fake: &FakeCluster) -> Vec<String> {
        fake.pods()
            .iter()
            .map(|p| fake.topology().client_url(&p.name, TlsMode::Off))
            .collect()
    }

    /// The pod of the learner `demo-new`, prepared with the members `prepared_with` or not.
    fn joiner_pod(prepared_with: Option<Vec<String>>) -> MemberPod {
        MemberPod {
            name: "demo-new".into(),
            version: "3.5.21".parse().unwrap(),
            initial_cluster: String::new(),
            state: InitialState::Existing,
            voter: false,
            restore: None,
            prepared_with,
        }
    }

    #[tokio::test]
    async fn a_seed_pod_forms_a_one_member_cluster_that_answers() {
        let fake = FakeCluster::new(demo());
        let seed = MemberPod {
            name: "demo-seed".into(),
            version: "3.5.21".parse().unwrap(),
            initial_cluster: demo().initial_cluster(&["demo-seed".into()], TlsMode::Off),
            state: InitialState::New { token: "t".into() },
            voter: true,
            restore: None,
            prepared_with: None,
        };
        fake.create_member_pod(&seed).await.unwrap();
        let list = fake.list(&endpoints(&fake)).await.unwrap();
        assert_eq!(list.cluster_id, FAKE_CLUSTER_ID);
        let members = list.members;
        assert_eq!(members.len(), 1);
        assert_eq!(members[0].name, "demo-seed");
        let health = fake
            .status(&demo().client_url("demo-seed", TlsMode::Off))
            .await
            .unwrap();
        assert!(health.is_healthy());
        assert_eq!(health.leader, Some(members[0].id));
        assert_eq!(health.version, "3.5.21".parse().ok());
    }

    #[tokio::test]
    async fn an_added_learner_starts_when_its_pod_is_created_and_can_then_be_promoted() {
        let fake = FakeCluster::running(demo(), 1, "3.5.21");
        let eps = endpoints(&fake);
        let added = fake.add(&eps, &new_member("demo-new")).await.unwrap();
        assert_eq!(added.members.len(), 2);
        let new = added.members.iter().find(|m| m.id == added.id).unwrap();
        assert!(new.is_learner && !new.started());
        assert_eq!(
            fake.promote(&eps, added.id).await.unwrap_err().kind,
            EtcdErrorKind::LearnerNotReady
        );
        fake.create_member_pod(&joiner_pod(None)).await.unwrap();
        fake.promote(&eps, added.id).await.unwrap();
        assert!(fake.is_converged(2, "3.5.21"));
    }

    #[tokio::test]
    async fn a_prepared_joiner_waits_without_a_member_and_starts_once_added() {
        let fake = FakeCluster::running(demo(), 1, "3.5.21");
        let eps = endpoints(&fake);
        let prepared = joiner_pod(Some(vec!["demo-m0".into()]));
        fake.create_member_pod(&prepared).await.unwrap();
        assert_eq!(fake.members().len(), 1);
        let waiting = fake
            .pods()
            .into_iter()
            .find(|p| p.name == "demo-new")
            .unwrap();
        assert!(waiting.awaits_membership() && !waiting.ready);
        let added = fake.add(&eps, &new_member("demo-new")).await.unwrap();
        let joined = fake
            .members()
            .into_iter()
            .find(|m| m.id == added.id)
            .unwrap();
        assert!(joined.started() && joined.is_learner);
        fake.promote(&eps, added.id).await.unwrap();
        assert!(fake.is_converged(2, "3.5.21"));
    }

    #[tokio::test]
    async fn a_killed_member_stays_listed_but_does_not_answer() {
        let fake = FakeCluster::running(demo(), 3, "3.5.21");
        assert!(fake.kill_member("demo-m1"));
        assert_eq!(fake.members().len(), 3);
        let err = fake
            .status(&demo().client_url("demo-m1", TlsMode::Off))
            .await
            .unwrap_err();
        assert_eq!(err.kind, EtcdErrorKind::Unavailable);
        assert!(
            fake.status(&demo().client_url("demo-m0", TlsMode::Off))
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn injected_add_errors_are_returned_in_order_then_adds_succeed() {
        let fake = FakeCluster::running(demo(), 1, "3.5.21");
        fake.fail_next_add(EtcdErrorKind::UnhealthyCluster);
        let eps = endpoints(&fake);
        let peer = new_member("demo-x");
        let err = fake.add(&eps, &peer).await.unwrap_err();
        assert_eq!(err.kind, EtcdErrorKind::UnhealthyCluster);
        assert_eq!(err.message, "etcdserver: unhealthy cluster");
        assert!(fake.add(&eps, &peer).await.is_ok());
        assert_eq!(fake.calls().add, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_call_times_out_at_its_deadline_and_changes_nothing() {
        let fake = FakeCluster::running(demo(), 3, "3.5.21");
        fake.set_call_timeout(Duration::from_millis(700));
        fake.set_hang(true);
        let started = tokio::time::Instant::now();
        let err = fake.remove(&endpoints(&fake), 1).await.unwrap_err();
        assert_eq!(err.kind, EtcdErrorKind::Timeout);
        assert_eq!(started.elapsed(), Duration::from_millis(700));
        assert_eq!(
            fake.members().len(),
            3,
            "the timed-out remove changed nothing"
        );
        assert_eq!(fake.calls().max_membership_in_flight, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_latency_past_the_deadline_is_a_timeout() {
        let fake = FakeCluster::running(demo(), 1, "3.5.21");
        fake.set_latency(FAKE_CALL_TIMEOUT + Duration::from_secs(1));
        let err = fake.list(&endpoints(&fake)).await.unwrap_err();
        assert_eq!(err.kind, EtcdErrorKind::Timeout);
    }

    #[tokio::test]
    async fn removing_an_unknown_member_is_member_not_found() {
        let fake = FakeCluster::running(demo(), 1, "3.5.21");
        let err = fake.remove(&endpoints(&fake), 999).await.unwrap_err();
        assert_eq!(err.kind, EtcdErrorKind::MemberNotFound);
    }
}
