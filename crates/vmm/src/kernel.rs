//! The guest kernel and its modules, found on the instance (Debian's cloud kernel by
//! default: `/boot/vmlinuz-*` and `/lib/modules/<release>`).

use crate::{VmmError, host};
use flotilla_connect::Connector;

/// A kernel on the instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    /// The image (`/boot/vmlinuz-6.1.0-56-cloud-amd64`).
    pub path: String,
    /// Its release (`6.1.0-56-cloud-amd64`), naming its modules directory.
    pub release: String,
}

impl Kernel {
    /// The kernel at `path`, its release taken from the file name (`vmlinuz-<release>`).
    pub fn at(path: &str) -> Result<Kernel, VmmError> {
        let name = path.rsplit('/').next().unwrap_or(path);
        let release = name
            .strip_prefix("vmlinuz-")
            .filter(|r| !r.is_empty())
            .ok_or_else(|| {
                VmmError::Missing(format!(
                    "cannot tell the release of kernel {path}: name it vmlinuz-<release>"
                ))
            })?;
        Ok(Kernel {
            path: path.to_string(),
            release: release.to_string(),
        })
    }

    /// Its modules directory.
    pub fn modules_dir(&self) -> String {
        format!("/lib/modules/{}", self.release)
    }
}

/// A release as a sortable key: runs of digits as numbers, the rest as text.
type VersionKey = Vec<(u64, String)>;

/// Orders kernel releases as versions (`6.1.0-9` before `6.1.0-56`).
fn version_key(release: &str) -> VersionKey {
    let mut key = Vec::new();
    let mut num = String::new();
    let mut text = String::new();
    for c in release.chars() {
        if c.is_ascii_digit() {
            if !text.is_empty() {
                key.push((0, std::mem::take(&mut text)));
            }
            num.push(c);
        } else {
            if !num.is_empty() {
                key.push((num.parse().unwrap_or(u64::MAX), String::new()));
                num.clear();
            }
            text.push(c);
        }
    }
    if !num.is_empty() {
        key.push((num.parse().unwrap_or(u64::MAX), String::new()));
    }
    if !text.is_empty() {
        key.push((0, text));
    }
    key
}

/// The newest of `paths` (`/boot/vmlinuz-*`), cloud kernels first (they boot fastest and are
/// what the guest's module list is written for).
pub fn newest(paths: &[String]) -> Option<String> {
    let mut best: Option<(bool, VersionKey, &String)> = None;
    for p in paths {
        let Ok(k) = Kernel::at(p) else { continue };
        let cand = (k.release.contains("cloud"), version_key(&k.release), p);
        if best
            .as_ref()
            .is_none_or(|b| (cand.0, &cand.1) > (b.0, &b.1))
        {
            best = Some(cand);
        }
    }
    best.map(|b| b.2.clone())
}

/// The kernel to boot: `configured`, or the newest `/boot/vmlinuz-*` of the instance.
pub async fn find(host: &dyn Connector, configured: Option<&str>) -> Result<Kernel, VmmError> {
    if let Some(path) = configured {
        return Kernel::at(path);
    }
    let out = host::run(
        host,
        "listing /boot",
        "ls -1 /boot/vmlinuz-* 2>/dev/null || true",
    )
    .await?;
    let paths: Vec<String> = out.lines().map(str::to_string).collect();
    let path = newest(&paths).ok_or_else(|| {
        VmmError::Missing(
            "no kernel in /boot of the instance (install linux-image-cloud-amd64)".into(),
        )
    })?;
    Kernel::at(&path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_come_from_file_names() {
        let k = Kernel::at("/boot/vmlinuz-6.1.0-56-cloud-amd64").unwrap();
        assert_eq!(k.release, "6.1.0-56-cloud-amd64");
        assert_eq!(k.modules_dir(), "/lib/modules/6.1.0-56-cloud-amd64");
        assert!(Kernel::at("/boot/bzImage").is_err());
    }

    #[test]
    fn the_newest_cloud_kernel_wins() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            newest(&v(&[
                "/boot/vmlinuz-6.1.0-9-cloud-amd64",
                "/boot/vmlinuz-6.1.0-56-cloud-amd64",
                "/boot/vmlinuz-6.1.0-10-cloud-amd64",
            ]))
            .as_deref(),
            Some("/boot/vmlinuz-6.1.0-56-cloud-amd64")
        );
        assert_eq!(
            newest(&v(&[
                "/boot/vmlinuz-6.5.0-1-amd64",
                "/boot/vmlinuz-6.1.0-56-cloud-amd64",
            ]))
            .as_deref(),
            Some("/boot/vmlinuz-6.1.0-56-cloud-amd64")
        );
        assert_eq!(newest(&[]), None);
    }
}
