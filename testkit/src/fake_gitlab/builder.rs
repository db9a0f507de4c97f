//! Building the jobs the fake hands out: GitLab's job payload (reference §1.4) as JSON.

use serde_json::{Value, json};

/// GitLab's `features.failure_reasons` as a current GitLab sends it.
pub const GITLAB_FAILURE_REASONS: &[&str] = &[
    "unknown_failure",
    "script_failure",
    "api_failure",
    "stuck_or_timeout_failure",
    "runner_system_failure",
    "missing_dependency_failure",
    "runner_unsupported",
    "stale_schedule",
    "job_execution_timeout",
    "archived_failure",
    "unmet_prerequisites",
    "scheduler_failure",
    "data_integrity_failure",
    "forward_deployment_failure",
    "user_blocked",
    "project_deleted",
    "image_pull_failure",
    "runner_configuration_error",
    "runner_external_dependency_failure",
];

/// A job to enqueue. The payload is assembled when the job is handed out, so a dependency's
/// `artifacts_file` reflects what it uploaded by then.
#[derive(Debug, Clone)]
pub struct JobBuilder {
    pub(crate) name: String,
    pub(crate) stage: String,
    pub(crate) script: Vec<String>,
    pub(crate) after_script: Vec<String>,
    pub(crate) variables: Vec<Value>,
    pub(crate) artifacts: Vec<Value>,
    pub(crate) dependencies: Vec<i64>,
    pub(crate) timeout: u64,
    pub(crate) failure_reasons: Vec<String>,
    pub(crate) overrides: Vec<(String, Value)>,
    pub(crate) raw: Option<Value>,
}

impl JobBuilder {
    /// A job named `name` in stage `test` with an empty script, a 1 h timeout, and
    /// `GIT_STRATEGY=none` (the fake serves no repository).
    pub fn new(name: impl Into<String>) -> JobBuilder {
        JobBuilder {
            name: name.into(),
            stage: "test".into(),
            script: Vec::new(),
            after_script: Vec::new(),
            variables: vec![
                json!({"key": "GIT_STRATEGY", "value": "none", "public": true, "masked": false}),
            ],
            artifacts: Vec::new(),
            dependencies: Vec::new(),
            timeout: 3600,
            failure_reasons: GITLAB_FAILURE_REASONS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            overrides: Vec::new(),
            raw: None,
        }
    }

    /// The stage.
    pub fn stage(mut self, stage: impl Into<String>) -> Self {
        self.stage = stage.into();
        self
    }

    /// The `script` step's lines (before_script + script).
    pub fn script<I: IntoIterator<Item = S>, S: Into<String>>(mut self, lines: I) -> Self {
        self.script = lines.into_iter().map(Into::into).collect();
        self
    }

    /// The `after_script` step's lines.
    pub fn after_script<I: IntoIterator<Item = S>, S: Into<String>>(mut self, lines: I) -> Self {
        self.after_script = lines.into_iter().map(Into::into).collect();
        self
    }

    /// A public variable.
    pub fn variable(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.variables.push(
            json!({"key": key.into(), "value": value.into(), "public": true, "masked": false}),
        );
        self
    }

    /// A masked variable.
    pub fn masked_variable(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.variables.push(
            json!({"key": key.into(), "value": value.into(), "public": false, "masked": true}),
        );
        self
    }

    /// An `archive` artifact (zip) of `paths`, uploaded on success.
    pub fn artifact_paths<I: IntoIterator<Item = S>, S: Into<String>>(mut self, paths: I) -> Self {
        let paths: Vec<String> = paths.into_iter().map(Into::into).collect();
        self.artifacts.push(json!({
            "name": "artifacts", "untracked": false, "paths": paths, "exclude": [],
            "when": "on_success", "artifact_type": "archive", "artifact_format": "zip", "expire_in": "1 day"
        }));
        self
    }

    /// Downloads the artifacts of the job with this id (its token and `artifacts_file` are
    /// filled in at hand-out).
    pub fn dependency(mut self, job_id: i64) -> Self {
        self.dependencies.push(job_id);
        self
    }

    /// `runner_info.timeout` in seconds.
    pub fn timeout_secs(mut self, secs: u64) -> Self {
        self.timeout = secs;
        self
    }

    /// `features.failure_reasons`.
    pub fn failure_reasons<I: IntoIterator<Item = S>, S: Into<String>>(
        mut self,
        reasons: I,
    ) -> Self {
        self.failure_reasons = reasons.into_iter().map(Into::into).collect();
        self
    }

    /// Sets a top-level field of the payload to `value` (after everything else), e.g. to
    /// make it malformed: `.field("steps", json!("not a list"))`.
    pub fn field(mut self, key: impl Into<String>, value: Value) -> Self {
        self.overrides.push((key.into(), value));
        self
    }

    /// Hands out exactly `payload` (its `id` and `token` are still set by the fake).
    pub fn raw(mut self, payload: Value) -> Self {
        self.raw = Some(payload);
        self
    }

    /// The payload for job `id` with `token`; `dependencies` gives `(id, name, token,
    /// artifacts_file)` of each dependency.
    pub(crate) fn payload(&self, id: i64, token: &str, dependencies: Vec<Value>) -> Value {
        if let Some(raw) = &self.raw {
            let mut v = raw.clone();
            if let Some(o) = v.as_object_mut() {
                o.insert("id".into(), json!(id));
                o.insert("token".into(), json!(token));
            }
            return v;
        }
        let mut steps = vec![json!({
            "name": "script", "script": self.script, "timeout": self.timeout,
            "when": "on_success", "allow_failure": false
        })];
        if !self.after_script.is_empty() {
            steps.push(json!({
                "name": "after_script", "script": self.after_script, "timeout": self.timeout,
                "when": "always", "allow_failure": true
            }));
        }
        let mut v = json!({
            "id": id,
            "token": token,
            "allow_git_fetch": false,
            "job_info": {
                "id": id, "name": self.name, "stage": self.stage, "pipeline_id": 1000,
                "project_id": 7, "project_name": "project", "project_full_path": "group/project"
            },
            "git_info": {
                "repo_url": format!("http://gitlab-ci-token:{token}@gitlab.invalid/group/project.git"),
                "ref": "main", "sha": "0123456789012345678901234567890123456789",
                "before_sha": "0000000000000000000000000000000000000000", "ref_type": "branch",
                "refspecs": ["+refs/heads/main:refs/remotes/origin/main"], "depth": 20
            },
            "runner_info": {"timeout": self.timeout},
            "variables": self.variables,
            "steps": steps,
            "image": null,
            "services": [],
            "artifacts": self.artifacts,
            "cache": [],
            "credentials": [],
            "dependencies": dependencies,
            "features": {"trace_sections": true, "failure_reasons": self.failure_reasons}
        });
        if let Some(o) = v.as_object_mut() {
            for (k, val) in &self.overrides {
                o.insert(k.clone(), val.clone());
            }
        }
        v
    }
}
