//! From an EtcdBackup's spec to what one backup needs: the store (with the credentials of
//! its Secret), the cluster's endpoints, and how they are dialed (plain, or over TLS with
//! the client certificate [`client_tls`](super::client_tls) finds).

use std::sync::Arc;
use std::time::Duration;

use etcd_operator_core::topology::{CLIENT_PORT, Topology};

use crate::api::EtcdCluster;
use crate::api::backup::{BackupStorageType, EtcdBackupSpec};

use super::client_tls;
use super::credentials::{AbsCredentials, GcsCredentials, S3Credentials};
use super::dial::{Dialer, Reach};
use super::port::BackupKube;
use super::scope::EndpointPolicy;
use super::store::{BackupStore, Location, StoreConfig, StoreTimeouts};
use crate::api::s3::split_path;
use crate::secret_data::SecretData;

pub use super::target_error::TargetError;

/// Deadline of a whole backup when `backupPolicy.timeoutInSecond` is unset or 0.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// What `spec` is refused for before anything is read; `None` when it may run.
pub fn spec_problem(spec: &EtcdBackupSpec) -> Option<TargetError> {
    let has_store = match spec.storage_type {
        BackupStorageType::S3 => spec.s3.is_some(),
        BackupStorageType::Gcs => spec.gcs.is_some(),
        BackupStorageType::Abs => spec.abs.is_some(),
    };
    if !has_store {
        return Some(TargetError::Incomplete(
            "storageType S3 needs s3, GCS needs gcs, ABS needs abs",
        ));
    }
    let endpoints = spec.etcd_endpoints.as_ref().is_some_and(|e| !e.is_empty());
    if spec.cluster_name.is_some() == endpoints {
        return Some(TargetError::Incomplete(
            "set exactly one of clusterName and etcdEndpoints",
        ));
    }
    client_tls::spec_problem(spec)
}

async fn secret(
    kube: &dyn BackupKube,
    namespace: &str,
    name: &str,
) -> Result<SecretData, TargetError> {
    kube.secret(namespace, name)
        .await
        .map_err(TargetError::Kube)?
        .ok_or_else(|| TargetError::SecretNotFound(name.to_string()))
}

fn location(path: &str) -> Location {
    let (bucket, prefix) = split_path(path);
    Location {
        bucket: bucket.to_string(),
        prefix: prefix.to_string(),
    }
}

/// The store `spec` names, opened with the credentials of its Secret.
pub async fn store(
    kube: &dyn BackupKube,
    namespace: &str,
    spec: &EtcdBackupSpec,
    timeouts: StoreTimeouts,
) -> Result<BackupStore, TargetError> {
    let invalid = |secret: &str| {
        let secret = secret.to_string();
        move |source| TargetError::InvalidSecret { secret, source }
    };
    let config = match (spec.storage_type, &spec.s3, &spec.gcs, &spec.abs) {
        (BackupStorageType::S3, Some(s3), _, _) => {
            let data = secret(kube, namespace, &s3.aws_secret).await?;
            StoreConfig::S3 {
                location: location(&s3.path),
                endpoint: s3.endpoint.clone().filter(|e| !e.is_empty()),
                force_path_style: s3.force_path_style,
                credentials: S3Credentials::from_secret(&data).map_err(invalid(&s3.aws_secret))?,
            }
        }
        (BackupStorageType::Gcs, _, Some(gcs), _) => {
            let name = gcs.gcp_secret.as_deref().ok_or(TargetError::Incomplete(
                "gcs.gcpSecret is needed: the operator has no default Google credentials",
            ))?;
            let data = secret(kube, namespace, name).await?;
            StoreConfig::Gcs {
                location: location(&gcs.path),
                credentials: Arc::new(GcsCredentials::from_secret(&data).map_err(invalid(name))?),
            }
        }
        (BackupStorageType::Abs, _, _, Some(abs)) => {
            let data = secret(kube, namespace, &abs.abs_secret).await?;
            StoreConfig::Abs {
                location: location(&abs.path),
                credentials: Arc::new(
                    AbsCredentials::from_secret(&data).map_err(invalid(&abs.abs_secret))?,
                ),
            }
        }
        _ => {
            return Err(TargetError::Incomplete(
                "storageType S3 needs s3, GCS needs gcs, ABS needs abs",
            ));
        }
    };
    Ok(BackupStore::open(&config, timeouts)?)
}

/// What one backup dials.
#[derive(Debug, Clone)]
pub struct Etcd {
    /// The cluster's name in backup names.
    pub cluster: String,
    /// Its client URLs.
    pub endpoints: Vec<String>,
    /// How they and the members are dialed.
    pub dialer: Dialer,
    /// The cluster ID its EtcdCluster's status records ([`recorded_cluster_id`]); `None`
    /// for endpoints given, or when nothing is recorded.
    pub cluster_id: Option<u64>,
}

/// The cluster ID `cluster`'s members must answer with, as its status records it: the last
/// recovery's (none while a restore's new seed has not answered yet), else the
/// bootstrap's. An ID that does not parse is kept as an unknown existing cluster (every
/// member then differs from it), never as "nothing recorded".
pub fn recorded_cluster_id(cluster: &EtcdCluster) -> Option<u64> {
    let status = cluster.status.as_ref()?;
    if let Some(recovery) = status.recovery.as_ref().map(|r| r.to_record()) {
        match (recovery.cluster_id, &recovery.seed) {
            (Some(id), _) => return Some(id),
            (None, Some(_)) => return None,
            (None, None) => {}
        }
    }
    status.bootstrap.as_ref()?.to_record().cluster_id
}

/// Where a backup's etcd is, before how it is dialed.
struct Located {
    /// The cluster's name in backup names.
    cluster: String,
    /// Its client URLs.
    endpoints: Vec<String>,
    /// The Secret of the client certificate; `None` to dial without TLS.
    secret: Option<String>,
    /// The cluster ID its EtcdCluster's status records.
    cluster_id: Option<u64>,
}

/// The endpoints `spec` gives, named after the EtcdBackup.
fn given_endpoints(backup_name: &str, spec: &EtcdBackupSpec) -> Result<Located, TargetError> {
    Ok(Located {
        cluster: backup_name.to_string(),
        endpoints: spec.etcd_endpoints.clone().unwrap_or_default(),
        secret: client_tls::certificate_secret(spec, None)?,
        cluster_id: None,
    })
}

/// The EtcdCluster `name`: its member pods known to the operator, then its client
/// Service (`https` when the cluster runs TLS), with the cluster ID its status records.
async fn named_cluster(
    kube: &dyn BackupKube,
    namespace: &str,
    name: &str,
    spec: &EtcdBackupSpec,
) -> Result<Located, TargetError> {
    let object = kube
        .cluster(namespace, name)
        .await
        .map_err(TargetError::Kube)?
        .ok_or_else(|| TargetError::ClusterNotFound(name.to_string()))?;
    let secret = client_tls::certificate_secret(spec, Some(&object))?;
    let topology = Topology::new(namespace, name);
    let scheme = object.spec.tls_mode().scheme();
    let url = |host: &str| format!("{scheme}://{host}:{CLIENT_PORT}");
    // The members first, by their names (dialed at their pods' addresses), as the
    // cluster side reaches them; then the client Service.
    let mut endpoints: Vec<String> = kube
        .member_hosts(namespace, name)
        .iter()
        .map(|host| url(host))
        .collect();
    endpoints.push(url(&format!(
        "{}.{namespace}.svc",
        topology.client_service()
    )));
    Ok(Located {
        cluster: name.to_string(),
        endpoints,
        secret,
        cluster_id: recorded_cluster_id(&object),
    })
}

/// A dialer with the client certificate of `secret`, checked; a plain one without.
async fn certificate_dialer(
    kube: &dyn BackupKube,
    namespace: &str,
    secret: Option<String>,
) -> Result<Dialer, TargetError> {
    let Some(secret) = secret else {
        return Ok(Dialer::plain());
    };
    let data = kube
        .secret(namespace, &secret)
        .await
        .map_err(TargetError::Kube)?;
    let now = jiff::Timestamp::now().as_second();
    Ok(Dialer::tls(client_tls::identity(
        &secret,
        data.as_ref(),
        now,
    )?))
}

/// What a backup may reach: any endpoint, or only the pods and Services of `namespace`.
async fn reach(
    kube: &dyn BackupKube,
    namespace: &str,
    policy: EndpointPolicy,
) -> Result<Reach, TargetError> {
    Ok(match policy {
        EndpointPolicy::Anywhere => Reach::Anywhere(kube.addresses()),
        EndpointPolicy::OwnNamespace => {
            let view = kube
                .namespace_view(namespace)
                .await
                .map_err(TargetError::Kube)?;
            Reach::Namespace(Arc::new(view))
        }
    })
}

/// The etcd a backup of `spec` dials: a named EtcdCluster's member pods known to the
/// operator and its client Service (`https` when the cluster runs TLS), or the endpoints
/// given (named after the EtcdBackup); with the client certificate
/// [`client_tls::certificate_secret`] picks, checked; reaching only pods of `namespace`
/// unless `policy` allows any endpoint ([`scope`](super::scope)).
pub async fn etcd(
    kube: &dyn BackupKube,
    namespace: &str,
    backup_name: &str,
    spec: &EtcdBackupSpec,
    policy: EndpointPolicy,
) -> Result<Etcd, TargetError> {
    let Located {
        cluster,
        endpoints,
        secret,
        cluster_id,
    } = match &spec.cluster_name {
        None => given_endpoints(backup_name, spec)?,
        Some(name) => named_cluster(kube, namespace, name, spec).await?,
    };
    let dialer = certificate_dialer(kube, namespace, secret).await?;
    let dialer = dialer.with_reach(reach(kube, namespace, policy).await?);
    if spec.cluster_name.is_none() {
        for endpoint in &endpoints {
            dialer.check(endpoint, "etcdEndpoints")?;
        }
    }
    Ok(Etcd {
        cluster,
        endpoints,
        dialer,
        cluster_id,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use async_trait::async_trait;

    use etcd_operator_actors::ports::ApiError;

    use super::*;
    use crate::api::backup::{EtcdBackup, EtcdBackupStatus};
    use crate::api::s3::S3Store;
    use crate::api::{
        AutoTls, BootstrapStatus, EtcdCluster, EtcdClusterSpec, EtcdClusterStatus, KeyType,
        MemberSecret, RecoveryStatus, StaticTls, TlsPolicy,
    };
    use crate::backup::scope::NamespaceView;
    use crate::kube_api::own_objects::{ObjectEvent, OwnObjectWrites};
    use crate::tls::{ClusterNames, Lifetime, Role, issue_leaf, new_ca};

    /// Secrets and EtcdClusters of namespace `prod`, the member pods known, and the pods
    /// and Services of the namespace.
    #[derive(Default)]
    struct FakeKube {
        secrets: BTreeMap<String, SecretData>,
        clusters: BTreeMap<String, EtcdCluster>,
        members: Vec<String>,
        view: NamespaceView,
    }

    #[async_trait]
    impl BackupKube for FakeKube {
        async fn secret(&self, _: &str, name: &str) -> Result<Option<SecretData>, ApiError> {
            Ok(self.secrets.get(name).cloned())
        }
        async fn cluster(&self, _: &str, name: &str) -> Result<Option<EtcdCluster>, ApiError> {
            Ok(self.clusters.get(name).cloned())
        }
        fn member_hosts(&self, _: &str, _: &str) -> Vec<String> {
            self.members.clone()
        }
        async fn namespace_view(&self, _: &str) -> Result<NamespaceView, ApiError> {
            Ok(self.view.clone())
        }
        fn writes(&self) -> &dyn OwnObjectWrites<EtcdBackup> {
            self
        }
        fn may_act(&self, _: &str) -> Result<(), ApiError> {
            Ok(())
        }
    }

    #[async_trait]
    impl OwnObjectWrites<EtcdBackup> for FakeKube {
        async fn write_status(&self, _: &EtcdBackup, _: &EtcdBackupStatus) -> Result<(), ApiError> {
            Ok(())
        }
        async fn event(&self, _: &EtcdBackup, _: &ObjectEvent) -> Result<(), ApiError> {
            Ok(())
        }
    }

    /// A client Secret in CoreOS's layout, valid now.
    fn client_secret() -> SecretData {
        let now = jiff::Timestamp::now().as_second();
        let names = ClusterNames::new("prod", "demo", "");
        let life = Lifetime::starting(now - 60, 3600);
        let ca = new_ca(&names, KeyType::EcdsaP256, life).unwrap();
        let leaf = issue_leaf(&ca, Role::Client, &names, KeyType::EcdsaP256, life).unwrap();
        BTreeMap::from([
            ("etcd-client.crt".to_string(), leaf.cert_pem.into_bytes()),
            ("etcd-client.key".to_string(), leaf.key_pem.into_bytes()),
            ("etcd-client-ca.crt".to_string(), ca.cert_pem.into_bytes()),
        ])
    }

    fn cluster(tls: Option<TlsPolicy>) -> EtcdCluster {
        EtcdCluster::new(
            "demo",
            EtcdClusterSpec {
                tls,
                ..EtcdClusterSpec::default()
            },
        )
    }

    fn auto() -> Option<TlsPolicy> {
        Some(TlsPolicy {
            auto: Some(AutoTls::default()),
            ..TlsPolicy::default()
        })
    }

    fn static_tls() -> Option<TlsPolicy> {
        Some(TlsPolicy {
            r#static: Some(StaticTls {
                member: Some(MemberSecret {
                    peer_secret: Some("demo-peer".into()),
                    server_secret: Some("demo-server".into()),
                }),
                operator_secret: Some("demo-operator".into()),
            }),
            ..TlsPolicy::default()
        })
    }

    fn kube(tls: Option<TlsPolicy>, secrets: &[&str]) -> FakeKube {
        FakeKube {
            secrets: secrets
                .iter()
                .map(|name| (name.to_string(), client_secret()))
                .collect(),
            clusters: BTreeMap::from([("demo".to_string(), cluster(tls))]),
            members: Vec::new(),
            view: NamespaceView {
                namespace: "prod".into(),
                ..NamespaceView::default()
            },
        }
    }

    fn by_cluster(secret: Option<&str>) -> EtcdBackupSpec {
        EtcdBackupSpec {
            cluster_name: Some("demo".into()),
            client_tls_secret: secret.map(str::to_string),
            ..s3_spec()
        }
    }

    async fn resolve(kube: &FakeKube, spec: &EtcdBackupSpec) -> Result<Etcd, TargetError> {
        resolve_with(kube, spec, EndpointPolicy::OwnNamespace).await
    }

    async fn resolve_with(
        kube: &FakeKube,
        spec: &EtcdBackupSpec,
        policy: EndpointPolicy,
    ) -> Result<Etcd, TargetError> {
        assert!(spec_problem(spec).is_none(), "{:?}", spec_problem(spec));
        etcd(kube, "prod", "nightly", spec, policy).await
    }

    fn by_endpoints(endpoints: &[&str]) -> EtcdBackupSpec {
        EtcdBackupSpec {
            cluster_name: None,
            etcd_endpoints: Some(endpoints.iter().map(|e| e.to_string()).collect()),
            ..s3_spec()
        }
    }

    #[tokio::test]
    async fn endpoints_outside_the_backups_namespace_are_refused_with_the_flag_named() {
        let kube = kube(None, &[]);
        for endpoint in [
            "http://victim-client.victim.svc:2379",
            "http://etcd.example:2379",
            "http://10.244.7.7:2379",
        ] {
            let err = resolve(&kube, &by_endpoints(&["http://x:2379", endpoint]))
                .await
                .err()
                .unwrap_or_else(|| panic!("{endpoint} was accepted"));
            assert_eq!(err.reason(), "EndpointOutsideNamespace", "{err}");
            let text = err.to_string();
            assert!(
                text.contains(&format!("etcdEndpoints {endpoint}")),
                "{text}"
            );
            assert!(text.contains(super::super::scope::ALLOW_FLAG), "{text}");
        }
        let err = resolve(
            &kube,
            &by_endpoints(&["http://victim-client.victim.svc:2379"]),
        )
        .await
        .unwrap_err();
        assert!(
            err.is_spec_problem(),
            "another namespace's name stays refused"
        );
    }

    #[tokio::test]
    async fn with_the_flag_endpoints_outside_the_namespace_are_accepted() {
        let kube = kube(None, &[]);
        let spec = by_endpoints(&["http://victim-client.victim.svc:2379"]);
        let etcd = resolve_with(&kube, &spec, EndpointPolicy::Anywhere)
            .await
            .unwrap();
        assert_eq!(etcd.endpoints, ["http://victim-client.victim.svc:2379"]);
        etcd.dialer
            .check(&etcd.endpoints[0], "etcdEndpoints")
            .unwrap();
    }

    #[tokio::test]
    async fn a_client_tls_secret_makes_the_backup_dial_the_cluster_over_https() {
        let kube = kube(auto(), &["etcd-client-tls"]);
        let etcd = resolve(&kube, &by_cluster(Some("etcd-client-tls")))
            .await
            .unwrap();
        assert!(etcd.dialer.uses_tls());
        assert_eq!(etcd.endpoints, ["https://demo-client.prod.svc:2379"]);
        assert_eq!(etcd.cluster, "demo");
    }

    #[tokio::test]
    async fn an_operator_managed_tls_cluster_is_backed_up_with_the_operators_client_secret() {
        // No clientTLSSecret: the `<cluster>-client-tls` Secret the operator made is used.
        let kube = kube(auto(), &["demo-client-tls"]);
        let etcd = resolve(&kube, &by_cluster(None)).await.unwrap();
        assert!(etcd.dialer.uses_tls());
        // Until it exists, the backup says which Secret it waits for.
        let missing = resolve(&self::kube(auto(), &[]), &by_cluster(None))
            .await
            .unwrap_err();
        assert_eq!(missing.reason(), "TLSSecretInvalid");
        assert!(missing.to_string().contains("demo-client-tls"), "{missing}");
        assert!(!missing.is_spec_problem(), "a Secret fixed later is used");
    }

    #[tokio::test]
    async fn a_static_tls_cluster_is_backed_up_with_its_operator_secret() {
        let kube = kube(static_tls(), &["demo-operator"]);
        let etcd = resolve(&kube, &by_cluster(None)).await.unwrap();
        assert!(etcd.dialer.uses_tls());
        assert_eq!(etcd.endpoints, ["https://demo-client.prod.svc:2379"]);
    }

    #[tokio::test]
    async fn a_plain_cluster_is_dialed_plain_members_first_then_its_client_service() {
        let mut kube = kube(None, &[]);
        kube.members = vec!["demo-abcde.demo.prod.svc".into()];
        let etcd = resolve(&kube, &by_cluster(None)).await.unwrap();
        assert!(!etcd.dialer.uses_tls());
        assert_eq!(
            etcd.endpoints,
            [
                "http://demo-abcde.demo.prod.svc:2379",
                "http://demo-client.prod.svc:2379"
            ]
        );
    }

    #[tokio::test]
    async fn a_client_tls_secret_for_a_cluster_without_tls_is_refused_never_ignored() {
        let kube = kube(None, &["etcd-client-tls"]);
        let err = resolve(&kube, &by_cluster(Some("etcd-client-tls")))
            .await
            .unwrap_err();
        assert_eq!(err.reason(), "TLSMismatch");
        assert!(err.to_string().contains("etcd-client-tls"), "{err}");
        assert!(err.to_string().contains("plain http"), "{err}");
    }

    #[tokio::test]
    async fn an_unusable_client_tls_secret_is_reported_with_its_name_and_key() {
        let mut kube = kube(auto(), &["etcd-client-tls"]);
        kube.secrets
            .get_mut("etcd-client-tls")
            .unwrap()
            .remove("etcd-client.key");
        let err = resolve(&kube, &by_cluster(Some("etcd-client-tls")))
            .await
            .unwrap_err();
        assert_eq!(err.reason(), "TLSSecretInvalid");
        assert_eq!(
            err.to_string(),
            "Secret etcd-client-tls key etcd-client.key: missing"
        );
    }

    #[tokio::test]
    async fn https_endpoints_are_dialed_with_the_client_tls_secret() {
        let kube = kube(None, &["etcd-client-tls"]);
        let spec = EtcdBackupSpec {
            cluster_name: None,
            etcd_endpoints: Some(vec!["https://etcd.example:2379".into()]),
            client_tls_secret: Some("etcd-client-tls".into()),
            ..s3_spec()
        };
        let etcd = resolve_with(&kube, &spec, EndpointPolicy::Anywhere)
            .await
            .unwrap();
        assert!(etcd.dialer.uses_tls());
        assert_eq!(etcd.cluster, "nightly");
        assert_eq!(etcd.endpoints, ["https://etcd.example:2379"]);
    }

    #[tokio::test]
    async fn a_named_cluster_is_backed_up_only_with_the_cluster_id_its_status_records() {
        let mut kube = kube(None, &[]);
        let demo = kube.clusters.get_mut("demo").unwrap();
        demo.status = Some(EtcdClusterStatus {
            bootstrap: Some(BootstrapStatus {
                cluster_id: Some("1a2b".into()),
                ..BootstrapStatus::default()
            }),
            ..EtcdClusterStatus::default()
        });
        let etcd = resolve(&kube, &by_cluster(None)).await.unwrap();
        assert_eq!(etcd.cluster_id, Some(0x1a2b));
        // A recovery's record supersedes the bootstrap's.
        let demo = kube.clusters.get_mut("demo").unwrap();
        let status = demo.status.as_mut().unwrap();
        status.recovery = Some(RecoveryStatus {
            cluster_id: Some("beef".into()),
            ..RecoveryStatus::default()
        });
        let etcd = resolve(&kube, &by_cluster(None)).await.unwrap();
        assert_eq!(etcd.cluster_id, Some(0xbeef));
        // A restore under way: the new seed's ID is not known yet, nothing is checked.
        let status = kube
            .clusters
            .get_mut("demo")
            .unwrap()
            .status
            .as_mut()
            .unwrap();
        status.recovery = Some(RecoveryStatus {
            seed: Some("demo-abcde".into()),
            ..RecoveryStatus::default()
        });
        let etcd = resolve(&kube, &by_cluster(None)).await.unwrap();
        assert_eq!(etcd.cluster_id, None);
        // Endpoints given: no record to check against.
        let spec = by_endpoints(&["http://demo-client:2379"]);
        assert_eq!(resolve(&kube, &spec).await.unwrap().cluster_id, None);
    }

    fn s3_spec() -> EtcdBackupSpec {
        EtcdBackupSpec {
            cluster_name: Some("c".into()),
            s3: Some(S3Store {
                path: "b/p".into(),
                aws_secret: "aws".into(),
                ..S3Store::default()
            }),
            ..EtcdBackupSpec::default()
        }
    }

    #[test]
    fn a_spec_without_its_store_or_with_two_clusters_is_refused() {
        assert!(spec_problem(&s3_spec()).is_none());
        let no_store = EtcdBackupSpec {
            storage_type: BackupStorageType::Gcs,
            ..s3_spec()
        };
        assert_eq!(spec_problem(&no_store).unwrap().reason(), "InvalidSpec");
        let both = EtcdBackupSpec {
            etcd_endpoints: Some(vec!["http://x:2379".into()]),
            ..s3_spec()
        };
        assert_eq!(spec_problem(&both).unwrap().reason(), "InvalidSpec");
    }
}
