//! The cluster's Services, made alongside a tick's other actions, hold back its pods: no
//! member's pod is made before the headless Service its DNS name lives under is known to
//! be there and the cluster's own (one of that name that another object owns blocks the
//! cluster before it has a pod). Everything else of the tick goes on meanwhile: a new
//! cluster's seed is recorded in its status while its Services are being made.

use tokio::sync::watch;

/// Where the headless Service stands in the current tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Services {
    /// There, or not made this tick (observe found both Services): pods may be made.
    Made,
    /// Being made: a pod waits.
    Pending,
    /// Their creation failed: no pod this tick.
    Failed,
}

/// The gate a pod's creation passes; open unless the tick is making the Services.
#[derive(Debug)]
pub(crate) struct ServicesGate(watch::Sender<Services>);

impl Default for ServicesGate {
    fn default() -> Self {
        ServicesGate(watch::channel(Services::Made).0)
    }
}

impl ServicesGate {
    /// The Services are being made: pods wait from now on.
    pub(crate) fn close(&self) {
        self.0.send_replace(Services::Pending);
    }

    /// The headless Service's creation ended: `made` opens the gate, a failure keeps it
    /// shut for the rest of the tick. Only the first word counts: a gate once opened or
    /// shut stays so.
    pub(crate) fn settle(&self, made: bool) {
        let to = if made {
            Services::Made
        } else {
            Services::Failed
        };
        self.0.send_if_modified(|now| {
            let pending = *now == Services::Pending;
            if pending {
                *now = to;
            }
            pending
        });
    }

    /// Waits until the headless Service's creation ended; an error when it failed.
    pub(crate) async fn passed(&self) -> Result<(), ServicesMissing> {
        let mut seen = self.0.subscribe();
        let services = seen
            .wait_for(|s| *s != Services::Pending)
            .await
            .map(|s| *s)
            // The sender lives in the gate itself: it cannot be gone while we wait.
            .unwrap_or(Services::Failed);
        match services {
            Services::Made => Ok(()),
            _ => Err(ServicesMissing),
        }
    }
}

/// The gate's refusal: the headless Service could not be made this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the cluster's headless Service could not be made (see that step), so no pod is made this \
     tick"
)]
pub(crate) struct ServicesMissing;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn an_untouched_gate_lets_a_pod_through_at_once() {
        assert_eq!(ServicesGate::default().passed().await, Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_waits_for_the_services_being_made_and_passes_once_they_are() {
        let gate = std::sync::Arc::new(ServicesGate::default());
        gate.close();
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { gate.passed().await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !waiting.is_finished(),
            "passed while the Services were pending"
        );
        gate.settle(true);
        assert_eq!(waiting.await.unwrap(), Ok(()));
    }

    #[tokio::test]
    async fn a_gate_once_opened_stays_open_whatever_ends_later() {
        let gate = ServicesGate::default();
        gate.close();
        gate.settle(true);
        gate.settle(false);
        assert_eq!(gate.passed().await, Ok(()));
    }

    #[tokio::test]
    async fn no_pod_passes_once_the_services_failed() {
        let gate = ServicesGate::default();
        gate.close();
        gate.settle(false);
        let refused = gate.passed().await.unwrap_err();
        assert_eq!(refused, ServicesMissing);
        assert!(refused.to_string().contains("Service could not be made"));
    }
}
