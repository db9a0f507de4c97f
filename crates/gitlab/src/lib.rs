//! flotilla as a GitLab runner manager: the runner API client, the trace sink that PATCHes
//! the job log, the artifact store over GitLab's artifacts API, and the job source that takes
//! jobs for one `[[runners]]` entry and runs each on a slot of its fleet. (The
//! `.gitlab-ci.yml` compiler is `flotilla-ci`; local pipeline runs are `flotilla-pipeline`.)
//!
//! The wire protocol follows GitLab Runner's (`network/gitlab.go`):
//!
//! - [`client`]: [`Client`] — `POST /runners/verify`, `POST /jobs/request` (long polling with
//!   `last_update`), `PUT /jobs/:id`, `PATCH /jobs/:id/trace`, artifacts up and down; retries
//!   with backoff that honours `Retry-After`.
//! - [`trace`]: [`GitLabTraceSink`] and [`JobTrace`]: the log PATCHed incrementally with
//!   `Content-Range`, 416 recovery, the server's update interval, keep-alives, cancellation
//!   learned from `Job-Status`, and the final update loop (202, 412).
//! - [`artifacts`]: [`GitLabArtifactStore`], an [`flotilla_job::ArtifactStore`].
//! - [`source`]: [`JobSource`], the request loop with slot admission, acceptance as GitLab
//!   expects it, the runner's health, graceful and forced stop; [`JobHooks`] lets the durable
//!   store follow every job.
//! - [`registration`]: registering a runner with a legacy registration token and
//!   unregistering a runner or one of its managers, as `gitlab-runner register` and
//!   `unregister` do.
//! - [`orphan`]: [`report_left_running`], for jobs a previous manager process left running.
//! - [`observe`]: [`ApiObserver`], told the endpoint, status and duration of every API call
//!   (the facts of GitLab Runner's request metrics).
//!
//! Secrets (the runner token, job tokens) travel only in headers and bodies; they never
//! appear in logs or errors.

pub mod artifacts;
pub mod client;
mod error;
pub mod executor;
mod features;
mod final_update;
mod health;
pub mod hooks;
mod job_status;
pub mod observe;
pub mod orphan;
mod rails_backoff;
pub mod registration;
mod retry;
pub mod source;
pub mod system_id;
pub mod trace;
mod trace_buffer;
mod upload_name;
mod wire;

pub use artifacts::GitLabArtifactStore;
pub use client::{
    Client, ClientConfig, JobRequestOutcome, MAX_JOB_PAYLOAD, MAX_SMALL_ANSWER, PatchResponse,
    ReceivedJob, TlsFiles, UpdateResponse, VerifiedRunner,
};
pub use error::ClientError;
pub use executor::{Route, SlotExecutor};
pub use features::{ConfigInfo, FeaturesInfo, Info};
pub use final_update::FinalReport;
pub use flotilla_fleet::redact_url;
pub use health::{DEFAULT_UNHEALTHY_INTERVAL, DEFAULT_UNHEALTHY_REQUESTS_LIMIT};
pub use hooks::{JobHooks, NoJobHooks, StartedJob};
pub use job_status::RemoteJobState;
pub use observe::{ApiObserver, Endpoint};
pub use orphan::{LeftRunning, RecordedEnd, report_left_running};
pub use retry::RetryPolicy;
pub use source::{Acceptance, JobSource, SourceConfig, SourceReport, StopHandle};
pub use system_id::system_id;
pub use trace::{GitLabTraceSink, JobTrace, TraceOptions};
pub use upload_name::artifact_file_name;
pub use wire::{TraceOutput, UpdateJobRequest};
