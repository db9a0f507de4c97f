//! The helper container: where a docker-level job's helper stages run (fetching the sources,
//! extracting and collecting caches and artifacts, removing the job's directories).
//!
//! Those stages handle what the job controls: the project's `.git` (its hooks and config,
//! which `git` runs), the files and links the job left in its directories, archives made from
//! them. On the instance's own shell, any of those ran with the instance's full view: a hook
//! the job wrote ran as root on the instance, and a link a job's container swapped in between a
//! check and a write (the build container's entrypoint runs all the while) sent the write
//! anywhere. GitLab Runner runs these stages in a helper container for the same reason; this
//! is flotilla's.
//!
//! It needs no image of its own, nothing to pull and nothing to keep in step with flotilla's
//! scripts: its root is an empty image imported when a daemon lacks it ([`ROOT_IMAGE`], looked
//! for once per instance connection), and the instance's own programs (`sh`, `git`, `tar`) are
//! bound into it read-only ([`SYSTEM_PATHS`], those that exist). The only writable places are the slot directory
//! (the job's own, bound at the same path as in the build container) and a private `/tmp`. It
//! shares the instance's network (the fetch reaches what the instance reaches, as the
//! instance's shell did), keeps its own process and mount namespaces, runs with the few
//! capabilities file handling needs and with `no-new-privileges`.

use super::labels::{JobLabels, Role};
use super::spec::KEEPALIVE;
use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::CreateImageOptions;
use futures::StreamExt;
use std::collections::HashMap;

/// The empty image the helper container starts from, imported by [`ensure_root_image`].
pub const ROOT_IMAGE: &str = "flotilla-helper-root:1";

/// The instance's paths bound read-only into the helper container, when they exist: the
/// programs and their libraries, and from `/etc` only what `git` over HTTPS or SSH reads
/// (certificates, users, name service, the system's git and ssh client settings). Not the rest
/// of `/etc`: the instance's host keys and password hashes stay out of reach.
pub const SYSTEM_PATHS: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/gitconfig",
    "/etc/ssh/ssh_config",
    "/etc/ssh/ssh_known_hosts",
];

/// Capabilities the helper keeps (Docker's defaults minus all the others): enough for root
/// to write, own and remove files a job's user made in the slot directory.
const KEPT_CAPABILITIES: &[&str] = &["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"];

/// The command, run on the instance, that prints which of [`SYSTEM_PATHS`] exist, one a line.
pub fn probe_command() -> String {
    format!(
        "for p in {}; do [ ! -e \"$p\" ] || printf '%s\\n' \"$p\"; done",
        SYSTEM_PATHS.join(" ")
    )
}

/// The paths of [`SYSTEM_PATHS`] named in `output` (what [`probe_command`] printed), in the
/// list's order; anything else in the output is ignored.
pub fn existing_paths(output: &str) -> Vec<String> {
    let named: Vec<&str> = output.lines().map(str::trim).collect();
    SYSTEM_PATHS
        .iter()
        .filter(|p| named.contains(p))
        .map(|p| p.to_string())
        .collect()
}

/// The helper container of one job: the root image kept alive by the instance's `sh`, the
/// job's directories writable as the build container sees them (`job_binds`, see
/// [`super::spec::job_binds`]), `system` read-only.
pub fn helper_container(
    job_binds: &[String],
    system: &[String],
    labels: &JobLabels,
    cgroup_parent: Option<String>,
) -> ContainerCreateBody {
    let mut binds: Vec<String> = system.iter().map(|p| format!("{p}:{p}:ro")).collect();
    binds.extend(job_binds.iter().cloned());
    ContainerCreateBody {
        image: Some(ROOT_IMAGE.to_string()),
        entrypoint: Some(vec!["/bin/sh".into(), "-c".into()]),
        cmd: Some(vec![KEEPALIVE.to_string()]),
        env: Some(vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            "HOME=/tmp".into(),
        ]),
        labels: Some(labels.labels(Some(Role::Helper))),
        tty: Some(false),
        open_stdin: Some(false),
        host_config: Some(HostConfig {
            binds: Some(binds),
            network_mode: Some("host".into()),
            readonly_rootfs: Some(true),
            tmpfs: Some(HashMap::from([(
                "/tmp".to_string(),
                "rw,nosuid,nodev".to_string(),
            )])),
            cap_drop: Some(vec!["ALL".into()]),
            cap_add: Some(KEPT_CAPABILITIES.iter().map(|c| c.to_string()).collect()),
            security_opt: Some(vec!["no-new-privileges".into()]),
            cgroup_parent,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Imports [`ROOT_IMAGE`] (an empty file system) into the daemon unless it is there. Called
/// once per instance connection (the instance's `HelperBase` in `client.rs`), so jobs starting
/// together on a fresh instance do not import it twice: an import retagging the image while
/// another job's helper container started from it broke that container's execs (seen on
/// Docker 20.10).
pub async fn ensure_root_image(docker: &Docker) -> Result<(), String> {
    if docker.inspect_image(ROOT_IMAGE).await.is_ok() {
        return Ok(());
    }
    let (repo, tag) = ROOT_IMAGE.split_once(':').unwrap_or((ROOT_IMAGE, "latest"));
    let options = CreateImageOptions {
        from_src: Some("-".into()),
        repo: Some(repo.into()),
        tag: Some(tag.into()),
        changes: vec!["LABEL flotilla.managed=true".into()],
        ..Default::default()
    };
    // An empty tar archive: two zero blocks.
    let body = bytes::Bytes::from(vec![0u8; 1024]);
    let mut stream = docker.create_image(Some(options), Some(bollard::body_full(body)), None);
    while let Some(step) = stream.next().await {
        step.map_err(|e| format!("importing the helper container's empty root image: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> JobLabels {
        JobLabels {
            owner: "o".into(),
            job_id: 7,
            slot: 2,
            env_id: "0123456789abcdef".into(),
            manager: super::super::labels::Manager {
                host: "h".into(),
                pid: 1,
            },
        }
    }

    #[test]
    fn only_the_slot_directory_is_writable() {
        let body = helper_container(
            &["/builds/2/.project-7:/builds/2".to_string()],
            &["/usr".into(), "/etc/ssl".into()],
            &labels(),
            None,
        );
        let host = body.host_config.unwrap();
        assert_eq!(
            host.binds.unwrap(),
            vec![
                "/usr:/usr:ro",
                "/etc/ssl:/etc/ssl:ro",
                "/builds/2/.project-7:/builds/2"
            ]
        );
        assert_eq!(host.readonly_rootfs, Some(true));
        assert_eq!(host.cap_drop.unwrap(), vec!["ALL"]);
        assert_eq!(host.security_opt.unwrap(), vec!["no-new-privileges"]);
        assert_eq!(host.privileged, None);
        assert_eq!(
            body.labels
                .unwrap()
                .get("flotilla.role")
                .map(String::as_str),
            Some("helper")
        );
    }

    #[test]
    fn the_probe_keeps_only_listed_paths() {
        assert_eq!(
            existing_paths("/usr\n/etc/shadow\n/lib64\n\n/etc/ssl\n"),
            vec!["/usr", "/lib64", "/etc/ssl"]
        );
        assert!(
            !SYSTEM_PATHS
                .iter()
                .any(|p| p.contains("shadow") || p.ends_with("/ssh"))
        );
    }
}
