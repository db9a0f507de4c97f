//! The local connector: commands run as processes of this host.
//!
//! Each command runs as `bash -c <command>` (as a login shell runs a command line over SSH)
//! in a process group of its own, so cancelling it
//! kills everything it started (the group), not just the shell.
//!
//! A command's group dies with the flotilla process that started it, even by SIGKILL: a
//! watchdog process ([`flotilla_reaper`]) lists the groups of running commands and kills them
//! when flotilla is gone. Without a watchdog, each command gets the parent-death signal
//! instead (set in a `fork` of flotilla before `exec`: slower, and it stops only the shell).

use crate::pump::{PUMP_BUFFER, drain, feed_stdin};
use crate::{
    BoxedStream, ConnectError, Connector, ExecRequest, ExitStatus, ForwardTarget, Stdin, shell,
};
use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::task::{Context, Poll};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader, ReadBuf};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The variable a connector made with [`LocalConnector::with_clean_env`] sets to `1` in every
/// command's environment: it says the environment holds nothing but the kept variables, so a
/// command line that would clear it (`exec env -i ...`) may skip that (a process fewer).
pub const CLEAN_ENV_MARKER: &str = "FLOTILLA_CLEAN_ENV";

/// The variables a clean environment keeps from the one it starts in (those that are set):
/// enough for a shell and the programs it starts to find their way, nothing of the manager's
/// own configuration or credentials. [`LocalConnector::with_clean_env`] takes them, and
/// command lines that clear an environment themselves (`env -i`) keep the same ones.
pub const KEPT_ENV: [&str; 9] = [
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TZ", "TMPDIR",
];

/// Runs commands on this host.
#[derive(Debug, Clone)]
pub struct LocalConnector {
    shell: PathBuf,
    working_dir: Option<PathBuf>,
    /// `Some`: commands start with only these variables of this process's environment
    /// (those that are set), and [`CLEAN_ENV_MARKER`].
    clean_env: Option<Vec<String>>,
    /// Let the watchdog stop commands that outlive flotilla (else: parent-death signal).
    use_watchdog: bool,
    /// `shell` found on this process's `PATH`, once.
    program: std::sync::OnceLock<PathBuf>,
}

impl Default for LocalConnector {
    fn default() -> Self {
        LocalConnector {
            shell: PathBuf::from("bash"),
            working_dir: None,
            clean_env: None,
            use_watchdog: true,
            program: std::sync::OnceLock::new(),
        }
    }
}

impl LocalConnector {
    /// A connector running commands with `bash -c` in the current directory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses another shell (it must accept `-c <command line>`).
    pub fn with_shell(mut self, shell: impl Into<PathBuf>) -> Self {
        self.shell = shell.into();
        self.program = std::sync::OnceLock::new();
        self
    }

    /// The shell as a path: a bare name is looked up once on this process's `PATH`, which is
    /// the one commands get (kept or inherited). Started by path, a command is spawned with
    /// `posix_spawn` (a `vfork`); by a bare name in a changed environment, the standard
    /// library must `fork` this whole process to search the new `PATH`, which cost a local
    /// job most of its kernel time (`exec_vs_gitlab_ci_local` bench).
    fn program(&self) -> &std::path::Path {
        self.program.get_or_init(|| find_on_path(&self.shell))
    }

    /// Runs commands in `dir`.
    pub fn with_working_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.working_dir = Some(dir.into());
        self
    }

    /// Starts every command with only the `keep` variables of this process's environment
    /// (those that are set) and [`CLEAN_ENV_MARKER`]`=1`, instead of all of it. Variables of
    /// an [`ExecRequest`] are added on top. `dial_stdio` is not affected: the programs it
    /// starts (`docker system dial-stdio`) need this process's environment.
    pub fn with_clean_env(mut self, keep: &[&str]) -> Self {
        self.clean_env = Some(keep.iter().map(|k| k.to_string()).collect());
        self
    }

    /// Gives every command the parent-death signal (set in a `fork` of this process) instead
    /// of listing it with the watchdog: slower, for tests of the fallback.
    pub fn without_watchdog(mut self) -> Self {
        self.use_watchdog = false;
        self
    }

    /// The command running `line`, and whether the watchdog is to list it once spawned.
    /// `clean`: start it in the clean environment if the connector has one (commands;
    /// `dial_stdio` keeps this process's environment, where `DOCKER_HOST` and the like live).
    fn command(&self, line: &str, clean: bool) -> Result<(Command, bool), ConnectError> {
        let watched = self.use_watchdog && flotilla_reaper::available();
        let mut cmd = Command::new(self.program());
        cmd.arg("-c").arg(line);
        if let Some(keep) = self.clean_env.as_ref().filter(|_| clean) {
            cmd.env_clear();
            for k in keep {
                if let Some(v) = std::env::var_os(k) {
                    cmd.env(k, v);
                }
            }
            cmd.env(CLEAN_ENV_MARKER, "1");
        }
        if let Some(dir) = &self.working_dir {
            cmd.current_dir(dir);
        }
        // A group of its own: cancellation kills the whole tree, and a terminal's Ctrl-C
        // aimed at flotilla does not reach the job.
        cmd.process_group(0);
        cmd.kill_on_drop(true);
        // If flotilla dies (even by SIGKILL), its local jobs die with it instead of running on
        // as orphans that nobody will report or clean up.
        if !watched {
            // SAFETY: prctl is async-signal-safe and touches only the child's own state.
            unsafe {
                cmd.pre_exec(|| {
                    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                        .map_err(std::io::Error::from)
                });
            }
        }
        Ok((cmd, watched))
    }
}

/// `name` found as an executable file in a directory of this process's `PATH`; a name with a
/// `/`, or one not found, as it is (spawning it then fails as it would have).
fn find_on_path(name: &std::path::Path) -> PathBuf {
    if name.components().count() != 1 || name.is_absolute() {
        return name.to_path_buf();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    find_in(std::env::split_paths(&path), name).unwrap_or_else(|| name.to_path_buf())
}

/// The first executable file named `name` in `dirs` (absolute ones only: a relative one would
/// be read against whatever the current directory is). The one rule for "is it installed"
/// where flotilla looks for a program on this host.
pub fn find_in(dirs: impl IntoIterator<Item = PathBuf>, name: &std::path::Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    dirs.into_iter()
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Kills a process group when dropped, unless disarmed; lists it with the watchdog while it
/// lives.
struct GroupKiller {
    pgid: Option<i32>,
    /// Listed with the watchdog while this lives (dropped after the kill in `drop`).
    _watched: Option<flotilla_reaper::Watched>,
}

impl GroupKiller {
    /// Takes charge of the group `pgid`, listing it with the watchdog if `watched`.
    fn new(pgid: Option<i32>, watched: bool) -> GroupKiller {
        let _watched = pgid
            .filter(|_| watched)
            .and_then(flotilla_reaper::Watched::new);
        GroupKiller { pgid, _watched }
    }

    fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            // ESRCH (already gone) is fine.
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
    }

    fn disarm(&mut self) {
        self.pgid = None;
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        self.kill();
    }
}

fn exit_status(s: std::process::ExitStatus) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => ExitStatus::Code(c),
        (None, Some(sig)) => ExitStatus::from_signal_number(sig, s.core_dumped()),
        (None, None) => ExitStatus::Code(-1),
    }
}

fn spawn_error(e: std::io::Error) -> ConnectError {
    ConnectError::io("spawning the process", e)
}

#[async_trait]
impl Connector for LocalConnector {
    fn is_this_process(&self) -> bool {
        true
    }

    async fn exec(&self, request: ExecRequest<'_>) -> Result<ExitStatus, ConnectError> {
        shell::check_env(&request.env)?;
        let ExecRequest {
            command,
            env,
            stdin,
            stdout,
            stderr,
            cancel,
        } = request;
        let (mut cmd, watched) = self.command(&command, true)?;
        cmd.envs(env)
            .stdin(match stdin {
                Stdin::Null => Stdio::null(),
                _ => Stdio::piped(),
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(spawn_error)?;
        let mut killer = GroupKiller::new(child.id().map(|p| p as i32), watched);
        let child_in = child.stdin.take();
        let mut child_out = child.stdout.take();
        let mut child_err = child.stderr.take();

        let work = async {
            // The pipe is dropped after feeding: that, not shutdown, is what closes it.
            let feed = async move {
                match child_in {
                    Some(mut w) => feed_stdin(stdin, &mut w).await,
                    None => Ok(()),
                }
            };
            let out = async {
                match child_out.as_mut() {
                    Some(r) => drain(r, stdout, "writing stdout").await.map(drop),
                    None => Ok(()),
                }
            };
            let err = async {
                match child_err.as_mut() {
                    Some(r) => drain(r, stderr, "writing stderr").await.map(drop),
                    None => Ok(()),
                }
            };
            tokio::try_join!(feed, out, err)?;
            child
                .wait()
                .await
                .map_err(|e| ConnectError::io("waiting for the process", e))
        };
        let outcome = tokio::select! {
            r = work => Some(r),
            () = cancel.cancelled() => None,
        };
        match outcome {
            Some(Ok(status)) => {
                // The shell is reaped; leave whatever it put in the background alone.
                killer.disarm();
                Ok(exit_status(status))
            }
            // A pump failed or the command was cancelled: stop the whole group.
            Some(Err(e)) => {
                killer.kill();
                Err(e)
            }
            None => {
                killer.kill();
                Err(ConnectError::Cancelled)
            }
        }
    }

    async fn dial_stdio(&self, command: &str) -> Result<BoxedStream, ConnectError> {
        let (mut cmd, watched) = self.command(command, false)?;
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(spawn_error)?;
        let killer = GroupKiller::new(child.id().map(|p| p as i32), watched);
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(ConnectError::io(
                "spawning the process",
                std::io::Error::other("no stdio pipes"),
            ));
        };
        if let Some(stderr) = child.stderr.take() {
            let command = command.to_string();
            tokio::spawn(async move {
                let mut lines = BufReader::with_capacity(PUMP_BUFFER, stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::debug!(%command, "dial-stdio stderr: {line}");
                }
            });
        }
        Ok(Box::new(ChildStream {
            stdin: Some(stdin),
            stdout,
            _child: child,
            _killer: killer,
        }))
    }

    async fn forward(&self, target: &ForwardTarget) -> Result<BoxedStream, ConnectError> {
        let net = |e: std::io::Error| ConnectError::Network {
            addr: target.to_string(),
            message: e.to_string(),
        };
        match target {
            ForwardTarget::Unix(path) => Ok(Box::new(
                tokio::net::UnixStream::connect(path).await.map_err(net)?,
            )),
            ForwardTarget::Tcp { host, port } => Ok(Box::new(
                tokio::net::TcpStream::connect((host.as_str(), *port))
                    .await
                    .map_err(net)?,
            )),
        }
    }
}

/// A child process's stdin and stdout as one stream; dropping it kills the process group.
struct ChildStream {
    /// `None` once shut down: dropping the pipe is what closes it.
    stdin: Option<ChildStdin>,
    stdout: ChildStdout,
    _child: Child,
    _killer: GroupKiller,
}

impl AsyncRead for ChildStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stdout).poll_read(cx, buf)
    }
}

impl AsyncWrite for ChildStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.stdin.as_mut() {
            Some(w) => Pin::new(w).poll_write(cx, buf),
            None => Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into())),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.stdin.as_mut() {
            Some(w) => Pin::new(w).poll_flush(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if let Some(w) = self.stdin.as_mut() {
            std::task::ready!(Pin::new(w).poll_flush(cx))?;
        }
        self.stdin = None;
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_shell_is_started_by_its_path_on_this_processs_path() {
        let sh = find_on_path(Path::new("sh"));
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
        // A path, or a name found nowhere, stays as it is.
        assert_eq!(find_on_path(Path::new("./x/sh")), Path::new("./x/sh"));
        assert_eq!(
            find_on_path(Path::new("no-such-shell-here")),
            Path::new("no-such-shell-here")
        );
        assert!(LocalConnector::new().program().is_absolute());
        assert_eq!(
            LocalConnector::new().with_shell("/bin/sh").program(),
            Path::new("/bin/sh")
        );
    }
}
