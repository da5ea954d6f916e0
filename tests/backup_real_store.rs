//! Backups of real etcd processes into a real S3-compatible server (versitygw), both on
//! loopback: the snapshot streamed, stored, verified and described; retention; failures
//! reported with a reason and nothing deleted.

mod support;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use etcd_operator::backup::credentials::S3Credentials;
use etcd_operator::backup::dial::Dialer;
use etcd_operator::backup::integrity::sha256_hex;
use etcd_operator::backup::metadata::BackupMetadata;
use etcd_operator::backup::naming::{BackupName, metadata_key};
use etcd_operator::backup::run::{BackupError, BackupRequest, retain, take_backup};
use etcd_operator::backup::store::{BackupStore, Location, StoreConfig, StoreTimeouts};
use support::etcd_process::{EtcdProcess, Loopback};
use support::s3_server::{ACCESS_KEY, S3Server, SECRET_KEY};

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
    let config = StoreConfig::S3 {
        location: Location {
            bucket: bucket.into(),
            prefix: PREFIX.into(),
        },
        endpoint: Some(endpoint.into()),
        force_path_style: true,
        credentials: credentials(secret_key),
    };
    BackupStore::open(&config, quick()).unwrap()
}

fn request(cluster: &str, endpoints: Vec<String>) -> BackupRequest {
    BackupRequest {
        cluster: cluster.into(),
        endpoints,
        dialer: Dialer::plain(),
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
        let retention = retain(&store, "prod", 2, &outcome.key).await;
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
