//! Jobs a previous process left unreported: each is reported once through
//! [`flotilla_gitlab::report_left_running`] (the GitLab protocol stays in that crate), with the
//! outcome the process recorded or as a system failure, and marked reported when GitLab has
//! a final state for it.

use super::store_hooks::token_name;
use flotilla_gitlab::{Client, LeftRunning, RecordedEnd, report_left_running};
use flotilla_store::{JobOutcome, ScopeId, Store};
use std::time::SystemTime;

/// Reports the jobs a previous process left running or unreported, exactly once.
pub(super) async fn report_orphans(store: &Store, scope: ScopeId, client: &Client, runner: &str) {
    let orphans = match store.unfinished_jobs(scope) {
        Ok(o) => o,
        Err(e) => {
            tracing::error!(runner, error = %e, "cannot read unfinished jobs");
            return;
        }
    };
    for job in orphans {
        let Ok(id) = job.job_id.parse::<i64>() else {
            continue;
        };
        // A job that never recorded an outcome died with the previous process.
        if job.outcome.is_none()
            && let Err(e) = store.job_finished(
                scope,
                &job.source,
                &job.job_id,
                &JobOutcome::Failed {
                    failure_reason: "runner_system_failure".into(),
                    exit_code: None,
                },
                SystemTime::now(),
            )
        {
            tracing::error!(runner, job = id, error = %e, "cannot record the end of an unfinished job");
            continue;
        }
        let token = match store.get_credential(scope, &token_name(id)) {
            Ok(Some(t)) => String::from_utf8_lossy(t.expose()).into_owned(),
            _ => {
                tracing::warn!(
                    runner,
                    job = id,
                    "no token recorded for an unfinished job; it cannot be reported"
                );
                if let Err(e) =
                    store.job_reported(scope, &job.source, &job.job_id, SystemTime::now())
                {
                    tracing::error!(runner, job = id, error = %e, "cannot record an unfinished job as handled");
                }
                continue;
            }
        };
        let end = match &job.outcome {
            None => RecordedEnd::Unknown,
            Some(JobOutcome::Success) => RecordedEnd::Success,
            Some(JobOutcome::Failed {
                failure_reason,
                exit_code,
            }) => RecordedEnd::Failed {
                failure_reason: failure_reason.clone(),
                exit_code: *exit_code,
            },
        };
        let left = LeftRunning {
            id,
            token: flotilla_fleet::Secret::new(token),
            end,
        };
        let report = report_left_running(client, &left).await;
        if !report.settled() {
            tracing::error!(
                runner,
                job = id,
                ?report,
                "cannot report a job the previous process left running; will try at the next start"
            );
            continue;
        }
        tracing::warn!(
            runner,
            job = id,
            ?report,
            "reported a job the previous process left running"
        );
        if let Err(e) = store.job_reported(scope, &job.source, &job.job_id, SystemTime::now()) {
            tracing::error!(runner, job = id, error = %e, "cannot record that the job was reported");
        }
        let _ = store.delete_credential(scope, &token_name(id));
    }
}
