//! Shell isolation: a build directory per slot on the instance, every stage run by the
//! instance's shell over the connector.
//!
//! Both places ([`flotilla_job::Place::Build`] and [`flotilla_job::Place::Helper`]) are the
//! instance's shell. The project is checked out at `<builds_dir>/<slot>/<project path>`
//! ([`crate::layout`]), so concurrent jobs on one instance never share a directory. Preparing
//! costs no round trip; cleaning up removes the job's temporary directory (file variables)
//! and, when the job asked with `FF_ENABLE_JOB_CLEANUP`, its project directory; otherwise the
//! checkout stays for the next job's `fetch`.

use crate::layout::{BuildLayout, cleanup_requested};
use crate::{IsolateError, IsolatedEnvironment, Isolation, PrepareRequest, remote};
use async_trait::async_trait;
use flotilla_connect::shell::quote;
use flotilla_connect::{Connector, ConnectorExt};
use flotilla_job::script::{ANSI_RESET, ANSI_YELLOW};
use flotilla_job::{EnvError, EnvPaths, Environment, ExecSpec, ExitStatus};
use std::sync::Arc;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// The `shell` isolation level.
#[derive(Debug, Clone, Copy, Default)]
pub struct ShellIsolation;

impl ShellIsolation {
    /// The shell level.
    pub fn new() -> ShellIsolation {
        ShellIsolation
    }
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
            remove_project: cleanup_requested(req.job),
            warnings: ignored(&req),
            layout,
        }))
    }
}

/// One job's environment under shell isolation.
#[derive(Debug)]
pub struct ShellEnvironment {
    connector: Arc<dyn Connector>,
    instance: String,
    layout: BuildLayout,
    remove_project: bool,
    warnings: Vec<String>,
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
        log.write_all(text.as_bytes())
            .await
            .map_err(|source| EnvError::Io {
                context: "writing to the job log".into(),
                source,
            })
    }

    async fn exec(&self, spec: ExecSpec<'_>) -> Result<ExitStatus, EnvError> {
        remote::run(&*self.connector, "running on the instance", spec).await
    }
}

#[async_trait]
impl IsolatedEnvironment for ShellEnvironment {
    async fn cleanup(&self) -> Result<(), IsolateError> {
        let mut line = format!("rm -rf {}", quote(&self.layout.paths.tmp_dir));
        if self.remove_project {
            line.push(' ');
            line.push_str(&quote(&self.layout.paths.project_dir));
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
