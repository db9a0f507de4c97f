//! POSIX shell words, written once for everything that builds a command line or a script:
//! the connectors (command lines sent over SSH or to a local shell), the job engine (stage
//! scripts) and the isolation levels (helper commands).
//!
//! The rules are those every POSIX shell shares (bash, dash, busybox ash), so a word quoted
//! here reads back exactly whichever shell an instance has.

/// Quotes `s` as one shell word that evaluates to exactly `s`.
///
/// Words made only of characters no shell treats specially are returned as they are; anything
/// else is put in single quotes, with each `'` written as `'\''`. Inside single quotes every
/// byte (newlines, `$`, `\`, `"`, backticks, unicode) is literal in every POSIX shell. NUL
/// characters cannot exist in shell strings, command lines or environment values, and are
/// dropped.
pub fn quote(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(is_plain) {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("'\\''"),
            '\0' => {}
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// Characters no POSIX shell treats specially anywhere in a word (`~` is special at its
/// start, so it is not one of them).
fn is_plain(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'_' | b'-' | b'.' | b'/' | b':' | b'=' | b'@' | b'%' | b'+' | b','
        )
}

/// Joins words into a command line, quoting each.
pub fn join<I: IntoIterator<Item = S>, S: AsRef<str>>(words: I) -> String {
    words
        .into_iter()
        .map(|w| quote(w.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `name` can be exported by a POSIX shell (`[A-Za-z_][A-Za-z0-9_]*`).
pub fn is_valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn sh(line: &str) -> String {
        let out = Command::new("sh").arg("-c").arg(line).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn plain_words_stay_plain() {
        assert_eq!(quote("abc-1.2/x"), "abc-1.2/x");
        assert_eq!(quote("safe-1.2/x"), "safe-1.2/x");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote("$HOME"), "'$HOME'");
        assert_eq!(quote("a\0b"), "'ab'");
        assert_eq!(quote("~"), "'~'");
    }

    #[test]
    fn quoting_survives_a_real_shell() {
        for s in [
            "plain",
            "",
            "with space",
            "it's",
            "$HOME `id` \"x\" \\",
            "a\nb",
            "*?[]",
            "~user",
        ] {
            assert_eq!(sh(&format!("printf %s {}", quote(s))), s, "{s:?}");
        }
        assert_eq!(
            sh(&format!("printf '%s|' {}", join(["a b", "c"]))),
            "a b|c|"
        );
    }

    #[test]
    fn env_names() {
        assert!(is_valid_env_name("CI_JOB_ID"));
        assert!(is_valid_env_name("_x1"));
        assert!(!is_valid_env_name("1X"));
        assert!(!is_valid_env_name("A-B"));
        assert!(!is_valid_env_name(""));
        assert!(!is_valid_env_name("A=B"));
    }
}
