//! What the operator binary leaves in its log when it stops: the reason, every time.
//!
//! The log is written by a background thread; a process that returns from `main` before
//! that thread has written its last lines loses them, and with them the one line that says
//! why the operator stopped.

use std::process::Command;

/// Runs the binary with a kubeconfig it cannot parse, so it stops at once with an error.
fn run_with_a_broken_kubeconfig(dir: &std::path::Path) -> (Option<i32>, String) {
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, "clusters: [").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_etcd-operator"))
        .args(["run", "--log-format", "json"])
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn the_reason_the_operator_stopped_is_the_last_line_of_its_log_every_time() {
    let dir = std::env::temp_dir().join(format!("operator-exit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // One lost line in a run is the bug; ten runs find it nearly always when it is there.
    for run in 0..10 {
        let (code, stderr) = run_with_a_broken_kubeconfig(&dir);
        assert_eq!(code, Some(1), "run {run}: {stderr}");
        let last: serde_json::Value = stderr
            .lines()
            .last()
            .map(|l| serde_json::from_str(l).unwrap())
            .unwrap_or_else(|| panic!("run {run}: the log is empty"));
        assert_eq!(last["msg"], "operator stopped", "run {run}: {stderr}");
        assert_eq!(last["level"], "CRIT", "run {run}: {stderr}");
        assert!(
            last["error"].as_str().is_some_and(|e| !e.is_empty()),
            "run {run}: {stderr}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
