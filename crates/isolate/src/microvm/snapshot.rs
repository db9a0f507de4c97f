//! Snapshots of a job's VM, driven by variables that pass through GitLab unchanged (pure):
//!
//! - `FLOTILLA_SNAPSHOT: on_failure | always`: after the job's `step_script` (its first build
//!   stage: `before_script` and `script`), the VM is saved (QMP `stop`, `migrate` to a file,
//!   each disk's layer frozen) when the stage failed, or always; the VM then runs on
//!   (`after_script` still runs). The job's log says where and how big.
//! - `FLOTILLA_RESTORE_FROM: <key>`: the job's VM starts from that snapshot instead of
//!   booting. Several jobs may restore one snapshot at once (a `parallel:matrix` branched from
//!   one setup): each writes to a qcow2 layer of its own over the snapshot's frozen one.
//! - `FLOTILLA_SNAPSHOT_KEY`: the name a snapshot is saved under; by default the job's name
//!   (characters other than letters, digits and `._-` replaced by `_`).
//!
//! Snapshots are kept on the instance that took them, under the level's state directory, and
//! with a snapshot store in the manager's store too (`shipping`). A job restores
//! only snapshots of its [`Scope`].

use flotilla_job::JobPayload;

/// Asks for a snapshot of the job's VM.
pub const SNAPSHOT_VARIABLE: &str = "FLOTILLA_SNAPSHOT";
/// Names the snapshot the job's VM starts from.
pub const RESTORE_VARIABLE: &str = "FLOTILLA_RESTORE_FROM";
/// Names the job's snapshot.
pub const KEY_VARIABLE: &str = "FLOTILLA_SNAPSHOT_KEY";

/// Whose snapshots a job may restore: its own project's, taken on refs as protected as its
/// own. GitLab keeps the caches of protected and unprotected refs apart for the same reason:
/// a job anyone can push must not prepare the state a protected job starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// The project's full path (`group/project`), else `project-<id>`.
    pub project: String,
    /// The project's id.
    pub project_id: i64,
    /// Whether the job's ref is protected.
    pub protected: bool,
}

impl Scope {
    /// The scope of `job`.
    pub fn of(job: &JobPayload) -> Scope {
        let info = &job.job_info;
        Scope {
            project: if info.project_full_path.is_empty() {
                format!("project-{}", info.project_id)
            } else {
                info.project_full_path.clone()
            },
            project_id: info.project_id,
            protected: job.git_info.protected.unwrap_or(false),
        }
    }

    /// `protected` or `non_protected`, as GitLab suffixes cache keys.
    pub fn suffix(&self) -> &'static str {
        if self.protected {
            "protected"
        } else {
            "non_protected"
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "project {:?} ({} refs)",
            self.project,
            self.suffix().replace('_', "-")
        )
    }
}

/// When the job's VM is saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// After `step_script`, if it failed.
    OnFailure,
    /// After `step_script`, whatever its outcome.
    Always,
}

/// What a job asks of snapshots.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnapshotPlan {
    /// Save the VM, under this key.
    pub save: Option<(When, String)>,
    /// Start from this snapshot.
    pub restore: Option<String>,
    /// What was asked that cannot be done (for the job's log).
    pub warnings: Vec<String>,
}

/// A name as a snapshot key: letters, digits and `._-` kept, anything else `_`, no leading
/// dot, at most 100 characters.
pub fn key_of(name: &str) -> String {
    let mut k: String = name
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    if k.starts_with('.') || k.is_empty() {
        k.insert(0, '_');
    }
    k
}

impl SnapshotPlan {
    /// The plan of `job`.
    pub fn for_job(job: &JobPayload) -> SnapshotPlan {
        let var = |key: &str| {
            job.variables
                .iter()
                .rev()
                .find(|v| v.key == key)
                .map(|v| v.value.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let mut plan = SnapshotPlan::default();
        let key = key_of(&var(KEY_VARIABLE).unwrap_or_else(|| job.job_info.name.clone()));
        match var(SNAPSHOT_VARIABLE).as_deref() {
            None => {}
            Some("on_failure") => plan.save = Some((When::OnFailure, key)),
            Some("always") => plan.save = Some((When::Always, key)),
            // Rails builds the `script` step as `before_script + script` (GitLab's
            // `lib/gitlab/ci/build/step.rb`, `Step.from_commands`): the payload has no boundary.
            Some("after_before_script") => plan.warnings.push(format!(
                "{SNAPSHOT_VARIABLE}=after_before_script cannot be honoured: GitLab sends \
                 before_script and script as one list, so where one ends is not known; no \
                 snapshot is taken (use on_failure or always)"
            )),
            Some(other) => plan.warnings.push(format!(
                "{SNAPSHOT_VARIABLE}={other:?} is not one of on_failure, always: no snapshot \
                 is taken"
            )),
        }
        plan.restore = var(RESTORE_VARIABLE).map(|r| key_of(&r));
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_job::Variable;
    use flotilla_job::model::JobInfo;

    fn job(name: &str, vars: &[(&str, &str)]) -> JobPayload {
        JobPayload {
            job_info: JobInfo {
                name: name.into(),
                ..Default::default()
            },
            variables: vars.iter().map(|(k, v)| Variable::new(*k, *v)).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn keys_are_safe_file_names() {
        assert_eq!(key_of("setup"), "setup");
        assert_eq!(key_of("test: [linux, 3]"), "test___linux__3_");
        assert_eq!(key_of("../etc"), "_.._etc");
        assert_eq!(key_of(""), "_");
        assert_eq!(key_of(&"x".repeat(300)).len(), 100);
    }

    #[test]
    fn the_variables_make_the_plan() {
        assert_eq!(
            SnapshotPlan::for_job(&job("a", &[])),
            SnapshotPlan::default()
        );
        let p = SnapshotPlan::for_job(&job("setup job", &[(SNAPSHOT_VARIABLE, "on_failure")]));
        assert_eq!(p.save, Some((When::OnFailure, "setup_job".into())));
        let p = SnapshotPlan::for_job(&job(
            "a",
            &[
                (SNAPSHOT_VARIABLE, "always"),
                (KEY_VARIABLE, "base"),
                (RESTORE_VARIABLE, "setup job"),
            ],
        ));
        assert_eq!(p.save, Some((When::Always, "base".into())));
        assert_eq!(p.restore.as_deref(), Some("setup_job"));
        for odd in ["after_before_script", "sometimes"] {
            let p = SnapshotPlan::for_job(&job("a", &[(SNAPSHOT_VARIABLE, odd)]));
            assert_eq!(p.save, None);
            assert_eq!(p.warnings.len(), 1, "{odd}");
        }
    }
}
