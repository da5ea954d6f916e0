//! Leader election: a second replica is ready to take over but never acts while the leader
//! holds the Lease, and a leader frozen past its Lease writes nothing once it resumes.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::*;

/// A second operator replica started by a test, with its own HTTP port and log file;
/// stopped (SIGTERM, so it gives its Lease back) when dropped.
struct Replica {
    child: Child,
    identity: String,
    port: u16,
    log: PathBuf,
}

impl Replica {
    fn start(identity: &str, port: u16) -> Self {
        let log = env_dir().join(format!("logs/{identity}.log"));
        let file = std::fs::File::create(&log).expect("replica log file");
        let child = Command::new(env_dir().join("bin/etcd-operator"))
            .args(["run", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--lease-namespace", "etcd-operator"])
            .args(["--identity", identity, "--log-format", "json"])
            .env("KUBECONFIG", env_dir().join("operator.kubeconfig"))
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("a second operator starts");
        Replica {
            child,
            identity: identity.to_string(),
            port,
            log,
        }
    }

    /// HTTP status code of `path` ("000" when nothing listens) and the body.
    fn get(&self, path: &str) -> (String, String) {
        let out = Command::new("curl")
            .args(["-s", "-w", "\n%{http_code}"])
            .arg(format!("http://127.0.0.1:{}{path}", self.port))
            .output()
            .expect("curl runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        (code.to_string(), body.to_string())
    }

    /// Waits until `/readyz` answers 200.
    async fn wait_ready(&self) {
        wait_for(
            "the second replica to be ready",
            Duration::from_secs(60),
            || async {
                match self.get("/readyz") {
                    (code, _) if code == "200" => Ok(()),
                    (code, body) => Err(format!("{code} {body}")),
                }
            },
        )
        .await;
    }

    fn log_lines(&self) -> Vec<serde_json::Value> {
        log_lines(&self.log, 0)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The JSON lines of a log file from byte `offset` on.
fn log_lines(path: &std::path::Path, offset: usize) -> Vec<serde_json::Value> {
    let bytes = std::fs::read(path).unwrap_or_default();
    String::from_utf8_lossy(bytes.get(offset..).unwrap_or_default())
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Log lines that report an action carried out (not one that failed or was refused).
fn actions_done(lines: &[serde_json::Value]) -> Vec<&serde_json::Value> {
    lines
        .iter()
        .filter(|l| l.get("action").is_some())
        .filter(|l| {
            let msg = l["msg"].as_str().unwrap_or_default();
            msg != "action failed" && !msg.starts_with("etcd is not ready")
        })
        .collect()
}

/// Events (events.k8s.io) in `ns` reported by `identity`, with the time each was last
/// observed.
fn events_of(ns: &str, identity: &str) -> Vec<(jiff::Timestamp, String)> {
    let (ok, out) = kubectl(
        &["get", "events.events.k8s.io", "-n", ns, "-o", "json"],
        None,
    );
    assert!(ok, "{out}");
    let list: serde_json::Value = serde_json::from_str(&out).expect("event list");
    let items = list["items"].as_array().cloned().unwrap_or_default();
    items
        .iter()
        .filter(|e| e["reportingInstance"] == identity)
        .filter_map(|e| {
            let last = e["series"]["lastObservedTime"]
                .as_str()
                .or(e["eventTime"].as_str())?;
            let time: jiff::Timestamp = last.parse().ok()?;
            Some((time, format!("{} {}", e["reason"], e["note"])))
        })
        .collect()
}

fn leader_metric(replica: &Replica) -> String {
    let (_, body) = replica.get("/metrics");
    body.lines()
        .find(|l| l.starts_with("etcd_operator_leader "))
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn a_second_operator_replica_stays_standby_while_the_leader_holds_the_lease() {
    let ns = Namespace::create("standby");
    apply(&cluster_yaml(&ns.0, "watched", 1, "3.5.35", false));
    wait_running(&ns.0, "watched", 1, Duration::from_secs(120)).await;
    let leader = lease_holder();
    let standby = Replica::start("e2e-standby", 18099);
    // Ready means able to take over, so a rolling update of two replicas can proceed.
    standby.wait_ready().await;
    patch_spec(&ns.0, "watched", serde_json::json!({"size": 2})).await;
    // Several lease renewal periods, and a change to act on: it must stay standby.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            standby.get("/readyz").0,
            "200",
            "the standby stopped being ready"
        );
        assert_eq!(lease_holder(), leader, "the standby took the lease");
    }
    wait_running(&ns.0, "watched", 2, Duration::from_secs(120)).await;
    assert_eq!(leader_metric(&standby), "etcd_operator_leader 0");
    let (_, actors) = standby.get("/debug/actors");
    let actors: serde_json::Value = serde_json::from_str(&actors).expect("JSON");
    let election = actors
        .as_array()
        .and_then(|a| a.iter().find(|s| s["kind"] == "leader-election"))
        .unwrap_or_else(|| panic!("no leader-election entry: {actors}"));
    assert_eq!(election["state"]["leading"], false, "{election}");
    assert_eq!(election["state"]["holder"], leader.as_str(), "{election}");
    assert!(
        actors.as_array().unwrap().len() == 1,
        "the standby runs actors: {actors}"
    );
    assert_eq!(events_of(&ns.0, &standby.identity), vec![]);
    assert_eq!(
        actions_done(&standby.log_lines()),
        Vec::<&serde_json::Value>::new()
    );
}

/// A process stopped with SIGSTOP; continued when dropped, unless it was already.
struct Stopped {
    pid: i32,
    continued: bool,
}

impl Stopped {
    fn new(pid: i32) -> Self {
        signal(pid, "STOP");
        Stopped {
            pid,
            continued: false,
        }
    }

    fn resume(&mut self) {
        signal(self.pid, "CONT");
        self.continued = true;
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if !self.continued {
            let _ = Command::new("kill")
                .args(["-CONT", &self.pid.to_string()])
                .status();
        }
    }
}

/// The local operator (process `pid`, Lease identity `identity`) is running again and
/// holds the Lease once this is dropped (see [`restore_leader`]).
struct LeaderRestored {
    pid: i32,
    identity: String,
}

impl LeaderRestored {
    fn new() -> Self {
        LeaderRestored {
            pid: local_operator_pid(),
            identity: lease_holder(),
        }
    }
}

impl Drop for LeaderRestored {
    fn drop(&mut self) {
        restore_leader(self.pid, &self.identity);
    }
}

async fn wait_exit(what: &str, pid: i32, timeout: Duration) {
    wait_for(what, timeout, || async move {
        if process_alive(pid) {
            Err(format!("pid {pid} alive"))
        } else {
            Ok(())
        }
    })
    .await;
}

fn log_len(path: &std::path::Path) -> usize {
    std::fs::metadata(path).map_or(0, |m| m.len() as usize)
}

#[tokio::test]
async fn a_leader_frozen_past_its_lease_writes_nothing_after_it_resumes() {
    let ns = Namespace::create("frozen-leader");
    apply(&cluster_yaml(&ns.0, "frozen", 1, "3.5.35", false));
    wait_running(&ns.0, "frozen", 1, Duration::from_secs(120)).await;
    let leader = LeaderRestored::new();
    let mut frozen = Stopped::new(leader.pid);
    let successor = Replica::start("e2e-successor", 18098);
    wait_for(
        "the second replica to take the Lease of the frozen leader",
        Duration::from_secs(90),
        || async {
            match lease_holder() {
                h if h == successor.identity => Ok(()),
                h => Err(format!("held by {h:?}")),
            }
        },
    )
    .await;
    // The successor acts: the frozen leader's caches still say size 1.
    patch_spec(&ns.0, "frozen", serde_json::json!({"size": 2})).await;
    let ready = wait_running(&ns.0, "frozen", 2, Duration::from_secs(120)).await;
    let mut client = etcd(&ns.0, "frozen", &ready).await;
    let members = member_list(&mut client).await;
    let pods = pod_uids(&ns.0);
    let operator_log = env_dir().join("logs/operator.log");
    let log_offset = log_len(&operator_log);
    let resumed_at = jiff::Timestamp::now();

    frozen.resume();
    wait_exit(
        "the resumed leader to exit",
        leader.pid,
        Duration::from_secs(30),
    )
    .await;
    let after = log_lines(&operator_log, log_offset);
    eprintln!("the resumed leader's log: {after:#?}");
    assert_eq!(
        actions_done(&after),
        Vec::<&serde_json::Value>::new(),
        "the resumed leader acted"
    );
    // It stopped on its own clock (its renew deadline had passed), not because an API call
    // happened to tell it another replica holds the Lease.
    assert!(
        after.iter().any(|l| l["msg"] == "stopped leading"
            && l["reason"]
                .as_str()
                .is_some_and(|r| r.contains("renew deadline"))),
        "{after:#?}"
    );
    let late: Vec<_> = events_of(&ns.0, &leader.identity)
        .into_iter()
        .filter(|(time, _)| *time >= resumed_at)
        .collect();
    assert_eq!(late, vec![], "the resumed leader recorded Events");
    // The successor keeps the cluster as it was: nothing to repair.
    tokio::time::sleep(Duration::from_secs(3)).await;
    wait_running(&ns.0, "frozen", 2, Duration::from_secs(30)).await;
    assert_eq!(
        member_list(&mut client).await,
        members,
        "membership changed"
    );
    assert_eq!(pod_uids(&ns.0), pods, "a pod was created or deleted");
}

#[tokio::test]
async fn a_leader_cut_off_from_the_api_server_stops_before_its_lease_could_expire() {
    let leader = LeaderRestored::new();
    let operator_log = env_dir().join("logs/operator.log");
    let log_offset = log_len(&operator_log);
    // Every API call of the leader hangs from now on (connections are accepted by the
    // kernel, never answered). Its last renewal was at most a retry period ago, so its
    // Lease, as another replica sees it, expires at the earliest 15 s from now.
    let mut api_server = Stopped::new(control_plane_pid("kube-apiserver"));
    wait_exit(
        "the leader to stop before its Lease could expire",
        leader.pid,
        Duration::from_secs(15),
    )
    .await;
    api_server.resume();
    let after = log_lines(&operator_log, log_offset);
    assert!(
        after.iter().any(|l| l["msg"] == "stopped leading"),
        "{after:#?}"
    );
}
