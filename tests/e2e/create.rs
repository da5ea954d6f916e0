//! Creating a cluster from a manifest gives a real, healthy etcd cluster.

use std::time::Duration;

use crate::support::*;

#[tokio::test]
async fn applying_a_three_member_cluster_gives_three_started_healthy_members() {
    let ns = Namespace::create("create");
    let stream = DebugStream::follow();
    apply(&cluster_yaml(&ns.0, "trio", 3, "3.5.35", false));
    let ready = wait_running(&ns.0, "trio", 3, Duration::from_secs(120)).await;

    // The debug stream showed the transitions as they happened, ending in Running.
    let transitions = stream.lines_for("e2e-create/trio");
    assert!(
        transitions.iter().any(|t| t["from"] == "Bootstrapping"),
        "{transitions:?}"
    );
    assert_eq!(
        transitions.last().unwrap()["to"],
        "Running",
        "{transitions:?}"
    );

    let mut etcd = etcd(&ns.0, "trio", &ready).await;
    let members = member_list(&mut etcd).await;
    assert_eq!(members.len(), 3, "{members:?}");
    assert!(
        members
            .iter()
            .all(|(_, name, learner)| !name.is_empty() && !learner)
    );
    for member in &ready {
        let mut one = crate::support::etcd(&ns.0, "trio", std::slice::from_ref(member)).await;
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
