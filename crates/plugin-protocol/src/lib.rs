//! What flotilla and its provider plugins say to each other.
//!
//! A plugin is a separate program that serves an instance group over gRPC. Around the
//! service, the process protocol is hashicorp go-plugin's, the convention of fleeting,
//! Terraform, Packer and Vault ([`handshake`]: the magic-cookie environment and the one
//! handshake line; [`pb::go_plugin`]: the controller and stdio services; the gRPC health
//! service `plugin`; [`mtls`]: go-plugin's AutoMTLS). The service itself,
//! [`pb::instance_group`], is flotilla's own: it mirrors the `InstanceGroup` trait of
//! `flotilla-fleet`. fleeting's own `.proto` could not be obtained, so this is *not* a
//! fleeting-compatible service; a fleeting-compatible module can be added beside
//! [`pb::instance_group`] (with its own cookie and app version) once that proto is known.
//!
//! [`convert`] maps the fleet types to the messages and back, [`status`] maps errors to
//! gRPC status codes and back. Both the host (`flotilla-provider-plugin`) and the SDK for
//! writing plugins in Rust (`flotilla-plugin-sdk`) use this crate, so they cannot drift apart.

pub mod convert;
pub mod handshake;
pub mod io;
pub mod mtls;
pub mod pb;
pub mod status;

pub use handshake::{Handshake, HandshakeError, Network};
