//! The node's block in `/etc/hosts`, between `# BEGIN etcd-operator-node <node>` and
//! `# END etcd-operator-node <node>`; every line outside the block is kept as it was.

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::Path;

/// One hosts line: an address and its names.
pub type HostEntry = (Ipv4Addr, Vec<String>);

/// The line that opens the block of `node`.
pub fn begin_marker(node: &str) -> String {
    format!("# BEGIN etcd-operator-node {node}")
}

/// The line that closes the block of `node`.
pub fn end_marker(node: &str) -> String {
    format!("# END etcd-operator-node {node}")
}

/// The block's lines (markers included), or nothing when there are no entries.
pub fn render_block(node: &str, entries: &[HostEntry]) -> Vec<String> {
    if entries.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![begin_marker(node)];
    lines.extend(
        entries
            .iter()
            .map(|(ip, names)| format!("{ip} {}", names.join(" "))),
    );
    lines.push(end_marker(node));
    lines
}

/// `original` with the node's block replaced by `block` (removed when `block` is empty).
/// The block stays where it was; a new one goes at the end. An unterminated block runs to
/// the end of the file.
pub fn replace_block(original: &str, node: &str, block: &[String]) -> String {
    let begin = begin_marker(node);
    let end = end_marker(node);
    let mut out: Vec<&str> = Vec::new();
    let mut inserted = false;
    let mut inside = false;
    for line in original.lines() {
        if inside {
            if line.trim_end() == end {
                inside = false;
            }
            continue;
        }
        if line.trim_end() == begin {
            inside = true;
            if !inserted {
                out.extend(block.iter().map(String::as_str));
                inserted = true;
            }
            continue;
        }
        out.push(line);
    }
    if !inserted {
        out.extend(block.iter().map(String::as_str));
    }
    let mut text = out.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    text
}

/// Whether `path` is itself a mount point (as a bind-mounted /etc/hosts in a container is).
pub fn is_mount_point(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let target = path.to_string_lossy();
    info.lines()
        .filter_map(|line| line.split(' ').nth(4))
        .any(|mount_point| mount_point == target)
}

/// Rewrites the node's block in the hosts file; returns whether the file changed.
/// The new content is written to a temporary file first, then renamed over the file, or,
/// when the file is a mount point (where rename fails), copied into it.
///
/// Node processes sharing the file serialise their updates with a lock file (see
/// [`lock_path`]), so that no update overwrites another's block.
pub fn update_hosts_file(path: &Path, node: &str, entries: &[HostEntry]) -> std::io::Result<bool> {
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path(path))?;
    lock.lock()?;
    let result = rewrite_block(path, node, entries);
    let _ = lock.unlock();
    result
}

/// Copies the hosts file at `source` to `dir/hosts` when they differ, by writing beside it
/// and renaming (so readers never see a half-written file); returns whether it copied.
/// Containers rooted in their image see the copy through a bind mount of `dir`.
pub fn mirror(source: &Path, dir: &Path) -> std::io::Result<bool> {
    let text = match std::fs::read(source) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    let copy = dir.join("hosts");
    if std::fs::read(&copy).ok().as_deref() == Some(text.as_slice()) {
        return Ok(false);
    }
    std::fs::create_dir_all(dir)?;
    let temp = dir.join(".hosts.tmp");
    std::fs::write(&temp, &text)?;
    std::fs::set_permissions(&temp, std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    std::fs::rename(&temp, &copy)?;
    Ok(true)
}

/// The lock file guarding updates of a hosts file, in the temporary directory.
pub fn lock_path(hosts: &Path) -> std::path::PathBuf {
    let flat: String = hosts
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    std::env::temp_dir().join(format!("etcd-operator-node.lock{flat}"))
}

fn rewrite_block(path: &Path, node: &str, entries: &[HostEntry]) -> std::io::Result<bool> {
    let original = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    let updated = replace_block(&original, node, &render_block(node, entries));
    if updated == original {
        return Ok(false);
    }
    let dir = path.parent().unwrap_or(Path::new("/"));
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "hosts".to_string());
    let temp = dir.join(format!(
        ".{file_name}.etcd-operator-node.{}",
        std::process::id()
    ));
    {
        let mut f = std::fs::File::create(&temp)?;
        f.write_all(updated.as_bytes())?;
        f.sync_all()?;
    }
    if let Ok(meta) = std::fs::metadata(path) {
        std::fs::set_permissions(&temp, meta.permissions())?;
    }
    let result = if is_mount_point(path) {
        std::fs::copy(&temp, path).map(|_| ())
    } else {
        std::fs::rename(&temp, path)
    };
    let _ = std::fs::remove_file(&temp);
    result.map(|_| true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Vec<HostEntry> {
        vec![(
            "127.0.1.1".parse().unwrap(),
            vec!["m1.sub.ns.svc".into(), "m1.sub.ns.svc.cluster.local".into()],
        )]
    }

    const ORIGINAL: &str = "127.0.0.1 localhost\n# comment\n::1 ip6-localhost\n";

    #[test]
    fn mirror_copies_only_changes_and_replaces_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let source = tmp.path().join("hosts");
        let dir = tmp.path().join("mirror");
        std::fs::write(&source, ORIGINAL).unwrap();
        assert!(mirror(&source, &dir).unwrap());
        assert!(!mirror(&source, &dir).unwrap());
        let before = std::fs::metadata(dir.join("hosts")).unwrap();
        std::fs::write(&source, "127.0.1.1 new\n").unwrap();
        assert!(mirror(&source, &dir).unwrap());
        let after = std::fs::metadata(dir.join("hosts")).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_ne!(
            before.ino(),
            after.ino(),
            "replaced, not rewritten in place"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("hosts")).unwrap(),
            "127.0.1.1 new\n"
        );
    }

    #[test]
    fn block_is_appended_keeping_other_lines() {
        let text = replace_block(ORIGINAL, "n1", &render_block("n1", &entries()));
        assert_eq!(
            text,
            "127.0.0.1 localhost\n# comment\n::1 ip6-localhost\n\
             # BEGIN etcd-operator-node n1\n\
             127.0.1.1 m1.sub.ns.svc m1.sub.ns.svc.cluster.local\n\
             # END etcd-operator-node n1\n"
        );
    }

    #[test]
    fn block_is_replaced_in_place() {
        let first = replace_block(ORIGINAL, "n1", &render_block("n1", &entries()));
        let with_tail = format!("{first}10.1.1.1 after\n");
        let second_entries = vec![("127.0.1.2".parse().unwrap(), vec!["x.ns.svc".to_string()])];
        let text = replace_block(&with_tail, "n1", &render_block("n1", &second_entries));
        assert_eq!(
            text,
            "127.0.0.1 localhost\n# comment\n::1 ip6-localhost\n\
             # BEGIN etcd-operator-node n1\n\
             127.0.1.2 x.ns.svc\n\
             # END etcd-operator-node n1\n\
             10.1.1.1 after\n"
        );
    }

    #[test]
    fn empty_block_removes_it_and_restores_original() {
        let with_block = replace_block(ORIGINAL, "n1", &render_block("n1", &entries()));
        assert_eq!(replace_block(&with_block, "n1", &[]), ORIGINAL);
    }

    #[test]
    fn other_nodes_blocks_are_untouched() {
        let other = replace_block(ORIGINAL, "n2", &render_block("n2", &entries()));
        let both = replace_block(&other, "n1", &render_block("n1", &entries()));
        assert!(both.contains("# BEGIN etcd-operator-node n2"));
        assert_eq!(replace_block(&both, "n1", &[]), other);
    }

    #[test]
    fn file_without_trailing_newline_gets_one() {
        let text = replace_block("127.0.0.1 localhost", "n1", &[]);
        assert_eq!(text, "127.0.0.1 localhost\n");
    }

    #[test]
    fn concurrent_updates_of_two_nodes_keep_both_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        std::fs::write(&path, ORIGINAL).unwrap();
        let threads: Vec<_> = ["n1", "n2", "n3", "n4"]
            .into_iter()
            .map(|node| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for i in 0..50u8 {
                        let e = vec![(
                            std::net::Ipv4Addr::new(127, 0, 1, i + 1),
                            vec![format!("{node}.ns.svc")],
                        )];
                        update_hosts_file(&path, node, &e).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for node in ["n1", "n2", "n3", "n4"] {
            assert!(
                text.contains(&format!("127.0.1.50 {node}.ns.svc")),
                "{text}"
            );
        }
        assert!(text.starts_with(ORIGINAL));
    }

    #[test]
    fn lock_file_name_is_derived_from_the_hosts_path() {
        let lock = lock_path(Path::new("/etc/hosts"));
        assert!(
            lock.ends_with("etcd-operator-node.lock-etc-hosts"),
            "{}",
            lock.display()
        );
    }

    #[test]
    fn update_writes_only_when_changed_and_keeps_other_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        std::fs::write(&path, ORIGINAL).unwrap();
        assert!(update_hosts_file(&path, "n1", &entries()).unwrap());
        assert!(!update_hosts_file(&path, "n1", &entries()).unwrap());
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .starts_with(ORIGINAL)
        );
        assert!(update_hosts_file(&path, "n1", &[]).unwrap());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), ORIGINAL);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
