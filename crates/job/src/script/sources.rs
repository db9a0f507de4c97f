//! The `get_sources` stage: clone or fetch the repository and check out the exact commit.

use super::ScriptError;
use super::writer::ScriptWriter;
use crate::model::{HOOK_POST_GET_SOURCES, HOOK_PRE_GET_SOURCES, JobPayload};
use crate::vars::JobVariables;
use flotilla_fleet::Secret;
use flotilla_shell::quote;

/// `GIT_STRATEGY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitStrategy {
    /// A fresh repository every time.
    Clone,
    /// Reuse the project directory's repository and fetch into it.
    Fetch,
    /// Leave the project directory as it is.
    None,
    /// An empty project directory.
    Empty,
}

/// `GIT_SUBMODULE_STRATEGY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubmoduleStrategy {
    /// No submodules.
    None,
    /// Top-level submodules.
    Normal,
    /// Submodules recursively.
    Recursive,
}

/// Everything `get_sources` decides from the payload and the variables, before writing shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcesPlan {
    /// The strategy.
    pub strategy: GitStrategy,
    /// The fetch depth; 0 is the full history.
    pub depth: u32,
    /// Whether to check out the commit (`GIT_CHECKOUT`, default true).
    pub checkout: bool,
    /// `git clean` flags, empty when cleaning is off (`GIT_CLEAN_FLAGS=none`).
    pub clean_flags: Vec<String>,
    /// Extra `git fetch` flags (`GIT_FETCH_EXTRA_FLAGS`, default `--prune --quiet`).
    pub fetch_flags: Vec<String>,
    /// The refspecs to fetch.
    pub refspecs: Vec<String>,
    /// Submodules.
    pub submodules: SubmoduleStrategy,
    /// The remote URL without credentials.
    pub remote_url: String,
    /// Credentials taken out of the URL: (user, password).
    pub credentials: Option<(String, Secret<String>)>,
    /// `scheme://host[:port]` the credentials are for.
    pub credential_scope: String,
}

fn split_flags(value: Option<&str>, default: &str) -> Vec<String> {
    let v = value.unwrap_or(default).trim();
    if v == "none" {
        return Vec::new();
    }
    v.split_whitespace().map(str::to_owned).collect()
}

impl SourcesPlan {
    /// Decides how to get the sources for `job`.
    pub fn new(job: &JobPayload, vars: &JobVariables) -> Result<SourcesPlan, ScriptError> {
        let strategy = match vars.value("GIT_STRATEGY").map(str::trim) {
            None | Some("") => {
                if job.allow_git_fetch {
                    GitStrategy::Fetch
                } else {
                    GitStrategy::Clone
                }
            }
            Some("clone") => GitStrategy::Clone,
            Some("fetch") => GitStrategy::Fetch,
            Some("none") => GitStrategy::None,
            Some("empty") => GitStrategy::Empty,
            Some(other) => return Err(ScriptError::UnknownGitStrategy(other.to_owned())),
        };
        let depth = match vars.value("GIT_DEPTH").map(str::trim) {
            None | Some("") => job.git_info.depth,
            Some(d) => d
                .parse::<u32>()
                .map_err(|_| ScriptError::BadGitDepth(d.to_owned()))?,
        };
        let submodules = match vars.value("GIT_SUBMODULE_STRATEGY").map(str::trim) {
            None | Some("" | "none") => SubmoduleStrategy::None,
            Some("normal") => SubmoduleStrategy::Normal,
            Some("recursive") => SubmoduleStrategy::Recursive,
            Some(other) => {
                return Err(ScriptError::UnknownSubmoduleStrategy(other.to_owned()));
            }
        };
        let checkout = !matches!(
            vars.value("GIT_CHECKOUT")
                .map(|v| v.trim().to_ascii_lowercase())
                .as_deref(),
            Some("false" | "0" | "no")
        );
        let git = &job.git_info;
        let refspecs = if !git.refspecs.is_empty() {
            git.refspecs.clone()
        } else if git.git_ref.is_empty() {
            vec![
                "+refs/heads/*:refs/remotes/origin/*".to_owned(),
                "+refs/tags/*:refs/tags/*".to_owned(),
            ]
        } else if git.ref_type == "tag" {
            vec![format!("+refs/tags/{0}:refs/tags/{0}", git.git_ref)]
        } else {
            vec![format!(
                "+refs/heads/{0}:refs/remotes/origin/{0}",
                git.git_ref
            )]
        };
        let parsed = RepoUrl::parse(git.repo_url.expose());
        Ok(SourcesPlan {
            strategy,
            depth,
            checkout,
            clean_flags: split_flags(vars.value("GIT_CLEAN_FLAGS"), "-ffdx"),
            fetch_flags: split_flags(vars.value("GIT_FETCH_EXTRA_FLAGS"), "--prune --quiet"),
            refspecs,
            submodules,
            remote_url: parsed.without_credentials,
            credentials: parsed
                .credentials
                .map(|(user, password)| (user, Secret::new(password))),
            credential_scope: parsed.scope,
        })
    }

    /// `git` with the credential helper configured (when the URL carried credentials): the
    /// helper answers from environment variables of this script only, so the token never
    /// reaches `.git/config` or a process's arguments.
    fn git(&self) -> String {
        if self.credentials.is_none() {
            return "git".to_owned();
        }
        let helper = "!f() { test \"$1\" = get || exit 0; \
                      echo \"username=${FLOTILLA_GIT_USERNAME}\"; \
                      echo \"password=${FLOTILLA_GIT_PASSWORD}\"; }; f";
        format!(
            "git -c {} -c {}",
            quote(&format!("credential.{}.helper=", self.credential_scope)),
            quote(&format!(
                "credential.{}.helper={helper}",
                self.credential_scope
            )),
        )
    }

    /// Writes the stage's commands; the job's `hooks` too unless they run elsewhere
    /// (`with_hooks` false: in the job's container or VM, see the runner's `get_sources`).
    pub fn write(
        &self,
        w: &mut ScriptWriter,
        job: &JobPayload,
        builds_dir: &str,
        dir: &str,
        with_hooks: bool,
    ) {
        w.export("GIT_TERMINAL_PROMPT", "0");
        w.export("GCM_INTERACTIVE", "Never");
        if let Some((user, password)) = &self.credentials {
            w.export("FLOTILLA_GIT_USERNAME", user);
            w.export("FLOTILLA_GIT_PASSWORD", password.expose());
        }
        // `mkdir` only when needed: a process less per job on the common path.
        let qbuilds = quote(builds_dir);
        w.line(&format!("[ -d {qbuilds} ] || mkdir -p {qbuilds}"));
        w.cd(builds_dir);
        if with_hooks {
            write_pre_hooks(w, job);
        }
        let qdir = quote(dir);
        if let Some(local) = &job.local_sources {
            // The sources arrive as an archive the runner extracts after this script, and the
            // post hooks run after that (see `post_get_sources_script`).
            for notice in &local.notices {
                w.notice(notice);
            }
            // `rm` only for what an earlier job left (a link to nowhere too): a process less on
            // a fresh slot.
            w.line(&format!(
                "if [ -e {qdir} ] || [ -L {qdir} ]; then rm -rf {qdir}; fi"
            ));
            w.line(&format!("mkdir -p {qdir}"));
            return;
        }
        match self.strategy {
            GitStrategy::None => {
                w.notice("Skipping Git repository setup");
                w.line(&format!("mkdir -p {qdir}"));
            }
            GitStrategy::Empty => {
                w.notice("Skipping Git repository setup and creating an empty build directory");
                w.line(&format!("rm -rf {qdir}"));
                w.line(&format!("mkdir -p {qdir}"));
            }
            GitStrategy::Clone | GitStrategy::Fetch => self.write_git(w, job, &qdir),
        }
        let post = with_hooks && !job.hook(HOOK_POST_GET_SOURCES).is_empty();
        if self.strategy != GitStrategy::None || post {
            w.cd(dir);
        }
        if with_hooks {
            write_post_hooks(w, job);
        }
    }

    fn write_git(&self, w: &mut ScriptWriter, job: &JobPayload, qdir: &str) {
        let git = self.git();
        let info = &job.git_info;
        if self.strategy == GitStrategy::Clone {
            w.line(&format!("rm -rf {qdir}"));
        }
        if self.depth > 0 {
            w.notice(&format!(
                "Fetching changes with git depth set to {}...",
                self.depth
            ));
        } else {
            w.notice("Fetching changes...");
        }
        w.line(&format!("mkdir -p {qdir}"));
        w.line(&format!("cd {qdir}"));
        w.line(
            "rm -f .git/index.lock .git/shallow.lock .git/HEAD.lock .git/config.lock \
             .git/hooks/post-checkout",
        );
        let object_format = if info.repo_object_format == "sha256" {
            " --object-format=sha256"
        } else {
            ""
        };
        w.line(&format!(
            "if [ -d .git ]; then printf '%s\\n' 'Reinitialized existing Git repository'; \
             else git -c init.defaultBranch=main init -q{object_format} .; fi"
        ));
        let url = quote(&self.remote_url);
        w.line(&format!(
            "git remote set-url origin {url} 2>/dev/null || git remote add origin {url}"
        ));
        // GitLab Runner's `writeGitSSLConfig`: the runner's TLS files, for GitLab's host only.
        if let Some(server) = server_of(&self.remote_url) {
            for (variable, setting) in TLS_GIT_SETTINGS {
                if job
                    .variables
                    .iter()
                    .any(|v| v.key == variable && !v.value.is_empty())
                {
                    w.line(&format!(
                        "git config {} \"${variable}\"",
                        quote(&format!("http.{server}.{setting}"))
                    ));
                }
            }
        }
        let mut fetch = format!("{git} fetch origin --no-recurse-submodules");
        for f in &self.fetch_flags {
            fetch.push(' ');
            fetch.push_str(&quote(f));
        }
        let refspecs: Vec<String> = self.refspecs.iter().map(|r| quote(r)).collect();
        let refspecs = refspecs.join(" ");
        if self.depth > 0 {
            w.line(&format!("{fetch} --depth {} {refspecs}", self.depth));
        } else {
            w.line(&format!(
                "if [ -f .git/shallow ]; then {fetch} --unshallow {refspecs}; \
                 else {fetch} {refspecs}; fi"
            ));
        }
        if !self.checkout {
            w.notice("Skipping Git checkout");
            return;
        }
        let (target, short) = if info.sha.is_empty() {
            ("FETCH_HEAD".to_owned(), "FETCH_HEAD".to_owned())
        } else {
            (info.sha.clone(), info.sha.chars().take(8).collect())
        };
        if info.git_ref.is_empty() {
            w.notice(&format!("Checking out {short} as detached HEAD..."));
        } else {
            w.notice(&format!(
                "Checking out {short} as detached HEAD (ref is {})...",
                info.git_ref
            ));
        }
        w.line(&format!("git checkout -f -q {}", quote(&target)));
        if !self.clean_flags.is_empty() {
            let flags: Vec<String> = self.clean_flags.iter().map(|f| quote(f)).collect();
            w.line(&format!("git clean {}", flags.join(" ")));
        }
        match self.submodules {
            SubmoduleStrategy::None => {}
            SubmoduleStrategy::Normal => {
                w.notice("Updating/initializing submodules...");
                w.line("git submodule sync");
                w.line(&format!("{git} submodule update --init"));
            }
            SubmoduleStrategy::Recursive => {
                w.notice("Updating/initializing submodules recursively...");
                w.line("git submodule sync --recursive");
                w.line(&format!("{git} submodule update --init --recursive"));
            }
        }
    }
}

/// The runner's TLS files as jobs get them (`CI_SERVER_TLS_*`), and the git setting each one
/// becomes for GitLab's host.
const TLS_GIT_SETTINGS: [(&str, &str); 3] = [
    ("CI_SERVER_TLS_CA_FILE", "sslCAInfo"),
    ("CI_SERVER_TLS_CERT_FILE", "sslCert"),
    ("CI_SERVER_TLS_KEY_FILE", "sslKey"),
];

/// `scheme://host[:port]` of a URL, without credentials; `None` for what is no URL.
fn server_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split('/').next().unwrap_or(rest);
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    (!host.is_empty()).then(|| format!("{scheme}://{host}"))
}

/// `hooks:pre_get_sources_script`, run in the builds directory.
pub(super) fn write_pre_hooks(w: &mut ScriptWriter, job: &JobPayload) {
    for c in job.hook(HOOK_PRE_GET_SOURCES) {
        w.command(c);
    }
}

/// `hooks:post_get_sources_script`, run in the project directory.
pub(super) fn write_post_hooks(w: &mut ScriptWriter, job: &JobPayload) {
    for c in job.hook(HOOK_POST_GET_SOURCES) {
        w.command(c);
    }
}

/// The URL to fetch from when the runner sets `clone_url` (GitLab Runner's `GetRemoteURL`,
/// `common/build.go`): `clone_url` with `<project path>.git` added to its path, authenticated
/// as `gitlab-ci-token` with the job's token, or as the user `git` (no password) for `ssh`.
/// `None` when `clone_url` has no scheme: GitLab then fetches the payload's `repo_url`.
pub fn clone_url_remote(clone_url: &str, token: &str, project_path: &str) -> Option<String> {
    let (scheme, rest) = clone_url.trim().split_once("://")?;
    if scheme.is_empty() {
        return None;
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (user, host) = match authority.rsplit_once('@') {
        Some((user, host)) => (Some(user), host),
        None => (None, authority),
    };
    let userinfo = if scheme == "ssh" {
        user.unwrap_or("git").to_owned()
    } else {
        format!("gitlab-ci-token:{token}")
    };
    let path = path.trim_end_matches('/');
    let project = project_path.trim_matches('/');
    Some(format!("{scheme}://{userinfo}@{host}{path}/{project}.git"))
}

/// The password embedded in a repository URL (the job token for GitLab), if any.
pub(crate) fn url_password(url: &str) -> Option<String> {
    RepoUrl::parse(url)
        .credentials
        .map(|(_, p)| p)
        .filter(|p| !p.is_empty())
}

/// A repository URL split into the part git is given and the credentials it carried.
struct RepoUrl {
    without_credentials: String,
    credentials: Option<(String, String)>,
    scope: String,
}

impl RepoUrl {
    fn parse(url: &str) -> RepoUrl {
        let plain = |url: &str| RepoUrl {
            without_credentials: url.to_owned(),
            credentials: None,
            scope: String::new(),
        };
        let Some((scheme, rest)) = url.split_once("://") else {
            return plain(url);
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let Some((userinfo, host)) = authority.rsplit_once('@') else {
            return plain(url);
        };
        let (user, password) = match userinfo.split_once(':') {
            Some((u, p)) => (percent_decode(u), percent_decode(p)),
            None => (percent_decode(userinfo), String::new()),
        };
        RepoUrl {
            without_credentials: format!("{scheme}://{host}{path}"),
            credentials: Some((user, password)),
            scope: format!("{scheme}://{host}"),
        }
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(v) = hex {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As GitLab Runner's `GetRemoteURL` builds it (`common/build.go`).
    #[test]
    fn clone_url_as_gitlab_builds_the_remote() {
        let remote = |c| clone_url_remote(c, "tok", "group/project");
        assert_eq!(
            remote("https://gitlab.internal").as_deref(),
            Some("https://gitlab-ci-token:tok@gitlab.internal/group/project.git")
        );
        assert_eq!(
            remote("http://10.0.0.5:8080/gitlab/").as_deref(),
            Some("http://gitlab-ci-token:tok@10.0.0.5:8080/gitlab/group/project.git")
        );
        assert_eq!(
            remote("ssh://gitlab.internal:2222").as_deref(),
            Some("ssh://git@gitlab.internal:2222/group/project.git")
        );
        assert_eq!(
            remote("ssh://deploy@gitlab.internal").as_deref(),
            Some("ssh://deploy@gitlab.internal/group/project.git")
        );
        assert_eq!(remote("gitlab.internal"), None);
        assert_eq!(remote(""), None);
    }

    #[test]
    fn credentials_are_taken_out_of_the_url() {
        let u =
            RepoUrl::parse("https://gitlab-ci-token:glcbt-abc%2Fd@gitlab.example.com:8443/g/p.git");
        assert_eq!(
            u.without_credentials,
            "https://gitlab.example.com:8443/g/p.git"
        );
        assert_eq!(
            u.credentials,
            Some(("gitlab-ci-token".into(), "glcbt-abc/d".into()))
        );
        assert_eq!(u.scope, "https://gitlab.example.com:8443");
        let local = RepoUrl::parse("/srv/repo.git");
        assert_eq!(local.without_credentials, "/srv/repo.git");
        assert!(local.credentials.is_none());
        let file = RepoUrl::parse("file:///srv/repo.git");
        assert_eq!(file.without_credentials, "file:///srv/repo.git");
        assert!(file.credentials.is_none());
    }

    #[test]
    fn percent_decoding_edges() {
        assert_eq!(percent_decode("a%41"), "aA");
        assert_eq!(percent_decode("a%4"), "a%4");
        assert_eq!(percent_decode("%zz"), "%zz");
        assert_eq!(percent_decode("%"), "%");
    }
}
