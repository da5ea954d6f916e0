//! Leader election: a second replica waits on the Lease and never acts.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

#[tokio::test]
async fn a_second_operator_replica_stays_standby_while_the_leader_holds_the_lease() {
    let binary = env_dir().join("bin/etcd-operator");
    let mut standby = Command::new(binary)
        .args([
            "run",
            "--listen",
            "127.0.0.1:18099",
            "--lease-namespace",
            "etcd-operator",
        ])
        .args(["--identity", "e2e-standby", "--log-format", "json"])
        .env("KUBECONFIG", env_dir().join("operator.kubeconfig"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("a second operator starts");
    let readyz = || async {
        let out = Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "http://127.0.0.1:18099/readyz",
            ])
            .output()
            .map_err(|e| e.to_string())?;
        Ok::<String, String>(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let first = wait_for(
        "the standby to serve HTTP",
        Duration::from_secs(30),
        || async {
            match readyz().await? {
                code if code == "000" => Err("not listening yet".to_string()),
                code => Ok(code),
            }
        },
    )
    .await;
    assert_eq!(
        first, "503",
        "the second replica is ready while the leader lives"
    );
    // Several lease renewal periods: it must stay standby the whole time.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let code = readyz().await.unwrap();
        assert_eq!(
            code, "503",
            "the second replica became ready while the leader lives"
        );
    }
    let (_, lease) = kubectl(
        &[
            "get",
            "lease",
            "etcd-operator",
            "-n",
            "etcd-operator",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
        None,
    );
    assert_ne!(lease, "e2e-standby");
    let _ = standby.kill();
    let _ = standby.wait();
}
