//! The connector contract.

use crate::{ConnectError, ExecRequest, ExitStatus, Output};
use async_trait::async_trait;
use std::fmt;
use tokio::io::{AsyncRead, AsyncWrite};

/// A bidirectional byte stream to something on the instance: a command's stdio
/// ([`Connector::dial_stdio`]) or a forwarded socket ([`Connector::forward`]).
pub trait IoStream: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + ?Sized> IoStream for T {}

/// A boxed [`IoStream`].
pub type BoxedStream = Box<dyn IoStream>;

/// What [`Connector::forward`] connects to, as seen from the instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ForwardTarget {
    /// A unix socket path (SSH `direct-streamlocal`), such as `/var/run/docker.sock`.
    Unix(String),
    /// A TCP host and port (SSH `direct-tcpip`).
    Tcp {
        /// Host name or address, resolved on the instance.
        host: String,
        /// Port.
        port: u16,
    },
}

impl fmt::Display for ForwardTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ForwardTarget::Unix(p) => write!(f, "unix:{p}"),
            ForwardTarget::Tcp { host, port } => write!(f, "tcp:{host}:{port}"),
        }
    }
}

/// How flotilla reaches one instance: runs commands on it, opens streams to commands and
/// sockets on it (fleeting's connector `Client`: `Run`, `DialRun`, `Dial`).
///
/// Implementations: [`crate::ssh::SshConnector`], [`crate::local::LocalConnector`],
/// [`crate::docker_exec::DockerExecConnector`]. All methods may be called concurrently; an
/// SSH connector multiplexes them as channels of one connection.
#[async_trait]
pub trait Connector: Send + Sync + fmt::Debug {
    /// Runs a command to completion, streaming its stdin in and its stdout and stderr out as
    /// they flow, and returns how it ended (exit code or signal).
    ///
    /// A non-zero exit is `Ok(ExitStatus::Code(n))`, not an error; errors mean the command
    /// could not be run or followed to its end (connection lost, cancelled, ...).
    ///
    /// Stop a command through the request's cancellation token: that kills its process group
    /// wherever it runs. Merely dropping the future kills a local command but leaves a remote
    /// one running until it ends by itself.
    async fn exec(&self, request: ExecRequest<'_>) -> Result<ExitStatus, ConnectError>;

    /// Starts `command` and returns its stdin and stdout as one stream (its stderr is not
    /// part of the stream; connectors log or drop it). `docker system dial-stdio` through this
    /// is how a job reaches the instance's Docker daemon (see [`crate::docker_api`]). Shutting
    /// the stream down sends end-of-file to the command; dropping it closes the stream, which
    /// ends commands that stop at end-of-file.
    async fn dial_stdio(&self, command: &str) -> Result<BoxedStream, ConnectError>;

    /// Opens a stream to a unix socket or TCP port as seen from the instance.
    async fn forward(&self, target: &ForwardTarget) -> Result<BoxedStream, ConnectError>;

    /// Closes any connection held; later calls may open a new one.
    async fn close(&self) {}

    /// Whether the instance is this process's own host, its commands running with this
    /// process's rights (the local connector): what they would do to files, this process may
    /// do itself. The default is no.
    fn is_this_process(&self) -> bool {
        false
    }
}

/// Conveniences on top of [`Connector`].
#[async_trait]
pub trait ConnectorExt: Connector {
    /// Runs `command` with no input and collects its output in memory (for short commands
    /// such as probes; stream long output through [`Connector::exec`] instead).
    async fn output(&self, command: &str) -> Result<Output, ConnectError> {
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let status = self
            .exec(
                ExecRequest::new(command)
                    .stdout(&mut stdout)
                    .stderr(&mut stderr),
            )
            .await?;
        Ok(Output {
            status,
            stdout,
            stderr,
        })
    }
}

impl<T: Connector + ?Sized> ConnectorExt for T {}
