//! etcd versions: parsing `X.Y.Z[-pre]`, ordering, and the one-minor-step upgrade rule.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// A semantic version as etcd releases use it: `major.minor.patch` with an optional
/// pre-release suffix (`3.6.0-rc.1`). A leading `v` is accepted on input.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Version {
    /// Major version (3 for every etcd v3 release).
    pub major: u64,
    /// Minor version: upgrades move it by at most one per step.
    pub minor: u64,
    /// Patch version.
    pub patch: u64,
    /// Pre-release suffix without the dash, if any.
    pub pre: Option<String>,
}

/// Why a version string was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("version {input:?} is not of the form X.Y.Z (optionally -prerelease)")]
pub struct VersionError {
    /// The rejected input.
    pub input: String,
}

impl FromStr for Version {
    type Err = VersionError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = || VersionError {
            input: input.to_string(),
        };
        let body = input.strip_prefix('v').unwrap_or(input);
        let (core, pre) = match body.split_once('-') {
            Some((core, pre)) if !pre.is_empty() => (core, Some(pre.to_string())),
            Some(_) => return Err(err()),
            None => (body, None),
        };
        let mut parts = core.split('.');
        let mut number = || -> Result<u64, VersionError> {
            let part = parts.next().ok_or_else(err)?;
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err());
            }
            part.parse().map_err(|_| err())
        };
        let (major, minor, patch) = (number()?, number()?, number()?);
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(Version {
            major,
            minor,
            patch,
            pre,
        })
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        if let Some(pre) = &self.pre {
            write!(f, "-{pre}")?;
        }
        Ok(())
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (&self.pre, &other.pre) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Greater,
                (Some(_), None) => Ordering::Less,
                (Some(a), Some(b)) => a.cmp(b),
            })
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// What moving a running cluster from one version to another would mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpgradePath {
    /// Nothing to do.
    Same,
    /// A permitted upgrade: same major, minor up by at most one.
    Allowed,
    /// The target is older than what runs.
    Downgrade,
    /// The target skips a minor version or changes the major version.
    TooFar,
}

impl Version {
    /// Whether this etcd release supports learner members (`member add --learner`, 3.4+).
    pub(crate) fn supports_learners(&self) -> bool {
        (self.major, self.minor) >= (3, 4)
    }

    /// Classifies an upgrade from `self` (running) to `target`.
    pub(crate) fn path_to(&self, target: &Version) -> UpgradePath {
        match target.cmp(self) {
            Ordering::Equal => UpgradePath::Same,
            Ordering::Less => UpgradePath::Downgrade,
            Ordering::Greater if target.major == self.major && target.minor <= self.minor + 1 => {
                UpgradePath::Allowed
            }
            Ordering::Greater => UpgradePath::TooFar,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        s.parse().unwrap()
    }

    #[test]
    fn parses_plain_prefixed_and_prerelease_versions() {
        assert_eq!(v("3.4.23").to_string(), "3.4.23");
        assert_eq!(v("v3.5.21"), v("3.5.21"));
        assert_eq!(v("3.6.0-rc.1").pre.as_deref(), Some("rc.1"));
    }

    #[test]
    fn rejects_words_missing_parts_and_extra_parts() {
        for bad in [
            "latest", "3.4", "3.4.x", "3.4.5.6", "", "3..4", "3.4.5-", " 3.4.5",
        ] {
            assert!(bad.parse::<Version>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn prerelease_sorts_before_its_release() {
        assert!(v("3.6.0-rc.1") < v("3.6.0"));
        assert!(v("3.5.9") < v("3.5.10"));
    }

    #[test]
    fn upgrade_path_allows_one_minor_and_refuses_downgrades_and_skips() {
        assert_eq!(v("3.4.23").path_to(&v("3.4.23")), UpgradePath::Same);
        assert_eq!(v("3.4.23").path_to(&v("3.5.21")), UpgradePath::Allowed);
        assert_eq!(v("3.4.1").path_to(&v("3.4.23")), UpgradePath::Allowed);
        assert_eq!(v("3.5.21").path_to(&v("3.4.23")), UpgradePath::Downgrade);
        assert_eq!(v("3.4.23").path_to(&v("3.6.0")), UpgradePath::TooFar);
        assert_eq!(v("3.4.23").path_to(&v("4.0.0")), UpgradePath::TooFar);
    }

    #[test]
    fn learners_start_with_3_4() {
        assert!(!v("3.3.25").supports_learners());
        assert!(v("3.4.0").supports_learners());
    }
}
