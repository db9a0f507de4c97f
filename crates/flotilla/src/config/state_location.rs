//! Where flotilla keeps its state (the store, caches, snapshots) when `[flotilla] state_dir`
//! is not set: where operators look for a service's state, as the Filesystem Hierarchy
//! Standard and the XDG base directories put it, not next to a configuration in `/etc`.
//!
//! In order: `FLOTILLA_STATE_DIR` (a service's or container's environment); a store already
//! in `.flotilla` beside the configuration (the default of earlier versions: a fleet's state
//! is never left behind by an upgrade, and a warning says how to keep it there); then
//! `/var/lib/flotilla` as root, `$XDG_STATE_HOME/flotilla` (else `~/.local/state/flotilla`)
//! otherwise, and `.flotilla` beside the configuration for a user with no home.

use std::path::{Path, PathBuf};

/// The environment variable that chooses the state directory when the configuration does not.
pub const STATE_DIR_ENV: &str = "FLOTILLA_STATE_DIR";

/// The state directory root gets.
pub const SYSTEM_STATE_DIR: &str = "/var/lib/flotilla";

/// The directory earlier versions used, beside the configuration.
pub const EARLIER_STATE_DIR: &str = ".flotilla";

/// The store's file, whose presence marks a state directory in use.
const STORE_FILE: &str = "flotilla.db";

/// What the choice depends on.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// `FLOTILLA_STATE_DIR`, when set and not empty.
    pub env: Option<&'a Path>,
    /// Whether the process runs as root.
    pub root: bool,
    /// `HOME`.
    pub home: Option<&'a Path>,
    /// `XDG_STATE_HOME`.
    pub xdg_state_home: Option<&'a Path>,
    /// The configuration's directory.
    pub config_dir: &'a Path,
    /// Whether a store exists in [`EARLIER_STATE_DIR`] beside the configuration.
    pub earlier_store: bool,
}

/// Why the directory was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// `FLOTILLA_STATE_DIR`.
    Environment,
    /// A store of an earlier version is there.
    Earlier,
    /// The default for root or for this user.
    Default,
}

/// The state directory for `facts` (pure).
pub fn choose(facts: &Facts<'_>) -> (PathBuf, Reason) {
    if let Some(dir) = facts.env {
        let dir = if dir.is_absolute() {
            dir.to_path_buf()
        } else {
            facts.config_dir.join(dir)
        };
        return (dir, Reason::Environment);
    }
    if facts.earlier_store {
        return (facts.config_dir.join(EARLIER_STATE_DIR), Reason::Earlier);
    }
    (default_for(facts), Reason::Default)
}

/// The default of this user, whatever is already on disk.
pub fn default_for(facts: &Facts<'_>) -> PathBuf {
    if facts.root {
        return PathBuf::from(SYSTEM_STATE_DIR);
    }
    match (facts.xdg_state_home, facts.home) {
        // The XDG spec: a relative XDG_STATE_HOME is invalid and ignored.
        (Some(xdg), _) if xdg.is_absolute() => xdg.join("flotilla"),
        (_, Some(home)) => home.join(".local/state/flotilla"),
        _ => facts.config_dir.join(EARLIER_STATE_DIR),
    }
}

/// [`choose`] for this process and a configuration in `config_dir`.
pub fn for_process(config_dir: &Path) -> (PathBuf, Reason, PathBuf) {
    let env = std::env::var_os(STATE_DIR_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let xdg = std::env::var_os("XDG_STATE_HOME").map(PathBuf::from);
    let facts = Facts {
        env: env.as_deref(),
        root: nix::unistd::geteuid().is_root(),
        home: home.as_deref(),
        xdg_state_home: xdg.as_deref(),
        config_dir,
        earlier_store: config_dir
            .join(EARLIER_STATE_DIR)
            .join(STORE_FILE)
            .is_file(),
    };
    let (dir, reason) = choose(&facts);
    (dir, reason, default_for(&facts))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(root: bool, config_dir: &'a Path) -> Facts<'a> {
        Facts {
            env: None,
            root,
            home: Some(Path::new("/home/ada")),
            xdg_state_home: None,
            config_dir,
            earlier_store: false,
        }
    }

    #[test]
    fn root_keeps_state_in_var_lib_and_a_user_in_the_xdg_state_home() {
        let etc = Path::new("/etc/gitlab-runner");
        assert_eq!(choose(&facts(true, etc)).0, Path::new("/var/lib/flotilla"));
        assert_eq!(
            choose(&facts(false, etc)).0,
            Path::new("/home/ada/.local/state/flotilla")
        );
        let xdg = Facts {
            xdg_state_home: Some(Path::new("/xdg/state")),
            ..facts(false, etc)
        };
        assert_eq!(choose(&xdg).0, Path::new("/xdg/state/flotilla"));
        let relative = Facts {
            xdg_state_home: Some(Path::new("rel")),
            ..facts(false, etc)
        };
        assert_eq!(
            choose(&relative).0,
            Path::new("/home/ada/.local/state/flotilla")
        );
        let homeless = Facts {
            home: None,
            ..facts(false, etc)
        };
        assert_eq!(
            choose(&homeless).0,
            Path::new("/etc/gitlab-runner/.flotilla")
        );
    }

    #[test]
    fn an_earlier_store_is_not_left_behind_and_the_environment_wins() {
        let dir = Path::new("/srv/ci");
        let earlier = Facts {
            earlier_store: true,
            ..facts(true, dir)
        };
        assert_eq!(
            choose(&earlier),
            (PathBuf::from("/srv/ci/.flotilla"), Reason::Earlier)
        );
        let env = Facts {
            env: Some(Path::new("/data/flotilla")),
            ..earlier
        };
        assert_eq!(
            choose(&env),
            (PathBuf::from("/data/flotilla"), Reason::Environment)
        );
        let relative_env = Facts {
            env: Some(Path::new("state")),
            ..earlier
        };
        assert_eq!(choose(&relative_env).0, Path::new("/srv/ci/state"));
    }
}
