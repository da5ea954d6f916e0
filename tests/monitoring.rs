//! The chart's alert rules and dashboard: the rules pass promtool's checks and unit tests
//! (tests/monitoring/rules-test.yaml), and every metric the rules and the dashboard query
//! is one that a real etcd member or the operator exports.

mod support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;

use etcd_operator::backup::metrics::BackupMetrics;
use etcd_operator_actors::metrics::{ActionLabels, Metrics};
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use support::etcd_process::{EtcdProcess, Loopback, cached_etcd};

const RULES: &str = "charts/etcd-operator/files/prometheus-rules.yaml";
const RULE_TESTS: &str = "tests/monitoring/rules-test.yaml";
const DASHBOARD: &str = "charts/etcd-operator/files/dashboard.json";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// promtool, as `testkit/env/build/build-binaries.sh promtool` leaves it.
fn promtool() -> PathBuf {
    let version = std::env::var("PROMTOOL_VERSION").unwrap_or_else(|_| "v0.316.0".into());
    support::cached_tool(&format!("promtool/{version}/bin/promtool"), "promtool")
}

fn run_promtool(args: &[&str]) -> String {
    let out = Command::new(promtool())
        .args(args)
        .current_dir(root())
        .output()
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

#[test]
fn the_alert_rules_pass_promtools_checks_and_unit_tests() {
    let checked = run_promtool(&["check", "rules", RULES]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = run_promtool(&["test", "rules", RULE_TESTS]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// Every alert of the rules file has a unit test that expects it to fire.
#[test]
fn every_alert_has_a_unit_test_that_fires_it() {
    let rules = std::fs::read_to_string(root().join(RULES)).expect("the rules");
    let tests = std::fs::read_to_string(root().join(RULE_TESTS)).expect("the tests");
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert!(alerts.len() >= 10, "{alerts:?}");
    for alert in alerts {
        let fired = tests
            .split("alertname: ")
            .skip(1)
            .any(|case| case.starts_with(alert) && case.contains("exp_labels"));
        assert!(fired, "no unit test expects {alert} to fire");
    }
}

/// The metric names `text` (Prometheus exposition) declares.
fn declared(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The operator's metrics, each labelled family with one child (an empty family is
/// not exported).
fn operator_metrics() -> String {
    let mut registry = Registry::default();
    let metrics = Metrics::default();
    metrics.move_phase(None, Some("Running"));
    metrics.move_storage(None, Some("Healthy"));
    let action = ActionLabels {
        action: "compact",
        outcome: "ok",
    };
    metrics.actions.get_or_create(&action).inc();
    metrics.register(&mut registry);
    let backups = BackupMetrics::default();
    backups.succeeded("ns/b", 1.0, 1, jiff::Timestamp::now());
    backups.register(&mut registry);
    let mut text = String::new();
    encode(&mut text, &registry).expect("encode");
    text
}

/// A real etcd member's `/metrics`, of a two-member cluster (a member alone exports no
/// peer metrics).
async fn etcd_metrics() -> String {
    let net = Loopback::new();
    let bin = cached_etcd("v3.5", "etcd");
    let seed = EtcdProcess::start_seed_with(&bin, &net, 1, "m1").await;
    let mut client = etcd_client::Client::connect([seed.client_url()], None)
        .await
        .expect("connect");
    client
        .member_add([net.peer_url(2)], None)
        .await
        .expect("member add");
    let initial = format!(
        "{},{}",
        net.cluster_entry("m1", 1),
        net.cluster_entry("m2", 2)
    );
    let _peer = EtcdProcess::join_with(&bin, &net, 2, "m2", &initial).await;
    let address = seed.client_url().trim_start_matches("http://").to_string();
    let mut stream = TcpStream::connect(&address).expect("connect to the member");
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n").expect("ask");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("read the answer");
    text
}

/// The metric names a PromQL expression reads: its words that start with `etcd_`,
/// less the label names the rules group by.
fn queried(expr: &str) -> Vec<String> {
    const LABELS: [&str; 1] = ["etcd_cluster"];
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.starts_with("etcd_") && !LABELS.contains(w))
        .map(str::to_string)
        .collect()
}

fn exprs(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("read");
    if path.extension().is_some_and(|e| e == "json") {
        let dashboard: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let panels = dashboard["panels"].as_array().expect("panels");
        panels
            .iter()
            .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
            .map(|t| t["expr"].as_str().expect("an expr").to_string())
            .collect()
    } else {
        let rules: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("YAML");
        let groups = rules["groups"].as_sequence().expect("groups");
        groups
            .iter()
            .flat_map(|g| g["rules"].as_sequence().cloned().unwrap_or_default())
            .map(|r| r["expr"].as_str().expect("an expr").to_string())
            .collect()
    }
}

#[tokio::test]
async fn every_metric_the_rules_and_the_dashboard_query_is_exported() {
    let etcd = etcd_metrics().await;
    let mut known = declared(&etcd);
    assert!(known.contains("etcd_server_has_leader"), "{etcd}");
    known.extend(declared(&operator_metrics()));
    let exported = |name: &str| {
        known.contains(name)
            || ["_total", "_bucket", "_sum", "_count"]
                .iter()
                .any(|suffix| name.strip_suffix(suffix).is_some_and(|n| known.contains(n)))
    };
    for file in [RULES, DASHBOARD] {
        let all = exprs(&root().join(file));
        assert!(!all.is_empty(), "no queries in {file}");
        for expr in all {
            for name in queried(&expr) {
                assert!(
                    exported(&name),
                    "{file}: {name} (in `{expr}`) is exported by neither etcd nor the operator"
                );
            }
        }
    }
}
