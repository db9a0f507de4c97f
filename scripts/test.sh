#!/usr/bin/env bash
# The whole test suite, as README.md gives it and .ci/run calls it:
# installs what the tests need (scripts/setup.sh), builds the offline test images,
# checks formatting and lints, then runs every test of every crate with all features.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# One build from scratch: incremental compilation would only cost disk (about 15 GB here).
export CARGO_INCREMENTAL=0

log() { printf '\n[test] %s\n' "$*" >&2; }

log "setting up infrastructure"
scripts/setup.sh

log "building offline test images"
scripts/build-images.sh busybox >/dev/null
scripts/build-images.sh instance >/dev/null
scripts/build-vm-image.sh >/dev/null

log "cargo fmt --check"
cargo fmt --all -- --check

log "cargo clippy"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings

log "cargo nextest"
cargo nextest run --workspace --all-features --locked --profile ci "$@"

log "doc tests"
cargo test --workspace --all-features --locked --doc

log "all tests passed"
