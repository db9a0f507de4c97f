//! `spec:inputs`: the header a file declares its inputs in, and the values an `include:inputs`
//! (or the pipeline, for the main file) gives them.
//!
//! From GitLab's source (gitlabhq `lib/gitlab/ci/config/header/{root,spec,input}.rb`,
//! `lib/gitlab/ci/config/interpolation/inputs.rb` and `inputs/*_input.rb`, `lib/ci/inputs/`):
//! - a header is the first of two or more YAML documents when it has a `spec` key; `spec` takes
//!   `inputs`, `component`, `include` and `description`; each input takes `default`, `type`
//!   (`string` when absent; `number`, `boolean`, `array`), `options`, `regex`,
//!   `description` (and `rules`, which flotilla refuses: GitLab keeps it behind a flag);
//! - an input without `default` is required; the default is checked like a given value;
//! - a value is checked for its type, then against `options`, then `regex` (RE2, unanchored);
//! - values are coerced as GitLab's newest inputs code coerces them (`Ci::Inputs::*Input`): a
//!   string input takes any scalar as its text; a number, boolean or array input given text
//!   reads it as JSON (`"5"` is 5);
//! - header errors are GitLab's validator messages, lower-cased whole as GitLab does
//!   (`header:spec:inputs:x config contains unknown keys: y`); value errors are prefixed with
//!   the input's name (`` `x` input: required value has not been provided ``).

use std::collections::HashMap;

use super::re2;
use super::yaml::{Mapping, Node, Value};

/// GitLab's limit on `options` (`ALLOWED_OPTIONS_LIMIT`).
const MAX_OPTIONS: usize = 50;

/// An input's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InputType {
    /// Text (the default).
    String,
    /// An integer or a float.
    Number,
    /// `true` or `false`.
    Boolean,
    /// A list of any values.
    Array,
}

impl InputType {
    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "string" => InputType::String,
            "number" => InputType::Number,
            "boolean" => InputType::Boolean,
            "array" => InputType::Array,
            _ => return None,
        })
    }

    fn article_name(self) -> &'static str {
        match self {
            InputType::String => "a string",
            InputType::Number => "a number",
            InputType::Boolean => "a boolean",
            InputType::Array => "an array",
        }
    }
}

/// One declared input.
#[derive(Clone, Debug)]
pub(crate) struct InputSpec {
    /// Its name.
    pub name: String,
    /// Its type.
    pub kind: InputType,
    /// `default:`, if declared (a declared null is a default of nothing, as GitLab has it).
    pub default: Option<Node>,
    /// `options:`.
    pub options: Option<Vec<Node>>,
    /// `regex:`.
    pub regex: Option<String>,
}

/// A file's header.
#[derive(Clone, Debug, Default)]
pub(crate) struct Header {
    /// The inputs, in declaration order.
    pub inputs: Vec<InputSpec>,
    /// The `spec:component` fields the file may read (`name`, `sha`, `version`, `reference`).
    pub component: Vec<String>,
    /// `spec:include`: files whose `inputs:` come before the ones declared here.
    pub include: Vec<Node>,
}

impl Header {
    /// Put `specs` (from a `spec:include` file) before the inputs declared here; an input
    /// declared here keeps its own specification.
    pub(crate) fn prepend(&mut self, specs: Vec<InputSpec>) {
        let mut merged: Vec<InputSpec> = specs
            .into_iter()
            .filter(|s| !self.inputs.iter().any(|own| own.name == s.name))
            .collect();
        merged.append(&mut self.inputs);
        self.inputs = merged;
    }
}

/// The inputs of a `spec:include` file, which may hold nothing but `inputs:`
/// (`External::File::Base`, GitLab 18.6).
pub(crate) fn read_inputs_file(node: &Node, shown: &str) -> Result<Vec<InputSpec>, Vec<String>> {
    let empty = Mapping::default();
    let map = match &node.value {
        Value::Map(m) => m,
        Value::Null => &empty,
        _ => {
            return Err(vec![format!(
                "Header include file `{shown}` should be a hash"
            )]);
        }
    };
    let unknown: Vec<String> = map
        .iter()
        .filter(|(k, _)| k.name != "inputs")
        .map(|(k, _)| format!(":{}", k.name))
        .collect();
    if !unknown.is_empty() {
        return Err(vec![format!(
            "Header include file `{shown}` contains unknown keys: [{}]",
            unknown.join(", ")
        )]);
    }
    let mut errors = Vec::new();
    let mut specs = Vec::new();
    match map.get("inputs").map(|n| &n.value) {
        None | Some(Value::Null) => {}
        Some(Value::Map(inputs)) => {
            for (key, value) in inputs.iter() {
                if let Some(spec) = read_input(&key.name, value, &mut errors) {
                    specs.push(spec);
                }
            }
        }
        Some(_) => errors.push(format!(
            "Header include file `{shown}` inputs should be a hash"
        )),
    }
    if errors.is_empty() {
        Ok(specs)
    } else {
        Err(errors.into_iter().map(|e| e.to_lowercase()).collect())
    }
}

/// Whether `documents[0]` is a header: two or more documents, the first a hash with `spec`
/// (`Yaml::Result#has_header?`).
pub(crate) fn is_header(documents: &[Node]) -> bool {
    documents.len() > 1
        && documents[0]
            .as_map()
            .is_some_and(|m| m.get("spec").is_some())
}

/// Read the header document; the errors are GitLab's, lower-cased.
pub(crate) fn read_header(node: &Node) -> Result<Header, Vec<String>> {
    let mut errors = Vec::new();
    let mut header = Header::default();
    let Some(root) = node.as_map() else {
        return Err(vec!["header config should be a hash".into()]);
    };
    let unknown = unknown_keys(root, &["spec"]);
    if !unknown.is_empty() {
        errors.push(format!("header config contains unknown keys: {unknown}"));
    }
    let spec_node = root.get("spec");
    let spec = match spec_node.map(|n| &n.value) {
        Some(Value::Map(m)) => m.clone(),
        Some(Value::Null) | None => Mapping::default(),
        Some(_) => {
            errors.push("header:spec config should be a hash".into());
            Mapping::default()
        }
    };
    let unknown = unknown_keys(&spec, &["inputs", "component", "include", "description"]);
    if !unknown.is_empty() {
        errors.push(format!(
            "header:spec config contains unknown keys: {unknown}"
        ));
    }
    if let Some(component) = spec.get("component").filter(|n| !n.is_null()) {
        read_component_fields(component, &mut header, &mut errors);
    }
    match spec.get("include").map(|n| &n.value) {
        None | Some(Value::Null) => {}
        Some(Value::Seq(items)) => header.include = items.clone(),
        Some(_) => header.include = spec.get("include").into_iter().cloned().collect(),
    }
    match spec.get("inputs").map(|n| &n.value) {
        None | Some(Value::Null) => {}
        Some(Value::Map(inputs)) => {
            for (key, value) in inputs.iter() {
                if let Some(input) = read_input(&key.name, value, &mut errors) {
                    header.inputs.push(input);
                }
            }
        }
        Some(_) => errors.push("header:spec:inputs config should be a hash".into()),
    }
    if errors.is_empty() {
        Ok(header)
    } else {
        Err(errors.into_iter().map(|e| e.to_lowercase()).collect())
    }
}

fn unknown_keys(map: &Mapping, allowed: &[&str]) -> String {
    map.iter()
        .filter(|(k, _)| !allowed.contains(&k.name.as_str()))
        .map(|(k, _)| k.name.clone())
        .collect::<Vec<_>>()
        .join(", ")
}

fn read_component_fields(node: &Node, header: &mut Header, errors: &mut Vec<String>) {
    const FIELDS: &[&str] = &["name", "sha", "version", "reference"];
    let Some(items) = node.as_seq() else {
        errors.push("header:spec:component config should be a array".into());
        return;
    };
    let names: Vec<String> = items.iter().filter_map(Node::scalar_text).collect();
    if names.len() != items.len() {
        errors.push("header:spec:component config should be an array of strings".into());
        return;
    }
    let unknown: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| !FIELDS.contains(n))
        .collect();
    if !unknown.is_empty() {
        errors.push(format!(
            "header:spec:component config contains unknown values: {}",
            unknown.join(", ")
        ));
    }
    header.component = names;
}

fn read_input(name: &str, node: &Node, errors: &mut Vec<String>) -> Option<InputSpec> {
    // GitLab's `alphanumeric` validator asks only that the key be a string, a symbol or an
    // integer, which every YAML key here is (`job-name` is fine).
    let context = format!("header:spec:inputs:{name}");
    let empty = Mapping::default();
    let spec = match &node.value {
        Value::Null => &empty,
        Value::Map(m) => m,
        _ => {
            errors.push(format!("{context} config should be a hash"));
            return None;
        }
    };
    let unknown = unknown_keys(
        spec,
        &[
            "default",
            "description",
            "options",
            "regex",
            "type",
            "rules",
        ],
    );
    if !unknown.is_empty() {
        errors.push(format!("{context} config contains unknown keys: {unknown}"));
    }
    if spec.get("rules").is_some() {
        errors.push(format!("{context} rules is not yet supported"));
    }
    let kind = match spec.get("type").map(|n| &n.value) {
        None | Some(Value::Null) => InputType::String,
        Some(_) => {
            let text = spec
                .get("type")
                .and_then(Node::scalar_text)
                .unwrap_or_default();
            match InputType::parse(&text) {
                Some(kind) => kind,
                None => {
                    errors.push(format!("{context} input type unknown value: {text}"));
                    return None;
                }
            }
        }
    };
    let options = match spec.get("options").map(|n| &n.value) {
        None | Some(Value::Null) => None,
        Some(Value::Seq(items)) => {
            if items.len() > MAX_OPTIONS {
                errors.push(format!(
                    "{context} config cannot define more than {MAX_OPTIONS} options"
                ));
            }
            Some(items.clone())
        }
        Some(_) => {
            errors.push(format!("{context} input options should be a array"));
            None
        }
    };
    let regex = match spec.get("regex").map(|n| &n.value) {
        None | Some(Value::Null) => None,
        Some(Value::Str(s)) => Some(s.clone()),
        Some(_) => {
            errors.push(format!("{context} input regex should be a string"));
            None
        }
    };
    Some(InputSpec {
        name: name.to_string(),
        kind,
        default: spec.get("default").cloned(),
        options,
        regex,
    })
}

/// The value of every declared input: given ones checked and coerced, the others their
/// default; the errors in GitLab's words, in GitLab's order (unknown arguments first).
pub(crate) fn resolve(
    header: &Header,
    given: &Mapping,
) -> Result<HashMap<String, Node>, Vec<String>> {
    let mut errors = Vec::new();
    let unknown: Vec<&str> = given
        .iter()
        .map(|(k, _)| k.name.as_str())
        .filter(|k| !header.inputs.iter().any(|i| i.name == *k))
        .collect();
    if !unknown.is_empty() {
        errors.push(format!("unknown input arguments: {}", unknown.join(", ")));
    }
    let mut values = HashMap::new();
    for spec in &header.inputs {
        let value = given.get(&spec.name).filter(|n| !n.is_null());
        match (value, &spec.default) {
            (None, None) => {
                errors.push(format!(
                    "`{}` input: required value has not been provided",
                    spec.name
                ));
                continue;
            }
            (_, Some(default)) => {
                if let Err(e) = check(spec, default, true) {
                    errors.push(format!("`{}` input: {e}", spec.name));
                    continue;
                }
            }
            (Some(_), None) => {}
        }
        let chosen = match value {
            Some(v) => match check(spec, v, false) {
                Ok(v) => v,
                Err(e) => {
                    errors.push(format!("`{}` input: {e}", spec.name));
                    continue;
                }
            },
            None => match &spec.default {
                Some(d) => coerce(spec.kind, d),
                None => continue,
            },
        };
        values.insert(spec.name.clone(), chosen);
    }
    if errors.is_empty() {
        Ok(values)
    } else {
        Err(errors)
    }
}

/// The value as the input's type reads it (`Ci::Inputs::*Input#coerced_value`).
fn coerce(kind: InputType, node: &Node) -> Node {
    let value = match (kind, &node.value) {
        (_, Value::Null) => Value::Null,
        (InputType::String, Value::Seq(_) | Value::Map(_)) => node.value.clone(),
        (InputType::String, _) => {
            Value::Str(node.scalar_text().unwrap_or_else(|| match &node.value {
                Value::Bool(b) => b.to_string(),
                Value::Symbol(s) => s.clone(),
                _ => String::new(),
            }))
        }
        (_, Value::Str(text)) => json_value(text).unwrap_or_else(|| node.value.clone()),
        _ => node.value.clone(),
    };
    Node::new(value, node.at.clone())
}

/// `Gitlab::Json.parse(text)`, as a YAML value; `None` when it is not JSON.
fn json_value(text: &str) -> Option<Value> {
    fn convert(json: serde_json::Value, at: &super::error::Location) -> Value {
        use serde_json::Value as J;
        match json {
            J::Null => Value::Null,
            J::Bool(b) => Value::Bool(b),
            J::Number(n) => n
                .as_i64()
                .map_or_else(|| Value::Float(n.as_f64().unwrap_or(0.0)), Value::Int),
            J::String(s) => Value::Str(s),
            J::Array(items) => Value::Seq(
                items
                    .into_iter()
                    .map(|i| Node::new(convert(i, at), at.clone()))
                    .collect(),
            ),
            J::Object(_) => Value::Null,
        }
    }
    let json: serde_json::Value = serde_json::from_str(text.trim()).ok()?;
    if json.is_object() {
        return None;
    }
    Some(convert(json, &super::error::Location::new("inputs", 1, 1)))
}

/// Check a given value (or the default) and return it coerced.
fn check(spec: &InputSpec, node: &Node, default: bool) -> Result<Node, String> {
    let which = if default { "default" } else { "provided" };
    // `default: null` declares an optional input with no value (GNOME's citemplates rely on
    // it): nothing to check, and the value interpolates as nothing.
    if node.is_null() {
        return Ok(node.clone());
    }
    let value = coerce(spec.kind, node);
    let fits = match spec.kind {
        InputType::String => matches!(value.value, Value::Str(_)),
        InputType::Number => matches!(value.value, Value::Int(_) | Value::Float(_)),
        InputType::Boolean => matches!(value.value, Value::Bool(_)),
        InputType::Array => matches!(value.value, Value::Seq(_)),
    };
    if !fits {
        return Err(format!("{which} value is not {}", spec.kind.article_name()));
    }
    if let Some(options) = &spec.options {
        match spec.kind {
            InputType::String => {
                let text = value.as_str().unwrap_or_default();
                if !options
                    .iter()
                    .any(|o| o.scalar_text().as_deref() == Some(text))
                {
                    return Err(format!(
                        "`{text}` cannot be used because it is not in the list of allowed options"
                    ));
                }
            }
            InputType::Number => {
                if !options.iter().any(|o| same_number(o, &value)) {
                    return Err(format!(
                        "`{}` cannot be used because it is not in the list of the allowed options",
                        value.scalar_text().unwrap_or_default()
                    ));
                }
            }
            InputType::Boolean | InputType::Array => {
                return Err("Options can only be used with string and number inputs".into());
            }
        }
    }
    if let Some(pattern) = &spec.regex {
        if spec.kind != InputType::String {
            return Err("RegEx validation can only be used with string inputs".into());
        }
        let regex =
            re2::compile(pattern, "").map_err(|_| "invalid regular expression".to_string())?;
        if !regex.is_match(value.as_str().unwrap_or_default()) {
            return Err(format!(
                "{which} value does not match required RegEx pattern"
            ));
        }
    }
    Ok(value)
}

fn same_number(a: &Node, b: &Node) -> bool {
    let number = |n: &Node| match n.value {
        Value::Int(i) => Some(i as f64),
        Value::Float(f) => Some(f),
        _ => None,
    };
    matches!((number(a), number(b)), (Some(x), Some(y)) if x == y)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::yaml::load;

    fn docs(text: &str) -> Vec<Node> {
        let file: Arc<str> = Arc::from("t.yml");
        load(text, &file).unwrap().documents
    }

    fn map(text: &str) -> Mapping {
        docs(text).remove(0).as_map().unwrap().clone()
    }

    fn header(text: &str) -> Result<Header, Vec<String>> {
        read_header(&docs(text)[0])
    }

    #[test]
    fn header_errors_are_gitlabs_lower_cased() {
        let errors = header("spec:\n  arguments: {}\n").unwrap_err();
        assert_eq!(
            errors,
            ["header:spec config contains unknown keys: arguments"]
        );
        let errors = header("spec:\n  inputs:\n    X:\n      type: Text\n").unwrap_err();
        assert_eq!(
            errors,
            ["header:spec:inputs:x input type unknown value: text"]
        );
        let errors = header("spec:\n  inputs:\n    a:\n      dflt: 1\n").unwrap_err();
        assert_eq!(
            errors,
            ["header:spec:inputs:a config contains unknown keys: dflt"]
        );
    }

    #[test]
    fn values_are_checked_as_gitlab_checks_them() {
        let h = header(
            "spec:\n  inputs:\n    stage:\n    mode:\n      default: fast\n      options: [fast, slow]\n    \
             count:\n      type: number\n      default: 1\n      options: [1, 2]\n    flag:\n      type: boolean\n      \
             default: false\n    name:\n      default: abc\n      regex: ^[a-z]+$\n    list:\n      type: array\n      default: []\n",
        )
        .unwrap();
        let errors = resolve(
            &h,
            &map("mode: medium\ncount: 3\nflag: maybe\nname: ABC\nextra: 1\n"),
        )
        .unwrap_err();
        assert_eq!(
            errors,
            [
                "unknown input arguments: extra",
                "`stage` input: required value has not been provided",
                "`mode` input: `medium` cannot be used because it is not in the list of allowed options",
                "`count` input: `3` cannot be used because it is not in the list of the allowed options",
                "`flag` input: provided value is not a boolean",
                "`name` input: provided value does not match required RegEx pattern",
            ]
        );
        let values = resolve(&h, &map("stage: 1.5\ncount: '2'\nflag: 'true'\n")).unwrap();
        assert_eq!(values["stage"].value, Value::Str("1.5".into()));
        assert_eq!(values["count"].value, Value::Int(2));
        assert_eq!(values["flag"].value, Value::Bool(true));
        assert_eq!(values["mode"].value, Value::Str("fast".into()));
        assert_eq!(values["list"].value, Value::Seq(Vec::new()));
    }

    #[test]
    fn a_header_needs_two_documents_and_a_spec_key() {
        assert!(is_header(&docs("spec:\n  inputs: {}\n---\na: 1\n")));
        assert!(!is_header(&docs("spec:\n  inputs: {}\n")));
        assert!(!is_header(&docs("other: 1\n---\na: 1\n")));
    }
}
