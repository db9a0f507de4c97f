//! Running stage scripts and helper commands on an instance through its connector: the
//! helper context of every level, and both contexts of shell isolation.
//!
//! A stage script is piped on stdin to `bash` when the instance has it, else to `sh`. A helper
//! command runs under `sh -c`. Either way the process starts from a clean environment: only
//! [`KEPT_ENV`] survive from the connection's own environment (the manager's, for the local
//! connector), so nothing of the manager leaks into a job.
//!
//! Stage records: a job's processes outlive a manager killed with `kill -9` (sshd does not
//! signal a session's processes when its connection drops, nor does the local connector's
//! process group die with its parent). So that the slot's next job does not share the slot
//! with them, each stage can first append its pid, process group and start time to its
//! slot's record file ([`recorded`]), and the next job's preparation kills every process group
//! recorded there ([`stomp_slot_command`]), the way GitLab's nesting stomps a VM slot before
//! reusing it. [`sweep_command`] does the same for every slot, sparing this process's own
//! stages. Both check the recorded start time, so a reused pid is never killed.

use flotilla_connect::local::CLEAN_ENV_MARKER;
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

/// A compound command (`sh` syntax) that `exec`s `program` (with its arguments, quoted) in a
/// clean environment: with `env -i`, keeping the [`KEPT_ENV`] variables that are set; or, if
/// the connector already started the line in such an environment (it says so with
/// [`CLEAN_ENV_MARKER`], as [`flotilla_connect::local::LocalConnector::with_clean_env`]
/// does), directly, without the `env` process.
fn exec_clean(program: &str) -> String {
    format!(
        "if {}; then unset {CLEAN_ENV_MARKER}; exec {program}; else {} {program}; fi",
        marked_clean(),
        exec_env_i()
    )
}

/// The test (`sh` syntax) for an environment the connector marked clean.
fn marked_clean() -> String {
    format!("[ \"${{{CLEAN_ENV_MARKER}-}}\" = 1 ]")
}

/// `exec env -i` keeping the [`KEPT_ENV`] variables that are set (a program follows).
fn exec_env_i() -> String {
    let mut env = String::from("exec env -i");
    for k in KEPT_ENV {
        env.push_str(&format!(" ${{{k}+\"{k}=${k}\"}}"));
    }
    env
}

/// The command line that starts a stage's shell (the script goes to its stdin): the shell
/// that runs the line picks bash or sh itself and `exec`s it in a clean environment, so a
/// stage costs no intermediate `sh` (one process fewer per stage: see the `run_throughput`
/// bench, where the instances' CPU is what bounds jobs per second).
///
/// When the line already runs in bash in a clean environment ([`CLEAN_ENV_MARKER`]: the
/// local connector), that bash runs the script itself, sourcing it from stdin: no process at
/// all, and the script is read in large chunks instead of a byte at a time (as bash must read
/// a script it runs from a pipe). Scripts behave the same but for a top-level `return`,
/// which ends the stage with its status there instead of failing.
pub fn script_command() -> String {
    format!(
        "if {} && [ -n \"${{BASH_VERSION-}}\" ] && [ -r /dev/stdin ]; then \
         unset {CLEAN_ENV_MARKER} _flotilla_stat; set --; . /dev/stdin; exit; fi; \
         if command -v bash >/dev/null 2>&1; then {}; else {}; fi",
        marked_clean(),
        exec_clean("bash"),
        exec_clean("sh")
    )
}

/// The command line that runs a helper command (`sh -c` syntax) in a clean environment: in
/// the shell that runs the line when its environment is already clean ([`CLEAN_ENV_MARKER`]),
/// else in a new `sh`.
pub fn helper_command(line: &str) -> String {
    let line = quote(line);
    format!(
        "if {}; then unset {CLEAN_ENV_MARKER} _flotilla_stat; set --; eval \" \"{line}; \
         else {} sh -c {line}; fi",
        marked_clean(),
        exec_env_i()
    )
}

/// The owner written into this process's stage records: unique per manager process, so a
/// sweep can tell its own stages from those a dead manager left.
pub fn process_owner() -> &'static str {
    static OWNER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    OWNER.get_or_init(|| format!("{}-{}", std::process::id(), uuid::Uuid::new_v4().simple()))
}

/// `line` (a command line in `sh -c` syntax that `exec`s the stage) preceded by appending
/// `<owner> <pid> <process group> <start time>` of the stage's shell to `record`, read from
/// `/proc/$$/stat` (fields 5 and 22). The shell keeps its pid through the `exec`s that
/// follow, and both connectors start it as the leader of its own process group, so the record
/// names the group of everything the stage starts. Where there is no `/proc` (or the record
/// cannot be written) nothing is recorded and the stage runs all the same.
pub fn recorded(line: &str, record: &str, owner: &str) -> String {
    format!(
        "{{ read -r _flotilla_stat < /proc/$$/stat && set -- ${{_flotilla_stat##*\") \"}} && \
         printf '%s %s %s %s\\n' {owner} \"$$\" \"$3\" \"${{20}}\" >> {record}; }} 2>/dev/null; {line}",
        owner = quote(owner),
        record = quote(record),
    )
}

/// The shell function behind [`stomp_slot_command`] and [`sweep_command`]: `_flotilla_stomp FILE
/// SPARE` kills, with SIGKILL, the process group of every stage recorded in `FILE` except those
/// of owner `SPARE` (empty: spare none), and counts the groups it signalled in `$_flotilla_n`.
///
/// A recorded leader that is alive with another start time means the pid was reused, which
/// the kernel does only once no process is in the old group: that record is skipped. A dead
/// leader's group may still hold what the stage started, so it is killed. A stage that did not
/// lead its own group has only its own process killed, and only while its start time matches.
const STOMP_FUNCTION: &str = r#"_flotilla_n=0
_flotilla_stomp() {
  _flotilla_f=$1; _flotilla_spare=$2
  [ -f "$_flotilla_f" ] || return 0
  while read -r _flotilla_o _flotilla_p _flotilla_g _flotilla_t; do
    case "$_flotilla_p:$_flotilla_g:$_flotilla_t" in *[!0-9:]*|:*|*::*|*:) continue;; esac
    [ -n "$_flotilla_spare" ] && [ "$_flotilla_o" = "$_flotilla_spare" ] && continue
    _flotilla_alive=
    if [ -r "/proc/$_flotilla_p/stat" ] && read -r _flotilla_s 2>/dev/null < "/proc/$_flotilla_p/stat"; then
      set -- ${_flotilla_s##*") "}
      [ "${20}" = "$_flotilla_t" ] || continue
      _flotilla_alive=1
    fi
    if [ "$_flotilla_p" = "$_flotilla_g" ]; then
      kill -9 "-$_flotilla_g" 2>/dev/null && _flotilla_n=$((_flotilla_n + 1))
    elif [ -n "$_flotilla_alive" ]; then
      kill -9 "$_flotilla_p" 2>/dev/null && _flotilla_n=$((_flotilla_n + 1))
    fi
  done < "$_flotilla_f"
  return 0
}
"#;

/// A helper command line (`sh -c` syntax, to run through [`helper_command`]) that kills every
/// process group recorded in the slot's `record` file (see [`recorded`]), empties the record
/// (creating its directory if needed) and prints how many groups it signalled. Run it when a
/// job is done with the slot and before the next one uses it, unless nothing can have run
/// there since: whatever an earlier job left running, it stops first.
pub fn stomp_slot_command(record: &str) -> String {
    let dir = match record.rsplit_once('/') {
        Some(("", _)) => "/".to_string(),
        Some((dir, _)) => dir.to_string(),
        None => ".".to_string(),
    };
    format!(
        "{STOMP_FUNCTION}_flotilla_stomp {record} ''\n[ -d {dir} ] || mkdir -p {dir} 2>/dev/null; : > {record} 2>/dev/null\necho \"$_flotilla_n\"\n",
        record = quote(record),
        dir = quote(&dir),
    )
}

/// A helper command line that kills the process groups recorded in every `*.stages` record in
/// `records_dir`, except those recorded by `spare_owner` (this process: see
/// [`process_owner`]), and prints how many it signalled. The records stay: the next job of
/// each slot empties its own.
pub fn sweep_command(records_dir: &str, spare_owner: &str) -> String {
    format!(
        "{STOMP_FUNCTION}for _flotilla_r in {dir}/*.stages; do _flotilla_stomp \"$_flotilla_r\" {spare}; done\necho \"$_flotilla_n\"\n",
        dir = quote(records_dir),
        spare = quote(spare_owner),
    )
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
    fn an_environment_marked_clean_is_kept_without_the_marker() {
        let path = std::env::var("PATH").unwrap();
        for line in [script_command(), helper_command("env | sort")] {
            let out = sh(
                &line,
                &[
                    ("PATH", &path),
                    ("KEPT_BY_THE_CONNECTOR", "yes"),
                    (CLEAN_ENV_MARKER, "1"),
                ],
                "env | sort\n",
            );
            assert!(out.contains("KEPT_BY_THE_CONNECTOR=yes\n"), "{out}");
            assert!(!out.contains(CLEAN_ENV_MARKER), "{out}");
        }
        // Any other value of the marker is no promise: the environment is cleared.
        let out = sh(
            &script_command(),
            &[
                ("PATH", &path),
                ("MANAGER_TOKEN", "x"),
                (CLEAN_ENV_MARKER, "yes"),
            ],
            "env | sort\n",
        );
        assert!(
            !out.contains("MANAGER_TOKEN") && !out.contains(CLEAN_ENV_MARKER),
            "{out}"
        );
    }

    #[tokio::test]
    async fn the_local_connector_with_a_clean_env_gives_only_the_kept_variables() {
        use flotilla_connect::local::LocalConnector;
        use flotilla_connect::{Connector, ExecRequest};
        // SAFETY: set before any command of this test starts; other tests of this binary
        // do not read it.
        unsafe { std::env::set_var("FLOTILLA_TEST_MANAGER_SECRET", "glrt-manager") };
        let c = LocalConnector::new().with_clean_env(&KEPT_ENV);
        for (line, stdin) in [(helper_command("env"), ""), (script_command(), "env\n")] {
            let mut out = Vec::new();
            let status = c
                .exec(
                    ExecRequest::new(line)
                        .stdin_bytes(stdin.as_bytes().to_vec())
                        .stdout(&mut out),
                )
                .await
                .unwrap();
            let env = String::from_utf8(out).unwrap();
            assert!(status.success(), "{env}");
            assert!(env.contains("PATH="), "{env}");
            assert!(!env.contains("FLOTILLA_TEST_MANAGER_SECRET"), "{env}");
            assert!(!env.contains(CLEAN_ENV_MARKER), "{env}");
        }
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

    /// Shells the stage records must work under (busybox's ash where it exists).
    fn shells() -> Vec<Vec<&'static str>> {
        let mut v = vec![vec!["sh"], vec!["bash"]];
        if std::path::Path::new("/usr/bin/busybox").exists() {
            v.push(vec!["/usr/bin/busybox", "sh"]);
        }
        v
    }

    /// Runs `line` under `shell -c` as the leader of its own process group, as both
    /// connectors start a stage.
    fn spawn_leader(shell: &[&str], line: &str) -> std::process::Child {
        use std::os::unix::process::CommandExt;
        Command::new(shell[0])
            .args(&shell[1..])
            .arg("-c")
            .arg(line)
            .process_group(0)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    }

    /// Runs a helper line under `sh -c` and returns what it printed.
    fn helper(line: &str) -> String {
        let out = Command::new("sh").arg("-c").arg(line).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// Whether `pid` runs (a zombie does not count).
    fn alive(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => stat
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
            Err(_) => false,
        }
    }

    fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
        for _ in 0..200 {
            if cond() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("timed out waiting for {what}");
    }

    fn read_pid(path: &std::path::Path) -> u32 {
        let mut pid = 0;
        wait_for("the pid file", || {
            pid = std::fs::read_to_string(path)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            pid != 0
        });
        pid
    }

    #[test]
    fn a_stomp_kills_the_recorded_stage_and_everything_it_started() {
        for shell in shells() {
            let dir = tempfile::tempdir().unwrap();
            let record = dir.path().join("records").join("0.stages");
            let record = record.to_str().unwrap();
            // The slot's first prepare creates the record's directory.
            assert_eq!(helper(&stomp_slot_command(record)).trim(), "0");
            let bg = dir.path().join("bg");
            // A stage that put something in the background and is still running: what a job
            // of a manager killed with `kill -9` leaves behind.
            let stage = format!(
                "exec sh -c 'sleep 60 >/dev/null 2>&1 & echo $! > {}; exec sleep 60'",
                bg.display()
            );
            let mut child = spawn_leader(&shell, &recorded(&stage, record, "dead-owner"));
            let bg_pid = read_pid(&bg);
            let line = std::fs::read_to_string(record).unwrap();
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(fields.len(), 4, "{shell:?}: {line:?}");
            assert_eq!(fields[0], "dead-owner");
            assert_eq!(
                fields[1],
                child.id().to_string(),
                "{shell:?}: the stage's pid"
            );
            assert_eq!(
                fields[2],
                child.id().to_string(),
                "{shell:?}: it leads its group"
            );
            assert!(alive(bg_pid));

            assert_eq!(helper(&stomp_slot_command(record)).trim(), "1", "{shell:?}");
            let status = child.wait().unwrap();
            assert!(!status.success(), "{shell:?}: killed, not finished");
            wait_for("the background process to die", || !alive(bg_pid));
            assert_eq!(
                std::fs::read_to_string(record).unwrap(),
                "",
                "{shell:?}: the record is emptied for the slot's new job"
            );
            // Nothing is left to stop the second time.
            assert_eq!(helper(&stomp_slot_command(record)).trim(), "0");
        }
    }

    #[test]
    fn a_stomp_spares_reused_pids_and_groups_it_did_not_record() {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("0.stages");
        let record_s = record.to_str().unwrap();
        // A process that leads its group but is not the recorded stage: same pid, another
        // start time (the pid was reused).
        let mut other = spawn_leader(&["sh"], "exec sleep 60");
        let pid = other.id();
        std::fs::write(&record, format!("dead-owner {pid} {pid} 1\n")).unwrap();
        assert_eq!(helper(&stomp_slot_command(record_s)).trim(), "0");
        assert!(alive(pid), "a reused pid is never killed");

        // A stage that did not lead its own group: only its own process is stopped.
        let pids = dir.path().join("member");
        let mut sandbox = spawn_leader(
            &["sh"],
            &format!(
                "sleep 60 >/dev/null 2>&1 & echo $! > {}; wait",
                pids.display()
            ),
        );
        let member = read_pid(&pids);
        let stat = std::fs::read_to_string(format!("/proc/{member}/stat")).unwrap();
        let after: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
        let (pgrp, start) = (after[2], after[19]);
        assert_eq!(pgrp, sandbox.id().to_string());
        std::fs::write(
            &record,
            format!("dead-owner {member} {pgrp} {start}\ngarbage line\n"),
        )
        .unwrap();
        assert_eq!(helper(&stomp_slot_command(record_s)).trim(), "1");
        wait_for("the member to die", || !alive(member));
        assert!(sandbox.wait().is_ok());
        assert!(alive(pid));
        other.kill().unwrap();
        other.wait().unwrap();
    }

    #[test]
    fn a_sweep_spares_this_process_and_keeps_the_records() {
        let dir = tempfile::tempdir().unwrap();
        let records = dir.path().join(".flotilla");
        std::fs::create_dir_all(&records).unwrap();
        let mine_rec = records.join("0.stages");
        let theirs_rec = records.join("1.stages");
        let mut mine = spawn_leader(
            &["sh"],
            &recorded("exec sleep 60", mine_rec.to_str().unwrap(), process_owner()),
        );
        let mut theirs = spawn_leader(
            &["bash"],
            &recorded("exec sleep 60", theirs_rec.to_str().unwrap(), "1-dead"),
        );
        wait_for("both records", || {
            [&mine_rec, &theirs_rec]
                .iter()
                .all(|r| std::fs::read_to_string(r).is_ok_and(|s| s.ends_with('\n')))
        });
        let out = helper(&sweep_command(records.to_str().unwrap(), process_owner()));
        assert_eq!(out.trim(), "1");
        assert!(!theirs.wait().unwrap().success());
        assert!(alive(mine.id()), "this process's own stage runs on");
        assert!(!std::fs::read_to_string(&theirs_rec).unwrap().is_empty());
        // A directory without records sweeps nothing.
        let empty = dir.path().join("none");
        assert_eq!(
            helper(&sweep_command(empty.to_str().unwrap(), "x")).trim(),
            "0"
        );
        mine.kill().unwrap();
        mine.wait().unwrap();
    }

    #[test]
    fn owners_differ_per_process_but_not_per_call() {
        assert_eq!(process_owner(), process_owner());
        assert!(process_owner().starts_with(&format!("{}-", std::process::id())));
        assert!(!process_owner().contains(char::is_whitespace));
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
