//! The destination of an extraction, checked on disk before anything is written.
//!
//! An archive that is safe alone can still write outside its directory through what is
//! already there: a symbolic link an earlier archive left (a dependency's artifacts, a cache
//! restored before), or one a job made in its own build directory, which at the docker and
//! microvm levels the helper place (outside the job's container or VM) then extracts into.
//! `tar` follows such links for every directory above an entry. So before extracting, one
//! fixed command in the helper place checks that no directory an entry goes through is a link
//! leading out of the destination, and that the destination itself is not reached through a
//! link below the builds directory. The entries' names are job-controlled: they travel as
//! NUL-separated data on the command's stdin, never in its text.
//!
//! A process of the job running while the helper extracts (the build container's entrypoint
//! starts with the container) could still swap a link in between the check and the
//! extraction. Where that matters, the level confines the helper place itself: at `docker` it
//! is a container whose only writable directory is the job's slot directory
//! (`flotilla_isolate::docker::helper`), so a link swapped in leads nowhere else; at `microvm`
//! nothing of the job runs on the instance (its files come back filtered after each build
//! stage); at `shell` and `cgroup` the helper place is the job's own.

use super::ArchiveError;
use super::paths::ancestors;
use crate::env::{Environment, ExecCommand, ExecSpec, Place};
use crate::script::quote;
use crate::trace::TraceWriter;
use std::collections::BTreeSet;
use tokio_util::sync::CancellationToken;

/// Every directory the entries go through, parents before children: the proper prefixes of
/// each name and every directory entry itself (tar sets a directory's mode through a link).
pub(super) fn directories<'a>(entries: impl Iterator<Item = (&'a str, bool)>) -> BTreeSet<String> {
    let mut dirs = BTreeSet::new();
    for (name, is_dir) in entries {
        dirs.extend(ancestors(name).map(str::to_owned));
        if is_dir {
            dirs.insert(name.to_owned());
        }
    }
    dirs
}

/// The directories from just below `builds_dir` down to `dir`, when `dir` is below it.
pub(super) fn own_path(builds_dir: &str, dir: &str) -> Vec<String> {
    let base = builds_dir.trim_end_matches('/');
    let Some(rest) = dir.strip_prefix(base).and_then(|r| r.strip_prefix('/')) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut path = base.to_owned();
    for part in rest.split('/').filter(|p| !p.is_empty() && *p != ".") {
        path.push('/');
        path.push_str(part);
        out.push(path.clone());
    }
    out
}

/// The fixed check: fails naming the first of `dir`'s own directories
/// that is a link; otherwise reads NUL-separated names relative to `dir` on stdin and, for the
/// first that is a link not resolving to a directory inside `dir`, prints it (NUL-ended) and
/// fails.
pub(super) fn check_command(builds_dir: &str, dir: &str) -> String {
    let mut own = String::new();
    for p in own_path(builds_dir, dir) {
        own.push(' ');
        own.push_str(&quote(&p));
    }
    let qdir = quote(dir);
    format!(
        "for p in{own}; do if [ -L \"$p\" ]; then printf '%s\\0' \"$p\"; exit 3; fi; done; \
         cd -P -- {qdir} 2>/dev/null || exit 0; root=$(pwd -P) || exit 2; \
         exec xargs -0 -r sh -c 'root=$1; shift; for p do if [ -L \"$p\" ]; then \
         r=$(cd -P -- \"$p\" 2>/dev/null && pwd -P) || r=; \
         case $r in \"$root\"|\"$root\"/*) ;; *) printf \"%s\\0\" \"$p\"; exit 255;; esac; fi; done' sh \"$root\""
    )
}

/// Runs the check for `names` (relative to `dir`) in the helper place.
pub(super) async fn check(
    env: &dyn Environment,
    dir: &str,
    names: &BTreeSet<String>,
    log: &TraceWriter,
    cancel: &CancellationToken,
) -> Result<(), ArchiveError> {
    if env.helper_files_here() {
        let (builds_dir, dir, names) = (
            env.paths().builds_dir.clone(),
            dir.to_owned(),
            names.clone(),
        );
        let checked = tokio::task::spawn_blocking(move || {
            super::here::check_destination(&builds_dir, &dir, &names)
        })
        .await
        .map_err(|e| ArchiveError::Io {
            context: "checking the destination".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        return super::here::unless_canceled(checked, cancel);
    }
    let mut input = Vec::new();
    for n in names {
        input.extend_from_slice(n.as_bytes());
        input.push(0);
    }
    let mut out: Vec<u8> = Vec::new();
    let status = env
        .exec(ExecSpec {
            place: Place::Helper,
            command: ExecCommand::Command(check_command(&env.paths().builds_dir, dir)),
            stdin: Some(Box::new(std::io::Cursor::new(input))),
            stdout: Box::new(&mut out),
            stderr: Box::new(log.clone()),
            cancel: cancel.clone(),
        })
        .await
        .map_err(|e| ArchiveError::env("checking the destination", e))?;
    if cancel.is_cancelled() {
        return Err(ArchiveError::Canceled);
    }
    if status.success() {
        return Ok(());
    }
    let named = out.split(|b| *b == 0).next().unwrap_or_default();
    if named.is_empty() {
        return Err(ArchiveError::Command {
            what: "the destination check".into(),
            status,
        });
    }
    let name = String::from_utf8_lossy(named).into_owned();
    Err(ArchiveError::LinkOnDisk { name })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_directory_an_entry_goes_through_is_checked_parents_first() {
        let dirs =
            directories([("a/b/c.txt", false), ("a/x", true), ("top.txt", false)].into_iter());
        assert_eq!(dirs.into_iter().collect::<Vec<_>>(), ["a", "a/b", "a/x"]);
    }

    #[test]
    fn the_destination_is_checked_from_below_the_builds_directory() {
        assert_eq!(
            own_path("/builds/", "/builds/g/p"),
            ["/builds/g", "/builds/g/p"]
        );
        assert!(own_path("/builds", "/elsewhere/p").is_empty());
        assert!(own_path("/builds", "/buildsx/p").is_empty());
    }
}
