//! `flotilla register`, `verify`, `unregister` and `list`: a runner's entry in `config.toml`
//! made, checked and removed as `gitlab-runner`'s commands of the same names do
//! (`commands/register.go`, `verify.go`, `unregister.go`, `list.go`).
//!
//! - `register` with a runner authentication token made in GitLab (`glrt-`, the way GitLab
//!   asks for since 16.0) verifies it (`POST /api/v4/runners/verify`); with a legacy
//!   registration token (`--registration-token`) it creates the runner (`POST
//!   /api/v4/runners`). Either way the new `[[runners]]` entry is checked as `config check`
//!   checks a file before anything is sent, then appended; the rest of the file is kept as it
//!   was written. The token is never printed.
//! - `verify` asks GitLab about every runner of the file; `--delete` removes those GitLab no
//!   longer knows.
//! - `unregister` deletes a runner in GitLab (`DELETE /api/v4/runners`) or, for a runner made
//!   in GitLab, this manager of it (`DELETE /api/v4/runners/managers`), and removes its entry.
//! - `list` prints the entries, tokens shortened as GitLab shortens them.

mod entries;

use crate::config::{Config, IsolationLevel};
use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use entries::{ConfigDocument, Entry};
use flotilla_fleet::Secret;
use flotilla_gitlab::registration::{RegistrationRequest, is_created_runner_token};
use flotilla_gitlab::{Client, ClientConfig, ClientError, Info};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Options of `flotilla register`.
#[derive(Debug, Clone, Args)]
pub struct RegisterArgs {
    /// The configuration file to add the runner to (made when missing); without one, the
    /// first that exists of flotilla's place and gitlab-runner's, else flotilla's.
    #[arg(short, long, value_name = "FILE", env = "FLOTILLA_CONFIG")]
    pub config: Option<PathBuf>,
    /// GitLab's URL (`https://gitlab.example.com`).
    #[arg(short, long, env = "CI_SERVER_URL")]
    pub url: String,
    /// The runner authentication token of a runner made in GitLab (Settings > CI/CD >
    /// Runners > New runner): `glrt-...`. Better given in the environment than on the
    /// command line.
    #[arg(short, long, env = "CI_SERVER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// A legacy registration token: GitLab creates the runner (deprecated by GitLab, off
    /// by default since 17.0).
    #[arg(
        short,
        long,
        env = "REGISTRATION_TOKEN",
        hide_env_values = true,
        conflicts_with = "token"
    )]
    pub registration_token: Option<String>,
    /// The runner's name in `config.toml` (and its description in GitLab, for a legacy
    /// registration); default: this host's name.
    #[arg(long, visible_alias = "description", env = "RUNNER_NAME")]
    pub name: Option<String>,
    /// The executor (`docker-autoscaler`, `instance`, `flotilla`, `shell`, `docker`);
    /// default: the template's.
    #[arg(long, env = "RUNNER_EXECUTOR")]
    pub executor: Option<String>,
    /// A `config.toml` whose first `[[runners]]` entry the new one starts from (its
    /// `[runners.autoscaler]`, `[runners.docker]`, ...); the command line wins.
    #[arg(long, value_name = "FILE", env = "TEMPLATE_CONFIG_FILE")]
    pub template_config: Option<PathBuf>,
    /// `limit`: the most jobs this runner runs at once (0: no limit).
    #[arg(long, env = "RUNNER_LIMIT")]
    pub limit: Option<u32>,
    /// `[runners.docker] image`: the default image of the runner's jobs.
    #[arg(long, env = "DOCKER_IMAGE")]
    pub docker_image: Option<String>,
    /// Legacy registration: the runner's tags, comma-separated.
    #[arg(long, env = "RUNNER_TAG_LIST")]
    pub tag_list: Option<String>,
    /// Legacy registration: run jobs without tags too.
    #[arg(long, env = "REGISTER_RUN_UNTAGGED")]
    pub run_untagged: Option<bool>,
    /// Legacy registration: lock the runner to the project.
    #[arg(long, env = "REGISTER_LOCKED")]
    pub locked: Option<bool>,
    /// Legacy registration: `not_protected` or `ref_protected`.
    #[arg(long, env = "REGISTER_ACCESS_LEVEL", value_parser = ["not_protected", "ref_protected"])]
    pub access_level: Option<String>,
    /// Legacy registration: the longest a job may run on this runner, in seconds.
    #[arg(long, env = "REGISTER_MAXIMUM_TIMEOUT")]
    pub maximum_timeout: Option<u64>,
    /// Legacy registration: register the runner paused.
    #[arg(long, env = "REGISTER_PAUSED")]
    pub paused: Option<bool>,
    /// Legacy registration: a note for GitLab's administrators.
    #[arg(long, env = "REGISTER_MAINTENANCE_NOTE")]
    pub maintenance_note: Option<String>,
    /// Accepted for gitlab-runner's scripts: flotilla never asks questions.
    #[arg(short, long)]
    pub non_interactive: bool,
}

/// Options of `flotilla verify`.
#[derive(Debug, Clone, Args)]
pub struct VerifyArgs {
    /// The configuration file; without one, flotilla's place then gitlab-runner's.
    #[arg(short, long, value_name = "FILE", env = "FLOTILLA_CONFIG")]
    pub config: Option<PathBuf>,
    /// Only the runner with this name.
    #[arg(short, long)]
    pub name: Option<String>,
    /// Remove from the file the runners GitLab no longer knows.
    #[arg(long)]
    pub delete: bool,
}

/// Options of `flotilla unregister`.
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).multiple(true).args(["name", "token", "all_runners"])))]
pub struct UnregisterArgs {
    /// The configuration file; without one, flotilla's place then gitlab-runner's.
    #[arg(short, long, value_name = "FILE", env = "FLOTILLA_CONFIG")]
    pub config: Option<PathBuf>,
    /// The runner with this name.
    #[arg(short, long)]
    pub name: Option<String>,
    /// The runner with this token.
    #[arg(short, long, env = "CI_SERVER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Every runner of the file (those GitLab refuses to delete stay); `--name` and a token
    /// (`CI_SERVER_TOKEN` may be set for other commands) are then not read.
    #[arg(long, conflicts_with = "name")]
    pub all_runners: bool,
}

/// Options of `flotilla list`.
#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// The configuration file; without one, flotilla's place then gitlab-runner's.
    #[arg(short, long, value_name = "FILE", env = "FLOTILLA_CONFIG")]
    pub config: Option<PathBuf>,
}

/// Runs `f` to its end on a runtime of its own.
fn block_on<T>(f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?
        .block_on(f)
}

/// The exit status of a command's `result`, its error written to `err`.
fn finish(result: Result<ExitCode>, err: &mut dyn Write) -> ExitCode {
    result.unwrap_or_else(|e| {
        let _ = writeln!(err, "error: {e:#}");
        ExitCode::FAILURE
    })
}

/// `flotilla register`.
pub fn register(args: &RegisterArgs, err: &mut dyn Write) -> ExitCode {
    let result = block_on(register_runner(args, err));
    finish(result, err)
}

/// The file `register` writes: the one given, else the first that exists of the default
/// places, else the first of them (flotilla's own).
fn register_path(explicit: Option<&Path>) -> PathBuf {
    match crate::config::location::find(explicit) {
        Ok(path) => path,
        Err(places) => places
            .into_iter()
            .next()
            .unwrap_or_else(|| PathBuf::from("config.toml")),
    }
}

/// Reads the configuration at `path`; a missing file is an empty one.
fn read_text(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow!(e).context(format!("reading {}", path.display()))),
    }
}

/// Writes `text` to `path` by a rename, so the file is never half written; a new file (and
/// the directory made for it) is readable by its owner only, as it holds runner tokens.
fn write_text(path: &Path, text: &str) -> Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(dir) = dir
        && !dir.exists()
    {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    let mode = std::fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o600);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "config.toml".into());
    let tmp = path.with_file_name(format!(".{name}.flotilla-{}", std::process::id()));
    let written = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(anyhow!(e).context(format!("writing {}", path.display())));
    }
    Ok(())
}

/// This host's name, for a runner given none.
fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "flotilla".into())
}

/// GitLab Runner's words for settings a runner made in GitLab keeps there
/// (`commands/register.go`).
const RESERVED: &str = "runner configuration other than name and executor configuration is \
     reserved (specifically --locked, --access-level, --run-untagged, --maximum-timeout, \
     --paused, --tag-list, and --maintenance-note) and cannot be specified when registering \
     with a runner authentication token. This configuration is specified on the GitLab server. \
     Please try again without specifying any of those arguments";

async fn register_runner(args: &RegisterArgs, err: &mut dyn Write) -> Result<ExitCode> {
    let (secret, legacy) = match (&args.token, &args.registration_token) {
        (Some(t), None) => (t.trim().to_string(), false),
        (None, Some(t)) => (t.trim().to_string(), true),
        _ => bail!(
            "give the runner's authentication token (--token glrt-..., made in GitLab under \
             Settings > CI/CD > Runners) or a legacy --registration-token"
        ),
    };
    if secret.is_empty() {
        bail!("the token is empty");
    }
    let request = RegistrationRequest {
        description: String::new(),
        tag_list: args.tag_list.clone().unwrap_or_default(),
        run_untagged: args.run_untagged,
        locked: args.locked,
        access_level: args.access_level.clone(),
        maximum_timeout: args.maximum_timeout,
        paused: args.paused,
        maintenance_note: args.maintenance_note.clone(),
    };
    if !legacy && request != RegistrationRequest::default() {
        bail!("{RESERVED}");
    }
    let path = register_path(args.config.as_deref());
    let file = path.display().to_string();
    let existing = read_text(&path)?;
    let mut doc = ConfigDocument::parse(existing.as_deref().unwrap_or(""), &file)?;
    let name = args.name.clone().unwrap_or_else(host_name);
    if doc.entries().iter().any(|e| e.name == name) {
        bail!("{file} already has a runner named {name:?}; give another --name");
    }

    // The entry: the template's, then what the command line says.
    let mut entry = match &args.template_config {
        Some(t) => {
            let text = std::fs::read_to_string(t)
                .with_context(|| format!("reading the template {}", t.display()))?;
            entries::template_entry(&text, &t.display().to_string())?
        }
        None => toml_edit::Table::new(),
    };
    let template_executor = entry
        .get("executor")
        .and_then(toml_edit::Item::as_str)
        .map(str::to_string);
    let Some(executor) = args.executor.clone().or(template_executor) else {
        bail!(
            "--executor is needed (one of {})",
            crate::config::Executor::NAMES.join(", ")
        );
    };
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let datetime = |s: &str| -> Result<toml_edit::Datetime> {
        s.parse().map_err(|e| anyhow!("time {s:?}: {e}"))
    };
    let mut fresh = toml_edit::Table::new();
    entries::set(&mut fresh, "name", name.as_str());
    entries::set(&mut fresh, "url", args.url.trim_end_matches('/'));
    entries::set(&mut fresh, "id", 0i64);
    // Checked with a stand-in: nothing is sent to GitLab before the entry is known good.
    entries::set(&mut fresh, "token", "glrt-not-yet-registered");
    entries::set(&mut fresh, "token_obtained_at", datetime(&now)?);
    entries::set(
        &mut fresh,
        "token_expires_at",
        datetime("0001-01-01T00:00:00Z")?,
    );
    entries::set(&mut fresh, "executor", executor.as_str());
    for (key, item) in &entry {
        if !fresh.contains_key(key) {
            fresh.insert(key, item.clone());
        }
    }
    entry = fresh;
    if let Some(limit) = args.limit {
        entries::set(&mut entry, "limit", i64::from(limit));
    }
    if let Some(image) = &args.docker_image {
        let docker = entry
            .entry("docker")
            .or_insert_with(|| toml_edit::Item::Table(toml_edit::Table::new()));
        match docker.as_table_mut() {
            Some(t) => entries::set(t, "image", image.as_str()),
            None => bail!("the template's `docker` is not a table"),
        }
    }
    entries::indent(&mut entry);

    let mut candidate = doc.clone();
    candidate.append(entry.clone());
    let loaded = match Config::from_str(&candidate.text(), &path) {
        Ok(l) => l,
        Err(e) => {
            for e in e.errors() {
                let _ = writeln!(err, "error: {e}");
            }
            bail!("the new entry does not make a valid configuration; nothing was sent or written");
        }
    };
    for w in &loaded.warnings {
        let _ = writeln!(err, "warning: {w}");
    }
    if !crate::cli::providers_available(&loaded.config, err) {
        bail!("nothing was sent or written");
    }
    let config = loaded.config;
    let runner = config
        .runners
        .last()
        .ok_or_else(|| anyhow!("the new entry was not read back"))?;
    let system_id = manager_system_id(&path, Some(&config))?;
    let containers = runner.isolation_levels().offers(IsolationLevel::Docker);
    let mut client_config = ClientConfig::new(
        args.url.clone(),
        Secret::new(secret.clone()),
        system_id,
        Info::flotilla(&executor, containers),
    );
    client_config.tls = runner.tls_files();
    let client = Client::new(client_config)?;

    let short = flotilla_monitor::short_token(&secret);
    let (id, token, expires) = if legacy {
        let request = RegistrationRequest {
            description: name.clone(),
            ..request
        };
        let r = client.register(&request).await?;
        let _ = writeln!(
            err,
            "Registering runner... succeeded  runner={}",
            flotilla_monitor::short_token(r.token.expose())
        );
        (r.id, r.token.expose().clone(), r.token_expires_at)
    } else {
        match client.verify().await {
            Ok(v) => {
                let _ = writeln!(err, "Verifying runner... is valid  runner={short}");
                (v.id.unwrap_or(0), secret.clone(), v.token_expires_at)
            }
            Err(ClientError::InvalidRunnerToken { .. }) => bail!(
                "GitLab refused the token (runner={short}): copy it again from the runner's \
                 page in GitLab, and check that the runner was not deleted"
            ),
            Err(e) => return Err(e.into()),
        }
    };
    entries::set(&mut entry, "id", id);
    entries::set(&mut entry, "token", token.as_str());
    if let Some(at) = expires.as_deref().filter(|s| !s.is_empty())
        && let Ok(at) = datetime(at)
    {
        entries::set(&mut entry, "token_expires_at", at);
    }
    entries::indent(&mut entry);
    doc.append(entry);
    if let Err(e) = write_text(&path, &doc.text()) {
        // The token exists nowhere else: a runner GitLab just made for it would be left
        // orphaned there. Delete it again (a verified runner made in GitLab stays as it was).
        if legacy {
            let mut made_config = ClientConfig::new(
                args.url.clone(),
                Secret::new(token.clone()),
                String::new(),
                Info::flotilla(&executor, containers),
            );
            made_config.tls = runner.tls_files();
            let made = Client::new(made_config)?;
            match made.unregister().await {
                Ok(()) => {
                    let _ = writeln!(
                        err,
                        "the configuration could not be written, so the runner GitLab just made was deleted again"
                    );
                }
                Err(d) => {
                    let _ = writeln!(
                        err,
                        "the configuration could not be written, and deleting the runner GitLab just made failed too ({d}): delete runner {id} in GitLab"
                    );
                }
            }
        }
        return Err(e);
    }
    let _ = writeln!(
        err,
        "Runner {name:?} registered. Check the configuration with `flotilla config check -c {file}`, \
         then start it with `flotilla run -c {file}` (or `flotilla install` for a service).\n\
         The configuration, with the runner's authentication token, was saved in {file}"
    );
    Ok(ExitCode::SUCCESS)
}

/// The entries of the file at `explicit` (or found), with its path and document.
fn open(explicit: Option<&Path>, err: &mut dyn Write) -> Option<(PathBuf, ConfigDocument)> {
    let path = crate::cli::config_path(explicit, err)?;
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            let _ = writeln!(err, "error: reading {}: {e}", path.display());
            return None;
        }
    };
    match ConfigDocument::parse(&text, &path.display().to_string()) {
        Ok(d) => Some((path, d)),
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            None
        }
    }
}

/// This manager's system id as `flotilla run` with the configuration at `path` has it: from
/// the state directory `config` (when it loads) or the defaults give.
fn manager_system_id(path: &Path, config: Option<&Config>) -> Result<String> {
    let state_dir = config
        .and_then(|c| c.flotilla.state_dir.clone())
        .unwrap_or_else(|| {
            crate::config::state_location::for_process(path.parent().unwrap_or(Path::new("."))).0
        });
    flotilla_gitlab::system_id(&state_dir)
        .with_context(|| format!("the system id in {}", state_dir.display()))
}

/// The system id of the manager of the file at `path` (the file loaded once).
fn file_system_id(path: &Path) -> Result<String> {
    let loaded = Config::load(path).ok();
    manager_system_id(path, loaded.as_ref().map(|l| &l.config))
}

/// A client for `entry`, as the manager `system_id`.
fn client_for(entry: &Entry, system_id: &str) -> Result<Client> {
    let mut config = ClientConfig::new(
        entry.url.clone(),
        Secret::new(entry.token.clone()),
        system_id.to_string(),
        Info::flotilla(&entry.executor, false),
    );
    config.tls = entry.tls.clone();
    Ok(Client::new(config)?)
}

/// `flotilla verify`.
pub fn verify(args: &VerifyArgs, err: &mut dyn Write) -> ExitCode {
    let Some((path, mut doc)) = open(args.config.as_deref(), err) else {
        return ExitCode::from(2);
    };
    let result = block_on(async {
        let system_id = file_system_id(&path)?;
        let chosen: Vec<Entry> = doc
            .entries()
            .into_iter()
            .filter(|e| args.name.as_ref().is_none_or(|n| *n == e.name))
            .collect();
        if chosen.is_empty() {
            bail!(
                "{} has no runner{}",
                path.display(),
                args.name
                    .as_ref()
                    .map(|n| format!(" named {n:?}"))
                    .unwrap_or_default()
            );
        }
        let mut removed = Vec::new();
        let mut failed = false;
        for e in &chosen {
            let short = flotilla_monitor::short_token(&e.token);
            if e.url.is_empty() || e.token.is_empty() {
                let _ = writeln!(
                    err,
                    "Verifying runner {:?}... skipped: no url or token (it serves flotilla exec only)",
                    e.name
                );
                continue;
            }
            match client_for(e, &system_id)?.verify().await {
                Ok(_) => {
                    let _ = writeln!(
                        err,
                        "Verifying runner {:?}... is valid  runner={short}",
                        e.name
                    );
                }
                Err(ClientError::InvalidRunnerToken { .. }) => {
                    let _ = writeln!(
                        err,
                        "Verifying runner {:?}... is removed  runner={short}",
                        e.name
                    );
                    removed.push(e.index);
                }
                Err(error) => {
                    let _ = writeln!(
                        err,
                        "Verifying runner {:?}... failed  runner={short}: {error}",
                        e.name
                    );
                    failed = true;
                }
            }
        }
        if args.delete && !removed.is_empty() {
            doc.remove(&removed);
            write_text(&path, &doc.text())?;
            let _ = writeln!(
                err,
                "Removed {} runner(s) GitLab no longer knows from {}",
                removed.len(),
                path.display()
            );
            removed.clear();
        }
        Ok(if failed || !removed.is_empty() {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        })
    });
    finish(result, err)
}

/// `flotilla unregister`.
pub fn unregister(args: &UnregisterArgs, err: &mut dyn Write) -> ExitCode {
    let Some((path, mut doc)) = open(args.config.as_deref(), err) else {
        return ExitCode::from(2);
    };
    let result = block_on(async {
        let system_id = file_system_id(&path)?;
        let all = doc.entries();
        let chosen: Vec<&Entry> = all
            .iter()
            .filter(|e| {
                args.all_runners
                    || (args.name.as_ref().is_none_or(|n| *n == e.name)
                        && args.token.as_ref().is_none_or(|t| *t == e.token))
            })
            .collect();
        if chosen.is_empty() {
            bail!("{} has no such runner", path.display());
        }
        if chosen.len() > 1 && !args.all_runners {
            bail!(
                "{} runners match in {}; name one with --name and --token, or give --all-runners",
                chosen.len(),
                path.display()
            );
        }
        let mut gone = Vec::new();
        let mut failed = false;
        for e in chosen {
            let short = flotilla_monitor::short_token(&e.token);
            let client = client_for(e, &system_id)?;
            // A runner made in GitLab stays there: only this manager of it is removed
            // (GitLab Runner's `unregisterRunner`).
            let (what, result) = if is_created_runner_token(&e.token) {
                ("manager", client.unregister_manager().await)
            } else {
                ("runner", client.unregister().await)
            };
            match result {
                Ok(()) => {
                    let _ = writeln!(
                        err,
                        "Unregistering {what} of {:?}... succeeded  runner={short}",
                        e.name
                    );
                    gone.push(e.index);
                }
                Err(error) => {
                    let _ = writeln!(
                        err,
                        "Unregistering {what} of {:?}... failed  runner={short}: {error}",
                        e.name
                    );
                    failed = true;
                }
            }
        }
        if !gone.is_empty() {
            doc.remove(&gone);
            write_text(&path, &doc.text())?;
            let _ = writeln!(err, "Updated {}", path.display());
        }
        Ok(if failed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        })
    });
    finish(result, err)
}

/// `flotilla list`.
pub fn list(args: &ListArgs, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    let Some((path, doc)) = open(args.config.as_deref(), err) else {
        return ExitCode::from(2);
    };
    let _ = writeln!(
        err,
        "Listing configured runners  ConfigFile={}",
        path.display()
    );
    for e in doc.entries() {
        let _ = writeln!(
            out,
            "{:<20} Executor={} Token={} URL={}",
            e.name,
            e.executor,
            flotilla_monitor::short_token(&e.token),
            e.url
        );
    }
    ExitCode::SUCCESS
}
