//! Builds the guest agent (`agent/main.rs`) with `rustc` alone into `OUT_DIR`: a static
//! executable the library embeds, so every flotilla carries the agent of its own version.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=agent");
    println!("cargo:rerun-if-changed=src/protocol.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    let dest = out.join("flotilla-guest-agent");
    let result = Command::new(rustc)
        .args(["--edition", "2024", "--crate-name", "flotilla_guest_agent"])
        .args(["--target", &target])
        .args(["-C", "opt-level=2", "-C", "target-feature=+crt-static"])
        .args(["-C", "strip=symbols", "-C", "codegen-units=4"])
        .arg("agent/main.rs")
        .arg("-o")
        .arg(&dest)
        .output()
        .expect("running rustc for the guest agent");
    assert!(
        result.status.success(),
        "building the guest agent failed:\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
}
