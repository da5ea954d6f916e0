//! Creating a cluster from a manifest gives a real, healthy etcd cluster.

use std::time::Duration;

use crate::operator::{DebugStream, leader};
use crate::support::*;

#[tokio::test]
async fn applying_a_three_member_cluster_gives_three_started_healthy_members() {
    let ns = Namespace::create("create");
    let stream = DebugStream::follow().await;
    apply(&cluster_yaml(&ns.0, "trio", 3, "3.5.35", false));
    let ready = wait_running(&ns.0, "trio", 3, Duration::from_secs(120)).await;

    // The debug stream showed the transitions as they happened, ending in Running. The
    // status is written before the tick's transition reaches the stream (and the log), and
    // the line then crosses HTTP to this test: wait for it rather than read once.
    let transitions = wait_for(
        "the debug stream's transition of e2e-create/trio to Running",
        Duration::from_secs(10),
        || {
            let transitions = stream.lines_for("e2e-create/trio");
            async move { ends_in_running(transitions) }
        },
    )
    .await;
    assert!(
        transitions.iter().any(|t| t["from"] == "Bootstrapping"),
        "{transitions:?}"
    );

    // So did the leader's log (`kubectl logs`): one line per transition.
    let leader = leader().await;
    let logged = wait_for(
        "the leader's logged transition of e2e-create/trio to Running",
        Duration::from_secs(10),
        || {
            let logged: Vec<_> = leader
                .log()
                .into_iter()
                .filter(|l| l["msg"] == "state transition" && l["cluster"] == "e2e-create/trio")
                .collect();
            async move { ends_in_running(logged) }
        },
    )
    .await;
    assert!(
        logged.iter().any(|l| l["from"] == "Bootstrapping"),
        "{logged:#?}"
    );

    let mut etcd = etcd(&ns.0, &ready).await;
    let members = member_list(&mut etcd).await;
    assert_voters(&members, 3);
    for member in &ready {
        let mut one = crate::support::etcd(&ns.0, std::slice::from_ref(member)).await;
        one.status().await.expect("every member answers its status");
    }
    write_keys(&mut etcd, "create", 20).await;
    assert_keys(&mut etcd, "create", 20).await;

    let (_, events) = kubectl(&["get", "events", "-n", &ns.0], None);
    assert!(
        events.contains("SeedCreated") && events.contains("MemberAdded"),
        "{events}"
    );
}

/// The transition records when the last one goes to `Running`, else what they are.
fn ends_in_running(records: Vec<serde_json::Value>) -> Result<Vec<serde_json::Value>, String> {
    match records.last() {
        Some(last) if last["to"] == "Running" => Ok(records),
        _ => Err(format!("{records:?}")),
    }
}
