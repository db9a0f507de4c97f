//! Eight concurrent jobs on a fleet of two instances with four slots each, at both isolation
//! levels: every job in its own slot, directory (and containers), all running at once.

use crate::common;

use async_trait::async_trait;
use common::*;
use flotilla_job::{BufferSink, JobCancel, Outcome, TraceError, TraceSink};
use flotilla_testkit::docker_fleet::{DockerFleet, FleetIsolation, FleetOptions};
use flotilla_testkit::infra::{Infra, require};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

/// Records when the job's script said `started`.
#[derive(Clone, Default)]
struct TimedSink {
    buf: BufferSink,
    started_at: Arc<Mutex<Option<Instant>>>,
}

#[async_trait]
impl TraceSink for TimedSink {
    async fn write(&mut self, bytes: &[u8]) -> Result<(), TraceError> {
        self.buf.write(bytes).await?;
        let mut at = self.started_at.lock().unwrap();
        if at.is_none() && self.buf.text().contains("\nstarted\n") {
            *at = Some(Instant::now());
        }
        Ok(())
    }
}

fn field<'a>(trace: &'a str, prefix: &str) -> &'a str {
    trace
        .lines()
        // Not the echoed command lines (`$ echo ...`): the output.
        .filter(|l| !l.contains("$ "))
        .find_map(|l| l.split_once(prefix).map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("no {prefix:?} in the trace:\n{trace}"))
        .split_whitespace()
        .next()
        .unwrap()
}

async fn eight_jobs_on_two_instances(level: Level) {
    let isolation = match level {
        Level::Shell => FleetIsolation::Shell,
        Level::Docker => FleetIsolation::Docker(Box::default()),
    };
    let mut options = FleetOptions::new("eight", isolation);
    options.instances = 2;
    options.capacity_per_instance = 4;
    let f = DockerFleet::start(options).await;
    let jobs: Vec<_> = (0..8)
        .map(|_| {
            job_at(
                level,
                &[
                    "echo \"slot=$CI_CONCURRENT_ID dir=$CI_PROJECT_DIR host=$(cat /etc/hostname)\"",
                    "echo started",
                    "touch \"$CI_PROJECT_DIR/mine-$CI_JOB_ID\"",
                    "sleep 4",
                    "echo \"files=$(ls \"$CI_PROJECT_DIR\" | tr '\\n' ,)\"",
                ],
            )
        })
        .collect();
    let runs = jobs.iter().map(|j| {
        let d = f.dispatcher.clone();
        async move {
            let mut sink = TimedSink::default();
            let r = d
                .dispatch(&format!("job-{}", j.id), j, &mut sink, &JobCancel::new())
                .await;
            let ended = Instant::now();
            let started = sink.started_at.lock().unwrap().expect("the script started");
            (r, sink.buf.text(), started, ended)
        }
    });
    let results = futures::future::join_all(runs).await;

    let mut slots = HashSet::new();
    let mut per_instance: HashMap<String, Vec<usize>> = HashMap::new();
    let mut dirs = HashSet::new();
    let mut hosts = HashSet::new();
    for ((r, t, _, _), j) in results.iter().zip(&jobs) {
        assert_eq!(r.outcome, Outcome::Success, "{t}");
        let instance = field(t, "on instance ").to_string();
        let slot: usize = field(t, "slot=").parse().unwrap();
        let dir = field(t, "dir=").to_string();
        assert_eq!(dir, format!("/builds/{slot}/group/project"));
        assert!(slots.insert((instance.clone(), slot)), "slot held twice");
        dirs.insert((instance.clone(), dir));
        hosts.insert(field(t, "host=").to_string());
        per_instance.entry(instance).or_default().push(slot);
        // The directory held this job's file only.
        assert_eq!(field(t, "files="), format!("mine-{},", j.id), "{t}");
    }
    assert_eq!(slots.len(), 8);
    assert_eq!(dirs.len(), 8, "every job had its own directory");
    assert_eq!(per_instance.len(), 2, "{per_instance:?}");
    for (instance, mut s) in per_instance {
        s.sort_unstable();
        assert_eq!(s, vec![0, 1, 2, 3], "slots on {instance}");
    }
    match level {
        Level::Docker => assert_eq!(hosts.len(), 8, "every job had its own build container"),
        Level::Shell => assert_eq!(hosts.len(), 2, "jobs ran on the two instances themselves"),
    }
    // They ran at the same time: every job started before any ended.
    let last_start = results.iter().map(|r| r.2).max().unwrap();
    let first_end = results.iter().map(|r| r.3).min().unwrap();
    assert!(
        last_start < first_end,
        "the jobs did not overlap: last start {:?} after first end",
        last_start - first_end
    );
    assert_eq!(f.scaler.snapshot().counts.acquired, 0);
    if level == Level::Docker {
        for instance in f.instances() {
            assert!(f.job_containers(&instance).await.is_empty());
        }
    }
}

#[tokio::test]
async fn infra_shell_eight_concurrent_jobs_on_two_instances() {
    if !require(Infra::Docker) {
        return;
    }
    eight_jobs_on_two_instances(Level::Shell).await;
}

#[tokio::test]
async fn infra_docker_eight_concurrent_jobs_on_two_instances() {
    if !require(Infra::Docker) {
        return;
    }
    eight_jobs_on_two_instances(Level::Docker).await;
}
