//! Service-account tokens of projected volumes, as the kubelet gets them: requested
//! through the TokenRequest API (`serviceaccounts/<name>/token`), bound to the pod, with
//! the projection's audience and expiration, and refreshed once 80% of the requested
//! lifetime has passed (the kubelet's rule), by a task per pod that rewrites the token file
//! in place (write and rename, so a container's bind mount of the volume sees it).

use std::path::PathBuf;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::PostParams;
use kube::{Api, Client};

use crate::log::event;
use crate::tasks::TaskGuard;

/// The lifetime asked when a projection names none (the API's default).
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;

/// How long a failed refresh waits before the next try.
const RETRY: Duration = Duration::from_secs(10);

/// The pod a token is bound to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// Namespace.
    pub namespace: String,
    /// The pod's service account.
    pub service_account: String,
    /// Pod name.
    pub pod: String,
    /// Pod uid.
    pub uid: String,
}

impl Binding {
    /// The binding of `pod`.
    pub fn of(pod: &Pod) -> Binding {
        Binding {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            service_account: pod
                .spec
                .as_ref()
                .and_then(|s| s.service_account_name.clone())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "default".to_string()),
            pod: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
        }
    }
}

/// A token file of a projected volume, and when it is refreshed next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenFile {
    /// The volume's directory.
    pub dir: PathBuf,
    /// The file's path inside it.
    pub path: String,
    /// The audience, if the projection names one.
    pub audience: Option<String>,
    /// The lifetime asked.
    pub expiration_seconds: i64,
    /// The file's mode.
    pub mode: u32,
    /// When it is refreshed.
    pub refresh_at: Timestamp,
}

/// A token as the API issued it.
#[derive(Clone, Debug)]
pub struct Issued {
    /// The token.
    pub token: String,
    /// When it expires (as the API reports it).
    pub expires: Option<Timestamp>,
}

/// When a token asked for `requested` seconds and expiring at `expires` is refreshed: once
/// 80% of the requested lifetime has passed, i.e. 20% of it before it expires (from `now`
/// when the API gave no expiry).
pub fn refresh_at(requested: i64, expires: Option<Timestamp>, now: Timestamp) -> Timestamp {
    let requested = SignedDuration::from_secs(requested.max(10));
    match expires {
        Some(expires) => expires - requested / 5,
        None => now + requested * 4 / 5,
    }
}

/// Asks the API for a token of the pod's service account, bound to the pod.
pub async fn request(
    client: &Client,
    binding: &Binding,
    audience: Option<&str>,
    expiration_seconds: i64,
) -> Result<Issued, String> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &binding.namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: audience.map(|a| vec![a.to_string()]).unwrap_or_default(),
            expiration_seconds: Some(expiration_seconds),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(binding.pod.clone()),
                uid: Some(binding.uid.clone()),
            }),
        },
        ..Default::default()
    };
    let issued = api
        .create_token_request(&binding.service_account, &PostParams::default(), &request)
        .await
        .map_err(|e| {
            format!(
                "requesting a token of service account {}/{}: {e}",
                binding.namespace, binding.service_account
            )
        })?;
    let status = issued
        .status
        .ok_or_else(|| "the token request came back without a token".to_string())?;
    Ok(Issued {
        token: status.token,
        expires: Some(status.expiration_timestamp.0),
    })
}

/// Keeps the pod's token files fresh until the returned guard is dropped.
pub fn keep_fresh(client: Client, binding: Binding, mut files: Vec<TokenFile>) -> TaskGuard {
    TaskGuard::spawn(async move {
        loop {
            let Some(next) = files.iter_mut().min_by_key(|f| f.refresh_at) else {
                return;
            };
            let wait = next
                .refresh_at
                .duration_since(Timestamp::now())
                .max(SignedDuration::ZERO);
            tokio::time::sleep(Duration::try_from(wait).unwrap_or(RETRY)).await;
            match refresh(&client, &binding, next).await {
                Ok(()) => event!(
                    "pod {}/{}: token {} refreshed",
                    binding.namespace,
                    binding.pod,
                    next.dir.join(&next.path).display()
                ),
                Err(e) => {
                    event!(
                        "pod {}/{}: token refresh failed (retrying): {e}",
                        binding.namespace,
                        binding.pod
                    );
                    next.refresh_at =
                        Timestamp::now() + SignedDuration::from_secs(RETRY.as_secs() as i64);
                }
            }
        }
    })
}

async fn refresh(client: &Client, binding: &Binding, file: &mut TokenFile) -> Result<(), String> {
    let issued = request(
        client,
        binding,
        file.audience.as_deref(),
        file.expiration_seconds,
    )
    .await?;
    crate::volumes::write_file_atomically(
        &file.dir,
        &file.path,
        issued.token.as_bytes(),
        file.mode,
    )?;
    file.refresh_at = refresh_at(file.expiration_seconds, issued.expires, Timestamp::now());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_refreshed_after_80_percent_of_the_requested_lifetime() {
        let now = Timestamp::from_second(1_000_000).unwrap();
        let expires = now + SignedDuration::from_secs(3600);
        assert_eq!(
            refresh_at(3600, Some(expires), now),
            now + SignedDuration::from_secs(2880)
        );
        assert_eq!(
            refresh_at(3600, None, now),
            now + SignedDuration::from_secs(2880)
        );
        // An extended token (the API gives a year for 3607 s) is still refreshed on the
        // requested schedule, as the kubelet does: 20% of the request before its expiry.
        let reported = now + SignedDuration::from_secs(3607);
        assert_eq!(
            refresh_at(3607, Some(reported), now),
            reported - SignedDuration::from_secs(3607) / 5
        );
    }

    #[test]
    fn binding_defaults_to_the_default_service_account() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("p".into());
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.uid = Some("u".into());
        let b = Binding::of(&pod);
        assert_eq!(b.service_account, "default");
        assert_eq!((b.pod.as_str(), b.uid.as_str()), ("p", "u"));
    }
}
