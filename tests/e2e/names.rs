//! Names and ownership: clusters whose object names collide never share an object, a
//! recreated cluster never adopts its predecessor's pods, the longest allowed name runs,
//! and a name refused only by the operator (an object older than the CRD's rule) blocks
//! the cluster quietly.

use std::time::Duration;

use etcd_operator::api::names::max_name_len;
use tokio::time::sleep;

use crate::support::*;

/// `jsonpath` of one object, trimmed.
fn get(ns: &str, what: &str, path: &str) -> String {
    let (ok, out) = kubectl(
        &["get", what, "-n", ns, "-o", &format!("jsonpath={path}")],
        None,
    );
    assert!(ok, "{out}");
    out.trim().to_string()
}

fn uid_of(ns: &str, cluster: &str) -> String {
    get(ns, &format!("etcd/{cluster}"), "{.metadata.uid}")
}

/// How many times Events of `reason` were reported about object `name` (an Event that
/// was repeated counts each time).
fn occurrences(ns: &str, name: &str, selector: &str) -> u32 {
    let (ok, out) = kubectl(
        &[
            "get",
            "events",
            "-n",
            ns,
            "--field-selector",
            &format!("involvedObject.name={name},{selector}"),
            "-o",
            "jsonpath={range .items[*]}{.count}/{.series.count};{end}",
        ],
        None,
    );
    assert!(ok, "{out}");
    out.split(';')
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            e.split('/')
                .filter_map(|n| n.parse::<u32>().ok())
                .max()
                .unwrap_or(1)
                .max(1)
        })
        .sum()
}

/// Names of the objects of `kinds` in `ns`.
fn names_of(ns: &str, kinds: &str) -> Vec<String> {
    let (ok, out) = kubectl(&["get", kinds, "-n", ns, "-o", "name"], None);
    assert!(ok, "{out}");
    let mut names: Vec<String> = out
        .lines()
        .filter(|l| l.contains('/'))
        .map(str::to_string)
        .collect();
    names.sort();
    names
}

async fn wait_blocked(ns: &str, name: &str, reason: &str) -> String {
    let status = wait_status(
        ns,
        name,
        &format!("{ns}/{name} Blocked with {reason}"),
        Duration::from_secs(60),
        |s| s.phase == "Blocked" && s.reason == reason,
    )
    .await;
    status.message
}

/// `first` runs; `second`, whose Services collide with it on `service`, is then
/// blocked with one NameConflict Event and leaves `first` untouched.
async fn second_of_two_colliding_clusters_is_blocked(ns: &str, first: &str, second: &str) {
    apply(&cluster_yaml(ns, first, 1, "3.5.35", false));
    let ready = wait_running(ns, first, 1, Duration::from_secs(120)).await;
    let mut client = etcd(ns, &ready).await;
    write_keys(&mut client, "names", 10).await;
    let first_uid = uid_of(ns, first);
    let pods_before = pod_uids(ns);
    let services_before = names_of(ns, "services");

    apply(&cluster_yaml(ns, second, 1, "3.5.35", false));
    let message = wait_blocked(ns, second, "NameConflict").await;
    assert!(
        message.contains("Service foo-client") && message.contains(&format!("EtcdCluster {first}")),
        "the message does not name the Service and its owner: {message}"
    );
    // Let a few ticks pass: the block is reported once, and nothing is created.
    sleep(Duration::from_secs(6)).await;
    let message = wait_blocked(ns, second, "NameConflict").await;
    assert!(message.contains(&first_uid), "{message}");
    assert_eq!(occurrences(ns, second, "reason=NameConflict"), 1);
    assert_eq!(pod_uids(ns), pods_before, "a pod was created or replaced");
    assert_eq!(names_of(ns, "services"), services_before);

    // The colliding Service is still the first cluster's and still selects its pods.
    let owner = get(
        ns,
        "service/foo-client",
        "{.metadata.ownerReferences[*].uid}",
    );
    assert_eq!(owner, first_uid);
    let selected = get(ns, "service/foo-client", "{.spec.selector.etcd_cluster}");
    assert_eq!(selected, first);
    assert_eq!(
        wait_running(ns, first, 1, Duration::from_secs(30)).await,
        ready
    );
    assert_keys(&mut client, "names", 10).await;
}

#[tokio::test]
async fn a_cluster_named_like_another_clusters_client_service_is_blocked_with_name_conflict() {
    let ns = Namespace::create("names-foo-first");
    second_of_two_colliding_clusters_is_blocked(&ns.0, "foo", "foo-client").await;
}

#[tokio::test]
async fn a_cluster_whose_client_service_is_another_clusters_headless_service_is_blocked() {
    let ns = Namespace::create("names-foo-client-first");
    second_of_two_colliding_clusters_is_blocked(&ns.0, "foo-client", "foo").await;
}

#[tokio::test]
async fn two_colliding_clusters_applied_together_leave_one_running_and_the_other_blocked_sharing_nothing()
 {
    let ns = Namespace::create("names-together");
    let ns = ns.0.as_str();
    // `foo-client` is both `foo`'s client Service and `foo-client`'s headless one: which
    // cluster gets it depends on whose POST comes first.
    apply(&format!(
        "{}---\n{}",
        cluster_yaml(ns, "foo", 1, "3.5.35", false),
        cluster_yaml(ns, "foo-client", 1, "3.5.35", false)
    ));
    let phase = |name: &str| get(ns, &format!("etcd/{name}"), "{.status.phase}");
    until("one of the two clusters blocked", || {
        phase("foo") == "Blocked" || phase("foo-client") == "Blocked"
    })
    .await;
    let (blocked, running) = if phase("foo") == "Blocked" {
        ("foo", "foo-client")
    } else {
        ("foo-client", "foo")
    };
    wait_blocked(ns, blocked, "NameConflict").await;
    let ready = wait_running(ns, running, 1, Duration::from_secs(120)).await;
    let mut client = etcd(ns, &ready).await;
    write_keys(&mut client, "together", 10).await;
    assert_eq!(
        get(
            ns,
            "service/foo-client",
            "{.metadata.ownerReferences[*].uid}"
        ),
        uid_of(ns, running)
    );
    // Nothing is shared: `foo-client` losing its headless Service never had a pod; `foo`
    // losing its client Service may have started its seed, a pod of its own that the
    // other cluster's Services do not select.
    let selector = format!("etcd_cluster={blocked}");
    let (ok, owners) = kubectl(
        &[
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            &selector,
            "-o",
            "jsonpath={range .items[*]}{.metadata.ownerReferences[*].uid} {end}",
        ],
        None,
    );
    assert!(ok, "{owners}");
    let owners: Vec<&str> = owners.split_whitespace().collect();
    if blocked == "foo-client" {
        assert!(owners.is_empty(), "{blocked} has pods without its Service");
    }
    let blocked_uid = uid_of(ns, blocked);
    assert!(owners.iter().all(|o| *o == blocked_uid), "{owners:?}");
    // The running cluster's Services select its own pods only.
    let mut endpoints = String::new();
    for service in [running.to_string(), format!("{running}-client")] {
        let out = endpoint_slices(
            ns,
            &format!("kubernetes.io/service-name={service}"),
            "jsonpath={range .items[*]}{.endpoints[*].targetRef.name} {end}",
        );
        endpoints.push_str(&out);
        endpoints.push(' ');
    }
    assert!(
        endpoints
            .split_whitespace()
            .all(|pod| ready.iter().any(|r| r == pod)),
        "{running}'s Service selects {endpoints}, not only {ready:?}"
    );
    assert_eq!(
        get(ns, &format!("etcd/{blocked}"), "{.status.phase}"),
        "Blocked"
    );
}

#[tokio::test]
async fn a_users_service_named_like_the_client_service_blocks_the_cluster_until_deleted() {
    let ns = Namespace::create("names-user-service");
    let (ok, out) = kubectl(
        &[
            "create",
            "service",
            "clusterip",
            "bar-client",
            "--tcp=2379:2379",
            "-n",
            &ns.0,
        ],
        None,
    );
    assert!(ok, "{out}");
    apply(&cluster_yaml(&ns.0, "bar", 1, "3.5.35", false));
    let message = wait_blocked(&ns.0, "bar", "NameConflict").await;
    assert!(
        message.contains("Service bar-client") && message.contains("not managed by etcd-operator"),
        "{message}"
    );
    sleep(Duration::from_secs(6)).await;
    assert_eq!(occurrences(&ns.0, "bar", "reason=NameConflict"), 1);
    assert!(pod_uids(&ns.0).is_empty(), "a pod was created");

    let (ok, out) = kubectl(&["delete", "service", "bar-client", "-n", &ns.0], None);
    assert!(ok, "{out}");
    let ready = wait_running(&ns.0, "bar", 1, Duration::from_secs(120)).await;
    let owner = get(
        &ns.0,
        "service/bar-client",
        "{.metadata.ownerReferences[*].uid}",
    );
    assert_eq!(owner, uid_of(&ns.0, "bar"));
    let mut client = etcd(&ns.0, &ready).await;
    write_keys(&mut client, "bar", 10).await;
    assert_keys(&mut client, "bar", 10).await;
}

/// Waits until `name` (the object with `uid`) is Running with `size` members, failing at
/// once if one of its members is an `old` pod or it is blocked with AllMembersLost.
async fn wait_fresh_running(ns: &str, name: &str, uid: &str, size: usize, old: &[String]) {
    let api = clusters(ns).await;
    wait_for(
        "the re-applied cluster to run new members",
        Duration::from_secs(120),
        || {
            let api = api.clone();
            async move {
                let c = api.get(name).await.map_err(|e| e.to_string())?;
                assert_eq!(c.metadata.uid.as_deref(), Some(uid));
                let s = c.status.unwrap_or_default();
                let members = || s.members.ready.iter().chain(&s.members.unready);
                assert!(
                    !members().any(|m| old.contains(m)) && s.reason != "AllMembersLost",
                    "the new cluster took the old one's members: {} {:?}: {}",
                    s.reason,
                    s.members,
                    s.message
                );
                if s.phase == "Running" && s.members.ready.len() == size {
                    Ok(())
                } else {
                    let state = format!("{} {} {:?}: {}", s.phase, s.reason, s.members, s.message);
                    Err(state)
                }
            }
        },
    )
    .await;
}

/// Gives `pods` a second owner, ConfigMap `hold`: the garbage collector then keeps them
/// running after their EtcdCluster is deleted (it only drops the reference to the deleted
/// owner) until `hold` is deleted, however slow or fast it is.
fn hold_pods(ns: &str, pods: &[String]) {
    let (ok, out) = kubectl(&["create", "configmap", "hold", "-n", ns], None);
    assert!(ok, "{out}");
    let uid = get(ns, "configmap/hold", "{.metadata.uid}");
    let owner = format!(
        r#"[{{"op":"add","path":"/metadata/ownerReferences/-","value":{{"apiVersion":"v1","kind":"ConfigMap","name":"hold","uid":"{uid}"}}}}]"#
    );
    for pod in pods {
        let args = ["patch", "pod", pod, "-n", ns, "--type=json", "-p", &owner];
        let (ok, out) = kubectl(&args, None);
        assert!(ok, "{out}");
    }
}

/// The uids of the owners of every pod in `ns`.
fn pod_owner_uids(ns: &str) -> Vec<String> {
    let path = "{range .items[*]}{.metadata.ownerReferences[*].uid} {end}";
    get(ns, "pods", path)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn a_cluster_deleted_and_applied_again_at_once_starts_afresh_without_the_old_pods() {
    let ns = Namespace::create("names-again");
    let yaml = cluster_yaml(&ns.0, "again", 3, "3.5.35", false);
    apply(&yaml);
    let old = wait_running(&ns.0, "again", 3, Duration::from_secs(120)).await;
    let mut client = etcd(&ns.0, &old).await;
    write_keys(&mut client, "old", 10).await;
    let old_uid = uid_of(&ns.0, "again");
    hold_pods(&ns.0, &old);

    let (ok, out) = kubectl(&["delete", "etcd", "again", "-n", &ns.0], None);
    assert!(ok, "{out}");
    apply(&yaml);
    let new_uid = uid_of(&ns.0, "again");
    assert_ne!(new_uid, old_uid);

    wait_fresh_running(&ns.0, "again", &new_uid, 3, &old).await;
    let pods = names_of(&ns.0, "pods");
    assert!(
        old.iter().all(|p| pods.contains(&format!("pod/{p}"))),
        "the old pods were gone before the new cluster ran: {pods:?}"
    );
    let ready = wait_running(&ns.0, "again", 3, Duration::from_secs(60)).await;

    // The old pods go; the new cluster does not notice.
    let (ok, out) = kubectl(&["delete", "configmap", "hold", "-n", &ns.0], None);
    assert!(ok, "{out}");
    wait_for(
        "the old pods to be collected",
        Duration::from_secs(60),
        || {
            let uids = pod_owner_uids(&ns.0);
            let only_new = uids.len() == 3 && uids.iter().all(|u| *u == new_uid);
            async move {
                if only_new {
                    Ok(())
                } else {
                    Err(format!("{uids:?}"))
                }
            }
        },
    )
    .await;
    assert_eq!(
        wait_running(&ns.0, "again", 3, Duration::from_secs(30)).await,
        ready
    );
    let mut client = etcd(&ns.0, &ready).await;
    let old_keys = client
        .get("old/", Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .expect("get");
    assert!(
        old_keys.kvs().is_empty(),
        "the new cluster holds the old data"
    );
    write_keys(&mut client, "new", 10).await;
    assert_keys(&mut client, "new", 10).await;
    let lost = format!("involvedObject.uid={new_uid},reason=AllMembersLost");
    assert_eq!(event_names(&ns.0, &lost), Vec::<String>::new());
}

#[tokio::test]
async fn a_cluster_with_the_longest_allowed_name_runs() {
    let ns = Namespace::create("names-longest");
    let name = format!("long{}", "x".repeat(max_name_len() - 4));
    apply(&cluster_yaml(&ns.0, &name, 1, "3.5.35", false));
    let ready = wait_running(&ns.0, &name, 1, Duration::from_secs(120)).await;
    let client_service = format!("service/{name}-client");
    assert_eq!(client_service.len() - "service/".len(), 63);
    assert!(names_of(&ns.0, "services").contains(&client_service));
    let mut client = etcd(&ns.0, &ready).await;
    write_keys(&mut client, "long", 10).await;
    assert_keys(&mut client, "long", 10).await;
}

/// Puts the committed CRD (with its name rule) back when dropped.
struct CrdRestored;

impl Drop for CrdRestored {
    fn drop(&mut self) {
        let crd = root().join("manifests/10-crd.yaml");
        let (ok, out) = kubectl(&["apply", "-f", crd.to_str().unwrap()], None);
        assert!(ok, "restoring the CRD: {out}");
    }
}

/// `kubectl apply --dry-run=server` of a cluster named `name` succeeds.
fn accepted(ns: &str, name: &str) -> bool {
    let yaml = cluster_yaml(ns, name, 1, "3.5.35", false);
    kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(&yaml)).0
}

async fn until(what: &str, check: impl Fn() -> bool) {
    let check = &check;
    wait_for(what, Duration::from_secs(30), || async move {
        if check() {
            Ok(())
        } else {
            Err("not yet".to_string())
        }
    })
    .await;
}

/// Creates clusters named `names` as they could be before the CRD had its name rule;
/// the rule is back when this returns.
async fn create_before_the_rule(ns: &str, names: &[String]) {
    let restored = CrdRestored;
    let (ok, out) = kubectl(
        &[
            "patch",
            "crd",
            "etcdclusters.etcd.database.coreos.com",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/spec/versions/0/schema/openAPIV3Schema/x-kubernetes-validations"}]"#,
        ],
        None,
    );
    assert!(ok, "{out}");
    until("the CRD without its name rule", || accepted(ns, &names[0])).await;
    for name in names {
        apply(&cluster_yaml(ns, name, 1, "3.5.35", false));
    }
    drop(restored);
    until("the CRD with its name rule", || !accepted(ns, "other.etcd")).await;
}

#[tokio::test]
async fn clusters_named_before_the_name_rule_existed_are_blocked_with_invalid_name_once() {
    let ns = Namespace::create("names-before-rule");
    let names = ["my.etcd".to_string(), "a".repeat(60)];
    create_before_the_rule(&ns.0, &names).await;
    for name in &names {
        // The rule checks new objects only: an older one can still be changed, and its
        // status written (observedGeneration 2 is written under the rule).
        let (ok, out) = kubectl(
            &[
                "patch",
                "etcd",
                name,
                "-n",
                &ns.0,
                "--type=merge",
                "-p",
                r#"{"spec":{"size":3}}"#,
            ],
            None,
        );
        assert!(ok, "an object older than the rule cannot be changed: {out}");
        let status = wait_status(
            &ns.0,
            name,
            &format!("{name} Blocked with InvalidName at generation 2"),
            Duration::from_secs(60),
            |s| s.reason == "InvalidName" && s.observed_generation == Some(2),
        )
        .await;
        assert_eq!(status.phase, "Blocked");
        let limit = format!("at most {} characters", max_name_len());
        assert!(status.message.contains(&limit), "{}", status.message);
    }
    // A few ticks later: one Warning each, nothing created, nothing retried.
    sleep(Duration::from_secs(6)).await;
    for name in &names {
        assert_eq!(occurrences(&ns.0, name, "reason=InvalidName"), 1, "{name}");
        assert_eq!(occurrences(&ns.0, name, "type=Warning"), 1, "{name}");
    }
    assert!(names_of(&ns.0, "pods,services").is_empty());
    for name in &names {
        let (ok, out) = kubectl(&["delete", "etcd", name, "-n", &ns.0], None);
        assert!(ok, "{out}");
    }
}
