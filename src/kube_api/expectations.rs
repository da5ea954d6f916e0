//! Writes the informer cache has not shown yet.
//!
//! Observations read pods from a watch cache, which lags behind the operator's own
//! writes. Without care, a tick right after creating the seed pod could see no pod and
//! create a second seed. Every create and delete is recorded here until the cache shows it
//! (or a timeout passes), and observations are corrected with it; so are image changes
//! and voter labels, so that no step is taken twice for one pod.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use etcd_operator_core::lifecycle::PodView;

/// How long a write is expected before the cache is trusted again.
pub const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(60);

/// Pods created or deleted by this operator that the cache may not show yet.
#[derive(Debug, Default)]
pub struct Expectations {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    created: BTreeMap<String, Instant>,
    deleted: BTreeMap<String, Instant>,
    /// Pods whose etcd image was changed, with the version asked for.
    versions: BTreeMap<String, (String, Instant)>,
    /// Created pods of prepared joiners, with the members they were built to join.
    prepared: BTreeMap<String, Vec<String>>,
    /// Pods labelled voting members.
    labelled: BTreeMap<String, ((), Instant)>,
}

/// Keeps the expected changes of `expected` the cache does not show yet (`shows`) and
/// applies each to its pod in `pods` (`apply`); drops those shown, timed out, or whose
/// pod is gone.
fn correct<T>(
    expected: &mut BTreeMap<String, (T, Instant)>,
    pods: &mut [PodView],
    shows: impl Fn(&PodView, &T) -> bool,
    apply: impl Fn(&mut PodView, &T),
) {
    let now = Instant::now();
    expected.retain(|name, (change, at)| {
        let Some(pod) = pods.iter_mut().find(|p| &p.name == name) else {
            return false;
        };
        if shows(pod, change) || now.duration_since(*at) >= EXPECTATION_TIMEOUT {
            return false;
        }
        apply(pod, change);
        true
    });
}

impl Expectations {
    /// Records that pod `name` was created.
    pub fn created(&self, name: &str) {
        let mut inner = self.lock();
        inner.deleted.remove(name);
        inner.labelled.remove(name);
        inner.created.insert(name.to_string(), Instant::now());
    }

    /// Records that pod `name` of a prepared joiner, built to join `peers`, was created.
    pub fn created_prepared(&self, name: &str, peers: &[String]) {
        self.created(name);
        self.lock()
            .prepared
            .insert(name.to_string(), peers.to_vec());
    }

    /// The members an expected pod of a prepared joiner was built to join.
    pub fn prepared_with(&self, name: &str) -> Option<Vec<String>> {
        self.lock().prepared.get(name).cloned()
    }

    /// Records that pod `name` was deleted.
    pub fn deleted(&self, name: &str) {
        let mut inner = self.lock();
        inner.created.remove(name);
        inner.prepared.remove(name);
        inner.labelled.remove(name);
        inner.deleted.insert(name.to_string(), Instant::now());
    }

    /// Records that pod `name` was set to run etcd `version`.
    pub fn version_set(&self, name: &str, version: &str) {
        self.lock()
            .versions
            .insert(name.to_string(), (version.to_string(), Instant::now()));
    }

    /// Corrects the versions of `pods` whose image change the cache does not show yet, so
    /// an upgrade step is never taken twice for one member.
    pub fn correct_versions(&self, pods: &mut [PodView]) {
        correct(
            &mut self.lock().versions,
            pods,
            |pod, version| pod.version.as_deref() == Some(version.as_str()),
            |pod, version| pod.version = Some(version.clone()),
        );
    }

    /// Records that pod `name` was labelled a voting member.
    pub fn labelled_voter(&self, name: &str) {
        self.lock()
            .labelled
            .insert(name.to_string(), ((), Instant::now()));
    }

    /// Marks as voters the `pods` labelled so whose label the cache does not show yet, so
    /// a pod is labelled (and its label logged) once.
    pub fn correct_voters(&self, pods: &mut [PodView]) {
        correct(
            &mut self.lock().labelled,
            pods,
            |pod, ()| pod.voter,
            |pod, ()| pod.voter = true,
        );
    }

    /// Given the names the cache shows, returns the pods it should also show (created, not
    /// seen yet) and the pods it should not (deleted, still seen). Settled and timed-out
    /// expectations are dropped.
    pub fn reconcile(&self, cached: &[String]) -> (Vec<String>, Vec<String>) {
        let now = Instant::now();
        let mut inner = self.lock();
        let fresh = |at: &Instant| now.duration_since(*at) < EXPECTATION_TIMEOUT;
        inner
            .created
            .retain(|name, at| fresh(at) && !cached.contains(name));
        let Inner {
            created, prepared, ..
        } = &mut *inner;
        prepared.retain(|name, _| created.contains_key(name));
        inner
            .deleted
            .retain(|name, at| fresh(at) && cached.contains(name));
        (
            inner.created.keys().cloned().collect(),
            inner.deleted.keys().cloned().collect(),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expected_prepared_joiner_keeps_its_members_until_the_cache_shows_it() {
        let e = Expectations::default();
        e.created_prepared("m3", &["m1".into(), "m2".into()]);
        assert_eq!(e.reconcile(&[]).0, vec!["m3"]);
        assert_eq!(e.prepared_with("m3"), Some(vec!["m1".into(), "m2".into()]));
        e.reconcile(&["m3".into()]);
        assert_eq!(e.prepared_with("m3"), None);
    }

    #[test]
    fn created_pod_is_expected_until_the_cache_shows_it() {
        let e = Expectations::default();
        e.created("seed");
        assert_eq!(e.reconcile(&[]).0, vec!["seed"]);
        assert!(e.reconcile(&["seed".into()]).0.is_empty());
        assert!(
            e.reconcile(&[]).0.is_empty(),
            "settled expectations are forgotten"
        );
    }

    /// Pod `m1`, a Ready voter on etcd `version`, as the cache shows it.
    fn pod(version: &str) -> PodView {
        PodView::running("m1", version)
    }

    #[test]
    fn a_voter_label_shows_until_the_cache_catches_up_and_not_on_a_new_pod_of_the_name() {
        let unlabelled = || PodView {
            voter: false,
            ..pod("3.5.35")
        };
        let e = Expectations::default();
        e.labelled_voter("m1");
        let mut stale = [unlabelled()];
        e.correct_voters(&mut stale);
        assert!(stale[0].voter, "labelled, not cached yet");
        e.correct_voters(&mut [pod("3.5.35")]);
        let mut later = [unlabelled()];
        e.correct_voters(&mut later);
        assert!(!later[0].voter, "settled, forgotten");

        e.labelled_voter("m1");
        e.deleted("m1");
        e.created("m1");
        let mut new_pod = [unlabelled()];
        e.correct_voters(&mut new_pod);
        assert!(!new_pod[0].voter, "a new pod of the same name has no label");
    }

    #[test]
    fn an_image_change_shows_until_the_cache_catches_up() {
        let e = Expectations::default();
        e.version_set("m1", "3.5.35");
        let mut stale = [pod("3.4.23")];
        e.correct_versions(&mut stale);
        assert_eq!(stale[0].version.as_deref(), Some("3.5.35"));
        let mut fresh = [pod("3.5.35")];
        e.correct_versions(&mut fresh);
        let mut later = [pod("3.4.23")];
        e.correct_versions(&mut later);
        assert_eq!(
            later[0].version.as_deref(),
            Some("3.4.23"),
            "settled, forgotten"
        );
    }

    #[test]
    fn deleted_pod_is_hidden_until_the_cache_drops_it() {
        let e = Expectations::default();
        e.deleted("old");
        assert_eq!(e.reconcile(&["old".into()]).1, vec!["old"]);
        assert!(e.reconcile(&[]).1.is_empty());
    }
}
