//! Deletion, operator restarts, and an operator stopped in the middle of a join.

use std::time::Duration;

use crate::operator::OperatorStopped;
use crate::support::*;

#[tokio::test]
async fn deleting_the_cluster_garbage_collects_its_pods_and_services() {
    let ns = Namespace::create("delete");
    apply(&cluster_yaml(&ns.0, "doomed", 3, "3.5.35", false));
    wait_running(&ns.0, "doomed", 3, Duration::from_secs(120)).await;
    let (ok, out) = kubectl(&["delete", "etcd", "doomed", "-n", &ns.0], None);
    assert!(ok, "{out}");
    wait_for(
        "pods and services to be garbage-collected",
        Duration::from_secs(90),
        || async {
            let (_, pods) = kubectl(&["get", "pods,services", "-n", &ns.0, "-o", "name"], None);
            if pods.trim().is_empty() || pods.contains("No resources") {
                Ok(())
            } else {
                Err(pods)
            }
        },
    )
    .await;
}

#[tokio::test]
async fn a_restarted_operator_adopts_running_clusters_without_touching_a_member() {
    let ns = Namespace::create("adopt");
    apply(&cluster_yaml(&ns.0, "adopted", 3, "3.5.35", false));
    let ready = wait_running(&ns.0, "adopted", 3, Duration::from_secs(120)).await;
    let mut client = etcd(&ns.0, &ready).await;
    write_keys(&mut client, "adopt", 10).await;
    let members_before = member_list(&mut client).await;
    let pods_before = pod_uids(&ns.0);
    let events_before = event_names(&ns.0, "involvedObject.kind=EtcdCluster");

    drop(OperatorStopped::new().await);
    // Let the new operator tick a few times.
    tokio::time::sleep(Duration::from_secs(8)).await;
    wait_running(&ns.0, "adopted", 3, Duration::from_secs(60)).await;

    assert_eq!(member_list(&mut client).await, members_before);
    assert_eq!(pod_uids(&ns.0), pods_before, "a pod was replaced");
    let events_after = event_names(&ns.0, "involvedObject.kind=EtcdCluster");
    assert_eq!(events_after, events_before, "the restarted operator acted");
    assert_keys(&mut client, "adopt", 10).await;
}

#[tokio::test]
async fn an_operator_stopped_between_member_add_and_pod_start_converges_without_a_second_bootstrap()
{
    let ns = Namespace::create("interrupted");
    apply(&cluster_yaml(&ns.0, "joined", 2, "3.5.35", false));
    let ready = wait_running(&ns.0, "joined", 2, Duration::from_secs(120)).await;
    let mut client = etcd(&ns.0, &ready).await;
    write_keys(&mut client, "interrupted", 10).await;
    let id_before = cluster_id(&mut client).await;

    // Do what the operator does first when it adds a member, then "crash" before the pod.
    let stopped = OperatorStopped::new().await;
    let peer = format!("http://joined-zzzzz.joined.{}.svc:2380", ns.0);
    wait_for(
        "etcd to accept the member add",
        Duration::from_secs(30),
        || {
            let mut client = client.clone();
            let peer = peer.clone();
            async move {
                let learner = Some(etcd_client::MemberAddOptions::new().with_is_learner());
                // etcd refuses adds for a few seconds after a member joined.
                client
                    .member_add([peer], learner)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
        },
    )
    .await;
    patch_spec(&ns.0, "joined", serde_json::json!({"size": 3})).await;
    drop(stopped);

    let after = wait_running(&ns.0, "joined", 3, Duration::from_secs(180)).await;
    let mut client = etcd(&ns.0, &after).await;
    let members = member_list(&mut client).await;
    assert_voters(&members, 3);
    let same_cluster = cluster_id(&mut client).await;
    assert_eq!(same_cluster, id_before, "a second cluster was bootstrapped");
    assert_keys(&mut client, "interrupted", 10).await;
}
