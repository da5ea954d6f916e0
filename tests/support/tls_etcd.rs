//! One real etcd member serving clients over TLS on the loopback address, with
//! certificates the operator's own code made (`etcd_operator::tls`).
//!
//! Clients reach it as `https://localhost:<port>`: `localhost` is one of the names an
//! operator-made server certificate covers (the readiness probe's), so clients verify the
//! member by a DNS name, as the operator verifies members by `<member>.<cluster>.<ns>.svc`
//! in a cluster, with no change to the host's resolver. etcd listens on 127.0.0.1 with a
//! free port the test picked; peers speak plain HTTP (one member, nobody to talk to).

use std::fs;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use etcd_operator::tls::{Ca, Leaf, Role};

use super::etcd_process::spawn_etcd;

/// The first port [`free_port`] hands out; the test processes of one run start at
/// different points above it (by their pid), so they seldom try the same ports.
const FIRST_PORT: u16 = 20_000;
/// How many ports above `FIRST_PORT` it may hand out: all of them below 32768, where the
/// kernel's ephemeral range (the source ports of outgoing connections) starts by default.
const PORTS: u16 = 12_000;
static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

/// A free TCP port on 127.0.0.1, below the kernel's ephemeral range: a member stopped and
/// started again on it cannot find it taken by another member's outgoing connection, as
/// it can with a port the kernel chose (`127.0.0.1:0`).
pub fn free_port() -> u16 {
    let start = (std::process::id() % u32::from(PORTS)) as u16;
    for _ in 0..PORTS {
        let offset = NEXT_PORT.fetch_add(1, Ordering::Relaxed);
        let port = FIRST_PORT + start.wrapping_add(offset) % PORTS;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!(
        "no free port on loopback from {FIRST_PORT} to {}",
        FIRST_PORT + PORTS
    );
}

/// An etcd member with TLS on its client port.
pub struct TlsMember {
    /// `https://localhost:<port>`.
    pub client_url: String,
    dir: PathBuf,
    child: Child,
}

impl TlsMember {
    /// Starts a one-member cluster serving `server` (its certificate and key) to clients,
    /// and requiring client certificates signed by `client_ca`.
    pub fn start(name: &str, server: &Leaf, client_ca: &Ca) -> Self {
        let (client_port, peer_port) = (free_port(), free_port());
        // Tests of one process run members of the same name at once: the port tells
        // their directories apart.
        let dir = std::env::temp_dir().join(format!(
            "etcd-operator-tls-test-{}-{name}-{client_port}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("the member's directory");
        let (cert, key, ca) = (
            dir.join(Role::Server.cert_key()),
            dir.join(Role::Server.key_key()),
            dir.join(Role::Server.ca_key()),
        );
        fs::write(&cert, &server.cert_pem).unwrap();
        fs::write(&key, &server.key_pem).unwrap();
        fs::write(&ca, &client_ca.cert_pem).unwrap();
        let peer = format!("http://127.0.0.1:{peer_port}");
        let args = [
            format!("--name={name}"),
            format!("--data-dir={}", dir.join("data").display()),
            format!("--listen-client-urls=https://127.0.0.1:{client_port}"),
            format!("--advertise-client-urls=https://localhost:{client_port}"),
            format!("--listen-peer-urls={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
            format!("--initial-cluster={name}={peer}"),
            "--initial-cluster-state=new".into(),
            "--client-cert-auth=true".into(),
            format!("--trusted-ca-file={}", ca.display()),
            format!("--cert-file={}", cert.display()),
            format!("--key-file={}", key.display()),
            "--logger=zap".into(),
            "--log-outputs=stderr".into(),
        ];
        let log = fs::File::create(dir.join("etcd.log")).unwrap();
        let child = spawn_etcd(args, log);
        TlsMember {
            client_url: format!("https://localhost:{client_port}"),
            dir,
            child,
        }
    }

    /// The end of the member's log.
    pub fn log(&self) -> String {
        let text = fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Waits until `ready` (a TLS call that must succeed) succeeds, for up to 20 s.
    pub async fn wait_until<F, Fut>(&mut self, mut ready: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(20) {
            if ready().await {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("etcd exited ({status}):\n{}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("etcd not ready over TLS after 20 s:\n{}", self.log());
    }
}

impl Drop for TlsMember {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}
