//! Where the configuration is when a command is given none: flotilla's own place first, then
//! where gitlab-runner keeps its `config.toml` (`commands/config_unix.go`,
//! `getDefaultConfigDirectory`: `/etc/gitlab-runner` as root, `~/.gitlab-runner` otherwise,
//! the working directory when there is no home), so a config reused from gitlab-runner is
//! found where it already is.

use std::path::{Path, PathBuf};

/// The places looked at, in order, for a user who is `root` or not, with this home and
/// `XDG_CONFIG_HOME`.
pub fn candidates(root: bool, home: Option<&Path>, xdg_config_home: Option<&Path>) -> Vec<PathBuf> {
    if root {
        return vec![
            PathBuf::from("/etc/flotilla/config.toml"),
            PathBuf::from("/etc/gitlab-runner/config.toml"),
        ];
    }
    let mut out = Vec::new();
    match (xdg_config_home, home) {
        (Some(xdg), _) if xdg.is_absolute() => out.push(xdg.join("flotilla/config.toml")),
        (_, Some(home)) => out.push(home.join(".config/flotilla/config.toml")),
        _ => {}
    }
    match home {
        Some(home) => out.push(home.join(".gitlab-runner/config.toml")),
        None => out.push(PathBuf::from("config.toml")),
    }
    out
}

/// The configuration to use: `explicit` when given, else the first of [`candidates`] for
/// this process that exists; `Err` lists the places looked at.
pub fn find(explicit: Option<&Path>) -> Result<PathBuf, Vec<PathBuf>> {
    if let Some(path) = explicit {
        return Ok(path.to_path_buf());
    }
    let root = nix::unistd::geteuid().is_root();
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let xdg = std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from);
    let places = candidates(root, home.as_deref(), xdg.as_deref());
    places.iter().find(|p| p.is_file()).cloned().ok_or(places)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_looks_in_etc_flotilla_then_gitlab_runners_place() {
        assert_eq!(
            candidates(true, Some(Path::new("/root")), None),
            vec![
                PathBuf::from("/etc/flotilla/config.toml"),
                PathBuf::from("/etc/gitlab-runner/config.toml")
            ]
        );
    }

    #[test]
    fn a_user_looks_in_the_xdg_config_dir_then_gitlab_runners_place() {
        assert_eq!(
            candidates(false, Some(Path::new("/home/ada")), None),
            vec![
                PathBuf::from("/home/ada/.config/flotilla/config.toml"),
                PathBuf::from("/home/ada/.gitlab-runner/config.toml")
            ]
        );
        assert_eq!(
            candidates(false, Some(Path::new("/home/ada")), Some(Path::new("/cfg")))[0],
            PathBuf::from("/cfg/flotilla/config.toml")
        );
        // A relative XDG_CONFIG_HOME is ignored, as the XDG spec says.
        assert_eq!(
            candidates(false, Some(Path::new("/home/ada")), Some(Path::new("rel")))[0],
            PathBuf::from("/home/ada/.config/flotilla/config.toml")
        );
        assert_eq!(
            candidates(false, None, None),
            vec![PathBuf::from("config.toml")]
        );
    }
}
