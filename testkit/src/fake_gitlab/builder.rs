//! Building the jobs the fake hands out: GitLab's job payload as Rails renders it
//! (`lib/api/entities/ci/job_request/response.rb` and the entities it uses, fed by
//! `app/presenters/ci/build_runner_presenter.rb`).

use serde_json::{Value, json};

/// GitLab's `features.failure_reasons`: the keys of Rails' `Enums::Ci::CommitStatus`
/// `failure_reasons` that a runner may send, as a current GitLab lists them.
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

/// The format and default file name of a report type: Rails'
/// `Enums::Ci::JobArtifact::REPORT_TYPES` and `DEFAULT_FILE_NAMES`
/// (`app/models/concerns/enums/ci/job_artifact.rb`), for the types tests use.
pub fn report_format(kind: &str) -> Option<(&'static str, &'static str)> {
    Some(match kind {
        "junit" => ("gzip", "junit.xml"),
        "dotenv" => ("gzip", ".env"),
        "cobertura" => ("gzip", "cobertura-coverage.xml"),
        "jacoco" => ("gzip", "jacoco-coverage.xml"),
        "metrics" => ("gzip", "metrics.txt"),
        "annotations" => ("gzip", "gl-annotations.json"),
        "cyclonedx" => ("gzip", "gl-sbom.cdx.json"),
        "lsif" => ("zip", "lsif.json"),
        "codequality" => ("raw", "gl-code-quality-report.json"),
        "sast" => ("raw", "gl-sast-report.json"),
        "secret_detection" => ("raw", "gl-secret-detection-report.json"),
        "dependency_scanning" => ("raw", "gl-dependency-scanning-report.json"),
        "terraform" => ("raw", "tfplan.json"),
        "accessibility" => ("raw", "gl-accessibility.json"),
        "performance" => ("raw", "performance.json"),
        _ => return None,
    })
}

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

    /// A masked variable of type file (the job sees a path to a file holding `value`).
    pub fn masked_file_variable(
        mut self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        self.variables.push(json!({
            "key": key.into(), "value": value.into(), "public": false, "masked": true, "file": true
        }));
        self
    }

    /// An `archive` artifact (zip) of `paths`, uploaded on success.
    pub fn artifact_paths<I: IntoIterator<Item = S>, S: Into<String>>(mut self, paths: I) -> Self {
        let paths: Vec<String> = paths.into_iter().map(Into::into).collect();
        self.artifacts.push(json!({
            "name": "artifacts", "untracked": false, "paths": paths,
            "when": "on_success", "artifact_type": "archive", "artifact_format": "zip", "expire_in": "1 day"
        }));
        self
    }

    /// An `artifacts:reports:<kind>` entry of `paths`, as Rails' `BuildArtifact.for_report`
    /// renders it: the type's format and default file name, `when: always`.
    ///
    /// # Panics
    ///
    /// When `kind` is not in [`report_format`]'s table.
    pub fn report<I: IntoIterator<Item = S>, S: Into<String>>(
        mut self,
        kind: &str,
        paths: I,
    ) -> Self {
        let (format, name) =
            report_format(kind).unwrap_or_else(|| panic!("no report type {kind:?} in the table"));
        let paths: Vec<String> = paths.into_iter().map(Into::into).collect();
        self.artifacts.push(json!({
            "name": name, "paths": paths, "when": "always", "expire_in": "1 day",
            "artifact_type": kind, "artifact_format": format
        }));
        self
    }

    /// Downloads the artifacts of the job with this id (its `artifacts_file` is filled in at
    /// hand-out).
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

    /// The payload for job `id` with `token` at `url`; `dependencies` are the rendered
    /// `dependencies[]`, `extra_variables` the dotenv variables its dependencies reported.
    pub(crate) fn payload(
        &self,
        id: i64,
        token: &str,
        url: &str,
        dependencies: Vec<Value>,
        extra_variables: Vec<Value>,
    ) -> Value {
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
        let host = url.trim_start_matches("http://");
        // Predefined variables come first and the job's own after them, as Rails'
        // `Ci::Build#variables` orders them (later entries win on the runner).
        let mut variables = vec![
            json!({"key": "CI", "value": "true", "public": true, "masked": false}),
            json!({"key": "GITLAB_CI", "value": "true", "public": true, "masked": false}),
            json!({"key": "CI_JOB_ID", "value": id.to_string(), "public": true, "masked": false}),
            json!({"key": "CI_JOB_NAME", "value": self.name, "public": true, "masked": false}),
            json!({"key": "CI_JOB_STAGE", "value": self.stage, "public": true, "masked": false}),
            // `lib/gitlab/ci/variables/builder.rb` (`predefined_variables`): always sent, the
            // `parallel` total or 1.
            json!({"key": "CI_NODE_TOTAL", "value": "1", "public": true, "masked": false}),
            json!({"key": "CI_JOB_TOKEN", "value": token, "public": false, "masked": true}),
            json!({"key": "CI_PIPELINE_ID", "value": "1000", "public": true, "masked": false}),
            json!({"key": "CI_PROJECT_ID", "value": "7", "public": true, "masked": false}),
            json!({"key": "CI_PROJECT_NAME", "value": "project", "public": true, "masked": false}),
            json!({"key": "CI_PROJECT_PATH", "value": "group/project", "public": true, "masked": false}),
            // `app/models/project.rb` (`predefined_ci_server_variables`, `api_variables`,
            // `predefined_project_variables`) and `app/models/ci/build.rb`
            // (`persisted_variables`), `builder.rb` (`user_variables`).
            json!({"key": "CI_SERVER_URL", "value": url, "public": true, "masked": false}),
            json!({"key": "CI_SERVER_HOST", "value": host.split(':').next().unwrap_or(host), "public": true, "masked": false}),
            json!({"key": "CI_API_V4_URL", "value": format!("{url}/api/v4"), "public": true, "masked": false}),
            json!({"key": "CI_PROJECT_URL", "value": format!("{url}/group/project"), "public": true, "masked": false}),
            json!({"key": "CI_PIPELINE_URL", "value": format!("{url}/group/project/-/pipelines/1000"), "public": true, "masked": false}),
            json!({"key": "CI_JOB_URL", "value": format!("{url}/group/project/-/jobs/{id}"), "public": true, "masked": false}),
            json!({"key": "CI_JOB_STARTED_AT", "value": "2026-11-27T12:00:00Z", "public": true, "masked": false}),
            json!({"key": "GITLAB_USER_LOGIN", "value": "root", "public": true, "masked": false}),
            json!({"key": "GITLAB_USER_ID", "value": "1", "public": true, "masked": false}),
        ];
        variables.extend(self.variables.iter().cloned());
        variables.extend(extra_variables);
        let mut v = json!({
            "id": id,
            "token": token,
            "allow_git_fetch": false,
            // Every field of `job_info.rb`, typed as Rails renders them: `instance_id` and
            // `instance_uuid` are strings (`Gitlab::GlobalAnonymousId`), and
            // `project_jobs_running_on_instance_runners_count` is `"+Inf"` for a runner that
            // is not an instance runner (`Ci::BuildRunnerPresenter`). `time_in_queue_seconds`
            // is whole seconds (`app/models/ci/build.rb`: `(Time.current - queued_at).seconds.to_i`).
            "job_info": {
                "id": id, "name": self.name, "stage": self.stage, "pipeline_id": 1000,
                "project_id": 7, "project_name": "project", "project_full_path": "group/project",
                "namespace_id": 3, "root_namespace_id": 2, "organization_id": 1,
                "instance_id": "2b5e7d2c0a7c4d3e9f4f8a1b6c0d9e7a",
                "instance_uuid": "7a3c1f0e-5b2d-4c8e-9f6a-0d1e2f3a4b5c",
                "user_id": 11, "scoped_user_id": null, "time_in_queue_seconds": 0,
                "project_jobs_running_on_instance_runners_count": "+Inf",
                "queue_size": 1, "queue_depth": 0
            },
            "git_info": {
                "repo_url": format!("http://gitlab-ci-token:{token}@{host}/group/project.git"),
                "repo_object_format": "sha1",
                "ref": "main", "sha": "0123456789012345678901234567890123456789",
                "before_sha": "0000000000000000000000000000000000000000", "ref_type": "branch",
                "refspecs": ["+refs/pipelines/1000:refs/pipelines/1000", "+refs/heads/main:refs/remotes/origin/main"],
                "depth": 20, "protected": false
            },
            "runner_info": {"timeout": self.timeout, "runner_session_url": null},
            "variables": variables,
            "steps": steps,
            "hooks": [],
            "image": null,
            "services": [],
            "artifacts": self.artifacts,
            "cache": [],
            "credentials": [],
            "features": {"trace_sections": true, "failure_reasons": self.failure_reasons},
            "dependencies": dependencies,
        });
        if let Some(o) = v.as_object_mut() {
            for (k, val) in &self.overrides {
                o.insert(k.clone(), val.clone());
            }
        }
        v
    }
}
