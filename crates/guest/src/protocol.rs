//! The wire protocol between flotilla (the host side) and its agent in a guest (pure, `std`
//! only: the agent compiles this same file).
//!
//! One byte stream (a virtio-serial port, a vsock connection, or a pipe in tests) carries
//! many *channels*, each a command, a pseudo-terminal session or a socket connection in the
//! guest. Every message is a frame:
//!
//! ```text
//! u32 length (big-endian; of what follows: kind, channel, payload) | u8 kind | u32 channel | payload
//! ```
//!
//! - A session starts with [`Frame::Hello`] carrying a random nonce; the agent answers
//!   [`Frame::HelloAck`] with [`MAGIC`] and the same nonce. The stream may hold stale bytes
//!   of an earlier session (a VM restored from a snapshot still had frames in flight towards
//!   the old host), so the host skips everything up to the acknowledgement of its own nonce
//!   ([`Decoder::sync`]). A new session ends every channel of the one before.
//! - Flow control is per channel and direction, like SSH's windows: neither side sends more
//!   than [`WINDOW`] bytes of data the other has not acknowledged ([`Frame::AckOut`] for
//!   output, [`Frame::AckIn`] for input). A peer that overruns a window breaks the protocol
//!   and the session is dropped: the guest is not trusted to be well-behaved.

use std::fmt;

/// Bytes that open the payload of [`Frame::HelloAck`]; the host scans for them (followed by
/// its nonce) to find the start of its session in a stream.
pub const MAGIC: [u8; 8] = *b"FLTAGENT";

/// The protocol version both sides speak.
pub const VERSION: u16 = 1;

/// The most payload one frame carries.
pub const MAX_PAYLOAD: usize = 64 * 1024;

/// Unacknowledged data bytes allowed per channel and direction.
pub const WINDOW: u32 = 256 * 1024;

/// Bytes before the payload: length, kind, channel.
pub const HEADER: usize = 9;

/// The virtio-serial port name the agent listens on (`/sys/class/virtio-ports/*/name`).
pub const PORT_NAME: &str = "org.flotilla.agent";

/// The vsock port the agent listens on when the VMM offers vsock instead of virtio-serial
/// (Firecracker, Cloud Hypervisor).
pub const VSOCK_PORT: u32 = 1024;

/// How a command ended in the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal {
        /// The signal number (Linux x86-64 numbering).
        number: i32,
        /// Whether it dumped core.
        core: bool,
    },
}

/// What a channel connects to in the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A command line for `/bin/sh -c`.
    Shell(String),
    /// A program and its arguments, run directly.
    Argv(Vec<String>),
    /// A TCP connection to this host and port, made in the guest.
    Tcp {
        /// Host name or address (resolved in the guest).
        host: String,
        /// Port.
        port: u16,
    },
    /// A unix socket in the guest.
    Unix(String),
    /// One of the agent's own operations (its name, then its arguments): see the agent.
    Builtin(Vec<String>),
}

/// How to open a channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenSpec {
    /// What to run or connect to.
    pub target: Target,
    /// The environment of a command; `None` is the agent's default (`PATH`, `HOME`).
    pub env: Option<Vec<(String, String)>>,
    /// The working directory of a command.
    pub cwd: Option<String>,
    /// A directory to `chroot` into before running the command (a service's root).
    pub root: Option<String>,
    /// A named network namespace to run the command or make the connection in (a service's).
    pub netns: Option<String>,
    /// Run the command on a pseudo-terminal of this size (rows, columns): stdout carries the
    /// terminal's output, stderr is unused.
    pub pty: Option<(u16, u16)>,
    /// Run the command detached from the session: its output goes to this file in the guest,
    /// it outlives the session, and the channel ends at once with its pid on stdout.
    pub detach: Option<String>,
}

impl OpenSpec {
    /// A spec for `target` with every option at its default.
    pub fn new(target: Target) -> OpenSpec {
        OpenSpec {
            target,
            env: None,
            cwd: None,
            root: None,
            netns: None,
            pty: None,
            detach: None,
        }
    }
}

/// One message.
#[derive(Clone, PartialEq, Eq)]
pub enum Frame {
    /// Host → guest: start a session.
    Hello {
        /// Random; echoed in the acknowledgement.
        nonce: [u8; 16],
    },
    /// Guest → host: the session has started.
    HelloAck {
        /// The nonce of the [`Frame::Hello`] answered.
        nonce: [u8; 16],
        /// The agent's protocol version.
        version: u16,
        /// What the agent says about itself (kernel, uptime), for logs.
        info: String,
    },
    /// Host → guest: open a channel.
    Open {
        /// A channel number not in use.
        channel: u32,
        /// What to open.
        spec: OpenSpec,
    },
    /// Guest → host: the channel is open.
    Opened {
        /// The channel.
        channel: u32,
    },
    /// Guest → host: the channel could not be opened (it is closed).
    OpenFailed {
        /// The channel.
        channel: u32,
        /// Why.
        message: String,
    },
    /// Host → guest: input.
    Stdin {
        /// The channel.
        channel: u32,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Host → guest: no more input.
    StdinEof {
        /// The channel.
        channel: u32,
    },
    /// Guest → host: output.
    Stdout {
        /// The channel.
        channel: u32,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Guest → host: error output.
    Stderr {
        /// The channel.
        channel: u32,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Host → guest: `bytes` of output were consumed.
    AckOut {
        /// The channel.
        channel: u32,
        /// How many.
        bytes: u32,
    },
    /// Guest → host: `bytes` of input were consumed.
    AckIn {
        /// The channel.
        channel: u32,
        /// How many.
        bytes: u32,
    },
    /// Host → guest: send a signal to the channel's process group.
    Signal {
        /// The channel.
        channel: u32,
        /// The signal number.
        signal: i32,
    },
    /// Host → guest: the terminal's size changed.
    Resize {
        /// The channel.
        channel: u32,
        /// Rows.
        rows: u16,
        /// Columns.
        cols: u16,
    },
    /// Guest → host: the channel's command ended (after all its output); the channel is
    /// closed.
    Exit {
        /// The channel.
        channel: u32,
        /// How it ended.
        status: Status,
    },
    /// Host → guest: forget the channel, killing its process group if it still runs.
    Close {
        /// The channel.
        channel: u32,
    },
}

impl fmt::Debug for Frame {
    /// Data is shown by size only: it may hold secrets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Frame::Hello { .. } => write!(f, "Hello"),
            Frame::HelloAck { version, info, .. } => write!(f, "HelloAck(v{version}, {info})"),
            Frame::Open { channel, spec } => {
                let what = match &spec.target {
                    Target::Shell(_) => "shell",
                    Target::Argv(_) => "argv",
                    Target::Tcp { .. } => "tcp",
                    Target::Unix(_) => "unix",
                    Target::Builtin(_) => "builtin",
                };
                write!(f, "Open({channel}, {what})")
            }
            Frame::Opened { channel } => write!(f, "Opened({channel})"),
            Frame::OpenFailed { channel, message } => write!(f, "OpenFailed({channel}, {message})"),
            Frame::Stdin { channel, data } => write!(f, "Stdin({channel}, {} bytes)", data.len()),
            Frame::StdinEof { channel } => write!(f, "StdinEof({channel})"),
            Frame::Stdout { channel, data } => write!(f, "Stdout({channel}, {} bytes)", data.len()),
            Frame::Stderr { channel, data } => write!(f, "Stderr({channel}, {} bytes)", data.len()),
            Frame::AckOut { channel, bytes } => write!(f, "AckOut({channel}, {bytes})"),
            Frame::AckIn { channel, bytes } => write!(f, "AckIn({channel}, {bytes})"),
            Frame::Signal { channel, signal } => write!(f, "Signal({channel}, {signal})"),
            Frame::Resize {
                channel,
                rows,
                cols,
            } => write!(f, "Resize({channel}, {rows}x{cols})"),
            Frame::Exit { channel, status } => write!(f, "Exit({channel}, {status:?})"),
            Frame::Close { channel } => write!(f, "Close({channel})"),
        }
    }
}

/// A malformed stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    /// A frame announced more than [`MAX_PAYLOAD`] (or less than a header's worth).
    BadLength(u32),
    /// A frame of a kind this version does not know.
    UnknownKind(u8),
    /// A frame's payload does not match its kind.
    BadPayload {
        /// The frame kind.
        kind: u8,
        /// What was wrong.
        what: &'static str,
    },
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtocolError::BadLength(n) => write!(f, "a frame of impossible length {n}"),
            ProtocolError::UnknownKind(k) => write!(f, "a frame of unknown kind {k:#04x}"),
            ProtocolError::BadPayload { kind, what } => {
                write!(f, "a malformed frame of kind {kind:#04x}: {what}")
            }
        }
    }
}

impl std::error::Error for ProtocolError {}

mod kind {
    pub(super) const HELLO: u8 = 0x01;
    pub(super) const OPEN: u8 = 0x02;
    pub(super) const STDIN: u8 = 0x03;
    pub(super) const STDIN_EOF: u8 = 0x04;
    pub(super) const SIGNAL: u8 = 0x05;
    pub(super) const RESIZE: u8 = 0x06;
    pub(super) const ACK_OUT: u8 = 0x07;
    pub(super) const CLOSE: u8 = 0x08;
    pub(super) const HELLO_ACK: u8 = 0x81;
    pub(super) const OPENED: u8 = 0x82;
    pub(super) const OPEN_FAILED: u8 = 0x83;
    pub(super) const STDOUT: u8 = 0x84;
    pub(super) const STDERR: u8 = 0x85;
    pub(super) const EXIT: u8 = 0x86;
    pub(super) const ACK_IN: u8 = 0x87;
}

/// Field tags of an encoded [`OpenSpec`].
mod tag {
    pub(super) const SHELL: u8 = 1;
    pub(super) const ARGV: u8 = 2;
    pub(super) const TCP: u8 = 3;
    pub(super) const UNIX: u8 = 4;
    pub(super) const BUILTIN: u8 = 5;
    pub(super) const ENV: u8 = 10;
    pub(super) const ENV_EMPTY: u8 = 11;
    pub(super) const CWD: u8 = 12;
    pub(super) const ROOT: u8 = 13;
    pub(super) const NETNS: u8 = 14;
    pub(super) const PTY: u8 = 15;
    pub(super) const DETACH: u8 = 16;
}

fn put_field(out: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
    out.push(tag);
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn encode_spec(spec: &OpenSpec, out: &mut Vec<u8>) {
    match &spec.target {
        Target::Shell(line) => put_field(out, tag::SHELL, line.as_bytes()),
        Target::Argv(argv) => {
            for a in argv {
                put_field(out, tag::ARGV, a.as_bytes());
            }
        }
        Target::Tcp { host, port } => {
            let mut b = port.to_be_bytes().to_vec();
            b.extend_from_slice(host.as_bytes());
            put_field(out, tag::TCP, &b);
        }
        Target::Unix(path) => put_field(out, tag::UNIX, path.as_bytes()),
        Target::Builtin(args) => {
            for a in args {
                put_field(out, tag::BUILTIN, a.as_bytes());
            }
        }
    }
    match &spec.env {
        None => {}
        Some(env) if env.is_empty() => put_field(out, tag::ENV_EMPTY, &[]),
        Some(env) => {
            for (k, v) in env {
                put_field(out, tag::ENV, format!("{k}={v}").as_bytes());
            }
        }
    }
    for (t, v) in [
        (tag::CWD, &spec.cwd),
        (tag::ROOT, &spec.root),
        (tag::NETNS, &spec.netns),
        (tag::DETACH, &spec.detach),
    ] {
        if let Some(v) = v {
            put_field(out, t, v.as_bytes());
        }
    }
    if let Some((rows, cols)) = spec.pty {
        let mut b = rows.to_be_bytes().to_vec();
        b.extend_from_slice(&cols.to_be_bytes());
        put_field(out, tag::PTY, &b);
    }
}

fn bad(kind: u8, what: &'static str) -> ProtocolError {
    ProtocolError::BadPayload { kind, what }
}

fn text(kind: u8, b: &[u8]) -> Result<String, ProtocolError> {
    String::from_utf8(b.to_vec()).map_err(|_| bad(kind, "text is not UTF-8"))
}

fn decode_spec(mut p: &[u8]) -> Result<OpenSpec, ProtocolError> {
    let k = kind::OPEN;
    let mut target: Option<Target> = None;
    let mut spec = OpenSpec::new(Target::Argv(Vec::new()));
    let mut argv: Vec<String> = Vec::new();
    let mut builtin: Vec<String> = Vec::new();
    while !p.is_empty() {
        if p.len() < 5 {
            return Err(bad(k, "truncated field"));
        }
        let t = p[0];
        let len = u32::from_be_bytes([p[1], p[2], p[3], p[4]]) as usize;
        if p.len() < 5 + len {
            return Err(bad(k, "truncated field"));
        }
        let v = &p[5..5 + len];
        p = &p[5 + len..];
        match t {
            tag::SHELL => target = Some(Target::Shell(text(k, v)?)),
            tag::ARGV => argv.push(text(k, v)?),
            tag::BUILTIN => builtin.push(text(k, v)?),
            tag::TCP => {
                if v.len() < 2 {
                    return Err(bad(k, "short tcp target"));
                }
                target = Some(Target::Tcp {
                    port: u16::from_be_bytes([v[0], v[1]]),
                    host: text(k, &v[2..])?,
                });
            }
            tag::UNIX => target = Some(Target::Unix(text(k, v)?)),
            tag::ENV => {
                let kv = text(k, v)?;
                let (key, value) = kv.split_once('=').ok_or(bad(k, "env without ="))?;
                spec.env
                    .get_or_insert_with(Vec::new)
                    .push((key.to_string(), value.to_string()));
            }
            tag::ENV_EMPTY => spec.env = Some(Vec::new()),
            tag::CWD => spec.cwd = Some(text(k, v)?),
            tag::ROOT => spec.root = Some(text(k, v)?),
            tag::NETNS => spec.netns = Some(text(k, v)?),
            tag::DETACH => spec.detach = Some(text(k, v)?),
            tag::PTY => {
                if v.len() != 4 {
                    return Err(bad(k, "pty size is not 4 bytes"));
                }
                spec.pty = Some((
                    u16::from_be_bytes([v[0], v[1]]),
                    u16::from_be_bytes([v[2], v[3]]),
                ));
            }
            _ => return Err(bad(k, "unknown field")),
        }
    }
    spec.target = match (target, argv.is_empty(), builtin.is_empty()) {
        (Some(t), true, true) => t,
        (None, false, true) => Target::Argv(argv),
        (None, true, false) => Target::Builtin(builtin),
        _ => return Err(bad(k, "not exactly one target")),
    };
    Ok(spec)
}

fn u32_at(p: &[u8], kind: u8) -> Result<u32, ProtocolError> {
    let b: [u8; 4] = p.try_into().map_err(|_| bad(kind, "not 4 bytes"))?;
    Ok(u32::from_be_bytes(b))
}

impl Frame {
    /// The channel the frame belongs to (0 for session frames).
    pub fn channel(&self) -> u32 {
        match self {
            Frame::Hello { .. } | Frame::HelloAck { .. } => 0,
            Frame::Open { channel, .. }
            | Frame::Opened { channel }
            | Frame::OpenFailed { channel, .. }
            | Frame::Stdin { channel, .. }
            | Frame::StdinEof { channel }
            | Frame::Stdout { channel, .. }
            | Frame::Stderr { channel, .. }
            | Frame::AckOut { channel, .. }
            | Frame::AckIn { channel, .. }
            | Frame::Signal { channel, .. }
            | Frame::Resize { channel, .. }
            | Frame::Exit { channel, .. }
            | Frame::Close { channel } => *channel,
        }
    }

    /// Appends the encoded frame to `out`. Data frames must carry at most [`MAX_PAYLOAD`]
    /// bytes (split larger writes).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        let (k, ch) = (self.kind(), self.channel());
        out.push(k);
        out.extend_from_slice(&ch.to_be_bytes());
        match self {
            Frame::Hello { nonce } => {
                out.extend_from_slice(&MAGIC);
                out.extend_from_slice(nonce);
                out.extend_from_slice(&VERSION.to_be_bytes());
            }
            Frame::HelloAck {
                nonce,
                version,
                info,
            } => {
                out.extend_from_slice(&MAGIC);
                out.extend_from_slice(nonce);
                out.extend_from_slice(&version.to_be_bytes());
                out.extend_from_slice(info.as_bytes());
            }
            Frame::Open { spec, .. } => encode_spec(spec, out),
            Frame::OpenFailed { message, .. } => out.extend_from_slice(message.as_bytes()),
            Frame::Stdin { data, .. } | Frame::Stdout { data, .. } | Frame::Stderr { data, .. } => {
                out.extend_from_slice(data);
            }
            Frame::AckOut { bytes, .. } | Frame::AckIn { bytes, .. } => {
                out.extend_from_slice(&bytes.to_be_bytes());
            }
            Frame::Signal { signal, .. } => out.extend_from_slice(&signal.to_be_bytes()),
            Frame::Resize { rows, cols, .. } => {
                out.extend_from_slice(&rows.to_be_bytes());
                out.extend_from_slice(&cols.to_be_bytes());
            }
            Frame::Exit { status, .. } => match status {
                Status::Code(c) => {
                    out.push(0);
                    out.extend_from_slice(&c.to_be_bytes());
                }
                Status::Signal { number, core } => {
                    out.push(if *core { 2 } else { 1 });
                    out.extend_from_slice(&number.to_be_bytes());
                }
            },
            Frame::Opened { .. } | Frame::StdinEof { .. } | Frame::Close { .. } => {}
        }
        let len = (out.len() - start - 4) as u32;
        out[start..start + 4].copy_from_slice(&len.to_be_bytes());
    }

    /// The encoded frame.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(&mut v);
        v
    }

    fn kind(&self) -> u8 {
        match self {
            Frame::Hello { .. } => kind::HELLO,
            Frame::HelloAck { .. } => kind::HELLO_ACK,
            Frame::Open { .. } => kind::OPEN,
            Frame::Opened { .. } => kind::OPENED,
            Frame::OpenFailed { .. } => kind::OPEN_FAILED,
            Frame::Stdin { .. } => kind::STDIN,
            Frame::StdinEof { .. } => kind::STDIN_EOF,
            Frame::Stdout { .. } => kind::STDOUT,
            Frame::Stderr { .. } => kind::STDERR,
            Frame::AckOut { .. } => kind::ACK_OUT,
            Frame::AckIn { .. } => kind::ACK_IN,
            Frame::Signal { .. } => kind::SIGNAL,
            Frame::Resize { .. } => kind::RESIZE,
            Frame::Exit { .. } => kind::EXIT,
            Frame::Close { .. } => kind::CLOSE,
        }
    }

    /// Decodes one frame from its kind, channel and payload.
    pub fn decode(k: u8, channel: u32, p: &[u8]) -> Result<Frame, ProtocolError> {
        Ok(match k {
            kind::HELLO => {
                if p.len() != 26 || p[..8] != MAGIC {
                    return Err(bad(k, "hello without magic"));
                }
                let mut nonce = [0; 16];
                nonce.copy_from_slice(&p[8..24]);
                Frame::Hello { nonce }
            }
            kind::HELLO_ACK => {
                if p.len() < 26 || p[..8] != MAGIC {
                    return Err(bad(k, "hello-ack without magic"));
                }
                let mut nonce = [0; 16];
                nonce.copy_from_slice(&p[8..24]);
                Frame::HelloAck {
                    nonce,
                    version: u16::from_be_bytes([p[24], p[25]]),
                    info: String::from_utf8_lossy(&p[26..]).into_owned(),
                }
            }
            kind::OPEN => Frame::Open {
                channel,
                spec: decode_spec(p)?,
            },
            kind::OPENED => Frame::Opened { channel },
            kind::OPEN_FAILED => Frame::OpenFailed {
                channel,
                message: String::from_utf8_lossy(p).into_owned(),
            },
            kind::STDIN => Frame::Stdin {
                channel,
                data: p.to_vec(),
            },
            kind::STDIN_EOF => Frame::StdinEof { channel },
            kind::STDOUT => Frame::Stdout {
                channel,
                data: p.to_vec(),
            },
            kind::STDERR => Frame::Stderr {
                channel,
                data: p.to_vec(),
            },
            kind::ACK_OUT => Frame::AckOut {
                channel,
                bytes: u32_at(p, k)?,
            },
            kind::ACK_IN => Frame::AckIn {
                channel,
                bytes: u32_at(p, k)?,
            },
            kind::SIGNAL => Frame::Signal {
                channel,
                signal: u32_at(p, k)? as i32,
            },
            kind::RESIZE => {
                if p.len() != 4 {
                    return Err(bad(k, "resize is not 4 bytes"));
                }
                Frame::Resize {
                    channel,
                    rows: u16::from_be_bytes([p[0], p[1]]),
                    cols: u16::from_be_bytes([p[2], p[3]]),
                }
            }
            kind::EXIT => {
                if p.len() != 5 {
                    return Err(bad(k, "exit is not 5 bytes"));
                }
                let v = i32::from_be_bytes([p[1], p[2], p[3], p[4]]);
                let status = match p[0] {
                    0 => Status::Code(v),
                    1 => Status::Signal {
                        number: v,
                        core: false,
                    },
                    2 => Status::Signal {
                        number: v,
                        core: true,
                    },
                    _ => return Err(bad(k, "unknown exit kind")),
                };
                Frame::Exit { channel, status }
            }
            kind::CLOSE => Frame::Close { channel },
            other => return Err(ProtocolError::UnknownKind(other)),
        })
    }
}

/// Splits a byte stream into frames.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    start: usize,
}

impl Decoder {
    /// An empty decoder.
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Adds bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > 64 * 1024 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held that are not yet a whole frame.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The next whole frame, if one has arrived.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, ProtocolError> {
        let b = &self.buf[self.start..];
        if b.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        if (len as usize) < HEADER - 4 || len as usize > HEADER - 4 + MAX_PAYLOAD + 64 {
            return Err(ProtocolError::BadLength(len));
        }
        let total = 4 + len as usize;
        if b.len() < total {
            return Ok(None);
        }
        let k = b[4];
        let channel = u32::from_be_bytes([b[5], b[6], b[7], b[8]]);
        let frame = Frame::decode(k, channel, &b[HEADER..total]);
        self.start += total;
        frame.map(Some)
    }

    /// Skips everything before the [`Frame::HelloAck`] for `nonce`; returns whether it was
    /// found (bytes before it are dropped, so the next frame is the acknowledgement). Keeps
    /// enough of the tail to find a marker split across reads.
    pub fn sync(&mut self, nonce: &[u8; 16]) -> bool {
        let mut marker = Vec::with_capacity(MAGIC.len() + 16);
        marker.extend_from_slice(&MAGIC);
        marker.extend_from_slice(nonce);
        let b = &self.buf[self.start..];
        if let Some(pos) = b.windows(marker.len()).position(|w| w == marker.as_slice())
            && pos >= HEADER
        {
            self.start += pos - HEADER;
            return true;
        }
        // Keep a tail that may hold the beginning of the header and marker.
        let keep = HEADER + marker.len();
        if b.len() > keep {
            self.start += b.len() - keep;
        }
        false
    }

    /// After a malformed frame (the agent's side): skips to the next [`Frame::Hello`] held,
    /// or drops everything but a tail that may begin one. Returns whether one was found.
    pub fn resync_hello(&mut self) -> bool {
        let b = &self.buf[self.start..];
        let found = b
            .windows(MAGIC.len())
            .enumerate()
            .skip(HEADER)
            .find(|(pos, w)| *w == MAGIC && b[pos - HEADER + 4] == kind::HELLO)
            .map(|(pos, _)| pos - HEADER);
        match found {
            Some(pos) => {
                self.start += pos;
                true
            }
            None => {
                let keep = HEADER + MAGIC.len();
                if b.len() > keep {
                    self.start += b.len() - keep;
                }
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(f: Frame) {
        let bytes = f.to_bytes();
        let mut d = Decoder::new();
        // Byte by byte: frames arrive in pieces.
        for (i, b) in bytes.iter().enumerate() {
            assert_eq!(d.next_frame().unwrap(), None, "early at {i}: {f:?}");
            d.push(&[*b]);
        }
        assert_eq!(d.next_frame().unwrap(), Some(f.clone()));
        assert_eq!(d.next_frame().unwrap(), None);
    }

    #[test]
    fn every_frame_roundtrips() {
        let mut spec = OpenSpec::new(Target::Shell("echo 'a b'; exit 3".into()));
        spec.env = Some(vec![
            ("A".into(), "x=y".into()),
            ("B".into(), String::new()),
        ]);
        spec.cwd = Some("/builds/0/p".into());
        spec.pty = Some((24, 80));
        spec.root = Some("/.flotilla/services/0".into());
        spec.netns = Some("svc0".into());
        spec.detach = Some("/run/svc0.log".into());
        for f in [
            Frame::Hello { nonce: [7; 16] },
            Frame::HelloAck {
                nonce: [9; 16],
                version: VERSION,
                info: "linux 6.1".into(),
            },
            Frame::Open { channel: 5, spec },
            Frame::Open {
                channel: 6,
                spec: OpenSpec::new(Target::Argv(vec!["ls".into(), "-l".into()])),
            },
            Frame::Open {
                channel: 7,
                spec: OpenSpec {
                    env: Some(Vec::new()),
                    ..OpenSpec::new(Target::Tcp {
                        host: "127.0.0.1".into(),
                        port: 2375,
                    })
                },
            },
            Frame::Open {
                channel: 8,
                spec: OpenSpec::new(Target::Unix("/var/run/docker.sock".into())),
            },
            Frame::Open {
                channel: 9,
                spec: OpenSpec::new(Target::Builtin(vec!["sync".into()])),
            },
            Frame::Opened { channel: 5 },
            Frame::OpenFailed {
                channel: 5,
                message: "no such file".into(),
            },
            Frame::Stdin {
                channel: 1,
                data: vec![0, 1, 2, 255],
            },
            Frame::StdinEof { channel: 1 },
            Frame::Stdout {
                channel: 1,
                data: b"out".to_vec(),
            },
            Frame::Stderr {
                channel: 1,
                data: Vec::new(),
            },
            Frame::AckOut {
                channel: 2,
                bytes: WINDOW,
            },
            Frame::AckIn {
                channel: 2,
                bytes: 1,
            },
            Frame::Signal {
                channel: 3,
                signal: 15,
            },
            Frame::Resize {
                channel: 3,
                rows: 50,
                cols: 132,
            },
            Frame::Exit {
                channel: 4,
                status: Status::Code(-1),
            },
            Frame::Exit {
                channel: 4,
                status: Status::Signal {
                    number: 9,
                    core: true,
                },
            },
            Frame::Close { channel: 4 },
        ] {
            roundtrip(f);
        }
    }

    #[test]
    fn impossible_lengths_and_kinds_are_errors() {
        let mut d = Decoder::new();
        d.push(&u32::MAX.to_be_bytes());
        assert!(matches!(d.next_frame(), Err(ProtocolError::BadLength(_))));
        let mut d = Decoder::new();
        d.push(&[0, 0, 0, 5, 0x42, 0, 0, 0, 1]);
        assert_eq!(d.next_frame(), Err(ProtocolError::UnknownKind(0x42)));
        let mut d = Decoder::new();
        let mut bytes = Frame::Resize {
            channel: 1,
            rows: 1,
            cols: 1,
        }
        .to_bytes();
        bytes[3] -= 1;
        bytes.pop();
        d.push(&bytes);
        assert!(matches!(
            d.next_frame(),
            Err(ProtocolError::BadPayload { .. })
        ));
    }

    #[test]
    fn an_open_needs_exactly_one_target() {
        let mut p = Vec::new();
        put_field(&mut p, tag::SHELL, b"true");
        put_field(&mut p, tag::ARGV, b"ls");
        assert!(decode_spec(&p).is_err());
        assert!(decode_spec(&[]).is_err());
    }

    #[test]
    fn sync_skips_stale_bytes_and_foreign_acknowledgements() {
        let mine = [1u8; 16];
        let mut d = Decoder::new();
        // Half a frame of an earlier session, an acknowledgement of another nonce, garbage.
        let stale = Frame::Stdout {
            channel: 3,
            data: vec![b'x'; 100],
        }
        .to_bytes();
        d.push(&stale[..50]);
        d.push(
            &Frame::HelloAck {
                nonce: [2; 16],
                version: VERSION,
                info: String::new(),
            }
            .to_bytes(),
        );
        assert!(!d.sync(&mine));
        let ack = Frame::HelloAck {
            nonce: mine,
            version: VERSION,
            info: "ok".into(),
        }
        .to_bytes();
        // The acknowledgement arrives split; sync must find it across the split.
        d.push(&ack[..20]);
        assert!(!d.sync(&mine));
        d.push(&ack[20..]);
        d.push(&Frame::Opened { channel: 1 }.to_bytes());
        assert!(d.sync(&mine));
        assert!(matches!(
            d.next_frame().unwrap(),
            Some(Frame::HelloAck { nonce, .. }) if nonce == mine
        ));
        assert_eq!(d.next_frame().unwrap(), Some(Frame::Opened { channel: 1 }));
    }

    #[test]
    fn the_agent_finds_the_next_hello_after_garbage() {
        let mut d = Decoder::new();
        let stale = Frame::AckOut {
            channel: 3,
            bytes: 10,
        }
        .to_bytes();
        d.push(&stale[2..]);
        d.push(&Frame::Hello { nonce: [5; 16] }.to_bytes());
        assert!(d.next_frame().is_err() || d.pending() > 0);
        let mut d2 = Decoder::new();
        d2.push(&stale[2..]);
        d2.push(&Frame::Hello { nonce: [5; 16] }.to_bytes());
        assert!(d2.resync_hello());
        assert_eq!(
            d2.next_frame().unwrap(),
            Some(Frame::Hello { nonce: [5; 16] })
        );
    }
}
