//! The project directory as the compiler sees it: files to include, to test with `exists`, and
//! to hash for cache keys. Its file list is what a build would copy: with git, the tracked and
//! untracked-but-not-ignored files; without git, every file outside `.git`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use globset::{GlobBuilder, GlobMatcher};

use super::git::{git, git_line};

/// The project root and, computed once when first needed, its file list.
#[derive(Debug)]
pub(crate) struct Project {
    root: PathBuf,
    /// Whether the root is the top of a git work tree, asked once.
    repository: OnceLock<bool>,
    files: OnceLock<Vec<String>>,
    /// The answers of [`Project::changed_since`], by ref.
    changes: Mutex<HashMap<String, Option<Vec<String>>>>,
}

impl Project {
    /// The project at `root`.
    pub(crate) fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            repository: OnceLock::new(),
            files: OnceLock::new(),
            changes: Mutex::new(HashMap::new()),
        }
    }

    /// The project directory.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The contents of `relative` (a `/`-separated path under the root).
    pub(crate) fn read_bytes(&self, relative: &str) -> std::io::Result<Vec<u8>> {
        std::fs::read(self.root.join(relative))
    }

    /// Whether `relative` is a file.
    pub(crate) fn is_file(&self, relative: &str) -> bool {
        self.root.join(relative).is_file()
    }

    /// Whether git is asked about the project (see [`is_repository_root`]).
    fn is_repository(&self) -> bool {
        *self
            .repository
            .get_or_init(|| is_repository_root(&self.root))
    }

    /// Every file of the project, `/`-separated, sorted.
    pub(crate) fn files(&self) -> &[String] {
        self.files.get_or_init(|| {
            let listed = if self.is_repository() {
                list_with_git(&self.root)
            } else {
                None
            };
            let mut files = listed.unwrap_or_else(|| list_by_walking(&self.root));
            files.retain(|f| self.root.join(f).is_file());
            files.sort();
            files.dedup();
            files
        })
    }

    /// The files changed since the merge base of `reference` and `HEAD`, the working tree's
    /// changes and untracked (not ignored) files included, sorted; `None` when git does not
    /// know the ref (or there is no git, or no commit yet).
    pub(crate) fn changed_since(&self, reference: &str) -> Option<Vec<String>> {
        if !self.is_repository() {
            return None;
        }
        let mut cache = self.changes.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .entry(reference.to_string())
            .or_insert_with(|| changed_since(&self.root, reference))
            .clone()
    }

    /// The files matching a glob (`*` stays within a directory, `**` crosses directories),
    /// sorted.
    pub(crate) fn glob(&self, pattern: &str) -> Vec<String> {
        match glob_matcher(pattern) {
            Some(matcher) => self
                .files()
                .iter()
                .filter(|f| matcher.is_match(f.as_str()))
                .cloned()
                .collect(),
            None => Vec::new(),
        }
    }
}

/// A matcher for a GitLab path glob (leading `/` and `./` ignored); `None` if it is not a glob.
pub(crate) fn glob_matcher(pattern: &str) -> Option<GlobMatcher> {
    let pattern = pattern.trim_start_matches("./").trim_start_matches('/');
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .ok()
        .map(|g| g.compile_matcher())
}

/// What a local run's `rules:changes` compare against: the files changed since the merge base
/// of the default branch and `HEAD`, the working tree's uncommitted changes and untracked files
/// included.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalChanges {
    /// The ref compared against (`origin/main`, or `main` when there is no remote branch).
    pub base: String,
    /// The changed files, `/`-separated, sorted.
    pub files: Vec<String>,
}

/// The changes of the checkout in `project_dir` against its default branch (the remote's
/// branch first, else the local one); `None` when git cannot tell (no repository, no commit,
/// no such branch).
pub fn local_changes(project_dir: &Path, default_branch: &str) -> Option<LocalChanges> {
    if !is_repository_root(project_dir) {
        return None;
    }
    [
        format!("origin/{default_branch}"),
        default_branch.to_string(),
    ]
    .into_iter()
    .find_map(|base| {
        let files = changed_since(project_dir, &base)?;
        Some(LocalChanges { base, files })
    })
}

/// Whether `root` is the top of a git work tree: git is asked about the project only then, so
/// a directory inside another repository (a pipeline of a test corpus, a vendored copy) is
/// not judged by that repository's history.
fn is_repository_root(root: &Path) -> bool {
    let Some(top) = git_line(root, &["rev-parse", "--show-toplevel"]) else {
        return false;
    };
    match (Path::new(&top).canonicalize(), root.canonicalize()) {
        (Ok(top), Ok(root)) => top == root,
        _ => false,
    }
}

/// The files changed since the merge base of `reference` and `HEAD` in the repository whose
/// top is `root` (the caller has checked that it is one).
fn changed_since(root: &Path, reference: &str) -> Option<Vec<String>> {
    if reference.starts_with('-') {
        return None;
    }
    let commit = git_line(
        root,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{reference}^{{commit}}"),
        ],
    )?;
    let base = git_line(root, &["merge-base", &commit, "HEAD"])?;
    let mut files: Vec<String> = git(root, &["diff", "--name-only", "-z", &base, "--"])?
        .split('\0')
        .chain(git(root, &["ls-files", "-z", "--others", "--exclude-standard"])?.split('\0'))
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    files.sort();
    files.dedup();
    Some(files)
}

fn list_with_git(root: &Path) -> Option<Vec<String>> {
    let out = git(
        root,
        &[
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ],
    )?;
    Some(
        out.split('\0')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
    )
}

fn list_by_walking(root: &Path) -> Vec<String> {
    walkdir::WalkDir::new(root)
        .into_iter()
        .filter_entry(|e| e.file_name() != ".git")
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .filter_map(|e| {
            let relative = e.path().strip_prefix(root).ok()?;
            let parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            Some(parts.join("/"))
        })
        .collect()
}
