//! An S3 (or S3-compatible) store as the EtcdBackup and EtcdRestore specs write it, and
//! its `path`: `<bucket>/<prefix>` or `<bucket>/<key>`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An S3 (or S3-compatible) store (CoreOS names): where an EtcdBackup writes and where an
/// EtcdRestore (or a recovery) reads.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3Store {
    /// `<bucket>/<prefix>`: a backup stores its snapshots under the prefix (which may be
    /// empty). A restore reads `<bucket>/<key>` of one snapshot, or the newest snapshot
    /// under `<bucket>/<prefix>` whose metadata object verifies.
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$"))]
    pub path: String,
    /// Secret with the credentials: `accessKey` and `secretKey` (optionally
    /// `sessionToken` and `region`), or the AWS `credentials` file (profile `default`)
    /// with an optional `config` file for the region.
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"))]
    pub aws_secret: String,
    /// URL of an S3-compatible store; unset: AWS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^https?://[^/\s]+/?$"))]
    pub endpoint: Option<String>,
    /// Address buckets in the path (`<endpoint>/<bucket>/...`) instead of as a subdomain.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force_path_style: bool,
}

/// `<bucket>/<prefix>` split at the first `/` (the prefix may be empty; slashes around
/// it are dropped).
pub fn split_path(path: &str) -> (&str, &str) {
    match path.split_once('/') {
        Some((bucket, prefix)) => (bucket, prefix.trim_matches('/')),
        None => (path, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_splits_into_bucket_and_prefix() {
        assert_eq!(split_path("bucket/a/b/"), ("bucket", "a/b"));
        assert_eq!(split_path("bucket"), ("bucket", ""));
    }
}
