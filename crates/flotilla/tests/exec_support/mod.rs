//! Shared by the `exec_*` tests: a project in a temporary git repository, the real `flotilla`
//! binary run in it, and readers for what a run leaves behind (the summary table on stdout, the
//! job logs under `.flotilla/logs/<pipeline>/`).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository's `examples/` directory.
pub(crate) fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// A project directory of its own, `<temporary directory>/project` (so `CI_PROJECT_NAME` is
/// `project`), removed when dropped.
pub(crate) struct Project {
    tmp: tempfile::TempDir,
    dir: PathBuf,
}

/// What one `flotilla` run printed and returned.
#[derive(Debug)]
pub(crate) struct Run {
    /// The exit status (`-1` when killed by a signal).
    pub code: i32,
    /// Standard output (the summary table, `--list`, followed logs).
    pub stdout: String,
    /// Standard error (progress lines, warnings, errors).
    pub stderr: String,
}

/// One row of the summary table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    /// The STAGE column.
    pub stage: String,
    /// The STATUS column.
    pub status: String,
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "Flotilla Test")
        .env("GIT_AUTHOR_EMAIL", "test@flotilla.invalid")
        .env("GIT_COMMITTER_NAME", "Flotilla Test")
        .env("GIT_COMMITTER_EMAIL", "test@flotilla.invalid")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == ".flotilla" {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

impl Project {
    /// An empty project: a git repository on branch `main` with no commit yet.
    pub(crate) fn empty() -> Project {
        let tmp = tempfile::Builder::new()
            .prefix("flotilla-exec-test-")
            .tempdir()
            .unwrap();
        let dir = tmp.path().join("project");
        std::fs::create_dir(&dir).unwrap();
        git(&dir, &["init", "-q", "-b", "main"]);
        Project { tmp, dir }
    }

    /// A project whose `.gitlab-ci.yml` is `yaml`, committed on `main`.
    pub(crate) fn with_pipeline(yaml: &str) -> Project {
        let p = Project::empty();
        p.write(".gitlab-ci.yml", yaml);
        p.commit("the pipeline");
        p
    }

    /// A copy of `examples/<name>`, committed on `main`.
    pub(crate) fn example(name: &str) -> Project {
        Project::copy_of(&examples_dir().join(name))
    }

    /// A copy of the directory `dir`, committed on `main`.
    pub(crate) fn copy_of(dir: &Path) -> Project {
        let p = Project::empty();
        copy_tree(dir, p.path());
        p.commit("a copy");
        p
    }

    /// The project's directory.
    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }

    /// A directory beside the project, for files a job must not find in its build directory.
    pub(crate) fn outside(&self) -> PathBuf {
        let d = self.tmp.path().join("outside");
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Writes `text` to the project file `rel` (directories made as needed).
    pub(crate) fn write(&self, rel: &str, text: &str) {
        let path = self.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Commits everything (`git add -A`).
    pub(crate) fn commit(&self, message: &str) {
        git(self.path(), &["add", "-A"]);
        git(
            self.path(),
            &["commit", "-q", "--allow-empty", "-m", message],
        );
    }

    /// Runs git in the project.
    pub(crate) fn git(&self, args: &[&str]) {
        git(self.path(), args);
    }

    /// Runs `flotilla exec ARGS` in the project directory.
    pub(crate) fn exec(&self, args: &[&str]) -> Run {
        self.flotilla(&[&["exec"], args].concat())
    }

    /// Runs `flotilla exec ARGS` with `env` set.
    pub(crate) fn exec_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        self.flotilla_with_env(&[&["exec"], args].concat(), env)
    }

    /// Runs `flotilla ARGS` in the project directory.
    pub(crate) fn flotilla(&self, args: &[&str]) -> Run {
        self.flotilla_with_env(args, &[])
    }

    /// Runs `flotilla ARGS` in the project directory with `env` set.
    pub(crate) fn flotilla_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        Run::of(
            Command::new(env!("CARGO_BIN_EXE_flotilla"))
                .args(args)
                .current_dir(self.path())
                .envs(env.iter().copied()),
        )
    }

    /// The pipeline directories under `.flotilla/logs`, oldest first.
    pub(crate) fn pipelines(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(self.path().join(".flotilla/logs")) else {
            return Vec::new();
        };
        let mut ids: Vec<(u64, PathBuf)> = entries
            .map(|e| e.unwrap().path())
            .filter_map(|p| Some((p.file_name()?.to_str()?.parse().ok()?, p)))
            .collect();
        ids.sort();
        ids.into_iter().map(|(_, p)| p).collect()
    }

    /// The log files of the latest pipeline, by file name (`NN-<job slug>.log`).
    pub(crate) fn logs(&self) -> BTreeMap<String, String> {
        let latest = self.pipelines().pop().expect("a pipeline ran");
        std::fs::read_dir(latest)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(&p).unwrap())
            })
            .collect()
    }

    /// The latest pipeline's log of the job whose slug is `slug` (`NN-<slug>.log`).
    pub(crate) fn log(&self, slug: &str) -> String {
        let logs = self.logs();
        let found: Vec<&String> = logs
            .iter()
            .filter(|(name, _)| {
                name.split_once('-').is_some_and(|(n, rest)| {
                    n.chars().all(|c| c.is_ascii_digit()) && rest == format!("{slug}.log")
                })
            })
            .map(|(_, text)| text)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "one log for {slug} in {:?}",
            logs.keys().collect::<Vec<_>>()
        );
        found[0].clone()
    }
}

impl Run {
    /// Runs `command` (the flotilla binary) to the end, without the caller's
    /// `FLOTILLA_CONFIG` and `RUST_LOG`.
    pub(crate) fn of(command: &mut Command) -> Run {
        let out: Output = command
            .env_remove("FLOTILLA_CONFIG")
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Panics with everything printed unless the exit status is `code`.
    pub(crate) fn expect_code(&self, code: i32) -> &Run {
        assert_eq!(self.code, code, "exit status; the run printed:\n{self}");
        self
    }

    /// The summary table: job name to stage and status.
    pub(crate) fn rows(&self) -> BTreeMap<String, Row> {
        let mut lines = self.stdout.lines().skip_while(|l| {
            !(l.starts_with("JOB ") && l.contains(" STATUS ") && l.ends_with("DURATION"))
        });
        assert!(lines.next().is_some(), "no summary table in:\n{self}");
        let mut rows = BTreeMap::new();
        for line in lines.take_while(|l| !l.trim().is_empty()) {
            // Columns are padded with at least two spaces; cells never hold two in a row.
            let cells: Vec<&str> = line
                .split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect();
            assert_eq!(cells.len(), 4, "a summary row of four cells: {line:?}");
            rows.insert(
                cells[0].to_string(),
                Row {
                    stage: cells[1].to_string(),
                    status: cells[2].to_string(),
                },
            );
        }
        rows
    }

    /// The summary as `job → status`.
    pub(crate) fn statuses(&self) -> BTreeMap<String, String> {
        self.rows()
            .into_iter()
            .map(|(job, row)| (job, row.status))
            .collect()
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit status {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// `[("a", "passed"), …]` as the map [`Run::statuses`] returns.
pub(crate) fn statuses(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(j, s)| (j.to_string(), s.to_string()))
        .collect()
}
