//! Docker isolation's start-up cost: the time from a slot being acquired to the first line
//! of the job's output, against a plain `docker run` of the same image on the same instance's
//! inner dockerd through the same dial-stdio client (create, attach, start, first byte),
//! measured side by side, alternating, in one run. Target: ratio of medians ≤ 1.3.
//!
//! `cargo bench -p flotilla-dispatch --bench docker_first_line` (needs Docker; prints figures).

use async_trait::async_trait;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{AttachContainerOptions, RemoveContainerOptions};
use flotilla_fleet::Secret;
use flotilla_job::model::{Image, JobInfo, RunnerInfo, STEP_SCRIPT, Step, When};
use flotilla_job::{JobCancel, JobPayload, TraceError, TraceSink, Variable};
use flotilla_testkit::docker_fleet::{DockerFleet, FleetOptions};
use flotilla_testkit::images::busybox_image;
use flotilla_testkit::infra::{Infra, available};
use futures::StreamExt;
use std::time::{Duration, Instant};

const MARKER: &str = "first-line-of-the-job";
const WARMUP: usize = 3;
const ROUNDS: usize = 15;

/// Notes when the job's first output line (the marker) arrives.
struct FirstLine {
    seen: Vec<u8>,
    header_at: Option<Instant>,
    marker_at: Option<Instant>,
}

#[async_trait]
impl TraceSink for FirstLine {
    async fn write(&mut self, bytes: &[u8]) -> Result<(), TraceError> {
        let now = Instant::now();
        self.header_at.get_or_insert(now);
        if self.marker_at.is_none() {
            self.seen.extend_from_slice(bytes);
            if String::from_utf8_lossy(&self.seen).contains(&format!("\n{MARKER}\n")) {
                self.marker_at = Some(now);
            }
        }
        Ok(())
    }
}

fn job(id: i64) -> JobPayload {
    JobPayload {
        id,
        token: Secret::new(format!("glcbt-bench-{id}")),
        job_info: JobInfo {
            project_full_path: "bench/project".into(),
            ..Default::default()
        },
        runner_info: RunnerInfo {
            timeout: 600,
            ..Default::default()
        },
        variables: vec![Variable::new("GIT_STRATEGY", "none")],
        image: Some(Image {
            name: busybox_image(),
            ..Default::default()
        }),
        steps: vec![Step {
            name: STEP_SCRIPT.into(),
            script: vec![format!("echo {MARKER}")],
            when: When::OnSuccess,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// `docker run --rm busybox echo MARKER`: create, attach, start; the time to the first byte.
async fn docker_run(docker: &Docker, image: &str) -> Duration {
    let started = Instant::now();
    let body = ContainerCreateBody {
        image: Some(image.to_string()),
        cmd: Some(vec!["echo".into(), MARKER.into()]),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        ..Default::default()
    };
    let created = docker
        .create_container(
            None::<bollard::query_parameters::CreateContainerOptions>,
            body,
        )
        .await
        .expect("create");
    let mut attached = docker
        .attach_container(
            &created.id,
            Some(AttachContainerOptions {
                stdout: true,
                stderr: true,
                stream: true,
                ..Default::default()
            }),
        )
        .await
        .expect("attach");
    docker
        .start_container(&created.id, None)
        .await
        .expect("start");
    let first = loop {
        match attached.output.next().await {
            Some(Ok(LogOutput::StdOut { message })) if !message.is_empty() => {
                break started.elapsed();
            }
            Some(Ok(_)) => {}
            other => panic!("no output from the container: {other:?}"),
        }
    };
    docker
        .remove_container(
            &created.id,
            Some(RemoveContainerOptions {
                force: true,
                ..Default::default()
            }),
        )
        .await
        .expect("remove");
    first
}

/// One job through the dispatcher on an acquired slot: (to the first trace byte, to the
/// job's first line, the stages' durations).
async fn flotilla(fleet: &DockerFleet, id: i64) -> (Duration, Duration, Vec<(String, Duration)>) {
    let acquisition = fleet
        .scaler
        .acquire(&format!("bench-{id}"), Some(Duration::from_secs(60)))
        .await
        .expect("a slot");
    let started = Instant::now();
    let mut sink = FirstLine {
        seen: Vec::new(),
        header_at: None,
        marker_at: None,
    };
    let r = fleet
        .dispatcher
        .run(acquisition, &job(id), &mut sink, &JobCancel::new())
        .await;
    assert!(
        r.outcome.is_success(),
        "{}",
        String::from_utf8_lossy(&sink.seen)
    );
    (
        sink.header_at.expect("output") - started,
        sink.marker_at.expect("the marker") - started,
        r.stages
            .iter()
            .map(|s| (s.name.clone(), s.duration))
            .collect(),
    )
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() {
    if !available(Infra::Docker) {
        eprintln!("SKIPPED: docker_first_line needs a Docker engine");
        return;
    }
    let fleet = DockerFleet::start(FleetOptions::docker("bench-first-line")).await;
    let instance = fleet.instances()[0].clone();
    let image = busybox_image();
    // A first job makes the dispatcher's connector and the isolation's client for the
    // instance; the baseline then uses that very client.
    flotilla(&fleet, 1).await;
    let connector = fleet
        .dispatcher
        .connector(&instance)
        .expect("the connector");
    let docker = fleet
        .docker_isolation
        .as_ref()
        .expect("docker isolation")
        .docker(&instance, &connector)
        .await
        .expect("the client");

    let mut base = Vec::new();
    let mut ours = Vec::new();
    let mut header = Vec::new();
    let mut stages: Vec<(String, Vec<Duration>)> = Vec::new();
    for round in 0..WARMUP + ROUNDS {
        let b = docker_run(&docker, &image).await;
        let (h, f, st) = flotilla(&fleet, 100 + round as i64).await;
        if round >= WARMUP {
            base.push(b);
            ours.push(f);
            header.push(h);
            for (name, d) in st {
                match stages.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, v)) => v.push(d),
                    None => stages.push((name, vec![d])),
                }
            }
        }
    }
    let (b, f, h) = (median(&mut base), median(&mut ours), median(&mut header));
    println!("docker isolation, slot acquired -> first line of the job ({ROUNDS} rounds, medians)");
    println!(
        "  plain docker run (create+attach+start, first byte): {}",
        ms(b)
    );
    println!(
        "  flotilla job, first trace byte:                     {}",
        ms(h)
    );
    println!(
        "  flotilla job, first line of the script:             {}",
        ms(f)
    );
    println!(
        "  ratio flotilla / docker run: {:.2} (target <= 1.3)",
        f.as_secs_f64() / b.as_secs_f64()
    );
    println!("  flotilla stages (medians, whole stage):");
    for (name, mut v) in stages {
        println!("    {name:<28} {}", ms(median(&mut v)));
    }
    println!(
        "  min/max docker run {} / {}, flotilla {} / {}",
        ms(base[0]),
        ms(base[base.len() - 1]),
        ms(ours[0]),
        ms(ours[ours.len() - 1])
    );
}
