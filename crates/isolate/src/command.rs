//! The command lines that start a stage's shell and a helper command on an instance, through
//! any connector (SSH or local processes).
//!
//! A stage script is piped on stdin to `bash` when the instance has it, else to `sh`. A helper
//! command runs under `sh -c`. Either way the process starts from a clean environment: only
//! [`KEPT_ENV`] survive from the connection's own environment (the manager's, for the local
//! connector), so nothing of the manager leaks into a job.

use crate::stage_record::STAGE_MARK;
use flotilla_connect::local::{CLEAN_ENV_MARKER, KEPT_ENV};
use flotilla_connect::shell::quote;

/// Picks the stage shell: bash when present, else POSIX sh; the script comes on stdin.
pub const SHELL_SELECT: &str =
    "if command -v bash >/dev/null 2>&1; then exec bash; else exec sh; fi";

/// A compound command (`sh` syntax) that `exec`s `program` (with its arguments, quoted) in a
/// clean environment: with `env -i`, keeping the [`KEPT_ENV`] variables that are set; or, if
/// the connector already started the line in such an environment (it says so with
/// [`CLEAN_ENV_MARKER`], as [`flotilla_connect::local::LocalConnector::with_clean_env`]
/// does), directly, without the `env` process.
fn exec_clean(program: &str) -> String {
    format!(
        "if {}; then unset {CLEAN_ENV_MARKER}; exec {program}; else {} {program}; fi",
        marked_clean(),
        exec_env_i()
    )
}

/// The test (`sh` syntax) for an environment the connector marked clean.
fn marked_clean() -> String {
    format!("[ \"${{{CLEAN_ENV_MARKER}-}}\" = 1 ]")
}

/// `exec env -i` keeping the [`KEPT_ENV`] variables that are set (a program follows).
fn exec_env_i() -> String {
    let mut env = String::from("exec env -i");
    // The stage's mark (set just before, where stages are recorded) goes on with it.
    for k in KEPT_ENV.iter().chain([&STAGE_MARK]) {
        env.push_str(&format!(" ${{{k}+\"{k}=${k}\"}}"));
    }
    env
}

/// The command line that starts a stage's shell (the script goes to its stdin): the shell
/// that runs the line picks bash or sh itself and `exec`s it in a clean environment, so a
/// stage costs no intermediate `sh` (one process fewer per stage: see the `run_throughput`
/// bench, where the instances' CPU is what bounds jobs per second).
///
/// When the line already runs in bash in a clean environment ([`CLEAN_ENV_MARKER`]: the
/// local connector), that bash runs the script itself, sourcing it from stdin: no process at
/// all, and the script is read in large chunks instead of a byte at a time (as bash must read
/// a script it runs from a pipe). Scripts behave the same but for a top-level `return`,
/// which ends the stage with its status there instead of failing.
pub fn script_command() -> String {
    format!(
        "if {} && [ -n \"${{BASH_VERSION-}}\" ] && [ -r /dev/stdin ]; then \
         unset {CLEAN_ENV_MARKER} _flotilla_stat; set --; . /dev/stdin; exit; fi; \
         if command -v bash >/dev/null 2>&1; then {}; else {}; fi",
        marked_clean(),
        exec_clean("bash"),
        exec_clean("sh")
    )
}

/// The command line that runs a helper command (`sh -c` syntax) in a clean environment: in
/// the shell that runs the line when its environment is already clean ([`CLEAN_ENV_MARKER`]),
/// else in a new `sh`.
pub fn helper_command(line: &str) -> String {
    let line = quote(line);
    format!(
        "if {}; then unset {CLEAN_ENV_MARKER} _flotilla_stat; set --; eval \" \"{line}; \
         else {} sh -c {line}; fi",
        marked_clean(),
        exec_env_i()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn sh(line: &str, env: &[(&str, &str)], stdin: &str) -> String {
        use std::io::Write;
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(line)
            .env_clear()
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn only_kept_variables_reach_the_job() {
        let path = std::env::var("PATH").unwrap();
        let out = sh(
            &script_command(),
            &[
                ("PATH", &path),
                ("HOME", "/home/it's me"),
                ("MANAGER_TOKEN", "glrt-secret"),
            ],
            "env | sort\n",
        );
        assert!(out.contains("HOME=/home/it's me\n"), "{out}");
        assert!(out.contains(&format!("PATH={path}\n")), "{out}");
        assert!(!out.contains("MANAGER_TOKEN"), "{out}");
        assert!(!out.contains("LANG="), "unset ones stay unset: {out}");
    }

    #[test]
    fn an_environment_marked_clean_is_kept_without_the_marker() {
        let path = std::env::var("PATH").unwrap();
        for line in [script_command(), helper_command("env | sort")] {
            let out = sh(
                &line,
                &[
                    ("PATH", &path),
                    ("KEPT_BY_THE_CONNECTOR", "yes"),
                    (CLEAN_ENV_MARKER, "1"),
                ],
                "env | sort\n",
            );
            assert!(out.contains("KEPT_BY_THE_CONNECTOR=yes\n"), "{out}");
            assert!(!out.contains(CLEAN_ENV_MARKER), "{out}");
        }
        // Any other value of the marker is no promise: the environment is cleared.
        let out = sh(
            &script_command(),
            &[
                ("PATH", &path),
                ("MANAGER_TOKEN", "x"),
                (CLEAN_ENV_MARKER, "yes"),
            ],
            "env | sort\n",
        );
        assert!(
            !out.contains("MANAGER_TOKEN") && !out.contains(CLEAN_ENV_MARKER),
            "{out}"
        );
    }

    #[tokio::test]
    async fn the_local_connector_with_a_clean_env_gives_only_the_kept_variables() {
        use flotilla_connect::local::LocalConnector;
        use flotilla_connect::{Connector, ExecRequest};
        // SAFETY: set before any command of this test starts; other tests of this binary
        // do not read it.
        unsafe { std::env::set_var("FLOTILLA_TEST_MANAGER_SECRET", "glrt-manager") };
        let c = LocalConnector::new().with_clean_env(&KEPT_ENV);
        for (line, stdin) in [(helper_command("env"), ""), (script_command(), "env\n")] {
            let mut out = Vec::new();
            let status = c
                .exec(
                    ExecRequest::new(line)
                        .stdin_bytes(stdin.as_bytes().to_vec())
                        .stdout(&mut out),
                )
                .await
                .unwrap();
            let env = String::from_utf8(out).unwrap();
            assert!(status.success(), "{env}");
            assert!(env.contains("PATH="), "{env}");
            assert!(!env.contains("FLOTILLA_TEST_MANAGER_SECRET"), "{env}");
            assert!(!env.contains(CLEAN_ENV_MARKER), "{env}");
        }
    }

    #[test]
    fn helper_commands_keep_their_quoting() {
        let path = std::env::var("PATH").unwrap();
        let out = sh(
            &helper_command("printf '%s|' \"a b\" 'c'\"'\"'d' \"$HOME\""),
            &[("PATH", &path), ("HOME", "/h")],
            "",
        );
        assert_eq!(out, "a b|c'd|/h|");
    }
}
