//! configMap and secret volumes kept in step with their objects, as a kubelet keeps them:
//! the files written by an atomic writer (every file of a version in a hidden directory,
//! the `..data` link switched to it in one rename, each visible file a link through
//! `..data`), so a reader sees either every old file or every new one, never a new
//! certificate beside an old key; and the objects read again every few seconds while the
//! pod lives, the files rewritten when they changed.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::Client;

use crate::log::event;
use crate::tasks::TaskGuard;
use crate::volumes::{KeySource, VolumeFile};

/// How often a pod's configMap and secret volumes are compared with their objects (the
/// kubelet's sync period is a minute; certificate rotation tests need it shorter).
pub const SYNC_PERIOD: Duration = Duration::from_secs(5);

/// The link to the current version's directory.
const DATA: &str = "..data";

fn is_relative_and_inside(path: &str) -> bool {
    let p = Path::new(path);
    !path.is_empty()
        && p.components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// The first component of a file's path in the volume (what a visible link is made for).
fn top(path: &str) -> &str {
    path.split('/').next().unwrap_or(path)
}

/// Makes `dir` show exactly `files`, switching from the previous version in one rename.
pub fn write_atomically(dir: &Path, files: &[VolumeFile]) -> Result<(), String> {
    let err = |what: &Path, e: std::io::Error| format!("{}: {e}", what.display());
    std::fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
    let stamp = format!("..{}", jiff::Timestamp::now().as_nanosecond());
    let version = dir.join(&stamp);
    std::fs::create_dir(&version).map_err(|e| err(&version, e))?;
    for (path, value, mode) in files {
        if !is_relative_and_inside(path) {
            return Err(format!("bad key path {path:?}"));
        }
        let file = version.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).map_err(|e| err(parent, e))?;
        }
        std::fs::write(&file, value).map_err(|e| err(&file, e))?;
        let mode = std::fs::Permissions::from_mode(mode & 0o777);
        std::fs::set_permissions(&file, mode).map_err(|e| err(&file, e))?;
    }
    let next = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&next);
    symlink(&stamp, &next).map_err(|e| err(&next, e))?;
    std::fs::rename(&next, dir.join(DATA)).map_err(|e| err(dir, e))?;
    let wanted: Vec<&str> = files.iter().map(|(p, _, _)| top(p)).collect();
    link_visible(dir, &wanted).map_err(|e| err(dir, e))?;
    remove_stale(dir, &stamp, &wanted).map_err(|e| err(dir, e))
}

/// Each wanted top-level name as a link through `..data` (replacing a plain file an
/// earlier writer left).
fn link_visible(dir: &Path, wanted: &[&str]) -> std::io::Result<()> {
    for name in wanted {
        let link = dir.join(name);
        match std::fs::symlink_metadata(&link) {
            Ok(meta) if meta.file_type().is_symlink() => continue,
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&link)?,
            Ok(_) => std::fs::remove_file(&link)?,
            Err(_) => {}
        }
        symlink(Path::new(DATA).join(name), &link)?;
    }
    Ok(())
}

/// Removes earlier versions and visible names no longer wanted.
fn remove_stale(dir: &Path, current: &str, wanted: &[&str]) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let stale = if name.starts_with("..") {
            name != current && name != DATA
        } else {
            !wanted.contains(&name.as_str())
        };
        if !stale {
            continue;
        }
        if std::fs::symlink_metadata(&path)?.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// What `dir` shows now, as files (empty when it shows nothing readable).
fn current(dir: &Path, like: &[VolumeFile]) -> Vec<VolumeFile> {
    like.iter()
        .filter_map(|(path, _, mode)| {
            let value = std::fs::read(dir.join(path)).ok()?;
            Some((path.clone(), value, *mode))
        })
        .collect()
}

/// A configMap or secret volume of a pod: where it is, and what it shows.
#[derive(Clone, Debug)]
pub struct SyncedVolume {
    /// Its directory on the host.
    pub dir: PathBuf,
    /// Its object and keys.
    pub source: KeySource,
}

/// Keeps `volumes` (of a pod in `namespace`) in step with their objects until the guard
/// is dropped.
pub fn keep_synced(client: Client, namespace: String, volumes: Vec<SyncedVolume>) -> TaskGuard {
    TaskGuard::spawn(async move {
        loop {
            tokio::time::sleep(SYNC_PERIOD).await;
            for volume in &volumes {
                if let Err(e) = sync(&client, &namespace, volume).await {
                    event!(
                        "volume {}: sync failed (retrying): {e}",
                        volume.dir.display()
                    );
                }
            }
        }
    })
}

async fn sync(client: &Client, namespace: &str, volume: &SyncedVolume) -> Result<(), String> {
    let files = volume.source.files(client, namespace).await?;
    let mut shown = current(&volume.dir, &files);
    let mut wanted = files.clone();
    shown.sort();
    wanted.sort();
    if shown == wanted {
        return Ok(());
    }
    write_atomically(&volume.dir, &files)?;
    event!("volume {}: updated from its object", volume.dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(dir: &Path, name: &str) -> String {
        std::fs::read_to_string(dir.join(name)).unwrap()
    }

    #[test]
    fn a_new_version_replaces_every_file_through_one_link() {
        let dir = std::env::temp_dir().join(format!("keysync-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let v1 = vec![
            ("tls.crt".to_string(), b"cert 1".to_vec(), 0o400),
            ("tls.key".to_string(), b"key 1".to_vec(), 0o400),
            ("old".to_string(), b"gone next".to_vec(), 0o644),
        ];
        write_atomically(&dir, &v1).unwrap();
        assert_eq!(read(&dir, "tls.crt"), "cert 1");
        assert!(
            std::fs::symlink_metadata(dir.join("tls.crt"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        let first = std::fs::read_link(dir.join(DATA)).unwrap();

        let v2 = vec![
            ("tls.crt".to_string(), b"cert 2".to_vec(), 0o400),
            ("tls.key".to_string(), b"key 2".to_vec(), 0o400),
        ];
        write_atomically(&dir, &v2).unwrap();
        assert_eq!(
            (read(&dir, "tls.crt"), read(&dir, "tls.key")),
            ("cert 2".into(), "key 2".into())
        );
        assert!(!dir.join("old").exists());
        assert!(
            !dir.join(&first).exists(),
            "the previous version is removed"
        );
        let mode = std::fs::metadata(dir.join("tls.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o400);
        assert_eq!(current(&dir, &v2), v2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn plain_files_of_an_earlier_writer_become_links() {
        let dir = std::env::temp_dir().join(format!("keysync-plain-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.crt"), "plain").unwrap();
        write_atomically(&dir, &[("ca.crt".to_string(), b"linked".to_vec(), 0o644)]).unwrap();
        assert_eq!(read(&dir, "ca.crt"), "linked");
        assert!(
            std::fs::symlink_metadata(dir.join("ca.crt"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
