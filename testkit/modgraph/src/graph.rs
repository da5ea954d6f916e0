//! The module tree of a crate, the edges between its modules, and their circles.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::lexer;
use crate::uses::{Facts, UsePath, facts};

/// A module's path from the crate root (`[]` is the root).
type ModPath = Vec<String>;

/// Why a crate's sources could not be read.
#[derive(Debug)]
pub struct LoadError {
    /// The file that was looked for.
    pub file: PathBuf,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot read {}", self.file.display())
    }
}

impl std::error::Error for LoadError {}

struct Module {
    file: PathBuf,
    children: BTreeSet<String>,
    facts: Facts,
}

/// One crate's modules and the imports between them.
pub struct Crate {
    modules: BTreeMap<ModPath, Module>,
}

impl Crate {
    /// Reads the crate whose root file is `root` (its `lib.rs`) from the disk.
    pub fn load(root: &Path) -> Result<Crate, LoadError> {
        Crate::read(root, |p| std::fs::read_to_string(p).ok())
    }

    /// Reads the crate whose root file is `root`, each file's text from `read`.
    pub fn read(root: &Path, read: impl Fn(&Path) -> Option<String>) -> Result<Crate, LoadError> {
        let mut modules = BTreeMap::new();
        let mut todo = vec![(ModPath::new(), root.to_path_buf(), None)];
        while let Some((path, file, text)) = todo.pop() {
            let text = text
                .or_else(|| read(&file))
                .ok_or_else(|| LoadError { file: file.clone() })?;
            let facts = facts(&lexer::tokens(&text));
            let dir = children_dir(&file);
            for child in &facts.child_files {
                // `x.rs` beside the parent's directory, else `x/mod.rs`; a file read to
                // find out which is kept, not read again.
                let flat = dir.join(format!("{child}.rs"));
                let (found, text) = match read(&flat) {
                    Some(text) => (flat, Some(text)),
                    None => (dir.join(child).join("mod.rs"), None),
                };
                let mut child_path = path.clone();
                child_path.push(child.clone());
                todo.push((child_path, found, text));
            }
            let children = facts.child_files.iter().cloned().collect();
            modules.insert(
                path,
                Module {
                    file,
                    children,
                    facts,
                },
            );
        }
        Ok(Crate { modules })
    }

    /// The file of each module, sorted: the root's and those its `mod x;` declarations
    /// reach, without the ones declared only under `#[cfg(test)]`.
    pub fn files(&self) -> Vec<&Path> {
        let mut files: Vec<&Path> = self.modules.values().map(|m| m.file.as_path()).collect();
        files.sort();
        files
    }

    /// Every edge `from -> to` between two different modules, by their names.
    pub fn edges(&self) -> BTreeSet<(String, String)> {
        self.edge_set()
            .into_iter()
            .map(|(a, b)| (name(&a), name(&b)))
            .collect()
    }

    /// The import circles: each a set of two or more modules that all reach one another,
    /// by name (`crate` for the root, else `a::b`), sorted.
    pub fn cycles(&self) -> Vec<BTreeSet<String>> {
        let edges = self.edge_set();
        let mut out: Vec<BTreeSet<String>> = strongly_connected(self.modules.keys(), &edges)
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|c| c.iter().map(name).collect())
            .collect();
        out.sort();
        out
    }

    fn edge_set(&self) -> BTreeSet<(ModPath, ModPath)> {
        let mut edges = BTreeSet::new();
        for (at, module) in &self.modules {
            let written = module.facts.paths.iter().map(Vec::as_slice);
            let used = module
                .facts
                .uses
                .iter()
                .filter(|u| !u.public || u.name.as_ref().is_some_and(|n| names(module, n)))
                .map(|u| u.path.as_slice());
            for path in written.chain(used) {
                let Some(abs) = self.absolute(at, path) else {
                    continue;
                };
                if let Some((to, _)) = self.resolve(&abs, 0)
                    && &to != at
                {
                    edges.insert((at.clone(), to));
                }
            }
        }
        edges
    }

    /// `path` written in module `at`, from the crate root. `None` unless it starts at
    /// `crate`, `self`, `super` or a child module: anything else is another crate's, or
    /// (in code) a local type or variable.
    fn absolute(&self, at: &ModPath, path: &[String]) -> Option<ModPath> {
        let (first, rest) = path.split_first()?;
        let mut base = at.clone();
        let mut rest = rest;
        match first.as_str() {
            "crate" => base.clear(),
            "self" => {}
            "super" => {
                base.pop()?;
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            child if self.modules[at].children.contains(child) => {
                rest = path;
            }
            _ => return None,
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The module that defines what `abs` names, and whether the name was found defined
    /// (rather than assumed to be in the last module reached). Re-exports are followed.
    fn resolve(&self, abs: &[String], depth: usize) -> Option<(ModPath, bool)> {
        if depth > 16 {
            return None;
        }
        let mut at = ModPath::new();
        let mut i = 0;
        while i < abs.len() && self.modules.get(&at)?.children.contains(&abs[i]) {
            at.push(abs[i].clone());
            i += 1;
        }
        let Some(item) = abs.get(i) else {
            return Some((at, true));
        };
        let module = &self.modules[&at];
        if module.facts.defs.contains(item) {
            return Some((at, true));
        }
        let imported = |u: &&UsePath| u.name.as_deref() == Some(item.as_str());
        if let Some(u) = module.facts.uses.iter().find(imported) {
            let target = self.absolute(&at, &u.path)?;
            return self.resolve(&target, depth + 1);
        }
        for glob in module.facts.uses.iter().filter(|u| u.name.is_none()) {
            let Some(mut target) = self.absolute(&at, &glob.path) else {
                continue;
            };
            target.push(item.clone());
            if let Some(found @ (_, true)) = self.resolve(&target, depth + 1) {
                return Some(found);
            }
        }
        Some((at, false))
    }
}

/// Whether `module` names `name` outside its `use` declarations.
fn names(module: &Module, name: &str) -> bool {
    module.facts.idents.iter().any(|i| i == name)
}

fn children_dir(file: &Path) -> PathBuf {
    let dir = file.parent().unwrap_or(Path::new("")).to_path_buf();
    match file.file_stem().and_then(|s| s.to_str()) {
        Some("lib" | "main" | "mod") | None => dir,
        Some(stem) => dir.join(stem),
    }
}

fn name(path: &ModPath) -> String {
    if path.is_empty() {
        "crate".into()
    } else {
        path.join("::")
    }
}

/// Tarjan's strongly connected components.
fn strongly_connected<'a>(
    nodes: impl Iterator<Item = &'a ModPath>,
    edges: &BTreeSet<(ModPath, ModPath)>,
) -> Vec<Vec<ModPath>> {
    struct Walk<'e> {
        next: BTreeMap<&'e ModPath, Vec<&'e ModPath>>,
        index: BTreeMap<&'e ModPath, (usize, usize)>,
        stack: Vec<&'e ModPath>,
        on_stack: BTreeSet<&'e ModPath>,
        out: Vec<Vec<ModPath>>,
    }
    impl<'e> Walk<'e> {
        fn visit(&mut self, v: &'e ModPath) {
            let n = self.index.len();
            self.index.insert(v, (n, n));
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.next.get(v).cloned().unwrap_or_default() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.index[w].1.min(self.index[v].1);
                    self.index.get_mut(v).expect("visited").1 = low;
                } else if self.on_stack.contains(w) {
                    let low = self.index[w].0.min(self.index[v].1);
                    self.index.get_mut(v).expect("visited").1 = low;
                }
            }
            let (i, low) = self.index[v];
            if i == low {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                self.out.push(component);
            }
        }
    }
    let mut walk = Walk {
        next: BTreeMap::new(),
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for (a, b) in edges {
        walk.next.entry(a).or_default().push(b);
    }
    for v in nodes {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn krate(files: &[(&str, &str)]) -> Crate {
        let files: BTreeMap<PathBuf, String> = files
            .iter()
            .map(|(p, t)| (PathBuf::from(p), t.to_string()))
            .collect();
        Crate::read(Path::new("lib.rs"), |p| files.get(p).cloned()).expect("all files given")
    }

    fn cycles(files: &[(&str, &str)]) -> Vec<Vec<String>> {
        krate(files)
            .cycles()
            .into_iter()
            .map(|c| c.into_iter().collect())
            .collect()
    }

    #[test]
    fn two_modules_importing_each_other_are_a_cycle() {
        let got = cycles(&[
            ("lib.rs", "mod a;\nmod b;\nmod c;"),
            ("a.rs", "use crate::b::B;\npub struct A;"),
            ("b.rs", "pub struct B(crate::a::A);"),
            ("c.rs", "use crate::a::A;"),
        ]);
        assert_eq!(got, [vec!["a".to_string(), "b".into()]]);
    }

    #[test]
    fn a_facade_that_re_exports_its_children_is_no_cycle() {
        let files = [
            ("lib.rs", "mod m;"),
            ("m/mod.rs", "mod a;\nmod b;\npub use a::A;\npub use b::*;"),
            ("m/a.rs", "use super::B;\npub struct A;"),
            ("m/b.rs", "pub struct B;"),
        ];
        let got = cycles(&files);
        assert!(got.is_empty(), "{got:?}");
        let edges = krate(&files).edges();
        assert_eq!(edges, [("m::a".to_string(), "m::b".to_string())].into());
    }

    #[test]
    fn a_name_followed_through_a_re_export_closes_the_cycle_it_hides() {
        let got = cycles(&[
            ("lib.rs", "mod m;"),
            ("m/mod.rs", "mod decide;\nmod rule;\npub use decide::Step;"),
            (
                "m/decide.rs",
                "pub struct Step;\nfn d() { super::rule::r(); }",
            ),
            ("m/rule.rs", "use super::Step;\npub fn r() -> Step { Step }"),
        ]);
        assert_eq!(got, [vec!["m::decide".to_string(), "m::rule".into()]]);
    }

    #[test]
    fn a_parent_that_uses_its_child_and_defines_what_the_child_uses_is_a_cycle() {
        let got = cycles(&[
            ("lib.rs", "mod m;"),
            ("m/mod.rs", "mod a;\npub struct Shared;\nfn f() { a::g(); }"),
            ("m/a.rs", "use super::Shared;\npub fn g() {}"),
        ]);
        assert_eq!(got, [vec!["m".to_string(), "m::a".into()]]);
    }

    #[test]
    fn a_public_use_that_the_module_also_names_is_an_edge() {
        let got = cycles(&[
            ("lib.rs", "mod a;\nmod b;"),
            ("a.rs", "pub use crate::b::B;\npub struct A;\nfn f(_: B) {}"),
            ("b.rs", "pub struct B(crate::a::A);"),
        ]);
        assert_eq!(got, [vec!["a".to_string(), "b".into()]]);
    }

    #[test]
    fn test_modules_and_other_crates_add_no_edges() {
        let got = cycles(&[
            ("lib.rs", "mod a;\nmod b;"),
            (
                "a.rs",
                "pub struct A;\n#[cfg(test)]\nmod tests { use crate::b::B; }",
            ),
            (
                "b.rs",
                "use crate::a::A;\nuse std::fmt;\nuse other::a::Thing;",
            ),
        ]);
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn the_files_are_those_of_the_modules_found_without_test_modules() {
        let got = krate(&[
            ("lib.rs", "mod a;\nmod b;\n#[cfg(test)]\nmod lib_tests;"),
            ("a.rs", "#[cfg(test)]\n#[path = \"a_tests.rs\"]\nmod tests;"),
            ("b/mod.rs", "mod c;"),
            ("b/c.rs", ""),
        ]);
        let files: Vec<&Path> = ["a.rs", "b/c.rs", "b/mod.rs", "lib.rs"]
            .into_iter()
            .map(Path::new)
            .collect();
        assert_eq!(got.files(), files);
    }

    #[test]
    fn a_missing_module_file_is_an_error_naming_it() {
        let files: BTreeMap<PathBuf, String> =
            [(PathBuf::from("lib.rs"), "mod gone;".into())].into();
        let err = Crate::read(Path::new("lib.rs"), |p| files.get(p).cloned())
            .err()
            .expect("gone.rs is missing");
        assert_eq!(err.file, PathBuf::from("gone/mod.rs"));
    }
}
