//! The runner API client.

use super::error::{ClientError, transport_message};
use super::features::Info;
use super::job_status::RemoteJobState;
use super::observe::{ApiObserver, Endpoint};
use super::retry::{RetryPolicy, retryable_status, server_hint};
use super::upload_name::artifact_file_name;
use super::wire::{JobRequest, UpdateJobRequest, VerifyRequest, VerifyResponse};
use bytes::Bytes;
use flotilla_fleet::Secret;
use flotilla_fleet::redact_url;
use flotilla_job::model::LenientPayload;
use flotilla_job::{ArtifactUpload, JobPayload, PayloadError};
use futures::StreamExt;
use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, RequestBuilder, Response, Url};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::io::AsyncWriteExt;

/// The header carrying the runner token.
pub const RUNNER_TOKEN_HEADER: &str = "RUNNER-TOKEN";
/// The header carrying a job token.
pub const JOB_TOKEN_HEADER: &str = "JOB-TOKEN";
/// The correlation id header.
pub const REQUEST_ID_HEADER: &str = "X-Request-Id";
/// The header with the runner queue's value, echoed as `last_update`.
pub const LAST_UPDATE_HEADER: &str = "X-GitLab-Last-Update";
/// The header Workhorse sets on every answer to a job request while long polling is
/// configured (it says nothing about whether that request waited).
pub const POLLING_HEADER: &str = "Gitlab-Ci-Builds-Polling";
/// The header with the trace update interval, in seconds.
pub const TRACE_UPDATE_INTERVAL_HEADER: &str = "X-GitLab-Trace-Update-Interval";
/// The header with the job's remote state.
pub const JOB_STATUS_HEADER: &str = "Job-Status";

/// Longest trace update interval a server may ask for (GitLab Runner caps it at 15 min).
const MAX_UPDATE_INTERVAL: Duration = Duration::from_secs(15 * 60);
/// Redirects followed for artifact transfers.
const MAX_REDIRECTS: usize = 5;

/// How to reach GitLab as one runner.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// GitLab's base URL (`https://gitlab.example.com`).
    pub url: String,
    /// The runner authentication token (`glrt-…`).
    pub token: Secret<String>,
    /// This manager's id (see [`super::system_id`]).
    pub system_id: String,
    /// What this runner is and can do.
    pub info: Info,
    /// Timeout of a job request; must exceed GitLab's long poll (50 s by default). GitLab
    /// Runner waits 10 min for the answer's headers.
    pub request_timeout: Duration,
    /// Timeout of the other JSON calls (PUT, PATCH, verify).
    pub call_timeout: Duration,
    /// Timeout of establishing a connection.
    pub connect_timeout: Duration,
    /// Retries of failed calls.
    pub retry: RetryPolicy,
    /// How GitLab's certificate is checked and how the runner proves who it is.
    pub tls: TlsFiles,
}

/// The runner's `tls-ca-file`, `tls-cert-file` and `tls-key-file`, as GitLab Runner's
/// `network/client.go` reads them: the PEM certificates in the CA file are trusted beside the
/// system's, and the certificate and key, when both are given, are presented to GitLab.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// `tls-ca-file`.
    pub ca_file: Option<std::path::PathBuf>,
    /// `tls-cert-file`.
    pub cert_file: Option<std::path::PathBuf>,
    /// `tls-key-file`.
    pub key_file: Option<std::path::PathBuf>,
}

impl TlsFiles {
    /// Whether any is set.
    pub fn is_empty(&self) -> bool {
        self.ca_file.is_none() && self.cert_file.is_none() && self.key_file.is_none()
    }

    fn read(path: &std::path::Path, what: &str) -> Result<Vec<u8>, ClientError> {
        std::fs::read(path)
            .map_err(|e| ClientError::Config(format!("{what} {}: {e}", path.display())))
    }

    /// `builder` with these files applied.
    fn apply(
        &self,
        mut builder: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, ClientError> {
        if let Some(path) = &self.ca_file {
            let pem = Self::read(path, "tls-ca-file")?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| ClientError::Config(format!("tls-ca-file {}: {e}", path.display())))?;
            if certs.is_empty() {
                return Err(ClientError::Config(format!(
                    "tls-ca-file {}: no PEM certificate in it",
                    path.display()
                )));
            }
            builder = builder.tls_certs_merge(certs);
        }
        match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => {
                let mut pem = Self::read(cert, "tls-cert-file")?;
                pem.push(b'\n');
                pem.extend(Self::read(key, "tls-key-file")?);
                let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
                    ClientError::Config(format!(
                        "tls-cert-file {} with tls-key-file {}: {e}",
                        cert.display(),
                        key.display()
                    ))
                })?;
                builder = builder.identity(identity);
            }
            (None, None) => {}
            _ => {
                return Err(ClientError::Config(
                    "tls-cert-file and tls-key-file go together: give both or neither".into(),
                ));
            }
        }
        Ok(builder)
    }
}

impl ClientConfig {
    /// A configuration with GitLab Runner's timeouts and retries.
    pub fn new(
        url: impl Into<String>,
        token: Secret<String>,
        system_id: String,
        info: Info,
    ) -> Self {
        ClientConfig {
            url: url.into(),
            token,
            system_id,
            info,
            request_timeout: Duration::from_secs(10 * 60),
            call_timeout: Duration::from_secs(5 * 60),
            connect_timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            tls: TlsFiles::default(),
        }
    }
}

/// What `POST /runners/verify` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedRunner {
    /// The runner's id, when GitLab sent it (legacy servers answer plain text).
    pub id: Option<i64>,
    /// When the token expires, when GitLab said.
    pub token_expires_at: Option<String>,
}

/// A job GitLab handed out (`201`).
#[derive(Debug)]
pub struct ReceivedJob {
    /// The job id, if the body had one.
    pub id: Option<i64>,
    /// The job token, if the body had one.
    pub token: Option<Secret<String>>,
    /// `features.failure_reasons`, read even from a payload that does not decode.
    pub failure_reasons: Vec<String>,
    /// The payload decoded leniently ([`JobPayload::from_value_lenient`]: informational
    /// fields of an unexpected type are left at their defaults and listed), or why it does
    /// not decode.
    pub payload: Result<LenientPayload, PayloadError>,
}

/// The largest job payload read. GitLab's payloads are kilobytes to a few megabytes (the
/// variables, steps and dependencies of one job); a larger answer is not a job.
pub const MAX_JOB_PAYLOAD: usize = 64 << 20;

/// The largest answer read where GitLab sends a small JSON document (`runners/verify`).
pub const MAX_SMALL_ANSWER: usize = 1 << 20;

impl ReceivedJob {
    /// A `201` body larger than [`MAX_JOB_PAYLOAD`]: only its first bytes were read, which
    /// is enough to find the id and token GitLab puts first, so the job can be reported failed.
    pub fn too_large(head: &[u8]) -> ReceivedJob {
        let (id, token) = id_and_token_of_head(head);
        ReceivedJob {
            id,
            token,
            failure_reasons: Vec::new(),
            payload: Err(PayloadError::new(
                ".",
                format!(
                    "the payload is larger than {} MiB; it was not read",
                    MAX_JOB_PAYLOAD >> 20
                ),
            )),
        }
    }

    /// Decodes a `201` body. The id and token are read on their own and leniently (an id
    /// may come as a number or a string of digits), so that a payload that does not decode
    /// can still be reported failed; then the payload. Never panics, whatever the bytes.
    pub fn parse(body: &[u8]) -> ReceivedJob {
        let value: serde_json::Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => {
                // Invalid UTF-8 inside a string fails the whole document, though the id and
                // token (plain ASCII, first in GitLab's entity) are readable.
                let (id, token) = id_and_token_of_head(body);
                return ReceivedJob {
                    id,
                    token,
                    failure_reasons: Vec::new(),
                    payload: Err(PayloadError::new(".", format!("not JSON: {e}"))),
                };
            }
        };
        let id = value.get("id").and_then(|v| {
            v.as_i64()
                .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
        });
        let token = value
            .get("token")
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(|s| Secret::new(s.to_string()));
        let failure_reasons = value
            .pointer("/features/failure_reasons")
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        ReceivedJob {
            id,
            token,
            failure_reasons,
            payload: JobPayload::from_value_lenient(value),
        }
    }
}

/// The job's id and token from the start of a payload that cannot be decoded whole: GitLab's
/// job entity exposes `id` then `token` first (`lib/api/entities/ci/job_request/response.rb`),
/// so the first `"id"` and `"token"` keys of the first 4 KiB are the job's.
fn id_and_token_of_head(body: &[u8]) -> (Option<i64>, Option<Secret<String>>) {
    let head = String::from_utf8_lossy(&body[..body.len().min(4096)]);
    let after_key = |key: &str| -> Option<&str> {
        let at = head.find(&format!("\"{key}\""))?;
        let rest = head[at + key.len() + 2..].trim_start();
        Some(rest.strip_prefix(':')?.trim_start())
    };
    let id = after_key("id").and_then(|v| {
        let v = v.strip_prefix('"').unwrap_or(v);
        let digits: String = v.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    });
    let token = after_key("token").and_then(|v| {
        let v = v.strip_prefix('"')?;
        let end = v.find('"')?;
        let t = &v[..end];
        (!t.is_empty() && !t.contains('\\')).then(|| Secret::new(t.to_string()))
    });
    (id, token)
}

/// A body read up to a limit.
pub(crate) enum Limited {
    /// All of it.
    Whole(Vec<u8>),
    /// It announced or sent more than the limit; the first `limit` bytes.
    TooLarge(Vec<u8>),
}

/// Reads `resp`'s body, never more than `limit` bytes (an endless answer stops there).
pub(crate) async fn read_limited(resp: Response, limit: usize) -> Result<Limited, reqwest::Error> {
    let mut body = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        let room = limit - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok(Limited::TooLarge(body));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Limited::Whole(body))
}

/// The answer to a job request.
#[derive(Debug)]
pub enum JobRequestOutcome {
    /// A job (`201`).
    Job(Box<ReceivedJob>),
    /// No job (`204`, or `409` when GitLab hit a conflict while assigning).
    ///
    /// `Gitlab-Ci-Builds-Polling: yes` is not reported: Workhorse sets it on every answer
    /// while long polling is configured, including answers Rails gave at once
    /// (`workhorse/internal/builds/register.go`), so it proves nothing about waiting.
    NoJob {
        /// Whether to ask again at once: GitLab's queue value changed (`X-GitLab-Last-Update`
        /// differs from the one sent), or the 204 carries no `X-GitLab-Last-Update`. Rails
        /// sets that header on every 204 it sends (`lib/api/ci/runner.rb` `post '/request'`),
        /// so a 204 without it is Workhorse's own: it watched the runner's queue and either
        /// saw it change or waited out the whole poll (`register.go`).
        queue_changed: bool,
    },
}

/// The answer to a `PUT /jobs/:id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateResponse {
    /// The HTTP status (200 applied, 202 trace still persisting, 400 a state GitLab does not
    /// take now, 412 checksum mismatch on older GitLab, 403/404 the job is no longer ours).
    pub status: u16,
    /// What `Job-Status` said (a 403 counts as [`RemoteJobState::Gone`]).
    pub remote: RemoteJobState,
    /// `X-GitLab-Trace-Update-Interval`, when sent.
    pub update_interval: Option<Duration>,
    /// `Retry-After` (or `RateLimit-ResetTime`), when sent.
    pub retry_after: Option<Duration>,
}

/// The answer to a `PATCH /jobs/:id/trace`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchResponse {
    /// The HTTP status (202 accepted, 416 wrong offset, 403 job gone, 404 unknown job).
    pub status: u16,
    /// What `Job-Status` said (a 403 counts as [`RemoteJobState::Gone`]).
    pub remote: RemoteJobState,
    /// The end of `Range: 0-<size>`: how many bytes GitLab holds.
    pub range_end: Option<u64>,
    /// `X-GitLab-Trace-Update-Interval`, when sent.
    pub update_interval: Option<Duration>,
}

/// One call, for errors and logs.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) method: &'static str,
    pub(crate) path: String,
    /// Whether a request that got no answer is sent again. GitLab Runner's
    /// `network/retry_requester.go` retries on status codes only; a job request that got
    /// no answer is not repeated (if Rails assigned a job, the 201 is lost either way, and a
    /// new request would just take another).
    pub(crate) retry_transport: bool,
}

impl Call {
    pub(crate) fn new(method: &'static str, path: impl Into<String>) -> Call {
        Call {
            method,
            path: path.into(),
            retry_transport: true,
        }
    }
}

/// A runner API client for one runner token. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    pub(crate) token: Secret<String>,
    pub(crate) system_id: String,
    pub(crate) info: Info,
    request_timeout: Duration,
    call_timeout: Duration,
    retry: RetryPolicy,
    user_agent: String,
    last_update: Mutex<String>,
    observer: Option<Observer>,
}

/// The API observer, shown in `Debug` by its presence only.
#[derive(Clone)]
struct Observer(Arc<dyn ApiObserver>);

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiObserver")
    }
}

impl Client {
    /// A client for `config`.
    pub fn new(config: ClientConfig) -> Result<Client, ClientError> {
        let mut url = config.url.trim().to_string();
        if !url.ends_with('/') {
            url.push('/');
        }
        let base = Url::parse(&url)
            .map_err(|e| ClientError::Config(format!("GitLab URL {}: {e}", redact_url(&url))))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(ClientError::Config(format!(
                "GitLab URL {}: the scheme must be http or https",
                redact_url(&url)
            )));
        }
        let builder = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .redirect(reqwest::redirect::Policy::none());
        let http =
            config.tls.apply(builder)?.build().map_err(|e| {
                ClientError::Config(format!("HTTP client: {}", transport_message(e)))
            })?;
        let user_agent = format!(
            "{} {} ({}; {})",
            config.info.name, config.info.version, config.info.platform, config.info.architecture
        );
        Ok(Client {
            http,
            base,
            token: config.token,
            system_id: config.system_id,
            info: config.info,
            request_timeout: config.request_timeout,
            call_timeout: config.call_timeout,
            retry: config.retry,
            user_agent,
            last_update: Mutex::new(String::new()),
            observer: None,
        })
    }

    /// Tells `observer` about every call that gets an HTTP answer (for metrics).
    pub fn with_observer(mut self, observer: Arc<dyn ApiObserver>) -> Client {
        self.observer = Some(Observer(observer));
        self
    }

    /// The info sent with every call.
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// This manager's system id.
    pub fn system_id(&self) -> &str {
        &self.system_id
    }

    /// GitLab's base URL, redacted.
    pub fn base_url(&self) -> String {
        redact_url(self.base.as_str())
    }

    /// The retry policy.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    /// The `last_update` the next job request sends.
    pub fn last_update(&self) -> String {
        self.last_update
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    pub(crate) fn api(&self, path: &str) -> Result<Url, ClientError> {
        self.base
            .join(&format!("api/v4/{path}"))
            .map_err(|e| ClientError::Config(format!("building the URL of {path}: {e}")))
    }

    /// Sends a request built by `build`, retrying retryable statuses (and, when
    /// `call.retry_transport`, transport failures) as [`RetryPolicy`] says. The last answer is
    /// returned whatever its status.
    async fn send(
        &self,
        call: &Call,
        build: &(dyn Fn() -> Result<RequestBuilder, ClientError> + Send + Sync),
    ) -> Result<Response, ClientError> {
        let attempts = self.retry.attempts.max(1);
        let mut attempt = 0;
        let first_sent = Instant::now();
        loop {
            attempt += 1;
            let request_id = uuid::Uuid::new_v4().simple().to_string();
            let req = build()?
                .header(REQUEST_ID_HEADER, &request_id)
                .header(reqwest::header::USER_AGENT, &self.user_agent);
            let started = Instant::now();
            match req.send().await {
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    tracing::debug!(
                        method = call.method, path = %call.path, status, attempt,
                        request_id = %request_id, elapsed_ms = started.elapsed().as_millis() as u64,
                        "runner API call"
                    );
                    if retryable_status(status) && attempt < attempts {
                        let hint = server_hint(
                            header_str(resp.headers(), "retry-after"),
                            header_str(resp.headers(), "ratelimit-resettime"),
                            SystemTime::now(),
                        );
                        let delay = self.retry.delay(attempt, hint, rand::random::<f64>());
                        tracing::info!(
                            method = call.method, path = %call.path, status, attempt,
                            delay_ms = delay.as_millis() as u64,
                            "runner API call answered a retryable status; retrying"
                        );
                        drop(resp);
                        tokio::time::sleep(delay).await;
                        continue;
                    }
                    if let Some(Observer(o)) = &self.observer {
                        o.request_done(
                            Endpoint::of(call.method, &call.path),
                            call.method,
                            status,
                            first_sent.elapsed(),
                        );
                    }
                    return Ok(resp);
                }
                Err(e) => {
                    let message = transport_message(e);
                    if call.retry_transport && attempt < attempts {
                        let delay = self.retry.delay(attempt, None, rand::random::<f64>());
                        tracing::info!(
                            method = call.method, path = %call.path, attempt, error = %message,
                            delay_ms = delay.as_millis() as u64,
                            "runner API call failed; retrying"
                        );
                        tokio::time::sleep(delay).await;
                        continue;
                    }
                    return Err(ClientError::Transport {
                        method: call.method,
                        path: call.path.clone(),
                        message,
                        attempts: attempt,
                    });
                }
            }
        }
    }

    /// Sends `body` as JSON to `url` with `method` and the call timeout, the runner token also
    /// in its header when `token_header` (as `verify` sends it), retrying as [`Client::send`]
    /// does.
    pub(crate) async fn send_json(
        &self,
        call: &Call,
        method: Method,
        url: Url,
        body: &impl serde::Serialize,
        token_header: bool,
    ) -> Result<Response, ClientError> {
        let body = serde_json::to_vec(body).map_err(|e| ClientError::Config(e.to_string()))?;
        self.send(call, &|| {
            let request = self
                .json_request(method.clone(), url.clone(), self.call_timeout)
                .body(body.clone());
            Ok(if token_header {
                request.header(RUNNER_TOKEN_HEADER, self.token.expose())
            } else {
                request
            })
        })
        .await
    }

    pub(crate) fn status_error(call: &Call, status: u16, detail: &str) -> ClientError {
        ClientError::Status {
            method: call.method,
            path: call.path.clone(),
            status,
            detail: if detail.is_empty() {
                String::new()
            } else {
                format!(": {detail}")
            },
        }
    }

    /// `POST /api/v4/runners/verify`: checks the runner token and registers this manager
    /// (`system_id`, `info`). A 403 is [`ClientError::InvalidRunnerToken`].
    pub async fn verify(&self) -> Result<VerifiedRunner, ClientError> {
        let call = Call::new("POST", "/api/v4/runners/verify");
        let url = self.api("runners/verify")?;
        let body = VerifyRequest {
            token: self.token.expose(),
            system_id: &self.system_id,
            info: &self.info,
        };
        let resp = self
            .send_json(&call, Method::POST, url, &body, true)
            .await?;
        let status = resp.status().as_u16();
        match status {
            200 | 201 => {
                // What does not fit or decode is read as an answer without details.
                let bytes = match read_limited(resp, MAX_SMALL_ANSWER).await {
                    Ok(Limited::Whole(b)) => b,
                    Ok(Limited::TooLarge(_)) | Err(_) => Vec::new(),
                };
                let parsed: VerifyResponse = serde_json::from_slice(&bytes).unwrap_or_default();
                Ok(VerifiedRunner {
                    id: (parsed.id != 0).then_some(parsed.id),
                    token_expires_at: parsed.token_expires_at,
                })
            }
            403 => Err(ClientError::InvalidRunnerToken {
                endpoint: "/api/v4/runners/verify",
            }),
            422 => Err(ClientError::RunnerOrphaned {
                endpoint: "/api/v4/runners/verify",
            }),
            _ => Err(Self::status_error(&call, status, "")),
        }
    }

    /// `POST /api/v4/jobs/request`: asks for a job, long polling when a `last_update` is
    /// known. 403 is [`ClientError::InvalidRunnerToken`], 422 [`ClientError::RunnerOrphaned`];
    /// retryable statuses that persist after every retry are [`ClientError::Status`]; a
    /// request that got no answer is not repeated ([`ClientError::Transport`]).
    pub async fn request_job(&self) -> Result<JobRequestOutcome, ClientError> {
        let mut call = Call::new("POST", "/api/v4/jobs/request");
        call.retry_transport = false;
        let url = self.api("jobs/request")?;
        let sent_last_update = self.last_update();
        let body = JobRequest {
            token: self.token.expose(),
            system_id: &self.system_id,
            last_update: &sent_last_update,
            info: &self.info,
        };
        let body = serde_json::to_vec(&body).map_err(|e| ClientError::Config(e.to_string()))?;
        let resp = self
            .send(&call, &|| {
                Ok(self
                    .json_request(Method::POST, url.clone(), self.request_timeout)
                    .header(RUNNER_TOKEN_HEADER, self.token.expose())
                    .body(body.clone()))
            })
            .await?;
        let status = resp.status().as_u16();
        let mut queue_changed = status == 204;
        if let Some(v) = header_str(resp.headers(), LAST_UPDATE_HEADER) {
            queue_changed = v != sent_last_update;
            if let Ok(mut l) = self.last_update.lock() {
                *l = v.to_string();
            }
        }
        match status {
            201 => {
                let body = read_limited(resp, MAX_JOB_PAYLOAD).await.map_err(|e| {
                    ClientError::Transport {
                        method: call.method,
                        path: call.path.clone(),
                        message: transport_message(e),
                        attempts: 1,
                    }
                })?;
                Ok(JobRequestOutcome::Job(Box::new(match body {
                    Limited::Whole(body) => ReceivedJob::parse(&body),
                    Limited::TooLarge(head) => ReceivedJob::too_large(&head),
                })))
            }
            204 => Ok(JobRequestOutcome::NoJob { queue_changed }),
            409 => Ok(JobRequestOutcome::NoJob {
                queue_changed: false,
            }),
            403 => Err(ClientError::InvalidRunnerToken {
                endpoint: "/api/v4/jobs/request",
            }),
            422 => Err(ClientError::RunnerOrphaned {
                endpoint: "/api/v4/jobs/request",
            }),
            _ => Err(Self::status_error(&call, status, "")),
        }
    }

    /// `PUT /api/v4/jobs/:id`: a state update (`running`: accept or keep-alive; `pending`:
    /// keep-alive of a job GitLab waits to see accepted; the final `success`/`failed`). Every
    /// status is returned for the caller to judge.
    pub async fn update_job(
        &self,
        job_id: i64,
        request: &UpdateJobRequest<'_>,
    ) -> Result<UpdateResponse, ClientError> {
        let path = format!("jobs/{job_id}");
        let call = Call::new("PUT", format!("/api/v4/{path}"));
        let url = self.api(&path)?;
        let body = serde_json::to_vec(request).map_err(|e| ClientError::Config(e.to_string()))?;
        let token = request.token;
        let resp = self
            .send(&call, &|| {
                Ok(self
                    .json_request(Method::PUT, url.clone(), self.call_timeout)
                    .header(JOB_TOKEN_HEADER, token)
                    .body(body.clone()))
            })
            .await?;
        let status = resp.status().as_u16();
        let remote = remote_state(status, resp.headers());
        Ok(UpdateResponse {
            status,
            remote,
            update_interval: update_interval(resp.headers()),
            retry_after: server_hint(
                header_str(resp.headers(), "retry-after"),
                header_str(resp.headers(), "ratelimit-resettime"),
                SystemTime::now(),
            ),
        })
    }

    /// `PATCH /api/v4/jobs/:id/trace`: appends `bytes` at `offset` of the job log
    /// (`Content-Range: <offset>-<offset+len-1>`). Every status is returned for the caller
    /// to judge. `bytes` must not be empty.
    pub async fn patch_trace(
        &self,
        job_id: i64,
        token: &Secret<String>,
        offset: u64,
        bytes: Bytes,
        debug_trace: bool,
    ) -> Result<PatchResponse, ClientError> {
        let path = format!("jobs/{job_id}/trace");
        let call = Call::new("PATCH", format!("/api/v4/{path}"));
        let mut url = self.api(&path)?;
        url.set_query(Some(if debug_trace {
            "debug_trace=true"
        } else {
            "debug_trace=false"
        }));
        let end = offset + (bytes.len() as u64).max(1) - 1;
        let range = format!("{offset}-{end}");
        let resp = self
            .send(&call, &|| {
                Ok(self
                    .http
                    .request(Method::PATCH, url.clone())
                    .timeout(self.call_timeout)
                    .header(JOB_TOKEN_HEADER, token.expose())
                    .header(reqwest::header::CONTENT_RANGE, &range)
                    .header(reqwest::header::CONTENT_TYPE, "text/plain")
                    .body(bytes.clone()))
            })
            .await?;
        let status = resp.status().as_u16();
        let headers = resp.headers();
        Ok(PatchResponse {
            status,
            remote: remote_state(status, headers),
            range_end: header_str(headers, "range").and_then(parse_range_end),
            update_interval: update_interval(headers),
        })
    }

    /// `POST /api/v4/jobs/:id/artifacts`: uploads the file at `archive` as multipart part
    /// `file`, streamed (chunked), named as GitLab Runner names it ([`artifact_file_name`]).
    ///
    /// Only a `307` is followed, as GitLab Runner's `artifacts_uploader.go` `handleRedirect`
    /// does: the upload is sent again, with the job token, to `/api/v4/jobs/:id/artifacts` on
    /// the scheme, host and port the `Location` names (its path and query are dropped). Any
    /// other redirect is an error.
    pub async fn upload_artifact(
        &self,
        upload: &ArtifactUpload<'_>,
        archive: &Path,
    ) -> Result<(), ClientError> {
        let path = format!("jobs/{}/artifacts", upload.job_id);
        let call = Call::new("POST", format!("/api/v4/{path}"));
        let mut url = self.api(&path)?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("artifact_format", upload.artifact_format);
            q.append_pair("artifact_type", upload.artifact_type);
            if !upload.expire_in.is_empty() {
                q.append_pair("expire_in", upload.expire_in);
            }
        }
        let file_name = artifact_file_name(upload.name, upload.artifact_format);
        for _ in 0..=MAX_REDIRECTS {
            let target = url.clone();
            let resp = self
                .send(&call, &|| {
                    let file = std::fs::File::open(archive).map_err(|source| ClientError::Io {
                        context: format!("opening the artifact archive {}", archive.display()),
                        source,
                    })?;
                    let stream = tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(file));
                    let part = reqwest::multipart::Part::stream(reqwest::Body::wrap_stream(stream))
                        .file_name(file_name.clone());
                    let form = reqwest::multipart::Form::new().part("file", part);
                    Ok(self
                        .http
                        .post(target.clone())
                        .header(reqwest::header::ACCEPT, "application/json")
                        .header(JOB_TOKEN_HEADER, upload.token.expose())
                        .multipart(form))
                })
                .await?;
            let status = resp.status().as_u16();
            match status {
                200 | 201 => return Ok(()),
                307 => {
                    url = upload_redirect(&target, resp.headers()).ok_or_else(|| {
                        Self::status_error(&call, status, "redirect without a usable Location")
                    })?;
                    tracing::info!(
                        job = upload.job_id,
                        to = %redact_url(url.as_str()),
                        "artifact upload redirected; sending it again"
                    );
                }
                413 => {
                    return Err(Self::status_error(
                        &call,
                        status,
                        "the artifact is too large for this GitLab",
                    ));
                }
                _ => return Err(Self::status_error(&call, status, "")),
            }
        }
        Err(Self::status_error(&call, 310, "too many redirects"))
    }

    /// `GET /api/v4/jobs/:id/artifacts?direct_download=true` with `token` (the running job's:
    /// current GitLab authorises the download only with it, `authenticate_job_via_dependent_job!`
    /// in `lib/api/ci/runner.rb`): writes the archive to `dest` (atomically) and returns true,
    /// or false on 404 (no artifacts; the job then fails, as GitLab Runner's
    /// `artifacts_downloader.go` treats it as fatal). `direct_download=true` lets GitLab
    /// redirect to object storage; redirects are followed, the job token sent only to
    /// GitLab's own origin.
    ///
    /// At most `max_bytes` are written: an answer past them (an archive larger than GitLab
    /// said it is, or an endless one) fails with [`ClientError::TooLarge`] and leaves nothing.
    pub async fn download_artifacts(
        &self,
        job_id: i64,
        token: &Secret<String>,
        dest: &Path,
        max_bytes: u64,
    ) -> Result<bool, ClientError> {
        let path = format!("jobs/{job_id}/artifacts");
        let call = Call::new("GET", format!("/api/v4/{path}"));
        let mut start = self.api(&path)?;
        start.set_query(Some("direct_download=true"));
        let origin = start.origin();
        let attempts = self.retry.attempts.max(1);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut url = start.clone();
            let mut resp = None;
            for _ in 0..=MAX_REDIRECTS {
                let same_origin = url.origin() == origin;
                let target = url.clone();
                let r = self
                    .send(&call, &|| {
                        let mut req = self.http.get(target.clone());
                        if same_origin {
                            req = req.header(JOB_TOKEN_HEADER, token.expose());
                        }
                        Ok(req)
                    })
                    .await?;
                let status = r.status().as_u16();
                if matches!(status, 301 | 302 | 303 | 307 | 308) {
                    url = redirect_target(&target, r.headers()).ok_or_else(|| {
                        Self::status_error(&call, status, "redirect without Location")
                    })?;
                    continue;
                }
                resp = Some(r);
                break;
            }
            let Some(resp) = resp else {
                return Err(Self::status_error(&call, 310, "too many redirects"));
            };
            let status = resp.status().as_u16();
            match status {
                200 => {}
                404 => return Ok(false),
                _ => return Err(Self::status_error(&call, status, "")),
            }
            match write_body(resp, dest, max_bytes).await {
                Ok(()) => return Ok(true),
                Err(WriteError::Io(e)) => return Err(e),
                Err(WriteError::TooLarge) => {
                    return Err(ClientError::TooLarge {
                        method: call.method,
                        path: call.path,
                        limit: max_bytes,
                    });
                }
                Err(WriteError::Body(message)) if attempt >= attempts => {
                    return Err(ClientError::Transport {
                        method: call.method,
                        path: call.path,
                        message,
                        attempts: attempt,
                    });
                }
                Err(WriteError::Body(message)) => {
                    let delay = self.retry.delay(attempt, None, rand::random::<f64>());
                    tracing::info!(path = %call.path, error = %message, "artifact download broke off; retrying");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    fn json_request(&self, method: Method, url: Url, timeout: Duration) -> RequestBuilder {
        self.http
            .request(method, url)
            .timeout(timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "application/json")
    }
}

enum WriteError {
    Io(ClientError),
    Body(String),
    TooLarge,
}

async fn write_body(resp: Response, dest: &Path, limit: u64) -> Result<(), WriteError> {
    let io = |context: String| move |source| WriteError::Io(ClientError::Io { context, source });
    if resp.content_length().is_some_and(|n| n > limit) {
        return Err(WriteError::TooLarge);
    }
    let tmp = dest.with_extension("partial");
    let mut file = tokio::fs::File::create(&tmp)
        .await
        .map_err(io(format!("creating {}", tmp.display())))?;
    let mut stream = resp.bytes_stream();
    let mut written: u64 = 0;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| WriteError::Body(transport_message(e)))?;
        written += chunk.len() as u64;
        if written > limit {
            drop(file);
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(WriteError::TooLarge);
        }
        file.write_all(&chunk)
            .await
            .map_err(io(format!("writing {}", tmp.display())))?;
    }
    file.flush()
        .await
        .map_err(io(format!("writing {}", tmp.display())))?;
    drop(file);
    tokio::fs::rename(&tmp, dest)
        .await
        .map_err(io(format!("moving the archive to {}", dest.display())))
}

/// Where a `307` sends an upload: `/api/v4/jobs/:id/artifacts` (the path and query of
/// `from`) on the scheme, host and port of `Location`.
fn upload_redirect(from: &Url, headers: &HeaderMap) -> Option<Url> {
    let location = from.join(header_str(headers, "location")?).ok()?;
    if !matches!(location.scheme(), "http" | "https") {
        return None;
    }
    let mut to = from.clone();
    to.set_scheme(location.scheme()).ok()?;
    to.set_host(location.host_str()).ok()?;
    to.set_port(location.port()).ok()?;
    Some(to)
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v: &HeaderValue| v.to_str().ok())
}

/// `0-1234` → 1234.
pub(crate) fn parse_range_end(v: &str) -> Option<u64> {
    let v = v
        .trim()
        .trim_start_matches("bytes")
        .trim_start_matches('=')
        .trim();
    v.split_once('-')?.1.trim().parse().ok()
}

/// `X-GitLab-Trace-Update-Interval`: whole seconds, or a fraction as Ruby writes a
/// `Rational` (`1/2`: Rails' `backoff.rb` computes `2 ** -1` for the first two seconds).
fn update_interval(headers: &HeaderMap) -> Option<Duration> {
    let v = header_str(headers, TRACE_UPDATE_INTERVAL_HEADER)?.trim();
    let secs = match v.split_once('/') {
        Some((n, d)) => {
            let (n, d): (f64, f64) = (n.trim().parse().ok()?, d.trim().parse().ok()?);
            (d > 0.0).then(|| n / d)?
        }
        None => v.parse::<u64>().ok()? as f64,
    };
    (secs > 0.0 && secs.is_finite()).then(|| Duration::from_secs_f64(secs).min(MAX_UPDATE_INTERVAL))
}

fn remote_state(status: u16, headers: &HeaderMap) -> RemoteJobState {
    let from_header = header_str(headers, JOB_STATUS_HEADER)
        .map(RemoteJobState::from_header)
        .unwrap_or(RemoteJobState::Running);
    if status == 403 {
        RemoteJobState::Gone
    } else {
        from_header
    }
}

fn redirect_target(from: &Url, headers: &HeaderMap) -> Option<Url> {
    from.join(header_str(headers, "location")?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_intervals_parse_integers_and_rubys_rationals() {
        let mut h = HeaderMap::new();
        for (v, want) in [
            ("3", Some(Duration::from_secs(3))),
            ("1/2", Some(Duration::from_millis(500))),
            ("0", None),
            ("soon", None),
            ("1/0", None),
            ("99999", Some(MAX_UPDATE_INTERVAL)),
        ] {
            h.insert(TRACE_UPDATE_INTERVAL_HEADER, HeaderValue::from_static(v));
            assert_eq!(update_interval(&h), want, "{v}");
        }
    }

    #[test]
    fn range_ends_parse() {
        assert_eq!(parse_range_end("0-1234"), Some(1234));
        assert_eq!(parse_range_end(" 0-0 "), Some(0));
        assert_eq!(parse_range_end("bytes=0-7"), Some(7));
        assert_eq!(parse_range_end("garbage"), None);
    }

    #[test]
    fn uploads_are_redirected_to_the_api_path_on_the_named_host() {
        let from =
            Url::parse("http://127.0.0.1:8080/api/v4/jobs/5/artifacts?artifact_type=archive")
                .unwrap();
        let mut h = HeaderMap::new();
        h.insert(
            "location",
            HeaderValue::from_static("https://uploads.example.com:8443/elsewhere?sig=x"),
        );
        assert_eq!(
            upload_redirect(&from, &h).unwrap().as_str(),
            "https://uploads.example.com:8443/api/v4/jobs/5/artifacts?artifact_type=archive"
        );
        h.insert("location", HeaderValue::from_static("/other/path"));
        assert_eq!(upload_redirect(&from, &h).unwrap(), from);
        h.insert("location", HeaderValue::from_static("ftp://x/"));
        assert!(upload_redirect(&from, &h).is_none());
    }

    #[test]
    fn malformed_bodies_keep_id_and_token() {
        let j = ReceivedJob::parse(
            br#"{"id":7,"token":"glcbt-x","steps":"nope","features":{"failure_reasons":["a"]}}"#,
        );
        assert_eq!(j.id, Some(7));
        assert_eq!(j.token.unwrap().expose(), "glcbt-x");
        assert_eq!(j.failure_reasons, vec!["a".to_string()]);
        let e = j.payload.unwrap_err();
        assert_eq!(e.path, "steps");
        let j = ReceivedJob::parse(b"{not json");
        assert!(j.id.is_none() && j.payload.is_err());
        let j = ReceivedJob::parse(br#"{"id":"42","token":"t","steps":7}"#);
        assert_eq!(j.id, Some(42));
        let j = ReceivedJob::parse(
            br#"{"id":9,"token":"t","job_info":{"name":"n","instance_id":"abc","queue_size":"x"}}"#,
        );
        let p = j.payload.unwrap();
        assert_eq!(p.payload.job_info.instance_id, "abc");
        assert_eq!(p.ignored.len(), 1);
    }
}
