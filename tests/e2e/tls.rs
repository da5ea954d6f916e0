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

use crate::peer_probe;
use crate::support::*;

pub(crate) const VERSION: &str = "3.5.35";

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

pub(crate) fn year() -> Lifetime {
    Lifetime::starting(now() - 3600, 365 * 86_400)
}

pub(crate) fn ca(names: &ClusterNames) -> Ca {
    new_ca(names, KeyType::EcdsaP256, year()).unwrap()
}

pub(crate) fn leaf(ca: &Ca, role: Role, names: &ClusterNames, life: Lifetime) -> Leaf {
    issue_leaf(ca, role, names, KeyType::EcdsaP256, life).unwrap()
}

/// The keys of a CoreOS Secret for `role`.
pub(crate) fn coreos_keys(role: Role, leaf: &Leaf, ca: &Ca) -> BTreeMap<String, Vec<u8>> {
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

pub(crate) async fn create_secret(ns: &str, name: &str, data: BTreeMap<String, Vec<u8>>) {
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

/// The keys of a CA Secret (`kubernetes.io/tls` layout) holding `ca`.
fn user_ca_keys(ca: &Ca) -> BTreeMap<String, Vec<u8>> {
    BTreeMap::from([
        ("tls.crt".to_string(), ca.cert_pem.clone().into_bytes()),
        ("tls.key".to_string(), ca.key_pem.clone().into_bytes()),
    ])
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
pub(crate) async fn coreos_secrets(ns: &str, prefix: &str, names: &ClusterNames, ca: &Ca) {
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

pub(crate) fn static_cluster_yaml(ns: &str, name: &str, size: u32, prefix: &str) -> String {
    format!(
        "{}  TLS:\n    static:\n      member:\n        peerSecret: {prefix}-peer\n        \
         serverSecret: {prefix}-server\n      operatorSecret: {prefix}-client\n",
        cluster_yaml(ns, name, size, VERSION, false)
    )
}

/// A running 3-member static-TLS cluster `secure` in `ns`, from CoreOS-style Secrets made
/// here, and a client certificate of its CA for the caller's own use.
pub(crate) struct StaticTls {
    /// The CA every certificate of the cluster is issued by.
    pub ca: Ca,
    /// The members, Ready.
    pub ready: Vec<String>,
    /// A client certificate of `ca`, valid for a year.
    pub client: Leaf,
}

impl StaticTls {
    /// Makes the Secrets, applies the cluster and waits until its 3 members are Ready.
    pub(crate) async fn start(ns: &str) -> StaticTls {
        let names = ClusterNames::new(ns, "secure", "");
        let ca = ca(&names);
        coreos_secrets(ns, "secure", &names, &ca).await;
        apply(&static_cluster_yaml(ns, "secure", 3, "secure"));
        let ready = wait_running(ns, "secure", 3, Duration::from_secs(240)).await;
        let client = leaf(&ca, Role::Client, &names, year());
        StaticTls { ca, ready, client }
    }

    /// A client of member `ready[index]` with the client certificate.
    pub(crate) async fn connect(&self, ns: &str, index: usize) -> Etcd {
        let identity = (
            self.client.cert_pem.as_bytes(),
            self.client.key_pem.as_bytes(),
        );
        let ca = self.ca.cert_pem.as_bytes();
        tls_client(ns, "secure", &self.ready[index], ca, Some(identity))
            .await
            .expect("a client with the client certificate connects")
    }
}

/// The pod address of member `member`, which must have one.
async fn pod_ip(ns: &str, member: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client().await, ns);
    let pod = pods.get(member).await.expect("the member's pod");
    pod.status.and_then(|s| s.pod_ip).expect("a pod address")
}

/// A client of member `member` of cluster `cluster` at its pod address, verifying its
/// certificate against its DNS name, presenting `identity` (`None`: no certificate).
pub(crate) async fn tls_client(
    ns: &str,
    cluster: &str,
    member: &str,
    ca_pem: &[u8],
    identity: Option<(&[u8], &[u8])>,
) -> Result<Etcd, etcd_client::Error> {
    let ip = pod_ip(ns, member).await;
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
    let ip = pod_ip(ns, member).await;
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
    let cluster = StaticTls::start(&ns.0).await;
    let (ca, ready) = (&cluster.ca, &cluster.ready);
    let mut etcd = cluster.connect(&ns.0, 0).await;
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
    let long = "{validity: 2160h}";
    let ready = run_auto_tls(&ns.0, "managed", "", long, Duration::from_secs(240)).await;
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

/// The operator's client certificate of an auto cluster as its Secret holds it now:
/// (trusted CAs, certificate, key).
async fn client_keys(ns: &str, cluster: &str) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let secret = read_secret(ns, &format!("{cluster}-client-tls")).await;
    (
        key(&secret, "etcd-client-ca.crt"),
        key(&secret, "etcd-client.crt"),
        key(&secret, "etcd-client.key"),
    )
}

/// The addresses of the live member pods of `cluster`.
async fn member_ips(ns: &str, cluster: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client().await, ns);
    let selector = format!("app=etcd,etcd_cluster={cluster}");
    let list = pods
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    list.into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.status?.pod_ip)
        .filter(|ip| !ip.is_empty())
        .collect()
}

/// A client of every member of an auto cluster with the certificate its client Secret
/// holds now, verifying members by a name their server certificates cover.
pub(crate) async fn auto_client(ns: &str, cluster: &str) -> Result<Etcd, etcd_client::Error> {
    let (ca_pem, cert, key_pem) = client_keys(ns, cluster).await;
    let tls = TlsOptions::new()
        .domain_name(format!("writer.{cluster}.{ns}.svc"))
        .ca_certificate(Certificate::from_pem(ca_pem))
        .identity(Identity::from_pem(cert, key_pem));
    let options = ConnectOptions::new()
        .with_tls(tls)
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(3));
    let endpoints: Vec<String> = member_ips(ns, cluster)
        .await
        .into_iter()
        .map(|ip| format!("https://{ip}:2379"))
        .collect();
    Etcd::connect(endpoints, Some(options)).await
}

/// What a writer saw.
#[derive(Debug, Default)]
struct Written {
    /// Keys whose put etcd acknowledged.
    acked: Vec<String>,
    /// Puts that failed (each followed by a new connection with fresh credentials).
    failed: usize,
    /// The longest run of failed puts in a row.
    longest_failing_run: usize,
}

/// Writes a key every 200 ms until stopped, reconnecting with the client Secret's current
/// certificate after any failure (as an application renewing its certificate would).
struct Writer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<Written>,
}

impl Writer {
    fn start(ns: &str, cluster: &str, prefix: &str) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (ns, cluster, prefix, flag) = (
            ns.to_string(),
            cluster.to_string(),
            prefix.to_string(),
            stop.clone(),
        );
        let task = tokio::spawn(async move {
            let mut written = Written::default();
            let (mut etcd, mut run, mut i) = (None, 0, 0);
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if etcd.is_none() {
                    etcd = auto_client(&ns, &cluster).await.ok();
                }
                let key = format!("{prefix}/{i:06}");
                let put = match etcd.as_mut() {
                    Some(c) => {
                        tokio::time::timeout(Duration::from_secs(4), c.put(key.clone(), "v", None))
                            .await
                            .is_ok_and(|r| r.is_ok())
                    }
                    None => false,
                };
                i += 1;
                if put {
                    written.acked.push(key);
                    run = 0;
                } else {
                    etcd = None;
                    written.failed += 1;
                    run += 1;
                    written.longest_failing_run = written.longest_failing_run.max(run);
                }
            }
            written
        });
        Writer { stop, task }
    }

    async fn finish(self) -> Written {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await.expect("the writer")
    }
}

/// Every acknowledged write reads back, and the writer kept writing throughout: failures
/// came in short runs (a member restarting under the client, credentials renewed); the
/// `before` keys written under `before/` ahead of the writer read back too.
async fn assert_writes_survived(ns: &str, cluster: &str, written: &Written, before: usize) {
    assert!(!written.acked.is_empty(), "{written:?}");
    assert!(
        written.longest_failing_run <= 50,
        "writes failed {} times in a row (10 s and more): {} of {} failed",
        written.longest_failing_run,
        written.failed,
        written.failed + written.acked.len()
    );
    let mut etcd = auto_client(ns, cluster).await.expect("a client after");
    for key in &written.acked {
        let got = etcd.get(key.as_str(), None).await.expect("get");
        assert_eq!(got.kvs().len(), 1, "acknowledged write {key} is lost");
    }
    assert_keys(&mut etcd, "before", before).await;
}

/// Applies a 3-member cluster `name` on operator-managed TLS and waits until it runs:
/// `extra` is more of its spec (whole lines), `auto` the flow-style value of
/// `spec.TLS.auto`. Returns the ready members.
async fn run_auto_tls(
    ns: &str,
    name: &str,
    extra: &str,
    auto: &str,
    within: Duration,
) -> Vec<String> {
    let base = cluster_yaml(ns, name, 3, VERSION, false);
    apply(&format!("{base}{extra}  TLS:\n    auto: {auto}\n"));
    wait_running(ns, name, 3, within).await
}

/// A client of the running cluster `name`, after `count` keys under `prefix` were written.
async fn client_after_writing(ns: &str, name: &str, prefix: &str, count: usize) -> Etcd {
    let mut etcd = auto_client(ns, name).await.expect("a client");
    write_keys(&mut etcd, prefix, count).await;
    etcd
}

fn restarts(ns: &str) -> Vec<String> {
    let path = "jsonpath={range .items[*]}{.metadata.name}={.metadata.uid}/{.status.containerStatuses[*].restartCount} {end}";
    let (ok, out) = kubectl(&["get", "pods", "-n", ns, "-o", path], None);
    assert!(ok, "{out}");
    let mut words: Vec<String> = out.split_whitespace().map(str::to_string).collect();
    words.sort();
    words
}

#[tokio::test]
async fn leaf_certificates_are_renewed_under_writes_without_restarting_members() {
    let ns = Namespace::create("tls-renew");
    // Two-minute certificates renewed at half their life: one renewal a minute.
    let renewing = "{validity: 2m, renewAtPercent: 50}";
    run_auto_tls(&ns.0, "renew", "", renewing, Duration::from_secs(240)).await;
    client_after_writing(&ns.0, "renew", "before", 20).await;
    let pods_before = restarts(&ns.0);
    let peer_cert = |s: &Secret| key(s, "peer.crt");
    let first = peer_cert(&read_secret(&ns.0, "renew-peer-tls").await);

    let writer = Writer::start(&ns.0, "renew", "renew-writes");
    let mut seen = vec![first];
    while seen.len() < 3 {
        let secret = read_secret(&ns.0, "renew-peer-tls").await;
        if !seen.contains(&peer_cert(&secret)) {
            seen.push(peer_cert(&secret));
        }
        assert!(
            seen.len() == 3 || restarts(&ns.0) == pods_before,
            "a member restarted"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // A little longer: the last renewal reaches the members' files and the operator's
    // next connections.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let written = writer.finish().await;
    assert_eq!(
        restarts(&ns.0),
        pods_before,
        "no member pod restarted or replaced"
    );
    let status = wait_running(&ns.0, "renew", 3, Duration::from_secs(60)).await;
    assert_eq!(status.len(), 3);
    assert_writes_survived(&ns.0, "renew", &written, 20).await;
}

/// Events of `ns` with `reason`.
fn has_event(ns: &str, reason: &str) -> bool {
    !event_names(ns, &format!("reason={reason}")).is_empty()
}

/// How a CA rotation of an operator-managed cluster is asked for.
#[derive(Clone, Copy, PartialEq)]
enum RotationTrigger {
    /// The `rotate-ca` annotation on the operator's own CA (`TLS.auto: {}`).
    Annotation,
    /// A new CA written into the user's CA Secret (`TLS.auto.caSecret`).
    NewUserCa,
}

#[tokio::test]
async fn ca_rotation_by_annotation_keeps_writes_and_members_and_ends_on_the_new_ca() {
    ca_rotation_keeps_writes_and_members("tls-rotate", RotationTrigger::Annotation).await;
}

#[tokio::test]
async fn a_new_ca_in_the_users_ca_secret_is_adopted_with_no_failed_write_and_the_old_refused() {
    ca_rotation_keeps_writes_and_members("tls-user-ca", RotationTrigger::NewUserCa).await;
}

/// A 3-member TLS cluster on claims, under continuous writes, rotated onto a new CA by
/// `trigger`: every step's Event, no acknowledged write lost, the same members, every
/// bundle holding the new CA only, and a client certificate of the old CA refused.
async fn ca_rotation_keeps_writes_and_members(prefix: &str, trigger: RotationTrigger) {
    let ns = Namespace::create(prefix);
    let names = ClusterNames::new(&ns.0, "rot", "");
    let (tls, in_use, first) = match trigger {
        RotationTrigger::Annotation => ("{}", "rot-ca", None),
        RotationTrigger::NewUserCa => {
            let first = ca(&names);
            create_secret(&ns.0, "user-ca", user_ca_keys(&first)).await;
            ("{caSecret: user-ca}", "rot-ca-in-use", Some(first.cert_pem))
        }
    };
    let claims = "  pod:\n    persistentVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      \
         resources: {requests: {storage: 1Gi}}\n";
    run_auto_tls(&ns.0, "rot", claims, tls, Duration::from_secs(300)).await;
    let mut etcd = client_after_writing(&ns.0, "rot", "before", 20).await;
    let ids_before = member_list(&mut etcd).await;
    let old_ca = key(&read_secret(&ns.0, in_use).await, "tls.crt");
    if let Some(first) = first {
        assert_eq!(
            old_ca,
            first.into_bytes(),
            "the operator issues from a copy of the user's CA"
        );
    }
    let old_client = client_keys(&ns.0, "rot").await;

    let writer = Writer::start(&ns.0, "rot", "rot-writes");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let asked = match trigger {
        RotationTrigger::Annotation => {
            let (ok, out) = kubectl(
                &[
                    "annotate",
                    "etcd",
                    "rot",
                    "-n",
                    &ns.0,
                    "etcd.database.coreos.com/rotate-ca=first",
                ],
                None,
            );
            assert!(ok, "{out}");
            None
        }
        RotationTrigger::NewUserCa => {
            let second = ca(&names);
            let keys: BTreeMap<String, ByteString> = user_ca_keys(&second)
                .into_iter()
                .map(|(k, v)| (k, ByteString(v)))
                .collect();
            let api: Api<Secret> = Api::namespaced(client().await, &ns.0);
            api.patch(
                "user-ca",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&json!({ "data": keys })),
            )
            .await
            .expect("write a new CA into the user's Secret");
            Some(second.cert_pem.into_bytes())
        }
    };
    wait_status(
        &ns.0,
        "rot",
        "a CA rotation under way",
        Duration::from_secs(60),
        |s| s.tls.as_ref().is_some_and(|t| t.ca_rotation.is_some()),
    )
    .await;
    wait_status(
        &ns.0,
        "rot",
        "the CA rotation complete",
        Duration::from_secs(900),
        |s| {
            s.phase == "Running"
                && s.members.ready.len() == 3
                && s.tls.as_ref().is_some_and(|t| t.ca_rotation.is_none())
        },
    )
    .await;
    let written = writer.finish().await;
    assert_writes_survived(&ns.0, "rot", &written, 20).await;

    for reason in [
        "CARotationStarted",
        "CARotationReissuing",
        "CARotationDroppingOldCA",
        "CARotationCompleted",
    ] {
        assert!(has_event(&ns.0, reason), "no {reason} Event");
    }
    let new_ca = key(&read_secret(&ns.0, in_use).await, "tls.crt");
    assert_ne!(new_ca, old_ca, "a new CA issues");
    if let Some(theirs) = asked {
        assert_eq!(new_ca, theirs, "the CA that issues is the user's new one");
    }
    for (secret, ca_key) in [
        ("rot-peer-tls", "peer-ca.crt"),
        ("rot-server-tls", "server-ca.crt"),
        ("rot-client-tls", "etcd-client-ca.crt"),
    ] {
        let bundle = key(&read_secret(&ns.0, secret).await, ca_key);
        assert_eq!(
            String::from_utf8_lossy(&bundle).trim(),
            String::from_utf8_lossy(&new_ca).trim(),
            "{secret} trusts the new CA only"
        );
    }
    let mut etcd = auto_client(&ns.0, "rot")
        .await
        .expect("a client on the new CA");
    assert_keys(&mut etcd, "before", 20).await;
    let ids_after = member_list(&mut etcd).await;
    let ids = |list: &[(u64, String, bool)]| {
        let mut ids: Vec<u64> = list.iter().map(|m| m.0).collect();
        ids.sort_unstable();
        ids
    };
    assert_eq!(ids(&ids_after), ids(&ids_before), "the same members");
    // The client certificate of before the rotation (old CA) is refused now.
    let member = member_ips(&ns.0, "rot").await;
    assert!(!member.is_empty());
    let pods: Api<Pod> = Api::namespaced(client().await, &ns.0);
    let name = pods
        .list(&kube::api::ListParams::default().labels("etcd_cluster=rot"))
        .await
        .unwrap()
        .items[0]
        .metadata
        .name
        .clone()
        .unwrap();
    let refused = async {
        let mut c = tls_client(
            &ns.0,
            "rot",
            &name,
            &new_ca,
            Some((&old_client.1, &old_client.2)),
        )
        .await?;
        c.put("old-ca", "x", None).await
    };
    let refused = tokio::time::timeout(Duration::from_secs(10), refused).await;
    assert!(
        !matches!(refused, Ok(Ok(_))),
        "a client of the old CA was served"
    );
}

/// What the peer port of `pod` answers to an HTTPS `GET /members`, presenting `pair`
/// (certificate, key), or to plain HTTP (`https` false): the HTTP status, or `None` when
/// no answer came.
fn peer_answer(
    ns: &str,
    cluster: &str,
    pod: &str,
    https: bool,
    pair: Option<(&[u8], &[u8])>,
) -> Option<String> {
    let ips = std::process::Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig())
        .args([
            "get",
            "pod",
            "-n",
            ns,
            pod,
            "-o",
            "jsonpath={.status.podIP}",
        ])
        .output()
        .unwrap();
    let ip = String::from_utf8_lossy(&ips.stdout).to_string();
    let host = format!("{pod}.{cluster}.{ns}.svc");
    let dir = std::env::temp_dir().join(format!("e2e-peer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = peer_probe::status_curl();
    cmd.arg("-k")
        .arg("--connect-to")
        .arg(format!("{host}:2380:{ip}:2380"));
    if let Some((cert, key_pem)) = pair {
        peer_probe::present(&mut cmd, &dir, cert, key_pem);
    }
    let scheme = if https { "https" } else { "http" };
    let out = cmd
        .arg(format!("{scheme}://{host}:2380/members"))
        .output()
        .unwrap();
    let code = String::from_utf8_lossy(&out.stdout).to_string();
    (out.status.success() && code != "000").then_some(code)
}

#[tokio::test]
async fn a_member_refuses_plaintext_and_uncertified_peers() {
    let ns = Namespace::create("tls-peers");
    let ready = run_auto_tls(&ns.0, "peers", "", "{}", Duration::from_secs(240)).await;
    let pod = &ready[0];
    // The control: a certificate from the cluster's CA (the operator's own, which names
    // no address etcd would check) is let through.
    let (_, cert, key_pem) = client_keys(&ns.0, "peers").await;
    let certified = peer_answer(&ns.0, "peers", pod, true, Some((&cert, &key_pem)));
    assert_eq!(certified.as_deref(), Some("200"));
    // Plain HTTP: at most Go's "client sent an HTTP request to an HTTPS server".
    let plain = peer_answer(&ns.0, "peers", pod, false, None);
    assert_ne!(plain.as_deref(), Some("200"), "plain HTTP was served");
    // No certificate, and a self-signed one: refused in the handshake.
    assert_eq!(peer_answer(&ns.0, "peers", pod, true, None), None);
    let names = ClusterNames::new(&ns.0, "peers", "");
    let stranger = ca(&names);
    let forged = leaf(&stranger, Role::Client, &names, year());
    let selfsigned = peer_answer(
        &ns.0,
        "peers",
        pod,
        true,
        Some((forged.cert_pem.as_bytes(), forged.key_pem.as_bytes())),
    );
    assert_eq!(
        selfsigned, None,
        "a certificate from another CA was let through"
    );
    let rcgen_key = rcgen::KeyPair::generate().unwrap();
    let own = rcgen::CertificateParams::new(Vec::<String>::new())
        .unwrap()
        .self_signed(&rcgen_key)
        .unwrap();
    let selfsigned = peer_answer(
        &ns.0,
        "peers",
        pod,
        true,
        Some((own.pem().as_bytes(), rcgen_key.serialize_pem().as_bytes())),
    );
    assert_eq!(
        selfsigned, None,
        "a self-signed certificate was let through"
    );
    assert_plaintext_refused(&ns.0, pod).await;
}

#[tokio::test]
async fn a_tls_cluster_upgrades_from_3_5_to_3_6() {
    let ns = Namespace::create("tls-upgrade");
    run_auto_tls(&ns.0, "up", "", "{}", Duration::from_secs(240)).await;
    client_after_writing(&ns.0, "up", "before", 30).await;
    let writer = Writer::start(&ns.0, "up", "up-writes");
    patch_spec(&ns.0, "up", json!({"version": "3.6.16"})).await;
    wait_status(
        &ns.0,
        "up",
        "upgraded to 3.6.16",
        Duration::from_secs(600),
        |s| s.current_version == "3.6.16" && s.phase == "Running" && s.members.ready.len() == 3,
    )
    .await;
    let written = writer.finish().await;
    assert_writes_survived(&ns.0, "up", &written, 30).await;
    assert!(
        pod_images(&ns.0).iter().all(|i| i.ends_with(":v3.6.16")),
        "{:?}",
        pod_images(&ns.0)
    );
}

#[tokio::test]
async fn a_static_clusters_members_restart_onto_a_ca_the_user_adds() {
    let ns = Namespace::create("tls-static-ca");
    let names = ClusterNames::new(&ns.0, "user", "");
    let ca1 = ca(&names);
    coreos_secrets(&ns.0, "user", &names, &ca1).await;
    apply(&static_cluster_yaml(&ns.0, "user", 3, "user"));
    let ready = wait_running(&ns.0, "user", 3, Duration::from_secs(240)).await;
    let client_leaf = leaf(&ca1, Role::Client, &names, year());
    let identity = (
        client_leaf.cert_pem.as_bytes(),
        client_leaf.key_pem.as_bytes(),
    );
    let mut etcd = tls_client(
        &ns.0,
        "user",
        &ready[0],
        ca1.cert_pem.as_bytes(),
        Some(identity),
    )
    .await
    .expect("a client");
    write_keys(&mut etcd, "before", 20).await;
    let before = pod_uids(&ns.0);

    // The user adds a second CA to every bundle (the first step of their own rotation).
    let ca2 = ca(&names);
    let both = format!("{}{}", ca1.cert_pem, ca2.cert_pem);
    let api: Api<Secret> = Api::namespaced(client().await, &ns.0);
    for role in Role::ALL {
        let patch = json!({"data": {role.ca_key(): ByteString(both.clone().into_bytes())}});
        api.patch(
            &format!("user-{}", role.label()),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .expect("patch a Secret");
    }
    let after = wait_for(
        "every member pod replaced",
        Duration::from_secs(600),
        || {
            let before = before.clone();
            let ns = ns.0.clone();
            async move {
                let after = pod_uids(&ns);
                if before.iter().all(|p| !after.contains(p)) {
                    Ok(after)
                } else {
                    Err(format!("{before:?} -> {after:?}"))
                }
            }
        },
    )
    .await;
    assert!(!after.is_empty());
    assert!(has_event(&ns.0, "PodRecreated"));
    let ready = wait_running(&ns.0, "user", 3, Duration::from_secs(60)).await;
    // A client certificate from the added CA is now accepted by every member.
    let new_client = leaf(&ca2, Role::Client, &names, year());
    for member in &ready {
        let mut etcd = tls_client(
            &ns.0,
            "user",
            member,
            ca1.cert_pem.as_bytes(),
            Some((
                new_client.cert_pem.as_bytes(),
                new_client.key_pem.as_bytes(),
            )),
        )
        .await
        .expect("a client of the added CA");
        assert_keys(&mut etcd, "before", 20).await;
    }
}
