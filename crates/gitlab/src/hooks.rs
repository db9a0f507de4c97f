//! Hooks through which the durable store follows every job the source takes, so a restart
//! can report jobs that were running when the manager died.

use super::final_update::FinalReport;
use async_trait::async_trait;
use flotilla_fleet::Secret;
use flotilla_job::Outcome;

/// A job GitLab handed to this manager.
#[derive(Debug, Clone)]
pub struct StartedJob {
    /// The runner (its `[[runners]]` name).
    pub runner: String,
    /// GitLab's base URL (redacted).
    pub url: String,
    /// The job id.
    pub id: i64,
    /// The job's name.
    pub name: String,
    /// The job token: what a restarted manager needs to report the job.
    pub token: Secret<String>,
    /// `features.failure_reasons` of the payload.
    pub failure_reasons: Vec<String>,
}

/// Called at each transition of a job. Every method defaults to doing nothing; they must not
/// block for long (they run on the job's task).
#[async_trait]
pub trait JobHooks: Send + Sync {
    /// GitLab handed the job out. Called before anything is sent about it (the accept, its
    /// log): by default GitLab considers a job running from its 201 on, so a manager killed
    /// from here on must still know of the job (and its token) when it restarts, and report
    /// it.
    async fn job_started(&self, _job: &StartedJob) {}

    /// GitLab refused the job before it ran (403, 404 or another client error to its accept
    /// or a keep-alive, or `Job-Status: canceled|failed`): it is not ours and nothing will be
    /// sent for it. Not called when GitLab gave no usable answer: it may think the job runs,
    /// so the job runs and stays recorded until it is reported.
    async fn job_withdrawn(&self, _job: &StartedJob) {}

    /// The job ended on the fleet with `outcome`; the final update is next.
    async fn job_finished(&self, _job: &StartedJob, _outcome: &Outcome) {}

    /// The final update ended with `report`; nothing more will be sent for the job.
    async fn job_reported(&self, _job: &StartedJob, _report: &FinalReport) {}

    /// Why no job may be asked for now (the store cannot record one: its disk is full), or
    /// `None`. Asked before every job request; while it answers, the source waits.
    fn refuses_new_jobs(&self) -> Option<String> {
        None
    }
}

/// Hooks that do nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoJobHooks;

impl JobHooks for NoJobHooks {}
