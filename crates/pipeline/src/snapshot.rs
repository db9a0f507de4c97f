//! The working tree every local job starts from: the project's files as they are on disk
//! (uncommitted changes included), without what `.gitignore` excludes, `.git` and flotilla's
//! own `.flotilla` directory. It is archived once per pipeline and handed to each job like a
//! dependency's artifacts, through the same safe extraction path.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use zip::ZipWriter;
use zip::write::SimpleFileOptions;

/// Why the working tree could not be archived.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// A file could not be read or the archive written.
    #[error("archiving the working tree: {path}: {source}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The zip archive could not be written.
    #[error("archiving the working tree: {0}")]
    Zip(#[from] zip::result::ZipError),
}

/// What a snapshot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotReport {
    /// Files and symbolic links archived.
    pub files: u64,
    /// Size of the archive.
    pub archive_bytes: u64,
}

/// Directories never copied into a job.
const SKIPPED_DIRS: &[&str] = &[".git", ".flotilla"];

fn skipped(rel: &str) -> bool {
    SKIPPED_DIRS
        .iter()
        .any(|d| rel == *d || rel.starts_with(&format!("{d}/")))
}

/// The files to copy, relative to `dir`: git's view when `dir` is in a git work tree
/// (tracked and untracked, minus ignored), every file otherwise.
pub fn list_files(dir: &Path) -> Vec<String> {
    let git = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .output();
    if let Ok(out) = git
        && out.status.success()
    {
        let mut files: Vec<String> = out
            .stdout
            .split(|b| *b == 0)
            .filter(|n| !n.is_empty())
            .filter_map(|n| std::str::from_utf8(n).ok())
            .map(str::to_string)
            .filter(|n| !skipped(n))
            // Tracked files deleted in the work tree are not copied.
            .filter(|n| dir.join(n).symlink_metadata().is_ok())
            .collect();
        files.sort();
        files.dedup();
        return files;
    }
    let mut files = Vec::new();
    for entry in walkdir::WalkDir::new(dir)
        .follow_links(false)
        .into_iter()
        .filter_entry(|e| {
            e.path()
                .strip_prefix(dir)
                .ok()
                .and_then(|p| p.to_str())
                .is_none_or(|p| p.is_empty() || !skipped(p))
        })
        .filter_map(Result::ok)
    {
        if entry.file_type().is_dir() {
            continue;
        }
        if let Some(rel) = entry.path().strip_prefix(dir).ok().and_then(|p| p.to_str()) {
            files.push(rel.to_string());
        }
    }
    files.sort();
    files
}

/// Archives the working tree of `dir` into a zip at `archive` (stored, not compressed: it
/// never leaves this machine).
pub fn snapshot(dir: &Path, archive: &Path) -> Result<SnapshotReport, SnapshotError> {
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SnapshotError::Io { path, source }
    };
    if let Some(parent) = archive.parent() {
        std::fs::create_dir_all(parent).map_err(io_err(parent))?;
    }
    let out = File::create(archive).map_err(io_err(archive))?;
    let mut zip = ZipWriter::new(io::BufWriter::new(out));
    let mut files = 0u64;
    for rel in list_files(dir) {
        let path = dir.join(&rel);
        let meta = match path.symlink_metadata() {
            Ok(m) => m,
            // Vanished while we listed: nothing to copy.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(SnapshotError::Io { path, source: e }),
        };
        let mtime = u64::try_from(meta.mtime()).unwrap_or(0);
        let options = SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .unix_permissions(meta.permissions().mode() & 0o7777)
            .last_modified_time(flotilla_job::archive::zip_time(mtime))
            .large_file(meta.len() >= u32::MAX as u64);
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).map_err(io_err(&path))?;
            zip.add_symlink(rel.as_str(), target.to_string_lossy().as_ref(), options)?;
        } else if meta.is_file() {
            zip.start_file(rel.as_str(), options)?;
            let mut f = File::open(&path).map_err(io_err(&path))?;
            io::copy(&mut f, &mut zip).map_err(io_err(&path))?;
        } else {
            continue;
        }
        files += 1;
    }
    let mut inner = zip.finish()?;
    inner.flush().map_err(io_err(archive))?;
    let archive_bytes = std::fs::metadata(archive).map_err(io_err(archive))?.len();
    Ok(SnapshotReport {
        files,
        archive_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }

    #[test]
    fn git_tree_includes_uncommitted_and_excludes_ignored() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        git(p, &["init", "-q"]);
        std::fs::write(p.join(".gitignore"), "target/\n*.log\n").unwrap();
        std::fs::write(p.join("tracked.txt"), "v1").unwrap();
        std::fs::write(p.join("gone.txt"), "x").unwrap();
        git(p, &["add", "."]);
        git(p, &["commit", "-qm", "init"]);
        std::fs::write(p.join("tracked.txt"), "v2 uncommitted").unwrap();
        std::fs::write(p.join("new.txt"), "untracked").unwrap();
        std::fs::remove_file(p.join("gone.txt")).unwrap();
        std::fs::create_dir_all(p.join("target")).unwrap();
        std::fs::write(p.join("target/bin"), "ignored").unwrap();
        std::fs::write(p.join("debug.log"), "ignored").unwrap();
        std::fs::create_dir_all(p.join(".flotilla/cache")).unwrap();
        std::fs::write(p.join(".flotilla/cache/x"), "ours").unwrap();
        std::os::unix::fs::symlink("tracked.txt", p.join("link")).unwrap();
        assert_eq!(
            list_files(p),
            vec![".gitignore", "link", "new.txt", "tracked.txt"]
        );
        let out = tempfile::tempdir().unwrap();
        let zip_path = out.path().join("archives/sources.zip");
        let report = snapshot(p, &zip_path).unwrap();
        assert_eq!(report.files, 4);
        let mut z = zip::ZipArchive::new(File::open(&zip_path).unwrap()).unwrap();
        let mut s = String::new();
        io::Read::read_to_string(&mut z.by_name("tracked.txt").unwrap(), &mut s).unwrap();
        assert_eq!(s, "v2 uncommitted");
    }

    #[test]
    fn plain_directory_takes_everything_but_our_own() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        std::fs::create_dir_all(p.join("src/deep")).unwrap();
        std::fs::write(p.join("src/deep/a.rs"), "a").unwrap();
        std::fs::write(p.join("README"), "r").unwrap();
        std::fs::create_dir_all(p.join(".flotilla")).unwrap();
        std::fs::write(p.join(".flotilla/log"), "l").unwrap();
        assert_eq!(list_files(p), vec!["README", "src/deep/a.rs"]);
    }
}
