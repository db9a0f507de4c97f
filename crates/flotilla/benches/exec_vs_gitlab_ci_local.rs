//! `flotilla exec` against gitlab-ci-local on the same 20-job shell pipeline
//! (`pipeline-20-jobs.gitlab-ci.yml`), side by side: each round runs every contender once, in
//! a rotating order, on a clean checkout of the same temporary git repository, and the wall
//! times, their medians and flotilla's ratio to each gitlab-ci-local mode are printed.
//!
//! ```text
//! cargo bench -p flotilla --bench exec_vs_gitlab_ci_local -- [ROUNDS]
//! ```
//!
//! gitlab-ci-local is taken from `$GITLAB_CI_LOCAL`, else from the cache
//! `scripts/bench-exec.sh` installs it in, else from `PATH`; without it only flotilla is
//! measured. It needs `rsync`. `scripts/bench-exec.sh` installs it and runs this.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PIPELINE: &str = include_str!("pipeline-20-jobs.gitlab-ci.yml");
const JOBS: usize = 20;

/// One way of running the pipeline.
struct Contender {
    name: &'static str,
    program: PathBuf,
    args: Vec<String>,
    /// Counts the jobs that passed in what the run printed.
    passed: fn(&str) -> usize,
    times: Vec<Duration>,
}

fn flotilla_passed(stdout: &str) -> usize {
    stdout
        .lines()
        .filter(|l| l.split("  ").map(str::trim).any(|c| c == "passed"))
        .count()
}

fn gcl_passed(stdout: &str) -> usize {
    stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("PASS "))
        .count()
}

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "Bench")
        .env("GIT_AUTHOR_EMAIL", "bench@flotilla.invalid")
        .env("GIT_COMMITTER_NAME", "Bench")
        .env("GIT_COMMITTER_EMAIL", "bench@flotilla.invalid")
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "git {args:?} failed");
}

/// The project: the pipeline and a source file, committed, with an `origin` remote (which
/// gitlab-ci-local wants).
fn project(dir: &Path) {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join(".gitlab-ci.yml"), PIPELINE).unwrap();
    let source: String = (0..200)
        .map(|i| format!("#include <h{i}.h>\nint f{i}(void) {{ return {i}; }}\n"))
        .collect();
    std::fs::write(dir.join("src/main.c"), source).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    git(
        dir,
        &[
            "remote",
            "add",
            "origin",
            "https://gitlab.example.com/bench/project.git",
        ],
    );
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "bench"]);
}

fn gitlab_ci_local() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("GITLAB_CI_LOCAL") {
        return Some(PathBuf::from(p));
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    let cached = cache.join("flotilla-bench/gitlab-ci-local/node_modules/.bin/gitlab-ci-local");
    if cached.exists() {
        return Some(cached);
    }
    let found = Command::new("sh")
        .args(["-c", "command -v gitlab-ci-local"])
        .output()
        .ok()?;
    found
        .status
        .success()
        .then(|| PathBuf::from(String::from_utf8_lossy(&found.stdout).trim()))
}

/// Runs one contender once on a clean checkout; panics unless every job passed.
fn run_once(c: &Contender, dir: &Path) -> Duration {
    git(dir, &["clean", "-ffdxq"]);
    let started = Instant::now();
    let out = Command::new(&c.program)
        .args(&c.args)
        // `cargo bench` points the dynamic loader at its target and toolchain directories;
        // left set, every process a contender starts searches them first (measured: ~25 %
        // of flotilla's wall time on this pipeline). Run both as a user's shell would.
        .env_remove("LD_LIBRARY_PATH")
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", c.program.display()));
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let passed = (c.passed)(&stdout);
    assert!(
        out.status.success() && passed == JOBS,
        "{}: {} with {passed} of {JOBS} jobs passed\n{stdout}\n{}",
        c.name,
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

fn median(times: &[Duration]) -> Duration {
    let mut t = times.to_vec();
    t.sort();
    let n = t.len();
    if n % 2 == 1 {
        t[n / 2]
    } else {
        (t[n / 2 - 1] + t[n / 2]) / 2
    }
}

fn secs(d: Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}

fn main() {
    // `cargo bench` passes `--bench`; a bare number is the round count.
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .or_else(|| std::env::var("BENCH_ROUNDS").ok()?.parse().ok())
        .unwrap_or(5);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("project");
    project(&dir);

    let mut contenders = vec![Contender {
        name: "flotilla exec",
        program: PathBuf::from(env!("CARGO_BIN_EXE_flotilla")),
        args: vec!["exec".into()],
        passed: flotilla_passed,
        times: Vec::new(),
    }];
    match gitlab_ci_local() {
        Some(gcl) => {
            let version = Command::new(&gcl)
                .arg("--version")
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_default();
            println!("gitlab-ci-local {version} at {}", gcl.display());
            contenders.push(Contender {
                name: "gitlab-ci-local",
                program: gcl.clone(),
                args: Vec::new(),
                passed: gcl_passed,
                times: Vec::new(),
            });
            contenders.push(Contender {
                name: "gitlab-ci-local --shell-isolation",
                program: gcl,
                args: vec!["--shell-isolation".into()],
                passed: gcl_passed,
                times: Vec::new(),
            });
        }
        None => println!(
            "gitlab-ci-local not found (set GITLAB_CI_LOCAL or run scripts/bench-exec.sh): \
             measuring flotilla only"
        ),
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "{JOBS}-job shell pipeline, {rounds} rounds, {cores} cores, after one warm-up run each"
    );
    for c in &contenders {
        run_once(c, &dir);
    }
    for round in 0..rounds {
        let n = contenders.len();
        let mut line = format!("round {:>2}:", round + 1);
        for k in 0..n {
            let i = (round + k) % n;
            let took = run_once(&contenders[i], &dir);
            contenders[i].times.push(took);
        }
        for c in &contenders {
            line.push_str(&format!("  {} {}", c.name, secs(*c.times.last().unwrap())));
        }
        println!("{line}");
    }
    println!();
    println!("{:<36} {:>8} {:>8} {:>8}", "", "min", "median", "max");
    for c in &contenders {
        println!(
            "{:<36} {:>8} {:>8} {:>8}",
            c.name,
            secs(*c.times.iter().min().unwrap()),
            secs(median(&c.times)),
            secs(*c.times.iter().max().unwrap())
        );
    }
    let flotilla = median(&contenders[0].times).as_secs_f64();
    for c in &contenders[1..] {
        let other = median(&c.times).as_secs_f64();
        println!(
            "flotilla / {}: {:.2} (median wall time; target at most 0.35)",
            c.name,
            flotilla / other
        );
    }
}
