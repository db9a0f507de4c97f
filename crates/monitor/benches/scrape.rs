//! What one scrape of `/metrics` costs the daemon, for fleets of growing size, side by side
//! with what the Prometheus library alone costs for the same exposition (gathering and
//! encoding the registry, nothing read from the scalers): the difference is what reading
//! the scalers' ledgers and histories adds.
//!
//! ```text
//! cargo bench -p flotilla-monitor --bench scrape -- [SCRAPES]
//! ```
//!
//! Each fleet is real scalers on the fake provider (no latency), `capacity_per_instance` 4,
//! filled by the idle target until every instance is up and ready; each runner has seen a
//! few hundred API requests, so its request series exist. Figures are per scrape, median
//! and 99th percentile of SCRAPES (default 300) scrapes.

use chrono::{TimeZone, Utc};
use flotilla_monitor::{InstanceBuckets, Monitor, RunnerLabels, RunnerSpec};
use flotilla_scaler::{Clock, Policy, ScalerBuilder, ScalerConfig, Schedule};
use flotilla_sim::fake_group::{FakeConfig, FakeInstanceGroup};
use prometheus::{Encoder, TextEncoder};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// (runners, instances per runner).
const FLEETS: [(usize, usize); 4] = [(1, 10), (1, 100), (4, 100), (10, 250)];

fn quantile(v: &mut [Duration], q: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

fn micros(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

async fn fleet(runners: usize, instances: usize) -> Monitor {
    let monitor = Monitor::new(runners as u32 * 10, "bench").expect("monitor");
    for r in 0..runners {
        let group = Arc::new(FakeInstanceGroup::new(
            FakeConfig {
                id: format!("bench/{r}"),
                ..FakeConfig::default()
            },
            r as u64,
        ));
        let scaler = ScalerBuilder::new(
            group.clone(),
            ScalerConfig {
                capacity_per_instance: 4,
                max_instances: instances,
                ..ScalerConfig::default()
            },
        )
        .schedule(Schedule::single(Policy {
            idle_count: instances * 4,
            idle_time: Duration::from_secs(3600),
            ..Policy::default()
        }))
        .clock(Clock::anchored(
            Utc.with_ymd_and_hms(2026, 11, 24, 0, 0, 0).unwrap(),
        ))
        .start()
        .await
        .expect("scaler");
        let handle = monitor
            .add_runner(&RunnerSpec {
                // GitLab's short token is the token's first 9 characters after the prefix:
                // they must differ between runners, as their series would collide.
                labels: RunnerLabels::new(
                    &format!("glrt-{r:04}-bench-runner"),
                    &format!("bench-{r}"),
                    "s_0",
                ),
                limit: 0,
                request_concurrency: 4,
                buckets: InstanceBuckets::default(),
            })
            .expect("runner");
        handle.attach(scaler.clone());
        for i in 0..300u64 {
            let status = if i % 10 == 0 { 201 } else { 204 };
            handle.api_request("request_job", "POST", status, Duration::from_millis(i));
        }
        while scaler.counts().idle < instances * 4 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    monitor
}

fn main() {
    let scrapes: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(300)
        .max(10);
    // Paused time: the fleets fill in virtual seconds.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    println!(
        "{:>8} {:>10} {:>10} | {:>12} {:>12} | {:>12} {:>12} | {:>9}",
        "runners",
        "instances",
        "series",
        "scrape p50",
        "scrape p99",
        "encode p50",
        "encode p99",
        "bytes"
    );
    for (runners, instances) in FLEETS {
        let monitor = rt.block_on(fleet(runners, instances));
        let registry = monitor.registry();
        let mut scrape = Vec::with_capacity(scrapes);
        let mut encode = Vec::with_capacity(scrapes);
        let mut bytes = 0;
        for _ in 0..scrapes {
            let t = Instant::now();
            let text = monitor.metrics_text().expect("metrics");
            scrape.push(t.elapsed());
            bytes = text.len();
            let t = Instant::now();
            let mut out = Vec::with_capacity(bytes);
            TextEncoder::new()
                .encode(&registry.gather(), &mut out)
                .expect("encode");
            encode.push(t.elapsed());
        }
        let series = monitor
            .metrics_text()
            .expect("metrics")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .count();
        println!(
            "{:>8} {:>10} {:>10} | {:>12} {:>12} | {:>12} {:>12} | {:>9}",
            runners,
            runners * instances,
            series,
            micros(quantile(&mut scrape, 0.5)),
            micros(quantile(&mut scrape, 0.99)),
            micros(quantile(&mut encode, 0.5)),
            micros(quantile(&mut encode, 0.99)),
            bytes
        );
    }
}
