//! The operator's runbook (`docs/operations/runbook.md`) covers exactly the reasons the
//! operator reports: one `### ` heading per `Reason`, spelled as users see it in the
//! status, conditions and Events, and none for a reason that no longer exists.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;

use etcd_operator_core::lifecycle::Reason;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The wire names of every `Reason`.
fn reasons() -> BTreeSet<String> {
    Reason::ALL.iter().map(|r| r.as_str().to_string()).collect()
}

/// The `### ` headings of the runbook, outside fenced code.
fn runbook_headings() -> Vec<String> {
    let path = crate_dir().join("../docs/operations/runbook.md");
    let text = fs::read_to_string(&path).expect("docs/operations/runbook.md is readable");
    let mut fenced = false;
    let mut headings = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if let Some(heading) = line.strip_prefix("### ").filter(|_| !fenced) {
            headings.push(heading.trim().to_string());
        }
    }
    headings
}

#[test]
fn every_reason_the_operator_reports_has_a_runbook_entry() {
    let headings: BTreeSet<String> = runbook_headings().into_iter().collect();
    let missing: Vec<String> = reasons().difference(&headings).cloned().collect();
    assert!(
        missing.is_empty(),
        "reasons without a `### <reason>` entry in docs/operations/runbook.md: {missing:?}"
    );
}

#[test]
fn the_runbook_has_no_entry_for_a_reason_that_no_longer_exists() {
    let headings = runbook_headings();
    let reasons = reasons();
    let stale: Vec<&String> = headings.iter().filter(|h| !reasons.contains(*h)).collect();
    assert!(
        stale.is_empty(),
        "runbook entries for no reason the operator reports: {stale:?}"
    );
    let unique: BTreeSet<&String> = headings.iter().collect();
    assert_eq!(
        unique.len(),
        headings.len(),
        "a reason has two runbook entries"
    );
}
