//! The gate of a prepared joiner (`etcd-operator await-membership`, the operator's own
//! binary) against real etcd processes: it waits while the cluster does not know the
//! joiner, and exits 0 soon after `member add` registers its peer URL; etcd then joins
//! with the `--initial-cluster` the joiner was prepared with. Over TLS too: on the
//! members' client listener with the operator's client certificate made by the operator's
//! own code (what member pods use), and on their peer listener with a peer certificate;
//! a certificate from another CA is refused, and that gate keeps waiting.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use std::sync::Arc;

use etcd_operator::api::KeyType;
use etcd_operator::etcd_api::{EtcdClientApi, IdentitySource};
use etcd_operator::tls::{Ca, ClientIdentity, ClusterNames, Lifetime, Role, issue_leaf};
use etcd_operator_actors::ports::{EtcdApi, EtcdErrorKind, NewMember};
use support::etcd_process::{EtcdProcess, Loopback, spawn_etcd};
use support::loopback_certs::{self, Pair, leaf};
use support::tls_etcd::{TlsMember, free_port};

/// How long the gate is watched waiting before the member is added.
const WAITING: Duration = Duration::from_millis(1500);
/// How soon after the add the gate must have exited.
const SOON: Duration = Duration::from_secs(3);

/// The operator's binary running `await-membership`; killed when dropped.
struct GateProcess {
    child: Child,
    log: PathBuf,
}

impl GateProcess {
    fn start(dir: &Path, own: &str, peers: &[String], tls: &[String]) -> Self {
        Self::start_asking(dir, own, "--peers", peers, tls)
    }

    /// Asks `urls` given as `flag` (`--peers`, `--endpoints`).
    fn start_asking(dir: &Path, own: &str, flag: &str, urls: &[String], tls: &[String]) -> Self {
        fs::create_dir_all(dir).unwrap();
        let log = dir.join("gate.log");
        let out = fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_etcd-operator"))
            .arg("await-membership")
            .arg(format!("--peer-url={own}"))
            .arg(format!("{flag}={}", urls.join(",")))
            .args(tls)
            .args(["--interval-ms=100", "--timeout-ms=500"])
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("run etcd-operator await-membership");
        GateProcess { child, log }
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its exit status, if it exited within `within`.
    async fn exit_within(&mut self, within: Duration) -> Option<ExitStatus> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if started.elapsed() >= within {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for GateProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "etcd-operator-gate-{}-{name}-{}",
        std::process::id(),
        free_port()
    ));
    let _ = fs::remove_dir_all(&dir);
    dir
}

/// `member add` of `peer_url` as a learner through the operator's own etcd adapter, tried
/// again while etcd says "not yet".
async fn add_learner(endpoint: &str, peer_url: &str) -> u64 {
    add_learner_with(
        EtcdClientApi::new(Duration::from_secs(2)),
        endpoint,
        peer_url,
    )
    .await
}

async fn add_learner_with(api: EtcdClientApi, endpoint: &str, peer_url: &str) -> u64 {
    let new = NewMember {
        peer_url: peer_url.to_string(),
        learner: true,
    };
    for _ in 0..20 {
        match api.add(&[endpoint.to_string()], &new).await {
            Ok(added) => return added.id,
            Err(e) if e.kind == EtcdErrorKind::UnhealthyCluster => {
                tokio::time::sleep(Duration::from_millis(500)).await
            }
            Err(e) => panic!("member add {peer_url}: {e}"),
        }
    }
    panic!("member add {peer_url}: etcd kept refusing it")
}

#[tokio::test]
async fn the_gate_waits_while_the_joiner_is_no_member_and_lets_etcd_join_once_it_is_added() {
    let net = Loopback::new();
    let seed = EtcdProcess::start_seed(&net, 1, "seed").await;
    let own = net.peer_url(2);
    let dir = scratch("plain");
    let mut gate = GateProcess::start(&dir, &own, &[seed.peer_url()], &[]);

    let early = gate.exit_within(WAITING).await;
    assert_eq!(
        early,
        None,
        "the gate let a non-member through:\n{}",
        gate.log()
    );
    assert!(gate.log().contains("not a member yet"), "{}", gate.log());

    add_learner(&seed.client_url(), &own).await;
    let added = Instant::now();
    let status = gate.exit_within(SOON).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "the gate did not exit 0 within {SOON:?} of the add ({status:?}):\n{}",
        gate.log()
    );
    eprintln!("the gate exited {:?} after the add", added.elapsed());

    // etcd starts then, joining what it was prepared with: the seed and itself.
    let initial = format!(
        "{},{}",
        net.cluster_entry("seed", 1),
        net.cluster_entry("joiner", 2)
    );
    let joiner = EtcdProcess::join(&net, 2, "joiner", &initial).await;
    assert_eq!(joiner.name(), "joiner");
    let _ = fs::remove_dir_all(&dir);
}

fn a_ca(name: &str) -> Ca {
    loopback_certs::a_ca("gate", name)
}

/// Writes a peer certificate of `ca` and the CA bundle into `dir` as the peer Secret's
/// keys; returns the gate's TLS flags for them.
fn peer_files(dir: &Path, ca: &Ca, trusted: &Ca) -> Vec<String> {
    fs::create_dir_all(dir).unwrap();
    let Pair { cert, key } = leaf(ca);
    let file = |name: &str, text: &str| {
        let path = dir.join(name);
        fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    vec![
        format!("--cacert={}", file("peer-ca.crt", &trusted.cert_pem)),
        format!("--cert={}", file("peer.crt", &cert)),
        format!("--key={}", file("peer.key", &key)),
    ]
}

/// A one-member cluster whose peer listener speaks TLS and requires a peer certificate
/// from `ca`; clients on plain HTTP (the test adds members through it).
struct TlsPeerSeed {
    client_url: String,
    peer_url: String,
    dir: PathBuf,
    child: Child,
}

impl TlsPeerSeed {
    async fn start(ca: &Ca) -> Self {
        let dir = scratch("tls-seed");
        let flags = peer_files(&dir, ca, ca);
        let path = |flag: &str| flag.split_once('=').unwrap().1.to_string();
        let (client_port, peer_port) = (free_port(), free_port());
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("https://127.0.0.1:{peer_port}");
        let log = fs::File::create(dir.join("etcd.log")).unwrap();
        let args = [
            "--name=seed".to_string(),
            format!("--data-dir={}", dir.join("data").display()),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=seed={peer_url}"),
            "--initial-cluster-state=new".into(),
            "--peer-client-cert-auth=true".into(),
            format!("--peer-trusted-ca-file={}", path(&flags[0])),
            format!("--peer-cert-file={}", path(&flags[1])),
            format!("--peer-key-file={}", path(&flags[2])),
            "--logger=zap".into(),
            "--log-outputs=stderr".into(),
        ];
        let child = spawn_etcd(args, log);
        let mut seed = TlsPeerSeed {
            client_url,
            peer_url,
            dir,
            child,
        };
        seed.wait_ready().await;
        seed
    }

    async fn wait_ready(&mut self) {
        let api = EtcdClientApi::new(Duration::from_secs(1));
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(20) {
            if let Ok(h) = api.status(&self.client_url).await
                && h.leader.is_some_and(|l| l != 0)
            {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("etcd exited ({status}):\n{}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("etcd not ready after 20 s:\n{}", self.log());
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default()
    }
}

impl Drop for TlsPeerSeed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

#[tokio::test]
async fn over_tls_on_the_peer_listener_the_gate_presents_a_peer_certificate_and_exits_once_added() {
    let ca = a_ca("demo");
    let seed = TlsPeerSeed::start(&ca).await;
    let own = format!("https://127.0.0.1:{}", free_port());
    let peers = [seed.peer_url.clone()];
    let dir = scratch("tls-gate");
    let mut gate = GateProcess::start(&dir, &own, &peers, &peer_files(&dir, &ca, &ca));
    // A gate with a certificate from another CA is refused by the peer listener.
    let stranger = a_ca("stranger");
    let other_dir = scratch("tls-stranger");
    let mut refused = GateProcess::start(
        &other_dir,
        &own,
        &peers,
        &peer_files(&other_dir, &stranger, &ca),
    );

    assert_eq!(gate.exit_within(WAITING).await, None, "{}", gate.log());
    assert!(gate.log().contains("not a member yet"), "{}", gate.log());

    add_learner(&seed.client_url, &own).await;
    let status = gate.exit_within(SOON).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "the gate did not exit 0 within {SOON:?} of the add ({status:?}):\n{}",
        gate.log()
    );
    assert_eq!(
        refused.exit_within(Duration::from_millis(500)).await,
        None,
        "a gate whose certificate the members do not trust got through:\n{}",
        refused.log()
    );
    assert!(
        refused.log().contains("no member answers"),
        "{}",
        refused.log()
    );
    let _ = fs::remove_dir_all(&dir);
    let _ = fs::remove_dir_all(&other_dir);
}

fn names() -> ClusterNames {
    ClusterNames::new("default", "demo", "")
}

fn lifetime() -> Lifetime {
    let now = jiff::Timestamp::now().as_second();
    Lifetime::starting(now - 60, 3600)
}

#[tokio::test]
async fn over_tls_on_the_client_listener_the_gate_presents_the_operators_certificate_and_exits_once_added()
 {
    // As in a cluster: the member serves clients with an operator-made server certificate,
    // the gate presents the operator's client certificate (it names nothing, so etcd looks
    // nothing up about the gate's address) and trusts the CA of the server certificates.
    let ca = a_ca("demo");
    let issue = |role| issue_leaf(&ca, role, &names(), KeyType::EcdsaP256, lifetime()).unwrap();
    let (server, client) = (issue(Role::Server), issue(Role::Client));
    let mut member = TlsMember::start("gated", &server, &ca);
    let identity = ClientIdentity {
        ca_pem: ca.cert_pem.clone().into_bytes(),
        cert_pem: client.cert_pem.clone().into_bytes(),
        key_pem: client.key_pem.clone().into_bytes(),
    };
    let source: IdentitySource = Arc::new(move || Some(identity.clone()));
    let api = || EtcdClientApi::new(Duration::from_secs(2)).with_identity(source.clone());
    let url = member.client_url.clone();
    member
        .wait_until(|| {
            let (api, url) = (api(), url.clone());
            async move { api.status(&url).await.is_ok() }
        })
        .await;

    let dir = scratch("tls-client");
    fs::create_dir_all(&dir).unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.join(name);
        fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let tls = [
        format!("--cacert={}", file("etcd-client-ca.crt", &ca.cert_pem)),
        format!("--cert={}", file("etcd-client.crt", &client.cert_pem)),
        format!("--key={}", file("etcd-client.key", &client.key_pem)),
    ];
    let own = format!("https://127.0.0.1:{}", free_port());
    let mut gate =
        GateProcess::start_asking(&dir, &own, "--endpoints", std::slice::from_ref(&url), &tls);

    assert_eq!(gate.exit_within(WAITING).await, None, "{}", gate.log());
    assert!(gate.log().contains("not a member yet"), "{}", gate.log());

    add_learner_with(api(), &url, &own).await;
    let status = gate.exit_within(SOON).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "the gate did not exit 0 within {SOON:?} of the add ({status:?}):\n{}\n{}",
        gate.log(),
        member.log()
    );
    let _ = fs::remove_dir_all(&dir);
}
