//! Backups of real etcd processes into a real S3-compatible server (versitygw), both on
//! loopback: the snapshot streamed, stored, verified and described; retention; failures
//! reported with a reason and nothing deleted; a member serving clients over TLS backed
//! up with a client certificate (made by the operator's own code) and verified by the
//! name it is reached by, also when dialed at an address.

mod support;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use etcd_operator::api::KeyType;
use etcd_operator::backup::client_tls;
use etcd_operator::backup::credentials::S3Credentials;
use etcd_operator::backup::dial::Dialer;
use etcd_operator::backup::integrity::SnapshotVerifier;
use etcd_operator::backup::integrity::sha256_hex;
use etcd_operator::backup::metadata::BackupMetadata;
use etcd_operator::backup::naming::{BackupName, metadata_key};
use etcd_operator::backup::run::{BackupError, BackupRequest, Writer, retain, take_backup};
use etcd_operator::backup::store::{BackupStore, Location, StoreConfig, StoreTimeouts};
use etcd_operator::etcd_api::{AddressSource, Route};
use etcd_operator::tls::{Ca, ClusterNames, Lifetime, Role, issue_leaf, new_ca};
use support::etcd_process::{EtcdProcess, Loopback};
use support::s3_server::{ACCESS_KEY, S3Server, SECRET_KEY};
use support::tls_etcd::TlsMember;

const BUCKET: &str = "backups";
const PREFIX: &str = "etcd/prod";

fn credentials(secret_key: &str) -> S3Credentials {
    let data: BTreeMap<String, Vec<u8>> = [
        ("accessKey".to_string(), ACCESS_KEY.as_bytes().to_vec()),
        ("secretKey".to_string(), secret_key.as_bytes().to_vec()),
    ]
    .into();
    S3Credentials::from_secret(&data).unwrap()
}

fn quick() -> StoreTimeouts {
    StoreTimeouts {
        connect: Duration::from_secs(2),
        request: Duration::from_secs(20),
        retry: Duration::from_secs(3),
    }
}

fn store_at(endpoint: &str, bucket: &str, secret_key: &str) -> BackupStore {
    store_under(endpoint, bucket, secret_key, PREFIX)
}

fn store_under(endpoint: &str, bucket: &str, secret_key: &str, prefix: &str) -> BackupStore {
    let config = StoreConfig::S3 {
        location: Location {
            bucket: bucket.into(),
            prefix: prefix.into(),
        },
        endpoint: Some(endpoint.into()),
        force_path_style: true,
        credentials: credentials(secret_key),
    };
    BackupStore::open(&config, quick()).unwrap()
}

/// The EtcdBackup `uid` in namespace `prod`.
fn writer(uid: &str) -> Option<Writer> {
    Some(Writer {
        namespace: "prod".into(),
        uid: uid.into(),
    })
}

fn request(cluster: &str, endpoints: Vec<String>) -> BackupRequest {
    BackupRequest {
        writer: writer("nightly"),
        cluster: cluster.into(),
        endpoints,
        dialer: Dialer::plain(),
        cluster_id: None,
        etcd_timeout: Duration::from_secs(3),
        timeout: Duration::from_secs(60),
    }
}

/// Writes `count` keys of 1 KiB each.
async fn write_keys(endpoint: &str, count: usize) {
    let mut client = etcd_client::Client::connect([endpoint], None)
        .await
        .unwrap();
    let value = "v".repeat(1024);
    for i in 0..count {
        client
            .put(format!("key-{i:05}"), value.clone(), None)
            .await
            .unwrap();
    }
}

/// `etcdctl snapshot status -w json` of a file, when an etcdctl that has the command is
/// found (Debian's 3.4, or the cached 3.5).
fn snapshot_status(file: &std::path::Path) -> Option<serde_json::Value> {
    let home = std::env::var("HOME").unwrap_or_default();
    let candidates = [
        std::env::var("ETCDCTL_BIN").unwrap_or_default(),
        "/usr/bin/etcdctl".to_string(),
        format!("{home}/.cache/etcd-operator/etcd/v3.5/bin/etcdctl"),
    ];
    let bin = candidates
        .iter()
        .find(|c| !c.is_empty() && std::path::Path::new(c).exists())?;
    let out = Command::new(bin)
        .args(["snapshot", "status", "-w", "json"])
        .arg(file)
        .env("ETCDCTL_API", "3")
        .output()
        .expect("run etcdctl snapshot status");
    assert!(
        out.status.success(),
        "etcdctl snapshot status failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).expect("etcdctl prints JSON"))
}

#[actix_rt::test]
async fn a_snapshot_is_streamed_stored_verified_and_described_beside_it() {
    let net = Loopback::new();
    let etcd = EtcdProcess::start_seed(&net, 1, "seed").await;
    write_keys(&etcd.client_url(), 300).await;
    let s3 = S3Server::start(&[BUCKET]);
    let store = store_at(&s3.endpoint(), BUCKET, SECRET_KEY);

    let outcome = take_backup(&store, &request("prod", vec![etcd.client_url()]))
        .await
        .unwrap_or_else(|e| panic!("backup failed: {e}\n{}", s3.log()));

    let name = BackupName::parse(&outcome.key).expect("the key is a backup name");
    assert_eq!(name.cluster, "prod");
    assert!(
        outcome.key.starts_with("etcd/prod/prod_"),
        "{}",
        outcome.key
    );
    assert_eq!(outcome.path, format!("{BUCKET}/{}", outcome.key));
    // What the server holds is byte for byte what the metadata says.
    let stored = std::fs::read(s3.file(BUCKET, &outcome.key)).unwrap();
    assert_eq!(stored.len() as u64, outcome.metadata.size);
    assert_eq!(sha256_hex(&stored), outcome.metadata.sha256);
    assert!(stored.len() > 300 * 1024, "{} bytes", stored.len());
    // The metadata object beside it.
    let beside = std::fs::read(s3.file(BUCKET, &metadata_key(&outcome.key))).unwrap();
    let metadata: BackupMetadata = serde_json::from_slice(&beside).unwrap();
    assert_eq!(metadata, outcome.metadata);
    assert_eq!(metadata.revision, name.revision);
    assert!(metadata.revision >= 301, "revision {}", metadata.revision);
    assert!(
        metadata.etcd_version.starts_with("3."),
        "{}",
        metadata.etcd_version
    );
    assert_ne!(metadata.cluster_id, "0");
    // etcd's own tool reads the downloaded snapshot.
    let file = s3.file(BUCKET, &outcome.key);
    if let Some(status) = snapshot_status(&file) {
        assert!(status["totalKey"].as_u64().unwrap() >= 300, "{status}");
        assert!(
            status["revision"].as_i64().unwrap() >= metadata.revision,
            "{status}"
        );
    } else {
        eprintln!(
            "no etcdctl with `snapshot status`: the stored file was not checked by etcd's tool"
        );
    }
}

#[actix_rt::test]
async fn retention_keeps_the_newest_backups_of_the_cluster_and_nothing_else_is_touched() {
    let net = Loopback::new();
    let etcd = EtcdProcess::start_seed(&net, 1, "seed").await;
    write_keys(&etcd.client_url(), 10).await;
    let s3 = S3Server::start(&[BUCKET]);
    let store = store_at(&s3.endpoint(), BUCKET, SECRET_KEY);
    // Objects retention must never delete: another cluster's backup, and a foreign file.
    let other = BackupName::new("other", jiff::Timestamp::UNIX_EPOCH, 1).key(PREFIX);
    store.put_small(&other, b"x".to_vec()).await.unwrap();
    store
        .put_small("etcd/prod/notes.txt", b"x".to_vec())
        .await
        .unwrap();

    let mut keys = Vec::new();
    for _ in 0..4 {
        write_keys(&etcd.client_url(), 1).await;
        let outcome = take_backup(&store, &request("prod", vec![etcd.client_url()]))
            .await
            .unwrap();
        let retention = retain(&store, &outcome.metadata, 2).await;
        assert_eq!(retention.error, None);
        assert!(retention.kept <= 2, "{retention:?}");
        keys.push(outcome.key);
        // Names carry milliseconds: keep them apart.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let mut want = vec![
        keys[2].clone(),
        metadata_key(&keys[2]),
        keys[3].clone(),
        metadata_key(&keys[3]),
        other,
        "etcd/prod/notes.txt".to_string(),
    ];
    want.sort();
    assert_eq!(s3.keys(BUCKET), want);
}

#[actix_rt::test]
async fn retention_deletes_only_this_etcdbackups_backups_directly_under_its_prefix() {
    let net = Loopback::new();
    let etcd = EtcdProcess::start_seed(&net, 1, "seed").await;
    let s3 = S3Server::start(&[BUCKET]);
    let store = store_at(&s3.endpoint(), BUCKET, SECRET_KEY);
    let take = |request: BackupRequest, store: BackupStore| async move {
        tokio::time::sleep(Duration::from_millis(5)).await;
        take_backup(&store, &request).await.unwrap()
    };
    let prod = || request("prod", vec![etcd.client_url()]);
    let old = take(prod(), store.clone()).await;
    // A one-shot EtcdBackup into the same prefix, and one into a prefix below it.
    let one_shot = BackupRequest {
        writer: writer("one-shot"),
        ..prod()
    };
    let one_shot = take(one_shot, store.clone()).await;
    let nested = store_under(&s3.endpoint(), BUCKET, SECRET_KEY, "etcd/prod/one-shot");
    let nested = take(prod(), nested).await;
    let made = take(prod(), store.clone()).await;

    // The listing sees only what is directly under the prefix.
    let listed = store.backup_keys().await.unwrap();
    assert!(!listed.contains(&nested.key), "{listed:?}");
    let retention = retain(&store, &made.metadata, 1).await;
    assert_eq!(retention.error, None);
    assert_eq!(retention.deleted, vec![old.key.clone()]);
    assert_eq!(retention.kept, 1);
    let mut want = vec![
        made.key.clone(),
        metadata_key(&made.key),
        one_shot.key.clone(),
        metadata_key(&one_shot.key),
        nested.key.clone(),
        metadata_key(&nested.key),
    ];
    want.sort();
    assert_eq!(s3.keys(BUCKET), want);
}

/// Takes one good backup (so that there is something a failure must not delete), then
/// returns the server, the etcd member and the bucket's keys.
async fn one_good_backup() -> (Loopback, EtcdProcess, S3Server, Vec<String>) {
    let net = Loopback::new();
    let etcd = EtcdProcess::start_seed(&net, 1, "seed").await;
    let s3 = S3Server::start(&[BUCKET]);
    let store = store_at(&s3.endpoint(), BUCKET, SECRET_KEY);
    take_backup(&store, &request("prod", vec![etcd.client_url()]))
        .await
        .unwrap();
    let keys = s3.keys(BUCKET);
    assert_eq!(keys.len(), 2, "{keys:?}");
    (net, etcd, s3, keys)
}

async fn failure(store: &BackupStore, endpoints: Vec<String>) -> BackupError {
    match take_backup(store, &request("prod", endpoints)).await {
        Ok(outcome) => panic!("the backup succeeded: {outcome:?}"),
        Err(e) => e,
    }
}

#[actix_rt::test]
async fn bad_credentials_are_reported_as_access_denied_and_nothing_is_deleted() {
    let (_net, etcd, s3, before) = one_good_backup().await;
    let store = store_at(&s3.endpoint(), BUCKET, "not-the-secret");
    let err = failure(&store, vec![etcd.client_url()]).await;
    assert_eq!(err.reason(), "StoreAccessDenied", "{err}");
    assert_eq!(s3.keys(BUCKET), before);
}

#[actix_rt::test]
async fn a_missing_bucket_is_reported_by_name_and_nothing_is_stored() {
    let (_net, etcd, s3, before) = one_good_backup().await;
    let store = store_at(&s3.endpoint(), "no-such-bucket", SECRET_KEY);
    let err = failure(&store, vec![etcd.client_url()]).await;
    assert_eq!(err.reason(), "BucketNotFound", "{err}");
    assert!(err.to_string().contains("no-such-bucket"), "{err}");
    assert_eq!(s3.keys(BUCKET), before);
}

#[actix_rt::test]
async fn an_unreachable_store_is_reported_as_such() {
    let (_net, etcd, mut s3, before) = one_good_backup().await;
    let endpoint = s3.endpoint();
    s3.stop();
    let store = store_at(&endpoint, BUCKET, SECRET_KEY);
    let err = failure(&store, vec![etcd.client_url()]).await;
    assert_eq!(err.reason(), "StoreUnreachable", "{err}");
    assert_eq!(s3.keys(BUCKET), before);
}

#[actix_rt::test]
async fn an_unreachable_cluster_is_reported_as_such_and_nothing_is_stored() {
    let (net, mut etcd, s3, before) = one_good_backup().await;
    etcd.stop();
    let store = store_at(&s3.endpoint(), BUCKET, SECRET_KEY);
    let err = failure(&store, vec![net.client_url(1)]).await;
    assert_eq!(err.reason(), "EtcdUnavailable", "{err}");
    assert_eq!(s3.keys(BUCKET), before);
}

#[actix_rt::test]
async fn a_member_answering_with_another_cluster_id_than_recorded_is_refused_nothing_stored() {
    let (_net, etcd, s3, before) = one_good_backup().await;
    let store = store_at(&s3.endpoint(), BUCKET, SECRET_KEY);
    let recorded: BackupMetadata =
        serde_json::from_slice(&std::fs::read(s3.file(BUCKET, &before[1])).unwrap()).unwrap();
    let actual = u64::from_str_radix(&recorded.cluster_id, 16).unwrap();
    let other = BackupRequest {
        cluster_id: Some(actual ^ 1),
        ..request("prod", vec![etcd.client_url()])
    };
    let err = failure_of(&store, &other).await;
    assert_eq!(err.reason(), "ClusterIDMismatch", "{err}");
    assert!(err.to_string().contains(&recorded.cluster_id), "{err}");
    assert_eq!(s3.keys(BUCKET), before);
    // The recorded ID itself is accepted.
    let same = BackupRequest {
        cluster_id: Some(actual),
        ..request("prod", vec![etcd.client_url()])
    };
    take_backup(&store, &same).await.unwrap();
}

/// The names of the TLS member's cluster: `demo` in `default`.
fn tls_names() -> ClusterNames {
    ClusterNames::new("default", "demo", "")
}

fn an_hour() -> Lifetime {
    Lifetime::starting(jiff::Timestamp::now().as_second() - 60, 3600)
}

/// A client Secret's keys in CoreOS's layout, with a client certificate from `ca`.
fn client_secret(ca: &Ca) -> BTreeMap<String, Vec<u8>> {
    let leaf = issue_leaf(
        ca,
        Role::Client,
        &tls_names(),
        KeyType::EcdsaP256,
        an_hour(),
    )
    .unwrap();
    [
        ("etcd-client.crt", leaf.cert_pem.into_bytes()),
        ("etcd-client.key", leaf.key_pem.into_bytes()),
        ("etcd-client-ca.crt", ca.cert_pem.clone().into_bytes()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// An etcd client over TLS trusting `ca`, presenting the certificate of `secret` if any.
async fn tls_client(
    url: &str,
    ca: &Ca,
    secret: Option<&BTreeMap<String, Vec<u8>>>,
) -> Result<etcd_client::Client, etcd_client::Error> {
    let mut tls = etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(ca.cert_pem.as_bytes()));
    if let Some(secret) = secret {
        tls = tls.identity(etcd_client::Identity::from_pem(
            &secret["etcd-client.crt"],
            &secret["etcd-client.key"],
        ));
    }
    let options = etcd_client::ConnectOptions::new()
        .with_tls(tls)
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(5));
    etcd_client::Client::connect([url], Some(options)).await
}

#[actix_rt::test]
async fn a_tls_member_is_backed_up_with_the_client_certificate_and_refuses_a_client_without_one() {
    let ca = new_ca(&tls_names(), KeyType::EcdsaP256, an_hour()).unwrap();
    let server = issue_leaf(
        &ca,
        Role::Server,
        &tls_names(),
        KeyType::EcdsaP256,
        an_hour(),
    )
    .unwrap();
    let mut member = TlsMember::start("tls1", &server, &ca);
    let secret = client_secret(&ca);
    let url = member.client_url.clone();
    member
        .wait_until(|| {
            let (url, ca, secret) = (url.clone(), ca.clone(), secret.clone());
            async move {
                match tls_client(&url, &ca, Some(&secret)).await {
                    Ok(mut client) => client.status().await.is_ok(),
                    Err(_) => false,
                }
            }
        })
        .await;
    let mut writer = tls_client(&url, &ca, Some(&secret)).await.unwrap();
    let value = "v".repeat(1024);
    for i in 0..300 {
        writer
            .put(format!("key-{i:05}"), value.clone(), None)
            .await
            .unwrap();
    }
    let s3 = S3Server::start(&[BUCKET]);
    let store = store_at(&s3.endpoint(), BUCKET, SECRET_KEY);

    // The Secret passes the operator's checks and becomes the backup's dialer.
    let now = jiff::Timestamp::now().as_second();
    let identity = client_tls::identity("etcd-client-tls", Some(&secret), now).unwrap();
    let tls_request = BackupRequest {
        dialer: Dialer::tls(identity.clone()),
        ..request("demo", vec![url.clone()])
    };
    let outcome = take_backup(&store, &tls_request)
        .await
        .unwrap_or_else(|e| panic!("backup over TLS failed: {e}\n{}", member.log()));
    let stored = std::fs::read(s3.file(BUCKET, &outcome.key)).unwrap();
    assert_eq!(stored.len() as u64, outcome.metadata.size);
    assert_eq!(sha256_hex(&stored), outcome.metadata.sha256);
    // etcd's integrity check of the stored object: pages, then their sha256.
    let mut verifier = SnapshotVerifier::new();
    verifier.update(&stored);
    let verified = verifier.finish().expect("the stored snapshot is whole");
    assert_eq!(verified.sha256, outcome.metadata.sha256);
    assert!(outcome.metadata.revision >= 301, "{:?}", outcome.metadata);
    if let Some(status) = snapshot_status(&s3.file(BUCKET, &outcome.key)) {
        assert!(status["totalKey"].as_u64().unwrap() >= 300, "{status}");
    }

    // Dialed at an address, the member is still verified by the name it is reached by:
    // its cluster DNS name (which its certificate covers) resolves to loopback here.
    let port = url.rsplit_once(':').unwrap().1.to_string();
    let host = "tls1.demo.default.svc";
    let addresses: AddressSource =
        std::sync::Arc::new(move |asked: &str| loopback_for(asked, host));
    let by_address = BackupRequest {
        dialer: Dialer::tls(identity.clone()).with_addresses(addresses),
        ..request("demo", vec![format!("https://{host}:{port}")])
    };
    tokio::time::sleep(Duration::from_millis(5)).await;
    take_backup(&store, &by_address)
        .await
        .expect("backup of a member dialed by address, verified by its name");
    // A name its certificate does not cover is not trusted, whatever the address.
    let other = "tls1.other.default.svc";
    let stranger: AddressSource =
        std::sync::Arc::new(move |asked: &str| loopback_for(asked, other));
    let wrong_name = BackupRequest {
        dialer: Dialer::tls(identity.clone()).with_addresses(stranger),
        ..request("demo", vec![format!("https://{other}:{port}")])
    };
    let before = s3.keys(BUCKET);
    let err = failure_of(&store, &wrong_name).await;
    assert_eq!(err.reason(), "EtcdUnavailable", "{err}");
    assert!(err.to_string().contains("certificate"), "{err}");

    // Without a certificate the backup sends nothing; and etcd refuses a TLS client that
    // trusts it but presents no certificate.
    let plain = request("demo", vec![url.clone()]);
    let err = failure_of(&store, &plain).await;
    assert!(err.to_string().contains("no client certificate"), "{err}");
    let refused = async {
        let mut client = tls_client(&url, &ca, None).await?;
        client.status().await
    };
    let refused = tokio::time::timeout(Duration::from_secs(10), refused).await;
    assert!(
        !matches!(refused, Ok(Ok(_))),
        "etcd answered a client without a certificate"
    );
    // A certificate from another CA: refused by etcd, nothing stored.
    let stranger_ca = new_ca(&tls_names(), KeyType::EcdsaP256, an_hour()).unwrap();
    let mut foreign = client_secret(&stranger_ca);
    foreign.insert(
        "etcd-client-ca.crt".into(),
        ca.cert_pem.clone().into_bytes(),
    );
    let foreign = client_tls::identity("foreign", Some(&foreign), now).unwrap();
    let err = failure_of(
        &store,
        &BackupRequest {
            dialer: Dialer::tls(foreign),
            ..request("demo", vec![url.clone()])
        },
    )
    .await;
    assert_eq!(err.reason(), "EtcdUnavailable", "{err}");
    assert_eq!(s3.keys(BUCKET), before, "a refused backup stored nothing");
}

async fn failure_of(store: &BackupStore, request: &BackupRequest) -> BackupError {
    match take_backup(store, request).await {
        Ok(outcome) => panic!("the backup succeeded: {outcome:?}"),
        Err(e) => e,
    }
}

/// Loopback for the host `name`, any other host by its name.
fn loopback_for(asked: &str, name: &str) -> Route {
    if asked == name {
        Route::Address(std::net::IpAddr::from([127, 0, 0, 1]))
    } else {
        Route::ByName
    }
}
