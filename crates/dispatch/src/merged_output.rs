//! One output stream per stage script: the shell's stderr joined to its stdout at the source.
//!
//! The job runner writes a stage's stdout and stderr into one log, which is masked as one
//! stream. When the two travel apart (two SSH channel streams, two pipes, two docker frames
//! streams), their chunks reach the log interleaved wherever the transport happened to cut
//! them: mid-line, and mid-secret, so that a masked value cut in two by a stderr chunk
//! reaches the log unmasked, in two pieces. Starting every stage script with `exec 2>&1`
//! makes the shell write both to one stream, in the order the job wrote them, like GitLab
//! Runner's shell executor (one pipe for both): chunks of one stream never split a write
//! by another, and the masker sees the bytes in the order they were written.
//!
//! Helper commands (`tar` streams on stdout, for artifacts and caches) are left alone.

use async_trait::async_trait;
use flotilla_job::{EnvError, EnvPaths, Environment, ExecCommand, ExecSpec, ExitStatus};
use tokio::io::AsyncWrite;
use tokio_util::sync::CancellationToken;

/// The line put in front of every stage script.
pub(crate) const JOIN_STDERR: &str = "exec 2>&1\n";

/// `script` with its shell's stderr sent to its stdout.
pub(crate) fn joined(script: String) -> String {
    let mut s = String::with_capacity(JOIN_STDERR.len() + script.len());
    s.push_str(JOIN_STDERR);
    s.push_str(&script);
    s
}

/// An environment whose stage scripts write stdout and stderr as one stream.
pub(crate) struct MergedOutput<'a> {
    inner: &'a dyn Environment,
}

impl<'a> MergedOutput<'a> {
    /// Wraps `inner`.
    pub(crate) fn new(inner: &'a dyn Environment) -> MergedOutput<'a> {
        MergedOutput { inner }
    }
}

#[async_trait]
impl Environment for MergedOutput<'_> {
    fn paths(&self) -> &EnvPaths {
        self.inner.paths()
    }

    fn variables(&self) -> Vec<flotilla_job::Variable> {
        self.inner.variables()
    }

    fn disposable(&self) -> bool {
        self.inner.disposable()
    }

    fn helper_files_here(&self) -> bool {
        self.inner.helper_files_here()
    }

    async fn prepare(
        &self,
        log: &mut (dyn AsyncWrite + Send + Unpin),
        cancel: CancellationToken,
    ) -> Result<(), EnvError> {
        self.inner.prepare(log, cancel).await
    }

    async fn exec(&self, mut spec: ExecSpec<'_>) -> Result<ExitStatus, EnvError> {
        if let ExecCommand::Script(script) = spec.command {
            spec.command = ExecCommand::Script(joined(script));
        }
        self.inner.exec(spec).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records the commands it is asked to run.
    #[derive(Default)]
    struct Recorder {
        paths: Option<EnvPaths>,
        seen: Mutex<Vec<ExecCommand>>,
    }

    #[async_trait]
    impl Environment for Recorder {
        fn paths(&self) -> &EnvPaths {
            self.paths.as_ref().unwrap()
        }

        async fn exec(&self, spec: ExecSpec<'_>) -> Result<ExitStatus, EnvError> {
            self.seen.lock().unwrap().push(spec.command.clone());
            Ok(ExitStatus::Code(0))
        }
    }

    fn spec(command: ExecCommand) -> ExecSpec<'static> {
        ExecSpec {
            place: flotilla_job::Place::Build,
            command,
            stdin: None,
            stdout: Box::new(tokio::io::sink()),
            stderr: Box::new(tokio::io::sink()),
            cancel: CancellationToken::new(),
        }
    }

    #[tokio::test]
    async fn scripts_get_stderr_joined_and_commands_are_untouched() {
        let inner = Recorder {
            paths: Some(EnvPaths::new("/builds", "/builds/p")),
            ..Default::default()
        };
        let env = MergedOutput::new(&inner);
        assert_eq!(env.paths().project_dir, "/builds/p");
        env.exec(spec(ExecCommand::Script("echo a\necho b >&2\n".into())))
            .await
            .unwrap();
        env.exec(spec(ExecCommand::Command("tar -c .".into())))
            .await
            .unwrap();
        let seen = inner.seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            [
                ExecCommand::Script("exec 2>&1\necho a\necho b >&2\n".into()),
                ExecCommand::Command("tar -c .".into()),
            ]
        );
    }
}
