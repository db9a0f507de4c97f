//! A job's artifacts unpacked on this host after a local run (`.flotilla/artifacts/<job>/`,
//! and into the working tree with `--artifacts-to-source`, as gitlab-ci-local does).
//!
//! The archive holds what a job put there, so it is unpacked as hostile input: an entry whose
//! name leaves the destination (`..`, an absolute path) is refused, a symbolic link is made as
//! a link and never written through (no directory on the way to a file may be a link, and the
//! file itself is opened without following one), and the total unpacked is bounded.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// At most this many bytes are unpacked from one archive.
const MAX_UNPACKED: u64 = 16 * 1024 * 1024 * 1024;

/// At most this many entries are unpacked from one archive.
const MAX_ENTRIES: usize = 100_000;

/// Why an archive was not unpacked (whole or in part).
#[derive(Debug, thiserror::Error)]
pub enum KeepError {
    /// The archive or a file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// What was read or written.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The archive is not a zip file.
    #[error("{path}: {source}")]
    Zip {
        /// The archive.
        path: PathBuf,
        /// The error.
        #[source]
        source: zip::result::ZipError,
    },
    /// An entry would land outside the destination, or write through a link.
    #[error("{path}: entry {entry:?} {why}; nothing past it is unpacked")]
    Refused {
        /// The archive.
        path: PathBuf,
        /// The entry's name.
        entry: String,
        /// Why.
        why: &'static str,
    },
}

/// What was unpacked.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Unpacked {
    /// Files written.
    pub files: usize,
    /// Bytes written.
    pub bytes: u64,
}

/// Top-level names an archive may not write into a working tree: git's own files (a hook or
/// `core.fsmonitor` would run on the host at the next git command) and flotilla's (a planted
/// `.flotilla.toml` would be the next run's fleet).
const NOT_IN_SOURCE: &[&str] = &[".git", ".flotilla", ".flotilla.toml"];

/// Unpack `archive` into `dest` (created), replacing files that are there (a link at a file's
/// place is replaced, never followed).
pub fn unpack(archive: &Path, dest: &Path) -> Result<Unpacked, KeepError> {
    unpack_with(archive, dest, &[], &mut Vec::new())
}

/// Unpack `archive` into a working tree `dest`, as [`unpack`] does, leaving out what is under
/// `.git`, `.flotilla` and `.flotilla.toml` (their names are returned).
pub fn unpack_into_source(
    archive: &Path,
    dest: &Path,
) -> Result<(Unpacked, Vec<String>), KeepError> {
    let mut skipped = Vec::new();
    let done = unpack_with(archive, dest, NOT_IN_SOURCE, &mut skipped)?;
    Ok((done, skipped))
}

fn unpack_with(
    archive: &Path,
    dest: &Path,
    skip: &[&str],
    skipped: &mut Vec<String>,
) -> Result<Unpacked, KeepError> {
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| KeepError::Io {
            path: path.clone(),
            source,
        }
    };
    let file = File::open(archive).map_err(io_err(archive))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|source| KeepError::Zip {
        path: archive.to_path_buf(),
        source,
    })?;
    fs::create_dir_all(dest).map_err(io_err(dest))?;
    let mut done = Unpacked::default();
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(|source| KeepError::Zip {
            path: archive.to_path_buf(),
            source,
        })?;
        let name = entry
            .name()
            .map_err(|source| KeepError::Zip {
                path: archive.to_path_buf(),
                source,
            })?
            .into_owned();
        let refused = |why| KeepError::Refused {
            path: archive.to_path_buf(),
            entry: name.clone(),
            why,
        };
        let Some(relative) = inside(&name) else {
            return Err(refused("leaves the destination"));
        };
        if relative
            .components()
            .next()
            .is_some_and(|first| skip.iter().any(|s| first.as_os_str() == *s))
        {
            skipped.push(name.clone());
            continue;
        }
        if i >= MAX_ENTRIES {
            return Err(refused("is past the 100,000 entries an archive may hold"));
        }
        let target = dest.join(&relative);
        // Every directory on the way is a real directory (made here if missing), never a link.
        let mut dir = dest.to_path_buf();
        let parents: Vec<_> = relative
            .parent()
            .map(|p| p.components().collect())
            .unwrap_or_default();
        for part in parents {
            dir.push(part);
            match fs::symlink_metadata(&dir) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Err(refused("would be written through a link or a file")),
                Err(_) => fs::create_dir(&dir).map_err(io_err(&dir))?,
            }
        }
        if entry.is_dir() {
            match fs::symlink_metadata(&target) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Err(refused("is a directory where a link or a file is")),
                Err(_) => fs::create_dir(&target).map_err(io_err(&target))?,
            }
            continue;
        }
        // Whatever is at the file's place (a file, a link) is replaced, not followed.
        if let Ok(m) = fs::symlink_metadata(&target) {
            if m.is_dir() {
                return Err(refused("is a file where a directory is"));
            }
            fs::remove_file(&target).map_err(io_err(&target))?;
        }
        let mode = entry.unix_mode().unwrap_or(0o644);
        if mode & 0o170_000 == 0o120_000 {
            let mut link = String::new();
            entry
                .by_ref()
                .take(4096)
                .read_to_string(&mut link)
                .map_err(io_err(&target))?;
            std::os::unix::fs::symlink(&link, &target).map_err(io_err(&target))?;
            continue;
        }
        let mut out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&target)
            .map_err(io_err(&target))?;
        let left = MAX_UNPACKED.saturating_sub(done.bytes);
        let copied = io::copy(&mut entry.by_ref().take(left.saturating_add(1)), &mut out)
            .map_err(io_err(&target))?;
        if copied > left {
            return Err(refused(
                "would make the unpacked artifacts larger than 16 GiB",
            ));
        }
        out.flush().map_err(io_err(&target))?;
        // On the open file: the path could be swapped for a link meanwhile.
        out.set_permissions(fs::Permissions::from_mode(mode & 0o777))
            .map_err(io_err(&target))?;
        done.files += 1;
        done.bytes += copied;
    }
    Ok(done)
}

/// `name` as a relative path made of normal components only.
fn inside(name: &str) -> Option<PathBuf> {
    let path = Path::new(name.trim_end_matches('/'));
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zip::write::SimpleFileOptions;

    fn archive(dir: &Path, entries: &[(&str, Option<&str>, u32)]) -> PathBuf {
        let path = dir.join("a.zip");
        let mut zip = zip::ZipWriter::new(File::create(&path).unwrap());
        for (name, body, mode) in entries {
            let options = SimpleFileOptions::default().unix_permissions(*mode);
            match body {
                Some(text) if mode & 0o170_000 == 0o120_000 => {
                    zip.add_symlink(*name, *text, options).unwrap();
                }
                Some(text) => {
                    zip.start_file(*name, options).unwrap();
                    zip.write_all(text.as_bytes()).unwrap();
                }
                None => zip.add_directory(*name, options).unwrap(),
            }
        }
        zip.finish().unwrap();
        path
    }

    #[test]
    fn files_links_and_modes_are_unpacked() {
        let tmp = tempfile::tempdir().unwrap();
        let zip = archive(
            tmp.path(),
            &[
                ("out/", None, 0o755),
                ("out/run.sh", Some("#!/bin/sh\n"), 0o755),
                ("out/latest", Some("run.sh"), 0o120_777),
            ],
        );
        let dest = tmp.path().join("dest");
        let done = unpack(&zip, &dest).unwrap();
        assert_eq!(done.files, 1);
        let mode = fs::metadata(dest.join("out/run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(
            fs::read_link(dest.join("out/latest")).unwrap(),
            Path::new("run.sh")
        );
        // Again: what is there is replaced.
        unpack(&zip, &dest).unwrap();
    }

    #[test]
    fn a_working_tree_gets_no_git_or_flotilla_files() {
        let tmp = tempfile::tempdir().unwrap();
        let zip = archive(
            tmp.path(),
            &[
                (
                    ".git/hooks/pre-commit",
                    Some("#!/bin/sh\ntouch /tmp/owned\n"),
                    0o755,
                ),
                (".flotilla.toml", Some("[[runners]]\n"), 0o644),
                ("out/result.txt", Some("ok"), 0o644),
            ],
        );
        let dest = tmp.path().join("tree");
        let (done, skipped) = unpack_into_source(&zip, &dest).unwrap();
        assert_eq!(done.files, 1);
        assert_eq!(skipped, [".git/hooks/pre-commit", ".flotilla.toml"]);
        assert!(!dest.join(".git").exists() && !dest.join(".flotilla.toml").exists());
        assert_eq!(
            fs::read_to_string(dest.join("out/result.txt")).unwrap(),
            "ok"
        );
    }

    #[test]
    fn nothing_leaves_the_destination() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        fs::create_dir(&outside).unwrap();
        // A link to outside, then a file written "into" it.
        let zip = archive(
            tmp.path(),
            &[
                ("escape", Some(outside.to_str().unwrap()), 0o120_777),
                ("escape/planted", Some("x"), 0o644),
            ],
        );
        let dest = tmp.path().join("dest");
        let e = unpack(&zip, &dest).unwrap_err();
        assert!(e.to_string().contains("through a link"), "{e}");
        assert!(!outside.join("planted").exists());
        let zip = archive(tmp.path(), &[("../up", Some("x"), 0o644)]);
        assert!(unpack(&zip, &dest).is_err());
        assert!(!tmp.path().join("up").exists());
        // A link at a file's place is replaced, not written through.
        fs::write(outside.join("target"), "keep").unwrap();
        std::os::unix::fs::symlink(outside.join("target"), dest.join("file")).unwrap();
        let zip = archive(tmp.path(), &[("file", Some("new"), 0o644)]);
        unpack(&zip, &dest).unwrap();
        assert_eq!(fs::read_to_string(outside.join("target")).unwrap(), "keep");
        assert_eq!(fs::read_to_string(dest.join("file")).unwrap(), "new");
    }
}
