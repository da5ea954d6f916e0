//! The TLS side of one cluster on Kubernetes: its Secrets read (kept for a short while),
//! checked into the lifecycle's [`TlsObservation`], the operator's client identity handed
//! to the etcd adapter, and operator-managed certificates issued into Secrets the
//! EtcdCluster owns.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use etcd_operator_actors::ports::ApiError;
use etcd_operator_core::lifecycle::{CaRotationStep, TlsObservation};
use etcd_operator_core::topology::Topology;

use super::error::api_error;
use crate::api::{AutoTls, EtcdCluster};
use crate::resources::labels::{object_labels, owner_reference};
use crate::secret_data::SecretData;
use crate::tls::layout::{CA_CERT_KEY, CA_KEY_KEY};
use crate::tls::rotation::{HANDLED_ANNOTATION, ROTATE_ANNOTATION, advance, next_event};
use crate::tls::{
    Ca, CaRecord, CaSecret, CaSource, CaState, CheckedCa, ClientIdentity, ClusterNames, LeafState,
    Lifetime, NewCaError, ReadSecret, Renewal, Role, SecretNames, auto_verdict, ca_state, check_ca,
    issue_leaf, joined, leaf_state, members_trust, new_ca, rotation_view, secret_names,
    static_verdict,
};

/// How long Secrets read for a tick's observation are reused: a user's fix is seen
/// within this; the operator's own writes are seen at once.
const SECRET_TTL: Duration = Duration::from_secs(10);
/// Lifetime of a CA the operator makes when `caValidity` is unset.
const CA_LIFETIME_S: i64 = 10 * 365 * 86_400;
/// How far back certificates' validity starts (clocks of other machines may lag).
const BACKDATE_S: i64 = 60;
/// Lifetime of operator-made certificates when `validity` is unset (90 days).
const DEFAULT_VALIDITY_S: i64 = 90 * 86_400;
/// The shortest lifetime accepted.
const MIN_VALIDITY_S: i64 = 60;

/// The operator's client identity of every cluster: written by each cluster's
/// Kubernetes side when it checks the Secrets, read by its etcd side for every
/// connection.
#[derive(Clone, Default)]
pub struct Identities(Arc<RwLock<HashMap<Topology, ClientIdentity>>>);

impl Identities {
    /// The identity of cluster `topology`, when its Secrets hold a usable one.
    pub fn get(&self, topology: &Topology) -> Option<ClientIdentity> {
        let map = self.0.read().unwrap_or_else(|p| p.into_inner());
        map.get(topology).cloned()
    }

    fn set(&self, topology: &Topology, identity: Option<ClientIdentity>) {
        let mut map = self.0.write().unwrap_or_else(|p| p.into_inner());
        match identity {
            Some(identity) => map.insert(topology.clone(), identity),
            None => map.remove(topology),
        };
    }
}

/// A Secret as last read.
struct Cached {
    read: Instant,
    secret: Option<Secret>,
}

/// The TLS side of one cluster.
pub(crate) struct TlsSide {
    client: Client,
    topology: Topology,
    identities: Identities,
    cache: Mutex<HashMap<String, Cached>>,
}

impl Drop for TlsSide {
    fn drop(&mut self) {
        self.identities.set(&self.topology, None);
    }
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

fn data(secret: &Option<Secret>) -> Option<SecretData> {
    secret.as_ref().map(|s| {
        s.data
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect()
    })
}

fn ours(secret: &Option<Secret>, cluster: &EtcdCluster) -> bool {
    let uid = cluster.metadata.uid.as_deref();
    secret.as_ref().is_some_and(|s| {
        s.owner_references()
            .iter()
            .any(|r| Some(r.uid.as_str()) == uid)
    })
}

/// The names a cluster's certificates must cover.
fn cluster_names(cluster: &EtcdCluster) -> ClusterNames {
    let domain = cluster
        .spec
        .pod
        .as_ref()
        .and_then(|p| p.cluster_domain.clone())
        .unwrap_or_default();
    ClusterNames::new(
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
        &domain,
    )
}

/// The lifetime of operator-made certificates: `validity` (`2160h`, `90m`, `1h30m`,
/// `120s`), at least a minute.
pub(crate) fn validity_seconds(validity: Option<&str>) -> i64 {
    duration_seconds(validity, DEFAULT_VALIDITY_S)
}

/// A duration written as hours, minutes and seconds, at least a minute; `default` when
/// unset or unreadable.
fn duration_seconds(text: Option<&str>, default: i64) -> i64 {
    let Some(text) = text.filter(|v| !v.is_empty()) else {
        return default;
    };
    let mut total: i64 = 0;
    let mut number: i64 = 0;
    for c in text.chars() {
        match c {
            '0'..='9' => {
                number = number
                    .saturating_mul(10)
                    .saturating_add(i64::from(c as u8 - b'0'))
            }
            'h' | 'm' | 's' => {
                let unit = match c {
                    'h' => 3600,
                    'm' => 60,
                    _ => 1,
                };
                total = total.saturating_add(number.saturating_mul(unit));
                number = 0;
            }
            _ => return default,
        }
    }
    total.max(MIN_VALIDITY_S)
}

impl TlsSide {
    /// The TLS side of `topology`, handing identities to `identities`.
    pub(crate) fn new(client: Client, topology: Topology, identities: Identities) -> Self {
        TlsSide {
            client,
            topology,
            identities,
            cache: Mutex::default(),
        }
    }

    fn api(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.topology.namespace)
    }

    /// Secret `name`, from the short cache unless `fresh`.
    async fn secret(&self, name: &str, fresh: bool) -> Result<Option<Secret>, ApiError> {
        if !fresh {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(c) = cache.get(name).filter(|c| c.read.elapsed() < SECRET_TTL) {
                return Ok(c.secret.clone());
            }
        }
        let secret = self
            .api()
            .get_opt(name)
            .await
            .map_err(|e| api_error(&format!("reading Secret {name}"), &e))?;
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache.insert(
            name.to_string(),
            Cached {
                read: Instant::now(),
                secret: secret.clone(),
            },
        );
        Ok(secret)
    }

    /// Reads the Secrets of `names` (unnamed roles stay unread): the CA's, where its CAs
    /// come from, then each role's.
    async fn read_all(
        &self,
        names: &SecretNames,
        fresh: bool,
    ) -> Result<(Option<Secret>, CaSource, Vec<Option<Secret>>), ApiError> {
        let (ca, source) = match &names.ca {
            Some(ca) => (
                self.secret(&ca.name, fresh).await?,
                self.ca_source(ca, fresh).await?,
            ),
            None => (None, CaSource::Operator),
        };
        let mut leaves = Vec::new();
        for role in Role::ALL {
            leaves.push(match names.of(role) {
                Some(name) => self.secret(name, fresh).await?,
                None => None,
            });
        }
        Ok((ca, source, leaves))
    }

    /// Where the CAs of `ca` come from: the operator, or the user's Secret as checked now.
    async fn ca_source(&self, ca: &CaSecret, fresh: bool) -> Result<CaSource, ApiError> {
        Ok(match &ca.source {
            Some(user) => {
                let secret = self.secret(user, fresh).await?;
                CaSource::User(check_ca(user, data(&secret).as_ref(), now()))
            }
            None => CaSource::Operator,
        })
    }

    /// Checks the cluster's certificates for one tick, and keeps the operator's client
    /// identity for the etcd side. `born`: a member may exist (the status records a
    /// bootstrap), so the operator's CA may no longer be made anew.
    pub(crate) async fn observe(
        &self,
        cluster: &EtcdCluster,
        born: bool,
    ) -> Result<TlsObservation, ApiError> {
        let Some(names) = secret_names(&cluster.name_any(), cluster.spec.tls.as_ref()) else {
            self.identities.set(&self.topology, None);
            return Ok(TlsObservation::default());
        };
        let (ca, source, leaves) = self.read_all(&names, false).await?;
        let datas: Vec<Option<SecretData>> = leaves.iter().map(data).collect();
        let found = |i: usize, role: Role| ReadSecret {
            name: names.of(role).unwrap_or(""),
            data: datas[i].as_ref(),
            ours: ours(&leaves[i], cluster),
        };
        let found = Role::ALL.map(|role| (role, found(role as usize, role)));
        let cluster_names = cluster_names(cluster);
        let now = now();
        let mut ca_event = None;
        let verdict = match (&names.ca, auto(cluster)) {
            (Some(ca_name), Some(auto)) => {
                let ca_data = data(&ca);
                let ca_found = ReadSecret {
                    name: &ca_name.name,
                    data: ca_data.as_ref(),
                    ours: ours(&ca, cluster),
                };
                let state = ca_state(ca_found, &annotations(&ca), &source, born, now);
                let record = match &state {
                    CaState::Valid(record) => Some(record.as_ref().clone()),
                    _ => None,
                };
                let mut verdict = auto_verdict(state, &found, &cluster_names, renewal(auto), now);
                if let Some(record) = record {
                    let asked = asked_rotation(cluster);
                    verdict.observation.rotation =
                        rotation_view(&record, &source, asked, renewal(auto), now);
                    ca_event = next_event(&record, &source, renewal(auto), now);
                }
                verdict
            }
            _ => static_verdict(&names, &found.map(|(_, f)| f), &cluster_names, now),
        };
        self.identities.set(&self.topology, verdict.identity);
        let mut observation = verdict.observation;
        observation.next_event_in = next_event_in(&observation, ca_event, now);
        Ok(observation)
    }

    /// The digest of the CA bundles a member pod created now mounts, read fresh (it goes
    /// into the pod's template annotation: what the member trusts from its start).
    pub(crate) async fn trust(&self, cluster: &EtcdCluster) -> Result<Option<String>, ApiError> {
        let Some(names) = secret_names(&cluster.name_any(), cluster.spec.tls.as_ref()) else {
            return Ok(None);
        };
        let mut datas = Vec::new();
        for role in Role::ALL {
            datas.push(match names.of(role) {
                Some(name) => data(&self.secret(name, true).await?),
                None => None,
            });
        }
        Ok(members_trust(&[0, 1, 2].map(|i| datas[i].as_ref())))
    }
}

/// The time from `now` (Unix seconds) to the next certificate event: the earliest
/// renewal of a certificate in `observation`, or `ca_event` (the CA's own), if any lies
/// ahead.
fn next_event_in(
    observation: &TlsObservation,
    ca_event: Option<i64>,
    now: i64,
) -> Option<Duration> {
    let renewals = observation
        .certificates
        .iter()
        .filter_map(|c| c.renew_at.as_deref())
        .filter_map(|at| at.parse::<jiff::Timestamp>().ok())
        .map(|at| at.as_second());
    let next = renewals.chain(ca_event).filter(|at| *at > now).min()?;
    Some(Duration::from_secs(u64::try_from(next - now).ok()?))
}

/// A Secret's annotations.
fn annotations(secret: &Option<Secret>) -> BTreeMap<String, String> {
    secret
        .as_ref()
        .and_then(|s| s.metadata.annotations.clone())
        .unwrap_or_default()
}

/// The cluster's `rotate-ca` annotation.
fn asked_rotation(cluster: &EtcdCluster) -> Option<&str> {
    cluster
        .metadata
        .annotations
        .as_ref()?
        .get(ROTATE_ANNOTATION)
        .map(String::as_str)
}

/// The lifetime of a CA the operator makes (`caValidity`).
fn ca_lifetime(auto: &AutoTls) -> i64 {
    duration_seconds(auto.ca_validity.as_deref(), CA_LIFETIME_S)
}

fn auto(cluster: &EtcdCluster) -> Option<&AutoTls> {
    cluster.spec.tls.as_ref()?.auto.as_ref()
}

fn renewal(auto: &AutoTls) -> Renewal {
    Renewal {
        percent: auto.renew_at_percent,
    }
}

/// A Secret's keys for a certificate of `role`, with the trust bundle `bundle`.
fn leaf_data(role: Role, cert: &str, key: &str, bundle: &[u8]) -> BTreeMap<String, Vec<u8>> {
    BTreeMap::from([
        (role.cert_key().to_string(), cert.as_bytes().to_vec()),
        (role.key_key().to_string(), key.as_bytes().to_vec()),
        (role.ca_key().to_string(), bundle.to_vec()),
    ])
}

fn ca_data(ca: &Ca) -> BTreeMap<String, Vec<u8>> {
    BTreeMap::from([
        (CA_CERT_KEY.to_string(), ca.cert_pem.as_bytes().to_vec()),
        (CA_KEY_KEY.to_string(), ca.key_pem.as_bytes().to_vec()),
    ])
}

/// The CA `checked` as the issuer takes it.
fn signing_ca(checked: &CheckedCa) -> Ca {
    Ca {
        cert_pem: String::from_utf8_lossy(&checked.cert_pem).into_owned(),
        key_pem: String::from_utf8_lossy(&checked.key_pem).into_owned(),
    }
}

/// Problems of Secrets, one line.
fn issue_failed(e: impl std::fmt::Display) -> ApiError {
    ApiError::Other(e.to_string())
}

impl TlsSide {
    /// Creates Secret `name` owned by `cluster` with `data`, or replaces the data of the
    /// one there (already checked to be the cluster's own).
    async fn write(
        &self,
        cluster: &EtcdCluster,
        name: &str,
        type_: &str,
        data: BTreeMap<String, Vec<u8>>,
        exists: bool,
        annotations: Option<BTreeMap<String, String>>,
    ) -> Result<(), ApiError> {
        let data: BTreeMap<String, ByteString> =
            data.into_iter().map(|(k, v)| (k, ByteString(v))).collect();
        let context = format!("writing Secret {name}");
        if exists {
            let patch = json!({"data": data});
            self.api()
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| api_error(&context, &e))?;
            return Ok(());
        }
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(self.topology.namespace.clone()),
                labels: Some(object_labels(&self.topology.name)),
                annotations,
                owner_references: Some(vec![owner_reference(cluster)]),
                ..ObjectMeta::default()
            },
            type_: Some(type_.to_string()),
            data: Some(data),
            ..Secret::default()
        };
        self.api()
            .create(&PostParams::default(), &secret)
            .await
            .map_err(|e| api_error(&context, &e))?;
        Ok(())
    }

    /// The CA to issue from: the one in its Secret, or a new one when the operator may
    /// make it (no member exists yet).
    async fn ca(
        &self,
        cluster: &EtcdCluster,
        names: &SecretNames,
        (secret, source): (&Option<Secret>, &CaSource),
        born: bool,
        notes: &mut Vec<String>,
    ) -> Result<(Ca, CaRecord), ApiError> {
        let ca_name = names
            .ca
            .clone()
            .ok_or_else(|| issue_failed("no CA Secret"))?;
        let ca_data_read = data(secret);
        let found = ReadSecret {
            name: &ca_name.name,
            data: ca_data_read.as_ref(),
            ours: ours(secret, cluster),
        };
        let now = now();
        let checked = match ca_state(found, &annotations(secret), source, born, now) {
            CaState::Valid(record) => *record,
            CaState::Invalid(problems) => return Err(ApiError::Invalid(joined(&problems))),
            CaState::ToMake => {
                let ca = make_ca(cluster, now).map_err(issue_failed)?;
                let (name, tls) = (&ca_name.name, "kubernetes.io/tls");
                // A rotation asked for before the cluster existed is done: its CA is new.
                let handled = asked_rotation(cluster)
                    .map(|v| BTreeMap::from([(HANDLED_ANNOTATION.to_string(), v.to_string())]));
                self.write(cluster, name, tls, ca_data(&ca), false, handled)
                    .await?;
                notes.push(format!("made the cluster's CA in Secret {name}"));
                let checked = crate::tls::check_ca(name, Some(&ca_data(&ca)), now)
                    .map_err(|p| issue_failed(format!("{p:?}")))?;
                CaRecord::plain(checked)
            }
            CaState::Adopt { record, ca } => {
                // A copy of the user's CA, byte for byte: the certificates issued from it
                // hold the same trust bundle.
                let copy = BTreeMap::from([
                    (CA_CERT_KEY.to_string(), ca.cert_pem.clone()),
                    (CA_KEY_KEY.to_string(), ca.key_pem.clone()),
                ]);
                let tls = "kubernetes.io/tls";
                self.write(cluster, &record, tls, copy.clone(), false, None)
                    .await?;
                notes.push(format!(
                    "copied the CA of Secret {} into Secret {record}, the CA the \
                     certificates come from",
                    ca.secret
                ));
                let checked = check_ca(&record, Some(&copy), now)
                    .map_err(|p| issue_failed(format!("{p:?}")))?;
                CaRecord::plain(checked)
            }
        };
        Ok((signing_ca(&checked.signer), checked))
    }

    /// Issues the operator-managed certificates that are missing, unusable or due, from
    /// the cluster's CA; says what it did.
    pub(crate) async fn issue(
        &self,
        cluster: &EtcdCluster,
        born: bool,
    ) -> Result<String, ApiError> {
        let names = secret_names(&cluster.name_any(), cluster.spec.tls.as_ref())
            .filter(|n| n.ca.is_some())
            .ok_or_else(|| ApiError::Invalid("spec.TLS.auto is not set".into()))?;
        let auto =
            auto(cluster).ok_or_else(|| ApiError::Invalid("spec.TLS.auto is not set".into()))?;
        let (ca_secret, source, leaves) = self.read_all(&names, true).await?;
        let mut notes = Vec::new();
        let (ca, checked_ca) = self
            .ca(cluster, &names, (&ca_secret, &source), born, &mut notes)
            .await?;
        let cluster_names = cluster_names(cluster);
        let now = now();
        let validity = validity_seconds(auto.validity.as_deref());
        for (i, role) in Role::ALL.into_iter().enumerate() {
            let name = names.of(role).unwrap_or_default();
            let read = data(&leaves[i]);
            let found = ReadSecret {
                name,
                data: read.as_ref(),
                ours: ours(&leaves[i], cluster),
            };
            match leaf_state(role, found, &checked_ca, &cluster_names, renewal(auto), now) {
                LeafState::Valid(..) => continue,
                LeafState::Foreign(problem) => return Err(ApiError::Invalid(problem.to_string())),
                LeafState::Due(..) | LeafState::Issue(_) | LeafState::Rewrite(..) => {}
            }
            let key = auto.key_type.unwrap_or_default();
            let life = Lifetime::starting(now - BACKDATE_S, validity);
            let leaf = issue_leaf(&ca, role, &cluster_names, key, life).map_err(issue_failed)?;
            let bundle = checked_ca.trust_bundle();
            let content = leaf_data(role, &leaf.cert_pem, &leaf.key_pem, &bundle);
            self.write(cluster, name, "Opaque", content, found.data.is_some(), None)
                .await?;
            notes.push(format!(
                "issued the {} certificate in Secret {name}, valid until {}",
                role.label(),
                jiff::Timestamp::from_second(life.not_after)
                    .map(|t| t.to_string())
                    .unwrap_or_default()
            ));
        }
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).clear();
        Ok(if notes.is_empty() {
            "every certificate is current".into()
        } else {
            notes.join("; ")
        })
    }
}

/// The merge patch that turns a CA Secret whose keys were `read` into one with `data` and
/// `annotations` (`None`: removed): keys the step drops and annotations it removes are
/// null, and the resourceVersion read makes the patch conditional (a Secret changed since
/// fails it).
fn ca_patch(
    read: &SecretData,
    data: SecretData,
    annotations: &BTreeMap<String, Option<String>>,
    resource_version: Option<String>,
) -> serde_json::Value {
    let mut keys: BTreeMap<String, Option<ByteString>> =
        read.keys().map(|k| (k.clone(), None)).collect();
    keys.extend(data.into_iter().map(|(k, v)| (k, Some(ByteString(v)))));
    json!({
        "metadata": {"resourceVersion": resource_version, "annotations": annotations},
        "data": keys,
    })
}

/// A new CA for `cluster` (its key type and `caValidity`), valid from about `now`.
fn make_ca(cluster: &EtcdCluster, now: i64) -> Result<Ca, crate::tls::IssueError> {
    let auto = auto(cluster);
    let key = auto.and_then(|a| a.key_type).unwrap_or_default();
    let seconds = auto.map_or(CA_LIFETIME_S, ca_lifetime);
    let life = Lifetime::starting(now - BACKDATE_S, seconds);
    new_ca(&cluster_names(cluster), key, life)
}

impl TlsSide {
    /// Moves the CA rotation from `from` to `to`, writing the operator's CA Secret, read
    /// fresh and replaced only if unchanged since (its resourceVersion): a step is never
    /// taken on a Secret that moved on, nor twice.
    pub(crate) async fn advance_ca_rotation(
        &self,
        cluster: &EtcdCluster,
        (from, to): (Option<CaRotationStep>, Option<CaRotationStep>),
    ) -> Result<String, ApiError> {
        let names = secret_names(&cluster.name_any(), cluster.spec.tls.as_ref());
        let Some(ca_name) = names.and_then(|n| n.ca) else {
            return Err(ApiError::Invalid(
                "only an operator-managed cluster's CA (spec.TLS.auto) is rotated".into(),
            ));
        };
        let source = self.ca_source(&ca_name, true).await?;
        let secret = self.secret(&ca_name.name, true).await?;
        let read = data(&secret);
        let (Some(object), Some(read), true) = (secret.clone(), read, ours(&secret, cluster))
        else {
            return Err(ApiError::Invalid(format!(
                "Secret {} is missing or not this cluster's own",
                ca_name.name
            )));
        };
        let now = now();
        let record = crate::tls::ca_record(&ca_name.name, &read, &annotations(&secret), now)
            .map_err(|p| ApiError::Invalid(format!("{p:?}")))?;
        // The new CA: the operator's own, made now, or the one in the user's Secret.
        let new = || match &source {
            CaSource::Operator => Ok(make_ca(cluster, now)?),
            CaSource::User(Ok(user)) => Ok(signing_ca(user)),
            CaSource::User(Err(problems)) => Err(NewCaError::UserCa(problems.clone())),
        };
        let write = advance(&record, (from, to), new, asked_rotation(cluster), now)
            .map_err(|e| ApiError::Conflict(e.to_string()))?;
        let patch = ca_patch(
            &read,
            write.data,
            &write.annotations,
            object.resource_version(),
        );
        let context = format!("writing Secret {}", ca_name.name);
        self.api()
            .patch(
                &ca_name.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|e| api_error(&context, &e))?;
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).clear();
        Ok(write.note)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_renewals(renewals: &[Option<&str>]) -> TlsObservation {
        let certificates = renewals
            .iter()
            .map(|at| etcd_operator_core::lifecycle::CertificateInfo {
                secret: "demo-peer-tls".into(),
                key: "peer.crt".into(),
                not_after: "2030-01-01T00:00:00Z".into(),
                renew_at: at.map(str::to_string),
            })
            .collect();
        TlsObservation {
            certificates,
            ..TlsObservation::default()
        }
    }

    #[test]
    fn the_next_certificate_event_is_the_earliest_renewal_ahead() {
        let now = "2026-12-01T00:00:00Z"
            .parse::<jiff::Timestamp>()
            .unwrap()
            .as_second();
        let obs = with_renewals(&[
            Some("2026-12-01T00:10:00Z"),
            None,
            Some("2026-12-01T00:01:40Z"),
            Some("2026-11-30T00:00:00Z"),
        ]);
        assert_eq!(
            next_event_in(&obs, None, now),
            Some(Duration::from_secs(100))
        );
        assert_eq!(
            next_event_in(&obs, Some(now + 30), now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(next_event_in(&with_renewals(&[None]), None, now), None);
    }

    #[test]
    fn a_rotation_step_patches_the_ca_secret_conditionally_and_drops_what_it_removes() {
        let read = SecretData::from([
            ("tls.crt".to_string(), b"old".to_vec()),
            ("next.crt".to_string(), b"new".to_vec()),
        ]);
        let data = SecretData::from([("tls.crt".to_string(), b"new".to_vec())]);
        let annotations = BTreeMap::from([
            ("step".to_string(), Some("ReissueLeaves".to_string())),
            ("gone".to_string(), None),
        ]);
        let patch = ca_patch(&read, data, &annotations, Some("42".into()));
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(patch["metadata"]["annotations"]["step"], "ReissueLeaves");
        assert!(patch["metadata"]["annotations"]["gone"].is_null());
        assert_eq!(patch["data"]["tls.crt"], "bmV3");
        assert!(patch["data"]["next.crt"].is_null());
        assert!(
            patch["data"].get("next.crt").is_some(),
            "a dropped key is sent as null"
        );
    }

    #[test]
    fn validity_reads_hours_minutes_and_seconds_with_a_floor_of_a_minute() {
        assert_eq!(validity_seconds(None), 90 * 86_400);
        assert_eq!(validity_seconds(Some("2160h")), 2160 * 3600);
        assert_eq!(validity_seconds(Some("1h30m")), 5400);
        assert_eq!(validity_seconds(Some("2m")), 120);
        assert_eq!(validity_seconds(Some("10s")), 60);
        assert_eq!(validity_seconds(Some("2d")), 90 * 86_400);
    }
}
