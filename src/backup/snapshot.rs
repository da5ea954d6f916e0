//! Taking a snapshot: which member it is taken from, and its stream.
//!
//! The members are found from the first endpoint of the cluster that answers (its member
//! list); each voting member with a client URL is asked for its status on its own. Every
//! endpoint is dialed by a [`Dialer`]: over TLS with the backup's client certificate, or
//! plain. A healthy follower is
//! preferred (the most up to date one: highest raft index), so the leader's disk and
//! network are spared; the leader is used when it is the only healthy member.

use std::time::Duration;

use etcd_client::{MemberListResponse, SnapshotStreaming};

use super::dial::Dialer;

/// Why no snapshot stream could be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// The cluster did not answer (member list).
    #[error("etcd at {endpoints} did not answer: {message}")]
    Unavailable {
        /// The endpoints tried.
        endpoints: String,
        /// What the client said.
        message: String,
    },
    /// No voting member answered its status without errors.
    #[error("no healthy voting member to take a snapshot from: {0}")]
    NoHealthyMember(String),
    /// The snapshot call or its stream failed.
    #[error("the snapshot stream from {endpoint} failed: {message}")]
    Stream {
        /// The member's endpoint.
        endpoint: String,
        /// What the client said.
        message: String,
    },
}

impl SnapshotError {
    /// CamelCase reason for status and Events.
    pub fn reason(&self) -> &'static str {
        match self {
            SnapshotError::Unavailable { .. } => "EtcdUnavailable",
            SnapshotError::NoHealthyMember(_) => "NoHealthyMember",
            SnapshotError::Stream { .. } => "SnapshotFailed",
        }
    }
}

/// The member a snapshot is taken from, and what it said of itself just before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChosenMember {
    /// Its client URL.
    pub endpoint: String,
    /// Its member ID.
    pub member_id: u64,
    /// The cluster's ID.
    pub cluster_id: u64,
    /// Its etcd version.
    pub version: String,
    /// Its revision just before the snapshot (a lower bound of the snapshot's).
    pub revision: i64,
    /// Whether it was the leader.
    pub leader: bool,
    /// Its raft index.
    pub raft_index: u64,
}

fn text(err: &etcd_client::Error) -> String {
    crate::etcd_api::describe(err)
}

async fn with_deadline<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, etcd_client::Error> {
    tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| etcd_client::Error::InvalidArgs(format!("no answer within {timeout:?}")))?
}

/// The member list, from the first of `endpoints` that answers it.
async fn member_list(
    dialer: &Dialer,
    endpoints: &[String],
    timeout: Duration,
) -> Result<MemberListResponse, SnapshotError> {
    let mut problems = Vec::new();
    for endpoint in endpoints {
        let answer = async {
            let mut client = dialer
                .connect(endpoint, timeout)
                .await
                .map_err(|e| e.to_string())?;
            with_deadline(timeout, client.member_list())
                .await
                .map_err(|e| text(&e))
        };
        match answer.await {
            Ok(list) => return Ok(list),
            Err(problem) if endpoints.len() == 1 => problems.push(problem),
            Err(problem) => problems.push(format!("{endpoint}: {problem}")),
        }
    }
    Err(SnapshotError::Unavailable {
        endpoints: endpoints.join(","),
        message: if problems.is_empty() {
            "no endpoints".to_string()
        } else {
            problems.join("; ")
        },
    })
}

/// The client URLs of the voting members, found through `endpoints`.
async fn voting_members(
    dialer: &Dialer,
    endpoints: &[String],
    timeout: Duration,
) -> Result<Vec<String>, SnapshotError> {
    let list = member_list(dialer, endpoints, timeout).await?;
    Ok(list
        .members()
        .iter()
        .filter(|m| !m.is_learner())
        .filter_map(|m| m.client_urls().first().cloned())
        .collect())
}

/// What one member says of itself; `Err` with why it is not a candidate.
async fn member_status(
    dialer: &Dialer,
    endpoint: &str,
    timeout: Duration,
) -> Result<ChosenMember, String> {
    let mut client = dialer
        .connect(endpoint, timeout)
        .await
        .map_err(|e| e.to_string())?;
    let status = with_deadline(timeout, client.status())
        .await
        .map_err(|e| text(&e))?;
    if !status.errors().is_empty() {
        return Err(status.errors().join("; "));
    }
    let header = status.header().ok_or("no header in its status")?;
    Ok(ChosenMember {
        endpoint: endpoint.to_string(),
        member_id: header.member_id(),
        cluster_id: header.cluster_id(),
        version: status.version().to_string(),
        revision: header.revision(),
        leader: status.leader() == header.member_id(),
        raft_index: status.raft_index(),
    })
}

/// The member to take the snapshot from (see the module documentation), each endpoint
/// dialed by `dialer`.
pub async fn choose_member(
    dialer: &Dialer,
    endpoints: &[String],
    timeout: Duration,
) -> Result<ChosenMember, SnapshotError> {
    let urls = voting_members(dialer, endpoints, timeout).await?;
    let answers =
        futures::future::join_all(urls.iter().map(|u| member_status(dialer, u, timeout))).await;
    let mut problems = Vec::new();
    let mut healthy = Vec::new();
    for (url, answer) in urls.iter().zip(answers) {
        match answer {
            Ok(member) => healthy.push(member),
            Err(problem) => problems.push(format!("{url}: {problem}")),
        }
    }
    pick(healthy).ok_or_else(|| {
        SnapshotError::NoHealthyMember(if problems.is_empty() {
            "the member list has no voting member with a client URL".to_string()
        } else {
            problems.join("; ")
        })
    })
}

/// A follower with the highest raft index, else the leader (or any member).
pub fn pick(mut healthy: Vec<ChosenMember>) -> Option<ChosenMember> {
    healthy.sort_by_key(|m| (!m.leader, m.raft_index));
    healthy.pop()
}

/// Opens the snapshot stream of `member`, dialed by `dialer`.
pub async fn open(
    dialer: &Dialer,
    member: &ChosenMember,
    timeout: Duration,
) -> Result<SnapshotStreaming, SnapshotError> {
    let failed = |message: String| SnapshotError::Stream {
        endpoint: member.endpoint.clone(),
        message,
    };
    let mut client = dialer
        .connect(&member.endpoint, timeout)
        .await
        .map_err(|e| failed(e.to_string()))?;
    with_deadline(timeout, client.snapshot())
        .await
        .map_err(|e| failed(text(&e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u64, leader: bool, raft_index: u64) -> ChosenMember {
        ChosenMember {
            endpoint: format!("http://m{id}:2379"),
            member_id: id,
            cluster_id: 1,
            version: "3.5.35".into(),
            revision: 10,
            leader,
            raft_index,
        }
    }

    #[test]
    fn the_most_up_to_date_follower_is_preferred_over_the_leader() {
        let chosen = pick(vec![
            member(1, true, 90),
            member(2, false, 80),
            member(3, false, 85),
        ]);
        assert_eq!(chosen.unwrap().member_id, 3);
    }

    #[test]
    fn the_leader_is_used_when_it_is_the_only_healthy_member() {
        assert_eq!(pick(vec![member(1, true, 9)]).unwrap().member_id, 1);
        assert_eq!(pick(Vec::new()), None);
    }
}
