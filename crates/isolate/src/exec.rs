//! Running a job engine's [`ExecSpec`] through a connector: the adapter every level that runs
//! stages on the instance itself uses, and the translation of connector errors into the job
//! engine's.

use crate::command::{helper_command, script_command};
use flotilla_connect::{ConnectError, Connector, ExecRequest, Stdin};
use flotilla_job::{EnvError, ExecCommand, ExecSpec, ExitStatus};

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
        .map_err(|e| env_error(what, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connector_errors_map_to_the_job_engine() {
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
