//! How long compiling the largest corpus pipeline takes, against gitlab-ci-local listing the
//! same pipeline in the same run (when it is installed).
//!
//!     cargo bench -p flotilla-ci --bench compile_corpus [-- ROUNDS]
//!
//! The largest pipeline is the corpus pipeline with the most jobs once compiled with its
//! options; gitlab-ci-local cannot read remote or project includes, so the side-by-side figure
//! is on the largest it lists (as recorded in tests/differential/gitlab-ci-local.json).
//! flotilla's figures are the median wall time of `compile` over ROUNDS (default 20) rounds in
//! this process; the target is at most 100 ms in a release build. gitlab-ci-local is
//! looked for at $GITLAB_CI_LOCAL or in ~/.cache/flotilla-bench/gitlab-ci-local (where
//! scripts/bench-exec.sh and scripts/differential-gitlab-ci-local.py install it); its figure is
//! the wall time of `gitlab-ci-local --list` on a git repository holding the same files, with
//! the same variables.

#[path = "../tests/corpus_support/mod.rs"]
mod corpus_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use corpus_support::{corpus, options_for};
use flotilla_ci::compile;

/// The target for compiling the largest corpus pipeline in a release build.
const TARGET: Duration = Duration::from_millis(100);

fn main() {
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20);
    let sized: Vec<(PathBuf, usize)> = corpus()
        .into_iter()
        .filter_map(|dir| {
            let jobs = compile(&options_for(&dir)).ok()?.jobs.len();
            Some((dir, jobs))
        })
        .collect();
    let (largest, jobs) = sized
        .iter()
        .max_by_key(|(_, jobs)| *jobs)
        .expect("the corpus has pipelines that compile");
    let median = time_compile(largest, *jobs, rounds);
    // The side-by-side needs a pipeline gitlab-ci-local can list: the largest whose includes
    // are all local (those the differential recorded it listing).
    let listable = listed_by_gitlab_ci_local();
    let comparable = sized
        .iter()
        .filter(|(dir, _)| listable.contains(&name_of(dir)))
        .max_by_key(|(_, jobs)| *jobs);
    println!(
        "flotilla compile: median of {rounds} rounds ({} build; target at most {} ms)",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        TARGET.as_millis()
    );
    report(largest, *jobs, median, "the largest corpus pipeline");
    let Some((dir, jobs)) = comparable else {
        println!("no corpus pipeline is listed by gitlab-ci-local in tests/differential");
        return;
    };
    let median = time_compile(dir, *jobs, rounds);
    report(dir, *jobs, median, "the largest gitlab-ci-local can list");
    match gitlab_ci_local() {
        None => println!(
            "gitlab-ci-local --list  not installed (set GITLAB_CI_LOCAL or run scripts/bench-exec.sh once)"
        ),
        Some(gcl) => match list_with(&gcl, dir) {
            Ok(took) => println!(
                "gitlab-ci-local --list  {:>9.2} ms (one run, same pipeline)\nflotilla / gitlab-ci-local: {:.4}",
                ms(took),
                median.as_secs_f64() / took.as_secs_f64()
            ),
            Err(e) => println!("gitlab-ci-local --list  failed: {e}"),
        },
    }
}

fn name_of(dir: &Path) -> String {
    dir.file_name().unwrap().to_string_lossy().into_owned()
}

/// The median wall time of compiling `dir` (which has `jobs` jobs) over `rounds` rounds.
fn time_compile(dir: &Path, jobs: usize, rounds: usize) -> Duration {
    let options = options_for(dir);
    let mut times: Vec<Duration> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            let pipeline = compile(&options).expect("it compiled before");
            assert_eq!(pipeline.jobs.len(), jobs);
            start.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

fn report(dir: &Path, jobs: usize, median: Duration, what: &str) {
    println!(
        "{what}: {} ({jobs} jobs): {:>8.2} ms ({})",
        name_of(dir),
        ms(median),
        if median <= TARGET {
            "target met"
        } else {
            "target NOT met"
        }
    );
}

/// The corpus pipelines gitlab-ci-local lists (`tests/differential/gitlab-ci-local.json`).
fn listed_by_gitlab_ci_local() -> Vec<String> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/differential/gitlab-ci-local.json");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let recorded: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    recorded["pipelines"]
        .as_object()
        .map(|all| {
            all.iter()
                .filter(|(_, v)| v.get("jobs").is_some())
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn gitlab_ci_local() -> Option<PathBuf> {
    if let Some(explicit) = std::env::var_os("GITLAB_CI_LOCAL") {
        return Some(PathBuf::from(explicit));
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    let binary = cache.join("flotilla-bench/gitlab-ci-local/node_modules/.bin/gitlab-ci-local");
    binary.exists().then_some(binary)
}

/// The wall time of `gitlab-ci-local --list` on a copy of `dir` in a git repository, with the
/// pipeline's variables.
fn list_with(gcl: &Path, dir: &Path) -> Result<Duration, String> {
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let repo = scratch.path().join("project");
    copy_tree(dir, &repo).map_err(|e| e.to_string())?;
    for args in [
        vec!["init", "-q", "-b", "main"],
        vec![
            "remote",
            "add",
            "origin",
            "https://gitlab.example.com/group/project.git",
        ],
        vec!["add", "-A"],
        vec![
            "-c",
            "user.name=Bench",
            "-c",
            "user.email=bench@flotilla.invalid",
            "commit",
            "-q",
            "-m",
            "bench",
        ],
        vec!["update-ref", "refs/remotes/origin/main", "HEAD"],
        vec![
            "symbolic-ref",
            "refs/remotes/origin/HEAD",
            "refs/remotes/origin/main",
        ],
    ] {
        let status = Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(&args)
            .status();
        if !status.is_ok_and(|s| s.success()) {
            return Err(format!("git {args:?} failed"));
        }
    }
    let options = options_for(dir);
    let base: Vec<String> = corpus_support::base_variables()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let mut command = Command::new(gcl);
    command
        .current_dir(&repo)
        .args(["--list", "--json-schema-validation=false"])
        .env("NO_COLOR", "1");
    let mut overridden = Vec::new();
    for (key, value) in &options.variables {
        let predefined = base.contains(key)
            && corpus_support::base_variables()
                .iter()
                .any(|(k, v)| k == key && v == value);
        if !predefined {
            overridden.push(key.clone());
            command.args(["--variable", &format!("{key}={value}")]);
        }
    }
    for key in &base {
        if !options.variables.iter().any(|(k, _)| k == key) {
            overridden.push(key.clone());
            command.args(["--unset-variable", key]);
        }
    }
    command.env("GCL_IGNORE_PREDEFINED_VARS", overridden.join(","));
    let start = Instant::now();
    let output = command.output().map_err(|e| e.to_string())?;
    let took = start.elapsed();
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(stderr.lines().last().unwrap_or_default().to_string());
    }
    Ok(took)
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if ["expected.json", "options.json", "outcome.txt", "SOURCE"]
            .iter()
            .any(|n| name == *n)
        {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}
