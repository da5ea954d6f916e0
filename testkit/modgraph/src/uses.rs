//! What one module's tokens say about the graph: the modules it declares, the names it
//! defines, its `use` declarations (as flat paths) and the other paths it writes.

use crate::lexer::Token;

/// One path a `use` declaration brings in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsePath {
    /// The path as written, `self`/`super`/`crate` included.
    pub path: Vec<String>,
    /// The name it is known by in the module (its last segment, or its `as` alias);
    /// `None` for a glob.
    pub name: Option<String>,
    /// Whether the declaration is `pub` (of any visibility): a re-export.
    pub public: bool,
}

/// The facts of one module's source.
#[derive(Debug, Default)]
pub struct Facts {
    /// `mod x;` declarations (a file of their own), in order.
    pub child_files: Vec<String>,
    /// Names of items defined here (functions, types, traits, constants, inline modules).
    pub defs: Vec<String>,
    /// Every path brought in by `use`.
    pub uses: Vec<UsePath>,
    /// Paths written outside `use` declarations, by their segments.
    pub paths: Vec<Vec<String>>,
    /// Every identifier outside `use` declarations (to see whether a re-export is used).
    pub idents: Vec<String>,
}

const ITEM_KEYWORDS: [&str; 9] = [
    "fn", "struct", "enum", "trait", "type", "const", "static", "union", "mod",
];

/// Reads the facts of a module from its tokens.
pub fn facts(tokens: &[Token]) -> Facts {
    let mut f = Facts::default();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            Token::Ident(kw) if kw == "use" => {
                let public = is_public(tokens, i);
                let end = find(tokens, i, &Token::Punct(';'));
                let mut pos = i + 1;
                if tokens.get(pos) == Some(&Token::PathSep) {
                    pos += 1; // `use ::name`: an extern crate
                }
                let mut out = Vec::new();
                tree(&tokens[..end], &mut pos, &[], &mut out);
                f.uses.extend(
                    out.into_iter()
                        .map(|(path, name)| UsePath { path, name, public }),
                );
                i = end + 1;
                continue;
            }
            Token::Ident(kw) if ITEM_KEYWORDS.contains(&kw.as_str()) => {
                if let Some(Token::Ident(name)) = tokens.get(i + 1) {
                    let file_module = kw == "mod" && tokens.get(i + 2) == Some(&Token::Punct(';'));
                    if file_module {
                        f.child_files.push(name.clone());
                    } else {
                        f.defs.push(name.clone());
                    }
                }
            }
            Token::Ident(kw) if kw == "macro_rules" => {
                if let Some(Token::Ident(name)) = tokens.get(i + 2) {
                    f.defs.push(name.clone());
                }
            }
            _ => {}
        }
        if let Token::Ident(first) = &tokens[i] {
            f.idents.push(first.clone());
            let starts_path = i == 0 || tokens[i - 1] != Token::PathSep;
            if starts_path && tokens.get(i + 1) == Some(&Token::PathSep) {
                f.paths.push(path_at(tokens, i));
            }
        }
        i += 1;
    }
    f
}

/// Whether the `use` at `i` is preceded by `pub` or `pub(...)`.
fn is_public(tokens: &[Token], i: usize) -> bool {
    let pub_kw = Token::Ident("pub".into());
    match i.checked_sub(1).map(|j| &tokens[j]) {
        Some(t) if *t == pub_kw => true,
        Some(Token::Punct(')')) => {
            let open = (0..i).rev().find(|&j| tokens[j] == Token::Punct('('));
            open.is_some_and(|j| j > 0 && tokens[j - 1] == pub_kw)
        }
        _ => false,
    }
}

fn find(tokens: &[Token], from: usize, t: &Token) -> usize {
    (from..tokens.len())
        .find(|&j| tokens[j] == *t)
        .unwrap_or(tokens.len())
}

/// The segments `a::b::c` starting at `i`.
fn path_at(tokens: &[Token], mut i: usize) -> Vec<String> {
    let mut path = Vec::new();
    while let Some(Token::Ident(seg)) = tokens.get(i) {
        path.push(seg.clone());
        if tokens.get(i + 1) != Some(&Token::PathSep) {
            break;
        }
        i += 2;
    }
    path
}

/// One use tree at `pos` under `prefix`, flattened into (path, name) pairs.
fn tree(
    tokens: &[Token],
    pos: &mut usize,
    prefix: &[String],
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    let mut path = prefix.to_vec();
    loop {
        match tokens.get(*pos) {
            Some(Token::Ident(seg)) => {
                *pos += 1;
                if seg == "self" && !path.is_empty() && path.len() == prefix.len() {
                    // `a::{self}` names `a` itself.
                } else {
                    path.push(seg.clone());
                }
            }
            Some(Token::Punct('*')) => {
                *pos += 1;
                out.push((path, None));
                return;
            }
            Some(Token::Punct('{')) => {
                *pos += 1;
                while !matches!(tokens.get(*pos), None | Some(Token::Punct('}'))) {
                    tree(tokens, pos, &path, out);
                    if tokens.get(*pos) == Some(&Token::Punct(',')) {
                        *pos += 1;
                    }
                }
                *pos += 1;
                return;
            }
            _ => return,
        }
        if tokens.get(*pos) == Some(&Token::PathSep) {
            *pos += 1;
            continue;
        }
        let mut name = path.last().cloned();
        if tokens.get(*pos) == Some(&Token::Ident("as".into())) {
            if let Some(Token::Ident(alias)) = tokens.get(*pos + 1) {
                name = Some(alias.clone());
            }
            *pos += 2;
        }
        out.push((path, name));
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lexer::tokens;

    fn uses(source: &str) -> Vec<(String, Option<String>, bool)> {
        facts(&tokens(source))
            .uses
            .into_iter()
            .map(|u| (u.path.join("::"), u.name, u.public))
            .collect()
    }

    #[test]
    fn a_use_tree_is_flattened_into_paths_with_their_names() {
        let got = uses("use super::{a::{self, B as C}, d::*, E};\npub(crate) use crate::f::G;");
        let want = [
            ("super::a".to_string(), Some("a".to_string()), false),
            ("super::a::B".into(), Some("C".into()), false),
            ("super::d".into(), None, false),
            ("super::E".into(), Some("E".into()), false),
            ("crate::f::G".into(), Some("G".into()), true),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn file_modules_definitions_and_written_paths_are_told_apart() {
        let f = facts(&tokens(
            "mod a;\npub mod b;\nmod c { }\nstruct S;\nfn f() { a::g(); super::x::Y::new(); }",
        ));
        assert_eq!(f.child_files, ["a", "b"]);
        assert_eq!(f.defs, ["c", "S", "f"]);
        assert_eq!(
            f.paths,
            [
                vec!["a".to_string(), "g".into()],
                vec!["super".into(), "x".into(), "Y".into(), "new".into()]
            ]
        );
    }
}
