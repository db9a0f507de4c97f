//! Probes for the real infrastructure that integration tests use.
//!
//! ```no_run
//! # fn t() {
//! if !flotilla_testkit::infra::require(flotilla_testkit::infra::Infra::Docker) {
//!     return; // skipped loudly; under CI this panics instead
//! }
//! # }
//! ```

use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// A piece of infrastructure a test may need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Infra {
    /// A Docker engine answering on its default socket.
    Docker,
    /// The OpenSSH server binary (`/usr/sbin/sshd`).
    Sshd,
    /// `qemu-system-x86_64`, `qemu-img` and a bootable kernel in `/boot`.
    Qemu,
    /// Cgroups this process can create and move processes into: the `cpu`, `memory` and
    /// `pids` hierarchies of cgroup v1 (as on this project's CI machine), or cgroup v2 with
    /// those controllers. Needs root.
    Cgroups,
    /// Prometheus's `promtool` (Debian's `prometheus` package), the parser that judges the
    /// metrics exposition.
    Promtool,
    /// Python 3 with the Prometheus client library (Debian's `python3-prometheus-client`),
    /// whose text parser is a second, independent judge of the metrics exposition.
    PythonPrometheusClient,
    /// Debian's Chromium (`/usr/bin/chromium`), Node.js, and `playwright-core` installed by
    /// `scripts/setup.sh` under `testkit/browser/node_modules`: a real browser driven by a
    /// test.
    Browser,
    /// moto's standalone AWS server (`moto_server`, installed by `scripts/setup.d/aws.sh`;
    /// see [`moto_server_path`]): the judge of the aws provider.
    Moto,
    /// Google's `gcp-storage-emulator` with `google-cloud-storage` beside it (installed by
    /// `scripts/setup.d/storage.sh`; see [`gcs_emulator_path`]): the judges of the GCS cache.
    GcsEmulator,
    /// Microsoft's Azurite (npm) with `azure-storage-blob` in the storage venv (installed by
    /// `scripts/setup.d/storage.sh`; see [`azurite_path`]): the judges of the Azure cache.
    Azurite,
    /// Go with Debian's hashicorp go-plugin and grpc sources in `/usr/share/gocode`
    /// (`golang-go`, `golang-github-hashicorp-go-plugin-dev`, `golang-google-grpc-dev`): a
    /// go-plugin plugin built offline judges the plugin provider's process protocol.
    GoPlugin,
    /// Python 3 with `grpcio` and `grpcio-tools` (Debian `python3-grpcio`,
    /// `python3-grpc-tools`): the example plugin in Python.
    PythonGrpc,
    /// A `kubectl` of 1.31 or newer (WebSocket exec by default), found by [`kubectl_path`]:
    /// the independent client judging the fake Kubernetes API server.
    Kubectl,
    /// Mounting a small tmpfs (root and `mount`): a file system a test can fill.
    Tmpfs,
    /// Debian's `docker-registry` (the distribution registry) and `htpasswd`
    /// (`apache2-utils`): a registry on loopback that requires a login.
    Registry,
}

impl Infra {
    fn name(self) -> &'static str {
        match self {
            Infra::Docker => "a Docker engine",
            Infra::Sshd => "OpenSSH's sshd",
            Infra::Qemu => {
                "QEMU, qemu-img and a kernel (Debian packages qemu-system-x86, qemu-utils)"
            }
            Infra::Cgroups => "writable cgroups (root, cgroup v1 cpu/memory/pids or v2)",
            Infra::Promtool => "Prometheus's promtool (Debian package prometheus)",
            Infra::PythonPrometheusClient => {
                "Python's prometheus_client (Debian package python3-prometheus-client)"
            }
            Infra::Kubectl => {
                "kubectl 1.31 or newer (scripts/setup.d/kubernetes.sh installs one in \
                 /opt/flotilla-kubectl)"
            }
            Infra::Browser => {
                "Chromium (Debian package chromium), Node.js and playwright-core \
                 (testkit/browser, installed by scripts/setup.sh)"
            }
            Infra::Moto => "moto's server (moto_server, installed by scripts/setup.d/aws.sh)",
            Infra::Azurite => {
                "Azurite and azure-storage-blob (installed by scripts/setup.d/storage.sh)"
            }
            Infra::GcsEmulator => {
                "gcp-storage-emulator and google-cloud-storage (installed by \
                 scripts/setup.d/storage.sh)"
            }
            Infra::GoPlugin => {
                "Go and go-plugin's sources (Debian packages golang-go, \
                 golang-github-hashicorp-go-plugin-dev, golang-google-grpc-dev)"
            }
            Infra::PythonGrpc => {
                "Python's grpcio and grpcio-tools (Debian packages python3-grpcio, \
                 python3-grpc-tools)"
            }
            Infra::Tmpfs => "mounting a tmpfs (root, and mount from Debian's base)",
            Infra::Registry => {
                "docker-registry and htpasswd (Debian packages docker-registry, apache2-utils)"
            }
        }
    }
}

/// Whether `infra` is available here (probed once per process).
pub fn available(infra: Infra) -> bool {
    static DOCKER: OnceLock<bool> = OnceLock::new();
    static SSHD: OnceLock<bool> = OnceLock::new();
    static QEMU: OnceLock<bool> = OnceLock::new();
    static CGROUPS: OnceLock<bool> = OnceLock::new();
    static PROMTOOL: OnceLock<bool> = OnceLock::new();
    static PY_PROMETHEUS: OnceLock<bool> = OnceLock::new();
    static BROWSER: OnceLock<bool> = OnceLock::new();
    static GO_PLUGIN: OnceLock<bool> = OnceLock::new();
    static PY_GRPC: OnceLock<bool> = OnceLock::new();
    match infra {
        Infra::Moto => moto_server_path().is_some(),
        Infra::GcsEmulator => gcs_emulator_path().is_some(),
        Infra::Azurite => azurite_path().is_some() && gcs_emulator_path().is_some(),
        Infra::GoPlugin => *GO_PLUGIN.get_or_init(|| {
            runs("go", &["version"])
                && std::path::Path::new(GOCODE)
                    .join("src/github.com/hashicorp/go-plugin/grpc_server.go")
                    .exists()
                && std::path::Path::new(GOCODE)
                    .join("src/google.golang.org/grpc/server.go")
                    .exists()
        }),
        Infra::PythonGrpc => {
            *PY_GRPC.get_or_init(|| runs("python3", &["-c", "import grpc, grpc_tools.protoc"]))
        }
        Infra::Kubectl => kubectl_path().is_some(),
        Infra::Registry => {
            on_path("docker-registry") && on_path("htpasswd") && available(Infra::Docker)
        }
        Infra::Tmpfs => {
            let uid = Command::new("id").arg("-u").output().ok();
            uid.is_some_and(|o| o.stdout.trim_ascii() == b"0") && runs("mount", &["--version"])
        }
        Infra::Promtool => *PROMTOOL.get_or_init(|| runs("promtool", &["--version"])),
        Infra::PythonPrometheusClient => *PY_PROMETHEUS
            .get_or_init(|| runs(DEBIAN_PYTHON, &["-c", "import prometheus_client.parser"])),
        Infra::Browser => *BROWSER.get_or_init(|| {
            std::path::Path::new(CHROMIUM).exists()
                && runs("node", &["--version"])
                && browser_dir().join("node_modules/playwright-core").is_dir()
        }),
        Infra::Cgroups => *CGROUPS.get_or_init(cgroups_writable),
        Infra::Docker => *DOCKER.get_or_init(|| {
            Command::new("docker")
                .args(["version", "--format", "{{.Server.Version}}"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map(|s| s.success())
                .unwrap_or(false)
        }),
        Infra::Sshd => *SSHD.get_or_init(|| std::path::Path::new("/usr/sbin/sshd").exists()),
        Infra::Qemu => *QEMU.get_or_init(|| {
            let qemu = Command::new("qemu-system-x86_64")
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            // The microvm and vm levels make their disks with qemu-img (Debian's qemu-utils,
            // which qemu-system-x86 does not pull in without recommends).
            qemu && kernel_path().is_some() && runs("qemu-img", &["--version"])
        }),
    }
}

/// Whether `program` is an executable file in a directory of `PATH`.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(program).is_file()))
}

/// Debian's own Python, the one interpreter that sees Debian's `python3-*` packages (a
/// `python3` first on `PATH` may be another one, pyenv's on this project's machines, which
/// does not).
pub const DEBIAN_PYTHON: &str = "/usr/bin/python3";

/// Where `scripts/setup.d/aws.sh` installs moto's venv.
pub const MOTO_VENV: &str = "/opt/flotilla/moto-venv";

/// moto's server: `$FLOTILLA_MOTO_SERVER`, else `/opt/flotilla/moto-venv/bin/moto_server`,
/// else `moto_server` on `PATH`; `None` when none of them is there.
pub fn moto_server_path() -> Option<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("FLOTILLA_MOTO_SERVER") {
        let p = std::path::PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let venv = std::path::Path::new(MOTO_VENV).join("bin/moto_server");
    if venv.is_file() {
        return Some(venv);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("moto_server"))
            .find(|p| p.is_file())
    })
}

/// Where `scripts/setup.d/storage.sh` installs the Cloud Storage judges' venv.
pub const STORAGE_VENV: &str = "/opt/flotilla/storage-venv";

/// Google's storage emulator: `$FLOTILLA_GCS_EMULATOR`, else
/// `/opt/flotilla/storage-venv/bin/gcp-storage-emulator`; `None` when neither is there. The
/// `python` beside it has `google-cloud-storage`.
pub fn gcs_emulator_path() -> Option<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("FLOTILLA_GCS_EMULATOR") {
        let p = std::path::PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let venv = std::path::Path::new(STORAGE_VENV).join("bin/gcp-storage-emulator");
    venv.is_file().then_some(venv)
}

/// Azurite's blob service: `$FLOTILLA_AZURITE`, else
/// `/opt/flotilla/azurite/node_modules/.bin/azurite-blob`; `None` when neither is there.
pub fn azurite_path() -> Option<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("FLOTILLA_AZURITE") {
        let p = std::path::PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let p = std::path::Path::new("/opt/flotilla/azurite/node_modules/.bin/azurite-blob");
    p.is_file().then(|| p.to_path_buf())
}

/// Where Debian's `golang-*-dev` packages put their Go sources (a GOPATH entry).
pub const GOCODE: &str = "/usr/share/gocode";
/// The kubectl the tests use, if one of 1.31 or newer is found: `$FLOTILLA_KUBECTL`, then
/// `/opt/flotilla-kubectl/bin/kubectl` (scripts/setup.d/kubernetes.sh), then `kubectl` on
/// `PATH`. Probed once per process.
pub fn kubectl_path() -> Option<std::path::PathBuf> {
    static KUBECTL: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    KUBECTL
        .get_or_init(|| {
            let candidates = std::env::var_os("FLOTILLA_KUBECTL")
                .map(std::path::PathBuf::from)
                .into_iter()
                .chain([
                    std::path::PathBuf::from("/opt/flotilla-kubectl/bin/kubectl"),
                    std::path::PathBuf::from("kubectl"),
                ]);
            candidates
                .into_iter()
                .find(|k| kubectl_minor(k).is_some_and(|m| m >= 31))
        })
        .clone()
}

/// The client's minor version, from `kubectl version --client -o json`.
fn kubectl_minor(kubectl: &std::path::Path) -> Option<u32> {
    let out = Command::new(kubectl)
        .args(["version", "--client", "-o", "json"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let at = text.find("\"minor\"")?;
    let digits: String = text[at + 7..]
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Where Debian installs Chromium.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// The directory holding the browser tests' Node.js package (`playwright-core`).
pub fn browser_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("browser")
}

/// Whether `program args` runs and succeeds.
fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Whether a cgroup can be made in every hierarchy the cgroup level uses (and removed again).
fn cgroups_writable() -> bool {
    let root = std::path::Path::new("/sys/fs/cgroup");
    let probe = format!("flotilla-probe-{}", std::process::id());
    let dirs: Vec<std::path::PathBuf> = if root.join("cgroup.controllers").exists() {
        vec![root.join(&probe)]
    } else {
        ["cpu", "memory", "pids"]
            .iter()
            .map(|h| root.join(h).join(&probe))
            .collect()
    };
    let made = dirs.iter().all(|d| std::fs::create_dir(d).is_ok());
    for d in &dirs {
        let _ = std::fs::remove_dir(d);
    }
    made
}

/// The newest `/boot/vmlinuz-*` kernel, if any.
pub fn kernel_path() -> Option<std::path::PathBuf> {
    let mut kernels: Vec<_> = std::fs::read_dir("/boot")
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("vmlinuz-"))
        })
        .collect();
    kernels.sort();
    kernels.pop()
}

/// Whether tests run under CI (the `CI` environment variable is set and not `false`/`0`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Returns true if `infra` is available. If it is not: under CI this panics (a test that needs
/// infrastructure must never pass silently there); elsewhere it prints a loud skip notice and
/// returns false, and the caller returns early.
#[track_caller]
pub fn require(infra: Infra) -> bool {
    if available(infra) {
        return true;
    }
    let at = std::panic::Location::caller();
    assert!(
        !in_ci(),
        "{} is required by the test at {at} but is not available, and CI is set: \
         run scripts/setup.sh",
        infra.name()
    );
    eprintln!(
        "\n!!!!!!!! SKIPPED: the test at {at} needs {} which is not available here.\n\
         !!!!!!!! Run scripts/setup.sh to install it; under CI this test would fail.\n",
        infra.name()
    );
    false
}
