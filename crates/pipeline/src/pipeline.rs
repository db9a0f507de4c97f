//! Running a compiled pipeline: every job as soon as what it waits for has finished (its
//! `needs`, or the stages before it), in parallel up to what the fleet can take, with
//! artifacts passed from job to job, `when`, `allow_failure` and `retry` as GitLab applies
//! them.

use super::merge;
use super::payload::{self, PayloadContext, var};
use super::snapshot::Revision;
use super::sources::Sources;
use flotilla_ci::{self as ci, CompiledJob, Pipeline};
use flotilla_dispatch::Dispatcher;
use flotilla_job::{
    FailureReason, FileSink, JobCancel, LocalArtifactStore, Outcome, TerminalSink, TraceError,
    TraceSink,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobStatus {
    /// It succeeded.
    Success,
    /// It failed; `allowed` when `allow_failure` covers it.
    Failed {
        /// The failure does not fail the pipeline.
        allowed: bool,
        /// Why it failed.
        reason: FailureReason,
        /// The script's exit code, if it got that far.
        exit_code: Option<i32>,
    },
    /// It did not run.
    Skipped {
        /// Why not.
        reason: String,
        /// Because something it waited for failed (so the jobs after it skip too).
        upstream_failed: bool,
    },
    /// The run was interrupted before or while it ran.
    Canceled,
}

impl JobStatus {
    /// A word for tables and logs.
    pub fn label(&self) -> &'static str {
        match self {
            JobStatus::Success => "passed",
            JobStatus::Failed { allowed: true, .. } => "failed (allowed)",
            JobStatus::Failed { .. } => "failed",
            JobStatus::Skipped { .. } => "skipped",
            JobStatus::Canceled => "canceled",
        }
    }

    /// Whether this fails the pipeline.
    pub fn fails_pipeline(&self) -> bool {
        matches!(
            self,
            JobStatus::Failed { allowed: false, .. } | JobStatus::Canceled
        )
    }

    /// Whether jobs waiting for this one see a failure.
    fn is_upstream_failure(&self) -> bool {
        matches!(
            self,
            JobStatus::Failed { allowed: false, .. }
                | JobStatus::Canceled
                | JobStatus::Skipped {
                    upstream_failed: true,
                    ..
                }
        )
    }
}

/// Progress, as it happens.
#[derive(Debug, Clone)]
pub enum ExecEvent {
    /// A job started running: it got a slot (or started again, for a retry). Jobs waiting
    /// for a free slot have not started.
    Started {
        /// Index in the pipeline.
        job: usize,
        /// Its name.
        name: String,
        /// 1 for the first attempt.
        attempt: u32,
        /// Where its full log goes.
        log: PathBuf,
    },
    /// A job ended.
    Finished {
        /// Index in the pipeline.
        job: usize,
        /// Its name.
        name: String,
        /// How.
        status: JobStatus,
        /// How long it ran.
        duration: Duration,
    },
}

/// One job's result.
#[derive(Debug, Clone)]
pub struct JobSummary {
    /// Its name.
    pub name: String,
    /// Its stage.
    pub stage: String,
    /// How it ended.
    pub status: JobStatus,
    /// How long it ran (all attempts, without the time spent waiting for a slot).
    pub duration: Duration,
    /// The job's id in the artifact store (its artifacts are under this id).
    pub job_id: i64,
    /// Attempts made.
    pub attempts: u32,
    /// Its log file.
    pub log: Option<PathBuf>,
}

/// The pipeline's result.
#[derive(Debug, Clone)]
pub struct PipelineOutcome {
    /// Every job, in pipeline order.
    pub jobs: Vec<JobSummary>,
    /// Wall time.
    pub duration: Duration,
}

impl PipelineOutcome {
    /// Whether no job that may not fail failed.
    pub fn passed(&self) -> bool {
        !self.jobs.iter().any(|j| j.status.fails_pipeline())
    }
}

/// What a run needs besides the pipeline and the fleet.
#[derive(Debug, Clone)]
pub struct ExecConfig {
    /// The project's directory (the working tree jobs start from).
    pub project_dir: PathBuf,
    /// Where logs go (`<dir>/<pipeline id>/<job>.log`).
    pub logs_dir: PathBuf,
    /// The root of the local artifact store the dispatcher uses.
    pub artifacts_dir: PathBuf,
    /// The pipeline's predefined variables.
    pub predefined: Vec<(String, String)>,
    /// Jobs whose output is streamed to the terminal as it comes.
    pub follow: Vec<String>,
    /// Every job's output is streamed to the terminal (each line after `[job] `).
    pub live: bool,
    /// Streamed output keeps its colours (the terminal is a terminal).
    pub color: bool,
}

/// Why a pipeline could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// A log file could not be created.
    #[error("cannot create the log {path}: {source}")]
    Log {
        /// The log file.
        path: PathBuf,
        /// The error.
        #[source]
        source: TraceError,
    },
}

/// A job's trace: its log file (and the terminal, when followed). The first bytes mean the
/// job got a slot and runs: that is when [`ExecEvent::Started`] is sent and its duration
/// starts, so time spent waiting for a free slot counts as neither.
struct JobTrace {
    sinks: Vec<Box<dyn TraceSink>>,
    announce: Option<(mpsc::UnboundedSender<ExecEvent>, ExecEvent)>,
    started: Option<Instant>,
}

#[async_trait::async_trait]
impl TraceSink for JobTrace {
    async fn write(&mut self, bytes: &[u8]) -> Result<(), TraceError> {
        if self.started.is_none() {
            self.started = Some(Instant::now());
            if let Some((events, started)) = self.announce.take() {
                let _ = events.send(started);
            }
        }
        for s in &mut self.sinks {
            s.write(bytes).await?;
        }
        Ok(())
    }
    async fn finish(&mut self) -> Result<(), TraceError> {
        for s in &mut self.sinks {
            s.finish().await?;
        }
        Ok(())
    }
}

/// GitLab's names for `retry: when`.
fn retry_reason(reason: FailureReason) -> &'static str {
    match reason {
        FailureReason::ScriptFailure => "script_failure",
        FailureReason::RunnerSystemFailure => "runner_system_failure",
        FailureReason::JobExecutionTimeout => "job_execution_timeout",
        FailureReason::ImagePullFailure => "image_pull_failure",
        FailureReason::UnknownFailure => "unknown_failure",
        FailureReason::RunnerConfigurationError => "script_failure",
        FailureReason::RunnerExternalDependencyFailure => "runner_system_failure",
        FailureReason::RunnerInterrupted => "runner_system_failure",
        FailureReason::JobCanceled => "job_canceled",
    }
}

/// Whether a failed attempt is retried, as GitLab's `Gitlab::Ci::Build::AutoRetry` decides:
/// within `retry:max`, when `retry:when` names the failure reason (or `always`) **or**
/// `retry:exit_codes` holds the exit code. `when` defaults to `always` only when `exit_codes`
/// is not given. A canceled job is never retried (`retryable?`).
fn should_retry(job: &CompiledJob, attempt: u32, reason: FailureReason, code: Option<i32>) -> bool {
    if attempt > u32::from(job.retry.max) || reason == FailureReason::JobCanceled {
        return false;
    }
    let r = &job.retry;
    let on_reason = if r.when.is_empty() {
        r.exit_codes.is_empty()
    } else {
        r.when
            .iter()
            .any(|w| w == "always" || w == retry_reason(reason))
    };
    let on_code = code.is_some_and(|c| r.exit_codes.contains(&c));
    on_reason || on_code
}

/// Whether a job should run given how the jobs it waits for ended.
fn decide(job: &CompiledJob, upstream: &[&JobStatus]) -> Result<(), JobStatus> {
    let failed = upstream.iter().any(|s| s.is_upstream_failure());
    match job.when {
        ci::When::OnSuccess | ci::When::Manual if failed => Err(JobStatus::Skipped {
            reason: "a job it waits for failed".into(),
            upstream_failed: true,
        }),
        ci::When::OnFailure if !failed => Err(JobStatus::Skipped {
            reason: "when: on_failure and nothing failed".into(),
            upstream_failed: false,
        }),
        ci::When::Never => Err(JobStatus::Skipped {
            reason: "when: never".into(),
            upstream_failed: false,
        }),
        _ => Ok(()),
    }
}

/// Where a job of the pipeline is in its run (not a scaler slot: a job gets one of those
/// from the dispatcher when it starts).
enum JobProgress {
    Waiting,
    Running,
    Done,
}

struct Attempt {
    job: usize,
    attempt: u32,
    status: JobStatus,
    duration: Duration,
}

/// Runs `pipeline` on `dispatcher`'s fleet. Jobs start as soon as what they wait for has
/// ended; a `cancel` stops the run (running jobs are canceled gracefully, after_script runs).
pub async fn run_pipeline(
    pipeline: &Pipeline,
    dispatcher: Arc<Dispatcher>,
    config: &ExecConfig,
    events: mpsc::UnboundedSender<ExecEvent>,
    cancel: CancellationToken,
) -> Result<PipelineOutcome, ExecError> {
    let started = Instant::now();
    let store = LocalArtifactStore::new(&config.artifacts_dir);
    let pipeline_id: i64 = var(&config.predefined, "CI_PIPELINE_ID")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let project_name = var(&config.predefined, "CI_PROJECT_NAME")
        .unwrap_or("project")
        .to_string();
    let project_path = var(&config.predefined, "CI_PROJECT_PATH")
        .unwrap_or("local/project")
        .to_string();
    let sha = var(&config.predefined, "CI_COMMIT_SHA")
        .unwrap_or_default()
        .to_string();
    let git_ref = var(&config.predefined, "CI_COMMIT_REF_NAME")
        .unwrap_or_default()
        .to_string();
    let logs = config.logs_dir.join(pipeline_id.to_string());
    let sources = Arc::new(Sources::new(
        config.project_dir.clone(),
        store.clone(),
        Revision {
            sha: sha.clone(),
            branch: var(&config.predefined, "CI_COMMIT_BRANCH").map(str::to_string),
            tag: var(&config.predefined, "CI_COMMIT_TAG").map(str::to_string),
            pipeline_id,
        },
    ));

    let dag = pipeline.dag();
    let n = pipeline.jobs.len();
    let mut jobs_progress: Vec<JobProgress> = (0..n).map(|_| JobProgress::Waiting).collect();
    let mut summaries: Vec<JobSummary> = pipeline
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| JobSummary {
            name: j.name.clone(),
            stage: j.stage.clone(),
            status: JobStatus::Canceled,
            duration: Duration::ZERO,
            // The ids `run_job` gives the jobs: their place in the pipeline, from 1.
            job_id: i as i64 + 1,
            attempts: 0,
            log: None,
        })
        .collect();
    let mut running: JoinSet<Attempt> = JoinSet::new();
    // Merged starting archives by the ids of the dependencies they hold.
    let mut merged = Merged {
        next_id: n as i64 + 1,
        by_dependencies: HashMap::new(),
    };
    let mut cancels: Vec<Option<JobCancel>> = vec![None; n];
    let mut canceled = false;

    loop {
        // Start (or skip) every job whose wait is over.
        if !canceled {
            let mut progress = true;
            while progress {
                progress = false;
                for i in 0..n {
                    if !matches!(jobs_progress[i], JobProgress::Waiting) {
                        continue;
                    }
                    if dag[i]
                        .iter()
                        .any(|d| !matches!(jobs_progress[*d], JobProgress::Done))
                    {
                        continue;
                    }
                    let upstream: Vec<&JobStatus> =
                        dag[i].iter().map(|d| &summaries[*d].status).collect();
                    if let Err(skip) = decide(&pipeline.jobs[i], &upstream) {
                        summaries[i].status = skip.clone();
                        jobs_progress[i] = JobProgress::Done;
                        let _ = events.send(ExecEvent::Finished {
                            job: i,
                            name: pipeline.jobs[i].name.clone(),
                            status: skip,
                            duration: Duration::ZERO,
                        });
                        progress = true;
                        continue;
                    }
                    let job_cancel = JobCancel::new();
                    cancels[i] = Some(job_cancel.clone());
                    jobs_progress[i] = JobProgress::Running;
                    let ctx = JobContext {
                        index: i,
                        job: pipeline.jobs[i].clone(),
                        attempt: summaries[i].attempts + 1,
                        job_id: summaries[i].job_id,
                        pipeline_id,
                        downloads: starting_files(
                            &store,
                            dependencies_of(pipeline, i, &store),
                            &mut merged,
                        )
                        .await,
                        sources: sources.clone(),
                        predefined: config.predefined.clone(),
                        project_name: project_name.clone(),
                        project_path: project_path.clone(),
                        sha: sha.clone(),
                        git_ref: git_ref.clone(),
                        log: logs.join(format!(
                            "{:02}-{}.log",
                            i + 1,
                            ci::slugify(&pipeline.jobs[i].name)
                        )),
                        color: config.color,
                        follow: config.live
                            || config.follow.iter().any(|f| {
                                f == &pipeline.jobs[i].name || f == &pipeline.jobs[i].base_name
                            }),
                        dotenv: crate::dotenv::inherited(pipeline, i, &store),
                    };
                    summaries[i].attempts += 1;
                    summaries[i].log = Some(ctx.log.clone());
                    let dispatcher = dispatcher.clone();
                    let events = events.clone();
                    running
                        .spawn(async move { run_job(ctx, dispatcher, events, job_cancel).await });
                }
            }
        }
        if running.is_empty() {
            break;
        }
        tokio::select! {
            biased;
            () = cancel.cancelled(), if !canceled => {
                canceled = true;
                for c in cancels.iter().flatten() {
                    c.cancel();
                }
            }
            done = running.join_next() => {
                let Some(done) = done else { break };
                let attempt = match done {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::error!(error = %e, "a job task failed");
                        continue;
                    }
                };
                let i = attempt.job;
                summaries[i].duration += attempt.duration;
                let job = &pipeline.jobs[i];
                if let JobStatus::Failed { reason, exit_code, .. } = &attempt.status
                    && !canceled
                    && should_retry(job, attempt.attempt, *reason, *exit_code)
                {
                    // Back to waiting: the loop above starts it again at once.
                    jobs_progress[i] = JobProgress::Waiting;
                    continue;
                }
                summaries[i].status = attempt.status.clone();
                jobs_progress[i] = JobProgress::Done;
                let _ = events.send(ExecEvent::Finished {
                    job: i,
                    name: job.name.clone(),
                    status: attempt.status,
                    duration: summaries[i].duration,
                });
            }
        }
    }
    // Jobs never started because the run was canceled stay `Canceled`.
    Ok(PipelineOutcome {
        jobs: summaries,
        duration: started.elapsed(),
    })
}

/// The dependencies whose artifacts a job downloads: `(id, name, size)` of those that
/// produced an archive.
fn dependencies_of(
    pipeline: &Pipeline,
    i: usize,
    store: &LocalArtifactStore,
) -> Vec<(i64, String, u64)> {
    pipeline.jobs[i]
        .dependencies
        .iter()
        .filter_map(|name| {
            let d = pipeline.jobs.iter().position(|j| &j.name == name)?;
            let id = (d + 1) as i64;
            let size = std::fs::metadata(store.archive_path(id, "archive"))
                .ok()?
                .len();
            Some((id, name.clone(), size))
        })
        .collect()
}

/// The archives made by [`starting_files`] in this run.
struct Merged {
    /// The id the next one gets (after every job's).
    next_id: i64,
    /// `(id, name, size)` by the dependency ids merged into it.
    by_dependencies: HashMap<Vec<i64>, (i64, String, u64)>,
}

/// The artifacts a job downloads before its script: those of its dependencies, merged into
/// one archive when there are several (one extraction instead of several; jobs with the same
/// dependencies share it). If merging fails, each is downloaded on its own.
async fn starting_files(
    store: &LocalArtifactStore,
    dependencies: Vec<(i64, String, u64)>,
    merged: &mut Merged,
) -> Vec<(i64, String, u64)> {
    if dependencies.len() < 2 {
        return dependencies;
    }
    let ids: Vec<i64> = dependencies.iter().map(|d| d.0).collect();
    if let Some(m) = merged.by_dependencies.get(&ids) {
        return vec![m.clone()];
    }
    let id = merged.next_id;
    let inputs: Vec<_> = dependencies
        .iter()
        .map(|d| store.archive_path(d.0, "archive"))
        .collect();
    let output = store.archive_path(id, "archive");
    let result = tokio::task::spawn_blocking(move || merge::merge(&inputs, &output)).await;
    match result {
        Ok(Ok(size)) => {
            merged.next_id += 1;
            let names: Vec<&str> = dependencies.iter().map(|d| d.1.as_str()).collect();
            let entry = (id, format!("the artifacts of {}", names.join(", ")), size);
            merged.by_dependencies.insert(ids, entry.clone());
            vec![entry]
        }
        failed => {
            let why = match failed {
                Ok(Err(e)) => e.to_string(),
                Err(e) => e.to_string(),
                Ok(Ok(_)) => String::new(),
            };
            tracing::warn!(error = %why, "downloading the artifacts one by one");
            dependencies
        }
    }
}

struct JobContext {
    index: usize,
    job: CompiledJob,
    attempt: u32,
    job_id: i64,
    pipeline_id: i64,
    /// Artifacts extracted into the build directory before the script, in order.
    downloads: Vec<(i64, String, u64)>,
    /// The pipeline's sources archives.
    sources: Arc<Sources>,
    predefined: Vec<(String, String)>,
    project_name: String,
    project_path: String,
    sha: String,
    git_ref: String,
    log: PathBuf,
    follow: bool,
    /// Streamed output keeps its colours.
    color: bool,
    /// Variables from the dotenv reports of the jobs whose artifacts this one takes.
    dotenv: Vec<flotilla_job::Variable>,
}

async fn open_sinks(
    log: &Path,
    follow: Option<&str>,
    color: bool,
) -> Result<Vec<Box<dyn TraceSink>>, TraceError> {
    if let Some(parent) = log.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|source| TraceError::Io {
                target: parent.display().to_string(),
                source,
            })?;
    }
    let mut sinks: Vec<Box<dyn TraceSink>> = vec![Box::new(FileSink::create(log).await?)];
    if let Some(name) = follow {
        sinks.push(Box::new(TerminalSink::rendered(
            format!("[{name}] "),
            color,
        )));
    }
    Ok(sinks)
}

impl JobContext {
    /// This attempt, failed before it reached the runner (`runner_system_failure`).
    fn system_failure(&self, dispatched: Instant) -> Attempt {
        Attempt {
            job: self.index,
            attempt: self.attempt,
            status: JobStatus::Failed {
                allowed: false,
                reason: FailureReason::RunnerSystemFailure,
                exit_code: None,
            },
            duration: dispatched.elapsed(),
        }
    }
}

async fn run_job(
    ctx: JobContext,
    dispatcher: Arc<Dispatcher>,
    events: mpsc::UnboundedSender<ExecEvent>,
    cancel: JobCancel,
) -> Attempt {
    let dispatched = Instant::now();
    let announce = ExecEvent::Started {
        job: ctx.index,
        name: ctx.job.name.clone(),
        attempt: ctx.attempt,
        log: ctx.log.clone(),
    };
    let mut payload = payload::to_payload(
        &ctx.job,
        &PayloadContext {
            job_id: ctx.job_id,
            attempt: ctx.attempt,
            started_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            pipeline_id: ctx.pipeline_id,
            predefined: &ctx.predefined,
            project_name: &ctx.project_name,
            project_path: &ctx.project_path,
            sha: &ctx.sha,
            git_ref: &ctx.git_ref,
            dependencies: ctx.downloads.clone(),
            dotenv: &ctx.dotenv,
        },
    );
    payload
        .artifacts
        .extend(crate::dotenv::report_artifacts(&ctx.job));
    crate::payload::expand_as_gitlab_sends(&mut payload.variables);
    let mut sink = match open_sinks(
        &ctx.log,
        ctx.follow.then_some(ctx.job.name.as_str()),
        ctx.color,
    )
    .await
    {
        Ok(sinks) => JobTrace {
            sinks,
            announce: Some((events, announce)),
            started: None,
        },
        Err(e) => {
            tracing::error!(error = %e, "cannot open the job's log");
            return ctx.system_failure(dispatched);
        }
    };
    match ctx.sources.for_job(&payload).await {
        Ok(local) => payload.local_sources = local,
        Err(e) => {
            // Said where the user looks first: the job's log.
            tracing::error!(job = %ctx.job.name, error = %e, "cannot archive the sources");
            let line = format!("ERROR: Job failed: the sources could not be archived: {e}\n");
            let _ = sink.write(line.as_bytes()).await;
            let _ = sink.finish().await;
            return ctx.system_failure(dispatched);
        }
    }
    let key = format!("exec-{}-{}-{}", ctx.pipeline_id, ctx.job_id, ctx.attempt);
    let result = dispatcher
        .dispatch(&key, &payload, &mut sink, &cancel)
        .await;
    let _ = sink.finish().await;
    let status = match result.outcome {
        Outcome::Success => JobStatus::Success,
        Outcome::Failed { reason, .. } if cancel.is_canceled() || cancel.is_aborted() => {
            let _ = reason;
            JobStatus::Canceled
        }
        Outcome::Failed { reason, exit_code } => JobStatus::Failed {
            allowed: payload::failure_allowed(&ctx.job, exit_code),
            reason,
            exit_code,
        },
    };
    Attempt {
        job: ctx.index,
        attempt: ctx.attempt,
        status,
        duration: sink.started.unwrap_or(dispatched).elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> CompiledJob {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join(".gitlab-ci.yml"),
            "j:\n  script: [\"true\"]\n",
        )
        .unwrap();
        let p = ci::compile(&ci::CompileOptions::new(d.path())).unwrap();
        p.jobs[0].clone()
    }

    #[test]
    fn failure_propagation_rules() {
        let mut job = job();
        let ok = JobStatus::Success;
        let failed = JobStatus::Failed {
            allowed: false,
            reason: FailureReason::ScriptFailure,
            exit_code: Some(1),
        };
        let allowed = JobStatus::Failed {
            allowed: true,
            reason: FailureReason::ScriptFailure,
            exit_code: Some(1),
        };
        assert!(decide(&job, &[&ok, &allowed]).is_ok());
        assert!(matches!(
            decide(&job, &[&ok, &failed]),
            Err(JobStatus::Skipped {
                upstream_failed: true,
                ..
            })
        ));
        job.when = ci::When::OnFailure;
        assert!(decide(&job, &[&failed]).is_ok());
        assert!(decide(&job, &[&ok]).is_err());
        job.when = ci::When::Always;
        assert!(decide(&job, &[&failed]).is_ok());
        // A job skipped because nothing failed does not block the ones after it.
        let benign = JobStatus::Skipped {
            reason: String::new(),
            upstream_failed: false,
        };
        job.when = ci::When::OnSuccess;
        assert!(decide(&job, &[&benign]).is_ok());
    }

    #[test]
    fn retry_rules() {
        let mut job = job();
        job.retry.max = 2;
        assert!(should_retry(&job, 1, FailureReason::ScriptFailure, Some(1)));
        assert!(should_retry(&job, 2, FailureReason::ScriptFailure, Some(1)));
        assert!(!should_retry(
            &job,
            3,
            FailureReason::ScriptFailure,
            Some(1)
        ));
        job.retry.when = vec!["runner_system_failure".into()];
        assert!(!should_retry(
            &job,
            1,
            FailureReason::ScriptFailure,
            Some(1)
        ));
        assert!(should_retry(
            &job,
            1,
            FailureReason::RunnerSystemFailure,
            None
        ));
        job.retry.when.clear();
        job.retry.exit_codes = vec![137];
        assert!(!should_retry(
            &job,
            1,
            FailureReason::ScriptFailure,
            Some(1)
        ));
        assert!(should_retry(
            &job,
            1,
            FailureReason::ScriptFailure,
            Some(137)
        ));
        assert!(!should_retry(
            &job,
            1,
            FailureReason::JobCanceled,
            Some(137)
        ));
        // `when` and `exit_codes` together: either one is enough (auto_retry.rb).
        job.retry.when = vec!["runner_system_failure".into()];
        assert!(should_retry(
            &job,
            1,
            FailureReason::ScriptFailure,
            Some(137)
        ));
        assert!(should_retry(
            &job,
            1,
            FailureReason::RunnerSystemFailure,
            None
        ));
        assert!(!should_retry(
            &job,
            1,
            FailureReason::ScriptFailure,
            Some(1)
        ));
    }
}
