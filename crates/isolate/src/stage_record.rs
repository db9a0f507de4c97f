//! Stage records: which process groups a slot's stages run in, so that what a dead manager's
//! jobs left running can be found and stopped.
//!
//! A job's processes outlive a manager killed with `kill -9` (sshd does not signal a
//! session's processes when its connection drops, nor does the local connector's process
//! group die with its parent). So that the slot's next job does not share the slot with them,
//! each stage can first append its pid, process group and start time to its slot's record
//! file ([`recorded`]), and the next job's preparation kills every process group recorded
//! there ([`stomp_slot_command`]), the way GitLab's nesting stomps a VM slot before reusing
//! it. [`sweep_command`] does the same for every slot, sparing this process's own stages.
//! Both check the recorded start time, so a reused pid is never killed; and a group whose
//! leader is gone is stopped only in the processes that carry the stage's mark
//! ([`STAGE_MARK`]): pids wrap quickly (32,768 of them on many systems), and a group id can be
//! taken again by an unrelated group whose leader also exited, such as a daemon started from
//! a short-lived shell.

use flotilla_connect::shell::quote;

/// The variable every stage (and what it starts) carries, holding the owner written in its
/// record: how a stomp tells a stage's orphans from an unrelated group that took the same id.
pub const STAGE_MARK: &str = "FLOTILLA_STAGE";

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
/// names the group of everything the stage starts; the stage is marked with [`STAGE_MARK`].
/// Where there is no `/proc` (or the record cannot be written) nothing is recorded and the
/// stage runs all the same.
pub fn recorded(line: &str, record: &str, owner: &str) -> String {
    format!(
        "{{ read -r _flotilla_stat < /proc/$$/stat && set -- ${{_flotilla_stat##*\") \"}} && \
         printf '%s %s %s %s\\n' {owner} \"$$\" \"$3\" \"${{20}}\" >> {record}; }} 2>/dev/null; \
         {STAGE_MARK}={owner}; export {STAGE_MARK}; {line}",
        owner = quote(owner),
        record = quote(record),
    )
}

/// The shell function behind [`stomp_slot_command`] and [`sweep_command`]: `_flotilla_stomp FILE
/// SPARE` kills, with SIGKILL, the process group of every stage recorded in `FILE` except those
/// of owner `SPARE` (empty: spare none), and counts the groups it signalled in `$_flotilla_n`.
///
/// A recorded leader that is alive with another start time means the pid was reused, which
/// the kernel does only once no process is in the old group: that record is skipped. A live
/// leader with its start time has its whole group killed. A dead leader's group may still hold
/// what the stage started, or may be an unrelated group that took the id since: only its
/// members started no earlier than the stage and carrying the stage's [`STAGE_MARK`] are
/// killed. A stage that did not lead its own group has only its own process killed, and only
/// while its start time matches.
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
    if [ "$_flotilla_p" = "$_flotilla_g" ] && [ -n "$_flotilla_alive" ]; then
      kill -9 "-$_flotilla_g" 2>/dev/null && _flotilla_n=$((_flotilla_n + 1))
    elif [ "$_flotilla_p" = "$_flotilla_g" ]; then
      _flotilla_hit=
      for _flotilla_m in /proc/[0-9]*; do
        read -r _flotilla_s 2>/dev/null < "$_flotilla_m/stat" || continue
        set -- ${_flotilla_s##*") "}
        [ "$3" = "$_flotilla_g" ] && [ "${20}" -ge "$_flotilla_t" ] 2>/dev/null || continue
        tr '\0' '\n' < "$_flotilla_m/environ" 2>/dev/null | grep -qxF "FLOTILLA_STAGE=$_flotilla_o" || continue
        kill -9 "${_flotilla_m#/proc/}" 2>/dev/null && _flotilla_hit=1
      done
      [ -n "$_flotilla_hit" ] && _flotilla_n=$((_flotilla_n + 1))
    elif [ -n "$_flotilla_alive" ]; then
      kill -9 "$_flotilla_p" 2>/dev/null && _flotilla_n=$((_flotilla_n + 1))
    fi
  done < "$_flotilla_f"
  return 0
}
"#;

/// A helper command line (`sh -c` syntax, to run through [`crate::command::helper_command`]) that kills every
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

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

    /// The group id of a stage whose shell is gone may belong to an unrelated group by now
    /// (pids wrap): a daemon started by a shell that exited is such a group. It is spared; the
    /// stage's own orphans, marked, are not.
    #[test]
    fn a_dead_leaders_group_is_stopped_only_in_the_stages_own_processes() {
        for marked in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let record = dir.path().join("0.stages");
            let bg = dir.path().join("bg");
            let mark = if marked {
                format!("{STAGE_MARK}=dead-owner; export {STAGE_MARK}; ")
            } else {
                String::new()
            };
            // The leader starts a background process in its group and exits at once.
            let mut leader = spawn_leader(
                &["sh"],
                &format!(
                    "{mark}sleep 60 >/dev/null 2>&1 & echo $! > {}",
                    bg.display()
                ),
            );
            let group = leader.id();
            let member = read_pid(&bg);
            leader.wait().unwrap();
            assert!(alive(member));
            std::fs::write(&record, format!("dead-owner {group} {group} 1\n")).unwrap();
            let out = helper(&stomp_slot_command(record.to_str().unwrap()));
            if marked {
                assert_eq!(out.trim(), "1");
                wait_for("the stage's orphan to die", || !alive(member));
            } else {
                assert_eq!(out.trim(), "0", "an unmarked group is not the stage's");
                assert!(alive(member));
                let _ = Command::new("kill").arg(member.to_string()).status();
            }
        }
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
}
