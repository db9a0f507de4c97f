//! go-plugin's client side: start a plugin, read its handshake line, connect, check its
//! health, read its stdio, and stop it with `GRPCController.Shutdown`.
//!
//! Written from hashicorp/go-plugin (`client.go` `Client.Start`, `grpc_client.go`,
//! `grpc_controller.go`, `grpc_stdio.go`; v1.0.1 as Debian ships it and v1.8.0). Nothing
//! here knows the InstanceGroup service: any go-plugin gRPC plugin can be started with it,
//! which is how the tests check this layer against a plugin built with hashicorp's Go code.

use crate::logs::{Level, Lines, PluginLog, Source, classify};
use crate::spawn;
use flotilla_plugin_protocol::handshake::{
    self, ENV_CLIENT_CERT, ENV_LIFELINE, ENV_MAX_PORT, ENV_MIN_PORT, ENV_PROTOCOL_VERSIONS,
    ENV_UNIX_SOCKET_DIR, HEALTH_SERVICE, LIFELINE_STDIN,
};
use flotilla_plugin_protocol::io::Io;
use flotilla_plugin_protocol::mtls::{self, Certificate};
use flotilla_plugin_protocol::pb::go_plugin::grpc_controller_client::GrpcControllerClient;
use flotilla_plugin_protocol::pb::go_plugin::grpc_stdio_client::GrpcStdioClient;
use flotilla_plugin_protocol::pb::go_plugin::{Empty, stdio_data};
use flotilla_plugin_protocol::{Handshake, HandshakeError, Network};
use hyper_util::rt::TokioIo;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// The port range a plugin listening on TCP may use (go-plugin's defaults).
const MIN_PORT: u16 = 10000;
const MAX_PORT: u16 = 25000;

/// How many of a plugin's last stderr lines are kept for the error when it fails to start.
const STDERR_TAIL: usize = 20;

/// How to start one plugin.
#[derive(Clone)]
pub struct PluginCommand {
    /// A name for logs: the runner's, normally.
    pub name: String,
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Added to the environment it inherits.
    pub env: Vec<(String, String)>,
    /// The magic cookie: variable and value.
    pub cookie: (String, String),
    /// The application protocol versions offered (`PLUGIN_PROTOCOL_VERSIONS`).
    pub versions: Vec<u32>,
    /// Whether to ask for AutoMTLS.
    pub auto_mtls: bool,
    /// From start to a healthy plugin.
    pub start_timeout: Duration,
}

// Not derived: `env` is where a plugin's credentials go.
impl std::fmt::Debug for PluginCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginCommand")
            .field("name", &self.name)
            .field("program", &self.program)
            .field("args", &self.args)
            .field("env", &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("versions", &self.versions)
            .field("auto_mtls", &self.auto_mtls)
            .field("start_timeout", &self.start_timeout)
            .finish_non_exhaustive()
    }
}

/// Why a plugin could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The executable could not be started.
    #[error("starting {program}: {source}")]
    Spawn {
        /// The executable.
        program: String,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// It exited (or closed its stdout) before printing its handshake line.
    #[error("the plugin exited before its handshake ({status}); its last words: {stderr}")]
    ExitedEarly {
        /// How it ended.
        status: String,
        /// Its last stderr lines.
        stderr: String,
    },
    /// No handshake line, or no healthy service, within the start timeout.
    #[error("the plugin did not {stage} within {timeout:?}")]
    Timeout {
        /// `print its handshake line`, `accept a connection`, `report healthy`.
        stage: &'static str,
        /// The start timeout.
        timeout: Duration,
    },
    /// The handshake line was refused.
    #[error("the plugin's handshake line: {0}")]
    Handshake(#[from] HandshakeError),
    /// AutoMTLS could not be set up.
    #[error("AutoMTLS: {0}")]
    Tls(#[from] mtls::MtlsError),
    /// The connection failed.
    #[error("connecting to the plugin at {address}: {source}")]
    Connect {
        /// Where it said it listens.
        address: String,
        /// What failed.
        #[source]
        source: tonic::transport::Error,
    },
    /// Its health service does not say `plugin` is serving.
    #[error("the plugin's health service says {0}")]
    Unhealthy(String),
}

/// A started, healthy plugin. Dropping it kills the process.
#[derive(Debug)]
pub struct PluginProcess {
    name: String,
    pid: u32,
    handshake: Handshake,
    channel: Channel,
    started: Instant,
    exited: watch::Receiver<Option<String>>,
    kill: Mutex<Option<oneshot::Sender<()>>>,
    // Held open for the plugin's whole life: end of file tells it flotilla is gone.
    _lifeline: ChildStdin,
    // The directory of its unix socket, removed with it.
    _socket_dir: tempfile::TempDir,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for PluginProcess {
    fn drop(&mut self) {
        if let Some(kill) = self.kill.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = kill.send(());
        }
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The last lines of a plugin's stderr.
type Tail = Arc<Mutex<VecDeque<String>>>;

impl PluginCommand {
    /// Starts the plugin and waits until it is healthy.
    pub async fn start(&self, log: Arc<dyn PluginLog>) -> Result<PluginProcess, ProcessError> {
        let deadline = Instant::now() + self.start_timeout;
        let socket_dir = tempfile::Builder::new()
            .prefix("flotilla-plugin")
            .tempdir()
            .map_err(|source| self.spawn_error(source))?;
        let own_cert = if self.auto_mtls {
            Some(Certificate::generate()?)
        } else {
            None
        };

        let mut command = tokio::process::Command::new(&self.program);
        command
            .args(&self.args)
            .env(&self.cookie.0, &self.cookie.1)
            .env(ENV_MIN_PORT, MIN_PORT.to_string())
            .env(ENV_MAX_PORT, MAX_PORT.to_string())
            .env(
                ENV_PROTOCOL_VERSIONS,
                handshake::versions_env(&self.versions),
            )
            .env(ENV_UNIX_SOCKET_DIR, socket_dir.path())
            .env(ENV_LIFELINE, LIFELINE_STDIN)
            .env_remove(ENV_CLIENT_CERT)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(cert) = &own_cert {
            command.env(ENV_CLIENT_CERT, &cert.cert_pem);
        }
        for (k, v) in &self.env {
            command.env(k, v);
        }
        let mut child = spawn::spawn(command)
            .await
            .map_err(|source| self.spawn_error(source))?;
        let pid = child.id().unwrap_or(0);
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(self.spawn_error(std::io::Error::other("no pipes to the plugin")));
        };

        let mut tasks = Vec::new();
        let tail: Tail = Arc::new(Mutex::new(VecDeque::new()));
        tasks.push(tokio::spawn(forward_pipe(
            stderr,
            Source::Stderr,
            self.name.clone(),
            log.clone(),
            Some(tail.clone()),
        )));
        let (exited_tx, exited) = watch::channel(None);
        let (kill, killed) = oneshot::channel();
        // Not in `tasks`: aborting it would leave the process unreaped.
        // The plugin's group (its children too) is listed with the watchdog, which kills it
        // if flotilla dies: the parent-death signal reaches the plugin alone.
        let watched = i32::try_from(pid)
            .ok()
            .filter(|&p| p > 0)
            .and_then(flotilla_reaper::Watched::new);
        if watched.is_none() {
            tracing::warn!(plugin = %self.name, "no process watchdog: if flotilla dies, children the plugin started may outlive it");
        }
        tokio::spawn(wait_child(child, watched, killed, exited_tx));
        let process_guard = KillOnError(Some(kill));

        let mut stdout = BufReader::new(stdout);
        let line = match tokio::time::timeout_at(deadline.into(), first_line(&mut stdout)).await {
            Err(_) => {
                return Err(ProcessError::Timeout {
                    stage: "print its handshake line",
                    timeout: self.start_timeout,
                });
            }
            Ok(None) => {
                let status = wait_exit(exited.clone(), Duration::from_secs(1)).await;
                // Let the stderr task drain the last lines.
                tokio::time::sleep(Duration::from_millis(50)).await;
                let stderr = tail
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(" / ");
                return Err(ProcessError::ExitedEarly { status, stderr });
            }
            Ok(Some(line)) => line,
        };
        let handshake = Handshake::parse(&line, &self.versions)?;
        // What the reader holds past the handshake line is read first.
        tasks.push(tokio::spawn(forward_pipe(
            stdout,
            Source::Stdout,
            self.name.clone(),
            log.clone(),
            None,
        )));

        let tls = match (&own_cert, &handshake.server_cert) {
            (Some(own), Some(server)) => Some(Arc::new(mtls::client_config(own, server)?)),
            (Some(_), None) => {
                log.line(
                    &self.name,
                    Source::Stderr,
                    Level::Warn,
                    "AutoMTLS was asked for but the plugin sent no certificate: the \
                     connection is not encrypted",
                );
                None
            }
            (None, _) => None,
        };
        let channel = tokio::time::timeout_at(
            deadline.into(),
            connect(handshake.network, handshake.address.clone(), tls),
        )
        .await
        .map_err(|_| ProcessError::Timeout {
            stage: "accept a connection",
            timeout: self.start_timeout,
        })?
        .map_err(|source| ProcessError::Connect {
            address: handshake.address.clone(),
            source,
        })?;

        let mut health = HealthClient::new(channel.clone());
        let answer = tokio::time::timeout_at(
            deadline.into(),
            health.check(HealthCheckRequest {
                service: HEALTH_SERVICE.into(),
            }),
        )
        .await
        .map_err(|_| ProcessError::Timeout {
            stage: "report healthy",
            timeout: self.start_timeout,
        })?
        .map_err(|s| ProcessError::Unhealthy(format!("{:?}: {}", s.code(), s.message())))?;
        let status = answer.into_inner().status;
        if status != ServingStatus::Serving as i32 {
            let name = ServingStatus::try_from(status)
                .map(|s| s.as_str_name().to_string())
                .unwrap_or_else(|_| status.to_string());
            return Err(ProcessError::Unhealthy(name));
        }
        tasks.push(tokio::spawn(forward_stdio(
            channel.clone(),
            self.name.clone(),
            log,
        )));

        Ok(PluginProcess {
            name: self.name.clone(),
            pid,
            handshake,
            channel,
            started: Instant::now(),
            exited,
            kill: Mutex::new(process_guard.defuse()),
            _lifeline: stdin,
            _socket_dir: socket_dir,
            tasks,
        })
    }

    fn spawn_error(&self, source: std::io::Error) -> ProcessError {
        ProcessError::Spawn {
            program: self.program.display().to_string(),
            source,
        }
    }
}

/// Kills the process when a start fails half way.
struct KillOnError(Option<oneshot::Sender<()>>);

impl KillOnError {
    fn defuse(mut self) -> Option<oneshot::Sender<()>> {
        self.0.take()
    }
}

impl Drop for KillOnError {
    fn drop(&mut self) {
        if let Some(kill) = self.0.take() {
            let _ = kill.send(());
        }
    }
}

impl PluginProcess {
    /// The channel to the plugin's services.
    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    /// The handshake line it answered with.
    pub fn handshake(&self) -> &Handshake {
        &self.handshake
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// How long it has been up.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// How it ended, once it has (`exit status 1`, `signal 9 (SIGKILL)`).
    pub fn exited(&self) -> Option<String> {
        self.exited.borrow().clone()
    }

    /// Stops the plugin as go-plugin's client does: `GRPCController.Shutdown`, whose
    /// `UNAVAILABLE` answer (the server stops before it can reply) counts as success, then
    /// up to `grace` for the process to exit, then SIGKILL. Returns how it ended.
    pub async fn shutdown(&self, grace: Duration) -> String {
        let mut controller = GrpcControllerClient::new(self.channel.clone());
        let mut request = tonic::Request::new(Empty {});
        request.set_timeout(grace);
        let asked = tokio::time::timeout(grace, controller.shutdown(request)).await;
        match asked {
            Ok(Ok(_)) => {}
            Ok(Err(s)) if stopped_answer(&s) => {}
            Ok(Err(s)) => tracing::warn!(
                plugin = %self.name,
                "the plugin refused GRPCController.Shutdown ({:?}: {}); killing it",
                s.code(),
                s.message()
            ),
            Err(_) => tracing::warn!(
                plugin = %self.name,
                "the plugin did not answer GRPCController.Shutdown within {grace:?}; killing it"
            ),
        }
        let ended = wait_exit(self.exited.clone(), grace).await;
        if self.exited().is_none() {
            if let Some(kill) = self.kill.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = kill.send(());
            }
            return wait_exit(self.exited.clone(), grace).await;
        }
        ended
    }
}

/// What a plugin that is stopping may answer `Shutdown` with: go-plugin stops its server
/// before replying, so the host sees the connection go (`UNAVAILABLE`, or a reset stream).
fn stopped_answer(s: &tonic::Status) -> bool {
    matches!(
        s.code(),
        tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::Unknown
    )
}

async fn first_line<R: AsyncRead + Unpin>(stdout: &mut BufReader<R>) -> Option<String> {
    let mut line = String::new();
    loop {
        line.clear();
        match stdout.read_line(&mut line).await {
            Ok(0) | Err(_) => return None,
            Ok(_) if line.trim().is_empty() => {}
            Ok(_) => return Some(line),
        }
    }
}

/// Waits for the plugin to exit (or kills it when told), then kills what is left of its
/// process group: children it started and did not stop.
async fn wait_child(
    mut child: Child,
    watched: Option<flotilla_reaper::Watched>,
    killed: oneshot::Receiver<()>,
    exited: watch::Sender<Option<String>>,
) {
    let status = tokio::select! {
        status = child.wait() => status,
        _ = killed => {
            let _ = child.start_kill();
            child.wait().await
        }
    };
    if let Some(w) = watched {
        // SAFETY: killpg takes no pointers. ESRCH (nothing left in the group) is fine.
        unsafe {
            libc::killpg(w.pgid(), libc::SIGKILL);
        }
    }
    let text = match status {
        Ok(s) => describe(s),
        Err(e) => format!("unknown ({e})"),
    };
    exited.send_replace(Some(text));
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(9)) => "signal 9 (SIGKILL)".into(),
        (None, Some(15)) => "signal 15 (SIGTERM)".into(),
        (None, Some(sig)) => format!("signal {sig}"),
        (None, None) => "unknown".into(),
    }
}

/// How the process ended, waiting up to `limit`; `still running` if it has not.
async fn wait_exit(mut exited: watch::Receiver<Option<String>>, limit: Duration) -> String {
    match tokio::time::timeout(limit, exited.wait_for(Option::is_some)).await {
        Ok(Ok(v)) => v.clone().unwrap_or_default(),
        _ => "still running".into(),
    }
}

async fn connect(
    network: Network,
    address: String,
    tls: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
) -> Result<Channel, tonic::transport::Error> {
    // The URI is not dialled (the connector below is); it only has to be valid.
    let endpoint = Endpoint::from_static("http://plugin.invalid");
    endpoint
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let address = address.clone();
            let tls = tls.clone();
            async move {
                let io = match network {
                    Network::Unix => Io::new(tokio::net::UnixStream::connect(&address).await?),
                    Network::Tcp => {
                        let s = tokio::net::TcpStream::connect(&address).await?;
                        s.set_nodelay(true)?;
                        Io::new(s)
                    }
                };
                let io = match tls {
                    None => io,
                    Some(config) => {
                        let name =
                            tokio_rustls::rustls::pki_types::ServerName::try_from("localhost")
                                .map_err(std::io::Error::other)?;
                        let tls = tokio_rustls::TlsConnector::from(config)
                            .connect(name, io)
                            .await?;
                        Io::new(tls)
                    }
                };
                Ok::<_, std::io::Error>(TokioIo::new(io))
            }
        }))
        .await
}

/// Reads one of the plugin's pipes to its end, a line at a time, into the log (stderr lines
/// read as hclog JSON where they are) and, for stderr, into `tail`. Bytes, not text: a line
/// that is not UTF-8, or is very long, must not stop the reading, or the plugin's next write
/// would fail (a Go plugin dies of SIGPIPE).
async fn forward_pipe(
    mut pipe: impl AsyncRead + Unpin,
    source: Source,
    name: String,
    log: Arc<dyn PluginLog>,
    tail: Option<Tail>,
) {
    let mut lines = Lines::default();
    let mut buf = vec![0u8; 16 * 1024];
    let emit = |line: String| {
        if let Some(tail) = &tail {
            let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
            if tail.len() == STDERR_TAIL {
                tail.pop_front();
            }
            tail.push_back(line.clone());
        }
        let (level, text) = match source {
            Source::Stderr => classify(&line, Level::Info),
            _ => (Level::Info, line),
        };
        log.line(&name, source, level, &text);
    };
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => lines.push(&buf[..n]).into_iter().for_each(&emit),
        }
    }
    if let Some(rest) = lines.finish() {
        emit(rest);
    }
}

/// Reads `GRPCStdio.StreamStdio` for the plugin's whole life (its writes block otherwise).
/// A plugin built with a go-plugin older than 1.2 (Debian's 1.0.1) has no such service.
async fn forward_stdio(channel: Channel, name: String, log: Arc<dyn PluginLog>) {
    let mut client = GrpcStdioClient::new(channel);
    let mut stream = match client.stream_stdio(()).await {
        Ok(r) => r.into_inner(),
        Err(s) if s.code() == tonic::Code::Unimplemented => {
            log.line(
                &name,
                Source::Stderr,
                Level::Debug,
                "the plugin has no GRPCStdio service (go-plugin before 1.2): its output \
                 comes only from its stderr",
            );
            return;
        }
        Err(s) => {
            log.line(
                &name,
                Source::Stderr,
                Level::Warn,
                &format!(
                    "reading the plugin's stdio: {:?}: {}",
                    s.code(),
                    s.message()
                ),
            );
            return;
        }
    };
    let mut out = Lines::default();
    let mut err = Lines::default();
    while let Ok(Some(chunk)) = stream.message().await {
        let (lines, source) = if chunk.channel == stdio_data::Channel::Stderr as i32 {
            (&mut err, Source::StdioStderr)
        } else {
            (&mut out, Source::StdioStdout)
        };
        for line in lines.push(&chunk.data) {
            let (level, text) = classify(&line, Level::Info);
            log.line(&name, source, level, &text);
        }
    }
    for (lines, source) in [
        (&mut out, Source::StdioStdout),
        (&mut err, Source::StdioStderr),
    ] {
        if let Some(line) = lines.finish() {
            let (level, text) = classify(&line, Level::Info);
            log.line(&name, source, level, &text);
        }
    }
}

#[cfg(test)]
mod pipe_tests {
    use super::*;
    use std::sync::Mutex as StdMutex;

    #[derive(Debug, Default)]
    struct Kept(StdMutex<Vec<(Source, String)>>);

    impl PluginLog for Kept {
        fn line(&self, _plugin: &str, source: Source, _level: Level, text: &str) {
            self.0.lock().unwrap().push((source, text.to_string()));
        }
    }

    #[tokio::test]
    async fn a_line_that_is_not_utf8_does_not_stop_the_reading() {
        let kept = Arc::new(Kept::default());
        let tail: Tail = Arc::new(Mutex::new(VecDeque::new()));
        let pipe: &[u8] = b"first\n\xff\xfe broken\nafter it\nno newline at the end";
        forward_pipe(
            pipe,
            Source::Stderr,
            "p".into(),
            kept.clone(),
            Some(tail.clone()),
        )
        .await;
        let lines: Vec<String> = kept
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|(_, t)| t.clone())
            .collect();
        assert_eq!(
            lines,
            [
                "first",
                "\u{fffd}\u{fffd} broken",
                "after it",
                "no newline at the end"
            ]
        );
        assert_eq!(tail.lock().unwrap().len(), 4);
    }
}
