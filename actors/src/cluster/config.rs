//! The timing a Cluster actor runs by: its tick intervals, the tick's deadline and the
//! lifecycle's deadlines.

use std::time::Duration;

use etcd_operator_core::lifecycle::Deadlines;

/// Timing of a Cluster actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Time between ticks while nothing happens.
    pub tick_interval: Duration,
    /// Time before the next tick after a tick that acted, or while the cluster is changing
    /// (to see the effect quickly).
    pub follow_up: Duration,
    /// Longest time between ticks of a settled cluster (every member healthy, the spec
    /// met, nothing pending). After a settled tick the wait doubles from `tick_interval`
    /// up to this; any event, action or trouble brings it back to fast, and the
    /// lifecycle's next deadline (a certificate's renewal, a quorum loss's wait) caps it.
    pub idle_interval: Duration,
    /// Deadline of a whole tick (observe, act, report): a call that hangs past it is
    /// abandoned with the rest of the round, and the next tick starts afresh. It is a
    /// backstop: each etcd call has its own deadline, owned by the [`EtcdApi`](crate::ports::EtcdApi) port.
    pub tick_timeout: Duration,
    /// How long a status that differs from the one written last only in its wording
    /// (messages) waits before it is written: the newest wording is written at most this
    /// often, a change of substance at once.
    pub status_rewording: Duration,
    /// Deadlines of the lifecycle.
    pub deadlines: Deadlines,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            tick_interval: Duration::from_secs(2),
            follow_up: Duration::from_millis(100),
            idle_interval: Duration::from_secs(20),
            tick_timeout: Duration::from_secs(60),
            status_rewording: Duration::from_secs(5),
            deadlines: Deadlines::default(),
        }
    }
}
