//! The job model: GitLab's job payload (the body of a `201` from `POST /api/v4/jobs/request`).
//!
//! Decoding is lenient: unknown fields are ignored, missing or `null` fields take their
//! defaults, and [`JobPayload::from_value_lenient`] also leaves informational fields of an
//! unexpected type at their defaults. A payload that does not fit elsewhere (a string where a
//! step's timeout belongs) is a [`PayloadError`] naming the field path, e.g.
//! `steps[0].timeout`; its message never repeats the offending value.

mod artifact;
pub mod feature_flags;
mod image;
mod info;
mod lenient;
mod nullable;
mod step;
mod variable;

pub use artifact::{Artifact, ArtifactsFile, Cache, CachePolicy, Credential, Dependency};
pub use image::{DockerOptions, ExecutorOptions, Image, KubernetesOptions, Port};
pub use info::{DEFAULT_JOB_TIMEOUT_SECS, Features, GitInfo, JobInfo, RunnerInfo};
pub use lenient::LenientPayload;
pub use step::{
    HOOK_POST_GET_SOURCES, HOOK_PRE_GET_SOURCES, Hook, STEP_AFTER_SCRIPT, STEP_SCRIPT, Step, When,
};
pub use variable::{Variable, is_shell_name};

use flotilla_fleet::Secret;
use nullable::nullable;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A job as GitLab hands it to a runner; `flotilla exec` compiles `.gitlab-ci.yml` into the
/// same shape.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JobPayload {
    /// The job id (`CI_JOB_ID`).
    #[serde(deserialize_with = "nullable")]
    pub id: i64,
    /// The job token (`CI_JOB_TOKEN`): authenticates this job to GitLab.
    #[serde(deserialize_with = "nullable")]
    pub token: Secret<String>,
    /// Whether the project's default git strategy is `fetch` (else `clone`).
    #[serde(deserialize_with = "nullable")]
    pub allow_git_fetch: bool,
    /// Who the job is.
    #[serde(deserialize_with = "nullable")]
    pub job_info: JobInfo,
    /// What to check out.
    #[serde(deserialize_with = "nullable")]
    pub git_info: GitInfo,
    /// Limits for this run.
    #[serde(deserialize_with = "nullable")]
    pub runner_info: RunnerInfo,
    /// All variables; later entries override earlier ones with the same key.
    #[serde(deserialize_with = "nullable")]
    pub variables: Vec<Variable>,
    /// The steps: `script` (before_script + script), `after_script`, `release`.
    #[serde(deserialize_with = "nullable")]
    pub steps: Vec<Step>,
    /// `pre_get_sources_script` / `post_get_sources_script`.
    #[serde(deserialize_with = "nullable")]
    pub hooks: Vec<Hook>,
    /// The job's image; `None` or an empty name when the job names none.
    #[serde(deserialize_with = "nullable")]
    pub image: Option<Image>,
    /// Service containers.
    #[serde(deserialize_with = "nullable")]
    pub services: Vec<Image>,
    /// Artifacts to upload.
    #[serde(deserialize_with = "nullable")]
    pub artifacts: Vec<Artifact>,
    /// Caches to restore and save.
    #[serde(deserialize_with = "nullable")]
    pub cache: Vec<Cache>,
    /// Registry logins.
    #[serde(deserialize_with = "nullable")]
    pub credentials: Vec<Credential>,
    /// Jobs whose artifacts to download first.
    #[serde(deserialize_with = "nullable")]
    pub dependencies: Vec<Dependency>,
    /// What this GitLab supports.
    #[serde(deserialize_with = "nullable")]
    pub features: Features,
    /// External secrets (`secrets:`), passed through; this runner does not fetch them.
    #[serde(deserialize_with = "nullable")]
    pub secrets: BTreeMap<String, serde_json::Value>,
    /// GitLab Steps (`run:`) as a JSON string; when present `steps` is empty.
    #[serde(deserialize_with = "nullable")]
    pub run: Option<String>,
    /// Job inputs, passed through.
    #[serde(deserialize_with = "nullable")]
    pub inputs: Option<serde_json::Value>,
    /// Pipeline execution policy information, passed through.
    #[serde(deserialize_with = "nullable")]
    pub policy_options: Option<serde_json::Value>,
    /// Suspend/resume options, passed through.
    #[serde(deserialize_with = "nullable")]
    pub suspend_options: Option<serde_json::Value>,
    /// flotilla's own, never sent by GitLab: the sources come as an archive made by a local
    /// run instead of from a git remote.
    #[serde(skip)]
    pub local_sources: Option<LocalSources>,
    /// flotilla's own, never sent by GitLab: the runner's `[runners.feature_flags]` table,
    /// which decides a flag it names whatever the job's variables say
    /// ([`JobPayload::feature_flag`]).
    #[serde(skip)]
    pub runner_feature_flags: BTreeMap<String, bool>,
}

/// The sources of a local run (`flotilla exec`): the pipeline has already decided what
/// `GIT_STRATEGY`, `GIT_DEPTH`, `GIT_CHECKOUT` and the submodule variables ask for and archived
/// it (the commit's repository, its checkout and the working tree's uncommitted changes), so
/// the `get_sources` stage empties the build directory, runs the hooks and extracts the
/// archive instead of fetching.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LocalSources {
    /// The archive to extract into the build directory; `None` leaves it empty
    /// (`GIT_STRATEGY` `none` or `empty`).
    pub archive: Option<Dependency>,
    /// What the log says about it, one line each (what was checked out, what was applied).
    pub notices: Vec<String>,
}

/// A payload that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("job payload field `{path}`: {message}")]
pub struct PayloadError {
    /// The path of the offending field, e.g. `steps[0].timeout` (`.` for the document).
    pub path: String,
    /// What was wrong with it (quoted values replaced by `…`: they may be secrets).
    pub message: String,
}

impl PayloadError {
    /// An error at `path`; literals quoted in `message` are redacted.
    pub fn new(path: impl Into<String>, message: impl AsRef<str>) -> PayloadError {
        PayloadError {
            path: path.into(),
            message: lenient::redact_literals(message.as_ref()),
        }
    }
}

impl JobPayload {
    /// Decodes a payload from JSON bytes.
    pub fn from_json(bytes: &[u8]) -> Result<JobPayload, PayloadError> {
        let de = &mut serde_json::Deserializer::from_slice(bytes);
        serde_path_to_error::deserialize(de)
            .map_err(|e| PayloadError::new(e.path().to_string(), e.inner().to_string()))
    }

    /// Decodes a payload from an already parsed JSON value.
    pub fn from_value(value: serde_json::Value) -> Result<JobPayload, PayloadError> {
        serde_path_to_error::deserialize(value)
            .map_err(|e| PayloadError::new(e.path().to_string(), e.inner().to_string()))
    }

    /// Whether `CI_DEBUG_TRACE` is on, read as the script engine reads it (the last
    /// definition wins; `1`, `t` or `true` in any case, see [`crate::vars::truthy`]).
    pub fn debug_trace(&self) -> bool {
        self.variables
            .iter()
            .rev()
            .find(|v| v.key == "CI_DEBUG_TRACE")
            .is_some_and(|v| crate::vars::truthy(&v.value))
    }

    /// Whether the GitLab Runner feature flag `name` (`FF_...`) is on for this job, as GitLab
    /// Runner's `Build.IsFeatureFlagOn` decides: the runner's `[runners.feature_flags]` value
    /// when the table names the flag; else its last definition among the variables (the
    /// runner's `environment` among them), true as Go's `strconv.ParseBool` reads it (`1`,
    /// `t`, `T`, `true`, `TRUE`, `True`; no blanks around). The one rule for every flag
    /// flotilla reads.
    pub fn feature_flag(&self, name: &str) -> bool {
        if let Some(on) = self.runner_feature_flags.get(name) {
            return *on;
        }
        self.variables
            .iter()
            .rev()
            .find(|v| v.key == name)
            .is_some_and(|v| feature_flags::parse_bool(&v.value))
    }

    /// The step with this name, if any.
    pub fn step(&self, name: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.name == name)
    }

    /// The `script` step (before_script + script).
    pub fn script_step(&self) -> Option<&Step> {
        self.step(STEP_SCRIPT)
    }

    /// The `after_script` step.
    pub fn after_script_step(&self) -> Option<&Step> {
        self.step(STEP_AFTER_SCRIPT)
    }

    /// The commands of the hook with this name.
    pub fn hook(&self, name: &str) -> &[String] {
        self.hooks
            .iter()
            .find(|h| h.name == name)
            .map(|h| h.script.as_slice())
            .unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests;
