//! Keeps the node's /etc/hosts block in step with its pods and the Services selecting
//! them, and removes the block when the node stops.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::runtime::reflector::Store;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::dns;
use crate::hosts::{self, HostEntry};
use crate::log::event;

/// `name -> ip` pairs of a set of entries.
pub fn pairs(entries: &[HostEntry]) -> BTreeSet<(String, String)> {
    entries
        .iter()
        .flat_map(|(ip, names)| names.iter().map(move |n| (n.clone(), ip.to_string())))
        .collect()
}

/// A one-line summary of what changed between two sets of entries.
pub fn describe_change(before: &[HostEntry], after: &[HostEntry]) -> String {
    let (old, new) = (pairs(before), pairs(after));
    let show = |set: Vec<&(String, String)>| {
        set.iter()
            .map(|(n, ip)| format!("{n}={ip}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let added = show(new.difference(&old).collect());
    let removed = show(old.difference(&new).collect());
    match (added.is_empty(), removed.is_empty()) {
        (false, false) => format!("+[{added}] -[{removed}]"),
        (false, true) => format!("+[{added}]"),
        (true, false) => format!("-[{removed}]"),
        (true, true) => "block rewritten, no name changed".to_string(),
    }
}

/// Rewrites the block whenever pods or services change (and mirrors the whole file into
/// `mirror_dir` for containers rooted in their image), until shutdown; then removes it.
pub async fn run(
    node: String,
    path: PathBuf,
    mirror_dir: PathBuf,
    pods: Store<Pod>,
    services: Store<Service>,
    changed: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let _ = tokio::select! {
        r = async { pods.wait_until_ready().await.and(services.wait_until_ready().await) } => r.ok(),
        _ = shutdown.cancelled() => None,
    };
    let mut current: Vec<HostEntry> = Vec::new();
    loop {
        if shutdown.is_cancelled() {
            break;
        }
        let pod_list = pods.state();
        let service_list = services.state();
        let entries = dns::host_entries(
            &node,
            pod_list.iter().map(|p| p.as_ref()),
            service_list.iter().map(|s| s.as_ref()),
        );
        // Checked every time, not only on changes: another writer of the file may have
        // dropped the block.
        match hosts::update_hosts_file(&path, &node, &entries) {
            Ok(true) => {
                let change = describe_change(&current, &entries);
                event!("hosts updated ({}): {change}", path.display());
                current = entries;
            }
            Ok(false) => current = entries,
            Err(e) => event!("hosts update of {} failed: {e}", path.display()),
        }
        if let Err(e) = hosts::mirror(&path, &mirror_dir) {
            event!(
                "copying {} to {} failed: {e}",
                path.display(),
                mirror_dir.display()
            );
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = changed.notified() => tokio::time::sleep(Duration::from_millis(50)).await,
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    }
    match hosts::update_hosts_file(&path, &node, &[]) {
        Ok(_) => event!("hosts block of node {node} removed from {}", path.display()),
        Err(e) => event!("removing hosts block from {} failed: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_summary_lists_added_and_removed_names() {
        let a = vec![("127.0.1.1".parse().unwrap(), vec!["a.ns.svc".to_string()])];
        let b = vec![("127.0.1.2".parse().unwrap(), vec!["b.ns.svc".to_string()])];
        assert_eq!(describe_change(&[], &a), "+[a.ns.svc=127.0.1.1]");
        assert_eq!(
            describe_change(&a, &b),
            "+[b.ns.svc=127.0.1.2] -[a.ns.svc=127.0.1.1]"
        );
        assert_eq!(describe_change(&a, &a), "block rewritten, no name changed");
    }
}
