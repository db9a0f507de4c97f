//! Commands whose process group is recorded in a file, for connectors whose transport cannot
//! signal the command itself (Docker exec, Kubernetes exec): the command runs under
//! [`WRAPPER`], and cancelling it runs [`KILLER`] on a second exec.
//!
//! Both are `sh -c` scripts taking the pid file as `$0`. The killer writes `kill -KILL -PID`,
//! not `kill -KILL -- -PID`: Debian's dash reads the `--` as the end of the signal and refuses
//! `-PID` ("Illegal number"), and only the wrapper would die, the command running on.

/// Runs the command (`$1`) in its own shell after recording that shell's pid in `$0`; removes
/// the record when the command ends and exits with its status.
pub const WRAPPER: &str = r#"echo $$ >"$0"; sh -c "$1"; s=$?; rm -f "$0"; exit $s"#;

/// Kills the process group recorded in `$0` (waiting up to 2 s for the record to be written),
/// then removes the record. Exits quietly when there is nothing to kill.
pub const KILLER: &str = r#"i=0; while [ ! -s "$0" ] && [ $i -lt 20 ]; do sleep 0.1; i=$((i+1)); done
p=$(cat "$0" 2>/dev/null) || exit 0
kill -KILL -"$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null
rm -f "$0""#;

/// A fresh pid file path under `/tmp` (`kind` names what it records, e.g. `exec`).
pub fn pid_file(kind: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    format!("/tmp/.flotilla-{kind}-{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn wrapper_and_killer_work_in_a_real_shell() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let pid_file = pid_file.to_str().unwrap();
        let out = Command::new("sh")
            .args(["-c", WRAPPER, pid_file, "echo hi; exit 7"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(7));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
        assert!(!std::path::Path::new(pid_file).exists(), "cleaned up");
        // The killer exits quietly when there is nothing to kill.
        let out = Command::new("sh")
            .args(["-c", KILLER, "/nonexistent/pid"])
            .output()
            .unwrap();
        assert!(out.status.success());
    }

    #[test]
    fn pid_files_differ() {
        assert_ne!(pid_file("exec"), pid_file("exec"));
        assert!(pid_file("stage").starts_with("/tmp/.flotilla-stage-"));
    }
}
