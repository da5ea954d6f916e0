//! Which etcd images clusters may run: the repositories the operator is configured with
//! (`--allowed-image-repositories`). `spec.repository` is any string a user writes, and
//! the operator runs it with the namespace's rights on whatever node it lands; so a
//! repository outside the list blocks the cluster (`ImageNotAllowed`, with the list)
//! before any pod is made.

/// etcd's official image repositories: the default list.
pub const OFFICIAL_REPOSITORIES: &[&str] = &[
    "quay.io/coreos/etcd",
    "gcr.io/etcd-development/etcd",
    "registry.k8s.io/etcd",
];

/// The flag that sets the list.
pub const FLAG: &str = "--allowed-image-repositories";

/// The repositories clusters may name: an entry is a repository (`quay.io/coreos/etcd`),
/// or, ending in `/`, every repository under it (`registry.corp.example/mirror/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePolicy {
    repositories: Vec<String>,
}

impl Default for ImagePolicy {
    fn default() -> Self {
        ImagePolicy::new(OFFICIAL_REPOSITORIES.iter().map(|r| r.to_string()))
    }
}

impl ImagePolicy {
    /// The policy allowing `repositories` (empty entries are dropped).
    pub fn new(repositories: impl IntoIterator<Item = String>) -> Self {
        ImagePolicy {
            repositories: repositories
                .into_iter()
                .map(|r| r.trim().to_string())
                .filter(|r| !r.is_empty())
                .collect(),
        }
    }

    /// Whether `repository` may run.
    pub fn allows(&self, repository: &str) -> bool {
        self.repositories
            .iter()
            .any(|allowed| match allowed.strip_suffix('/') {
                Some(_) => repository.starts_with(allowed.as_str()),
                None => repository == allowed,
            })
    }

    /// Why `repository` may not run, when it may not.
    pub fn problem(&self, repository: &str) -> Option<String> {
        (!self.allows(repository)).then(|| {
            format!(
                "spec.repository {repository} is not one the operator may run: allowed are {} \
                 (the operator's {FLAG}); nothing is created until the spec names one of them",
                self.repositories.join(", ")
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_official_repositories_are_allowed_by_default_and_others_are_not() {
        let policy = ImagePolicy::default();
        for repository in OFFICIAL_REPOSITORIES {
            assert!(policy.allows(repository), "{repository}");
        }
        for repository in [
            "evil.example/etcd",
            "quay.io/coreos/etcd-evil",
            "quay.io/coreos",
        ] {
            let problem = policy.problem(repository).expect("refused");
            assert!(problem.contains(repository), "{problem}");
            assert!(
                problem.contains("quay.io/coreos/etcd, "),
                "the list: {problem}"
            );
            assert!(problem.contains(FLAG), "{problem}");
        }
    }

    #[test]
    fn an_entry_ending_in_a_slash_allows_every_repository_under_it() {
        let policy = ImagePolicy::new(["registry.corp.example/mirror/".to_string()]);
        assert!(policy.allows("registry.corp.example/mirror/etcd"));
        assert!(!policy.allows("registry.corp.example/mirrored/etcd"));
        assert!(!policy.allows("quay.io/coreos/etcd"));
    }
}
