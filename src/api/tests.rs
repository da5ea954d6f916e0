//! The CRD schema and the CoreOS-compatible shape of the API.

use super::*;
use etcd_operator_core::lifecycle::TlsMode;

fn spec_schema() -> serde_json::Value {
    crd_probe::spec_schema(&crd())
}

#[test]
fn crd_is_the_coreos_group_version_kind_with_short_name_and_status() {
    let crd = crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("etcdclusters.etcd.database.coreos.com")
    );
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.short_names, Some(vec!["etcd".to_string()]));
    assert_eq!(
        crd_probe::v1beta2_columns(&crd),
        ["Phase", "Size", "Ready", "Version", "Quota%", "Age"]
    );
}

#[test]
fn schema_bounds_size_between_one_and_seven() {
    let size = &spec_schema()["properties"]["size"];
    assert_eq!(size["minimum"], 1.0);
    assert_eq!(size["maximum"], 7.0);
    assert!(
        spec_schema()["required"]
            .as_array()
            .unwrap()
            .contains(&"size".into())
    );
}

#[test]
fn schema_checks_the_version_with_a_clear_message() {
    let rules = &spec_schema()["x-kubernetes-validations"];
    let rule = rules[0]["rule"].as_str().unwrap();
    assert!(rule.contains("self.version.matches"), "{rule}");
    assert!(rules[0]["message"].as_str().unwrap().contains("3.5.35"));
}

#[test]
fn coreos_field_names_are_kept() {
    let props = spec_schema()["properties"].clone();
    for field in ["size", "version", "repository", "paused", "pod", "TLS"] {
        assert!(props.get(field).is_some(), "missing spec.{field}");
    }
    let pod = &props["pod"]["properties"];
    for field in [
        "labels",
        "annotations",
        "nodeSelector",
        "affinity",
        "tolerations",
        "resources",
        "etcdEnv",
        "securityContext",
        "persistentVolumeClaimSpec",
    ] {
        assert!(pod.get(field).is_some(), "missing spec.pod.{field}");
    }
}

#[test]
fn the_seed_documents_example_is_accepted_as_is() {
    let yaml = include_str!("../../examples/example-etcd-cluster.yaml");
    let cluster: EtcdCluster = serde_yaml_ng::from_str(yaml).unwrap();
    assert_eq!(
        cluster.metadata.name.as_deref(),
        Some("example-etcd-cluster")
    );
    assert_eq!(cluster.spec.size, 3);
    assert_eq!(cluster.spec.version.as_deref(), Some("3.2.13"));
    let desired = desired_cluster(&cluster);
    assert_eq!((desired.size, desired.version.as_str()), (3, "3.2.13"));
}

/// An EtcdCluster `name` of 3 members whose spec goes on with the lines `rest`.
fn three_members(name: &str, rest: &str) -> EtcdCluster {
    let yaml = format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdCluster\n\
         metadata: {{name: {name}}}\nspec:\n  size: 3\n{rest}"
    );
    serde_yaml_ng::from_str(&yaml).unwrap()
}

#[test]
fn tls_settings_are_read_as_their_mode_for_the_lifecycle() {
    let static_tls = "  TLS:\n    static:\n      member: {peerSecret: p, serverSecret: s}\n      \
                      operatorSecret: o\n";
    let cluster = three_members("secure", static_tls);
    assert_eq!(desired_cluster(&cluster).tls, TlsMode::Static);
    let cluster = three_members(
        "secure",
        "  TLS:\n    auto: {validity: 2h, keyType: Ed25519}\n",
    );
    assert_eq!(desired_cluster(&cluster).tls, TlsMode::Auto);
    let tls = cluster.spec.tls.unwrap().auto.unwrap();
    assert_eq!(tls.key_type, Some(crate::api::KeyType::Ed25519));
}

#[test]
fn the_claims_storage_request_is_read_in_bytes_for_the_lifecycle() {
    let claims = "  pod:\n    persistentVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      \
                  resources: {requests: {storage: 2Gi}}\n";
    let cluster = three_members("durable", claims);
    let storage = desired_cluster(&cluster).storage.unwrap();
    assert_eq!((storage.quantity.as_str(), storage.bytes), ("2Gi", 2 << 30));
    // Growing the claims is applied in place: the pods' template is the same.
    let mut grown = cluster.clone();
    let claim = grown
        .spec
        .pod
        .as_mut()
        .unwrap()
        .persistent_volume_claim_spec
        .as_mut()
        .unwrap();
    let requests = claim.resources.as_mut().unwrap().requests.as_mut().unwrap();
    requests.insert(
        "storage".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("4Gi".into()),
    );
    assert_eq!(
        grown.spec.pod_template_digest(),
        cluster.spec.pod_template_digest()
    );
    let plain: EtcdCluster =
        serde_yaml_ng::from_str("metadata: {name: plain}\nspec: {size: 1}\n").unwrap();
    assert_eq!(desired_cluster(&plain).storage, None);
}

#[test]
fn a_snapshots_cluster_id_goes_through_spec_restore_to_the_lifecycle_and_back() {
    let source = etcd_operator_core::lifecycle::SnapshotSource {
        bucket: "b".into(),
        key: "p/demo_20261130T103300.000Z_r7.db".into(),
        endpoint: None,
        force_path_style: true,
        secret: "aws".into(),
        sha256: "0f".repeat(32),
        size: 4128,
        etcd_version: "3.5.35".into(),
        revision: 7,
        cluster_id: Some(0x1a2b),
    };
    let restore = super::restore::cluster_restore(&source);
    assert_eq!(restore.cluster_id.as_deref(), Some("1a2b"));
    assert_eq!(super::restore::snapshot_source(&restore), source);
    // A spec.restore written before the ID was recorded has none.
    let older = crate::api::restore::ClusterRestore {
        cluster_id: None,
        ..restore
    };
    assert_eq!(super::restore::snapshot_source(&older).cluster_id, None);
}

#[test]
fn an_object_with_a_deletion_timestamp_is_desired_as_being_deleted() {
    let mut cluster: EtcdCluster =
        serde_yaml_ng::from_str("metadata: {name: demo}\nspec: {size: 3}\n").unwrap();
    assert!(!desired_cluster(&cluster).deleting);
    cluster.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
    );
    assert!(desired_cluster(&cluster).deleting);
}

#[test]
fn committed_crd_yaml_matches_the_code() {
    let committed = include_str!("../../manifests/10-crd.yaml");
    assert!(
        committed == crd_yaml(CrdSelection::All),
        "manifests/10-crd.yaml drifted from the Rust types: run `make manifests` \
         (or `make crd` for the CRD alone) and commit the result"
    );
}

#[test]
fn the_charts_crd_matches_the_code() {
    let chart =
        include_str!("../../charts/etcd-operator/crds/etcdclusters.etcd.database.coreos.com.yaml");
    assert!(
        chart == crd_yaml(CrdSelection::Etcdclusters),
        "charts/etcd-operator/crds/ drifted from the Rust types: run `make manifests` \
         (or `make crd` for the CRD alone) and commit the result"
    );
}

// The Helm chart against the code: its version, and the flags its Deployment passes.
// (manifests/ against the chart is checked by `testkit/env/chart.sh check` in `make test`,
// which needs helm.)

const CHART_YAML: &str = include_str!("../../charts/etcd-operator/Chart.yaml");
const CHART_VALUES: &str = include_str!("../../charts/etcd-operator/values.yaml");
const CHART_DEPLOYMENT: &str = include_str!("../../charts/etcd-operator/templates/deployment.yaml");

#[test]
fn the_chart_version_and_app_version_are_the_crate_version() {
    let chart: serde_json::Value = serde_yaml_ng::from_str(CHART_YAML).unwrap();
    let crate_version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        chart["version"], crate_version,
        "charts/etcd-operator/Chart.yaml version"
    );
    assert_eq!(
        chart["appVersion"], crate_version,
        "charts/etcd-operator/Chart.yaml appVersion"
    );
}

/// `(flag, values key)` of each `- --flag={{ ... $op.key }}` line of the chart's Deployment.
fn chart_flags_from_values() -> Vec<(String, String)> {
    CHART_DEPLOYMENT
        .lines()
        .filter_map(|line| {
            let arg = line.trim().strip_prefix("- --")?;
            let (flag, value) = arg.split_once('=')?;
            let key = value.split_once("$op.")?.1.split_whitespace().next()?;
            Some((flag.to_string(), key.to_string()))
        })
        .collect()
}

/// Every `--flag` the chart's Deployment passes to the operator.
fn chart_flags() -> Vec<String> {
    CHART_DEPLOYMENT
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- --"))
        .map(|arg| arg.split('=').next().unwrap_or(arg).to_string())
        .collect()
}

fn run_command() -> clap::Command {
    use clap::CommandFactory;
    let cli = crate::cli::Cli::command();
    cli.find_subcommand("run")
        .expect("a run subcommand")
        .clone()
}

#[test]
fn every_flag_the_chart_passes_is_a_flag_of_run() {
    let run = run_command();
    let known: Vec<&str> = run.get_arguments().filter_map(|a| a.get_long()).collect();
    let flags = chart_flags();
    assert!(flags.len() >= 12, "the chart's operator flags: {flags:?}");
    for flag in &flags {
        assert!(
            known.contains(&flag.as_str()),
            "charts/etcd-operator/templates/deployment.yaml passes --{flag}, which \
             `etcd-operator run` does not have (it has {known:?})"
        );
    }
}

#[test]
fn the_charts_default_operator_values_are_the_flag_defaults() {
    let values: serde_json::Value = serde_yaml_ng::from_str(CHART_VALUES).unwrap();
    let run = run_command();
    let pairs = chart_flags_from_values();
    assert!(
        pairs.len() >= 9,
        "flags taken from values.operator: {pairs:?}"
    );
    for (flag, key) in pairs {
        let value = &values["operator"][&key];
        // A list is passed joined with commas, and compared item by item.
        let items: Option<Vec<String>> = value.as_array().map(|items| {
            items
                .iter()
                .map(|i| i.as_str().unwrap_or_default().to_string())
                .collect()
        });
        let value = match &items {
            Some(items) => items.join(","),
            None => value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_string),
        };
        let arg = run
            .get_arguments()
            .find(|a| a.get_long() == Some(flag.as_str()))
            .unwrap_or_else(|| panic!("run has no --{flag}"));
        let default: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|d| d.to_string_lossy().into_owned())
            .collect();
        if default.is_empty() {
            // No default in the code (like --log-format): the chart's value must parse.
            let parsed = run
                .clone()
                .try_get_matches_from(["run", &format!("--{flag}={value}")]);
            assert!(
                parsed.is_ok(),
                "values.operator.{key}: {value:?} is not a valid --{flag}"
            );
        } else {
            assert_eq!(
                default,
                items.unwrap_or_else(|| vec![value.clone()]),
                "values.operator.{key} ({value}) differs from the default of --{flag}: \
                 change charts/etcd-operator/values.yaml, then run `make manifests`"
            );
        }
    }
}

fn named(namespace: &str, name: &str) -> EtcdCluster {
    let mut cluster = EtcdCluster::new(
        name,
        EtcdClusterSpec {
            size: 3,
            ..EtcdClusterSpec::default()
        },
    );
    cluster.metadata.namespace = Some(namespace.to_string());
    cluster
}

#[test]
fn a_name_too_long_for_the_client_service_blocks_the_cluster_with_the_limit_named() {
    let name = "a".repeat(60);
    let problem = desired_cluster(&named("default", &name)).name_problem;
    let problem = problem.expect("a 60-character name is refused");
    assert!(problem.contains("the client Service"), "{problem}");
    assert!(problem.contains("at most 56 characters"), "{problem}");
}

#[test]
fn a_dotted_name_blocks_the_cluster_because_the_headless_service_cannot_be_named_so() {
    let problem = desired_cluster(&named("default", "my.etcd")).name_problem;
    let problem = problem.expect("a dotted name is refused");
    assert!(problem.contains("the headless Service"), "{problem}");
    assert!(problem.contains("no dots"), "{problem}");
}

#[test]
fn names_up_to_the_limit_are_accepted_and_one_character_more_is_refused() {
    assert_eq!(names::max_name_len(), 56);
    let longest_namespace = "n".repeat(63);
    let at_limit = "a".repeat(56);
    assert_eq!(names::name_problem(&longest_namespace, &at_limit), None);
    assert_eq!(
        desired_cluster(&named(&longest_namespace, &at_limit)).name_problem,
        None
    );
    assert!(names::name_problem("default", &"a".repeat(57)).is_some());
    for fine in ["a", "example-etcd-cluster", "a-1", "a--b"] {
        assert_eq!(names::name_problem("default", fine), None, "{fine}");
    }
}

#[test]
fn names_a_service_cannot_take_are_refused() {
    for bad in ["my.etcd", "1etcd", "etcd-", "Etcd", "etcd_a", "-etcd"] {
        assert!(
            names::name_problem("default", bad).is_some(),
            "{bad} accepted"
        );
    }
}

#[test]
fn every_derived_name_of_the_longest_name_fits_its_rule() {
    let name = "a".repeat(names::max_name_len());
    let derived = names::derived_names(&"n".repeat(63), &name);
    let client = derived
        .iter()
        .find(|d| d.what == "the client Service")
        .unwrap();
    assert_eq!(client.value.len(), 63);
    for d in &derived {
        assert!(d.rule.allows(&d.value), "{} {:?}", d.what, d.value);
    }
}

#[test]
fn member_names_have_the_suffix_length_the_name_rules_assume() {
    let topology = etcd_operator_core::topology::Topology::new("default", "demo");
    let member = topology.new_member_name(&mut rand::rng());
    assert_eq!(member.len(), "demo-".len() + names::MEMBER_SUFFIX_LEN);
    let derived = names::derived_names("default", "demo");
    let hostname = derived
        .iter()
        .find(|d| d.what == "a member's hostname")
        .unwrap();
    assert_eq!(hostname.value.len(), member.len());
}

fn root_validations() -> serde_json::Value {
    crd_probe::root_schema(&crd())["x-kubernetes-validations"].clone()
}

#[test]
fn the_crd_refuses_names_beyond_the_limit_on_create_only() {
    let rules = root_validations();
    let rule = &rules[0];
    let text = rule["rule"].as_str().expect("a root CEL rule");
    assert!(text.contains("self.metadata.name.size() <= 56"), "{text}");
    assert!(text.contains(names::NAME_PATTERN), "{text}");
    let message = rule["message"].as_str().unwrap();
    assert!(message.contains("at most 56 characters"), "{message}");
    // Names never change: objects created before the rule keep their status writable.
    assert_eq!(rule["optionalOldSelf"], true);
    assert!(text.starts_with("oldSelf.hasValue() ||"), "{text}");
}

#[test]
fn the_pod_template_digest_is_stable_across_builds() {
    let cluster: EtcdCluster =
        serde_yaml_ng::from_str("metadata: {name: d}\nspec: {size: 3}\n").unwrap();
    // Computed once; a change of this value means every running pod would be reported
    // as made from another policy after an upgrade of the operator.
    assert_eq!(
        cluster.spec.pod_template_digest(),
        cluster.spec.pod_template_digest()
    );
    assert_eq!(cluster.spec.pod_template_digest(), "bbdc8369278af57a");
}

#[test]
fn a_rotate_ca_or_recover_annotation_change_is_a_change_of_the_desired_cluster() {
    let plain = named("default", "demo");
    let annotated = |key: &str, value: &str| {
        let mut cluster = plain.clone();
        cluster
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(key.to_string(), value.to_string());
        desired_cluster(&cluster)
    };
    let before = desired_cluster(&plain);

    let rotate = annotated("etcd.database.coreos.com/rotate-ca", "2026-12-01");
    assert_eq!(rotate.requests.rotate_ca.as_deref(), Some("2026-12-01"));
    assert_ne!(rotate, before, "a new rotate-ca value wakes the actor");
    assert_ne!(
        rotate,
        annotated("etcd.database.coreos.com/rotate-ca", "2026-12-02")
    );

    // Even a value the lifecycle refuses (it reports it) changes what the actor is told.
    let recover = annotated("etcd.database.coreos.com/recover", "Sometime");
    assert_eq!(recover.requests.recover.as_deref(), Some("Sometime"));
    assert_ne!(recover, before);
    assert_eq!(
        annotated("some.other/annotation", "x"),
        before,
        "other annotations change nothing"
    );
}

fn with_pod(pod: &str) -> EtcdCluster {
    serde_yaml_ng::from_str(&format!(
        "metadata: {{name: demo, namespace: default}}\nspec:\n  size: 3\n  pod:\n{pod}"
    ))
    .unwrap()
}

#[test]
fn a_stored_cluster_setting_an_owned_etcd_variable_is_blocked_with_the_variable_named() {
    for name in [
        "ETCD_INITIAL_CLUSTER_STATE",
        "ETCD_FORCE_NEW_CLUSTER",
        "ETCD_WAL_DIR",
        "ETCD_UNSAFE_NO_FSYNC",
        "ETCD_LISTEN_CLIENT_HTTP_URLS",
        "ETCD_DISCOVERY_SRV",
        "ETCD_PEER_AUTO_TLS",
    ] {
        let cluster = with_pod(&format!("    etcdEnv:\n    - {{name: {name}, value: x}}\n"));
        let problem = desired_cluster(&cluster).pod_policy_problem;
        let problem = problem.unwrap_or_else(|| panic!("{name} was accepted"));
        assert!(problem.contains(&format!("found {name}")), "{problem}");
    }
    let plain = with_pod("    etcdEnv:\n    - {name: ETCD_QUOTA_BACKEND_BYTES, value: '1'}\n");
    assert_eq!(desired_cluster(&plain).pod_policy_problem, None);
}

#[test]
fn a_stored_cluster_using_the_operators_label_or_annotation_keys_is_blocked() {
    let labels = with_pod("    labels: {etcd.database.coreos.com/voter: 'true', team: a}\n");
    let problem = desired_cluster(&labels).pod_policy_problem.unwrap();
    assert!(problem.contains("spec.pod.labels"), "{problem}");
    let annotations =
        with_pod("    annotations: {etcd.database.coreos.com/force-new-cluster: 'true'}\n");
    let problem = desired_cluster(&annotations).pod_policy_problem.unwrap();
    assert!(problem.contains("spec.pod.annotations"), "{problem}");
    let fine = with_pod("    labels: {team: a}\n    annotations: {example.com/x: y}\n");
    assert_eq!(desired_cluster(&fine).pod_policy_problem, None);
}

#[test]
fn the_crd_refuses_owned_etcd_variables_and_keys_from_the_same_list() {
    let pod = &spec_schema()["properties"]["pod"]["properties"];
    let env_rule = &pod["etcdEnv"]["x-kubernetes-validations"][0];
    let cel = env_rule["rule"].as_str().unwrap();
    for name in super::reserved::RESERVED_ENV_NAMES
        .iter()
        .chain(super::reserved::RESERVED_ENV_PREFIXES)
    {
        assert!(
            cel.contains(&format!("'{name}'")),
            "{name} missing from {cel}"
        );
    }
    // Bounded, so that the API server can accept the rule's cost.
    assert_eq!(pod["etcdEnv"]["maxItems"], 128);
    assert_eq!(
        pod["etcdEnv"]["items"]["properties"]["name"]["maxLength"],
        256
    );
    for field in ["labels", "annotations"] {
        let rule = &pod[field]["x-kubernetes-validations"][0];
        assert!(
            rule["rule"]
                .as_str()
                .unwrap()
                .contains("!k.startsWith('etcd.database.coreos.com/')"),
            "{rule}"
        );
        assert!(rule["message"].as_str().unwrap().contains(field));
    }
}
