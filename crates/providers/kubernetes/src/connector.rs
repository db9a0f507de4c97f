//! The `kube-exec` connector: commands in a pod's container over the API server's exec
//! subresource (WebSocket `v5.channel.k8s.io`, kube-rs), and ports of the pod over
//! port-forward. No SSH: `dial_stdio` runs `docker system dial-stdio` through exec, so the
//! docker isolation drives the pod's own dockerd.
//!
//! - stdout and stderr come on their own channels; the exit code comes from the `Status` on
//!   the error channel (`NonZeroExitCode` with an `ExitCode` cause); stdin is closed with
//!   v5's CLOSE signal.
//! - Exec cannot signal a process, so each command is wrapped as in the docker-exec
//!   connector: the wrapper shell records its pid in a file, and cancellation runs a second
//!   exec that kills that process group.
//! - Keepalive: kube-rs pings the API server every 60 s; on top of that, every `keepalive`
//!   the connector reads the pod, so a pod that went away (or a stream the API server dropped,
//!   which ends without a status) fails the command with an error that says so instead of a
//!   log that stops.

use crate::target::Target;
use async_trait::async_trait;
use flotilla_connect::pump::{drain, feed_stdin};
use flotilla_connect::recorded::{KILLER, WRAPPER, pid_file};
use flotilla_connect::{
    BoxedStream, ConnectError, Connector, ExecRequest, ExitStatus, ForwardTarget, Stdin,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{AttachParams, AttachedProcess};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf, SimplexStream, WriteHalf};

/// A connector into one pod.
#[derive(Clone)]
pub struct KubeExecConnector {
    target: Target,
    pod: String,
}

impl std::fmt::Debug for KubeExecConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeExecConnector")
            .field("namespace", &self.target.namespace)
            .field("pod", &self.pod)
            .finish_non_exhaustive()
    }
}

impl KubeExecConnector {
    /// A connector into `pod` of the group `target` describes.
    pub(crate) fn new(target: Target, pod: impl Into<String>) -> Self {
        KubeExecConnector {
            target,
            pod: pod.into(),
        }
    }

    /// The pod's name.
    pub fn pod(&self) -> &str {
        &self.pod
    }

    fn addr(&self) -> String {
        format!("pod {}/{}", self.target.namespace, self.pod)
    }

    fn api_error(&self, what: &str, e: kube::Error) -> ConnectError {
        match e {
            kube::Error::Api(status) => ConnectError::Remote {
                what: format!("{what} in {}", self.addr()),
                message: format!("{} ({}): {}", status.code, status.reason, status.message),
            },
            other => ConnectError::Network {
                addr: self.addr(),
                message: format!("{what}: {other}"),
            },
        }
    }

    async fn start(
        &self,
        argv: Vec<String>,
        stdin: bool,
        stderr: bool,
    ) -> Result<AttachedProcess, ConnectError> {
        let mut params = AttachParams::default()
            .stdin(stdin)
            .stdout(true)
            .stderr(stderr);
        if let Some(c) = &self.target.container {
            params = params.container(c.clone());
        }
        self.target
            .pods
            .exec(&self.pod, argv, &params)
            .await
            .map_err(|e| self.api_error("starting a command", e))
    }

    /// Fails when the pod is gone or no longer running (checked every `keepalive`).
    async fn watchdog(&self) -> ConnectError {
        let every = if self.target.keepalive.is_zero() {
            Duration::from_secs(3600 * 24 * 365)
        } else {
            self.target.keepalive
        };
        loop {
            tokio::time::sleep(every).await;
            match self.target.pods.get_opt(&self.pod).await {
                Ok(Some(pod)) => {
                    let phase = pod
                        .status
                        .as_ref()
                        .and_then(|s| s.phase.clone())
                        .unwrap_or_default();
                    if phase != "Running" || pod.metadata.deletion_timestamp.is_some() {
                        return ConnectError::Network {
                            addr: self.addr(),
                            message: format!(
                                "the pod is no longer running (phase {phase}); the command's stream is lost"
                            ),
                        };
                    }
                }
                Ok(None) => {
                    return ConnectError::Network {
                        addr: self.addr(),
                        message: "the pod was deleted while a command ran in it".into(),
                    };
                }
                // The API server not answering one probe is not yet a lost stream.
                Err(e) => tracing::debug!(pod = %self.pod, error = %e, "keepalive probe failed"),
            }
        }
    }

    fn lost_stream(&self) -> ConnectError {
        ConnectError::Network {
            addr: self.addr(),
            message: "the exec stream ended without an exit status: the connection to the API server (or from it to the node) was lost".into(),
        }
    }

    /// Kills the command recorded in `pid_file`, within 15 s (an API server that is gone
    /// cannot hold the caller).
    async fn kill(&self, pid_file: &str) {
        let argv = vec!["sh".into(), "-c".into(), KILLER.into(), pid_file.into()];
        let killing = async {
            match self.start(argv, false, false).await {
                Ok(mut p) => {
                    if let Some(status) = p.take_status() {
                        let _ = tokio::time::timeout(Duration::from_secs(10), status).await;
                    }
                }
                Err(e) => {
                    tracing::warn!(pod = %self.pod, error = %e, "could not stop a command");
                }
            }
        };
        if tokio::time::timeout(Duration::from_secs(15), killing)
            .await
            .is_err()
        {
            tracing::warn!(pod = %self.pod, "stopping a command did not end in time");
        }
    }
}

/// The exit status a `Status` from the error channel carries.
pub fn exit_status(status: &Status) -> Result<ExitStatus, String> {
    if status.status.as_deref() == Some("Success") {
        return Ok(ExitStatus::Code(0));
    }
    if status.reason.as_deref() == Some("NonZeroExitCode") {
        let code = status
            .details
            .as_ref()
            .and_then(|d| d.causes.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
            .and_then(|c| c.message.as_deref()?.parse::<i32>().ok());
        if let Some(code) = code {
            return Ok(ExitStatus::Code(code));
        }
    }
    Err(status
        .message
        .clone()
        .unwrap_or_else(|| format!("{status:?}")))
}

#[async_trait]
impl Connector for KubeExecConnector {
    async fn exec(&self, request: ExecRequest<'_>) -> Result<ExitStatus, ConnectError> {
        let ExecRequest {
            command,
            env,
            stdin,
            stdout,
            stderr,
            cancel,
        } = request;
        if cancel.is_cancelled() {
            return Err(ConnectError::Cancelled);
        }
        // Exec has no environment parameter: the variables are exported by the script.
        let script = flotilla_connect::shell::with_env(&command, &env)?;
        let pid_file = pid_file("exec");
        let argv = vec![
            "sh".to_string(),
            "-c".to_string(),
            WRAPPER.to_string(),
            pid_file.clone(),
            script,
        ];
        let attach_stdin = !matches!(stdin, Stdin::Null);
        let mut process = tokio::select! {
            r = self.start(argv, attach_stdin, true) => r?,
            () = cancel.cancelled() => return Err(ConnectError::Cancelled),
        };
        let status = process.take_status();
        let mut out = process.stdout();
        let mut err = process.stderr();
        let mut input = process.stdin();
        let pumps = async {
            let feed = async {
                match input.as_mut() {
                    Some(w) => feed_stdin(stdin, w).await,
                    None => Ok(()),
                }
            };
            let out = async {
                match out.as_mut() {
                    Some(r) => drain(r, stdout, "writing stdout").await.map(drop),
                    None => Ok(()),
                }
            };
            let err = async {
                match err.as_mut() {
                    Some(r) => drain(r, stderr, "writing stderr").await.map(drop),
                    None => Ok(()),
                }
            };
            tokio::try_join!(feed, out, err).map(drop)
        };
        // kube-rs ends a lost session without closing stdout and stderr (only the status
        // sender goes), so the status is awaited alongside the output: no status at all is a
        // lost stream; a status ends the command once the output has drained.
        let mut status = Box::pin(async move {
            match status {
                Some(s) => s.await,
                None => None,
            }
        });
        tokio::pin!(pumps);
        let watchdog = self.watchdog();
        tokio::pin!(watchdog);
        let mut ended: Option<Status> = None;
        let outcome = loop {
            tokio::select! {
                r = &mut pumps => break r,
                s = &mut status, if ended.is_none() => match s {
                    Some(s) => ended = Some(s),
                    None => break Err(self.lost_stream()),
                },
                () = cancel.cancelled() => break Err(ConnectError::Cancelled),
                e = &mut watchdog => break Err(e),
            }
        };
        if let Err(e) = outcome {
            // Whatever ended the exec here (a cancel, a lost stream, a pod that went, a sink
            // that failed), the command may still run in the pod: a caller that retries must
            // not find the first copy still at work. As the docker exec connector does.
            self.kill(&pid_file).await;
            process.abort();
            return Err(e);
        }
        let status = match ended {
            Some(s) => Some(s),
            None => tokio::time::timeout(Duration::from_secs(30), status)
                .await
                .ok()
                .flatten(),
        };
        match status {
            Some(s) => exit_status(&s).map_err(|message| ConnectError::Remote {
                what: format!("running a command in {}", self.addr()),
                message,
            }),
            None => Err(self.lost_stream()),
        }
    }

    async fn dial_stdio(&self, command: &str) -> Result<BoxedStream, ConnectError> {
        let argv = vec!["sh".to_string(), "-c".to_string(), command.to_string()];
        let mut process = self.start(argv, true, false).await?;
        let (Some(read), Some(write)) = (process.stdout(), process.stdin()) else {
            return Err(ConnectError::Protocol(
                "the exec session has no stdin or stdout".into(),
            ));
        };
        let status = process.take_status().map(|s| Box::pin(s) as StatusFuture);
        Ok(Box::new(ExecStdio {
            _process: process,
            read,
            write,
            status,
        }))
    }

    async fn forward(&self, target: &ForwardTarget) -> Result<BoxedStream, ConnectError> {
        let port = match target {
            ForwardTarget::Tcp { host, port } if is_loopback(host) => *port,
            ForwardTarget::Tcp { host, .. } => {
                return Err(ConnectError::InvalidRequest(format!(
                    "kube-exec forwards only to ports of the pod itself (localhost), not {host}"
                )));
            }
            ForwardTarget::Unix(_) => {
                return Err(ConnectError::Unsupported("forward to a unix socket"));
            }
        };
        let mut forwarder = self
            .target
            .pods
            .portforward(&self.pod, &[port])
            .await
            .map_err(|e| self.api_error("port-forward", e))?;
        let stream = forwarder
            .take_stream(port)
            .ok_or_else(|| ConnectError::Protocol("port-forward gave no stream".into()))?;
        Ok(Box::new(Forwarded {
            _forwarder: forwarder,
            stream,
        }))
    }
}

fn is_loopback(host: &str) -> bool {
    matches!(host, "localhost" | "127.0.0.1" | "::1" | "[::1]")
}

type StatusFuture = Pin<Box<dyn Future<Output = Option<Status>> + Send>>;

/// A command's stdin and stdout as one stream; dropping it ends the exec session.
struct ExecStdio {
    _process: AttachedProcess,
    read: ReadHalf<SimplexStream>,
    write: WriteHalf<SimplexStream>,
    /// The session's status: gone without one means the stream was lost (kube-rs then leaves
    /// stdout open, so reads would wait for ever).
    status: Option<StatusFuture>,
}

impl AsyncRead for ExecStdio {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Poll::Ready(r) = Pin::new(&mut self.read).poll_read(cx, buf) {
            return Poll::Ready(r);
        }
        if let Some(status) = self.status.as_mut()
            && let Poll::Ready(ended) = status.as_mut().poll(cx)
        {
            self.status = None;
            if ended.is_none() {
                return Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "the exec stream to the pod was lost",
                )));
            }
            // Ended normally: the rest of the output is drained, then end-of-file.
            return Pin::new(&mut self.read).poll_read(cx, buf);
        }
        Poll::Pending
    }
}

impl AsyncWrite for ExecStdio {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.write).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.write).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.write).poll_shutdown(cx)
    }
}

/// A port-forwarded connection; dropping it ends the forward.
struct Forwarded {
    _forwarder: kube::api::Portforwarder,
    stream: tokio::io::DuplexStream,
}

impl AsyncRead for Forwarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Forwarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn exit_codes_come_from_the_status() {
        let ok: Status =
            serde_json::from_value(json!({"metadata": {}, "status": "Success"})).unwrap();
        assert_eq!(exit_status(&ok), Ok(ExitStatus::Code(0)));
        let seven: Status = serde_json::from_value(
            json!({"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
            "message": "command terminated with non-zero exit code: exit status 7",
            "details": {"causes": [{"reason": "ExitCode", "message": "7"}]}}),
        )
        .unwrap();
        assert_eq!(exit_status(&seven), Ok(ExitStatus::Code(7)));
        let internal: Status = serde_json::from_value(
            json!({"metadata": {}, "status": "Failure", "reason": "InternalError",
            "message": "container not found"}),
        )
        .unwrap();
        assert_eq!(
            exit_status(&internal),
            Err("container not found".to_string())
        );
    }
}
