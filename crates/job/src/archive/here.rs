//! The helper place's file work done in this process, for environments whose files are this
//! process's own ([`crate::env::Environment::helper_files_here`]: the shell level on the
//! manager's host). Each function does what the command it replaces does in the helper
//! place, with the same checks and the same results, without starting a process:
//!
//! | here                  | the command                                      |
//! |-----------------------|--------------------------------------------------|
//! | [`list_files`]        | `cd DIR && find . ! -type d -print0`             |
//! | [`tar_files`]         | `cd DIR && tar -c -f - ./NAME...`                |
//! | [`check_destination`] | [`super::on_disk::check_command`]                |
//! | [`untar_into`]        | `mkdir -p DIR && cd DIR && tar -x -f -`          |
//!
//! All are blocking: callers run them on the blocking pool.

use super::ArchiveError;
use super::on_disk::own_path;
use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Every file, link and special file under `dir` (not directories, never following a link),
/// as NUL-ended `./`-relative names, as `find . ! -type d -print0` lists them.
pub(super) fn list_files(dir: &Path) -> Result<Vec<u8>, ArchiveError> {
    let mut out = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let here = dir.join(&rel);
        let entries =
            fs::read_dir(&here).map_err(ArchiveError::io(format!("listing {}", here.display())))?;
        for entry in entries {
            let entry = entry.map_err(ArchiveError::io(format!("listing {}", here.display())))?;
            let name = rel.join(entry.file_name());
            let kind = entry
                .file_type()
                .map_err(ArchiveError::io(format!("listing {}", name.display())))?;
            if kind.is_dir() {
                pending.push(name);
            } else {
                out.extend_from_slice(b"./");
                out.extend_from_slice(name.as_os_str().as_bytes());
                out.push(0);
            }
        }
    }
    Ok(out)
}

/// Writes `names` (relative to `dir`) as a tar stream to `out`, links as links, as
/// `tar -c -f - ./NAME...` run in `dir` writes them.
pub(super) fn tar_files(dir: &Path, names: &[String], out: impl Write) -> Result<(), ArchiveError> {
    let mut builder = tar::Builder::new(out);
    builder.follow_symlinks(false);
    builder.mode(tar::HeaderMode::Complete);
    for name in names {
        builder
            .append_path_with_name(dir.join(name), format!("./{name}"))
            .map_err(ArchiveError::io(format!("archiving {name}")))?;
    }
    builder
        .into_inner()
        .and_then(|mut out| out.flush())
        .map_err(ArchiveError::io("finishing the tar stream"))
}

/// The destination check of [`super::on_disk::check_command`]: none of `dir`'s own
/// directories below `builds_dir` is a link, and no directory in `through` (relative to
/// `dir`) is a link that does not resolve to a directory inside `dir`.
pub(super) fn check_destination(
    builds_dir: &str,
    dir: &str,
    through: &BTreeSet<String>,
) -> Result<(), ArchiveError> {
    let is_link = |p: &Path| fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink());
    for own in own_path(builds_dir, dir) {
        if is_link(Path::new(&own)) {
            return Err(ArchiveError::LinkOnDisk { name: own });
        }
    }
    // A destination that is not there yet has nothing on disk to go through.
    let Ok(root) = fs::canonicalize(dir) else {
        return Ok(());
    };
    for name in through {
        let path = root.join(name);
        if !is_link(&path) {
            continue;
        }
        let inside = fs::canonicalize(&path)
            .is_ok_and(|r| r.starts_with(&root) && fs::metadata(&r).is_ok_and(|m| m.is_dir()));
        if !inside {
            return Err(ArchiveError::LinkOnDisk { name: name.clone() });
        }
    }
    Ok(())
}

/// Extracts the tar stream `from` into `dir` (made if missing), as `tar -x -f -` run there
/// extracts it: modes and times kept, links made as links, an existing file replaced.
pub(super) fn untar_into(dir: &Path, from: impl Read) -> Result<(), ArchiveError> {
    if !dir.is_dir() {
        fs::create_dir_all(dir).map_err(ArchiveError::io(format!("making {}", dir.display())))?;
    }
    let mut archive = tar::Archive::new(from);
    archive.set_preserve_permissions(true);
    archive.set_preserve_mtime(true);
    archive.set_overwrite(true);
    archive.set_unpack_xattrs(false);
    let result = archive.unpack(dir).map_err(ArchiveError::io(format!(
        "extracting into {}",
        dir.display()
    )));
    // Read to the end so the writing side never sees a closed pipe.
    let _ = io::copy(&mut archive.into_inner(), &mut io::sink());
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::process::Command;

    fn names(listing: &[u8]) -> BTreeSet<String> {
        listing
            .split(|b| *b == 0)
            .filter(|n| !n.is_empty())
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect()
    }

    /// A tree with files, an empty directory, a link to a file, a link to a directory out of
    /// it and a dangling one, and a name with a space and a newline.
    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        fs::create_dir_all(p.join("a/b")).unwrap();
        fs::create_dir_all(p.join("empty")).unwrap();
        fs::write(p.join("top.txt"), "top").unwrap();
        fs::write(p.join("a/b/deep.txt"), "deep").unwrap();
        fs::write(p.join("a/odd name\nline"), "odd").unwrap();
        symlink("top.txt", p.join("a/to-file")).unwrap();
        symlink("/etc", p.join("a/to-etc")).unwrap();
        symlink("nowhere", p.join("dangling")).unwrap();
        d
    }

    #[test]
    fn the_listing_is_finds() {
        let d = tree();
        let ours = names(&list_files(d.path()).unwrap());
        let find = Command::new("find")
            .args([".", "!", "-type", "d", "-print0"])
            .current_dir(d.path())
            .output()
            .unwrap();
        assert!(find.status.success());
        assert_eq!(ours, names(&find.stdout));
        assert_eq!(ours.len(), 6, "{ours:?}");
        assert!(list_files(&d.path().join("missing")).is_err());
    }

    #[test]
    fn the_tar_stream_extracts_as_tars_own() {
        // Ours, extracted by GNU tar, and GNU tar's, extracted by ours, give the same tree.
        let d = tree();
        let names: Vec<String> = names(&list_files(d.path()).unwrap())
            .into_iter()
            .map(|n| n.trim_start_matches("./").to_string())
            .collect();
        let mut ours = Vec::new();
        tar_files(d.path(), &names, &mut ours).unwrap();
        let by_tar = tempfile::tempdir().unwrap();
        let mut tar = Command::new("tar")
            .args(["-x", "-f", "-"])
            .current_dir(by_tar.path())
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        tar.stdin.take().unwrap().write_all(&ours).unwrap();
        assert!(tar.wait().unwrap().success());
        let theirs = Command::new("tar")
            .args(["-c", "-f", "-"])
            .args(names.iter().map(|n| format!("./{n}")))
            .current_dir(d.path())
            .output()
            .unwrap();
        assert!(theirs.status.success());
        let by_us = tempfile::tempdir().unwrap();
        untar_into(&by_us.path().join("made"), &theirs.stdout[..]).unwrap();
        for root in [by_tar.path(), &by_us.path().join("made")] {
            assert_eq!(
                fs::read_to_string(root.join("a/b/deep.txt")).unwrap(),
                "deep"
            );
            assert_eq!(
                fs::read_link(root.join("a/to-etc")).unwrap(),
                Path::new("/etc")
            );
            assert_eq!(
                fs::read_link(root.join("dangling")).unwrap(),
                Path::new("nowhere")
            );
            assert_eq!(
                fs::read_to_string(root.join("a/odd name\nline")).unwrap(),
                "odd"
            );
            // tar keeps whole seconds.
            let mtime = |p: &Path| {
                fs::metadata(p)
                    .unwrap()
                    .modified()
                    .unwrap()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs()
            };
            assert_eq!(
                mtime(&root.join("top.txt")),
                mtime(&d.path().join("top.txt"))
            );
        }
    }

    #[test]
    fn an_existing_file_or_link_is_replaced_not_written_through() {
        let d = tempfile::tempdir().unwrap();
        let outside = d.path().join("outside.txt");
        fs::write(&outside, "keep").unwrap();
        let dest = d.path().join("dest");
        fs::create_dir_all(&dest).unwrap();
        symlink(&outside, dest.join("f.txt")).unwrap();
        let src = tempfile::tempdir().unwrap();
        fs::write(src.path().join("f.txt"), "new").unwrap();
        let mut stream = Vec::new();
        tar_files(src.path(), &["f.txt".to_string()], &mut stream).unwrap();
        untar_into(&dest, &stream[..]).unwrap();
        assert_eq!(fs::read_to_string(&outside).unwrap(), "keep");
        assert_eq!(fs::read_to_string(dest.join("f.txt")).unwrap(), "new");
        assert!(
            !fs::symlink_metadata(dest.join("f.txt"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    #[test]
    fn the_destination_check_answers_as_the_command_does() {
        let builds = tempfile::tempdir().unwrap();
        let b = builds.path();
        let dir = b.join("g/p");
        fs::create_dir_all(dir.join("inside")).unwrap();
        symlink("/etc", dir.join("out")).unwrap();
        symlink("inside", dir.join("in")).unwrap();
        symlink(dir.join("inside/x.txt"), dir.join("file")).unwrap();
        fs::write(dir.join("inside/x.txt"), "x").unwrap();
        let (bs, ds) = (b.to_str().unwrap(), dir.to_str().unwrap());
        let set = |names: &[&str]| names.iter().map(|s| s.to_string()).collect();
        let ours = |names: &[&str]| check_destination(bs, ds, &set(names));
        let command = |names: &[&str]| {
            let mut input = Vec::new();
            for n in names {
                input.extend_from_slice(n.as_bytes());
                input.push(0);
            }
            let mut child = Command::new("sh")
                .arg("-c")
                .arg(super::super::on_disk::check_command(bs, ds))
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(&input).unwrap();
            let out = child.wait_with_output().unwrap();
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout)
                    .trim_end_matches('\0')
                    .to_string(),
            )
        };
        for names in [
            &["inside", "in"][..],
            &["out"][..],
            &["inside", "file"][..],
            &["missing/deeper"][..],
        ] {
            let (ok, named) = command(names);
            match ours(names) {
                Ok(()) => assert!(ok, "{names:?}: the command refused {named}"),
                Err(ArchiveError::LinkOnDisk { name }) => {
                    assert!(!ok, "{names:?}: only ours refused {name}");
                    assert_eq!(name, named, "{names:?}");
                }
                Err(e) => panic!("{names:?}: {e}"),
            }
        }
        // The destination reached through a link of its own below the builds directory.
        let real = b.join("real");
        fs::create_dir_all(&real).unwrap();
        symlink(&real, b.join("g/linked")).unwrap();
        let linked = b.join("g/linked").to_str().unwrap().to_string();
        assert!(matches!(
            check_destination(bs, &linked, &BTreeSet::new()),
            Err(ArchiveError::LinkOnDisk { name }) if name == linked
        ));
    }
}
