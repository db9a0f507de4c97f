//! The watchdog that kills the process groups of this process's children (local commands,
//! provider plugins) when this process dies, however it dies (`kill -9` included).
//!
//! One small `sh` per flotilla process reads `+ <pgid>` and `- <pgid>` lines on a pipe from
//! this process: the groups of the commands running now. When the pipe closes, because this
//! process exited or was killed, it sends SIGKILL to every group still listed. Compared with a
//! parent-death signal per command, it costs no process per command (setting a parent-death
//! signal takes code in the child before `exec`: a `fork` of all of flotilla, or a helper
//! program to `exec` through), and it stops a command's whole group, not only its shell.
//!
//! A command is listed just after it is spawned: a death in between (microseconds) leaves
//! that one unlisted. A watchdog that died is started again at the next command and told of
//! every group still listed.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

/// The watchdog's program (POSIX `sh`, builtins only).
const SCRIPT: &str = r#"g=' '
while read -r op id; do
  case "$op" in
    +) g="$g$id " ;;
    -) case "$g" in *" $id "*) g="${g%% $id *} ${g#* $id }" ;; esac ;;
  esac
done
for id in $g; do kill -KILL "-$id" 2>/dev/null; done
"#;

/// The running watchdog, if any, and the groups listed with it.
struct State {
    child: Option<Child>,
    listed: BTreeSet<i32>,
}

static WATCHDOG: Mutex<State> = Mutex::new(State {
    child: None,
    listed: BTreeSet::new(),
});

fn spawn() -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    Command::new("/bin/sh")
        .arg("-c")
        .arg(SCRIPT)
        // Nothing of flotilla's environment (tokens) in a long-lived helper.
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Not in flotilla's group: a Ctrl-C aimed at flotilla must not stop it first.
        .process_group(0)
        .spawn()
}

impl State {
    /// A live watchdog, started (and told of every listed group) if there is none or the
    /// last one died.
    fn live(&mut self) -> Option<&mut Child> {
        if let Some(child) = self.child.as_mut()
            && !matches!(child.try_wait(), Ok(None))
        {
            // It exited (or cannot be asked): reap it, start another.
            let _ = child.wait();
            self.child = None;
        }
        if self.child.is_none() {
            let mut child = match spawn() {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the local process watchdog");
                    return None;
                }
            };
            let relist: String = self.listed.iter().map(|g| format!("+ {g}\n")).collect();
            if let Some(stdin) = child.stdin.as_mut()
                && !relist.is_empty()
                && stdin.write_all(relist.as_bytes()).is_err()
            {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            self.child = Some(child);
        }
        self.child.as_mut()
    }

    /// Writes `line`; on failure the watchdog is dropped (the next call starts another).
    fn send(&mut self, line: &str) -> bool {
        let written = self
            .live()
            .and_then(|c| c.stdin.as_mut())
            .is_some_and(|stdin| stdin.write_all(line.as_bytes()).is_ok());
        if !written && let Some(mut dead) = self.child.take() {
            let _ = dead.kill();
            let _ = dead.wait();
        }
        written
    }
}

fn state() -> std::sync::MutexGuard<'static, State> {
    WATCHDOG.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether a watchdog runs (starting it if needed): if not, commands need another way to
/// die with this process.
pub fn available() -> bool {
    state().live().is_some()
}

/// Lists the process group `pgid` (a command just spawned as its leader). Returns whether
/// the watchdog has it.
fn add(pgid: i32) -> bool {
    let mut s = state();
    s.listed.insert(pgid);
    let ok = s.send(&format!("+ {pgid}\n"));
    if !ok {
        s.listed.remove(&pgid);
    }
    ok
}

/// Unlists the process group `pgid` (its command ended or was killed).
fn remove(pgid: i32) {
    let mut s = state();
    if s.listed.remove(&pgid) {
        s.send(&format!("- {pgid}\n"));
    }
}

/// A process group listed with the watchdog for as long as this value lives: dropping it
/// unlists the group (it does not kill it).
#[derive(Debug)]
pub struct Watched {
    pgid: i32,
}

impl Watched {
    /// Lists the group `pgid` (a child just spawned as its leader); `None` when no watchdog
    /// can run, so the caller needs another way to make the group die with this process.
    pub fn new(pgid: i32) -> Option<Watched> {
        add(pgid).then_some(Watched { pgid })
    }

    /// The group listed.
    pub fn pgid(&self) -> i32 {
        self.pgid
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        remove(self.pgid);
    }
}
