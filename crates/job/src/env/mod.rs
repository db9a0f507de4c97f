//! The `Environment` a job runs in: provided by an isolation level (a build directory over
//! SSH, containers on the instance's Docker daemon, a VM...), used by the job runner.
//!
//! The contract is small on purpose:
//! - [`Environment::exec`] runs either a stage **script** piped on stdin to the environment's
//!   shell, or a **command** line (`sh -c` syntax) with a stdin stream of its own (how
//!   artifacts and caches move: `tar` through stdin/stdout). Output is streamed to the given
//!   writers as produced; cancellation stops the process.
//! - [`Place`] says where: the job's **build** context (the job image's container for docker
//!   isolation) for `step_script` and `after_script`, the **helper** context (the instance's
//!   own shell) for everything else. Both see the same paths: docker isolation bind-mounts the
//!   builds directory at the same path.
//! - [`Environment::paths`] reports the builds directory, project directory and per-job
//!   temporary directory as scripts see them.

mod local;

pub use flotilla_fleet::ExitStatus;
pub use local::LocalEnvironment;

use async_trait::async_trait;
use std::fmt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

/// Where a stage runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Place {
    /// The job's build context: `step_script`, `after_script` (the job image for docker
    /// isolation).
    Build,
    /// The helper context, with git and tar: `get_sources`, caches, artifacts, cleanup. The
    /// instance's shell at most levels; a helper container of the job's at `docker`.
    Helper,
}

/// What to run. `Debug` shows sizes only: scripts carry variable values.
#[derive(Clone, PartialEq, Eq)]
pub enum ExecCommand {
    /// A stage script, piped on stdin to the environment's shell (bash when present, else a
    /// POSIX `sh`); the spec's `stdin` is not used.
    Script(String),
    /// A command line in POSIX `sh -c` syntax, whose stdin is the spec's `stdin` (empty when
    /// `None`).
    Command(String),
}

impl fmt::Debug for ExecCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecCommand::Script(s) => write!(f, "Script({} bytes)", s.len()),
            ExecCommand::Command(c) => write!(f, "Command({} bytes)", c.len()),
        }
    }
}

/// One process to run in the environment.
pub struct ExecSpec<'a> {
    /// Where to run it.
    pub place: Place,
    /// What to run.
    pub command: ExecCommand,
    /// Data for the command's stdin ([`ExecCommand::Command`] only).
    pub stdin: Option<Box<dyn AsyncRead + Send + Unpin + 'a>>,
    /// Receives stdout as it is produced.
    pub stdout: Box<dyn AsyncWrite + Send + Unpin + 'a>,
    /// Receives stderr as it is produced.
    pub stderr: Box<dyn AsyncWrite + Send + Unpin + 'a>,
    /// When cancelled, the environment stops the process and everything it started (a
    /// polite signal first, a kill after a short grace period of its choosing) and returns
    /// [`EnvError::Canceled`].
    pub cancel: CancellationToken,
}

impl fmt::Debug for ExecSpec<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecSpec")
            .field("place", &self.place)
            .field("command", &self.command)
            .field("stdin", &self.stdin.is_some())
            .finish_non_exhaustive()
    }
}

/// Paths as scripts in the environment see them (POSIX paths on the instance or in the
/// container, not on the manager).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvPaths {
    /// `CI_BUILDS_DIR`.
    pub builds_dir: String,
    /// `CI_PROJECT_DIR`: where the repository is checked out.
    pub project_dir: String,
    /// The per-job temporary directory (file variables, nothing else): next to the project
    /// directory, `<project_dir>.tmp` by convention.
    pub tmp_dir: String,
}

impl EnvPaths {
    /// Paths with the conventional temporary directory `<project_dir>.tmp`.
    pub fn new(builds_dir: impl Into<String>, project_dir: impl Into<String>) -> EnvPaths {
        let project_dir = project_dir.into();
        EnvPaths {
            builds_dir: builds_dir.into(),
            tmp_dir: format!("{}.tmp", project_dir.trim_end_matches('/')),
            project_dir,
        }
    }
}

/// An environment failure (not a script failure: a script that exits non-zero is an `Ok`
/// [`ExitStatus`]).
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// The process was stopped because the spec's cancel token fired.
    #[error("the process was canceled")]
    Canceled,
    /// Local I/O failed (spawning, pipes, connections).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The job's image or a service image could not be pulled (`image_pull_failure`).
    #[error("pulling image {image}: {message}")]
    ImagePull {
        /// The image.
        image: String,
        /// Why.
        message: String,
    },
    /// The job asks for something this environment cannot provide
    /// (`runner_configuration_error`).
    #[error("unsupported job configuration: {0}")]
    Configuration(String),
    /// Anything else that is the system's fault (`runner_system_failure`).
    #[error("{0}")]
    System(String),
}

/// Where and how a job runs. Implemented by the isolation levels; object-safe.
#[async_trait]
pub trait Environment: Send + Sync {
    /// The paths scripts see.
    fn paths(&self) -> &EnvPaths;

    /// Variables the environment gives the job on top of its own and the predefined ones
    /// (GitLab's `GITLAB_RUNNER_SLOT_CGROUP`, say). The default gives none.
    fn variables(&self) -> Vec<crate::Variable> {
        Vec::new()
    }

    /// Whether the environment is made for this job alone and thrown away after it (a
    /// container, a VM): `CI_DISPOSABLE_ENVIRONMENT`; else it is shared with other jobs (a
    /// host's shell): `CI_SHARED_ENVIRONMENT` (gitlab-runner `common/build.go`
    /// `GetSharedEnvVariable`, from each executor's `Shared` feature). The default is shared.
    fn disposable(&self) -> bool {
        false
    }

    /// Whether the helper place's files are this process's own, with its rights (the shell
    /// level on the manager's own host): the helper stages' file work (checking, extracting and
    /// collecting archives) is then done in this process, with the same checks, instead of by
    /// `find`, `tar` and `xargs` in the helper place. A local job starts a few processes fewer
    /// (the `exec_vs_gitlab_ci_local` bench). The default is no.
    fn helper_files_here(&self) -> bool {
        false
    }

    /// Gets the environment ready (pull images, start services...), writing progress lines to
    /// `log`. Runs inside the job's `prepare_executor` section. The default does nothing.
    async fn prepare(
        &self,
        log: &mut (dyn AsyncWrite + Send + Unpin),
        cancel: CancellationToken,
    ) -> Result<(), EnvError> {
        let _ = (log, cancel);
        Ok(())
    }

    /// Runs one process and waits for it to end.
    async fn exec(&self, spec: ExecSpec<'_>) -> Result<ExitStatus, EnvError>;
}
