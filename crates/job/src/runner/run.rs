//! The stage sequence of one job.

use super::JobRunner;
use super::cancel::JobCancel;
use super::guard::{Limits, Stop, guarded};
use super::result::{FailureReason, JobResult, Outcome, StageReport};
use crate::duration::parse_go_duration;
use crate::env::{EnvError, EnvPaths, ExecCommand, ExecSpec, ExitStatus, Place};
use crate::model::{JobPayload, STEP_AFTER_SCRIPT, STEP_SCRIPT, Step, Variable};
use crate::script::{
    ANSI_BOLD_GREEN, ANSI_BOLD_RED, ANSI_RESET, ANSI_YELLOW, FetchPlace, ScriptContext,
    unexportable_names,
};
use crate::trace::{
    Masker, TracePipeline, TraceSink, TraceWriter, section_end, section_start, trace_channel,
};
use crate::vars::{JobVariables, PredefinedContext, predefined_defaults, runner_provided};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// A recorded failure: the first one decides the outcome.
#[derive(Debug, Clone)]
pub(super) struct Failure {
    pub reason: FailureReason,
    pub exit_code: Option<i32>,
    pub message: String,
}

/// The state of one run.
pub(super) struct Run<'r, 'a> {
    pub runner: &'r JobRunner<'a>,
    pub job: &'r JobPayload,
    pub vars: JobVariables,
    pub paths: EnvPaths,
    pub log: TraceWriter,
    pub cancel: JobCancel,
    pub deadline: Instant,
    pub timeout: Duration,
    pub scratch: Option<tempfile::TempDir>,
    pub scratch_seq: u32,
    pub stages: Vec<StageReport>,
    pub failure: Option<Failure>,
    /// Forced cancellation or the job deadline: nothing but cleanup runs any more.
    pub hard_stop: bool,
    pub script_started: bool,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// How a `get_sources` script did not succeed.
enum SourcesFailure {
    /// A limit or a cancel stopped it.
    Stopped(Stop),
    /// It failed: why, and what the log says.
    Failed(FailureReason, String),
}

/// Builds the job's variables as a stage with this `CI_JOB_STATUS` sees them.
fn job_variables(runner: &JobRunner<'_>, job: &JobPayload, paths: &EnvPaths) -> JobVariables {
    let o = &runner.options;
    let ctx = PredefinedContext {
        builds_dir: &paths.builds_dir,
        project_dir: &paths.project_dir,
        tmp_dir: &paths.tmp_dir,
        concurrent_id: o.concurrent_id,
        concurrent_project_id: o.concurrent_project_id,
        runner: &o.runner,
        job_status: "running",
        disposable: runner.env.disposable(),
    };
    let all = predefined_defaults(job, &ctx)
        .into_iter()
        .chain(job.variables.iter().cloned())
        .chain(runner_provided(job, &ctx))
        .chain(runner.env.variables());
    JobVariables::new(all, &paths.tmp_dir)
}

/// `job` with the runner's `pre_get_sources_script` before its own pre hook and the runner's
/// `post_get_sources_script` after its own post hook, as GitLab Runner orders them
/// (`shells/abstract.go`, `writeGetSourcesScript`); `None` when the runner sets neither.
fn with_runner_scripts(job: &JobPayload, options: &super::RunOptions) -> Option<JobPayload> {
    let set = |s: &Option<String>| s.clone().filter(|s| !s.trim().is_empty());
    let (pre, post) = (
        set(&options.pre_get_sources_script),
        set(&options.post_get_sources_script),
    );
    if pre.is_none() && post.is_none() {
        return None;
    }
    let mut job = job.clone();
    for (name, command, first) in [
        (crate::model::HOOK_PRE_GET_SOURCES, pre, true),
        (crate::model::HOOK_POST_GET_SOURCES, post, false),
    ] {
        let Some(command) = command else { continue };
        let at = match job.hooks.iter().position(|h| h.name == name) {
            Some(i) => i,
            None => {
                job.hooks.push(crate::model::Hook {
                    name: name.to_string(),
                    script: Vec::new(),
                });
                job.hooks.len() - 1
            }
        };
        let script = &mut job.hooks[at].script;
        if first {
            script.insert(0, command);
        } else {
            script.push(command);
        }
    }
    Some(job)
}

pub(super) async fn run(
    runner: &JobRunner<'_>,
    job: &JobPayload,
    sink: &mut dyn TraceSink,
    cancel: &JobCancel,
) -> JobResult {
    let started = Instant::now();
    let with_runner_hooks;
    let job = match with_runner_scripts(job, &runner.options) {
        Some(j) => {
            with_runner_hooks = j;
            &with_runner_hooks
        }
        None => job,
    };
    let paths = runner.env.paths().clone();
    let vars = job_variables(runner, job, &paths);
    let masker = Masker::for_job(
        &crate::secrets::job_secrets(job, &vars),
        &job.features.token_mask_prefixes,
    );
    let mut pipeline = TracePipeline::new(masker, runner.options.output_limit, sink);
    let (log, mut reader) = trace_channel(64);
    let timeout = Duration::from_secs(job.runner_info.timeout_secs());
    let scratch_base = runner
        .options
        .scratch_dir
        .clone()
        .unwrap_or_else(std::env::temp_dir);
    let scratch = tempfile::Builder::new()
        .prefix("flotilla-job-")
        .tempdir_in(&scratch_base);
    let mut state = Run {
        runner,
        job,
        vars,
        paths,
        log,
        cancel: cancel.clone(),
        deadline: started + timeout,
        timeout,
        scratch: None,
        scratch_seq: 0,
        stages: Vec::new(),
        failure: None,
        hard_stop: false,
        script_started: false,
    };
    let body = async move {
        match scratch {
            Ok(dir) => state.scratch = Some(dir),
            Err(e) => state.fail(
                FailureReason::RunnerSystemFailure,
                None,
                format!(
                    "creating a scratch directory in {}: {e}",
                    scratch_base.display()
                ),
            ),
        }
        state.execute().await;
        let outcome = match &state.failure {
            None => Outcome::Success,
            Some(f) => Outcome::Failed {
                reason: f.reason,
                exit_code: f.exit_code,
            },
        };
        (outcome, std::mem::take(&mut state.stages))
        // `state` (and its log writer) is dropped here, which ends the pump.
    };
    let pump = async {
        while let Some(chunk) = reader.recv().await {
            pipeline.write(&chunk).await;
        }
    };
    let ((outcome, stages), ()) = tokio::join!(body, pump);
    let trace = pipeline.finish().await;
    JobResult {
        outcome,
        trace,
        duration: started.elapsed(),
        stages,
    }
}

impl Run<'_, '_> {
    // ----- the log -------------------------------------------------------------------------

    pub(super) async fn say(&self, text: &str) {
        self.log.send(format!("{text}\n")).await;
    }

    pub(super) async fn notice(&self, text: &str) {
        self.log
            .send(format!("{ANSI_BOLD_GREEN}{text}{ANSI_RESET}\n"))
            .await;
    }

    pub(super) async fn warn(&self, text: &str) {
        self.log
            .send(format!("{ANSI_YELLOW}WARNING: {text}{ANSI_RESET}\n"))
            .await;
    }

    pub(super) async fn error(&self, text: &str) {
        self.log
            .send(format!("{ANSI_BOLD_RED}ERROR: {text}{ANSI_RESET}\n"))
            .await;
    }

    pub(super) async fn begin(&self, name: &str, header: &str) -> Instant {
        self.log
            .send(format!(
                "{}\x1b[0K\x1b[36;1m{header}{ANSI_RESET}\n",
                section_start(name, unix_now(), false)
            ))
            .await;
        Instant::now()
    }

    pub(super) async fn end(&mut self, name: &str, since: Instant, ok: bool) {
        self.log.send(section_end(name, unix_now())).await;
        self.stages.push(StageReport {
            name: name.to_owned(),
            duration: since.elapsed(),
            ok,
        });
    }

    // ----- outcome bookkeeping -------------------------------------------------------------

    pub(super) fn fail(&mut self, reason: FailureReason, exit_code: Option<i32>, message: String) {
        if self.failure.is_none() {
            self.failure = Some(Failure {
                reason,
                exit_code,
                message,
            });
        }
    }

    pub(super) fn failed(&self) -> bool {
        self.failure.is_some() || self.cancel.is_canceled()
    }

    /// Records why work was stopped.
    pub(super) async fn stopped(&mut self, stop: Stop, stage: &str) {
        match stop {
            Stop::Aborted => {
                self.hard_stop = true;
                self.error("the job was aborted").await;
                self.fail(FailureReason::JobCanceled, None, "canceled".into());
            }
            Stop::Canceled => {
                self.warn(&format!("the job was canceled during {stage}"))
                    .await;
                self.fail(FailureReason::JobCanceled, None, "canceled".into());
            }
            Stop::JobTimeout => {
                self.hard_stop = true;
                let msg = format!(
                    "execution took longer than {} seconds",
                    self.timeout.as_secs()
                );
                self.error(&format!("Job failed: {msg}")).await;
                self.fail(FailureReason::JobExecutionTimeout, None, msg);
            }
            Stop::StageTimeout(d) => {
                let msg = format!("{stage} took longer than {}", human(d));
                self.error(&msg).await;
                self.fail(FailureReason::JobExecutionTimeout, None, msg);
            }
        }
    }

    // ----- limits --------------------------------------------------------------------------

    /// Stages before and including the script: any cancellation stops them.
    pub(super) fn pre_limits(&self, timeout: Option<Duration>) -> Limits {
        Limits {
            forced: true,
            graceful: true,
            deadline: Some(self.deadline),
            timeout,
        }
    }

    /// Stages after the script: a graceful cancellation lets them run.
    pub(super) fn post_limits(&self, timeout: Option<Duration>) -> Limits {
        Limits {
            forced: true,
            graceful: false,
            deadline: Some(self.deadline),
            timeout,
        }
    }

    pub(super) fn grace(&self) -> Duration {
        self.runner.options.stop_grace
    }

    /// `NAME_ATTEMPTS` (1 to 10, default 1).
    pub(super) fn attempts(&self, key: &str) -> u32 {
        self.vars
            .value(key)
            .and_then(|v| v.trim().parse::<u32>().ok())
            .map(|n| n.clamp(1, 10))
            .unwrap_or(1)
    }

    pub(super) fn scratch_file(&mut self, what: &str) -> PathBuf {
        self.scratch_seq += 1;
        let dir = self
            .scratch
            .as_ref()
            .map(|d| d.path().to_path_buf())
            .unwrap_or_else(std::env::temp_dir);
        dir.join(format!("{what}-{}.zip", self.scratch_seq))
    }

    pub(super) fn script_context<'v>(&'v self, vars: &'v JobVariables) -> ScriptContext<'v> {
        ScriptContext {
            vars,
            builds_dir: &self.paths.builds_dir,
            project_dir: &self.paths.project_dir,
            debug_trace: vars.bool("CI_DEBUG_TRACE") && !self.runner.options.debug_trace_disabled,
        }
    }

    /// Runs a stage script under `limits`.
    async fn script(
        &self,
        place: Place,
        script: String,
        limits: Limits,
    ) -> Result<Result<ExitStatus, EnvError>, Stop> {
        let env = self.runner.env;
        let log = self.log.clone();
        guarded(&self.cancel, limits, self.grace(), |token| async move {
            env.exec(ExecSpec {
                place,
                command: ExecCommand::Script(script),
                stdin: None,
                stdout: Box::new(log.clone()),
                stderr: Box::new(log),
                cancel: token,
            })
            .await
        })
        .await
    }

    // ----- the sequence --------------------------------------------------------------------

    async fn execute(&mut self) {
        let o = &self.runner.options;
        self.say(&format!(
            "Running with flotilla {} ({})",
            o.runner.version, o.runner.executor
        ))
        .await;
        self.say(&format!("  on {}", o.runner.description)).await;
        let bad = unexportable_names(&self.vars);
        if !bad.is_empty() {
            self.warn(&format!(
                "variables with names no shell can export are skipped: {}",
                bad.join(", ")
            ))
            .await;
        }
        if !self.job.secrets.is_empty() {
            self.warn(
                "external secrets (secrets:) are not supported by this runner and are not set",
            )
            .await;
        }
        // GitLab Runner's words (common/build.go, initSettings).
        if self.runner.options.debug_trace_disabled {
            for var in ["CI_DEBUG_TRACE", "CI_DEBUG_SERVICES"] {
                if self.vars.bool(var) {
                    self.warn(&format!("{var}: usage is disabled on this Runner"))
                        .await;
                }
            }
        }
        // Feature flags that change how GitLab Runner writes the stage script
        // (helpers/featureflags/flags.go); flotilla writes it one way only.
        for flag in crate::model::feature_flags::UNSUPPORTED {
            if self.job.feature_flag(flag) {
                self.warn(&format!(
                    "{flag} is not supported by this runner: the stage script is written as \
                     GitLab Runner 19.1 writes it by default"
                ))
                .await;
            }
        }

        if self.failure.is_none() {
            self.prepare().await;
        }
        if self.failure.is_none() {
            self.get_sources().await;
        }
        if self.failure.is_none() {
            self.restore_cache().await;
        }
        if self.failure.is_none() {
            self.download_artifacts().await;
        }
        if self.failure.is_none() && !self.cancel.is_canceled() {
            self.step_script().await;
        }
        if self.failure.is_none() && !self.cancel.is_canceled() {
            self.other_steps().await;
        }
        if self.cancel.is_aborted() {
            self.hard_stop = true;
        }
        if self.script_started && !self.hard_stop {
            self.after_script().await;
        }
        if !self.hard_stop && !self.cancel.is_aborted() && self.scratch.is_some() {
            self.archive_cache().await;
        }
        if !self.hard_stop && !self.cancel.is_aborted() && self.scratch.is_some() {
            self.upload_artifacts().await;
        }
        self.cleanup().await;

        if self.cancel.is_aborted() || self.cancel.is_canceled() {
            self.fail(FailureReason::JobCanceled, None, "canceled".into());
        }
        match &self.failure {
            None => self.notice("Job succeeded").await,
            Some(f) => {
                let msg = format!("Job failed: {}", f.message);
                self.error(&msg).await;
            }
        }
    }

    async fn prepare(&mut self) {
        let header = format!(
            "Preparing the \"{}\" executor",
            self.runner.options.runner.executor
        );
        let since = self.begin("prepare_executor", &header).await;
        for line in self.runner.options.prepare_lines.clone() {
            self.say(&line).await;
        }
        let env = self.runner.env;
        let mut log = self.log.clone();
        let r = guarded(
            &self.cancel,
            self.pre_limits(None),
            self.grace(),
            |token| async move { env.prepare(&mut log, token).await },
        )
        .await;
        let ok = match r {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                self.error(&format!("preparing the environment failed: {e}"))
                    .await;
                self.fail(env_failure(&e), None, e.to_string());
                false
            }
            Err(stop) => {
                self.stopped(stop, "prepare_executor").await;
                false
            }
        };
        self.end("prepare_executor", since, ok).await;
    }

    async fn get_sources(&mut self) {
        let since = self
            .begin("get_sources", "Getting source from Git repository")
            .await;
        let hooks_apart = self.hooks_place() == Place::Build;
        if hooks_apart
            && let Some(pre) = self
                .script_context(&self.vars)
                .pre_get_sources_script(self.job)
        {
            self.say(
                "Running hooks:pre_get_sources_script in the job's container (the sources are \
                 fetched on the instance, outside it; its git settings do not reach the fetch)",
            )
            .await;
            if !self.hook_script(Place::Build, pre).await {
                self.end("get_sources", since, false).await;
                return;
            }
        }
        let script = self.script_context(&self.vars).get_sources_script(
            self.job,
            if hooks_apart {
                FetchPlace::Apart
            } else {
                FetchPlace::WithTheJob
            },
        );
        let script = match script {
            Ok(s) => s,
            Err(e) => {
                self.error(&e.to_string()).await;
                self.fail(FailureReason::RunnerConfigurationError, None, e.to_string());
                self.end("get_sources", since, false).await;
                return;
            }
        };
        let attempts = self.attempts("GET_SOURCES_ATTEMPTS");
        let mut last = (FailureReason::ScriptFailure, String::new());
        let mut ok = false;
        for attempt in 1..=attempts {
            match self.sources_script(script.clone()).await {
                Ok(()) => {
                    ok = true;
                    break;
                }
                Err(SourcesFailure::Failed(reason, message)) => last = (reason, message),
                Err(SourcesFailure::Stopped(stop)) => {
                    self.stopped(stop, "get_sources").await;
                    self.end("get_sources", since, false).await;
                    return;
                }
            }
            if attempt < attempts {
                self.warn(&format!(
                    "{}; retrying ({}/{attempts})",
                    last.1,
                    attempt + 1
                ))
                .await;
            }
        }
        if !ok {
            self.error(&last.1).await;
            self.fail(last.0, None, last.1);
        }
        if ok && self.job.local_sources.is_some() {
            ok = self.local_sources().await;
        } else if ok
            && hooks_apart
            && let Some(post) = self
                .script_context(&self.vars)
                .post_get_sources_script(self.job)
        {
            ok = self.hook_script(Place::Build, post).await;
        }
        self.end("get_sources", since, ok).await;
    }

    /// Runs one `get_sources` script in the helper place.
    async fn sources_script(&self, script: String) -> Result<(), SourcesFailure> {
        self.sources_script_at(Place::Helper, script).await
    }

    /// A `get_sources` script at `place`.
    async fn sources_script_at(&self, place: Place, script: String) -> Result<(), SourcesFailure> {
        match self.script(place, script, self.pre_limits(None)).await {
            Ok(Ok(status)) if status.success() => Ok(()),
            Ok(Ok(status)) => Err(SourcesFailure::Failed(
                FailureReason::ScriptFailure,
                format!("getting the sources failed with {status}"),
            )),
            Ok(Err(e)) => Err(SourcesFailure::Failed(
                env_failure(&e),
                format!("getting the sources: {e}"),
            )),
            Err(stop) => Err(SourcesFailure::Stopped(stop)),
        }
    }

    /// The rest of `get_sources` for a job whose sources come as an archive (a local run):
    /// extracts it into the emptied build directory, then runs
    /// `hooks:post_get_sources_script`. Whether it all went well (a failure is recorded).
    async fn local_sources(&mut self) -> bool {
        let Some(local) = &self.job.local_sources else {
            return true;
        };
        if let Some(archive) = &local.archive {
            let attempts = self.attempts("GET_SOURCES_ATTEMPTS");
            if !self
                .download_with_retries(archive, attempts, "get_sources")
                .await
            {
                return false;
            }
        }
        let Some(script) = self
            .script_context(&self.vars)
            .post_get_sources_script(self.job)
        else {
            return true;
        };
        self.hook_script(self.hooks_place(), script).await
    }

    /// Where the job's `get_sources` hooks run. They are its own commands: where the build
    /// place is the job's own container or VM, the helper place (the instance's shell, or at
    /// `docker` a helper container) is outside it, and they run in the build place instead,
    /// with the job's image and tools.
    fn hooks_place(&self) -> Place {
        if self.runner.env.disposable() {
            Place::Build
        } else {
            Place::Helper
        }
    }

    /// Runs a `get_sources` hook script at `place`; whether it succeeded (a failure or a stop
    /// is recorded).
    async fn hook_script(&mut self, place: Place, script: String) -> bool {
        match self.sources_script_at(place, script).await {
            Ok(()) => true,
            Err(SourcesFailure::Failed(reason, message)) => {
                self.error(&message).await;
                self.fail(reason, None, message);
                false
            }
            Err(SourcesFailure::Stopped(stop)) => {
                self.stopped(stop, "get_sources").await;
                false
            }
        }
    }

    /// The effective timeout of the script step: its own `timeout` and
    /// `RUNNER_SCRIPT_TIMEOUT`, whichever is shorter.
    fn step_timeout(&self, step: Option<&Step>) -> Option<Duration> {
        let own = step
            .map(|s| s.timeout)
            .filter(|&t| t > 0)
            .map(Duration::from_secs);
        let var = self
            .vars
            .value("RUNNER_SCRIPT_TIMEOUT")
            .and_then(|v| parse_go_duration(v.trim()).ok())
            .filter(|d| !d.is_zero());
        match (own, var) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    async fn step_script(&mut self) {
        if self.job.run.is_some() {
            let msg = "GitLab Steps (run:) are not supported by this runner".to_owned();
            self.error(&msg).await;
            self.fail(FailureReason::RunnerConfigurationError, None, msg);
            return;
        }
        let job = self.job;
        let step = job.script_step();
        // The runner's pre_build_script and post_build_script around the job's commands, each
        // one command, as GitLab Runner writes them (shells/abstract.go, writeUserScript).
        let options = &self.runner.options;
        let non_empty = |s: &Option<String>| s.clone().filter(|s| !s.trim().is_empty());
        let commands: Vec<String> = match step {
            Some(s) => non_empty(&options.pre_build_script)
                .into_iter()
                .chain(s.script.iter().cloned())
                .chain(non_empty(&options.post_build_script))
                .collect(),
            None => Vec::new(),
        };
        self.run_step("step_script", step, &commands).await;
    }

    async fn other_steps(&mut self) {
        let job = self.job;
        for step in job
            .steps
            .iter()
            .filter(|s| s.name != STEP_SCRIPT && s.name != STEP_AFTER_SCRIPT)
        {
            if self.failure.is_some() || self.cancel.is_canceled() || !step.when.applies(false) {
                continue;
            }
            let name = format!("step_{}", step.name);
            self.run_step(&name, Some(step), &step.script).await;
        }
    }

    async fn run_step(&mut self, name: &str, step: Option<&Step>, commands: &[String]) {
        let header = format!("Executing \"{name}\" stage of the job script");
        let since = self.begin(name, &header).await;
        self.script_started = true;
        let script = self.script_context(&self.vars).user_script(commands);
        let limits = self.pre_limits(self.step_timeout(step));
        let allow_failure = step.is_some_and(|s| s.allow_failure && s.name != STEP_SCRIPT);
        let ok = match self.script(Place::Build, script, limits).await {
            Ok(Ok(status)) if status.success() => true,
            Ok(Ok(status)) => {
                if allow_failure {
                    self.warn(&format!(
                        "{name} failed with {status}, but failure is allowed"
                    ))
                    .await;
                } else {
                    // A shell's view: a signal is `128 + n`; a signal with no known number has
                    // no exit code, and the message names it instead.
                    let code = status.shell_code();
                    self.fail(
                        FailureReason::ScriptFailure,
                        code,
                        code.map_or_else(|| status.to_string(), |c| format!("exit code {c}")),
                    );
                }
                false
            }
            Ok(Err(e)) => {
                self.error(&format!("{name}: {e}")).await;
                self.fail(env_failure(&e), None, e.to_string());
                false
            }
            Err(stop) => {
                self.stopped(stop, name).await;
                false
            }
        };
        self.end(name, since, ok).await;
    }

    async fn after_script(&mut self) {
        let job = self.job;
        let Some(step) = job.after_script_step() else {
            return;
        };
        if step.script.is_empty() {
            return;
        }
        // `runtimeStateAndError` (gitlab-runner `common/build.go`): a script stopped by
        // `RUNNER_SCRIPT_TIMEOUT` or the step's timeout is `timedout`.
        let status = if self.cancel.is_canceled() {
            "canceled"
        } else {
            match &self.failure {
                Some(f) if f.reason == FailureReason::JobExecutionTimeout => "timedout",
                Some(_) => "failed",
                None => "success",
            }
        };
        let mut vars = self.vars.clone();
        vars.set(Variable::new("CI_JOB_STATUS", status));
        let since = self.begin("after_script", "Running after_script").await;
        let timeout = vars
            .value("RUNNER_AFTER_SCRIPT_TIMEOUT")
            .and_then(|v| parse_go_duration(v.trim()).ok())
            .filter(|d| !d.is_zero())
            .unwrap_or(self.runner.options.after_script_timeout);
        let script = self.script_context(&vars).after_script(&step.script);
        let ok = match self
            .script(Place::Build, script, self.post_limits(Some(timeout)))
            .await
        {
            Ok(Ok(s)) if s.success() => true,
            Ok(Ok(s)) => {
                self.warn(&format!(
                    "after_script failed, but job will continue unaffected: {s}"
                ))
                .await;
                false
            }
            Ok(Err(e)) => {
                self.warn(&format!(
                    "after_script failed, but job will continue unaffected: {e}"
                ))
                .await;
                false
            }
            Err(Stop::StageTimeout(d)) => {
                self.warn(&format!(
                    "after_script timed out after {}, but job will continue unaffected",
                    human(d)
                ))
                .await;
                false
            }
            Err(stop) => {
                self.stopped(stop, "after_script").await;
                false
            }
        };
        self.end("after_script", since, ok).await;
    }

    async fn cleanup(&mut self) {
        let since = self
            .begin(
                "cleanup_file_variables",
                "Cleaning up project directory and file based variables",
            )
            .await;
        let script = self.script_context(&self.vars).cleanup_script();
        let limits = Limits {
            forced: false,
            graceful: false,
            deadline: None,
            timeout: Some(self.runner.options.cleanup_timeout),
        };
        let ok = match self.script(Place::Helper, script, limits).await {
            Ok(Ok(s)) if s.success() => true,
            Ok(Ok(s)) => {
                self.warn(&format!("cleaning up failed with {s}")).await;
                false
            }
            Ok(Err(e)) => {
                self.warn(&format!("cleaning up failed: {e}")).await;
                false
            }
            Err(_) => {
                self.warn("cleaning up timed out").await;
                false
            }
        };
        self.end("cleanup_file_variables", since, ok).await;
    }
}

/// The failure reason for an environment error.
pub(super) fn env_failure(e: &EnvError) -> FailureReason {
    match e {
        EnvError::ImagePull { .. } => FailureReason::ImagePullFailure,
        EnvError::Configuration(_) => FailureReason::RunnerConfigurationError,
        EnvError::Canceled => FailureReason::JobCanceled,
        EnvError::Io { .. } | EnvError::System(_) => FailureReason::RunnerSystemFailure,
    }
}

/// `90s`, `5m0s`-style text for a duration.
pub(super) fn human(d: Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return format!("{}ms", d.as_millis());
    }
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}
