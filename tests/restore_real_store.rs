//! Restores from a real S3-compatible server (versitygw) on loopback: a snapshot taken from
//! a real etcd and stored by the backup code is found and verified by the restore's code,
//! fetched by `etcd-operator snapshot-fetch` (what a restoring seed's first init container
//! runs), restored with the real `etcdutl snapshot restore`, put in place by
//! `etcd-operator snapshot-place`, and a real etcd started on it serves every key under a
//! new cluster ID. Corrupted, missing and metadata-less snapshots are refused.
//!
//! etcd 3.4.23 (`/usr/bin/etcd`, or `ETCD_BIN`) is backed up; etcd and etcdutl 3.5 from the
//! project cache (`testkit/env/build/build-binaries.sh etcd`) restore and serve.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use etcd_operator::backup::credentials::S3Credentials;
use etcd_operator::backup::dial::Dialer;
use etcd_operator::backup::metadata::BackupMetadata;
use etcd_operator::backup::naming::metadata_key;
use etcd_operator::backup::run::{BackupRequest, take_backup};
use etcd_operator::backup::store::{BackupStore, Location, StoreConfig, StoreTimeouts};
use etcd_operator::restore::source::{self, Lookup};
use support::etcd_process::{EtcdProcess, Loopback, cached_etcd35, read_keys, write_keys};
use support::s3_server::{ACCESS_KEY, S3Server, SECRET_KEY};

const BUCKET: &str = "backups";
const PREFIX: &str = "etcd/prod";

fn store_at(endpoint: &str, prefix: &str) -> BackupStore {
    let data: BTreeMap<String, Vec<u8>> = [
        ("accessKey".to_string(), ACCESS_KEY.as_bytes().to_vec()),
        ("secretKey".to_string(), SECRET_KEY.as_bytes().to_vec()),
    ]
    .into();
    let config = StoreConfig::S3 {
        location: Location {
            bucket: BUCKET.into(),
            prefix: prefix.into(),
        },
        endpoint: Some(endpoint.into()),
        force_path_style: true,
        credentials: S3Credentials::from_secret(&data).unwrap(),
    };
    BackupStore::open(&config, StoreTimeouts::default()).unwrap()
}

/// A temporary directory of this test, removed on drop unless the test fails.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "etcd-operator-restore-{label}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A Secret as the kubelet mounts it: one file per key.
fn mounted_secret(dir: &Path) -> PathBuf {
    let secret = dir.join("credentials");
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::write(secret.join("accessKey"), ACCESS_KEY).unwrap();
    std::fs::write(secret.join("secretKey"), SECRET_KEY).unwrap();
    secret
}

/// Runs the operator binary's subcommand; its success and what it printed.
fn operator(args: &[String]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_etcd-operator"))
        .args(args)
        .output()
        .expect("run etcd-operator");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `etcd-operator snapshot-fetch` of `metadata`'s snapshot into `out`, as the seed's
/// first init container runs it.
fn fetch_args(
    endpoint: &str,
    metadata: &BackupMetadata,
    credentials: &Path,
    out: &Path,
    data: &Path,
) -> Vec<String> {
    vec![
        "snapshot-fetch".into(),
        format!("--bucket={BUCKET}"),
        format!("--key={}", metadata.key),
        format!("--sha256={}", metadata.sha256),
        format!("--size={}", metadata.size),
        format!("--endpoint={endpoint}"),
        "--force-path-style".into(),
        format!("--credentials={}", credentials.display()),
        format!("--out={}", out.display()),
        format!(
            "--restored-dir={}",
            out.with_file_name("restored").display()
        ),
        format!("--data-dir={}", data.display()),
    ]
}

/// The seed's three init containers on a volume at `dir` whose data directory is `data`:
/// `snapshot-fetch` (checked), etcdutl 3.5 restore as the new cluster's seed `seed`
/// (member 2 of `net`), `snapshot-place`. What the fetch and the place said.
fn restore_steps(
    (net, s3, found): (&Loopback, &S3Server, &BackupMetadata),
    dir: &Path,
    data: &Path,
    seed: &str,
) -> (String, String) {
    let credentials = dir.join("credentials");
    let (fetched, restored) = (dir.join("restore.db"), dir.join("restored"));
    let args = fetch_args(&s3.endpoint(), found, &credentials, &fetched, data);
    let (ok, fetch_said) = operator(&args);
    assert!(ok, "snapshot-fetch failed: {fetch_said}");
    let status = Command::new(cached_etcd35("etcdutl"))
        .args(["snapshot", "restore"])
        .arg(&fetched)
        .arg(format!("--name={seed}"))
        .arg(format!("--initial-cluster={}", net.cluster_entry(seed, 2)))
        .arg(format!("--initial-advertise-peer-urls={}", net.peer_url(2)))
        .arg("--initial-cluster-token=restored-0123456789abcdef")
        .arg(format!("--data-dir={}", restored.display()))
        .status()
        .expect("run etcdutl");
    assert!(status.success(), "etcdutl snapshot restore failed");
    let (ok, place_said) = operator(&[
        "snapshot-place".into(),
        format!("--restored-dir={}", restored.display()),
        format!("--data-dir={}", data.display()),
        format!("--snapshot={}", fetched.display()),
    ]);
    assert!(ok, "snapshot-place failed: {place_said}");
    (fetch_said, place_said)
}

/// Backs up `count` keys of a real etcd into the server; the source member, and the
/// metadata stored.
async fn backed_up(net: &Loopback, s3: &S3Server, count: usize) -> (EtcdProcess, BackupMetadata) {
    let etcd = EtcdProcess::start_seed(net, 1, "source").await;
    write_keys(&etcd.client_url(), count).await;
    let request = BackupRequest {
        writer: None,
        cluster: "prod".into(),
        endpoints: vec![etcd.client_url()],
        dialer: Dialer::plain(),
        cluster_id: None,
        etcd_timeout: Duration::from_secs(3),
        timeout: Duration::from_secs(60),
    };
    let outcome = take_backup(&store_at(&s3.endpoint(), PREFIX), &request)
        .await
        .unwrap_or_else(|e| panic!("backup failed: {e}\n{}", s3.log()));
    (etcd, outcome.metadata)
}

async fn cluster_id(endpoint: &str) -> u64 {
    let mut client = etcd_client::Client::connect([endpoint], None)
        .await
        .unwrap();
    client
        .status()
        .await
        .unwrap()
        .header()
        .unwrap()
        .cluster_id()
}

#[actix_rt::test]
async fn a_stored_snapshot_is_verified_fetched_restored_with_etcdutl_and_served_under_a_new_cluster_id()
 {
    let net = Loopback::new();
    let s3 = S3Server::start(&[BUCKET]);
    let (source_etcd, metadata) = backed_up(&net, &s3, 300).await;
    let source_id = cluster_id(&source_etcd.client_url()).await;

    // The restore controller's part: the prefix names the newest snapshot, whose metadata
    // and bytes verify.
    let lookup = Lookup::of(&format!("{BUCKET}/{PREFIX}"));
    let store = store_at(&s3.endpoint(), lookup.prefix());
    let found = source::resolve(&store, &lookup).await.unwrap();
    assert_eq!(found, metadata);
    source::verify(&store, &found).await.unwrap();

    // The seed's init containers: fetch (checked), etcdutl restore as the new cluster's
    // seed, place.
    let tmp = TempDir::new("ok");
    mounted_secret(&tmp.0);
    let seed = "restored";
    let restored = EtcdProcess::start_on_data(&net, 2, seed, &cached_etcd35("etcd"), |data| {
        let (fetched, _) = restore_steps((&net, &s3, &found), &tmp.0, data, seed);
        assert!(
            fetched.contains(&format!("({} bytes", found.size)),
            "{fetched}"
        );
    })
    .await;
    assert!(
        !tmp.0.join("restore.db").exists(),
        "the fetched file is removed once placed"
    );

    // Every key, at the snapshot's revision or later, under a new cluster ID.
    let (count, last, revision) = read_keys(&restored.client_url()).await;
    assert_eq!((count, last.as_str()), (300, "value-00299"));
    assert!(revision >= found.revision);
    let mut client = etcd_client::Client::connect([restored.client_url()], None)
        .await
        .unwrap();
    let new_id = cluster_id(&restored.client_url()).await;
    assert_ne!(new_id, source_id, "a restore makes a new cluster");
    let members = client.member_list().await.unwrap();
    let names: Vec<&str> = members.members().iter().map(|m| m.name()).collect();
    assert_eq!(names, [seed], "the new cluster's one member is its seed");
}

#[actix_rt::test]
async fn a_corrupted_snapshot_is_refused_by_the_restore_and_by_the_fetch() {
    let net = Loopback::new();
    let s3 = S3Server::start(&[BUCKET]);
    let (_etcd, metadata) = backed_up(&net, &s3, 50).await;
    // Flip one byte of the stored object, in the server's own directory.
    let file = s3.file(BUCKET, &metadata.key);
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&file, &bytes).unwrap();

    let lookup = Lookup::of(&format!("{BUCKET}/{}", metadata.key));
    let store = store_at(&s3.endpoint(), lookup.prefix());
    let found = source::resolve(&store, &lookup).await.unwrap();
    let err = source::verify(&store, &found).await.unwrap_err();
    assert_eq!(err.reason().as_str(), "ChecksumMismatch", "{err}");

    let tmp = TempDir::new("corrupt");
    let credentials = mounted_secret(&tmp.0);
    let out = tmp.0.join("restore.db");
    let data = tmp.0.join("data");
    let (ok, said) = operator(&fetch_args(
        &s3.endpoint(),
        &found,
        &credentials,
        &out,
        &data,
    ));
    assert!(!ok, "a corrupted snapshot was fetched: {said}");
    assert!(
        said.contains("corrupt") || said.contains("sha256"),
        "{said}"
    );
    assert!(!out.exists(), "nothing is left for etcd's tool to restore");
    assert!(!out.with_extension("partial").exists());
}

#[actix_rt::test]
async fn a_missing_snapshot_or_one_without_metadata_is_refused_with_its_reason() {
    let net = Loopback::new();
    let s3 = S3Server::start(&[BUCKET]);
    let (_etcd, metadata) = backed_up(&net, &s3, 10).await;
    let store = store_at(&s3.endpoint(), "");

    let missing = Lookup::of(&format!(
        "{BUCKET}/{PREFIX}/prod_20000101T000000.000Z_r1.db"
    ));
    let err = source::resolve(&store, &missing).await.unwrap_err();
    assert_eq!(err.reason().as_str(), "BackupNotFound", "{err}");
    let empty = Lookup::of(&format!("{BUCKET}/elsewhere"));
    let err = source::resolve(&store_at(&s3.endpoint(), empty.prefix()), &empty)
        .await
        .unwrap_err();
    assert_eq!(err.reason().as_str(), "BackupNotFound", "{err}");

    // Without its metadata a snapshot's checksum is unknown: not used, by name or prefix.
    store.delete(&metadata_key(&metadata.key)).await.unwrap();
    let exact = Lookup::of(&format!("{BUCKET}/{}", metadata.key));
    let err = source::resolve(&store, &exact).await.unwrap_err();
    assert_eq!(err.reason().as_str(), "InvalidMetadata", "{err}");
    let prefix = Lookup::of(&format!("{BUCKET}/{PREFIX}"));
    let err = source::resolve(&store_at(&s3.endpoint(), PREFIX), &prefix)
        .await
        .unwrap_err();
    assert_eq!(err.reason().as_str(), "BackupNotFound", "{err}");
    assert!(err.to_string().contains("no metadata"), "{err}");
}

#[actix_rt::test]
async fn restore_steps_run_again_over_data_in_place_fetch_nothing_and_keep_every_write() {
    let net = Loopback::new();
    let s3 = S3Server::start(&[BUCKET]);
    let (_source, metadata) = backed_up(&net, &s3, 100).await;
    let tmp = TempDir::new("again");
    mounted_secret(&tmp.0);
    let seed = "restored";
    let mut restored = EtcdProcess::start_on_data(&net, 2, seed, &cached_etcd35("etcd"), |data| {
        restore_steps((&net, &s3, &metadata), &tmp.0, data, seed);
    })
    .await;
    let mut client = etcd_client::Client::connect([restored.client_url()], None)
        .await
        .unwrap();
    client
        .put("written-after-the-restore", "kept", None)
        .await
        .unwrap();
    drop(client);

    // A new sandbox after the snapshot and the Secret are gone: the steps run again.
    restored.stop();
    store_at(&s3.endpoint(), "")
        .delete(&metadata.key)
        .await
        .unwrap();
    std::fs::remove_dir_all(tmp.0.join("credentials")).unwrap();
    std::fs::create_dir_all(tmp.0.join("credentials")).unwrap();
    let data = restored.data_dir();
    let (fetched, placed) = restore_steps((&net, &s3, &metadata), &tmp.0, &data, seed);
    assert!(fetched.contains("nothing is fetched"), "{fetched}");
    assert!(placed.contains("stays"), "{placed}");
    let mut beside: Vec<String> = std::fs::read_dir(&tmp.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    beside.sort();
    assert_eq!(beside, ["credentials"], "nothing is left beside the data");

    restored.restart().await;
    let (count, last, _) = read_keys(&restored.client_url()).await;
    assert_eq!((count, last.as_str()), (100, "value-00099"));
    let mut client = etcd_client::Client::connect([restored.client_url()], None)
        .await
        .unwrap();
    let kept = client.get("written-after-the-restore", None).await.unwrap();
    assert_eq!(kept.kvs()[0].value_str().unwrap(), "kept");
}

#[test]
fn the_placeholder_snapshot_restores_with_etcdctl_34_and_etcdutl_35_and_36() {
    let tmp = TempDir::new("placeholder");
    let file = tmp.0.join("placeholder.db");
    std::fs::write(&file, etcd_operator::restore::fetch::PLACEHOLDER).unwrap();
    let etcdctl34 =
        std::env::var_os("ETCDCTL_BIN").map_or_else(|| "/usr/bin/etcdctl".into(), PathBuf::from);
    for (i, tool) in [
        etcdctl34,
        cached_etcd35("etcdutl"),
        support::etcd_process::cached_etcd("v3.6", "etcdutl"),
    ]
    .iter()
    .enumerate()
    {
        let out = Command::new(tool)
            .env("ETCDCTL_API", "3")
            .args(["snapshot", "restore"])
            .arg(&file)
            .args(["--name=m", "--initial-cluster=m=http://m:2380"])
            .arg("--initial-advertise-peer-urls=http://m:2380")
            .arg(format!(
                "--data-dir={}",
                tmp.0.join(format!("r{i}")).display()
            ))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{} refused the placeholder: {}",
            tool.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
