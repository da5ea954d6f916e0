//! etcd versions: parsing `X.Y.Z[-pre]`, ordering, the one-minor-step upgrade rule, and
//! the patch releases a minor must reach before it may step to the next one.

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UpgradePath {
    /// Nothing to do.
    Same,
    /// A permitted upgrade: same major, minor up by at most one.
    Allowed,
    /// The target is older than what runs.
    Downgrade,
    /// The target skips a minor version or changes the major version.
    TooFar,
    /// The target is the next minor, but the running patch release has known defects
    /// that make that step unsafe: the cluster must first move to `through` (or a later
    /// patch of its own minor).
    UnsafePatch {
        /// The first patch release of the running minor that may step to the target.
        through: Version,
        /// What goes wrong when stepping from the running patch, one sentence each.
        problems: Vec<&'static str>,
    },
}

/// A defect of the patch releases of one minor that breaks an upgrade to the next minor,
/// fixed in a later patch of the same minor.
struct NextMinorHazard {
    /// The minor (`major`, `minor`) whose early patches have the defect.
    minor: (u64, u64),
    /// The first patch of that minor without it.
    fixed_in_patch: u64,
    /// What goes wrong, for the refusal's message.
    problem: &'static str,
}

/// Every known defect that makes a step to the next minor unsafe from some patch releases.
/// An upgrade from an affected patch is refused until the cluster runs the highest
/// `fixed_in_patch` of its minor.
const NEXT_MINOR_HAZARDS: &[NextMinorHazard] = &[
    NextMinorHazard {
        minor: (3, 5),
        fixed_in_patch: 20,
        problem: "below 3.5.20 a learner's promotion is not persisted in the v3store, \
                  which 3.6 reads membership from (etcd-io/etcd#19557), and this operator \
                  adds every member as a learner",
    },
    NextMinorHazard {
        minor: (3, 5),
        fixed_in_patch: 26,
        problem: "below 3.5.26 members removed earlier can come back as zombie members \
                  after the upgrade to 3.6",
    },
];

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
            Ordering::Greater if target.major == self.major && target.minor == self.minor + 1 => {
                self.unsafe_step_to_next_minor()
                    .unwrap_or(UpgradePath::Allowed)
            }
            Ordering::Greater if target.major == self.major && target.minor == self.minor => {
                UpgradePath::Allowed
            }
            Ordering::Greater => UpgradePath::TooFar,
        }
    }

    /// The refusal of a step from this patch release to the next minor, when a known
    /// defect of this patch makes it unsafe ([`NEXT_MINOR_HAZARDS`]).
    fn unsafe_step_to_next_minor(&self) -> Option<UpgradePath> {
        let own = NEXT_MINOR_HAZARDS
            .iter()
            .filter(|h| h.minor == (self.major, self.minor));
        let through = own.clone().map(|h| h.fixed_in_patch).max()?;
        let fixed = |patch: u64| Version {
            major: self.major,
            minor: self.minor,
            patch,
            pre: None,
        };
        let problems: Vec<&'static str> = own
            .filter(|h| self < &fixed(h.fixed_in_patch))
            .map(|h| h.problem)
            .collect();
        (!problems.is_empty()).then(|| UpgradePath::UnsafePatch {
            through: fixed(through),
            problems,
        })
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
    fn step_to_3_6_needs_3_5_26_and_names_every_defect_of_the_running_patch() {
        let UpgradePath::UnsafePatch { through, problems } = v("3.5.19").path_to(&v("3.6.0"))
        else {
            panic!("3.5.19 -> 3.6.0 allowed");
        };
        assert_eq!(through, v("3.5.26"));
        assert_eq!(problems.len(), 2, "{problems:?}");
        let UpgradePath::UnsafePatch { problems, .. } = v("3.5.25").path_to(&v("3.6.16")) else {
            panic!("3.5.25 -> 3.6.16 allowed");
        };
        assert!(problems[0].contains("zombie"), "{problems:?}");
        assert!(matches!(
            v("3.5.26-rc.1").path_to(&v("3.6.0")),
            UpgradePath::UnsafePatch { .. }
        ));
        assert_eq!(v("3.5.26").path_to(&v("3.6.0")), UpgradePath::Allowed);
        assert_eq!(v("3.5.19").path_to(&v("3.5.26")), UpgradePath::Allowed);
        assert_eq!(v("3.4.1").path_to(&v("3.5.0")), UpgradePath::Allowed);
    }

    #[test]
    fn learners_start_with_3_4() {
        assert!(!v("3.3.25").supports_learners());
        assert!(v("3.4.0").supports_learners());
    }
}
