//! Starting a plugin so that it cannot outlive flotilla.
//!
//! The kernel kills the plugin when flotilla dies, `kill -9` included: the child asks for
//! `PR_SET_PDEATHSIG` between fork and exec. That signal is sent when the *thread* that
//! forked exits, not the process, so plugins are forked by one thread that lives as long
//! as flotilla, never by a runtime's worker or blocking thread (which come and go). The
//! signal reaches the plugin only, not processes it started: for those, the plugin's whole
//! process group is listed with `flotilla_reaper`'s watchdog ([`crate::process`]).
//!
//! The plugin gets a process group of its own, so that a Ctrl-C at flotilla's terminal
//! does not stop it before flotilla has used it to delete instances at shutdown
//! (gitlab-runner#37642): flotilla stops its plugins itself, last.

use std::io;
use std::sync::{Mutex, OnceLock, mpsc};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

struct Request {
    command: Command,
    runtime: tokio::runtime::Handle,
    reply: oneshot::Sender<io::Result<Child>>,
}

fn spawner() -> io::Result<mpsc::Sender<Request>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    if let Some(tx) = SPAWNER.get() {
        return Ok(tx.lock().unwrap_or_else(|e| e.into_inner()).clone());
    }
    let (tx, rx) = mpsc::channel::<Request>();
    std::thread::Builder::new()
        .name("plugin-spawner".into())
        .spawn(move || {
            // The sender lives in a static: this loop, and the thread, never end.
            while let Ok(mut request) = rx.recv() {
                let _entered = request.runtime.enter();
                let _ = request.reply.send(request.command.spawn());
            }
        })?;
    let stored = SPAWNER.get_or_init(|| Mutex::new(tx));
    Ok(stored.lock().unwrap_or_else(|e| e.into_inner()).clone())
}

/// Spawns `command` from the long-lived spawner thread, in its own process group, to be
/// killed by the kernel when flotilla dies.
pub(crate) async fn spawn(mut command: Command) -> io::Result<Child> {
    let parent = std::process::id();
    command.process_group(0);
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe
    // calls (prctl, getppid, _exit).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // flotilla may have died between fork and prctl: then the signal never comes.
            if libc::getppid() as u32 != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let (reply, answer) = oneshot::channel();
    spawner()?
        .send(Request {
            command,
            runtime: tokio::runtime::Handle::current(),
            reply,
        })
        .map_err(|_| io::Error::other("the plugin spawner thread is gone"))?;
    answer
        .await
        .map_err(|_| io::Error::other("the plugin spawner thread is gone"))?
}
