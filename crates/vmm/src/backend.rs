//! Choosing a backend by name (`qemu`, `firecracker`, `cloud-hypervisor`).

use crate::cloud_hypervisor::CloudHypervisor;
use crate::firecracker::Firecracker;
use crate::qemu::Qemu;
use crate::{Vmm, VmmError};
use std::str::FromStr;

/// The VMMs flotilla can drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// QEMU over QMP: the one tested for real (under TCG).
    Qemu,
    /// Firecracker over its REST API (tested against a fake only; needs KVM).
    Firecracker,
    /// Cloud Hypervisor over its REST API (tested against a fake only; needs KVM).
    CloudHypervisor,
}

impl Backend {
    /// Every backend.
    pub const ALL: [Backend; 3] = [
        Backend::Qemu,
        Backend::Firecracker,
        Backend::CloudHypervisor,
    ];

    /// Its name, as [`Vmm::name`] gives it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Qemu => "qemu",
            Backend::Firecracker => "firecracker",
            Backend::CloudHypervisor => "cloud-hypervisor",
        }
    }

    /// The backend with its defaults (binary found on the instance's `PATH`).
    pub fn vmm(self) -> Box<dyn Vmm> {
        match self {
            Backend::Qemu => Box::new(Qemu::default()),
            Backend::Firecracker => Box::new(Firecracker::default()),
            Backend::CloudHypervisor => Box::new(CloudHypervisor::default()),
        }
    }
}

impl FromStr for Backend {
    type Err = VmmError;

    fn from_str(s: &str) -> Result<Backend, VmmError> {
        Backend::ALL
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| {
                VmmError::Unsupported(format!(
                    "no VMM backend {s:?}: choose one of qemu, firecracker, cloud-hypervisor"
                ))
            })
    }
}

/// The backend called `name`, with its defaults.
pub fn backend(name: &str) -> Result<Box<dyn Vmm>, VmmError> {
    Ok(name.parse::<Backend>()?.vmm())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_backend_is_found_by_its_own_name() {
        for b in Backend::ALL {
            assert_eq!(backend(b.name()).unwrap().name(), b.name());
        }
        let e = backend("kvmtool").unwrap_err();
        assert!(e.to_string().contains("choose one of"), "{e}");
    }
}
