//! Leader election through a `coordination.k8s.io/v1` Lease, so two replicas never both act.
//!
//! Timing, as client-go does it: a Lease lasts [`LEASE_DURATION`]; its holder tries to renew
//! it every [`RETRY_PERIOD`], each Lease call bounded by [`CALL_TIMEOUT`], and stops leading
//! when no renewal succeeded within [`RENEW_DEADLINE`], which is shorter than the Lease: its
//! [`Fence`] closes (no write passes it any more) and the process exits, so a restarted
//! replica starts over as a candidate.
//!
//! A candidate never compares the holder's `renewTime` with its own clock (clocks differ
//! between nodes): it takes another replica's Lease only after it has itself seen the same
//! record (holder, `renewTime`, `resourceVersion`) unchanged for the Lease's duration, on its
//! own monotonic clock ([`Observer`]). A replica that stops gracefully gives its Lease back,
//! so its successor need not wait.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use prometheus_client::metrics::gauge::Gauge;
use serde::Serialize;
use slog::{Logger, info, warn};
use tokio::time::Instant;

use etcd_operator_actors::debug::{ActorKind, DebugHub};
use etcd_operator_actors::metrics::Telemetry;

use super::fence::Fence;

/// How long a Lease holds without renewal.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// The holder stops leading when no renewal succeeded for this long (< [`LEASE_DURATION`]).
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// How often the holder renews, and a candidate looks at the Lease.
pub const RETRY_PERIOD: Duration = Duration::from_secs(2);
/// Deadline of each Lease call; a renewal (read, then update) fits twice in the deadline.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(4);

/// A Lease call that failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The call did not answer within [`CALL_TIMEOUT`].
    #[error("{call} the Lease timed out after {CALL_TIMEOUT:?}")]
    Timeout {
        /// What the call did.
        call: &'static str,
    },
    /// The API server refused or could not be reached.
    #[error("{call} the Lease: {source}")]
    Api {
        /// What the call did.
        call: &'static str,
        /// The client's error.
        source: kube::Error,
    },
}

impl LeaseError {
    fn is_conflict(&self) -> bool {
        matches!(self, LeaseError::Api { source: kube::Error::Api(s), .. } if s.code == 409)
    }
}

/// The parts of a Lease that change whenever its holder renews it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    holder: String,
    renew_time: Option<MicroTime>,
    resource_version: Option<String>,
}

/// What a Lease, as just read, means for a candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseReading {
    /// Nobody holds it (none yet, or given back), or this replica's identity does.
    Free,
    /// Another replica holds it; for this candidate it expires after `remaining` more
    /// without a change.
    Held {
        /// The holder's identity.
        holder: String,
        /// Time left before the candidate may take it.
        remaining: Duration,
    },
    /// Another replica's record stayed the same for the whole Lease duration, as this
    /// candidate saw it: the holder is gone.
    Expired {
        /// The former holder's identity.
        holder: String,
    },
}

/// What a candidate has seen of another replica's Lease, and since when on its own clock.
#[derive(Debug, Default)]
pub struct Observer {
    seen: Option<(Record, Instant)>,
}

/// The identity holding `lease` (empty when none).
fn holder_of(lease: &Lease) -> &str {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or_default()
}

impl Observer {
    /// Judges `lease`, read at `now`, for the candidate `identity`.
    pub fn judge(&mut self, lease: &Lease, identity: &str, now: Instant) -> LeaseReading {
        let holder = holder_of(lease).to_string();
        if holder.is_empty() || holder == identity {
            self.seen = None;
            return LeaseReading::Free;
        }
        let spec = lease.spec.clone().unwrap_or_default();
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .filter(|s| *s > 0)
            .map_or(LEASE_DURATION, Duration::from_secs);
        let record = Record {
            holder: holder.clone(),
            renew_time: spec.renew_time,
            resource_version: lease.metadata.resource_version.clone(),
        };
        let since = match &self.seen {
            Some((seen, since)) if *seen == record => *since,
            _ => {
                self.seen = Some((record, now));
                now
            }
        };
        let watched = now.saturating_duration_since(since);
        if watched > duration {
            LeaseReading::Expired { holder }
        } else {
            LeaseReading::Held {
                holder,
                remaining: duration - watched,
            }
        }
    }
}

/// What one acquisition attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// This replica holds the Lease now.
    Acquired,
    /// Another replica holds it (as far as this attempt saw).
    Waiting {
        /// The holder's identity (empty when unknown).
        holder: String,
    },
}

/// What a renewal found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewOutcome {
    /// The Lease is renewed.
    Renewed,
    /// Another replica holds the Lease (or nobody does): this one lost it.
    Lost(String),
    /// The Lease changed between the read and the update; try again.
    Conflict,
    /// The fence closed before the update could be sent; nothing was written.
    TooLate,
}

/// The election as this replica sees it, shown on `/readyz`, in `/debug/actors` (kind
/// `leader-election`) and as the `etcd_operator_leader` gauge.
#[derive(Clone)]
pub struct ElectionView {
    state: Arc<Mutex<ViewState>>,
    hub: DebugHub,
    gauge: Gauge,
}

#[derive(Debug, Clone, Serialize)]
struct ViewState {
    lease: String,
    identity: String,
    /// Leader election is on (off: this replica always leads).
    election: bool,
    leading: bool,
    /// The holder seen last.
    holder: String,
    /// Milliseconds since the Unix epoch of the last successful Lease call.
    lease_read_unix_ms: Option<u128>,
    #[serde(skip)]
    contact: Option<Instant>,
}

impl ElectionView {
    /// The view of a replica that takes part in the election for `lease` as `identity`.
    pub fn new(telemetry: &Telemetry, lease: &str, identity: &str) -> Self {
        Self::build(telemetry, lease, identity, true)
    }

    /// The view of a replica that leads without an election (`--leader-elect=false`).
    pub fn without_election(telemetry: &Telemetry, identity: &str) -> Self {
        Self::build(telemetry, "", identity, false)
    }

    fn build(telemetry: &Telemetry, lease: &str, identity: &str, election: bool) -> Self {
        let view = ElectionView {
            state: Arc::new(Mutex::new(ViewState {
                lease: lease.to_string(),
                identity: identity.to_string(),
                election,
                leading: !election,
                holder: if election { "" } else { identity }.to_string(),
                lease_read_unix_ms: None,
                contact: None,
            })),
            hub: telemetry.hub.clone(),
            gauge: telemetry.metrics.leader.clone(),
        };
        view.publish(&view.lock());
        view
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ViewState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self, state: &ViewState) {
        self.gauge.set(i64::from(state.leading));
        let json = serde_json::to_value(state).unwrap_or_default();
        self.hub
            .set_state(ActorKind::LeaderElection, "leader-election", json);
    }

    /// Records a Lease attempt that succeeded in talking to the API server: `holder` holds
    /// the Lease, and this replica leads or not. Both change at once, so readiness does not
    /// flicker between the read and the update of one attempt.
    pub fn record(&self, holder: &str, leading: bool) {
        let mut state = self.lock();
        state.holder = holder.to_string();
        state.leading = leading;
        state.contact = Some(Instant::now());
        state.lease_read_unix_ms = Some(etcd_operator_actors::debug::unix_ms());
        self.publish(&state);
    }

    /// Records whether this replica leads.
    pub fn set_leading(&self, leading: bool) {
        let mut state = self.lock();
        state.leading = leading;
        self.publish(&state);
    }

    /// Whether this replica leads.
    pub fn is_leading(&self) -> bool {
        self.lock().leading
    }

    /// Why this replica could not take over at `now`, if it could not: it has not read the
    /// Lease within a Lease duration (the API server is unreachable for it).
    pub fn cannot_take_over(&self, now: Instant) -> Option<String> {
        let state = self.lock();
        if !state.election {
            return None;
        }
        match state.contact {
            None => Some("the leader Lease has not been read yet".to_string()),
            Some(at) if now.saturating_duration_since(at) > LEASE_DURATION => Some(format!(
                "the leader Lease could not be read for {:?}",
                now.saturating_duration_since(at)
            )),
            Some(_) => None,
        }
    }
}

/// A Lease this replica may hold.
pub struct LeaderElection {
    api: Api<Lease>,
    name: String,
    identity: String,
    observer: Observer,
    view: ElectionView,
    logger: Logger,
}

async fn bounded<T>(
    call: &'static str,
    future: impl Future<Output = kube::Result<T>>,
) -> Result<T, LeaseError> {
    match tokio::time::timeout(CALL_TIMEOUT, future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(source)) => Err(LeaseError::Api { call, source }),
        Err(_) => Err(LeaseError::Timeout { call }),
    }
}

impl LeaderElection {
    /// An election for Lease `namespace/name` as `identity`, shown in `view`.
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        view: ElectionView,
        logger: &Logger,
    ) -> Self {
        LeaderElection {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            observer: Observer::default(),
            view,
            logger: logger.new(slog::o!("lease" => format!("{namespace}/{name}"), "identity" => identity.to_string())),
        }
    }

    fn next_spec(&self, old: Option<&LeaseSpec>) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        let old = old.cloned().unwrap_or_default();
        let ours = old.holder_identity.as_deref() == Some(self.identity.as_str());
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(LEASE_DURATION.as_secs() as i32),
            acquire_time: (if ours { old.acquire_time } else { None }).or(Some(now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(old.lease_transitions.unwrap_or(0) + i32::from(!ours)),
            ..LeaseSpec::default()
        }
    }

    async fn read(&self) -> Result<Option<Lease>, LeaseError> {
        bounded("reading", self.api.get_opt(&self.name)).await
    }

    /// Writes `lease` with this replica as holder; `false` when it changed since it was read
    /// (the resourceVersion makes the update a compare-and-swap) or was created meanwhile.
    async fn take(&self, mut lease: Lease, existing: bool) -> Result<bool, LeaseError> {
        lease.spec = Some(self.next_spec(lease.spec.as_ref()));
        let params = PostParams::default();
        let written = if existing {
            bounded("updating", self.api.replace(&self.name, &params, &lease)).await
        } else {
            bounded("creating", self.api.create(&params, &lease)).await
        };
        match written {
            Ok(_) => Ok(true),
            Err(e) if e.is_conflict() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Tries once to acquire the Lease.
    pub async fn try_acquire(&mut self) -> Result<Attempt, LeaseError> {
        let Some(lease) = self.read().await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: None,
            };
            return self.attempt(lease, false, "").await;
        };
        match self.observer.judge(&lease, &self.identity, Instant::now()) {
            LeaseReading::Held { holder, .. } => Ok(Attempt::Waiting { holder }),
            LeaseReading::Expired { holder } => {
                info!(self.logger, "the leader Lease stayed unchanged for its whole duration; taking it over";
                    "holder" => &holder);
                self.attempt(lease, true, &holder).await
            }
            LeaseReading::Free => {
                let holder = holder_of(&lease).to_string();
                self.attempt(lease, true, &holder).await
            }
        }
    }

    async fn attempt(
        &self,
        lease: Lease,
        existing: bool,
        holder: &str,
    ) -> Result<Attempt, LeaseError> {
        Ok(match self.take(lease, existing).await? {
            true => Attempt::Acquired,
            false => Attempt::Waiting {
                holder: holder.to_string(),
            },
        })
    }

    /// Tries once to renew the Lease this replica holds; the update is not sent once
    /// `fence` has closed (a process frozen between the read and the update).
    pub async fn try_renew(&self, fence: &Fence) -> Result<RenewOutcome, LeaseError> {
        let Some(lease) = self.read().await? else {
            return Ok(RenewOutcome::Lost(String::new()));
        };
        let holder = holder_of(&lease);
        if holder != self.identity {
            return Ok(RenewOutcome::Lost(holder.to_string()));
        }
        if !fence.is_open() {
            return Ok(RenewOutcome::TooLate);
        }
        match self.take(lease, true).await? {
            true => Ok(RenewOutcome::Renewed),
            false => Ok(RenewOutcome::Conflict),
        }
    }

    /// Waits until this replica holds the Lease and opens `fence`; `false` when the
    /// acquisition took so long that it does not count (the fence stays closed).
    pub async fn acquire(&mut self, fence: &Fence) -> bool {
        info!(self.logger, "waiting to become leader");
        loop {
            let started = Instant::now();
            match self.try_acquire().await {
                Ok(Attempt::Acquired) if fence.renewed(started) => {
                    self.view.record(&self.identity, true);
                    info!(self.logger, "became leader");
                    return true;
                }
                Ok(Attempt::Acquired) => {
                    warn!(self.logger, "acquired the lease too late to act on it");
                    return false;
                }
                Ok(Attempt::Waiting { holder }) => self.view.record(&holder, false),
                Err(e) => warn!(self.logger, "leader election failed"; "error" => %e),
            }
            tokio::time::sleep(RETRY_PERIOD).await;
        }
    }

    /// Renews the Lease until the fence closes, whoever closes it: no renewal succeeded
    /// within the renew deadline, another replica holds the Lease, or another write found
    /// the fence overdue first. A renewal still pending then is abandoned. Says that this
    /// replica stopped leading, and why, and resolves with the reason.
    pub async fn keep(&self, fence: &Fence) -> String {
        tokio::select! {
            () = self.renew_until_closed(fence) => {}
            _ = fence.closed() => {}
        }
        let reason = fence.closed().await;
        warn!(self.logger, "stopped leading"; "reason" => &reason);
        self.view.set_leading(false);
        reason
    }

    async fn renew_until_closed(&self, fence: &Fence) {
        loop {
            tokio::time::sleep(RETRY_PERIOD).await;
            let started = Instant::now();
            // Just past the instant the fence closes, so the check below sees it closed.
            let deadline =
                fence.closes_at().unwrap_or(started + RENEW_DEADLINE) + Duration::from_millis(1);
            match tokio::time::timeout_at(deadline, self.try_renew(fence)).await {
                Ok(Ok(RenewOutcome::Renewed)) => {
                    if fence.renewed(started) {
                        self.view.record(&self.identity, true);
                    }
                }
                Ok(Ok(RenewOutcome::Lost(holder))) => {
                    fence.close_now(&format!("the leader Lease is held by {holder:?} now"));
                    self.view.record(&holder, false);
                }
                Ok(Ok(RenewOutcome::Conflict | RenewOutcome::TooLate)) => {}
                Ok(Err(e)) => warn!(self.logger, "cannot renew the lease"; "error" => %e),
                Err(_) => warn!(
                    self.logger,
                    "the renewal was still pending at the renew deadline"
                ),
            }
            if fence.check("keep leading").is_err() {
                return;
            }
        }
    }

    /// Gives the Lease back (only after this replica's fence closed for good), so another
    /// replica can take it at once.
    pub async fn release(&self) {
        let lease = match self.read().await {
            Ok(Some(lease)) if holder_of(&lease) == self.identity => lease,
            Ok(_) => return,
            Err(e) => {
                warn!(self.logger, "cannot give the lease back"; "error" => %e);
                return;
            }
        };
        let mut released = lease;
        if let Some(spec) = released.spec.as_mut() {
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(Timestamp::now()));
        }
        let params = PostParams::default();
        match bounded(
            "releasing",
            self.api.replace(&self.name, &params, &released),
        )
        .await
        {
            Ok(_) => info!(self.logger, "gave the leader lease back"),
            Err(e) => warn!(self.logger, "cannot give the lease back"; "error" => %e),
        }
        self.view.set_leading(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, renewed: &str, resource_version: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                resource_version: Some(resource_version.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()).filter(|h: &String| !h.is_empty()),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(renewed.parse().unwrap())),
                ..LeaseSpec::default()
            }),
        }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn the_renew_deadline_ends_leadership_before_the_lease_can_expire() {
        assert!(RENEW_DEADLINE < LEASE_DURATION);
        assert!(
            CALL_TIMEOUT * 2 <= RENEW_DEADLINE,
            "a read and an update fit"
        );
        assert!(RETRY_PERIOD < RENEW_DEADLINE);
    }

    #[test]
    fn a_standby_takes_over_only_after_seeing_the_same_record_for_the_lease_duration() {
        let mut observer = Observer::default();
        let t0 = Instant::now();
        let record = lease("other", "2020-01-01T00:00:00Z", "7");
        // The renewTime is years old by our clock: that alone proves nothing.
        assert!(matches!(
            observer.judge(&record, "me", t0),
            LeaseReading::Held { remaining, .. } if remaining == secs(15)
        ));
        assert!(matches!(
            observer.judge(&record, "me", t0 + secs(15)),
            LeaseReading::Held { .. }
        ));
        assert_eq!(
            observer.judge(&record, "me", t0 + secs(16)),
            LeaseReading::Expired {
                holder: "other".into()
            }
        );
    }

    #[test]
    fn a_renewal_seen_by_the_standby_starts_its_wait_over() {
        let mut observer = Observer::default();
        let t0 = Instant::now();
        observer.judge(&lease("other", "2030-01-01T00:00:00Z", "7"), "me", t0);
        let renewed = lease("other", "2030-01-01T00:00:10Z", "8");
        assert!(matches!(
            observer.judge(&renewed, "me", t0 + secs(10)),
            LeaseReading::Held { remaining, .. } if remaining == secs(15)
        ));
        assert!(matches!(
            observer.judge(&renewed, "me", t0 + secs(24)),
            LeaseReading::Held { .. }
        ));
        assert!(matches!(
            observer.judge(&renewed, "me", t0 + secs(26)),
            LeaseReading::Expired { .. }
        ));
    }

    #[test]
    fn a_renew_time_in_the_future_does_not_make_the_standby_wait_longer() {
        let mut observer = Observer::default();
        let t0 = Instant::now();
        let skewed = lease("other", "2999-01-01T00:00:00Z", "3");
        observer.judge(&skewed, "me", t0);
        assert!(matches!(
            observer.judge(&skewed, "me", t0 + secs(16)),
            LeaseReading::Expired { .. }
        ));
    }

    #[test]
    fn a_lease_given_back_or_held_under_our_identity_is_free() {
        let mut observer = Observer::default();
        let now = Instant::now();
        let given_back = lease("", "2030-01-01T00:00:00Z", "9");
        assert_eq!(observer.judge(&given_back, "me", now), LeaseReading::Free);
        let ours = lease("me", "2030-01-01T00:00:00Z", "9");
        assert_eq!(observer.judge(&ours, "me", now), LeaseReading::Free);
    }

    #[test]
    fn a_standby_that_read_the_lease_recently_can_take_over() {
        let telemetry = Telemetry::default();
        let view = ElectionView::new(&telemetry, "ns/lease", "me");
        let now = Instant::now();
        assert!(view.cannot_take_over(now).is_some(), "never read");
        view.record("other", false);
        let now = Instant::now();
        assert_eq!(view.cannot_take_over(now), None);
        let reason = view.cannot_take_over(now + secs(16)).unwrap();
        assert!(reason.contains("could not be read"), "{reason}");
        assert!(!view.is_leading());
        assert_eq!(telemetry.metrics.leader.get(), 0);
    }

    #[test]
    fn leadership_shows_in_the_gauge_and_the_debug_view() {
        let telemetry = Telemetry::default();
        let view = ElectionView::new(&telemetry, "ns/lease", "me");
        view.record("me", true);
        assert_eq!(telemetry.metrics.leader.get(), 1);
        let entry = telemetry
            .hub
            .snapshot()
            .into_iter()
            .find(|s| s.kind == ActorKind::LeaderElection)
            .expect("an election entry");
        assert_eq!(entry.state["leading"], true);
        assert_eq!(entry.state["holder"], "me");
        assert_eq!(entry.state["lease"], "ns/lease");
    }

    #[test]
    fn without_an_election_the_replica_leads_and_needs_no_lease() {
        let telemetry = Telemetry::default();
        let view = ElectionView::without_election(&telemetry, "me");
        assert!(view.is_leading());
        assert_eq!(view.cannot_take_over(Instant::now() + secs(3600)), None);
        assert_eq!(telemetry.metrics.leader.get(), 1);
    }
}
