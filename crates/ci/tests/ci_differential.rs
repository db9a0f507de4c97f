//! flotilla against gitlab-ci-local, an independent implementation, on the corpus.
//!
//! `tests/differential/gitlab-ci-local.json` holds what gitlab-ci-local listed for each corpus
//! pipeline that includes only local files (recorded by `scripts/differential-gitlab-ci-local.py`,
//! which installs it from the npm registry). This test compiles the same pipelines with the same
//! variables, manual jobs included (gitlab-ci-local lists them), and compares job sets, stages,
//! `when` and `needs`, and whether the pipeline is accepted at all.
//!
//! Every difference must be in `tests/differential/known-differences.json` with the side that
//! GitLab's source or documentation says is right; a new difference fails, and so does a listed
//! one that no longer occurs (so the list stays true).

mod corpus_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use corpus_support::{corpus, options_for};
use flotilla_ci::compile;
use serde_json::Value;

fn differential_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/differential")
}

/// The differences between flotilla and gitlab-ci-local on one pipeline, one line each.
fn differences(name: &str, dir: &Path, listed: &Value) -> Vec<String> {
    let mut options = options_for(dir);
    options.include_manual = true;
    let ours = compile(&options);
    let mut out = Vec::new();
    if let Some(error) = listed.get("error").and_then(Value::as_str) {
        if ours.is_ok() {
            out.push(format!(
                "{name}: gitlab-ci-local rejects the pipeline ({}), flotilla accepts it",
                error.chars().take(80).collect::<String>()
            ));
        }
        return out;
    }
    let Some(jobs) = listed.get("jobs").and_then(Value::as_array) else {
        return out;
    };
    let pipeline = match ours {
        Ok(p) => p,
        Err(e) => {
            out.push(format!(
                "{name}: flotilla rejects the pipeline ({}), gitlab-ci-local lists it",
                e.errors()[0]
                    .to_string()
                    .chars()
                    .take(80)
                    .collect::<String>()
            ));
            return out;
        }
    };
    // gitlab-ci-local names parallel instances its own way (`rspec: [1/3]`, `build: [aws,1]`);
    // GitLab's are `rspec 1/3` and `build: [aws, 1]` (NumberStrategy#name and
    // MatrixStrategy#name, gitlabhq/gitlabhq lib/gitlab/ci/config/normalizer/). Names are
    // compared after that renaming, which is reported once.
    let mut renamed = None;
    let theirs: BTreeMap<String, &Value> = jobs
        .iter()
        .filter(|j| j["when"] != "never")
        .map(|j| {
            let written = j["name"].as_str().unwrap();
            let name = gitlab_name(written);
            if name != written && renamed.is_none() {
                renamed = Some((written.to_string(), name.clone()));
            }
            (name, j)
        })
        .collect();
    if let Some((theirs, gitlab)) = renamed {
        out.push(format!(
            "{name}: gitlab-ci-local names parallel instances `{theirs}`, GitLab `{gitlab}`"
        ));
    }
    let mine: BTreeMap<&str, &flotilla_ci::CompiledJob> =
        pipeline.jobs.iter().map(|j| (j.name.as_str(), j)).collect();
    // A need on a parallel job's name is a need on all its instances (GitLab expands it in
    // Config::Normalizer); flotilla lists the instances, gitlab-ci-local the name.
    let instances = |need: &str| -> Vec<String> {
        let of: Vec<String> = pipeline
            .jobs
            .iter()
            .filter(|j| j.parallel.is_some() && j.base_name == need)
            .map(|j| j.name.clone())
            .collect();
        if of.is_empty() {
            vec![gitlab_name(need)]
        } else {
            of
        }
    };
    let only_theirs: BTreeSet<&str> = theirs
        .keys()
        .filter(|k| !mine.contains_key(k.as_str()))
        .map(String::as_str)
        .collect();
    let only_mine: BTreeSet<&str> = mine
        .keys()
        .filter(|k| !theirs.contains_key(**k))
        .copied()
        .collect();
    for job in only_theirs {
        out.push(format!("{name}: job `{job}` only in gitlab-ci-local"));
    }
    for job in only_mine {
        out.push(format!("{name}: job `{job}` only in flotilla"));
    }
    for (job, their) in &theirs {
        let Some(my) = mine.get(job.as_str()) else {
            continue;
        };
        if their["stage"].as_str() != Some(my.stage.as_str()) {
            out.push(format!(
                "{name}: job `{job}` stage: flotilla {}, gitlab-ci-local {}",
                my.stage, their["stage"]
            ));
        }
        if their["when"].as_str() != Some(my.when.as_str()) {
            out.push(format!(
                "{name}: job `{job}` when: flotilla {}, gitlab-ci-local {}",
                my.when.as_str(),
                their["when"]
            ));
        }
        let their_needs: Option<BTreeSet<String>> = their["needs"].as_array().map(|n| {
            n.iter()
                .filter_map(Value::as_str)
                .flat_map(instances)
                .collect()
        });
        let my_needs: Option<BTreeSet<String>> = my
            .needs
            .as_ref()
            .map(|n| n.iter().map(|n| n.job.clone()).collect());
        if their_needs != my_needs {
            out.push(format!(
                "{name}: job `{job}` needs: flotilla {my_needs:?}, gitlab-ci-local {their_needs:?}"
            ));
        }
    }
    out
}

/// A gitlab-ci-local instance name in GitLab's form: `x: [1/3]` is `x 1/3`, and matrix values
/// are joined with `, `.
fn gitlab_name(name: &str) -> String {
    let Some((base, rest)) = name.split_once(": [") else {
        return name.to_string();
    };
    let Some(inner) = rest.strip_suffix(']') else {
        return name.to_string();
    };
    if let Some((index, total)) = inner.split_once('/')
        && index.chars().all(|c| c.is_ascii_digit())
        && total.chars().all(|c| c.is_ascii_digit())
    {
        return format!("{base} {index}/{total}");
    }
    let values: Vec<&str> = inner.split(',').map(str::trim).collect();
    format!("{base}: [{}]", values.join(", "))
}

#[test]
fn flotilla_and_gitlab_ci_local_differ_only_where_known() {
    let recorded: Value = serde_json::from_str(
        &std::fs::read_to_string(differential_dir().join("gitlab-ci-local.json")).unwrap(),
    )
    .unwrap();
    let known: Value = serde_json::from_str(
        &std::fs::read_to_string(differential_dir().join("known-differences.json")).unwrap(),
    )
    .unwrap();
    let pipelines = recorded["pipelines"].as_object().unwrap();
    let mut found: BTreeSet<String> = BTreeSet::new();
    let mut compared = 0;
    for dir in corpus() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let Some(listed) = pipelines.get(&name) else {
            continue;
        };
        if listed.get("skipped").is_some() {
            continue;
        }
        compared += 1;
        found.extend(differences(&name, &dir, listed));
    }
    assert!(compared >= 60, "only {compared} pipelines compared");
    let known: BTreeMap<String, String> = known
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let judge = v.as_str().unwrap().to_string();
            assert!(
                judge.starts_with("flotilla is right")
                    || judge.starts_with("gitlab-ci-local is right"),
                "{k}: say which side GitLab agrees with: {judge}"
            );
            (k.clone(), judge)
        })
        .collect();
    let new: Vec<&String> = found.iter().filter(|d| !known.contains_key(*d)).collect();
    let gone: Vec<&String> = known.keys().filter(|k| !found.contains(*k)).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "differences not in known-differences.json:\n{}\n\nlisted there but no longer found:\n{}",
        new.iter()
            .map(|s| format!("  {s:?}"))
            .collect::<Vec<_>>()
            .join("\n"),
        gone.iter()
            .map(|s| format!("  {s:?}"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
}
