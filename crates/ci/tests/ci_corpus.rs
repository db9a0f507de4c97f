//! The pipeline corpus: every directory under `tests/pipelines/` holds a `.gitlab-ci.yml` (and
//! the files it includes), optionally `options.json`, and `expected.json`: the compiled pipeline
//! (predefined variables left out) or the errors, each `file:line:column: message`.
//!
//! `options.json` may set `variables` (merged over the fixed predefined set below; `null`
//! removes one), `user_variables`, `include_manual` and `changed_files`.
//!
//! The `real_*` (and `error_real_*`) pipelines are public projects' own, unchanged: their
//! `SOURCE` file names the repository, the pipeline file's path and the commit, and each local
//! include copied beside it. Their `options.json` sets the variables of the pipeline being
//! reproduced (the project path their rules test, a merge request, a schedule).
//!
//! To regenerate after a deliberate change: `UPDATE_EXPECT=1 cargo test -p flotilla-ci
//! --test ci_corpus`, then review the diff.

mod corpus_support;

use std::path::Path;

use corpus_support::{corpus, options_for};
use flotilla_ci::{VariableSource, compile};
use serde_json::{Value, json};

fn summary(dir: &Path) -> Value {
    match compile(&options_for(dir)) {
        Ok(pipeline) => {
            let mut value = serde_json::to_value(&pipeline).unwrap();
            // Variables as one line each: `KEY=value (source)`, predefined ones left out.
            for (job, rendered) in pipeline
                .jobs
                .iter()
                .zip(value["jobs"].as_array_mut().unwrap())
            {
                let lines: Vec<String> = job
                    .variables
                    .iter()
                    .filter(|v| v.source != VariableSource::Predefined)
                    .map(|v| {
                        let source = serde_json::to_value(v.source).unwrap();
                        let raw = if v.raw { ", raw" } else { "" };
                        format!("{}={} ({}{raw})", v.key, v.value, source.as_str().unwrap())
                    })
                    .collect();
                rendered["variables"] = json!(lines);
            }
            value
        }
        Err(error) => json!({
            "errors": error.errors().iter().map(ToString::to_string).collect::<Vec<_>>(),
            "warnings": error.warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
        }),
    }
}

#[test]
fn corpus_matches_expected() {
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let dirs = corpus();
    assert!(dirs.len() >= 40, "the corpus has {} pipelines", dirs.len());
    let mut failures = Vec::new();
    for dir in &dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let actual = summary(dir);
        let rendered = serde_json::to_string_pretty(&actual).unwrap() + "\n";
        let expected_path = dir.join("expected.json");
        if update {
            std::fs::write(&expected_path, &rendered).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_else(|_| {
            panic!("{name}: no expected.json (run with UPDATE_EXPECT=1 and review it)")
        });
        if expected != rendered {
            failures.push(format!(
                "=== {name}: expected\n{expected}\n=== {name}: actual\n{rendered}"
            ));
        }
        // Error cases must be errors, and the others must compile.
        assert_eq!(
            name.starts_with("error_"),
            actual.get("errors").is_some(),
            "{name}: error cases are the directories named error_*"
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {} pipelines differ:\n{}",
        failures.len(),
        dirs.len(),
        failures.join("\n")
    );
}

/// README.md and ARCHITECTURE.md give the number of real public pipelines in the corpus; they
/// say what is there.
#[test]
fn the_docs_count_the_real_pipelines_there_are() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let real = std::fs::read_dir(root.join("crates/ci/tests/pipelines"))
        .expect("the corpus")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("real_"))
        .count();
    for doc in ["README.md", "ARCHITECTURE.md"] {
        let text = std::fs::read_to_string(root.join(doc)).expect(doc);
        let said: Vec<usize> = text
            .split(" real public pipelines")
            .filter_map(|before| before.rsplit(' ').next()?.parse().ok())
            .collect();
        assert_eq!(said, [real], "{doc} counts the real pipelines");
    }
}
