//! `flotilla debug SNAPSHOT`: a saved job's microVM started again, with a shell in it.
//!
//! The snapshot is one a job took with `FLOTILLA_SNAPSHOT` (typically `on_failure`) at the
//! `microvm` level of this host: the runner of `--config` (its `[runners.microvm]` says where
//! snapshots are), else the embedded default's. The VM is restored into a directory of its
//! own, so no slot and no job is disturbed, and thrown away when the shell ends: the snapshot
//! stays as it was, and can be debugged again.
//!
//! On a terminal the shell gets a terminal of its own in the VM (raw mode here, the window
//! size followed). Otherwise, or with a command after `--`, the command's (or the shell's)
//! input is this process's and its exit status becomes flotilla's: scripts can look into a
//! failed job too.

use crate::config::RunnerConfig;
use anyhow::{Context, Result, bail};
use clap::Args;
use flotilla_connect::local::LocalConnector;
use flotilla_connect::shell::{join, quote};
use flotilla_connect::{Connector, ExecRequest};
use flotilla_isolate::microvm::debug::DebugVm;
use flotilla_isolate::microvm::snapshot::Scope;
use flotilla_job::{CacheStore, LocalCacheStore};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Options of `flotilla debug`.
#[derive(Debug, Args)]
pub struct DebugArgs {
    /// The snapshot: its key (`FLOTILLA_SNAPSHOT_KEY`) or the name of the job that took it.
    pub snapshot: String,
    /// The configuration of the runner whose job took the snapshot (default: the embedded
    /// default of `flotilla exec`).
    #[arg(short, long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The runner of `--config` (default: its first).
    #[arg(long, value_name = "NAME")]
    pub runner: Option<String>,
    /// The GitLab project whose job took the snapshot (`group/project`): its copy in the
    /// runner's snapshot store is restored on this host, so a snapshot a fleet job took on
    /// any instance can be debugged here.
    #[arg(long, value_name = "PATH")]
    pub project: Option<String>,
    /// With `--project`: the snapshot was taken on a protected ref (protected and
    /// unprotected refs keep their snapshots apart).
    #[arg(long, requires = "project")]
    pub protected: bool,
    /// The snapshot store with `--project`. Default: the one `flotilla run` keeps for the
    /// runner of `--config`, `<state_dir>/snapshots/<runner>`; give `.flotilla/snapshots` of
    /// the project for snapshots `flotilla exec --config` took.
    #[arg(long, value_name = "DIR", requires = "project")]
    pub store: Option<PathBuf>,
    /// Run this command in the VM instead of a shell; flotilla exits with its status.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Runs `flotilla debug`.
pub fn run(args: &DebugArgs, err: &mut dyn Write) -> ExitCode {
    let Some((runner, run_store)) = runner(args, err) else {
        return ExitCode::from(2);
    };
    let store = args.store.clone().or(run_store);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = writeln!(err, "error: starting the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(debug(args, &runner, store, err));
    // A read of this process's input may still be blocked on a thread: do not wait for it.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(1)),
        Err(e) => {
            let _ = writeln!(err, "error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The runner named by the arguments, and where `flotilla run` keeps its cache store.
fn runner(args: &DebugArgs, err: &mut dyn Write) -> Option<(RunnerConfig, Option<PathBuf>)> {
    let Some(path) = &args.config else {
        // The microvm level is what `debug` is for: offered whatever the probe finds, so that
        // a missing piece is named when the job starts.
        let host = crate::fleet::embedded::HostLevels {
            microvm: Ok(()),
            ..crate::fleet::embedded::HostLevels::probe()
        };
        return Some((crate::fleet::embedded::runner(&host), None));
    };
    let config = crate::cli::load_config(path, err)?;
    let state_dir = config
        .flotilla
        .state_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(".flotilla"));
    let found = match &args.runner {
        Some(name) => config.runners.into_iter().find(|r| &r.name == name),
        None => config.runners.into_iter().next(),
    };
    let Some(found) = found else {
        let _ = writeln!(
            err,
            "error: {} has no runner {}",
            path.display(),
            args.runner
                .as_deref()
                .map_or("at all".to_string(), |n| format!("{n:?}"))
        );
        return None;
    };
    let store = crate::fleet::snapshot_store_dir(&state_dir, &found.name);
    Some((found, Some(store)))
}

async fn debug(
    args: &DebugArgs,
    runner: &RunnerConfig,
    store: Option<PathBuf>,
    err: &mut dyn Write,
) -> Result<i32> {
    let store: Option<Arc<dyn CacheStore>> = match (&args.project, store) {
        (Some(_), Some(dir)) => Some(Arc::new(LocalCacheStore::new(dir))),
        (Some(_), None) => {
            bail!("--project needs the runner's store: give --config, or --store")
        }
        (None, _) => None,
    };
    let scope = args.project.as_ref().map(|project| Scope {
        project: project.clone(),
        // The snapshot store is a directory, which keys by the project's path alone.
        project_id: 0,
        protected: args.protected,
    });
    // Per process: a runner's daemon or an exec run may use the same instance meanwhile.
    let mut level = crate::fleet::levels::microvm_level(runner, None, true)?;
    if let Some(store) = store {
        level = level.with_snapshot_store(store);
    }
    let host: Arc<dyn Connector> = Arc::new(LocalConnector::new());
    let vm = level
        .debug(host, "this host", &args.snapshot, scope.as_ref())
        .await
        .with_context(|| format!("restoring snapshot {:?}", args.snapshot))?;
    let _ = writeln!(
        err,
        "Restored snapshot {} (image {}) in {:.2} s, VM pid {}{}. What changes here is thrown \
         away when you leave; the snapshot stays.",
        args.snapshot,
        vm.image(),
        vm.took().as_secs_f64(),
        vm.pid(),
        vm.project_dir()
            .map(|d| format!("; the job's files are in {d}"))
            .unwrap_or_default()
    );
    let interactive = args.command.is_empty() && std::io::stdin().is_terminal();
    let result = tokio::select! {
        r = async {
            if interactive {
                shell_on_terminal(&vm).await
            } else {
                command(&vm, &args.command).await
            }
        } => r,
        _ = tokio::signal::ctrl_c() => Ok(130),
    };
    vm.close().await;
    result
}

/// `cd` into the job's project directory (when the snapshot names it), then `line`.
fn in_project(vm: &DebugVm, line: &str) -> String {
    match vm.project_dir() {
        Some(d) => format!("cd {} 2>/dev/null; {line}", quote(d)),
        None => line.to_string(),
    }
}

/// Runs `command` (a shell reading this process's input when empty) in the VM.
async fn command(vm: &DebugVm, command: &[String]) -> Result<i32> {
    let line = if command.is_empty() {
        "exec sh".to_string()
    } else {
        join(command)
    };
    let mut stdin = tokio::io::stdin();
    let mut stdout = tokio::io::stdout();
    let mut stderr = tokio::io::stderr();
    let mut req = ExecRequest::new(in_project(vm, &line)).stdin_reader(&mut stdin);
    req.stdout = Some(&mut stdout);
    req.stderr = Some(&mut stderr);
    let status = vm.guest().exec(req).await.context("running the command")?;
    Ok(exit_code(&status))
}

/// A login shell on a terminal of its own in the VM, this terminal in raw mode meanwhile.
async fn shell_on_terminal(vm: &DebugVm) -> Result<i32> {
    let (rows, cols) = terminal::size().unwrap_or((24, 80));
    let line = in_project(
        vm,
        "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi",
    );
    let term = vm
        .guest()
        .terminal(&line, &[("TERM".into(), term_name())], None, rows, cols)
        .await
        .context("opening a terminal in the VM")?;
    let _raw = terminal::RawMode::enter().context("putting the terminal in raw mode")?;
    let (mut from_vm, mut to_vm) = tokio::io::split(term.stream);
    let resize = term.resize;
    let follow_size = async move {
        let Ok(mut winch) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
        else {
            return std::future::pending().await;
        };
        while winch.recv().await.is_some() {
            if let Some(size) = terminal::size() {
                let _ = resize.send(size).await;
            }
        }
    };
    let keys = async move {
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 4096];
        loop {
            match stdin.read(&mut buf).await {
                Ok(0) | Err(_) => return std::future::pending::<()>().await,
                Ok(n) => {
                    if to_vm.write_all(&buf[..n]).await.is_err() {
                        return std::future::pending().await;
                    }
                }
            }
        }
    };
    let screen = async move {
        let mut stdout = tokio::io::stdout();
        let mut buf = [0u8; 16384];
        while let Ok(n) = from_vm.read(&mut buf).await {
            if n == 0 || stdout.write_all(&buf[..n]).await.is_err() {
                break;
            }
            let _ = stdout.flush().await;
        }
    };
    // The shell's end ends the session; its output is written out first.
    let status = tokio::select! {
        s = async {
            let ((), s) = tokio::join!(screen, term.status);
            s
        } => s,
        () = keys => bail!("the terminal's input ended"),
        () = follow_size => bail!("the window size stopped being followed"),
    };
    match status {
        Ok(s) => Ok(exit_code(&s)),
        Err(_) => bail!("the VM's agent went away before the shell ended"),
    }
}

/// A shell's number for how a command ended: its code, or 128 + the signal's number.
fn exit_code(status: &flotilla_fleet::ExitStatus) -> i32 {
    status.code().unwrap_or_else(|| {
        128 + status
            .signal()
            .and_then(flotilla_fleet::signal_number)
            .unwrap_or(1)
    })
}

fn term_name() -> String {
    std::env::var("TERM")
        .ok()
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "xterm".into())
}

/// This process's terminal: its size and raw mode.
mod terminal {
    use nix::sys::termios::{SetArg, Termios, cfmakeraw, tcgetattr, tcsetattr};

    /// The terminal's (rows, columns), from `TIOCGWINSZ` on stdout.
    pub(super) fn size() -> Option<(u16, u16)> {
        let mut ws = libc::winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCGWINSZ writes one `winsize` into the struct passed, which lives here.
        let r = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
        (r == 0 && ws.ws_row > 0 && ws.ws_col > 0).then_some((ws.ws_row, ws.ws_col))
    }

    /// Raw mode on stdin's terminal until dropped (the previous settings are put back).
    pub(super) struct RawMode {
        saved: Termios,
    }

    impl RawMode {
        /// Puts stdin's terminal in raw mode.
        pub(super) fn enter() -> nix::Result<RawMode> {
            let stdin = std::io::stdin();
            let saved = tcgetattr(&stdin)?;
            let mut raw = saved.clone();
            cfmakeraw(&mut raw);
            tcsetattr(&stdin, SetArg::TCSANOW, &raw)?;
            Ok(RawMode { saved })
        }
    }

    impl Drop for RawMode {
        fn drop(&mut self) {
            let _ = tcsetattr(std::io::stdin(), SetArg::TCSANOW, &self.saved);
        }
    }
}
