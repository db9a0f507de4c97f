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

use super::re2::{self, Re2Error};

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
    /// A pattern literal: compiled, or why flotilla cannot run it (valid RE2).
    Pattern(Result<Arc<Regex>, String>),
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
    Regex(Result<Arc<Regex>, String>),
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
            Val::Regex(Ok(r)) => format!("/{}/", r.as_str()),
            Val::Regex(Err(_)) => String::new(),
        }
    }

    fn equals(&self, other: &Val) -> bool {
        match (self, other) {
            (Val::Null, Val::Null) => true,
            (Val::Str(a), Val::Str(b)) => a == b,
            (Val::Bool(a), Val::Bool(b)) => a == b,
            (Val::Regex(Ok(a)), Val::Regex(Ok(b))) => a.as_str() == b.as_str(),
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

    /// Whether the statement holds for `variables` (GitLab's `truthful?`): an evaluation error
    /// (a pattern flotilla cannot run) makes it false, as GitLab's runtime errors do.
    pub fn truthful(&self, variables: &HashMap<String, String>) -> bool {
        self.evaluate(variables).unwrap_or(false)
    }

    /// Whether the statement holds, or why it cannot be evaluated (a pattern that RE2 accepts
    /// but flotilla cannot run). GitLab's `Statement#truthful?` rescues its runtime errors as
    /// false (`lib/gitlab/ci/pipeline/expression/statement.rb`); the caller warns.
    pub fn evaluate(&self, variables: &HashMap<String, String>) -> Result<bool, String> {
        evaluate(&self.root, variables).map(|v| v.present())
    }

    /// The pattern literals RE2 accepts but flotilla cannot run, with the reason.
    pub fn unsupported_patterns(&self) -> Vec<&str> {
        fn walk<'a>(expr: &'a Expr, out: &mut Vec<&'a str>) {
            match expr {
                Expr::Pattern(Err(why)) => out.push(why),
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
}

impl fmt::Display for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

fn evaluate(expr: &Expr, variables: &HashMap<String, String>) -> Result<Val, String> {
    Ok(match expr {
        Expr::Variable(name) => variables
            .get(name)
            .map_or(Val::Null, |v| Val::Str(v.clone())),
        Expr::String(s) => Val::Str(s.clone()),
        Expr::Pattern(r) => Val::Regex(r.clone()),
        Expr::Null => Val::Null,
        Expr::Bool(b) => Val::Bool(*b),
        Expr::Binary(op, left, right) => match op {
            Op::And => {
                let l = evaluate(left, variables)?;
                if l.truthy() {
                    evaluate(right, variables)?
                } else {
                    l
                }
            }
            Op::Or => {
                let l = evaluate(left, variables)?;
                if l.truthy() {
                    l
                } else {
                    evaluate(right, variables)?
                }
            }
            Op::Equals => {
                Val::Bool(evaluate(left, variables)?.equals(&evaluate(right, variables)?))
            }
            Op::NotEquals => {
                Val::Bool(!evaluate(left, variables)?.equals(&evaluate(right, variables)?))
            }
            Op::Matches => {
                let text = evaluate(left, variables)?.text();
                Val::Bool(matches(&text, &evaluate(right, variables)?)?.unwrap_or(false))
            }
            Op::NotMatches => {
                let text = evaluate(left, variables)?.text();
                Val::Bool(!matches(&text, &evaluate(right, variables)?)?.unwrap_or(false))
            }
        },
    })
}

/// `text =~ right` (`lib/gitlab/ci/pipeline/expression/lexeme/matches.rb`): `None` when the
/// right side cannot match anything (null, a boolean). A string is made a pattern when it reads
/// as one (`Pattern.build_and_evaluate`); otherwise Ruby's `String#scan` looks for the left side
/// inside it. A pattern RE2 accepts but flotilla cannot run is an evaluation error.
fn matches(text: &str, right: &Val) -> Result<Option<bool>, String> {
    match right {
        Val::Regex(Ok(r)) => Ok(Some(pattern_matches(r, text))),
        Val::Regex(Err(why)) => Err(why.clone()),
        Val::Str(s) => match parse_pattern_literal(s) {
            Some(Ok(r)) => Ok(Some(pattern_matches(&r, text))),
            Some(Err(Re2Error::Unsupported(why))) => Err(why),
            // Not a valid pattern: `build_and_evaluate` returns the string itself.
            Some(Err(Re2Error::Invalid(_))) | None => Ok(Some(s.contains(text))),
        },
        Val::Null | Val::Bool(_) => Ok(None),
    }
}

/// `UntrustedRegexp#scan(text).present?`: any match, the empty one included.
fn pattern_matches(regex: &Regex, text: &str) -> bool {
    regex.is_match(text)
}

/// Read a whole string as `/pattern/flags` the way `Gitlab::UntrustedRegexp::RubySyntax` does
/// (`^/(?<regexp>.*)/(?<flags>[ismU]*)$`, after `\/` became `/`); `None` if it does not have that
/// shape.
pub(crate) fn parse_pattern_literal(text: &str) -> Option<Result<Regex, Re2Error>> {
    let unescaped = text.replace("\\/", "/");
    let rest = unescaped.strip_prefix('/')?;
    let flags_start = rest
        .rfind('/')
        .filter(|&close| rest[close + 1..].chars().all(|c| "ismU".contains(c)))?;
    let (body, flags) = (&rest[..flags_start], &rest[flags_start + 1..]);
    if body.contains('\n') {
        return None;
    }
    Some(re2::compile(body, flags))
}

/// GitLab's lexeme for a pattern literal (`lib/gitlab/ci/pipeline/expression/lexeme/pattern.rb`):
/// a slash, at least two characters (slashes only escaped), a last one that is not a backslash,
/// a slash and flags. `/a/` is therefore not a pattern in GitLab.
fn pattern_lexeme(rest: &str) -> Option<usize> {
    static LEXEME: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    let lexeme = LEXEME.get_or_init(|| {
        Regex::new(r"\A/(?:[^/]|\\/)+[^\\]/[ismU]*").expect("the lexeme pattern is valid")
    });
    lexeme.find(rest).map(|m| m.end())
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
                tokens.push(Token::Operand(Expr::String(rest[1..=end].to_string())));
                i += end + 2;
            }
            b'/' => {
                let Some(length) = pattern_lexeme(rest) else {
                    return Err(ExpressionError::Syntax(format!(
                        "unknown lexeme at offset {i}: a pattern needs at least two characters between its slashes, and a last one that is not a backslash (`/pattern/flags`)"
                    )));
                };
                let token = &rest[..length];
                let compiled = match parse_pattern_literal(token) {
                    Some(Ok(regex)) => Ok(Arc::new(regex)),
                    Some(Err(Re2Error::Unsupported(why))) => Err(why),
                    Some(Err(Re2Error::Invalid(message))) => {
                        let unescaped = token.replace("\\/", "/");
                        let body = unescaped
                            .strip_prefix('/')
                            .and_then(|r| r.rfind('/').map(|close| r[..close].to_string()))
                            .unwrap_or_default();
                        return Err(ExpressionError::Regex {
                            pattern: body,
                            message,
                        });
                    }
                    None => {
                        return Err(ExpressionError::Syntax(format!(
                            "invalid regular expression at offset {i}"
                        )));
                    }
                };
                tokens.push(Token::Operand(Expr::Pattern(compiled)));
                i += length;
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
        assert!(holds("$UNSET !~ /xy/"));
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

    /// `lib/gitlab/ci/pipeline/expression/lexeme/pattern.rb`: the lexeme is
    /// `^\/([^\/]|\\/)+[^\\]\/[ismU]*`, so a one-character pattern is no pattern at all
    /// and the lexer finds an unknown lexeme (gitlab-org/gitlab#335930, still so).
    #[test]
    fn one_character_patterns_do_not_lex_as_in_gitlab() {
        assert!(matches!(
            Expression::parse("$A =~ /a/"),
            Err(ExpressionError::Syntax(_))
        ));
        assert!(Expression::parse("$A =~ /ab/").is_ok());
        assert!(Expression::parse("$A =~ /a+/").is_ok());
    }

    /// A pattern literal is RE2 (`Lexeme::Pattern` builds it with `RubySyntax.fabricate!`),
    /// and what RE2 rejects makes the expression invalid, which GitLab reports as a
    /// configuration error (`ExpressionValidator`, `lib/gitlab/config/entry/validators.rb`).
    #[test]
    fn pattern_literals_are_re2() {
        assert!(matches!(
            Expression::parse(r"$A =~ /^v\d+\Z/"),
            Err(ExpressionError::Regex { .. })
        ));
        assert!(matches!(
            Expression::parse("$A =~ /^(?!main)/"),
            Err(ExpressionError::Regex { .. })
        ));
        let vars: HashMap<_, _> = [("A".to_string(), "v12".to_string())].into();
        assert!(
            Expression::parse(r"$A =~ /\Av\d+\z/")
                .unwrap()
                .truthful(&vars)
        );
        assert!(
            Expression::parse(r"$A =~ /(?i)V12/")
                .unwrap()
                .truthful(&vars)
        );
        assert!(
            Expression::parse(r"$A =~ /^\Qv1\E2$/")
                .unwrap()
                .truthful(&vars)
        );
    }

    /// Variables are not expanded inside a pattern literal: `$PREFIX` there is the end of the
    /// text followed by `PREFIX` (`Lexeme::Pattern#evaluate` ignores the variables).
    #[test]
    fn variables_are_not_expanded_in_pattern_literals() {
        let vars: HashMap<_, _> = [
            ("REF".to_string(), "release/1".to_string()),
            ("PREFIX".to_string(), "release".to_string()),
        ]
        .into();
        assert!(
            !Expression::parse("$REF =~ /^$PREFIX/")
                .unwrap()
                .truthful(&vars)
        );
        assert!(
            Expression::parse("$REF =~ /^release/")
                .unwrap()
                .truthful(&vars)
        );
    }

    /// A pattern that comes from a variable at run time and is not valid RE2 is compared as a
    /// string (`Pattern.build_and_evaluate` returns the string, and `String#scan` looks for the
    /// left side in it); it never fails the pipeline.
    #[test]
    fn invalid_patterns_from_variables_are_strings() {
        let vars: HashMap<_, _> = [
            ("REF".to_string(), "main".to_string()),
            ("BAD".to_string(), "/(?!x)main/".to_string()),
            ("GOOD".to_string(), "/^ma/".to_string()),
        ]
        .into();
        let e = Expression::parse("$REF =~ $BAD").unwrap();
        assert_eq!(e.evaluate(&vars), Ok(true), "`main` is inside the string");
        assert!(
            !Expression::parse("'other' =~ $BAD")
                .unwrap()
                .truthful(&vars)
        );
        assert!(Expression::parse("$REF =~ $GOOD").unwrap().truthful(&vars));
    }

    /// A valid RE2 pattern the engine cannot run makes the statement false, as a runtime error
    /// does in `Statement#truthful?`, and the caller is told why.
    #[test]
    fn unsupported_patterns_make_the_statement_false() {
        // RE2's `\C` matches one byte, even inside a UTF-8 character; the regex crate cannot.
        let pattern = r"/^\C$/";
        let e = Expression::parse(&format!("$REF =~ {pattern} || $REF")).unwrap();
        assert_eq!(e.unsupported_patterns().len(), 1);
        let vars: HashMap<_, _> = [("REF".to_string(), "a".to_string())].into();
        assert!(e.evaluate(&vars).is_err());
        assert!(!e.truthful(&vars));
    }

    #[test]
    fn lists_variables() {
        let e = Expression::parse("$A == $B || $C =~ /xy/").unwrap();
        assert_eq!(e.variables(), ["A", "B", "C"]);
    }
}
