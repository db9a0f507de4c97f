//! RE2 patterns, as GitLab compiles every `/pattern/flags` of a pipeline: `rules:if` and
//! `only/except:variables` operands (`lib/gitlab/ci/pipeline/expression/lexeme/pattern.rb`) and
//! `only/except` ref patterns (`lib/gitlab/ci/build/policy/refs.rb`), both through
//! `Gitlab::UntrustedRegexp::RubySyntax` (`lib/gitlab/untrusted_regexp/ruby_syntax.rb`), which
//! prepends the flags as `(?flags)` and hands the body to RE2. There is no fallback to Ruby's
//! engine: the `allow_unsafe_ruby_regexp` flag that allowed one was off by default and is gone
//! from the current source.
//!
//! Rust's `regex` crate is close to RE2 but not the same language, so a pattern is first read
//! as RE2 reads it (what RE2 rejects is rejected here with RE2's words) and then written out in
//! the `regex` crate's syntax with RE2's meaning: `\d`, `\s`, `\w` and `\b` are ASCII in RE2,
//! `\Q…\E` quotes, `\123` is octal, `[` and `&&` inside a class are plain characters, `\<` is a
//! plain `<`, a `{` that does not start a repetition is a plain `{`. The expectations in
//! `tests/re2/` were recorded with RE2 itself (`scripts/re2-expectations.py`).

use regex::{Regex, RegexBuilder};

/// Why a pattern cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Re2Error {
    /// RE2 rejects the pattern (GitLab rejects it too).
    #[error("{0}")]
    Invalid(String),
    /// RE2 accepts the pattern but flotilla's engine cannot run it the same way.
    #[error("valid RE2 that flotilla cannot run: {0}")]
    Unsupported(String),
}

/// RE2's limit on a counted repetition (`{n,m}`).
const MAX_REPEAT: u32 = 1000;

/// Compile an RE2 pattern with GitLab's flags (`i`, `m`, `s`, `U`, any combination).
pub(crate) fn compile(body: &str, flags: &str) -> Result<Regex, Re2Error> {
    let source = if flags.is_empty() {
        body.to_string()
    } else {
        format!("(?{flags}){body}")
    };
    let translated = translate(&source)?;
    RegexBuilder::new(&translated)
        .size_limit(32 << 20)
        .build()
        .map_err(|e| {
            Re2Error::Unsupported(
                e.to_string()
                    .lines()
                    .last()
                    .unwrap_or_default()
                    .trim()
                    .trim_start_matches("error: ")
                    .to_string(),
            )
        })
}

/// What the last piece written was, for RE2's repetition rules.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Last {
    /// Nothing to repeat: the start, after `(` or `|`.
    Nothing,
    /// An atom that may be repeated.
    Atom,
    /// A repetition operator (RE2 rejects a second one, `a**`, `a{2}{3}`).
    Repeat,
    /// `^`, `$`, `\A`, `\z`, `\b`, `\B`: RE2 allows repeating them (`^*`), the `regex` crate
    /// only inside a group. The text is what was written for it.
    Assertion(usize),
}

/// One escape sequence as RE2 reads it.
enum Piece {
    /// A single character.
    Char(char),
    /// A character class: its text outside a class and inside one.
    Class(String, String),
    /// A zero-width assertion.
    Assertion(&'static str),
    /// `\C`, one byte.
    Byte,
}

/// Read `pattern` as RE2 does and write it in the `regex` crate's syntax.
pub(crate) fn translate(pattern: &str) -> Result<String, Re2Error> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut i = 0;
    let mut last = Last::Nothing;
    // RE2 refuses nested counted repetitions whose counts multiply past 1000
    // (`RepetitionWalker` in re2/parse.cc): the largest product inside each open group, and
    // the product of the last atom.
    let mut groups: Vec<u64> = vec![1];
    let mut product: u64 = 1;
    // A flag group (`(?i)`) written right after an atom: RE2 lets a repetition after it apply
    // to the atom (`a(?i)+`), the `regex` crate does not, so the repetition is moved before it.
    let mut flags_after_atom: Option<usize> = None;
    while i < chars.len() {
        let c = chars[i];
        let repetition =
            matches!(c, '*' | '+' | '?') || (c == '{' && counted(&chars, i)?.is_some());
        if !repetition {
            flags_after_atom = None;
        }
        match c {
            '\\' if chars.get(i + 1) == Some(&'Q') => {
                // \Q...\E: everything literal up to \E (or the end).
                i += 2;
                let mut literal = String::new();
                while i < chars.len() {
                    if chars[i] == '\\' && chars.get(i + 1) == Some(&'E') {
                        i += 2;
                        break;
                    }
                    if chars[i] == '\\' && chars.get(i + 1) == Some(&'\\') {
                        literal.push('\\');
                        i += 2;
                        continue;
                    }
                    literal.push(chars[i]);
                    i += 1;
                }
                for ch in literal.chars() {
                    push_literal(&mut out, ch);
                }
                if !literal.is_empty() {
                    // A repetition after \Q..\E applies to its last character, as in RE2.
                    last = Last::Atom;
                    product = 1;
                }
            }
            '\\' => {
                let (piece, used) = escape(&chars, i + 1)?;
                i += 1 + used;
                product = 1;
                match piece {
                    Piece::Char(ch) => {
                        push_literal(&mut out, ch);
                        last = Last::Atom;
                    }
                    Piece::Class(outside, _) => {
                        out.push_str(&outside);
                        last = Last::Atom;
                    }
                    Piece::Assertion(text) => {
                        last = Last::Assertion(out.len());
                        out.push_str(text);
                    }
                    Piece::Byte => {
                        return Err(Re2Error::Unsupported(
                            "\\C matches a single byte, which flotilla's engine cannot".into(),
                        ));
                    }
                }
            }
            '[' => {
                let (piece, used) = class(&chars, i)?;
                i += used;
                out.push_str(&piece);
                last = Last::Atom;
                product = 1;
            }
            '(' => {
                let before = out.len();
                let (used, opens) = group_open(&chars, i, &mut out)?;
                i += used;
                if opens {
                    groups.push(1);
                    last = Last::Nothing;
                } else if matches!(last, Last::Atom | Last::Assertion(_)) {
                    // A flag group repeats nothing and leaves the atom before it repeatable.
                    flags_after_atom = Some(before);
                }
            }
            ')' => {
                if groups.len() == 1 {
                    return Err(Re2Error::Invalid(format!("unexpected ): {pattern}")));
                }
                product = groups.pop().unwrap_or(1);
                out.push(')');
                i += 1;
                last = Last::Atom;
            }
            '|' => {
                out.push('|');
                i += 1;
                last = Last::Nothing;
            }
            '*' | '+' | '?' | '{' => {
                let (text, used, count) = if c == '{' {
                    match counted(&chars, i)? {
                        Some(found) => (found.text, found.used, Some((found.low, found.high))),
                        None => {
                            // Not a repetition: a plain brace, as in RE2.
                            out.push_str("\\{");
                            i += 1;
                            last = Last::Atom;
                            product = 1;
                            continue;
                        }
                    }
                } else {
                    (c.to_string(), 1, None)
                };
                match last {
                    Last::Nothing => {
                        return Err(Re2Error::Invalid(format!(
                            "no argument for repetition operator: {text}"
                        )));
                    }
                    Last::Repeat => {
                        return Err(Re2Error::Invalid(format!(
                            "bad repetition operator: {text}"
                        )));
                    }
                    _ => {}
                }
                let moved_flags = flags_after_atom.take().map(|at| out.split_off(at));
                if let Last::Assertion(at) = last {
                    out.insert_str(at, "(?:");
                    out.push(')');
                }
                if let Some((low, high)) = count {
                    let m = high.unwrap_or(low);
                    if m > 0 {
                        product = product.saturating_mul(m);
                    }
                    if (low >= 2 || high.is_some_and(|h| h >= 2)) && product > u64::from(MAX_REPEAT)
                    {
                        return Err(Re2Error::Invalid(format!(
                            "bad repetition operator: {text}"
                        )));
                    }
                }
                out.push_str(&text);
                i += used;
                if chars.get(i) == Some(&'?') {
                    out.push('?');
                    i += 1;
                }
                if let Some(flags) = moved_flags {
                    out.push_str(&flags);
                }
                last = Last::Repeat;
            }
            '^' | '$' => {
                last = Last::Assertion(out.len());
                out.push(c);
                i += 1;
                product = 1;
            }
            '.' => {
                out.push('.');
                i += 1;
                last = Last::Atom;
                product = 1;
            }
            other => {
                push_literal(&mut out, other);
                i += 1;
                last = Last::Atom;
                product = 1;
            }
        }
        if let Some(top) = groups.last_mut() {
            *top = (*top).max(product);
        }
    }
    if groups.len() > 1 {
        return Err(Re2Error::Invalid(format!("missing ): {pattern}")));
    }
    Ok(out)
}

/// A literal character, escaped when the `regex` crate would read it as syntax.
fn push_literal(out: &mut String, c: char) {
    if c.is_control() {
        out.push_str(&format!("\\x{{{:X}}}", c as u32));
    } else {
        out.push_str(&regex::escape(c.encode_utf8(&mut [0; 4])));
    }
}

/// `{n}`, `{n,}`, `{n,m}` at `start`, as RE2 reads it: the text to write and the characters
/// used, or `None` when the brace is a plain character.
/// A counted repetition as written.
struct Counted {
    /// The text, `{2,3}`.
    text: String,
    /// The characters it takes.
    used: usize,
    /// The lower count.
    low: u64,
    /// The upper count (`None` for `{n,}`).
    high: Option<u64>,
}

fn counted(chars: &[char], start: usize) -> Result<Option<Counted>, Re2Error> {
    let mut i = start + 1;
    let number = |i: &mut usize| -> Option<u64> {
        let begin = *i;
        while *i < chars.len() && chars[*i].is_ascii_digit() {
            *i += 1;
        }
        if *i == begin {
            return None;
        }
        let text: String = chars[begin..*i].iter().collect();
        Some(text.parse().unwrap_or(u64::MAX))
    };
    let Some(low) = number(&mut i) else {
        return Ok(None);
    };
    let mut high = Some(low);
    if chars.get(i) == Some(&',') {
        i += 1;
        high = if chars.get(i) == Some(&'}') {
            None
        } else {
            match number(&mut i) {
                Some(h) => Some(h),
                None => return Ok(None),
            }
        };
    }
    if chars.get(i) != Some(&'}') {
        return Ok(None);
    }
    i += 1;
    let text: String = chars[start..i].iter().collect();
    let limit = u64::from(MAX_REPEAT);
    if low > limit || high.is_some_and(|h| h > limit || h < low) {
        return Err(Re2Error::Invalid(format!(
            "invalid repetition size: {text}"
        )));
    }
    Ok(Some(Counted {
        text,
        used: i - start,
        low,
        high,
    }))
}

/// An opening parenthesis at `start`: writes the group opener (or a whole flag group) and
/// returns the characters used and whether a group was opened (a `(?i)` opens none).
fn group_open(chars: &[char], start: usize, out: &mut String) -> Result<(usize, bool), Re2Error> {
    if chars.get(start + 1) != Some(&'?') {
        out.push('(');
        return Ok((1, true));
    }
    let at = |offset: usize| chars.get(start + offset).copied();
    // Named groups: (?P<name>...) and (?<name>...).
    let name_start = match (at(2), at(3)) {
        (Some('P'), Some('<')) => Some(start + 4),
        (Some('<'), Some(c)) if c != '=' && c != '!' => Some(start + 3),
        _ => None,
    };
    if let Some(begin) = name_start {
        let mut i = begin;
        while i < chars.len() && chars[i] != '>' {
            i += 1;
        }
        let name: String = chars[begin..i.min(chars.len())].iter().collect();
        let valid = i < chars.len()
            && !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            let shown: String = chars[start..(i + 1).min(chars.len())].iter().collect();
            return Err(Re2Error::Invalid(format!(
                "invalid named capture group: {shown}"
            )));
        }
        out.push_str(&format!("(?P<{name}>"));
        return Ok((i + 1 - start, true));
    }
    // Flags: (?flags) or (?flags:...), flags from i, m, s, U with at most one `-`.
    let mut i = start + 2;
    let mut seen_minus = false;
    let mut any = false;
    let mut flags = String::new();
    while let Some(&c) = chars.get(i) {
        match c {
            'i' | 'm' | 's' | 'U' => {
                any = true;
                flags.push(c);
            }
            '-' if !seen_minus => {
                seen_minus = true;
                flags.push(c);
            }
            ':' | ')' => {
                // `(?-)` and `(?i-)` are errors in RE2; `(?)` is an empty flag group.
                if flags.ends_with('-') || (seen_minus && !any) {
                    break;
                }
                if flags.is_empty() {
                    if c == ')' {
                        return Ok((i + 1 - start, false));
                    }
                    out.push_str("(?:");
                    return Ok((i + 1 - start, true));
                }
                out.push_str("(?");
                out.push_str(&flags);
                out.push(c);
                return Ok((i + 1 - start, c == ':'));
            }
            _ => break,
        }
        i += 1;
    }
    let shown: String = chars[start..(i + 1).min(chars.len())].iter().collect();
    Err(Re2Error::Invalid(format!("invalid perl operator: {shown}")))
}

/// The escape whose letter is at `at` (just after the backslash): what it is and the
/// characters used from `at`.
fn escape(chars: &[char], at: usize) -> Result<(Piece, usize), Re2Error> {
    let Some(&c) = chars.get(at) else {
        return Err(Re2Error::Invalid("trailing \\".into()));
    };
    let class = |outside: &str, inside: &str| Ok((Piece::Class(outside.into(), inside.into()), 1));
    let char = |ch: char, used: usize| Ok((Piece::Char(ch), used));
    match c {
        'd' => class("[0-9]", "0-9"),
        'D' => class("[^0-9]", "[^0-9]"),
        'w' => class("[0-9A-Za-z_]", "0-9A-Za-z_"),
        'W' => class("[^0-9A-Za-z_]", "[^0-9A-Za-z_]"),
        's' => class("[\\t\\n\\x0C\\r ]", "\\t\\n\\x0C\\r "),
        'S' => class("[^\\t\\n\\x0C\\r ]", "[^\\t\\n\\x0C\\r ]"),
        'b' => Ok((Piece::Assertion("(?-u:\\b)"), 1)),
        'B' => Ok((Piece::Assertion("(?-u:\\B)"), 1)),
        'A' => Ok((Piece::Assertion("\\A"), 1)),
        'z' => Ok((Piece::Assertion("\\z"), 1)),
        'C' => Ok((Piece::Byte, 1)),
        'p' | 'P' => {
            let (name, used) = match chars.get(at + 1) {
                Some('{') => {
                    let mut i = at + 2;
                    while i < chars.len() && chars[i] != '}' {
                        i += 1;
                    }
                    if i >= chars.len() {
                        return Err(Re2Error::Invalid(format!(
                            "invalid character class range: \\{c}{{"
                        )));
                    }
                    (chars[at + 2..i].iter().collect::<String>(), i + 1 - at)
                }
                Some(&letter) => (letter.to_string(), 2),
                None => {
                    return Err(Re2Error::Invalid(format!(
                        "invalid character class range: \\{c}"
                    )));
                }
            };
            let (negated, bare) = match name.strip_prefix('^') {
                Some(n) => (c == 'p', n.to_string()),
                None => (c == 'P', name.clone()),
            };
            if bare.is_empty()
                || !bare
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
            {
                return Err(Re2Error::Invalid(format!(
                    "invalid character class range: \\{c}{{{name}}}"
                )));
            }
            let letter = if negated { 'P' } else { 'p' };
            let text = format!("\\{letter}{{{bare}}}");
            Ok((Piece::Class(text.clone(), text), used))
        }
        '0'..='7' => {
            // Octal: \0 with up to two more digits, or \1-\7 followed by at least one more
            // (a lone \1 would be a backreference, which RE2 does not have).
            let mut i = at + 1;
            while i < chars.len() && i < at + 3 && ('0'..='7').contains(&chars[i]) {
                i += 1;
            }
            if c != '0' && i == at + 1 {
                return Err(Re2Error::Invalid(format!("invalid escape sequence: \\{c}")));
            }
            let digits: String = chars[at..i].iter().collect();
            let value = u32::from_str_radix(&digits, 8).unwrap_or(0);
            char(char::from_u32(value).unwrap_or('\0'), i - at)
        }
        'x' => {
            let (digits, used) = match chars.get(at + 1) {
                Some('{') => {
                    let mut i = at + 2;
                    while i < chars.len() && chars[i] != '}' {
                        i += 1;
                    }
                    if i >= chars.len() {
                        return Err(Re2Error::Invalid("invalid escape sequence: \\x{".into()));
                    }
                    (chars[at + 2..i].iter().collect::<String>(), i + 1 - at)
                }
                _ => (
                    chars[at + 1..chars.len().min(at + 3)]
                        .iter()
                        .collect::<String>(),
                    3,
                ),
            };
            let value = (digits.len() >= 2 || used > 3)
                .then_some(())
                .filter(|()| !digits.is_empty() && digits.chars().all(|d| d.is_ascii_hexdigit()))
                .and_then(|()| u32::from_str_radix(&digits, 16).ok())
                .and_then(char::from_u32);
            match value {
                Some(ch) => char(ch, used),
                None => Err(Re2Error::Invalid(format!(
                    "invalid escape sequence: \\x{digits}"
                ))),
            }
        }
        'a' => char('\x07', 1),
        'f' => char('\x0C', 1),
        't' => char('\t', 1),
        'n' => char('\n', 1),
        'r' => char('\r', 1),
        'v' => char('\x0B', 1),
        // RE2 reserves letters and digits; any other ASCII character escapes to itself.
        other if other.is_ascii() && !other.is_ascii_alphanumeric() => char(other, 1),
        other => Err(Re2Error::Invalid(format!(
            "invalid escape sequence: \\{other}"
        ))),
    }
}

/// The POSIX class names RE2 knows (`[:alpha:]`).
const POSIX: &[&str] = &[
    "alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct",
    "space", "upper", "word", "xdigit",
];

/// A character class starting at `start` (`[`): the text to write and the characters used.
/// Every single character is written as `\x{HEX}`, so nothing in it is syntax to the `regex`
/// crate (`[`, `&&`, `--`, `~~`).
fn class(chars: &[char], start: usize) -> Result<(String, usize), Re2Error> {
    let mut i = start + 1;
    let mut out = String::from("[");
    if chars.get(i) == Some(&'^') {
        out.push('^');
        i += 1;
    }
    let hex = |c: char| format!("\\x{{{:X}}}", c as u32);
    let mut first = true;
    loop {
        let Some(&c) = chars.get(i) else {
            return Err(Re2Error::Invalid(format!(
                "missing ]: {}",
                chars[start..].iter().collect::<String>()
            )));
        };
        if c == ']' && !first {
            i += 1;
            break;
        }
        first = false;
        // [:name:] and [:^name:]
        if c == '[' && chars.get(i + 1) == Some(&':') {
            let rest: String = chars[i + 2..].iter().collect();
            if let Some(end) = rest.find(":]") {
                let name = &rest[..end];
                let bare = name.strip_prefix('^').unwrap_or(name);
                if !POSIX.contains(&bare) {
                    return Err(Re2Error::Invalid(format!(
                        "invalid character class range: [:{name}:]"
                    )));
                }
                out.push_str(&format!("[:{name}:]"));
                i += name.chars().count() + 4;
                continue;
            }
        }
        let (low, used) = class_item(chars, i)?;
        i += used;
        let low = match low {
            Piece::Char(ch) => ch,
            Piece::Class(_, inside) => {
                out.push_str(&inside);
                continue;
            }
            Piece::Byte | Piece::Assertion(_) => {
                return Err(Re2Error::Invalid(format!(
                    "invalid escape sequence: {}",
                    chars[i - used..i].iter().collect::<String>()
                )));
            }
        };
        if chars.get(i) == Some(&'-') && chars.get(i + 1).is_some_and(|&n| n != ']') {
            let (high, high_used) = class_item(chars, i + 1)?;
            let Piece::Char(high) = high else {
                return Err(Re2Error::Invalid("invalid character class range".into()));
            };
            if high < low {
                return Err(Re2Error::Invalid(format!(
                    "invalid character class range: {}-{}",
                    low, high
                )));
            }
            i += 1 + high_used;
            out.push_str(&format!("{}-{}", hex(low), hex(high)));
        } else {
            out.push_str(&hex(low));
        }
    }
    out.push(']');
    Ok((out, i - start))
}

/// One item of a class at `at`: a character or an escape, and the characters used.
fn class_item(chars: &[char], at: usize) -> Result<(Piece, usize), Re2Error> {
    if chars[at] != '\\' {
        return Ok((Piece::Char(chars[at]), 1));
    }
    let (piece, used) = escape(chars, at + 1)?;
    Ok((piece, used + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, text: &str) -> bool {
        compile(pattern, "")
            .unwrap_or_else(|e| panic!("{pattern}: {e}"))
            .is_match(text)
    }

    #[test]
    fn re2_classes_are_ascii() {
        assert!(matches(r"^\d+$", "123"));
        assert!(!matches(r"^\d$", "٣"), "\\d is ASCII in RE2");
        assert!(!matches(r"^\w$", "é"), "\\w is ASCII in RE2");
        assert!(matches(r"^[\d.]+$", "1.2.3"));
        assert!(matches(r"^\S+\s\S+$", "a b"));
    }

    #[test]
    fn re2_literals_that_rust_reads_as_syntax() {
        assert!(
            matches(r"^[a&&b]$", "&"),
            "&& is not an intersection in RE2"
        );
        assert!(matches(r"^[[]$", "["), "[ inside a class is a character");
        assert!(matches(r"^\<x\>$", "<x>"), "\\< is a plain <");
        assert!(
            matches(r"^a{,3}$", "a{,3}"),
            "{{,3}} is not a repetition in RE2"
        );
        assert!(matches(r"^\Qa.b\E$", "a.b"));
        assert!(!matches(r"^\Qa.b\E$", "axb"));
        assert!(matches(r"^\101$", "A"), "octal");
        assert!(matches(r"^a # b$", "a # b"));
        assert!(matches(r"^[]a]+$", "]a"));
    }

    #[test]
    fn what_re2_rejects_is_rejected() {
        for bad in [
            r"\Z", r"(?x)a", r"a**", r"a{2}{3}", r"a{1001}", r"\8", r"\1", r"(?=a)", r"(?!a)",
            r"(?<=a)", r"a++", r"*a", r"(a", r"a)", r"[a", r"[z-a]", r"\e", r"(?P=n)",
        ] {
            assert!(
                matches!(compile(bad, ""), Err(Re2Error::Invalid(_))),
                "{bad} should be invalid RE2, got {:?}",
                compile(bad, "").map(|r| r.as_str().to_string())
            );
        }
    }

    /// The differential check against RE2 itself: `tests/re2/expected.json` holds what Google's
    /// RE2 (the library the `re2` gem wraps) said about each pattern of `tests/re2/cases.json`
    /// and 2,000 seeded random ones (`scripts/re2-expectations.py`). flotilla must reject what
    /// RE2 rejects, accept what it accepts, and match the same texts. A pattern flotilla cannot
    /// run (Unsupported) is allowed only for `\C` (one byte).
    #[test]
    fn agrees_with_re2() {
        let text = include_str!("../tests/re2/expected.json");
        let document: serde_json::Value = serde_json::from_str(text).unwrap();
        let default_texts: Vec<&str> = document["texts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        let cases = document["cases"].as_array().unwrap();
        assert!(cases.len() > 2000);
        let mut disagreements = Vec::new();
        for case in cases {
            let pattern = case["pattern"].as_str().unwrap();
            let flags = case["flags"].as_str().unwrap();
            let valid = case["valid"].as_bool().unwrap();
            let ours = compile(pattern, flags);
            match (&ours, valid) {
                (Err(Re2Error::Unsupported(_)), true) if pattern.contains("\\C") => {}
                (Err(e), true) => {
                    disagreements.push(format!("{pattern:?} /{flags}: RE2 accepts, flotilla: {e}"));
                }
                (Ok(r), false) => disagreements.push(format!(
                    "{pattern:?} /{flags}: RE2 rejects ({}), flotilla accepts as {:?}",
                    case["error"],
                    r.as_str()
                )),
                (Err(_), false) => {}
                (Ok(regex), true) => {
                    let texts: Vec<&str> = match case.get("texts") {
                        Some(t) => t
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|t| t.as_str().unwrap())
                            .collect(),
                        None => default_texts.clone(),
                    };
                    let expected = case["matches"].as_str().unwrap().as_bytes();
                    for (text, want) in texts.iter().zip(expected) {
                        if regex.is_match(text) != (*want == b'1') {
                            disagreements.push(format!(
                                "{pattern:?} /{flags} on {text:?}: RE2 {}, flotilla {} (as {:?})",
                                *want == b'1',
                                regex.is_match(text),
                                regex.as_str()
                            ));
                        }
                    }
                }
            }
        }
        assert!(
            disagreements.is_empty(),
            "{} disagreements with RE2:\n{}",
            disagreements.len(),
            disagreements.join("\n")
        );
    }

    #[test]
    fn flags_are_prepended() {
        assert!(compile("^MAIN$", "i").unwrap().is_match("main"));
        assert!(compile("^b$", "m").unwrap().is_match("a\nb"));
        assert!(compile("a.b", "s").unwrap().is_match("a\nb"));
        assert!(
            compile(r"\Arelease/\d+\z", "")
                .unwrap()
                .is_match("release/12")
        );
    }
}
