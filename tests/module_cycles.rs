//! No import circle: no module of the operator's three crates reaches itself through the
//! modules it imports (`testkit/modgraph` reads the graph). A failure names each circle
//! and the imports that close it; break it by moving what both sides share into a leaf
//! module that both import.

use std::path::PathBuf;

use etcd_operator_modgraph::Crate;

/// The circles of each crate, each with the imports that close it.
fn circles() -> Vec<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for dir in ["src", "core/src", "actors/src"] {
        let krate = Crate::load(&root.join(dir).join("lib.rs")).expect("crate sources");
        let edges = krate.edges();
        for cycle in krate.cycles() {
            let within: Vec<String> = edges
                .iter()
                .filter(|(a, b)| cycle.contains(a) && cycle.contains(b))
                .map(|(a, b)| format!("{a} -> {b}"))
                .collect();
            let modules: Vec<String> = cycle.into_iter().collect();
            out.push(format!(
                "{dir}: {}\n      {}",
                modules.join(" "),
                within.join("\n      ")
            ));
        }
    }
    out
}

#[test]
fn no_module_of_the_operator_imports_itself_through_others() {
    let circles = circles();
    assert!(
        circles.is_empty(),
        "import circles:\n  {}",
        circles.join("\n  ")
    );
}

#[test]
fn the_api_module_is_the_bottom_layer_of_the_operator_crate() {
    // The CRD types are what every other module reads; they read none of them.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let krate = Crate::load(&root.join("src/lib.rs")).expect("crate sources");
    let in_api = |module: &str| module == "api" || module.starts_with("api::");
    let upward: Vec<String> = krate
        .edges()
        .into_iter()
        .filter(|(from, to)| in_api(from) && !in_api(to))
        .map(|(from, to)| format!("{from} -> {to}"))
        .collect();
    assert!(upward.is_empty(), "api imports: {upward:?}");
}
