//! One job's environment on the instance itself: stages run by the instance's shell in the
//! slot's build directory. Unconfined (shell isolation), every process is recorded in the
//! slot's stage record; confined (the cgroup level), the confinement holds and limits them.

use super::cleanup::stopped_count;
use crate::command::{helper_command, script_command};
use crate::confinement::Confinement;
use crate::exec::{env_error, run_with};
use crate::layout::{BuildLayout, cleanup_requested};
use crate::stage_record::{process_owner, recorded, stomp_slot_command};
use crate::{IsolateError, IsolatedEnvironment, PrepareRequest};
use async_trait::async_trait;
use flotilla_connect::shell::quote;
use flotilla_connect::{Connector, ConnectorExt};
use flotilla_job::script::{ANSI_RESET, ANSI_YELLOW};
use flotilla_job::{EnvError, EnvPaths, Environment, ExecSpec, ExitStatus, Variable};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// The variable that tells a job its slot's cgroup (GitLab's instance executor).
pub const SLOT_CGROUP_VARIABLE: &str = "GITLAB_RUNNER_SLOT_CGROUP";

/// Slots (`(instance, stage record)`) a process cleaned up after their last job.
pub(crate) type CleanSlots = Arc<Mutex<HashSet<(String, String)>>>;

/// One job's environment running its stages on the instance itself.
#[derive(Debug)]
pub struct ShellEnvironment {
    connector: Arc<dyn Connector>,
    instance: String,
    slot: usize,
    layout: BuildLayout,
    remove_project: bool,
    warnings: Vec<String>,
    /// Unconfined: slots this process cleaned up (stage records and all).
    clean: CleanSlots,
    /// What holds the job's processes instead of the stage record, if anything.
    confinement: Option<Arc<dyn Confinement>>,
    /// The slot's cgroup path the job is told of (`GITLAB_RUNNER_SLOT_CGROUP`), if any.
    slot_cgroup: Option<String>,
    /// The level's name and what the job's log says of it, when another level runs its
    /// stages this way (`instance`).
    named: Option<(&'static str, &'static str)>,
    /// A stage ended without its exit status (cancelled, connection lost): it may still be
    /// starting on the instance, after the cleanup's stomp, so the slot is not called clean.
    interrupted: AtomicBool,
}

impl ShellEnvironment {
    /// Shell isolation's environment for `req`.
    pub(crate) fn unconfined(
        req: &PrepareRequest<'_>,
        layout: BuildLayout,
        clean: CleanSlots,
    ) -> ShellEnvironment {
        ShellEnvironment {
            connector: req.connector.clone(),
            instance: req.instance_id.to_string(),
            slot: req.slot,
            remove_project: cleanup_requested(req.job),
            warnings: ignored(req),
            layout,
            clean,
            confinement: None,
            slot_cgroup: None,
            named: None,
            interrupted: AtomicBool::new(false),
        }
    }

    /// The environment as another level's, which the job's log names with `note`.
    pub(crate) fn named(mut self, level: &'static str, note: &'static str) -> ShellEnvironment {
        self.named = Some((level, note));
        self
    }

    /// Tells the job its slot's cgroup path in `GITLAB_RUNNER_SLOT_CGROUP`, as GitLab's
    /// instance executor does with `use_slot_cgroups`.
    pub(crate) fn with_slot_cgroup(mut self, path: Option<String>) -> ShellEnvironment {
        self.slot_cgroup = path;
        self
    }

    /// The environment for `req` with its stages inside `confinement`.
    pub(crate) fn confined(
        req: &PrepareRequest<'_>,
        layout: BuildLayout,
        confinement: Arc<dyn Confinement>,
    ) -> ShellEnvironment {
        ShellEnvironment {
            confinement: Some(confinement),
            ..ShellEnvironment::unconfined(req, layout, CleanSlots::default())
        }
    }

    /// The slot's directory on the instance.
    pub fn slot_dir(&self) -> &str {
        &self.layout.slot_dir
    }

    /// The level's name, as the job's log shows it.
    fn level(&self) -> &'static str {
        match (&self.named, &self.confinement) {
            (Some((level, _)), _) => level,
            (None, Some(c)) => c.level(),
            (None, None) => "shell",
        }
    }
}

/// What a job asks for that shell isolation does not provide (warned about, as GitLab's
/// shell executor ignores them).
fn ignored(req: &PrepareRequest<'_>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(image) = req.job.image.as_ref().filter(|i| !i.name.is_empty()) {
        out.push(format!(
            "the job's image {:?} is ignored: the job runs on the instance itself",
            image.name
        ));
    }
    if !req.job.services.is_empty() {
        let names: Vec<&str> = req.job.services.iter().map(|s| s.name.as_str()).collect();
        out.push(format!(
            "services are not started at this isolation level: {}",
            names.join(", ")
        ));
    }
    out
}

#[async_trait]
impl Environment for ShellEnvironment {
    fn paths(&self) -> &EnvPaths {
        &self.layout.paths
    }

    fn helper_files_here(&self) -> bool {
        // Unconfined: the helper place is this host's shell with this process's rights.
        // Confined stages may run as another user or where this process cannot write.
        // Paths relative to the connector's working directory would be read against this
        // process's own: absolute ones only.
        self.confinement.is_none()
            && self.connector.is_this_process()
            && std::path::Path::new(&self.layout.paths.builds_dir).is_absolute()
    }

    fn variables(&self) -> Vec<Variable> {
        self.slot_cgroup
            .iter()
            .map(|p| Variable::new(SLOT_CGROUP_VARIABLE, p.clone()))
            .collect()
    }

    async fn prepare(
        &self,
        log: &mut (dyn AsyncWrite + Send + Unpin),
        _cancel: CancellationToken,
    ) -> Result<(), EnvError> {
        let mut text = format!(
            "Using {} isolation on instance {} in {}\n",
            self.level(),
            self.instance,
            self.layout.slot_dir
        );
        if let Some((_, note)) = self.named {
            text.push_str(&format!("{note}\n"));
        }
        for w in &self.warnings {
            text.push_str(&format!("{ANSI_YELLOW}WARNING: {w}{ANSI_RESET}\n"));
        }
        if let Some(confinement) = &self.confinement {
            // The confinement readies the slot, stopping what an earlier job left in it.
            for line in confinement.prepare(&*self.connector).await? {
                match line.strip_prefix("WARNING: ") {
                    Some(w) => text.push_str(&format!("{ANSI_YELLOW}WARNING: {w}{ANSI_RESET}\n")),
                    None => text.push_str(&format!("{line}\n")),
                }
            }
            return write_log(log, &text).await;
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
        let Some(confinement) = &self.confinement else {
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
            return result;
        };
        // The stage's output stays ours after it ends: a failure the confinement caused is
        // said where the job's output is.
        let ExecSpec {
            place,
            command,
            stdin,
            mut stdout,
            stderr,
            cancel,
        } = spec;
        let borrowed = ExecSpec {
            place,
            command,
            stdin,
            stdout: Box::new(&mut stdout),
            stderr,
            cancel,
        };
        let status = run_with(
            &*self.connector,
            "running on the instance",
            borrowed,
            &confinement.confine(&script_command()),
            |line| confinement.confine(&helper_command(line)),
        )
        .await?;
        if !status.success()
            && let Some(why) = confinement.explain_failure(&*self.connector).await
        {
            let _ = stdout
                .write_all(format!("\n{ANSI_YELLOW}{why}{ANSI_RESET}\n").as_bytes())
                .await;
        }
        Ok(status)
    }
}

#[async_trait]
impl IsolatedEnvironment for ShellEnvironment {
    async fn cleanup(&self) -> Result<(), IsolateError> {
        // One round trip: stop what the job left running, then remove its directories.
        // `rm` only for what is there (the job's own cleanup usually removed its temporary
        // directory already): a process less per job.
        let mut line = match &self.confinement {
            Some(c) => c.release_command(),
            None => stomp_slot_command(&self.layout.stage_record),
        };
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
            if self.confinement.is_none() && !self.interrupted.load(Ordering::Relaxed) {
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
