//! Plain scalars resolved to types exactly as GitLab's YAML loader resolves them.
//!
//! GitLab loads `.gitlab-ci.yml` with `YAML.safe_load(content, permitted_classes: [Symbol,
//! Reference], permitted_symbols: [], aliases: true)` (gitlabhq `lib/gitlab/config/loader/
//! yaml.rb`). Psych turns each plain scalar into a Ruby object with
//! `Psych::ScalarScanner#tokenize` (ruby/psych `lib/psych/scalar_scanner.rb`, legacy integers
//! since `strict_integer` is off). That function is ported here rule by rule, in its order,
//! including what surprises people:
//! - `null`, `true`, `yes`, `on`, `false`, `no`, `off` in any letter case (`tRuE` is true);
//!   `y` and `n` stay strings;
//! - integers may hold commas and underscores (`1,000` is 1000), a leading `0` is octal,
//!   `0x`/`0b` hex and binary;
//! - base 60 weighs the first part by 60² whatever the count (`1:30` is 5400, as is
//!   `1:30:00`);
//! - a date (`2024-01-01`) or time is refused: `Date` and `Time` are not among the classes
//!   GitLab permits, so GitLab rejects the file with "Tried to load unspecified class: Date";
//! - `:name` is a Ruby symbol, which GitLab's validators reject where a string is expected.

use super::yaml::Value;

/// What a plain scalar becomes, or why GitLab refuses it.
pub(crate) type Resolved = Result<Value, Refused>;

/// A scalar GitLab's loader refuses, with Ruby's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refused(pub String);

impl Refused {
    fn class(name: &str) -> Self {
        Refused(format!("Tried to load unspecified class: {name}"))
    }
}

/// Resolve a plain (unquoted, untagged) scalar as Psych does.
pub(crate) fn resolve_plain(text: &str) -> Resolved {
    if text.is_empty() {
        return Ok(Value::Null);
    }
    if looks_like_a_word(text) || text.contains('\n') {
        return Ok(word(text));
    }
    if is_time(text) {
        return Err(Refused::class("Time"));
    }
    if is_date(text) {
        return Err(Refused::class("Date"));
    }
    let lower = text.to_ascii_lowercase();
    match lower.as_str() {
        ".inf" | "+.inf" => return Ok(Value::Float(f64::INFINITY)),
        "-.inf" => return Ok(Value::Float(f64::NEG_INFINITY)),
        ".nan" => return Ok(Value::Float(f64::NAN)),
        _ => {}
    }
    if let Some(name) = text.strip_prefix(':').filter(|rest| !rest.is_empty()) {
        return Ok(Value::Symbol(symbol_name(name)));
    }
    if let Some(value) = sexagesimal(text) {
        return Ok(value);
    }
    if let Some(value) = float(text) {
        return value.map(Value::Float);
    }
    if let Some(value) = integer(text) {
        return value;
    }
    Ok(Value::Str(text.to_string()))
}

/// `%r{^[^\d.:-]?[[:alpha:]_\s!@#$%\^&*(){}<>|/\\~;=]+}`: text that starts like a word.
fn looks_like_a_word(text: &str) -> bool {
    let in_class = |c: char| {
        c.is_alphabetic()
            || c == '_'
            || matches!(c, ' ' | '\t' | '\r' | '\n' | '\x0b' | '\x0c')
            || "!@#$%^&*(){}<>|/\\~;=".contains(c)
    };
    let mut chars = text.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    if in_class(first) {
        return true;
    }
    // The optional first character: anything but a digit, `.`, `:` or `-`, then one of the
    // class.
    !first.is_ascii_digit()
        && !matches!(first, '.' | ':' | '-')
        && chars.next().is_some_and(in_class)
}

/// The word branch: short words may be null or booleans, the rest are strings.
fn word(text: &str) -> Value {
    if text.chars().count() > 5 {
        return Value::Str(text.to_string());
    }
    let lower = text.to_lowercase();
    match lower.as_str() {
        "~" | "null" => Value::Null,
        "yes" | "true" | "on" => Value::Bool(true),
        "no" | "false" | "off" => Value::Bool(false),
        _ => Value::Str(text.to_string()),
    }
}

/// A run of ASCII digits of length in `range` at the start of `s`; the rest.
fn digits(s: &str, min: usize, max: usize) -> Option<&str> {
    let n = s.bytes().take_while(u8::is_ascii_digit).count();
    (n >= min && n <= max).then(|| &s[n..])
}

/// `/^-?\d{4}-\d{1,2}-\d{1,2}(?:[Tt]|\s+)\d{1,2}:\d\d:\d\d(?:\.\d*)?(?:\s*(?:Z|[-+]\d{1,2}:?(?:\d\d)?))?$/`
fn is_time(text: &str) -> bool {
    let is_space = |c: char| matches!(c, ' ' | '\t' | '\r' | '\n' | '\x0b' | '\x0c');
    let check = || -> Option<()> {
        let s = text.strip_prefix('-').unwrap_or(text);
        let s = digits(s, 4, 4)?.strip_prefix('-')?;
        let s = digits(s, 1, 2)?.strip_prefix('-')?;
        let s = digits(s, 1, 2)?;
        let s = match s.strip_prefix(['T', 't']) {
            Some(rest) => rest,
            None => {
                let rest = s.trim_start_matches(is_space);
                (rest.len() < s.len()).then_some(rest)?
            }
        };
        let s = digits(s, 1, 2)?.strip_prefix(':')?;
        let s = digits(s, 2, 2)?.strip_prefix(':')?;
        let mut s = digits(s, 2, 2)?;
        if let Some(rest) = s.strip_prefix('.') {
            s = rest.trim_start_matches(|c: char| c.is_ascii_digit());
        }
        if s.is_empty() {
            return Some(());
        }
        let s = s.trim_start_matches(is_space);
        if s == "Z" {
            return Some(());
        }
        // `[-+]\d{1,2}:?(?:\d\d)?`: `5`, `05`, `5:`, `05:30`, `530`, `0530`.
        let zone = s.strip_prefix(['-', '+'])?;
        let all_digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
        let fits = match zone.split_once(':') {
            Some((hours, minutes)) => {
                (1..=2).contains(&hours.len())
                    && all_digits(hours)
                    && (minutes.is_empty() || (minutes.len() == 2 && all_digits(minutes)))
            }
            None => (1..=4).contains(&zone.len()) && all_digits(zone),
        };
        fits.then_some(())
    };
    check().is_some()
}

/// `/^\d{4}-(?:1[012]|0\d|\d)-(?:[12]\d|3[01]|0\d|\d)$/`
fn is_date(text: &str) -> bool {
    let check = || -> Option<()> {
        let s = digits(text, 4, 4)?.strip_prefix('-')?;
        let (month, s) = s.split_once('-')?;
        let month_ok = matches!(
            month.as_bytes(),
            [b'1', b'0'..=b'2'] | [b'0', b'0'..=b'9'] | [b'0'..=b'9']
        );
        let day_ok = matches!(
            s.as_bytes(),
            [b'1' | b'2' | b'0', b'0'..=b'9'] | [b'3', b'0' | b'1'] | [b'0'..=b'9']
        );
        (month_ok && day_ok).then_some(())
    };
    check().is_some()
}

/// `:"name"` and `:'name'` name the symbol inside the quotes.
fn symbol_name(rest: &str) -> String {
    for quote in ['"', '\''] {
        if let Some((inner, end)) = rest
            .strip_prefix(quote)
            .and_then(|inner| inner.rfind(quote).map(|end| (inner, end)))
        {
            let name = &inner[..end];
            return name.strip_prefix(':').unwrap_or(name).to_string();
        }
    }
    rest.to_string()
}

/// Ruby's `String#to_i` on a part of a base-60 number: its leading digits, an underscore
/// allowed only between two digits (`"1__0".to_i` is 1).
fn part_value(part: &str) -> f64 {
    let bytes = part.as_bytes();
    let mut value = 0.0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b @ b'0'..=b'9' => value = value * 10.0 + f64::from(b - b'0'),
            b'_' if i > 0
                && bytes[i - 1].is_ascii_digit()
                && bytes.get(i + 1).is_some_and(u8::is_ascii_digit) => {}
            _ => break,
        }
        i += 1;
    }
    value
}

/// `/^[-+]?[0-9][0-9_]*(:[0-5]?[0-9]){1,2}$/` (an integer) and the same with `\.[0-9_]*` after
/// it (a float), each part weighed `60 ** (index - 2).abs` as Psych does.
fn sexagesimal(text: &str) -> Option<Value> {
    let (sign, body) = match text.as_bytes().first()? {
        b'-' => (-1.0, &text[1..]),
        b'+' => (1.0, &text[1..]),
        _ => (1.0, text),
    };
    let (whole, fraction) = match body.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (body, None),
    };
    let parts: Vec<&str> = whole.split(':').collect();
    if !(2..=3).contains(&parts.len()) {
        return None;
    }
    let first = parts[0];
    if !first.starts_with(|c: char| c.is_ascii_digit())
        || !first.chars().all(|c| c.is_ascii_digit() || c == '_')
    {
        return None;
    }
    for part in &parts[1..] {
        if !matches!(part.as_bytes(), [b'0'..=b'5', b'0'..=b'9'] | [b'0'..=b'9']) {
            return None;
        }
    }
    if fraction.is_some_and(|f| !f.chars().all(|c| c.is_ascii_digit() || c == '_')) {
        return None;
    }
    // Ruby splits the whole text, sign and fraction included, on ':'.
    let mut pieces: Vec<String> = parts.iter().map(|p| (*p).to_string()).collect();
    if let Some(f) = fraction {
        let last = pieces.len() - 1;
        pieces[last] = format!("{}.{f}", pieces[last]);
    }
    let weight = |e: usize| 60f64.powi(i32::try_from(e.abs_diff(2)).unwrap_or(0));
    if fraction.is_some() {
        let mut total = 0.0;
        for (e, piece) in pieces.iter().enumerate() {
            let value: f64 = piece.replace('_', "").parse().unwrap_or(0.0);
            let value = if e == 0 { sign * value } else { value };
            total += value * weight(e);
        }
        return Some(Value::Float(total));
    }
    let mut total: i64 = 0;
    for (e, piece) in pieces.iter().enumerate() {
        let value = part_value(piece) as i64;
        let value = if e == 0 && sign < 0.0 { -value } else { value };
        let weighed = value.checked_mul(weight(e) as i64)?;
        total = total.checked_add(weighed)?;
    }
    Some(Value::Int(total))
}

/// `FLOAT = /^(?:[-+]?([0-9][0-9_,]*)?\.[0-9]*([eE][-+][0-9]+)?)$/`, then
/// `Float(text.delete(',_').gsub(/\.([Ee]|$)/, '\1'))`; a lone `.` (signed or not) stays text.
fn float(text: &str) -> Option<Result<f64, Refused>> {
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let (whole, fraction) = mantissa.split_once('.')?;
    if !whole.is_empty()
        && (!whole.starts_with(|c: char| c.is_ascii_digit())
            || !whole
                .chars()
                .all(|c| c.is_ascii_digit() || c == '_' || c == ','))
    {
        return None;
    }
    if !fraction.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if let Some(exp) = exponent {
        let digits = exp.strip_prefix(['-', '+'])?;
        if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
    }
    if whole.is_empty() && fraction.is_empty() && exponent.is_none() {
        return None; // `.`, `+.`, `-.`: strings
    }
    let cleaned: String = text.chars().filter(|c| *c != ',' && *c != '_').collect();
    let cleaned = cleaned.replace(".e", "e").replace(".E", "E");
    let cleaned = cleaned.strip_suffix('.').unwrap_or(&cleaned);
    // `.e+1`: the pattern matched, and Ruby's Float() refuses what is left (`e+1`), which
    // GitLab reports.
    Some(
        cleaned
            .parse()
            .map_err(|_| Refused(format!("invalid value for Float(): \"{cleaned}\""))),
    )
}

/// `INTEGER_LEGACY`, then `Integer(text.delete(',_'))`: `0x`, `0b`, a leading `0` for
/// octal. A number too big for 64 bits (a Ruby bignum) stays its text.
fn integer(text: &str) -> Option<Resolved> {
    let (negative, body) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let (radix, digits) = if let Some(hex) = body.strip_prefix("0x") {
        if hex.is_empty()
            || !hex
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == '_' || c == ',')
        {
            return None;
        }
        (16, hex)
    } else if let Some(bin) = body.strip_prefix("0b") {
        if bin.is_empty() || !bin.chars().all(|c| matches!(c, '0' | '1' | '_' | ',')) {
            return None;
        }
        (2, bin)
    } else if body.len() > 1 && body.starts_with('0') {
        if !body[1..]
            .chars()
            .all(|c| matches!(c, '0'..='7' | '_' | ','))
        {
            return None;
        }
        (8, &body[1..])
    } else {
        // `0|[1-9](?:[0-9]|,[0-9]|_[0-9])*`
        let bytes = body.as_bytes();
        let ok = match bytes {
            [b'0'] => true,
            [b'1'..=b'9', rest @ ..] => {
                let mut i = 0;
                let mut fine = true;
                while i < rest.len() {
                    match rest[i] {
                        b'0'..=b'9' => i += 1,
                        b',' | b'_' if rest.get(i + 1).is_some_and(u8::is_ascii_digit) => i += 2,
                        _ => {
                            fine = false;
                            break;
                        }
                    }
                }
                fine
            }
            _ => false,
        };
        if !ok {
            return None;
        }
        (10, body)
    };
    let cleaned: String = digits.chars().filter(|c| *c != ',' && *c != '_').collect();
    if cleaned.is_empty() {
        if radix == 8 {
            return Some(Ok(Value::Int(0))); // `0_`, `00`: Integer("0")
        }
        return Some(Err(Refused(format!(
            "invalid value for Integer(): \"{}\"",
            text.replace([',', '_'], "")
        ))));
    }
    let Ok(value) = i64::from_str_radix(&cleaned, radix) else {
        return Some(Ok(Value::Str(text.to_string())));
    };
    Some(Ok(Value::Int(if negative { -value } else { value })))
}

/// What a scalar with an explicit tag becomes (Psych's `deserialize`): `!!str` and `!str` keep
/// the text, `!!float` is `Float()` of the resolved text, any other tag resolves the text as if
/// plain.
pub(crate) fn resolve_tagged(tag: &str, text: &str) -> Resolved {
    match tag {
        "tag:yaml.org,2002:str" | "!str" => Ok(Value::Str(text.to_string())),
        "tag:yaml.org,2002:float" | "!float" => match resolve_plain(text)? {
            Value::Int(i) => Ok(Value::Float(i as f64)),
            Value::Float(f) => Ok(Value::Float(f)),
            Value::Str(s) => ruby_float(&s)
                .map(Value::Float)
                .ok_or_else(|| Refused(format!("invalid value for Float(): \"{s}\""))),
            other => Err(Refused(format!(
                "can't convert {} into Float",
                match other {
                    Value::Null => "nil",
                    Value::Bool(true) => "true",
                    Value::Bool(false) => "false",
                    _ => "the value",
                }
            ))),
        },
        _ => resolve_plain(text),
    }
}

/// Ruby's `Float(string)` for what `tokenize` left as text (`1e3`, `1_000.5e3`).
fn ruby_float(text: &str) -> Option<f64> {
    let t = text.trim();
    if t.starts_with('_') || t.ends_with('_') || t.contains("__") {
        return None;
    }
    let cleaned = t.replace('_', "");
    if cleaned.is_empty()
        || !cleaned
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
    {
        return None;
    }
    cleaned.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(text: &str) -> Value {
        resolve_plain(text).unwrap()
    }

    #[test]
    fn words_in_any_case_and_only_short_ones() {
        assert_eq!(plain("yes"), Value::Bool(true));
        assert_eq!(plain("tRuE"), Value::Bool(true));
        assert_eq!(plain("OFF"), Value::Bool(false));
        assert_eq!(plain("nUlL"), Value::Null);
        assert_eq!(plain("~"), Value::Null);
        assert_eq!(plain("y"), Value::Str("y".into()));
        assert_eq!(plain("n"), Value::Str("n".into()));
        assert_eq!(plain("falsey"), Value::Str("falsey".into()));
    }

    #[test]
    fn numbers_as_psych_reads_them() {
        assert_eq!(plain("0755"), Value::Int(493));
        assert_eq!(plain("0x1f"), Value::Int(31));
        assert_eq!(plain("0b101"), Value::Int(5));
        assert_eq!(plain("1_000"), Value::Int(1000));
        assert_eq!(plain("1,000"), Value::Int(1000));
        assert_eq!(plain("08"), Value::Str("08".into()));
        assert_eq!(plain("1__0"), Value::Str("1__0".into()));
        assert_eq!(plain("1:30"), Value::Int(5400));
        assert_eq!(plain("1:30:00"), Value::Int(5400));
        assert_eq!(plain("-1:30"), Value::Int(-1800));
        assert_eq!(plain("1:30.5"), Value::Float(3600.0 + 30.5 * 60.0));
        assert_eq!(plain("1.10"), Value::Float(1.1));
        assert_eq!(plain("1."), Value::Float(1.0));
        assert_eq!(plain(".5"), Value::Float(0.5));
        assert_eq!(plain("1.e+3"), Value::Float(1000.0));
        assert_eq!(plain("1,0.5"), Value::Float(10.5));
        assert_eq!(plain("1.5e+3"), Value::Float(1500.0));
        assert_eq!(plain("1e3"), Value::Str("1e3".into()));
        assert_eq!(plain("."), Value::Str(".".into()));
        assert_eq!(plain("v1.2"), Value::Str("v1.2".into()));
        assert_eq!(plain("1.2.3"), Value::Str("1.2.3".into()));
        assert_eq!(
            plain("1__0:30"),
            Value::Int(5400),
            "Ruby's \"1__0\".to_i is 1"
        );
        assert_eq!(
            resolve_plain(".e+1").unwrap_err().0,
            "invalid value for Float(): \"e+1\""
        );
        assert_eq!(plain(".InF"), Value::Float(f64::INFINITY));
        assert!(
            resolve_plain("0x_")
                .unwrap_err()
                .0
                .contains("invalid value for Integer()")
        );
    }

    #[test]
    fn dates_and_times_are_refused_and_symbols_kept() {
        assert_eq!(
            resolve_plain("2024-01-01").unwrap_err().0,
            "Tried to load unspecified class: Date"
        );
        assert_eq!(
            resolve_plain("2001-12-14 21:59:43.10 -5").unwrap_err().0,
            "Tried to load unspecified class: Time"
        );
        assert_eq!(plain("2024-13-01"), Value::Str("2024-13-01".into()));
        assert_eq!(plain(":manual"), Value::Symbol("manual".into()));
        assert_eq!(plain(":'a b'"), Value::Symbol("a b".into()));
        assert_eq!(plain(":"), Value::Str(":".into()));
    }

    #[test]
    fn tags_as_psych_deserializes_them() {
        assert_eq!(
            resolve_tagged("tag:yaml.org,2002:str", "0755"),
            Ok(Value::Str("0755".into()))
        );
        assert_eq!(
            resolve_tagged("tag:yaml.org,2002:float", "1"),
            Ok(Value::Float(1.0))
        );
        assert_eq!(
            resolve_tagged("tag:yaml.org,2002:null", "x"),
            Ok(Value::Str("x".into()))
        );
        assert!(resolve_tagged("tag:yaml.org,2002:float", "abc").is_err());
    }
}
