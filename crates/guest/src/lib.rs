//! flotilla's agent in microVMs and VMs, and how the host reaches it.
//!
//! - [`AGENT`]: the agent, a static Linux x86-64 executable built from `agent/` by this
//!   crate's build script and embedded here, so a flotilla always carries the agent that
//!   speaks its protocol. In a VM it is the initramfs's `/init`: it loads the virtio
//!   modules, mounts the job's root file system, moves into it and serves the host on a
//!   virtio-serial port (or vsock).
//! - [`protocol`]: the wire format, shared word for word with the agent.
//! - [`GuestConnector`]: a [`flotilla_connect::Connector`] into the guest, over a stream the
//!   caller dials (normally the instance connector's `forward` to the VM's agent socket:
//!   manager → instance → guest). It carries `exec` with streamed stdout and stderr,
//!   `dial_stdio`, `forward` (TCP and unix sockets in the guest), terminals for interactive
//!   shells, and the agent's own operations.

#![warn(missing_docs)]

mod connector;
pub mod protocol;
mod session;
mod stream;

pub use connector::{Dialer, GuestConnector, Terminal};
pub use session::SessionInfo;

/// The agent executable.
pub static AGENT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/flotilla-guest-agent"));

/// The SHA-256 of [`AGENT`] in hex: names cached copies of it (and of initramfs images
/// holding it) on instances.
pub fn agent_sha256() -> &'static str {
    static HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HASH.get_or_init(|| {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(AGENT))
    })
}
