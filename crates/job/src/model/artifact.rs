//! `artifacts[]`, `cache[]`, `dependencies[]` and `credentials[]`.

use super::nullable::nullable;
use super::step::When;
use flotilla_fleet::Secret;
use serde::{Deserialize, Serialize};

/// One artifact to upload after the job.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Artifact {
    /// The archive's name (`artifacts:name`); empty means `artifacts`.
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    /// Also include every file git does not track.
    #[serde(deserialize_with = "nullable")]
    pub untracked: bool,
    /// Glob patterns (with `**`) relative to the project directory; a matched directory is
    /// included with everything under it.
    #[serde(deserialize_with = "nullable")]
    pub paths: Vec<String>,
    /// Glob patterns of entries to leave out (not recursive, like GitLab).
    #[serde(deserialize_with = "nullable")]
    pub exclude: Vec<String>,
    /// When to upload.
    #[serde(deserialize_with = "nullable")]
    pub when: When,
    /// `archive` (the default), or a report type (`junit`, `dotenv`, ...).
    #[serde(deserialize_with = "nullable")]
    pub artifact_type: String,
    /// `zip` (the default), `gzip`, `raw`, ...
    #[serde(deserialize_with = "nullable")]
    pub artifact_format: String,
    /// How long GitLab keeps the artifact, e.g. `7d`.
    #[serde(deserialize_with = "nullable")]
    pub expire_in: String,
}

impl Artifact {
    /// The artifact type, `archive` when unset.
    pub fn artifact_type(&self) -> &str {
        if self.artifact_type.is_empty() {
            "archive"
        } else {
            &self.artifact_type
        }
    }

    /// The artifact format, `zip` when unset.
    pub fn artifact_format(&self) -> &str {
        if self.artifact_format.is_empty() {
            "zip"
        } else {
            &self.artifact_format
        }
    }
}

/// Whether a cache is restored, saved, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum CachePolicy {
    /// Restore before the script and save after it (the default).
    #[default]
    #[serde(rename = "pull-push")]
    PullPush,
    /// Restore only.
    #[serde(rename = "pull")]
    Pull,
    /// Save only.
    #[serde(rename = "push")]
    Push,
    /// A policy this runner does not know; treated as `pull-push`.
    #[serde(other)]
    Unknown,
}

impl CachePolicy {
    /// Whether the cache is restored before the script.
    pub fn pulls(self) -> bool {
        !matches!(self, CachePolicy::Push)
    }

    /// Whether the cache is saved after the script.
    pub fn pushes(self) -> bool {
        !matches!(self, CachePolicy::Pull)
    }
}

/// One cache.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Cache {
    /// The key (variables are expanded); empty means `default`.
    #[serde(deserialize_with = "nullable")]
    pub key: String,
    /// Also cache every file git does not track.
    #[serde(deserialize_with = "nullable")]
    pub untracked: bool,
    /// Restore, save, or both.
    #[serde(deserialize_with = "nullable")]
    pub policy: CachePolicy,
    /// Glob patterns relative to the project directory.
    #[serde(deserialize_with = "nullable")]
    pub paths: Vec<String>,
    /// When to save the cache.
    #[serde(deserialize_with = "nullable")]
    pub when: When,
    /// Keys to restore from, in order, when `key` has no archive.
    #[serde(deserialize_with = "nullable")]
    pub fallback_keys: Vec<String>,
}

/// The artifacts archive of a dependency.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ArtifactsFile {
    /// The archive's file name.
    #[serde(deserialize_with = "nullable")]
    pub filename: String,
    /// Its size in bytes.
    #[serde(deserialize_with = "nullable")]
    pub size: u64,
}

/// A job whose artifacts this job downloads before its script.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Dependency {
    /// The dependency's job id.
    #[serde(deserialize_with = "nullable")]
    pub id: i64,
    /// The dependency's job name.
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    /// The token to download its artifacts with.
    #[serde(deserialize_with = "nullable")]
    pub token: Secret<String>,
    /// The archive; absent when the dependency has no artifacts.
    #[serde(deserialize_with = "nullable")]
    pub artifacts_file: Option<ArtifactsFile>,
}

/// A registry login the job may need.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Credential {
    /// `registry`.
    #[serde(rename = "type", deserialize_with = "nullable")]
    pub kind: String,
    /// The registry URL.
    #[serde(deserialize_with = "nullable")]
    pub url: String,
    /// The user name, usually `gitlab-ci-token`.
    #[serde(deserialize_with = "nullable")]
    pub username: String,
    /// The password, usually the job token.
    #[serde(deserialize_with = "nullable")]
    pub password: Secret<String>,
}
