//! `$VAR` / `${VAR}` expansion with the semantics of Go's `os.Expand`, which GitLab Runner's
//! `spec.Variables.ExpandValue` uses: one pass, unknown names become empty, `$$` becomes `$`,
//! shell special parameters (`$*`, `$#`, `$1`, ...) become empty, a `$` not followed by a name
//! stays, and malformed `${` / `${}` are dropped.

/// Expands `value`, resolving names through `lookup` (which returns `None` for unknown names).
pub fn expand<'a>(value: &str, lookup: impl Fn(&str) -> Option<&'a str>) -> String {
    let resolve = |name: &str| -> String {
        match name {
            "$" => "$".to_owned(),
            "*" | "#" | "@" | "!" | "?" | "0" | "1" | "2" | "3" | "4" | "5" | "6" | "7" | "8"
            | "9" => String::new(),
            other => lookup(other).unwrap_or("").to_owned(),
        }
    };
    let bytes = value.as_bytes();
    if !bytes.contains(&b'$') {
        return value.to_owned();
    }
    let mut out = String::with_capacity(value.len() * 2);
    let mut copied = 0;
    let mut j = 0;
    while j < bytes.len() {
        if bytes[j] == b'$' && j + 1 < bytes.len() {
            out.push_str(&value[copied..j]);
            let (name, width) = shell_name(&value[j + 1..]);
            match name {
                Some(name) => out.push_str(&resolve(name)),
                None if width > 0 => {} // bad syntax: the characters are eaten
                None => out.push('$'),
            }
            j += width;
            copied = j + 1;
        }
        j += 1;
    }
    out.push_str(&value[copied..]);
    out
}

fn is_special(c: u8) -> bool {
    matches!(
        c,
        b'*' | b'#' | b'$' | b'@' | b'!' | b'?' | b'-' | b'0'..=b'9'
    )
}

fn is_name_char(c: u8) -> bool {
    c == b'_' || c.is_ascii_alphanumeric()
}

/// The name after a `$` and how many bytes it takes; `None` with a width means bad syntax.
fn shell_name(s: &str) -> (Option<&str>, usize) {
    let b = s.as_bytes();
    if b[0] == b'{' {
        if b.len() > 2 && is_special(b[1]) && b[2] == b'}' {
            return (Some(&s[1..2]), 3);
        }
        for i in 1..b.len() {
            if b[i] == b'}' {
                if i == 1 {
                    return (None, 2);
                }
                return (Some(&s[1..i]), i + 1);
            }
        }
        return (None, 1);
    }
    if is_special(b[0]) {
        return (Some(&s[0..1]), 1);
    }
    let n = b.iter().take_while(|&&c| is_name_char(c)).count();
    if n == 0 {
        (None, 0)
    } else {
        (Some(&s[..n]), n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(s: &str) -> String {
        expand(s, |k| match k {
            "A" => Some("alpha"),
            "B_1" => Some("beta"),
            "EMPTY" => Some(""),
            "-" => Some("dash"),
            _ => None,
        })
    }

    #[test]
    fn go_os_expand_semantics() {
        let table = [
            ("plain", "plain"),
            ("$A", "alpha"),
            ("${A}", "alpha"),
            ("x$A-y", "xalpha-y"),
            ("$B_1$A", "betaalpha"),
            ("$UNKNOWN|", "|"),
            ("$$", "$"),
            ("$$A", "$A"),
            ("cost: 5$", "cost: 5$"),
            ("$ A", "$ A"),
            ("$1$*$#", ""),
            ("${}", ""),
            ("${A", "A"),
            ("${A:-x}", ""),
            ("$-", "dash"),
            ("${-}", "dash"),
            ("é$A€", "éalpha€"),
            ("$EMPTY.", "."),
        ];
        for (input, want) in table {
            assert_eq!(ex(input), want, "expanding {input:?}");
        }
    }
}
