//! The pod network, as a CNI plugin serves a kubelet: each pod gets a network namespace
//! of its own with an address of the node's pod range, from `testkit/env/podnet.sh`
//! (`add-pod NODE_INDEX KEY` prints `NETNS_PATH IP`; `del-pod KEY` removes it). The node
//! shells out to the script rather than repeating its few `ip` calls: the script owns the
//! address records, their lock and the names that `podnet.sh down` finds everything by,
//! and its own test proves them; a second implementation would have to stay in step.
//!
//! The key of a pod is its UID: unique in the cluster, the same across node restarts, so
//! that `add-pod` gives a restarted node's pod the namespace and address it had.

use std::net::Ipv4Addr;
use std::path::PathBuf;

/// Why the pod network could not serve a request.
#[derive(Debug, thiserror::Error)]
pub enum PodNetError {
    /// The script could not be run.
    #[error("running {script}: {source}")]
    Spawn {
        /// The script.
        script: String,
        /// The error.
        source: std::io::Error,
    },
    /// The script failed.
    #[error("{script} {command} failed ({status}): {stderr}")]
    Failed {
        /// The script.
        script: String,
        /// What it was asked.
        command: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// What it said.
        stderr: String,
    },
    /// It answered something else than `NETNS_PATH IP`.
    #[error("unexpected answer from podnet.sh add-pod: {0:?}")]
    Answer(String),
}

/// A pod's place on the network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attachment {
    /// The pod's network namespace, as a path processes join it by (`setns(2)`).
    pub netns: PathBuf,
    /// The pod's address.
    pub ip: Ipv4Addr,
}

/// The pod network of one node.
#[derive(Clone, Debug)]
pub struct PodNetwork {
    script: PathBuf,
    node_index: u8,
}

/// The node index podnet.sh uses for a node whose `spec.podCIDR` is `cidr`: its third
/// byte, for a /24 of 10.244.0.0/16 (what the controller-manager's node IPAM hands out
/// here); anything else is refused, since podnet.sh could not serve it.
pub fn node_index(cidr: &str) -> Result<u8, String> {
    let refuse =
        || format!("podCIDR {cidr:?} is not a /24 of 10.244.0.0/16 (podnet.sh's pod range)");
    let (address, prefix) = cidr.split_once('/').ok_or_else(refuse)?;
    let address: Ipv4Addr = address.parse().map_err(|_| refuse())?;
    let [a, b, c, d] = address.octets();
    if prefix != "24" || (a, b, d) != (10, 244, 0) {
        return Err(refuse());
    }
    Ok(c)
}

/// Reads `add-pod`'s answer: `NETNS_PATH IP`.
pub fn parse_attachment(answer: &str) -> Result<Attachment, PodNetError> {
    let bad = || PodNetError::Answer(answer.to_string());
    let mut words = answer.split_whitespace();
    let (Some(netns), Some(ip), None) = (words.next(), words.next(), words.next()) else {
        return Err(bad());
    };
    if !netns.starts_with('/') {
        return Err(bad());
    }
    Ok(Attachment {
        netns: PathBuf::from(netns),
        ip: ip.parse().map_err(|_| bad())?,
    })
}

impl PodNetwork {
    /// The network of node `node_index`, served by the podnet.sh at `script`.
    pub fn new(script: PathBuf, node_index: u8) -> PodNetwork {
        PodNetwork { script, node_index }
    }

    /// The namespace and address of the pod `key`: made, or the ones it already has.
    pub async fn add(&self, key: &str) -> Result<Attachment, PodNetError> {
        let index = self.node_index.to_string();
        let out = self.call(&["add-pod", &index, key]).await?;
        parse_attachment(&out)
    }

    /// Removes the pod `key`'s namespace and address (nothing to do is fine).
    pub async fn del(&self, key: &str) -> Result<(), PodNetError> {
        self.call(&["del-pod", key]).await.map(drop)
    }

    async fn call(&self, args: &[&str]) -> Result<String, PodNetError> {
        let script = self.script.display().to_string();
        let out = tokio::process::Command::new("bash")
            .arg(&self.script)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(|source| PodNetError::Spawn {
                script: script.clone(),
                source,
            })?;
        if !out.status.success() {
            return Err(PodNetError::Failed {
                script,
                command: args.join(" "),
                status: out.status,
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_index_is_the_third_byte_of_a_slash_24_of_the_pod_range() {
        assert_eq!(node_index("10.244.0.0/24"), Ok(0));
        assert_eq!(node_index("10.244.17.0/24"), Ok(17));
        for bad in [
            "10.244.1.0/16",
            "10.245.1.0/24",
            "10.244.1.8/24",
            "10.244.1.0",
            "x/24",
        ] {
            assert!(node_index(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn add_pods_answer_is_a_namespace_path_and_an_address() {
        let got = parse_attachment("/run/netns/eo-1-3fa9c0d2e1 10.244.1.2\n").unwrap();
        assert_eq!(got.netns, PathBuf::from("/run/netns/eo-1-3fa9c0d2e1"));
        assert_eq!(got.ip, Ipv4Addr::new(10, 244, 1, 2));
        for bad in [
            "",
            "/run/netns/x",
            "eo-1 10.244.1.2",
            "/run/netns/x 10.244.1",
            "/a 1.2.3.4 x",
        ] {
            assert!(parse_attachment(bad).is_err(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn a_failing_script_reports_what_it_said() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("podnet.sh");
        std::fs::write(&script, "echo \"no pod network: $1 $2 $3\" >&2; exit 1\n").unwrap();
        let err = PodNetwork::new(script, 4).add("uid-1").await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains("add-pod 4 uid-1 failed"), "{text}");
        assert!(text.contains("no pod network: add-pod 4 uid-1"), "{text}");
    }
}
