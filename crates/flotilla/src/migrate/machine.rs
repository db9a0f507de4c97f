//! One `docker+machine` runner's `[runners.machine]` as a `[runners.autoscaler]` table.
//!
//! The rules, from GitLab Runner's own definitions (`common/config.go` `DockerMachine`,
//! `executors/docker/machine/idle_limit_strategy.go`, `docs/configuration/autoscale.md`):
//!
//! - Docker Machine runs one job per VM: `capacity_per_instance = 1`.
//! - The runner's `limit` caps the VMs in every state: `max_instances = limit`.
//! - `MaxBuilds` (jobs before a VM is removed) is `max_use_count`.
//! - `IdleCount` / `IdleTime` are `idle_count` / `idle_time` (VMs and slots are the same
//!   with one slot per VM; `IdleTime` is seconds).
//! - With `IdleScaleFactor` > 0, Docker Machine keeps `floor(factor x VMs in use)` idle VMs,
//!   at least `IdleCountMin` (raised to 1) and at most `IdleCount`; taskscaler keeps
//!   `max(idle_count, min(ceil(scale_factor x in use), scale_factor_limit))`: so
//!   `idle_count = IdleCountMin`, `scale_factor = IdleScaleFactor`,
//!   `scale_factor_limit = IdleCount`.
//! - The root settings apply when no `[[runners.machine.autoscaling]]` section matches, and
//!   the last matching section wins: a first policy for every minute, then one policy per
//!   section in order, matches that (taskscaler's last match wins too).
//! - `MaxGrowthRate` caps VMs being created at once; taskscaler throttles creations per
//!   second with a token bucket (`scale_throttle`): `burst = MaxGrowthRate`, `limit = 1`.
//! - `MachineDriver` and `MachineOptions`: see [`super::drivers`].

use super::drivers::{self, OptionOutcome, Target};
use super::periods;
use super::report::{Item, Outcome};
use crate::config::format_go_duration;
use crate::config::source::{KeyPath, SourceMap, Target as At};
use std::time::Duration;
use toml_edit::{ArrayOfTables, Item as TomlItem, Table, Value};

/// A runner's Docker Machine settings and where they are.
pub(crate) struct MachineInput<'a> {
    /// `[runners.machine]`.
    pub(crate) table: &'a toml::Table,
    /// Its path (`runners[i].machine`).
    pub(crate) path: KeyPath,
    /// Positions in the old file.
    pub(crate) map: &'a SourceMap<'a>,
    /// The runner's name.
    pub(crate) runner_name: &'a str,
    /// The runner's `limit`.
    pub(crate) limit: u32,
}

/// The converted table, with what happened to each setting.
pub(crate) struct Converted {
    /// `[runners.autoscaler]`.
    pub(crate) autoscaler: Table,
    /// One per setting of `[runners.machine]`.
    pub(crate) items: Vec<Item>,
    /// What the operator must still do.
    pub(crate) todo: Vec<String>,
}

/// The idle settings of one schedule (the root or one autoscaling section).
#[derive(Debug, Clone, Default)]
struct Idle {
    count: i64,
    time: i64,
    factor: f64,
    count_min: i64,
}

struct Ctx<'a> {
    input: &'a MachineInput<'a>,
    items: Vec<Item>,
}

impl Ctx<'_> {
    fn line(&self, path: &KeyPath, at: At) -> usize {
        self.input.map.locate(path, at).line
    }

    fn push(&mut self, path: &KeyPath, what: String, outcome: Outcome) {
        let line = self.line(path, At::Key);
        self.items.push(Item {
            line,
            what,
            outcome,
        });
    }
}

/// Converts `[runners.machine]`.
pub(crate) fn convert(input: &MachineInput<'_>, target: &Target) -> Converted {
    let t = input.table;
    let mut cx = Ctx {
        input,
        items: Vec::new(),
    };
    let mut a = Table::new();
    let mut todo = Vec::new();

    let int = |key: &str| t.get(key).and_then(toml::Value::as_integer);
    let float = |key: &str| {
        t.get(key)
            .and_then(|v| v.as_float().or_else(|| v.as_integer().map(|i| i as f64)))
    };
    let driver = t.get("MachineDriver").and_then(toml::Value::as_str);
    let options: Vec<String> = t
        .get("MachineOptions")
        .and_then(toml::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let max_builds = int("MaxBuilds").unwrap_or(0).max(0);
    let plan = drivers::plan(driver, &options, target, input.runner_name, input.limit);

    // Provider first: it is what the table is about.
    a.insert("plugin", TomlItem::Value(plan.plugin.clone().into()));
    a.insert("capacity_per_instance", TomlItem::Value(1i64.into()));
    a.insert("max_use_count", TomlItem::Value(max_builds.into()));
    a.insert(
        "max_instances",
        TomlItem::Value(i64::from(input.limit).into()),
    );
    if input.limit == 0 {
        todo.push(format!(
            "runner {:?} has no limit: max_instances = 0 lets the fleet grow without bound; \
             set a limit",
            input.runner_name
        ));
    }

    let root = Idle {
        count: int("IdleCount").unwrap_or(0),
        time: int("IdleTime").unwrap_or(0),
        factor: float("IdleScaleFactor").unwrap_or(0.0),
        count_min: int("IdleCountMin").unwrap_or(0),
    };
    let mut policies = ArrayOfTables::new();
    let (first, notes) = policy(&root, &["* * * * *".to_string()], None);
    policies.push(first);

    let path = input.path.clone();
    for (key, value) in t {
        let p = path.key(key);
        match key.as_str() {
            "IdleCount" | "IdleTime" | "IdleScaleFactor" | "IdleCountMin" => {
                let to = match key.as_str() {
                    "IdleCount" if root.factor > 0.0 => "policy[0].scale_factor_limit",
                    "IdleCount" => "policy[0].idle_count",
                    "IdleTime" => "policy[0].idle_time",
                    "IdleScaleFactor" => "policy[0].scale_factor",
                    _ => "policy[0].idle_count",
                };
                let what = format!("{key} = {value}");
                let note = notes.iter().find(|(k, _)| k == key).map(|(_, n)| n.clone());
                let outcome = match (value.is_integer() || value.is_float(), note) {
                    (false, _) => Outcome::Dropped(format!("{key} must be a number")),
                    (true, Some(why)) => Outcome::Approximated { to: to.into(), why },
                    (true, None) => Outcome::Carried(to.into()),
                };
                cx.push(&p, what, outcome);
            }
            "MaxBuilds" => cx.push(
                &p,
                format!("MaxBuilds = {value}"),
                Outcome::Carried("max_use_count".into()),
            ),
            "MaxGrowthRate" => {
                let n = value.as_integer().unwrap_or(0);
                if n > 0 {
                    let mut th = Table::new();
                    th.insert("limit", TomlItem::Value(1i64.into()));
                    th.insert("burst", TomlItem::Value(n.into()));
                    a.insert("scale_throttle", TomlItem::Table(th));
                    cx.push(
                        &p,
                        format!("MaxGrowthRate = {n}"),
                        Outcome::Approximated {
                            to: "scale_throttle (limit = 1, burst = MaxGrowthRate)".into(),
                            why: format!(
                                "Docker Machine creates at most {n} VMs at a time; flotilla \
                                 throttles creations per second: {n} at once, then one more \
                                 per second"
                            ),
                        },
                    );
                } else {
                    cx.push(
                        &p,
                        format!("MaxGrowthRate = {value}"),
                        Outcome::Carried("scale_throttle (default: 100 per second)".into()),
                    );
                }
            }
            "MachineDriver" => {
                let outcome = if plan.driver_matched {
                    Outcome::Carried(format!("plugin = {:?}", plan.plugin))
                } else {
                    Outcome::Dropped(format!(
                        "no provider matches the `{}` driver",
                        value.as_str().unwrap_or("?")
                    ))
                };
                cx.push(&p, format!("MachineDriver = {value}"), outcome);
            }
            "MachineOptions" => {
                for (i, o) in options.iter().enumerate() {
                    let (name, _) = drivers::split_option(o);
                    let what = if drivers::is_secret_option(name) {
                        format!("MachineOptions {name}=(not shown)")
                    } else {
                        format!("MachineOptions {o}")
                    };
                    let line = cx.line(&p.index(i), At::Value);
                    let outcome = match plan.options.get(i) {
                        Some(OptionOutcome::Carried(to)) => Outcome::Carried(to.clone()),
                        Some(OptionOutcome::Dropped(why)) => Outcome::Dropped(why.clone()),
                        None => Outcome::Dropped("not read".into()),
                    };
                    cx.items.push(Item {
                        line,
                        what,
                        outcome,
                    });
                }
            }
            "MachineName" => cx.push(
                &p,
                format!("MachineName = {value}"),
                Outcome::Dropped("instances are named by the provider (the instance group)".into()),
            ),
            "MachineOptionsWithName" => cx.push(
                &p,
                "MachineOptionsWithName".into(),
                Outcome::Dropped("per-VM options belong to the instance group's template".into()),
            ),
            "MaxRemovalAttempts" => cx.push(
                &p,
                format!("MaxRemovalAttempts = {value}"),
                Outcome::Dropped(
                    "flotilla retries a deletion every deletion_retry_interval until the \
                     provider confirms it"
                        .into(),
                ),
            ),
            "autoscaling" => {
                let sections = value.as_array().map(Vec::as_slice).unwrap_or(&[]);
                for (i, section) in sections.iter().enumerate() {
                    if let Some(section) = section.as_table() {
                        autoscaling(&mut cx, &p.index(i), section, &mut policies);
                    }
                }
            }
            "OffPeakPeriods" => {
                let off = Idle {
                    count: int("OffPeakIdleCount").unwrap_or(0),
                    time: int("OffPeakIdleTime").unwrap_or(0),
                    ..Idle::default()
                };
                let tz = t
                    .get("OffPeakTimezone")
                    .and_then(toml::Value::as_str)
                    .filter(|s| !s.is_empty());
                let list: Vec<String> = value
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                let (converted, problems) = convert_periods(&list);
                if converted.is_empty() {
                    cx.push(
                        &p,
                        "OffPeakPeriods".into(),
                        Outcome::Dropped(format!("no period converts: {}", problems.join("; "))),
                    );
                } else {
                    let (mut table, _) = policy(&off, &converted, tz);
                    table
                        .decor_mut()
                        .set_prefix("    # from the deprecated OffPeak settings\n");
                    policies.push(table);
                    let mut why = "GitLab Runner 14.0 and later ignore the OffPeak settings \
                                   (they only log a deprecation warning); this policy makes \
                                   them take effect again, as GitLab's warning asks"
                        .to_string();
                    if !problems.is_empty() {
                        why.push_str(&format!("; {}", problems.join("; ")));
                    }
                    cx.push(
                        &p,
                        format!("OffPeakPeriods = {value}"),
                        Outcome::Approximated {
                            to: format!("policy[{}]", policies.len() - 1),
                            why,
                        },
                    );
                }
            }
            "OffPeakTimezone" | "OffPeakIdleCount" | "OffPeakIdleTime" => {
                let has_periods = t
                    .get("OffPeakPeriods")
                    .and_then(toml::Value::as_array)
                    .is_some_and(|a| !a.is_empty());
                let outcome = if has_periods {
                    Outcome::Carried("the OffPeak policy".into())
                } else {
                    Outcome::Dropped("no OffPeakPeriods: it never applied".into())
                };
                cx.push(&p, format!("{key} = {value}"), outcome);
            }
            other => cx.push(
                &p,
                format!("{other} = {value}"),
                Outcome::Dropped("not a Docker Machine setting flotilla knows".into()),
            ),
        }
    }
    a.insert("policy", TomlItem::ArrayOfTables(policies));
    if !plan.plugin_config.is_empty() {
        let mut pc = Table::new();
        for (k, v) in &plan.plugin_config {
            pc.insert(k, TomlItem::Value(v.clone()));
        }
        a.insert("plugin_config", TomlItem::Table(pc));
    }
    if !plan.connector.is_empty() {
        let mut cc = Table::new();
        for (k, v) in &plan.connector {
            cc.insert(k, TomlItem::Value(v.clone()));
        }
        a.insert("connector_config", TomlItem::Table(cc));
    }
    todo.extend(plan.todo);
    cx.items.sort_by_key(|i| i.line);
    Converted {
        autoscaler: a,
        items: cx.items,
        todo,
    }
}

/// One `[[runners.machine.autoscaling]]` section as a policy.
fn autoscaling(cx: &mut Ctx<'_>, path: &KeyPath, s: &toml::Table, policies: &mut ArrayOfTables) {
    let int = |key: &str| s.get(key).and_then(toml::Value::as_integer);
    let idle = Idle {
        count: int("IdleCount").unwrap_or(0),
        time: int("IdleTime").unwrap_or(0),
        factor: s
            .get("IdleScaleFactor")
            .and_then(|v| v.as_float().or_else(|| v.as_integer().map(|i| i as f64)))
            .unwrap_or(0.0),
        count_min: int("IdleCountMin").unwrap_or(0),
    };
    let list: Vec<String> = s
        .get("Periods")
        .and_then(toml::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let tz = s
        .get("Timezone")
        .and_then(toml::Value::as_str)
        .filter(|z| !z.is_empty());
    let tz_ok = tz.is_none_or(|z| z == "Local" || z.parse::<chrono_tz::Tz>().is_ok());
    let (converted, problems) = convert_periods(&list);
    let index = policies.len();
    let to = format!("policy[{index}]");
    if converted.is_empty() || !tz_ok {
        let why = if !tz_ok {
            format!("unknown time zone {:?}", tz.unwrap_or(""))
        } else if list.is_empty() {
            "the section has no Periods: it never applied".to_string()
        } else {
            format!("no period converts: {}", problems.join("; "))
        };
        cx.push(
            path,
            "[[runners.machine.autoscaling]]".into(),
            Outcome::Dropped(why),
        );
        return;
    }
    let (table, notes) = policy(&idle, &converted, tz);
    policies.push(table);
    for (key, value) in s {
        let p = path.key(key);
        let what = format!("autoscaling {key} = {value}");
        let outcome = match key.as_str() {
            "Periods" if problems.is_empty() => Outcome::Carried(format!("{to}.periods")),
            "Periods" => Outcome::Approximated {
                to: format!("{to}.periods"),
                why: problems.join("; "),
            },
            "Timezone" => Outcome::Carried(format!("{to}.timezone")),
            "IdleCount" | "IdleTime" | "IdleScaleFactor" | "IdleCountMin" => {
                let field = match key.as_str() {
                    "IdleCount" if idle.factor > 0.0 => "scale_factor_limit",
                    "IdleCount" | "IdleCountMin" => "idle_count",
                    "IdleTime" => "idle_time",
                    _ => "scale_factor",
                };
                match notes.iter().find(|(k, _)| k == key) {
                    Some((_, why)) => Outcome::Approximated {
                        to: format!("{to}.{field}"),
                        why: why.clone(),
                    },
                    None => Outcome::Carried(format!("{to}.{field}")),
                }
            }
            _ => Outcome::Dropped("not an autoscaling setting".into()),
        };
        cx.push(&p, what, outcome);
    }
}

/// Converts periods; returns the converted ones and what was lost or refused.
fn convert_periods(list: &[String]) -> (Vec<String>, Vec<String>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for p in list {
        match periods::convert(p) {
            Ok(c) => {
                if let Some(a) = c.approximation {
                    problems.push(format!("`{p}`: {a}"));
                }
                out.push(c.period);
            }
            Err(e) => problems.push(format!("dropped {e}")),
        }
    }
    (out, problems)
}

/// A policy table for `idle` over `periods`; returns it with notes per Docker Machine key
/// that converts only approximately.
fn policy(idle: &Idle, periods: &[String], tz: Option<&str>) -> (Table, Vec<(String, String)>) {
    let mut t = Table::new();
    let mut notes = Vec::new();
    let list: toml_edit::Array = periods.iter().map(String::as_str).collect();
    t.insert("periods", TomlItem::Value(Value::Array(list)));
    if let Some(tz) = tz {
        t.insert("timezone", TomlItem::Value(tz.into()));
    }
    let count = idle.count.max(0);
    if idle.factor > 0.0 && count > 0 {
        let min = idle.count_min.max(1);
        if idle.count_min < 1 {
            notes.push((
                "IdleCountMin".to_string(),
                "raised to 1, as Docker Machine does when IdleScaleFactor is used".to_string(),
            ));
        }
        t.insert("idle_count", TomlItem::Value(min.into()));
        t.insert("scale_factor", TomlItem::Value(idle.factor.into()));
        t.insert("scale_factor_limit", TomlItem::Value(count.into()));
        notes.push((
            "IdleScaleFactor".to_string(),
            "Docker Machine rounds factor x machines in use down, taskscaler rounds it up: \
             up to one more idle instance"
                .to_string(),
        ));
    } else {
        t.insert("idle_count", TomlItem::Value(count.into()));
        if idle.factor > 0.0 {
            notes.push((
                "IdleScaleFactor".to_string(),
                "has no effect with IdleCount = 0 in Docker Machine (no idle machine is \
                 kept); left out"
                    .to_string(),
            ));
        }
    }
    let secs = if idle.time < 1 {
        notes.push((
            "IdleTime".to_string(),
            format!(
                "IdleTime = {} removes idle machines at once; flotilla's smallest idle_time is 1s",
                idle.time
            ),
        ));
        1
    } else {
        idle.time as u64
    };
    t.insert(
        "idle_time",
        TomlItem::Value(format_go_duration(Duration::from_secs(secs)).into()),
    );
    (t, notes)
}
