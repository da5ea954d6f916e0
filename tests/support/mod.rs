//! Support shared by the integration tests.

// Each test binary uses only part of the support code.
#![allow(dead_code)]

use std::path::PathBuf;

pub mod etcd_process;
pub mod loopback_certs;
pub mod peer_probe;
pub mod s3_server;
pub mod tls_etcd;

/// The project's cache of built tools (`ETCD_OPERATOR_CACHE`, else
/// `~/.cache/etcd-operator`), as `testkit/env/build/build-binaries.sh` fills it.
pub fn project_cache() -> PathBuf {
    std::env::var_os("ETCD_OPERATOR_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/etcd-operator")
        })
}

/// The tool at `path` in the project's cache; panics, naming the `build-binaries.sh`
/// target that builds it, when it is not there.
pub fn cached_tool(path: &str, target: &str) -> PathBuf {
    let bin = project_cache().join(path);
    assert!(
        bin.exists(),
        "no {}: build it with testkit/env/build/build-binaries.sh {target}",
        bin.display()
    );
    bin
}
