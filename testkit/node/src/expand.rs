//! Kubernetes-style `$(VAR)` expansion, as applied to env values, `command` and `args`.
//!
//! Rules (those of the kubelet): `$(NAME)` becomes the value of `NAME` when it is defined
//! and stays as written when it is not; `$$` is an escaped `$`; a `$` followed by anything
//! else, or a `$(` never closed, is kept verbatim.

/// Expands every `$(NAME)` in `input` with `lookup`, leaving unknown references untouched.
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(') {
            match inner.find(')') {
                Some(close) => {
                    let name = &inner[..close];
                    match lookup(name) {
                        Some(value) => out.push_str(&value),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &inner[close + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = inner;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Expands with a list of `(name, value)` pairs; a later pair wins over an earlier one.
pub fn expand_with(input: &str, vars: &[(String, String)]) -> String {
    expand(input, |name| {
        vars.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vec<(String, String)> {
        vec![
            ("POD_IP".into(), "127.0.1.7".into()),
            ("NAME".into(), "m1".into()),
        ]
    }

    #[test]
    fn defined_variable_is_replaced() {
        assert_eq!(
            expand_with("--listen-client-urls=http://$(POD_IP):2379", &vars()),
            "--listen-client-urls=http://127.0.1.7:2379"
        );
    }

    #[test]
    fn several_variables_in_one_string_are_replaced() {
        assert_eq!(expand_with("$(NAME)=$(POD_IP)", &vars()), "m1=127.0.1.7");
    }

    #[test]
    fn undefined_variable_is_left_as_written() {
        assert_eq!(expand_with("x$(NOPE)y", &vars()), "x$(NOPE)y");
    }

    #[test]
    fn double_dollar_escapes_a_reference() {
        assert_eq!(expand_with("$$(POD_IP)", &vars()), "$(POD_IP)");
        assert_eq!(expand_with("a$$b", &vars()), "a$b");
        assert_eq!(expand_with("$$$(NAME)", &vars()), "$m1");
    }

    #[test]
    fn lone_dollar_and_shell_syntax_are_kept() {
        assert_eq!(expand_with("$HOME ${X} $", &vars()), "$HOME ${X} $");
    }

    #[test]
    fn unclosed_reference_is_kept_and_scanning_continues() {
        assert_eq!(expand_with("$(NAME", &vars()), "$(NAME");
        assert_eq!(expand_with("$($(NAME)", &vars()), "$($(NAME)");
    }

    #[test]
    fn later_definition_wins() {
        let mut v = vars();
        v.push(("NAME".into(), "m2".into()));
        assert_eq!(expand_with("$(NAME)", &v), "m2");
    }

    #[test]
    fn non_ascii_text_survives() {
        assert_eq!(expand_with("é$(NAME)ü$", &vars()), "ém1ü$");
    }
}
