//! The first build-stage shell, started ahead of time.
//!
//! Starting a process in a container (`docker exec`) costs tens of milliseconds of runtime
//! work. The first build stage (`step_script`) is what a job's first line of output waits
//! for, so its shell is started as soon as the build container runs, while the helper stages
//! (sources, caches, artifacts) go on over SSH; it waits for its script on stdin.
//!
//! Like the docker-exec connector, the shell is wrapped so that cancellation can kill its
//! whole process group: the wrapper records its pid in a file and a second exec kills that
//! group.

use crate::command::SHELL_SELECT;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use flotilla_connect::recorded::{KILLER, WRAPPER, pid_file};
use flotilla_job::{EnvError, ExitStatus};
use futures::{Stream, StreamExt};
use std::pin::Pin;
use std::time::Duration;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

type Output = Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;
type Input = Pin<Box<dyn AsyncWrite + Send>>;

/// A stage shell running in the build container, waiting for its script.
pub(crate) struct WarmShell {
    docker: Docker,
    container: String,
    exec_id: String,
    pid_file: String,
    output: Output,
    input: Input,
}

async fn start_exec(
    docker: &Docker,
    container: &str,
    cmd: Vec<String>,
    stdin: bool,
) -> Result<(String, Output, Input), String> {
    let exec = docker
        .create_exec(
            container,
            CreateExecOptions::<String> {
                attach_stdin: Some(stdin),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                tty: Some(false),
                cmd: Some(cmd),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| format!("creating an exec: {e}"))?;
    match docker
        .start_exec(&exec.id, None)
        .await
        .map_err(|e| format!("starting an exec: {e}"))?
    {
        StartExecResults::Attached { output, input } => Ok((exec.id, output, input)),
        StartExecResults::Detached => Err("the exec was started detached".into()),
    }
}

impl WarmShell {
    /// Starts the shell in `container`.
    pub(crate) async fn start(docker: Docker, container: String) -> Result<WarmShell, String> {
        let pid_file = pid_file("stage");
        let cmd = vec![
            "sh".to_string(),
            "-c".to_string(),
            WRAPPER.to_string(),
            pid_file.clone(),
            SHELL_SELECT.to_string(),
        ];
        let (exec_id, output, input) = start_exec(&docker, &container, cmd, true).await?;
        Ok(WarmShell {
            docker,
            container,
            exec_id,
            pid_file,
            output,
            input,
        })
    }

    /// Runs `script` in the shell, streaming its output, until it ends or `cancel` fires.
    pub(crate) async fn run(
        mut self,
        script: String,
        stdout: &mut (dyn AsyncWrite + Send + Unpin),
        stderr: &mut (dyn AsyncWrite + Send + Unpin),
        cancel: CancellationToken,
    ) -> Result<ExitStatus, EnvError> {
        let io = |source| EnvError::Io {
            context: "writing the build stage's output".into(),
            source,
        };
        let mut input = self.input;
        let feed = async move {
            // A shell that exits before reading everything closes its stdin: not an error.
            let _ = input.write_all(script.as_bytes()).await;
            let _ = input.shutdown().await;
        };
        tokio::pin!(feed);
        let mut fed = false;
        loop {
            tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    kill(&self.docker, &self.container, &self.pid_file).await;
                    return Err(EnvError::Canceled);
                }
                () = &mut feed, if !fed => fed = true,
                item = self.output.next() => match item {
                    Some(Ok(LogOutput::StdOut { message })) => {
                        stdout.write_all(&message).await.map_err(io)?;
                    }
                    Some(Ok(LogOutput::StdErr { message })) => {
                        stderr.write_all(&message).await.map_err(io)?;
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        kill(&self.docker, &self.container, &self.pid_file).await;
                        return Err(EnvError::System(format!(
                            "reading the build stage's output: {e}"
                        )));
                    }
                    None => break,
                },
            }
        }
        stdout.flush().await.map_err(io)?;
        stderr.flush().await.map_err(io)?;
        exit_code(&self.docker, &self.exec_id).await
    }
}

/// Kills the process group recorded in `pid_file`.
async fn kill(docker: &Docker, container: &str, pid_file: &str) {
    let cmd = vec![
        "sh".to_string(),
        "-c".to_string(),
        KILLER.to_string(),
        pid_file.to_string(),
    ];
    match start_exec(docker, container, cmd, false).await {
        Ok((_, mut output, _)) => while output.next().await.is_some() {},
        Err(e) => {
            tracing::warn!(%container, error = %e, "could not stop a canceled build stage");
        }
    }
}

/// The exit code of a finished exec (the engine may take a moment to record it).
async fn exit_code(docker: &Docker, exec_id: &str) -> Result<ExitStatus, EnvError> {
    for attempt in 0..50u64 {
        let info = docker
            .inspect_exec(exec_id)
            .await
            .map_err(|e| EnvError::System(format!("inspecting the build stage: {e}")))?;
        if info.running != Some(true)
            && let Some(code) = info.exit_code
        {
            return Ok(ExitStatus::Code(code as i32));
        }
        tokio::time::sleep(Duration::from_millis(5 + 10 * attempt.min(10))).await;
    }
    Err(EnvError::System(
        "the build stage ended without an exit code".into(),
    ))
}
