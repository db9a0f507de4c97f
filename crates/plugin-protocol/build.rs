//! Generates the gRPC code of go-plugin's services and flotilla's InstanceGroup service with
//! the `protoc` that the protoc-bin-vendored crate ships, so building needs no system protoc.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let includes = protoc_bin_vendored::include_path()?;
    // SAFETY: a build script is one thread; nothing else reads the environment concurrently.
    unsafe { std::env::set_var("PROTOC", protoc) };
    let protos = [
        "proto/go_plugin/grpc_controller.proto",
        "proto/go_plugin/grpc_stdio.proto",
        "proto/flotilla/instance_group.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let roots = [PathBuf::from("proto"), includes];
    tonic_prost_build::configure().compile_protos(&protos.map(PathBuf::from), &roots)?;
    Ok(())
}
