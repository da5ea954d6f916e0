//! The product's crates depend one way: `etcd-operator` → `etcd-operator-actors` →
//! `etcd-operator-core`, and the core does no I/O: neither it nor anything it pulls in
//! is actix, kube or a client of etcd. Read from `cargo tree`, so a dependency that
//! arrives through another crate counts too.

use std::process::Command;

/// Every crate `package` depends on (normal dependencies, transitively), by name.
fn dependencies(package: &str) -> Vec<String> {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
            "-p",
            package,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The names of `forbidden` that `package` depends on.
fn reached(package: &str, forbidden: &[&str]) -> Vec<String> {
    dependencies(package)
        .into_iter()
        .filter(|name| forbidden.contains(&name.as_str()))
        .collect()
}

#[test]
fn the_core_reaches_neither_actix_nor_kube_nor_etcd() {
    let forbidden = [
        "actix",
        "actix-rt",
        "kube",
        "kube-client",
        "k8s-openapi",
        "etcd-client",
        "tonic",
        "etcd-operator-actors",
        "etcd-operator",
    ];
    assert_eq!(
        reached("etcd-operator-core", &forbidden),
        Vec::<String>::new()
    );
}

#[test]
fn the_actors_know_kubernetes_and_etcd_only_through_their_ports() {
    let forbidden = [
        "kube",
        "kube-client",
        "k8s-openapi",
        "etcd-client",
        "etcd-operator",
    ];
    assert_eq!(
        reached("etcd-operator-actors", &forbidden),
        Vec::<String>::new()
    );
}
