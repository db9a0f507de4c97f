//! The job engine: what a CI job is (GitLab's job payload) and how its stages run.
//!
//! - [`model`]: the payload types, decoded leniently ([`JobPayload::from_json`]).
//! - [`vars`]: the job's effective variables (dedup, expansion, predefined `CI_*`).
//! - [`script`]: the POSIX shell scripts generated per stage.
//! - [`trace`]: the log: [`TraceSink`], masking across chunks, output limit, checksum.
//! - [`env`]: the [`Environment`] an isolation level provides, and [`LocalEnvironment`].
//! - [`archive`]: artifacts and caches moved as tar streams, kept as zip archives.
//! - [`store`]: [`ArtifactStore`] and [`CacheStore`] with local-directory implementations.
//! - [`runner`]: [`JobRunner`], which runs the stages and returns a [`JobResult`].
//! - [`duration`]: Go's duration syntax, as GitLab Runner reads it in variables and config.

pub mod archive;
pub mod duration;
pub mod env;
pub mod model;
pub mod runner;
pub mod script;
pub mod secrets;
pub mod store;
pub mod trace;
pub mod vars;

pub use env::{
    EnvError, EnvPaths, Environment, ExecCommand, ExecSpec, ExitStatus, LocalEnvironment, Place,
};
pub use model::{JobPayload, PayloadError, Variable};
pub use runner::{
    FailureReason, JobCancel, JobResult, JobRunner, Outcome, RunOptions, StageReport,
};
pub use store::{
    ArtifactDownload, ArtifactStore, ArtifactUpload, CacheKey, CacheStore, LocalArtifactStore,
    LocalCacheStore, StoreError,
};
pub use trace::{
    BufferSink, FileSink, LineRenderer, TerminalSink, TraceError, TraceSink, TraceSummary,
};
pub use vars::{JobVariables, RunnerIdentity};
