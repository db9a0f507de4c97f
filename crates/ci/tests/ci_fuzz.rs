//! Fuzzing the YAML loader and the compiler with mutated corpus files (proptest): whatever the
//! input, `compile` returns a pipeline or errors, without a panic and within a time limit; and
//! the expression parser takes any text.
//!
//! Each case takes one file of the corpus (a `.gitlab-ci.yml` or an included file), applies a
//! few line and character mutations chosen for YAML (indentation, `:`, `-`, `&`, `*`, `<<`,
//! `!reference`, brackets, quotes, truncation), writes it over the original in a copy of its
//! pipeline's directory and compiles. `FUZZ_CASES` sets the number of cases (default 400,
//! under a minute in a debug build); `FUZZ_SEED` replays a run.

mod corpus_support;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use corpus_support::{corpus, options_for};
use flotilla_ci::{Expression, compile};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// Longer than this is a hang (the slowest corpus pipeline compiles in well under a second in
/// a debug build).
const HANG: Duration = Duration::from_secs(20);

/// What mutations insert.
const TOKENS: &[&str] = &[
    ":",
    "- ",
    "  ",
    "\t",
    "&a ",
    "*a",
    "<<: *a",
    "!reference [.x, script]",
    "[",
    "]",
    "{",
    "}",
    "\"",
    "'",
    "|",
    ">",
    "#",
    "%",
    "@",
    "`",
    "!",
    "~",
    "null",
    "true",
    "0x1f",
    "1:30",
    "extends: .t",
    "needs: [x]",
    "rules:\n  - if: $A =~ /a+/",
    "parallel: {matrix: [{A: [1, 2]}]}",
    "stage: nope",
    "include: missing.yml",
    "\u{feff}",
    "é",
    "\\",
    "$[[ inputs.x ]]",
    "---\n",
    "...\n",
];

/// One corpus file: its pipeline's directory, its path there, its text.
struct Sample {
    dir: PathBuf,
    file: String,
    text: String,
}

fn samples() -> Vec<Sample> {
    let mut out = Vec::new();
    for dir in corpus() {
        for entry in walk(&dir) {
            let file = entry
                .strip_prefix(&dir)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if !(file.ends_with(".yml") || file.ends_with(".yaml")) {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&entry) else {
                continue;
            };
            if text.len() <= 40_000 {
                out.push(Sample {
                    dir: dir.clone(),
                    file,
                    text,
                });
            }
        }
    }
    out
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// One mutation: what to do, where (two numbers reduced modulo the text), and a token.
type Mutation = (u8, u32, u32, &'static str);

fn mutate(text: &str, mutations: &[Mutation]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for &(kind, a, b, token) in mutations {
        if lines.is_empty() {
            lines.push(String::new());
        }
        let n = lines.len();
        let i = a as usize % n;
        let j = b as usize % n;
        match kind % 8 {
            0 => {
                lines.remove(i);
            }
            1 => {
                let line = lines[i].clone();
                lines.insert(j, line);
            }
            2 => lines.swap(i, j),
            3 => {
                // Insert a token inside a line, at a character boundary.
                let line = &lines[i];
                let cut = line
                    .char_indices()
                    .map(|(k, _)| k)
                    .nth(b as usize % (line.chars().count() + 1))
                    .unwrap_or(line.len());
                lines[i] = format!("{}{token}{}", &line[..cut], &line[cut..]);
            }
            4 => lines[i] = format!("  {}", lines[i]),
            5 => lines[i] = lines[i].trim_start().to_string(),
            6 => lines.insert(i, token.to_string()),
            _ => lines.truncate(i.max(1)),
        }
    }
    lines.join("\n")
}

#[test]
fn mutated_corpus_files_compile_or_fail_cleanly() {
    let samples = samples();
    assert!(samples.len() > 100, "{} corpus files", samples.len());
    let cases: u32 = std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let seed: u64 = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(13);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let scratch = tempfile::tempdir().unwrap();
    let copies: RefCell<HashMap<PathBuf, PathBuf>> = RefCell::new(HashMap::new());
    let run = Cell::new(0u32);
    let strategy = (
        0..samples.len(),
        prop::collection::vec(
            (
                any::<u8>(),
                any::<u32>(),
                any::<u32>(),
                prop::sample::select(TOKENS),
            ),
            1..6,
        ),
    );
    let result = runner.run(&strategy, |(index, mutations)| {
        run.set(run.get() + 1);
        let sample = &samples[index];
        let copy = copies
            .borrow_mut()
            .entry(sample.dir.clone())
            .or_insert_with(|| {
                let to = scratch.path().join(format!("p{}", copies_len(&sample.dir)));
                copy_tree(&sample.dir, &to);
                to
            })
            .clone();
        let target = copy.join(&sample.file);
        std::fs::write(&target, mutate(&sample.text, &mutations)).unwrap();
        let mut options = options_for(&sample.dir);
        options.project_dir = copy.clone();
        let (tx, rx) = mpsc::channel();
        let worker = std::thread::spawn(move || {
            let outcome = std::panic::catch_unwind(|| compile(&options).map(|p| p.jobs.len()));
            let _ = tx.send(outcome.is_ok());
        });
        let finished = rx.recv_timeout(HANG);
        std::fs::write(&target, &sample.text).unwrap();
        match finished {
            Ok(true) => {
                worker.join().unwrap();
                Ok(())
            }
            Ok(false) => Err(TestCaseError::fail(format!(
                "compile panicked on {}/{} mutated by {mutations:?}",
                sample.dir.display(),
                sample.file
            ))),
            Err(_) => Err(TestCaseError::fail(format!(
                "compile took more than {HANG:?} on {}/{} mutated by {mutations:?}",
                sample.dir.display(),
                sample.file
            ))),
        }
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let run = run.get();
    eprintln!("{run} mutated pipelines compiled or failed cleanly (seed {seed})");
    assert!(run >= cases);
}

/// A name for a pipeline's copy (the directory name is enough: the corpus has no duplicates).
fn copies_len(dir: &Path) -> String {
    dir.file_name().unwrap().to_string_lossy().into_owned()
}

proptest! {
    #![proptest_config(Config { cases: 3000, failure_persistence: None, ..Config::default() })]

    /// Any text is an expression or a syntax error, and evaluating one never panics.
    #[test]
    fn expressions_parse_or_fail_cleanly(text in "[$A-Z_a-z0-9=~!&|()'\"/ \\\\.*+?{}\\[\\]^:,-]{0,40}") {
        if let Ok(expression) = Expression::parse(&text) {
            let variables: HashMap<String, String> = [
                ("A".to_string(), "/a+/".to_string()),
                ("B".to_string(), "main".to_string()),
            ]
            .into();
            let _ = expression.evaluate(&variables);
        }
    }
}
