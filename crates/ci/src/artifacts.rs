//! `artifacts`: what a job uploads when it ends.

use serde::Serialize;

use super::duration::parse_duration;
use super::reader::Reader;
use super::yaml::Node;

/// A job's artifacts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Artifacts {
    /// The archive's name (expanded by the runner).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Paths and globs to include.
    pub paths: Vec<String>,
    /// Paths and globs to leave out.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// Whether untracked files are included.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub untracked: bool,
    /// When to upload.
    pub when: ArtifactsWhen,
    /// How long GitLab would keep them, as written (`never` or a duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expire_in: Option<String>,
    /// `expose_as`, kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expose_as: Option<String>,
    /// `reports:` (junit, dotenv, ...): kept; a local run uploads their files with the other
    /// artifacts but does not process them (except that a runner may read `dotenv`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reports: Vec<Report>,
}

/// One `artifacts:reports` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The report type (`junit`, `dotenv`, `coverage_report`, ...).
    pub kind: String,
    /// Its files (for `coverage_report`, the `path`).
    pub paths: Vec<String>,
}

/// When artifacts are uploaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactsWhen {
    /// When the job succeeds.
    OnSuccess,
    /// When it fails.
    OnFailure,
    /// Either way.
    Always,
}

/// Read `artifacts:`.
pub(crate) fn read_artifacts(reader: &mut Reader<'_>, node: &Node) -> Option<Artifacts> {
    let map = reader.map(node, "artifacts")?;
    let mut r = reader.nested("artifacts");
    if !r.check_keys(
        map,
        &[
            "name",
            "paths",
            "exclude",
            "untracked",
            "when",
            "expire_in",
            "expose_as",
            "reports",
            "public",
            "access",
        ],
    ) {
        return None;
    }
    // A keyword with no value is unspecified (GitLab's entry factory; `allow_nil`).
    let map = &map.without_nulls();
    let mut artifacts = Artifacts {
        name: None,
        paths: Vec::new(),
        exclude: Vec::new(),
        untracked: false,
        when: ArtifactsWhen::OnSuccess,
        expire_in: None,
        expose_as: None,
        reports: Vec::new(),
    };
    let mut ok = true;
    if let Some(n) = map.get("name") {
        artifacts.name = r.string(n, "name");
        ok &= artifacts.name.is_some();
    }
    if let Some(n) = map.get("paths") {
        match r.strings(n, "paths") {
            Some(p) => artifacts.paths = p,
            None => ok = false,
        }
    }
    if let Some(n) = map.get("exclude") {
        match r.strings(n, "exclude") {
            Some(p) => artifacts.exclude = p,
            None => ok = false,
        }
    }
    if let Some(n) = map.get("untracked") {
        match r.boolean(n, "untracked") {
            Some(b) => artifacts.untracked = b,
            None => ok = false,
        }
    }
    if let Some(n) = map.get("when") {
        match n.as_str() {
            Some("on_success") => artifacts.when = ArtifactsWhen::OnSuccess,
            Some("on_failure") => artifacts.when = ArtifactsWhen::OnFailure,
            Some("always") => artifacts.when = ArtifactsWhen::Always,
            _ => {
                r.diag.error(super::error::CiError::BadWhen {
                    location: n.at.clone(),
                    context: r.context.clone(),
                    value: n.scalar_text().unwrap_or_else(|| n.kind().to_string()),
                    allowed: "on_success, on_failure, always".into(),
                });
                ok = false;
            }
        }
    }
    if let Some(n) = map.get("expire_in") {
        match r.string(n, "expire_in") {
            Some(text) if text == "never" || parse_duration(&text).is_some() => {
                artifacts.expire_in = Some(text);
            }
            Some(text) => {
                r.fail(&n.at, format!("expire_in `{text}` is not a duration"));
                ok = false;
            }
            None => ok = false,
        }
    }
    if let Some(n) = map.get("expose_as") {
        artifacts.expose_as = r.string(n, "expose_as");
        ok &= artifacts.expose_as.is_some();
    }
    for key in ["public", "access"] {
        if let Some((k, _)) = map.entry(key) {
            r.warn(
                &k.at,
                format!("{key} only matters to GitLab's web interface; ignored"),
            );
        }
    }
    if let Some(n) = map.get("reports") {
        match r.map(n, "reports") {
            Some(reports) => {
                for (kind, value) in reports.iter() {
                    let paths = match (kind.name.as_str(), value.as_map()) {
                        ("coverage_report", Some(cov)) => cov
                            .get("path")
                            .and_then(Node::scalar_text)
                            .into_iter()
                            .collect(),
                        _ => match r.string_or_strings(value, &format!("reports:{}", kind.name)) {
                            Some(p) => p,
                            None => {
                                ok = false;
                                continue;
                            }
                        },
                    };
                    artifacts.reports.push(Report {
                        kind: kind.name.clone(),
                        paths,
                    });
                }
                if let Some((first, _)) = reports.iter().next() {
                    r.warn(
                        &first.at,
                        "reports are uploaded as plain artifacts; a local run does not process them",
                    );
                }
            }
            None => ok = false,
        }
    }
    ok.then_some(artifacts)
}
