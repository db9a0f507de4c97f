//! Running stage scripts and helper commands on an instance through its connector: the
//! helper context of every level, and both contexts of shell isolation.
//!
//! A stage script is piped on stdin to `bash` when the instance has it, else to `sh`. A helper
//! command runs under `sh -c`. Either way the process starts from a clean environment: only
//! [`KEPT_ENV`] survive from the connection's own environment (the manager's, for the local
//! connector), so nothing of the manager leaks into a job.

use flotilla_connect::shell::quote;
use flotilla_connect::{ConnectError, Connector, ExecRequest, Stdin};
use flotilla_job::{EnvError, ExecCommand, ExecSpec, ExitStatus};
use std::str::FromStr;

/// Picks the stage shell: bash when present, else POSIX sh; the script comes on stdin.
pub const SHELL_SELECT: &str =
    "if command -v bash >/dev/null 2>&1; then exec bash; else exec sh; fi";

/// The variables a job inherits from the environment its connection starts in.
pub const KEPT_ENV: [&str; 9] = [
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TZ", "TMPDIR",
];

/// `exec env -i` keeping the [`KEPT_ENV`] variables that are set.
fn clean_env() -> String {
    let mut s = String::from("exec env -i");
    for k in KEPT_ENV {
        s.push_str(&format!(" ${{{k}+\"{k}=${k}\"}}"));
    }
    s
}

/// The command line that starts a stage's shell (the script goes to its stdin).
pub fn script_command() -> String {
    format!("{} sh -c {}", clean_env(), quote(SHELL_SELECT))
}

/// The command line that runs a helper command (`sh -c` syntax) in a clean environment.
pub fn helper_command(line: &str) -> String {
    format!("{} sh -c {}", clean_env(), quote(line))
}

/// A connector's exit status as the job engine counts it.
pub fn exit_status(s: &flotilla_connect::ExitStatus) -> ExitStatus {
    match s {
        flotilla_connect::ExitStatus::Code(c) => ExitStatus::Code(*c),
        flotilla_connect::ExitStatus::Signal { name, .. } => {
            let number = nix::sys::signal::Signal::from_str(&format!("SIG{name}"))
                .map(|s| s as i32)
                .or_else(|_| name.parse::<i32>());
            match number {
                Ok(n) => ExitStatus::Signal(n),
                // A signal nobody can name: report what a shell reports for SIGKILL.
                Err(_) => ExitStatus::Code(128 + 9),
            }
        }
    }
}

/// A connector error as an environment error; `context` says what was being done.
pub fn env_error(context: &str, e: ConnectError) -> EnvError {
    match e {
        ConnectError::Cancelled => EnvError::Canceled,
        ConnectError::Io { what, source } => EnvError::Io {
            context: format!("{context}: {what}"),
            source,
        },
        other => EnvError::System(format!("{context}: {other}")),
    }
}

/// Runs `spec` on the instance behind `connector` (the place is the caller's business): a
/// script through [`script_command`], a command through [`helper_command`].
pub async fn run(
    connector: &dyn Connector,
    what: &str,
    spec: ExecSpec<'_>,
) -> Result<ExitStatus, EnvError> {
    run_with(connector, what, spec, &script_command(), helper_command).await
}

/// Runs `spec` through `connector`, starting a script's shell with `script_line` (the script
/// on its stdin) and a command with `wrap(command)`.
pub async fn run_with(
    connector: &dyn Connector,
    what: &str,
    spec: ExecSpec<'_>,
    script_line: &str,
    wrap: impl Fn(&str) -> String,
) -> Result<ExitStatus, EnvError> {
    let ExecSpec {
        command,
        stdin,
        mut stdout,
        mut stderr,
        cancel,
        ..
    } = spec;
    let mut stdin = stdin;
    let (line, input) = match command {
        ExecCommand::Script(script) => (script_line.to_string(), Stdin::Bytes(script.into())),
        ExecCommand::Command(line) => (
            wrap(&line),
            match stdin.as_mut() {
                Some(r) => Stdin::Reader(r.as_mut()),
                None => Stdin::Null,
            },
        ),
    };
    let request = ExecRequest {
        command: line,
        env: Vec::new(),
        stdin: input,
        stdout: Some(stdout.as_mut()),
        stderr: Some(stderr.as_mut()),
        cancel,
    };
    connector
        .exec(request)
        .await
        .map(|s| exit_status(&s))
        .map_err(|e| env_error(what, e))
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
    fn helper_commands_keep_their_quoting() {
        let path = std::env::var("PATH").unwrap();
        let out = sh(
            &helper_command("printf '%s|' \"a b\" 'c'\"'\"'d' \"$HOME\""),
            &[("PATH", &path), ("HOME", "/h")],
            "",
        );
        assert_eq!(out, "a b|c'd|/h|");
    }

    #[test]
    fn statuses_and_errors_map_to_the_job_engine() {
        assert_eq!(
            exit_status(&flotilla_connect::ExitStatus::Code(3)),
            ExitStatus::Code(3)
        );
        assert_eq!(
            exit_status(&flotilla_connect::ExitStatus::from_signal_number(15, false)),
            ExitStatus::Signal(15)
        );
        assert_eq!(
            exit_status(&flotilla_connect::ExitStatus::Signal {
                name: "WEIRD".into(),
                core_dumped: false
            }),
            ExitStatus::Code(137)
        );
        assert!(matches!(
            env_error("x", ConnectError::Cancelled),
            EnvError::Canceled
        ));
        let e = env_error(
            "running a stage",
            ConnectError::Network {
                addr: "a".into(),
                message: "reset".into(),
            },
        );
        assert!(matches!(&e, EnvError::System(m) if m.starts_with("running a stage: ")));
    }
}
