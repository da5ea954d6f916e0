//! Readiness and liveness probes: what to check (`httpGet`, `tcpSocket`, `exec`), how often, and how
//! consecutive results turn into a ready/unready verdict, as the kubelet does.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Timing and thresholds of a probe, with the API's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeTiming {
    /// Wait before the first check.
    pub initial_delay: Duration,
    /// Interval between checks (at least 1 s).
    pub period: Duration,
    /// Time allowed for one check (at least 1 s).
    pub timeout: Duration,
    /// Consecutive successes that make the container ready.
    pub success_threshold: u32,
    /// Consecutive failures that make it unready.
    pub failure_threshold: u32,
}

impl ProbeTiming {
    /// Reads a probe's settings; defaults 0 s delay, 10 s period, 1 s timeout, thresholds 1/3.
    pub fn of(probe: &Probe) -> ProbeTiming {
        let secs = |v: Option<i32>, default: i32, min: i32| {
            Duration::from_secs(v.unwrap_or(default).max(min) as u64)
        };
        ProbeTiming {
            initial_delay: secs(probe.initial_delay_seconds, 0, 0),
            period: secs(probe.period_seconds, 10, 1),
            timeout: secs(probe.timeout_seconds, 1, 1),
            success_threshold: probe.success_threshold.unwrap_or(1).max(1) as u32,
            failure_threshold: probe.failure_threshold.unwrap_or(3).max(1) as u32,
        }
    }
}

/// One check to perform.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// `GET http[s]://host:port/path`; 2xx and 3xx are success.
    Http {
        /// HTTPS (`scheme: HTTPS`): the certificate is not verified, as the kubelet's
        /// probes do not verify it.
        tls: bool,
        /// Host to connect to (the pod IP by default).
        host: String,
        /// Port.
        port: u16,
        /// Request path.
        path: String,
        /// Extra request headers.
        headers: Vec<(String, String)>,
    },
    /// A TCP connection to `host:port` succeeds.
    Tcp {
        /// Host to connect to.
        host: String,
        /// Port.
        port: u16,
    },
    /// A command run inside the container's mount namespace exits 0.
    Exec {
        /// The command.
        command: Vec<String>,
    },
}

fn port_of(port: &IntOrString, container: &Container) -> Result<u16, String> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("bad probe port {n}")),
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .ok_or_else(|| format!("probe port {name:?} is not a named port of the container")),
    }
}

/// The check a probe describes, for a container of a pod at `pod_ip`.
pub fn check_of(probe: &Probe, container: &Container, pod_ip: &str) -> Result<Check, String> {
    if let Some(http) = &probe.http_get {
        let tls = match http.scheme.as_deref() {
            None | Some("HTTP") => false,
            Some("HTTPS") => true,
            Some(other) => return Err(format!("probe scheme {other:?}: use HTTP or HTTPS")),
        };
        return Ok(Check::Http {
            tls,
            host: http.host.clone().unwrap_or_else(|| pod_ip.to_string()),
            port: port_of(&http.port, container)?,
            path: http.path.clone().unwrap_or_else(|| "/".to_string()),
            headers: http
                .http_headers
                .iter()
                .flatten()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect(),
        });
    }
    if let Some(tcp) = &probe.tcp_socket {
        return Ok(Check::Tcp {
            host: tcp.host.clone().unwrap_or_else(|| pod_ip.to_string()),
            port: port_of(&tcp.port, container)?,
        });
    }
    if let Some(exec) = &probe.exec {
        let command = exec.command.clone().unwrap_or_default();
        if command.is_empty() {
            return Err("exec probe without command".to_string());
        }
        return Ok(Check::Exec { command });
    }
    Err("only httpGet, tcpSocket and exec probes are supported".to_string())
}

/// Turns consecutive results into a verdict; a container starts unready.
#[derive(Clone, Debug)]
pub struct ProbeTracker {
    success_threshold: u32,
    failure_threshold: u32,
    successes: u32,
    failures: u32,
    ready: bool,
}

impl ProbeTracker {
    /// A tracker with the probe's thresholds.
    pub fn new(timing: &ProbeTiming) -> ProbeTracker {
        ProbeTracker {
            success_threshold: timing.success_threshold,
            failure_threshold: timing.failure_threshold,
            successes: 0,
            failures: 0,
            ready: false,
        }
    }

    /// A tracker that starts out passing (liveness: healthy until proven otherwise).
    pub fn passing(timing: &ProbeTiming) -> ProbeTracker {
        ProbeTracker {
            ready: true,
            ..ProbeTracker::new(timing)
        }
    }

    /// Records a result; returns the verdict.
    pub fn record(&mut self, ok: bool) -> bool {
        if ok {
            self.successes += 1;
            self.failures = 0;
            if self.successes >= self.success_threshold {
                self.ready = true;
            }
        } else {
            self.failures += 1;
            self.successes = 0;
            if self.failures >= self.failure_threshold {
                self.ready = false;
            }
        }
        self.ready
    }
}

/// The status code in an HTTP response's status line.
pub fn parse_status_code(response: &[u8]) -> Option<u16> {
    let line = response.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    if !words.next()?.starts_with("HTTP/") {
        return None;
    }
    words.next()?.parse().ok()
}

/// Accepts any server certificate while still checking the handshake's signatures: a
/// probe, like the kubelet's, proves the server answers, not who it is.
#[derive(Debug)]
struct AnyCertificate(std::sync::Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A TLS connection to `host:port` that accepts any certificate.
async fn tls_connect(
    stream: TcpStream,
    host: &str,
) -> Option<tokio_rustls::client::TlsStream<TcpStream>> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .ok()?
        .dangerous()
        .with_custom_certificate_verifier(std::sync::Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(host.to_string()).ok()?;
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, stream)
        .await
        .ok()
}

/// Sends a GET on `stream` and reads the status line: success is 2xx or 3xx.
async fn get_status<S>(
    mut stream: S,
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
) -> bool
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.35\r\nAccept: */*\r\nConnection: close\r\n"
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    while !buf.contains(&b'\n') {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    matches!(parse_status_code(&buf), Some(code) if (200..400).contains(&code))
}

async fn http_get(
    tls: bool,
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
) -> bool {
    let Ok(stream) = TcpStream::connect((host, port)).await else {
        return false;
    };
    if !tls {
        return get_status(stream, host, port, path, headers).await;
    }
    match tls_connect(stream, host).await {
        Some(stream) => get_status(stream, host, port, path, headers).await,
        None => false,
    }
}

/// Runs one check within `timeout`. Exec checks enter the mount, UTS and network
/// namespaces of `pid` with the container's `env`.
pub async fn run_check(
    check: &Check,
    timeout: Duration,
    pid: i32,
    env: &[(String, String)],
) -> bool {
    let work = async {
        match check {
            Check::Http {
                tls,
                host,
                port,
                path,
                headers,
            } => http_get(*tls, host, *port, path, headers).await,
            Check::Tcp { host, port } => TcpStream::connect((host.as_str(), *port)).await.is_ok(),
            Check::Exec { command } => {
                let mut cmd = tokio::process::Command::new("nsenter");
                cmd.arg(format!("--target={pid}"))
                    .arg("--mount")
                    .arg("--uts")
                    .arg("--net")
                    .arg("--")
                    .args(command)
                    .env_clear()
                    .envs(env.iter().map(|(k, v)| (k, v)))
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .kill_on_drop(true);
                matches!(cmd.status().await, Ok(s) if s.success())
            }
        }
    };
    tokio::time::timeout(timeout, work).await.unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, HTTPGetAction};

    fn http_probe(port: IntOrString) -> Probe {
        Probe {
            http_get: Some(HTTPGetAction {
                port,
                path: Some("/health".into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn defaults_follow_the_api() {
        let t = ProbeTiming::of(&Probe::default());
        assert_eq!(t.period, Duration::from_secs(10));
        assert_eq!(t.timeout, Duration::from_secs(1));
        assert_eq!((t.success_threshold, t.failure_threshold), (1, 3));
        let t = ProbeTiming::of(&Probe {
            period_seconds: Some(0),
            ..Default::default()
        });
        assert_eq!(t.period, Duration::from_secs(1));
    }

    #[test]
    fn http_probe_targets_pod_ip_and_named_port() {
        let container = Container {
            ports: Some(vec![ContainerPort {
                name: Some("client".into()),
                container_port: 2379,
                ..Default::default()
            }]),
            ..Default::default()
        };
        let check = check_of(
            &http_probe(IntOrString::String("client".into())),
            &container,
            "127.0.1.2",
        )
        .unwrap();
        assert_eq!(
            check,
            Check::Http {
                tls: false,
                host: "127.0.1.2".into(),
                port: 2379,
                path: "/health".into(),
                headers: vec![]
            }
        );
        assert!(
            check_of(
                &http_probe(IntOrString::String("nope".into())),
                &container,
                "x"
            )
            .is_err()
        );
    }

    #[test]
    fn tracker_needs_success_threshold_and_tolerates_failures() {
        let timing = ProbeTiming {
            success_threshold: 2,
            failure_threshold: 2,
            ..ProbeTiming::of(&Probe::default())
        };
        let mut t = ProbeTracker::new(&timing);
        assert!(!t.record(true));
        assert!(t.record(true));
        assert!(t.record(false));
        assert!(!t.record(false));
        assert!(!t.record(true));
        assert!(t.record(true));
    }

    #[test]
    fn passing_tracker_fails_only_after_failure_threshold() {
        let mut t = ProbeTracker::passing(&ProbeTiming::of(&Probe::default()));
        assert!(t.record(false));
        assert!(t.record(false));
        assert!(!t.record(false));
        assert!(t.record(true));
    }

    #[test]
    fn status_line_is_parsed() {
        assert_eq!(parse_status_code(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(
            parse_status_code(b"HTTP/1.0 503 Service Unavailable\r\nx"),
            Some(503)
        );
        assert_eq!(parse_status_code(b"garbage"), None);
    }

    #[tokio::test]
    async fn http_check_accepts_2xx_and_rejects_5xx() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            for code in ["200 OK", "503 Unavailable"] {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(format!("HTTP/1.1 {code}\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await;
            }
        });
        let check = Check::Http {
            tls: false,
            host: "127.0.0.1".into(),
            port,
            path: "/health".into(),
            headers: vec![],
        };
        assert!(run_check(&check, Duration::from_secs(2), 0, &[]).await);
        assert!(!run_check(&check, Duration::from_secs(2), 0, &[]).await);
    }

    #[tokio::test]
    async fn an_https_probe_accepts_a_self_signed_server_and_plain_http_does_not_reach_it() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let Ok(mut s) = acceptor.accept(tcp).await else {
                    continue;
                };
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                    .await;
                let _ = s.shutdown().await;
            }
        });
        let check = |tls| Check::Http {
            tls,
            host: "127.0.0.1".into(),
            port,
            path: "/healthz".into(),
            headers: vec![],
        };
        assert!(run_check(&check(true), Duration::from_secs(2), 0, &[]).await);
        assert!(!run_check(&check(false), Duration::from_secs(2), 0, &[]).await);
    }

    #[test]
    fn a_probe_scheme_other_than_http_or_https_is_refused() {
        let mut probe = http_probe(IntOrString::Int(80));
        probe.http_get.as_mut().unwrap().scheme = Some("GOPHER".into());
        let error = check_of(&probe, &Container::default(), "x").unwrap_err();
        assert!(error.contains("GOPHER"), "{error}");
        probe.http_get.as_mut().unwrap().scheme = Some("HTTPS".into());
        assert!(matches!(
            check_of(&probe, &Container::default(), "x"),
            Ok(Check::Http { tls: true, .. })
        ));
    }
}
