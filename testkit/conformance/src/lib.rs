//! GitLab's job contract as cases, for judging flotilla's job runner on every level.
//!
//! Each [`Case`] is a tiny job (its `before_script`, `script`, `after_script` and a few other
//! keys) with the outcome GitLab gives it, and the GitLab doc page or GitLab Runner source file
//! that fixes that outcome. Two kinds of test read the table:
//! - the job crate's judge: for every case that is a plain script ([`Case::judged_by_script`]),
//!   flotilla's stage script and [`gitlab_bash_script`] (the script GitLab Runner writes, built
//!   here from `shells/bash.go` on its own) are both run by bash, and both must end as the
//!   case says;
//! - `flotilla exec` on each isolation level, and `flotilla run` against the fake GitLab, run
//!   [`pipeline_yaml`] of the whole table and check each job's status, exit code and log.
//!
//! [`PIPELINES`] holds the cases that take more than one job (artifacts, caches, the
//! pipeline's shape), each a whole pipeline with every job's status.
//!
//! Outputs a case looks for are printed by commands whose own text differs (`echo
//! ok-$((40+2))` prints `ok-42`), since the log echoes every command as `$ command`.

mod cases;
mod pipelines;

pub use cases::CASES;
pub use pipelines::{PIPELINES, PipelineCase};

/// How a job ends on GitLab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// `success`.
    Passed,
    /// `failed` with this exit code (`script_failure`).
    Failed(i32),
    /// `failed` with this exit code, but allowed to fail (`allow_failure`).
    Allowed(i32),
    /// `failed` by a timeout (`job_execution_timeout`), no exit code.
    TimedOut,
}

/// Which shells (and the tools beside them) a case holds in: GitLab runs bash where the image has it and `sh` otherwise
/// (gitlab-runner `shells/bash.go`, `BashDetectShellScript`), and a few cases use what only
/// bash has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shell {
    /// bash, and POSIX `sh` with `pipefail` (busybox ash, dash 0.5.11+).
    Any,
    /// bash only (`shopt`, `[[ ]]`, bash's alias rules).
    Bash,
    /// bash with git and GNU tools beside it (the host's shell; not the busybox image).
    BashWithGit,
}

/// One job and how GitLab ends it.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    /// The job's name (unique, a valid job name and file name).
    pub name: &'static str,
    /// `before_script`.
    pub before: &'static [&'static str],
    /// `script`.
    pub script: &'static [&'static str],
    /// `after_script`.
    pub after: &'static [&'static str],
    /// Other keys of the job, as YAML lines at the job's indentation (`allow_failure: true`).
    pub extra: &'static str,
    /// The outcome.
    pub expect: Expect,
    /// Text the job's log must contain.
    pub log_has: &'static [&'static str],
    /// Text the job's log must not contain.
    pub log_lacks: &'static [&'static str],
    /// The shells the case holds in.
    pub shell: Shell,
    /// Where GitLab fixes this behaviour.
    pub source: &'static str,
}

impl Case {
    /// Whether the outcome is the status of one `script` step alone (no other keys and no
    /// `after_script`), so that a stage script run by a shell decides it.
    pub fn judged_by_script(&self) -> bool {
        [cases::BASH_GO, cases::STEP_RB].contains(&self.source)
            && self.after.is_empty()
            && self.extra.is_empty()
            && matches!(self.expect, Expect::Passed | Expect::Failed(_))
    }

    /// The commands of GitLab's `script` step: Rails sends `before_script` and `script` as one
    /// step (`app/models/ci/build_runner_presenter` → `Gitlab::Ci::Build::Step.from_commands`).
    pub fn step_script(&self) -> Vec<&'static str> {
        self.before.iter().chain(self.script).copied().collect()
    }

    /// The exit code a stage script of [`Case::step_script`] ends with.
    pub fn script_code(&self) -> i32 {
        match self.expect {
            Expect::Passed => 0,
            Expect::Failed(c) | Expect::Allowed(c) => c,
            Expect::TimedOut => -1,
        }
    }

    /// What is wrong with `output` (a job's log, or a script's output): each text of
    /// [`Case::log_has`] missing and each of [`Case::log_lacks`] present.
    pub fn output_problems(&self, output: &str) -> Vec<String> {
        let missing = self
            .log_has
            .iter()
            .filter(|s| !output.contains(**s))
            .map(|s| format!("output lacks {s:?}"));
        let present = self
            .log_lacks
            .iter()
            .filter(|s| output.contains(**s))
            .map(|s| format!("output has {s:?}"));
        missing.chain(present).collect()
    }

    /// What is wrong with the job's end as GitLab would record it from the runner's final
    /// update (`state`, `exit_code`) and its trace: `allow_failure` is Rails' decision on a
    /// failed job, so the runner reports the failure; a timeout has no exit code.
    pub fn final_update_problems(
        &self,
        state: &str,
        exit_code: Option<i64>,
        trace: &str,
    ) -> Vec<String> {
        let mut wrong = Vec::new();
        let (want_state, want_code) = match self.expect {
            Expect::Passed => ("success", None),
            Expect::Failed(c) | Expect::Allowed(c) => ("failed", Some(i64::from(c))),
            Expect::TimedOut => ("failed", None),
        };
        if state != want_state || exit_code != want_code {
            wrong.push(format!(
                "final update {state} exit_code {exit_code:?}, expected {want_state} {want_code:?}"
            ));
        }
        wrong.extend(self.output_problems(trace));
        wrong
    }

    /// Whether the case holds in a shell that is bash with the host's tools (`true`) or a
    /// POSIX `sh` of a small image (`false`).
    pub fn holds_in(&self, bash: bool) -> bool {
        bash || self.shell == Shell::Any
    }
}

/// The cases the slow levels run (a VM or an instance per job takes seconds, so not all of
/// them): a sample of every kind, named so that a renamed case is noticed.
const SAMPLE: &[&str] = &[
    "false-fails",
    "exit-code-is-kept",
    "test-and-echo-last",
    "bang-true-last",
    "pipefail-first-fails",
    "set-e-off-false-last",
    "after-script-sees-failed",
    "gitlab-env-reaches-the-next-stage",
    "allow-failure-exit-code-listed",
    "variable-value-is-never-run",
    "predefined-shared-or-disposable",
    "predefined-job-url-names-the-job",
    "git-strategy-none-is-empty",
    "git-files-are-checked-out",
];

/// The sample of every kind the slow levels run, every case of it a POSIX `sh` runs (the
/// levels' images have no bash). Panics when a sampled name is no case any more.
pub fn sample() -> Vec<&'static Case> {
    SAMPLE
        .iter()
        .map(|name| {
            CASES
                .iter()
                .find(|c| c.name == *name && c.holds_in(false))
                .unwrap_or_else(|| panic!("the sample names {name}, no case that sh runs"))
        })
        .collect()
}

/// The pipeline's global variables the cases rely on. A GitLab job payload carries them among
/// the job's variables, before the job's own.
pub const GLOBAL_VARIABLES: &[(&str, &str)] = &[
    ("GLOBAL_ONLY", "from-global"),
    ("OVERRIDDEN", "from-global"),
];

/// The pipeline's top-level keys the cases rely on: `variables:` of [`GLOBAL_VARIABLES`].
pub fn header() -> String {
    let mut out = String::from("variables:\n");
    for (k, v) in GLOBAL_VARIABLES {
        out.push_str(&format!("  {k}: {}\n", yaml_string(v)));
    }
    out
}

/// A YAML double-quoted scalar (JSON's escapes, which YAML reads the same).
fn yaml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn yaml_list(out: &mut String, key: &str, items: &[&str]) {
    if items.is_empty() {
        return;
    }
    out.push_str(&format!("  {key}:\n"));
    for i in items {
        out.push_str(&format!("    - {}\n", yaml_string(i)));
    }
}

/// A `.gitlab-ci.yml` with one job per case, all in one stage, `header` (top-level keys:
/// `default:`, `variables:`) first.
pub fn pipeline_yaml<'c>(header: &str, cases: impl IntoIterator<Item = &'c Case>) -> String {
    let mut out = String::from(header);
    out.push_str("\nstages: [test]\n");
    for c in cases {
        out.push_str(&format!("\n# {}\n{}:\n  stage: test\n", c.source, c.name));
        yaml_list(&mut out, "before_script", c.before);
        yaml_list(&mut out, "script", c.script);
        yaml_list(&mut out, "after_script", c.after);
        for line in c.extra.lines().filter(|l| !l.trim().is_empty()) {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out
}

/// bash's ANSI-C quoting (`$'...'`), as GitLab Runner's `helpers.ShellEscape` quotes what its
/// scripts contain: every byte that is not a plain printable character as `\xNN`.
pub fn ansi_c_quote(s: &str) -> String {
    let mut out = String::from("$'");
    for &b in s.as_bytes() {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'\'' => out.push_str("\\'"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push('\'');
    out
}

/// The stage script GitLab Runner writes for a `script` step of `commands` with bash, as
/// `shells/bash.go` (`BashWriter.Finish`, `Noticef`, `Line`; 19.1 and later, where
/// `FF_USE_LEGACY_BASH_EVAL` is off by default) and `shells/abstract.go` (`writeUserScript`,
/// `writeCommands`) build it, less the variable exports and `cd` a real job has (the case's
/// commands run in the current directory): each command trimmed, echoed as `$ command` (or
/// `# collapsed multi-line command`) and written as it is; the body run by `eval` in a subshell
/// reading `/dev/null`, then `exit 0`. `FF_ENABLE_BASH_EXIT_CODE_CHECK` is off, as by default.
pub fn gitlab_bash_script(commands: &[&str]) -> String {
    let mut body = String::new();
    for c in commands {
        let c = c.trim();
        if c.is_empty() {
            body.push_str("echo\n");
        } else {
            let shown = match c.split_once('\n') {
                Some((first, _)) => format!("$ {first} # collapsed multi-line command"),
                None => format!("$ {c}"),
            };
            body.push_str(&format!("echo {}\n", ansi_c_quote(&shown)));
        }
        body.push_str(c);
        body.push('\n');
    }
    let mut s = String::from("trap 'exit 1' TERM\n\n");
    s.push_str("case \"$(set -o)\" in *\"pipefail\"*) set -o pipefail;; esac; set -o errexit\n");
    s.push_str("set +o noclobber\n");
    s.push_str(&format!(
        "(trap 'exit 1' TERM; eval {}) < /dev/null\n",
        ansi_c_quote(&body)
    ));
    s.push_str("exit 0\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn names_are_unique_and_plain() {
        let mut seen = BTreeSet::new();
        for c in CASES {
            assert!(seen.insert(c.name), "{} twice", c.name);
            assert!(
                c.name
                    .chars()
                    .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '-'),
                "{}",
                c.name
            );
            assert!(!c.source.is_empty(), "{} cites nothing", c.name);
        }
    }

    #[test]
    fn yaml_strings_escape_what_yaml_needs() {
        assert_eq!(yaml_string("a\"b\\c\nd"), r#""a\"b\\c\nd""#);
    }

    #[test]
    fn ansi_c_quoting_keeps_every_byte() {
        assert_eq!(ansi_c_quote("it's\n"), r"$'it\'s\n'");
        assert_eq!(ansi_c_quote("é"), r"$'\xc3\xa9'");
    }
}
