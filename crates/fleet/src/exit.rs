//! How a command run on an instance ended: the one exit status that connectors report and
//! the job engine counts.

use std::fmt;

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ExitStatus {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal {
        /// The signal's name without `SIG` (`TERM`, `KILL`, `SEGV`), as SSH reports it
        /// (RFC 4254 §6.10); a signal with no name is its number.
        name: String,
        /// Whether it dumped core.
        core_dumped: bool,
    },
}

/// Signal names by number, as Linux numbers them (x86 and arm). Names are what travels: SSH
/// reports a remote signal by name, because numbers differ between systems; numbers are only
/// needed to say what a shell would report (`128 + n`) and to name a local process's signal.
const LINUX_SIGNALS: [&str; 31] = [
    "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2",
    "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "URG",
    "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS",
];

/// The name (`TERM`) of a signal number, as Linux numbers signals; a number without a name
/// is written as the number.
pub fn signal_name(number: i32) -> String {
    usize::try_from(number)
        .ok()
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| LINUX_SIGNALS.get(i))
        .map_or_else(|| number.to_string(), |name| (*name).to_string())
}

/// The number of a signal by its name (`TERM`, also `SIGTERM` or a number), as Linux numbers
/// signals; `None` for a name it does not know.
pub fn signal_number(name: &str) -> Option<i32> {
    let name = name.strip_prefix("SIG").unwrap_or(name);
    if let Ok(n) = name.parse::<i32>() {
        return (n > 0).then_some(n);
    }
    let i = LINUX_SIGNALS.iter().position(|s| *s == name)?;
    i32::try_from(i + 1).ok()
}

impl ExitStatus {
    /// A status from a signal number (a local process).
    pub fn from_signal_number(signal: i32, core_dumped: bool) -> Self {
        ExitStatus::Signal {
            name: signal_name(signal),
            core_dumped,
        }
    }

    /// Whether it exited with code 0.
    pub fn success(&self) -> bool {
        matches!(self, ExitStatus::Code(0))
    }

    /// The exit code, if it exited rather than being killed.
    pub fn code(&self) -> Option<i32> {
        match self {
            ExitStatus::Code(c) => Some(*c),
            ExitStatus::Signal { .. } => None,
        }
    }

    /// The name of the signal that killed it, if one did.
    pub fn signal(&self) -> Option<&str> {
        match self {
            ExitStatus::Code(_) => None,
            ExitStatus::Signal { name, .. } => Some(name),
        }
    }

    /// What a shell reports for it: the exit code, or `128 + n` for signal `n`. `None` for
    /// a signal whose number is not known (an SSH extension signal, say): no number is made
    /// up for it.
    pub fn shell_code(&self) -> Option<i32> {
        match self {
            ExitStatus::Code(c) => Some(*c),
            ExitStatus::Signal { name, .. } => signal_number(name).map(|n| 128 + n),
        }
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Code(c) => write!(f, "exit code {c}"),
            ExitStatus::Signal { name, core_dumped } => {
                write!(f, "killed by signal {name}")?;
                if *core_dumped {
                    f.write_str(" (core dumped)")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_round_trip() {
        for n in 1..=31 {
            assert_eq!(signal_number(&signal_name(n)), Some(n), "{n}");
        }
        assert_eq!(signal_name(15), "TERM");
        assert_eq!(signal_name(9), "KILL");
        assert_eq!(signal_name(40), "40");
        assert_eq!(signal_number("40"), Some(40));
        assert_eq!(signal_number("SIGSEGV"), Some(11));
        assert_eq!(signal_number("SIG@openssh.com"), None);
        assert_eq!(signal_number("0"), None);
    }

    #[test]
    fn a_shell_reports_128_plus_the_signal_and_nothing_is_made_up() {
        assert_eq!(ExitStatus::Code(7).shell_code(), Some(7));
        assert_eq!(
            ExitStatus::from_signal_number(15, false).shell_code(),
            Some(143)
        );
        let unnamed = ExitStatus::Signal {
            name: "WEIRD@example.org".into(),
            core_dumped: false,
        };
        assert_eq!(unnamed.shell_code(), None);
        assert_eq!(unnamed.to_string(), "killed by signal WEIRD@example.org");
        assert!(!unnamed.success());
    }

    #[test]
    fn statuses_read_as_a_person_would_say_them() {
        assert_eq!(ExitStatus::Code(3).to_string(), "exit code 3");
        assert_eq!(
            ExitStatus::from_signal_number(11, true).to_string(),
            "killed by signal SEGV (core dumped)"
        );
    }
}
