//! The exact flags and shape of member pods and Services.

use etcd_operator_actors::ports::{InitialState, MemberPod};
use etcd_operator_core::lifecycle::TlsMode;
use etcd_operator_core::topology::Topology;
use kube::api::ObjectMeta;

use super::pod::etcd_flags;
use super::restore::RESTORE_REVISION_BUMP;
use super::*;
use crate::api::{EtcdCluster, EtcdClusterSpec, PodPolicy};

fn cluster(spec: EtcdClusterSpec) -> EtcdCluster {
    let mut c = EtcdCluster::new("demo", spec);
    c.metadata = ObjectMeta {
        name: Some("demo".into()),
        namespace: Some("prod".into()),
        uid: Some("0f6c7a2e-uid".into()),
        ..ObjectMeta::default()
    };
    c
}

fn spec(size: i32, version: &str) -> EtcdClusterSpec {
    EtcdClusterSpec {
        size,
        version: Some(version.into()),
        ..EtcdClusterSpec::default()
    }
}

fn seed() -> MemberPod {
    let t = Topology::new("prod", "demo");
    MemberPod {
        name: "demo-seed1".into(),
        version: "3.5.21".parse().unwrap(),
        initial_cluster: t.initial_cluster(&["demo-seed1".into()], TlsMode::Off),
        state: InitialState::New {
            token: "demo-0123456789abcdef".into(),
        },
        voter: true,
        restore: None,
        prepared_with: None,
    }
}

fn joiner() -> MemberPod {
    let t = Topology::new("prod", "demo");
    MemberPod {
        name: "demo-join2".into(),
        version: "3.5.21".parse().unwrap(),
        initial_cluster: t
            .initial_cluster(&["demo-seed1".into(), "demo-join2".into()], TlsMode::Off),
        state: InitialState::Existing,
        voter: false,
        restore: None,
        prepared_with: None,
    }
}

#[test]
fn seed_flags_start_a_new_cluster_with_a_unique_token_and_dns_urls() {
    let t = Topology::new("prod", "demo");
    assert_eq!(
        etcd_flags(&t, &seed(), TlsMode::Off),
        vec![
            "--name=demo-seed1",
            "--data-dir=/var/etcd/data",
            "--listen-peer-urls=http://$(POD_IP):2380",
            "--listen-client-urls=http://$(POD_IP):2379",
            "--initial-advertise-peer-urls=http://demo-seed1.demo.prod.svc:2380",
            "--advertise-client-urls=http://demo-seed1.demo.prod.svc:2379",
            "--initial-cluster=demo-seed1=http://demo-seed1.demo.prod.svc:2380",
            "--initial-cluster-state=new",
            "--initial-cluster-token=demo-0123456789abcdef",
        ]
    );
}

#[test]
fn joining_member_flags_use_existing_state_and_the_live_member_list() {
    let t = Topology::new("prod", "demo");
    let flags = etcd_flags(&t, &joiner(), TlsMode::Off);
    assert!(flags.contains(&"--initial-cluster-state=existing".to_string()));
    assert!(
        flags.contains(
            &"--initial-cluster=demo-seed1=http://demo-seed1.demo.prod.svc:2380,\
          demo-join2=http://demo-join2.demo.prod.svc:2380"
                .to_string()
        )
    );
    assert!(
        !flags
            .iter()
            .any(|f| f.starts_with("--initial-cluster-token"))
    );
}

#[test]
fn a_survivor_restarted_alone_keeps_its_data_and_forces_a_new_cluster_and_says_so() {
    let t = Topology::new("prod", "demo");
    let survivor = MemberPod {
        name: "demo-seed1".into(),
        initial_cluster: t.initial_cluster(&["demo-seed1".into()], TlsMode::Off),
        state: InitialState::ForceNewCluster,
        voter: true,
        ..joiner()
    };
    let flags = etcd_flags(&t, &survivor, TlsMode::Off);
    assert_eq!(
        flags[flags.len() - 2..],
        ["--initial-cluster-state=existing", "--force-new-cluster"]
    );
    assert!(flags.contains(&"--data-dir=/var/etcd/data".to_string()));
    let pod = member_pod(&cluster(spec(3, "3.5.21")), &survivor, None);
    let annotations = pod.metadata.annotations.unwrap();
    assert_eq!(
        annotations
            .get(labels::FORCE_NEW_CLUSTER_ANNOTATION)
            .map(String::as_str),
        Some("true")
    );
    let seed_pod = member_pod(&cluster(spec(3, "3.5.21")), &seed(), None);
    let seed_annotations = seed_pod.metadata.annotations.unwrap();
    assert!(!seed_annotations.contains_key(labels::FORCE_NEW_CLUSTER_ANNOTATION));
}

#[test]
fn member_pod_has_hostname_subdomain_owner_and_restarts_in_place() {
    let pod = member_pod(&cluster(spec(3, "3.5.21")), &seed(), None);
    let s = pod.spec.as_ref().unwrap();
    assert_eq!(s.hostname.as_deref(), Some("demo-seed1"));
    assert_eq!(s.subdomain.as_deref(), Some("demo"));
    // A crashed etcd restarts in place, on its data; its log's end says why it failed.
    assert_eq!(s.restart_policy.as_deref(), Some("Always"));
    assert_eq!(
        s.containers[0].termination_message_policy.as_deref(),
        Some("FallbackToLogsOnError")
    );
    let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.kind, "EtcdCluster");
    assert_eq!(owner.controller, Some(true));
    let labels = pod.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["etcd_cluster"], "demo");
    assert_eq!(labels["app"], "etcd");
    assert_eq!(
        s.containers[0].image.as_deref(),
        Some("quay.io/coreos/etcd:v3.5.21")
    );
}

#[test]
fn a_member_pod_starts_etcd_at_once_without_waiting_for_its_dns_name() {
    // CoreOS's DNS-wait init container asked for the member's name before its address was
    // published, and the cluster DNS then cached the miss: 5 to 30 s per member start.
    let mut s = spec(3, "3.5.21");
    s.pod = Some(PodPolicy {
        busybox_image: Some("busybox:1.36".into()),
        dns_timeout_in_second: Some(60),
        ..PodPolicy::default()
    });
    for member in [seed(), joiner()] {
        let pod = member_pod(&cluster(s.clone()), &member, None);
        let spec = pod.spec.unwrap();
        assert_eq!(spec.init_containers, None, "{:?}", spec.init_containers);
        assert_eq!(spec.containers.len(), 1);
    }
}

#[test]
fn a_plain_member_is_probed_for_readiness_every_second_and_stays_ready_on_nospace() {
    // The pod's Ready condition puts it behind the client Service: probed every 2 s, a
    // member back on its claim waited up to 2 s more for clients than for the operator.
    let pod = member_pod(&cluster(spec(3, "3.5.21")), &seed(), None);
    let etcd = &pod.spec.unwrap().containers[0];
    let probe = etcd.readiness_probe.as_ref().unwrap();
    assert_eq!(
        probe.http_get.as_ref().unwrap().path.as_deref(),
        Some("/health?exclude=NOSPACE")
    );
    assert_eq!(probe.period_seconds, Some(1));
}

#[test]
fn pod_policy_reaches_the_pod() {
    let mut s = spec(3, "3.5.21");
    s.repository = Some("registry.example/etcd".into());
    s.pod = Some(PodPolicy {
        labels: Some([("team".to_string(), "infra".to_string())].into()),
        node_selector: Some([("disk".to_string(), "ssd".to_string())].into()),
        anti_affinity: Some(true),
        etcd_env: Some(vec![k8s_openapi::api::core::v1::EnvVar {
            name: "ETCD_QUOTA_BACKEND_BYTES".into(),
            value: Some("4294967296".into()),
            ..Default::default()
        }]),
        ..PodPolicy::default()
    });
    let pod = member_pod(&cluster(s), &seed(), None);
    assert_eq!(pod.metadata.labels.as_ref().unwrap()["team"], "infra");
    let ps = pod.spec.unwrap();
    assert_eq!(ps.node_selector.unwrap()["disk"], "ssd");
    let anti = ps.affinity.unwrap().pod_anti_affinity.unwrap();
    assert_eq!(
        anti.required_during_scheduling_ignored_during_execution
            .unwrap()
            .len(),
        1
    );
    let etcd = &ps.containers[0];
    assert_eq!(etcd.image.as_deref(), Some("registry.example/etcd:v3.5.21"));
    let env = etcd.env.as_ref().unwrap();
    assert!(env.iter().any(|e| e.name == "ETCD_QUOTA_BACKEND_BYTES"));
    assert!(env.iter().any(|e| e.name == "POD_IP"));
}

#[test]
fn image_tags_round_trip_to_versions() {
    assert_eq!(
        version_of_image(&image("quay.io/coreos/etcd", "3.4.23")).as_deref(),
        Some("3.4.23")
    );
    assert_eq!(
        version_of_image("localhost:5000/etcd:v3.5.21").as_deref(),
        Some("3.5.21")
    );
    assert_eq!(version_of_image("localhost:5000/etcd"), None);
}

#[test]
fn headless_service_publishes_not_ready_addresses() {
    let svc = headless_service(&cluster(spec(3, "3.5.21")));
    let s = svc.spec.unwrap();
    assert_eq!(svc.metadata.name.as_deref(), Some("demo"));
    assert_eq!(s.cluster_ip.as_deref(), Some("None"));
    assert_eq!(s.publish_not_ready_addresses, Some(true));
    let client = client_service(&cluster(spec(3, "3.5.21")));
    assert_eq!(client.metadata.name.as_deref(), Some("demo-client"));
}

#[test]
fn only_voting_members_are_behind_the_client_service() {
    let c = cluster(spec(3, "3.5.21"));
    let selector = client_service(&c).spec.unwrap().selector.unwrap();
    let labels = |m: &MemberPod| member_pod(&c, m, None).metadata.labels.unwrap();
    let selects = |l: &std::collections::BTreeMap<String, String>| {
        selector.iter().all(|(k, v)| l.get(k) == Some(v))
    };
    assert!(selects(&labels(&seed())), "the seed serves clients");
    assert!(!selects(&labels(&joiner())), "a learner does not");
    let headless = headless_service(&c).spec.unwrap().selector.unwrap();
    assert!(
        headless
            .iter()
            .all(|(k, v)| labels(&joiner()).get(k) == Some(v)),
        "every member has its DNS name"
    );
}

#[test]
fn member_pods_carry_the_digest_of_the_pod_policy_they_were_made_from() {
    let c = cluster(spec(3, "3.5.21"));
    let annotations = member_pod(&c, &seed(), None).metadata.annotations.unwrap();
    assert_eq!(
        annotations.get(labels::POD_TEMPLATE_ANNOTATION),
        Some(&c.spec.pod_template_digest())
    );
    let mut changed = spec(3, "3.5.21");
    changed.repository = Some("registry.example/etcd".into());
    assert_ne!(
        changed.pod_template_digest(),
        c.spec.pod_template_digest(),
        "a repository change is a new pod template"
    );
    let mut same = spec(3, "3.5.35");
    same.version = Some("3.5.35".into());
    assert_eq!(
        same.pod_template_digest(),
        c.spec.pod_template_digest(),
        "a version change is an upgrade, not a pod template change"
    );
}

/// The anti-affinity of a member pod made with `policy`.
fn anti_affinity_of(policy: Option<PodPolicy>) -> Option<k8s_openapi::api::core::v1::Affinity> {
    let mut s = spec(3, "3.5.21");
    s.pod = policy;
    member_pod(&cluster(s), &seed(), None)
        .spec
        .unwrap()
        .affinity
}

#[test]
fn members_prefer_distinct_nodes_by_default_and_require_them_with_anti_affinity() {
    for policy in [
        None,
        Some(PodPolicy::default()),
        Some(PodPolicy {
            anti_affinity: Some(false),
            ..PodPolicy::default()
        }),
    ] {
        let anti = anti_affinity_of(policy.clone())
            .and_then(|a| a.pod_anti_affinity)
            .unwrap_or_else(|| panic!("no anti-affinity for {policy:?}"));
        assert_eq!(
            anti.required_during_scheduling_ignored_during_execution,
            None
        );
        let preferred = anti
            .preferred_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(preferred.len(), 1);
        assert_eq!(preferred[0].weight, 100);
        let term = &preferred[0].pod_affinity_term;
        assert_eq!(term.topology_key, "kubernetes.io/hostname");
        let labels = term.label_selector.as_ref().unwrap().match_labels.as_ref();
        assert_eq!(labels, Some(&crate::resources::labels::selector("demo")));
    }
    let required = anti_affinity_of(Some(PodPolicy {
        anti_affinity: Some(true),
        ..PodPolicy::default()
    }))
    .and_then(|a| a.pod_anti_affinity)
    .unwrap();
    assert_eq!(
        required.preferred_during_scheduling_ignored_during_execution,
        None
    );
    assert_eq!(
        required
            .required_during_scheduling_ignored_during_execution
            .unwrap()[0]
            .topology_key,
        "kubernetes.io/hostname"
    );
}

#[test]
fn a_users_affinity_replaces_the_spreading_rule() {
    let own = k8s_openapi::api::core::v1::Affinity {
        node_affinity: Some(Default::default()),
        ..Default::default()
    };
    let affinity = anti_affinity_of(Some(PodPolicy {
        affinity: Some(own.clone()),
        anti_affinity: Some(true),
        ..PodPolicy::default()
    }));
    assert_eq!(affinity, Some(own));
}

fn static_tls_spec() -> EtcdClusterSpec {
    let mut s = spec(3, "3.5.21");
    s.tls = Some(crate::api::TlsPolicy {
        r#static: Some(crate::api::StaticTls {
            member: Some(crate::api::MemberSecret {
                peer_secret: Some("etcd-peer-tls".into()),
                server_secret: Some("etcd-server-tls".into()),
            }),
            operator_secret: Some("etcd-client-tls".into()),
        }),
        auto: None,
    });
    s
}

#[test]
fn tls_members_use_https_dns_urls_and_require_client_certificates() {
    let t = Topology::new("prod", "demo");
    let mut seed = seed();
    seed.initial_cluster = t.initial_cluster(&["demo-seed1".into()], TlsMode::Static);
    let flags = etcd_flags(&t, &seed, TlsMode::Static);
    for wanted in [
        "--listen-peer-urls=https://$(POD_IP):2380",
        "--listen-client-urls=https://$(POD_IP):2379,https://127.0.0.1:2379",
        "--initial-advertise-peer-urls=https://demo-seed1.demo.prod.svc:2380",
        "--advertise-client-urls=https://demo-seed1.demo.prod.svc:2379",
        "--initial-cluster=demo-seed1=https://demo-seed1.demo.prod.svc:2380",
        "--peer-client-cert-auth=true",
        "--peer-trusted-ca-file=/etc/etcdtls/member/peer-tls/peer-ca.crt",
        "--peer-cert-file=/etc/etcdtls/member/peer-tls/peer.crt",
        "--peer-key-file=/etc/etcdtls/member/peer-tls/peer.key",
        "--client-cert-auth=true",
        "--trusted-ca-file=/etc/etcdtls/member/server-tls/server-ca.crt",
        "--cert-file=/etc/etcdtls/member/server-tls/server.crt",
        "--key-file=/etc/etcdtls/member/server-tls/server.key",
    ] {
        assert!(
            flags.iter().any(|f| f == wanted),
            "{wanted} not in {flags:?}"
        );
    }
    assert!(!flags.iter().any(|f| f.contains("http://")), "{flags:?}");
}

#[test]
fn tls_member_pods_mount_coreos_secrets_and_probe_readiness_over_tls() {
    let pod = member_pod(&cluster(static_tls_spec()), &seed(), None);
    let annotations = pod.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations["etcd.database.coreos.com/tls"], "Static");
    let s = pod.spec.unwrap();
    let secrets: Vec<(String, String)> = s
        .volumes
        .unwrap()
        .iter()
        .filter_map(|v| Some((v.name.clone(), v.secret.as_ref()?.secret_name.clone()?)))
        .collect();
    assert_eq!(
        secrets,
        vec![
            ("peer-tls".to_string(), "etcd-peer-tls".to_string()),
            ("server-tls".to_string(), "etcd-server-tls".to_string()),
            ("client-tls".to_string(), "etcd-client-tls".to_string()),
        ]
    );
    let etcd = &s.containers[0];
    let mounts: Vec<&str> = etcd
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .map(|m| m.mount_path.as_str())
        .collect();
    assert!(
        mounts.contains(&"/etc/etcdtls/operator/etcd-tls"),
        "{mounts:?}"
    );
    let probe = etcd.readiness_probe.as_ref().unwrap();
    assert!(probe.http_get.is_none());
    let command = probe.exec.as_ref().unwrap().command.as_ref().unwrap();
    assert!(command.contains(&"--endpoints=https://localhost:2379".to_string()));
    assert!(command.contains(&"--cert=/etc/etcdtls/operator/etcd-tls/etcd-client.crt".to_string()));
    // A read, not `endpoint health`, which fails on a NOSPACE alarm from etcd 3.5.
    assert!(command.ends_with(&["get".to_string(), "health".to_string()]));
}

#[test]
fn plain_member_pods_keep_their_digest_and_are_marked_without_tls() {
    let plain = cluster(spec(3, "3.5.21"));
    let pod = member_pod(&plain, &seed(), None);
    assert_eq!(
        pod.metadata.annotations.as_ref().unwrap()["etcd.database.coreos.com/tls"],
        "Off"
    );
    assert_ne!(
        plain.spec.pod_template_digest(),
        static_tls_spec().pod_template_digest()
    );
}

/// The seed of a cluster born from a snapshot.
fn restoring_seed(version: &str) -> MemberPod {
    MemberPod {
        version: version.parse().unwrap(),
        restore: Some(etcd_operator_core::lifecycle::SnapshotSource {
            bucket: "etcd-backups".into(),
            key: "ns/prod/prod_20261130T103300.123Z_r1234.db".into(),
            endpoint: Some("http://10.255.0.1:7480".into()),
            force_path_style: true,
            secret: "aws".into(),
            sha256: "0f".repeat(32),
            size: 8224,
            etcd_version: "3.5.35".into(),
            revision: 1234,
            cluster_id: None,
        }),
        ..seed()
    }
}

fn init_containers(
    pod: &k8s_openapi::api::core::v1::Pod,
) -> Vec<k8s_openapi::api::core::v1::Container> {
    pod.spec
        .clone()
        .unwrap()
        .init_containers
        .unwrap_or_default()
}

#[test]
fn a_restoring_seed_fetches_restores_and_places_its_data_before_etcd_starts() {
    let c = cluster(spec(3, "3.5.35"));
    let pod = member_pod(
        &c,
        &restoring_seed("3.5.35"),
        Some("localhost/etcd-operator:dev"),
    );
    let inits = init_containers(&pod);
    let names: Vec<&str> = inits.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["fetch-snapshot", "restore-snapshot", "place-data"]);
    // Fetch: the operator's image, the exact object and its sha256 and size, the Secret.
    let fetch = &inits[0];
    assert_eq!(fetch.image.as_deref(), Some("localhost/etcd-operator:dev"));
    let args = fetch.args.clone().unwrap();
    assert_eq!(args[0], "snapshot-fetch");
    for want in [
        "--bucket=etcd-backups",
        "--key=ns/prod/prod_20261130T103300.123Z_r1234.db",
        &format!("--sha256={}", "0f".repeat(32)),
        "--size=8224",
        "--endpoint=http://10.255.0.1:7480",
        "--force-path-style",
        "--out=/var/etcd/restore.db",
    ] {
        assert!(
            args.iter().any(|a| a == want),
            "{want} missing from {args:?}"
        );
    }
    assert_eq!(
        fetch.security_context.as_ref().unwrap().run_as_non_root,
        Some(true)
    );
    // Restore: etcd's own tool in the member's etcd image, as the seed of the new cluster.
    let restore = &inits[1];
    assert_eq!(
        restore.image.as_deref(),
        Some("quay.io/coreos/etcd:v3.5.35")
    );
    let command = restore.command.clone().unwrap();
    assert_eq!(
        &command[..4],
        [
            "/usr/local/bin/etcdutl",
            "snapshot",
            "restore",
            "/var/etcd/restore.db"
        ]
    );
    let t = Topology::new("prod", "demo");
    for want in [
        "--name=demo-seed1".to_string(),
        format!(
            "--initial-cluster={}",
            t.initial_cluster(&["demo-seed1".into()], TlsMode::Off)
        ),
        format!(
            "--initial-advertise-peer-urls={}",
            t.peer_url("demo-seed1", TlsMode::Off)
        ),
        "--initial-cluster-token=demo-0123456789abcdef".to_string(),
        "--data-dir=/var/etcd/restored".to_string(),
    ] {
        assert!(command.contains(&want), "{want} missing from {command:?}");
    }
    // Place: then etcd starts on /var/etcd/data as any seed does.
    assert_eq!(inits[2].args.clone().unwrap()[0], "snapshot-place");
    let volumes = pod.spec.unwrap().volumes.unwrap();
    let secret = volumes
        .iter()
        .find(|v| v.name == "restore-credentials")
        .unwrap();
    assert_eq!(
        secret.secret.as_ref().unwrap().secret_name.as_deref(),
        Some("aws")
    );
}

#[test]
fn etcd_3_4_restores_with_etcdctl_and_other_pods_get_no_restore_steps() {
    let c = cluster(spec(3, "3.4.23"));
    let pod = member_pod(&c, &restoring_seed("3.4.23"), Some("op:1"));
    let restore = &init_containers(&pod)[1];
    assert_eq!(
        restore.command.clone().unwrap()[0],
        "/usr/local/bin/etcdctl"
    );
    let env = restore.env.clone().unwrap();
    assert!(
        env.iter()
            .any(|e| e.name == "ETCDCTL_API" && e.value.as_deref() == Some("3"))
    );
    for member in [seed(), joiner()] {
        let pod = member_pod(&c, &member, Some("op:1"));
        assert!(init_containers(&pod).is_empty(), "no init container");
        assert!(
            !pod.spec
                .unwrap()
                .volumes
                .unwrap()
                .iter()
                .any(|v| v.name == "restore-credentials")
        );
    }
}

/// Joiner `demo-join3` prepared to join `demo-seed1` and `demo-join2`, before its add.
fn prepared_joiner(tls: TlsMode) -> MemberPod {
    let t = Topology::new("prod", "demo");
    let peers = vec!["demo-seed1".to_string(), "demo-join2".to_string()];
    let mut all = peers.clone();
    all.push("demo-join3".into());
    MemberPod {
        name: "demo-join3".into(),
        initial_cluster: t.initial_cluster(&all, tls),
        prepared_with: Some(peers),
        ..joiner()
    }
}

#[test]
fn a_prepared_joiners_etcd_waits_behind_a_gate_asking_the_others_about_its_own_peer_url() {
    let c = cluster(spec(3, "3.5.21"));
    let pod = member_pod(&c, &prepared_joiner(TlsMode::Off), Some("op:1"));
    let annotations = pod.metadata.annotations.clone().unwrap();
    assert_eq!(
        annotations["etcd.database.coreos.com/prepared-with"],
        "demo-seed1,demo-join2"
    );
    // Never behind the client Service: not a voter before etcd says so.
    assert!(
        !pod.metadata
            .labels
            .clone()
            .unwrap()
            .contains_key("etcd.database.coreos.com/voter")
    );
    let inits = init_containers(&pod);
    assert_eq!(inits.len(), 1);
    let gate = &inits[0];
    assert_eq!(gate.name, "await-membership");
    assert_eq!(gate.image.as_deref(), Some("op:1"));
    assert_eq!(
        gate.args.clone().unwrap(),
        vec![
            "await-membership",
            "--peer-url=http://demo-join3.demo.prod.svc:2380",
            "--data-dir=/var/etcd/data",
            "--peers=http://demo-seed1.demo.prod.svc:2380,http://demo-join2.demo.prod.svc:2380",
        ]
    );
    assert_eq!(
        gate.security_context
            .as_ref()
            .and_then(|s| s.run_as_non_root),
        Some(true)
    );
    // Its data volume, read only (a member that ran already starts without waiting), and
    // no certificate without TLS.
    let mounts = gate.volume_mounts.clone().unwrap();
    assert_eq!(mounts.len(), 1);
    assert_eq!(
        (mounts[0].mount_path.as_str(), mounts[0].read_only),
        ("/var/etcd", Some(true))
    );
    // etcd then joins the members it was built for, plus itself.
    let flags = etcd_flags(
        &Topology::new("prod", "demo"),
        &prepared_joiner(TlsMode::Off),
        TlsMode::Off,
    );
    assert!(flags.contains(&"--initial-cluster-state=existing".to_string()));
    assert!(
        flags
            .iter()
            .any(|f| f.starts_with("--initial-cluster=") && f.matches('=').count() == 4)
    );
}

#[test]
fn with_tls_a_prepared_joiners_gate_asks_the_client_listeners_with_the_operators_certificate() {
    let c = cluster(static_tls_spec());
    let pod = member_pod(&c, &prepared_joiner(TlsMode::Static), Some("op:1"));
    let gate = init_containers(&pod).remove(0);
    let args = gate.args.clone().unwrap();
    assert_eq!(
        args,
        vec![
            "await-membership",
            "--peer-url=https://demo-join3.demo.prod.svc:2380",
            "--data-dir=/var/etcd/data",
            "--endpoints=https://demo-seed1.demo.prod.svc:2379,https://demo-join2.demo.prod.svc:2379",
            "--cacert=/etc/etcdtls/gate/client-tls/etcd-client-ca.crt",
            "--cert=/etc/etcdtls/gate/client-tls/etcd-client.crt",
            "--key=/etc/etcdtls/gate/client-tls/etcd-client.key",
        ]
    );
    let mounts = gate.volume_mounts.clone().unwrap();
    assert_eq!(mounts.len(), 2);
    assert_eq!(mounts[1].mount_path, "/etc/etcdtls/gate/client-tls");
    assert_eq!(mounts[1].read_only, Some(true));
    let volumes = pod.spec.clone().unwrap().volumes.unwrap();
    let copy = volumes.iter().find(|v| v.name == mounts[1].name).unwrap();
    let secret = copy.secret.as_ref().unwrap();
    assert_eq!(secret.secret_name.as_deref(), Some("etcd-client-tls"));
    assert_eq!(secret.default_mode, Some(0o444));
    // The etcd container keeps its own, owner-only copies, and never mounts the gate's.
    let etcd = &pod.spec.unwrap().containers[0];
    assert!(
        !etcd
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .any(|m| m.name == mounts[1].name)
    );
}

#[test]
fn a_prepared_joiners_pod_template_digest_is_every_other_members() {
    // The gate, its annotation and its volume are no part of the digest that decides
    // rolling restarts: no existing member is restarted because of them.
    let c = cluster(static_tls_spec());
    let joiner_pod = member_pod(&c, &prepared_joiner(TlsMode::Static), Some("op:1"));
    let member_pod_ = member_pod(&c, &joiner(), Some("op:1"));
    let template = |p: &k8s_openapi::api::core::v1::Pod| {
        p.metadata.annotations.clone().unwrap()["etcd.database.coreos.com/pod-template"].clone()
    };
    assert_eq!(template(&joiner_pod), template(&member_pod_));
    // Without the operator's image there is no gate (the adapter refuses such a pod).
    let ungated = member_pod(&c, &prepared_joiner(TlsMode::Static), None);
    assert!(init_containers(&ungated).is_empty());
}

fn claims_spec() -> EtcdClusterSpec {
    EtcdClusterSpec {
        pod: Some(PodPolicy {
            persistent_volume_claim_spec: Some(Default::default()),
            ..PodPolicy::default()
        }),
        ..spec(3, "3.5.21")
    }
}

fn eviction_policy(budget: &k8s_openapi::api::policy::v1::PodDisruptionBudget) -> &str {
    budget
        .spec
        .as_ref()
        .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref())
        .unwrap_or("(unset)")
}

#[test]
fn an_emptydir_clusters_budget_admits_no_eviction_of_an_unready_member_beyond_quorum() {
    let c = cluster(spec(3, "3.5.21"));
    let pods = [member_pod(&c, &seed(), None)];
    let budget = disruption_budget(&c, 2, every_member_on_claim(&c, &pods));
    // An unready member on an emptyDir still holds the only copy of its data: with every
    // member unready at once (an alarm, no leader), AlwaysAllow would admit every eviction.
    assert_eq!(eviction_policy(&budget), "IfHealthyBudget");
}

#[test]
fn unready_members_may_always_be_evicted_only_when_every_member_is_on_a_claim() {
    let c = cluster(claims_spec());
    let on_claims = [
        member_pod(&c, &seed(), None),
        member_pod(&c, &joiner(), None),
    ];
    assert!(every_member_on_claim(&c, &on_claims));
    let budget = disruption_budget(&c, 2, every_member_on_claim(&c, &on_claims));
    assert_eq!(eviction_policy(&budget), "AlwaysAllow");
    // A member still on an emptyDir (made before the spec asked for claims) keeps the
    // budget strict.
    let on_empty_dir = member_pod(&cluster(spec(3, "3.5.21")), &joiner(), None);
    let mixed = [member_pod(&c, &seed(), None), on_empty_dir];
    assert!(!every_member_on_claim(&c, &mixed));
    let budget = disruption_budget(&c, 2, every_member_on_claim(&c, &mixed));
    assert_eq!(eviction_policy(&budget), "IfHealthyBudget");
    // Claims in the spec but no pod yet: nothing proves the data is on claims.
    assert!(!every_member_on_claim(
        &c,
        &[] as &[k8s_openapi::api::core::v1::Pod]
    ));
}

/// The restore step's command of a restoring seed at `version`.
fn restore_step(version: &str) -> Vec<String> {
    let c = cluster(spec(3, version));
    let pod = member_pod(&c, &restoring_seed(version), Some("op:1"));
    init_containers(&pod)[1].command.clone().unwrap()
}

#[test]
fn a_restore_with_etcdutl_that_can_bump_revisions_bumps_them_past_any_lost_write() {
    for version in ["3.5.10", "3.5.35", "3.6.0", "3.6.17"] {
        let command = restore_step(version);
        let bump = format!("--bump-revision={RESTORE_REVISION_BUMP}");
        assert!(command.contains(&bump), "{version}: {command:?}");
        assert!(
            command.iter().any(|a| a == "--mark-compacted"),
            "{version}: {command:?}"
        );
    }
    // Far more than any writes between a backup and its restore.
    const { assert!(RESTORE_REVISION_BUMP >= 1_000_000_000) };
}

#[test]
fn a_restore_with_a_tool_without_the_flags_does_not_bump_revisions() {
    // etcdctl 3.4 and etcdutl before 3.5.10 do not know the flags: asked for, the restore
    // would fail.
    for version in ["3.4.23", "3.5.0", "3.5.9"] {
        let command = restore_step(version);
        assert!(
            !command
                .iter()
                .any(|a| a.starts_with("--bump-revision") || a == "--mark-compacted"),
            "{version}: {command:?}"
        );
    }
}
