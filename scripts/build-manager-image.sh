#!/usr/bin/env bash
# Builds the flotilla manager's container image offline, from this repository's
# packaging/container/Dockerfile and a flotilla binary, and prints its reference.
#
#   scripts/build-manager-image.sh [BINARY] [TAG]
#
# BINARY defaults to target/release/flotilla (build it with
# `cargo build --release --locked -p flotilla --features full`); TAG to
# local/flotilla-manager:<version>. The image holds the binary, bash (which runs the shell
# level's commands on this host), the shared libraries `ldd` names for both, busybox (sh and
# the few programs the shell level runs: mkdir, rm, tar, ...), the CA certificates and users
# root and flotilla. It has no git: it is a manager for autoscaled fleets, whose instances
# fetch sources; a shell runner inside it takes only GIT_STRATEGY=none jobs. Needs docker and
# busybox-static and tini (scripts/setup.sh installs them).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
binary="${1:-$repo/target/release/flotilla}"
[ -x "$binary" ] || { echo "no flotilla binary at $binary" >&2; exit 1; }
version="$("$binary" --version | awk '{print $2}')"
tag="${2:-local/flotilla-manager:$version}"

context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
root="$context/root"
mkdir -p "$root/usr/local/bin" "$root/bin" "$root/etc/flotilla" "$root/etc/ssl/certs" \
  "$root/var/lib/flotilla" "$root/tmp" "$root/root"
install -m 0755 "$binary" "$root/usr/local/bin/flotilla"
install -m 0755 /bin/bash "$root/bin/bash"
# The shared libraries and the loader, where the programs look for them.
for lib in $(for p in "$binary" /bin/bash; do ldd "$p"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u); do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
cp /bin/busybox "$root/bin/busybox"
# PID 1: flotilla as PID 1 would never reap the orphans of the jobs it runs on this host.
install -D -m 0755 /usr/bin/tini-static "$root/usr/bin/tini"
for applet in $("$root/bin/busybox" --list); do
  [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/bin/sh\nflotilla:x:999:999:flotilla:/var/lib/flotilla:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\nflotilla:x:999:\n' >"$root/etc/group"
chmod 1777 "$root/tmp"
cp "$repo/packaging/container/Dockerfile" "$context/Dockerfile"
docker build -q -t "$tag" "$context" >/dev/null
echo "$tag"
