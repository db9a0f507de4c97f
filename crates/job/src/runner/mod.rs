//! Running a job: the stages in GitLab's order, each a generated script (or a tar transfer)
//! run in the [`Environment`], with timeouts, cancellation, masking and a result GitLab
//! understands.
//!
//! Stages: `prepare_executor` (the environment's own `prepare`), `get_sources`,
//! `restore_cache`, `download_artifacts`, `step_script` (before_script + script), other steps
//! (`step_release`), `after_script` (also after a failure or a graceful cancel; its own
//! timeout; its result is ignored), `archive_cache`, `upload_artifacts_on_success` /
//! `_on_failure`, `cleanup_file_variables` (always).

mod cancel;
mod guard;
mod result;
mod run;
mod transfer;

pub use cancel::JobCancel;
pub use result::{FailureReason, JobResult, Outcome, StageReport};

use crate::env::Environment;
use crate::model::JobPayload;
use crate::store::{ArtifactStore, CacheStore};
use crate::trace::{DEFAULT_OUTPUT_LIMIT, TraceSink};
use crate::vars::RunnerIdentity;
use std::path::PathBuf;
use std::time::Duration;

/// Tunables of a run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Who runs the job (`CI_RUNNER_*`).
    pub runner: RunnerIdentity,
    /// `CI_CONCURRENT_ID`: the slot's index on its instance.
    pub concurrent_id: u32,
    /// `CI_CONCURRENT_PROJECT_ID`.
    pub concurrent_project_id: u32,
    /// Bytes of log kept before output is dropped (GitLab's `output_limit`, 4 MiB).
    pub output_limit: u64,
    /// The runner's `debug_trace_disabled`: `CI_DEBUG_TRACE` is ignored, with a warning.
    pub debug_trace_disabled: bool,
    /// The runner's `pre_build_script`: one command (lines and all) run in the `script`
    /// step before the job's own commands.
    pub pre_build_script: Option<String>,
    /// The runner's `post_build_script`: one command run in the `script` step after the job's
    /// own commands (not when they failed: the step stops at the first failure).
    pub post_build_script: Option<String>,
    /// The runner's `pre_get_sources_script`: one command run before the job's own
    /// `hooks:pre_get_sources_script`, where they run.
    pub pre_get_sources_script: Option<String>,
    /// The runner's `post_get_sources_script`: one command run after the job's own
    /// `hooks:post_get_sources_script`.
    pub post_get_sources_script: Option<String>,
    /// after_script's timeout unless `RUNNER_AFTER_SCRIPT_TIMEOUT` says otherwise (5 min).
    pub after_script_timeout: Duration,
    /// The cleanup stage's timeout (it runs even after an abort or a timeout).
    pub cleanup_timeout: Duration,
    /// How long a stopped stage gets to wind down before it is abandoned.
    pub stop_grace: Duration,
    /// Where archives are staged on the manager (the system's temporary directory when
    /// `None`).
    pub scratch_dir: Option<PathBuf>,
    /// Lines the job's log shows first in its `prepare_executor` section (the instance's
    /// addresses with `log_internal_ip`).
    pub prepare_lines: Vec<String>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            runner: RunnerIdentity::default(),
            concurrent_id: 0,
            concurrent_project_id: 0,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            debug_trace_disabled: false,
            pre_build_script: None,
            post_build_script: None,
            pre_get_sources_script: None,
            post_get_sources_script: None,
            after_script_timeout: Duration::from_secs(5 * 60),
            cleanup_timeout: Duration::from_secs(60),
            stop_grace: Duration::from_secs(30),
            scratch_dir: None,
            prepare_lines: Vec::new(),
        }
    }
}

/// Runs jobs in one environment with given stores.
pub struct JobRunner<'a> {
    /// Where the stages run.
    pub env: &'a dyn Environment,
    /// Where artifacts go and come from.
    pub artifacts: &'a dyn ArtifactStore,
    /// Where caches go and come from.
    pub cache: &'a dyn CacheStore,
    /// Tunables.
    pub options: RunOptions,
}

impl std::fmt::Debug for JobRunner<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobRunner")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<'a> JobRunner<'a> {
    /// A runner with default options.
    pub fn new(
        env: &'a dyn Environment,
        artifacts: &'a dyn ArtifactStore,
        cache: &'a dyn CacheStore,
    ) -> JobRunner<'a> {
        JobRunner {
            env,
            artifacts,
            cache,
            options: RunOptions::default(),
        }
    }

    /// Replaces the options.
    pub fn with_options(mut self, options: RunOptions) -> JobRunner<'a> {
        self.options = options;
        self
    }

    /// Runs `job` to the end, streaming its masked log into `sink`. `cancel` may be fired at
    /// any time (see [`JobCancel`]). Never panics on job or environment failures: they end up
    /// in the result.
    pub async fn run(
        &self,
        job: &JobPayload,
        sink: &mut dyn TraceSink,
        cancel: &JobCancel,
    ) -> JobResult {
        run::run(self, job, sink, cancel).await
    }
}
