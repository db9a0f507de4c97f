//! The session: frames in from the host, channels (commands, terminals, sockets) out.

use crate::builtins;
use crate::protocol::{Decoder, Frame, OpenSpec, Status, Target, VERSION, WINDOW};
use crate::spawn::{self, Spawned};
use crate::sys;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// The session frames belong to; frames of an ended session are dropped unsent.
static EPOCH: AtomicU64 = AtomicU64::new(0);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How much of a channel's output window is left.
pub struct Credit {
    state: Mutex<(u32, bool)>,
    cv: Condvar,
}

impl Credit {
    fn new() -> Arc<Credit> {
        Arc::new(Credit {
            state: Mutex::new((WINDOW, false)),
            cv: Condvar::new(),
        })
    }

    /// Waits for some window and takes up to `max` of it; `None` once closed.
    pub fn take(&self, max: u32) -> Option<u32> {
        let mut s = lock(&self.state);
        loop {
            if s.1 {
                return None;
            }
            if s.0 > 0 {
                let n = s.0.min(max);
                s.0 -= n;
                return Some(n);
            }
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Returns `n` bytes of window.
    pub fn give(&self, n: u32) {
        let mut s = lock(&self.state);
        s.0 = s.0.saturating_add(n);
        self.cv.notify_all();
    }

    /// Wakes and stops every waiter for good.
    pub fn close(&self) {
        lock(&self.state).1 = true;
        self.cv.notify_all();
    }
}

/// Where frames to the host go: one writer thread, in order.
#[derive(Clone)]
pub struct Outbox {
    tx: SyncSender<(u64, Vec<u8>)>,
    epoch: u64,
}

impl Outbox {
    /// Queues a frame of this outbox's session.
    pub fn send(&self, frame: &Frame) {
        let _ = self.tx.send((self.epoch, frame.to_bytes()));
    }

    /// Whether the session is still the current one.
    pub fn current(&self) -> bool {
        EPOCH.load(Ordering::SeqCst) == self.epoch
    }
}

/// Input for a channel's writer thread.
pub enum Input {
    Data(Vec<u8>),
    Eof,
}

struct Chan {
    epoch: u64,
    /// The process group to signal (0: none).
    pgid: i32,
    credit: Arc<Credit>,
    stdin: Option<Sender<Input>>,
    /// A terminal's master side, for resizing.
    pty: Option<i32>,
}

type Channels = Arc<Mutex<HashMap<u32, Chan>>>;

/// What the agent reads frames from and writes frames to.
pub trait Link: Send {
    /// Reads some bytes; `Ok(0)` means the host went away.
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize>;
    /// What to do when the host went away: `false` ends the agent, `true` waits for it.
    fn reconnects(&self) -> bool;
    /// Waits for the host to come back (a new connection); `false` when it cannot.
    fn wait_for_host(&mut self) -> bool;
    /// The writer for the current connection.
    fn writer(&mut self) -> std::io::Result<Box<dyn Write + Send>>;
}

/// Serves sessions over `link` until it ends for good.
pub fn serve(mut link: Box<dyn Link>) {
    let (tx, rx) = sync_channel::<(u64, Vec<u8>)>(256);
    let writer: Arc<Mutex<Option<Box<dyn Write + Send>>>> = Arc::new(Mutex::new(None));
    match link.writer() {
        Ok(w) => *lock(&writer) = Some(w),
        Err(e) => eprintln!("flotilla-agent: no writer: {e}"),
    }
    {
        let writer = writer.clone();
        std::thread::spawn(move || write_loop(rx, writer));
    }
    let channels: Channels = Arc::new(Mutex::new(HashMap::new()));
    let mut decoder = Decoder::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match link.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => 0,
        };
        if n == 0 {
            if !link.reconnects() {
                return;
            }
            if !link.wait_for_host() {
                return;
            }
            // A new connection is a new byte stream: nothing half-read carries over.
            decoder = Decoder::new();
            if let Ok(w) = link.writer() {
                *lock(&writer) = Some(w);
            }
            continue;
        }
        decoder.push(&buf[..n]);
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => handle(frame, &tx, &channels),
                Ok(None) => break,
                Err(e) => {
                    // A stream we cannot parse (stale bytes, a host speaking nonsense):
                    // drop what we hold and wait for the next hello.
                    eprintln!("flotilla-agent: {e}; resynchronising");
                    if !decoder.resync_hello() {
                        break;
                    }
                }
            }
        }
    }
}

fn write_loop(rx: Receiver<(u64, Vec<u8>)>, writer: Arc<Mutex<Option<Box<dyn Write + Send>>>>) {
    let mut pending: Vec<u8> = Vec::new();
    while let Ok((epoch, bytes)) = rx.recv() {
        if epoch != EPOCH.load(Ordering::SeqCst) {
            continue;
        }
        pending.extend_from_slice(&bytes);
        // Batch what is queued already: fewer writes to a slow port.
        while pending.len() < 256 * 1024 {
            match rx.try_recv() {
                Ok((e, b)) if e == EPOCH.load(Ordering::SeqCst) => pending.extend_from_slice(&b),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let mut w = lock(&writer);
        if let Some(out) = w.as_mut()
            && (out.write_all(&pending).is_err() || out.flush().is_err())
        {
            // The host went away: what it did not get is lost with its session.
            *w = None;
        }
        pending.clear();
    }
}

fn handle(frame: Frame, tx: &SyncSender<(u64, Vec<u8>)>, channels: &Channels) {
    match frame {
        Frame::Hello { nonce } => {
            let epoch = EPOCH.fetch_add(1, Ordering::SeqCst) + 1;
            let old: Vec<Chan> = lock(channels).drain().map(|(_, c)| c).collect();
            for c in old {
                end_channel(c);
            }
            let out = Outbox {
                tx: tx.clone(),
                epoch,
            };
            out.send(&Frame::HelloAck {
                nonce,
                version: VERSION,
                info: info(),
            });
        }
        Frame::Open { channel, spec } => {
            let out = Outbox {
                tx: tx.clone(),
                epoch: EPOCH.load(Ordering::SeqCst),
            };
            if lock(channels).contains_key(&channel) {
                out.send(&Frame::OpenFailed {
                    channel,
                    message: "the channel is in use".into(),
                });
                return;
            }
            open(channel, spec, out, channels.clone());
        }
        Frame::Stdin { channel, data } => {
            if let Some(tx) = lock(channels).get(&channel).and_then(|c| c.stdin.as_ref()) {
                let _ = tx.send(Input::Data(data));
            }
        }
        Frame::StdinEof { channel } => {
            if let Some(c) = lock(channels).get_mut(&channel)
                && let Some(tx) = c.stdin.take()
            {
                let _ = tx.send(Input::Eof);
            }
        }
        Frame::AckOut { channel, bytes } => {
            if let Some(c) = lock(channels).get(&channel) {
                c.credit.give(bytes);
            }
        }
        Frame::Signal { channel, signal } => {
            if let Some(c) = lock(channels).get(&channel) {
                sys::kill_group(c.pgid, signal);
            }
        }
        Frame::Resize {
            channel,
            rows,
            cols,
        } => {
            if let Some(fd) = lock(channels).get(&channel).and_then(|c| c.pty) {
                sys::set_window(fd, rows, cols);
            }
        }
        Frame::Close { channel } => {
            let c = lock(channels).remove(&channel);
            if let Some(c) = c {
                end_channel(c);
            }
        }
        // Frames only the agent sends: a confused host; ignore them.
        Frame::HelloAck { .. }
        | Frame::Opened { .. }
        | Frame::OpenFailed { .. }
        | Frame::Stdout { .. }
        | Frame::Stderr { .. }
        | Frame::AckIn { .. }
        | Frame::Exit { .. } => {}
    }
}

/// Kills a channel's processes and wakes its threads.
fn end_channel(c: Chan) {
    let _ = c.epoch;
    sys::kill_group(c.pgid, sys::SIGKILL);
    c.credit.close();
    if let Some(tx) = c.stdin {
        let _ = tx.send(Input::Eof);
    }
}

fn info() -> String {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let uptime = std::fs::read_to_string("/proc/uptime").unwrap_or_default();
    format!(
        "linux {} up {}s pid {}",
        release.trim(),
        uptime.split_whitespace().next().unwrap_or("?"),
        sys::pid()
    )
}

fn open(channel: u32, spec: OpenSpec, out: Outbox, channels: Channels) {
    let credit = Credit::new();
    match &spec.target {
        Target::Tcp { .. } | Target::Unix(_) => {
            // Connecting may take a while: not on the thread that reads frames.
            std::thread::spawn(move || match spawn::connect(&spec) {
                Ok(sock) => start_socket(channel, sock, out, channels, credit),
                Err(e) => out.send(&Frame::OpenFailed {
                    channel,
                    message: e.to_string(),
                }),
            });
        }
        Target::Builtin(args) => {
            let args = args.clone();
            lock(&channels).insert(
                channel,
                Chan {
                    epoch: out.epoch,
                    pgid: 0,
                    credit,
                    stdin: None,
                    pty: None,
                },
            );
            out.send(&Frame::Opened { channel });
            std::thread::spawn(move || {
                let (code, text) = builtins::run(&args);
                let stream = if code == 0 {
                    Frame::Stdout {
                        channel,
                        data: text.into_bytes(),
                    }
                } else {
                    Frame::Stderr {
                        channel,
                        data: text.into_bytes(),
                    }
                };
                if lock(&channels).remove(&channel).is_some() {
                    out.send(&stream);
                    out.send(&Frame::Exit {
                        channel,
                        status: Status::Code(code),
                    });
                }
            });
        }
        Target::Shell(_) | Target::Argv(_) => match spawn::command(&spec) {
            Ok(Spawned::Detached { pid }) => {
                out.send(&Frame::Opened { channel });
                out.send(&Frame::Stdout {
                    channel,
                    data: format!("{pid}\n").into_bytes(),
                });
                out.send(&Frame::Exit {
                    channel,
                    status: Status::Code(0),
                });
            }
            Ok(Spawned::Attached {
                pid,
                stdin,
                stdout,
                stderr,
                pty,
                status,
            }) => {
                let (in_tx, in_rx) = mpsc::channel::<Input>();
                lock(&channels).insert(
                    channel,
                    Chan {
                        epoch: out.epoch,
                        pgid: pid,
                        credit: credit.clone(),
                        stdin: Some(in_tx),
                        pty,
                    },
                );
                out.send(&Frame::Opened { channel });
                if let Some(w) = stdin {
                    let out = out.clone();
                    std::thread::spawn(move || feed(channel, w, in_rx, out, false));
                }
                let mut readers = Vec::new();
                if let Some(r) = stdout {
                    let (out, credit) = (out.clone(), credit.clone());
                    readers.push(std::thread::spawn(move || {
                        pump(channel, r, false, &out, &credit)
                    }));
                }
                if let Some(r) = stderr {
                    let (out, credit) = (out.clone(), credit.clone());
                    readers.push(std::thread::spawn(move || {
                        pump(channel, r, true, &out, &credit)
                    }));
                }
                std::thread::spawn(move || {
                    // The status first: a background process may hold the output open, but
                    // the channel's readers end when it is killed or closes it.
                    let status = status.recv().unwrap_or(Status::Code(-1));
                    for r in readers {
                        let _ = r.join();
                    }
                    if lock(&channels).remove(&channel).is_some() {
                        out.send(&Frame::Exit { channel, status });
                    }
                });
            }
            Err(e) => out.send(&Frame::OpenFailed {
                channel,
                message: e.to_string(),
            }),
        },
    }
}

fn start_socket(
    channel: u32,
    sock: spawn::Socket,
    out: Outbox,
    channels: Channels,
    credit: Arc<Credit>,
) {
    let (in_tx, in_rx) = mpsc::channel::<Input>();
    lock(&channels).insert(
        channel,
        Chan {
            epoch: out.epoch,
            pgid: 0,
            credit: credit.clone(),
            stdin: Some(in_tx),
            pty: None,
        },
    );
    out.send(&Frame::Opened { channel });
    let (reader, writer) = sock;
    {
        let out = out.clone();
        std::thread::spawn(move || feed(channel, writer, in_rx, out, true));
    }
    pump(channel, reader, false, &out, &credit);
    if lock(&channels).remove(&channel).is_some() {
        out.send(&Frame::Exit {
            channel,
            status: Status::Code(0),
        });
    }
}

/// Copies a process's (or socket's) output to the host within the channel's window.
fn pump(channel: u32, mut r: Box<dyn Read + Send>, err: bool, out: &Outbox, credit: &Credit) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let Some(allowed) = credit.take(buf.len() as u32) else {
            return;
        };
        let n = loop {
            match r.read(&mut buf[..allowed as usize]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // EIO: a terminal whose other side closed.
                Err(_) => break 0,
            }
        };
        credit.give(allowed - n as u32);
        if n == 0 || !out.current() {
            return;
        }
        let data = buf[..n].to_vec();
        out.send(&if err {
            Frame::Stderr { channel, data }
        } else {
            Frame::Stdout { channel, data }
        });
    }
}

/// Writes the host's input for a channel, acknowledging what was written.
fn feed(
    channel: u32,
    mut w: Box<dyn Write + Send>,
    rx: Receiver<Input>,
    out: Outbox,
    shutdown: bool,
) {
    let mut broken = false;
    while let Ok(input) = rx.recv() {
        match input {
            Input::Data(data) => {
                if !broken && w.write_all(&data).is_err() {
                    // The process stopped reading: keep acknowledging so the host does not
                    // stall, and drop the rest.
                    broken = true;
                }
                out.send(&Frame::AckIn {
                    channel,
                    bytes: data.len() as u32,
                });
            }
            Input::Eof => break,
        }
    }
    let _ = w.flush();
    if shutdown {
        spawn::shutdown_write(&mut w);
    }
}

/// A reader over the virtio-serial port, the agent's usual link inside a VM.
pub struct PortLink {
    file: std::fs::File,
}

impl PortLink {
    /// The port at `path` (`/dev/vportNpM`).
    pub fn open(path: &str) -> std::io::Result<PortLink> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        Ok(PortLink { file })
    }
}

impl Link for PortLink {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.file.read(buf)
    }

    fn reconnects(&self) -> bool {
        true
    }

    fn wait_for_host(&mut self) -> bool {
        // The port reads end-of-file while no host is connected (virtio_console's
        // `port_fops_read`); poll for its return. Writes block until then.
        std::thread::sleep(Duration::from_millis(5));
        true
    }

    fn writer(&mut self) -> std::io::Result<Box<dyn Write + Send>> {
        Ok(Box::new(self.file.try_clone()?))
    }
}

/// stdin and stdout of the agent process (tests, and running the agent over any command
/// channel).
pub struct StdioLink;

impl Link for StdioLink {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        std::io::stdin().lock().read(buf)
    }

    fn reconnects(&self) -> bool {
        false
    }

    fn wait_for_host(&mut self) -> bool {
        false
    }

    fn writer(&mut self) -> std::io::Result<Box<dyn Write + Send>> {
        Ok(Box::new(std::io::stdout()))
    }
}

/// Connections accepted on a listening socket (vsock), one session at a time.
pub struct ListenLink {
    listener: i32,
    conn: Option<std::fs::File>,
}

impl ListenLink {
    /// Listens on vsock `port` for connections from the host (CID 2).
    pub fn vsock(port: u32) -> std::io::Result<ListenLink> {
        let fd = sys::new_socket(sys::AF_VSOCK, sys::SOCK_STREAM, 0)?;
        // struct sockaddr_vm { sa_family_t family; u16 reserved; u32 port; u32 cid; u8 zero[4]; }
        let mut addr = Vec::with_capacity(16);
        addr.extend_from_slice(&(sys::AF_VSOCK as u16).to_ne_bytes());
        addr.extend_from_slice(&0u16.to_ne_bytes());
        addr.extend_from_slice(&port.to_ne_bytes());
        addr.extend_from_slice(&u32::MAX.to_ne_bytes()); // VMADDR_CID_ANY
        addr.extend_from_slice(&[0; 4]);
        sys::bind_raw(fd, &addr)?;
        sys::listen_on(fd)?;
        let mut link = ListenLink {
            listener: fd,
            conn: None,
        };
        link.accept()?;
        Ok(link)
    }

    fn accept(&mut self) -> std::io::Result<()> {
        use std::os::fd::FromRawFd;
        let fd = sys::accept_one(self.listener)?;
        // SAFETY: a new descriptor we own.
        self.conn = Some(unsafe { std::fs::File::from_raw_fd(fd) });
        Ok(())
    }
}

impl Link for ListenLink {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.conn.as_mut() {
            Some(c) => c.read(buf),
            None => Ok(0),
        }
    }

    fn reconnects(&self) -> bool {
        true
    }

    fn wait_for_host(&mut self) -> bool {
        self.conn = None;
        self.accept().is_ok()
    }

    fn writer(&mut self) -> std::io::Result<Box<dyn Write + Send>> {
        match self.conn.as_ref() {
            Some(c) => Ok(Box::new(c.try_clone()?)),
            None => Err(std::io::ErrorKind::NotConnected.into()),
        }
    }
}
