//! What the fake GitLab knows: runners, jobs, queues, and every request it received.

use super::builder::JobBuilder;
use super::faults::FaultKind;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::Duration;
use tokio::time::Instant;

/// A job's state on the fake (Rails' `Ci::Build` statuses a runner sees).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FakeJobState {
    /// Queued, not handed out.
    Pending,
    /// Handed out under two-phase acceptance; still `pending` in Rails until the runner's
    /// `PUT state=running` (`Ci::UpdateBuildStateService#handle_runner_ack_workflow`).
    WaitingForAck,
    /// Running.
    Running,
    /// Cancel requested gracefully (`Job-Status: canceling`).
    Canceling,
    /// Ended successfully.
    Success,
    /// Ended failed.
    Failed,
    /// Ended canceled.
    Canceled,
}

impl FakeJobState {
    /// The `Job-Status` header value (`job.status`).
    pub fn as_str(self) -> &'static str {
        match self {
            FakeJobState::Pending | FakeJobState::WaitingForAck => "pending",
            FakeJobState::Running => "running",
            FakeJobState::Canceling => "canceling",
            FakeJobState::Success => "success",
            FakeJobState::Failed => "failed",
            FakeJobState::Canceled => "canceled",
        }
    }

    /// Whether the job has ended.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            FakeJobState::Success | FakeJobState::Failed | FakeJobState::Canceled
        )
    }

    /// Whether a runner may work on it (`processing_on_runner?`: running or canceling,
    /// `lib/api/ci/helpers/runner.rb`).
    pub fn is_active(self) -> bool {
        matches!(self, FakeJobState::Running | FakeJobState::Canceling)
    }
}

/// An artifact a job uploaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadedArtifact {
    /// The multipart part's file name.
    pub filename: String,
    /// `artifact_type` from the query.
    pub artifact_type: String,
    /// `artifact_format` from the query.
    pub artifact_format: String,
    /// `expire_in` from the query (empty when absent).
    pub expire_in: String,
    /// The file.
    pub data: Vec<u8>,
    /// For a `dotenv` report, the variables it defines.
    pub dotenv: Vec<(String, String)>,
}

/// The final update GitLab applied.
#[derive(Debug, Clone, PartialEq)]
pub struct FinalUpdate {
    /// `success` or `failed`.
    pub state: String,
    /// `failure_reason`, when sent.
    pub failure_reason: Option<String>,
    /// `exit_code`, when sent.
    pub exit_code: Option<i64>,
    /// `output.checksum`, when sent.
    pub checksum: Option<String>,
    /// `output.bytesize`, when sent.
    pub bytesize: Option<u64>,
    /// Whether checksum and size matched the trace GitLab holds. Rails only counts a
    /// mismatch in a metric (`Ci::UpdateBuildStateService#validate_build_trace!`); it does not
    /// refuse the update.
    pub trace_matched: bool,
}

/// One job on the fake.
#[derive(Debug, Clone)]
pub struct FakeJob {
    /// The job id.
    pub id: i64,
    /// Its job token.
    pub token: String,
    /// The runner token whose queue it is in.
    pub runner_token: String,
    /// The state now.
    pub state: FakeJobState,
    /// Every state it went through, in order (starting with `Pending`).
    pub history: Vec<FakeJobState>,
    /// The trace as received.
    pub trace: Vec<u8>,
    /// Trace PATCHes applied.
    pub patches: u32,
    /// Whether a trace PATCH from offset 0 said `debug_trace=true` (Rails then restricts
    /// who may read the log, `Ci::AppendBuildTraceService#first_debug_chunk?`).
    pub debug_trace: bool,
    /// Times it was handed out.
    pub handouts: u32,
    /// When it was handed out, each time.
    pub handed_out_at: Vec<Instant>,
    /// Times it became `running`.
    pub accepts: u32,
    /// The applied final update.
    pub final_update: Option<FinalUpdate>,
    /// Final updates applied (more than one would be a bug).
    pub final_updates: u32,
    /// Artifacts uploaded.
    pub artifacts: Vec<UploadedArtifact>,
    /// The payload handed out last.
    pub payload: Option<Value>,
    pub(crate) builder: JobBuilder,
    pub(crate) ack_deadline: Option<Instant>,
    /// When the first final update arrived (Rails' `Ci::BuildPendingState#created_at`).
    pub(crate) pending_state_at: Option<Instant>,
}

impl FakeJob {
    /// The trace as (lossy) UTF-8.
    pub fn trace_text(&self) -> String {
        String::from_utf8_lossy(&self.trace).into_owned()
    }

    pub(crate) fn set_state(&mut self, s: FakeJobState) {
        if self.state != s {
            self.state = s;
            self.history.push(s);
        }
    }

    /// How many times the job entered a finished state.
    pub fn times_finished(&self) -> usize {
        self.history.iter().filter(|s| s.is_finished()).count()
    }

    /// `crc32:%08x` of the trace GitLab holds.
    pub fn trace_checksum(&self) -> String {
        format!("crc32:{:08x}", crc32fast::hash(&self.trace))
    }
}

/// A request body as recorded.
#[derive(Debug, Clone, PartialEq)]
pub enum RecordedBody {
    /// No body.
    Empty,
    /// A JSON body.
    Json(Value),
    /// Any other body (trace bytes).
    Bytes(Vec<u8>),
    /// A multipart upload, by size.
    Multipart {
        /// Bytes received.
        size: usize,
    },
}

/// One request the fake received, with what it answered.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// Arrival order.
    pub seq: u64,
    /// The HTTP method.
    pub method: String,
    /// The `Host` header (`127.0.0.1:port`, or `localhost:port` for the other origin).
    pub host: String,
    /// The path.
    pub path: String,
    /// The query string, if any.
    pub query: Option<String>,
    /// Every header (lower-case names), tokens included: tests check them.
    pub headers: BTreeMap<String, String>,
    /// The body.
    pub body: RecordedBody,
    /// The status answered (0 when the connection was dropped before answering).
    pub status: u16,
    /// Headers of the answer.
    pub response_headers: BTreeMap<String, String>,
    /// The fault injected, if any.
    pub fault: Option<FaultKind>,
    /// When it arrived.
    pub at: Instant,
}

impl RecordedRequest {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// A header of the answer.
    pub fn response_header(&self, name: &str) -> Option<&str> {
        self.response_headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// The JSON body, if it was JSON.
    pub fn json(&self) -> Option<&Value> {
        match &self.body {
            RecordedBody::Json(v) => Some(v),
            _ => None,
        }
    }
}

/// Settings of the fake's behaviour. The defaults are a GitLab as installed: two-phase
/// acceptance off, live trace off, no object storage.
#[derive(Debug, Clone)]
pub struct Behaviour {
    /// Workhorse's `apiCiLongPollingDuration`: how long a job request with a current
    /// `last_update` waits for a change (zero turns long polling off).
    pub poll_duration: Duration,
    /// `X-GitLab-Trace-Update-Interval` on trace PATCHes, seconds (`Gitlab::Ci::Trace`:
    /// 60, or 3 while someone watches the log).
    pub trace_update_interval: u64,
    /// The feature flag `allow_runner_job_acknowledgement`: jobs handed to a runner that
    /// advertises `two_phase_job_commit` stay `pending` until its `PUT state=running`.
    pub two_phase: bool,
    /// Under `two_phase`, queue a handed-out job again when no accept came within this long
    /// (an assumption: Rails' two-phase design lists the timeout as a future enhancement).
    pub ack_timeout: Option<Duration>,
    /// The setting `ci_job_live_trace_enabled`: a final update is answered 202 (with the
    /// backoff of `lib/gitlab/ci/runner/backoff.rb`) for this long after the first one while
    /// the trace's live chunks are persisted, at most `ACCEPT_TIMEOUT` (5 minutes), after
    /// which Rails applies it anyway.
    pub live_trace: Option<Duration>,
    /// Artifacts in object storage: a download with `direct_download=true` is redirected
    /// (302) to a storage URL on another origin; without it Workhorse serves the file.
    pub object_storage: bool,
    /// The feature flag `ci_expose_running_job_token_for_artifacts`: `dependencies[].token` is
    /// the running job's token (on), or the dependency's own (off).
    pub dependency_token_is_running_job: bool,
    /// The runner's owner (project or group) is gone: verify and job requests answer
    /// `422 Runner is orphaned` (`lib/api/ci/runner.rb`).
    pub orphaned: bool,
    /// The setting that turns registration tokens off: `POST /api/v4/runners` answers 410.
    pub registration_disallowed: bool,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            poll_duration: Duration::from_secs(2),
            trace_update_interval: 60,
            two_phase: false,
            ack_timeout: None,
            live_trace: None,
            object_storage: false,
            dependency_token_is_running_job: true,
            orphaned: false,
            registration_disallowed: false,
        }
    }
}

/// All the fake's data, behind one lock.
#[derive(Debug, Default)]
pub(crate) struct Data {
    pub behaviour: Behaviour,
    pub runners: HashMap<String, i64>,
    pub queues: HashMap<String, VecDeque<i64>>,
    pub queue_values: HashMap<String, u64>,
    pub jobs: BTreeMap<i64, FakeJob>,
    pub next_id: i64,
    pub requests: Vec<RecordedRequest>,
    pub next_seq: u64,
    pub system_ids: HashSet<String>,
    /// Legacy registration tokens `POST /api/v4/runners` accepts.
    pub registration_tokens: HashSet<String>,
    /// Runners created by `POST /api/v4/runners`, by token: what the registration said.
    pub registered: HashMap<String, serde_json::Value>,
    /// (runner token, system id) of each manager that verified.
    pub managers: HashSet<(String, String)>,
    pub token_counter: u64,
    /// The API's own URL.
    pub url: String,
    /// Another origin on the same server (`localhost` instead of `127.0.0.1`): object
    /// storage, and where uploads may be redirected.
    pub other_origin: String,
}

impl Data {
    /// The runner's queue value (Rails' `runner_queue_value`, in Redis).
    pub(super) fn queue_value(&self, runner_token: &str) -> String {
        format!(
            "q{}",
            self.queue_values.get(runner_token).copied().unwrap_or(0)
        )
    }

    /// `tick_runner_queue`: any change to what the runner may pick.
    pub(super) fn tick(&mut self, runner_token: &str) {
        *self
            .queue_values
            .entry(runner_token.to_string())
            .or_insert(0) += 1;
    }

    pub(super) fn add_runner(&mut self, token: &str) -> i64 {
        let n = self.runners.len() as i64 + 1;
        *self.runners.entry(token.to_string()).or_insert(n)
    }

    pub(super) fn enqueue(&mut self, runner_token: &str, builder: JobBuilder) -> i64 {
        self.next_id += 1;
        let id = self.next_id;
        self.token_counter += 1;
        // Rails' job tokens: `glcbt-` + a partition prefix + random (`Ci::Build::TOKEN_PREFIX`).
        let token = format!(
            "glcbt-64_fakejob{id:05}x{:08x}",
            (self.token_counter * 2654435761) as u32
        );
        self.jobs.insert(
            id,
            FakeJob {
                id,
                token,
                runner_token: runner_token.to_string(),
                state: FakeJobState::Pending,
                history: vec![FakeJobState::Pending],
                trace: Vec::new(),
                patches: 0,
                debug_trace: false,
                handouts: 0,
                handed_out_at: Vec::new(),
                accepts: 0,
                final_update: None,
                final_updates: 0,
                artifacts: Vec::new(),
                payload: None,
                builder,
                ack_deadline: None,
                pending_state_at: None,
            },
        );
        self.queues
            .entry(runner_token.to_string())
            .or_default()
            .push_back(id);
        self.tick(runner_token);
        id
    }

    /// Queues again every handed-out job whose accept did not come in time.
    pub(super) fn requeue_expired(&mut self, now: Instant) {
        let expired: Vec<i64> = self
            .jobs
            .values()
            .filter(|j| {
                j.state == FakeJobState::WaitingForAck && j.ack_deadline.is_some_and(|d| d <= now)
            })
            .map(|j| j.id)
            .collect();
        for id in expired {
            let Some(job) = self.jobs.get_mut(&id) else {
                continue;
            };
            job.set_state(FakeJobState::Pending);
            job.ack_deadline = None;
            let rt = job.runner_token.clone();
            self.queues.entry(rt.clone()).or_default().push_front(id);
            self.tick(&rt);
        }
    }

    /// The job whose token this is, if it is one GitLab accepts as a job token now: job
    /// tokens authenticate only while their job runs (`Ci::AuthJobFinder`).
    pub(super) fn active_job_by_token(&self, token: &str) -> Option<&FakeJob> {
        self.jobs
            .values()
            .find(|j| j.token == token && j.state.is_active())
    }

    /// Hands out the next job of `runner_token`'s queue (`Ci::RegisterJobService`).
    /// `two_phase`: the runner advertised `two_phase_job_commit`.
    pub(super) fn hand_out(
        &mut self,
        runner_token: &str,
        two_phase: bool,
        now: Instant,
    ) -> Option<Value> {
        let wait_for_ack = two_phase && self.behaviour.two_phase;
        let ack_timeout = self.behaviour.ack_timeout;
        let running_token_for_deps = self.behaviour.dependency_token_is_running_job;
        let id = self.queues.get_mut(runner_token)?.pop_front()?;
        let (deps, extra): (Vec<Value>, Vec<Value>) = {
            let job = self.jobs.get(&id)?;
            let mut deps = Vec::new();
            let mut extra = Vec::new();
            for d in job
                .builder
                .dependencies
                .iter()
                .filter_map(|d| self.jobs.get(d))
            {
                // `artifacts_file` only when the dependency has an archive
                // (`dependency.rb`: `if: job.available_artifacts?`).
                let file = d
                    .artifacts
                    .iter()
                    .find(|a| a.artifact_type == "archive")
                    .map(|a| json!({"filename": a.filename, "size": a.data.len()}));
                let token = if running_token_for_deps {
                    &job.token
                } else {
                    &d.token
                };
                let mut dep = json!({"id": d.id, "name": d.builder.name, "token": token});
                if let (Some(file), Some(o)) = (file, dep.as_object_mut()) {
                    o.insert("artifacts_file".into(), file);
                }
                deps.push(dep);
                // Rails passes dotenv reports on as variables (`Ci::Build#dependency_variables`).
                for a in d.artifacts.iter().filter(|a| a.artifact_type == "dotenv") {
                    for (k, v) in &a.dotenv {
                        extra.push(json!({"key": k, "value": v, "public": false, "masked": false}));
                    }
                }
            }
            (deps, extra)
        };
        let url = self.url.clone();
        let job = self.jobs.get_mut(&id)?;
        let payload = job.builder.payload(id, &job.token, &url, deps, extra);
        job.handouts += 1;
        job.handed_out_at.push(now);
        job.payload = Some(payload.clone());
        if wait_for_ack {
            job.set_state(FakeJobState::WaitingForAck);
            job.ack_deadline = ack_timeout.map(|t| now + t);
        } else {
            job.set_state(FakeJobState::Running);
            job.accepts += 1;
        }
        // Assumed (the sources read do not settle it): assigning a job ticks the runner's
        // queue, so a runner echoing the value it had reaches Rails again for the next one.
        // A 201 carries no `X-GitLab-Last-Update`, so a runner could not learn a new value
        // from it anyway.
        self.tick(runner_token);
        Some(payload)
    }
}
