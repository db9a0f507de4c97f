//! A job's effective variables: the payload's variables deduplicated (later wins), completed
//! with the predefined `CI_*` variables, and expanded like GitLab Runner's
//! `spec.Variables.Expand`.

mod expand;
mod predefined;

pub use expand::expand;
pub use predefined::{PredefinedContext, RunnerIdentity, predefined_defaults, runner_provided};

use crate::model::Variable;
use std::collections::HashMap;

/// Whether a variable's value means "on" to the script engine: `1`, `t` or `true`, in any
/// case, surrounding blanks ignored. GitLab Runner's `CI_DEBUG_TRACE` check reads it the same
/// way, so the trace's `debug_trace` flag and the script's tracing never disagree.
pub fn truthy(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "1" | "t" | "true"
    )
}

/// The deduplicated, expanded variables of one job. `Debug` redacts masked and non-public
/// values.
#[derive(Clone, Default)]
pub struct JobVariables {
    vars: Vec<Variable>,
    masked: Vec<String>,
    tmp_dir: String,
}

impl JobVariables {
    /// Deduplicates `list` (a later entry replaces an earlier one with the same key) and
    /// expands every non-raw value once against the whole list. File variables resolve to
    /// their file's path under `tmp_dir` during expansion, as in GitLab Runner.
    pub fn new(list: impl IntoIterator<Item = Variable>, tmp_dir: &str) -> JobVariables {
        let deduped = dedup(list.into_iter().collect());
        let unexpanded = JobVariables {
            vars: deduped,
            masked: Vec::new(),
            tmp_dir: tmp_dir.to_owned(),
        };
        let mut masked: Vec<String> = Vec::new();
        let vars: Vec<Variable> = unexpanded
            .vars
            .iter()
            .map(|v| {
                let mut v = v.clone();
                if v.masked {
                    masked.push(v.value.clone());
                }
                if !v.raw {
                    v.value = unexpanded.expand(&v.value);
                }
                if v.masked && !masked.contains(&v.value) {
                    masked.push(v.value.clone());
                }
                v
            })
            .collect();
        masked.retain(|m| !m.is_empty());
        JobVariables {
            vars,
            masked,
            tmp_dir: tmp_dir.to_owned(),
        }
    }

    /// The variables in export order.
    pub fn iter(&self) -> impl Iterator<Item = &Variable> {
        self.vars.iter()
    }

    /// The variable with this key.
    pub fn get(&self, key: &str) -> Option<&Variable> {
        self.vars.iter().find(|v| v.key == key)
    }

    /// The value of a variable (for a file variable, its contents); `None` when unset.
    pub fn value(&self, key: &str) -> Option<&str> {
        self.get(key).map(|v| v.value.as_str())
    }

    /// A variable's value as the shell sees it: the value, or a file variable's path.
    pub fn shell_value(&self, key: &str) -> Option<String> {
        self.get(key).map(|v| {
            if v.file {
                self.file_path(&v.key)
            } else {
                v.value.clone()
            }
        })
    }

    /// Where a file variable's contents are written.
    pub fn file_path(&self, key: &str) -> String {
        format!("{}/{}", self.tmp_dir.trim_end_matches('/'), key)
    }

    /// The per-job directory that holds file variables.
    pub fn tmp_dir(&self) -> &str {
        &self.tmp_dir
    }

    /// Whether a variable is set to a true value (`true`, `1`, `yes`... like Go's ParseBool,
    /// case-insensitively).
    pub fn bool(&self, key: &str) -> bool {
        self.value(key).is_some_and(truthy)
    }

    /// Sets (or replaces) a variable without expanding it.
    pub fn set(&mut self, var: Variable) {
        if var.masked && !var.value.is_empty() && !self.masked.contains(&var.value) {
            self.masked.push(var.value.clone());
        }
        match self.vars.iter_mut().find(|v| v.key == var.key) {
            Some(slot) => *slot = var,
            None => self.vars.push(var),
        }
    }

    /// Expands `$VAR` / `${VAR}` in `value` against these variables.
    pub fn expand(&self, value: &str) -> String {
        let paths: HashMap<&str, String> = self
            .vars
            .iter()
            .filter(|v| v.file)
            .map(|v| (v.key.as_str(), self.file_path(&v.key)))
            .collect();
        expand(value, |name| {
            let v = self.vars.iter().find(|v| v.key == name)?;
            if v.file {
                paths.get(name).map(String::as_str)
            } else {
                Some(v.value.as_str())
            }
        })
    }

    /// The values to mask in the trace: every masked variable's value, as sent and as
    /// expanded.
    pub fn masked_values(&self) -> &[String] {
        &self.masked
    }
}

impl std::fmt::Debug for JobVariables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobVariables")
            .field("vars", &self.vars)
            .field("masked", &format_args!("[{} values]", self.masked.len()))
            .field("tmp_dir", &self.tmp_dir)
            .finish()
    }
}

/// Keeps the last variable of each key, in the order of those last occurrences.
fn dedup(list: Vec<Variable>) -> Vec<Variable> {
    let mut last: HashMap<String, usize> = HashMap::new();
    for (i, v) in list.iter().enumerate() {
        last.insert(v.key.clone(), i);
    }
    list.into_iter()
        .enumerate()
        .filter(|(i, v)| last.get(&v.key) == Some(i))
        .map(|(_, v)| v)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_variables_win() {
        let vars = JobVariables::new(
            [
                Variable::new("A", "1"),
                Variable::new("B", "2"),
                Variable::new("A", "3"),
            ],
            "/tmp/x",
        );
        let keys: Vec<_> = vars.iter().map(|v| v.key.as_str()).collect();
        assert_eq!(keys, ["B", "A"]);
        assert_eq!(vars.value("A"), Some("3"));
    }

    #[test]
    fn expansion_is_one_pass_and_respects_raw_and_files() {
        let vars = JobVariables::new(
            [
                Variable::new("HOST", "example.com"),
                Variable::new("URL", "https://$HOST/${PATH_PART}"),
                Variable::new("PATH_PART", "$HOST"),
                Variable::new("LITERAL", "$HOST").raw(),
                Variable::new("KEY_FILE", "-----BEGIN-----").file(),
                Variable::new("USES_FILE", "--key=$KEY_FILE"),
            ],
            "/b/p.tmp",
        );
        // One pass: PATH_PART's own reference is not re-expanded inside URL.
        assert_eq!(vars.value("URL"), Some("https://example.com/$HOST"));
        assert_eq!(vars.value("PATH_PART"), Some("example.com"));
        assert_eq!(vars.value("LITERAL"), Some("$HOST"));
        assert_eq!(vars.value("USES_FILE"), Some("--key=/b/p.tmp/KEY_FILE"));
        assert_eq!(
            vars.shell_value("KEY_FILE").as_deref(),
            Some("/b/p.tmp/KEY_FILE")
        );
        assert_eq!(vars.value("KEY_FILE"), Some("-----BEGIN-----"));
    }

    #[test]
    fn masked_values_include_sent_and_expanded_forms() {
        let vars = JobVariables::new(
            [
                Variable::new("P", "pre"),
                Variable::new("SECRET", "${P}fix-secret").masked(),
                Variable::new("EMPTY", "").masked(),
            ],
            "/t",
        );
        assert_eq!(vars.masked_values(), ["${P}fix-secret", "prefix-secret"]);
    }

    #[test]
    fn bool_parsing() {
        let vars = JobVariables::new(
            [
                Variable::new("T", "TRUE"),
                Variable::new("O", "1"),
                Variable::new("F", "no"),
            ],
            "/t",
        );
        assert!(vars.bool("T") && vars.bool("O"));
        assert!(!vars.bool("F") && !vars.bool("MISSING"));
    }
}
