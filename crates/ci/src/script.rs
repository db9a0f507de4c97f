//! `script`, `before_script` and `after_script`: a string, or an array of strings nested up to
//! ten levels (anchors and `!reference` produce nesting), flattened into the lines the shell runs.

use super::error::CiError;
use super::yaml::{Node, Value};

/// GitLab's nesting limit for script arrays.
const MAX_DEPTH: usize = 10;

/// Flatten a script keyword's value. `job` and `key` name it in the error.
pub(crate) fn flatten(node: &Node, job: &str, key: &str) -> Result<Vec<String>, CiError> {
    let mut lines = Vec::new();
    match &node.value {
        Value::Str(s) => lines.push(s.clone()),
        Value::Seq(_) => collect(node, 0, &mut lines, job, key)?,
        _ => return Err(bad(node, job, key)),
    }
    Ok(lines)
}

fn collect(
    node: &Node,
    depth: usize,
    lines: &mut Vec<String>,
    job: &str,
    key: &str,
) -> Result<(), CiError> {
    match &node.value {
        Value::Str(s) => lines.push(s.clone()),
        Value::Seq(items) if depth < MAX_DEPTH => {
            for item in items {
                collect(item, depth + 1, lines, job, key)?;
            }
        }
        _ => return Err(bad(node, job, key)),
    }
    Ok(())
}

fn bad(node: &Node, job: &str, key: &str) -> CiError {
    let found = match &node.value {
        Value::Map(m) => match m.iter().next() {
            // The usual cause: an unquoted `- echo foo: bar` line.
            Some((k, _)) => format!(
                "a hash (`{}: ...`; quote a line that contains `: `)",
                k.name
            ),
            None => "an empty hash".to_string(),
        },
        Value::Seq(_) => "arrays nested more than 10 levels deep".to_string(),
        _ => node.kind().to_string(),
    };
    CiError::BadScript {
        location: node.at.clone(),
        job: job.to_string(),
        key: key.to_string(),
        found,
    }
}
