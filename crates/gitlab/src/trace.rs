//! The job log on its way to GitLab: [`GitLabTraceSink`] buffers the (already masked) output,
//! and a background task PATCHes it incrementally; [`JobTrace`] owns that task, learns the
//! job's remote state from every answer, and sends the final update.

use super::client::Client;
use super::final_update::{self, FinalReport};
use super::job_status::RemoteJobState;
use super::trace_buffer::TraceBuffer;
use super::wire::{TraceOutput, UpdateJobRequest};
use async_trait::async_trait;
use flotilla_fleet::Secret;
use flotilla_job::{JobCancel, JobPayload, Outcome, TraceError, TraceSink, TraceSummary};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// GitLab Runner's largest trace PATCH: 1 MiB.
pub const TRACE_PATCH_LIMIT: usize = 1024 * 1024;

/// Tunables of the trace upload and the final update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceOptions {
    /// Interval between PATCHes until GitLab sets one (`X-GitLab-Trace-Update-Interval`).
    pub update_interval: Duration,
    /// After this long without a successful PATCH, a keep-alive `PUT state=running` is sent
    /// (also how cancellation of a silent job is noticed). GitLab Runner: 30 s.
    pub force_send_interval: Duration,
    /// Largest PATCH body.
    pub max_patch: usize,
    /// Failed final `PUT`s (and failed PATCHes of the rest of the log before it) before
    /// giving up (GitLab Runner's `job_status_final_update_retry_limit`: 10). A 202 is not a
    /// failure and does not count.
    pub final_update_attempts: u32,
    /// Longest wait between failed final update attempts (GitLab Runner's
    /// `DefaultfinalUpdateBackoffMax`: 60 minutes).
    pub final_update_backoff_max: Duration,
    /// The runner's `debug_trace_disabled`: GitLab is never told the log is a debug trace.
    pub debug_trace_disabled: bool,
}

impl Default for TraceOptions {
    fn default() -> Self {
        TraceOptions {
            update_interval: Duration::from_secs(3),
            force_send_interval: Duration::from_secs(30),
            max_patch: TRACE_PATCH_LIMIT,
            final_update_attempts: 10,
            final_update_backoff_max: Duration::from_secs(60 * 60),
            debug_trace_disabled: false,
        }
    }
}

/// How sending the unsent part of the log went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SendOutcome {
    /// GitLab holds every byte.
    AllSent,
    /// GitLab no longer takes updates for the job (403, 404, canceled or failed).
    Gone,
    /// GitLab could not be reached or refused for now; try again later.
    Failed(String),
}

/// State shared by the sink, the uploader and the final update.
pub(crate) struct Shared {
    pub client: Arc<Client>,
    pub job_id: i64,
    pub token: Secret<String>,
    pub debug_trace: bool,
    pub failure_reasons: Vec<String>,
    pub options: TraceOptions,
    pub cancel: JobCancel,
    pub buf: Mutex<TraceBuffer>,
    /// Held while sending, so two senders never PATCH the same range.
    pub send_lock: tokio::sync::Mutex<()>,
    pub interval: Mutex<Duration>,
    pub remote: Mutex<RemoteJobState>,
    /// GitLab no longer takes updates for this job (403, 404, canceled).
    pub gone: AtomicBool,
    pub gone_status: Mutex<u16>,
    pub last_contact: Mutex<Instant>,
    pub wake: Notify,
}

impl Shared {
    pub(crate) fn lock_buf(&self) -> std::sync::MutexGuard<'_, TraceBuffer> {
        self.buf.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn interval(&self) -> Duration {
        *self.interval.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn set_interval(&self, d: Option<Duration>) {
        if let Some(d) = d {
            *self.interval.lock().unwrap_or_else(|e| e.into_inner()) = d;
        }
    }

    fn touch(&self) {
        *self.last_contact.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }

    pub(crate) fn gone_status(&self) -> u16 {
        *self.gone_status.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn mark_gone(&self, status: u16) {
        if !self.gone.swap(true, Ordering::SeqCst) {
            *self.gone_status.lock().unwrap_or_else(|e| e.into_inner()) = status;
        }
    }

    /// Acts on what GitLab said about the job: `canceling` stops the script gracefully,
    /// `canceled`/`failed`/403 aborts everything and stops all further updates.
    pub(crate) fn apply_remote(&self, state: RemoteJobState, status: u16) {
        let previous = {
            let mut r = self.remote.lock().unwrap_or_else(|e| e.into_inner());
            let prev = *r;
            *r = prev.max(state);
            prev
        };
        match state {
            RemoteJobState::Canceling if previous == RemoteJobState::Running => {
                tracing::info!(
                    job = self.job_id,
                    "GitLab is canceling the job: stopping its script gracefully"
                );
                self.cancel.cancel();
            }
            RemoteJobState::Gone => {
                if previous != RemoteJobState::Gone {
                    tracing::info!(
                        job = self.job_id,
                        status,
                        "GitLab canceled the job or revoked its token: aborting it"
                    );
                }
                self.mark_gone(status);
                self.cancel.abort();
            }
            _ => {}
        }
    }

    /// PATCHes everything not yet acknowledged, in chunks of at most `max_patch` bytes.
    pub(crate) async fn send_pending(&self) -> SendOutcome {
        let _guard = self.send_lock.lock().await;
        // A few rounds of 416 corrections are normal after lost answers; more means the
        // server and we disagree, which the final update's checksum settles.
        let mut corrections = 0;
        loop {
            if self.is_gone() {
                return SendOutcome::Gone;
            }
            let Some((offset, chunk)) = self.lock_buf().next_chunk(self.options.max_patch) else {
                return SendOutcome::AllSent;
            };
            let len = chunk.len() as u64;
            let r = self
                .client
                .patch_trace(self.job_id, &self.token, offset, chunk, self.debug_trace)
                .await;
            let resp = match r {
                Ok(resp) => resp,
                Err(e) => {
                    tracing::warn!(job = self.job_id, error = %e, "sending the job log failed; will retry");
                    return SendOutcome::Failed(e.to_string());
                }
            };
            self.set_interval(resp.update_interval);
            self.apply_remote(resp.remote, resp.status);
            match resp.status {
                202 | 200 => {
                    self.touch();
                    self.lock_buf().accepted(offset, len);
                }
                416 => {
                    self.touch();
                    corrections += 1;
                    match resp.range_end {
                        Some(size) => {
                            tracing::debug!(
                                job = self.job_id,
                                offset,
                                size,
                                "GitLab holds another trace size; continuing from it"
                            );
                            self.lock_buf().server_has(size);
                        }
                        None => {
                            return SendOutcome::Failed("416 without the size GitLab holds".into());
                        }
                    }
                    if corrections > 3 {
                        return SendOutcome::Failed(
                            "GitLab kept answering 416 to the log's offsets".into(),
                        );
                    }
                }
                403 => return SendOutcome::Gone,
                404 => {
                    tracing::warn!(
                        job = self.job_id,
                        "GitLab does not know the job any more; no more log is sent"
                    );
                    self.mark_gone(404);
                    return SendOutcome::Gone;
                }
                _ if self.is_gone() => return SendOutcome::Gone,
                status => {
                    tracing::warn!(
                        job = self.job_id,
                        status,
                        "GitLab refused a trace update; will retry"
                    );
                    return SendOutcome::Failed(format!("GitLab answered {status}"));
                }
            }
        }
    }

    /// `PUT state=running` with the trace's size and checksum: a keep-alive that also
    /// carries cancellation back.
    async fn keep_alive(&self) {
        let summary = self.lock_buf().summary();
        let req = UpdateJobRequest {
            info: self.client.info(),
            token: self.token.expose(),
            state: "running",
            failure_reason: None,
            checksum: Some(summary.checksum()),
            output: Some(TraceOutput {
                checksum: summary.checksum(),
                bytesize: summary.bytesize,
            }),
            exit_code: None,
        };
        match self.client.update_job(self.job_id, &req).await {
            Ok(resp) => {
                self.touch();
                self.set_interval(resp.update_interval);
                self.apply_remote(resp.remote, resp.status);
                if resp.status == 404 {
                    self.mark_gone(404);
                }
            }
            Err(e) => tracing::warn!(job = self.job_id, error = %e, "job keep-alive failed"),
        }
    }
}

/// The uploader of one job's log. Create with [`JobTrace::start`]; end with
/// [`JobTrace::finish`], which sends the final update.
pub struct JobTrace {
    shared: Arc<Shared>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for JobTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobTrace")
            .field("job_id", &self.shared.job_id)
            .finish_non_exhaustive()
    }
}

/// A [`TraceSink`] that sends the job log to GitLab through its [`JobTrace`].
pub struct GitLabTraceSink {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for GitLabTraceSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitLabTraceSink")
            .field("job_id", &self.shared.job_id)
            .finish_non_exhaustive()
    }
}

impl JobTrace {
    /// Starts uploading the log of job `job_id` (authenticated by `token`). Cancellation
    /// learned from GitLab fires `cancel`. `failure_reasons` is the payload's
    /// `features.failure_reasons` (used to map the final failure reason).
    pub fn start(
        client: Arc<Client>,
        job_id: i64,
        token: Secret<String>,
        failure_reasons: Vec<String>,
        debug_trace: bool,
        cancel: JobCancel,
        options: TraceOptions,
    ) -> JobTrace {
        let shared = Arc::new(Shared {
            client,
            job_id,
            token,
            debug_trace,
            failure_reasons,
            options,
            cancel,
            buf: Mutex::new(TraceBuffer::default()),
            send_lock: tokio::sync::Mutex::new(()),
            interval: Mutex::new(options.update_interval),
            remote: Mutex::new(RemoteJobState::Running),
            gone: AtomicBool::new(false),
            gone_status: Mutex::new(0),
            last_contact: Mutex::new(Instant::now()),
            wake: Notify::new(),
        });
        let stop = CancellationToken::new();
        let task = tokio::spawn(upload_loop(shared.clone(), stop.clone()));
        JobTrace {
            shared,
            stop,
            task: Some(task),
        }
    }

    /// A sink writing into this log (the job runner's output goes here).
    pub fn sink(&self) -> GitLabTraceSink {
        GitLabTraceSink {
            shared: self.shared.clone(),
        }
    }

    /// [`JobTrace::start`] for a decoded payload: `debug_trace=true` whenever
    /// `CI_DEBUG_TRACE` is on as the script engine reads it ([`JobPayload::debug_trace`]).
    pub fn for_job(
        client: Arc<Client>,
        job: &JobPayload,
        cancel: JobCancel,
        options: TraceOptions,
    ) -> JobTrace {
        let debug = job.debug_trace() && !options.debug_trace_disabled;
        JobTrace::start(
            client,
            job.id,
            job.token.clone(),
            job.features.failure_reasons.clone(),
            debug,
            cancel,
            options,
        )
    }

    /// The job id.
    pub fn job_id(&self) -> i64 {
        self.shared.job_id
    }

    /// What GitLab last said about the job.
    pub fn remote_state(&self) -> RemoteJobState {
        *self.shared.remote.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends a runner message to the log directly (for jobs that never reach the job
    /// runner, e.g. a payload that does not decode). The text must hold no secret.
    pub fn write_message(&self, text: &str) {
        self.shared.lock_buf().append(text.as_bytes());
        self.shared.wake.notify_one();
    }

    /// The size and checksum of everything written so far.
    pub fn summary(&self) -> TraceSummary {
        self.shared.lock_buf().summary()
    }

    /// Bytes GitLab acknowledged so far.
    pub fn sent(&self) -> u64 {
        self.shared.lock_buf().sent()
    }

    /// Stops the periodic upload, sends the rest of the log and the final update with
    /// `outcome` and the size and checksum of everything written to this log, repeating while
    /// GitLab answers 202 and resending the whole log after a 412 (see
    /// [`final_update`](super::final_update)).
    pub async fn finish(mut self, outcome: &Outcome) -> FinalReport {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let summary = self.summary();
        final_update::run(&self.shared, outcome, &summary).await
    }
}

impl Drop for JobTrace {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn upload_loop(shared: Arc<Shared>, stop: CancellationToken) {
    loop {
        // Wake at the update interval, or earlier when a keep-alive falls due.
        let silent = shared
            .last_contact
            .lock()
            .map(|t| t.elapsed())
            .unwrap_or_default();
        let keep_alive_due = shared.options.force_send_interval.saturating_sub(silent);
        let interval = shared
            .interval()
            .min(keep_alive_due.max(Duration::from_millis(10)));
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
            () = shared.wake.notified() => {}
        }
        if shared.is_gone() {
            return;
        }
        shared.send_pending().await;
        let silent = shared
            .last_contact
            .lock()
            .map(|t| t.elapsed())
            .unwrap_or_default();
        if silent >= shared.options.force_send_interval && !shared.is_gone() {
            shared.keep_alive().await;
        }
    }
}

#[async_trait]
impl TraceSink for GitLabTraceSink {
    async fn write(&mut self, bytes: &[u8]) -> Result<(), TraceError> {
        if bytes.is_empty() {
            return Ok(());
        }
        let first = {
            let mut b = self.shared.lock_buf();
            let first = b.len() == 0;
            b.append(bytes);
            first
        };
        // The first bytes go out at once (time to first log line); the rest every interval.
        if first {
            self.shared.wake.notify_one();
        }
        Ok(())
    }

    async fn finish(&mut self) -> Result<(), TraceError> {
        if self.shared.send_pending().await != SendOutcome::AllSent && !self.shared.is_gone() {
            // Not fatal: the final update sends the rest again.
            return Err(TraceError::Rejected(format!(
                "GitLab has {} of {} bytes of job {}'s log so far",
                self.shared.lock_buf().sent(),
                self.shared.lock_buf().len(),
                self.shared.job_id
            )));
        }
        Ok(())
    }
}
