//! A real S3-compatible server (versitygw over a directory) on a loopback address, for tests
//! that store backups.
//!
//! Each server listens on `127.0.0.1:<free port>` and serves a temporary directory whose
//! subdirectories are its buckets. It is killed on drop, and its directory removed unless
//! the test is failing. The binary is the one `testkit/env/build/build-binaries.sh s3` caches,
//! or `VERSITYGW_BIN`.

use std::fs::{self, File};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The root user's access key.
pub const ACCESS_KEY: &str = "etcd-operator-test";
/// The root user's secret key.
pub const SECRET_KEY: &str = "etcd-operator-test-secret";

/// The versitygw binary to run.
pub fn versitygw_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("VERSITYGW_BIN") {
        return PathBuf::from(bin);
    }
    let version = std::env::var("VERSITYGW_VERSION").unwrap_or_else(|_| "v1.8.0".into());
    super::cached_tool(&format!("versitygw/{version}/bin/versitygw"), "s3")
}

/// A running S3 server.
pub struct S3Server {
    address: SocketAddr,
    dir: PathBuf,
    child: Option<Child>,
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().unwrap().port()
}

impl S3Server {
    /// Starts a server with the given buckets and waits until it accepts connections.
    pub fn start(buckets: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "etcd-operator-s3-{}-{}",
            std::process::id(),
            free_port()
        ));
        let _ = fs::remove_dir_all(&dir);
        for bucket in buckets {
            fs::create_dir_all(dir.join("root").join(bucket)).expect("make a bucket directory");
        }
        let address: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = File::create(dir.join("versitygw.log")).expect("create the server's log");
        let child = Command::new(versitygw_bin())
            .args(["--access", ACCESS_KEY, "--secret", SECRET_KEY])
            .args(["--port", &address.to_string(), "--quiet", "posix"])
            .arg(dir.join("root"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start versitygw");
        let mut server = S3Server {
            address,
            dir,
            child: Some(child),
        };
        server.wait_listening();
        server
    }

    fn wait_listening(&mut self) {
        let started = Instant::now();
        while TcpStream::connect_timeout(&self.address, Duration::from_millis(200)).is_err() {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("versitygw exited ({status}): {}", self.log());
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "versitygw did not listen on {} within 10 s: {}",
                self.address,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The file behind `bucket/key`.
    pub fn file(&self, bucket: &str, key: &str) -> PathBuf {
        self.dir.join("root").join(bucket).join(key)
    }

    /// Keys of the regular files in `bucket` (recursively), sorted.
    pub fn keys(&self, bucket: &str) -> Vec<String> {
        let root = self.dir.join("root").join(bucket);
        let mut keys = Vec::new();
        collect(&root, &root, &mut keys);
        keys.sort();
        keys
    }

    /// The server's log.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("versitygw.log")).unwrap_or_default()
    }

    /// Kills the server (its files stay).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn collect(root: &Path, dir: &Path, keys: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            // versitygw keeps multipart uploads in progress in a hidden directory.
            if !entry.file_name().to_string_lossy().starts_with('.') {
                collect(root, &path, keys);
            }
        } else {
            keys.push(
                path.strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!(
                "S3 server kept its directory for inspection: {}",
                self.dir.display()
            );
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}
