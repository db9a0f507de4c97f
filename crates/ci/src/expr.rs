//! CI/CD variable expressions: the language of `rules:if`, `workflow:rules:if` and
//! `only/except:variables`.
//!
//! Grammar (GitLab's): operands are `$VAR`, `"string"` / `'string'` (no escapes), `/regex/flags`
//! (flags `i`, `s`, `m`, `U`; `\/` is a slash), `null`, `true`, `false`; operators are `==`, `!=`,
//! `=~`, `!~` (tightest, left to right), then `&&`, then `||`; parentheses group.
//!
//! Evaluation follows Ruby as GitLab does: an unset variable is `null`; `&&` and `||` return one
//! of their operands (so `$EMPTY && "x"` is `"x"`, since an empty string is truthy in Ruby); a
//! statement holds when its value is "present" (not null, not false, not blank). `=~` matches
//! the left side's text (null is `""`) against the right side: a pattern, a variable holding
//! `/pattern/`, or else a plain string, which matches when it contains the left side.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use regex::Regex;

/// A parsed expression.
#[derive(Clone, Debug)]
pub struct Expression {
    source: String,
    root: Expr,
}

/// Why an expression did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExpressionError {
    /// The text is not a valid expression.
    #[error("{0}")]
    Syntax(String),
    /// A `/pattern/` is not a valid regular expression.
    #[error("invalid regular expression /{pattern}/: {message}")]
    Regex {
        /// The pattern between the slashes.
        pattern: String,
        /// What the regex engine said.
        message: String,
    },
}

#[derive(Clone, Debug)]
enum Expr {
    Variable(String),
    String(String),
    Pattern(Arc<Regex>),
    Null,
    Bool(bool),
    Binary(Op, Box<Expr>, Box<Expr>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Equals,
    NotEquals,
    Matches,
    NotMatches,
    And,
    Or,
}

impl Op {
    fn precedence(self) -> u8 {
        match self {
            Op::Equals | Op::NotEquals | Op::Matches | Op::NotMatches => 3,
            Op::And => 2,
            Op::Or => 1,
        }
    }
}

#[derive(Clone, Debug)]
enum Token {
    Operand(Expr),
    Op(Op),
    Open,
    Close,
}

/// A value during evaluation.
#[derive(Clone, Debug)]
enum Val {
    Null,
    Str(String),
    Bool(bool),
    Regex(Arc<Regex>),
}

impl Val {
    /// Ruby truthiness: everything but nil and false.
    fn truthy(&self) -> bool {
        !matches!(self, Val::Null | Val::Bool(false))
    }

    /// Rails `present?`: not nil, not false, not a blank string.
    fn present(&self) -> bool {
        match self {
            Val::Null | Val::Bool(false) => false,
            Val::Str(s) => !s.trim().is_empty(),
            Val::Bool(true) | Val::Regex(_) => true,
        }
    }

    fn text(&self) -> String {
        match self {
            Val::Null => String::new(),
            Val::Str(s) => s.clone(),
            Val::Bool(b) => b.to_string(),
            Val::Regex(r) => r.as_str().to_string(),
        }
    }

    fn equals(&self, other: &Val) -> bool {
        match (self, other) {
            (Val::Null, Val::Null) => true,
            (Val::Str(a), Val::Str(b)) => a == b,
            (Val::Bool(a), Val::Bool(b)) => a == b,
            (Val::Regex(a), Val::Regex(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

impl Expression {
    /// Parse `source`.
    pub fn parse(source: &str) -> Result<Expression, ExpressionError> {
        let tokens = lex(source)?;
        if tokens.is_empty() {
            return Err(ExpressionError::Syntax("the expression is empty".into()));
        }
        let mut parser = ExprParser {
            tokens,
            position: 0,
        };
        let root = parser.expression(0)?;
        if parser.position != parser.tokens.len() {
            return Err(ExpressionError::Syntax(format!(
                "unexpected {} after a complete expression",
                describe(&parser.tokens[parser.position])
            )));
        }
        Ok(Expression {
            source: source.to_string(),
            root,
        })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The names of the variables the expression reads.
    pub fn variables(&self) -> Vec<&str> {
        fn walk<'a>(expr: &'a Expr, out: &mut Vec<&'a str>) {
            match expr {
                Expr::Variable(name) => out.push(name),
                Expr::Binary(_, left, right) => {
                    walk(left, out);
                    walk(right, out);
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        walk(&self.root, &mut out);
        out
    }

    /// Whether the statement holds for `variables` (GitLab's `truthful?`).
    pub fn truthful(&self, variables: &HashMap<String, String>) -> bool {
        evaluate(&self.root, variables).present()
    }
}

impl fmt::Display for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

fn evaluate(expr: &Expr, variables: &HashMap<String, String>) -> Val {
    match expr {
        Expr::Variable(name) => variables
            .get(name)
            .map_or(Val::Null, |v| Val::Str(v.clone())),
        Expr::String(s) => Val::Str(s.clone()),
        Expr::Pattern(r) => Val::Regex(r.clone()),
        Expr::Null => Val::Null,
        Expr::Bool(b) => Val::Bool(*b),
        Expr::Binary(op, left, right) => match op {
            Op::And => {
                let l = evaluate(left, variables);
                if l.truthy() {
                    evaluate(right, variables)
                } else {
                    l
                }
            }
            Op::Or => {
                let l = evaluate(left, variables);
                if l.truthy() {
                    l
                } else {
                    evaluate(right, variables)
                }
            }
            Op::Equals => Val::Bool(evaluate(left, variables).equals(&evaluate(right, variables))),
            Op::NotEquals => {
                Val::Bool(!evaluate(left, variables).equals(&evaluate(right, variables)))
            }
            Op::Matches => {
                let text = evaluate(left, variables).text();
                Val::Bool(matches(&text, &evaluate(right, variables)).unwrap_or(false))
            }
            Op::NotMatches => {
                let text = evaluate(left, variables).text();
                Val::Bool(!matches(&text, &evaluate(right, variables)).unwrap_or(false))
            }
        },
    }
}

/// `text =~ right`; `None` when the right side cannot match anything (null, a boolean).
fn matches(text: &str, right: &Val) -> Option<bool> {
    match right {
        Val::Regex(r) => Some(r.is_match(text)),
        Val::Str(s) => match parse_pattern_literal(s) {
            Some(Ok(r)) => Some(r.is_match(text)),
            // Not a pattern: Ruby's String#scan looks for the left side inside the right.
            _ => Some(s.contains(text)),
        },
        Val::Null | Val::Bool(_) => None,
    }
}

/// Read a whole string as `/pattern/flags`; `None` if it does not have that shape.
pub(crate) fn parse_pattern_literal(text: &str) -> Option<Result<Regex, ExpressionError>> {
    let rest = text.strip_prefix('/')?;
    let (body, consumed) = scan_pattern_body(rest)?;
    let flags = &rest[consumed..];
    if !flags.chars().all(|c| matches!(c, 'i' | 's' | 'm' | 'U')) {
        return None;
    }
    Some(build_regex(&body, flags))
}

/// Scan a pattern body after the opening slash: returns the body (with `\/` unescaped) and the
/// bytes consumed including the closing slash.
fn scan_pattern_body(rest: &str) -> Option<(String, usize)> {
    let mut body = String::new();
    let mut chars = rest.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, '/')) => body.push('/'),
                Some((_, other)) => {
                    body.push('\\');
                    body.push(other);
                }
                None => return None,
            },
            '/' => {
                if body.is_empty() {
                    return None;
                }
                return Some((body, i + 1));
            }
            other => body.push(other),
        }
    }
    None
}

/// A regex from GitLab's Ruby-syntax pattern (evaluated with RE2 semantics there; Rust's regex
/// crate has the same feature set: no backreferences, no lookaround).
pub(crate) fn build_regex(body: &str, flags: &str) -> Result<Regex, ExpressionError> {
    let source = if flags.is_empty() {
        body.to_string()
    } else {
        format!("(?{flags}){body}")
    };
    Regex::new(&source).map_err(|e| ExpressionError::Regex {
        pattern: body.to_string(),
        message: e
            .to_string()
            .lines()
            .last()
            .unwrap_or_default()
            .trim()
            .trim_start_matches("error: ")
            .to_string(),
    })
}

fn lex(source: &str) -> Result<Vec<Token>, ExpressionError> {
    let mut tokens = Vec::new();
    let bytes = source.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &source[i..];
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let two = rest.get(..2).unwrap_or("");
        let op = match two {
            "==" => Some(Op::Equals),
            "!=" => Some(Op::NotEquals),
            "=~" => Some(Op::Matches),
            "!~" => Some(Op::NotMatches),
            "&&" => Some(Op::And),
            "||" => Some(Op::Or),
            _ => None,
        };
        if let Some(op) = op {
            tokens.push(Token::Op(op));
            i += 2;
            continue;
        }
        match c {
            b'(' => {
                tokens.push(Token::Open);
                i += 1;
            }
            b')' => {
                tokens.push(Token::Close);
                i += 1;
            }
            b'$' => {
                let name: String = rest[1..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if name.is_empty() {
                    return Err(ExpressionError::Syntax(format!(
                        "`$` at offset {i} is not followed by a variable name (write $NAME)"
                    )));
                }
                i += 1 + name.len();
                tokens.push(Token::Operand(Expr::Variable(name)));
            }
            b'"' | b'\'' => {
                let quote = c as char;
                let Some(end) = rest[1..].find(quote) else {
                    return Err(ExpressionError::Syntax(format!(
                        "unterminated string starting at offset {i}"
                    )));
                };
                tokens.push(Token::Operand(Expr::String(rest[1..1 + end].to_string())));
                i += end + 2;
            }
            b'/' => {
                let Some((body, consumed)) = scan_pattern_body(&rest[1..]) else {
                    return Err(ExpressionError::Syntax(format!(
                        "unterminated regular expression starting at offset {i}"
                    )));
                };
                let after = &rest[1 + consumed..];
                let flags: String = after
                    .chars()
                    .take_while(|c| matches!(c, 'i' | 's' | 'm' | 'U'))
                    .collect();
                let regex = build_regex(&body, &flags)?;
                tokens.push(Token::Operand(Expr::Pattern(Arc::new(regex))));
                i += 1 + consumed + flags.len();
            }
            _ => {
                let word: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let operand = match word.as_str() {
                    "null" => Expr::Null,
                    "true" => Expr::Bool(true),
                    "false" => Expr::Bool(false),
                    _ => {
                        let shown: String = rest.chars().take(12).collect();
                        return Err(ExpressionError::Syntax(format!(
                            "unknown lexeme at offset {i}: `{shown}` (strings need quotes, variables a `$`)"
                        )));
                    }
                };
                tokens.push(Token::Operand(operand));
                i += word.len();
            }
        }
        if tokens.len() > 100 {
            return Err(ExpressionError::Syntax(
                "too many tokens (GitLab's limit is 100)".into(),
            ));
        }
    }
    Ok(tokens)
}

fn describe(token: &Token) -> &'static str {
    match token {
        Token::Operand(_) => "an operand",
        Token::Op(_) => "an operator",
        Token::Open => "`(`",
        Token::Close => "`)`",
    }
}

struct ExprParser {
    tokens: Vec<Token>,
    position: usize,
}

impl ExprParser {
    /// Precedence climbing; all operators are left-associative.
    fn expression(&mut self, min_precedence: u8) -> Result<Expr, ExpressionError> {
        let mut left = self.primary()?;
        while let Some(Token::Op(op)) = self.tokens.get(self.position) {
            let op = *op;
            if op.precedence() < min_precedence {
                break;
            }
            self.position += 1;
            let right = self.expression(op.precedence() + 1)?;
            left = Expr::Binary(op, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn primary(&mut self) -> Result<Expr, ExpressionError> {
        let token = self.tokens.get(self.position).cloned();
        self.position += 1;
        match token {
            Some(Token::Operand(expr)) => Ok(expr),
            Some(Token::Open) => {
                let inner = self.expression(0)?;
                match self.tokens.get(self.position) {
                    Some(Token::Close) => {
                        self.position += 1;
                        Ok(inner)
                    }
                    _ => Err(ExpressionError::Syntax("unmatched parenthesis".into())),
                }
            }
            Some(other) => Err(ExpressionError::Syntax(format!(
                "expected an operand, found {}",
                describe(&other)
            ))),
            None => Err(ExpressionError::Syntax(
                "the expression ends where an operand is expected".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> HashMap<String, String> {
        [
            ("BRANCH", "main"),
            ("DEFAULT", "main"),
            ("FEATURE", "feature/login"),
            ("EMPTY", ""),
            ("BLANK", "   "),
            ("PATTERN", "/^feature\\//"),
            ("WORD", "feature/login-page"),
            ("SOURCE", "push"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn holds(expr: &str) -> bool {
        Expression::parse(expr)
            .unwrap_or_else(|e| panic!("{expr}: {e}"))
            .truthful(&vars())
    }

    #[test]
    fn presence() {
        assert!(holds("$BRANCH"));
        assert!(!holds("$UNSET"));
        assert!(!holds("$EMPTY"), "an empty variable is not present");
        assert!(!holds("$BLANK"), "a blank variable is not present");
    }

    #[test]
    fn equality_and_null() {
        assert!(holds("$BRANCH == $DEFAULT"));
        assert!(holds("$BRANCH == \"main\""));
        assert!(holds("'main' == $BRANCH"));
        assert!(holds("$BRANCH != 'dev'"));
        assert!(holds("$UNSET == null"));
        assert!(!holds("$EMPTY == null"), "an empty string is not null");
        assert!(holds("$EMPTY == ''"));
        assert!(holds("$UNSET == $ALSO_UNSET"));
        assert!(!holds("$BRANCH == null"));
        assert!(holds("null == $UNSET"));
    }

    #[test]
    fn quoting_has_no_escapes_and_keeps_the_other_quote() {
        assert!(holds(r#"'a"b' == 'a"b'"#));
        assert!(holds(r#""it's" != "its""#));
        assert!(Expression::parse("$A == \"open").is_err());
    }

    #[test]
    fn regex_match_and_flags() {
        assert!(holds("$FEATURE =~ /^feature\\//"));
        assert!(holds("$FEATURE =~ /^FEATURE/i"));
        assert!(!holds("$FEATURE =~ /^FEATURE/"));
        assert!(holds("$FEATURE !~ /^release/"));
        assert!(holds("$UNSET =~ /^$/"), "null matches as an empty string");
        assert!(holds("$UNSET !~ /x/"));
        assert!(
            holds("$WORD =~ $PATTERN"),
            "a variable holding /regex/ is a pattern"
        );
        assert!(!holds("$BRANCH =~ $PATTERN"));
        assert!(
            holds("\"ma\" =~ $BRANCH"),
            "a plain string matches when it contains the left side"
        );
        assert!(!holds("$BRANCH =~ $UNSET"));
        let multiline = Expression::parse("$M =~ /^b$/m").unwrap();
        let vars: HashMap<_, _> = [("M".to_string(), "a\nb".to_string())].into();
        assert!(multiline.truthful(&vars));
        let dotall = Expression::parse("$M =~ /a.b/s").unwrap();
        assert!(dotall.truthful(&vars));
        assert!(!Expression::parse("$M =~ /a.b/").unwrap().truthful(&vars));
    }

    #[test]
    fn bad_regex_is_reported() {
        match Expression::parse("$A =~ /(unclosed/") {
            Err(ExpressionError::Regex { pattern, .. }) => assert_eq!(pattern, "(unclosed"),
            other => panic!("{other:?}"),
        }
        assert!(
            Expression::parse("$A =~ /(?<!x)y/").is_err(),
            "no lookbehind, as in RE2"
        );
    }

    #[test]
    fn precedence_and_parentheses() {
        // && binds tighter than ||.
        assert!(holds("$UNSET || $BRANCH == 'main' && $SOURCE == 'push'"));
        assert!(holds("$BRANCH == 'main' || $UNSET && $UNSET2"));
        assert!(!holds("($BRANCH == 'main' || $UNSET) && $UNSET2"));
        assert!(holds(
            "$BRANCH == 'dev' || ($SOURCE == 'push' && $FEATURE =~ /login/)"
        ));
        assert!(!holds(
            "$BRANCH == 'dev' || $SOURCE == 'push' && $FEATURE =~ /logout/"
        ));
        assert!(holds("(($BRANCH))"));
    }

    #[test]
    fn and_or_return_operands_like_ruby() {
        // "" is truthy in Ruby, so && moves on to the right operand.
        assert!(holds("$EMPTY && 'x'"));
        assert!(!holds("$EMPTY || $UNSET"));
        assert!(holds("$UNSET || 'fallback'"));
        assert!(!holds("$UNSET && 'x'"));
    }

    #[test]
    fn syntax_errors() {
        for bad in [
            "",
            "$A ==",
            "== 'x'",
            "$A 'x'",
            "($A == 'x'",
            "$A == 'x')",
            "main == $A",
            "$",
            "$A = 'x'",
        ] {
            assert!(Expression::parse(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn lists_variables() {
        let e = Expression::parse("$A == $B || $C =~ /x/").unwrap();
        assert_eq!(e.variables(), ["A", "B", "C"]);
    }
}
