//! The docker-exec connector: commands run in an existing container through the Docker API
//! (for containers without sshd).
//!
//! Commands run as `sh -c <command>` (the container needs a POSIX `sh`, not bash). The exec
//! API has no way to signal an exec'd process, so each command is wrapped: the wrapper shell
//! (a process-group leader, as runc starts every exec) writes its pid to
//! `/tmp/.flotilla-exec-<random>`, and cancellation runs a second exec that kills that process
//! group. The exit code comes from the exec's inspection; a signal shows as `128 + n` there,
//! as in any shell.

use crate::pump::{feed_stdin, flush_out, write_out};
use crate::recorded::{KILLER, WRAPPER, pid_file};
use crate::{BoxedStream, ConnectError, Connector, ExecRequest, ExitStatus, ForwardTarget, Stdin};
use async_trait::async_trait;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Runs commands in one container through the Docker API.
#[derive(Debug, Clone)]
pub struct DockerExecConnector {
    docker: Docker,
    container: String,
    user: Option<String>,
    working_dir: Option<String>,
}

impl DockerExecConnector {
    /// A connector for `container` (id or name) on the engine `docker` talks to.
    pub fn new(docker: Docker, container: impl Into<String>) -> Self {
        DockerExecConnector {
            docker,
            container: container.into(),
            user: None,
            working_dir: None,
        }
    }

    /// Runs commands as `user` (`name`, `uid`, `uid:gid`).
    pub fn with_user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Runs commands in `dir`.
    pub fn with_working_dir(mut self, dir: impl Into<String>) -> Self {
        self.working_dir = Some(dir.into());
        self
    }

    /// The container.
    pub fn container(&self) -> &str {
        &self.container
    }

    fn api_error(&self, what: &str, e: bollard::errors::Error) -> ConnectError {
        api_error(&self.container, what, e, self.docker.timeout())
    }

    /// Creates and starts an exec of `cmd`; returns its id, output and input.
    async fn start(
        &self,
        cmd: Vec<String>,
        env: Vec<String>,
        attach_stdin: bool,
    ) -> Result<(String, OutputStream, InputSink), ConnectError> {
        let options = CreateExecOptions::<String> {
            attach_stdin: Some(attach_stdin),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            env: Some(env),
            cmd: Some(cmd),
            user: self.user.clone(),
            working_dir: self.working_dir.clone(),
            ..Default::default()
        };
        let exec = self
            .docker
            .create_exec(&self.container, options)
            .await
            .map_err(|e| self.api_error("creating an exec", e))?;
        match self
            .docker
            .start_exec(&exec.id, None)
            .await
            .map_err(|e| self.api_error("starting an exec", e))?
        {
            StartExecResults::Attached { output, input } => Ok((exec.id, output, input)),
            StartExecResults::Detached => Err(ConnectError::Protocol(
                "the Docker engine started the exec detached".into(),
            )),
        }
    }

    /// The exit code of a finished exec (the engine may take a moment to record it).
    async fn exit_code(&self, exec_id: &str) -> Result<ExitStatus, ConnectError> {
        for attempt in 0..50u32 {
            let info = self
                .docker
                .inspect_exec(exec_id)
                .await
                .map_err(|e| self.api_error("inspecting an exec", e))?;
            if info.running != Some(true)
                && let Some(code) = info.exit_code
            {
                return Ok(ExitStatus::Code(code as i32));
            }
            tokio::time::sleep(Duration::from_millis(10 * u64::from(attempt.min(10)) + 5)).await;
        }
        Err(ConnectError::Protocol(format!(
            "exec {exec_id} in {} ended without an exit code",
            self.container
        )))
    }

    /// Kills the process group whose pid is in `pid_file`.
    async fn kill(&self, pid_file: &str) {
        let cmd = vec!["sh".into(), "-c".into(), KILLER.into(), pid_file.into()];
        match self.start(cmd, vec![], false).await {
            Ok((_, mut output, _)) => while output.next().await.is_some() {},
            Err(e) => {
                tracing::warn!(container = %self.container, error = %e, "could not stop a cancelled command");
            }
        }
    }
}

type OutputStream = Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;
type InputSink = Pin<Box<dyn AsyncWrite + Send>>;

fn api_error(
    container: &str,
    what: &str,
    e: bollard::errors::Error,
    timeout: Duration,
) -> ConnectError {
    match e {
        bollard::errors::Error::DockerResponseServerError {
            status_code,
            message,
        } => ConnectError::Remote {
            what: format!("{what} in {container}"),
            message: format!("{status_code}: {message}"),
        },
        bollard::errors::Error::RequestTimeoutError => ConnectError::Timeout {
            what: "waiting for the Docker engine on",
            addr: container.to_string(),
            after: timeout,
        },
        bollard::errors::Error::IOError { err } => ConnectError::Network {
            addr: container.to_string(),
            message: format!("{what}: {err}"),
        },
        other => ConnectError::Protocol(format!("{what} in {container}: {other}")),
    }
}

#[async_trait]
impl Connector for DockerExecConnector {
    async fn exec(&self, request: ExecRequest<'_>) -> Result<ExitStatus, ConnectError> {
        crate::shell::check_env(&request.env)?;
        let ExecRequest {
            command,
            env,
            stdin,
            mut stdout,
            mut stderr,
            cancel,
        } = request;
        if cancel.is_cancelled() {
            return Err(ConnectError::Cancelled);
        }
        let pid_file = pid_file("exec");
        let cmd = vec![
            "sh".to_string(),
            "-c".to_string(),
            WRAPPER.to_string(),
            pid_file.clone(),
            command,
        ];
        let env = env.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
        let attach_stdin = !matches!(stdin, Stdin::Null);
        let (exec_id, mut output, mut input) = tokio::select! {
            r = self.start(cmd, env, attach_stdin) => r?,
            () = cancel.cancelled() => return Err(ConnectError::Cancelled),
        };
        let feed = async {
            if attach_stdin {
                feed_stdin(stdin, &mut input).await
            } else {
                Ok(())
            }
        };
        tokio::pin!(feed);
        let mut fed = false;
        let outcome: Result<(), ConnectError> = async {
            loop {
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => return Err(ConnectError::Cancelled),
                    r = &mut feed, if !fed => {
                        fed = true;
                        r?;
                    }
                    item = output.next() => match item {
                        Some(Ok(LogOutput::StdOut { message })) => {
                            write_out(&mut stdout, &message, "writing stdout").await?;
                        }
                        Some(Ok(LogOutput::StdErr { message })) => {
                            write_out(&mut stderr, &message, "writing stderr").await?;
                        }
                        Some(Ok(_)) => {}
                        Some(Err(e)) => return Err(self.api_error("reading exec output", e)),
                        None => return Ok(()),
                    },
                }
            }
        }
        .await;
        if let Err(e) = outcome {
            self.kill(&pid_file).await;
            return Err(e);
        }
        flush_out(&mut stdout, "writing stdout").await?;
        flush_out(&mut stderr, "writing stderr").await?;
        self.exit_code(&exec_id).await
    }

    async fn dial_stdio(&self, command: &str) -> Result<BoxedStream, ConnectError> {
        let cmd = vec!["sh".to_string(), "-c".to_string(), command.to_string()];
        let (_, output, input) = self.start(cmd, vec![], true).await?;
        Ok(Box::new(ExecStream {
            output,
            input,
            pending: Bytes::new(),
            done: false,
        }))
    }

    async fn forward(&self, _target: &ForwardTarget) -> Result<BoxedStream, ConnectError> {
        Err(ConnectError::Unsupported("forward"))
    }
}

/// An exec's stdout (read) and stdin (write) as one stream; stderr is logged at debug level.
struct ExecStream {
    output: OutputStream,
    input: InputSink,
    pending: Bytes,
    done: bool,
}

impl AsyncRead for ExecStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.remaining());
                let chunk = self.pending.split_to(n);
                buf.put_slice(&chunk);
                return Poll::Ready(Ok(()));
            }
            if self.done {
                return Poll::Ready(Ok(()));
            }
            match std::task::ready!(self.output.as_mut().poll_next(cx)) {
                Some(Ok(LogOutput::StdOut { message })) => self.pending = message,
                Some(Ok(LogOutput::StdErr { message })) => {
                    tracing::debug!("dial-stdio stderr: {}", String::from_utf8_lossy(&message));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Poll::Ready(Err(std::io::Error::other(e))),
                None => self.done = true,
            }
        }
    }
}

impl AsyncWrite for ExecStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.input.as_mut().poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.input.as_mut().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.input.as_mut().poll_shutdown(cx)
    }
}
