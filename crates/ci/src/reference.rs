//! `!reference [entry, key, ...]`: replaced by the value at that path of the configuration as it
//! stands after `include` and `extends`. A referenced value may hold references itself, up to
//! GitLab's limit of ten levels.

use super::error::{CiError, Diagnostics};
use super::yaml::{Mapping, Node, Value};

/// GitLab's limit on nested references.
const MAX_DEPTH: usize = 10;

/// Replace every `!reference` in `config`.
pub(crate) fn resolve_references(config: &mut Mapping, diag: &mut Diagnostics) {
    let snapshot = config.clone();
    for (_, node) in config.iter_mut() {
        replace(node, &snapshot, 0, diag);
    }
}

fn replace(node: &mut Node, root: &Mapping, depth: usize, diag: &mut Diagnostics) {
    match &mut node.value {
        Value::Reference(path) => {
            let path = path.clone();
            match lookup(&path, node, root, depth) {
                Ok(mut found) => {
                    replace(&mut found, root, depth + 1, diag);
                    *node = found;
                }
                Err(error) => {
                    diag.error(error);
                    node.value = Value::Null;
                }
            }
        }
        Value::Seq(items) => {
            for item in items {
                replace(item, root, depth, diag);
            }
        }
        Value::Map(map) => {
            for (_, value) in map.iter_mut() {
                replace(value, root, depth, diag);
            }
        }
        _ => {}
    }
}

fn lookup(path: &[Node], tag: &Node, root: &Mapping, depth: usize) -> Result<Node, CiError> {
    let written: Vec<String> = path
        .iter()
        .map(|p| p.scalar_text().unwrap_or_else(|| p.kind().to_string()))
        .collect();
    let shown = format!("[{}]", written.join(", "));
    let missing = |message: String| CiError::MissingReference {
        location: tag.at.clone(),
        path: shown.clone(),
        message,
    };
    if depth >= MAX_DEPTH {
        return Err(missing(format!(
            "references nest deeper than GitLab's limit of {MAX_DEPTH}"
        )));
    }
    if path.is_empty() {
        return Err(missing("the path is empty".into()));
    }
    let mut keys = Vec::new();
    for part in path {
        match part.as_str() {
            Some(k) => keys.push(k),
            None => {
                return Err(missing(format!(
                    "path parts must be strings, found {}",
                    part.kind()
                )));
            }
        }
    }
    let Some(mut current) = root.get(keys[0]) else {
        return Err(missing(format!("`{}` is not defined", keys[0])));
    };
    for (i, key) in keys.iter().enumerate().skip(1) {
        let Some(map) = current.as_map() else {
            return Err(missing(format!(
                "`{}` is {}, not a hash",
                keys[..i].join(":"),
                current.kind()
            )));
        };
        let Some(next) = map.get(key) else {
            return Err(missing(format!(
                "`{}` has no key `{key}`",
                keys[..i].join(":")
            )));
        };
        current = next;
    }
    Ok(current.clone())
}
