//! `flotilla exec`: a `.gitlab-ci.yml` pipeline run on a local fleet.
//!
//! The pipeline is compiled ([`flotilla_ci`]) into GitLab-shaped job payloads
//! ([`payload::to_payload`]) and run through the same dispatcher, scaler and isolation levels
//! that serve GitLab ([`run_pipeline`]). Every job starts from what its `GIT_*` variables ask
//! for, as GitLab Runner would leave it: a git repository at the pipeline's commit, checked
//! out, with the working tree's uncommitted changes on top ([`snapshot`], archived once per
//! pipeline for each distinct ask and extracted by the runner's `get_sources` stage, `sources`).
//! Artifacts pass from job to job through a local artifact store; a job with several
//! dependencies gets their artifacts merged into one archive ([`merge`]); dotenv reports pass
//! their variables on, as GitLab does (`dotenv`).

mod dotenv;
pub mod kept;
pub mod merge;
pub mod payload;
mod pipeline;
pub mod snapshot;
mod sources;

pub use pipeline::{
    ExecConfig, ExecError, ExecEvent, JobStatus, JobSummary, PipelineOutcome, run_pipeline,
};
