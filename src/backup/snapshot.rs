//! Taking a snapshot: which member it is taken from, and its stream.
//!
//! The members are found from the first endpoint of the cluster that answers (its member
//! list); each voting member with a client URL is asked for its status on its own. Every
//! endpoint is dialed by a [`Dialer`]: over TLS with the backup's client certificate, or
//! plain. The member with the highest applied revision is chosen (the newest data; its
//! raft applied index breaks ties), a follower among equals, so the leader's disk and
//! network are spared when a follower is as up to date. When the cluster's ID is recorded
//! (the EtcdCluster's status), a member answering with another one refuses the backup.

use std::time::Duration;

use etcd_client::{MemberListResponse, SnapshotStreaming};

use super::dial::{DialError, Dialer};
use super::scope::OutsideNamespace;

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
    /// A member answered with another cluster ID than the one recorded for the cluster.
    #[error(
        "the member at {endpoint} answers with cluster ID {found:x}, not the cluster's \
         recorded ID {recorded:x}: it is not this cluster's data, no backup is taken"
    )]
    OtherCluster {
        /// The member's endpoint.
        endpoint: String,
        /// The cluster ID it answered with.
        found: u64,
        /// The cluster ID recorded for the cluster.
        recorded: u64,
    },
    /// An endpoint, or a member's client URL in the member list, is outside what the
    /// backup may dial: nothing is asked of any member.
    #[error(transparent)]
    OutsideNamespace(#[from] OutsideNamespace),
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
            SnapshotError::OtherCluster { .. } => "ClusterIDMismatch",
            SnapshotError::OutsideNamespace(_) => OUTSIDE_NAMESPACE,
            SnapshotError::Stream { .. } => "SnapshotFailed",
        }
    }
}

/// The reason of a backup refused for an endpoint outside its namespace.
pub const OUTSIDE_NAMESPACE: &str = "EndpointOutsideNamespace";

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
    /// Its raft index (committed).
    pub raft_index: u64,
    /// Its raft applied index (0 from an etcd that does not report it).
    pub raft_applied_index: u64,
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

/// The client URLs of the voting members, found through `endpoints`; refused when any
/// member's client URL is outside what `dialer` may reach (a cluster does not choose
/// where the operator dials).
async fn voting_members(
    dialer: &Dialer,
    endpoints: &[String],
    timeout: Duration,
) -> Result<Vec<String>, SnapshotError> {
    let list = member_list(dialer, endpoints, timeout).await?;
    let members = list.members();
    for url in members.iter().flat_map(|m| m.client_urls()) {
        dialer.check(url, "the member list's client URL")?;
    }
    Ok(members
        .iter()
        .filter(|m| !m.is_learner())
        .filter_map(|m| m.client_urls().first().cloned())
        .collect())
}

/// Why a voting member is not a candidate to take the snapshot from.
#[derive(Debug, thiserror::Error)]
enum NotACandidate {
    /// It could not be dialed.
    #[error(transparent)]
    Dial(#[from] DialError),
    /// Its status call failed.
    #[error("{0}")]
    Status(String),
    /// Its status lists errors (an alarm, for one).
    #[error("{}", .0.join("; "))]
    Reports(Vec<String>),
    /// Its status has no response header.
    #[error("no header in its status")]
    NoHeader,
}

/// What one member says of itself; `Err` with why it is not a candidate.
async fn member_status(
    dialer: &Dialer,
    endpoint: &str,
    timeout: Duration,
) -> Result<ChosenMember, NotACandidate> {
    let mut client = dialer.connect(endpoint, timeout).await?;
    let status = with_deadline(timeout, client.status())
        .await
        .map_err(|e| NotACandidate::Status(text(&e)))?;
    if !status.errors().is_empty() {
        return Err(NotACandidate::Reports(status.errors().to_vec()));
    }
    let header = status.header().ok_or(NotACandidate::NoHeader)?;
    Ok(ChosenMember {
        endpoint: endpoint.to_string(),
        member_id: header.member_id(),
        cluster_id: header.cluster_id(),
        version: status.version().to_string(),
        revision: header.revision(),
        leader: status.leader() == header.member_id(),
        raft_index: status.raft_index(),
        raft_applied_index: status.raft_applied_index(),
    })
}

/// The member to take the snapshot from (see the module documentation), each endpoint
/// dialed by `dialer`; `recorded`: the cluster ID every member must answer with, when known.
pub async fn choose_member(
    dialer: &Dialer,
    endpoints: &[String],
    timeout: Duration,
    recorded: Option<u64>,
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
    check_cluster(&healthy, recorded)?;
    pick(healthy).ok_or_else(|| {
        SnapshotError::NoHealthyMember(if problems.is_empty() {
            "the member list has no voting member with a client URL".to_string()
        } else {
            problems.join("; ")
        })
    })
}

/// `Err` naming the first member that answered with another cluster ID than `recorded`;
/// `Ok` when every one answered with it, or when no ID is recorded.
pub fn check_cluster(healthy: &[ChosenMember], recorded: Option<u64>) -> Result<(), SnapshotError> {
    let Some(recorded) = recorded else {
        return Ok(());
    };
    match healthy.iter().find(|m| m.cluster_id != recorded) {
        Some(m) => Err(SnapshotError::OtherCluster {
            endpoint: m.endpoint.clone(),
            found: m.cluster_id,
            recorded,
        }),
        None => Ok(()),
    }
}

/// The member with the highest applied revision, then raft applied index; a follower
/// among equals (then the lowest member ID, so the choice is the same on every run).
pub fn pick(mut healthy: Vec<ChosenMember>) -> Option<ChosenMember> {
    healthy.sort_by_key(|m| {
        (
            m.revision,
            m.raft_applied_index,
            !m.leader,
            std::cmp::Reverse(m.member_id),
        )
    });
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
            raft_applied_index: raft_index,
        }
    }

    #[test]
    fn the_most_up_to_date_follower_is_preferred_over_the_leader() {
        let chosen = pick(vec![
            member(1, true, 90),
            member(2, false, 80),
            member(3, false, 90),
        ]);
        assert_eq!(chosen.unwrap().member_id, 3);
    }

    fn at(id: u64, leader: bool, revision: i64, raft_index: u64) -> ChosenMember {
        ChosenMember {
            revision,
            ..member(id, leader, raft_index)
        }
    }

    #[test]
    fn the_member_with_the_highest_applied_revision_is_chosen_not_the_highest_raft_index() {
        // Member 2 has committed more entries but applied fewer: its snapshot is older.
        let chosen = pick(vec![at(2, false, 50, 100), at(3, false, 60, 90)]);
        assert_eq!(chosen.unwrap().member_id, 3);
    }

    #[test]
    fn the_leader_is_chosen_when_it_alone_has_applied_the_newest_revision() {
        let chosen = pick(vec![at(1, true, 70, 90), at(2, false, 60, 95)]);
        assert_eq!(chosen.unwrap().member_id, 1);
    }

    #[test]
    fn a_follower_is_preferred_to_the_leader_at_the_same_revision() {
        let chosen = pick(vec![at(2, false, 70, 90), at(1, true, 70, 90)]);
        assert_eq!(chosen.unwrap().member_id, 2);
    }

    #[test]
    fn a_member_answering_with_another_cluster_id_than_the_recorded_one_is_refused() {
        let foreign = ChosenMember {
            cluster_id: 0xbad,
            ..member(3, false, 9)
        };
        let err = check_cluster(&[member(1, true, 9), foreign], Some(1)).unwrap_err();
        assert_eq!(err.reason(), "ClusterIDMismatch");
        let text = err.to_string();
        assert!(
            text.contains("http://m3:2379") && text.contains("bad"),
            "{text}"
        );
        assert!(check_cluster(&[member(1, true, 9)], Some(1)).is_ok());
        assert!(
            check_cluster(&[member(1, true, 9)], None).is_ok(),
            "nothing recorded"
        );
    }

    #[test]
    fn the_leader_is_used_when_it_is_the_only_healthy_member() {
        assert_eq!(pick(vec![member(1, true, 9)]).unwrap().member_id, 1);
        assert_eq!(pick(Vec::new()), None);
    }
}
