//! `!reference [entry, key, ...]`: replaced by the value at that path of the configuration as it
//! stands after `include` and `extends`. A referenced value may hold references itself, up to
//! GitLab's limit of ten levels.

use super::budget::deep_size;
use super::error::{CiError, Diagnostics};
use super::yaml::{Mapping, Node, Value};

/// GitLab's limit on nested references.
const MAX_DEPTH: usize = 10;

/// Replace every `!reference` in `config`. When includes were skipped (`skipped` names them),
/// a reference to an entry that is not defined at all may point into one of them: it becomes
/// an empty list, with a warning, instead of failing the pipeline.
pub(crate) fn resolve_references(
    config: &mut Mapping,
    skipped: Option<&str>,
    diag: &mut Diagnostics,
) {
    let snapshot = config.clone();
    let mut resolver = References {
        root: &snapshot,
        skipped,
        diag,
    };
    for (_, node) in config.iter_mut() {
        resolver.replace(node, 0);
    }
}

struct References<'a> {
    root: &'a Mapping,
    skipped: Option<&'a str>,
    diag: &'a mut Diagnostics,
}

impl References<'_> {
    fn replace(&mut self, node: &mut Node, depth: usize) {
        match &mut node.value {
            Value::Reference(path) => {
                let path = path.clone();
                match lookup(&path, node, self.root, depth) {
                    Ok(found) => {
                        // Each substitution is a copy: counted before it is made, so that a
                        // reference amplified at every level stops at the budget.
                        if !self.diag.charge(deep_size(found), &node.at) {
                            node.value = Value::Null;
                            return;
                        }
                        let mut found = found.clone();
                        self.replace(&mut found, depth + 1);
                        *node = found;
                    }
                    Err((error, undefined_entry)) => match self.skipped {
                        Some(_) if undefined_entry => {
                            let what = match &error {
                                CiError::MissingReference { path, message, .. } => {
                                    format!("!reference {path}: {message}")
                                }
                                other => other.to_string(),
                            };
                            self.diag.warn(
                                &node.at,
                                format!("{what}; a skipped include may define it, so it is read as an empty list"),
                            );
                            node.value = Value::Seq(Vec::new());
                        }
                        _ => {
                            self.diag.error(error);
                            node.value = Value::Null;
                        }
                    },
                }
            }
            Value::Seq(items) => {
                for item in items {
                    self.replace(item, depth);
                }
            }
            Value::Map(map) => {
                for (_, value) in map.iter_mut() {
                    self.replace(value, depth);
                }
            }
            _ => {}
        }
    }
}

/// The node a reference points at, or the error and whether it is that the first entry of
/// the path is not defined at all.
fn lookup<'r>(
    path: &[Node],
    tag: &Node,
    root: &'r Mapping,
    depth: usize,
) -> Result<&'r Node, (CiError, bool)> {
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
        return Err((
            missing(format!(
                "references nest deeper than GitLab's limit of {MAX_DEPTH}"
            )),
            false,
        ));
    }
    if path.is_empty() {
        return Err((missing("the path is empty".into()), false));
    }
    let mut keys = Vec::new();
    for part in path {
        match part.as_str() {
            Some(k) => keys.push(k),
            None => {
                return Err((
                    missing(format!("path parts must be strings, found {}", part.kind())),
                    false,
                ));
            }
        }
    }
    let Some(mut current) = root.get(keys[0]) else {
        return Err((missing(format!("`{}` is not defined", keys[0])), true));
    };
    for (i, key) in keys.iter().enumerate().skip(1) {
        let Some(map) = current.as_map() else {
            return Err((
                missing(format!(
                    "`{}` is {}, not a hash",
                    keys[..i].join(":"),
                    current.kind()
                )),
                false,
            ));
        };
        let Some(next) = map.get(key) else {
            return Err((
                missing(format!("`{}` has no key `{key}`", keys[..i].join(":"))),
                false,
            ));
        };
        current = next;
    }
    Ok(current)
}
