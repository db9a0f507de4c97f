//! The corpus of real public GitLab Runner configurations (`tests/fixtures/corpus/`, each file
//! naming its repository, path and commit; `SOURCES.md` lists them): every file either loads
//! or is refused for a reason flotilla gives on purpose (an executor it does not run, a
//! template fragment without its runner's identity, a misspelt key in a table flotilla checks
//! strictly). A file refused for any other reason (a GitLab key flotilla cannot read, a value
//! GitLab accepts) fails the test. Warnings say where in the file they are about.

use flotilla::config::{Config, ConfigError};
use std::path::PathBuf;

fn corpus() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the corpus")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

/// Whether `message` refuses the file for a reason flotilla gives on purpose.
fn deliberate(message: &str) -> bool {
    [
        // Executors flotilla does not run (docker+machine with `flotilla migrate` named).
        "is not supported by flotilla",
        "which flotilla does not run",
        // Fragments (Helm `runners.config`, `register --template-config`) and templates
        // that leave the runner's identity to registration.
        "missing field `executor`",
        "`url` is required",
        "`token` is required",
        "`token` is empty",
        // A misspelt key in a table flotilla checks strictly ([runners.autoscaler]).
        "unknown key `",
    ]
    .iter()
    .any(|reason| message.contains(reason))
}

#[test]
fn every_public_config_loads_or_is_refused_on_purpose() {
    let files = corpus();
    assert!(files.len() >= 90, "{} files", files.len());
    let (mut loaded, mut refused) = (0, 0);
    let mut unexpected = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        assert!(
            text.starts_with("# Source: "),
            "{}: the first line names the source",
            file.display()
        );
        match Config::load(file) {
            Ok(l) => {
                loaded += 1;
                let name = file.file_name().unwrap().to_string_lossy().into_owned();
                for w in &l.warnings {
                    let w = w.to_string();
                    assert!(w.contains(&format!("{name}:")), "{w}: no place in the file");
                }
            }
            Err(e) => {
                refused += 1;
                for err in e.errors() {
                    let message = err.to_string();
                    if !deliberate(&message) || matches!(err, ConfigError::Syntax { .. }) {
                        unexpected.push(message);
                    }
                }
            }
        }
    }
    assert!(unexpected.is_empty(), "refused otherwise: {unexpected:#?}");
    // The corpus is mostly runners flotilla runs (docker, shell, docker-autoscaler,
    // instance, flotilla).
    assert!(loaded >= 30, "{loaded} loaded, {refused} refused");
    eprintln!(
        "{loaded} of {} public configurations load; {refused} are refused on purpose",
        files.len()
    );
}
