//! `flotilla simulate --config config.toml --workload FILE|synthetic`: what a runner's
//! policies and limits would cost, and how long its jobs would wait, before paying for it.
//!
//! The real scaler runs in virtual time with the runner's configuration (limits, timings,
//! policies with their periods and time zones), against the fake provider with latencies
//! from `--provider-profile` or `--create-latency`/`--delete-latency`, fed by a workload
//! from a CSV file or generated ([`flotilla_sim`]). It prints instance-hours (the cost),
//! idle slot-hours and the job wait p50/p95/p99, and writes plots of the fleet over time.
//! With `--sweep KEY=V1,V2,...` (any policy key, limit of `[runners.autoscaler]`,
//! `instance_acquire_timeout`, `limit`, `request_concurrency` or `concurrent`: [`sweep`]) it runs once per value and prints a
//! cost-versus-wait table and its plot.

mod capacity;
mod labels;
mod plot;
mod spec;
mod sweep;

use crate::config::parse_go_duration;
use anyhow::{Context, Result, anyhow, bail};
use chrono::{DateTime, Utc};
use flotilla_sim::{DailyPattern, JobSpec, Outcome, ProviderProfile, Synthetic};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Options of `flotilla simulate`.
#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// The configuration whose runner is simulated [default: found as `flotilla run` finds
    /// it].
    #[arg(short, long, value_name = "FILE", env = "FLOTILLA_CONFIG")]
    pub config: Option<PathBuf>,
    /// A CSV of `arrival,duration` lines (seconds from the start or RFC 3339 times; seconds
    /// or Go durations), or `synthetic` to generate one.
    #[arg(long, value_name = "FILE|synthetic")]
    pub workload: String,
    /// The runner to simulate (its `name`); default: the first with `[runners.autoscaler]`.
    #[arg(long, value_name = "NAME")]
    pub runner: Option<String>,
    /// Synthetic workload: mean jobs per hour over the week.
    #[arg(long, default_value_t = 600.0, value_name = "N")]
    pub jobs_per_hour: f64,
    /// Synthetic workload: mean jobs per burst (pipelines start several jobs at once); 1
    /// means none.
    #[arg(long, default_value_t = 1.0, value_name = "N")]
    pub burstiness: f64,
    /// Synthetic workload: `flat`, `office` (weekdays 08-18 UTC busy, weekends quiet) or 24
    /// comma-separated hourly weights.
    #[arg(long, default_value = "office", value_name = "PATTERN")]
    pub daily: String,
    /// Synthetic workload: the median job duration (a Go duration).
    #[arg(long, default_value = "5m", value_name = "DURATION")]
    pub job_duration: String,
    /// Synthetic workload: the spread of job durations (log-normal sigma).
    #[arg(long, default_value_t = 0.8, value_name = "SIGMA")]
    pub duration_sigma: f64,
    /// Synthetic workload: days of arrivals.
    #[arg(long, default_value_t = 7.0, value_name = "DAYS")]
    pub days: f64,
    /// Provider latencies by name: instant, docker, cloud-vm, windows-vm.
    #[arg(long, default_value = "cloud-vm", value_name = "NAME")]
    pub provider_profile: String,
    /// Time from a request to a running instance: `60s` or a range `40s..90s` (overrides the
    /// profile).
    #[arg(long, value_name = "RANGE")]
    pub create_latency: Option<String>,
    /// Time from a deletion to the instance gone (overrides the profile).
    #[arg(long, value_name = "RANGE")]
    pub delete_latency: Option<String>,
    /// When the simulation starts (RFC 3339); policies' periods follow this calendar.
    /// Default: next Monday 00:00 UTC.
    #[arg(long, value_name = "TIME")]
    pub start: Option<String>,
    /// Seed of the workload and the provider.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run once per value and print a cost-versus-wait table: a policy key
    /// (`idle_count=0,2,4`, `idle_time=5m,30m`, `scale_factor=0,0.5`, `scale_factor_limit`,
    /// `preemptive_mode=true,false`: set in every policy), a limit (`max_instances`,
    /// `capacity_per_instance`, `max_use_count`), `instance_acquire_timeout=5m,15m`, or
    /// `limit`, `request_concurrency`, `concurrent`.
    #[arg(long, value_name = "KEY=V1,V2,...")]
    pub sweep: Option<String>,
    /// Where the plots go (created if missing).
    #[arg(long, default_value = "simulate-plots", value_name = "DIR")]
    pub plots: PathBuf,
}

/// `flotilla simulate`.
pub fn run(args: &SimulateArgs, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    match simulate(args, out, err) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(err, "error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// `60s` or `40s..90s`.
pub(crate) fn parse_range(s: &str) -> Result<(Duration, Duration)> {
    let one = |v: &str| parse_go_duration(v.trim()).map_err(|e| anyhow!("latency `{v}`: {e}"));
    match s.split_once("..") {
        Some((a, b)) => {
            let (a, b) = (one(a)?, one(b)?);
            if a > b {
                bail!("latency range `{s}` runs backwards");
            }
            Ok((a, b))
        }
        None => {
            let d = one(s)?;
            Ok((d, d))
        }
    }
}

/// `flat`, `office` or 24 weights.
pub(crate) fn parse_daily(s: &str) -> Result<DailyPattern> {
    match s {
        "flat" => Ok(DailyPattern::Flat),
        "office" => Ok(DailyPattern::Office),
        list => {
            let w: Vec<f64> = list
                .split(',')
                .map(|x| x.trim().parse::<f64>())
                .collect::<Result<_, _>>()
                .map_err(|_| anyhow!("--daily `{s}` is flat, office or 24 numbers"))?;
            let w: [f64; 24] = w
                .try_into()
                .map_err(|_| anyhow!("--daily needs 24 hourly weights"))?;
            if w.iter().any(|x| !(x.is_finite() && *x >= 0.0)) {
                bail!("--daily weights must be 0 or more");
            }
            Ok(DailyPattern::Hourly(w))
        }
    }
}

/// Next Monday 00:00 UTC (today when it is Monday).
fn next_monday() -> DateTime<Utc> {
    use chrono::{Datelike, Duration as D, TimeZone};
    let now = Utc::now();
    let days = (7 - now.weekday().num_days_from_monday()) % 7;
    let day = now.date_naive() + D::days(i64::from(days));
    Utc.from_utc_datetime(&day.and_hms_opt(0, 0, 0).unwrap_or_default())
}

fn simulate(args: &SimulateArgs, out: &mut dyn Write, err: &mut dyn Write) -> Result<()> {
    let Some(path) = crate::cli::config_path(args.config.as_deref(), err) else {
        bail!("no configuration to simulate");
    };
    let Some(config) = crate::cli::load_config(&path, err) else {
        bail!("the configuration does not load");
    };
    let start = match &args.start {
        Some(s) => DateTime::parse_from_rfc3339(s)
            .with_context(|| format!("--start `{s}`"))?
            .with_timezone(&Utc),
        None => next_monday(),
    };
    let mut provider = ProviderProfile::named(&args.provider_profile).ok_or_else(|| {
        anyhow!(
            "--provider-profile `{}`: known are {}",
            args.provider_profile,
            ProviderProfile::NAMES.join(", ")
        )
    })?;
    if let Some(r) = &args.create_latency {
        provider.create = parse_range(r)?;
    }
    if let Some(r) = &args.delete_latency {
        provider.delete = parse_range(r)?;
    }
    let sweep = args.sweep.as_deref().map(sweep::parse).transpose()?;
    let (runner, base) =
        spec::from_config(&config, args.runner.as_deref(), provider, start, args.seed)?;

    let made = Instant::now();
    let jobs: Vec<JobSpec> = if args.workload == "synthetic" {
        if !(args.days > 0.0 && args.jobs_per_hour > 0.0) {
            bail!("--days and --jobs-per-hour must be more than 0");
        }
        Synthetic {
            jobs_per_hour: args.jobs_per_hour,
            burstiness: args.burstiness,
            daily: parse_daily(&args.daily)?,
            median_duration: parse_go_duration(&args.job_duration)
                .map_err(|e| anyhow!("--job-duration: {e}"))?,
            duration_sigma: args.duration_sigma.max(0.0),
            span: Duration::from_secs_f64(args.days * 86400.0),
            seed: args.seed,
        }
        .generate(start)
    } else {
        let text = std::fs::read_to_string(&args.workload)
            .with_context(|| format!("reading the workload {}", args.workload))?;
        flotilla_sim::parse_csv(&text).with_context(|| format!("workload {}", args.workload))?
    };
    let _ = writeln!(
        err,
        "workload: {} jobs ({:.1} s to prepare)",
        jobs.len(),
        made.elapsed().as_secs_f64()
    );
    std::fs::create_dir_all(&args.plots)
        .with_context(|| format!("creating {}", args.plots.display()))?;

    let _ = writeln!(out, "runner {:?}: {}", runner.name, runner.summary);
    match sweep {
        None => {
            let t = Instant::now();
            // Nothing bounds the fleet (max_instances = 0, no limit): no most to compare
            // against.
            let throughput = capacity::most_at_once(&base)
                .map(|(slots, what)| (capacity::Throughput::of(&jobs, slots), slots, what));
            let outcome = flotilla_sim::run(&base, jobs)?;
            let wall = t.elapsed();
            print_outcome(out, &outcome, wall, start);
            print_capacity(out, &outcome, throughput.as_ref());
            let files = plot::fleet(&outcome, &args.plots, "simulate", &runner.name, start)?;
            let _ = writeln!(out, "plots: {}", files.join(", "));
        }
        Some((key, points)) => {
            let w = key.name().len().max(12);
            let _ = writeln!(
                out,
                "\n{:>w$}  {:>14}  {:>15}  {:>9}  {:>9}  {:>9}  {:>11}  {:>7}  {:>7}",
                key.name(),
                "instance-hours",
                "idle slot-hours",
                "wait p50",
                "wait p95",
                "wait p99",
                "failed 24 h",
                "no slot",
                "wall s"
            );
            let mut rows = Vec::new();
            let mut overloaded = Vec::new();
            for point in &points {
                let spec = spec::with_sweep(&base, &runner, key, point)?;
                let t = Instant::now();
                let o = flotilla_sim::run(&spec, jobs.clone())?;
                let wall = t.elapsed();
                let _ = writeln!(
                    out,
                    "{:>w$}  {:>14.1}  {:>15.1}  {:>8.1}s  {:>8.1}s  {:>8.1}s  {:>11}  {:>7}  {:>7.1}",
                    point.text,
                    o.instance_seconds / 3600.0,
                    o.idle_slot_seconds / 3600.0,
                    o.wait_quantile(0.5),
                    o.wait_quantile(0.95),
                    o.wait_quantile(0.99),
                    o.dropped_pending,
                    o.timed_out,
                    wall.as_secs_f64()
                );
                if let Some((slots, what)) = capacity::most_at_once(&spec) {
                    let t = capacity::Throughput::of(&jobs, slots);
                    if t.overloaded() {
                        overloaded.push(format!(
                            "{}={}: {slots} at once ({what}) run at most {:.0} jobs an hour",
                            key.name(),
                            point.text,
                            t.most_per_hour
                        ));
                    }
                }
                let _ = plot::fleet(
                    &o,
                    &args.plots,
                    &format!("simulate-{}-{}", key.name(), point.text),
                    &format!("{} ({} = {})", runner.name, key.name(), point.text),
                    start,
                )?;
                rows.push(plot::SweepRow {
                    label: format!("{}={}", key.name(), point.text),
                    instance_hours: o.instance_seconds / 3600.0,
                    p50: o.wait_quantile(0.5),
                    p95: o.wait_quantile(0.95),
                    p99: o.wait_quantile(0.99),
                });
            }
            if !overloaded.is_empty() {
                let arriving = capacity::Throughput::of(&jobs, 1).arriving_per_hour;
                let _ = writeln!(
                    out,
                    "the fleet cannot keep up with {arriving:.0} jobs an hour at {}",
                    overloaded.join("; ")
                );
            }
            let files = plot::sweep(&rows, key.name(), &args.plots, &runner.name)?;
            let _ = writeln!(
                out,
                "plots: {} (and one fleet plot per value)",
                files.join(", ")
            );
        }
    }
    Ok(())
}

/// Whether the fleet can keep up, and the jobs GitLab would have failed for waiting.
fn print_capacity(
    out: &mut dyn Write,
    o: &Outcome,
    throughput: Option<&(capacity::Throughput, u32, &'static str)>,
) {
    if let Some((t, slots, what)) = throughput
        && t.overloaded()
    {
        let _ = writeln!(
            out,
            "the fleet cannot keep up: jobs arrive at {:.0} an hour, and its {slots} slots \
             ({what}) run at most {:.0} an hour at the mean job duration; jobs queue up in \
             GitLab until it fails those pending for a day",
            t.arriving_per_hour, t.most_per_hour
        );
    }
    if o.dropped_pending > 0 {
        let _ = writeln!(
            out,
            "{} of {} jobs failed: still in GitLab's queue after its pending timeout (24 h), \
             GitLab fails them (stuck_or_timeout_failure) before a runner takes them; the \
             waits and the cost above are those of the jobs that ran",
            o.dropped_pending, o.jobs
        );
    }
}

fn print_outcome(out: &mut dyn Write, o: &Outcome, wall: Duration, start: DateTime<Utc>) {
    let days = o.span.as_secs_f64() / 86400.0;
    let end = start + chrono::Duration::seconds(o.span.as_secs() as i64);
    let _ = writeln!(
        out,
        "simulated {days:.2} days ({} to {}): {} jobs in {:.2} s of wall time ({:.0} jobs per second)",
        start.format("%Y-%m-%d %H:%M UTC"),
        end.format("%Y-%m-%d %H:%M UTC"),
        o.jobs,
        wall.as_secs_f64(),
        o.jobs as f64 / wall.as_secs_f64().max(1e-9)
    );
    let paid_slots = o.idle_slot_seconds + o.busy_slot_seconds;
    let _ = writeln!(
        out,
        "cost: {:.1} instance-hours (peak {} instances, {} increase calls)",
        o.instance_seconds / 3600.0,
        o.peak_instances,
        o.increases
    );
    let _ = writeln!(
        out,
        "slots: {:.1} busy slot-hours, {:.1} idle slot-hours ({:.0}% of ready slot time idle)",
        o.busy_slot_seconds / 3600.0,
        o.idle_slot_seconds / 3600.0,
        if paid_slots > 0.0 {
            100.0 * o.idle_slot_seconds / paid_slots
        } else {
            0.0
        }
    );
    let _ = writeln!(
        out,
        "job wait (queued to slot) of the {} jobs that got a slot: p50 {:.1} s, p95 {:.1} s, \
         p99 {:.1} s, max {:.1} s; {} of the {} jobs taken from GitLab's queue got no slot \
         within instance_acquire_timeout",
        o.served,
        o.wait_quantile(0.5),
        o.wait_quantile(0.95),
        o.wait_quantile(0.99),
        o.wait_quantile(1.0),
        o.timed_out,
        o.served + o.timed_out
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse() {
        assert_eq!(
            parse_range("40s..90s").unwrap(),
            (Duration::from_secs(40), Duration::from_secs(90))
        );
        assert_eq!(
            parse_range("2m").unwrap(),
            (Duration::from_secs(120), Duration::from_secs(120))
        );
        assert!(parse_range("90s..40s").is_err());
        assert_eq!(parse_daily("flat").unwrap(), DailyPattern::Flat);
        assert!(parse_daily("1,2").is_err());
        let w = vec!["1"; 24].join(",");
        assert_eq!(parse_daily(&w).unwrap(), DailyPattern::Hourly([1.0; 24]));
    }
}
