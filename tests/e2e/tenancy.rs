//! Tenant isolation: what a tenant who may create the operator's objects in their own
//! namespace can make the operator do there, acting through a ServiceAccount that holds
//! only the rights each scenario names (kubectl impersonates it).

use std::time::Duration;

use crate::support::*;

/// A tenant's ServiceAccount `tenant` in `ns`, bound to a Role of `rules` (YAML list
/// items) in that namespace and nothing else.
struct Tenant {
    ns: String,
}

impl Tenant {
    fn create(ns: &str, rules: &str) -> Self {
        apply(&format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: tenant\n  namespace: {ns}\n\
             ---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  \
             name: tenant\n  namespace: {ns}\nrules:\n{rules}\
             ---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  \
             name: tenant\n  namespace: {ns}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  \
             kind: Role\n  name: tenant\nsubjects:\n- kind: ServiceAccount\n  name: tenant\n  \
             namespace: {ns}\n"
        ));
        Tenant { ns: ns.to_string() }
    }

    /// kubectl as the tenant's ServiceAccount.
    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> (bool, String) {
        let who = format!("--as=system:serviceaccount:{}:tenant", self.ns);
        let mut all = vec![who.as_str()];
        all.extend_from_slice(args);
        kubectl(&all, stdin)
    }

    /// Applies `yaml` as the tenant, panicking when it is refused.
    fn apply(&self, yaml: &str) {
        let (ok, out) = self.kubectl(&["apply", "-f", "-"], Some(yaml));
        assert!(ok, "the tenant's kubectl apply failed: {out}");
    }
}

/// What a tenant who may back up their own clusters holds: EtcdBackups and Secrets of
/// their namespace.
const BACKUP_RIGHTS: &str = "- apiGroups: [etcd.database.coreos.com]\n  \
    resources: [etcdbackups]\n  verbs: [get, list, watch, create, update, patch, delete]\n\
    - apiGroups: [\"\"]\n  resources: [secrets]\n  verbs: [get, create]\n";

/// The tenant's S3 Secret, created by the tenant.
fn tenant_secret(tenant: &Tenant) {
    let (ok, out) = tenant.kubectl(
        &[
            "create",
            "secret",
            "generic",
            "aws",
            "-n",
            &tenant.ns,
            &format!("--from-literal=accessKey={}", s3_file("access-key")),
            &format!("--from-literal=secretKey={}", s3_file("secret-key")),
        ],
        None,
    );
    assert!(ok, "{out}");
}

/// Objects stored under `prefix` of the bucket, as the server's directory shows.
fn stored_under(prefix: &str) -> usize {
    let dir = env_dir().join("s3/root").join(BUCKET).join(prefix);
    std::fs::read_dir(dir).map_or(0, |entries| entries.count())
}

/// Waits until the EtcdBackup has failed with `reason`; its status.
async fn wait_refused(ns: &str, name: &str, reason: &str) -> serde_json::Value {
    let what = format!("EtcdBackup {ns}/{name} refused with {reason}");
    wait_for(&what, Duration::from_secs(90), || async {
        let status = object_json("etcdbackup", ns, name)["status"].clone();
        if status["succeeded"] == false && status["Reason"] == reason {
            Ok(status)
        } else {
            Err(status.to_string())
        }
    })
    .await
}

#[tokio::test]
async fn a_backup_naming_another_namespaces_etcd_is_refused_and_stores_nothing() {
    let victim = Namespace::create("victim");
    apply(&cluster_yaml(&victim.0, "victim", 1, "3.5.35", false));
    let ready = wait_running(&victim.0, "victim", 1, Duration::from_secs(120)).await;
    let mut etcd = etcd(&victim.0, &ready).await;
    write_keys(&mut etcd, "secret", 10).await;
    let pod_ip = {
        let (ok, out) = kubectl(
            &[
                "get",
                "pod",
                &ready[0],
                "-n",
                &victim.0,
                "-o",
                "jsonpath={.status.podIP}",
            ],
            None,
        );
        assert!(ok, "{out}");
        out
    };

    let attacker = Namespace::create("attacker");
    let tenant = Tenant::create(&attacker.0, BACKUP_RIGHTS);
    tenant_secret(&tenant);
    // The victim's client Service by its name, and its member by its pod's address.
    let targets = [
        (
            "by-service",
            format!("http://victim-client.{}.svc:2379", victim.0),
        ),
        (
            "by-service-fqdn",
            format!("http://victim-client.{}.svc.cluster.local:2379", victim.0),
        ),
        ("by-address", format!("http://{pod_ip}:2379")),
    ];
    let prefixes: Vec<String> = targets
        .iter()
        .map(|(name, _)| empty_prefix(&attacker.0, name))
        .collect();
    for ((name, endpoint), prefix) in targets.iter().zip(&prefixes) {
        tenant.apply(&backup_yaml(
            &attacker.0,
            name,
            &format!("etcdEndpoints: [\"{endpoint}\"]"),
            &format!("{BUCKET}/{prefix}"),
            "",
        ));
    }
    for ((name, endpoint), prefix) in targets.iter().zip(&prefixes) {
        let status = wait_refused(&attacker.0, name, "EndpointOutsideNamespace").await;
        let message = status["message"].as_str().unwrap_or_default();
        assert!(message.contains(endpoint.as_str()), "{message}");
        assert!(message.contains(&attacker.0), "{message}");
        assert!(
            message.contains("--allow-backup-endpoints-outside-namespace"),
            "the refusal names the flag that allows it: {message}"
        );
        assert_eq!(stored_under(prefix), 0, "nothing of the victim's is stored");
    }
    assert!(!event_names(&attacker.0, "reason=EndpointOutsideNamespace").is_empty());
}

/// An etcd of the tenant's own (a plain pod and its Service in their namespace) that
/// advertises `advertised` as its client URL.
fn lying_etcd(ns: &str, advertised: &str) {
    apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: liar\n  namespace: {ns}\n  labels:\n    \
         app: liar\nspec:\n  containers:\n  - name: etcd\n    image: quay.io/coreos/etcd:v3.5.35\n    \
         command: [/usr/local/bin/etcd, --name=liar, --data-dir=/tmp/liar, \
         --listen-client-urls=http://0.0.0.0:2379, --advertise-client-urls={advertised}, \
         --listen-peer-urls=http://0.0.0.0:2380, --initial-advertise-peer-urls=http://127.0.0.1:2380, \
         --initial-cluster=liar=http://127.0.0.1:2380]\n\
         ---\napiVersion: v1\nkind: Service\nmetadata:\n  name: liar\n  namespace: {ns}\nspec:\n  \
         selector:\n    app: liar\n  ports:\n  - port: 2379\n"
    ));
}

#[tokio::test]
async fn a_member_list_naming_another_namespaces_members_is_refused() {
    let victim = Namespace::create("victim-members");
    apply(&cluster_yaml(&victim.0, "victim", 1, "3.5.35", false));
    let ready = wait_running(&victim.0, "victim", 1, Duration::from_secs(120)).await;
    let victim_url = format!("http://{}.victim.{}.svc:2379", ready[0], victim.0);

    let attacker = Namespace::create("attacker-members");
    lying_etcd(&attacker.0, &victim_url);
    let tenant = Tenant::create(&attacker.0, BACKUP_RIGHTS);
    tenant_secret(&tenant);
    let prefix = empty_prefix(&attacker.0, "liar");
    tenant.apply(&backup_yaml(
        &attacker.0,
        "liar",
        &format!("etcdEndpoints: [\"http://liar.{}.svc:2379\"]", attacker.0),
        &format!("{BUCKET}/{prefix}"),
        "",
    ));
    let status = wait_refused(&attacker.0, "liar", "EndpointOutsideNamespace").await;
    let message = status["message"].as_str().unwrap_or_default();
    assert!(message.contains(&victim_url), "{message}");
    assert!(message.contains("member list"), "{message}");
    assert_eq!(
        stored_under(&prefix),
        0,
        "nothing of the victim's is stored"
    );
}

/// What a tenant who may run etcd clusters holds: EtcdClusters of their namespace, and
/// nothing that makes pods or reads Secrets.
const CLUSTER_RIGHTS: &str = "- apiGroups: [etcd.database.coreos.com]\n  \
    resources: [etcdclusters]\n  verbs: [get, list, watch, create, update, patch, delete]\n";

/// A namespace whose pods must meet the `restricted` Pod Security Standard.
fn restricted_namespace(name: &str) -> Namespace {
    let ns = Namespace::create(name);
    let (ok, out) = kubectl(
        &[
            "label",
            "namespace",
            &ns.0,
            "pod-security.kubernetes.io/enforce=restricted",
            "pod-security.kubernetes.io/enforce-version=latest",
        ],
        None,
    );
    assert!(ok, "{out}");
    ns
}

#[tokio::test]
async fn member_pods_run_in_a_namespace_that_enforces_the_restricted_standard() {
    let ns = restricted_namespace("restricted");
    let tenant = Tenant::create(&ns.0, CLUSTER_RIGHTS);
    tenant.apply(&cluster_yaml(&ns.0, "locked", 3, "3.5.35", false));
    let ready = wait_running(&ns.0, "locked", 3, Duration::from_secs(180)).await;
    let mut etcd = etcd(&ns.0, &ready).await;
    write_keys(&mut etcd, "restricted", 20).await;
    assert_keys(&mut etcd, "restricted", 20).await;
    // Each member pod says so itself: non-root, the runtime's seccomp profile, and every
    // container without privilege escalation or capabilities.
    for pod in &ready {
        let spec = object_json("pod", &ns.0, pod)["spec"].clone();
        let pod_sc = &spec["securityContext"];
        assert_eq!(pod_sc["runAsNonRoot"], true, "{pod}: {pod_sc}");
        assert_eq!(pod_sc["seccompProfile"]["type"], "RuntimeDefault", "{pod}");
        for container in spec["containers"].as_array().unwrap() {
            let sc = &container["securityContext"];
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{pod}: {sc}");
            assert_eq!(
                sc["capabilities"]["drop"],
                serde_json::json!(["ALL"]),
                "{pod}"
            );
        }
    }
}

/// A one-member EtcdCluster of the tenant's, with `spec_lines` (YAML under `spec:`,
/// indented two spaces).
fn one_member(tenant: &Tenant, name: &str, spec_lines: &str) -> String {
    format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdCluster\nmetadata:\n  \
         name: {name}\n  namespace: {}\nspec:\n  size: 1\n{spec_lines}",
        tenant.ns
    )
}

/// Applies [`one_member`] as the tenant; the refusal's text.
fn refused_cluster(tenant: &Tenant, name: &str, spec_lines: &str) -> String {
    let yaml = one_member(tenant, name, spec_lines);
    let (ok, out) = tenant.kubectl(&["apply", "-f", "-"], Some(&yaml));
    assert!(!ok, "the API server accepted {name}:\n{yaml}");
    out
}

#[tokio::test]
async fn a_pod_policy_that_would_weaken_member_pods_is_refused_at_apply_with_its_rule() {
    let ns = Namespace::create("weakened");
    let tenant = Tenant::create(&ns.0, CLUSTER_RIGHTS);
    let cases = [
        (
            "as-root",
            "  pod:\n    securityContext:\n      runAsUser: 0\n",
            "runAsUser 0",
        ),
        (
            "may-be-root",
            "  pod:\n    securityContext:\n      runAsNonRoot: false\n",
            "runAsNonRoot",
        ),
        (
            "unconfined",
            "  pod:\n    securityContext:\n      seccompProfile:\n        type: Unconfined\n",
            "seccompProfile",
        ),
        (
            "selinux",
            "  pod:\n    securityContext:\n      seLinuxOptions:\n        type: spc_t\n",
            "seLinuxOptions",
        ),
        (
            "sysctl",
            "  pod:\n    securityContext:\n      sysctls:\n      - name: kernel.msgmax\n        value: \"1\"\n",
            "sysctls",
        ),
        (
            "apparmor",
            "  pod:\n    annotations:\n      container.apparmor.security.beta.kubernetes.io/etcd: unconfined\n",
            "AppArmor",
        ),
        (
            "secret-env",
            "  pod:\n    etcdEnv:\n    - name: STOLEN\n      valueFrom:\n        secretKeyRef:\n          name: other\n          key: password\n",
            "valueFrom",
        ),
    ];
    for (name, spec, rule) in cases {
        let out = refused_cluster(&tenant, name, spec);
        assert!(
            out.contains(rule),
            "{name}: the refusal names {rule:?}: {out}"
        );
        assert!(
            out.contains("restricted") || out.contains("values only"),
            "{name}: the refusal says which rule: {out}"
        );
    }
    // What the restricted standard allows is still accepted.
    tenant.apply(&one_member(
        &tenant,
        "allowed",
        "  paused: true\n  pod:\n    securityContext:\n      runAsUser: 9000\n      \
         fsGroup: 9000\n      seccompProfile:\n        type: RuntimeDefault\n    \
         etcdEnv:\n    - name: ETCD_QUOTA_BACKEND_BYTES\n      value: \"4294967296\"\n",
    ));
}

#[tokio::test]
async fn an_image_outside_the_allowed_repositories_blocks_the_cluster_with_the_list() {
    let ns = Namespace::create("foreign-image");
    let tenant = Tenant::create(&ns.0, CLUSTER_RIGHTS);
    tenant.apply(&one_member(
        &tenant,
        "foreign",
        "  repository: evil.example/etcd\n",
    ));
    let status = wait_status(
        &ns.0,
        "foreign",
        "Blocked/ImageNotAllowed",
        Duration::from_secs(60),
        |s| s.reason == "ImageNotAllowed",
    )
    .await;
    assert_eq!(status.phase, "Blocked");
    let message = status.message;
    assert!(message.contains("evil.example/etcd"), "{message}");
    assert!(
        message.contains("quay.io/coreos/etcd"),
        "the list: {message}"
    );
    assert!(
        message.contains("--allowed-image-repositories"),
        "{message}"
    );
    assert!(pod_uids(&ns.0).is_empty(), "no pod runs a foreign image");
    wait_event(&ns.0, "reason=ImageNotAllowed").await;
}

/// An EtcdCluster whose `spec.restore` the tenant wrote: the namespace's Secret `aws`
/// (which the tenant may not read), the local store, a made-up snapshot; with the
/// annotation an EtcdRestore would leave, copied by hand.
fn hand_written_restore(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdCluster\nmetadata:\n  \
         name: {name}\n  namespace: {ns}\n  annotations:\n    \
         etcd.database.coreos.com/restored-by: 0d9f7c1e-0000-4000-8000-000000000000\n\
         spec:\n  size: 1\n  restore:\n    backupStorageType: S3\n    s3:\n      \
         path: {BUCKET}/{ns}/{name}/stolen.db\n      awsSecret: aws\n      \
         endpoint: {}\n      forcePathStyle: true\n    sha256: \"{}\"\n    size: 4096\n    \
         etcdVersion: 3.5.35\n    revision: 1\n    restoreName: made-up\n",
        s3_file("endpoint"),
        "0".repeat(64)
    )
}

#[tokio::test]
async fn a_hand_written_spec_restore_is_blocked_and_nothing_is_fetched() {
    let ns = Namespace::create("hand-restore");
    create_secret(&ns.0);
    let tenant = Tenant::create(&ns.0, CLUSTER_RIGHTS);
    let (can_read, _) = tenant.kubectl(&["auth", "can-i", "get", "secrets", "-n", &ns.0], None);
    assert!(!can_read, "the tenant may not read the namespace's Secrets");
    tenant.apply(&hand_written_restore(&ns.0, "forged"));
    let status = wait_status(
        &ns.0,
        "forged",
        "Blocked/RestoreNotAllowed",
        Duration::from_secs(60),
        |s| s.reason == "RestoreNotAllowed",
    )
    .await;
    assert_eq!(status.phase, "Blocked");
    assert!(
        status
            .message
            .contains("EtcdRestore made-up does not exist"),
        "{}",
        status.message
    );
    assert!(
        pod_uids(&ns.0).is_empty(),
        "no pod mounts the Secret or fetches from the store"
    );
    wait_event(&ns.0, "reason=RestoreNotAllowed").await;
}

/// `etcd_operator_cached_objects{kind="Service"}` on the operator's leader.
async fn cached_services() -> u64 {
    let (code, body) = crate::operator::leader().await.get_http("/metrics");
    assert_eq!(code, "200", "{body}");
    body.lines()
        .find_map(|l| l.strip_prefix("etcd_operator_cached_objects{kind=\"Service\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no cached_objects gauge for Services in:\n{body}"))
}

/// The namespaces whose phase is `Terminating`.
fn terminating_namespaces() -> Vec<String> {
    let (ok, out) = kubectl(
        &[
            "get",
            "namespaces",
            "-o",
            "jsonpath={range .items[?(@.status.phase==\"Terminating\")]}{.metadata.name}{\"\\n\"}{end}",
        ],
        None,
    );
    assert!(ok, "{out}");
    out.lines().map(str::to_owned).collect()
}

/// A headless Service labelled exactly as the operator labels its own; `owner`: the
/// controller ownerReference (`None`: owned by nobody).
fn look_alike(ns: &str, name: &str, owner: Option<(&str, &str)>) -> String {
    let owner = owner.map_or(String::new(), |(cluster, uid)| {
        format!(
            "    ownerReferences: [{{apiVersion: etcd.database.coreos.com/v1beta2, kind: \
             EtcdCluster, name: {cluster}, uid: {uid}, controller: true}}]\n"
        )
    });
    format!(
        "- apiVersion: v1\n  kind: Service\n  metadata:\n    name: {name}\n    namespace: {ns}\n\
         {owner}    labels: {{app: etcd, app.kubernetes.io/managed-by: etcd-operator, \
         etcd_cluster: owner}}\n  spec:\n    clusterIP: None\n    ports: [{{name: client, port: 2379}}]\n"
    )
}

#[tokio::test]
async fn objects_labelled_as_the_operators_but_owned_by_no_cluster_are_not_kept() {
    const LOOK_ALIKES: usize = 200;
    let ns = Namespace::create("look-alikes");
    // Paused: its actor makes nothing of its own while the cache is counted.
    apply(&cluster_yaml(&ns.0, "owner", 1, "3.5.35", true));
    let (ok, uid) = kubectl(
        &[
            "get",
            "etcd",
            "owner",
            "-n",
            &ns.0,
            "-o",
            "jsonpath={.metadata.uid}",
        ],
        None,
    );
    assert!(ok && !uid.is_empty(), "{uid}");
    // The gauge counts every namespace: an earlier scenario's namespace that is still going
    // away takes its Services out of the cache while this one counts (CI saw the count fall
    // from 4 to 1 under it). So first no namespace may be terminating, then the count must
    // hold still for two seconds.
    wait_for(
        "no namespace to be terminating",
        Duration::from_secs(300),
        || async {
            let terminating = terminating_namespaces();
            if terminating.is_empty() {
                Ok(())
            } else {
                Err(terminating.join(", "))
            }
        },
    )
    .await;
    let before = wait_for("a steady cache", Duration::from_secs(60), || async {
        let first = cached_services().await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let second = cached_services().await;
        if first == second {
            Ok(first)
        } else {
            Err(format!("{first} then {second}"))
        }
    })
    .await;
    // The look-alikes, then one Service the cluster does control: one watch delivers them
    // in order, so once that one is kept every look-alike has been seen.
    let mut list = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for i in 0..LOOK_ALIKES {
        list.push_str(&look_alike(&ns.0, &format!("look-alike-{i}"), None));
    }
    list.push_str(&look_alike(&ns.0, "controlled", Some(("owner", &uid))));
    let (ok, out) = kubectl(&["create", "-f", "-"], Some(&list));
    assert!(ok, "{out}");
    let after = wait_for(
        "the controlled Service to be kept",
        Duration::from_secs(60),
        || async {
            let now = cached_services().await;
            if now > before {
                Ok(now)
            } else {
                Err(format!("{now} cached, {before} before"))
            }
        },
    )
    .await;
    assert_eq!(
        after,
        before + 1,
        "only the Service the EtcdCluster controls is kept, none of the {LOOK_ALIKES} look-alikes"
    );
}
