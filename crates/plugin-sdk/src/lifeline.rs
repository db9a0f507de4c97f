//! A plugin never outlives flotilla: it exits when its parent is gone.
//!
//! fleeting's plugins did outlive their runner and kept changing cloud capacity for nobody
//! (gitlab-runner#38716). flotilla asks the kernel to kill the plugin when it dies
//! (`PR_SET_PDEATHSIG`), and the SDK checks again from its side, for hosts and systems
//! where that is not available: end of file on stdin when the host holds it open as a
//! lifeline ([`ENV_LIFELINE`]), and a change of parent process otherwise.

use flotilla_plugin_protocol::handshake::{ENV_LIFELINE, LIFELINE_STDIN};
use std::io::Read;
use std::time::Duration;

/// How often the parent process is checked.
const PARENT_POLL: Duration = Duration::from_millis(500);

/// Starts the watchers. They end the process, without ceremony: with the host gone there
/// is nobody to answer and nothing that may still be decided.
pub(crate) fn watch_parent() {
    // SAFETY: getppid cannot fail.
    let parent = unsafe { libc::getppid() };
    if std::env::var(ENV_LIFELINE).is_ok_and(|v| v == LIFELINE_STDIN) {
        let _ = std::thread::Builder::new()
            .name("plugin-lifeline".into())
            .spawn(|| {
                let mut stdin = std::io::stdin().lock();
                let mut buf = [0u8; 256];
                loop {
                    match stdin.read(&mut buf) {
                        Ok(0) => std::process::exit(3),
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => std::process::exit(3),
                    }
                }
            });
    }
    let _ = std::thread::Builder::new()
        .name("plugin-parent".into())
        .spawn(move || {
            loop {
                std::thread::sleep(PARENT_POLL);
                // SAFETY: getppid cannot fail.
                if unsafe { libc::getppid() } != parent {
                    std::process::exit(3);
                }
            }
        });
}
