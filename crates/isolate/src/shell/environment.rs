//! One job's environment under shell isolation: stages run by the instance's shell in the
//! slot's build directory, every process recorded in the slot's stage record.

use super::CleanSlots;
use super::cleanup::stopped_count;
use crate::command::{helper_command, script_command};
use crate::exec::{env_error, run_with};
use crate::layout::BuildLayout;
use crate::stage_record::{process_owner, recorded, stomp_slot_command};
use crate::{IsolateError, IsolatedEnvironment};
use async_trait::async_trait;
use flotilla_connect::shell::quote;
use flotilla_connect::{Connector, ConnectorExt};
use flotilla_job::script::{ANSI_RESET, ANSI_YELLOW};
use flotilla_job::{EnvError, EnvPaths, Environment, ExecSpec, ExitStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// One job's environment under shell isolation.
#[derive(Debug)]
pub struct ShellEnvironment {
    pub(super) connector: Arc<dyn Connector>,
    pub(super) instance: String,
    pub(super) slot: usize,
    pub(super) layout: BuildLayout,
    pub(super) remove_project: bool,
    pub(super) warnings: Vec<String>,
    pub(super) clean: CleanSlots,
    /// A stage ended without its exit status (cancelled, connection lost): it may still be
    /// starting on the instance, after the cleanup's stomp, so the slot is not called clean.
    pub(super) interrupted: AtomicBool,
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
            .output(&helper_command(&stomp_slot_command(
                &self.layout.stage_record,
            )))
            .await
            .map_err(|e| env_error(what, e))?;
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
        let owner = process_owner();
        let result = run_with(
            &*self.connector,
            "running on the instance",
            spec,
            &recorded(&script_command(), record, owner),
            |line| recorded(&helper_command(line), record, owner),
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
        let mut line = stomp_slot_command(&self.layout.stage_record);
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
            .output(&helper_command(&line))
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
