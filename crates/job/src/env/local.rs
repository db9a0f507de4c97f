//! `LocalEnvironment`: stages run by a shell on this host, in a given directory. Both places
//! are the same here. Used by tests and by the local path of `flotilla exec`.

use super::{EnvError, EnvPaths, Environment, ExecCommand, ExecSpec, ExitStatus};
use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::process::Command;

/// Environment variables of the manager that a local job inherits; everything else (the
/// manager's own tokens, for instance) is withheld.
const INHERITED: [&str; 9] = [
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TZ", "TMPDIR",
];

/// Runs stages with a local shell (bash by default) in its own process group.
#[derive(Debug, Clone)]
pub struct LocalEnvironment {
    paths: EnvPaths,
    shell: Vec<String>,
    kill_grace: Duration,
    extra_env: Vec<(String, String)>,
    files_here: bool,
}

impl LocalEnvironment {
    /// An environment whose builds directory and project directory are these local paths;
    /// the per-job temporary directory is `<project_dir>.tmp`.
    pub fn new(builds_dir: impl AsRef<Path>, project_dir: impl AsRef<Path>) -> LocalEnvironment {
        LocalEnvironment {
            paths: EnvPaths::new(
                builds_dir.as_ref().to_string_lossy(),
                project_dir.as_ref().to_string_lossy(),
            ),
            shell: vec!["bash".into()],
            kill_grace: Duration::from_secs(5),
            extra_env: Vec::new(),
            files_here: false,
        }
    }

    /// Uses another shell for stage scripts (argv; the script arrives on stdin), e.g.
    /// `["busybox", "sh"]`.
    pub fn with_shell(mut self, argv: Vec<String>) -> LocalEnvironment {
        if !argv.is_empty() {
            self.shell = argv;
        }
        self
    }

    /// Whether the helper stages' file work is done in this process
    /// ([`Environment::helper_files_here`]) instead of by commands (the default).
    pub fn with_helper_files_here(mut self, here: bool) -> LocalEnvironment {
        self.files_here = here;
        self
    }

    /// How long a canceled process gets between SIGTERM and SIGKILL (default 5 s).
    pub fn with_kill_grace(mut self, grace: Duration) -> LocalEnvironment {
        self.kill_grace = grace;
        self
    }

    /// Sets an environment variable for every process (e.g. `PATH`, to stand in for a
    /// minimal instance). The manager's own environment is otherwise not passed on, apart
    /// from `PATH`, `HOME`, `USER`, `LOGNAME`, `SHELL`, `LANG`, `LC_ALL`, `TZ` and `TMPDIR`.
    pub fn with_env(
        mut self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> LocalEnvironment {
        self.extra_env.push((key.into(), value.into()));
        self
    }

    fn command(&self, what: &ExecCommand) -> Command {
        let mut cmd = match what {
            ExecCommand::Script(_) => {
                let mut c = Command::new(&self.shell[0]);
                c.args(&self.shell[1..]);
                c
            }
            ExecCommand::Command(line) => {
                let mut c = Command::new("sh");
                c.arg("-c").arg(line);
                c
            }
        };
        cmd.env_clear();
        for key in INHERITED {
            if let Some(v) = std::env::var_os(key) {
                cmd.env(key, v);
            }
        }
        for (k, v) in &self.extra_env {
            cmd.env(k, v);
        }
        let builds = Path::new(&self.paths.builds_dir);
        cmd.current_dir(if builds.is_dir() {
            builds
        } else {
            Path::new("/")
        });
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        cmd
    }
}

fn signal_group(pgid: Option<Pid>, sig: Signal) {
    if let Some(pgid) = pgid {
        // ESRCH (nothing left in the group) is the normal case after an exit.
        let _ = killpg(pgid, sig);
    }
}

/// Copies a child's output to `to` until the child closes it. If `to` fails, the output is
/// still read and discarded, so the child never blocks on a full pipe.
async fn pump(mut from: impl AsyncRead + Unpin, to: &mut (dyn AsyncWrite + Send + Unpin)) {
    let mut buf = vec![0u8; 32 * 1024];
    let mut broken = false;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if !broken && to.write_all(&buf[..n]).await.is_err() {
            broken = true;
        }
    }
    if !broken {
        let _ = to.flush().await;
        let _ = to.shutdown().await;
    }
}

#[async_trait]
impl Environment for LocalEnvironment {
    fn paths(&self) -> &EnvPaths {
        &self.paths
    }

    fn helper_files_here(&self) -> bool {
        self.files_here
    }

    async fn exec(&self, spec: ExecSpec<'_>) -> Result<ExitStatus, EnvError> {
        let ExecSpec {
            command,
            stdin,
            mut stdout,
            mut stderr,
            cancel,
            ..
        } = spec;
        let mut child = self
            .command(&command)
            .spawn()
            .map_err(|source| EnvError::Io {
                context: format!("starting {}", self.shell[0]),
                source,
            })?;
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw);
        let child_stdin = child.stdin.take();
        let child_stdout = child.stdout.take();
        let child_stderr = child.stderr.take();

        let feed = async move {
            let Some(mut to) = child_stdin else { return };
            // A shell that exits before reading everything closes the pipe: not an error.
            match (&command, stdin) {
                (ExecCommand::Script(script), _) => {
                    let _ = to.write_all(script.as_bytes()).await;
                }
                (ExecCommand::Command(_), Some(mut from)) => {
                    let _ = tokio::io::copy(&mut from, &mut to).await;
                }
                (ExecCommand::Command(_), None) => {}
            }
            let _ = to.shutdown().await;
        };
        let out = async {
            if let Some(s) = child_stdout {
                pump(s, stdout.as_mut()).await;
            }
        };
        let err = async {
            if let Some(s) = child_stderr {
                pump(s, stderr.as_mut()).await;
            }
        };
        let grace = self.kill_grace;
        let wait = async {
            let mut canceled = false;
            let status = tokio::select! {
                s = child.wait() => s,
                () = cancel.cancelled() => {
                    canceled = true;
                    signal_group(pgid, Signal::SIGTERM);
                    match tokio::time::timeout(grace, child.wait()).await {
                        Ok(s) => s,
                        Err(_) => {
                            signal_group(pgid, Signal::SIGKILL);
                            child.wait().await
                        }
                    }
                }
            };
            // Whatever the script left running would hold the output pipes open.
            signal_group(pgid, Signal::SIGKILL);
            (status, canceled)
        };
        let ((status, canceled), (), (), ()) = tokio::join!(wait, feed, out, err);
        let status = status.map_err(|source| EnvError::Io {
            context: "waiting for the stage's shell".into(),
            source,
        })?;
        if canceled {
            return Err(EnvError::Canceled);
        }
        Ok(match (status.code(), status.signal()) {
            (Some(c), _) => ExitStatus::Code(c),
            (None, Some(s)) => ExitStatus::from_signal_number(s, status.core_dumped()),
            (None, None) => ExitStatus::Code(-1),
        })
    }
}
