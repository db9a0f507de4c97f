//! The microvm level's cold start against a bare QEMU boot, side by side in one run, under
//! whatever accelerator the level is configured with (TCG on this project's machines):
//!
//! - **bare**: QEMU started with the very command line the level uses (same kernel, the same
//!   initramfs, the same root disk layer and devices) plus `flotilla.bare=1`, which makes the
//!   agent print one line as soon as it runs and power off; timed from the spawn to that line
//!   in the console file.
//! - **microvm job**: from the slot acquired (the level's `prepare`) to the first byte of
//!   output of a build stage `echo first`: the slot's stomp, the cached root file system
//!   found, a fresh disk layer, QEMU, the kernel, the agent's modules and root switch, the
//!   connection through the instance, the copy of the job's directories, the stage's shell.
//!
//! - **from a snapshot**: the same, for a job with `FLOTILLA_RESTORE_FROM` (the snapshot
//!   taken once, by a job with `FLOTILLA_SNAPSHOT: always`).
//!
//! Targets (issue 16): microvm job ≤ 1.2 × bare; from a snapshot ≤ 0.5 s. Also printed: the
//! VMM's resident memory against the guest's own use (the per-VM overhead on the instance).
//!
//! `cargo bench -p flotilla-isolate --bench microvm_start` (needs QEMU, a kernel and Docker).
//! On a KVM host, `FLOTILLA_BENCH_KVM=1` boots with KVM: the targets there are
//! Firecracker's (≤ 150 ms cold), which this machine (TCG only) cannot measure.

use flotilla_connect::local::LocalConnector;
use flotilla_connect::{Connector, ConnectorExt};
use flotilla_isolate::microvm::{MicrovmConfig, MicrovmIsolation};
use flotilla_isolate::{Isolation, PrepareRequest};
use flotilla_job::model::{Image, JobInfo};
use flotilla_job::{ExecCommand, ExecSpec, JobPayload, Place};
use flotilla_testkit::images::busybox_image;
use flotilla_testkit::infra::{Infra, available};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::AsyncWrite;
use tokio_util::sync::CancellationToken;

const ROUNDS: usize = 5;

/// Records when the first byte arrives.
struct FirstByte(Option<Instant>);

impl AsyncWrite for FirstByte {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.0.is_none() && !buf.is_empty() {
            self.0 = Some(Instant::now());
        }
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

fn job(image: &str) -> JobPayload {
    job_with(image, &[])
}

fn job_with(image: &str, vars: &[(&str, &str)]) -> JobPayload {
    JobPayload {
        id: 1,
        job_info: JobInfo {
            name: "bench".into(),
            project_full_path: "bench/project".into(),
            ..Default::default()
        },
        variables: vars
            .iter()
            .map(|(k, v)| flotilla_job::Variable::new(*k, *v))
            .collect(),
        image: Some(Image {
            name: image.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Prepares `payload` on slot 0 and runs `echo first`: the time to its first output byte.
async fn first_line(
    iso: &MicrovmIsolation,
    host: &Arc<dyn Connector>,
    builds: &str,
    payload: &JobPayload,
) -> Duration {
    let started = Instant::now();
    let env = iso
        .prepare(PrepareRequest {
            job: payload,
            instance_id: "this-host",
            slot: 0,
            connector: host.clone(),
            builds_dir: builds.into(),
            custom_build_dir: None,
        })
        .await
        .unwrap();
    let mut log = Vec::new();
    env.prepare(&mut log, CancellationToken::new())
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(&log)));
    let mut first = FirstByte(None);
    let st = env
        .exec(ExecSpec {
            place: Place::Build,
            command: ExecCommand::Script("echo first\n".into()),
            stdin: None,
            stdout: Box::new(&mut first),
            stderr: Box::new(tokio::io::sink()),
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap();
    assert!(st.success());
    let took = first.0.expect("the stage printed") - started;
    env.cleanup().await.unwrap();
    took
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn kib(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !available(Infra::Qemu) || !available(Infra::Docker) {
        eprintln!("microvm_start: needs QEMU, a kernel and Docker; nothing measured");
        return;
    }
    let kvm = std::env::var("FLOTILLA_BENCH_KVM").is_ok_and(|v| v == "1");
    let state = tempfile::Builder::new()
        .prefix("fl-bench-microvm-")
        .tempdir_in("/tmp")
        .unwrap();
    let builds = tempfile::Builder::new()
        .prefix("fl-bench-builds-")
        .tempdir_in("/tmp")
        .unwrap();
    let iso = MicrovmIsolation::new(MicrovmConfig {
        state_dir: state.path().to_str().unwrap().into(),
        owner: "bench".into(),
        memory_mib: 256,
        network: false,
        kvm,
        ..MicrovmConfig::default()
    })
    .unwrap();
    let payload = job(&busybox_image());
    let host: Arc<dyn Connector> = Arc::new(LocalConnector::new());
    let vm_dir = iso.config().vm_dir(0);

    let mut bare = Vec::new();
    let mut cold = Vec::new();
    let mut rss = Vec::new();
    // Round 0 warms the caches (root file system, initramfs) and is not counted.
    for round in 0..=ROUNDS {
        // The job.
        let started = Instant::now();
        let env = iso
            .prepare(PrepareRequest {
                job: &payload,
                instance_id: "this-host",
                slot: 0,
                connector: host.clone(),
                builds_dir: builds.path().to_str().unwrap().into(),
                custom_build_dir: None,
            })
            .await
            .unwrap();
        let mut log = Vec::new();
        env.prepare(&mut log, CancellationToken::new())
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(&log)));
        let mut first = FirstByte(None);
        let st = env
            .exec(ExecSpec {
                place: Place::Build,
                command: ExecCommand::Script("echo first\n".into()),
                stdin: None,
                stdout: Box::new(&mut first),
                stderr: Box::new(tokio::io::sink()),
                cancel: CancellationToken::new(),
            })
            .await
            .unwrap();
        assert!(st.success());
        let job_start = first.0.expect("the stage printed") - started;
        // The VM's memory, while it still runs.
        let pid: u32 = std::fs::read_to_string(format!("{vm_dir}/vmm.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let vmm_rss = kib(
            &std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default(),
            "VmRSS:",
        );
        let mut meminfo = Vec::new();
        env.exec(ExecSpec {
            place: Place::Build,
            command: ExecCommand::Script("cat /proc/meminfo\n".into()),
            stdin: None,
            stdout: Box::new(&mut meminfo),
            stderr: Box::new(tokio::io::sink()),
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap();
        let meminfo = String::from_utf8_lossy(&meminfo);
        let guest_used = kib(&meminfo, "MemTotal:").saturating_sub(kib(&meminfo, "MemFree:"));
        // The bare boot: the same QEMU line, kept from this VM's files, run again with
        // `flotilla.bare=1`.
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        env.cleanup().await.unwrap();
        let mut args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let program = args.remove(0);
        let bare_dir = format!("{}/bare", state.path().display());
        std::fs::create_dir_all(&bare_dir).unwrap();
        let top = format!("{bare_dir}/disk-0.qcow2");
        let base = std::fs::read_dir(state.path().join("rootfs"))
            .unwrap()
            .flatten()
            .find(|e| e.file_name().to_string_lossy().ends_with(".ext4"))
            .unwrap()
            .path();
        flotilla_vmm::disk::overlay(&*host, &top, base.to_str().unwrap(), "raw", None)
            .await
            .unwrap();
        for a in &mut args {
            *a = a.replace(&vm_dir, &bare_dir);
        }
        let i = args.iter().position(|a| a == "-append").unwrap();
        args[i + 1].push_str(" flotilla.bare=1");
        let console = format!("{bare_dir}/console.log");
        let _ = std::fs::remove_file(&console);
        let started = Instant::now();
        let st = std::process::Command::new(&program)
            .args(&args)
            .status()
            .unwrap();
        assert!(st.success(), "bare QEMU did not start");
        let bare_boot = loop {
            if std::fs::read_to_string(&console).is_ok_and(|c| c.contains("bare boot")) {
                break started.elapsed();
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "bare boot hung"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        // It powers itself off; make sure.
        let _ = host
            .output(&format!(
                "pid=$(cat {bare_dir}/vmm.pid 2>/dev/null) && kill -9 $pid 2>/dev/null; rm -rf {bare_dir}"
            ))
            .await;
        eprintln!(
            "round {round}: microvm job {:>6.0} ms, bare boot {:>6.0} ms, VMM RSS {} MiB, guest used {} MiB",
            job_start.as_secs_f64() * 1e3,
            bare_boot.as_secs_f64() * 1e3,
            vmm_rss / 1024,
            guest_used / 1024
        );
        if round > 0 {
            cold.push(job_start);
            bare.push(bare_boot);
            rss.push((vmm_rss, guest_used));
        }
    }
    // Jobs from a snapshot.
    let builds_dir = builds.path().to_str().unwrap().to_string();
    let saver = job_with(&busybox_image(), &[("FLOTILLA_SNAPSHOT", "always")]);
    first_line(&iso, &host, &builds_dir, &saver).await;
    let restorer = job_with(&busybox_image(), &[("FLOTILLA_RESTORE_FROM", "bench")]);
    let mut restored = Vec::new();
    for round in 0..=ROUNDS {
        let took = first_line(&iso, &host, &builds_dir, &restorer).await;
        eprintln!(
            "round {round}: job from a snapshot {:>6.0} ms",
            took.as_secs_f64() * 1e3
        );
        if round > 0 {
            restored.push(took);
        }
    }
    let r_from = median(&mut restored);
    // Each round's pair ran back to back: the median of their ratios is steadier on a
    // shared machine than the ratio of the medians.
    let mut ratios: Vec<f64> = cold
        .iter()
        .zip(&bare)
        .map(|(c, b)| c.as_secs_f64() / b.as_secs_f64())
        .collect();
    ratios.sort_by(f64::total_cmp);
    let ratio = ratios[ratios.len() / 2];
    let c = median(&mut cold);
    let b = median(&mut bare);
    let accel = if kvm { "KVM" } else { "TCG" };
    println!("microvm_start ({accel}, 1 vCPU, 256 MiB, busybox image, {ROUNDS} rounds, medians):");
    println!(
        "  bare QEMU boot to its first line         {:>7.0} ms",
        b.as_secs_f64() * 1e3
    );
    println!(
        "  microvm job: slot to first output line   {:>7.0} ms   ratio {:.2} (median of the \
         rounds' ratios; target <= 1.20)",
        c.as_secs_f64() * 1e3,
        ratio
    );
    println!(
        "  microvm job from a snapshot: to first line {:>7.0} ms   (target <= 500 ms)",
        r_from.as_secs_f64() * 1e3
    );
    let (r, g) = rss[rss.len() / 2];
    println!(
        "  VMM RSS {} MiB, guest memory in use {} MiB: overhead about {} MiB per VM",
        r / 1024,
        g / 1024,
        r.saturating_sub(g) / 1024
    );
}
