//! `flotilla migrate OLD.toml`: a `docker+machine` configuration as a flotilla one.
//!
//! The old file is read and never written. The new configuration goes to standard output
//! (or to `--output`, a new file that must not exist yet), the report to standard error:
//! every Docker Machine setting with its line and what became of it, every other setting
//! flotilla does not use with its line and why, and what is left to do (the instance group
//! Docker Machine's options describe must exist before a fleeting provider can scale it).
//!
//! Everything flotilla reads is kept as written, comments included (the document is edited
//! with `toml_edit`, not re-serialised); each `docker+machine` runner becomes a
//! `docker-autoscaler` runner whose `[runners.autoscaler]` is converted from
//! `[runners.machine]` ([`machine`]). The result is loaded as `flotilla config check` would
//! load it, and what that says is part of the report.

mod drivers;
mod machine;
mod periods;
mod report;

pub use drivers::PLACEHOLDER;
pub use report::{Item, Outcome, Report};

use crate::config::schema;
use crate::config::source::{KeyPath, SourceMap, Target as At};
use crate::config::{Config, DOCKER_MACHINE_EXECUTORS};
use drivers::Target;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use toml::de::DeTable;

/// Options of `flotilla migrate`.
#[derive(Debug, Clone, clap::Args)]
pub struct MigrateArgs {
    /// The GitLab Runner configuration with `docker+machine` runners (read, never written).
    #[arg(value_name = "OLD.toml", required_unless_present = "config")]
    pub file: Option<PathBuf>,
    /// The same, as the other commands take their configuration.
    #[arg(short, long, value_name = "OLD.toml", conflicts_with = "file")]
    pub config: Option<PathBuf>,
    /// Which provider the migrated runners use: the fleeting plugin matching each
    /// `MachineDriver` (`matching`: amazonec2 → aws, google → googlecloud, azure → azure),
    /// or flotilla's `docker` provider, to try the configuration on this machine.
    #[arg(long, value_enum, default_value_t = ProviderChoice::Matching)]
    pub provider: ProviderChoice,
    /// With `--provider docker`: the instance image (sshd and dockerd).
    #[arg(long, value_name = "IMAGE")]
    pub docker_image: Option<String>,
    /// Write the new configuration to this new file (refused if it exists) instead of
    /// standard output.
    #[arg(short, long, value_name = "NEW.toml")]
    pub output: Option<PathBuf>,
}

/// `--provider`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProviderChoice {
    /// The fleeting plugin for the same cloud.
    Matching,
    /// flotilla's docker provider.
    Docker,
}

/// Why a file cannot be migrated.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not TOML.
    #[error("{0}")]
    Syntax(String),
}

/// Migrates `text` (named `file` in messages).
pub fn migrate(
    text: &str,
    file: &str,
    provider: ProviderChoice,
    docker_image: Option<&str>,
) -> Result<(String, Report), MigrateError> {
    let (root, syntax) = DeTable::parse_recoverable(text);
    if let Some(e) = syntax.first() {
        let at =
            crate::config::source::location_of_offset(file, text, e.span().map_or(0, |s| s.start));
        return Err(MigrateError::Syntax(format!("{at}: {}", e.message())));
    }
    let map = SourceMap::new(file, text, root);
    let value: toml::Table =
        toml::from_str(text).map_err(|e| MigrateError::Syntax(format!("{file}: {e}")))?;
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| MigrateError::Syntax(format!("{file}: {e}")))?;
    let target = match provider {
        ProviderChoice::Matching => Target::Matching,
        ProviderChoice::Docker => Target::Docker {
            image: docker_image.map(str::to_string),
        },
    };
    let mut report = Report {
        source: file.to_string(),
        ..Report::default()
    };
    let root_path = KeyPath::root();

    // The global section.
    for (key, _) in &value {
        if key == "runners" {
            continue;
        }
        if !known(&root_path, key) {
            doc.remove(key);
            report.items.push(Item {
                line: map.locate(&root_path.key(key), At::Key).line,
                what: key.clone(),
                outcome: Outcome::Dropped(unused_reason("", key).into()),
            });
        }
    }

    let runners = value
        .get("runners")
        .and_then(toml::Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, runner) in runners.iter().enumerate() {
        let Some(r) = runner.as_table() else { continue };
        let path = root_path.key("runners").index(i);
        let Some(table) = doc
            .get_mut("runners")
            .and_then(toml_edit::Item::as_array_of_tables_mut)
            .and_then(|a| a.get_mut(i))
        else {
            continue;
        };
        migrate_runner(r, &path, table, &map, &target, &mut report);
    }

    let mut output = doc.to_string();
    if !output.ends_with('\n') {
        output.push('\n');
    }
    match Config::from_str(&output, file) {
        Ok(loaded) => {
            report.check = loaded
                .warnings
                .iter()
                .map(|w| format!("warning: {w}"))
                .collect();
        }
        Err(e) => {
            report.check = e.errors().iter().map(|e| format!("error: {e}")).collect();
        }
    }
    report.items.sort_by_key(|i| i.line);
    Ok((output, report))
}

/// One `[[runners]]` entry.
fn migrate_runner(
    r: &toml::Table,
    path: &KeyPath,
    table: &mut toml_edit::Table,
    map: &SourceMap<'_>,
    target: &Target,
    report: &mut Report,
) {
    let name = r
        .get("name")
        .and_then(toml::Value::as_str)
        .unwrap_or("")
        .to_string();
    let executor = r
        .get("executor")
        .and_then(toml::Value::as_str)
        .unwrap_or("");
    let is_machine = DOCKER_MACHINE_EXECUTORS.contains(&executor);
    let line = |p: &KeyPath| map.locate(p, At::Key).line;

    for (key, value) in r {
        let p = path.key(key);
        match key.as_str() {
            "machine" | "executor" => {}
            "docker" => {
                if let Some(d) = value.as_table() {
                    migrate_docker(d, &p, table, map, report);
                }
            }
            "cache" => {
                if let Some(c) = value.as_table() {
                    migrate_cache(c, &p, table, map, report);
                }
            }
            k if known(path, k) => {}
            k => {
                table.remove(k);
                report.items.push(Item {
                    line: line(&p),
                    what: format!("[runners] {k}"),
                    outcome: Outcome::Dropped(unused_reason("runners", k).into()),
                });
            }
        }
    }
    if !is_machine {
        if r.contains_key("machine") {
            table.remove("machine");
            report.items.push(Item {
                line: line(&path.key("machine")),
                what: "[runners.machine]".into(),
                outcome: Outcome::Dropped(format!(
                    "used only by the docker+machine executor; this runner's is `{executor}`"
                )),
            });
        }
        return;
    }
    report.converted.push(if name.is_empty() {
        format!("#{}", report.converted.len() + 1)
    } else {
        name.clone()
    });
    // The value changes; its place, indentation and comment stay.
    if let Some(v) = table
        .get_mut("executor")
        .and_then(toml_edit::Item::as_value_mut)
    {
        let decor = v.decor().clone();
        *v = toml_edit::Value::from("docker-autoscaler");
        *v.decor_mut() = decor;
    }
    report.items.push(Item {
        line: line(&path.key("executor")),
        what: format!("executor = {executor:?}"),
        outcome: Outcome::Carried("executor = \"docker-autoscaler\"".into()),
    });
    let limit = r
        .get("limit")
        .and_then(toml::Value::as_integer)
        .and_then(|l| u32::try_from(l).ok())
        .unwrap_or(0);
    if r.contains_key("limit") {
        report.items.push(Item {
            line: line(&path.key("limit")),
            what: format!("limit = {limit}"),
            outcome: Outcome::Carried(
                "limit, and max_instances (Docker Machine's limit counts VMs in every state)"
                    .into(),
            ),
        });
    }
    let empty = toml::Table::new();
    let machine_table = r
        .get("machine")
        .and_then(toml::Value::as_table)
        .unwrap_or(&empty);
    let converted = machine::convert(
        &machine::MachineInput {
            table: machine_table,
            path: path.key("machine"),
            map,
            runner_name: &name,
            limit,
        },
        target,
    );
    table.remove("machine");
    let mut autoscaler = converted.autoscaler;
    indent(&mut autoscaler, 1);
    autoscaler.decor_mut().set_prefix(
        "\n  # converted by `flotilla migrate` from [runners.machine] (Docker Machine)\n  ",
    );
    table.insert("autoscaler", toml_edit::Item::Table(autoscaler));
    report.items.extend(converted.items);
    report.todo.extend(
        converted
            .todo
            .into_iter()
            .map(|t| format!("runner {name:?}: {t}")),
    );
}

/// `[runners.docker]`: keys flotilla's docker isolation does not use are left out.
fn migrate_docker(
    d: &toml::Table,
    path: &KeyPath,
    runner: &mut toml_edit::Table,
    map: &SourceMap<'_>,
    report: &mut Report,
) {
    let Some(table) = runner
        .get_mut("docker")
        .and_then(toml_edit::Item::as_table_like_mut)
    else {
        return;
    };
    for (key, value) in d {
        let p = path.key(key);
        // Said, because it matters most: docker isolation runs the job's containers
        // privileged, as docker+machine's did (Docker-in-Docker builds need it).
        if key == "privileged" && value.as_bool() == Some(true) {
            report.items.push(Item {
                line: map.locate(&p, At::Key).line,
                what: "[runners.docker] privileged = true".into(),
                outcome: Outcome::Carried(
                    "[runners.docker] privileged (the docker isolation level's containers)".into(),
                ),
            });
        }
        let drop = if known(path, key) {
            None
        } else {
            Some(unused_reason("runners.docker", key))
        };
        if let Some(why) = drop {
            table.remove(key);
            report.items.push(Item {
                line: map.locate(&p, At::Key).line,
                what: format!("[runners.docker] {key}"),
                outcome: Outcome::Dropped(why.into()),
            });
        }
    }
}

/// The S3 keys GitLab Runner before 11.3 read in `[runners.cache]` itself; it reads them only
/// in `[runners.cache.s3]` since, so a file written for those versions has them in the wrong
/// place (and no S3 cache on a GitLab Runner of today).
const LEGACY_CACHE_KEYS: [&str; 6] = [
    "ServerAddress",
    "AccessKey",
    "SecretKey",
    "BucketName",
    "BucketLocation",
    "Insecure",
];

/// `[runners.cache]`: carried, with the legacy S3 keys moved into `[runners.cache.s3]`
/// (where one is already set there, the old one is dropped).
fn migrate_cache(
    c: &toml::Table,
    path: &KeyPath,
    table: &mut toml_edit::Table,
    map: &SourceMap<'_>,
    report: &mut Report,
) {
    let Some(cache) = table
        .get_mut("cache")
        .and_then(toml_edit::Item::as_table_mut)
    else {
        return;
    };
    let position = cache.position();
    for key in LEGACY_CACHE_KEYS {
        let Some(value) = cache.remove(key) else {
            continue;
        };
        let s3 = cache
            .entry("s3")
            .or_insert_with(|| {
                // Right below [runners.cache], not after every other table of the file.
                let mut t = toml_edit::Table::new();
                t.set_position(position);
                toml_edit::Item::Table(t)
            })
            .as_table_mut();
        let line = map.locate(&path.key(key), At::Key).line;
        let what = format!("[runners.cache] {key}");
        let outcome = match s3 {
            Some(s3) if !s3.contains_key(key) => {
                s3.insert(key, value);
                Outcome::Approximated {
                    to: format!("[runners.cache.s3] {key}"),
                    why: "GitLab Runner reads S3 settings only in [runners.cache.s3] since \
                          11.3, and ignores them in [runners.cache]"
                        .into(),
                }
            }
            _ => Outcome::Dropped("[runners.cache.s3] sets it already".into()),
        };
        report.items.push(Item {
            line,
            what,
            outcome,
        });
    }
    indent(cache, 1);
    let kind = c.get("Type").and_then(toml::Value::as_str).unwrap_or("");
    report.items.push(Item {
        line: map.locate(path, At::Key).line,
        what: "[runners.cache]".into(),
        outcome: match flotilla_cache::CacheKind::from_type(kind) {
            flotilla_cache::CacheKind::S3 => {
                Outcome::Carried("[runners.cache] (the S3 cache store)".into())
            }
            flotilla_cache::CacheKind::Gcs => {
                Outcome::Carried("[runners.cache] (the GCS cache store)".into())
            }
            flotilla_cache::CacheKind::Azure => {
                Outcome::Carried("[runners.cache] (the Azure cache store)".into())
            }
            flotilla_cache::CacheKind::None => {
                Outcome::Carried("[runners.cache] (no Type: caches stay on the manager)".into())
            }
            flotilla_cache::CacheKind::Unsupported(other) => Outcome::Approximated {
                to: "[runners.cache]".into(),
                why: format!(
                    "GitLab Runner and flotilla have no {other:?} cache store: caches stay on \
                     the manager"
                ),
            },
        },
    });
}

/// Indents a new table as `gitlab-runner register` writes `config.toml`: two spaces per
/// level for headers, keys one level deeper.
fn indent(t: &mut toml_edit::Table, level: usize) {
    let pad = "  ".repeat(level);
    let keys: Vec<String> = t.iter().map(|(k, _)| k.to_string()).collect();
    for k in keys {
        let is_value = t.get(&k).is_some_and(toml_edit::Item::is_value);
        if is_value {
            if let Some(mut key) = t.key_mut(&k) {
                key.leaf_decor_mut().set_prefix(format!("{pad}  "));
            }
            continue;
        }
        match t.get_mut(&k) {
            Some(toml_edit::Item::Table(sub)) => {
                indent(sub, level + 1);
                sub.decor_mut().set_prefix(format!("{pad}  "));
            }
            Some(toml_edit::Item::ArrayOfTables(list)) => {
                for sub in list.iter_mut() {
                    indent(sub, level + 1);
                    sub.decor_mut().set_prefix(format!("{pad}  "));
                }
            }
            _ => {}
        }
    }
}

/// Whether flotilla reads `key` in the table at `path`.
fn known(path: &KeyPath, key: &str) -> bool {
    schema::table_at(path).is_some_and(|t| t.keys.contains(&key))
}

/// Why flotilla leaves the GitLab setting `key` of `table` out.
fn unused_reason(table: &str, key: &str) -> &'static str {
    crate::config::schema::unused_reason(table, key)
        .unwrap_or("flotilla does not use this GitLab setting")
}

/// `flotilla migrate`.
pub fn run(args: &MigrateArgs, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    // clap requires one of the two.
    let Some(old) = args.file.as_ref().or(args.config.as_ref()) else {
        let _ = writeln!(
            err,
            "error: no configuration to migrate: give OLD.toml or --config"
        );
        return ExitCode::from(2);
    };
    let file = old.display().to_string();
    let text = match std::fs::read_to_string(old) {
        Ok(t) => t,
        Err(source) => {
            let e = MigrateError::Read {
                path: old.clone(),
                source,
            };
            let _ = writeln!(err, "error: {e}");
            return ExitCode::from(2);
        }
    };
    let (output, report) = match migrate(&text, &file, args.provider, args.docker_image.as_deref())
    {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            return ExitCode::from(2);
        }
    };
    let written = match &args.output {
        None => out.write_all(output.as_bytes()).map_err(|e| e.to_string()),
        Some(path) => write_new(path, old, &output),
    };
    if let Err(e) = written {
        let _ = writeln!(err, "error: {e}");
        return ExitCode::FAILURE;
    }
    let _ = write!(err, "{report}");
    if let Some(path) = &args.output {
        let _ = writeln!(err, "\nwrote {}", path.display());
    }
    ExitCode::SUCCESS
}

/// Writes `text` to `path`, which must be a new file and not the old one.
fn write_new(path: &Path, old: &Path, text: &str) -> Result<(), String> {
    let same = match (std::fs::canonicalize(path), std::fs::canonicalize(old)) {
        (Ok(a), Ok(b)) => a == b,
        _ => path == old,
    };
    if same {
        return Err(format!(
            "{} is the file being migrated; migrate never writes over it",
            path.display()
        ));
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| {
            format!(
                "cannot create {} (it must not exist yet): {e}",
                path.display()
            )
        })?;
    f.write_all(text.as_bytes())
        .map_err(|e| format!("writing {}: {e}", path.display()))
}
