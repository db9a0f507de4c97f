//! The SSH connector (russh): one connection per instance, many channels on it.
//!
//! - **One TCP connection per instance**, opened on first use and shared by every command,
//!   stream and forward (each is an SSH channel; the stock instance image allows 512 per
//!   connection). When the connection drops, the next call opens a new one; calls in flight
//!   on the dead one fail with a typed error.
//! - **Keepalive** (`ConnectorConfig::keepalive`, `SshOptions::keepalive_max`): a peer that
//!   stops answering fails every command in flight with [`ConnectError::Timeout`] after about
//!   `keepalive × (keepalive_max + 1)`; nothing waits forever. `ConnectorConfig::timeout`
//!   bounds connecting (TCP, key exchange and authentication together).
//! - **Host keys** are pinned on first contact under the instance id (see [`HostKeyStore`]);
//!   a different key later is refused with [`ConnectError::HostKeyMismatch`].
//! - **Credentials** come from the [`ConnectInfo`]: key first, then password. When they have
//!   expired (`ConnectInfo::expires`), a [`CredentialSource`] is asked for fresh ones before
//!   connecting.
//! - **Environment** is exported in a prologue of the command line (sshd's `AcceptEnv` is not
//!   relied on); see [`crate::shell::with_env`].
//! - **Cancellation** kills the command's whole process group: every command announces its
//!   shell's pid on stderr first (the marker is removed from the output), and cancelling runs
//!   `kill -KILL -<pid>` on a second channel. (The `signal` channel request is sent too, but
//!   OpenSSH refuses it in root sessions.)

mod addr;
mod credentials;
mod handler;
mod host_keys;
mod pid_marker;

pub use addr::dial_target;
pub use credentials::{CredentialSource, GroupCredentials};
pub use host_keys::{FileHostKeys, HostKeyCheck, HostKeyStore, MemoryHostKeys, decide, normalize};
pub use pid_marker::PidSniffer;

use crate::pump::{feed_stdin, flush_out, write_out};
use crate::{BoxedStream, ConnectError, Connector, ExecRequest, ExitStatus, ForwardTarget, shell};
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use flotilla_fleet::ConnectInfo;
use handler::{ClientHandler, Ended, Observed};
use russh::client::{self, Handle, Msg};
use russh::keys::{PrivateKeyWithHashAlg, decode_secret_key};
use russh::{Channel, ChannelMsg, Sig};
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Tuning of the SSH connector beyond what `ConnectorConfig` says.
#[derive(Debug, Clone)]
pub struct SshOptions {
    /// Unanswered keepalives before the connection is declared dead.
    pub keepalive_max: usize,
    /// Messages buffered per channel before the connection applies backpressure. With
    /// packets of at most 32 KiB, a channel holds at most this × 32 KiB of unread output.
    pub channel_buffer_size: usize,
    /// Credentials expiring within this margin are refreshed before connecting.
    pub refresh_margin: Duration,
    /// The id host keys are pinned under; `None` means the instance id (or, without one,
    /// the dial address).
    pub key_id: Option<String>,
}

impl Default for SshOptions {
    fn default() -> Self {
        SshOptions {
            keepalive_max: 3,
            channel_buffer_size: 32,
            refresh_margin: Duration::from_secs(30),
            key_id: None,
        }
    }
}

/// The largest SSH packet payload russh sends or accepts by default (32 KiB): with
/// [`SshOptions::channel_buffer_size`] it bounds the output a channel holds.
pub const MAX_PACKET: usize = 32 * 1024;

/// Reaches one instance over SSH. Share it (`Arc<SshConnector>`) between everything that
/// talks to that instance: its calls share one connection.
pub struct SshConnector {
    info: std::sync::Mutex<ConnectInfo>,
    key_id: String,
    host_keys: Arc<dyn HostKeyStore>,
    credentials: Option<Arc<dyn CredentialSource>>,
    options: SshOptions,
    conn: tokio::sync::Mutex<Option<Arc<Connection>>>,
    opened: AtomicU64,
}

impl fmt::Debug for SshConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SshConnector")
            .field("key_id", &self.key_id)
            .field("connections_opened", &self.connections_opened())
            .finish_non_exhaustive()
    }
}

/// One live SSH connection.
struct Connection {
    handle: Handle<ClientHandler>,
    observed: Arc<Observed>,
    addr: String,
    keepalive: Option<Duration>,
    keepalive_max: usize,
}

/// The kinds of channel the connector opens.
enum ChannelKind<'a> {
    Session,
    StreamLocal(&'a str),
    TcpIp(&'a str, u16),
}

impl ChannelKind<'_> {
    fn describe(&self) -> String {
        match self {
            ChannelKind::Session => "a session channel".into(),
            ChannelKind::StreamLocal(p) => format!("forwarding to unix:{p}"),
            ChannelKind::TcpIp(h, p) => format!("forwarding to tcp:{h}:{p}"),
        }
    }
}

impl Connection {
    /// Classifies a russh error on this connection.
    fn error(&self, e: russh::Error, what: &str) -> ConnectError {
        classify(
            e,
            what,
            &self.addr,
            &self.observed,
            self.keepalive,
            self.keepalive_max,
        )
    }

    /// The error for a command whose channel vanished with the connection.
    fn lost(&self) -> ConnectError {
        ended_error(
            self.observed.ended(),
            &self.addr,
            self.keepalive,
            self.keepalive_max,
        )
    }

    fn is_dead(&self) -> bool {
        self.handle.is_closed() || self.observed.ended().is_some()
    }
}

/// Whether a russh error means the connection itself is gone (so a retry on a new one may
/// work).
fn is_connection_gone(e: &russh::Error) -> bool {
    matches!(
        e,
        russh::Error::SendError
            | russh::Error::Disconnect
            | russh::Error::HUP
            | russh::Error::IO(_)
            | russh::Error::KeepaliveTimeout
            | russh::Error::InactivityTimeout
            | russh::Error::ConnectionTimeout
    )
}

fn keepalive_limit(keepalive: Option<Duration>, max: usize) -> Duration {
    keepalive.unwrap_or_default() * (max as u32 + 1)
}

fn ended_error(
    ended: Option<Ended>,
    addr: &str,
    keepalive: Option<Duration>,
    keepalive_max: usize,
) -> ConnectError {
    let network = |message: String| ConnectError::Network {
        addr: addr.to_string(),
        message,
    };
    match ended {
        Some(Ended::KeepaliveTimeout) => ConnectError::Timeout {
            what: "waiting for keepalive replies from",
            addr: addr.to_string(),
            after: keepalive_limit(keepalive, keepalive_max),
        },
        Some(Ended::InactivityTimeout) => ConnectError::Timeout {
            what: "waiting for any traffic from",
            addr: addr.to_string(),
            after: keepalive_limit(keepalive, keepalive_max + 1),
        },
        Some(Ended::ByServer(m)) => network(format!("the server disconnected: {m}")),
        Some(Ended::Io(m)) => network(format!("connection lost: {m}")),
        Some(Ended::Other(m)) => network(format!("connection lost: {m}")),
        None => network("connection closed".into()),
    }
}

fn classify(
    e: russh::Error,
    what: &str,
    addr: &str,
    observed: &Observed,
    keepalive: Option<Duration>,
    keepalive_max: usize,
) -> ConnectError {
    if let Some((pinned, presented)) = observed.mismatch() {
        return ConnectError::HostKeyMismatch {
            key_id: String::new(),
            pinned,
            presented,
        };
    }
    if let Some(m) = observed.store_error() {
        return ConnectError::Protocol(format!("host key store failed: {m}"));
    }
    match e {
        russh::Error::KeepaliveTimeout => ended_error(
            Some(Ended::KeepaliveTimeout),
            addr,
            keepalive,
            keepalive_max,
        ),
        russh::Error::InactivityTimeout => ended_error(
            Some(Ended::InactivityTimeout),
            addr,
            keepalive,
            keepalive_max,
        ),
        russh::Error::IO(io) => ConnectError::Network {
            addr: addr.to_string(),
            message: format!("{what}: {io}"),
        },
        russh::Error::SendError
        | russh::Error::Disconnect
        | russh::Error::HUP
        | russh::Error::ConnectionTimeout => {
            ended_error(observed.ended(), addr, keepalive, keepalive_max)
        }
        russh::Error::ChannelOpenFailure(reason) => ConnectError::Remote {
            what: what.to_string(),
            message: format!("{reason:?}"),
        },
        russh::Error::RequestDenied => ConnectError::Remote {
            what: what.to_string(),
            message: "request denied".into(),
        },
        russh::Error::NotAuthenticated => ConnectError::Auth {
            user: String::new(),
            addr: addr.to_string(),
            message: "not authenticated".into(),
        },
        other => ConnectError::Protocol(format!("{what}: {other}")),
    }
}

impl SshConnector {
    /// A connector for the instance described by `info`, pinning host keys in memory.
    pub fn new(info: ConnectInfo) -> Self {
        let key_id = default_key_id(&info);
        SshConnector {
            info: std::sync::Mutex::new(info),
            key_id,
            host_keys: Arc::new(MemoryHostKeys::new()),
            credentials: None,
            options: SshOptions::default(),
            conn: tokio::sync::Mutex::new(None),
            opened: AtomicU64::new(0),
        }
    }

    /// Pins host keys in `store` (share one store between the connectors of a fleet).
    pub fn with_host_keys(mut self, store: Arc<dyn HostKeyStore>) -> Self {
        self.host_keys = store;
        self
    }

    /// Refreshes expired credentials through `source`.
    pub fn with_credentials(mut self, source: Arc<dyn CredentialSource>) -> Self {
        self.credentials = Some(source);
        self
    }

    /// Sets the tuning options.
    pub fn with_options(mut self, options: SshOptions) -> Self {
        if let Some(id) = &options.key_id {
            self.key_id = id.clone();
        }
        self.options = options;
        self
    }

    /// The id host keys are pinned under.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// How many SSH connections this connector has opened so far (1 while the first one
    /// lives; each reconnect adds one).
    pub fn connections_opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// The connection details currently in use.
    pub fn connect_info(&self) -> ConnectInfo {
        self.info.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Opens the connection now (otherwise the first call does).
    pub async fn connect(&self) -> Result<(), ConnectError> {
        self.connection().await.map(drop)
    }

    /// The live connection, opening one if there is none or the last one died.
    async fn connection(&self) -> Result<Arc<Connection>, ConnectError> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref()
            && !c.is_dead()
        {
            return Ok(c.clone());
        }
        *slot = None;
        let c = Arc::new(self.open_connection().await?);
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Forgets `dead` if it is still the current connection.
    async fn invalidate(&self, dead: &Arc<Connection>) {
        let mut slot = self.conn.lock().await;
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, dead)) {
            *slot = None;
        }
    }

    /// The connection details to use now, refreshed first if they have expired.
    async fn current_info(&self) -> Result<ConnectInfo, ConnectError> {
        let info = self.connect_info();
        if !info.expired(SystemTime::now(), self.options.refresh_margin) {
            return Ok(info);
        }
        let Some(source) = &self.credentials else {
            tracing::warn!(id = %info.id, "credentials have expired and there is no source to refresh them");
            return Ok(info);
        };
        let fresh = source.refresh(&info.id).await?;
        tracing::debug!(id = %info.id, "credentials refreshed");
        *self.info.lock().unwrap_or_else(|e| e.into_inner()) = fresh.clone();
        Ok(fresh)
    }

    async fn open_connection(&self) -> Result<Connection, ConnectError> {
        let info = self.current_info().await?;
        let (host, port) = dial_target(info.dial_addr(), info.config.port());
        let addr = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let keepalive = (!info.config.keepalive.is_zero()).then_some(info.config.keepalive);
        let config = client::Config {
            keepalive_interval: keepalive,
            keepalive_max: self.options.keepalive_max,
            // A backstop for writes that block on a peer that stopped reading (keepalives
            // alone are not checked while a write is stuck).
            inactivity_timeout: keepalive
                .map(|k| keepalive_limit(Some(k), self.options.keepalive_max + 1)),
            channel_buffer_size: self.options.channel_buffer_size,
            nodelay: true,
            ..Default::default()
        };
        let observed = Arc::new(Observed::default());
        let handler = ClientHandler {
            key_id: self.key_id.clone(),
            store: self.host_keys.clone(),
            observed: observed.clone(),
        };
        let attempt = async {
            let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
                .await
                .map_err(|e| ConnectError::Network {
                    addr: addr.clone(),
                    message: format!("connecting: {e}"),
                })?;
            let _ = tcp.set_nodelay(true);
            let mut handle = client::connect_stream(Arc::new(config), tcp, handler)
                .await
                .map_err(|e| {
                    let mut err = classify(
                        e,
                        "handshake",
                        &addr,
                        &observed,
                        keepalive,
                        self.options.keepalive_max,
                    );
                    if let ConnectError::HostKeyMismatch { key_id, .. } = &mut err {
                        *key_id = self.key_id.clone();
                    }
                    err
                })?;
            authenticate(&mut handle, &info, &addr).await?;
            Ok::<_, ConnectError>(handle)
        };
        let handle = if info.config.timeout.is_zero() {
            attempt.await?
        } else {
            tokio::time::timeout(info.config.timeout, attempt)
                .await
                .map_err(|_| ConnectError::Timeout {
                    what: "connecting to",
                    addr: addr.clone(),
                    after: info.config.timeout,
                })??
        };
        self.opened.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(key_id = %self.key_id, %addr, "ssh connection established");
        Ok(Connection {
            handle,
            observed,
            addr,
            keepalive,
            keepalive_max: self.options.keepalive_max,
        })
    }

    /// Opens a channel, retrying once on a fresh connection if the current one turns out to
    /// be dead.
    async fn open(
        &self,
        kind: &ChannelKind<'_>,
    ) -> Result<(Arc<Connection>, Channel<Msg>), ConnectError> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let conn = self.connection().await?;
            let r = match kind {
                ChannelKind::Session => conn.handle.channel_open_session().await,
                ChannelKind::StreamLocal(path) => {
                    conn.handle
                        .channel_open_direct_streamlocal(path.to_string())
                        .await
                }
                ChannelKind::TcpIp(host, port) => {
                    conn.handle
                        .channel_open_direct_tcpip(
                            host.to_string(),
                            u32::from(*port),
                            "127.0.0.1",
                            0,
                        )
                        .await
                }
            };
            match r {
                Ok(ch) => return Ok((conn, ch)),
                Err(e) if attempts < 2 && is_connection_gone(&e) => {
                    tracing::debug!(key_id = %self.key_id, error = %e, "connection found dead; reconnecting");
                    self.invalidate(&conn).await;
                }
                Err(e) => return Err(conn.error(e, &kind.describe())),
            }
        }
    }

    /// Opens a session channel and starts `command` on it, waiting for sshd to accept the
    /// request. Output that arrives before the acceptance is returned with the channel.
    async fn start(
        &self,
        command: &str,
    ) -> Result<(Arc<Connection>, Channel<Msg>, Started), ConnectError> {
        let (conn, mut channel) = self.open(&ChannelKind::Session).await?;
        channel
            .exec(true, command.as_bytes())
            .await
            .map_err(|e| conn.error(e, "starting the command"))?;
        let mut started = Started::default();
        loop {
            match channel.wait().await {
                Some(ChannelMsg::Success) => return Ok((conn, channel, started)),
                Some(ChannelMsg::Failure) => {
                    return Err(ConnectError::Remote {
                        what: "starting the command".into(),
                        message: "the exec request was refused".into(),
                    });
                }
                Some(ChannelMsg::Data { data }) => started.stdout.extend_from_slice(&data),
                Some(ChannelMsg::ExtendedData { data, .. }) => {
                    started.stderr.extend_from_slice(&data);
                }
                Some(other) => started.early.push(other),
                None => return Err(conn.lost()),
            }
        }
    }
}

/// What arrived on a channel before sshd acknowledged the exec request (rare).
#[derive(Default)]
struct Started {
    stdout: BytesMut,
    stderr: BytesMut,
    early: Vec<ChannelMsg>,
}

fn default_key_id(info: &ConnectInfo) -> String {
    if info.id.is_empty() {
        info.dial_addr().to_string()
    } else {
        info.id.clone()
    }
}

/// Authenticates with the key, then the password, from `info`.
async fn authenticate(
    handle: &mut Handle<ClientHandler>,
    info: &ConnectInfo,
    addr: &str,
) -> Result<(), ConnectError> {
    let user = info.config.username.as_str();
    if user.is_empty() {
        return Err(ConnectError::Credentials("no username to log in as".into()));
    }
    let auth_err = |message: String| ConnectError::Auth {
        user: user.to_string(),
        addr: addr.to_string(),
        message,
    };
    let proto = |e: russh::Error| ConnectError::Protocol(format!("authentication: {e}"));
    let mut tried = Vec::new();
    if let Some(key) = &info.config.key {
        let text = std::str::from_utf8(key.expose())
            .map_err(|_| ConnectError::Credentials("the private key is not text".into()))?;
        let key = decode_secret_key(text, None)
            .map_err(|e| ConnectError::Credentials(format!("cannot read the private key: {e}")))?;
        let hash = if key.algorithm().is_rsa() {
            handle
                .best_supported_rsa_hash()
                .await
                .map_err(proto)?
                .flatten()
        } else {
            None
        };
        let result = handle
            .authenticate_publickey(user, PrivateKeyWithHashAlg::new(Arc::new(key), hash))
            .await
            .map_err(proto)?;
        if result.success() {
            return Ok(());
        }
        tried.push("publickey");
    }
    if let Some(password) = &info.config.password {
        let result = handle
            .authenticate_password(user, password.expose().clone())
            .await
            .map_err(proto)?;
        if result.success() {
            return Ok(());
        }
        tried.push("password");
    }
    if tried.is_empty() {
        return Err(ConnectError::Credentials(
            "neither a key nor a password was given".into(),
        ));
    }
    Err(auth_err(format!("rejected ({})", tried.join(", "))))
}

fn exit_signal(sig: &Sig) -> String {
    match sig {
        Sig::ABRT => "ABRT".into(),
        Sig::ALRM => "ALRM".into(),
        Sig::FPE => "FPE".into(),
        Sig::HUP => "HUP".into(),
        Sig::ILL => "ILL".into(),
        Sig::INT => "INT".into(),
        Sig::KILL => "KILL".into(),
        Sig::PIPE => "PIPE".into(),
        Sig::QUIT => "QUIT".into(),
        Sig::SEGV => "SEGV".into(),
        Sig::TERM => "TERM".into(),
        Sig::USR1 => "USR1".into(),
        Sig::Custom(name) => name.trim_end_matches("@openssh.com").to_string(),
    }
}

/// Where a running command's output goes, and what has been learned about it.
struct Sinks<'a, 'b> {
    stdout: &'b mut Option<crate::OutputSink<'a>>,
    stderr: &'b mut Option<crate::OutputSink<'a>>,
    sniffer: PidSniffer,
    status: Option<ExitStatus>,
}

impl Sinks<'_, '_> {
    async fn stderr(&mut self, data: &[u8]) -> Result<(), ConnectError> {
        let pass = self.sniffer.feed(data);
        write_out(self.stderr, &pass, "writing stderr").await
    }

    /// Applies one channel message; `Ok(true)` when the channel closed.
    async fn on_message(&mut self, msg: ChannelMsg) -> Result<bool, ConnectError> {
        match msg {
            ChannelMsg::Data { data } => write_out(self.stdout, &data, "writing stdout").await?,
            ChannelMsg::ExtendedData { data, ext: 1 } => self.stderr(&data).await?,
            ChannelMsg::ExitStatus { exit_status } => {
                self.status = Some(ExitStatus::Code(exit_status as i32));
            }
            ChannelMsg::ExitSignal {
                signal_name,
                core_dumped,
                ..
            } => {
                self.status = Some(ExitStatus::Signal {
                    name: exit_signal(&signal_name),
                    core_dumped,
                });
            }
            ChannelMsg::Close => return Ok(true),
            _ => {}
        }
        Ok(false)
    }

    async fn finish(&mut self) -> Result<(), ConnectError> {
        let rest = self.sniffer.finish();
        write_out(self.stderr, &rest, "writing stderr").await?;
        flush_out(self.stdout, "writing stdout").await?;
        flush_out(self.stderr, "writing stderr").await
    }
}

/// How long a cancelled command may take to announce its pid.
const PID_WAIT: Duration = Duration::from_secs(2);
/// How long killing a cancelled command may take.
const KILL_WAIT: Duration = Duration::from_secs(10);

impl SshConnector {
    /// Runs `command` and waits for its channel to close, ignoring its output.
    async fn run_quiet(&self, command: &str) -> Result<(), ConnectError> {
        let (_conn, mut channel, _) = self.start(command).await?;
        while let Some(msg) = channel.wait().await {
            if matches!(msg, ChannelMsg::Close) {
                break;
            }
        }
        Ok(())
    }

    /// Stops a command whose output is no longer wanted: its process group is killed.
    async fn stop(
        &self,
        rx: &mut russh::ChannelReadHalf,
        tx: &russh::ChannelWriteHalf<Msg>,
        sniffer: &mut PidSniffer,
    ) {
        // Honoured where sshd privilege-separates the session (non-root logins).
        let _ = tx.signal(Sig::KILL).await;
        if sniffer.pid().is_none() {
            let _ = tokio::time::timeout(PID_WAIT, async {
                while sniffer.pid().is_none() && !sniffer.is_done() {
                    match rx.wait().await {
                        Some(ChannelMsg::ExtendedData { data, ext: 1 }) => {
                            sniffer.feed(&data);
                        }
                        Some(ChannelMsg::Close) | None => break,
                        Some(_) => {}
                    }
                }
            })
            .await;
        }
        match sniffer.pid() {
            Some(pid) => {
                let kill = pid_marker::kill_command(pid);
                match tokio::time::timeout(KILL_WAIT, self.run_quiet(&kill)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(key_id = %self.key_id, error = %e, "could not stop a cancelled command");
                    }
                    Err(_) => {
                        tracing::warn!(key_id = %self.key_id, "stopping a cancelled command timed out");
                    }
                }
            }
            None => {
                tracing::warn!(key_id = %self.key_id, "a cancelled command never announced its pid; closing its channel only");
            }
        }
        let _ = tx.close().await;
    }
}

#[async_trait]
impl Connector for SshConnector {
    async fn exec(&self, request: ExecRequest<'_>) -> Result<ExitStatus, ConnectError> {
        let line = format!(
            "{}{}",
            pid_marker::PROLOGUE,
            shell::with_env(&request.command, &request.env)?
        );
        let ExecRequest {
            stdin,
            mut stdout,
            mut stderr,
            cancel,
            ..
        } = request;
        if cancel.is_cancelled() {
            return Err(ConnectError::Cancelled);
        }
        let (conn, channel, started) = tokio::select! {
            r = self.start(&line) => r?,
            () = cancel.cancelled() => return Err(ConnectError::Cancelled),
        };
        let (mut rx, tx) = channel.split();
        let mut sinks = Sinks {
            stdout: &mut stdout,
            stderr: &mut stderr,
            sniffer: PidSniffer::new(),
            status: None,
        };
        let mut closed = false;
        let mut writer = tx.make_writer();
        let outcome: Result<(), ConnectError> = async {
            write_out(sinks.stdout, &started.stdout, "writing stdout").await?;
            sinks.stderr(&started.stderr).await?;
            for msg in started.early {
                closed |= sinks.on_message(msg).await?;
            }
            let feed = feed_stdin(stdin, &mut writer);
            tokio::pin!(feed);
            let mut fed = false;
            while !closed {
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => return Err(ConnectError::Cancelled),
                    r = &mut feed, if !fed => {
                        fed = true;
                        r?;
                    }
                    msg = rx.wait() => match msg {
                        Some(msg) => closed = sinks.on_message(msg).await?,
                        None => break,
                    },
                }
            }
            Ok(())
        }
        .await;
        if let Err(e) = outcome {
            // Cancelled, or stdin/stdout/stderr failed locally: stop the remote command.
            if !conn.is_dead() {
                self.stop(&mut rx, &tx, &mut sinks.sniffer).await;
            }
            return Err(e);
        }
        sinks.finish().await?;
        match sinks.status {
            Some(s) => Ok(s),
            None if conn.is_dead() || !closed => Err(conn.lost()),
            None => Err(ConnectError::Protocol(
                "the command's channel closed without an exit status".into(),
            )),
        }
    }

    async fn dial_stdio(&self, command: &str) -> Result<BoxedStream, ConnectError> {
        let (_conn, channel, started) = self.start(command).await?;
        if !started.stderr.is_empty() {
            tracing::debug!(%command, stderr = %String::from_utf8_lossy(&started.stderr), "dial-stdio stderr");
        }
        Ok(Box::new(Prefixed {
            prefix: started.stdout.freeze(),
            inner: channel.into_stream(),
        }))
    }

    async fn forward(&self, target: &ForwardTarget) -> Result<BoxedStream, ConnectError> {
        let kind = match target {
            ForwardTarget::Unix(path) => ChannelKind::StreamLocal(path),
            ForwardTarget::Tcp { host, port } => ChannelKind::TcpIp(host, *port),
        };
        let (_conn, channel) = self.open(&kind).await?;
        Ok(Box::new(channel.into_stream()))
    }

    async fn close(&self) {
        if let Some(c) = self.conn.lock().await.take() {
            let _ = c
                .handle
                .disconnect(russh::Disconnect::ByApplication, "", "en")
                .await;
        }
    }
}

/// A stream that first yields bytes already received, then reads from `inner`.
struct Prefixed<S> {
    prefix: Bytes,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            let chunk = self.prefix.split_to(n);
            buf.put_slice(&chunk);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_connections_are_classified() {
        let ka = Some(Duration::from_secs(2));
        let e = ended_error(Some(Ended::KeepaliveTimeout), "a:22", ka, 3);
        assert!(
            matches!(e, ConnectError::Timeout { after, .. } if after == Duration::from_secs(8)),
            "{e}"
        );
        assert!(e.is_retryable());
        let e = ended_error(Some(Ended::Io("reset".into())), "a:22", ka, 3);
        assert!(matches!(e, ConnectError::Network { .. }), "{e}");
        let e = ended_error(None, "a:22", ka, 3);
        assert!(matches!(e, ConnectError::Network { .. }), "{e}");
    }

    #[test]
    fn russh_errors_are_classified() {
        let observed = Observed::default();
        let c = |e| classify(e, "x", "a:22", &observed, None, 3);
        assert!(matches!(
            c(russh::Error::IO(
                std::io::ErrorKind::ConnectionRefused.into()
            )),
            ConnectError::Network { .. }
        ));
        assert!(matches!(
            c(russh::Error::KeepaliveTimeout),
            ConnectError::Timeout { .. }
        ));
        assert!(matches!(
            c(russh::Error::ChannelOpenFailure(
                russh::ChannelOpenFailure::ConnectFailed
            )),
            ConnectError::Remote { .. }
        ));
        assert!(matches!(
            c(russh::Error::WrongServerSig),
            ConnectError::Protocol(_)
        ));
        *observed.mismatch.lock().unwrap() = Some(("SHA256:a".into(), "SHA256:b".into()));
        assert!(matches!(
            c(russh::Error::UnknownKey),
            ConnectError::HostKeyMismatch { .. }
        ));
    }

    #[tokio::test]
    async fn prefixed_stream_yields_the_prefix_first() {
        use tokio::io::AsyncReadExt;
        let (a, mut b) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut b, b" world")
            .await
            .unwrap();
        drop(b);
        let mut p = Prefixed {
            prefix: Bytes::from_static(b"hello"),
            inner: a,
        };
        let mut s = String::new();
        p.read_to_string(&mut s).await.unwrap();
        assert_eq!(s, "hello world");
    }

    #[test]
    fn key_id_defaults_to_the_instance_id() {
        let mut info = ConnectInfo {
            config: Default::default(),
            id: "c1".into(),
            external_addr: "127.0.0.1:1".into(),
            internal_addr: "127.0.0.1:2".into(),
            expires: None,
        };
        assert_eq!(default_key_id(&info), "c1");
        info.id.clear();
        assert_eq!(default_key_id(&info), "127.0.0.1:2");
        let c = SshConnector::new(info).with_options(SshOptions {
            key_id: Some("pinned-id".into()),
            ..Default::default()
        });
        assert_eq!(c.key_id(), "pinned-id");
    }
}
