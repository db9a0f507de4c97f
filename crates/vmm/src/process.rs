//! VMM processes on the instance: started in the background with a pid file (Firecracker
//! and Cloud Hypervisor do not daemonize themselves), and killed only if the pid still
//! belongs to the VM's directory (a reused pid is left alone).

use crate::{VmSpec, VmmError, host};
use flotilla_connect::{Connector, ForwardTarget};
use flotilla_shell::quote;
use std::time::{Duration, Instant};

/// Starts `binary args` on the instance in `spec.dir` (made if missing), in a session of its
/// own, its output in `spec.vmm_log()`, and its pid in `spec.pid_file()`; waits until its
/// API socket accepts a connection. If the process dies first, the error carries its log.
pub(crate) async fn start(
    host: &dyn Connector,
    vmm: &'static str,
    binary: &str,
    args: &[String],
    spec: &VmSpec,
    timeout: Duration,
) -> Result<u32, VmmError> {
    let mut cmd = quote(binary);
    for a in args {
        cmd.push(' ');
        cmd.push_str(&quote(a));
    }
    // `setsid`: the VMM outlives the command that started it and its connection; `$!` is the
    // VMM itself, since a background job of a non-interactive shell is no group leader.
    // Only the VMM goes to the background, its output away from ours: a background job that
    // held our stdout would keep the command from ending.
    let line = format!(
        "mkdir -p {dir} && cd {dir} || exit 1; s=; command -v setsid >/dev/null 2>&1 && s=setsid; \
         $s {cmd} </dev/null >{log} 2>&1 & echo $! > {pid}; cat {pid}",
        dir = quote(&spec.dir),
        log = quote(&spec.vmm_log()),
        pid = quote(&spec.pid_file()),
    );
    let out = host::run(host, &format!("starting {vmm}"), &line).await?;
    let pid: u32 = out
        .trim()
        .parse()
        .map_err(|_| VmmError::Protocol(format!("starting it printed no pid: {out:?}"), vmm))?;
    let started = Instant::now();
    loop {
        if host
            .forward(&ForwardTarget::Unix(spec.api_socket()))
            .await
            .is_ok()
        {
            return Ok(pid);
        }
        if !alive(host, pid).await? {
            let log = host::read(host, &spec.vmm_log()).await.unwrap_or_default();
            return Err(VmmError::Missing(format!(
                "{vmm} exited before its API socket {} was up: {}",
                spec.api_socket(),
                String::from_utf8_lossy(&log).trim()
            )));
        }
        if started.elapsed() > timeout {
            let _ = kill_pid(host, pid, &spec.dir).await;
            return Err(VmmError::Timeout {
                what: format!("waiting for {vmm}'s API socket {}", spec.api_socket()),
                after: timeout,
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether process `pid` runs (a zombie counts as gone).
async fn alive(host: &dyn Connector, pid: u32) -> Result<bool, VmmError> {
    let out = host::run(
        host,
        "checking the VMM process",
        &format!(
            "if [ -e /proc/{pid} ] && ! grep -q '^State:.*Z' /proc/{pid}/status 2>/dev/null; then echo yes; fi"
        ),
    )
    .await?;
    Ok(out.contains("yes"))
}

/// Kills VMM `pid` if it is the VM of `dir` (a reused pid is left alone), then waits for it
/// to be gone. Returns whether it was running. Its command line must name a file in `dir`
/// (`<dir>/`, so slot 1's directory never matches slot 10's VM).
pub(crate) async fn kill_pid(host: &dyn Connector, pid: u32, dir: &str) -> Result<bool, VmmError> {
    let d = quote(&format!("{}/", dir.trim_end_matches('/')));
    let line = format!(
        "if [ -r /proc/{pid}/cmdline ] && tr '\\0' '\\n' </proc/{pid}/cmdline | grep -qF -- {d}; then \
         kill -9 {pid} 2>/dev/null; i=0; while [ -e /proc/{pid} ] && [ $i -lt 200 ]; do \
         if grep -q '^State:.*Z' /proc/{pid}/status 2>/dev/null; then break; fi; sleep 0.01; i=$((i+1)); done; \
         echo killed; fi"
    );
    let out = host::run(host, "killing a VM", &line).await?;
    Ok(out.contains("killed"))
}

/// Kills the VM whose directory is `dir` by its pid file, if it still runs.
pub(crate) async fn kill_dir(host: &dyn Connector, dir: &str) -> Result<bool, VmmError> {
    let pid_file = format!("{dir}/vmm.pid");
    let Ok(pid) = host::read(host, &pid_file).await else {
        return Ok(false);
    };
    match String::from_utf8_lossy(&pid).trim().parse::<u32>() {
        Ok(pid) => kill_pid(host, pid, dir).await,
        Err(_) => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_connect::local::LocalConnector;

    #[tokio::test]
    async fn a_pid_is_killed_only_for_its_own_directory() {
        let base = tempfile::tempdir().unwrap();
        let ten = base.path().join("vm-slot-10");
        // A process whose command line names a file in slot 10's directory, as a VMM's does.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 60", &format!("{}/api.sock", ten.display())])
            .spawn()
            .unwrap();
        let host = LocalConnector::new();
        let one = base.path().join("vm-slot-1");
        assert!(
            !kill_pid(&host, child.id(), one.to_str().unwrap())
                .await
                .unwrap(),
            "slot 1's directory is a prefix of slot 10's, not its directory"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "slot 10's VM still runs"
        );
        assert!(
            kill_pid(&host, child.id(), ten.to_str().unwrap())
                .await
                .unwrap()
        );
        assert!(child.wait().is_ok());
    }
}
