//! The alarms etcd raises and the backend quota, as the observation and the actions
//! carry them (the rules that read them are in [`space`](super::space)).

use serde::Serialize;

/// etcd's backend quota when none is set (`--quota-backend-bytes` 0 or absent): 2 GiB.
pub const DEFAULT_QUOTA_BACKEND_BYTES: u64 = 2 * 1024 * 1024 * 1024;

/// From this share of its quota (in percent) a member's backend is near it
/// (`Storage: NearQuota`); a NOSPACE alarm is disarmed only once every member is below it.
pub const NEAR_QUOTA_PERCENT: u64 = 80;

/// An alarm etcd raises (`etcdctl alarm list`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum AlarmKind {
    /// A member's backend reached its quota: the cluster refuses writes that add data.
    #[serde(rename = "NOSPACE")]
    NoSpace,
    /// A member's data was found to differ from the others'.
    #[serde(rename = "CORRUPT")]
    Corrupt,
}

impl AlarmKind {
    /// The name etcd gives the alarm.
    pub fn as_str(self) -> &'static str {
        match self {
            AlarmKind::NoSpace => "NOSPACE",
            AlarmKind::Corrupt => "CORRUPT",
        }
    }
}

/// One alarm: its kind and the member it was raised for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Alarm {
    /// The member the alarm is about (etcd member ID; 0 when etcd could not tell which).
    pub member: u64,
    /// What it says.
    pub kind: AlarmKind,
}
