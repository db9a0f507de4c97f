//! One command run through a connector: the request and its outcome.

use crate::{ConnectError, ExitStatus};
use bytes::Bytes;
use std::fmt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

/// Where a command's stdout or stderr goes: any async writer, written to as output arrives.
/// A slow writer slows the command down (backpressure) rather than buffering without bound.
pub type OutputSink<'a> = &'a mut (dyn AsyncWrite + Send + Unpin);

/// Where a command's stdin comes from.
#[derive(Default)]
pub enum Stdin<'a> {
    /// No input: the command sees end-of-file at once.
    #[default]
    Null,
    /// These bytes, then end-of-file (a stage script, a small file).
    Bytes(Bytes),
    /// A stream, read and forwarded as the command consumes it, then end-of-file (a `tar`
    /// archive being copied in).
    Reader(&'a mut (dyn AsyncRead + Send + Unpin)),
}

impl fmt::Debug for Stdin<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stdin::Null => f.write_str("Null"),
            Stdin::Bytes(b) => write!(f, "Bytes({} bytes)", b.len()),
            Stdin::Reader(_) => f.write_str("Reader"),
        }
    }
}

/// A command to run on an instance.
///
/// `command` is a shell command line. The SSH connector hands it to the remote user's login
/// shell (as `ssh host 'command'` does), the local connector to `bash -c`, the docker-exec
/// connector to `sh -c`. Environment variables are exported before the command runs.
///
/// ```
/// use flotilla_connect::ExecRequest;
/// let mut trace = Vec::new();
/// let req = ExecRequest::new("bash")
///     .env("CI_JOB_ID", "42")
///     .stdin_bytes("echo $CI_JOB_ID\n")
///     .stdout(&mut trace);
/// # drop(req);
/// ```
pub struct ExecRequest<'a> {
    /// The shell command line.
    pub command: String,
    /// Variables exported for the command, in order. Names must be valid shell identifiers.
    pub env: Vec<(String, String)>,
    /// The command's input.
    pub stdin: Stdin<'a>,
    /// Where stdout goes; `None` discards it.
    pub stdout: Option<OutputSink<'a>>,
    /// Where stderr goes; `None` discards it.
    pub stderr: Option<OutputSink<'a>>,
    /// Cancelling this token stops the command (its whole process group) promptly; `exec`
    /// then returns [`ConnectError::Cancelled`].
    pub cancel: CancellationToken,
}

impl<'a> ExecRequest<'a> {
    /// A request to run `command` with no input, output discarded, and a fresh token.
    pub fn new(command: impl Into<String>) -> Self {
        ExecRequest {
            command: command.into(),
            env: Vec::new(),
            stdin: Stdin::Null,
            stdout: None,
            stderr: None,
            cancel: CancellationToken::new(),
        }
    }

    /// Adds an environment variable.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Adds environment variables.
    pub fn envs<K: Into<String>, V: Into<String>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.env
            .extend(vars.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Feeds these bytes to stdin.
    pub fn stdin_bytes(mut self, bytes: impl Into<Bytes>) -> Self {
        self.stdin = Stdin::Bytes(bytes.into());
        self
    }

    /// Streams stdin from a reader.
    pub fn stdin_reader(mut self, reader: &'a mut (dyn AsyncRead + Send + Unpin)) -> Self {
        self.stdin = Stdin::Reader(reader);
        self
    }

    /// Sends stdout to `sink`.
    pub fn stdout(mut self, sink: OutputSink<'a>) -> Self {
        self.stdout = Some(sink);
        self
    }

    /// Sends stderr to `sink`.
    pub fn stderr(mut self, sink: OutputSink<'a>) -> Self {
        self.stderr = Some(sink);
        self
    }

    /// Stops the command when `token` is cancelled.
    pub fn cancel(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }
}

impl fmt::Debug for ExecRequest<'_> {
    /// Variable values may be secrets: only their names are printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecRequest")
            .field("command", &self.command)
            .field(
                "env",
                &self.env.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            )
            .field("stdin", &self.stdin)
            .field("stdout", &self.stdout.is_some())
            .field("stderr", &self.stderr.is_some())
            .finish()
    }
}

/// A command's collected output (see [`crate::ConnectorExt::output`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// How it ended.
    pub status: ExitStatus,
    /// Everything it wrote to stdout.
    pub stdout: Vec<u8>,
    /// Everything it wrote to stderr.
    pub stderr: Vec<u8>,
}

impl Output {
    /// stdout as text (lossy).
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// stderr as text (lossy).
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// The output if the command succeeded, otherwise [`ConnectError::Exit`] (GitLab's
    /// `ExitError`).
    pub fn checked(self) -> Result<Output, ConnectError> {
        if self.status.success() {
            Ok(self)
        } else {
            Err(ConnectError::Exit(self.status))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        let output = |status| Output {
            status,
            stdout: Vec::new(),
            stderr: Vec::new(),
        };
        assert!(ExitStatus::Code(0).success());
        assert!(output(ExitStatus::Code(0)).checked().is_ok());
        let e = output(ExitStatus::Code(3)).checked().unwrap_err();
        assert!(matches!(e, ConnectError::Exit(ExitStatus::Code(3))));
        let s = ExitStatus::from_signal_number(15, false);
        assert_eq!(s.signal(), Some("TERM"));
        assert_eq!(s.code(), None);
        assert!(!s.success());
        assert_eq!(s.to_string(), "killed by signal TERM");
        assert_eq!(
            ExitStatus::from_signal_number(9, true).to_string(),
            "killed by signal KILL (core dumped)"
        );
        assert_eq!(flotilla_fleet::signal_name(1000), "1000");
    }

    #[test]
    fn debug_hides_variable_values() {
        let r = ExecRequest::new("true").env("TOKEN", "glpat-secret");
        let d = format!("{r:?}");
        assert!(d.contains("TOKEN") && !d.contains("glpat-secret"), "{d}");
    }
}
