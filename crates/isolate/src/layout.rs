//! Where a job's files live on its instance (pure).
//!
//! Every slot has a directory of its own, `<builds_dir>/<slot>`, and a job's project is
//! checked out at `<builds_dir>/<slot>/<project path>`: two jobs running at once on one
//! instance hold different slots, so they never share a directory, and the next job of the same
//! project on the same slot finds the previous checkout (for `GIT_STRATEGY=fetch`).
//!
//! The processes of each slot's stages are recorded in `<builds_dir>/.flotilla/<slot>.stages`
//! (see [`crate::stage_record::recorded`]), outside every slot's directory, so the next job of the
//! slot can stop what an earlier one left running.

use flotilla_job::{EnvPaths, JobPayload};

/// The directories of one job on its instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildLayout {
    /// The slot's own directory, `<builds_dir>/<slot>` (docker isolation binds the project's
    /// own `<slot_dir>/.project-<id>` at this path into the job's containers:
    /// [`crate::docker::spec::slot_bind`]).
    pub slot_dir: String,
    /// The paths scripts see: `CI_BUILDS_DIR` is the base builds directory, `CI_PROJECT_DIR`
    /// is `<slot_dir>/<project path>`, the temporary directory is next to it.
    pub paths: EnvPaths,
    /// The slot's stage record, `<builds_dir>/.flotilla/<slot>.stages`.
    pub stage_record: String,
}

/// The directory holding every slot's stage record under `builds_dir`,
/// `<builds_dir>/.flotilla`; `builds_dir` must be an absolute POSIX path without `..`.
pub fn stage_records_dir(builds_dir: &str) -> Result<String, String> {
    Ok(join(base_of(builds_dir)?, ".flotilla"))
}

/// `builds_dir` checked (absolute, no `..`) and without its trailing slashes (`/` stays `/`).
fn base_of(builds_dir: &str) -> Result<&str, String> {
    if !builds_dir.starts_with('/') {
        return Err(format!(
            "the builds directory {builds_dir:?} is not an absolute path"
        ));
    }
    if builds_dir.split('/').any(|c| c == "..") {
        return Err(format!(
            "the builds directory {builds_dir:?} must not contain `..`"
        ));
    }
    Ok(match builds_dir.trim_end_matches('/') {
        "" => "/",
        b => b,
    })
}

impl BuildLayout {
    /// The layout of `job` on `slot` under `builds_dir`, which must be an absolute POSIX
    /// path.
    pub fn new(builds_dir: &str, slot: usize, job: &JobPayload) -> Result<BuildLayout, String> {
        let base = base_of(builds_dir)?;
        let slot_dir = join(base, &slot.to_string());
        let project_dir = join(&slot_dir, &project_path(job));
        Ok(BuildLayout {
            slot_dir,
            paths: EnvPaths::new(base, project_dir),
            stage_record: join(&join(base, ".flotilla"), &format!("{slot}.stages")),
        })
    }
}

fn join(base: &str, rest: &str) -> String {
    if base.ends_with('/') {
        format!("{base}{rest}")
    } else {
        format!("{base}/{rest}")
    }
}

/// The project's directory below the slot directory: `job_info.project_full_path` made safe
/// (components of `[A-Za-z0-9._-]` only, other characters replaced by `_`, empty, `.` and
/// `..` components dropped), or `project-<project id>` when nothing is left.
pub fn project_path(job: &JobPayload) -> String {
    let parts: Vec<String> = job
        .job_info
        .project_full_path
        .split('/')
        .filter(|c| !c.is_empty() && *c != "." && *c != "..")
        .map(|c| {
            c.chars()
                .map(|ch| {
                    if ch.is_ascii_alphanumeric() || matches!(ch, '.' | '_' | '-') {
                        ch
                    } else {
                        '_'
                    }
                })
                .collect::<String>()
        })
        // A component made of dots only would still climb or stay put.
        .filter(|c| c.chars().any(|ch| ch != '.'))
        .collect();
    if parts.is_empty() {
        format!("project-{}", job.job_info.project_id)
    } else {
        parts.join("/")
    }
}

/// Whether the job asked for its project directory to be removed after it ran
/// (`FF_ENABLE_JOB_CLEANUP`, true in any spelling Go's `strconv.ParseBool` accepts). Otherwise the
/// checkout is kept for the next job of the project on the slot.
pub fn cleanup_requested(job: &JobPayload) -> bool {
    job.feature_flag("FF_ENABLE_JOB_CLEANUP")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(path: &str) -> JobPayload {
        let mut j = JobPayload::default();
        j.job_info.project_full_path = path.into();
        j.job_info.project_id = 42;
        j
    }

    #[test]
    fn project_paths_are_sanitised() {
        assert_eq!(project_path(&job("group/sub/project")), "group/sub/project");
        assert_eq!(project_path(&job("g/../../etc")), "g/etc");
        assert_eq!(project_path(&job("/abs//x/./y/")), "abs/x/y");
        assert_eq!(project_path(&job("we ird/na$me")), "we_ird/na_me");
        assert_eq!(project_path(&job("ünï/…")), "_n_/_");
        assert_eq!(project_path(&job("")), "project-42");
        assert_eq!(project_path(&job("../..")), "project-42");
        assert_eq!(project_path(&job("a/.../b")), "a/b");
    }

    #[test]
    fn job_cleanup_is_opt_in() {
        use flotilla_job::Variable;
        let mut j = job("g/p");
        assert!(!cleanup_requested(&j));
        j.variables
            .push(Variable::new("FF_ENABLE_JOB_CLEANUP", "true"));
        assert!(cleanup_requested(&j));
        j.variables
            .push(Variable::new("FF_ENABLE_JOB_CLEANUP", "false"));
        assert!(!cleanup_requested(&j), "the last value wins");
    }

    #[test]
    fn every_slot_has_its_own_directory() {
        let j = job("group/project");
        let a = BuildLayout::new("/builds", 0, &j).unwrap();
        let b = BuildLayout::new("/builds/", 1, &j).unwrap();
        assert_eq!(a.slot_dir, "/builds/0");
        assert_eq!(a.paths.project_dir, "/builds/0/group/project");
        assert_eq!(a.paths.tmp_dir, "/builds/0/group/project.tmp");
        assert_eq!(a.paths.builds_dir, "/builds");
        assert_eq!(b.paths.project_dir, "/builds/1/group/project");
        assert_eq!(
            BuildLayout::new("/", 3, &j).unwrap().paths.project_dir,
            "/3/group/project"
        );
        assert_eq!(a.stage_record, "/builds/.flotilla/0.stages");
        assert_eq!(b.stage_record, "/builds/.flotilla/1.stages");
        assert_eq!(
            BuildLayout::new("/", 3, &j).unwrap().stage_record,
            "/.flotilla/3.stages"
        );
        assert_eq!(stage_records_dir("/builds/").unwrap(), "/builds/.flotilla");
        assert!(stage_records_dir("builds").is_err());
        assert!(stage_records_dir("/a/../b").is_err());
        assert!(BuildLayout::new("builds", 0, &j).is_err());
        assert!(BuildLayout::new("/x/../y", 0, &j).is_err());
    }
}
