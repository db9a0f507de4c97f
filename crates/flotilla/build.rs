//! Records what the binary was built from, for `flotilla --version` and
//! `gitlab_runner_version_info`: the commit's short hash, its date (the commit's, not the
//! clock's, so that a rebuild of the same commit says the same) and branch, and the compiler
//! (`rustc 1.95.0`). Uncommitted changes are not told: the script reruns only when `HEAD`
//! moves, so a `-dirty` mark would go stale. Outside a git checkout (a source tarball) the
//! commit's facts are `unknown`.

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
    // A detached HEAD (CI's checkouts) has no branch: `HEAD` is what git answers then.
    let branch = git(&["rev-parse", "--abbrev-ref", "HEAD"]).filter(|b| b != "HEAD");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let compiler = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| {
            v.split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ")
                .into()
        })
        .filter(|v: &String| !v.is_empty());
    println!(
        "cargo:rustc-env=FLOTILLA_BRANCH={}",
        branch.unwrap_or_else(|| "unknown".to_string())
    );
    println!(
        "cargo:rustc-env=FLOTILLA_RUSTC={}",
        compiler.unwrap_or_else(|| "unknown".to_string())
    );
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
