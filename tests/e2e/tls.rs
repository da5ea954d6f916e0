//! TLS: CoreOS-style static Secrets made here, operator-managed certificates (scaled over
//! TLS), and every kind of invalid Secret reported with nothing created.
//!
//! The host does not resolve the cluster's names, so clients here connect to a member's
//! pod address and verify its certificate against the member's DNS name
//! (`<member>.<cluster>.<ns>.svc`), the name the operator verifies it by.

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_client::{Certificate, Client as Etcd, ConnectOptions, Identity, TlsOptions};
use etcd_operator::api::KeyType;
use etcd_operator::tls::{Ca, ClusterNames, Leaf, Lifetime, Role, issue_leaf, new_ca};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::json;

use crate::support::*;

const VERSION: &str = "3.5.35";

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

fn year() -> Lifetime {
    Lifetime::starting(now() - 3600, 365 * 86_400)
}

fn ca(names: &ClusterNames) -> Ca {
    new_ca(names, KeyType::EcdsaP256, year()).unwrap()
}

fn leaf(ca: &Ca, role: Role, names: &ClusterNames, life: Lifetime) -> Leaf {
    issue_leaf(ca, role, names, KeyType::EcdsaP256, life).unwrap()
}

/// The keys of a CoreOS Secret for `role`.
fn coreos_keys(role: Role, leaf: &Leaf, ca: &Ca) -> BTreeMap<String, Vec<u8>> {
    BTreeMap::from([
        (
            role.cert_key().to_string(),
            leaf.cert_pem.clone().into_bytes(),
        ),
        (
            role.key_key().to_string(),
            leaf.key_pem.clone().into_bytes(),
        ),
        (role.ca_key().to_string(), ca.cert_pem.clone().into_bytes()),
    ])
}

async fn create_secret(ns: &str, name: &str, data: BTreeMap<String, Vec<u8>>) {
    let api: Api<Secret> = Api::namespaced(client().await, ns);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some(data.into_iter().map(|(k, v)| (k, ByteString(v))).collect()),
        ..Secret::default()
    };
    api.create(&PostParams::default(), &secret)
        .await
        .expect("create a Secret");
}

async fn read_secret(ns: &str, name: &str) -> Secret {
    let api: Api<Secret> = Api::namespaced(client().await, ns);
    api.get(name).await.expect("read a Secret")
}

fn key(secret: &Secret, key: &str) -> Vec<u8> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|v| v.0.clone())
        .unwrap_or_default()
}

/// The Secrets of a cluster in CoreOS's layout, all from one CA: `<prefix>-peer`,
/// `<prefix>-server`, `<prefix>-client`.
async fn coreos_secrets(ns: &str, prefix: &str, names: &ClusterNames, ca: &Ca) {
    for role in Role::ALL {
        let leaf = leaf(ca, role, names, year());
        create_secret(
            ns,
            &format!("{prefix}-{}", role.label()),
            coreos_keys(role, &leaf, ca),
        )
        .await;
    }
}

fn static_cluster_yaml(ns: &str, name: &str, size: u32, prefix: &str) -> String {
    format!(
        "{}  TLS:\n    static:\n      member:\n        peerSecret: {prefix}-peer\n        \
         serverSecret: {prefix}-server\n      operatorSecret: {prefix}-client\n",
        cluster_yaml(ns, name, size, VERSION, false)
    )
}

/// A client of member `member` of cluster `cluster` at its pod address, verifying its
/// certificate against its DNS name, presenting `identity` (`None`: no certificate).
async fn tls_client(
    ns: &str,
    cluster: &str,
    member: &str,
    ca_pem: &[u8],
    identity: Option<(&[u8], &[u8])>,
) -> Result<Etcd, etcd_client::Error> {
    let pods: Api<Pod> = Api::namespaced(client().await, ns);
    let ip = pods
        .get(member)
        .await
        .unwrap()
        .status
        .unwrap()
        .pod_ip
        .unwrap();
    let mut tls = TlsOptions::new()
        .domain_name(format!("{member}.{cluster}.{ns}.svc"))
        .ca_certificate(Certificate::from_pem(ca_pem));
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let options = ConnectOptions::new()
        .with_tls(tls)
        .with_connect_timeout(Duration::from_secs(3))
        .with_timeout(Duration::from_secs(5));
    Etcd::connect([format!("https://{ip}:2379")], Some(options)).await
}

/// A plain-HTTP client of the member's pod address gets nothing from it.
async fn assert_plaintext_refused(ns: &str, member: &str) {
    let pods: Api<Pod> = Api::namespaced(client().await, ns);
    let ip = pods
        .get(member)
        .await
        .unwrap()
        .status
        .unwrap()
        .pod_ip
        .unwrap();
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(3))
        .with_timeout(Duration::from_secs(3));
    let attempt = async {
        let mut c = Etcd::connect([format!("http://{ip}:2379")], Some(options)).await?;
        c.put("plain", "text", None).await
    };
    let result = tokio::time::timeout(Duration::from_secs(10), attempt).await;
    assert!(
        !matches!(result, Ok(Ok(_))),
        "a plaintext client was served"
    );
}

#[tokio::test]
async fn static_tls_from_coreos_secrets_serves_certified_clients_only() {
    let ns = Namespace::create("tls-static");
    let names = ClusterNames::new(&ns.0, "secure", "");
    let ca = ca(&names);
    coreos_secrets(&ns.0, "secure", &names, &ca).await;
    apply(&static_cluster_yaml(&ns.0, "secure", 3, "secure"));
    let ready = wait_running(&ns.0, "secure", 3, Duration::from_secs(240)).await;

    let client = leaf(&ca, Role::Client, &names, year());
    let identity = (client.cert_pem.as_bytes(), client.key_pem.as_bytes());
    let mut etcd = tls_client(
        &ns.0,
        "secure",
        &ready[0],
        ca.cert_pem.as_bytes(),
        Some(identity),
    )
    .await
    .expect("a client with the client certificate connects");
    write_keys(&mut etcd, "tls", 20).await;
    assert_keys(&mut etcd, "tls", 20).await;
    assert_eq!(member_list(&mut etcd).await.len(), 3);
    // Every peer URL is https: members talk to each other over TLS only.
    let peers = etcd.member_list().await.unwrap();
    assert!(
        peers
            .members()
            .iter()
            .all(|m| m.peer_urls().iter().all(|u| u.starts_with("https://")))
    );

    assert_plaintext_refused(&ns.0, &ready[1]).await;
    let anonymous = async {
        let mut c = tls_client(&ns.0, "secure", &ready[1], ca.cert_pem.as_bytes(), None).await?;
        c.put("anonymous", "x", None).await
    };
    let anonymous = tokio::time::timeout(Duration::from_secs(10), anonymous).await;
    assert!(
        !matches!(anonymous, Ok(Ok(_))),
        "a client without a certificate was served"
    );

    let status = clusters(&ns.0)
        .await
        .get("secure")
        .await
        .unwrap()
        .status
        .unwrap();
    let tls = status.tls.expect("status.tls");
    assert_eq!(tls.mode, "Static");
    let secrets: Vec<&str> = tls.certificates.iter().map(|c| c.secret.as_str()).collect();
    assert_eq!(
        secrets,
        vec!["secure-peer", "secure-server", "secure-client"]
    );
    assert!(tls.certificates.iter().all(|c| c.renew_at.is_none()));
}

#[tokio::test]
async fn operator_managed_tls_runs_and_scales_three_to_five_to_three() {
    let ns = Namespace::create("tls-auto");
    let yaml = format!(
        "{}  TLS:\n    auto:\n      validity: 2160h\n",
        cluster_yaml(&ns.0, "managed", 3, VERSION, false)
    );
    apply(&yaml);
    let ready = wait_running(&ns.0, "managed", 3, Duration::from_secs(240)).await;
    let secret = read_secret(&ns.0, "managed-client-tls").await;
    let owner = &secret.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(owner.kind, "EtcdCluster");
    let (ca_pem, cert, key_pem) = (
        key(&secret, "etcd-client-ca.crt"),
        key(&secret, "etcd-client.crt"),
        key(&secret, "etcd-client.key"),
    );
    let connect = |member: String| {
        let (ns, ca_pem, cert, key_pem) =
            (ns.0.clone(), ca_pem.clone(), cert.clone(), key_pem.clone());
        async move {
            tls_client(&ns, "managed", &member, &ca_pem, Some((&cert, &key_pem)))
                .await
                .expect("the operator's client certificate works")
        }
    };
    let mut etcd = connect(ready[0].clone()).await;
    write_keys(&mut etcd, "auto", 30).await;
    assert_plaintext_refused(&ns.0, &ready[0]).await;

    let status = clusters(&ns.0)
        .await
        .get("managed")
        .await
        .unwrap()
        .status
        .unwrap();
    let tls = status.tls.expect("status.tls");
    assert_eq!(tls.mode, "Auto");
    assert_eq!(tls.certificates.len(), 4, "{:?}", tls.certificates);
    assert!(tls.next_rotation.is_some());

    patch_spec(&ns.0, "managed", json!({"size": 5})).await;
    let five = wait_running(&ns.0, "managed", 5, Duration::from_secs(300)).await;
    let mut etcd = connect(five[4].clone()).await;
    assert_voters(&member_list(&mut etcd).await, 5);
    assert_keys(&mut etcd, "auto", 30).await;

    patch_spec(&ns.0, "managed", json!({"size": 3})).await;
    let three = wait_running(&ns.0, "managed", 3, Duration::from_secs(180)).await;
    let mut etcd = connect(three[0].clone()).await;
    assert_eq!(member_list(&mut etcd).await.len(), 3);
    assert_keys(&mut etcd, "auto", 30).await;
}

/// A Secret's keys.
type Keys = BTreeMap<String, Vec<u8>>;
/// The three Secrets of a cluster, by role.
type Bundles = [(Role, Keys); 3];

/// One invalid case: its Secrets' keys by suffix, and what the report must say.
struct Invalid {
    name: &'static str,
    secrets: Vec<(&'static str, BTreeMap<String, Vec<u8>>)>,
    /// The report, after `Secret <name>-`.
    says: &'static str,
}

fn invalid_cases(ns: &str) -> Vec<Invalid> {
    let names = |name: &str| ClusterNames::new(ns, name, "");
    let good = |name: &str, ca: &Ca| {
        Role::ALL.map(|role| {
            (
                role,
                coreos_keys(role, &leaf(ca, role, &names(name), year()), ca),
            )
        })
    };
    let with = |name: &'static str, change: &dyn Fn(&mut Bundles, &Ca)| {
        let ca = ca(&names(name));
        let mut all = good(name, &ca);
        change(&mut all, &ca);
        all.into_iter()
            .map(|(role, keys)| (role.label(), keys))
            .collect()
    };
    vec![
        Invalid {
            name: "missing",
            secrets: with("missing", &|all, _| all[2].1.clear()),
            says: "client: not found",
        },
        Invalid {
            name: "nokey",
            secrets: with("nokey", &|all, _| {
                all[0].1.remove("peer.key");
            }),
            says: "peer key peer.key: missing",
        },
        Invalid {
            name: "names",
            secrets: with("names", &|all, ca| {
                let other = ClusterNames::new(ns, "elsewhere", "");
                all[0].1 = coreos_keys(Role::Peer, &leaf(ca, Role::Peer, &other, year()), ca);
            }),
            says: "peer key peer.crt: does not cover names-bcdfg.names.",
        },
        Invalid {
            name: "expired",
            secrets: with("expired", &|all, ca| {
                let past = Lifetime::starting(now() - 7200, 3600);
                let old = leaf(ca, Role::Server, &names("expired"), past);
                all[1].1 = coreos_keys(Role::Server, &old, ca);
            }),
            says: "server key server.crt: expired at",
        },
        Invalid {
            name: "mismatch",
            secrets: with("mismatch", &|all, ca| {
                let other = leaf(ca, Role::Client, &names("mismatch"), year());
                all[2]
                    .1
                    .insert("etcd-client.key".into(), other.key_pem.into_bytes());
            }),
            says: "client key etcd-client.crt: does not match the certificate",
        },
    ]
}

#[tokio::test]
async fn each_invalid_tls_secret_is_reported_and_nothing_is_created() {
    let ns = Namespace::create("tls-invalid");
    let cases = invalid_cases(&ns.0);
    for case in &cases {
        for (label, keys) in &case.secrets {
            if !keys.is_empty() {
                create_secret(&ns.0, &format!("{}-{label}", case.name), keys.clone()).await;
            }
        }
        apply(&static_cluster_yaml(&ns.0, case.name, 3, case.name));
    }
    for case in &cases {
        let says = format!("Secret {}-{}", case.name, case.says);
        let status = wait_status(&ns.0, case.name, &says, Duration::from_secs(60), |s| {
            s.reason == "TLSSecretInvalid" && s.message.contains(&says)
        })
        .await;
        assert_eq!(status.phase, "Blocked", "{}", status.message);
        assert!(
            status.bootstrap.is_none(),
            "no seed was recorded: {:?}",
            status.bootstrap
        );
    }
    let (ok, pods) = kubectl(&["get", "pods", "-n", &ns.0, "-o", "name"], None);
    assert!(ok && pods.trim().is_empty(), "pods were created: {pods}");
    assert!(!event_names(&ns.0, "reason=TLSSecretInvalid").is_empty());
}
