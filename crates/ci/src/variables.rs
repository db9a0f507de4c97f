//! CI/CD variables: the ordered list a job gets, and GitLab's server-side expansion.
//!
//! GitLab's server expands variables at pipeline creation to decide things: `rules:if`,
//! `workflow:rules:if` and `only/except:variables` read variables whose values have been expanded
//! ([`expand_all`]), and `environment:name`/`url`, `resource_group` and local `include` paths are
//! expanded once. It expands them again, to any depth in dependency order, when it sends a job to
//! the runner ([`runner_variables`], `build_runner_presenter.rb`), keeping references it does not
//! know for the runner, which expands once more when the job runs. Expansion replaces `$VAR`,
//! `${VAR}` and `%VAR%`; it leaves `$$` and `%%` alone, removes references to unknown variables
//! (or keeps them, for include paths and the runner), does not expand variables marked `expand:
//! false`, and when the references form a cycle expands nothing.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::reader::Reader;
use super::yaml::{Node, Value};

/// Where a variable's value comes from; later sources override earlier ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VariableSource {
    /// Predefined for the pipeline (`CI_COMMIT_SHA`, ...), from [`super::CompileOptions`].
    Predefined,
    /// Predefined for the job (`CI_JOB_NAME`, `CI_JOB_STAGE`, `CI_NODE_INDEX`, ...).
    Job,
    /// Top-level `variables:` (and `workflow:rules:variables`).
    Global,
    /// The job's own `variables:` (including what `extends` brought).
    JobYaml,
    /// A `parallel:matrix` entry.
    Matrix,
    /// The matching rule's `variables:`.
    Rule,
    /// Given by the person running the pipeline (`--variable KEY=VALUE`).
    User,
}

/// A variable as the runner receives it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Variable {
    /// The name.
    pub key: String,
    /// The value as written (not expanded).
    pub value: String,
    /// `expand: false`: the runner must not expand references in the value.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub raw: bool,
    /// Where it comes from.
    pub source: VariableSource,
}

impl Variable {
    /// A variable that may be expanded.
    pub fn new(key: impl Into<String>, value: impl Into<String>, source: VariableSource) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
            raw: false,
            source,
        }
    }
}

/// Set `variable` in `list`: an existing entry with the same key is removed, the new one goes
/// last (so the list holds each key once, in the order the last definitions were made).
pub(crate) fn set(list: &mut Vec<Variable>, variable: Variable) {
    list.retain(|v| v.key != variable.key);
    list.push(variable);
}

/// Read a `variables:` hash: values are strings or numbers, or `{value, description, expand,
/// options}`.
pub(crate) fn read_variables(
    reader: &mut Reader<'_>,
    node: &Node,
    source: VariableSource,
) -> Option<Vec<Variable>> {
    let map = match &node.value {
        Value::Map(map) => map,
        Value::Null => return Some(Vec::new()),
        _ => {
            reader.wrong(node, "variables", "a hash of key value pairs");
            return None;
        }
    };
    let mut out = Vec::new();
    let mut ok = true;
    for (key, value) in map.iter() {
        let variable = match &value.value {
            Value::Map(options) => {
                let mut r = reader.nested(&format!("variables:{}", key.name));
                if !r.check_keys(options, &["value", "description", "expand", "options"]) {
                    ok = false;
                    continue;
                }
                let text = match options.get("value") {
                    Some(v) if v.is_null() => String::new(),
                    Some(v) => match v
                        .scalar_text()
                        .or_else(|| v.as_bool().map(|b| b.to_string()))
                    {
                        Some(t) => t,
                        None => {
                            r.wrong(v, "value", "a string");
                            ok = false;
                            continue;
                        }
                    },
                    None => String::new(),
                };
                let raw = match options.get("expand") {
                    Some(e) => match r.boolean(e, "expand") {
                        Some(expand) => !expand,
                        None => {
                            ok = false;
                            continue;
                        }
                    },
                    None => false,
                };
                if let Some(o) = options.get("options")
                    && r.strings(o, "options").is_none()
                {
                    ok = false;
                    continue;
                }
                Variable {
                    key: key.name.clone(),
                    value: text,
                    raw,
                    source,
                }
            }
            Value::Str(_) | Value::Int(_) | Value::Float(_) => Variable::new(
                key.name.clone(),
                value.scalar_text().unwrap_or_default(),
                source,
            ),
            Value::Null => Variable::new(key.name.clone(), String::new(), source),
            // A variable's value is any scalar, booleans included (`validates :config, scalar:
            // true` in gitlabhq/gitlabhq lib/gitlab/ci/config/entry/variable.rb), kept as Ruby
            // prints it (`true.to_s`).
            Value::Bool(b) => Variable::new(key.name.clone(), b.to_string(), source),
            _ => {
                reader.fail(
                    &value.at,
                    format!(
                        "variables:{} should be a string or a number, found {}",
                        key.name,
                        value.kind()
                    ),
                );
                ok = false;
                continue;
            }
        };
        out.push(variable);
    }
    ok.then_some(out)
}

/// One piece of a value: literal text, or a reference to a variable.
enum Piece<'a> {
    Text(&'a str),
    Reference { name: &'a str, written: &'a str },
}

fn is_name_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_name(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Split `text` into literal text and variable references.
fn pieces(text: &str) -> Vec<Piece<'_>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut literal_start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let found = match bytes[i] {
            b'$' if bytes.get(i + 1) == Some(&b'$') => {
                i += 2;
                continue;
            }
            b'%' if bytes.get(i + 1) == Some(&b'%') => {
                i += 2;
                continue;
            }
            b'$' if bytes.get(i + 1) == Some(&b'{') => {
                let start = i + 2;
                let mut end = start;
                while end < bytes.len() && is_name(bytes[end]) {
                    end += 1;
                }
                if end > start && is_name_start(bytes[start]) && bytes.get(end) == Some(&b'}') {
                    Some((start, end, end + 1))
                } else {
                    None
                }
            }
            b'$' if bytes.get(i + 1).is_some_and(|c| is_name_start(*c)) => {
                let start = i + 1;
                let mut end = start;
                while end < bytes.len() && is_name(bytes[end]) {
                    end += 1;
                }
                Some((start, end, end))
            }
            b'%' if bytes.get(i + 1).is_some_and(|c| is_name_start(*c)) => {
                let start = i + 1;
                let mut end = start;
                while end < bytes.len() && is_name(bytes[end]) {
                    end += 1;
                }
                if bytes.get(end) == Some(&b'%') {
                    Some((start, end, end + 1))
                } else {
                    None
                }
            }
            _ => None,
        };
        match found {
            Some((start, end, after)) => {
                if literal_start < i {
                    out.push(Piece::Text(&text[literal_start..i]));
                }
                out.push(Piece::Reference {
                    name: &text[start..end],
                    written: &text[i..after],
                });
                i = after;
                literal_start = after;
            }
            None => i += 1,
        }
    }
    if literal_start < bytes.len() {
        out.push(Piece::Text(&text[literal_start..]));
    }
    out
}

/// The names of the variables `text` refers to.
pub(crate) fn references(text: &str) -> Vec<&str> {
    pieces(text)
        .into_iter()
        .filter_map(|p| match p {
            Piece::Reference { name, .. } => Some(name),
            Piece::Text(_) => None,
        })
        .collect()
}

/// Replace references in `text` with values from `lookup`. Unknown variables are removed, or
/// kept as written when `keep_undefined`.
pub(crate) fn expand(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    keep_undefined: bool,
) -> String {
    let mut out = String::with_capacity(text.len());
    for piece in pieces(text) {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Reference { name, written } => match lookup(name) {
                Some(value) => out.push_str(&value),
                None if keep_undefined => out.push_str(written),
                None => {}
            },
        }
    }
    out
}

/// Every variable of `list` by key (the last definition wins) with references to other variables
/// expanded, as GitLab does before evaluating `rules`. Returns the cycle, if the references form
/// one; then nothing is expanded.
pub(crate) fn expand_all(list: &[Variable]) -> (HashMap<String, String>, Option<Vec<String>>) {
    let entries: Vec<(&str, &str, bool)> = list
        .iter()
        .map(|v| (v.key.as_str(), v.value.as_str(), v.raw))
        .collect();
    sort_and_expand(&entries, false)
}

/// The values GitLab's server sends the runner for a job whose variables are `list` (key, value,
/// `expand: false`), as `Ci::BuildRunnerPresenter#runner_variables` computes them
/// (`sort_and_expand_all(keep_undefined: true, expand_file_refs: false, expand_raw_refs:
/// false)` of `lib/gitlab/ci/variables/collection.rb`): by key, the last definition winning,
/// each expanded to any depth in dependency order (`B: "$A x"`, `C: "$B y"` gives C the value
/// of A); references to unknown variables and to `expand: false` variables kept as written, for
/// the runner to expand; `expand: false` values as written. `None` when the references form a
/// cycle: GitLab then sends the values as written.
pub fn runner_variables(list: &[(&str, &str, bool)]) -> Option<HashMap<String, String>> {
    match sort_and_expand(list, true) {
        (map, None) => Some(map),
        (_, Some(_cycle)) => None,
    }
}

/// The common part of [`expand_all`] and [`runner_variables`]: `for_runner` keeps unknown
/// references and references to raw variables as written.
fn sort_and_expand(
    list: &[(&str, &str, bool)],
    for_runner: bool,
) -> (HashMap<String, String>, Option<Vec<String>>) {
    let mut by_key: HashMap<&str, (&str, bool)> = HashMap::new();
    let mut order: Vec<&str> = Vec::new();
    for &(key, value, raw) in list {
        if by_key.insert(key, (value, raw)).is_none() {
            order.push(key);
        }
    }
    let plain = || -> HashMap<String, String> {
        by_key
            .iter()
            .map(|(k, (v, _))| (k.to_string(), v.to_string()))
            .collect()
    };
    let depends = |key: &str| -> Vec<String> {
        match by_key.get(key) {
            Some(&(value, false)) => references(value)
                .into_iter()
                .filter(|name| by_key.contains_key(name))
                .map(str::to_string)
                .collect(),
            _ => Vec::new(),
        }
    };
    // Depth-first topological order, detecting cycles.
    let mut done: HashSet<String> = HashSet::new();
    let mut sorted: Vec<String> = Vec::new();
    for start in &order {
        if done.contains(*start) {
            continue;
        }
        let mut path: Vec<String> = Vec::new();
        if let Some(cycle) = visit(start, &depends, &mut done, &mut path, &mut sorted) {
            return (plain(), Some(cycle));
        }
    }
    let mut expanded: HashMap<String, String> = HashMap::new();
    for key in sorted {
        let Some(&(value, raw)) = by_key.get(key.as_str()) else {
            continue;
        };
        let value = if raw {
            value.to_owned()
        } else {
            let lookup = |name: &str| match by_key.get(name) {
                Some((_, true)) if for_runner => None,
                _ => expanded.get(name).cloned(),
            };
            expand(value, &lookup, for_runner)
        };
        expanded.insert(key, value);
    }
    (expanded, None)
}

fn visit(
    key: &str,
    depends: &dyn Fn(&str) -> Vec<String>,
    done: &mut HashSet<String>,
    path: &mut Vec<String>,
    sorted: &mut Vec<String>,
) -> Option<Vec<String>> {
    if let Some(position) = path.iter().position(|k| k == key) {
        let mut cycle = path[position..].to_vec();
        cycle.push(key.to_string());
        return Some(cycle);
    }
    if done.contains(key) {
        return None;
    }
    path.push(key.to_string());
    for dependency in depends(key) {
        if let Some(cycle) = visit(&dependency, depends, done, path, sorted) {
            return Some(cycle);
        }
    }
    path.pop();
    done.insert(key.to_string());
    sorted.push(key.to_string());
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(key: &str, value: &str) -> Variable {
        Variable::new(key, value, VariableSource::Global)
    }

    #[test]
    fn expands_all_three_forms_and_leaves_escapes() {
        let lookup = |name: &str| match name {
            "A" => Some("x".to_string()),
            "B_1" => Some("y".to_string()),
            _ => None,
        };
        assert_eq!(
            expand("$A-${B_1}-%A%-$$A-%%-$-${}-$1", &lookup, false),
            "x-y-x-$$A-%%-$-${}-$1"
        );
        assert_eq!(expand("a$UNKNOWN.b", &lookup, false), "a.b");
        assert_eq!(expand("a$UNKNOWN.b", &lookup, true), "a$UNKNOWN.b");
        assert_eq!(expand("50%", &lookup, false), "50%");
    }

    #[test]
    fn expand_all_follows_dependencies_in_any_order() {
        let list = vec![
            v("URL", "https://$HOST:${PORT}/x"),
            v("HOST", "$NAME.example"),
            v("NAME", "db"),
            v("PORT", "5432"),
        ];
        let (map, cycle) = expand_all(&list);
        assert!(cycle.is_none());
        assert_eq!(map["URL"], "https://db.example:5432/x");
    }

    #[test]
    fn raw_variables_are_not_expanded_but_can_be_used() {
        let mut raw = v("RAW", "$NAME");
        raw.raw = true;
        let list = vec![raw, v("NAME", "n"), v("USE", "[$RAW]")];
        let (map, _) = expand_all(&list);
        assert_eq!(map["RAW"], "$NAME");
        assert_eq!(map["USE"], "[$NAME]");
    }

    #[test]
    fn cycles_expand_nothing() {
        let list = vec![v("A", "$B"), v("B", "x$A"), v("C", "$D"), v("D", "d")];
        let (map, cycle) = expand_all(&list);
        assert_eq!(cycle.unwrap(), ["A", "B", "A"]);
        assert_eq!(map["C"], "$D");
    }

    #[test]
    fn set_keeps_one_entry_per_key() {
        let mut list = vec![v("A", "1"), v("B", "2")];
        set(&mut list, v("A", "3"));
        assert_eq!(
            list.iter()
                .map(|v| (v.key.as_str(), v.value.as_str()))
                .collect::<Vec<_>>(),
            [("B", "2"), ("A", "3")]
        );
    }
}
