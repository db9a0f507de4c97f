//! The descriptive parts of the payload: `job_info`, `git_info`, `runner_info`, `features`.

use super::nullable::nullable;
use flotilla_fleet::Secret;
use serde::{Deserialize, Serialize};

/// `job_info`: who the job is and where it comes from.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JobInfo {
    /// The job id (newer GitLab also sends it here).
    #[serde(deserialize_with = "nullable")]
    pub id: i64,
    /// The job name (`CI_JOB_NAME`).
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    /// The stage name (`CI_JOB_STAGE`).
    #[serde(deserialize_with = "nullable")]
    pub stage: String,
    /// The pipeline id (`CI_PIPELINE_ID`).
    #[serde(deserialize_with = "nullable")]
    pub pipeline_id: i64,
    /// The project id (`CI_PROJECT_ID`).
    #[serde(deserialize_with = "nullable")]
    pub project_id: i64,
    /// The project name (`CI_PROJECT_NAME`).
    #[serde(deserialize_with = "nullable")]
    pub project_name: String,
    /// The project's full path, `group/sub/project` (`CI_PROJECT_PATH`).
    #[serde(deserialize_with = "nullable")]
    pub project_full_path: String,
    /// The namespace id.
    #[serde(deserialize_with = "nullable")]
    pub namespace_id: i64,
    /// The root namespace id.
    #[serde(deserialize_with = "nullable")]
    pub root_namespace_id: i64,
    /// The organization id.
    #[serde(deserialize_with = "nullable")]
    pub organization_id: i64,
    /// The GitLab instance id: a string (`Gitlab::GlobalAnonymousId.instance_id` in Rails,
    /// `InstanceID string` in GitLab Runner's `common/spec/spec.go`).
    #[serde(deserialize_with = "nullable")]
    pub instance_id: String,
    /// The GitLab instance uuid.
    #[serde(deserialize_with = "nullable")]
    pub instance_uuid: String,
    /// The user who started the pipeline.
    #[serde(deserialize_with = "nullable")]
    pub user_id: i64,
    /// The scoped user id, when the job runs on behalf of another user.
    #[serde(deserialize_with = "nullable")]
    pub scoped_user_id: Option<i64>,
    /// How long the job waited in GitLab's queue.
    #[serde(deserialize_with = "nullable")]
    pub time_in_queue_seconds: f64,
    /// Jobs of this project running on instance runners: a string such as `3`, `60+` or
    /// `+Inf` (Rails' `Ci::BuildRunnerPresenter`; `string` in GitLab Runner's spec).
    #[serde(deserialize_with = "nullable")]
    pub project_jobs_running_on_instance_runners_count: String,
    /// The queue size when the job was picked.
    #[serde(deserialize_with = "nullable")]
    pub queue_size: i64,
    /// The queue depth when the job was picked.
    #[serde(deserialize_with = "nullable")]
    pub queue_depth: i64,
}

/// `git_info`: what to check out.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct GitInfo {
    /// The repository URL. GitLab embeds the job token in it
    /// (`https://gitlab-ci-token:<token>@host/group/project.git`), hence a secret. A local
    /// path or a `file://` URL works too.
    #[serde(deserialize_with = "nullable")]
    pub repo_url: Secret<String>,
    /// `sha1` (default) or `sha256`.
    #[serde(deserialize_with = "nullable")]
    pub repo_object_format: String,
    /// The branch or tag name (`CI_COMMIT_REF_NAME`).
    #[serde(rename = "ref", deserialize_with = "nullable")]
    pub git_ref: String,
    /// The exact commit to check out (`CI_COMMIT_SHA`).
    #[serde(deserialize_with = "nullable")]
    pub sha: String,
    /// The previous commit on the ref (`CI_COMMIT_BEFORE_SHA`).
    #[serde(deserialize_with = "nullable")]
    pub before_sha: String,
    /// `branch` or `tag`.
    #[serde(deserialize_with = "nullable")]
    pub ref_type: String,
    /// The refspecs to fetch; empty means "derive from `ref` and `ref_type`".
    #[serde(deserialize_with = "nullable")]
    pub refspecs: Vec<String>,
    /// The fetch depth; 0 means the full history.
    #[serde(deserialize_with = "nullable")]
    pub depth: u32,
    /// Whether the ref is protected.
    #[serde(deserialize_with = "nullable")]
    pub protected: Option<bool>,
}

/// `runner_info`: limits GitLab imposes on this run.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RunnerInfo {
    /// The runner manager's uuid, when sent.
    #[serde(deserialize_with = "nullable")]
    pub uuid: String,
    /// The job timeout in seconds; 0 means the default (7200 s).
    #[serde(deserialize_with = "nullable")]
    pub timeout: u64,
    /// The URL of the interactive session, when sessions are enabled.
    #[serde(deserialize_with = "nullable")]
    pub runner_session_url: String,
}

/// The job timeout GitLab Runner applies when `runner_info.timeout` is 0.
pub const DEFAULT_JOB_TIMEOUT_SECS: u64 = 7200;

impl RunnerInfo {
    /// The effective job timeout in seconds.
    pub fn timeout_secs(&self) -> u64 {
        if self.timeout == 0 {
            DEFAULT_JOB_TIMEOUT_SECS
        } else {
            self.timeout
        }
    }
}

/// `features`: what this GitLab instance supports or asks of the runner.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Features {
    /// Whether GitLab renders section markers.
    #[serde(deserialize_with = "nullable")]
    pub trace_sections: bool,
    /// Prefixes of tokens to mask in the trace, in addition to the defaults.
    #[serde(deserialize_with = "nullable")]
    pub token_mask_prefixes: Vec<String>,
    /// The failure reasons this GitLab accepts beyond the always-supported ones.
    #[serde(deserialize_with = "nullable")]
    pub failure_reasons: Vec<String>,
    /// OpenTelemetry tracing parameters (passed through, unused).
    #[serde(deserialize_with = "nullable")]
    pub tracing: Option<serde_json::Value>,
}
