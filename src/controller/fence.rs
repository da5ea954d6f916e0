//! The leader's fence: every write to Kubernetes or etcd asks it, right before the write
//! is sent, whether this replica still holds the leader Lease.
//!
//! The renew loop alone cannot stop a leader in time: a process frozen (SIGSTOP, a long
//! GC-like stall, a VM pause) past its Lease resumes with every timer firing at once, and
//! nothing orders the renew loop before the actors' writes. So the writes themselves check.
//! The fence is open only while the start of the last successful renewal is at most the
//! renew deadline ago, on the monotonic clock; the renew deadline is shorter than the Lease
//! duration, so the fence closes before another replica may take the Lease. Once closed it
//! stays closed (a renewal after a gap does not reopen it), and the process exits.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::Instant;

use etcd_operator_actors::ports::{
    AddedMember, ApiError, ClusterApi, Defragmented, EtcdApi, EtcdError, EtcdErrorKind,
    EventRecord, KubeView, MemberList, MemberPod, NewMember, ServiceKind, VersionChange,
};
use etcd_operator_core::lifecycle::{
    Alarm, BootstrapRecord, CaRotationStep, KvHash, MemberHealth, RecoveryRecord, SnapshotSource,
};
use etcd_operator_core::report::StatusReport;

/// A write refused because this replica is not (or no longer) known to be the leader.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refusing to {write}: {reason}")]
pub struct Fenced {
    /// The write refused.
    pub write: String,
    /// Why the fence is closed.
    pub reason: String,
}

/// Where the fence stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Hold {
    /// The Lease has not been acquired yet.
    NotYet,
    /// Held: the last successful renewal started at this instant.
    Since(Instant),
    /// Lost for good, for this reason.
    Lost(String),
}

struct Inner {
    /// `None`: leader election is off, the fence never closes once opened.
    renew_deadline: Option<Duration>,
    hold: Mutex<Hold>,
    lost: watch::Sender<Option<String>>,
}

/// Shared, cheap handle to the fence.
#[derive(Clone)]
pub struct Fence {
    inner: Arc<Inner>,
}

impl Fence {
    /// A closed fence that opens when the Lease is acquired and closes for good when a
    /// renewal does not succeed within `renew_deadline`.
    pub fn new(renew_deadline: Duration) -> Self {
        Self::build(Some(renew_deadline), Hold::NotYet)
    }

    /// An open fence that never closes on its own (leader election turned off).
    pub fn always_open() -> Self {
        Self::build(None, Hold::Since(Instant::now()))
    }

    fn build(renew_deadline: Option<Duration>, hold: Hold) -> Self {
        Fence {
            inner: Arc::new(Inner {
                renew_deadline,
                hold: Mutex::new(hold),
                lost: watch::channel(None).0,
            }),
        }
    }

    fn hold(&self) -> std::sync::MutexGuard<'_, Hold> {
        self.inner.hold.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn overdue(&self, since: Instant, now: Instant) -> Option<String> {
        let deadline = self.inner.renew_deadline?;
        let age = now.saturating_duration_since(since);
        (age > deadline).then(|| {
            format!("the leader Lease was last renewed {age:?} ago (renew deadline {deadline:?})")
        })
    }

    /// Records a successful acquisition or renewal that started at `started`; `false` when
    /// the fence is, or now turns, closed (the renewal came too late to count).
    pub fn renewed(&self, started: Instant) -> bool {
        self.renewed_at(started, Instant::now())
    }

    fn renewed_at(&self, started: Instant, now: Instant) -> bool {
        let mut hold = self.hold();
        let since = match &*hold {
            Hold::Lost(_) => return false,
            Hold::NotYet => started,
            Hold::Since(last) => match self.overdue(*last, now) {
                Some(reason) => return self.close(&mut hold, reason),
                None => started.max(*last),
            },
        };
        if let Some(reason) = self.overdue(since, now) {
            return self.close(&mut hold, reason);
        }
        *hold = Hold::Since(since);
        true
    }

    /// Whether a write may be sent now; closes the fence for good when the deadline passed.
    pub fn check(&self, write: &str) -> Result<(), Fenced> {
        self.check_at(write, Instant::now())
    }

    fn check_at(&self, write: &str, now: Instant) -> Result<(), Fenced> {
        let mut hold = self.hold();
        let reason = match &*hold {
            Hold::Since(since) => match self.overdue(*since, now) {
                None => return Ok(()),
                Some(reason) => {
                    self.close(&mut hold, reason.clone());
                    reason
                }
            },
            Hold::NotYet => "this replica does not hold the leader Lease".to_string(),
            Hold::Lost(reason) => reason.clone(),
        };
        Err(Fenced {
            write: write.to_string(),
            reason,
        })
    }

    /// Closes the fence for good (the Lease was lost, or the process is stopping).
    pub fn close_now(&self, reason: &str) {
        let mut hold = self.hold();
        if !matches!(*hold, Hold::Lost(_)) {
            self.close(&mut hold, reason.to_string());
        }
    }

    fn close(&self, hold: &mut Hold, reason: String) -> bool {
        *hold = Hold::Lost(reason.clone());
        self.inner.lost.send_replace(Some(reason));
        false
    }

    /// When the fence closes unless a renewal comes first; `None` when it is not open or
    /// never closes on its own.
    pub fn closes_at(&self) -> Option<Instant> {
        match &*self.hold() {
            Hold::Since(since) => Some(*since + self.inner.renew_deadline?),
            _ => None,
        }
    }

    /// Whether the fence is open now (without closing it).
    pub fn is_open(&self) -> bool {
        match &*self.hold() {
            Hold::Since(since) => self.overdue(*since, Instant::now()).is_none(),
            _ => false,
        }
    }

    /// Resolves, with the reason, once the fence has closed for good.
    pub async fn closed(&self) -> String {
        let mut rx = self.inner.lost.subscribe();
        match rx.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().unwrap_or_default(),
            Err(_) => "the fence was dropped".to_string(),
        }
    }
}

/// The Kubernetes port of one cluster with every write behind the fence.
pub struct FencedClusterApi {
    inner: Arc<dyn ClusterApi>,
    fence: Fence,
}

impl FencedClusterApi {
    /// Puts `inner`'s writes behind `fence`.
    pub fn new(inner: Arc<dyn ClusterApi>, fence: Fence) -> Self {
        FencedClusterApi { inner, fence }
    }

    fn pass(&self, write: &str) -> Result<(), ApiError> {
        Ok(self.fence.check(write)?)
    }
}

#[async_trait]
impl ClusterApi for FencedClusterApi {
    async fn observe(&self) -> Result<KubeView, ApiError> {
        self.inner.observe().await
    }

    async fn issue_certificates(&self) -> Result<String, ApiError> {
        self.pass("issue the cluster's certificates")?;
        self.inner.issue_certificates().await
    }

    async fn advance_ca_rotation(
        &self,
        from: Option<CaRotationStep>,
        to: Option<CaRotationStep>,
    ) -> Result<String, ApiError> {
        self.pass("advance the cluster's CA rotation")?;
        self.inner.advance_ca_rotation(from, to).await
    }

    async fn ensure_service(&self, service: ServiceKind) -> Result<(), ApiError> {
        self.pass(&format!(
            "create the cluster's {} Service",
            service.as_str()
        ))?;
        self.inner.ensure_service(service).await
    }

    async fn set_disruption_budget(&self, min_available: u32) -> Result<(), ApiError> {
        self.pass("set the cluster's PodDisruptionBudget")?;
        self.inner.set_disruption_budget(min_available).await
    }

    async fn expand_claim(&self, name: &str, quantity: &str) -> Result<(), ApiError> {
        self.pass(&format!("expand member {name}'s claim to {quantity}"))?;
        self.inner.expand_claim(name, quantity).await
    }

    async fn create_member_pod(&self, pod: &MemberPod) -> Result<(), ApiError> {
        self.pass(&format!("create pod {}", pod.name))?;
        self.inner.create_member_pod(pod).await
    }

    async fn delete_pod(&self, name: &str) -> Result<(), ApiError> {
        self.pass(&format!("delete pod {name}"))?;
        self.inner.delete_pod(name).await
    }

    async fn recreate_pod(&self, name: &str) -> Result<(), ApiError> {
        self.pass(&format!("delete pod {name} to recreate it"))?;
        self.inner.recreate_pod(name).await
    }

    async fn set_pod_version(&self, name: &str, change: &VersionChange) -> Result<(), ApiError> {
        self.pass(&format!("change the image of pod {name}"))?;
        self.inner.set_pod_version(name, change).await
    }

    async fn label_voter(&self, name: &str) -> Result<(), ApiError> {
        self.pass(&format!("label pod {name} as a voter"))?;
        self.inner.label_voter(name).await
    }

    async fn publish_status(&self, report: &StatusReport) -> Result<(), ApiError> {
        self.pass("write the EtcdCluster status")?;
        self.inner.publish_status(report).await
    }

    async fn record_bootstrap(&self, record: &BootstrapRecord) -> Result<(), ApiError> {
        self.pass("write the bootstrap record into the EtcdCluster status")?;
        self.inner.record_bootstrap(record).await
    }

    async fn record_event(&self, event: &EventRecord) -> Result<(), ApiError> {
        self.pass(&format!("record Event {}", event.reason))?;
        self.inner.record_event(event).await
    }

    async fn record_recovery(&self, record: &RecoveryRecord) -> Result<(), ApiError> {
        self.pass("write the recovery record into the EtcdCluster status")?;
        self.inner.record_recovery(record).await
    }

    async fn newest_backup(
        &self,
        read_since: Option<Instant>,
    ) -> Result<Option<SnapshotSource>, ApiError> {
        self.inner.newest_backup(read_since).await
    }
}

/// etcd's membership API with every membership change behind the fence.
pub struct FencedEtcdApi {
    inner: Arc<dyn EtcdApi>,
    fence: Fence,
}

impl FencedEtcdApi {
    /// Puts `inner`'s membership changes behind `fence`.
    pub fn new(inner: Arc<dyn EtcdApi>, fence: Fence) -> Self {
        FencedEtcdApi { inner, fence }
    }

    fn pass(&self, write: &str) -> Result<(), EtcdError> {
        self.fence
            .check(write)
            .map_err(|e| EtcdError::new(EtcdErrorKind::Rejected, e.to_string()))
    }

    /// Sends `call` only while the fence is open, and abandons it when the fence closes
    /// first: one call may try several endpoints in turn, and none may be tried after.
    async fn guarded<T>(
        &self,
        write: &str,
        call: impl std::future::Future<Output = Result<T, EtcdError>>,
    ) -> Result<T, EtcdError> {
        self.pass(write)?;
        let Some(closes) = self.fence.closes_at() else {
            return call.await;
        };
        tokio::time::timeout_at(closes, call)
            .await
            .unwrap_or_else(|_| {
                Err(EtcdError::new(
                    EtcdErrorKind::Timeout,
                    format!("{write}: abandoned: the leader fence closed before etcd answered"),
                ))
            })
    }
}

#[async_trait]
impl EtcdApi for FencedEtcdApi {
    async fn list(&self, endpoints: &[String]) -> Result<MemberList, EtcdError> {
        self.inner.list(endpoints).await
    }

    async fn add(&self, endpoints: &[String], new: &NewMember) -> Result<AddedMember, EtcdError> {
        self.guarded(
            &format!("add etcd member {}", new.peer_url),
            self.inner.add(endpoints, new),
        )
        .await
    }

    async fn remove(&self, endpoints: &[String], id: u64) -> Result<(), EtcdError> {
        self.guarded(
            &format!("remove etcd member {id:x}"),
            self.inner.remove(endpoints, id),
        )
        .await
    }

    async fn promote(&self, endpoints: &[String], id: u64) -> Result<(), EtcdError> {
        self.guarded(
            &format!("promote etcd member {id:x}"),
            self.inner.promote(endpoints, id),
        )
        .await
    }

    async fn status(&self, endpoint: &str) -> Result<MemberHealth, EtcdError> {
        self.inner.status(endpoint).await
    }

    async fn move_leader(&self, leader: &str, to: u64) -> Result<(), EtcdError> {
        self.guarded(
            &format!("move etcd leadership to member {to:x}"),
            self.inner.move_leader(leader, to),
        )
        .await
    }

    async fn disarm_alarm(&self, endpoints: &[String], alarm: Alarm) -> Result<(), EtcdError> {
        self.guarded(
            &format!("disarm etcd alarm {}", alarm.kind.as_str()),
            self.inner.disarm_alarm(endpoints, alarm),
        )
        .await
    }

    async fn compact(&self, endpoints: &[String], revision: i64) -> Result<(), EtcdError> {
        self.guarded(
            &format!("compact etcd history to revision {revision}"),
            self.inner.compact(endpoints, revision),
        )
        .await
    }

    async fn hash_kv(&self, endpoint: &str, revision: i64) -> Result<KvHash, EtcdError> {
        // A read: it changes nothing, so it needs no fence.
        self.inner.hash_kv(endpoint, revision).await
    }

    async fn defragment(&self, endpoint: &str) -> Result<Defragmented, EtcdError> {
        self.guarded(
            &format!("defragment etcd member {endpoint}"),
            self.inner.defragment(endpoint),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use actix::Actor;
    use etcd_operator_actors::cluster::ClusterConfig;
    use etcd_operator_actors::metrics::Telemetry;
    use etcd_operator_actors::roster::WatchEvent;
    use etcd_operator_actors::supervisor::Supervisor;
    use etcd_operator_core::lifecycle::DesiredCluster;
    use etcd_operator_core::topology::Topology;
    use etcd_operator_fakes::{CallCounts, FakeCluster, FakeWiring};
    use futures::FutureExt;

    use super::*;
    use crate::controller::wiring::FencedWiring;

    const DEADLINE: Duration = Duration::from_secs(10);

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn held_since(t0: Instant) -> Fence {
        let fence = Fence::new(DEADLINE);
        assert!(fence.renewed_at(t0, t0));
        fence
    }

    #[test]
    fn the_fence_refuses_writes_until_the_lease_is_acquired() {
        let fence = Fence::new(DEADLINE);
        let refused = fence.check("create pod a").unwrap_err();
        assert_eq!(refused.write, "create pod a");
        assert!(!fence.is_open());
        let t0 = Instant::now();
        assert!(fence.renewed_at(t0, t0 + secs(1)));
        assert_eq!(fence.check_at("create pod a", t0 + secs(2)), Ok(()));
    }

    #[test]
    fn the_fence_refuses_writes_once_the_renew_deadline_passed_since_the_last_renewal_started() {
        let t0 = Instant::now();
        let fence = held_since(t0);
        assert_eq!(fence.check_at("delete pod a", t0 + DEADLINE), Ok(()));
        let late = t0 + DEADLINE + Duration::from_millis(1);
        let refused = fence.check_at("delete pod a", late).unwrap_err();
        assert!(refused.reason.contains("renew deadline"), "{refused}");
        assert!(
            fence.check_at("delete pod a", t0 + secs(1)).is_err(),
            "a closed fence stays closed"
        );
        assert!(
            !fence.renewed_at(late, late),
            "nor does a renewal reopen it"
        );
    }

    #[test]
    fn renewals_within_the_deadline_keep_the_fence_open_from_their_start() {
        let t0 = Instant::now();
        let fence = held_since(t0);
        // A renewal that started at 8 s and took 1.5 s counts from 8 s.
        assert!(fence.renewed_at(t0 + secs(8), t0 + Duration::from_millis(9_500)));
        assert_eq!(fence.check_at("add member", t0 + secs(18)), Ok(()));
        assert!(fence.check_at("add member", t0 + secs(19)).is_err());
    }

    #[test]
    fn a_renewal_that_returns_after_a_freeze_does_not_reopen_the_fence() {
        let t0 = Instant::now();
        let fence = held_since(t0);
        // Started 2 s after the last one, answered after the process was frozen a minute.
        assert!(!fence.renewed_at(t0 + secs(2), t0 + secs(62)));
        assert!(fence.check_at("promote member", t0 + secs(62)).is_err());
    }

    #[test]
    fn a_renewal_started_after_the_deadline_does_not_reopen_the_fence() {
        let t0 = Instant::now();
        let fence = held_since(t0);
        assert!(!fence.renewed_at(t0 + secs(60), t0 + secs(60)));
        assert!(fence.check_at("write status", t0 + secs(60)).is_err());
    }

    #[test]
    fn the_fence_closes_a_renew_deadline_after_the_last_renewal_started() {
        let t0 = Instant::now();
        let fence = held_since(t0);
        assert_eq!(fence.closes_at(), Some(t0 + DEADLINE));
        assert!(fence.renewed_at(t0 + secs(2), t0 + secs(3)));
        assert_eq!(fence.closes_at(), Some(t0 + secs(2) + DEADLINE));
        assert_eq!(Fence::always_open().closes_at(), None);
        assert_eq!(Fence::new(DEADLINE).closes_at(), None);
    }

    #[tokio::test]
    async fn closing_the_fence_wakes_whoever_waits_for_it_with_the_reason() {
        let fence = held_since(Instant::now());
        let closed = fence.closed();
        fence.close_now("another replica holds the lease");
        assert_eq!(closed.await, "another replica holds the lease");
        assert!(fence.check("record Event X").is_err());
    }

    #[test]
    fn an_always_open_fence_lets_writes_through_at_any_time() {
        let fence = Fence::always_open();
        let later = Instant::now() + secs(3600);
        assert_eq!(fence.check_at("create pod", later), Ok(()));
        assert!(fence.closed().now_or_never().is_none());
    }

    /// Every write a cluster's ports counted: Kubernetes writes and membership changes.
    fn writes(c: &CallCounts) -> [u64; 12] {
        [
            c.ensure_services,
            c.set_disruption_budget,
            c.expand_claim,
            c.create_member_pod,
            c.delete_pod,
            c.recreate_pod,
            c.set_pod_version,
            c.publish_status,
            c.record_event,
            c.add,
            c.remove,
            c.promote,
        ]
    }

    #[actix_rt::test]
    async fn a_cluster_actor_frozen_past_the_renew_deadline_writes_nothing_when_it_resumes() {
        tokio::time::pause();
        let fence = held_since(Instant::now());
        let fakes = Arc::new(FakeWiring::new());
        let topology = Topology::new("default", "frozen");
        fakes.insert(FakeCluster::running(topology.clone(), 1, "3.5.21"));
        let wiring = Arc::new(FencedWiring::new(fakes.clone(), fence.clone()));
        let log = slog::Logger::root(slog::Discard, slog::o!());
        // Ticks 250 ms apart: in the second below the leader acts but cannot finish.
        let config = ClusterConfig {
            follow_up: Duration::from_millis(250),
            ..ClusterConfig::default()
        };
        let supervisor = Supervisor::new(wiring, config, Telemetry::default(), &log).start();
        for event in [
            WatchEvent::RelistStarted,
            WatchEvent::Relisted(topology.clone(), DesiredCluster::new(5, "3.5.21")),
            WatchEvent::RelistDone,
        ] {
            supervisor.send(event).await.expect("supervisor alive");
        }
        tokio::time::sleep(secs(1)).await;
        let fake = fakes.cluster(&topology);
        let before = fake.calls();
        let (pods, members) = (fake.pods(), fake.members());
        assert!(before.add > 0, "the leader acted while it held the lease");
        assert!(!fake.is_converged(5, "3.5.21"), "work is left to do");

        // Frozen: no renewal; every timer fires at once when the clock jumps.
        tokio::time::advance(secs(60)).await;
        tokio::time::sleep(secs(30)).await;

        let after = fake.calls();
        assert!(after.observe > before.observe, "the actor kept ticking");
        assert_eq!(writes(&after), writes(&before), "a write passed the fence");
        assert_eq!(fake.pods(), pods, "a pod changed (a label, an image)");
        assert_eq!(fake.members(), members, "the membership changed");
        assert!(fence.closed().now_or_never().is_some());
    }

    /// An etcd that never answers a membership change.
    struct SilentEtcd;

    #[async_trait]
    impl EtcdApi for SilentEtcd {
        async fn list(&self, _: &[String]) -> Result<MemberList, EtcdError> {
            futures::future::pending().await
        }
        async fn add(&self, _: &[String], _: &NewMember) -> Result<AddedMember, EtcdError> {
            futures::future::pending().await
        }
        async fn remove(&self, _: &[String], _: u64) -> Result<(), EtcdError> {
            futures::future::pending().await
        }
        async fn promote(&self, _: &[String], _: u64) -> Result<(), EtcdError> {
            futures::future::pending().await
        }
        async fn status(&self, _: &str) -> Result<MemberHealth, EtcdError> {
            futures::future::pending().await
        }
        async fn move_leader(&self, _: &str, _: u64) -> Result<(), EtcdError> {
            futures::future::pending().await
        }
        async fn disarm_alarm(&self, _: &[String], _: Alarm) -> Result<(), EtcdError> {
            futures::future::pending().await
        }
        async fn compact(&self, _: &[String], _: i64) -> Result<(), EtcdError> {
            futures::future::pending().await
        }
        async fn defragment(&self, _: &str) -> Result<Defragmented, EtcdError> {
            futures::future::pending().await
        }
        async fn hash_kv(&self, _: &str, _: i64) -> Result<KvHash, EtcdError> {
            futures::future::pending().await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_membership_change_is_abandoned_when_the_fence_closes_before_etcd_answers() {
        let t0 = Instant::now();
        let fence = held_since(t0);
        let etcd = FencedEtcdApi::new(Arc::new(SilentEtcd), fence.clone());
        tokio::time::advance(secs(7)).await;
        let new = NewMember {
            peer_url: "http://m4.demo.default.svc:2380".into(),
            learner: true,
        };
        let error = etcd
            .add(&["http://m1:2379".into()], &new)
            .await
            .unwrap_err();
        assert_eq!(error.kind, EtcdErrorKind::Timeout, "{error:?}");
        assert!(error.message.contains("leader fence closed"), "{error:?}");
        assert_eq!(Instant::now(), t0 + DEADLINE, "waited past the fence");
    }
}
