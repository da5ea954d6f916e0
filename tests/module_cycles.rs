//! No new import circle: the modules of the operator's two crates may only form the
//! circles listed in `tests/module-cycles.txt`, and that list may only shrink. A circle
//! that grew, a new one, or one that is gone (remove its line) fails the test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use etcd_operator_modgraph::Crate;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The circles of each crate, as lines `crate-dir: a b c` (modules sorted), each with the
/// imports that close it (to show in a failure).
fn circles() -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for dir in ["src", "actors/src"] {
        let krate = Crate::load(&root().join(dir).join("lib.rs")).expect("crate sources");
        let edges = krate.edges();
        for cycle in krate.cycles() {
            let within = edges
                .iter()
                .filter(|(a, b)| cycle.contains(a) && cycle.contains(b))
                .map(|(a, b)| format!("{a} -> {b}"))
                .collect();
            let modules: Vec<String> = cycle.into_iter().collect();
            out.insert(format!("{dir}: {}", modules.join(" ")), within);
        }
    }
    out
}

fn listed() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("tests/module-cycles.txt")).expect("the list");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

#[test]
fn the_module_graph_has_no_import_circle_beyond_the_listed_ones() {
    let found = circles();
    let listed = listed();
    let new: Vec<String> = found
        .iter()
        .filter(|(c, _)| !listed.contains(*c))
        .map(|(c, edges)| format!("{c}\n      {}", edges.join("\n      ")))
        .collect();
    let gone: Vec<_> = listed.iter().filter(|c| !found.contains_key(*c)).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "import circles changed.\nnew or grown (break them; never add them to the list):\n  {}\n\
         listed but no longer found (remove these lines from tests/module-cycles.txt):\n  {}",
        new.join("\n  "),
        gone.iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n  "),
    );
}
