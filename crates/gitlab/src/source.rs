//! The job source of one `[[runners]]` entry: `request_concurrency` workers ask GitLab for
//! jobs, each only after reserving a slot (so no job is taken that cannot start), and every
//! job runs on its own task: acquire the slot (keeping GitLab's two-phase commit alive with
//! `PUT state=pending`), accept (`PUT state=running`), run, report.
//!
//! Admission follows GitLab Runner's `commands/multi.go`: a `limit` permit (per runner) and a
//! `concurrent` permit (shared by all runners) are taken before a request; the scaler's
//! `reserve` decides whether a request may be made (preemptive mode: only with an idle
//! ready slot; otherwise while the fleet may still grow); a `204` gives the reservation back.

use super::client::{Client, JobRequestOutcome, ReceivedJob};
use super::error::ClientError;
use super::executor::SlotExecutor;
use super::final_update::FinalReport;
use super::hooks::{JobHooks, NoJobHooks, StartedJob};
use super::job_status::RemoteJobState;
use super::trace::{JobTrace, TraceOptions};
use super::wire::UpdateJobRequest;
use flotilla_fleet::Secret;
use flotilla_job::{FailureReason, JobCancel, Outcome};
use flotilla_scaler::ScalerError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

const RED: &str = "\x1b[31;1m";
const RESET: &str = "\x1b[0;m";

/// The settings of one runner's job source (from its `[[runners]]` entry and the global
/// section of `config.toml`).
#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// The runner's name, for logs and slot keys.
    pub name: String,
    /// Most jobs this runner runs at once (`limit`; 0 is unlimited).
    pub limit: usize,
    /// Job requests in flight at once (`request_concurrency`, at least 1).
    pub request_concurrency: usize,
    /// How long to wait before asking again when no job or no capacity came
    /// (`check_interval`).
    pub check_interval: Duration,
    /// How long a job waits for a slot (`instance_acquire_timeout`; the scaler's own when
    /// `None`).
    pub instance_acquire_timeout: Option<Duration>,
    /// Interval of `PUT state=pending` keep-alives while a taken job waits for its slot.
    pub pending_keepalive_interval: Duration,
    /// How long running jobs get after a graceful stop before they are aborted
    /// (`shutdown_timeout`).
    pub shutdown_timeout: Duration,
    /// Trace upload and final update tunables.
    pub trace: TraceOptions,
}

impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig {
            name: "runner".into(),
            limit: 0,
            request_concurrency: 1,
            check_interval: Duration::from_secs(3),
            instance_acquire_timeout: None,
            pending_keepalive_interval: Duration::from_secs(30),
            shutdown_timeout: Duration::from_secs(30),
            trace: TraceOptions::default(),
        }
    }
}

/// What a source did, counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SourceReport {
    /// Job requests answered (any status).
    pub requests: u64,
    /// Requests not made because no capacity could be reserved.
    pub no_capacity: u64,
    /// Jobs GitLab handed out.
    pub jobs_received: u64,
    /// Jobs failed without running because their payload did not decode.
    pub jobs_malformed: u64,
    /// Jobs failed without running because no slot came in time.
    pub jobs_without_slot: u64,
    /// Jobs dropped before starting because GitLab withdrew them (canceled, reassigned).
    pub jobs_withdrawn: u64,
    /// Jobs that ran on a slot.
    pub jobs_run: u64,
    /// Jobs reported successful.
    pub jobs_succeeded: u64,
    /// Jobs reported failed.
    pub jobs_failed: u64,
    /// Jobs aborted by a forced stop.
    pub jobs_interrupted: u64,
    /// Final updates that never got through.
    pub final_updates_given_up: u64,
}

/// Stops a running [`JobSource`].
#[derive(Debug, Clone)]
pub struct StopHandle {
    graceful: CancellationToken,
    force: CancellationToken,
}

impl StopHandle {
    /// Stop taking jobs; running ones get `shutdown_timeout` to finish, then are aborted.
    pub fn graceful(&self) {
        self.graceful.cancel();
    }

    /// Stop at once: stop taking jobs, abort running ones and report them failed
    /// (`runner_system_failure`).
    pub fn force(&self) {
        self.graceful.cancel();
        self.force.cancel();
    }
}

struct Inner {
    client: Arc<Client>,
    executor: Arc<dyn SlotExecutor>,
    hooks: Arc<dyn JobHooks>,
    concurrent: Option<Arc<Semaphore>>,
    limit: Option<Arc<Semaphore>>,
    config: SourceConfig,
    graceful: CancellationToken,
    /// Ends the request loops (a graceful stop, or an invalid runner token).
    requests_done: CancellationToken,
    force: CancellationToken,
    report: Mutex<SourceReport>,
    running: Mutex<HashMap<i64, JobCancel>>,
    tracker: TaskTracker,
    /// Fired whenever one of this source's jobs gave its slot back, so a request loop
    /// waiting for capacity asks again at once instead of after `check_interval`.
    slot_freed: Notify,
}

impl Inner {
    fn count(&self, f: impl FnOnce(&mut SourceReport)) {
        f(&mut self.report.lock().unwrap_or_else(|e| e.into_inner()));
    }

    fn started_job(
        &self,
        id: i64,
        name: &str,
        token: &Secret<String>,
        reasons: &[String],
    ) -> StartedJob {
        StartedJob {
            runner: self.config.name.clone(),
            url: self.client.base_url(),
            id,
            name: name.to_string(),
            token: token.clone(),
            failure_reasons: reasons.to_vec(),
        }
    }
}

/// Permits held for one job from before its request to its end.
struct Permits {
    _concurrent: Option<OwnedSemaphorePermit>,
    _limit: Option<OwnedSemaphorePermit>,
}

/// Takes jobs from GitLab for one runner and runs them through a [`SlotExecutor`].
pub struct JobSource {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for JobSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobSource")
            .field("runner", &self.inner.config.name)
            .finish_non_exhaustive()
    }
}

impl JobSource {
    /// A source asking GitLab through `client` and running jobs on `executor`'s fleet.
    pub fn new(client: Arc<Client>, executor: Arc<dyn SlotExecutor>, config: SourceConfig) -> Self {
        let graceful = CancellationToken::new();
        let limit = (config.limit > 0).then(|| Arc::new(Semaphore::new(config.limit)));
        JobSource {
            inner: Arc::new(Inner {
                client,
                executor,
                hooks: Arc::new(NoJobHooks),
                concurrent: None,
                limit,
                requests_done: graceful.child_token(),
                graceful,
                force: CancellationToken::new(),
                config,
                report: Mutex::new(SourceReport::default()),
                running: Mutex::new(HashMap::new()),
                tracker: TaskTracker::new(),
                slot_freed: Notify::new(),
            }),
        }
    }

    fn inner_mut(&mut self) -> &mut Inner {
        // Only called before `run`, while this is the only reference.
        Arc::get_mut(&mut self.inner)
            .unwrap_or_else(|| unreachable!("JobSource is configured before it runs"))
    }

    /// Follows every job through `hooks` (the durable store).
    pub fn with_hooks(mut self, hooks: Arc<dyn JobHooks>) -> Self {
        self.inner_mut().hooks = hooks;
        self
    }

    /// Shares the global `concurrent` limit with other runners' sources.
    pub fn with_concurrent(mut self, concurrent: Arc<Semaphore>) -> Self {
        self.inner_mut().concurrent = Some(concurrent);
        self
    }

    /// A handle to stop the source.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle {
            graceful: self.inner.graceful.clone(),
            force: self.inner.force.clone(),
        }
    }

    /// The counts so far.
    pub fn report(&self) -> SourceReport {
        *self.inner.report.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ids of the jobs running now.
    pub fn running_jobs(&self) -> Vec<i64> {
        let mut ids: Vec<i64> = self
            .inner
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .copied()
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Takes and runs jobs until stopped. Returns when every job it took has been reported.
    /// An invalid runner token ends the requests at once (running jobs still finish) and is
    /// returned as [`ClientError::InvalidRunnerToken`].
    pub async fn run(&self) -> Result<SourceReport, ClientError> {
        let inner = &self.inner;
        let mut workers = tokio::task::JoinSet::new();
        for n in 0..inner.config.request_concurrency.max(1) {
            workers.spawn(worker(inner.clone(), n));
        }
        let mut first_error = None;
        while let Some(r) = workers.join_next().await {
            match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => {
                    tracing::error!(runner = %inner.config.name, error = %e, "a job request worker panicked")
                }
            }
        }
        inner.tracker.close();
        let deadline = async {
            inner.graceful.cancelled().await;
            tokio::time::sleep(inner.config.shutdown_timeout).await;
        };
        tokio::select! {
            _ = inner.tracker.wait() => {}
            _ = deadline => {
                let running = self.running_jobs();
                tracing::warn!(runner = %inner.config.name, ?running, "shutdown timeout reached; aborting running jobs");
                inner.force.cancel();
                inner.tracker.wait().await;
            }
            _ = inner.force.cancelled() => inner.tracker.wait().await,
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(self.report()),
        }
    }
}

async fn permits(inner: &Inner) -> Permits {
    let limit = match &inner.limit {
        Some(s) => s.clone().acquire_owned().await.ok(),
        None => None,
    };
    let concurrent = match &inner.concurrent {
        Some(s) => s.clone().acquire_owned().await.ok(),
        None => None,
    };
    Permits {
        _concurrent: concurrent,
        _limit: limit,
    }
}

/// Sleeps `d` unless the requests end first; false when they ended.
async fn pause(inner: &Inner, d: Duration) -> bool {
    tokio::select! {
        _ = inner.requests_done.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}

/// Like [`pause`], but also ends when `freed` fires (a job of this source gave its slot
/// back): capacity may be there now. New instances becoming ready still wait for `d`.
async fn pause_for_capacity(
    inner: &Inner,
    d: Duration,
    freed: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
) -> bool {
    tokio::select! {
        _ = inner.requests_done.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
        _ = freed => true,
    }
}

/// Fires [`Inner::slot_freed`] when a job's task ends, whichever way it ends (by then its
/// slot was released or its reservation given back).
struct SlotFreed<'a>(&'a Inner);

impl Drop for SlotFreed<'_> {
    fn drop(&mut self) {
        self.0.slot_freed.notify_waiters();
    }
}

fn slot_key(name: &str) -> String {
    let short: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(24)
        .collect();
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{short}-{}", &id[..8])
}

async fn worker(inner: Arc<Inner>, n: usize) -> Result<(), ClientError> {
    let scaler = inner.executor.scaler();
    loop {
        if inner.requests_done.is_cancelled() {
            return Ok(());
        }
        let held = tokio::select! {
            _ = inner.requests_done.cancelled() => return Ok(()),
            p = permits(&inner) => p,
        };
        let key = slot_key(&inner.config.name);
        // Listen before looking, so a slot freed between the two is not missed.
        let freed = inner.slot_freed.notified();
        tokio::pin!(freed);
        freed.as_mut().enable();
        match scaler.reserve(&key) {
            Ok(()) => {}
            Err(ScalerError::NoCapacity { why, .. }) => {
                tracing::debug!(runner = %inner.config.name, worker = n, why, "no capacity: not requesting a job");
                inner.count(|r| r.no_capacity += 1);
                drop(held);
                if !pause_for_capacity(&inner, inner.config.check_interval, freed).await {
                    return Ok(());
                }
                continue;
            }
            Err(ScalerError::ShuttingDown) => return Ok(()),
            Err(e) => {
                tracing::warn!(runner = %inner.config.name, error = %e, "reserving a slot failed");
                drop(held);
                if !pause(&inner, inner.config.check_interval).await {
                    return Ok(());
                }
                continue;
            }
        }
        let asked = Instant::now();
        let answer = tokio::select! {
            _ = inner.requests_done.cancelled() => {
                scaler.unreserve(&key);
                return Ok(());
            }
            a = inner.client.request_job() => a,
        };
        inner.count(|r| r.requests += 1);
        match answer {
            Ok(JobRequestOutcome::Job(job)) => {
                inner.count(|r| r.jobs_received += 1);
                let task_inner = inner.clone();
                inner
                    .tracker
                    .spawn(async move { handle_job(task_inner, held, key, *job).await });
            }
            Ok(JobRequestOutcome::NoJob {
                queue_changed,
                long_polled,
            }) => {
                scaler.unreserve(&key);
                drop(held);
                let waited = asked.elapsed();
                if !queue_changed
                    && !long_polled
                    && waited < inner.config.check_interval
                    && !pause(&inner, inner.config.check_interval - waited).await
                {
                    return Ok(());
                }
            }
            Err(e @ ClientError::InvalidRunnerToken { .. }) => {
                scaler.unreserve(&key);
                tracing::error!(runner = %inner.config.name, error = %e, "stopping this runner's job requests");
                inner.requests_done.cancel();
                return Err(e);
            }
            Err(e) => {
                scaler.unreserve(&key);
                drop(held);
                tracing::warn!(runner = %inner.config.name, error = %e, "job request failed");
                if !pause(&inner, inner.config.check_interval).await {
                    return Ok(());
                }
            }
        }
    }
}

/// What became of a job's two-phase accept.
enum Accept {
    Accepted(RemoteJobState),
    /// GitLab answered no: the job is not ours.
    Refused,
    /// No answer: GitLab may or may not have taken it.
    Unknown,
}

async fn accept(inner: &Inner, id: i64, token: &Secret<String>) -> Accept {
    let req = UpdateJobRequest {
        info: inner.client.info(),
        token: token.expose(),
        state: "running",
        failure_reason: None,
        checksum: None,
        output: None,
        exit_code: None,
    };
    match inner.client.update_job(id, &req).await {
        Ok(r) if r.status == 200 && r.remote != RemoteJobState::Gone => Accept::Accepted(r.remote),
        Ok(r) => {
            tracing::info!(runner = %inner.config.name, job = id, status = r.status, "GitLab withdrew the job before it started");
            Accept::Refused
        }
        Err(e) => {
            tracing::warn!(runner = %inner.config.name, job = id, error = %e, "accepting the job got no answer; not running it (it stays recorded, so a restart reports it failed if GitLab took it)");
            Accept::Unknown
        }
    }
}

/// Keeps a handed-out job reserved for us while it waits for a slot: true while GitLab
/// still waits for this runner.
async fn keep_pending(inner: &Inner, id: i64, token: &Secret<String>) -> bool {
    let req = UpdateJobRequest {
        info: inner.client.info(),
        token: token.expose(),
        state: "pending",
        failure_reason: None,
        checksum: None,
        output: None,
        exit_code: None,
    };
    match inner.client.update_job(id, &req).await {
        Ok(r) => r.status == 200 && r.remote != RemoteJobState::Gone,
        // Unreachable GitLab: keep waiting; the accept will tell.
        Err(_) => true,
    }
}

async fn handle_job(inner: Arc<Inner>, held: Permits, key: String, job: ReceivedJob) {
    let _freed = SlotFreed(&inner);
    let scaler = inner.executor.scaler();
    let (Some(id), Some(token)) = (job.id, job.token.clone()) else {
        tracing::error!(runner = %inner.config.name, "GitLab handed out a job without an id or token; it cannot be reported");
        scaler.unreserve(&key);
        inner.count(|r| r.jobs_malformed += 1);
        return;
    };
    let payload = match job.payload {
        Ok(p) => p,
        Err(e) => {
            scaler.unreserve(&key);
            tracing::error!(runner = %inner.config.name, job = id, error = %e, "the job payload does not decode; failing the job");
            inner.count(|r| r.jobs_malformed += 1);
            let message = format!("flotilla could not read this job's payload: {e}");
            fail_unstarted(&inner, id, &token, "", &job.failure_reasons, &message).await;
            drop(held);
            return;
        }
    };
    let name = payload.job_info.name.clone();
    tracing::info!(runner = %inner.config.name, job = id, name = %name, "received a job");

    // Wait for the slot; GitLab waits for our accept meanwhile.
    // Boxed so it can be dropped (giving up the wait) before the key is released.
    let mut acquire = Box::pin(scaler.acquire(&key, inner.config.instance_acquire_timeout));
    let mut keepalive = tokio::time::interval_at(
        Instant::now() + inner.config.pending_keepalive_interval,
        inner.config.pending_keepalive_interval,
    );
    let acquired = loop {
        tokio::select! {
            r = &mut acquire => break Some(r),
            _ = keepalive.tick() => {
                if !keep_pending(&inner, id, &token).await {
                    break None;
                }
            }
            _ = inner.force.cancelled() => {
                break Some(Err(ScalerError::ShuttingDown));
            }
        }
    };
    let acquisition = match acquired {
        None => {
            drop(acquire);
            scaler.release(&key);
            inner.count(|r| r.jobs_withdrawn += 1);
            tracing::info!(runner = %inner.config.name, job = id, "GitLab withdrew the job while it waited for a slot");
            return;
        }
        Some(Ok(a)) => a,
        Some(Err(e)) => {
            drop(acquire);
            scaler.release(&key);
            let message = if inner.force.is_cancelled() {
                inner.count(|r| r.jobs_interrupted += 1);
                "the runner was stopped before the job could start".to_string()
            } else {
                inner.count(|r| r.jobs_without_slot += 1);
                format!("no job slot became available: {e}")
            };
            fail_unstarted(
                &inner,
                id,
                &token,
                &name,
                &payload.features.failure_reasons,
                &message,
            )
            .await;
            drop(held);
            return;
        }
    };
    drop(acquire);

    // Two-phase commit: accept only now that the job can start. The job is recorded first,
    // so that a crash after GitLab took the accept cannot leave it unreported.
    let started = inner.started_job(id, &name, &token, &payload.features.failure_reasons);
    inner.hooks.job_started(&started).await;
    let remote = match accept(&inner, id, &token).await {
        Accept::Accepted(remote) => remote,
        refused @ (Accept::Refused | Accept::Unknown) => {
            if let Accept::Refused = refused {
                inner.hooks.job_withdrawn(&started).await;
            }
            scaler.release(&key);
            drop(acquisition);
            inner.count(|r| r.jobs_withdrawn += 1);
            return;
        }
    };
    let cancel = JobCancel::new();
    if remote == RemoteJobState::Canceling {
        cancel.cancel();
    }
    inner
        .running
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id, cancel.clone());
    inner.count(|r| r.jobs_run += 1);
    let (trace, mut sink) = JobTrace::for_job(
        inner.client.clone(),
        &payload,
        cancel.clone(),
        inner.config.trace,
    );
    let result = {
        let run = inner
            .executor
            .run(acquisition, &payload, &mut sink, &cancel);
        tokio::pin!(run);
        let mut interrupted = false;
        loop {
            tokio::select! {
                r = &mut run => break (r, interrupted),
                _ = inner.force.cancelled(), if !interrupted => {
                    interrupted = true;
                    cancel.abort();
                }
            }
        }
    };
    drop(sink);
    let (result, interrupted) = result;
    let (outcome, summary) = if interrupted {
        inner.count(|r| r.jobs_interrupted += 1);
        trace.write_message(&format!(
            "\n{RED}ERROR: Job failed (system failure): the runner was stopped while the job ran{RESET}\n"
        ));
        (
            Outcome::Failed {
                reason: FailureReason::RunnerSystemFailure,
                exit_code: None,
            },
            trace.summary(),
        )
    } else {
        (result.outcome, result.trace)
    };
    inner.hooks.job_finished(&started, &outcome).await;
    let report = trace.finish(&outcome, &summary).await;
    record_report(&inner, &outcome, &report);
    inner.hooks.job_reported(&started, &report).await;
    inner
        .running
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&id);
    tracing::info!(runner = %inner.config.name, job = id, ?outcome, ?report, "job done");
    drop(held);
}

fn record_report(inner: &Inner, outcome: &Outcome, report: &FinalReport) {
    inner.count(|r| {
        if outcome.is_success() {
            r.jobs_succeeded += 1;
        } else {
            r.jobs_failed += 1;
        }
        if !report.settled() {
            r.final_updates_given_up += 1;
        }
    });
}

/// Fails a job that never ran (a payload that does not decode, no slot, a forced stop):
/// accept it, write `message` to its log, report `runner_system_failure`.
async fn fail_unstarted(
    inner: &Inner,
    id: i64,
    token: &Secret<String>,
    name: &str,
    failure_reasons: &[String],
    message: &str,
) {
    let started = inner.started_job(id, name, token, failure_reasons);
    inner.hooks.job_started(&started).await;
    match accept(inner, id, token).await {
        Accept::Accepted(_) => {}
        Accept::Refused => {
            inner.hooks.job_withdrawn(&started).await;
            return;
        }
        Accept::Unknown => return,
    }
    let (trace, sink) = JobTrace::start(
        inner.client.clone(),
        id,
        token.clone(),
        failure_reasons.to_vec(),
        false,
        JobCancel::new(),
        inner.config.trace,
    );
    drop(sink);
    trace.write_message(&format!(
        "{RED}ERROR: Job failed (system failure): {message}{RESET}\n"
    ));
    let outcome = Outcome::Failed {
        reason: FailureReason::RunnerSystemFailure,
        exit_code: None,
    };
    inner.hooks.job_finished(&started, &outcome).await;
    let summary = trace.summary();
    let report = trace.finish(&outcome, &summary).await;
    record_report(inner, &outcome, &report);
    inner.hooks.job_reported(&started, &report).await;
}
