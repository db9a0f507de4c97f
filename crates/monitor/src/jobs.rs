//! The jobs of one runner as the status page shows them: received and waiting for a slot,
//! or running on one, with their isolation level; and those that ended in the last hour,
//! with their result.

use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// How long an ended job stays on the page.
pub const HISTORY_SPAN: Duration = Duration::from_secs(3600);
/// Ended jobs kept at most, whatever their age (a busy fleet ends thousands an hour; the
/// page and the memory stay small).
pub const HISTORY_MAX: usize = 500;

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobPhase {
    /// GitLab handed it out; it waits for a slot.
    Waiting,
    /// It runs on a slot.
    Running,
}

/// How a job ended, as its final update told GitLab.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobEnd {
    /// It succeeded.
    Success,
    /// It failed (its `failure_reason` says why).
    Failed,
    /// GitLab took it back before it ran (canceled, or not ours): nothing was reported.
    Withdrawn,
}

/// One job.
#[derive(Debug, Clone)]
pub(crate) struct JobEntry {
    pub(crate) name: String,
    pub(crate) phase: JobPhase,
    pub(crate) received: Instant,
    pub(crate) started: Option<Instant>,
    pub(crate) level: Option<String>,
    pub(crate) instance: Option<String>,
    pub(crate) slot: Option<usize>,
    /// The scaler key its slot is held under.
    pub(crate) key: Option<String>,
    pub(crate) first_byte_seen: bool,
    /// Its page on GitLab (`CI_JOB_URL`), when the payload gave one.
    pub(crate) page: Option<String>,
    /// How it ended, once it did.
    pub(crate) end: Option<(JobEnd, Option<String>)>,
}

impl JobEntry {
    /// A job GitLab handed out at `received`.
    pub(crate) fn new(name: &str, received: Instant) -> JobEntry {
        JobEntry {
            name: name.to_string(),
            phase: JobPhase::Waiting,
            received,
            started: None,
            level: None,
            instance: None,
            slot: None,
            key: None,
            first_byte_seen: false,
            page: None,
            end: None,
        }
    }
}

/// A job as the status page's JSON has it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobView {
    /// GitLab's job id.
    pub id: i64,
    /// The job's name.
    pub name: String,
    /// Waiting or running.
    pub phase: JobPhase,
    /// The isolation level it runs at (once running).
    pub level: Option<String>,
    /// Its instance (once running).
    pub instance: Option<String>,
    /// Its slot on the instance (once running).
    pub slot: Option<usize>,
    /// Seconds since GitLab handed it out.
    pub elapsed_s: f64,
    /// Seconds since it got its slot.
    pub running_s: Option<f64>,
    /// Its page on GitLab.
    pub url: Option<String>,
}

/// A job that ended, as the status page's JSON has it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EndedJobView {
    /// GitLab's job id.
    pub id: i64,
    /// The job's name.
    pub name: String,
    /// How it ended (`null`: the end was not told, the job only left).
    pub result: Option<JobEnd>,
    /// Why it failed (GitLab's `failure_reason`), when it did.
    pub failure_reason: Option<String>,
    /// The isolation level it ran at (`null`: it never got a slot).
    pub level: Option<String>,
    /// The instance it ran on.
    pub instance: Option<String>,
    /// Its slot on the instance.
    pub slot: Option<usize>,
    /// Seconds from GitLab handing it out to its end, as GitLab Runner times a job.
    pub duration_s: f64,
    /// Seconds of that spent waiting for a slot (`null`: it never got one).
    pub waited_s: Option<f64>,
    /// Seconds since it ended.
    pub ago_s: f64,
    /// Its page on GitLab.
    pub url: Option<String>,
}

/// An ended job and when it ended.
#[derive(Debug, Clone)]
struct Ended {
    id: i64,
    job: JobEntry,
    at: Instant,
}

/// The jobs of one runner, by GitLab job id, and the last hour's ended ones.
#[derive(Debug, Default)]
pub(crate) struct JobTable {
    pub(crate) jobs: BTreeMap<i64, JobEntry>,
    /// Newest first.
    ended: VecDeque<Ended>,
}

impl JobTable {
    pub(crate) fn views(&self, now: Instant) -> Vec<JobView> {
        self.jobs
            .iter()
            .map(|(id, j)| JobView {
                id: *id,
                name: j.name.clone(),
                phase: j.phase,
                level: j.level.clone(),
                instance: j.instance.clone(),
                slot: j.slot,
                elapsed_s: now.saturating_duration_since(j.received).as_secs_f64(),
                running_s: j
                    .started
                    .map(|s| now.saturating_duration_since(s).as_secs_f64()),
                url: j.page.clone(),
            })
            .collect()
    }

    /// The jobs that ended within [`HISTORY_SPAN`] of `now`, newest first.
    pub(crate) fn ended_views(&self, now: Instant) -> Vec<EndedJobView> {
        self.ended
            .iter()
            .take_while(|e| now.saturating_duration_since(e.at) <= HISTORY_SPAN)
            .map(|e| {
                let j = &e.job;
                let (result, failure_reason) = match &j.end {
                    Some((end, reason)) => (Some(*end), reason.clone()),
                    None => (None, None),
                };
                EndedJobView {
                    id: e.id,
                    name: j.name.clone(),
                    result,
                    failure_reason,
                    level: j.level.clone(),
                    instance: j.instance.clone(),
                    slot: j.slot,
                    duration_s: e.at.saturating_duration_since(j.received).as_secs_f64(),
                    waited_s: j
                        .started
                        .map(|s| s.saturating_duration_since(j.received).as_secs_f64()),
                    ago_s: now.saturating_duration_since(e.at).as_secs_f64(),
                    url: j.page.clone(),
                }
            })
            .collect()
    }

    /// Job `id` left at `now`: it moves to the history (the oldest beyond
    /// [`HISTORY_SPAN`] or [`HISTORY_MAX`] leave it). Returns the job, if it was known.
    pub(crate) fn finish(&mut self, id: i64, now: Instant) -> Option<&JobEntry> {
        let job = self.jobs.remove(&id)?;
        self.ended.push_front(Ended { id, job, at: now });
        while self.ended.len() > HISTORY_MAX
            || self
                .ended
                .back()
                .is_some_and(|e| now.saturating_duration_since(e.at) > HISTORY_SPAN)
        {
            self.ended.pop_back();
        }
        self.ended.front().map(|e| &e.job)
    }

    /// Job id by the scaler key of its slot.
    pub(crate) fn by_key(&self) -> BTreeMap<&str, i64> {
        self.jobs
            .iter()
            .filter_map(|(id, j)| j.key.as_deref().map(|k| (k, *id)))
            .collect()
    }

    /// Jobs received and waiting for a slot.
    pub(crate) fn waiting(&self) -> usize {
        self.jobs
            .values()
            .filter(|j| j.phase == JobPhase::Waiting)
            .count()
    }
}

/// Whether `url` may be a link on the page: an absolute `http` or `https` URL (a payload's
/// `CI_JOB_URL` is GitLab's; anything else, `javascript:` above all, is not linked).
pub(crate) fn linkable(url: &str) -> bool {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    (lower.starts_with("https://") || lower.starts_with("http://"))
        && url.len() <= 2048
        && !url.chars().any(|c| c.is_control() || c.is_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Job `id` received at `received`, on a slot 10 s later, ended 30 s after it came.
    fn ended(t: &mut JobTable, id: i64, received: Instant, end: JobEnd) {
        let mut j = JobEntry::new(&format!("job-{id}"), received);
        j.started = Some(received + Duration::from_secs(10));
        j.level = Some("docker".into());
        j.end = Some((
            end,
            (end == JobEnd::Failed).then(|| "script_failure".to_string()),
        ));
        t.jobs.insert(id, j);
        assert!(t.finish(id, received + Duration::from_secs(30)).is_some());
    }

    #[test]
    fn ended_jobs_stay_an_hour_newest_first_with_their_result() {
        let t0 = Instant::now();
        let mut t = JobTable::default();
        ended(&mut t, 1, t0, JobEnd::Success);
        ended(&mut t, 2, t0 + Duration::from_secs(60), JobEnd::Failed);
        let now = t0 + Duration::from_secs(120);
        let v = t.ended_views(now);
        assert_eq!(v.iter().map(|e| e.id).collect::<Vec<_>>(), [2, 1]);
        assert_eq!(v[0].result, Some(JobEnd::Failed));
        assert_eq!(v[0].failure_reason.as_deref(), Some("script_failure"));
        assert_eq!((v[0].duration_s, v[0].waited_s), (30.0, Some(10.0)));
        assert_eq!(v[1].ago_s, 90.0);
        assert!(t.jobs.is_empty(), "an ended job is no longer running");
        // An hour after the first ended, only the second is shown; a job ending later
        // drops the first for good.
        let later = t0 + Duration::from_secs(30) + HISTORY_SPAN + Duration::from_secs(1);
        assert_eq!(
            t.ended_views(later)
                .iter()
                .map(|e| e.id)
                .collect::<Vec<_>>(),
            [2]
        );
        ended(&mut t, 3, later, JobEnd::Success);
        assert_eq!(t.ended.len(), 2);
        // Unknown jobs are not invented.
        assert!(t.finish(99, later).is_none());
    }

    #[test]
    fn the_history_is_bounded_whatever_the_rate() {
        let t0 = Instant::now();
        let mut t = JobTable::default();
        for id in 0..(HISTORY_MAX as i64 + 50) {
            ended(
                &mut t,
                id,
                t0 + Duration::from_millis(id as u64),
                JobEnd::Success,
            );
        }
        assert_eq!(t.ended.len(), HISTORY_MAX);
        assert_eq!(
            t.ended_views(t0 + Duration::from_secs(60))[0].id,
            HISTORY_MAX as i64 + 49
        );
    }

    #[test]
    fn only_web_addresses_are_linked() {
        assert!(linkable(
            "https://gitlab.example.com/group/project/-/jobs/42"
        ));
        assert!(linkable("HTTP://127.0.0.1:8080/g/p/-/jobs/1"));
        assert!(!linkable("javascript:alert(1)"));
        assert!(!linkable("data:text/html,x"));
        assert!(!linkable("https://a b"));
        assert!(!linkable("//evil.example/x"));
        assert!(!linkable(""));
    }
}
