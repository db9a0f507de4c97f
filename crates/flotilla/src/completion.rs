//! `flotilla completion SHELL` and `flotilla man`: shell completions and man pages generated
//! from the command line's own definition (clap), so they never drift from it.

use clap::{Args, CommandFactory};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `flotilla completion`.
#[derive(Debug, Clone, Args)]
pub struct CompletionArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Options of `flotilla man`.
#[derive(Debug, Clone, Args)]
pub struct ManArgs {
    /// Write a page per command (`flotilla.1`, `flotilla-run.1`, ...) into this directory
    /// instead of printing `flotilla(1)`.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// `flotilla completion SHELL`: the completion script on `out`.
pub fn completion(args: &CompletionArgs, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    let mut cmd = crate::cli::Cli::command();
    // Made in memory: clap_complete panics on a write error (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "flotilla", &mut script);
    match out.write_all(&script).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(err, "error: writing the completion script: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `flotilla man`: `flotilla(1)` on `out`, or every page into `--dir`.
pub fn man(args: &ManArgs, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    let cmd = crate::cli::Cli::command();
    let result = match &args.dir {
        None => clap_mangen::Man::new(cmd).render(out),
        Some(dir) => std::fs::create_dir_all(dir).and_then(|()| clap_mangen::generate_to(cmd, dir)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(err, "error: writing the man pages: {e}");
            ExitCode::FAILURE
        }
    }
}
