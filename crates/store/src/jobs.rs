//! Job records: which jobs ran where, how they ended, and whether the job source was told.
//!
//! A job moves `running -> finished -> reported`. After a crash, [`Store::unfinished_jobs`]
//! lists the jobs whose end the job source has not delivered: the ones still `running` (the
//! source records them failed with a system-failure reason, or resumes them where it can) and
//! the `finished` ones (the source delivers the recorded outcome). Once the source has
//! delivered it, [`Store::job_reported`] marks the record, and it is never listed again: each
//! job's final state is delivered exactly once per successful `job_reported` (a crash between
//! delivering and marking delivers it once more, which GitLab's job update tolerates).

use crate::error::StoreError;
use crate::identity::ScopeId;
use crate::store::{Store, TxError};
use crate::time::{from_millis, to_millis};
use rusqlite::{OptionalExtension, params};
use std::time::SystemTime;

/// Where a job is in its life, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Started on a slot; no outcome yet.
    Running,
    /// Ended with an outcome the job source has not delivered yet.
    Finished,
    /// The outcome was delivered to the job source.
    Reported,
}

impl JobState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Finished => "finished",
            JobState::Reported => "reported",
        }
    }

    /// Parses [`JobState::as_str`]'s output.
    pub fn parse(s: &str) -> Option<JobState> {
        Some(match s {
            "running" => JobState::Running,
            "finished" => JobState::Finished,
            "reported" => JobState::Reported,
            _ => return None,
        })
    }
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum JobOutcome {
    /// It succeeded.
    Success,
    /// It failed.
    Failed {
        /// GitLab's failure reason (`script_failure`, `runner_system_failure`, ...).
        failure_reason: String,
        /// The script's exit code, when it got that far.
        exit_code: Option<i32>,
    },
}

/// A job starting on a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobStart {
    /// The job source (for example `gitlab:<runner url>` or `exec`).
    pub source: String,
    /// The job's id at its source.
    pub job_id: String,
    /// The key the job holds its slot under.
    pub key: String,
    /// The instance it runs on.
    pub instance: String,
    /// The slot index.
    pub slot: usize,
    /// When it started.
    pub started_at: SystemTime,
}

/// A job as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    /// The job source.
    pub source: String,
    /// The job's id at its source.
    pub job_id: String,
    /// Where it is in its life.
    pub state: JobState,
    /// The key it held its slot under.
    pub key: String,
    /// The instance it ran on.
    pub instance: String,
    /// The slot index.
    pub slot: usize,
    /// When it started.
    pub started_at: SystemTime,
    /// When it ended, once it has.
    pub ended_at: Option<SystemTime>,
    /// How it ended, once it has.
    pub outcome: Option<JobOutcome>,
}

const COLUMNS: &str = "source, job_id, state, key, instance, slot, started_at, ended_at, \
                       outcome, failure_reason, exit_code";

type RawJob = (
    String,
    String,
    String,
    String,
    String,
    i64,
    i64,
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<i32>,
);

fn raw(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawJob> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
        r.get(9)?,
        r.get(10)?,
    ))
}

fn decode(raw: RawJob) -> Result<JobRecord, TxError> {
    let (source, job_id, state, key, instance, slot, started, ended, outcome, reason, exit_code) =
        raw;
    let bad = |what: String| TxError::Decode(format!("job {job_id} from {source}: {what}"));
    let state = JobState::parse(&state).ok_or_else(|| bad(format!("unknown state {state:?}")))?;
    let slot = usize::try_from(slot).map_err(|_| bad(format!("slot {slot}")))?;
    let outcome = match outcome.as_deref() {
        None => None,
        Some("success") => Some(JobOutcome::Success),
        Some("failed") => Some(JobOutcome::Failed {
            failure_reason: reason.unwrap_or_default(),
            exit_code,
        }),
        Some(other) => return Err(bad(format!("unknown outcome {other:?}"))),
    };
    Ok(JobRecord {
        source,
        job_id,
        state,
        key,
        instance,
        slot,
        started_at: from_millis(started),
        ended_at: ended.map(from_millis),
        outcome,
    })
}

fn state_of(
    tx: &rusqlite::Transaction<'_>,
    scope: ScopeId,
    source: &str,
    job_id: &str,
) -> Result<Option<JobState>, TxError> {
    let state: Option<String> = tx
        .prepare_cached("SELECT state FROM jobs WHERE scope = ?1 AND source = ?2 AND job_id = ?3")?
        .query_row(params![scope.0, source, job_id], |r| r.get(0))
        .optional()?;
    state
        .map(|s| {
            JobState::parse(&s)
                .ok_or_else(|| TxError::Decode(format!("job {job_id}: unknown state {s:?}")))
        })
        .transpose()
}

impl Store {
    fn unknown_job(&self, source: &str, job_id: &str) -> TxError {
        self.error(|path| StoreError::UnknownJob {
            path,
            job_source: source.to_string(),
            job_id: job_id.to_string(),
        })
    }

    fn job_conflict(
        &self,
        source: &str,
        job_id: &str,
        state: JobState,
        action: &'static str,
    ) -> TxError {
        self.error(|path| StoreError::JobConflict {
            path,
            job_source: source.to_string(),
            job_id: job_id.to_string(),
            state: state.as_str(),
            action,
        })
    }

    /// Records that a job started on a slot. Starting a job that is already `running` again
    /// (resuming it after a restart) updates its slot; starting one that has ended fails with
    /// [`StoreError::JobConflict`].
    pub fn job_started(&self, scope: ScopeId, job: &JobStart) -> Result<(), StoreError> {
        self.write("record a job's start", |tx| {
            let slot = i64::try_from(job.slot)
                .map_err(|_| TxError::Decode(format!("slot {}", job.slot)))?;
            match state_of(tx, scope, &job.source, &job.job_id)? {
                None => {
                    tx.prepare_cached(
                        "INSERT INTO jobs (scope, source, job_id, state, key, instance, slot, started_at) \
                         VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6, ?7)",
                    )?
                    .execute(params![
                        scope.0,
                        job.source,
                        job.job_id,
                        job.key,
                        job.instance,
                        slot,
                        to_millis(job.started_at)
                    ])?;
                }
                Some(JobState::Running) => {
                    tx.prepare_cached(
                        "UPDATE jobs SET key = ?4, instance = ?5, slot = ?6 \
                         WHERE scope = ?1 AND source = ?2 AND job_id = ?3",
                    )?
                    .execute(params![
                        scope.0,
                        job.source,
                        job.job_id,
                        job.key,
                        job.instance,
                        slot
                    ])?;
                }
                Some(state) => {
                    return Err(self.job_conflict(&job.source, &job.job_id, state, "start"));
                }
            }
            Ok(())
        })
    }

    /// Records how a running job ended. Returns `true` if this call recorded it and `false`
    /// if the job had already ended (the first outcome stands). An unknown job fails with
    /// [`StoreError::UnknownJob`].
    pub fn job_finished(
        &self,
        scope: ScopeId,
        source: &str,
        job_id: &str,
        outcome: &JobOutcome,
        ended_at: SystemTime,
    ) -> Result<bool, StoreError> {
        self.write("record a job's end", |tx| {
            match state_of(tx, scope, source, job_id)? {
                None => return Err(self.unknown_job(source, job_id)),
                Some(JobState::Finished | JobState::Reported) => return Ok(false),
                Some(JobState::Running) => {}
            }
            let (kind, reason, exit_code) = match outcome {
                JobOutcome::Success => ("success", None, None),
                JobOutcome::Failed {
                    failure_reason,
                    exit_code,
                } => ("failed", Some(failure_reason.as_str()), *exit_code),
            };
            tx.prepare_cached(
                "UPDATE jobs SET state = 'finished', ended_at = ?4, outcome = ?5, \
                 failure_reason = ?6, exit_code = ?7 \
                 WHERE scope = ?1 AND source = ?2 AND job_id = ?3",
            )?
            .execute(params![
                scope.0,
                source,
                job_id,
                to_millis(ended_at),
                kind,
                reason,
                exit_code
            ])?;
            Ok(true)
        })
    }

    /// Records that the job's final state was delivered to its source. Idempotent: returns
    /// `true` if this call marked it and `false` if it was already marked. Fails with
    /// [`StoreError::JobConflict`] for a job still running (record its end first) and with
    /// [`StoreError::UnknownJob`] for an unknown one.
    pub fn job_reported(
        &self,
        scope: ScopeId,
        source: &str,
        job_id: &str,
        now: SystemTime,
    ) -> Result<bool, StoreError> {
        self.write("record a job's report", |tx| {
            match state_of(tx, scope, source, job_id)? {
                None => Err(self.unknown_job(source, job_id)),
                Some(JobState::Reported) => Ok(false),
                Some(JobState::Running) => {
                    Err(self.job_conflict(source, job_id, JobState::Running, "mark as reported"))
                }
                Some(JobState::Finished) => {
                    tx.prepare_cached(
                        "UPDATE jobs SET state = 'reported', reported_at = ?4 \
                         WHERE scope = ?1 AND source = ?2 AND job_id = ?3",
                    )?
                    .execute(params![
                        scope.0,
                        source,
                        job_id,
                        to_millis(now)
                    ])?;
                    Ok(true)
                }
            }
        })
    }

    /// Forgets a job that never ran (its source withdrew it before it started), so that the
    /// same id can be recorded again if the source hands it out again. Only a `running` job is
    /// forgotten; returns whether one was.
    pub fn forget_job(
        &self,
        scope: ScopeId,
        source: &str,
        job_id: &str,
    ) -> Result<bool, StoreError> {
        self.write("forget a withdrawn job", |tx| {
            let n = tx
                .prepare_cached(
                    "DELETE FROM jobs WHERE scope = ?1 AND source = ?2 AND job_id = ?3 \
                     AND state = 'running'",
                )?
                .execute(params![scope.0, source, job_id])?;
            Ok(n > 0)
        })
    }

    /// Jobs of `scope` whose final state has not been delivered (`running` or `finished`),
    /// oldest first. Never lists a job marked by [`Store::job_reported`].
    pub fn unfinished_jobs(&self, scope: ScopeId) -> Result<Vec<JobRecord>, StoreError> {
        self.read("list unfinished jobs", |tx| {
            let mut stmt = tx.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM jobs WHERE scope = ?1 AND state <> 'reported' \
                 ORDER BY started_at, source, job_id"
            ))?;
            let rows = stmt.query_map([scope.0], raw)?;
            let mut out = Vec::new();
            for row in rows {
                out.push(decode(row?)?);
            }
            Ok(out)
        })
    }

    /// One job's record.
    pub fn job(
        &self,
        scope: ScopeId,
        source: &str,
        job_id: &str,
    ) -> Result<Option<JobRecord>, StoreError> {
        self.read("read a job", |tx| {
            let row = tx
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM jobs WHERE scope = ?1 AND source = ?2 AND job_id = ?3"
                ))?
                .query_row(params![scope.0, source, job_id], raw)
                .optional()?;
            row.map(decode).transpose()
        })
    }

    /// Deletes the records of jobs reported before `before`, keeping the file small.
    /// Returns how many were deleted.
    pub fn prune_reported_jobs(
        &self,
        scope: ScopeId,
        before: SystemTime,
    ) -> Result<usize, StoreError> {
        self.write("prune reported jobs", |tx| {
            Ok(tx
                .prepare_cached(
                    "DELETE FROM jobs WHERE scope = ?1 AND state = 'reported' AND reported_at < ?2",
                )?
                .execute(params![scope.0, to_millis(before)])?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_states_round_trip() {
        for s in [JobState::Running, JobState::Finished, JobState::Reported] {
            assert_eq!(JobState::parse(s.as_str()), Some(s));
        }
        assert_eq!(JobState::parse("success"), None);
    }
}
