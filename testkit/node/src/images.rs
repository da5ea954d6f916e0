//! Maps container images to local programs: etcd images to binaries from a version table,
//! busybox and alpine images to the host's own tools; anything else cannot be "pulled".

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// An etcd release number, `X.Y.Z`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u64, pub u64, pub u64);

impl Version {
    /// Parses `X.Y.Z`, with an optional leading `v` and an ignored `-suffix`/`+build`
    /// (so `registry.k8s.io/etcd:3.5.21-0` is 3.5.21).
    pub fn parse(text: &str) -> Option<Version> {
        let text = text.strip_prefix('v').unwrap_or(text);
        let core = text.split(['-', '+']).next()?;
        let mut parts = core.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let patch = parts.next()?.parse().ok()?;
        if parts.next().is_some() {
            return None;
        }
        Some(Version(major, minor, patch))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The pieces of an image reference this node cares about.
#[derive(Debug, PartialEq, Eq)]
pub struct ImageRef<'a> {
    /// Everything before the tag, registry included (`quay.io/coreos/etcd`).
    pub repository: &'a str,
    /// The tag, if any (`v3.4.23`).
    pub tag: Option<&'a str>,
}

impl<'a> ImageRef<'a> {
    /// Splits `[registry[:port]/]path[:tag][@digest]`.
    pub fn parse(image: &'a str) -> ImageRef<'a> {
        let name = image.split('@').next().unwrap_or(image);
        let last_slash = name.rfind('/');
        match name.rfind(':') {
            Some(colon) if last_slash.is_none_or(|slash| colon > slash) => ImageRef {
                repository: &name[..colon],
                tag: Some(&name[colon + 1..]),
            },
            _ => ImageRef {
                repository: name,
                tag: None,
            },
        }
    }

    /// The last path segment of the repository (`etcd` for `quay.io/coreos/etcd`).
    pub fn short_name(&self) -> &'a str {
        self.repository
            .rsplit('/')
            .next()
            .unwrap_or(self.repository)
    }
}

/// The local binaries of one etcd release: `etcd` and, when found beside it, `etcdctl`
/// and `etcdutl`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdRelease {
    /// The release number.
    pub version: Version,
    /// Program name (`etcd`, `etcdctl`, `etcdutl`) to local path.
    pub tools: BTreeMap<String, PathBuf>,
}

impl EtcdRelease {
    /// The path of the `etcd` server binary.
    pub fn server(&self) -> &Path {
        &self.tools["etcd"]
    }
}

/// The table of etcd versions this node can run, from `--etcd-binary VERSION=PATH`.
#[derive(Clone, Debug, Default)]
pub struct EtcdBinaries {
    releases: BTreeMap<Version, EtcdRelease>,
}

impl EtcdBinaries {
    /// Parses entries like `3.4.23=/usr/bin/etcd`; a later entry for a version wins.
    /// `tools_of` finds the companion binaries of a server path (see [`sibling_tools`]).
    pub fn parse<'a>(
        entries: impl IntoIterator<Item = &'a str>,
        tools_of: impl Fn(&Path) -> BTreeMap<String, PathBuf>,
    ) -> Result<EtcdBinaries, String> {
        let mut releases = BTreeMap::new();
        for entry in entries {
            let entry = entry.trim();
            if entry.is_empty() {
                continue;
            }
            let (version, path) = entry
                .split_once('=')
                .ok_or_else(|| format!("etcd binary {entry:?} is not VERSION=PATH"))?;
            let version = Version::parse(version.trim())
                .ok_or_else(|| format!("etcd binary {entry:?}: {version:?} is not X.Y.Z"))?;
            let path = PathBuf::from(path.trim());
            let mut tools = tools_of(&path);
            tools.insert("etcd".to_string(), path);
            releases.insert(version, EtcdRelease { version, tools });
        }
        Ok(EtcdBinaries { releases })
    }

    /// The known versions, oldest first, as `3.4.23, 3.5.21` (or `none`).
    pub fn known_versions(&self) -> String {
        if self.releases.is_empty() {
            return "none".to_string();
        }
        self.releases
            .keys()
            .map(Version::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The release for a version, if configured.
    pub fn get(&self, version: Version) -> Option<&EtcdRelease> {
        self.releases.get(&version)
    }

    /// Every configured release.
    pub fn releases(&self) -> impl Iterator<Item = &EtcdRelease> {
        self.releases.values()
    }
}

/// Finds `etcdctl` and `etcdutl` in the directory of an `etcd` binary.
pub fn sibling_tools(server: &Path) -> BTreeMap<String, PathBuf> {
    let mut tools = BTreeMap::new();
    if let Some(dir) = server.parent() {
        for name in ["etcdctl", "etcdutl"] {
            let candidate = dir.join(name);
            if candidate.is_file() {
                tools.insert(name.to_string(), candidate);
            }
        }
    }
    tools
}

/// What a container image runs as on this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Program {
    /// An etcd image: its entrypoint is the mapped `etcd` binary.
    Etcd(EtcdRelease),
    /// A busybox or alpine image: its command runs with the host's tools.
    HostTools,
    /// An image built on this machine: runs rooted in its own file system.
    Image(Box<crate::imagestore::LocalImage>),
}

impl Program {
    /// What the node reports as the container's `imageID`.
    pub fn image_id(&self) -> String {
        match self {
            Program::Etcd(release) => format!("process://{}", release.server().display()),
            Program::HostTools => "process://host-tools".to_string(),
            Program::Image(image) => image.image_id(),
        }
    }
}

/// Decides what runs an image; the error is the "image pull" message shown in the
/// container's `ErrImagePull` waiting state.
pub fn resolve(image: &str, table: &EtcdBinaries) -> Result<Program, String> {
    let reference = ImageRef::parse(image);
    match reference.short_name() {
        "etcd" => {
            let version = reference.tag.and_then(Version::parse);
            match version.and_then(|v| table.get(v)) {
                Some(release) => Ok(Program::Etcd(release.clone())),
                None => Err(format!(
                    "no local binary for image {image}; known etcd versions: {} \
                     (give the node --etcd-binary VERSION=PATH)",
                    table.known_versions()
                )),
            }
        }
        "busybox" | "alpine" => Ok(Program::HostTools),
        _ => Err(format!(
            "no local binary for image {image}; this node runs etcd images \
             (known etcd versions: {}), busybox/alpine images with the host's tools, \
             and images built here (testkit/env/build-image.sh)",
            table.known_versions()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> EtcdBinaries {
        EtcdBinaries::parse(
            ["3.4.23=/usr/bin/etcd", "v3.5.21=/opt/etcd-3.5.21/etcd"],
            |_| BTreeMap::new(),
        )
        .unwrap()
    }

    #[test]
    fn image_reference_splits_registry_path_and_tag() {
        let r = ImageRef::parse("quay.io/coreos/etcd:v3.4.23");
        assert_eq!(r.repository, "quay.io/coreos/etcd");
        assert_eq!(r.tag, Some("v3.4.23"));
        assert_eq!(r.short_name(), "etcd");
    }

    #[test]
    fn registry_port_is_not_mistaken_for_a_tag() {
        let r = ImageRef::parse("localhost:5000/etcd");
        assert_eq!(r.repository, "localhost:5000/etcd");
        assert_eq!(r.tag, None);
        let r = ImageRef::parse("localhost:5000/etcd:3.5.21@sha256:abc");
        assert_eq!(r.tag, Some("3.5.21"));
    }

    #[test]
    fn etcd_image_tag_selects_binary_with_or_without_v() {
        for image in [
            "quay.io/coreos/etcd:v3.4.23",
            "gcr.io/etcd-development/etcd:3.4.23",
            "registry.k8s.io/etcd:3.4.23-0",
        ] {
            match resolve(image, &table()).unwrap() {
                Program::Etcd(r) => assert_eq!(r.server(), Path::new("/usr/bin/etcd")),
                other => panic!("{image}: {other:?}"),
            }
        }
        match resolve("gcr.io/etcd-development/etcd:v3.5.21", &table()).unwrap() {
            Program::Etcd(r) => assert_eq!(r.version, Version(3, 5, 21)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_etcd_version_explains_what_is_known() {
        let err = resolve("quay.io/coreos/etcd:v3.9.9", &table()).unwrap_err();
        assert!(
            err.starts_with("no local binary for image quay.io/coreos/etcd:v3.9.9"),
            "{err}"
        );
        assert!(err.contains("known etcd versions: 3.4.23, 3.5.21"), "{err}");
    }

    #[test]
    fn untagged_etcd_image_is_not_runnable() {
        assert!(resolve("quay.io/coreos/etcd", &table()).is_err());
    }

    #[test]
    fn busybox_and_alpine_use_host_tools() {
        assert_eq!(resolve("busybox:1.36", &table()), Ok(Program::HostTools));
        assert_eq!(
            resolve("docker.io/library/alpine", &table()),
            Ok(Program::HostTools)
        );
    }

    #[test]
    fn other_images_cannot_be_pulled() {
        let err = resolve("nginx:1.25", &table()).unwrap_err();
        assert!(
            err.starts_with("no local binary for image nginx:1.25"),
            "{err}"
        );
        assert!(err.contains("known etcd versions: 3.4.23, 3.5.21"), "{err}");
    }

    #[test]
    fn malformed_table_entries_are_rejected() {
        assert!(EtcdBinaries::parse(["3.4.23"], |_| BTreeMap::new()).is_err());
        assert!(EtcdBinaries::parse(["latest=/usr/bin/etcd"], |_| BTreeMap::new()).is_err());
    }

    #[test]
    fn empty_table_says_none() {
        assert_eq!(EtcdBinaries::default().known_versions(), "none");
    }

    #[test]
    fn version_parse_rejects_partial_numbers() {
        assert_eq!(Version::parse("3.4"), None);
        assert_eq!(Version::parse("3.4.23.1"), None);
        assert_eq!(Version::parse("v3.6.0"), Some(Version(3, 6, 0)));
    }
}
