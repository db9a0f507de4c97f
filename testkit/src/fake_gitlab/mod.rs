//! A fake GitLab: the runner side of GitLab's runner API (reference
//! gitlab-runner-protocol.md §1), served on 127.0.0.1, for testing a runner end to end.
//!
//! - `POST /api/v4/runners/verify`: 200 for known runner tokens, 403 otherwise.
//! - `POST /api/v4/jobs/request`: a job queue per runner token; long polling like Workhorse
//!   (a request whose `last_update` equals the queue's value waits up to the poll duration
//!   for a change and then answers 204 with `Gitlab-Ci-Builds-Polling: yes`); other answers
//!   ("Rails") carry `X-GitLab-Last-Update`; jobs go to
//!   runners that advertise `two_phase_job_commit` as "waiting for ack" and are queued again
//!   when no accept comes within the ack timeout (`PUT state=pending` extends it).
//! - `PUT /api/v4/jobs/:id`: `pending` / `running` (accept, keep-alive), the final
//!   `success` / `failed` with checksum and size validation (412 on mismatch, after which
//!   the fake drops its copy so the runner can resend from 0), 202 while "persisting"
//!   (configurable), 403 once the job has ended (its token is revoked).
//! - `PATCH /api/v4/jobs/:id/trace`: appends at exactly the current size, else 416 with
//!   `Range: 0-<size>`; `Content-Range` must be `start-end` with an inclusive end;
//!   `Content-Type` must be set; answers carry `Job-Status` and
//!   `X-GitLab-Trace-Update-Interval`.
//! - `POST` / `GET /api/v4/jobs/:id/artifacts`: multipart part `file` with
//!   `artifact_format`/`artifact_type`/`expire_in` in the query; downloads with the job's own
//!   token or a dependant's, optionally through a redirect to a "storage" URL.
//! - Cancellation: [`FakeGitLab::cancel`] (graceful, `canceling`) and [`FakeGitLab::abort`]
//!   (`canceled`, the token stops working).
//! - Fault injection ([`FaultConfig`]): a seeded share of requests answered 500 or 429 with
//!   `Retry-After`, delayed, or dropped before or after being processed.
//! - Planned answers ([`FakeGitLab::script`]): the next requests to a path get given
//!   statuses (409, 429 with `Retry-After`, 503) or faults, for exact protocol tests.
//! - Every request is recorded ([`FakeGitLab::requests`]) with its headers, body and answer.

mod builder;
mod faults;
mod server;
mod state;

pub use builder::{GITLAB_FAILURE_REASONS, JobBuilder};
pub use faults::{FaultConfig, FaultKind, Scripted};
pub use state::{
    Behaviour, FakeJob, FakeJobState, FinalUpdate, RecordedBody, RecordedRequest, UploadedArtifact,
};

use faults::Faults;
use server::Server;
use state::Data;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Configures a [`FakeGitLab`].
#[derive(Debug, Clone, Default)]
pub struct FakeGitLabBuilder {
    runner_tokens: Vec<String>,
    behaviour: Behaviour,
    faults: Option<FaultConfig>,
}

impl FakeGitLabBuilder {
    /// Accepts this runner token (more than one may be added).
    pub fn runner_token(mut self, token: impl Into<String>) -> Self {
        self.runner_tokens.push(token.into());
        self
    }

    /// How long a long-polling job request waits for a job (default 2 s).
    pub fn poll_duration(mut self, d: Duration) -> Self {
        self.behaviour.poll_duration = d;
        self
    }

    /// The `X-GitLab-Trace-Update-Interval` sent, in seconds (default 3).
    pub fn trace_update_interval(mut self, secs: u64) -> Self {
        self.behaviour.trace_update_interval = secs;
        self
    }

    /// How long a handed-out job waits for its accept before it is queued again
    /// (default 60 s).
    pub fn ack_timeout(mut self, d: Duration) -> Self {
        self.behaviour.ack_timeout = d;
        self
    }

    /// Answers the first `n` final updates of every job with 202 (default 0).
    pub fn persist_202s(mut self, n: u32) -> Self {
        self.behaviour.persist_202s = n;
        self
    }

    /// Redirects artifact downloads to a storage URL on another origin (`localhost` instead
    /// of `127.0.0.1`), like object storage (default off).
    pub fn artifact_redirect(mut self, on: bool) -> Self {
        self.behaviour.artifact_redirect = on;
        self
    }

    /// Injects faults.
    pub fn faults(mut self, faults: FaultConfig) -> Self {
        self.faults = Some(faults);
        self
    }

    /// Starts the server on 127.0.0.1 on a free port.
    pub async fn start(self) -> std::io::Result<FakeGitLab> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let mut data = Data {
            behaviour: self.behaviour,
            storage_origin: format!("http://localhost:{}", addr.port()),
            ..Data::default()
        };
        for t in &self.runner_tokens {
            data.add_runner(t);
        }
        let server = Arc::new(Server {
            data: Mutex::new(data),
            faults: Mutex::new(self.faults.map(Faults::new)),
            queue_changed: Notify::new(),
            scripted: Mutex::new(Vec::new()),
        });
        let stop = CancellationToken::new();
        tokio::spawn(server::serve(listener, server.clone(), stop.clone()));
        Ok(FakeGitLab {
            url: format!("http://{addr}"),
            server,
            stop,
        })
    }
}

/// A running fake GitLab. Stops when dropped.
pub struct FakeGitLab {
    url: String,
    server: Arc<Server>,
    stop: CancellationToken,
}

impl std::fmt::Debug for FakeGitLab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeGitLab")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Drop for FakeGitLab {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl FakeGitLab {
    /// A builder.
    pub fn builder() -> FakeGitLabBuilder {
        FakeGitLabBuilder::default()
    }

    /// The base URL (`http://127.0.0.1:<port>`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Accepts another runner token.
    pub fn add_runner(&self, token: &str) {
        self.server.lock().add_runner(token);
    }

    /// Queues a job for `runner_token`; returns its id.
    pub fn enqueue(&self, runner_token: &str, job: JobBuilder) -> i64 {
        let id = self.server.lock().enqueue(runner_token, job);
        self.server.queue_changed.notify_waiters();
        id
    }

    /// A snapshot of a job.
    pub fn job(&self, id: i64) -> Option<FakeJob> {
        self.server.lock().jobs.get(&id).cloned()
    }

    /// Snapshots of every job.
    pub fn jobs(&self) -> Vec<FakeJob> {
        self.server.lock().jobs.values().cloned().collect()
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        let mut r = self.server.lock().requests.clone();
        r.sort_by_key(|r| r.seq);
        r
    }

    /// The requests to paths starting with `prefix`, with this method.
    pub fn requests_to(&self, method: &str, prefix: &str) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && r.path.starts_with(prefix))
            .collect()
    }

    /// The system ids seen on verify and job requests.
    pub fn system_ids(&self) -> Vec<String> {
        let mut v: Vec<String> = self.server.lock().system_ids.iter().cloned().collect();
        v.sort();
        v
    }

    /// Cancels a job gracefully: it becomes `canceling` (after_script runs on the runner).
    pub fn cancel(&self, id: i64) {
        if let Some(j) = self.server.lock().jobs.get_mut(&id)
            && j.state.is_active()
        {
            j.set_state(FakeJobState::Canceling);
        }
    }

    /// Cancels a job at once: it becomes `canceled` and its token stops working.
    pub fn abort(&self, id: i64) {
        let mut d = self.server.lock();
        if let Some(j) = d.jobs.get_mut(&id)
            && !j.state.is_finished()
        {
            j.set_state(FakeJobState::Canceled);
            let rt = j.runner_token.clone();
            if let Some(q) = d.queues.get_mut(&rt) {
                q.retain(|x| *x != id);
            }
        }
    }

    /// Answers the next `n` final updates of job `id` with 412 (checksum mismatch).
    pub fn reject_checksum(&self, id: i64, n: u32) {
        if let Some(j) = self.server.lock().jobs.get_mut(&id) {
            j.reject_checksum = n;
        }
    }

    /// Replaces (or with `None`, removes) the fault injection.
    pub fn set_faults(&self, faults: Option<FaultConfig>) {
        *self.server.faults.lock().unwrap_or_else(|e| e.into_inner()) = faults.map(Faults::new);
    }

    /// Plans the answers to the next requests with `method` to paths starting with `prefix`,
    /// in order (before any random fault).
    pub fn script(&self, method: &str, prefix: &str, answers: impl IntoIterator<Item = Scripted>) {
        let mut s = self
            .server
            .scripted
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for a in answers {
            s.push((method.to_string(), prefix.to_string(), a));
        }
    }

    /// Changes the behaviour.
    pub fn set_behaviour(&self, f: impl FnOnce(&mut Behaviour)) {
        f(&mut self.server.lock().behaviour);
    }

    /// Waits until `pred` holds for job `id`, polling every 20 ms, up to `timeout`; returns
    /// the job as it was then, or `None` on timeout.
    pub async fn wait_for_job(
        &self,
        id: i64,
        timeout: Duration,
        pred: impl Fn(&FakeJob) -> bool,
    ) -> Option<FakeJob> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(j) = self.job(id)
                && pred(&j)
            {
                return Some(j);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until every job in `ids` has ended; false on timeout.
    pub async fn wait_finished(&self, ids: &[i64], timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let done = {
                let d = self.server.lock();
                ids.iter()
                    .all(|id| d.jobs.get(id).is_some_and(|j| j.state.is_finished()))
            };
            if done {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
