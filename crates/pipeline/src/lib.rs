//! `flotilla exec`: a `.gitlab-ci.yml` pipeline run on a local fleet.
//!
//! The pipeline is compiled ([`flotilla_ci`]) into GitLab-shaped job payloads
//! ([`payload::to_payload`]) and run through the same dispatcher, scaler and isolation levels
//! that serve GitLab ([`run_pipeline`]). Every job starts from a snapshot of the working tree
//! ([`snapshot`]: uncommitted changes included, ignored files excluded), handed to it like a
//! dependency's artifacts; artifacts pass from job to job through a local artifact store, and a
//! job with dependencies gets the working tree and their artifacts merged into one archive
//! ([`merge`]); dotenv reports pass their variables on, as GitLab does (`dotenv`).

mod dotenv;
pub mod merge;
pub mod payload;
mod pipeline;
pub mod snapshot;

pub use pipeline::{
    ExecConfig, ExecError, ExecEvent, JobStatus, JobSummary, PipelineOutcome, run_pipeline,
};
