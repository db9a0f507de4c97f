//! The helper commands that make, limit, join, stomp and inspect a slot's cgroup on an
//! instance (pure: they are strings, run by the caller through the instance's connector).
//!
//! One script serves cgroup v1 and v2: it looks for `cgroup.controllers` at the cgroup root
//! (present only on a v2 hierarchy) and says which it found, so the stage lines that follow
//! can be written for that version. On v1 the slot has a cgroup in each of the `cpu`,
//! `memory` and `pids` hierarchies; on v2 one cgroup, with those controllers enabled from the
//! root down. Only root (or a user the cgroups are delegated to) can do this; the scripts
//! say plainly what they could not do.

use super::limits::SlotLimits;
use flotilla_connect::shell::quote;

/// The v1 hierarchies a slot has a cgroup in.
const V1_HIERARCHIES: [&str; 3] = ["cpu", "memory", "pids"];

/// The CPU period limits are written against, in microseconds (the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;

/// Which cgroup interface an instance has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// Separate hierarchies per controller (`/sys/fs/cgroup/<controller>/...`).
    V1,
    /// The unified hierarchy (`/sys/fs/cgroup/...`).
    V2,
}

/// Shell functions shared by the scripts: `_fl_kill FILE` kills, with SIGKILL, every process
/// listed in a `cgroup.procs` file until it is empty (a process may fork while it is being
/// killed, so it goes round a few times) and adds how many it killed to `$_fl_n` (each process
/// once, though v1 lists it in every hierarchy). The file is
/// read, never tested with `-s`: cgroup files report a size of zero.
// `_fl_procs` reads a `cgroup.procs` with the shell's own `read`: these scripts run before
// and after every job, and each `$(cat ...)` would cost a fork.
const KILL_FUNCTION: &str = r#"_fl_n=0
_fl_seen=' '
_fl_procs() {
  _fl_ps=
  { while read -r _fl_x; do _fl_ps="$_fl_ps $_fl_x"; done < "$1"; } 2>/dev/null
  _fl_ps=${_fl_ps# }
}
_fl_kill() {
  _fl_i=0
  _fl_procs "$1"
  while [ -n "$_fl_ps" ] && [ "$_fl_i" -lt 100 ]; do
    for _fl_p in $_fl_ps; do
      kill -9 "$_fl_p" 2>/dev/null || continue
      case "$_fl_seen" in
        *" $_fl_p "*) ;;
        *) _fl_n=$((_fl_n + 1)); _fl_seen="$_fl_seen$_fl_p " ;;
      esac
    done
    _fl_i=$((_fl_i + 1))
    _fl_procs "$1"
    [ -n "$_fl_ps" ] && sleep 0.02 2>/dev/null
  done
  return 0
}
"#;

/// Where a slot's cgroup is: a cgroup root (normally `/sys/fs/cgroup`) and a path below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotCgroup {
    /// The cgroup root on the instance, absolute.
    pub root: String,
    /// The slot's path below the root, relative, without `..`.
    pub path: String,
}

impl SlotCgroup {
    /// The cgroup directory of `hierarchy` (v1) or the unified one (v2).
    fn dir(&self, version: CgroupVersion, hierarchy: &str) -> String {
        match version {
            CgroupVersion::V1 => format!("{}/{hierarchy}/{}", self.root, self.path),
            CgroupVersion::V2 => format!("{}/{}", self.root, self.path),
        }
    }

    /// The directories to act on for `version`.
    fn dirs(&self, version: CgroupVersion) -> Vec<String> {
        match version {
            CgroupVersion::V1 => V1_HIERARCHIES
                .iter()
                .map(|h| self.dir(version, h))
                .collect(),
            CgroupVersion::V2 => vec![self.dir(version, "")],
        }
    }

    /// The helper command that readies the slot's cgroup for a new job: made where it is
    /// missing (v2: with the controllers the limits need enabled on the way down), emptied of
    /// whatever an earlier job left running (it prints `stopped N`), made anew so its
    /// counters start at zero, limited to `limits`, and checked by moving a process into it.
    /// Its last line is `cgroup v1` or `cgroup v2`; on failure it says why on stderr and
    /// exits non-zero.
    pub fn prepare_command(&self, limits: &SlotLimits) -> String {
        let mut s = String::from("set -u\n");
        s.push_str(KILL_FUNCTION);
        s.push_str(&format!(
            "_fl_root={root}\n_fl_path={path}\n\
             _fl_fail() {{ echo \"flotilla: $*\" >&2; exit 3; }}\n\
             if [ ! -d \"$_fl_root\" ]; then _fl_fail \"no cgroup file system at $_fl_root\"; fi\n",
            root = quote(&self.root),
            path = quote(&self.path),
        ));
        // v2
        let v2 = self.dir(CgroupVersion::V2, "");
        let wanted = v2_controllers(limits).join(" ");
        s.push_str(&format!(
            "if [ -f \"$_fl_root/cgroup.controllers\" ]; then\n\
             _fl_v=2\n\
             _fl_cur=\"$_fl_root\"\n\
             for _fl_c in $(echo \"$_fl_path\" | tr / ' '); do\n\
             \x20 for _fl_w in {wanted}; do\n\
             \x20   grep -qw \"$_fl_w\" \"$_fl_cur/cgroup.controllers\" || _fl_fail \"the $_fl_w controller is not available in $_fl_cur (cgroup.controllers: $(cat \"$_fl_cur/cgroup.controllers\"))\"\n\
             \x20   grep -qw \"$_fl_w\" \"$_fl_cur/cgroup.subtree_control\" || echo \"+$_fl_w\" > \"$_fl_cur/cgroup.subtree_control\" 2>/dev/null || _fl_fail \"cannot enable the $_fl_w controller below $_fl_cur: a cgroup v2 may only pass controllers on while it holds no processes, and only root or the cgroup's delegate may write there\"\n\
             \x20 done\n\
             \x20 _fl_cur=\"$_fl_cur/$_fl_c\"\n\
             \x20 [ -d \"$_fl_cur\" ] || mkdir -p \"$_fl_cur\" 2>/dev/null || _fl_fail \"cannot create the cgroup $_fl_cur: $(mkdir -p \"$_fl_cur\" 2>&1)\"\n\
             done\n\
             {stomp_v2}\
             {limits_v2}\
             _fl_join={join_v2}\n\
             else\n\
             _fl_v=1\n",
            wanted = wanted,
            stomp_v2 = stomp_and_renew(std::slice::from_ref(&v2)),
            limits_v2 = v2_limits(&v2, limits),
            join_v2 = quote(&format!("{v2}/cgroup.procs")),
        ));
        // v1
        let dirs = self.dirs(CgroupVersion::V1);
        for (h, d) in V1_HIERARCHIES.iter().zip(&dirs) {
            s.push_str(&format!(
                "[ -d {base} ] || _fl_fail \"the {h} hierarchy is not mounted at {base}\"\n\
                 [ -d {d} ] || mkdir -p {d} 2>/dev/null || _fl_fail \"cannot create the cgroup {d}: $(mkdir -p {d} 2>&1)\"\n",
                base = quote(&format!("{}/{h}", self.root)),
                d = quote(d),
            ));
        }
        s.push_str(&stomp_and_renew(&dirs));
        s.push_str(&v1_limits(self, limits));
        s.push_str(&format!(
            "_fl_join={}\nfi\n",
            quote(
                &dirs
                    .iter()
                    .map(|d| format!("{d}/cgroup.procs"))
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        ));
        // One process tries every hierarchy (it exits at the first it cannot join, naming it).
        s.push_str(
            "_fl_bad=$(sh -c 'for f; do echo $$ 2>/dev/null > \"$f\" || { echo \"$f\"; exit 1; }; done' _ $_fl_join) \
             || _fl_fail \"cannot move a process into $_fl_bad\"\n\
             echo \"stopped $_fl_n\"\n\
             echo \"cgroup v$_fl_v\"\n",
        );
        s
    }

    /// `line` preceded by moving the shell that runs it into the slot's cgroup, so the stage
    /// and everything it starts are limited. A stage that cannot join does not run: it exits
    /// with 125 and says why.
    pub fn joined(&self, version: CgroupVersion, line: &str) -> String {
        let mut join = String::new();
        for d in self.dirs(version) {
            let f = quote(&format!("{d}/cgroup.procs"));
            join.push_str(&format!(
                "echo $$ > {f} || {{ echo \"flotilla: cannot join the slot's cgroup\" {f} >&2; exit 125; }}; "
            ));
        }
        format!("{join}{line}")
    }

    /// The helper command that kills everything in the slot's cgroup and removes it; its last
    /// line is how many processes it killed.
    pub fn kill_command(&self, version: CgroupVersion) -> String {
        let dirs = self.dirs(version);
        let mut s = String::from(KILL_FUNCTION);
        s.push_str(&kill_all(&dirs));
        let all = dirs.iter().map(|d| quote(d)).collect::<Vec<_>>().join(" ");
        s.push_str(&format!("rmdir {all} 2>/dev/null\n"));
        s.push_str("echo \"$_fl_n\"\n");
        s
    }

    /// The helper command that prints the limit events of the slot's cgroup as
    /// `oom_kill N` and `pids_max N` lines (see [`LimitEvents::parse`]).
    pub fn events_command(&self, version: CgroupVersion) -> String {
        match version {
            CgroupVersion::V2 => {
                let d = self.dir(version, "");
                format!(
                    "grep -h '^oom_kill ' {m} 2>/dev/null; sed -n 's/^max /pids_max /p' {p} 2>/dev/null; true\n",
                    m = quote(&format!("{d}/memory.events")),
                    p = quote(&format!("{d}/pids.events")),
                )
            }
            CgroupVersion::V1 => format!(
                "grep -h '^oom_kill ' {m} 2>/dev/null; sed -n 's/^max /pids_max /p' {p} 2>/dev/null; true\n",
                m = quote(&format!(
                    "{}/memory.oom_control",
                    self.dir(version, "memory")
                )),
                p = quote(&format!("{}/pids.events", self.dir(version, "pids"))),
            ),
        }
    }
}

/// The helper command that kills everything in the slot cgroups matching `template` (its
/// `${slot}` replaced by `*`) under `root`, in either version, and removes them; its last
/// line is how many processes it killed. Run it when an instance is met for the first time, before any job of this
/// process runs there: whatever is in a slot cgroup then was left by someone else.
pub fn sweep_command(root: &str, glob: &str) -> String {
    let mut s = String::from(KILL_FUNCTION);
    s.push_str(&format!(
        "_fl_root={root}\n\
         if [ -f \"$_fl_root/cgroup.controllers\" ]; then _fl_bases=\"$_fl_root\"; else _fl_bases=\"{v1}\"; fi\n\
         for _fl_b in $_fl_bases; do\n\
         \x20 for _fl_d in \"$_fl_b\"/{glob}; do\n\
         \x20   [ -f \"$_fl_d/cgroup.procs\" ] || continue\n\
         \x20   [ -e \"$_fl_d/cgroup.kill\" ] && echo 1 > \"$_fl_d/cgroup.kill\" 2>/dev/null\n\
         \x20   _fl_kill \"$_fl_d/cgroup.procs\"\n\
         \x20   rmdir \"$_fl_d\" 2>/dev/null\n\
         \x20 done\n\
         done\n\
         echo \"$_fl_n\"\n",
        root = quote(root),
        v1 = V1_HIERARCHIES
            .iter()
            .map(|h| format!("$_fl_root/{h}"))
            .collect::<Vec<_>>()
            .join(" "),
    ));
    s
}

/// Kills what is in `dirs` (v2's `cgroup.kill` first where the kernel has it).
fn kill_all(dirs: &[String]) -> String {
    let mut s = String::new();
    for d in dirs {
        let d = quote(d);
        s.push_str(&format!(
            "if [ -d {d} ]; then [ -e {d}/cgroup.kill ] && echo 1 > {d}/cgroup.kill 2>/dev/null; _fl_kill {d}/cgroup.procs; fi\n"
        ));
    }
    s
}

/// Kills what is in `dirs`, then removes and makes them again, so that their event counters
/// start at zero for the new job (a cgroup that cannot be removed, because it has children,
/// is kept).
fn stomp_and_renew(dirs: &[String]) -> String {
    let mut s = kill_all(dirs);
    // One `rmdir` and one `mkdir` for all of them: a fork less per hierarchy.
    let all = dirs.iter().map(|d| quote(d)).collect::<Vec<_>>().join(" ");
    s.push_str(&format!("rmdir {all} 2>/dev/null; mkdir -p {all}\n"));
    s
}

/// The controllers a v2 slot cgroup needs for `limits`. `pids` is always wanted where it
/// exists; it is what makes a fork bomb harmless, and it is cheap.
fn v2_controllers(limits: &SlotLimits) -> Vec<&'static str> {
    let mut c = Vec::new();
    if limits.cpu_millis.is_some() {
        c.push("cpu");
    }
    if limits.memory_bytes.is_some() {
        c.push("memory");
    }
    if limits.pids.is_some() {
        c.push("pids");
    }
    c
}

fn write(file: &str, value: &str) -> String {
    let file = quote(file);
    format!(
        "echo {value} > {file} 2>/dev/null || _fl_fail \"cannot write {value} to {file}\"\n",
        value = quote(value),
    )
}

/// Writes `value` to `file` when the job has a limit there; otherwise puts back the
/// kernel's "no limit" where the file exists (a cgroup kept from an earlier job, because it
/// had children, may still hold that job's limit).
fn limit(file: &str, value: Option<String>, unlimited: &str) -> String {
    match value {
        Some(v) => write(file, &v),
        None => format!(
            "[ -e {f} ] && echo {u} > {f} 2>/dev/null\n",
            f = quote(file),
            u = quote(unlimited)
        ),
    }
}

fn v2_limits(dir: &str, limits: &SlotLimits) -> String {
    let mut s = String::new();
    s.push_str(&limit(
        &format!("{dir}/cpu.max"),
        limits
            .cpu_millis
            .map(|m| format!("{} {CPU_PERIOD_US}", m * CPU_PERIOD_US / 1000)),
        &format!("max {CPU_PERIOD_US}"),
    ));
    s.push_str(&limit(
        &format!("{dir}/memory.max"),
        limits.memory_bytes.map(|b| b.to_string()),
        "max",
    ));
    // Swap would let a job use more than its limit: none while a limit is set, where the
    // kernel offers swap accounting.
    s.push_str(&format!(
        "[ -e {f} ] && echo {v} > {f} 2>/dev/null\n",
        f = quote(&format!("{dir}/memory.swap.max")),
        v = if limits.memory_bytes.is_some() {
            "0"
        } else {
            "max"
        },
    ));
    s.push_str(&limit(
        &format!("{dir}/pids.max"),
        limits.pids.map(|p| p.to_string()),
        "max",
    ));
    s
}

fn v1_limits(cg: &SlotCgroup, limits: &SlotLimits) -> String {
    let mut s = String::new();
    let cpu = cg.dir(CgroupVersion::V1, "cpu");
    if limits.cpu_millis.is_some() {
        s.push_str(&write(
            &format!("{cpu}/cpu.cfs_period_us"),
            &CPU_PERIOD_US.to_string(),
        ));
    }
    s.push_str(&limit(
        &format!("{cpu}/cpu.cfs_quota_us"),
        limits
            .cpu_millis
            .map(|m| (m * CPU_PERIOD_US / 1000).to_string()),
        "-1",
    ));
    let memory = cg.dir(CgroupVersion::V1, "memory");
    // Memory plus swap (where the kernel accounts swap) is raised before memory and lowered
    // after it: it may never be below the memory limit.
    let memsw = quote(&format!("{memory}/memory.memsw.limit_in_bytes"));
    s.push_str(&format!(
        "[ -e {memsw} ] && echo -1 > {memsw} 2>/dev/null\n"
    ));
    s.push_str(&limit(
        &format!("{memory}/memory.limit_in_bytes"),
        limits.memory_bytes.map(|b| b.to_string()),
        "-1",
    ));
    if let Some(bytes) = limits.memory_bytes {
        s.push_str(&format!(
            "[ -e {memsw} ] && echo {bytes} > {memsw} 2>/dev/null\n"
        ));
    }
    s.push_str(&limit(
        &format!("{}/pids.max", cg.dir(CgroupVersion::V1, "pids")),
        limits.pids.map(|p| p.to_string()),
        "max",
    ));
    s
}

/// What the prepare script reported: the version found and how many leftover processes it
/// stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prepared {
    /// The instance's cgroup version.
    pub version: CgroupVersion,
    /// Processes an earlier job left in the slot's cgroup, now killed.
    pub stopped: usize,
}

impl Prepared {
    /// Reads the prepare script's output.
    pub fn parse(stdout: &str) -> Option<Prepared> {
        let mut stopped = None;
        let mut version = None;
        for line in stdout.lines().map(str::trim) {
            if let Some(n) = line.strip_prefix("stopped ") {
                stopped = n.parse().ok();
            }
            version = match line {
                "cgroup v1" => Some(CgroupVersion::V1),
                "cgroup v2" => Some(CgroupVersion::V2),
                _ => version,
            };
        }
        Some(Prepared {
            version: version?,
            stopped: stopped?,
        })
    }
}

/// Limit events of a slot's cgroup since it was made for the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LimitEvents {
    /// Processes the kernel killed for going over the memory limit.
    pub oom_kills: u64,
    /// Forks refused at the process limit.
    pub pids_max: u64,
}

impl LimitEvents {
    /// Reads the events script's output (`oom_kill N`, `pids_max N`).
    pub fn parse(stdout: &str) -> LimitEvents {
        let mut e = LimitEvents::default();
        for line in stdout.lines() {
            let mut it = line.split_whitespace();
            let (Some(key), Some(n)) = (it.next(), it.next().and_then(|n| n.parse::<u64>().ok()))
            else {
                continue;
            };
            match key {
                "oom_kill" => e.oom_kills += n,
                "pids_max" => e.pids_max += n,
                _ => {}
            }
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_parse() {
        assert_eq!(
            Prepared::parse("stopped 2\ncgroup v2\n"),
            Some(Prepared {
                version: CgroupVersion::V2,
                stopped: 2
            })
        );
        assert_eq!(Prepared::parse("cgroup v1\n"), None, "no count");
        assert_eq!(
            LimitEvents::parse("oom_kill 1\npids_max 0\nnoise\n"),
            LimitEvents {
                oom_kills: 1,
                pids_max: 0
            }
        );
    }

    #[test]
    fn v2_needs_only_the_controllers_its_limits_use() {
        assert!(v2_controllers(&SlotLimits::default()).is_empty());
        let all = SlotLimits {
            cpu_millis: Some(1),
            memory_bytes: Some(1),
            pids: Some(1),
        };
        assert_eq!(v2_controllers(&all), ["cpu", "memory", "pids"]);
    }

    #[test]
    fn the_scripts_are_valid_sh() {
        let cg = SlotCgroup {
            root: "/sys/fs/cgroup".into(),
            path: "gitlab-runner/slot-0".into(),
        };
        let limits = SlotLimits {
            cpu_millis: Some(1500),
            memory_bytes: Some(512 << 20),
            pids: Some(100),
        };
        for script in [
            cg.prepare_command(&limits),
            cg.kill_command(CgroupVersion::V1),
            cg.kill_command(CgroupVersion::V2),
            cg.events_command(CgroupVersion::V1),
            cg.events_command(CgroupVersion::V2),
            cg.joined(CgroupVersion::V2, "exec true"),
            sweep_command("/sys/fs/cgroup", "gitlab-runner/slot-*"),
        ] {
            let out = std::process::Command::new("sh")
                .args(["-n", "-c", &script])
                .output()
                .unwrap();
            assert!(out.status.success(), "{script}\n{out:?}");
        }
    }
}
