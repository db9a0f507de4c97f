//! The helper place's file work done in this process, for environments whose files are this
//! process's own ([`crate::env::Environment::helper_files_here`]: the shell level on the
//! manager's host). Each function does what the command it replaces does in the helper
//! place, with the same checks, without starting a process:
//!
//! | here                  | the command                                      |
//! |-----------------------|--------------------------------------------------|
//! | [`list_files`]        | `cd DIR && find . ! -type d -print0`             |
//! | [`tar_files`]         | `cd DIR && tar -c -f - ./NAME...`                |
//! | [`check_destination`] | [`super::on_disk::check_command`]                |
//! | [`untar_into`]        | `mkdir -p DIR && cd DIR && tar -x -f -`          |
//!
//! Where they differ: [`tar_files`] leaves sockets and special files out with a warning (GNU
//! tar ignores sockets and archives FIFOs and devices, which the zip then leaves out with the
//! same warning) and fails on a file that changed size while it was read (tar's exit 1); a
//! directory entry where a link to a directory already is fails the extraction (GNU tar
//! follows the link, which the destination check has let through only when it stays inside).
//!
//! All are blocking: callers run them on the blocking pool, with the stage's cancellation
//! token, which each checks between entries and in every read and write of a stream, so a
//! cancelled or timed-out job stops writing at once, as its killed command did.

use super::ArchiveError;
use super::on_disk::own_path;
use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use tokio_util::sync::CancellationToken;

/// A reader or writer that fails once `cancel` fires: a stream between two threads stops
/// at its next read or write.
pub(super) struct Cancellable<T> {
    inner: T,
    cancel: CancellationToken,
}

impl<T> Cancellable<T> {
    pub(super) fn new(inner: T, cancel: &CancellationToken) -> Cancellable<T> {
        Cancellable {
            inner,
            cancel: cancel.clone(),
        }
    }

    fn check(&self) -> io::Result<()> {
        if self.cancel.is_cancelled() {
            // Not `Interrupted`: readers and copies retry that for ever.
            return Err(io::Error::other("canceled"));
        }
        Ok(())
    }
}

impl<T: Read> Read for Cancellable<T> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.check()?;
        self.inner.read(buf)
    }
}

impl<T: Write> Write for Cancellable<T> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.check()?;
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Exactly `size` bytes of `inner`: what it has past them is left, and where it ends early
/// the rest is zeros (and `short` says so), so a tar entry's body always matches its header.
struct Exactly<R> {
    inner: R,
    left: u64,
    short: bool,
}

impl<R> Exactly<R> {
    fn new(inner: R, size: u64) -> Exactly<R> {
        Exactly {
            inner,
            left: size,
            short: false,
        }
    }
}

impl<R: Read> Read for Exactly<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = usize::try_from(self.left)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        if want == 0 {
            return Ok(0);
        }
        let n = if self.short {
            0
        } else {
            self.inner.read(&mut buf[..want])?
        };
        if n == 0 {
            self.short = true;
            buf[..want].fill(0);
            self.left -= want as u64;
            return Ok(want);
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// `Canceled` when `cancel` fired, whatever else went wrong on the way.
pub(super) fn unless_canceled<T>(
    result: Result<T, ArchiveError>,
    cancel: &CancellationToken,
) -> Result<T, ArchiveError> {
    if cancel.is_cancelled() {
        return Err(ArchiveError::Canceled);
    }
    result
}

/// An I/O error with its causes in its text: the tar crate's errors name the entry but keep
/// why (permission denied, file exists) in their source, which a log line would lose.
fn with_causes(e: io::Error) -> io::Error {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    io::Error::new(e.kind(), text)
}

/// Every file, link and special file under `dir` (not directories, never following a link),
/// as NUL-ended `./`-relative names, as `find . ! -type d -print0` lists them.
pub(super) fn list_files(dir: &Path, cancel: &CancellationToken) -> Result<Vec<u8>, ArchiveError> {
    let mut out = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        if cancel.is_cancelled() {
            return Err(ArchiveError::Canceled);
        }
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
/// `tar -c -f - ./NAME...` run in `dir` writes them; returns a warning for each name left
/// out (sockets and special files). A file is read for exactly the size it had when opened:
/// one that changed meanwhile fails the stream, as tar exits 1 for it.
pub(super) fn tar_files(
    dir: &Path,
    names: &[String],
    out: impl Write,
    cancel: &CancellationToken,
) -> Result<Vec<String>, ArchiveError> {
    let mut builder = tar::Builder::new(out);
    let mut warnings = Vec::new();
    for name in names {
        if cancel.is_cancelled() {
            return Err(ArchiveError::Canceled);
        }
        let path = dir.join(name);
        let archived = format!("./{name}");
        let io_err = |e: io::Error| ArchiveError::Io {
            context: format!("archiving {name}"),
            source: with_causes(e),
        };
        let meta = fs::symlink_metadata(&path).map_err(io_err)?;
        let kind = meta.file_type();
        let mut header = tar::Header::new_gnu();
        header.set_metadata_in_mode(&meta, tar::HeaderMode::Complete);
        if kind.is_symlink() {
            let target = fs::read_link(&path).map_err(io_err)?;
            builder
                .append_link(&mut header, &archived, target)
                .map_err(io_err)?;
        } else if kind.is_file() {
            // Not through a link swapped in since, and never waiting on a FIFO swapped in.
            let file = fs::OpenOptions::new()
                .read(true)
                .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
                .open(&path)
                .map_err(io_err)?;
            let opened = file.metadata().map_err(io_err)?;
            if !opened.is_file() {
                warnings.push(format!(
                    "{name}: changed into another kind of file; not archived"
                ));
                continue;
            }
            header.set_metadata_in_mode(&opened, tar::HeaderMode::Complete);
            let size = opened.len();
            let mut body = Exactly::new(Cancellable::new(&file, cancel), size);
            builder
                .append_data(&mut header, &archived, &mut body)
                .map_err(io_err)?;
            if body.short {
                return Err(io_err(io::Error::other(
                    "the file changed as it was read: shorter than when it was opened",
                )));
            }
        } else if kind.is_socket() {
            warnings.push(format!("{name}: a socket; not archived"));
        } else if kind.is_dir() {
            // Listed names are not directories; one made since has nothing of its own.
        } else {
            warnings.push(format!("{name}: unsupported file type; not archived"));
        }
    }
    builder
        .into_inner()
        .and_then(|mut out| out.flush())
        .map_err(|e| ArchiveError::Io {
            context: "finishing the tar stream".into(),
            source: with_causes(e),
        })?;
    Ok(warnings)
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
/// extracts it: times kept, links made as links, an existing file replaced, modes kept (less
/// the umask when not root, as tar does for a user).
pub(super) fn untar_into(
    dir: &Path,
    from: impl Read,
    cancel: &CancellationToken,
) -> Result<(), ArchiveError> {
    if !dir.is_dir() {
        fs::create_dir_all(dir).map_err(ArchiveError::io(format!("making {}", dir.display())))?;
    }
    let mut archive = tar::Archive::new(Cancellable::new(from, cancel));
    archive.set_preserve_permissions(true);
    if !nix::unistd::geteuid().is_root() {
        archive.set_mask(umask());
    }
    archive.set_preserve_mtime(true);
    archive.set_overwrite(true);
    archive.set_unpack_xattrs(false);
    let result = archive.unpack(dir).map_err(|e| ArchiveError::Io {
        context: format!("extracting into {}", dir.display()),
        source: with_causes(e),
    });
    // Read to the end so the writing side never sees a closed pipe.
    let _ = io::copy(&mut archive.into_inner(), &mut io::sink());
    unless_canceled(result, cancel)
}

/// This process's umask, read from `/proc/self/status` (setting it to read it would change it
/// for every thread meanwhile); 022 where it cannot be read.
fn umask() -> u32 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::process::Command;

    fn none() -> CancellationToken {
        CancellationToken::new()
    }

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
        let ours = names(&list_files(d.path(), &none()).unwrap());
        let find = Command::new("find")
            .args([".", "!", "-type", "d", "-print0"])
            .current_dir(d.path())
            .output()
            .unwrap();
        assert!(find.status.success());
        assert_eq!(ours, names(&find.stdout));
        assert_eq!(ours.len(), 6, "{ours:?}");
        assert!(list_files(&d.path().join("missing"), &none()).is_err());
    }

    #[test]
    fn the_tar_stream_extracts_as_tars_own() {
        // Ours, extracted by GNU tar, and GNU tar's, extracted by ours, give the same tree.
        let d = tree();
        let names: Vec<String> = names(&list_files(d.path(), &none()).unwrap())
            .into_iter()
            .map(|n| n.trim_start_matches("./").to_string())
            .collect();
        let mut ours = Vec::new();
        let left_out = tar_files(d.path(), &names, &mut ours, &none()).unwrap();
        assert!(left_out.is_empty(), "{left_out:?}");
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
        untar_into(&by_us.path().join("made"), &theirs.stdout[..], &none()).unwrap();
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
        tar_files(src.path(), &["f.txt".to_string()], &mut stream, &none()).unwrap();
        untar_into(&dest, &stream[..], &none()).unwrap();
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

    #[test]
    fn sockets_and_special_files_are_left_out_with_a_warning() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("f.txt"), "f").unwrap();
        let _listener = std::os::unix::net::UnixListener::bind(d.path().join("s.sock")).unwrap();
        nix::unistd::mkfifo(
            &d.path().join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let names = ["f.txt", "s.sock", "fifo"].map(String::from);
        let mut stream = Vec::new();
        let left_out = tar_files(d.path(), &names, &mut stream, &none()).unwrap();
        assert_eq!(
            left_out,
            [
                "s.sock: a socket; not archived",
                "fifo: unsupported file type; not archived"
            ]
        );
        let mut archive = tar::Archive::new(&stream[..]);
        let entries: Vec<String> = archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(entries, ["f.txt"]);
    }

    #[test]
    fn a_body_is_exactly_its_headers_size() {
        // A file that grew is read to its size when opened; one that shrank is padded (the
        // stream stays whole) and said to be short.
        let mut grown = Exactly::new(&b"0123456789"[..], 4);
        let mut out = Vec::new();
        grown.read_to_end(&mut out).unwrap();
        assert_eq!((out.as_slice(), grown.short), (&b"0123"[..], false));
        let mut shrunk = Exactly::new(&b"01"[..], 4);
        let mut out = Vec::new();
        shrunk.read_to_end(&mut out).unwrap();
        assert_eq!((out.as_slice(), shrunk.short), (&b"01\0\0"[..], true));
    }

    #[test]
    fn a_canceled_transfer_stops_and_says_so() {
        let src = tempfile::tempdir().unwrap();
        fs::write(src.path().join("f.txt"), "f").unwrap();
        let mut stream = Vec::new();
        tar_files(src.path(), &["f.txt".to_string()], &mut stream, &none()).unwrap();
        let canceled = CancellationToken::new();
        canceled.cancel();
        let dest = tempfile::tempdir().unwrap();
        assert!(matches!(
            untar_into(dest.path(), &stream[..], &canceled),
            Err(ArchiveError::Canceled)
        ));
        assert!(!dest.path().join("f.txt").exists());
        assert!(matches!(
            tar_files(src.path(), &["f.txt".to_string()], io::sink(), &canceled),
            Err(ArchiveError::Canceled)
        ));
        assert!(matches!(
            list_files(src.path(), &canceled),
            Err(ArchiveError::Canceled)
        ));
    }
}
