//! Records which commit the binary was built from, for `flotilla --version`: the commit's
//! short hash and date (the commit's, not the clock's, so that a rebuild of the same commit
//! says the same). Uncommitted changes are not told: the script reruns only when `HEAD`
//! moves, so a `-dirty` mark would go stale. Outside a git checkout (a source tarball) both
//! are `unknown`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]);
    let date = git(&["log", "-1", "--format=%cs", "HEAD"]);
    println!(
        "cargo:rustc-env=FLOTILLA_COMMIT={}",
        commit.unwrap_or_else(|| "unknown".to_string())
    );
    println!(
        "cargo:rustc-env=FLOTILLA_COMMIT_DATE={}",
        date.unwrap_or_else(|| "unknown".to_string())
    );
    // A new commit or a checkout changes HEAD or the branch it points at. Only paths that
    // exist are named: cargo reruns a script whose named path is missing on every build.
    println!("cargo:rerun-if-changed=build.rs");
    for path in [
        "../../.git/HEAD",
        "../../.git/refs/heads",
        "../../.git/packed-refs",
    ] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
