//! The debug stream's subscribers, bounded per client identity: the hub's overall bound
//! ([`etcd_operator_actors::debug::DebugHub`]) keeps the operator's memory in check, and
//! this one keeps a single reader (a forgotten `curl -N` loop, a dashboard opening a tab
//! per panel) from taking every slot and locking the others out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Default subscribers one identity may hold at once.
pub const DEFAULT_PER_IDENTITY: usize = 2;

/// One identity already holds as many subscriptions as it may.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("user \"{username}\" already follows the stream {limit} times, the most one user may")]
pub struct TooManyForIdentity {
    /// Who asked.
    pub username: String,
    /// The bound.
    pub limit: usize,
}

/// Counts each identity's open subscriptions.
#[derive(Clone, Debug)]
pub struct StreamSlots {
    per_identity: usize,
    held: Arc<Mutex<HashMap<String, usize>>>,
}

impl StreamSlots {
    /// At most `per_identity` subscriptions per user (at least one).
    pub fn new(per_identity: usize) -> Self {
        StreamSlots {
            per_identity: per_identity.max(1),
            held: Arc::default(),
        }
    }

    /// A slot for `username`, held until the returned guard is dropped.
    pub fn take(&self, username: &str) -> Result<Slot, TooManyForIdentity> {
        let mut held = self.held.lock().expect("slots lock");
        let count = held.entry(username.to_string()).or_default();
        if *count >= self.per_identity {
            return Err(TooManyForIdentity {
                username: username.to_string(),
                limit: self.per_identity,
            });
        }
        *count += 1;
        Ok(Slot {
            held: self.held.clone(),
            username: username.to_string(),
        })
    }

    /// Users holding a slot now.
    #[cfg(test)]
    pub fn holders(&self) -> usize {
        self.held.lock().expect("slots lock").len()
    }
}

/// One held subscription; gives its slot back when dropped.
#[derive(Debug)]
pub struct Slot {
    held: Arc<Mutex<HashMap<String, usize>>>,
    username: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.held.lock().expect("slots lock");
        if let Some(count) = held.get_mut(&self.username) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.username);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_identity_is_bounded_while_another_still_gets_a_slot() {
        let slots = StreamSlots::new(2);
        let a1 = slots.take("a").unwrap();
        let _a2 = slots.take("a").unwrap();
        let refused = slots.take("a").unwrap_err();
        assert_eq!(refused.limit, 2);
        assert!(refused.to_string().contains("\"a\""), "{refused}");
        let _b = slots.take("b").unwrap();
        drop(a1);
        assert!(slots.take("a").is_ok());
    }

    #[test]
    fn released_slots_leave_no_entry_behind() {
        let slots = StreamSlots::new(1);
        for i in 0..100 {
            drop(slots.take(&format!("user-{i}")).unwrap());
        }
        assert_eq!(slots.holders(), 0);
    }
}
