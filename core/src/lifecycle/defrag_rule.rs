//! The defragmentation rule as data: what makes a member due (the step that acts on it
//! is in [`defragmentation`](super::defragmentation)).

use std::time::Duration;

use serde::Serialize;

use super::MemberHealth;

/// When the operator defragments a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Defragmentation {
    /// Never (`spec.defragmentation.mode: Off`).
    Off,
    /// By the member's sizes.
    Auto(DefragRule),
}

impl Default for Defragmentation {
    fn default() -> Self {
        Defragmentation::Auto(DefragRule::default())
    }
}

/// The sizes that make a member due for a defragmentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DefragRule {
    /// Due when a defragmentation would free at least this many bytes (the backend's size
    /// minus its size in use).
    pub freeable_bytes: u64,
    /// Due too when the backend takes at least this share of its quota, in percent, and
    /// a defragmentation would free at least [`MIN_FREEABLE_PERCENT`] of it.
    pub quota_used_percent: u64,
}

impl Default for DefragRule {
    fn default() -> Self {
        DefragRule {
            freeable_bytes: DEFAULT_FREEABLE_BYTES,
            quota_used_percent: DEFAULT_DEFRAG_QUOTA_PERCENT,
        }
    }
}

/// [`DefragRule::freeable_bytes`] when the spec says nothing: 200 MiB.
pub const DEFAULT_FREEABLE_BYTES: u64 = 200 * 1024 * 1024;
/// [`DefragRule::quota_used_percent`] when the spec says nothing.
pub const DEFAULT_DEFRAG_QUOTA_PERCENT: u64 = 80;
/// A backend near its quota is defragmented only when that frees at least this share of
/// it, in percent: one that is full of live data is not rewritten over and over.
pub const MIN_FREEABLE_PERCENT: u64 = 10;
/// The least time between two defragmentations of one member.
pub const DEFRAG_MIN_INTERVAL: Duration = Duration::from_secs(600);

/// Whether a member reporting `health`, under a backend quota of `quota` bytes, is due
/// for a defragmentation by `rule`; never when it does not report its size in use.
pub fn is_due(health: &MemberHealth, quota: u64, rule: &DefragRule) -> bool {
    let (Some(size), Some(in_use)) = (health.db_size, health.db_size_in_use) else {
        return false;
    };
    let freeable = size.saturating_sub(in_use);
    let near_quota =
        u128::from(size) * 100 >= u128::from(quota) * u128::from(rule.quota_used_percent);
    let worth_it =
        u128::from(freeable) * 100 >= u128::from(size) * u128::from(MIN_FREEABLE_PERCENT);
    freeable > 0 && (freeable >= rule.freeable_bytes || (near_quota && worth_it))
}
