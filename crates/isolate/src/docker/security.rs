//! `[runners.docker]`'s security settings, applied to the job's containers as GitLab Runner
//! applies them (gitlab-runner `executors/docker/docker.go`: `createHostConfig` for the build
//! container, `createHostConfigForService` for services):
//!
//! - the build container is privileged when `privileged` is set and its image matches
//!   `allowed_privileged_images` (empty: every image); it gets `cap_add`, `cap_drop`,
//!   `security_opt`, `devices` and `userns_mode`;
//! - a service is privileged when `services_privileged` (else `privileged`) is set and its
//!   image matches `allowed_privileged_services`; it gets `services_security_opt` and
//!   `userns_mode`, and no capabilities or devices of the build container's.

use super::allowed::AllowedImages;

/// A host device given to the build container (`PathOnHost[:PathInContainer[:Permissions]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceMapping {
    /// The device on the instance.
    pub path_on_host: String,
    /// Where the container sees it (default: the same path).
    pub path_in_container: String,
    /// The cgroup permissions (default `rwm`, as `docker run`'s).
    pub cgroup_permissions: String,
}

/// A `devices` entry that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed to parse device string {device:?}: {reason}")]
pub struct DeviceError {
    /// The entry as written.
    pub device: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl DeviceMapping {
    /// Parses a `devices` entry as GitLab Runner's `parseDeviceString` does.
    pub fn parse(device: &str) -> Result<DeviceMapping, DeviceError> {
        let parts: Vec<&str> = device.split(':').collect();
        if parts.len() > 3 {
            return Err(DeviceError {
                device: device.to_string(),
                reason: "too many colons",
            });
        }
        if parts[0].is_empty() {
            // GitLab passes this to Docker, which refuses the container; say it at start.
            return Err(DeviceError {
                device: device.to_string(),
                reason: "no path on the host",
            });
        }
        Ok(DeviceMapping {
            path_on_host: parts[0].to_string(),
            path_in_container: parts.get(1).unwrap_or(&parts[0]).to_string(),
            cgroup_permissions: parts.get(2).unwrap_or(&"rwm").to_string(),
        })
    }
}

/// What the runner allows and adds to the job's containers.
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// `privileged`.
    pub privileged: bool,
    /// `services_privileged`: overrides `privileged` for services when set.
    pub services_privileged: Option<bool>,
    /// `allowed_privileged_images`: the build images that may run privileged (empty: all).
    pub allowed_privileged_images: AllowedImages,
    /// `allowed_privileged_services`: the service images that may run privileged (empty: all).
    pub allowed_privileged_services: AllowedImages,
    /// `cap_add`: capabilities added to the build container.
    pub cap_add: Vec<String>,
    /// `cap_drop`: capabilities dropped from the build container.
    pub cap_drop: Vec<String>,
    /// `security_opt`: the build container's security options (`seccomp=...`, ...).
    pub security_opt: Vec<String>,
    /// `services_security_opt`: the services' security options.
    pub services_security_opt: Vec<String>,
    /// `devices`: host devices given to the build container.
    pub devices: Vec<DeviceMapping>,
    /// `userns_mode`: the user namespace mode of every container of the job.
    pub userns_mode: Option<String>,
    /// `user`: the build container's user, ahead of the job's `image:docker:user`.
    pub user: Option<String>,
    /// `allowed_users`: the users the build container may run as (empty: only `user`).
    pub allowed_users: Vec<String>,
}

impl Security {
    /// The build container's user for a job whose image asks for `job_user` (empty: the
    /// image's own), as GitLab Runner's `getBuildContainerUser` and `IsUserAllowed` decide:
    /// the runner's `user` comes first; the image's default user is always allowed; with
    /// neither `user` nor `allowed_users` any user is; otherwise the user must be in
    /// `allowed_users`, or be `user` when that list is empty. A refusal is GitLab's message.
    pub fn build_user(&self, job_user: &str) -> Result<String, String> {
        let user = match self.user.as_deref().filter(|u| !u.is_empty()) {
            Some(u) => u,
            None => job_user,
        };
        if user.is_empty() {
            return Ok(String::new());
        }
        let allowed: Vec<&str> = if self.allowed_users.is_empty() {
            self.user
                .as_deref()
                .filter(|u| !u.is_empty())
                .into_iter()
                .collect()
        } else {
            self.allowed_users.iter().map(String::as_str).collect()
        };
        if allowed.is_empty() || allowed.contains(&user) {
            Ok(user.to_string())
        } else {
            Err(format!(
                "user {user:?} is not an allowed user: [{}]",
                allowed.join(" ")
            ))
        }
    }

    /// Whether the build container of `image` runs privileged.
    pub fn build_privileged(&self, image: &str) -> bool {
        self.privileged && self.allowed_privileged_images.allows(image)
    }

    /// Whether the service of `image` runs privileged.
    pub fn service_privileged(&self, image: &str) -> bool {
        self.services_privileged.unwrap_or(self.privileged)
            && self.allowed_privileged_services.allows(image)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(p: &[&str]) -> AllowedImages {
        AllowedImages::new(&p.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn devices_parse_as_gitlab_runner_parses_them() {
        assert_eq!(
            DeviceMapping::parse("/dev/kvm").unwrap(),
            DeviceMapping {
                path_on_host: "/dev/kvm".into(),
                path_in_container: "/dev/kvm".into(),
                cgroup_permissions: "rwm".into(),
            }
        );
        let d = DeviceMapping::parse("/dev/fuse:/dev/f:r").unwrap();
        assert_eq!(
            (d.path_in_container.as_str(), d.cgroup_permissions.as_str()),
            ("/dev/f", "r")
        );
        let e = DeviceMapping::parse("/a:/b:r:x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to parse device string \"/a:/b:r:x\": too many colons"
        );
    }

    #[test]
    fn privilege_needs_the_setting_and_a_listed_image() {
        let s = Security {
            privileged: true,
            allowed_privileged_images: list(&["docker:*-dind"]),
            ..Security::default()
        };
        assert!(s.build_privileged("docker:27-dind"));
        assert!(!s.build_privileged("alpine:3"));
        // Services follow `privileged` and their own list (empty: all).
        assert!(s.service_privileged("anything"));
        let s = Security {
            services_privileged: Some(false),
            ..s
        };
        assert!(!s.service_privileged("docker:27-dind"));
        let off = Security::default();
        assert!(!off.build_privileged("docker:27-dind"));
        assert!(!off.service_privileged("docker:27-dind"));
        let services_only = Security {
            services_privileged: Some(true),
            allowed_privileged_services: list(&["docker:*"]),
            ..Security::default()
        };
        assert!(services_only.service_privileged("docker:dind"));
        assert!(!services_only.service_privileged("postgres"));
        assert!(!services_only.build_privileged("docker:dind"));
    }

    /// GitLab's `IsUserAllowed` cases.
    #[test]
    fn the_build_user_as_gitlab_decides_it() {
        let open = Security::default();
        assert_eq!(open.build_user(""), Ok(String::new()));
        assert_eq!(open.build_user("1000"), Ok("1000".into()));
        let pinned = Security {
            user: Some("ci".into()),
            ..Security::default()
        };
        assert_eq!(
            pinned.build_user("root"),
            Ok("ci".into()),
            "the runner's user first"
        );
        let listed = Security {
            allowed_users: vec!["1000".into(), "ci".into()],
            ..Security::default()
        };
        assert_eq!(
            listed.build_user(""),
            Ok(String::new()),
            "the image's default user"
        );
        assert_eq!(listed.build_user("ci"), Ok("ci".into()));
        assert_eq!(
            listed.build_user("root"),
            Err("user \"root\" is not an allowed user: [1000 ci]".into())
        );
    }
}
