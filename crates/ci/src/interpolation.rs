//! `$[[ ... ]]` interpolation: inputs (and `spec:component` fields) into a file's content, and
//! matrix values into a parallel job's `needs`.
//!
//! From GitLab's source (gitlabhq `lib/gitlab/ci/config/interpolation/{template,block,access,
//! functions_stack,config}.rb`, `functions/*.rb`, `matrix_interpolator.rb`):
//! - a block is `\$\[\[\s*(\S.*?\S)\s*\]\]` (two characters at least, on one line); its body is
//!   an access (`inputs.name`, `component.version`) and up to three functions after `|`;
//! - a string that is exactly one block becomes the value with its type (a number stays a
//!   number, an array an array); a block inside a longer string is replaced by the value's Ruby
//!   text; a list item that is exactly one block holding an array is spliced into the list;
//! - keys are interpolated as values are; the header never is;
//! - blocks whose access starts with `matrix` are left for the matrix step;
//! - the functions: `truncate(offset,length)`, `expand_vars`, `posix_escape` (`split` is behind
//!   a GitLab feature flag that is off, so it is refused as GitLab refuses it);
//! - at most 10,000 distinct blocks in a file, 1 KiB per access, 1 MiB per string.

use std::collections::HashMap;
use std::sync::OnceLock;

use regex::Regex;

use super::variables::expand;
use super::yaml::{Key, Mapping, Node, Value};

const MAX_BLOCKS: usize = 10_000;
const MAX_FUNCTIONS: usize = 3;
const MAX_ACCESS_BYTES: usize = 1024;
const MAX_NODE_BYTES: usize = 1024 * 1024;
/// What interpolation may produce in all, values repeated included (the compiler's own
/// budget for a file, [`super::budget::MAX_FILE_BYTES`]).
const MAX_OUTPUT_BYTES: usize = super::budget::MAX_FILE_BYTES;

fn block_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"\$\[\[\s*(?P<data>\S.*?\S)\s*\]\]").unwrap_or_else(|_| unreachable!())
    })
}

/// What blocks may read.
#[derive(Debug)]
pub(crate) struct Context<'a> {
    /// The resolved inputs.
    pub inputs: &'a HashMap<String, Node>,
    /// The `spec:component` fields the file asked for.
    pub component: &'a HashMap<String, Value>,
    /// The variables `expand_vars` expands.
    pub variables: &'a HashMap<String, String>,
}

/// Interpolate `content` (a file's content document); the errors are GitLab's.
pub(crate) fn interpolate(content: Node, ctx: &Context<'_>) -> Result<Node, Vec<String>> {
    let mut state = State {
        ctx,
        blocks: HashMap::new(),
        errors: Vec::new(),
        produced: 0,
    };
    let node = state.node(content);
    if state.errors.is_empty() {
        Ok(node)
    } else {
        Err(state.errors)
    }
}

struct State<'c, 'a> {
    ctx: &'c Context<'a>,
    /// Each distinct block's value, as GitLab caches them.
    blocks: HashMap<String, Value>,
    errors: Vec<String>,
    /// Bytes the interpolated values take so far: a small file whose blocks repeat a large
    /// input must not grow without bound.
    produced: usize,
}

impl State<'_, '_> {
    /// Count `bytes` more of output; past the budget, the error (once).
    fn grow(&mut self, bytes: usize) -> bool {
        self.produced = self.produced.saturating_add(bytes);
        if self.produced > MAX_OUTPUT_BYTES {
            if self.errors.is_empty() {
                self.errors.push("config too large".into());
            }
            return false;
        }
        true
    }
}

/// What a string became.
enum Replaced {
    /// The string was exactly one block: its value, typed.
    Whole(Value),
    /// Text.
    Text(String),
}

impl State<'_, '_> {
    fn node(&mut self, node: Node) -> Node {
        if !self.errors.is_empty() {
            return node;
        }
        let at = node.at;
        let value = match node.value {
            Value::Str(text) => match self.string(&text) {
                Replaced::Whole(v) => v,
                Replaced::Text(t) => Value::Str(t),
            },
            Value::Seq(items) => Value::Seq(self.items(items)),
            Value::Reference(items) => Value::Reference(self.items(items)),
            Value::Map(map) => Value::Map(self.map(map)),
            other => other,
        };
        Node::new(value, at)
    }

    fn items(&mut self, items: Vec<Node>) -> Vec<Node> {
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            let was_text = matches!(item.value, Value::Str(_));
            let new = self.node(item);
            // An item that was one block holding an array is spliced in.
            match new.value {
                Value::Seq(inner) if was_text => out.extend(inner),
                value => out.push(Node::new(value, new.at)),
            }
        }
        out
    }

    fn map(&mut self, map: Mapping) -> Mapping {
        let mut out = Mapping::default();
        for (key, value) in map.into_entries() {
            let name = match self.string(&key.name) {
                Replaced::Whole(v) => ruby_text(&v),
                Replaced::Text(t) => t,
            };
            let value = self.node(value);
            out.insert(Key { name, at: key.at }, value);
        }
        out
    }

    fn string(&mut self, text: &str) -> Replaced {
        if !text.contains("$[[") {
            return Replaced::Text(text.to_string());
        }
        if text.len() > MAX_NODE_BYTES {
            self.errors.push("config node too large".into());
            return Replaced::Text(text.to_string());
        }
        let matches: Vec<(String, String)> = block_regex()
            .captures_iter(text)
            .filter_map(|c| Some((c.get(0)?.as_str().to_string(), c["data"].to_string())))
            .collect();
        if matches.is_empty() {
            return Replaced::Text(text.to_string());
        }
        let mut values = Vec::with_capacity(matches.len());
        for (block, data) in &matches {
            let value = match self.blocks.get(block) {
                Some(v) => v.clone(),
                None => {
                    if self.blocks.len() >= MAX_BLOCKS {
                        self.errors.push("too many interpolation blocks".into());
                        return Replaced::Text(text.to_string());
                    }
                    match self.evaluate(block, data) {
                        Ok(v) => {
                            self.blocks.insert(block.clone(), v.clone());
                            v
                        }
                        Err(e) => {
                            self.errors.push(e);
                            return Replaced::Text(text.to_string());
                        }
                    }
                }
            };
            values.push(value);
        }
        if matches.len() == 1 && matches[0].0.len() == text.len() {
            let value = values.remove(0);
            let size = super::budget::deep_size(&Node::new(
                value.clone(),
                super::error::Location::new("", 1, 1),
            ));
            if !self.grow(size) {
                return Replaced::Text(text.to_string());
            }
            return Replaced::Whole(value);
        }
        // One pass over the text, as Ruby's `gsub` of each block makes it: a value holding
        // another block's text is not expanded again.
        let texts: HashMap<&str, String> = matches
            .iter()
            .zip(&values)
            .map(|((block, _), value)| (block.as_str(), ruby_text(value)))
            .collect();
        let out = block_regex()
            .replace_all(text, |caps: &regex::Captures<'_>| {
                texts
                    .get(&caps[0])
                    .cloned()
                    .unwrap_or_else(|| caps[0].to_string())
            })
            .into_owned();
        if out.len() > MAX_NODE_BYTES {
            self.errors.push("config node too large".into());
            return Replaced::Text(text.to_string());
        }
        if !self.grow(out.len()) {
            return Replaced::Text(text.to_string());
        }
        Replaced::Text(out)
    }

    /// A block's value.
    fn evaluate(&self, block: &str, data: &str) -> Result<Value, String> {
        let mut parts = data.split('|').map(str::trim).collect::<Vec<_>>();
        // Ruby's split drops trailing empty pieces.
        while parts.len() > 1 && parts.last().is_some_and(|p| p.is_empty()) {
            parts.pop();
        }
        let access = parts.remove(0);
        if access.split('.').next() == Some("matrix") {
            return Ok(Value::Str(block.to_string()));
        }
        let mut value = self.access(access)?;
        if parts.len() > MAX_FUNCTIONS {
            return Err("too many functions in interpolation block".into());
        }
        let functions: Vec<Function> = parts
            .iter()
            .map(|p| {
                Function::parse(p).ok_or_else(|| {
                    format!(
                        "no function matching `{p}`: check that the function name, arguments, and types are correct"
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        for function in functions {
            value = function.apply(value, self.ctx)?;
        }
        Ok(value)
    }

    /// `inputs.name`, `component.field` (`Interpolation::Access`).
    fn access(&self, access: &str) -> Result<Value, String> {
        if access.len() > MAX_ACCESS_BYTES {
            return Err("maximum interpolation expression size exceeded".into());
        }
        let objects: Vec<&str> = access.splitn(5, '.').collect();
        if objects.len() <= 1 {
            return Err("invalid interpolation access pattern".into());
        }
        let unknown = |key: &str| format!("unknown interpolation key: `{key}`");
        let value = match objects[0] {
            "inputs" => self
                .ctx
                .inputs
                .get(objects[1])
                .map(|n| n.value.clone())
                .ok_or_else(|| unknown(objects[1]))?,
            "component" => self
                .ctx
                .component
                .get(objects[1])
                .cloned()
                .ok_or_else(|| unknown(objects[1]))?,
            other => return Err(unknown(other)),
        };
        match objects.get(2) {
            // An input's value is never a hash: a deeper key is unknown.
            Some(key) => Err(unknown(key)),
            None => Ok(value),
        }
    }
}

/// One function of a block.
enum Function {
    Truncate { offset: usize, length: usize },
    ExpandVars,
    PosixEscape,
}

impl Function {
    fn parse(text: &str) -> Option<Self> {
        match text {
            "expand_vars" => return Some(Function::ExpandVars),
            "posix_escape" => return Some(Function::PosixEscape),
            _ => {}
        }
        // `^truncate\(\s*(\d+)\s*,\s*(\d+)\s*\)?$`: the closing parenthesis is optional.
        let inner = text.strip_prefix("truncate(")?;
        let inner = inner.strip_suffix(')').unwrap_or(inner);
        let (offset, length) = inner.split_once(',')?;
        let number = |s: &str| {
            let s = s.trim();
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse().ok())
                .flatten()
        };
        Some(Function::Truncate {
            offset: number(offset)?,
            length: number(length)?,
        })
    }

    fn name(&self) -> &'static str {
        match self {
            Function::Truncate { .. } => "truncate",
            Function::ExpandVars => "expand_vars",
            Function::PosixEscape => "posix_escape",
        }
    }

    fn apply(&self, value: Value, ctx: &Context<'_>) -> Result<Value, String> {
        let Value::Str(text) = value else {
            return Err(format!(
                "error in `{0}` function: invalid input type: {0} can only be used with string inputs",
                self.name()
            ));
        };
        Ok(Value::Str(match self {
            Function::Truncate { offset, length } => {
                text.chars().skip(*offset).take(*length).collect()
            }
            Function::ExpandVars => expand(&text, &|name| ctx.variables.get(name).cloned(), true),
            Function::PosixEscape => shell_escape(&text),
        }))
    }
}

/// Ruby's `Shellwords.shellescape`.
fn shell_escape(text: &str) -> String {
    if text.is_empty() {
        return "''".into();
    }
    let mut out = String::with_capacity(text.len() * 2);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("'\n'"),
            c if c.is_ascii_alphanumeric() || "_-.,:+/@".contains(c) => out.push(c),
            c => {
                out.push('\\');
                out.push(c);
            }
        }
    }
    out
}

/// A value as Ruby's `to_s` writes it into a string.
fn ruby_text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Str(s) | Value::Symbol(s) => s.clone(),
        Value::Seq(_) | Value::Map(_) | Value::Reference(_) => ruby_inspect(value),
        other => Node::new(other.clone(), super::error::Location::new("", 1, 1))
            .scalar_text()
            .unwrap_or_default(),
    }
}

/// Ruby's `inspect` (3.4): `["a", 1, nil]`, `{"k" => "v"}`.
fn ruby_inspect(value: &Value) -> String {
    match value {
        Value::Null => "nil".into(),
        Value::Str(s) => format!("{s:?}"),
        Value::Symbol(s) => format!(":{s}"),
        Value::Seq(items) | Value::Reference(items) => format!(
            "[{}]",
            items
                .iter()
                .map(|i| ruby_inspect(&i.value))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Map(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{:?} => {}", k.name, ruby_inspect(&v.value)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => ruby_text(other),
    }
}

/// `$[[ matrix.NAME ]]` in a parallel instance's `needs`, replaced by the instance's values
/// (`MatrixInterpolator`); unknown names are GitLab's errors.
///
/// As GitLab does (`lib/gitlab/ci/config/interpolation/matrix_interpolator.rb`,
/// `interpolate_string`), the expressions are found in the original text and each is then
/// replaced everywhere in the text so far, values inserted before included: a value holding
/// a later expression has it replaced too. The text may not outgrow a node's bound.
pub(crate) fn interpolate_matrix(
    node: &Node,
    values: &[(String, String)],
    errors: &mut Vec<String>,
) -> Node {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r"\$\[\[\s*matrix\.([a-zA-Z0-9_-]+)\s*\]\]").unwrap_or_else(|_| unreachable!())
    });
    let value = match &node.value {
        Value::Str(text) if text.contains("$[[") => {
            let mut out = text.clone();
            for capture in re.captures_iter(text) {
                let name = &capture[1];
                match values.iter().find(|(k, _)| k == name) {
                    Some((_, v)) => {
                        out = out.replace(&capture[0], v);
                        if out.len() > MAX_NODE_BYTES {
                            errors.push(format!(
                                "matrix expressions make a value larger than {MAX_NODE_BYTES} bytes"
                            ));
                            return node.clone();
                        }
                    }
                    None => {
                        let error = format!("'{name}' does not exist in matrix configuration");
                        if !errors.contains(&error) {
                            errors.push(error);
                        }
                    }
                }
            }
            Value::Str(out)
        }
        Value::Seq(items) => Value::Seq(
            items
                .iter()
                .map(|i| interpolate_matrix(i, values, errors))
                .collect(),
        ),
        Value::Map(map) => {
            let mut out = Mapping::default();
            for (k, v) in map.iter() {
                out.insert(k.clone(), interpolate_matrix(v, values, errors));
            }
            Value::Map(out)
        }
        other => other.clone(),
    };
    Node::new(value, node.at.clone())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::yaml::load;

    fn doc(text: &str) -> Node {
        let file: Arc<str> = Arc::from("t.yml");
        load(text, &file).unwrap().documents.remove(0)
    }

    fn run(text: &str, inputs: &[(&str, &str)]) -> Result<serde_json::Value, Vec<String>> {
        let inputs: HashMap<String, Node> = inputs
            .iter()
            .map(|(k, v)| ((*k).to_string(), doc(v)))
            .collect();
        let variables = HashMap::from([("NAME".to_string(), "world".to_string())]);
        let component = HashMap::new();
        let ctx = Context {
            inputs: &inputs,
            component: &component,
            variables: &variables,
        };
        interpolate(doc(text), &ctx).map(|n| n.to_json())
    }

    #[test]
    fn whole_blocks_keep_their_type_and_inner_blocks_become_text() {
        let out = run(
            "$[[ inputs.prefix ]]-build:\n  parallel: $[[ inputs.count ]]\n  script:\n    - echo $[[ inputs.count ]] $[[ inputs.list ]]\n    - $[[ inputs.list ]]\n  when: $[[ inputs.flag ]]\n",
            &[("prefix", "app"), ("count", "3"), ("list", "[a, 1]"), ("flag", "true")],
        )
        .unwrap();
        assert_eq!(
            out,
            serde_json::json!({"app-build": {
                "parallel": 3,
                "script": ["echo 3 [\"a\", 1]", "a", 1],
                "when": true
            }})
        );
    }

    #[test]
    fn functions_and_their_errors() {
        let out = run(
            "a: $[[ inputs.x | truncate(3,5) ]]\nb: $[[ inputs.v | expand_vars | posix_escape ]]\nc: $[[ inputs.x | truncate(1, 2 ]]\n",
            &[("x", "'0123456789'"), ("v", "'hello $NAME; rm -rf /'")],
        )
        .unwrap();
        assert_eq!(out["a"], "34567");
        assert_eq!(out["b"], "hello\\ world\\;\\ rm\\ -rf\\ /");
        assert_eq!(out["c"], "12");
        assert_eq!(
            run("a: $[[ inputs.n | truncate(0,1) ]]\n", &[("n", "5")]).unwrap_err(),
            [
                "error in `truncate` function: invalid input type: truncate can only be used with string inputs"
            ]
        );
        assert_eq!(
            run("a: $[[ inputs.x | split(',') ]]\n", &[("x", "a")]).unwrap_err(),
            [
                "no function matching `split(',')`: check that the function name, arguments, and types are correct"
            ]
        );
        assert_eq!(
            run("a: $[[ inputs.y ]]\n", &[("x", "a")]).unwrap_err(),
            ["unknown interpolation key: `y`"]
        );
        assert_eq!(
            run("a: $[[ inputs ]]\n", &[]).unwrap_err(),
            ["invalid interpolation access pattern"]
        );
        assert_eq!(
            run("a: $[[ inputs.x | a | b | c | d ]]\n", &[("x", "a")]).unwrap_err(),
            ["too many functions in interpolation block"]
        );
    }

    /// A small file repeating a large input is refused instead of filling memory; a value
    /// holding another block's text is not expanded again.
    #[test]
    fn output_is_bounded_and_replaced_once() {
        let big = format!("'{}'", "x".repeat(512 * 1024));
        let line = "$[[ inputs.a ]]".repeat(1000);
        let e = run(&format!("a: \"{line}\"\n"), &[("a", &big)]).unwrap_err();
        assert_eq!(e, ["config node too large"]);
        let items = "  - $[[ inputs.a ]]\n".repeat(100);
        let e = run(&format!("a:\n{items}"), &[("a", &big)]).unwrap_err();
        assert_eq!(e, ["config too large"]);
        let out = run(
            "a: \"$[[ inputs.x ]] $[[ inputs.y ]]\"\n",
            &[("x", "'$[[ inputs.y ]]'"), ("y", "'why'")],
        )
        .unwrap();
        assert_eq!(out["a"], "$[[ inputs.y ]] why");
    }

    #[test]
    fn matrix_blocks_wait_for_the_matrix_step() {
        let out = run("needs: [\"$[[ matrix.OS ]]\"]\n", &[]).unwrap();
        assert_eq!(out["needs"][0], "$[[ matrix.OS ]]");
        let mut errors = Vec::new();
        let node = interpolate_matrix(
            &doc(
                "- job: b\n  parallel:\n    matrix:\n      - OS: ['$[[ matrix.OS ]]']\n        X: ['$[[matrix.NOPE]]']\n",
            ),
            &[("OS".into(), "linux".into())],
            &mut errors,
        );
        assert_eq!(node.to_json()[0]["parallel"]["matrix"][0]["OS"][0], "linux");
        assert_eq!(errors, ["'NOPE' does not exist in matrix configuration"]);
    }

    /// GitLab replaces expression by expression in the text so far (a value holding a later
    /// expression has it replaced too), and a value that doubles at each step stops at the
    /// node bound instead of taking the memory.
    #[test]
    fn matrix_expressions_replace_as_gitlab_and_stay_bounded() {
        let mut errors = Vec::new();
        let node = interpolate_matrix(
            &doc("- '$[[ matrix.A ]]/$[[ matrix.B ]]'\n"),
            &[
                ("A".into(), "a-$[[ matrix.B ]]".into()),
                ("B".into(), "b".into()),
            ],
            &mut errors,
        );
        assert_eq!(node.to_json()[0], "a-b/b");
        assert!(errors.is_empty(), "{errors:?}");

        let names: Vec<String> = (0..40).map(|i| format!("V{i}")).collect();
        let text: String = names.iter().map(|n| format!("$[[ matrix.{n} ]]")).collect();
        let values: Vec<(String, String)> = names
            .iter()
            .zip(names.iter().skip(1))
            .map(|(n, next)| (n.clone(), format!("$[[ matrix.{next} ]]").repeat(2)))
            .collect();
        let mut errors = Vec::new();
        interpolate_matrix(&doc(&format!("- '{text}'\n")), &values, &mut errors);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("larger than"), "{errors:?}");
    }
}
