//! `listen_address`: the monitor (metrics, health, status page) of `flotilla run`, and the
//! wrappers through which one runner's jobs and API calls reach it.
//!
//! The wrappers only watch: the job source's hooks and executor, and the client's calls,
//! are passed through unchanged. Nothing is wrapped when `listen_address` is not set.

use crate::config::{AutoscalerConfig, Config, RunnerConfig};
use anyhow::{Context, Result};
use async_trait::async_trait;
use flotilla_gitlab::{
    ApiObserver, Endpoint, FinalReport, JobHooks, Route, SlotExecutor, StartedJob,
};
use flotilla_job::{JobCancel, JobPayload, JobResult, Outcome, TraceError, TraceSink};
use flotilla_monitor::server::{self, Access};
use flotilla_monitor::{InstanceBuckets, Monitor, RunnerHandle, RunnerLabels, RunnerSpec};
use flotilla_scaler::{Acquisition, Scaler};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The monitor of a daemon and the tasks serving it.
pub(super) struct Served {
    pub monitor: Monitor,
    /// Ends the listener and the follower.
    pub done: CancellationToken,
}

/// This binary's build, as `gitlab_runner_version_info` labels it (`build.rs` records the
/// commit, its date and branch, and the compiler).
pub(crate) fn build_info() -> flotilla_monitor::BuildInfo {
    flotilla_monitor::BuildInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        revision: env!("FLOTILLA_COMMIT").to_string(),
        branch: env!("FLOTILLA_BRANCH").to_string(),
        built_at: env!("FLOTILLA_COMMIT_DATE").to_string(),
        compiler: env!("FLOTILLA_RUSTC").to_string(),
    }
}

/// Binds `listen_address` and serves the monitor on it, with its follower, as tasks of
/// `tasks`; `None` when no `listen_address` is set.
pub(super) async fn serve(config: &Config, tasks: &TaskTracker) -> Result<Option<Served>> {
    let Some(address) = config.listen_address.as_deref() else {
        tracing::info!("listen_address not defined, metrics, health and status page disabled");
        return Ok(None);
    };
    let monitor = Monitor::with_build(config.concurrent, &build_info())?;
    let listener = server::bind(address).await.context("listen_address")?;
    let token = config
        .flotilla
        .status_token
        .as_ref()
        .map(|t| t.expose().as_str());
    let access = Access::for_listener(listener.loopback, token);
    let page = match &access {
        Access::Refused => "not served (set [flotilla] status_token)",
        Access::Token(_) => "served with a token",
        Access::Open => "served",
    };
    tracing::info!(address = %listener.local_addr, status_page = page, "serving /metrics, /debug/health and the status page");
    let done = CancellationToken::new();
    tasks.spawn(server::serve(
        listener,
        monitor.clone(),
        access,
        done.clone(),
    ));
    let follower = monitor.clone();
    let stop = done.clone();
    tasks.spawn(async move { follower.follow(stop).await });
    Ok(Some(Served { monitor, done }))
}

/// The spec of `runner`'s series: GitLab's labels and its fleet's buckets.
pub(super) fn spec(runner: &RunnerConfig, system_id: &str) -> RunnerSpec {
    let token = runner
        .token
        .as_ref()
        .map(|t| t.expose().as_str())
        .unwrap_or("");
    RunnerSpec {
        labels: RunnerLabels::new(token, &runner.name, system_id),
        limit: runner.limit,
        request_concurrency: runner.request_concurrency,
        buckets: runner.autoscaler.as_ref().map(buckets).unwrap_or_default(),
    }
}

fn buckets(a: &AutoscalerConfig) -> InstanceBuckets {
    InstanceBuckets::from_config(
        a.instance_operation_time_buckets.as_deref(),
        a.instance_creation_time_buckets.as_deref(),
        a.instance_is_running_time_buckets.as_deref(),
        a.instance_deletion_time_buckets.as_deref(),
        a.instance_readiness_time_buckets.as_deref(),
        a.instance_life_duration_buckets.as_deref(),
    )
}

/// Tells the monitor about every runner API call.
pub(super) struct ApiMetrics(pub RunnerHandle);

impl ApiObserver for ApiMetrics {
    fn request_done(&self, endpoint: Endpoint, method: &'static str, status: u16, d: Duration) {
        self.0.api_request(endpoint.as_str(), method, status, d);
    }
}

/// The job source's hooks, followed by the monitor.
pub(super) struct ObservedHooks {
    pub inner: Arc<dyn JobHooks>,
    pub handle: RunnerHandle,
}

#[async_trait]
impl JobHooks for ObservedHooks {
    async fn job_started(&self, job: &StartedJob) {
        self.inner.job_started(job).await;
        self.handle.job_received(job.id, &job.name);
    }

    async fn job_withdrawn(&self, job: &StartedJob) {
        self.inner.job_withdrawn(job).await;
        self.handle.job_withdrawn(job.id);
    }

    async fn job_finished(&self, job: &StartedJob, outcome: &Outcome) {
        self.inner.job_finished(job, outcome).await;
        let failure_reason = match outcome {
            Outcome::Success => None,
            Outcome::Failed { reason, .. } => Some(reason.as_str()),
        };
        self.handle.job_ended(job.id, failure_reason);
    }

    async fn job_reported(&self, job: &StartedJob, report: &FinalReport) {
        self.inner.job_reported(job, report).await;
        self.handle.job_done(job.id);
    }

    fn refuses_new_jobs(&self) -> Option<String> {
        self.inner.refuses_new_jobs()
    }
}

/// The dispatcher, watched: which slot and level each job got, and its log's bytes and
/// build stages.
pub(super) struct ObservedExecutor {
    pub inner: Arc<dyn SlotExecutor>,
    pub handle: RunnerHandle,
    /// The levels the runner offers, the default first: only these name a series (a job
    /// asking for another fails at once, and its name is not a label).
    pub levels: Vec<String>,
}

#[async_trait]
impl SlotExecutor for ObservedExecutor {
    fn scaler(&self) -> &Scaler {
        self.inner.scaler()
    }

    async fn route(&self, job: &JobPayload) -> Result<Route, String> {
        // A job sent elsewhere is watched there too.
        let mut route = self.inner.route(job).await?;
        if let Some(elsewhere) = route.executor.take() {
            route.executor = Some(Arc::new(ObservedExecutor {
                inner: elsewhere,
                handle: self.handle.clone(),
                levels: self.levels.clone(),
            }));
        }
        Ok(route)
    }

    async fn run(
        &self,
        acquisition: Acquisition,
        job: &JobPayload,
        sink: &mut dyn TraceSink,
        cancel: &JobCancel,
    ) -> JobResult {
        let asked = flotilla_dispatch::requested_level(job);
        let level = match asked {
            None => self.levels.first().map_or("unknown", String::as_str),
            Some(l) => self
                .levels
                .iter()
                .find(|o| **o == l)
                .map_or("refused", String::as_str),
        };
        let info = &job.job_info;
        if info.time_in_queue_seconds.is_finite() && info.time_in_queue_seconds >= 0.0 {
            self.handle.job_queue_facts(
                Duration::from_secs_f64(info.time_in_queue_seconds),
                &info.project_jobs_running_on_instance_runners_count,
            );
        }
        self.handle.job_started(
            job.id,
            level,
            acquisition.instance_id(),
            acquisition.slot(),
            acquisition.key(),
        );
        if let Some(page) = job.variables.iter().rev().find(|v| v.key == "CI_JOB_URL") {
            self.handle.job_page(job.id, &page.value);
        }
        let mut watched = WatchedSink {
            inner: sink,
            handle: &self.handle,
            job: job.id,
            sections: SectionScanner::default(),
        };
        let result = self.inner.run(acquisition, job, &mut watched, cancel).await;
        if exports_stage_durations(job) {
            self.handle
                .job_stage_durations(result.stages.iter().map(|s| (s.name.as_str(), s.duration)));
        }
        result
    }
}

/// Whether `job` has GitLab's `FF_EXPORT_HIGH_CARDINALITY_METRICS` on, which alone makes
/// GitLab Runner export its stages' durations (`buildsHelper.initializeBuildStageMetrics`
/// asks `build.IsFeatureFlagOn`, which reads the job's variables, the runner's `environment`
/// among them). The runner's `environment` is in the payload by now (the job source puts it
/// first); `[runners.feature_flags]` is not read by flotilla (config check says so).
fn exports_stage_durations(job: &JobPayload) -> bool {
    job.feature_flag("FF_EXPORT_HIGH_CARDINALITY_METRICS")
}

/// A job's log on its way to GitLab, counted and scanned for GitLab's build stages.
struct WatchedSink<'a> {
    inner: &'a mut dyn TraceSink,
    handle: &'a RunnerHandle,
    job: i64,
    sections: SectionScanner,
}

#[async_trait]
impl TraceSink for WatchedSink<'_> {
    async fn write(&mut self, bytes: &[u8]) -> Result<(), TraceError> {
        self.handle.job_output(self.job, bytes.len());
        for name in self.sections.feed(bytes) {
            self.handle.job_stage(self.job, &name);
        }
        self.inner.write(bytes).await
    }

    async fn finish(&mut self) -> Result<(), TraceError> {
        self.inner.finish().await
    }
}

/// Finds `section_start:<unix>:<name>` markers (GitLab's collapsible sections, which the
/// job runner opens for each build stage) in a byte stream cut anywhere.
#[derive(Debug, Default)]
pub(super) struct SectionScanner {
    /// The tail of the last chunk that may be the start of a marker.
    carry: Vec<u8>,
}

const MARKER: &[u8] = b"section_start:";
/// Longest marker considered: a name longer than this is not a build stage.
const MAX_MARKER: usize = 96;

impl SectionScanner {
    /// The section names whose markers end in `bytes` (given what came before).
    pub(super) fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut buf = std::mem::take(&mut self.carry);
        buf.extend_from_slice(bytes);
        let mut names = Vec::new();
        let mut from = 0;
        let mut keep_from = buf.len().saturating_sub(MARKER.len() - 1);
        while let Some(at) = find(&buf[from..], MARKER).map(|p| p + from) {
            let rest = &buf[at + MARKER.len()..];
            // <unix>:<name>[options]\r
            let end = rest
                .iter()
                .position(|b| matches!(b, b'\r' | b'\n' | b'['))
                .filter(|e| *e <= MAX_MARKER);
            match end {
                Some(e) => {
                    if let Some((_, name)) = std::str::from_utf8(&rest[..e])
                        .ok()
                        .and_then(|s| s.split_once(':'))
                    {
                        names.push(name.to_string());
                    }
                    from = at + MARKER.len() + e;
                }
                None if rest.len() < MAX_MARKER => {
                    // Cut mid-marker: keep it for the next chunk.
                    keep_from = keep_from.min(at);
                    break;
                }
                None => from = at + MARKER.len(),
            }
        }
        keep_from = keep_from.max(from);
        self.carry = buf[keep_from..].to_vec();
        names
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_are_found_across_chunk_boundaries() {
        let log = "Running with flotilla\n\
                   section_start:1700000000:prepare_executor\r\x1b[0KPreparing\n\
                   section_end:1700000001:prepare_executor\r\x1b[0K\n\
                   section_start:1700000002:step_script[collapsed=true]\r\x1b[0K$ make\n";
        for cut in 0..log.len() {
            let (a, b) = log.as_bytes().split_at(cut);
            let mut s = SectionScanner::default();
            let mut names = s.feed(a);
            names.extend(s.feed(b));
            assert_eq!(names, ["prepare_executor", "step_script"], "cut at {cut}");
        }
        let mut s = SectionScanner::default();
        assert!(s.feed(b"no markers here at all").is_empty());
        assert!(s.carry.len() < MARKER.len());
    }

    /// Each bucket key of `[runners.autoscaler]` lands in its own series, and the operation key
    /// in those without one of their own.
    #[test]
    fn each_bucket_key_reaches_its_series() {
        let a: AutoscalerConfig = toml::from_str(
            "plugin = \"docker\"\ninstance_operation_time_buckets = [1.0, 2.0]\n\
             instance_is_running_time_buckets = [3.0]\ninstance_deletion_time_buckets = [4.0]\n\
             instance_readiness_time_buckets = [5.0]\ninstance_life_duration_buckets = [6.0]\n",
        )
        .expect("an autoscaler table");
        let b = buckets(&a);
        assert_eq!(
            b.creation,
            [1.0, 2.0],
            "no key of its own: the operation key"
        );
        assert_eq!(b.is_running, [3.0]);
        assert_eq!(b.deletion, [4.0]);
        assert_eq!(b.readiness, [5.0]);
        assert_eq!(b.life, [6.0]);
    }
}
