//! How long each function of a source file is, in lines: from the line of its `fn` to the
//! line of its body's closing `}`, both counted, comments and blank lines included.
//!
//! Methods and nested functions are functions of their own (a nested one's lines also
//! count in the function around it); closures are part of theirs. A function without a
//! body (a trait method's declaration, a foreign function) has no length, and functions in
//! `#[cfg(test)]` items are left out.

use crate::lexer::{Located, Token, located_tokens};

/// One function of a source file and its length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FnLength {
    /// The function's name.
    pub name: String,
    /// The line of its `fn`, from 1.
    pub line: usize,
    /// Its length in lines, from the `fn` to the body's closing `}`.
    pub lines: usize,
}

/// Each function with a body in `source`, in the order of their `fn`s.
pub fn function_lengths(source: &str) -> Vec<FnLength> {
    let tokens = located_tokens(source);
    let mut out = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        if t.token != Token::Ident("fn".into()) {
            continue;
        }
        // `fn(..)` is a pointer type, `fn $name` a macro's template: no function here.
        let Some(Token::Ident(name)) = tokens.get(i + 1).map(|t| &t.token) else {
            continue;
        };
        let Some(open) = body_start(&tokens, i + 2) else {
            continue;
        };
        let Some(close) = matching_close(&tokens, open) else {
            continue;
        };
        out.push(FnLength {
            name: name.clone(),
            line: t.line,
            lines: tokens[close].line - t.line + 1,
        });
    }
    out
}

/// The body's `{` of the signature from `i`: the first one outside parentheses and
/// brackets (so `-> impl Fn() -> X {` and `[u8; { N }]` are read right). `None` when a
/// `;` ends the signature first.
fn body_start(tokens: &[Located], mut i: usize) -> Option<usize> {
    let mut depth = 0usize;
    while let Some(t) = tokens.get(i) {
        match t.token {
            Token::Punct('(' | '[') => depth += 1,
            Token::Punct(')' | ']') => depth = depth.saturating_sub(1),
            Token::Punct('{') if depth == 0 => return Some(i),
            Token::Punct(';') if depth == 0 => return None,
            _ => {}
        }
        i += 1;
    }
    None
}

/// The `}` that closes the `{` at `open`.
fn matching_close(tokens: &[Located], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate().skip(open) {
        match t.token {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each function as `(name, first line, length)`.
    fn lengths(source: &str) -> Vec<(String, usize, usize)> {
        function_lengths(source)
            .into_iter()
            .map(|f| (f.name, f.line, f.lines))
            .collect()
    }

    fn one(name: &str, line: usize, lines: usize) -> (String, usize, usize) {
        (name.to_string(), line, lines)
    }

    #[test]
    fn a_function_runs_from_its_fn_line_to_its_closing_brace_blank_lines_included() {
        let source = "\n/// Doc.\npub fn f(a: u8) -> u8 {\n\n    a\n}\nfn g() {}\n";
        assert_eq!(lengths(source), [one("f", 3, 4), one("g", 7, 1)]);
    }

    #[test]
    fn methods_in_impl_and_trait_blocks_are_functions_and_a_bodyless_one_is_skipped() {
        let source = "impl S {\n    fn new() -> S {\n        S\n    }\n}\n\
                      trait T {\n    fn f(&self);\n    fn g(&self) {\n    }\n}\n\
                      extern \"C\" {\n    fn c(x: i32) -> i32;\n}\n";
        assert_eq!(lengths(source), [one("new", 2, 3), one("g", 8, 2)]);
    }

    #[test]
    fn fn_pointer_and_fn_trait_types_in_a_signature_are_no_functions_nor_bodies() {
        let source = "fn apply(\n    f: fn(&A) -> B,\n    g: Box<dyn Fn(u8) -> u8>,\n\
                      ) -> impl Fn() -> u8 {\n    move || 1\n}\n\
                      fn sized<const N: usize>(a: [u8; { N }]) -> usize\nwhere\n    A: Clone,\n{\n    N\n}\n\
                      type Handler = fn(&str);\n";
        assert_eq!(lengths(source), [one("apply", 1, 6), one("sized", 7, 6)]);
    }

    #[test]
    fn functions_in_a_cfg_test_item_are_left_out() {
        let source =
            "fn a() {}\n#[cfg(test)]\nmod tests {\n    fn helper() {\n    }\n}\nfn b() {}\n";
        assert_eq!(lengths(source), [one("a", 1, 1), one("b", 7, 1)]);
    }

    #[test]
    fn a_nested_function_counts_on_its_own_and_in_the_one_around_it() {
        let source = "fn outer() {\n    fn inner() {\n        let c = || {\n        };\n    }\n    inner();\n}\n";
        assert_eq!(lengths(source), [one("outer", 1, 7), one("inner", 2, 4)]);
    }

    #[test]
    fn fn_and_braces_in_strings_comments_and_chars_are_ignored() {
        let source = "fn f() {\n    // fn fake() {\n    let s = \"fn g() { {\";\n\
                      /* } fn h() {} */\n    let r = r#\"}\"#;\n    let c = '}';\n}\n";
        assert_eq!(lengths(source), [one("f", 1, 7)]);
    }
}
