//! The command line: `flotilla run`, `exec`, `status`, `config check`, `migrate`,
//! `simulate`, `--version`.
//!
//! [`main`] parses the arguments, sets up logging (`--log-level`, else `RUST_LOG`, else
//! `info`; always to stderr) and runs the command. [`execute`] runs an already parsed command
//! against given output streams, so commands can be tested without a process.

use crate::config::Config;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// flotilla runs CI jobs on an autoscaled fleet, at the isolation level each job needs.
#[derive(Debug, Parser)]
#[command(name = "flotilla", version = LONG_VERSION.as_str(), about, propagate_version = true)]
pub struct Cli {
    /// Log filter: a level (error, warn, info, debug, trace) or a full `RUST_LOG`-style
    /// directive. Overrides `RUST_LOG`.
    #[arg(long, global = true, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Log line format (default text; `run` takes the configuration's `log_format`).
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<LogOutput>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogOutput {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Take jobs from GitLab and run them on the configured fleets (like `gitlab-runner run`).
    Run(RunArgs),
    /// Run the jobs of `.gitlab-ci.yml` on a local fleet.
    ///
    /// Each job's build directory starts as GitLab Runner leaves it: a git repository at the
    /// current commit, fetched from the local repository `GIT_DEPTH` deep (20 by default),
    /// with a detached HEAD and the working tree's uncommitted changes on top (`GIT_STRATEGY`,
    /// `GIT_CHECKOUT` and the submodule variables are honoured).
    ///
    /// A job's environment is clean: only PATH, HOME, USER, LOGNAME, SHELL, LANG, LC_ALL, TZ
    /// and TMPDIR pass from the environment flotilla runs in, so that none of your tokens or
    /// credentials reach a job unasked (GitLab's shell executor passes everything). Give a
    /// job what it needs with --variable KEY=VALUE.
    Exec(ExecArgs),
    /// Show fleets, slots and jobs, and why the scaler decided what it decided.
    Status(StatusArgs),
    /// Work with configuration files.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Turn a GitLab Runner docker+machine configuration into a flotilla one: prints the new
    /// configuration, and a report of every setting to stderr; the old file is never
    /// written.
    Migrate(crate::migrate::MigrateArgs),
    /// Run a runner's scaler in virtual time against a workload and a simulated provider:
    /// instance-hours, idle slot-hours, job waits, plots, and a cost-versus-wait sweep.
    Simulate(crate::simulate::SimulateArgs),
    /// Add a runner to the configuration: verify its authentication token made in GitLab
    /// (`--token glrt-...`), or create it with a legacy `--registration-token`, then append
    /// its `[[runners]]` entry (like `gitlab-runner register`).
    Register(crate::register::RegisterArgs),
    /// Ask GitLab whether each runner of the configuration is still valid; `--delete` removes
    /// those it no longer knows (like `gitlab-runner verify`).
    Verify(crate::register::VerifyArgs),
    /// Delete a runner in GitLab (or, for one made in GitLab, this manager of it) and remove
    /// it from the configuration (like `gitlab-runner unregister`).
    Unregister(crate::register::UnregisterArgs),
    /// List the runners of the configuration (like `gitlab-runner list`).
    List(crate::register::ListArgs),
    /// Install flotilla as a systemd service running the configuration (like
    /// `gitlab-runner install`): writes the unit and enables it.
    Install(crate::service::InstallArgs),
    /// Stop and disable the service and remove its unit.
    Uninstall(crate::service::UninstallArgs),
    /// Start the service (`systemctl start`).
    Start(crate::service::ServiceArgs),
    /// Stop the service: no new jobs, running ones finish within `shutdown_timeout`.
    Stop(crate::service::ServiceArgs),
    /// Restart the service.
    Restart(crate::service::ServiceArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or powershell
    /// (`flotilla completion bash > /etc/bash_completion.d/flotilla`).
    Completion(crate::completion::CompletionArgs),
    /// Print the man page `flotilla(1)`, or write a page per command with `--dir`.
    Man(crate::completion::ManArgs),
    /// Start a saved job's microVM again (a snapshot from `FLOTILLA_SNAPSHOT`) and open a
    /// shell in it, or run a command; the VM is thrown away after, the snapshot kept.
    Debug(crate::debug::DebugArgs),
}

/// Options of `flotilla run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The configuration file (GitLab Runner's `config.toml`, with flotilla's extensions);
    /// without one, flotilla's place then gitlab-runner's (see `flotilla config check`).
    #[arg(short, long, value_name = "FILE", env = "FLOTILLA_CONFIG")]
    pub config: Option<PathBuf>,
    /// When the state file is corrupt, foreign or from a newer flotilla, move it aside (never
    /// deleted) and rebuild state from the instance groups' listings.
    #[arg(long)]
    pub rebuild_state: bool,
}

/// Options of `flotilla exec`.
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("selection").multiple(true).args(["jobs", "stage"])))]
pub struct ExecArgs {
    /// Jobs to run, alone (with `--needs`, with the jobs they need); all jobs when none is
    /// given.
    #[arg(value_name = "JOB")]
    pub jobs: Vec<String>,
    /// With named jobs or `--stage`: also run the jobs they need, transitively.
    #[arg(long, requires = "selection")]
    pub needs: bool,
    /// A configuration file describing the fleet; without one, `.flotilla.toml` in the project
    /// when there is one, else this host (see the first line of a run for its levels).
    #[arg(short, long, value_name = "FILE", env = "FLOTILLA_CONFIG")]
    pub config: Option<PathBuf>,
    /// The pipeline file, relative to the project directory.
    #[arg(long, value_name = "FILE", default_value = ".gitlab-ci.yml")]
    pub file: String,
    /// List the pipeline's jobs and stages instead of running them.
    #[arg(long)]
    pub list: bool,
    /// With `--list`: print the jobs as JSON.
    #[arg(long, requires = "list")]
    pub json: bool,
    /// List the pipeline's jobs as JSON (gitlab-ci-local's name for `--list --json`).
    #[arg(long)]
    pub list_json: bool,
    /// Run at most this many jobs at once (default: one per core, or the configured slots).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: Option<u32>,
    /// Run only the jobs of this stage (with `--needs`, and the jobs they need).
    #[arg(long, value_name = "STAGE")]
    pub stage: Option<String>,
    /// Set a CI/CD variable (repeatable).
    #[arg(long = "variable", value_name = "KEY=VALUE", value_parser = parse_variable)]
    pub variables: Vec<(String, String)>,
    /// Run every job at this isolation level (shorthand for `--variable
    /// FLOTILLA_ISOLATION=LEVEL`); a level the runner does not offer fails the job.
    #[arg(long, value_name = "LEVEL")]
    pub isolation: Option<String>,
    /// Give the main file's `spec:inputs` a value (repeatable); a number, boolean or array
    /// input reads the text as JSON (`--input count=3`, `--input 'targets=["a","b"]'`).
    #[arg(long = "input", value_name = "NAME=VALUE", value_parser = parse_variable)]
    pub inputs: Vec<(String, String)>,
    /// A directory `include: component` reads components from (repeatable): a component
    /// `<host>/<group>/<project>/<name>@<version>` is
    /// `DIR/<group>/<project>/templates/<name>.yml` (or `.../<name>/template.yml`), or
    /// `DIR/templates/...` when DIR is the component's project. The version is not checked.
    #[arg(long = "component-path", value_name = "DIR")]
    pub component_paths: Vec<PathBuf>,
    /// Also run manual jobs.
    #[arg(long)]
    pub manual: bool,
    /// After the run, also copy every job's artifacts into the working tree (each job's are
    /// kept in `.flotilla/artifacts/<job>/` in any case).
    #[arg(long, conflicts_with_all = ["list", "list_json"])]
    pub artifacts_to_source: bool,
    /// Show a progress display instead of every job's output as it comes.
    #[arg(long, short = 'q', conflicts_with = "follow")]
    pub quiet: bool,
    /// Stream only this job's log to the terminal (every job's, by default).
    #[arg(long, value_name = "JOB")]
    pub follow: Option<String>,
    /// The project directory holding `.gitlab-ci.yml` (default: the current directory).
    #[arg(long, visible_alias = "cwd", value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Options of `flotilla status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The configuration file of the flotilla to ask; without one, flotilla's place then
    /// gitlab-runner's (see `flotilla config check`).
    #[arg(short, long, value_name = "FILE", env = "FLOTILLA_CONFIG")]
    pub config: Option<PathBuf>,
    /// Print what it shows as JSON, for scripts (durations in seconds).
    #[arg(long)]
    pub json: bool,
}

/// `flotilla config ...`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Load a configuration file, print warnings to stderr and the normalized configuration
    /// (secrets redacted) to stdout; exit 1 on errors.
    Check(CheckArgs),
}

/// Options of `flotilla config check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The configuration file; when given, it is the one checked, whatever `--config` or
    /// `FLOTILLA_CONFIG` say (so a file can be checked in a shell that has one set).
    #[arg(value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// The configuration file; without one, flotilla's place then gitlab-runner's
    /// (`/etc/flotilla/config.toml`, `/etc/gitlab-runner/config.toml` as root;
    /// `~/.config/flotilla/config.toml`, `~/.gitlab-runner/config.toml` otherwise).
    #[arg(short, long, value_name = "FILE", env = "FLOTILLA_CONFIG")]
    pub config: Option<PathBuf>,
}

/// `flotilla --version`: the version, the commit and its date, and the providers this build
/// has beyond those every build has.
static LONG_VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(long_version);

fn long_version() -> String {
    let features = crate::registry::features();
    format!(
        "{} (commit {}, {}; features: {})",
        env!("CARGO_PKG_VERSION"),
        env!("FLOTILLA_COMMIT"),
        env!("FLOTILLA_COMMIT_DATE"),
        if features.is_empty() {
            "none".to_string()
        } else {
            features.join(", ")
        }
    )
}

/// Parses `KEY=VALUE`.
fn parse_variable(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("`{s}` is not KEY=VALUE")),
    }
}

/// The binary's entry point: parse arguments, set up logging, run the command.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with status 0, usage errors to stderr with 2.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    // `exec`, `simulate` and `migrate` talk to a person: only warnings and errors unless
    // asked for more (a simulation's scaler decides thousands of times a simulated day).
    let mut default_level = match cli.command {
        Command::Exec(_) | Command::Simulate(_) | Command::Migrate(_) | Command::Debug(_) => "warn",
        _ => "info",
    };
    let mut format = cli.log_format;
    // `run` takes the configuration's `log_level` and `log_format`, as `gitlab-runner run`
    // does; the command line (and `RUST_LOG`) still win.
    if let Command::Run(args) = &cli.command
        && let Ok(path) = crate::config::location::find(args.config.as_deref())
        && let Ok(loaded) = crate::config::Config::load(&path)
    {
        if let Some(level) = loaded.config.log_level {
            default_level = level.as_filter();
        }
        format = format.or(loaded.config.log_format.map(|f| match f {
            crate::config::LogFormat::Json => LogOutput::Json,
            crate::config::LogFormat::Runner | crate::config::LogFormat::Text => LogOutput::Text,
        }));
    }
    let format = format.unwrap_or(LogOutput::Text);
    if let Err(message) = init_logging(cli.log_level.as_deref(), format, default_level) {
        eprintln!("error: {message}");
        return ExitCode::from(2);
    }
    // Not locked for the whole command: log lines and progress write to stderr too.
    execute(&cli, &mut std::io::stdout(), &mut std::io::stderr())
}

/// Sets up `tracing` on stderr: `--log-level` if given, else `RUST_LOG`, else `default`.
fn init_logging(level: Option<&str>, format: LogOutput, default: &str) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let filter = match level {
        Some(level) => {
            EnvFilter::try_new(level).map_err(|e| format!("invalid --log-level `{level}`: {e}"))?
        }
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default)),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A subscriber may already be installed (tests); that is not an error worth stopping for.
    // Under systemd (stderr is the journal), journald stamps each line itself.
    let journald = stderr_is_the_journal();
    let _ = match format {
        LogOutput::Text if journald => builder
            .with_ansi(false)
            .without_time()
            .fmt_fields(printable_fields())
            .try_init(),
        LogOutput::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .fmt_fields(printable_fields())
            .try_init(),
        LogOutput::Json => builder.json().try_init(),
    };
    Ok(())
}

/// Whether stderr is connected to the journal: `JOURNAL_STREAM` names its device and inode
/// (`<dev>:<ino>`), as systemd documents (systemd.exec(5)); the variable alone is inherited by
/// any program a service or a terminal under systemd starts.
fn stderr_is_the_journal() -> bool {
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = stream.to_str().and_then(|s| s.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    nix::sys::stat::fstat(std::io::stderr()).is_ok_and(|st| st.st_dev == dev && st.st_ino == ino)
}

/// The text log's fields, each value with its control characters escaped: a job name, a
/// GitLab answer or a provider's error quoted in a log line cannot act on the terminal or
/// forge a line of its own (`tracing_subscriber` writes `%` values as they are).
fn printable_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> {
    use tracing_subscriber::field::MakeExt;
    tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let text = format!("{value:?}");
        let text = crate::printable::printable(&text);
        if field.name() == "message" {
            write!(w, "{text}")
        } else {
            write!(w, "{}={text}", field.name())
        }
    })
    .delimited(" ")
}

/// Runs a parsed command, writing its output to `out` and diagnostics to `err`.
pub fn execute(cli: &Cli, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    let out = &mut crate::printable::PrintableWriter::new(out);
    let err = &mut crate::printable::PrintableWriter::new(err);
    match &cli.command {
        Command::Config(ConfigCommand::Check(args)) => config_check(args, out, err),
        Command::Run(args) => crate::run::run(args, err),
        Command::Exec(args) => crate::exec::run(args, out, err),
        Command::Status(args) => crate::status::run(args, out, err),
        Command::Migrate(args) => crate::migrate::run(args, out, err),
        Command::Simulate(args) => crate::simulate::run(args, out, err),
        Command::Debug(args) => crate::debug::run(args, err),
        Command::Register(args) => crate::register::register(args, err),
        Command::Verify(args) => crate::register::verify(args, err),
        Command::Unregister(args) => crate::register::unregister(args, err),
        Command::List(args) => crate::register::list(args, out, err),
        Command::Install(args) => crate::service::install(args, err),
        Command::Uninstall(args) => crate::service::uninstall(args, err),
        Command::Start(args) => crate::service::control("start", args, err),
        Command::Stop(args) => crate::service::control("stop", args, err),
        Command::Restart(args) => crate::service::control("restart", args, err),
        Command::Completion(args) => crate::completion::completion(args, out, err),
        Command::Man(args) => crate::completion::man(args, out, err),
    }
}

/// Loads the configuration at `path`, writing its warnings, or every error, to `err`.
pub(crate) fn load_config(path: &std::path::Path, err: &mut dyn Write) -> Option<Config> {
    match Config::load(path) {
        Ok(loaded) => {
            for w in &loaded.warnings {
                let _ = writeln!(err, "warning: {w}");
            }
            Some(loaded.config)
        }
        Err(e) => {
            for e in e.errors() {
                let _ = writeln!(err, "error: {e}");
            }
            None
        }
    }
}

/// Whether every runner's provider is in this build and takes its `plugin_config`, as `run`
/// will build it (nothing is contacted); each one that does not is written to `err` (a
/// provider this build lacks with the cargo feature that brings it). A connector key this
/// machine cannot read is a warning: the file may be where the fleet runs, not here.
pub(crate) fn providers_available(config: &Config, err: &mut dyn Write) -> bool {
    let mut ok = true;
    for runner in &config.runners {
        if let Err(e) = crate::fleet::group(runner, config.flotilla.state_dir.as_deref()) {
            let _ = writeln!(err, "error: {e:#}");
            ok = false;
        }
        if let Err(e) = crate::fleet::group_settings(runner) {
            let _ = writeln!(
                err,
                "warning: {e:#} (flotilla run refuses to start the fleet on a machine where it \
                 cannot be read)"
            );
        }
    }
    ok
}

/// The configuration file a command uses: `explicit`, else the first that exists of the
/// default places ([`crate::config::location`]); when there is none, says where it looked.
pub(crate) fn config_path(
    explicit: Option<&std::path::Path>,
    err: &mut dyn Write,
) -> Option<PathBuf> {
    match crate::config::location::find(explicit) {
        Ok(path) => Some(path),
        Err(looked) => {
            let places: Vec<String> = looked.iter().map(|p| p.display().to_string()).collect();
            let _ = writeln!(
                err,
                "error: no configuration given (--config FILE or FLOTILLA_CONFIG) and none found in {}",
                places.join(", ")
            );
            None
        }
    }
}

/// `flotilla config check [FILE]`.
fn config_check(args: &CheckArgs, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    let explicit = args.file.as_deref().or(args.config.as_deref());
    let Some(path) = config_path(explicit, err) else {
        return ExitCode::FAILURE;
    };
    let Some(config) = load_config(&path, err) else {
        return ExitCode::FAILURE;
    };
    if !providers_available(&config, err) {
        return ExitCode::FAILURE;
    }
    match config.to_redacted_toml() {
        Ok(text) => {
            if out.write_all(text.as_bytes()).is_err() {
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = writeln!(err, "error: cannot print the configuration: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn exec_refuses_options_that_would_mean_nothing() {
        let refused = |args: &[&str]| {
            let err = Cli::try_parse_from([&["flotilla", "exec"], args].concat())
                .expect_err(&format!("{args:?} is refused"));
            assert!(
                matches!(
                    err.kind(),
                    clap::error::ErrorKind::ArgumentConflict
                        | clap::error::ErrorKind::MissingRequiredArgument
                ),
                "{args:?}: {err}"
            );
        };
        refused(&["--needs"]);
        refused(&["--json"]);
        refused(&["--list", "--artifacts-to-source"]);
        refused(&["--list-json", "--artifacts-to-source"]);
        refused(&["--quiet", "--follow", "build"]);
        for accepted in [
            &["build", "--needs"][..],
            &["--stage", "test", "--needs"],
            &["build", "--stage", "test"],
            &["--list", "--json"],
        ] {
            Cli::try_parse_from([&["flotilla", "exec"], accepted].concat())
                .unwrap_or_else(|e| panic!("{accepted:?}: {e}"));
        }
    }

    #[test]
    fn exec_options_parse() {
        let cli = Cli::try_parse_from([
            "flotilla",
            "exec",
            "build",
            "test",
            "--stage",
            "deploy",
            "--variable",
            "A=1=2",
            "--variable",
            "B=",
            "--manual",
            "--follow",
            "test",
            "--dir",
            "/src",
        ])
        .unwrap();
        let Command::Exec(e) = cli.command else {
            panic!("not exec");
        };
        assert_eq!(e.jobs, vec!["build", "test"]);
        assert_eq!(e.stage.as_deref(), Some("deploy"));
        assert_eq!(
            e.variables,
            vec![("A".into(), "1=2".into()), ("B".into(), String::new())]
        );
        assert!(e.manual && !e.list);
        assert_eq!(e.follow.as_deref(), Some("test"));
        assert_eq!(e.dir, Some(PathBuf::from("/src")));
        assert!(Cli::try_parse_from(["flotilla", "exec", "--variable", "NOEQUALS"]).is_err());
    }

    #[test]
    fn status_without_a_configuration_says_what_it_needs() {
        // Only where no configuration is found by default (none given, none in the places
        // looked at): a machine with one cannot show this.
        if let Some(found) = std::env::var_os("FLOTILLA_CONFIG")
            .map(PathBuf::from)
            .or_else(|| crate::config::location::find(None).ok())
        {
            eprintln!(
                "!!!!!!!! {} is this machine's default configuration: not checked",
                found.display()
            );
            return;
        }
        let cli = Cli::try_parse_from(["flotilla", "status"]).unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = execute(&cli, &mut out, &mut err);
        assert_eq!(code, ExitCode::from(2));
        assert!(String::from_utf8(err).unwrap().contains("--config FILE"));
        assert!(out.is_empty());
    }
}
