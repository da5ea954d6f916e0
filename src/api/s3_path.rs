//! An S3 `path` as the EtcdBackup and EtcdRestore specs write it: `<bucket>/<prefix>`.

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
