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

use std::path::{Path, PathBuf};

use flotilla_ci::{CompileOptions, VariableSource, compile};
use serde_json::{Value, json};

/// What every corpus pipeline runs with unless its options say otherwise: a push to `main`.
fn base_variables() -> Vec<(String, String)> {
    [
        ("CI", "true"),
        ("GITLAB_CI", "true"),
        ("CI_PROJECT_DIR", "/builds/group/project"),
        ("CI_PROJECT_NAME", "project"),
        ("CI_PROJECT_NAMESPACE", "group"),
        ("CI_PROJECT_PATH", "group/project"),
        ("CI_DEFAULT_BRANCH", "main"),
        ("CI_COMMIT_SHA", "1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c"),
        ("CI_COMMIT_SHORT_SHA", "1f2e3d4c"),
        ("CI_COMMIT_BRANCH", "main"),
        ("CI_COMMIT_REF_NAME", "main"),
        ("CI_COMMIT_REF_SLUG", "main"),
        ("CI_COMMIT_MESSAGE", "Add the thing\n\nLonger text."),
        ("CI_COMMIT_TITLE", "Add the thing"),
        ("CI_PIPELINE_ID", "1000"),
        ("CI_PIPELINE_SOURCE", "push"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn options_for(dir: &Path) -> CompileOptions {
    let mut variables = base_variables();
    let mut user_variables = Vec::new();
    let mut include_manual = false;
    let mut changed_files = None;
    let path = dir.join("options.json");
    if path.exists() {
        let options: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        if let Some(vars) = options.get("variables").and_then(Value::as_object) {
            for (k, v) in vars {
                variables.retain(|(key, _)| key != k);
                if let Some(v) = v.as_str() {
                    variables.push((k.clone(), v.to_string()));
                }
            }
        }
        if let Some(vars) = options.get("user_variables").and_then(Value::as_object) {
            for (k, v) in vars {
                user_variables.push((k.clone(), v.as_str().unwrap().to_string()));
            }
        }
        include_manual = options
            .get("include_manual")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        changed_files = options
            .get("changed_files")
            .and_then(Value::as_array)
            .map(|files| {
                files
                    .iter()
                    .map(|f| f.as_str().unwrap().to_string())
                    .collect()
            });
    }
    CompileOptions {
        project_dir: dir.to_path_buf(),
        ci_file: ".gitlab-ci.yml".into(),
        variables,
        user_variables,
        include_manual,
        changed_files,
    }
}

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

fn corpus() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pipelines");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join(".gitlab-ci.yml").exists())
        .collect();
    dirs.sort();
    dirs
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
