//! Asking an etcd member's peer port for `/members` with curl, as another member would,
//! and reading back only the HTTP status.

use std::fs;
use std::path::Path;
use std::process::Command;

/// A curl that prints only the HTTP status of its answer (`000` for none), over HTTP/1.1
/// (what etcd's peer handler serves), within 5 seconds.
pub fn status_curl() -> Command {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "--http1.1",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--max-time",
        "5",
    ]);
    cmd
}

/// Makes `cmd` present the client certificate `cert` with its `key`, written into `dir`.
pub fn present(cmd: &mut Command, dir: &Path, cert: &[u8], key: &[u8]) {
    let (cert_file, key_file) = (dir.join(".probe.crt"), dir.join(".probe.key"));
    fs::write(&cert_file, cert).expect("write the probe's certificate");
    fs::write(&key_file, key).expect("write the probe's key");
    cmd.arg("--cert").arg(cert_file).arg("--key").arg(key_file);
}
