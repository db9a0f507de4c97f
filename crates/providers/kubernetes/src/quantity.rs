//! Kubernetes resource quantities (`500m`, `2`, `1Gi`, `512M`, `1e3`), parsed, compared and
//! written in canonical form (pure).
//!
//! `k8s-openapi` keeps a `Quantity` as a string, so comparing two of them (a job's request
//! against the runner's maximum) needs this. It follows apimachinery's
//! `staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go`:
//! - the grammar (the comment on `Quantity`): an optionally signed decimal number (`1`, `1.5`,
//!   `.5`, `5.`) and a suffix, one of the binary `Ki Mi Gi Ti Pi Ei`, the decimal
//!   `n u m "" k M G T P E` (`suffix.go` adds `n` and `u` to the grammar's list), or an
//!   exponent `e<int>`/`E<int>`;
//! - `ParseQuantity`: precision finer than a nano is rounded up (away from zero), so `0.1n`
//!   is `1n`; the value is exact otherwise (fixed point, never a float); a binary quantity
//!   below one is treated as decimal;
//! - `CanonicalizeBytes`: the suffix kind the text was written with is kept; a binary value
//!   below 1024 or with a fraction is written as decimal; the mantissa is an integer with
//!   the largest suffix that loses nothing (`1.5` is `1500m`, `1.5Gi` is `1536Mi`,
//!   `1024Mi` is `1Gi`).
//!
//! Judged by apimachinery itself: `tests/quantity_kubectl.rs` has kubectl write the canonical
//! form of each of 54 quantities and compares. apimachinery's `ParseQuantity` keeps the text
//! as given when its fast path finds it canonical enough (`+5`, `5.`, `00012`, `1E3`,
//! `1.500` are written back unchanged); here the value's canonical form is written instead,
//! so that equal shapes get one annotation and one hash.
//!
//! Unlike apimachinery, a value beyond 2^63-1 units is refused rather than capped, and text
//! without a digit (`.`, `Mi`), which its scanner reads as zero, is refused too: no resource
//! request looks like that, so either is a mistake worth a message.

use std::cmp::Ordering;
use std::fmt;

/// Nanos per unit: quantities are held as a count of nano-units.
const NANO: i128 = 1_000_000_000;
/// The largest magnitude a quantity may have, in units (apimachinery's `maxAllowed`).
const MAX_UNITS: i128 = i64::MAX as i128;

/// How a quantity was written, which its canonical form keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Powers of two: `Ki`, `Mi`, ...
    BinarySi,
    /// Powers of ten by suffix: `m`, `k`, `M`, ... (and none).
    DecimalSi,
    /// Powers of ten by exponent: `1e3`.
    DecimalExponent,
}

/// A quantity that did not parse, with apimachinery's reasons.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Not `<signedNumber><suffix>` (apimachinery's `ErrFormatWrong`).
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Format,
    /// The number part is not a number (`ErrNumeric`).
    #[error("unable to parse numeric part of quantity")]
    Numeric,
    /// The suffix is none of the known ones (`ErrSuffix`).
    #[error("unable to parse quantity's suffix")]
    Suffix,
    /// Larger than 2^63-1 units.
    #[error("quantity is larger than 2^63-1")]
    TooLarge,
}

/// A Kubernetes quantity: an exact value (to a nano) and the format it is written in.
#[derive(Debug, Clone, Copy)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

impl PartialEq for Quantity {
    /// Equal values are equal quantities, however written (`1Gi` and `1024Mi`), as
    /// apimachinery's `Cmp` sees them.
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

/// The decimal suffixes and their powers of ten (`suffix.go`, `newSuffixer`).
const DECIMAL_SUFFIXES: [(&str, i32); 10] = [
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("", 0),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];
/// The binary suffixes and their powers of two.
const BINARY_SUFFIXES: [(&str, u32); 6] = [
    ("Ki", 10),
    ("Mi", 20),
    ("Gi", 30),
    ("Ti", 40),
    ("Pi", 50),
    ("Ei", 60),
];

impl Quantity {
    /// Parses `text` as apimachinery's `ParseQuantity` does (no surrounding spaces).
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        if text.is_empty() {
            return Err(QuantityError::Format);
        }
        let (negative, rest) = match text.as_bytes()[0] {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let int_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (int_digits, rest) = rest.split_at(int_end);
        let (frac_digits, suffix) = match rest.strip_prefix('.') {
            Some(after) => {
                let end = after
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(after.len());
                after.split_at(end)
            }
            None => ("", rest),
        };
        if int_digits.is_empty() && frac_digits.is_empty() {
            // `.`, `-`, `Mi`: no digits at all (apimachinery's scanner reads these as zero;
            // here they are the mistakes they look like).
            return Err(QuantityError::Format);
        }
        if !suffix_shape_ok(suffix) {
            return Err(QuantityError::Format);
        }
        let (format, exp10, exp2) = interpret_suffix(suffix)?;

        // The digits as one integer, the decimal point moved into the exponent.
        // Trailing zeros of the fraction change nothing but the digit count.
        let frac_digits = frac_digits.trim_end_matches('0');
        let digits = format!("{int_digits}{frac_digits}");
        let digits = digits.trim_start_matches('0');
        let mantissa: i128 = if digits.is_empty() {
            0
        } else if digits.len() > 36 {
            return Err(QuantityError::TooLarge);
        } else {
            digits.parse().map_err(|_| QuantityError::Numeric)?
        };
        let frac_len = i32::try_from(frac_digits.len()).map_err(|_| QuantityError::TooLarge)?;
        let scale = exp10
            .checked_sub(frac_len)
            .and_then(|s| s.checked_add(9))
            .ok_or(QuantityError::TooLarge)?;
        let mut nanos = mantissa;
        if exp2 > 0 {
            nanos = nanos
                .checked_mul(1i128 << exp2)
                .ok_or(QuantityError::TooLarge)?;
        }
        if nanos == 0 {
            // Zero, with any exponent.
        } else if scale >= 0 {
            let factor = pow10(scale).ok_or(QuantityError::TooLarge)?;
            nanos = nanos.checked_mul(factor).ok_or(QuantityError::TooLarge)?;
        } else {
            // Finer than a nano: rounded up, so asking for a little never gets nothing.
            nanos = match pow10(-scale) {
                Some(divisor) => nanos.div_euclid(divisor) + i128::from(nanos % divisor != 0),
                None => 1,
            };
        }
        if nanos > MAX_UNITS * NANO {
            return Err(QuantityError::TooLarge);
        }
        let format = if format == Format::BinarySi && nanos < NANO {
            Format::DecimalSi
        } else {
            format
        };
        Ok(Quantity {
            nanos: if negative { -nanos } else { nanos },
            format,
        })
    }

    /// The format its canonical form uses.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Whether it is below zero.
    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// The value in thousandths, rounded up (a CPU quantity in millicores).
    pub fn millis_ceil(&self) -> i128 {
        self.nanos.div_euclid(1_000_000) + i128::from(self.nanos % 1_000_000 != 0)
    }

    /// The value in whole units, rounded up (a memory quantity in bytes).
    pub fn units_ceil(&self) -> i128 {
        self.nanos.div_euclid(NANO) + i128::from(self.nanos % NANO != 0)
    }
}

/// `10^n`, when it fits.
fn pow10(n: i32) -> Option<i128> {
    10i128.checked_pow(u32::try_from(n).ok()?)
}

/// What `parseQuantityString` lets through as a suffix: letters of `eEinumkKMGTP`, then an
/// optional sign and digits.
fn suffix_shape_ok(suffix: &str) -> bool {
    let letters_end = suffix
        .find(|c: char| !"eEinumkKMGTP".contains(c))
        .unwrap_or(suffix.len());
    let rest = &suffix[letters_end..];
    let rest = rest
        .strip_prefix('-')
        .or_else(|| rest.strip_prefix('+'))
        .unwrap_or(rest);
    rest.chars().all(|c| c.is_ascii_digit())
}

/// The suffix as a format, a power of ten and a power of two (`suffix.go`, `interpret`).
fn interpret_suffix(suffix: &str) -> Result<(Format, i32, u32), QuantityError> {
    if let Some((_, e)) = DECIMAL_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
        return Ok((Format::DecimalSi, *e, 0));
    }
    if let Some((_, e)) = BINARY_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
        return Ok((Format::BinarySi, 0, *e));
    }
    if suffix.len() > 1 && (suffix.starts_with('e') || suffix.starts_with('E')) {
        let exponent: i32 = suffix[1..].parse().map_err(|_| QuantityError::Suffix)?;
        return Ok((Format::DecimalExponent, exponent, 0));
    }
    Err(QuantityError::Suffix)
}

impl fmt::Display for Quantity {
    /// The canonical form (`CanonicalizeBytes`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0");
        }
        let sign = if self.nanos < 0 { "-" } else { "" };
        let magnitude = self.nanos.abs();
        if self.format == Format::BinarySi && magnitude >= 1024 * NANO && magnitude % NANO == 0 {
            let mut units = magnitude / NANO;
            let mut suffix = "";
            for (s, _) in BINARY_SUFFIXES {
                if units % 1024 != 0 {
                    break;
                }
                units /= 1024;
                suffix = s;
            }
            return write!(f, "{sign}{units}{suffix}");
        }
        // Decimal: the largest power of ten, in steps of three, that leaves an integer.
        let mut mantissa = magnitude;
        let mut exponent = -9;
        while mantissa % 1000 == 0 && exponent < 18 {
            mantissa /= 1000;
            exponent += 3;
        }
        match self.format {
            Format::DecimalExponent if exponent == 0 => write!(f, "{sign}{mantissa}"),
            Format::DecimalExponent => write!(f, "{sign}{mantissa}e{exponent}"),
            Format::BinarySi | Format::DecimalSi => {
                let suffix = DECIMAL_SUFFIXES
                    .iter()
                    .find(|(_, e)| *e == exponent)
                    .map_or("", |(s, _)| *s);
                write!(f, "{sign}{mantissa}{suffix}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(text: &str) -> String {
        Quantity::parse(text)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .to_string()
    }

    /// Cases from apimachinery's `quantity_test.go` (`TestQuantityParse`, the canonical
    /// forms it expects) and the examples of the `Quantity` comment.
    #[test]
    fn canonical_forms_follow_apimachinery() {
        let cases = [
            ("0", "0"),
            ("0n", "0"),
            ("0Ki", "0"),
            ("1.5", "1500m"),
            ("1.5Gi", "1536Mi"),
            ("1024Mi", "1Gi"),
            ("1Ki", "1Ki"),
            ("1023Ki", "1023Ki"),
            ("0.5Ki", "512"),
            ("1.1Ki", "1126400m"),
            ("1000M", "1G"),
            ("1000", "1k"),
            ("2", "2"),
            ("500m", "500m"),
            ("0.5", "500m"),
            ("100u", "100u"),
            ("0.1m", "100u"),
            ("1n", "1n"),
            ("0.1n", "1n"),
            ("1e3", "1e3"),
            ("1000e0", "1e3"),
            ("1E", "1E"),
            ("1e-3", "1e-3"),
            ("12e6", "12e6"),
            (".5", "500m"),
            ("5.", "5"),
            ("+5", "5"),
            ("-5m", "-5m"),
            ("512Mi", "512Mi"),
            ("512M", "512M"),
            ("100Mi", "100Mi"),
            ("1.5k", "1500"),
        ];
        for (text, want) in cases {
            assert_eq!(canonical(text), want, "{text}");
        }
    }

    #[test]
    fn malformed_quantities_are_refused_with_apimachinerys_reasons() {
        assert_eq!(Quantity::parse(""), Err(QuantityError::Format));
        assert_eq!(Quantity::parse("Mi"), Err(QuantityError::Format));
        assert_eq!(Quantity::parse("."), Err(QuantityError::Format));
        assert_eq!(Quantity::parse("-"), Err(QuantityError::Format));
        assert_eq!(Quantity::parse("1.5.5"), Err(QuantityError::Format));
        assert_eq!(Quantity::parse("1 Gi"), Err(QuantityError::Format));
        assert_eq!(Quantity::parse("12apples"), Err(QuantityError::Format));
        assert_eq!(Quantity::parse("1Ki1"), Err(QuantityError::Suffix));
        assert_eq!(Quantity::parse("1MM"), Err(QuantityError::Suffix));
        assert_eq!(Quantity::parse("1KB"), Err(QuantityError::Format));
        assert_eq!(Quantity::parse("1K"), Err(QuantityError::Suffix));
        assert_eq!(Quantity::parse("1e"), Err(QuantityError::Suffix));
        assert_eq!(Quantity::parse("9Ei"), Err(QuantityError::TooLarge));
        assert_eq!(Quantity::parse("1e400"), Err(QuantityError::TooLarge));
        assert_eq!(
            Quantity::parse("99999999999999999999999999999999999999999"),
            Err(QuantityError::TooLarge)
        );
    }

    #[test]
    fn quantities_compare_by_value_whatever_their_suffix() {
        let q = |t: &str| Quantity::parse(t).unwrap();
        assert_eq!(q("1Gi"), q("1024Mi"));
        assert_eq!(q("0.5"), q("500m"));
        assert_eq!(q("1e3"), q("1k"));
        assert!(q("1G") < q("1Gi"));
        assert!(q("2") > q("1999m"));
        assert!(q("100m") < q("0.2"));
        assert!(q("-1") < q("0"));
        assert_eq!(q("1.5").millis_ceil(), 1500);
        assert_eq!(q("0.1m").millis_ceil(), 1);
        assert_eq!(q("1.5Ki").units_ceil(), 1536);
        assert_eq!(q("1500m").units_ceil(), 2);
    }

    #[test]
    fn the_canonical_form_parses_back_to_the_same_quantity() {
        for text in [
            "1.5Gi", "0.1m", "1e3", "7.25", "1.1Ki", "3Pi", "-2.5k", "0.5Ki",
        ] {
            let q = Quantity::parse(text).unwrap();
            let again = Quantity::parse(&q.to_string()).unwrap();
            assert_eq!(q, again, "{text} -> {q}");
            assert_eq!(q.to_string(), again.to_string(), "{text}");
        }
    }
}
