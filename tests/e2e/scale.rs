//! Scaling up and down keeps the data.

use std::time::Duration;

use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn scaling_three_to_five_to_three_keeps_every_key() {
    let ns = Namespace::create("scale");
    apply(&cluster_yaml(&ns.0, "scaled", 3, "3.5.35", false));
    let ready = wait_running(&ns.0, "scaled", 3, Duration::from_secs(120)).await;
    let mut client = etcd(&ns.0, &ready).await;
    write_keys(&mut client, "scale", 50).await;

    patch_spec(&ns.0, "scaled", json!({"size": 5})).await;
    let five = wait_running(&ns.0, "scaled", 5, Duration::from_secs(180)).await;
    let mut client = etcd(&ns.0, &five).await;
    let members = member_list(&mut client).await;
    assert_voters(&members, 5);
    assert_keys(&mut client, "scale", 50).await;

    patch_spec(&ns.0, "scaled", json!({"size": 3})).await;
    let three = wait_running(&ns.0, "scaled", 3, Duration::from_secs(120)).await;
    let mut client = etcd(&ns.0, &three).await;
    assert_eq!(member_list(&mut client).await.len(), 3);
    assert_keys(&mut client, "scale", 50).await;
    let removed: Vec<String> = five
        .iter()
        .filter(|m| !three.contains(m))
        .cloned()
        .collect();
    assert_eq!(removed.len(), 2);
    // Their pods go too (deletion is graceful: the pod object lingers while etcd stops).
    let what = "the removed members' pods to be deleted";
    wait_for(what, Duration::from_secs(60), || async {
        let (_, pods) = kubectl(&["get", "pods", "-n", &ns.0, "-o", "name"], None);
        match removed.iter().find(|m| pods.contains(m.as_str())) {
            Some(m) => Err(format!("pod of removed member {m} still there: {pods}")),
            None => Ok(()),
        }
    })
    .await;
}
