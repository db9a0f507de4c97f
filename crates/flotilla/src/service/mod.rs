//! `flotilla install`, `uninstall`, `start`, `stop`, `restart`: flotilla as a systemd service,
//! as `gitlab-runner install` and its siblings make gitlab-runner one (`commands/service.go`).
//!
//! `install` writes the unit ([`unit`]) for a configuration that loads, then asks systemd to
//! read it and to start it at boot; the others are `systemctl` verbs on the unit. With
//! `--no-systemctl` the unit is only written (or removed), for packaging or an image.

mod unit;

use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Where units are written by default.
pub const SYSTEM_UNIT_DIR: &str = "/etc/systemd/system";

/// Options of `flotilla install`.
#[derive(Debug, Clone, Args)]
pub struct InstallArgs {
    /// The configuration the service runs; without one, flotilla's place then gitlab-runner's.
    #[arg(short, long, value_name = "FILE", env = "FLOTILLA_CONFIG")]
    pub config: Option<PathBuf>,
    /// The service's name (the unit is `NAME.service`).
    #[arg(long, default_value = "flotilla")]
    pub service: String,
    /// Run as this user (default: root, which the shell, cgroup and VM levels need on
    /// their own host).
    #[arg(long)]
    pub user: Option<String>,
    /// The service's working directory.
    #[arg(long, value_name = "DIR")]
    pub working_directory: Option<PathBuf>,
    /// The directory the unit is written to.
    #[arg(long, value_name = "DIR", default_value = SYSTEM_UNIT_DIR)]
    pub unit_dir: PathBuf,
    /// Only write the unit: do not ask systemd to load and enable it.
    #[arg(long)]
    pub no_systemctl: bool,
    /// The flotilla binary the unit starts (absolute; default: this one).
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// Build the unit for a system staged under DIR (a package being made): `--config` is
    /// the path on that system, read under DIR; the unit is written under DIR; systemd is not
    /// asked.
    #[arg(long, value_name = "DIR", requires = "config")]
    pub root: Option<PathBuf>,
}

/// `path` under the staging `root`, when there is one.
fn staged(root: Option<&std::path::Path>, path: &std::path::Path) -> PathBuf {
    match root {
        Some(r) => r.join(path.strip_prefix("/").unwrap_or(path)),
        None => path.to_path_buf(),
    }
}

/// Options of `flotilla start`, `stop` and `restart`.
#[derive(Debug, Clone, Args)]
pub struct ServiceArgs {
    /// The service's name.
    #[arg(long, default_value = "flotilla")]
    pub service: String,
}

/// Options of `flotilla uninstall`.
#[derive(Debug, Clone, Args)]
pub struct UninstallArgs {
    /// The service's name.
    #[arg(long, default_value = "flotilla")]
    pub service: String,
    /// The directory the unit was written to.
    #[arg(long, value_name = "DIR", default_value = SYSTEM_UNIT_DIR)]
    pub unit_dir: PathBuf,
    /// Only remove the unit, without asking systemd to stop and disable it.
    #[arg(long)]
    pub no_systemctl: bool,
}

/// A service name systemd and this module accept: letters, digits and `-_.@`.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@'))
}

/// Runs `systemctl ARGS`; its failure is written to `err` with the command to run by hand.
fn systemctl(args: &[&str], err: &mut dyn Write) -> bool {
    match std::process::Command::new("systemctl").args(args).status() {
        Ok(s) if s.success() => true,
        Ok(s) => {
            let _ = writeln!(err, "error: `systemctl {}` failed ({s})", args.join(" "));
            false
        }
        Err(e) => {
            let _ = writeln!(
                err,
                "error: cannot run `systemctl {}`: {e} (is this a systemd machine?)",
                args.join(" ")
            );
            false
        }
    }
}

/// `flotilla install`.
pub fn install(args: &InstallArgs, err: &mut dyn Write) -> ExitCode {
    if !valid_name(&args.service) {
        let _ = writeln!(err, "error: `{}` is not a service name", args.service);
        return ExitCode::from(2);
    }
    let Some(config) = crate::cli::config_path(args.config.as_deref(), err) else {
        let _ = writeln!(
            err,
            "hint: `flotilla register` writes a configuration; install runs an existing one"
        );
        return ExitCode::from(2);
    };
    let root = args.root.as_deref();
    if root.is_some() && !config.is_absolute() {
        let _ = writeln!(
            err,
            "error: with --root, --config is the configuration's absolute path on the staged system"
        );
        return ExitCode::from(2);
    }
    let config = match std::path::absolute(&config) {
        Ok(p) => p,
        Err(e) => {
            let _ = writeln!(err, "error: {}: {e}", config.display());
            return ExitCode::from(2);
        }
    };
    let Some(loaded) = crate::cli::load_config(&staged(root, &config), err) else {
        return ExitCode::from(2);
    };
    if !crate::cli::providers_available(&loaded, err) {
        return ExitCode::from(2);
    }
    let binary = match &args.binary {
        Some(b) if b.is_absolute() => b.clone(),
        Some(b) => {
            let _ = writeln!(
                err,
                "error: --binary {} is not an absolute path",
                b.display()
            );
            return ExitCode::from(2);
        }
        None => match std::env::current_exe().and_then(|p| p.canonicalize()) {
            Ok(p) => p,
            Err(e) => {
                let _ = writeln!(err, "error: where this flotilla binary is: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let words: Vec<String> = [
        Some(&binary),
        Some(&config),
        args.working_directory.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(|p| p.to_string_lossy().into_owned())
    .chain(args.user.clone())
    .collect();
    if words.iter().any(|w| w.chars().any(char::is_control)) {
        let _ = writeln!(
            err,
            "error: a path or user with a control character cannot go in a unit"
        );
        return ExitCode::from(2);
    }
    if let Some(user) = &args.user
        && let Some(problem) = unreadable_by(user, &staged(root, &config))
    {
        let _ = writeln!(err, "warning: {problem}");
    }
    let spec = unit::UnitSpec {
        name: args.service.clone(),
        binary,
        config: config.clone(),
        user: args.user.clone(),
        working_directory: args.working_directory.clone(),
        shutdown_timeout: loaded.shutdown_timeout,
        state_dir: loaded
            .flotilla
            .state_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(crate::config::state_location::SYSTEM_STATE_DIR)),
    };
    let dir = &staged(root, &args.unit_dir);
    let path = dir.join(format!("{}.service", args.service));
    if path.exists() {
        let _ = writeln!(
            err,
            "error: {} exists; `flotilla uninstall --service {}` first",
            path.display(),
            args.service
        );
        return ExitCode::FAILURE;
    }
    if let Err(e) =
        std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, unit::unit(&spec)))
    {
        let _ = writeln!(err, "error: writing {}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    let _ = writeln!(err, "Wrote {} (runs {})", path.display(), config.display());
    if args.no_systemctl || root.is_some() {
        return ExitCode::SUCCESS;
    }
    let unit_name = format!("{}.service", args.service);
    if !(systemctl(&["daemon-reload"], err) && systemctl(&["enable", &unit_name], err)) {
        return ExitCode::FAILURE;
    }
    let _ = writeln!(
        err,
        "Enabled {unit_name}: start it with `flotilla start` (or `systemctl start {unit_name}`); \
         its log is `journalctl -u {unit_name}`"
    );
    ExitCode::SUCCESS
}

/// Why `user` could not read `file` (its configuration: `register` writes it readable by its
/// owner only), or `None` when it can or this cannot tell (no such user yet: systemd would
/// refuse to start the unit and say so).
fn unreadable_by(user: &str, file: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let account = nix::unistd::User::from_name(user).ok().flatten()?;
    let meta = std::fs::metadata(file).ok()?;
    let (uid, gid, mode) = (account.uid.as_raw(), account.gid.as_raw(), meta.mode());
    let readable = uid == 0
        || (meta.uid() == uid && mode & 0o400 != 0)
        || (meta.gid() == gid && mode & 0o040 != 0)
        || mode & 0o004 != 0;
    (!readable).then(|| {
        format!(
            "the service runs as {user}, who cannot read {} (mode {:o}, owner {}); give it \
             the file (`chown {user} {}`) or it will not start",
            file.display(),
            mode & 0o777,
            meta.uid(),
            file.display()
        )
    })
}

/// `flotilla uninstall`: stops and disables the service, removes its unit.
pub fn uninstall(args: &UninstallArgs, err: &mut dyn Write) -> ExitCode {
    if !valid_name(&args.service) {
        let _ = writeln!(err, "error: `{}` is not a service name", args.service);
        return ExitCode::from(2);
    }
    let unit_name = format!("{}.service", args.service);
    let path = args.unit_dir.join(&unit_name);
    if !path.exists() {
        let _ = writeln!(err, "error: {} does not exist", path.display());
        return ExitCode::FAILURE;
    }
    if !args.no_systemctl && !systemctl(&["disable", "--now", &unit_name], err) {
        return ExitCode::FAILURE;
    }
    if let Err(e) = std::fs::remove_file(&path) {
        let _ = writeln!(err, "error: removing {}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    if !args.no_systemctl && !systemctl(&["daemon-reload"], err) {
        return ExitCode::FAILURE;
    }
    let _ = writeln!(err, "Removed {}", path.display());
    ExitCode::SUCCESS
}

/// `flotilla start|stop|restart`: the `systemctl` verb on the service.
pub fn control(verb: &str, args: &ServiceArgs, err: &mut dyn Write) -> ExitCode {
    if !valid_name(&args.service) {
        let _ = writeln!(err, "error: `{}` is not a service name", args.service);
        return ExitCode::from(2);
    }
    if systemctl(&[verb, &format!("{}.service", args.service)], err) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
