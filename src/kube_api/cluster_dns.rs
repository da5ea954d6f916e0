//! Whether the cluster DNS itself serves a member's name yet, asked so that the question
//! can never leave a miss where etcd's own lookups would find it.
//!
//! The operator adds a member only once its pod's address is in the headless Service's
//! EndpointSlices (its cache). The cluster DNS (CoreDNS) watches the same slices, but under
//! load it may see them later than the operator: the leader and the joiner's etcd then ask
//! for the new name right after `member add`, get NXDOMAIN, and the DNS caches that miss
//! for its negative TTL (5 s, 30 s as kubeadm sets it up): the new member cannot start for
//! that long (seen in `benches/fleet.sh`, a follower of each of 10 clusters replaced at
//! once: 2 of 10 joiners stalled 5 s).
//!
//! So before the add the operator asks the cluster DNS too, for a record type nobody else
//! asks for: a private-use type (65280..=65534), a different one at each question. CoreDNS
//! caches answers by name *and type*, so a miss of such a question is cached where no
//! A or AAAA lookup looks, and the next question, of another type, is answered afresh. For
//! a type it does not serve, CoreDNS's kubernetes plugin answers NXDOMAIN when the name
//! does not exist and an empty NOERROR when it does: exactly the question.
//!
//! A DNS that does not answer that way would block every add; so the check is first
//! proven on a name that exists (`kubernetes.default.svc`), and left off when it fails.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::time::Instant;

/// The first private-use record type (RFC 6895).
const FIRST_TYPE: u16 = 65280;
/// How many private-use types there are (65280..=65534).
const TYPES: u16 = 255;
/// The class of every question: IN.
const CLASS_IN: u16 = 1;
/// How long one question waits for its answer.
const TIMEOUT: Duration = Duration::from_millis(500);

/// Why a question got no answer that says yes or no.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    /// Sending or receiving failed.
    #[error("asking the cluster DNS at {server}: {message}")]
    Io {
        /// The DNS server.
        server: SocketAddr,
        /// What failed.
        message: String,
    },
    /// No answer in time.
    #[error("the cluster DNS at {0} did not answer within {TIMEOUT:?}")]
    Timeout(SocketAddr),
    /// An answer that is not one to this question, or an error code.
    #[error("the cluster DNS at {server} answered {what}")]
    Answer {
        /// The DNS server.
        server: SocketAddr,
        /// What was wrong with the answer.
        what: String,
    },
}

/// The cluster DNS as a pod of the cluster sees it: its server and the cluster's domain.
#[derive(Debug)]
pub struct ClusterDns {
    server: SocketAddr,
    domain: String,
    next: AtomicU16,
}

impl ClusterDns {
    /// The cluster DNS of the pod whose `/etc/resolv.conf` is `text`: its first
    /// nameserver, and the domain after `svc.` in its search list (`svc.cluster.local`).
    /// `None` outside a cluster's pod (no such search entry).
    pub fn from_resolv_conf(text: &str) -> Option<Self> {
        let mut server = None;
        let mut domain = None;
        for line in text.lines() {
            let mut words = line.split_whitespace();
            match words.next() {
                Some("nameserver") if server.is_none() => {
                    server = words.next().and_then(|w| w.parse::<IpAddr>().ok());
                }
                Some("search") => {
                    domain = words
                        .find_map(|w| w.strip_prefix("svc."))
                        .map(|d| d.trim_end_matches('.').to_string());
                }
                _ => {}
            }
        }
        Some(ClusterDns::new(SocketAddr::new(server?, 53), &domain?))
    }

    /// The cluster DNS at `server`, for names under `domain` (`cluster.local`).
    pub fn new(server: SocketAddr, domain: &str) -> Self {
        ClusterDns {
            server,
            domain: domain.trim_end_matches('.').to_string(),
            next: AtomicU16::new(0),
        }
    }

    /// Whether the DNS answers questions of a private-use type as this check needs: a name
    /// that exists (`kubernetes.default.svc`, the API server's Service) must not be a miss.
    pub async fn answers_as_needed(&self) -> Result<bool, DnsError> {
        self.serves("kubernetes.default.svc").await
    }

    /// Whether the DNS serves `host` (`<member>.<cluster>.<ns>.svc`, under the cluster's
    /// domain): `false` on NXDOMAIN. Asked with a record type nobody asks for.
    pub async fn serves(&self, host: &str) -> Result<bool, DnsError> {
        let name = format!("{}.{}", host.trim_end_matches('.'), self.domain);
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        let qtype = FIRST_TYPE + turn % TYPES;
        let id = turn.wrapping_mul(40503).wrapping_add(qtype);
        let io = |e: std::io::Error| DnsError::Io {
            server: self.server,
            message: e.to_string(),
        };
        let bind: SocketAddr = if self.server.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            ([0u16; 8], 0).into()
        };
        let socket = UdpSocket::bind(bind).await.map_err(io)?;
        socket.connect(self.server).await.map_err(io)?;
        socket.send(&query(id, &name, qtype)).await.map_err(io)?;
        let mut buf = [0u8; 1500];
        let read = tokio::time::timeout(TIMEOUT, socket.recv(&mut buf))
            .await
            .map_err(|_| DnsError::Timeout(self.server))?
            .map_err(io)?;
        match rcode(&buf[..read], id) {
            Ok(0) => Ok(true),
            Ok(3) => Ok(false),
            Ok(code) => Err(DnsError::Answer {
                server: self.server,
                what: format!("response code {code} for {name}"),
            }),
            Err(what) => Err(DnsError::Answer {
                server: self.server,
                what: what.to_string(),
            }),
        }
    }
}

/// How long the DNS may keep saying no about an address the EndpointSlices publish before
/// the operator goes on without it (a DNS that never catches up must not block the cluster).
const GIVE_UP: Duration = Duration::from_secs(10);

/// One cluster's member addresses as the cluster DNS serves them: asked once per address,
/// then remembered.
pub(crate) struct DnsPublication {
    dns: Arc<ClusterDns>,
    /// The address the DNS was seen to serve for each host.
    served: Mutex<HashMap<String, IpAddr>>,
    /// Since when the DNS said no about a host's address.
    missing: Mutex<HashMap<(String, IpAddr), Instant>>,
}

impl DnsPublication {
    /// Publication as `dns` serves it.
    pub(crate) fn new(dns: Arc<ClusterDns>) -> Self {
        DnsPublication {
            dns,
            served: Mutex::default(),
            missing: Mutex::default(),
        }
    }

    /// Of `published` (hosts whose addresses the EndpointSlices publish, with those
    /// addresses), the hosts the DNS does not serve yet. A host is asked about until the
    /// DNS serves it, or for [`GIVE_UP`]; a DNS that gives no answer holds nothing back.
    pub(crate) async fn not_served(&self, published: Vec<(String, IpAddr)>) -> Vec<String> {
        // What is no longer published (a pod gone) is forgotten.
        lock(&self.served).retain(|host, ip| published.contains(&(host.clone(), *ip)));
        lock(&self.missing).retain(|key, _| published.contains(key));
        let unknown: Vec<(String, IpAddr)> = {
            let served = lock(&self.served);
            published
                .into_iter()
                .filter(|(host, ip)| served.get(host) != Some(ip))
                .collect()
        };
        let answers =
            futures::future::join_all(unknown.iter().map(|(host, _)| self.dns.serves(host))).await;
        let now = Instant::now();
        let mut held = Vec::new();
        for ((host, ip), answer) in unknown.into_iter().zip(answers) {
            let key = (host.clone(), ip);
            if answer == Ok(false) {
                let since = *lock(&self.missing).entry(key.clone()).or_insert(now);
                if now.duration_since(since) < GIVE_UP {
                    held.push(host);
                    continue;
                }
            }
            lock(&self.missing).remove(&key);
            if answer.is_ok() {
                lock(&self.served).insert(host, ip);
            }
        }
        held
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the map inconsistent.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A DNS query (RFC 1035 section 4.1): header with recursion desired, one question.
fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut message = Vec::with_capacity(18 + name.len());
    message.extend(id.to_be_bytes());
    message.extend([0x01, 0x00]); // a standard query, recursion desired
    message.extend([0, 1, 0, 0, 0, 0, 0, 0]); // one question, no records
    for label in name.trim_end_matches('.').split('.') {
        let bytes = &label.as_bytes()[..label.len().min(63)];
        message.push(bytes.len() as u8);
        message.extend(bytes);
    }
    message.push(0);
    message.extend(qtype.to_be_bytes());
    message.extend(CLASS_IN.to_be_bytes());
    message
}

/// The response code of `answer`, when it is a response to the query with `id`.
fn rcode(answer: &[u8], id: u16) -> Result<u8, NotAnAnswer> {
    if answer.len() < 12 {
        return Err(NotAnAnswer::Short(answer.len()));
    }
    if u16::from_be_bytes([answer[0], answer[1]]) != id {
        return Err(NotAnAnswer::OtherQuestion);
    }
    if answer[2] & 0x80 == 0 {
        return Err(NotAnAnswer::NotResponse);
    }
    Ok(answer[3] & 0x0f)
}

/// Why a message read back is not the answer to the question asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum NotAnAnswer {
    /// Shorter than a DNS header.
    #[error("{0} bytes, too short for a DNS header")]
    Short(usize),
    /// Its ID is another query's.
    #[error("an answer to another question")]
    OtherQuestion,
    /// Its QR bit says it is a query.
    #[error("a message that is not a response")]
    NotResponse,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pods_resolv_conf_names_the_cluster_dns_and_domain() {
        let pod = "search demo.svc.cluster.local svc.cluster.local cluster.local\n\
                   nameserver 10.96.0.10\noptions ndots:5\n";
        let dns = ClusterDns::from_resolv_conf(pod).unwrap();
        assert_eq!(dns.server, "10.96.0.10:53".parse().unwrap());
        assert_eq!(dns.domain, "cluster.local");
        // A host's resolv.conf has no cluster domain: no check.
        let host = "nameserver 192.168.1.1\nsearch example.com\n";
        assert!(ClusterDns::from_resolv_conf(host).is_none());
    }

    #[test]
    fn a_query_holds_one_question_of_the_type_asked() {
        let q = query(0x1234, "a.demo.ns.svc.cluster.local", 65280);
        assert_eq!(&q[..4], &[0x12, 0x34, 0x01, 0x00]);
        assert_eq!(&q[4..12], &[0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&q[12..14], &[1, b'a']);
        assert_eq!(&q[q.len() - 5..], &[0, 0xff, 0x00, 0, 1]);
    }

    #[test]
    fn only_a_response_to_the_question_counts() {
        let mut answer = vec![0x12, 0x34, 0x81, 0x83, 0, 1, 0, 0, 0, 1, 0, 0];
        assert_eq!(rcode(&answer, 0x1234), Ok(3));
        assert!(rcode(&answer, 0x4321).is_err());
        answer[2] = 0x01;
        assert!(rcode(&answer, 0x1234).is_err());
        assert!(rcode(&answer[..5], 0x1234).is_err());
    }

    /// A DNS server on loopback that answers NXDOMAIN to one name and NOERROR to others,
    /// recording the types asked.
    async fn server(missing: &'static str) -> (SocketAddr, tokio::task::JoinHandle<Vec<u16>>) {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut types = Vec::new();
            let mut buf = [0u8; 512];
            for _ in 0..3 {
                let (n, from) = socket.recv_from(&mut buf).await.unwrap();
                let q = &buf[..n];
                let qtype = u16::from_be_bytes([q[n - 4], q[n - 3]]);
                types.push(qtype);
                let asked = String::from_utf8_lossy(&q[12..n - 4]).to_string();
                let mut answer = q.to_vec();
                answer[2] |= 0x80;
                answer[3] = if asked.contains(missing) { 3 } else { 0 };
                socket.send_to(&answer, from).await.unwrap();
            }
            types
        });
        (addr, task)
    }

    #[tokio::test]
    async fn an_address_the_dns_does_not_serve_yet_is_held_back_and_a_served_one_asked_once() {
        let (addr, answered) = server("new").await;
        let publication = DnsPublication::new(Arc::new(ClusterDns::new(addr, "cluster.local")));
        let ip: IpAddr = [10, 244, 1, 2].into();
        let hosts = vec![
            ("new.demo.ns.svc".to_string(), ip),
            ("old.demo.ns.svc".to_string(), ip),
        ];
        assert_eq!(
            publication.not_served(hosts.clone()).await,
            ["new.demo.ns.svc"]
        );
        // The served one is not asked again; the new one is.
        assert_eq!(publication.not_served(hosts).await, ["new.demo.ns.svc"]);
        assert_eq!(answered.await.unwrap().len(), 3);
        // Neither is remembered once no longer published.
        assert_eq!(
            publication.not_served(Vec::new()).await,
            Vec::<String>::new()
        );
        assert!(lock(&publication.served).is_empty());
        assert!(lock(&publication.missing).is_empty());
    }

    #[tokio::test]
    async fn each_question_asks_another_private_type_and_reads_yes_or_no() {
        let (addr, answered) = server("new").await;
        let dns = ClusterDns::new(addr, "cluster.local");
        assert_eq!(dns.answers_as_needed().await, Ok(true));
        assert_eq!(dns.serves("new.demo.ns.svc").await, Ok(false));
        assert_eq!(dns.serves("old.demo.ns.svc").await, Ok(true));
        let types = answered.await.unwrap();
        assert_eq!(types, [65280, 65281, 65282]);
    }
}
