//! `steps[]` and `hooks[]`: the user's commands.

use super::nullable::nullable;
use serde::{Deserialize, Serialize};

/// The name of the step holding `before_script` + `script`.
pub const STEP_SCRIPT: &str = "script";
/// The name of the step holding `after_script`.
pub const STEP_AFTER_SCRIPT: &str = "after_script";

/// When something runs relative to the job's result (`when` of steps, artifacts and caches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// Only when the job has succeeded so far (the default).
    #[default]
    OnSuccess,
    /// Only when the job has failed.
    OnFailure,
    /// In both cases.
    Always,
    /// A value this runner does not know; treated as `on_success`.
    #[serde(other)]
    Unknown,
}

impl When {
    /// Whether something with this `when` runs given whether the job has failed.
    pub fn applies(self, job_failed: bool) -> bool {
        match self {
            When::OnSuccess | When::Unknown => !job_failed,
            When::OnFailure => job_failed,
            When::Always => true,
        }
    }
}

/// One step: `{name, script[], timeout, when, allow_failure}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Step {
    /// `script`, `after_script`, `release`, ...
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    /// The commands, one shell snippet each (may span several lines).
    #[serde(deserialize_with = "nullable")]
    pub script: Vec<String>,
    /// The step's timeout in seconds; 0 means none beyond the job's.
    #[serde(deserialize_with = "nullable")]
    pub timeout: u64,
    /// When the step runs.
    #[serde(deserialize_with = "nullable")]
    pub when: When,
    /// Whether a failure of this step leaves the job successful.
    #[serde(deserialize_with = "nullable")]
    pub allow_failure: bool,
}

/// One hook: `{name: "pre_get_sources_script" | "post_get_sources_script", script[]}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Hook {
    /// The hook's name.
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    /// The commands.
    #[serde(deserialize_with = "nullable")]
    pub script: Vec<String>,
}

/// The hook run before the sources are fetched.
pub const HOOK_PRE_GET_SOURCES: &str = "pre_get_sources_script";
/// The hook run after the sources are fetched.
pub const HOOK_POST_GET_SOURCES: &str = "post_get_sources_script";
