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
//!
//! A job may name its project directory with `GIT_CLONE_PATH` when the runner allows it
//! (`[runners.custom_build_dir] enabled`; GitLab's default is on for the docker executors and
//! off for the others, and each level passes its own): GitLab Runner's `getCustomBuildDir`
//! rules and messages, the value expanded once with the job's variables and `CI_BUILDS_DIR`,
//! `CI_CONCURRENT_ID`, `CI_CONCURRENT_PROJECT_ID` (`CI_PROJECT_DIR` empty), and it must lie
//! within the builds directory. Two more refusals are flotilla's: the builds directory itself
//! and its `.flotilla` directory, which hold every slot's files (a clone empties the project
//! directory first).

use flotilla_job::{EnvPaths, JobPayload};

/// Why a job's directories cannot be laid out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// The builds directory itself is unusable (a level's setup).
    #[error("{0}")]
    Setup(String),
    /// The job asked for a directory it may not have (`GIT_CLONE_PATH`): the job fails with
    /// GitLab's runner configuration error, in GitLab's words.
    #[error("{0}")]
    Refused(String),
}

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
    /// path; with `custom_build_dir`, the job's `GIT_CLONE_PATH` names its project directory.
    pub fn new(
        builds_dir: &str,
        slot: usize,
        job: &JobPayload,
        custom_build_dir: bool,
    ) -> Result<BuildLayout, LayoutError> {
        let base = base_of(builds_dir).map_err(LayoutError::Setup)?;
        let slot_dir = join(base, &slot.to_string());
        let project_dir = match clone_path(job, base, slot) {
            None => join(&slot_dir, &project_path(job)),
            Some(dir) => custom_dir(base, &dir, custom_build_dir).map_err(LayoutError::Refused)?,
        };
        Ok(BuildLayout {
            slot_dir,
            paths: EnvPaths::new(base, project_dir),
            stage_record: join(&join(base, ".flotilla"), &format!("{slot}.stages")),
        })
    }
}

/// The job's `GIT_CLONE_PATH` expanded once, as GitLab Runner's `validateVariables` reads it
/// (the job's variables over `CI_BUILDS_DIR`, `CI_PROJECT_DIR` empty, the concurrency ids; a
/// raw variable is taken as written); `None` when unset or empty.
fn clone_path(job: &JobPayload, base: &str, slot: usize) -> Option<String> {
    let slot = slot.to_string();
    let lookup = |name: &str| -> Option<&str> {
        if let Some(v) = job.variables.iter().rev().find(|v| v.key == name) {
            return Some(v.value.as_str());
        }
        match name {
            "CI_BUILDS_DIR" => Some(base),
            "CI_PROJECT_DIR" => Some(""),
            "CI_CONCURRENT_ID" | "CI_CONCURRENT_PROJECT_ID" => Some(slot.as_str()),
            _ => None,
        }
    };
    let variable = job
        .variables
        .iter()
        .rev()
        .find(|v| v.key == "GIT_CLONE_PATH")?;
    let value = if variable.raw {
        variable.value.clone()
    } else {
        flotilla_job::vars::expand(&variable.value, lookup)
    };
    (!value.is_empty()).then_some(value)
}

/// GitLab Runner's `getCustomBuildDir` for a non-empty `dir` under the checked `base`, and
/// flotilla's two refusals.
fn custom_dir(base: &str, dir: &str, enabled: bool) -> Result<String, String> {
    if !enabled {
        return Err(
            "setting GIT_CLONE_PATH is not allowed, enable `custom_build_dir` feature".into(),
        );
    }
    // Go's `filepath.Rel` of an absolute base and a relative path.
    if !dir.starts_with('/') {
        return Err(format!("Rel: can't make {dir} relative to {base}"));
    }
    let clean = clean_path(dir);
    let relative = if clean == base {
        ".".to_string()
    } else if base == "/" {
        clean[1..].to_string()
    } else if let Some(rest) = clean.strip_prefix(&format!("{base}/")) {
        rest.to_string()
    } else {
        "..".to_string()
    };
    // A string prefix, as GitLab tests it: `..foo` is refused too.
    if relative.starts_with("..") {
        return Err(format!(
            "the GIT_CLONE_PATH={dir:?} has to be within {base:?}"
        ));
    }
    if relative == "." || relative == ".flotilla" || relative.starts_with(".flotilla/") {
        return Err(format!(
            "the GIT_CLONE_PATH={dir:?} would hold every slot's files: flotilla keeps them in \
             {base:?} and its .flotilla directory; name a directory below {base:?}"
        ));
    }
    Ok(clean)
}

/// Go's `path.Clean` of an absolute path: one slash between components, `.` dropped, `..`
/// taking the previous component away (never above `/`), no trailing slash.
fn clean_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
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
        let a = BuildLayout::new("/builds", 0, &j, false).unwrap();
        let b = BuildLayout::new("/builds/", 1, &j, false).unwrap();
        assert_eq!(a.slot_dir, "/builds/0");
        assert_eq!(a.paths.project_dir, "/builds/0/group/project");
        assert_eq!(a.paths.tmp_dir, "/builds/0/group/project.tmp");
        assert_eq!(a.paths.builds_dir, "/builds");
        assert_eq!(b.paths.project_dir, "/builds/1/group/project");
        assert_eq!(
            BuildLayout::new("/", 3, &j, false)
                .unwrap()
                .paths
                .project_dir,
            "/3/group/project"
        );
        assert_eq!(a.stage_record, "/builds/.flotilla/0.stages");
        assert_eq!(b.stage_record, "/builds/.flotilla/1.stages");
        assert_eq!(
            BuildLayout::new("/", 3, &j, false).unwrap().stage_record,
            "/.flotilla/3.stages"
        );
        assert_eq!(stage_records_dir("/builds/").unwrap(), "/builds/.flotilla");
        assert!(stage_records_dir("builds").is_err());
        assert!(stage_records_dir("/a/../b").is_err());
        assert!(BuildLayout::new("builds", 0, &j, false).is_err());
        assert!(BuildLayout::new("/x/../y", 0, &j, false).is_err());
    }

    fn cloned_to(value: &str, enabled: bool) -> Result<String, LayoutError> {
        use flotilla_job::Variable;
        let mut j = job("group/project");
        j.variables
            .push(Variable::new("CI_PROJECT_PATH", "group/project"));
        j.variables.push(Variable::new("GIT_CLONE_PATH", value));
        BuildLayout::new("/builds", 2, &j, enabled).map(|l| {
            assert_eq!(l.paths.tmp_dir, format!("{}.tmp", l.paths.project_dir));
            assert_eq!(l.paths.builds_dir, "/builds");
            l.paths.project_dir
        })
    }

    /// GitLab Runner's `TestStartBuild` cases (`common/build_test.go`) and its rules.
    #[test]
    fn git_clone_path_as_gitlab_reads_it() {
        let refused = |e: Result<String, LayoutError>| match e {
            Err(LayoutError::Refused(m)) => m,
            other => panic!("not refused: {other:?}"),
        };
        assert_eq!(
            cloned_to("/builds/go/src/gitlab.com/test-namespace/test-repo", true).unwrap(),
            "/builds/go/src/gitlab.com/test-namespace/test-repo"
        );
        assert_eq!(
            cloned_to(
                "$CI_BUILDS_DIR/go/src/gitlab.com/test-namespace/test-repo",
                true
            )
            .unwrap(),
            "/builds/go/src/gitlab.com/test-namespace/test-repo"
        );
        assert_eq!(
            cloned_to("/builds/go/src/gitlab.com/test-namespace/test-repo//", true).unwrap(),
            "/builds/go/src/gitlab.com/test-namespace/test-repo"
        );
        assert_eq!(
            cloned_to("$CI_BUILDS_DIR/$CI_CONCURRENT_ID/$CI_PROJECT_PATH", true).unwrap(),
            "/builds/2/group/project"
        );
        assert_eq!(
            refused(cloned_to(
                "/builds/go/src/gitlab.com/test-namespace/test-repo",
                false
            )),
            "setting GIT_CLONE_PATH is not allowed, enable `custom_build_dir` feature"
        );
        assert_eq!(
            refused(cloned_to(
                "/go/src/gitlab.com/test-namespace/test-repo",
                true
            )),
            "the GIT_CLONE_PATH=\"/go/src/gitlab.com/test-namespace/test-repo\" has to be within \"/builds\""
        );
        assert_eq!(
            refused(cloned_to("/builds/../outside", true)),
            "the GIT_CLONE_PATH=\"/builds/../outside\" has to be within \"/builds\""
        );
        assert!(refused(cloned_to("/builds/..foo", true)).contains("has to be within"));
        assert_eq!(
            refused(cloned_to("foo", true)),
            "Rel: can't make foo relative to /builds"
        );
        for flotillas in ["/builds", "$CI_BUILDS_DIR/", "/builds/.flotilla/x"] {
            assert!(
                refused(cloned_to(flotillas, true)).contains("every slot's files"),
                "{flotillas}"
            );
        }
        // Empty after expansion: the default directory, allowed or not.
        assert_eq!(
            cloned_to("$CI_PROJECT_DIR", false).unwrap(),
            "/builds/2/group/project"
        );
        // A raw value is not expanded.
        let mut j = job("group/project");
        j.variables.push(flotilla_job::Variable {
            raw: true,
            ..flotilla_job::Variable::new("GIT_CLONE_PATH", "$CI_BUILDS_DIR/x")
        });
        assert!(matches!(
            BuildLayout::new("/builds", 0, &j, true),
            Err(LayoutError::Refused(_))
        ));
    }
}
