//! A job's services at the `microvm` level: each runs in the job's VM from its own image, in
//! a network namespace of its own, as Docker would run it.
//!
//! - **Files**: the service's image is made a root file system as the job's is
//!   ([`super::rootfs`]) and given to the VM as one more disk (serial `vd<N>`, a qcow2 layer of
//!   its own over the cached image), mounted at [`root`] and entered with `chroot`.
//! - **Network**: a namespace per service linked to the VM by a veth pair
//!   (172.30.N.2 for service N, the agent's `service-netns`), so two services may listen on
//!   the same port, as each Docker container has its own network namespace. The job and the
//!   services reach each other by the services' aliases, written to `/etc/hosts` in the VM
//!   and in every service's root.
//! - **Command**: Docker's rule for the image's `ENTRYPOINT` and `CMD` against the job's
//!   overrides ([`argv`]); the environment is what GitLab gives services
//!   ([`crate::service::service_env`]).
//! - **Waiting**: before the job's first stage, each port the service declares (or its image
//!   exposes) is tried from the VM until it answers or the level's wait runs out; a service
//!   that never answered is reported with the end of its output, and the job goes on, as
//!   GitLab does.
//!
//! A snapshot keeps the services as they run (their disks and processes are the VM's); a job
//! restored from it has them back without starting them again.

use super::rootfs::Rootfs;
use flotilla_connect::shell::quote;
use flotilla_connect::{Connector, ConnectorExt, ForwardTarget};
use flotilla_guest::GuestConnector;
use flotilla_guest::protocol::{OpenSpec, Target};
use flotilla_job::model::Image;
use std::time::{Duration, Instant};

/// The most services a job's VM runs (the agent numbers their links 172.30.N.0/30 with N a
/// byte, and each is a disk of the VM).
pub const MAX_SERVICES: usize = 64;

/// Where service `i`'s root file system is mounted in the VM.
pub fn root(i: usize) -> String {
    format!("/run/flotilla/services/{i}")
}

/// Where service `i`'s output goes in the VM.
pub fn log_file(i: usize) -> String {
    format!("/run/flotilla/services/{i}.log")
}

/// The name of service `i`'s network namespace in the VM.
pub fn netns(i: usize) -> String {
    format!("svc{i}")
}

/// The serial of service `i`'s disk (disk 0 is the job's root).
pub fn disk_serial(i: usize) -> String {
    format!("vd{}", i + 1)
}

/// The program and arguments a service starts with, by Docker's rule (moby
/// `daemon/commit.go`, `merge`): an `entrypoint` given for the service replaces the image's
/// and drops the image's `CMD`; otherwise the image's entrypoint stays and the service's
/// `command`, if any, replaces the image's `CMD`.
pub fn argv(service: &Image, image: &Rootfs) -> Vec<String> {
    let entrypoint_given = !service.entrypoint.is_empty() && service.entrypoint != [String::new()];
    let (entrypoint, cmd) = if entrypoint_given {
        (service.entrypoint.clone(), service.command.clone())
    } else if service.entrypoint == [String::new()] {
        // `entrypoint: [""]` clears the image's entrypoint, as in `docker run --entrypoint ""`.
        (Vec::new(), service.command.clone())
    } else if service.command.is_empty() {
        (image.entrypoint.clone(), image.cmd.clone())
    } else {
        (image.entrypoint.clone(), service.command.clone())
    };
    entrypoint.into_iter().chain(cmd).collect()
}

/// The `/etc/hosts` lines that name every service by its aliases.
pub fn hosts_lines(started: &[(String, Vec<String>)]) -> String {
    started
        .iter()
        .filter(|(_, aliases)| !aliases.is_empty())
        .map(|(ip, aliases)| format!("{ip} {}\n", aliases.join(" ")))
        .collect()
}

/// One service as it is started.
#[derive(Debug, Clone)]
pub struct Planned {
    /// The service as the job names it.
    pub image: Image,
    /// Its root file system (for its command, directory and ports).
    pub rootfs: Rootfs,
    /// Its environment (`KEY=value`).
    pub env: Vec<String>,
    /// The TCP ports to wait for.
    pub ports: Vec<u16>,
}

/// Starts `services` in the VM `guest` reaches and waits for their ports up to `wait`;
/// returns the lines for the job's log. A service that cannot be set up at all (its disk, its
/// namespace, its program) fails the job with the reason; one that starts but never answers
/// is a warning.
pub async fn start(
    guest: &GuestConnector,
    services: &[Planned],
    wait: Duration,
) -> Result<String, String> {
    let mut text = String::new();
    let mut started = Vec::new();
    for (i, s) in services.iter().enumerate() {
        let r = root(i);
        let what = |step: &str| format!("service {} ({}): {step}", i, s.image.name);
        guest
            .builtin(&["mount", &format!("serial:{}", disk_serial(i)), &r, "ext4"])
            .await
            .map_err(|e| format!("{}: {e}", what("mounting its file system")))?;
        for (src, dir, fstype) in [("proc", "proc", "proc"), ("devtmpfs", "dev", "devtmpfs")] {
            guest
                .builtin(&["mount", src, &format!("{r}/{dir}"), fstype])
                .await
                .map_err(|e| format!("{}: {e}", what(&format!("mounting /{dir}"))))?;
        }
        let n = i.to_string();
        let ip = guest
            .builtin(&["service-netns", &netns(i), &n])
            .await
            .map_err(|e| format!("{}: {e}", what("making its network namespace")))?
            .trim()
            .to_string();
        started.push((ip, s.image.aliases()));
    }
    // Names before commands: a service may look another up as it starts.
    let hosts = hosts_lines(&started);
    let mut script = String::new();
    for target in std::iter::once(String::new()).chain((0..services.len()).map(root)) {
        script.push_str(&format!(
            "mkdir -p {d}/etc && printf '%s' {h} >>{d}/etc/hosts\n",
            d = quote(&target),
            h = quote(&hosts)
        ));
        if !target.is_empty() {
            script.push_str(&format!(
                "[ -f /etc/resolv.conf ] && cp /etc/resolv.conf {}/etc/resolv.conf || true\n",
                quote(&target)
            ));
        }
    }
    let out = guest
        .output(&format!("sh -c {}", quote(&script)))
        .await
        .map_err(|e| format!("naming the services in /etc/hosts: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "naming the services in /etc/hosts: {}",
            out.stderr_str().trim()
        ));
    }
    for (i, s) in services.iter().enumerate() {
        let argv = argv(&s.image, &s.rootfs);
        if argv.is_empty() {
            return Err(format!(
                "service {i} ({}) has no command: its image has no ENTRYPOINT or CMD and the \
                 job gives none",
                s.image.name
            ));
        }
        let cwd = if s.rootfs.working_dir.is_empty() {
            "/".to_string()
        } else {
            s.rootfs.working_dir.clone()
        };
        let spec = OpenSpec {
            env: Some(
                s.env
                    .iter()
                    .filter_map(|e| e.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            cwd: Some(cwd),
            root: Some(root(i)),
            netns: Some(netns(i)),
            detach: Some(log_file(i)),
            ..OpenSpec::new(Target::Argv(argv.clone()))
        };
        guest.spawn_detached(spec).await.map_err(|e| {
            format!(
                "service {i} ({}): starting {}: {e}",
                s.image.name,
                flotilla_connect::shell::join(&argv)
            )
        })?;
        text.push_str(&format!(
            "Starting service {} in the VM at {} (aliases: {}): {}\n",
            s.image.name,
            started[i].0,
            started[i].1.join(", "),
            flotilla_connect::shell::join(&argv)
        ));
    }
    let targets: Vec<(usize, String, u16)> = services
        .iter()
        .enumerate()
        .flat_map(|(i, s)| {
            let ip = started[i].0.clone();
            s.ports.iter().map(move |p| (i, ip.clone(), *p))
        })
        .collect();
    if targets.is_empty() {
        return Ok(text);
    }
    text.push_str(&format!(
        "Waiting for services to be up and running (timeout {} seconds)...\n",
        wait.as_secs()
    ));
    let deadline = Instant::now() + wait;
    for (i, ip, port) in targets {
        if !answers(guest, &ip, port, deadline).await {
            let tail = guest
                .output(&format!("tail -n 20 {}", quote(&log_file(i))))
                .await
                .map(|o| o.stdout_str())
                .unwrap_or_default();
            text.push_str(&format!(
                "\x1b[0;33mWARNING: service {} probably didn't start properly: nothing \
                 listens on port {port}; its output ends with:\n{}\x1b[0m\n",
                services[i].image.name,
                tail.trim_end()
            ));
        }
    }
    Ok(text)
}

/// Whether `ip:port` accepts a connection made in the VM before `deadline`.
async fn answers(guest: &GuestConnector, ip: &str, port: u16, deadline: Instant) -> bool {
    let target = ForwardTarget::Tcp {
        host: ip.to_string(),
        port,
    };
    loop {
        if guest.forward(&target).await.is_ok() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(entrypoint: &[&str], cmd: &[&str]) -> Rootfs {
        Rootfs {
            image_id: "sha256:x".into(),
            path: "/x".into(),
            env: Vec::new(),
            entrypoint: entrypoint.iter().map(|s| s.to_string()).collect(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            working_dir: String::new(),
            exposed_ports: Vec::new(),
            made: false,
        }
    }

    fn service(entrypoint: &[&str], command: &[&str]) -> Image {
        Image {
            name: "redis:7".into(),
            entrypoint: entrypoint.iter().map(|s| s.to_string()).collect(),
            command: command.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_command_follows_dockers_rule() {
        let img = image(&["docker-entrypoint.sh"], &["redis-server"]);
        assert_eq!(
            argv(&service(&[], &[]), &img),
            ["docker-entrypoint.sh", "redis-server"]
        );
        assert_eq!(
            argv(&service(&[], &["redis-server", "--port", "7000"]), &img),
            ["docker-entrypoint.sh", "redis-server", "--port", "7000"]
        );
        // A new entrypoint drops the image's CMD.
        assert_eq!(
            argv(&service(&["/bin/sh", "-c"], &[]), &img),
            ["/bin/sh", "-c"]
        );
        assert_eq!(
            argv(&service(&["/bin/sh", "-c"], &["echo hi"]), &img),
            ["/bin/sh", "-c", "echo hi"]
        );
        assert_eq!(argv(&service(&[""], &["httpd"]), &img), ["httpd"]);
        assert!(argv(&service(&[], &[]), &image(&[], &[])).is_empty());
    }

    #[test]
    fn every_alias_is_named_in_hosts() {
        let lines = hosts_lines(&[
            ("172.30.0.2".into(), vec!["db".into(), "postgres".into()]),
            ("172.30.1.2".into(), vec![]),
            ("172.30.2.2".into(), vec!["cache".into()]),
        ]);
        assert_eq!(lines, "172.30.0.2 db postgres\n172.30.2.2 cache\n");
    }

    #[test]
    fn each_service_has_its_own_disk_namespace_and_root() {
        assert_eq!(disk_serial(0), "vd1");
        assert_ne!(netns(0), netns(1));
        assert_ne!(root(0), root(1));
        assert!(log_file(3).starts_with("/run/flotilla/services/"));
    }
}
