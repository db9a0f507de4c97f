//! Starting commands and making connections for channels.

use crate::protocol::{OpenSpec, Status, Target};
use crate::{reaper, sys};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;

/// The environment of commands that bring none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Where named network namespaces are kept (bind mounts of `/proc/<pid>/ns/net`).
pub const NETNS_DIR: &str = "/run/flotilla/netns";

/// A started command.
pub enum Spawned {
    /// Running on the channel.
    Attached {
        pid: i32,
        stdin: Option<Box<dyn Write + Send>>,
        stdout: Option<Box<dyn Read + Send>>,
        stderr: Option<Box<dyn Read + Send>>,
        /// The terminal's master side (for resizing), when on a terminal.
        pty: Option<i32>,
        status: Receiver<Status>,
    },
    /// Running on its own, output to a file.
    Detached { pid: i32 },
}

fn invalid(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, msg)
}

/// Opens the named network namespace.
fn netns_file(name: &str) -> std::io::Result<std::fs::File> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(invalid(format!("bad network namespace name {name:?}")));
    }
    std::fs::File::open(format!("{NETNS_DIR}/{name}"))
        .map_err(|e| std::io::Error::new(e.kind(), format!("network namespace {name}: {e}")))
}

/// Starts the command of `spec` (a shell line or an argv).
pub fn command(spec: &OpenSpec) -> std::io::Result<Spawned> {
    let mut cmd = match &spec.target {
        Target::Shell(line) => {
            let mut c = Command::new("/bin/sh");
            c.arg("-c").arg(line);
            c
        }
        Target::Argv(argv) if !argv.is_empty() => {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        }
        _ => return Err(invalid("no command to run".into())),
    };
    cmd.env_clear();
    match &spec.env {
        Some(env) => {
            for (k, v) in env {
                cmd.env(k, v);
            }
        }
        None => {
            cmd.env("PATH", DEFAULT_PATH).env("HOME", "/root");
        }
    }
    let netns = spec.netns.as_deref().map(netns_file).transpose()?;
    let netns_fd = netns.as_ref().map(|f| f.as_raw_fd());
    let root = spec.root.clone();
    let cwd = spec.cwd.clone();
    let mut pty_pair = None;
    let mut log = None;
    if let Some((rows, cols)) = spec.pty {
        pty_pair = Some(sys::open_pty(rows, cols)?);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
    } else if let Some(path) = &spec.detach {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        cmd.stdin(Stdio::null())
            .stdout(f.try_clone()?)
            .stderr(f.try_clone()?);
        log = Some(f);
    } else {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    }
    let slave = pty_pair.map(|(_, s)| s);
    let master = pty_pair.map(|(m, _)| m);
    // SAFETY: only async-signal-safe calls (setsid, ioctl, dup2, setns, chroot, chdir,
    // sigprocmask) run between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            sys::new_session()?;
            if let Some(m) = master {
                sys::close_fd(m);
            }
            if let Some(s) = slave {
                sys::take_terminal(s)?;
            }
            if let Some(fd) = netns_fd {
                sys::enter_ns(fd)?;
            }
            if let Some(r) = root.as_deref() {
                sys::change_root(r)?;
            }
            if let Some(d) = cwd.as_deref() {
                std::env::set_current_dir(d)?;
            }
            sys::unblock_sigchld();
            Ok(())
        });
    }
    let mut child = {
        let _spawning = reaper::spawning();
        cmd.spawn()
    }
    .inspect_err(|_| {
        if let Some((m, s)) = pty_pair {
            sys::close_fd(m);
            sys::close_fd(s);
        }
    })?;
    drop(netns);
    drop(log);
    let pid = child.id() as i32;
    if spec.detach.is_some() {
        reaper::forget(pid);
        return Ok(Spawned::Detached { pid });
    }
    let status = reaper::watch(pid);
    if let Some((m, s)) = pty_pair {
        sys::close_fd(s);
        // SAFETY: `m` is ours; the writer gets a duplicate.
        let reader = unsafe { std::fs::File::from_raw_fd(m) };
        let writer = reader.try_clone()?;
        return Ok(Spawned::Attached {
            pid,
            stdin: Some(Box::new(writer)),
            stdout: Some(Box::new(reader)),
            stderr: None,
            pty: Some(m),
            status,
        });
    }
    Ok(Spawned::Attached {
        pid,
        stdin: child
            .stdin
            .take()
            .map(|w| Box::new(w) as Box<dyn Write + Send>),
        stdout: child
            .stdout
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
        stderr: child
            .stderr
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
        pty: None,
        status,
    })
}

/// A connected socket: its reading and writing halves.
pub type Socket = (Box<dyn Read + Send>, Box<dyn Write + Send>);

/// Connects to the TCP or unix target of `spec`, in its network namespace if it names one.
pub fn connect(spec: &OpenSpec) -> std::io::Result<Socket> {
    if let Some(name) = &spec.netns {
        // Only this thread enters the namespace; sockets made here stay in it.
        let ns = netns_file(name)?;
        sys::enter_ns(ns.as_raw_fd())?;
    }
    match &spec.target {
        Target::Tcp { host, port } => {
            let s = std::net::TcpStream::connect((host.as_str(), *port))?;
            let _ = s.set_nodelay(true);
            let w = s.try_clone()?;
            Ok((Box::new(s), Box::new(TcpWriter(w))))
        }
        Target::Unix(path) => {
            let s = std::os::unix::net::UnixStream::connect(path)?;
            let w = s.try_clone()?;
            Ok((Box::new(s), Box::new(UnixWriter(w))))
        }
        _ => Err(invalid("not a socket target".into())),
    }
}

/// The writing half of a TCP connection; shutting it down sends FIN.
struct TcpWriter(std::net::TcpStream);

impl Write for TcpWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl Drop for TcpWriter {
    fn drop(&mut self) {
        let _ = self.0.shutdown(std::net::Shutdown::Write);
    }
}

/// The writing half of a unix connection; shutting it down sends end-of-file.
struct UnixWriter(std::os::unix::net::UnixStream);

impl Write for UnixWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl Drop for UnixWriter {
    fn drop(&mut self) {
        let _ = self.0.shutdown(std::net::Shutdown::Write);
    }
}

/// Ends the writing half (the socket writers do it when dropped).
pub fn shutdown_write(w: &mut Box<dyn Write + Send>) {
    let _ = w.flush();
}
