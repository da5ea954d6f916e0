//! The gate of a prepared joiner (`etcd-operator await-membership`): the init container
//! that holds a new member's etcd back until etcd's member list holds its peer URL.
//!
//! The operator makes a joiner's pod before its `member add`, so that the cluster DNS
//! publishes the new member's name before the leader first asks for it (a name asked for
//! too early is cached as unknown for the DNS's negative TTL, during which the leader
//! cannot reach its new member). Its etcd must not start before the add: it would find a
//! cluster that does not know it, and exit. So the gate asks the members already there
//! until they list the joiner's peer URL; then it exits and etcd starts. It never looks up
//! its own name (which would put a miss in the DNS's cache, the very thing the order
//! avoids).
//!
//! Two ways to ask ([`Api`]): the members' peer listener (`GET <peer URL>/members`, the
//! call a joining etcd makes itself), used without TLS; and their client listener (etcd's
//! `MemberList` over gRPC, through the operator's own etcd adapter), used with TLS and the
//! operator's client certificate that member pods mount (not etcd's JSON gateway: it
//! dials etcd with the member's server certificate as a client certificate, which the
//! operator's server certificates are not made for). Why not the peer listener
//! with the pod's peer certificate: etcd checks a client certificate that carries names
//! against the connecting address by a reverse lookup, and the gate's first questions may
//! come before the pod's address is published, a miss the cluster DNS would then cache,
//! refusing the gate and the joiner's own etcd for the negative TTL. The operator's client
//! certificate carries no names: nothing is looked up.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_operator_actors::ports::{EtcdApi, EtcdError};
use serde::Deserialize;

use crate::etcd_api::EtcdClientApi;
use crate::tls::ClientIdentity;

/// How long a member that lists the joiner may be waited for by the other members that
/// answer without it yet (they apply the add moments later): past it, one member listing
/// the joiner is enough. etcd, once started, asks them in turn and retries when one lags.
const LAGGARD_GRACE: Duration = Duration::from_secs(5);

/// Which listener of the members the gate asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// The peer listener: `GET <peer URL>/members`.
    Peer,
    /// The client listener: etcd's `MemberList` over gRPC.
    Client,
}

/// What the gate waits for, and how it asks.
#[derive(Debug, Clone)]
pub struct Gate {
    /// This member's own peer URL, as the operator adds it.
    pub peer_url: String,
    /// The URLs of the members it joins (never its own), on the listener `api` names.
    pub ask: Vec<String>,
    /// Which listener `ask` names.
    pub api: Api,
    /// With TLS: the CA bundle of the members' certificates on that listener, and the
    /// certificate (and key) the gate presents.
    pub tls: Option<GateTls>,
    /// Time between two rounds of questions.
    pub interval: Duration,
    /// Deadline of one question (connecting included).
    pub timeout: Duration,
    /// The member's data directory: when etcd has written its member there, the pod ran
    /// as a member before (its sandbox was made again, say after a node restart) and
    /// starts without asking anyone: the members it was built to join may be gone, and
    /// waiting for them could keep a cluster that still has a quorum from coming back.
    pub data_dir: Option<PathBuf>,
}

/// The certificate files the gate uses.
#[derive(Debug, Clone)]
pub struct GateTls {
    /// CA bundle the members' certificates are signed by.
    pub ca: PathBuf,
    /// The certificate the gate presents (etcd asks for a client certificate).
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// Why the gate cannot start asking.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// It was given no member to ask.
    #[error("no member to ask")]
    NoMember,
    /// It was asked to ask its own member, whose name it must never look up.
    #[error("asked to ask this member's own peer URL {0}: the gate never asks about its own name")]
    AsksItself(String),
    /// A certificate file cannot be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A certificate file holds no usable PEM (`what` says which).
    #[error("{what} {path}: {source}")]
    Pem {
        /// `the CA bundle` or `the certificate`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// reqwest's error.
        source: reqwest::Error,
    },
    /// The HTTP client cannot be built.
    #[error("building the HTTP client: {0}")]
    HttpClient(reqwest::Error),
}

/// Why one member did not say whether it lists the joiner (the gate asks again).
#[derive(Debug, thiserror::Error)]
enum AskError {
    /// No answer over HTTP: refused, TLS, a timeout (the error with its sources).
    #[error("{url}: {detail}")]
    Unreachable { url: String, detail: String },
    /// An answer, but not a success.
    #[error("{url}: HTTP {status}")]
    Status {
        url: String,
        status: reqwest::StatusCode,
    },
    /// A success whose body is not etcd's member list.
    #[error("{url}: the member list is not etcd's: {source}")]
    NotEtcd {
        url: String,
        source: serde_json::Error,
    },
    /// The client listener's `MemberList` failed.
    #[error("{url}: {source}")]
    Etcd { url: String, source: EtcdError },
}

/// One member of etcd's peer `/members` answer, or of the gateway's member list; only
/// the peer URLs matter here.
#[derive(Debug, Deserialize)]
struct PeerMember {
    #[serde(rename = "peerURLs", default)]
    peer_urls: Vec<String>,
}

/// What one round of questions found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Round {
    /// No member answered.
    NoAnswer(String),
    /// Some members answered; `listed` of them hold the joiner, `without` do not.
    Answered { listed: usize, without: Vec<String> },
}

/// How the gate asks: over HTTP (the peer listener) or through the etcd adapter (the
/// client listener).
enum Asker {
    Peer(reqwest::Client),
    Client(EtcdClientApi),
}

/// Reads the certificate files.
fn identity(tls: &GateTls) -> Result<ClientIdentity, GateError> {
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|source| GateError::Read {
            path: path.clone(),
            source,
        })
    };
    Ok(ClientIdentity {
        ca_pem: read(&tls.ca)?,
        cert_pem: read(&tls.cert)?,
        key_pem: read(&tls.key)?,
    })
}

/// Builds what the gate asks with.
fn asker(gate: &Gate) -> Result<Asker, GateError> {
    let identity = gate.tls.as_ref().map(identity).transpose()?;
    if gate.api == Api::Client {
        let api = EtcdClientApi::new(gate.timeout);
        return Ok(Asker::Client(match identity {
            Some(id) => api.with_identity(Arc::new(move || Some(id.clone()))),
            None => api,
        }));
    }
    // reqwest's TLS takes the process's default provider: ring, the one compiled in (an
    // error only says one is installed already).
    let _ = rustls::crypto::ring::default_provider().install_default();
    // HTTP/1.1, as a joining etcd asks: etcd's peer listener closes HTTP/2 streams of
    // this path.
    let mut builder = reqwest::Client::builder()
        .connect_timeout(gate.timeout)
        .timeout(gate.timeout)
        .http1_only()
        .no_proxy();
    if let (Some(tls), Some(id)) = (&gate.tls, identity) {
        let ca =
            reqwest::Certificate::from_pem_bundle(&id.ca_pem).map_err(|source| GateError::Pem {
                what: "the CA bundle",
                path: tls.ca.clone(),
                source,
            })?;
        let mut pem = id.cert_pem;
        pem.push(b'\n');
        pem.extend(id.key_pem);
        let identity = reqwest::Identity::from_pem(&pem).map_err(|source| GateError::Pem {
            what: "the certificate",
            path: tls.cert.clone(),
            source,
        })?;
        builder = builder.tls_certs_only(ca).identity(identity);
    }
    let client = builder.build().map_err(GateError::HttpClient)?;
    Ok(Asker::Peer(client))
}

/// The URL of a member's peer `/members`.
fn members_url(peer: &str) -> String {
    format!("{}/members", peer.trim_end_matches('/'))
}

fn same_url(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// Asks one member whether it lists `own`.
async fn ask(asker: &Asker, url: &str, own: &str) -> Result<bool, AskError> {
    let peer_urls: Vec<Vec<String>> = match asker {
        Asker::Peer(client) => {
            let body = fetch(client.get(members_url(url)), url).await?;
            serde_json::from_slice::<Vec<PeerMember>>(&body)
                .map_err(|source| AskError::NotEtcd {
                    url: url.to_string(),
                    source,
                })?
                .into_iter()
                .map(|m| m.peer_urls)
                .collect()
        }
        Asker::Client(api) => api
            .list(&[url.to_string()])
            .await
            .map_err(|source| AskError::Etcd {
                url: url.to_string(),
                source,
            })?
            .members
            .into_iter()
            .map(|m| m.peer_urls)
            .collect(),
    };
    Ok(peer_urls.iter().flatten().any(|u| same_url(u, own)))
}

/// Sends `request` to member `url`; the body of a successful answer.
async fn fetch(request: reqwest::RequestBuilder, url: &str) -> Result<bytes::Bytes, AskError> {
    let unreachable = |detail: String| AskError::Unreachable {
        url: url.to_string(),
        detail,
    };
    let response = request
        .send()
        .await
        .map_err(|e| unreachable(error_chain(&e)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(AskError::Status {
            url: url.to_string(),
            status,
        });
    }
    response
        .bytes()
        .await
        .map_err(|e| unreachable(format!("reading the member list: {}", error_chain(&e))))
}

/// An error with its sources, which say what really failed (refused, TLS, timeout).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Asks every member at once.
async fn round(asker: &Asker, gate: &Gate) -> Round {
    let questions = gate.ask.iter().map(|url| ask(asker, url, &gate.peer_url));
    let answers = futures::future::join_all(questions).await;
    let mut listed = 0;
    let mut without = Vec::new();
    let mut errors = Vec::new();
    for (peer, answer) in gate.ask.iter().zip(answers) {
        match answer {
            Ok(true) => listed += 1,
            Ok(false) => without.push(peer.clone()),
            Err(e) => errors.push(e.to_string()),
        }
    }
    if listed == 0 && without.is_empty() {
        return Round::NoAnswer(errors.join("; "));
    }
    Round::Answered { listed, without }
}

/// Waits until the members list `gate.peer_url`: every member that answers lists it, or
/// one has listed it for [`LAGGARD_GRACE`]. Never gives up (the operator deletes a
/// joiner it will not add); `progress` hears what it waits for whenever that changes.
pub async fn await_membership(
    gate: &Gate,
    mut progress: impl FnMut(&str),
) -> Result<String, GateError> {
    if gate.ask.is_empty() {
        return Err(GateError::NoMember);
    }
    if gate.ask.iter().any(|p| same_url(p, &gate.peer_url)) {
        return Err(GateError::AsksItself(gate.peer_url.clone()));
    }
    if let Some(dir) = &gate.data_dir
        && dir.join("member").exists()
    {
        return Ok(format!(
            "{} has run as a member already (its data is in {}): etcd may start",
            gate.peer_url,
            dir.display()
        ));
    }
    let asker = asker(gate)?;
    let mut first_listed: Option<Instant> = None;
    let mut said = String::new();
    loop {
        let found = round(&asker, gate).await;
        let waiting = match &found {
            Round::Answered { listed, without } if *listed > 0 => {
                let since = *first_listed.get_or_insert_with(Instant::now);
                if without.is_empty() || since.elapsed() >= LAGGARD_GRACE {
                    return Ok(format!(
                        "{} is a member ({listed} of {} members list it): etcd may start",
                        gate.peer_url,
                        gate.ask.len()
                    ));
                }
                format!(
                    "{} list {} already, waiting for {} to apply the add",
                    listed,
                    gate.peer_url,
                    without.join(", ")
                )
            }
            Round::Answered { without, .. } => format!(
                "not a member yet: {} do not list {}",
                without.join(", "),
                gate.peer_url
            ),
            Round::NoAnswer(errors) => format!("no member answers: {errors}"),
        };
        if waiting != said {
            progress(&waiting);
            said = waiting;
        }
        tokio::time::sleep(gate.interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_urls_compare_without_a_trailing_slash() {
        assert!(same_url("http://a:2380/", "http://a:2380"));
        assert!(!same_url("http://a:2380", "https://a:2380"));
        assert_eq!(members_url("http://a:2380/"), "http://a:2380/members");
    }

    #[test]
    fn the_peer_members_answer_is_read_as_etcd_writes_it() {
        let body = r#"[{"id":12345678901234567890,"peerURLs":["http://a:2380"],"name":"a",
            "clientURLs":["http://a:2379"]},{"id":2,"peerURLs":["http://b:2380"],"name":"",
            "clientURLs":[],"isLearner":true}]"#;
        let members: Vec<PeerMember> = serde_json::from_str(body).unwrap();
        assert_eq!(members.len(), 2);
        assert_eq!(members[1].peer_urls, vec!["http://b:2380".to_string()]);
    }

    #[tokio::test]
    async fn a_gate_that_would_ask_about_its_own_name_refuses_to_start() {
        let gate = Gate {
            peer_url: "http://m3.demo.default.svc:2380".into(),
            ask: vec!["http://m3.demo.default.svc:2380".into()],
            api: Api::Peer,
            tls: None,
            interval: Duration::from_millis(10),
            timeout: Duration::from_millis(10),
            data_dir: None,
        };
        let error = await_membership(&gate, |_| {}).await.unwrap_err();
        assert!(matches!(error, GateError::AsksItself(_)), "{error}");
        assert!(error.to_string().contains("own peer URL"), "{error}");
        let none = Gate {
            ask: vec![],
            ..gate
        };
        let error = await_membership(&none, |_| {}).await.unwrap_err();
        assert!(matches!(error, GateError::NoMember), "{error}");
    }

    #[tokio::test]
    async fn a_pod_whose_etcd_already_ran_as_a_member_starts_without_asking_anyone() {
        let dir = std::env::temp_dir().join(format!("gate-data-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("member/wal")).unwrap();
        // Nobody answers at this address: asking would wait for ever.
        let gate = Gate {
            peer_url: "http://m3.demo.default.svc:2380".into(),
            ask: vec!["http://127.0.0.1:9".into()],
            api: Api::Peer,
            tls: None,
            interval: Duration::from_millis(10),
            timeout: Duration::from_millis(10),
            data_dir: Some(dir.clone()),
        };
        let done = tokio::time::timeout(Duration::from_secs(5), await_membership(&gate, |_| {}))
            .await
            .expect("no waiting")
            .unwrap();
        assert!(done.contains("has run as a member already"), "{done}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
