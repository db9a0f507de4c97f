//! The durable store following every job a runner takes: recorded (with its token) before
//! anything is sent about it, its outcome when it ends, and reported once GitLab has a final
//! state for it. A restart reports what is left ([`super::orphans`]).

use async_trait::async_trait;
use flotilla_gitlab::{FinalReport, JobHooks, StartedJob};
use flotilla_job::Outcome;
use flotilla_store::{JobOutcome, JobStart, ScopeId, Store};
use std::time::SystemTime;

/// The store's name for a job's token.
pub(super) fn token_name(id: i64) -> String {
    format!("job-token/{id}")
}

/// Records every job in the store, and its token so a restart can report it.
pub(super) struct StoreHooks {
    pub store: Store,
    pub scope: ScopeId,
    pub source: String,
    /// The disk under the store: no job is taken that could not be recorded.
    pub disk: std::sync::Arc<super::disk::DiskGate>,
}

#[async_trait]
impl JobHooks for StoreHooks {
    fn refuses_new_jobs(&self) -> Option<String> {
        self.disk.refusal()
    }

    async fn job_started(&self, job: &StartedJob) {
        let start = JobStart {
            source: self.source.clone(),
            job_id: job.id.to_string(),
            key: String::new(),
            instance: String::new(),
            slot: 0,
            started_at: SystemTime::now(),
        };
        // The token first: a job recorded without one could not be reported after a crash.
        if let Err(e) = self.store.put_credential(
            self.scope,
            &token_name(job.id),
            job.token.expose().as_bytes(),
        ) {
            tracing::error!(job = job.id, error = %e, "cannot record the job's token");
        }
        if let Err(e) = self.store.job_started(self.scope, &start) {
            tracing::error!(job = job.id, error = %e, "cannot record the job's start");
        }
    }

    async fn job_withdrawn(&self, job: &StartedJob) {
        // Forgotten, not ended: GitLab refused the job (it is not ours) and may hand it out
        // again.
        if let Err(e) = self
            .store
            .forget_job(self.scope, &self.source, &job.id.to_string())
        {
            tracing::error!(job = job.id, error = %e, "cannot forget the withdrawn job");
        }
        let _ = self
            .store
            .delete_credential(self.scope, &token_name(job.id));
    }

    async fn job_finished(&self, job: &StartedJob, outcome: &Outcome) {
        let outcome = match outcome {
            Outcome::Success => JobOutcome::Success,
            Outcome::Failed { reason, exit_code } => JobOutcome::Failed {
                failure_reason: reason.as_str().to_string(),
                exit_code: *exit_code,
            },
        };
        if let Err(e) = self.store.job_finished(
            self.scope,
            &self.source,
            &job.id.to_string(),
            &outcome,
            SystemTime::now(),
        ) {
            tracing::error!(job = job.id, error = %e, "cannot record the job's end");
        }
    }

    async fn job_reported(&self, job: &StartedJob, report: &FinalReport) {
        tracing::debug!(job = job.id, ?report, "job reported");
        if !report.settled() {
            // GitLab never took the final update: keep the job (and its token) unreported,
            // so the next start sends it again.
            tracing::warn!(
                job = job.id,
                "the job's final state did not reach GitLab; it is sent again at the next start"
            );
            return;
        }
        if let Err(e) = self.store.job_reported(
            self.scope,
            &self.source,
            &job.id.to_string(),
            SystemTime::now(),
        ) {
            tracing::error!(job = job.id, error = %e, "cannot record that the job was reported");
        }
        let _ = self
            .store
            .delete_credential(self.scope, &token_name(job.id));
    }
}
