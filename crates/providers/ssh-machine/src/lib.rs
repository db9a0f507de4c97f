//! What the providers of machines reached over SSH (`static` hosts, `qemu` VMs) share.
//!
//! - [`ssh_banner`]: the cheap probe that tells whether sshd itself answers at an address.
//! - [`GroupKey`]: an ed25519 key pair for a group, generated once and kept in a file, whose
//!   public half a provider installs in the machines it makes and whose private half it hands
//!   out in `ConnectInfo`; also used to check a user's private key when the configuration is
//!   read, rather than at the first connection.
//!
//! This crate is not a provider: it has no `PLUGIN` and is not in the registry.

mod key;
mod probe;

pub use key::GroupKey;
pub use probe::{ProbeError, ssh_banner};
