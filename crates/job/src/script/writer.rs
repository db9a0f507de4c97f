//! Building one stage script: a POSIX `sh` program (also valid bash and busybox ash) that is
//! piped to the environment's shell on stdin.

use flotilla_shell::quote;

/// ANSI sequence GitLab uses for command echoes and notices (bold green).
pub const ANSI_BOLD_GREEN: &str = "\x1b[32;1m";
/// ANSI sequence GitLab uses for warnings (yellow).
pub const ANSI_YELLOW: &str = "\x1b[0;33m";
/// ANSI sequence GitLab uses for errors (bold red).
pub const ANSI_BOLD_RED: &str = "\x1b[31;1m";
/// ANSI reset as GitLab writes it.
pub const ANSI_RESET: &str = "\x1b[0;m";

/// Accumulates the body of a stage script and wraps it in the standard preamble:
///
/// ```sh
/// set -e
/// if (set -o pipefail) 2>/dev/null; then set -o pipefail; fi
/// set +o noclobber
/// trap 'exit 1' TERM
/// {
///   ...body...
/// } < /dev/null
/// ```
///
/// The body is one compound command, so the shell reads all of it before running any of it and
/// commands that read stdin see `/dev/null` rather than the rest of the script.
#[derive(Default)]
pub struct ScriptWriter {
    body: String,
}

impl std::fmt::Debug for ScriptWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The body holds variable values: never print it.
        write!(f, "ScriptWriter({} bytes)", self.body.len())
    }
}

impl ScriptWriter {
    /// An empty script.
    pub fn new() -> ScriptWriter {
        ScriptWriter::default()
    }

    /// Appends one line of shell code as it is.
    pub fn line(&mut self, code: &str) {
        self.body.push_str(code);
        self.body.push('\n');
    }

    /// `export KEY='value'`.
    pub fn export(&mut self, key: &str, value: &str) {
        self.line(&format!("export {key}={}", quote(value)));
    }

    /// Writes `value` to a private file at `path` (mode 0600, replacing any old file) and
    /// exports `KEY` as that path.
    pub fn file_variable(&mut self, key: &str, path: &str, value: &str) {
        let p = quote(path);
        self.line(&format!(
            "rm -f {p} && (umask 077 && printf '%s' {} > {p})",
            quote(value)
        ));
        self.export(key, path);
    }

    /// `mkdir -p` a private directory.
    pub fn private_dir(&mut self, dir: &str) {
        let d = quote(dir);
        self.line(&format!("mkdir -p {d} && chmod 700 {d}"));
    }

    /// `cd` into `dir`.
    pub fn cd(&mut self, dir: &str) {
        self.line(&format!("cd {}", quote(dir)));
    }

    /// Prints a notice line (bold green, like GitLab's).
    pub fn notice(&mut self, text: &str) {
        self.print_colored(ANSI_BOLD_GREEN, text);
    }

    /// Prints a warning line (yellow).
    pub fn warning(&mut self, text: &str) {
        self.print_colored(ANSI_YELLOW, text);
    }

    fn print_colored(&mut self, color: &str, text: &str) {
        self.line(&format!(
            "printf '%s\\n' {}",
            quote(&format!("{color}{text}{ANSI_RESET}"))
        ));
    }

    /// Echoes a user command as `$ command` (only its first line for multi-line commands,
    /// like GitLab) and then runs it.
    pub fn command(&mut self, command: &str) {
        let trimmed = command.trim_end_matches('\n');
        let mut lines = trimmed.lines();
        let first = lines.next().unwrap_or("");
        let shown = if lines.next().is_some() {
            format!("$ {first} # collapsed multi-line command")
        } else {
            format!("$ {first}")
        };
        self.notice(&shown);
        self.line(trimmed);
    }

    /// The full script.
    pub fn finish(self) -> String {
        let mut s = String::with_capacity(self.body.len() + 160);
        s.push_str("set -e\n");
        s.push_str("if (set -o pipefail) 2>/dev/null; then set -o pipefail; fi\n");
        s.push_str("set +o noclobber\n");
        s.push_str("trap 'exit 1' TERM\n");
        s.push_str("{\n");
        s.push_str(&self.body);
        s.push_str(":\n} < /dev/null\n");
        s
    }
}
