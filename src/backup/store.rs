//! The object store backups go to: one API (`object_store`) over S3, GCS and Azure Blob
//! Storage, with the calls a backup (and a restore) makes.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig,
    WriteMultipart,
};
use sha2::{Digest, Sha256};

use super::credentials::{AbsCredentials, GcsCredentials, S3Credentials};
use super::naming::{BackupName, join};
use super::retention::StoredBackup;

/// Size of each part of a multipart upload: at most a few of these are in memory at once.
pub const PART_SIZE: usize = 8 * 1024 * 1024;
/// Parts uploaded at the same time.
const PARTS_IN_FLIGHT: usize = 2;
/// Region used when the Secret names none.
pub const DEFAULT_REGION: &str = "us-east-1";

/// Where in a store: a bucket (or container) and a prefix in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// Bucket or container.
    pub bucket: String,
    /// Prefix of every object (may be empty).
    pub prefix: String,
}

/// A store and its credentials.
#[derive(Debug, Clone)]
pub enum StoreConfig {
    /// S3 or an S3-compatible store.
    S3 {
        /// Bucket and prefix.
        location: Location,
        /// URL of an S3-compatible store; `None`: AWS.
        endpoint: Option<String>,
        /// Path-style addressing (`<endpoint>/<bucket>`).
        force_path_style: bool,
        /// Keys.
        credentials: S3Credentials,
    },
    /// Google Cloud Storage.
    Gcs {
        /// Bucket and prefix.
        location: Location,
        /// Service account key.
        credentials: Arc<GcsCredentials>,
    },
    /// Azure Blob Storage.
    Abs {
        /// Container and prefix.
        location: Location,
        /// Account and key.
        credentials: Arc<AbsCredentials>,
    },
}

impl std::fmt::Debug for GcsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GcsCredentials(..)")
    }
}

impl std::fmt::Debug for AbsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AbsCredentials")
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

/// Deadlines of store calls.
#[derive(Debug, Clone, Copy)]
pub struct StoreTimeouts {
    /// Connecting.
    pub connect: Duration,
    /// One request (a part upload, a list page...).
    pub request: Duration,
    /// Retries of one request give up after this.
    pub retry: Duration,
}

impl Default for StoreTimeouts {
    fn default() -> Self {
        StoreTimeouts {
            connect: Duration::from_secs(5),
            request: Duration::from_secs(60),
            retry: Duration::from_secs(20),
        }
    }
}

/// What a store call failed with, classified for the status `Reason`.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached.
    #[error("the object store is unreachable: {0}")]
    Unreachable(String),
    /// The credentials were refused.
    #[error("the object store refused the credentials: {0}")]
    AccessDenied(String),
    /// The bucket (or container) does not exist.
    #[error("bucket {bucket} does not exist: {message}")]
    BucketNotFound {
        /// The bucket.
        bucket: String,
        /// What the store said.
        message: String,
    },
    /// An object was not found.
    #[error("object {0} does not exist")]
    ObjectNotFound(String),
    /// The configuration is not usable (a bad endpoint URL...).
    #[error("the object store configuration is invalid: {0}")]
    Config(String),
    /// Anything else the store said.
    #[error("the object store failed: {0}")]
    Other(String),
}

impl StoreError {
    /// CamelCase reason for status and Events.
    pub fn reason(&self) -> &'static str {
        match self {
            StoreError::Unreachable(_) => "StoreUnreachable",
            StoreError::AccessDenied(_) => "StoreAccessDenied",
            StoreError::BucketNotFound { .. } => "BucketNotFound",
            StoreError::ObjectNotFound(_) => "BackupNotFound",
            StoreError::Config(_) => "InvalidStore",
            StoreError::Other(_) => "StoreFailed",
        }
    }
}

/// The whole text of an error and its causes.
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    crate::error::with_causes(&err.to_string(), err)
}

/// Classifies an `object_store` error; `key` is the object the call was about.
fn classify(bucket: &str, key: &str, err: object_store::Error) -> StoreError {
    let text = chain(&err);
    let has = |needle: &str| text.contains(needle);
    if has("NoSuchBucket") || has("ContainerNotFound") || has("bucket does not exist") {
        return StoreError::BucketNotFound {
            bucket: bucket.to_string(),
            message: text,
        };
    }
    match err {
        object_store::Error::NotFound { .. } => StoreError::ObjectNotFound(key.to_string()),
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => StoreError::AccessDenied(text),
        _ if has("InvalidAccessKeyId")
            || has("SignatureDoesNotMatch")
            || has("AccessDenied")
            || has("403 Forbidden") =>
        {
            StoreError::AccessDenied(text)
        }
        _ if has("error sending request")
            || has("Connection refused")
            || has("connection closed")
            || has("timed out")
            || has("dns error") =>
        {
            StoreError::Unreachable(text)
        }
        _ => StoreError::Other(text),
    }
}

/// A stored object's size and sha256, read back from the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digest256 {
    /// Bytes.
    pub size: u64,
    /// sha256 (hex).
    pub sha256: String,
}

/// A multipart upload in progress: chunks go in as they come, a few parts at a time.
pub struct Upload {
    writer: WriteMultipart,
    bucket: String,
    key: String,
}

impl Upload {
    /// Sends `chunk`, waiting while too many parts are in flight.
    pub async fn write(&mut self, chunk: &[u8]) -> Result<(), StoreError> {
        self.writer
            .wait_for_capacity(PARTS_IN_FLIGHT)
            .await
            .map_err(|e| classify(&self.bucket, &self.key, e))?;
        self.writer.write(chunk);
        Ok(())
    }

    /// Completes the upload: the object appears only now.
    pub async fn finish(self) -> Result<(), StoreError> {
        let (bucket, key) = (self.bucket, self.key);
        self.writer
            .finish()
            .await
            .map(drop)
            .map_err(|e| classify(&bucket, &key, e))
    }

    /// Abandons the upload: no object appears, the parts sent are dropped.
    pub async fn abort(self) {
        let _ = self.writer.abort().await;
    }
}

/// A bucket and prefix in an object store.
#[derive(Clone)]
pub struct BackupStore {
    store: Arc<dyn ObjectStore>,
    location: Location,
}

impl std::fmt::Debug for BackupStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackupStore")
            .field("store", &self.store.to_string())
            .field("location", &self.location)
            .finish()
    }
}

fn client_options(endpoint: Option<&str>, timeouts: StoreTimeouts) -> ClientOptions {
    ClientOptions::new()
        .with_allow_http(endpoint.is_some_and(|e| e.starts_with("http://")))
        .with_connect_timeout(timeouts.connect)
        .with_timeout(timeouts.request)
}

fn retry(timeouts: StoreTimeouts) -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: 3,
        retry_timeout: timeouts.retry,
    }
}

/// `scheme://bucket.host...`: the endpoint of a bucket addressed as a subdomain.
fn virtual_hosted(endpoint: &str, bucket: &str) -> String {
    match endpoint.split_once("://") {
        Some((scheme, rest)) => format!("{scheme}://{bucket}.{rest}"),
        None => format!("{bucket}.{endpoint}"),
    }
}

/// Whether `key` is an object directly under `prefix` (no `/` after it).
fn directly_under(prefix: &str, key: &str) -> bool {
    let rest = if prefix.is_empty() {
        Some(key)
    } else {
        key.strip_prefix(prefix).and_then(|r| r.strip_prefix('/'))
    };
    rest.is_some_and(|r| !r.is_empty() && !r.contains('/'))
}

impl BackupStore {
    /// A store over any `object_store` implementation at `location` (tests use an
    /// in-memory one).
    pub fn with_store(store: Arc<dyn ObjectStore>, location: Location) -> Self {
        BackupStore { store, location }
    }

    /// Opens the store a configuration names (no call is made yet).
    pub fn open(config: &StoreConfig, timeouts: StoreTimeouts) -> Result<Self, StoreError> {
        // The HTTP client's TLS takes the process's default provider: ring, the one
        // compiled in (an error only says one is installed already).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (store, location): (Arc<dyn ObjectStore>, &Location) = match config {
            StoreConfig::S3 {
                location,
                endpoint,
                force_path_style,
                credentials,
            } => (
                Arc::new(s3(
                    location,
                    endpoint.as_deref(),
                    *force_path_style,
                    credentials,
                    timeouts,
                )?),
                location,
            ),
            StoreConfig::Gcs {
                location,
                credentials,
            } => {
                let store = GoogleCloudStorageBuilder::new()
                    .with_bucket_name(&location.bucket)
                    .with_service_account_key(&credentials.service_account_key)
                    .with_client_options(client_options(None, timeouts))
                    .with_retry(retry(timeouts))
                    .build()
                    .map_err(|e| StoreError::Config(chain(&e)))?;
                (Arc::new(store), location)
            }
            StoreConfig::Abs {
                location,
                credentials,
            } => {
                let store = MicrosoftAzureBuilder::new()
                    .with_account(&credentials.account)
                    .with_access_key(&credentials.key)
                    .with_container_name(&location.bucket)
                    .with_client_options(client_options(None, timeouts))
                    .with_retry(retry(timeouts))
                    .build()
                    .map_err(|e| StoreError::Config(chain(&e)))?;
                (Arc::new(store), location)
            }
        };
        Ok(BackupStore {
            store,
            location: location.clone(),
        })
    }

    /// Bucket and prefix.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// `<bucket>/<key>`: how status and Events name an object.
    pub fn path_of(&self, key: &str) -> String {
        format!("{}/{key}", self.location.bucket)
    }

    /// The key of `name` under the prefix.
    pub fn key_of(&self, name: &str) -> String {
        join(&self.location.prefix, name)
    }

    fn err(&self, key: &str) -> impl Fn(object_store::Error) -> StoreError + '_ {
        let key = key.to_string();
        move |e| classify(&self.location.bucket, &key, e)
    }

    /// Starts a multipart upload to `key`.
    pub async fn start_upload(&self, key: &str) -> Result<Upload, StoreError> {
        let upload = self
            .store
            .put_multipart(&Path::from(key))
            .await
            .map_err(self.err(key))?;
        Ok(Upload {
            writer: WriteMultipart::new_with_chunk_size(upload, PART_SIZE),
            bucket: self.location.bucket.clone(),
            key: key.to_string(),
        })
    }

    /// Stores a small object in one request.
    pub async fn put_small(&self, key: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
        self.store
            .put(&Path::from(key), PutPayload::from(bytes))
            .await
            .map(drop)
            .map_err(self.err(key))
    }

    /// Reads a small object whole.
    pub async fn get_small(&self, key: &str) -> Result<Bytes, StoreError> {
        let result = self
            .store
            .get(&Path::from(key))
            .await
            .map_err(self.err(key))?;
        result.bytes().await.map_err(self.err(key))
    }

    /// Whether an object exists (its metadata is read, not its content): `Ok(())`, or
    /// [`StoreError::ObjectNotFound`].
    pub async fn exists(&self, key: &str) -> Result<(), StoreError> {
        self.store
            .head(&Path::from(key))
            .await
            .map(drop)
            .map_err(self.err(key))
    }

    /// Streams an object.
    pub async fn get_stream(
        &self,
        key: &str,
    ) -> Result<impl Stream<Item = Result<Bytes, StoreError>> + use<>, StoreError> {
        let result = self
            .store
            .get(&Path::from(key))
            .await
            .map_err(self.err(key))?;
        let (bucket, key) = (self.location.bucket.clone(), key.to_string());
        Ok(result
            .into_stream()
            .map_err(move |e| classify(&bucket, &key, e)))
    }

    /// Reads an object back and hashes it, without holding it.
    pub async fn digest(&self, key: &str) -> Result<Digest256, StoreError> {
        let mut stream = std::pin::pin!(self.get_stream(key).await?);
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            size += chunk.len() as u64;
            hasher.update(&chunk);
        }
        Ok(Digest256 {
            size,
            sha256: hex::encode(hasher.finalize()),
        })
    }

    /// Every backup directly under the prefix (objects whose names parse as backups), of
    /// any cluster; never one under a deeper prefix (listed with the delimiter `/`).
    pub async fn list_backups(&self) -> Result<Vec<StoredBackup>, StoreError> {
        let prefix = self.location.prefix.trim_matches('/').to_string();
        let prefix_path = (!prefix.is_empty()).then(|| Path::from(prefix.as_str()));
        let listed = self
            .store
            .list_with_delimiter(prefix_path.as_ref())
            .await
            .map_err(self.err(&prefix))?;
        Ok(listed
            .objects
            .into_iter()
            .map(|meta| meta.location.to_string())
            .filter(|key| directly_under(&prefix, key))
            .filter_map(|key| BackupName::parse(&key).map(|name| StoredBackup { key, name }))
            .collect())
    }

    /// The object keys of [`list_backups`](Self::list_backups), sorted.
    pub async fn backup_keys(&self) -> Result<Vec<String>, StoreError> {
        let mut keys: Vec<String> = self
            .list_backups()
            .await?
            .into_iter()
            .map(|b| b.key)
            .collect();
        keys.sort();
        Ok(keys)
    }

    /// Deletes an object (a missing one is not an error).
    pub async fn delete(&self, key: &str) -> Result<(), StoreError> {
        match self.store.delete(&Path::from(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err(key)(e)),
        }
    }
}

fn s3(
    location: &Location,
    endpoint: Option<&str>,
    force_path_style: bool,
    credentials: &S3Credentials,
    timeouts: StoreTimeouts,
) -> Result<object_store::aws::AmazonS3, StoreError> {
    let region = credentials.region.as_deref().unwrap_or(DEFAULT_REGION);
    let mut builder = AmazonS3Builder::new()
        .with_bucket_name(&location.bucket)
        .with_region(region)
        .with_access_key_id(&credentials.access_key)
        .with_secret_access_key(&credentials.secret_key)
        .with_virtual_hosted_style_request(!force_path_style)
        .with_client_options(client_options(endpoint, timeouts))
        .with_retry(retry(timeouts));
    if let Some(token) = &credentials.session_token {
        builder = builder.with_token(token);
    }
    if let Some(endpoint) = endpoint {
        let endpoint = endpoint.trim_end_matches('/');
        let endpoint = if force_path_style {
            endpoint.to_string()
        } else {
            virtual_hosted(endpoint, &location.bucket)
        };
        builder = builder.with_endpoint(endpoint);
    }
    builder.build().map_err(|e| StoreError::Config(chain(&e)))
}

/// An in-memory store at `bucket/<prefix>`, for tests.
#[cfg(test)]
pub(crate) fn memory(prefix: &str) -> BackupStore {
    let location = Location {
        bucket: "bucket".into(),
        prefix: prefix.into(),
    };
    BackupStore::with_store(Arc::new(object_store::memory::InMemory::new()), location)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_backups_directly_under_the_prefix_are_listed() {
        let store = memory("etcd/prod");
        let name = |c: &str| BackupName::new(c, jiff::Timestamp::UNIX_EPOCH, 1).file_name();
        let direct = format!("etcd/prod/{}", name("demo"));
        for key in [
            direct.clone(),
            format!("etcd/prod/one-shot/{}", name("demo")),
            format!("etcd/prod/a/b/{}", name("demo")),
            format!("etcd/production/{}", name("demo")),
            "etcd/prod/notes.txt".to_string(),
        ] {
            store.put_small(&key, b"x".to_vec()).await.unwrap();
        }
        assert_eq!(store.backup_keys().await.unwrap(), [direct]);
        assert!(directly_under("", "x.db") && !directly_under("", "a/x.db"));
        assert!(directly_under("p", "p/x.db") && !directly_under("p", "px/x.db"));
    }

    #[test]
    fn a_bucket_as_subdomain_goes_before_the_host() {
        assert_eq!(
            virtual_hosted("https://s3.example.net:9000", "b"),
            "https://b.s3.example.net:9000"
        );
    }

    #[test]
    fn store_errors_are_classified_for_the_status_reason() {
        let missing = classify(
            "b",
            "k",
            object_store::Error::Generic {
                store: "S3",
                source: "Client error with status 404 Not Found: <Code>NoSuchBucket</Code>".into(),
            },
        );
        assert_eq!(missing.reason(), "BucketNotFound");
        let refused = classify(
            "b",
            "k",
            object_store::Error::Generic {
                store: "S3",
                source: "Client error with status 403 Forbidden: <Code>InvalidAccessKeyId</Code>"
                    .into(),
            },
        );
        assert_eq!(refused.reason(), "StoreAccessDenied");
        let down = classify(
            "b",
            "k",
            object_store::Error::Generic {
                store: "S3",
                source: "error sending request: Connection refused".into(),
            },
        );
        assert_eq!(down.reason(), "StoreUnreachable");
    }
}
