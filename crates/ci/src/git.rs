//! Asking the local `git` binary about the project. Every question may go unanswered (no git
//! installed, not a repository, no commits yet), so answers are optional.

use std::path::Path;
use std::process::{Command, Stdio};

/// Run `git args...` in `dir`; its standard output when it exits 0.
pub(crate) fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    String::from_utf8(output.stdout).ok()
}

/// `git -C dir args…`'s standard output when it exits 0, without the final line break,
/// and `None` when empty.
pub fn git_line(dir: &Path, args: &[&str]) -> Option<String> {
    let text = git(dir, args)?;
    let text = text.trim_end_matches(['\n', '\r']).to_string();
    (!text.is_empty()).then_some(text)
}
