//! A CA rotation done by hand on real etcd processes, the way the operator does it on a
//! cluster: every member restarted one at a time onto a trust bundle of the old and the
//! new CA, then the leaf certificates replaced by ones from the new CA (files rewritten,
//! no restart), then every member restarted onto the new CA alone. At each step the
//! cluster keeps serving; a member restarted with both CAs accepts clients and peers from
//! either; one with the new CA only refuses the old one; and a peer or client with a
//! certificate from no trusted CA, or none, is refused.
//!
//! Three members on 127.0.0.1 with free ports, peers and clients both on TLS with client
//! certificates required. Certificates here name `localhost` and `127.0.0.1`: etcd checks a
//! peer's certificate against the address it connects from.

mod support;

use std::fs;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use etcd_operator::tls::Ca;
use support::etcd_process::spawn_etcd;
use support::loopback_certs::{self, Pair, leaf, self_signed};
use support::peer_probe;
use support::tls_etcd::free_port;

fn a_ca(name: &str) -> Ca {
    loopback_certs::a_ca("rotation", name)
}

fn bundle(cas: &[&Ca]) -> String {
    cas.iter().map(|ca| ca.cert_pem.as_str()).collect()
}

/// One member: its ports, directory and process.
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Member {
    fn new(name: &str) -> Self {
        let (client_port, peer_port) = (free_port(), free_port());
        let dir = std::env::temp_dir().join(format!(
            "etcd-operator-rotation-{}-{name}-{client_port}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Member {
            name: name.into(),
            client_port,
            peer_port,
            dir,
            child: None,
        }
    }

    fn peer_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.peer_port)
    }

    fn client_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.client_port)
    }

    /// Writes its certificate (peer and server alike) and its trust bundle.
    fn write_files(&self, pair: &Pair, trust: Option<&str>) {
        // Written beside, then renamed: a reader sees the old file or the new one.
        let put = |file: &str, text: &str| {
            let tmp = self.dir.join(format!(".{file}.tmp"));
            fs::write(&tmp, text).unwrap();
            fs::rename(&tmp, self.dir.join(file)).unwrap();
        };
        put("tls.key", &pair.key);
        put("tls.crt", &pair.cert);
        if let Some(trust) = trust {
            put("ca.crt", trust);
        }
    }

    fn start(&mut self, initial_cluster: &str) {
        let file = |f: &str| self.dir.join(f).display().to_string();
        let args = [
            format!("--name={}", self.name),
            format!("--data-dir={}", file("data")),
            format!("--listen-client-urls={}", self.client_url()),
            format!("--advertise-client-urls={}", self.client_url()),
            format!("--listen-peer-urls={}", self.peer_url()),
            format!("--initial-advertise-peer-urls={}", self.peer_url()),
            format!("--initial-cluster={initial_cluster}"),
            "--initial-cluster-state=new".into(),
            "--initial-cluster-token=rotation".into(),
            "--client-cert-auth=true".into(),
            format!("--trusted-ca-file={}", file("ca.crt")),
            format!("--cert-file={}", file("tls.crt")),
            format!("--key-file={}", file("tls.key")),
            "--peer-client-cert-auth=true".into(),
            format!("--peer-trusted-ca-file={}", file("ca.crt")),
            format!("--peer-cert-file={}", file("tls.crt")),
            format!("--peer-key-file={}", file("tls.key")),
            "--logger=zap".into(),
            "--log-outputs=stderr".into(),
        ];
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("etcd.log"))
            .unwrap();
        let child = spawn_etcd(args, log);
        self.child = Some(child);
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn log(&self) -> String {
        let text = fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// Whether `pair` (or no certificate) is let through on the peer port: an HTTPS GET
    /// of `/members`, as a member asks another, trusting `ca` for the member's own
    /// certificate.
    fn peer_accepts(&self, pair: Option<&Pair>, ca: &str) -> bool {
        let ca_file = self.dir.join(".probe-ca.crt");
        fs::write(&ca_file, ca).unwrap();
        let mut cmd = peer_probe::status_curl();
        cmd.arg("--cacert").arg(&ca_file);
        if let Some(pair) = pair {
            peer_probe::present(
                &mut cmd,
                &self.dir,
                pair.cert.as_bytes(),
                pair.key.as_bytes(),
            );
        }
        let out = cmd
            .arg(format!("{}/members", self.peer_url()))
            .output()
            .expect("run curl");
        let answered = out.status.success() && String::from_utf8_lossy(&out.stdout) == "200";
        if std::env::var_os("ROTATION_DEBUG").is_some() {
            eprintln!(
                "{} {:?} {} {}",
                self.name,
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        answered
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.stop();
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// A client of `member` presenting `pair`, trusting `ca` (PEM).
async fn client(member: &Member, pair: &Pair, ca: &str) -> Result<Client, etcd_client::Error> {
    let tls = TlsOptions::new()
        .domain_name("localhost")
        .ca_certificate(Certificate::from_pem(ca))
        .identity(Identity::from_pem(&pair.cert, &pair.key));
    let options = ConnectOptions::new()
        .with_tls(tls)
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(3));
    Client::connect([member.client_url()], Some(options)).await
}

/// Whether `member` serves a write from a client presenting `pair`.
async fn writes(member: &Member, pair: &Pair, ca: &str, key: &str) -> bool {
    let attempt = async {
        let mut c = client(member, pair, ca).await?;
        c.put(key, "v", None).await
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(8), attempt).await,
        Ok(Ok(_))
    )
}

/// Waits until `member` serves a write (so it is back in a cluster with quorum).
async fn wait_serving(member: &Member, pair: &Pair, ca: &str) {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        if writes(member, pair, ca, "probe").await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "{} does not serve after 30 s:\n{}",
        member.name,
        member.log()
    );
}

fn cluster() -> (Vec<Member>, String) {
    let members: Vec<Member> = ["m1", "m2", "m3"].into_iter().map(Member::new).collect();
    let initial = members
        .iter()
        .map(|m| format!("{}={}", m.name, m.peer_url()))
        .collect::<Vec<_>>()
        .join(",");
    (members, initial)
}

#[tokio::test]
async fn a_rolling_ca_rotation_keeps_a_real_cluster_serving_peers_and_clients_of_both_cas() {
    let (old, new, stranger) = (a_ca("old"), a_ca("new"), a_ca("stranger"));
    let (both, only_old, only_new) = (bundle(&[&old, &new]), bundle(&[&old]), bundle(&[&new]));
    let (old_client, new_client) = (leaf(&old), leaf(&new));
    let (mut members, initial) = cluster();
    for m in &mut members {
        m.write_files(&leaf(&old), Some(&only_old));
        m.start(&initial);
    }
    for m in &members {
        wait_serving(m, &old_client, &only_old).await;
    }
    assert!(!writes(&members[0], &new_client, &only_old, "k").await);

    // Step one: every member restarted, one at a time, trusting both CAs.
    for i in [1, 2, 0] {
        members[i].stop();
        members[i].write_files(&leaf(&old), Some(&both));
        members[i].start(&initial);
        wait_serving(&members[i], &old_client, &only_old).await;
    }

    // Step two: leaves from the new CA, files rewritten in place, no restart: m2 first.
    // m1, restarted now, must take peers of both CAs (m2 new, m3 old) to serve again.
    members[1].write_files(&leaf(&new), None);
    members[0].stop();
    members[0].start(&initial);
    wait_serving(&members[0], &new_client, &both).await;
    assert!(writes(&members[0], &old_client, &both, "k-old").await);
    assert!(members[0].peer_accepts(Some(&leaf(&old)), &both));
    assert!(members[0].peer_accepts(Some(&leaf(&new)), &both));
    assert!(!members[0].peer_accepts(Some(&leaf(&stranger)), &both));
    assert!(!members[0].peer_accepts(Some(&self_signed()), &both));
    assert!(!members[0].peer_accepts(None, &both));
    for m in &members {
        m.write_files(&leaf(&new), None);
    }
    for m in &members {
        assert!(
            writes(m, &new_client, &only_new, "k-new").await,
            "{}",
            m.log()
        );
    }

    // Step three: every member restarted onto the new CA alone.
    for i in [1, 2, 0] {
        members[i].stop();
        members[i].write_files(&leaf(&new), Some(&only_new));
        members[i].start(&initial);
        wait_serving(&members[i], &new_client, &only_new).await;
    }
    for m in &members {
        assert!(!writes(m, &old_client, &only_new, "refused").await);
        assert!(!m.peer_accepts(Some(&leaf(&old)), &only_new));
        assert!(m.peer_accepts(Some(&leaf(&new)), &only_new));
    }
    let mut c = client(&members[2], &new_client, &only_new).await.unwrap();
    let got = c.get("k-old", None).await.unwrap();
    assert_eq!(got.kvs().len(), 1, "a write of step two is still there");
}

/// The ports members listen on are never ports the kernel picks as the source port of an
/// outgoing connection: a member restarted on its port could otherwise find it taken by
/// another member's connection (`bind: address already in use`, as CI once saw).
#[test]
fn listening_ports_are_taken_below_the_kernels_ephemeral_range() {
    let range = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    let low: u16 = range.split_whitespace().next().unwrap().parse().unwrap();
    for _ in 0..50 {
        let port = free_port();
        assert!(
            port < low,
            "port {port} is in the ephemeral range {range:?}"
        );
    }
}
