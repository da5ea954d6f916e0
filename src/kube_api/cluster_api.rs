//! `ClusterApi` over the Kubernetes API: reads from the informer caches, writes through
//! the API server.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio::time::Instant;

use etcd_operator_actors::ports::{
    ApiError, ClusterApi, EventRecord, EventType, InitialState, KubeView, MemberPod, ServiceKind,
    VersionChange,
};
use etcd_operator_core::lifecycle::{
    ABANDON_RECOVERY_ANNOTATION, BootstrapRecord, CaRotationStep, Claim, ClaimClass, PodView,
    RECOVER_ANNOTATION, Recorded, RecoveryRecord, SnapshotSource, check_fence,
};
use etcd_operator_core::report::StatusReport;
use etcd_operator_core::topology::Topology;

use super::addresses::is_published;
use super::backups::BackupLookups;
use super::claims::{ClassCache, claim_view, class_of};
use super::cluster_dns::{ClusterDns, DnsPublication};
use super::error::api_error;
use super::expectations::Expectations;
use super::pod_view::pod_view;
use super::status_patch::status_from_report;
use super::tls::{Identities, TlsSide};
use crate::api::names::name_problem;
use crate::api::restore::EtcdRestore;
use crate::api::{BootstrapStatus, EtcdCluster, EtcdClusterStatus, RecoveryStatus};
use crate::resources::labels::{
    MANAGED_BY_LABEL, MANAGER, UPGRADE_FROM_ANNOTATION, VOTER_LABEL, client_selector,
    object_labels, owner_reference,
};
use crate::resources::{
    ETCD_CONTAINER, budget_eviction_policy, client_service, disruption_budget,
    every_member_on_claim, eviction_policy, headless_service, image, member_pod, min_available,
    pvc_name, record_trust,
};
use crate::restore::plan::restore_problem;

/// The informer caches every cluster reads from.
#[derive(Clone)]
pub struct Caches {
    /// EtcdCluster objects.
    pub clusters: Store<EtcdCluster>,
    /// Member pods of every cluster.
    pub pods: Store<Pod>,
    /// Services made by the operator.
    pub services: Store<Service>,
    /// PodDisruptionBudgets made by the operator.
    pub budgets: Store<PodDisruptionBudget>,
    /// Members' PersistentVolumeClaims made by the operator.
    pub claims: Store<PersistentVolumeClaim>,
    /// The EndpointSlices of the operator's Services (they carry the Services' labels).
    pub slices: Store<EndpointSlice>,
}

/// The Kubernetes side of one cluster.
pub struct KubeClusterApi {
    client: Client,
    topology: Topology,
    caches: Caches,
    recorder: Recorder,
    expectations: Expectations,
    /// The bootstrap record this operator wrote, until the cache shows it.
    written_bootstrap: Mutex<Option<BootstrapRecord>>,
    /// The recovery record this operator wrote last, until the cache shows it.
    written_recovery: Mutex<Option<RecoveryRecord>>,
    /// Lookups of the newest backup `spec.recovery.backup` holds.
    backups: BackupLookups,
    /// Pods this operator created with `--force-new-cluster`, so that one the cache does
    /// not show yet is not taken for the survivor's pod from before the recovery.
    forced: Mutex<BTreeSet<String>>,
    /// Pods and PVCs whose create found them owned by someone else: checked again on
    /// every observation until they are gone (or ours).
    conflicts: Mutex<BTreeSet<(Kind, String)>>,
    /// The members' StorageClass, as last read.
    classes: ClassCache,
    /// The cluster's TLS Secrets.
    tls: TlsSide,
    /// The operator's own image: a seed restoring a snapshot runs it to fetch it.
    operator_image: Option<String>,
    /// Member addresses as the cluster DNS serves them, when the operator runs in a pod.
    dns: Option<DnsPublication>,
}

/// The kinds of object a cluster creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Service,
    Pod,
    PersistentVolumeClaim,
    PodDisruptionBudget,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Service => "Service",
            Kind::Pod => "Pod",
            Kind::PersistentVolumeClaim => "PersistentVolumeClaim",
            Kind::PodDisruptionBudget => "PodDisruptionBudget",
        })
    }
}

/// Whose an object is, as one cluster sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Owner {
    /// One of its ownerReferences carries the cluster's UID.
    Us,
    /// Anyone else: the end of "<Kind> <name> already exists and ...".
    Other(String),
}

/// Who owns the object with `meta`, from `cluster`'s point of view.
fn owner(meta: &ObjectMeta, cluster: &EtcdCluster) -> Owner {
    let refs = meta.owner_references.as_deref().unwrap_or_default();
    let uid = cluster.metadata.uid.as_deref();
    if refs.iter().any(|r| Some(r.uid.as_str()) == uid) {
        return Owner::Us;
    }
    let main = refs
        .iter()
        .find(|r| r.controller == Some(true))
        .or(refs.first());
    Owner::Other(match main {
        Some(r)
            if r.kind == EtcdCluster::kind(&())
                && Some(&r.name) == cluster.metadata.name.as_ref() =>
        {
            format!(
                "belongs to an earlier EtcdCluster {} (uid {}) that was deleted; the \
                 garbage collector removes it",
                r.name, r.uid
            )
        }
        Some(r) => format!("belongs to {} {} (uid {})", r.kind, r.name, r.uid),
        None if managed_by_the_operator(meta) => {
            "has no owner (etcd-operator made it for a cluster that left it behind)".into()
        }
        None => "has no owner and is not managed by etcd-operator".into(),
    })
}

fn managed_by_the_operator(meta: &ObjectMeta) -> bool {
    let labels = meta.labels.as_ref();
    labels
        .and_then(|l| l.get(MANAGED_BY_LABEL))
        .map(String::as_str)
        == Some(MANAGER)
}

/// The conflict message: the object and its other owner.
fn conflict(kind: Kind, name: &str, who: &str) -> String {
    format!("{kind} {name} already exists and {who}")
}

/// Whether one of the cluster's Services is there, and whose it is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Presence {
    Ours,
    Missing,
    Conflict(String),
}

impl KubeClusterApi {
    /// The Kubernetes side of `topology`; the operator's client identity it finds in the
    /// cluster's TLS Secrets goes to `identities`.
    pub fn new(
        client: Client,
        topology: Topology,
        caches: Caches,
        recorder: Recorder,
        identities: Identities,
    ) -> Self {
        KubeClusterApi {
            tls: TlsSide::new(client.clone(), topology.clone(), identities),
            client,
            topology,
            caches,
            recorder,
            expectations: Expectations::default(),
            written_bootstrap: Mutex::default(),
            written_recovery: Mutex::default(),
            backups: BackupLookups::default(),
            forced: Mutex::default(),
            conflicts: Mutex::default(),
            classes: ClassCache::default(),
            operator_image: None,
            dns: None,
        }
    }

    /// A member's address counts as published only once `dns` (the cluster DNS) serves it
    /// too, not only the EndpointSlices (see [`ClusterDns`]).
    pub fn with_cluster_dns(mut self, dns: Option<Arc<ClusterDns>>) -> Self {
        self.dns = dns.map(DnsPublication::new);
        self
    }

    /// Marks unpublished the pods of `pods` whose address the cluster DNS does not serve
    /// yet, though the EndpointSlices publish it.
    async fn hold_back_until_served(&self, cluster: &EtcdCluster, pods: &mut [PodView]) {
        let Some(dns) = &self.dns else { return };
        let addresses: BTreeMap<String, std::net::IpAddr> = self
            .cached_pods(cluster)
            .iter()
            .filter_map(|p| {
                let ip = p.status.as_ref()?.pod_ip.as_deref()?.parse().ok()?;
                Some((p.name_any(), ip))
            })
            .collect();
        let host = |pod: &str| self.topology.member_host(pod);
        let published = pods
            .iter()
            .filter(|p| p.published)
            .filter_map(|p| Some((host(&p.name), *addresses.get(&p.name)?)))
            .collect();
        let held = dns.not_served(published).await;
        for pod in pods.iter_mut() {
            if held.contains(&host(&pod.name)) {
                pod.published = false;
            }
        }
    }

    /// The operator's own image, which a seed restoring a snapshot runs to fetch it.
    pub fn with_operator_image(mut self, image: Option<String>) -> Self {
        self.operator_image = image;
        self
    }

    /// What the cluster's status remembers, corrected by the bootstrap record this
    /// operator wrote and the cache does not show yet.
    fn recorded(&self, cluster: &EtcdCluster) -> Recorded {
        let mut recorded = cluster
            .status
            .as_ref()
            .map(EtcdClusterStatus::recorded)
            .unwrap_or_default();
        let mut written = self
            .written_bootstrap
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if recorded.bootstrap.is_some() {
            *written = None;
        } else {
            recorded.bootstrap = written.clone();
        }
        let mut recovery = self
            .written_recovery
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if recorded.recovery == *recovery {
            *recovery = None;
        } else if recovery.is_some() {
            recorded.recovery = recovery.clone();
        }
        recorded
    }

    fn clusters_api(&self) -> Api<EtcdCluster> {
        Api::namespaced(self.client.clone(), &self.topology.namespace)
    }

    /// The EtcdCluster read from the API server, not from the cache, before `what`.
    async fn read_fresh(&self, what: &str) -> Result<EtcdCluster, ApiError> {
        self.clusters_api()
            .get_status(&self.topology.name)
            .await
            .map_err(|e| api_error(&format!("reading the EtcdCluster before {what}"), &e))
    }

    /// Writes `status.<field>` as a compare-and-swap: the resourceVersion of `fresh` makes
    /// a status written since it was read (by anyone) fail the patch instead of being
    /// overwritten.
    async fn swap_status(
        &self,
        fresh: &EtcdCluster,
        field: &str,
        value: serde_json::Value,
        what: &str,
    ) -> Result<(), ApiError> {
        let patch = json!({
            "metadata": {"resourceVersion": fresh.resource_version()},
            "status": {field: value},
        });
        self.clusters_api()
            .patch_status(
                &self.topology.name,
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .map(|_| ())
            .map_err(|e| api_error(what, &e))
    }

    /// Writes `bootstrap` into the status of `cluster` as it was read, when that status
    /// records no bootstrap and no members (see [`unborn`]); a conflict when it does, or
    /// when the object has changed since.
    async fn seed_unborn(
        &self,
        cluster: &EtcdCluster,
        bootstrap: &serde_json::Value,
    ) -> Result<(), ApiError> {
        unborn(cluster)?;
        let what = "recording the seed in status";
        self.swap_status(cluster, "bootstrap", bootstrap.clone(), what)
            .await
    }

    fn cluster(&self) -> Result<Arc<EtcdCluster>, ApiError> {
        let key = ObjectRef::new(&self.topology.name).within(&self.topology.namespace);
        self.caches.clusters.get(&key).ok_or_else(|| {
            ApiError::NotFound(format!("EtcdCluster {} not in cache", self.topology.key()))
        })
    }

    fn pods_api(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.topology.namespace)
    }

    /// The cached pods owned by `cluster` (by UID: a deleted cluster's pods, still
    /// labelled with the same name until they are collected, are not its own).
    fn cached_pods(&self, cluster: &EtcdCluster) -> Vec<Arc<Pod>> {
        self.caches
            .pods
            .state()
            .into_iter()
            .filter(|p| {
                p.namespace().as_deref() == Some(self.topology.namespace.as_str())
                    && owner(&p.metadata, cluster) == Owner::Us
            })
            .collect()
    }

    /// The members' claims that are ours, by member name, from the cache, and their
    /// StorageClass (a claim class that cannot be read is left unknown: it only decides
    /// whether claims may grow).
    async fn claims(&self, cluster: &EtcdCluster) -> (BTreeMap<String, Claim>, Option<ClaimClass>) {
        let ns = self.topology.namespace.as_str();
        let ours: Vec<Arc<PersistentVolumeClaim>> = self
            .caches
            .claims
            .state()
            .into_iter()
            .filter(|c| c.namespace().as_deref() == Some(ns))
            .filter(|c| owner(&c.metadata, cluster) == Owner::Us)
            .collect();
        let class = match ours.iter().find_map(|c| class_of(c)) {
            Some(name) => self.classes.get(&self.client, &name).await.ok(),
            None => None,
        };
        (ours.iter().filter_map(|c| claim_view(c)).collect(), class)
    }

    /// Whose the object `name` of type `K` is, read from the API server; `None` when
    /// there is no such object.
    async fn lookup<K>(&self, cluster: &EtcdCluster, name: &str) -> Result<Option<Owner>, ApiError>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), &self.topology.namespace);
        let found = api
            .get_opt(name)
            .await
            .map_err(|e| api_error(&format!("reading {} {name}", K::kind(&())), &e))?;
        Ok(found.map(|o| owner(o.meta(), cluster)))
    }

    async fn lookup_kind(
        &self,
        cluster: &EtcdCluster,
        kind: Kind,
        name: &str,
    ) -> Result<Option<Owner>, ApiError> {
        match kind {
            Kind::Service => self.lookup::<Service>(cluster, name).await,
            Kind::Pod => self.lookup::<Pod>(cluster, name).await,
            Kind::PersistentVolumeClaim => {
                self.lookup::<PersistentVolumeClaim>(cluster, name).await
            }
            Kind::PodDisruptionBudget => self.lookup::<PodDisruptionBudget>(cluster, name).await,
        }
    }

    /// Creates `object`; one that already exists counts as created when it is ours and
    /// is a conflict (remembered, and reported by `observe`) when it is not.
    async fn create_if_missing<K>(
        &self,
        cluster: &EtcdCluster,
        kind: Kind,
        object: &K,
    ) -> Result<Created, ApiError>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::Serialize
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let name = object.name_any();
        let api: Api<K> = Api::namespaced(self.client.clone(), &self.topology.namespace);
        let created = api
            .create(&PostParams::default(), object)
            .await
            .map_err(|e| api_error(&format!("creating {kind} {name}"), &e));
        match created {
            Ok(_) => Ok(Created::New),
            Err(ApiError::Conflict(_)) => match self.lookup_kind(cluster, kind, &name).await? {
                Some(Owner::Us) => Ok(Created::Existing),
                Some(Owner::Other(who)) => {
                    if kind != Kind::Service {
                        self.lock_conflicts().insert((kind, name.clone()));
                    }
                    Err(ApiError::Conflict(conflict(kind, &name, &who)))
                }
                None => Err(ApiError::Conflict(format!(
                    "{kind} {name} exists but was gone when read back; trying again"
                ))),
            },
            Err(e) => Err(e),
        }
    }

    fn lock_conflicts(&self) -> std::sync::MutexGuard<'_, BTreeSet<(Kind, String)>> {
        self.conflicts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether Service `name` is there and ours: from the cache, or from the API server
    /// when the cache does not have it (a user's unlabelled Service is not cached).
    async fn service(&self, cluster: &EtcdCluster, name: &str) -> Result<Presence, ApiError> {
        let key = ObjectRef::new(name).within(&self.topology.namespace);
        let mut stale = false;
        let found = match self.caches.services.get(&key) {
            Some(service) => {
                stale = name == self.topology.client_service()
                    && service.spec.as_ref().and_then(|s| s.selector.as_ref())
                        != Some(&client_selector(&self.topology.name));
                Some(owner(&service.metadata, cluster))
            }
            None => self.lookup::<Service>(cluster, name).await?,
        };
        Ok(match found {
            // A client Service made by an older operator selects learners too: it is
            // reported missing, so that ensure_services corrects its selector.
            Some(Owner::Us) if stale => Presence::Missing,
            Some(Owner::Us) => Presence::Ours,
            None => Presence::Missing,
            Some(Owner::Other(who)) => Presence::Conflict(conflict(Kind::Service, name, &who)),
        })
    }

    /// Whether both Services are there and ours, and the first conflict found. A cluster
    /// whose name cannot name Services (it is blocked with `InvalidName`) has none.
    async fn services(&self, cluster: &EtcdCluster) -> Result<(bool, Option<String>), ApiError> {
        let t = &self.topology;
        if name_problem(&t.namespace, &t.name).is_some() {
            return Ok((false, None));
        }
        // Both at once: a Service the cache lacks is a read from the API server, and a new
        // cluster's first tick lacks both.
        let client = t.client_service();
        let (headless, client) = futures::join!(
            self.service(cluster, &t.name),
            self.service(cluster, &client)
        );
        let mut present = true;
        for presence in [headless?, client?] {
            match presence {
                Presence::Ours => {}
                Presence::Missing => present = false,
                Presence::Conflict(message) => return Ok((false, Some(message))),
            }
        }
        Ok((present, None))
    }

    /// Checks the remembered pod and PVC conflicts again, forgetting those resolved; the
    /// first one still there.
    async fn remembered_conflict(&self, cluster: &EtcdCluster) -> Result<Option<String>, ApiError> {
        let remembered: Vec<(Kind, String)> = self.lock_conflicts().iter().cloned().collect();
        let mut first = None;
        for (kind, name) in remembered {
            match self.lookup_kind(cluster, kind, &name).await? {
                Some(Owner::Other(who)) => {
                    first.get_or_insert_with(|| conflict(kind, &name, &who));
                }
                _ => {
                    self.lock_conflicts().remove(&(kind, name));
                }
            }
        }
        Ok(first)
    }

    /// Why the cluster's `spec.restore` is not honoured ([`restore_problem`]), asked only
    /// while it has never bootstrapped (afterwards `spec.restore` is not read).
    async fn restore_problem(
        &self,
        cluster: &EtcdCluster,
        born: bool,
    ) -> Result<Option<String>, ApiError> {
        let Some(wanted) = cluster.spec.restore.as_ref().filter(|_| !born) else {
            return Ok(None);
        };
        let restore = match wanted.restore_name.as_deref().filter(|n| !n.is_empty()) {
            Some(name) => {
                let api: Api<EtcdRestore> =
                    Api::namespaced(self.client.clone(), &self.topology.namespace);
                api.get_opt(name)
                    .await
                    .map_err(|e| api_error(&format!("reading EtcdRestore {name}"), &e))?
            }
            None => None,
        };
        Ok(restore_problem(cluster, restore.as_ref()))
    }

    /// `minAvailable` of the cluster's own PodDisruptionBudget, from the cache. One under
    /// its name that is not its own is found when creating it (a conflict). A budget
    /// whose `unhealthyPodEvictionPolicy` is not the one its members call for (made by an
    /// earlier operator, or before every member was on a claim) is reported as missing,
    /// so that it is set again, policy included.
    fn disruption_budget(&self, cluster: &EtcdCluster) -> Option<u32> {
        let key = ObjectRef::new(&self.topology.name).within(&self.topology.namespace);
        let budget = self.caches.budgets.get(&key)?;
        let wanted = eviction_policy(self.every_member_on_claim(cluster));
        (owner(&budget.metadata, cluster) == Owner::Us
            && budget_eviction_policy(&budget) == Some(wanted))
        .then(|| min_available(&budget))
        .flatten()
    }

    /// Whether every member pod of the cluster in the cache keeps its data on a claim.
    fn every_member_on_claim(&self, cluster: &EtcdCluster) -> bool {
        let pods = self.cached_pods(cluster);
        every_member_on_claim(cluster, pods.iter().map(|p| &**p))
    }

    fn pod_views(&self, cluster: &EtcdCluster) -> Vec<PodView> {
        let cached = self.cached_pods(cluster);
        let names: Vec<String> = cached.iter().map(|p| p.name_any()).collect();
        let (created, deleted) = self.expectations.reconcile(&names);
        let slices = self.caches.slices.state();
        let slices = || slices.iter().map(AsRef::as_ref);
        let mut pods: Vec<PodView> = cached
            .iter()
            .map(|p| PodView {
                published: is_published(p, &self.topology.name, slices()),
                ..pod_view(p)
            })
            .collect();
        for pod in &mut pods {
            if deleted.contains(&pod.name) {
                pod.terminating = true;
            }
        }
        for name in created {
            let forced = self
                .forced
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&name);
            pods.push(PodView {
                prepared_with: self.expectations.prepared_with(&name),
                name,
                phase: etcd_operator_core::lifecycle::PodPhase::Pending,
                ready: false,
                terminating: false,
                version: None,
                problem: None,
                started: false,
                upgrade_from: None,
                voter: false,
                pod_template: None,
                restarts: 0,
                crash: None,
                // Made by this operator from the current spec.
                tls: cluster.spec.tls_mode(),
                published: false,
                force_new_cluster: forced,
                on_claim: cluster
                    .spec
                    .pod
                    .as_ref()
                    .is_some_and(|p| p.persistent_volume_claim_spec.is_some()),
            });
        }
        self.expectations.correct_versions(&mut pods);
        self.expectations.correct_voters(&mut pods);
        pods.sort_by(|a, b| a.name.cmp(&b.name));
        pods
    }
}

/// What a create did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Created {
    New,
    Existing,
}

/// Refuses a new seed for `cluster` when its status records a bootstrap or members already.
fn unborn(cluster: &EtcdCluster) -> Result<(), ApiError> {
    let recorded = cluster
        .status
        .as_ref()
        .map(EtcdClusterStatus::recorded)
        .unwrap_or_default();
    if recorded.bootstrap.is_some() || !recorded.members.is_empty() {
        return Err(ApiError::Conflict(format!(
            "refusing to record a new seed: the status already records this cluster's \
             bootstrap ({:?}) or members ({:?})",
            recorded.bootstrap, recorded.members
        )));
    }
    Ok(())
}

#[async_trait]
impl ClusterApi for KubeClusterApi {
    async fn observe(&self) -> Result<KubeView, ApiError> {
        let cluster = self.cluster()?;
        let (claims, claim_class) = self.claims(&cluster).await;
        let mut pods = self.pod_views(&cluster);
        self.hold_back_until_served(&cluster, &mut pods).await;
        let (services_present, service_conflict) = self.services(&cluster).await?;
        let name_conflict = match service_conflict {
            Some(message) => Some(message),
            None => self.remembered_conflict(&cluster).await?,
        };
        let recorded = self.recorded(&cluster);
        let restore_problem = self
            .restore_problem(&cluster, recorded.bootstrap.is_some())
            .await?;
        let tls = self
            .tls
            .observe(&cluster, recorded.bootstrap.is_some())
            .await?;
        Ok(KubeView {
            pods,
            services_present,
            disruption_budget: self.disruption_budget(&cluster),
            claims,
            claim_class,
            recorded,
            name_conflict,
            restore_problem,
            tls,
            prepares_joiners: self.operator_image.is_some(),
        })
    }

    async fn issue_certificates(&self) -> Result<String, ApiError> {
        let cluster = self.cluster()?;
        let born = self.recorded(&cluster).bootstrap.is_some();
        self.tls.issue(&cluster, born).await
    }

    async fn advance_ca_rotation(
        &self,
        from: Option<CaRotationStep>,
        to: Option<CaRotationStep>,
    ) -> Result<String, ApiError> {
        let cluster = self.cluster()?;
        self.tls.advance_ca_rotation(&cluster, (from, to)).await
    }

    async fn ensure_service(&self, service: ServiceKind) -> Result<(), ApiError> {
        let cluster = self.cluster()?;
        if service == ServiceKind::Headless {
            let headless = headless_service(&cluster);
            self.create_if_missing(&cluster, Kind::Service, &headless)
                .await?;
            return Ok(());
        }
        let client = client_service(&cluster);
        let created = self
            .create_if_missing(&cluster, Kind::Service, &client)
            .await?;
        if created == Created::Existing {
            let selector = client_selector(&self.topology.name);
            let patch = json!({"spec": {"selector": selector}});
            let api: Api<Service> = Api::namespaced(self.client.clone(), &self.topology.namespace);
            api.patch(
                &client.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .map_err(|e| api_error("correcting the client Service's selector", &e))?;
        }
        Ok(())
    }

    async fn set_disruption_budget(&self, min_available: u32) -> Result<(), ApiError> {
        let cluster = self.cluster()?;
        let on_claims = self.every_member_on_claim(&cluster);
        let budget = disruption_budget(&cluster, min_available, on_claims);
        let created = self
            .create_if_missing(&cluster, Kind::PodDisruptionBudget, &budget)
            .await?;
        if created == Created::Existing {
            let name = &self.topology.name;
            let api: Api<PodDisruptionBudget> =
                Api::namespaced(self.client.clone(), &self.topology.namespace);
            let patch = json!({"spec": {
                "minAvailable": min_available,
                "unhealthyPodEvictionPolicy": eviction_policy(on_claims),
            }});
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| api_error(&format!("setting PodDisruptionBudget {name}"), &e))?;
        }
        Ok(())
    }

    async fn expand_claim(&self, name: &str, quantity: &str) -> Result<(), ApiError> {
        let claim = pvc_name(name);
        let api: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &self.topology.namespace);
        let patch = json!({"spec": {"resources": {"requests": {"storage": quantity}}}});
        api.patch(&claim, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| api_error(&format!("expanding PVC {claim} to {quantity}"), &e))?;
        Ok(())
    }

    async fn create_member_pod(&self, member: &MemberPod) -> Result<(), ApiError> {
        let cluster = self.cluster()?;
        if member.restore.is_some() && self.operator_image.is_none() {
            return Err(ApiError::Other(format!(
                "seed {} restores a snapshot with the operator's own image, which is unknown \
                 (set ETCD_OPERATOR_IMAGE, or POD_NAME and POD_NAMESPACE for the operator \
                 to read it from its pod)",
                member.name
            )));
        }
        if member.prepared_with.is_some() && self.operator_image.is_none() {
            return Err(ApiError::Other(format!(
                "prepared joiner {}'s gate runs the operator's own image, which is unknown",
                member.name
            )));
        }
        let policy = cluster.spec.pod.clone().unwrap_or_default();
        if let Some(spec) = policy.persistent_volume_claim_spec {
            let pvc = PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(pvc_name(&member.name)),
                    namespace: Some(self.topology.namespace.clone()),
                    labels: Some(object_labels(&self.topology.name)),
                    owner_references: Some(vec![owner_reference(&cluster)]),
                    ..ObjectMeta::default()
                },
                spec: Some(spec),
                status: None,
            };
            self.create_if_missing(&cluster, Kind::PersistentVolumeClaim, &pvc)
                .await?;
        }
        {
            let mut forced = self.forced.lock().unwrap_or_else(|p| p.into_inner());
            if member.state == InitialState::ForceNewCluster {
                forced.insert(member.name.clone());
            } else {
                forced.remove(&member.name);
            }
        }
        let mut pod = member_pod(&cluster, member, self.operator_image.as_deref());
        record_trust(&mut pod, self.tls.trust(&cluster).await?.as_deref());
        if self.create_if_missing(&cluster, Kind::Pod, &pod).await? == Created::New {
            match &member.prepared_with {
                Some(peers) => self.expectations.created_prepared(&member.name, peers),
                None => self.expectations.created(&member.name),
            }
            // Until the cache shows it, the pod is seen at the version it was made with: a
            // joiner is added, never taken for a leftover, and a seed is not taken for one
            // built for another version (and deleted as stale).
            let version = member.version.to_string();
            self.expectations.version_set(&member.name, &version);
        }
        Ok(())
    }

    async fn delete_pod(&self, name: &str) -> Result<(), ApiError> {
        self.recreate_pod(name).await?;
        // A member's pod goes only when the member is gone (removed from etcd, or never
        // one): its data volume goes with it, so that no PVC is left behind.
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &self.topology.namespace);
        let claim = pvc_name(name);
        let deleted = claims.delete(&claim, &DeleteParams::default()).await;
        match deleted.map_err(|e| api_error(&format!("deleting PVC {claim}"), &e)) {
            Ok(_) | Err(ApiError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn recreate_pod(&self, name: &str) -> Result<(), ApiError> {
        let deleted = self.pods_api().delete(name, &DeleteParams::default()).await;
        match deleted.map_err(|e| api_error(&format!("deleting pod {name}"), &e)) {
            Ok(_) => self.expectations.deleted(name),
            Err(ApiError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        Ok(())
    }

    async fn set_pod_version(&self, name: &str, change: &VersionChange) -> Result<(), ApiError> {
        let cluster = self.cluster()?;
        let version = &change.to;
        let image = image(cluster.spec.repository_or_default(), &version.to_string());
        // A null annotation is removed by the strategic merge patch.
        let patch = json!({
            "metadata": {"annotations": {
                UPGRADE_FROM_ANNOTATION: change.upgrade_from.as_ref().map(ToString::to_string),
            }},
            "spec": {"containers": [{"name": ETCD_CONTAINER, "image": image}]},
        });
        self.pods_api()
            .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map_err(|e| api_error(&format!("changing the image of pod {name}"), &e))?;
        self.expectations.version_set(name, &version.to_string());
        Ok(())
    }

    async fn label_voter(&self, name: &str) -> Result<(), ApiError> {
        let patch = json!({"metadata": {"labels": {VOTER_LABEL: "true"}}});
        self.pods_api()
            .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map_err(|e| api_error(&format!("labelling pod {name} a voting member"), &e))?;
        self.expectations.labelled_voter(name);
        Ok(())
    }

    async fn publish_status(&self, report: &StatusReport) -> Result<(), ApiError> {
        let cluster = self.cluster()?;
        let now = jiff::Timestamp::now().to_string();
        let status = status_from_report(report, &self.topology, cluster.status.as_ref(), &now);
        let api: Api<EtcdCluster> = Api::namespaced(self.client.clone(), &self.topology.namespace);
        api.patch_status(
            &self.topology.name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .map(|_| ())
        .map_err(|e| api_error("writing status", &e))
    }

    async fn record_bootstrap(&self, record: &BootstrapRecord) -> Result<(), ApiError> {
        // The one check before a cluster is born is a compare-and-swap on the object it
        // reads: first the cached one (current unless a write is still on its way to the
        // cache, and then the swap fails), else one read fresh from the API server.
        let bootstrap = json!(BootstrapStatus::from_record(record));
        match self.seed_unborn(&*self.cluster()?, &bootstrap).await {
            Ok(()) => {}
            Err(ApiError::Conflict(_)) => {
                let fresh = self.read_fresh("recording its seed").await?;
                self.seed_unborn(&fresh, &bootstrap).await?;
            }
            Err(e) => return Err(e),
        }
        *self
            .written_bootstrap
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(record.clone());
        Ok(())
    }

    async fn record_event(&self, event: &EventRecord) -> Result<(), ApiError> {
        let cluster = self.cluster()?;
        let warning = matches!(event.kind, EventType::Warning);
        let mut ev = super::event(warning, &event.reason, &event.note, &event.action);
        ev.secondary = event.member.as_ref().map(|name| ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(self.topology.namespace.clone()),
            name: Some(name.clone()),
            ..ObjectReference::default()
        });
        self.recorder
            .publish(&ev, &cluster.object_ref(&()))
            .await
            .map_err(|e| api_error("recording event", &e))
    }

    async fn record_recovery(&self, record: &RecoveryRecord) -> Result<(), ApiError> {
        // Read fresh, not from the cache: this is the fence of every recovery.
        let fresh = self.read_fresh("recording a recovery").await?;
        let stored = fresh.status.as_ref().and_then(|s| s.recovery.as_ref());
        check_fence(stored.map(RecoveryStatus::to_record).as_ref(), record)
            .map_err(|refusal| ApiError::Conflict(refusal.to_string()))?;
        let now = jiff::Timestamp::now().to_string();
        let started = stored
            .filter(|_| record.finished)
            .and_then(|s| s.started.clone());
        let status = RecoveryStatus::from_record(record, started, &now);
        let what = "recording the recovery in status";
        self.swap_status(&fresh, "recovery", status.merge_patch(), what)
            .await?;
        *self
            .written_recovery
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(record.clone());
        // An annotation that asks for one recovery, or gives one up, is used up once the
        // record it asked for is written.
        let used_up = if record.abandoned {
            ABANDON_RECOVERY_ANNOTATION
        } else if !record.finished {
            RECOVER_ANNOTATION
        } else {
            return Ok(());
        };
        if fresh.annotations().contains_key(used_up) {
            let patch = json!({"metadata": {"annotations": {used_up: null}}});
            self.clusters_api()
                .patch(
                    &self.topology.name,
                    &PatchParams::default(),
                    &Patch::Merge(patch),
                )
                .await
                .map_err(|e| api_error(&format!("removing annotation {used_up}"), &e))?;
        }
        Ok(())
    }

    async fn newest_backup(
        &self,
        read_since: Option<Instant>,
    ) -> Result<Option<SnapshotSource>, ApiError> {
        let cluster = self.cluster()?;
        let Some(backup) = cluster
            .spec
            .recovery
            .as_ref()
            .and_then(|r| r.backup.as_ref())
        else {
            return Ok(None);
        };
        let owner = crate::restore::source::Owner {
            cluster: self.topology.name.clone(),
            namespace: self.topology.namespace.clone(),
        };
        self.backups
            .newest(&self.client, &owner, backup, read_since)
            .await
            .map(Some)
    }
}

#[cfg(test)]
#[path = "cluster_api_tests.rs"]
mod tests;
