//! Real etcd processes on loopback addresses, for tests that talk to etcd itself.
//!
//! Every test takes a [`Loopback`] network of its own, `127.77.N.0/24`, and runs member `M`
//! on `127.77.N.M` with etcd's usual ports (2379 for clients, 2380 for peers), so tests can
//! run in parallel without port clashes. A member's data directory and log live in a
//! temporary directory; [`EtcdProcess::stop`] and `Drop` kill the process, so none outlives
//! its test. The directory is removed too, unless the test is failing: then its path is
//! printed so the log can be read.
//!
//! The binary is `/usr/bin/etcd` (Debian's `etcd-server`, 3.4) unless `ETCD_BIN` names
//! another.

use std::fs::{self, File};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Second octet of every test address.
const NET_OCTET: u8 = 77;
/// Client port of every member.
const CLIENT_PORT: u16 = 2379;
/// Peer port of every member.
const PEER_PORT: u16 = 2380;
/// How long a member may take to answer after it was started.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

static NEXT_NET: AtomicU32 = AtomicU32::new(0);

/// Starts [`etcd_bin`] with `args`, its output (stdout and stderr) going to `log`.
pub fn spawn_etcd<I, S>(args: I, log: File) -> Child
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    Command::new(etcd_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("a second handle on the log"))
        .stderr(log)
        .spawn()
        .expect("start etcd")
}

/// The etcd binary to run.
pub fn etcd_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("ETCD_BIN") {
        return PathBuf::from(bin);
    }
    let bin = PathBuf::from("/usr/bin/etcd");
    if !bin.exists() {
        panic!(
            "no etcd at {}: install etcd-server: apt-get install etcd-server",
            bin.display()
        );
    }
    bin
}

/// A binary of the cached etcd 3.5 (`etcd`, `etcdctl`, `etcdutl`), as
/// `testkit/env/build/build-binaries.sh etcd` leaves it.
pub fn cached_etcd35(tool: &str) -> PathBuf {
    cached_etcd("v3.5", tool)
}

/// A binary of a cached etcd release series (`v3.5`, `v3.6`).
pub fn cached_etcd(series: &str, tool: &str) -> PathBuf {
    super::cached_tool(&format!("etcd/{series}/bin/{tool}"), "etcd")
}

/// Writes `count` keys `key-NNNNN` = `value-NNNNN` through `endpoint`.
pub async fn write_keys(endpoint: &str, count: usize) {
    let mut client = etcd_client::Client::connect([endpoint], None)
        .await
        .unwrap();
    for i in 0..count {
        client
            .put(format!("key-{i:05}"), format!("value-{i:05}"), None)
            .await
            .unwrap();
    }
}

/// The keys `key-*` read through `endpoint`: how many, the last one's value, and the
/// revision the answer came at.
pub async fn read_keys(endpoint: &str) -> (usize, String, i64) {
    let mut client = etcd_client::Client::connect([endpoint], None)
        .await
        .unwrap();
    let all = client
        .get("key-", Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .unwrap();
    let last = all
        .kvs()
        .last()
        .map(|kv| kv.value_str().unwrap().to_string())
        .unwrap_or_default();
    (all.kvs().len(), last, all.header().unwrap().revision())
}

/// A `/24` of loopback addresses that one test has to itself: `127.77.N.M`.
#[derive(Debug, Clone, Copy)]
pub struct Loopback {
    net: u8,
}

impl Loopback {
    /// Picks a network that no other test of this process uses and whose first members'
    /// ports are free (another test process may be running too).
    pub fn new() -> Self {
        let pid = std::process::id();
        for _ in 0..254 {
            let turn = NEXT_NET.fetch_add(1, Ordering::Relaxed);
            let net = (pid.wrapping_mul(31).wrapping_add(turn) % 254 + 1) as u8;
            let candidate = Loopback { net };
            if (1..=4).all(|m| candidate.ports_free(m)) {
                return candidate;
            }
        }
        panic!("no free loopback network 127.{NET_OCTET}.N.0/24");
    }

    fn ports_free(&self, m: u8) -> bool {
        [CLIENT_PORT, PEER_PORT]
            .iter()
            .all(|port| TcpListener::bind(SocketAddrV4::new(self.ip(m), *port)).is_ok())
    }

    /// Address of member `m`.
    pub fn ip(&self, m: u8) -> Ipv4Addr {
        Ipv4Addr::new(127, NET_OCTET, self.net, m)
    }

    /// Client URL of member `m`.
    pub fn client_url(&self, m: u8) -> String {
        format!("http://{}:{CLIENT_PORT}", self.ip(m))
    }

    /// Peer URL of member `m`: what `member add` registers.
    pub fn peer_url(&self, m: u8) -> String {
        format!("http://{}:{PEER_PORT}", self.ip(m))
    }

    /// One `--initial-cluster` entry: `name=peer URL of member m`.
    pub fn cluster_entry(&self, name: &str, m: u8) -> String {
        format!("{name}={}", self.peer_url(m))
    }

    fn token(&self) -> String {
        format!("etcd-operator-test-{}-{}", std::process::id(), self.net)
    }
}

impl Default for Loopback {
    fn default() -> Self {
        Loopback::new()
    }
}

/// One etcd member running as a child process.
#[derive(Debug)]
pub struct EtcdProcess {
    name: String,
    client_url: String,
    peer_url: String,
    args: Vec<String>,
    dir: PathBuf,
    bin: PathBuf,
    child: Option<Child>,
}

impl EtcdProcess {
    /// Starts the seed of a new one-member cluster as member `m` of `net` and waits until it
    /// has elected itself leader.
    pub async fn start_seed(net: &Loopback, m: u8, name: &str) -> Self {
        Self::start_seed_with(&etcd_bin(), net, m, name).await
    }

    /// [`EtcdProcess::start_seed`] with the etcd binary `bin`.
    pub async fn start_seed_with(bin: &Path, net: &Loopback, m: u8, name: &str) -> Self {
        let initial_cluster = net.cluster_entry(name, m);
        let mut member = Self::spawn_with(bin, net, m, name, &initial_cluster, "new");
        member.wait_ready().await;
        member
    }

    /// Starts member `m` of `net`, added with `member add` under its peer URL
    /// ([`Loopback::peer_url`]), as `--initial-cluster-state existing` with `initial_cluster`
    /// (every member's `name=peer URL`, this one's included). Waits until it answers with a
    /// leader.
    pub async fn join(net: &Loopback, m: u8, name: &str, initial_cluster: &str) -> Self {
        Self::join_with(&etcd_bin(), net, m, name, initial_cluster).await
    }

    /// [`EtcdProcess::join`] with the etcd binary `bin`.
    pub async fn join_with(
        bin: &Path,
        net: &Loopback,
        m: u8,
        name: &str,
        initial_cluster: &str,
    ) -> Self {
        let mut member = Self::spawn_with(bin, net, m, name, initial_cluster, "existing");
        member.wait_ready().await;
        member
    }

    /// Starts the process without waiting for it.
    pub fn spawn(net: &Loopback, m: u8, name: &str, initial_cluster: &str, state: &str) -> Self {
        Self::spawn_with(&etcd_bin(), net, m, name, initial_cluster, state)
    }

    /// [`EtcdProcess::spawn`] with the etcd binary `bin`.
    pub fn spawn_with(
        bin: &Path,
        net: &Loopback,
        m: u8,
        name: &str,
        initial_cluster: &str,
        state: &str,
    ) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "etcd-operator-test-{}-{}-{name}",
            std::process::id(),
            net.ip(m)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create the member's temporary directory");
        let client_url = net.client_url(m);
        let peer_url = net.peer_url(m);
        let args: Vec<String> = [
            "--name",
            name,
            "--data-dir",
            &dir.join("data").to_string_lossy(),
            "--listen-client-urls",
            &client_url,
            "--advertise-client-urls",
            &client_url,
            "--listen-peer-urls",
            &peer_url,
            "--initial-advertise-peer-urls",
            &peer_url,
            "--initial-cluster",
            initial_cluster,
            "--initial-cluster-state",
            state,
            "--initial-cluster-token",
            &net.token(),
            "--heartbeat-interval",
            "50",
            "--election-timeout",
            "500",
            "--logger",
            "zap",
            "--log-outputs",
            "stderr",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut member = EtcdProcess {
            name: name.to_string(),
            client_url,
            peer_url,
            args,
            dir,
            bin: bin.to_path_buf(),
            child: None,
        };
        member.launch();
        member
    }

    /// Starts member `m` of `net` named `name` with the etcd binary `bin` on a data
    /// directory made beforehand by `make_data` (given the path it must create, inside the
    /// member's temporary directory): a member restored from a snapshot. Waits until it
    /// answers with a leader.
    pub async fn start_on_data(
        net: &Loopback,
        m: u8,
        name: &str,
        bin: &Path,
        make_data: impl FnOnce(&Path),
    ) -> Self {
        let mut member = Self::spawn(net, m, name, &net.cluster_entry(name, m), "new");
        member.stop();
        let data = member.dir.join("data");
        let _ = fs::remove_dir_all(&data);
        make_data(&data);
        member.bin = bin.to_path_buf();
        member.launch();
        member.wait_ready().await;
        member
    }

    fn launch(&mut self) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open the member's log file");
        let stderr = log.try_clone().expect("clone the log file handle");
        let child = Command::new(&self.bin)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.bin.display()));
        self.child = Some(child);
    }

    /// The command line it runs with.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// Member name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The member's client URL.
    pub fn client_url(&self) -> String {
        self.client_url.clone()
    }

    /// The member's peer URL.
    pub fn peer_url(&self) -> String {
        self.peer_url.clone()
    }

    /// Where the process writes its output.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("etcd.log")
    }

    /// The last lines of the member's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(self.log_path()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The process is running.
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Waits until the member answers a status call and knows a leader; panics with the
    /// log's tail if it does not within 20 s or if the process exits.
    pub async fn wait_ready(&mut self) {
        let started = Instant::now();
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_millis(500))
            .with_timeout(Duration::from_millis(500));
        let mut last = String::from("not tried");
        while started.elapsed() < READY_TIMEOUT {
            let attempt = async {
                let mut client =
                    etcd_client::Client::connect([&self.client_url], Some(options.clone())).await?;
                client.status().await
            };
            match tokio::time::timeout(Duration::from_secs(1), attempt).await {
                Ok(Ok(status)) if status.leader() != 0 => return,
                Ok(Ok(_)) => last = "answered without a leader".to_string(),
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => last = "status timed out".to_string(),
            }
            if !self.is_running() {
                panic!(
                    "etcd member {} exited while starting; log {}:\n{}",
                    self.name,
                    self.log_path().display(),
                    self.log_tail(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "etcd member {} not ready after {READY_TIMEOUT:?} ({last}); log {}:\n{}",
            self.name,
            self.log_path().display(),
            self.log_tail(30)
        );
    }

    /// Suspends the process (SIGSTOP): its sockets stay open but it answers nothing, like
    /// a member on a hung node. [`EtcdProcess::stop`] still kills it.
    /// Returns once every thread of the process is stopped: the kernel stops a thread
    /// only when it next leaves the kernel, so `kill` returning proves nothing yet.
    pub fn freeze(&self) {
        self.signal("-STOP");
        let pid = self.child.as_ref().expect("frozen above").id();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !all_threads_stopped(pid) {
            assert!(
                Instant::now() < deadline,
                "etcd member {} (pid {pid}) did not stop within 5 s of SIGSTOP",
                self.name
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Resumes a frozen process (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let Some(child) = &self.child else {
            panic!("etcd member {} is not running", self.name);
        };
        let status = Command::new("kill")
            .arg(signal)
            .arg(child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {} failed", child.id());
    }

    /// Kills the process (SIGKILL) and reaps it; the data directory stays, so
    /// [`EtcdProcess::restart`] can bring the member back.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the stopped member again on its data directory and waits until it is ready.
    pub async fn restart(&mut self) {
        self.stop();
        self.launch();
        self.wait_ready().await;
    }

    /// Stops the member, then starts it again on its data directory with the command
    /// line `args` instead of its own (as a new pod of the same member would), and waits
    /// until it is ready.
    pub async fn relaunch_with(&mut self, args: Vec<String>) {
        self.stop();
        self.args = args;
        self.launch();
        self.wait_ready().await;
    }

    /// Stops the member, then starts it again on its data directory with the command
    /// line `args`, without waiting for it (it may not come up).
    pub fn relaunch_without_waiting(&mut self, args: Vec<String>) {
        self.stop();
        self.args = args;
        self.launch();
    }

    /// The member's data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The member's temporary directory (data and log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!(
                "etcd member {} kept its directory for inspection: {}",
                self.name,
                self.dir.display()
            );
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Whether every thread of process `pid` is in the stopped state (`T` in its stat line).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        fs::read_to_string(task.path().join("stat"))
            .ok()
            .and_then(|stat| {
                // The state follows the command name, which is in parentheses.
                let after = stat.rsplit_once(')')?.1;
                after.split_whitespace().next().map(|state| state == "T")
            })
            .unwrap_or(false)
    })
}
