//! The systemd unit `flotilla install` writes (pure): what runs, as whom, and how it stops.
//!
//! Stopping is the part that matters: systemd sends SIGTERM to the main process only
//! (`KillMode=mixed`), on which `flotilla run` stops taking jobs and lets running ones finish
//! within `shutdown_timeout`, reports them, and shuts its fleet down; only when that takes
//! longer than `TimeoutStopSec` does systemd kill what is left. Job processes the shell level
//! started are in the unit's cgroup too, and are not signalled first.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Time given on top of `shutdown_timeout` to report the jobs, then shut the fleet down
/// (with `delete_instances_on_shutdown`, deletions through a cloud's API).
pub(crate) const STOP_MARGIN: Duration = Duration::from_secs(120);

/// What a unit is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnitSpec {
    /// The service's name (the unit is `<name>.service`).
    pub(crate) name: String,
    /// The flotilla binary.
    pub(crate) binary: PathBuf,
    /// The configuration it runs.
    pub(crate) config: PathBuf,
    /// The user it runs as (`None`: root).
    pub(crate) user: Option<String>,
    /// Its working directory.
    pub(crate) working_directory: Option<PathBuf>,
    /// The configuration's `shutdown_timeout`.
    pub(crate) shutdown_timeout: Duration,
    /// The state directory the configuration resolves to for the installing user: the
    /// service gets the same (`FLOTILLA_STATE_DIR`), whatever user it runs as, so `flotilla
    /// status` run by that user reads the service's store.
    pub(crate) state_dir: PathBuf,
}

/// Quotes `s` for a systemd command line (`"..."` with `\` and `"` escaped, `%` doubled so it
/// is not a specifier, `$` doubled so it is not a variable).
fn quote(s: &str) -> String {
    quote_with(s, true)
}

/// Quotes `s` for `Environment=`, where `$` is not expanded.
fn quote_setting(s: &str) -> String {
    quote_with(s, false)
}

fn quote_with(s: &str, command_line: bool) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '%' => out.push_str("%%"),
            '$' if command_line => out.push_str("$$"),
            _ => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The unit file's text.
pub(crate) fn unit(spec: &UnitSpec) -> String {
    let stop = spec.shutdown_timeout + STOP_MARGIN;
    let mut s = String::new();
    s.push_str("# Written by `flotilla install`; `flotilla uninstall` removes it.\n");
    s.push_str("[Unit]\n");
    s.push_str("Description=flotilla: GitLab CI jobs on an autoscaled fleet\n");
    s.push_str("After=network-online.target docker.service\n");
    s.push_str("Wants=network-online.target\n\n");
    s.push_str("[Service]\n");
    s.push_str("Type=exec\n");
    s.push_str(&format!(
        "ExecStart={} run --config {}\n",
        quote(&spec.binary.to_string_lossy()),
        quote(&spec.config.to_string_lossy())
    ));
    if let Some(user) = &spec.user {
        s.push_str(&format!("User={user}\n"));
    }
    if let Some(dir) = &spec.working_directory {
        // A path setting: taken whole, not split or unquoted; only specifiers expand.
        s.push_str(&format!(
            "WorkingDirectory={}\n",
            dir.to_string_lossy().replace('%', "%%")
        ));
    }
    s.push_str(&format!(
        "Environment={}\n",
        quote_setting(&format!(
            "FLOTILLA_STATE_DIR={}",
            spec.state_dir.to_string_lossy()
        ))
    ));
    // systemd makes /var/lib/flotilla and gives it to `User=` (root's default state dir).
    if spec.state_dir == Path::new("/var/lib/flotilla") {
        s.push_str("StateDirectory=flotilla\nStateDirectoryMode=0700\n");
    }
    s.push_str("Restart=always\n");
    s.push_str("RestartSec=5s\n");
    s.push_str(
        "# SIGTERM to flotilla alone: it stops taking jobs and lets running ones finish\n\
         # within shutdown_timeout; whatever is left after TimeoutStopSec is killed.\n\
         # TimeoutStopSec is shutdown_timeout + 120 s as it was at `flotilla install`: run\n\
         # `flotilla uninstall` and `install` again after changing shutdown_timeout.\n",
    );
    s.push_str("KillMode=mixed\n");
    s.push_str("KillSignal=SIGTERM\n");
    s.push_str(&format!("TimeoutStopSec={}s\n", stop.as_secs()));
    s.push_str("LimitNOFILE=65536\n");
    s.push_str(&format!("SyslogIdentifier={}\n\n", spec.name));
    s.push_str("[Install]\n");
    s.push_str("WantedBy=multi-user.target\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> UnitSpec {
        UnitSpec {
            name: "flotilla".into(),
            binary: "/usr/bin/flotilla".into(),
            config: "/etc/flotilla/config.toml".into(),
            user: None,
            working_directory: None,
            shutdown_timeout: Duration::from_secs(30),
            state_dir: "/var/lib/flotilla".into(),
        }
    }

    #[test]
    fn the_unit_lets_running_jobs_finish() {
        let u = unit(&spec());
        assert!(u.contains(
            "ExecStart=\"/usr/bin/flotilla\" run --config \"/etc/flotilla/config.toml\"\n"
        ));
        assert!(u.contains("KillMode=mixed\n"));
        assert!(
            u.contains("TimeoutStopSec=150s\n"),
            "shutdown_timeout + 120 s"
        );
        assert!(u.contains("Restart=always\n"));
        assert!(!u.contains("User="));
        assert!(u.contains("Environment=\"FLOTILLA_STATE_DIR=/var/lib/flotilla\"\n"));
        assert!(u.contains("StateDirectory=flotilla\n"));
    }

    #[test]
    fn paths_and_users_are_quoted_for_systemd() {
        let mut s = spec();
        s.config = "/etc/my \"odd\" 100%$HOME.toml".into();
        s.user = Some("gitlab-runner".into());
        s.state_dir = "/srv/$ci".into();
        s.working_directory = Some("/home/gitlab-runner".into());
        let u = unit(&s);
        assert!(
            u.contains(r#"--config "/etc/my \"odd\" 100%%$$HOME.toml""#),
            "{u}"
        );
        assert!(u.contains("User=gitlab-runner\n"));
        assert!(
            u.contains("Environment=\"FLOTILLA_STATE_DIR=/srv/$ci\"\n"),
            "{u}"
        );
        assert!(!u.contains("StateDirectory="), "only for /var/lib/flotilla");
        assert!(u.contains("WorkingDirectory=/home/gitlab-runner\n"));
    }
}
