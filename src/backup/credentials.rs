//! Store credentials from a Secret's data, in the layouts the CoreOS operator accepted.

use std::collections::BTreeMap;

use crate::secret_data::SecretData;

/// Why a Secret does not hold usable credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    /// None of the accepted layouts is there.
    #[error("secret has neither {expected}")]
    Missing {
        /// The layouts accepted, for the message.
        expected: &'static str,
    },
    /// A key is there but not UTF-8 text.
    #[error("secret key {0} is not UTF-8 text")]
    NotText(String),
    /// A key is there but empty.
    #[error("secret key {0} is empty")]
    Empty(String),
    /// The AWS `credentials` file has no usable `default` profile.
    #[error("the AWS credentials file in the secret has no {0} in its [default] profile")]
    Profile(&'static str),
}

/// S3 credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Credentials {
    /// Access key ID.
    pub access_key: String,
    /// Secret access key.
    pub secret_key: String,
    /// Session token, for temporary credentials.
    pub session_token: Option<String>,
    /// Region (`us-east-1` when the Secret names none).
    pub region: Option<String>,
}

impl std::fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Credentials")
            .field("access_key", &self.access_key)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

fn text(data: &SecretData, key: &str) -> Result<Option<String>, CredentialsError> {
    let Some(bytes) = data.get(key) else {
        return Ok(None);
    };
    let value = std::str::from_utf8(bytes)
        .map_err(|_| CredentialsError::NotText(key.to_string()))?
        .trim()
        .to_string();
    if value.is_empty() {
        return Err(CredentialsError::Empty(key.to_string()));
    }
    Ok(Some(value))
}

impl S3Credentials {
    /// From `accessKey`/`secretKey` (optionally `sessionToken`, `region`), or else from the
    /// AWS `credentials` file (profile `default`) and the optional `config` file (its
    /// `region`).
    pub fn from_secret(data: &SecretData) -> Result<Self, CredentialsError> {
        if let (Some(access_key), Some(secret_key)) =
            (text(data, "accessKey")?, text(data, "secretKey")?)
        {
            return Ok(S3Credentials {
                access_key,
                secret_key,
                session_token: text(data, "sessionToken")?,
                region: text(data, "region")?,
            });
        }
        let Some(file) = text(data, "credentials")? else {
            return Err(CredentialsError::Missing {
                expected: "accessKey and secretKey, nor an AWS credentials file (credentials)",
            });
        };
        let profile = default_profile(&file);
        let get = |key: &'static str| {
            profile
                .get(key)
                .cloned()
                .ok_or(CredentialsError::Profile(key))
        };
        let config_region =
            text(data, "config")?.and_then(|c| default_profile(&c).remove("region"));
        Ok(S3Credentials {
            access_key: get("aws_access_key_id")?,
            secret_key: get("aws_secret_access_key")?,
            session_token: profile.get("aws_session_token").cloned(),
            region: config_region.or_else(|| profile.get("region").cloned()),
        })
    }
}

/// The `key = value` pairs of the `[default]` (or `[profile default]`) section of an AWS
/// INI file; comments and other sections are skipped.
fn default_profile(ini: &str) -> BTreeMap<String, String> {
    let mut pairs = BTreeMap::new();
    let mut in_default = false;
    for line in ini.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let section = section.trim();
            in_default = section == "default" || section == "profile default";
            continue;
        }
        if in_default && let Some((key, value)) = line.split_once('=') {
            pairs.insert(key.trim().to_string(), value.trim().to_string());
        }
    }
    pairs
}

/// Google Cloud Storage credentials: a service account key.
#[derive(Clone, PartialEq, Eq)]
pub struct GcsCredentials {
    /// The service account key (JSON).
    pub service_account_key: String,
}

impl GcsCredentials {
    /// From `credentials.json` (CoreOS).
    pub fn from_secret(data: &SecretData) -> Result<Self, CredentialsError> {
        match text(data, "credentials.json")? {
            Some(service_account_key) => Ok(GcsCredentials {
                service_account_key,
            }),
            None => Err(CredentialsError::Missing {
                expected: "credentials.json (a service account key)",
            }),
        }
    }
}

/// Azure Blob Storage credentials: a storage account and its key.
#[derive(Clone, PartialEq, Eq)]
pub struct AbsCredentials {
    /// The storage account.
    pub account: String,
    /// Its access key.
    pub key: String,
}

impl AbsCredentials {
    /// From `storage-account` and `storage-key` (CoreOS).
    pub fn from_secret(data: &SecretData) -> Result<Self, CredentialsError> {
        match (text(data, "storage-account")?, text(data, "storage-key")?) {
            (Some(account), Some(key)) => Ok(AbsCredentials { account, key }),
            _ => Err(CredentialsError::Missing {
                expected: "storage-account and storage-key",
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(pairs: &[(&str, &str)]) -> SecretData {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn access_and_secret_keys_are_read() {
        let c = S3Credentials::from_secret(&secret(&[
            ("accessKey", "AKIA"),
            ("secretKey", "s3cr3t\n"),
            ("region", "eu-west-1"),
        ]))
        .unwrap();
        assert_eq!(c.access_key, "AKIA");
        assert_eq!(c.secret_key, "s3cr3t");
        assert_eq!(c.region.as_deref(), Some("eu-west-1"));
        assert_eq!(c.session_token, None);
    }

    #[test]
    fn the_aws_credentials_and_config_files_are_read_from_their_default_profiles() {
        let credentials = "# comment\n[other]\naws_access_key_id = NO\n\n[default]\n\
                           aws_access_key_id = AKIA\naws_secret_access_key=abc/def\n\
                           aws_session_token = tok\n";
        let config = "[profile default]\nregion = ap-south-1\n[profile x]\nregion = no\n";
        let c = S3Credentials::from_secret(&secret(&[
            ("credentials", credentials),
            ("config", config),
        ]))
        .unwrap();
        assert_eq!(c.access_key, "AKIA");
        assert_eq!(c.secret_key, "abc/def");
        assert_eq!(c.session_token.as_deref(), Some("tok"));
        assert_eq!(c.region.as_deref(), Some("ap-south-1"));
    }

    #[test]
    fn missing_or_broken_credentials_say_what_is_wrong() {
        let none = S3Credentials::from_secret(&secret(&[("accessKey", "only")])).unwrap_err();
        assert!(
            none.to_string().contains("accessKey and secretKey"),
            "{none}"
        );
        let profile = S3Credentials::from_secret(&secret(&[(
            "credentials",
            "[default]\naws_access_key_id=a\n",
        )]))
        .unwrap_err();
        assert_eq!(profile, CredentialsError::Profile("aws_secret_access_key"));
        let empty = S3Credentials::from_secret(&secret(&[("accessKey", "a"), ("secretKey", " ")]))
            .unwrap_err();
        assert_eq!(empty, CredentialsError::Empty("secretKey".into()));
        let mut binary = secret(&[("accessKey", "a")]);
        binary.insert("secretKey".into(), vec![0xff, 0xfe]);
        assert_eq!(
            S3Credentials::from_secret(&binary).unwrap_err(),
            CredentialsError::NotText("secretKey".into())
        );
    }

    #[test]
    fn debug_output_never_shows_the_secret_key() {
        let c = S3Credentials::from_secret(&secret(&[("accessKey", "a"), ("secretKey", "hidden")]))
            .unwrap();
        assert!(!format!("{c:?}").contains("hidden"));
    }

    #[test]
    fn gcs_and_abs_credentials_use_the_coreos_keys() {
        let gcs = GcsCredentials::from_secret(&secret(&[("credentials.json", "{}")])).unwrap();
        assert_eq!(gcs.service_account_key, "{}");
        let abs = AbsCredentials::from_secret(&secret(&[
            ("storage-account", "acct"),
            ("storage-key", "key"),
        ]))
        .unwrap();
        assert_eq!((abs.account.as_str(), abs.key.as_str()), ("acct", "key"));
        assert!(AbsCredentials::from_secret(&secret(&[("storage-account", "a")])).is_err());
    }
}
