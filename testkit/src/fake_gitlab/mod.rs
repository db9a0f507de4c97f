//! A fake GitLab: the runner API as GitLab's Rails code and Workhorse answer it, served on
//! 127.0.0.1, for testing a runner end to end.
//!
//! Every behaviour is written from GitLab's sources (each module cites the files); where
//! the sources leave something open, the module says what it assumes. By default the fake is
//! a GitLab as installed:
//!
//! - **acceptance**: two-phase acceptance is off (Rails' feature flag
//!   `allow_runner_job_acknowledgement`, default disabled): a job is `running` the moment the
//!   201 is sent, `PUT state=running` is a touch and `PUT state=pending` answers 400.
//!   [`FakeGitLabBuilder::two_phase`] turns it on: jobs handed to a runner advertising
//!   `two_phase_job_commit` stay `pending` until `PUT state=running`, `pending` is a
//!   keep-alive, and a final state before the accept answers 400;
//! - **payload**: every `job_info` field, typed as Rails renders them (string
//!   `instance_id`/`instance_uuid`), predefined variables, and `dependencies[].token` set to
//!   the running job's token ([`builder`]);
//! - **job requests**: Workhorse's long polling (a 204 of its own when the queue changed or
//!   nothing did; `Gitlab-Ci-Builds-Polling: yes` on every answer while it is on), Rails'
//!   `X-GitLab-Last-Update` on its 204s and not on a 201, 403 for unknown runner tokens, 422
//!   for an orphaned runner;
//! - **updates**: `token` required in the `PUT` body, 403 (with `Job-Status` where Rails sets
//!   it) for unknown jobs, wrong tokens and jobs no longer running; no 412 on a checksum
//!   mismatch (it is recorded, [`FinalUpdate::trace_matched`]); with
//!   [`FakeGitLabBuilder::live_trace`], 202 on final updates with `backoff.rb`'s schedule for
//!   as long as asked, at most 5 minutes;
//! - **trace**: appends at exactly the size held, else 416 with `Range: 0-<size>`; only the
//!   start of `Content-Range` counts;
//! - **artifacts**: uploads checked for type/format pairs, dotenv reports parsed and passed on
//!   to dependent jobs as variables, the same upload again accepted only with the same
//!   content; downloads authorised by the *running* job's token (401 otherwise), 404 without
//!   an archive, redirected to "object storage" only with `direct_download=true`;
//! - **faults** ([`FaultConfig`]): a seeded share of requests answered 500, 502 or 429 with
//!   `Retry-After`, delayed, or dropped before or after being processed; and planned answers
//!   ([`FakeGitLab::script`]) for exact protocol tests.
//!
//! Every request is recorded ([`FakeGitLab::requests`]) with its headers, body and answer.

mod artifacts;
mod backoff;
mod builder;
mod faults;
mod jobs;
mod registration;
mod runners;
mod server;
mod state;
mod tls;

pub use builder::{GITLAB_FAILURE_REASONS, JobBuilder, report_format};
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
    registration_tokens: Vec<String>,
    behaviour: Behaviour,
    faults: Option<FaultConfig>,
    https: bool,
    client_auth: bool,
}

impl FakeGitLabBuilder {
    /// Serves HTTPS with a certificate signed by an authority of this server's own
    /// ([`FakeGitLab::ca_pem`]).
    pub fn https(mut self, on: bool) -> Self {
        self.https = on;
        self
    }

    /// Serves HTTPS (as [`FakeGitLabBuilder::https`]) and accepts only clients presenting the
    /// certificate [`FakeGitLab::client_identity`] gives.
    pub fn https_with_client_auth(mut self) -> Self {
        self.https = true;
        self.client_auth = true;
        self
    }

    /// Accepts this runner token (more than one may be added).
    pub fn runner_token(mut self, token: impl Into<String>) -> Self {
        self.runner_tokens.push(token.into());
        self
    }

    /// Workhorse's long-poll duration (default 2 s; zero turns long polling off).
    pub fn poll_duration(mut self, d: Duration) -> Self {
        self.behaviour.poll_duration = d;
        self
    }

    /// The `X-GitLab-Trace-Update-Interval` of trace PATCHes, in seconds (default 60, Rails'
    /// `UPDATE_FREQUENCY_DEFAULT`).
    pub fn trace_update_interval(mut self, secs: u64) -> Self {
        self.behaviour.trace_update_interval = secs;
        self
    }

    /// Two-phase acceptance on (Rails' `allow_runner_job_acknowledgement`).
    pub fn two_phase(mut self, on: bool) -> Self {
        self.behaviour.two_phase = on;
        self
    }

    /// Under two-phase acceptance, queue a handed-out job again when its accept does not
    /// come within `d` (an assumption, see [`Behaviour::ack_timeout`]).
    pub fn ack_timeout(mut self, d: Duration) -> Self {
        self.behaviour.ack_timeout = Some(d);
        self
    }

    /// Live trace on: final updates are answered 202 for `d` after the first one (at most
    /// 5 minutes), with `backoff.rb`'s intervals.
    pub fn live_trace(mut self, d: Duration) -> Self {
        self.behaviour.live_trace = Some(d);
        self
    }

    /// Artifacts kept in object storage (downloads with `direct_download=true` redirect to
    /// another origin).
    pub fn object_storage(mut self, on: bool) -> Self {
        self.behaviour.object_storage = on;
        self
    }

    /// `dependencies[].token` is the running job's (default) or the dependency's own.
    pub fn dependency_token_is_running_job(mut self, on: bool) -> Self {
        self.behaviour.dependency_token_is_running_job = on;
        self
    }

    /// The runner is orphaned: verify and job requests answer 422.
    pub fn orphaned(mut self, on: bool) -> Self {
        self.behaviour.orphaned = on;
        self
    }

    /// Accepts this legacy registration token at `POST /api/v4/runners`.
    pub fn registration_token(mut self, token: impl Into<String>) -> Self {
        self.registration_tokens.push(token.into());
        self
    }

    /// Registration tokens turned off: `POST /api/v4/runners` answers 410.
    pub fn registration_disallowed(mut self, on: bool) -> Self {
        self.behaviour.registration_disallowed = on;
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
        let tls = if self.https {
            Some(tls::Tls::generate(self.client_auth)?)
        } else {
            None
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{addr}");
        let mut data = Data {
            behaviour: self.behaviour,
            url: url.clone(),
            other_origin: format!("{scheme}://localhost:{}", addr.port()),
            ..Data::default()
        };
        for t in &self.runner_tokens {
            data.add_runner(t);
        }
        data.registration_tokens = self.registration_tokens.iter().cloned().collect();
        let server = Arc::new(Server {
            data: Mutex::new(data),
            faults: Mutex::new(self.faults.map(Faults::new)),
            queue_changed: Notify::new(),
            scripted: Mutex::new(Vec::new()),
            job_requests: server::InFlight::default(),
        });
        let stop = CancellationToken::new();
        let ca_pem = tls.as_ref().map(|t| t.ca_pem.clone());
        let client_identity = tls.as_ref().and_then(|t| t.client.clone());
        tokio::spawn(server::serve(
            listener,
            server.clone(),
            stop.clone(),
            tls.map(|t| t.acceptor),
        ));
        Ok(FakeGitLab {
            url,
            server,
            stop,
            ca_pem,
            client_identity,
        })
    }
}

/// A running fake GitLab. Stops when dropped.
pub struct FakeGitLab {
    url: String,
    server: Arc<Server>,
    stop: CancellationToken,
    ca_pem: Option<String>,
    client_identity: Option<(String, String)>,
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

    /// The certificate of the authority that signed this server's, PEM, when it serves HTTPS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// The client certificate and key (PEM) this server accepts, when it wants one.
    pub fn client_identity(&self) -> Option<(&str, &str)> {
        self.client_identity
            .as_ref()
            .map(|(c, k)| (c.as_str(), k.as_str()))
    }

    /// The base URL (`http://127.0.0.1:<port>`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The same server under another origin (`http://localhost:<port>`): where "object
    /// storage" lives and where uploads may be redirected.
    pub fn other_origin(&self) -> String {
        self.server.lock().other_origin.clone()
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

    /// The most job requests (`POST /api/v4/jobs/request`) that were being answered at
    /// once, long polls included: what a runner's `request_concurrency` allows.
    pub fn most_job_requests_at_once(&self) -> usize {
        self.server.job_requests.most()
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

    /// Whether this runner token is one GitLab knows (not deleted).
    pub fn knows_runner(&self, token: &str) -> bool {
        self.server.lock().runners.contains_key(token)
    }

    /// What the registration of the runner with this token said (`description`,
    /// `tag_list`, ...), if `POST /api/v4/runners` created it.
    pub fn registration(&self, token: &str) -> Option<serde_json::Value> {
        self.server.lock().registered.get(token).cloned()
    }

    /// The system ids of the managers of the runner with this token that verified and were
    /// not deleted.
    pub fn managers(&self, token: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .server
            .lock()
            .managers
            .iter()
            .filter(|(t, _)| t == token)
            .map(|(_, s)| s.clone())
            .collect();
        v.sort();
        v
    }

    /// The system ids seen on verify and job requests, sorted.
    pub fn system_ids(&self) -> Vec<String> {
        let mut v: Vec<String> = self.server.lock().system_ids.iter().cloned().collect();
        v.sort();
        v
    }

    /// Cancels a job: a running one becomes `canceling` (the runner runs `after_script`,
    /// then reports); one not yet running becomes `canceled` (`commit_status.rb` `cancel`).
    pub fn cancel(&self, id: i64) {
        let mut d = self.server.lock();
        let Some(j) = d.jobs.get_mut(&id) else {
            return;
        };
        if j.state.is_active() {
            j.set_state(FakeJobState::Canceling);
        } else if !j.state.is_finished() {
            j.set_state(FakeJobState::Canceled);
            let rt = j.runner_token.clone();
            if let Some(q) = d.queues.get_mut(&rt) {
                q.retain(|x| *x != id);
            }
        }
    }

    /// Cancels a job at once (`force_cancel`): it becomes `canceled` and its token stops
    /// working.
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
