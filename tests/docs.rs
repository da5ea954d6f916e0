//! The documentation tells the truth about the tree: every relative link leads to a file
//! (and to a heading, when it names one), every repository path the pages name exists,
//! the README's example is the example file the end-to-end suite applies, and the README's
//! two commands are the Makefile targets CI runs.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, every page under docs/, and every README of the test rig.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md")];
    collect_markdown(&root().join("docs"), &mut out);
    collect_markdown(&root().join("testkit"), &mut out);
    out.retain(|p| !p.components().any(|c| c.as_os_str() == "target"));
    out.sort();
    out
}

fn collect_markdown(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_markdown(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// The page's text with fenced code blocks blanked out (links and headings inside code
/// are not links and headings).
fn prose(text: &str) -> String {
    let mut fenced = false;
    text.lines()
        .map(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return "";
            }
            if fenced { "" } else { line }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(page: &Path) -> BTreeSet<String> {
    let text = fs::read_to_string(page).unwrap_or_default();
    prose(&text)
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}

/// Every `](target)` of the page's prose.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_string());
        }
    }
    out
}

#[test]
fn every_relative_link_in_the_docs_leads_to_a_file_and_heading() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = prose(&fs::read_to_string(&page).unwrap());
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match link.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (link.as_str(), None),
            };
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !target.exists() {
                broken.push(format!("{}: {link}: no such file", page.display()));
                continue;
            }
            if let Some(anchor) = anchor
                && target.is_file()
                && !anchors(&target).contains(anchor)
            {
                broken.push(format!("{}: {link}: no such heading", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Backticked words that are paths in this repository: they start with one of its
/// top-level directories and hold no placeholder.
fn repository_paths(text: &str) -> Vec<String> {
    const TOP: [&str; 11] = [
        "actors/",
        "src/",
        "testkit/",
        "tests/",
        "benches/",
        "charts/",
        "manifests/",
        "examples/",
        "build/",
        "docs/",
        ".ci/",
    ];
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| TOP.iter().any(|t| w.starts_with(t)))
        .filter(|w| {
            w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c))
        })
        .filter(|w| !w.contains("**") && !w.contains('*'))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_repository_path_the_docs_name_exists() {
    let mut missing = Vec::new();
    for page in pages() {
        let text = prose(&fs::read_to_string(&page).unwrap());
        for path in repository_paths(&text) {
            if !root().join(&path).exists() {
                missing.push(format!("{}: `{path}`", page.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "paths the docs name that the tree does not have:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_readme_example_is_the_example_file_the_suite_applies() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    let marker = "`examples/recovery.yaml`:";
    let after = &readme[readme.find(marker).expect("the README names its example")..];
    let block = after
        .split("```yaml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a yaml block after the example's name");
    let shown: serde_yaml_ng::Value = serde_yaml_ng::from_str(block).unwrap();
    let file = fs::read_to_string(root().join("examples/recovery.yaml")).unwrap();
    let applied: serde_yaml_ng::Value = serde_yaml_ng::from_str(&file).unwrap();
    assert_eq!(
        shown, applied,
        "the README's example differs from examples/recovery.yaml"
    );
    let suite = fs::read_to_string(root().join("tests/e2e/examples.rs")).unwrap();
    assert!(
        suite.contains("\"recovery.yaml\""),
        "the suite no longer applies it"
    );
}

#[test]
fn the_readme_commands_are_the_makefile_targets_ci_runs() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    let makefile = fs::read_to_string(root().join("Makefile")).unwrap();
    let ci = fs::read_to_string(root().join(".ci/run")).unwrap();
    let commands = readme
        .split("## The two commands")
        .nth(1)
        .and_then(|s| s.split("```sh\n").nth(1))
        .and_then(|s| s.split("```").next())
        .expect("the README's two commands");
    let first: Vec<&str> = commands
        .lines()
        .map(|l| l.split('#').next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(first, ["make up", "make test"]);
    for target in ["up:", "test:"] {
        assert!(
            makefile.lines().any(|l| l.starts_with(target)),
            "the Makefile has no `{target}` target"
        );
    }
    assert!(
        ci.contains("make up") && ci.contains("make test"),
        ".ci/run runs both"
    );
}
