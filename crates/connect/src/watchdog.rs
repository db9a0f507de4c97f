//! The watchdog that kills the process groups of running local commands when this process
//! dies, however it dies (`kill -9` included).
//!
//! One small `sh` per flotilla process reads `+ <pgid>` and `- <pgid>` lines on a pipe from
//! this process: the groups of the commands running now. When the pipe closes, because this
//! process exited or was killed, it sends SIGKILL to every group still listed. Compared with a
//! parent-death signal per command, it costs no process per command (setting a parent-death
//! signal takes code in the child before `exec`: a `fork` of all of flotilla, or a helper
//! program to `exec` through), and it stops a command's whole group, not only its shell.
//!
//! A command is listed just after it is spawned: a death in between (microseconds) leaves
//! that one unlisted. A watchdog that died is started again at the next command.

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

/// The running watchdog, if any.
static WATCHDOG: Mutex<Option<Child>> = Mutex::new(None);

fn spawn() -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    Command::new("sh")
        .arg("-c")
        .arg(SCRIPT)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Not in flotilla's group: a Ctrl-C aimed at flotilla must not stop it first.
        .process_group(0)
        .spawn()
}

/// Writes `line` to the watchdog, starting one if there is none or the last one died.
/// Returns whether it was written.
fn send(line: &str) -> bool {
    let mut guard = WATCHDOG.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..2 {
        if guard.is_none() {
            match spawn() {
                Ok(child) => *guard = Some(child),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the local process watchdog");
                    return false;
                }
            }
        }
        let written = guard
            .as_mut()
            .and_then(|c| c.stdin.as_mut())
            .is_some_and(|stdin| stdin.write_all(line.as_bytes()).is_ok());
        if written {
            return true;
        }
        // It died: reap it and start another.
        if let Some(mut dead) = guard.take() {
            let _ = dead.kill();
            let _ = dead.wait();
        }
    }
    false
}

/// Whether a watchdog runs (starting it if needed): if not, commands need another way to
/// die with this process.
pub(crate) fn available() -> bool {
    send("")
}

/// Lists the process group `pgid` (a command just spawned as its leader).
pub(crate) fn add(pgid: i32) -> bool {
    send(&format!("+ {pgid}\n"))
}

/// Unlists the process group `pgid` (its command ended or was killed).
pub(crate) fn remove(pgid: i32) {
    send(&format!("- {pgid}\n"));
}
