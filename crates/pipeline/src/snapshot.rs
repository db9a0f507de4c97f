//! The sources every local job starts from, archived once per pipeline for each way jobs ask
//! for them, and handed to each job through the same safe extraction path as artifacts.
//!
//! A job that fetches (`GIT_STRATEGY` `clone` or `fetch`, the default) gets what GitLab Runner
//! makes: a git repository at the pipeline's commit, fetched `GIT_DEPTH` commits deep (tags
//! that point into that history come along, as `git fetch` follows them), with a detached
//! `HEAD` and the commit checked out (unless `GIT_CHECKOUT` is false). On top, as a local run
//! promises, come the project's files as they are on disk: uncommitted changes and new files
//! included, what `.gitignore` excludes left out, so `git status` in the job shows exactly the
//! working tree's uncommitted changes. flotilla's own `.flotilla` directory is never copied.

use flotilla_job::script::SubmoduleStrategy;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use zip::ZipWriter;
use zip::write::SimpleFileOptions;

/// Why the sources could not be archived.
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

/// What of the project's repository a job asks for (from its `GIT_*` variables).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Checkout {
    /// Commits of history to fetch; 0 is all of it (`GIT_DEPTH`).
    pub depth: u32,
    /// Whether the commit is checked out and the working tree's files copied on top
    /// (`GIT_CHECKOUT`); without it the directory holds the repository only.
    pub files: bool,
    /// Which checked-out submodules have their files copied (`GIT_SUBMODULE_STRATEGY`): none
    /// (each an empty directory, as on GitLab), the top-level ones (`normal`), or all of them,
    /// nested ones too (`recursive`).
    pub submodules: SubmoduleStrategy,
}

/// The commit a pipeline runs for, and the refs GitLab would fetch with it.
#[derive(Debug, Clone, Default)]
pub struct Revision {
    /// The commit (`CI_COMMIT_SHA`).
    pub sha: String,
    /// The branch (`CI_COMMIT_BRANCH`), fetched as `refs/remotes/origin/<branch>`.
    pub branch: Option<String>,
    /// The tag (`CI_COMMIT_TAG`), fetched as itself.
    pub tag: Option<String>,
    /// The pipeline, fetched as `refs/pipelines/<id>` as GitLab sends it.
    pub pipeline_id: i64,
}

/// What a snapshot holds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnapshotReport {
    /// Files and symbolic links archived.
    pub files: u64,
    /// Size of the archive.
    pub archive_bytes: u64,
    /// What the job's log says about it, one line each.
    pub notices: Vec<String>,
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

/// Archives the sources of the project in `dir` into a zip at `archive` (stored, not
/// compressed: it never leaves this machine): with `git`, the repository at `revision` and,
/// when asked, its checkout with the working tree on top; without, the working tree's files.
/// A directory that is not the top of a git work tree with that commit gets its files only,
/// and the report says why.
pub fn snapshot(
    dir: &Path,
    archive: &Path,
    git: Option<(Checkout, &Revision)>,
) -> Result<SnapshotReport, SnapshotError> {
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SnapshotError::Io { path, source }
    };
    let parent = archive.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io_err(parent))?;
    let out = File::create(archive).map_err(io_err(archive))?;
    let mut zip = ZipWriter::new(io::BufWriter::new(out));
    let mut report = SnapshotReport::default();
    let mut with_files = true;
    let mut submodules = SubmoduleStrategy::None;
    if let Some((checkout, revision)) = git {
        with_files = checkout.files;
        submodules = checkout.submodules;
        let scratch = tempfile::tempdir_in(parent).map_err(io_err(parent))?;
        match repository(dir, scratch.path(), checkout, revision) {
            Ok(notices) => {
                report.notices = notices;
                add_tree(&mut zip, &scratch.path().join(".git"), ".git", &mut report)?;
            }
            Err(why) => {
                with_files = true;
                report.notices.push(format!(
                    "{why}: the build directory holds the project's files, without `.git`"
                ));
            }
        }
    }
    if with_files {
        add_work_tree(&mut zip, dir, "", submodules, &mut report)?;
    }
    let mut inner = zip.finish()?;
    inner.flush().map_err(io_err(archive))?;
    report.archive_bytes = std::fs::metadata(archive).map_err(io_err(archive))?.len();
    Ok(report)
}

/// Adds the files of the work tree in `dir` under `prefix` (`""` or ending in `/`). A
/// directory git lists is a submodule: empty, or with its own work tree's files when
/// `submodules` asks for them (nested ones only when it is `recursive`).
fn add_work_tree(
    zip: &mut ZipWriter<io::BufWriter<File>>,
    dir: &Path,
    prefix: &str,
    submodules: SubmoduleStrategy,
    report: &mut SnapshotReport,
) -> Result<(), SnapshotError> {
    for rel in list_files(dir) {
        let path = dir.join(&rel);
        let name = format!("{prefix}{rel}");
        let meta = match path.symlink_metadata() {
            Ok(m) => m,
            // Vanished while we listed: nothing to copy.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(SnapshotError::Io { path, source: e }),
        };
        if !meta.is_dir() {
            if add_entry(zip, &path, &name)? {
                report.files += 1;
            }
            continue;
        }
        zip.add_directory(name.as_str(), SimpleFileOptions::default())?;
        let inner = match submodules {
            SubmoduleStrategy::None => continue,
            SubmoduleStrategy::Normal => SubmoduleStrategy::None,
            SubmoduleStrategy::Recursive => SubmoduleStrategy::Recursive,
        };
        add_work_tree(zip, &path, &format!("{name}/"), inner, report)?;
    }
    Ok(())
}

/// Makes, in `scratch`, the repository GitLab Runner would leave in the build directory
/// (`shells/abstract.go`: `git init`, `git fetch origin <refspecs> --depth N`, `git checkout -f
/// <sha>`), fetching from the project's own repository. Its notices for the log, or why it
/// cannot be made.
fn repository(
    dir: &Path,
    scratch: &Path,
    checkout: Checkout,
    revision: &Revision,
) -> Result<Vec<String>, String> {
    let top = flotilla_ci::git_line(dir, &["rev-parse", "--show-toplevel"])
        .ok_or_else(|| "the project directory is not in a git repository".to_string())?;
    let top = PathBuf::from(top);
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(&top, dir) {
        return Err(format!(
            "the project directory is not the top of its git repository ({})",
            top.display()
        ));
    }
    let head = flotilla_ci::git_line(dir, &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
        .ok_or_else(|| "the git repository has no commit yet".to_string())?;
    if !revision.sha.is_empty() && revision.sha != head {
        return Err(format!(
            "CI_COMMIT_SHA {} is not the repository's HEAD",
            revision.sha
        ));
    }
    let repo = scratch.to_string_lossy().into_owned();
    run_git(None, &["init", "-q", "--template=", &repo])?;
    let source = top.to_string_lossy().into_owned();
    run_git(Some(scratch), &["remote", "add", "origin", &source])?;
    // The objects stay in the one pack the fetch receives (git unpacks fewer than 100 into a
    // file each): every job extracts the repository, and on a busy disk each file made and
    // removed costs more than the job's own work (`exec_vs_gitlab_ci_local` bench).
    let mut fetch: Vec<String> = [
        "-c",
        "fetch.unpackLimit=1",
        "fetch",
        "-q",
        "--no-recurse-submodules",
        "origin",
    ]
    .map(String::from)
    .to_vec();
    if checkout.depth > 0 {
        fetch.push("--depth".into());
        fetch.push(checkout.depth.to_string());
    }
    fetch.push(format!("+HEAD:refs/pipelines/{}", revision.pipeline_id));
    match (&revision.branch, &revision.tag) {
        (Some(branch), _) => fetch.push(format!("+HEAD:refs/remotes/origin/{branch}")),
        (None, Some(tag)) => fetch.push(format!("+refs/tags/{tag}:refs/tags/{tag}")),
        (None, None) => {}
    }
    let fetch: Vec<&str> = fetch.iter().map(String::as_str).collect();
    run_git(Some(scratch), &fetch)?;
    let short: String = head.chars().take(8).collect();
    let mut notices = vec![if checkout.depth > 0 {
        format!(
            "Fetching changes from the local repository with git depth set to {}...",
            checkout.depth
        )
    } else {
        "Fetching changes from the local repository...".to_string()
    }];
    if !checkout.files {
        notices.push("Skipping Git checkout".into());
        return Ok(notices);
    }
    run_git(Some(scratch), &["update-ref", "--no-deref", "HEAD", &head])?;
    run_git(Some(scratch), &["read-tree", "HEAD"])?;
    let reference = revision
        .branch
        .as_deref()
        .or(revision.tag.as_deref())
        .map(|r| format!(" (ref is {r})"))
        .unwrap_or_default();
    notices.push(format!(
        "Checking out {short} as detached HEAD{reference}..."
    ));
    let changes = flotilla_ci::git_line(dir, &["status", "--porcelain", "--untracked-files=all"])
        .map(|s| s.lines().count())
        .unwrap_or(0);
    notices.push(match changes {
        0 => "The working tree has no uncommitted changes".to_string(),
        n => format!(
            "Applying the working tree's {n} uncommitted change{} on top (`git status` in the \
             job lists them)",
            if n == 1 { "" } else { "s" }
        ),
    });
    Ok(notices)
}

/// Runs `git [-C dir] args…`, or says what failed.
fn run_git(dir: Option<&Path>, args: &[&str]) -> Result<(), String> {
    let mut command = Command::new("git");
    if let Some(dir) = dir {
        command.arg("-C").arg(dir);
    }
    let out = command
        .args(args)
        .output()
        .map_err(|e| format!("running git: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The subcommand, past any `-c name=value`.
    let mut words = args.iter().copied();
    let subcommand = loop {
        match words.next() {
            Some("-c") => {
                words.next();
            }
            other => break other.unwrap_or_default(),
        }
    };
    Err(format!("git {subcommand} failed: {}", stderr.trim()))
}

/// Adds every file and symbolic link under `root` to the archive under `prefix`.
fn add_tree(
    zip: &mut ZipWriter<io::BufWriter<File>>,
    root: &Path,
    prefix: &str,
    report: &mut SnapshotReport,
) -> Result<(), SnapshotError> {
    for entry in walkdir::WalkDir::new(root).follow_links(false) {
        let entry = entry.map_err(|e| SnapshotError::Io {
            path: root.to_path_buf(),
            source: io::Error::other(e.to_string()),
        })?;
        let Some(rel) = entry
            .path()
            .strip_prefix(root)
            .ok()
            .and_then(|p| p.to_str())
        else {
            continue;
        };
        if rel.is_empty() || entry.file_type().is_dir() {
            continue;
        }
        if add_entry(zip, entry.path(), &format!("{prefix}/{rel}"))? {
            report.files += 1;
        }
    }
    Ok(())
}

/// Adds one file or symbolic link; false when `path` is neither (or vanished).
fn add_entry(
    zip: &mut ZipWriter<io::BufWriter<File>>,
    path: &Path,
    name: &str,
) -> Result<bool, SnapshotError> {
    let io_err = |source| SnapshotError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = match path.symlink_metadata() {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_err(e)),
    };
    let mtime = u64::try_from(meta.mtime()).unwrap_or(0);
    let options = SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .unix_permissions(meta.permissions().mode() & 0o7777)
        .last_modified_time(flotilla_job::archive::zip_time(mtime))
        .large_file(meta.len() >= u32::MAX as u64);
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(path).map_err(io_err)?;
        zip.add_symlink(name, target.to_string_lossy().as_ref(), options)?;
    } else if meta.is_file() {
        zip.start_file(name, options)?;
        let mut f = File::open(path).map_err(io_err)?;
        io::copy(&mut f, zip).map_err(io_err)?;
    } else {
        return Ok(false);
    }
    Ok(true)
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
        let report = snapshot(p, &zip_path, None).unwrap();
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
