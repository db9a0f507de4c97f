//! What the fake GitLab knows: runners, jobs, queues, and every request it received.

use super::builder::JobBuilder;
use super::faults::FaultKind;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::Duration;
use tokio::time::Instant;

/// A job's state on the fake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FakeJobState {
    /// Queued, not handed out.
    Pending,
    /// Handed out under two-phase commit; waiting for `PUT state=running`.
    WaitingForAck,
    /// Accepted and running.
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
    /// The `Job-Status` header value.
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

    /// Whether the job takes trace and artifacts (running, or canceling).
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
    /// The archive.
    pub data: Vec<u8>,
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
    /// Times it was handed out.
    pub handouts: u32,
    /// Times it was accepted (`PUT state=running` from waiting).
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
    pub(crate) reject_checksum: u32,
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

    /// The JSON body, if it was JSON.
    pub fn json(&self) -> Option<&Value> {
        match &self.body {
            RecordedBody::Json(v) => Some(v),
            _ => None,
        }
    }
}

/// Settings of the fake's behaviour.
#[derive(Debug, Clone)]
pub struct Behaviour {
    /// How long a job request with a current `last_update` waits for a job.
    pub poll_duration: Duration,
    /// `X-GitLab-Trace-Update-Interval`, seconds.
    pub trace_update_interval: u64,
    /// How long a handed-out job waits for its accept before it is queued again.
    pub ack_timeout: Duration,
    /// How many final updates of each job are answered 202 ("trace still persisting")
    /// before one is applied.
    pub persist_202s: u32,
    /// Redirect artifact downloads to a storage URL (like object storage).
    pub artifact_redirect: bool,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            poll_duration: Duration::from_secs(2),
            trace_update_interval: 3,
            ack_timeout: Duration::from_secs(60),
            persist_202s: 0,
            artifact_redirect: false,
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
    pub persisting: HashMap<i64, u32>,
    pub token_counter: u64,
    /// The storage origin artifact downloads redirect to (another origin than the API's).
    pub storage_origin: String,
}

impl Data {
    pub fn queue_value(&self, runner_token: &str) -> String {
        format!(
            "q{}",
            self.queue_values.get(runner_token).copied().unwrap_or(0)
        )
    }

    fn bump(&mut self, runner_token: &str) {
        *self
            .queue_values
            .entry(runner_token.to_string())
            .or_insert(0) += 1;
    }

    pub fn add_runner(&mut self, token: &str) -> i64 {
        let n = self.runners.len() as i64 + 1;
        *self.runners.entry(token.to_string()).or_insert(n)
    }

    pub fn enqueue(&mut self, runner_token: &str, builder: JobBuilder) -> i64 {
        self.next_id += 1;
        let id = self.next_id;
        self.token_counter += 1;
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
                handouts: 0,
                accepts: 0,
                final_update: None,
                final_updates: 0,
                artifacts: Vec::new(),
                payload: None,
                builder,
                ack_deadline: None,
                reject_checksum: 0,
            },
        );
        self.queues
            .entry(runner_token.to_string())
            .or_default()
            .push_back(id);
        self.bump(runner_token);
        id
    }

    /// Queues again every handed-out job whose accept did not come in time.
    pub fn requeue_expired(&mut self, now: Instant) {
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
            self.bump(&rt);
        }
    }

    /// Hands out the next job of `runner_token`'s queue.
    pub fn hand_out(&mut self, runner_token: &str, two_phase: bool, now: Instant) -> Option<Value> {
        let ack_timeout = self.behaviour.ack_timeout;
        let id = self.queues.get_mut(runner_token)?.pop_front()?;
        let deps: Vec<Value> = {
            let job = self.jobs.get(&id)?;
            job.builder
                .dependencies
                .iter()
                .filter_map(|d| self.jobs.get(d))
                .map(|d| {
                    let file = d
                        .artifacts
                        .iter()
                        .find(|a| a.artifact_type == "archive")
                        .map(|a| json!({"filename": a.filename, "size": a.data.len()}));
                    json!({"id": d.id, "name": d.builder.name, "token": d.token, "artifacts_file": file})
                })
                .collect()
        };
        let job = self.jobs.get_mut(&id)?;
        let payload = job.builder.payload(id, &job.token, deps);
        job.handouts += 1;
        job.payload = Some(payload.clone());
        if two_phase {
            job.set_state(FakeJobState::WaitingForAck);
            job.ack_deadline = Some(now + ack_timeout);
        } else {
            job.set_state(FakeJobState::Running);
            job.accepts += 1;
        }
        // Assigning a job changes the runner's queue (Rails ticks it), so a runner echoing
        // the value it got with this job reaches "Rails" again for the next one.
        self.bump(runner_token);
        Some(payload)
    }
}
