//! Rust source as the few tokens an import graph needs: identifiers, `::` and single
//! punctuation, with comments, string and character literals dropped, and items marked
//! `#[cfg(test)]` removed. Each token can carry the line it starts on.

/// One token of Rust source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    /// An identifier or keyword.
    Ident(String),
    /// `::`
    PathSep,
    /// Any other punctuation character (`{`, `;`, `#`, ...).
    Punct(char),
}

/// A token and the line of the source it starts on, counted from 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// The token.
    pub token: Token,
    /// Its line, from 1.
    pub line: usize,
}

/// The tokens of `source`, without comments, literals and `#[cfg(test)]` items.
pub fn tokens(source: &str) -> Vec<Token> {
    located_tokens(source)
        .into_iter()
        .map(|t| t.token)
        .collect()
}

/// [`tokens`], each with its line.
pub fn located_tokens(source: &str) -> Vec<Located> {
    strip_test_items(raw_tokens(source))
}

fn raw_tokens(source: &str) -> Vec<Located> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    // The line of `chars[counted]`: newlines are counted up to each token's start.
    let mut line = 1;
    let mut counted = 0;
    let mut at = |start: usize, token: Token| {
        line += chars[counted..start].iter().filter(|&&c| c == '\n').count();
        counted = start;
        Located { token, line }
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i = skip_block_comment(&chars, i);
        } else if c == '"' {
            i = skip_string(&chars, i + 1);
        } else if c == 'r' && matches!(next, Some('"') | Some('#')) && raw_string_start(&chars, i) {
            i = skip_raw_string(&chars, i + 1);
        } else if c == '\'' {
            i = skip_char_or_lifetime(&chars, i);
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            // b"..." and br"..." are byte strings: the prefix is no identifier.
            if !(matches!(word.as_str(), "b" | "br")
                && matches!(chars.get(i), Some('"') | Some('#')))
            {
                out.push(at(start, Token::Ident(word)));
            }
        } else if c == ':' && next == Some(':') {
            out.push(at(i, Token::PathSep));
            i += 2;
        } else {
            if !c.is_whitespace() {
                out.push(at(i, Token::Punct(c)));
            }
            i += 1;
        }
    }
    out
}

fn skip_block_comment(chars: &[char], mut i: usize) -> usize {
    let mut depth = 0;
    while i < chars.len() {
        if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
            depth += 1;
            i += 2;
        } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    i
}

/// From just after an opening `"` to just after its closing one.
fn skip_string(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

fn raw_string_start(chars: &[char], i: usize) -> bool {
    let before_is_ident = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
    let mut j = i + 1;
    while chars.get(j) == Some(&'#') {
        j += 1;
    }
    !before_is_ident && chars.get(j) == Some(&'"')
}

/// From just after the `r` of a raw string to just after its closing quote and hashes.
fn skip_raw_string(chars: &[char], mut i: usize) -> usize {
    let mut hashes = 0;
    while chars.get(i) == Some(&'#') {
        hashes += 1;
        i += 1;
    }
    i += 1;
    while i < chars.len() {
        if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
            return i + 1 + hashes;
        }
        i += 1;
    }
    i
}

/// A character literal is skipped whole; a lifetime only loses its quote.
fn skip_char_or_lifetime(chars: &[char], i: usize) -> usize {
    match (chars.get(i + 1), chars.get(i + 2)) {
        (Some('\\'), _) => {
            let mut j = i + 2;
            while j < chars.len() && chars[j] != '\'' {
                j += 1;
            }
            j + 1
        }
        (Some(_), Some('\'')) => i + 3,
        _ => i + 1,
    }
}

/// Drops each item that follows `#[cfg(test)]`: up to its `;` or through its braces.
fn strip_test_items(tokens: Vec<Located>) -> Vec<Located> {
    let cfg_test = [
        Token::Punct('#'),
        Token::Punct('['),
        Token::Ident("cfg".into()),
        Token::Punct('('),
        Token::Ident("test".into()),
        Token::Punct(')'),
        Token::Punct(']'),
    ];
    let starts_cfg_test = |i: usize| {
        tokens.len() >= i + cfg_test.len()
            && tokens[i..i + cfg_test.len()]
                .iter()
                .zip(&cfg_test)
                .all(|(t, want)| &t.token == want)
    };
    let mut out = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        if starts_cfg_test(i) {
            i = end_of_item(&tokens, i + cfg_test.len());
        } else {
            out.push(tokens[i].clone());
            i += 1;
        }
    }
    out
}

fn end_of_item(tokens: &[Located], mut i: usize) -> usize {
    let mut depth = 0usize;
    while i < tokens.len() {
        match tokens[i].token {
            Token::Punct(';') if depth == 0 => return i + 1,
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idents(source: &str) -> Vec<String> {
        tokens(source)
            .into_iter()
            .filter_map(|t| match t {
                Token::Ident(s) => Some(s),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn comments_and_literals_leave_no_identifiers() {
        let source = r####"
            // use crate::a;
            /* use crate::b; /* nested */ */
            let s = "use crate::c; {";
            let r = r#"use crate::d; }"#;
            let c = '{';
            let e = '\'';
            let b = b"x";
            fn f<'a>(x: &'a str) {}
        "####;
        assert_eq!(
            idents(source),
            [
                "let", "s", "let", "r", "let", "c", "let", "e", "let", "b", "fn", "f", "a", "x",
                "a", "str"
            ]
        );
    }

    #[test]
    fn an_item_under_cfg_test_is_dropped_whole() {
        let source = "fn a() {}\n#[cfg(test)]\nmod tests { use crate::x; fn b() { {} } }\n\
                      #[cfg(test)]\nmod more;\nfn c() {}";
        assert_eq!(idents(source), ["fn", "a", "fn", "c"]);
    }

    #[test]
    fn each_token_carries_the_line_it_starts_on_past_multi_line_comments_and_strings() {
        let source = "fn a() {\n/* one\ntwo */ let s = \"x\ny\";\n}\n#[cfg(test)]\nfn t() {}\nfn b";
        let lines: Vec<(Token, usize)> = located_tokens(source)
            .into_iter()
            .filter(|t| matches!(t.token, Token::Ident(_) | Token::Punct('}')))
            .map(|t| (t.token, t.line))
            .collect();
        let ident = |s: &str| Token::Ident(s.into());
        assert_eq!(
            lines,
            [
                (ident("fn"), 1),
                (ident("a"), 1),
                (ident("let"), 3),
                (ident("s"), 3),
                (Token::Punct('}'), 5),
                (ident("fn"), 8),
                (ident("b"), 8),
            ]
        );
    }
}
