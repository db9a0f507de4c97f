//! `flotilla run`: take jobs from GitLab for every configured runner and run each on a slot
//! of that runner's fleet, with state in the durable store.
//!
//! The daemon is a manager that owns every task it starts in one [`TaskTracker`]: the signal
//! handler and one task per runner ([`runner`]), each of which owns its own helpers (lease
//! renewal, the scaler-decision recorder). Stopping is one ordered sequence driven by two
//! [`CancellationToken`]s:
//!
//! - SIGTERM or SIGINT fires `stop`: every runner stops taking jobs and gives running ones up
//!   to `shutdown_timeout`, then shuts its fleet down and releases its lease;
//! - a second signal, or SIGQUIT, fires `force`: running jobs are aborted and reported
//!   (`runner_interrupted`), then the same shutdown follows;
//! - a runner that cannot start (its fleet is held by another manager, its configuration
//!   cannot work) fires `stop` for all, and the exit status is a failure. GitLab refusing or
//!   not answering is not such a failure: the runner keeps trying ([`verify`]).
//!
//! With `listen_address` set, the manager also serves `/metrics`, `/debug/health` and the
//! status page ([`monitor`]): the listener and the monitor's follower are tasks of the same
//! tracker, ended after every runner.
//!
//! No task is aborted: each ends when its token says so and is awaited.

mod disk;
mod monitor;
mod orphans;
mod runner;
#[cfg(feature = "kubernetes")]
mod sizing;
mod store_hooks;
mod verify;

use crate::cli::RunArgs;
use crate::config::Config;
use anyhow::{Context, Result, anyhow, bail};
use flotilla_store::{LeaseHolder, Store, StoreError, StoreOptions};
use runner::{Ended, Shared};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Runs `flotilla run`.
pub fn run(args: &RunArgs, err: &mut dyn Write) -> ExitCode {
    let Some(path) = crate::cli::config_path(args.config.as_deref(), err) else {
        return ExitCode::from(2);
    };
    let Some(config) = crate::cli::load_config(&path, err) else {
        return ExitCode::from(2);
    };
    // Before GitLab is asked anything: a provider this build lacks is a configuration error.
    if !crate::cli::providers_available(&config, err) {
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(err, "error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(daemon(config, args.rebuild_state)) {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(err, "error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn open_store(state_dir: &Path, rebuild: bool) -> Result<Store> {
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("creating the state directory {}", state_dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(state_dir, std::fs::Permissions::from_mode(0o700));
    }
    let options = StoreOptions {
        mode: if rebuild {
            flotilla_store::OpenMode::Rebuild
        } else {
            flotilla_store::OpenMode::Refuse
        },
        ..StoreOptions::default()
    };
    let path = state_dir.join("flotilla.db");
    match Store::open(&path, options) {
        Ok(s) => {
            if let Some(aside) = s.moved_aside() {
                tracing::warn!(moved = %aside.display(), "the unusable state file was moved aside; state is rebuilt from the providers' listings");
            }
            Ok(s)
        }
        Err(
            e @ (StoreError::NotOurs { .. }
            | StoreError::Corrupt { .. }
            | StoreError::TooNew { .. }),
        ) => Err(anyhow!(e)).context(
            "refusing to start; the file was left untouched (start with --rebuild-state to \
                 move it aside and rebuild state from the instance groups)",
        ),
        Err(e) => Err(anyhow!(e)),
    }
}

/// How long a forced stop may take before the process exits anyway: aborting the running
/// jobs and reporting them can wait on a GitLab that does not answer, and an operator who
/// signalled twice wants the process gone.
const FORCED_STOP_GRACE: Duration = Duration::from_secs(10);

/// Ends the process after `grace` unless it ended by itself. Every job's record is durable
/// in the store from before it started, so what is not reported by then is reported at the
/// next start, exactly as after `kill -9`. A thread of its own, so that no stuck task of the
/// runtime can hold it.
fn exit_after(grace: Duration) {
    let spawned = std::thread::Builder::new()
        .name("forced-stop".into())
        .spawn(move || {
            std::thread::sleep(grace);
            tracing::error!(
                grace = ?grace,
                "the forced stop did not finish in time (GitLab may not be answering); exiting \
                 now. Jobs not yet reported are kept in the store and reported at the next start"
            );
            std::process::exit(FORCED_EXIT_CODE);
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the forced-stop timer");
    }
}

/// The exit status of a forced stop that ran out of time.
const FORCED_EXIT_CODE: i32 = 3;

/// The signal handler: the first SIGTERM or SIGINT fires `stop`, a second one (or SIGQUIT)
/// fires `force`. Ends when `done` fires.
async fn handle_signals(
    stop: CancellationToken,
    force: CancellationToken,
    done: CancellationToken,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut quit)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::quit()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    loop {
        let quit_now = tokio::select! {
            () = done.cancelled() => return,
            _ = term.recv() => false,
            _ = int.recv() => false,
            _ = quit.recv() => true,
        };
        if quit_now || stop.is_cancelled() {
            tracing::warn!("stopping now: running jobs are aborted and reported as interrupted");
            stop.cancel();
            if !force.is_cancelled() {
                force.cancel();
                exit_after(FORCED_STOP_GRACE);
            }
        } else {
            tracing::info!(
                "stopping: no new jobs; waiting for running ones (signal again to stop at once)"
            );
            stop.cancel();
        }
    }
}

async fn daemon(config: Config, rebuild: bool) -> Result<ExitCode> {
    let state_dir = config
        .flotilla
        .state_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(".flotilla"));
    let store = open_store(&state_dir, rebuild)?;
    let system_id = flotilla_gitlab::system_id(&state_dir)
        .with_context(|| format!("system id in {}", state_dir.display()))?;
    let runners: Vec<_> = config
        .runners
        .iter()
        .filter(|r| {
            // Every executor but `flotilla` needs a url and token (config check refuses it
            // without); a `flotilla` runner with them takes GitLab's jobs too.
            let gitlab = r.gitlab_credentials().is_some();
            if !gitlab {
                tracing::info!(runner = %r.name, "no url and token: serves `flotilla exec` only; skipped by `run`");
            }
            gitlab
        })
        .cloned()
        .collect();
    if runners.is_empty() {
        bail!("no runner to run: configure a [[runners]] entry with url and token");
    }
    let tasks = TaskTracker::new();
    // Bound before anything starts: a listen_address that cannot be used stops the manager.
    let served = monitor::serve(&config, &tasks).await?;
    let mut handles = Vec::with_capacity(runners.len());
    for runner in &runners {
        handles.push(match &served {
            Some(s) => Some(s.monitor.add_runner(&monitor::spec(runner, &system_id))?),
            None => None,
        });
    }
    let concurrent = Arc::new(Semaphore::new(config.concurrent.max(1) as usize));
    let stop = CancellationToken::new();
    let force = CancellationToken::new();
    let disk = Arc::new(disk::DiskGate::new(state_dir.clone()));
    let shared = Arc::new(Shared {
        config,
        store,
        state_dir,
        system_id,
        holder: LeaseHolder::this_process(),
        concurrent,
        stop: stop.clone(),
        force: force.clone(),
        disk,
    });

    let signals_done = CancellationToken::new();
    tasks.spawn(handle_signals(
        stop.clone(),
        force.clone(),
        signals_done.clone(),
    ));
    let mut runner_tasks = Vec::new();
    for (runner, handle) in runners.into_iter().zip(handles) {
        let name = runner.name.clone();
        let shared = shared.clone();
        let stop = stop.clone();
        runner_tasks.push((
            name,
            tasks.spawn(async move {
                let ended = runner::run_runner(shared, runner, handle.clone()).await;
                if let (Err(e), Some(h)) = (&ended, &handle) {
                    h.failed(&format!("{e:#}"));
                }
                if ended.is_err() {
                    // One runner that cannot start stops the others: the manager exits.
                    stop.cancel();
                }
                ended
            }),
        ));
    }
    let mut failed = None;
    for (name, task) in runner_tasks {
        match task.await {
            Ok(Ok(Ended::Stopped { report, lost_lease })) => {
                tracing::info!(runner = %name, ?report, lost_lease, "runner stopped");
                if lost_lease {
                    failed.get_or_insert(anyhow!("runner {name:?} lost its lease on the fleet"));
                }
            }
            Ok(Ok(Ended::NeverStarted)) => {
                tracing::warn!(runner = %name, "runner stopped before GitLab verified it");
            }
            Ok(Err(e)) => {
                tracing::error!(runner = %name, error = %format!("{e:#}"), "runner could not start");
                failed.get_or_insert(e);
            }
            Err(e) => {
                tracing::error!(runner = %name, error = %e, "a runner task failed");
                failed.get_or_insert(anyhow!("runner {name:?}: {e}"));
            }
        }
    }
    signals_done.cancel();
    if let Some(s) = &served {
        s.done.cancel();
    }
    tasks.close();
    tasks.wait().await;
    match failed {
        Some(e) => Err(e),
        None => Ok(ExitCode::SUCCESS),
    }
}
