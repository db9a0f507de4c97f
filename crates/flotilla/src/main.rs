//! The `flotilla` binary: everything happens in [`flotilla::cli`].

use std::process::ExitCode;

fn main() -> ExitCode {
    flotilla::cli::main()
}
