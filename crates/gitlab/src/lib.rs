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
//! - [`source`]: [`JobSource`], the request loop with slot admission, two-phase commit,
//!   graceful and forced stop; [`JobHooks`] lets the durable store follow every job.
//!
//! Secrets (the runner token, job tokens) travel only in headers and bodies; they never
//! appear in logs or errors.

pub mod artifacts;
pub mod client;
mod error;
pub mod executor;
mod features;
mod final_update;
pub mod hooks;
mod job_status;
mod redact;
mod retry;
pub mod source;
pub mod system_id;
pub mod trace;
mod trace_buffer;
mod wire;

pub use artifacts::GitLabArtifactStore;
pub use client::{
    Client, ClientConfig, JobRequestOutcome, PatchResponse, ReceivedJob, UpdateResponse,
    VerifiedRunner,
};
pub use error::ClientError;
pub use executor::SlotExecutor;
pub use features::{ConfigInfo, FeaturesInfo, Info};
pub use final_update::FinalReport;
pub use hooks::{JobHooks, NoJobHooks, StartedJob};
pub use job_status::RemoteJobState;
pub use redact::redact_url;
pub use retry::RetryPolicy;
pub use source::{JobSource, SourceConfig, SourceReport, StopHandle};
pub use system_id::system_id;
pub use trace::{GitLabTraceSink, JobTrace, TraceOptions};
pub use wire::{TraceOutput, UpdateJobRequest};
