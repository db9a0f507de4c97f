//! The job source of one `[[runners]]` entry: `request_concurrency` workers ask GitLab for
//! jobs, each only after reserving a slot (so no job is taken that cannot start), and every
//! job runs on its own task: record it, accept it, wait for its slot, run it, report it.
//!
//! Admission follows GitLab Runner's `commands/multi.go`: a `limit` permit (per runner) and a
//! `concurrent` permit (shared by all runners) are taken before a request; the scaler's
//! `reserve` decides whether a request may be made (preemptive mode: only with an idle
//! ready slot; otherwise while the fleet may still grow); a `204` gives the reservation back.
//!
//! Acceptance follows GitLab as installed: two-phase acceptance is off by default (Rails'
//! feature flag `allow_runner_job_acknowledgement`), so a job is `running` the moment the 201
//! leaves GitLab. The job is recorded (hooks) before anything else, then accepted with
//! `PUT state=running` right away, as `multi.go` `requestJob` does; its log starts with the
//! wait for a slot, and the log's keep-alives carry cancellation while it waits.
//! [`Acceptance::WhenSlotReady`] is for a GitLab known to wait for the acknowledgement: the
//! job is kept with `PUT state=pending` until its slot is there; a 400 to that means GitLab
//! did not wait (the job is already running), and the job is kept.
//!
//! A job is given up (never run) only when GitLab refuses it: 403, 404, another client
//! error, or `Job-Status: failed|canceled`. When the accept gets no usable answer (429, 5xx,
//! no answer at all) the job still runs and is reported: GitLab may think it runs.
//!
//! Job requests never stop for good: a 403 (or 422, orphaned) counts toward the runner's
//! health like GitLab Runner's `health_helper.go`; an unhealthy runner asks again after
//! `unhealthy_interval`.

use super::client::{Client, JobRequestOutcome, ReceivedJob};
use super::error::ClientError;
use super::executor::SlotExecutor;
use super::final_update::FinalReport;
use super::health::{
    DEFAULT_UNHEALTHY_INTERVAL, DEFAULT_UNHEALTHY_REQUESTS_LIMIT, Health, Verdict,
};
use super::hooks::{JobHooks, NoJobHooks, StartedJob};
use super::job_status::RemoteJobState;
use super::trace::{JobTrace, TraceOptions};
use super::wire::UpdateJobRequest;
use flotilla_fleet::Secret;
use flotilla_job::model::Variable;
use flotilla_job::{FailureReason, JobCancel, JobPayload, Outcome};
use flotilla_scaler::{Acquisition, Reservation, ScalerError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

const RED: &str = "\x1b[31;1m";
const CYAN: &str = "\x1b[36;1m";
const RESET: &str = "\x1b[0;m";

/// When a job is accepted (`PUT state=running`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acceptance {
    /// Right after the 201, as GitLab Runner does: the only safe choice unless GitLab is
    /// known to wait, because by default GitLab considers the job running already.
    Immediately,
    /// Once the job's slot is acquired, with `PUT state=pending` keep-alives every `interval`
    /// until then. Only for a GitLab with two-phase acceptance on
    /// (`allow_runner_job_acknowledgement`); on any other, the first keep-alive answers 400
    /// and the job is accepted at once.
    WhenSlotReady {
        /// Interval of the `pending` keep-alives.
        interval: Duration,
    },
}

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
    /// When jobs are accepted.
    pub acceptance: Acceptance,
    /// Refused job requests in a row that make the runner unhealthy
    /// (`unhealthy_requests_limit`, 3).
    pub unhealthy_requests_limit: u32,
    /// How long an unhealthy runner waits before asking again (`unhealthy_interval`, 1 h).
    pub unhealthy_interval: Duration,
    /// How long running jobs get after a graceful stop before they are aborted
    /// (`shutdown_timeout`).
    pub shutdown_timeout: Duration,
    /// Trace upload and final update tunables.
    pub trace: TraceOptions,
    /// The runner's `environment` entries, given to every job before its own variables, as
    /// GitLab Runner's `RunnerConfig.GetVariables` does (`common/config.go`): a variable of
    /// the job's with the same name wins, and services get them too. Like GitLab, flotilla
    /// does not mask them.
    pub environment: Vec<Variable>,
    /// The runner's `clone_url`: where jobs fetch their sources instead of the payload's
    /// `repo_url` ([`flotilla_job::script::clone_url_remote`]).
    pub clone_url: Option<String>,
    /// The runner's `[runners.feature_flags]`: a flag it names is on or off for every job,
    /// whatever the job's variables say (`JobPayload::feature_flag`).
    pub feature_flags: std::collections::BTreeMap<String, bool>,
}

impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig {
            name: "runner".into(),
            limit: 0,
            request_concurrency: 1,
            check_interval: Duration::from_secs(3),
            instance_acquire_timeout: None,
            acceptance: Acceptance::Immediately,
            unhealthy_requests_limit: DEFAULT_UNHEALTHY_REQUESTS_LIMIT,
            unhealthy_interval: DEFAULT_UNHEALTHY_INTERVAL,
            shutdown_timeout: Duration::from_secs(30),
            trace: TraceOptions::default(),
            environment: Vec::new(),
            clone_url: None,
            feature_flags: std::collections::BTreeMap::new(),
        }
    }
}

/// What a source did, counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SourceReport {
    /// Job requests answered (any status).
    pub requests: u64,
    /// Job requests that failed (no answer, a server error after retries, a refusal).
    pub requests_failed: u64,
    /// Times the runner became unhealthy (refused requests in a row).
    pub unhealthy: u64,
    /// Requests not made because no capacity could be reserved.
    pub no_capacity: u64,
    /// Jobs GitLab handed out.
    pub jobs_received: u64,
    /// Jobs that could not even be identified (no id or token): nothing can be reported.
    pub jobs_unidentified: u64,
    /// Jobs failed without running because their payload did not decode.
    pub jobs_malformed: u64,
    /// Accepts that got no usable answer (the job ran anyway).
    pub accepts_unanswered: u64,
    /// Jobs failed without running because no slot came in time.
    pub jobs_without_slot: u64,
    /// Jobs dropped before starting because GitLab refused them (canceled, reassigned).
    pub jobs_withdrawn: u64,
    /// Jobs canceled on GitLab while they waited for a slot.
    pub jobs_canceled_waiting: u64,
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
    /// (`runner_interrupted` where GitLab knows it).
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
    /// Ends the request loops (a stop).
    graceful: CancellationToken,
    force: CancellationToken,
    report: Mutex<SourceReport>,
    running: Mutex<HashMap<i64, JobCancel>>,
    health: Mutex<Health>,
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

    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(|e| e.into_inner())
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
        let limit = (config.limit > 0).then(|| Arc::new(Semaphore::new(config.limit)));
        let health = Health::new(
            config.unhealthy_requests_limit,
            config.unhealthy_interval,
            Instant::now(),
        );
        JobSource {
            inner: Arc::new(Inner {
                client,
                executor,
                hooks: Arc::new(NoJobHooks),
                concurrent: None,
                limit,
                graceful: CancellationToken::new(),
                force: CancellationToken::new(),
                config,
                report: Mutex::new(SourceReport::default()),
                running: Mutex::new(HashMap::new()),
                health: Mutex::new(health),
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

    /// Takes and runs jobs until stopped; returns when every job it took has been reported
    /// (or, after a forced stop or the shutdown timeout, aborted and reported).
    pub async fn run(&self) -> SourceReport {
        let inner = &self.inner;
        let mut workers = tokio::task::JoinSet::new();
        for n in 0..inner.config.request_concurrency.max(1) {
            workers.spawn(worker(inner.clone(), n));
        }
        while let Some(r) = workers.join_next().await {
            if let Err(e) = r {
                tracing::error!(runner = %inner.config.name, error = %e, "a job request worker panicked");
            }
        }
        inner.tracker.close();
        let deadline = async {
            inner.graceful.cancelled().await;
            tokio::time::sleep(inner.config.shutdown_timeout).await;
        };
        tokio::select! {
            () = inner.tracker.wait() => {}
            () = deadline => {
                let running = self.running_jobs();
                tracing::warn!(runner = %inner.config.name, ?running, "shutdown timeout reached; aborting running jobs");
                inner.force.cancel();
                inner.tracker.wait().await;
            }
            () = inner.force.cancelled() => inner.tracker.wait().await,
        }
        self.report()
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
        () = inner.graceful.cancelled() => false,
        () = tokio::time::sleep(d) => true,
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
        () = inner.graceful.cancelled() => false,
        () = tokio::time::sleep(d) => true,
        () = freed => true,
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

/// Whether a failed job request counts against the runner's health: GitLab refused the
/// runner itself (403: token invalid or runner deleted; 422: orphaned). Server errors and
/// requests that got no answer do not (`multi.go` marks only those unhealthy).
fn refuses_the_runner(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::InvalidRunnerToken { .. } | ClientError::RunnerOrphaned { .. }
    )
}

async fn worker(inner: Arc<Inner>, n: usize) {
    let scaler = inner.executor.scaler();
    loop {
        if inner.graceful.is_cancelled() {
            return;
        }
        let verdict = inner.health().verdict(Instant::now());
        if let Verdict::WaitFor(d) = verdict {
            tracing::debug!(runner = %inner.config.name, wait_s = d.as_secs(), "runner unhealthy; waiting before asking again");
            if !pause(&inner, d).await {
                return;
            }
            continue;
        }
        if let Some(why) = inner.hooks.refuses_new_jobs() {
            tracing::debug!(runner = %inner.config.name, worker = n, why, "not asking for a job");
            if !pause(
                &inner,
                inner.config.check_interval.max(Duration::from_secs(1)),
            )
            .await
            {
                return;
            }
            continue;
        }
        let held = tokio::select! {
            () = inner.graceful.cancelled() => return,
            p = permits(&inner) => p,
        };
        let key = slot_key(&inner.config.name);
        // Listen before looking, so a slot freed between the two is not missed.
        let freed = inner.slot_freed.notified();
        tokio::pin!(freed);
        freed.as_mut().enable();
        let reservation = match scaler.reserve_owned(key) {
            Ok(r) => r,
            Err(ScalerError::NoCapacity { why, .. }) => {
                tracing::debug!(runner = %inner.config.name, worker = n, why, "no capacity: not requesting a job");
                inner.count(|r| r.no_capacity += 1);
                drop(held);
                if !pause_for_capacity(&inner, inner.config.check_interval, freed).await {
                    return;
                }
                continue;
            }
            Err(ScalerError::ShuttingDown) => return,
            Err(e) => {
                tracing::warn!(runner = %inner.config.name, error = %e, "reserving a slot failed");
                drop(held);
                if !pause(&inner, inner.config.check_interval).await {
                    return;
                }
                continue;
            }
        };
        let asked = Instant::now();
        let answer = tokio::select! {
            () = inner.graceful.cancelled() => return,
            a = inner.client.request_job() => a,
        };
        inner.count(|r| r.requests += 1);
        match answer {
            Ok(JobRequestOutcome::Job(job)) => {
                inner.health().record(true, Instant::now());
                inner.count(|r| r.jobs_received += 1);
                let task_inner = inner.clone();
                inner
                    .tracker
                    .spawn(async move { handle_job(task_inner, held, reservation, *job).await });
            }
            Ok(JobRequestOutcome::NoJob { queue_changed }) => {
                inner.health().record(true, Instant::now());
                drop(reservation);
                drop(held);
                // Ask again at once when the queue changed; otherwise once `check_interval`
                // has passed since the request went out (a long poll may have used it up).
                let waited = asked.elapsed();
                if !queue_changed
                    && waited < inner.config.check_interval
                    && !pause(
                        &inner,
                        inner.config.check_interval.checked_sub(waited).unwrap(),
                    )
                    .await
                {
                    return;
                }
            }
            Err(e) => {
                drop(reservation);
                drop(held);
                inner.count(|r| r.requests_failed += 1);
                if refuses_the_runner(&e) {
                    let now = Instant::now();
                    let became_unhealthy = inner.health().record(false, now);
                    if became_unhealthy {
                        inner.count(|r| r.unhealthy += 1);
                        tracing::error!(
                            runner = %inner.config.name, error = %e,
                            retry_in_s = inner.config.unhealthy_interval.as_secs(),
                            "the runner is unhealthy: GitLab refused its job requests; asking again later"
                        );
                    } else {
                        tracing::error!(runner = %inner.config.name, error = %e, "GitLab refused the job request");
                    }
                } else {
                    inner.health().record(true, Instant::now());
                    tracing::warn!(runner = %inner.config.name, error = %e, "job request failed; asking again later");
                }
                if !pause(&inner, inner.config.check_interval).await {
                    return;
                }
            }
        }
    }
}

/// What GitLab answered to a job state update before the job ran.
enum StateAnswer {
    /// 200, and the job is not canceled.
    Ok(RemoteJobState),
    /// GitLab refused: 403, 404, another client error, or `Job-Status: failed|canceled`.
    Refused(u16),
    /// No usable answer (429, 5xx after retries, or none at all).
    Unanswered(String),
}

async fn put_state(inner: &Inner, id: i64, token: &Secret<String>, state: &str) -> StateAnswer {
    let req = UpdateJobRequest {
        info: inner.client.info(),
        token: token.expose(),
        state,
        failure_reason: None,
        checksum: None,
        output: None,
        exit_code: None,
    };
    match inner.client.update_job(id, &req).await {
        Ok(r) if r.remote == RemoteJobState::Gone => StateAnswer::Refused(r.status),
        Ok(r) if r.status == 200 => StateAnswer::Ok(r.remote),
        Ok(r) if (400..500).contains(&r.status) && !matches!(r.status, 408 | 429) => {
            StateAnswer::Refused(r.status)
        }
        Ok(r) => StateAnswer::Unanswered(format!("GitLab answered {}", r.status)),
        Err(e) => StateAnswer::Unanswered(e.to_string()),
    }
}

/// One job from its 201 to its report.
struct Job {
    inner: Arc<Inner>,
    id: i64,
    token: Secret<String>,
    started: StartedJob,
    /// The job's claim on the scaler: its slot (once acquired) is free when this drops.
    reservation: Reservation,
    /// Where it runs: the source's executor, or the one [`SlotExecutor::route`] chose.
    executor: Arc<dyn SlotExecutor>,
    /// Lines for its log from the routing.
    notes: Vec<String>,
}

impl Job {
    /// Gives the job up before it ran: GitLab refused it. The record is dropped (GitLab may
    /// hand the job out again), and so is the slot.
    async fn withdraw(&self, status: u16, when: &str) {
        tracing::info!(runner = %self.inner.config.name, job = self.id, status, "GitLab refused the job {when}; it does not run here");
        self.inner.hooks.job_withdrawn(&self.started).await;
        self.reservation.release();
        self.inner.count(|r| r.jobs_withdrawn += 1);
    }

    /// Accepts the job; false when GitLab refused it (already withdrawn).
    async fn accept(&self, cancel: &JobCancel) -> bool {
        match put_state(&self.inner, self.id, &self.token, "running").await {
            StateAnswer::Ok(remote) => {
                if remote == RemoteJobState::Canceling {
                    cancel.cancel();
                }
                true
            }
            StateAnswer::Refused(status) => {
                self.withdraw(status, "when it was accepted").await;
                false
            }
            StateAnswer::Unanswered(e) => {
                // GitLab may think the job runs (by default it runs from the 201 on): run
                // it and keep reporting; the log and the final update tell the rest.
                tracing::warn!(runner = %self.inner.config.name, job = self.id, error = %e, "accepting the job got no usable answer; running it anyway");
                self.inner.count(|r| r.accepts_unanswered += 1);
                true
            }
        }
    }

    /// Reports a job that ends without running (a payload that does not decode, no slot, a
    /// stop, a cancel): `message` in its log, then the final update with `outcome`.
    async fn fail_unstarted(&self, trace: JobTrace, outcome: Outcome, message: &str) {
        trace.write_message(&format!("{RED}ERROR: {message}{RESET}\n"));
        self.inner.hooks.job_finished(&self.started, &outcome).await;
        let report = trace.finish(&outcome).await;
        record_report(&self.inner, &outcome, &report);
        self.inner.hooks.job_reported(&self.started, &report).await;
        tracing::info!(runner = %self.inner.config.name, job = self.id, ?outcome, ?report, "job ended without running");
    }
}

/// How waiting for the slot ended.
enum SlotWait {
    Acquired(Box<Acquisition>),
    Failed(ScalerError),
    /// A forced stop.
    Interrupted,
    /// GitLab canceled the job meanwhile.
    Canceled,
    /// Two-phase: GitLab refused a keep-alive (the job is no longer ours).
    Refused(u16),
    /// The runner cannot run this job (routing said why); its slot was never waited for.
    Unroutable(String),
}

/// Asks the executor where the job runs; when elsewhere, the job reserves there and gives
/// back its reservation here (dropped when replaced).
async fn route(job: &mut Job, payload: &JobPayload) -> Result<(), String> {
    let route = job.executor.route(payload).await?;
    job.notes = route.notes;
    if let Some(executor) = route.executor {
        let key = slot_key(&job.inner.config.name);
        let reservation = match executor.scaler().reserve_owned(key.clone()) {
            Ok(r) => r,
            // Every slot that fleet may have is promised: the job, already ours, waits for
            // one (up to `instance_acquire_timeout`) as any job GitLab hands over does,
            // rather than failing while the fleet is busy.
            Err(ScalerError::NoCapacity { .. }) => executor.scaler().waiting_owned(key),
            Err(e) => return Err(format!("no job slot can be reserved for it: {e}")),
        };
        job.reservation = reservation;
        job.executor = executor;
    }
    Ok(())
}

async fn handle_job(
    inner: Arc<Inner>,
    held: Permits,
    reservation: Reservation,
    received: ReceivedJob,
) {
    let _freed = SlotFreed(&inner);
    let (Some(id), Some(token)) = (received.id, received.token.clone()) else {
        tracing::error!(runner = %inner.config.name, "GitLab handed out a job without a readable id or token; it cannot be reported");
        drop(reservation);
        inner.count(|r| r.jobs_unidentified += 1);
        return;
    };
    let (name, reasons) = match &received.payload {
        Ok(p) => (
            p.payload.job_info.name.clone(),
            p.payload.features.failure_reasons.clone(),
        ),
        Err(_) => (String::new(), received.failure_reasons.clone()),
    };
    if let Ok(p) = &received.payload {
        for e in &p.ignored {
            tracing::warn!(runner = %inner.config.name, job = id, field = %e.path, error = %e.message, "ignored an informational field of the job payload that did not decode");
        }
    }
    // Recorded before anything else: by default GitLab considers the job running from the
    // 201 on, so a manager killed from here on must find it at its next start.
    let started = inner.started_job(id, &name, &token, &reasons);
    inner.hooks.job_started(&started).await;
    let mut job = Job {
        inner: inner.clone(),
        id,
        token: token.clone(),
        started,
        reservation,
        executor: inner.executor.clone(),
        notes: Vec::new(),
    };
    let cancel = JobCancel::new();
    let immediately = inner.config.acceptance == Acceptance::Immediately;
    if (immediately || received.payload.is_err()) && !job.accept(&cancel).await {
        return;
    }
    let mut payload: JobPayload = match received.payload {
        Ok(p) => p.payload,
        Err(e) => {
            job.reservation.release();
            tracing::error!(runner = %inner.config.name, job = id, error = %e, "the job payload does not decode; failing the job");
            inner.count(|r| r.jobs_malformed += 1);
            let trace = JobTrace::start(
                inner.client.clone(),
                id,
                token.clone(),
                reasons,
                false,
                cancel,
                inner.config.trace,
            );
            let outcome = Outcome::Failed {
                reason: FailureReason::RunnerSystemFailure,
                exit_code: None,
            };
            job.fail_unstarted(
                trace,
                outcome,
                &format!(
                    "Job failed (system failure): flotilla could not read this job's payload: {e}"
                ),
            )
            .await;
            drop(held);
            return;
        }
    };
    // The runner's `environment` comes first, so the job's own variables win.
    payload
        .variables
        .splice(0..0, inner.config.environment.iter().cloned());
    payload
        .runner_feature_flags
        .clone_from(&inner.config.feature_flags);
    if let Some(remote) = inner.config.clone_url.as_deref().and_then(|c| {
        let project = payload
            .variables
            .iter()
            .rev()
            .find(|v| v.key == "CI_PROJECT_PATH")
            .map_or(payload.job_info.project_full_path.as_str(), |v| {
                v.value.as_str()
            });
        flotilla_job::script::clone_url_remote(c, payload.token.expose(), project)
    }) {
        payload.git_info.repo_url = Secret::new(remote);
    }
    tracing::info!(runner = %inner.config.name, job = id, name = %name, "received a job");

    let mut trace = immediately.then(|| {
        JobTrace::for_job(
            inner.client.clone(),
            &payload,
            cancel.clone(),
            inner.config.trace,
        )
    });
    let waited = match route(&mut job, &payload).await {
        Ok(()) => wait_for_slot(&job, &cancel, &mut trace, &payload).await,
        Err(message) => SlotWait::Unroutable(message),
    };
    let (outcome, message) = match waited {
        SlotWait::Acquired(a) => {
            run_acquired(&job, &payload, *a, trace, cancel).await;
            drop(held);
            return;
        }
        SlotWait::Refused(status) => {
            job.withdraw(status, "while it waited for a slot").await;
            drop(held);
            return;
        }
        SlotWait::Interrupted => {
            inner.count(|r| r.jobs_interrupted += 1);
            (
                FailureReason::RunnerInterrupted,
                "Job failed: the runner was stopped before the job could start".to_string(),
            )
        }
        SlotWait::Canceled => {
            inner.count(|r| r.jobs_canceled_waiting += 1);
            (
                FailureReason::JobCanceled,
                "Job canceled before it started".to_string(),
            )
        }
        SlotWait::Failed(e) => {
            inner.count(|r| r.jobs_without_slot += 1);
            (
                FailureReason::RunnerSystemFailure,
                format!("Job failed (system failure): no job slot became available: {e}"),
            )
        }
        SlotWait::Unroutable(message) => {
            tracing::info!(runner = %inner.config.name, job = id, reason = %message, "the job cannot run on this runner");
            // GitLab Runner fails a job whose executor cannot be prepared (an error that is
            // no `BuildError`) as `Job failed (system failure): <error>` with
            // `runner_system_failure` (`common/build.go`, `setTraceStatus`).
            (
                FailureReason::RunnerSystemFailure,
                format!("Job failed (system failure): {message}"),
            )
        }
    };
    job.reservation.release();
    let trace = match trace.take() {
        Some(t) => t,
        // Two-phase: accept before reporting anything.
        None if job.accept(&cancel).await => JobTrace::for_job(
            inner.client.clone(),
            &payload,
            cancel.clone(),
            inner.config.trace,
        ),
        None => {
            drop(held);
            return;
        }
    };
    let outcome = Outcome::Failed {
        reason: outcome,
        exit_code: None,
    };
    job.fail_unstarted(trace, outcome, &message).await;
    drop(held);
}

/// The job's slot is there: accepts it now under two-phase acceptance, then runs it.
async fn run_acquired(
    job: &Job,
    payload: &JobPayload,
    acquisition: Acquisition,
    trace: Option<JobTrace>,
    cancel: JobCancel,
) {
    let inner = &job.inner;
    // Two-phase: accept only now that the job can start.
    let trace = match trace {
        Some(t) => t,
        None => {
            if !job.accept(&cancel).await {
                drop(acquisition);
                return;
            }
            JobTrace::for_job(
                inner.client.clone(),
                payload,
                cancel.clone(),
                inner.config.trace,
            )
        }
    };
    for note in &job.notes {
        trace.write_message(&format!("{note}\n"));
    }
    run_on_slot(job, payload, acquisition, trace, cancel).await;
}

/// Waits for the job's slot, watching for a forced stop and for GitLab canceling the job
/// (learned from the log's keep-alives when accepted, from `pending` keep-alives before).
/// With the job accepted, a note goes into its log when the slot does not come at once.
async fn wait_for_slot(
    job: &Job,
    cancel: &JobCancel,
    trace: &mut Option<JobTrace>,
    payload: &JobPayload,
) -> SlotWait {
    let inner = &job.inner;
    let mut acquire = Box::pin(
        job.reservation
            .acquire(inner.config.instance_acquire_timeout),
    );
    let keepalive_every = match inner.config.acceptance {
        Acceptance::WhenSlotReady { interval } if trace.is_none() => Some(interval),
        _ => None,
    };
    let mut keepalive = tokio::time::interval_at(
        Instant::now() + keepalive_every.unwrap_or(Duration::from_secs(3600)),
        keepalive_every.unwrap_or(Duration::from_secs(3600)),
    );
    if let Some(t) = trace.as_ref() {
        // A cold instance can take minutes: say so in the log rather than stay silent.
        if let Ok(r) = tokio::time::timeout(Duration::from_millis(250), &mut acquire).await {
            return match r {
                Ok(a) => SlotWait::Acquired(Box::new(a)),
                Err(e) => SlotWait::Failed(e),
            };
        }
        t.write_message(&format!(
            "{CYAN}Waiting for a job slot on the fleet of runner {:?} (job {} {:?})...{RESET}\n",
            inner.config.name, job.id, payload.job_info.name
        ));
    }
    loop {
        tokio::select! {
            r = &mut acquire => return match r {
                Ok(a) => SlotWait::Acquired(Box::new(a)),
                Err(e) => SlotWait::Failed(e),
            },
            () = inner.force.cancelled() => return SlotWait::Interrupted,
            () = cancel.requested() => return SlotWait::Canceled,
            _ = keepalive.tick(), if trace.is_none() && keepalive_every.is_some() => {
                match put_state(inner, job.id, &job.token, "pending").await {
                    StateAnswer::Ok(_) | StateAnswer::Unanswered(_) => {}
                    // GitLab did not wait for an acknowledgement: the job runs already.
                    StateAnswer::Refused(400) => {
                        tracing::info!(runner = %inner.config.name, job = job.id, "GitLab answered 400 to a pending keep-alive: the job is running already; accepting it now");
                        if !job.accept(cancel).await {
                            return SlotWait::Refused(400);
                        }
                        *trace = Some(JobTrace::for_job(inner.client.clone(), payload, cancel.clone(), inner.config.trace));
                    }
                    StateAnswer::Refused(status) => return SlotWait::Refused(status),
                }
            }
        }
    }
}

/// Runs the job on its slot and reports it.
async fn run_on_slot(
    job: &Job,
    payload: &JobPayload,
    acquisition: Acquisition,
    trace: JobTrace,
    cancel: JobCancel,
) {
    let inner = &job.inner;
    let id = job.id;
    inner
        .running
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id, cancel.clone());
    inner.count(|r| r.jobs_run += 1);
    let mut sink = trace.sink();
    let result = {
        let run = job.executor.run(acquisition, payload, &mut sink, &cancel);
        tokio::pin!(run);
        let mut interrupted = false;
        loop {
            tokio::select! {
                r = &mut run => break (r, interrupted),
                () = inner.force.cancelled(), if !interrupted => {
                    interrupted = true;
                    cancel.abort();
                }
            }
        }
    };
    drop(sink);
    let (result, interrupted) = result;
    let outcome = if interrupted {
        inner.count(|r| r.jobs_interrupted += 1);
        trace.write_message(&format!(
            "\n{RED}ERROR: Job failed: the runner was stopped while the job ran{RESET}\n"
        ));
        // GitLab Runner's `common/build.go`: a system interrupt is `runner_interrupted`.
        Outcome::Failed {
            reason: FailureReason::RunnerInterrupted,
            exit_code: None,
        }
    } else {
        result.outcome
    };
    inner.hooks.job_finished(&job.started, &outcome).await;
    let report = trace.finish(&outcome).await;
    record_report(inner, &outcome, &report);
    inner.hooks.job_reported(&job.started, &report).await;
    inner
        .running
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&id);
    tracing::info!(runner = %inner.config.name, job = id, ?outcome, ?report, "job done");
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
