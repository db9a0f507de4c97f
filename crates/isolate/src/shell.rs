//! Shell isolation: a build directory per slot on the instance, every stage run by the
//! instance's shell over the connector.
//!
//! Both places ([`flotilla_job::Place::Build`] and [`flotilla_job::Place::Helper`]) are the
//! instance's shell. The project is checked out at `<builds_dir>/<slot>/<project path>`
//! ([`crate::layout`]), so concurrent jobs on one instance never share a directory. Cleaning up
//! removes the job's temporary directory (file variables) and, when the job asked with
//! `FF_ENABLE_JOB_CLEANUP`, its project directory; otherwise the checkout stays for the next
//! job's `fetch`.
//!
//! A slot is never shared, not even with what a dead manager's job left running: every stage
//! records its process group in the slot's stage record, and cleaning up after a job kills
//! every group recorded there ([`crate::remote::stomp_slot_command`]) in the same round trip
//! that removes its directories, as GitLab Runner's shell executor kills a job's process
//! group when it ends. Preparing a job repeats the stomp (one more round trip) unless this
//! process cleaned the slot up itself after its last job: a slot is only ever dirty after a
//! manager died or a cleanup failed. With
//! [`ShellIsolation::with_builds_dir`], [`Isolation::cleanup_instance`] also stops, on an
//! instance met for the first time, the stages of every slot that another manager process
//! recorded.

use crate::layout::{BuildLayout, cleanup_requested, stage_records_dir};
use crate::{IsolateError, IsolatedEnvironment, Isolation, PrepareRequest, remote};
use async_trait::async_trait;
use flotilla_connect::shell::quote;
use flotilla_connect::{Connector, ConnectorExt};
use flotilla_job::script::{ANSI_RESET, ANSI_YELLOW};
use flotilla_job::{EnvError, EnvPaths, Environment, ExecSpec, ExitStatus};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// The `shell` isolation level.
#[derive(Debug, Clone, Default)]
pub struct ShellIsolation {
    /// Where the stage records of every slot are, for [`Isolation::cleanup_instance`].
    records_dir: Option<String>,
    /// Slots (`(instance, stage record)`) this process cleaned up after their last job,
    /// stomp included: their next job needs no stomp. Shared by clones.
    clean: Arc<Mutex<HashSet<(String, String)>>>,
}

impl ShellIsolation {
    /// The shell level.
    pub fn new() -> ShellIsolation {
        ShellIsolation::default()
    }

    /// Lets [`Isolation::cleanup_instance`] stop, in every slot of an instance under
    /// `builds_dir` (the dispatcher's base builds directory), the stages that another manager
    /// process recorded: what jobs of a manager killed with `kill -9` left running. Without
    /// it only each slot's next job stops them. Fails for a builds directory that is not
    /// absolute.
    pub fn with_builds_dir(mut self, builds_dir: &str) -> Result<ShellIsolation, IsolateError> {
        self.records_dir =
            Some(stage_records_dir(builds_dir).map_err(IsolateError::Configuration)?);
        Ok(self)
    }
}

/// The number a stomp or sweep printed, or why it did not print one.
fn stopped_count(out: &flotilla_connect::Output) -> Result<usize, String> {
    if !out.status.success() {
        return Err(format!(
            "it failed with {}: {}",
            out.status,
            out.stderr_str().trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| format!("it printed {:?} instead of a count", text.trim()))
}

/// What a job asks for that shell isolation does not provide (warned about, as GitLab's
/// shell executor ignores them).
fn ignored(req: &PrepareRequest<'_>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(image) = req.job.image.as_ref().filter(|i| !i.name.is_empty()) {
        out.push(format!(
            "the job's image {:?} is ignored: shell isolation runs the job on the instance itself",
            image.name
        ));
    }
    if !req.job.services.is_empty() {
        let names: Vec<&str> = req.job.services.iter().map(|s| s.name.as_str()).collect();
        out.push(format!(
            "services are not started by shell isolation: {}",
            names.join(", ")
        ));
    }
    out
}

#[async_trait]
impl Isolation for ShellIsolation {
    fn name(&self) -> &'static str {
        "shell"
    }

    async fn prepare(
        &self,
        req: PrepareRequest<'_>,
    ) -> Result<Box<dyn IsolatedEnvironment>, IsolateError> {
        let layout = BuildLayout::new(&req.builds_dir, req.slot, req.job)
            .map_err(IsolateError::Configuration)?;
        Ok(Box::new(ShellEnvironment {
            connector: req.connector.clone(),
            instance: req.instance_id.to_string(),
            slot: req.slot,
            remove_project: cleanup_requested(req.job),
            warnings: ignored(&req),
            layout,
            clean: self.clean.clone(),
            interrupted: AtomicBool::new(false),
        }))
    }

    async fn cleanup_instance(
        &self,
        connector: Arc<dyn Connector>,
        instance_id: &str,
    ) -> Result<usize, IsolateError> {
        let Some(dir) = &self.records_dir else {
            return Ok(0);
        };
        let line = remote::sweep_command(dir, remote::process_owner());
        let out = connector
            .output(&remote::helper_command(&line))
            .await
            .map_err(|source| IsolateError::Connect {
                instance: instance_id.to_string(),
                source,
            })?;
        stopped_count(&out).map_err(|m| IsolateError::Cleanup {
            instance: instance_id.to_string(),
            message: format!("stopping the stages other managers left: {m}"),
        })
    }
}

/// One job's environment under shell isolation.
#[derive(Debug)]
pub struct ShellEnvironment {
    connector: Arc<dyn Connector>,
    instance: String,
    slot: usize,
    layout: BuildLayout,
    remove_project: bool,
    warnings: Vec<String>,
    clean: Arc<Mutex<HashSet<(String, String)>>>,
    /// A stage ended without its exit status (cancelled, connection lost): it may still be
    /// starting on the instance, after the cleanup's stomp, so the slot is not called clean.
    interrupted: AtomicBool,
}

impl ShellEnvironment {
    /// The slot's directory on the instance.
    pub fn slot_dir(&self) -> &str {
        &self.layout.slot_dir
    }
}

#[async_trait]
impl Environment for ShellEnvironment {
    fn paths(&self) -> &EnvPaths {
        &self.layout.paths
    }

    async fn prepare(
        &self,
        log: &mut (dyn AsyncWrite + Send + Unpin),
        _cancel: CancellationToken,
    ) -> Result<(), EnvError> {
        let mut text = format!(
            "Using shell isolation on instance {} in {}\n",
            self.instance, self.layout.slot_dir
        );
        for w in &self.warnings {
            text.push_str(&format!("{ANSI_YELLOW}WARNING: {w}{ANSI_RESET}\n"));
        }
        // Whatever an earlier job left running in this slot stops before this one starts:
        // already done if this process cleaned the slot up after its last job.
        let key = (self.instance.clone(), self.layout.stage_record.clone());
        let cleaned = self
            .clean
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        if cleaned {
            return write_log(log, &text).await;
        }
        let what = "stopping what an earlier job left running in the slot";
        let out = self
            .connector
            .output(&remote::helper_command(&remote::stomp_slot_command(
                &self.layout.stage_record,
            )))
            .await
            .map_err(|e| remote::env_error(what, e))?;
        let stopped = stopped_count(&out).map_err(|m| EnvError::System(format!("{what}: {m}")))?;
        if stopped > 0 {
            tracing::warn!(instance = %self.instance, slot = self.slot, groups = stopped, "stopped processes an earlier job left running in the slot");
            text.push_str(&format!(
                "{ANSI_YELLOW}WARNING: stopped {stopped} process group(s) an earlier job left running in this slot{ANSI_RESET}\n"
            ));
        }
        write_log(log, &text).await
    }

    async fn exec(&self, spec: ExecSpec<'_>) -> Result<ExitStatus, EnvError> {
        // Every process of the job is recorded, so the slot's next job can stop it.
        let record = &self.layout.stage_record;
        let owner = remote::process_owner();
        let result = remote::run_with(
            &*self.connector,
            "running on the instance",
            spec,
            &remote::recorded(&remote::script_command(), record, owner),
            |line| remote::recorded(&remote::helper_command(line), record, owner),
        )
        .await;
        if result.is_err() {
            self.interrupted.store(true, Ordering::Relaxed);
        }
        result
    }
}

#[async_trait]
impl IsolatedEnvironment for ShellEnvironment {
    async fn cleanup(&self) -> Result<(), IsolateError> {
        // One round trip: stop what the job left running, then remove its directories.
        // `rm` only for what is there (the job's own cleanup usually removed its temporary
        // directory already): a process less per job.
        let mut line = remote::stomp_slot_command(&self.layout.stage_record);
        let mut remove = vec![&self.layout.paths.tmp_dir];
        if self.remove_project {
            remove.push(&self.layout.paths.project_dir);
        }
        for dir in remove {
            let dir = quote(dir);
            line.push_str(&format!("[ ! -e {dir} ] || rm -rf {dir} || exit 1\n"));
        }
        let out = self
            .connector
            .output(&remote::helper_command(&line))
            .await
            .map_err(|source| IsolateError::Connect {
                instance: self.instance.clone(),
                source,
            })?;
        if out.status.success() {
            match stopped_count(&out) {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(instance = %self.instance, slot = self.slot, groups = n, "stopped processes the job left running in its slot");
                }
                Err(m) => {
                    return Err(IsolateError::Cleanup {
                        instance: self.instance.clone(),
                        message: format!("stopping what the job left running: {m}"),
                    });
                }
            }
            if !self.interrupted.load(Ordering::Relaxed) {
                self.clean
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert((self.instance.clone(), self.layout.stage_record.clone()));
            }
            Ok(())
        } else {
            Err(IsolateError::Cleanup {
                instance: self.instance.clone(),
                message: format!(
                    "removing the job's directories failed with {}: {}",
                    out.status,
                    out.stderr_str().trim()
                ),
            })
        }
    }
}

/// Writes `text` to a job's log.
async fn write_log(log: &mut (dyn AsyncWrite + Send + Unpin), text: &str) -> Result<(), EnvError> {
    log.write_all(text.as_bytes())
        .await
        .map_err(|source| EnvError::Io {
            context: "writing to the job log".into(),
            source,
        })
}
