//! The compiler's corpus (`crates/ci/tests/pipelines/`), run: every pipeline with an
//! `outcome.txt` is copied into a temporary git repository and run by the real
//! `flotilla exec` on the embedded default, and the summary must hold exactly the statuses
//! listed there.
//!
//! `outcome.txt`, line by line (`#` starts a comment):
//!
//! - `git ARGS…`: run in the repository before the pipeline (a branch, a tag);
//! - `exec ARGS…`: extra arguments for `flotilla exec` (`--variable K=V`, `--manual`);
//! - `exit N`: the expected exit status;
//! - `JOB => STATUS`: a row of the summary table (`passed`, `failed`, `failed (allowed)`,
//!   `skipped`, `passed (2 attempts)`, …), in the table's order.
//!
//! The jobs must also be those of the pipeline's `expected.json` (the compiled snapshot), so
//! the setup lines must reproduce its `options.json`; `jobs differ from expected.json` says
//! on purpose that they cannot (for example `changed_files`, which a local run cannot know).
//!
//! To rewrite the job lines after a deliberate change: `UPDATE_OUTCOMES=1 cargo test -p
//! flotilla --test integration exec_corpus::`, then review the diff.

use crate::exec_support;

use exec_support::Project;
use std::path::{Path, PathBuf};

/// What `outcome.txt` says.
#[derive(Debug, Default)]
struct Outcome {
    /// Every line but the job lines, kept for rewriting.
    header: Vec<String>,
    git: Vec<Vec<String>>,
    exec: Vec<String>,
    exit: i32,
    jobs: Vec<(String, String)>,
    jobs_differ: bool,
}

fn parse(text: &str) -> Outcome {
    let mut o = Outcome::default();
    for line in text.lines() {
        if let Some((job, status)) = line.split_once(" => ") {
            o.jobs
                .push((job.trim().to_string(), status.trim().to_string()));
            continue;
        }
        o.header.push(line.to_string());
        let line = line.trim();
        let words = || line.split_whitespace().skip(1).map(str::to_string);
        if line.is_empty() || line.starts_with('#') {
        } else if line.starts_with("git ") {
            o.git.push(words().collect());
        } else if line.starts_with("exec ") {
            o.exec.extend(words());
        } else if let Some(code) = line.strip_prefix("exit ") {
            o.exit = code.trim().parse().expect("exit N");
        } else if line == "jobs differ from expected.json" {
            o.jobs_differ = true;
        } else {
            panic!("outcome.txt: cannot read {line:?}");
        }
    }
    o
}

fn corpus() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ci/tests/pipelines");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("outcome.txt").is_file())
        .collect();
    dirs.sort();
    dirs
}

/// The job names of the compiled snapshot.
fn expected_jobs(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    value["jobs"]
        .as_array()
        .map(|jobs| {
            jobs.iter()
                .map(|j| j["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Runs one pipeline; `Err` says how it differs from its outcome.
fn check(dir: &Path, update: bool) -> Result<(), String> {
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    let outcome_path = dir.join("outcome.txt");
    let outcome = parse(&std::fs::read_to_string(&outcome_path).unwrap());
    let p = Project::copy_of(dir);
    for args in &outcome.git {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        p.git(&args);
    }
    let args: Vec<&str> = outcome.exec.iter().map(String::as_str).collect();
    let run = p.exec(&args);
    let actual: Vec<(String, String)> = if run.stdout.contains("\nJOB ") {
        let mut rows: Vec<(usize, String, String)> = run
            .rows()
            .into_iter()
            .map(|(job, row)| {
                let at = run.stdout.find(&format!("\n{job}  ")).unwrap_or(usize::MAX);
                (at, job, row.status)
            })
            .collect();
        rows.sort();
        rows.into_iter().map(|(_, j, s)| (j, s)).collect()
    } else {
        Vec::new()
    };
    if update {
        let mut text = String::new();
        for line in &outcome.header {
            if line.starts_with("exit ") {
                text.push_str(&format!("exit {}\n", run.code));
            } else {
                text.push_str(line);
                text.push('\n');
            }
        }
        for (job, status) in &actual {
            text.push_str(&format!("{job} => {status}\n"));
        }
        std::fs::write(&outcome_path, text).unwrap();
        return Ok(());
    }
    let mut problems = Vec::new();
    if run.code != outcome.exit {
        problems.push(format!(
            "exit status {} (expected {})",
            run.code, outcome.exit
        ));
    }
    if actual != outcome.jobs {
        problems.push(format!(
            "statuses {actual:?}\n  expected {:?}",
            outcome.jobs
        ));
    }
    let compiled = expected_jobs(dir);
    let ran: Vec<String> = outcome.jobs.iter().map(|(j, _)| j.clone()).collect();
    if !outcome.jobs_differ && ran != compiled {
        problems.push(format!(
            "the jobs {ran:?} are not those of expected.json {compiled:?}"
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{name}: {}\n{run}", problems.join("\n")))
    }
}

#[test]
fn runnable_corpus_pipelines_end_as_expected() {
    let update = std::env::var_os("UPDATE_OUTCOMES").is_some();
    let dirs = corpus();
    assert!(dirs.len() >= 20, "{} pipelines have an outcome", dirs.len());
    // Two at a time: each run uses every core for its jobs anyway.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(dir) = dirs.get(i) else { break };
                    if let Err(e) = check(dir, update) {
                        failures.lock().unwrap().push(e);
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} pipelines differ:\n{}",
        failures.len(),
        dirs.len(),
        failures.join("\n\n")
    );
}

#[test]
fn outcome_files_parse() {
    let o = parse(
        "# c\ngit checkout -q -b x\nexec --manual --variable A=1\nexit 1\na:b => passed (2 attempts)\n",
    );
    assert_eq!(o.git, vec![vec!["checkout", "-q", "-b", "x"]]);
    assert_eq!(o.exec, vec!["--manual", "--variable", "A=1"]);
    assert_eq!(o.exit, 1);
    assert_eq!(
        o.jobs,
        vec![("a:b".to_string(), "passed (2 attempts)".to_string())]
    );
    assert!(!o.jobs_differ);
}
