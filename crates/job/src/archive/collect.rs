//! Collecting files from the environment into a zip archive on the manager.

use super::here;
use super::paths::{PathFilter, normalize_relative};
use super::ziptime::zip_time;
use super::{ArchiveError, capture};
use crate::env::{Environment, ExecCommand, ExecSpec, Place};
use crate::script::{ANSI_RESET, ANSI_YELLOW, quote};
use crate::trace::TraceWriter;
use std::collections::{BTreeSet, HashSet};
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use tokio_util::io::SyncIoBridge;
use tokio_util::sync::CancellationToken;
use zip::ZipWriter;
use zip::write::SimpleFileOptions;

/// What to collect.
#[derive(Debug, Clone, Copy)]
pub struct ArchiveSpec<'a> {
    /// Glob patterns (already variable-expanded) relative to the directory.
    pub paths: &'a [String],
    /// Glob patterns to leave out.
    pub exclude: &'a [String],
    /// Also take every file git does not track.
    pub untracked: bool,
}

/// What was collected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CollectReport {
    /// Entries written (files and symbolic links).
    pub files: u64,
    /// Bytes of file content.
    pub bytes: u64,
}

/// The longest command line (bytes of quoted names) per `tar` invocation.
const BATCH_BYTES: usize = 64 * 1024;

fn warn(text: &str) -> String {
    format!("{ANSI_YELLOW}WARNING: {text}{ANSI_RESET}\n")
}

/// Collects the files of `dir` (in the environment's helper context) selected by `spec` into
/// a new zip archive at `zip_path` on the manager. Symbolic links are archived as links,
/// wherever they point, as GitLab Runner archives them. Refused patterns and entries (escaping
/// the directory, special files) are reported as warnings in `log` and left out. Returns how much was archived; zero files means nothing matched (the archive
/// is still valid and empty).
pub async fn collect_zip(
    env: &dyn Environment,
    dir: &str,
    spec: &ArchiveSpec<'_>,
    zip_path: &Path,
    log: &TraceWriter,
    cancel: &CancellationToken,
) -> Result<CollectReport, ArchiveError> {
    let (filter, rejected) = PathFilter::new(spec.paths, spec.exclude, dir);
    for (pattern, why) in &rejected {
        log.send(warn(&format!("{pattern}: {why}; ignored"))).await;
    }

    // 1. What exists (everything but directories, so `tar` never recurses on its own).
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    let qdir = quote(dir);
    if !filter.is_empty() {
        let listing = if env.helper_files_here() {
            let (dir, token) = (std::path::PathBuf::from(dir), cancel.clone());
            tokio::task::spawn_blocking(move || here::list_files(&dir, &token))
                .await
                .map_err(|e| ArchiveError::Io {
                    context: "listing files".into(),
                    source: io::Error::other(e.to_string()),
                })??
        } else {
            capture(
                env,
                "listing files",
                format!("cd {qdir} && find . ! -type d -print0"),
                log,
                cancel,
            )
            .await?
        };
        for name in listing.split(|&b| b == 0).filter(|n| !n.is_empty()) {
            add_candidate(name, &filter, false, &mut wanted, log).await;
        }
    }
    if spec.untracked {
        let listing = capture(
            env,
            "listing untracked files",
            format!("cd {qdir} && git ls-files -o -z"),
            log,
            cancel,
        )
        .await?;
        for name in listing.split(|&b| b == 0).filter(|n| !n.is_empty()) {
            add_candidate(name, &filter, true, &mut wanted, log).await;
        }
    }

    // 2. Stream them out with tar, in batches that keep command lines short.
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(zip_path)
        .map_err(ArchiveError::io(format!("creating {}", zip_path.display())))?;
    let mut state = ZipState {
        zip: ZipWriter::new(file),
        added: HashSet::new(),
        report: CollectReport::default(),
        warnings: Vec::new(),
    };
    let names: Vec<String> = wanted.into_iter().collect();
    let mut start = 0;
    while start < names.len() {
        let mut end = start;
        let mut len = 0;
        while end < names.len() && (end == start || len + names[end].len() + 8 < BATCH_BYTES) {
            len += names[end].len() + 8;
            end += 1;
        }
        let batch = &names[start..end];
        state = if env.helper_files_here() {
            tar_batch_here(dir, batch, state, cancel).await?
        } else {
            tar_batch(env, &qdir, batch, state, log, cancel).await?
        };
        start = end;
    }
    for w in std::mem::take(&mut state.warnings) {
        log.send(warn(&w)).await;
    }
    let report = state.report;
    let zip_path = zip_path.to_path_buf();
    tokio::task::spawn_blocking(move || -> Result<(), ArchiveError> {
        let file = state.zip.finish().map_err(ArchiveError::zip(format!(
            "finishing {}",
            zip_path.display()
        )))?;
        file.sync_all()
            .map_err(ArchiveError::io(format!("syncing {}", zip_path.display())))
    })
    .await
    .map_err(|e| ArchiveError::Io {
        context: "finishing the archive".into(),
        source: io::Error::other(e.to_string()),
    })??;
    Ok(report)
}

/// Adds a listed name when the filter (or the untracked listing) selects it.
async fn add_candidate(
    raw: &[u8],
    filter: &PathFilter,
    untracked: bool,
    wanted: &mut BTreeSet<String>,
    log: &TraceWriter,
) {
    let Ok(name) = std::str::from_utf8(raw) else {
        log.send(warn(&format!(
            "{}: the name is not valid UTF-8; not archived",
            String::from_utf8_lossy(raw)
        )))
        .await;
        return;
    };
    let Ok(rel) = normalize_relative(name) else {
        return;
    };
    let selected = if untracked {
        !filter.excluded(&rel)
    } else {
        filter.includes(&rel)
    };
    if selected {
        wanted.insert(rel);
    }
}

struct ZipState {
    zip: ZipWriter<File>,
    added: HashSet<String>,
    report: CollectReport,
    warnings: Vec<String>,
}

async fn tar_batch(
    env: &dyn Environment,
    qdir: &str,
    batch: &[String],
    mut state: ZipState,
    log: &TraceWriter,
    cancel: &CancellationToken,
) -> Result<ZipState, ArchiveError> {
    let mut command = format!("cd {qdir} && tar -c -f -");
    for name in batch {
        command.push(' ');
        command.push_str(&quote(&format!("./{name}")));
    }
    let requested: HashSet<String> = batch.iter().cloned().collect();
    let (env_side, our_side) = tokio::io::duplex(256 * 1024);
    let reader = SyncIoBridge::new(our_side);
    let reading = tokio::task::spawn_blocking(move || {
        let r = tar_into_zip(reader, &requested, &mut state);
        (state, r)
    });
    let exec = env.exec(ExecSpec {
        place: Place::Helper,
        command: ExecCommand::Command(command),
        stdin: None,
        stdout: Box::new(env_side),
        stderr: Box::new(log.clone()),
        cancel: cancel.clone(),
    });
    let (status, joined) = tokio::join!(exec, reading);
    let (state, read) = joined.map_err(|e| ArchiveError::Io {
        context: "reading the tar stream".into(),
        source: io::Error::other(e.to_string()),
    })?;
    let status = status.map_err(|e| ArchiveError::env("running tar", e))?;
    if cancel.is_cancelled() {
        return Err(ArchiveError::Canceled);
    }
    read?;
    if !status.success() {
        return Err(ArchiveError::Command {
            what: "tar".into(),
            status,
        });
    }
    Ok(state)
}

/// [`tar_batch`] in this process: the batch's tar stream made by [`here::tar_files`].
async fn tar_batch_here(
    dir: &str,
    batch: &[String],
    mut state: ZipState,
    cancel: &CancellationToken,
) -> Result<ZipState, ArchiveError> {
    let dir = std::path::PathBuf::from(dir);
    let batch = batch.to_vec();
    let requested: HashSet<String> = batch.iter().cloned().collect();
    let cancel = cancel.clone();
    tokio::task::spawn_blocking(move || {
        let (reader, writer) = io::pipe().map_err(ArchiveError::io("making a pipe"))?;
        let read = std::thread::scope(|scope| {
            let writing = scope.spawn(|| here::tar_files(&dir, &batch, writer, &cancel));
            let reader = here::Cancellable::new(reader, &cancel);
            let read = tar_into_zip(reader, &requested, &mut state);
            let written = writing.join().map_err(|_| ArchiveError::Io {
                context: "reading the files".into(),
                source: io::Error::other("the writer panicked"),
            })?;
            let left_out = read.and(written)?;
            state.warnings.extend(left_out);
            Ok(())
        });
        here::unless_canceled(read, &cancel).map(|()| state)
    })
    .await
    .map_err(|e| ArchiveError::Io {
        context: "reading the tar stream".into(),
        source: io::Error::other(e.to_string()),
    })?
}

/// Reads a tar stream and adds the requested entries to the zip (blocking).
fn tar_into_zip(
    reader: impl Read,
    requested: &HashSet<String>,
    state: &mut ZipState,
) -> Result<(), ArchiveError> {
    let mut archive = tar::Archive::new(reader);
    let result = (|| -> Result<(), ArchiveError> {
        let entries = archive
            .entries()
            .map_err(ArchiveError::io("reading the tar stream"))?;
        for entry in entries {
            let mut entry = entry.map_err(ArchiveError::io("reading the tar stream"))?;
            add_entry(&mut entry, requested, state)?;
        }
        Ok(())
    })();
    // Read to the end so the sending tar never sees a closed pipe.
    let mut rest = archive.into_inner();
    let _ = io::copy(&mut rest, &mut io::sink());
    result
}

fn add_entry<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    requested: &HashSet<String>,
    state: &mut ZipState,
) -> Result<(), ArchiveError> {
    let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
    let name = match normalize_relative(&raw) {
        Ok(n) => n,
        Err(why) => {
            state.warnings.push(format!("{raw}: {why}; not archived"));
            return Ok(());
        }
    };
    if !requested.contains(&name) {
        return Ok(());
    }
    let header = entry.header();
    let mode = header.mode().unwrap_or(0o644) & 0o7777;
    let mtime = header.mtime().unwrap_or(0);
    let options = SimpleFileOptions::default()
        .unix_permissions(mode)
        .last_modified_time(zip_time(mtime));
    match header.entry_type() {
        tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
            let size = entry.size();
            state
                .zip
                .start_file(
                    name.as_str(),
                    options.large_file(size >= u64::from(u32::MAX)),
                )
                .map_err(ArchiveError::zip(format!("adding {name}")))?;
            let n = io::copy(entry, &mut state.zip)
                .map_err(ArchiveError::io(format!("archiving {name}")))?;
            state.report.bytes += n;
        }
        tar::EntryType::Symlink => {
            let target = entry
                .link_name_bytes()
                .map(|t| String::from_utf8_lossy(&t).into_owned())
                .unwrap_or_default();
            // As a link, wherever it points, as GitLab Runner archives it (`os.Lstat` in
            // `commands/helpers/file_archiver.go`): extraction keeps links as links and never
            // writes through one (see `super::on_disk`).
            state
                .zip
                .add_symlink(name.as_str(), target, options)
                .map_err(ArchiveError::zip(format!("adding {name}")))?;
        }
        tar::EntryType::Link => {
            let target = entry
                .link_name_bytes()
                .map(|t| String::from_utf8_lossy(&t).into_owned())
                .unwrap_or_default();
            let source = normalize_relative(&target)
                .ok()
                .filter(|t| state.added.contains(t));
            let Some(source) = source else {
                state.warnings.push(format!(
                    "{name}: hard link to {target:?} which is not archived; skipped"
                ));
                return Ok(());
            };
            state
                .zip
                .deep_copy_file(&source, &name)
                .map_err(ArchiveError::zip(format!("adding {name}")))?;
        }
        tar::EntryType::Directory => return Ok(()),
        other => {
            state.warnings.push(format!(
                "{name}: unsupported file type {other:?}; not archived"
            ));
            return Ok(());
        }
    }
    state.added.insert(name);
    state.report.files += 1;
    Ok(())
}
