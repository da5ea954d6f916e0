//! HTTPS on the operator's listener. The serving certificate comes from PEM files
//! (`--tls-cert-file`, `--tls-private-key-file`, e.g. a cert-manager Secret mounted by the
//! chart's `servingCertificate.secretName`), re-read every [`RELOAD_INTERVAL`] so that a
//! renewed Secret is served without a restart; without files the operator makes a
//! self-signed certificate at start, which encrypts but proves nothing (clients skip
//! verification, as the kubelet's probes always do).
//!
//! Handshakes run each in its own task with a deadline, so a client that opens a
//! connection and sends nothing holds no one else up.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How often certificate files are checked for a change.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(30);

/// Longest a TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshaken connections waiting for the server to take them.
const ACCEPTED_BACKLOG: usize = 64;

/// Why no certificate could be served.
#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The certificate file holds no PEM certificate.
    #[error("{0}: no PEM certificate in it")]
    NoCertificate(PathBuf),
    /// The key file holds no usable private key.
    #[error("{path}: {problem}")]
    Key {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// A self-signed certificate could not be made.
    #[error("making a self-signed serving certificate: {0}")]
    SelfSigned(String),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// Where the serving certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CertSource {
    /// PEM files, re-read when they change.
    Files {
        /// The certificate chain, leaf first.
        cert: PathBuf,
        /// Its private key.
        key: PathBuf,
    },
    /// A certificate made at start for these names (DNS names or IP addresses).
    SelfSigned(Vec<String>),
}

/// The certificate served now; swapped when its files change.
pub struct ServingCert {
    source: CertSource,
    current: RwLock<Arc<CertifiedKey>>,
    /// The PEM bytes `current` was made from (files only).
    loaded: Mutex<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for ServingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCert")
            .field("source", &self.source)
            .finish()
    }
}

fn read(path: &PathBuf) -> Result<Vec<u8>, ServingError> {
    std::fs::read(path).map_err(|source| ServingError::Read {
        path: path.clone(),
        source,
    })
}

/// The key rustls signs with, from a PEM chain and key.
fn certified_key(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert_path: &Path,
    key_path: &Path,
) -> Result<CertifiedKey, ServingError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(ServingError::NoCertificate(cert_path.to_path_buf()));
    }
    let key_error = |problem: String| ServingError::Key {
        path: key_path.to_path_buf(),
        problem,
    };
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| key_error(e.to_string()))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| key_error(e.to_string()))?;
    let certified = CertifiedKey::new(chain, signing);
    certified
        .keys_match()
        .map_err(|e| key_error(format!("does not match the certificate: {e}")))?;
    Ok(certified)
}

/// A self-signed certificate and key (PEM) for `names`, valid from an hour ago for ten
/// years (it is made anew at every start).
fn self_signed(names: &[String]) -> Result<(String, String), ServingError> {
    let problem = |e: rcgen::Error| ServingError::SelfSigned(e.to_string());
    let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(problem)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "etcd-operator");
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(3650);
    let key = rcgen::KeyPair::generate().map_err(problem)?;
    let cert = params.self_signed(&key).map_err(problem)?;
    Ok((cert.pem(), key.serialize_pem()))
}

impl ServingCert {
    /// The certificate `source` gives now.
    pub fn load(source: CertSource) -> Result<Arc<Self>, ServingError> {
        let (cert_pem, key_pem, cert_path, key_path) = match &source {
            CertSource::Files { cert, key } => (read(cert)?, read(key)?, cert.clone(), key.clone()),
            CertSource::SelfSigned(names) => {
                let (cert, key) = self_signed(names)?;
                let generated = PathBuf::from("<self-signed>");
                (
                    cert.into_bytes(),
                    key.into_bytes(),
                    generated.clone(),
                    generated,
                )
            }
        };
        let current = certified_key(&cert_pem, &key_pem, &cert_path, &key_path)?;
        Ok(Arc::new(ServingCert {
            source,
            current: RwLock::new(Arc::new(current)),
            loaded: Mutex::new((cert_pem, key_pem)),
        }))
    }

    /// Re-reads the files; `Ok(true)` when a changed certificate is now served. A file
    /// that cannot be used leaves the current certificate in place.
    pub fn reload(&self) -> Result<bool, ServingError> {
        let CertSource::Files { cert, key } = &self.source else {
            return Ok(false);
        };
        let (cert_pem, key_pem) = (read(cert)?, read(key)?);
        let mut loaded = self.loaded.lock().expect("loaded lock");
        if loaded.0 == cert_pem && loaded.1 == key_pem {
            return Ok(false);
        }
        let fresh = certified_key(&cert_pem, &key_pem, cert, key)?;
        *self.current.write().expect("current lock") = Arc::new(fresh);
        *loaded = (cert_pem, key_pem);
        Ok(true)
    }

    /// The leaf certificate served now (DER).
    #[cfg(test)]
    pub fn leaf(&self) -> CertificateDer<'static> {
        self.current.read().expect("current lock").cert[0].clone()
    }

    /// The rustls server configuration serving this certificate (HTTP/1.1).
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, ServingError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ServingError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().expect("current lock").clone())
    }
}

/// Accepted TLS connections, for `axum::serve`.
pub struct TlsListener {
    accepted: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accepts on `tcp` in the background, each handshake in its own task.
    pub fn new(tcp: TcpListener, config: Arc<rustls::ServerConfig>) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let (sender, accepted) = mpsc::channel(ACCEPTED_BACKLOG);
        let acceptor = TlsAcceptor::from(config);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(connection) => connection,
                    Err(_) => {
                        // Out of file descriptors, mostly: wait rather than spin.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if sender.is_closed() {
                    return;
                }
                let (acceptor, sender) = (acceptor.clone(), sender.clone());
                tokio::spawn(async move {
                    let handshake =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream));
                    if let Ok(Ok(tls)) = handshake.await {
                        let _ = sender.send((tls, peer)).await;
                    }
                });
            }
        });
        Ok(TlsListener { accepted, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(connection) => connection,
            // The accept loop never ends while this receiver lives.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &std::path::Path, names: &[&str]) -> CertSource {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let (cert, key) = self_signed(&names).unwrap();
        std::fs::write(dir.join("tls.crt"), cert).unwrap();
        std::fs::write(dir.join("tls.key"), key).unwrap();
        CertSource::Files {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("serving-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_renewed_certificate_file_is_served_after_a_reload_and_a_broken_one_is_not() {
        let dir = temp_dir("reload");
        let source = write_pair(&dir, &["one.example"]);
        let serving = ServingCert::load(source).unwrap();
        let first = serving.leaf();
        assert!(!serving.reload().unwrap(), "nothing changed");
        write_pair(&dir, &["two.example"]);
        assert!(serving.reload().unwrap());
        let second = serving.leaf();
        assert_ne!(first, second);
        std::fs::write(dir.join("tls.key"), "not a key").unwrap();
        assert!(matches!(serving.reload(), Err(ServingError::Key { .. })));
        assert_eq!(serving.leaf(), second, "the broken pair is not served");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_key_that_does_not_match_the_certificate_is_refused_with_the_file_named() {
        let dir = temp_dir("mismatch");
        write_pair(&dir, &["a.example"]);
        let other = self_signed(&["b.example".to_string()]).unwrap();
        std::fs::write(dir.join("tls.key"), other.1).unwrap();
        let source = CertSource::Files {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        };
        let error = ServingCert::load(source).unwrap_err().to_string();
        assert!(
            error.contains("tls.key") && error.contains("does not match"),
            "{error}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_missing_file_is_named_in_the_error() {
        let source = CertSource::Files {
            cert: "/nonexistent/tls.crt".into(),
            key: "/nonexistent/tls.key".into(),
        };
        let error = ServingCert::load(source).unwrap_err().to_string();
        assert!(error.contains("/nonexistent/tls.crt"), "{error}");
    }
}
