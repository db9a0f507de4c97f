//! Quoting for POSIX shells (bash, dash, busybox ash).

/// Quotes `s` as one shell word that evaluates to exactly `s`.
///
/// Words made only of characters no shell treats specially are returned as they are; anything
/// else is put in single quotes, with each `'` written as `'\''`. Inside single quotes every
/// byte (newlines, `$`, `\`, `"`, backticks, unicode) is literal in every POSIX shell. NUL
/// characters cannot exist in shell strings or environment values and are dropped.
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

fn is_plain(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'_' | b'-' | b'.' | b'/' | b':' | b'=' | b'@' | b'%' | b'+' | b','
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_words_stay_plain() {
        assert_eq!(quote("abc-1.2/x"), "abc-1.2/x");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote("$HOME"), "'$HOME'");
        assert_eq!(quote("a\0b"), "'ab'");
        assert_eq!(quote("~"), "'~'");
    }
}
