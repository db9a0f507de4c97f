//! The predefined variables a local run can know, read from the project's git repository.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use super::git::{git, git_line};

/// The SHA GitLab uses for "no commit".
const NULL_SHA: &str = "0000000000000000000000000000000000000000";

/// The GitLab version a local run's `CI_SERVER_VERSION` names: the one whose runner API and
/// variables flotilla follows (gitlab-runner 19.4's job payload).
pub(crate) const GITLAB_VERSION: &str = "19.4.0";

/// GitLab's slug: lowercased, everything but `a-z0-9` replaced by `-`, at most 63 bytes, no `-`
/// at either end (`CI_COMMIT_REF_SLUG`, `CI_JOB_NAME_SLUG`).
pub fn slugify(text: &str) -> String {
    let replaced: String = text
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    let shortened: String = replaced.chars().take(63).collect();
    shortened.trim_matches('-').to_string()
}

/// The pipeline-level predefined variables for a run of the project in `project_dir`, from its
/// git repository (a directory that is not one, or a repository without commits, gets
/// placeholders: a zero SHA, the branch `main`).
///
/// Set: `CI`, `GITLAB_CI`, `CI_SERVER`, `CI_CONFIG_PATH`, `CI_PROJECT_DIR` (the project
/// directory; a runner that builds in another directory overrides it); the project's
/// (`CI_PROJECT_ID` 1, `_NAME`, `_TITLE`, `_PATH` and `_PATH_SLUG`, `_NAMESPACE` and its id and
/// slug, `_ROOT_NAMESPACE` and its slug, `_URL`, `_VISIBILITY` `private`, and the empty
/// `_DESCRIPTION`, `_TOPICS`, `_REPOSITORY_LANGUAGES`, `_CLASSIFICATION_LABEL`); the server's
/// (`CI_SERVER_URL`, `_HOST`, `_FQDN`, `_PORT`, `_PROTOCOL`, `_SHELL_SSH_HOST`/`_PORT`,
/// `_NAME`, `_VERSION` and its parts, `_REVISION`, `CI_API_V4_URL`, `CI_API_GRAPHQL_URL`,
/// `CI_TEMPLATE_REGISTRY_HOST`, `GITLAB_FEATURES`): the `origin` remote's host over https, else
/// `http://localhost`; `CI_REPOSITORY_URL` (this repository's path); `CI_DEFAULT_BRANCH` and its
/// slug; the commit's (`CI_COMMIT_SHA`, `_SHORT_SHA`, `_BEFORE_SHA`, `_BRANCH` on a branch or
/// `_TAG` and `_TAG_MESSAGE` detached at a tag, `_REF_NAME`, `_REF_SLUG`, `_REF_PROTECTED`,
/// `_MESSAGE`, `_MESSAGE_IS_TRUNCATED`, `_TITLE`, `_DESCRIPTION`, `_AUTHOR`, `_USER_LOGIN`,
/// `_TIMESTAMP`, `_DEFAULT_BRANCH_BASE_SHA` on another branch), `CI_CONFIG_REF_URI`;
/// `CI_PIPELINE_ID` and `CI_PIPELINE_IID` (the current Unix time in seconds, so later runs get
/// larger ids), `CI_PIPELINE_SOURCE` (`push`), `CI_PIPELINE_CREATED_AT`, `CI_PIPELINE_NAME`;
/// `GITLAB_USER_ID` (1), `GITLAB_USER_LOGIN` (`$USER`), `GITLAB_USER_NAME` and
/// `GITLAB_USER_EMAIL` (from git config). Left unset, as GitLab leaves them in a push pipeline
/// on a branch: merge request, trigger, schedule, upstream, registry, dependency proxy, Pages
/// and deploy token variables.
pub fn predefined_variables(project_dir: &Path) -> Vec<(String, String)> {
    let dir = std::fs::canonicalize(project_dir).unwrap_or_else(|_| project_dir.to_path_buf());
    let mut vars: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: String| vars.push((k.to_string(), v));

    set("CI", "true".into());
    set("GITLAB_CI", "true".into());
    set("CI_SERVER", "yes".into());
    set("CI_CONFIG_PATH", ".gitlab-ci.yml".into());
    set("CI_PROJECT_DIR", dir.to_string_lossy().into_owned());

    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "project".into());
    let remote = git_line(&dir, &["config", "--get", "remote.origin.url"])
        .and_then(|url| parse_remote(&url));
    let (host, path) = match remote {
        Some((host, path)) => (Some(host), path),
        None => (None, format!("local/{name}")),
    };
    let project_name = path.rsplit('/').next().unwrap_or(&name).to_string();
    let namespace = path
        .rsplit_once('/')
        .map(|(ns, _)| ns.to_string())
        .unwrap_or_default();
    set("CI_PROJECT_ID", "1".into());
    set("CI_PROJECT_TITLE", project_name.clone());
    set("CI_PROJECT_NAME", project_name);
    set("CI_PROJECT_DESCRIPTION", String::new());
    set("CI_PROJECT_NAMESPACE_ID", "1".into());
    set("CI_PROJECT_NAMESPACE_SLUG", slugify(&namespace));
    let root = namespace.split('/').next().unwrap_or_default().to_string();
    set("CI_PROJECT_ROOT_NAMESPACE_SLUG", slugify(&root));
    set("CI_PROJECT_ROOT_NAMESPACE", root);
    set("CI_PROJECT_NAMESPACE", namespace);
    set("CI_PROJECT_PATH_SLUG", slugify(&path));
    set("CI_PROJECT_VISIBILITY", "private".into());
    set("CI_PROJECT_REPOSITORY_LANGUAGES", String::new());
    set("CI_PROJECT_TOPICS", String::new());
    set("CI_PROJECT_CLASSIFICATION_LABEL", String::new());
    // The server GitLab would be: the `origin` remote's host, else this machine. Only the
    // shape is GitLab's; a local run talks to no server.
    let (server, host) = match &host {
        Some(host) => (format!("https://{host}"), host.clone()),
        None => ("http://localhost".to_string(), "localhost".to_string()),
    };
    let https = server.starts_with("https://");
    set("CI_SERVER_NAME", "GitLab".into());
    set("CI_SERVER_URL", server.clone());
    set("CI_SERVER_HOST", host.clone());
    set("CI_SERVER_FQDN", host.clone());
    set(
        "CI_SERVER_PROTOCOL",
        if https { "https" } else { "http" }.into(),
    );
    set("CI_SERVER_PORT", if https { "443" } else { "80" }.into());
    let fqdn = host.clone();
    set("CI_SERVER_SHELL_SSH_HOST", host);
    set("CI_SERVER_SHELL_SSH_PORT", "22".into());
    set("CI_SERVER_VERSION", GITLAB_VERSION.into());
    let mut parts = GITLAB_VERSION.split('.');
    for key in [
        "CI_SERVER_VERSION_MAJOR",
        "CI_SERVER_VERSION_MINOR",
        "CI_SERVER_VERSION_PATCH",
    ] {
        set(key, parts.next().unwrap_or("0").to_string());
    }
    set("CI_SERVER_REVISION", NULL_SHA[..11].to_string());
    set("CI_API_V4_URL", format!("{server}/api/v4"));
    set("CI_API_GRAPHQL_URL", format!("{server}/api/graphql"));
    set("CI_TEMPLATE_REGISTRY_HOST", "registry.gitlab.com".into());
    set("GITLAB_FEATURES", String::new());
    set("CI_PROJECT_URL", format!("{server}/{path}"));
    // The repository jobs fetch from: this one (a local run never asks a server).
    set("CI_REPOSITORY_URL", dir.to_string_lossy().into_owned());
    set("CI_PROJECT_PATH", path.clone());

    let sha = git_line(&dir, &["rev-parse", "--verify", "--quiet", "HEAD"]);
    let branch = git_line(&dir, &["symbolic-ref", "--quiet", "--short", "HEAD"]);
    let default_branch = default_branch(&dir, branch.as_deref());
    set("CI_DEFAULT_BRANCH_SLUG", slugify(&default_branch));
    set("CI_DEFAULT_BRANCH", default_branch.clone());

    let sha_text = sha.clone().unwrap_or_else(|| NULL_SHA.to_string());
    set("CI_COMMIT_SHORT_SHA", sha_text.chars().take(8).collect());
    set("CI_COMMIT_SHA", sha_text.clone());
    set("CI_COMMIT_BEFORE_SHA", NULL_SHA.into());

    let tag = match (&branch, &sha) {
        (None, Some(_)) => git_line(&dir, &["describe", "--tags", "--exact-match", "HEAD"]),
        _ => None,
    };
    let ref_name = match (&branch, &tag, &sha) {
        (Some(b), _, _) => b.clone(),
        (None, Some(t), _) => t.clone(),
        (None, None, Some(s)) => s.chars().take(8).collect(),
        (None, None, None) => "main".to_string(),
    };
    match (&branch, &tag) {
        (Some(b), _) => set("CI_COMMIT_BRANCH", b.clone()),
        (None, Some(t)) => {
            set("CI_COMMIT_TAG", t.clone());
            let reference = format!("refs/tags/{t}");
            let message = git(&dir, &["tag", "-l", "--format=%(contents)", t])
                .filter(|_| {
                    git_line(&dir, &["cat-file", "-t", &reference]).as_deref() == Some("tag")
                })
                .map(|m| m.trim_end().to_string())
                .unwrap_or_default();
            set("CI_COMMIT_TAG_MESSAGE", message);
        }
        (None, None) if sha.is_none() => set("CI_COMMIT_BRANCH", ref_name.clone()),
        (None, None) => {}
    }
    set("CI_COMMIT_REF_SLUG", slugify(&ref_name));
    let config_ref = match (&branch, &tag) {
        (None, Some(t)) => format!("refs/tags/{t}"),
        _ => format!("refs/heads/{ref_name}"),
    };
    set(
        "CI_CONFIG_REF_URI",
        format!("{fqdn}/{path}//.gitlab-ci.yml@{config_ref}"),
    );
    set("CI_COMMIT_REF_NAME", ref_name.clone());
    set("CI_COMMIT_REF_PROTECTED", "false".into());
    // On a branch other than the default, where it forked from the default branch.
    if branch.as_deref().is_some_and(|b| b != default_branch)
        && let Some(base) = git_line(
            &dir,
            &[
                "merge-base",
                "HEAD",
                &format!("refs/heads/{default_branch}"),
            ],
        )
    {
        set("CI_COMMIT_DEFAULT_BRANCH_BASE_SHA", base);
    }

    if sha.is_some() {
        if let Some(message) = git(&dir, &["log", "-1", "--format=%B", "HEAD"]) {
            let message = message.trim_end().to_string();
            let title = message.lines().next().unwrap_or_default().to_string();
            let description = message
                .split_once('\n')
                .map(|(_, rest)| rest.trim_start_matches('\n').to_string())
                .unwrap_or_default();
            set("CI_COMMIT_MESSAGE", message);
            set("CI_COMMIT_MESSAGE_IS_TRUNCATED", "false".into());
            set("CI_COMMIT_USER_LOGIN", String::new());
            set("CI_COMMIT_TITLE", title);
            set("CI_COMMIT_DESCRIPTION", description);
        }
        if let Some(author) = git_line(&dir, &["log", "-1", "--format=%an <%ae>", "HEAD"]) {
            set("CI_COMMIT_AUTHOR", author);
        }
        if let Some(timestamp) = git_line(&dir, &["log", "-1", "--format=%cI", "HEAD"]) {
            set("CI_COMMIT_TIMESTAMP", timestamp);
        }
    }

    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    set("CI_PIPELINE_ID", now.to_string());
    set("CI_PIPELINE_IID", now.to_string());
    set("CI_PIPELINE_SOURCE", "push".into());
    set("CI_PIPELINE_CREATED_AT", utc_timestamp(now));
    set("CI_PIPELINE_NAME", String::new());
    set("GITLAB_USER_ID", "1".into());
    let login = std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "root".into());
    set("GITLAB_USER_LOGIN", login);
    if let Some(user) = git_line(&dir, &["config", "--get", "user.name"]) {
        set("GITLAB_USER_NAME", user);
    }
    if let Some(email) = git_line(&dir, &["config", "--get", "user.email"]) {
        set("GITLAB_USER_EMAIL", email);
    }
    vars
}

/// The default branch: what `origin/HEAD` points at, else `main` or `master` if such a branch
/// exists, else the current branch, else `main`.
fn default_branch(dir: &Path, current: Option<&str>) -> String {
    if let Some(head) = git_line(
        dir,
        &["symbolic-ref", "--quiet", "refs/remotes/origin/HEAD"],
    ) && let Some(name) = head.strip_prefix("refs/remotes/origin/")
    {
        return name.to_string();
    }
    for candidate in ["main", "master"] {
        let reference = format!("refs/heads/{candidate}");
        if git_line(dir, &["rev-parse", "--verify", "--quiet", &reference]).is_some() {
            return candidate.to_string();
        }
    }
    current.unwrap_or("main").to_string()
}

/// `(host, namespace/project)` from a remote URL (`https://host/ns/p.git`, `git@host:ns/p.git`,
/// `ssh://git@host:22/ns/p.git`).
pub(crate) fn parse_remote(url: &str) -> Option<(String, String)> {
    let url = url.trim();
    let (host, path) = if let Some((_, rest)) = url.split_once("://") {
        let (authority, path) = rest.split_once('/')?;
        let host = authority.rsplit('@').next()?;
        let host = host.split(':').next()?;
        (host.to_string(), path.to_string())
    } else {
        let (authority, path) = url.split_once(':')?;
        let host = authority.rsplit('@').next()?;
        (host.to_string(), path.to_string())
    };
    let path = path.trim_matches('/').trim_end_matches(".git").to_string();
    if host.is_empty() || !path.contains('/') {
        return None;
    }
    Some((host, path))
}

/// `YYYY-MM-DDTHH:MM:SSZ` for Unix time `seconds`.
pub fn utc_timestamp(seconds: u64) -> String {
    let days = (seconds / 86_400) as i64;
    let rem = seconds % 86_400;
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs() {
        assert_eq!(slugify("feature/Login_Page"), "feature-login-page");
        assert_eq!(slugify("--x--"), "x");
        assert_eq!(slugify(&"a".repeat(80)).len(), 63);
        assert_eq!(
            slugify("build: [aws, monitoring]"),
            "build---aws--monitoring"
        );
    }

    #[test]
    fn remotes() {
        assert_eq!(
            parse_remote("git@gitlab.com:group/sub/proj.git"),
            Some(("gitlab.com".into(), "group/sub/proj".into()))
        );
        assert_eq!(
            parse_remote("https://gitlab.example.com/a/b.git"),
            Some(("gitlab.example.com".into(), "a/b".into()))
        );
        assert_eq!(
            parse_remote("ssh://git@host:2222/a/b"),
            Some(("host".into(), "a/b".into()))
        );
        assert_eq!(parse_remote("/srv/repo.git"), None);
    }

    #[test]
    fn timestamps() {
        assert_eq!(utc_timestamp(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_timestamp(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_timestamp(1_700_000_000), "2023-11-14T22:13:20Z");
    }
}
