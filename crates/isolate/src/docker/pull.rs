//! `pull_policy`: which policies apply to an image (pure), and making sure the image is there.
//!
//! Policies are tried in order, like GitLab Runner: `always` pulls; `if-not-present` uses the
//! local image and pulls only when there is none; `never` uses the local image or fails. When
//! every policy failed the job fails with `image_pull_failure`.

use super::auth::{RegistryAuth, RegistryCredentials};
use super::client::is_not_found;
use bollard::Docker;
use bollard::models::ImageInspect;
use bollard::query_parameters::CreateImageOptions;
use flotilla_job::EnvError;
use futures::StreamExt;
use std::fmt;
use std::str::FromStr;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// One pull policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PullPolicy {
    /// Pull every time.
    Always,
    /// Pull only when the image is not on the instance.
    IfNotPresent,
    /// Never pull.
    Never,
}

impl PullPolicy {
    /// Every policy.
    pub const ALL: [PullPolicy; 3] = [
        PullPolicy::Always,
        PullPolicy::IfNotPresent,
        PullPolicy::Never,
    ];

    /// The name as `.gitlab-ci.yml` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Always => "always",
            PullPolicy::IfNotPresent => "if-not-present",
            PullPolicy::Never => "never",
        }
    }
}

impl fmt::Display for PullPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PullPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "always" => Ok(PullPolicy::Always),
            "if-not-present" => Ok(PullPolicy::IfNotPresent),
            "never" => Ok(PullPolicy::Never),
            other => Err(format!(
                "unknown pull policy {other:?} (expected always, if-not-present or never)"
            )),
        }
    }
}

/// What the engine said, without bollard's framing ("Docker responded with status code 404:").
fn engine_message(e: &bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

fn names(p: &[PullPolicy]) -> String {
    p.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", ")
}

/// A list as Go's `%v` prints it: `[always if-not-present]`.
fn go_list(p: &[PullPolicy]) -> String {
    let names: Vec<&str> = p.iter().map(|p| p.as_str()).collect();
    format!("[{}]", names.join(" "))
}

/// The policies to try for an image whose job asks for `requested` (may be empty), given the
/// configured default (empty: `if-not-present`) and the allowed ones (empty: those of the
/// default), as GitLab Runner's `ComputeEffectivePullPolicies` does
/// (`helpers/pull_policies/pull_policies.go`): the chosen policies that are allowed, in their
/// order; an error, in GitLab's words, only when none is.
pub fn effective(
    requested: &[String],
    default: &[PullPolicy],
    allowed: &[PullPolicy],
) -> Result<Vec<PullPolicy>, String> {
    let configured = !default.is_empty();
    let default: Vec<PullPolicy> = if configured {
        default.to_vec()
    } else {
        vec![PullPolicy::IfNotPresent]
    };
    let allowed: &[PullPolicy] = if allowed.is_empty() {
        &default
    } else {
        allowed
    };
    let requested = requested
        .iter()
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.parse::<PullPolicy>())
        .collect::<Result<Vec<_>, _>>()?;
    let (chosen, source) = match (requested.is_empty(), configured) {
        (false, _) => (requested, "GitLab pipeline config"),
        (true, true) => (default.clone(), "Runner config"),
        (true, false) => (default.clone(), "Runner config (default)"),
    };
    let kept: Vec<PullPolicy> = chosen
        .iter()
        .copied()
        .filter(|p| allowed.contains(p))
        .collect();
    if kept.is_empty() {
        return Err(format!(
            "pull_policy ({}) defined in {source} is not one of the allowed_pull_policies ({})",
            go_list(&chosen),
            go_list(allowed)
        ));
    }
    Ok(kept)
}

/// `fromImage` and `tag` for pulling `name`: the tag split off (`latest` when there is none);
/// a digest reference is passed whole.
pub fn pull_reference(name: &str) -> (String, Option<String>) {
    if name.contains('@') {
        return (name.to_string(), None);
    }
    let last_slash = name.rfind('/').map(|i| i + 1).unwrap_or(0);
    match name[last_slash..].rfind(':') {
        Some(i) => (
            name[..last_slash + i].to_string(),
            Some(name[last_slash + i + 1..].to_string()),
        ),
        None => (name.to_string(), Some("latest".to_string())),
    }
}

async fn say(log: &mut (dyn AsyncWrite + Send + Unpin), line: &str) -> Result<(), EnvError> {
    log.write_all(format!("{line}\n").as_bytes())
        .await
        .map_err(|source| EnvError::Io {
            context: "writing to the job log".into(),
            source,
        })
}

async fn pull(
    docker: &Docker,
    image: &str,
    platform: &str,
    credentials: Option<&RegistryCredentials>,
) -> Result<(), String> {
    let (from_image, tag) = pull_reference(image);
    let options = CreateImageOptions {
        from_image: Some(from_image),
        tag,
        platform: platform.to_string(),
        ..Default::default()
    };
    let mut stream = docker.create_image(
        Some(options),
        None,
        credentials.map(RegistryCredentials::docker),
    );
    while let Some(item) = stream.next().await {
        item.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Makes sure `image` is on the daemon according to `policies`, pulling with the job's
/// registry credentials for it (`auth`), logging what it does, and returns the image's
/// inspection.
pub async fn ensure_image(
    docker: &Docker,
    image: &str,
    platform: &str,
    policies: &[PullPolicy],
    auth: &RegistryAuth,
    log: &mut (dyn AsyncWrite + Send + Unpin),
) -> Result<ImageInspect, EnvError> {
    let mut failures = Vec::new();
    for policy in policies {
        if *policy != PullPolicy::Always {
            match docker.inspect_image(image).await {
                Ok(found) => {
                    let id = found.id.clone().unwrap_or_default();
                    say(log, &format!("Using locally found image {image} ({id})")).await?;
                    return Ok(found);
                }
                Err(e) if is_not_found(&e) => {
                    if *policy == PullPolicy::Never {
                        // The engine's own words, and what puts the image there.
                        failures.push(format!(
                            "{policy}: the image is not on the instance and may not be pulled \
                             (the engine says: {}); `docker pull {image}` on the instance puts \
                             it there",
                            engine_message(&e)
                        ));
                        continue;
                    }
                }
                Err(e) => {
                    return Err(EnvError::System(format!("inspecting image {image}: {e}")));
                }
            }
        }
        say(
            log,
            &format!("Pulling docker image {image} (pull policy {policy}) ..."),
        )
        .await?;
        let credentials = auth.for_image(image);
        if let Some(c) = credentials {
            // GitLab Runner's words (executors/docker/internal/pull).
            say(
                log,
                &format!("Authenticating with credentials from {}", c.source),
            )
            .await?;
        }
        match pull(docker, image, platform, credentials).await {
            Ok(()) => match docker.inspect_image(image).await {
                Ok(found) => {
                    let id = found.id.clone().unwrap_or_default();
                    say(log, &format!("Using docker image {image} ({id})")).await?;
                    return Ok(found);
                }
                Err(e) => failures.push(format!("{policy}: pulled but cannot inspect it: {e}")),
            },
            Err(e) => failures.push(format!("{policy}: pulling failed: {e}")),
        }
    }
    Err(EnvError::ImagePull {
        image: image.to_string(),
        message: format!(
            "no pull policy succeeded (tried {}): {}",
            names(policies),
            failures.join("; ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_job_may_choose_among_the_allowed_policies() {
        use PullPolicy::*;
        assert_eq!(effective(&[], &[], &[]).unwrap(), vec![IfNotPresent]);
        assert_eq!(effective(&s(&[""]), &[Always], &[]).unwrap(), vec![Always]);
        assert_eq!(
            effective(&s(&["never"]), &[IfNotPresent], &PullPolicy::ALL).unwrap(),
            vec![Never]
        );
        assert_eq!(
            effective(&s(&["always", "if-not-present"]), &[], &PullPolicy::ALL).unwrap(),
            vec![Always, IfNotPresent]
        );
        // Without allowed_pull_policies, the runner's pull_policy is the list a job chooses
        // from (GitLab's GetAllowedPullPolicies); GitLab's words when nothing is left.
        let e = effective(&s(&["never"]), &[Always], &[]).unwrap_err();
        assert_eq!(
            e,
            "pull_policy ([never]) defined in GitLab pipeline config is not one of the \
             allowed_pull_policies ([always])"
        );
        // Those allowed are kept, in the job's order; the rest dropped, as GitLab does.
        assert_eq!(
            effective(
                &s(&["never", "if-not-present"]),
                &[Always],
                &[IfNotPresent, Always]
            )
            .unwrap(),
            vec![IfNotPresent]
        );
        let e = effective(&[], &[Always], &[Never]).unwrap_err();
        assert_eq!(
            e,
            "pull_policy ([always]) defined in Runner config is not one of the \
             allowed_pull_policies ([never])"
        );
        let e = effective(&s(&["sometimes"]), &[], &[]).unwrap_err();
        assert!(e.contains("unknown pull policy \"sometimes\""), "{e}");
    }

    #[test]
    fn references_split_into_image_and_tag() {
        assert_eq!(
            pull_reference("busybox"),
            ("busybox".into(), Some("latest".into()))
        );
        assert_eq!(
            pull_reference("registry:5000/g/img:1.2"),
            ("registry:5000/g/img".into(), Some("1.2".into()))
        );
        assert_eq!(
            pull_reference("registry:5000/g/img"),
            ("registry:5000/g/img".into(), Some("latest".into()))
        );
        assert_eq!(
            pull_reference("img@sha256:ab"),
            ("img@sha256:ab".into(), None)
        );
    }
}
