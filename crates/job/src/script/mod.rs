//! Stage scripts: the POSIX shell programs flotilla generates for each stage and pipes to the
//! environment's shell (no script file is left behind).
//!
//! Every script is shaped as GitLab Runner's bash scripts are (see [`ScriptWriter`]); its body
//! starts the same way: every job variable exported with single-quote quoting, file variables
//! written to private files under the per-job temporary directory, then `GITLAB_ENV` exported
//! and the lines earlier commands appended to it exported too.

mod fetch_env;
mod sources;
mod writer;

pub use flotilla_shell::quote;
pub(crate) use sources::url_password;
pub use sources::{GitStrategy, SourcesPlan, SubmoduleStrategy, clone_url_remote};
pub use writer::{ANSI_BOLD_GREEN, ANSI_BOLD_RED, ANSI_RESET, ANSI_YELLOW, ScriptWriter};

use crate::model::JobPayload;
use crate::vars::JobVariables;

/// A job configuration the scripts cannot be generated for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    /// `GIT_STRATEGY` has a value other than clone, fetch, none or empty.
    #[error("unknown GIT_STRATEGY {0:?} (expected clone, fetch, none or empty)")]
    UnknownGitStrategy(String),
    /// `GIT_SUBMODULE_STRATEGY` has a value other than none, normal or recursive.
    #[error("unknown GIT_SUBMODULE_STRATEGY {0:?} (expected none, normal or recursive)")]
    UnknownSubmoduleStrategy(String),
    /// `GIT_DEPTH` is not a number.
    #[error("GIT_DEPTH {0:?} is not a non-negative number")]
    BadGitDepth(String),
}

/// The variable that names the job's dotenv file (GitLab Runner 16.4 and later).
pub const GITLAB_ENV: &str = "GITLAB_ENV";
/// The file's name in the job's temporary directory, as GitLab Runner names it
/// (`gitlabEnvFileName`, gitlab-runner `shells/abstract.go`).
const GITLAB_ENV_FILE: &str = "gitlab_runner_env";

/// Where `get_sources` fetches, as the job sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchPlace {
    /// In the job's own place (a host's shell): the job's hooks run in the same script and
    /// every variable reaches `git`, as on GitLab.
    WithTheJob,
    /// Outside the job's container or VM: the hooks run apart, in the job's place, and only
    /// the variables that tune a connection reach `git` (see [`fetch_env`]).
    Apart,
}

/// Where a script runs and with which variables.
#[derive(Debug, Clone, Copy)]
pub struct ScriptContext<'a> {
    /// The job's variables (already expanded).
    pub vars: &'a JobVariables,
    /// `CI_BUILDS_DIR` as the script sees it.
    pub builds_dir: &'a str,
    /// `CI_PROJECT_DIR` as the script sees it.
    pub project_dir: &'a str,
    /// Whether scripts run with a shell trace (`CI_DEBUG_TRACE`, unless the runner forbids
    /// it).
    pub debug_trace: bool,
}

impl ScriptContext<'_> {
    /// A writer with the variables exported and file variables written; invalid variable
    /// names (which no shell can export) are skipped. Then `GITLAB_ENV`, emptied when `first`
    /// (the job's first stage).
    fn writer(&self, first: bool) -> ScriptWriter {
        let mut w = ScriptWriter::new();
        let vars = self.vars;
        self.export_variables(&mut w, |v| v.has_valid_name());
        w.dotenv_file(
            GITLAB_ENV,
            vars.tmp_dir(),
            &vars.file_path(GITLAB_ENV_FILE),
            first,
        );
        w
    }

    /// The script for user commands (`step_script`, `after_script`, other steps): `cd` into
    /// the project directory, then each command echoed as `$ command` and run.
    pub fn user_script(&self, commands: &[String]) -> String {
        self.user_script_after(None, commands)
    }

    /// The `after_script` script: [`ScriptContext::user_script`] with GitLab's
    /// `Running after script...` notice before the commands (`writeAfterScript`).
    pub fn after_script(&self, commands: &[String]) -> String {
        self.user_script_after(Some("Running after script..."), commands)
    }

    fn user_script_after(&self, notice: Option<&str>, commands: &[String]) -> String {
        let mut w = self.writer(false);
        w.cd(self.project_dir);
        if let Some(n) = notice {
            w.notice(n);
        }
        if self.debug_trace {
            w.line("set -x");
        }
        for c in commands {
            w.command(c);
        }
        w.finish()
    }

    /// The `get_sources` script for this job (see [`SourcesPlan`]), fetching at `place`: with
    /// the job's `hooks:pre_get_sources_script` and `post_get_sources_script` in it when that
    /// is [`FetchPlace::WithTheJob`]; otherwise they run apart
    /// ([`Self::pre_get_sources_script`], [`Self::post_get_sources_script`]) and the script
    /// exports only what [`Self::fetch_writer`] lets through.
    pub fn get_sources_script(
        &self,
        job: &JobPayload,
        place: FetchPlace,
    ) -> Result<String, ScriptError> {
        let plan = SourcesPlan::new(job, self.vars)?;
        let with_hooks = place == FetchPlace::WithTheJob;
        let mut w = if with_hooks {
            self.writer(true)
        } else {
            self.fetch_writer()
        };
        plan.write(&mut w, job, self.builds_dir, self.project_dir, with_hooks);
        Ok(w.finish())
    }

    /// Exports the variables `keep` takes into `w`, file variables written to private files
    /// under the job's temporary directory (made only when there is one).
    fn export_variables(&self, w: &mut ScriptWriter, keep: impl Fn(&crate::Variable) -> bool) {
        let vars = self.vars;
        if vars.iter().any(|v| v.file && keep(v)) {
            w.private_dir(vars.tmp_dir());
        }
        for v in vars.iter().filter(|v| keep(v)) {
            if v.file {
                w.file_variable(&v.key, &vars.file_path(&v.key), &v.value);
            } else {
                w.export(&v.key, &v.value);
            }
        }
    }

    /// A writer for a fetch outside the job's container or VM: only the variables
    /// [`fetch_env`] passes are exported, git variables held back are named in a warning, and
    /// the job's `GITLAB_ENV` file is emptied (the job's first stage) but not read, since the
    /// job may write it.
    fn fetch_writer(&self) -> ScriptWriter {
        let mut w = ScriptWriter::new();
        let vars = self.vars;
        let passed =
            |v: &crate::Variable| v.has_valid_name() && fetch_env::passes(&v.key, &v.value);
        self.export_variables(&mut w, passed);
        let mut held: Vec<&str> = Vec::new();
        for v in vars
            .iter()
            .filter(|v| !passed(v) && fetch_env::worth_naming(&v.key))
        {
            if !held.contains(&v.key.as_str()) {
                held.push(&v.key);
            }
        }
        if !held.is_empty() {
            w.warning(&format!(
                "Not passed to git, which fetches outside the job container or VM: {}",
                held.join(", ")
            ));
        }
        w.fresh_dotenv_file(vars.tmp_dir(), &vars.file_path(GITLAB_ENV_FILE));
        w
    }

    /// `hooks:pre_get_sources_script` alone, in the builds directory. `None` when the job has
    /// no such hook.
    pub fn pre_get_sources_script(&self, job: &JobPayload) -> Option<String> {
        if job.hook(crate::model::HOOK_PRE_GET_SOURCES).is_empty() {
            return None;
        }
        let mut w = self.writer(false);
        let qbuilds = flotilla_shell::quote(self.builds_dir);
        w.line(&format!("[ -d {qbuilds} ] || mkdir -p {qbuilds}"));
        w.cd(self.builds_dir);
        sources::write_pre_hooks(&mut w, job);
        Some(w.finish())
    }

    /// `hooks:post_get_sources_script` alone, in the project directory: the second half of
    /// `get_sources` for a job whose sources come as an archive
    /// ([`crate::model::LocalSources`]), once the archive is extracted, or where the hooks run
    /// apart from the fetch. `None` when the job has no such hook.
    pub fn post_get_sources_script(&self, job: &JobPayload) -> Option<String> {
        if job.hook(crate::model::HOOK_POST_GET_SOURCES).is_empty() {
            return None;
        }
        let mut w = self.writer(false);
        w.cd(self.project_dir);
        sources::write_post_hooks(&mut w, job);
        Some(w.finish())
    }

    /// The `cleanup_file_variables` script: removes the per-job temporary directory.
    pub fn cleanup_script(&self) -> String {
        let mut w = ScriptWriter::new();
        // `rm` only when there is something to remove: a process less for most jobs.
        let tmp = quote(self.vars.tmp_dir());
        w.line(&format!("[ ! -e {tmp} ] || rm -rf {tmp}"));
        w.finish()
    }
}

/// The names of variables that cannot be exported (not `[A-Za-z_][A-Za-z0-9_]*`).
pub fn unexportable_names(vars: &JobVariables) -> Vec<String> {
    vars.iter()
        .filter(|v| !v.has_valid_name())
        .map(|v| v.key.clone())
        .collect()
}

#[cfg(test)]
mod tests;
