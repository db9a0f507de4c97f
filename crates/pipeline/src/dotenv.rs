//! `artifacts:reports:dotenv` in a local run, as GitLab does it: the job uploads its dotenv
//! files as a `dotenv` report (gzip, Rails' `Enums::Ci::JobArtifact::REPORT_TYPES`), and the
//! variables they define reach the jobs that take its artifacts (its `dependencies`, or its
//! `needs` with `artifacts: true`), after their own `.gitlab-ci.yml` variables: GitLab ranks
//! dotenv variables above job variables (`ci/variables/_index.md`, "CI/CD variable
//! precedence").
//!
//! The file is read as Rails' `Ci::ParseDotenvArtifactService` reads it: every line
//! `KEY=VALUE` (`/^(.*?)=(.*)$/`, both sides stripped, a later key replacing an earlier one),
//! at most 20 variables and 5 KB (the default plan limits); a file that breaks a rule passes
//! no variable on, as GitLab would refuse it.

use flotilla_ci::{CompiledJob, Pipeline};
use flotilla_job::LocalArtifactStore;
use flotilla_job::model::{Artifact, Variable, When};
use std::io::Read;

/// GitLab's default `dotenv_variables` plan limit.
const MAX_VARIABLES: usize = 20;
/// GitLab's default `dotenv_size` plan limit, in bytes.
const MAX_SIZE: usize = 5 * 1024;

/// The job's dotenv reports as artifacts to upload (`when: always`, like every report).
pub(crate) fn report_artifacts(job: &CompiledJob) -> Vec<Artifact> {
    job.artifacts
        .iter()
        .flat_map(|a| a.reports.iter().map(move |r| (a, r)))
        .filter(|(_, r)| r.kind == "dotenv")
        .map(|(a, r)| Artifact {
            name: ".env".into(),
            paths: r.paths.clone(),
            when: When::Always,
            artifact_type: "dotenv".into(),
            artifact_format: "gzip".into(),
            expire_in: a.expire_in.clone().unwrap_or_default(),
            ..Artifact::default()
        })
        .collect()
}

/// Reads a dotenv report as Rails does; `Err` says why GitLab would refuse it.
pub(crate) fn parse(text: &str) -> Result<Vec<(String, String)>, String> {
    if text.len() >= MAX_SIZE {
        return Err(format!("larger than {MAX_SIZE} bytes"));
    }
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.split_inclusive('\n') {
        let line = line.strip_suffix('\n').unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!("{line:?} is not KEY=VALUE"));
        };
        let (key, value) = (key.trim(), value.trim());
        if key.is_empty() {
            return Err(format!("{line:?} has no key"));
        }
        match out.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value.to_string(),
            None => out.push((key.to_string(), value.to_string())),
        }
    }
    if out.len() > MAX_VARIABLES {
        return Err(format!("more than {MAX_VARIABLES} variables"));
    }
    Ok(out)
}

/// The dotenv variables job `i` inherits from the jobs whose artifacts it takes, in their
/// order (a later dependency's value wins).
pub(crate) fn inherited(
    pipeline: &Pipeline,
    i: usize,
    store: &LocalArtifactStore,
) -> Vec<Variable> {
    let mut out = Vec::new();
    for name in &pipeline.jobs[i].dependencies {
        let Some(d) = pipeline.jobs.iter().position(|j| &j.name == name) else {
            continue;
        };
        let path = store.archive_path((d + 1) as i64, "dotenv");
        let Ok(data) = std::fs::read(&path) else {
            continue;
        };
        let mut text = String::new();
        if let Err(e) = flate2::read::MultiGzDecoder::new(&data[..]).read_to_string(&mut text) {
            tracing::warn!(job = %name, error = %e, "the dotenv report does not read; its variables are not passed on");
            continue;
        }
        match parse(&text) {
            Ok(vars) => out.extend(vars.into_iter().map(|(k, v)| Variable::new(k, v))),
            Err(why) => {
                tracing::warn!(job = %name, why, "the dotenv report is not valid; its variables are not passed on");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn dotenv_files_read_like_rails() {
        assert_eq!(
            parse("VERSION=1.2\n URL = https://x/?a=b \nVERSION=1.3\n").unwrap(),
            vec![
                ("VERSION".to_string(), "1.3".to_string()),
                ("URL".to_string(), "https://x/?a=b".to_string())
            ]
        );
        assert_eq!(parse("A=1").unwrap(), vec![("A".into(), "1".into())]);
        assert!(
            parse("A=1\n\nB=2\n").is_err(),
            "a blank line is not KEY=VALUE"
        );
        assert!(parse("=x\n").is_err());
        let many: String = (0..21).map(|i| format!("K{i}=v\n")).collect();
        assert!(parse(&many).is_err());
        assert!(parse(&"A=".repeat(3000)).is_err());
        assert!(parse("").unwrap().is_empty());
    }
}
