//! Lenient decoding of a job payload: fields that only inform (ids and counters in
//! `job_info`, `runner_info.uuid`, the pass-through `secrets`, `inputs` ...) never fail a job.
//! GitLab adds and retypes such fields between releases (`job_info.instance_id` became a
//! string, `project_jobs_running_on_instance_runners_count` is `"+Inf"` for non-instance
//! runners in Rails' `Ci::BuildRunnerPresenter`), and GitLab Runner's strict Go decoder then
//! drops the whole job (`network/gitlab.go` `RequestJob`: a decode error is "no job").
//!
//! A field of the wrong type on such a path is set to `null` (its default) and the decode is
//! tried again; what was ignored is returned so the caller can log it. A wrong type anywhere
//! else (a step's script, a variable, an artifact) is still an error: running the job without
//! it would run something else than what was asked.

use super::{JobPayload, PayloadError};
use serde_json::Value;

/// One step of a path inside the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// A pattern of informational paths: keys, or `*` for any array index.
struct Rule {
    pattern: &'static [&'static str],
    /// Whether everything below the pattern is informational too (the field directly under
    /// it is reset, not the whole subtree).
    subtree: bool,
}

/// The informational paths. Sources: Rails' `lib/api/entities/ci/job_request/job_info.rb`
/// (every `job_info` field is descriptive; the job's identity reaches the script through
/// `variables`), `runner_info.rb` (`uuid`, `runner_session_url`), `response.rb` (`features`,
/// and the pass-through `secrets`/`inputs`/`policy_options`/`suspend_options` that flotilla
/// does not act on), `dependency.rb` (the archive's name and size are shown, not used: only
/// the presence of `artifacts_file` matters).
const RULES: &[Rule] = &[
    Rule {
        pattern: &["job_info"],
        subtree: true,
    },
    Rule {
        pattern: &["runner_info", "uuid"],
        subtree: false,
    },
    Rule {
        pattern: &["runner_info", "runner_session_url"],
        subtree: false,
    },
    Rule {
        pattern: &["git_info", "protected"],
        subtree: false,
    },
    Rule {
        pattern: &["features", "trace_sections"],
        subtree: false,
    },
    Rule {
        pattern: &["features", "failure_reasons"],
        subtree: false,
    },
    Rule {
        pattern: &["features", "tracing"],
        subtree: false,
    },
    Rule {
        pattern: &["secrets"],
        subtree: false,
    },
    Rule {
        pattern: &["inputs"],
        subtree: false,
    },
    Rule {
        pattern: &["policy_options"],
        subtree: false,
    },
    Rule {
        pattern: &["suspend_options"],
        subtree: false,
    },
    Rule {
        pattern: &["dependencies", "*", "artifacts_file", "size"],
        subtree: false,
    },
    Rule {
        pattern: &["dependencies", "*", "artifacts_file", "filename"],
        subtree: false,
    },
];

/// The most fields reset before giving up (a payload of nothing but wrong informational
/// fields has far fewer).
const MAX_RESETS: usize = 64;

/// A payload decoded leniently.
#[derive(Debug, Clone)]
pub struct LenientPayload {
    /// The payload.
    pub payload: JobPayload,
    /// Informational fields that did not decode and were left at their defaults.
    pub ignored: Vec<PayloadError>,
}

impl JobPayload {
    /// Decodes a payload, leaving informational fields that do not decode at their defaults
    /// (they are listed in [`LenientPayload::ignored`]); any other field that does not decode
    /// is an error.
    pub fn from_value_lenient(mut value: Value) -> Result<LenientPayload, PayloadError> {
        let mut ignored = Vec::new();
        loop {
            let err = match serde_path_to_error::deserialize::<_, JobPayload>(&value) {
                Ok(payload) => return Ok(LenientPayload { payload, ignored }),
                Err(e) => e,
            };
            let steps = steps(err.path());
            let error = PayloadError::new(err.path().to_string(), err.inner().to_string());
            let Some(reset) = informational_prefix(&steps) else {
                return Err(error);
            };
            if ignored.len() >= MAX_RESETS || !set_null(&mut value, reset) {
                return Err(error);
            }
            ignored.push(error);
        }
    }
}

fn steps(path: &serde_path_to_error::Path) -> Vec<Step> {
    path.iter()
        .filter_map(|s| match s {
            serde_path_to_error::Segment::Seq { index } => Some(Step::Index(*index)),
            serde_path_to_error::Segment::Map { key } => Some(Step::Key(key.clone())),
            serde_path_to_error::Segment::Enum { variant } => Some(Step::Key(variant.clone())),
            serde_path_to_error::Segment::Unknown => None,
        })
        .collect()
}

/// The part of `path` to reset when it lies on an informational path.
fn informational_prefix(path: &[Step]) -> Option<&[Step]> {
    RULES.iter().find_map(|rule| {
        if path.len() < rule.pattern.len() {
            return None;
        }
        let matches = rule.pattern.iter().zip(path).all(|(p, s)| match (p, s) {
            (&"*", Step::Index(_)) => true,
            (p, Step::Key(k)) => k == p,
            _ => false,
        });
        if !matches {
            return None;
        }
        let depth = if rule.subtree {
            (rule.pattern.len() + 1).min(path.len())
        } else {
            rule.pattern.len()
        };
        Some(&path[..depth])
    })
}

/// Sets the value at `path` to `null`; false when the path does not lead anywhere.
fn set_null(value: &mut Value, path: &[Step]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut cur = value;
    for step in parents {
        cur = match (step, cur) {
            (Step::Key(k), Value::Object(o)) => match o.get_mut(k) {
                Some(v) => v,
                None => return false,
            },
            (Step::Index(i), Value::Array(a)) => match a.get_mut(*i) {
                Some(v) => v,
                None => return false,
            },
            _ => return false,
        };
    }
    match (last, cur) {
        (Step::Key(k), Value::Object(o)) => match o.get_mut(k) {
            Some(v) if !v.is_null() => {
                *v = Value::Null;
                true
            }
            _ => false,
        },
        (Step::Index(i), Value::Array(a)) => match a.get_mut(*i) {
            Some(v) if !v.is_null() => {
                *v = Value::Null;
                true
            }
            _ => false,
        },
        _ => false,
    }
}

/// Replaces the literals serde quotes in its messages (`"text"` and `` `123` ``) with `…`:
/// a value of the wrong type may be a secret (a masked variable's value, a token).
pub(crate) fn redact_literals(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut open: Option<char> = None;
    for c in message.chars() {
        match open {
            Some(q) if c == q => {
                out.push('…');
                out.push(c);
                open = None;
            }
            Some(_) => {}
            None => {
                out.push(c);
                if c == '"' || c == '`' {
                    open = Some(c);
                }
            }
        }
    }
    if open.is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn informational_fields_of_the_wrong_type_are_ignored_and_listed() {
        let v = json!({
            "id": 5, "token": "t",
            "job_info": {"name": "build", "instance_id": 12, "queue_size": "lots",
                         "time_in_queue_seconds": {"s": 1}},
            "runner_info": {"timeout": 60, "uuid": 7},
            "features": {"failure_reasons": ["script_failure", 3], "trace_sections": "yes"},
            "secrets": "not a map",
            "dependencies": [{"id": 1, "name": "a", "token": "t",
                              "artifacts_file": {"filename": 1, "size": "big"}}]
        });
        let d = JobPayload::from_value_lenient(v).unwrap();
        assert_eq!(d.payload.id, 5);
        assert_eq!(d.payload.job_info.name, "build");
        assert_eq!(d.payload.job_info.instance_id, "");
        assert_eq!(d.payload.runner_info.timeout, 60);
        assert!(d.payload.features.failure_reasons.is_empty());
        assert!(d.payload.dependencies[0].artifacts_file.is_some());
        let paths: Vec<&str> = d.ignored.iter().map(|e| e.path.as_str()).collect();
        for p in [
            "job_info.instance_id",
            "job_info.queue_size",
            "job_info.time_in_queue_seconds",
            "runner_info.uuid",
            "features.failure_reasons[1]",
            "features.trace_sections",
            "secrets",
            "dependencies[0].artifacts_file.filename",
            "dependencies[0].artifacts_file.size",
        ] {
            assert!(paths.contains(&p), "{p} not in {paths:?}");
        }
    }

    #[test]
    fn a_whole_job_info_of_the_wrong_type_is_ignored() {
        let d = JobPayload::from_value_lenient(json!({"id": 1, "job_info": "x"})).unwrap();
        assert_eq!(d.payload.job_info.name, "");
        assert_eq!(d.ignored[0].path, "job_info");
    }

    #[test]
    fn fields_that_decide_what_runs_still_fail() {
        for (v, path) in [
            (
                json!({"id": 1, "steps": [{"name": "script", "script": "echo"}]}),
                "steps[0].script",
            ),
            (
                json!({"id": 1, "runner_info": {"timeout": "1h"}}),
                "runner_info.timeout",
            ),
            (
                json!({"id": 1, "variables": [{"key": "PW", "value": 12345, "masked": true}]}),
                "variables[0].value",
            ),
            (
                json!({"id": 1, "dependencies": [{"id": 2, "artifacts_file": "x"}]}),
                "dependencies[0].artifacts_file",
            ),
            (json!({"id": "7"}), "id"),
        ] {
            let e = JobPayload::from_value_lenient(v).unwrap_err();
            assert_eq!(e.path, path);
        }
    }

    #[test]
    fn error_messages_do_not_repeat_the_values() {
        let e = JobPayload::from_value_lenient(
            json!({"variables": [{"key": "PW", "value": 987654321, "masked": true}]}),
        )
        .unwrap_err();
        assert!(!e.message.contains("987654321"), "{e}");
        let e = JobPayload::from_value_lenient(json!({"runner_info": {"timeout": "hunter2"}}))
            .unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert!(e.message.contains("invalid type: string"), "{e}");
        assert_eq!(redact_literals("a \"b\" `1` \"open"), "a \"…\" `…` \"…");
    }
}
