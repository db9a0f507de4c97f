//! Extracting a zip archive from the manager into a directory of the environment.

use super::ArchiveError;
use super::here;
use super::on_disk;
use super::paths::{PathRejection, ancestors, normalize_relative};
use super::ziptime::unix_time;
use crate::env::{Environment, ExecCommand, ExecSpec, Place};
use crate::script::quote;
use crate::trace::TraceWriter;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use tokio_util::io::SyncIoBridge;
use tokio_util::sync::CancellationToken;

/// What was extracted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExtractReport {
    /// Entries extracted (files, directories, symbolic links).
    pub entries: u64,
}

#[derive(Debug, Clone)]
enum Kind {
    File,
    Dir,
    Symlink(String),
}

#[derive(Debug, Clone)]
struct PlannedEntry {
    index: usize,
    name: String,
    kind: Kind,
    mode: u32,
    mtime: u64,
    size: u64,
}

/// Checks every entry of a zip archive (blocking). Any entry that is absolute, climbs out
/// with `..`, or lies under a symbolic link of the same archive refuses the whole archive.
/// Symbolic links are kept as links wherever they point, as GitLab Runner extracts them (a
/// virtualenv's `bin/python` points to `/usr/bin`): nothing is ever written through one, here
/// or, by [`on_disk::check`], through one already on disk.
fn plan(zip_path: &Path) -> Result<Vec<PlannedEntry>, ArchiveError> {
    let file = File::open(zip_path)
        .map_err(ArchiveError::io(format!("opening {}", zip_path.display())))?;
    let mut archive = zip::ZipArchive::new(file)
        .map_err(ArchiveError::zip(format!("reading {}", zip_path.display())))?;
    let mut out = Vec::with_capacity(archive.len());
    for index in 0..archive.len() {
        let mut f = archive
            .by_index(index)
            .map_err(ArchiveError::zip(format!("reading entry {index}")))?;
        let raw = String::from_utf8_lossy(f.name_raw()).into_owned();
        let unsafe_entry = |reason| ArchiveError::UnsafeEntry {
            name: raw.clone(),
            reason,
        };
        if std::str::from_utf8(f.name_raw()).is_err() {
            return Err(unsafe_entry(PathRejection::BadName));
        }
        let name = match normalize_relative(&raw) {
            Ok(n) => n,
            Err(PathRejection::Empty) if f.is_dir() => continue,
            Err(why) => return Err(unsafe_entry(why)),
        };
        let kind = if f.is_symlink() {
            let mut target = String::new();
            f.read_to_string(&mut target)
                .map_err(ArchiveError::io(format!("reading the target of {raw}")))?;
            if target.is_empty() || target.contains('\0') {
                return Err(unsafe_entry(PathRejection::BadName));
            }
            Kind::Symlink(target)
        } else if f.is_dir() {
            Kind::Dir
        } else {
            Kind::File
        };
        let default_mode = if matches!(kind, Kind::Dir) {
            0o755
        } else {
            0o644
        };
        out.push(PlannedEntry {
            index,
            name,
            // Permission bits only: no setuid, setgid or sticky bit comes from an archive.
            mode: f.unix_mode().map(|m| m & 0o777).unwrap_or(default_mode),
            mtime: f.last_modified().map(unix_time).unwrap_or(0),
            size: f.size(),
            kind,
        });
    }
    refuse_entries_under_links(&out)?;
    Ok(out)
}

/// Refuses an archive where an entry lies under one of its own symbolic links (`l -> /etc`,
/// then `l/cron.d/x`): extracted in order, the second would be written through the first.
fn refuse_entries_under_links(entries: &[PlannedEntry]) -> Result<(), ArchiveError> {
    let links: std::collections::HashSet<&str> = entries
        .iter()
        .filter(|e| matches!(e.kind, Kind::Symlink(_)))
        .map(|e| e.name.as_str())
        .collect();
    if links.is_empty() {
        return Ok(());
    }
    for e in entries {
        if let Some(above) = ancestors(&e.name).find(|a| links.contains(a)) {
            return Err(ArchiveError::UnsafeEntry {
                name: e.name.clone(),
                reason: PathRejection::UnderLink(above.to_owned()),
            });
        }
    }
    Ok(())
}

/// Checks a zip archive on the manager without extracting it: the number of entries, or why
/// it is refused.
pub async fn inspect_zip(zip_path: &Path) -> Result<usize, ArchiveError> {
    let path = zip_path.to_path_buf();
    tokio::task::spawn_blocking(move || plan(&path).map(|p| p.len()))
        .await
        .map_err(|e| ArchiveError::Io {
            context: "checking the archive".into(),
            source: io::Error::other(e.to_string()),
        })?
}

/// Writes the planned entries as a tar stream (blocking).
fn write_tar(
    zip_path: PathBuf,
    entries: Vec<PlannedEntry>,
    out: impl Write,
) -> Result<(), ArchiveError> {
    let file = File::open(&zip_path)
        .map_err(ArchiveError::io(format!("opening {}", zip_path.display())))?;
    let mut archive = zip::ZipArchive::new(file)
        .map_err(ArchiveError::zip(format!("reading {}", zip_path.display())))?;
    let mut builder = tar::Builder::new(out);
    for e in &entries {
        let mut h = tar::Header::new_gnu();
        h.set_mode(e.mode);
        h.set_mtime(e.mtime);
        h.set_uid(0);
        h.set_gid(0);
        let io_err = ArchiveError::io(format!("streaming {}", e.name));
        match &e.kind {
            Kind::Dir => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
                builder
                    .append_data(&mut h, &e.name, io::empty())
                    .map_err(io_err)?;
            }
            Kind::Symlink(target) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_size(0);
                builder
                    .append_link(&mut h, &e.name, target)
                    .map_err(io_err)?;
            }
            Kind::File => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(e.size);
                let reader = archive
                    .by_index(e.index)
                    .map_err(ArchiveError::zip(format!("reading {}", e.name)))?;
                builder
                    .append_data(&mut h, &e.name, reader)
                    .map_err(io_err)?;
            }
        }
    }
    let mut out = builder
        .into_inner()
        .map_err(ArchiveError::io("finishing the tar stream"))?;
    out.flush()
        .map_err(ArchiveError::io("finishing the tar stream"))
}

/// Extracts the zip archive at `zip_path` (on the manager) into `dir` in the environment's
/// helper context, creating `dir` if needed. The archive is checked first: an unsafe entry
/// refuses it before anything is written.
pub async fn extract_zip(
    env: &dyn Environment,
    dir: &str,
    zip_path: &Path,
    log: &TraceWriter,
    cancel: &CancellationToken,
) -> Result<ExtractReport, ArchiveError> {
    let path = zip_path.to_path_buf();
    let entries = tokio::task::spawn_blocking(move || plan(&path))
        .await
        .map_err(|e| ArchiveError::Io {
            context: "checking the archive".into(),
            source: io::Error::other(e.to_string()),
        })??;
    let count = entries.len() as u64;
    if count == 0 {
        return Ok(ExtractReport::default());
    }
    let through = on_disk::directories(
        entries
            .iter()
            .map(|e| (e.name.as_str(), matches!(e.kind, Kind::Dir))),
    );
    on_disk::check(env, dir, &through, log, cancel).await?;
    if env.helper_files_here() {
        let (path, dir, token) = (zip_path.to_path_buf(), PathBuf::from(dir), cancel.clone());
        tokio::task::spawn_blocking(move || extract_here(path, entries, &dir, &token))
            .await
            .map_err(|e| ArchiveError::Io {
                context: "extracting the archive".into(),
                source: io::Error::other(e.to_string()),
            })??;
        return Ok(ExtractReport { entries: count });
    }
    let (our_side, env_side) = tokio::io::duplex(256 * 1024);
    let writer = SyncIoBridge::new(our_side);
    let path = zip_path.to_path_buf();
    let writing = tokio::task::spawn_blocking(move || write_tar(path, entries, writer));
    let qdir = quote(dir);
    let exec = env.exec(ExecSpec {
        place: Place::Helper,
        command: ExecCommand::Command(format!(
            "{{ [ -d {qdir} ] || mkdir -p {qdir}; }} && cd {qdir} && tar -x -f -"
        )),
        stdin: Some(Box::new(env_side)),
        stdout: Box::new(log.clone()),
        stderr: Box::new(log.clone()),
        cancel: cancel.clone(),
    });
    let (status, written) = tokio::join!(exec, writing);
    let status = status.map_err(|e| ArchiveError::env("running tar", e))?;
    if cancel.is_cancelled() {
        return Err(ArchiveError::Canceled);
    }
    if !status.success() {
        return Err(ArchiveError::Command {
            what: "tar".into(),
            status,
        });
    }
    written.map_err(|e| ArchiveError::Io {
        context: "writing the tar stream".into(),
        source: io::Error::other(e.to_string()),
    })??;
    Ok(ExtractReport { entries: count })
}

/// Extracts the planned entries into `dir` in this process (blocking): the tar stream the
/// helper place's `tar -x` would read, read by [`here::untar_into`] instead.
fn extract_here(
    zip_path: PathBuf,
    entries: Vec<PlannedEntry>,
    dir: &Path,
    cancel: &CancellationToken,
) -> Result<(), ArchiveError> {
    let (reader, writer) = io::pipe().map_err(ArchiveError::io("making a pipe"))?;
    let writer = here::Cancellable::new(writer, cancel);
    std::thread::scope(|scope| {
        let writing = scope.spawn(move || write_tar(zip_path, entries, writer));
        let extracted = here::untar_into(dir, reader, cancel);
        let written = writing.join().map_err(|_| ArchiveError::Io {
            context: "writing the tar stream".into(),
            source: io::Error::other("the writer panicked"),
        })?;
        here::unless_canceled(extracted.and(written), cancel)
    })
}
