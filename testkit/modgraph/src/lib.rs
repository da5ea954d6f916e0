//! The module import graph of one crate, read from its sources, and the import circles in
//! it: sets of modules that each reach the others through `use` declarations and written
//! paths.
//!
//! Three rules keep the graph honest:
//!
//! - A name is followed to the module that defines it: `use super::Action` in
//!   `lifecycle/decide.rs` is an edge to `lifecycle::action` when `lifecycle/mod.rs` only
//!   re-exports `Action` from there.
//! - A `pub use` is a re-export, not an edge, unless the module also names what it
//!   re-exports; so a facade `mod.rs` is no circle with its children.
//! - `mod x;` is containment, not an import, and `#[cfg(test)]` items are left out: a test
//!   module may reach anything.
//!
//! [`function_lengths`] reads the same tokens for another rule: how many lines each
//! function of a file takes.
//!
//! It reads tokens, not a syntax tree: macros' insides, `#[path]` and `include!` are not
//! followed.

mod graph;
mod lengths;
mod lexer;
mod uses;

pub use graph::{Crate, LoadError};
pub use lengths::{FnLength, function_lengths};
