//! Shared by the corpus tests (and the benchmark): the options each corpus pipeline is
//! compiled with, and the list of pipelines.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use flotilla_ci::CompileOptions;
use serde_json::Value;

/// What every corpus pipeline runs with unless its options say otherwise: a push to `main`.
pub(crate) fn base_variables() -> Vec<(String, String)> {
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

pub(crate) fn options_for(dir: &Path) -> CompileOptions {
    let mut variables = base_variables();
    let mut user_variables = Vec::new();
    let mut include_manual = false;
    let mut changed_files = None;
    let mut inputs = Vec::new();
    let mut component_paths = Vec::new();
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
        if let Some(given) = options.get("inputs").and_then(Value::as_object) {
            for (k, v) in given {
                let text = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                inputs.push((k.clone(), text));
            }
        }
        if let Some(paths) = options.get("component_paths").and_then(Value::as_array) {
            component_paths = paths
                .iter()
                .map(|p| dir.join(p.as_str().unwrap()))
                .collect();
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
        inputs,
        component_paths,
    }
}

/// The corpus directories (each holds a `.gitlab-ci.yml`), sorted.
pub(crate) fn corpus() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pipelines");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join(".gitlab-ci.yml").exists())
        .collect();
    dirs.sort();
    dirs
}
