//! Images built on this machine (`testkit/env/build-image.sh`): found by reference in the
//! image directory's `index.tsv` (`REF<TAB>ARCHIVE`, archive paths relative to that
//! directory), read from their OCI archive and unpacked once per manifest digest into the
//! node's state (`images/oci/sha256-<hex>/{rootfs,config.json}`), which every container
//! of that image then shares read-only (each gets its own writable layer on top).

use std::collections::HashMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

/// The name of the image directory's index.
pub const INDEX_FILE: &str = "index.tsv";

/// What the image says about running it (its config's `config` object).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageConfig {
    /// `Entrypoint`.
    pub entrypoint: Vec<String>,
    /// `Cmd`.
    pub cmd: Vec<String>,
    /// `User` (`uid[:gid]` or a name).
    pub user: String,
    /// `Env`, as `NAME=value`.
    pub env: Vec<String>,
    /// `WorkingDir` (`/` when unset).
    pub working_dir: String,
}

/// A local image, unpacked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalImage {
    /// The reference the pod asked for.
    pub reference: String,
    /// The manifest's digest (`sha256:...`).
    pub digest: String,
    /// The unpacked root filesystem (shared, never written).
    pub rootfs: PathBuf,
    /// How to run it.
    pub config: ImageConfig,
}

impl LocalImage {
    /// The `imageID` a kubelet reports: `repository@digest`.
    pub fn image_id(&self) -> String {
        let repository = crate::images::ImageRef::parse(&self.reference).repository;
        format!("{repository}@{}", self.digest)
    }
}

/// Why a local image cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// Reading or writing files failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// The archive is not what an OCI image layout should be.
    #[error("{0}")]
    Invalid(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ImageError {
    let what = what.into();
    move |source| ImageError::Io { what, source }
}

/// Finds `reference` in an index's text: the archive path (relative to the image directory
/// unless absolute) of the last line naming it.
pub fn lookup_index(index: &str, reference: &str) -> Option<String> {
    index
        .lines()
        .filter_map(|line| line.split_once('\t'))
        .filter(|(r, _)| r.trim() == reference)
        .map(|(_, archive)| archive.trim().to_string())
        .next_back()
}

/// The images built on this machine, and the node's unpacked copies of them.
pub struct ImageStore {
    images_dir: PathBuf,
    unpacked: PathBuf,
    busy: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl ImageStore {
    /// A store reading `images_dir` (where build-image.sh writes) and unpacking into
    /// `unpacked`.
    pub fn new(images_dir: PathBuf, unpacked: PathBuf) -> ImageStore {
        ImageStore {
            images_dir,
            unpacked,
            busy: Mutex::new(HashMap::new()),
        }
    }

    /// The archive of `reference`, if the index names one.
    pub fn archive(&self, reference: &str) -> Option<PathBuf> {
        let index = std::fs::read_to_string(self.images_dir.join(INDEX_FILE)).ok()?;
        let archive = PathBuf::from(lookup_index(&index, reference)?);
        Some(if archive.is_absolute() {
            archive
        } else {
            self.images_dir.join(archive)
        })
    }

    /// The image `reference` unpacked (at most once per digest, however many containers
    /// ask at the same time); `None` when it was not built here.
    pub async fn resolve(&self, reference: &str) -> Result<Option<LocalImage>, ImageError> {
        let Some(archive) = self.archive(reference) else {
            return Ok(None);
        };
        let layout = {
            let archive = archive.clone();
            let reference = reference.to_string();
            blocking(move || Layout::read(&archive, &reference)).await?
        };
        let lock = {
            let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
            busy.entry(layout.digest.clone()).or_default().clone()
        };
        let _guard = lock.lock().await;
        let dir = self.unpacked.join(layout.digest.replace(':', "-"));
        let reference = reference.to_string();
        let image = blocking(move || layout.unpack(&archive, &dir, &reference)).await?;
        Ok(Some(image))
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ImageError> + Send + 'static,
) -> Result<T, ImageError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ImageError::Invalid(format!("unpacking task failed: {e}")))?
}

/// Reads one member of a tar archive.
fn read_member(archive: &Path, name: &str) -> Result<Vec<u8>, ImageError> {
    let file = std::fs::File::open(archive).map_err(io(archive.display().to_string()))?;
    let mut tar = tar::Archive::new(file);
    for entry in tar.entries().map_err(io("reading the archive"))? {
        let mut entry = entry.map_err(io("reading the archive"))?;
        let path = entry.path().map_err(io("reading the archive"))?;
        if path.to_string_lossy().trim_start_matches("./") == name {
            let mut data = Vec::new();
            entry.read_to_end(&mut data).map_err(io(name.to_string()))?;
            return Ok(data);
        }
    }
    Err(ImageError::Invalid(format!(
        "{}: no {name} in the archive",
        archive.display()
    )))
}

fn json(bytes: &[u8], what: &str) -> Result<serde_json::Value, ImageError> {
    serde_json::from_slice(bytes).map_err(|e| ImageError::Invalid(format!("{what}: {e}")))
}

/// The member name of a blob, after checking the digest's form.
fn blob_name(digest: &str) -> Result<String, ImageError> {
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| ImageError::Invalid(format!("digest {digest}: only sha256 is supported")))?;
    Ok(format!("blobs/sha256/{hex}"))
}

/// Reads a blob and checks its content against its digest.
fn read_blob(archive: &Path, digest: &str) -> Result<Vec<u8>, ImageError> {
    let data = read_member(archive, &blob_name(digest)?)?;
    let actual = sha256_hex(&data);
    if format!("sha256:{actual}") != digest {
        return Err(ImageError::Invalid(format!(
            "blob {digest}: content does not match (sha256:{actual})"
        )));
    }
    Ok(data)
}

fn sha256_hex(data: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, data)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The manifest of an archive chosen for a reference: the one annotated with it, else
/// the only one.
pub fn choose_manifest(index: &serde_json::Value, reference: &str) -> Result<String, String> {
    let manifests = index["manifests"].as_array().cloned().unwrap_or_default();
    let named: Vec<&serde_json::Value> = manifests
        .iter()
        .filter(|m| m["annotations"]["org.opencontainers.image.ref.name"] == reference)
        .collect();
    let chosen = match (named.as_slice(), manifests.as_slice()) {
        ([one], _) => *one,
        ([], [one]) => one,
        _ => {
            return Err(format!(
                "{} manifests, none (or several) named {reference}",
                manifests.len()
            ));
        }
    };
    if chosen["mediaType"] != "application/vnd.oci.image.manifest.v1+json" {
        return Err(format!(
            "manifest media type {}: only single-platform OCI manifests are supported",
            chosen["mediaType"]
        ));
    }
    chosen["digest"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| "manifest without digest".to_string())
}

/// The run configuration of an image config blob.
pub fn image_config(config: &serde_json::Value) -> ImageConfig {
    let c = &config["config"];
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    let working_dir = c["WorkingDir"].as_str().unwrap_or_default();
    ImageConfig {
        entrypoint: strings(&c["Entrypoint"]),
        cmd: strings(&c["Cmd"]),
        user: c["User"].as_str().unwrap_or_default().to_string(),
        env: strings(&c["Env"]),
        working_dir: if working_dir.is_empty() {
            "/".to_string()
        } else {
            working_dir.to_string()
        },
    }
}

/// An archive's chosen manifest.
struct Layout {
    digest: String,
}

impl Layout {
    fn read(archive: &Path, reference: &str) -> Result<Layout, ImageError> {
        let index = json(&read_member(archive, "index.json")?, "index.json")?;
        let digest = choose_manifest(&index, reference)
            .map_err(|e| ImageError::Invalid(format!("{}: {e}", archive.display())))?;
        Ok(Layout { digest })
    }

    /// The image unpacked in `dir` (done now unless it already was).
    fn unpack(
        &self,
        archive: &Path,
        dir: &Path,
        reference: &str,
    ) -> Result<LocalImage, ImageError> {
        let config_path = dir.join("config.json");
        if let Ok(text) = std::fs::read(&config_path) {
            let config: ImageConfig = serde_json::from_slice(&text)
                .map_err(|e| ImageError::Invalid(format!("{}: {e}", config_path.display())))?;
            return Ok(self.image(dir, reference, config));
        }
        let partial = dir.with_extension("partial");
        let _ = std::fs::remove_dir_all(&partial);
        let rootfs = partial.join("rootfs");
        std::fs::create_dir_all(&rootfs).map_err(io(rootfs.display().to_string()))?;
        let manifest = json(&read_blob(archive, &self.digest)?, "manifest")?;
        for layer in manifest["layers"].as_array().into_iter().flatten() {
            let digest = layer["digest"].as_str().unwrap_or_default();
            let media = layer["mediaType"].as_str().unwrap_or_default();
            let data = read_blob(archive, digest)?;
            apply_layer(&data, media, &rootfs)?;
        }
        let config_digest = manifest["config"]["digest"].as_str().unwrap_or_default();
        let config = image_config(&json(&read_blob(archive, config_digest)?, "image config")?);
        let text =
            serde_json::to_vec_pretty(&config).map_err(|e| ImageError::Invalid(e.to_string()))?;
        std::fs::write(partial.join("config.json"), text).map_err(io("writing config.json"))?;
        std::fs::rename(&partial, dir)
            .map_err(io(format!("moving the image to {}", dir.display())))?;
        Ok(self.image(dir, reference, config))
    }

    fn image(&self, dir: &Path, reference: &str, config: ImageConfig) -> LocalImage {
        LocalImage {
            reference: reference.to_string(),
            digest: self.digest.clone(),
            rootfs: dir.join("rootfs"),
            config,
        }
    }
}

/// A layer's tar stream, decompressed as its media type says.
fn layer_reader<'a>(data: &'a [u8], media: &str) -> Result<Box<dyn Read + 'a>, ImageError> {
    match media {
        "application/vnd.oci.image.layer.v1.tar+gzip"
        | "application/vnd.docker.image.rootfs.diff.tar.gzip" => {
            Ok(Box::new(flate2::read::GzDecoder::new(data)))
        }
        "application/vnd.oci.image.layer.v1.tar" => Ok(Box::new(data)),
        other => Err(ImageError::Invalid(format!(
            "layer media type {other} is not supported"
        ))),
    }
}

/// A layer entry's path as plain components (no `..`, no root).
fn entry_path(path: &Path) -> Result<PathBuf, ImageError> {
    let mut clean = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => clean.push(p),
            Component::CurDir | Component::RootDir => {}
            _ => {
                return Err(ImageError::Invalid(format!(
                    "layer entry {} leaves the root filesystem",
                    path.display()
                )));
            }
        }
    }
    Ok(clean)
}

/// What a whiteout entry hides in the layers below.
#[derive(Debug, PartialEq, Eq)]
pub enum Whiteout {
    /// Everything inside this directory (`.wh..wh..opq`).
    Opaque(PathBuf),
    /// This path (`.wh.NAME`).
    Remove(PathBuf),
}

/// The whiteout an entry path stands for, if it is one.
pub fn whiteout(path: &Path) -> Option<Whiteout> {
    let name = path.file_name()?.to_str()?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    if name == ".wh..wh..opq" {
        Some(Whiteout::Opaque(dir))
    } else {
        name.strip_prefix(".wh.")
            .map(|hidden| Whiteout::Remove(dir.join(hidden)))
    }
}

fn remove_any(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Applies a layer onto `rootfs`: first what its whiteouts hide in the layers below is
/// removed, then its other entries are extracted (owners and modes kept).
fn apply_layer(data: &[u8], media: &str, rootfs: &Path) -> Result<(), ImageError> {
    let mut listing = tar::Archive::new(layer_reader(data, media)?);
    for entry in listing.entries().map_err(io("reading a layer"))? {
        let entry = entry.map_err(io("reading a layer"))?;
        let path = entry_path(&entry.path().map_err(io("reading a layer"))?)?;
        match whiteout(&path) {
            Some(Whiteout::Opaque(dir)) => {
                if let Ok(children) = std::fs::read_dir(rootfs.join(&dir)) {
                    for child in children.flatten() {
                        remove_any(&child.path()).map_err(io("applying a whiteout"))?;
                    }
                }
            }
            Some(Whiteout::Remove(hidden)) => {
                remove_any(&rootfs.join(hidden)).map_err(io("applying a whiteout"))?
            }
            None => {}
        }
    }
    let mut tar = tar::Archive::new(layer_reader(data, media)?);
    tar.set_preserve_permissions(true);
    tar.set_preserve_ownerships(true);
    tar.set_overwrite(true);
    for entry in tar.entries().map_err(io("reading a layer"))? {
        let mut entry = entry.map_err(io("reading a layer"))?;
        let path = entry_path(&entry.path().map_err(io("reading a layer"))?)?;
        if whiteout(&path).is_some() || path.as_os_str().is_empty() {
            continue;
        }
        entry
            .unpack_in(rootfs)
            .map_err(io(format!("extracting {}", path.display())))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn index_lookup_takes_the_last_line_naming_the_reference() {
        let index = "localhost/etcd-operator:0.1.0\told.oci.tar\n\
                     localhost/etcd-operator:dev\tetcd-operator-0.1.0.oci.tar\n\
                     localhost/etcd-operator:0.1.0\tetcd-operator-0.1.0.oci.tar\n";
        assert_eq!(
            lookup_index(index, "localhost/etcd-operator:0.1.0").as_deref(),
            Some("etcd-operator-0.1.0.oci.tar")
        );
        assert_eq!(lookup_index(index, "etcd-operator:0.1.0"), None);
    }

    #[test]
    fn manifest_is_chosen_by_reference_or_as_the_only_one() {
        let m = |digest: &str, name: &str| {
            json!({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest,
                   "annotations": {"org.opencontainers.image.ref.name": name}})
        };
        let one = json!({"manifests": [m("sha256:a", "localhost/x:1")]});
        assert_eq!(
            choose_manifest(&one, "localhost/x:dev").unwrap(),
            "sha256:a"
        );
        let two =
            json!({"manifests": [m("sha256:a", "localhost/x:1"), m("sha256:b", "localhost/x:2")]});
        assert_eq!(choose_manifest(&two, "localhost/x:2").unwrap(), "sha256:b");
        assert!(choose_manifest(&two, "localhost/x:3").is_err());
    }

    #[test]
    fn image_config_defaults_working_dir_to_root() {
        let config = image_config(&json!({"config": {
            "Entrypoint": ["/usr/local/bin/etcd-operator"], "Cmd": ["run"],
            "User": "65532:65532", "Env": ["PATH=/usr/bin"]}}));
        assert_eq!(config.entrypoint, vec!["/usr/local/bin/etcd-operator"]);
        assert_eq!(config.cmd, vec!["run"]);
        assert_eq!(config.user, "65532:65532");
        assert_eq!(config.working_dir, "/");
    }

    #[test]
    fn whiteouts_are_recognised() {
        assert_eq!(
            whiteout(Path::new("etc/.wh.hosts")),
            Some(Whiteout::Remove(PathBuf::from("etc/hosts")))
        );
        assert_eq!(
            whiteout(Path::new("var/.wh..wh..opq")),
            Some(Whiteout::Opaque(PathBuf::from("var")))
        );
        assert_eq!(whiteout(Path::new("etc/hosts")), None);
    }

    fn layer(files: &[(&str, &str)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, content) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(content.len() as u64);
            header.set_mode(0o644);
            header.set_uid(0);
            header.set_gid(0);
            header.set_mtime(0);
            header.set_cksum();
            builder
                .append_data(&mut header, path, content.as_bytes())
                .unwrap();
        }
        builder.into_inner().unwrap()
    }

    #[test]
    fn layers_apply_in_order_with_whiteouts() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let tar = "application/vnd.oci.image.layer.v1.tar";
        apply_layer(
            &layer(&[("a/old", "1"), ("a/keep", "2"), ("b/x", "3")]),
            tar,
            root,
        )
        .unwrap();
        apply_layer(
            &layer(&[("a/.wh.old", ""), ("b/.wh..wh..opq", ""), ("b/y", "4")]),
            tar,
            root,
        )
        .unwrap();
        assert!(!root.join("a/old").exists());
        assert_eq!(std::fs::read_to_string(root.join("a/keep")).unwrap(), "2");
        assert!(!root.join("b/x").exists());
        assert_eq!(std::fs::read_to_string(root.join("b/y")).unwrap(), "4");
        assert!(!root.join("b/.wh..wh..opq").exists());
    }

    #[test]
    fn entries_leaving_the_root_are_refused() {
        assert!(entry_path(Path::new("../etc/passwd")).is_err());
        assert_eq!(
            entry_path(Path::new("./usr/bin")).unwrap(),
            PathBuf::from("usr/bin")
        );
    }
}
