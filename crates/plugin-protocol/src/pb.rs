//! The generated gRPC code (tonic, prost) of the protocol's services.

/// hashicorp go-plugin's own services (proto package `plugin`): `GRPCController` and
/// `GRPCStdio`. The health service is `grpc.health.v1`, from the `tonic-health` crate.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod go_plugin {
    tonic::include_proto!("plugin");
}

/// flotilla's `InstanceGroup` service, version 1 (`proto/flotilla/instance_group.proto`).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod instance_group {
    tonic::include_proto!("flotilla.instance_group.v1");
}

/// The full gRPC name of flotilla's InstanceGroup service.
pub const INSTANCE_GROUP_SERVICE: &str = "flotilla.instance_group.v1.InstanceGroup";
