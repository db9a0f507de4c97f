//! Which of a job's variables reach `git` when `get_sources` runs outside the job's container
//! or VM (the instance's shell at the microvm level, the helper container at the docker level).
//!
//! Where the fetch runs in the job's own place (the shell and cgroup levels), every variable is
//! exported into it, as GitLab Runner does. Where it runs outside, a variable is a way in: git
//! runs commands named by `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n` (`core.fsmonitor`,
//! `core.sshCommand`), `GIT_SSH_COMMAND`, `GIT_ASKPASS`, `GIT_PROXY_COMMAND`, `GIT_EXEC_PATH`,
//! reads `$HOME/.gitconfig` and `$XDG_CONFIG_HOME` from any path, the shell runs `$ENV`, the
//! loader `LD_PRELOAD`, and `GIT_ALLOW_PROTOCOL=ext` lets a submodule URL run one. So only the
//! variables below pass, each of which only tunes a connection or git's own output; everything
//! flotilla needs from the job (strategy, depth, refspecs, clean and fetch flags, submodules)
//! is read by flotilla and written into the script as data (see [`super::SourcesPlan`]).

/// Variables that pass as they are: proxies, TLS verification, LFS smudging, HTTP speed limits.
const PASSED: &[&str] = &[
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "GIT_SSL_NO_VERIFY",
    "GIT_LFS_SKIP_SMUDGE",
    "GIT_HTTP_LOW_SPEED_LIMIT",
    "GIT_HTTP_LOW_SPEED_TIME",
    // The runner's own TLS files (data, read by git as files; see `sources.rs`).
    "CI_SERVER_TLS_CA_FILE",
    "CI_SERVER_TLS_CERT_FILE",
    "CI_SERVER_TLS_KEY_FILE",
];

/// Tracing switches: they pass when their value turns tracing on or off (to standard error),
/// not when it is a path, which git would append to (a file anywhere the fetch can write).
const SWITCHES: &[&str] = &[
    "GIT_CURL_VERBOSE",
    "GIT_TRACE",
    "GIT_TRACE_CURL",
    "GIT_TRACE_PACKET",
    "GIT_TRACE_PERFORMANCE",
    "GIT_TRACE_SETUP",
    "GIT_TRANSFER_TRACE",
];

/// The `GIT_*` settings GitLab Runner reads itself (docs.gitlab.com/ci/runners/configure_runners,
/// "Git strategy" and the sections after it): they are the runner's, not git's, so they are
/// not reported as held back. `GIT_CLONE_PATH` is read where a job's directories are laid
/// out (`flotilla_isolate::layout`), with `[runners.custom_build_dir]`.
const RUNNER_SETTINGS: &[&str] = &[
    "GIT_STRATEGY",
    "GIT_DEPTH",
    "GIT_CHECKOUT",
    "GIT_CLEAN_FLAGS",
    "GIT_FETCH_EXTRA_FLAGS",
    "GIT_CLONE_PATH",
    "GIT_SUBMODULE_STRATEGY",
    "GIT_SUBMODULE_PATHS",
    "GIT_SUBMODULE_UPDATE_FLAGS",
    "GIT_SUBMODULE_DEPTH",
    "GIT_SUBMODULE_FORCE_HTTPS",
];

/// Whether the variable `key` with `value` is exported into a fetch that runs outside the
/// job's container or VM.
pub(crate) fn passes(key: &str, value: &str) -> bool {
    if PASSED.contains(&key) {
        return true;
    }
    SWITCHES.contains(&key)
        && matches!(
            value.trim().to_ascii_lowercase().as_str(),
            "" | "0" | "1" | "2" | "true" | "false" | "yes" | "no"
        )
}

/// Whether the job's trace should say that `key` was held back: a git variable that is
/// neither passed nor one of the runner's own settings (`PATH`, `HOME` and the like are not
/// named; they never meant anything to the fetch).
pub(crate) fn worth_naming(key: &str) -> bool {
    key.starts_with("GIT_") && !RUNNER_SETTINGS.contains(&key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_runs_commands_does_not_pass() {
        for key in [
            "GIT_CONFIG_COUNT",
            "GIT_CONFIG_KEY_0",
            "GIT_CONFIG_VALUE_0",
            "GIT_CONFIG_PARAMETERS",
            "GIT_SSH_COMMAND",
            "GIT_SSH",
            "GIT_ASKPASS",
            "GIT_PROXY_COMMAND",
            "GIT_EXEC_PATH",
            "GIT_ALLOW_PROTOCOL",
            "GIT_DIR",
            "GIT_TEMPLATE_DIR",
            "HOME",
            "XDG_CONFIG_HOME",
            "ENV",
            "BASH_ENV",
            "LD_PRELOAD",
            "PATH",
            "PS4",
        ] {
            assert!(!passes(key, "1"), "{key}");
        }
    }

    #[test]
    fn connection_settings_pass_and_trace_paths_do_not() {
        assert!(passes("https_proxy", "http://proxy.example:3128"));
        assert!(passes("GIT_SSL_NO_VERIFY", "true"));
        assert!(passes("GIT_TRACE", "1"));
        assert!(passes("GIT_CURL_VERBOSE", "true"));
        assert!(!passes("GIT_TRACE", "/etc/cron.d/x"));
        assert!(!passes("GIT_TRACE_PACKET", "/tmp/packets"));
    }

    #[test]
    fn held_back_git_variables_are_named_but_runner_settings_are_not() {
        assert!(worth_naming("GIT_SSH_COMMAND"));
        assert!(worth_naming("GIT_CONFIG_COUNT"));
        assert!(!worth_naming("GIT_STRATEGY"));
        assert!(!worth_naming("GIT_DEPTH"));
        assert!(!worth_naming("PATH"));
    }
}
