//! The members' data compared, as data: which members' key-value stores differ from the
//! majority's at one revision (when the operator compares them: see
//! [`consistency`](super::consistency)).
//!
//! etcd's own checks find a divergence (the initial check at start, the compaction hash
//! check after each compaction, from 3.5.5) but etcd 3.5 raises its CORRUPT alarm for no
//! member in particular, and 3.4 checks only at start. So the operator compares the
//! members' `HashKV` at a common revision itself: whenever CORRUPT is raised, and every
//! [`HASH_CHECK_INTERVAL`]. Members are compared only with those whose history was
//! compacted to the same revision (a hash covers the revisions after the compacted one);
//! a member behind the common revision answers nothing and is left out. A difference names
//! the members outside the majority, or every member compared when there is none; the
//! operator then changes nothing (see [`space`](super::space)), and never removes a member
//! on a hash alone.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

/// How often the operator compares the members' hashes when no alarm asks for it: one
/// `HashKV` reads a member's whole store.
pub const HASH_CHECK_INTERVAL: Duration = Duration::from_secs(3600);

/// One member's hash of its key-value store at a revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KvHash {
    /// The hash of every revision after `compact_revision` up to the one asked for.
    pub hash: u32,
    /// The revision its history is compacted to.
    pub compact_revision: i64,
}

/// The members' hashes at one revision, by member ID (a member that did not answer is
/// left out).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HashCheck {
    /// The revision compared at.
    pub revision: i64,
    /// Each answering member's hash.
    pub hashes: BTreeMap<u64, KvHash>,
}

/// Members whose data differs from the majority's (every member compared, when no
/// majority agrees).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Divergence {
    /// Their member IDs.
    pub members: Vec<u64>,
    /// The revision compared at.
    pub revision: i64,
}

/// What a comparison found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Consistency {
    /// Every member compared has the same data.
    Consistent,
    /// Some members' data differs.
    Differs(Divergence),
    /// Fewer than two members could be compared.
    Inconclusive,
}

/// What `check` says of the members' data.
pub fn compare(check: &HashCheck) -> Consistency {
    let mut by_compaction: BTreeMap<i64, Vec<(u64, u32)>> = BTreeMap::new();
    for (id, h) in &check.hashes {
        by_compaction
            .entry(h.compact_revision)
            .or_default()
            .push((*id, h.hash));
    }
    let Some(comparable) = by_compaction.into_values().max_by_key(Vec::len) else {
        return Consistency::Inconclusive;
    };
    if comparable.len() < 2 {
        return Consistency::Inconclusive;
    }
    let mut by_hash: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for (id, hash) in &comparable {
        by_hash.entry(*hash).or_default().push(*id);
    }
    if by_hash.len() == 1 {
        return Consistency::Consistent;
    }
    let largest = by_hash.values().map(Vec::len).max().unwrap_or(0);
    let majority = (largest * 2 > comparable.len())
        .then(|| by_hash.values().find(|ids| ids.len() == largest))
        .flatten();
    let mut members: Vec<u64> = comparable
        .iter()
        .map(|(id, _)| *id)
        .filter(|id| majority.is_none_or(|m| !m.contains(id)))
        .collect();
    members.sort_unstable();
    Consistency::Differs(Divergence {
        members,
        revision: check.revision,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(hashes: &[(u64, u32, i64)]) -> HashCheck {
        HashCheck {
            revision: 100,
            hashes: hashes
                .iter()
                .map(|(id, hash, compact_revision)| {
                    (
                        *id,
                        KvHash {
                            hash: *hash,
                            compact_revision: *compact_revision,
                        },
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn the_member_outside_the_majority_is_named() {
        let found = compare(&check(&[(1, 7, 50), (2, 7, 50), (3, 9, 50)]));
        assert_eq!(
            found,
            Consistency::Differs(Divergence {
                members: vec![3],
                revision: 100
            })
        );
    }

    #[test]
    fn without_a_majority_every_member_compared_is_named() {
        let found = compare(&check(&[(1, 7, 50), (2, 8, 50)]));
        assert_eq!(
            found,
            Consistency::Differs(Divergence {
                members: vec![1, 2],
                revision: 100
            })
        );
    }

    #[test]
    fn members_compacted_to_another_revision_are_not_compared() {
        // Member 3 has not applied the last compaction yet: its hash covers more.
        assert_eq!(
            compare(&check(&[(1, 7, 60), (2, 7, 60), (3, 9, 50)])),
            Consistency::Consistent
        );
        assert_eq!(
            compare(&check(&[(1, 7, 60), (3, 9, 50)])),
            Consistency::Inconclusive
        );
    }

    #[test]
    fn equal_hashes_are_consistent_and_one_answer_is_not_enough() {
        assert_eq!(
            compare(&check(&[(1, 7, 0), (2, 7, 0), (3, 7, 0)])),
            Consistency::Consistent
        );
        assert_eq!(compare(&check(&[(1, 7, 0)])), Consistency::Inconclusive);
    }
}
