//! `flotilla status`: what the state file of a configuration says about each fleet: who holds
//! its lease, the scaler's last decision and why, its instances, the slots held, and the jobs
//! not yet reported.
//!
//! It reads the store that `flotilla run` writes (`[flotilla] state_dir`), so it works whether
//! or not a manager is running, and opens it read-only: a missing file is reported, not
//! created; a file flotilla cannot use is refused with its path, as `flotilla run` refuses it;
//! a file of an older flotilla is read as it is, never migrated.

use crate::cli::StatusArgs;
use flotilla_store::{JobOutcome, JobRecord, Store};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

/// The state file's name in the state directory (as `flotilla run` names it).
const STATE_FILE: &str = "flotilla.db";

/// Runs `flotilla status`.
pub fn run(args: &StatusArgs, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    let Some(path) = crate::cli::config_path(args.config.as_deref(), err) else {
        return ExitCode::from(2);
    };
    let Some(config) = crate::cli::load_config(&path, err) else {
        return ExitCode::from(2);
    };
    let state_dir = config
        .flotilla
        .state_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(".flotilla"));
    let file = state_dir.join(STATE_FILE);
    if !file.exists() {
        let _ = writeln!(
            out,
            "no state at {}: `flotilla run` has not run with this configuration",
            file.display()
        );
        return ExitCode::SUCCESS;
    }
    let store = match Store::open_read_only(&file) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.json {
        return match status(&store, SystemTime::now()) {
            Ok(st) => match serde_json::to_string_pretty(&st) {
                Ok(json) => {
                    let _ = writeln!(out, "{json}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    let _ = writeln!(err, "error: {e}");
                    ExitCode::FAILURE
                }
            },
            Err(e) => {
                let _ = writeln!(err, "error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match report(&store, SystemTime::now()) {
        Ok(text) => {
            let _ = out.write_all(text.as_bytes());
            if let Some(address) = config.listen_address.as_deref() {
                let _ = writeln!(
                    out,
                    "\nlive while `flotilla run` runs: the status page at {} (and /metrics, \
                     /debug/health)",
                    live_url(address)
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Where a person on this machine opens the page of `listen_address`: an address that
/// listens everywhere is reached on `localhost`; port 0 is chosen at start.
fn live_url(listen_address: &str) -> String {
    let Some((host, port)) = listen_address.rsplit_once(':') else {
        return format!("`{listen_address}`");
    };
    if port == "0" {
        return "the address `flotilla run` logs at start (listen_address asks for any \
                free port)"
            .to_string();
    }
    let host = match host {
        "" | "0.0.0.0" | "[::]" => "localhost",
        h => h,
    };
    format!("http://{host}:{port}/")
}

/// What the state file says, as `--json` prints it and the text is made from.
#[derive(Debug, serde::Serialize)]
pub struct Status {
    /// The state file.
    pub state: String,
    /// Every fleet recorded in it.
    pub fleets: Vec<FleetStatus>,
}

/// One fleet.
#[derive(Debug, serde::Serialize)]
pub struct FleetStatus {
    /// The provider's id of the fleet.
    pub fleet: String,
    /// The runner's id at GitLab.
    pub runner: String,
    /// GitLab's URL, credentials removed.
    pub url: String,
    /// Who holds the lease, if anyone ever did.
    pub lease: Option<LeaseStatus>,
    /// The scaler's last decision.
    pub last_decision: Option<DecisionStatus>,
    /// Instances known.
    pub instances: Vec<InstanceStatus>,
    /// Instances requested and not seen yet.
    pub requested_in_flight: usize,
    /// Jobs not yet reported to GitLab.
    pub unreported_jobs: Vec<JobStatus>,
}

/// The lease.
#[derive(Debug, serde::Serialize)]
pub struct LeaseStatus {
    /// The manager holding it.
    pub holder: String,
    /// Whether it is still valid.
    pub held: bool,
    /// Seconds until it lapses, while held.
    pub expires_in_seconds: Option<u64>,
    /// Seconds since it lapsed, once it has.
    pub lapsed_seconds_ago: Option<u64>,
}

/// The scaler's last decision.
#[derive(Debug, serde::Serialize)]
pub struct DecisionStatus {
    /// Seconds since it was made.
    pub seconds_ago: u64,
    /// What it said.
    pub text: String,
}

/// Where a job runs.
#[derive(Debug, serde::Serialize)]
pub struct PlaceStatus {
    /// The instance.
    pub instance: String,
    /// The slot on it.
    pub slot: usize,
}

/// One instance.
#[derive(Debug, serde::Serialize)]
pub struct InstanceStatus {
    /// Its id.
    pub id: String,
    /// Its state.
    pub state: String,
    /// How it came to the fleet.
    pub origin: String,
    /// Jobs it ran.
    pub uses: u64,
    /// Slots held on it now.
    pub slots_held: usize,
    /// Why it is being removed, if it is.
    pub removing: Option<String>,
}

/// One job not yet reported.
#[derive(Debug, serde::Serialize)]
pub struct JobStatus {
    /// The job source (runner).
    pub source: String,
    /// GitLab's job id.
    pub job: String,
    /// Where it is.
    pub state: String,
    /// Its instance and slot, once it has one.
    pub place: Option<PlaceStatus>,
    /// Seconds since it started.
    pub started_seconds_ago: u64,
    /// Its outcome, once known.
    pub outcome: Option<String>,
}

/// The status of every fleet in `store`, as of `now`.
pub fn status(store: &Store, now: SystemTime) -> Result<Status, flotilla_store::StoreError> {
    let since = |t: SystemTime| now.duration_since(t).unwrap_or_default().as_secs();
    let mut fleets = Vec::new();
    for (scope, identity) in store.scopes()? {
        let lease = store.current_lease(scope)?.map(|lease| {
            let held = lease.expires_at > now;
            LeaseStatus {
                held,
                expires_in_seconds: held.then(|| {
                    lease
                        .expires_at
                        .duration_since(now)
                        .unwrap_or_default()
                        .as_secs()
                }),
                lapsed_seconds_ago: (!held).then(|| since(lease.expires_at)),
                holder: lease.holder.to_string(),
            }
        });
        let last_decision = store
            .last_decision(scope)?
            .map(|(at, text)| DecisionStatus {
                seconds_ago: since(at),
                text,
            });
        let fleet = store.load_fleet(scope)?;
        let instances = fleet
            .instances
            .iter()
            .map(|i| InstanceStatus {
                id: i.id.clone(),
                state: i.state.to_string(),
                origin: i.cause.as_str().to_string(),
                uses: u64::from(i.use_count),
                slots_held: fleet.acquisitions.iter().filter(|a| a.1 == i.id).count(),
                removing: i.removal.map(|r| r.to_string()),
            })
            .collect();
        let unreported_jobs = store
            .unfinished_jobs(scope)?
            .iter()
            .map(|j| JobStatus {
                source: j.source.clone(),
                job: j.job_id.clone(),
                state: j.state.as_str().to_string(),
                // A job recorded before it had a slot (as GitLab jobs are) has no instance yet.
                place: (!j.instance.is_empty()).then(|| PlaceStatus {
                    instance: j.instance.clone(),
                    slot: j.slot,
                }),
                started_seconds_ago: since(j.started_at),
                outcome: outcome(j),
            })
            .collect();
        fleets.push(FleetStatus {
            fleet: identity.provider_id.clone(),
            runner: identity.runner_id.clone(),
            url: identity.shown_url(),
            lease,
            last_decision,
            instances,
            requested_in_flight: fleet.requested_in_flight,
            unreported_jobs,
        });
    }
    Ok(Status {
        state: store.path().display().to_string(),
        fleets,
    })
}

/// The report for every fleet in `store`, as of `now`.
pub fn report(store: &Store, now: SystemTime) -> Result<String, flotilla_store::StoreError> {
    Ok(render(&status(store, now)?))
}

/// `status` as text.
fn render(status: &Status) -> String {
    let secs = Duration::from_secs;
    let mut s = format!("state: {}\n", status.state);
    if status.fleets.is_empty() {
        s.push_str("no fleet recorded yet\n");
    }
    for f in &status.fleets {
        s.push('\n');
        s.push_str(&format!(
            "fleet {} (runner {} at {})\n",
            f.fleet, f.runner, f.url
        ));
        match &f.lease {
            Some(l) => match l.expires_in_seconds {
                Some(left) => s.push_str(&format!(
                    "  managed by {}; its lease lapses in {} unless renewed\n",
                    l.holder,
                    human(secs(left))
                )),
                None => s.push_str(&format!(
                    "  not managed: the lease of {} lapsed {} ago\n",
                    l.holder,
                    human(secs(l.lapsed_seconds_ago.unwrap_or_default()))
                )),
            },
            None => s.push_str("  not managed: no lease\n"),
        }
        match &f.last_decision {
            Some(d) => s.push_str(&format!(
                "  last decision ({} ago): {}\n",
                human(secs(d.seconds_ago)),
                d.text
            )),
            None => s.push_str("  no decision recorded yet\n"),
        }
        s.push_str(&format!(
            "  instances: {} known, {} requested and not seen yet\n",
            f.instances.len(),
            f.requested_in_flight
        ));
        if !f.instances.is_empty() {
            let rows: Vec<Vec<String>> = f
                .instances
                .iter()
                .map(|i| {
                    vec![
                        i.id.clone(),
                        i.state.clone(),
                        i.origin.clone(),
                        i.uses.to_string(),
                        i.slots_held.to_string(),
                        i.removing.clone().unwrap_or_default(),
                    ]
                })
                .collect();
            table(
                &mut s,
                &["ID", "STATE", "ORIGIN", "USES", "SLOTS HELD", "REMOVING"],
                &rows,
            );
        }
        s.push_str(&format!(
            "  jobs not yet reported: {}\n",
            f.unreported_jobs.len()
        ));
        if !f.unreported_jobs.is_empty() {
            let rows: Vec<Vec<String>> = f
                .unreported_jobs
                .iter()
                .map(|j| {
                    let (instance, slot) = match &j.place {
                        Some(p) => (p.instance.clone(), p.slot.to_string()),
                        None => ("-".into(), "-".into()),
                    };
                    vec![
                        j.source.clone(),
                        j.job.clone(),
                        j.state.clone(),
                        instance,
                        slot,
                        format!("{} ago", human(secs(j.started_seconds_ago))),
                        j.outcome.clone().unwrap_or_default(),
                    ]
                })
                .collect();
            table(
                &mut s,
                &[
                    "SOURCE", "JOB", "STATE", "INSTANCE", "SLOT", "STARTED", "OUTCOME",
                ],
                &rows,
            );
        }
    }
    s
}

fn outcome(j: &JobRecord) -> Option<String> {
    Some(match j.outcome.as_ref()? {
        JobOutcome::Success => "success".into(),
        JobOutcome::Failed {
            failure_reason,
            exit_code: Some(code),
        } => format!("failed: {failure_reason} (exit code {code})"),
        JobOutcome::Failed { failure_reason, .. } => format!("failed: {failure_reason}"),
    })
}

/// Appends an indented table with aligned columns.
fn table(s: &mut String, header: &[&str], rows: &[Vec<String>]) {
    s.push_str(&crate::table::render("    ", header, rows));
}

/// `d` as a person reads it: `45s`, `3m12s`, `2h05m`, `3d04h`.
fn human(d: Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        3600..86400 => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d{:02}h", secs / 86400, secs % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_a_person_writes_them() {
        assert_eq!(human(Duration::from_secs(45)), "45s");
        assert_eq!(human(Duration::from_secs(192)), "3m12s");
        assert_eq!(human(Duration::from_secs(7500)), "2h05m");
        assert_eq!(human(Duration::from_secs(3 * 86400 + 4 * 3600)), "3d04h");
    }

    #[test]
    fn the_live_page_is_where_a_person_on_this_machine_opens_it() {
        assert_eq!(live_url(":9252"), "http://localhost:9252/");
        assert_eq!(live_url("0.0.0.0:9252"), "http://localhost:9252/");
        assert_eq!(live_url("[::]:9252"), "http://localhost:9252/");
        assert_eq!(live_url("127.0.0.1:9252"), "http://127.0.0.1:9252/");
        assert_eq!(live_url("[::1]:8093"), "http://[::1]:8093/");
        assert!(live_url("127.0.0.1:0").contains("logs at start"));
    }
}
