//! Ownership on the Kubernetes side: a cluster's pods, Services and PVCs are its own only
//! when their ownerReference carries its UID; anything else under a name it needs is a
//! conflict, never shared. The API server is a fake answering canned responses.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::http::{Request, Response};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimStatus, Pod, Service, ServiceSpec,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use std::time::Duration;

use kube::client::{Body, ClientBuilder};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::{reflector, watcher};
use kube::{Client, Resource};
use serde_json::{Value, json};

use etcd_operator_actors::ports::{
    ApiError, ClusterApi, InitialState, KubeView, MemberPod, ServiceKind,
};
use etcd_operator_core::lifecycle::TlsMode;
use etcd_operator_core::topology::Topology;

use super::{Caches, Identities, KubeClusterApi};
use crate::api::{EtcdCluster, EtcdClusterSpec};
use crate::controller::fence::Fence;
use crate::controller::fenced_client::FenceLayer;
use crate::resources::labels::{client_selector, object_labels};

const NS: &str = "ns";
const UID: &str = "uid-of-foo";

/// Canned answers by `METHOD path`; anything else is 404 NotFound. Records every call.
#[derive(Clone, Default)]
struct FakeApi {
    answers: Arc<Mutex<BTreeMap<String, (u16, Value)>>>,
    calls: Arc<Mutex<Vec<String>>>,
    /// The JSON bodies sent, by `METHOD path`, in order.
    bodies: Arc<Mutex<Vec<(String, Value)>>>,
    /// The leader fence the client's writes pass, and the call (`METHOD path`) on whose
    /// arrival it closes.
    fence: Arc<Mutex<Option<(Fence, String)>>>,
}

impl FakeApi {
    fn answer(&self, method: &str, path: &str, code: u16, body: Value) {
        let key = format!("{method} {path}");
        self.answers.lock().unwrap().insert(key, (code, body));
    }

    fn forget(&self, method: &str, path: &str) {
        let key = format!("{method} {path}");
        self.answers.lock().unwrap().remove(&key);
    }

    /// `POST collection` answers 409 AlreadyExists: an object of that name is there.
    fn already_exists(&self, collection: &str) {
        self.answer("POST", collection, 409, status(409, "AlreadyExists"));
    }

    /// `GET path` answers `object`.
    fn holds<T: serde::Serialize>(&self, path: &str, object: &T) {
        self.answer("GET", path, 200, to_json(object));
    }

    /// The client's writes pass `fence`, which closes once `call` reaches the server.
    fn fenced(&self, fence: &Fence, call: &str) {
        *self.fence.lock().unwrap() = Some((fence.clone(), call.to_string()));
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    /// `call` (`METHOD path`) was made.
    fn assert_called(&self, call: &str) {
        let calls = self.calls();
        assert!(calls.iter().any(|c| c == call), "no {call} in {calls:?}");
    }

    /// The JSON bodies sent with `call` (`METHOD path`), in order.
    fn sent(&self, call: &str) -> Vec<Value> {
        let bodies = self.bodies.lock().unwrap();
        bodies
            .iter()
            .filter(|(c, _)| c == call)
            .map(|(_, b)| b.clone())
            .collect()
    }

    fn client(&self) -> Client {
        let fake = self.clone();
        let service = tower::service_fn(move |req: Request<Body>| {
            let fake = fake.clone();
            async move {
                let key = format!("{} {}", req.method(), req.uri().path());
                fake.calls.lock().unwrap().push(key.clone());
                if let Some((fence, _)) = fake.fence.lock().unwrap().as_ref().filter(|f| f.1 == key)
                {
                    fence.close_now("the Lease was lost");
                }
                let sent = axum::body::to_bytes(axum::body::Body::new(req.into_body()), 1 << 20)
                    .await
                    .unwrap_or_default();
                if let Ok(json) = serde_json::from_slice::<Value>(&sent) {
                    fake.bodies.lock().unwrap().push((key.clone(), json));
                }
                let (code, body) = fake
                    .answers
                    .lock()
                    .unwrap()
                    .get(&key)
                    .cloned()
                    .unwrap_or_else(|| (404, status(404, "NotFound")));
                let response = Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap();
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        match self.fence.lock().unwrap().as_ref() {
            Some((fence, _)) => ClientBuilder::new(service, NS)
                .with_layer(&FenceLayer::new(fence.clone(), Duration::from_secs(10)))
                .build(),
            None => Client::new(service, NS),
        }
    }
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "reason": reason, "code": code, "message": reason})
}

fn cluster(name: &str, uid: &str) -> EtcdCluster {
    let mut c = EtcdCluster::new(
        name,
        EtcdClusterSpec {
            size: 1,
            ..EtcdClusterSpec::default()
        },
    );
    c.metadata.namespace = Some(NS.into());
    c.metadata.uid = Some(uid.into());
    c
}

fn owned_by(name: &str, uid: &str) -> OwnerReference {
    cluster(name, uid).controller_owner_ref(&()).unwrap()
}

fn meta(name: &str, owner: Option<OwnerReference>, labels_of: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(NS.into()),
        labels: labels_of.map(object_labels),
        owner_references: owner.map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

/// A Service as the operator makes it: a `<cluster>-client` Service selects the
/// cluster's voting members.
fn service(name: &str, owner: Option<OwnerReference>, labels_of: Option<&str>) -> Service {
    let selector = name.strip_suffix("-client").map(client_selector);
    Service {
        metadata: meta(name, owner, labels_of),
        spec: Some(ServiceSpec {
            selector,
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

fn pod(name: &str, cluster_name: &str, owner_uid: &str) -> Pod {
    Pod {
        metadata: meta(
            name,
            Some(owned_by(cluster_name, owner_uid)),
            Some(cluster_name),
        ),
        ..Pod::default()
    }
}

/// `foo` (uid `UID`) and the given cached Services and pods, over the fake API.
fn api_with(fake: &FakeApi, services: Vec<Service>, pods: Vec<Pod>) -> KubeClusterApi {
    api_of(fake, cluster("foo", UID), services, pods, vec![], vec![])
}

/// `cluster` and the given cached Services and pods, over the fake API.
/// The API of `cluster` with its own Services and nothing else cached.
fn api_over(fake: &FakeApi, cluster: EtcdCluster) -> KubeClusterApi {
    api_of(fake, cluster, our_services(), vec![], vec![], vec![])
}

fn api_of(
    fake: &FakeApi,
    cluster: EtcdCluster,
    services: Vec<Service>,
    pods: Vec<Pod>,
    budgets: Vec<PodDisruptionBudget>,
    claims: Vec<PersistentVolumeClaim>,
) -> KubeClusterApi {
    let topology = Topology::new(NS, &cluster.metadata.name.clone().unwrap());
    let (clusters, mut cw) = reflector::store();
    cw.apply_watcher_event(&watcher::Event::Apply(cluster));
    let (service_store, pod_store) = (store_of(services), store_of(pods));
    let (budget_store, claim_store) = (store_of(budgets), store_of(claims));
    let client = fake.client();
    let reporter = Reporter {
        controller: "test".into(),
        instance: None,
    };
    KubeClusterApi::new(
        client.clone(),
        topology,
        Caches {
            clusters,
            pods: pod_store,
            services: service_store,
            budgets: budget_store,
            claims: claim_store,
            slices: reflector::store().0,
        },
        Recorder::new(client, reporter),
        Identities::default(),
    )
}

fn our_services() -> Vec<Service> {
    vec![
        service("foo", Some(owned_by("foo", UID)), Some("foo")),
        service("foo-client", Some(owned_by("foo", UID)), Some("foo")),
    ]
}

fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap()
}

/// The message of a [`ApiError::Conflict`]; any other error fails the test.
/// A reflector store holding `objects`.
fn store_of<K>(objects: Vec<K>) -> reflector::Store<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (store, mut writer) = reflector::store();
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::Apply(object));
    }
    store
}

fn conflict_message(error: &ApiError) -> &str {
    let ApiError::Conflict(message) = error else {
        panic!("not a conflict: {error:?}");
    };
    message
}

#[tokio::test]
async fn a_recreated_cluster_never_takes_the_pods_of_the_deleted_one_for_its_own() {
    let fake = FakeApi::default();
    let pods = vec![
        pod("foo-old11", "foo", "uid-of-the-deleted-foo"),
        pod("foo-new22", "foo", UID),
    ];
    let view = api_with(&fake, our_services(), pods)
        .observe()
        .await
        .unwrap();
    let names: Vec<_> = view.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["foo-new22"]);
    assert_eq!(view.name_conflict, None);
    assert!(view.services_present);
}

#[tokio::test]
async fn another_clusters_service_under_our_client_service_name_is_a_name_conflict() {
    let fake = FakeApi::default();
    let services = vec![
        service("foo", Some(owned_by("foo", UID)), Some("foo")),
        // The headless Service of cluster `foo-client`.
        service(
            "foo-client",
            Some(owned_by("foo-client", "uid-of-foo-client")),
            Some("foo-client"),
        ),
    ];
    let view = api_with(&fake, services, vec![]).observe().await.unwrap();
    let conflict = view.name_conflict.expect("a conflict is reported");
    assert!(conflict.contains("Service foo-client"), "{conflict}");
    assert!(conflict.contains("EtcdCluster foo-client"), "{conflict}");
    assert!(!view.services_present);
}

#[tokio::test]
async fn a_users_unlabeled_service_under_our_name_is_found_and_is_a_name_conflict() {
    let fake = FakeApi::default();
    let theirs = service("foo-client", None, None);
    fake.holds("/api/v1/namespaces/ns/services/foo-client", &theirs);
    let view = api_with(&fake, vec![], vec![]).observe().await.unwrap();
    let conflict = view.name_conflict.expect("a conflict is reported");
    assert_says(&conflict, "Service foo-client");
    assert_says(&conflict, "not managed by etcd-operator");
}

#[tokio::test]
async fn services_of_a_deleted_cluster_of_the_same_name_are_a_conflict_until_collected() {
    let fake = FakeApi::default();
    let old = owned_by("foo", "uid-of-the-deleted-foo");
    let services = vec![
        service("foo", Some(old.clone()), Some("foo")),
        service("foo-client", Some(old), Some("foo")),
    ];
    let view = api_with(&fake, services, vec![]).observe().await.unwrap();
    let conflict = view.name_conflict.expect("a conflict is reported");
    assert!(conflict.contains("earlier EtcdCluster foo"), "{conflict}");
    assert!(conflict.contains("garbage collector"), "{conflict}");
}

#[tokio::test]
async fn missing_services_are_looked_up_and_absent_ones_are_no_conflict() {
    let fake = FakeApi::default();
    let view = api_with(&fake, vec![], vec![]).observe().await.unwrap();
    assert_eq!(view.name_conflict, None);
    assert!(!view.services_present);
    fake.assert_called("GET /api/v1/namespaces/ns/services/foo-client");
}

#[tokio::test]
async fn cached_services_of_our_own_need_no_api_call() {
    let fake = FakeApi::default();
    let view = api_with(&fake, our_services(), vec![])
        .observe()
        .await
        .unwrap();
    assert!(view.services_present);
    assert_eq!(fake.calls(), Vec::<String>::new());
}

#[tokio::test]
async fn creating_a_service_another_owner_holds_fails_naming_that_owner() {
    let fake = FakeApi::default();
    fake.already_exists("/api/v1/namespaces/ns/services");
    let theirs = service(
        "foo-client",
        Some(owned_by("foo-client", "uid-of-foo-client")),
        Some("foo-client"),
    );
    let ours = service("foo", Some(owned_by("foo", UID)), Some("foo"));
    fake.holds("/api/v1/namespaces/ns/services/foo", &ours);
    fake.holds("/api/v1/namespaces/ns/services/foo-client", &theirs);
    let api = api_with(&fake, vec![], vec![]);
    assert_eq!(api.ensure_service(ServiceKind::Headless).await, Ok(()));
    let error = api
        .ensure_service(ServiceKind::Client)
        .await
        .expect_err("someone else's Service is not ours");
    let message = conflict_message(&error);
    assert!(message.contains("Service foo-client"), "{error}");
    assert!(message.contains("EtcdCluster foo-client"), "{error}");
}

#[tokio::test]
async fn a_service_of_our_own_that_already_exists_counts_as_created() {
    let fake = FakeApi::default();
    fake.already_exists("/api/v1/namespaces/ns/services");
    for s in our_services() {
        let path = format!(
            "/api/v1/namespaces/ns/services/{}",
            s.metadata.name.clone().unwrap()
        );
        fake.holds(&path, &s);
        fake.answer("PATCH", &path, 200, to_json(&s));
    }
    let api = api_with(&fake, vec![], vec![]);
    assert_eq!(api.ensure_service(ServiceKind::Headless).await, Ok(()));
    assert_eq!(api.ensure_service(ServiceKind::Client).await, Ok(()));
    // The client Service's selector is set to voting members (an older operator's
    // Service selected learners too).
    fake.assert_called("PATCH /api/v1/namespaces/ns/services/foo-client");
}

#[tokio::test]
async fn a_client_service_selecting_learners_too_is_reported_for_correction() {
    let fake = FakeApi::default();
    let mut old = our_services();
    for s in &mut old {
        s.spec = Some(ServiceSpec {
            selector: Some(crate::resources::labels::selector("foo")),
            ..ServiceSpec::default()
        });
    }
    let view = api_with(&fake, old, vec![]).observe().await.unwrap();
    assert!(
        !view.services_present,
        "an outdated selector counts as missing"
    );
    assert_eq!(view.name_conflict, None);
}

fn seed(name: &str) -> MemberPod {
    MemberPod {
        name: name.into(),
        version: "3.5.35".parse().unwrap(),
        initial_cluster: Topology::new(NS, "foo")
            .initial_cluster(&[name.to_string()], TlsMode::Off),
        state: InitialState::New {
            token: "foo-token".into(),
        },
        voter: true,
        restore: None,
        prepared_with: None,
    }
}

#[tokio::test]
async fn a_pod_name_held_by_another_owner_blocks_the_cluster_until_that_pod_is_gone() {
    let fake = FakeApi::default();
    fake.already_exists("/api/v1/namespaces/ns/pods");
    let path = "/api/v1/namespaces/ns/pods/foo-bcdfg";
    let theirs = Pod {
        metadata: meta("foo-bcdfg", None, None),
        ..Pod::default()
    };
    fake.holds(path, &theirs);
    let api = api_with(&fake, our_services(), vec![]);
    let error = api
        .create_member_pod(&seed("foo-bcdfg"))
        .await
        .expect_err("someone else's pod is not ours");
    assert_says(conflict_message(&error), "Pod foo-bcdfg");
    let conflict = api.observe().await.unwrap().name_conflict;
    let conflict = conflict.expect("the conflict is reported while the pod exists");
    assert!(conflict.contains("Pod foo-bcdfg"), "{conflict}");
    fake.forget("GET", path);
    assert_eq!(api.observe().await.unwrap().name_conflict, None);
}

#[tokio::test]
async fn a_pod_of_our_own_that_already_exists_counts_as_created() {
    let fake = FakeApi::default();
    fake.already_exists("/api/v1/namespaces/ns/pods");
    let ours = pod("foo-bcdfg", "foo", UID);
    fake.holds("/api/v1/namespaces/ns/pods/foo-bcdfg", &ours);
    let api = api_with(&fake, our_services(), vec![]);
    assert_eq!(api.create_member_pod(&seed("foo-bcdfg")).await, Ok(()));
}

#[tokio::test]
async fn a_cluster_whose_name_cannot_name_services_looks_none_up() {
    let fake = FakeApi::default();
    let api = api_of(
        &fake,
        cluster("my.etcd", UID),
        vec![],
        vec![],
        vec![],
        vec![],
    );
    let view = api.observe().await.unwrap();
    assert_eq!(view.name_conflict, None);
    assert_eq!(fake.calls(), Vec::<String>::new());
}

#[tokio::test]
async fn the_api_servers_refusals_of_a_write_come_back_as_what_callers_act_on() {
    let path = "/api/v1/namespaces/ns/pods/foo-bcdfg";
    let cases = [
        (404, "NotFound", "not_found"),
        (409, "Conflict", "conflict"),
        (403, "Forbidden", "forbidden"),
        (422, "Invalid", "invalid"),
        (500, "InternalError", "unavailable"),
        (429, "TooManyRequests", "unavailable"),
    ];
    for (code, reason, label) in cases {
        let fake = FakeApi::default();
        fake.answer("PATCH", path, code, status(code, reason));
        let error = api_with(&fake, our_services(), vec![])
            .label_voter("foo-bcdfg")
            .await
            .expect_err("the API server refused");
        assert_eq!(error.metric_label(), label, "{code}: {error:?}");
        assert!(
            error
                .message()
                .starts_with("labelling pod foo-bcdfg a voting member: "),
            "{error}"
        );
    }
}

#[tokio::test]
async fn deleting_a_pod_that_is_gone_is_done_and_other_refusals_are_errors() {
    let fake = FakeApi::default();
    let api = api_with(&fake, our_services(), vec![]);
    // Neither the pod nor its PVC exists: the fake answers 404 to both deletes.
    assert_eq!(api.delete_pod("foo-bcdfg").await, Ok(()));

    fake.answer(
        "DELETE",
        "/api/v1/namespaces/ns/pods/foo-bcdfg",
        403,
        status(403, "Forbidden"),
    );
    let error = api.delete_pod("foo-bcdfg").await.expect_err("forbidden");
    assert!(matches!(error, ApiError::Forbidden(_)), "{error:?}");
}

#[tokio::test]
async fn a_removed_members_pod_goes_with_its_claim_and_a_recreated_ones_keeps_it() {
    let fake = FakeApi::default();
    let api = api_with(&fake, our_services(), vec![]);
    let pod = "DELETE /api/v1/namespaces/ns/pods/foo-bcdfg";
    let claim = "DELETE /api/v1/namespaces/ns/persistentvolumeclaims/foo-bcdfg-data";
    api.recreate_pod("foo-bcdfg").await.expect("recreate");
    fake.assert_called(pod);
    assert!(
        !fake.calls().iter().any(|c| c == claim),
        "the claim of a member that stays was deleted: {:?}",
        fake.calls()
    );
    api.delete_pod("foo-bcdfg").await.expect("delete");
    fake.assert_called(claim);
}

#[tokio::test]
async fn a_fence_closing_after_the_pods_delete_stops_the_delete_of_its_claim() {
    // One port call, two writes: the fence is asked before each, not once for both.
    let fake = FakeApi::default();
    let fence = Fence::always_open();
    let pod = "DELETE /api/v1/namespaces/ns/pods/foo-bcdfg";
    let claim = "DELETE /api/v1/namespaces/ns/persistentvolumeclaims/foo-bcdfg-data";
    fake.fenced(&fence, pod);
    let api = api_with(&fake, our_services(), vec![]);
    let error = api.delete_pod("foo-bcdfg").await.expect_err("fenced");
    assert!(matches!(error, ApiError::Forbidden(_)), "{error:?}");
    assert!(error.to_string().contains("the Lease was lost"), "{error}");
    assert_eq!(
        fake.calls(),
        [pod],
        "a write was sent after the fence closed"
    );
    assert!(!fake.calls().iter().any(|c| c == claim));
}

/// A PodDisruptionBudget named `name` with `minAvailable`, owned as given.
fn budget(name: &str, min_available: i32, owner: Option<OwnerReference>) -> PodDisruptionBudget {
    let mut budget = crate::resources::disruption_budget(&cluster("foo", UID), 1, false);
    budget.metadata = meta(name, owner, Some("foo"));
    budget.spec.as_mut().unwrap().min_available =
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(min_available));
    budget
}

const BUDGETS: &str = "/apis/policy/v1/namespaces/ns/poddisruptionbudgets";

#[tokio::test]
async fn the_clusters_own_budget_is_observed_with_its_min_available_and_a_strangers_is_not() {
    let fake = FakeApi::default();
    let ours = budget("foo", 2, Some(owned_by("foo", UID)));
    let api = api_of(
        &fake,
        cluster("foo", UID),
        our_services(),
        vec![],
        vec![ours],
        vec![],
    );
    assert_eq!(api.observe().await.unwrap().disruption_budget, Some(2));
    let stranger = budget("foo", 2, Some(owned_by("foo", "uid-of-an-older-foo")));
    let api = api_of(
        &fake,
        cluster("foo", UID),
        our_services(),
        vec![],
        vec![stranger],
        vec![],
    );
    assert_eq!(api.observe().await.unwrap().disruption_budget, None);
}

#[tokio::test]
async fn setting_the_budget_creates_it_over_the_voting_members_or_patches_our_own() {
    let fake = FakeApi::default();
    fake.answer("POST", BUDGETS, 201, json!({}));
    let api = api_with(&fake, our_services(), vec![]);
    api.set_disruption_budget(2).await.unwrap();
    fake.assert_called(&format!("POST {BUDGETS}"));
    assert!(!fake.calls().iter().any(|c| c.starts_with("PATCH")));

    let fake = FakeApi::default();
    fake.already_exists(BUDGETS);
    let path = format!("{BUDGETS}/foo");
    fake.holds(&path, &budget("foo", 2, Some(owned_by("foo", UID))));
    fake.answer("PATCH", &path, 200, json!({}));
    let api = api_with(&fake, our_services(), vec![]);
    api.set_disruption_budget(3).await.unwrap();
    fake.assert_called(&format!("PATCH {path}"));
}

#[tokio::test]
async fn an_always_allow_budget_of_an_emptydir_cluster_is_set_again_to_if_healthy_budget() {
    let fake = FakeApi::default();
    let mut old = budget("foo", 2, Some(owned_by("foo", UID)));
    old.spec.as_mut().unwrap().unhealthy_pod_eviction_policy = Some("AlwaysAllow".into());
    let api = api_of(
        &fake,
        cluster("foo", UID),
        our_services(),
        vec![],
        vec![old.clone()],
        vec![],
    );
    // Reported as missing, so the lifecycle sets it again...
    assert_eq!(api.observe().await.unwrap().disruption_budget, None);
    // ...and setting it patches the policy along with minAvailable.
    fake.already_exists(BUDGETS);
    let path = format!("{BUDGETS}/foo");
    fake.holds(&path, &old);
    fake.answer("PATCH", &path, 200, json!({}));
    api.set_disruption_budget(2).await.unwrap();
    let sent = fake.sent(&format!("PATCH {path}"));
    assert_eq!(
        sent.last().unwrap()["spec"]["unhealthyPodEvictionPolicy"],
        "IfHealthyBudget",
        "{sent:?}"
    );
}

#[tokio::test]
async fn a_users_budget_under_the_clusters_name_is_a_conflict_never_changed() {
    let fake = FakeApi::default();
    fake.already_exists(BUDGETS);
    let path = format!("{BUDGETS}/foo");
    fake.holds(&path, &budget("foo", 1, None));
    let api = api_with(&fake, our_services(), vec![]);
    let error = api.set_disruption_budget(2).await.unwrap_err();
    assert_says(conflict_message(&error), "PodDisruptionBudget foo");
    assert!(!fake.calls().iter().any(|c| c.starts_with("PATCH")));
    // Remembered: the cluster waits, NameConflict, until the name is free.
    let view = api.observe().await.unwrap();
    assert!(
        view.name_conflict
            .as_deref()
            .is_some_and(|c| c.contains("PodDisruptionBudget foo")),
        "{view:?}"
    );
}

fn claim(name: &str, owner_uid: &str, phase: Option<&str>) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: meta(name, Some(owned_by("foo", owner_uid)), Some("foo")),
        status: Some(PersistentVolumeClaimStatus {
            phase: phase.map(str::to_string),
            ..PersistentVolumeClaimStatus::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

#[tokio::test]
async fn the_members_own_claims_are_observed_by_member_name_with_their_phase() {
    use etcd_operator_core::lifecycle::ClaimPhase;
    let fake = FakeApi::default();
    let claims = vec![
        claim("foo-a-data", UID, Some("Bound")),
        claim("foo-b-data", UID, Some("Lost")),
        claim("foo-c-data", UID, None),
        {
            let mut deleting = claim("foo-e-data", UID, Some("Bound"));
            deleting.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
            );
            deleting
        },
        claim("foo-d-data", "uid-of-an-older-foo", Some("Bound")),
        claim("unrelated", UID, Some("Bound")),
    ];
    let api = api_of(
        &fake,
        cluster("foo", UID),
        our_services(),
        vec![],
        vec![],
        claims,
    );
    let view = api.observe().await.unwrap();
    let phases: BTreeMap<String, ClaimPhase> = view
        .claims
        .iter()
        .map(|(m, c)| (m.clone(), c.phase))
        .collect();
    let expected = BTreeMap::from([
        ("foo-a".to_string(), ClaimPhase::Bound),
        ("foo-b".to_string(), ClaimPhase::Lost),
        ("foo-c".to_string(), ClaimPhase::Pending),
        ("foo-e".to_string(), ClaimPhase::Deleting),
    ]);
    assert_eq!(phases, expected);
}

fn prepared(name: &str) -> MemberPod {
    MemberPod {
        state: InitialState::Existing,
        voter: false,
        prepared_with: Some(vec!["foo-aaaaa".into()]),
        ..seed(name)
    }
}

#[tokio::test]
async fn a_prepared_joiner_the_cache_does_not_show_yet_is_observed_as_one_at_its_version() {
    let fake = FakeApi::default();
    let made = pod("foo-bcdfg", "foo", UID);
    fake.answer("POST", "/api/v1/namespaces/ns/pods", 201, to_json(&made));
    let api = api_with(&fake, our_services(), vec![]).with_operator_image(Some("op:1".into()));
    assert!(api.observe().await.unwrap().prepares_joiners);
    api.create_member_pod(&prepared("foo-bcdfg")).await.unwrap();
    let view = api.observe().await.unwrap();
    let joiner = view.pods.iter().find(|p| p.name == "foo-bcdfg").unwrap();
    // Not taken for a pod without a member, nor for another joiner to prepare again.
    assert_eq!(joiner.prepared_with, Some(vec!["foo-aaaaa".to_string()]));
    assert!(joiner.awaits_membership());
    assert_eq!(joiner.version.as_deref(), Some("3.5.35"));
    assert!(!joiner.voter && !joiner.published);
}

#[tokio::test]
async fn a_seed_the_cache_does_not_show_yet_is_observed_at_the_version_it_was_made_with() {
    // Seen in benches/fleet.sh: a tick that observed the new seed before the pod cache
    // showed it took the placeholder's missing version for a seed built for another
    // version, and deleted the seed it had just made ("RecreatingSeed").
    let fake = FakeApi::default();
    let made = pod("foo-bcdfg", "foo", UID);
    fake.answer("POST", "/api/v1/namespaces/ns/pods", 201, to_json(&made));
    let api = api_with(&fake, our_services(), vec![]);
    api.create_member_pod(&seed("foo-bcdfg")).await.unwrap();
    let view = api.observe().await.unwrap();
    let seed = view.pods.iter().find(|p| p.name == "foo-bcdfg").unwrap();
    assert_eq!(seed.version.as_deref(), Some("3.5.35"));
    assert!(!seed.started && !seed.terminating);
}

#[tokio::test]
async fn without_the_operators_image_no_joiner_is_prepared() {
    let fake = FakeApi::default();
    let api = api_with(&fake, our_services(), vec![]);
    assert!(!api.observe().await.unwrap().prepares_joiners);
    let error = api
        .create_member_pod(&prepared("foo-bcdfg"))
        .await
        .expect_err("a gate needs the operator's image");
    assert!(error.message().contains("operator's own image"), "{error}");
    assert!(
        !fake.calls().iter().any(|c| c.starts_with("POST")),
        "{:?}",
        fake.calls()
    );
}

const CLUSTER: &str = "/apis/etcd.database.coreos.com/v1beta2/namespaces/ns/etcdclusters/foo";

/// A recovery of `foo` from survivor `foo-a`, started or finished.
fn recovery(finished: bool) -> etcd_operator_core::lifecycle::RecoveryRecord {
    etcd_operator_core::lifecycle::RecoveryRecord {
        incident: "dead: lost foo-b, foo-c".into(),
        policy: etcd_operator_core::lifecycle::RecoveryPolicy::FromSurvivor,
        lost: vec!["foo-b".into(), "foo-c".into()],
        survivor: Some("foo-a".into()),
        raft_index: Some(9),
        version: Some("3.5.35".into()),
        backup: None,
        last_revision: Some(5),
        restored_revision: finished.then_some(5),
        seed: None,
        token: None,
        cluster_id: Some(0xdead),
        uid: None,
        finished,
        abandoned: false,
    }
}

#[tokio::test]
async fn a_recovery_is_recorded_from_a_fresh_read_once_and_uses_up_the_annotation() {
    let fake = FakeApi::default();
    let mut stored = cluster("foo", UID);
    stored.metadata.annotations = Some(BTreeMap::from([(
        etcd_operator_core::lifecycle::RECOVER_ANNOTATION.to_string(),
        "FromSurvivor".to_string(),
    )]));
    fake.holds(&format!("{CLUSTER}/status"), &stored);
    fake.answer("PATCH", &format!("{CLUSTER}/status"), 200, to_json(&stored));
    fake.answer("PATCH", CLUSTER, 200, to_json(&stored));
    let api = api_with(&fake, our_services(), vec![]);
    api.record_recovery(&recovery(false)).await.unwrap();
    fake.assert_called(&format!("GET {CLUSTER}/status"));
    fake.assert_called(&format!("PATCH {CLUSTER}/status"));
    fake.assert_called(&format!("PATCH {CLUSTER}"));
    // The cache does not show it yet; the next observation does.
    let recorded = api.observe().await.unwrap().recorded;
    assert_eq!(recorded.recovery, Some(recovery(false)));

    // A status that records it (read fresh) refuses a second start, writing nothing.
    let fake = FakeApi::default();
    let mut recorded = cluster("foo", UID);
    recorded.status = Some(crate::api::EtcdClusterStatus {
        recovery: Some(crate::api::RecoveryStatus::from_record(
            &recovery(false),
            None,
            "2026-01-01T00:00:00Z",
        )),
        ..Default::default()
    });
    fake.holds(&format!("{CLUSTER}/status"), &recorded);
    let api = api_with(&fake, our_services(), vec![]);
    let err = api.record_recovery(&recovery(false)).await.unwrap_err();
    assert!(conflict_message(&err).contains("has not finished"), "{err}");
    assert!(!fake.calls().iter().any(|c| c.starts_with("PATCH")));
    // Its own finish is allowed.
    fake.answer(
        "PATCH",
        &format!("{CLUSTER}/status"),
        200,
        to_json(&recorded),
    );
    api.record_recovery(&recovery(true)).await.unwrap();
    fake.assert_called(&format!("PATCH {CLUSTER}/status"));
}

#[tokio::test]
async fn a_pod_labelled_a_voter_is_observed_as_one_before_the_cache_shows_the_label() {
    // Seen in the operator's log: "pod X now serves clients" twice for one pod, the tick
    // after the label still reading the pod without it from the cache and labelling again.
    let fake = FakeApi::default();
    let cached = pod("foo-bcdfg", "foo", UID);
    let path = "/api/v1/namespaces/ns/pods/foo-bcdfg";
    fake.answer("PATCH", path, 200, to_json(&cached));
    let api = api_with(&fake, our_services(), vec![cached]);
    let voter = |view: KubeView| view.pods.iter().any(|p| p.name == "foo-bcdfg" && p.voter);
    assert!(!voter(api.observe().await.unwrap()));
    api.label_voter("foo-bcdfg").await.unwrap();
    assert!(
        voter(api.observe().await.unwrap()),
        "labelled, not cached yet"
    );
}

/// The seed `foo-seed00` with its token, as `create_seed` records it.
fn seed_record() -> etcd_operator_core::lifecycle::BootstrapRecord {
    etcd_operator_core::lifecycle::BootstrapRecord::seed("foo-seed00", "foo-token")
}

/// Cluster `foo` at resourceVersion `version`, its status recording `bootstrap`, if any.
fn foo_at(
    version: &str,
    bootstrap: Option<etcd_operator_core::lifecycle::BootstrapRecord>,
) -> EtcdCluster {
    let mut c = cluster("foo", UID);
    c.metadata.resource_version = Some(version.into());
    c.status = bootstrap.map(|b| crate::api::EtcdClusterStatus {
        bootstrap: Some(crate::api::BootstrapStatus::from_record(&b)),
        ..Default::default()
    });
    c
}

/// `text` says `part`.
fn assert_says(text: &str, part: &str) {
    assert!(text.contains(part), "{text:?} does not say {part:?}");
}

fn assert_refuses_a_second_seed(error: &ApiError) {
    assert_says(conflict_message(error), "refusing to record a new seed");
}

#[tokio::test]
async fn a_seed_is_recorded_as_a_swap_on_the_cached_cluster_without_reading_it_again() {
    let fake = FakeApi::default();
    let cached = foo_at("41", None);
    let status_path = format!("{CLUSTER}/status");
    fake.answer("PATCH", &status_path, 200, to_json(&cached));
    let api = api_of(&fake, cached, our_services(), vec![], vec![], vec![]);
    api.record_bootstrap(&seed_record()).await.unwrap();
    assert_eq!(fake.calls(), [format!("PATCH {status_path}")]);
    let patch = &fake.sent(&format!("PATCH {status_path}"))[0];
    // The swap: written only if the object is still the one the cache showed.
    assert_eq!(patch["metadata"]["resourceVersion"], "41");
    assert_eq!(patch["status"]["bootstrap"]["seed"], "foo-seed00");
}

#[tokio::test]
async fn a_seed_swap_refused_as_stale_is_decided_again_on_a_fresh_read() {
    // The cache has not seen a bootstrap another writer recorded: the swap on the cached
    // object fails, and the fresh read refuses a second seed, writing nothing more.
    let other = etcd_operator_core::lifecycle::BootstrapRecord::seed("foo-other0", "foo-t2");
    let status_path = format!("{CLUSTER}/status");
    let fake = FakeApi::default();
    fake.answer("PATCH", &status_path, 409, status(409, "Conflict"));
    fake.holds(&status_path, &foo_at("42", Some(other)));
    let api = api_over(&fake, foo_at("41", None));
    assert_refuses_a_second_seed(&api.record_bootstrap(&seed_record()).await.unwrap_err());
    assert_eq!(
        fake.calls(),
        [format!("PATCH {status_path}"), format!("GET {status_path}")]
    );

    // Unborn when read fresh: the second swap is made on the fresh object's version.
    let fake = FakeApi::default();
    fake.answer("PATCH", &status_path, 409, status(409, "Conflict"));
    fake.holds(&status_path, &foo_at("43", None));
    let api = api_over(&fake, foo_at("41", None));
    let _ = api.record_bootstrap(&seed_record()).await;
    let versions: Vec<_> = fake
        .sent(&format!("PATCH {status_path}"))
        .iter()
        .map(|p| p["metadata"]["resourceVersion"].clone())
        .collect();
    assert_eq!(versions, [json!("41"), json!("43")]);
}

#[tokio::test]
async fn a_cached_cluster_that_records_a_seed_is_read_fresh_before_refusing() {
    let fake = FakeApi::default();
    let cached = foo_at("41", Some(seed_record()));
    let status_path = format!("{CLUSTER}/status");
    fake.holds(&status_path, &cached);
    let api = api_of(&fake, cached, our_services(), vec![], vec![], vec![]);
    assert_refuses_a_second_seed(&api.record_bootstrap(&seed_record()).await.unwrap_err());
    assert_eq!(fake.calls(), [format!("GET {status_path}")]);
}
