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

/// The report for every fleet in `store`, as of `now`.
pub fn report(store: &Store, now: SystemTime) -> Result<String, flotilla_store::StoreError> {
    let mut s = format!("state: {}\n", store.path().display());
    let scopes = store.scopes()?;
    if scopes.is_empty() {
        s.push_str("no fleet recorded yet\n");
    }
    for (scope, identity) in scopes {
        s.push('\n');
        s.push_str(&format!(
            "fleet {} (runner {} at {})\n",
            identity.provider_id,
            identity.runner_id,
            identity.shown_url()
        ));
        match store.current_lease(scope)? {
            Some(lease) if lease.expires_at > now => s.push_str(&format!(
                "  managed by {}; its lease lapses in {} unless renewed\n",
                lease.holder,
                human(lease.expires_at.duration_since(now).unwrap_or_default())
            )),
            Some(lease) => s.push_str(&format!(
                "  not managed: the lease of {} lapsed {} ago\n",
                lease.holder,
                human(now.duration_since(lease.expires_at).unwrap_or_default())
            )),
            None => s.push_str("  not managed: no lease\n"),
        }

        match store.last_decision(scope)? {
            Some((at, text)) => s.push_str(&format!(
                "  last decision ({} ago): {text}\n",
                human(now.duration_since(at).unwrap_or_default())
            )),
            None => s.push_str("  no decision recorded yet\n"),
        }

        let fleet = store.load_fleet(scope)?;
        s.push_str(&format!(
            "  instances: {} known, {} requested and not seen yet\n",
            fleet.instances.len(),
            fleet.requested_in_flight
        ));
        if !fleet.instances.is_empty() {
            let rows: Vec<Vec<String>> = fleet
                .instances
                .iter()
                .map(|i| {
                    let held = fleet.acquisitions.iter().filter(|a| a.1 == i.id).count();
                    vec![
                        i.id.clone(),
                        i.state.to_string(),
                        format!("{:?}", i.cause).to_lowercase(),
                        i.use_count.to_string(),
                        held.to_string(),
                        i.removal.map(|r| r.to_string()).unwrap_or_default(),
                    ]
                })
                .collect();
            table(
                &mut s,
                &["ID", "STATE", "ORIGIN", "USES", "SLOTS HELD", "REMOVING"],
                &rows,
            );
        }

        let jobs = store.unfinished_jobs(scope)?;
        s.push_str(&format!("  jobs not yet reported: {}\n", jobs.len()));
        if !jobs.is_empty() {
            let rows: Vec<Vec<String>> = jobs.iter().map(|j| job_row(j, now)).collect();
            table(
                &mut s,
                &[
                    "SOURCE", "JOB", "STATE", "INSTANCE", "SLOT", "STARTED", "OUTCOME",
                ],
                &rows,
            );
        }
    }
    Ok(s)
}

fn job_row(j: &JobRecord, now: SystemTime) -> Vec<String> {
    let outcome = match &j.outcome {
        None => String::new(),
        Some(JobOutcome::Success) => "success".into(),
        Some(JobOutcome::Failed {
            failure_reason,
            exit_code: Some(code),
        }) => format!("failed: {failure_reason} (exit code {code})"),
        Some(JobOutcome::Failed { failure_reason, .. }) => format!("failed: {failure_reason}"),
    };
    vec![
        j.source.clone(),
        j.job_id.clone(),
        j.state.as_str().to_string(),
        // A job recorded before it had a slot (as GitLab jobs are) has no instance yet.
        if j.instance.is_empty() {
            "-".into()
        } else {
            j.instance.clone()
        },
        if j.instance.is_empty() {
            "-".into()
        } else {
            j.slot.to_string()
        },
        format!(
            "{} ago",
            human(now.duration_since(j.started_at).unwrap_or_default())
        ),
        outcome,
    ]
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
