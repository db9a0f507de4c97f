//! The connector into a guest.

use crate::protocol::{Frame, OpenSpec, Status, Target};
use crate::session::{Event, Session, SessionInfo};
use crate::stream;
use async_trait::async_trait;
use flotilla_connect::pump::{flush_out, write_out};
use flotilla_connect::{
    BoxedStream, ConnectError, Connector, ExecRequest, ExitStatus, ForwardTarget, Stdin,
};
use futures::future::BoxFuture;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, DuplexStream};
use tokio::sync::{mpsc, oneshot};

/// Opens a new byte stream to the agent (for a VM: the instance connector's `forward` to the
/// VM's agent socket). Called again when a session breaks.
pub type Dialer =
    Arc<dyn Fn() -> BoxFuture<'static, Result<BoxedStream, ConnectError>> + Send + Sync>;

/// A [`Connector`] whose commands run in a guest, through the flotilla agent there.
///
/// Commands run under `/bin/sh -c` of the guest's root file system, in a process group of
/// their own, with the connector's base environment (the job image's `ENV`) plus the
/// request's variables. One session (one stream) carries every channel; a broken session is
/// replaced on the next call, and the agent ends the old session's commands.
pub struct GuestConnector {
    name: String,
    dial: Dialer,
    env: Vec<(String, String)>,
    timeout: Duration,
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
}

impl fmt::Debug for GuestConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuestConnector")
            .field("name", &self.name)
            .field("env", &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// An interactive command on a terminal in the guest.
pub struct Terminal {
    /// The terminal: what the command prints, and where keystrokes go.
    pub stream: DuplexStream,
    /// Send a new size (rows, columns) when the local terminal's changes.
    pub resize: mpsc::Sender<(u16, u16)>,
    /// How the command ended (dropped if the session broke).
    pub status: oneshot::Receiver<ExitStatus>,
}

impl std::fmt::Debug for Terminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminal").finish_non_exhaustive()
    }
}

fn exit_status(s: Status) -> ExitStatus {
    match s {
        Status::Code(c) => ExitStatus::Code(c),
        Status::Signal { number, core } => ExitStatus::from_signal_number(number, core),
    }
}

impl GuestConnector {
    /// A connector that reaches the agent through `dial`; `name` appears in errors (the VM).
    pub fn new(name: impl Into<String>, dial: Dialer) -> GuestConnector {
        GuestConnector {
            name: name.into(),
            dial,
            env: vec![
                (
                    "PATH".into(),
                    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
                ),
                ("HOME".into(), "/root".into()),
            ],
            timeout: Duration::from_secs(10),
            session: tokio::sync::Mutex::new(None),
        }
    }

    /// Uses `env` as every command's base environment (it replaces the default `PATH` and
    /// `HOME`).
    pub fn with_env(mut self, env: Vec<(String, String)>) -> GuestConnector {
        self.env = env;
        self
    }

    /// How long starting a session may take (dialling and the agent's answer).
    pub fn with_timeout(mut self, timeout: Duration) -> GuestConnector {
        self.timeout = timeout;
        self
    }

    /// The base environment.
    pub fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// The current session, or a new one.
    async fn session(&self) -> Result<Arc<Session>, ConnectError> {
        let mut current = self.session.lock().await;
        if let Some(s) = current.as_ref()
            && !s.dead.is_cancelled()
        {
            return Ok(s.clone());
        }
        let stream = (self.dial)().await?;
        let s = Session::start(&self.name, stream, self.timeout).await?;
        *current = Some(s.clone());
        Ok(s)
    }

    /// Starts a session now (waiting for the agent up to the timeout) and returns what the
    /// agent said.
    pub async fn connect(&self) -> Result<SessionInfo, ConnectError> {
        Ok(self.session().await?.info.clone())
    }

    /// Keeps dialling until the agent answers or `limit` passes (a VM that is still booting
    /// has no agent yet).
    pub async fn wait_ready(&self, limit: Duration) -> Result<SessionInfo, ConnectError> {
        let start = tokio::time::Instant::now();
        loop {
            match self.connect().await {
                Ok(info) => return Ok(info),
                Err(e) if start.elapsed() < limit && !matches!(e, ConnectError::Protocol(_)) => {
                    tracing::trace!(agent = %self.name, "agent not ready: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Ends the session (commands it carries are ended by the agent when the next session
    /// starts; a VM that is killed ends them anyway).
    pub async fn disconnect(&self) {
        if let Some(s) = self.session.lock().await.take() {
            s.fail("disconnected".into());
        }
    }

    fn spec(&self, target: Target, env: &[(String, String)]) -> OpenSpec {
        let mut all = self.env.clone();
        for (k, v) in env {
            all.retain(|(key, _)| key != k);
            all.push((k.clone(), v.clone()));
        }
        OpenSpec {
            env: Some(all),
            ..OpenSpec::new(target)
        }
    }

    /// Runs one of the agent's own operations (`ping`, `sync`, `service-netns NAME N`,
    /// `mount DEV DIR FSTYPE`...) and returns its output; a failure is
    /// [`ConnectError::Remote`] with the agent's message.
    pub async fn builtin(&self, args: &[&str]) -> Result<String, ConnectError> {
        let spec = OpenSpec::new(Target::Builtin(
            args.iter().map(|a| a.to_string()).collect(),
        ));
        let mut out = Vec::new();
        let mut err = Vec::new();
        let status = self
            .run(spec, Stdin::Null, Some(&mut out), Some(&mut err), None)
            .await?;
        if status.success() {
            Ok(String::from_utf8_lossy(&out).into_owned())
        } else {
            Err(ConnectError::Remote {
                what: format!("the agent's {}", args.first().copied().unwrap_or("")),
                message: String::from_utf8_lossy(&err).trim().to_string(),
            })
        }
    }

    /// Runs a command as `spec` describes (a service's root or network namespace, a
    /// working directory), like [`Connector::exec`] otherwise.
    pub async fn exec_spec(
        &self,
        mut spec: OpenSpec,
        request: ExecRequest<'_>,
    ) -> Result<ExitStatus, ConnectError> {
        flotilla_connect::shell::check_env(&request.env)?;
        let base = self.spec(Target::Argv(Vec::new()), &request.env);
        if spec.env.is_none() {
            spec.env = base.env;
        }
        let ExecRequest {
            stdin,
            stdout,
            stderr,
            cancel,
            ..
        } = request;
        self.run(spec, stdin, stdout, stderr, Some(cancel)).await
    }

    /// Starts `spec`'s command detached: it outlives the session, its output goes to its
    /// `detach` file. Returns its pid.
    pub async fn spawn_detached(&self, spec: OpenSpec) -> Result<u32, ConnectError> {
        let mut out = Vec::new();
        let status = self
            .run(spec, Stdin::Null, Some(&mut out), None, None)
            .await?;
        if !status.success() {
            return Err(ConnectError::Exit(status));
        }
        String::from_utf8_lossy(&out)
            .trim()
            .parse()
            .map_err(|_| ConnectError::Protocol("the agent gave no pid".into()))
    }

    /// Runs `command` (for `/bin/sh -c`) on a terminal of `rows` x `cols`, with `env` added.
    pub async fn terminal(
        &self,
        command: &str,
        env: &[(String, String)],
        cwd: Option<&str>,
        rows: u16,
        cols: u16,
    ) -> Result<Terminal, ConnectError> {
        let mut spec = self.spec(Target::Shell(command.to_string()), env);
        spec.pty = Some((rows, cols));
        spec.cwd = cwd.map(str::to_string);
        let session = self.session().await?;
        let mut ch = session.channel()?;
        session
            .send(&Frame::Open {
                channel: ch.io.id,
                spec,
            })
            .await?;
        ch.opened("a terminal").await?;
        let (resize_tx, resize_rx) = mpsc::channel(4);
        let (status_tx, status_rx) = oneshot::channel();
        let (mapped_tx, mapped_rx) = oneshot::channel();
        tokio::spawn(async move {
            if let Ok(s) = status_rx.await {
                let _ = mapped_tx.send(exit_status(s));
            }
        });
        let stream = stream::pump(ch, "terminal".into(), Some(resize_rx), Some(status_tx));
        Ok(Terminal {
            stream,
            resize: resize_tx,
            status: mapped_rx,
        })
    }

    async fn run(
        &self,
        spec: OpenSpec,
        stdin: Stdin<'_>,
        mut stdout: Option<flotilla_connect::OutputSink<'_>>,
        mut stderr: Option<flotilla_connect::OutputSink<'_>>,
        cancel: Option<tokio_util::sync::CancellationToken>,
    ) -> Result<ExitStatus, ConnectError> {
        let cancel = cancel.unwrap_or_default();
        let session = self.session().await?;
        let mut ch = session.channel()?;
        let work = async {
            session
                .send(&Frame::Open {
                    channel: ch.io.id,
                    spec,
                })
                .await?;
            ch.opened("running a command").await?;
            let id = ch.io.id;
            let io = &ch.io;
            let events = &mut ch.events;
            let feed = async {
                match stdin {
                    Stdin::Null => {}
                    Stdin::Bytes(b) => io.input(&b).await?,
                    Stdin::Reader(r) => {
                        let mut buf = vec![0u8; 32 * 1024];
                        loop {
                            let n = r.read(&mut buf).await.map_err(|e| ConnectError::Io {
                                what: "reading stdin",
                                source: e,
                            })?;
                            if n == 0 {
                                break;
                            }
                            io.input(&buf[..n]).await?;
                        }
                    }
                }
                io.send(&Frame::StdinEof { channel: id }).await?;
                // Input is done; wait here until the output side finishes.
                std::future::pending::<Result<(), ConnectError>>().await
            };
            let drain = async {
                loop {
                    match events.next().await? {
                        Event::Stdout(d) => {
                            write_out(&mut stdout, &d, "writing stdout").await?;
                            io.ack(d.len()).await?;
                        }
                        Event::Stderr(d) => {
                            write_out(&mut stderr, &d, "writing stderr").await?;
                            io.ack(d.len()).await?;
                        }
                        Event::Exit(s) => {
                            flush_out(&mut stdout, "writing stdout").await?;
                            flush_out(&mut stderr, "writing stderr").await?;
                            return Ok::<_, ConnectError>(s);
                        }
                        Event::Opened | Event::OpenFailed(_) => {
                            return Err(ConnectError::Protocol(
                                "the agent opened a channel twice".into(),
                            ));
                        }
                    }
                }
            };
            // The command may end before reading all its input: its end ends the feeding.
            tokio::select! {
                r = feed => r.map(|()| Status::Code(-1)),
                r = drain => r,
            }
        };
        let dead = session.dead.clone();
        let outcome = tokio::select! {
            r = work => Some(r),
            () = cancel.cancelled() => None,
            // A broken session ends the command even while its output waits for a slow sink.
            () = dead.cancelled() => Some(Err(session.lost())),
        };
        match outcome {
            Some(Ok(status)) => {
                ch.ended = true;
                Ok(exit_status(status))
            }
            // Dropping the channel closes it: the agent kills its process group.
            Some(Err(e)) => Err(e),
            None => Err(ConnectError::Cancelled),
        }
    }
}

#[async_trait]
impl Connector for GuestConnector {
    async fn exec(&self, request: ExecRequest<'_>) -> Result<ExitStatus, ConnectError> {
        flotilla_connect::shell::check_env(&request.env)?;
        let spec = self.spec(Target::Shell(request.command.clone()), &request.env);
        let ExecRequest {
            stdin,
            stdout,
            stderr,
            cancel,
            ..
        } = request;
        self.run(spec, stdin, stdout, stderr, Some(cancel)).await
    }

    async fn dial_stdio(&self, command: &str) -> Result<BoxedStream, ConnectError> {
        let spec = self.spec(Target::Shell(command.to_string()), &[]);
        self.open_stream(spec, format!("dial-stdio {command}"))
            .await
    }

    async fn forward(&self, target: &ForwardTarget) -> Result<BoxedStream, ConnectError> {
        let t = match target {
            ForwardTarget::Unix(p) => Target::Unix(p.clone()),
            ForwardTarget::Tcp { host, port } => Target::Tcp {
                host: host.clone(),
                port: *port,
            },
        };
        self.open_stream(OpenSpec::new(t), format!("forward {target}"))
            .await
    }

    async fn close(&self) {
        self.disconnect().await;
    }
}

impl GuestConnector {
    async fn open_stream(&self, spec: OpenSpec, what: String) -> Result<BoxedStream, ConnectError> {
        let session = self.session().await?;
        let mut ch = session.channel()?;
        session
            .send(&Frame::Open {
                channel: ch.io.id,
                spec,
            })
            .await?;
        ch.opened(&what).await?;
        Ok(Box::new(stream::pump(ch, what, None, None)))
    }
}
