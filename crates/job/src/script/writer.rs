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

/// Accumulates the body of a stage script and wraps it as GitLab Runner's `BashWriter.Finish`
/// does (gitlab-runner `shells/bash.go`, 19.1 and later):
///
/// ```sh
/// trap 'exit 1' TERM
/// if (set -o pipefail) 2>/dev/null; then set -o pipefail; fi
/// set -o errexit
/// set +o noclobber
/// (trap 'exit 1' TERM; eval '...body...') < /dev/null
/// exit 0
/// ```
///
/// What a job sees follows from that shape, and GitLab's users rely on each part:
/// - the stage's status is the body's: the status of the command that stopped it (errexit), or
///   of its last command. A last line `[ -f x ] && cat x`, `! true` or `set +e; false` fails
///   the job, as on GitLab; nothing after the body resets the status;
/// - `eval` parses the body one command at a time as it runs it, so `shopt -s extglob` or an
///   `alias` on one line takes effect on the next, and a syntax error in a later line does not
///   keep the earlier lines from running (the error then ends the stage with status 2);
/// - the body reads `/dev/null` on stdin, so a command that reads stdin never eats the rest of
///   the script, and runs in a subshell of the stage's shell, which a TERM ends with status 1.
///
/// Runners before 19.1 ran the body as `: | eval '...'`, where bash reports a command stopped by
/// errexit with status 1 whatever its own status was (`exit N` excepted); flotilla keeps the
/// status, as current runners do.
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

    /// Makes a private directory (0700: `-m` gives the last directory its mode, in the same
    /// process) unless it exists: no process when it does.
    pub fn private_dir(&mut self, dir: &str) {
        let d = quote(dir);
        self.line(&format!("[ -d {d} ] || mkdir -p -m 700 {d}"));
    }

    /// Exports `KEY` as the path of a dotenv file that later commands and stages may append
    /// `NAME=value` lines to, and exports each line already in it, as GitLab Runner's
    /// `exportVariables` and `BashWriter.SourceEnv` do for `GITLAB_ENV` (gitlab-runner
    /// `shells/abstract.go`, `shells/bash.go`). With `fresh`, the file is emptied first: the
    /// job's first stage, so nothing of an earlier job on the slot survives a failed cleanup.
    /// The file lives in the private directory `dir`; where that cannot be made or written (a
    /// build container running as another user than the helper stages), the file does
    /// nothing rather than failing every stage.
    pub fn dotenv_file(&mut self, key: &str, dir: &str, path: &str, fresh: bool) {
        self.export(key, path);
        self.open_dotenv_file(dir, path, if fresh { ">" } else { ">>" });
        let p = quote(path);
        self.line(&format!(
            "if [ -r {p} ]; then while read -r _flotilla_line; do export \"$_flotilla_line\"; \
             done < {p}; unset _flotilla_line; fi"
        ));
    }

    /// Empties the dotenv file at `path` in the private directory `dir` (making it) without
    /// reading it: the first stage of a job whose first script runs where the job's own
    /// lines must not be exported (see [`Self::dotenv_file`]).
    pub fn fresh_dotenv_file(&mut self, dir: &str, path: &str) {
        self.open_dotenv_file(dir, path, ">");
    }

    /// Makes the private directory `dir` and opens the dotenv file at `path` with `open` (`>`
    /// empties it, `>>` creates it), quietly doing nothing where it cannot.
    fn open_dotenv_file(&mut self, dir: &str, path: &str, open: &str) {
        let (d, p) = (quote(dir), quote(path));
        // `true`, not `:`: a redirection that fails on a special built-in ends a POSIX shell
        // (dash, busybox), whatever `||` follows.
        self.line(&format!(
            "{{ [ -d {d} ] || mkdir -p -m 700 {d}; true {open} {p}; }} 2>/dev/null || :"
        ));
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

    /// The full script (see [`ScriptWriter`] for its shape and why).
    pub fn finish(self) -> String {
        let body = quote(&self.body);
        let mut s = String::with_capacity(body.len() + 160);
        s.push_str("trap 'exit 1' TERM\n");
        s.push_str("if (set -o pipefail) 2>/dev/null; then set -o pipefail; fi\n");
        s.push_str("set -o errexit\n");
        s.push_str("set +o noclobber\n");
        s.push_str("(trap 'exit 1' TERM; eval ");
        s.push_str(&body);
        s.push_str(") < /dev/null\nexit 0\n");
        s
    }
}
