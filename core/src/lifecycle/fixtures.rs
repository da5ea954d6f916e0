//! Test fixtures: a small builder for observations of a cluster named `demo`.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::*;

/// Builds observations member by member.
#[derive(Clone)]
pub struct World {
    /// The observation built so far.
    pub obs: Observation,
    members: Vec<MemberView>,
    listed: bool,
    /// The PodDisruptionBudget a test set (`Some(None)`: none), else the quorum.
    budget: Option<Option<u32>>,
}

/// The etcd cluster ID of the fixtures' cluster.
pub const CLUSTER_ID: u64 = 0xdead_beef;

/// The peer URL of member `name` of the cluster `demo`.
pub fn peer_url(name: &str) -> String {
    format!("http://{name}.demo.default.svc:2380")
}

impl World {
    /// No pods, no members, Services present.
    pub fn empty(now: Instant) -> Self {
        World {
            obs: Observation {
                now,
                pods: Vec::new(),
                services_present: true,
                disruption_budget: None,
                claims: BTreeMap::new(),
                claim_class: None,
                endpoints: Vec::new(),
                recorded: Recorded::default(),
                name_conflict: None,
                restore_problem: None,
                membership: Membership::Unreachable {
                    error: "connection refused".into(),
                },
                health: BTreeMap::new(),
                tls: TlsObservation::default(),
                prepares_joiners: false,
                newest_backup: None,
                hashes: None,
            },
            members: Vec::new(),
            listed: false,
            budget: None,
        }
    }

    /// `n` healthy voting members `m1..mn` running `version`, with Running pods; `m1` leads.
    pub fn healthy(now: Instant, n: u64, version: &str) -> Self {
        let mut w = World::empty(now);
        for id in 1..=n {
            w = w.member(id, version);
        }
        w
    }

    /// Adds a healthy started voting member `m<id>` with a Running pod.
    pub fn member(mut self, id: u64, version: &str) -> Self {
        let name = format!("m{id}");
        self.members.push(MemberView {
            id,
            name: name.clone(),
            peer_urls: vec![peer_url(&name)],
            client_urls: vec![format!("http://{name}.demo.default.svc:2379")],
            is_learner: false,
        });
        self.obs.pods.push(PodView::running(&name, version));
        let mut health = MemberHealth::healthy(version);
        health.leader = Some(1);
        self.obs.health.insert(id, health);
        self.listed = true;
        self
    }

    /// Adds a member that was `member add`ed but has not started (no name, no pod).
    pub fn unstarted(mut self, id: u64, name: &str, learner: bool) -> Self {
        self.members.push(MemberView {
            id,
            name: String::new(),
            peer_urls: vec![peer_url(name)],
            client_urls: vec![],
            is_learner: learner,
        });
        self.listed = true;
        self
    }

    /// Changes every member's health with `f(id, health)`.
    pub fn health(mut self, mut f: impl FnMut(u64, &mut MemberHealth)) -> Self {
        for (id, health) in &mut self.obs.health {
            f(*id, health);
        }
        self
    }

    /// Marks member `id` a learner.
    pub fn learner(mut self, id: u64) -> Self {
        self.members
            .iter_mut()
            .find(|m| m.id == id)
            .unwrap()
            .is_learner = true;
        self
    }

    /// The observation is made at `when` instead (a later tick on the same world).
    pub fn at(mut self, when: Instant) -> Self {
        self.obs.now = when;
        self
    }

    /// Member `id` does not answer.
    pub fn unreachable(mut self, id: u64) -> Self {
        self.obs
            .health
            .insert(id, MemberHealth::unreachable("deadline exceeded"));
        self
    }

    /// Member `m<id>` does not answer and its pod has failed.
    pub fn pod_failed(self, id: u64) -> Self {
        self.unreachable(id)
            .pod(&format!("m{id}"), |p| p.phase = PodPhase::Failed)
    }

    /// Member `m<id>` does not answer and its pod is marked not ready.
    pub fn not_ready(self, id: u64) -> Self {
        self.unreachable(id)
            .pod(&format!("m{id}"), |p| p.ready = false)
    }

    /// Member `m<id>` does not answer and its pod is gone.
    pub fn pod_gone(self, id: u64) -> Self {
        self.unreachable(id).without_pod(&format!("m{id}"))
    }

    /// Member `id` reports raft index `index`.
    pub fn raft_index(mut self, id: u64, index: u64) -> Self {
        self.obs.health.get_mut(&id).unwrap().raft_index = Some(index);
        self
    }

    /// Every member that answers names member `id` its leader.
    pub fn led_by(mut self, id: u64) -> Self {
        for health in self.obs.health.values_mut().filter(|h| h.reachable) {
            health.leader = Some(id);
        }
        self
    }

    /// Member `id` reports `version`.
    pub fn runs(mut self, id: u64, version: &str) -> Self {
        self.obs.health.get_mut(&id).unwrap().version = version.parse().ok();
        self
    }

    /// Changes the pod named `name` in place.
    pub fn pod(mut self, name: &str, f: impl FnOnce(&mut PodView)) -> Self {
        f(self.obs.pods.iter_mut().find(|p| p.name == name).unwrap());
        self
    }

    /// Adds a Running pod that has no member.
    pub fn extra_pod(mut self, name: &str, phase: PodPhase) -> Self {
        self.obs.pods.push(PodView {
            phase,
            ready: phase == PodPhase::Running,
            ..PodView::running(name, "3.5.21")
        });
        self
    }

    /// Joiners' pods may be prepared before their `member add` (the operator's image is
    /// known).
    pub fn preparing_joiners(mut self) -> Self {
        self.obs.prepares_joiners = true;
        self
    }

    /// Adds the pod of prepared joiner `name`, built to join `peers`, published, its etcd
    /// waiting for its member add.
    pub fn prepared(mut self, name: &str, peers: &[&str]) -> Self {
        let mut pod = PodView::running(name, "3.5.21");
        pod.ready = false;
        pod.voter = false;
        pod.started = false;
        pod.prepared_with = Some(peers.iter().map(ToString::to_string).collect());
        self.obs.pods.push(pod);
        self
    }

    /// Removes the pod named `name`.
    pub fn without_pod(mut self, name: &str) -> Self {
        self.obs.pods.retain(|p| p.name != name);
        self
    }

    /// The object's status records the cluster's ID: it exists.
    pub fn bootstrapped(mut self) -> Self {
        self.obs.recorded.bootstrap = Some(BootstrapRecord {
            seed: Some("m1".into()),
            token: Some("demo-token".into()),
            cluster_id: Some(CLUSTER_ID),
        });
        self
    }

    /// The object's status records seed `name`, and no member has answered yet.
    pub fn seeding(mut self, name: &str) -> Self {
        self.obs.recorded.bootstrap = Some(BootstrapRecord::seed(name, "demo-token"));
        self
    }

    /// Member `name` has a PersistentVolumeClaim in `phase`, which its pod (if any) mounts.
    pub fn claim(mut self, name: &str, phase: ClaimPhase) -> Self {
        self.obs.claims.insert(name.to_string(), Claim::new(phase));
        if let Some(pod) = self.obs.pods.iter_mut().find(|p| p.name == name) {
            pod.on_claim = true;
        }
        self
    }

    /// Every claim requests and has `bytes`; their class allows expansion or not.
    pub fn claims_sized(mut self, bytes: u128, expandable: bool) -> Self {
        for claim in self.obs.claims.values_mut() {
            claim.requested_bytes = Some(bytes);
            claim.capacity_bytes = Some(bytes);
        }
        self.obs.claim_class = Some(ClaimClass {
            name: "local-path".into(),
            allows_expansion: expandable,
        });
        self
    }

    /// Every member listed so far has a bound claim.
    pub fn on_volumes(mut self) -> Self {
        let names: Vec<String> = self.members.iter().map(|m| m.name.clone()).collect();
        for name in names {
            self = self.claim(&name, ClaimPhase::Bound);
        }
        self
    }

    /// The Services are missing.
    pub fn without_services(mut self) -> Self {
        self.obs.services_present = false;
        self
    }

    /// Etcd answers nothing.
    pub fn etcd_down(mut self) -> Self {
        self.listed = false;
        self
    }

    /// The PodDisruptionBudget's `minAvailable` (`None`: there is none). Unless set, it is
    /// the quorum of the listed voting members, as the operator keeps it.
    pub fn budget(mut self, min_available: Option<u32>) -> Self {
        self.budget = Some(min_available);
        self
    }

    /// Every pod was built with TLS `mode`.
    pub fn pods_tls(mut self, mode: TlsMode) -> Self {
        for pod in &mut self.obs.pods {
            pod.tls = mode;
        }
        self
    }

    /// What the adapter found of the certificates.
    pub fn certificates(mut self, tls: TlsObservation) -> Self {
        self.obs.tls = tls;
        self
    }

    /// The observation.
    pub fn build(mut self) -> Observation {
        let voters = self.members.iter().filter(|m| !m.is_learner).count();
        let kept = super::upkeep::budget_min_available(&self.obs, &self.members) as u32;
        self.obs.disruption_budget = match self.budget {
            Some(set) => set,
            None => (voters > 0).then_some(kept),
        };
        if self.listed {
            self.obs.membership = Membership::Listed {
                cluster_id: CLUSTER_ID,
                members: self.members,
            };
        }
        self.obs
    }
}

/// Asserts the decision does nothing, for `reason`.
pub fn assert_idle(d: &Decision, reason: Reason) {
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert_eq!(d.why.reason, reason, "{}", d.why.message);
}

/// Asserts the decision was made for `reason`, showing its message if not.
pub fn assert_reason(d: &Decision, reason: Reason) {
    assert_eq!(d.why.reason, reason, "{}", d.why.message);
}

/// Asserts the decision does nothing, for `reason`, and its message says `words`.
pub fn assert_idle_saying(d: &Decision, reason: Reason, words: &str) {
    assert_idle(d, reason);
    assert!(d.why.message.contains(words), "{}", d.why.message);
}

/// A state that has already seen the cluster running.
/// Deadlines for tests whose ticks do not advance the clock: no settle between the
/// restarts of a rolling restart (it has tests of its own).
pub fn unsettled_deadlines() -> Deadlines {
    Deadlines {
        restart_settle: Duration::ZERO,
        ..Deadlines::default()
    }
}

/// A state of a cluster that has bootstrapped and runs.
pub fn running_state() -> State {
    State {
        phase: Phase::Running,
        cluster_id: Some(CLUSTER_ID),
        ..State::default()
    }
}

/// The decision has no action of this pattern.
#[cfg(test)]
macro_rules! assert_no_action {
    ($d:expr, $pattern:pat) => {
        assert!(
            !$d.actions.iter().any(|a| matches!(a, $pattern)),
            "{:?}",
            $d.actions
        )
    };
}
#[cfg(test)]
pub(crate) use assert_no_action;

/// The decision's actions, as a slice, match this pattern.
#[cfg(test)]
macro_rules! assert_actions {
    ($d:expr, $pattern:pat $(if $guard:expr)?) => {
        assert!(
            matches!($d.actions.as_slice(), $pattern $(if $guard)?),
            "{:?}",
            $d.actions
        )
    };
}
#[cfg(test)]
pub(crate) use assert_actions;
