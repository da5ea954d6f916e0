//! No function of the operator's three crates is longer than 80 lines, outside tests
//! (issue #30). Eighty lines fit on one screen: a newcomer can read a whole function
//! without scrolling back to find what a name meant. Lines are counted from the `fn` to
//! the body's closing `}`, comments and blank lines included (`testkit/modgraph` reads
//! them). A failure lists each function too long; split it into named steps.

use std::path::{Path, PathBuf};

use etcd_operator_modgraph::{Crate, function_lengths};

const MAX_LINES: usize = 80;

/// Each function over [`MAX_LINES`], as `path:line name (N lines)`.
fn too_long() -> Vec<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for dir in ["src", "core/src", "actors/src"] {
        let krate = Crate::load(&root.join(dir).join("lib.rs")).expect("crate sources");
        for file in krate.files() {
            let shown = file.strip_prefix(&root).unwrap_or(file);
            if is_test_file(shown) {
                continue;
            }
            let text = std::fs::read_to_string(file).expect("read just now");
            for f in function_lengths(&text) {
                if f.lines > MAX_LINES {
                    let (line, name, n) = (f.line, f.name, f.lines);
                    out.push(format!("{}:{line} {name} ({n} lines)", shown.display()));
                }
            }
        }
    }
    out
}

/// Test files are declared under `#[cfg(test)]`, so the module walk does not find them;
/// this holds in case one is declared without it.
fn is_test_file(file: &Path) -> bool {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || file.components().any(|c| c.as_os_str() == "tests")
}

#[test]
fn no_function_outside_tests_is_longer_than_80_lines() {
    let offenders = too_long();
    assert!(
        offenders.is_empty(),
        "functions over {MAX_LINES} lines:\n  {}",
        offenders.join("\n  ")
    );
}
