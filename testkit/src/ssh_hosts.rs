//! Real sshd hosts for tests of providers that reach machines over SSH (the `static` pool):
//! containers of the offline instance image, their port 22 published on 127.0.0.1 only,
//! accepting one key for root. They are removed when the [`SshHosts`] is dropped, passed or
//! failed, and can be paused and resumed to play a host that stops answering and comes back.

use crate::containers::LabelGuard;
use crate::images::instance_image;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

/// The label every host container carries, with a value per [`SshHosts`].
pub const HOSTS_LABEL: &str = "flotilla.test.ssh-hosts";

/// One host: its container and the port its sshd answers on at 127.0.0.1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshHost {
    /// The container id.
    pub container: String,
    /// The published SSH port on 127.0.0.1.
    pub port: u16,
}

/// A set of hosts made by one test.
#[derive(Debug)]
pub struct SshHosts {
    /// The hosts, in the order they were started.
    pub hosts: Vec<SshHost>,
    _guard: LabelGuard,
}

impl SshHosts {
    /// Starts `n` hosts accepting `authorized_key` (an `authorized_keys` line) for root, with
    /// an inner dockerd when `inner_dockerd` (for docker isolation on the hosts), and waits
    /// until each sshd answers. `name` keeps the hosts of concurrent tests apart.
    pub fn start(name: &str, n: usize, authorized_key: &str, inner_dockerd: bool) -> SshHosts {
        let label = format!("{HOSTS_LABEL}={name}-{}", std::process::id());
        let guard = LabelGuard::new(label.clone());
        let image = instance_image();
        let mut hosts = Vec::with_capacity(n);
        for _ in 0..n {
            let mut cmd = Command::new("docker");
            cmd.args(["run", "-d", "--label", &label, "-p", "127.0.0.1::22"])
                .arg("-e")
                .arg(format!("FLOTILLA_AUTHORIZED_KEY={authorized_key}"));
            if inner_dockerd {
                // What the docker provider gives an instance with an inner dockerd.
                cmd.args([
                    "-e",
                    "FLOTILLA_INNER_DOCKERD=1",
                    "--cap-add",
                    "SYS_ADMIN",
                    "--cap-add",
                    "NET_ADMIN",
                    "--security-opt",
                    "seccomp=unconfined",
                    "--security-opt",
                    "apparmor=unconfined",
                    "-v",
                    "/sys/fs/cgroup:/sys/fs/cgroup:rw",
                    "-v",
                    "/var/lib/docker",
                ]);
            }
            let out = cmd.arg(&image).output().expect("docker run");
            assert!(
                out.status.success(),
                "docker run: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let container = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let port = published_port(&container);
            hosts.push(SshHost { container, port });
        }
        for h in &hosts {
            assert!(
                answers_within(h.port, Duration::from_secs(60)),
                "sshd of {} never answered on port {}",
                h.container,
                h.port
            );
        }
        SshHosts {
            hosts,
            _guard: guard,
        }
    }

    /// Freezes host `i`: its port still accepts connections (Docker's proxy) but sshd says
    /// nothing, as a hung or cut-off machine.
    pub fn pause(&self, i: usize) {
        docker(&["pause", &self.hosts[i].container]);
    }

    /// Thaws host `i` and waits until its sshd answers again.
    pub fn unpause(&self, i: usize) {
        docker(&["unpause", &self.hosts[i].container]);
        assert!(answers_within(self.hosts[i].port, Duration::from_secs(30)));
    }

    /// Runs `sh -c script` on host `i` (through `docker exec`, not SSH) and returns its
    /// standard output.
    pub fn exec(&self, i: usize, script: &str) -> String {
        let out = Command::new("docker")
            .args(["exec", &self.hosts[i].container, "sh", "-c", script])
            .output()
            .expect("docker exec");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

fn docker(args: &[&str]) {
    let out = Command::new("docker").args(args).output().expect("docker");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn published_port(container: &str) -> u16 {
    let out = Command::new("docker")
        .args(["port", container, "22/tcp"])
        .output()
        .expect("docker port");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.trim().rsplit_once(':')?.1.parse().ok())
        .unwrap_or_else(|| panic!("no published SSH port for {container}: {text:?}"))
}

/// Whether sshd sends its banner on 127.0.0.1:`port` within `timeout`.
pub fn answers_within(port: u16, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    while Instant::now() < deadline {
        if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
            let mut buf = [0u8; 4];
            if s.read_exact(&mut buf).is_ok() && &buf == b"SSH-" {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}
