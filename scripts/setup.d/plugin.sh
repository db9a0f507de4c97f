#!/usr/bin/env bash
# The plugin provider's judges (crates/providers/plugin): a go-plugin plugin built offline
# from Debian's Go packages (GOPATH mode), and the example plugin in Python (grpcio).
# Idempotent; run by scripts/setup.sh with $SUDO set (empty as root).
set -euo pipefail

log() { printf '[setup plugin] %s\n' "$*" >&2; }
SUDO="${SUDO-}"

PACKAGES=(
  golang-go                               # go 1.19: builds the go-plugin peer
  golang-github-hashicorp-go-plugin-dev   # hashicorp/go-plugin 1.0.1 sources
  golang-google-grpc-dev                  # its gRPC
  golang-google-protobuf-dev
  golang-github-hashicorp-go-hclog-dev
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# The Python example needs grpcio and grpcio-tools in the python3 the tests run. Debian's
# packages serve Debian's python3; a python3 from elsewhere (pyenv) gets them from PyPI.
py_ok() { python3 -c 'import grpc, grpc_tools.protoc' >/dev/null 2>&1; }
py_is_debian() { [ "$(command -v python3)" = /usr/bin/python3 ]; }
if ! py_ok && py_is_debian; then
  for p in python3-grpcio python3-grpc-tools; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
fi

if [ ${#missing[@]} -gt 0 ]; then
  log "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! py_ok; then
  log "installing grpcio and grpcio-tools from PyPI for $(command -v python3)"
  python3 -m pip install --quiet grpcio grpcio-tools
fi
py_ok || { log "python3 still cannot import grpc and grpc_tools"; exit 1; }

go version >/dev/null
test -f /usr/share/gocode/src/github.com/hashicorp/go-plugin/grpc_server.go
log "go-plugin peer and python grpc ready"
