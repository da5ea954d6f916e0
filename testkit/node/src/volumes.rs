//! Pod volumes on the host: emptyDir as a directory in the pod's state (mode 0777, as the
//! kubelet makes it), hostPath as is, a persistentVolumeClaim as the directory of the
//! volume bound to it (see [`crate::storage`]; it outlives the pod), configMap and secret
//! as files; projected volumes
//! (service-account tokens, configMap, secret and downward API sources) as files for
//! containers rooted in their image (see [`crate::tokens`]); other kinds are skipped
//! (nothing is mounted for them). Files are replaced in place (write, then rename), so a
//! running container's bind mount of the volume sees updates; configMap and secret
//! volumes are written and kept in step with their objects by [`crate::keysync`].

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, KeyToPath, Pod, Secret, Volume, VolumeProjection,
};
use kube::{Api, Client};

use crate::envvars::PodFacts;
use crate::expand::expand_with;
use crate::keysync;
use crate::statedir::PodDir;
use crate::tokens::{self, Binding, TokenFile};

/// A bind mount to make in the container's mount namespace.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mount {
    /// Host path.
    pub source: PathBuf,
    /// Path seen by the container.
    pub target: String,
    /// Whether it is remounted read-only.
    pub read_only: bool,
}

/// How a volume is provided.
#[derive(Clone, Debug, PartialEq)]
pub enum Provision {
    /// A directory of the pod's state.
    EmptyDir,
    /// A host path; `create` for `DirectoryOrCreate`.
    HostPath {
        /// The path.
        path: PathBuf,
        /// Whether to create the directory.
        create: bool,
    },
    /// The directory of the volume bound to a claim.
    Claim {
        /// The claim's name, in the pod's namespace.
        claim: String,
    },
    /// Files from the keys of a ConfigMap or a Secret.
    Keys(KeySource),
    /// Files from several sources (service-account token, configMap, secret, downward API).
    Projected {
        /// The sources.
        sources: Vec<VolumeProjection>,
        /// File mode.
        mode: u32,
    },
    /// Not provided on this node; mounts of it are left out.
    Skip,
}

/// Decides how a volume is provided.
pub fn provision(volume: &Volume) -> Provision {
    if volume.empty_dir.is_some() {
        Provision::EmptyDir
    } else if let Some(h) = &volume.host_path {
        Provision::HostPath {
            path: PathBuf::from(&h.path),
            create: h.type_.as_deref() == Some("DirectoryOrCreate"),
        }
    } else if let Some(c) = &volume.persistent_volume_claim {
        Provision::Claim {
            claim: c.claim_name.clone(),
        }
    } else if let Some(c) = &volume.config_map {
        Provision::Keys(KeySource {
            kind: KeyKind::ConfigMap,
            name: c.name.clone(),
            items: c.items.clone().unwrap_or_default(),
            optional: c.optional == Some(true),
            mode: c.default_mode.unwrap_or(0o644) as u32,
        })
    } else if let Some(s) = &volume.secret {
        Provision::Keys(KeySource {
            kind: KeyKind::Secret,
            name: s.secret_name.clone().unwrap_or_default(),
            items: s.items.clone().unwrap_or_default(),
            optional: s.optional == Some(true),
            mode: s.default_mode.unwrap_or(0o644) as u32,
        })
    } else if let Some(p) = &volume.projected {
        Provision::Projected {
            sources: p.sources.clone().unwrap_or_default(),
            mode: p.default_mode.unwrap_or(0o644) as u32,
        }
    } else {
        Provision::Skip
    }
}

fn is_relative_and_inside(path: &str) -> bool {
    let p = Path::new(path);
    !path.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)))
}

/// The bind mounts of a container, given the host path of each provided volume;
/// `subPath` (and `subPathExpr`, expanded with `env`) select a path inside the volume.
pub fn mounts_for(
    container: &Container,
    volumes: &BTreeMap<String, PathBuf>,
    env: &[(String, String)],
) -> Result<Vec<Mount>, String> {
    let mut mounts = Vec::new();
    for m in container.volume_mounts.iter().flatten() {
        let Some(root) = volumes.get(&m.name) else {
            continue;
        };
        let sub = match (&m.sub_path, &m.sub_path_expr) {
            (Some(p), _) if !p.is_empty() => Some(p.clone()),
            (_, Some(e)) if !e.is_empty() => Some(expand_with(e, env)),
            _ => None,
        };
        let source = match sub {
            Some(sub) if is_relative_and_inside(&sub) => root.join(sub),
            Some(sub) => return Err(format!("volumeMount {}: bad subPath {sub:?}", m.name)),
            None => root.clone(),
        };
        if !m.mount_path.starts_with('/') {
            return Err(format!(
                "volumeMount {}: mountPath {:?} is not absolute",
                m.name, m.mount_path
            ));
        }
        mounts.push(Mount {
            source,
            target: m.mount_path.clone(),
            read_only: m.read_only == Some(true),
        });
    }
    Ok(mounts)
}

/// Where a volume's keys come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    /// A ConfigMap (`data` and `binaryData`).
    ConfigMap,
    /// A Secret (`data`).
    Secret,
}

impl KeyKind {
    fn label(self) -> &'static str {
        match self {
            KeyKind::ConfigMap => "configmap",
            KeyKind::Secret => "secret",
        }
    }

    /// The keys of the object `name` in `ns`; `None` when it does not exist.
    async fn data(
        self,
        client: &Client,
        ns: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
        match self {
            KeyKind::ConfigMap => config_map_data(client, ns, name).await,
            KeyKind::Secret => secret_data(client, ns, name).await,
        }
    }
}

/// A configMap or secret volume's source, as the pod names it.
#[derive(Clone, Debug, PartialEq)]
pub struct KeySource {
    /// ConfigMap or Secret.
    pub kind: KeyKind,
    /// The object's name.
    pub name: String,
    /// Selected keys, or all when empty.
    pub items: Vec<KeyToPath>,
    /// Whether a missing object is fine.
    pub optional: bool,
    /// File mode.
    pub mode: u32,
}

impl KeySource {
    /// The files of the source's keys, read from the API; none when the source is missing
    /// and optional, an error when it is missing otherwise.
    pub async fn files(&self, client: &Client, ns: &str) -> Result<Vec<VolumeFile>, String> {
        match self.kind.data(client, ns, &self.name).await? {
            Some(data) => select_files(&data, &self.items, self.mode),
            None if self.optional => Ok(Vec::new()),
            None => Err(format!("{} {:?} not found", self.kind.label(), self.name)),
        }
    }
}

/// A file to write into a volume: its path inside the volume, its content and its mode.
pub type VolumeFile = (String, Vec<u8>, u32);

/// The files of a key/value source: every key, or only `items` (key → path, own mode).
pub fn select_files(
    data: &BTreeMap<String, Vec<u8>>,
    items: &[KeyToPath],
    mode: u32,
) -> Result<Vec<VolumeFile>, String> {
    if items.is_empty() {
        return Ok(data
            .iter()
            .map(|(k, v)| (k.clone(), v.clone(), mode))
            .collect());
    }
    items
        .iter()
        .map(|item| {
            let value = data
                .get(&item.key)
                .ok_or_else(|| format!("key {:?} not found", item.key))?;
            let mode = item.mode.map(|m| m as u32).unwrap_or(mode);
            Ok((item.path.clone(), value.clone(), mode))
        })
        .collect()
}

/// Makes `dir` hold exactly `files`, each replaced atomically.
pub fn write_files(dir: &Path, files: &[VolumeFile]) -> Result<(), String> {
    let err = |e: std::io::Error| format!("{}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(err)?;
    for (path, value, mode) in files {
        write_file_atomically(dir, path, value, *mode)?;
    }
    let wanted: Vec<PathBuf> = files.iter().map(|(p, _, _)| dir.join(p)).collect();
    remove_unwanted(dir, &wanted).map_err(err)
}

/// Replaces `dir/path` with `value` (mode `mode`): written beside it, then renamed over it.
pub fn write_file_atomically(
    dir: &Path,
    path: &str,
    value: &[u8],
    mode: u32,
) -> Result<(), String> {
    if !is_relative_and_inside(path) {
        return Err(format!("bad key path {path:?}"));
    }
    let file = dir.join(path);
    let err = |e: std::io::Error| format!("{}: {e}", file.display());
    let parent = file.parent().unwrap_or(dir);
    std::fs::create_dir_all(parent).map_err(err)?;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = parent.join(format!("..{name}.tmp"));
    std::fs::write(&temp, value).map_err(err)?;
    std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(mode & 0o777)).map_err(err)?;
    std::fs::rename(&temp, &file).map_err(err)
}

/// Removes the files under `dir` not in `wanted`, and directories left empty.
fn remove_unwanted(dir: &Path, wanted: &[PathBuf]) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if std::fs::symlink_metadata(&path)?.is_dir() {
            remove_unwanted(&path, wanted)?;
            if std::fs::read_dir(&path)?.next().is_none() {
                std::fs::remove_dir(&path)?;
            }
        } else if !wanted.contains(&path) {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

async fn config_map_data(
    client: &Client,
    ns: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| format!("reading configmap {name}: {e}"))?;
    Ok(cm.map(|cm| {
        let mut data: BTreeMap<String, Vec<u8>> = cm
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes()))
            .collect();
        for (k, v) in cm.binary_data.unwrap_or_default() {
            data.insert(k, v.0);
        }
        data
    }))
}

async fn secret_data(
    client: &Client,
    ns: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| format!("reading secret {name}: {e}"))?;
    Ok(secret.map(|s| {
        s.data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect()
    }))
}

/// The volumes of a pod made real on the host.
#[derive(Debug, Default)]
pub struct Materialized {
    /// Volume name → host path.
    pub paths: BTreeMap<String, PathBuf>,
    /// The service-account token files written, to keep fresh.
    pub tokens: Vec<TokenFile>,
    /// The configMap and secret volumes, to keep in step with their objects.
    pub synced: Vec<keysync::SyncedVolume>,
}

/// Makes every provided volume of `pod` real on the host (`node`); projected volumes only
/// when `projected` (containers rooted in their image; processes on the host keep
/// skipping them). A claim not bound yet is an error: the container waits.
pub async fn materialize(
    client: &Client,
    node: &str,
    pod: &Pod,
    pod_dir: &PodDir,
    projected: bool,
) -> Result<Materialized, String> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.clone())
        .unwrap_or_default();
    let mut done = Materialized::default();
    for volume in &volumes {
        let dir = pod_dir.volume(&volume.name);
        let io = |e: std::io::Error| format!("volume {}: {e}", volume.name);
        let path = match provision(volume) {
            Provision::EmptyDir => {
                std::fs::create_dir_all(&dir).map_err(io)?;
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
                    .map_err(io)?;
                dir
            }
            Provision::HostPath { path, create } => {
                if create {
                    std::fs::create_dir_all(&path).map_err(io)?;
                }
                path
            }
            Provision::Claim { claim } => {
                crate::storage::mount::claim_dir(client, &namespace, &claim, node)
                    .await
                    .map_err(|e| format!("volume {}: {e}", volume.name))?
            }
            Provision::Keys(source) => {
                keysync::write_atomically(&dir, &source.files(client, &namespace).await?)?;
                done.synced.push(keysync::SyncedVolume {
                    dir: dir.clone(),
                    source,
                });
                dir
            }
            Provision::Projected { sources, mode } if projected => {
                let files =
                    projected_files(client, pod, &dir, &sources, mode, &mut done.tokens).await?;
                write_files(&dir, &files)?;
                dir
            }
            Provision::Projected { .. } | Provision::Skip => continue,
        };
        done.paths.insert(volume.name.clone(), path);
    }
    Ok(done)
}

/// The files of a projected volume at `dir`; the token files among them are added to
/// `tokens`.
async fn projected_files(
    client: &Client,
    pod: &Pod,
    dir: &Path,
    sources: &[VolumeProjection],
    mode: u32,
    tokens: &mut Vec<TokenFile>,
) -> Result<Vec<VolumeFile>, String> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let mut files = Vec::new();
    for source in sources {
        if let Some(t) = &source.service_account_token {
            let seconds = t
                .expiration_seconds
                .unwrap_or(tokens::DEFAULT_EXPIRATION_SECONDS);
            let issued =
                tokens::request(client, &Binding::of(pod), t.audience.as_deref(), seconds).await?;
            files.push((t.path.clone(), issued.token.into_bytes(), mode));
            tokens.push(TokenFile {
                dir: dir.to_path_buf(),
                path: t.path.clone(),
                audience: t.audience.clone(),
                expiration_seconds: seconds,
                mode,
                refresh_at: tokens::refresh_at(seconds, issued.expires, jiff::Timestamp::now()),
            });
        } else if let Some(c) = &source.config_map {
            let keys = KeySource {
                kind: KeyKind::ConfigMap,
                name: c.name.clone(),
                items: c.items.clone().unwrap_or_default(),
                optional: c.optional == Some(true),
                mode,
            };
            files.extend(keys.files(client, &namespace).await?);
        } else if let Some(c) = &source.secret {
            let keys = KeySource {
                kind: KeyKind::Secret,
                name: c.name.clone(),
                items: c.items.clone().unwrap_or_default(),
                optional: c.optional == Some(true),
                mode,
            };
            files.extend(keys.files(client, &namespace).await?);
        } else if let Some(d) = &source.downward_api {
            files.extend(downward_files(
                pod,
                d.items.as_deref().unwrap_or_default(),
                mode,
            )?);
        } else {
            return Err("projected volume: only serviceAccountToken, configMap, secret and downwardAPI sources are supported".into());
        }
    }
    Ok(files)
}

/// Downward API files: `fieldRef` values of the pod.
pub fn downward_files(
    pod: &Pod,
    items: &[k8s_openapi::api::core::v1::DownwardAPIVolumeFile],
    mode: u32,
) -> Result<Vec<VolumeFile>, String> {
    let facts = PodFacts::of(pod, "", "");
    items
        .iter()
        .map(|item| {
            let field = item
                .field_ref
                .as_ref()
                .ok_or_else(|| format!("downwardAPI {}: only fieldRef is supported", item.path))?;
            let mode = item.mode.map(|m| m as u32).unwrap_or(mode);
            Ok((
                item.path.clone(),
                facts.field(&field.field_path)?.into_bytes(),
                mode,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, ProjectedVolumeSource, VolumeMount};

    fn container(mounts: Vec<VolumeMount>) -> Container {
        Container {
            volume_mounts: Some(mounts),
            ..Default::default()
        }
    }

    fn vm(name: &str, path: &str) -> VolumeMount {
        VolumeMount {
            name: name.into(),
            mount_path: path.into(),
            ..Default::default()
        }
    }

    #[test]
    fn empty_dir_and_projected_volumes_are_classified() {
        let v = Volume {
            name: "data".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        };
        assert_eq!(provision(&v), Provision::EmptyDir);
        let v = Volume {
            name: "kube-api-access".into(),
            projected: Some(ProjectedVolumeSource::default()),
            ..Default::default()
        };
        assert_eq!(
            provision(&v),
            Provision::Projected {
                sources: vec![],
                mode: 0o644
            }
        );
    }

    #[test]
    fn a_claim_volume_is_provided_by_its_claim() {
        let v = Volume {
            name: "data".into(),
            persistent_volume_claim: Some(
                k8s_openapi::api::core::v1::PersistentVolumeClaimVolumeSource {
                    claim_name: "data-m1".into(),
                    read_only: None,
                },
            ),
            ..Default::default()
        };
        assert_eq!(
            provision(&v),
            Provision::Claim {
                claim: "data-m1".into()
            }
        );
    }

    #[test]
    fn mounts_of_skipped_volumes_are_left_out() {
        let volumes: BTreeMap<String, PathBuf> =
            [("data".to_string(), PathBuf::from("/s/v/data"))].into();
        let c = container(vec![
            vm("data", "/var/etcd"),
            vm(
                "kube-api-access",
                "/var/run/secrets/kubernetes.io/serviceaccount",
            ),
        ]);
        assert_eq!(
            mounts_for(&c, &volumes, &[]).unwrap(),
            vec![Mount {
                source: "/s/v/data".into(),
                target: "/var/etcd".into(),
                read_only: false
            }]
        );
    }

    #[test]
    fn sub_path_selects_inside_volume_and_rejects_escapes() {
        let volumes: BTreeMap<String, PathBuf> =
            [("data".to_string(), PathBuf::from("/s/data"))].into();
        let mut m = vm("data", "/x");
        m.sub_path = Some("a/b".into());
        m.read_only = Some(true);
        let got = mounts_for(&container(vec![m.clone()]), &volumes, &[]).unwrap();
        assert_eq!(got[0].source, PathBuf::from("/s/data/a/b"));
        assert!(got[0].read_only);
        m.sub_path = Some("../etc".into());
        assert!(mounts_for(&container(vec![m]), &volumes, &[]).is_err());
    }

    #[test]
    fn sub_path_expr_expands_env() {
        let volumes: BTreeMap<String, PathBuf> =
            [("data".to_string(), PathBuf::from("/s/data"))].into();
        let mut m = vm("data", "/x");
        m.sub_path_expr = Some("$(POD_NAME)".into());
        let env = vec![("POD_NAME".to_string(), "m1".to_string())];
        let got = mounts_for(&container(vec![m]), &volumes, &env).unwrap();
        assert_eq!(got[0].source, PathBuf::from("/s/data/m1"));
    }

    #[test]
    fn key_files_are_written_all_or_selected() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("cm");
        let data: BTreeMap<String, Vec<u8>> = [
            ("a".to_string(), b"1".to_vec()),
            ("b".to_string(), b"2".to_vec()),
        ]
        .into();
        write_files(&dir, &select_files(&data, &[], 0o644).unwrap()).unwrap();
        assert_eq!(std::fs::read(dir.join("a")).unwrap(), b"1");
        assert_eq!(std::fs::read(dir.join("b")).unwrap(), b"2");
        let items = vec![KeyToPath {
            key: "b".into(),
            path: "sub/bee".into(),
            mode: Some(0o600),
        }];
        write_files(&dir, &select_files(&data, &items, 0o644).unwrap()).unwrap();
        assert!(!dir.join("a").exists());
        let bee = dir.join("sub/bee");
        assert_eq!(std::fs::read(&bee).unwrap(), b"2");
        assert_eq!(
            std::fs::metadata(&bee).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
