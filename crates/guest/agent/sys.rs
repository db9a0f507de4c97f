//! The few C library calls the agent needs, declared by hand (the agent is built by `rustc`
//! alone, without crates), for Linux on x86-64 with glibc.

#![allow(non_camel_case_types)]

use std::ffi::CString;
use std::io;
use std::os::raw::{c_char, c_int, c_long, c_ulong, c_void};

pub type pid_t = i32;

/// glibc's `sigset_t`: 1024 bits.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sigset_t {
    bits: [u64; 16],
}

#[repr(C)]
pub struct winsize {
    pub ws_row: u16,
    pub ws_col: u16,
    pub ws_xpixel: u16,
    pub ws_ypixel: u16,
}

unsafe extern "C" {
    fn sigemptyset(set: *mut sigset_t) -> c_int;
    fn sigaddset(set: *mut sigset_t, sig: c_int) -> c_int;
    fn pthread_sigmask(how: c_int, set: *const sigset_t, old: *mut sigset_t) -> c_int;
    fn sigwait(set: *const sigset_t, sig: *mut c_int) -> c_int;
    fn waitpid(pid: pid_t, status: *mut c_int, options: c_int) -> pid_t;
    fn kill(pid: pid_t, sig: c_int) -> c_int;
    fn setsid() -> pid_t;
    fn getpid() -> pid_t;
    fn ioctl(fd: c_int, req: c_ulong, ...) -> c_int;
    fn openpty(
        amaster: *mut c_int,
        aslave: *mut c_int,
        name: *mut c_char,
        termp: *const c_void,
        winp: *const winsize,
    ) -> c_int;
    fn chroot(path: *const c_char) -> c_int;
    fn mount(
        src: *const c_char,
        target: *const c_char,
        fstype: *const c_char,
        flags: c_ulong,
        data: *const c_void,
    ) -> c_int;
    fn unshare(flags: c_int) -> c_int;
    fn setns(fd: c_int, nstype: c_int) -> c_int;
    fn sethostname(name: *const c_char, len: usize) -> c_int;
    fn reboot(cmd: c_int) -> c_int;
    fn sync();
    fn syscall(n: c_long, ...) -> c_long;
    fn dup2(old: c_int, new: c_int) -> c_int;
    fn close(fd: c_int) -> c_int;
    fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int;
    fn bind(fd: c_int, addr: *const c_void, len: u32) -> c_int;
    fn listen(fd: c_int, backlog: c_int) -> c_int;
    fn accept(fd: c_int, addr: *mut c_void, len: *mut u32) -> c_int;
    fn send(fd: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize;
    fn recv(fd: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize;
}

pub const SIGCHLD: c_int = 17;
pub const SIGKILL: c_int = 9;
const SIG_BLOCK: c_int = 0;
const SIG_UNBLOCK: c_int = 1;
pub const WNOHANG: c_int = 1;
const TIOCSCTTY: c_ulong = 0x540E;
const TIOCSWINSZ: c_ulong = 0x5414;
pub const MS_RDONLY: c_ulong = 1;
pub const MS_NOSUID: c_ulong = 2;
pub const MS_NODEV: c_ulong = 4;
pub const MS_NOEXEC: c_ulong = 8;
pub const MS_MOVE: c_ulong = 8192;
pub const MS_BIND: c_ulong = 4096;
pub const CLONE_NEWNET: c_int = 0x4000_0000;
const RB_POWER_OFF: c_int = 0x4321_FEDC;
const SYS_FINIT_MODULE: c_long = 313;
pub const AF_VSOCK: c_int = 40;
pub const AF_NETLINK: c_int = 16;
pub const SOCK_STREAM: c_int = 1;
pub const SOCK_DGRAM: c_int = 2;
pub const SOCK_RAW: c_int = 3;
pub const SOCK_CLOEXEC: c_int = 0o2000000;

fn check(r: c_int) -> io::Result<c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn cstr(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a string"))
}

fn sigchld_set() -> sigset_t {
    let mut set = sigset_t { bits: [0; 16] };
    // SAFETY: `set` is a valid sigset_t.
    unsafe {
        sigemptyset(&mut set);
        sigaddset(&mut set, SIGCHLD);
    }
    set
}

/// Blocks SIGCHLD in the calling thread (and the threads it starts later), so the reaper can
/// wait for it with [`wait_sigchld`].
pub fn block_sigchld() {
    let set = sigchld_set();
    // SAFETY: valid pointers.
    unsafe { pthread_sigmask(SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Unblocks SIGCHLD (in a child before `exec`: signal masks are inherited).
pub fn unblock_sigchld() {
    let set = sigchld_set();
    // SAFETY: valid pointers; async-signal-safe.
    unsafe { pthread_sigmask(SIG_UNBLOCK, &set, std::ptr::null_mut()) };
}

/// Waits until SIGCHLD is pending and takes it.
pub fn wait_sigchld() {
    let set = sigchld_set();
    let mut sig = 0;
    // SAFETY: valid pointers.
    unsafe { sigwait(&set, &mut sig) };
}

/// `waitpid(-1, WNOHANG)`: `Ok(Some((pid, raw status)))`, `Ok(None)` when no child has ended,
/// `Err` (ECHILD) when there are none.
pub fn reap_any() -> io::Result<Option<(pid_t, c_int)>> {
    let mut status = 0;
    // SAFETY: valid pointer.
    let r = unsafe { waitpid(-1, &mut status, WNOHANG) };
    match r {
        0 => Ok(None),
        r if r < 0 => Err(io::Error::last_os_error()),
        pid => Ok(Some((pid, status))),
    }
}

/// Sends `sig` to process group `pgid`.
pub fn kill_group(pgid: pid_t, sig: c_int) {
    if pgid > 1 {
        // SAFETY: plain syscall.
        unsafe { kill(-pgid, sig) };
    }
}

/// Sends `sig` to process `pid`.
pub fn kill_pid(pid: pid_t, sig: c_int) {
    if pid > 1 {
        // SAFETY: plain syscall.
        unsafe { kill(pid, sig) };
    }
}

/// This process's pid.
pub fn pid() -> pid_t {
    // SAFETY: plain syscall.
    unsafe { getpid() }
}

/// A new session (and process group) for the calling process.
pub fn new_session() -> io::Result<()> {
    // SAFETY: plain syscall.
    check(unsafe { setsid() }).map(drop)
}

/// A pseudo-terminal pair of this size: (master, slave).
pub fn open_pty(rows: u16, cols: u16) -> io::Result<(c_int, c_int)> {
    let (mut m, mut s) = (0, 0);
    let ws = winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: valid pointers.
    check(unsafe { openpty(&mut m, &mut s, std::ptr::null_mut(), std::ptr::null(), &ws) })?;
    Ok((m, s))
}

/// Makes `fd` (a terminal) the controlling terminal and stdin, stdout and stderr of the
/// calling process (a child after `setsid`).
pub fn take_terminal(fd: c_int) -> io::Result<()> {
    // SAFETY: plain syscalls on a valid descriptor.
    unsafe {
        check(ioctl(fd, TIOCSCTTY, 0))?;
        for target in 0..3 {
            check(dup2(fd, target))?;
        }
        if fd > 2 {
            close(fd);
        }
    }
    Ok(())
}

/// Sets a terminal's size.
pub fn set_window(fd: c_int, rows: u16, cols: u16) {
    let ws = winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: valid pointer.
    unsafe { ioctl(fd, TIOCSWINSZ, &ws) };
}

/// Closes a descriptor.
pub fn close_fd(fd: c_int) {
    // SAFETY: the caller owns `fd`.
    unsafe { close(fd) };
}

/// `chroot(path)` then `chdir("/")`.
pub fn change_root(path: &str) -> io::Result<()> {
    let p = cstr(path)?;
    // SAFETY: valid C string.
    check(unsafe { chroot(p.as_ptr()) })?;
    std::env::set_current_dir("/")
}

/// `mount(2)`.
pub fn mount_fs(
    src: &str,
    target: &str,
    fstype: &str,
    flags: c_ulong,
    data: &str,
) -> io::Result<()> {
    let (s, t, f, d) = (cstr(src)?, cstr(target)?, cstr(fstype)?, cstr(data)?);
    // SAFETY: valid C strings.
    check(unsafe {
        mount(
            s.as_ptr(),
            t.as_ptr(),
            if fstype.is_empty() {
                std::ptr::null()
            } else {
                f.as_ptr()
            },
            flags,
            if data.is_empty() {
                std::ptr::null()
            } else {
                d.as_ptr().cast()
            },
        )
    })
    .map(drop)
}

/// A new network namespace for the calling thread.
pub fn unshare_net() -> io::Result<()> {
    // SAFETY: plain syscall.
    check(unsafe { unshare(CLONE_NEWNET) }).map(drop)
}

/// Enters the namespace `fd` refers to (0: any type).
pub fn enter_ns(fd: c_int) -> io::Result<()> {
    // SAFETY: plain syscall.
    check(unsafe { setns(fd, 0) }).map(drop)
}

/// Sets the host name.
pub fn set_hostname(name: &str) -> io::Result<()> {
    // SAFETY: valid pointer and length.
    check(unsafe { sethostname(name.as_ptr().cast(), name.len()) }).map(drop)
}

/// Flushes file systems.
pub fn sync_all() {
    // SAFETY: plain syscall.
    unsafe { sync() };
}

/// Powers the machine off (PID 1 only); does not return on success.
pub fn power_off() {
    sync_all();
    // SAFETY: plain syscall.
    unsafe { reboot(RB_POWER_OFF) };
}

/// Loads a kernel module from an open file.
pub fn load_module(fd: c_int) -> io::Result<()> {
    let params = cstr("")?;
    // SAFETY: finit_module(fd, params, flags).
    let r = unsafe { syscall(SYS_FINIT_MODULE, fd, params.as_ptr(), 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A socket.
pub fn new_socket(domain: c_int, ty: c_int, proto: c_int) -> io::Result<c_int> {
    // SAFETY: plain syscall.
    check(unsafe { socket(domain, ty | SOCK_CLOEXEC, proto) })
}

/// `bind(2)` with a raw address.
pub fn bind_raw(fd: c_int, addr: &[u8]) -> io::Result<()> {
    // SAFETY: valid pointer and length.
    check(unsafe { bind(fd, addr.as_ptr().cast(), addr.len() as u32) }).map(drop)
}

/// `listen(2)`.
pub fn listen_on(fd: c_int) -> io::Result<()> {
    // SAFETY: plain syscall.
    check(unsafe { listen(fd, 16) }).map(drop)
}

/// `accept(2)`, without the peer's address.
pub fn accept_one(fd: c_int) -> io::Result<c_int> {
    // SAFETY: null address pointers are allowed.
    check(unsafe { accept(fd, std::ptr::null_mut(), std::ptr::null_mut()) })
}

/// `send(2)`.
pub fn send_all(fd: c_int, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: valid pointer and length.
        let n = unsafe { send(fd, buf.as_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// `recv(2)`.
pub fn recv_some(fd: c_int, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: valid pointer and length.
        let n = unsafe { recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(n as usize);
    }
}

/// Decodes a raw wait status.
pub fn decode_status(raw: c_int) -> crate::protocol::Status {
    let sig = raw & 0x7f;
    if sig == 0 {
        crate::protocol::Status::Code((raw >> 8) & 0xff)
    } else {
        crate::protocol::Status::Signal {
            number: sig,
            core: raw & 0x80 != 0,
        }
    }
}
