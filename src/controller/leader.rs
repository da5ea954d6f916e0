//! Leader election through a `coordination.k8s.io/v1` Lease, so two replicas never both act.
//!
//! A replica acquires the Lease when it is free or expired, renews it every third of its
//! duration, and exits the process when it cannot renew before the Lease would expire:
//! a restarted replica starts over as a candidate, which is simpler and safer than trying
//! to stop every actor in place.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use slog::{Logger, info, warn};

/// How long a Lease holds without renewal.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);

/// A Lease this replica may hold.
pub struct LeaderElection {
    api: Api<Lease>,
    name: String,
    identity: String,
    logger: Logger,
}

/// Whether `lease` lets `identity` take it at `now`.
pub fn can_take(lease: &Lease, identity: &str, now: Timestamp) -> bool {
    let Some(spec) = &lease.spec else { return true };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder.is_empty() || holder == identity {
        return true;
    }
    let duration = spec
        .lease_duration_seconds
        .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
        .unwrap_or(LEASE_DURATION);
    match &spec.renew_time {
        Some(MicroTime(renewed)) => {
            let expiry = renewed.checked_add(duration).unwrap_or(*renewed);
            expiry < now
        }
        None => true,
    }
}

impl LeaderElection {
    /// An election for Lease `namespace/name` as `identity`.
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        logger: &Logger,
    ) -> Self {
        LeaderElection {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            logger: logger.new(slog::o!("lease" => format!("{namespace}/{name}"), "identity" => identity.to_string())),
        }
    }

    fn spec(&self, acquired: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(LEASE_DURATION.as_secs() as i32),
            acquire_time: Some(acquired.unwrap_or_else(|| now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// Tries once to acquire or renew the Lease; `Ok(true)` when this replica holds it.
    pub async fn try_acquire(&self) -> Result<bool, kube::Error> {
        let existing = self.api.get_opt(&self.name).await?;
        let Some(mut lease) = existing else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(None, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        if !can_take(&lease, &self.identity, Timestamp::now()) {
            return Ok(false);
        }
        let old = lease.spec.clone().unwrap_or_default();
        let ours = old.holder_identity.as_deref() == Some(self.identity.as_str());
        let transitions = old.lease_transitions.unwrap_or(0) + i32::from(!ours);
        let acquired = if ours { old.acquire_time } else { None };
        lease.spec = Some(self.spec(acquired, transitions));
        // The resourceVersion in `lease` makes this a compare-and-swap.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquire(&self) {
        info!(self.logger, "waiting to become leader");
        loop {
            match self.try_acquire().await {
                Ok(true) => {
                    info!(self.logger, "became leader");
                    return;
                }
                Ok(false) => {}
                Err(e) => warn!(self.logger, "leader election failed"; "error" => %e),
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    /// Renews the Lease forever; returns when it could not be renewed in time.
    pub async fn keep(&self) {
        let mut last_renewal = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(LEASE_DURATION / 3).await;
            match self.try_acquire().await {
                Ok(true) => last_renewal = tokio::time::Instant::now(),
                Ok(false) => {
                    warn!(self.logger, "another replica took the lease");
                    return;
                }
                Err(e) => warn!(self.logger, "cannot renew the lease"; "error" => %e),
            }
            if last_renewal.elapsed() > LEASE_DURATION * 2 / 3 {
                warn!(self.logger, "lease not renewed in time");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, renewed_secs_ago: i64) -> Lease {
        let renewed = Timestamp::now() - jiff::SignedDuration::from_secs(renewed_secs_ago);
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(renewed)),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_fresh_lease_of_another_replica_cannot_be_taken() {
        assert!(!can_take(&lease("other", 1), "me", Timestamp::now()));
    }

    #[test]
    fn an_expired_lease_or_our_own_can_be_taken() {
        assert!(can_take(&lease("other", 60), "me", Timestamp::now()));
        assert!(can_take(&lease("me", 1), "me", Timestamp::now()));
    }
}
